/*
 * The AVX-512 weight decoders of the integer kinds, shared by the avx512 and amx tables: each
 * decodes one tile of 32 output rows x a K-slice of a GGUF (or quant/tiles.h) matrix into the
 * VNNI record below, once per tile, for a micro-kernel to run over every token row. Only static
 * functions (STYLE §6: an ISA file's header must not give the linker anything to merge into
 * code built without its flags).
 *
 * The including file defines DEC_BIAS, the value added to each signed weight in the record:
 *   128  the avx512 table: vpdpbusd multiplies UNSIGNED bytes by signed ones, so the weights are
 *        stored as (w + 128) and the accumulator starts at -128 * sum(x) (kern.h's act c);
 *   0    the amx table: tdpbssd multiplies signed bytes by signed bytes, so the weights are
 *        stored as they are and the int32 sum needs no correction.
 * Q4_K and Q5_K weights are unsigned already (0..15, 0..31) and ignore DEC_BIAS. Everything else
 * in a record (layout, scales, mins) is the same for both tables, so their float work is too.
 *
 * Record per block of 32 weights (rec = tile + (b - kb0) * REC_Q or REC_K bytes):
 *   rec + 128*g + 64*c   u8/s8 [16 rows][4]: weights 4g..4g+3 of output row 16c+j at 4j (group
 *                        g = 0..7, column c = 0, 1); column c of all 8 groups, 128 bytes apart,
 *                        is also an 8-row x 64-byte AMX B tile (K = 32 weights x N = 16 rows)
 *   rec + 1024 + 64*c    f32 [16]: per-row scale (Q4_0/Q8_0/Q5_0/IQ4_NL: d; IQ4_XS:
 *                        d*(ls-32); MXFP4: 2^(e-128); Q4_K/Q5_K: d*sc; Q6_K: d*sc of half 0;
 *                        Q2_K: d)
 *   rec + 1152 + 64*c    f32 [16]: Q4_K/Q5_K -(dmin*m); Q6_K d*sc of half 1 (REC_K only);
 *                        Q2_K -(dmin*m) of half 0
 *   rec + 1280 + 64*c    f32 [16]: Q2_K -(dmin*m) of half 1 (REC_K2 only)
 * A column with no rows is not written (no kernel reads it).
 *
 * Decoding: 16 rows of 16 bytes (4 dwords) are loaded 4 to a register and transposed with one
 * vpermt2d round and one 128-bit lane shuffle round, which puts dword g of every row into
 * vector g; 32-byte rows are two such halves. The encoding is applied on the transposed vectors
 * (nibble masks, bit shifts: byte positions are preserved). Scales come from 16-lane gathers of
 * the block headers. The tile layout needs neither transposes nor gathers (see the tiled
 * decoders at the end).
 */
#ifndef ES_X86_AVX512_DEC_H
#define ES_X86_AVX512_DEC_H

#if !defined(DEC_BIAS) || (DEC_BIAS != 0 && DEC_BIAS != 128)
#error "define DEC_BIAS (128: unsigned weights for vpdpbusd; 0: signed for tdpbssd) first"
#endif

#include "quant/kern.h"

#include <immintrin.h>

#define NRI 32     /* output rows per integer tile: two zmm of 16 int32 lanes ("columns" c = 0, 1) */
#define REC_Q 1152 /* record bytes per block: q 8 groups x 2 columns x 64, scales 2 x 64 */
#define REC_K 1280 /* ... plus 2 x 64 of mins (Q4_K/Q5_K) or second-half scales (Q6_K) */
#define REC_K2 1408 /* Q2_K: scales (d), then 2 x 64 of first-half and 2 x 64 of second-half mins */

/* ---- helpers ------------------------------------------------------------------------------- */

static inline __mmask16 lanes(int n) /* the low n of 16 lanes (n <= 0: none) */
{
    return (__mmask16)(n >= 16 ? 0xFFFF : n <= 0 ? 0 : (1u << n) - 1);
}

static inline __mmask16 lane_range(int lo, int hi) /* lanes [lo, hi) of 16 */
{
    return (__mmask16)(lanes(hi) & ~lanes(lo));
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

/* A decoder fills the records (above) of blocks [kb0, kb1) of one tile: rows [0, nr) of W
 * (nr <= 32, rows wrb bytes apart), column c = rows 16c..16c+15. */

static inline int col_rows(int nr, int c)
{
    return nr - 16 * c > 16 ? 16 : nr - 16 * c;
}

/* Q8_0's signed weights in the record's encoding: q + 128 = q ^ 0x80, or q itself. */
static inline __m512i enc_q8(__m512i q)
{
#if DEC_BIAS
    return _mm512_xor_si512(q, _mm512_set1_epi8((char)0x80));
#else
    return q;
#endif
}

/* Q4_0: u = nibble - 8 + DEC_BIAS (avx512: nibble + 120). */
static void dec_q4_0(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    const __m512i off = _mm512_set1_epi8((char)(DEC_BIAS - 8));
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

/* Q8_0: u = q + DEC_BIAS (enc_q8). */
static void dec_q8_0(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
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
                _mm512_store_si512(rec + 128 * g, enc_q8(raw[g]));
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

/* Q5_0 (d, qh[4], qs[16]): u = q5 - 16 + DEC_BIAS (avx512: q5 + 112). */
static void dec_q5_0(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    const __m512i off = _mm512_set1_epi8((char)(DEC_BIAS - 16));
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

/* IQ4_NL / IQ4_XS levels + DEC_BIAS (kern_scalar.c's iq4_levels), for vpshufb by nibble. */
static inline __m512i iq4_lut(void)
{
#define L(v) (char)((v) + DEC_BIAS)
    return _mm512_broadcast_i32x4(_mm_setr_epi8(L(-127), L(-104), L(-83), L(-65), L(-49), L(-35),
                                                L(-22), L(-10), L(1), L(13), L(25), L(38), L(53),
                                                L(69), L(89), L(113)));
#undef L
}

/* MXFP4 levels + DEC_BIAS (kern_scalar.c's mxfp4_levels, -12..12: 116..140 with the avx512
 * table's bias, an unsigned byte as vpdpbusd wants; as they are for the amx table's tdpbssd). */
static inline __m512i mxfp4_lut(void)
{
#define L(v) (char)((v) + DEC_BIAS)
    return _mm512_broadcast_i32x4(_mm_setr_epi8(L(0), L(1), L(2), L(3), L(4), L(6), L(8), L(12),
                                                L(0), L(-1), L(-2), L(-3), L(-4), L(-6), L(-8),
                                                L(-12)));
#undef L
}

/* 16 bytes of nibbles of 16 rows (transposed in raw) -> the 8 groups of a record, each nibble
 * replaced by its byte in lut (low nibbles: weights 0..15, high: 16..31). */
static inline void nib_groups(__m512i lut, const __m512i raw[4], uint8_t *rec)
{
#pragma GCC unroll 16
    for (int g = 0; g < 4; g++) {
        _mm512_store_si512(rec + 128 * g, _mm512_shuffle_epi8(lut, and8(raw[g], 15)));
        _mm512_store_si512(rec + 128 * (g + 4), _mm512_shuffle_epi8(lut, and8(srl16(raw[g], 4), 15)));
    }
}

/* IQ4_NL (d, qs[16]): u = level + DEC_BIAS. */
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
            nib_groups(iq4_lut(), raw, rec);
            _mm512_store_ps(rec + 1024, f16_lo(_mm512_i32gather_epi32(ro, Wc + b * 18, 1)));
        }
    }
}

/* MXFP4 (e, qs[16]): u = level + DEC_BIAS; scale 2^(e-128) from the E8M0 byte e, with the bits
 * of es_e8m0_half: (e - 1) << 23, or 0x00200000 << e (subnormal) for e < 2. The gather reads e
 * and the first 3 bytes of qs (inside the block). */
static void dec_mxfp4(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    const __m512i lut = mxfp4_lut();
#pragma GCC unroll 16
    for (int c = 0; c < 2; c++) {
        const int n = col_rows(nr, c);
        if (n <= 0) break;
        const uint8_t *Wc = W + 16 * c * wrb;
        const __m512i ro = row_offsets(wrb, n);
        for (int64_t b = kb0; b < kb1; b++) {
            uint8_t *rec = tile + (b - kb0) * REC_Q + 64 * c;
            __m512i raw[4];
            tr16x4(Wc + b * 17 + 1, wrb, n, raw);
            nib_groups(lut, raw, rec);
            const __m512i e = _mm512_and_si512(_mm512_i32gather_epi32(ro, Wc + b * 17, 1),
                                               _mm512_set1_epi32(0xFF));
            const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
            const __m512i subn = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
            const __mmask16 small = _mm512_cmplt_epi32_mask(e, _mm512_set1_epi32(2));
            _mm512_store_ps(rec + 1024,
                            _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, subn)));
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
            nib_groups(iq4_lut(), raw, rec);
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
 * (bits 0-1, 2-3, 4-5, 6-7). u = q - 32 + DEC_BIAS (avx512: q + 96). Scales: signed byte per
 * 16. */
static void dec_q6_K(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    const __m512i off = _mm512_set1_epi8((char)(DEC_BIAS - 32));
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

/* Q3_K (hmask[32], qs[64], scales[12], d): block 4h + j of a super-block takes bits 2j..2j+1 of
 * qs[32h + l] and bit 4h + j of hmask[l] for weight l (layout in qtypes.c's dq_q3_K), value
 * q2 - 4 + 4 * hbit; u = (q2 | hbit << 2) + DEC_BIAS - 4 (avx512: q + 124). Its 16 signed
 * scales of 16 weights fill the record as Q6_K's halves do (kind K6). */
static void dec_q3_K(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    const __m512i off = _mm512_set1_epi8((char)(DEC_BIAS - 4));
#pragma GCC unroll 16
    for (int c = 0; c < 2; c++) {
        const int n = col_rows(nr, c);
        if (n <= 0) break;
        const uint8_t *Wc = W + 16 * c * wrb;
        const __m512i ro = row_offsets(wrb, n);
        for (int64_t b = kb0; b < kb1; b += 8) {
            const uint8_t *sb = Wc + b / 8 * 110;
            uint8_t *rec = tile + (b - kb0) * REC_K + 64 * c;
            __m512i hm[8];
            tr16x8(sb, wrb, n, hm);
#pragma GCC unroll 16
            for (int h = 0; h < 2; h++) {
                __m512i qs[8];
                tr16x8(sb + 32 + 32 * h, wrb, n, qs);
#pragma GCC unroll 16
                for (int j = 0; j < 4; j++) {
                    const int p = 4 * h + j; /* hmask bit, moved to bit 2 */
#pragma GCC unroll 16
                    for (int g = 0; g < 8; g++) {
                        const __m512i q2 = and8(srl16(qs[g], 2 * j), 3);
                        const __m512i hb = and8(p > 2 ? srl16(hm[g], p - 2) : sll16(hm[g], 2 - p), 4);
                        _mm512_store_si512(rec + (4 * h + j) * REC_K + 128 * g,
                                           _mm512_add_epi8(_mm512_or_si512(q2, hb), off));
                    }
                }
            }
            /* scales[12] at 96, d at 108: the last dword is scales[10..11] + d, never past the
             * end of the block */
            const __m512i A = _mm512_i32gather_epi32(ro, sb + 96, 1);
            const __m512i B = _mm512_i32gather_epi32(ro, sb + 100, 1);
            const __m512i C = _mm512_i32gather_epi32(ro, sb + 104, 1);
            const __m512 d = f16_hi(_mm512_i32gather_epi32(ro, sb + 106, 1));
            const __m512i m4 = _mm512_set1_epi32(15), m2 = _mm512_set1_epi32(3);
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) {
                const __m512i w = i % 8 < 4 ? A : B; /* low nibbles: byte i % 8 of A, B */
                const __m512i lo = _mm512_and_si512(
                    _mm512_srli_epi32(w, (unsigned)(8 * (i % 4) + (i < 8 ? 0 : 4))), m4);
                const __m512i hi = _mm512_and_si512(
                    _mm512_srli_epi32(C, (unsigned)(8 * (i % 4) + 2 * (i / 4))), m2);
                const __m512i sc = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)),
                                                    _mm512_set1_epi32(32));
                _mm512_store_ps(rec + (i / 2) * REC_K + 1024 + 128 * (i % 2),
                                _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
            }
        }
    }
}

/* Q2_K (scales[16], qs[64], d, dmin): block 4h + j of a super-block takes bits 2j..2j+1 of
 * qs[32h + l] (layout in qtypes.c's dq_q2_K); u = sc * q (0..45, the same bytes in both
 * encodings: DEC_BIAS unused) with sc the low nibble of its half's scale byte, so one sum and d
 * serve the block; the high nibbles give the halves' mins (kind K2). sc * q by one vpmullw per
 * two bytes: q_even + 256 q_odd times sc leaves each product in its own byte (<= 45). */
static void dec_q2_K(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    const __m512i m4 = _mm512_set1_epi32(15);
#pragma GCC unroll 16
    for (int c = 0; c < 2; c++) {
        const int n = col_rows(nr, c);
        if (n <= 0) break;
        const uint8_t *Wc = W + 16 * c * wrb;
        const __m512i ro = row_offsets(wrb, n);
        for (int64_t b = kb0; b < kb1; b += 8) {
            const uint8_t *sb = Wc + b / 8 * 84;
            uint8_t *rec = tile + (b - kb0) * REC_K2 + 64 * c;
            const __m512i dd = _mm512_i32gather_epi32(ro, sb + 80, 1); /* d, dmin */
            const __m512 d = f16_lo(dd), dmin = f16_hi(dd);
            __m512i sc[4]; /* scale bytes 4i..4i+3 */
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                sc[i] = _mm512_i32gather_epi32(ro, sb + 4 * i, 1);
#pragma GCC unroll 16
            for (int h = 0; h < 2; h++) {
                __m512i qs[8];
                tr16x8(sb + 16 + 32 * h, wrb, n, qs);
#pragma GCC unroll 16
                for (int j = 0; j < 4; j++) {
                    uint8_t *r = rec + (4 * h + j) * REC_K2;
                    _mm512_store_ps(r + 1024, d);
#pragma GCC unroll 2
                    for (int half = 0; half < 2; half++) {
                        const int i = 8 * h + 2 * j + half; /* sub-block of 16 */
                        const __m512i byte = _mm512_srli_epi32(sc[i / 4], (unsigned)(8 * (i % 4)));
                        const __m512i s = _mm512_and_si512(byte, m4);
                        const __m512i s16 = _mm512_or_si512(s, _mm512_slli_epi32(s, 16));
                        const __m512 m =
                            _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(byte, 4), m4));
                        _mm512_store_ps(r + 1152 + 128 * half,
                                        _mm512_xor_ps(_mm512_mul_ps(dmin, m), _mm512_set1_ps(-0.0f)));
#pragma GCC unroll 4
                        for (int g = 4 * half; g < 4 * half + 4; g++)
                            _mm512_store_si512(r + 128 * g,
                                               _mm512_mullo_epi16(and8(srl16(qs[g], 2 * j), 3), s16));
                    }
                }
            }
        }
    }
}

/* ---- tiled weights (quant/tiles.h) ----------------------------------------------------------
 *
 * The tile layout stores, per 32-row tile and block, the f16 scales d[nt] and then the qs dwords
 * group-major and row-minor, so column c of group g is one 64-byte load at 2nt + 4nt*g + 64c:
 * the transposes and gathers of the row decoders are gone. What is left per record is the nibble
 * split and the encoding (Q4_0), or the sign flip (Q8_0, DEC_BIAS 128), and two f16 converts;
 * the record and the micro-kernel are those of the row layout, so results are bit-identical to
 * it.
 * A short last tile (nt < 32) uses masked loads (lanes past nt read as zero, like the row
 * decoders' missing rows). The tile always covers whole 32-row tiles of the matrix; a request
 * [n0, n1) that does not start or end at a tile boundary is served by store masks.
 */

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
    const __m512i off = _mm512_set1_epi8((char)(DEC_BIAS - 8));
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
                                       enc_q8(t_dwords(q + 4 * nt * g + 64 * c, nt, c)));
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

#endif
