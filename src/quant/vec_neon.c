/*
 * Element-wise steps, AArch64 NEON (baseline armv8-a: no extension needed, so this file gets no
 * -march flag): SwiGLU, y += a x, exp-and-sum for the softmax, scale-and-max, RMSNorm.
 *
 * DESIGN: the formulas of vec_avx2.c on 4 float lanes. exp(x): range reduction by ln2 (n rounded
 * to nearest, r = x - n ln2 in two fused steps), the Cephes degree-6 polynomial, 2^n built in the
 * exponent bits; x is clamped to [-87.3, 88.3] so n stays a normal exponent. Tails go through a
 * 4-float stack buffer, so every element takes the same path whatever n and the split of an
 * array. The reductions (exp_sum, rmsnorm) add 4 lanes over increasing i, then the lanes in one
 * fixed tree: a fixed order for a given n.
 */
#include "quant/kern.h"

#include <arm_neon.h>
#include <math.h>
#include <string.h>

static inline float32x4_t exp4(float32x4_t x)
{
    x = vmaxq_f32(vminq_f32(x, vdupq_n_f32(88.3f)), vdupq_n_f32(-87.3f));
    const float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504088896341f)));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
    p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
    p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
    p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
    /* n is an integer in [-126, 127]: the conversion is exact */
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmulq_f32(p, vreinterpretq_f32_s32(e));
}

static inline float32x4_t swiglu4(float32x4_t x, float32x4_t v)
{
    const float32x4_t den = vaddq_f32(vdupq_n_f32(1.0f), exp4(vnegq_f32(x)));
    return vmulq_f32(vdivq_f32(x, den), v);
}

static inline float32x4_t glu_oai4(float32x4_t g, float32x4_t u)
{
    const float32x4_t x = vminq_f32(g, vdupq_n_f32(7.0f));
    const float32x4_t y = vmaxq_f32(vminq_f32(u, vdupq_n_f32(7.0f)), vdupq_n_f32(-7.0f));
    const float32x4_t e = exp4(vmulq_f32(vdupq_n_f32(-1.702f), x));
    const float32x4_t glu = vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0f), e));
    return vmulq_f32(glu, vaddq_f32(y, vdupq_n_f32(1.0f)));
}

static void glu_oai(float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(g + i, glu_oai4(vld1q_f32(g + i), vld1q_f32(u + i)));
    if (i < n) {
        float a[4] = {0}, b[4] = {0};
        memcpy(a, g + i, sizeof(float) * (size_t)(n - i));
        memcpy(b, u + i, sizeof(float) * (size_t)(n - i));
        vst1q_f32(a, glu_oai4(vld1q_f32(a), vld1q_f32(b)));
        memcpy(g + i, a, sizeof(float) * (size_t)(n - i));
    }
}

static void swiglu(float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(g + i, swiglu4(vld1q_f32(g + i), vld1q_f32(u + i)));
    if (i < n) {
        float a[4] = {0}, b[4] = {0};
        memcpy(a, g + i, sizeof(float) * (size_t)(n - i));
        memcpy(b, u + i, sizeof(float) * (size_t)(n - i));
        vst1q_f32(a, swiglu4(vld1q_f32(a), vld1q_f32(b)));
        memcpy(g + i, a, sizeof(float) * (size_t)(n - i));
    }
}

/* A multiply then an add (not fused), as the scalar y[i] += a * x[i]: identical results. */
static void axpy(float *y, float a, const float *x, int64_t n)
{
    const float32x4_t va = vdupq_n_f32(a);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, vaddq_f32(vld1q_f32(y + i), vmulq_f32(va, vld1q_f32(x + i))));
    for (; i < n; i++)
        y[i] += a * x[i];
}

static float exp_sum(float *x, float sub, int64_t n)
{
    const float32x4_t vs = vdupq_n_f32(sub);
    float32x4_t acc = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t e = exp4(vsubq_f32(vld1q_f32(x + i), vs));
        vst1q_f32(x + i, e);
        acc = vaddq_f32(acc, e);
    }
    if (i < n) {
        float a[4] = {0};
        memcpy(a, x + i, sizeof(float) * (size_t)(n - i));
        const float32x4_t e = exp4(vsubq_f32(vld1q_f32(a), vs));
        vst1q_f32(a, e);
        memcpy(x + i, a, sizeof(float) * (size_t)(n - i));
        for (int64_t j = n - i; j < 4; j++) /* padding lanes add nothing */
            a[j] = 0.0f;
        acc = vaddq_f32(acc, vld1q_f32(a));
    }
    float l[4];
    vst1q_f32(l, acc);
    return (l[0] + l[2]) + (l[1] + l[3]);
}

static float scale_max(float *x, float s, int64_t n)
{
    const float32x4_t vs = vdupq_n_f32(s);
    float32x4_t mx = vdupq_n_f32(-INFINITY);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t v = vmulq_f32(vld1q_f32(x + i), vs);
        vst1q_f32(x + i, v);
        mx = vmaxq_f32(mx, v);
    }
    float m = vmaxvq_f32(mx);
    for (; i < n; i++) { /* same multiply, one lane */
        x[i] *= s;
        m = x[i] > m ? x[i] : m;
    }
    return m;
}

/* Sum of squares in 4 float lanes (tail lanes zero-padded), lanes added in a fixed tree. */
static void rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps)
{
    float32x4_t acc = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t v = vld1q_f32(x + i);
        acc = vfmaq_f32(acc, v, v);
    }
    if (i < n) {
        float t[4] = {0};
        memcpy(t, x + i, sizeof(float) * (size_t)(n - i));
        const float32x4_t v = vld1q_f32(t);
        acc = vfmaq_f32(acc, v, v);
    }
    float l[4];
    vst1q_f32(l, acc);
    const float sum = (l[0] + l[2]) + (l[1] + l[3]);
    const float scale = 1.0f / sqrtf(sum / (float)n + eps);
    for (i = 0; i < n; i++)
        out[i] = x[i] * scale * w[i];
}

void es_vec_fill_neon(es_kern *k)
{
    k->scale_max = scale_max;
    k->rmsnorm = rmsnorm;
    k->swiglu = swiglu;
    k->glu_oai = glu_oai;
    k->axpy = axpy;
    k->exp_sum = exp_sum;
}
