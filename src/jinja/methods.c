/*
 * What templates call: Python's str and dict methods, the globals of Hugging Face's chat
 * environment (range, namespace, dict, raise_exception, strftime_now) and the loop object.
 *
 * DESIGN: obj.name on a str, dict or list resolves to a bound method (a jfunc holding the
 * object) when this file implements it; a real Python method it does not implement is an
 * error naming it (strict), and any other name is "no such attribute" for the caller to turn
 * into a key lookup or Undefined, as jinja2's sandbox does. Mutating methods of lists and dicts
 * are refused, as ImmutableSandboxedEnvironment refuses them. Methods follow Python 3.11 to
 * the letter where implemented (split's whitespace rules and maxsplit, replace with an empty
 * pattern, find returning code-point indexes); optional arguments they do not implement (the
 * start/end of startswith and find) are refused rather than ignored.
 */
#include "jinja/jinja_int.h"

#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* clang-format off */
static const struct { const char *name; int id; } str_methods[] = {
    {"startswith", JM_STARTSWITH}, {"endswith", JM_ENDSWITH}, {"strip", JM_STRIP},
    {"lstrip", JM_LSTRIP}, {"rstrip", JM_RSTRIP}, {"split", JM_SPLIT}, {"rsplit", JM_RSPLIT},
    {"replace", JM_REPLACE}, {"upper", JM_UPPER}, {"lower", JM_LOWER}, {"title", JM_TITLE},
    {"capitalize", JM_CAPITALIZE}, {"find", JM_FIND}, {"rfind", JM_RFIND}, {"count", JM_COUNT},
    {"join", JM_JOIN}, {"removeprefix", JM_REMOVEPREFIX}, {"removesuffix", JM_REMOVESUFFIX},
    {"isdigit", JM_ISDIGIT}, {"isspace", JM_ISSPACE}, {"islower", JM_ISLOWER},
    {"isupper", JM_ISUPPER},
}, dict_methods[] = {
    {"get", JM_GET}, {"items", JM_ITEMS}, {"keys", JM_KEYS}, {"values", JM_VALUES},
}, globals[] = {
    {"range", JM_RANGE}, {"namespace", JM_NAMESPACE}, {"dict", JM_DICT},
    {"raise_exception", JM_RAISE}, {"strftime_now", JM_STRFTIME},
};
/* clang-format on */

/* Python 3.11's attributes of str, dict and list that are not implemented here. */
/* clang-format off */
static const char *const py_str[] = {
    "casefold", "center", "encode", "expandtabs", "format", "format_map", "index", "isalnum",
    "isalpha", "isascii", "isdecimal", "isidentifier", "isnumeric", "isprintable", "istitle",
    "ljust", "maketrans", "partition", "rindex", "rjust", "rpartition", "splitlines",
    "swapcase", "translate", "zfill", NULL};
static const char *const py_dict[] = {"clear", "copy", "fromkeys", "pop", "popitem",
                                      "setdefault", "update", NULL};
static const char *const py_list[] = {"append", "clear", "copy", "count", "extend", "index",
                                      "insert", "pop", "remove", "reverse", "sort", NULL};
/* clang-format on */

static bool in_list(const char *const *l, const char *name)
{
    for (; *l; l++)
        if (!strcmp(*l, name)) return true;
    return false;
}

/* A function value: method id bound to self. */
static es_status bound(jr *R, int id, jv self, jv *out)
{
    jfunc *f = ja_alloc(&R->a, sizeof(*f));
    if (!f) return jr_oom(R);
    f->id = id, f->self = self;
    out->k = JV_FUNC, out->sub = 0, out->fn = f;
    return ES_OK;
}

es_status jr_method(jr *R, jv obj, const char *name, jv *out, bool *found)
{
    *found = false;
    if (name[0] == '_' && name[1] == '_')
        return jr_fail(R, "access to attribute '%s' of '%s' object is unsafe", name,
                       ja_type_name(obj));
    if (obj.k == JV_STR) {
        for (size_t i = 0; i < sizeof(str_methods) / sizeof(str_methods[0]); i++)
            if (!strcmp(name, str_methods[i].name)) {
                *found = true;
                return bound(R, str_methods[i].id, obj, out);
            }
        if (in_list(py_str, name)) return jr_fail(R, "string method '%s' is not supported", name);
    } else if (obj.k == JV_DICT) {
        for (size_t i = 0; i < sizeof(dict_methods) / sizeof(dict_methods[0]); i++)
            if (!strcmp(name, dict_methods[i].name)) {
                *found = true;
                return bound(R, dict_methods[i].id, obj, out);
            }
        if (in_list(py_dict, name))
            return jr_fail(R, "dict method '%s' is not supported (the sandbox is immutable)", name);
    } else if (obj.k == JV_LIST) {
        if (in_list(py_list, name))
            return jr_fail(R, "list method '%s' is not supported (the sandbox is immutable)", name);
    }
    return ES_OK;
}

jv ja_global(const char *name)
{
    static const jfunc fns[] = {{JM_RANGE, {.k = JV_MISSING}},
                                {JM_NAMESPACE, {.k = JV_MISSING}},
                                {JM_DICT, {.k = JV_MISSING}},
                                {JM_RAISE, {.k = JV_MISSING}},
                                {JM_STRFTIME, {.k = JV_MISSING}}};
    _Static_assert(sizeof(fns) / sizeof(fns[0]) == sizeof(globals) / sizeof(globals[0]),
                   "one function per global");
    for (size_t i = 0; i < sizeof(globals) / sizeof(globals[0]); i++)
        if (!strcmp(name, globals[i].name)) {
            jv r = {.k = JV_FUNC, .fn = &fns[i]};
            return r;
        }
    return jv_undef();
}

bool ja_jinja_has_global(const char *name)
{
    static const char *const g[] = {"lipsum", "cycler", "joiner", NULL};
    return in_list(g, name);
}

const char *ja_func_name(const jfunc *f)
{
    for (size_t i = 0; i < sizeof(globals) / sizeof(globals[0]); i++)
        if (globals[i].id == f->id) return globals[i].name;
    for (size_t i = 0; i < sizeof(str_methods) / sizeof(str_methods[0]); i++)
        if (str_methods[i].id == f->id) return str_methods[i].name;
    for (size_t i = 0; i < sizeof(dict_methods) / sizeof(dict_methods[0]); i++)
        if (dict_methods[i].id == f->id) return dict_methods[i].name;
    return f->id == JM_CYCLE ? "cycle" : f->id == JM_CHANGED ? "changed" : "function";
}

bool ja_func_has_attr(const jfunc *f, const char *name)
{
    /* a class has public attributes (dict.fromkeys, type.mro; dict['x'] is even a generic
     * alias): all refused. Functions and bound methods have only dunder attributes. */
    (void)name;
    return f->id == JM_NAMESPACE || f->id == JM_DICT;
}

/* ---- the loop object --------------------------------------------------------------------------
 */
es_status jr_loop_attr(jr *R, jv loop, const char *name, jv *out)
{
    jloop *l = loop.lp;
    int64_t i = l->index0, n;
    jv next;
    bool got;
    if (!strcmp(name, "index"))
        *out = jv_int(i + 1);
    else if (!strcmp(name, "index0"))
        *out = jv_int(i);
    else if (!strcmp(name, "first"))
        *out = jv_bool(i == 0);
    else if (!strcmp(name, "depth"))
        *out = jv_int(1);
    else if (!strcmp(name, "depth0"))
        *out = jv_int(0);
    else if (!strcmp(name, "length") || !strcmp(name, "revindex") || !strcmp(name, "revindex0")) {
        ES_TRY(jr_loop_length(R, l, &n));
        *out = jv_int(name[0] == 'l' ? n : name[8] ? n - i - 1 : n - i);
    } else if (!strcmp(name, "last") || !strcmp(name, "nextitem")) {
        ES_TRY(jr_loop_peek(R, l, &next, &got));
        if (name[0] == 'l')
            *out = jv_bool(!got);
        else
            *out = got ? next : jr_undef_hint(R, "there is no next item");
    } else if (!strcmp(name, "previtem"))
        *out = l->prev.k != JV_MISSING ? l->prev : jr_undef_hint(R, "there is no previous item");
    else if (!strcmp(name, "cycle"))
        return bound(R, JM_CYCLE, loop, out);
    else if (!strcmp(name, "changed"))
        return bound(R, JM_CHANGED, loop, out);
    else
        *out = jr_undef(R, name, loop);
    return ES_OK;
}

/* ---- str methods ------------------------------------------------------------------------------
 */
static es_status want_str(jr *R, const char *what, jv x)
{
    if (x.k == JV_STR) return ES_OK;
    if (x.k == JV_UNDEF) return jr_undef_fail(R, x);
    return jr_fail(R, "%s: expected a string, not %s", what, ja_type_name(x));
}

/* The code-point index of byte offset byte (what find returns). */
static int64_t cp_index(const jstr *s, size_t byte)
{
    return (int64_t)ja_cp_count(s->b, byte);
}

/* Appends the string p[0..n) to l. */
static es_status push_str(jr *R, jlist *l, const char *p, size_t n)
{
    jv v;
    ES_TRY(jr_str(R, p, n, &v));
    return jr_list_push(R, l, v);
}

/* From i, the first offset whose code point is (want_ws false) or is not (true) whitespace. */
static size_t ws_fwd(const jstr *s, size_t i, bool want_ws)
{
    while (i < s->len) {
        size_t j = i;
        if (ja_py_isspace(ja_utf8_next(s->b, s->len, &j)) != want_ws) break;
        i = j;
    }
    return i;
}

/* The last occurrence of p[0..m) ending at or before s[e] (NULL if none), searching backwards.
 * Naive, so its cost (bytes compared) is charged: a hostile pair of strings ends in the work
 * limit, not in a hang. */
static es_status find_last(jr *R, const char *s, size_t e, const char *p, size_t m,
                           const char **out)
{
    int64_t cost = 0;
    *out = NULL;
    for (size_t k = e; k >= m && !*out; k--) {
        size_t j = 0;
        while (j < m && s[k - m + j] == p[j]) j++;
        cost += (int64_t)j + 1;
        if (j == m) *out = s + k - m;
        if (cost > 1 << 20) {
            ES_TRY(jr_charge(R, cost / 16));
            cost = 0;
        }
        if (!k) break;
    }
    return jr_charge(R, cost / 16);
}

/* str.split / str.rsplit (right = rsplit); sep NULL splits on whitespace runs. */
static es_status split(jr *R, const jstr *s, const jstr *sep, int64_t max, bool right, jv *out)
{
    jlist *l;
    ES_TRY(jr_list_new(R, 0, &l));
    ES_TRY(jr_charge(R, (int64_t)s->len / 16));
    if (max < 0) max = INT64_MAX;
    if (sep && !sep->len) return jr_fail(R, "empty separator");
    if (!right) {
        size_t i = 0;
        if (!sep) {
            for (; max-- > 0;) {
                i = ws_fwd(s, i, true);
                if (i == s->len) break;
                size_t j = ws_fwd(s, i, false);
                ES_TRY(push_str(R, l, s->b + i, j - i));
                i = j;
            }
            if (i < s->len && (i = ws_fwd(s, i, true)) < s->len)
                ES_TRY(push_str(R, l, s->b + i, s->len - i));
        } else {
            for (; max-- > 0;) {
                const char *p = memmem(s->b + i, s->len - i, sep->b, sep->len);
                if (!p) break;
                ES_TRY(push_str(R, l, s->b + i, (size_t)(p - s->b) - i));
                i = (size_t)(p - s->b) + sep->len;
            }
            ES_TRY(push_str(R, l, s->b + i, s->len - i));
        }
    } else {               /* rsplit: collect from the right, then reverse */
        size_t e = s->len; /* the unsplit part is s[0..e) */
        if (!sep) {
            for (; max-- > 0;) {
                size_t k = e;
                while (k > 0) { /* skip whitespace backwards */
                    size_t b = k - 1;
                    while (b && ((uint8_t)s->b[b] & 0xC0) == 0x80)
                        b--;
                    size_t t = b;
                    if (!ja_py_isspace(ja_utf8_next(s->b, k, &t))) break;
                    k = b;
                }
                if (!k) {
                    e = 0;
                    break;
                }
                size_t j = k;
                while (j > 0) {
                    size_t b = j - 1;
                    while (b && ((uint8_t)s->b[b] & 0xC0) == 0x80)
                        b--;
                    size_t t = b;
                    if (ja_py_isspace(ja_utf8_next(s->b, j, &t))) break;
                    j = b;
                }
                ES_TRY(push_str(R, l, s->b + j, k - j));
                e = j;
            }
            size_t k = e;
            while (k > 0) {
                size_t b = k - 1;
                while (b && ((uint8_t)s->b[b] & 0xC0) == 0x80)
                    b--;
                size_t t = b;
                if (!ja_py_isspace(ja_utf8_next(s->b, k, &t))) break;
                k = b;
            }
            if (k) ES_TRY(push_str(R, l, s->b, k));
        } else {
            for (; max-- > 0;) {
                const char *p;
                ES_TRY(find_last(R, s->b, e, sep->b, sep->len, &p));
                if (!p) break;
                size_t at = (size_t)(p - s->b);
                ES_TRY(push_str(R, l, s->b + at + sep->len, e - at - sep->len));
                e = at;
            }
            ES_TRY(push_str(R, l, s->b, e));
        }
        for (size_t i = 0; i < l->n / 2; i++) {
            jv t = l->v[i];
            l->v[i] = l->v[l->n - 1 - i], l->v[l->n - 1 - i] = t;
        }
    }
    *out = jv_list(l, JL_LIST);
    return ES_OK;
}

es_status jr_replace(jr *R, const jstr *s, const jstr *old, const jstr *new_, int64_t count,
                     jv *out)
{
    if (count < 0) count = INT64_MAX;
    ES_TRY(jr_charge(R, (int64_t)s->len / 16));
    jbuf b = {0};
    es_status st = ES_OK;
    size_t i = 0;
    if (!old->len) {
        while (st == ES_OK && count-- > 0) {
            if ((st = jr_charge(R, 2 + (int64_t)new_->len / 16)) != ES_OK ||
                (st = jr_buf_put(R, &b, new_->b, new_->len)) != ES_OK || i == s->len)
                break;
            size_t j = i;
            ja_utf8_next(s->b, s->len, &j);
            st = jr_buf_put(R, &b, s->b + i, j - i);
            i = j;
        }
    } else {
        while (st == ES_OK && count-- > 0) {
            const char *p = memmem(s->b + i, s->len - i, old->b, old->len);
            if (!p) break;
            /* two appends an occurrence */
            if ((st = jr_charge(R, 2 + (int64_t)new_->len / 16)) != ES_OK) break;
            size_t at = (size_t)(p - s->b);
            if ((st = jr_buf_put(R, &b, s->b + i, at - i)) == ES_OK)
                st = jr_buf_put(R, &b, new_->b, new_->len);
            i = at + old->len;
        }
    }
    if (st == ES_OK && i < s->len) st = jr_buf_put(R, &b, s->b + i, s->len - i);
    if (st == ES_OK) st = jr_str(R, b.p ? b.p : "", b.n, out);
    ja_buf_free(&b);
    return st;
}

/* startswith / endswith of one string or a tuple of them. */
static es_status affix(jr *R, const jstr *s, jv arg, bool end, bool *out)
{
    *out = false;
    if (arg.k == JV_LIST && arg.sub == JL_TUPLE) {
        for (size_t i = 0; i < arg.l->n && !*out; i++)
            ES_TRY(affix(R, s, arg.l->v[i], end, out));
        return ES_OK;
    }
    if (arg.k != JV_STR)
        return jr_fail(R, "%s first arg must be str or a tuple of str, not %s",
                       end ? "endswith" : "startswith", ja_type_name(arg));
    const jstr *p = arg.s;
    *out = p->len <= s->len && !memcmp(s->b + (end ? s->len - p->len : 0), p->b, p->len);
    return ES_OK;
}

/* Calls string method f with its arguments already bound (a[i]: JV_MISSING when not given). */
static es_status str_method(jr *R, const jfunc *f, const jv *a, jv *out)
{
    const jstr *s = f->self.s;
    bool b;
    switch (f->id) {
    case JM_STARTSWITH:
    case JM_ENDSWITH:
        if (a[1].k != JV_MISSING || a[2].k != JV_MISSING)
            return jr_fail(R, "the start and end arguments of %s are not supported",
                           ja_func_name(f));
        ES_TRY(affix(R, s, a[0], f->id == JM_ENDSWITH, &b));
        *out = jv_bool(b);
        return ES_OK;
    case JM_STRIP:
    case JM_LSTRIP:
    case JM_RSTRIP:
        if (a[0].k != JV_MISSING && a[0].k != JV_NONE) ES_TRY(want_str(R, ja_func_name(f), a[0]));
        return jr_strip(R, s, a[0].k == JV_STR ? a[0].s : NULL,
                        f->id == JM_STRIP    ? 3
                        : f->id == JM_LSTRIP ? 1
                                             : 2,
                        out);
    case JM_SPLIT:
    case JM_RSPLIT: {
        const jstr *sep = NULL;
        if (a[0].k != JV_MISSING && a[0].k != JV_NONE) {
            ES_TRY(want_str(R, "split", a[0]));
            sep = a[0].s;
        }
        if (a[1].k != JV_MISSING && a[1].k != JV_INT && a[1].k != JV_BOOL)
            return jr_fail(R, "split: maxsplit must be an integer");
        return split(R, s, sep, a[1].k == JV_MISSING ? -1 : a[1].i, f->id == JM_RSPLIT, out);
    }
    case JM_REPLACE:
        ES_TRY(want_str(R, "replace", a[0]));
        ES_TRY(want_str(R, "replace", a[1]));
        if (a[2].k != JV_MISSING && a[2].k != JV_INT && a[2].k != JV_BOOL)
            return jr_fail(R, "replace: count must be an integer");
        return jr_replace(R, s, a[0].s, a[1].s, a[2].k == JV_MISSING ? -1 : a[2].i, out);
    case JM_UPPER:
        return jr_case(R, s, 'U', out);
    case JM_LOWER:
        return jr_case(R, s, 'L', out);
    case JM_TITLE:
        return jr_case(R, s, 'T', out);
    case JM_CAPITALIZE:
        return jr_case(R, s, 'C', out);
    case JM_FIND:
    case JM_RFIND:
    case JM_COUNT: {
        if (a[1].k != JV_MISSING || a[2].k != JV_MISSING)
            return jr_fail(R, "the start and end arguments of %s are not supported",
                           ja_func_name(f));
        ES_TRY(want_str(R, ja_func_name(f), a[0]));
        const jstr *p = a[0].s;
        ES_TRY(jr_charge(R, (int64_t)s->len / 16));
        if (f->id == JM_COUNT) {
            int64_t c = 0;
            if (!p->len)
                c = (int64_t)ja_cp_count(s->b, s->len) + 1;
            else
                for (const char *q = s->b;
                     (q = memmem(q, s->len - (size_t)(q - s->b), p->b, p->len)); q += p->len)
                    c++;
            *out = jv_int(c);
            return ES_OK;
        }
        int64_t at = -1;
        if (p->len <= s->len) {
            if (f->id == JM_FIND) {
                const char *q = memmem(s->b, s->len, p->b, p->len);
                if (q) at = cp_index(s, (size_t)(q - s->b));
            } else {
                const char *q;
                ES_TRY(find_last(R, s->b, s->len, p->b, p->len, &q));
                if (q) at = cp_index(s, (size_t)(q - s->b));
            }
        }
        *out = jv_int(at);
        return ES_OK;
    }
    case JM_JOIN: {
        jlist *items;
        ES_TRY(jr_iter(R, a[0], &items));
        jbuf buf = {0};
        es_status st = ES_OK;
        for (size_t i = 0; i < items->n && st == ES_OK; i++) {
            if (items->v[i].k != JV_STR)
                st = jr_fail(R, "sequence item %zu: expected str instance, %s found", i,
                             ja_type_name(items->v[i]));
            else if (!i || (st = jr_buf_put(R, &buf, s->b, s->len)) == ES_OK)
                st = jr_buf_put(R, &buf, items->v[i].s->b, items->v[i].s->len);
        }
        if (st == ES_OK) st = jr_str(R, buf.p ? buf.p : "", buf.n, out);
        ja_buf_free(&buf);
        return st;
    }
    case JM_REMOVEPREFIX:
    case JM_REMOVESUFFIX: {
        ES_TRY(want_str(R, ja_func_name(f), a[0]));
        bool end = f->id == JM_REMOVESUFFIX;
        ES_TRY(affix(R, s, a[0], end, &b));
        size_t cut = b ? a[0].s->len : 0;
        return jr_str(R, s->b + (end ? 0 : cut), s->len - cut, out);
    }
    case JM_ISDIGIT:
    case JM_ISSPACE:
    case JM_ISLOWER:
    case JM_ISUPPER: {
        bool any = false, all = s->len > 0, cased_upper = false, cased_lower = false;
        for (size_t i = 0; i < s->len;) {
            uint32_t c = ja_utf8_next(s->b, s->len, &i);
            if (f->id == JM_ISDIGIT) {
                if (c >= 0x80) return jr_fail(R, "isdigit of non-ASCII text is not supported");
                all = all && c >= '0' && c <= '9';
            } else if (f->id == JM_ISSPACE) {
                all = all && ja_py_isspace(c);
            } else {
                int up, lo;
                bool known;
                if (ja_is_cased(c, &up, &lo, &known)) any = true;
                if (!known) return jr_fail(R, "case of U+%04X is not supported", (unsigned)c);
                cased_upper |= up, cased_lower |= lo;
            }
        }
        if (f->id == JM_ISLOWER) all = any && !cased_upper;
        if (f->id == JM_ISUPPER) all = any && !cased_lower;
        *out = jv_bool(all);
        return ES_OK;
    }
    }
    return jr_fail(R, "internal error: string method");
}

/* ---- globals ----------------------------------------------------------------------------------
 */
static es_status range(jr *R, const jv *argv, int argc, jv *out)
{
    int64_t v[3] = {0, 0, 1};
    if (argc < 1 || argc > 3) return jr_fail(R, "range expected 1 to 3 arguments, got %d", argc);
    for (int i = 0; i < argc; i++) {
        if (argv[i].k != JV_INT && argv[i].k != JV_BOOL)
            return jr_fail(R, "'%s' object cannot be interpreted as an integer",
                           ja_type_name(argv[i]));
        v[argc == 1 ? 1 : i] = argv[i].i;
    }
    if (!v[2]) return jr_fail(R, "range() arg 3 must not be zero");
    __int128 span = (__int128)v[1] - v[0];
    __int128 n = v[2] > 0 ? (span > 0 ? (span + v[2] - 1) / v[2] : 0)
                          : (span < 0 ? (-span + -(__int128)v[2] - 1) / -(__int128)v[2] : 0);
    if (n > 100000)
        return jr_fail(R,
                       "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    jlist *l;
    ES_TRY(jr_list_new(R, (size_t)n, &l));
    for (int64_t i = 0; i < (int64_t)n; i++)
        l->v[l->n++] = jv_int(v[0] + i * v[2]);
    *out = jv_list(l, JL_RANGE);
    return ES_OK;
}

/* namespace(...) and dict(...): an optional mapping, then keyword arguments. */
static es_status mapping(jr *R, int kind, const jv *argv, int argc, const char *const *kwn,
                         const jv *kwv, int kwc, jv *out)
{
    jdict *d;
    ES_TRY(jr_dict_new(R, &d));
    if (argc > 1) return jr_fail(R, "expected at most 1 positional argument, got %d", argc);
    if (argc == 1) {
        if (argv[0].k != JV_DICT)
            return jr_fail(R, "a %s argument to %s() is not supported", ja_type_name(argv[0]),
                           kind == JV_NS ? "namespace" : "dict");
        for (size_t i = 0; i < argv[0].d->n; i++)
            ES_TRY(jr_dict_set(R, d, argv[0].d->k[i], argv[0].d->v[i]));
    }
    for (int i = 0; i < kwc; i++) {
        jv k;
        ES_TRY(jr_str(R, kwn[i], strlen(kwn[i]), &k));
        ES_TRY(jr_dict_set(R, d, k, kwv[i]));
    }
    out->k = (uint8_t)kind, out->sub = 0, out->d = d;
    return ES_OK;
}

/* datetime.now().strftime(fmt) in the C locale, with the render's clock (lim.now) if set. */
static es_status strftime_now(jr *R, jv fmt, jv *out)
{
    ES_TRY(want_str(R, "strftime_now", fmt));
    time_t now = R->lim.now ? R->lim.now : time(NULL);
    struct tm tm;
    if (!localtime_r(&now, &tm)) return jr_fail(R, "strftime_now: no local time");
    locale_t c = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    char buf[512];
    size_t n =
        fmt.s->len && fmt.s->len < 256 && c ? strftime_l(buf, sizeof(buf), fmt.s->b, &tm, c) : 0;
    if (c) freelocale(c);
    if (!n && fmt.s->len) return jr_fail(R, "strftime_now: format not supported");
    return jr_str(R, buf, n, out);
}

es_status jr_call_func(jr *R, const jfunc *f, const jv *argv, int argc, const char *const *kwn,
                       const jv *kwv, int kwc, jv *out)
{
    static const char *const p_affix[] = {"prefix", "start", "end"};
    static const char *const p_strip[] = {"chars"};
    static const char *const p_split[] = {"sep", "maxsplit"};
    static const char *const p_replace[] = {"old", "new", "count"};
    static const char *const p_sub[] = {"sub", "start", "end"};
    static const char *const p_join[] = {"iterable"};
    static const char *const p_one[] = {"value"};
    static const char *const p_get[] = {"key", "default"};
    static const char *const p_msg[] = {"message"};
    static const char *const p_fmt[] = {"format"};
    jv a[3];
    char what[64];
    snprintf(what, sizeof(what), "%s()", ja_func_name(f));
    switch (f->id) {
    case JM_RANGE:
        if (kwc) return jr_fail(R, "range() takes no keyword arguments");
        return range(R, argv, argc, out);
    case JM_NAMESPACE:
        return mapping(R, JV_NS, argv, argc, kwn, kwv, kwc, out);
    case JM_DICT:
        return mapping(R, JV_DICT, argv, argc, kwn, kwv, kwc, out);
    case JM_RAISE: {
        ES_TRY(jr_bind(R, what, p_msg, 1, 1, argv, argc, kwn, kwv, kwc, a));
        jv m;
        ES_TRY(jr_tostr_val(R, a[0], &m));
        return jr_fail(R, "%s", m.s->b);
    }
    case JM_STRFTIME:
        ES_TRY(jr_bind(R, what, p_fmt, 1, 1, argv, argc, kwn, kwv, kwc, a));
        return strftime_now(R, a[0], out);
    case JM_STARTSWITH:
    case JM_ENDSWITH:
        ES_TRY(jr_bind(R, what, p_affix, 3, 1, argv, argc, kwn, kwv, kwc, a));
        break;
    case JM_STRIP:
    case JM_LSTRIP:
    case JM_RSTRIP:
        ES_TRY(jr_bind(R, what, p_strip, 1, 0, argv, argc, kwn, kwv, kwc, a));
        break;
    case JM_SPLIT:
    case JM_RSPLIT:
        ES_TRY(jr_bind(R, what, p_split, 2, 0, argv, argc, kwn, kwv, kwc, a));
        break;
    case JM_REPLACE:
        ES_TRY(jr_bind(R, what, p_replace, 3, 2, argv, argc, kwn, kwv, kwc, a));
        break;
    case JM_FIND:
    case JM_RFIND:
    case JM_COUNT:
        ES_TRY(jr_bind(R, what, p_sub, 3, 1, argv, argc, kwn, kwv, kwc, a));
        break;
    case JM_JOIN:
        ES_TRY(jr_bind(R, what, p_join, 1, 1, argv, argc, kwn, kwv, kwc, a));
        break;
    case JM_REMOVEPREFIX:
    case JM_REMOVESUFFIX:
        ES_TRY(jr_bind(R, what, p_one, 1, 1, argv, argc, kwn, kwv, kwc, a));
        break;
    case JM_UPPER:
    case JM_LOWER:
    case JM_TITLE:
    case JM_CAPITALIZE:
    case JM_ISDIGIT:
    case JM_ISSPACE:
    case JM_ISLOWER:
    case JM_ISUPPER:
    case JM_ITEMS:
    case JM_KEYS:
    case JM_VALUES:
        ES_TRY(jr_bind(R, what, NULL, 0, 0, argv, argc, kwn, kwv, kwc, a));
        break;
    case JM_GET:
        ES_TRY(jr_bind(R, what, p_get, 2, 1, argv, argc, kwn, kwv, kwc, a));
        break;
    case JM_CYCLE:
        if (kwc || !argc) return jr_fail(R, "loop.cycle needs at least one positional argument");
        *out = argv[f->self.lp->index0 % argc];
        return ES_OK;
    case JM_CHANGED: { /* true unless the arguments equal the previous call's */
        jloop *l = f->self.lp;
        if (kwc) return jr_fail(R, "loop.changed takes no keyword arguments");
        jlist *now;
        bool same = l->changed != NULL;
        ES_TRY(jr_list_new(R, (size_t)argc, &now));
        for (int i = 0; i < argc; i++)
            now->v[now->n++] = argv[i];
        if (same) ES_TRY(jr_eq(R, jv_list(l->changed, JL_TUPLE), jv_list(now, JL_TUPLE), &same));
        l->changed = now;
        *out = jv_bool(!same);
        return ES_OK;
    }
    default:
        return jr_fail(R, "internal error: unknown function");
    }
    if (f->self.k == JV_STR) return str_method(R, f, a, out);
    /* dict methods */
    const jdict *d = f->self.d;
    if (f->id == JM_GET) {
        ES_TRY(jr_key_check(R, a[0]));
        const jv *v = ja_dict_find(d, a[0]);
        *out = v ? *v : a[1].k == JV_MISSING ? jv_none() : a[1];
        return ES_OK;
    }
    jlist *l;
    ES_TRY(jr_list_new(R, d->n, &l));
    for (size_t i = 0; i < d->n; i++) {
        if (f->id == JM_ITEMS) {
            jlist *pair;
            ES_TRY(jr_list_new(R, 2, &pair));
            pair->v[0] = d->k[i], pair->v[1] = d->v[i], pair->n = 2;
            l->v[i] = jv_list(pair, JL_TUPLE);
        } else {
            l->v[i] = f->id == JM_KEYS ? d->k[i] : d->v[i];
        }
    }
    l->n = d->n;
    *out = jv_list(l, JL_VIEW);
    return ES_OK;
}
