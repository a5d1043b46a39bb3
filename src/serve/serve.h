/* estream serve: a prefill-only HTTP service on one model, a client of include/estream.h like
 * the CLI. The CLI parses the flags and opens the model; this folder owns the HTTP surface
 * (http.c), the connections (conn.c, listen.c) and the wire format (http1.c), the request
 * parsers and replies of each endpoint (api_*.c), the memory pool of bodies (jmem.c), the
 * executor that merges concurrent requests into batches (exec.c) and the metrics (metrics.c).
 * docs/serve.md describes the endpoints, limits and failure answers.
 *
 * Life of a server: serve_start() binds and answers /health with 503 ("loading");
 * serve_attach() makes the session and starts the executor (/health 200); serve_wait() returns
 * once serve_shutdown() was called (from a signal thread); serve_stop() stops accepting,
 * finishes the requests in flight and frees everything. */
#ifndef ES_SERVE_H
#define ES_SERVE_H

#include "estream.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct serve_opts {
    const char *host;          /* address to bind ("127.0.0.1", "0.0.0.0", "::1") */
    int port;                  /* 0: a free port (serve_port() says which) */
    const char *api_key;       /* NULL: no key; else "Authorization: Bearer KEY" on every
                                * endpoint but /health */
    const char *model_name;    /* the id in /v1/models and in replies */
    int max_queue;             /* requests admitted and not finished; beyond it 429 */
    int batch_wait_ms;         /* a batch the queue does not fill waits this long at most for
                                * more requests, each at most 5 ms after the one before (0:
                                * starts at once) */
    int max_connections;       /* connections served at once (each has a thread) */
    int max_connections_per_ip; /* of them, from one client address (0: max_connections / 2) */
    size_t max_body_bytes;     /* larger bodies: 413 */
    int64_t max_request_tokens; /* tokens of one request, all its prompts together: 413 */
    double timeout_s;          /* per request, from its first byte to its reply: 408, 504 */
    double io_timeout_s;       /* each request must arrive whole (and each reply be taken)
                                * within this of the connection's accept or previous reply */
    uint64_t request_mem_bytes; /* what admitted requests may hold at once (estimated) */
    es_pooling pooling;        /* /v1/embeddings */
    int normalize;
    es_bos_rule bos;           /* prompts and ids (--no-implicit-bos: ES_BOS_AS_SENT) */
    const char *chat_template; /* --chat-template's text (NULL: the model's); borrowed */
    const char *rerank_template; /* --rerank-template's text (NULL: Qwen3-Reranker's); borrowed */
    int quiet;                 /* 1: no line per request on stderr */
} serve_opts;

/* The defaults documented in estream serve --help (loopback, any port unset = 8080, ...). */
serve_opts serve_default_opts(void);

typedef struct serve serve;

/* Binds and starts answering (/health 503 until serve_attach). On failure returns NULL with a
 * one-line reason in err. */
serve *serve_start(const serve_opts *o, char *err, size_t err_len);
int serve_port(const serve *sv);
/* Makes the session from sp (n_threads, budget and streaming fields; max_tokens and max_seqs
 * are set here from batch_tokens: 0 = 2048 resident, under a budget the largest of 4096..512
 * that fits) with the requests' memory reserved, and starts the executor. The model must
 * outlive the server. */
es_status serve_attach(serve *sv, es_model *m, const es_session_params *sp, int batch_tokens);
/* Asks serve_wait() to return; safe from any thread (not from a signal handler). */
void serve_shutdown(serve *sv);
void serve_wait(serve *sv);
/* Stops accepting, closes idle connections and answers requests still arriving with 503, lets
 * the running batch finish and fails the queued requests with 503, answers the requests in hand
 * (within their --timeout, plus a second for the writes), then frees everything. NULL is a
 * no-op. */
void serve_stop(serve *sv);

#endif
