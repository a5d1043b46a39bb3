/*
 * Values of the Jinja interpreter: the errors of compiling and rendering, the arena values live
 * in, strings, lists and dicts, and the Python semantics every other file leans on: truthiness,
 * ==, <, len(), iteration, `in`, str() (what {{ x }} prints) and repr() (how a value looks
 * inside a printed container).
 *
 * DESIGN: an arena is a list of malloc'd chunks; a render's arena has a cap, and the first
 * allocation past it fails with capped set, which the render reports as its memory limit.
 * Containers grow by doubling inside the arena (the old block is simply abandoned). Dicts keep
 * insertion order and are searched linearly: a template cannot grow a dict (the sandbox is
 * immutable), so every dict is as small as the literal or the message that made it.
 * repr() of strings is Python's only for ASCII text: printing a container that holds other
 * text needs Python's table of printable characters, so it is refused (strict).
 */
#include "jinja/jinja_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ------------------------------------------------------------------------------- */
es_status ja_vfail(const char *name, int line, const char *fmt, va_list ap)
{
    char msg[448];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    return es_fail(ES_E_FORMAT, "%s line %d: %s", name, line, msg);
}

es_status ja_fail(const char *name, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    es_status st = ja_vfail(name, line, fmt, ap);
    va_end(ap);
    return st;
}

es_status jr_fail(jr *R, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    es_status st = ja_vfail(R->t->name, R->line, fmt, ap);
    va_end(ap);
    return st;
}

/* ---- arena -------------------------------------------------------------------------------- */
struct ja_chunk {
    ja_chunk *next;
    size_t cap, used;
    _Alignas(16) char data[];
};
enum { JA_CHUNK = 64 << 10 };

void *ja_alloc(ja_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    ja_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > JA_CHUNK / 4 ? n : JA_CHUNK;
        if (n > SIZE_MAX / 2 || (a->cap && (a->total > a->cap || cap > a->cap - a->total))) {
            a->capped = true;
            return NULL;
        }
        ja_chunk *nc = malloc(sizeof(*nc) + cap);
        if (!nc) return NULL;
        nc->cap = cap, nc->used = 0;
        a->total += cap;
        if (c && cap != JA_CHUNK && c->cap - c->used >= 1024) {
            /* a big block of its own: keep filling the current chunk */
            nc->next = c->next;
            c->next = nc;
            nc->used = n;
            return nc->data;
        }
        nc->next = c;
        a->head = c = nc;
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

void *ja_zalloc(ja_arena *a, size_t n)
{
    void *p = ja_alloc(a, n);
    if (p) memset(p, 0, n);
    return p;
}

void ja_free_all(ja_arena *a)
{
    for (ja_chunk *c = a->head, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    a->head = NULL;
    a->total = 0;
}

/* ---- strings, lists, dicts ----------------------------------------------------------------- */
jstr *ja_str_new(ja_arena *a, const char *p, size_t n)
{
    if (n > SIZE_MAX - sizeof(jstr) - 1) return NULL;
    jstr *s = ja_alloc(a, sizeof(jstr) + n + 1);
    if (!s) return NULL;
    s->len = n;
    if (n) memcpy(s->b, p, n);
    s->b[n] = 0;
    return s;
}

es_status jr_oom(jr *R)
{
    if (R->a.capped) return jr_fail(R, "the template uses too much memory (memory limit)");
    return es_fail(ES_E_NOMEM, "%s: out of memory", R->t->name);
}

es_status jr_str(jr *R, const char *p, size_t n, jv *out)
{
    if (n > R->lim.max_output_bytes)
        return jr_fail(R, "a string of %zu bytes passes the output limit", n);
    jstr *s = ja_str_new(&R->a, p, n);
    if (!s) return jr_oom(R);
    *out = jv_str(s);
    return ES_OK;
}

bool ja_list_push(ja_arena *a, jlist *l, jv x)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 4;
        if (cap > SIZE_MAX / sizeof(jv)) return false;
        jv *v = ja_alloc(a, cap * sizeof(jv));
        if (!v) return false;
        if (l->n) memcpy(v, l->v, l->n * sizeof(jv));
        l->v = v, l->cap = cap;
    }
    l->v[l->n++] = x;
    return true;
}

es_status jr_list_new(jr *R, size_t cap, jlist **out)
{
    jlist *l = ja_zalloc(&R->a, sizeof(*l));
    if (!l) return jr_oom(R);
    if (cap) {
        if (cap > SIZE_MAX / sizeof(jv) || !(l->v = ja_alloc(&R->a, cap * sizeof(jv))))
            return jr_oom(R);
        l->cap = cap;
    }
    *out = l;
    return ES_OK;
}

es_status jr_list_push(jr *R, jlist *l, jv x)
{
    return ja_list_push(&R->a, l, x) ? ES_OK : jr_oom(R);
}

es_status jr_dict_new(jr *R, jdict **out)
{
    *out = ja_zalloc(&R->a, sizeof(jdict));
    return *out ? ES_OK : jr_oom(R);
}

const jv *ja_dict_get(const jdict *d, const char *key, size_t n)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].k == JV_STR && d->k[i].s->len == n && !memcmp(d->k[i].s->b, key, n))
            return &d->v[i];
    return NULL;
}

/* Python dict keys: equal numbers are one key (1, 1.0 and True), strings by content. */
static bool key_eq(jv a, jv b)
{
    if (a.k == JV_STR || b.k == JV_STR)
        return a.k == b.k && a.s->len == b.s->len && !memcmp(a.s->b, b.s->b, a.s->len);
    if (jv_is_num(a) && jv_is_num(b)) {
        double x = a.k == JV_FLOAT ? a.f : (double)a.i, y = b.k == JV_FLOAT ? b.f : (double)b.i;
        return (a.k == JV_FLOAT || b.k == JV_FLOAT) ? x == y : a.i == b.i;
    }
    if (a.k == JV_LIST && b.k == JV_LIST) { /* tuples (jr_key_check admits no other list) */
        if (a.l->n != b.l->n) return false;
        for (size_t i = 0; i < a.l->n; i++)
            if (!key_eq(a.l->v[i], b.l->v[i])) return false;
        return true;
    }
    return a.k == b.k && a.k == JV_NONE;
}

es_status jr_key_check(jr *R, jv key)
{
    if (key.k == JV_STR || key.k == JV_NONE || jv_is_num(key)) return ES_OK;
    if (key.k == JV_LIST && key.sub == JL_TUPLE) {
        for (size_t i = 0; i < key.l->n; i++) ES_TRY(jr_key_check(R, key.l->v[i]));
        return ES_OK;
    }
    if (key.k == JV_DICT || (key.k == JV_LIST && (key.sub == JL_LIST || key.sub == JL_VIEW)))
        return jr_fail(R, "unhashable type: '%s'", ja_type_name(key));
    return jr_fail(R, "a %s value as a dict key is not supported", ja_type_name(key));
}

const jv *ja_dict_find(const jdict *d, jv key)
{
    for (size_t i = 0; i < d->n; i++)
        if (key_eq(d->k[i], key)) return &d->v[i];
    return NULL;
}

bool ja_dict_set(ja_arena *a, jdict *d, jv key, jv val)
{
    for (size_t i = 0; i < d->n; i++)
        if (key_eq(d->k[i], key)) {
            d->v[i] = val;
            return true;
        }
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 4;
        jv *k = ja_alloc(a, cap * sizeof(jv)), *v = ja_alloc(a, cap * sizeof(jv));
        if (!k || !v) return false;
        if (d->n) memcpy(k, d->k, d->n * sizeof(jv)), memcpy(v, d->v, d->n * sizeof(jv));
        d->k = k, d->v = v, d->cap = cap;
    }
    d->k[d->n] = key, d->v[d->n] = val;
    d->n++;
    return true;
}

es_status jr_dict_set(jr *R, jdict *d, jv key, jv val)
{
    return ja_dict_set(&R->a, d, key, val) ? ES_OK : jr_oom(R);
}

/* ---- undefined ---------------------------------------------------------------------------- */
/* The type of x as jinja2's object_type_repr names it before " object" ("None" for None):
 * Python's type name for builtins, the qualified name for jinja2's own classes. */
static const char *owner_name(jv x)
{
    switch (x.k) {
    case JV_UNDEF:
        return NULL;
    case JV_NONE:
        return "None";
    case JV_NS:
        return "jinja2.utils.Namespace";
    case JV_LOOP:
        return "jinja2.runtime.LoopContext";
    case JV_MACRO:
        return "jinja2.runtime.Macro";
    }
    return ja_type_name(x);
}

jv jr_undef(jr *R, const char *name, jv owner)
{
    jundef *u = ja_zalloc(&R->a, sizeof(*u));
    jv r = {.k = JV_UNDEF, .u = u};
    if (u) /* out of memory: a nameless undefined, still correct to use */
        u->name = name, u->owner = owner_name(owner);
    return r;
}

jv jr_undef_item(jr *R, jv owner, jv key)
{
    /* jinja2: "{object_type_repr(obj)} has no element {key!r}"; the keys that get here are
     * not strings (a string key is looked up as an attribute), so their repr is their str
     * (a string key is the repr of a slice, printed as it is) */
    const char *o = owner_name(owner),
               *mid = owner.k == JV_NONE ? " has no element " : " object has no element ";
    jbuf b = {0};
    es_status st = jr_buf_put(R, &b, o, strlen(o));
    if (st == ES_OK) st = jr_buf_put(R, &b, mid, strlen(mid));
    if (st == ES_OK)
        st = key.k == JV_UNDEF ? jr_buf_put(R, &b, "Undefined", 9) : jr_tostr(R, key, &b);
    const jstr *m = st == ES_OK ? ja_str_new(&R->a, b.p, b.n) : NULL;
    ja_buf_free(&b);
    /* a key whose repr is not reproduced (non-ASCII text in a tuple) gets a plainer message */
    return jr_undef_hint(R, m ? m->b : "undefined item");
}

jv jr_undef_hint(jr *R, const char *hint)
{
    jundef *u = ja_zalloc(&R->a, sizeof(*u));
    jv r = {.k = JV_UNDEF, .u = u};
    if (u) u->hint = hint;
    return r;
}

/* Python's type name of a callable: functions, classes, the Python-written methods of jinja2's
 * LoopContext, and the C methods of str and dict. */
const char *ja_func_type(const jfunc *f)
{
    switch (f->id) {
    case JM_RANGE: /* the sandbox's safe_range */
    case JM_RAISE:
    case JM_STRFTIME:
        return "function";
    case JM_NAMESPACE: /* classes */
    case JM_DICT:
        return "type";
    case JM_CYCLE: /* methods of jinja2's LoopContext, written in Python */
    case JM_CHANGED:
        return "method";
    }
    return "builtin_function_or_method"; /* the methods of str and dict */
}

const char *ja_type_name(jv x)
{
    switch (x.k) {
    case JV_UNDEF:
        return "Undefined";
    case JV_NONE:
        return "NoneType";
    case JV_BOOL:
        return "bool";
    case JV_INT:
        return "int";
    case JV_FLOAT:
        return "float";
    case JV_STR:
        return "str";
    case JV_LIST:
        switch (x.sub) {
        case JL_TUPLE:
            return "tuple";
        case JL_GEN:
            return "generator";
        case JL_VIEW:
            return "dict_items";
        case JL_RANGE:
            return "range";
        }
        return "list";
    case JV_DICT:
        return "dict";
    case JV_NS:
        return "Namespace";
    case JV_FUNC:
        return ja_func_type(x.fn);
    case JV_LOOP:
        return "LoopContext";
    case JV_MACRO:
        return "Macro";
    }
    return "object";
}

const char *ja_undef_msg(jv u, char *buf, size_t cap)
{
    const jundef *d = u.u;
    if (d && d->hint) return d->hint;
    if (!d || !d->name) return "undefined value";
    if (!d->owner)
        snprintf(buf, cap, "'%s' is undefined", d->name);
    else if (!strcmp(d->owner, "None"))
        snprintf(buf, cap, "'None' has no attribute '%s'", d->name);
    else
        snprintf(buf, cap, "'%s object' has no attribute '%s'", d->owner, d->name);
    return buf;
}

es_status jr_undef_fail(jr *R, jv u)
{
    char buf[256];
    return jr_fail(R, "%s", ja_undef_msg(u, buf, sizeof(buf)));
}

/* ---- Python semantics ---------------------------------------------------------------------- */
bool ja_truthy(jv x)
{
    switch (x.k) {
    case JV_BOOL:
    case JV_INT:
        return x.i != 0;
    case JV_FLOAT:
        return x.f != 0;
    case JV_STR:
        return x.s->len != 0;
    case JV_LIST:
        return x.sub == JL_GEN || x.l->n != 0; /* a generator is always true */
    case JV_DICT:
        return x.d->n != 0;
    case JV_NS:
    case JV_FUNC:
    case JV_LOOP:
    case JV_MACRO:
        return true;
    }
    return false; /* undefined, None */
}

/* A number as a double (ints and bools exactly up to 2^53). */
static double num(jv x)
{
    return x.k == JV_FLOAT ? x.f : (double)x.i;
}

es_status jr_eq(jr *R, jv a, jv b, bool *out)
{
    *out = false;
    if (jv_is_num(a) && jv_is_num(b)) {
        *out = (a.k == JV_FLOAT || b.k == JV_FLOAT) ? num(a) == num(b) : a.i == b.i;
        return ES_OK;
    }
    if (a.k != b.k) return ES_OK;
    switch (a.k) {
    case JV_UNDEF:
    case JV_NONE:
        *out = true;
        return ES_OK; /* Undefined == Undefined */
    case JV_STR:
        ES_TRY(jr_charge(R, (int64_t)a.s->len / 16));
        *out = a.s->len == b.s->len && !memcmp(a.s->b, b.s->b, a.s->len);
        return ES_OK;
    case JV_LIST:
        if (a.sub == JL_GEN || b.sub == JL_GEN) {
            *out = a.l == b.l;
            return ES_OK;
        }
        if (a.sub == JL_VIEW || b.sub == JL_VIEW)
            return jr_fail(R, "comparing dict views is not supported");
        if (a.sub != b.sub || a.l->n != b.l->n) return ES_OK;
        ES_TRY(jr_charge(R, (int64_t)a.l->n));
        for (size_t i = 0; i < a.l->n; i++) {
            bool e;
            ES_TRY(jr_eq(R, a.l->v[i], b.l->v[i], &e));
            if (!e) return ES_OK;
        }
        *out = true;
        return ES_OK;
    case JV_DICT:
        if (a.d->n != b.d->n) return ES_OK;
        for (size_t i = 0; i < a.d->n; i++) {
            const jv *o = ja_dict_find(b.d, a.d->k[i]);
            bool e = false;
            if (o) ES_TRY(jr_eq(R, a.d->v[i], *o, &e));
            if (!e) return ES_OK;
        }
        *out = true;
        return ES_OK;
    case JV_NS:
        *out = a.d == b.d;
        return ES_OK;
    case JV_LOOP:
        *out = a.lp == b.lp;
        return ES_OK;
    case JV_FUNC:
        *out = a.fn == b.fn;
        return ES_OK;
    case JV_MACRO:
        *out = a.mac == b.mac;
        return ES_OK;
    }
    return ES_OK;
}

es_status jr_lt(jr *R, jv a, jv b, bool *out)
{
    if (a.k == JV_UNDEF) return jr_undef_fail(R, a);
    if (b.k == JV_UNDEF) return jr_undef_fail(R, b);
    if (jv_is_num(a) && jv_is_num(b)) {
        *out = (a.k == JV_FLOAT || b.k == JV_FLOAT) ? num(a) < num(b) : a.i < b.i;
        return ES_OK;
    }
    if (a.k == JV_STR && b.k == JV_STR) { /* UTF-8 byte order is code point order */
        size_t n = a.s->len < b.s->len ? a.s->len : b.s->len;
        int c = memcmp(a.s->b, b.s->b, n);
        *out = c < 0 || (c == 0 && a.s->len < b.s->len);
        return ES_OK;
    }
    if (a.k == JV_LIST && b.k == JV_LIST && a.sub == b.sub &&
        (a.sub == JL_LIST || a.sub == JL_TUPLE)) {
        for (size_t i = 0; i < a.l->n && i < b.l->n; i++) {
            bool e;
            ES_TRY(jr_eq(R, a.l->v[i], b.l->v[i], &e));
            if (!e) return jr_lt(R, a.l->v[i], b.l->v[i], out);
        }
        *out = a.l->n < b.l->n;
        return ES_OK;
    }
    return jr_fail(R, "'<' not supported between instances of '%s' and '%s'", ja_type_name(a),
                   ja_type_name(b));
}

es_status jr_len(jr *R, jv x, int64_t *out)
{
    switch (x.k) {
    case JV_UNDEF:
        *out = 0;
        return ES_OK;
    case JV_STR:
        ES_TRY(jr_charge(R, (int64_t)x.s->len / 16));
        *out = (int64_t)ja_cp_count(x.s->b, x.s->len);
        return ES_OK;
    case JV_LIST:
        if (x.sub == JL_GEN) break;
        *out = (int64_t)x.l->n;
        return ES_OK;
    case JV_DICT:
        *out = (int64_t)x.d->n;
        return ES_OK;
    }
    return jr_fail(R, "object of type '%s' has no len()", ja_type_name(x));
}

es_status jr_iter(jr *R, jv x, jlist **out)
{
    static jlist empty;
    switch (x.k) {
    case JV_UNDEF:
        *out = &empty;
        return ES_OK;
    case JV_LIST:
        if (x.sub == JL_GEN) {
            /* a generator is spent after one pass; a second would see nothing in Python */
            if (x.l->used)
                return jr_fail(R, "iterating a generator a second time is not supported");
            x.l->used = true;
        }
        *out = x.l;
        return ES_OK;
    case JV_DICT: {
        jlist *l;
        ES_TRY(jr_list_new(R, x.d->n, &l));
        for (size_t i = 0; i < x.d->n; i++)
            l->v[i] = x.d->k[i];
        l->n = x.d->n;
        *out = l;
        return ES_OK;
    }
    case JV_STR: {
        jlist *l;
        ES_TRY(jr_charge(R, (int64_t)x.s->len / 16));
        ES_TRY(jr_list_new(R, ja_cp_count(x.s->b, x.s->len), &l));
        for (size_t i = 0; i < x.s->len;) {
            size_t j = i;
            ja_utf8_next(x.s->b, x.s->len, &j);
            jv c;
            ES_TRY(jr_str(R, x.s->b + i, j - i, &c));
            l->v[l->n++] = c;
            i = j;
        }
        *out = l;
        return ES_OK;
    }
    }
    return jr_fail(R, "'%s' object is not iterable", ja_type_name(x));
}

es_status jr_contains(jr *R, jv c, jv item, bool *out)
{
    *out = false;
    if (c.k == JV_STR) {
        if (item.k != JV_STR)
            return jr_fail(R, "'in <string>' requires string as left operand, not %s",
                           ja_type_name(item));
        ES_TRY(jr_charge(R, (int64_t)c.s->len / 16));
        *out = item.s->len == 0 || memmem(c.s->b, c.s->len, item.s->b, item.s->len) != NULL;
        return ES_OK;
    }
    if (c.k == JV_DICT) {
        ES_TRY(jr_key_check(R, item));
        *out = ja_dict_find(c.d, item) != NULL;
        return ES_OK;
    }
    if (c.k != JV_LIST && c.k != JV_UNDEF)
        return jr_fail(R, "argument of type '%s' is not iterable", ja_type_name(c));
    jlist *l;
    ES_TRY(jr_iter(R, c, &l));
    ES_TRY(jr_charge(R, (int64_t)l->n));
    for (size_t i = 0; i < l->n && !*out; i++)
        ES_TRY(jr_eq(R, l->v[i], item, out));
    return ES_OK;
}

/* ---- str() and repr() ---------------------------------------------------------------------- */
es_status jr_buf_put(jr *R, jbuf *b, const char *p, size_t n)
{
    if (n > R->lim.max_output_bytes - b->n)
        return jr_fail(R, "the output passes %zu bytes (output limit)", R->lim.max_output_bytes);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) return es_fail(ES_E_NOMEM, "%s: out of memory", R->t->name);
        b->p = q, b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
    return ES_OK;
}

void ja_buf_free(jbuf *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* Appends the C string s. */
static es_status put_s(jr *R, jbuf *b, const char *s)
{
    return jr_buf_put(R, b, s, strlen(s));
}

/* Python's repr() of an ASCII string: single quotes unless it holds ' and no ". */
static es_status repr_str(jr *R, const jstr *s, jbuf *b)
{
    bool sq = memchr(s->b, '\'', s->len) != NULL, dq = memchr(s->b, '"', s->len) != NULL;
    char q = sq && !dq ? '"' : '\'';
    ES_TRY(jr_buf_put(R, b, &q, 1));
    for (size_t i = 0; i < s->len; i++) {
        unsigned char c = (unsigned char)s->b[i];
        char e[8];
        if (c >= 0x80)
            return jr_fail(R, "printing a list or dict holding non-ASCII text is not supported");
        if (c == '\\' || c == (unsigned char)q)
            e[0] = '\\', e[1] = (char)c, e[2] = 0;
        else if (c == '\n')
            strcpy(e, "\\n");
        else if (c == '\r')
            strcpy(e, "\\r");
        else if (c == '\t')
            strcpy(e, "\\t");
        else if (c < 0x20 || c == 0x7F)
            snprintf(e, sizeof(e), "\\x%02x", c);
        else
            e[0] = (char)c, e[1] = 0;
        ES_TRY(put_s(R, b, e));
    }
    return jr_buf_put(R, b, &q, 1);
}

/* Python's repr() of x appended to b (inside a printed container). */
static es_status repr(jr *R, jv x, jbuf *b, int depth);

/* The items of a list or tuple, comma-separated. */
static es_status repr_items(jr *R, const jlist *l, jbuf *b, int depth)
{
    for (size_t i = 0; i < l->n; i++) {
        if (i) ES_TRY(put_s(R, b, ", "));
        ES_TRY(repr(R, l->v[i], b, depth + 1));
    }
    return ES_OK;
}

static es_status repr(jr *R, jv x, jbuf *b, int depth)
{
    if (depth > JA_MAX_DEPTH) return jr_fail(R, "printing a value nested too deep");
    ES_TRY(jr_charge(R, 1));
    switch (x.k) {
    case JV_STR:
        return repr_str(R, x.s, b);
    case JV_LIST:
        if (x.sub == JL_LIST) {
            ES_TRY(put_s(R, b, "["));
            ES_TRY(repr_items(R, x.l, b, depth));
            return put_s(R, b, "]");
        }
        if (x.sub == JL_TUPLE) {
            ES_TRY(put_s(R, b, "("));
            ES_TRY(repr_items(R, x.l, b, depth));
            return put_s(R, b, x.l->n == 1 ? ",)" : ")");
        }
        break;
    case JV_DICT:
        ES_TRY(put_s(R, b, "{"));
        for (size_t i = 0; i < x.d->n; i++) {
            if (i) ES_TRY(put_s(R, b, ", "));
            ES_TRY(repr(R, x.d->k[i], b, depth + 1));
            ES_TRY(put_s(R, b, ": "));
            ES_TRY(repr(R, x.d->v[i], b, depth + 1));
        }
        return put_s(R, b, "}");
    case JV_UNDEF:
        return put_s(R, b, "Undefined");
    case JV_MACRO: /* jinja2's Macro.__repr__ */
        ES_TRY(put_s(R, b, "<Macro '"));
        ES_TRY(put_s(R, b, x.mac->def->name));
        return put_s(R, b, "'>");
    case JV_NONE:
    case JV_BOOL:
    case JV_INT:
    case JV_FLOAT:
        return jr_tostr(R, x, b);
    }
    return jr_fail(R, "printing a %s object is not supported", ja_type_name(x));
}

es_status jr_tostr(jr *R, jv x, jbuf *b)
{
    char t[40];
    switch (x.k) {
    case JV_UNDEF:
        return ES_OK;
    case JV_NONE:
        return put_s(R, b, "None");
    case JV_BOOL:
        return put_s(R, b, x.i ? "True" : "False");
    case JV_INT: /* printing numbers is charged what it costs next to an evaluation step */
        ES_TRY(jr_charge(R, 3));
        snprintf(t, sizeof(t), "%" PRId64, x.i);
        return put_s(R, b, t);
    case JV_FLOAT: /* the shortest repr tries up to 17 precisions */
        ES_TRY(jr_charge(R, 50));
        return put_s(R, b, ja_float_repr(x.f, t));
    case JV_STR:
        ES_TRY(jr_charge(R, (int64_t)x.s->len / 16));
        return jr_buf_put(R, b, x.s->b, x.s->len);
    }
    return repr(R, x, b, 0);
}

es_status jr_tostr_val(jr *R, jv x, jv *out)
{
    if (x.k == JV_STR) {
        *out = x;
        return ES_OK;
    }
    jbuf b = {0};
    es_status st = jr_tostr(R, x, &b);
    if (st == ES_OK) st = jr_str(R, b.p ? b.p : "", b.n, out);
    ja_buf_free(&b);
    return st;
}
