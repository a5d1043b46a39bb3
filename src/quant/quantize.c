/*
 * The scalar reference quantizers (es_quantize_row): floats to the weight formats estream
 * computes with, for synthetic models (model/synth.c) and the tests; the runtime never calls
 * them (activations are prepared by the kernel tables, kern.h).
 *
 * DESIGN
 * - es_quantize_row() follows ggml's quantize_row_*_ref algorithms (rewritten here), down to the
 *   order of float operations, so its bytes match ggml's (tests/test_quant.c holds hashes of
 *   ggml's output). It exists to build test weights and activations, not for speed.
 * - All functions are pure and thread-safe.
 */
#include "quant/qtypes_int.h"

#include <math.h>
#include <string.h>

/* Bit-exactness needs a*b + c rounded twice, never fused (gcc's -std=c11 already implies
 * -ffp-contract=off; clang needs this when FMA is enabled). */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* ---------------------------------------------------------------------------------------------
 * Quantization (ggml's quantize_row_*_ref algorithms, rewritten)
 * ------------------------------------------------------------------------------------------- */

#define GROUP_MAX_EPS 1e-15f /* |x| below this in a whole group counts as an all-zero group */

/* Round to nearest, ties to even (the default FP rounding mode), as ggml's nearest_int(). */
static inline int nearest_int(float v)
{
    return (int)lrintf(v);
}
static inline int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}
static inline es_f16 f2h(float f)
{
    return es_f32_to_f16(f);
}

/* Q8_0: d = amax/127, q = round(x/d) (half away from zero, like roundf). */
static void q_q8_0(const float *x, es_block_q8_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += ES_QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < ES_QK8_0; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        for (int j = 0; j < ES_QK8_0; j++)
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

/* Signed value of largest magnitude in x[0..n) (the first one on ties). */
static float signed_absmax(const float *x, int n)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

/* Q4_0: d = max/-8 where max is the signed extreme, so the extreme maps exactly to q = 0 (-8*d)
 * and the other side gets the 7 positive steps. q = min(15, trunc(x/d + 8.5)). */
static void q_q4_0(const float *x, es_block_q4_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += ES_QK4_0) {
        const float d = signed_absmax(x, ES_QK4_0) / -8.0f;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        for (int j = 0; j < ES_QK4_0 / 2; j++) {
            const int q0 = es_min_int(15, (int8_t)(x[j] * id + 8.5f));
            const int q1 = es_min_int(15, (int8_t)(x[j + ES_QK4_0 / 2] * id + 8.5f));
            y[i].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

static void minmax(const float *x, int n, float *mn, float *mx)
{
    float lo = INFINITY, hi = -INFINITY;
    for (int j = 0; j < n; j++) {
        lo = fminf(lo, x[j]);
        hi = fmaxf(hi, x[j]);
    }
    *mn = lo;
    *mx = hi;
}

/* Q4_1: m = min, d = (max-min)/15, q = min(15, trunc((x-m)/d + 0.5)). */
static void q_q4_1(const float *x, block_q4_1 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK4_1) {
        float mn, mx;
        minmax(x, QK4_1, &mn, &mx);
        const float d = (mx - mn) / 15.0f;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        y[i].m = f2h(mn);
        for (int j = 0; j < QK4_1 / 2; j++) {
            const int q0 = es_min_int(15, (int8_t)((x[j] - mn) * id + 0.5f));
            const int q1 = es_min_int(15, (int8_t)((x[j + QK4_1 / 2] - mn) * id + 0.5f));
            y[i].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

/* Packs 32 5-bit values: low nibbles as Q4_0, bit 4 of element e into bit e of qh. */
static void pack5(const int *q, uint8_t qs[16], uint8_t qh_bytes[4])
{
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0F) | (q[j + 16] & 0x0F) << 4);
        qh |= (uint32_t)((q[j] >> 4) & 1) << j;
        qh |= (uint32_t)((q[j + 16] >> 4) & 1) << (j + 16);
    }
    for (int b = 0; b < 4; b++)
        qh_bytes[b] = (uint8_t)(qh >> (8 * b));
}

/* Q5_0: as Q4_0 with 5 bits: d = max/-16, q = min(31, trunc(x/d + 16.5)). */
static void q_q5_0(const float *x, block_q5_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK5_0) {
        const float d = signed_absmax(x, QK5_0) / -16.0f;
        const float id = d ? 1.0f / d : 0.0f;
        int q[QK5_0];
        y[i].d = f2h(d);
        for (int j = 0; j < QK5_0; j++)
            q[j] = es_min_int(31, (int8_t)(x[j] * id + 16.5f));
        pack5(q, y[i].qs, y[i].qh);
    }
}

/* Q5_1: as Q4_1 with 5 bits: d = (max-min)/31, q = trunc((x-m)/d + 0.5) (clamped to 31). */
static void q_q5_1(const float *x, block_q5_1 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK5_1) {
        float mn, mx;
        minmax(x, QK5_1, &mn, &mx);
        const float d = (mx - mn) / 31.0f;
        const float id = d ? 1.0f / d : 0.0f;
        int q[QK5_1];
        y[i].d = f2h(d);
        y[i].m = f2h(mn);
        for (int j = 0; j < QK5_1; j++)
            q[j] = es_min_int(31, (uint8_t)((x[j] - mn) * id + 0.5f));
        pack5(q, y[i].qs, y[i].qh);
    }
}

/*
 * Fits x ~ scale*L - min_out over n values with L in 0..nmax and min_out >= 0 (ggml's
 * make_qkx2_quants): start from the plain min/max grid, then try nstep+1 slightly different
 * grids (iscale = (nmax + rmin + rdelta*k)/(max-min)); for each, solve the weighted least-squares
 * problem for (scale, min) given its L, and keep the one with the lowest weighted squared error.
 * Writes L; returns scale and stores -min (the positive offset) in *min_out.
 */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L,
                           float *min_out, uint8_t *Laux, float rmin, float rdelta, int nstep)
{
    float mn = x[0], mx = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < mn) mn = x[i];
        if (x[i] > mx) mx = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (mn > 0) mn = 0; /* the offset only ever moves values down */
    if (mx == mn) {
        memset(L, 0, (size_t)n);
        *min_out = -mn;
        return 0.0f;
    }
    float iscale = nmax / (mx - mn), scale = 1.0f / iscale, best_err = 0.0f;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(nearest_int(iscale * (x[i] - mn)), 0, nmax);
        const float diff = scale * L[i] + mn - x[i];
        best_err += w[i] * (diff * diff);
    }
    for (int k = 0; k <= nstep; k++) {
        iscale = (rmin + rdelta * k + nmax) / (mx - mn);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(nearest_int(iscale * (x[i] - mn)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        const float det = sum_w * sum_l2 - sum_l * sum_l;
        if (det <= 0) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if (this_min > 0) { /* positive offsets are not representable: refit scale alone */
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float err = 0;
        for (int i = 0; i < n; i++) {
            const float diff = this_scale * Laux[i] + this_min - x[i];
            err += w[i] * (diff * diff);
        }
        if (err < best_err) {
            memcpy(L, Laux, (size_t)n);
            best_err = err;
            scale = this_scale;
            mn = this_min;
        }
    }
    *min_out = -mn;
    return scale;
}

/*
 * Fits x ~ scale*(L - nmax) with L in 0..2*nmax-1 (ggml's make_qx_quants, rmse_type 1: weights
 * x^2, no importance matrix): the signed extreme maps to -nmax, then 18 nearby grids are tried
 * and the one maximising (sum w*x*l)^2 / sum w*l^2 (the least-squares fit quality) is kept.
 */
static float fit_scale_sym(int n, int nmax, const float *x, uint8_t *L)
{
    const float max = signed_absmax(x, n);
    if (fabsf(max) < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = -nmax / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (uint8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int k = -9; k <= 9; k++) {
        if (k == 0) continue;
        iscale = -(nmax + 0.1f * k) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (uint8_t)(nmax + clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Inverse of k4_scale_min(): stores 6-bit scale ls and min lm of sub-block j into s[12]
 * (s must start zeroed). */
static void k4_put_scale_min(int j, uint8_t *s, int ls, int lm)
{
    if (j < 4) {
        s[j] = (uint8_t)(s[j] | ls);
        s[j + 4] = (uint8_t)(s[j + 4] | lm);
    } else {
        s[j + 4] = (uint8_t)((ls & 0x0F) | (lm & 0x0F) << 4);
        s[j - 4] = (uint8_t)(s[j - 4] | (ls >> 4) << 6);
        s[j] = (uint8_t)(s[j] | (lm >> 4) << 6);
    }
}

/*
 * Shared part of Q4_K / Q5_K: fits each 32-weight sub-block (weights rms(sub-block) + |x_i|),
 * quantizes the 8 scales and 8 mins to 6 bits against d = max_scale/63 and dmin = max_min/63, then
 * requantizes every weight against its decoded (scale, min) so L matches what the decoder sees.
 * Fills d, dmin, scales[12] and L[256] (values 0..nmax).
 */
static void q_k_scales(const float *x, int nmax, float rmin, int nstep, es_f16 *d_out,
                       es_f16 *dmin_out, uint8_t scales[12], uint8_t L[ES_QK_K])
{
    float sc[8], mn[8], w[32], max_sc = 0, max_mn = 0;
    uint8_t Laux[32];
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++)
            sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++)
            w[l] = av_x + fabsf(x[32 * j + l]);
        sc[j] = fit_scale_min(32, nmax, x + 32 * j, w, L + 32 * j, &mn[j], Laux, rmin, 0.1f, nstep);
        if (sc[j] > max_sc) max_sc = sc[j];
        if (mn[j] > max_mn) max_mn = mn[j];
    }
    const float inv_sc = max_sc > 0 ? 63.0f / max_sc : 0.0f;
    const float inv_mn = max_mn > 0 ? 63.0f / max_mn : 0.0f;
    memset(scales, 0, 12);
    for (int j = 0; j < 8; j++) {
        const int ls = es_min_int(63, nearest_int(inv_sc * sc[j]));
        const int lm = es_min_int(63, nearest_int(inv_mn * mn[j]));
        k4_put_scale_min(j, scales, ls, lm);
    }
    *d_out = f2h(max_sc / 63.0f);
    *dmin_out = f2h(max_mn / 63.0f);
    const float d = h2f(*d_out), dmin = h2f(*dmin_out);
    for (int j = 0; j < 8; j++) {
        uint8_t s, m;
        k4_scale_min(j, scales, &s, &m);
        const float ds = d * s;
        if (!ds) continue; /* L keeps the fit's values; they decode to -dmin*m either way */
        const float dm = dmin * m;
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)clampi(nearest_int((x[32 * j + l] + dm) / ds), 0, nmax);
    }
}

static void q_q4_K(const float *x, es_block_q4_K *y, int64_t nb)
{
    uint8_t L[ES_QK_K];
    for (int64_t i = 0; i < nb; i++, x += ES_QK_K) {
        q_k_scales(x, 15, -1.0f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
        /* chunk c of 32 bytes: sub-block 2c in the low nibbles, 2c+1 in the high ones */
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | L[64 * c + 32 + l] << 4);
    }
}

static void q_q5_K(const float *x, es_block_q5_K *y, int64_t nb)
{
    uint8_t L[ES_QK_K];
    for (int64_t i = 0; i < nb; i++, x += ES_QK_K) {
        q_k_scales(x, 31, -0.5f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        /* low nibbles as Q4_K; bit 4 of sub-block s's element l goes to bit s of qh[l] */
        memset(y[i].qh, 0, sizeof(y[i].qh));
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                const int a = L[64 * c + l], b = L[64 * c + 32 + l];
                y[i].qs[32 * c + l] = (uint8_t)((a & 0x0F) | (b & 0x0F) << 4);
                y[i].qh[l] = (uint8_t)(y[i].qh[l] | (a >> 4) << (2 * c) | (b >> 4) << (2 * c + 1));
            }
        }
    }
}

/* fit_scale_sym over the 16 sub-blocks of 16 of a 256 block (values -nmax..nmax-1 into L,
 * scales into sc); returns the scale of largest magnitude, with its sign. */
static float fit_subblocks16(const float *x, int nmax, uint8_t *L, float sc[16])
{
    float max_sc = 0;
    for (int j = 0; j < 16; j++) {
        sc[j] = fit_scale_sym(16, nmax, x + 16 * j, L + 16 * j);
        if (fabsf(sc[j]) > fabsf(max_sc)) max_sc = sc[j];
    }
    return max_sc;
}

static void q_q6_K(const float *x, es_block_q6_K *y, int64_t nb)
{
    uint8_t L[ES_QK_K];
    float sc[16];
    for (int64_t i = 0; i < nb; i++, x += ES_QK_K) {
        const float max_sc = fit_subblocks16(x, 32, L, sc);
        if (fabsf(max_sc) < GROUP_MAX_EPS) { /* all-zero block */
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        /* The signed extreme scale maps to -128; the others round into -128..127. */
        const float iscale = -128.0f / max_sc;
        y[i].d = f2h(1.0f / iscale);
        for (int j = 0; j < 16; j++)
            y[i].scales[j] = (int8_t)es_min_int(127, nearest_int(iscale * sc[j]));
        const float d = h2f(y[i].d);
        for (int j = 0; j < 16; j++) {
            const float ds = d * y[i].scales[j];
            if (!ds) continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (uint8_t)(32 + clampi(nearest_int(x[16 * j + l] / ds), -32, 31));
        }
        /* Layout in dq_q6_K's comment: per half h, element e = 32*k + l (k = 0..3). */
        for (int h = 0; h < 2; h++) {
            const uint8_t *Lh = L + 128 * h;
            uint8_t *ql = y[i].ql + 64 * h, *qh = y[i].qh + 32 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((Lh[l] & 0x0F) | (Lh[l + 64] & 0x0F) << 4);
                ql[l + 32] = (uint8_t)((Lh[l + 32] & 0x0F) | (Lh[l + 96] & 0x0F) << 4);
                qh[l] = (uint8_t)(Lh[l] >> 4 | (Lh[l + 32] >> 4) << 2 | (Lh[l + 64] >> 4) << 4 |
                                  (Lh[l + 96] >> 4) << 6);
            }
        }
    }
}

/* Q3_K: the fit of Q6_K with 3-bit values (-4..3) and 6-bit signed scales (-32..31), packed as
 * qtypes.c's dq_q3_K unpacks them. (ggml's quantizer searches the scales more; this one is for
 * synthetic models and tests, and any valid encoding decodes the same everywhere.) */
static void q_q3_K(const float *x, es_block_q3_K *y, int64_t nb)
{
    uint8_t L[ES_QK_K];
    float sc[16];
    for (int64_t i = 0; i < nb; i++, x += ES_QK_K) {
        const float max_sc = fit_subblocks16(x, 4, L, sc);
        memset(&y[i], 0, sizeof(y[i]));
        if (fabsf(max_sc) < GROUP_MAX_EPS) continue; /* all-zero block: d = 0 */
        const float iscale = -32.0f / max_sc;
        y[i].d = f2h(1.0f / iscale);
        const float d = h2f(y[i].d);
        int ls[16];
        for (int j = 0; j < 16; j++) {
            ls[j] = clampi(nearest_int(iscale * sc[j]), -32, 31);
            const float ds = d * (float)ls[j];
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (uint8_t)(4 + (ds ? clampi(nearest_int(x[16 * j + l] / ds), -4, 3)
                                                  : 0));
            const int u = ls[j] + 32; /* 0..63 */
            y[i].scales[j % 8] |= (uint8_t)((u & 15) << (j < 8 ? 0 : 4));
            y[i].scales[8 + j % 4] |= (uint8_t)((u >> 4) << (2 * (j / 4)));
        }
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 4; j++)
                for (int b = 0; b < 32; b++) {
                    const int v = L[128 * h + 32 * j + b];
                    y[i].qs[32 * h + b] |= (uint8_t)((v & 3) << (2 * j));
                    y[i].hmask[b] |= (uint8_t)((v >> 2) << (4 * h + j));
                }
    }
}

/* Q2_K: per sub-block of 16, the range [min(x, 0), max(x)] on the 2-bit grid (scale (max -
 * min) / 3, min -min(x, 0) >= 0), then both to 4 bits against the super-block's d = max scale / 15
 * and dmin = max min / 15, packed as qtypes.c's dq_q2_K unpacks them. (ggml's quantizer searches
 * each sub-block's scale and min; this one is for synthetic models and tests.) */
static void q_q2_K(const float *x, es_block_q2_K *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += ES_QK_K) {
        float scale[16], min[16], max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            float lo = 0, hi = x[16 * j];
            for (int l = 0; l < 16; l++) {
                lo = fminf(lo, x[16 * j + l]);
                hi = fmaxf(hi, x[16 * j + l]);
            }
            scale[j] = hi > lo ? (hi - lo) / 3.0f : 0.0f;
            min[j] = -lo;
            max_scale = fmaxf(max_scale, scale[j]);
            max_min = fmaxf(max_min, min[j]);
        }
        memset(&y[i], 0, sizeof(y[i]));
        y[i].d = f2h(max_scale / 15.0f);
        y[i].dmin = f2h(max_min / 15.0f);
        const float d = h2f(y[i].d), dmin = h2f(y[i].dmin);
        for (int j = 0; j < 16; j++) {
            const int sc = d > 0 ? clampi(nearest_int(scale[j] / d), 0, 15) : 0;
            const int m = dmin > 0 ? clampi(nearest_int(min[j] / dmin), 0, 15) : 0;
            y[i].scales[j] = (uint8_t)(sc | m << 4);
            const float dl = d * (float)sc, ml = dmin * (float)m;
            /* element 16j + l is block 4h + k's element 16(j % 2) + l, in qs[32h + 16(j % 2) + l] at
             * bits 2k */
            const int h = j / 8, k = (j % 8) / 2;
            for (int l = 0; l < 16; l++) {
                const int q = dl > 0 ? clampi(nearest_int((x[16 * j + l] + ml) / dl), 0, 3) : 0;
                y[i].qs[32 * h + 16 * (j % 2) + l] |= (uint8_t)(q << (2 * k));
            }
        }
    }
}

/* Q8_K: the signed extreme maps to -127 (iscale = -127/max), q = min(127, round(x*iscale)),
 * d = 1/iscale; bsums[g] = sum of q over elements 16g..16g+15. */
static void q_q8_K(const float *x, es_block_q8_K *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += ES_QK_K) {
        const float max = signed_absmax(x, ES_QK_K);
        if (max == 0.0f) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < ES_QK_K; j++)
            y[i].qs[j] = (int8_t)es_min_int(127, nearest_int(iscale * x[j]));
        for (int g = 0; g < ES_QK_K / 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++)
                s += y[i].qs[16 * g + l];
            y[i].bsums[g] = (int16_t)s;
        }
        y[i].d = 1.0f / iscale;
    }
}

/* MXFP4: ggml's quantize_row_mxfp4_ref. The block's E8M0 byte is floor(log2(amax)) - 2 + 127
 * (so d = 2^(e-128) puts the top level 12 d at 1.5 * 2^floor(log2(amax)): values up to amax
 * clamp at most to it), then each value takes the level nearest it, the first of equal ones
 * (ggml's best_index_mxfp4: |kv[i] * d - x| in index order, a strict <). log2f as ggml calls
 * it, so blocks whose max lies a rounding below a power of two get ggml's exponent too. Where
 * ggml's cast of the exponent to a byte is undefined (max |x| below 2^-125: negative; inf: too
 * large), e is clamped to 0 / 254; an all-zero block is e = 0, qs = 0 (zeros). */
static int mxfp4_nearest(float x, float d)
{
    int best = 0;
    float best_err = fabsf((float)mxfp4_levels[0] * d - x);
    for (int i = 1; i < 16; i++) {
        const float err = fabsf((float)mxfp4_levels[i] * d - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

static void q_mxfp4(const float *x, block_mxfp4 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK_MXFP4) {
        float amax = 0.0f;
        for (int j = 0; j < QK_MXFP4; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        uint8_t e = 0;
        if (amax > 0.0f) {
            const float fe = floorf(log2f(amax)) - 2 + 127;
            e = fe < 0.0f ? 0 : fe > 254.0f ? 254 : (uint8_t)fe;
        }
        const float d = es_e8m0_half(e);
        y[i].e = e;
        for (int j = 0; j < QK_MXFP4 / 2; j++)
            y[i].qs[j] =
                (uint8_t)(mxfp4_nearest(x[j], d) | mxfp4_nearest(x[j + QK_MXFP4 / 2], d) << 4);
    }
}

bool es_quantize_row(uint32_t type, const float *src, void *dst, int64_t n)
{
    const es_qtype_info *q = es_qtype_info_get(type);
    if (!q || !q->supported) return false;
    if (type == ES_QTYPE_IQ4_NL || type == ES_QTYPE_IQ4_XS) return false; /* read, not written */
    ES_ASSERT(n >= 0 && n % q->block_elems == 0);
    const int64_t nb = n / q->block_elems;
    switch (type) {
    case ES_QTYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return true;
    case ES_QTYPE_F16: {
        es_f16 *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = es_f32_to_f16(src[i]);
        return true;
    }
    case ES_QTYPE_BF16: {
        es_bf16 *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = es_f32_to_bf16(src[i]);
        return true;
    }
    case ES_QTYPE_Q4_0:
        q_q4_0(src, dst, nb);
        return true;
    case ES_QTYPE_Q4_1:
        q_q4_1(src, dst, nb);
        return true;
    case ES_QTYPE_Q5_0:
        q_q5_0(src, dst, nb);
        return true;
    case ES_QTYPE_Q5_1:
        q_q5_1(src, dst, nb);
        return true;
    case ES_QTYPE_Q8_0:
        q_q8_0(src, dst, nb);
        return true;
    case ES_QTYPE_Q4_K:
        q_q4_K(src, dst, nb);
        return true;
    case ES_QTYPE_Q5_K:
        q_q5_K(src, dst, nb);
        return true;
    case ES_QTYPE_Q6_K:
        q_q6_K(src, dst, nb);
        return true;
    case ES_QTYPE_Q3_K:
        q_q3_K(src, dst, nb);
        return true;
    case ES_QTYPE_Q2_K:
        q_q2_K(src, dst, nb);
        return true;
    case ES_QTYPE_Q8_K:
        q_q8_K(src, dst, nb);
        return true;
    case ES_QTYPE_MXFP4:
        q_mxfp4(src, dst, nb);
        return true;
    default:
        return false;
    }
}
