/*
 * Expressions of the Jinja interpreter: the value of each syntax-tree node, with the sandbox's
 * attribute and item rules and Python's operators.
 *
 * DESIGN: the rules are those of jinja2's ImmutableSandboxedEnvironment and Python 3:
 *  - obj.name tries the attribute first (a str or dict method), then obj["name"]; obj[key]
 *    tries the item first, then, for a string key, the attribute. What neither finds is
 *    Undefined (printing "", false), except that anything done to an Undefined itself (its
 *    attribute, item, call, arithmetic, ordering) raises UndefinedError, as jinja2's default
 *    Undefined does; a list's mutating methods are refused (the sandbox is immutable);
 *  - `and`/`or` return an operand, comparisons chain (a < b < c), ~ joins str() of each side,
 *    + - * / // % ** follow Python for int, float and bool (True + 1 == 2; // and % floor),
 *    str and list concatenation and repetition; integers are 64-bit here and overflow is an
 *    error, not a wrong number;
 *  - indexes and slices count code points in strings and may be negative.
 * Every node charges one work unit; R->line follows the node being evaluated for errors.
 */
#include "jinja/jinja_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- attributes and items -------------------------------------------------------------------- */
es_status jr_getattr(jr *R, jv obj, const char *name, jv *out)
{
    bool found = false;
    switch (obj.k) {
    case JV_UNDEF:
        return jr_undef_fail(R, obj);
    case JV_LOOP:
        return jr_loop_attr(R, obj, name, out);
    case JV_NS: {
        const jv *v = ja_dict_get(obj.d, name, strlen(name));
        *out = v ? *v : jr_undef(R, name, obj);
        return ES_OK;
    }
    case JV_NONE:
        *out = jr_undef(R, name, obj);
        return ES_OK;
    case JV_DICT: {
        ES_TRY(jr_method(R, obj, name, out, &found));
        if (found) return ES_OK;
        const jv *v = ja_dict_get(obj.d, name, strlen(name));
        *out = v ? *v : jr_undef(R, name, obj);
        return ES_OK;
    }
    case JV_STR:
    case JV_LIST:
        ES_TRY(jr_method(R, obj, name, out, &found));
        if (!found) *out = jr_undef(R, name, obj);
        return ES_OK;
    }
    /* numbers: Python's int and float attributes are refused, anything else is undefined */
    static const char *const num_attrs[] = {
        "real",       "imag",      "numerator", "denominator", "conjugate",
        "bit_length", "bit_count", "to_bytes",  "from_bytes",  "as_integer_ratio",
        "is_integer", "hex",       "fromhex"};
    if (jv_is_num(obj)) {
        for (size_t i = 0; i < sizeof(num_attrs) / sizeof(num_attrs[0]); i++)
            if (!strcmp(name, num_attrs[i]))
                return jr_fail(R, "attribute '%s' of a %s value is not supported", name,
                               ja_type_name(obj));
        if (name[0] == '_' && name[1] == '_')
            return jr_fail(R, "access to attribute '%s' of '%s' object is unsafe", name,
                           ja_type_name(obj));
        *out = jr_undef(R, name, obj);
        return ES_OK;
    }
    /* functions, methods and macros: Python's have only dunder attributes (refused as the
     * sandbox refuses them), except a class's methods and a jinja2 Macro's fields (refused:
     * not implemented); any other name is undefined, as Python's getattr fails */
    static const char *const macro_attrs[] = {"name",          "arguments", "catch_kwargs",
                                              "catch_varargs", "caller",    "explicit_caller"};
    if (obj.k == JV_FUNC || obj.k == JV_MACRO) {
        if (name[0] == '_' && (name[1] == '_' || obj.k == JV_MACRO))
            return jr_fail(R, "access to attribute '%s' of '%s' object is unsafe", name,
                           ja_type_name(obj));
        bool has = obj.k == JV_FUNC && ja_func_has_attr(obj.fn, name);
        for (size_t i = 0; obj.k == JV_MACRO && i < sizeof(macro_attrs) / sizeof(*macro_attrs); i++)
            has = has || !strcmp(name, macro_attrs[i]);
        if (!has) {
            *out = jr_undef(R, name, obj);
            return ES_OK;
        }
    }
    return jr_fail(R, "attribute '%s' of a %s value is not supported", name, ja_type_name(obj));
}

/* Python's slice.indices(len) and the indexes it selects, into idx (count in *n). */
static es_status slice_idx(jr *R, const jv *p, int64_t len, int64_t *start, int64_t *step,
                           int64_t *count)
{
    int64_t v[3];
    bool given[3];
    for (int i = 0; i < 3; i++) {
        given[i] = p[i].k != JV_NONE;
        if (given[i] && p[i].k != JV_INT && p[i].k != JV_BOOL)
            return jr_fail(R, "slice indices must be integers or None, not %s", ja_type_name(p[i]));
        v[i] = p[i].i;
    }
    int64_t st = given[2] ? v[2] : 1;
    if (st == 0) return jr_fail(R, "slice step cannot be zero");
    int64_t lo = st < 0 ? -1 : 0, hi = st < 0 ? len - 1 : len, b, e;
    if (!given[0])
        b = st < 0 ? hi : lo;
    else {
        b = v[0] < 0 ? v[0] + len : v[0];
        b = b < lo ? lo : b > hi ? hi : b;
    }
    if (!given[1])
        e = st < 0 ? lo : hi;
    else {
        e = v[1] < 0 ? v[1] + len : v[1];
        e = e < lo ? lo : e > hi ? hi : e;
    }
    int64_t c = st > 0 ? (e > b ? (e - b + st - 1) / st : 0) : (b > e ? (b - e - st - 1) / -st : 0);
    *start = b, *step = st, *count = c;
    return ES_OK;
}

/* Whether jinja2's optimizer folds e at compile time: a literal, or a list, tuple or dict of
 * literals (the cases where folding changes what a slice gives). */
static bool is_const(const jnode *e)
{
    if (!e) return true; /* an omitted slice part */
    switch (e->k) {
    case N_CONST:
        return true;
    case N_NOT:
    case N_NEG:
    case N_POS:
        return is_const(e->a);
    case N_LIST:
    case N_TUPLE:
    case N_DICT:
        for (int i = 0; i < e->nv; i++)
            if (!is_const(e->v[i]) || (e->k == N_DICT && !is_const(e->w[i]))) return false;
        return true;
    }
    return false;
}

/* What slicing obj (which Python cannot slice) gives: jinja2 subscribes the object directly,
 * a TypeError; but a slice of constants its optimizer folded at compile time went through the
 * sandbox's getitem: undefined ("None has no element slice(1, None, None)"). */
static es_status unsliceable(jr *R, jv obj, const jv *p, bool folded, jv *out)
{
    if (!folded) {
        if (obj.k == JV_DICT) return jr_fail(R, "unhashable type: 'slice'");
        if (obj.k == JV_FUNC && !strcmp(ja_type_name(obj), "type")) /* a generic alias */
            return jr_fail(R, "slicing a type value is not supported");
        return jr_fail(R, "'%s' object is not subscriptable", ja_type_name(obj));
    }
    jv key;
    jbuf b = {0};
    es_status st = jr_buf_put(R, &b, "slice(", 6);
    for (int i = 0; i < 3 && st == ES_OK; i++) {
        if (i) st = jr_buf_put(R, &b, ", ", 2);
        if (st == ES_OK) st = jr_tostr(R, p[i], &b);
    }
    if (st == ES_OK) st = jr_buf_put(R, &b, ")", 1);
    /* the folded parts are numbers or None: the slice's repr prints them as str does */
    if (st == ES_OK) st = jr_str(R, b.p, b.n, &key);
    ja_buf_free(&b);
    ES_TRY(st);
    *out = jr_undef_item(R, obj, key);
    return ES_OK;
}

/* obj[a:b:c] (s: N_SLICE): substrings by code points, sublists of the same kind (a tuple
 * stays a tuple); what Python cannot slice is a TypeError (folded: true if jinja2 computed
 * the slice at compile time, see unsliceable). */
static es_status slice(jr *R, jv obj, const jnode *s, bool folded, jv *out)
{
    jv p[3] = {jv_none(), jv_none(), jv_none()};
    const jnode *parts[3] = {s->a, s->b, s->c};
    for (int i = 0; i < 3; i++)
        if (parts[i]) ES_TRY(jr_eval(R, parts[i], &p[i]));
    R->line = s->line;
    if (obj.k == JV_UNDEF) return jr_undef_fail(R, obj);
    int64_t start, step, count;
    if (obj.k == JV_STR) {
        int64_t len;
        ES_TRY(jr_len(R, obj, &len));
        ES_TRY(slice_idx(R, p, len, &start, &step, &count));
        if (step == 1) { /* a substring */
            size_t b = ja_cp_offset(obj.s->b, obj.s->len, (size_t)start);
            size_t e = b + ja_cp_offset(obj.s->b + b, obj.s->len - b, (size_t)count);
            return jr_str(R, obj.s->b + b, e - b, out);
        }
        size_t *off = malloc(((size_t)len + 1) * sizeof(size_t)); /* code point starts */
        if (!off) return es_fail(ES_E_NOMEM, "%s: out of memory", R->t->name);
        for (size_t i = 0, k = 0; k <= (size_t)len; k++) {
            off[k] = i;
            if (i < obj.s->len) ja_utf8_next(obj.s->b, obj.s->len, &i);
        }
        jbuf b = {0};
        es_status st = ES_OK;
        for (int64_t k = 0, i = start; k < count && st == ES_OK; k++, i += step)
            st = jr_buf_put(R, &b, obj.s->b + off[i], off[i + 1] - off[i]);
        free(off);
        if (st == ES_OK) st = jr_str(R, b.p ? b.p : "", b.n, out);
        ja_buf_free(&b);
        return st;
    }
    if (obj.k == JV_LIST && (obj.sub == JL_LIST || obj.sub == JL_TUPLE || obj.sub == JL_RANGE)) {
        ES_TRY(slice_idx(R, p, (int64_t)obj.l->n, &start, &step, &count));
        jlist *l;
        ES_TRY(jr_charge(R, count));
        ES_TRY(jr_list_new(R, (size_t)count, &l));
        for (int64_t k = 0, i = start; k < count; k++, i += step)
            l->v[l->n++] = obj.l->v[i];
        *out = jv_list(l, obj.sub);
        return ES_OK;
    }
    return unsliceable(R, obj, p, folded, out);
}

es_status jr_getitem(jr *R, jv obj, jv key, jv *out)
{
    if (obj.k == JV_UNDEF) return jr_undef_fail(R, obj);
    bool is_int = key.k == JV_INT || key.k == JV_BOOL;
    if (obj.k == JV_DICT || obj.k == JV_NS) {
        if (obj.k == JV_DICT) ES_TRY(jr_key_check(R, key));
        const jv *v = obj.k == JV_DICT ? ja_dict_find(obj.d, key) : NULL;
        if (v) {
            *out = *v;
            return ES_OK;
        }
    } else if (obj.k == JV_LIST && is_int && obj.sub != JL_GEN && obj.sub != JL_VIEW) {
        int64_t i = key.i < 0 ? key.i + (int64_t)obj.l->n : key.i;
        if (i >= 0 && i < (int64_t)obj.l->n) {
            *out = obj.l->v[i];
            return ES_OK;
        }
    } else if (obj.k == JV_STR && is_int) {
        int64_t len;
        ES_TRY(jr_len(R, obj, &len));
        int64_t i = key.i < 0 ? key.i + len : key.i;
        if (i >= 0 && i < len) {
            size_t b = ja_cp_offset(obj.s->b, obj.s->len, (size_t)i), e = b;
            ja_utf8_next(obj.s->b, obj.s->len, &e);
            return jr_str(R, obj.s->b + b, e - b, out);
        }
    }
    /* the item is missing: a string key falls back to the attribute */
    if (key.k == JV_STR && obj.k != JV_DICT) return jr_getattr(R, obj, key.s->b, out);
    if (key.k == JV_STR) {
        bool found;
        ES_TRY(jr_method(R, obj, key.s->b, out, &found));
        if (found) return ES_OK;
        *out = jr_undef(R, key.s->b, obj);
        return ES_OK;
    }
    *out = jr_undef_item(R, obj, key);
    return ES_OK;
}

/* ---- operators ---------------------------------------------------------------------------------
 */
static es_status overflow(jr *R)
{
    return jr_fail(R, "integer overflow (more than 64 bits)");
}

/* seq * n for a string or a list. */
static es_status repeat(jr *R, jv seq, int64_t n, jv *out)
{
    if (n < 0) n = 0;
    if (seq.k == JV_STR) {
        if (n && seq.s->len > R->lim.max_output_bytes / (uint64_t)n)
            return jr_fail(R, "a string of more than %zu bytes (output limit)",
                           R->lim.max_output_bytes);
        size_t len = seq.s->len * (size_t)n;
        ES_TRY(jr_charge(R, (int64_t)len / 16));
        jstr *s = ja_alloc(&R->a, sizeof(jstr) + len + 1);
        if (!s) return jr_oom(R);
        s->len = len;
        for (int64_t i = 0; i < n; i++)
            memcpy(s->b + (size_t)i * seq.s->len, seq.s->b, seq.s->len);
        s->b[len] = 0;
        *out = jv_str(s);
        return ES_OK;
    }
    if (n && seq.l->n > (size_t)(R->lim.max_iterations) / (uint64_t)n)
        return jr_fail(R, "a list of more than %lld items", (long long)R->lim.max_iterations);
    size_t len = seq.l->n * (size_t)n;
    ES_TRY(jr_charge(R, (int64_t)len));
    jlist *l;
    ES_TRY(jr_list_new(R, len, &l));
    for (int64_t i = 0; i < n; i++)
        for (size_t k = 0; k < seq.l->n; k++)
            l->v[l->n++] = seq.l->v[k];
    *out = jv_list(l, seq.sub);
    return ES_OK;
}

/* Python's TypeError for an operator it does not define on these operands. */
static es_status arith_fail(jr *R, int op, jv a, jv b)
{
    static const char *const sym[] = {"+", "-", "*", "/", "//", "%", "**"};
    if (op == OP_ADD && a.k == JV_STR)
        return jr_fail(R, "can only concatenate str (not \"%s\") to str", ja_type_name(b));
    return jr_fail(R, "unsupported operand type(s) for %s: '%s' and '%s'", sym[op], ja_type_name(a),
                   ja_type_name(b));
}

es_status jr_binop(jr *R, int op, jv a, jv b, jv *out)
{
    if (a.k == JV_UNDEF) return jr_undef_fail(R, a);
    if (b.k == JV_UNDEF) return jr_undef_fail(R, b);
    if (jv_is_num(a) && jv_is_num(b)) {
        bool fl = a.k == JV_FLOAT || b.k == JV_FLOAT;
        double x = a.k == JV_FLOAT ? a.f : (double)a.i, y = b.k == JV_FLOAT ? b.f : (double)b.i;
        int64_t r;
        switch (op) {
        case OP_ADD:
            if (fl) {
                *out = jv_float(x + y);
                return ES_OK;
            }
            if (__builtin_add_overflow(a.i, b.i, &r)) return overflow(R);
            *out = jv_int(r);
            return ES_OK;
        case OP_SUB:
            if (fl) {
                *out = jv_float(x - y);
                return ES_OK;
            }
            if (__builtin_sub_overflow(a.i, b.i, &r)) return overflow(R);
            *out = jv_int(r);
            return ES_OK;
        case OP_MUL:
            if (fl) {
                *out = jv_float(x * y);
                return ES_OK;
            }
            if (__builtin_mul_overflow(a.i, b.i, &r)) return overflow(R);
            *out = jv_int(r);
            return ES_OK;
        case OP_DIV:
            if (y == 0) return jr_fail(R, "division by zero");
            *out = jv_float(x / y);
            return ES_OK;
        case OP_FLOORDIV:
        case OP_MOD:
            if (y == 0)
                return jr_fail(R, fl ? "float modulo or division by zero"
                                     : "integer division or modulo by zero");
            if (!fl) {
                if (a.i == INT64_MIN && b.i == -1) return overflow(R);
                int64_t q = a.i / b.i, m = a.i % b.i;
                if (m && ((m < 0) != (b.i < 0))) q--, m += b.i;
                *out = jv_int(op == OP_MOD ? m : q);
            } else { /* Python's float_divmod */
                double m = fmod(x, y), d = (x - m) / y, q;
                if (m) {
                    if ((y < 0) != (m < 0)) m += y, d -= 1.0;
                } else {
                    m = copysign(0.0, y);
                }
                if (d) {
                    q = floor(d);
                    if (d - q > 0.5) q += 1.0;
                } else {
                    q = copysign(0.0, x / y);
                }
                *out = jv_float(op == OP_MOD ? m : q);
            }
            return ES_OK;
        case OP_POW:
            if (!fl && b.i >= 0) {
                int64_t base = a.i, e = b.i, acc = 1;
                while (e) {
                    if ((e & 1) && __builtin_mul_overflow(acc, base, &acc)) return overflow(R);
                    e >>= 1;
                    if (e && __builtin_mul_overflow(base, base, &base)) return overflow(R);
                }
                *out = jv_int(acc);
                return ES_OK;
            }
            if (x == 0 && y < 0) return jr_fail(R, "0.0 cannot be raised to a negative power");
            if (x < 0 && y != floor(y))
                return jr_fail(
                    R, "a negative number to a fractional power is complex (not supported)");
            double pw = pow(x, y);
            if (isinf(pw) && isfinite(x) && isfinite(y)) /* Python's float ** raises on overflow */
                return jr_fail(R, "(34, 'Numerical result out of range')");
            *out = jv_float(pw);
            return ES_OK;
        }
    }
    if (op == OP_ADD && a.k == JV_STR && b.k == JV_STR) {
        if (a.s->len > R->lim.max_output_bytes - b.s->len)
            return jr_fail(R, "a string of more than %zu bytes (output limit)",
                           R->lim.max_output_bytes);
        ES_TRY(jr_charge(R, (int64_t)(a.s->len + b.s->len) / 16));
        jstr *s = ja_alloc(&R->a, sizeof(jstr) + a.s->len + b.s->len + 1);
        if (!s) return jr_oom(R);
        s->len = a.s->len + b.s->len;
        memcpy(s->b, a.s->b, a.s->len), memcpy(s->b + a.s->len, b.s->b, b.s->len + 1);
        *out = jv_str(s);
        return ES_OK;
    }
    if (op == OP_ADD && a.k == JV_LIST && b.k == JV_LIST && a.sub == b.sub &&
        (a.sub == JL_LIST || a.sub == JL_TUPLE)) {
        jlist *l;
        ES_TRY(jr_charge(R, (int64_t)(a.l->n + b.l->n)));
        ES_TRY(jr_list_new(R, a.l->n + b.l->n, &l));
        if (a.l->n) memcpy(l->v, a.l->v, a.l->n * sizeof(jv));
        if (b.l->n) memcpy(l->v + a.l->n, b.l->v, b.l->n * sizeof(jv));
        l->n = a.l->n + b.l->n;
        *out = jv_list(l, a.sub);
        return ES_OK;
    }
    if (op == OP_MUL) {
        bool ai = a.k == JV_INT || a.k == JV_BOOL, bi = b.k == JV_INT || b.k == JV_BOOL;
        bool as = a.k == JV_STR || (a.k == JV_LIST && (a.sub == JL_LIST || a.sub == JL_TUPLE));
        bool bs = b.k == JV_STR || (b.k == JV_LIST && (b.sub == JL_LIST || b.sub == JL_TUPLE));
        if (as && bi) return repeat(R, a, b.i, out);
        if (bs && ai) return repeat(R, b, a.i, out);
    }
    if (op == OP_MOD && a.k == JV_STR)
        return jr_fail(R, "printf-style formatting with %% is not supported");
    return arith_fail(R, op, a, b);
}

/* ---- calls ------------------------------------------------------------------------------------
 */
es_status jr_call(jr *R, jv f, const jv *argv, int argc, const char *const *kwn, const jv *kwv,
                  int kwc, jv *out)
{
    if (f.k == JV_UNDEF) return jr_undef_fail(R, f);
    if (f.k == JV_MACRO) return jr_call_macro(R, f.mac, argv, argc, kwn, kwv, kwc, out);
    if (f.k != JV_FUNC) return jr_fail(R, "'%s' object is not callable", ja_type_name(f));
    return jr_call_func(R, f.fn, argv, argc, kwn, kwv, kwc, out);
}

/* Evaluates the arguments of a call, filter or test node. */
static es_status args(jr *R, const jnode *e, jv **argv, jv **kwv)
{
    *argv = *kwv = NULL;
    if (e->nv && !(*argv = ja_alloc(&R->a, (size_t)e->nv * sizeof(jv)))) return jr_oom(R);
    if (e->nw && !(*kwv = ja_alloc(&R->a, (size_t)e->nw * sizeof(jv)))) return jr_oom(R);
    for (int i = 0; i < e->nv; i++)
        ES_TRY(jr_eval(R, e->v[i], &(*argv)[i]));
    for (int i = 0; i < e->nw; i++)
        ES_TRY(jr_eval(R, e->w[i], &(*kwv)[i]));
    R->line = e->line;
    return ES_OK;
}

/* a op1 b op2 c ...: Python's chained comparison, each operand evaluated once, stopping at
 * the first false. */
static es_status compare(jr *R, const jnode *e, jv *out)
{
    jv l;
    ES_TRY(jr_eval(R, e->a, &l));
    bool ok = true;
    for (int i = 0; i < e->nv && ok; i++) {
        jv r;
        ES_TRY(jr_eval(R, e->v[i], &r));
        R->line = e->line;
        switch (e->ops[i]) {
        case CMP_EQ:
            ES_TRY(jr_eq(R, l, r, &ok));
            break;
        case CMP_NE:
            ES_TRY(jr_eq(R, l, r, &ok));
            ok = !ok;
            break;
        case CMP_LT:
            ES_TRY(jr_lt(R, l, r, &ok));
            break;
        case CMP_GT:
            ES_TRY(jr_lt(R, r, l, &ok));
            break;
        case CMP_LE:
            ES_TRY(jr_lt(R, r, l, &ok));
            ok = !ok;
            break;
        case CMP_GE:
            ES_TRY(jr_lt(R, l, r, &ok));
            ok = !ok;
            break;
        case CMP_IN:
            ES_TRY(jr_contains(R, r, l, &ok));
            break;
        case CMP_NOTIN:
            ES_TRY(jr_contains(R, r, l, &ok));
            ok = !ok;
            break;
        }
        l = r;
    }
    *out = jv_bool(ok);
    return ES_OK;
}

/* A list or tuple literal. */
static es_status seq(jr *R, const jnode *e, int sub, jv *out)
{
    jlist *l;
    ES_TRY(jr_list_new(R, (size_t)e->nv, &l));
    for (int i = 0; i < e->nv; i++)
        ES_TRY(jr_eval(R, e->v[i], &l->v[l->n++]));
    *out = jv_list(l, sub);
    return ES_OK;
}

static es_status eval(jr *R, const jnode *e, jv *out);

es_status jr_eval(jr *R, const jnode *e, jv *out)
{
    if (R->depth >= JA_MAX_RECURSION)
        return jr_fail(R, "expressions and macro calls nested too deep (recursion limit)");
    R->depth++;
    es_status st = eval(R, e, out);
    R->depth--;
    return st;
}

es_status jr_unknown(jr *R, const jnode *e)
{
    R->line = e->line;
    if (e->k == N_TEST) return jr_fail(R, "No test named '%s' found.", e->name);
    if (ja_jinja_has_filter(e->name)) return jr_fail(R, "filter '%s' is not supported", e->name);
    return jr_fail(R, "No filter named '%s' found.", e->name);
}

/* An inline if without else whose test was false: undefined, with jinja2's message. */
static es_status cond_undef(jr *R, const jnode *e, jv *out)
{
    static const char fmt[] = "the inline if-expression on line %d evaluated to false and no "
                              "else section was defined.";
    char *m = ja_alloc(&R->a, sizeof(fmt) + 16);
    if (!m) return jr_oom(R);
    snprintf(m, sizeof(fmt) + 16, fmt, e->fid);
    *out = jr_undef_hint(R, m);
    return ES_OK;
}

/* The value of e (jr_eval without the recursion accounting). */
static es_status eval(jr *R, const jnode *e, jv *out)
{
    R->line = e->line;
    ES_TRY(jr_charge(R, 1));
    jv a, b;
    jv *argv, *kwv;
    switch (e->k) {
    case N_CONST:
        *out = e->cv;
        return ES_OK;
    case N_NAME:
        *out = jr_lookup(R, e->name);
        return ES_OK;
    case N_GETATTR:
        ES_TRY(jr_eval(R, e->a, &a));
        R->line = e->line;
        return jr_getattr(R, a, e->name, out);
    case N_GETITEM:
        ES_TRY(jr_eval(R, e->a, &a));
        if (e->b->k == N_SLICE)
            return slice(
                R, a, e->b,
                is_const(e->a) && is_const(e->b->a) && is_const(e->b->b) && is_const(e->b->c), out);
        ES_TRY(jr_eval(R, e->b, &b));
        R->line = e->line;
        return jr_getitem(R, a, b, out);
    case N_CALL:
        ES_TRY(jr_eval(R, e->a, &a));
        if (a.k == JV_UNDEF && e->a->k == N_NAME && ja_jinja_has_global(e->a->name))
            return jr_fail(R, "function '%s' is not supported", e->a->name);
        ES_TRY(args(R, e, &argv, &kwv));
        return jr_call(R, a, argv, e->nv, e->names, kwv, e->nw, out);
    case N_FILTER:
        if (e->fid < 0) return jr_unknown(R, e);
        ES_TRY(jr_eval(R, e->a, &a));
        ES_TRY(args(R, e, &argv, &kwv));
        return jr_filter(R, e->fid, a, argv, e->nv, e->names, kwv, e->nw, out);
    case N_TEST: {
        bool t;
        if (e->fid < 0) return jr_unknown(R, e);
        ES_TRY(jr_eval(R, e->a, &a));
        ES_TRY(args(R, e, &argv, &kwv));
        ES_TRY(jr_test(R, e->fid, a, argv, e->nv, e->names, kwv, e->nw, &t));
        *out = jv_bool(t);
        return ES_OK;
    }
    case N_NOT:
        ES_TRY(jr_eval(R, e->a, &a));
        *out = jv_bool(!ja_truthy(a));
        return ES_OK;
    case N_NEG:
    case N_POS:
        ES_TRY(jr_eval(R, e->a, &a));
        R->line = e->line;
        if (a.k == JV_UNDEF) return jr_undef_fail(R, a);
        if (!jv_is_num(a))
            return jr_fail(R, "bad operand type for unary %c: '%s'", e->k == N_NEG ? '-' : '+',
                           ja_type_name(a));
        if (a.k == JV_FLOAT)
            *out = jv_float(e->k == N_NEG ? -a.f : a.f);
        else if (e->k == N_NEG && a.i == INT64_MIN)
            return overflow(R);
        else
            *out = jv_int(e->k == N_NEG ? -a.i : a.i);
        return ES_OK;
    case N_BINOP:
        ES_TRY(jr_eval(R, e->a, &a));
        ES_TRY(jr_eval(R, e->b, &b));
        R->line = e->line;
        return jr_binop(R, e->op, a, b, out);
    case N_AND:
    case N_OR:
        ES_TRY(jr_eval(R, e->a, &a));
        if (ja_truthy(a) == (e->k == N_OR)) {
            *out = a;
            return ES_OK;
        }
        return jr_eval(R, e->b, out);
    case N_COMPARE:
        return compare(R, e, out);
    case N_CONCAT: {
        jbuf buf = {0};
        es_status st = ES_OK;
        for (int i = 0; i < e->nv && st == ES_OK; i++)
            if ((st = jr_eval(R, e->v[i], &a)) == ES_OK) st = jr_tostr(R, a, &buf);
        if (st == ES_OK) st = jr_str(R, buf.p ? buf.p : "", buf.n, out);
        ja_buf_free(&buf);
        return st;
    }
    case N_COND:
        ES_TRY(jr_eval(R, e->a, &a));
        if (ja_truthy(a)) return jr_eval(R, e->b, out);
        if (e->c) return jr_eval(R, e->c, out);
        return cond_undef(R, e, out);
    case N_LIST:
        return seq(R, e, JL_LIST, out);
    case N_TUPLE:
        return seq(R, e, JL_TUPLE, out);
    case N_DICT: {
        jdict *d;
        ES_TRY(jr_dict_new(R, &d));
        for (int i = 0; i < e->nv; i++) {
            ES_TRY(jr_eval(R, e->v[i], &a));
            ES_TRY(jr_eval(R, e->w[i], &b));
            R->line = e->line;
            ES_TRY(jr_key_check(R, a));
            ES_TRY(jr_dict_set(R, d, a, b));
        }
        out->k = JV_DICT, out->sub = 0, out->d = d;
        return ES_OK;
    }
    }
    return jr_fail(R, "this expression cannot be evaluated here");
}
