/*
 * Expressions of the Jinja parser, production by production as jinja2/parser.py (3.1) has
 * them, so that precedence and the odd corners come out the same: `-x|f` filters the
 * negation, `not a is b` negates the test, `a if b` without else gives undefined, ** is
 * left-associative, adjacent string literals join, a test takes one bare argument
 * (`is divisibleby 3`), `x.0` is an item.
 *
 * DESIGN: recursive descent, from ja_p_expression (inline if) down through or, and, not,
 * comparisons, + -, ~, * / // %, **, unary - +, to primaries with their postfixes (.attr,
 * [item or slice], (call)) and the filters and tests after them. Filters and tests are looked up
 * while parsing; one this interpreter does not implement keeps fid -1, and ja_parse's check or
 * the evaluation refuses it (see parse.c). Left-deep chains (1+1+...+1, x|f|f|...) are built by
 * loops, and ja_p_fin bounds the height of what they build.
 */
#include "jinja/parse_int.h"

#include <stdio.h>
#include <string.h>

/* jinja2's parse_unary: - and + bind tighter than filters (`-x|f` is f(-x)), and their
 * operand takes no filter. */
static es_status unary(ps *P, bool with_filter, jnode **out);
/* jinja2's parse_primary: a name (true/false/none are constants; with_ns, name.attr is a
 * namespace reference), a string (adjacent ones joined), a number, ( ), [ ], { }. */
static es_status primary(ps *P, bool with_ns, jnode **out);
/* jinja2's parse_postfix: subscripts and calls after a primary. */
static es_status postfix(ps *P, jnode **node);

/* ---- calls, filters, tests ------------------------------------------------------------------ */
static es_status call_args(ps *P, jnode *e)
{
    nvec args = {0}, kw = {0};
    const char **names = NULL;
    int line = cur(P)->line;
    ES_TRY(ja_p_expect(P, T_LPAREN));
    bool comma = false;
    while (cur(P)->t != T_RPAREN) {
        if (comma) {
            ES_TRY(ja_p_expect(P, T_COMMA));
            if (cur(P)->t == T_RPAREN) break;
        }
        if (cur(P)->t == T_MUL || cur(P)->t == T_POW)
            return FAIL(P, "calls with *args or **kwargs are not supported");
        jnode *x;
        if (cur(P)->t == T_NAME && look(P)->t == T_ASSIGN) {
            const char *k = ja_p_tokstr(P, cur(P));
            if (!k) return NOMEM(P);
            next(P), next(P);
            ES_TRY(ja_p_expression(P, true, &x));
            ES_TRY(ja_p_push(P, &kw, x));
            const char **nn = ja_alloc(P->a, (size_t)kw.cap * sizeof(char *));
            if (!nn) return NOMEM(P);
            if (kw.n > 1) memcpy(nn, names, (size_t)(kw.n - 1) * sizeof(char *));
            nn[kw.n - 1] = k;
            names = nn;
        } else {
            if (kw.n) return ja_p_fail(P, line, "invalid syntax for function call expression");
            ES_TRY(ja_p_expression(P, true, &x));
            ES_TRY(ja_p_push(P, &args, x));
        }
        comma = true;
    }
    ES_TRY(ja_p_expect(P, T_RPAREN));
    e->v = args.v, e->nv = args.n, e->w = kw.v, e->nw = kw.n, e->names = names;
    return ES_OK;
}

/* name(.name)* after a pipe or 'is' */
static es_status dotted_name(ps *P, const char **out)
{
    if (cur(P)->t != T_NAME) return ja_p_expect(P, T_NAME);
    char buf[128];
    size_t n = 0;
    for (;;) {
        const jtok *t = cur(P);
        if (t->n >= sizeof(buf) - n - 1) return FAIL(P, "name too long");
        memcpy(buf + n, t->p, t->n), n += t->n;
        next(P);
        if (cur(P)->t != T_DOT || look(P)->t != T_NAME) break;
        buf[n++] = '.';
        next(P);
    }
    char *s = ja_alloc(P->a, n + 1);
    if (!s) return NOMEM(P);
    memcpy(s, buf, n), s[n] = 0;
    *out = s;
    return ES_OK;
}

/* | name(args) ...; node may be NULL (a {% set %} block's filters). */
es_status ja_p_filters(ps *P, jnode **node)
{
    while (cur(P)->t == T_PIPE) {
        next(P);
        int line = cur(P)->line;
        jnode *f;
        MK(P, f, N_FILTER, line);
        ES_TRY(dotted_name(P, &f->name));
        f->fid = ja_filter_id(f->name); /* -1: refused at run time or by ja_parse's check */
        if (cur(P)->t == T_LPAREN) ES_TRY(call_args(P, f));
        f->a = *node;
        ES_TRY(ja_p_fin(P, f));
        *node = f;
    }
    return ES_OK;
}

/* `is [not] name`, with (args), one bare argument (`is divisibleby 3`) or none. */
static es_status test(ps *P, jnode **node)
{
    int line = cur(P)->line;
    next(P); /* is */
    bool negated = is_name(cur(P), "not");
    if (negated) next(P);
    jnode *t;
    MK(P, t, N_TEST, line);
    ES_TRY(dotted_name(P, &t->name));
    t->fid = ja_test_id(t->name); /* -1: refused at run time or by ja_parse's check */
    const jtok *c = cur(P);
    if (c->t == T_LPAREN) {
        ES_TRY(call_args(P, t));
    } else if ((c->t == T_NAME || c->t == T_STRING || c->t == T_INT || c->t == T_FLOAT ||
                c->t == T_LBRACKET || c->t == T_LBRACE) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) return FAIL(P, "you cannot chain multiple tests with is");
        jnode *arg;
        ES_TRY(primary(P, false, &arg));
        ES_TRY(postfix(P, &arg));
        if (!(t->v = ja_alloc(P->a, sizeof(jnode *)))) return NOMEM(P);
        t->v[0] = arg, t->nv = 1;
    }
    t->a = *node;
    ES_TRY(ja_p_fin(P, t));
    if (negated) {
        jnode *n;
        MK(P, n, N_NOT, line);
        n->a = t;
        ES_TRY(ja_p_fin(P, n));
        t = n;
    }
    *node = t;
    return ES_OK;
}

/* Inside [ ]: an expression, or a slice a:b:c with any part omitted (N_SLICE). */
static es_status subscribed(ps *P, jnode **out)
{
    int line = cur(P)->line;
    jnode *parts[3] = {NULL, NULL, NULL};
    if (cur(P)->t == T_COLON) {
        next(P);
    } else {
        ES_TRY(ja_p_expression(P, true, &parts[0]));
        if (cur(P)->t != T_COLON) {
            *out = parts[0];
            return ES_OK;
        }
        next(P);
    }
    if (cur(P)->t != T_COLON && cur(P)->t != T_RBRACKET && cur(P)->t != T_COMMA)
        ES_TRY(ja_p_expression(P, true, &parts[1]));
    if (cur(P)->t == T_COLON) {
        next(P);
        if (cur(P)->t != T_RBRACKET && cur(P)->t != T_COMMA)
            ES_TRY(ja_p_expression(P, true, &parts[2]));
    }
    jnode *s;
    MK(P, s, N_SLICE, line);
    s->a = parts[0], s->b = parts[1], s->c = parts[2];
    ES_TRY(ja_p_fin(P, s));
    *out = s;
    return ES_OK;
}

/* .name (N_GETATTR), .0 (an item), [key] or [a:b:c] (N_GETITEM) after *node. */
static es_status subscript(ps *P, jnode **node)
{
    const jtok *t = cur(P);
    int line = t->line;
    next(P);
    jnode *e;
    if (t->t == T_DOT) {
        const jtok *a = cur(P);
        if (a->t == T_NAME) {
            MK(P, e, N_GETATTR, line);
            if (!(e->name = ja_p_tokstr(P, a))) return NOMEM(P);
            next(P);
        } else if (a->t == T_INT) {
            MK(P, e, N_GETITEM, line);
            MK(P, e->b, N_CONST, a->line);
            e->b->cv = jv_int(a->i);
            ES_TRY(ja_p_fin(P, e->b));
            next(P);
        } else {
            return FAIL(P, "expected name or number");
        }
    } else {
        MK(P, e, N_GETITEM, line);
        ES_TRY(subscribed(P, &e->b));
        if (cur(P)->t == T_COMMA) return FAIL(P, "subscripts with a tuple are not supported");
        ES_TRY(ja_p_expect(P, T_RBRACKET));
    }
    e->a = *node;
    ES_TRY(ja_p_fin(P, e));
    *node = e;
    return ES_OK;
}

/* (args) after *node: N_CALL. */
static es_status call(ps *P, jnode **node)
{
    jnode *e;
    MK(P, e, N_CALL, cur(P)->line);
    ES_TRY(call_args(P, e));
    e->a = *node;
    ES_TRY(ja_p_fin(P, e));
    *node = e;
    return ES_OK;
}

static es_status postfix(ps *P, jnode **node)
{
    for (;;) {
        int t = cur(P)->t;
        if (t == T_DOT || t == T_LBRACKET)
            ES_TRY(subscript(P, node));
        else if (t == T_LPAREN)
            ES_TRY(call(P, node));
        else
            return ES_OK;
    }
}

/* jinja2's parse_filter_expr: filters, tests and calls after a postfix expression. */
static es_status filter_expr(ps *P, jnode **node)
{
    for (;;) {
        if (cur(P)->t == T_PIPE)
            ES_TRY(ja_p_filters(P, node));
        else if (is_name(cur(P), "is"))
            ES_TRY(test(P, node));
        else if (cur(P)->t == T_LPAREN)
            ES_TRY(call(P, node));
        else
            return ES_OK;
    }
}

/* ---- literals and names --------------------------------------------------------------------- */
static es_status seq(ps *P, int kind, int close, jnode **out)
{
    jnode *e;
    MK(P, e, kind, cur(P)->line);
    next(P);
    nvec k = {0}, v = {0};
    while (cur(P)->t != close) {
        if (k.n) {
            ES_TRY(ja_p_expect(P, T_COMMA));
            if (cur(P)->t == close) break;
        }
        jnode *x;
        ES_TRY(ja_p_expression(P, true, &x));
        ES_TRY(ja_p_push(P, &k, x));
        if (kind == N_DICT) {
            ES_TRY(ja_p_expect(P, T_COLON));
            ES_TRY(ja_p_expression(P, true, &x));
            ES_TRY(ja_p_push(P, &v, x));
        }
    }
    ES_TRY(ja_p_expect(P, close));
    e->v = k.v, e->nv = k.n, e->w = v.v, e->nw = v.n;
    ES_TRY(ja_p_fin(P, e));
    *out = e;
    return ES_OK;
}

static es_status primary(ps *P, bool with_ns, jnode **out)
{
    const jtok *t = cur(P);
    jnode *e = NULL;
    if (t->t == T_NAME) {
        next(P);
        if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") ||
            is_name(t, "False")) {
            MK(P, e, N_CONST, t->line);
            e->cv = jv_bool(t->p[0] == 't' || t->p[0] == 'T');
        } else if (is_name(t, "none") || is_name(t, "None")) {
            MK(P, e, N_CONST, t->line);
            e->cv = jv_none();
        } else if (with_ns && cur(P)->t == T_DOT) {
            next(P);
            if (cur(P)->t != T_NAME) return ja_p_expect(P, T_NAME);
            MK(P, e, N_NSREF, t->line);
            if (!(e->name = ja_p_tokstr(P, t)) || !(e->attr = ja_p_tokstr(P, cur(P))))
                return NOMEM(P);
            next(P);
        } else {
            MK(P, e, N_NAME, t->line);
            if (!(e->name = ja_p_tokstr(P, t))) return NOMEM(P);
        }
    } else if (t->t == T_STRING) {
        MK(P, e, N_CONST, t->line);
        const jstr *s = t->s;
        next(P);
        while (cur(P)->t == T_STRING) { /* "a" "b" is "ab" */
            const jstr *u = cur(P)->s;
            jstr *j = ja_alloc(P->a, sizeof(jstr) + s->len + u->len + 1);
            if (!j) return NOMEM(P);
            j->len = s->len + u->len;
            memcpy(j->b, s->b, s->len), memcpy(j->b + s->len, u->b, u->len + 1);
            s = j;
            next(P);
        }
        e->cv = jv_str(s);
    } else if (t->t == T_INT || t->t == T_FLOAT) {
        MK(P, e, N_CONST, t->line);
        e->cv = t->t == T_INT ? jv_int(t->i) : jv_float(t->f);
        next(P);
    } else if (t->t == T_LPAREN) {
        ES_TRY(ja_p_enter(P));
        next(P);
        ES_TRY(ja_p_tuple(P, false, true, NULL, true, false, &e));
        ES_TRY(ja_p_expect(P, T_RPAREN));
        P->depth--;
    } else if (t->t == T_LBRACKET || t->t == T_LBRACE) {
        ES_TRY(ja_p_enter(P));
        ES_TRY(seq(P, t->t == T_LBRACKET ? N_LIST : N_DICT,
                   t->t == T_LBRACKET ? T_RBRACKET : T_RBRACE, &e));
        P->depth--;
    } else {
        return ja_p_unexpected(P);
    }
    ES_TRY(ja_p_fin(P, e));
    *out = e;
    return ES_OK;
}

/* Whether the current token ends a tuple: }}, %}, ) or one of the extra names. */
static bool tuple_end(const ps *P, const char *const *extra)
{
    int t = cur(P)->t;
    if (t == T_VAR_END || t == T_BLOCK_END || t == T_RPAREN) return true;
    for (; extra && *extra; extra++)
        if (is_name(cur(P), *extra)) return true;
    return false;
}

es_status ja_p_tuple(ps *P, bool simplified, bool condexpr, const char *const *extra_end,
                     bool parens, bool with_ns, jnode **out)
{
    int line = cur(P)->line;
    nvec v = {0};
    bool is_tuple = false;
    for (;;) {
        if (v.n) ES_TRY(ja_p_expect(P, T_COMMA));
        if (tuple_end(P, extra_end)) break;
        jnode *x;
        if (simplified)
            ES_TRY(primary(P, with_ns, &x));
        else
            ES_TRY(ja_p_expression(P, condexpr, &x));
        ES_TRY(ja_p_push(P, &v, x));
        if (cur(P)->t != T_COMMA) break;
        is_tuple = true;
    }
    if (!is_tuple) {
        if (v.n) {
            *out = v.v[0];
            return ES_OK;
        }
        if (!parens) {
            const jtok *t = cur(P);
            if (t->t == T_NAME)
                return FAIL(P, "expected an expression, got '%.*s'", (int)t->n, t->p);
            return FAIL(P, "expected an expression, got '%s'", ja_tok_desc(t->t));
        }
    }
    jnode *e;
    MK(P, e, N_TUPLE, line);
    e->v = v.v, e->nv = v.n;
    ES_TRY(ja_p_fin(P, e));
    *out = e;
    return ES_OK;
}

/* ---- operators --------------------------------------------------------------------------------
 */
static es_status binary(ps *P, int kind, int op, jnode *l, jnode *r, int line, jnode **out)
{
    jnode *e;
    MK(P, e, kind, line);
    e->op = (uint8_t)op, e->a = l, e->b = r;
    ES_TRY(ja_p_fin(P, e));
    *out = e;
    return ES_OK;
}

static es_status unary(ps *P, bool with_filter, jnode **out)
{
    const jtok *t = cur(P);
    jnode *e;
    if (t->t == T_SUB || t->t == T_ADD) {
        ES_TRY(ja_p_enter(P));
        next(P);
        jnode *x;
        ES_TRY(unary(P, false, &x));
        MK(P, e, t->t == T_SUB ? N_NEG : N_POS, t->line);
        e->a = x;
        ES_TRY(ja_p_fin(P, e));
        P->depth--;
    } else {
        ES_TRY(primary(P, false, &e));
    }
    ES_TRY(postfix(P, &e));
    if (with_filter) ES_TRY(filter_expr(P, &e));
    *out = e;
    return ES_OK;
}

/* a ** b ** c, left-associative as in jinja2. */
static es_status pow_(ps *P, jnode **out)
{
    ES_TRY(unary(P, true, out));
    while (cur(P)->t == T_POW) {
        int line = cur(P)->line;
        next(P);
        jnode *r;
        ES_TRY(unary(P, true, &r));
        ES_TRY(binary(P, N_BINOP, OP_POW, *out, r, line, out));
    }
    return ES_OK;
}

/* * / // %. */
static es_status math2(ps *P, jnode **out)
{
    ES_TRY(pow_(P, out));
    for (;;) {
        int t = cur(P)->t, line = cur(P)->line;
        int op = t == T_MUL        ? OP_MUL
                 : t == T_DIV      ? OP_DIV
                 : t == T_FLOORDIV ? OP_FLOORDIV
                 : t == T_MOD      ? OP_MOD
                                   : -1;
        if (op < 0) return ES_OK;
        next(P);
        jnode *r;
        ES_TRY(pow_(P, &r));
        ES_TRY(binary(P, N_BINOP, op, *out, r, line, out));
    }
}

/* a ~ b ~ c: one N_CONCAT over all the operands. */
static es_status concat(ps *P, jnode **out)
{
    int line = cur(P)->line;
    jnode *x;
    ES_TRY(math2(P, &x));
    if (cur(P)->t != T_TILDE) {
        *out = x;
        return ES_OK;
    }
    nvec v = {0};
    ES_TRY(ja_p_push(P, &v, x));
    while (cur(P)->t == T_TILDE) {
        next(P);
        ES_TRY(math2(P, &x));
        ES_TRY(ja_p_push(P, &v, x));
    }
    jnode *e;
    MK(P, e, N_CONCAT, line);
    e->v = v.v, e->nv = v.n;
    ES_TRY(ja_p_fin(P, e));
    *out = e;
    return ES_OK;
}

/* + and -, looser than ~ (so `1 + 1 ~ 1` is 1 + (1 ~ 1)). */
static es_status math1(ps *P, jnode **out)
{
    ES_TRY(concat(P, out));
    while (cur(P)->t == T_ADD || cur(P)->t == T_SUB) {
        int op = cur(P)->t == T_ADD ? OP_ADD : OP_SUB, line = cur(P)->line;
        next(P);
        jnode *r;
        ES_TRY(concat(P, &r));
        ES_TRY(binary(P, N_BINOP, op, *out, r, line, out));
    }
    return ES_OK;
}

/* Comparisons, `in` and `not in`, chained into one N_COMPARE. */
static es_status compare(ps *P, jnode **out)
{
    int line = cur(P)->line;
    jnode *x;
    ES_TRY(math1(P, &x));
    nvec v = {0};
    uint8_t ops[JA_MAX_DEPTH];
    for (;;) {
        int t = cur(P)->t, op;
        if (t == T_EQ)
            op = CMP_EQ;
        else if (t == T_NE)
            op = CMP_NE;
        else if (t == T_LT)
            op = CMP_LT;
        else if (t == T_LTEQ)
            op = CMP_LE;
        else if (t == T_GT)
            op = CMP_GT;
        else if (t == T_GTEQ)
            op = CMP_GE;
        else if (is_name(cur(P), "in"))
            op = CMP_IN;
        else if (is_name(cur(P), "not") && is_name(look(P), "in"))
            op = CMP_NOTIN, next(P);
        else
            break;
        next(P);
        if (v.n == JA_MAX_DEPTH) return FAIL(P, "comparison chain too long");
        ops[v.n] = (uint8_t)op;
        jnode *r;
        ES_TRY(math1(P, &r));
        ES_TRY(ja_p_push(P, &v, r));
    }
    if (!v.n) {
        *out = x;
        return ES_OK;
    }
    jnode *e;
    MK(P, e, N_COMPARE, line);
    e->a = x, e->v = v.v, e->nv = v.n;
    if (!(e->ops = ja_alloc(P->a, (size_t)v.n))) return NOMEM(P);
    memcpy(e->ops, ops, (size_t)v.n);
    ES_TRY(ja_p_fin(P, e));
    *out = e;
    return ES_OK;
}

/* not x (recursion bounded by ja_p_enter). */
static es_status not_(ps *P, jnode **out)
{
    if (!is_name(cur(P), "not")) return compare(P, out);
    int line = cur(P)->line;
    ES_TRY(ja_p_enter(P));
    next(P);
    jnode *x, *e;
    ES_TRY(not_(P, &x));
    MK(P, e, N_NOT, line);
    e->a = x;
    ES_TRY(ja_p_fin(P, e));
    P->depth--;
    *out = e;
    return ES_OK;
}

/* a and b and c (left-deep). */
static es_status and_(ps *P, jnode **out)
{
    ES_TRY(not_(P, out));
    while (is_name(cur(P), "and")) {
        int line = cur(P)->line;
        next(P);
        jnode *r;
        ES_TRY(not_(P, &r));
        ES_TRY(binary(P, N_AND, 0, *out, r, line, out));
    }
    return ES_OK;
}

/* a or b or c (left-deep). */
static es_status or_(ps *P, jnode **out)
{
    ES_TRY(and_(P, out));
    while (is_name(cur(P), "or")) {
        int line = cur(P)->line;
        next(P);
        jnode *r;
        ES_TRY(and_(P, &r));
        ES_TRY(binary(P, N_OR, 0, *out, r, line, out));
    }
    return ES_OK;
}

es_status ja_p_expression(ps *P, bool condexpr, jnode **out)
{
    int start = cur(P)->line; /* jinja2's lineno of the conditional expression */
    ES_TRY(or_(P, out));
    while (condexpr && is_name(cur(P), "if")) {
        int line = cur(P)->line;
        next(P);
        jnode *e, *test, *other = NULL;
        ES_TRY(or_(P, &test));
        if (is_name(cur(P), "else")) {
            next(P);
            ES_TRY(ja_p_enter(P));
            ES_TRY(ja_p_expression(P, true, &other));
            P->depth--;
        }
        MK(P, e, N_COND, line);
        e->a = test, e->b = *out, e->c = other, e->fid = start;
        ES_TRY(ja_p_fin(P, e));
        *out = e;
        start = cur(P)->line;
    }
    return ES_OK;
}
