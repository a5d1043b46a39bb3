/*
 * es_prefill (input checks, then the reference or the fast path) and es_perplexity (llama.cpp's
 * llama-perplexity convention, so the two tools' numbers compare directly).
 */
#include "model/model.h"
#include "model/forward.h"
#include "quant/kern.h"

#include <unistd.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *es_kernels_name(void) { return es_kern_isa_name(); }
int es_kernels_available(const char *isa) { return es_kern_isa_available(isa); }

es_status es_kernels_select(const char *isa)
{
    if (isa && strcmp(isa, "scalar") && strcmp(isa, "avx2") && strcmp(isa, "avx512"))
        return es_fail(ES_E_INVAL, "unknown kernel table '%s' (scalar, avx2, avx512)", isa);
    if (isa && !es_kern_isa_available(isa))
        return es_fail(ES_E_UNSUPPORTED, "this CPU or OS cannot run the %s kernels", isa);
    es_kern_init(isa);
    return ES_OK;
}

static es_status check_ids(const es_model *m, const int32_t *ids, size_t n)
{
    if (m->vocab_only) return es_fail(ES_E_INVAL, "the model was opened vocabulary-only");
    if (n == 0) return es_fail(ES_E_INVAL, "empty prompt: nothing to prefill");
    if (n > (size_t)m->hp.n_ctx)
        return es_fail(ES_E_INVAL, "prompt of %zu tokens exceeds the model's context of %d tokens",
                       n, m->hp.n_ctx);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->hp.n_vocab)
            return es_fail(ES_E_INVAL, "token id %d at position %zu is outside the vocabulary "
                           "[0, %d)", ids[i], i, m->hp.n_vocab);
    return ES_OK;
}

es_status es_prefill(es_model *m, const int32_t *ids, size_t n, const es_prefill_opts *opts,
                     float *out)
{
    if (!m || !ids || !out) return es_fail(ES_E_INVAL, "es_prefill: NULL argument");
    ES_TRY(check_ids(m, ids, n));
    const es_prefill_opts def = {0};
    if (!opts) opts = &def;
    if (opts->n_threads < 0 || opts->n_threads > ES_MAX_THREADS)
        return es_fail(ES_E_INVAL, "thread count %d is outside 1..%d (0: online CPUs)",
                       opts->n_threads, ES_MAX_THREADS);
    if (opts->plan_capacity < 0) return es_fail(ES_E_INVAL, "plan capacity must be >= 0");
    if (opts->reference) return es_forward_ref(m, ids, n, opts->all_logits, out);
    int threads = opts->n_threads;
    if (threads == 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        threads = c < 1 ? 1 : c > ES_MAX_THREADS ? ES_MAX_THREADS : (int)c;
    }
    return es_forward_fast(m, ids, n, threads, opts->plan_capacity, opts->all_logits, out);
}

/* -log softmax(logits)[target], with the sum in double. */
static double nll_of(const float *logits, int n_vocab, int32_t target)
{
    float mx = logits[0];
    for (int i = 1; i < n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0.0;
    for (int i = 0; i < n_vocab; i++) sum += exp((double)(logits[i] - mx));
    return -((double)(logits[target] - mx) - log(sum));
}

es_status es_perplexity(es_model *m, const int32_t *ids, size_t n, int n_ctx, int max_chunks,
                        const es_prefill_opts *opts, es_ppl_progress_fn progress, void *user,
                        es_ppl_result *out)
{
    memset(out, 0, sizeof(*out));
    if (n_ctx < 4) return es_fail(ES_E_INVAL, "perplexity context must be at least 4 tokens");
    if (n_ctx > m->hp.n_ctx)
        return es_fail(ES_E_INVAL, "context %d exceeds the model's context of %d tokens", n_ctx,
                       m->hp.n_ctx);
    if (n < 2 * (size_t)n_ctx)
        return es_fail(ES_E_INVAL, "the text tokenizes to %zu tokens; a context of %d needs at "
                       "least %d", n, n_ctx, 2 * n_ctx);
    int n_chunk = (int)(n / (size_t)n_ctx);
    if (max_chunks > 0 && max_chunks < n_chunk) n_chunk = max_chunks;
    const int nv = m->hp.n_vocab, first = n_ctx / 2;
    es_prefill_opts o = opts ? *opts : (es_prefill_opts){0};
    o.all_logits = 1;
    int32_t *chunk = malloc(sizeof(int32_t) * (size_t)n_ctx);
    float *logits = malloc(sizeof(float) * (size_t)n_ctx * (size_t)nv);
    if (!chunk || !logits) {
        free(chunk);
        free(logits);
        return es_fail(ES_E_NOMEM, "out of memory for %d x %d logits", n_ctx, nv);
    }
    double nll = 0.0;
    int64_t count = 0;
    es_status st = ES_OK;
    for (int c = 0; c < n_chunk; c++) {
        memcpy(chunk, ids + (size_t)c * (size_t)n_ctx, sizeof(int32_t) * (size_t)n_ctx);
        if (es_model_add_bos(m)) chunk[0] = es_model_bos(m);
        if ((st = es_prefill(m, chunk, (size_t)n_ctx, &o, logits)) != ES_OK) break;
        for (int j = first; j < n_ctx - 1; j++)
            nll += nll_of(logits + (size_t)j * (size_t)nv, nv, chunk[j + 1]);
        count += n_ctx - 1 - first;
        if (progress) progress(user, c + 1, n_chunk, exp(nll / (double)count));
    }
    free(chunk);
    free(logits);
    if (st) return st;
    out->nll = nll / (double)count;
    out->ppl = exp(out->nll);
    out->n_scored = count;
    out->chunks = n_chunk;
    return ES_OK;
}
