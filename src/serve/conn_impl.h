/* What conn.c (a connection's thread) and listen.c (the listener: accepting, queueing,
 * starting and ending connections) share; private to them. conn.h has the design. */
#ifndef ES_SERVE_CONN_IMPL_H
#define ES_SERVE_CONN_IMPL_H

#include "serve/conn.h"

#include <limits.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

enum cx_state {
    CX_QUEUED,    /* accepted, waiting for a thread */
    CX_IDLE,      /* no byte of the next request yet */
    CX_RECEIVING, /* a request is arriving */
    CX_HANDLING,  /* a complete request, not yet with the executor */
    CX_WAITING,   /* with the executor */
    CX_WRITING,   /* writing the reply (the connection stays open) */
    CX_CLOSING,   /* writing a reply that closes the connection, then draining what the client
                   * still sends (holding no slot by then) */
};

/* A client address and its connections (the per-address cap). */
typedef struct ipent {
    unsigned char key[16]; /* IPv6, or IPv4 mapped into it */
    int active;            /* connections of this address with a thread */
    int refs;              /* connections of this address, queued or active */
} ipent;

struct sv_conn {
    sv_listener *l;
    sv_conn *prev, *next; /* l's list, in accept order */
    sv_conn *done_next;   /* l->finished: ended, to be joined */
    int fd;
    unsigned char key[16]; /* the client's address */
    ipent *ip;
    uint64_t accepted_ns;
    uint64_t last_ns; /* accepted, or the end of the last reply */
    uint64_t model_ns; /* accepted, or the end of the last reply to a model request (0 after
                        * any other: a scraper of /metrics sends no prompt) */
    uint64_t t_first; /* the first byte of the request in hand */
    enum cx_state state;
    bool released; /* its slot (active, per address) given back before the end */
    pthread_t th;
};

struct sv_listener {
    sv_conn_opts o;
    char *host;
    sv_conn_ops ops;
    uint64_t io_ns, timeout_ns;
    int lfd, port;
    int wake[2]; /* wakes the listener's thread */
    int stop[2]; /* readable from quiesce on: every connection's poll sees it */
    pthread_t th;
    bool th_started;
    pthread_attr_t attr;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a connection ended */
    sv_conn *head, *tail;
    sv_conn *finished;
    int n_active, n_queued, max_queued;
    ipent **ips; /* open addressing; tomb marks a freed slot */
    size_t ips_cap, ips_used;
    _Atomic bool stopping;
    _Atomic uint64_t force_ns; /* from drain: no wait goes past it (UINT64_MAX: none yet) */
    bool quit;                 /* the listener's thread returns */
};

/* The thread of one connection: requests and replies until it closes (conn.c). */
void *sv_conn_main(void *arg);
/* c was answered and only drains its socket before closing: its slot goes to the next queued
 * connection now (listen.c). */
void sv_listen_conn_release(sv_conn *c);
/* The thread of c ends: c leaves the list, its socket is closed and the listener joins it
 * (listen.c). */
void sv_listen_conn_end(sv_conn *c);

static inline uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static inline uint64_t secs_ns(double s)
{
    return s >= 1e9 ? UINT64_MAX / 4 : (uint64_t)(s * 1e9);
}

static inline uint64_t min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

/* Milliseconds for poll() until deadline (at least 1 when it is in the future). */
static inline int ms_until(uint64_t deadline, uint64_t now)
{
    if (deadline <= now) return 0;
    const uint64_t ms = (deadline - now + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

static inline void wake(int fd)
{
    const char b = 1;
    if (write(fd, &b, 1) < 0) { /* full: a wake is pending anyway */
    }
}

#endif
