/*
 * es_prefill (input checks, then the reference or the fast path) and es_perplexity (llama.cpp's
 * llama-perplexity convention, so the two tools' numbers compare directly).
 */
#include "model/model.h"
#include "run/session.h"
#include "quant/kern.h"

#include <unistd.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *es_kernels_name(void) { return es_kern_isa_name(); }
int es_kernels_available(const char *isa) { return es_kern_isa_available(isa); }
const char *es_kernels_why_not(const char *isa) { return es_kern_isa_why_not(isa); }

es_status es_kernels_select(const char *isa)
{
    bool known = isa == NULL;
    for (int i = 0; i < ES_KERN_N_ISA && !known; i++)
        known = strcmp(isa, es_kern_isa_names[i]) == 0;
    if (!known)
        return es_fail(ES_E_INVAL, "unknown kernel table '%s' (scalar, avx2, avxvnni, avx512, amx, "
                       "asimd, neon, i8mm)", isa);
    if (isa && !es_kern_isa_available(isa))
        return es_fail(ES_E_UNSUPPORTED, "the %s kernels cannot run here: %s", isa,
                       es_kern_isa_why_not(isa));
    es_kern_init(isa);
    return ES_OK;
}

es_status es_prefill(es_model *m, const int32_t *ids, size_t n, const es_session_params *params,
                     int all_logits, float *out)
{
    if (!m || !ids || !out) return es_fail(ES_E_INVAL, "es_prefill: NULL argument");
    ES_TRY(es_check_ids(m, ids, n));
    es_session_params p = params ? *params : es_session_default_params();
    p.max_tokens = (int)n;
    p.max_logits_rows = all_logits ? (int)n : 1; /* out is all the logits it holds */
    p.head_outputs = 0;
    es_session *s = NULL;
    ES_TRY(es_session_create(m, &p, &s));
    es_status st = es_session_prefill(s, ids, n, all_logits, out);
    es_session_destroy(s);
    return st;
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

static es_status check_ppl(const es_model *m, size_t n, int n_ctx)
{
    if (n_ctx < 4) return es_fail(ES_E_INVAL, "perplexity context must be at least 4 tokens");
    if (n_ctx > m->hp.n_ctx)
        return es_fail(ES_E_INVAL, "context %d exceeds the model's context of %d tokens", n_ctx,
                       m->hp.n_ctx);
    if (n < 2 * (size_t)n_ctx)
        return es_fail(ES_E_INVAL, "the text tokenizes to %zu tokens; a context of %d needs at "
                       "least %d", n, n_ctx, 2 * n_ctx);
    return ES_OK;
}

es_status es_perplexity(es_model *m, const int32_t *ids, size_t n, int n_ctx, int max_chunks,
                        const es_session_params *params, es_ppl_progress_fn progress,
                        void *user, es_ppl_result *out)
{
    memset(out, 0, sizeof(*out));
    if (!m) return es_fail(ES_E_INVAL, "es_perplexity: NULL model");
    ES_TRY(check_ppl(m, n, n_ctx)); /* before a session is sized for n_ctx */
    es_session_params p = params ? *params : es_session_default_params();
    p.max_tokens = n_ctx;
    p.max_logits_rows = n_ctx; /* es_session_perplexity holds a chunk's logits */
    p.head_outputs = 0;
    es_session *s = NULL;
    ES_TRY(es_session_create(m, &p, &s));
    es_status st = es_session_perplexity(s, ids, n, n_ctx, max_chunks, progress, user, out);
    es_session_destroy(s);
    return st;
}

es_status es_session_perplexity(es_session *s, const int32_t *ids, size_t n, int n_ctx,
                                int max_chunks, es_ppl_progress_fn progress, void *user,
                                es_ppl_result *out)
{
    memset(out, 0, sizeof(*out));
    const es_model *m = es_session_model(s);
    if (!m) return es_fail(ES_E_INVAL, "es_session_perplexity: NULL session");
    ES_TRY(check_ppl(m, n, n_ctx));
    int n_chunk = (int)(n / (size_t)n_ctx);
    if (max_chunks > 0 && max_chunks < n_chunk) n_chunk = max_chunks;
    const int nv = m->hp.n_vocab, first = n_ctx / 2;
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
        if ((st = es_session_prefill(s, chunk, (size_t)n_ctx, 1, logits)) != ES_OK) break;
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
