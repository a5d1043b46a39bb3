/* estream's own POST /v1/score and POST /v1/classify: the score records of `estream score`
 * (the library's records, read from JSON by records/score_rec.c) over HTTP, for clients that want
 * choices and labels in one call.
 *
 *   /v1/score     {"records": [record, ..], "top": N (0..20, default 0)}
 *                 -> {"object": "score", "model", "results": [{"index": i, <what estream score
 *                    writes for the record, after "line" and "id">}, ..], "summary": {acc..}
 *                    (records with "gold" only), "usage": {"prompt_tokens", "total_tokens"}}
 *   /v1/classify  {"input": S or [S, ..], "labels": [L, ..]}
 *                 -> {"object": "classification", "model", "data": [{"index": i, "label": k,
 *                    "label_text": L_k, "probs": [..], "label_logprobs": [..]}, ..], "usage"}
 */
#include "serve/api.h"

#include <stdlib.h>

typedef struct score_req {
    score_opts o;
    json_t *labels; /* classify: the labels (for label_text) */
} score_req;

static void free_score(void *p)
{
    score_req *s = p;
    if (s) json_decref(s->labels);
    free(s);
}

/* A request of one unit per record of recs, each parsed with o. */
static sv_req *records_req(const sv_api_env *env, json_t *recs, const score_opts *o,
                           json_t *labels, const char *field, sv_err *e)
{
    const int k = (int)json_array_size(recs);
    sv_req *q = sv_req_new(k);
    score_req *sr = malloc(sizeof(*sr));
    if (!q || !sr) {
        free(sr);
        sv_req_free(q);
        return sv_fail(e, 503, NULL, "out of memory");
    }
    sr->o = *o;
    sr->labels = json_incref(labels);
    q->api = sr;
    q->free_api = free_score;
    for (int i = 0; i < k; i++) {
        json_t *r = json_array_get(recs, (size_t)i);
        if (!json_is_object(r)) {
            sv_req_free(q);
            return sv_fail(e, 400, field, "%s[%d] is not an object", field, i);
        }
        score_rec_parse(env->m, o, r, &q->units[i].r);
    }
    if (!sv_check_units(env, q, field, e)) {
        sv_req_free(q);
        return NULL;
    }
    return q;
}

sv_req *sv_score_parse(const sv_api_env *env, json_t *body, sv_err *e)
{
    json_t *recs = json_object_get(body, "records");
    if (!json_is_array(recs) || json_array_size(recs) == 0)
        return sv_fail(e, 400, "records", "\"records\" must be a non-empty array of score "
                                          "records (see estream score --help)");
    score_opts o = {.bos = env->bos};
    json_t *top = json_object_get(body, "top");
    if (top && !json_is_null(top)) {
        if (!json_is_integer(top) || json_integer_value(top) < 0 || json_integer_value(top) > 20)
            return sv_fail(e, 400, "top", "\"top\" must be an integer in 0..20");
        o.top = (int)json_integer_value(top);
    }
    return records_req(env, recs, &o, NULL, "records", e);
}

/* What a reply costs while it is made (as sv_completions_reply_bytes in api_openai.c): the
 * reply, a result and each sequence; a text or ids record lists each of its tokens (id,
 * log-prob, greedy) and each token's alternatives ([id, log-prob] pairs). */
enum { SC_REPLY = 4096, SC_RESULT = 768, SC_SEQ = 320, SC_TOKEN = 192, SC_ALT = 256 };

uint64_t sv_score_reply_bytes(const sv_api_env *env, const sv_req *q)
{
    (void)env;
    uint64_t b = SC_REPLY;
    for (int i = 0; i < q->n_units; i++) {
        const rec *r = &q->units[i].r;
        const uint64_t listed = score_rec_listed_tokens(r);
        const int top = r->n_seqs == 1 && r->seqs[0].top_ids ? r->seqs[0].top_n : 0;
        b +=
            SC_RESULT + (uint64_t)r->n_seqs * SC_SEQ + listed * (SC_TOKEN + (uint64_t)top * SC_ALT);
    }
    return b;
}

static json_t *usage(const sv_req *q)
{
    return json_pack("{s:I,s:I}", "prompt_tokens", (json_int_t)q->n_tokens, "total_tokens",
                     (json_int_t)q->n_tokens);
}

json_t *sv_score_reply(const sv_api_env *env, const sv_req *q)
{
    const score_req *sr = q->api;
    json_t *results = json_array();
    score_tally t = {0};
    for (int i = 0; results && i < q->n_units; i++) {
        json_t *o = json_pack("{s:i}", "index", i);
        if (!o) {
            json_decref(results);
            return NULL;
        }
        if (!score_rec_emit(env->m, &sr->o, &q->units[i].r, o, &t) ||
            json_array_append_new(results, o)) {
            json_decref(results);
            return NULL;
        }
    }
    if (!results) return NULL;
    json_t *reply = json_pack("{s:s,s:s,s:o,s:o}", "object", "score", "model", env->model_name,
                              "results", results, "usage", usage(q));
    if (reply && t.n_gold) {
        json_t *sum = json_object();
        score_tally_summary(&t, sum);
        json_object_set_new(reply, "summary", sum);
    }
    return reply;
}

sv_req *sv_classify_parse(const sv_api_env *env, json_t *body, sv_err *e)
{
    json_t *labels = json_object_get(body, "labels");
    if (!json_is_array(labels) || json_array_size(labels) == 0)
        return sv_fail(e, 400, "labels", "\"labels\" must be a non-empty array of strings");
    for (size_t i = 0; i < json_array_size(labels); i++)
        if (!json_is_string(json_array_get(labels, i)))
            return sv_fail(e, 400, "labels", "\"labels\"[%zu] is not a string", i);
    json_t *in = json_object_get(body, "input");
    json_t *recs = json_array();
    if (!recs) return sv_fail(e, 503, NULL, "out of memory");
    if (json_is_string(in)) {
        json_array_append_new(recs, json_pack("{s:O,s:O}", "text", in, "labels", labels));
    } else if (json_is_array(in) && json_array_size(in) > 0) {
        for (size_t i = 0; i < json_array_size(in); i++) {
            json_t *x = json_array_get(in, i);
            if (!json_is_string(x)) {
                json_decref(recs);
                return sv_fail(e, 400, "input", "\"input\"[%zu] is not a string", i);
            }
            json_array_append_new(recs, json_pack("{s:O,s:O}", "text", x, "labels", labels));
        }
    } else {
        json_decref(recs);
        return sv_fail(e, 400, "input", "\"input\" must be a string or a non-empty array of "
                                        "strings");
    }
    const size_t want = json_is_string(in) ? 1 : json_array_size(in);
    if (json_array_size(recs) != want) {
        json_decref(recs);
        return sv_fail(e, 503, NULL, "out of memory");
    }
    const score_opts o = {0};
    sv_req *q = records_req(env, recs, &o, labels, "input", e);
    json_decref(recs);
    for (size_t i = 0; q && i < json_array_size(labels); i++)
        q->kept_bytes += 96 + json_string_length(json_array_get(labels, i));
    return q;
}

/* A reply's cost (as above): an item, each label's probability and log-prob, and the text of
 * the label chosen (shared with the request's, but written out: 4 bytes a byte in the dump's
 * doubling buffer and its copy). */
enum { CL_REPLY = 4096, CL_ITEM = 1280, CL_LABEL = 192, CL_TEXT_BYTE = 4 };

uint64_t sv_classify_reply_bytes(const sv_api_env *env, const sv_req *q)
{
    (void)env;
    const score_req *sr = q->api;
    const uint64_t labels = json_array_size(sr->labels);
    uint64_t longest = 0;
    for (size_t i = 0; i < labels; i++) {
        const uint64_t n = json_string_length(json_array_get(sr->labels, i));
        if (n > longest) longest = n;
    }
    return CL_REPLY + (uint64_t)q->n_units * (CL_ITEM + labels * CL_LABEL + longest * CL_TEXT_BYTE);
}

json_t *sv_classify_reply(const sv_api_env *env, const sv_req *q)
{
    const score_req *sr = q->api;
    json_t *data = json_array();
    for (int i = 0; data && i < q->n_units; i++) {
        json_t *o = json_object();
        if (!o) {
            json_decref(data);
            return NULL;
        }
        if (!score_rec_emit(env->m, &sr->o, &q->units[i].r, o, NULL)) {
            json_decref(o);
            json_decref(data);
            return NULL;
        }
        json_t *best = json_object_get(o, "label");
        json_t *item = json_pack("{s:i,s:O?,s:O?,s:O?,s:O?}", "index", i, "label", best,
                                 "label_text",
                                 json_array_get(sr->labels, (size_t)json_integer_value(best)),
                                 "probs", json_object_get(o, "probs"), "label_logprobs",
                                 json_object_get(o, "label_logprobs"));
        json_decref(o);
        if (!item || json_array_append_new(data, item)) {
            json_decref(data);
            return NULL;
        }
    }
    if (!data) return NULL;
    return json_pack("{s:s,s:s,s:o,s:o}", "object", "classification", "model", env->model_name,
                     "data", data, "usage", usage(q));
}
