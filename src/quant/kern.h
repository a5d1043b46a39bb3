/*
 * Matrix kernels for prefill: Y = X * W^T over many token rows at once, with quantized weights.
 *
 *   Y[r][n] (+)= sum_k X[rows[r]][k] * W[n][k]      n in [n0, n1), r in [0, n_rows)
 *
 * W is N rows of K weights in GGUF layout (row stride es_qtype_row_bytes(wtype, K)), of type
 * Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4, F16, BF16
 * or F32 (every table has them all). X is first turned into an "act" buffer by
 * es_act_prepare(): for the integer weight types each row is quantized per block of 32 values to
 * int8 with one float scale per block (like Q8_0; per 256 for K-quant weights and IQ4_XS, like
 * Q8_K: llama.cpp's activation format for each type; never per tensor: residual streams reach
 * several hundred), plus per-block sums the kernels need; for float weight types the act holds
 * the floats. The act format is private to the kernel table that prepared it: prepare and
 * multiply with the same table (es_kern_active).
 *
 * DESIGN (how the SIMD kernels are fast): es_gemm() is not a loop of dot products. For each tile
 * of output rows (32 on AVX-512; 16 for AVX2's integer types in rows but Q2_K; otherwise 8) and
 * a K-slice, it decodes the weights ONCE into an interleaved int8 (or float) operand layout in
 * the caller's per-thread scratch buffer (sized from the L2 that es_cpu_get() reports), then runs
 * a register-blocked micro-kernel over every token row of the call with that tile: on AVX-512
 * VNNI, vpdpbusd with 16 output rows in the 16 lanes of a zmm, two zmm per tile, 4 activation bytes broadcast once for both, 6 tokens per
 * register block, an int32 sum per block of 32, then one float scale-and-accumulate per block.
 * Decoding once per tile and reusing it across all rows is what makes the unpack cost small
 * (measured on the bench machine: ~4 % of the GEMM at 128 rows, ~30 % at 16). bench/README.md
 * has the numbers and what limits them. The amx table (x86_amx.c) decodes the same AVX-512 way
 * into AMX tile operands and runs tdpbssd on blocks of 16 token rows, one product per block of
 * 32 k, then the same float scale-and-accumulate; calls of fewer than 16 rows use avx512's.
 *
 * Determinism: every Y element is reduced over k in one fixed order (block by block, increasing
 * k; within a block the integer sum is exact), with the same float operations whatever the split
 * of [0, N) into [n0, n1) ranges, the number or order of rows, the gather list or the K-slice
 * size. So results are bit-identical across thread counts and row orders for one kernel table.
 * The SIMD tables do the scalar table's float operations in the same order, so all tables agree
 * bit for bit, and test_kern holds every table to it (a faster kernel that changes an output
 * is a bug). The amx table's int32 block sums are exact whatever engine computes them, and its
 * float work is avx512's.
 *
 * Thread-safety: es_kern_init() writes es_kern_active and must run before other threads use the
 * kernels (es_gemm etc. call it with NULL on first use if nobody did). Everything else is
 * reentrant; es_gemm() calls on disjoint [n0, n1) ranges (or disjoint Y) may run concurrently
 * with their own scratch buffers.
 */
#ifndef ES_KERN_H
#define ES_KERN_H

#include "quant/qtypes.h"
#include "quant/tiles.h"

#include <string.h>

/* Per-type operations of one kernel table. NULL entries: type not supported by any table. */
typedef struct es_kern_ops {
    /* Bytes of one prepared activation row of K values (a multiple of 64). */
    size_t (*act_row_bytes)(int64_t K);
    /* Prepares n_rows rows: X rows of K floats at stride ldx floats -> act rows (consecutive, each
     * act_row_bytes(K), act 64-byte aligned). */
    void (*act_prepare)(const float *X, int64_t ldx, int64_t n_rows, int64_t K, void *act);
    /* See es_gemm(). */
    void (*gemm)(const void *W, int64_t K, int64_t n0, int64_t n1, const void *act,
                 const int32_t *rows, int64_t n_rows, float *Y, int64_t ldy, int accumulate,
                 void *scratch);
    /* Bytes of per-thread scratch es_gemm() and es_gemm_tiled() need for rows of K weights. */
    size_t (*scratch_bytes)(int64_t K);
    /* See es_gemm_tiled(). NULL: the type has no tile layout (quant/tiles.h). */
    void (*gemm_tiled)(const void *W, int64_t K, int64_t N, int64_t n0, int64_t n1,
                       const void *act, const int32_t *rows, int64_t n_rows, float *Y,
                       int64_t ldy, int accumulate, void *scratch);
} es_kern_ops;

typedef struct es_kern {
    const char *isa;                /* one of es_kern_isa_names */
    /* The integer products pack each call's token rows into their operand layout first, once
     * per row group and K-slice of the call (amx): a caller that splits one product into column
     * chunks should make them wide, since each chunk packs the same rows again (moe/plan.c). */
    bool wide_calls;
    es_kern_ops op[ES_QTYPE_COUNT]; /* indexed by es_qtype */
    /* Element-wise steps of the fast path (vec_<isa>.c). Each element's result depends only on
     * its inputs (SIMD tails use masks or padding, never a different formula), so splitting an
     * array across threads does not change any value. */
    void (*swiglu)(float *g, const float *u, int64_t n);        /* g[i] = silu(g[i]) * u[i] */
    /* gpt-oss's clamped SwiGLU: x = min(g[i], 7), g[i] = x sigmoid(1.702 x) (clamp(u[i], -7, 7) + 1) */
    void (*glu_oai)(float *g, const float *u, int64_t n);
    void (*axpy)(float *y, float a, const float *x, int64_t n); /* y[i] += a * x[i] */
    /* x[i] = exp(x[i] - sub) for i < n; returns their sum (reduced in a fixed order for n). */
    float (*exp_sum)(float *x, float sub, int64_t n);
    /* x[i] *= s; returns max(x[i]) (-inf for n = 0). */
    float (*scale_max)(float *x, float s, int64_t n);
    /* out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]; out may be x. */
    void (*rmsnorm)(float *out, const float *x, const float *w, int64_t n, float eps);
} es_kern;

/* The kernel tables, in the order es_kern_init() prefers them (last = best): "scalar", "avx2"
 * (AVX2 + FMA + F16C), "avxvnni" (that + VEX vpdpbusd), "avx512" (AVX-512 F/BW/VL/DQ + VNNI),
 * "amx" (that + AMX-TILE/AMX-INT8 tiles for the integer products of 16 rows or more), "asimd"
 * (AArch64 Advanced SIMD: smull + sadalp), "neon" (that + dotprod sdot), "i8mm" (that + smmla).
 * One list for every architecture: another architecture's tables are never available. */
#define ES_KERN_N_ISA 8
extern const char *const es_kern_isa_names[ES_KERN_N_ISA + 1]; /* NULL-terminated */

/* The table es_gemm() & co. use. Written only by es_kern_init(); read-only afterwards. */
extern es_kern es_kern_active;

/* Fills the active table with the best ISA this CPU has, or the one force names (one of
 * es_kern_isa_names). force NULL: the value of the environment variable ESTREAM_ISA, if set and
 * not empty. An unknown name, or an ISA this CPU (or OS) lacks, logs a warning and falls back to
 * the best available ISA not above the request. Returns the ISA chosen (a static string). */
const char *es_kern_init(const char *force);

/* Name of the active ISA (one of es_kern_isa_names); initializes the table if needed. */
const char *es_kern_isa_name(void);

/* True if this CPU and OS can run the named ISA's kernels. */
bool es_kern_isa_available(const char *isa);

/* NULL if es_kern_isa_available(isa); else why not, as a static sentence ("this CPU reports no
 * AMX-TILE and AMX-INT8 ..."; an unknown name too). */
const char *es_kern_isa_why_not(const char *isa);

/* Tests only: the C emulation of the tile instructions (x86_amx.c built with ES_AMX_EMULATE,
 * linked into test programs alone) registers its fill here before main. The dispatcher then
 * offers "amx" on a CPU without AMX (with AVX-512) when asked for by name, never as the
 * default; where the CPU has AMX the real table is used. */
void es_kern_amx_register_emulation(void (*fill)(es_kern *k));
/* True if the "amx" table of this process runs on the emulation (for the tests' messages). */
bool es_kern_amx_emulated(void);

/* Tests only: the avx512 and amx tables built a further time on AVX2 (x86_avx512.c,
 * vec_avx512.c and x86_amx.c with ES_AVX512_EMULATE: quant/avx512_emu.h stands in for the
 * AVX-512 instructions, amx_ops.h's C emulation for the tiles) register their three fills here
 * before main. On a CPU with AVX2 but no AVX-512 the dispatcher then offers "avx512" and "amx"
 * when asked for by name, never as the default; where the CPU has AVX-512 its real instructions
 * run (and the tiles' emulation above, or the real tiles). */
void es_kern_avx512_register_emulation(void (*kern)(es_kern *k), void (*vec)(es_kern *k),
                                       void (*amx)(es_kern *k));
/* True if the "avx512" table of this process runs on that emulation (for the tests' messages). */
bool es_kern_avx512_emulated(void);

/* Fills *k with the named ISA's table (for tests and benchmarks that compare ISAs). Returns false
 * (and leaves *k untouched) if the name is unknown or the ISA is not available. */
bool es_kern_get(const char *isa, es_kern *k);

/* Fills for each ISA. Each starts from the table it is given and overrides the entries it
 * implements, so call es_kern_fill_scalar() first. Only call an ISA's fill if it is available. */
void es_kern_fill_scalar(es_kern *k);
void es_kern_fill_avx2(es_kern *k);
void es_kern_fill_avxvnni(es_kern *k);
void es_kern_fill_avx512(es_kern *k);
void es_kern_fill_amx(es_kern *k); /* on top of the avx512 table */
void es_kern_fill_asimd(es_kern *k);
void es_kern_fill_neon(es_kern *k);
void es_kern_fill_i8mm(es_kern *k);
void es_vec_fill_scalar(es_kern *k);
void es_vec_fill_avx2(es_kern *k);
void es_vec_fill_avx512(es_kern *k);
void es_vec_fill_neon(es_kern *k);

/* ---- the calls the engine makes, through a table it holds ------------------------------------
 * Each takes the kernel table k to use: a session keeps its own copy (es_kern_get), so two
 * sessions may use different tables, and an act buffer is always prepared and consumed by the
 * same table. Element-wise steps are called through the table directly (k->swiglu(...)). */

/* The process default table (es_kern_active, initialized on first use). */
const es_kern *es_kern_default(void);

/* True if es_gemm() supports weights of this type. */
bool es_kern_supports(const es_kern *k, uint32_t wtype);

/* Bytes of one activation row, and of n_rows rows. Row r of an act buffer starts at
 * act + r * es_act_row_bytes(k, wtype, K), so row ranges may be prepared separately (by different
 * threads) by offsetting X and act. Integer weight types need K % 32 == 0. */
size_t es_act_row_bytes(const es_kern *k, uint32_t wtype, int64_t K);
size_t es_act_bytes(const es_kern *k, uint32_t wtype, int64_t n_rows, int64_t K);

/* Prepares activations for weights of wtype: X is n_rows rows of K floats, row r at X + r*ldx.
 * act must be 64-byte aligned and es_act_bytes() long. */
void es_act_prepare(const es_kern *k, uint32_t wtype, const float *X, int64_t ldx, int64_t n_rows,
                    int64_t K, void *act);

/* Replaces x[0..n) by the values llama.cpp's products with weights of wtype see: quantized and
 * dequantized in its activation format (Q8_0 per 32 for 32-element blocks, Q8_K per 256 for
 * K-quants), rounded to F16 / BF16 for those, unchanged for F32. Where estream computes a product
 * in another order than llama.cpp (MLA's decompressed keys), rounding the activations this way
 * keeps its numbers. n must be a multiple of wtype's block. */
void es_act_round(uint32_t wtype, float *x, int64_t n);

/* Per-thread scratch bytes for es_gemm() with rows of K weights (sized from the caches that
 * es_cpu_get() reports). The scratch must be 64-byte aligned. */
size_t es_gemm_scratch_bytes(const es_kern *k, uint32_t wtype, int64_t K);

/*
 * Y[r*ldy + n] = (accumulate ? Y[r*ldy + n] : 0) + sum_k X[rows ? rows[r] : r][k] * W[n][k]
 * for n in [n0, n1) and r in [0, n_rows).
 *   W        the whole weight matrix (row n at W + n * es_qtype_row_bytes(wtype, K))
 *   act      prepared rows (es_act_prepare with the same k); rows[] indexes them (NULL:
 *            0..n_rows-1), and may repeat and be in any order
 *   Y        output, row r at Y + r*ldy; only Y[r*ldy + n] for n in [n0, n1) is read or written
 *   scratch  es_gemm_scratch_bytes(k, wtype, K) bytes, 64-byte aligned, owned by the calling thread
 * The per-element result does not depend on n0, n1, n_rows, the order of rows or the thread that
 * computes it (see DESIGN above). When accumulating, the old value starts the k-reduction.
 */
void es_gemm(const es_kern *k, uint32_t wtype, const void *W, int64_t K, int64_t n0, int64_t n1,
             const void *act, const int32_t *rows, int64_t n_rows, float *Y, int64_t ldy,
             int accumulate, void *scratch);

/* True if es_gemm_tiled() supports weights of this type (Q4_0, Q8_0 and F32 in every table). */
bool es_kern_supports_tiled(const es_kern *k, uint32_t wtype);

/*
 * es_gemm() on a matrix in the tile layout of quant/tiles.h: the same Y, bit for bit, as es_gemm()
 * with the same table on the same matrix in GGUF rows (the kernels do the same integer and float
 * operations in the same order; only where the weights are read from differs). N is the matrix's
 * row count (the last tile may be short); 0 <= n0 <= n1 <= N, any values (the plan's column
 * chunks are multiples of the 32-row tile; other ranges compute whole tiles and store only
 * [n0, n1)). act, rows, Y, accumulate and scratch (es_gemm_scratch_bytes()) as for es_gemm().
 */
void es_gemm_tiled(const es_kern *k, uint32_t wtype, const void *W, int64_t K, int64_t N,
                   int64_t n0, int64_t n1, const void *act, const int32_t *rows, int64_t n_rows,
                   float *Y, int64_t ldy, int accumulate, void *scratch);

/* ---- shared by the kernel tables (not for engine code) ------------------------------------ */

/*
 * Activation rows for the integer weight types, all ISAs (K % 32 == 0, nb = K/32 blocks):
 *   int8  q[K]          x / d rounded to nearest even, |q| <= 127
 *   float d[nb]         block scale: max|x| / 127 rounded to F16 (0 for an all-zero block;
 *                       es_act_q8_scale); q is x * (127 / max|x|) rounded. For K-quant
 *                       weights (Q2_K..Q6_K) and IQ4_XS the max and the scale are taken over
 *                       each 256 values and repeated in its 8 blocks, as a float 1 / (127 / max).
 *                       Both are llama.cpp's activation formats (Q8_0 and Q8_K) to the bit: its
 *                       rounding errors are then the ones estream makes, and the logits of a
 *                       quantized file agree with llama.cpp's far more closely than exact
 *                       per-32 float scales would (measured in test_forward).
 *   float ds[nb]        d * sum(q) of the block (the K-quant min term uses it)
 *   int32 c[nb]         c_mult * sum(q): the correction the ISA's weight encoding needs
 *   int32 c2[nb][2]     c2_mult * sum(q) over each half (16 values) of the block (Q6_K)
 * then zero padding to a multiple of 64 bytes. q, d and ds are bit-identical across ISAs.
 */
/* The block scale for max |x| = amax: amax / 127 rounded to F16, as llama.cpp stores Q8_0
 * activations, while F16 holds it as a normal number; outside that range (amax below about 0.008
 * or above 8e6, where F16 would lose precision or overflow) the float itself. */
static inline float es_act_q8_scale(float amax)
{
    const float d = amax / 127.0f;
    return d >= 0x1p-14f && d <= 65504.0f ? es_f16_to_f32(es_f32_to_f16(d)) : d;
}

/* One group of gb blocks of 32 with max |x| = amax: sets *id to the multiplier that quantizes
 * it (127 / amax) and returns the scale stored in each of its blocks' d: for gb = 1 llama.cpp's
 * Q8_0 (es_act_q8_scale), for gb = 8 its Q8_K (the float 1 / id). 0 for an all-zero group. Every
 * table's preparation calls this, so their d and q stay bit-identical. */
static inline float es_act_group_scale(float amax, int gb, float *id)
{
    *id = amax != 0.0f ? 127.0f / amax : 0.0f;
    if (gb == 1) return es_act_q8_scale(amax);
    return amax != 0.0f ? 1.0f / *id : 0.0f;
}

/* llama.cpp's Q8_1 block sum, which Q4_1 / Q5_1 weights' mins multiply: d * sum(q) with d the
 * float amax / 127 of the block (before Q8_0's F16 rounding of it), rounded to F16. Where F16
 * would overflow (|s| >= 65520, activations of a few thousand with a one-sided sum) the float
 * itself: llama.cpp's infinity there turns the block's product into inf, or NaN where its min is
 * 0. Every table computes it with this code. */
static inline float es_act_q8_1_sum(float amax, int32_t sum)
{
    const float s = amax / 127.0f * (float)sum;
    return s > -65520.0f && s < 65520.0f ? es_f16_to_f32(es_f32_to_f16(s)) : s;
}

static inline int64_t es_act_q8_off_d(int64_t K)
{
    return K;
}
static inline int64_t es_act_q8_off_ds(int64_t K)
{
    return K + K / 32 * 4;
}
static inline int64_t es_act_q8_off_c(int64_t K)
{
    return K + K / 32 * 8;
}
static inline int64_t es_act_q8_off_c2(int64_t K)
{
    return K + K / 32 * 12;
}
static inline size_t es_act_q8_row_bytes(int64_t K)
{
    return (size_t)(K + K / 32 * 20 + 63) / 64 * 64;
}
/* Float activation rows (F32/F16/BF16 weights in the float kernels): K floats, zero padded to a
 * multiple of 16 floats; for F16 and BF16 weights the floats are rounded to that type first, as
 * llama.cpp converts them (es_act_f16r_prepare). */
static inline size_t es_act_f32_row_bytes(int64_t K)
{
    return (size_t)(K + 15) / 16 * 64;
}

/* Q4_K/Q5_K 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes (layout in
 * qtypes_int.h, k4_scale_min). */
static inline void es_k4_scale_min(int j, const uint8_t *s, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Q3_K: the signed scale (6-bit value - 32) of sub-block i (0..15, 16 weights each) from the
 * 12 packed bytes: 4 low bits from byte i (i < 8) or the high nibble of byte i - 8, 2 high bits
 * from byte 8 + i % 4 at bit 2 * (i / 4). */
static inline int es_q3k_scale(int i, const uint8_t *s)
{
    const int lo = i < 8 ? s[i] & 15 : s[i - 8] >> 4;
    return (lo | ((s[8 + i % 4] >> (2 * (i / 4))) & 3) << 4) - 32;
}

/* The scales of a super-block's 16 sub-blocks of 16 weights as floats: Q6_K (d * signed byte)
 * and Q3_K (d * es_q3k_scale), x the super-block. */
static inline void es_q6k_row_scales(const uint8_t *x, float s[16])
{
    es_f16 hd;
    memcpy(&hd, x + 208, 2);
    const float d = es_f16_to_f32(hd);
    for (int i = 0; i < 16; i++)
        s[i] = d * (float)(int8_t)x[192 + i];
}
static inline void es_q3k_row_scales(const uint8_t *x, float s[16])
{
    es_f16 hd;
    memcpy(&hd, x + 108, 2);
    const float d = es_f16_to_f32(hd);
    for (int i = 0; i < 16; i++)
        s[i] = d * (float)es_q3k_scale(i, x + 96);
}

/* Those scales of 8 rows (row j's super-block at sb + j*wrb; rows >= nr get 0) into the records
 * of the AArch64 tables (rec_bytes each, 8 floats by row per scale): sub-block i goes to block
 * i/2's record at s_off (first half of the block) or s_off + 32 (second). The avx2 table places
 * the same values from vectors (x86_avx2.c q6k_scales, q3k_scales). */
static inline void es_kern_put_scales16(uint8_t *rec, size_t rec_bytes, size_t s_off,
                                        const uint8_t *sb, size_t wrb, int nr,
                                        void (*row_scales)(const uint8_t *x, float s[16]))
{
    float s[16][8] = {{0}}; /* [scale index][row] */
    for (int j = 0; j < nr; j++) {
        float r[16];
        row_scales(sb + j * wrb, r);
        for (int i = 0; i < 16; i++)
            s[i][j] = r[i];
    }
    for (int i = 0; i < 16; i++)
        memcpy(rec + (i / 2) * rec_bytes + s_off + 32 * (i % 2), s[i], 32);
}

/* IQ4_XS: the scale of sub-block j (0..7) of the 136-byte super-block at sb, d * (ls - 32) with
 * the 6-bit ls from scales_l (4 bits) and scales_h (2 bits), as llama.cpp computes it. */
static inline float es_iq4xs_scale(const uint8_t *sb, int j)
{
    es_f16 d;
    uint16_t sh;
    memcpy(&d, sb, 2);
    memcpy(&sh, sb + 2, 2);
    const int ls = ((sb[4 + j / 2] >> (4 * (j % 2))) & 15) | ((sh >> (2 * j)) & 3) << 4;
    return es_f16_to_f32(d) * (float)(ls - 32);
}

/* Two bytes (f16 scales) or four (Q5_0's qh) of 8 rows (row j at base + j*wrb; rows >= nr read
 * as zero) packed into q[0..3], lanes in row order, for a decoder to move into a vector. Not
 * through a stack array: narrow stores read back by one wide load defeat store forwarding, which
 * stalled every block's decode (a quarter of dec_q4_0's time at 16-row experts on x86). */
static inline __attribute__((always_inline)) void
es_kern_gather_rows(const uint8_t *base, size_t wrb, int nr, const int bytes, uint64_t q[4])
{
    const int per = 8 / bytes; /* values per 64 bits */
    q[0] = q[1] = q[2] = q[3] = 0;
#pragma GCC unroll 8 /* unrolled, q stays in registers */
    for (int j = 0; j < 8; j++) {
        if (j >= nr) break;
        uint64_t v;
        if (bytes == 2) {
            uint16_t h;
            memcpy(&h, base + j * wrb, 2);
            v = h;
        } else {
            uint32_t w;
            memcpy(&w, base + j * wrb, 4);
            v = w;
        }
        q[j / per] |= v << (8 * bytes * (j % per));
    }
}

/*
 * One driver for every table (kern_drive.c): the loops of a GEMM (row groups, K-slices sized for
 * L2, tiles of output rows, register blocks of token rows) and the scratch they need are
 * written once; a table gives, per weight kind and layout, an es_kern_tiling with its tile
 * width, record sizes, block heights, decoder and micro-kernel.
 */
#define ES_KERN_TB_MAX 16 /* most token rows per register block, any table (amx: 16) */

/* One tile for a decoder: output rows [nt + lo, nt + hi) of the matrix W (rows of wrb bytes;
 * N rows in all, for the tile layout), k values [k0, k1), into the scratch. Rows of the tile
 * outside [lo, hi) may be decoded from anything in the matrix or as zero: nobody reads them. */
typedef struct es_kern_tile {
    const void *W;
    size_t wrb;
    int64_t N;
    uint32_t type;
    int64_t nt;
    int lo, hi;
    int64_t k0, k1;
} es_kern_tile;

struct es_kern_tiling;

/* One call of a micro-kernel: T token rows (act rows xr, Y rows yp at the tile's first output
 * row) times the decoded tile over k values [k0, k0 + nk); only Y lanes [lo, hi) of the tile
 * are read and written; load_y: add to Y (else overwrite). pf, if not NULL: the next tile's raw
 * rows (tile_rows of them, pf_wrb apart, the slice's bytes of each), for the kernel to fetch
 * into L2 a line at a time while it runs (pf_step: bytes per block of 32 k, << 16); with
 * decode_ahead the tile after the next one (the next one is being decoded).
 * Tilings with pack_rows: xp, the block's token rows as pack_rows laid them out (rows past T
 * are zero). Tilings with decode_ahead: next, if not NULL, is the slice's next tile, which this
 * call must decode into next_buf (all of it, es_kern_decode_next(), unit by unit while it
 * works); only the first register block of each tile gets it, and nobody reads next_buf
 * before the next tile. tl: the tiling the driver runs. */
typedef struct es_kern_block {
    const uint8_t *tile;
    int64_t K, k0, nk;
    int lo, hi, load_y, T;
    const uint8_t *xr[ES_KERN_TB_MAX];
    float *yp[ES_KERN_TB_MAX];
    const uint8_t *pf;
    size_t wrb; /* W's bytes per row (a direct kernel on the row layout reads its rows) */
    int sub;    /* direct, tile layout: the tile's first row in the layout's tile at `tile` */
    size_t pf_wrb;
    uint64_t pf_step;
    const uint8_t *xp;
    const es_kern_tile *next;
    uint8_t *next_buf;
    const struct es_kern_tiling *tl;
} es_kern_block;

typedef struct es_kern_tiling {
    int tile_rows;     /* output rows per tile (the micro-kernel's width) */
    int unit;          /* slices are multiples of unit k values: 256 integer, 32 float */
    size_t tile_bytes; /* decoded tile bytes per unit of k */
    size_t act_bytes;  /* one token row's activation bytes per unit of k */
    size_t (*act_row_bytes)(int64_t K);
    /* Token rows per register block: tb, or tb_narrow for a tile whose wanted rows end at or
     * before narrow_rows (a kernel on fewer columns has registers for more tokens). */
    int tb, narrow_rows, tb_narrow;
    /* Blocks of even height (16 rows at tb 5 run as 4+4+4+4, not 5+5+5+1): a block of one or
     * two rows has too few independent accumulators to hide the multiply latency while it
     * still loads the whole tile (Q4_0, avx2 table, Intel Xeon: 12-27 % less time at 7-21 rows).
     * AVX-512, with two 16-row columns per block, ran 1-2 % slower with it and keeps greedy
     * blocks of tb; NEON and the float kernels were not measured with it. */
    int even_split;
    int tiled; /* W is in the tile layout (quant/tiles.h): tiles start at multiples of tile_rows */
    void (*decode)(const es_kern_tile *t, uint8_t *scratch);
    void (*kernel)(const es_kern_block *b);
    /* Optional: a micro-kernel that reads a whole tile's raw bytes itself, for calls of at most
     * tb_direct token rows, whose tiles would otherwise be decoded for those few rows alone.
     * tile: on the tile layout the slice's first tile-block of the layout's tile (quant/tiles.h)
     * that holds the tile, at row sub of it (a table whose tiles are narrower than the layout's
     * reads a part of each tile-block); on the row layout the tile's first row (wrb apart; the
     * kernel finds the slice from k0). A tile in a short layout tile (the matrix's last) or on
     * the row layout reaching past n1 still takes decode + kernel. The same bits as decode +
     * kernel. */
    void (*direct)(const es_kern_block *b);
    int tb_direct;
    /* The tile layout's whole tiles are already the decoded tile (F32 on a table whose float
     * tiles are ES_TILE_ROWS wide, W 64-byte aligned): the kernel reads them where they are, at
     * the slice's offset; only a short last tile is decoded. */
    int in_place;
    /*
     * The matrix-engine tables (amx) only; 0 / NULL for the vector tables.
     * decode_ahead: the scratch holds two tile buffers. The driver decodes a slice's first tile;
     * from then on the first register block of each tile decodes the next tile into the other
     * buffer while it multiplies this one (es_kern_block.next): the vector units decode while
     * the matrix engine works, the paper's DMA -> vector -> matrix pipeline inside one call.
     * Slices are sized so that both buffers together take what one takes without it.
     * pack_rows: the kernel loads token rows as a matrix operand (16 rows at one stride), so
     * once per row group and K-slice the driver has the group's rows [r0, r1) of the call (act
     * row rows[r], or r, of arb bytes for K weights) packed, k values [k0, k1), pack_bytes_32
     * bytes per row and block of 32 k (the int8 values and what else the kernel wants beside
     * them): register block r's rows at dst + (r - r0) * (k1 - k0) / 32 * pack_bytes_32, in an
     * order of the table's choosing, with zero rows up to a multiple of tb. Blocks are then
     * greedy (even_split 0) and tb rows high.
     */
    int decode_ahead;
    size_t pack_bytes_32;
    void (*pack_rows)(const void *act, size_t arb, int64_t K, const int32_t *rows, int64_t r0,
                      int64_t r1, int64_t k0, int64_t k1, uint8_t *dst);
} es_kern_tiling;

/* For a decode_ahead kernel: decodes unit u (k values [k0 + u * unit, ...) of the next tile's
 * slice) of b->next into its place in b->next_buf. A kernel calls it for u = 0, 1, ... until
 * the slice is done, between its own steps, so that the decode overlaps the matrix work. */
static inline void es_kern_decode_next(const es_kern_block *b, int64_t u)
{
    const es_kern_tiling *tl = b->tl;
    es_kern_tile t = *b->next;
    t.k0 = b->next->k0 + u * tl->unit;
    t.k1 = t.k0 + tl->unit < b->next->k1 ? t.k0 + tl->unit : b->next->k1;
    tl->decode(&t, b->next_buf + (size_t)u * tl->tile_bytes);
}

/* For a kernel given es_kern_block.pf: at block b of its slice, fetches the next part of that
 * tile's raw rows (rows of them, pf_wrb apart) into L2, a line per row whenever b crosses into a
 * new line, so that the whole slice arrives over the call without a burst of misses and the
 * decoder finds it there. */
static inline __attribute__((always_inline)) void es_kern_prefetch_step(const es_kern_block *a,
                                                                       int64_t b, const int rows)
{
    const uintptr_t s = (uintptr_t)a->pf + (size_t)(((uint64_t)b * a->pf_step) >> 16);
    const uintptr_t e = (uintptr_t)a->pf + (size_t)(((uint64_t)(b + 1) * a->pf_step) >> 16);
    if (b == 0 || (s >> 6) != (e >> 6))
#pragma GCC unroll 32
        for (int j = 0; j < rows; j++)
            __builtin_prefetch((const uint8_t *)e + j * a->pf_wrb, 0, 2);
}

/* The tile layout's few-row kernels of a table (es_kern_tiling.direct): from body(q8, T, b), an
 * always-inline kernel of Q4_0 (q8 0) or Q8_0 (q8 1) on T = 1..6 token rows, the functions
 * run_direct_q4_0 and run_direct_q8_0, each with an instance of body per T. */
#define ES_KERN_DIRECT_Q4_0_Q8_0(body)                                                             \
    ES_KERN_DIRECT_ONE_(body, 0, q4_0)                                                             \
    ES_KERN_DIRECT_ONE_(body, 1, q8_0)
#define ES_KERN_DIRECT_ONE_(body, q8, name)                                                        \
    static void run_direct_##name(const es_kern_block *b)                                          \
    {                                                                                              \
        switch (b->T) {                                                                            \
        case 1: body(q8, 1, b); break;                                                             \
        case 2: body(q8, 2, b); break;                                                             \
        case 3: body(q8, 3, b); break;                                                             \
        case 4: body(q8, 4, b); break;                                                             \
        case 5: body(q8, 5, b); break;                                                             \
        case 6: body(q8, 6, b); break;                                                             \
        default: ES_ASSERT(!"a direct call of 1..6 rows");                                         \
        }                                                                                          \
    }

/* The tiling of a table's float kernels (F32, F16, BF16 weights, row layout): tiles of `rows`
 * output rows by 32 k floats per unit, act rows of floats, greedy blocks of at most tb tokens. */
static inline es_kern_tiling es_kern_float_tiling(int rows, int tb,
                                                  void (*decode)(const es_kern_tile *, uint8_t *),
                                                  void (*kernel)(const es_kern_block *))
{
    return (es_kern_tiling){.tile_rows = rows,
                            .unit = 32,
                            .tile_bytes = 32 * (size_t)rows * 4,
                            .act_bytes = 32 * 4,
                            .act_row_bytes = es_act_f32_row_bytes,
                            .tb = tb,
                            .tb_narrow = tb,
                            .decode = decode,
                            .kernel = kernel};
}

/* The decoder of F32 matrices in the tile layout (quant/tiles.h) for float tiles of `width` rows
 * (a divisor of ES_TILE_ROWS): rows [nt, nt + width) of the matrix, k in [k0, k1), into
 * tile[k - k0][width], rows past the matrix's end zero. The layout tile holding them is
 * [K][ntl] floats, so each k is `width` consecutive floats, and the whole slice is one copy
 * where the layout tile is as wide as the table's: no transposes, as rows would need. */
static inline void es_kern_decode_f32_tiles(const es_kern_tile *t, int width, float *tile)
{
    const int64_t lt = t->nt / ES_TILE_ROWS * ES_TILE_ROWS, K = (int64_t)(t->wrb / 4);
    const int ntl = es_tile_rows(t->N, lt), sub = (int)(t->nt - lt);
    const int n = ntl - sub < width ? ntl - sub : width;
    const float *src = (const float *)t->W + lt * K + t->k0 * ntl + sub;
    const int64_t nk = t->k1 - t->k0;
    if (ntl == width) {
        memcpy(tile, src, sizeof(float) * (size_t)(nk * width));
        return;
    }
    if (n == width) { /* a whole part of a whole tile: a constant size, so copied inline */
        for (int64_t k = 0; k < nk; k++)
            memcpy(tile + k * width, src + k * ntl, sizeof(float) * (size_t)width);
        return;
    }
    for (int64_t k = 0; k < nk; k++) {
        memcpy(tile + k * width, src + k * ntl, sizeof(float) * (size_t)n);
        memset(tile + k * width + n, 0, sizeof(float) * (size_t)(width - n));
    }
}

/* A table's es_gemm_tiled() of F32 (gemm_tiled_f32) on its float tiling: flt_tiling(decode)
 * as each table defines it, tiles of nrf rows. Tiles as wide as the layout's are read in place
 * (es_kern_tiling.in_place); narrower ones are copied out of it. */
#define ES_KERN_GEMM_TILED_F32(flt_tiling, nrf)                                                    \
    _Static_assert(ES_TILE_ROWS % (nrf) == 0, "float tiles inside the layout's");              \
    static void gemm_tiled_f32_decode(const es_kern_tile *t, uint8_t *tile)                        \
    {                                                                                              \
        es_kern_decode_f32_tiles(t, nrf, (float *)tile);                                           \
    }                                                                                              \
    static void gemm_tiled_f32(const void *W, int64_t K, int64_t N, int64_t n0, int64_t n1,        \
                               const void *act, const int32_t *rows, int64_t n_rows, float *Y,     \
                               int64_t ldy, int accumulate, void *scratch)                         \
    {                                                                                              \
        es_kern_tiling tl = flt_tiling(gemm_tiled_f32_decode);                                     \
        tl.tiled = 1;                                                                              \
        tl.in_place = (nrf) == ES_TILE_ROWS && ((uintptr_t)W & 63) == 0;                           \
        es_kern_drive(&tl, ES_QTYPE_F32, W, K, N, n0, n1, act, rows, n_rows, Y, ldy, accumulate,   \
                      scratch);                                                                    \
    }

/* es_gemm() (N: rows of W, used by tiled decoders) with the table's tiling. */
void es_kern_drive(const es_kern_tiling *tl, uint32_t type, const void *W, int64_t K, int64_t N,
                   int64_t n0, int64_t n1, const void *act, const int32_t *rows, int64_t n_rows,
                   float *Y, int64_t ldy, int accumulate, void *scratch);
/* The scratch es_kern_drive() needs with this tiling for rows of K weights. */
size_t es_kern_drive_scratch(const es_kern_tiling *tl, int64_t K);

/* The portable act preparation (scalar code): the SIMD tables produce bit-identical q, d, ds. */
void es_act_q8_prepare(const float *X, int64_t ldx, int64_t n_rows, int64_t K, void *act,
                       int32_t c_mult, int32_t c2_mult);
/* The same layout for K-quant weights (K % 256 == 0): one scale per 256 values, stored in each of
 * the 8 blocks' d (llama.cpp's Q8_K; every table uses this code). */
void es_act_q8k_prepare(const float *X, int64_t ldx, int64_t n_rows, int64_t K, void *act,
                        int32_t c_mult, int32_t c2_mult);
/* The same layout for Q4_1 / Q5_1 weights: llama.cpp's Q8_1, Q8_0 with ds its block sum
 * (es_act_q8_1_sum). */
void es_act_q8_1_prepare(const float *X, int64_t ldx, int64_t n_rows, int64_t K, void *act,
                         int32_t c_mult, int32_t c2_mult);
void es_act_f32_prepare(const float *X, int64_t ldx, int64_t n_rows, int64_t K, void *act);
/* The same rows rounded to F16 (|x| <= 65504) or BF16, for F16 and BF16 weights: llama.cpp
 * converts activations to the weights' type before it multiplies. */
void es_act_f16r_prepare(const float *X, int64_t ldx, int64_t n_rows, int64_t K, void *act);
void es_act_bf16r_prepare(const float *X, int64_t ldx, int64_t n_rows, int64_t K, void *act);

#endif
