/*
 * Thread pool: persistent workers that run one fork-join job at a time.
 *
 * DESIGN: es_pool_create(n) starts n-1 workers; the thread that calls es_pool_run() is thread 0
 * and runs its share too, so n threads compute. A job is fn(arg, ith, nth) on every thread;
 * es_pool_run() returns when all have returned (fork-join), so results written by any thread are
 * visible to the caller afterwards. Inside fn, es_pool_barrier() separates phases of a multi-phase
 * job. Workers and waiters spin briefly (a few tens of microseconds) and then sleep on a futex,
 * so back-to-back jobs start in well under a microsecond while an idle pool uses no CPU. A run
 * allocates nothing and makes no system call unless a thread was asleep.
 *
 * Work splitting is the job's business: a static split by ith, or an es_pool_counter that hands
 * out chunks so fast threads take the tail (STYLE §5). No locks are held while fn runs.
 *
 * Thread-safety: one es_pool_run() at a time per pool, from a thread that is not one of its
 * workers (a job must not call es_pool_run() on its own pool). es_pool_barrier() only from inside
 * a job, by all nth threads of it. es_pool_size() anywhere.
 */
#ifndef ES_POOL_H
#define ES_POOL_H

#include "core/util.h"
#include <stdatomic.h>

typedef struct es_pool es_pool;

/* A job body: runs on thread ith of nth (0 <= ith < nth; ith 0 is the caller of es_pool_run). */
typedef void (*es_pool_fn)(void *arg, int ith, int nth);

/* Starts a pool of n_threads threads (1 <= n_threads <= ES_MAX_THREADS; 1 means no workers: jobs run inline
 * on the caller). On success *out owns the workers; release with es_pool_destroy().
 * Errors: ES_E_INVAL (bad count), ES_E_NOMEM, ES_E_UNSUPPORTED (thread creation failed; details in
 * es_last_error()). */
es_status es_pool_create(int n_threads, es_pool **out);

/* Stops and joins the workers. NULL is a no-op. No job may be running. */
void es_pool_destroy(es_pool *p);

/* Number of threads that run each job (workers + the caller). */
int es_pool_size(const es_pool *p);

/* Runs fn(arg, ith, nth) on all threads and returns when every call has returned. Everything the
 * caller wrote before the call is visible to fn, and everything fn wrote is visible to the caller
 * after it (acquire/release through the pool's counters). */
void es_pool_run(es_pool *p, es_pool_fn fn, void *arg);

/* Inside a job: waits until all nth threads of the job have reached this barrier. Writes made
 * before the barrier by any thread are visible after it to all. A no-op when nth == 1. */
void es_pool_barrier(es_pool *p);

/*
 * A shared chunk counter, alone on its cache line so threads bumping it do not slow their
 * neighbours' data (false sharing). Set it before the job starts (es_pool_run publishes it) or
 * between two barriers; then each thread takes chunks with es_pool_counter_next() until it gets a
 * value past the end.
 */
typedef struct es_pool_counter {
    _Alignas(64) atomic_long next;
    char pad[64 - sizeof(atomic_long)];
} es_pool_counter;

static inline void es_pool_counter_set(es_pool_counter *c, long v)
{
    /* relaxed: the value is published by es_pool_run()/es_pool_barrier(), which order it */
    atomic_store_explicit(&c->next, v, memory_order_relaxed);
}

/* Returns the first index of the next chunk of step items (the caller checks it against the end).
 * relaxed is enough: chunks are disjoint, and the end of the job orders the results. */
static inline long es_pool_counter_next(es_pool_counter *c, long step)
{
    return atomic_fetch_add_explicit(&c->next, step, memory_order_relaxed);
}

#endif
