/* The executor: one thread that runs the session's batches. Requests are cut into units (one
 * record each: a prompt, an input to embed, a score record), queued in arrival order, and each
 * batch takes units from the head of the queue while they fit the token budget and the
 * session's sequences, so requests that arrive while a batch runs share the next pass over the
 * experts. A unit never splits; a request's units may span batches.
 *
 * Ownership: a request is reference-counted under the executor's lock: the connection that
 * waits for it holds one reference, a batch that runs any of its units another. Whoever drops
 * the last one frees it, so a client that leaves (or times out) never waits for a batch.
 *
 * Cancellation: a waiter that leaves removes its queued units; if every request of the batch
 * that runs has left, the session's abort callback stops the batch at the next layer. A batch
 * shared with requests still waiting runs to its end (stopping it would make them pay again). */
#ifndef ES_SERVE_EXEC_H
#define ES_SERVE_EXEC_H

#include "records/records.h"
#include "serve/metrics.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct sv_req sv_req;

typedef struct sv_unit {
    rec r;
    sv_req *req;
    struct sv_unit *next; /* the queue */
    bool queued;
} sv_unit;

enum sv_state { SV_WAITING, SV_DONE, SV_FAILED };

struct sv_req {
    sv_unit *units;
    int n_units;
    int64_t n_tokens;       /* all units */
    uint64_t mem_bytes;     /* estimated bytes it holds while admitted (api.c) */
    uint64_t kept_bytes;    /* of them, JSON the endpoint keeps for the reply (prompt texts) */
    int endpoint;           /* metrics: which endpoint (sv_endpoint) */
    void *api;              /* the endpoint's parsed options */
    void (*free_api)(void *api);
    /* under the executor's lock */
    int refs;
    int n_left;             /* units not run yet */
    int n_in_batch;         /* units in the batch that runs */
    bool left;              /* the waiter has gone */
    enum sv_state state;
    int fail_status;        /* SV_FAILED: the HTTP status */
    char fail_msg[256];
};

/* Allocates a request of n units (zeroed, refs 1); NULL when out of memory. */
sv_req *sv_req_new(int n_units);
/* Frees a request that was never submitted. */
void sv_req_free(sv_req *q);

typedef struct sv_exec sv_exec;

typedef struct sv_exec_opts {
    int batch_tokens, max_seqs;
    int max_queue;              /* requests admitted and not finished */
    uint64_t request_mem_bytes; /* sum of their mem_bytes */
    int gather_gap_ms, gather_max_ms; /* a batch the queue does not fill waits for arrivals
                                       * this close together, this long at most (0: never) */
} sv_exec_opts;

/* Starts the executor on the session (which it then owns: sv_exec_stop destroys it).
 * abort_cb and cb_user of the session must have been set to sv_exec_abort_cb and the
 * address in *user_slot once known: the caller makes the session with
 * sp.abort_cb = sv_exec_abort_cb and sp.cb_user = a pointer it fills with the executor. */
int sv_exec_abort_cb(void *user);
sv_exec *sv_exec_start(es_session *s, const sv_exec_opts *o, sv_metrics *mx);

enum sv_submit { SV_ADMITTED = 0, SV_QUEUE_FULL = 1, SV_MEM_FULL = 2, SV_STOPPING = 3 };
/* Queues every unit of q (q->n_left set here); the request must stay referenced by the
 * caller until sv_exec_leave. */
enum sv_submit sv_exec_submit(sv_exec *x, sv_req *q);
/* Waits until q is done or failed (returns its state), until deadline_ns (CLOCK_MONOTONIC)
 * passes or gone(user) turns true (returns SV_WAITING). gone is polled every 20 ms. */
enum sv_state sv_exec_wait(sv_exec *x, sv_req *q, uint64_t deadline_ns, bool (*gone)(void *),
                           void *user);
/* The waiter drops its reference: queued units are removed; freed when no batch holds it. */
void sv_exec_leave(sv_exec *x, sv_req *q);
/* Requests admitted and not finished. */
int sv_exec_pending(sv_exec *x);
/* Before it holds a batch for requests still arriving (gather_gap_ms), the executor asks
 * expected(user) how many other requests may join soon; with none the batch starts at once, so
 * a lone request waits for nothing but its own run. Set once, before requests are submitted;
 * unset, arrivals are assumed. expected is called with the executor's lock held. */
void sv_exec_expect(sv_exec *x, int (*expected)(void *user), void *user);
/* Shutdown: admits nothing more (SV_STOPPING) and fails every request that has units queued
 * with 503 ("the server is shutting down"): their queued units never run. The running batch
 * runs to its end; requests wholly in it finish. Returns at once. */
void sv_exec_drain(sv_exec *x);
/* Runs what is queued, then stops the thread and destroys the session. NULL is a no-op. */
void sv_exec_stop(sv_exec *x);

uint64_t sv_now_ns(void);

#endif
