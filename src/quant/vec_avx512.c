/*
 * Element-wise steps, AVX-512: SwiGLU, y += a x, and exp-and-sum for the softmax.
 *
 * exp(x): x = n ln2 + r with n = round(x / ln2) and r in [-ln2/2, ln2/2] (ln2 split in two parts
 * so r is exact to float precision), e^r by Cephes' degree-6 polynomial (relative error about
 * 2e-7 over that range), then scaled by 2^n with vscalefps, which also gives 0 and infinity at
 * the ends. Tails are done with masked loads and stores, so every element takes the same path.
 */
#include "quant/kern.h"

#include <immintrin.h>
#include <math.h>

static inline __m512 exp16(__m512 x)
{
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.7f)), _mm512_set1_ps(-104.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

static inline __mmask16 tail_mask(int64_t left) { return left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1); }

static void swiglu(float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        const __m512 x = _mm512_maskz_loadu_ps(m, g + i), v = _mm512_maskz_loadu_ps(m, u + i);
        const __m512 den = _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), x)));
        _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(_mm512_div_ps(x, den), v));
    }
}

static void glu_oai(float *g, const float *u, int64_t n)
{
    const __m512 lim = _mm512_set1_ps(7.0f), nlim = _mm512_set1_ps(-7.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        const __m512 x = _mm512_min_ps(_mm512_maskz_loadu_ps(m, g + i), lim);
        const __m512 y = _mm512_max_ps(_mm512_min_ps(_mm512_maskz_loadu_ps(m, u + i), lim), nlim);
        const __m512 e = exp16(_mm512_mul_ps(_mm512_set1_ps(-1.702f), x));
        const __m512 glu = _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
        _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(glu, _mm512_add_ps(y, _mm512_set1_ps(1.0f))));
    }
}

static void axpy(float *y, float a, const float *x, int64_t n)
{
    const __m512 va = _mm512_set1_ps(a);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        const __m512 s = _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i),
                                       _mm512_mul_ps(va, _mm512_maskz_loadu_ps(m, x + i)));
        _mm512_mask_storeu_ps(y + i, m, s);
    }
}

static float exp_sum(float *x, float sub, int64_t n)
{
    const __m512 vs = _mm512_set1_ps(sub);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vs));
        _mm512_mask_storeu_ps(x + i, m, e);
        acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(m, e));
    }
    return _mm512_reduce_add_ps(acc);
}

static float scale_max(float *x, float s, int64_t n)
{
    const __m512 vs = _mm512_set1_ps(s);
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs);
        _mm512_mask_storeu_ps(x + i, m, v);
        mx = _mm512_mask_max_ps(mx, m, mx, v);
    }
    return _mm512_reduce_max_ps(mx);
}

/* Sum of squares in 16 float lanes, the lanes added in a fixed tree: accurate to a few ulps of
 * float for the row lengths of these models, and the same for any split of the rows. */
static void rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps)
{
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __m512 v = _mm512_maskz_loadu_ps(tail_mask(n - i), x + i);
        acc = _mm512_fmadd_ps(v, v, acc);
    }
    const float scale = 1.0f / sqrtf(_mm512_reduce_add_ps(acc) / (float)n + eps);
    const __m512 vs = _mm512_set1_ps(scale);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs),
                                       _mm512_maskz_loadu_ps(m, w + i));
        _mm512_mask_storeu_ps(out + i, m, v);
    }
}

void es_vec_fill_avx512(es_kern *k)
{
    k->scale_max = scale_max;
    k->rmsnorm = rmsnorm;
    k->swiglu = swiglu;
    k->glu_oai = glu_oai;
    k->axpy = axpy;
    k->exp_sum = exp_sum;
}
