/*
 * Weight type table, and the scalar reference dequantizers for the formats estream computes with.
 * The reference quantizers (for synthetic models and tests) are quantize.c's.
 *
 * DESIGN
 * - Type ids, names, block sizes and block bytes are ggml's (GGUF stores ggml type ids). Ids ggml
 *   retired (4, 5, 31..33, 36..38) and ids past MXFP4 have no entry: es_qtype_info_get() returns
 *   NULL, and a GGUF reader must reject them.
 * - es_dequantize_row() is bit-exact with ggml's dequantize_row_*: same integer decoding and the
 *   same float operations in the same order (the build uses -std=c11, so no FMA contraction).
 *   Every SIMD kernel is tested against it.
 * - ggml has since added ids 40..42 (nvfp4, q1_0, q2_0); ES_QTYPE_COUNT stops at 40, so files
 *   using them read as unknown types.
 * - All functions are pure and thread-safe; the table is read-only.
 */
#include "quant/qtypes_int.h"

#include <ctype.h>
#include <math.h>
#include <string.h>

/* Bit-exactness needs a*b + c rounded twice, never fused (gcc's -std=c11 already implies
 * -ffp-contract=off; clang needs this when FMA is enabled). */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* Block layouts used only here (decoded, never written). All fields are little-endian in the
 * file. */
/* IQ4_NL: Q4_0's layout, but each 4-bit index picks a value of the non-linear table below
 * (x = d * kv[q]). IQ4_XS: 256 values in 8 sub-blocks of 32 with 6-bit scales (low 4 bits in
 * scales_l, two per byte; high 2 bits in scales_h, two per sub-block), x = d * (ls - 32) *
 * kv[q], the nibbles of each sub-block laid out as in IQ4_NL. */
#define QK4_NL 32
typedef struct {
    es_f16 d;
    uint8_t qs[QK4_NL / 2];
} block_iq4_nl;
typedef struct {
    es_f16 d;
    uint16_t scales_h;
    uint8_t scales_l[4];
    uint8_t qs[128];
} block_iq4_xs;
_Static_assert(sizeof(block_iq4_nl) == 18, "iq4_nl block");
_Static_assert(sizeof(block_iq4_xs) == 136, "iq4_xs block");
/* ggml's kvalues_iq4nl: the 16 levels both formats index */
static const int8_t iq4nl_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                        1,    13,   25,  38,  53,  69,  89,  113};

/* Sizes from ggml's type_traits (ggml.c) and block structs (ggml-common.h). Byte counts of the
 * types we do not decode are listed with their layout so they can be checked by eye. */
static const es_qtype_info type_table[ES_QTYPE_COUNT] = {
    [0] = {"f32", 1, 4, true},
    [1] = {"f16", 1, 2, true},
    [2] = {"q4_0", 32, 18, true},       /* d, qs[16] */
    [3] = {"q4_1", 32, 20, true},       /* d, m, qs[16] */
    [6] = {"q5_0", 32, 22, true},       /* d, qh[4], qs[16] */
    [7] = {"q5_1", 32, 24, true},       /* d, m, qh[4], qs[16] */
    [8] = {"q8_0", 32, 34, true},       /* d, qs[32] */
    [9] = {"q8_1", 32, 36, false},      /* d, s, qs[32] */
    [10] = {"q2_K", 256, 84, true},     /* scales[16], qs[64], d, dmin */
    [11] = {"q3_K", 256, 110, true},    /* hmask[32], qs[64], scales[12], d */
    [12] = {"q4_K", 256, 144, true},    /* d, dmin, scales[12], qs[128] */
    [13] = {"q5_K", 256, 176, true},    /* d, dmin, scales[12], qh[32], qs[128] */
    [14] = {"q6_K", 256, 210, true},    /* ql[128], qh[64], scales[16], d */
    [15] = {"q8_K", 256, 292, true},    /* float d, qs[256], i16 bsums[16] */
    [16] = {"iq2_xxs", 256, 66, false}, /* d, u16 qs[32] */
    [17] = {"iq2_xs", 256, 74, false},  /* d, u16 qs[32], scales[8] */
    [18] = {"iq3_xxs", 256, 98, false}, /* d, qs[96] */
    [19] = {"iq1_s", 256, 50, false},   /* d, qs[32], u16 qh[8] */
    [20] = {"iq4_nl", 32, 18, true},    /* d, qs[16] (decoded; no quantizer) */
    [21] = {"iq3_s", 256, 110, false},  /* d, qs[64], qh[8], signs[32], scales[4] */
    [22] = {"iq2_s", 256, 82, false},   /* d, qs[64], qh[8], scales[8] */
    [23] = {"iq4_xs", 256, 136, true},  /* d, u16 scales_h, scales_l[4], qs[128] (decoded; no
                                         * quantizer) */
    [24] = {"i8", 1, 1, false}, /* ES_QTYPE_I8: raw bytes (pack records), never computed with */
    [25] = {"i16", 1, 2, false},
    [26] = {"i32", 1, 4, false},
    [27] = {"i64", 1, 8, false},
    [28] = {"f64", 1, 8, false},
    [29] = {"iq1_m", 256, 56, false}, /* qs[32], qh[16], scales[8] (no d field) */
    [30] = {"bf16", 1, 2, true},
    [34] = {"tq1_0", 256, 54, false}, /* qs[48], qh[4], d */
    [35] = {"tq2_0", 256, 66, false}, /* qs[64], d */
    [39] = {"mxfp4", 32, 17, true},   /* u8 e (E8M0 scale), qs[16] */
};

const es_qtype_info *es_qtype_info_get(uint32_t type)
{
    if (type >= ES_QTYPE_COUNT || !type_table[type].name) return NULL;
    return &type_table[type];
}

bool es_qtype_is_weight(uint32_t type)
{
    const es_qtype_info *q = es_qtype_info_get(type);
    return q && q->supported && type != ES_QTYPE_Q8_K;
}

const char *es_qtype_weight_list(void)
{
    /* test_quant:test_weight_list checks it against type_table */
    return "f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, "
           "iq4_xs, mxfp4";
}

const char *es_qtype_name(uint32_t type)
{
    const es_qtype_info *q = es_qtype_info_get(type);
    return q ? q->name : "?";
}

bool es_qtype_parse(const char *name, es_qtype *out)
{
    if (!name) return false;
    for (uint32_t t = 0; t < ES_QTYPE_COUNT; t++) {
        const char *s = type_table[t].name;
        if (!s) continue;
        size_t i = 0;
        while (s[i] && name[i] && tolower((unsigned char)s[i]) == tolower((unsigned char)name[i]))
            i++;
        if (!s[i] && !name[i]) {
            if (out) *out = (es_qtype)t;
            return true;
        }
    }
    return false;
}

size_t es_qtype_row_bytes(uint32_t type, int64_t n)
{
    const es_qtype_info *q = es_qtype_info_get(type);
    if (!q || n < 0 || n % q->block_elems) return 0;
    uint64_t blocks = (uint64_t)n / q->block_elems;
    if (blocks > SIZE_MAX / q->block_bytes) return 0; /* would overflow size_t */
    return (size_t)blocks * q->block_bytes;
}

/* ---------------------------------------------------------------------------------------------
 * Dequantization (ggml's dequantize_row_*, bit-exact)
 * ------------------------------------------------------------------------------------------- */

/* Q4_0: 32 weights share one half scale d. qs[j] holds element j in its low nibble and element
 * j+16 in its high nibble; the nibble q (0..15) decodes to d*(q-8). */
static void dq_q4_0(const es_block_q4_0 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += ES_QK4_0) {
        const float d = h2f(x[i].d);
        for (int j = 0; j < ES_QK4_0 / 2; j++) {
            const int lo = (x[i].qs[j] & 0x0F) - 8;
            const int hi = (x[i].qs[j] >> 4) - 8;
            y[j] = lo * d;
            y[j + ES_QK4_0 / 2] = hi * d;
        }
    }
}

/* Q4_1: like Q4_0 but unsigned nibbles with an offset: x = q*d + m. */
static void dq_q4_1(const block_q4_1 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK4_1) {
        const float d = h2f(x[i].d), m = h2f(x[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            const int lo = x[i].qs[j] & 0x0F;
            const int hi = x[i].qs[j] >> 4;
            y[j] = lo * d + m;
            y[j + QK4_1 / 2] = hi * d + m;
        }
    }
}

/* Q5_0 / Q5_1: the 4 low bits are packed as in Q4_0; the fifth bit of element e (0..31) is bit e
 * of qh, read as a little-endian uint32. Q5_0 decodes d*(q-16), Q5_1 q*d + m. */
static inline uint32_t load_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void dq_q5_0(const block_q5_0 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK5_0) {
        const float d = h2f(x[i].d);
        const uint32_t qh = load_u32le(x[i].qh);
        for (int j = 0; j < QK5_0 / 2; j++) {
            const int hb0 = (int)((qh >> j) & 1) << 4;
            const int hb1 = (int)((qh >> (j + QK5_0 / 2)) & 1) << 4;
            const int q0 = ((x[i].qs[j] & 0x0F) | hb0) - 16;
            const int q1 = ((x[i].qs[j] >> 4) | hb1) - 16;
            y[j] = q0 * d;
            y[j + QK5_0 / 2] = q1 * d;
        }
    }
}

static void dq_q5_1(const block_q5_1 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK5_1) {
        const float d = h2f(x[i].d), m = h2f(x[i].m);
        const uint32_t qh = load_u32le(x[i].qh);
        for (int j = 0; j < QK5_1 / 2; j++) {
            const int hb0 = (int)((qh >> j) & 1) << 4;
            const int hb1 = (int)((qh >> (j + QK5_1 / 2)) & 1) << 4;
            const int q0 = (x[i].qs[j] & 0x0F) | hb0;
            const int q1 = (x[i].qs[j] >> 4) | hb1;
            y[j] = q0 * d + m;
            y[j + QK5_1 / 2] = q1 * d + m;
        }
    }
}

/* Q8_0: x = d*q, q a signed byte. */
static void dq_q8_0(const es_block_q8_0 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += ES_QK8_0) {
        const float d = h2f(x[i].d);
        for (int j = 0; j < ES_QK8_0; j++)
            y[j] = x[i].qs[j] * d;
    }
}

/* Q4_K: qs is walked in 4 chunks of 32 bytes; chunk c holds sub-block 2c in its low nibbles
 * and sub-block 2c+1 in its high nibbles (element l of each sub-block at byte l). */
static void dq_q4_K(const es_block_q4_K *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t sc, m;
            k4_scale_min(2 * c, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            k4_scale_min(2 * c + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (q[l] & 0x0F) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

/* Q5_K: low 4 bits as in Q4_K. The fifth bit of element l of sub-block s (0..7) is bit s of
 * qh[l]: chunk c uses bit 2c for its low-nibble sub-block and bit 2c+1 for its high one. */
static void dq_q5_K(const es_block_q5_K *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
        const uint8_t *ql = x[i].qs, *qh = x[i].qh;
        for (int c = 0; c < 4; c++, ql += 32) {
            const uint8_t u1 = (uint8_t)(1u << (2 * c)), u2 = (uint8_t)(2u << (2 * c));
            uint8_t sc, m;
            k4_scale_min(2 * c, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            k4_scale_min(2 * c + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * ((ql[l] & 0x0F) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

/*
 * Q6_K: 16 sub-blocks of 16 weights, each with a signed 8-bit scale; x = (d*scale)*(q-32), q a
 * 6-bit value. The block is two halves of 128 weights; half h uses ql[64h..64h+63],
 * qh[32h..32h+31] and scales[8h..8h+7]. Inside a half, for l = 0..31:
 *
 *   element l      : low nibble of ql[l]     | bits 0-1 of qh[l] << 4
 *   element l + 32 : low nibble of ql[l+32]  | bits 2-3 of qh[l] << 4
 *   element l + 64 : high nibble of ql[l]    | bits 4-5 of qh[l] << 4
 *   element l + 96 : high nibble of ql[l+32] | bits 6-7 of qh[l] << 4
 *
 * and element e of the half uses scale e/16.
 */
static void dq_q6_K(const es_block_q6_K *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = h2f(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int h = 0; h < 2; h++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0x0F) | ((qh[l] >> 0) & 3) << 4) - 32;
                const int q2 = ((ql[l + 32] & 0x0F) | ((qh[l] >> 2) & 3) << 4) - 32;
                const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                y[l + 0] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

/*
 * Q3_K: 16 sub-blocks of 16 weights, x = d*(scale - 32)*q with q = 2 low bits from qs and a high
 * bit from hmask, minus 4 where the high bit is clear (q in -4..3). The 6-bit scales are packed
 * in 12 bytes as ggml's dequantize_row_q3_K unpacks them: words a0, a1, a2 of the bytes give
 * scales 0-3 = a0 & 0x0f0f0f0f | (a2 & 0x03030303) << 4, 4-7 = a1 & ... | (a2 >> 2 & ...) << 4,
 * 8-11 = a0 >> 4 & ... | (a2 >> 4 & ...) << 4, 12-15 = a1 >> 4 & ... | (a2 >> 6 & ...) << 4 (byte
 * i of a word is scale i). Half h (128 weights) takes qs[32h..32h+31]; its 32-weight block j
 * (j = 0..3) the bits 2j..2j+1 of qs and bit 4h+j of hmask: elements l = 0..15 from byte l
 * (scale 8h+2j), 16..31 from byte 16+l (scale 8h+2j+1).
 */
static void dq_q3_K(const es_block_q3_K *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = h2f(x[i].d);
        uint32_t a[4];
        memcpy(a, x[i].scales, 12);
        const uint32_t m4 = 0x0f0f0f0f, m2 = 0x03030303, a2 = a[2];
        a[2] = ((a[0] >> 4) & m4) | (((a2 >> 4) & m2) << 4);
        a[3] = ((a[1] >> 4) & m4) | (((a2 >> 6) & m2) << 4);
        a[0] = (a[0] & m4) | (((a2 >> 0) & m2) << 4);
        a[1] = (a[1] & m4) | (((a2 >> 2) & m2) << 4);
        uint8_t sc[16];
        memcpy(sc, a, 16);
        const uint8_t *q = x[i].qs, *hm = x[i].hmask;
        for (int h = 0; h < 2; h++, q += 32) {
            for (int j = 0; j < 4; j++) {
                const int shift = 2 * j, bit = 1 << (4 * h + j);
                for (int half = 0; half < 2; half++) {
                    const float dl = d * (float)((int)sc[8 * h + 2 * j + half] - 32);
                    for (int l = 0; l < 16; l++) {
                        const int b = 16 * half + l;
                        *y++ = dl * (float)(((q[b] >> shift) & 3) - ((hm[b] & bit) ? 0 : 4));
                    }
                }
            }
        }
    }
}

/*
 * Q2_K: 16 sub-blocks of 16 weights, x = d*(sc & 15)*q - dmin*(sc >> 4) with q the 2-bit value
 * and sc the sub-block's byte of scales[16] (a 4-bit scale and a 4-bit min). Half h (128
 * weights) takes qs[32h..32h+31]; its 32-weight block j (j = 0..3) the bits 2j..2j+1: elements
 * l = 0..15 from byte l (scale 8h+2j), 16..31 from byte 16+l (scale 8h+2j+1). The operations
 * are ggml's dequantize_row_q2_K's: dl = d*sc, ml = dmin*m, y = dl*q - ml (not fused).
 */
static void dq_q2_K(const es_block_q2_K *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int h = 0; h < 2; h++, q += 32)
            for (int j = 0; j < 4; j++)
                for (int half = 0; half < 2; half++) {
                    const uint8_t sc = x[i].scales[8 * h + 2 * j + half];
                    const float dl = d * (float)(sc & 15), ml = dmin * (float)(sc >> 4);
                    for (int l = 0; l < 16; l++)
                        *y++ = dl * (float)((q[16 * half + l] >> (2 * j)) & 3) - ml;
                }
    }
}

/* Q8_K: float scale, x = d*q. bsums (sums of 16 q's) are only for dot products. */
/* 16 values of IQ4 nibbles: the low nibbles are values 0..15, the high ones 16..31. */
static void dq_iq4_32(const uint8_t *qs, float d, float *y)
{
    for (int j = 0; j < 16; j++) {
        y[j] = d * iq4nl_levels[qs[j] & 0x0F];
        y[j + 16] = d * iq4nl_levels[qs[j] >> 4];
    }
}

static void dq_iq4_nl(const block_iq4_nl *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK4_NL)
        dq_iq4_32(x[i].qs, h2f(x[i].d), y);
}

static void dq_iq4_xs(const block_iq4_xs *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = h2f(x[i].d);
        const uint16_t sh = x[i].scales_h;
        for (int b = 0; b < 8; b++, y += 32) {
            const int lo = (x[i].scales_l[b / 2] >> (4 * (b % 2))) & 0x0F;
            const int hi = (sh >> (2 * b)) & 3;
            dq_iq4_32(x[i].qs + 16 * b, d * (float)((lo | hi << 4) - 32), y);
        }
    }
}

/* MXFP4: ggml's dequantize_row_mxfp4, x0 * d with the int8 level converted to float. */
static void dq_mxfp4(const block_mxfp4 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK_MXFP4) {
        const float d = es_e8m0_half(x[i].e);
        for (int j = 0; j < QK_MXFP4 / 2; j++) {
            y[j] = (float)mxfp4_levels[x[i].qs[j] & 0x0F] * d;
            y[j + QK_MXFP4 / 2] = (float)mxfp4_levels[x[i].qs[j] >> 4] * d;
        }
    }
}

static void dq_q8_K(const es_block_q8_K *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += ES_QK_K)
        for (int j = 0; j < ES_QK_K; j++)
            y[j] = x[i].d * x[i].qs[j];
}

void es_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n)
{
    const es_qtype_info *q = es_qtype_info_get(type);
    ES_ASSERT(q && q->supported);
    ES_ASSERT(n >= 0 && n % q->block_elems == 0);
    const int64_t nb = n / q->block_elems;
    switch (type) {
    case ES_QTYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case ES_QTYPE_F16: {
        const es_f16 *s = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = es_f16_to_f32(s[i]);
        break;
    }
    case ES_QTYPE_BF16: {
        const es_bf16 *s = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = es_bf16_to_f32(s[i]);
        break;
    }
    case ES_QTYPE_Q4_0:
        dq_q4_0(src, dst, nb);
        break;
    case ES_QTYPE_Q4_1:
        dq_q4_1(src, dst, nb);
        break;
    case ES_QTYPE_Q5_0:
        dq_q5_0(src, dst, nb);
        break;
    case ES_QTYPE_Q5_1:
        dq_q5_1(src, dst, nb);
        break;
    case ES_QTYPE_Q8_0:
        dq_q8_0(src, dst, nb);
        break;
    case ES_QTYPE_Q4_K:
        dq_q4_K(src, dst, nb);
        break;
    case ES_QTYPE_Q5_K:
        dq_q5_K(src, dst, nb);
        break;
    case ES_QTYPE_Q6_K:
        dq_q6_K(src, dst, nb);
        break;
    case ES_QTYPE_Q3_K:
        dq_q3_K(src, dst, nb);
        break;
    case ES_QTYPE_Q2_K:
        dq_q2_K(src, dst, nb);
        break;
    case ES_QTYPE_Q8_K:
        dq_q8_K(src, dst, nb);
        break;
    case ES_QTYPE_IQ4_NL:
        dq_iq4_nl(src, dst, nb);
        break;
    case ES_QTYPE_IQ4_XS:
        dq_iq4_xs(src, dst, nb);
        break;
    case ES_QTYPE_MXFP4:
        dq_mxfp4(src, dst, nb);
        break;
    default:
        ES_ASSERT(!"supported type without a decoder");
    }
}

