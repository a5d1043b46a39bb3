/*
 * Statements of the Jinja interpreter, its scopes, and the render entry point (compiling is
 * parse.c's).
 *
 * DESIGN: scoping follows what jinja2 compiles a template to. The template body has one scope;
 * {% if %} opens none (a set inside it is seen after it); each iteration of a {% for %} runs in
 * a fresh scope whose parent is the loop's surroundings, holding the loop target, `loop` and
 * whatever the body sets -- so a set inside a loop never leaks out and starts each iteration
 * from the outer value (jinja2 aliases the outer variable afresh every iteration), which is
 * why templates carry state across iterations in a namespace(). A name is looked up in the
 * scopes from the innermost out, then in the render's variables, then in the globals.
 * The for's `if` filters the items lazily, as jinja2's generator does: each item is tested when
 * the loop reaches it (or when loop.last, loop.nextitem or loop.length look ahead), so a test
 * reading state the body changes sees the change; loop.length and loop.last count only the
 * kept items. {% else %} runs when no iteration reached the end of the body -- none kept, or
 * every one left by break or continue, as jinja2's compiled code has it.
 * {% break %} / {% continue %} set R->flow, which every statement list stops on and the
 * innermost loop clears. Output goes to R->out, which a {% set %} block points at a buffer of
 * its own while its body runs, and so does a macro call: a macro is a value (JV_MACRO) bound
 * like a set, its body run at each call in a fresh scope whose parent is the scope it was
 * defined in (so it reads the names there as they are at the call, as jinja2's closures do).
 */
#include "jinja/jinja_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- scopes -----------------------------------------------------------------------------------
 */
static es_status scope_set(jr *R, jscope *s, const char *name, jv v)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name)) {
            s->vals[i] = v;
            return ES_OK;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        const char **nn = ja_alloc(&R->a, cap * sizeof(char *));
        jv *vv = ja_alloc(&R->a, cap * sizeof(jv));
        if (!nn || !vv) return jr_oom(R);
        if (s->n)
            memcpy(nn, s->names, s->n * sizeof(char *)), memcpy(vv, s->vals, s->n * sizeof(jv));
        s->names = nn, s->vals = vv, s->cap = cap;
    }
    s->names[s->n] = name, s->vals[s->n] = v;
    s->n++;
    return ES_OK;
}

jv jr_lookup(jr *R, const char *name)
{
    for (const jscope *s = R->scope; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (!strcmp(s->names[i], name)) return s->vals[i];
    if (R->vars)
        for (size_t i = R->vars->n; i-- > 0;)
            if (!strcmp(R->vars->names[i], name)) return R->vars->vals[i];
    jv g = ja_global(name);
    return g.k != JV_UNDEF ? g : jr_undef(R, name, jv_undef());
}

/* Assigns v to a target: a name, a namespace attribute, or a tuple of them (unpacking). */
static es_status assign(jr *R, const jnode *t, jv v)
{
    R->line = t->line;
    if (t->k == N_NAME) return scope_set(R, R->scope, t->name, v);
    if (t->k == N_NSREF) {
        jv ns = jr_lookup(R, t->name);
        if (ns.k != JV_NS) return jr_fail(R, "cannot assign attribute on non-namespace object");
        jv key;
        ES_TRY(jr_str(R, t->attr, strlen(t->attr), &key));
        return jr_dict_set(R, ns.d, key, v);
    }
    jlist *items;
    ES_TRY(jr_iter(R, v, &items));
    if ((int64_t)items->n != t->nv)
        return jr_fail(R,
                       (int64_t)items->n > t->nv ? "too many values to unpack (expected %d)"
                                                 : "not enough values to unpack (expected %d)",
                       t->nv);
    for (int i = 0; i < t->nv; i++)
        ES_TRY(assign(R, t->v[i], items->v[i]));
    return ES_OK;
}

/* ---- statements ---------------------------------------------------------------------------------
 */
static es_status exec(jr *R, const jnode *s);

es_status jr_exec_body(jr *R, const jnode *body)
{
    for (int i = 0; i < body->nv && R->flow == FLOW_NONE; i++)
        ES_TRY(exec(R, body->v[i]));
    return ES_OK;
}

/* One more loop iteration (or filtered item): ES_E_FORMAT past the iteration limit. */
static es_status count_iteration(jr *R)
{
    if (++R->iters > R->lim.max_iterations)
        return jr_fail(R, "more than %lld loop iterations (iteration limit)",
                       (long long)R->lim.max_iterations);
    return jr_charge(R, 1);
}

/* The next item of lp that passes the for's filter, taken from src (*got false when none is
 * left). The filter runs in lp->scope with the target bound to the candidate. */
static es_status filter_next(jr *R, jloop *lp, jv *item, bool *got)
{
    *got = false;
    while (lp->pos < lp->src->n) {
        jv x = lp->src->v[lp->pos++], ok;
        if (!lp->cond) {
            *item = x, *got = true;
            return ES_OK;
        }
        jscope *saved = R->scope;
        int line = R->line;
        R->scope = lp->scope;
        lp->scope->n = 0;
        es_status st = count_iteration(R);
        if (st == ES_OK) st = assign(R, lp->target, x);
        if (st == ES_OK) st = jr_eval(R, lp->cond, &ok);
        R->scope = saved, R->line = line;
        ES_TRY(st);
        if (ja_truthy(ok)) {
            *item = x, *got = true;
            return ES_OK;
        }
    }
    return ES_OK;
}

/* The next item to iterate: one peeked already, else the next that passes the filter. */
static es_status loop_pull(jr *R, jloop *lp, jv *item, bool *got)
{
    if (lp->head < lp->ahead->n) {
        *item = lp->ahead->v[lp->head++], *got = true;
        return ES_OK;
    }
    return filter_next(R, lp, item, got);
}

es_status jr_loop_peek(jr *R, jloop *lp, jv *item, bool *got)
{
    if (lp->head == lp->ahead->n) {
        ES_TRY(filter_next(R, lp, item, got));
        if (*got) ES_TRY(jr_list_push(R, lp->ahead, *item));
        return ES_OK;
    }
    *item = lp->ahead->v[lp->head], *got = true;
    return ES_OK;
}

es_status jr_loop_length(jr *R, jloop *lp, int64_t *n)
{
    if (lp->length < 0) { /* jinja2 filters all the rest now */
        for (bool got = true; got;) {
            jv x;
            ES_TRY(filter_next(R, lp, &x, &got));
            if (got) ES_TRY(jr_list_push(R, lp->ahead, x));
        }
        lp->length = lp->index0 + 1 + (int64_t)(lp->ahead->n - lp->head);
    }
    *n = lp->length;
    return ES_OK;
}

/* {% for %}: see the DESIGN note on scopes, lazy filtering and else. */
static es_status for_(jr *R, const jnode *s)
{
    jv it;
    ES_TRY(jr_eval(R, s->b, &it));
    R->line = s->line;
    jlist *items;
    ES_TRY(jr_iter(R, it, &items));
    jscope *outer = R->scope;
    jscope *sc = ja_zalloc(&R->a, sizeof(*sc)); /* reused by every iteration */
    jloop *lp = ja_zalloc(&R->a, sizeof(*lp));
    if (!sc || !lp) return jr_oom(R);
    sc->parent = outer;
    lp->src = items, lp->target = s->a, lp->cond = s->c;
    lp->length = s->c ? -1 : (int64_t)items->n;
    lp->prev = lp->cur = jv_missing();
    ES_TRY(jr_list_new(R, 0, &lp->ahead));
    if (s->c) {
        if (!(lp->scope = ja_zalloc(&R->a, sizeof(jscope)))) return jr_oom(R);
        lp->scope->parent = outer;
    }
    jv loopv = {.k = JV_LOOP, .lp = lp};
    es_status st = ES_OK;
    /* jinja2 runs the else block unless some iteration reached the end of the body: it clears
     * its flag after the body, which break and continue skip */
    bool completed = false;
    for (int64_t i = 0; st == ES_OK; i++) {
        jv x;
        bool got;
        R->line = s->line;
        if ((st = loop_pull(R, lp, &x, &got)) != ES_OK || !got) break;
        lp->index0 = i, lp->prev = lp->cur, lp->cur = x;
        R->scope = sc;
        sc->n = 0;
        if ((st = count_iteration(R)) == ES_OK && (st = scope_set(R, sc, "loop", loopv)) == ES_OK &&
            (st = assign(R, s->a, x)) == ES_OK)
            st = jr_exec_body(R, s->w[0]);
        R->scope = outer;
        int flow = R->flow;
        R->flow = FLOW_NONE;
        completed |= flow == FLOW_NONE;
        if (flow == FLOW_BREAK) break;
    }
    if (st == ES_OK && !completed && s->w[1]) st = jr_exec_body(R, s->w[1]);
    return st;
}

/* Text and {{ }}: str() of each expression appended to the current output. */
static es_status output(jr *R, const jnode *s)
{
    for (int i = 0; i < s->nv; i++) {
        const jnode *p = s->v[i];
        if (p->k == N_DATA) {
            ES_TRY(jr_buf_put(R, R->out, p->cv.s->b, p->cv.s->len));
            continue;
        }
        jv v;
        ES_TRY(jr_eval(R, p, &v));
        R->line = p->line;
        ES_TRY(jr_tostr(R, v, R->out));
    }
    return ES_OK;
}

/* {% set x %}body{% endset %}, with optional filters applied to the body's text. */
static es_status set_block(jr *R, const jnode *s)
{
    jbuf buf = {0}, *prev = R->out;
    R->out = &buf;
    es_status st = jr_exec_body(R, s->c);
    R->out = prev;
    if (st == ES_OK && R->flow != FLOW_NONE) { /* a break or continue leaves before assigning */
        ja_buf_free(&buf);
        return ES_OK;
    }
    jv v = jv_none();
    if (st == ES_OK) st = jr_str(R, buf.p ? buf.p : "", buf.n, &v);
    ja_buf_free(&buf);
    ES_TRY(st);
    /* the filter chain's innermost operand (NULL) is the body */
    const jnode *chain[JA_MAX_DEPTH];
    int n = 0;
    for (const jnode *f = s->b; f && n < JA_MAX_DEPTH; f = f->a)
        chain[n++] = f;
    while (n--) {
        const jnode *f = chain[n];
        if (f->fid < 0) return jr_unknown(R, f);
        jv *argv = f->nv ? ja_alloc(&R->a, (size_t)f->nv * sizeof(jv)) : NULL;
        jv *kwv = f->nw ? ja_alloc(&R->a, (size_t)f->nw * sizeof(jv)) : NULL;
        if ((f->nv && !argv) || (f->nw && !kwv)) return jr_oom(R);
        for (int i = 0; i < f->nv; i++)
            ES_TRY(jr_eval(R, f->v[i], &argv[i]));
        for (int i = 0; i < f->nw; i++)
            ES_TRY(jr_eval(R, f->w[i], &kwv[i]));
        R->line = f->line;
        ES_TRY(jr_filter(R, f->fid, v, argv, f->nv, f->names, kwv, f->nw, &v));
    }
    return assign(R, s->a, v);
}

static es_status exec_(jr *R, const jnode *s);

static es_status exec(jr *R, const jnode *s)
{
    if (R->depth >= JA_MAX_RECURSION)
        return jr_fail(R, "statements and macro calls nested too deep (recursion limit)");
    R->depth++;
    es_status st = exec_(R, s);
    R->depth--;
    return st;
}

static es_status exec_(jr *R, const jnode *s)
{
    R->line = s->line;
    ES_TRY(jr_charge(R, 1));
    jv v;
    switch (s->k) {
    case N_OUTPUT:
        return output(R, s);
    case N_BODY:
        return jr_exec_body(R, s);
    case N_IF:
        for (int i = 0; i < s->nv; i++) {
            ES_TRY(jr_eval(R, s->v[i], &v));
            if (ja_truthy(v)) return jr_exec_body(R, s->w[i]);
        }
        return s->c ? jr_exec_body(R, s->c) : ES_OK;
    case N_FOR:
        return for_(R, s);
    case N_SET:
        ES_TRY(jr_eval(R, s->b, &v));
        return assign(R, s->a, v);
    case N_SETBLOCK:
        return set_block(R, s);
    case N_MACRO: {
        jmacro *m = ja_alloc(&R->a, sizeof(*m));
        if (!m) return jr_oom(R);
        m->def = s, m->scope = R->scope;
        jv mv = {.k = JV_MACRO, .mac = m};
        return scope_set(R, R->scope, s->name, mv);
    }
    case N_BREAK:
        R->flow = FLOW_BREAK;
        return ES_OK;
    case N_CONTINUE:
        R->flow = FLOW_CONTINUE;
        return ES_OK;
    }
    return jr_fail(R, "internal error: not a statement");
}

/* ---- macros
 * -------------------------------------------------------------------------------------- */
es_status jr_call_macro(jr *R, const jmacro *m, const jv *argv, int argc, const char *const *kwn,
                        const jv *kwv, int kwc, jv *out)
{
    const jnode *d = m->def;
    int np = d->nw;
    bool catch_varargs = d->op & 1, catch_kwargs = d->op & 2;
    jscope *ms = ja_zalloc(&R->a, sizeof(*ms)), *saved = R->scope;
    jv *vals = ja_alloc(&R->a, (size_t)(np ? np : 1) * sizeof(jv));
    bool *used = ja_zalloc(&R->a, (size_t)(kwc ? kwc : 1));
    if (!ms || !vals || !used) return jr_oom(R);
    ms->parent = m->scope;
    /* positional arguments first; keywords fill only the parameters after them */
    for (int i = 0; i < np; i++) {
        vals[i] = i < argc ? argv[i] : jv_missing();
        for (int k = 0; i >= argc && k < kwc; k++)
            if (!used[k] && !strcmp(kwn[k], d->names[i])) {
                vals[i] = kwv[k], used[k] = true;
                break;
            }
    }
    jdict *extra = NULL;
    if (catch_kwargs) ES_TRY(jr_dict_new(R, &extra));
    for (int k = 0; k < kwc; k++) {
        if (used[k]) continue;
        if (!catch_kwargs)
            return jr_fail(R, "macro '%s' takes no keyword argument '%s'", d->name, kwn[k]);
        jv key;
        ES_TRY(jr_str(R, kwn[k], strlen(kwn[k]), &key));
        ES_TRY(jr_dict_set(R, extra, key, kwv[k]));
    }
    if (argc > np && !catch_varargs)
        return jr_fail(R, "macro '%s' takes not more than %d argument(s)", d->name, np);
    for (int i = 0; i < np; i++)
        if (vals[i].k != JV_MISSING) ES_TRY(scope_set(R, ms, d->names[i], vals[i]));
    if (catch_varargs) {
        jlist *rest;
        ES_TRY(jr_list_new(R, argc > np ? (size_t)(argc - np) : 0, &rest));
        for (int i = np; i < argc; i++)
            rest->v[rest->n++] = argv[i];
        ES_TRY(scope_set(R, ms, "varargs", jv_list(rest, JL_TUPLE)));
    }
    if (catch_kwargs) {
        jv kv = {.k = JV_DICT, .d = extra};
        ES_TRY(scope_set(R, ms, "kwargs", kv));
    }
    int line = R->line;
    jbuf buf = {0}, *prev = R->out;
    es_status st = ES_OK;
    R->scope = ms;
    /* missing parameters: their defaults, in order, evaluated inside the macro at call time */
    for (int i = 0; i < np && st == ES_OK; i++) {
        if (vals[i].k != JV_MISSING) continue;
        jv v;
        if (d->w[i])
            st = jr_eval(R, d->w[i], &v);
        else { /* jinja2's message: "parameter 'a' was not provided" */
            size_t n = strlen(d->names[i]) + 32;
            char *msg = ja_alloc(&R->a, n);
            if (msg) snprintf(msg, n, "parameter '%s' was not provided", d->names[i]);
            v = jr_undef_hint(R, msg ? msg : "a parameter of the macro was not provided");
        }
        if (st == ES_OK) st = scope_set(R, ms, d->names[i], v);
    }
    R->out = &buf;
    if (st == ES_OK) st = jr_exec_body(R, d->c);
    R->out = prev, R->scope = saved, R->line = line;
    if (st == ES_OK) st = jr_str(R, buf.p ? buf.p : "", buf.n, out);
    ja_buf_free(&buf);
    return st;
}

/* ---- entry points -------------------------------------------------------------------------------
 */
es_jinja_limits es_jinja_default_limits(void)
{
    return (es_jinja_limits){.max_output_bytes = (size_t)32 << 20,
                             .max_memory_bytes = (size_t)512 << 20,
                             .max_iterations = 1000000,
                             .max_work = 100000000,
                             .now = 0};
}

es_status es_jinja_render(const es_jinja_tmpl *t, const es_jinja_vars *vars,
                          const es_jinja_limits *lim, char **out, size_t *len)
{
    *out = NULL, *len = 0;
    jr R = {.t = t, .vars = vars, .lim = lim ? *lim : es_jinja_default_limits(), .line = 1};
    R.a.cap = R.lim.max_memory_bytes;
    jbuf buf = {0};
    jscope root = {0};
    R.out = &buf, R.scope = &root;
    es_status st = jr_exec_body(&R, t->root);
    if (st == ES_OK && !buf.p) st = jr_buf_put(&R, &buf, "", 0); /* an empty text */
    ja_free_all(&R.a);
    if (st != ES_OK) {
        ja_buf_free(&buf);
        return st;
    }
    *out = buf.p, *len = buf.n;
    return ES_OK;
}
