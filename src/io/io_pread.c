/*
 * pread backend: the fallback when no io_uring ring can be created (old kernel, seccomp,
 * io_uring_disabled), and a second implementation the tests hold the ring against.
 *
 * DESIGN
 * - One worker thread per queue slot (queue_depth workers, small stacks), so queue_depth
 *   preads really are in flight at once: storage needs several reads outstanding to reach its
 *   bandwidth, and es_io_submit() never blocks the loader on a read.
 * - Two FIFOs of slot numbers (todo, done), each at most queue_depth long, under one mutex;
 *   `work` wakes workers, `done_cv` wakes the loader in reap. A slot's job fields are written
 *   by the loader before it is queued and by its worker before it is marked done, both under
 *   the mutex, so the mutex orders every access (no atomics needed).
 * - fini sets `stop`: workers finish the read they are in (the caller's buffer stays valid
 *   until fini returns, since it joins them) and leave queued reads unstarted.
 * - Wake-ups: notify (any thread) sets `wake` under the mutex and signals `done_cv`; reap
 *   reports a done slot first, else a set `wake` (clearing it) as ES_IO_SLOT_WAKE. Waits with
 *   a deadline use pthread_cond_timedwait on a CLOCK_MONOTONIC condvar, the clock of
 *   es_now_ns().
 */
#include "io/io_impl.h"

#include "core/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct pread_job {
    int fd;
    uint64_t off;
    size_t len;
    void *dst;
    int64_t res; /* bytes read or -errno */
} pread_job;

typedef struct pread_be {
    pthread_mutex_t mu;
    pthread_cond_t work;    /* todo gained a job, or stop */
    pthread_cond_t done_cv; /* done gained a slot, or wake was set */
    pread_job job[ES_IO_MAX_DEPTH];
    int todo[ES_IO_MAX_DEPTH], todo_head, todo_n; /* ring buffers of slot numbers */
    int done[ES_IO_MAX_DEPTH], done_head, done_n;
    int cap; /* queue depth: ring size */
    int stop;
    int wake;      /* es_io_pread_notify was called since reap last reported a wake */
    int n_threads; /* started workers */
    pthread_t th[ES_IO_MAX_DEPTH];
} pread_be;

static void *worker(void *arg)
{
    pread_be *b = arg;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        while (!b->stop && b->todo_n == 0)
            pthread_cond_wait(&b->work, &b->mu);
        if (b->stop) break;
        int slot = b->todo[b->todo_head];
        b->todo_head = (b->todo_head + 1) % b->cap;
        b->todo_n--;
        pread_job j = b->job[slot];
        pthread_mutex_unlock(&b->mu);

        ssize_t n;
        while ((n = pread(j.fd, j.dst, j.len, (off_t)j.off)) < 0 && errno == EINTR) {
        }
        int64_t res = n < 0 ? -(int64_t)errno : (int64_t)n;

        pthread_mutex_lock(&b->mu);
        b->job[slot].res = res;
        b->done[(b->done_head + b->done_n) % b->cap] = slot;
        b->done_n++;
        pthread_cond_signal(&b->done_cv);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

es_status es_io_pread_init(es_io *io)
{
    pread_be *b = calloc(1, sizeof(*b));
    if (!b) return es_fail(ES_E_NOMEM, "io: out of memory (pread workers)");
    b->cap = io->p.queue_depth;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->work, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines are es_now_ns() times */
    pthread_cond_init(&b->done_cv, &ca);
    pthread_condattr_destroy(&ca);
    io->be = b; /* from here es_io_pread_fini cleans up, whatever was started */
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 256 << 10); /* a worker only calls pread */
    for (int i = 0; i < b->cap; i++) {
        int err = pthread_create(&b->th[i], &at, worker, b);
        if (err) {
            pthread_attr_destroy(&at);
            return es_fail(ES_E_NOMEM, "io: cannot start pread worker %d: %s", i, strerror(err));
        }
        b->n_threads++;
    }
    pthread_attr_destroy(&at);
    return ES_OK;
}

es_status es_io_pread_start(es_io *io, int slot, int fd, uint64_t off, size_t len, void *dst)
{
    pread_be *b = io->be;
    pthread_mutex_lock(&b->mu);
    ES_ASSERT(b->todo_n < b->cap);
    b->job[slot] = (pread_job){.fd = fd, .off = off, .len = len, .dst = dst};
    b->todo[(b->todo_head + b->todo_n) % b->cap] = slot;
    b->todo_n++;
    pthread_cond_signal(&b->work);
    pthread_mutex_unlock(&b->mu);
    return ES_OK;
}

es_status es_io_pread_reap(es_io *io, uint64_t deadline_ns, int *slot, int64_t *res)
{
    pread_be *b = io->be;
    struct timespec ts = {(time_t)(deadline_ns / 1000000000u), (long)(deadline_ns % 1000000000u)};
    pthread_mutex_lock(&b->mu);
    while (b->done_n == 0 && !b->wake && deadline_ns > 0) {
        if (deadline_ns == ES_IO_NO_DEADLINE) {
            pthread_cond_wait(&b->done_cv, &b->mu);
        } else if (pthread_cond_timedwait(&b->done_cv, &b->mu, &ts) == ETIMEDOUT) {
            break;
        }
    }
    if (b->done_n > 0) {
        int s = b->done[b->done_head];
        b->done_head = (b->done_head + 1) % b->cap;
        b->done_n--;
        *slot = s;
        *res = b->job[s].res;
    } else if (b->wake) {
        b->wake = 0;
        *slot = ES_IO_SLOT_WAKE;
    } else {
        *slot = ES_IO_SLOT_NONE;
    }
    pthread_mutex_unlock(&b->mu);
    return ES_OK;
}

void es_io_pread_notify(es_io *io)
{
    pread_be *b = io->be;
    pthread_mutex_lock(&b->mu);
    b->wake = 1;
    pthread_cond_signal(&b->done_cv); /* its only waiter is the loader in reap */
    pthread_mutex_unlock(&b->mu);
}

void es_io_pread_fini(es_io *io)
{
    pread_be *b = io->be;
    if (!b) return;
    pthread_mutex_lock(&b->mu);
    b->stop = 1;
    pthread_cond_broadcast(&b->work);
    pthread_mutex_unlock(&b->mu);
    for (int i = 0; i < b->n_threads; i++)
        pthread_join(b->th[i], NULL);
    pthread_cond_destroy(&b->done_cv);
    pthread_cond_destroy(&b->work);
    pthread_mutex_destroy(&b->mu);
    free(b);
    io->be = NULL;
}
