/*
 * Element-wise steps (SwiGLU, gpt-oss's GLU, axpy, exp-and-sum) of every ISA this machine has against the
 * scalar oracle (libm's expf), on awkward lengths; and per-element independence: splitting an
 * array into pieces gives the same bits as one call.
 */
#include "t.h"

#include "quant/kern.h"

static const char *const isas[] = {"avx2", "avxvnni", "avx512", "amx", "asimd", "neon", "i8mm"};

static void fill(float *x, int64_t n, float scale, uint64_t seed)
{
    t_rng r = {seed};
    for (int64_t i = 0; i < n; i++) x[i] = scale * t_uniform(&r);
}

static void check_isa(const es_kern *ref, const es_kern *k)
{
    enum { N = 301 };
    float g[N], u[N], g1[N], g2[N], y1[N], y2[N], x[N];
    for (int64_t n = 0; n <= N; n += n < 40 ? 1 : 87) {
        fill(g, N, 12.0f, 1 + n);
        fill(u, N, 3.0f, 2 + n);
        g[0] = -100.0f; /* silu -> 0, exp(-g) saturates */
        if (n > 2) g[2] = 100.0f;
        memcpy(g1, g, sizeof(g));
        memcpy(g2, g, sizeof(g));
        ref->swiglu(g1, u, n);
        k->swiglu(g2, u, n);
        for (int64_t i = 0; i < n; i++)
            if (!t_near(g2[i], g1[i], 1e-6f * fabsf(g1[i]) + 1e-30f))
                fail_msg("%s swiglu n=%lld i=%lld: %g vs %g", k->isa, (long long)n, (long long)i, g2[i], g1[i]);
        for (int64_t i = n; i < N; i++) assert_true(g2[i] == g[i]); /* nothing past n written */
        /* split at an odd point: same bits */
        memcpy(g1, g, sizeof(g));
        k->swiglu(g1, u, n / 3);
        k->swiglu(g1 + n / 3, u + n / 3, n - n / 3);
        assert_memory_equal(g1, g2, sizeof(float) * (size_t)n);

        /* gpt-oss's clamped GLU: g and u range past its limits of 7 (u in +-12 here) */
        fill(g, N, 12.0f, 7 + n);
        fill(u, N, 12.0f, 8 + n);
        g[0] = -100.0f;
        memcpy(g1, g, sizeof(g));
        memcpy(g2, g, sizeof(g));
        ref->glu_oai(g1, u, n);
        k->glu_oai(g2, u, n);
        for (int64_t i = 0; i < n; i++)
            if (!t_near(g2[i], g1[i], 1e-6f * fabsf(g1[i]) + 1e-30f))
                fail_msg("%s glu_oai n=%lld i=%lld: %g vs %g", k->isa, (long long)n, (long long)i, g2[i], g1[i]);
        for (int64_t i = n; i < N; i++) assert_true(g2[i] == g[i]);
        memcpy(g1, g, sizeof(g));
        k->glu_oai(g1, u, n / 3);
        k->glu_oai(g1 + n / 3, u + n / 3, n - n / 3);
        assert_memory_equal(g1, g2, sizeof(float) * (size_t)n);

        fill(y1, N, 5.0f, 3 + n);
        memcpy(y2, y1, sizeof(y1));
        fill(x, N, 5.0f, 4 + n);
        ref->axpy(y1, 0.37f, x, n);
        k->axpy(y2, 0.37f, x, n);
        assert_memory_equal(y1, y2, sizeof(y1)); /* a multiply and an add: exact everywhere */

        fill(g, N, 30.0f, 5 + n);
        memcpy(g1, g, sizeof(g));
        memcpy(g2, g, sizeof(g));
        float s1 = ref->exp_sum(g1, 4.0f, n), s2 = k->exp_sum(g2, 4.0f, n);
        for (int64_t i = 0; i < n; i++)
            if (!t_near(g2[i], g1[i], 1e-6f * fabsf(g1[i])))
                fail_msg("%s exp n=%lld i=%lld: %g vs %g", k->isa, (long long)n, (long long)i, g2[i], g1[i]);
        for (int64_t i = n; i < N; i++) assert_true(g2[i] == g[i]);
        assert_true(t_near(s2, s1, 1e-5f * s1 + 1e-30f));

        /* scale and max: a multiply per element, exact; the max of the same values */
        fill(g, N, 30.0f, 6 + n);
        memcpy(g1, g, sizeof(g));
        memcpy(g2, g, sizeof(g));
        const float m1 = ref->scale_max(g1, 0.125f, n), m2 = k->scale_max(g2, 0.125f, n);
        assert_memory_equal(g1, g2, sizeof(g));
        assert_true(m1 == m2);

        /* rmsnorm: float lanes vs the double-sum oracle, close; splitting rows is not a thing
         * here (one call per row), so only accuracy is checked */
        if (n > 0) {
            fill(g, N, 300.0f, 7 + n);
            fill(u, N, 1.0f, 8 + n);
            ref->rmsnorm(g1, g, u, n, 1e-5f);
            k->rmsnorm(g2, g, u, n, 1e-5f);
            for (int64_t i = 0; i < n; i++)
                if (!t_near(g2[i], g1[i], 2e-6f * fabsf(g1[i]) + 1e-6f))
                    fail_msg("%s rmsnorm n=%lld i=%lld: %g vs %g", k->isa, (long long)n, (long long)i, g2[i], g1[i]);
        }
    }
}

static void test_vec_isas(void **state)
{
    (void)state;
    es_kern ref;
    assert_true(es_kern_get("scalar", &ref));
    int ran = 0;
    for (size_t i = 0; i < T_LEN(isas); i++) {
        es_kern k;
        if (!es_kern_get(isas[i], &k)) continue;
        check_isa(&ref, &k);
        ran++;
    }
    if (!ran) skip(); /* no SIMD ISA on this machine: nothing was compared */
}

/* The scalar oracle itself against hand-checked values. */
static void test_vec_scalar_values(void **state)
{
    (void)state;
    es_kern k;
    assert_true(es_kern_get("scalar", &k));
    float g[3] = {0.0f, 1.0f, -2.0f}, u[3] = {5.0f, 2.0f, 1.0f};
    k.swiglu(g, u, 3);
    /* silu(0) = 0; silu(1) = 1/(1+e^-1) = 0.7310586; silu(-2) = -2/(1+e^2) = -0.2384058 */
    assert_float_equal(g[0], 0.0f, 1e-7f);
    assert_float_equal(g[1], 2.0f * 0.7310586f, 1e-6f);
    assert_float_equal(g[2], -0.2384058f, 1e-6f);
    /* gpt-oss's GLU: g 1, u 2: 1/(1+e^-1.702) * 3 = 2.5373873; g 9 (clamped to 7), u -9
     * (clamped to -7): 7/(1+e^-11.914) * -6 = -41.999719; g -1, u 0: -1/(1+e^1.702) */
    float go[3] = {1.0f, 9.0f, -1.0f}, uo[3] = {2.0f, -9.0f, 0.0f};
    k.glu_oai(go, uo, 3);
    assert_float_equal(go[0], 2.5373873f, 2e-6f);
    assert_float_equal(go[1], -41.999719f, 2e-4f);
    assert_float_equal(go[2], -0.1542042f, 1e-6f);
    float x[2] = {1.0f, 0.0f};
    float s = k.exp_sum(x, 1.0f, 2); /* e^0 + e^-1 */
    assert_float_equal(x[0], 1.0f, 1e-7f);
    assert_float_equal(x[1], 0.36787944f, 1e-7f);
    assert_float_equal(s, 1.36787944f, 1e-6f);
    /* rmsnorm of (3, 4): mean square 12.5, so out = x / sqrt(12.5) * w */
    float v[2] = {3.0f, 4.0f}, w[2] = {1.0f, 2.0f}, o[2];
    k.rmsnorm(o, v, w, 2, 0.0f);
    assert_float_equal(o[0], 0.8485281f, 1e-6f);
    assert_float_equal(o[1], 2.2627417f, 1e-6f);
    float z[3] = {-1.0f, 4.0f, 2.0f};
    assert_float_equal(k.scale_max(z, 0.5f, 3), 2.0f, 0.0f);
    assert_float_equal(z[0], -0.5f, 0.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vec_isas),
        cmocka_unit_test(test_vec_scalar_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
