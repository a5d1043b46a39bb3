/* Thread pool: fork-join results, chunk counters, barrier phases, idle CPU use, bad arguments.
 * Run under ThreadSanitizer too (make TSAN=1). */
#include <unistd.h>

#include "t.h"

#include "core/pool.h"

#include <time.h>

#define MAX_T 4

/* ---- sums over many runs ------------------------------------------------------------------ */

typedef struct sum_job {
    const int64_t *v;
    int64_t n;
    int64_t part[MAX_T][8]; /* one cache line per thread */
    int calls[MAX_T];
} sum_job;

static void sum_fn(void *arg, int ith, int nth)
{
    sum_job *j = arg;
    int64_t a = j->n * ith / nth, b = j->n * (ith + 1) / nth, s = 0;
    for (int64_t i = a; i < b; i++)
        s += j->v[i];
    j->part[ith][0] = s;
    j->calls[ith]++;
}

static void test_sums(void **state)
{
    (void)state;
    enum { N = 10007, RUNS = 2000 };
    int64_t *v = malloc(N * sizeof(*v));
    assert_non_null(v);
    for (int nt = 1; nt <= MAX_T; nt++) {
        es_pool *p = NULL;
        assert_int_equal(es_pool_create(nt, &p), ES_OK);
        assert_int_equal(es_pool_size(p), nt);
        sum_job j = {.v = v, .n = N};
        for (int r = 0; r < RUNS; r++) {
            int64_t want = 0;
            for (int64_t i = 0; i < N; i++)
                want += v[i] = (i * 31 + r * 7) % 1000 - 500;
            es_pool_run(p, sum_fn, &j);
            int64_t got = 0;
            for (int t = 0; t < nt; t++)
                got += j.part[t][0];
            assert_int_equal(got, want);
        }
        for (int t = 0; t < nt; t++)
            assert_int_equal(j.calls[t], RUNS);
        es_pool_destroy(p);
    }
    free(v);
}

/* ---- chunk counter: every item exactly once ----------------------------------------------- */

typedef struct chunk_job {
    es_pool_counter next;
    int *hits;
    long n, step;
} chunk_job;

static void chunk_fn(void *arg, int ith, int nth)
{
    (void)ith, (void)nth;
    chunk_job *j = arg;
    long i0;
    while ((i0 = es_pool_counter_next(&j->next, j->step)) < j->n)
        for (long i = i0; i < i0 + j->step && i < j->n; i++)
            j->hits[i]++;
}

static void test_chunks(void **state)
{
    (void)state;
    enum { N = 5003 };
    int *hits = calloc(N, sizeof(int));
    assert_non_null(hits);
    for (int nt = 1; nt <= MAX_T; nt++) {
        es_pool *p = NULL;
        assert_int_equal(es_pool_create(nt, &p), ES_OK);
        chunk_job j = {.hits = hits, .n = N};
        for (int r = 0; r < 200; r++) {
            memset(hits, 0, N * sizeof(int));
            j.step = 1 + r % 17;
            es_pool_counter_set(&j.next, 0);
            es_pool_run(p, chunk_fn, &j);
            for (int i = 0; i < N; i++)
                assert_int_equal(hits[i], 1);
        }
        es_pool_destroy(p);
    }
    free(hits);
}

/* ---- barrier: each phase reads what the neighbour wrote in the previous one ---------------- */

enum { PHASES = 64 };

typedef struct bar_job {
    es_pool *pool;
    uint64_t val[PHASES][MAX_T]; /* unsigned: wraps, no overflow */
} bar_job;

static void bar_fn(void *arg, int ith, int nth)
{
    bar_job *j = arg;
    j->val[0][ith] = ith + 1;
    for (int ph = 1; ph < PHASES; ph++) {
        es_pool_barrier(j->pool);
        j->val[ph][ith] = j->val[ph - 1][(ith + 1) % nth] * 3 + j->val[ph - 1][ith];
    }
}

static void test_barrier(void **state)
{
    (void)state;
    for (int nt = 1; nt <= MAX_T; nt++) {
        es_pool *p = NULL;
        assert_int_equal(es_pool_create(nt, &p), ES_OK);
        bar_job *j = calloc(1, sizeof(*j));
        assert_non_null(j);
        j->pool = p;
        uint64_t want[PHASES][MAX_T];
        for (int t = 0; t < nt; t++)
            want[0][t] = t + 1;
        for (int ph = 1; ph < PHASES; ph++)
            for (int t = 0; t < nt; t++)
                want[ph][t] = want[ph - 1][(t + 1) % nt] * 3 + want[ph - 1][t];
        for (int r = 0; r < 50; r++) {
            es_pool_run(p, bar_fn, j);
            for (int t = 0; t < nt; t++)
                assert_int_equal(j->val[PHASES - 1][t], want[PHASES - 1][t]);
        }
        free(j);
        es_pool_destroy(p);
    }
}

/* ---- an idle pool sleeps ------------------------------------------------------------------ */

static void noop_fn(void *arg, int ith, int nth)
{
    (void)arg, (void)ith, (void)nth;
}

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_idle(void **state)
{
    (void)state;
    es_pool *p = NULL;
    assert_int_equal(es_pool_create(MAX_T, &p), ES_OK);
    for (int r = 0; r < 1000; r++)
        es_pool_run(p, noop_fn, NULL);
    usleep(20000); /* let the workers finish spinning */
    double c0 = cpu_seconds();
    usleep(200000);
    double used = cpu_seconds() - c0;
    /* Spinning workers would burn ~0.6 s of CPU here; sleeping ones use next to none. */
    assert_true(used < 0.03);
    es_pool_run(p, noop_fn, NULL); /* still wakes up */
    es_pool_destroy(p);
}

static void test_bad_args(void **state)
{
    (void)state;
    es_pool *p = (es_pool *)1;
    assert_int_equal(es_pool_create(0, &p), ES_E_INVAL);
    assert_null(p);
    assert_int_equal(es_pool_create(-3, &p), ES_E_INVAL);
    es_pool_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sums),     cmocka_unit_test(test_chunks),
        cmocka_unit_test(test_barrier),  cmocka_unit_test(test_idle),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
