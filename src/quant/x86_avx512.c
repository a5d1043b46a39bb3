/*
 * AVX-512 kernel table (F, BW, VL, DQ, VNNI). Built with its own -m flags; exports only
 * es_kern_fill_avx512() (STYLE §6).
 *
 * DESIGN. es_gemm() walks tiles of 32 output rows (two zmm "columns" of 16 int32/float lanes).
 * For each tile and K-slice it decodes the weights once into the per-thread scratch, then runs a
 * register-blocked micro-kernel over all token rows of the call before moving to the next tile.
 * A call of at most 6 token rows (an expert of a short prompt) skips the decode on the tile
 * layout, whose bytes are the operand already but for a nibble split or a sign flip (mk_direct),
 * and on Q4_K rows decodes into registers instead of a tile (mk_direct_q4k; bench/README.md,
 * "few rows per expert").
 *
 * Integer weights: the decoders and the record of x86_avx512_dec.h (shared with the amx
 * table), with DEC_BIAS 128. vpdpbusd multiplies unsigned bytes (first source) by signed bytes
 * (second source). The weights are the unsigned side: each is stored as (signed value + 128)
 * for Q4_0 (nibble + 120), Q8_0 (q ^ 0x80), Q5_0 (q5 + 112), IQ4_NL / IQ4_XS / MXFP4 (level
 * + 128), Q6_K (q + 96) and Q3_K (q + 124), and the accumulator starts at -128 * sum(x) of the
 * block (Q6_K and Q3_K, whose scales are per 16: of each half), which the act preparation
 * stores; Q4_K/Q5_K weights are unsigned already (0..15, 0..31) and start at 0, as do Q2_K's
 * (sc * q, 0..45; its act stores the halves' sums of x themselves in c2, for its per-half mins).
 * The int32 result is the exact dot product of the true integer weights with the int8
 * activations. Micro-kernel: 6 tokens x 2 columns; for each group the 4 activation bytes
 * of a token are broadcast once and feed one vpdpbusd per column (a broadcast per vpdpbusd made
 * the loads the bottleneck); per block and token, 16 vpdpbusd (1024 MACs) and 6 float ops
 * (convert, scale, fused multiply-add per column). Those float ops share the two vector ports
 * with vpdpbusd on Intel, which caps this scheme at 16/22 = 73 % of the vpdpbusd peak
 * (measured 65 % for the bare micro-kernel).
 *
 * Float weights (F32, F16, BF16): tiles of 32 rows x a K-slice of floats, [k][32] (16x16
 * transposes); the micro-kernel keeps 8 tokens x 2 vectors of accumulators and does one FMA per
 * weight vector and broadcast activation, k in increasing order. (vdpbf16ps was tried for BF16:
 * on the Intel machine it issues at a quarter of the FMA rate, and it would round activations to
 * bf16, so BF16 weights are widened to floats instead, exactly.)
 *
 * The float operations per block are those of kern_scalar.c in the same order, so the results
 * match the scalar table bit for bit (act preparation is bit-identical too).
 */
#include "quant/kern.h"

#include "core/cpu.h"

#include <immintrin.h>
#include <string.h>

#define DEC_BIAS 128 /* weights stored as w + 128: vpdpbusd's first operand is unsigned */
#include "quant/x86_avx512_dec.h"

#define TB 8   /* most token rows per register block */
#define NRF 32 /* output rows per float tile: two zmm */
#define ACT256_Q 416 /* act bytes per 256 k of a row: q 256, d ds c 32 each, c2 64 */

/* kernel kinds: offset-128 weights; unsigned + mins; Q6_K halves; Q2_K (unsigned, halves' mins) */
enum { KQ, KM, K6, K2 };

/* The loops around the micro-kernels (slices, row groups, tiles, register blocks): the driver
 * every table shares, es_kern_drive() (kern_drive.c). */

/* ---- helpers ------------------------------------------------------------------------------- */

static inline __m512i bcst4(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* acc += u8 w . s8 broadcast(*x), with the broadcast folded into the instruction ({1to16}), which
 * the compiler does not do by itself: one fused load+dot uop instead of two instructions. */
static inline __m512i dp_bcst(__m512i acc, __m512i w, const void *x)
{
#ifdef ES_AVX512_EMULATE /* the tests' build on AVX2 (avx512_emu.h): the same sum, no asm */
    return _mm512_dpbusd_epi32(acc, w, bcst4(x));
#else
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)x));
    return acc;
#endif
}

static inline __m512 bcstf(const void *p)
{
    float v;
    memcpy(&v, p, 4);
    return _mm512_set1_ps(v);
}

static inline __attribute__((always_inline)) void tr16(__m512i r[16])
{
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    /* u[4a+m] lane L = rows 4a..4a+3 of column 4L+m */
    for (int a = 0; a < 16; a += 4) {
        u[a + 0] = _mm512_unpacklo_epi64(t[a + 0], t[a + 2]);
        u[a + 1] = _mm512_unpackhi_epi64(t[a + 0], t[a + 2]);
        u[a + 2] = _mm512_unpacklo_epi64(t[a + 1], t[a + 3]);
        u[a + 3] = _mm512_unpackhi_epi64(t[a + 1], t[a + 3]);
    }
#pragma GCC unroll 16
    for (int m = 0; m < 4; m++) {
        __m512i v0 = _mm512_shuffle_i32x4(u[m], u[4 + m], 0x44);
        __m512i v1 = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0x44);
        __m512i v2 = _mm512_shuffle_i32x4(u[m], u[4 + m], 0xEE);
        __m512i v3 = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0xEE);
        r[m] = _mm512_shuffle_i32x4(v0, v1, 0x88);
        r[4 + m] = _mm512_shuffle_i32x4(v0, v1, 0xDD);
        r[8 + m] = _mm512_shuffle_i32x4(v2, v3, 0x88);
        r[12 + m] = _mm512_shuffle_i32x4(v2, v3, 0xDD);
    }
}

/* ---- integer micro-kernel ---------------------------------------------------------------------
 */

/* Token rows per register block for (kind, columns): accumulators, float sums, 2 weight vectors
 * and a broadcast must fit the 32 zmm registers. */
static inline int tb_of(int kind, int C)
{
    return C == 1 ? 8 : kind == K6 ? 4 : 6;
}

/* The start of a register block: the T token rows' activations in xr and, for C columns, the
 * outputs in y (what a->yp holds where a->load_y, else 0; lanes outside m read nothing). */
static inline __attribute__((always_inline)) void load_y(const int C, const int T,
                                                         const es_kern_block *a,
                                                         const __mmask16 m[2], __m512 y[2][TB],
                                                         const uint8_t *xr[TB])
{
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        xr[t] = a->xr[t];
#pragma GCC unroll 2
        for (int c = 0; c < C; c++)
            y[c][t] =
                a->load_y ? _mm512_maskz_loadu_ps(m[c], a->yp[t] + 16 * c) : _mm512_setzero_ps();
    }
}

/*
 * C columns (16 output rows each) x T tokens. Per block: the int32 accumulators start at the
 * correction the act stores (KQ: -128*sum(x); K6: per half; KM: 0), take 8 vpdpbusd (groups g,
 * outer loop, so T*C independent chains run side by side), then per column and token:
 * f = (float)acc * s; y = fma(f, d_x, y) [KM: y = fma(-(dmin*m), d_x*sum(q_x), y)]
 * [K6: f = (float)acc_lo * s_lo; f = fma((float)acc_hi, s_hi, f)]
 * [K2: f = (float)acc * d; f = fma((float)sum_lo(x), -(dmin*m_lo), f); the same for hi]. With two columns the 4
 * activation bytes are broadcast once into a register and feed two vpdpbusd, halving the loads.
 */
static inline __attribute__((always_inline)) void mk_int(const int kind, const int C, const int T,
                                                         const es_kern_block *a)
{
    const size_t bs = kind == KQ ? REC_Q : kind == K2 ? REC_K2 : REC_K;
    const int64_t K = a->K, kb0 = a->k0 / 32, nbs = a->nk / 32;
    const __mmask16 m[2] = {lane_range(a->lo, a->hi), lane_range(a->lo - 16, a->hi - 16)};
    const int64_t od = es_act_q8_off_d(K) + 4 * kb0, ods = es_act_q8_off_ds(K) + 4 * kb0;
    const int64_t oc = es_act_q8_off_c(K) + 4 * kb0, oc2 = es_act_q8_off_c2(K) + 8 * kb0;
    __m512 y[2][TB];
    const uint8_t *xr[TB];
    load_y(C, T, a, m, y, xr);
    const uint8_t *rec = a->tile;
    for (int64_t b = 0; b < nbs; b++, rec += bs) {
        const int64_t oq = 32 * (kb0 + b);
        if (a->pf) es_kern_prefetch_step(a, b, NRI);
        __m512i acc[2][TB], acc2[2][TB];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            __m512i i0 = kind == KQ   ? bcst4(xr[t] + oc + 4 * b)
                         : kind == K6 ? bcst4(xr[t] + oc2 + 8 * b)
                                      : _mm512_setzero_si512();
            __m512i i1 = kind == K6 ? bcst4(xr[t] + oc2 + 8 * b + 4) : i0;
#pragma GCC unroll 2
            for (int c = 0; c < C; c++)
                acc[c][t] = i0, acc2[c][t] = i1;
        }
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            __m512i w[2];
#pragma GCC unroll 2
            for (int c = 0; c < C; c++)
                w[c] = _mm512_load_si512(rec + 128 * g + 64 * c);
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                const uint8_t *xv = xr[t] + oq + 4 * g;
                if (C == 1) {
                    if (kind == K6 && g >= 4)
                        acc2[0][t] = dp_bcst(acc2[0][t], w[0], xv);
                    else
                        acc[0][t] = dp_bcst(acc[0][t], w[0], xv);
                } else {
                    const __m512i xb = bcst4(xv);
#pragma GCC unroll 2
                    for (int c = 0; c < C; c++) {
                        if (kind == K6 && g >= 4)
                            acc2[c][t] = _mm512_dpbusd_epi32(acc2[c][t], w[c], xb);
                        else
                            acc[c][t] = _mm512_dpbusd_epi32(acc[c][t], w[c], xb);
                    }
                }
            }
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const __m512 xd = bcstf(xr[t] + od + 4 * b);
            __m512 slo = xd, shi = xd; /* K2: the halves' sums of x (the act's c2, times 1) */
            if (kind == K2) {
                slo = _mm512_cvtepi32_ps(bcst4(xr[t] + oc2 + 8 * b));
                shi = _mm512_cvtepi32_ps(bcst4(xr[t] + oc2 + 8 * b + 4));
            }
#pragma GCC unroll 2
            for (int c = 0; c < C; c++) {
                const __m512 s = _mm512_load_ps(rec + 1024 + 64 * c);
                __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[c][t]), s);
                if (kind == K2) {
                    f = _mm512_fmadd_ps(slo, _mm512_load_ps(rec + 1152 + 64 * c), f);
                    f = _mm512_fmadd_ps(shi, _mm512_load_ps(rec + 1280 + 64 * c), f);
                }
                if (kind == K6)
                    f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc2[c][t]),
                                        _mm512_load_ps(rec + 1152 + 64 * c), f);
                y[c][t] = _mm512_fmadd_ps(f, xd, y[c][t]);
                if (kind == KM)
                    y[c][t] = _mm512_fmadd_ps(_mm512_load_ps(rec + 1152 + 64 * c),
                                              bcstf(xr[t] + ods + 4 * b), y[c][t]);
            }
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++)
#pragma GCC unroll 2
        for (int c = 0; c < C; c++)
            _mm512_mask_storeu_ps(a->yp[t] + 16 * c, m[c], y[c][t]);
}

#define MK(kind, C, T)                                                                             \
    __attribute__((unused)) static void mk_##kind##_##C##_##T(const es_kern_block *a)              \
    {                                                                                              \
        mk_int(kind, C, T, a);                                                                     \
    }
#define MK_ALL(kind)                                                                               \
    MK(kind, 1, 1)                                                                                 \
    MK(kind, 1, 2) MK(kind, 1, 3) MK(kind, 1, 4) MK(kind, 1, 5) MK(kind, 1, 6) MK(kind, 1, 7)      \
        MK(kind, 1, 8) MK(kind, 2, 1) MK(kind, 2, 2) MK(kind, 2, 3) MK(kind, 2, 4) MK(kind, 2, 5)  \
            MK(kind, 2, 6)
MK_ALL(KQ)
MK_ALL(KM)
MK_ALL(K6)
MK_ALL(K2)
typedef void (*mk_fn)(const es_kern_block *a);
#define MK_ROW(kind, C)                                                                            \
    {                                                                                              \
        NULL, mk_##kind##_##C##_1, mk_##kind##_##C##_2, mk_##kind##_##C##_3, mk_##kind##_##C##_4,  \
            mk_##kind##_##C##_5, mk_##kind##_##C##_6, mk_##kind##_##C##_7, mk_##kind##_##C##_8     \
    }
static void mk_none(const es_kern_block *a)
{
    (void)a;
    ES_ASSERT(0);
}
#define mk_KQ_2_7 mk_none
#define mk_KQ_2_8 mk_none
#define mk_KM_2_7 mk_none
#define mk_KM_2_8 mk_none
#define mk_K6_2_7 mk_none
#define mk_K6_2_8 mk_none
#define mk_K6_2_5 mk_none
#define mk_K6_2_6 mk_none
#define mk_K2_2_7 mk_none
#define mk_K2_2_8 mk_none
static const mk_fn mk_table[4][2][TB + 1] = {
    {MK_ROW(KQ, 1), MK_ROW(KQ, 2)},
    {MK_ROW(KM, 1), MK_ROW(KM, 2)},
    {MK_ROW(K6, 1), MK_ROW(K6, 2)},
    {MK_ROW(K2, 1), MK_ROW(K2, 2)},
};

/*
 * A few rows on the tile layout (Q4_0, Q8_0; es_kern_tiling.direct): a call whose token rows all
 * fit one register block would decode each tile for those rows alone, and at a handful of rows
 * the decode costs more than the products (bench_expert at 4 rows per expert). This kernel reads
 * the tile's raw tile-blocks itself (a->tile: the slice's first tile-block of a whole 32-row
 * tile, quant/tiles.h), splits the nibbles (Q4_0) or flips the sign bit (Q8_0) in registers and
 * runs mk_int(KQ, 2, T)'s products: the same int32 sums, then the same float operations in the
 * same order, so the same bits.
 */
static inline __attribute__((always_inline)) void mk_direct(const int q8, const int T,
                                                            const es_kern_block *a)
{
    const size_t bs = (size_t)NRI * (q8 ? 34 : 18); /* bytes per tile-block */
    const int64_t K = a->K, kb0 = a->k0 / 32, nbs = a->nk / 32;
    const __mmask16 m[2] = {lane_range(a->lo, a->hi), lane_range(a->lo - 16, a->hi - 16)};
    const int64_t od = es_act_q8_off_d(K) + 4 * kb0, oc = es_act_q8_off_c(K) + 4 * kb0;
    const __m512i off = _mm512_set1_epi8((char)(DEC_BIAS - 8));
    __m512 y[2][TB];
    const uint8_t *xr[TB];
    load_y(2, T, a, m, y, xr);
    const uint8_t *src = a->tile;
    for (int64_t b = 0; b < nbs; b++, src += bs) {
        const int64_t oq = 32 * (kb0 + b);
        if (a->pf) es_kern_prefetch_step(a, b, NRI);
        __m512i acc[2][TB];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++)
            acc[0][t] = acc[1][t] = bcst4(xr[t] + oc + 4 * b);
        /* Q4_0: dword g of a row holds weights 4g..4g+3 (low nibbles) and 16+4g.. (high) */
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            if (!q8 && g == 4) break; /* Q4_0: four dwords, two nibbles each */
            __m512i w[2], w4[2];
#pragma GCC unroll 2
            for (int c = 0; c < 2; c++) {
                const __m512i raw = _mm512_loadu_si512(src + 2 * NRI + 128 * g + 64 * c);
                if (q8) {
                    w[c] = enc_q8(raw);
                } else {
                    w[c] = _mm512_add_epi8(and8(raw, 15), off);
                    w4[c] = _mm512_add_epi8(and8(srl16(raw, 4), 15), off);
                }
            }
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                const __m512i xb = bcst4(xr[t] + oq + 4 * g);
#pragma GCC unroll 2
                for (int c = 0; c < 2; c++)
                    acc[c][t] = _mm512_dpbusd_epi32(acc[c][t], w[c], xb);
                if (!q8) {
                    const __m512i xb4 = bcst4(xr[t] + oq + 4 * (g + 4));
#pragma GCC unroll 2
                    for (int c = 0; c < 2; c++)
                        acc[c][t] = _mm512_dpbusd_epi32(acc[c][t], w4[c], xb4);
                }
            }
        }
        const __m512 s[2] = {t_scales(src, NRI, 0), t_scales(src, NRI, 1)};
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const __m512 xd = bcstf(xr[t] + od + 4 * b);
#pragma GCC unroll 2
            for (int c = 0; c < 2; c++)
                y[c][t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc[c][t]), s[c]), xd,
                                          y[c][t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++)
#pragma GCC unroll 2
        for (int c = 0; c < 2; c++)
            _mm512_mask_storeu_ps(a->yp[t] + 16 * c, m[c], y[c][t]);
}

enum { TB_DIRECT = 6 }; /* rows of the direct kernels (mk_int's KQ block of two columns) */
ES_KERN_DIRECT_Q4_0_Q8_0(mk_direct)

/*
 * A few rows of Q4_K in GGUF rows (es_kern_tiling.direct): dec_k45's work into registers. Per
 * 16-row column and super-block the scales go to a small buffer in L1 (k45_scales, as the
 * decoder stores them) and each 32-byte chunk of the rows' nibbles is transposed (tr16x8) and
 * split in registers and fed to the token rows' vpdpbusd at once, instead of being stored as a
 * tile and loaded back for a handful of rows. The int32 sums and the float operations of
 * mk_int(KM), in its order: the same bits. a->tile: the tile's first row; whole tiles only.
 */
static inline __attribute__((always_inline)) void mk_direct_q4k(const int T,
                                                                const es_kern_block *a)
{
    const int64_t K = a->K, s0 = a->k0 / 256, s1 = (a->k0 + a->nk) / 256;
    const int64_t od = es_act_q8_off_d(K), ods = es_act_q8_off_ds(K);
    const size_t wrb = a->wrb;
    const __m512i ro = row_offsets(wrb, 16);
    uint8_t scb[8 * REC_K] __attribute__((aligned(64))); /* k45_scales' records: scales only */
    const uint8_t *xr[TB];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) xr[t] = a->xr[t];
#pragma GCC unroll 2
    for (int c = 0; c < 2; c++) {
        const __mmask16 m = lane_range(a->lo - 16 * c, a->hi - 16 * c);
        if (!m) continue;
        const uint8_t *W = a->tile + 16 * (size_t)c * wrb;
        __m512 y[TB];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++)
            y[t] = a->load_y ? _mm512_maskz_loadu_ps(m, a->yp[t] + 16 * c) : _mm512_setzero_ps();
        for (int64_t S = s0; S < s1; S++) {
            const uint8_t *sb = W + S * 144;
            if (a->pf && c == 0)
                for (int j = 0; j < 8; j++) es_kern_prefetch_step(a, 8 * (S - s0) + j, NRI);
            k45_scales(sb, ro, scb);
#pragma GCC unroll 4
            for (int cc = 0; cc < 4; cc++) {
                __m512i raw[8], acc[2][TB];
                tr16x8(sb + 16 + 32 * cc, wrb, 16, raw);
                const int64_t kl = 8 * S + 2 * cc; /* blocks kl (low nibbles) and kl + 1 */
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) acc[0][t] = acc[1][t] = _mm512_setzero_si512();
#pragma GCC unroll 8
                for (int g = 0; g < 8; g++) {
                    const __m512i lo = and8(raw[g], 15), hi = and8(srl16(raw[g], 4), 15);
#pragma GCC unroll 8
                    for (int t = 0; t < T; t++) {
                        acc[0][t] = dp_bcst(acc[0][t], lo, xr[t] + 32 * kl + 4 * g);
                        acc[1][t] = dp_bcst(acc[1][t], hi, xr[t] + 32 * (kl + 1) + 4 * g);
                    }
                }
#pragma GCC unroll 2
                for (int h = 0; h < 2; h++) {
                    const uint8_t *rec = scb + (2 * cc + h) * REC_K;
                    const __m512 s = _mm512_load_ps(rec + 1024), mn = _mm512_load_ps(rec + 1152);
#pragma GCC unroll 8
                    for (int t = 0; t < T; t++) {
                        const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[h][t]), s);
                        y[t] = _mm512_fmadd_ps(f, bcstf(xr[t] + od + 4 * (kl + h)), y[t]);
                        y[t] = _mm512_fmadd_ps(mn, bcstf(xr[t] + ods + 4 * (kl + h)), y[t]);
                    }
                }
            }
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(a->yp[t] + 16 * c, m, y[t]);
    }
}

#define MKDK(T)                                                                                    \
    static void mk_direct_q4k_##T(const es_kern_block *a)                                         \
    {                                                                                              \
        mk_direct_q4k(T, a);                                                                       \
    }
MKDK(1) MKDK(2) MKDK(3) MKDK(4) MKDK(5) MKDK(6)
static const mk_fn mk_direct_q4k_table[TB_DIRECT + 1] = {
    NULL, mk_direct_q4k_1, mk_direct_q4k_2, mk_direct_q4k_3, mk_direct_q4k_4, mk_direct_q4k_5,
    mk_direct_q4k_6};
static void run_direct_q4_K(const es_kern_block *b)
{
    mk_direct_q4k_table[b->T](b);
}

/* The micro-kernel of each kind for the driver: one column if the wanted rows end in the first. */
#define RUN(kind)                                                                                  \
    static void run_##kind(const es_kern_block *b)                                                 \
    {                                                                                              \
        mk_table[kind][b->hi > 16][b->T](b);                                                       \
    }
RUN(KQ)
RUN(KM)
RUN(K6)
RUN(K2)
static void (*const run_table[4])(const es_kern_block *) = {run_KQ, run_KM, run_K6, run_K2};

static es_kern_tiling int_tiling(int kind, int tiled,
                                 void (*decode)(const es_kern_tile *, uint8_t *))
{
    return (es_kern_tiling){.tile_rows = NRI,
                            .unit = 256,
                            .tile_bytes = 8 * (size_t)(kind == KQ   ? REC_Q
                                                       : kind == K2 ? REC_K2
                                                                    : REC_K),
                            .act_bytes = ACT256_Q,
                            .act_row_bytes = es_act_q8_row_bytes,
                            .tb = tb_of(kind, 2),
                            .narrow_rows = 16,
                            .tb_narrow = tb_of(kind, 1),
                            .tiled = tiled,
                            .decode = decode,
                            .kernel = run_table[kind]};
}

static size_t scratch_q(int64_t K)
{
    const es_kern_tiling tl = int_tiling(KQ, 0, NULL);
    return es_kern_drive_scratch(&tl, K);
}
static size_t scratch_k(int64_t K)
{
    const es_kern_tiling tl = int_tiling(KM, 0, NULL);
    return es_kern_drive_scratch(&tl, K);
}
static size_t scratch_k2(int64_t K)
{
    const es_kern_tiling tl = int_tiling(K2, 0, NULL);
    return es_kern_drive_scratch(&tl, K);
}

/* direct_kernel: NULL, or a kernel for calls of at most TB_DIRECT rows (es_kern_tiling.direct) */
#define GEMM_INT(name, kind, dec, direct_kernel, type)                                             \
    static void name##_decode(const es_kern_tile *t, uint8_t *tile)                                \
    {                                                                                              \
        dec((const uint8_t *)t->W + t->nt * t->wrb, t->wrb, t->hi, t->k0 / 32, t->k1 / 32, tile);  \
    }                                                                                              \
    static void name(const void *W, int64_t K, int64_t n0, int64_t n1, const void *act,            \
                     const int32_t *rows, int64_t n_rows, float *Y, int64_t ldy, int accumulate,   \
                     void *scratch)                                                                \
    {                                                                                              \
        ES_ASSERT(K % 32 == 0);                                                                    \
        es_kern_tiling tl = int_tiling(kind, 0, name##_decode);                                    \
        tl.direct = direct_kernel;                                                                 \
        tl.tb_direct = TB_DIRECT;                                                                  \
        es_kern_drive(&tl, type, W, K, 0, n0, n1, act, rows, n_rows, Y, ldy, accumulate, scratch); \
    }
GEMM_INT(gemm_q4_0, KQ, dec_q4_0, NULL, ES_QTYPE_Q4_0)
GEMM_INT(gemm_q8_0, KQ, dec_q8_0, NULL, ES_QTYPE_Q8_0)
GEMM_INT(gemm_q4_K, KM, dec_q4_K, run_direct_q4_K, ES_QTYPE_Q4_K)
GEMM_INT(gemm_q5_K, KM, dec_q5_K, NULL, ES_QTYPE_Q5_K)
GEMM_INT(gemm_q6_K, K6, dec_q6_K, NULL, ES_QTYPE_Q6_K)
GEMM_INT(gemm_q3_K, K6, dec_q3_K, NULL, ES_QTYPE_Q3_K)
GEMM_INT(gemm_q2_K, K2, dec_q2_K, NULL, ES_QTYPE_Q2_K)
GEMM_INT(gemm_q5_0, KQ, dec_q5_0, NULL, ES_QTYPE_Q5_0)
GEMM_INT(gemm_iq4_nl, KQ, dec_iq4_nl, NULL, ES_QTYPE_IQ4_NL)
GEMM_INT(gemm_iq4_xs, KQ, dec_iq4_xs, NULL, ES_QTYPE_IQ4_XS)
GEMM_INT(gemm_mxfp4, KQ, dec_mxfp4, NULL, ES_QTYPE_MXFP4)

/* The row layout's records and micro-kernels (kind KQ) on whole 32-row tiles of the layout. */
#define GEMM_TILED(name, dec, direct_kernel, type)                                                 \
    static void name##_decode(const es_kern_tile *t, uint8_t *tile)                                \
    {                                                                                              \
        dec((const uint8_t *)t->W + t->nt * t->wrb, es_tile_rows(t->N, t->nt), t->k0 / 32,         \
            t->k1 / 32, tile);                                                                     \
    }                                                                                              \
    static void name(const void *W, int64_t K, int64_t N, int64_t n0, int64_t n1, const void *act, \
                     const int32_t *rows, int64_t n_rows, float *Y, int64_t ldy, int accumulate,   \
                     void *scratch)                                                                \
    {                                                                                              \
        ES_ASSERT(K % 32 == 0);                                                                    \
        es_kern_tiling tl = int_tiling(KQ, 1, name##_decode);                                      \
        tl.direct = direct_kernel;                                                                 \
        tl.tb_direct = TB_DIRECT;                                                                  \
        es_kern_drive(&tl, type, W, K, N, n0, n1, act, rows, n_rows, Y, ldy, accumulate, scratch); \
    }
GEMM_TILED(gemm_tiled_q4_0, dec_t_q4_0, run_direct_q4_0, ES_QTYPE_Q4_0)
GEMM_TILED(gemm_tiled_q8_0, dec_t_q8_0, run_direct_q8_0, ES_QTYPE_Q8_0)

/* ---- activations (integer types) ---------------------------------------------------------- */

/* Bit-identical to es_act_q8_prepare() (gb = 1: one scale per block of 32) and to
 * es_act_q8k_prepare() (gb = 8: one per 256): max|x| is exact in any order, the scale is the same
 * IEEE operations, and vcvtps2dq rounds to nearest even like lrintf. */
static void act_q8(const float *X, int64_t ldx, int64_t n_rows, int64_t K, void *act, int gb,
                   int32_t c2_mult)
{
    ES_ASSERT(K % (32 * gb) == 0);
    const int64_t nb = K / 32;
    const size_t rb = es_act_q8_row_bytes(K);
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t r = 0; r < n_rows; r++) {
        const float *x = X + r * ldx;
        uint8_t *row = (uint8_t *)act + r * rb;
        float *d = (float *)(row + es_act_q8_off_d(K));
        float *ds = (float *)(row + es_act_q8_off_ds(K));
        int32_t *c = (int32_t *)(row + es_act_q8_off_c(K));
        int32_t *c2 = (int32_t *)(row + es_act_q8_off_c2(K));
        for (int64_t b0 = 0; b0 < nb; b0 += gb) {
            __m512 a = _mm512_setzero_ps();
            for (int64_t i = 0; i < 2 * gb; i++)
                a = _mm512_max_ps(a, _mm512_andnot_ps(sign, _mm512_loadu_ps(x + 32 * b0 + 16 * i)));
            const float amax = _mm512_reduce_max_ps(a);
            float id;
            const float db = es_act_group_scale(amax, gb, &id);
            const __m512 vid = _mm512_set1_ps(id);
            for (int64_t b = b0; b < b0 + gb; b++) {
                const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 32 * b), vid));
                const __m512i q1 =
                    _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 32 * b + 16), vid));
                _mm_storeu_si128((__m128i *)(row + 32 * b), _mm512_cvtepi32_epi8(q0));
                _mm_storeu_si128((__m128i *)(row + 32 * b + 16), _mm512_cvtepi32_epi8(q1));
                const int32_t s0 = _mm512_reduce_add_epi32(q0), s1 = _mm512_reduce_add_epi32(q1);
                d[b] = db;
                ds[b] = db * (float)(s0 + s1);
                c[b] = -128 * (s0 + s1);
                c2[2 * b] = c2_mult * s0;
                c2[2 * b + 1] = c2_mult * s1;
            }
        }
        const size_t used = (size_t)es_act_q8_off_c2(K) + (size_t)nb * 8;
        memset(row + used, 0, rb - used);
    }
}
static void act_prepare_q(const float *X, int64_t ldx, int64_t n_rows, int64_t K, void *act)
{
    act_q8(X, ldx, n_rows, K, act, 1, -128);
}
/* K-quant weights: one scale per 256 values, as llama.cpp's Q8_K (kern.h) */
static void act_prepare_k(const float *X, int64_t ldx, int64_t n_rows, int64_t K, void *act)
{
    act_q8(X, ldx, n_rows, K, act, 8, -128);
}
/* Q2_K: c2 holds the halves' sums themselves, which its mins multiply (kind K2) */
static void act_prepare_k2(const float *X, int64_t ldx, int64_t n_rows, int64_t K, void *act)
{
    act_q8(X, ldx, n_rows, K, act, 8, 1);
}

/* ---- float weights -----------------------------------------------------------------------------
 */

/* Row j of a float-type matrix, k .. k+15 (mask km), as 16 floats. */
static inline __m512i load_f(const uint32_t type, const uint8_t *p, int64_t k, __mmask16 km)
{
    if (type == ES_QTYPE_F32) return _mm512_maskz_loadu_epi32(km, (const float *)p + k);
    const __m256i h = _mm256_maskz_loadu_epi16(km, (const uint16_t *)p + k);
    if (type == ES_QTYPE_F16) return _mm512_castps_si512(_mm512_cvtph_ps(h));
    return _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16); /* bf16: the top half of a float */
}

/* Decodes rows [0, nr) x k [k0, k1) of a float-type matrix into tile[k - k0][32] floats. Rows
 * past nr are zero. */
static inline __attribute__((always_inline)) void dec_f(const uint32_t type, const uint8_t *W,
                                                        size_t wrb, int nr, int64_t k0, int64_t k1,
                                                        float *tile)
{
    for (int half = 0; half < 2; half++) {
        const int n = col_rows(nr, half);
        const uint8_t *Wh = W + 16 * half * wrb;
        for (int64_t k = k0; k < k1; k += 16) {
            const int nk = (int)(k1 - k < 16 ? k1 - k : 16);
            float *dst = tile + (k - k0) * NRF + 16 * half;
            __m512i r[16];
            if (n == 16 && nk == 16) { /* the common case, fully in registers */
#pragma GCC unroll 16
                for (int j = 0; j < 16; j++)
                    r[j] = load_f(type, Wh + j * wrb, k, 0xFFFF);
                tr16(r);
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++)
                    _mm512_store_si512(dst + i * NRF, r[i]);
                continue;
            }
            const __mmask16 km = (__mmask16)((1u << nk) - 1);
            _Alignas(64) float tmp[16][16];
            for (int j = 0; j < 16; j++)
                _mm512_store_si512(tmp[j], j < n ? load_f(type, Wh + j * wrb, k, km)
                                                 : _mm512_setzero_si512());
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++)
                r[j] = _mm512_load_si512(tmp[j]);
            tr16(r);
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++)
                _mm512_store_si512(tmp[i], r[i]);
            for (int i = 0; i < nk; i++)
                _mm512_store_si512(dst + i * NRF, _mm512_load_si512(tmp[i]));
        }
    }
}

static inline __attribute__((always_inline)) void mk_flt(const int T, const es_kern_block *a)
{
    const __mmask16 m0 = lane_range(a->lo, a->hi), m1 = lane_range(a->lo - 16, a->hi - 16);
    __m512 y0[TB], y1[TB];
    const uint8_t *xr[TB];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        xr[t] = a->xr[t] + 4 * a->k0;
        y0[t] = a->load_y ? _mm512_maskz_loadu_ps(m0, a->yp[t]) : _mm512_setzero_ps();
        y1[t] = a->load_y ? _mm512_maskz_loadu_ps(m1, a->yp[t] + 16) : _mm512_setzero_ps();
    }
    const float *tp = (const float *)a->tile;
    for (int64_t k = 0; k < a->nk; k++, tp += NRF) {
        const __m512 w0 = _mm512_load_ps(tp), w1 = _mm512_load_ps(tp + 16);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const __m512 x = bcstf(xr[t] + 4 * k);
            y0[t] = _mm512_fmadd_ps(w0, x, y0[t]);
            y1[t] = _mm512_fmadd_ps(w1, x, y1[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        _mm512_mask_storeu_ps(a->yp[t], m0, y0[t]);
        _mm512_mask_storeu_ps(a->yp[t] + 16, m1, y1[t]);
    }
}

#define MKF(T)                                                                                     \
    static void mkf_##T(const es_kern_block *a)                                                    \
    {                                                                                              \
        mk_flt(T, a);                                                                              \
    }
MKF(1)
MKF(2)
MKF(3)
MKF(4)
MKF(5)
MKF(6)
MKF(7)
MKF(8)
static const mk_fn mkf_table[TB + 1] = {NULL,  mkf_1, mkf_2, mkf_3, mkf_4,
                                        mkf_5, mkf_6, mkf_7, mkf_8};
static void run_flt(const es_kern_block *b)
{
    mkf_table[b->T](b);
}

static es_kern_tiling flt_tiling(void (*decode)(const es_kern_tile *, uint8_t *))
{
    return es_kern_float_tiling(NRF, TB, decode, run_flt);
}

static size_t scratch_f(int64_t K)
{
    const es_kern_tiling tl = flt_tiling(NULL);
    return es_kern_drive_scratch(&tl, K);
}

#define GEMM_F(name, type)                                                                         \
    static void name##_decode(const es_kern_tile *t, uint8_t *tile)                                \
    {                                                                                              \
        dec_f(type, (const uint8_t *)t->W + t->nt * t->wrb, t->wrb, t->hi, t->k0, t->k1,           \
              (float *)tile);                                                                      \
    }                                                                                              \
    static void name(const void *W, int64_t K, int64_t n0, int64_t n1, const void *act,            \
                     const int32_t *rows, int64_t n_rows, float *Y, int64_t ldy, int accumulate,   \
                     void *scratch)                                                                \
    {                                                                                              \
        const es_kern_tiling tl = flt_tiling(name##_decode);                                       \
        es_kern_drive(&tl, type, W, K, 0, n0, n1, act, rows, n_rows, Y, ldy, accumulate, scratch); \
    }
GEMM_F(gemm_f32, ES_QTYPE_F32)
GEMM_F(gemm_f16, ES_QTYPE_F16)
GEMM_F(gemm_bf16, ES_QTYPE_BF16)
ES_KERN_GEMM_TILED_F32(flt_tiling, NRF)

void es_kern_fill_avx512(es_kern *k)
{
    k->isa = "avx512";
    static const struct {
        uint32_t type;
        es_kern_ops ops;
    } tab[] = {
        {ES_QTYPE_Q4_0, {es_act_q8_row_bytes, act_prepare_q, gemm_q4_0, scratch_q, gemm_tiled_q4_0}},
        {ES_QTYPE_Q8_0, {es_act_q8_row_bytes, act_prepare_q, gemm_q8_0, scratch_q, gemm_tiled_q8_0}},
        {ES_QTYPE_Q4_K, {es_act_q8_row_bytes, act_prepare_k, gemm_q4_K, scratch_k, NULL}},
        {ES_QTYPE_Q5_K, {es_act_q8_row_bytes, act_prepare_k, gemm_q5_K, scratch_k, NULL}},
        {ES_QTYPE_Q6_K, {es_act_q8_row_bytes, act_prepare_k, gemm_q6_K, scratch_k, NULL}},
        {ES_QTYPE_Q3_K, {es_act_q8_row_bytes, act_prepare_k, gemm_q3_K, scratch_k, NULL}},
        {ES_QTYPE_Q2_K, {es_act_q8_row_bytes, act_prepare_k2, gemm_q2_K, scratch_k2, NULL}},
        {ES_QTYPE_Q5_0, {es_act_q8_row_bytes, act_prepare_q, gemm_q5_0, scratch_q, NULL}},
        {ES_QTYPE_IQ4_NL, {es_act_q8_row_bytes, act_prepare_q, gemm_iq4_nl, scratch_q, NULL}},
        {ES_QTYPE_IQ4_XS, {es_act_q8_row_bytes, act_prepare_k, gemm_iq4_xs, scratch_q, NULL}},
        {ES_QTYPE_MXFP4, {es_act_q8_row_bytes, act_prepare_q, gemm_mxfp4, scratch_q, NULL}},
        {ES_QTYPE_F32, {es_act_f32_row_bytes, es_act_f32_prepare, gemm_f32, scratch_f, gemm_tiled_f32}},
        {ES_QTYPE_F16, {es_act_f32_row_bytes, es_act_f16r_prepare, gemm_f16, scratch_f, NULL}},
        {ES_QTYPE_BF16, {es_act_f32_row_bytes, es_act_bf16r_prepare, gemm_bf16, scratch_f, NULL}},
    };
    for (size_t i = 0; i < ES_LEN(tab); i++)
        k->op[tab[i].type] = tab[i].ops;
}
