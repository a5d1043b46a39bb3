/*
 * The Jinja parser's internals, shared by parse.c (statements), parse_expr.c (expressions) and
 * parse_util.c (the helpers below).
 *
 * DESIGN: the parser is a cursor over the lexer's tokens (the last one T_EOF, which the cursor
 * never moves past) plus two counters: its own recursion depth, bounded by JA_MAX_DEPTH, and
 * the number of enclosing for loops (break and continue need one). Nodes are made with
 * ja_p_mk and finished with ja_p_fin, which records the height of the expression tree and
 * refuses trees past JA_MAX_DEPTH, so that evaluating any expression recurses a bounded number
 * of times.
 */
#ifndef ES_JINJA_PARSE_INT_H
#define ES_JINJA_PARSE_INT_H

#include "jinja/jinja_int.h"

#include <string.h>

typedef struct ps {
    ja_arena *a; /* where nodes go (the template's arena) */
    const char *name;
    const jtok *t; /* tokens [n], T_EOF last */
    size_t n, i;   /* i: the current token */
    int depth;     /* parser recursion */
    int loops;     /* enclosing for loops */
} ps;

/* A growable list of node pointers, in the arena. */
typedef struct nvec {
    jnode **v;
    int n, cap;
} nvec;

static inline const jtok *cur(const ps *P)
{
    return &P->t[P->i];
}
static inline const jtok *look(const ps *P)
{
    return &P->t[P->i + 1 < P->n ? P->i + 1 : P->i];
}
static inline void next(ps *P)
{
    if (P->i + 1 < P->n) P->i++;
}
/* Whether t is the name s ("if", "endfor"). */
static inline bool is_name(const jtok *t, const char *s)
{
    return t->t == T_NAME && t->n == strlen(s) && !memcmp(t->p, s, t->n);
}

/* A syntax error at line: "<template> line <line>: ...". */
es_status ja_p_fail(ps *P, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define FAIL(P, ...) ja_p_fail((P), cur(P)->line, __VA_ARGS__)
#define NOMEM(P) es_fail(ES_E_NOMEM, "%s: out of memory", (P)->name)
es_status ja_p_unexpected(ps *P);              /* "unexpected '<the current token>'" */
es_status ja_p_expect(ps *P, int type);        /* consumes a token of type, or fails */
const char *ja_p_tokstr(ps *P, const jtok *t); /* the token's text, NUL-terminated (NULL: OOM) */
jnode *ja_p_mk(ps *P, int kind, int line);     /* a zeroed node (NULL: out of memory) */
#define MK(P, e, kind, line)                                                                       \
    do {                                                                                           \
        if (!((e) = ja_p_mk((P), (kind), (line)))) return NOMEM(P);                                \
    } while (0)
es_status ja_p_push(ps *P, nvec *v, jnode *e);
es_status ja_p_fin(ps *P, jnode *e); /* sets e->depth; fails past JA_MAX_DEPTH */
es_status ja_p_enter(ps *P);         /* one more level of recursion; fails past the limit */

/* parse_expr.c: jinja2's parse_expression (condexpr: with inline if), parse_tuple (simplified:
 * names and literals only, as assignment targets; extra_end: names that end the tuple, NULL-
 * terminated; parens: inside explicit parentheses, where () is the empty tuple; with_ns:
 * namespace attributes allowed), and the filters of a {% set %} block (*node NULL at first). */
es_status ja_p_expression(ps *P, bool condexpr, jnode **out);
es_status ja_p_tuple(ps *P, bool simplified, bool condexpr, const char *const *extra_end,
                     bool parens, bool with_ns, jnode **out);
es_status ja_p_filters(ps *P, jnode **node);

#endif
