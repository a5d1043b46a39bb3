/*
 * Matrix kernels: the scalar table against an independent float computation, every ISA table the
 * machine has against scalar, bit for bit (an ISA it lacks is skipped, not passed), determinism
 * across splits of [0, N), row orders and gather lists, accumulation, activation preparation,
 * and ESTREAM_ISA.
 * The amx table runs here on AMX tiles, or, on an AVX-512 CPU without AMX, on the emulation of
 * the tile instructions this program links (Makefile: x86_amx_emu.o), or, on an AVX2 CPU without
 * AVX-512, on that emulation over the AVX-512 intrinsics' own (avx512_emu.h, which runs the
 * avx512 table here too); either way it must equal scalar and avx512 bit for bit.
 */
#include <unistd.h>

#include "t.h"

#include "core/cpu.h"
#include "quant/kern.h"
#include "core/pool.h"

#include <math.h>
#include <sys/mman.h>

static const uint32_t all_types[] = {ES_QTYPE_Q4_0,   ES_QTYPE_Q8_0,  ES_QTYPE_Q4_K,
                                     ES_QTYPE_Q5_K,   ES_QTYPE_Q6_K,  ES_QTYPE_Q3_K,
                                     ES_QTYPE_Q2_K,   ES_QTYPE_Q5_0,  ES_QTYPE_Q4_1,
                                     ES_QTYPE_Q5_1,   ES_QTYPE_IQ4_NL, ES_QTYPE_IQ4_XS,
                                     ES_QTYPE_MXFP4,  ES_QTYPE_F16,   ES_QTYPE_BF16,
                                     ES_QTYPE_F32};

static int is_k_type(uint32_t t) /* blocks of 256 */
{
    return t == ES_QTYPE_Q4_K || t == ES_QTYPE_Q5_K || t == ES_QTYPE_Q6_K || t == ES_QTYPE_Q3_K ||
           t == ES_QTYPE_Q2_K || t == ES_QTYPE_IQ4_XS;
}
static int is_iq4(uint32_t t)
{
    return t == ES_QTYPE_IQ4_NL || t == ES_QTYPE_IQ4_XS;
}
/* Random blocks: IQ4 (estream cannot quantize to it), Q3_K and Q2_K (so that every bit pattern of
 * their packed scales, mins and high-bit masks occurs, which their quantizers' fits need not
 * produce), MXFP4 (every nibble in every position, and exponents its quantizer would not pick
 * for these rows). */
static int random_blocks(uint32_t t)
{
    return is_iq4(t) || t == ES_QTYPE_Q3_K || t == ES_QTYPE_Q2_K || t == ES_QTYPE_MXFP4;
}

/* Random bytes for a row of such a type, with each block's F16 scale (Q3_K: its last two bytes,
 * Q2_K: its last four, d and dmin; the others: the first) made small and normal; MXFP4's E8M0
 * byte made moderate, 118..136 (scales 2^-10 .. 2^8, so that products stay finite). */
static void random_row(uint32_t type, uint8_t *w, size_t row_bytes, t_rng *r)
{
    for (size_t b = 0; b < row_bytes; b++) w[b] = (uint8_t)t_next(r);
    const size_t bb = es_qtype_info_get(type)->block_bytes;
    const size_t at = type == ES_QTYPE_Q3_K ? bb - 2 : type == ES_QTYPE_Q2_K ? bb - 4 : 0;
    for (size_t b = 0; b < row_bytes; b += bb) {
        if (type == ES_QTYPE_MXFP4) {
            w[b] = (uint8_t)(118 + t_next(r) % 19);
            continue;
        }
        const es_f16 d = es_f32_to_f16(0.0005f * (float)(1 + t_next(r) % 7));
        memcpy(w + b + at, &d, 2);
        if (type == ES_QTYPE_Q2_K) {
            const es_f16 dmin = es_f32_to_f16(0.0003f * (float)(1 + t_next(r) % 5));
            memcpy(w + b + at + 2, &dmin, 2);
        }
    }
}
static int is_float_type(uint32_t t)
{
    return t == ES_QTYPE_F32 || t == ES_QTYPE_F16 || t == ES_QTYPE_BF16;
}

/* ---- fixtures ---------------------------------------------------------------------------------
 */

typedef struct mat {
    uint32_t type;
    int64_t N, K;
    size_t row_bytes;
    uint8_t *w; /* quantized rows */
    float *wf;  /* the same rows dequantized (es_dequantize_row) */
} mat;

/* Random weights; rows get different magnitudes, a few rows are all zero. */
static mat make_mat(uint32_t type, int64_t N, int64_t K, uint64_t seed)
{
    mat m = {.type = type, .N = N, .K = K, .row_bytes = es_qtype_row_bytes(type, K)};
    assert_true(m.row_bytes > 0);
    m.w = malloc(m.row_bytes * N + 64);
    m.wf = malloc(sizeof(float) * N * K);
    float *tmp = malloc(sizeof(float) * K);
    assert_true(m.w && m.wf && tmp);
    t_rng r = {seed};
    for (int64_t n = 0; n < N; n++) {
        const float scale = (n % 7 == 3) ? 0.0f : 0.02f * (1 + n % 5);
        for (int64_t k = 0; k < K; k++)
            tmp[k] = scale * t_uniform(&r);
        if (random_blocks(type))
            random_row(type, m.w + n * m.row_bytes, m.row_bytes, &r);
        else
            assert_true(es_quantize_row(type, tmp, m.w + n * m.row_bytes, K));
        es_dequantize_row(type, m.w + n * m.row_bytes, m.wf + n * K, K);
    }
    free(tmp);
    return m;
}

static void free_mat(mat *m)
{
    free(m->w);
    free(m->wf);
}

/* Activations like a residual stream: mostly O(1), some blocks with outliers of several
 * hundred, a few exact zeros. Row stride ldx > K to check it is honoured. */
static float *make_x(int64_t rows, int64_t K, int64_t ldx, uint64_t seed)
{
    float *x = malloc(sizeof(float) * rows * ldx);
    assert_non_null(x);
    t_rng r = {seed};
    for (int64_t i = 0; i < rows * ldx; i++) {
        float v = t_uniform(&r) * 2.0f;
        if (t_next(&r) % 97 == 0) v *= 300.0f;
        if (t_next(&r) % 53 == 0) v = 0.0f;
        x[i] = v;
    }
    return x;
}

static void *aalloc(size_t n)
{
    void *p = NULL;
    assert_int_equal(posix_memalign(&p, 64, n ? n : 64), 0);
    memset(p, 0, n);
    return p;
}

/* Runs table k's kernel for type: prepares act from X (n_x rows), then Y[n_rows][ldy]. */
typedef struct run {
    const es_kern *k;
    const mat *m;
    const float *X;
    int64_t ldx, n_x;
} run;

static void *prep_act(const run *u)
{
    const es_kern_ops *o = &u->k->op[u->m->type];
    void *act = aalloc(o->act_row_bytes(u->m->K) * u->n_x);
    o->act_prepare(u->X, u->ldx, u->n_x, u->m->K, act);
    return act;
}

static void do_gemm(const run *u, const void *act, int64_t n0, int64_t n1, const int32_t *rows,
                    int64_t n_rows, float *Y, int64_t ldy, int accumulate)
{
    const es_kern_ops *o = &u->k->op[u->m->type];
    void *scratch = aalloc(o->scratch_bytes(u->m->K));
    o->gemm(u->m->w, u->m->K, n0, n1, act, rows, n_rows, Y, ldy, accumulate, scratch);
    free(scratch);
}

/* sum_k |w| |x|: the scale a dot product's rounding error is measured against. */
static double abs_dot(const float *w, const float *x, int64_t K)
{
    double s = 0;
    for (int64_t k = 0; k < K; k++)
        s += fabs((double)w[k] * x[k]);
    return s;
}

/* The activation row r of a prepared buffer, as floats (what the kernel multiplies with). */
static void act_row_floats(const es_kern *k, uint32_t type, const void *act, int64_t r, int64_t K,
                           float *out)
{
    const uint8_t *row = (const uint8_t *)act + r * k->op[type].act_row_bytes(K);
    if (is_float_type(type)) {
        memcpy(out, row, sizeof(float) * K);
        return;
    }
    const int8_t *q = (const int8_t *)row;
    const float *d = (const float *)(row + es_act_q8_off_d(K));
    for (int64_t i = 0; i < K; i++)
        out[i] = q[i] * d[i / 32];
}

/* Q4_1 / Q5_1 (w = d q + m) take each block's m times llama.cpp's Q8_1 sum s = d_x sum(q_x),
 * which is rounded to F16 from the float d_x before its own F16 rounding: m s may move by
 * 2^-10 of itself against m times the sum of the act's floats x. 0 for other types. */
static double q81_err(const mat *m, int64_t n, const float *x)
{
    if (m->type != ES_QTYPE_Q4_1 && m->type != ES_QTYPE_Q5_1) return 0;
    double err = 0;
    for (int64_t b = 0; b < m->K / 32; b++) {
        es_f16 mh;
        memcpy(&mh, m->w + n * m->row_bytes + b * es_qtype_info_get(m->type)->block_bytes + 2, 2);
        double sum = 0;
        for (int i = 0; i < 32; i++) sum += x[32 * b + i];
        err += fabs(es_f16_to_f32(mh) * sum) * 0x1p-10;
    }
    return err;
}

/* ---- scalar against an independent float computation ------------------------------------- */

static void test_scalar_vs_float(void **state)
{
    (void)state;
    es_kern ks;
    assert_true(es_kern_get("scalar", &ks));
    static const int64_t rows_list[] = {1, 3, 17};
    for (size_t ti = 0; ti < ES_LEN(all_types); ti++) {
        const uint32_t type = all_types[ti];
        const int64_t Ks[] = {is_k_type(type) ? 256 : 32, is_k_type(type) ? 768 : 96,
                              is_k_type(type) ? 2048 : 2080};
        for (size_t ki = 0; ki < ES_LEN(Ks); ki++) {
            const int64_t K = Ks[ki], N = 19, ldx = K + 5;
            mat m = make_mat(type, N, K, 100 + ti * 10 + ki);
            for (size_t ri = 0; ri < ES_LEN(rows_list); ri++) {
                const int64_t nr = rows_list[ri];
                float *X = make_x(nr, K, ldx, 7 + ri);
                run u = {&ks, &m, X, ldx, nr};
                void *act = prep_act(&u);
                float *Y = aalloc(sizeof(float) * nr * N), *xf = malloc(sizeof(float) * K);
                do_gemm(&u, act, 0, N, NULL, nr, Y, N, 0);
                for (int64_t r = 0; r < nr; r++) {
                    act_row_floats(&ks, type, act, r, K, xf);
                    for (int64_t n = 0; n < N; n++) {
                        double want = 0;
                        for (int64_t k = 0; k < K; k++)
                            want += (double)m.wf[n * K + k] * xf[k];
                        const double tol =
                            2e-5 * abs_dot(m.wf + n * K, xf, K) + q81_err(&m, n, xf) + 1e-30;
                        if (!t_near(Y[r * N + n], want, tol))
                            fail_msg("%s K=%ld rows=%ld r=%ld n=%ld: got %.9g want %.9g (tol %g)",
                                     es_qtype_name(type), (long)K, (long)nr, (long)r, (long)n,
                                     Y[r * N + n], want, tol);
                    }
                }
                free(xf);
                free(Y);
                free(act);
                free(X);
            }
            free_mat(&m);
        }
    }
}

/* Y (nr x N) of table isa against the dequantized weights times X's rows as es_act_round
 * rounds them, within the float rounding (and Q8_1's F16 block sums, q81_err); finite. */
static void expect_rounded_product(const char *isa, const mat *m, const float *X, int64_t ldx,
                                   int64_t nr, const float *Y)
{
    const int64_t K = m->K, N = m->N;
    float *xr = malloc(sizeof(float) * K);
    assert_non_null(xr);
    for (int64_t r = 0; r < nr; r++) {
        memcpy(xr, X + r * ldx, sizeof(float) * K);
        es_act_round(m->type, xr, K);
        for (int64_t n = 0; n < N; n++) {
            double want = 0;
            for (int64_t i = 0; i < K; i++) want += (double)m->wf[n * K + i] * xr[i];
            const double tol = 2e-5 * abs_dot(m->wf + n * K, xr, K) + q81_err(m, n, xr) + 1e-30;
            if (!isfinite(Y[r * N + n]) || !t_near(Y[r * N + n], want, tol))
                fail_msg("%s %s r=%ld n=%ld: got %.9g want %.9g", isa, es_qtype_name(m->type),
                         (long)r, (long)n, Y[r * N + n], want);
        }
    }
    free(xr);
}

/* The types of llama-quantize's fallbacks (Q5_0, Q4_1, Q5_1, IQ4_NL), IQ4_XS and MXFP4 (random
 * block bytes for IQ4, which estream cannot quantize to, and for MXFP4), through every table this
 * CPU runs: the product equals the dequantized weights times the activations as es_act_round
 * rounds them (Q4_1 / Q5_1: plus the F16 rounding of Q8_1's block sums), and es_act_round equals
 * what each table's preparation holds, for these and the other integer types (MXFP4: Q8_0's
 * rounding, llama.cpp's vec_dot_type for it). */
static void test_iq4_and_act_round(void **state)
{
    (void)state;
    static const uint32_t types[] = {ES_QTYPE_IQ4_NL, ES_QTYPE_IQ4_XS, ES_QTYPE_Q5_0,
                                     ES_QTYPE_Q4_1,   ES_QTYPE_Q5_1,   ES_QTYPE_Q4_0,
                                     ES_QTYPE_Q8_0,   ES_QTYPE_Q4_K,   ES_QTYPE_Q6_K,
                                     ES_QTYPE_MXFP4};
    int ran = 0;
    for (size_t ii = 0; ii < ES_KERN_N_ISA; ii++) {
        es_kern k;
        if (!es_kern_get(es_kern_isa_names[ii], &k)) continue;
        ran++;
        for (size_t ti = 0; ti < ES_LEN(types); ti++) {
            const uint32_t type = types[ti];
            const int64_t K = is_k_type(type) ? 512 : 96, N = 13, nr = 5, ldx = K + 3;
            mat m = make_mat(type, N, K, 77 + ti);
            float *X = make_x(nr, K, ldx, 3 + ti);
            run u = {&k, &m, X, ldx, nr};
            void *act = prep_act(&u);
            float *Y = aalloc(sizeof(float) * nr * N), *xr = malloc(sizeof(float) * K);
            float *xa = malloc(sizeof(float) * K);
            do_gemm(&u, act, 0, N, NULL, nr, Y, N, 0);
            for (int64_t r = 0; r < nr; r++) {
                memcpy(xr, X + r * ldx, sizeof(float) * K);
                es_act_round(type, xr, K);
                act_row_floats(&k, type, act, r, K, xa);
                for (int64_t i = 0; i < K; i++)
                    if (xr[i] != xa[i])
                        fail_msg("%s %s: es_act_round gives %.9g at %ld, the table holds %.9g",
                                 es_kern_isa_names[ii], es_qtype_name(type), xr[i], (long)i, xa[i]);
            }
            expect_rounded_product(es_kern_isa_names[ii], &m, X, ldx, nr, Y);
            free(xa);
            free(xr);
            free(Y);
            free(act);
            free(X);
            free_mat(&m);
        }
    }
    assert_true(ran >= 1);
}

/* Q8_1's block sum where F16 cannot hold it: activations of 3,000-9,000 (and a few outliers far
 * larger), all positive, give block sums past 10^5. llama.cpp's F16 sum is infinite there (inf,
 * or NaN for a block whose min is 0, as in the all-zero rows); estream keeps the float and stays
 * finite and right, while in F16's range it rounds as llama.cpp does (the values below worked
 * out by hand: 127 / 127 = 1). */
static void test_q8_1_sum_range(void **state)
{
    (void)state;
    assert_true(es_act_q8_1_sum(127.0f, 1000) == 1000.0f);
    assert_true(es_act_q8_1_sum(127.0f, 2049) == 2048.0f);     /* F16 steps by 2 there, ties even */
    assert_true(es_act_q8_1_sum(127.0f, 65519) == 65504.0f);   /* F16's largest finite value */
    assert_true(es_act_q8_1_sum(127.0f, 65520) == 65520.0f);   /* would round to infinity */
    assert_true(es_act_q8_1_sum(127.0f, -70001) == -70001.0f);
    static const uint32_t types[] = {ES_QTYPE_Q4_1, ES_QTYPE_Q5_1};
    int ran = 0;
    for (size_t ii = 0; ii < ES_KERN_N_ISA; ii++) {
        es_kern k;
        if (!es_kern_get(es_kern_isa_names[ii], &k)) continue;
        ran++;
        for (size_t ti = 0; ti < ES_LEN(types); ti++) {
            const int64_t K = 128, N = 13, nr = 3, ldx = K;
            mat m = make_mat(types[ti], N, K, 91 + ti);
            float *X = make_x(nr, K, ldx, 5 + ti);
            for (int64_t i = 0; i < nr * ldx; i++) X[i] = 3000.0f * (1.0f + fabsf(X[i]));
            run u = {&k, &m, X, ldx, nr};
            void *act = prep_act(&u);
            float *Y = aalloc(sizeof(float) * nr * N);
            do_gemm(&u, act, 0, N, NULL, nr, Y, N, 0);
            expect_rounded_product(es_kern_isa_names[ii], &m, X, ldx, nr, Y);
            free(Y);
            free(act);
            free(X);
            free_mat(&m);
        }
    }
    assert_true(ran >= 1);
}

/*
 * MXFP4's whole exponent range through every table this CPU runs, bit for bit against scalar:
 * the other tests keep its E8M0 bytes at 118..136; here rows take every e in 0..200 (65 blocks
 * a row, e = (65 n + b) % 201), and every third row only e = 0, 1, 2, the subnormal scales
 * 2^-128, 2^-127 and the smallest normal one, which the SIMD decoders build by another branch
 * (0x00200000 << e); odd token rows are scaled by 2^-24, so that with those weight rows the
 * block products and the outputs are subnormal (a wrong subnormal scale cannot hide behind the
 * larger blocks of a row). 3 token rows (avx512's kernels in the amx table) and 21 (its tiles).
 * Exponents above 200 make 12 * 2^(e-128) times the activations overflow; their bits are the same
 * formula as these.
 */
static void test_mxfp4_scales(void **state)
{
    (void)state;
    es_kern ks;
    assert_true(es_kern_get("scalar", &ks));
    const int64_t K = 2080, N = 37, nx = 21, ldx = K + 1;
    mat m = make_mat(ES_QTYPE_MXFP4, N, K, 4711);
    for (int64_t n = 0; n < N; n++)
        for (int64_t b = 0; b < K / 32; b++)
            m.w[n * m.row_bytes + 17 * b] =
                (uint8_t)(n % 3 == 0 ? (n / 3 + b) % 3 : (65 * n + b) % 201);
    float *X = make_x(nx, K, ldx, 5);
    for (int64_t r = 1; r < nx; r += 2) /* odd token rows tiny: subnormal outputs and products */
        for (int64_t i = 0; i < K; i++) X[r * ldx + i] *= 0x1p-24f;
    static const int64_t nrs[] = {3, 21};
    int ran = 0;
    for (size_t ii = 0; ii < ES_KERN_N_ISA; ii++) {
        es_kern k;
        if (!es_kern_get(es_kern_isa_names[ii], &k) || !strcmp(es_kern_isa_names[ii], "scalar"))
            continue;
        ran++;
        for (size_t ri = 0; ri < ES_LEN(nrs); ri++) {
            const int64_t nr = nrs[ri];
            run us = {&ks, &m, X, ldx, nr}, uv = {&k, &m, X, ldx, nr};
            void *as = prep_act(&us), *av = prep_act(&uv);
            float *Ys = aalloc(sizeof(float) * nr * N), *Yv = aalloc(sizeof(float) * nr * N);
            do_gemm(&us, as, 0, N, NULL, nr, Ys, N, 0);
            do_gemm(&uv, av, 0, N, NULL, nr, Yv, N, 0);
            long subnormal = 0;
            for (int64_t j = 0; j < nr * N; j++) {
                subnormal += fpclassify(Ys[j]) == FP_SUBNORMAL;
                if (memcmp(&Ys[j], &Yv[j], 4))
                    fail_msg("%s mxfp4 rows=%ld: Y[%ld][%ld] = %.9g (%a), scalar %.9g (%a)",
                             es_kern_isa_names[ii], (long)nr, (long)(j / N), (long)(j % N),
                             Yv[j], Yv[j], Ys[j], Ys[j]);
            }
            assert_true(subnormal > 0); /* the small rows' outputs reach the subnormal range */
            free(Ys);
            free(Yv);
            free(as);
            free(av);
        }
    }
    print_message("mxfp4 exponents 0..200: %d tables bit-identical to scalar\n", ran);
    free(X);
    free_mat(&m);
}

/*
 * The prepared activations are llama.cpp's formats: over each group of g values (32 for Q8_0
 * and Q4_0 weights, 256 for K-quants) with max |x| = a, q = x * 127 / a rounded (|error| <= 1/2,
 * +-127 at the max), and every block's d is a / 127 (for g = 32 rounded to F16: at most 2^-11
 * off and an F16 value; for g = 256 the float 1 / (127 / a): within 2 ulp).
 */
static void check_act_groups(const es_kern *k, uint32_t type, int64_t g)
{
    const int64_t K = 1024, nr = 9;
    float *X = make_x(nr, K, K, 5);
    X[3] = 0.004f; /* a block whose scale F16 cannot hold as a normal number: kept as float */
    for (int i = 4; i < 32; i++)
        X[i] = i % 3 ? 0.001f : -0.002f;
    const es_kern_ops *o = &k->op[type];
    void *act = aalloc(o->act_row_bytes(K) * nr);
    o->act_prepare(X, K, nr, K, act);
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *row = (const uint8_t *)act + r * o->act_row_bytes(K);
        const int8_t *q = (const int8_t *)row;
        const float *d = (const float *)(row + es_act_q8_off_d(K)), *x = X + r * K;
        for (int64_t g0 = 0; g0 < K; g0 += g) {
            float a = 0.0f;
            for (int64_t i = g0; i < g0 + g; i++)
                a = fmaxf(a, fabsf(x[i]));
            const double want_d = a / 127.0, d0 = d[g0 / 32];
            for (int64_t b = g0 / 32; b < (g0 + g) / 32; b++)
                assert_true(d[b] == d0);
            if (g == 32 && d0 >= 0x1p-14 && d0 <= 65504) {
                assert_true(fabs(d0 - want_d) <= want_d * 0x1p-11);
                assert_true(es_f16_to_f32(es_f32_to_f16((float)d0)) == (float)d0);
            } else {
                assert_true(fabs(d0 - want_d) <= want_d * 0x1p-22);
            }
            for (int64_t i = g0; i < g0 + g; i++) {
                const double exact = a > 0 ? (double)x[i] * 127.0 / a : 0.0;
                assert_true(fabs(q[i] - exact) <= 0.5001);
                if (fabsf(x[i]) == a && a > 0) assert_int_equal(q[i], x[i] > 0 ? 127 : -127);
            }
        }
    }
    free(act);
    free(X);
}

static void test_act_quant(void **state)
{
    (void)state;
    es_kern ks;
    assert_true(es_kern_get("scalar", &ks));
    check_act_groups(&ks, ES_QTYPE_Q8_0, 32);
    check_act_groups(&ks, ES_QTYPE_Q4_0, 32);
    check_act_groups(&ks, ES_QTYPE_Q4_K, 256);
    check_act_groups(&ks, ES_QTYPE_Q6_K, 256);

    /* by hand: max 1.27 -> x * 100 rounded; d = 0.01 in F16 = (1 + 287/1024) * 2^-7 for Q8_0,
     * the float 1/100 for Q4_K (the 7 other blocks of its 256 are zero) */
    float x[256] = {1.27f, -0.5f, 0.013f, -1.27f};
    for (int t = 0; t < 2; t++) {
        const uint32_t type = t ? ES_QTYPE_Q4_K : ES_QTYPE_Q8_0;
        uint8_t *act = aalloc(ks.op[type].act_row_bytes(256));
        ks.op[type].act_prepare(x, 256, 1, 256, act);
        const int8_t *q = (const int8_t *)act;
        const float *d = (const float *)(act + es_act_q8_off_d(256));
        assert_int_equal(q[0], 127);
        assert_int_equal(q[1], -50);
        assert_int_equal(q[2], 1);
        assert_int_equal(q[3], -127);
        assert_int_equal(q[4], 0);
        if (t) {
            assert_float_equal(d[0], 0.01f, 0.01f * 1e-6f);
            assert_true(d[7] == d[0]);
        } else {
            assert_true(d[0] == 0x1.47cp-7f);
            assert_true(d[1] == 0.0f);
        }
        free(act);
    }
}

/* ---- every ISA against scalar --------------------------------------------------------------- */

/* Every table must give the scalar table's bits (kern.h: the same integer sums and the same
 * float operations in the same order); the relative difference is printed for a failure, to
 * tell a reordered float sum (~1e-7) from a wrong one. */

static void check_isa(const char *isa)
{
    es_kern ks, kv;
    assert_true(es_kern_get("scalar", &ks));
    if (!es_kern_get(isa, &kv)) {
        print_message("%s: not available on this CPU, skipped\n", isa);
        skip();
    }
    if (strcmp(isa, "avx512") == 0 && es_kern_avx512_emulated())
        print_message("avx512: emulated on AVX2 (avx512_emu.h; this CPU has no AVX-512)\n");
    static const int64_t rows_list[] = {1, 3, 17, 130};
    static const int64_t N_list[] = {1, 17, 45};
    for (size_t ti = 0; ti < ES_LEN(all_types); ti++) {
        const uint32_t type = all_types[ti];
        double worst = 0;
        long exact = 0, total = 0;
        int64_t Ks[5];
        size_t nK = 0;
        if (is_k_type(type)) {
            Ks[nK++] = 256, Ks[nK++] = 768, Ks[nK++] = 2048;
        } else if (is_float_type(type)) {
            Ks[nK++] = 1, Ks[nK++] = 7, Ks[nK++] = 33, Ks[nK++] = 300;
        } else {
            Ks[nK++] = 32, Ks[nK++] = 96, Ks[nK++] = 2080;
        }
        /* a K long enough that every SIMD table cuts it into several K-slices (a slice is at
         * most a quarter of L2 of decoded tile: under L2/40 k for 8-row int8 tiles, L2/256 for
         * float tiles), so the slice loop's carry of Y from one slice to the next runs */
        const int64_t k_long = ((int64_t)es_cpu_get()->l2_bytes / 16 + 255) / 256 * 256;
        Ks[nK++] = k_long;
        for (size_t ki = 0; ki < nK; ki++)
            for (size_t ni = 0; ni < ES_LEN(N_list); ni++) {
                const int64_t K = Ks[ki], N = N_list[ni], ldx = K + 3;
                if (K == k_long && N != 17) continue; /* one shape at that length: it is slow */
                mat m = make_mat(type, N, K, 1000 + ti * 100 + ki * 10 + ni);
                for (size_t ri = 0; ri < ES_LEN(rows_list); ri++) {
                    const int64_t nr = rows_list[ri], nx = nr + 3;
                    if (K == k_long && nr > 17) continue;
                    float *X = make_x(nx, K, ldx, 77 + ri);
                    run us = {&ks, &m, X, ldx, nx}, uv = {&kv, &m, X, ldx, nx};
                    void *as = prep_act(&us), *av = prep_act(&uv);
                    /* a gather list with repeats, out of order */
                    int32_t *rows = malloc(sizeof(int32_t) * nr);
                    t_rng rg = {ri + 1};
                    for (int64_t r = 0; r < nr; r++)
                        rows[r] = (int32_t)(t_next(&rg) % nx);
                    const int64_t ldy = N + 2;
                    float *Ys = aalloc(sizeof(float) * nr * ldy);
                    float *Yv = aalloc(sizeof(float) * nr * ldy);
                    const int acc = (int)(ri & 1);
                    for (int64_t i = 0; i < nr * ldy; i++)
                        Ys[i] = Yv[i] = (float)(i % 13) - 6;
                    do_gemm(&us, as, 0, N, rows, nr, Ys, ldy, acc);
                    do_gemm(&uv, av, 0, N, rows, nr, Yv, ldy, acc);
                    float *xf = malloc(sizeof(float) * K);
                    for (int64_t r = 0; r < nr; r++) {
                        act_row_floats(&ks, type, as, rows[r], K, xf);
                        for (int64_t n = 0; n < ldy; n++) {
                            const float a = Ys[r * ldy + n], b = Yv[r * ldy + n];
                            if (n >= N) { /* columns past n1 untouched */
                                assert_true(a == b);
                                continue;
                            }
                            const double base = abs_dot(m.wf + n * K, xf, K);
                            const double rel = fabs(a - b) / (base + fabs(a) + 1e-30);
                            total++;
                            exact += memcmp(&a, &b, sizeof(a)) == 0;
                            worst = rel > worst ? rel : worst;
                            if (memcmp(&a, &b, sizeof(a)) != 0)
                                fail_msg("%s %s K=%ld N=%ld rows=%ld acc=%d r=%ld n=%ld: "
                                         "%.9g vs scalar %.9g (relative %.2g): not the scalar "
                                         "table's bits",
                                         isa, es_qtype_name(type), (long)K, (long)N, (long)nr, acc,
                                         (long)r, (long)n, b, a, rel);
                        }
                    }
                    free(xf);
                    free(Ys);
                    free(Yv);
                    free(rows);
                    free(as);
                    free(av);
                    free(X);
                }
                free_mat(&m);
            }
        print_message("%s vs scalar, %-5s: %6ld/%6ld elements bit-identical, worst "
                      "|diff|/(sum|wx|+|y|) %.2g\n",
                      isa, es_qtype_name(type), exact, total, worst);
    }
}

/* The amx table, or a skip that says why not (no AVX-512 and no emulation of it linked). */
static void get_amx(es_kern *k)
{
    if (!es_kern_get("amx", k)) {
        print_message("amx: %s, skipped\n", es_kern_isa_why_not("amx"));
        skip();
    }
    print_message("amx: %s\n", es_kern_avx512_emulated()
                                   ? "the emulated tiles on emulated AVX-512 (this CPU has AVX2)"
                               : es_kern_amx_emulated() ? "the emulated tiles (no AMX on this CPU)"
                                                        : "AMX tiles");
}

/*
 * amx against scalar and avx512, bit for bit: every integer weight type at K of one block (or
 * super-block) with every row count 1..40 (below 16 rows the avx512 kernels run, from 16 the
 * tiles: full 16-row blocks and short last ones) and N 1, 17, 45, 77 (short tiles and columns);
 * at K of 65 blocks (3 super-blocks) with 3, 16, 17, 40 rows; and at a K just past one K-slice
 * of the amx tiling (the next slice re-packs the rows and restarts the decode-ahead) with 17,
 * 40 and 130 rows (130: two row groups, the second one short). Gather lists with repeats,
 * accumulation, ldy > N and column ranges that start and end inside a tile. The float types
 * are avx512's kernels in the amx table (checked: the same functions).
 */
static void test_amx_vs_scalar(void **state)
{
    (void)state;
    es_kern ka, ks, kv;
    get_amx(&ka);
    assert_true(es_kern_get("scalar", &ks) && es_kern_get("avx512", &kv));
    static const int64_t N_list[] = {1, 17, 45, 77};
    /* a slice of the amx tiling holds L2 / 4 / (2 buffers x 8 Q4_0 records of 1152 bytes)
     * units of 256 k (fewer for the K-quants' larger records) */
    const int64_t k_two = ((int64_t)es_cpu_get()->l2_bytes / 4 / (2 * 8 * 1152) + 1) * 256;
    long cases = 0;
    for (size_t ti = 0; ti < ES_LEN(all_types); ti++) {
        const uint32_t type = all_types[ti];
        if (is_float_type(type)) {
            assert_true(ka.op[type].gemm == kv.op[type].gemm);
            continue;
        }
        const bool kq = is_k_type(type);
        const int64_t Ks[] = {kq ? 256 : 32, kq ? 768 : 2080, k_two};
        for (size_t ki = 0; ki < ES_LEN(Ks); ki++)
            for (size_t ni = 0; ni < ES_LEN(N_list); ni++) {
                const int64_t K = Ks[ki], N = N_list[ni], ldx = K + 3, nx = 133;
                if (ki == 2 && N != 45) continue; /* one shape past a slice */
                mat m = make_mat(type, N, K, 500 + ti * 100 + ki * 10 + ni);
                float *X = make_x(nx, K, ldx, 31 + ki);
                run ua = {&ka, &m, X, ldx, nx}, us = {&ks, &m, X, ldx, nx},
                    uv = {&kv, &m, X, ldx, nx};
                void *aa = prep_act(&ua), *as = prep_act(&us), *av = prep_act(&uv);
                static const int64_t few[][4] = {{0}, {3, 16, 17, 40}, {17, 40, 130, 0}};
                for (int64_t nr = 1; nr <= 130; nr++) {
                    bool listed = ki == 0 && nr <= 40;
                    for (int i = 0; ki > 0 && i < 4; i++) listed |= few[ki][i] == nr;
                    if (!listed) continue;
                    const int acc = (int)(nr % 2), gather = nr % 3 != 0;
                    const int64_t ldy = N + 3, n0 = nr % 4 == 1 ? N / 3 : 0,
                                  n1 = nr % 5 == 2 ? N - N / 4 : N;
                    int32_t *rows = malloc(sizeof(int32_t) * nr);
                    t_rng rg = {nr + 7};
                    for (int64_t r = 0; r < nr; r++) rows[r] = (int32_t)(t_next(&rg) % nx);
                    float *Y[3];
                    for (int i = 0; i < 3; i++) {
                        Y[i] = aalloc(sizeof(float) * nr * ldy);
                        for (int64_t j = 0; j < nr * ldy; j++) Y[i][j] = (float)(j % 13) - 6;
                    }
                    do_gemm(&ua, aa, n0, n1, gather ? rows : NULL, nr, Y[0], ldy, acc);
                    do_gemm(&us, as, n0, n1, gather ? rows : NULL, nr, Y[1], ldy, acc);
                    do_gemm(&uv, av, n0, n1, gather ? rows : NULL, nr, Y[2], ldy, acc);
                    for (int i = 1; i < 3; i++)
                        for (int64_t j = 0; j < nr * ldy; j++)
                            if (memcmp(&Y[0][j], &Y[i][j], 4))
                                fail_msg("amx %s K=%ld N=%ld rows=%ld [%ld, %ld) acc=%d gather=%d: "
                                         "Y[%ld][%ld] = %.9g, %s %.9g",
                                         es_qtype_name(type), (long)K, (long)N, (long)nr,
                                         (long)n0, (long)n1, acc, gather, (long)(j / ldy),
                                         (long)(j % ldy), Y[0][j], i == 1 ? "scalar" : "avx512",
                                         Y[i][j]);
                    cases++;
                    for (int i = 0; i < 3; i++) free(Y[i]);
                    free(rows);
                }
                free(aa);
                free(as);
                free(av);
                free(X);
                free_mat(&m);
            }
    }
    print_message("amx: %ld products bit-identical to scalar and avx512\n", cases);
}

/* The amx table on enough token rows to fill its packed-rows buffer: a row group's act slice
 * takes half of L2 (kern_drive.c), so K = 2048 and about twice a group's rows run two full
 * groups and a part; the scratch is exactly scratch_bytes (aalloc), so under AddressSanitizer a
 * packed-rows buffer sized too small fails here, as does a group's rows packed over the last
 * one's. Outputs bit-identical to scalar. */
static void test_amx_full_row_groups(void **state)
{
    (void)state;
    es_kern ka, ks;
    get_amx(&ka);
    assert_true(es_kern_get("scalar", &ks));
    const int64_t K = 2048, N = 17, ldx = K + 3, nx = 133;
    const int64_t group = (int64_t)es_cpu_get()->l2_bytes / 2 / (K / 256 * 416);
    const int64_t nr = 2 * group + 21;
    static const uint32_t types[] = {ES_QTYPE_Q4_0, ES_QTYPE_Q4_K};
    for (size_t ti = 0; ti < ES_LEN(types); ti++) {
        mat m = make_mat(types[ti], N, K, 900 + ti);
        float *X = make_x(nx, K, ldx, 77);
        run ua = {&ka, &m, X, ldx, nx}, us = {&ks, &m, X, ldx, nx};
        void *aa = prep_act(&ua), *as = prep_act(&us);
        int32_t *rows = malloc(sizeof(int32_t) * nr);
        t_rng rg = {99};
        for (int64_t r = 0; r < nr; r++) rows[r] = (int32_t)(t_next(&rg) % nx);
        float *Ya = aalloc(sizeof(float) * nr * N), *Ys = aalloc(sizeof(float) * nr * N);
        do_gemm(&ua, aa, 0, N, rows, nr, Ya, N, 0);
        do_gemm(&us, as, 0, N, rows, nr, Ys, N, 0);
        for (int64_t j = 0; j < nr * N; j++)
            if (memcmp(&Ya[j], &Ys[j], 4))
                fail_msg("amx %s K=%ld rows=%ld: Y[%ld][%ld] = %.9g, scalar %.9g",
                         es_qtype_name(types[ti]), (long)K, (long)nr, (long)(j / N),
                         (long)(j % N), Ya[j], Ys[j]);
        free(Ya);
        free(Ys);
        free(rows);
        free(aa);
        free(as);
        free(X);
        free_mat(&m);
    }
}

static void test_avx2_vs_scalar(void **state)
{
    (void)state;
    check_isa("avx2");
}

static void test_avxvnni_vs_scalar(void **state)
{
    (void)state;
    check_isa("avxvnni");
}

static void test_avx512_vs_scalar(void **state)
{
    (void)state;
    check_isa("avx512");
}

/* A few token rows (1-7: one register block and the first call past it; avx512 runs calls of at
 * most 6 rows on Q4_K rows and on the tile layout with direct kernels, es_kern_tiling.direct)
 * against the scalar table, bit for bit, over whole and part tiles: N = 81 (two whole 32-row
 * tiles and a short one), [0, N) and [5, 70), accumulating or not, and a K of two slices of
 * avx512's K-quant tiles (32 rows x 1,280 bytes per block in a quarter of L2) beside 2,048. */
static void test_few_rows_vs_scalar(void **state)
{
    (void)state;
    es_kern ks;
    assert_true(es_kern_get("scalar", &ks));
    static const uint32_t types[] = {ES_QTYPE_Q4_K, ES_QTYPE_Q4_0, ES_QTYPE_Q8_0};
    const int64_t k_two = ((int64_t)es_cpu_get()->l2_bytes / 4 / (8 * 1280) + 1) * 256;
    const int64_t Ks[] = {2048, k_two}, N = 81;
    long cases = 0;
    for (size_t ii = 0; ii < ES_KERN_N_ISA; ii++) {
        es_kern kv;
        if (!strcmp(es_kern_isa_names[ii], "scalar") || !es_kern_get(es_kern_isa_names[ii], &kv))
            continue;
        for (size_t ti = 0; ti < ES_LEN(types); ti++)
            for (size_t ki = 0; ki < ES_LEN(Ks); ki++) {
                const int64_t K = Ks[ki];
                mat m = make_mat(types[ti], N, K, 500 + ti * 10 + ki);
                for (int64_t nr = 1; nr <= 7; nr++) {
                    const int64_t nx = nr + 2, ldx = K;
                    float *X = make_x(nx, K, ldx, 90 + nr);
                    run us = {&ks, &m, X, ldx, nx}, uv = {&kv, &m, X, ldx, nx};
                    void *as = prep_act(&us), *av = prep_act(&uv);
                    int32_t rows[7];
                    for (int64_t r = 0; r < nr; r++) rows[r] = (int32_t)((3 * r + 2) % nx);
                    float *Ys = aalloc(sizeof(float) * nr * N), *Yv = aalloc(sizeof(float) * nr * N);
                    for (int q = 0; q < 2; q++) {
                        const int64_t n0 = q ? 5 : 0, n1 = q ? 70 : N;
                        for (int64_t i = 0; i < nr * N; i++) Ys[i] = Yv[i] = (float)(i % 11) - 5;
                        do_gemm(&us, as, n0, n1, rows, nr, Ys, N, q);
                        do_gemm(&uv, av, n0, n1, rows, nr, Yv, N, q);
                        if (memcmp(Ys, Yv, sizeof(float) * (size_t)(nr * N)) != 0)
                            fail_msg("%s %s K=%ld rows=%ld [%ld, %ld) acc=%d: not the scalar "
                                     "table's bits", es_kern_isa_names[ii],
                                     es_qtype_name(types[ti]), (long)K, (long)nr, (long)n0,
                                     (long)n1, q);
                        cases++;
                    }
                    free(Ys);
                    free(Yv);
                    free(as);
                    free(av);
                    free(X);
                }
                free_mat(&m);
            }
    }
    print_message("%ld calls of 1-7 rows bit-identical to scalar (K 2048 and %ld)\n", cases,
                  (long)k_two);
}

static void test_asimd_vs_scalar(void **state)
{
    (void)state;
    check_isa("asimd");
}

static void test_neon_vs_scalar(void **state)
{
    (void)state;
    check_isa("neon");
}

static void test_i8mm_vs_scalar(void **state)
{
    (void)state;
    check_isa("i8mm");
}

/* The best table this CPU has (the one es_kern_init(NULL) picks: never an emulated one). */
static const char *best_isa(void)
{
    for (int i = ES_KERN_N_ISA - 1; i > 0; i--)
        if (es_kern_isa_available(es_kern_isa_names[i]) &&
            !(strcmp(es_kern_isa_names[i], "amx") == 0 && es_kern_amx_emulated()) &&
            !(strcmp(es_kern_isa_names[i], "avx512") == 0 && es_kern_avx512_emulated()))
            return es_kern_isa_names[i];
    return "scalar";
}

/* The integer act preparation of every ISA is bit-identical to scalar in q, d and ds. */
static void test_act_identical(void **state)
{
    (void)state;
    es_kern ks, kv;
    assert_true(es_kern_get("scalar", &ks));
    const int64_t K = 2048, nr = 11;
    float *X = make_x(nr, K, K, 9);
    static const uint32_t types[] = {ES_QTYPE_Q4_0, ES_QTYPE_Q8_0, ES_QTYPE_Q4_K, ES_QTYPE_Q5_K,
                                     ES_QTYPE_Q6_K};
    int ran = 0;
    for (size_t i = 1; i < ES_KERN_N_ISA; i++) {
        if (!es_kern_get(es_kern_isa_names[i], &kv)) continue;
        ran++;
        for (size_t ti = 0; ti < ES_LEN(types); ti++) {
            const es_kern_ops *os = &ks.op[types[ti]], *ov = &kv.op[types[ti]];
            assert_int_equal(os->act_row_bytes(K), ov->act_row_bytes(K));
            const size_t rb = os->act_row_bytes(K);
            uint8_t *a = aalloc(rb * nr), *b = aalloc(rb * nr);
            os->act_prepare(X, K, nr, K, a);
            ov->act_prepare(X, K, nr, K, b);
            for (int64_t r = 0; r < nr; r++) /* q, d, ds; c and c2 are ISA-specific */
                if (memcmp(a + r * rb, b + r * rb, (size_t)es_act_q8_off_c(K)))
                    fail_msg("%s %s row %ld: act differs from scalar", es_kern_isa_names[i],
                             es_qtype_name(types[ti]), (long)r);
            free(a);
            free(b);
        }
    }
    free(X);
    if (!ran) skip();
}

/* ---- determinism: splits of [0,N), row order and subsets are bit-identical --------------------
 */

static void check_determinism(const char *isa)
{
    es_kern k;
    if (!es_kern_get(isa, &k)) {
        print_message("%s: not available on this CPU, skipped\n", isa);
        skip();
    }
    for (size_t ti = 0; ti < ES_LEN(all_types); ti++) {
        const uint32_t type = all_types[ti];
        const int64_t K = is_k_type(type) ? 2048 : is_float_type(type) ? 517 : 2080;
        const int64_t N = 77, nx = 37;
        mat m = make_mat(type, N, K, 4242 + ti);
        float *X = make_x(nx, K, K, 99);
        run u = {&k, &m, X, K, nx};
        void *act = prep_act(&u);
        for (int acc = 0; acc < 2; acc++) {
            /* reference: all columns, rows in natural order */
            float *Y0 = aalloc(sizeof(float) * nx * N);
            for (int64_t i = 0; i < nx * N; i++)
                Y0[i] = (float)(i % 11) * 0.25f;
            float *init = malloc(sizeof(float) * nx * N);
            memcpy(init, Y0, sizeof(float) * nx * N);
            do_gemm(&u, act, 0, N, NULL, nx, Y0, N, acc);
            t_rng rg = {acc + 3 + ti};
            for (int trial = 0; trial < 4; trial++) {
                /* a shuffled gather list of a random subset size (with one repeat) */
                const int64_t nr = 1 + (int64_t)(t_next(&rg) % nx);
                int32_t *perm = malloc(sizeof(int32_t) * nx);
                for (int64_t i = 0; i < nx; i++)
                    perm[i] = (int32_t)i;
                for (int64_t i = nx - 1; i > 0; i--) {
                    int64_t j = (int64_t)(t_next(&rg) % (uint64_t)(i + 1));
                    int32_t tmp = perm[i];
                    perm[i] = perm[j];
                    perm[j] = tmp;
                }
                if (nr > 1) perm[nr - 1] = perm[0];
                float *Y1 = aalloc(sizeof(float) * nr * N);
                for (int64_t r = 0; r < nr; r++)
                    memcpy(Y1 + r * N, init + perm[r] * N, sizeof(float) * N);
                /* three column ranges at awkward split points */
                int64_t s1 = 1 + (int64_t)(t_next(&rg) % (N - 2));
                int64_t s2 = s1 + 1 + (int64_t)(t_next(&rg) % (N - s1 - 1));
                do_gemm(&u, act, s2, N, perm, nr, Y1, N, acc);
                do_gemm(&u, act, 0, s1, perm, nr, Y1, N, acc);
                do_gemm(&u, act, s1, s2, perm, nr, Y1, N, acc);
                for (int64_t r = 0; r < nr; r++)
                    if (memcmp(Y1 + r * N, Y0 + perm[r] * N, sizeof(float) * N) != 0)
                        fail_msg("%s %s acc=%d: split %ld/%ld rows %ld differs at row %ld", isa,
                                 es_qtype_name(type), acc, (long)s1, (long)s2, (long)nr, (long)r);
                free(Y1);
                free(perm);
            }
            free(init);
            free(Y0);
        }
        free(act);
        free(X);
        free_mat(&m);
    }
}

static void test_determinism_scalar(void **state)
{
    (void)state;
    check_determinism("scalar");
}
static void test_determinism_avx2(void **state)
{
    (void)state;
    check_determinism("avx2");
}
static void test_determinism_avxvnni(void **state)
{
    (void)state;
    check_determinism("avxvnni");
}
static void test_determinism_avx512(void **state)
{
    (void)state;
    check_determinism("avx512");
}
static void test_determinism_asimd(void **state)
{
    (void)state;
    check_determinism("asimd");
}
static void test_determinism_neon(void **state)
{
    (void)state;
    check_determinism("neon");
}
static void test_determinism_i8mm(void **state)
{
    (void)state;
    check_determinism("i8mm");
}
static void test_determinism_amx(void **state)
{
    (void)state;
    check_determinism("amx");
}

/* ---- threads: the pool splits [0, N) at odd points; results are bit-identical --------------- */

typedef struct split_job {
    const es_kern_ops *o;
    const mat *m;
    const void *act;
    int64_t nr;
    float *Y;
    void *scratch[4];
} split_job;

static void split_fn(void *arg, int ith, int nth)
{
    split_job *j = arg;
    const int64_t N = j->m->N;
    const int64_t n0 = N * ith / nth + (ith ? 3 : 0),
                  n1 = ith == nth - 1 ? N : N * (ith + 1) / nth + 3;
    j->o->gemm(j->m->w, j->m->K, n0, n1, j->act, NULL, j->nr, j->Y, N, 0, j->scratch[ith]);
}

/* The pool's threads split [0, N) of one product: bit-identical to one thread. With the amx
 * table each worker configures its own tiles (a worker that does not faults on AMX, and aborts
 * the emulation) and releases them when its pool is destroyed. */
static void check_threads(const es_kern *kp)
{
    const es_kern k = *kp;
    for (size_t ti = 0; ti < ES_LEN(all_types); ti++) {
        const uint32_t type = all_types[ti];
        const int64_t K = is_k_type(type) ? 512 : 160, N = 101, nr = 23;
        mat m = make_mat(type, N, K, 77 + ti);
        float *X = make_x(nr, K, K, 8);
        const es_kern_ops *o = &k.op[type];
        run u = {&k, &m, X, K, nr};
        void *act = prep_act(&u);
        float *Y0 = aalloc(sizeof(float) * nr * N);
        do_gemm(&u, act, 0, N, NULL, nr, Y0, N, 0);
        for (int nt = 1; nt <= 4; nt++) {
            es_pool *p = NULL;
            assert_int_equal(es_pool_create(nt, &p), ES_OK);
            split_job j = {o, &m, act, nr, aalloc(sizeof(float) * nr * N), {0}};
            for (int t = 0; t < nt; t++)
                j.scratch[t] = aalloc(o->scratch_bytes(K));
            es_pool_run(p, split_fn, &j);
            assert_memory_equal(j.Y, Y0, sizeof(float) * nr * N);
            for (int t = 0; t < nt; t++)
                free(j.scratch[t]);
            free(j.Y);
            es_pool_destroy(p);
        }
        free(Y0);
        free(act);
        free(X);
        free_mat(&m);
    }
}

static void test_threads(void **state)
{
    (void)state;
    es_kern k;
    assert_true(es_kern_get(best_isa(), &k));
    check_threads(&k);
}

static void test_threads_amx(void **state)
{
    (void)state;
    es_kern k;
    get_amx(&k);
    check_threads(&k);
}

/* ---- no reads past the end of W or the act buffer ------------------------------------------ */

/* Copies n bytes so they end exactly at a page boundary followed by an inaccessible page: a
 * SIMD load or gather past the end then faults (ASan does not see gathers). */
typedef struct guarded {
    uint8_t *map;
    size_t len;
    void *p;
} guarded;

static guarded guard_copy(const void *src, size_t n)
{
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    guarded g;
    g.len = (n + pg - 1) / pg * pg + pg;
    g.map = mmap(NULL, g.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(g.map != MAP_FAILED);
    assert_int_equal(mprotect(g.map + g.len - pg, pg, PROT_NONE), 0);
    g.p = g.map + g.len - pg - n;
    memcpy(g.p, src, n);
    return g;
}

static void test_guard_pages(void **state)
{
    (void)state;
    for (size_t ii = 0; ii < ES_KERN_N_ISA; ii++) {
        es_kern k;
        if (!es_kern_get(es_kern_isa_names[ii], &k)) continue;
        for (size_t ti = 0; ti < ES_LEN(all_types); ti++)
            for (int64_t nr = 9; nr <= 17; nr += 8) { /* 17: amx on its tiles */
                const uint32_t type = all_types[ti];
                const int64_t K = is_k_type(type) ? 512 : is_float_type(type) ? 37 : 96, N = 35;
                mat m = make_mat(type, N, K, 31 + ti);
                float *X = make_x(nr, K, K, 3);
                const es_kern_ops *o = &k.op[type];
                const size_t ab = o->act_row_bytes(K) * nr;
                void *act = aalloc(ab);
                o->act_prepare(X, K, nr, K, act);
                /* the act buffer must stay 64-byte aligned: pad it to a multiple of 64 (it is) */
                assert_int_equal(ab % 64, 0);
                guarded gw = guard_copy(m.w, m.row_bytes * N), ga = guard_copy(act, ab);
                float *Y = aalloc(sizeof(float) * nr * N), *Y2 = aalloc(sizeof(float) * nr * N);
                void *scratch = aalloc(o->scratch_bytes(K));
                o->gemm(gw.p, K, 0, N, ga.p, NULL, nr, Y, N, 0, scratch);
                o->gemm(m.w, K, 0, N, act, NULL, nr, Y2, N, 0, scratch);
                assert_memory_equal(Y, Y2, sizeof(float) * nr * N);
                munmap(gw.map, gw.len);
                munmap(ga.map, ga.len);
                free(scratch);
                free(Y);
                free(Y2);
                free(act);
                free(X);
                free_mat(&m);
            }
    }
}

/* ---- dispatch ----------------------------------------------------------------------------------
 */

static void test_init_forcing(void **state)
{
    (void)state;
    const char *best = best_isa();
    assert_string_equal(es_kern_init("scalar"), "scalar");
    assert_string_equal(es_kern_isa_name(), "scalar");
    assert_string_equal(es_kern_init("bogus"), best); /* warning, then the best */
    /* the tables of one architecture: a table the CPU lacks falls back to the best one below it,
     * never above; the other architecture's tables are never available, and asking for one
     * gives the best table (a warning, as for an unknown name) */
    if (!es_kern_isa_available("asimd")) { /* not AArch64 */
        assert_false(es_kern_isa_available("neon"));
        assert_false(es_kern_isa_available("i8mm"));
        assert_string_equal(es_kern_init("avx2"),
                            es_kern_isa_available("avx2") ? "avx2" : "scalar");
        assert_string_equal(es_kern_init("avxvnni"), es_kern_isa_available("avxvnni") ? "avxvnni"
                                                     : es_kern_isa_available("avx2")  ? "avx2"
                                                                                      : "scalar");
        assert_string_equal(es_kern_init("avx512"), es_kern_isa_available("avx512") ? "avx512"
                                                    : es_kern_isa_available("avxvnni")
                                                        ? "avxvnni"
                                                    : es_kern_isa_available("avx2") ? "avx2"
                                                                                    : "scalar");
        /* amx by name: the real or the emulated table where either runs, else the best below */
        assert_string_equal(es_kern_init("amx"), es_kern_isa_available("amx") ? "amx"
                                                 : es_kern_isa_available("avx512") ? "avx512"
                                                                                   : best);
        for (size_t i = 5; i < ES_KERN_N_ISA; i++) /* asimd, neon, i8mm */
            assert_string_equal(es_kern_init(es_kern_isa_names[i]), best);
    } else { /* AArch64 */
        for (size_t i = 1; i <= 4; i++) { /* avx2, avxvnni, avx512, amx */
            assert_false(es_kern_isa_available(es_kern_isa_names[i]));
            assert_string_equal(es_kern_init(es_kern_isa_names[i]), best);
        }
        assert_string_equal(es_kern_init("asimd"), "asimd");
        assert_string_equal(es_kern_init("neon"),
                            es_kern_isa_available("neon") ? "neon" : "asimd");
        assert_string_equal(es_kern_init("i8mm"), best);
    }
    setenv("ESTREAM_ISA", "scalar", 1);
    assert_string_equal(es_kern_init(NULL), "scalar");
    setenv("ESTREAM_ISA", "", 1);
    assert_string_equal(es_kern_init(NULL), best);
    unsetenv("ESTREAM_ISA");
    assert_string_equal(es_kern_init(NULL), best);
    es_kern k;
    assert_false(es_kern_get("avx1024", &k));
    assert_true(es_kern_isa_available("scalar"));
    assert_false(es_kern_isa_available(NULL));
    for (size_t i = 0; i < ES_LEN(all_types); i++)
        assert_true(es_kern_supports(es_kern_default(), all_types[i]));
    assert_false(es_kern_supports(es_kern_default(), 16 /* iq2_xxs */));
    assert_false(es_kern_supports(es_kern_default(), 9999));
}

/* The engine calls go through the table they are given (here a copy of the active one). */
static void test_wrappers(void **state)
{
    (void)state;
    es_kern_init(NULL);
    es_kern ka;
    assert_true(es_kern_get(es_kern_isa_name(), &ka));
    const uint32_t type = ES_QTYPE_Q4_0;
    const int64_t K = 256, N = 40, nr = 5;
    mat m = make_mat(type, N, K, 1);
    float *X = make_x(nr, K, K, 2);
    assert_int_equal(es_act_bytes(&ka, type, nr, K), nr * es_act_row_bytes(&ka, type, K));
    void *act = aalloc(es_act_bytes(&ka, type, nr, K));
    es_act_prepare(&ka, type, X, K, nr, K, act);
    void *scratch = aalloc(es_gemm_scratch_bytes(&ka, type, K));
    float *Y = aalloc(sizeof(float) * nr * N), *Y2 = aalloc(sizeof(float) * nr * N);
    es_gemm(&ka, type, m.w, K, 0, N, act, NULL, nr, Y, N, 0, scratch);
    run u = {&ka, &m, X, K, nr};
    do_gemm(&u, act, 0, N, NULL, nr, Y2, N, 0);
    assert_memory_equal(Y, Y2, sizeof(float) * nr * N);
    es_gemm(&ka, type, m.w, K, 3, 3, act, NULL, nr, Y, N, 0, scratch); /* empty range: no-op */
    free(Y);
    free(Y2);
    free(scratch);
    free(act);
    free(X);
    free_mat(&m);
}

static void test_cpu(void **state)
{
    (void)state;
    const es_cpu_info *c = es_cpu_get();
    char buf[256];
    print_message("cpu: %s (%s), L1d %zu KiB, L2 %zu KiB, L3 %zu KiB%s; %s\n", c->brand, c->vendor,
                  c->l1d_bytes >> 10, c->l2_bytes >> 10, c->l3_bytes >> 10,
                  c->cache_from_cpuid ? "" : " (defaults)", es_cpu_flags_str(c->flags, buf, 256));
    assert_true(c->l1d_bytes >= 16 << 10 && c->l2_bytes >= c->l1d_bytes);
    assert_true(es_cpu_has(0));
    if (es_cpu_has(ES_CPU_AVX512_VNNI)) assert_true(es_cpu_has(ES_CPU_AVX512F));
    /* an Arm CPU reporting dotprod or i8mm must report ASIMD; x86 reports none of them */
    if (es_cpu_has(ES_CPU_DOTPROD) || es_cpu_has(ES_CPU_I8MM)) assert_true(es_cpu_has(ES_CPU_NEON));
    if (es_cpu_has(ES_CPU_AVX2)) assert_false(es_cpu_has(ES_CPU_NEON));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu),
        cmocka_unit_test(test_act_quant),
        cmocka_unit_test(test_iq4_and_act_round),
        cmocka_unit_test(test_mxfp4_scales),
        cmocka_unit_test(test_q8_1_sum_range),
        cmocka_unit_test(test_scalar_vs_float),
        cmocka_unit_test(test_act_identical),
        cmocka_unit_test(test_avx2_vs_scalar),
        cmocka_unit_test(test_avxvnni_vs_scalar),
        cmocka_unit_test(test_avx512_vs_scalar),
        cmocka_unit_test(test_few_rows_vs_scalar),
        cmocka_unit_test(test_asimd_vs_scalar),
        cmocka_unit_test(test_neon_vs_scalar),
        cmocka_unit_test(test_i8mm_vs_scalar),
        cmocka_unit_test(test_amx_vs_scalar),
        cmocka_unit_test(test_amx_full_row_groups),
        cmocka_unit_test(test_determinism_scalar),
        cmocka_unit_test(test_determinism_avx2),
        cmocka_unit_test(test_determinism_avxvnni),
        cmocka_unit_test(test_determinism_avx512),
        cmocka_unit_test(test_determinism_asimd),
        cmocka_unit_test(test_determinism_neon),
        cmocka_unit_test(test_determinism_i8mm),
        cmocka_unit_test(test_determinism_amx),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_threads_amx),
        cmocka_unit_test(test_guard_pages),
        cmocka_unit_test(test_init_forcing),
        cmocka_unit_test(test_wrappers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
