/*
 * Scalar kernel table: the oracle every SIMD table is tested against, and the fallback on CPUs
 * without AVX2. Also the portable activation preparation that all tables share.
 *
 * DESIGN: one weight row at a time is decoded to its integer values (the signed value of the
 * quantized weight: q-8 for Q4_0, q for Q8_0, the unsigned 4/5-bit q for Q4_K/Q5_K, q-32 for
 * Q6_K, q-4 or q for Q3_K, sc*q for Q2_K, the level a nibble picks for IQ4_NL/IQ4_XS/MXFP4) plus
 * float scales, then multiplied with every token row.
 * The float operations per block are exactly the ones the SIMD micro-kernels do, in the same
 * order, written out with fmaf():
 *
 *   Q4_0, Q8_0   t = (float)dot * d_w;              y = fma(t, d_x, y)
 *   (also Q5_0, IQ4_NL, IQ4_XS and MXFP4, with d_w = 2^(e-128) for MXFP4)
 *   Q4_K, Q5_K   t = (float)dot * (d*sc);           y = fma(t, d_x, y);
 *                                                   y = fma(-(dmin*m), d_x*sum(q_x), y)
 *   Q6_K, Q3_K   t = (float)dot_lo * (d*sc_lo);     t = fma((float)dot_hi, d*sc_hi, t);
 *                                                   y = fma(t, d_x, y)
 *   Q2_K         t = (float)dot * d;                t = fma((float)sum_lo(q_x), -(dmin*m_lo), t);
 *                t = fma((float)sum_hi(q_x), -(dmin*m_hi), t);   y = fma(t, d_x, y)
 *   F32/F16/BF16 y = fma(w[k], x[k], y) for k = 0, 1, ...
 *
 * where dot is the exact int32 sum over the block of 32 (Q6_K: over each half of 16; Q2_K folds
 * each half's 4-bit scale into the weights, sc*q <= 45, so one sum and the super-block's d serve
 * the block, and its per-half mins take the act's sums of each half). y starts at 0, or at the
 * old Y when accumulating.
 */
#include "quant/kern.h"

#include <math.h>
#include <string.h>

/* ---- activations ---------------------------------------------------------------------------- */

/* The per-block fields every table reads besides q and d (kern.h); ds as Q8_1's
 * (es_act_q8_1_sum of amax81) where amax81 >= 0. */
static void act_q8_block_sums(const int8_t *q, float db, float amax81, int64_t b, float *ds,
                              int32_t *c, int32_t *c2, int32_t c_mult, int32_t c2_mult)
{
    int32_t s[2] = {0, 0};
    for (int i = 0; i < 32; i++)
        s[i >> 4] += q[i];
    ds[b] = amax81 >= 0 ? es_act_q8_1_sum(amax81, s[0] + s[1]) : db * (float)(s[0] + s[1]);
    c[b] = c_mult * (s[0] + s[1]);
    c2[2 * b] = c2_mult * s[0];
    c2[2 * b + 1] = c2_mult * s[1];
}

/* Quantizes one group of gb blocks of 32 (x) into q; returns the group's scale. gb = 1 is
 * llama.cpp's Q8_0 (the scale amax / 127 rounded to F16, es_act_q8_scale), gb = 8 its Q8_K (the
 * float 1 / (127 / amax)); q = x * 127 / amax rounded to nearest even (lrintf, as vcvtps2dq in
 * the SIMD versions), at most 127 in magnitude. */
static float act_q8_group(const float *x, int gb, int8_t *q, float *amax_out)
{
    float amax = 0.0f;
    for (int i = 0; i < 32 * gb; i++) amax = fmaxf(amax, fabsf(x[i]));
    *amax_out = amax;
    float id;
    const float db = es_act_group_scale(amax, gb, &id);
    for (int i = 0; i < 32 * gb; i++) {
        const long v = lrintf(x[i] * id);
        q[i] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
    }
    return db;
}

void es_act_round(uint32_t wtype, float *x, int64_t n)
{
    if (wtype == ES_QTYPE_F32) return;
    if (wtype == ES_QTYPE_F16 || wtype == ES_QTYPE_BF16) {
        for (int64_t i = 0; i < n; i++)
            if (wtype == ES_QTYPE_BF16) x[i] = es_bf16_to_f32(es_f32_to_bf16(x[i]));
            else if (fabsf(x[i]) <= 65504.0f) x[i] = es_f16_to_f32(es_f32_to_f16(x[i]));
        return;
    }
    const es_qtype_info *qi = es_qtype_info_get(wtype);
    const int gb = qi && qi->block_elems == 256 ? 8 : 1; /* Q8_K for K-quants, else Q8_0 */
    ES_ASSERT(n % (32 * gb) == 0);
    int8_t q[256];
    float amax;
    for (int64_t g0 = 0; g0 < n; g0 += 32 * gb) {
        const float db = act_q8_group(x + g0, gb, q, &amax);
        for (int i = 0; i < 32 * gb; i++) x[g0 + i] = (float)q[i] * db;
    }
}

/* Rows quantized with one scale per group of gb blocks of 32 (act_q8_group); q81: ds as Q8_1's
 * (gb 1). */
static void act_q8_groups(const float *X, int64_t ldx, int64_t n_rows, int64_t K, void *act,
                          int gb, int32_t c_mult, int32_t c2_mult, int q81)
{
    ES_ASSERT(K % (32 * gb) == 0);
    const int64_t nb = K / 32, g = 32 * gb;
    const size_t rb = es_act_q8_row_bytes(K);
    for (int64_t r = 0; r < n_rows; r++) {
        const float *x = X + r * ldx;
        uint8_t *row = (uint8_t *)act + r * rb;
        int8_t *q = (int8_t *)row;
        float *d = (float *)(row + es_act_q8_off_d(K));
        float *ds = (float *)(row + es_act_q8_off_ds(K));
        int32_t *c = (int32_t *)(row + es_act_q8_off_c(K));
        int32_t *c2 = (int32_t *)(row + es_act_q8_off_c2(K));
        for (int64_t b0 = 0; b0 < nb; b0 += gb, x += g, q += g) {
            float amax;
            const float db = act_q8_group(x, gb, q, &amax);
            for (int64_t b = b0; b < b0 + gb; b++) {
                d[b] = db;
                act_q8_block_sums(q + 32 * (b - b0), db, q81 ? amax : -1.0f, b, ds, c, c2, c_mult,
                                  c2_mult);
            }
        }
        const size_t used = (size_t)es_act_q8_off_c2(K) + (size_t)nb * 8;
        memset(row + used, 0, rb - used);
    }
}

void es_act_q8_prepare(const float *X, int64_t ldx, int64_t n_rows, int64_t K, void *act,
                       int32_t c_mult, int32_t c2_mult)
{
    act_q8_groups(X, ldx, n_rows, K, act, 1, c_mult, c2_mult, 0);
}

void es_act_q8_1_prepare(const float *X, int64_t ldx, int64_t n_rows, int64_t K, void *act,
                         int32_t c_mult, int32_t c2_mult)
{
    act_q8_groups(X, ldx, n_rows, K, act, 1, c_mult, c2_mult, 1);
}

void es_act_q8k_prepare(const float *X, int64_t ldx, int64_t n_rows, int64_t K, void *act,
                        int32_t c_mult, int32_t c2_mult)
{
    act_q8_groups(X, ldx, n_rows, K, act, 8, c_mult, c2_mult, 0);
}

void es_act_f32_prepare(const float *X, int64_t ldx, int64_t n_rows, int64_t K, void *act)
{
    const size_t rb = es_act_f32_row_bytes(K);
    for (int64_t r = 0; r < n_rows; r++) {
        uint8_t *row = (uint8_t *)act + r * rb;
        memcpy(row, X + r * ldx, (size_t)K * sizeof(float));
        memset(row + K * sizeof(float), 0, rb - (size_t)K * sizeof(float));
    }
}

/* F16 weights: llama.cpp multiplies them with activations converted to F16; rounding the floats
 * the same way gives its products. Values F16 cannot hold (|x| > 65504) stay floats. */
void es_act_f16r_prepare(const float *X, int64_t ldx, int64_t n_rows, int64_t K, void *act)
{
    es_act_f32_prepare(X, ldx, n_rows, K, act);
    const size_t rb = es_act_f32_row_bytes(K);
    for (int64_t r = 0; r < n_rows; r++) {
        float *row = (float *)((uint8_t *)act + r * rb);
        for (int64_t k = 0; k < K; k++)
            if (fabsf(row[k]) <= 65504.0f) row[k] = es_f16_to_f32(es_f32_to_f16(row[k]));
    }
}

/* BF16 weights: activations rounded to BF16, as llama.cpp converts them. */
void es_act_bf16r_prepare(const float *X, int64_t ldx, int64_t n_rows, int64_t K, void *act)
{
    es_act_f32_prepare(X, ldx, n_rows, K, act);
    const size_t rb = es_act_f32_row_bytes(K);
    for (int64_t r = 0; r < n_rows; r++) {
        float *row = (float *)((uint8_t *)act + r * rb);
        for (int64_t k = 0; k < K; k++) row[k] = es_bf16_to_f32(es_f32_to_bf16(row[k]));
    }
}

static void act_prepare_q(const float *X, int64_t ldx, int64_t n, int64_t K, void *act)
{
    /* The scalar kernel computes dot products (and Q2_K's half sums) directly and ignores c/c2; the values match the
     * AVX-512 encoding so the buffers are comparable byte for byte in tests. */
    es_act_q8_prepare(X, ldx, n, K, act, -128, -128);
}
static void act_prepare_k(const float *X, int64_t ldx, int64_t n, int64_t K, void *act)
{
    es_act_q8k_prepare(X, ldx, n, K, act, -128, -128);
}
/* Q4_1 / Q5_1 weights: llama.cpp's Q8_1. */
static void act_prepare_q1(const float *X, int64_t ldx, int64_t n, int64_t K, void *act)
{
    es_act_q8_1_prepare(X, ldx, n, K, act, -128, -128);
}

/* ---- weight row decoding ---------------------------------------------------------------- */

/* Scratch layout: int8 q[K], then float s[2*nb] (scales), float m[nb] (negated mins), then one
 * GGUF row of a tiled matrix (at most 34 bytes per block: Q8_0). */
static size_t scratch_q(int64_t K)
{
    return (size_t)K + (size_t)(K / 32) * (12 + 34) + 64;
}
static size_t scratch_f(int64_t K)
{
    return (size_t)K * sizeof(float) + 64;
}

static void decode_q4_0(const es_block_q4_0 *x, int64_t nb, int8_t *q, float *s)
{
    for (int64_t b = 0; b < nb; b++, q += 32) {
        s[b] = es_f16_to_f32(x[b].d);
        for (int j = 0; j < 16; j++) {
            q[j] = (int8_t)((x[b].qs[j] & 15) - 8);
            q[j + 16] = (int8_t)((x[b].qs[j] >> 4) - 8);
        }
    }
}

/* Q5_0 (d, qh[4], qs[16]; value q - 16) and Q4_1 / Q5_1 (d, m, [qh[4],] qs[16]; value d*q + m:
 * q unsigned, m[b] = +m). The fifth bit of element e is bit e of qh. */
static void decode_q5_0(const uint8_t *w, int64_t nb, int8_t *q, float *s)
{
    for (int64_t b = 0; b < nb; b++, w += 22, q += 32) {
        es_f16 d;
        uint32_t qh;
        memcpy(&d, w, 2);
        memcpy(&qh, w + 2, 4);
        s[b] = es_f16_to_f32(d);
        for (int j = 0; j < 16; j++) {
            q[j] = (int8_t)(((w[6 + j] & 15) | ((qh >> j) & 1) << 4) - 16);
            q[j + 16] = (int8_t)(((w[6 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16);
        }
    }
}
static void decode_q41_q51(const uint8_t *w, int64_t nb, int five, int8_t *q, float *s, float *m)
{
    const size_t bb = five ? 24 : 20;
    for (int64_t b = 0; b < nb; b++, w += bb, q += 32) {
        es_f16 d, mn;
        uint32_t qh = 0;
        memcpy(&d, w, 2);
        memcpy(&mn, w + 2, 2);
        if (five) memcpy(&qh, w + 4, 4);
        const uint8_t *qs = w + (five ? 8 : 4);
        s[b] = es_f16_to_f32(d);
        m[b] = es_f16_to_f32(mn);
        for (int j = 0; j < 16; j++) {
            q[j] = (int8_t)((qs[j] & 15) | ((qh >> j) & 1) << 4);
            q[j + 16] = (int8_t)((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
        }
    }
}

static void decode_q8_0(const es_block_q8_0 *x, int64_t nb, int8_t *q, float *s)
{
    for (int64_t b = 0; b < nb; b++, q += 32) {
        s[b] = es_f16_to_f32(x[b].d);
        memcpy(q, x[b].qs, 32);
    }
}

/* Q4_K/Q5_K: s[sub-block] = d*sc, m[sub-block] = -(dmin*m). q5 == NULL for Q4_K. */
static void decode_k45(const uint8_t *sc12, float d, float dmin, const uint8_t *qs,
                       const uint8_t *qh, int8_t *q, float *s, float *m)
{
    for (int c = 0; c < 4; c++, qs += 32) {
        for (int h = 0; h < 2; h++) {
            const int j = 2 * c + h;
            int sc, mn;
            es_k4_scale_min(j, sc12, &sc, &mn);
            s[j] = d * (float)sc;
            m[j] = -(dmin * (float)mn);
            for (int l = 0; l < 32; l++) {
                int v = h ? qs[l] >> 4 : qs[l] & 15;
                if (qh && (qh[l] >> j & 1)) v += 16;
                q[32 * j + l] = (int8_t)v;
            }
        }
    }
}

static void decode_q6_K(const es_block_q6_K *x, int8_t *q, float *s)
{
    const float d = es_f16_to_f32(x->d);
    for (int i = 0; i < 16; i++)
        s[i] = d * (float)x->scales[i];
    const uint8_t *ql = x->ql, *qh = x->qh;
    for (int h = 0; h < 2; h++, ql += 64, qh += 32, q += 128) {
        for (int l = 0; l < 32; l++) {
            q[l] = (int8_t)(((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4) - 32);
            q[l + 32] = (int8_t)(((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4) - 32);
            q[l + 64] = (int8_t)(((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32);
            q[l + 96] = (int8_t)(((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32);
        }
    }
}

/* Q3_K: value ((qs >> 2j) & 3) - (hmask bit ? 0 : 4), s[sub-block of 16] = d * scale (layout
 * in qtypes.c's dq_q3_K). */
static void decode_q3_K(const es_block_q3_K *x, int8_t *q, float *s)
{
    const float d = es_f16_to_f32(x->d);
    for (int i = 0; i < 16; i++)
        s[i] = d * (float)es_q3k_scale(i, x->scales);
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int b = 0; b < 32; b++)
                *q++ = (int8_t)(((x->qs[32 * h + b] >> (2 * j)) & 3) -
                                ((x->hmask[b] >> (4 * h + j)) & 1 ? 0 : 4));
}

/* IQ4_NL / IQ4_XS / MXFP4: each nibble indexes one of 16 levels, llama.cpp's non-linear ones
 * (IQ4) or MXFP4's E2M1 values doubled, 0 1 2 3 4 6 8 12 and their negatives (es_dequantize_row
 * decodes the same); s[block of 32] = d (IQ4_NL), d * (6-bit scale - 32) (IQ4_XS) or 2^(e-128)
 * from the E8M0 byte (MXFP4, es_e8m0_half). */
static const int8_t iq4_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                      1,    13,   25,  38,  53,  69,  89,  113};
static const int8_t mxfp4_levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
static void decode_nib_32(const int8_t *levels, const uint8_t *qs, int8_t *q)
{
    for (int j = 0; j < 16; j++) {
        q[j] = levels[qs[j] & 15];
        q[j + 16] = levels[qs[j] >> 4];
    }
}
static void decode_iq4_nl(const uint8_t *w, int64_t nb, int8_t *q, float *s)
{
    for (int64_t b = 0; b < nb; b++, w += 18, q += 32) {
        es_f16 d;
        memcpy(&d, w, 2);
        s[b] = es_f16_to_f32(d);
        decode_nib_32(iq4_levels, w + 2, q);
    }
}
static void decode_iq4_xs(const uint8_t *w, int64_t nsb, int8_t *q, float *s)
{
    for (int64_t i = 0; i < nsb; i++, w += 136) {
        for (int b = 0; b < 8; b++, q += 32) {
            s[8 * i + b] = es_iq4xs_scale(w, b);
            decode_nib_32(iq4_levels, w + 8 + 16 * b, q);
        }
    }
}
static void decode_mxfp4(const uint8_t *w, int64_t nb, int8_t *q, float *s)
{
    for (int64_t b = 0; b < nb; b++, w += 17, q += 32) {
        s[b] = es_e8m0_half(w[0]);
        decode_nib_32(mxfp4_levels, w + 1, q);
    }
}

/* Q2_K: value sc*q (scale nibble times the 2-bit value, layout in qtypes.c's dq_q2_K); per block
 * of 32, d in m[block] and the halves' -(dmin*min) in s[2*block], s[2*block + 1]. */
static void decode_q2_K(const es_block_q2_K *x, int8_t *q, float *s, float *m)
{
    const float d = es_f16_to_f32(x->d), dmin = es_f16_to_f32(x->dmin);
    for (int b = 0; b < 8; b++) {
        const int h = b / 4, j = b % 4;
        m[b] = d;
        for (int half = 0; half < 2; half++) {
            const uint8_t sc = x->scales[2 * b + half];
            s[2 * b + half] = -(dmin * (float)(sc >> 4));
            for (int l = 0; l < 16; l++)
                q[32 * b + 16 * half + l] =
                    (int8_t)((sc & 15) * ((x->qs[32 * h + 16 * half + l] >> (2 * j)) & 3));
        }
    }
}

static void decode_row_q(uint32_t type, const void *w, int64_t K, int8_t *q, float *s, float *m)
{
    const int64_t nb = K / 32, nsb = K / 256;
    switch (type) {
    case ES_QTYPE_Q4_0:
        decode_q4_0(w, nb, q, s);
        break;
    case ES_QTYPE_Q8_0:
        decode_q8_0(w, nb, q, s);
        break;
    case ES_QTYPE_Q4_K:
        for (int64_t i = 0; i < nsb; i++) {
            const es_block_q4_K *x = (const es_block_q4_K *)w + i;
            decode_k45(x->scales, es_f16_to_f32(x->d), es_f16_to_f32(x->dmin), x->qs, NULL,
                       q + 256 * i, s + 8 * i, m + 8 * i);
        }
        break;
    case ES_QTYPE_Q5_K:
        for (int64_t i = 0; i < nsb; i++) {
            const es_block_q5_K *x = (const es_block_q5_K *)w + i;
            decode_k45(x->scales, es_f16_to_f32(x->d), es_f16_to_f32(x->dmin), x->qs, x->qh,
                       q + 256 * i, s + 8 * i, m + 8 * i);
        }
        break;
    case ES_QTYPE_Q6_K:
        for (int64_t i = 0; i < nsb; i++)
            decode_q6_K((const es_block_q6_K *)w + i, q + 256 * i, s + 16 * i);
        break;
    case ES_QTYPE_Q3_K:
        for (int64_t i = 0; i < nsb; i++)
            decode_q3_K((const es_block_q3_K *)w + i, q + 256 * i, s + 16 * i);
        break;
    case ES_QTYPE_Q2_K:
        for (int64_t i = 0; i < nsb; i++)
            decode_q2_K((const es_block_q2_K *)w + i, q + 256 * i, s + 16 * i, m + 8 * i);
        break;
    case ES_QTYPE_IQ4_NL:
        decode_iq4_nl(w, nb, q, s);
        break;
    case ES_QTYPE_Q5_0:
        decode_q5_0(w, nb, q, s);
        break;
    case ES_QTYPE_Q4_1:
    case ES_QTYPE_Q5_1:
        decode_q41_q51(w, nb, type == ES_QTYPE_Q5_1, q, s, m);
        break;
    case ES_QTYPE_IQ4_XS:
        decode_iq4_xs(w, nsb, q, s);
        break;
    case ES_QTYPE_MXFP4:
        decode_mxfp4(w, nb, q, s);
        break;
    default:
        ES_ASSERT(0);
    }
}

/* ---- GEMM ------------------------------------------------------------------------------------ */

/* N < 0: W is in GGUF rows; N >= 0: W is a tiled matrix of N rows (quant/tiles.h), whose row n
 * is first rebuilt in the row layout, so both layouts run the same arithmetic. */
static void gemm_q(uint32_t type, const void *W, int64_t K, int64_t N, int64_t n0, int64_t n1,
                   const void *act, const int32_t *rows, int64_t n_rows, float *Y, int64_t ldy,
                   int accumulate, void *scratch)
{
    ES_ASSERT(K % 32 == 0);
    const int64_t nb = K / 32;
    const size_t wrb = es_qtype_row_bytes(type, K), arb = es_act_q8_row_bytes(K);
    int8_t *wq = scratch;
    float *ws = (float *)((uint8_t *)scratch + K);
    float *wm = ws + 2 * nb;
    uint8_t *wrow = (uint8_t *)(wm + nb);
    for (int64_t n = n0; n < n1; n++) {
        const uint8_t *w = (const uint8_t *)W + n * wrb;
        if (N >= 0) {
            es_tiles_get_row(type, W, K, N, n, wrow);
            w = wrow;
        }
        decode_row_q(type, w, K, wq, ws, wm);
        for (int64_t r = 0; r < n_rows; r++) {
            const uint8_t *row = (const uint8_t *)act + (rows ? rows[r] : r) * arb;
            const int8_t *xq = (const int8_t *)row;
            const float *xd = (const float *)(row + es_act_q8_off_d(K));
            const float *xds = (const float *)(row + es_act_q8_off_ds(K));
            float y = accumulate ? Y[r * ldy + n] : 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const int8_t *a = wq + 32 * b, *x = xq + 32 * b;
                int32_t lo = 0, hi = 0;
                for (int i = 0; i < 16; i++)
                    lo += a[i] * x[i];
                for (int i = 16; i < 32; i++)
                    hi += a[i] * x[i];
                if (type == ES_QTYPE_Q2_K) {
                    int32_t slo = 0, shi = 0;
                    for (int i = 0; i < 16; i++)
                        slo += x[i], shi += x[16 + i];
                    float t = (float)(lo + hi) * wm[b];
                    t = fmaf((float)slo, ws[2 * b], t);
                    t = fmaf((float)shi, ws[2 * b + 1], t);
                    y = fmaf(t, xd[b], y);
                } else if (type == ES_QTYPE_Q6_K || type == ES_QTYPE_Q3_K) {
                    float t = (float)lo * ws[2 * b];
                    t = fmaf((float)hi, ws[2 * b + 1], t);
                    y = fmaf(t, xd[b], y);
                } else {
                    const float t = (float)(lo + hi) * ws[b];
                    y = fmaf(t, xd[b], y);
                    if (type == ES_QTYPE_Q4_K || type == ES_QTYPE_Q5_K || type == ES_QTYPE_Q4_1 ||
                        type == ES_QTYPE_Q5_1)
                        y = fmaf(wm[b], xds[b], y);
                }
            }
            Y[r * ldy + n] = y;
        }
    }
}

/* N < 0: W is in rows; N >= 0: an F32 matrix of N rows in the tile layout, row n rebuilt first. */
static void gemm_f(uint32_t type, const void *W, int64_t K, int64_t N, int64_t n0, int64_t n1,
                   const void *act, const int32_t *rows, int64_t n_rows, float *Y, int64_t ldy,
                   int accumulate, void *scratch)
{
    const size_t wrb = es_qtype_row_bytes(type, K), arb = es_act_f32_row_bytes(K);
    float *w = scratch;
    for (int64_t n = n0; n < n1; n++) {
        if (N >= 0)
            es_tiles_get_row(type, W, K, N, n, w);
        else /* exact for float types */
            es_dequantize_row(type, (const uint8_t *)W + n * wrb, w, K);
        for (int64_t r = 0; r < n_rows; r++) {
            const float *x = (const float *)((const uint8_t *)act + (rows ? rows[r] : r) * arb);
            float y = accumulate ? Y[r * ldy + n] : 0.0f;
            for (int64_t k = 0; k < K; k++)
                y = fmaf(w[k], x[k], y);
            Y[r * ldy + n] = y;
        }
    }
}

#define GEMM_Q(name, type)                                                                         \
    static void name(const void *W, int64_t K, int64_t n0, int64_t n1, const void *act,            \
                     const int32_t *rows, int64_t n_rows, float *Y, int64_t ldy, int accumulate,   \
                     void *scratch)                                                                \
    {                                                                                              \
        gemm_q(type, W, K, -1, n0, n1, act, rows, n_rows, Y, ldy, accumulate, scratch);            \
    }
GEMM_Q(gemm_q4_0, ES_QTYPE_Q4_0)
GEMM_Q(gemm_q8_0, ES_QTYPE_Q8_0)
GEMM_Q(gemm_q4_K, ES_QTYPE_Q4_K)
GEMM_Q(gemm_q5_K, ES_QTYPE_Q5_K)
GEMM_Q(gemm_q6_K, ES_QTYPE_Q6_K)
GEMM_Q(gemm_q3_K, ES_QTYPE_Q3_K)
GEMM_Q(gemm_q2_K, ES_QTYPE_Q2_K)
GEMM_Q(gemm_iq4_nl, ES_QTYPE_IQ4_NL)
GEMM_Q(gemm_q5_0, ES_QTYPE_Q5_0)
GEMM_Q(gemm_q4_1, ES_QTYPE_Q4_1)
GEMM_Q(gemm_q5_1, ES_QTYPE_Q5_1)
GEMM_Q(gemm_iq4_xs, ES_QTYPE_IQ4_XS)
GEMM_Q(gemm_mxfp4, ES_QTYPE_MXFP4)

#define GEMM_T(name, type)                                                                         \
    static void name(const void *W, int64_t K, int64_t N, int64_t n0, int64_t n1,                 \
                     const void *act, const int32_t *rows, int64_t n_rows, float *Y, int64_t ldy,  \
                     int accumulate, void *scratch)                                                \
    {                                                                                              \
        gemm_q(type, W, K, N, n0, n1, act, rows, n_rows, Y, ldy, accumulate, scratch);             \
    }
GEMM_T(gemm_tiled_q4_0, ES_QTYPE_Q4_0)
GEMM_T(gemm_tiled_q8_0, ES_QTYPE_Q8_0)

#define GEMM_F(name, type)                                                                         \
    static void name(const void *W, int64_t K, int64_t n0, int64_t n1, const void *act,            \
                     const int32_t *rows, int64_t n_rows, float *Y, int64_t ldy, int accumulate,   \
                     void *scratch)                                                                \
    {                                                                                              \
        gemm_f(type, W, K, -1, n0, n1, act, rows, n_rows, Y, ldy, accumulate, scratch);            \
    }
GEMM_F(gemm_f32, ES_QTYPE_F32)
GEMM_F(gemm_f16, ES_QTYPE_F16)
GEMM_F(gemm_bf16, ES_QTYPE_BF16)

static void gemm_tiled_f32(const void *W, int64_t K, int64_t N, int64_t n0, int64_t n1,
                           const void *act, const int32_t *rows, int64_t n_rows, float *Y,
                           int64_t ldy, int accumulate, void *scratch)
{
    gemm_f(ES_QTYPE_F32, W, K, N, n0, n1, act, rows, n_rows, Y, ldy, accumulate, scratch);
}

void es_kern_fill_scalar(es_kern *k)
{
    memset(k, 0, sizeof(*k));
    k->isa = "scalar";
    static const struct {
        uint32_t type;
        void (*gemm)(const void *, int64_t, int64_t, int64_t, const void *, const int32_t *,
                     int64_t, float *, int64_t, int, void *);
    } q[] =
        {
            {ES_QTYPE_Q4_0, gemm_q4_0}, {ES_QTYPE_Q8_0, gemm_q8_0}, {ES_QTYPE_Q4_K, gemm_q4_K},
            {ES_QTYPE_Q5_K, gemm_q5_K}, {ES_QTYPE_Q6_K, gemm_q6_K},
            /* the fallbacks of llama-quantize's mixes (Q5_0, Q5_1, IQ4_NL where rows do not fit
             * 256) and IQ4: tables without a SIMD kernel for them run these */
            {ES_QTYPE_IQ4_NL, gemm_iq4_nl}, {ES_QTYPE_IQ4_XS, gemm_iq4_xs},
            {ES_QTYPE_Q5_0, gemm_q5_0}, {ES_QTYPE_Q4_1, gemm_q4_1}, {ES_QTYPE_Q5_1, gemm_q5_1},
            {ES_QTYPE_Q3_K, gemm_q3_K}, {ES_QTYPE_Q2_K, gemm_q2_K},
            {ES_QTYPE_MXFP4, gemm_mxfp4}, /* gpt-oss's experts; llama.cpp's Q8_0 act, as IQ4_NL */
        },
      f[] = {
          {ES_QTYPE_F32, gemm_f32},
          {ES_QTYPE_F16, gemm_f16},
          {ES_QTYPE_BF16, gemm_bf16},
      };
    for (size_t i = 0; i < ES_LEN(q); i++)
        k->op[q[i].type] = (es_kern_ops){es_act_q8_row_bytes, act_prepare_q, q[i].gemm, scratch_q, NULL};
    for (size_t i = 0; i < ES_LEN(f); i++)
        k->op[f[i].type] =
            (es_kern_ops){es_act_f32_row_bytes, es_act_f32_prepare, f[i].gemm, scratch_f, NULL};
    k->op[ES_QTYPE_F16].act_prepare = es_act_f16r_prepare;
    k->op[ES_QTYPE_BF16].act_prepare = es_act_bf16r_prepare;
    k->op[ES_QTYPE_Q4_K].act_prepare = act_prepare_k;
    k->op[ES_QTYPE_Q5_K].act_prepare = act_prepare_k;
    k->op[ES_QTYPE_Q6_K].act_prepare = act_prepare_k;
    k->op[ES_QTYPE_Q3_K].act_prepare = act_prepare_k;   /* Q8_K, as llama.cpp's vec_dot */
    k->op[ES_QTYPE_Q2_K].act_prepare = act_prepare_k;
    k->op[ES_QTYPE_IQ4_XS].act_prepare = act_prepare_k; /* Q8_K, as llama.cpp's vec_dot */
    k->op[ES_QTYPE_Q4_1].act_prepare = act_prepare_q1;  /* Q8_1 */
    k->op[ES_QTYPE_Q5_1].act_prepare = act_prepare_q1;
    k->op[ES_QTYPE_Q4_0].gemm_tiled = gemm_tiled_q4_0;
    k->op[ES_QTYPE_Q8_0].gemm_tiled = gemm_tiled_q8_0;
    k->op[ES_QTYPE_F32].gemm_tiled = gemm_tiled_f32;
}
