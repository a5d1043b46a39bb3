/*
 * Python's json.dumps, byte for byte: the tojson filter of Hugging Face's chat environment is
 * json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) with those
 * four arguments open to the template. Numbers print as Python prints them (number.c).
 *
 * DESIGN: json.dumps: strings escape '"', '\\' and control characters (\n \r \t \b \f by
 * name, others as \u00XX in lowercase hex); with ensure_ascii everything outside ' '..'~' too,
 * as \uXXXX or a surrogate pair. Dict keys may be str, int, float, bool or None (converted as
 * json does); anything json cannot encode fails as Python's "Object of type X is not JSON
 * serializable".
 */
#include "jinja/jinja_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static es_status put(jr *R, jbuf *b, const char *s)
{
    return jr_buf_put(R, b, s, strlen(s));
}

/* A JSON string: runs of characters needing no escape are copied in one piece. */
static es_status json_str(jr *R, const char *s, size_t n, bool ascii, jbuf *b)
{
    ES_TRY(jr_charge(R, (int64_t)n / 16));
    ES_TRY(put(R, b, "\""));
    size_t run = 0; /* bytes copied as they are, flushed before each escape */
    for (size_t i = 0; i < n;) {
        size_t at = i;
        uint32_t c = ja_utf8_next(s, n, &i);
        char e[16] = "";
        switch (c) {
        case '"':
            strcpy(e, "\\\"");
            break;
        case '\\':
            strcpy(e, "\\\\");
            break;
        case '\n':
            strcpy(e, "\\n");
            break;
        case '\r':
            strcpy(e, "\\r");
            break;
        case '\t':
            strcpy(e, "\\t");
            break;
        case '\b':
            strcpy(e, "\\b");
            break;
        case '\f':
            strcpy(e, "\\f");
            break;
        default:
            if (c < 0x20 || (ascii && c > 0x7E)) {
                if (c < 0x10000)
                    snprintf(e, sizeof(e), "\\u%04x", (unsigned)c);
                else {
                    uint32_t v = c - 0x10000;
                    snprintf(e, sizeof(e), "\\u%04x\\u%04x", (unsigned)(0xD800 | v >> 10),
                             (unsigned)(0xDC00 | (v & 0x3FF)));
                }
            }
        }
        if (!e[0]) continue;
        ES_TRY(jr_buf_put(R, b, s + run, at - run));
        ES_TRY(put(R, b, e));
        run = i;
    }
    ES_TRY(jr_buf_put(R, b, s + run, n - run));
    return put(R, b, "\"");
}

/* A JSON number or boolean: ints as they are, floats as repr(), NaN/Infinity as json does. */
static es_status json_num(jr *R, jv x, jbuf *b)
{
    if (x.k == JV_FLOAT && (isnan(x.f) || isinf(x.f)))
        return put(R, b, isnan(x.f) ? "NaN" : x.f < 0 ? "-Infinity" : "Infinity");
    if (x.k == JV_BOOL) return put(R, b, x.i ? "true" : "false");
    return jr_tostr(R, x, b);
}

/* With an indent: a newline and level copies of it. */
static es_status newline(jr *R, const ja_json_opts *o, int level, jbuf *b)
{
    ES_TRY(put(R, b, "\n"));
    for (int i = 0; i < level; i++)
        ES_TRY(jr_buf_put(R, b, o->indent, o->indent_len));
    return ES_OK;
}

static es_status dump(jr *R, jv x, const ja_json_opts *o, int level, jbuf *b);

/* A dict key as json writes it (str, or a number, bool or None converted). */
static es_status key(jr *R, jv k, const ja_json_opts *o, jbuf *b)
{
    if (k.k == JV_STR) return json_str(R, k.s->b, k.s->len, o->ensure_ascii, b);
    if (k.k == JV_NONE) return put(R, b, "\"null\"");
    if (!jv_is_num(k))
        return jr_fail(R, "keys must be str, int, float, bool or None, not %s", ja_type_name(k));
    ES_TRY(put(R, b, "\""));
    ES_TRY(json_num(R, k, b));
    return put(R, b, "\"");
}

/* A JSON object in insertion order, or sorted by key (Python's <) with sort_keys. */
static es_status dump_dict(jr *R, const jdict *d, const ja_json_opts *o, int level, jbuf *b)
{
    if (!d->n) return put(R, b, "{}");
    size_t *ord = ja_alloc(&R->a, d->n * sizeof(size_t));
    if (!ord) return jr_oom(R);
    for (size_t i = 0; i < d->n; i++)
        ord[i] = i;
    if (o->sort_keys) /* insertion sort by Python's <: dicts here are small */
        for (size_t i = 1; i < d->n; i++)
            for (size_t j = i; j > 0; j--) {
                bool lt;
                ES_TRY(jr_lt(R, d->k[ord[j]], d->k[ord[j - 1]], &lt));
                if (!lt) break;
                size_t t = ord[j];
                ord[j] = ord[j - 1], ord[j - 1] = t;
            }
    ES_TRY(put(R, b, "{"));
    for (size_t i = 0; i < d->n; i++) {
        if (i) ES_TRY(jr_buf_put(R, b, o->item_sep, o->item_sep_len));
        if (o->indent) ES_TRY(newline(R, o, level + 1, b));
        ES_TRY(key(R, d->k[ord[i]], o, b));
        ES_TRY(jr_buf_put(R, b, o->key_sep, o->key_sep_len));
        ES_TRY(dump(R, d->v[ord[i]], o, level + 1, b));
    }
    if (o->indent) ES_TRY(newline(R, o, level, b));
    return put(R, b, "}");
}

/* Any value as JSON at nesting level (for the indent). */
static es_status dump(jr *R, jv x, const ja_json_opts *o, int level, jbuf *b)
{
    if (level > JA_MAX_DEPTH) return jr_fail(R, "tojson: value nested too deep");
    ES_TRY(jr_charge(R, 1));
    switch (x.k) {
    case JV_NONE:
        return put(R, b, "null");
    case JV_BOOL:
    case JV_INT:
    case JV_FLOAT:
        return json_num(R, x, b);
    case JV_STR:
        return json_str(R, x.s->b, x.s->len, o->ensure_ascii, b);
    case JV_DICT:
        return dump_dict(R, x.d, o, level, b);
    case JV_LIST:
        if (x.sub != JL_LIST && x.sub != JL_TUPLE) break;
        if (!x.l->n) return put(R, b, "[]");
        ES_TRY(put(R, b, "["));
        for (size_t i = 0; i < x.l->n; i++) {
            if (i) ES_TRY(jr_buf_put(R, b, o->item_sep, o->item_sep_len));
            if (o->indent) ES_TRY(newline(R, o, level + 1, b));
            ES_TRY(dump(R, x.l->v[i], o, level + 1, b));
        }
        if (o->indent) ES_TRY(newline(R, o, level, b));
        return put(R, b, "]");
    }
    return jr_fail(R, "Object of type %s is not JSON serializable", ja_type_name(x));
}

es_status jr_tojson(jr *R, jv x, const ja_json_opts *o, jbuf *b)
{
    ja_json_opts d = *o;
    if (!d.item_sep) d.item_sep = d.indent ? "," : ", ", d.item_sep_len = d.indent ? 1 : 2;
    if (!d.key_sep) d.key_sep = ": ", d.key_sep_len = 2;
    return dump(R, x, &d, 0, b);
}
