/* POST /v1/completions and POST /v1/embeddings in OpenAI's shapes (the legacy completions
 * object with logprobs; the embeddings list with float or base64 vectors).
 *
 * DESIGN
 * - A prompt is a record of the library (src/job/record.c, through records/score_rec.c): a
 *   string is ES_RECORD_PROMPT (its tokens, special-token text recognised), ids ES_RECORD_IDS;
 *   both follow the BOS rule (include/estream.h, docs/prompts.md): for a model that adds BOS a
 *   prompt not starting with it is conditioned on one that is not echoed, so `echo` returns
 *   exactly the tokens of the prompt and token_logprobs[0] is the first one's given BOS
 *   (--no-implicit-bos: strings with the tokenizer's BOS echoed, ids as sent). The numbers equal
 *   `estream score`'s on the same ids record.
 * - estream is prefill-only: max_tokens 1 is the greedy next token (the prefill's last row
 *   gives it), 0 is none, more is refused. Sampling options are accepted and have no effect
 *   (the token is always the greedy one); n and best_of above 1 and stream are refused.
 * - top_logprobs holds the `logprobs` best tokens of each position and, as OpenAI's API does,
 *   the token itself when it is not among them (so up to logprobs + 1 entries), with the same
 *   float as token_logprobs: lm-evaluation-harness's greedy check compares the two for equality.
 *   Distinct tokens can share a text (a vocabulary's unused tokens all render as ""): such a
 *   key keeps the best log-prob among them, so the greedy check never takes a worse token that
 *   overwrote the best one's entry for the best.
 * - An input to embed is an embed record (src/job/record.c, through records/embed_rec.c): tokenized
 * as llama-embedding (and `estream embed`) do, pooled and normalised as the server's --pooling
 * says.
 */
#include "serve/api.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_LOGPROBS 20

typedef struct cmpl {
    json_t *prompts; /* the records (kept for the original strings of text prompts) */
    bool echo;
    int logprobs;    /* -1: none asked */
    int max_tokens;  /* 0 or 1 */
} cmpl;

static void free_cmpl(void *p)
{
    cmpl *c = p;
    if (c) json_decref(c->prompts);
    free(c);
}

sv_req *sv_completions_parse(const sv_api_env *env, json_t *body, sv_err *e)
{
    cmpl c = {.logprobs = -1};
    bool stream;
    int n, best_of;
    json_t *mt = json_object_get(body, "max_tokens");
    if (mt && json_is_integer(mt) && json_integer_value(mt) > 1)
        return sv_fail(e, 400, "max_tokens",
                       "max_tokens is %lld, but estream is prefill-only: it gives the greedy next "
                       "token (max_tokens 1) or none (0), never a longer completion",
                       (long long)json_integer_value(mt));
    if (!sv_opt_bool(body, "echo", false, &c.echo, e) ||
        !sv_opt_bool(body, "stream", false, &stream, e) ||
        !sv_opt_int(body, "logprobs", 0, MAX_LOGPROBS, -1, &c.logprobs, e) ||
        !sv_opt_int(body, "max_tokens", 0, 1, 1, &c.max_tokens, e) ||
        !sv_opt_int(body, "n", 1, 1, 1, &n, e) ||
        !sv_opt_int(body, "best_of", 1, 1, 1, &best_of, e))
        return NULL;
    if (stream) return sv_fail(e, 400, "stream", "streamed replies are not supported");
    json_t *t = json_object_get(body, "temperature");
    if (t && !json_is_null(t) && !json_is_number(t))
        return sv_fail(e, 400, "temperature", "\"temperature\" must be a number");
    json_t *prompts = sv_prompt_records(json_object_get(body, "prompt"), "prompt", e);
    if (!prompts) return NULL;
    const int k = (int)json_array_size(prompts);
    sv_req *q = sv_req_new(k);
    cmpl *cp = malloc(sizeof(*cp));
    if (!q || !cp) {
        free(cp);
        sv_req_free(q);
        json_decref(prompts);
        return sv_fail(e, 503, NULL, "out of memory");
    }
    c.prompts = prompts;
    *cp = c;
    q->api = cp;
    q->free_api = free_cmpl;
    /* max_tokens 1: the best next tokens after the prompt too; strings are prompts, and both
     * they and ids follow the server's BOS rule */
    const score_opts so = {.top = c.logprobs > 0 ? c.logprobs : 0,
                           .next_top = c.max_tokens ? (c.logprobs > 1 ? c.logprobs : 1) : 0,
                           .bos = env->bos,
                           .prompts = true};
    for (int i = 0; i < k; i++)
        score_rec_parse(env->m, &so, json_array_get(prompts, (size_t)i), &q->units[i].r);
    if (!sv_check_units(env, q, "prompt", e)) {
        sv_req_free(q);
        return NULL;
    }
    /* the reply needs only the strings of text prompts (its "text" is the prompt as sent): an id
     * list would keep its body's JSON integers alive, 40 bytes an id */
    for (int i = 0; i < k; i++) {
        json_t *text = json_object_get(json_array_get(prompts, (size_t)i), "text");
        if (text) q->kept_bytes += 96 + json_string_length(text);
        else json_array_set_new(prompts, (size_t)i, json_null());
    }
    return q;
}

/* Sets d[key of token id] to lp unless d has that key with a log-prob at least as large:
 * distinct tokens can share a text (a vocabulary's unused tokens all render as ""), and the
 * dict keeps the best of them, so that max(top_logprobs.values()) is the best token's log-prob
 * (lm-evaluation-harness's greedy test) and never the worse log-prob of a later token. */
static void put_best(json_t *d, const es_model *m, int32_t id, float lp)
{
    json_t *key = sv_token_json(m, id);
    if (json_is_string(key)) {
        json_t *old = json_object_get(d, json_string_value(key));
        const double was = json_is_real(old) ? json_real_value(old) : -INFINITY;
        if (!old || (double)lp > was)
            json_object_set_new(d, json_string_value(key), rec_json_float(lp));
    }
    json_decref(key);
}

/* {token text: log-prob} of the top entries, with the token itself (tok, lp) when missing;
 * tokens sharing a text keep the best log-prob (put_best). */
static json_t *top_dict(const es_model *m, const int32_t *ids, const float *lps, int n,
                        int32_t tok, float lp)
{
    json_t *d = json_object();
    bool seen = false;
    for (int i = 0; d && i < n; i++) {
        const bool self = ids[i] == tok;
        seen = seen || self;
        put_best(d, m, ids[i], self ? lp : lps[i]);
    }
    if (d && !seen) put_best(d, m, tok, lp);
    return d;
}

/* Appends the bytes of token id to a growing text buffer. */
typedef struct buf { char *p; size_t n, cap; bool oom; } buf;
static void buf_add(buf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        const size_t cap = (b->n + n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static json_t *one_choice(const sv_api_env *env, const cmpl *c, const rec *r, json_t *prompt,
                          int index)
{
    const es_model *m = env->m;
    es_record_result x;
    if (es_record_result_get(r->r, &x)) return NULL;
    const bool gen = c->max_tokens == 1;
    const int32_t g = gen ? x.next_ids[0] : -1;
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    buf text = {0};
    size_t chars = 0; /* code points of the text so far */
    json_t *given = json_object_get(prompt, "text");
    if (c->echo && given) buf_add(&text, json_string_value(given), json_string_length(given));
    /* as sent, the tokenizer's BOS of a string prompt has no width in its text (unless the
     * text wrote it); under the implicit BOS rule the tokens are the prompt's own */
    size_t bos_len = 0;
    const char *bos_piece = es_model_bos(m) >= 0 ? es_token_piece(m, es_model_bos(m), &bos_len)
                                                 : NULL;
    const bool text_bos = given && bos_piece && json_string_length(given) >= bos_len &&
                          !memcmp(json_string_value(given), bos_piece, bos_len);
    const size_t n_echo = c->echo ? x.n_ids : 0;
    for (size_t i = 0; i < n_echo + gen; i++) {
        const bool is_gen = i == n_echo;
        const int32_t id = is_gen ? g : x.ids[i];
        size_t len;
        const char *piece = es_token_piece(m, id, &len);
        if (!piece) len = 0;
        if (!(c->echo && given) || is_gen) buf_add(&text, piece ? piece : "", len);
        json_array_append_new(tokens, sv_token_json(m, id));
        json_array_append_new(offs, json_integer((json_int_t)chars));
        const bool added_bos = given && i == 0 && env->bos == ES_BOS_AS_SENT &&
                               es_model_add_bos(m) && id == es_model_bos(m) && !text_bos;
        if (!added_bos) chars += sv_utf8_count(piece ? piece : "", len);
        if (c->logprobs < 0) continue;
        if (is_gen) {
            json_array_append_new(lps, rec_json_float(x.next_logprobs[0]));
            json_array_append_new(tops, top_dict(m, x.next_ids, x.next_logprobs, c->logprobs, g,
                                                 x.next_logprobs[0]));
        } else if (i < x.first_scored) {
            json_array_append_new(lps, json_null());
            json_array_append_new(tops, json_null());
        } else {
            const float lp = x.logprobs[i];
            const int top = x.top;
            json_array_append_new(lps, rec_json_float(lp));
            json_array_append_new(tops, top_dict(m, top ? x.top_ids + i * (size_t)top : NULL,
                                                 top ? x.top_logprobs + i * (size_t)top : NULL,
                                                 top, id, lp));
        }
    }
    size_t clean_len;
    char *clean = text.oom ? NULL : sv_utf8_clean(text.p ? text.p : "", text.n, &clean_len);
    free(text.p);
    json_t *logprobs = c->logprobs < 0 ? json_null()
                                       : json_pack("{s:O,s:O,s:O,s:O}", "tokens", tokens,
                                                   "token_logprobs", lps, "top_logprobs", tops,
                                                   "text_offset", offs);
    json_decref(tokens);
    json_decref(lps);
    json_decref(tops);
    json_decref(offs);
    if (!clean) {
        json_decref(logprobs);
        return NULL;
    }
    const char *finish = gen && g == es_model_eos(m) ? "stop" : "length";
    json_t *o = json_pack("{s:i,s:s%,s:o?,s:s}", "index", index, "text", clean, clean_len,
                          "logprobs", logprobs, "finish_reason", finish);
    free(clean);
    return o;
}

json_t *sv_completions_reply(const sv_api_env *env, const sv_req *q)
{
    const cmpl *c = q->api;
    json_t *choices = json_array();
    if (!choices) return NULL;
    for (int i = 0; i < q->n_units; i++) {
        json_t *ch = one_choice(env, c, &q->units[i].r, json_array_get(c->prompts, (size_t)i), i);
        if (!ch || json_array_append_new(choices, ch)) {
            json_decref(choices);
            return NULL;
        }
    }
    static _Atomic unsigned long long serial;
    char id[48];
    snprintf(id, sizeof(id), "cmpl-%llx%llx", (unsigned long long)time(NULL), ++serial);
    const json_int_t completion = (json_int_t)q->n_units * c->max_tokens;
    return json_pack("{s:s,s:s,s:I,s:s,s:o,s:{s:I,s:I,s:I}}", "id", id, "object",
                     "text_completion", "created", (json_int_t)time(NULL), "model",
                     env->model_name, "choices", choices, "usage", "prompt_tokens",
                     (json_int_t)q->n_tokens, "completion_tokens", completion, "total_tokens",
                     (json_int_t)q->n_tokens + completion);
}

/* What a reply costs while it is made: the peak of its JSON tree and its text at once (the dump
 * doubles its buffer, then copies it), measured with the counting allocator of jmem.h and given
 * room (tests/fuzz/fuzz_serve.c checks the bound; docs/serve.md has the numbers). The reply; a
 * choice; each token it lists (tokens and text_offset always, token_logprobs and top_logprobs
 * when logprobs is set) and each entry of a token's top_logprobs; each byte of token text and of
 * echoed text (its string, the UTF-8 check's copy, the dump, which writes a control byte as
 * \u00XX). An entry's key is a token unknown until the run: SV_KEY_BYTES stands for its text. */
enum { CMPL_REPLY = 4096, CMPL_CHOICE = 2048, CMPL_TOKEN = 128, CMPL_TOKEN_LP = 320,
       CMPL_ENTRY = 192, SV_KEY_BYTES = 16, TEXT_BYTE = 8 };

uint64_t sv_completions_reply_bytes(const sv_api_env *env, const sv_req *q)
{
    const cmpl *c = q->api;
    uint64_t b = CMPL_REPLY;
    for (int i = 0; i < q->n_units; i++) {
        const es_seq *s = &q->units[i].r.seqs[0];
        json_t *given = json_object_get(json_array_get(c->prompts, (size_t)i), "text");
        uint64_t pieces = 0; /* the text of the tokens listed */
        for (size_t j = 0; c->echo && j < s->n_ids; j++) {
            size_t len = 0;
            es_token_piece(env->m, s->ids[j], &len);
            pieces += len;
        }
        pieces += (uint64_t)c->max_tokens * SV_KEY_BYTES;
        const uint64_t text = c->echo && given ? json_string_length(given) : pieces;
        const uint64_t listed = (c->echo ? s->n_ids : 0) + (uint64_t)c->max_tokens;
        b += CMPL_CHOICE + text * TEXT_BYTE + pieces * TEXT_BYTE + listed * CMPL_TOKEN;
        if (c->logprobs >= 0)
            b += listed * (CMPL_TOKEN_LP + (uint64_t)(c->logprobs + 1) *
                                               (CMPL_ENTRY + 2 * SV_KEY_BYTES)) +
                 pieces * TEXT_BYTE;
    }
    return b;
}

/* ---- /v1/embeddings ---- */

typedef struct embd { bool base64; } embd;

static void free_embd(void *p)
{
    free(p);
}

sv_req *sv_embeddings_parse(const sv_api_env *env, json_t *body, sv_err *e)
{
    embd o = {false};
    json_t *fmt = json_object_get(body, "encoding_format");
    if (fmt && !json_is_null(fmt)) {
        if (!json_is_string(fmt) || (strcmp(json_string_value(fmt), "float") &&
                                     strcmp(json_string_value(fmt), "base64")))
            return sv_fail(e, 400, "encoding_format", "\"encoding_format\" must be \"float\" or "
                                                      "\"base64\"");
        o.base64 = !strcmp(json_string_value(fmt), "base64");
    }
    json_t *dim = json_object_get(body, "dimensions");
    if (dim && !json_is_null(dim) &&
        (!json_is_integer(dim) || json_integer_value(dim) != es_model_n_embd(env->m)))
        return sv_fail(e, 400, "dimensions", "\"dimensions\" must be the model's width, %d (the "
                       "vectors are not truncated)", es_model_n_embd(env->m));
    json_t *inputs = sv_prompt_records(json_object_get(body, "input"), "input", e);
    if (!inputs) return NULL;
    const int k = (int)json_array_size(inputs);
    sv_req *q = sv_req_new(k);
    embd *op = malloc(sizeof(*op));
    if (!q || !op) {
        free(op);
        sv_req_free(q);
        json_decref(inputs);
        return sv_fail(e, 503, NULL, "out of memory");
    }
    *op = o;
    q->api = op;
    q->free_api = free_embd;
    const embed_opts eo = {.pooling = env->pooling, .normalize = env->normalize};
    for (int i = 0; i < k; i++) embed_rec_parse(env->m, &eo, json_array_get(inputs, (size_t)i),
                                                &q->units[i].r);
    json_decref(inputs);
    if (!sv_check_units(env, q, "input", e)) {
        sv_req_free(q);
        return NULL;
    }
    return q;
}

/* RFC 4648 base64 of n bytes (malloc'd, NUL-terminated). */
static char *base64(const unsigned char *p, size_t n)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc((n + 2) / 3 * 4 + 1), *w = o;
    if (!o) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        const unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) |
                           (i + 2 < n ? p[i + 2] : 0);
        *w++ = abc[v >> 18 & 63];
        *w++ = abc[v >> 12 & 63];
        *w++ = i + 1 < n ? abc[v >> 6 & 63] : '=';
        *w++ = i + 2 < n ? abc[v & 63] : '=';
    }
    *w = 0;
    return o;
}

/* A reply's cost (as sv_completions_reply_bytes): an item, and each float as a JSON number or
 * as base64 text. */
enum { EMB_REPLY = 4096, EMB_ITEM = 768, EMB_FLOAT = 80, EMB_B64 = 24 };

uint64_t sv_embeddings_reply_bytes(const sv_api_env *env, const sv_req *q)
{
    const embd *o = q->api;
    const uint64_t n_embd = (uint64_t)es_model_n_embd(env->m);
    uint64_t b = EMB_REPLY;
    for (int i = 0; i < q->n_units; i++) {
        const es_seq *s = &q->units[i].r.seqs[0];
        const uint64_t floats = n_embd * (s->pooling == ES_POOLING_NONE ? s->n_ids : 1);
        b += EMB_ITEM + floats * (o->base64 ? EMB_B64 : EMB_FLOAT);
    }
    return b;
}

json_t *sv_embeddings_reply(const sv_api_env *env, const sv_req *q)
{
    const embd *o = q->api;
    const size_t n_embd = (size_t)es_model_n_embd(env->m);
    json_t *data = json_array();
    if (!data) return NULL;
    for (int i = 0; i < q->n_units; i++) {
        const es_seq *s = &q->units[i].r.seqs[0];
        const bool nested = s->pooling == ES_POOLING_NONE; /* a vector per token */
        const size_t rows = nested ? s->n_ids : 1;
        json_t *v;
        if (o->base64) {
            /* little-endian float32, as numpy.frombuffer(dtype="float32") reads it */
            char *b = base64((const unsigned char *)s->embedding, rows * n_embd * sizeof(float));
            v = b ? json_string(b) : NULL;
            free(b);
        } else {
            v = json_array();
            for (size_t r = 0; v && r < rows; r++) {
                json_t *row = nested ? json_array() : v;
                for (size_t j = 0; row && j < n_embd; j++)
                    json_array_append_new(row, rec_json_float(s->embedding[r * n_embd + j]));
                if (nested) json_array_append_new(v, row);
            }
        }
        if (!v || json_array_append_new(data, json_pack("{s:s,s:i,s:o}", "object", "embedding",
                                                        "index", i, "embedding", v))) {
            json_decref(data);
            return NULL;
        }
    }
    return json_pack("{s:s,s:o,s:s,s:{s:I,s:I}}", "object", "list", "data", data, "model",
                     env->model_name, "usage", "prompt_tokens", (json_int_t)q->n_tokens,
                     "total_tokens", (json_int_t)q->n_tokens);
}
