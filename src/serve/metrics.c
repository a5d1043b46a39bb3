/* Counters of estream serve in Prometheus's text format. Everything is under one mutex: a
 * request or a batch updates a handful of integers, far from contention at HTTP rates. */
#include "serve/metrics.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const int codes[SV_N_CODES] = {200, 400, 401, 404, 405, 408, 413, 414, 429,
                                      431, 499, 500, 501, 503, 504, 505, 0};
static const double latency_le[SV_LATENCY_BUCKETS] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                      1,    2.5,   5,    10,  30,   60};

const char *sv_endpoint_name(int ep)
{
    static const char *const names[SV_EP_N] = {
        "/v1/completions", "/v1/embeddings", "/v1/score",  "/v1/classify", "/v1/chat/completions",
        "/v1/rerank",      "/rerank",
        "/tokenize",       "/detokenize",    "/v1/models", "/tokenizer_info",
        "/health",         "/metrics",       "other"};
    return ep >= 0 && ep < SV_EP_N ? names[ep] : "other";
}

void sv_metrics_init(sv_metrics *mx)
{
    memset(mx, 0, sizeof(*mx));
    pthread_mutex_init(&mx->mu, NULL);
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    mx->started = (double)t.tv_sec + t.tv_nsec * 1e-9;
}

void sv_metrics_destroy(sv_metrics *mx)
{
    pthread_mutex_destroy(&mx->mu);
}

static int code_slot(int status)
{
    for (int i = 0; i < SV_N_CODES - 1; i++)
        if (codes[i] == status) return i;
    return SV_N_CODES - 1; /* any other */
}

void sv_metrics_request(sv_metrics *mx, int ep, int status, int64_t tokens, double seconds)
{
    if (ep < 0 || ep >= SV_EP_N) ep = SV_EP_OTHER;
    pthread_mutex_lock(&mx->mu);
    mx->requests[ep][code_slot(status)]++;
    if (status == 200) mx->prompt_tokens[ep] += tokens;
    if (ep <= SV_EP_LAST_MODEL) { /* the endpoints that run the model */
        int b = 0;
        while (b < SV_LATENCY_BUCKETS && seconds > latency_le[b]) b++;
        if (b < SV_LATENCY_BUCKETS) mx->latency[b]++;
        mx->latency_count++;
        mx->latency_sum += seconds;
    }
    pthread_mutex_unlock(&mx->mu);
}

void sv_metrics_batch(sv_metrics *mx, int64_t tokens, int seqs, es_status st,
                      const es_run_stats *rs)
{
    pthread_mutex_lock(&mx->mu);
    mx->running_seqs = 0;
    mx->batches++;
    if (st == ES_E_CANCELLED) mx->batches_cancelled++;
    else if (st) mx->batches_failed++;
    int b = 0;
    while (b < SV_BATCH_TOKEN_BUCKETS && tokens > (64 << b)) b++;
    mx->batch_tokens[b]++;
    mx->batch_tokens_sum += tokens;
    b = 0;
    while (b < SV_BATCH_SEQ_BUCKETS && seqs > (1 << b)) b++;
    mx->batch_seqs[b]++;
    mx->batch_seqs_sum += seqs;
    mx->bytes_read += rs->bytes_read;
    mx->run_seconds += rs->seconds;
    mx->wait_seconds += rs->wait_seconds;
    pthread_mutex_unlock(&mx->mu);
}

typedef struct text { char *p; size_t n, cap; bool oom; } text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...)
{
    if (t->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int k = vsnprintf(t->p + t->n, t->cap - t->n, fmt, ap);
        va_end(ap);
        if (k < 0) { t->oom = true; return; }
        if ((size_t)k < t->cap - t->n) { t->n += (size_t)k; return; }
        char *q = realloc(t->p, t->cap * 2 + (size_t)k);
        if (!q) { t->oom = true; return; }
        t->p = q;
        t->cap = t->cap * 2 + (size_t)k;
    }
}

static void head(text *t, const char *name, const char *type, const char *help)
{
    put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

char *sv_metrics_text(sv_metrics *mx, size_t *len)
{
    text t = {malloc(8192), 0, 8192, false};
    if (!t.p) return NULL;
    pthread_mutex_lock(&mx->mu);
    head(&t, "estream_requests_total", "counter", "HTTP requests answered, by endpoint and status");
    for (int e = 0; e < SV_EP_N; e++)
        for (int c = 0; c < SV_N_CODES; c++)
            if (mx->requests[e][c] && codes[c])
                put(&t, "estream_requests_total{endpoint=\"%s\",code=\"%d\"} %lld\n",
                    sv_endpoint_name(e), codes[c], (long long)mx->requests[e][c]);
            else if (mx->requests[e][c])
                put(&t, "estream_requests_total{endpoint=\"%s\",code=\"other\"} %lld\n",
                    sv_endpoint_name(e), (long long)mx->requests[e][c]);
    head(&t, "estream_prompt_tokens_total", "counter", "tokens of the requests answered with 200");
    for (int e = 0; e <= SV_EP_LAST_MODEL; e++)
        put(&t, "estream_prompt_tokens_total{endpoint=\"%s\"} %lld\n", sv_endpoint_name(e),
            (long long)mx->prompt_tokens[e]);
    head(&t, "estream_request_duration_seconds", "histogram",
         "seconds from a complete request to its reply, endpoints that run the model");
    int64_t cum = 0;
    for (int b = 0; b < SV_LATENCY_BUCKETS; b++) {
        cum += mx->latency[b];
        put(&t, "estream_request_duration_seconds_bucket{le=\"%g\"} %lld\n", latency_le[b],
            (long long)cum);
    }
    put(&t, "estream_request_duration_seconds_bucket{le=\"+Inf\"} %lld\n",
        (long long)mx->latency_count);
    put(&t, "estream_request_duration_seconds_sum %.6f\n", mx->latency_sum);
    put(&t, "estream_request_duration_seconds_count %lld\n", (long long)mx->latency_count);
    head(&t, "estream_queue_depth", "gauge", "requests admitted and not finished");
    put(&t, "estream_queue_depth %d\n", mx->queue_depth);
    head(&t, "estream_running_sequences", "gauge", "sequences of the batch running now");
    put(&t, "estream_running_sequences %d\n", mx->running_seqs);
    head(&t, "estream_batches_total", "counter", "batches run (cancelled and failed included)");
    put(&t, "estream_batches_total %lld\n", (long long)mx->batches);
    head(&t, "estream_batches_cancelled_total", "counter", "batches stopped: every request left");
    put(&t, "estream_batches_cancelled_total %lld\n", (long long)mx->batches_cancelled);
    head(&t, "estream_batches_failed_total", "counter", "batches that failed (an I/O error)");
    put(&t, "estream_batches_failed_total %lld\n", (long long)mx->batches_failed);
    head(&t, "estream_batch_tokens", "histogram", "tokens per batch");
    cum = 0;
    for (int b = 0; b < SV_BATCH_TOKEN_BUCKETS; b++) {
        cum += mx->batch_tokens[b];
        put(&t, "estream_batch_tokens_bucket{le=\"%d\"} %lld\n", 64 << b, (long long)cum);
    }
    put(&t, "estream_batch_tokens_bucket{le=\"+Inf\"} %lld\n", (long long)mx->batches);
    put(&t, "estream_batch_tokens_sum %lld\nestream_batch_tokens_count %lld\n",
        (long long)mx->batch_tokens_sum, (long long)mx->batches);
    head(&t, "estream_batch_sequences", "histogram", "sequences per batch");
    cum = 0;
    for (int b = 0; b < SV_BATCH_SEQ_BUCKETS; b++) {
        cum += mx->batch_seqs[b];
        put(&t, "estream_batch_sequences_bucket{le=\"%d\"} %lld\n", 1 << b, (long long)cum);
    }
    put(&t, "estream_batch_sequences_bucket{le=\"+Inf\"} %lld\n", (long long)mx->batches);
    put(&t, "estream_batch_sequences_sum %lld\nestream_batch_sequences_count %lld\n",
        (long long)mx->batch_seqs_sum, (long long)mx->batches);
    head(&t, "estream_expert_bytes_read_total", "counter", "expert bytes streamed from the file");
    put(&t, "estream_expert_bytes_read_total %llu\n", (unsigned long long)mx->bytes_read);
    head(&t, "estream_run_seconds_total", "counter", "seconds spent running batches");
    put(&t, "estream_run_seconds_total %.6f\n", mx->run_seconds);
    head(&t, "estream_batch_gather_seconds_total", "counter",
         "seconds batches were held for requests still arriving (--batch-wait)");
    put(&t, "estream_batch_gather_seconds_total %.6f\n", mx->gather_seconds);
    head(&t, "estream_expert_wait_seconds_total", "counter",
         "seconds the compute threads waited for experts");
    put(&t, "estream_expert_wait_seconds_total %.6f\n", mx->wait_seconds);
    head(&t, "estream_bubble_rate", "gauge", "expert wait seconds / run seconds, since start");
    put(&t, "estream_bubble_rate %.6f\n",
        mx->run_seconds > 0 ? mx->wait_seconds / mx->run_seconds : 0);
    head(&t, "estream_peak_rss_bytes", "gauge", "the process's peak resident memory (VmHWM)");
    put(&t, "estream_peak_rss_bytes %zu\n", es_peak_rss_bytes());
    head(&t, "estream_memory_budget_bytes", "gauge", "--mem (0: none)");
    put(&t, "estream_memory_budget_bytes %llu\n", (unsigned long long)mx->budget_bytes);
    head(&t, "estream_arena_bytes", "gauge", "the expert arena (0: every expert resident)");
    put(&t, "estream_arena_bytes %llu\n", (unsigned long long)mx->arena_bytes);
    head(&t, "estream_batch_token_budget", "gauge", "most tokens in one batch");
    put(&t, "estream_batch_token_budget %d\n", mx->batch_token_budget);
    head(&t, "process_start_time_seconds", "gauge", "start time since the Unix epoch");
    put(&t, "process_start_time_seconds %.3f\n", mx->started);
    pthread_mutex_unlock(&mx->mu);
    if (t.oom) {
        free(t.p);
        return NULL;
    }
    *len = t.n;
    return t.p;
}
