/*
 * AArch64 NEON kernel table with the dotprod extension (sdot), es_kern_fill_neon(). Built with
 * -march=armv8.2-a+dotprod for this file only (the rest of the build stays baseline armv8-a) and
 * chosen at run time from HWCAP (dispatch.c). arm_i8mm.c builds this file a second time with
 * ES_I8MM defined (and +i8mm): the i8mm table, es_kern_fill_i8mm(), whose integer micro-kernel
 * uses smmla instead of sdot. arm_asimd.c builds it with ES_ASIMD (baseline armv8-a): the asimd
 * table, es_kern_fill_asimd(), for cores without dotprod (Cortex-A53/A57/A72), with smull +
 * sadalp in place of sdot. Exports only those fills (STYLE §6).
 *
 * DESIGN: the structure of x86_avx2.c on 128-bit registers: tiles of 8 output rows decoded once
 * per K-slice into the per-thread scratch, then a register-blocked micro-kernel over the token
 * rows of the call.
 *
 * Weights are decoded to their SIGNED values (q-8 for Q4_0, q for Q8_0, q-16 for Q5_0, the
 * non-linear levels for IQ4_NL/IQ4_XS, -12..12 for MXFP4, 0..15 / 0..31 for Q4_K/Q5_K and
 * Q4_1/Q5_1 (whose d and m take Q4_K's scale and min slots), q-32 for
 * Q6_K, q-4 or q for Q3_K, sc*q for Q2_K): sdot and smmla multiply signed bytes by signed
 * bytes, so unlike x86 (vpdpbusd wants unsigned weights) no correction term is needed, and the
 * act's c and c2 are 0 (c_mult = c2_mult = 0), except for Q2_K, whose mins take the act's half
 * sums: its c2 holds them (c2_mult = 1). Every int32 block sum is the exact dot product
 * (|w| <= 128, |x| <= 127, 32 terms), and the float operations per block are those of
 * kern_scalar.c in the same order (vfmaq is a fused multiply-add like fmaf): the tables match
 * scalar bit for bit.
 *
 * sdot (neon): vdotq_laneq_s32(acc, w, x, l) adds, in lane i, the dot product of bytes 4i..4i+3
 * of w with bytes 4l..4l+3 of x. With w = dword g (weights 4g..4g+3) of 4 output rows and x = 16
 * activation bytes of one token, one instruction does 4 rows x 4 weights; a block of 32 is 8
 * groups x 2 vectors (rows 0-3, 4-7) per token. Tile record per block of 32 (REC bytes):
 *     i8  q[8 groups][8 rows][4]   (bytes 32g .. 32g+15: rows 0-3; 32g+16 .. 32g+31: rows 4-7)
 *     f32 s[8]                     block scale per row (Q6_K: the first half's; Q2_K: d)
 *     f32 m[8]                     Q4_K/Q5_K: -(dmin*m); Q6_K: the second half's scale; Q2_K:
 *                                  the first half's -(dmin*m)
 *     f32 m2[8]                    Q2_K only (REC2 = REC + 32 bytes): the second half's
 * Register block: 4 tokens (3 for Q6_K, which keeps a float partial per half). asimd: the same
 * record; each sdot becomes dup + 2 smull + 2 sadalp into two pair-sum accumulators per 4 rows
 * (exact: int16 products, int32 sums), hence 3 tokens (2 for Q6_K).
 *
 * smmla (i8mm): vmmlaq_s32(acc, a, b) treats a and b as 2x8 byte matrices and adds a * b^T, a
 * 2x2 int32 block. a = 8 activation bytes of 2 tokens, b = 8 weights of 2 output rows: twice
 * the products of an sdot per instruction. The record is the sdot one with each 64-byte chunk c
 * (weights 8c .. 8c+7) rearranged into row pairs, [c][pair][2 rows][8 bytes], by one zip per
 * 16 bytes after decoding (to_mmla): the decoders are shared. The 2x2 results are zipped back
 * into 4-row vectors before the float stage, which is then the same as with sdot.
 *
 * Float weights (F32/F16/BF16): tiles of 16 rows x K-slice, [k][16] floats; per k, a fused
 * multiply-add with the token's x[k] (vfmaq_laneq_f32), in increasing k as the scalar table.
 *
 * Partial tiles: NEON has no masked loads or stores, so a tile with fewer than 8 valid output
 * rows decodes the missing rows as zero bytes and goes through an 8-float stack copy of Y for
 * the load and the store; each lane's arithmetic is independent of the others, so the values
 * do not depend on where [n0, n1) starts or ends (determinism across splits).
 */
#include "quant/kern.h"

#include "core/cpu.h"

#include <arm_neon.h>
#include <string.h>

#if defined(ES_I8MM)
#define ISA_NAME "i8mm"
#define FILL_TABLE es_kern_fill_i8mm
#elif defined(ES_ASIMD)
#define ISA_NAME "asimd"
#define FILL_TABLE es_kern_fill_asimd
#else
#define ISA_NAME "neon"
#define FILL_TABLE es_kern_fill_neon
#endif

#ifdef ES_ASIMD
/* Without sdot: dword L of x to every lane, then smull (rows 0-1) and smull2 (rows 2-3) give
 * the 16 products as int16 (|w x| <= 128 * 127 fits), and sadalp adds neighbouring pairs into
 * int32: acc and pr hold two partial sums per row, added pairwise (addp) at the end. */
#define DOT_LANE(acc, pr, w, x, L)                                                                 \
    do {                                                                                           \
        const int8x16_t xb_ = vreinterpretq_s8_s32(vdupq_laneq_s32(vreinterpretq_s32_s8(x), L));   \
        (acc) = vpadalq_s16((acc), vmull_s8(vget_low_s8(w), vget_low_s8(xb_)));                    \
        (pr) = vpadalq_s16((pr), vmull_high_s8((w), xb_));                                         \
    } while (0)
#else
/* sdot: lane i += bytes 4i..4i+3 of w times bytes 4L..4L+3 of x. */
#define DOT_LANE(acc, pr, w, x, L) ((acc) = vdotq_laneq_s32((acc), (w), (x), (L)))
#endif

#define NR 8     /* output rows per integer tile */
#define NRF 16   /* output rows per float tile: four q registers */
#define TBMAX 4  /* most token rows per register block */
#define REC 320  /* record bytes per block of 32 */
#define REC2 352 /* Q2_K's: a third float slot of 8 */
#define ACT256 416

enum { A_Q40, A_Q80, A_Q4K, A_Q5K, A_Q6K, A_Q2K, A_N };

static inline size_t rec_of(int kind)
{
    return kind == A_Q2K ? REC2 : REC;
}

/* ---- helpers ------------------------------------------------------------------------------- */

/* 4 rows (row j at base + j*wrb; rows >= nr read as zero) of 16 bytes = 4 dwords -> out[g] lane j
 * = dword g of row j: a 4x4 transpose of dwords (trn on 32-bit, then on 64-bit lanes). */
static inline __attribute__((always_inline)) void tr4(const uint8_t *base, size_t wrb, int nr,
                                                      uint8x16_t out[4])
{
    uint32x4_t a[4];
    for (int j = 0; j < 4; j++)
        a[j] = j < nr ? vreinterpretq_u32_u8(vld1q_u8(base + j * wrb)) : vdupq_n_u32(0);
    const uint32x4_t t0 = vtrn1q_u32(a[0], a[1]), t1 = vtrn2q_u32(a[0], a[1]);
    const uint32x4_t t2 = vtrn1q_u32(a[2], a[3]), t3 = vtrn2q_u32(a[2], a[3]);
    out[0] = vreinterpretq_u8_u64(vtrn1q_u64(vreinterpretq_u64_u32(t0), vreinterpretq_u64_u32(t2)));
    out[1] = vreinterpretq_u8_u64(vtrn1q_u64(vreinterpretq_u64_u32(t1), vreinterpretq_u64_u32(t3)));
    out[2] = vreinterpretq_u8_u64(vtrn2q_u64(vreinterpretq_u64_u32(t0), vreinterpretq_u64_u32(t2)));
    out[3] = vreinterpretq_u8_u64(vtrn2q_u64(vreinterpretq_u64_u32(t1), vreinterpretq_u64_u32(t3)));
}

/* 8 rows of 16 bytes -> lo[g] (rows 0-3) and hi[g] (rows 4-7) for the 4 dword groups g. */
static inline __attribute__((always_inline)) void tr8x16(const uint8_t *base, size_t wrb, int nr,
                                                         uint8x16_t lo[4], uint8x16_t hi[4])
{
    tr4(base, wrb, nr, lo);
    tr4(base + 4 * wrb, wrb, nr - 4, hi);
}

/* 8 rows of 32 bytes -> 8 dword groups. */
static inline __attribute__((always_inline)) void tr8x32(const uint8_t *base, size_t wrb, int nr,
                                                         uint8x16_t lo[8], uint8x16_t hi[8])
{
    tr8x16(base, wrb, nr, lo, hi);
    tr8x16(base + 16, wrb, nr, lo + 4, hi + 4);
}

/* Stores dword group g of a record (rows 0-3, then rows 4-7), subtracting off from each byte. */
static inline void put_group(uint8_t *rec, int g, uint8x16_t lo, uint8x16_t hi, int off)
{
    const uint8x16_t o = vdupq_n_u8((uint8_t)off);
    vst1q_u8(rec + 32 * g, vsubq_u8(lo, o));
    vst1q_u8(rec + 32 * g + 16, vsubq_u8(hi, o));
}

/* 8 f16 values at base + j*wrb (j < nr; others 0) -> floats at out. f16 -> f32 is exact. */
static inline void put_f16x8(const uint8_t *base, size_t wrb, int nr, float *out)
{
    uint64_t q[4];
    es_kern_gather_rows(base, wrb, nr, 2, q);
    vst1q_f32(out, vcvt_f32_f16(vreinterpret_f16_u64(vcreate_u64(q[0]))));
    vst1q_f32(out + 4, vcvt_f32_f16(vreinterpret_f16_u64(vcreate_u64(q[1]))));
}

static inline uint8x16_t and8(uint8x16_t v, int m)
{
    return vandq_u8(v, vdupq_n_u8((uint8_t)m));
}

/* ---- weight tile decoders (sdot record layout) ------------------------------------------- */

typedef void (*decode_fn)(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1,
                          uint8_t *tile);

/* Q4_0: dword g of qs holds weights 4g..4g+3 (low nibbles) and 4g+16.. (high): groups g, g+4. */
static void dec_q4_0(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    for (int64_t b = kb0; b < kb1; b++) {
        uint8_t *rec = tile + (b - kb0) * REC;
        uint8x16_t lo[4], hi[4];
        tr8x16(W + b * 18 + 2, wrb, nr, lo, hi);
        for (int g = 0; g < 4; g++) {
            put_group(rec, g, and8(lo[g], 15), and8(hi[g], 15), 8);
            put_group(rec, g + 4, vshrq_n_u8(lo[g], 4), vshrq_n_u8(hi[g], 4), 8);
        }
        put_f16x8(W + b * 18, wrb, nr, (float *)(rec + 256));
    }
}

/* Q8_0: the signed bytes as they are. */
static void dec_q8_0(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    for (int64_t b = kb0; b < kb1; b++) {
        uint8_t *rec = tile + (b - kb0) * REC;
        uint8x16_t lo[8], hi[8];
        tr8x32(W + b * 34 + 2, wrb, nr, lo, hi);
        for (int g = 0; g < 8; g++)
            put_group(rec, g, lo[g], hi[g], 0);
        put_f16x8(W + b * 34, wrb, nr, (float *)(rec + 256));
    }
}

/* Q5_0 (d, qh[4], qs[16]): the nibbles as Q4_0's, bit l of qh on top of weight l, minus 16.
 * qh_bits: bits 4gg..4gg+3 of each row's qh (lane = row, one dword each) as 0x10 or 0 in the
 * bytes of weight group gg. */
static inline uint8x16_t qh_bits(uint8x16_t qh, int gg)
{
    const int by = gg / 2;
    const uint8_t idx[16] = {by,     by,     by,     by,     4 + by,  4 + by,  4 + by,  4 + by,
                             8 + by, 8 + by, 8 + by, 8 + by, 12 + by, 12 + by, 12 + by, 12 + by};
    const uint8x16_t sel = vreinterpretq_u8_u32(vdupq_n_u32(gg % 2 ? 0x80402010u : 0x08040201u));
    return and8(vtstq_u8(vqtbl1q_u8(qh, vld1q_u8(idx)), sel), 0x10);
}

static void dec_q5_0(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    for (int64_t b = kb0; b < kb1; b++) {
        uint8_t *rec = tile + (b - kb0) * REC;
        uint8x16_t lo[4], hi[4];
        tr8x16(W + b * 22 + 6, wrb, nr, lo, hi);
        uint64_t q[4];
        es_kern_gather_rows(W + b * 22 + 2, wrb, nr, 4, q);
        const uint8x16_t qh_lo =
            vreinterpretq_u8_u64(vcombine_u64(vcreate_u64(q[0]), vcreate_u64(q[1])));
        const uint8x16_t qh_hi =
            vreinterpretq_u8_u64(vcombine_u64(vcreate_u64(q[2]), vcreate_u64(q[3])));
        for (int g = 0; g < 4; g++) {
            put_group(rec, g, vorrq_u8(and8(lo[g], 15), qh_bits(qh_lo, g)),
                      vorrq_u8(and8(hi[g], 15), qh_bits(qh_hi, g)), 16);
            put_group(rec, g + 4, vorrq_u8(vshrq_n_u8(lo[g], 4), qh_bits(qh_lo, g + 4)),
                      vorrq_u8(vshrq_n_u8(hi[g], 4), qh_bits(qh_hi, g + 4)), 16);
        }
        put_f16x8(W + b * 22, wrb, nr, (float *)(rec + 256));
    }
}

/* Q4_1 (d, m, qs[16]) and Q5_1 (d, m, qh[4], qs[16]), value d*q + m: q (0..15 / 0..31) in
 * Q4_K's / Q5_K's record, s = d and the mins slot +m, which the act's Q8_1 block sums (ds)
 * multiply, as kern_scalar.c does. */
static inline __attribute__((always_inline)) void dec_q41_q51(const uint8_t *W, size_t wrb, int nr,
                                                              int64_t kb0, int64_t kb1,
                                                              uint8_t *tile, const int q5)
{
    const size_t bb = q5 ? 24 : 20;
    for (int64_t b = kb0; b < kb1; b++) {
        uint8_t *rec = tile + (b - kb0) * REC;
        uint8x16_t lo[4], hi[4], qh_lo = vdupq_n_u8(0), qh_hi = vdupq_n_u8(0);
        tr8x16(W + b * bb + (q5 ? 8 : 4), wrb, nr, lo, hi);
        if (q5) {
            uint64_t q[4];
            es_kern_gather_rows(W + b * bb + 4, wrb, nr, 4, q);
            qh_lo = vreinterpretq_u8_u64(vcombine_u64(vcreate_u64(q[0]), vcreate_u64(q[1])));
            qh_hi = vreinterpretq_u8_u64(vcombine_u64(vcreate_u64(q[2]), vcreate_u64(q[3])));
        }
        for (int g = 0; g < 4; g++) {
            uint8x16_t l0 = and8(lo[g], 15), h0 = and8(hi[g], 15);
            uint8x16_t l1 = vshrq_n_u8(lo[g], 4), h1 = vshrq_n_u8(hi[g], 4);
            if (q5) {
                l0 = vorrq_u8(l0, qh_bits(qh_lo, g));
                h0 = vorrq_u8(h0, qh_bits(qh_hi, g));
                l1 = vorrq_u8(l1, qh_bits(qh_lo, g + 4));
                h1 = vorrq_u8(h1, qh_bits(qh_hi, g + 4));
            }
            put_group(rec, g, l0, h0, 0);
            put_group(rec, g + 4, l1, h1, 0);
        }
        put_f16x8(W + b * bb, wrb, nr, (float *)(rec + 256));
        put_f16x8(W + b * bb + 2, wrb, nr, (float *)(rec + 288));
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

/* The 16 signed levels a nibble picks (kern_scalar.c's tables): IQ4_NL / IQ4_XS (llama.cpp's
 * non-linear ones) and MXFP4 (E2M1 doubled, -12..12). */
static const int8_t iq4_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                      1,    13,   25,  38,  53,  69,  89,  113};
static const int8_t mxfp4_levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* Nibbles of 8 rows (transposed in lo/hi) -> their levels in the record's 8 groups (low
 * nibbles: weights 0..15, high: 16..31). */
static inline void nib_groups(const int8_t levels[16], const uint8x16_t lo[4],
                              const uint8x16_t hi[4], uint8_t *rec)
{
    const uint8x16_t lut = vreinterpretq_u8_s8(vld1q_s8(levels));
    for (int g = 0; g < 4; g++) {
        put_group(rec, g, vqtbl1q_u8(lut, and8(lo[g], 15)), vqtbl1q_u8(lut, and8(hi[g], 15)), 0);
        put_group(rec, g + 4, vqtbl1q_u8(lut, vshrq_n_u8(lo[g], 4)),
                  vqtbl1q_u8(lut, vshrq_n_u8(hi[g], 4)), 0);
    }
}

static void dec_iq4_nl(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1,
                       uint8_t *tile)
{
    for (int64_t b = kb0; b < kb1; b++) {
        uint8_t *rec = tile + (b - kb0) * REC;
        uint8x16_t lo[4], hi[4];
        tr8x16(W + b * 18 + 2, wrb, nr, lo, hi);
        nib_groups(iq4_levels, lo, hi, rec);
        put_f16x8(W + b * 18, wrb, nr, (float *)(rec + 256));
    }
}

/* IQ4_XS: sub-block j of a 136-byte super-block (d, scales_h, scales_l[4], qs[128]), scale
 * d * (ls_j - 32) per row as kern_scalar.c computes it. */
static void dec_iq4_xs(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1,
                       uint8_t *tile)
{
    for (int64_t b = kb0; b < kb1; b++) {
        const uint8_t *sb = W + b / 8 * 136;
        const int j = (int)(b % 8);
        uint8_t *rec = tile + (b - kb0) * REC;
        uint8x16_t lo[4], hi[4];
        tr8x16(sb + 8 + 16 * j, wrb, nr, lo, hi);
        nib_groups(iq4_levels, lo, hi, rec);
        float sc[8] = {0};
        for (int r = 0; r < nr; r++)
            sc[r] = es_iq4xs_scale(sb + r * wrb, j);
        memcpy(rec + 256, sc, sizeof(sc));
    }
}

/* MXFP4 (e, qs[16]): the levels -12..12; scale 2^(e-128) per row from its E8M0 byte
 * (es_e8m0_half, as kern_scalar.c). */
static void dec_mxfp4(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1,
                      uint8_t *tile)
{
    for (int64_t b = kb0; b < kb1; b++) {
        uint8_t *rec = tile + (b - kb0) * REC;
        uint8x16_t lo[4], hi[4];
        tr8x16(W + b * 17 + 1, wrb, nr, lo, hi);
        nib_groups(mxfp4_levels, lo, hi, rec);
        float sc[8] = {0};
        for (int r = 0; r < nr; r++)
            sc[r] = es_e8m0_half(W[b * 17 + r * wrb]);
        memcpy(rec + 256, sc, sizeof(sc));
    }
}

/* Q4_K/Q5_K super-block (8 blocks): chunk cc of qs holds block 2cc in the low nibbles and block
 * 2cc+1 in the high ones, weight l of each in byte l; Q5_K adds bit j of qh[l] as bit 4 of
 * block j. Scales and mins per row as kern_scalar.c computes them. */
static inline __attribute__((always_inline)) void
dec_k45(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile, const int q5)
{
    const size_t sbb = q5 ? 176 : 144, oqs = q5 ? 48 : 16;
    for (int64_t b = kb0; b < kb1; b += 8) {
        const uint8_t *sb = W + b / 8 * sbb;
        uint8_t *rec = tile + (b - kb0) * REC;
        uint8x16_t hl[8], hh[8];
        if (q5) tr8x32(sb + 16, wrb, nr, hl, hh);
        for (int cc = 0; cc < 4; cc++) {
            uint8x16_t lo[8], hi[8];
            tr8x32(sb + oqs + 32 * cc, wrb, nr, lo, hi);
            for (int g = 0; g < 8; g++) {
                uint8x16_t l0 = and8(lo[g], 15), h0 = and8(hi[g], 15);
                uint8x16_t l1 = vshrq_n_u8(lo[g], 4), h1 = vshrq_n_u8(hi[g], 4);
                if (q5) { /* bit j of qh -> bit 4: shift left by 4 - j (right for j > 4) */
                    const int8x16_t s0 = vdupq_n_s8((int8_t)(4 - 2 * cc));
                    const int8x16_t s1 = vdupq_n_s8((int8_t)(3 - 2 * cc));
                    l0 = vorrq_u8(l0, and8(vshlq_u8(hl[g], s0), 0x10));
                    h0 = vorrq_u8(h0, and8(vshlq_u8(hh[g], s0), 0x10));
                    l1 = vorrq_u8(l1, and8(vshlq_u8(hl[g], s1), 0x10));
                    h1 = vorrq_u8(h1, and8(vshlq_u8(hh[g], s1), 0x10));
                }
                put_group(rec + 2 * cc * REC, g, l0, h0, 0);
                put_group(rec + (2 * cc + 1) * REC, g, l1, h1, 0);
            }
        }
        float s[8][8] = {{0}}, m[8][8] = {{0}}; /* [block][row] */
        for (int j = 0; j < nr; j++) {
            const uint8_t *x = sb + j * wrb;
            es_f16 hd, hm;
            memcpy(&hd, x, 2);
            memcpy(&hm, x + 2, 2);
            const float d = es_f16_to_f32(hd), dmin = es_f16_to_f32(hm);
            for (int sub = 0; sub < 8; sub++) {
                int sc, mn;
                es_k4_scale_min(sub, x + 4, &sc, &mn);
                s[sub][j] = d * (float)sc;
                m[sub][j] = -(dmin * (float)mn);
            }
        }
        for (int sub = 0; sub < 8; sub++) {
            memcpy(rec + sub * REC + 256, s[sub], 32);
            memcpy(rec + sub * REC + 288, m[sub], 32);
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

/* Q6_K super-block: half h (blocks 4h..4h+3) takes ql[64h ..] and qh[32h ..]; weight l of block
 * 4h+i is a nibble of ql (low for i = 0, 1; high for 2, 3; byte l or l+32) with bits 2i, 2i+1
 * of qh[l] on top, minus 32. s = the scale of the block's first 16 weights, m of the second. */
static void dec_q6_K(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    for (int64_t b = kb0; b < kb1; b += 8) {
        const uint8_t *sb = W + b / 8 * 210;
        uint8_t *rec = tile + (b - kb0) * REC;
        for (int h = 0; h < 2; h++) {
            uint8x16_t a_lo[8], a_hi[8], c_lo[8], c_hi[8], q_lo[8], q_hi[8];
            tr8x32(sb + 64 * h, wrb, nr, a_lo, a_hi);
            tr8x32(sb + 64 * h + 32, wrb, nr, c_lo, c_hi);
            tr8x32(sb + 128 + 32 * h, wrb, nr, q_lo, q_hi);
            uint8_t *r = rec + 4 * h * REC;
            for (int g = 0; g < 8; g++) {
                for (int part = 0; part < 2; part++) {
                    const uint8x16_t a = part ? a_hi[g] : a_lo[g], c = part ? c_hi[g] : c_lo[g];
                    const uint8x16_t q = part ? q_hi[g] : q_lo[g];
                    const uint8x16_t o = vdupq_n_u8(32);
                    const uint8x16_t v0 = vorrq_u8(and8(a, 15), vshlq_n_u8(and8(q, 3), 4));
                    const uint8x16_t v1 = vorrq_u8(and8(c, 15), vshlq_n_u8(and8(q, 12), 2));
                    const uint8x16_t v2 = vorrq_u8(vshrq_n_u8(a, 4), and8(q, 0x30));
                    const uint8x16_t v3 = vorrq_u8(vshrq_n_u8(c, 4), and8(vshrq_n_u8(q, 2), 0x30));
                    vst1q_u8(r + 0 * REC + 32 * g + 16 * part, vsubq_u8(v0, o));
                    vst1q_u8(r + 1 * REC + 32 * g + 16 * part, vsubq_u8(v1, o));
                    vst1q_u8(r + 2 * REC + 32 * g + 16 * part, vsubq_u8(v2, o));
                    vst1q_u8(r + 3 * REC + 32 * g + 16 * part, vsubq_u8(v3, o));
                }
            }
        }
        es_kern_put_scales16(rec, REC, 256, sb, wrb, nr, es_q6k_row_scales);
    }
}

/* Q3_K super-block: block 4h+j takes bits 2j..2j+1 of qs[32h + l] and bit 4h+j of hmask[l]
 * for weight l (layout in qtypes.c's dq_q3_K), value q2 + 4 * hbit - 4; its 16 scales of 16
 * weights placed as Q6_K's halves. Shifts by a vector of counts (vshlq_u8, negative: right),
 * since j is not a constant expression. */
static void dec_q3_K(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    for (int64_t b = kb0; b < kb1; b += 8) {
        const uint8_t *sb = W + b / 8 * 110;
        uint8_t *rec = tile + (b - kb0) * REC;
        uint8x16_t hm_lo[8], hm_hi[8];
        tr8x32(sb, wrb, nr, hm_lo, hm_hi);
        for (int h = 0; h < 2; h++) {
            uint8x16_t q_lo[8], q_hi[8];
            tr8x32(sb + 32 + 32 * h, wrb, nr, q_lo, q_hi);
            for (int j = 0; j < 4; j++) {
                const int8x16_t qshift = vdupq_n_s8((int8_t)(-2 * j));
                const int8x16_t hshift = vdupq_n_s8((int8_t)(2 - (4 * h + j))); /* to bit 2 */
                for (int g = 0; g < 8; g++) {
                    for (int part = 0; part < 2; part++) {
                        const uint8x16_t q = part ? q_hi[g] : q_lo[g];
                        const uint8x16_t hm = part ? hm_hi[g] : hm_lo[g];
                        const uint8x16_t v = vorrq_u8(and8(vshlq_u8(q, qshift), 3),
                                                      and8(vshlq_u8(hm, hshift), 4));
                        vst1q_u8(rec + (4 * h + j) * REC + 32 * g + 16 * part,
                                 vsubq_u8(v, vdupq_n_u8(4)));
                    }
                }
            }
        }
        es_kern_put_scales16(rec, REC, 256, sb, wrb, nr, es_q3k_row_scales);
    }
}

/* Q2_K super-block (scales[16], qs[64], d, dmin): block 4h+j takes bits 2j..2j+1 of qs[32h + l]
 * for weight l (layout in qtypes.c's dq_q2_K), times the low nibble of scales[2b] (l < 16) or
 * scales[2b+1]: sc*q <= 45, a signed byte as it is. The record (REC2 bytes) holds d at 256 and
 * the halves' -(dmin*m) at 288 and 320, as kern_scalar.c computes them. */
static inline uint32x4_t q2k_nibble(uint32x4_t v, int shift) /* (v >> shift) & 15 per dword */
{
    return vandq_u32(vshlq_u32(v, vdupq_n_s32(-shift)), vdupq_n_u32(15));
}

static void dec_q2_K(const uint8_t *W, size_t wrb, int nr, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    for (int64_t b = kb0; b < kb1; b += 8) {
        const uint8_t *sb = W + b / 8 * 84;
        uint8_t *rec = tile + (b - kb0) * REC2;
        uint8x16_t scb[2][4]; /* the 16 scale bytes: [rows 0-3, 4-7][dword] */
        tr8x16(sb, wrb, nr, scb[0], scb[1]);
        float d[8], dmin[8];
        put_f16x8(sb + 80, wrb, nr, d);
        put_f16x8(sb + 82, wrb, nr, dmin);
        for (int i = 0; i < 16; i++) { /* sub-block i: byte i % 4 of dword i / 4 of each row */
            uint8_t *r = rec + (i / 2) * REC2;
            for (int part = 0; part < 2; part++) {
                const uint32x4_t v = vreinterpretq_u32_u8(scb[part][i / 4]);
                const float32x4_t m = vcvtq_f32_u32(q2k_nibble(v, 8 * (i % 4) + 4));
                const float32x4_t mn = vnegq_f32(vmulq_f32(vld1q_f32(dmin + 4 * part), m));
                vst1q_f32((float *)(r + 288 + 32 * (i % 2)) + 4 * part, mn);
            }
        }
        for (int j = 0; j < 8; j++)
            memcpy(rec + j * REC2 + 256, d, 32);
        for (int h = 0; h < 2; h++) {
            uint8x16_t q_lo[8], q_hi[8];
            tr8x32(sb + 16 + 32 * h, wrb, nr, q_lo, q_hi);
            for (int j = 0; j < 4; j++) {
                const int blk = 4 * h + j;
                const int8x16_t qshift = vdupq_n_s8((int8_t)(-2 * j));
                uint8x16_t sc[2][2]; /* [half][part]: the row's scale in each of its 4 bytes */
                for (int half = 0; half < 2; half++)
                    for (int part = 0; part < 2; part++) {
                        const int i = 2 * blk + half;
                        const uint32x4_t v = vreinterpretq_u32_u8(scb[part][i / 4]);
                        sc[half][part] = vreinterpretq_u8_u32(
                            vmulq_n_u32(q2k_nibble(v, 8 * (i % 4)), 0x01010101u));
                    }
                for (int g = 0; g < 8; g++)
                    for (int part = 0; part < 2; part++) {
                        const uint8x16_t q = and8(vshlq_u8(part ? q_hi[g] : q_lo[g], qshift), 3);
                        vst1q_u8(rec + blk * REC2 + 32 * g + 16 * part,
                                 vmulq_u8(q, sc[g / 4][part]));
                    }
            }
        }
    }
}

#ifdef ES_I8MM
/* sdot record -> smmla record, in place: chunk c (bytes 64c .. 64c+63, groups 2c and 2c+1)
 * becomes [pair p][row 2p, then 2p+1][weights 8c .. 8c+7]. zip1/zip2 on dwords interleave the
 * two groups row by row, which is exactly that. */
static void to_mmla(uint8_t *tile, int64_t nbs, size_t rec_bytes)
{
    for (int64_t b = 0; b < nbs; b++) {
        uint8_t *rec = tile + b * rec_bytes;
        for (int c = 0; c < 4; c++) {
            uint8_t *p = rec + 64 * c;
            const uint32x4_t a0 = vreinterpretq_u32_u8(vld1q_u8(p));
            const uint32x4_t a1 = vreinterpretq_u32_u8(vld1q_u8(p + 16));
            const uint32x4_t b0 = vreinterpretq_u32_u8(vld1q_u8(p + 32));
            const uint32x4_t b1 = vreinterpretq_u32_u8(vld1q_u8(p + 48));
            vst1q_u8(p, vreinterpretq_u8_u32(vzip1q_u32(a0, b0)));
            vst1q_u8(p + 16, vreinterpretq_u8_u32(vzip2q_u32(a0, b0)));
            vst1q_u8(p + 32, vreinterpretq_u8_u32(vzip1q_u32(a1, b1)));
            vst1q_u8(p + 48, vreinterpretq_u8_u32(vzip2q_u32(a1, b1)));
        }
    }
}
#endif

/* ---- integer micro-kernel ------------------------------------------------------------------ */

static inline int tb_of(int kind)
{
#if defined(ES_I8MM)
    (void)kind;
    return 4; /* two token pairs */
#elif defined(ES_ASIMD)
    return kind == A_Q6K ? 2 : 3; /* twice the accumulators of sdot */
#else
    return kind == A_Q6K ? 3 : 4;
#endif
}

static inline void load_y(const es_kern_block *a, int t, float32x4_t y[2])
{
    if (!a->load_y) {
        y[0] = y[1] = vdupq_n_f32(0.0f);
    } else if (a->lo == 0 && a->hi == NR) {
        y[0] = vld1q_f32(a->yp[t]);
        y[1] = vld1q_f32(a->yp[t] + 4);
    } else {
        float buf[NR] = {0};
        for (int j = a->lo; j < a->hi; j++)
            buf[j] = a->yp[t][j];
        y[0] = vld1q_f32(buf);
        y[1] = vld1q_f32(buf + 4);
    }
}

static inline void store_y(const es_kern_block *a, int t, const float32x4_t y[2])
{
    if (a->lo == 0 && a->hi == NR) {
        vst1q_f32(a->yp[t], y[0]);
        vst1q_f32(a->yp[t] + 4, y[1]);
    } else {
        float buf[NR];
        vst1q_f32(buf, y[0]);
        vst1q_f32(buf + 4, y[1]);
        for (int j = a->lo; j < a->hi; j++)
            a->yp[t][j] = buf[j];
    }
}

static inline float ldf(const uint8_t *p)
{
    float v;
    memcpy(&v, p, 4);
    return v;
}

static inline __attribute__((always_inline)) void mk_int(const int kind, const int T,
                                                         const es_kern_block *a)
{
    const int64_t K = a->K, kb0 = a->k0 / 32, nbs = a->nk / 32;
    const int64_t od = es_act_q8_off_d(K) + 4 * kb0, ods = es_act_q8_off_ds(K) + 4 * kb0;
    const int64_t oc2 = es_act_q8_off_c2(K) + 8 * kb0;
    float32x4_t y[TBMAX][2];
    const uint8_t *xr[TBMAX];
    for (int t = 0; t < T; t++) {
        xr[t] = a->xr[t];
        load_y(a, t, y[t]);
    }
    const uint8_t *rec = a->tile;
    for (int64_t b = 0; b < nbs; b++, rec += rec_of(kind)) {
        const int64_t oq = 32 * (kb0 + b);
        int32x4_t acc[TBMAX][2]; /* per token: rows 0-3, rows 4-7 */
        float32x4_t flo[TBMAX][2];
#ifdef ES_I8MM
        /* token pairs (2p, 2p+1); an odd last token is paired with itself, the copy dropped */
        const int P = (T + 1) / 2;
        int32x4_t mm[2][4];
        for (int t = 0; t < T; t++) /* all set below; this only tells the compiler so */
            for (int h = 0; h < 2; h++) {
                acc[t][h] = vdupq_n_s32(0);
                flo[t][h] = vdupq_n_f32(0.0f);
            }
        for (int p = 0; p < P; p++)
            for (int q = 0; q < 4; q++)
                mm[p][q] = vdupq_n_s32(0);
        for (int c = 0; c < 4; c++) {
            int8x16_t xv[2];
            for (int p = 0; p < P; p++) {
                const uint8_t *x1 = xr[2 * p + 1 < T ? 2 * p + 1 : 2 * p];
                xv[p] = vcombine_s8(vld1_s8((const int8_t *)xr[2 * p] + oq + 8 * c),
                                    vld1_s8((const int8_t *)x1 + oq + 8 * c));
            }
            for (int q = 0; q < 4; q++) {
                const int8x16_t w = vld1q_s8((const int8_t *)rec + 64 * c + 16 * q);
                for (int p = 0; p < P; p++)
                    mm[p][q] = vmmlaq_s32(mm[p][q], xv[p], w);
            }
            if (c == 3 || (kind == A_Q6K && c == 1)) {
                /* mm[p][q] = (t 2p: rows 2q, 2q+1; t 2p+1: rows 2q, 2q+1): 64-bit zips give
                 * rows 0-3 and 4-7 per token */
                for (int p = 0; p < P; p++) {
                    int64x2_t v[4];
                    for (int q = 0; q < 4; q++)
                        v[q] = vreinterpretq_s64_s32(mm[p][q]);
                    acc[2 * p][0] = vreinterpretq_s32_s64(vzip1q_s64(v[0], v[1]));
                    acc[2 * p][1] = vreinterpretq_s32_s64(vzip1q_s64(v[2], v[3]));
                    if (2 * p + 1 < T) {
                        acc[2 * p + 1][0] = vreinterpretq_s32_s64(vzip2q_s64(v[0], v[1]));
                        acc[2 * p + 1][1] = vreinterpretq_s32_s64(vzip2q_s64(v[2], v[3]));
                    }
                }
                if (c == 1) { /* Q6_K: the first half's partial, as scalar */
                    for (int t = 0; t < T; t++)
                        for (int h = 0; h < 2; h++)
                            flo[t][h] = vmulq_f32(vcvtq_f32_s32(acc[t][h]),
                                                  vld1q_f32((const float *)(rec + 256) + 4 * h));
                    for (int p = 0; p < P; p++)
                        for (int q = 0; q < 4; q++)
                            mm[p][q] = vdupq_n_s32(0);
                }
            }
        }
#else
        int8x16_t xv[TBMAX][2];
        int32x4_t pr[TBMAX][2]; /* asimd: rows 2-3 (6-7) as pair sums, acc rows 0-1 (4-5) */
        for (int t = 0; t < T; t++) {
            xv[t][0] = vld1q_s8((const int8_t *)xr[t] + oq);
            xv[t][1] = vld1q_s8((const int8_t *)xr[t] + oq + 16);
            acc[t][0] = acc[t][1] = pr[t][0] = pr[t][1] = vdupq_n_s32(0);
        }
        for (int half = 0; half < 2; half++) {
            /* lanes must be immediates: one line per group of the half */
#define STEP(L)                                                                                    \
    do {                                                                                           \
        const int8_t *wp = (const int8_t *)rec + 32 * (4 * half + L);                              \
        const int8x16_t w0 = vld1q_s8(wp), w1 = vld1q_s8(wp + 16);                                 \
        for (int t = 0; t < T; t++) {                                                              \
            DOT_LANE(acc[t][0], pr[t][0], w0, xv[t][half], L);                                     \
            DOT_LANE(acc[t][1], pr[t][1], w1, xv[t][half], L);                                     \
        }                                                                                          \
    } while (0)
            STEP(0);
            STEP(1);
            STEP(2);
            STEP(3);
#undef STEP
#ifdef ES_ASIMD
            if (half == 1 || kind == A_Q6K) /* pair sums -> one int32 per row, rows 0-3 */
                for (int t = 0; t < T; t++)
                    for (int h = 0; h < 2; h++) {
                        acc[t][h] = vpaddq_s32(acc[t][h], pr[t][h]);
                        pr[t][h] = vdupq_n_s32(0);
                    }
#else
            (void)pr;
#endif
            if (kind == A_Q6K && half == 0) { /* the first half's partial, as scalar */
                for (int t = 0; t < T; t++)
                    for (int h = 0; h < 2; h++) {
                        flo[t][h] = vmulq_f32(vcvtq_f32_s32(acc[t][h]),
                                              vld1q_f32((const float *)(rec + 256) + 4 * h));
                        acc[t][h] = vdupq_n_s32(0);
                    }
            }
        }
#endif
        /* the float stage of kern_scalar.c, per row lane */
        for (int t = 0; t < T; t++) {
            const float32x4_t xd = vdupq_n_f32(ldf(xr[t] + od + 4 * b));
            for (int h = 0; h < 2; h++) {
                const float32x4_t s = vld1q_f32((const float *)(rec + 256) + 4 * h);
                const float32x4_t m = vld1q_f32((const float *)(rec + 288) + 4 * h);
                float32x4_t f;
                if (kind == A_Q6K)
                    f = vfmaq_f32(flo[t][h], vcvtq_f32_s32(acc[t][h]), m);
                else
                    f = vmulq_f32(vcvtq_f32_s32(acc[t][h]), s);
                if (kind == A_Q2K) { /* the halves' mins times the act's half sums (c2) */
                    const float32x2_t sx =
                        vcvt_f32_s32(vld1_s32((const int32_t *)(xr[t] + oc2) + 2 * b));
                    f = vfmaq_lane_f32(f, m, sx, 0);
                    f = vfmaq_lane_f32(f, vld1q_f32((const float *)(rec + 320) + 4 * h), sx, 1);
                }
                y[t][h] = vfmaq_f32(y[t][h], f, xd);
                if (kind == A_Q4K || kind == A_Q5K)
                    y[t][h] = vfmaq_f32(y[t][h], m, vdupq_n_f32(ldf(xr[t] + ods + 4 * b)));
            }
        }
    }
    for (int t = 0; t < T; t++)
        store_y(a, t, y[t]);
}

#define MK(kind, T)                                                                                \
    static void mk_##kind##_##T(const es_kern_block *a)                                            \
    {                                                                                              \
        mk_int(kind, T, a);                                                                        \
    }
#define MK_ALL(kind) MK(kind, 1) MK(kind, 2) MK(kind, 3) MK(kind, 4)
MK_ALL(A_Q40)
MK_ALL(A_Q80)
MK_ALL(A_Q4K)
MK_ALL(A_Q5K)
MK_ALL(A_Q6K)
MK_ALL(A_Q2K)
typedef void (*mk_fn)(const es_kern_block *a);
#define MK_ROW(kind)                                                                               \
    {                                                                                              \
        NULL, mk_##kind##_1, mk_##kind##_2, mk_##kind##_3, mk_##kind##_4                           \
    }
static const mk_fn mk_table[A_N][TBMAX + 1] = {MK_ROW(A_Q40), MK_ROW(A_Q80), MK_ROW(A_Q4K),
                                               MK_ROW(A_Q5K), MK_ROW(A_Q6K), MK_ROW(A_Q2K)};

#define RUN(kind)                                                                                  \
    static void run_##kind(const es_kern_block *b)                                                 \
    {                                                                                              \
        mk_table[kind][b->T](b);                                                                   \
    }
RUN(A_Q40)
RUN(A_Q80)
RUN(A_Q4K)
RUN(A_Q5K)
RUN(A_Q6K)
RUN(A_Q2K)
static void (*const run_table[A_N])(const es_kern_block *) = {run_A_Q40, run_A_Q80, run_A_Q4K,
                                                              run_A_Q5K, run_A_Q6K, run_A_Q2K};

static es_kern_tiling int_tiling(int kind, int tiled,
                                 void (*decode)(const es_kern_tile *, uint8_t *))
{
    return (es_kern_tiling){.tile_rows = NR,
                            .unit = 256,
                            .tile_bytes = 8 * rec_of(kind),
                            .act_bytes = ACT256,
                            .act_row_bytes = es_act_q8_row_bytes,
                            .tb = tb_of(kind),
                            .tb_narrow = tb_of(kind),
                            .tiled = tiled,
                            .decode = decode,
                            .kernel = run_table[kind]};
}

static size_t scratch_int(int64_t K)
{
    const es_kern_tiling tl = int_tiling(A_Q40, 0, NULL); /* REC: every kind but Q2_K */
    return es_kern_drive_scratch(&tl, K);
}

static size_t scratch_q2k(int64_t K)
{
    const es_kern_tiling tl = int_tiling(A_Q2K, 0, NULL); /* REC2 */
    return es_kern_drive_scratch(&tl, K);
}

/* The decoded tile in the smmla order (i8mm), else as decoded. */
static inline void finish_tile(uint8_t *tile, const es_kern_tile *t, size_t rec_bytes)
{
#ifdef ES_I8MM
    to_mmla(tile, (t->k1 - t->k0) / 32, rec_bytes);
#else
    (void)tile;
    (void)t;
    (void)rec_bytes;
#endif
}

#define GEMM_INT(name, kind, dec, type)                                                            \
    static void name##_decode(const es_kern_tile *t, uint8_t *tile)                                \
    {                                                                                              \
        dec((const uint8_t *)t->W + t->nt * t->wrb, t->wrb, t->hi, t->k0 / 32, t->k1 / 32, tile);  \
        finish_tile(tile, t, rec_of(kind));                                                        \
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
GEMM_INT(gemm_q5_0, A_Q80, dec_q5_0, ES_QTYPE_Q5_0)
GEMM_INT(gemm_q4_1, A_Q4K, dec_q4_1, ES_QTYPE_Q4_1)
GEMM_INT(gemm_q5_1, A_Q5K, dec_q5_1, ES_QTYPE_Q5_1)
GEMM_INT(gemm_iq4_nl, A_Q80, dec_iq4_nl, ES_QTYPE_IQ4_NL)
GEMM_INT(gemm_iq4_xs, A_Q80, dec_iq4_xs, ES_QTYPE_IQ4_XS)
GEMM_INT(gemm_mxfp4, A_Q80, dec_mxfp4, ES_QTYPE_MXFP4)

/* ---- tiled weights (quant/tiles.h) ----------------------------------------------------------
 *
 * The 8-row tile s (rows 8s .. 8s+7) of a 32-row tile reads, per block, dword group g as the 32
 * bytes at 2nt + 4nt*g + 32s (already the record's group g: rows 0-3, then 4-7) and its f16
 * scales at 16s. Rows past the end of a short last tile read as zero (copied through a zeroed
 * buffer, so nothing past the matrix is read). The records and micro-kernels are those of the
 * row layout, so results are bit-identical to it.
 */

typedef void (*tdecode_fn)(const uint8_t *Wt, int nt, int s, int64_t kb0, int64_t kb1,
                           uint8_t *tile);

static inline __attribute__((always_inline)) void dec_t_q(const int q8, const uint8_t *Wt,
                                                          const int nt, int s, int64_t kb0,
                                                          int64_t kb1, uint8_t *tile)
{
    const size_t bb = q8 ? 34 : 18, tbb = (size_t)nt * bb;
    const int n = nt - 8 * s < 8 ? nt - 8 * s : 8; /* rows of this 8-row tile */
    for (int64_t b = kb0; b < kb1; b++) {
        const uint8_t *src = Wt + (size_t)b * tbb, *q = src + 2 * nt + 32 * s;
        uint8_t *rec = tile + (b - kb0) * REC;
        put_f16x8(src + 16 * s, 2, n, (float *)(rec + 256)); /* n consecutive f16 */
        for (int g = 0; g < (q8 ? 8 : 4); g++) {             /* constant bound once inlined */
            const uint8_t *p = q + 4 * nt * g;
            uint8x16_t lo, hi;
            if (n == 8) {
                lo = vld1q_u8(p);
                hi = vld1q_u8(p + 16);
            } else {
                uint8_t buf[32] = {0};
                memcpy(buf, p, 4 * (size_t)n);
                lo = vld1q_u8(buf);
                hi = vld1q_u8(buf + 16);
            }
            if (q8) {
                put_group(rec, g, lo, hi, 0);
            } else {
                put_group(rec, g, and8(lo, 15), and8(hi, 15), 8);
                put_group(rec, g + 4, vshrq_n_u8(lo, 4), vshrq_n_u8(hi, 4), 8);
            }
        }
    }
}

static void dec_t_q4_0(const uint8_t *Wt, int nt, int s, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    dec_t_q(0, Wt, nt, s, kb0, kb1, tile);
}

static void dec_t_q8_0(const uint8_t *Wt, int nt, int s, int64_t kb0, int64_t kb1, uint8_t *tile)
{
    dec_t_q(1, Wt, nt, s, kb0, kb1, tile);
}

/* The 8-row sub-tile of the 32-row layout tile the tile starts in. */
#define GEMM_TILED(name, kind, dec, type)                                                          \
    static void name##_decode(const es_kern_tile *t, uint8_t *tile)                                \
    {                                                                                              \
        const int64_t t0 = t->nt / ES_TILE_ROWS * ES_TILE_ROWS;                                    \
        dec((const uint8_t *)t->W + t0 * t->wrb, es_tile_rows(t->N, t0), (int)(t->nt - t0) / NR,   \
            t->k0 / 32, t->k1 / 32, tile);                                                         \
        finish_tile(tile, t, REC);                                                                 \
    }                                                                                              \
    static void name(const void *W, int64_t K, int64_t N, int64_t n0, int64_t n1, const void *act, \
                     const int32_t *rows, int64_t n_rows, float *Y, int64_t ldy, int accumulate,   \
                     void *scratch)                                                                \
    {                                                                                              \
        ES_ASSERT(K % 32 == 0);                                                                    \
        const es_kern_tiling tl = int_tiling(kind, 1, name##_decode);                              \
        es_kern_drive(&tl, type, W, K, N, n0, n1, act, rows, n_rows, Y, ldy, accumulate, scratch); \
    }
GEMM_TILED(gemm_tiled_q4_0, A_Q40, dec_t_q4_0, ES_QTYPE_Q4_0)
GEMM_TILED(gemm_tiled_q8_0, A_Q80, dec_t_q8_0, ES_QTYPE_Q8_0)

/* ---- activations ---------------------------------------------------------------------------- */

/* Signed weights need no correction: c and c2 are 0. The portable preparation is used as is
 * (O(K) per row against the GEMM's O(N K); its q, d, ds are the ones every table shares). */
static void act_q(const float *X, int64_t ldx, int64_t n, int64_t K, void *act)
{
    es_act_q8_prepare(X, ldx, n, K, act, 0, 0);
}
/* Q4_1 / Q5_1: llama.cpp's Q8_1, Q8_0 with its block sums in ds */
static void act_q1(const float *X, int64_t ldx, int64_t n, int64_t K, void *act)
{
    es_act_q8_1_prepare(X, ldx, n, K, act, 0, 0);
}
/* K-quant weights: scaled per 256 values as llama.cpp's Q8_K (kern.h) */
static void act_k(const float *X, int64_t ldx, int64_t n, int64_t K, void *act)
{
    es_act_q8k_prepare(X, ldx, n, K, act, 0, 0);
}
/* Q2_K: c2 holds each half block's sum of q (c2_mult = 1), the kernel's sum for the mins */
static void act_q2k(const float *X, int64_t ldx, int64_t n, int64_t K, void *act)
{
    es_act_q8k_prepare(X, ldx, n, K, act, 0, 1);
}

/* ---- float weights ----------------------------------------------------------------------------
 */

/* tile[k - k0][16] floats for rows [0, nr) (others zero), k in [k0, k1). Conversions are exact. */
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
        for (; k + 4 <= k1; k += 4) {
            float32x4_t v;
            if (type == ES_QTYPE_F32)
                v = vld1q_f32((const float *)p + k);
            else if (type == ES_QTYPE_F16)
                v = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)p + k)));
            else /* bf16: the high half of an f32 */
                v = vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)p + k), 16));
            float buf[4];
            vst1q_f32(buf, v);
            for (int i = 0; i < 4; i++)
                tile[(k - k0 + i) * NRF + j] = buf[i];
        }
        for (; k < k1; k++) {
            float v;
            if (type == ES_QTYPE_F32) {
                memcpy(&v, p + 4 * k, 4);
            } else {
                uint16_t h;
                memcpy(&h, p + 2 * k, 2);
                v = type == ES_QTYPE_F16 ? es_f16_to_f32(h) : es_bf16_to_f32(h);
            }
            tile[(k - k0) * NRF + j] = v;
        }
    }
}

static inline __attribute__((always_inline)) void mk_flt(const int T, const es_kern_block *a)
{
    /* rows [lo, hi): lo > 0 only on the F32 tile layout, whose tiles start at multiples of 16 */
    const int lo = a->lo, nr = a->hi;
    const float *xr[TBMAX];
    float32x4_t y[TBMAX][4];
    for (int t = 0; t < T; t++) {
        xr[t] = (const float *)a->xr[t] + a->k0;
        float buf[NRF] = {0};
        if (a->load_y)
            for (int j = lo; j < nr; j++)
                buf[j] = a->yp[t][j];
        for (int i = 0; i < 4; i++)
            y[t][i] = vld1q_f32(buf + 4 * i);
    }
    const float *tp = (const float *)a->tile;
    int64_t k = 0;
    for (; k + 4 <= a->nk; k += 4, tp += 4 * NRF) {
        float32x4_t xv[TBMAX];
        for (int t = 0; t < T; t++)
            xv[t] = vld1q_f32(xr[t] + k);
            /* y += w * x[k + L]: one fused multiply-add per k, in increasing k */
#define KSTEP(L)                                                                                   \
    do {                                                                                           \
        float32x4_t w[4];                                                                          \
        for (int i = 0; i < 4; i++)                                                                \
            w[i] = vld1q_f32(tp + L * NRF + 4 * i);                                                \
        for (int t = 0; t < T; t++)                                                                \
            for (int i = 0; i < 4; i++)                                                            \
                y[t][i] = vfmaq_laneq_f32(y[t][i], w[i], xv[t], L);                                \
    } while (0)
        KSTEP(0);
        KSTEP(1);
        KSTEP(2);
        KSTEP(3);
#undef KSTEP
    }
    for (; k < a->nk; k++, tp += NRF)
        for (int t = 0; t < T; t++) {
            const float32x4_t x = vld1q_dup_f32(xr[t] + k);
            for (int i = 0; i < 4; i++)
                y[t][i] = vfmaq_f32(y[t][i], vld1q_f32(tp + 4 * i), x);
        }
    for (int t = 0; t < T; t++) {
        if (lo == 0 && nr == NRF) {
            for (int i = 0; i < 4; i++)
                vst1q_f32(a->yp[t] + 4 * i, y[t][i]);
        } else {
            float buf[NRF];
            for (int i = 0; i < 4; i++)
                vst1q_f32(buf + 4 * i, y[t][i]);
            for (int j = lo; j < nr; j++)
                a->yp[t][j] = buf[j];
        }
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
static const mk_fn mkf_table[TBMAX + 1] = {NULL, mkf_1, mkf_2, mkf_3, mkf_4};
static void run_flt(const es_kern_block *b)
{
    mkf_table[b->T](b);
}

static es_kern_tiling flt_tiling(void (*decode)(const es_kern_tile *, uint8_t *))
{
    return es_kern_float_tiling(NRF, TBMAX, decode, run_flt);
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

void FILL_TABLE(es_kern *k)
{
    k->isa = ISA_NAME;
    static const struct {
        uint32_t type;
        es_kern_ops ops;
    } tab[] = {
        {ES_QTYPE_Q4_0, {es_act_q8_row_bytes, act_q, gemm_q4_0, scratch_int, gemm_tiled_q4_0}},
        {ES_QTYPE_Q8_0, {es_act_q8_row_bytes, act_q, gemm_q8_0, scratch_int, gemm_tiled_q8_0}},
        {ES_QTYPE_Q4_K, {es_act_q8_row_bytes, act_k, gemm_q4_K, scratch_int, NULL}},
        {ES_QTYPE_Q5_K, {es_act_q8_row_bytes, act_k, gemm_q5_K, scratch_int, NULL}},
        {ES_QTYPE_Q6_K, {es_act_q8_row_bytes, act_k, gemm_q6_K, scratch_int, NULL}},
        {ES_QTYPE_Q3_K, {es_act_q8_row_bytes, act_k, gemm_q3_K, scratch_int, NULL}},
        {ES_QTYPE_Q2_K, {es_act_q8_row_bytes, act_q2k, gemm_q2_K, scratch_q2k, NULL}},
        {ES_QTYPE_Q5_0, {es_act_q8_row_bytes, act_q, gemm_q5_0, scratch_int, NULL}},
        {ES_QTYPE_Q4_1, {es_act_q8_row_bytes, act_q1, gemm_q4_1, scratch_int, NULL}},
        {ES_QTYPE_Q5_1, {es_act_q8_row_bytes, act_q1, gemm_q5_1, scratch_int, NULL}},
        {ES_QTYPE_IQ4_NL, {es_act_q8_row_bytes, act_q, gemm_iq4_nl, scratch_int, NULL}},
        {ES_QTYPE_IQ4_XS, {es_act_q8_row_bytes, act_k, gemm_iq4_xs, scratch_int, NULL}},
        {ES_QTYPE_MXFP4, {es_act_q8_row_bytes, act_q, gemm_mxfp4, scratch_int, NULL}},
        {ES_QTYPE_F32, {es_act_f32_row_bytes, es_act_f32_prepare, gemm_f32, scratch_f, gemm_tiled_f32}},
        {ES_QTYPE_F16, {es_act_f32_row_bytes, es_act_f16r_prepare, gemm_f16, scratch_f, NULL}},
        {ES_QTYPE_BF16, {es_act_f32_row_bytes, es_act_bf16r_prepare, gemm_bf16, scratch_f, NULL}},
    };
    for (size_t i = 0; i < ES_LEN(tab); i++)
        k->op[tab[i].type] = tab[i].ops;
}
