/* POST /v1/chat/completions (OpenAI's chat shape, prefill-only), POST /v1/rerank (Jina's and
 * Cohere's shape, as llama-server and vLLM serve it) and POST /rerank (text-embeddings-
 * inference's).
 *
 * DESIGN
 * - A chat is one unit: the library's ES_RECORD_PROMPT of the messages, rendered with the
 *   model's chat template (or --chat-template) and its generation prompt, under the server's
 *   BOS rule (docs/prompts.md: a template that writes bos_token keeps its one BOS). estream is
 *   prefill-only: max_tokens (or max_completion_tokens) 1, the default, gives the greedy next
 *   token as the assistant's content with its log-prob and top_logprobs alternatives (the
 *   distribution an LLM judge reads); 0 gives none; more is refused, as are n > 1, stream and
 *   tools. Sampling fields are accepted and change nothing.
 * - A rerank request is one unit (all its pairs run in one batch): ES_RECORD_RERANK of the
 *   query and documents, each pair rendered with Qwen3-Reranker's recipe (or --rerank-template)
 *   and scored P(yes) / (P(yes) + P(no)) at its last position, the label probability estream
 *   score gives for the same rendered prompt. Results are sorted by score (ties: the lower
 *   index first) and cut to top_n.
 * - Every bad input is a 400 naming the field (messages[2].role, documents, top_n); a template
 *   that raises (a chat the template refuses) is a 400 with the template's message.
 */
#include "serve/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_TOP_LOGPROBS 20

/* ---- /v1/chat/completions ---- */

typedef struct chat_req {
    bool logprobs;
    int top_logprobs;
    int max_tokens; /* 0 or 1 */
} chat_req;

/* The unit's error as the reply: a template error or a chat the record refuses is the
 * client's (400), memory the server's (503). */
static void *unit_fail(const rec *r, const char *field, sv_err *e)
{
    return sv_fail(e, rec_oom(r) ? 503 : 400, field, "%s", r->error);
}

sv_req *sv_chat_parse(const sv_api_env *env, json_t *body, sv_err *e)
{
    chat_req c = {0};
    bool stream;
    int n;
    static const char *const refused[] = {"tools", "tool_choice", "functions", "function_call"};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        json_t *v = json_object_get(body, refused[i]);
        if (v && !json_is_null(v) && !(json_is_array(v) && json_array_size(v) == 0) &&
            !(json_is_string(v) && !strcmp(json_string_value(v), "none")))
            return sv_fail(e, 400, refused[i], "\"%s\" is not supported: estream is prefill-only "
                           "and gives the next token's distribution, not tool calls",
                           refused[i]);
    }
    const char *mt_name = json_object_get(body, "max_completion_tokens") ? "max_completion_tokens"
                                                                          : "max_tokens";
    json_t *mt = json_object_get(body, mt_name);
    if (mt && json_is_integer(mt) && json_integer_value(mt) > 1)
        return sv_fail(e, 400, mt_name,
                       "%s is %lld, but estream is prefill-only: it gives the greedy next token "
                       "(1) or none (0), never a longer reply",
                       mt_name, (long long)json_integer_value(mt));
    if (!sv_opt_int(body, mt_name, 0, 1, 1, &c.max_tokens, e) ||
        !sv_opt_bool(body, "logprobs", false, &c.logprobs, e) ||
        !sv_opt_int(body, "top_logprobs", 0, MAX_TOP_LOGPROBS, 0, &c.top_logprobs, e) ||
        !sv_opt_int(body, "n", 1, 1, 1, &n, e) || !sv_opt_bool(body, "stream", false, &stream, e))
        return NULL;
    if (stream) return sv_fail(e, 400, "stream", "streamed replies are not supported");
    json_t *tlp = json_object_get(body, "top_logprobs");
    if (tlp && !json_is_null(tlp) && !c.logprobs)
        return sv_fail(e, 400, "top_logprobs", "\"top_logprobs\" needs \"logprobs\": true");
    json_t *messages = json_object_get(body, "messages");
    if (!messages) return sv_fail(e, 400, "messages", "\"messages\" is required");
    /* the unit: the messages as a score record, rendered and tokenized by the library */
    json_t *recj = json_pack("{s:O}", "messages", messages);
    sv_req *q = sv_req_new(1);
    chat_req *cp = malloc(sizeof(*cp));
    if (!recj || !q || !cp) {
        json_decref(recj);
        free(cp);
        sv_req_free(q);
        return sv_fail(e, 503, NULL, "out of memory");
    }
    *cp = c;
    q->api = cp;
    q->free_api = free;
    const score_opts so = {.bos = env->bos, .chat_template = env->chat_template,
                           .chat_top = c.max_tokens ? (c.top_logprobs > 1 ? c.top_logprobs : 1)
                                                    : 1};
    score_rec_parse(env->m, &so, recj, &q->units[0].r);
    json_decref(recj);
    if (q->units[0].r.error) {
        unit_fail(&q->units[0].r, "messages", e);
        sv_req_free(q);
        return NULL;
    }
    if (!sv_check_units(env, q, "messages", e)) {
        sv_req_free(q);
        return NULL;
    }
    return q;
}

/* A token's entry of OpenAI's chat logprobs: {"token", "logprob", "bytes"}. */
static json_t *token_entry(const es_model *m, int32_t id, float lp)
{
    size_t n = 0;
    const char *p = es_token_piece(m, id, &n);
    json_t *bytes = json_array();
    for (size_t i = 0; p && bytes && i < n; i++)
        json_array_append_new(bytes, json_integer((unsigned char)p[i]));
    return json_pack("{s:o,s:o,s:o}", "token", sv_token_json(m, id), "logprob",
                     rec_json_float(lp), "bytes", bytes ? bytes : json_null());
}

/* What a reply costs while it is made (as sv_completions_reply_bytes in api_openai.c): the
 * reply and its choice; the content (the greedy token's text); with logprobs, per listed token
 * (the token and its top_logprobs) an entry of its text, a log-prob and a list of its bytes (a
 * JSON integer each). A token's text is at most the vocabulary's longest. */
enum { CH_REPLY = 4096, CH_ENTRY = 512, CH_TEXT_BYTE = 8, CH_BYTE_INT = 96 };

uint64_t sv_chat_reply_bytes(const sv_api_env *env, const sv_req *q)
{
    const chat_req *c = q->api;
    const uint64_t piece = env->max_piece_bytes;
    uint64_t b = CH_REPLY + (uint64_t)c->max_tokens * piece * CH_TEXT_BYTE;
    if (c->logprobs && c->max_tokens)
        b += (1 + (uint64_t)c->top_logprobs) *
             (CH_ENTRY + piece * (2 * CH_TEXT_BYTE + CH_BYTE_INT));
    return b;
}

json_t *sv_chat_reply(const sv_api_env *env, const sv_req *q)
{
    const chat_req *c = q->api;
    const es_model *m = env->m;
    es_record_result x;
    if (es_record_result_get(q->units[0].r.r, &x)) return NULL;
    const bool gen = c->max_tokens == 1;
    const int32_t g = gen ? x.next_ids[0] : -1;
    size_t n = 0;
    const char *piece = gen ? es_token_piece(m, g, &n) : "";
    size_t clen;
    char *content = sv_utf8_clean(piece ? piece : "", piece ? n : 0, &clen);
    if (!content) return NULL;
    json_t *logprobs = json_null();
    if (c->logprobs) {
        json_t *list = json_array();
        if (gen) {
            json_t *tok = token_entry(m, g, x.next_logprobs[0]), *tops = json_array();
            for (int k = 0; k < c->top_logprobs && tops; k++)
                json_array_append_new(tops, token_entry(m, x.next_ids[k], x.next_logprobs[k]));
            json_object_set_new(tok, "top_logprobs", tops);
            json_array_append_new(list, tok);
        }
        logprobs = json_pack("{s:o}", "content", list);
    }
    static _Atomic unsigned long long serial;
    char id[48];
    snprintf(id, sizeof(id), "chatcmpl-%llx%llx", (unsigned long long)time(NULL), ++serial);
    json_t *choice =
        json_pack("{s:i,s:{s:s,s:s%},s:o,s:s}", "index", 0, "message", "role", "assistant",
                  "content", content, clen, "logprobs", logprobs, "finish_reason",
                  gen && g == es_model_eos(m) ? "stop" : "length");
    free(content);
    return json_pack("{s:s,s:s,s:I,s:s,s:[o],s:{s:I,s:i,s:I}}", "id", id, "object",
                     "chat.completion", "created", (json_int_t)time(NULL), "model",
                     env->model_name, "choices", choice, "usage", "prompt_tokens",
                     (json_int_t)q->n_tokens, "completion_tokens", c->max_tokens, "total_tokens",
                     (json_int_t)q->n_tokens + c->max_tokens);
}

/* ---- /v1/rerank and /rerank ---- */

typedef struct rerank_req {
    bool tei;
    int top_n;          /* results kept (all: the number of documents) */
    bool return_documents;
    json_t *documents;  /* the texts, for return_documents */
} rerank_req;

static void free_rerank(void *p)
{
    rerank_req *r = p;
    if (r) json_decref(r->documents);
    free(r);
}

sv_req *sv_rerank_parse(const sv_api_env *env, json_t *body, bool tei, sv_err *e)
{
    const char *dfield = tei ? "texts" : "documents";
    json_t *query = json_object_get(body, "query"), *docs = json_object_get(body, dfield);
    if (!query) return sv_fail(e, 400, "query", "\"query\" is required");
    if (!json_is_string(query)) return sv_fail(e, 400, "query", "\"query\" must be a string");
    if (!json_is_array(docs) || json_array_size(docs) == 0)
        return sv_fail(e, 400, dfield, "\"%s\" must be a non-empty list of %s", dfield,
                       tei ? "strings" : "strings or {\"text\": ...} objects");
    const size_t nd = json_array_size(docs);
    if (nd > (size_t)env->max_seqs)
        return sv_fail(e, 413, dfield, "%zu documents; this server runs at most %d in one "
                       "request (a request's pairs run in one batch)", nd, env->max_seqs);
    rerank_req rr = {.tei = tei, .top_n = (int)nd, .return_documents = !tei};
    json_t *texts = json_array();
    for (size_t i = 0; texts && i < nd; i++) {
        json_t *d = json_array_get(docs, i);
        json_t *t = json_is_object(d) && !tei ? json_object_get(d, "text") : d;
        if (!json_is_string(t)) {
            json_decref(texts);
            return sv_fail(e, 400, dfield, "\"%s\"[%zu] must be a string%s", dfield, i,
                           tei ? "" : " or {\"text\": string}");
        }
        json_array_append(texts, t);
    }
    if (!texts) return sv_fail(e, 503, NULL, "out of memory");
    json_t *tn = json_object_get(body, "top_n");
    if (tn && !json_is_null(tn)) {
        if (tei || !json_is_integer(tn) || json_integer_value(tn) < 1) {
            json_decref(texts);
            return sv_fail(e, 400, "top_n", tei ? "\"top_n\" is not part of /rerank"
                                                : "\"top_n\" must be a positive integer");
        }
        if (json_integer_value(tn) < (json_int_t)nd) rr.top_n = (int)json_integer_value(tn);
    }
    const char *rd = tei ? "return_text" : "return_documents";
    if (!sv_opt_bool(body, rd, !tei, &rr.return_documents, e)) {
        json_decref(texts);
        return NULL;
    }
    json_t *ins = json_object_get(body, "instruction");
    if (ins && !json_is_null(ins) && !json_is_string(ins)) {
        json_decref(texts);
        return sv_fail(e, 400, "instruction", "\"instruction\" must be a string");
    }
    json_t *recj = json_pack("{s:O,s:O}", "query", query, "documents", texts);
    if (recj && json_is_string(ins)) json_object_set(recj, "instruction", ins);
    sv_req *q = sv_req_new(1);
    rerank_req *rp = malloc(sizeof(*rp));
    if (!recj || !q || !rp) {
        json_decref(recj);
        json_decref(texts);
        free(rp);
        sv_req_free(q);
        return sv_fail(e, 503, NULL, "out of memory");
    }
    rr.documents = texts;
    *rp = rr;
    q->api = rp;
    q->free_api = free_rerank;
    const score_opts so = {.rerank_template = env->rerank_template};
    score_rec_parse(env->m, &so, recj, &q->units[0].r);
    json_decref(recj);
    const rec *r = &q->units[0].r;
    if (r->error) {
        unit_fail(r, dfield, e);
        sv_req_free(q);
        return NULL;
    }
    if (r->n_tokens > env->max_prompt_tokens) {
        sv_fail(e, 413, dfield, "the query and its %zu documents are %lld tokens in all; this "
                "server runs at most %d in one request (all pairs in one batch)", nd,
                (long long)r->n_tokens, env->max_prompt_tokens);
        sv_req_free(q);
        return NULL;
    }
    if (!sv_check_units(env, q, dfield, e)) {
        sv_req_free(q);
        return NULL;
    }
    /* the reply needs the texts only to return them: they are what the request keeps */
    for (size_t i = 0; rp->return_documents && i < nd; i++)
        q->kept_bytes += 96 + json_string_length(json_array_get(texts, i));
    if (!rp->return_documents) {
        json_decref(rp->documents);
        rp->documents = NULL;
    }
    return q;
}

/* A reply's cost: the reply, each result kept (index and score) and, with the documents, each
 * document's text written out (shared with the request's, but dumped: 4 bytes a byte). */
enum { RR_REPLY = 4096, RR_ITEM = 512, RR_DOC = 256, RR_TEXT_BYTE = 4 };

uint64_t sv_rerank_reply_bytes(const sv_api_env *env, const sv_req *q)
{
    (void)env;
    const rerank_req *rr = q->api;
    uint64_t b = RR_REPLY + (uint64_t)rr->top_n * RR_ITEM;
    for (size_t i = 0; rr->return_documents && i < json_array_size(rr->documents); i++)
        b += RR_DOC + json_string_length(json_array_get(rr->documents, i)) * RR_TEXT_BYTE;
    return b;
}

json_t *sv_rerank_reply(const sv_api_env *env, const sv_req *q)
{
    const rerank_req *rr = q->api;
    es_record_result x;
    if (es_record_result_get(q->units[0].r.r, &x)) return NULL;
    json_t *results = json_array();
    if (!results) return NULL;
    for (int k = 0; k < rr->top_n && k < x.n_items; k++) {
        const int i = x.ranking[k];
        json_t *doc = json_array_get(rr->documents, (size_t)i), *o;
        if (rr->tei)
            o = json_pack("{s:i,s:o}", "index", i, "score", rec_json_float(x.probs[i]));
        else
            o = json_pack("{s:i,s:o}", "index", i, "relevance_score", rec_json_float(x.probs[i]));
        if (o && rr->return_documents)
            json_object_set_new(o, rr->tei ? "text" : "document",
                                rr->tei ? json_incref(doc) : json_pack("{s:O}", "text", doc));
        json_array_append_new(results, o);
    }
    if (rr->tei) return results; /* text-embeddings-inference answers the list itself */
    static _Atomic unsigned long long serial;
    char id[48];
    snprintf(id, sizeof(id), "rerank-%llx%llx", (unsigned long long)time(NULL), ++serial);
    return json_pack("{s:s,s:s,s:o,s:{s:I,s:I}}", "id", id, "model", env->model_name, "results",
                     results, "usage", "prompt_tokens", (json_int_t)q->n_tokens, "total_tokens",
                     (json_int_t)q->n_tokens);
}
