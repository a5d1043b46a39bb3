/* Element-wise steps, scalar: the oracle for vec_avx2.c and vec_avx512.c (libm's expf). */
#include "quant/kern.h"

#include <math.h>

static void swiglu(float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void glu_oai(float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i] < 7.0f ? g[i] : 7.0f;
        const float y = u[i] < -7.0f ? -7.0f : u[i] > 7.0f ? 7.0f : u[i];
        g[i] = x / (1.0f + expf(1.702f * -x)) * (y + 1.0f);
    }
}

static void axpy(float *y, float a, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

static float exp_sum(float *x, float sub, int64_t n)
{
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += (x[i] = expf(x[i] - sub));
    return s;
}

static float scale_max(float *x, float s, int64_t n)
{
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        x[i] *= s;
        mx = x[i] > mx ? x[i] : mx;
    }
    return mx;
}

/* The sum of squares in double, as ggml (and the reference path) do. */
static void rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps)
{
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

void es_vec_fill_scalar(es_kern *k)
{
    k->scale_max = scale_max;
    k->rmsnorm = rmsnorm;
    k->swiglu = swiglu;
    k->glu_oai = glu_oai;
    k->axpy = axpy;
    k->exp_sum = exp_sum;
}
