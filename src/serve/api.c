/* What every endpoint shares: errors, prompt lists, unit checks, token text, optional members.
 * The dispatch by endpoint and the memory estimate are api_dispatch.c's. */
#include "serve/api.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *sv_fail(sv_err *e, int status, const char *param, const char *fmt, ...)
{
    e->status = status;
    e->type = status == 401   ? "authentication_error"
              : status == 404 ? "not_found_error"
              : status == 429 ? "rate_limit_error"
              : status >= 500 ? "server_error"
                              : "invalid_request_error";
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
    return NULL;
}

json_t *sv_err_body(const sv_err *e)
{
    /* the message may hold bytes from the request; jansson refuses invalid UTF-8 */
    size_t n;
    char *msg = sv_utf8_clean(e->msg, strlen(e->msg), &n);
    json_t *err = json_pack("{s:s?,s:s,s:s?,s:o}", "message", msg, "type", e->type, "param",
                            e->param[0] ? e->param : NULL, "code", json_null());
    free(msg);
    return err ? json_pack("{s:o}", "error", err) : NULL;
}

bool sv_check_model(json_t *body, sv_err *e)
{
    json_t *m = json_object_get(body, "model");
    if (m && !json_is_string(m) && !json_is_null(m)) {
        sv_fail(e, 400, "model", "\"model\" must be a string");
        return false;
    }
    return true;
}

char *sv_utf8_clean(const char *s, size_t n, size_t *out_len)
{
    char *o = malloc(n * 3 + 1); /* each bad byte becomes 3 bytes */
    if (!o) return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n;) {
        const size_t k = rec_utf8_char((const unsigned char *)s + i, n - i);
        if (k && !(k == 1 && s[i] == 0)) {
            memcpy(o + j, s + i, k);
            j += k;
            i += k;
        } else {
            memcpy(o + j, "\xEF\xBF\xBD", 3);
            j += 3;
            i++;
        }
    }
    o[j] = 0;
    if (out_len) *out_len = j;
    return o;
}

size_t sv_utf8_count(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

json_t *sv_token_json(const es_model *m, int32_t id)
{
    size_t n;
    const char *p = es_token_piece(m, id, &n);
    if (!p) return json_null();
    bool valid = true;
    for (size_t i = 0; i < n && valid;) {
        const size_t k = rec_utf8_char((const unsigned char *)p + i, n - i);
        valid = k && p[i];
        i += k;
    }
    if (valid) return json_stringn(p, n);
    char *b = malloc(6 + 4 * n + 1);
    if (!b) return NULL;
    memcpy(b, "bytes:", 6);
    for (size_t i = 0; i < n; i++) snprintf(b + 6 + 4 * i, 5, "\\x%02x", (unsigned char)p[i]);
    json_t *j = json_string(b);
    free(b);
    return j;
}

static bool is_id_list(json_t *v)
{
    if (!json_is_array(v) || json_array_size(v) == 0) return false;
    for (size_t i = 0; i < json_array_size(v); i++)
        if (!json_is_integer(json_array_get(v, i))) return false;
    return true;
}

/* Appends the record {kind: x} to items; false when out of memory. */
static bool add_record(json_t *items, const char *kind, json_t *x)
{
    return json_array_append_new(items, json_pack("{s:O}", kind, x)) == 0;
}

json_t *sv_prompt_records(json_t *v, const char *field, sv_err *e)
{
    if (!v || json_is_null(v)) return sv_fail(e, 400, field, "\"%s\" is required", field);
    json_t *items = json_array();
    bool ok = items != NULL;
    if (!ok) {
    } else if (json_is_string(v)) {
        ok = add_record(items, "text", v);
    } else if (!json_is_array(v) || json_array_size(v) == 0) {
        json_decref(items);
        return sv_fail(e, 400, field,
                       "\"%s\" must be a string, a list of strings, a list of token ids or a "
                       "list of token id lists (non-empty)", field);
    } else if (json_is_integer(json_array_get(v, 0))) {
        if (!is_id_list(v)) {
            json_decref(items);
            return sv_fail(e, 400, field, "\"%s\" mixes token ids with other values", field);
        }
        ok = add_record(items, "ids", v);
    } else {
        for (size_t i = 0; ok && i < json_array_size(v); i++) {
            json_t *x = json_array_get(v, i);
            if (json_is_string(x)) ok = add_record(items, "text", x);
            else if (is_id_list(x)) ok = add_record(items, "ids", x);
            else {
                json_decref(items);
                return sv_fail(e, 400, field,
                               "\"%s\"[%zu] is neither a string nor a non-empty list of token "
                               "ids", field, i);
            }
        }
    }
    if (!ok) {
        json_decref(items);
        return sv_fail(e, 503, NULL, "out of memory");
    }
    return items;
}

bool sv_check_units(const sv_api_env *env, sv_req *q, const char *field, sv_err *e)
{
    int64_t total = 0;
    for (int i = 0; i < q->n_units; i++) {
        const rec *r = &q->units[i].r;
        char p[64];
        snprintf(p, sizeof(p), "%s[%d]", field, i);
        if (r->error) {
            sv_fail(e, rec_oom(r) ? 503 : 400, field, "%s: %s", p, r->error);
            return false;
        }
        if (r->n_tokens > env->max_prompt_tokens) {
            /* a record of several sequences (choices, labels) is one unit: say it is their sum */
            char seqs[64] = "";
            if (r->n_seqs > 1)
                snprintf(seqs, sizeof(seqs), " (its %d sequences together)", r->n_seqs);
            sv_fail(e, 400, field, "%s has %lld tokens%s; this server runs at most %d in one "
                    "batch", p, (long long)r->n_tokens, seqs, env->max_prompt_tokens);
            return false;
        }
        if (r->n_seqs > env->max_seqs) {
            sv_fail(e, 400, field, "%s has %d sequences; one batch of this server holds at most %d",
                    p, r->n_seqs, env->max_seqs);
            return false;
        }
        total += r->n_tokens;
    }
    if (total > env->max_request_tokens) {
        sv_fail(e, 413, field, "the request has %lld tokens; this server takes at most %lld per "
                "request (estream serve --max-request-tokens)", (long long)total,
                (long long)env->max_request_tokens);
        return false;
    }
    q->n_tokens = total;
    return true;
}

bool sv_opt_int(json_t *body, const char *name, int lo, int hi, int dflt, int *out, sv_err *e)
{
    json_t *v = json_object_get(body, name);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return true;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        sv_fail(e, 400, name, "\"%s\" must be an integer in %d..%d", name, lo, hi);
        return false;
    }
    *out = (int)json_integer_value(v);
    return true;
}

bool sv_opt_bool(json_t *body, const char *name, bool dflt, bool *out, sv_err *e)
{
    json_t *v = json_object_get(body, name);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return true;
    }
    if (!json_is_boolean(v)) {
        sv_fail(e, 400, name, "\"%s\" must be true or false", name);
        return false;
    }
    *out = json_is_true(v);
    return true;
}

size_t sv_max_piece_bytes(const es_model *m)
{
    size_t most = 0;
    for (int32_t id = 0; id < es_model_n_vocab(m); id++) {
        size_t n = 0;
        if (es_token_piece(m, id, &n) && n > most) most = n;
    }
    return most;
}
