/*
 * The Jinja parser's helpers, used by parse.c (statements) and parse_expr.c (expressions):
 * syntax errors, expecting a token, a token's text, making and finishing nodes, and the bound on
 * the parser's recursion (parse_int.h has the DESIGN).
 */
#include "jinja/parse_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

es_status ja_p_fail(ps *P, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    es_status st = ja_vfail(P->name, line, fmt, ap);
    va_end(ap);
    return st;
}

es_status ja_p_unexpected(ps *P)
{
    const jtok *t = cur(P);
    if (t->t == T_NAME) return FAIL(P, "unexpected '%.*s'", (int)t->n, t->p);
    if (t->t == T_EOF) return FAIL(P, "unexpected end of template");
    return FAIL(P, "unexpected '%s'", ja_tok_desc(t->t));
}

es_status ja_p_expect(ps *P, int type)
{
    if (cur(P)->t != type) {
        const jtok *t = cur(P);
        if (t->t == T_NAME)
            return FAIL(P, "expected '%s', got '%.*s'", ja_tok_desc(type), (int)t->n, t->p);
        return FAIL(P, "expected '%s', got '%s'", ja_tok_desc(type), ja_tok_desc(t->t));
    }
    next(P);
    return ES_OK;
}

const char *ja_p_tokstr(ps *P, const jtok *t)
{
    char *s = ja_alloc(P->a, t->n + 1);
    if (s) memcpy(s, t->p, t->n), s[t->n] = 0;
    return s;
}

jnode *ja_p_mk(ps *P, int kind, int line)
{
    jnode *e = ja_zalloc(P->a, sizeof(*e));
    if (e) e->k = (uint8_t)kind, e->line = line;
    return e;
}

es_status ja_p_push(ps *P, nvec *v, jnode *e)
{
    if (v->n == v->cap) {
        int cap = v->cap ? 2 * v->cap : 8;
        jnode **q = ja_alloc(P->a, (size_t)cap * sizeof(jnode *));
        if (!q) return NOMEM(P);
        if (v->n) memcpy(q, v->v, (size_t)v->n * sizeof(jnode *));
        v->v = q, v->cap = cap;
    }
    v->v[v->n++] = e;
    return ES_OK;
}

/* Sets e's height from its children; fails past the depth limit. */
es_status ja_p_fin(ps *P, jnode *e)
{
    int h = 0;
    const jnode *kids[3] = {e->a, e->b, e->c};
    for (int i = 0; i < 3; i++)
        if (kids[i] && kids[i]->depth > h) h = kids[i]->depth;
    for (int i = 0; i < e->nv; i++)
        if (e->v[i] && e->v[i]->depth > h) h = e->v[i]->depth;
    for (int i = 0; i < e->nw; i++)
        if (e->w[i] && e->w[i]->depth > h) h = e->w[i]->depth;
    if (h + 1 > JA_MAX_DEPTH)
        return ja_p_fail(P, e->line, "expression nested too deep (more than %d levels)",
                         JA_MAX_DEPTH);
    e->depth = (uint16_t)(h + 1);
    return ES_OK;
}

es_status ja_p_enter(ps *P)
{
    if (++P->depth > JA_MAX_DEPTH)
        return FAIL(P, "template nested too deep (more than %d levels)", JA_MAX_DEPTH);
    return ES_OK;
}
