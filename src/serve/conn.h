/* Connections of estream serve: the listening socket, who gets a connection thread and when,
 * reading a request within its deadline, writing the reply, keep-alive, and shutting down with
 * bounded waits. What a request means is the caller's (http.c, through sv_conn_ops); the wire
 * format is http1.c's.
 *
 * DESIGN
 * - One thread per active connection, at most max_connections of them. Every connection the
 *   kernel hands over is accepted at once into a FIFO of queued connections (up to four times
 *   max_connections more, then the kernel's backlog keeps the rest in order), and the oldest
 *   queued one whose client address holds fewer than max_per_ip active connections gets the next
 *   free thread. So a few addresses cannot take every thread, and no connection overtakes an
 *   older one from the same address.
 * - A deadline, not an idle timer: a connection must deliver each complete request (head and
 *   body) within io_timeout of being accepted or of its previous reply, and within timeout of
 *   the request's first byte. The clock runs while the connection is queued, so a client that
 *   trickles bytes holds a thread io_timeout at most, and every connection accepted before a
 *   given one is gone, answered or served within io_timeout of that one's accept: a client is
 *   served within io_timeout plus its own work whatever the others send. Bytes that had arrived
 *   when the deadline is checked count as delivered in time (a queued connection's request is
 *   not its fault). A request still arriving at its deadline gets 408; a connection with no
 *   bytes of a request is closed without a reply.
 * - Every error of this layer (400, 408, 413, 414, 429, 431, 501, 503, 505) is a reply built by
 *   the caller (sv_conn_ops.error), so it has the body every other error has; a reply is written
 *   once, head and body together, each header once (http1.c).
 * - Bodies are taken from the caller's pool (jmem.h) as they arrive: a body the pool can never
 *   hold is 413, one it cannot hold now 429.
 * - Shutdown (sv_listen_quiesce, then sv_listen_drain): the listening socket is shut at once (the
 *   kernel refuses new connections), queued connections are closed (503 when they sent bytes),
 *   idle ones closed, ones still receiving a request answered 503; connections with a request in
 *   hand finish it, each write bounded by io_timeout; at the force time every remaining socket is
 *   shut down, which ends every wait of every thread.
 *
 * Locking: one mutex per listener guards the connection list and counters; no callback is made
 * with it held, and sv_listen_expected may be called with other locks held (the executor's). */
#ifndef ES_SERVE_CONN_H
#define ES_SERVE_CONN_H

#include "serve/http1.h"
#include "serve/jmem.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sv_conn sv_conn;
typedef struct sv_listener sv_listener;

/* A request body: p[0..len) and a NUL after it; its bytes taken from pool. */
typedef struct sv_body {
    char *p;
    size_t len;
    uint64_t charged; /* bytes taken from pool for it */
    sv_pool *pool;
} sv_body;

/* Frees the body and gives its bytes back to the pool (once; later calls do nothing). */
void sv_body_free(sv_body *b);

/* A reply, written by the connection layer. */
typedef struct sv_reply {
    int status;
    char *body;              /* malloc'd; freed by the connection layer */
    size_t len;
    const char *type;        /* Content-Type (static) */
    const char *retry_after; /* NULL, or a static value */
    const char *allow;       /* 405: the method the path takes (static) */
    bool close;              /* close the connection after it */
    bool silent;             /* nothing to write (the client left): counted as not sent */
    int ep;                  /* for the caller's metrics: the endpoint */
    int64_t tokens;          /* ... and the request's prompt tokens */
    void *hold;              /* the caller's: what to release once the reply is written */
} sv_reply;

typedef struct sv_conn_ops {
    void *user;
    /* A valid head arrived. true: read the body and call request; false: r is the reply (an
     * early refusal: route, method, key, state) and no body is read. */
    bool (*head)(void *user, const sv_head *h, sv_reply *r);
    /* The complete request; fills r. The callback may free the body early (sv_body_free). c
     * serves sv_conn_fd and sv_conn_queued while it runs. */
    void (*request)(void *user, sv_conn *c, const sv_head *h, sv_body *body, sv_reply *r);
    /* An error of the connection layer: status and a one-line message; h is NULL when no head
     * was parsed. Fills r. */
    void (*error)(void *user, const sv_head *h, int status, const char *msg, sv_reply *r);
    /* r was written whole (sent) or not (the peer left or did not read it in time): count it and
     * release r->hold. seconds: from the complete request to the end of the write. */
    void (*done)(void *user, const sv_reply *r, bool sent, double seconds);
} sv_conn_ops;

typedef struct sv_conn_opts {
    const char *host;        /* an IPv4 or IPv6 address */
    int port;                /* 0: a free one */
    int max_connections;     /* active connections (threads) */
    int max_per_ip;          /* active connections of one client address (0: no limit) */
    double io_timeout_s;     /* deadline of each request's delivery, and of each reply's write */
    double timeout_s;        /* a request's delivery ends within this of its first byte */
    uint64_t max_body_bytes; /* larger bodies: 413 */
    sv_pool *bodies;         /* bodies being received are taken from here */
} sv_conn_opts;

/* Binds, listens and starts accepting. NULL with a one-line reason in err on failure. */
sv_listener *sv_listen(const sv_conn_opts *o, const sv_conn_ops *ops, char *err, size_t err_len);
int sv_listen_port(const sv_listener *l);
/* Requests that may join a batch soon: connections queued, receiving a request, handling one
 * that is not yet queued for the executor, or writing a reply, and idle ones still open that
 * were accepted, or answered a model request (one with prompt tokens), less than window_ns ago:
 * a connection that polls /metrics or /health is not a client about to send a prompt. Any
 * thread. */
int sv_listen_expected(sv_listener *l, uint64_t window_ns);
/* Stops accepting and wakes every connection (see DESIGN). Returns at once. */
void sv_listen_quiesce(sv_listener *l);
/* Waits until every connection has ended, shutting down the sockets left at force_ns
 * (CLOCK_MONOTONIC); then stops the listener's thread. */
void sv_listen_drain(sv_listener *l, uint64_t force_ns);
/* Frees a drained listener (or one never started: NULL is a no-op). */
void sv_listen_free(sv_listener *l);

/* The connection's socket (to watch for the peer leaving). */
int sv_conn_fd(const sv_conn *c);
/* When the request being handled began to arrive (its first byte; CLOCK_MONOTONIC ns). */
uint64_t sv_conn_t0(const sv_conn *c);
/* The request is with the executor: it no longer counts in sv_listen_expected. */
void sv_conn_queued(sv_conn *c);

#endif
