/*
 * The expert plan (fused expert operator): numbers against an independent double-precision
 * computation, bit-identical results across thread counts, route orders, placements (with
 * unused slots), capacities and invocations split by group of experts, at sizes where every
 * phase splits its work; errors for bad routes; no allocation inside es_plan_invoke().
 *
 * Allocation counting: this program is linked with -Wl,--wrap for malloc, calloc, realloc,
 * posix_memalign and mmap (Makefile), so every call the library makes passes through the
 * counters below.
 */
#include "t.h"

#include "moe/plan.h"
#include "quant/kern.h"
#include "quant/qtypes.h"
#include "quant/tiles.h"

#include <math.h>
#include <stdatomic.h>
#include <sys/mman.h>

static atomic_long n_allocs;
void *__real_malloc(size_t n);
void *__real_calloc(size_t a, size_t b);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void *__real_mmap(void *a, size_t n, int prot, int flags, int fd, off_t off);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t a, size_t b);
void *__wrap_realloc(void *p, size_t n);
int __wrap_posix_memalign(void **p, size_t a, size_t n);
void *__wrap_mmap(void *a, size_t n, int prot, int flags, int fd, off_t off);
void *__wrap_malloc(size_t n) { n_allocs++; return __real_malloc(n); }
void *__wrap_calloc(size_t a, size_t b) { n_allocs++; return __real_calloc(a, b); }
void *__wrap_realloc(void *p, size_t n) { n_allocs++; return __real_realloc(p, n); }
int __wrap_posix_memalign(void **p, size_t a, size_t n) { n_allocs++; return __real_posix_memalign(p, a, n); }
void *__wrap_mmap(void *a, size_t n, int prot, int flags, int fd, off_t off)
{
    n_allocs++;
    return __real_mmap(a, n, prot, flags, fd, off);
}

/* Sizes where every phase of the operator splits (plan.c's chunk_cols: items of 32 to 128
 * columns by the thread count, here 128 at 1 thread, 128 for FF and 32 for D at 2, 96 and 128
 * at 3, wider for the amx table with 1 or 2 threads; 512-row blocks): D and FF exceed the chunks
 * with a tail, expert BUSY takes more than 512 of the T tokens, expert IDLE takes none, and
 * P = E + 3 slots leave some unused. */
enum { D = 320, FF = 288, E = 6, T = 700, TOPK = 2, P = E + 3, BUSY = 2, IDLE = 5, NR = T * TOPK };

typedef struct fixture {
    uint32_t type;
    uint8_t *gate, *up, *down; /* [E] experts, GGUF row layout */
    size_t g_bytes, d_bytes;   /* bytes of one expert's gate (= up) and down */
    float x[T][D];
    es_route routes[NR];
} fixture;

static void make_fixture(fixture *f, uint32_t type, uint64_t seed)
{
    t_rng r = {seed};
    f->type = type;
    f->g_bytes = FF * es_qtype_row_bytes(type, D);
    f->d_bytes = D * es_qtype_row_bytes(type, FF);
    f->gate = malloc(E * f->g_bytes);
    f->up = malloc(E * f->g_bytes);
    f->down = malloc(E * f->d_bytes);
    float row[D > FF ? D : FF];
    for (int e = 0; e < E; e++) {
        for (int j = 0; j < FF; j++) {
            for (int k = 0; k < D; k++) row[k] = 0.2f * t_uniform(&r);
            es_quantize_row(type, row, f->gate + e * f->g_bytes + j * es_qtype_row_bytes(type, D), D);
            for (int k = 0; k < D; k++) row[k] = 0.2f * t_uniform(&r);
            es_quantize_row(type, row, f->up + e * f->g_bytes + j * es_qtype_row_bytes(type, D), D);
        }
        for (int j = 0; j < D; j++) {
            for (int k = 0; k < FF; k++) row[k] = 0.2f * t_uniform(&r);
            es_quantize_row(type, row, f->down + e * f->d_bytes + j * es_qtype_row_bytes(type, FF), FF);
        }
    }
    for (int t = 0; t < T; t++)
        for (int k = 0; k < D; k++) f->x[t][k] = 2.0f * t_uniform(&r) + (k == 3 ? 8.0f : 0.0f);
    /* 85 % of tokens go to BUSY first; nobody goes to IDLE */
    for (int t = 0; t < T; t++) {
        int e0 = t_next(&r) % 100 < 85 ? BUSY : (int)(t_next(&r) % (E - 1));
        int e1 = (int)(t_next(&r) % (E - 1));
        if (e0 == IDLE) e0 = 0;
        if (e1 == e0) e1 = (e1 + 1) % (E - 1);
        f->routes[t * TOPK] = (es_route){t, e0, 0.25f + 0.5f * (t_uniform(&r) + 1.0f) / 2};
        f->routes[t * TOPK + 1] = (es_route){t, e1, 0.1f};
    }
}

static void free_fixture(fixture *f)
{
    free(f->gate);
    free(f->up);
    free(f->down);
}

/* Independent: dequantize, double precision, loop over routes. */
static void expected(const fixture *f, double y[T][D])
{
    memset(y, 0, sizeof(double) * T * D);
    float *wg = malloc(sizeof(float) * E * FF * D), *wu = malloc(sizeof(float) * E * FF * D);
    float *wd = malloc(sizeof(float) * E * D * FF);
    for (int e = 0; e < E; e++) {
        es_dequantize_row(f->type, f->gate + e * f->g_bytes, wg + (size_t)e * FF * D, FF * D);
        es_dequantize_row(f->type, f->up + e * f->g_bytes, wu + (size_t)e * FF * D, FF * D);
        es_dequantize_row(f->type, f->down + e * f->d_bytes, wd + (size_t)e * D * FF, D * FF);
    }
    for (int i = 0; i < NR; i++) {
        const es_route *r = &f->routes[i];
        const float *g_w = wg + (size_t)r->expert * FF * D, *u_w = wu + (size_t)r->expert * FF * D;
        const float *d_w = wd + (size_t)r->expert * D * FF;
        double h[FF];
        for (int j = 0; j < FF; j++) {
            double g = 0, u = 0;
            for (int k = 0; k < D; k++) {
                g += (double)g_w[j * D + k] * f->x[r->token][k];
                u += (double)u_w[j * D + k] * f->x[r->token][k];
            }
            h[j] = g / (1.0 + exp(-g)) * u;
        }
        for (int n = 0; n < D; n++) {
            double s = 0;
            for (int j = 0; j < FF; j++) s += (double)d_w[n * FF + j] * h[j];
            y[r->token][n] += r->weight * s;
        }
    }
    free(wg);
    free(wu);
    free(wd);
}

/* The kernel table the plans below use (NULL: es_kern_default()). */
static const es_kern *plan_kern;
/* es_plan_waves() of the last run_plan_l's plan */
static long last_waves;
/* Y before the invocations: y_init * (i % 7 - 3) at element i (0: zeros) */
static float y_init;

/* Runs the plan with n_threads and capacity cap over routes[0..NR) with placement phi (expert ->
 * slot among P) and returns Y [T][D]. group 0: invocations take the routes in their order, cap at
 * a time, every slot bound. group G > 0: as the streaming provider will, one group of G experts
 * in increasing id at a time: its routes (split by cap), and only its slots bound (the others
 * NULL, so a read of an expert outside the group crashes). */
static float *run_plan_l(const fixture *f, int n_threads, int cap, int group,
                         const es_route *routes, int n_routes, const int32_t *phi,
                         long *allocs_in_invoke, int tiled)
{
    es_pool *pool;
    assert_int_equal(es_pool_create(n_threads, &pool), ES_OK);
    es_expert_shape sh = {D, FF, f->type, f->type, f->type, E, {0}};
    if (tiled > 0) { /* the fixture's matrices converted to tiles (quant/tiles.h) */
        fixture *ft = malloc(sizeof(*ft));
        *ft = *f;
        ft->gate = malloc(E * f->g_bytes);
        ft->up = malloc(E * f->g_bytes);
        ft->down = malloc(E * f->d_bytes);
        for (int e = 0; e < E; e++) {
            es_tiles_from_rows(f->type, f->gate + e * f->g_bytes, D, FF, ft->gate + e * f->g_bytes);
            es_tiles_from_rows(f->type, f->up + e * f->g_bytes, D, FF, ft->up + e * f->g_bytes);
            es_tiles_from_rows(f->type, f->down + e * f->d_bytes, FF, D, ft->down + e * f->d_bytes);
        }
        float *y = run_plan_l(ft, n_threads, cap, group, routes, n_routes, phi, allocs_in_invoke, -1);
        free_fixture(ft);
        free(ft);
        es_pool_destroy(pool);
        return y;
    }
    if (tiled < 0) sh.layout[0] = sh.layout[1] = sh.layout[2] = ES_LAYOUT_TILES;
    es_plan *p;
    assert_int_equal(
        es_plan_create(&sh, cap, T, P, pool, plan_kern ? plan_kern : es_kern_default(), &p),
        ES_OK);
    es_expert_slot all[P] = {{0}};
    for (int e = 0; e < E; e++) /* slot phi[e] holds expert e */
        all[phi[e]] = (es_expert_slot){f->gate + e * f->g_bytes, f->up + e * f->g_bytes,
                                       f->down + e * f->d_bytes};
    float *y = calloc(T * D, sizeof(float));
    for (int i = 0; i < T * D; i++) y[i] = y_init * (float)(i % 7 - 3);
    es_route *sel = malloc(sizeof(es_route) * NR);
    es_plan_set_input(p, &f->x[0][0], D, T);
    long before = n_allocs;
    for (int e0 = 0; e0 < E; e0 += group ? group : E) {
        const int e1 = group && e0 + group < E ? e0 + group : E;
        es_expert_slot bound[P] = {{0}};
        int n = 0;
        for (int i = 0; i < n_routes; i++)
            if (routes[i].expert >= e0 && routes[i].expert < e1) sel[n++] = routes[i];
        for (int e = e0; e < e1; e++) bound[phi[e]] = all[phi[e]];
        for (int r0 = 0; r0 < n; r0 += cap) {
            const int nr = n - r0 < cap ? n - r0 : cap;
            assert_int_equal(es_plan_invoke(p, sel + r0, nr, phi, group ? bound : all, y, D), ES_OK);
        }
    }
    if (allocs_in_invoke) *allocs_in_invoke = n_allocs - before;
    free(sel);
    last_waves = es_plan_waves(p);
    es_plan_destroy(p);
    es_pool_destroy(pool);
    return y;
}

static float *run_plan(const fixture *f, int n_threads, int cap, int group, const es_route *routes,
                       const int32_t *phi, long *allocs_in_invoke)
{
    return run_plan_l(f, n_threads, cap, group, routes, NR, phi, allocs_in_invoke, 0);
}

static const int32_t identity[E] = {0, 1, 2, 3, 4, 5};
static const int32_t permuted_phi[E] = {3, 5, 0, 1, 4, 2};

static void check_type(uint32_t type, double tol)
{
    fixture *f = malloc(sizeof(*f));
    make_fixture(f, type, 42 + type);
    int busy = 0;
    for (int i = 0; i < NR; i++) busy += f->routes[i].expert == BUSY;
    assert_true(busy > 512); /* the busy expert spans two row blocks */
    static double want[T][D];
    expected(f, want);
    long allocs = -1;
    float *y = run_plan(f, 2, NR, 0, f->routes, identity, &allocs);
    assert_int_equal(allocs, 0); /* invoke never allocates */
    double max_err = 0, max_val = 0;
    for (int t = 0; t < T; t++)
        for (int n = 0; n < D; n++) {
            if (!isfinite(y[t * D + n])) fail_msg("y[%d][%d] is not finite", t, n);
            max_err = fmax(max_err, fabs(y[t * D + n] - want[t][n]));
            max_val = fmax(max_val, fabs(want[t][n]));
        }
    print_message("%s: max |err| %.3g (max |y| %.3g)\n", es_qtype_name(type), max_err, max_val);
    assert_true(max_val > 0.1);
    assert_true(max_err <= tol * max_val);

    /* bit-identical across threads, capacities (split invocations), groups, orders and placements */
    es_route shuffled[NR];
    memcpy(shuffled, f->routes, sizeof(shuffled));
    t_rng r = {7};
    for (int i = NR - 1; i > 0; i--) {
        int j = (int)(t_next(&r) % (uint64_t)(i + 1));
        es_route tmp = shuffled[i];
        shuffled[i] = shuffled[j];
        shuffled[j] = tmp;
    }
    /* routes sorted by expert, so that splitting keeps each token's contributions in order */
    es_route by_expert[NR];
    int k = 0;
    for (int e = 0; e < E; e++)
        for (int i = 0; i < NR; i++)
            if (f->routes[i].expert == e) by_expert[k++] = f->routes[i];
    const int32_t permuted[E] = {3, 5, 0, 1, 4, 2};
    const int32_t sparse[E] = {7, 0, 4, 8, 2, 5}; /* slots 1, 3 and 6 unused */
    for (int threads = 1; threads <= 4; threads++) {
        float *runs[] = {
            run_plan(f, threads, NR, 0, shuffled, identity, NULL),
            run_plan(f, threads, NR, 0, f->routes, permuted, NULL),
            run_plan(f, threads, NR, 0, shuffled, sparse, NULL),
            run_plan(f, threads, 37, 0, by_expert, sparse, NULL),
            run_plan(f, threads, 600, 0, by_expert, identity, NULL),
            run_plan(f, threads, NR, 2, shuffled, sparse, NULL),
            run_plan(f, threads, 300, 4, f->routes, permuted, NULL),
        };
        for (size_t i = 0; i < T_LEN(runs); i++) {
            if (memcmp(runs[i], y, sizeof(float) * T * D) != 0)
                fail_msg("%s: %d threads, variant %zu differs", es_qtype_name(type), threads, i);
            free(runs[i]);
        }
    }
    /* the same experts in the tile layout: the same Y, bit for bit */
    if (es_tiles_type_ok(type))
        for (int threads = 1; threads <= 3; threads += 2) {
            long allocs_t = -1;
            float *yt = run_plan_l(f, threads, 300, 4, f->routes, NR, permuted, &allocs_t, 1);
            assert_int_equal(allocs_t, 0);
            if (memcmp(yt, y, sizeof(float) * T * D) != 0)
                fail_msg("%s: tiled experts, %d threads: Y differs from rows", es_qtype_name(type),
                         threads);
            free(yt);
        }
    free(y);
    free_fixture(f);
    free(f);
}

/* Waves of small blocks (plan.c: at most 128 rows each, 512 together, two barriers a wave)
 * give the bits of blocks run one at a time (three barriers each). Routes: both of tokens 0..99
 * and those of experts 0 and 1 of the others, by expert: experts 0 and 1 run alone (166 and 168
 * rows), experts 2 to 4 (93, 44 and 22; 5 has none) as one wave that holds both routes of many
 * tokens; Y starts non-zero, so the order of a token's contributions shows in its bits. Against
 * the same routes one per invocation (every block alone), and invocations of 40 routes. */
static void test_plan_waves(void **state)
{
    (void)state;
    fixture *f = malloc(sizeof(*f));
    make_fixture(f, ES_QTYPE_Q4_0, 3);
    es_route sub[NR];
    int n = 0;
    for (int e = 0; e < E; e++)
        for (int i = 0; i < NR; i++)
            if (f->routes[i].expert == e && (f->routes[i].token < 100 || e < 2))
                sub[n++] = f->routes[i];
    y_init = 0.37f;
    for (int threads = 1; threads <= 3; threads++) {
        float *alone = run_plan_l(f, threads, 1, 0, sub, n, permuted_phi, NULL, 0);
        assert_int_equal(last_waves, 0);
        float *mixed = run_plan_l(f, threads, NR, 0, sub, n, permuted_phi, NULL, 0);
        assert_int_equal(last_waves, 1);
        float *small = run_plan_l(f, threads, 40, 0, sub, n, identity, NULL, 0);
        assert_true(last_waves >= 2);
        if (memcmp(alone, mixed, sizeof(float) * T * D) != 0)
            fail_msg("%d threads: a wave after single blocks differs from blocks alone", threads);
        if (memcmp(alone, small, sizeof(float) * T * D) != 0)
            fail_msg("%d threads: invocations with waves differ from blocks alone", threads);
        free(alone);
        free(mixed);
        free(small);
    }
    y_init = 0;
    free_fixture(f);
    free(f);
}

static void test_plan_q4_0(void **s) { (void)s; check_type(ES_QTYPE_Q4_0, 0.02); }
static void test_plan_q8_0(void **s) { (void)s; check_type(ES_QTYPE_Q8_0, 0.02); }
static void test_plan_f32(void **s) { (void)s; check_type(ES_QTYPE_F32, 1e-4); }

/* The amx table's plan (emulated tiles on a CPU without AMX) against the scalar table's,
 * bit for bit: its calls pack their token rows, so the plan gives each thread an even share of
 * the columns (plan.c chunk_cols): 1 thread one chunk of all FF and D columns, 2 threads two
 * (FF 160 + 128, D 160 + 160), 3 threads the usual 128-column chunks with tails; rows and the
 * tile layout, blocks of up to 512 rows and of a few. */
static void test_plan_amx_wide_chunks(void **state)
{
    (void)state;
    static es_kern amx, scalar;
    if (!es_kern_get("amx", &amx)) {
        print_message("amx: %s, skipped\n", es_kern_isa_why_not("amx"));
        return;
    }
    assert_true(es_kern_get("scalar", &scalar));
    assert_true(amx.wide_calls);
    const uint32_t types[] = {ES_QTYPE_Q4_0, ES_QTYPE_Q8_0};
    for (size_t ti = 0; ti < T_LEN(types); ti++) {
        fixture *f = malloc(sizeof(*f));
        make_fixture(f, types[ti], 99 + types[ti]);
        plan_kern = &scalar;
        float *want = run_plan(f, 1, NR, 0, f->routes, identity, NULL);
        plan_kern = &amx;
        for (int threads = 1; threads <= 3; threads++)
            for (int tiled = 0; tiled <= 1; tiled++) {
                float *y = run_plan_l(f, threads, NR, 0, f->routes, NR, identity, NULL, tiled);
                for (int i = 0; i < T * D; i++)
                    if (memcmp(&y[i], &want[i], sizeof(float)) != 0)
                        fail_msg("%s, %d threads%s: amx y[%d][%d] = %.9g, scalar's %.9g",
                                 es_qtype_name(types[ti]), threads, tiled ? ", tiles" : "",
                                 i / D, i % D, y[i], want[i]);
                free(y);
            }
        plan_kern = NULL;
        print_message("%s: amx plan%s = scalar, 1-3 threads, rows and tiles\n",
                      es_qtype_name(types[ti]), es_kern_amx_emulated() ? " (emulated tiles)" : "");
        free(want);
        free_fixture(f);
        free(f);
    }
}

static void test_plan_rejects_bad_routes(void **state)
{
    (void)state;
    fixture *f = malloc(sizeof(*f));
    make_fixture(f, ES_QTYPE_Q8_0, 1);
    es_pool *pool;
    assert_int_equal(es_pool_create(2, &pool), ES_OK);
    es_expert_shape sh = {D, FF, f->type, f->type, f->type, E, {0}};
    es_plan *p;
    assert_int_equal(es_plan_create(&sh, 8, T, P, pool, es_kern_default(), &p), ES_OK);
    es_expert_slot slots[P] = {{0}};
    float *y = calloc(T * D, sizeof(float));
    es_plan_set_input(p, &f->x[0][0], D, T);
    es_route bad[2] = {{0, 1, 0.5f}, {T, 1, 0.5f}}; /* token T is out of range */
    assert_int_equal(es_plan_invoke(p, bad, 2, identity, slots, y, D), ES_E_INVAL);
    bad[1] = (es_route){1, E, 0.5f}; /* expert E is out of range */
    assert_int_equal(es_plan_invoke(p, bad, 2, identity, slots, y, D), ES_E_INVAL);
    assert_int_equal(es_plan_invoke(p, f->routes, 9, identity, slots, y, D), ES_E_INVAL); /* > C */
    const int32_t outside[E] = {0, 1, P, 2, 3, 4}; /* expert 2 placed past the last slot */
    bad[1] = (es_route){1, 2, 0.5f};
    assert_int_equal(es_plan_invoke(p, bad, 2, outside, slots, y, D), ES_E_INVAL);
    const int32_t clash[E] = {0, 0, 1, 2, 3, 4}; /* experts 0 and 1 in one slot */
    bad[1] = (es_route){1, 0, 0.5f};
    assert_int_equal(es_plan_invoke(p, bad, 2, clash, slots, y, D), ES_E_INVAL);
    for (int i = 0; i < T * D; i++) assert_true(y[i] == 0.0f); /* nothing ran */
    free(y);
    es_plan_destroy(p);
    es_pool_destroy(pool);
    free_fixture(f);
    free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_waves),
        cmocka_unit_test(test_plan_q4_0),
        cmocka_unit_test(test_plan_q8_0),
        cmocka_unit_test(test_plan_f32),
        cmocka_unit_test(test_plan_amx_wide_chunks),
        cmocka_unit_test(test_plan_rejects_bad_routes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
