/*
 * Element-wise steps, AVX2 + FMA: SwiGLU, y += a x, and exp-and-sum for the softmax.
 *
 * exp(x) as in vec_avx512.c (range reduction by ln2, Cephes polynomial), with 2^n built in the
 * exponent bits; x is clamped to [-87.3, 88.3] so n stays a normal exponent. Tails go through
 * an 8-float stack buffer, so every element takes the same path.
 */
#include "quant/kern.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

static inline __m256 exp8(__m256 x)
{
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3f)), _mm256_set1_ps(-87.3f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

static inline __m256 swiglu8(__m256 x, __m256 v)
{
    const __m256 den = _mm256_add_ps(_mm256_set1_ps(1.0f), exp8(_mm256_sub_ps(_mm256_setzero_ps(), x)));
    return _mm256_mul_ps(_mm256_div_ps(x, den), v);
}

static inline __m256 glu_oai8(__m256 g, __m256 u)
{
    const __m256 x = _mm256_min_ps(g, _mm256_set1_ps(7.0f));
    const __m256 y = _mm256_max_ps(_mm256_min_ps(u, _mm256_set1_ps(7.0f)), _mm256_set1_ps(-7.0f));
    const __m256 e = exp8(_mm256_mul_ps(_mm256_set1_ps(-1.702f), x));
    const __m256 glu = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    return _mm256_mul_ps(glu, _mm256_add_ps(y, _mm256_set1_ps(1.0f)));
}

static void glu_oai(float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(g + i, glu_oai8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    if (i < n) {
        float a[8] = {0}, b[8] = {0};
        memcpy(a, g + i, sizeof(float) * (size_t)(n - i));
        memcpy(b, u + i, sizeof(float) * (size_t)(n - i));
        _mm256_storeu_ps(a, glu_oai8(_mm256_loadu_ps(a), _mm256_loadu_ps(b)));
        memcpy(g + i, a, sizeof(float) * (size_t)(n - i));
    }
}

static void swiglu(float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(g + i, swiglu8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    if (i < n) {
        float a[8] = {0}, b[8] = {0};
        memcpy(a, g + i, sizeof(float) * (size_t)(n - i));
        memcpy(b, u + i, sizeof(float) * (size_t)(n - i));
        _mm256_storeu_ps(a, swiglu8(_mm256_loadu_ps(a), _mm256_loadu_ps(b)));
        memcpy(g + i, a, sizeof(float) * (size_t)(n - i));
    }
}

static void axpy(float *y, float a, const float *x, int64_t n)
{
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(va, _mm256_loadu_ps(x + i))));
    for (; i < n; i++) y[i] += a * x[i]; /* same operations, one lane: identical results */
}

static float exp_sum(float *x, float sub, int64_t n)
{
    const __m256 vs = _mm256_set1_ps(sub);
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs));
        _mm256_storeu_ps(x + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    if (i < n) {
        float a[8] = {0};
        memcpy(a, x + i, sizeof(float) * (size_t)(n - i));
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)), lane));
        const __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_loadu_ps(a), vs)), keep);
        _mm256_storeu_ps(a, e);
        memcpy(x + i, a, sizeof(float) * (size_t)(n - i));
        acc = _mm256_add_ps(acc, e);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, acc);
    return ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
}

static float hmax8(__m256 v)
{
    float l[8];
    _mm256_storeu_ps(l, v);
    float m = l[0];
    for (int j = 1; j < 8; j++) m = l[j] > m ? l[j] : m;
    return m;
}

static float scale_max(float *x, float s, int64_t n)
{
    const __m256 vs = _mm256_set1_ps(s);
    __m256 mx = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
        _mm256_storeu_ps(x + i, v);
        mx = _mm256_max_ps(mx, v);
    }
    float m = hmax8(mx);
    for (; i < n; i++) { /* same multiply, one lane */
        x[i] *= s;
        m = x[i] > m ? x[i] : m;
    }
    return m;
}

/* Sum of squares in 8 float lanes (tail lanes zero-padded), lanes added in a fixed tree. */
static void rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps)
{
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        acc = _mm256_fmadd_ps(v, v, acc);
    }
    if (i < n) {
        float t[8] = {0};
        memcpy(t, x + i, sizeof(float) * (size_t)(n - i));
        const __m256 v = _mm256_loadu_ps(t);
        acc = _mm256_fmadd_ps(v, v, acc);
    }
    float l[8];
    _mm256_storeu_ps(l, acc);
    const float sum = ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
    const float scale = 1.0f / sqrtf(sum / (float)n + eps);
    for (i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

void es_vec_fill_avx2(es_kern *k)
{
    k->scale_max = scale_max;
    k->rmsnorm = rmsnorm;
    k->swiglu = swiglu;
    k->glu_oai = glu_oai;
    k->axpy = axpy;
    k->exp_sum = exp_sum;
}
