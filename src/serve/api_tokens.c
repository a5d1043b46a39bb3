/* The endpoints that do not run the model, in vLLM's shapes where vLLM has them:
 *   GET  /v1/models       the one model: {"object": "list", "data": [{"id", "object": "model",
 *                         "created", "owned_by": "estream", "max_model_len"}]}
 *   GET  /tokenizer_info  {"tokenizer_class", "eos_token", "bos_token", "pad_token",
 *                         "model_max_length", "vocab_size", "add_bos_token", "chat_template"}
 *   POST /tokenize        {"prompt": S, "add_special_tokens": true, "return_token_strs": false}
 *                         -> {"count", "max_model_len", "tokens", "token_strs"}
 *   POST /detokenize      {"tokens": [ids]} -> {"prompt": S}
 * /tokenize recognises special-token text ("<|endoftext|>") as Hugging Face tokenizers do, so a
 * client that encodes the eos_token text of /tokenizer_info gets the EOS id (lm-evaluation-
 * harness's remote tokenizer does). Detokenized text with a partial character has U+FFFD there.
 */
#include "serve/api.h"

#include <stdlib.h>
#include <string.h>

static json_t *token_or_null(const es_model *m, int32_t id)
{
    return id >= 0 ? sv_token_json(m, id) : json_null();
}

static json_t *tokenize(const sv_api_env *env, json_t *body, sv_err *e)
{
    if (!json_is_object(body)) return sv_fail(e, 400, NULL, "the body must be a JSON object");
    if (!sv_check_model(body, e)) return NULL;
    json_t *p = json_object_get(body, "prompt");
    if (!json_is_string(p)) {
        if (json_object_get(body, "messages"))
            return sv_fail(e, 400, "messages", "chat messages are not supported: send \"prompt\"");
        return sv_fail(e, 400, "prompt", "\"prompt\" must be a string");
    }
    json_t *as = json_object_get(body, "add_special_tokens");
    json_t *rs = json_object_get(body, "return_token_strs");
    if ((as && !json_is_boolean(as) && !json_is_null(as)) ||
        (rs && !json_is_boolean(rs) && !json_is_null(rs)))
        return sv_fail(e, 400,
                       as && !json_is_boolean(as) ? "add_special_tokens" : "return_token_strs",
                       "\"%s\" must be true or false",
                       as && !json_is_boolean(as) ? "add_special_tokens" : "return_token_strs");
    const int add = !as || json_is_null(as) || json_is_true(as);
    rec r = {0};
    size_t n = 0;
    const size_t len = json_string_length(p);
    int32_t *ids = rec_tokenize(env->m, &r, json_string_value(p), len, add, 1, &n);
    if (r.error) {
        sv_fail(e, rec_oom(&r) ? 503 : 400, "prompt", "%s", r.error);
        rec_free(&r);
        free(ids);
        return NULL;
    }
    json_t *tokens = json_array(), *strs = json_is_true(rs) ? json_array() : json_null();
    for (size_t i = 0; tokens && i < n; i++) {
        json_array_append_new(tokens, json_integer(ids[i]));
        if (json_is_array(strs)) json_array_append_new(strs, sv_token_json(env->m, ids[i]));
    }
    free(ids);
    if (!tokens || json_array_size(tokens) != n) {
        json_decref(tokens);
        json_decref(strs);
        return sv_fail(e, 503, NULL, "out of memory");
    }
    return json_pack("{s:I,s:i,s:o,s:o}", "count", (json_int_t)n, "max_model_len",
                     env->max_model_len, "tokens", tokens, "token_strs", strs);
}

static json_t *detokenize(const sv_api_env *env, json_t *body, sv_err *e)
{
    if (!json_is_object(body)) return sv_fail(e, 400, NULL, "the body must be a JSON object");
    if (!sv_check_model(body, e)) return NULL;
    json_t *t = json_object_get(body, "tokens");
    if (!json_is_array(t)) return sv_fail(e, 400, "tokens", "\"tokens\" must be an array of ids");
    const int n_vocab = es_model_n_vocab(env->m);
    size_t total = 0;
    for (size_t i = 0; i < json_array_size(t); i++) {
        json_t *v = json_array_get(t, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= n_vocab)
            return sv_fail(e, 400, "tokens", "\"tokens\"[%zu] is not a token id (0..%d)", i,
                           n_vocab - 1);
        size_t len;
        es_token_piece(env->m, (int32_t)json_integer_value(v), &len);
        total += len;
    }
    char *text = malloc(total + 1);
    if (!text) return sv_fail(e, 503, NULL, "out of memory");
    size_t at = 0;
    for (size_t i = 0; i < json_array_size(t); i++) {
        size_t len;
        const char *p = es_token_piece(env->m, (int32_t)json_integer_value(json_array_get(t, i)),
                                       &len);
        memcpy(text + at, p, len);
        at += len;
    }
    size_t clean_len;
    char *clean = sv_utf8_clean(text, at, &clean_len);
    free(text);
    if (!clean) return sv_fail(e, 503, NULL, "out of memory");
    json_t *o = json_pack("{s:s%}", "prompt", clean, clean_len);
    free(clean);
    return o;
}

json_t *sv_api_direct(const sv_api_env *env, int ep, json_t *body, sv_err *e)
{
    const es_model *m = env->m;
    json_t *o = NULL;
    switch (ep) {
    case SV_EP_TOKENIZE: return tokenize(env, body, e);
    case SV_EP_DETOKENIZE: return detokenize(env, body, e);
    case SV_EP_MODELS:
        o = json_pack("{s:s,s:[{s:s,s:s,s:I,s:s,s:i}]}", "object", "list", "data", "id",
                      env->model_name, "object", "model", "created", (json_int_t)env->created,
                      "owned_by", "estream", "max_model_len", env->max_model_len);
        break;
    case SV_EP_TOKENIZER_INFO:
        o = json_pack("{s:s,s:o,s:o,s:n,s:i,s:i,s:b,s:n}", "tokenizer_class", "estream",
                      "eos_token", token_or_null(m, es_model_eos(m)), "bos_token",
                      token_or_null(m, es_model_bos(m)), "pad_token", "model_max_length",
                      env->max_model_len, "vocab_size", es_model_n_vocab(m), "add_bos_token",
                      es_model_add_bos(m), "chat_template");
        break;
    default: return sv_fail(e, 404, NULL, "no such endpoint");
    }
    return o ? o : sv_fail(e, 503, NULL, "out of memory");
}
