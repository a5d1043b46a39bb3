/*
 * AVX2 kernel table (AVX2, FMA, F16C; no VNNI needed). Built with its own -m flags; exports only
 * es_kern_fill_avx2() (STYLE §6). x86_avxvnni.c builds this file a second time with ES_AVXVNNI
 * defined (and -mavxvnni): the AVX-VNNI table, es_kern_fill_avxvnni().
 *
 * DESIGN: the structure of x86_avx512.c on 256-bit registers: tiles of 8 output rows (one lane
 * per row) decoded once per K-slice into the per-thread scratch, then a register-blocked
 * micro-kernel over the token rows, groups g outer and tokens inner. Without VNNI every integer
 * record but Q2_K's runs tiles of two such columns (16 rows) so that each activation broadcast
 * feeds two products (mk_int2, "two columns per tile" below). On the tile layout
 * (quant/tiles.h), a call of at most one register block of tokens reads the raw tiles in its
 * micro-kernel instead (mk_direct).
 *
 * Integer dot products without VNNI: vpmaddubsw multiplies unsigned weight bytes by signed
 * activation bytes and adds pairs into int16 with saturation, vpmaddwd by ones widens to int32.
 * The int16 stage must never saturate (|x| <= 127):
 *   Q4_0, Q4_K, Q4_1
 *               weights 0..15 (Q4_0: nibble, corrected by -8*sum(x) from the act), pair sums
 *               <= 3810, all 8 groups of a block summed in int16 (<= 30480)
 *   Q5_K, Q5_1, Q5_0
 *               0..31 (Q5_0: q5, corrected by -16*sum(x) from the act): sums of 4 groups
 *               (<= 31496)
 *   Q6_K        0..63 (corrected by -32*sum(x) per half): sums of 2 groups (<= 32004)
 *   Q3_K        0..7 (q + 4, corrected by -4*sum(x) per half): Q6_K's path
 *   Q2_K        sc*q, 0..45 (its 4-bit scale folded in): sums of 2 groups (<= 22860); its mins
 *               per half take the act's half sums of x (c2 with multiplier 1)
 *   Q8_0        signed weights: |w| times x with w's sign moved onto x (vpsignb), each group
 *               widened on its own (pair sums <= 32512); IQ4_NL and IQ4_XS
 *               (levels -127..113) and MXFP4 (levels -12..12, scale 2^(e-128)) are decoded
 *               to signed bytes and use this path
 * so the int32 result is the exact dot product, and the float operations per block are those of
 * kern_scalar.c in the same order: results match the scalar table bit for bit.
 *
 * AVX-VNNI (ES_AVXVNNI): the VEX-encoded vpdpbusd does unsigned-by-signed bytes into int32 in
 * one instruction with no int16 stage and no saturation, on the same operands except Q8_0, whose
 * weights are stored as q + 128 (unsigned, as in x86_avx512.c) with -128 * sum(x) starting the
 * sum, so no vpsignb; the int32 sums are the same exact integers, so that table matches the
 * scalar one bit for bit too.
 * Without the int16 partial sums it has registers for 6 token rows instead of 5.
 *
 * Tile record per block of 32 (REC bytes): u8 q[8 groups][8 rows][4], f32 s[8], f32 m[8]
 * (Q4_K/Q5_K: -(dmin*m); Q6_K: second-half scale); Q2_K's (REC2) s = d, m and a third f32 [8]
 * are the halves' -(dmin*m). Float weights in rows: tiles of 16 rows x K-slice, [k][16] floats,
 * 6 tokens x 2 vectors of accumulators. F32 in the tile layout (the attention's keys and values,
 * short K): tiles of 32 rows, [k][32], the layout's own shape read in place, 3 tokens x 4
 * vectors: a broadcast of x feeds four FMAs instead of two (a broadcast from memory takes a
 * vector pipe on AMD's Zen cores); on long K in rows, where the tile streams from L2, it was no
 * faster (bench/README, "Attention on tiles").
 */
#include "quant/kern.h"

#include "core/cpu.h"

#include <immintrin.h>
#include <string.h>

#ifdef ES_AVXVNNI
#define ISA_NAME "avxvnni"
#define FILL_TABLE es_kern_fill_avxvnni
#define VNNI 1
#else
#define ISA_NAME "avx2"
#define FILL_TABLE es_kern_fill_avx2
#define VNNI 0
#endif

#define NR 8    /* output rows per integer tile */
#define NRF 16  /* output rows per float tile in rows: two ymm */
#define NRF_T 32 /* per F32 tile of the tile layout: four ymm */
#define TBF_T 3  /* token rows per register block on those */
#define TBMAX 6 /* most token rows per register block */
#define REC 320 /* record bytes per block */
#define REC2 352 /* Q2_K's: a third float slot for its second half's mins */
#define ACT256 416

enum { A_Q40, A_Q80, A_Q4K, A_Q5K, A_Q6K, A_Q2K, A_Q50, A_N };
#define REC_OF(kind) ((kind) == A_Q2K ? REC2 : REC)

/* ---- helpers ------------------------------------------------------------------------------- */

static inline __m256i bcst4(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

static inline __m256 bcstf(const void *p)
{
    float v;
    memcpy(&v, p, 4);
    return _mm256_set1_ps(v);
}

static inline __m128i ld16(const uint8_t *p)
{
    return _mm_loadu_si128((const __m128i *)p);
}
static inline __m256i and8(__m256i v, int m)
{
    return _mm256_and_si256(v, _mm256_set1_epi8((char)m));
}
static inline __m256i srl16(__m256i v, int n)
{
    return _mm256_srli_epi16(v, n);
}
static inline __m256i sll16(__m256i v, int n)
{
    return _mm256_slli_epi16(v, n);
}

/* 8 rows (row j at base + j*wrb; rows >= nr read as zero) of 4 dwords -> out[g] lane j = dword g
 * of row j: rows j and j+4 share a register, then two unpack rounds. */
static inline __attribute__((always_inline)) void tr8x4(const uint8_t *base, size_t wrb, int nr,
                                                        __m256i out[4])
{
    __m256i y[4];
#pragma GCC unroll 16
    for (int i = 0; i < 4; i++) {
        __m128i lo = i < nr ? ld16(base + i * wrb) : _mm_setzero_si128();
        __m128i hi = i + 4 < nr ? ld16(base + (i + 4) * wrb) : _mm_setzero_si128();
        y[i] = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
    }
    const __m256i t0 = _mm256_unpacklo_epi32(y[0], y[1]), t1 = _mm256_unpackhi_epi32(y[0], y[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(y[2], y[3]), t3 = _mm256_unpackhi_epi32(y[2], y[3]);
    out[0] = _mm256_unpacklo_epi64(t0, t2);
    out[1] = _mm256_unpackhi_epi64(t0, t2);
    out[2] = _mm256_unpacklo_epi64(t1, t3);
    out[3] = _mm256_unpackhi_epi64(t1, t3);
}

static inline __attribute__((always_inline)) void tr8x8(const uint8_t *base, size_t wrb, int nr,
                                                        __m256i out[8])
{
    tr8x4(base, wrb, nr, out);
    tr8x4(base + 16, wrb, nr, out + 4);
}

/* Lane j of the result: 2 or 4 bytes at base + j*wrb (es_kern_gather_rows). */
static inline __attribute__((always_inline)) __m256i gather_rows(const uint8_t *base, size_t wrb,
                                                                 int nr, const int bytes)
{
    uint64_t q[4];
    es_kern_gather_rows(base, wrb, nr, bytes, q);
    return _mm256_setr_epi64x((long long)q[0], (long long)q[1], (long long)q[2], (long long)q[3]);
}

/* 8 f16 values at base + j*wrb (j < nr; others 0) -> floats. */
static inline __m256 gather_f16(const uint8_t *base, size_t wrb, int nr)
{
    return _mm256_cvtph_ps(_mm256_castsi256_si128(gather_rows(base, wrb, nr, 2)));
}

/* The f16 in the low (hi = 0) or high half of each dword, as 8 floats (exact, as
 * es_f16_to_f32). */
static inline __m256 f16_half(__m256i v, const int hi)
{
    const __m256i h =
        hi ? _mm256_srli_epi32(v, 16) : _mm256_and_si256(v, _mm256_set1_epi32(0xffff));
    return _mm256_cvtph_ps(
        _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
}

/* ---- weight tile decoders ------------------------------------------------------------------ */

typedef void (*decode_fn)(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1,
                          uint8_t *tile);

/* Q4_0: u = nibble (the -8 is in the act correction). */
static void dec_q4_0(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    for (int64_t b = kb0; b < kb1; b++) {
        uint8_t *rec = tile + (b - kb0) * REC;
        __m256i raw[4];
        tr8x4(W + b * 18 + 2, wrb, nr, raw);
#pragma GCC unroll 16
        for (int g = 0; g < 4; g++) {
            _mm256_store_si256((__m256i *)(rec + 32 * g), and8(raw[g], 15));
            _mm256_store_si256((__m256i *)(rec + 32 * (g + 4)), and8(srl16(raw[g], 4), 15));
        }
        _mm256_store_ps((float *)(rec + 256), gather_f16(W + b * 18, wrb, nr));
    }
}

/* Q8_0: AVX2 keeps the signed bytes as they are (the kernel uses the sign trick); AVX-VNNI
 * stores q ^ 0x80 = q + 128, unsigned, and the act correction (c_mult -128) removes the 128. */
static void dec_q8_0(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    const __m256i flip = _mm256_set1_epi8(VNNI ? (char)0x80 : 0);
    for (int64_t b = kb0; b < kb1; b++) {
        uint8_t *rec = tile + (b - kb0) * REC;
        __m256i raw[8];
        tr8x8(W + b * 34 + 2, wrb, nr, raw);
#pragma GCC unroll 16
        for (int g = 0; g < 8; g++)
            _mm256_store_si256((__m256i *)(rec + 32 * g), _mm256_xor_si256(raw[g], flip));
        _mm256_store_ps((float *)(rec + 256), gather_f16(W + b * 34, wrb, nr));
    }
}

/* Signed weights in Q8_0's record (A_Q80): as they are for AVX2's sign trick, + 128 for
 * AVX-VNNI. IQ4_NL, IQ4_XS and MXFP4 use it. */
static inline __m256i q80_enc(__m256i v)
{
    return _mm256_xor_si256(v, _mm256_set1_epi8(VNNI ? (char)0x80 : 0));
}

/* Bits 4i..4i+3 of each dword of v as 0x10 or 0 in its bytes (byte j gets bit 4i + j). */
static inline __m256i qh_to_bytes(__m256i v, int i)
{
    const __m256i first = _mm256_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12,
                                           0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12);
    const __m256i sel = _mm256_set1_epi32(0x08040201);
    const __m256i b = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_srli_epi32(v, 4 * i), first), sel);
    return _mm256_and_si256(_mm256_cmpeq_epi8(b, sel), _mm256_set1_epi8(0x10));
}

/* Q5_0 (d, qh[4], qs[16]): u = q5 (0..31; the -16 is in the act correction, as Q4_0's -8). */
static void dec_q5_0(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    for (int64_t b = kb0; b < kb1; b++) {
        uint8_t *rec = tile + (b - kb0) * REC;
        __m256i raw[4];
        tr8x4(W + b * 22 + 6, wrb, nr, raw);
        const __m256i qh = gather_rows(W + b * 22 + 2, wrb, nr, 4);
#pragma GCC unroll 16
        for (int g = 0; g < 4; g++) {
            const __m256i lo = _mm256_or_si256(and8(raw[g], 15), qh_to_bytes(qh, g));
            const __m256i hi = _mm256_or_si256(and8(srl16(raw[g], 4), 15), qh_to_bytes(qh, g + 4));
            _mm256_store_si256((__m256i *)(rec + 32 * g), lo);
            _mm256_store_si256((__m256i *)(rec + 32 * (g + 4)), hi);
        }
        _mm256_store_ps((float *)(rec + 256), gather_f16(W + b * 22, wrb, nr));
    }
}

/* Q4_1 (d, m, qs[16]) and Q5_1 (d, m, qh[4], qs[16]), value d*q + m: u = q (0..15 / 0..31) in
 * Q4_K's / Q5_K's record, s = d and the mins slot +m, which the act's Q8_1 block sums (ds)
 * multiply, as kern_scalar.c does. */
static inline __attribute__((always_inline)) void dec_q41_q51(const uint8_t *W, size_t wrb, int nr,
                                                              int64_t kb0, int64_t kb1,
                                                              uint8_t *tile, const int q5)
{
    const size_t bb = q5 ? 24 : 20;
    for (int64_t b = kb0; b < kb1; b++) {
        uint8_t *rec = tile + (b - kb0) * REC;
        __m256i raw[4];
        tr8x4(W + b * bb + (q5 ? 8 : 4), wrb, nr, raw);
        const __m256i qh = q5 ? gather_rows(W + b * bb + 4, wrb, nr, 4) : _mm256_setzero_si256();
#pragma GCC unroll 16
        for (int g = 0; g < 4; g++) {
            __m256i lo = and8(raw[g], 15), hi = and8(srl16(raw[g], 4), 15);
            if (q5) {
                lo = _mm256_or_si256(lo, qh_to_bytes(qh, g));
                hi = _mm256_or_si256(hi, qh_to_bytes(qh, g + 4));
            }
            _mm256_store_si256((__m256i *)(rec + 32 * g), lo);
            _mm256_store_si256((__m256i *)(rec + 32 * (g + 4)), hi);
        }
        const __m256i dm = gather_rows(W + b * bb, wrb, nr, 4); /* d low, m high in each dword */
        _mm256_store_ps((float *)(rec + 256), f16_half(dm, 0));
        _mm256_store_ps((float *)(rec + 288), f16_half(dm, 1));
    }
}

static void dec_q4_1(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    dec_q41_q51(W, wrb, nr, kb0, kb1, tile, 0);
}

static void dec_q5_1(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    dec_q41_q51(W, wrb, nr, kb0, kb1, tile, 1);
}

/* The 16 signed levels a nibble picks, in both 128-bit lanes for vpshufb: IQ4_NL / IQ4_XS
 * (kern_scalar.c's iq4_levels) and MXFP4 (its mxfp4_levels, -12..12). */
static inline __m256i iq4_lut(void)
{
    return _mm256_broadcastsi128_si256(_mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1,
                                                     13, 25, 38, 53, 69, 89, 113));
}
static inline __m256i mxfp4_lut(void)
{
    return _mm256_broadcastsi128_si256(
        _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
}

/* 16 bytes of nibbles of 8 rows (transposed in raw) -> the signed levels of lut in the record's
 * 8 groups: low nibbles are weights 0..15, high ones 16..31. */
static inline void nib_groups(__m256i lut, const __m256i raw[4], uint8_t *rec)
{
#pragma GCC unroll 16
    for (int g = 0; g < 4; g++) {
        _mm256_store_si256((__m256i *)(rec + 32 * g), q80_enc(_mm256_shuffle_epi8(lut, and8(raw[g], 15))));
        _mm256_store_si256((__m256i *)(rec + 32 * (g + 4)),
                           q80_enc(_mm256_shuffle_epi8(lut, and8(srl16(raw[g], 4), 15))));
    }
}

static void dec_iq4_nl(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    for (int64_t b = kb0; b < kb1; b++) {
        uint8_t *rec = tile + (b - kb0) * REC;
        __m256i raw[4];
        tr8x4(W + b * 18 + 2, wrb, nr, raw);
        nib_groups(iq4_lut(), raw, rec);
        _mm256_store_ps((float *)(rec + 256), gather_f16(W + b * 18, wrb, nr));
    }
}

/* The MXFP4 scales of 8 rows, 2^(e-128) from each row's E8M0 byte at base + j*wrb, with the bits
 * of es_e8m0_half: (e - 1) << 23, or 0x00200000 << e for e < 2 (subnormal). Rows >= nr get 0. */
static inline __m256 e8m0_half8(const uint8_t *base, size_t wrb, int nr)
{
    const __m128i h = _mm256_castsi256_si128(gather_rows(base, wrb, nr, 2)); /* e | qs[0] << 8 */
    const __m256i e = _mm256_and_si256(_mm256_cvtepu16_epi32(h), _mm256_set1_epi32(0xFF));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i subn = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    const __m256i rows =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_castsi256_ps(_mm256_and_si256(_mm256_blendv_epi8(normal, subn, small), rows));
}

/* MXFP4 (e, qs[16]): the levels -12..12 as signed bytes, IQ4_NL's path; scale 2^(e-128). */
static void dec_mxfp4(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    for (int64_t b = kb0; b < kb1; b++) {
        uint8_t *rec = tile + (b - kb0) * REC;
        __m256i raw[4];
        tr8x4(W + b * 17 + 1, wrb, nr, raw);
        nib_groups(mxfp4_lut(), raw, rec);
        _mm256_store_ps((float *)(rec + 256), e8m0_half8(W + b * 17, wrb, nr));
    }
}

/* IQ4_XS: sub-block j of a 136-byte super-block, scale d * (ls_j - 32) per row (es_iq4xs_scale's
 * operations, per lane). */
static void dec_iq4_xs(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    __m256i dh = _mm256_setzero_si256(), sl = dh;
    __m256 d = _mm256_setzero_ps();
    for (int64_t b = kb0; b < kb1; b++) {
        const uint8_t *sb = W + b / 8 * 136;
        const int j = (int)(b % 8);
        uint8_t *rec = tile + (b - kb0) * REC;
        __m256i raw[4];
        tr8x4(sb + 8 + 16 * j, wrb, nr, raw);
        nib_groups(iq4_lut(), raw, rec);
        if (b == kb0 || j == 0) { /* the super-block's header, a row per lane */
            dh = gather_rows(sb, wrb, nr, 4);     /* d | scales_h << 16 */
            sl = gather_rows(sb + 4, wrb, nr, 4); /* scales_l: sub-block j's 4 bits at 4j */
            d = f16_half(dh, 0);
        }
        const __m256i ls = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi32(sl, 4 * j), _mm256_set1_epi32(15)),
            _mm256_slli_epi32(
                _mm256_and_si256(_mm256_srli_epi32(dh, 16 + 2 * j), _mm256_set1_epi32(3)), 4));
        _mm256_store_ps(
            (float *)(rec + 256),
            _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32)))));
    }
}

/* Q4_K/Q5_K scales of one super-block (header at sb: d, dmin, scales[12]) for its 8 rows: per
 * sub-block j, s = d*sc at rec + j*REC + 256 and -(dmin*m) at + 288, es_k4_scale_min's 6-bit
 * fields taken from every row at once (the header's dwords transposed, a row per lane); the
 * same float operations as the scalar table's, per lane. Rows past nr read as zero. */
static inline __attribute__((always_inline)) void k45_scales(const uint8_t *sb, size_t wrb, int nr,
                                                             uint8_t *rec)
{
    __m256i h[4]; /* d and dmin, scales[0..3], [4..7], [8..11] */
    tr8x4(sb, wrb, nr, h);
    const __m256 d = f16_half(h[0], 0), dmin = f16_half(h[0], 1);
    const __m256i m6 = _mm256_set1_epi32(63), m4 = _mm256_set1_epi32(15), m2 = _mm256_set1_epi32(3);
#pragma GCC unroll 16
    for (int j = 0; j < 8; j++) {
        __m256i sc, mn;
        if (j < 4) {
            sc = _mm256_and_si256(_mm256_srli_epi32(h[1], 8 * j), m6);
            mn = _mm256_and_si256(_mm256_srli_epi32(h[2], 8 * j), m6);
        } else {
            const int sh = 8 * (j - 4);
            const __m256i c = _mm256_srli_epi32(h[3], sh);
            sc = _mm256_or_si256(
                _mm256_and_si256(c, m4),
                _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h[1], sh + 6), m2), 4));
            mn = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi32(c, 4), m4),
                _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h[2], sh + 6), m2), 4));
        }
        _mm256_store_ps((float *)(rec + j * REC + 256), _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc)));
        const __m256 mm = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(mn));
        _mm256_store_ps((float *)(rec + j * REC + 288), _mm256_xor_ps(mm, _mm256_set1_ps(-0.0f)));
    }
}

/* Q4_K/Q5_K: u = q (0..15 / 0..31); scales and mins per sub-block (k45_scales). */
static inline void dec_k45(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1,
                           uint8_t *tile, const int q5)
{
    const size_t sbb = q5 ? 176 : 144, oqs = q5 ? 48 : 16;
    for (int64_t b = kb0; b < kb1; b += 8) {
        const uint8_t *sb = W + b / 8 * sbb;
        uint8_t *rec = tile + (b - kb0) * REC;
        __m256i qh[8];
        if (q5) tr8x8(sb + 16, wrb, nr, qh);
#pragma GCC unroll 16
        for (int cc = 0; cc < 4; cc++) {
            __m256i raw[8];
            tr8x8(sb + oqs + 32 * cc, wrb, nr, raw);
#pragma GCC unroll 16
            for (int g = 0; g < 8; g++) {
                __m256i lo = and8(raw[g], 15), hi = and8(srl16(raw[g], 4), 15);
                if (q5) { /* bit 2cc (2cc+1) of each qh byte -> bit 4 */
                    lo = _mm256_or_si256(lo, and8(sll16(srl16(qh[g], 2 * cc), 4), 0x10));
                    hi = _mm256_or_si256(hi, and8(sll16(srl16(qh[g], 2 * cc + 1), 4), 0x10));
                }
                _mm256_store_si256((__m256i *)(rec + 2 * cc * REC + 32 * g), lo);
                _mm256_store_si256((__m256i *)(rec + (2 * cc + 1) * REC + 32 * g), hi);
            }
        }
        k45_scales(sb, wrb, nr, rec);
    }
}

static void dec_q4_K(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    dec_k45(W, wrb, nr, kb0, kb1, tile, 0);
}

static void dec_q5_K(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    dec_k45(W, wrb, nr, kb0, kb1, tile, 1);
}

/* Q6_K's 16 scales of one super-block for its 8 rows, as es_kern_put_scales16 places
 * es_q6k_row_scales' (d * the signed byte, per lane the scalar table's operation), from the
 * scale bytes transposed a row per lane, not through a stack array. Rows past nr read as zero. */
static inline __attribute__((always_inline)) void q6k_scales(const uint8_t *sb, size_t wrb,
                                                             int nr, uint8_t *rec)
{
    __m256i sc[4]; /* scales[4g .. 4g + 3] of row j in lane j */
    tr8x4(sb + 192, wrb, nr, sc);
    const __m256 d = gather_f16(sb + 208, wrb, nr);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) {
        const __m256i v = _mm256_srai_epi32(_mm256_slli_epi32(sc[i / 4], 24 - 8 * (i % 4)), 24);
        _mm256_store_ps((float *)(rec + (i / 2) * REC + 256 + 32 * (i % 2)),
                        _mm256_mul_ps(d, _mm256_cvtepi32_ps(v)));
    }
}

/* Q6_K: u = q (0..63; the -32 is in the act correction per half). Layout as in x86_avx512.c. */
static void dec_q6_K(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    for (int64_t b = kb0; b < kb1; b += 8) {
        const uint8_t *sb = W + b / 8 * 210;
        uint8_t *rec = tile + (b - kb0) * REC;
#pragma GCC unroll 16
        for (int h = 0; h < 2; h++) {
            __m256i l0[8], l1[8], qh[8];
            tr8x8(sb + 64 * h, wrb, nr, l0);
            tr8x8(sb + 64 * h + 32, wrb, nr, l1);
            tr8x8(sb + 128 + 32 * h, wrb, nr, qh);
            uint8_t *r = rec + 4 * h * REC;
#pragma GCC unroll 16
            for (int g = 0; g < 8; g++) {
                const __m256i q0 = _mm256_or_si256(and8(l0[g], 15), sll16(and8(qh[g], 3), 4));
                const __m256i q1 = _mm256_or_si256(and8(l1[g], 15), and8(sll16(qh[g], 2), 0x30));
                const __m256i q2 = _mm256_or_si256(and8(srl16(l0[g], 4), 15), and8(qh[g], 0x30));
                const __m256i q3 =
                    _mm256_or_si256(and8(srl16(l1[g], 4), 15), and8(srl16(qh[g], 2), 0x30));
                _mm256_store_si256((__m256i *)(r + 0 * REC + 32 * g), q0);
                _mm256_store_si256((__m256i *)(r + 1 * REC + 32 * g), q1);
                _mm256_store_si256((__m256i *)(r + 2 * REC + 32 * g), q2);
                _mm256_store_si256((__m256i *)(r + 3 * REC + 32 * g), q3);
            }
        }
        q6k_scales(sb, wrb, nr, rec);
    }
}

/* Byte k of 16-byte rows transposed by tr8x4 (lane j: row j's byte), as int32 lanes. */
static inline __m256i byte_of(const __m256i h[4], int k)
{
    return _mm256_and_si256(_mm256_srli_epi32(h[k / 4], 8 * (k % 4)), _mm256_set1_epi32(0xff));
}

/* Q3_K's 16 scales of one super-block for its 8 rows, as es_kern_put_scales16 places
 * es_q3k_row_scales' (d * es_q3k_scale, per lane the scalar table's operations), from the 16
 * bytes ending at d (scales[12] at 96, d at 108: read from 94, inside the super-block)
 * transposed a row per lane. Rows past nr read as zero. */
static inline __attribute__((always_inline)) void q3k_scales(const uint8_t *sb, size_t wrb,
                                                             int nr, uint8_t *rec)
{
    __m256i h[4]; /* byte k of the 16: scales[k - 2]; d in bytes 14, 15 */
    tr8x4(sb + 94, wrb, nr, h);
    const __m256 d = f16_half(h[3], 1);
    const __m256i m4 = _mm256_set1_epi32(15), m2 = _mm256_set1_epi32(3);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) {
        const __m256i lo = i < 8 ? _mm256_and_si256(byte_of(h, 2 + i), m4)
                                 : _mm256_srli_epi32(byte_of(h, 2 + i - 8), 4);
        const __m256i hi =
            _mm256_and_si256(_mm256_srli_epi32(byte_of(h, 2 + 8 + i % 4), 2 * (i / 4)), m2);
        const __m256i v =
            _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
        _mm256_store_ps((float *)(rec + (i / 2) * REC + 256 + 32 * (i % 2)),
                        _mm256_mul_ps(d, _mm256_cvtepi32_ps(v)));
    }
}

/* Q3_K: u = q2 | hbit << 2 (0..7; the -4 is in the act correction per half), its 16 scales of
 * 16 weights placed as Q6_K's halves (layout in qtypes.c's dq_q3_K). */
static void dec_q3_K(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    for (int64_t b = kb0; b < kb1; b += 8) {
        const uint8_t *sb = W + b / 8 * 110;
        uint8_t *rec = tile + (b - kb0) * REC;
        __m256i hm[8];
        tr8x8(sb, wrb, nr, hm);
#pragma GCC unroll 16
        for (int h = 0; h < 2; h++) {
            __m256i qs[8];
            tr8x8(sb + 32 + 32 * h, wrb, nr, qs);
#pragma GCC unroll 16
            for (int j = 0; j < 4; j++) {
                const int p = 4 * h + j; /* hmask bit, moved to bit 2 */
#pragma GCC unroll 16
                for (int g = 0; g < 8; g++) {
                    const __m256i q2 = and8(srl16(qs[g], 2 * j), 3);
                    const __m256i hb = and8(p > 2 ? srl16(hm[g], p - 2) : sll16(hm[g], 2 - p), 4);
                    _mm256_store_si256((__m256i *)(rec + (4 * h + j) * REC + 32 * g),
                                       _mm256_or_si256(q2, hb));
                }
            }
        }
        q3k_scales(sb, wrb, nr, rec);
    }
}

/* Q2_K: u = sc * q (0..45: the 4-bit scale folded in, so one sum and d serve the block; layout
 * in qtypes.c's dq_q2_K), by one vpmullw per two bytes (q_even + 256 q_odd times sc keeps each
 * product in its byte); record floats d, then each half's -(dmin*m) (REC2). */
static void dec_q2_K(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    for (int64_t b = kb0; b < kb1; b += 8) {
        const uint8_t *sb = W + b / 8 * 84;
        uint8_t *rec = tile + (b - kb0) * REC2;
        /* per sub-block i, a row per lane: sc in both 16-bit halves, -(dmin * m) */
        __m256i hdr[4], sc[16];
        __m256 m[16];
        tr8x4(sb, wrb, nr, hdr);
        const __m256i dh = gather_rows(sb + 80, wrb, nr, 4);
        const __m256 d = f16_half(dh, 0), dmin = f16_half(dh, 1);
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            const __m256i x = byte_of(hdr, i), lo = _mm256_and_si256(x, _mm256_set1_epi32(15));
            sc[i] = _mm256_or_si256(lo, _mm256_slli_epi32(lo, 16));
            m[i] = _mm256_xor_ps(_mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_srli_epi32(x, 4))),
                                 _mm256_set1_ps(-0.0f));
        }
#pragma GCC unroll 16
        for (int h = 0; h < 2; h++) {
            __m256i qs[8];
            tr8x8(sb + 16 + 32 * h, wrb, nr, qs);
#pragma GCC unroll 16
            for (int j = 0; j < 4; j++) {
                const int blk = 4 * h + j;
                uint8_t *r = rec + blk * REC2;
#pragma GCC unroll 16
                for (int g = 0; g < 8; g++) {
                    _mm256_store_si256((__m256i *)(r + 32 * g),
                                       _mm256_mullo_epi16(and8(srl16(qs[g], 2 * j), 3),
                                                          sc[2 * blk + g / 4]));
                }
                _mm256_store_ps((float *)(r + 256), d);
                _mm256_store_ps((float *)(r + 288), m[2 * blk]);
                _mm256_store_ps((float *)(r + 320), m[2 * blk + 1]);
            }
        }
    }
}

/* ---- integer micro-kernel ----------------------------------------------------------------------
 */

static inline __m256i lane_mask(int n) /* the low n of 8 lanes (n <= 0: none) */
{
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

static inline __m256i lane_range(int lo, int hi) /* lanes [lo, hi) of 8 */
{
    return _mm256_andnot_si256(lane_mask(lo), lane_mask(hi));
}

static inline int tb_of(int kind)
{
#ifdef ES_AVXVNNI
    return kind == A_Q6K ? 4 : 6;
#endif
    switch (kind) {
    case A_Q40:
    case A_Q4K:
    case A_Q80:
    case A_Q50:
        return 5;
    case A_Q5K:
    case A_Q2K:
        return 4;
    default:
        return 3;
    }
}

/* One block's float step for one token and 8 output rows, the scalar table's operations in its
 * order: acc is the block's exact int32 sums, rec its record, x the token's act row at the
 * slice's first block (od, ods, oc2 the offsets of its d, ds and c2 there), flo Q6_K's first half
 * already scaled. Returns y plus the block. */
static inline __attribute__((always_inline)) __m256 block_y(const int kind, __m256i acc, __m256 flo,
                                                            const uint8_t *rec, const uint8_t *x,
                                                            int64_t b, int64_t od, int64_t ods,
                                                            int64_t oc2, __m256 y)
{
    __m256 f;
    if (kind == A_Q6K)
        f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), _mm256_load_ps((const float *)(rec + 288)),
                            flo);
    else
        f = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), _mm256_load_ps((const float *)(rec + 256)));
    if (kind == A_Q2K) { /* the act's c2 holds the halves' sums of x */
        f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(bcst4(x + oc2 + 8 * b)),
                            _mm256_load_ps((const float *)(rec + 288)), f);
        f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(bcst4(x + oc2 + 8 * b + 4)),
                            _mm256_load_ps((const float *)(rec + 320)), f);
    }
    y = _mm256_fmadd_ps(f, bcstf(x + od + 4 * b), y);
    if (kind == A_Q4K || kind == A_Q5K)
        y = _mm256_fmadd_ps(_mm256_load_ps((const float *)(rec + 288)), bcstf(x + ods + 4 * b), y);
    return y;
}

static inline __attribute__((always_inline)) void mk_int(const int kind, const int T,
                                                         const es_kern_block *a)
{
    const int gs = kind == A_Q40 || kind == A_Q4K   ? 8
                   : kind == A_Q5K || kind == A_Q50 ? 4
                   : kind == A_Q6K || kind == A_Q2K ? 2
                                                    : 1;
    const int64_t K = a->K, kb0 = a->k0 / 32, nbs = a->nk / 32;
    const int64_t od = es_act_q8_off_d(K) + 4 * kb0, ods = es_act_q8_off_ds(K) + 4 * kb0;
    const int64_t oc = es_act_q8_off_c(K) + 4 * kb0, oc2 = es_act_q8_off_c2(K) + 8 * kb0;
    const __m256i ones = _mm256_set1_epi16(1), m = lane_range(a->lo, a->hi);
    __m256 y[TBMAX];
    const uint8_t *xr[TBMAX];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        xr[t] = a->xr[t];
        y[t] = a->load_y ? _mm256_maskload_ps(a->yp[t], m) : _mm256_setzero_ps();
    }
    const uint8_t *rec = a->tile;
    for (int64_t b = 0; b < nbs; b++, rec += REC_OF(kind)) {
        const int64_t oq = 32 * (kb0 + b);
        if (a->pf) es_kern_prefetch_step(a, b, NR);
        __m256i acc[TBMAX], s16[TBMAX];
        __m256 flo[TBMAX];
#pragma GCC unroll 6
        for (int t = 0; t < T; t++)
            acc[t] = kind == A_Q40 || kind == A_Q50 || (VNNI && kind == A_Q80)
                         ? bcst4(xr[t] + oc + 4 * b)
                         : kind == A_Q6K ? bcst4(xr[t] + oc2 + 8 * b) : _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            const __m256i w = _mm256_load_si256((const __m256i *)(rec + 32 * g));
            const __m256i aw = kind == A_Q80 && !VNNI ? _mm256_abs_epi8(w) : w;
#pragma GCC unroll 6
            for (int t = 0; t < T; t++) {
                const __m256i xb = bcst4(xr[t] + oq + 4 * g);
#ifdef ES_AVXVNNI
                acc[t] = _mm256_dpbusd_avx_epi32(acc[t], aw, xb);
                (void)s16;
                (void)ones;
                (void)gs;
#else
                if (kind == A_Q80) {
                    const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xb, w));
                    acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(p, ones));
                    __asm__("" : "+x"(acc[t]));
                } else {
                    const __m256i p = _mm256_maddubs_epi16(w, xb);
                    s16[t] = g % gs == 0 ? p : _mm256_add_epi16(s16[t], p);
                    /* keeps the running sum in one register: without it gcc reassociates the
                     * adds into a tree over all 8 products and spills most of them */
                    __asm__("" : "+x"(s16[t]));
                }
#endif
            }
#ifndef ES_AVXVNNI
            if (kind != A_Q80 && g % gs == gs - 1)
#pragma GCC unroll 6
                for (int t = 0; t < T; t++)
                    acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(s16[t], ones));
#endif
            if (kind == A_Q6K && g == 3) {
                const __m256 s = _mm256_load_ps((const float *)(rec + 256));
#pragma GCC unroll 6
                for (int t = 0; t < T; t++) {
                    flo[t] = _mm256_mul_ps(_mm256_cvtepi32_ps(acc[t]), s);
                    acc[t] = bcst4(xr[t] + oc2 + 8 * b + 4);
                }
            }
        }
#pragma GCC unroll 6
        for (int t = 0; t < T; t++)
            y[t] = block_y(kind, acc[t], kind == A_Q6K ? flo[t] : _mm256_setzero_ps(), rec, xr[t],
                           b, od, ods, oc2, y[t]);
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++)
        _mm256_maskstore_ps(a->yp[t], m, y[t]);
}

#define MK(kind, T)                                                                                \
    __attribute__((unused)) static void mk_##kind##_##T(const es_kern_block *a)                    \
    {                                                                                              \
        mk_int(kind, T, a);                                                                        \
    }
#define MK_ALL(kind) MK(kind, 1) MK(kind, 2) MK(kind, 3) MK(kind, 4) MK(kind, 5) MK(kind, 6)
MK_ALL(A_Q40)
MK_ALL(A_Q80)
MK_ALL(A_Q4K)
MK_ALL(A_Q5K)
MK_ALL(A_Q6K)
MK_ALL(A_Q2K)
MK_ALL(A_Q50)
typedef void (*mk_fn)(const es_kern_block *a);
#define MK_ROW(kind)                                                                               \
    {                                                                                              \
        NULL, mk_##kind##_1, mk_##kind##_2, mk_##kind##_3, mk_##kind##_4, mk_##kind##_5,           \
            mk_##kind##_6                                                                          \
    }
static const mk_fn mk_table[A_N][TBMAX + 1] = {MK_ROW(A_Q40), MK_ROW(A_Q80), MK_ROW(A_Q4K),
                                               MK_ROW(A_Q5K), MK_ROW(A_Q6K), MK_ROW(A_Q2K),
                                               MK_ROW(A_Q50)};

/* ---- two columns per tile (AVX2 without VNNI; every integer record but Q2_K's) ---------------
 *
 * Without VNNI each vpmaddubsw needs its 4 activation bytes broadcast into a register first, and
 * on AMD Zen 3 that broadcast from memory takes a vector pipe: one broadcast per product held a
 * loop of broadcast + vpmaddubsw + vpaddw at 50-64 % of the vpmaddubsw peak, one broadcast
 * feeding two products (two 8-row columns of weights, 16 output rows) at 84 % (same loop,
 * measured side by side). So a tile is two 8-row records, decoded by the one-column decoders,
 * the second column's records after the first's, and the register block is 5 tokens x 2
 * columns: per token two int16 sums (10 of the 16 ymm; the float sums stay in a stack buffer, in
 * L1), two weight vectors, the broadcast and a product. Kinds whose int16 sums span fewer than
 * the 8 groups of a block (Q5_K, Q5_0: 4; Q6_K, Q3_K: 2) widen them into int32 sums that wait in
 * another stack buffer between flushes (Q6_K's first half leaves there scaled, as mk_int's flo),
 * so registers still hold only the int16 sums. The int32 and float operations per block and
 * column are those of mk_int, in the same order (int32 sums are exact in any order): results are
 * bit-identical to the one-column kernel's. A tile whose wanted rows end in its first column
 * (the end of a range) runs mk_int on it. Q8_0's record (Q8_0, IQ4_NL, IQ4_XS, MXFP4 in the row
 * layout) takes the same tiles with its sign trick and int32 sums per group, 4 tokens x 2
 * columns (its |w| of both columns also take registers). Gains on Zen 3 (bench/README.md): Q4_0,
 * Q4_K 1.2-1.25x; Q8_0 1.1-1.3x at 128 and 512 rows, within noise at 16; Q5_K, Q6_K, Q3_K, Q5_1
 * 1.1-1.4x at 128 and 512 rows, Q5_0 1.05-1.15x. Q2_K keeps one column: two measured no faster
 * (its decode and float epilogue weigh more). Q8_0 in the tile layout keeps one column, which
 * its direct kernel reads.
 */
#define TB2 5 /* token rows per two-column register block */
#if !VNNI
#define COLUMNS(kind) ((kind) != A_Q2K ? 2 : 1)
/* Q8_0 in the tile layout keeps one column: its direct kernel reads 8-row tiles (mk_direct) */
#define COLUMNS_TILED(kind) ((kind) == A_Q80 ? 1 : COLUMNS(kind))
#define TB2_OF(kind) ((kind) == A_Q80 ? 4 : TB2) /* Q8_0 also holds |w| of both columns */

static inline __attribute__((always_inline)) void mk_int2(const int kind, const int T,
                                                          const es_kern_block *a)
{
    /* groups per int16 sum, as mk_int; a block's int32 sums of kinds with fewer than 8 wait in
     * a stack buffer (L1) between those flushes, so only the int16 sums hold registers */
    const int gs = kind == A_Q40 || kind == A_Q4K || kind == A_Q80 ? 8
                   : kind == A_Q5K || kind == A_Q50                ? 4
                                                                   : 2;
    const int64_t K = a->K, kb0 = a->k0 / 32, nbs = a->nk / 32;
    const int64_t od = es_act_q8_off_d(K) + 4 * kb0, ods = es_act_q8_off_ds(K) + 4 * kb0;
    const int64_t oc = es_act_q8_off_c(K) + 4 * kb0, oc2 = es_act_q8_off_c2(K) + 8 * kb0;
    const int q8 = kind == A_Q80;
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i m[2] = {lane_range(a->lo, a->hi), lane_range(a->lo - NR, a->hi - NR)};
    float ybuf[TB2][16] __attribute__((aligned(32)));
    int32_t ibuf[TB2][16] __attribute__((aligned(32))); /* int32 sums so far (gs < 8) */
    float fbuf[TB2][16] __attribute__((aligned(32)));   /* Q6_K: its first half, scaled */
    const uint8_t *xr[TB2];
#pragma GCC unroll 5
    for (int t = 0; t < T; t++) {
        xr[t] = a->xr[t];
#pragma GCC unroll 2
        for (int c = 0; c < 2; c++)
            _mm256_store_ps(ybuf[t] + 8 * c, a->load_y ? _mm256_maskload_ps(a->yp[t] + 8 * c, m[c])
                                                       : _mm256_setzero_ps());
    }
    const uint8_t *rec0 = a->tile, *rec1 = a->tile + nbs * REC_OF(kind);
    for (int64_t b = 0; b < nbs; b++, rec0 += REC_OF(kind), rec1 += REC_OF(kind)) {
        const int64_t oq = 32 * (kb0 + b);
        if (a->pf) es_kern_prefetch_step(a, b, 2 * NR);
        /* int16 sums of gs groups, or Q8_0's int32 sums */
        __m256i s16[2][TB2];
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            const __m256i w0 = _mm256_load_si256((const __m256i *)(rec0 + 32 * g));
            const __m256i w1 = _mm256_load_si256((const __m256i *)(rec1 + 32 * g));
            const __m256i a0 = q8 ? _mm256_abs_epi8(w0) : w0, a1 = q8 ? _mm256_abs_epi8(w1) : w1;
#pragma GCC unroll 5
            for (int t = 0; t < T; t++) {
                const __m256i xb = bcst4(xr[t] + oq + 4 * g);
                if (q8) { /* the sign trick, each group widened on its own (mk_int) */
                    const __m256i p0 = _mm256_madd_epi16(
                        _mm256_maddubs_epi16(a0, _mm256_sign_epi8(xb, w0)), ones);
                    const __m256i p1 = _mm256_madd_epi16(
                        _mm256_maddubs_epi16(a1, _mm256_sign_epi8(xb, w1)), ones);
                    s16[0][t] = g == 0 ? p0 : _mm256_add_epi32(s16[0][t], p0);
                    s16[1][t] = g == 0 ? p1 : _mm256_add_epi32(s16[1][t], p1);
                } else {
                    const __m256i p0 = _mm256_maddubs_epi16(a0, xb);
                    const __m256i p1 = _mm256_maddubs_epi16(a1, xb);
                    s16[0][t] = g % gs == 0 ? p0 : _mm256_add_epi16(s16[0][t], p0);
                    s16[1][t] = g % gs == 0 ? p1 : _mm256_add_epi16(s16[1][t], p1);
                }
                __asm__("" : "+x"(s16[0][t]), "+x"(s16[1][t])); /* one running sum each */
            }
            if (gs == 8 || g % gs != gs - 1) continue;
            /* widen the int16 sums into the block's int32 ones; Q6_K's first half (g == 3)
             * leaves scaled by its scale, mk_int's flo */
#pragma GCC unroll 5
            for (int t = 0; t < T; t++)
#pragma GCC unroll 2
                for (int c = 0; c < 2; c++) {
                    const int first = kind == A_Q6K ? g % 4 == gs - 1 : g == gs - 1;
                    __m256i v = _mm256_madd_epi16(s16[c][t], ones);
                    if (!first)
                        v = _mm256_add_epi32(v, _mm256_load_si256((const __m256i *)ibuf[t] + c));
                    else if (kind == A_Q6K)
                        v = _mm256_add_epi32(v, bcst4(xr[t] + oc2 + 8 * b + 4 * (g / 4)));
                    else if (kind == A_Q50)
                        v = _mm256_add_epi32(v, bcst4(xr[t] + oc + 4 * b));
                    if (kind == A_Q6K && g == 3)
                        _mm256_store_ps(fbuf[t] + 8 * c,
                                        _mm256_mul_ps(_mm256_cvtepi32_ps(v),
                                                      _mm256_load_ps((const float *)((
                                                          c ? rec1 : rec0) + 256))));
                    else
                        _mm256_store_si256((__m256i *)ibuf[t] + c, v);
                }
        }
#pragma GCC unroll 5
        for (int t = 0; t < T; t++)
#pragma GCC unroll 2
            for (int c = 0; c < 2; c++) {
                __m256i acc;
                if (gs < 8)
                    acc = _mm256_load_si256((const __m256i *)ibuf[t] + c);
                else
                    acc = _mm256_add_epi32(kind == A_Q40 ? bcst4(xr[t] + oc + 4 * b)
                                                         : _mm256_setzero_si256(),
                                           q8 ? s16[c][t] : _mm256_madd_epi16(s16[c][t], ones));
                const __m256 flo = kind == A_Q6K ? _mm256_load_ps(fbuf[t] + 8 * c)
                                                 : _mm256_setzero_ps();
                _mm256_store_ps(ybuf[t] + 8 * c,
                                block_y(kind, acc, flo, c ? rec1 : rec0, xr[t], b, od, ods, oc2,
                                        _mm256_load_ps(ybuf[t] + 8 * c)));
            }
    }
#pragma GCC unroll 5
    for (int t = 0; t < T; t++)
#pragma GCC unroll 2
        for (int c = 0; c < 2; c++)
            _mm256_maskstore_ps(a->yp[t] + 8 * c, m[c], _mm256_load_ps(ybuf[t] + 8 * c));
}

#define MK2(kind, T)                                                                               \
    static void mk2_##kind##_##T(const es_kern_block *a)                                           \
    {                                                                                              \
        mk_int2(kind, T, a);                                                                       \
    }
#define MK2_ALL(kind) MK2(kind, 1) MK2(kind, 2) MK2(kind, 3) MK2(kind, 4) MK2(kind, 5)
MK2_ALL(A_Q40)
MK2_ALL(A_Q4K)
MK2_ALL(A_Q5K)
MK2_ALL(A_Q6K)
MK2_ALL(A_Q50)
MK2(A_Q80, 1) MK2(A_Q80, 2) MK2(A_Q80, 3) MK2(A_Q80, 4)
#define MK2_ROW(kind)                                                                              \
    [kind] = {NULL, mk2_##kind##_1, mk2_##kind##_2, mk2_##kind##_3, mk2_##kind##_4, mk2_##kind##_5}
static const mk_fn mk2_table[A_N][TB2 + 1] = {
    MK2_ROW(A_Q40), MK2_ROW(A_Q4K), MK2_ROW(A_Q5K), MK2_ROW(A_Q6K), MK2_ROW(A_Q50),
    [A_Q80] = {NULL, mk2_A_Q80_1, mk2_A_Q80_2, mk2_A_Q80_3, mk2_A_Q80_4, NULL}};
#else
#define COLUMNS(kind) 1
#define COLUMNS_TILED(kind) 1
#define TB2_OF(kind) TB2
#endif

/* The micro-kernel of each kind for the driver: two columns where the tile has them and its
 * wanted rows reach the second. */
static inline void run_kind(const int kind, const es_kern_block *b)
{
#if !VNNI
    if (COLUMNS(kind) == 2 && b->hi > NR) {
        mk2_table[kind][b->T](b);
        return;
    }
#endif
    mk_table[kind][b->T](b);
}
#define RUN(kind)                                                                                  \
    static void run_##kind(const es_kern_block *b)                                                 \
    {                                                                                              \
        run_kind(kind, b);                                                                         \
    }
RUN(A_Q40)
RUN(A_Q80)
RUN(A_Q4K)
RUN(A_Q5K)
RUN(A_Q6K)
RUN(A_Q2K)
RUN(A_Q50)
static void (*const run_table[A_N])(const es_kern_block *) = {
    run_A_Q40, run_A_Q80, run_A_Q4K, run_A_Q5K, run_A_Q6K, run_A_Q2K, run_A_Q50};

static es_kern_tiling int_tiling(int kind, int tiled,
                                 void (*decode)(const es_kern_tile *, uint8_t *))
{
    const int cols = tiled ? COLUMNS_TILED(kind) : COLUMNS(kind);
    return (es_kern_tiling){.tile_rows = cols * NR,
                            .unit = 256,
                            .tile_bytes = 8 * (size_t)cols * REC_OF(kind),
                            .act_bytes = ACT256,
                            .act_row_bytes = es_act_q8_row_bytes,
                            .tb = cols == 2 ? TB2_OF(kind) : tb_of(kind),
                            .narrow_rows = cols == 2 ? NR : 0,
                            .tb_narrow = tb_of(kind),
                            .even_split = 1,
                            .tiled = tiled,
                            .decode = decode,
                            .kernel = run_table[kind]};
}

/* Row layout: the tile's first column of rows, and its second (records after the first's, where
 * the kernels read it: nbs * REC_OF(kind)) when the tile has one and the wanted rows reach it. */
static inline __attribute__((always_inline)) void decode_rows(decode_fn dec, const int kind,
                                                              const es_kern_tile *t, uint8_t *tile)
{
    const int64_t kb0 = t->k0 / 32, kb1 = t->k1 / 32;
    const uint8_t *W = (const uint8_t *)t->W + t->nt * t->wrb;
    dec(W, t->wrb, t->hi < NR ? t->hi : NR, kb0, kb1, tile);
    if (COLUMNS(kind) == 2 && t->hi > NR)
        dec(W + NR * t->wrb, t->wrb, t->hi - NR, kb0, kb1, tile + (kb1 - kb0) * REC_OF(kind));
}

static size_t scratch_int(int64_t K)
{
    size_t most = 0;
    for (int kind = A_Q40; kind < A_N; kind++) {
        const es_kern_tiling tl = int_tiling(kind, 0, NULL);
        const size_t s = es_kern_drive_scratch(&tl, K);
        most = s > most ? s : most;
    }
    return most;
}

#define GEMM_INT(name, kind, dec, type)                                                            \
    static void name##_decode(const es_kern_tile *t, uint8_t *tile)                                \
    {                                                                                              \
        decode_rows(dec, kind, t, tile);                                                           \
    }                                                                                              \
    static void name(const void *W, int64_t K, int64_t n0, int64_t n1, const void *act,            \
                     const int32_t *rows, int64_t n_rows, float *Y, int64_t ldy, int accumulate,   \
                     void *scratch)                                                                \
    {                                                                                              \
        ES_ASSERT(K % 32 == 0);                                                                    \
        const es_kern_tiling tl = int_tiling(kind, 0, name##_decode);                              \
        es_kern_drive(&tl, type, W, K, 0, n0, n1, act, rows, n_rows, Y, ldy, accumulate, scratch); \
    }
GEMM_INT(gemm_q4_0, A_Q40, dec_q4_0, ES_QTYPE_Q4_0)
GEMM_INT(gemm_q8_0, A_Q80, dec_q8_0, ES_QTYPE_Q8_0)
GEMM_INT(gemm_q4_K, A_Q4K, dec_q4_K, ES_QTYPE_Q4_K)
GEMM_INT(gemm_q5_K, A_Q5K, dec_q5_K, ES_QTYPE_Q5_K)
GEMM_INT(gemm_q6_K, A_Q6K, dec_q6_K, ES_QTYPE_Q6_K)
GEMM_INT(gemm_q3_K, A_Q6K, dec_q3_K, ES_QTYPE_Q3_K)
GEMM_INT(gemm_q2_K, A_Q2K, dec_q2_K, ES_QTYPE_Q2_K)
GEMM_INT(gemm_q5_0, A_Q50, dec_q5_0, ES_QTYPE_Q5_0)
GEMM_INT(gemm_q4_1, A_Q4K, dec_q4_1, ES_QTYPE_Q4_1)
GEMM_INT(gemm_q5_1, A_Q5K, dec_q5_1, ES_QTYPE_Q5_1)
GEMM_INT(gemm_iq4_nl, A_Q80, dec_iq4_nl, ES_QTYPE_IQ4_NL)
GEMM_INT(gemm_iq4_xs, A_Q80, dec_iq4_xs, ES_QTYPE_IQ4_XS)
GEMM_INT(gemm_mxfp4, A_Q80, dec_mxfp4, ES_QTYPE_MXFP4)

/* ---- tiled weights (quant/tiles.h) ----------------------------------------------------------
 *
 * The 8-row tile s (rows 8s .. 8s+7) of a 32-row tile of the layout reads, per block, dword
 * group g as the 32 bytes at 2nt + 4nt*g + 32s and its f16 scales at 16s: no transposes. Rows
 * past the end of a short last tile read as zero (masked loads). The records and micro-kernels
 * are those of the row layout, so results are bit-identical to it.
 */

typedef void (*tdecode_fn)(const uint8_t *Wt, int nt, int s, int64_t kb0, int64_t kb1,
                           uint8_t *tile);

static inline __attribute__((always_inline)) void dec_t_q(const int q8, const uint8_t *Wt,
                                                          const int nt, int s, int64_t kb0,
                                                          int64_t kb1, uint8_t *tile)
{
    const size_t bb = q8 ? 34 : 18, tbb = (size_t)nt * bb;
    const int n = nt - 8 * s < 8 ? nt - 8 * s : 8; /* rows of this 8-row tile */
    const __m256i m = lane_mask(n);
    for (int64_t b = kb0; b < kb1; b++) {
        const uint8_t *src = Wt + (size_t)b * tbb, *q = src + 2 * nt + 32 * s;
        uint8_t *rec = tile + (b - kb0) * REC;
        __m256 d;
        if (n == 8) {
            d = _mm256_cvtph_ps(ld16(src + 16 * s));
        } else {
            uint16_t h[8] = {0};
            memcpy(h, src + 16 * s, 2 * (size_t)n);
            d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
        }
        _mm256_store_ps((float *)(rec + 256), d);
        for (int g = 0; g < (q8 ? 8 : 4); g++) { /* constant bound once inlined */
            const int *p = (const int *)(q + 4 * nt * g);
            const __m256i v = n == 8 ? _mm256_loadu_si256((const __m256i *)p)
                                     : _mm256_maskload_epi32(p, m);
            if (q8) { /* the encoding of dec_q8_0 */
                _mm256_store_si256((__m256i *)(rec + 32 * g),
                                   _mm256_xor_si256(v, _mm256_set1_epi8(VNNI ? (char)0x80 : 0)));
            } else {
                _mm256_store_si256((__m256i *)(rec + 32 * g), and8(v, 15));
                _mm256_store_si256((__m256i *)(rec + 32 * (g + 4)), and8(srl16(v, 4), 15));
            }
        }
    }
}

static void dec_t_q4_0(const uint8_t *Wt, int nt, int s, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    if (nt == ES_TILE_ROWS)
        dec_t_q(0, Wt, ES_TILE_ROWS, s, kb0, kb1, tile);
    else
        dec_t_q(0, Wt, nt, s, kb0, kb1, tile);
}

static void dec_t_q8_0(const uint8_t *Wt, int nt, int s, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    if (nt == ES_TILE_ROWS)
        dec_t_q(1, Wt, ES_TILE_ROWS, s, kb0, kb1, tile);
    else
        dec_t_q(1, Wt, nt, s, kb0, kb1, tile);
}

/* The tile's 8-row sub-tile of the 32-row layout tile, and the next one as its second column
 * (decode_rows). */
static inline __attribute__((always_inline)) void decode_tiled(tdecode_fn dec, const int cols,
                                                               const es_kern_tile *t, uint8_t *tile)
{
    const int64_t kb0 = t->k0 / 32, kb1 = t->k1 / 32, t0 = t->nt / ES_TILE_ROWS * ES_TILE_ROWS;
    const int s = (int)(t->nt - t0) / NR, rows = es_tile_rows(t->N, t0);
    const uint8_t *Wt = (const uint8_t *)t->W + t0 * t->wrb;
    dec(Wt, rows, s, kb0, kb1, tile);
    if (cols == 2 && t->hi > NR) dec(Wt, rows, s + 1, kb0, kb1, tile + (kb1 - kb0) * REC);
}

/*
 * A few rows on the tile layout (es_kern_tiling.direct): a call whose token rows all fit one
 * register block would decode each tile for those rows alone, and at a handful of rows the
 * decode costs as much as the products (x86_avx512.c's mk_direct, bench/README.md). This kernel
 * reads the tile's part of the layout's raw tile-blocks itself (a->tile: the slice's first
 * tile-block of the whole 32-row layout tile holding the tile, at row a->sub of it; column c's
 * dword group g at 2*32 + 128g + 4(sub + 8c), its f16 scales at 2(sub + 8c)), splits the nibbles
 * (Q4_0) in registers or takes Q8_0's bytes as they are, and runs the products of the kernel the
 * decoded tile would have taken: mk_int2 (Q4_0, two columns) or mk_int (Q8_0, one column). Groups g
 * and g + 4 of Q4_0 come from one load, so their products are summed in another order, but into
 * exact integers (int16 sums of at most 8 products of |q| <= 15 and |x| <= 127, the file's note),
 * and the float operations per block are the kernel's, in its order: the same bits as decode +
 * kernel. The avxvnni table has none yet: the machine they were measured on could not run it
 * (AMD Zen 4 lacks the VEX encoding of VNNI).
 */
#if !VNNI
static inline __attribute__((always_inline)) void mk_direct(const int q8, const int T,
                                                            const es_kern_block *a)
{
    const int cols = q8 ? 1 : 2;
    const size_t bs = (size_t)ES_TILE_ROWS * (q8 ? 34 : 18); /* bytes per tile-block */
    const int64_t K = a->K, kb0 = a->k0 / 32, nbs = a->nk / 32;
    const int64_t od = es_act_q8_off_d(K) + 4 * kb0, oc = es_act_q8_off_c(K) + 4 * kb0;
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i m[2] = {lane_range(a->lo, a->hi), lane_range(a->lo - NR, a->hi - NR)};
    float ybuf[TBMAX][2 * NR] __attribute__((aligned(32)));
    const uint8_t *xr[TBMAX];
#pragma GCC unroll 6
    for (int t = 0; t < T; t++) {
        xr[t] = a->xr[t];
#pragma GCC unroll 2
        for (int c = 0; c < cols; c++)
            _mm256_store_ps(ybuf[t] + NR * c, a->load_y
                                                  ? _mm256_maskload_ps(a->yp[t] + NR * c, m[c])
                                                  : _mm256_setzero_ps());
    }
    const uint8_t *src = a->tile;
    for (int64_t b = 0; b < nbs; b++, src += bs) {
        const int64_t oq = 32 * (kb0 + b);
        if (a->pf) es_kern_prefetch_step(a, b, cols * NR);
        const uint8_t *q = src + 2 * ES_TILE_ROWS + 4 * a->sub;
        /* Q4_0 starts from the act's correction term (-8 sum(x)), as mk_int does */
        __m256i acc[2][TBMAX], s16[2][TBMAX];
#pragma GCC unroll 6
        for (int t = 0; t < T; t++)
#pragma GCC unroll 2
            for (int c = 0; c < cols; c++)
                acc[c][t] = q8 ? _mm256_setzero_si256() : bcst4(xr[t] + oc + 4 * b);
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            if (!q8 && g == 4) break; /* Q4_0: four dwords, two nibbles each */
            __m256i w[2][2];          /* [column][low nibbles (group g), high (g + 4)] */
#pragma GCC unroll 2
            for (int c = 0; c < cols; c++) {
                const __m256i raw =
                    _mm256_loadu_si256((const __m256i *)(q + 4 * ES_TILE_ROWS * g + 4 * NR * c));
                if (q8) {
                    w[c][0] = raw;
                } else {
                    w[c][0] = and8(raw, 15);
                    w[c][1] = and8(srl16(raw, 4), 15);
                }
            }
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                if (q8 && h == 1) break;
#pragma GCC unroll 6
                for (int t = 0; t < T; t++) {
                    const __m256i xb = bcst4(xr[t] + oq + 4 * (g + 4 * h));
#pragma GCC unroll 2
                    for (int c = 0; c < cols; c++) {
                        if (q8) {
                            const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(w[c][0]),
                                                                   _mm256_sign_epi8(xb, w[c][0]));
                            acc[c][t] = _mm256_add_epi32(acc[c][t], _mm256_madd_epi16(p, ones));
                        } else {
                            const __m256i p = _mm256_maddubs_epi16(w[c][h], xb);
                            s16[c][t] = g + h == 0 ? p : _mm256_add_epi16(s16[c][t], p);
                            __asm__("" : "+x"(s16[c][t])); /* one running sum (mk_int's note) */
                        }
                    }
                }
            }
        }
#pragma GCC unroll 6
        for (int t = 0; t < T; t++) {
            const __m256 xd = bcstf(xr[t] + od + 4 * b);
#pragma GCC unroll 2
            for (int c = 0; c < cols; c++) {
                if (!q8)
                    acc[c][t] = _mm256_add_epi32(acc[c][t], _mm256_madd_epi16(s16[c][t], ones));
                const __m256 d = _mm256_cvtph_ps(ld16(src + 2 * (a->sub + NR * c)));
                const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(acc[c][t]), d);
                _mm256_store_ps(ybuf[t] + NR * c,
                                _mm256_fmadd_ps(f, xd, _mm256_load_ps(ybuf[t] + NR * c)));
            }
        }
    }
#pragma GCC unroll 6
    for (int t = 0; t < T; t++)
#pragma GCC unroll 2
        for (int c = 0; c < cols; c++)
            _mm256_maskstore_ps(a->yp[t] + NR * c, m[c], _mm256_load_ps(ybuf[t] + NR * c));
}

ES_KERN_DIRECT_Q4_0_Q8_0(mk_direct)
#define DIRECT(fn) fn
#else
#define DIRECT(fn) NULL
#endif

/* direct_kernel: NULL, or the kernel for calls of at most one register block of rows */
#define GEMM_TILED(name, kind, dec, direct_kernel, type)                                           \
    static void name##_decode(const es_kern_tile *t, uint8_t *tile)                                \
    {                                                                                              \
        decode_tiled(dec, COLUMNS_TILED(kind), t, tile);                                           \
    }                                                                                              \
    static void name(const void *W, int64_t K, int64_t N, int64_t n0, int64_t n1, const void *act, \
                     const int32_t *rows, int64_t n_rows, float *Y, int64_t ldy, int accumulate,   \
                     void *scratch)                                                                \
    {                                                                                              \
        ES_ASSERT(K % 32 == 0);                                                                    \
        es_kern_tiling tl = int_tiling(kind, 1, name##_decode);                                    \
        tl.direct = direct_kernel;                                                                 \
        tl.tb_direct = tl.tb;                                                                      \
        es_kern_drive(&tl, type, W, K, N, n0, n1, act, rows, n_rows, Y, ldy, accumulate, scratch); \
    }
GEMM_TILED(gemm_tiled_q4_0, A_Q40, dec_t_q4_0, DIRECT(run_direct_q4_0), ES_QTYPE_Q4_0)
GEMM_TILED(gemm_tiled_q8_0, A_Q80, dec_t_q8_0, DIRECT(run_direct_q8_0), ES_QTYPE_Q8_0)

/* ---- activations ---------------------------------------------------------------------------- */

static inline float hmax8(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

static inline int32_t hsum8i(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* Bit-identical to es_act_q8_prepare() (gb = 1: one scale per block of 32), to
 * es_act_q8_1_prepare() (gb = 1, q81) and to es_act_q8k_prepare() (gb = 8: one per 256) in q, d,
 * ds: max|x| is exact in any order, the
 * scale is the same IEEE operations, and vcvtps2dq rounds to nearest even like lrintf. */
static void act_q8(const float *X, int64_t ldx, int64_t n_rows, int64_t K, void *act, int gb,
                   int32_t c_mult, int32_t c2_mult, int q81)
{
    ES_ASSERT(K % (32 * gb) == 0);
    const int64_t nb = K / 32;
    const size_t rb = es_act_q8_row_bytes(K);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t r = 0; r < n_rows; r++) {
        const float *x = X + r * ldx;
        uint8_t *row = (uint8_t *)act + r * rb;
        float *d = (float *)(row + es_act_q8_off_d(K));
        float *ds = (float *)(row + es_act_q8_off_ds(K));
        int32_t *c = (int32_t *)(row + es_act_q8_off_c(K));
        int32_t *c2 = (int32_t *)(row + es_act_q8_off_c2(K));
        for (int64_t b0 = 0; b0 < nb; b0 += gb) {
            __m256 amax = _mm256_setzero_ps();
            for (int64_t i = 0; i < 4 * gb; i++)
                amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 32 * b0 + 8 * i)));
            const float am = hmax8(amax);
            float id;
            const float db = es_act_group_scale(am, gb, &id);
            const __m256 vid = _mm256_set1_ps(id);
            for (int64_t b = b0; b < b0 + gb; b++) {
                __m256i q[4];
#pragma GCC unroll 16
                for (int i = 0; i < 4; i++)
                    q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * b + 8 * i), vid));
                const int32_t s0 = hsum8i(_mm256_add_epi32(q[0], q[1]));
                const int32_t s1 = hsum8i(_mm256_add_epi32(q[2], q[3]));
                /* int32 -> int8: values are within [-127, 127], so the saturating packs are
                 * exact; packs interleave 128-bit lanes, the permute puts them back in order */
                __m256i p16a = _mm256_packs_epi32(q[0], q[1]), p16b = _mm256_packs_epi32(q[2], q[3]);
                __m256i p8 = _mm256_packs_epi16(p16a, p16b);
                p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
                _mm256_storeu_si256((__m256i *)(row + 32 * b), p8);
                d[b] = db;
                ds[b] = q81 ? es_act_q8_1_sum(am, s0 + s1) : db * (float)(s0 + s1);
                c[b] = c_mult * (s0 + s1);
                c2[2 * b] = c2_mult * s0;
                c2[2 * b + 1] = c2_mult * s1;
            }
        }
        const size_t used = (size_t)es_act_q8_off_c2(K) + (size_t)nb * 8;
        memset(row + used, 0, rb - used);
    }
}

static void act_q4_0(const float *X, int64_t ldx, int64_t n, int64_t K, void *act)
{
    act_q8(X, ldx, n, K, act, 1, -8, 0, 0);
}
/* Q5_0: the weights are q5 (0..31), c = -16 * sum(x) */
static void act_q5_0(const float *X, int64_t ldx, int64_t n, int64_t K, void *act)
{
    act_q8(X, ldx, n, K, act, 1, -16, 0, 0);
}
static void act_q8_0(const float *X, int64_t ldx, int64_t n, int64_t K, void *act)
{
    act_q8(X, ldx, n, K, act, 1, VNNI ? -128 : 0, 0, 0);
}
/* K-quant weights: one scale per 256 values, as llama.cpp's Q8_K (kern.h) */
static void act_k45(const float *X, int64_t ldx, int64_t n, int64_t K, void *act)
{
    act_q8(X, ldx, n, K, act, 8, 0, 0, 0);
}
/* Q4_1 / Q5_1: llama.cpp's Q8_1, Q8_0 with its block sums in ds (es_act_q8_1_sum) */
static void act_q8_1(const float *X, int64_t ldx, int64_t n, int64_t K, void *act)
{
    act_q8(X, ldx, n, K, act, 1, 0, 0, 1);
}
/* IQ4_XS: Q8_K as llama.cpp's vec_dot, in Q8_0's correction (its weights use that record) */
static void act_iq4_xs(const float *X, int64_t ldx, int64_t n, int64_t K, void *act)
{
    act_q8(X, ldx, n, K, act, 8, VNNI ? -128 : 0, 0, 0);
}
static void act_q6_K(const float *X, int64_t ldx, int64_t n, int64_t K, void *act)
{
    act_q8(X, ldx, n, K, act, 8, 0, -32, 0);
}
static void act_q3_K(const float *X, int64_t ldx, int64_t n, int64_t K, void *act)
{
    act_q8(X, ldx, n, K, act, 8, 0, -4, 0);
}
/* Q2_K: c2 holds the halves' sums of x themselves, which its mins multiply */
static void act_q2_K(const float *X, int64_t ldx, int64_t n, int64_t K, void *act)
{
    act_q8(X, ldx, n, K, act, 8, 0, 1, 0);
}

/* ---- float weights ----------------------------------------------------------------------------
 */

/* tile[k - k0][16] floats for rows [0, nr) (others zero), k in [k0, k1). */
static void dec_f(uint32_t type, const uint8_t *W, size_t wrb, int nr, int64_t k0, int64_t k1,
                  float *tile)
{
    for (int j = 0; j < NRF; j++) {
        if (j >= nr) {
            for (int64_t k = k0; k < k1; k++)
                tile[(k - k0) * NRF + j] = 0.0f;
            continue;
        }
        const uint8_t *p = W + j * wrb;
        int64_t k = k0;
        float buf[8];
        for (; k + 8 <= k1; k += 8) {
            __m256 v;
            if (type == ES_QTYPE_F32)
                v = _mm256_loadu_ps((const float *)p + k);
            else if (type == ES_QTYPE_F16)
                v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + k)));
            else
                v = _mm256_castsi256_ps(
                    _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(
                                          (const __m128i *)((const uint16_t *)p + k))),
                                      16));
            _mm256_storeu_ps(buf, v);
#pragma GCC unroll 16
            for (int i = 0; i < 8; i++)
                tile[(k - k0 + i) * NRF + j] = buf[i];
        }
        for (; k < k1; k++) {
            float v;
            if (type == ES_QTYPE_F32)
                memcpy(&v, p + 4 * k, 4);
            else {
                uint16_t h;
                memcpy(&h, p + 2 * k, 2);
                v = type == ES_QTYPE_F16 ? es_f16_to_f32(h) : es_bf16_to_f32(h);
            }
            tile[(k - k0) * NRF + j] = v;
        }
    }
}

/* T token rows x C ymm columns of a [k][8 * C] float tile */
static inline __attribute__((always_inline)) void mk_flt(const int T, const int C,
                                                         const es_kern_block *a)
{
    __m256i m[4];
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) m[c] = lane_range(a->lo - 8 * c, a->hi - 8 * c);
    __m256 y[TBMAX][4];
    const float *xr[TBMAX];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        xr[t] = (const float *)a->xr[t] + a->k0;
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            y[t][c] = a->load_y ? _mm256_maskload_ps(a->yp[t] + 8 * c, m[c]) : _mm256_setzero_ps();
    }
    const float *tp = (const float *)a->tile;
    const int64_t nk = a->nk;
    for (int64_t k = 0; k < nk; k++, tp += 8 * C) {
        __m256 w[4];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) w[c] = _mm256_load_ps(tp + 8 * c);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const __m256 x = _mm256_broadcast_ss(xr[t] + k);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) y[t][c] = _mm256_fmadd_ps(w[c], x, y[t][c]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) _mm256_maskstore_ps(a->yp[t] + 8 * c, m[c], y[t][c]);
}

#define MKF(T, C)                                                                                  \
    static void mkf##C##_##T(const es_kern_block *a)                                               \
    {                                                                                              \
        mk_flt(T, C, a);                                                                           \
    }
MKF(1, 2)
MKF(2, 2)
MKF(3, 2)
MKF(4, 2)
MKF(5, 2)
MKF(6, 2)
MKF(1, 4)
MKF(2, 4)
MKF(3, 4)
static const mk_fn mkf_table[TBMAX + 1] = {NULL, mkf2_1, mkf2_2, mkf2_3, mkf2_4, mkf2_5, mkf2_6};
_Static_assert(TBF_T == 3, "one mkf4_T per block height");
static const mk_fn mkf_t_table[TBF_T + 1] = {NULL, mkf4_1, mkf4_2, mkf4_3};
static void run_flt(const es_kern_block *b)
{
    mkf_table[b->T](b);
}
static void run_flt_t(const es_kern_block *b)
{
    mkf_t_table[b->T](b);
}

static es_kern_tiling flt_tiling(void (*decode)(const es_kern_tile *, uint8_t *))
{
    return es_kern_float_tiling(NRF, TBMAX, decode, run_flt);
}
/* F32 in the tile layout */
static es_kern_tiling flt_t_tiling(void (*decode)(const es_kern_tile *, uint8_t *))
{
    return es_kern_float_tiling(NRF_T, TBF_T, decode, run_flt_t);
}

static size_t scratch_f(int64_t K)
{
    const es_kern_tiling tl = flt_tiling(NULL), tt = flt_t_tiling(NULL);
    const size_t a = es_kern_drive_scratch(&tl, K), b = es_kern_drive_scratch(&tt, K);
    return a > b ? a : b;
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
ES_KERN_GEMM_TILED_F32(flt_t_tiling, NRF_T)

void FILL_TABLE(es_kern *k)
{
    k->isa = ISA_NAME;
    static const struct {
        uint32_t type;
        es_kern_ops ops;
    } tab[] = {
        {ES_QTYPE_Q4_0, {es_act_q8_row_bytes, act_q4_0, gemm_q4_0, scratch_int, gemm_tiled_q4_0}},
        {ES_QTYPE_Q8_0, {es_act_q8_row_bytes, act_q8_0, gemm_q8_0, scratch_int, gemm_tiled_q8_0}},
        {ES_QTYPE_Q4_K, {es_act_q8_row_bytes, act_k45, gemm_q4_K, scratch_int, NULL}},
        {ES_QTYPE_Q5_K, {es_act_q8_row_bytes, act_k45, gemm_q5_K, scratch_int, NULL}},
        {ES_QTYPE_Q6_K, {es_act_q8_row_bytes, act_q6_K, gemm_q6_K, scratch_int, NULL}},
        {ES_QTYPE_Q3_K, {es_act_q8_row_bytes, act_q3_K, gemm_q3_K, scratch_int, NULL}},
        {ES_QTYPE_Q2_K, {es_act_q8_row_bytes, act_q2_K, gemm_q2_K, scratch_int, NULL}},
        {ES_QTYPE_Q5_0, {es_act_q8_row_bytes, act_q5_0, gemm_q5_0, scratch_int, NULL}},
        {ES_QTYPE_Q4_1, {es_act_q8_row_bytes, act_q8_1, gemm_q4_1, scratch_int, NULL}},
        {ES_QTYPE_Q5_1, {es_act_q8_row_bytes, act_q8_1, gemm_q5_1, scratch_int, NULL}},
        {ES_QTYPE_IQ4_NL, {es_act_q8_row_bytes, act_q8_0, gemm_iq4_nl, scratch_int, NULL}},
        {ES_QTYPE_IQ4_XS, {es_act_q8_row_bytes, act_iq4_xs, gemm_iq4_xs, scratch_int, NULL}},
        {ES_QTYPE_MXFP4, {es_act_q8_row_bytes, act_q8_0, gemm_mxfp4, scratch_int, NULL}},
        {ES_QTYPE_F32, {es_act_f32_row_bytes, es_act_f32_prepare, gemm_f32, scratch_f, gemm_tiled_f32}},
        {ES_QTYPE_F16, {es_act_f32_row_bytes, es_act_f16r_prepare, gemm_f16, scratch_f, NULL}},
        {ES_QTYPE_BF16, {es_act_f32_row_bytes, es_act_bf16r_prepare, gemm_bf16, scratch_f, NULL}},
    };
    for (size_t i = 0; i < ES_LEN(tab); i++)
        k->op[tab[i].type] = tab[i].ops;
}
