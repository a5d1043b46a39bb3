/* The HTTP surface of estream serve: routing, the API key, the wait for the executor, replies
 * and the server's life (start, attach a model, shutdown). Connections, deadlines and the wire
 * format are conn.c's and http1.c's; this file says what a request means.
 *
 * DESIGN
 * - One thread per connection (conn.h): a connection parses its body and tokenizes its prompts
 *   on its own thread, then waits for the executor while polling its socket, so a client that
 *   hangs up is seen within 20 ms and its units are dropped (exec.h).
 * - Limits are checked as early as the request allows: the API key and the route once the head
 *   is in (before any body is read), the body's size against --max-body and the memory for
 *   bodies as it arrives (conn.c), the JSON tree's memory as it is parsed (jmem.h), then tokens
 *   and the request's memory after parsing, and the queue at admission (429 with Retry-After).
 *   What can never fit is 413 with the limit named; 429 only for what fits once others finish.
 * - Every reply of an error, whoever raises it, is {"error": {...}} (api.h's sv_err_body).
 * - Counting: a reply is counted once it is written (conn.c calls on_done): a client gone before
 *   its reply was written whole is a 499, never a 200.
 * - Shutdown: stop accepting; the executor finishes the running batch and fails what is queued
 *   with 503; connections with a request in hand answer it; every wait ends by --timeout plus a
 *   second (conn.c forces the sockets left).
 */
#include "serve/api.h"
#include "serve/conn.h"
#include "serve/serve.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

enum { LOADING = 0, READY = 1, STOPPING = 2 };

struct serve {
    serve_opts o;
    char *host, *api_key, *model_name;
    sv_listener *l;
    int port;
    _Atomic int state;
    sv_metrics mx;
    sv_api_env env;
    sv_exec *x;
    sv_exec *x_for_abort; /* the abort callback's view (set once the executor exists) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool shutdown;
    sv_pool bodies; /* bodies being received and parsed, at most request_mem_bytes */
};

serve_opts serve_default_opts(void)
{
    return (serve_opts){
        .host = "127.0.0.1",
        .port = 8080,
        .model_name = "estream",
        .max_queue = 256,
        .batch_wait_ms = 50,
        .max_connections = 128,
        .max_connections_per_ip = 0, /* half of max_connections */
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

static const route *find_route(const char *path)
{
    for (size_t i = 0; path && i < sizeof(routes) / sizeof(routes[0]); i++)
        if (!strcmp(path, routes[i].path)) return &routes[i];
    return NULL;
}

/* ---- replies ---- */

/* j as the reply's body (a compact JSON text and a newline, as curl users expect); j is
 * released. Out of memory: a 503 of fixed text. */
static void reply_json(sv_reply *r, int status, json_t *j, const char *retry_after)
{
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9))
                : NULL;
    json_decref(j);
    r->type = "application/json";
    if (!s) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                  "\"server_error\",\"param\":null,\"code\":null}}\n";
        r->status = 503;
        r->body = strdup(oom);
        r->len = r->body ? sizeof(oom) - 1 : 0;
        r->retry_after = "1";
        return;
    }
    const size_t n = strlen(s);
    char *t = realloc(s, n + 2);
    if (t) {
        t[n] = '\n';
        t[n + 1] = 0;
        s = t;
    }
    r->status = status;
    r->body = s;
    r->len = n + (t != NULL);
    r->retry_after = retry_after;
}

static void reply_err(sv_reply *r, const sv_err *e, int64_t tokens)
{
    r->tokens = tokens;
    reply_json(r, e->status, sv_err_body(e), e->status == 429 || e->status == 503 ? "1" : NULL);
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

static bool authorized(const serve *sv, const sv_head *h)
{
    if (!sv->api_key) return true;
    const char *a = h->authorization;
    if (!a || strncasecmp(a, "Bearer ", 7)) return false;
    a += 7;
    while (*a == ' ') a++;
    return key_equal(a, sv->api_key);
}

/* ---- waiting ---- */

/* The peer closed or reset the connection (a pipelined request's bytes do not count). */
static bool peer_gone(void *user)
{
    const int fd = *(const int *)user;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL | POLLRDHUP)) return true;
    char b;
    return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* Admits q, waits for it and makes its reply. The request is released once its reply is written
 * (r->hold, on_done): its estimate covers the reply's text until then. */
static void run_model(serve *sv, sv_conn *c, sv_reply *r, sv_req *q)
{
    sv_err e = {0};
    const int64_t tokens = q->n_tokens;
    if (q->mem_bytes > sv->o.request_mem_bytes) {
        sv_fail(&e, 413, NULL, "the request needs about %.1f MiB (its tokens, outputs and reply) "
                "of the server's %.1f MiB for requests (estream serve --request-mem): send fewer "
                "or shorter prompts, or fewer log-probs", (double)q->mem_bytes / 1048576.0,
                (double)sv->o.request_mem_bytes / 1048576.0);
        sv_req_free(q);
        return reply_err(r, &e, tokens);
    }
    /* first: the executor, woken by the submit, must not count this request as one to wait for */
    sv_conn_queued(c);
    const enum sv_submit adm = sv_exec_submit(sv->x, q);
    if (adm != SV_ADMITTED) {
        if (adm == SV_QUEUE_FULL)
            sv_fail(&e, 429, NULL, "the server's queue is full (%d requests, estream serve "
                    "--max-queue); retry later", sv->o.max_queue);
        else if (adm == SV_MEM_FULL)
            sv_fail(&e, 429, NULL, "the requests in flight hold the server's memory for "
                    "requests (estream serve --request-mem); retry later");
        else sv_fail(&e, 503, NULL, "the server is shutting down");
        sv_req_free(q);
        return reply_err(r, &e, tokens);
    }
    int fd = sv_conn_fd(c);
    const uint64_t deadline = sv_conn_t0(c) + (uint64_t)(sv->o.timeout_s * 1e9);
    const enum sv_state st = sv_exec_wait(sv->x, q, deadline, peer_gone, &fd);
    if (st == SV_DONE) {
        json_t *reply = sv_api_reply(&sv->env, q);
        if (!reply) {
            sv_exec_leave(sv->x, q);
            sv_fail(&e, 503, NULL, "out of memory while writing the reply");
            return reply_err(r, &e, tokens);
        }
        reply_json(r, 200, reply, NULL);
        r->tokens = tokens;
        r->hold = q;
        return;
    }
    if (st == SV_FAILED) {
        sv_fail(&e, q->fail_status, NULL, "%s", q->fail_msg);
        sv_exec_leave(sv->x, q);
        return reply_err(r, &e, tokens);
    }
    const bool gone = peer_gone(&fd);
    sv_exec_leave(sv->x, q);
    if (gone) {
        r->status = 499; /* nobody to answer: counted, not written */
        r->silent = true;
        r->tokens = tokens;
        return;
    }
    sv_fail(&e, 504, NULL, "the request did not finish within %g s (estream serve --timeout)",
            sv->o.timeout_s);
    reply_err(r, &e, tokens);
}

/* Parses the body as JSON; its tree's memory, bounded from what the text holds, is taken from
 * the pool for bodies into *tree (given back by the caller once the tree is freed), and the
 * body's text is freed once parsed. NULL with e set: 400 not JSON, 413 the body and its tree can
 * never be held at once, 429 not now. */
static json_t *parse_body(serve *sv, sv_body *b, uint64_t *tree, sv_err *e)
{
    const uint64_t need = sv_json_parse_bound(b->p ? b->p : "", b->len);
    *tree = 0;
    if (b->charged + need > sv->bodies.cap) {
        sv_body_free(b);
        return sv_fail(e, 413, NULL, "the body's JSON needs up to %.1f MiB to parse, more than "
                       "this server holds for request bodies at once, %.1f MiB (estream serve "
                       "--request-mem)", (double)need / 1048576.0,
                       (double)sv->bodies.cap / 1048576.0);
    }
    if (!sv_pool_take(&sv->bodies, need)) {
        sv_body_free(b);
        return sv_fail(e, 429, NULL, "the bodies being received hold the server's memory for "
                       "request bodies (estream serve --request-mem); retry later");
    }
    *tree = need;
    json_error_t je;
    json_t *body = json_loadb(b->p ? b->p : "", b->len, 0, &je);
    sv_body_free(b);
    if (body) return body;
    return sv_fail(e, 400, NULL, "the body is not valid JSON: %s (line %d, column %d)", je.text,
                   je.line, je.column);
}

/* A complete request (conn.h's request callback). */
static void on_request(void *user, sv_conn *c, const sv_head *h, sv_body *b, sv_reply *r)
{
    serve *sv = user;
    const route *rt = find_route(h->path);
    r->ep = rt->ep; /* on_head let only routed requests through */
    sv_err e = {0};
    if (rt->ep == SV_EP_HEALTH) {
        const int s = atomic_load(&sv->state);
        const int status = s == READY ? 200 : 503;
        return reply_json(r, status,
                          json_pack("{s:s}", "status",
                                    s == READY ? "ok" : s == LOADING ? "loading" : "stopping"),
                          status == 503 ? "1" : NULL);
    }
    if (rt->ep == SV_EP_METRICS) {
        size_t n;
        char *t = sv_metrics_text(&sv->mx, &n);
        if (!t) {
            sv_fail(&e, 503, NULL, "out of memory");
            return reply_err(r, &e, 0);
        }
        r->status = 200;
        r->body = t;
        r->len = n;
        r->type = "text/plain; version=0.0.4";
        return;
    }
    uint64_t tree = 0;
    json_t *body = rt->post ? parse_body(sv, b, &tree, &e) : NULL;
    sv_req *q = NULL;
    json_t *reply = NULL;
    if (rt->post && !body) {
    } else if (rt->ep <= SV_EP_LAST_MODEL) {
        q = sv_api_parse(&sv->env, rt->ep, body, &e);
    } else {
        reply = sv_api_direct(&sv->env, rt->ep, body, &e);
    }
    /* the tree goes (a request keeps none of it but what its estimate counts) */
    json_decref(body);
    sv_pool_give(&sv->bodies, tree);
    if (q) return run_model(sv, c, r, q);
    if (reply) return reply_json(r, 200, reply, NULL);
    reply_err(r, &e, 0);
}

/* A request's head: its route, method, key and the server's state (conn.h's head callback). */
static bool on_head(void *user, const sv_head *h, sv_reply *r)
{
    serve *sv = user;
    sv_err e = {0};
    const route *rt = find_route(h->path);
    r->ep = rt ? rt->ep : SV_EP_OTHER;
    if (!rt) {
        sv_fail(&e, 404, NULL, "no such endpoint: %s %s", h->method, h->path);
        return reply_err(r, &e, 0), false;
    }
    const bool head_ok = !rt->post && !strcmp(h->method, "HEAD");
    if (strcmp(h->method, rt->post ? "POST" : "GET") && !head_ok) {
        r->allow = rt->post ? "POST" : "GET";
        sv_fail(&e, 405, NULL, "%s takes %s, not %s", h->path, r->allow, h->method);
        return reply_err(r, &e, 0), false;
    }
    if (rt->ep == SV_EP_HEALTH) return true;
    if (!authorized(sv, h)) {
        sv_fail(&e, 401, NULL, "a valid API key is required: send the header \"Authorization: "
                               "Bearer KEY\"");
        return reply_err(r, &e, 0), false;
    }
    const int s = atomic_load(&sv->state);
    if (s != READY && rt->ep != SV_EP_METRICS) {
        sv_fail(&e, 503, NULL, s == LOADING ? "the model is still loading"
                                            : "the server is shutting down");
        return reply_err(r, &e, 0), false;
    }
    return true;
}

/* An error of the connection layer, in the shape of every other error. */
static void on_error(void *user, const sv_head *h, int status, const char *msg, sv_reply *r)
{
    (void)user;
    const route *rt = h ? find_route(h->path) : NULL;
    r->ep = rt ? rt->ep : SV_EP_OTHER;
    sv_err e = {0};
    sv_fail(&e, status, NULL, "%s", msg);
    reply_err(r, &e, 0);
}

/* A reply was written (or the peer left first): counted by what the client got. */
static void on_done(void *user, const sv_reply *r, bool sent, double seconds)
{
    serve *sv = user;
    sv_metrics_request(&sv->mx, r->ep, sent ? r->status : 499, r->tokens, seconds);
    if (!sv->o.quiet && !sent && !r->silent && r->ep != SV_EP_HEALTH && r->ep != SV_EP_METRICS)
        fprintf(stderr, "estream serve: %s: the client left before its %d reply was written\n",
                sv_endpoint_name(r->ep), r->status);
    if (r->hold) sv_exec_leave(sv->x, r->hold);
}

/* The executor asks, before holding a batch for arrivals: may more requests join soon? */
static int expected_arrivals(void *user)
{
    serve *sv = user;
    return sv_listen_expected(sv->l, (uint64_t)sv->o.batch_wait_ms * 1000000u);
}

serve *serve_start(const serve_opts *o, char *err, size_t err_len)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, sv_jmem_install); /* before any JSON is made */
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
    if (sv->o.max_connections_per_ip <= 0)
        sv->o.max_connections_per_ip = o->max_connections > 1 ? o->max_connections / 2 : 1;
    sv->bodies.cap = o->request_mem_bytes;
    sv_metrics_init(&sv->mx);
    pthread_mutex_init(&sv->mu, NULL);
    pthread_cond_init(&sv->cv, NULL);
    const sv_conn_opts co = {
        .host = sv->host,
        .port = o->port,
        .max_connections = o->max_connections,
        .max_per_ip = sv->o.max_connections_per_ip,
        .io_timeout_s = o->io_timeout_s,
        .timeout_s = o->timeout_s,
        .max_body_bytes = o->max_body_bytes,
        .bodies = &sv->bodies,
    };
    const sv_conn_ops ops = {sv, on_head, on_request, on_error, on_done};
    sv->l = sv_listen(&co, &ops, err, err_len);
    if (!sv->l) {
        serve_stop(sv);
        return NULL;
    }
    sv->port = sv_listen_port(sv->l);
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
        .max_piece_bytes = sv_max_piece_bytes(m),
        .created = (int64_t)time(NULL),
    };
    const sv_exec_opts xo = {bt,
                             seqs,
                             sv->o.max_queue,
                             sv->o.request_mem_bytes,
                             sv->o.batch_wait_ms < 5 ? sv->o.batch_wait_ms : 5,
                             sv->o.batch_wait_ms};
    sv->x = sv_exec_start(s, &xo, &sv->mx);
    if (!sv->x) {
        es_session_destroy(s);
        return ES_E_NOMEM;
    }
    sv->x_for_abort = sv->x;
    sv_exec_expect(sv->x, expected_arrivals, sv);
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
    if (sv->l) {
        const uint64_t t = sv_now_ns();
        /* no new connections; idle ones close, ones still sending a request get 503 */
        sv_listen_quiesce(sv->l);
        /* the running batch finishes; what is queued fails with 503 */
        if (sv->x) sv_exec_drain(sv->x);
        /* every request in hand is answered within its --timeout; a second more for the writes,
         * then the sockets left are shut */
        sv_listen_drain(sv->l, t + (uint64_t)(sv->o.timeout_s * 1e9) + 1000000000u);
    }
    sv_listen_free(sv->l);
    sv_exec_stop(sv->x);
    sv_metrics_destroy(&sv->mx);
    pthread_cond_destroy(&sv->cv);
    pthread_mutex_destroy(&sv->mu);
    free(sv->host);
    free(sv->api_key);
    free(sv->model_name);
    free(sv);
}
