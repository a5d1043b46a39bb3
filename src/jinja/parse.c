/*
 * The Jinja parser: tokens to a syntax tree, and the compile entry point (source to template:
 * the UTF-8 check, the lexer, the parser). This file has the statements; parse_expr.c has the
 * expressions and parse_util.c the helpers both use.
 *
 * DESIGN: jinja2's subparse loop: text and {{ }} collect into one output node, each {% %} is a
 * statement, and a body ends at one of the tags its statement waits for (endfor, else, ...).
 * The statements are for (with its if filter and else), if/elif/else (one node with flat lists,
 * so a long elif chain does not nest), set (a target name, namespace attribute or tuple; or a
 * block with filters), macro (parameters with defaults; varargs and kwargs), print,
 * break/continue (the loopcontrols extension Hugging Face enables), and generation (Hugging
 * Face's assistant-mask tag, which renders its body). Every other tag of jinja2 is refused by
 * name while compiling. Filters and tests follow jinja2's rule for names it does not know (see
 * check_names). Two bounds keep hostile templates from
 * exhausting the C stack: the parser's recursion (brackets, unary and not chains, nested
 * statements) and the height of every expression tree are limited to JA_MAX_DEPTH.
 */
#include "jinja/parse_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- statements ------------------------------------------------------------------------------ */
static es_status subparse(ps *P, const char *const *end, jnode **out);

/* An assignment target: a name, a namespace attribute (with_ns) or a tuple of them. */
static es_status assign_target(ps *P, const char *const *extra_end, bool with_ns, jnode **out)
{
    ES_TRY(ja_p_tuple(P, true, true, extra_end, false, with_ns, out));
    jnode *t = *out;
    for (int i = 0; i < (t->k == N_TUPLE ? t->nv : 1); i++) {
        jnode *x = t->k == N_TUPLE ? t->v[i] : t;
        if (x->k != N_NAME && x->k != N_NSREF)
            return ja_p_fail(P, x->line, "can't assign to this expression");
    }
    return ES_OK;
}

static const char *const end_for[] = {"endfor", "else", NULL};
static const char *const end_for2[] = {"endfor", NULL};
static const char *const end_if[] = {"elif", "else", "endif", NULL};
static const char *const end_if2[] = {"endif", NULL};
static const char *const end_set[] = {"endset", NULL};
static const char *const end_gen[] = {"endgeneration", NULL};
static const char *const end_macro[] = {"endmacro", NULL};
static const char *const in_kw[] = {"in", NULL};
static const char *const rec_kw[] = {"recursive", NULL};

/* Parses statements up to one of end (current token then is that name). */
static es_status statements(ps *P, const char *const *end, jnode **body)
{
    if (cur(P)->t == T_COLON) next(P);
    ES_TRY(ja_p_expect(P, T_BLOCK_END));
    ES_TRY(ja_p_enter(P));
    ES_TRY(subparse(P, end, body));
    P->depth--;
    return ES_OK;
}

/* {% for target in iter [if cond] %}body[{% else %}...]{% endfor %}: a target, b iter,
 * c cond, w[0] body, w[1] else. */
static es_status for_(ps *P, jnode *e)
{
    ES_TRY(assign_target(P, in_kw, false, &e->a));
    if (!is_name(cur(P), "in")) return FAIL(P, "expected 'in'");
    next(P);
    ES_TRY(ja_p_tuple(P, false, false, rec_kw, false, false, &e->b));
    if (is_name(cur(P), "if")) {
        next(P);
        ES_TRY(ja_p_expression(P, true, &e->c));
    }
    if (is_name(cur(P), "recursive")) return FAIL(P, "recursive loops are not supported");
    if (!(e->w = ja_zalloc(P->a, 2 * sizeof(jnode *)))) return NOMEM(P);
    e->nw = 2;
    P->loops++;
    ES_TRY(statements(P, end_for, &e->w[0]));
    P->loops--;
    if (is_name(cur(P), "else")) {
        next(P);
        ES_TRY(statements(P, end_for2, &e->w[1]));
    }
    next(P); /* endfor */
    return ES_OK;
}

/* {% if %}...{% elif %}...{% else %}...{% endif %}: tests in v, bodies in w, else in c. */
static es_status if_(ps *P, jnode *e)
{
    nvec tests = {0}, bodies = {0};
    for (;;) {
        jnode *t, *b;
        ES_TRY(ja_p_tuple(P, false, false, NULL, false, false, &t));
        ES_TRY(statements(P, end_if, &b));
        ES_TRY(ja_p_push(P, &tests, t));
        ES_TRY(ja_p_push(P, &bodies, b));
        if (is_name(cur(P), "elif")) {
            next(P);
            continue;
        }
        if (is_name(cur(P), "else")) {
            next(P);
            ES_TRY(statements(P, end_if2, &e->c));
        }
        next(P); /* endif */
        break;
    }
    e->v = tests.v, e->nv = tests.n, e->w = bodies.v, e->nw = bodies.n;
    return ES_OK;
}

/* {% set target = expr %} (a target, b expr) or {% set target | filters %}body{% endset %}
 * (N_SETBLOCK: b the filter chain over a NULL operand, c the body). */
static es_status set_(ps *P, jnode *e)
{
    ES_TRY(assign_target(P, NULL, true, &e->a));
    if (cur(P)->t == T_ASSIGN) {
        next(P);
        return ja_p_tuple(P, false, true, NULL, false, false, &e->b);
    }
    e->k = N_SETBLOCK;
    if (e->a->k == N_TUPLE) return FAIL(P, "a {%% set %%} block assigns one name");
    ES_TRY(ja_p_filters(P, &e->b));
    ES_TRY(statements(P, end_set, &e->c));
    next(P); /* endset */
    return ES_OK;
}

/* Whether the tree under e loads the name (varargs, kwargs, caller: what a macro catches). */
static bool loads(const jnode *e, const char *name)
{
    if (!e) return false;
    if (e->k == N_NAME && !strcmp(e->name, name)) return true;
    if (loads(e->a, name) || loads(e->b, name) || loads(e->c, name)) return true;
    for (int i = 0; i < e->nv; i++)
        if (loads(e->v[i], name)) return true;
    for (int i = 0; i < e->nw; i++)
        if (loads(e->w[i], name)) return true;
    return false;
}

/* {% macro name(a, b=default) %}body{% endmacro %}: the parameters' names in e->names and
 * their defaults in e->w (NULL: none) [e->nw], the body in e->c, the name in e->name; e->op
 * says whether the body reads varargs (1) or kwargs (2), which then catch extra arguments. */
static es_status macro(ps *P, jnode *e)
{
    if (cur(P)->t != T_NAME) return ja_p_expect(P, T_NAME);
    if (!(e->name = ja_p_tokstr(P, cur(P)))) return NOMEM(P);
    next(P);
    ES_TRY(ja_p_expect(P, T_LPAREN));
    nvec defaults = {0};
    const char *names[JA_MAX_DEPTH];
    int n = 0;
    bool any_default = false;
    while (cur(P)->t != T_RPAREN) {
        if (n) ES_TRY(ja_p_expect(P, T_COMMA));
        if (cur(P)->t != T_NAME) return ja_p_expect(P, T_NAME);
        if (n == JA_MAX_DEPTH) return FAIL(P, "too many macro parameters");
        if (!(names[n++] = ja_p_tokstr(P, cur(P)))) return NOMEM(P);
        next(P);
        jnode *d = NULL;
        if (cur(P)->t == T_ASSIGN) {
            next(P);
            ES_TRY(ja_p_expression(P, true, &d));
            any_default = true;
        } else if (any_default) {
            return FAIL(P, "non-default argument follows default argument");
        }
        ES_TRY(ja_p_push(P, &defaults, d));
    }
    next(P); /* ) */
    if (!(e->names = ja_alloc(P->a, (size_t)(n ? n : 1) * sizeof(char *)))) return NOMEM(P);
    memcpy(e->names, names, (size_t)n * sizeof(char *));
    e->w = defaults.v, e->nw = n;
    int loops = P->loops; /* a loop outside the macro is not one break can leave from inside */
    P->loops = 0;
    ES_TRY(statements(P, end_macro, &e->c));
    P->loops = loops;
    next(P); /* endmacro */
    if (loads(e->c, "caller"))
        return ja_p_fail(P, e->line, "macro '%s' uses caller ({%% call %%} is not supported)",
                         e->name);
    e->op = (uint8_t)(loads(e->c, "varargs") | loads(e->c, "kwargs") << 1);
    return ES_OK;
}

/* One {% %} statement, its tag name current. */
static es_status statement(ps *P, jnode **out)
{
    const jtok *t = cur(P);
    if (t->t != T_NAME) return FAIL(P, "tag name expected");
    static const char *const unsupported[] = {"block",  "extends", "include",    "from",
                                              "import", "with",    "autoescape", "call",
                                              "filter", "do",      "trans"};
    for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++)
        if (is_name(t, unsupported[i])) return FAIL(P, "tag '%s' is not supported", unsupported[i]);
    jnode *e;
    MK(P, e, N_BODY, t->line);
    if (is_name(t, "for")) {
        e->k = N_FOR;
        next(P);
        ES_TRY(for_(P, e));
    } else if (is_name(t, "macro")) {
        e->k = N_MACRO;
        next(P);
        ES_TRY(macro(P, e));
    } else if (is_name(t, "if")) {
        e->k = N_IF;
        next(P);
        ES_TRY(if_(P, e));
    } else if (is_name(t, "set")) {
        e->k = N_SET;
        next(P);
        ES_TRY(set_(P, e));
    } else if (is_name(t, "print")) {
        e->k = N_OUTPUT;
        next(P);
        nvec v = {0};
        while (cur(P)->t != T_BLOCK_END) {
            if (v.n) ES_TRY(ja_p_expect(P, T_COMMA));
            jnode *x;
            ES_TRY(ja_p_expression(P, true, &x));
            ES_TRY(ja_p_push(P, &v, x));
        }
        e->v = v.v, e->nv = v.n;
    } else if (is_name(t, "break") || is_name(t, "continue")) {
        if (!P->loops) return FAIL(P, "'%.*s' outside a loop", (int)t->n, t->p);
        e->k = is_name(t, "break") ? N_BREAK : N_CONTINUE;
        next(P);
    } else if (is_name(t, "generation")) { /* Hugging Face's assistant-mask tag: its body */
        next(P);
        jnode *b;
        ES_TRY(statements(P, end_gen, &b));
        next(P);
        *out = b;
        return ES_OK;
    } else {
        return FAIL(P, "unknown tag '%.*s'", (int)t->n, t->p);
    }
    *out = e;
    return ES_OK;
}

/* The text and {{ }} collected so far, as one N_OUTPUT statement. */
static es_status flush(ps *P, nvec *parts, nvec *body)
{
    if (!parts->n) return ES_OK;
    jnode *o;
    MK(P, o, N_OUTPUT, parts->v[0]->line);
    o->v = parts->v, o->nv = parts->n;
    *parts = (nvec){0};
    return ja_p_push(P, body, o);
}

static es_status subparse(ps *P, const char *const *end, jnode **out)
{
    nvec body = {0}, parts = {0};
    jnode *b;
    MK(P, b, N_BODY, cur(P)->line);
    for (;;) {
        const jtok *t = cur(P);
        if (t->t == T_EOF) {
            if (end) return FAIL(P, "unexpected end of template, expected '%s'", end[0]);
            break;
        }
        if (t->t == T_DATA) {
            jnode *d;
            MK(P, d, N_DATA, t->line);
            jstr *s = ja_str_new(P->a, t->p, t->n);
            if (!s) return NOMEM(P);
            d->cv = jv_str(s);
            ES_TRY(ja_p_push(P, &parts, d));
            next(P);
        } else if (t->t == T_VAR_BEGIN) {
            next(P);
            jnode *x;
            ES_TRY(ja_p_tuple(P, false, true, NULL, false, false, &x));
            ES_TRY(ja_p_push(P, &parts, x));
            ES_TRY(ja_p_expect(P, T_VAR_END));
        } else if (t->t == T_BLOCK_BEGIN) {
            ES_TRY(flush(P, &parts, &body));
            next(P);
            for (const char *const *e = end; e && *e; e++)
                if (is_name(cur(P), *e)) goto done;
            jnode *s = NULL;
            ES_TRY(statement(P, &s));
            ES_TRY(ja_p_push(P, &body, s));
            ES_TRY(ja_p_expect(P, T_BLOCK_END));
        } else {
            return ja_p_unexpected(P);
        }
    }
done:
    ES_TRY(flush(P, &parts, &body));
    b->v = body.v, b->nv = body.n;
    *out = b;
    return ES_OK;
}

/* jinja2 refuses a filter or test it does not know when it compiles the template, except in
 * its "soft" frames -- an if statement (its tests and bodies, not a loop or block nested in
 * them) and an inline if -- where it fails only if the call is evaluated. The same rule for
 * what is unknown to jinja2; a jinja2 filter this interpreter does not implement fails only
 * when evaluated, so a template using one in a branch a chat never takes still renders. */
static es_status check_names(ps *P, const jnode *e, bool soft)
{
    if (!e) return ES_OK;
    if (e->k == N_FILTER && e->fid < 0 && !soft && !ja_jinja_has_filter(e->name))
        return ja_p_fail(P, e->line, "no filter named '%s'", e->name);
    if (e->k == N_TEST && e->fid < 0 && !soft)
        return ja_p_fail(P, e->line, "no test named '%s'", e->name);
    bool s_a = soft, s_b = soft, s_c = soft, s_v = soft, s_w = soft;
    switch (e->k) {
    case N_IF:
    case N_COND:
        s_a = s_b = s_c = s_v = s_w = true;
        break;
    case N_FOR:
        s_c = s_w = false;
        break; /* filter, body, else: inner frames */
    case N_SETBLOCK:
    case N_MACRO:
        s_b = s_c = s_w = false;
        break;
    }
    ES_TRY(check_names(P, e->a, s_a));
    ES_TRY(check_names(P, e->b, s_b));
    ES_TRY(check_names(P, e->c, s_c));
    for (int i = 0; i < e->nv; i++)
        ES_TRY(check_names(P, e->v[i], s_v));
    for (int i = 0; i < e->nw; i++)
        ES_TRY(check_names(P, e->w[i], s_w));
    return ES_OK;
}

es_status ja_parse(ja_arena *a, const char *name, const jtok *toks, size_t n, jnode **root)
{
    ps P = {.a = a, .name = name, .t = toks, .n = n};
    ES_TRY(subparse(&P, NULL, root));
    return check_names(&P, *root, false);
}

es_status es_jinja_compile(const char *src, size_t len, const char *name, es_jinja_tmpl **out)
{
    *out = NULL;
    es_jinja_tmpl *t = calloc(1, sizeof(*t));
    if (!t) return es_fail(ES_E_NOMEM, "out of memory");
    snprintf(t->name, sizeof(t->name), "%s", name ? name : "template");
    es_status st;
    if (!ja_utf8_valid(src, len)) {
        st = ja_fail(t->name, 1, "the template is not valid UTF-8");
        goto fail;
    }
    jtok *toks;
    size_t n;
    if ((st = ja_lex(&t->arena, t->name, src, len, &toks, &n)) != ES_OK) goto fail;
    if ((st = ja_parse(&t->arena, t->name, toks, n, &t->root)) != ES_OK) goto fail;
    *out = t;
    return ES_OK;
fail:
    es_jinja_tmpl_free(t);
    return st;
}

void es_jinja_tmpl_free(es_jinja_tmpl *t)
{
    if (!t) return;
    ja_free_all(&t->arena);
    free(t);
}
