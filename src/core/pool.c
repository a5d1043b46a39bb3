/*
 * Thread pool: fork-join jobs over persistent workers, with a barrier for multi-phase jobs.
 *
 * DESIGN: three futex words, each on its own cache line:
 *   gen    job generation. The caller writes fn/arg, then increments gen (release); a worker that
 *          sees a new gen (acquire) reads fn/arg and runs its share.
 *   n_done workers finished with the current job. The last one to finish wakes the caller if it
 *          sleeps; the caller reads n_done with acquire, which orders every worker's writes before
 *          the caller's return.
 *   phase  barrier generation; bar_count counts arrivals, the last arriver resets it and
 *          increments phase.
 * A waiter spins on its word for SPIN_ITERS pauses, then registers in the word's sleeper count
 * and futex-waits for the value to change. A waker changes the word first and then looks at the
 * sleeper count: both sides use sequentially consistent operations, so either the waker sees the
 * sleeper (and calls FUTEX_WAKE) or the sleeper sees the new value before it sleeps (and the
 * kernel's compare in FUTEX_WAIT closes the remaining window). No wakeup can be lost, and a run
 * with every thread awake makes no system call.
 */
#include "core/pool.h"

#include <limits.h>
#include <stdbool.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* About 20-80 us of spinning (a pause is 40-140 cycles), then sleep. Long enough to bridge the
 * gap between back-to-back kernels, short enough that an idle pool goes quiet at once. */
#define SPIN_ITERS 2048

typedef struct worker {
    es_pool *pool;
    int ith;
    pthread_t tid;
    bool started;
} worker;

struct es_pool {
    int n;           /* threads per job, caller included */
    worker *workers; /* [n-1] */

    es_pool_fn fn; /* current job: written by the caller before gen is bumped */
    void *arg;
    bool quit;    /* written before the final gen bump in destroy */
    bool running; /* caller-side only: catches a nested es_pool_run */

    _Alignas(64) atomic_uint gen;
    atomic_uint gen_sleepers;
    _Alignas(64) atomic_uint n_done;
    atomic_uint done_sleepers;
    _Alignas(64) atomic_uint bar_count;
    _Alignas(64) atomic_uint phase;
    atomic_uint phase_sleepers;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void futex_wait(atomic_uint *w, unsigned old)
{
    /* Returns at once if *w != old (EAGAIN); spurious wakeups are handled by the callers' loops. */
    syscall(SYS_futex, (unsigned *)w, FUTEX_WAIT_PRIVATE, old, NULL, NULL, 0);
}

static void futex_wake_all(atomic_uint *w)
{
    syscall(SYS_futex, (unsigned *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Waits until *w != old and returns the new value (acquire). */
static unsigned wait_change(atomic_uint *w, unsigned old, atomic_uint *sleepers)
{
    for (int i = 0; i < SPIN_ITERS; i++) {
        unsigned v = atomic_load_explicit(w, memory_order_acquire);
        if (v != old) return v;
        cpu_relax();
    }
    for (;;) {
        /* seq_cst pairs with the waker's seq_cst change-then-check (see DESIGN above) */
        atomic_fetch_add_explicit(sleepers, 1, memory_order_seq_cst);
        if (atomic_load_explicit(w, memory_order_seq_cst) == old) futex_wait(w, old);
        atomic_fetch_sub_explicit(sleepers, 1, memory_order_relaxed);
        unsigned v = atomic_load_explicit(w, memory_order_acquire);
        if (v != old) return v;
    }
}

/* Called after changing *w with a seq_cst operation. */
static void wake_sleepers(atomic_uint *w, atomic_uint *sleepers)
{
    if (atomic_load_explicit(sleepers, memory_order_seq_cst) != 0) futex_wake_all(w);
}

static void *worker_main(void *argp)
{
    worker *wk = argp;
    es_pool *p = wk->pool;
    unsigned seen = 0; /* gen starts at 0; the first job makes it 1 */
    for (;;) {
        seen = wait_change(&p->gen, seen, &p->gen_sleepers);
        /* acquire on gen: fn, arg and quit written before the bump are visible here */
        if (p->quit) break;
        p->fn(p->arg, wk->ith, p->n);
        /* seq_cst: releases this thread's results to the caller, and pairs with its sleep check */
        unsigned d = atomic_fetch_add_explicit(&p->n_done, 1, memory_order_seq_cst) + 1;
        if (d == (unsigned)(p->n - 1)) wake_sleepers(&p->n_done, &p->done_sleepers);
    }
    return NULL;
}

/* Publishes the job (or the quit flag) to the workers. */
static void publish(es_pool *p)
{
    atomic_store_explicit(&p->n_done, 0, memory_order_relaxed); /* ordered by the gen bump */
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_seq_cst);
    wake_sleepers(&p->gen, &p->gen_sleepers);
}

es_status es_pool_create(int n_threads, es_pool **out)
{
    *out = NULL;
    if (n_threads < 1 || n_threads > ES_MAX_THREADS)
        return es_fail(ES_E_INVAL, "thread pool: %d threads (1..%d)", n_threads, ES_MAX_THREADS);
    es_pool *p = calloc(1, sizeof(*p));
    if (!p) return es_fail(ES_E_NOMEM, "thread pool: out of memory");
    p->n = n_threads;
    if (n_threads > 1) {
        p->workers = calloc((size_t)n_threads - 1, sizeof(worker));
        if (!p->workers) {
            free(p);
            return es_fail(ES_E_NOMEM, "thread pool: out of memory for %d workers",
                           n_threads - 1);
        }
    }
    for (int i = 0; i < n_threads - 1; i++) {
        worker *wk = &p->workers[i];
        wk->pool = p;
        wk->ith = i + 1;
        int rc = pthread_create(&wk->tid, NULL, worker_main, wk);
        if (rc != 0) {
            es_pool_destroy(p); /* joins the ones already started */
            return es_fail(ES_E_UNSUPPORTED, "thread pool: pthread_create: %s", strerror(rc));
        }
        wk->started = true;
    }
    *out = p;
    return ES_OK;
}

void es_pool_destroy(es_pool *p)
{
    if (!p) return;
    ES_ASSERT(!p->running);
    p->quit = true;
    publish(p);
    for (int i = 0; i < p->n - 1; i++)
        if (p->workers[i].started) pthread_join(p->workers[i].tid, NULL);
    free(p->workers);
    free(p);
}

int es_pool_size(const es_pool *p)
{
    return p->n;
}

void es_pool_run(es_pool *p, es_pool_fn fn, void *arg)
{
    ES_ASSERT(!p->running); /* nested or concurrent run */
    if (p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->running = true;
    p->fn = fn;
    p->arg = arg;
    publish(p);
    fn(arg, 0, p->n);
    const unsigned want = (unsigned)(p->n - 1);
    unsigned d = atomic_load_explicit(&p->n_done, memory_order_acquire);
    while (d != want)
        d = wait_change(&p->n_done, d, &p->done_sleepers);
    p->running = false;
}

void es_pool_barrier(es_pool *p)
{
    if (p->n == 1) return;
    /* Read the phase before arriving: it cannot change until every thread, this one included,
     * has arrived. */
    unsigned ph = atomic_load_explicit(&p->phase, memory_order_acquire);
    /* acq_rel: the arrivals form one release sequence that the last arriver acquires */
    unsigned c = atomic_fetch_add_explicit(&p->bar_count, 1, memory_order_acq_rel) + 1;
    if (c == (unsigned)p->n) {
        /* Reset before opening: threads leaving may arrive at the next barrier at once, and
         * they only do so after seeing the new phase, which this store happens-before. */
        atomic_store_explicit(&p->bar_count, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&p->phase, 1, memory_order_seq_cst);
        wake_sleepers(&p->phase, &p->phase_sleepers);
    } else {
        wait_change(&p->phase, ph, &p->phase_sleepers);
    }
}
