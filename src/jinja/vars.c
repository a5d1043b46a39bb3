/*
 * The variables of a render: what a caller of es_jinja_render() builds its data with (the chat
 * messages, add_generation_prompt, the special tokens).
 *
 * DESIGN: every value lives in the vars' arena (uncapped: the caller's data is not hostile
 * template work), boxed so the caller holds a stable pointer. Containers are the interpreter's
 * own (jlist, jdict), so a render reads them with no conversion; strings are checked to be
 * valid UTF-8 here, which every string operation of the interpreter relies on.
 */
#include "jinja/jinja_int.h"

#include <stdlib.h>
#include <string.h>

static es_status nomem(void)
{
    return es_fail(ES_E_NOMEM, "template variables: out of memory");
}

es_status es_jinja_vars_create(es_jinja_vars **out)
{
    *out = calloc(1, sizeof(es_jinja_vars));
    return *out ? ES_OK : nomem();
}

void es_jinja_vars_destroy(es_jinja_vars *v)
{
    if (!v) return;
    ja_free_all(&v->arena);
    free(v);
}

static es_status box(es_jinja_vars *v, jv x, es_jinja_val **out)
{
    es_jinja_val *b = ja_alloc(&v->arena, sizeof(*b));
    if (!b) return nomem();
    b->v = x;
    *out = b;
    return ES_OK;
}

es_status es_jinja_new_str(es_jinja_vars *v, const char *s, size_t len, es_jinja_val **out)
{
    if (!ja_utf8_valid(s, len)) return es_fail(ES_E_INVAL, "a template string is not valid UTF-8");
    jstr *p = ja_str_new(&v->arena, s, len);
    if (!p) return nomem();
    return box(v, jv_str(p), out);
}

es_status es_jinja_new_int(es_jinja_vars *v, int64_t i, es_jinja_val **out)
{
    return box(v, jv_int(i), out);
}

es_status es_jinja_new_float(es_jinja_vars *v, double f, es_jinja_val **out)
{
    return box(v, jv_float(f), out);
}

es_status es_jinja_new_bool(es_jinja_vars *v, int b, es_jinja_val **out)
{
    return box(v, jv_bool(b != 0), out);
}

es_status es_jinja_new_none(es_jinja_vars *v, es_jinja_val **out)
{
    return box(v, jv_none(), out);
}

es_status es_jinja_new_list(es_jinja_vars *v, es_jinja_val **out)
{
    jlist *l = ja_zalloc(&v->arena, sizeof(*l));
    if (!l) return nomem();
    return box(v, jv_list(l, JL_LIST), out);
}

es_status es_jinja_new_dict(es_jinja_vars *v, es_jinja_val **out)
{
    jdict *d = ja_zalloc(&v->arena, sizeof(*d));
    if (!d) return nomem();
    jv x = {.k = JV_DICT, .d = d};
    return box(v, x, out);
}

es_status es_jinja_list_append(es_jinja_vars *v, es_jinja_val *list, const es_jinja_val *item)
{
    if (list->v.k != JV_LIST) return es_fail(ES_E_INVAL, "es_jinja_list_append: not a list");
    return ja_list_push(&v->arena, list->v.l, item->v) ? ES_OK : nomem();
}

es_status es_jinja_dict_set(es_jinja_vars *v, es_jinja_val *dict, const char *key,
                            const es_jinja_val *item)
{
    if (dict->v.k != JV_DICT) return es_fail(ES_E_INVAL, "es_jinja_dict_set: not a dict");
    if (!ja_utf8_valid(key, strlen(key)))
        return es_fail(ES_E_INVAL, "a dict key is not valid UTF-8");
    jstr *k = ja_str_new(&v->arena, key, strlen(key));
    if (!k) return nomem();
    return ja_dict_set(&v->arena, dict->v.d, jv_str(k), item->v) ? ES_OK : nomem();
}

es_status es_jinja_vars_set(es_jinja_vars *v, const char *name, const es_jinja_val *val)
{
    for (size_t i = 0; i < v->n; i++)
        if (!strcmp(v->names[i], name)) {
            v->vals[i] = val->v;
            return ES_OK;
        }
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 8;
        const char **nn = ja_alloc(&v->arena, cap * sizeof(char *));
        jv *vv = ja_alloc(&v->arena, cap * sizeof(jv));
        if (!nn || !vv) return nomem();
        if (v->n)
            memcpy(nn, v->names, v->n * sizeof(char *)), memcpy(vv, v->vals, v->n * sizeof(jv));
        v->names = nn, v->vals = vv, v->cap = cap;
    }
    char *n = ja_alloc(&v->arena, strlen(name) + 1);
    if (!n) return nomem();
    strcpy(n, name);
    v->names[v->n] = n, v->vals[v->n] = val->v;
    v->n++;
    return ES_OK;
}
