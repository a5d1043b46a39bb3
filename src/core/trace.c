/*
 * Trace recorder: spans and counter samples in memory, written as Chrome trace-event JSON
 * (trace.h has the contract).
 *
 * DESIGN
 * - Few events (thousands per run), recorded from a handful of threads (compute, loader): one
 *   mutex per trace is cheap enough and keeps the code obvious. The critical section is a string
 *   lookup and a copy of 56 bytes; the caller reads the clock before taking it.
 * - No allocation per event in the common case: events live in one array that doubles when
 *   full; strings (event, argument, counter and track names) are interned in a pool indexed by
 *   an open-addressing hash table, so the thousand "expert group" spans of a run store their
 *   name once and callers may pass snprintf buffers. An event refers to strings by offset into
 *   the pool, never by pointer, since the pool moves when it grows.
 * - Out of memory while recording drops the event and counts it: a trace is a diagnostic and
 *   must never stop or crash the run it observes. The count is written in otherData and logged.
 * - Ids in the file: pid 1; track k is tid k + 2; counter samples carry tid 1, the process's
 *   main thread (tid == pid), which no track uses: Perfetto attaches a counter to the process of
 *   its thread and treats a tid equal to the pid as the main thread.
 * - Times are stored relative to the origin, in nanoseconds, and written as microseconds with
 *   three decimals by integer arithmetic, so no precision is lost to floating point. Events are
 *   sorted by start at write time (viewers accept any order, but a sorted file is easier to read
 *   and to check); ties keep recording order, so the sort is deterministic.
 */
#include "core/trace.h"
#include "core/outbuf.h"
#include "core/util.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO_STR UINT32_MAX /* "no string" in an event's string fields */
#define POOL_MAX ((size_t)UINT32_MAX - 1) /* offsets and offset + 1 fit a uint32_t */

typedef struct ev {
    uint64_t t0_ns, t1_ns; /* from the origin; t1_ns unused for counters */
    int64_t v[2];          /* span arguments */
    double value;          /* counter value */
    uint32_t name, arg[2]; /* pool offsets; arg[i] NO_STR when absent */
    int32_t track;         /* span: the track; counter: -1 */
} ev;

struct es_trace {
    pthread_mutex_t mu; /* guards everything below except origin_ns */
    uint64_t origin_ns;
    ev *ev;             /* [cap_ev], n_ev used, in recording order */
    size_t n_ev, cap_ev;
    char *pool;         /* NUL-terminated strings, back to back: [pool_cap], pool_len used */
    size_t pool_len, pool_cap;
    uint32_t *hash;     /* [hash_cap] (a power of two): pool offset + 1 of a string, 0 empty */
    size_t hash_cap, n_str;
    uint32_t *track;    /* [cap_track]: pool offset of each track's name, n_track used */
    int n_track, cap_track;
    uint64_t n_dropped; /* events lost: out of memory, bad track, non-finite counter */
};

uint64_t es_trace_now_ns(void) { return es_now_ns(); }

es_status es_trace_create(es_trace **out)
{
    if (!out) return es_fail(ES_E_INVAL, "trace: out is NULL");
    *out = NULL;
    es_trace *t = calloc(1, sizeof(*t));
    if (!t) return es_fail(ES_E_NOMEM, "trace: out of memory");
    if (pthread_mutex_init(&t->mu, NULL) != 0) {
        free(t);
        return es_fail(ES_E_NOMEM, "trace: cannot create a mutex");
    }
    /* Room for a short run without growing (a few layers of phases and reads). */
    t->cap_ev = 1024;
    t->pool_cap = 4096;
    t->hash_cap = 256;
    t->cap_track = 16;
    t->ev = malloc(t->cap_ev * sizeof(*t->ev));
    t->pool = malloc(t->pool_cap);
    t->hash = calloc(t->hash_cap, sizeof(*t->hash));
    t->track = malloc((size_t)t->cap_track * sizeof(*t->track));
    if (!t->ev || !t->pool || !t->hash || !t->track) {
        es_trace_destroy(t);
        return es_fail(ES_E_NOMEM, "trace: out of memory");
    }
    t->origin_ns = es_trace_now_ns();
    *out = t;
    return ES_OK;
}

void es_trace_destroy(es_trace *t)
{
    if (!t) return;
    pthread_mutex_destroy(&t->mu);
    free(t->ev);
    free(t->pool);
    free(t->hash);
    free(t->track);
    free(t);
}

/* FNV-1a: short names, few of them; quality is plenty for linear probing at half load. */
static uint32_t hash_str(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* Doubles the hash table, re-inserting every string. Returns false when out of memory (the old
 * table stays). Caller holds mu. */
static bool hash_grow(es_trace *t)
{
    const size_t cap = t->hash_cap * 2;
    uint32_t *h = calloc(cap, sizeof(*h));
    if (!h) return false;
    for (size_t i = 0; i < t->hash_cap; i++) {
        if (!t->hash[i]) continue;
        const char *s = t->pool + (t->hash[i] - 1);
        size_t j = hash_str(s, strlen(s)) & (cap - 1);
        while (h[j]) j = (j + 1) & (cap - 1);
        h[j] = t->hash[i];
    }
    free(t->hash);
    t->hash = h;
    t->hash_cap = cap;
    return true;
}

/* The pool offset of s (NULL is ""), added if new; NO_STR when out of memory. Caller holds mu. */
static uint32_t intern(es_trace *t, const char *s)
{
    if (!s) s = "";
    const size_t n = strlen(s);
    /* keep the load at most one half, so probes stay short and an empty entry always exists */
    if ((t->n_str + 1) * 2 > t->hash_cap && !hash_grow(t)) return NO_STR;
    const size_t mask = t->hash_cap - 1;
    size_t i = hash_str(s, n) & mask;
    for (; t->hash[i]; i = (i + 1) & mask) {
        const char *p = t->pool + (t->hash[i] - 1);
        if (!strcmp(p, s)) return t->hash[i] - 1;
    }
    if (n + 1 > POOL_MAX - t->pool_len) return NO_STR;
    if (t->pool_len + n + 1 > t->pool_cap) {
        size_t cap = t->pool_cap * 2;
        while (cap < t->pool_len + n + 1) cap *= 2;
        char *p = realloc(t->pool, cap);
        if (!p) return NO_STR;
        t->pool = p;
        t->pool_cap = cap;
    }
    const uint32_t off = (uint32_t)t->pool_len;
    memcpy(t->pool + off, s, n + 1);
    t->pool_len += n + 1;
    t->hash[i] = off + 1;
    t->n_str++;
    return off;
}

/* A new event at the end of the array; NULL when out of memory. Caller holds mu. */
static ev *push(es_trace *t)
{
    if (t->n_ev == t->cap_ev) {
        if (t->cap_ev > SIZE_MAX / 2 / sizeof(ev)) return NULL;
        ev *e = realloc(t->ev, t->cap_ev * 2 * sizeof(ev));
        if (!e) return NULL;
        t->ev = e;
        t->cap_ev *= 2;
    }
    return &t->ev[t->n_ev++];
}

int es_trace_track(es_trace *t, const char *name)
{
    if (!t) return -1;
    int id = -1;
    pthread_mutex_lock(&t->mu);
    const uint32_t off = intern(t, name);
    if (off == NO_STR) goto done;
    for (int i = 0; i < t->n_track; i++)
        if (t->track[i] == off) {
            id = i;
            goto done;
        }
    if (t->n_track == t->cap_track) {
        if (t->cap_track > INT32_MAX / 2) goto done;
        uint32_t *p = realloc(t->track, (size_t)t->cap_track * 2 * sizeof(*p));
        if (!p) goto done;
        t->track = p;
        t->cap_track *= 2;
    }
    t->track[t->n_track] = off;
    id = t->n_track++;
done:
    pthread_mutex_unlock(&t->mu);
    return id;
}

void es_trace_span(es_trace *t, int track, const char *name, uint64_t t0_ns, uint64_t t1_ns,
                   const char *arg1, int64_t v1, const char *arg2, int64_t v2)
{
    if (!t) return;
    const uint64_t s = t0_ns > t->origin_ns ? t0_ns : t->origin_ns;
    const uint64_t e = t1_ns > s ? t1_ns : s;
    pthread_mutex_lock(&t->mu);
    uint32_t n = NO_STR, a1 = NO_STR, a2 = NO_STR;
    ev *x;
    if (track < 0 || track >= t->n_track) goto drop;
    if ((n = intern(t, name)) == NO_STR) goto drop;
    if (arg1 && (a1 = intern(t, arg1)) == NO_STR) goto drop;
    if (arg2 && (a2 = intern(t, arg2)) == NO_STR) goto drop;
    if (!(x = push(t))) goto drop;
    *x = (ev){.t0_ns = s - t->origin_ns, .t1_ns = e - t->origin_ns, .v = {v1, v2}, .name = n,
              .arg = {a1, a2}, .track = track};
    pthread_mutex_unlock(&t->mu);
    return;
drop:
    t->n_dropped++;
    pthread_mutex_unlock(&t->mu);
}

void es_trace_counter(es_trace *t, const char *name, uint64_t ts_ns, double value)
{
    if (!t) return;
    const uint64_t s = ts_ns > t->origin_ns ? ts_ns : t->origin_ns;
    pthread_mutex_lock(&t->mu);
    uint32_t n;
    ev *x;
    if (!isfinite(value)) goto drop;
    if ((n = intern(t, name)) == NO_STR) goto drop;
    if (!(x = push(t))) goto drop;
    *x = (ev){.t0_ns = s - t->origin_ns, .value = value, .name = n, .arg = {NO_STR, NO_STR},
              .track = -1};
    pthread_mutex_unlock(&t->mu);
    return;
drop:
    t->n_dropped++;
    pthread_mutex_unlock(&t->mu);
}

/* ---- writing ------------------------------------------------------------------------------ */

typedef struct key {
    uint64_t t0_ns;
    size_t i; /* recording order: breaks ties */
} key;

static int key_cmp(const void *a, const void *b)
{
    const key *x = a, *y = b;
    if (x->t0_ns != y->t0_ns) return x->t0_ns < y->t0_ns ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* ns as microseconds with three decimals, exactly. */
static void put_us(es_outbuf *b, uint64_t ns)
{
    es_outbuf_printf(b, "%" PRIu64 ".%03u", ns / 1000, (unsigned)(ns % 1000));
}

/* A finite double in the shortest of %.15g / %.17g that reads back exactly: valid JSON. */
static void put_double(es_outbuf *b, double v)
{
    char s[40];
    snprintf(s, sizeof(s), "%.15g", v);
    if (strtod(s, NULL) != v) snprintf(s, sizeof(s), "%.17g", v);
    es_outbuf_puts(b, s);
}

static void put_event(es_outbuf *b, const es_trace *t, const ev *e)
{
    es_outbuf_puts(b, "{\"name\":");
    es_outbuf_json_str(b, t->pool + e->name);
    if (e->track < 0) {
        es_outbuf_puts(b, ",\"ph\":\"C\",\"pid\":1,\"tid\":1,\"ts\":");
        put_us(b, e->t0_ns);
        es_outbuf_puts(b, ",\"args\":{\"value\":");
        put_double(b, e->value);
        es_outbuf_puts(b, "}}");
        return;
    }
    es_outbuf_printf(b, ",\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":", e->track + 2);
    put_us(b, e->t0_ns);
    es_outbuf_puts(b, ",\"dur\":");
    put_us(b, e->t1_ns - e->t0_ns);
    bool any = false;
    for (int k = 0; k < 2; k++) {
        /* a second argument with the first one's name would be a duplicate key: left out */
        if (e->arg[k] == NO_STR || (k == 1 && e->arg[1] == e->arg[0])) continue;
        es_outbuf_puts(b, any ? "," : ",\"args\":{");
        es_outbuf_json_str(b, t->pool + e->arg[k]);
        es_outbuf_printf(b, ":%" PRId64, e->v[k]);
        any = true;
    }
    es_outbuf_puts(b, any ? "}}" : "}");
}

es_status es_trace_write(const es_trace *tc, const char *path)
{
    if (!tc) return es_fail(ES_E_INVAL, "trace: nothing to write (NULL trace)");
    if (!path) return es_fail(ES_E_INVAL, "trace: no output path");
    /* The trace was allocated by es_trace_create (never a const object): locking it is fine. */
    es_trace *t = (es_trace *)tc;
    es_outbuf b;
    es_status st = es_outbuf_open(&b, path);
    if (st != ES_OK) return st;
    pthread_mutex_lock(&t->mu);
    const size_t n = t->n_ev;
    const uint64_t dropped = t->n_dropped;
    key *keys = malloc((n ? n : 1) * sizeof(*keys));
    if (!keys) {
        pthread_mutex_unlock(&t->mu);
        es_outbuf_abort(&b);
        return es_fail(ES_E_NOMEM, "trace %s: out of memory", path);
    }
    for (size_t i = 0; i < n; i++) keys[i] = (key){t->ev[i].t0_ns, i};
    qsort(keys, n, sizeof(*keys), key_cmp);

    es_outbuf_puts(&b, "{\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,"
                       "\"args\":{\"name\":\"estream\"}}");
    for (int k = 0; k < t->n_track; k++) {
        es_outbuf_printf(&b, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,"
                             "\"args\":{\"name\":", k + 2);
        es_outbuf_json_str(&b, t->pool + t->track[k]);
        es_outbuf_printf(&b, "}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,"
                             "\"tid\":%d,\"args\":{\"sort_index\":%d}}", k + 2, k);
    }
    for (size_t i = 0; i < n; i++) {
        es_outbuf_puts(&b, ",\n");
        put_event(&b, t, &t->ev[keys[i].i]);
    }
    pthread_mutex_unlock(&t->mu);
    free(keys);
    es_outbuf_printf(&b, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"dropped_events\":%" PRIu64
                         "}}\n", dropped);
    if ((st = es_outbuf_commit(&b)) != ES_OK) return st;
    if (dropped)
        es_log(ES_LOG_WARN, "trace %s: %" PRIu64 " events were dropped (out of memory, unknown "
               "track or non-finite counter value)", path, dropped);
    return ES_OK;
}
