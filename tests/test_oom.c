/*
 * Allocation failure everywhere: for N = 1, 2, ... the N-th allocation the library makes fails,
 * while the tiny model is opened, a text tokenized, the fast and the reference prefill run and
 * a thread pool is created. Each run must end in a non-OK status (or succeed where the library
 * can do without the memory), never crash, leak nothing (the ASan build checks that at exit),
 * and leave a fresh message in es_last_error() that says what ran out, not the message of an
 * earlier, unrelated failure.
 *
 * Injection: this program is linked with -Wl,--wrap for malloc, calloc, realloc,
 * posix_memalign, strdup and strndup (Makefile), so every such call in libestream.a passes
 * through the wrappers below. Allocations inside other libraries (libc's own, PCRE2, liburing)
 * are not counted.
 */
#include "t.h"

#include "estream.h"
#include "core/pool.h"

#include <stdatomic.h>
#include <stdbool.h>

#define MODEL "tests/data/tiny-f32.gguf"

static atomic_long n_calls;         /* allocations counted since arm() */
static atomic_long fail_at = -1;    /* the allocation that fails (1-based), -1: none */

static bool inject(void)
{
    long k = atomic_load(&fail_at);
    return k > 0 && atomic_fetch_add(&n_calls, 1) + 1 == k;
}

void *__real_malloc(size_t n);
void *__real_calloc(size_t a, size_t b);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t a, size_t b);
void *__wrap_realloc(void *p, size_t n);
int __wrap_posix_memalign(void **p, size_t a, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
void *__wrap_malloc(size_t n) { return inject() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t a, size_t b) { return inject() ? NULL : __real_calloc(a, b); }
void *__wrap_realloc(void *p, size_t n) { return inject() ? NULL : __real_realloc(p, n); }
int __wrap_posix_memalign(void **p, size_t a, size_t n)
{
    return inject() ? 12 /* ENOMEM */ : __real_posix_memalign(p, a, n);
}
char *__wrap_strdup(const char *s) { return inject() ? NULL : __real_strdup(s); }
char *__wrap_strndup(const char *s, size_t n) { return inject() ? NULL : __real_strndup(s, n); }

static void arm(long k)
{
    atomic_store(&n_calls, 0);
    atomic_store(&fail_at, k);
}

/* Disarms; whether the armed allocation was reached. */
static bool disarm(void)
{
    long k = atomic_exchange(&fail_at, -1);
    return k > 0 && atomic_load(&n_calls) >= k;
}

/* Everything a run does with a model, stopping at the first failure. */
static es_status scenario(void)
{
    es_model *m = NULL;
    es_pool *p = NULL;
    float *logits = NULL;
    es_status st = es_model_open(MODEL, 0, &m);
    if (st) goto done;
    int32_t ids[64];
    size_t n = 0;
    const char text[] = "Hello world, out of memory";
    if ((st = es_tokenize(m, text, sizeof(text) - 1, 1, 1, ids, T_LEN(ids), &n))) goto done;
    logits = __real_malloc(sizeof(float) * (size_t)es_model_n_vocab(m) * n);
    assert_non_null(logits);
    es_session_params o = es_session_default_params();
    o.n_threads = 2;
    int o_all_logits = 1;
    if ((st = es_prefill(m, ids, n, &o, o_all_logits, logits))) goto done;
    o.reference = 1;
    if ((st = es_prefill(m, ids, n, &o, o_all_logits, logits))) goto done;
    st = es_pool_create(3, &p);
done:
    es_pool_destroy(p);
    free(logits);
    es_model_close(m);
    return st;
}

static void test_every_allocation_fails_cleanly(void **state)
{
    (void)state;
    /* without injection the scenario succeeds */
    arm(-1);
    assert_int_equal(scenario(), ES_OK);
    long k;
    int failures = 0;
    for (k = 1; k < 100000; k++) {
        /* an unrelated, earlier failure whose message must not survive */
        assert_int_not_equal(es_kernels_select("stale-marker"), ES_OK);
        assert_non_null(strstr(es_last_error(), "stale-marker"));
        arm(k);
        es_status st = scenario();
        bool reached = disarm();
        if (!reached) {
            assert_int_equal(st, ES_OK); /* every allocation done: the scenario is complete */
            break;
        }
        if (st == ES_OK) continue; /* the library did without this allocation */
        failures++;
        const char *msg = es_last_error();
        if (st != ES_E_NOMEM)
            fail_msg("allocation %ld: status %s, want out of memory (%s)", k, es_status_name(st),
                     msg);
        if (!*msg || strstr(msg, "stale-marker") || !strstr(msg, "memory"))
            fail_msg("allocation %ld: stale or vague message '%s'", k, msg);
    }
    assert_true(k < 100000);
    assert_true(failures > 10);
    print_message("%ld allocations, %d failures reported\n", k - 1, failures);
}

/* A stale message is replaced by a pool failure too (the smallest case, no model). */
static void test_pool_nomem_message(void **state)
{
    (void)state;
    for (long k = 1; k <= 2; k++) {
        assert_int_not_equal(es_kernels_select("stale-marker"), ES_OK);
        es_pool *p = NULL;
        arm(k);
        es_status st = es_pool_create(4, &p);
        assert_true(disarm());
        assert_int_equal(st, ES_E_NOMEM);
        assert_null(p);
        assert_non_null(strstr(es_last_error(), "thread pool: out of memory"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_allocation_fails_cleanly),
        cmocka_unit_test(test_pool_nomem_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
