/* The listener (conn.h): accepting, the queue of connections and its per-address caps,
 * starting connection threads, and shutdown. A connection's own thread is conn.c. */
#include "serve/conn_impl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>

static ipent tomb;

/* ---- client addresses ----------------------------------------------------------------------- */

static size_t ip_hash(const unsigned char *k)
{
    uint64_t h = 1469598103934665603u; /* FNV-1a */
    for (int i = 0; i < 16; i++) h = (h ^ k[i]) * 1099511628211u;
    return (size_t)h;
}

static void ip_key(const struct sockaddr_storage *ss, unsigned char *k)
{
    memset(k, 0, 16);
    if (ss->ss_family == AF_INET6) {
        memcpy(k, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
    } else if (ss->ss_family == AF_INET) {
        k[10] = k[11] = 0xff; /* ::ffff:a.b.c.d, as an IPv6 socket sees the same client */
        memcpy(k + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
    }
}

/* The slot of key (its entry, or the free slot to put it in). Under the lock. */
static size_t ip_slot(const sv_listener *l, const unsigned char *k, bool *found)
{
    size_t h = ip_hash(k) & (l->ips_cap - 1), free_at = SIZE_MAX;
    for (; l->ips[h]; h = (h + 1) & (l->ips_cap - 1)) {
        if (l->ips[h] == &tomb) {
            if (free_at == SIZE_MAX) free_at = h;
        } else if (!memcmp(l->ips[h]->key, k, 16)) {
            *found = true;
            return h;
        }
    }
    *found = false;
    return free_at != SIZE_MAX ? free_at : h;
}

/* Rebuilds the table without its tombs (pointers to the entries stay valid). */
static void ip_rehash(sv_listener *l)
{
    ipent **old = l->ips;
    const size_t cap = l->ips_cap;
    ipent **t = calloc(cap, sizeof(*t));
    if (!t) return; /* keep the old one: probing still works, only slower */
    l->ips = t;
    l->ips_used = 0;
    for (size_t i = 0; i < cap; i++)
        if (old[i] && old[i] != &tomb) {
            bool found;
            l->ips[ip_slot(l, old[i]->key, &found)] = old[i];
            l->ips_used++;
        }
    free(old);
}

/* The entry of the address (a reference taken), NULL when out of memory. Under the lock. */
static ipent *ip_get(sv_listener *l, const unsigned char *k)
{
    bool found;
    const size_t s = ip_slot(l, k, &found);
    if (found) {
        l->ips[s]->refs++;
        return l->ips[s];
    }
    ipent *e = calloc(1, sizeof(*e));
    if (!e) return NULL;
    memcpy(e->key, k, 16);
    e->refs = 1;
    if (!l->ips[s]) l->ips_used++;
    l->ips[s] = e;
    if (l->ips_used > l->ips_cap / 4 * 3) ip_rehash(l);
    return e;
}

static void ip_put(sv_listener *l, ipent *e)
{
    if (--e->refs > 0) return;
    bool found;
    const size_t s = ip_slot(l, e->key, &found);
    if (found) l->ips[s] = &tomb;
    free(e);
}

/* The thread of c ends: out of the list, then closed; the listener joins it. */
/* Gives c's slot back. Under the lock. */
static void release(sv_listener *l, sv_conn *c)
{
    if (c->released) return;
    c->released = true;
    c->ip->active--;
    l->n_active--;
}

void sv_listen_conn_release(sv_conn *c)
{
    sv_listener *l = c->l;
    pthread_mutex_lock(&l->mu);
    release(l, c);
    c->state = CX_CLOSING;
    pthread_mutex_unlock(&l->mu);
    wake(l->wake[1]);
}

void sv_listen_conn_end(sv_conn *c)
{
    sv_listener *l = c->l;
    const int fd = c->fd;
    pthread_mutex_lock(&l->mu);
    if (c->prev) c->prev->next = c->next;
    else l->head = c->next;
    if (c->next) c->next->prev = c->prev;
    else l->tail = c->prev;
    release(l, c);
    ip_put(l, c->ip);
    c->done_next = l->finished;
    l->finished = c;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    close(fd); /* after leaving the list: the force and sv_listen_expected use listed fds only */
    wake(l->wake[1]);
}

/* ---- the listener's thread: accepting, queueing, starting connections ----------------------- */

/* Closes a queued connection that never got a thread: 503 when it sent bytes (best effort, the
 * listener never blocks), silently when not. Outside the lock. */
static void refuse_queued(sv_listener *l, sv_conn *c, const char *msg)
{
    char b;
    if (recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 1) {
        sv_reply r = {0};
        l->ops.error(l->ops.user, NULL, 503, msg, &r);
        r.retry_after = "1";
        char head[512];
        const size_t hl = sv_http_reply_head(head, sizeof(head), 503, r.type ? r.type :
                                             "application/json", r.len, r.retry_after, NULL, true);
        struct iovec iov[2] = {{head, hl}, {r.body, r.len}};
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
        const ssize_t k = sendmsg(c->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        l->ops.done(l->ops.user, &r, k == (ssize_t)(hl + r.len), 0);
        free(r.body);
        shutdown(c->fd, SHUT_WR);
    }
    close(c->fd);
    free(c);
}

/* Takes c out of the list (queued: it has no thread). Under the lock. */
static void unlink_queued(sv_listener *l, sv_conn *c)
{
    if (c->prev) c->prev->next = c->next;
    else l->head = c->next;
    if (c->next) c->next->prev = c->prev;
    else l->tail = c->prev;
    ip_put(l, c->ip);
    l->n_queued--;
}

/* Starts threads for the oldest queued connections whose address is under its cap. Under the
 * lock. */
static void schedule(sv_listener *l)
{
    for (sv_conn *c = l->head; c && l->n_active < l->o.max_connections; c = c->next) {
        if (c->state != CX_QUEUED) continue;
        if (l->o.max_per_ip > 0 && c->ip->active >= l->o.max_per_ip) continue;
        /* counted first: the thread's first set_state waits for this lock anyway */
        c->state = CX_IDLE;
        c->ip->active++;
        l->n_queued--;
        l->n_active++;
        if (pthread_create(&c->th, &l->attr, sv_conn_main, c)) { /* retried at the next wake */
            c->state = CX_QUEUED;
            c->ip->active--;
            l->n_queued++;
            l->n_active--;
            break;
        }
    }
}

static void *listener_main(void *arg)
{
    sv_listener *l = arg;
    bool accepting = true, starved = false;
    pthread_mutex_lock(&l->mu);
    while (!l->quit) {
        /* join the threads that ended */
        while (l->finished) {
            sv_conn *c = l->finished;
            l->finished = c->done_next;
            pthread_mutex_unlock(&l->mu);
            pthread_join(c->th, NULL);
            free(c);
            starved = false; /* a descriptor was freed */
            pthread_mutex_lock(&l->mu);
            pthread_cond_broadcast(&l->cv); /* drain waits for the joins */
        }
        const bool stopping = atomic_load(&l->stopping);
        /* first the free slots go to the oldest queued connections, even past their deadline
         * (what they sent counts as in time: conn.h); then the queued ones past their deadline
         * and a grace, or all of them once stopping, are refused. Every connection accepted
         * before one is gone by that one's deadline, so the grace only covers the moment
         * between a slot's release and the listener's wake */
        if (!stopping) schedule(l);
        sv_conn *expired = NULL;
        const uint64_t now = now_ns(), grace = 250000000u;
        uint64_t next = UINT64_MAX;
        for (sv_conn *c = l->head, *n; c; c = n) {
            n = c->next;
            if (c->state != CX_QUEUED) continue;
            const uint64_t dl = c->accepted_ns + l->io_ns + grace;
            if (stopping || dl <= now) {
                unlink_queued(l, c);
                c->next = expired;
                expired = c;
            } else if (dl < next) next = dl;
        }
        if (stopping && accepting) {
            accepting = false;
            close(l->lfd); /* quiesce shut it down already; only this thread polls it */
            l->lfd = -1;
        }
        /* connections this round may take: the rest wait in the kernel's backlog, in order */
        const int room = l->o.max_connections + l->max_queued - l->n_active - l->n_queued;
        pthread_mutex_unlock(&l->mu);
        for (sv_conn *c = expired, *n; c; c = n) {
            n = c->next;
            refuse_queued(l, c, stopping ? "the server is shutting down"
                                         : "the server is busy: no connection became free within "
                                           "--io-timeout; retry later");
        }
        struct pollfd p[2] = {{.fd = l->wake[0], .events = POLLIN},
                              {.fd = accepting && room > 0 && !starved ? l->lfd : -1,
                               .events = POLLIN}};
        poll(p, 2, next == UINT64_MAX ? -1 : ms_until(next, now_ns()));
        if (p[0].revents) {
            char b[64];
            while (read(l->wake[0], b, sizeof(b)) > 0) {
            }
        }
        sv_conn *fresh = NULL, **tail = &fresh;
        int n_fresh = 0;
        while (p[1].revents && n_fresh < 64 && n_fresh < room) {
            struct sockaddr_storage ss;
            socklen_t sl = sizeof(ss);
            const int fd =
                accept4(l->lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd < 0) {
                /* out of descriptors: wait for a connection to end rather than spin */
                if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                    starved = true;
                if (errno == EINTR || errno == ECONNABORTED) continue;
                break;
            }
            const int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            sv_conn *c = calloc(1, sizeof(*c));
            if (!c) {
                close(fd);
                break;
            }
            c->l = l;
            c->fd = fd;
            c->accepted_ns = c->last_ns = c->model_ns = now_ns();
            ip_key(&ss, c->key);
            *tail = c;
            tail = &c->next;
            n_fresh++;
        }
        pthread_mutex_lock(&l->mu);
        for (sv_conn *c = fresh, *n; c; c = n) {
            n = c->next;
            c->ip = ip_get(l, c->key);
            if (!c->ip) {
                close(c->fd);
                free(c);
                continue;
            }
            c->state = CX_QUEUED;
            c->next = NULL;
            c->prev = l->tail;
            if (l->tail) l->tail->next = c;
            else l->head = c;
            l->tail = c;
            l->n_queued++;
        }
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ---- the listener's life -------------------------------------------------------------------- */

sv_listener *sv_listen(const sv_conn_opts *o, const sv_conn_ops *ops, char *err, size_t err_len)
{
    sv_listener *l = calloc(1, sizeof(*l));
    if (!l || !(l->host = strdup(o->host))) {
        free(l);
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    l->o = *o;
    l->o.host = l->host;
    l->ops = *ops;
    l->io_ns = secs_ns(o->io_timeout_s);
    l->timeout_ns = secs_ns(o->timeout_s);
    l->lfd = -1;
    l->wake[0] = l->wake[1] = l->stop[0] = l->stop[1] = -1;
    atomic_store(&l->force_ns, UINT64_MAX);
    pthread_mutex_init(&l->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_attr_init(&l->attr);
    /* Jansson parses nested values recursively (2,048 levels at most): 512 KiB holds that */
    pthread_attr_setstacksize(&l->attr, (size_t)512 << 10);

    /* queued connections hold descriptors: up to four times the active ones, as many as the
     * limit of open files allows once its soft value is raised to the hard one */
    const uint64_t want = (uint64_t)o->max_connections * 5 + 256;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = want < rl.rlim_max ? want : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    uint64_t avail = 0;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur > (uint64_t)o->max_connections + 256)
        avail = rl.rlim_cur - (uint64_t)o->max_connections - 256;
    const uint64_t q = (uint64_t)o->max_connections * 4;
    l->max_queued = (int)(q < avail ? q : avail);
    l->ips_cap = 16;
    while (l->ips_cap < 2 * ((size_t)o->max_connections + (size_t)l->max_queued) + 16)
        l->ips_cap *= 2;
    l->ips = calloc(l->ips_cap, sizeof(*l->ips));

    struct sockaddr_storage ss = {0};
    socklen_t sl = 0;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, o->host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)o->port);
        sl = sizeof(*a4);
    } else if (inet_pton(AF_INET6, o->host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)o->port);
        sl = sizeof(*a6);
    } else {
        snprintf(err, err_len, "--host %s is not an IPv4 or IPv6 address", o->host);
        goto fail;
    }
    if (!l->ips || pipe2(l->wake, O_CLOEXEC | O_NONBLOCK) ||
        pipe2(l->stop, O_CLOEXEC | O_NONBLOCK)) {
        snprintf(err, err_len, "out of memory or descriptors");
        goto fail;
    }
    l->lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    const int one = 1;
    if (l->lfd < 0 || setsockopt(l->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
        bind(l->lfd, (struct sockaddr *)&ss, sl) || listen(l->lfd, SOMAXCONN)) {
        snprintf(err, err_len, "cannot listen on %s port %d: %s", o->host, o->port,
                 strerror(errno));
        goto fail;
    }
    sl = sizeof(ss);
    getsockname(l->lfd, (struct sockaddr *)&ss, &sl);
    l->port = ntohs(ss.ss_family == AF_INET6 ? a6->sin6_port : a4->sin_port);
    if (pthread_create(&l->th, NULL, listener_main, l)) {
        snprintf(err, err_len, "cannot start a thread");
        goto fail;
    }
    l->th_started = true;
    return l;
fail:
    sv_listen_free(l);
    return NULL;
}

int sv_listen_port(const sv_listener *l)
{
    return l->port;
}

/* The peer closed or reset the connection (its next request's bytes do not count). */
static bool hung_up(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR | POLLNVAL | POLLRDHUP));
}

int sv_listen_expected(sv_listener *l, uint64_t window_ns)
{
    const uint64_t now = now_ns();
    int n = 0;
    pthread_mutex_lock(&l->mu);
    for (const sv_conn *c = l->head; c; c = c->next) switch (c->state) {
        case CX_QUEUED:
        case CX_RECEIVING:
        case CX_HANDLING: n++; break;
        /* a client that read its reply and hung up (to send the next request on a new
         * connection) while this thread was still to leave the write sends nothing more here */
        case CX_WRITING: n += !hung_up(c->fd); break;
        case CX_IDLE: n += now - c->model_ns < window_ns && !hung_up(c->fd); break;
        case CX_WAITING:
        case CX_CLOSING: break;
        }
    pthread_mutex_unlock(&l->mu);
    return n;
}

void sv_listen_quiesce(sv_listener *l)
{
    pthread_mutex_lock(&l->mu);
    const bool was = atomic_exchange(&l->stopping, true);
    /* the kernel refuses new connections from now on (the listener's thread closes it) */
    if (!was && l->lfd >= 0) shutdown(l->lfd, SHUT_RDWR);
    pthread_mutex_unlock(&l->mu);
    if (was) return;
    wake(l->stop[1]);
    wake(l->wake[1]);
}

void sv_listen_drain(sv_listener *l, uint64_t force_ns)
{
    sv_listen_quiesce(l);
    atomic_store(&l->force_ns, force_ns);
    pthread_mutex_lock(&l->mu);
    bool forced = false;
    while (l->head || l->finished) {
        const uint64_t now = now_ns();
        if (!forced && now >= force_ns) {
            /* every wait of a connection's thread ends on a shut socket */
            forced = true;
            for (const sv_conn *c = l->head; c; c = c->next)
                if (c->state != CX_QUEUED) shutdown(c->fd, SHUT_RDWR);
        }
        const uint64_t until = forced ? now + 100000000u : force_ns;
        const struct timespec ts = {(time_t)(until / 1000000000u), (long)(until % 1000000000u)};
        pthread_cond_timedwait(&l->cv, &l->mu, &ts);
    }
    l->quit = true;
    pthread_mutex_unlock(&l->mu);
    wake(l->wake[1]);
    pthread_join(l->th, NULL);
    l->th_started = false;
}

void sv_listen_free(sv_listener *l)
{
    if (!l) return;
    if (l->th_started) sv_listen_drain(l, 0);
    if (l->lfd >= 0) close(l->lfd);
    for (int i = 0; i < 2; i++) {
        if (l->wake[i] >= 0) close(l->wake[i]);
        if (l->stop[i] >= 0) close(l->stop[i]);
    }
    free(l->ips);
    pthread_attr_destroy(&l->attr);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free(l->host);
    free(l);
}
