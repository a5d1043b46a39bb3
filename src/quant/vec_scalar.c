/* Element-wise steps, scalar: the oracle for vec_avx2.c and vec_avx512.c (libm's expf). */
#include "quant/kern.h"

#include <math.h>

static void swiglu(float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
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

void es_vec_fill_scalar(es_kern *k)
{
    k->swiglu = swiglu;
    k->axpy = axpy;
    k->exp_sum = exp_sum;
}
