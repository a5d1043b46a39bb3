/*
 * Chat templates of a model: es_model_chat_template() and es_chat_render(), the thin layer
 * between an es_model and the Jinja interpreter of src/jinja/.
 *
 * DESIGN: the render sees exactly the variables Hugging Face's apply_chat_template passes:
 * messages (a list of dicts with the keys role, then content -- the order tojson prints),
 * tools and documents (None), add_generation_prompt, and the special tokens bos_token and
 * eos_token as text (the token's piece as llama.cpp renders special tokens; "" for a model
 * without one). The template is compiled for each call: chat templates are a few KB and
 * compile in microseconds, next to a prefill's milliseconds. Messages may later carry more keys
 * (tool calls): they are plain dicts of the interpreter's values, so a key is one more
 * es_jinja_dict_set.
 */
#include "model/model.h"

#include "jinja/jinja.h"

#include <stdlib.h>
#include <string.h>

const char *es_model_chat_template(const es_model *m, size_t *len_out)
{
    es_str s = {0};
    bool ok = m && es_gguf_get_str(m->gguf, "tokenizer.chat_template", &s);
    if (len_out) *len_out = ok ? s.len : 0;
    return ok ? s.ptr : NULL;
}

/* The text of special token id ("" if id < 0) as a template string. */
static es_status token_text(const es_model *m, es_jinja_vars *v, int32_t id, es_jinja_val **out)
{
    size_t n = 0;
    const char *p = id >= 0 ? es_token_piece(m, id, &n) : NULL;
    if (!p) p = "", n = 0;
    es_status st = es_jinja_new_str(v, p, n, out);
    if (st == ES_E_INVAL)
        return es_fail(ES_E_FORMAT, "chat template: token %d is not valid UTF-8", id);
    return st;
}

static es_status build_vars(const es_model *m, const es_chat_message *msgs, int n, int agp,
                            es_jinja_vars *v)
{
    es_jinja_val *list, *val;
    ES_TRY(es_jinja_new_list(v, &list));
    for (int i = 0; i < n; i++) {
        es_jinja_val *d, *role, *content;
        if (!msgs[i].role) return es_fail(ES_E_INVAL, "chat message %d has no role", i);
        es_status st = es_jinja_new_str(v, msgs[i].role, strlen(msgs[i].role), &role);
        if (st == ES_OK)
            st = msgs[i].content
                     ? es_jinja_new_str(v, msgs[i].content, strlen(msgs[i].content), &content)
                     : es_jinja_new_none(v, &content);
        if (st == ES_E_INVAL) return es_fail(ES_E_INVAL, "chat message %d is not valid UTF-8", i);
        ES_TRY(st);
        ES_TRY(es_jinja_new_dict(v, &d));
        ES_TRY(es_jinja_dict_set(v, d, "role", role));
        ES_TRY(es_jinja_dict_set(v, d, "content", content));
        ES_TRY(es_jinja_list_append(v, list, d));
    }
    ES_TRY(es_jinja_vars_set(v, "messages", list));
    ES_TRY(es_jinja_new_none(v, &val));
    ES_TRY(es_jinja_vars_set(v, "tools", val));
    ES_TRY(es_jinja_vars_set(v, "documents", val));
    ES_TRY(es_jinja_new_bool(v, agp, &val));
    ES_TRY(es_jinja_vars_set(v, "add_generation_prompt", val));
    ES_TRY(token_text(m, v, es_model_bos(m), &val));
    ES_TRY(es_jinja_vars_set(v, "bos_token", val));
    ES_TRY(token_text(m, v, es_model_eos(m), &val));
    return es_jinja_vars_set(v, "eos_token", val);
}

/* Compiles src[0..len) and renders it with v into a malloc'd text. */
static es_status render(const char *src, size_t len, const char *name, const es_jinja_vars *v,
                        char **out, size_t *n)
{
    es_jinja_tmpl *t = NULL;
    es_status st = es_jinja_compile(src, len, name, &t);
    if (st == ES_OK) st = es_jinja_render(t, v, NULL, out, n);
    es_jinja_tmpl_free(t);
    return st;
}

es_status es_chat_render_alloc(const es_model *m, const char *tmpl,
                               const es_chat_message *messages, int n_messages,
                               int add_generation_prompt, char **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    if (!m || n_messages < 0 || (n_messages > 0 && !messages))
        return es_fail(ES_E_INVAL, "es_chat_render: bad arguments");
    size_t len;
    const char *src = tmpl;
    if (tmpl)
        len = strlen(tmpl);
    else if (!(src = es_model_chat_template(m, &len)))
        return es_fail(ES_E_UNSUPPORTED,
                       "the model has no chat template (tokenizer.chat_template)");
    es_jinja_vars *v = NULL;
    es_status st = es_jinja_vars_create(&v);
    if (st == ES_OK) st = build_vars(m, messages, n_messages, add_generation_prompt != 0, v);
    if (st == ES_OK) st = render(src, len, "chat template", v, out, n_out);
    es_jinja_vars_destroy(v);
    return st;
}

es_status es_template_render(const es_model *m, const char *tmpl, size_t tmpl_len,
                             const char *name, const char *const *names, const es_str *values,
                             int n, char **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    es_jinja_vars *v = NULL;
    es_jinja_val *val;
    es_status st = es_jinja_vars_create(&v);
    for (int i = 0; i < n && st == ES_OK; i++) {
        st = es_jinja_new_str(v, values[i].ptr ? values[i].ptr : "", values[i].len, &val);
        if (st == ES_E_INVAL) st = es_fail(ES_E_INVAL, "%s: %s is not valid UTF-8", name, names[i]);
        if (st == ES_OK) st = es_jinja_vars_set(v, names[i], val);
    }
    if (st == ES_OK) st = token_text(m, v, es_model_bos(m), &val);
    if (st == ES_OK) st = es_jinja_vars_set(v, "bos_token", val);
    if (st == ES_OK) st = token_text(m, v, es_model_eos(m), &val);
    if (st == ES_OK) st = es_jinja_vars_set(v, "eos_token", val);
    if (st == ES_OK) st = render(tmpl, tmpl_len, name, v, out, n_out);
    es_jinja_vars_destroy(v);
    return st;
}

es_status es_chat_render(const es_model *m, const char *tmpl, const es_chat_message *messages,
                         int n_messages, int add_generation_prompt, char *buf, size_t cap,
                         size_t *n_out)
{
    if (!m || !n_out || n_messages < 0 || (n_messages > 0 && !messages) || (cap > 0 && !buf))
        return es_fail(ES_E_INVAL, "es_chat_render: bad arguments");
    *n_out = 0;
    if (cap) buf[0] = 0;
    char *text = NULL;
    size_t n = 0;
    ES_TRY(es_chat_render_alloc(m, tmpl, messages, n_messages, add_generation_prompt, &text, &n));
    *n_out = n;
    es_status st = ES_OK;
    if (n >= cap)
        st = es_fail(ES_E_SHORT_BUFFER,
                     "chat template: the text needs %zu bytes and a NUL, the buffer holds %zu", n,
                     cap);
    else
        memcpy(buf, text, n + 1);
    free(text);
    return st;
}
