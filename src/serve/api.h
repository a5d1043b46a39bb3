/* The endpoints' request parsers and replies, apart from HTTP so that the fuzz target
 * (tests/fuzz/fuzz_serve.c) reaches them without a socket or a model run.
 *
 * A model endpoint's parser turns the JSON body into a request: units with their sequences
 * (records/), limits checked, its memory estimated; the reply is built from the outputs once the
 * executor ran them. The other endpoints (tokenize, detokenize, models, tokenizer_info) answer
 * directly. Errors are OpenAI's shape: {"error": {"message", "type", "param", "code"}}. */
#ifndef ES_SERVE_API_H
#define ES_SERVE_API_H

#include "serve/exec.h"

#include <jansson.h>

typedef struct sv_api_env {
    const es_model *m;
    const char *model_name;
    es_pooling pooling;        /* /v1/embeddings */
    int normalize;
    es_bos_rule bos;           /* completions' prompts and score's ids records */
    const char *chat_template; /* --chat-template's text (NULL: the model's) */
    const char *rerank_template; /* --rerank-template's text (NULL: Qwen3-Reranker's) */
    int64_t max_request_tokens;
    int max_prompt_tokens;     /* the most tokens of one unit (all its sequences): the
                                * session's capacity (a unit longer than a batch runs alone) */
    int max_model_len;         /* the longest prompt: the capacity or the model's context,
                                * whichever is less; what /v1/models and /tokenize advertise */
    int max_seqs;              /* the most sequences of one unit */
    size_t max_piece_bytes;    /* the longest token text of the vocabulary (a reply's bound) */
    int64_t created;           /* the server's start, Unix seconds (/v1/models) */
} sv_api_env;

typedef struct sv_err {
    int status;                /* HTTP status */
    const char *type;          /* "invalid_request_error", ... */
    char param[64];            /* the field at fault, "" when none */
    char msg[512];
} sv_err;

/* Sets e (status, type, param; the message formatted) and returns NULL, for parsers. */
void *sv_fail(sv_err *e, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* An optional member of body (absent or null: dflt): an integer in lo..hi, or a boolean; false
 * with e set (a 400 naming it). */
bool sv_opt_int(json_t *body, const char *name, int lo, int hi, int dflt, int *out, sv_err *e);
bool sv_opt_bool(json_t *body, const char *name, bool dflt, bool *out, sv_err *e);
/* The longest token text of m's vocabulary, for sv_api_env.max_piece_bytes. */
size_t sv_max_piece_bytes(const es_model *m);
/* The error body of e (a new reference; NULL when out of memory). */
json_t *sv_err_body(const sv_err *e);

/* Model endpoints (SV_EP_COMPLETIONS .. SV_EP_LAST_MODEL): the request, or NULL with e set. Its
 * mem_bytes is what it holds while admitted, estimated from what it asks for (its tokens, the
 * outputs asked, the texts kept and its reply), never from the body's size; the request keeps
 * no reference into body. */
sv_req *sv_api_parse(const sv_api_env *env, int ep, json_t *body, sv_err *e);
/* Of mem_bytes, the reply: its JSON tree and text, which exist at once while it is made. An
 * upper bound of what sv_api_reply and json_dumps allocate for the request (the fuzz target
 * checks it). */
uint64_t sv_api_reply_bytes(const sv_api_env *env, const sv_req *q);
/* The reply of a request whose units all ran; NULL when out of memory. */
json_t *sv_api_reply(const sv_api_env *env, const sv_req *q);
/* The other endpoints: the reply, or NULL with e set. body is NULL for GET. */
json_t *sv_api_direct(const sv_api_env *env, int ep, json_t *body, sv_err *e);

/* ---- shared by the api_*.c files ---- */
/* A token's text for JSON: the piece when it is valid UTF-8, else "bytes:\xNN..." (vLLM's
 * spelling of a partial character). */
json_t *sv_token_json(const es_model *m, int32_t id);
/* s[0..n) with every invalid UTF-8 sequence replaced by U+FFFD (malloc'd, NUL-terminated). */
char *sv_utf8_clean(const char *s, size_t n, size_t *out_len);
/* Code points in s[0..n) (bytes that do not continue a character). */
size_t sv_utf8_count(const char *s, size_t n);
/* Options shared by every model endpoint parser: "model" a string when present. */
bool sv_check_model(json_t *body, sv_err *e);

/* The endpoint files' own parsers and replies (api_dispatch.c dispatches). */
sv_req *sv_completions_parse(const sv_api_env *env, json_t *body, sv_err *e);
json_t *sv_completions_reply(const sv_api_env *env, const sv_req *q);
sv_req *sv_embeddings_parse(const sv_api_env *env, json_t *body, sv_err *e);
json_t *sv_embeddings_reply(const sv_api_env *env, const sv_req *q);
sv_req *sv_score_parse(const sv_api_env *env, json_t *body, sv_err *e);
json_t *sv_score_reply(const sv_api_env *env, const sv_req *q);
sv_req *sv_classify_parse(const sv_api_env *env, json_t *body, sv_err *e);
json_t *sv_classify_reply(const sv_api_env *env, const sv_req *q);
sv_req *sv_chat_parse(const sv_api_env *env, json_t *body, sv_err *e);
json_t *sv_chat_reply(const sv_api_env *env, const sv_req *q);
/* /v1/rerank (Jina and Cohere's shape) and, with tei, /rerank (text-embeddings-inference's) */
sv_req *sv_rerank_parse(const sv_api_env *env, json_t *body, bool tei, sv_err *e);
json_t *sv_rerank_reply(const sv_api_env *env, const sv_req *q);
uint64_t sv_completions_reply_bytes(const sv_api_env *env, const sv_req *q);
uint64_t sv_embeddings_reply_bytes(const sv_api_env *env, const sv_req *q);
uint64_t sv_score_reply_bytes(const sv_api_env *env, const sv_req *q);
uint64_t sv_classify_reply_bytes(const sv_api_env *env, const sv_req *q);
uint64_t sv_chat_reply_bytes(const sv_api_env *env, const sv_req *q);
uint64_t sv_rerank_reply_bytes(const sv_api_env *env, const sv_req *q);

/* Cuts a prompt value (a string, a list of strings, a list of ids, a list of id lists) into
 * items: each a new reference to a record object {"text": s} or {"ids": [..]} in *items (a
 * JSON array the caller releases). NULL with e set (param names the field). */
json_t *sv_prompt_records(json_t *v, const char *field, sv_err *e);
/* Checks the request's units after parsing: each unit's error (400 naming field[i]), its tokens
 * against one batch and its sequences, and the request's tokens; sets q->n_tokens. */
bool sv_check_units(const sv_api_env *env, sv_req *q, const char *field, sv_err *e);

#endif
