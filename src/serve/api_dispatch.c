/* The model endpoints' dispatch: a request to its endpoint's parser (api_openai.c, api_score.c,
 * api_chat.c) with the memory estimate of what it holds while admitted, and a finished request to
 * its endpoint's reply and its reply's size. */
#include "serve/api.h"

/* What a request holds while admitted, from what it asks for (docs/serve.md "What a request
 * costs"): its structures, and for each sequence its ids and the outputs it asked for, exactly as
 * the records allocated them; the texts it keeps for its reply; and its reply as JSON (the
 * endpoint's estimate: the tree and its text, which exist together while it is written). The
 * body's size plays no part: the body and its JSON tree are freed once parsed (their memory is
 * counted while they exist, jmem.h). */
static uint64_t estimate(const sv_api_env *env, const sv_req *q)
{
    uint64_t b = 1024 + q->kept_bytes + sv_api_reply_bytes(env, q);
    const uint64_t n_embd = (uint64_t)es_model_n_embd(env->m);
    for (int i = 0; i < q->n_units; i++) {
        const rec *r = &q->units[i].r;
        b += 256; /* the unit, its record and the kind's state */
        for (int j = 0; j < r->n_seqs; j++) {
            const es_seq *s = &r->seqs[j];
            const uint64_t n = s->n_ids;
            b += 256 + n * 4; /* the sequence, its allocations' headers, its ids */
            if (s->token_logprob) b += n * 4;
            if (s->token_rank) b += n * 4;
            if (s->top_ids) b += n * (uint64_t)s->top_n * 8;
            b += (uint64_t)s->next_top_k * 8 + (uint64_t)s->n_labels * 8;
            if (s->embedding) b += n_embd * 4 * (s->pooling == ES_POOLING_NONE ? n : 1);
        }
    }
    return b;
}

uint64_t sv_api_reply_bytes(const sv_api_env *env, const sv_req *q)
{
    switch (q->endpoint) {
    case SV_EP_COMPLETIONS: return sv_completions_reply_bytes(env, q);
    case SV_EP_EMBEDDINGS: return sv_embeddings_reply_bytes(env, q);
    case SV_EP_SCORE: return sv_score_reply_bytes(env, q);
    case SV_EP_CLASSIFY: return sv_classify_reply_bytes(env, q);
    case SV_EP_CHAT: return sv_chat_reply_bytes(env, q);
    case SV_EP_RERANK:
    case SV_EP_RERANK_TEI: return sv_rerank_reply_bytes(env, q);
    default: return 0;
    }
}

sv_req *sv_api_parse(const sv_api_env *env, int ep, json_t *body, sv_err *e)
{
    if (!json_is_object(body)) return sv_fail(e, 400, NULL, "the body must be a JSON object");
    if (!sv_check_model(body, e)) return NULL;
    sv_req *q = ep == SV_EP_COMPLETIONS  ? sv_completions_parse(env, body, e)
                : ep == SV_EP_EMBEDDINGS ? sv_embeddings_parse(env, body, e)
                : ep == SV_EP_SCORE      ? sv_score_parse(env, body, e)
                : ep == SV_EP_CLASSIFY   ? sv_classify_parse(env, body, e)
                : ep == SV_EP_CHAT       ? sv_chat_parse(env, body, e)
                : ep == SV_EP_RERANK || ep == SV_EP_RERANK_TEI
                    ? sv_rerank_parse(env, body, ep == SV_EP_RERANK_TEI, e)
                                         : sv_fail(e, 404, NULL, "not a model endpoint");
    if (!q) return NULL;
    q->endpoint = ep;
    q->mem_bytes = estimate(env, q);
    return q;
}

json_t *sv_api_reply(const sv_api_env *env, const sv_req *q)
{
    switch (q->endpoint) {
    case SV_EP_COMPLETIONS: return sv_completions_reply(env, q);
    case SV_EP_EMBEDDINGS: return sv_embeddings_reply(env, q);
    case SV_EP_SCORE: return sv_score_reply(env, q);
    case SV_EP_CLASSIFY: return sv_classify_reply(env, q);
    case SV_EP_CHAT: return sv_chat_reply(env, q);
    case SV_EP_RERANK:
    case SV_EP_RERANK_TEI: return sv_rerank_reply(env, q);
    default: return NULL;
    }
}
