/*
 * Filters and tests of the Jinja interpreter, as jinja2 3.1 defines them (jinja2/filters.py,
 * jinja2/tests.py) with Hugging Face's tojson in place of jinja2's.
 *
 * DESIGN: each filter binds its arguments like the Python function it mirrors (positional,
 * then by keyword: `tojson(indent=2)`, `default('x', true)`), then applies Python's semantics:
 * join/trim/upper/replace work on str() of the value (so none|trim is "None"), default
 * replaces only Undefined unless its second argument is true, first/last of an empty sequence
 * is Undefined, length is len() (which a generator does not have). map, select, reject,
 * selectattr, rejectattr, items and reverse return generators in jinja2; here they return a
 * list marked as a generator, so it stays always true, unsized and single-use as in Python, and
 * is computed at once (an error jinja2 would raise only while consuming it comes at once).
 * Filters and tests jinja2 has but this file does not are refused when the template compiles.
 */
#include "jinja/jinja_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* clang-format off */
enum {
    F_ABS, F_CAPITALIZE, F_COUNT, F_DEFAULT, F_FIRST, F_FLOAT, F_INT, F_ITEMS, F_JOIN, F_LAST,
    F_LENGTH, F_LIST, F_LOWER, F_MAP, F_REJECT, F_REJECTATTR, F_REPLACE, F_REVERSE, F_SELECT,
    F_SELECTATTR, F_STRING, F_TITLE, F_TOJSON, F_TRIM, F_UPPER,
};
/* clang-format on */
/* clang-format off */
static const struct { const char *name; int id; } filter_names[] = {
    {"abs", F_ABS}, {"capitalize", F_CAPITALIZE}, {"count", F_COUNT}, {"d", F_DEFAULT},
    {"default", F_DEFAULT}, {"first", F_FIRST}, {"float", F_FLOAT}, {"int", F_INT},
    {"items", F_ITEMS}, {"join", F_JOIN}, {"last", F_LAST}, {"length", F_LENGTH},
    {"list", F_LIST}, {"lower", F_LOWER}, {"map", F_MAP}, {"reject", F_REJECT},
    {"rejectattr", F_REJECTATTR}, {"replace", F_REPLACE}, {"reverse", F_REVERSE},
    {"select", F_SELECT}, {"selectattr", F_SELECTATTR}, {"string", F_STRING}, {"title", F_TITLE},
    {"tojson", F_TOJSON}, {"trim", F_TRIM}, {"upper", F_UPPER},
};
/* clang-format on */

/* clang-format off */
enum {
    X_ODD, X_EVEN, X_DIVISIBLEBY, X_DEFINED, X_UNDEFINED, X_FILTER, X_TEST, X_NONE, X_BOOLEAN,
    X_FALSE, X_TRUE, X_INTEGER, X_FLOAT, X_LOWER, X_UPPER, X_STRING, X_MAPPING, X_NUMBER,
    X_SEQUENCE, X_ITERABLE, X_CALLABLE, X_SAMEAS, X_ESCAPED, X_IN, X_EQ, X_NE, X_GT, X_GE, X_LT,
    X_LE,
};
/* clang-format on */
/* clang-format off */
static const struct { const char *name; int id; } test_names[] = {
    {"odd", X_ODD}, {"even", X_EVEN}, {"divisibleby", X_DIVISIBLEBY}, {"defined", X_DEFINED},
    {"undefined", X_UNDEFINED}, {"filter", X_FILTER}, {"test", X_TEST}, {"none", X_NONE},
    {"boolean", X_BOOLEAN}, {"false", X_FALSE}, {"true", X_TRUE}, {"integer", X_INTEGER},
    {"float", X_FLOAT}, {"lower", X_LOWER}, {"upper", X_UPPER}, {"string", X_STRING},
    {"mapping", X_MAPPING}, {"number", X_NUMBER}, {"sequence", X_SEQUENCE},
    {"iterable", X_ITERABLE}, {"callable", X_CALLABLE}, {"sameas", X_SAMEAS},
    {"escaped", X_ESCAPED}, {"in", X_IN}, {"==", X_EQ}, {"eq", X_EQ}, {"equalto", X_EQ},
    {"!=", X_NE}, {"ne", X_NE}, {">", X_GT}, {"gt", X_GT}, {"greaterthan", X_GT}, {">=", X_GE},
    {"ge", X_GE}, {"<", X_LT}, {"lt", X_LT}, {"lessthan", X_LT}, {"<=", X_LE}, {"le", X_LE},
};
/* clang-format on */

/* jinja2 3.1's builtin filters (Hugging Face adds none but tojson, which jinja2 has). */
/* clang-format off */
static const char *const jinja_filters[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e",
    "escape", "filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent",
    "int", "join", "last", "length", "list", "lower", "items", "map", "min", "max", "pprint",
    "random", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select",
    "selectattr", "slice", "sort", "string", "striptags", "sum", "title", "trim", "truncate",
    "unique", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr", "tojson", NULL};
/* clang-format on */

int ja_filter_id(const char *name)
{
    for (size_t i = 0; i < sizeof(filter_names) / sizeof(filter_names[0]); i++)
        if (!strcmp(name, filter_names[i].name)) return filter_names[i].id;
    return -1;
}

int ja_test_id(const char *name)
{
    for (size_t i = 0; i < sizeof(test_names) / sizeof(test_names[0]); i++)
        if (!strcmp(name, test_names[i].name)) return test_names[i].id;
    return -1;
}

bool ja_jinja_has_filter(const char *name)
{
    for (const char *const *f = jinja_filters; *f; f++)
        if (!strcmp(*f, name)) return true;
    return false;
}

bool ja_jinja_has_test(const char *name)
{
    return ja_test_id(name) >= 0;
}

/* The name of filter id (for messages). */
static const char *filter_name(int id)
{
    for (size_t i = 0; i < sizeof(filter_names) / sizeof(filter_names[0]); i++)
        if (filter_names[i].id == id) return filter_names[i].name;
    return "?";
}

es_status jr_bind(jr *R, const char *what, const char *const *params, int np, int nreq,
                  const jv *argv, int argc, const char *const *kwn, const jv *kwv, int kwc, jv *out)
{
    if (argc > np)
        return jr_fail(R, "%s takes at most %d argument%s (%d given)", what, np, np == 1 ? "" : "s",
                       argc);
    for (int i = 0; i < np; i++)
        out[i] = i < argc ? argv[i] : jv_missing();
    for (int k = 0; k < kwc; k++) {
        int i = 0;
        while (i < np && strcmp(params[i], kwn[k]))
            i++;
        if (i == np) return jr_fail(R, "%s got an unexpected keyword argument '%s'", what, kwn[k]);
        if (out[i].k != JV_MISSING)
            return jr_fail(R, "%s got multiple values for argument '%s'", what, kwn[k]);
        out[i] = kwv[k];
    }
    for (int i = 0; i < nreq; i++)
        if (out[i].k == JV_MISSING)
            return jr_fail(R, "%s missing required argument '%s'", what, params[i]);
    return ES_OK;
}

/* ---- helpers ------------------------------------------------------------------------------------
 */
static es_status str_of(jr *R, jv x, const jstr **out)
{
    jv s;
    ES_TRY(jr_tostr_val(R, x, &s));
    *out = s.s;
    return ES_OK;
}

/* make_attrgetter: "a.b.0" looked up item by item (digit parts as integers). */
static es_status attr_get(jr *R, jv item, const jstr *attr, jv def, jv *out)
{
    size_t i = 0;
    do {
        size_t j = i;
        while (j < attr->len && attr->b[j] != '.')
            j++;
        bool digits = j > i;
        int64_t n = 0;
        for (size_t k = i; k < j && digits; k++) {
            digits = attr->b[k] >= '0' && attr->b[k] <= '9';
            if (n > (INT64_MAX - 9) / 10) return jr_fail(R, "attribute index too large");
            n = n * 10 + (attr->b[k] - '0');
        }
        jv key;
        if (digits)
            key = jv_int(n);
        else
            ES_TRY(jr_str(R, attr->b + i, j - i, &key));
        ES_TRY(jr_getitem(R, item, key, &item));
        if (def.k != JV_MISSING && def.k != JV_NONE && item.k == JV_UNDEF) item = def;
        i = j + 1;
    } while (i <= attr->len);
    *out = item;
    return ES_OK;
}

/* An empty list to fill and return as a generator (JL_GEN). */
static es_status gen_of(jr *R, jlist **out)
{
    return jr_list_new(R, 0, out);
}

/* select / reject / selectattr / rejectattr */
static es_status select_(jr *R, jv value, const jv *argv, int argc, const char *const *kwn,
                         const jv *kwv, int kwc, bool attr, bool keep, jv *out)
{
    jlist *res;
    ES_TRY(gen_of(R, &res));
    *out = jv_list(res, JL_GEN);
    if (!ja_truthy(value)) return ES_OK; /* jinja2: `if value:` */
    int off = 0;
    const jstr *aname = NULL;
    if (attr) {
        if (argc < 1) return jr_fail(R, "Missing parameter for attribute name");
        ES_TRY(str_of(R, argv[0], &aname));
        off = 1;
    }
    int tid = -1;
    if (argc > off) {
        if (argv[off].k != JV_STR) return jr_fail(R, "the test name must be a string");
        if ((tid = ja_test_id(argv[off].s->b)) < 0)
            return jr_fail(R,
                           ja_jinja_has_test(argv[off].s->b) ? "test '%s' is not supported"
                                                             : "no test named '%s'",
                           argv[off].s->b);
        off++;
    }
    jlist *items;
    ES_TRY(jr_iter(R, value, &items));
    for (size_t i = 0; i < items->n; i++) {
        jv x = items->v[i];
        bool ok;
        if (aname) ES_TRY(attr_get(R, items->v[i], aname, jv_missing(), &x));
        if (tid >= 0)
            ES_TRY(jr_test(R, tid, x, argv + off, argc - off, kwn, kwv, kwc, &ok));
        else
            ok = ja_truthy(x);
        if (ok == keep) ES_TRY(jr_list_push(R, res, items->v[i]));
        ES_TRY(jr_charge(R, 1));
    }
    return ES_OK;
}

/* map(attribute=..., default=...) or map('filter', args...), as jinja2's prepare_map. */
static es_status map_(jr *R, jv value, const jv *argv, int argc, const char *const *kwn,
                      const jv *kwv, int kwc, jv *out)
{
    jlist *res;
    ES_TRY(gen_of(R, &res));
    *out = jv_list(res, JL_GEN);
    if (!ja_truthy(value)) return ES_OK;
    const jstr *aname = NULL;
    jv def = jv_missing();
    int fid = -1;
    if (!argc && kwc) {
        for (int k = 0; k < kwc; k++) {
            if (!strcmp(kwn[k], "attribute"))
                ES_TRY(str_of(R, kwv[k], &aname));
            else if (!strcmp(kwn[k], "default"))
                def = kwv[k];
            else
                return jr_fail(R, "Unexpected keyword argument '%s'", kwn[k]);
        }
        if (!aname) return jr_fail(R, "map requires a filter argument");
    } else {
        if (argc < 1) return jr_fail(R, "map requires a filter argument");
        if (argv[0].k != JV_STR) return jr_fail(R, "the filter name must be a string");
        if ((fid = ja_filter_id(argv[0].s->b)) < 0)
            return jr_fail(R,
                           ja_jinja_has_filter(argv[0].s->b) ? "filter '%s' is not supported"
                                                             : "no filter named '%s'",
                           argv[0].s->b);
    }
    jlist *items;
    ES_TRY(jr_iter(R, value, &items));
    for (size_t i = 0; i < items->n; i++) {
        jv x;
        if (aname)
            ES_TRY(attr_get(R, items->v[i], aname, def, &x));
        else
            ES_TRY(jr_filter(R, fid, items->v[i], argv + 1, argc - 1, kwn, kwv, kwc, &x));
        ES_TRY(jr_list_push(R, res, x));
        ES_TRY(jr_charge(R, 1));
    }
    return ES_OK;
}

/* Python int() of a string: optional sign, digits with single underscores, spaces around. */
static bool parse_int(const jstr *s, int64_t *out)
{
    size_t i = 0, n = s->len;
    while (i < n && (s->b[i] == ' ' || (s->b[i] >= 9 && s->b[i] <= 13)))
        i++;
    while (n > i && (s->b[n - 1] == ' ' || (s->b[n - 1] >= 9 && s->b[n - 1] <= 13)))
        n--;
    bool neg = i < n && s->b[i] == '-';
    if (i < n && (s->b[i] == '-' || s->b[i] == '+')) i++;
    if (i >= n || s->b[i] < '0' || s->b[i] > '9') return false;
    uint64_t v = 0;
    for (; i < n; i++) {
        char c = s->b[i];
        if (c == '_' && i + 1 < n && s->b[i + 1] >= '0' && s->b[i + 1] <= '9' && i > 0) continue;
        if (c < '0' || c > '9' || v > (UINT64_MAX - 9) / 10) return false;
        v = v * 10 + (uint64_t)(c - '0');
    }
    if (v > (uint64_t)INT64_MAX + neg) return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

/* Python float() of a string (decimal, exponent, inf, nan; spaces around). */
static bool parse_float(const jstr *s, double *out)
{
    char *end;
    size_t i = 0;
    while (i < s->len && (s->b[i] == ' ' || (s->b[i] >= 9 && s->b[i] <= 13)))
        i++;
    if (i == s->len || memchr(s->b, 'x', s->len) || memchr(s->b, 'X', s->len))
        return false; /* strtod would read hex floats; Python does not */
    *out = ja_strtod(s->b + i, &end);
    if (end == s->b + i) return false;
    while (*end == ' ' || (*end >= 9 && *end <= 13))
        end++;
    return end == s->b + s->len;
}

/* Hugging Face's tojson: a[] are ensure_ascii, indent (an int or a string), separators (a
 * pair) and sort_keys, JV_MISSING when not given. */
static es_status tojson(jr *R, jv x, const jv *a, jv *out)
{
    ja_json_opts o = {.ensure_ascii = a[0].k != JV_MISSING && ja_truthy(a[0]),
                      .sort_keys = a[3].k != JV_MISSING && ja_truthy(a[3])};
    char sp[64];
    if (a[1].k == JV_INT || a[1].k == JV_BOOL) {
        int64_t n = a[1].i < 0 ? 0 : a[1].i;
        if (n > (int64_t)sizeof(sp) - 1) return jr_fail(R, "tojson: indent too large");
        memset(sp, ' ', (size_t)n);
        o.indent = sp, o.indent_len = (size_t)n;
    } else if (a[1].k == JV_STR) {
        o.indent = a[1].s->b, o.indent_len = a[1].s->len;
    } else if (a[1].k != JV_MISSING && a[1].k != JV_NONE) {
        return jr_fail(R, "tojson: indent must be an integer or a string");
    }
    if (a[2].k == JV_LIST && (a[2].sub == JL_LIST || a[2].sub == JL_TUPLE) && a[2].l->n == 2 &&
        a[2].l->v[0].k == JV_STR && a[2].l->v[1].k == JV_STR) {
        o.item_sep = a[2].l->v[0].s->b, o.item_sep_len = a[2].l->v[0].s->len;
        o.key_sep = a[2].l->v[1].s->b, o.key_sep_len = a[2].l->v[1].s->len;
    } else if (a[2].k != JV_MISSING && a[2].k != JV_NONE) {
        return jr_fail(R, "tojson: separators must be a pair of strings");
    }
    jbuf b = {0};
    es_status st = jr_tojson(R, x, &o, &b);
    if (st == ES_OK) st = jr_str(R, b.p ? b.p : "", b.n, out);
    ja_buf_free(&b);
    return st;
}

/* first / last: next(iter(x)) / next(reversed(x)); Undefined when empty; a generator has no
 * last (not reversible). */
static es_status first_last(jr *R, jv x, bool last, jv *out)
{
    if (last && x.k == JV_LIST && x.sub == JL_GEN)
        return jr_fail(R, "'generator' object is not reversible");
    if (x.k == JV_STR) {
        if (!x.s->len) goto empty;
        size_t b = 0, e = x.s->len;
        if (last) {
            b = e - 1;
            while (b && ((uint8_t)x.s->b[b] & 0xC0) == 0x80)
                b--;
        } else {
            e = 0;
            ja_utf8_next(x.s->b, x.s->len, &e);
        }
        return jr_str(R, x.s->b + b, e - b, out);
    }
    jlist *items;
    ES_TRY(jr_iter(R, x, &items));
    if (!items->n) goto empty;
    *out = items->v[last ? items->n - 1 : 0];
    return ES_OK;
empty:
    *out = jr_undef_hint(R, last ? "No last item, sequence was empty."
                                 : "No first item, sequence was empty.");
    return ES_OK;
}

es_status jr_filter(jr *R, int id, jv x, const jv *argv, int argc, const char *const *kwn,
                    const jv *kwv, int kwc, jv *out)
{
    static const char *const p_default[] = {"default_value", "boolean"};
    static const char *const p_join[] = {"d", "attribute"};
    static const char *const p_replace[] = {"old", "new", "count"};
    static const char *const p_trim[] = {"chars"};
    static const char *const p_int[] = {"default", "base"};
    static const char *const p_tojson[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
    char what[48];
    snprintf(what, sizeof(what), "filter '%s'", filter_name(id));
    jv a[4];
    const jstr *s, *t, *u;
    jlist *items, *l;
    ES_TRY(jr_charge(R, 1));
    switch (id) {
    case F_MAP:
        return map_(R, x, argv, argc, kwn, kwv, kwc, out);
    case F_SELECT:
        return select_(R, x, argv, argc, kwn, kwv, kwc, false, true, out);
    case F_REJECT:
        return select_(R, x, argv, argc, kwn, kwv, kwc, false, false, out);
    case F_SELECTATTR:
        return select_(R, x, argv, argc, kwn, kwv, kwc, true, true, out);
    case F_REJECTATTR:
        return select_(R, x, argv, argc, kwn, kwv, kwc, true, false, out);
    case F_DEFAULT:
        ES_TRY(jr_bind(R, what, p_default, 2, 0, argv, argc, kwn, kwv, kwc, a));
        if (x.k == JV_UNDEF || (a[1].k != JV_MISSING && ja_truthy(a[1]) && !ja_truthy(x))) {
            if (a[0].k == JV_MISSING) return jr_str(R, "", 0, out);
            *out = a[0];
        } else {
            *out = x;
        }
        return ES_OK;
    case F_JOIN:
        ES_TRY(jr_bind(R, what, p_join, 2, 0, argv, argc, kwn, kwv, kwc, a));
        ES_TRY(jr_iter(R, x, &items));
        ES_TRY(jr_charge(R, (int64_t)items->n));
        if (a[0].k == JV_MISSING) ES_TRY(jr_str(R, "", 0, &a[0]));
        ES_TRY(str_of(R, a[0], &s));
        if (a[1].k != JV_MISSING && a[1].k != JV_NONE)
            ES_TRY(str_of(R, a[1], &t));
        else
            t = NULL;
        {
            jbuf b = {0};
            es_status st = ES_OK;
            for (size_t i = 0; i < items->n && st == ES_OK; i++) {
                jv v = items->v[i];
                if (t) st = attr_get(R, v, t, jv_missing(), &v);
                if (st == ES_OK && i) st = jr_buf_put(R, &b, s->b, s->len);
                if (st == ES_OK) st = jr_tostr(R, v, &b);
            }
            if (st == ES_OK) st = jr_str(R, b.p ? b.p : "", b.n, out);
            ja_buf_free(&b);
            return st;
        }
    case F_REPLACE:
        ES_TRY(jr_bind(R, what, p_replace, 3, 2, argv, argc, kwn, kwv, kwc, a));
        ES_TRY(str_of(R, x, &s));
        ES_TRY(str_of(R, a[0], &t));
        ES_TRY(str_of(R, a[1], &u));
        if (a[2].k != JV_MISSING && a[2].k != JV_NONE && a[2].k != JV_INT && a[2].k != JV_BOOL)
            return jr_fail(R, "replace: count must be an integer");
        return jr_replace(R, s, t, u, (a[2].k == JV_INT || a[2].k == JV_BOOL) ? a[2].i : -1, out);
    case F_TRIM:
        ES_TRY(jr_bind(R, what, p_trim, 1, 0, argv, argc, kwn, kwv, kwc, a));
        ES_TRY(str_of(R, x, &s));
        if (a[0].k != JV_MISSING && a[0].k != JV_NONE && a[0].k != JV_STR)
            return jr_fail(R, "strip arg must be None or str");
        return jr_strip(R, s, a[0].k == JV_STR ? a[0].s : NULL, 3, out);
    case F_INT:
    case F_FLOAT: {
        ES_TRY(jr_bind(R, what, p_int, id == F_INT ? 2 : 1, 0, argv, argc, kwn, kwv, kwc, a));
        if (id == F_INT && a[1].k != JV_MISSING && !(a[1].k == JV_INT && a[1].i == 10))
            return jr_fail(R, "the base argument of int is not supported");
        double f = 0;
        int64_t i = 0;
        bool ok = true;
        if (x.k == JV_UNDEF) return jr_undef_fail(R, x); /* Undefined's __int__ raises */
        if (x.k == JV_INT || x.k == JV_BOOL)
            i = x.i, f = (double)x.i;
        else if (x.k == JV_FLOAT)
            f = x.f, ok = id == F_FLOAT || (!isnan(f) && fabs(f) < 9.2e18);
        else if (x.k == JV_STR) {
            if (memchr(x.s->b, '_', x.s->len) || memchr(x.s->b, '(', x.s->len))
                return jr_fail(R, "%s of this string is not supported", what);
            if (id == F_INT && parse_int(x.s, &i))
                f = (double)i, x = jv_int(i);
            else if ((ok = parse_float(x.s, &f)) && id == F_INT)
                ok = !isnan(f) && fabs(f) < 9.2e18;
        } else
            ok = false;
        if (!ok)
            *out = a[0].k != JV_MISSING ? a[0] : id == F_INT ? jv_int(0) : jv_float(0);
        else if (id == F_FLOAT)
            *out = jv_float(x.k == JV_INT || x.k == JV_BOOL ? (double)x.i : f);
        else
            *out = jv_int(x.k == JV_INT || x.k == JV_BOOL ? x.i : (int64_t)f);
        return ES_OK;
    }
    case F_TOJSON:
        ES_TRY(jr_bind(R, what, p_tojson, 4, 0, argv, argc, kwn, kwv, kwc, a));
        return tojson(R, x, a, out);
    }
    /* the rest take no argument */
    ES_TRY(jr_bind(R, what, NULL, 0, 0, argv, argc, kwn, kwv, kwc, a));
    switch (id) {
    case F_ABS:
        if (x.k == JV_FLOAT)
            *out = jv_float(fabs(x.f));
        else if (x.k == JV_INT || x.k == JV_BOOL) {
            if (x.i == INT64_MIN) return jr_fail(R, "integer overflow (more than 64 bits)");
            *out = jv_int(x.i < 0 ? -x.i : x.i);
        } else if (x.k == JV_UNDEF)
            return jr_undef_fail(R, x);
        else
            return jr_fail(R, "bad operand type for abs(): '%s'", ja_type_name(x));
        return ES_OK;
    case F_COUNT:
    case F_LENGTH: {
        int64_t n;
        ES_TRY(jr_len(R, x, &n));
        *out = jv_int(n);
        return ES_OK;
    }
    case F_FIRST:
    case F_LAST:
        return first_last(R, x, id == F_LAST, out);
    case F_ITEMS:
        ES_TRY(gen_of(R, &l));
        *out = jv_list(l, JL_GEN);
        if (x.k == JV_UNDEF) return ES_OK;
        if (x.k != JV_DICT) return jr_fail(R, "Can only get item pairs from a mapping.");
        for (size_t i = 0; i < x.d->n; i++) {
            jlist *pair;
            ES_TRY(jr_list_new(R, 2, &pair));
            pair->v[0] = x.d->k[i], pair->v[1] = x.d->v[i], pair->n = 2;
            ES_TRY(jr_list_push(R, l, jv_list(pair, JL_TUPLE)));
        }
        return ES_OK;
    case F_LIST:
    case F_REVERSE:
        if (id == F_REVERSE && x.k == JV_STR) {
            jbuf b = {0};
            es_status st = ES_OK;
            for (size_t e = x.s->len; e > 0 && st == ES_OK;) {
                size_t k = e - 1;
                while (k && ((uint8_t)x.s->b[k] & 0xC0) == 0x80)
                    k--;
                st = jr_buf_put(R, &b, x.s->b + k, e - k);
                e = k;
            }
            if (st == ES_OK) st = jr_str(R, b.p ? b.p : "", b.n, out);
            ja_buf_free(&b);
            return st;
        }
        ES_TRY(jr_iter(R, x, &items));
        ES_TRY(jr_charge(R, (int64_t)items->n));
        ES_TRY(jr_list_new(R, items->n, &l));
        for (size_t i = 0; i < items->n; i++)
            l->v[i] = items->v[id == F_REVERSE ? items->n - 1 - i : i];
        l->n = items->n;
        /* reversed() of a sequence is an iterator; of a generator, jinja2 falls back to a list */
        *out =
            jv_list(l, id == F_REVERSE && !(x.k == JV_LIST && x.sub == JL_GEN) ? JL_GEN : JL_LIST);
        return ES_OK;
    case F_STRING:
        return jr_tostr_val(R, x, out);
    case F_LOWER:
    case F_UPPER:
    case F_CAPITALIZE:
    case F_TITLE:
        ES_TRY(str_of(R, x, &s));
        return jr_case(R, s,
                       id == F_LOWER   ? 'L'
                       : id == F_UPPER ? 'U'
                       : id == F_TITLE ? 'J'
                                       : 'C',
                       out);
    }
    return jr_fail(R, "internal error: filter %d", id);
}

/* ---- tests --------------------------------------------------------------------------------------
 */
static es_status modulo(jr *R, jv x, jv m, jv *out)
{
    if (x.k == JV_UNDEF) return jr_undef_fail(R, x);
    if (!jv_is_num(x) || !jv_is_num(m))
        return jr_fail(R, "unsupported operand type(s) for %%: '%s' and '%s'", ja_type_name(x),
                       ja_type_name(m));
    return jr_binop(R, OP_MOD, x, m, out);
}

es_status jr_test(jr *R, int id, jv x, const jv *argv, int argc, const char *const *kwn,
                  const jv *kwv, int kwc, bool *out)
{
    static const char *const p_num[] = {"num"};
    static const char *const p_other[] = {"other"};
    static const char *const p_seq[] = {"seq"};
    jv a[1], r;
    char what[48];
    snprintf(what, sizeof(what), "test");
    ES_TRY(jr_charge(R, 1));
    switch (id) {
    case X_DIVISIBLEBY:
        ES_TRY(jr_bind(R, what, p_num, 1, 1, argv, argc, kwn, kwv, kwc, a));
        ES_TRY(modulo(R, x, a[0], &r));
        ES_TRY(jr_eq(R, r, jv_int(0), out));
        return ES_OK;
    case X_SAMEAS:
        ES_TRY(jr_bind(R, what, p_other, 1, 1, argv, argc, kwn, kwv, kwc, a));
        if ((x.k == JV_NONE || x.k == JV_BOOL) && (a[0].k == JV_NONE || a[0].k == JV_BOOL)) {
            *out = x.k == a[0].k && x.i == a[0].i;
            return ES_OK;
        }
        if (x.k == a[0].k && (x.k == JV_LIST || x.k == JV_DICT || x.k == JV_NS)) {
            *out = x.l == a[0].l;
            return ES_OK;
        }
        if (x.k != a[0].k || x.k == JV_UNDEF) {
            *out = false;
            return ES_OK;
        }
        return jr_fail(R, "'sameas' on %s values is not supported", ja_type_name(x));
    case X_IN:
        ES_TRY(jr_bind(R, what, p_seq, 1, 1, argv, argc, kwn, kwv, kwc, a));
        return jr_contains(R, a[0], x, out);
    case X_EQ:
    case X_NE:
    case X_GT:
    case X_GE:
    case X_LT:
    case X_LE:
        ES_TRY(jr_bind(R, what, p_other, 1, 1, argv, argc, kwn, kwv, kwc, a));
        if (id == X_EQ || id == X_NE) {
            ES_TRY(jr_eq(R, x, a[0], out));
            *out ^= id == X_NE;
        } else if (id == X_LT || id == X_GE) {
            ES_TRY(jr_lt(R, x, a[0], out));
            *out ^= id == X_GE;
        } else {
            ES_TRY(jr_lt(R, a[0], x, out));
            *out ^= id == X_LE;
        }
        return ES_OK;
    }
    ES_TRY(jr_bind(R, what, NULL, 0, 0, argv, argc, kwn, kwv, kwc, a));
    switch (id) {
    case X_ODD:
    case X_EVEN:
        ES_TRY(modulo(R, x, jv_int(2), &r));
        ES_TRY(jr_eq(R, r, jv_int(id == X_ODD), out));
        return ES_OK;
    case X_DEFINED:
        *out = x.k != JV_UNDEF;
        return ES_OK;
    case X_UNDEFINED:
        *out = x.k == JV_UNDEF;
        return ES_OK;
    case X_FILTER:
        *out = x.k == JV_STR && ja_jinja_has_filter(x.s->b);
        return ES_OK;
    case X_TEST:
        *out = x.k == JV_STR && ja_jinja_has_test(x.s->b);
        return ES_OK;
    case X_NONE:
        *out = x.k == JV_NONE;
        return ES_OK;
    case X_BOOLEAN:
        *out = x.k == JV_BOOL;
        return ES_OK;
    case X_FALSE:
        *out = x.k == JV_BOOL && !x.i;
        return ES_OK;
    case X_TRUE:
        *out = x.k == JV_BOOL && x.i;
        return ES_OK;
    case X_INTEGER:
        *out = x.k == JV_INT;
        return ES_OK;
    case X_FLOAT:
        *out = x.k == JV_FLOAT;
        return ES_OK;
    case X_NUMBER:
        *out = jv_is_num(x);
        return ES_OK;
    case X_STRING:
        *out = x.k == JV_STR;
        return ES_OK;
    case X_MAPPING:
        *out = x.k == JV_DICT;
        return ES_OK;
    case X_ITERABLE:
        *out =
            x.k == JV_STR || x.k == JV_LIST || x.k == JV_DICT || x.k == JV_UNDEF || x.k == JV_LOOP;
        return ES_OK;
    case X_SEQUENCE:
        *out = x.k == JV_STR || x.k == JV_DICT || x.k == JV_UNDEF ||
               (x.k == JV_LIST && x.sub != JL_GEN && x.sub != JL_VIEW);
        return ES_OK;
    case X_CALLABLE:
        *out = x.k == JV_FUNC || x.k == JV_UNDEF || x.k == JV_LOOP || x.k == JV_MACRO;
        return ES_OK;
    case X_ESCAPED:
        *out = false;
        return ES_OK; /* no Markup values here */
    case X_LOWER:
    case X_UPPER: {
        const jstr *s;
        ES_TRY(str_of(R, x, &s));
        bool any = false, up = false, lo = false;
        for (size_t i = 0; i < s->len;) {
            uint32_t c = ja_utf8_next(s->b, s->len, &i);
            int u, l;
            bool known;
            if (ja_is_cased(c, &u, &l, &known)) any = true;
            if (!known) return jr_fail(R, "case of U+%04X is not supported", (unsigned)c);
            up |= u, lo |= l;
        }
        *out = any && (id == X_LOWER ? !up : !lo);
        return ES_OK;
    }
    }
    return jr_fail(R, "internal error: test %d", id);
}
