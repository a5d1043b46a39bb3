/*
 * Trace recorder (src/core/trace.c): three threads record spans, counters and tracks at once;
 * the written file is parsed back by a strict JSON parser written here (RFC 8259: no raw
 * control characters in strings, valid UTF-8, no duplicate keys, nothing after the value) and
 * checked event by event: counts per kind, thread_name metadata per track, arguments, exact
 * times, sorted non-negative timestamps, escaped names. Also: bad paths leave nothing, NULL
 * traces are no-ops, and allocation failure while recording drops events (counted in the file)
 * instead of crashing.
 *
 * Allocation failure: this program is linked with -Wl,--wrap for malloc, calloc and realloc
 * (Makefile), so the library's allocations pass through the wrappers below, which fail every
 * call while armed. Run under ThreadSanitizer too (tools/test-all.sh).
 */
#include "t.h"

#include "core/trace.h"

#include <pthread.h>
#include <stdatomic.h>

static atomic_int fail_all; /* 1: every wrapped allocation fails */

void *__real_malloc(size_t n);
void *__real_calloc(size_t a, size_t b);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t a, size_t b);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n) { return atomic_load(&fail_all) ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t a, size_t b)
{
    return atomic_load(&fail_all) ? NULL : __real_calloc(a, b);
}
void *__wrap_realloc(void *p, size_t n)
{
    return atomic_load(&fail_all) ? NULL : __real_realloc(p, n);
}

/* ---- a strict JSON parser ------------------------------------------------------------------ */

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;
typedef struct jv {
    jtype type;
    double num;       /* J_NUM, J_BOOL */
    char *str;        /* J_STR: decoded (UTF-8, NUL-terminated; no NUL inside in our files) */
    int n;            /* J_ARR, J_OBJ: members */
    struct jv *items; /* [n] */
    char **keys;      /* J_OBJ: [n], decoded */
} jv;

typedef struct jp {
    const char *s;
    size_t i, n;
    char err[160];
} jp;

static bool jfail(jp *p, const char *what)
{
    if (!p->err[0]) snprintf(p->err, sizeof(p->err), "%s at byte %zu", what, p->i);
    return false;
}

static void jskip(jp *p)
{
    while (p->i < p->n && strchr(" \t\n\r", p->s[p->i]) && p->s[p->i]) p->i++;
}

static void jfree(jv *v)
{
    for (int k = 0; k < v->n; k++) {
        jfree(&v->items[k]);
        if (v->keys) free(v->keys[k]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
    memset(v, 0, sizeof(*v));
}

/* Appends code point cp as UTF-8 to out (room checked by the caller: at most 4 bytes). */
static size_t put_utf8(unsigned cp, char *out)
{
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Bytes of the well-formed UTF-8 sequence at s (Unicode Table 3-7), 0 if none. */
static size_t utf8_ok(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80) return 1;
    size_t len = s[0] >= 0xC2 && s[0] <= 0xDF ? 2 : s[0] >= 0xE0 && s[0] <= 0xEF ? 3
                 : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : 0;
    if (!len || n < len) return 0;
    unsigned lo = s[0] == 0xE0 ? 0xA0 : s[0] == 0xF0 ? 0x90 : 0x80;
    unsigned hi = s[0] == 0xED ? 0x9F : s[0] == 0xF4 ? 0x8F : 0xBF;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t k = 2; k < len; k++)
        if ((s[k] & 0xC0) != 0x80) return 0;
    return len;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static bool jhex4(jp *p, unsigned *out)
{
    if (p->n - p->i < 4) return jfail(p, "short \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(p->s[p->i + k]);
        if (h < 0) return jfail(p, "bad \\u escape");
        v = v * 16 + (unsigned)h;
    }
    p->i += 4;
    *out = v;
    return true;
}

static bool jstring(jp *p, char **out)
{
    if (p->i >= p->n || p->s[p->i] != '"') return jfail(p, "string expected");
    p->i++;
    size_t cap = 64, len = 0;
    char *b = malloc(cap);
    for (;;) {
        if (len + 8 > cap) b = realloc(b, cap *= 2);
        if (p->i >= p->n) { free(b); return jfail(p, "unterminated string"); }
        const unsigned char c = (unsigned char)p->s[p->i];
        if (c == '"') { p->i++; break; }
        if (c < 0x20) { free(b); return jfail(p, "raw control character in a string"); }
        if (c == '\\') {
            if (++p->i >= p->n) { free(b); return jfail(p, "bad escape"); }
            const char e = p->s[p->i++];
            const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
            const char *m = e ? strchr(from, e) : NULL;
            if (m) {
                b[len++] = to[m - from];
            } else if (e == 'u') {
                unsigned cp;
                if (!jhex4(p, &cp)) { free(b); return false; }
                if (cp >= 0xD800 && cp <= 0xDBFF) { /* a surrogate pair */
                    unsigned lo;
                    if (p->n - p->i < 2 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u') {
                        free(b);
                        return jfail(p, "lone high surrogate");
                    }
                    p->i += 2;
                    if (!jhex4(p, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
                        free(b);
                        return jfail(p, "bad low surrogate");
                    }
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    free(b);
                    return jfail(p, "lone low surrogate");
                }
                len += put_utf8(cp, b + len);
            } else {
                free(b);
                return jfail(p, "unknown escape");
            }
            continue;
        }
        size_t k = utf8_ok((const unsigned char *)p->s + p->i, p->n - p->i);
        if (!k) { free(b); return jfail(p, "invalid UTF-8 in a string"); }
        memcpy(b + len, p->s + p->i, k);
        len += k;
        p->i += k;
    }
    b[len] = 0;
    *out = b;
    return true;
}

static bool jnumber(jp *p, double *out)
{
    const size_t start = p->i;
    const char *s = p->s;
    if (p->i < p->n && s[p->i] == '-') p->i++;
    if (p->i < p->n && s[p->i] == '0') {
        p->i++;
    } else if (p->i < p->n && s[p->i] >= '1' && s[p->i] <= '9') {
        while (p->i < p->n && s[p->i] >= '0' && s[p->i] <= '9') p->i++;
    } else {
        return jfail(p, "bad number");
    }
    if (p->i < p->n && s[p->i] == '.') {
        p->i++;
        if (!(p->i < p->n && s[p->i] >= '0' && s[p->i] <= '9')) return jfail(p, "bad fraction");
        while (p->i < p->n && s[p->i] >= '0' && s[p->i] <= '9') p->i++;
    }
    if (p->i < p->n && (s[p->i] == 'e' || s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (s[p->i] == '+' || s[p->i] == '-')) p->i++;
        if (!(p->i < p->n && s[p->i] >= '0' && s[p->i] <= '9')) return jfail(p, "bad exponent");
        while (p->i < p->n && s[p->i] >= '0' && s[p->i] <= '9') p->i++;
    }
    char tmp[64];
    if (p->i - start >= sizeof(tmp)) return jfail(p, "number too long");
    memcpy(tmp, s + start, p->i - start);
    tmp[p->i - start] = 0;
    *out = strtod(tmp, NULL);
    return true;
}

static bool jvalue(jp *p, jv *v, int depth);

static bool jcontainer(jp *p, jv *v, int depth, bool obj)
{
    p->i++; /* [ or { */
    v->type = obj ? J_OBJ : J_ARR;
    int cap = 0;
    jskip(p);
    if (p->i < p->n && p->s[p->i] == (obj ? '}' : ']')) {
        p->i++;
        return true;
    }
    for (;;) {
        if (v->n == cap) {
            cap = cap ? cap * 2 : 8;
            v->items = realloc(v->items, (size_t)cap * sizeof(jv));
            if (obj) v->keys = realloc(v->keys, (size_t)cap * sizeof(char *));
        }
        jv *item = &v->items[v->n];
        memset(item, 0, sizeof(*item));
        jskip(p);
        if (obj) {
            char *key;
            if (!jstring(p, &key)) return false;
            for (int k = 0; k < v->n; k++)
                if (!strcmp(v->keys[k], key)) {
                    free(key);
                    return jfail(p, "duplicate key");
                }
            v->keys[v->n] = key;
            jskip(p);
            if (p->i >= p->n || p->s[p->i] != ':') {
                v->n++;
                return jfail(p, "':' expected");
            }
            p->i++;
        }
        v->n++; /* counted before parsing, so jfree frees a half-parsed item */
        if (!jvalue(p, item, depth + 1)) return false;
        jskip(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->i < p->n && p->s[p->i] == (obj ? '}' : ']')) {
            p->i++;
            return true;
        }
        return jfail(p, obj ? "',' or '}' expected" : "',' or ']' expected");
    }
}

static bool jvalue(jp *p, jv *v, int depth)
{
    memset(v, 0, sizeof(*v));
    if (depth > 64) return jfail(p, "too deep");
    jskip(p);
    if (p->i >= p->n) return jfail(p, "value expected");
    const char c = p->s[p->i];
    if (c == '{' || c == '[') return jcontainer(p, v, depth, c == '{');
    if (c == '"') {
        v->type = J_STR;
        return jstring(p, &v->str);
    }
    static const struct { const char *lit; jtype type; double num; } lits[] = {
        {"true", J_BOOL, 1}, {"false", J_BOOL, 0}, {"null", J_NULL, 0}};
    for (size_t k = 0; k < T_LEN(lits); k++) {
        size_t l = strlen(lits[k].lit);
        if (p->n - p->i >= l && !memcmp(p->s + p->i, lits[k].lit, l)) {
            p->i += l;
            v->type = lits[k].type;
            v->num = lits[k].num;
            return true;
        }
    }
    v->type = J_NUM;
    return jnumber(p, &v->num);
}

/* Parses the whole of s[0..n) as one JSON value; fails the test with the reason if it is not. */
static jv jparse(const char *s, size_t n)
{
    jp p = {.s = s, .n = n};
    jv v;
    bool ok = jvalue(&p, &v, 0);
    if (ok) {
        jskip(&p);
        if (p.i != p.n) ok = jfail(&p, "trailing characters");
    }
    if (!ok) {
        jfree(&v);
        fail_msg("not valid JSON: %s", p.err);
    }
    return v;
}

static const jv *jget(const jv *o, const char *key)
{
    if (!o || o->type != J_OBJ) return NULL;
    for (int k = 0; k < o->n; k++)
        if (!strcmp(o->keys[k], key)) return &o->items[k];
    return NULL;
}

static const char *jstr(const jv *o, const char *key)
{
    const jv *v = jget(o, key);
    return v && v->type == J_STR ? v->str : NULL;
}

/* The number at key; fails the test when absent. */
static double jnum(const jv *o, const char *key)
{
    const jv *v = jget(o, key);
    if (!v || v->type != J_NUM) fail_msg("event has no number \"%s\"", key);
    return v->num;
}

/* Reads and parses a written trace; checks the top-level structure, the process name, the
 * metadata-first order and that timestamps are non-negative and sorted. *events gets the
 * traceEvents array (owned by the returned root). */
static jv read_trace(const char *path, const jv **events, char **raw)
{
    size_t n = 0;
    char *text = t_read_file(path, &n);
    assert_non_null(text);
    jv root = jparse(text, n);
    if (raw) *raw = text;
    else free(text);
    assert_int_equal(root.type, J_OBJ);
    const jv *ev = jget(&root, "traceEvents");
    assert_non_null(ev);
    assert_int_equal(ev->type, J_ARR);
    assert_string_equal(jstr(&root, "displayTimeUnit"), "ms");
    const jv *e0 = &ev->items[0];
    assert_string_equal(jstr(e0, "name"), "process_name");
    assert_string_equal(jstr(e0, "ph"), "M");
    assert_string_equal(jstr(jget(e0, "args"), "name"), "estream");
    bool meta = true;
    double last = 0;
    for (int k = 0; k < ev->n; k++) {
        const jv *e = &ev->items[k];
        assert_int_equal(e->type, J_OBJ);
        const char *ph = jstr(e, "ph");
        assert_non_null(ph);
        assert_non_null(jstr(e, "name"));
        assert_true(jnum(e, "pid") == 1);
        if (!strcmp(ph, "M")) {
            assert_true(meta); /* metadata first */
            continue;
        }
        meta = false;
        assert_true(!strcmp(ph, "X") || !strcmp(ph, "C"));
        const double ts = jnum(e, "ts");
        assert_true(ts >= 0);
        assert_true(ts >= last); /* sorted */
        last = ts;
        if (!strcmp(ph, "X")) {
            assert_true(jnum(e, "dur") >= 0);
            assert_true(jnum(e, "tid") >= 2); /* tid 1: the process, for counters */
        } else {
            assert_true(jnum(e, "tid") == 1);
            assert_non_null(jget(jget(e, "args"), "value"));
        }
    }
    *events = ev;
    return root;
}

/* Number of events with phase ph (and name, unless NULL). */
static int count_ph(const jv *ev, const char *ph, const char *name)
{
    int c = 0;
    for (int k = 0; k < ev->n; k++)
        if (!strcmp(jstr(&ev->items[k], "ph"), ph) &&
            (!name || !strcmp(jstr(&ev->items[k], "name"), name)))
            c++;
    return c;
}

/* The tid of the thread_name metadata event naming track name; -1 if none. */
static int track_tid(const jv *ev, const char *name)
{
    int tid = -1;
    for (int k = 0; k < ev->n; k++) {
        const jv *e = &ev->items[k];
        if (!strcmp(jstr(e, "ph"), "M") && !strcmp(jstr(e, "name"), "thread_name") &&
            !strcmp(jstr(jget(e, "args"), "name"), name)) {
            assert_int_equal(tid, -1); /* named once */
            tid = (int)jnum(e, "tid");
        }
    }
    return tid;
}

static double dropped_of(const jv *root)
{
    return jnum(jget(root, "otherData"), "dropped_events");
}

/* ---- tests ---------------------------------------------------------------------------------- */

#define N_COMPUTE 400 /* spans on "compute", each with a distinct name: grows the string pool */
#define N_LOAD 600    /* spans per loader, each followed by a counter sample */
#define COUNTER_EVERY 10

typedef struct worker {
    es_trace *t;
    int id; /* 0: compute, 1..2: loaders */
    pthread_barrier_t *go;
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    char name[64];
    if (w->id == 0) {
        const int track = es_trace_track(w->t, "compute");
        pthread_barrier_wait(w->go);
        for (int k = 0; k < N_COMPUTE; k++) {
            const uint64_t t0 = es_trace_now_ns();
            snprintf(name, sizeof(name), "layer %d group %d", k / 8, k % 8);
            es_trace_span(w->t, track, name, t0, es_trace_now_ns(), "layer", k / 8, "expert0",
                          (k % 8) * 4);
            if (k % COUNTER_EVERY == 0)
                es_trace_counter(w->t, "ready banks", es_trace_now_ns(), k % 3);
        }
    } else {
        snprintf(name, sizeof(name), "loader %d", w->id - 1);
        pthread_barrier_wait(w->go);
        const int track = es_trace_track(w->t, name); /* tracks made while others record */
        for (int k = 0; k < N_LOAD; k++) {
            const uint64_t t0 = es_trace_now_ns();
            es_trace_span(w->t, track, "read", t0, t0 + 1000 + (uint64_t)k, "expert", k, NULL, 0);
            es_trace_counter(w->t, "reads in flight", es_trace_now_ns(), k % 4);
        }
    }
    return NULL;
}

/* Three threads record at once; every event comes back, with its arguments. */
static void test_concurrent(void **state)
{
    (void)state;
    es_trace *t = NULL;
    assert_int_equal(es_trace_create(&t), ES_OK);
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 3);
    pthread_t th[3];
    worker w[3];
    for (int i = 0; i < 3; i++) {
        w[i] = (worker){t, i, &go};
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);

    const char *path = t_tmp_path("trace.json");
    assert_int_equal(es_trace_write(t, path), ES_OK);
    es_trace_destroy(t);
    const jv *ev;
    jv root = read_trace(path, &ev, NULL);
    unlink(path);

    /* 1 process name + thread_name and thread_sort_index per track */
    assert_int_equal(count_ph(ev, "M", NULL), 1 + 2 * 3);
    assert_int_equal(count_ph(ev, "M", "thread_name"), 3);
    assert_int_equal(count_ph(ev, "X", NULL), N_COMPUTE + 2 * N_LOAD);
    assert_int_equal(count_ph(ev, "X", "read"), 2 * N_LOAD);
    assert_int_equal(count_ph(ev, "C", "reads in flight"), 2 * N_LOAD);
    assert_int_equal(count_ph(ev, "C", "ready banks"), N_COMPUTE / COUNTER_EVERY);
    assert_int_equal(count_ph(ev, "C", NULL), 2 * N_LOAD + N_COMPUTE / COUNTER_EVERY);
    assert_int_equal(ev->n, 7 + N_COMPUTE + 2 * N_LOAD + 2 * N_LOAD + N_COMPUTE / COUNTER_EVERY);
    assert_true(dropped_of(&root) == 0);

    const int tid_c = track_tid(ev, "compute"), tid_l0 = track_tid(ev, "loader 0"),
              tid_l1 = track_tid(ev, "loader 1");
    assert_true(tid_c >= 2 && tid_l0 >= 2 && tid_l1 >= 2);
    assert_true(tid_c != tid_l0 && tid_c != tid_l1 && tid_l0 != tid_l1);

    /* every compute span once, with its arguments; every read once per loader */
    static bool seen[N_COMPUTE];
    memset(seen, 0, sizeof(seen));
    int64_t reads[2] = {0, 0}, n_reads[2] = {0, 0};
    for (int k = 0; k < ev->n; k++) {
        const jv *e = &ev->items[k];
        if (strcmp(jstr(e, "ph"), "X")) continue;
        const int tid = (int)jnum(e, "tid");
        const jv *args = jget(e, "args");
        if (tid == tid_c) {
            int layer, group;
            assert_int_equal(sscanf(jstr(e, "name"), "layer %d group %d", &layer, &group), 2);
            const int i = layer * 8 + group;
            assert_true(i >= 0 && i < N_COMPUTE && !seen[i]);
            seen[i] = true;
            assert_int_equal(args->n, 2);
            assert_true(jnum(args, "layer") == layer);
            assert_true(jnum(args, "expert0") == group * 4);
        } else {
            assert_true(tid == tid_l0 || tid == tid_l1);
            assert_string_equal(jstr(e, "name"), "read");
            assert_int_equal(args->n, 1);
            const int x = (int)jnum(args, "expert");
            /* the duration was set to 1000 + expert ns: 1.000 us and up, written exactly */
            assert_true(t_near(jnum(e, "dur"), (1000 + x) / 1000.0, 1e-9));
            reads[tid == tid_l1] += x;
            n_reads[tid == tid_l1]++;
        }
    }
    for (int i = 0; i < N_COMPUTE; i++) assert_true(seen[i]);
    for (int l = 0; l < 2; l++) {
        assert_int_equal(n_reads[l], N_LOAD);
        assert_int_equal(reads[l], (int64_t)N_LOAD * (N_LOAD - 1) / 2);
    }
    jfree(&root);
}

/* Exact times, clamping, argument forms, counter values, track reuse, an empty trace. */
static void test_times_and_values(void **state)
{
    (void)state;
    es_trace *t = NULL;
    assert_int_equal(es_trace_create(&t), ES_OK);
    const char *path = t_tmp_path("times.json");

    /* empty: only the process name */
    assert_int_equal(es_trace_write(t, path), ES_OK);
    const jv *ev;
    jv root = read_trace(path, &ev, NULL);
    assert_int_equal(ev->n, 1);
    jfree(&root);

    const int a = es_trace_track(t, "a"), b = es_trace_track(t, "b");
    assert_int_equal(a, 0);
    assert_int_equal(b, 1);
    assert_int_equal(es_trace_track(t, "a"), a); /* same name, same track */
    char buf[8] = "b";
    assert_int_equal(es_trace_track(t, buf), b);

    const uint64_t base = es_trace_now_ns();
    es_trace_span(t, a, "ref", base, base, NULL, 0, NULL, 0);
    es_trace_span(t, a, "later", base + 1234567, base + 1234567 + 2500, "x", -7, NULL, 0);
    es_trace_span(t, b, "before origin", 0, 0, NULL, 0, "only2", 5);
    es_trace_span(t, b, "backwards", base + 10, base + 5, "k", 1, "k", 2);
    es_trace_counter(t, "c", base + 3, 2.5);
    es_trace_counter(t, "c", base + 4, -1);
    es_trace_counter(t, "c", base + 5, 0.1);
    es_trace_counter(t, "c", base + 6, 1e300);
    es_trace_counter(t, "c", base + 7, NAN);      /* dropped */
    es_trace_counter(t, "c", base + 8, INFINITY); /* dropped */
    es_trace_span(t, 2, "no such track", base, base, NULL, 0, NULL, 0);   /* dropped */
    es_trace_span(t, -1, "failed track", base, base, NULL, 0, NULL, 0);   /* dropped */
    assert_int_equal(es_trace_write(t, path), ES_OK);
    es_trace_destroy(t);

    root = read_trace(path, &ev, NULL);
    unlink(path);
    assert_true(dropped_of(&root) == 4);
    assert_int_equal(count_ph(ev, "X", NULL), 4);
    assert_int_equal(count_ph(ev, "C", NULL), 4);
    double ts_ref = -1, ts_later = -1;
    const double values[] = {2.5, -1, 0.1, 1e300};
    int nc = 0;
    for (int k = 0; k < ev->n; k++) {
        const jv *e = &ev->items[k];
        const char *name = jstr(e, "name");
        if (!strcmp(name, "ref")) {
            ts_ref = jnum(e, "ts");
            assert_true(jnum(e, "dur") == 0);
            assert_null(jget(e, "args"));
        } else if (!strcmp(name, "later")) {
            ts_later = jnum(e, "ts");
            assert_true(jnum(e, "dur") == 2.5);
            assert_true(jnum(jget(e, "args"), "x") == -7);
        } else if (!strcmp(name, "before origin")) {
            assert_true(jnum(e, "ts") == 0); /* clamped to the origin */
            assert_true(jnum(e, "dur") == 0);
            assert_true(jnum(e, "tid") == b + 2);
            assert_int_equal(jget(e, "args")->n, 1);
            assert_true(jnum(jget(e, "args"), "only2") == 5);
        } else if (!strcmp(name, "backwards")) {
            assert_true(jnum(e, "dur") == 0);
            assert_int_equal(jget(e, "args")->n, 1); /* no duplicate key */
            assert_true(jnum(jget(e, "args"), "k") == 1);
        } else if (!strcmp(name, "c")) {
            assert_true(nc < 4);
            assert_true(jnum(jget(e, "args"), "value") == values[nc]); /* exact round trip */
            nc++;
        }
    }
    assert_int_equal(nc, 4);
    assert_true(t_near(ts_later - ts_ref, 1234.567, 1e-6));
    jfree(&root);
}

#define UGLY "say \"hi\" \\ back\n\ttab \x01\x1f\x7f caf\xC3\xA9 bad \xFF\xC0\xED\xA0\x80 end"
/* what UGLY reads back as: each invalid byte becomes U+FFFD */
#define UGLY_DECODED                                                                               \
    "say \"hi\" \\ back\n\ttab \x01\x1f\x7f caf\xC3\xA9 bad "                                      \
    "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD end"

/* Quotes, backslashes, control characters and invalid UTF-8 in every kind of name. */
static void test_escaping(void **state)
{
    (void)state;
    es_trace *t = NULL;
    assert_int_equal(es_trace_create(&t), ES_OK);
    const int k = es_trace_track(t, UGLY);
    const uint64_t now = es_trace_now_ns();
    es_trace_span(t, k, UGLY, now, now + 1, UGLY, 3, NULL, 0);
    es_trace_counter(t, UGLY, now, 1);
    const char *path = t_tmp_path("ugly.json");
    assert_int_equal(es_trace_write(t, path), ES_OK);
    es_trace_destroy(t);
    const jv *ev;
    char *raw;
    jv root = read_trace(path, &ev, &raw); /* strict: raw controls or bad UTF-8 fail here */
    unlink(path);
    assert_non_null(strstr(raw, "say \\\"hi\\\" \\\\ back\\n\\ttab \\u0001\\u001f"));
    free(raw);
    assert_int_equal(track_tid(ev, UGLY_DECODED), k + 2);
    assert_int_equal(count_ph(ev, "X", UGLY_DECODED), 1);
    assert_int_equal(count_ph(ev, "C", UGLY_DECODED), 1);
    for (int i = 0; i < ev->n; i++)
        if (!strcmp(jstr(&ev->items[i], "ph"), "X"))
            assert_true(jnum(jget(&ev->items[i], "args"), UGLY_DECODED) == 3);
    jfree(&root);
}

/* A missing directory or a directory as the path: ES_E_IO, nothing created; a good write
 * leaves exactly the file. */
static void test_bad_path(void **state)
{
    (void)state;
    es_trace *t = NULL;
    assert_int_equal(es_trace_create(&t), ES_OK);
    const uint64_t now = es_trace_now_ns();
    es_trace_span(t, es_trace_track(t, "x"), "s", now, now, NULL, 0, NULL, 0);
    char *dir = t_mkdtemp("trace");
    assert_non_null(dir);
    char *before = t_dir_snapshot(dir, NULL);
    char path[600];
    snprintf(path, sizeof(path), "%s/missing/trace.json", dir);
    assert_int_equal(es_trace_write(t, path), ES_E_IO);
    assert_non_null(strstr(es_last_error(), "missing"));
    assert_int_equal(es_trace_write(t, dir), ES_E_IO);
    T_DIR_UNCHANGED(dir, NULL, before);
    snprintf(path, sizeof(path), "%s/trace.json", dir);
    assert_int_equal(es_trace_write(t, path), ES_OK);
    T_DIR_UNCHANGED(dir, "trace.json", before); /* no temporary file left */
    free(before);
    t_rm_rf(dir);
    free(dir);
    es_trace_destroy(t);
}

/* Every call on a NULL trace is a no-op; create and write report bad arguments. */
static void test_null(void **state)
{
    (void)state;
    es_trace_destroy(NULL);
    assert_int_equal(es_trace_track(NULL, "x"), -1);
    es_trace_span(NULL, 0, "x", 1, 2, "a", 1, "b", 2);
    es_trace_counter(NULL, "x", 1, 1.0);
    assert_int_equal(es_trace_create(NULL), ES_E_INVAL);
    const char *path = t_tmp_path("null.json");
    assert_int_equal(es_trace_write(NULL, path), ES_E_INVAL);
    assert_int_equal(access(path, F_OK), -1);
    es_trace *t = NULL;
    assert_int_equal(es_trace_create(&t), ES_OK);
    assert_int_equal(es_trace_write(t, NULL), ES_E_INVAL);
    /* NULL names are "" */
    const int k = es_trace_track(t, NULL);
    assert_int_equal(k, 0);
    es_trace_span(t, k, NULL, 0, 0, NULL, 0, NULL, 0);
    es_trace_counter(t, NULL, 0, 0);
    assert_int_equal(es_trace_write(t, path), ES_OK);
    es_trace_destroy(t);
    const jv *ev;
    jv root = read_trace(path, &ev, NULL);
    unlink(path);
    assert_int_equal(track_tid(ev, ""), 2);
    assert_int_equal(count_ph(ev, "X", ""), 1);
    assert_int_equal(count_ph(ev, "C", ""), 1);
    jfree(&root);
}

/* With every allocation failing, recording goes on: events that need memory are dropped and
 * counted, the rest are kept, tracks that cannot be made are -1; the file says how many. */
static void test_out_of_memory(void **state)
{
    (void)state;
    es_trace *t = NULL;
    assert_int_equal(es_trace_create(&t), ES_OK);
    const int a = es_trace_track(t, "a");
    enum { N_SPANS = 5000, N_TRACKS = 100 };
    static char big[20000];
    memset(big, 'n', sizeof(big) - 1);
    int tracks[N_TRACKS];
    const uint64_t now = es_trace_now_ns();

    atomic_store(&fail_all, 1);
    for (int i = 0; i < N_SPANS; i++) es_trace_span(t, a, "s", now, now + 1, "i", i, NULL, 0);
    es_trace_span(t, a, big, now, now, NULL, 0, NULL, 0); /* a new string past the pool */
    es_trace_counter(t, big, now, 1);
    char name[32];
    for (int i = 0; i < N_TRACKS; i++) {
        snprintf(name, sizeof(name), "track %d", i);
        tracks[i] = es_trace_track(t, name);
        es_trace_span(t, tracks[i], "on track", now, now, NULL, 0, NULL, 0);
    }
    atomic_store(&fail_all, 0);

    int made = 0;
    for (int i = 0; i < N_TRACKS; i++) {
        assert_true(tracks[i] == -1 || tracks[i] == i + 1);
        made += tracks[i] >= 0;
    }
    assert_true(made > 0 && made < N_TRACKS);
    const char *path = t_tmp_path("oom.json");
    assert_int_equal(es_trace_write(t, path), ES_OK);
    es_trace_destroy(t);
    const jv *ev;
    jv root = read_trace(path, &ev, NULL);
    unlink(path);
    const int kept_s = count_ph(ev, "X", "s");
    assert_true(kept_s > 0 && kept_s < N_SPANS); /* the first array held some */
    assert_int_equal(count_ph(ev, "X", big), 0);
    assert_int_equal(count_ph(ev, "C", NULL), 0);
    assert_int_equal(count_ph(ev, "M", "thread_name"), 1 + made);
    const int kept_on = count_ph(ev, "X", "on track");
    assert_true(kept_on <= made);
    const double lost = (N_SPANS - kept_s) + 2 + (N_TRACKS - kept_on);
    assert_true(dropped_of(&root) == lost);
    /* the kept spans are the first ones recorded, in order */
    int next = 0;
    for (int k = 0; k < ev->n; k++)
        if (!strcmp(jstr(&ev->items[k], "name"), "s"))
            assert_true(jnum(jget(&ev->items[k], "args"), "i") == next++);
    jfree(&root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent),     cmocka_unit_test(test_times_and_values),
        cmocka_unit_test(test_escaping),       cmocka_unit_test(test_bad_path),
        cmocka_unit_test(test_null),           cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
