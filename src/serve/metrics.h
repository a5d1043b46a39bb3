/* The server's counters and their Prometheus text exposition (GET /metrics, format 0.0.4). */
#ifndef ES_SERVE_METRICS_H
#define ES_SERVE_METRICS_H

#include "estream.h"
#include "estream_tools.h" /* the tree's own helpers (not installed, not in the ABI) */

#include <pthread.h>
#include <stdint.h>

enum sv_endpoint {
    SV_EP_COMPLETIONS, SV_EP_EMBEDDINGS, SV_EP_SCORE, SV_EP_CLASSIFY, SV_EP_CHAT, SV_EP_RERANK,
    SV_EP_RERANK_TEI, /* the model endpoints: SV_EP_COMPLETIONS .. SV_EP_LAST_MODEL */
    SV_EP_TOKENIZE,
    SV_EP_DETOKENIZE, SV_EP_MODELS, SV_EP_TOKENIZER_INFO, SV_EP_HEALTH, SV_EP_METRICS,
    SV_EP_OTHER, SV_EP_N,
    SV_EP_LAST_MODEL = SV_EP_RERANK_TEI
};
const char *sv_endpoint_name(int ep);

#define SV_N_CODES 17
#define SV_BATCH_TOKEN_BUCKETS 9 /* 64 .. 16384 */
#define SV_BATCH_SEQ_BUCKETS 10  /* 1 .. 512 */
#define SV_LATENCY_BUCKETS 12

typedef struct sv_metrics {
    pthread_mutex_t mu;
    int64_t requests[SV_EP_N][SV_N_CODES];
    int64_t prompt_tokens[SV_EP_N];
    double latency_sum;
    int64_t latency_count, latency[SV_LATENCY_BUCKETS];
    int64_t batches, batches_cancelled, batches_failed;
    int64_t batch_tokens[SV_BATCH_TOKEN_BUCKETS + 1], batch_tokens_sum;
    int64_t batch_seqs[SV_BATCH_SEQ_BUCKETS + 1], batch_seqs_sum;
    uint64_t bytes_read;
    double run_seconds, wait_seconds;
    double gather_seconds; /* batches held for requests still arriving (--batch-wait) */
    int queue_depth; /* requests admitted and not finished */
    int running_seqs; /* sequences of the batch running now (0: none) */
    uint64_t budget_bytes, arena_bytes;
    int streaming, batch_token_budget;
    double started;  /* wall clock at start (process_start_time_seconds) */
} sv_metrics;

void sv_metrics_init(sv_metrics *mx);
void sv_metrics_destroy(sv_metrics *mx);
/* One answered request: its endpoint, HTTP status, prompt tokens and seconds. */
void sv_metrics_request(sv_metrics *mx, int ep, int status, int64_t tokens, double seconds);
/* One batch run (st: its status) with the session's stats of it. */
void sv_metrics_batch(sv_metrics *mx, int64_t tokens, int seqs, es_status st,
                      const es_run_stats *rs);
/* The exposition text (malloc'd), NULL when out of memory. */
char *sv_metrics_text(sv_metrics *mx, size_t *len);

#endif
