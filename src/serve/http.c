/* The HTTP surface of estream serve on libmicrohttpd: routing, the API key, body limits, the
 * wait for the executor, replies and shutdown.
 *
 * DESIGN
 * - One thread per connection (MHD_USE_THREAD_PER_CONNECTION), at most --max-connections: a
 *   connection parses its body and tokenizes its prompts on its own thread, then waits for the
 *   executor while polling its socket, so a client that hangs up is seen within 20 ms and its
 *   units are dropped (exec.h). Slow clients hold only their own thread: a connection idle for
 *   --io-timeout seconds is closed by the library, and a body still arriving after --timeout
 *   seconds is refused.
 * - Limits are checked as early as the request allows: the API key and the route on the first
 *   call (before any body is read), Content-Length against --max-body before reading, the bytes
 *   as they come for chunked bodies, then tokens and memory after parsing, and the queue at
 *   admission (429 with Retry-After).
 * - Shutdown: the daemon stops listening (MHD_quiesce_daemon); requests that arrive on open
 *   connections get 503; the requests in flight are answered; then the daemon stops.
 */
#include "serve/api.h"
#include "serve/serve.h"

#include <microhttpd.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

enum { LOADING = 0, READY = 1, STOPPING = 2 };

struct serve {
    serve_opts o;
    char *host, *api_key, *model_name;
    struct MHD_Daemon *d;
    int port;
    _Atomic int state;
    sv_metrics mx;
    sv_api_env env;
    sv_exec *x;
    sv_exec *x_for_abort; /* the abort callback's view (set once the executor exists) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool shutdown;
    int in_flight; /* requests between their first call and their reply */
    _Atomic uint64_t body_bytes; /* bodies being received, at most request_mem_bytes */
};

/* Per request (MHD's con_cls). */
typedef struct conn {
    int ep;
    bool post;
    char *body;
    size_t len, cap;
    bool too_big, slow, busy; /* over --max-body; over --timeout; bodies hold the memory */
    uint64_t t0;
    int early_status; /* a reply decided on the first call (0: none) */
    sv_err early;
    const char *allow; /* 405: the method the route takes */
} conn;

serve_opts serve_default_opts(void)
{
    return (serve_opts){
        .host = "127.0.0.1",
        .port = 8080,
        .model_name = "estream",
        .max_queue = 256,
        .batch_wait_ms = 50,
        .max_connections = 128,
        .max_body_bytes = 32u << 20,
        .max_request_tokens = 1 << 18,
        .timeout_s = 600,
        .io_timeout_s = 30,
        .request_mem_bytes = 0, /* chosen by the CLI from the budget */
        .pooling = ES_POOLING_MEAN,
        .normalize = 1,
    };
}

typedef struct route { const char *path; bool post; int ep; } route;
static const route routes[] = {
    {"/v1/completions", true, SV_EP_COMPLETIONS},
    {"/v1/embeddings", true, SV_EP_EMBEDDINGS},
    {"/v1/score", true, SV_EP_SCORE},
    {"/v1/classify", true, SV_EP_CLASSIFY},
    {"/v1/chat/completions", true, SV_EP_CHAT},
    {"/v1/rerank", true, SV_EP_RERANK},
    {"/rerank", true, SV_EP_RERANK_TEI},
    {"/tokenize", true, SV_EP_TOKENIZE},
    {"/detokenize", true, SV_EP_DETOKENIZE},
    {"/v1/models", false, SV_EP_MODELS},
    {"/tokenizer_info", false, SV_EP_TOKENIZER_INFO},
    {"/health", false, SV_EP_HEALTH},
    {"/metrics", false, SV_EP_METRICS},
};

/* ---- replies ---- */

static enum MHD_Result send_text(struct MHD_Connection *c, int status, char *text, size_t len,
                                 const char *type, const char *retry_after, const char *allow)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    if (retry_after) MHD_add_response_header(r, "Retry-After", retry_after);
    if (allow) MHD_add_response_header(r, "Allow", allow);
    const enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result send_json(struct MHD_Connection *c, int status, json_t *j,
                                 const char *retry_after, const char *allow)
{
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9))
                : NULL;
    json_decref(j);
    if (!s) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                  "\"server_error\",\"param\":null,\"code\":null}}";
        char *t = strdup(oom);
        return t ? send_text(c, 503, t, sizeof(oom) - 1, "application/json", "1", NULL) : MHD_NO;
    }
    const size_t n = strlen(s);
    char *t = realloc(s, n + 2); /* a newline, as curl users expect */
    if (t) {
        t[n] = '\n';
        s = t;
    }
    return send_text(c, status, s, n + (t != NULL), "application/json", retry_after, allow);
}

static enum MHD_Result send_err(serve *sv, struct MHD_Connection *c, conn *k, const sv_err *e,
                                int64_t tokens)
{
    sv_metrics_request(&sv->mx, k->ep, e->status, tokens,
                       (double)(sv_now_ns() - k->t0) * 1e-9);
    const char *retry = e->status == 429 || e->status == 503 ? "1" : NULL;
    return send_json(c, e->status, sv_err_body(e), retry, k->allow);
}

/* ---- the API key ---- */

/* Compares in time that depends only on the lengths' maximum, never on where they differ. */
static bool key_equal(const char *a, const char *b)
{
    const size_t na = strlen(a), nb = strlen(b), n = na > nb ? na : nb;
    unsigned char d = (unsigned char)(na != nb);
    for (size_t i = 0; i < n; i++) {
        const unsigned char x = i < na ? (unsigned char)a[i] : 0;
        const unsigned char y = i < nb ? (unsigned char)b[i] : 0;
        d |= x ^ y;
    }
    return d == 0;
}

static bool authorized(const serve *sv, struct MHD_Connection *c)
{
    if (!sv->api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    while (*h == ' ') h++;
    return key_equal(h, sv->api_key);
}

/* ---- waiting ---- */

typedef struct watch { int fd; } watch;

/* The peer closed or reset the connection (a pipelined request's bytes do not count). */
static bool peer_gone(void *user)
{
    const watch *w = user;
    if (w->fd < 0) return false;
    struct pollfd p = {.fd = w->fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL | POLLRDHUP)) return true;
    char b;
    const ssize_t k = recv(w->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return k == 0;
}

static enum MHD_Result run_model(serve *sv, struct MHD_Connection *c, conn *k, json_t *body)
{
    sv_err e = {0};
    sv_req *q = sv_api_parse(&sv->env, k->ep, body, k->len, &e);
    if (!q) return send_err(sv, c, k, &e, 0);
    if (q->mem_bytes > sv->o.request_mem_bytes) {
        sv_fail(&e, 413, NULL, "the request needs about %.1f MiB of the server's %.1f MiB for "
                "requests (estream serve --request-mem): send fewer or shorter prompts",
                (double)q->mem_bytes / 1048576.0, (double)sv->o.request_mem_bytes / 1048576.0);
        const int64_t t = q->n_tokens;
        sv_req_free(q);
        return send_err(sv, c, k, &e, t);
    }
    const enum sv_submit adm = sv_exec_submit(sv->x, q);
    if (adm != SV_ADMITTED) {
        if (adm == SV_QUEUE_FULL)
            sv_fail(&e, 429, NULL, "the server's queue is full (%d requests, estream serve "
                    "--max-queue); retry later", sv->o.max_queue);
        else if (adm == SV_MEM_FULL)
            sv_fail(&e, 429, NULL, "the requests in flight hold the server's memory for "
                    "requests (estream serve --request-mem); retry later");
        else sv_fail(&e, 503, NULL, "the server is shutting down");
        const int64_t t = q->n_tokens;
        sv_req_free(q);
        return send_err(sv, c, k, &e, t);
    }
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    watch w = {ci ? ci->connect_fd : -1};
    const uint64_t deadline = k->t0 + (uint64_t)(sv->o.timeout_s * 1e9);
    const enum sv_state st = sv_exec_wait(sv->x, q, deadline, peer_gone, &w);
    const int64_t tokens = q->n_tokens;
    if (st == SV_DONE) {
        json_t *reply = sv_api_reply(&sv->env, q);
        sv_exec_leave(sv->x, q);
        if (!reply) {
            sv_fail(&e, 503, NULL, "out of memory while writing the reply");
            return send_err(sv, c, k, &e, tokens);
        }
        sv_metrics_request(&sv->mx, k->ep, 200, tokens, (double)(sv_now_ns() - k->t0) * 1e-9);
        return send_json(c, 200, reply, NULL, NULL);
    }
    if (st == SV_FAILED) {
        sv_fail(&e, q->fail_status, NULL, "%s", q->fail_msg);
        sv_exec_leave(sv->x, q);
        return send_err(sv, c, k, &e, tokens);
    }
    const bool gone = peer_gone(&w);
    sv_exec_leave(sv->x, q);
    if (gone) {
        sv_metrics_request(&sv->mx, k->ep, 499, tokens, (double)(sv_now_ns() - k->t0) * 1e-9);
        return MHD_NO; /* nobody to answer: close */
    }
    sv_fail(&e, 504, NULL, "the request did not finish within %g s (estream serve --timeout)",
            sv->o.timeout_s);
    return send_err(sv, c, k, &e, tokens);
}

/* The reply to a complete request. */
static enum MHD_Result dispatch(serve *sv, struct MHD_Connection *c, conn *k)
{
    sv_err e = {0};
    if (k->too_big) {
        sv_fail(&e, 413, NULL, "the body is larger than %zu bytes (estream serve --max-body)",
                sv->o.max_body_bytes);
        return send_err(sv, c, k, &e, 0);
    }
    if (k->busy) {
        sv_fail(&e, 429, NULL, "the bodies being received hold the server's memory for requests "
                "(estream serve --request-mem); retry later");
        return send_err(sv, c, k, &e, 0);
    }
    if (k->slow) {
        sv_fail(&e, 408, NULL, "the body took longer than %g s to arrive", sv->o.timeout_s);
        return send_err(sv, c, k, &e, 0);
    }
    if (k->ep == SV_EP_HEALTH) {
        const int s = atomic_load(&sv->state);
        const int status = s == READY ? 200 : 503;
        sv_metrics_request(&sv->mx, k->ep, status, 0, 0);
        return send_json(c, status,
                         json_pack("{s:s}", "status",
                                   s == READY ? "ok" : s == LOADING ? "loading" : "stopping"),
                         status == 503 ? "1" : NULL, NULL);
    }
    if (k->ep == SV_EP_METRICS) {
        size_t n;
        char *t = sv_metrics_text(&sv->mx, &n);
        if (!t) {
            sv_fail(&e, 503, NULL, "out of memory");
            return send_err(sv, c, k, &e, 0);
        }
        sv_metrics_request(&sv->mx, k->ep, 200, 0, 0);
        return send_text(c, 200, t, n, "text/plain; version=0.0.4", NULL, NULL);
    }
    json_t *body = NULL;
    if (k->post) {
        json_error_t je;
        body = json_loadb(k->body ? k->body : "", k->len, 0, &je);
        if (!body) {
            sv_fail(&e, 400, NULL, "the body is not valid JSON: %s (line %d, column %d)", je.text,
                    je.line, je.column);
            return send_err(sv, c, k, &e, 0);
        }
    }
    enum MHD_Result r;
    if (k->ep <= SV_EP_LAST_MODEL) {
        r = run_model(sv, c, k, body);
    } else {
        json_t *reply = sv_api_direct(&sv->env, k->ep, body, &e);
        if (reply) {
            sv_metrics_request(&sv->mx, k->ep, 200, 0, 0);
            r = send_json(c, 200, reply, NULL, NULL);
        } else r = send_err(sv, c, k, &e, 0);
    }
    json_decref(body);
    return r;
}

/* The first call of a request: its route, the key, the state, the declared length. Returns the
 * early error (status 0: none). */
static void first_call(serve *sv, struct MHD_Connection *c, conn *k, const char *url,
                       const char *method)
{
    k->ep = SV_EP_OTHER;
    const route *rt = NULL;
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
        if (!strcmp(url, routes[i].path)) rt = &routes[i];
    if (!rt) {
        k->early_status = 404;
        sv_fail(&k->early, 404, NULL, "no such endpoint: %s %s", method, url);
        return;
    }
    k->ep = rt->ep;
    k->post = rt->post;
    if (strcmp(method, rt->post ? "POST" : "GET") && !(rt->post == false && !strcmp(method, "HEAD"))) {
        k->early_status = 405;
        k->allow = rt->post ? "POST" : "GET";
        sv_fail(&k->early, 405, NULL, "%s takes %s, not %s", url, k->allow, method);
        return;
    }
    if (rt->ep == SV_EP_HEALTH) return;
    if (!authorized(sv, c)) {
        k->early_status = 401;
        sv_fail(&k->early, 401, NULL, "a valid API key is required: send the header "
                                      "\"Authorization: Bearer KEY\"");
        return;
    }
    const int s = atomic_load(&sv->state);
    if (s != READY && rt->ep != SV_EP_METRICS) {
        k->early_status = 503;
        sv_fail(&k->early, 503, NULL, s == LOADING ? "the model is still loading"
                                                   : "the server is shutting down");
        return;
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > sv->o.max_body_bytes) {
        k->early_status = 413;
        sv_fail(&k->early, 413, NULL, "the body is %s bytes, more than %zu (estream serve "
                "--max-body)", cl, sv->o.max_body_bytes);
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls)
{
    serve *sv = cls;
    conn *k = *con_cls;
    if (!k) {
        k = calloc(1, sizeof(*k));
        if (!k) return MHD_NO;
        k->t0 = sv_now_ns();
        *con_cls = k;
        pthread_mutex_lock(&sv->mu);
        sv->in_flight++;
        pthread_mutex_unlock(&sv->mu);
        first_call(sv, c, k, url, method);
        if (k->early_status) return send_err(sv, c, k, &k->early, 0);
        return MHD_YES;
    }
    if (*upload_size) {
        const size_t n = *upload_size;
        *upload_size = 0;
        if (k->too_big || k->slow || k->busy) return MHD_YES; /* discard the rest */
        if ((double)(sv_now_ns() - k->t0) * 1e-9 > sv->o.timeout_s) {
            k->slow = true;
            return MHD_YES;
        }
        if (k->len + n > sv->o.max_body_bytes) {
            k->too_big = true;
            free(k->body);
            k->body = NULL;
            return MHD_YES;
        }
        if (k->len + n + 1 > k->cap) {
            size_t cap = k->cap ? k->cap : 4096;
            while (cap < k->len + n + 1) cap *= 2;
            /* the bodies being received count in the memory reserved for requests */
            const uint64_t more = cap - k->cap;
            if (atomic_fetch_add(&sv->body_bytes, more) + more > sv->o.request_mem_bytes) {
                atomic_fetch_sub(&sv->body_bytes, more + k->cap);
                k->busy = true;
                free(k->body);
                k->body = NULL;
                k->cap = 0;
                return MHD_YES;
            }
            char *b = realloc(k->body, cap);
            if (!b) {
                atomic_fetch_sub(&sv->body_bytes, more);
                return MHD_NO;
            }
            k->body = b;
            k->cap = cap;
        }
        memcpy(k->body + k->len, upload_data, n);
        k->len += n;
        return MHD_YES;
    }
    return dispatch(sv, c, k);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode why)
{
    serve *sv = cls;
    conn *k = *con_cls;
    if (!k) return;
    if (!sv->o.quiet && k->ep != SV_EP_HEALTH && k->ep != SV_EP_METRICS &&
        why != MHD_REQUEST_TERMINATED_COMPLETED_OK)
        fprintf(stderr, "estream serve: %s: connection ended early (%d)\n",
                sv_endpoint_name(k->ep), (int)why);
    atomic_fetch_sub(&sv->body_bytes, k->cap);
    free(k->body);
    free(k);
    *con_cls = NULL;
    pthread_mutex_lock(&sv->mu);
    sv->in_flight--;
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
}

static void on_log(void *cls, const char *fmt, va_list ap)
{
    const serve *sv = cls;
    if (sv->o.quiet) return;
    char line[512];
    vsnprintf(line, sizeof(line), fmt, ap);
    const size_t n = strlen(line);
    fprintf(stderr, "estream serve: http: %s%s", line, n && line[n - 1] == '\n' ? "" : "\n");
}

serve *serve_start(const serve_opts *o, char *err, size_t err_len)
{
    serve *sv = calloc(1, sizeof(*sv));
    if (!sv) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    sv->o = *o;
    sv->host = strdup(o->host);
    sv->api_key = o->api_key ? strdup(o->api_key) : NULL;
    sv->model_name = strdup(o->model_name);
    sv->o.host = sv->host;
    sv->o.api_key = sv->api_key;
    sv->o.model_name = sv->model_name;
    sv_metrics_init(&sv->mx);
    pthread_mutex_init(&sv->mu, NULL);
    pthread_cond_init(&sv->cv, NULL);

    struct sockaddr_storage ss = {0};
    socklen_t sl;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ERROR_LOG | MHD_USE_ITC;
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
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(err, err_len, "--host %s is not an IPv4 or IPv6 address", o->host);
        serve_stop(sv);
        return NULL;
    }
    (void)sl;
    sv->d = MHD_start_daemon(
        flags, (uint16_t)o->port, NULL, NULL, on_request, sv, MHD_OPTION_EXTERNAL_LOGGER, on_log,
        sv, MHD_OPTION_SOCK_ADDR, &ss, MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(o->io_timeout_s > 1 ? o->io_timeout_s : 1),
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, sv, MHD_OPTION_THREAD_STACK_SIZE, (size_t)(512u << 10), MHD_OPTION_END);
    if (!sv->d) {
        snprintf(err, err_len, "cannot listen on %s port %d (in use, or not an address of this "
                 "machine)", o->host, o->port);
        serve_stop(sv);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(sv->d, MHD_DAEMON_INFO_BIND_PORT);
    sv->port = di ? di->port : o->port;
    return sv;
}

int serve_port(const serve *sv)
{
    return sv->port;
}

es_status serve_attach(serve *sv, es_model *m, const es_session_params *sp_in, int batch_tokens)
{
    es_session_params sp = *sp_in;
    sp.abort_cb = sv_exec_abort_cb;
    sp.cb_user = &sv->x_for_abort;
    sp.progress_cb = NULL;
    /* what requests and replies (request_mem), bodies being received (request_mem again) and
     * connection threads may hold, counted against the budget */
    sp.reserve_bytes = 2 * sv->o.request_mem_bytes + (uint64_t)sv->o.max_connections * (256u << 10);
    /* the session holds the longest prompt the server takes (what max_model_len advertises:
     * a prompt longer than a batch runs alone), batches sized for the budget by the job layer */
    const int64_t ctx = es_model_n_ctx(m);
    const es_job_shape shape = {
        .longest = sv->o.max_request_tokens < ctx ? sv->o.max_request_tokens : ctx,
        .most_seqs = 1,
        .batch_tokens = batch_tokens,
        .head_outputs = 1};
    es_session *s = NULL;
    es_job_size size;
    const es_status st = es_session_create_for_job(m, &sp, &shape, &s, &size);
    if (st) return st;
    const int bt = size.batch_tokens, seqs = size.max_seqs;
    es_run_stats rs;
    es_session_stats(s, &rs);
    pthread_mutex_lock(&sv->mx.mu);
    sv->mx.budget_bytes = sp.mem_budget_bytes;
    sv->mx.arena_bytes = rs.arena_bytes;
    sv->mx.streaming = rs.streaming;
    sv->mx.batch_token_budget = bt;
    pthread_mutex_unlock(&sv->mx.mu);
    sv->env = (sv_api_env){
        .m = m,
        .model_name = sv->model_name,
        .pooling = sv->o.pooling,
        .normalize = sv->o.normalize,
        .bos = sv->o.bos,
        .chat_template = sv->o.chat_template,
        .rerank_template = sv->o.rerank_template,
        .max_request_tokens = sv->o.max_request_tokens,
        .max_prompt_tokens = size.max_tokens,
        .max_model_len = size.max_tokens < ctx ? size.max_tokens : (int)ctx,
        .max_seqs = seqs,
        .created = (int64_t)time(NULL),
    };
    const sv_exec_opts xo = {bt, seqs, sv->o.max_queue, sv->o.request_mem_bytes,
                             sv->o.batch_wait_ms < 5 ? sv->o.batch_wait_ms : 5, sv->o.batch_wait_ms};
    sv->x = sv_exec_start(s, &xo, &sv->mx);
    if (!sv->x) {
        es_session_destroy(s);
        return ES_E_NOMEM;
    }
    sv->x_for_abort = sv->x;
    atomic_store(&sv->state, READY);
    return ES_OK;
}

void serve_shutdown(serve *sv)
{
    pthread_mutex_lock(&sv->mu);
    sv->shutdown = true;
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
}

void serve_wait(serve *sv)
{
    pthread_mutex_lock(&sv->mu);
    while (!sv->shutdown) pthread_cond_wait(&sv->cv, &sv->mu);
    pthread_mutex_unlock(&sv->mu);
}

void serve_stop(serve *sv)
{
    if (!sv) return;
    atomic_store(&sv->state, STOPPING);
    if (sv->d) {
        /* no new connections; open ones get 503. The listening socket stays open until the
         * daemon stops (MHD's threads may still hold it), so shut it down: the kernel then
         * refuses new connections instead of queueing them for nobody */
        const MHD_socket lfd = MHD_quiesce_daemon(sv->d);
        if (lfd != MHD_INVALID_SOCKET) shutdown(lfd, SHUT_RDWR);
        /* the requests in flight finish (each within its timeout) */
        pthread_mutex_lock(&sv->mu);
        while (sv->in_flight > 0) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&sv->cv, &sv->mu, &ts);
        }
        pthread_mutex_unlock(&sv->mu);
        MHD_stop_daemon(sv->d);
        if (lfd != MHD_INVALID_SOCKET) close(lfd); /* quiesce handed it to us */
    }
    sv_exec_stop(sv->x);
    sv_metrics_destroy(&sv->mx);
    pthread_cond_destroy(&sv->cv);
    pthread_mutex_destroy(&sv->mu);
    free(sv->host);
    free(sv->api_key);
    free(sv->model_name);
    free(sv);
}
