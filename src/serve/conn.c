/* A connection's thread (conn.h): reading each request within its deadline, handing it to the
 * caller, writing the reply, keep-alive; the listener that starts these threads is listen.c. */
#include "serve/conn_impl.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

/* ---- connections: state, replies, the end --------------------------------------------------- */

static void set_state(sv_conn *c, enum cx_state s)
{
    pthread_mutex_lock(&c->l->mu);
    c->state = s;
    pthread_mutex_unlock(&c->l->mu);
}

int sv_conn_fd(const sv_conn *c)
{
    return c->fd;
}

uint64_t sv_conn_t0(const sv_conn *c)
{
    return c->t_first;
}

void sv_conn_queued(sv_conn *c)
{
    set_state(c, CX_WAITING);
}

void sv_body_free(sv_body *b)
{
    if (b->pool && b->charged) sv_pool_give(b->pool, b->charged);
    free(b->p);
    *b = (sv_body){.pool = b->pool};
}

/* Writes the whole of iov (n parts) before deadline; false when the peer left or did not read
 * in time. The socket is non-blocking. */
static bool write_all(int fd, struct iovec *iov, int n, uint64_t deadline)
{
    while (n > 0) {
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        const ssize_t k = sendmsg(fd, &m, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && errno == EAGAIN) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            const uint64_t now = now_ns();
            if (now >= deadline || poll(&p, 1, ms_until(deadline, now)) < 0) return false;
            if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return false;
            continue;
        }
        if (k <= 0) return false;
        size_t left = (size_t)k;
        while (n > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return true;
}

/* Writes r (no body for HEAD) within io_timeout, never past the force time. Returns whether it
 * was written whole; r->close is set when the connection ends after it. */
static bool send_reply(sv_conn *c, const sv_head *h, sv_reply *r)
{
    sv_listener *l = c->l;
    if (r->silent) return false;
    r->close = r->close || !h || !h->keep_alive || atomic_load(&l->stopping);
    /* a client whose connection stays open may send its next request once it reads this one
     * (sv_listen_expected counts it); one whose connection closes will not */
    set_state(c, r->close ? CX_CLOSING : CX_WRITING);
    char head[512];
    const size_t hl = sv_http_reply_head(head, sizeof(head), r->status,
                                         r->type ? r->type : "application/json", r->len,
                                         r->retry_after, r->allow, r->close);
    struct iovec iov[2] = {{head, hl}, {r->body, h && h->head_only ? 0 : r->len}};
    const uint64_t deadline = min_u64(now_ns() + l->io_ns, atomic_load(&l->force_ns));
    return hl && write_all(c->fd, iov, iov[1].iov_len ? 2 : 1, deadline);
}

/* An error of this layer: the caller's reply for it, written, counted. */
static bool reply_error(sv_conn *c, const sv_head *h, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static bool reply_error(sv_conn *c, const sv_head *h, int status, const char *fmt, ...)
{
    sv_listener *l = c->l;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    sv_reply r = {0};
    l->ops.error(l->ops.user, h, status, msg, &r);
    r.close = true;
    const bool sent = send_reply(c, h, &r);
    l->ops.done(l->ops.user, &r, sent, 0);
    free(r.body);
    return sent;
}

/* After a reply that closes the connection: the client may still be sending (a body refused
 * before it was read). Closing with unread bytes makes the kernel send a reset, which can
 * destroy the reply before the client reads it; so the sending side is shut, and what arrives
 * is read and dropped until the client closes, for a second at most. */
static void linger(sv_conn *c)
{
    shutdown(c->fd, SHUT_WR);
    const uint64_t until = min_u64(now_ns() + 1000000000u, atomic_load(&c->l->force_ns));
    char tmp[4096];
    for (;;) {
        const ssize_t k = recv(c->fd, tmp, sizeof(tmp), MSG_DONTWAIT);
        if (k > 0 || (k < 0 && errno == EINTR)) continue;
        if (k == 0 || errno != EAGAIN) return;
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        const uint64_t now = now_ns();
        if (now >= until || poll(&p, 1, ms_until(until, now)) <= 0) return;
    }
}

/* ---- reading a request ---------------------------------------------------------------------- */

typedef struct rbuf {
    char *p;
    size_t len, cap;
} rbuf;

/* Makes room for `more` bytes after b->len (and a NUL); the growth is taken from pool when
 * given (body->charged counts it). 0, or 413/429/503 when it cannot grow. */
static int reserve(rbuf *b, size_t more, sv_body *charge)
{
    if (b->len + more + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more + 1) cap *= 2;
    if (charge) {
        const uint64_t grow = cap - b->cap;
        if (charge->charged + grow > charge->pool->cap) return 413;
        if (!sv_pool_take(charge->pool, grow)) return 429;
        charge->charged += grow;
    }
    char *p = realloc(b->p, cap);
    if (!p) return 503;
    b->p = p;
    b->cap = cap;
    return 0;
}

/* Reads what the socket holds now into b (at most `room` more bytes). Returns the count read,
 * 0 when the peer closed, -1 when nothing is there yet, -2 on an error. */
static ssize_t take_in(int fd, rbuf *b, size_t room)
{
    for (;;) {
        const ssize_t k = recv(fd, b->p + b->len, room, MSG_DONTWAIT);
        if (k < 0 && errno == EINTR) continue;
        if (k > 0) b->len += (size_t)k;
        return k >= 0 ? k : errno == EAGAIN ? -1 : -2;
    }
}

/* Waits until c's socket is readable (1), its deadline passes (0) or the server stops (-1). */
static int wait_in(sv_conn *c, uint64_t deadline)
{
    sv_listener *l = c->l;
    for (;;) {
        if (atomic_load(&l->stopping)) return -1;
        const uint64_t now = now_ns();
        if (now >= deadline) return 0;
        struct pollfd p[2] = {{.fd = c->fd, .events = POLLIN},
                              {.fd = l->stop[0], .events = POLLIN}};
        if (poll(p, 2, ms_until(deadline, now)) > 0 && p[0].revents) return 1;
    }
}

/* The 408 of a request that missed its deadline, saying which limit it missed. */
static bool reply_late(sv_conn *c, const sv_head *h, uint64_t t_first)
{
    const sv_listener *l = c->l;
    const bool by_timeout = t_first + l->timeout_ns < c->last_ns + l->io_ns;
    return reply_error(c, h, 408, "the request did not arrive whole within %g s (estream serve "
                       "%s)", by_timeout ? l->o.timeout_s : l->o.io_timeout_s,
                       by_timeout ? "--timeout" : "--io-timeout");
}

/* Reads the body of h into body; what follows it stays in rest. Returns 0, 1 when a reply was
 * sent instead (an error: the connection ends), or -1 when the peer left. A body refused gives
 * its bytes back to the pool before the reply goes out: a client that sends its next request
 * once it reads the refusal must find them free. */
static int read_body(sv_conn *c, const sv_head *h, rbuf *rest, sv_body *body, uint64_t deadline,
                     uint64_t t_first)
{
    sv_listener *l = c->l;
    const unsigned long long max = l->o.max_body_bytes, pool_cap = l->o.bodies->cap;
    if (!h->has_length && !h->chunked) return 0;
    if (h->has_length && h->content_length == 0) return 0;
    rbuf raw = {0}; /* the body as it arrives (decoded in place when chunked) */
    int st = 0;     /* the refusal's status: 400, 408, 413, 429, 503 */
    char msg[300] = "";
    const char *why = NULL;
    if (h->has_length) {
        const unsigned long long n = h->content_length;
        if (n > max) {
            snprintf(msg, sizeof(msg), "the body is %llu bytes, more than %llu (estream serve "
                     "--max-body)", n, max);
            st = 413;
            goto fail;
        }
        if (n >= pool_cap) {
            snprintf(msg, sizeof(msg), "the body is %llu bytes; this server holds at most %llu "
                     "bytes of request bodies at once (estream serve --request-mem)", n, pool_cap);
            st = 413;
            goto fail;
        }
        /* exactly its size: a doubling buffer could take twice the bytes from the pool */
        if (!sv_pool_take(l->o.bodies, n + 1)) {
            st = 429;
            goto fail;
        }
        body->charged = n + 1;
        if (!(raw.p = malloc((size_t)n + 1))) {
            st = 503;
            goto fail;
        }
        raw.cap = (size_t)n + 1;
        const size_t k = rest->len < n ? rest->len : (size_t)n;
        if (k) { /* rest->p is NULL when nothing followed the head */
            memcpy(raw.p, rest->p, k);
            memmove(rest->p, rest->p + k, rest->len - k);
        }
        raw.len = k;
        rest->len -= k;
    } else {
        /* the bytes after the head are the body's first raw bytes */
        raw = *rest;
        *rest = (rbuf){0};
        if (raw.cap) {
            if (!sv_pool_take(l->o.bodies, raw.cap)) {
                st = 429;
                goto fail;
            }
            body->charged = raw.cap;
        }
    }
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    bool continued = !h->expect_continue;
    sv_chunked ch = {0};
    size_t at = 0, out = 0; /* chunked: raw bytes decoded, data bytes kept */
    for (;;) {
        if (h->has_length && raw.len == h->content_length) break;
        if (h->chunked) {
            const int r = sv_chunked_decode(&ch, raw.p, raw.len, &at, &out, &why);
            if (r < 0) {
                snprintf(msg, sizeof(msg), "the chunked body is malformed: %s", why);
                st = 400;
                goto fail;
            }
            if (out > max || (ch.left && ch.left > max - out)) {
                snprintf(msg, sizeof(msg), "the body is larger than %llu bytes (estream serve "
                         "--max-body)", max);
                st = 413;
                goto fail;
            }
            /* the decoded data stays in front; undecoded bytes move down behind it */
            if (raw.len > at) memmove(raw.p + out, raw.p + at, raw.len - at);
            raw.len = out + (raw.len - at);
            at = out;
            if (r == 1) {
                if ((st = reserve(rest, raw.len - at, NULL))) goto fail;
                if (raw.len > at) memcpy(rest->p + rest->len, raw.p + at, raw.len - at);
                rest->len += raw.len - at;
                raw.len = out;
                break;
            }
            if ((st = reserve(&raw, 16384, body))) goto fail;
        }
        const size_t room =
            h->has_length ? (size_t)h->content_length - raw.len : raw.cap - 1 - raw.len;
        const ssize_t k = take_in(c->fd, &raw, room);
        if (k > 0) continue;
        if (k == 0 || k == -2) goto gone;
        if (!continued) {
            struct iovec iov = {(void *)cont, sizeof(cont) - 1};
            if (!write_all(c->fd, &iov, 1, min_u64(now_ns() + l->io_ns, deadline))) goto gone;
            continued = true;
        }
        const int w = wait_in(c, deadline);
        if (w > 0) continue;
        st = w < 0 ? 503 : 408;
        if (w < 0) snprintf(msg, sizeof(msg), "the server is shutting down");
        goto fail;
    }
    raw.p[raw.len] = 0;
    body->p = raw.p;
    body->len = raw.len;
    return 0;
fail:
    free(raw.p);
    sv_body_free(body);
    if (st == 408) return reply_late(c, h, t_first), 1;
    if (msg[0]) reply_error(c, h, st, "%s", msg);
    else if (st == 413)
        reply_error(c, h, 413, "the body is larger than this server holds at once for request "
                    "bodies, %llu bytes (estream serve --request-mem)", pool_cap);
    else if (st == 429)
        reply_error(c, h, 429, "the bodies being received hold the server's memory for request "
                    "bodies (estream serve --request-mem); retry later");
    else reply_error(c, h, 503, "out of memory");
    return 1;
gone:
    free(raw.p);
    return -1;
}

/* The thread of one connection: requests and replies until it closes. */
void *sv_conn_main(void *arg)
{
    sv_conn *c = arg;
    sv_listener *l = c->l;
    rbuf in = {0}; /* bytes of the next request (and of pipelined ones) */
    bool lingering = false;
    for (;;) {
        /* ---- the head: until its empty line, the deadline, or the server stopping */
        uint64_t t_first = in.len ? now_ns() : 0;
        set_state(c, in.len ? CX_RECEIVING : CX_IDLE);
        size_t end = 0;
        int st;
        while ((st = sv_http_head_end(in.p, in.len, &end)) < 0) {
            if (reserve(&in, 4096, NULL)) goto out;
            const size_t room = in.cap - 1 - in.len;
            const ssize_t k = take_in(c->fd, &in, room < SV_HEAD_MAX ? room : SV_HEAD_MAX);
            if (k > 0) {
                if (!t_first) {
                    t_first = now_ns();
                    set_state(c, CX_RECEIVING);
                }
                continue;
            }
            if (k == 0 || k == -2) goto out;
            const uint64_t deadline =
                min_u64(c->last_ns + l->io_ns, t_first ? t_first + l->timeout_ns : UINT64_MAX);
            const int w = wait_in(c, deadline);
            if (w > 0) continue;
            /* nothing of a request arrived: close without a reply (a keep-alive client that
             * reads an unasked-for reply would take it for its next request's) */
            if (t_first) lingering = w < 0 ? reply_error(c, NULL, 503, "the server is shutting "
                                                         "down")
                                           : reply_late(c, NULL, t_first);
            goto out;
        }
        char why[200];
        if (st == 414 || st == 431) {
            lingering = reply_error(c, NULL, st, st == 414 ? "the request line is longer than "
                                    "%u bytes" : "the request head is larger than %u bytes",
                                    st == 414 ? SV_TARGET_MAX : SV_HEAD_MAX);
            goto out;
        }
        sv_head h;
        if ((st = sv_http_parse_head(in.p, end, &h, why, sizeof(why)))) {
            /* a head whose request line was read still names its endpoint (for the counts) */
            const sv_head part = {.method = h.method, .path = h.path};
            lingering = reply_error(c, h.path ? &part : NULL, st, "%s", why);
            goto out;
        }
        /* the head's strings point into in.p[0..end): the rest moves to its own buffer */
        rbuf rest = {0};
        if (in.len > end && reserve(&rest, in.len - end, NULL)) goto out;
        if (in.len > end) memcpy(rest.p, in.p + end, in.len - end);
        rest.len = in.len - end;

        sv_reply r = {0};
        sv_body body = {.pool = l->o.bodies};
        bool sent = false, served = false;
        c->t_first = t_first; /* set: a complete head has bytes */
        const uint64_t deadline = min_u64(c->last_ns + l->io_ns, t_first + l->timeout_ns);
        double secs = 0;
        if (!l->ops.head(l->ops.user, &h, &r)) {
            /* refused before its body: the body is not read, so the connection cannot go on */
            r.close = r.close || h.has_length || h.chunked;
            sent = send_reply(c, &h, &r);
            served = true;
        } else {
            const int b = read_body(c, &h, &rest, &body, deadline, t_first);
            if (b == 0) {
                const uint64_t t_done = now_ns();
                set_state(c, CX_HANDLING);
                l->ops.request(l->ops.user, c, &h, &body, &r);
                sv_body_free(&body);
                sent = send_reply(c, &h, &r);
                secs = (double)(now_ns() - t_done) * 1e-9;
                served = true;
            }
            sv_body_free(&body); /* a body refused or cut short gives its bytes back too */
            lingering = b == 1;
        }
        if (served) {
            l->ops.done(l->ops.user, &r, sent, secs);
            lingering = sent && r.close;
        }
        free(r.body);
        free(in.p);
        in = rest;
        if (!served || !sent || r.close) break;
        pthread_mutex_lock(&l->mu);
        c->last_ns = now_ns();
        c->model_ns = r.tokens > 0 ? c->last_ns : 0;
        pthread_mutex_unlock(&l->mu);
    }
out:
    if (lingering) {
        sv_listen_conn_release(c);
        linger(c);
    }
    free(in.p);
    sv_listen_conn_end(c);
    return NULL;
}
