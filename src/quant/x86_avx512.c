/*
 * AVX-512 kernel table (F, BW, VL, DQ, VNNI; BF16 when present). Built with its own -m flags;
 * exports only es_kern_fill_avx512() (STYLE §6).
 *
 * DESIGN. es_gemm() walks tiles of NR = 16 output rows. For each tile and K-slice it decodes the
 * weights once into the per-thread scratch, then runs a register-blocked micro-kernel over all
 * token rows, TB = 8 tokens at a time, before moving to the next tile.
 *
 * Integer weights. Tile layout, per block of 32 weights ("block record", bs bytes):
 *     u8  q[8][16][4]   group g (weights 4g..4g+3 of the block) of output row j in lane j
 *     f32 s[16]         per-row scale (Q4_0/Q8_0: d; Q4_K/Q5_K: d*sc; Q6_K: d*sc of half 0)
 *     f32 m[16]         Q4_K/Q5_K: -(dmin*m); Q6_K: d*sc of half 1 (absent for Q4_0/Q8_0)
 * vpdpbusd multiplies unsigned bytes (first source) by signed bytes (second source, the one that
 * can be broadcast from memory). So the weights are the unsigned side: each is stored as
 * (signed value + 128) for Q4_0 (nibble + 120), Q8_0 (q ^ 0x80) and Q6_K (q + 96), and the
 * accumulator starts at -128 * sum(x) of the block (Q6_K: of each half), which the act
 * preparation stores; Q4_K/Q5_K weights are unsigned already (0..15, 0..31) and start at 0. The
 * int32 result is then the exact dot product of the true integer weights with the int8
 * activations. Per block and token: 8 vpdpbusd (16 rows x 32 k = 512 MACs) and 3 float ops
 * (convert, scale, fused multiply-add into the float accumulator).
 *
 * The decode gathers 2 blocks (64 bytes) of each of the 16 rows into one zmm per row, turns them
 * into the unsigned encoding, and transposes the 16x16 dwords (unpack 32/64, then two rounds of
 * 128-bit lane shuffles), which puts group g of every row into one vector. Scales come from
 * 16-lane gathers of the block headers.
 *
 * Float weights (F32, F16, BF16 without AVX512_BF16): tiles of 32 rows x a K-slice of floats,
 * [k][32]; the micro-kernel keeps 8 tokens x 2 vectors of accumulators and does one FMA per
 * weight vector and broadcast activation, k in increasing order. BF16 with AVX512_BF16: the tile
 * holds bf16 pairs [k/2][32][2], activations are rounded to bf16 pairs, and vdpbf16ps does 2 k
 * per lane per instruction (within tolerance of scalar, not bit-identical).
 *
 * The float operations per block are those of kern_scalar.c in the same order, so for equal
 * activations the results match the scalar table exactly except on the bf16 dot-product path.
 */
#include "quant/kern.h"

#include "core/cpu.h"

#include <immintrin.h>
#include <string.h>

#define NR 16  /* output rows per integer tile: the 16 int32 lanes of a zmm */
#define TB 8   /* token rows per register block */
#define NRF 32 /* output rows per float tile: two zmm */
#define BS_Q 576
#define BS_K 640

enum { KQ, KM, K6 }; /* kernel kinds: offset-128 weights; unsigned + mins; Q6_K halves */

/* ---- cache-sized slices -------------------------------------------------------------------- */

/* Blocks of 32 per K-slice for the integer tiles: the decoded tile (bs bytes per block) should
 * stay in L1 together with the activation lines streaming past it; a multiple of 8 so K-quant
 * super-blocks are never split. */
static int64_t slice_blocks(size_t bs)
{
    size_t l1 = es_cpu_get()->l1d_bytes;
    int64_t n = (int64_t)(l1 * 3 / 4 / bs) / 8 * 8;
    return n < 8 ? 8 : n;
}

/* k per slice for the float tiles (multiple of 32). */
static int64_t slice_k(size_t bytes_per_k)
{
    size_t l1 = es_cpu_get()->l1d_bytes;
    int64_t n = (int64_t)(l1 / 2 / bytes_per_k) / 32 * 32;
    return n < 32 ? 32 : n;
}

/* ---- helpers ------------------------------------------------------------------------------- */

static inline __m512i bcst4(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

static inline __m512 bcstf(const void *p)
{
    float v;
    memcpy(&v, p, 4);
    return _mm512_set1_ps(v);
}

/* 16x16 dword transpose in registers: on return r[i] lane j = old r[j] lane i. */
static inline void tr16(__m512i r[16])
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

/* Transposes r (16 rows x 2 blocks) and stores the groups of both blocks into their records
 * (the second only if two). */
static inline void store_pair(__m512i r[16], uint8_t *rec0, size_t bs, int two)
{
    tr16(r);
    for (int g = 0; g < 8; g++) _mm512_store_si512(rec0 + 64 * g, r[g]);
    if (two)
        for (int g = 0; g < 8; g++) _mm512_store_si512(rec0 + bs + 64 * g, r[8 + g]);
}

/* Byte offsets of the 16 rows of a tile (rows past nr repeat row 0; their lanes are never
 * stored), for gathers of per-row header fields. */
static inline __m512i row_offsets(size_t wrb, int nr)
{
    __m512i j = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    j = _mm512_maskz_mov_epi32((__mmask16)((1u << nr) - 1), j);
    return _mm512_mullo_epi32(j, _mm512_set1_epi32((int32_t)wrb));
}

static inline __m512 f16_lo(__m512i v) /* low halves of 16 dwords -> floats */
{
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}

static inline __m512 f16_hi(__m512i v)
{
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
}

/* ---- weight tile decoders (integer) ---------------------------------------------------------- */

typedef void (*decode_fn)(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1,
                          uint8_t *tile);

/* Q4_0: u = nibble + 120, so u - 128 = nibble - 8. */
static void dec_q4_0(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1,
                     uint8_t *tile)
{
    const __m256i m4 = _mm256_set1_epi8(15);
    const __m512i off = _mm512_set1_epi8(120);
    const __m512i idx = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
    const __m512i ro = row_offsets(wrb, nr);
    for (int64_t b = kb0; b < kb1; b += 2) {
        const int two = b + 1 < kb1;
        __m512i r[16];
        for (int j = 0; j < 16; j++) {
            if (j >= nr) {
                r[j] = _mm512_setzero_si512();
                continue;
            }
            const uint8_t *x = W + j * wrb + b * 18 + 2;
            __m256i y = _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)x));
            if (two) y = _mm256_inserti128_si256(y, _mm_loadu_si128((const __m128i *)(x + 18)), 1);
            __m256i lo = _mm256_and_si256(y, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(y, 4), m4);
            /* [lo b, hi b, lo b+1, hi b+1]: elements 0..15, 16..31 of each block */
            __m512i z = _mm512_permutex2var_epi64(_mm512_castsi256_si512(lo), idx,
                                                  _mm512_castsi256_si512(hi));
            r[j] = _mm512_add_epi8(z, off);
        }
        uint8_t *rec = tile + (b - kb0) * BS_Q;
        store_pair(r, rec, BS_Q, two);
        for (int h = 0; h <= two; h++) {
            __m512i d = _mm512_i32gather_epi32(ro, W + (b + h) * 18, 1);
            _mm512_store_ps(rec + h * BS_Q + 512, f16_lo(d));
        }
    }
}

/* Q8_0: u = q ^ 0x80 = q + 128. */
static void dec_q8_0(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1,
                     uint8_t *tile)
{
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const __m512i ro = row_offsets(wrb, nr);
    for (int64_t b = kb0; b < kb1; b += 2) {
        const int two = b + 1 < kb1;
        __m512i r[16];
        for (int j = 0; j < 16; j++) {
            if (j >= nr) {
                r[j] = _mm512_setzero_si512();
                continue;
            }
            const uint8_t *x = W + j * wrb + b * 34 + 2;
            __m512i z = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)x));
            if (two) z = _mm512_inserti64x4(z, _mm256_loadu_si256((const __m256i *)(x + 34)), 1);
            r[j] = _mm512_xor_si512(z, flip);
        }
        uint8_t *rec = tile + (b - kb0) * BS_Q;
        store_pair(r, rec, BS_Q, two);
        for (int h = 0; h <= two; h++) {
            __m512i d = _mm512_i32gather_epi32(ro, W + (b + h) * 34, 1);
            _mm512_store_ps(rec + h * BS_Q + 512, f16_lo(d));
        }
    }
}

/* Q4_K/Q5_K scales of one super-block for 16 rows: s = d*sc, m = -(dmin*m) per sub-block j,
 * into the 8 records at rec. hdr points at the super-block of row 0 (d, dmin, scales[12]). */
static inline void k45_scales(const uint8_t *hdr, __m512i ro, uint8_t *rec)
{
    const __m512i dd = _mm512_i32gather_epi32(ro, hdr, 1);
    const __m512i A = _mm512_i32gather_epi32(ro, hdr + 4, 1);  /* scales[0..3] */
    const __m512i B = _mm512_i32gather_epi32(ro, hdr + 8, 1);  /* scales[4..7] */
    const __m512i C = _mm512_i32gather_epi32(ro, hdr + 12, 1); /* scales[8..11] */
    const __m512 d = f16_lo(dd), dmin = f16_hi(dd);
    const __m512i m6 = _mm512_set1_epi32(63), m4 = _mm512_set1_epi32(15),
                  m2 = _mm512_set1_epi32(3);
    for (int j = 0; j < 8; j++) {
        __m512i sc, mn;
        if (j < 4) {
            sc = _mm512_and_si512(_mm512_srli_epi32(A, 8 * j), m6);
            mn = _mm512_and_si512(_mm512_srli_epi32(B, 8 * j), m6);
        } else {
            const int s = 8 * (j - 4);
            __m512i c = _mm512_srli_epi32(C, s);
            sc = _mm512_or_si512(_mm512_and_si512(c, m4),
                                 _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(A, s + 6), m2), 4));
            mn = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(c, 4), m4),
                                 _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(B, s + 6), m2), 4));
        }
        _mm512_store_ps(rec + j * BS_K + 512, _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
        const __m512 mm = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(mn));
        _mm512_store_ps(rec + j * BS_K + 576, _mm512_xor_ps(mm, _mm512_set1_ps(-0.0f)));
    }
}

/* Q4_K (qh == 0) and Q5_K: chunk c of qs holds sub-block 2c (low nibbles) and 2c+1 (high);
 * Q5_K's fifth bit of element l of sub-block s is bit s of qh[l]. u = q, no offset. */
static inline void dec_k45(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1,
                           uint8_t *tile, const int q5)
{
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    const __m512i ro = row_offsets(wrb, nr);
    const size_t sbb = q5 ? 176 : 144; /* super-block bytes */
    const size_t oqs = q5 ? 48 : 16;   /* qs offset */
    for (int64_t b = kb0; b < kb1; b += 8) {
        const uint8_t *sb0 = W + b / 8 * sbb;
        uint8_t *rec = tile + (b - kb0) * BS_K;
        for (int c = 0; c < 4; c++) {
            __m512i r[16];
            for (int j = 0; j < 16; j++) {
                if (j >= nr) {
                    r[j] = _mm512_setzero_si512();
                    continue;
                }
                const uint8_t *sb = sb0 + j * wrb;
                __m256i y = _mm256_loadu_si256((const __m256i *)(sb + oqs + 32 * c));
                __m256i lo = _mm256_and_si256(y, m4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(y, 4), m4);
                if (q5) {
                    __m256i qh = _mm256_loadu_si256((const __m256i *)(sb + 16));
                    __m256i b0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one);
                    __m256i b1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one);
                    lo = _mm256_or_si256(lo, _mm256_slli_epi16(b0, 4));
                    hi = _mm256_or_si256(hi, _mm256_slli_epi16(b1, 4));
                }
                r[j] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            }
            store_pair(r, rec + 2 * c * BS_K, BS_K, 1);
        }
        k45_scales(sb0, ro, rec);
    }
}

static void dec_q4_K(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1,
                     uint8_t *tile)
{
    dec_k45(W, wrb, nr, kb0, kb1, tile, 0);
}

static void dec_q5_K(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1,
                     uint8_t *tile)
{
    dec_k45(W, wrb, nr, kb0, kb1, tile, 1);
}

/* Q6_K: half h (128 weights) of a super-block is 4 blocks of 32: from ql[64h..64h+31] low
 * nibbles, ql[64h+32..] low, ql[64h..] high, ql[64h+32..] high, with 2 bits each from qh[32h+l]
 * (bits 0-1, 2-3, 4-5, 6-7). u = q + 96, so u - 128 = q - 32. Scales: signed byte per 16. */
static void dec_q6_K(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1,
                     uint8_t *tile)
{
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
    const __m256i off = _mm256_set1_epi8(96);
    const __m512i ro = row_offsets(wrb, nr);
    for (int64_t b = kb0; b < kb1; b += 8) {
        const uint8_t *sb0 = W + b / 8 * 210;
        uint8_t *rec = tile + (b - kb0) * BS_K;
        for (int h = 0; h < 2; h++) {
            __m512i r0[16], r1[16];
            for (int j = 0; j < 16; j++) {
                if (j >= nr) {
                    r0[j] = r1[j] = _mm512_setzero_si512();
                    continue;
                }
                const uint8_t *sb = sb0 + j * wrb;
                __m256i l0 = _mm256_loadu_si256((const __m256i *)(sb + 64 * h));
                __m256i l1 = _mm256_loadu_si256((const __m256i *)(sb + 64 * h + 32));
                __m256i qh = _mm256_loadu_si256((const __m256i *)(sb + 128 + 32 * h));
                __m256i q0 = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                             _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
                __m256i q1 = _mm256_or_si256(
                    _mm256_and_si256(l1, m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
                __m256i q2 = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
                __m256i q3 = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
                q0 = _mm256_add_epi8(q0, off);
                q1 = _mm256_add_epi8(q1, off);
                q2 = _mm256_add_epi8(q2, off);
                q3 = _mm256_add_epi8(q3, off);
                r0[j] = _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);
                r1[j] = _mm512_inserti64x4(_mm512_castsi256_si512(q2), q3, 1);
            }
            store_pair(r0, rec + (4 * h) * BS_K, BS_K, 1);
            store_pair(r1, rec + (4 * h + 2) * BS_K, BS_K, 1);
        }
        /* scales[16] at 192, d at 208 */
        const __m512 d = f16_lo(_mm512_i32gather_epi32(ro, sb0 + 208, 1));
        for (int q = 0; q < 4; q++) {
            const __m512i s = _mm512_i32gather_epi32(ro, sb0 + 192 + 4 * q, 1);
            for (int i = 0; i < 4; i++) {
                /* scale 4q+i: sign-extend byte i of each lane */
                __m512i v = _mm512_srai_epi32(_mm512_slli_epi32(s, 24 - 8 * i), 24);
                const int sub = 4 * q + i; /* block sub/2, half sub%2 */
                _mm512_store_ps(rec + (sub / 2) * BS_K + 512 + 64 * (sub % 2),
                                _mm512_mul_ps(d, _mm512_cvtepi32_ps(v)));
            }
        }
    }
}

/* ---- integer micro-kernel --------------------------------------------------------------------- */

typedef struct mk_args {
    const uint8_t *tile;
    int64_t nbs;            /* blocks in the slice */
    int64_t kb0;            /* first block of the slice */
    int64_t K;
    const uint8_t *xr[TB];  /* act rows */
    float *yp[TB];          /* Y + row*ldy + first column of the tile */
    __mmask16 m;            /* valid columns */
    int load_y;
} mk_args;

static inline __attribute__((always_inline)) void mk_int(const int kind, const int T,
                                                         const mk_args *a)
{
    const size_t bs = kind == KQ ? BS_Q : BS_K;
    const int64_t K = a->K, kb0 = a->kb0;
    const int64_t od = es_act_q8_off_d(K) + 4 * kb0, ods = es_act_q8_off_ds(K) + 4 * kb0;
    const int64_t oc = es_act_q8_off_c(K) + 4 * kb0, oc2 = es_act_q8_off_c2(K) + 8 * kb0;
    __m512 y[TB];
    const uint8_t *xr[TB];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        xr[t] = a->xr[t];
        y[t] = a->load_y ? _mm512_maskz_loadu_ps(a->m, a->yp[t]) : _mm512_setzero_ps();
    }
    const uint8_t *tb = a->tile;
    for (int64_t b = 0; b < a->nbs; b++, tb += bs) {
        __m512i w[8];
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) w[g] = _mm512_load_si512(tb + 64 * g);
        const __m512 ws = _mm512_load_ps(tb + 512);
        const __m512 w2 = kind == KQ ? ws : _mm512_load_ps(tb + 576);
        const int64_t oq = 32 * (kb0 + b);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const uint8_t *x = xr[t] + oq;
            __m512 f;
            if (kind == K6) {
                __m512i lo = bcst4(xr[t] + oc2 + 8 * b), hi = bcst4(xr[t] + oc2 + 8 * b + 4);
                lo = _mm512_dpbusd_epi32(lo, w[0], bcst4(x + 0));
                lo = _mm512_dpbusd_epi32(lo, w[1], bcst4(x + 4));
                lo = _mm512_dpbusd_epi32(lo, w[2], bcst4(x + 8));
                lo = _mm512_dpbusd_epi32(lo, w[3], bcst4(x + 12));
                hi = _mm512_dpbusd_epi32(hi, w[4], bcst4(x + 16));
                hi = _mm512_dpbusd_epi32(hi, w[5], bcst4(x + 20));
                hi = _mm512_dpbusd_epi32(hi, w[6], bcst4(x + 24));
                hi = _mm512_dpbusd_epi32(hi, w[7], bcst4(x + 28));
                f = _mm512_mul_ps(_mm512_cvtepi32_ps(lo), ws);
                f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), w2, f);
            } else {
                __m512i acc = kind == KQ ? bcst4(xr[t] + oc + 4 * b) : _mm512_setzero_si512();
#pragma GCC unroll 8
                for (int g = 0; g < 8; g++) acc = _mm512_dpbusd_epi32(acc, w[g], bcst4(x + 4 * g));
                f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), ws);
            }
            y[t] = _mm512_fmadd_ps(f, bcstf(xr[t] + od + 4 * b), y[t]);
            if (kind == KM) y[t] = _mm512_fmadd_ps(w2, bcstf(xr[t] + ods + 4 * b), y[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(a->yp[t], a->m, y[t]);
}

#define MK(kind, T)                                                                                \
    static void mk_##kind##_##T(const mk_args *a) { mk_int(kind, T, a); }
#define MK_ALL(kind)                                                                               \
    MK(kind, 1) MK(kind, 2) MK(kind, 3) MK(kind, 4) MK(kind, 5) MK(kind, 6) MK(kind, 7) MK(kind, 8)
MK_ALL(KQ)
MK_ALL(KM)
MK_ALL(K6)
typedef void (*mk_fn)(const mk_args *a);
static const mk_fn mk_table[3][TB + 1] = {
    {NULL, mk_KQ_1, mk_KQ_2, mk_KQ_3, mk_KQ_4, mk_KQ_5, mk_KQ_6, mk_KQ_7, mk_KQ_8},
    {NULL, mk_KM_1, mk_KM_2, mk_KM_3, mk_KM_4, mk_KM_5, mk_KM_6, mk_KM_7, mk_KM_8},
    {NULL, mk_K6_1, mk_K6_2, mk_K6_3, mk_K6_4, mk_K6_5, mk_K6_6, mk_K6_7, mk_K6_8},
};

static void gemm_int(int kind, decode_fn dec, uint32_t type, const void *W, int64_t K, int64_t n0,
                     int64_t n1, const void *act, const int32_t *rows, int64_t n_rows, float *Y,
                     int64_t ldy, int accumulate, void *scratch)
{
    ES_ASSERT(K % 32 == 0 && ((uintptr_t)scratch & 63) == 0);
    const size_t bs = kind == KQ ? BS_Q : BS_K;
    const int64_t nb = K / 32, ksb = slice_blocks(bs);
    const size_t wrb = es_qtype_row_bytes(type, K), arb = es_act_q8_row_bytes(K);
    mk_args a;
    a.tile = scratch;
    a.K = K;
    for (int64_t nt = n0; nt < n1; nt += NR) {
        const int nr = (int)(n1 - nt < NR ? n1 - nt : NR);
        a.m = (__mmask16)((1u << nr) - 1);
        for (int64_t kb0 = 0; kb0 < nb; kb0 += ksb) {
            const int64_t kb1 = kb0 + ksb < nb ? kb0 + ksb : nb;
            dec((const uint8_t *)W + nt * wrb, wrb, nr, kb0, kb1, scratch);
            a.nbs = kb1 - kb0;
            a.kb0 = kb0;
            a.load_y = accumulate || kb0 > 0;
            for (int64_t r = 0; r < n_rows; r += TB) {
                const int T = (int)(n_rows - r < TB ? n_rows - r : TB);
                for (int t = 0; t < T; t++) {
                    a.xr[t] = (const uint8_t *)act + (rows ? rows[r + t] : r + t) * arb;
                    a.yp[t] = Y + (r + t) * ldy + nt;
                }
                mk_table[kind][T](&a);
            }
        }
    }
}

static size_t scratch_int(size_t bs, int64_t K)
{
    const int64_t nb = K / 32, ksb = slice_blocks(bs);
    const int64_t n = nb < ksb ? (nb + 1) / 2 * 2 : ksb; /* pairs are decoded whole */
    return (size_t)n * bs + 64;
}
static size_t scratch_q(int64_t K) { return scratch_int(BS_Q, K); }
static size_t scratch_k(int64_t K) { return scratch_int(BS_K, K); }

#define GEMM_INT(name, kind, dec, type)                                                            \
    static void name(const void *W, int64_t K, int64_t n0, int64_t n1, const void *act,            \
                     const int32_t *rows, int64_t n_rows, float *Y, int64_t ldy, int accumulate,   \
                     void *scratch)                                                                \
    {                                                                                              \
        gemm_int(kind, dec, type, W, K, n0, n1, act, rows, n_rows, Y, ldy, accumulate, scratch);   \
    }
GEMM_INT(gemm_q4_0, KQ, dec_q4_0, ES_QTYPE_Q4_0)
GEMM_INT(gemm_q8_0, KQ, dec_q8_0, ES_QTYPE_Q8_0)
GEMM_INT(gemm_q4_K, KM, dec_q4_K, ES_QTYPE_Q4_K)
GEMM_INT(gemm_q5_K, KM, dec_q5_K, ES_QTYPE_Q5_K)
GEMM_INT(gemm_q6_K, K6, dec_q6_K, ES_QTYPE_Q6_K)

/* ---- activations (integer types) ---------------------------------------------------------- */

/* Bit-identical to es_act_q8_prepare(): max|x| is exact in any order, d and 1/d are the same
 * IEEE operations, and vcvtps2dq rounds to nearest even like lrintf. */
static void act_prepare_q(const float *X, int64_t ldx, int64_t n_rows, int64_t K, void *act)
{
    ES_ASSERT(K % 32 == 0);
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
        for (int64_t b = 0; b < nb; b++) {
            const __m512 x0 = _mm512_loadu_ps(x + 32 * b), x1 = _mm512_loadu_ps(x + 32 * b + 16);
            const __m512 a = _mm512_max_ps(_mm512_andnot_ps(sign, x0), _mm512_andnot_ps(sign, x1));
            const float amax = _mm512_reduce_max_ps(a);
            const float db = amax / 127.0f;
            const float id = db != 0.0f ? 1.0f / db : 0.0f;
            const __m512 vid = _mm512_set1_ps(id);
            const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, vid));
            const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, vid));
            _mm_storeu_si128((__m128i *)(row + 32 * b), _mm512_cvtepi32_epi8(q0));
            _mm_storeu_si128((__m128i *)(row + 32 * b + 16), _mm512_cvtepi32_epi8(q1));
            const int32_t s0 = _mm512_reduce_add_epi32(q0), s1 = _mm512_reduce_add_epi32(q1);
            d[b] = db;
            ds[b] = db * (float)(s0 + s1);
            c[b] = -128 * (s0 + s1);
            c2[2 * b] = -128 * s0;
            c2[2 * b + 1] = -128 * s1;
        }
        const size_t used = (size_t)es_act_q8_off_c2(K) + (size_t)nb * 8;
        memset(row + used, 0, rb - used);
    }
}

/* ---- float weights ----------------------------------------------------------------------------- */

/* Decodes rows [0, nr) x k [k0, k1) of a float-type matrix into tile[k - k0][32] floats. Rows
 * past nr are zero. */
static void dec_f(uint32_t type, const uint8_t *W, size_t wrb, int nr, int64_t k0, int64_t k1,
                  float *tile)
{
    for (int half = 0; half < 2; half++) {
        for (int64_t k = k0; k < k1; k += 16) {
            const int nk = (int)(k1 - k < 16 ? k1 - k : 16);
            const __mmask16 km = (__mmask16)((1u << nk) - 1);
            __m512i r[16];
            for (int j = 0; j < 16; j++) {
                const int row = 16 * half + j;
                if (row >= nr) {
                    r[j] = _mm512_setzero_si512();
                    continue;
                }
                const uint8_t *p = W + row * wrb;
                if (type == ES_QTYPE_F32) {
                    r[j] = _mm512_maskz_loadu_epi32(km, (const float *)p + k);
                } else {
                    __m256i h = _mm256_maskz_loadu_epi16(km, (const uint16_t *)p + k);
                    if (type == ES_QTYPE_F16)
                        r[j] = _mm512_castps_si512(_mm512_cvtph_ps(h));
                    else
                        r[j] = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
                }
            }
            tr16(r);
            for (int i = 0; i < nk; i++)
                _mm512_store_si512(tile + (k - k0 + i) * NRF + 16 * half, r[i]);
        }
    }
}

/* BF16 pairs: tile[p][32] dwords, p = pair index within the slice (k0 even). */
static void dec_bf16_pairs(const uint8_t *W, size_t wrb, int64_t K, int nr, int64_t k0,
                           int64_t k1, uint32_t *tile)
{
    for (int half = 0; half < 2; half++) {
        for (int64_t k = k0; k < k1; k += 32) {
            const int nk = (int)(k1 - k < 32 ? k1 - k : 32);  /* weights in this chunk */
            const int64_t kv = K - k < nk ? K - k : nk;     /* of them inside the row */
            const __mmask32 km = (__mmask32)(kv >= 32 ? 0xFFFFFFFFu : (1u << kv) - 1);
            __m512i r[16];
            for (int j = 0; j < 16; j++) {
                const int row = 16 * half + j;
                r[j] = row < nr ? _mm512_maskz_loadu_epi16(km, (const uint16_t *)(W + row * wrb) + k)
                                : _mm512_setzero_si512();
            }
            tr16(r);
            for (int i = 0; i < (nk + 1) / 2; i++)
                _mm512_store_si512(tile + ((k - k0) / 2 + i) * NRF + 16 * half, r[i]);
        }
    }
}

typedef struct mkf_args {
    const void *tile;
    int64_t nk;             /* k (or k pairs) in the slice */
    const void *xr[TB];     /* act rows at the slice start */
    float *yp[TB];          /* Y + row*ldy + first column */
    __mmask16 m0, m1;       /* valid columns of the two vectors */
    int load_y;
} mkf_args;

/* bf16: 0 = float FMA over k, 1 = vdpbf16ps over k pairs. */
static inline __attribute__((always_inline)) void mk_flt(const int bf16, const int T,
                                                         const mkf_args *a)
{
    __m512 y0[TB], y1[TB];
    const uint8_t *xr[TB];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        xr[t] = a->xr[t];
        y0[t] = a->load_y ? _mm512_maskz_loadu_ps(a->m0, a->yp[t]) : _mm512_setzero_ps();
        y1[t] = a->load_y ? _mm512_maskz_loadu_ps(a->m1, a->yp[t] + 16) : _mm512_setzero_ps();
    }
    const float *tp = a->tile;
    for (int64_t k = 0; k < a->nk; k++, tp += NRF) {
        const __m512 w0 = _mm512_load_ps(tp), w1 = _mm512_load_ps(tp + 16);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const __m512 x = bcstf(xr[t] + 4 * k);
            if (bf16) {
                y0[t] = _mm512_dpbf16_ps(y0[t], (__m512bh)w0, (__m512bh)x);
                y1[t] = _mm512_dpbf16_ps(y1[t], (__m512bh)w1, (__m512bh)x);
            } else {
                y0[t] = _mm512_fmadd_ps(w0, x, y0[t]);
                y1[t] = _mm512_fmadd_ps(w1, x, y1[t]);
            }
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        _mm512_mask_storeu_ps(a->yp[t], a->m0, y0[t]);
        _mm512_mask_storeu_ps(a->yp[t] + 16, a->m1, y1[t]);
    }
}

#define MKF(bf, T)                                                                                 \
    static void mkf_##bf##_##T(const mkf_args *a) { mk_flt(bf, T, a); }
#define MKF_ALL(bf)                                                                                \
    MKF(bf, 1) MKF(bf, 2) MKF(bf, 3) MKF(bf, 4) MKF(bf, 5) MKF(bf, 6) MKF(bf, 7) MKF(bf, 8)
MKF_ALL(0)
MKF_ALL(1)
typedef void (*mkf_fn)(const mkf_args *a);
static const mkf_fn mkf_table[2][TB + 1] = {
    {NULL, mkf_0_1, mkf_0_2, mkf_0_3, mkf_0_4, mkf_0_5, mkf_0_6, mkf_0_7, mkf_0_8},
    {NULL, mkf_1_1, mkf_1_2, mkf_1_3, mkf_1_4, mkf_1_5, mkf_1_6, mkf_1_7, mkf_1_8},
};

static size_t act_row_bf16(int64_t K) { return (size_t)(K + 31) / 32 * 64; }

static void gemm_flt(uint32_t type, int bf16, const void *W, int64_t K, int64_t n0, int64_t n1,
                     const void *act, const int32_t *rows, int64_t n_rows, float *Y, int64_t ldy,
                     int accumulate, void *scratch)
{
    ES_ASSERT(((uintptr_t)scratch & 63) == 0);
    const int64_t ks = slice_k(NRF * 4);
    const size_t wrb = es_qtype_row_bytes(type, K);
    const size_t arb = bf16 ? act_row_bf16(K) : es_act_f32_row_bytes(K);
    mkf_args a;
    a.tile = scratch;
    for (int64_t nt = n0; nt < n1; nt += NRF) {
        const int nr = (int)(n1 - nt < NRF ? n1 - nt : NRF);
        a.m0 = (__mmask16)(nr >= 16 ? 0xFFFF : (1u << nr) - 1);
        a.m1 = (__mmask16)(nr <= 16 ? 0 : (1u << (nr - 16)) - 1);
        const uint8_t *Wt = (const uint8_t *)W + nt * wrb;
        for (int64_t k0 = 0; k0 < K; k0 += ks) {
            const int64_t k1 = k0 + ks < K ? k0 + ks : K;
            if (bf16) {
                dec_bf16_pairs(Wt, wrb, K, nr, k0, k1, scratch);
                a.nk = (k1 - k0 + 1) / 2;
            } else {
                dec_f(type, Wt, wrb, nr, k0, k1, scratch);
                a.nk = k1 - k0;
            }
            a.load_y = accumulate || k0 > 0;
            for (int64_t r = 0; r < n_rows; r += TB) {
                const int T = (int)(n_rows - r < TB ? n_rows - r : TB);
                for (int t = 0; t < T; t++) {
                    /* bf16 rows: 2 bytes per k; float rows: 4 */
                    a.xr[t] = (const uint8_t *)act + (rows ? rows[r + t] : r + t) * arb +
                              (bf16 ? 2 : 4) * k0;
                    a.yp[t] = Y + (r + t) * ldy + nt;
                }
                mkf_table[bf16][T](&a);
            }
        }
    }
}

static size_t scratch_f(int64_t K)
{
    const int64_t ks = slice_k(NRF * 4);
    const int64_t n = K < ks ? (K + 15) / 16 * 16 : ks;
    return (size_t)n * NRF * 4 + 64;
}

static void gemm_f32(const void *W, int64_t K, int64_t n0, int64_t n1, const void *act,
                     const int32_t *rows, int64_t n_rows, float *Y, int64_t ldy, int accumulate,
                     void *scratch)
{
    gemm_flt(ES_QTYPE_F32, 0, W, K, n0, n1, act, rows, n_rows, Y, ldy, accumulate, scratch);
}
static void gemm_f16(const void *W, int64_t K, int64_t n0, int64_t n1, const void *act,
                     const int32_t *rows, int64_t n_rows, float *Y, int64_t ldy, int accumulate,
                     void *scratch)
{
    gemm_flt(ES_QTYPE_F16, 0, W, K, n0, n1, act, rows, n_rows, Y, ldy, accumulate, scratch);
}
static void gemm_bf16_f32(const void *W, int64_t K, int64_t n0, int64_t n1, const void *act,
                          const int32_t *rows, int64_t n_rows, float *Y, int64_t ldy,
                          int accumulate, void *scratch)
{
    gemm_flt(ES_QTYPE_BF16, 0, W, K, n0, n1, act, rows, n_rows, Y, ldy, accumulate, scratch);
}
static void gemm_bf16_dp(const void *W, int64_t K, int64_t n0, int64_t n1, const void *act,
                         const int32_t *rows, int64_t n_rows, float *Y, int64_t ldy,
                         int accumulate, void *scratch)
{
    gemm_flt(ES_QTYPE_BF16, 1, W, K, n0, n1, act, rows, n_rows, Y, ldy, accumulate, scratch);
}

/* bf16 activation rows: X rounded to bf16 (nearest even), zero padded to a multiple of 32. */
static void act_prepare_bf16(const float *X, int64_t ldx, int64_t n_rows, int64_t K, void *act)
{
    const size_t rb = act_row_bf16(K);
    for (int64_t r = 0; r < n_rows; r++) {
        const float *x = X + r * ldx;
        uint16_t *row = (uint16_t *)((uint8_t *)act + r * rb);
        for (int64_t k = 0; k < (int64_t)rb / 2; k += 16) {
            const int64_t n = K - k < 16 ? (K - k > 0 ? K - k : 0) : 16;
            const __m512 v = _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), x + k);
            _mm256_store_si256((__m256i *)(row + k), (__m256i)_mm512_cvtneps_pbh(v));
        }
    }
}

void es_kern_fill_avx512(es_kern *k)
{
    k->isa = "avx512";
    static const struct { uint32_t type; es_kern_ops ops; } tab[] = {
        {ES_QTYPE_Q4_0, {es_act_q8_row_bytes, act_prepare_q, gemm_q4_0, scratch_q}},
        {ES_QTYPE_Q8_0, {es_act_q8_row_bytes, act_prepare_q, gemm_q8_0, scratch_q}},
        {ES_QTYPE_Q4_K, {es_act_q8_row_bytes, act_prepare_q, gemm_q4_K, scratch_k}},
        {ES_QTYPE_Q5_K, {es_act_q8_row_bytes, act_prepare_q, gemm_q5_K, scratch_k}},
        {ES_QTYPE_Q6_K, {es_act_q8_row_bytes, act_prepare_q, gemm_q6_K, scratch_k}},
        {ES_QTYPE_F32, {es_act_f32_row_bytes, es_act_f32_prepare, gemm_f32, scratch_f}},
        {ES_QTYPE_F16, {es_act_f32_row_bytes, es_act_f32_prepare, gemm_f16, scratch_f}},
        {ES_QTYPE_BF16, {es_act_f32_row_bytes, es_act_f32_prepare, gemm_bf16_f32, scratch_f}},
    };
    for (size_t i = 0; i < ES_LEN(tab); i++) k->op[tab[i].type] = tab[i].ops;
    if (es_cpu_has(ES_CPU_AVX512_BF16))
        k->op[ES_QTYPE_BF16] = (es_kern_ops){act_row_bf16, act_prepare_bf16, gemm_bf16_dp, scratch_f};
}
