/*
 * AVX-512 kernel table (F, BW, VL, DQ, VNNI). Built with its own -m flags; exports only
 * es_kern_fill_avx512() (STYLE §6).
 *
 * DESIGN. es_gemm() walks tiles of 32 output rows (two zmm "columns" of 16 int32/float lanes).
 * For each tile and K-slice it decodes the weights once into the per-thread scratch, then runs a
 * register-blocked micro-kernel over all token rows of the call before moving to the next tile.
 *
 * Integer weights. Tile record per block of 32 weights (REC_Q / REC_K bytes):
 *     u8  q[8 groups][2 columns][16 rows][4]   weights 4g..4g+3 of output row 16c+j in lane j
 *     f32 s[2][16]   per-row scale (Q4_0/Q8_0/Q5_0/IQ4_NL: d; IQ4_XS: d*(ls-32); Q4_K/Q5_K:
 *                    d*sc; Q6_K: d*sc of half 0)
 *     f32 m[2][16]   Q4_K/Q5_K: -(dmin*m); Q6_K: d*sc of half 1 (absent for Q4_0/Q8_0)
 * vpdpbusd multiplies unsigned bytes (first source) by signed bytes (second source). The
 * weights are the unsigned side: each is stored as (signed value + 128) for Q4_0 (nibble + 120),
 * Q8_0 (q ^ 0x80), Q5_0 (q5 + 112), IQ4_NL / IQ4_XS (level + 128) and Q6_K (q + 96), and the accumulator starts at -128 * sum(x) of the block
 * (Q6_K: of each half), which the act preparation stores; Q4_K/Q5_K weights are unsigned already
 * (0..15, 0..31) and start at 0. The int32 result is the exact dot product of the true integer
 * weights with the int8 activations. Micro-kernel: 6 tokens x 2 columns; for each group the 4
 * activation bytes of a token are broadcast once and feed one vpdpbusd per column (a broadcast
 * per vpdpbusd made the loads the bottleneck); per block and token, 16 vpdpbusd (1024 MACs) and
 * 6 float ops (convert, scale, fused multiply-add per column). Those float ops share the two
 * vector ports with vpdpbusd on Intel, which caps this scheme at 16/22 = 73 % of the vpdpbusd
 * peak (measured 65 % for the bare micro-kernel).
 *
 * Decoding: 16 rows of 16 bytes (4 dwords) are loaded 4 to a register and transposed with one
 * vpermt2d round and one 128-bit lane shuffle round, which puts dword g of every row into
 * vector g; 32-byte rows are two such halves. The unsigned encoding is applied on the
 * transposed vectors (nibble masks, bit shifts: byte positions are preserved). Scales come from
 * 16-lane gathers of the block headers.
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

#define NRI 32 /* output rows per integer tile: two zmm of 16 int32 lanes ("columns" c = 0, 1) */
#define TB 8   /* most token rows per register block */
#define NRF 32 /* output rows per float tile: two zmm */
#define REC_Q 1152   /* record bytes per block: q 8 groups x 2 columns x 64, scales 2 x 64 */
#define REC_K 1280   /* ... plus 2 x 64 of mins (Q4_K/Q5_K) or second-half scales (Q6_K) */
#define ACT256_Q 416 /* act bytes per 256 k of a row: q 256, d ds c 32 each, c2 64 */

enum { KQ, KM, K6 }; /* kernel kinds: offset-128 weights; unsigned + mins; Q6_K halves */

/* The loops around the micro-kernels (slices, row groups, tiles, register blocks): the driver
 * every table shares, es_kern_drive() (kern_drive.c). */

/* ---- helpers ------------------------------------------------------------------------------- */

static inline __mmask16 lanes(int n) /* the low n of 16 lanes (n <= 0: none) */
{
    return (__mmask16)(n >= 16 ? 0xFFFF : n <= 0 ? 0 : (1u << n) - 1);
}

static inline __mmask16 lane_range(int lo, int hi) /* lanes [lo, hi) of 16 */
{
    return (__mmask16)(lanes(hi) & ~lanes(lo));
}

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
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)x));
    return acc;
}

static inline __m512 bcstf(const void *p)
{
    float v;
    memcpy(&v, p, 4);
    return _mm512_set1_ps(v);
}

static inline __m512i vpermt2d(__m512i a, const int32_t *idx, __m512i b)
{
    return _mm512_permutex2var_epi32(a, _mm512_loadu_si512(idx), b);
}

/*
 * Transposes of 16 rows (row j at base + j*wrb; rows >= nr read as zero) of D dwords into D
 * vectors, out[g] lane j = dword g of row j. D = 4: the rows go 4 to a register, then one
 * vpermt2d round and one 128-bit lane shuffle round; D = 16: unpack 32/64 and two lane shuffle
 * rounds.
 */
static const int32_t idx4[2][16] = {
    /* lane k of P: g = 2h + k/8, source register (k/4)%2, row-in-register k%4 */
    {0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29},
    {2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31},
};

static inline __m128i ld16(const uint8_t *p)
{
    return _mm_loadu_si128((const __m128i *)p);
}

static inline __attribute__((always_inline)) void tr16x4(const uint8_t *base, size_t wrb, int nr,
                                                         __m512i out[4])
{
    __m512i z[4];
    if (nr == 16) {
#pragma GCC unroll 16
        for (int r = 0; r < 4; r++) {
            const uint8_t *p = base + 4 * r * wrb;
            __m256i lo = _mm256_inserti128_si256(_mm256_castsi128_si256(ld16(p)), ld16(p + wrb), 1);
            __m256i hi = _mm256_inserti128_si256(_mm256_castsi128_si256(ld16(p + 2 * wrb)),
                                                 ld16(p + 3 * wrb), 1);
            z[r] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        }
    } else {
#pragma GCC unroll 16
        for (int r = 0; r < 4; r++) {
            __m512i v = _mm512_setzero_si512();
#pragma GCC unroll 16
            for (int i = 0; i < 4; i++) {
                const int j = 4 * r + i;
                if (j < nr) /* masked 128-bit broadcast = insert into lane i */
                    v = _mm512_mask_broadcast_i32x4(v, (__mmask16)(0xF << (4 * i)),
                                                    ld16(base + j * wrb));
            }
            z[r] = v;
        }
    }
    __m512i p0 = vpermt2d(z[0], idx4[0], z[1]), p1 = vpermt2d(z[0], idx4[1], z[1]);
    __m512i p2 = vpermt2d(z[2], idx4[0], z[3]), p3 = vpermt2d(z[2], idx4[1], z[3]);
    out[0] = _mm512_shuffle_i64x2(p0, p2, 0x44);
    out[1] = _mm512_shuffle_i64x2(p0, p2, 0xEE);
    out[2] = _mm512_shuffle_i64x2(p1, p3, 0x44);
    out[3] = _mm512_shuffle_i64x2(p1, p3, 0xEE);
}

/* D = 8 as two D = 4 halves (measured faster than a three-round vpermt2d network). */
static inline __attribute__((always_inline)) void tr16x8(const uint8_t *base, size_t wrb, int nr,
                                                         __m512i out[8])
{
    tr16x4(base, wrb, nr, out);
    tr16x4(base + 16, wrb, nr, out + 4);
}

/* 16x16 dword transpose in registers: on return r[i] lane j = old r[j] lane i. */
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

/* Byte offsets of the 16 rows of a half tile (rows past nr repeat row 0; their lanes are never
 * stored), for gathers of per-row header fields. */
static inline __m512i row_offsets(size_t wrb, int nr)
{
    __m512i j = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    j = _mm512_maskz_mov_epi32((__mmask16)(nr >= 16 ? 0xFFFF : (1u << nr) - 1), j);
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

static inline __m512i and8(__m512i v, int m)
{
    return _mm512_and_si512(v, _mm512_set1_epi8((char)m));
}
static inline __m512i srl16(__m512i v, int n)
{
    return _mm512_srli_epi16(v, (unsigned)n);
}
static inline __m512i sll16(__m512i v, int n)
{
    return _mm512_slli_epi16(v, (unsigned)n);
}

/* ---- weight tile decoders (integer) ---------------------------------------------------------- */

/*
 * A decoder fills the records of blocks [kb0, kb1) of one tile: rows [0, nr) of W (nr <= 32),
 * column c = rows 16c..16c+15. Record layout (rec = tile + (b - kb0) * record bytes):
 *   rec + 128*g + 64*c   group g (weights 4g..4g+3 of the block) of the 16 rows, u8
 *   rec + 1024 + 64*c    16 float scales
 *   rec + 1152 + 64*c    16 floats: -(dmin*m) (Q4_K/Q5_K) or the second-half scale (Q6_K)
 * A column with no rows is not written (the kernel does not read it).
 */
typedef void (*decode_fn)(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1,
                          uint8_t *tile);

static inline int col_rows(int nr, int c)
{
    return nr - 16 * c > 16 ? 16 : nr - 16 * c;
}

/* Q4_0: u = nibble + 120, so u - 128 = nibble - 8. */
static void dec_q4_0(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    const __m512i off = _mm512_set1_epi8(120);
#pragma GCC unroll 16
    for (int c = 0; c < 2; c++) {
        const int n = col_rows(nr, c);
        if (n <= 0) break;
        const uint8_t *Wc = W + 16 * c * wrb;
        const __m512i ro = row_offsets(wrb, n);
        for (int64_t b = kb0; b < kb1; b++) {
            uint8_t *rec = tile + (b - kb0) * REC_Q + 64 * c;
            __m512i raw[4];
            tr16x4(Wc + b * 18 + 2, wrb, n, raw);
#pragma GCC unroll 16
            for (int g = 0; g < 4; g++) {
                _mm512_store_si512(rec + 128 * g, _mm512_add_epi8(and8(raw[g], 15), off));
                _mm512_store_si512(rec + 128 * (g + 4),
                                   _mm512_add_epi8(and8(srl16(raw[g], 4), 15), off));
            }
            _mm512_store_ps(rec + 1024, f16_lo(_mm512_i32gather_epi32(ro, Wc + b * 18, 1)));
        }
    }
}

/* Q8_0: u = q ^ 0x80 = q + 128. */
static void dec_q8_0(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    const __m512i flip = _mm512_set1_epi8((char)0x80);
#pragma GCC unroll 16
    for (int c = 0; c < 2; c++) {
        const int n = col_rows(nr, c);
        if (n <= 0) break;
        const uint8_t *Wc = W + 16 * c * wrb;
        const __m512i ro = row_offsets(wrb, n);
        for (int64_t b = kb0; b < kb1; b++) {
            uint8_t *rec = tile + (b - kb0) * REC_Q + 64 * c;
            __m512i raw[8];
            tr16x8(Wc + b * 34 + 2, wrb, n, raw);
#pragma GCC unroll 16
            for (int g = 0; g < 8; g++)
                _mm512_store_si512(rec + 128 * g, _mm512_xor_si512(raw[g], flip));
            _mm512_store_ps(rec + 1024, f16_lo(_mm512_i32gather_epi32(ro, Wc + b * 34, 1)));
        }
    }
}

/* Bits 4i..4i+3 of each dword of v (i = 0..7) as 0x10 or 0 in its 4 bytes: byte j of a dword
 * gets bit 4i + j. (Q5_0's fifth bits, from the 32-bit qh of each row.) */
static inline __m512i qh_to_bytes(__m512i v, int i)
{
    const __m512i first = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8,
                                                               12, 12, 12, 12));
    const __m512i sel = _mm512_set1_epi32(0x08040201);
    const __m512i b = _mm512_shuffle_epi8(_mm512_srli_epi32(v, (unsigned)(4 * i)), first);
    return _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(b, sel), _mm512_set1_epi8(0x10));
}

/* Q5_0 (d, qh[4], qs[16]): u = q5 + 112, so u - 128 = q5 - 16. */
static void dec_q5_0(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    const __m512i off = _mm512_set1_epi8(112);
#pragma GCC unroll 16
    for (int c = 0; c < 2; c++) {
        const int n = col_rows(nr, c);
        if (n <= 0) break;
        const uint8_t *Wc = W + 16 * c * wrb;
        const __m512i ro = row_offsets(wrb, n);
        for (int64_t b = kb0; b < kb1; b++) {
            uint8_t *rec = tile + (b - kb0) * REC_Q + 64 * c;
            __m512i raw[4];
            tr16x4(Wc + b * 22 + 6, wrb, n, raw);
            const __m512i qh = _mm512_i32gather_epi32(ro, Wc + b * 22 + 2, 1);
#pragma GCC unroll 16
            for (int g = 0; g < 4; g++) {
                const __m512i lo = _mm512_or_si512(and8(raw[g], 15), qh_to_bytes(qh, g));
                const __m512i hi = _mm512_or_si512(and8(srl16(raw[g], 4), 15), qh_to_bytes(qh, g + 4));
                _mm512_store_si512(rec + 128 * g, _mm512_add_epi8(lo, off));
                _mm512_store_si512(rec + 128 * (g + 4), _mm512_add_epi8(hi, off));
            }
            _mm512_store_ps(rec + 1024, f16_lo(_mm512_i32gather_epi32(ro, Wc + b * 22, 1)));
        }
    }
}

/* IQ4_NL / IQ4_XS levels + 128 (kern_scalar.c's iq4_levels), for vpshufb by nibble. */
static inline __m512i iq4_lut(void)
{
    return _mm512_broadcast_i32x4(_mm_setr_epi8(1, 24, 45, 63, 79, 93, 106, 118, (char)129,
                                                (char)141, (char)153, (char)166, (char)181,
                                                (char)197, (char)217, (char)241));
}

/* 16 bytes of IQ4 nibbles of 16 rows (transposed in raw) -> the 8 groups of a record. */
static inline void iq4_groups(const __m512i raw[4], uint8_t *rec)
{
    const __m512i lut = iq4_lut();
#pragma GCC unroll 16
    for (int g = 0; g < 4; g++) {
        _mm512_store_si512(rec + 128 * g, _mm512_shuffle_epi8(lut, and8(raw[g], 15)));
        _mm512_store_si512(rec + 128 * (g + 4), _mm512_shuffle_epi8(lut, and8(srl16(raw[g], 4), 15)));
    }
}

/* IQ4_NL (d, qs[16]): u = level + 128. */
static void dec_iq4_nl(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
#pragma GCC unroll 16
    for (int c = 0; c < 2; c++) {
        const int n = col_rows(nr, c);
        if (n <= 0) break;
        const uint8_t *Wc = W + 16 * c * wrb;
        const __m512i ro = row_offsets(wrb, n);
        for (int64_t b = kb0; b < kb1; b++) {
            uint8_t *rec = tile + (b - kb0) * REC_Q + 64 * c;
            __m512i raw[4];
            tr16x4(Wc + b * 18 + 2, wrb, n, raw);
            iq4_groups(raw, rec);
            _mm512_store_ps(rec + 1024, f16_lo(_mm512_i32gather_epi32(ro, Wc + b * 18, 1)));
        }
    }
}

/* IQ4_XS (per 256: d, scales_h, scales_l[4], qs[128]): sub-block j of a super-block is a block
 * of 32 with scale d * (ls_j - 32), its nibbles as IQ4_NL's. */
static void dec_iq4_xs(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
#pragma GCC unroll 16
    for (int c = 0; c < 2; c++) {
        const int n = col_rows(nr, c);
        if (n <= 0) break;
        const uint8_t *Wc = W + 16 * c * wrb;
        const __m512i ro = row_offsets(wrb, n);
        for (int64_t b = kb0; b < kb1; b++) {
            const uint8_t *sb = Wc + b / 8 * 136;
            const int j = (int)(b % 8);
            uint8_t *rec = tile + (b - kb0) * REC_Q + 64 * c;
            __m512i raw[4];
            tr16x4(sb + 8 + 16 * j, wrb, n, raw);
            iq4_groups(raw, rec);
            const __m512i h = _mm512_i32gather_epi32(ro, sb, 1);     /* d | scales_h << 16 */
            const __m512i l = _mm512_i32gather_epi32(ro, sb + 4, 1); /* scales_l[0..3] */
            const __m512i lo = _mm512_and_si512(_mm512_srli_epi32(l, (unsigned)(4 * j)),
                                                _mm512_set1_epi32(15));
            const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(h, (unsigned)(16 + 2 * j)),
                                                _mm512_set1_epi32(3));
            const __m512i ls = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)),
                                                _mm512_set1_epi32(32));
            _mm512_store_ps(rec + 1024, _mm512_mul_ps(f16_lo(h), _mm512_cvtepi32_ps(ls)));
        }
    }
}

/* Q4_K/Q5_K scales of one super-block for 16 rows: s = d*sc, m = -(dmin*m) per sub-block j,
 * into the 8 records at rec (already offset to the column). hdr: d, dmin, scales[12] of row 0. */
static inline void k45_scales(const uint8_t *hdr, __m512i ro, uint8_t *rec)
{
    const __m512i dd = _mm512_i32gather_epi32(ro, hdr, 1);
    const __m512i A = _mm512_i32gather_epi32(ro, hdr + 4, 1);  /* scales[0..3] */
    const __m512i B = _mm512_i32gather_epi32(ro, hdr + 8, 1);  /* scales[4..7] */
    const __m512i C = _mm512_i32gather_epi32(ro, hdr + 12, 1); /* scales[8..11] */
    const __m512 d = f16_lo(dd), dmin = f16_hi(dd);
    const __m512i m6 = _mm512_set1_epi32(63), m4 = _mm512_set1_epi32(15), m2 = _mm512_set1_epi32(3);
#pragma GCC unroll 16
    for (int j = 0; j < 8; j++) {
        __m512i sc, mn;
        if (j < 4) {
            sc = _mm512_and_si512(_mm512_srli_epi32(A, 8 * j), m6);
            mn = _mm512_and_si512(_mm512_srli_epi32(B, 8 * j), m6);
        } else {
            const int s = 8 * (j - 4);
            __m512i cc = _mm512_srli_epi32(C, s);
            sc = _mm512_or_si512(
                _mm512_and_si512(cc, m4),
                _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(A, s + 6), m2), 4));
            mn = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi32(cc, 4), m4),
                _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(B, s + 6), m2), 4));
        }
        _mm512_store_ps(rec + j * REC_K + 1024, _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
        const __m512 mm = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(mn));
        _mm512_store_ps(rec + j * REC_K + 1152, _mm512_xor_ps(mm, _mm512_set1_ps(-0.0f)));
    }
}

/* Bit p (0..7) of every byte of v, moved to bit 4. */
static inline __m512i bit_to_4(__m512i v, int p)
{
    __m512i s = p < 4 ? sll16(v, 4 - p) : p > 4 ? srl16(v, p - 4) : v;
    return and8(s, 0x10);
}

/* Q4_K (q5 = 0) and Q5_K: chunk cc of qs holds sub-block 2cc (low nibbles) and 2cc+1 (high);
 * Q5_K's fifth bit of element l of sub-block s is bit s of qh[l]. u = q, no offset. */
static inline void dec_k45(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1,
                           uint8_t *tile, const int q5)
{
    const size_t sbb = q5 ? 176 : 144; /* super-block bytes */
    const size_t oqs = q5 ? 48 : 16;   /* qs offset */
#pragma GCC unroll 16
    for (int c = 0; c < 2; c++) {
        const int n = col_rows(nr, c);
        if (n <= 0) break;
        const uint8_t *Wc = W + 16 * c * wrb;
        const __m512i ro = row_offsets(wrb, n);
        for (int64_t b = kb0; b < kb1; b += 8) {
            const uint8_t *sb = Wc + b / 8 * sbb;
            uint8_t *rec = tile + (b - kb0) * REC_K + 64 * c;
            __m512i qh[8];
            if (q5) tr16x8(sb + 16, wrb, n, qh);
#pragma GCC unroll 16
            for (int cc = 0; cc < 4; cc++) {
                __m512i raw[8];
                tr16x8(sb + oqs + 32 * cc, wrb, n, raw);
#pragma GCC unroll 16
                for (int g = 0; g < 8; g++) {
                    __m512i lo = and8(raw[g], 15), hi = and8(srl16(raw[g], 4), 15);
                    if (q5) {
                        lo = _mm512_or_si512(lo, bit_to_4(qh[g], 2 * cc));
                        hi = _mm512_or_si512(hi, bit_to_4(qh[g], 2 * cc + 1));
                    }
                    _mm512_store_si512(rec + (2 * cc) * REC_K + 128 * g, lo);
                    _mm512_store_si512(rec + (2 * cc + 1) * REC_K + 128 * g, hi);
                }
            }
            k45_scales(sb, ro, rec);
        }
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

/* Q6_K: half h (128 weights) of a super-block is 4 blocks of 32: from ql[64h..64h+31] low
 * nibbles, ql[64h+32..] low, ql[64h..] high, ql[64h+32..] high, with 2 bits each from qh[32h+l]
 * (bits 0-1, 2-3, 4-5, 6-7). u = q + 96, so u - 128 = q - 32. Scales: signed byte per 16. */
static void dec_q6_K(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    const __m512i off = _mm512_set1_epi8(96);
#pragma GCC unroll 16
    for (int c = 0; c < 2; c++) {
        const int n = col_rows(nr, c);
        if (n <= 0) break;
        const uint8_t *Wc = W + 16 * c * wrb;
        const __m512i ro = row_offsets(wrb, n);
        for (int64_t b = kb0; b < kb1; b += 8) {
            const uint8_t *sb = Wc + b / 8 * 210;
            uint8_t *rec = tile + (b - kb0) * REC_K + 64 * c;
#pragma GCC unroll 16
            for (int h = 0; h < 2; h++) {
                __m512i l0[8], l1[8], qh[8];
                tr16x8(sb + 64 * h, wrb, n, l0);
                tr16x8(sb + 64 * h + 32, wrb, n, l1);
                tr16x8(sb + 128 + 32 * h, wrb, n, qh);
                uint8_t *r = rec + 4 * h * REC_K;
#pragma GCC unroll 16
                for (int g = 0; g < 8; g++) {
                    const __m512i q0 = _mm512_or_si512(and8(l0[g], 15), sll16(and8(qh[g], 3), 4));
                    const __m512i q1 =
                        _mm512_or_si512(and8(l1[g], 15), and8(sll16(qh[g], 2), 0x30));
                    const __m512i q2 =
                        _mm512_or_si512(and8(srl16(l0[g], 4), 15), and8(qh[g], 0x30));
                    const __m512i q3 =
                        _mm512_or_si512(and8(srl16(l1[g], 4), 15), and8(srl16(qh[g], 2), 0x30));
                    _mm512_store_si512(r + 0 * REC_K + 128 * g, _mm512_add_epi8(q0, off));
                    _mm512_store_si512(r + 1 * REC_K + 128 * g, _mm512_add_epi8(q1, off));
                    _mm512_store_si512(r + 2 * REC_K + 128 * g, _mm512_add_epi8(q2, off));
                    _mm512_store_si512(r + 3 * REC_K + 128 * g, _mm512_add_epi8(q3, off));
                }
            }
            /* scales[16] at 192, d at 208 */
            /* d is the last 2 bytes of the block: read scales[14..15] + d, never past the end */
            const __m512 d = f16_hi(_mm512_i32gather_epi32(ro, sb + 206, 1));
#pragma GCC unroll 16
            for (int q = 0; q < 4; q++) {
                const __m512i sv = _mm512_i32gather_epi32(ro, sb + 192 + 4 * q, 1);
#pragma GCC unroll 16
                for (int i = 0; i < 4; i++) {
                    /* scale 4q+i: sign-extend byte i of each lane */
                    __m512i v = _mm512_srai_epi32(_mm512_slli_epi32(sv, 24 - 8 * i), 24);
                    const int sub = 4 * q + i; /* block sub/2, half sub%2 */
                    _mm512_store_ps(rec + (sub / 2) * REC_K + 1024 + 128 * (sub % 2),
                                    _mm512_mul_ps(d, _mm512_cvtepi32_ps(v)));
                }
            }
        }
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

/*
 * C columns (16 output rows each) x T tokens. Per block: the int32 accumulators start at the
 * correction the act stores (KQ: -128*sum(x); K6: per half; KM: 0), take 8 vpdpbusd (groups g,
 * outer loop, so T*C independent chains run side by side), then per column and token:
 * f = (float)acc * s; y = fma(f, d_x, y) [KM: y = fma(-(dmin*m), d_x*sum(q_x), y)]
 * [K6: f = (float)acc_lo * s_lo; f = fma((float)acc_hi, s_hi, f)]. With two columns the 4
 * activation bytes are broadcast once into a register and feed two vpdpbusd, halving the loads.
 */
static inline __attribute__((always_inline)) void mk_int(const int kind, const int C, const int T,
                                                         const es_kern_block *a)
{
    const size_t bs = kind == KQ ? REC_Q : REC_K;
    const int64_t K = a->K, kb0 = a->k0 / 32, nbs = a->nk / 32;
    const __mmask16 m[2] = {lane_range(a->lo, a->hi), lane_range(a->lo - 16, a->hi - 16)};
    const int64_t od = es_act_q8_off_d(K) + 4 * kb0, ods = es_act_q8_off_ds(K) + 4 * kb0;
    const int64_t oc = es_act_q8_off_c(K) + 4 * kb0, oc2 = es_act_q8_off_c2(K) + 8 * kb0;
    __m512 y[2][TB];
    const uint8_t *xr[TB];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        xr[t] = a->xr[t];
#pragma GCC unroll 2
        for (int c = 0; c < C; c++)
            y[c][t] =
                a->load_y ? _mm512_maskz_loadu_ps(m[c], a->yp[t] + 16 * c) : _mm512_setzero_ps();
    }
    const uint8_t *rec = a->tile;
    for (int64_t b = 0; b < nbs; b++, rec += bs) {
        const int64_t oq = 32 * (kb0 + b);
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
#pragma GCC unroll 2
            for (int c = 0; c < C; c++) {
                const __m512 s = _mm512_load_ps(rec + 1024 + 64 * c);
                __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[c][t]), s);
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
static const mk_fn mk_table[3][2][TB + 1] = {
    {MK_ROW(KQ, 1), MK_ROW(KQ, 2)},
    {MK_ROW(KM, 1), MK_ROW(KM, 2)},
    {MK_ROW(K6, 1), MK_ROW(K6, 2)},
};

/* The micro-kernel of each kind for the driver: one column if the wanted rows end in the first. */
#define RUN(kind)                                                                                  \
    static void run_##kind(const es_kern_block *b)                                                 \
    {                                                                                              \
        mk_table[kind][b->hi > 16][b->T](b);                                                       \
    }
RUN(KQ)
RUN(KM)
RUN(K6)
static void (*const run_table[3])(const es_kern_block *) = {run_KQ, run_KM, run_K6};

static es_kern_tiling int_tiling(int kind, int tiled,
                                 void (*decode)(const es_kern_tile *, uint8_t *))
{
    return (es_kern_tiling){.tile_rows = NRI,
                            .unit = 256,
                            .tile_bytes = 8 * (size_t)(kind == KQ ? REC_Q : REC_K),
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

#define GEMM_INT(name, kind, dec, type)                                                            \
    static void name##_decode(const es_kern_tile *t, uint8_t *tile)                                \
    {                                                                                              \
        dec((const uint8_t *)t->W + t->nt * t->wrb, t->wrb, t->hi, t->k0 / 32, t->k1 / 32, tile);  \
    }                                                                                              \
    static void name(const void *W, int64_t K, int64_t n0, int64_t n1, const void *act,            \
                     const int32_t *rows, int64_t n_rows, float *Y, int64_t ldy, int accumulate,   \
                     void *scratch)                                                                \
    {                                                                                              \
        ES_ASSERT(K % 32 == 0);                                                                    \
        const es_kern_tiling tl = int_tiling(kind, 0, name##_decode);                              \
        es_kern_drive(&tl, type, W, K, 0, n0, n1, act, rows, n_rows, Y, ldy, accumulate, scratch); \
    }
GEMM_INT(gemm_q4_0, KQ, dec_q4_0, ES_QTYPE_Q4_0)
GEMM_INT(gemm_q8_0, KQ, dec_q8_0, ES_QTYPE_Q8_0)
GEMM_INT(gemm_q4_K, KM, dec_q4_K, ES_QTYPE_Q4_K)
GEMM_INT(gemm_q5_K, KM, dec_q5_K, ES_QTYPE_Q5_K)
GEMM_INT(gemm_q6_K, K6, dec_q6_K, ES_QTYPE_Q6_K)
GEMM_INT(gemm_q5_0, KQ, dec_q5_0, ES_QTYPE_Q5_0)
GEMM_INT(gemm_iq4_nl, KQ, dec_iq4_nl, ES_QTYPE_IQ4_NL)
GEMM_INT(gemm_iq4_xs, KQ, dec_iq4_xs, ES_QTYPE_IQ4_XS)

/* ---- tiled weights (quant/tiles.h) ----------------------------------------------------------
 *
 * The tile layout stores, per 32-row tile and block, the f16 scales d[nt] and then the qs dwords
 * group-major and row-minor, so column c of group g is one 64-byte load at 2nt + 4nt*g + 64c:
 * the transposes and gathers of the row decoders are gone. What is left per record is the nibble
 * split and the offset encoding (Q4_0), or the sign flip (Q8_0), and two f16 converts; the
 * record and the micro-kernel are those of the row layout, so results are bit-identical to it.
 * A short last tile (nt < 32) uses masked loads (lanes past nt read as zero, like the row
 * decoders' missing rows). The tile always covers whole 32-row tiles of the matrix; a request
 * [n0, n1) that does not start or end at a tile boundary is served by store masks.
 */

typedef void (*tdecode_fn)(const uint8_t *Wt, int nt, int64_t kb0, int64_t kb1, uint8_t *tile);

/* Scales d[16c .. 16c+n) of a tile-block as floats (n: rows of the column). */
static inline __m512 t_scales(const uint8_t *src, int nt, int c)
{
    const __m256i h = nt == NRI ? _mm256_loadu_si256((const __m256i *)(src + 32 * c))
                                : _mm256_maskz_loadu_epi16(lanes(nt - 16 * c), src + 32 * c);
    return _mm512_cvtph_ps(h);
}

static inline __m512i t_dwords(const uint8_t *q, int nt, int c)
{
    return nt == NRI ? _mm512_loadu_si512(q) : _mm512_maskz_loadu_epi32(lanes(nt - 16 * c), q);
}

static inline __attribute__((always_inline)) void dec_t_q(const int q8, const uint8_t *Wt,
                                                          const int nt, int64_t kb0, int64_t kb1,
                                                          uint8_t *tile)
{
    const size_t bb = q8 ? 34 : 18, tbb = (size_t)nt * bb;
    const __m512i off = _mm512_set1_epi8(120), flip = _mm512_set1_epi8((char)0x80);
    for (int64_t b = kb0; b < kb1; b++) {
        const uint8_t *src = Wt + (size_t)b * tbb, *q = src + 2 * nt;
        uint8_t *rec = tile + (b - kb0) * REC_Q;
#pragma GCC unroll 2
        for (int c = 0; c < 2; c++) {
            if (nt <= 16 * c) break;
            _mm512_store_ps(rec + 1024 + 64 * c, t_scales(src, nt, c));
            if (q8) {
#pragma GCC unroll 8
                for (int g = 0; g < 8; g++)
                    _mm512_store_si512(rec + 128 * g + 64 * c,
                                       _mm512_xor_si512(t_dwords(q + 4 * nt * g + 64 * c, nt, c),
                                                        flip));
            } else {
#pragma GCC unroll 4
                for (int g = 0; g < 4; g++) {
                    const __m512i v = t_dwords(q + 4 * nt * g + 64 * c, nt, c);
                    _mm512_store_si512(rec + 128 * g + 64 * c, _mm512_add_epi8(and8(v, 15), off));
                    _mm512_store_si512(rec + 128 * (g + 4) + 64 * c,
                                       _mm512_add_epi8(and8(srl16(v, 4), 15), off));
                }
            }
        }
    }
}

static void dec_t_q4_0(const uint8_t *Wt, int nt, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    if (nt == NRI)
        dec_t_q(0, Wt, NRI, kb0, kb1, tile); /* constant nt: unmasked loads */
    else
        dec_t_q(0, Wt, nt, kb0, kb1, tile);
}

static void dec_t_q8_0(const uint8_t *Wt, int nt, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    if (nt == NRI)
        dec_t_q(1, Wt, NRI, kb0, kb1, tile);
    else
        dec_t_q(1, Wt, nt, kb0, kb1, tile);
}

/* The row layout's records and micro-kernels (kind KQ) on whole 32-row tiles of the layout. */
#define GEMM_TILED(name, dec, type)                                                                \
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
        const es_kern_tiling tl = int_tiling(KQ, 1, name##_decode);                                \
        es_kern_drive(&tl, type, W, K, N, n0, n1, act, rows, n_rows, Y, ldy, accumulate, scratch); \
    }
GEMM_TILED(gemm_tiled_q4_0, dec_t_q4_0, ES_QTYPE_Q4_0)
GEMM_TILED(gemm_tiled_q8_0, dec_t_q8_0, ES_QTYPE_Q8_0)

/* ---- activations (integer types) ---------------------------------------------------------- */

/* Bit-identical to es_act_q8_prepare() (gb = 1: one scale per block of 32) and to
 * es_act_q8k_prepare() (gb = 8: one per 256): max|x| is exact in any order, the scale is the same
 * IEEE operations, and vcvtps2dq rounds to nearest even like lrintf. */
static void act_q8(const float *X, int64_t ldx, int64_t n_rows, int64_t K, void *act, int gb)
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
                c2[2 * b] = -128 * s0;
                c2[2 * b + 1] = -128 * s1;
            }
        }
        const size_t used = (size_t)es_act_q8_off_c2(K) + (size_t)nb * 8;
        memset(row + used, 0, rb - used);
    }
}
static void act_prepare_q(const float *X, int64_t ldx, int64_t n_rows, int64_t K, void *act)
{
    act_q8(X, ldx, n_rows, K, act, 1);
}
/* K-quant weights: one scale per 256 values, as llama.cpp's Q8_K (kern.h) */
static void act_prepare_k(const float *X, int64_t ldx, int64_t n_rows, int64_t K, void *act)
{
    act_q8(X, ldx, n_rows, K, act, 8);
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
        {ES_QTYPE_Q5_0, {es_act_q8_row_bytes, act_prepare_q, gemm_q5_0, scratch_q, NULL}},
        {ES_QTYPE_IQ4_NL, {es_act_q8_row_bytes, act_prepare_q, gemm_iq4_nl, scratch_q, NULL}},
        {ES_QTYPE_IQ4_XS, {es_act_q8_row_bytes, act_prepare_k, gemm_iq4_xs, scratch_q, NULL}},
        {ES_QTYPE_F32, {es_act_f32_row_bytes, es_act_f32_prepare, gemm_f32, scratch_f, NULL}},
        {ES_QTYPE_F16, {es_act_f32_row_bytes, es_act_f16r_prepare, gemm_f16, scratch_f, NULL}},
        {ES_QTYPE_BF16, {es_act_f32_row_bytes, es_act_bf16r_prepare, gemm_bf16, scratch_f, NULL}},
    };
    for (size_t i = 0; i < ES_LEN(tab); i++)
        k->op[tab[i].type] = tab[i].ops;
}
