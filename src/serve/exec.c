/* The executor (exec.h): a FIFO of units, one thread forming and running batches. */
#include "serve/exec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sv_exec {
    es_session *s;
    sv_exec_opts o;
    sv_metrics *mx;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work; /* units queued, or stopping */
    pthread_cond_t done; /* a request changed state */
    sv_unit *head, *tail;
    int n_pending;       /* requests admitted and not finished */
    uint64_t mem_used;
    bool stopping;
    uint64_t last_arrival_ns; /* when the last request was queued */
    /* take_batch's scratch: the queued units in order, their sizes, es_batch_pick's choice */
    sv_unit **cand;
    int64_t *cand_tokens;
    int *cand_seqs, *pick;
    atomic_int batch_live; /* requests of the running batch whose waiter is still there */
    int (*expected)(void *user); /* other requests that may join soon (sv_exec_expect) */
    void *expected_user;
};

uint64_t sv_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

sv_req *sv_req_new(int n_units)
{
    sv_req *q = calloc(1, sizeof(*q));
    if (!q) return NULL;
    q->units = calloc((size_t)(n_units > 0 ? n_units : 1), sizeof(sv_unit));
    if (!q->units) {
        free(q);
        return NULL;
    }
    q->n_units = n_units;
    for (int i = 0; i < n_units; i++) q->units[i].req = q;
    q->refs = 1;
    return q;
}

void sv_req_free(sv_req *q)
{
    if (!q) return;
    for (int i = 0; i < q->n_units; i++) rec_free(&q->units[i].r);
    free(q->units);
    if (q->free_api) q->free_api(q->api);
    free(q);
}

/* Drops one reference; the last frees. Under the lock. */
static void unref(sv_exec *x, sv_req *q)
{
    if (--q->refs > 0) return;
    x->mem_used -= q->mem_bytes;
    sv_req_free(q);
}

/* A request leaves the admitted set (done, failed or its waiter gone). Under the lock. */
static void finish(sv_exec *x, sv_req *q)
{
    x->n_pending--;
    pthread_mutex_lock(&x->mx->mu);
    x->mx->queue_depth = x->n_pending;
    pthread_mutex_unlock(&x->mx->mu);
}

/* Takes q's units out of the queue. Under the lock. */
static void drop_queued(sv_exec *x, sv_req *q)
{
    sv_unit **pp = &x->head, *prev = NULL;
    while (*pp) {
        sv_unit *u = *pp;
        if (u->req == q) {
            *pp = u->next;
            u->queued = false;
            if (x->tail == u) x->tail = prev;
        } else {
            prev = u;
            pp = &u->next;
        }
    }
}

int sv_exec_abort_cb(void *user)
{
    sv_exec *x = *(sv_exec **)user;
    return x && atomic_load(&x->batch_live) == 0;
}

/* Takes a batch into units[] (at most cap); returns the count. Under the lock. The batch is
 * es_batch_pick's choice from the queue in order (the head always, then the units that still
 * fit the token and sequence budgets: a unit too long for the room left stays queued, in its
 * place, and shorter ones behind it fill the batch). */
static int take_batch(sv_exec *x, sv_unit **units, int cap, int64_t *tokens, int *seqs)
{
    int n_queued = 0;
    for (sv_unit *u = x->head; u && n_queued < cap; u = u->next) {
        x->cand[n_queued] = u;
        x->cand_tokens[n_queued] = u->r.n_tokens;
        x->cand_seqs[n_queued++] = u->r.n_seqs;
    }
    const int n = es_batch_pick(x->cand_tokens, x->cand_seqs, n_queued, x->o.batch_tokens,
                                x->o.max_seqs, x->pick);
    *tokens = 0;
    *seqs = 0;
    for (int i = 0; i < n; i++) {
        sv_unit *u = units[i] = x->cand[x->pick[i]];
        *tokens += u->r.n_tokens;
        *seqs += u->r.n_seqs;
        u->queued = false;
        sv_req *q = u->req;
        if (q->n_in_batch++ == 0) {
            q->refs++;
            atomic_fetch_add(&x->batch_live, 1);
        }
    }
    /* out of the queue, which keeps the others in their order */
    sv_unit **pp = &x->head, *prev = NULL;
    while (*pp) {
        if (!(*pp)->queued) {
            sv_unit *u = *pp;
            *pp = u->next;
            u->next = NULL;
        } else {
            prev = *pp;
            pp = &(*pp)->next;
        }
    }
    x->tail = prev;
    return n;
}

/* Puts units[0..n) back at the head of the queue, in order. Under the lock. */
static void requeue(sv_exec *x, sv_unit **units, int n)
{
    for (int i = n - 1; i >= 0; i--) {
        sv_unit *u = units[i];
        if (u->req->left || u->req->state != SV_WAITING) continue;
        u->next = x->head;
        u->queued = true;
        x->head = u;
        if (!x->tail) x->tail = u;
    }
}

/* Before a batch that the queue does not fill, waits while requests keep arriving: at most
 * gather_gap_ms after the last arrival and gather_max_ms in all. Clients answered by the last
 * batch send their next requests just as it ends, and a burst of clients arrives over some
 * milliseconds; under --mem a batch costs a whole pass over the experts however few tokens it
 * has, so starting one for the first arrival alone wastes that pass. Under the lock. */
static void gather(sv_exec *x)
{
    const uint64_t gap = (uint64_t)x->o.gather_gap_ms * 1000000u;
    const uint64_t t0 = sv_now_ns(), t_end = t0 + (uint64_t)x->o.gather_max_ms * 1000000u;
    bool waited = false;
    while (gap && !x->stopping) {
        int64_t tokens = 0;
        int seqs = 0;
        for (const sv_unit *u = x->head; u; u = u->next)
            tokens += u->r.n_tokens, seqs += u->r.n_seqs;
        if (tokens >= x->o.batch_tokens || seqs >= x->o.max_seqs) break;
        /* nothing else on its way (a sequential client): holding the batch would only add to
         * the request's latency what no other request can share */
        if (x->expected && x->expected(x->expected_user) == 0) break;
        uint64_t until = x->last_arrival_ns + gap;
        if (until > t_end) until = t_end;
        if (sv_now_ns() >= until) break;
        const struct timespec ts = {(time_t)(until / 1000000000u), (long)(until % 1000000000u)};
        pthread_cond_timedwait(&x->work, &x->mu, &ts);
        waited = true;
    }
    if (!waited) return;
    const uint64_t held = sv_now_ns() - t0;
    pthread_mutex_lock(&x->mx->mu);
    x->mx->gather_seconds += (double)held * 1e-9;
    pthread_mutex_unlock(&x->mx->mu);
}

static int fail_status(es_status st)
{
    return st == ES_E_NOMEM ? 503 : st == ES_E_INVAL ? 400 : 500;
}

static void *run(void *arg)
{
    sv_exec *x = arg;
    const int cap = x->o.max_seqs;
    sv_unit **units = malloc((size_t)cap * sizeof(*units));
    es_record **recs = malloc((size_t)cap * sizeof(*recs));
    if (!units || !recs) {
        fprintf(stderr, "estream serve: out of memory in the executor\n");
        abort();
    }
    pthread_mutex_lock(&x->mu);
    for (;;) {
        while (!x->head && !x->stopping) pthread_cond_wait(&x->work, &x->mu);
        if (!x->head) break; /* stopping, and nothing left */
        gather(x);
        int64_t tokens;
        int n_seqs;
        const int n = take_batch(x, units, cap, &tokens, &n_seqs);
        pthread_mutex_lock(&x->mx->mu); /* back to 0 in sv_metrics_batch */
        x->mx->running_seqs = n_seqs;
        pthread_mutex_unlock(&x->mx->mu);
        pthread_mutex_unlock(&x->mu);

        for (int i = 0; i < n; i++) recs[i] = units[i]->r.r;
        const es_status st = es_session_run_records(x->s, recs, n);
        es_run_stats rs;
        es_session_stats(x->s, &rs);
        sv_metrics_batch(x->mx, tokens, n_seqs, st, &rs);
        const char *why = st ? es_last_error() : NULL;

        pthread_mutex_lock(&x->mu);
        if (st == ES_E_CANCELLED) requeue(x, units, n);
        for (int i = 0; i < n; i++) {
            sv_unit *u = units[i];
            sv_req *q = u->req;
            if (st == ES_OK) {
                /* the library wrote the outputs through the copied pointers; the scalars it
                 * may have normalised (score_from 0 -> 1) stay as the unit had them */
                q->n_left--;
                if (q->n_left == 0 && q->state == SV_WAITING && !q->left) {
                    q->state = SV_DONE;
                    finish(x, q);
                }
            } else if (st != ES_E_CANCELLED && q->state == SV_WAITING && !q->left) {
                q->state = SV_FAILED;
                drop_queued(x, q); /* its other units would run for nobody */
                q->fail_status = fail_status(st);
                snprintf(q->fail_msg, sizeof(q->fail_msg), "%s", why ? why : es_status_name(st));
                finish(x, q);
            }
        }
        for (int i = 0; i < n; i++) {
            sv_req *q = units[i]->req;
            if (--q->n_in_batch == 0) {
                if (!q->left) atomic_fetch_sub(&x->batch_live, 1);
                unref(x, q);
            }
        }
        atomic_store(&x->batch_live, 0);
        pthread_cond_broadcast(&x->done);
    }
    pthread_mutex_unlock(&x->mu);
    free(units);
    free(recs);
    return NULL;
}

static void free_scratch(sv_exec *x)
{
    free(x->cand);
    free(x->cand_tokens);
    free(x->cand_seqs);
    free(x->pick);
}

sv_exec *sv_exec_start(es_session *s, const sv_exec_opts *o, sv_metrics *mx)
{
    sv_exec *x = calloc(1, sizeof(*x));
    if (!x) return NULL;
    x->s = s;
    x->o = *o;
    x->mx = mx;
    /* a batch holds at most max_seqs units (each has a sequence): the queue is scanned that far */
    const size_t c = (size_t)o->max_seqs;
    x->cand = malloc(c * sizeof(*x->cand));
    x->cand_tokens = malloc(c * sizeof(*x->cand_tokens));
    x->cand_seqs = malloc(c * sizeof(*x->cand_seqs));
    x->pick = malloc(c * sizeof(*x->pick));
    if (!x->cand || !x->cand_tokens || !x->cand_seqs || !x->pick) {
        free_scratch(x);
        free(x);
        return NULL;
    }
    pthread_mutex_init(&x->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&x->work, &ca);
    pthread_cond_init(&x->done, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&x->thread, NULL, run, x)) {
        pthread_cond_destroy(&x->work);
        pthread_cond_destroy(&x->done);
        pthread_mutex_destroy(&x->mu);
        free_scratch(x);
        free(x);
        return NULL;
    }
    return x;
}

enum sv_submit sv_exec_submit(sv_exec *x, sv_req *q)
{
    pthread_mutex_lock(&x->mu);
    enum sv_submit r = SV_ADMITTED;
    if (x->stopping) r = SV_STOPPING;
    else if (x->n_pending >= x->o.max_queue) r = SV_QUEUE_FULL;
    else if (x->mem_used + q->mem_bytes > x->o.request_mem_bytes) r = SV_MEM_FULL;
    if (r != SV_ADMITTED) {
        pthread_mutex_unlock(&x->mu);
        return r;
    }
    x->mem_used += q->mem_bytes;
    x->n_pending++;
    x->last_arrival_ns = sv_now_ns();
    q->n_left = q->n_units;
    q->state = q->n_units ? SV_WAITING : SV_DONE;
    if (!q->n_units) x->n_pending--;
    for (int i = 0; i < q->n_units; i++) {
        sv_unit *u = &q->units[i];
        u->queued = true;
        u->next = NULL;
        if (x->tail) x->tail->next = u;
        else x->head = u;
        x->tail = u;
    }
    pthread_mutex_lock(&x->mx->mu);
    x->mx->queue_depth = x->n_pending;
    pthread_mutex_unlock(&x->mx->mu);
    pthread_cond_signal(&x->work);
    pthread_mutex_unlock(&x->mu);
    return SV_ADMITTED;
}

enum sv_state sv_exec_wait(sv_exec *x, sv_req *q, uint64_t deadline_ns, bool (*gone)(void *),
                           void *user)
{
    pthread_mutex_lock(&x->mu);
    /* gone is polled every 20 ms by the clock, not on timeouts of the wait: batches shorter
     * than 20 ms wake the waiter before any timeout, and a client that left would then be
     * answered only once its whole request had run */
    uint64_t poll_at = sv_now_ns() + 20000000u;
    while (q->state == SV_WAITING) {
        const uint64_t now = sv_now_ns();
        if (now >= deadline_ns) break;
        if (now >= poll_at) {
            if (gone && gone(user)) break;
            poll_at = now + 20000000u;
        }
        const uint64_t until = poll_at < deadline_ns ? poll_at : deadline_ns;
        const struct timespec ts = {(time_t)(until / 1000000000u), (long)(until % 1000000000u)};
        pthread_cond_timedwait(&x->done, &x->mu, &ts);
    }
    const enum sv_state s = q->state;
    pthread_mutex_unlock(&x->mu);
    return s;
}

void sv_exec_leave(sv_exec *x, sv_req *q)
{
    pthread_mutex_lock(&x->mu);
    if (q->state == SV_WAITING && q->n_units) {
        /* still admitted: take its queued units out; a batch that holds some keeps a
         * reference and may be stopped if nobody else waits for it */
        drop_queued(x, q);
        finish(x, q);
        q->state = SV_FAILED;
        if (q->n_in_batch) atomic_fetch_sub(&x->batch_live, 1);
    }
    q->left = true;
    unref(x, q);
    pthread_mutex_unlock(&x->mu);
}

void sv_exec_expect(sv_exec *x, int (*expected)(void *user), void *user)
{
    pthread_mutex_lock(&x->mu);
    x->expected = expected;
    x->expected_user = user;
    pthread_mutex_unlock(&x->mu);
}

void sv_exec_drain(sv_exec *x)
{
    pthread_mutex_lock(&x->mu);
    x->stopping = true;
    for (sv_unit *u = x->head; u; u = u->next) {
        sv_req *q = u->req;
        u->queued = false;
        if (q->state != SV_WAITING || q->left) continue;
        /* a request partly in the running batch fails too: its queued units would never run */
        q->state = SV_FAILED;
        q->fail_status = 503;
        snprintf(q->fail_msg, sizeof(q->fail_msg), "the server is shutting down: the request "
                 "was queued behind the running batch and will not run");
        finish(x, q);
    }
    x->head = x->tail = NULL;
    pthread_cond_broadcast(&x->done);
    pthread_cond_signal(&x->work);
    pthread_mutex_unlock(&x->mu);
}

int sv_exec_pending(sv_exec *x)
{
    pthread_mutex_lock(&x->mu);
    const int n = x->n_pending;
    pthread_mutex_unlock(&x->mu);
    return n;
}

void sv_exec_stop(sv_exec *x)
{
    if (!x) return;
    pthread_mutex_lock(&x->mu);
    x->stopping = true;
    pthread_cond_signal(&x->work);
    pthread_mutex_unlock(&x->mu);
    pthread_join(x->thread, NULL);
    es_session_destroy(x->s);
    pthread_cond_destroy(&x->work);
    pthread_cond_destroy(&x->done);
    pthread_mutex_destroy(&x->mu);
    free_scratch(x);
    free(x);
}
