/* The expert streamer (pipeline.h): sequence, residency protocol, policies, loader thread. The
 * groups' geometry is geometry.c's; the bandwidth probe is probe.c's. */
#include "stream/pipeline.h"

#include "stream/arena.h"
#include "stream/geometry.h"
#include "pack/pack.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum bank_state { BANK_AVAILABLE, BANK_FILLING, BANK_READY, BANK_INUSE, BANK_FAILED, BANK_N };

typedef struct bank {
    enum bank_state state;
    int64_t entry;      /* sequence index of the group it holds (-1: none) */
    int reads_left;     /* extents submitted or still to submit, not yet arrived */
    int next_ext;       /* next extent to submit */
    int failed;         /* 0 ok, 1 a read failed, 2 a record failed its checksum (msg says) */
    es_group_map map;
    char msg[320];
    uint64_t t_fill_ns; /* Filling began (trace) */
    uint64_t t_use_ns;  /* InUse began (trace) */
} bank;

struct es_stream {
    const es_model *m;
    es_stream_params p;
    int G, B, K, E;        /* group size, banks, groups per sparse layer, experts */
    int n_sparse;          /* sparse layers */
    int *sparse_layer;     /* [n_sparse] layer index */
    int *sparse_of;        /* [n_layer] index in sparse_layer, -1 for a dense layer */
    es_pack_layer *pl;     /* [n_sparse] pack layout (NULL for a GGUF source) */
    int64_t n_seq;         /* n_sparse * K */
    es_arena *arena;
    es_io *io;
    es_expert_provider prov;
    int32_t *phi;          /* [n_expert], executor only */
    es_expert_slot *slots; /* [B * G]: bank b's slots at b * G */

    pthread_mutex_t mu;
    pthread_cond_t loader_cv; /* the loader has something to do */
    pthread_cond_t ready_cv;  /* a bank became Ready or Failed */
    pthread_cond_t idle_cv;   /* the loader has no read in flight */
    pthread_t loader;
    int loader_started;
    /* --- under mu --- */
    int quit;
    int active;            /* a request is running (first layer_begin .. run_end) */
    int loader_in_io;      /* the loader is (about to be) blocked in es_io_wait */
    int in_flight;         /* reads submitted, not yet completed */
    int64_t cursor;        /* next sequence entry the loader considers */
    int filling;           /* bank whose extents are still being submitted, or -1 */
    int64_t want;          /* the entry the executor waits for or holds (-1: none yet) */
    int routed_upto;       /* last sparse index whose routing is known (-1: none) */
    int8_t *routed;        /* [n_seq] -1 unknown, 0 no routes, 1 routes */
    int *free_banks;       /* stack of Available banks */
    int n_free;
    bank *banks;           /* [B] */
    int broken;            /* waiting for completions failed: nothing more can be read */
    char broken_msg[256];
    uint64_t read_since_ns; /* in_flight went from 0 to 1 */
    es_stream_stats st;
    int *trace_bank;       /* [B] trace track of each bank (its reads) */
    int trace_groups, trace_waits; /* tracks of the expert groups' compute and of the waits */
    es_stream_record rec;  /* arrays NULL unless p.record */
};

/* The residency protocol's diagram (pipeline.h), as the only way a bank changes state: every
 * transition is checked against it (an arrow missing here is a bug, and aborts). Available ->
 * Available is the reset of every bank at the end of a request. */
static const bool allowed[BANK_N][BANK_N] = {
    [BANK_AVAILABLE] = {[BANK_FILLING] = true, [BANK_AVAILABLE] = true},
    [BANK_FILLING] = {[BANK_READY] = true, [BANK_FAILED] = true},
    [BANK_READY] = {[BANK_INUSE] = true, [BANK_AVAILABLE] = true},
    [BANK_INUSE] = {[BANK_AVAILABLE] = true},
    [BANK_FAILED] = {[BANK_AVAILABLE] = true},
};

static void set_state(bank *k, enum bank_state to)
{
    ES_ASSERT(allowed[k->state][to]);
    k->state = to;
}

/* Stores t in a record array (no-op when not recording). */
static void rec_at(uint64_t *a, int64_t i, uint64_t t)
{
    if (a) a[i] = t;
}

/* ---- sequence ---- */

static int entry_layer(const es_stream *s, int64_t j) { return s->sparse_layer[j / s->K]; }
static int entry_e0(const es_stream *s, int64_t j) { return (int)(j % s->K) * s->G; }
static int entry_e1(const es_stream *s, int64_t j)
{
    const int e1 = entry_e0(s, j) + s->G;
    return e1 < s->E ? e1 : s->E;
}

static void entry_name(const es_stream *s, int64_t j, char *buf, size_t cap)
{
    const int e0 = entry_e0(s, j), e1 = entry_e1(s, j);
    if (e1 - e0 == 1)
        snprintf(buf, cap, "layer %d, expert %d", entry_layer(s, j), e0);
    else
        snprintf(buf, cap, "layer %d, experts %d-%d", entry_layer(s, j), e0, e1 - 1);
}

/* ---- loader side (all under mu unless said) ---- */

static void poke_loader(es_stream *s)
{
    if (s->loader_in_io)
        es_io_wake(s->io);
    else
        pthread_cond_signal(&s->loader_cv);
}

static void count_ready(es_stream *s, uint64_t t)
{
    if (!s->p.trace) return;
    int ready = 0;
    for (int b = 0; b < s->B; b++) ready += s->banks[b].state == BANK_READY;
    es_trace_counter(s->p.trace, "ready banks", t, ready);
    es_trace_counter(s->p.trace, "reads in flight", t, s->in_flight);
}

static void free_bank(es_stream *s, int b)
{
    bank *k = &s->banks[b];
    ES_ASSERT(k->state != BANK_AVAILABLE); /* freed once */
    set_state(k, BANK_AVAILABLE);
    k->entry = -1;
    s->free_banks[s->n_free++] = b;
}

/* Banks whose group the executor has gone past (no routes), or that routing showed unrouted. */
static void recycle_stale(es_stream *s)
{
    for (int b = 0; b < s->B; b++) {
        bank *k = &s->banks[b];
        if ((k->state == BANK_READY || k->state == BANK_FAILED) &&
            (k->entry < s->want || s->routed[k->entry] == 0))
            free_bank(s, b);
    }
}

/* Whether the loader may start reading the group at the cursor now (skipping unrouted ones). */
static int may_start(es_stream *s)
{
    if (!s->active || s->n_free == 0 || s->in_flight >= s->st.queue_depth) return 0;
    while (s->cursor < s->n_seq && s->routed[s->cursor] == 0) {
        s->cursor++;
        s->st.groups_skipped++;
    }
    if (s->cursor >= s->n_seq) return 0;
    const int w = (int)(s->cursor / s->K);
    switch (s->p.policy) {
    case ES_POLICY_ON_DEMAND: return s->cursor <= s->want;
    case ES_POLICY_AFTER_ROUTING: return w <= s->routed_upto;
    default: return 1; /* early */
    }
}

static void trace_span(es_stream *s, int track, const char *what, int64_t j, uint64_t t0,
                       uint64_t t1)
{
    if (!s->p.trace) return;
    char name[64];
    snprintf(name, sizeof(name), "%s L%d e%d-%d", what, entry_layer(s, j), entry_e0(s, j),
             entry_e1(s, j) - 1);
    es_trace_span(s->p.trace, track, name, t0, t1, "layer", entry_layer(s, j), "expert0",
                  entry_e0(s, j));
}

/* Every extent of bank b has arrived (or failed, or was never submitted): publish it. */
static void finish_fill(es_stream *s, int b)
{
    bank *k = &s->banks[b];
    const uint64_t t = es_now_ns();
    trace_span(s, s->trace_bank[b], "read", k->entry, k->t_fill_ns, t);
    if (!s->active) { /* the request is over: nobody will acquire it */
        set_state(k, BANK_FAILED);
        free_bank(s, b);
        return;
    }
    set_state(k, k->failed ? BANK_FAILED : BANK_READY);
    rec_at(s->rec.t_ready, k->entry, t);
    if (!k->failed) {
        uint8_t *base = es_arena_bank(s->arena, b);
        const int e0 = entry_e0(s, k->entry), e1 = entry_e1(s, k->entry);
        for (int e = e0; e < e1; e++) {
            es_expert_slot *sl = &s->slots[(size_t)b * (size_t)s->G + (size_t)(e - e0)];
            const void **mat[3] = {&sl->gate, &sl->up, &sl->down};
            for (int i = 0; i < 3; i++)
                *mat[i] = base + k->map.mat_bank_off[i] + (size_t)(e - e0) * k->map.stride[i];
        }
    }
    recycle_stale(s);
    count_ready(s, t);
    pthread_cond_broadcast(&s->ready_cv);
}

static void fail_bank(es_stream *s, bank *k, const char *why)
{
    if (k->failed) return;
    k->failed = 1;
    char name[64];
    entry_name(s, k->entry, name, sizeof(name));
    snprintf(k->msg, sizeof(k->msg), "%s: %s", name, why);
}

static void read_started(es_stream *s)
{
    if (s->in_flight++ == 0) s->read_since_ns = es_now_ns();
}

static void read_ended(es_stream *s)
{
    ES_ASSERT(s->in_flight > 0);
    if (--s->in_flight == 0) {
        s->st.read_seconds += (double)(es_now_ns() - s->read_since_ns) * 1e-9;
        if (s->filling < 0) pthread_cond_broadcast(&s->idle_cv);
    }
}

/* Submits the next extent of the filling bank, reserving a bank for the cursor's group first
 * if none is filling. Called only when may_start() or (filling and in_flight < Q). */
static void issue_one(es_stream *s)
{
    if (s->filling < 0) {
        const int b = s->free_banks[--s->n_free];
        bank *k = &s->banks[b];
        const int64_t j = s->cursor++;
        const int sw = (int)(j / s->K);
        es_stream_map_group(&s->m->layers[entry_layer(s, j)], s->pl ? &s->pl[sw] : NULL, entry_e0(s, j),
                  entry_e1(s, j), &k->map);
        ES_ASSERT(es_stream_map_bytes(&k->map) <= es_arena_bank_bytes(s->arena));
        set_state(k, BANK_FILLING);
        k->entry = j;
        k->reads_left = k->map.n_ext;
        k->next_ext = 0;
        k->failed = 0;
        k->t_fill_ns = es_now_ns();
        s->filling = b;
        s->st.groups_read++;
        rec_at(s->rec.t_submit, j, k->t_fill_ns);
    }
    const int b = s->filling;
    bank *k = &s->banks[b];
    const int x = k->next_ext++;
    if (k->next_ext == k->map.n_ext) s->filling = -1;
    const es_group_extent *ex = &k->map.ext[x];
    es_status st = es_io_submit_file(s->io, ex->file, ex->off, ex->len, ex->need,
                                es_arena_bank(s->arena, b) + ex->bank_off,
                                (uint64_t)b * ES_STREAM_MAX_EXT + (uint64_t)x);
    if (st == ES_OK) {
        read_started(s);
        count_ready(s, es_now_ns());
        return;
    }
    /* The read could not be queued: the fill fails; extents not submitted never arrive. */
    fail_bank(s, k, es_last_error());
    k->reads_left -= k->map.n_ext - x;
    k->next_ext = k->map.n_ext;
    s->filling = -1;
    if (k->reads_left == 0) finish_fill(s, b);
}

/* The filling bank of a request that ended: submit nothing more for it. */
static void abandon_filling(es_stream *s)
{
    const int b = s->filling;
    bank *k = &s->banks[b];
    k->reads_left -= k->map.n_ext - k->next_ext;
    k->next_ext = k->map.n_ext;
    s->filling = -1;
    if (k->reads_left == 0) finish_fill(s, b);
}

/* First record of experts [e0, e1) in the bank whose checksum differs, or -1. Runs unlocked on
 * a Filling bank (nobody else touches it). */
static int bad_record(const es_stream *s, const bank *k, int b, uint64_t *stored, uint64_t *got)
{
    const es_pack_layer *pl = &s->pl[k->entry / s->K];
    const uint8_t *base = es_arena_bank(s->arena, b);
    const int e0 = entry_e0(s, k->entry), e1 = entry_e1(s, k->entry);
    for (int e = e0; e < e1; e++) {
        *got = es_pack_checksum(base + (size_t)(e - e0) * pl->record_bytes, pl->record_bytes);
        *stored = es_pack_expected_checksum(pl, e);
        if (*got != *stored) return e;
    }
    return -1;
}

/* One extent of bank (tag / ES_STREAM_MAX_EXT) completed with rst. May drop the lock to verify. */
static void complete(es_stream *s, uint64_t tag, es_status rst)
{
    const int b = (int)(tag / ES_STREAM_MAX_EXT), x = (int)(tag % ES_STREAM_MAX_EXT);
    ES_ASSERT(b >= 0 && b < s->B);
    bank *k = &s->banks[b];
    ES_ASSERT(k->state == BANK_FILLING && x < k->map.n_ext);
    if (rst != ES_OK)
        fail_bank(s, k, es_last_error());
    else
        s->st.bytes_read += k->map.ext[x].len;
    if (--k->reads_left > 0) {
        read_ended(s);
        return;
    }
    rec_at(s->rec.t_read_done, k->entry, es_now_ns());
    if (!k->failed && s->pl && s->p.verify && s->active) {
        pthread_mutex_unlock(&s->mu);
        uint64_t stored = 0, got = 0;
        const int e = bad_record(s, k, b, &stored, &got);
        pthread_mutex_lock(&s->mu);
        if (e >= 0) { /* the message names the one expert, not the group */
            snprintf(k->msg, sizeof(k->msg),
                     "layer %d, expert %d: the record does not match the pack's checksum "
                     "(stored %016llx, read %016llx): the file is damaged; make it again with "
                     "estream pack",
                     entry_layer(s, k->entry), e, (unsigned long long)stored,
                     (unsigned long long)got);
            k->failed = 2; /* a format error, not an I/O one */
        }
    }
    finish_fill(s, b);
    read_ended(s);
}

static void *loader_main(void *arg)
{
    es_stream *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (!s->active && s->filling >= 0) abandon_filling(s);
        while (!s->broken && (s->filling >= 0 ? s->in_flight < s->st.queue_depth : may_start(s)))
            issue_one(s);
        if (s->in_flight > 0) {
            s->loader_in_io = 1;
            pthread_mutex_unlock(&s->mu);
            uint64_t tag = 0;
            es_status rst = ES_OK;
            const es_status wst = es_io_wait(s->io, &tag, &rst);
            const int direct = es_io_direct(s->io);
            pthread_mutex_lock(&s->mu);
            s->loader_in_io = 0;
            s->st.direct = direct;
            if (wst != ES_OK) { /* the ring itself broke: no completion will come back */
                snprintf(s->broken_msg, sizeof(s->broken_msg), "expert loader: %s",
                         es_last_error());
                s->broken = 1;
                for (int b = 0; b < s->B; b++)
                    if (s->banks[b].state == BANK_FILLING) {
                        fail_bank(s, &s->banks[b], s->broken_msg);
                        s->banks[b].reads_left = 0;
                        finish_fill(s, b);
                    }
                s->filling = -1;
                s->in_flight = 1;
                read_ended(s);
                pthread_cond_broadcast(&s->ready_cv);
                continue;
            }
            if (tag != ES_IO_WAKE_TAG) complete(s, tag, rst);
            continue;
        }
        if (s->quit) break;
        pthread_cond_wait(&s->loader_cv, &s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- the provider (executor side) ---- */

static void clear_record(es_stream *s)
{
    es_stream_record *r = &s->rec;
    if (!r->bytes) return;
    uint64_t *seq[] = {r->t_submit, r->t_read_done, r->t_ready, r->t_want, r->t_acquired,
                       r->t_released};
    for (size_t i = 0; i < sizeof(seq) / sizeof(seq[0]); i++)
        memset(seq[i], 0, sizeof(uint64_t) * (size_t)r->n_seq);
    memset(r->t_begin, 0, sizeof(uint64_t) * (size_t)r->n_sparse);
    memset(r->t_routed, 0, sizeof(uint64_t) * (size_t)r->n_sparse);
    r->t_end = 0;
}

static es_stream *of(es_expert_provider *p)
{
    return (es_stream *)((char *)p - offsetof(es_stream, prov));
}

static es_status on_layer_begin(es_expert_provider *p, int il)
{
    es_stream *s = of(p);
    if (s->sparse_of[il] < 0) return ES_OK;
    pthread_mutex_lock(&s->mu);
    if (!s->active) { /* a request begins */
        s->active = 1;
        s->st.bytes_read = 0;
        s->st.read_seconds = s->st.wait_seconds = 0;
        s->st.groups_read = s->st.groups_skipped = 0;
        clear_record(s);
    }
    rec_at(s->rec.t_begin, s->sparse_of[il], es_now_ns());
    poke_loader(s);
    pthread_mutex_unlock(&s->mu);
    return ES_OK;
}

static es_status on_layer_routed(es_expert_provider *p, int il, const int64_t *counts)
{
    es_stream *s = of(p);
    const int sw = s->sparse_of[il];
    ES_ASSERT(sw >= 0);
    pthread_mutex_lock(&s->mu);
    for (int k = 0; k < s->K; k++) {
        int64_t n = 0;
        for (int e = k * s->G; e < (k + 1) * s->G && e < s->E; e++) n += counts[e];
        s->routed[(int64_t)sw * s->K + k] = n > 0;
    }
    s->routed_upto = sw;
    rec_at(s->rec.t_routed, sw, es_now_ns());
    recycle_stale(s);
    poke_loader(s);
    pthread_mutex_unlock(&s->mu);
    return ES_OK;
}

static es_status on_acquire(es_expert_provider *p, int il, int e0, const int32_t **phi,
                            const es_expert_slot **slots)
{
    es_stream *s = of(p);
    const int sw = s->sparse_of[il];
    ES_ASSERT(sw >= 0 && e0 % s->G == 0 && e0 < s->E);
    const int64_t j = (int64_t)sw * s->K + e0 / s->G;
    const uint64_t t0 = es_now_ns();
    pthread_mutex_lock(&s->mu);
    ES_ASSERT(s->active && s->routed[j] == 1);
    if (j > s->want) s->want = j;
    recycle_stale(s);
    poke_loader(s);
    int b = -1;
    for (;;) {
        for (int i = 0; i < s->B && b < 0; i++)
            if (s->banks[i].entry == j &&
                (s->banks[i].state == BANK_READY || s->banks[i].state == BANK_FAILED))
                b = i;
        if (b >= 0 || s->broken) break;
        pthread_cond_wait(&s->ready_cv, &s->mu);
    }
    if (b < 0 || s->banks[b].state == BANK_FAILED) {
        es_status code = ES_E_IO;
        if (b < 0) {
            es_fail(code, "%s", s->broken_msg);
        } else {
            code = s->banks[b].failed == 2 ? ES_E_FORMAT : ES_E_IO;
            es_fail(code, "%s", s->banks[b].msg);
            free_bank(s, b);
            poke_loader(s);
        }
        pthread_mutex_unlock(&s->mu);
        return code;
    }
    bank *k = &s->banks[b];
    set_state(k, BANK_INUSE);
    const uint64_t t1 = es_now_ns();
    k->t_use_ns = t1;
    rec_at(s->rec.t_want, j, t0);
    rec_at(s->rec.t_acquired, j, t1);
    count_ready(s, t1);
    pthread_mutex_unlock(&s->mu);

    s->st.wait_seconds += (double)(t1 - t0) * 1e-9; /* executor-only field */
    if (t1 - t0 > 20000) trace_span(s, s->trace_waits, "wait", j, t0, t1);
    const int e1 = entry_e1(s, j);
    for (int e = e0; e < e1; e++) s->phi[e] = b * s->G + (e - e0);
    *phi = s->phi;
    *slots = s->slots;
    return ES_OK;
}

static void on_release(es_expert_provider *p, int il, int e0)
{
    es_stream *s = of(p);
    const int64_t j = (int64_t)s->sparse_of[il] * s->K + e0 / s->G;
    const uint64_t t = es_now_ns();
    pthread_mutex_lock(&s->mu);
    int b = -1;
    for (int i = 0; i < s->B; i++)
        if (s->banks[i].entry == j && s->banks[i].state == BANK_INUSE) b = i;
    ES_ASSERT(b >= 0);
    trace_span(s, s->trace_groups, "experts", j, s->banks[b].t_use_ns, t);
    rec_at(s->rec.t_released, j, t);
    free_bank(s, b);
    count_ready(s, t);
    poke_loader(s);
    pthread_mutex_unlock(&s->mu);
}

static void on_run_end(es_expert_provider *p)
{
    es_stream *s = of(p);
    pthread_mutex_lock(&s->mu);
    s->active = 0;
    s->rec.t_end = es_now_ns();
    poke_loader(s);
    while (s->in_flight > 0 || s->filling >= 0) pthread_cond_wait(&s->idle_cv, &s->mu);
    s->n_free = 0;
    for (int b = s->B - 1; b >= 0; b--) {
        set_state(&s->banks[b], BANK_AVAILABLE);
        s->banks[b].entry = -1;
        s->free_banks[s->n_free++] = b;
    }
    s->cursor = 0;
    s->want = -1;
    s->routed_upto = -1;
    memset(s->routed, -1, (size_t)s->n_seq);
    pthread_mutex_unlock(&s->mu);
}

/* ---- lifetime ---- */

es_expert_provider *es_stream_provider(es_stream *s) { return &s->prov; }

const es_stream_record *es_stream_get_record(const es_stream *s)
{
    return s->rec.bytes ? &s->rec : NULL;
}

/* One block for every record array (p.record). */
static int alloc_record(es_stream *s)
{
    es_stream_record *r = &s->rec;
    const size_t n = (size_t)s->n_seq, w = (size_t)s->n_sparse;
    uint64_t *a = calloc(7 * n + 2 * w, sizeof(uint64_t));
    if (!a) return 0;
    *r = (es_stream_record){.n_seq = s->n_seq, .n_sparse = s->n_sparse, .K = s->K, .G = s->G};
    uint64_t **seq[] = {&r->bytes, &r->t_submit, &r->t_read_done, &r->t_ready,
                        &r->t_want, &r->t_acquired, &r->t_released};
    for (size_t i = 0; i < 7; i++) *seq[i] = a + i * n;
    r->t_begin = a + 7 * n;
    r->t_routed = a + 7 * n + w;
    for (int64_t j = 0; j < s->n_seq; j++) {
        es_group_map g;
        es_stream_map_group(&s->m->layers[entry_layer(s, j)], s->pl ? &s->pl[j / s->K] : NULL,
                  entry_e0(s, j), entry_e1(s, j), &g);
        r->bytes[j] = es_stream_map_bytes(&g);
    }
    return 1;
}

void es_stream_get_stats(const es_stream *s, es_stream_stats *out)
{
    pthread_mutex_lock((pthread_mutex_t *)&s->mu);
    *out = s->st;
    pthread_mutex_unlock((pthread_mutex_t *)&s->mu);
}

void es_stream_destroy(es_stream *s)
{
    if (!s) return;
    if (s->loader_started) {
        pthread_mutex_lock(&s->mu);
        s->quit = 1;
        s->active = 0;
        poke_loader(s);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->loader, NULL);
    }
    es_io_close(s->io); /* the loader has exited: this thread is the only one left on it */
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->loader_cv);
    pthread_cond_destroy(&s->ready_cv);
    pthread_cond_destroy(&s->idle_cv);
    es_arena_destroy(s->arena);
    free(s->sparse_layer);
    free(s->sparse_of);
    free(s->pl);
    free(s->phi);
    free(s->slots);
    free(s->routed);
    free(s->free_banks);
    free(s->banks);
    free(s->trace_bank);
    free(s->rec.bytes); /* the block of every record array */
    free(s);
}

es_status es_stream_create(const es_model *m, const es_stream_params *params, es_stream **out)
{
    *out = NULL;
    const es_hparams *hp = &m->hp;
    if (params->groups < 1 || params->banks < 1 || params->banks > ES_STREAM_MAX_BANKS)
        return es_fail(ES_E_INVAL, "streaming: %d groups and %d banks (need >= 1, banks <= %d)",
                       params->groups, params->banks, ES_STREAM_MAX_BANKS);
    if (params->policy < ES_POLICY_EARLY || params->policy > ES_POLICY_ON_DEMAND)
        return es_fail(ES_E_INVAL, "streaming: unknown policy %d", (int)params->policy);
    es_stream *s = calloc(1, sizeof(*s));
    if (!s) return es_fail(ES_E_NOMEM, "out of memory");
    s->m = m;
    s->p = *params;
    s->E = hp->n_expert;
    s->G = params->groups < s->E ? params->groups : s->E;
    s->B = params->banks;
    s->K = (s->E + s->G - 1) / s->G;
    s->filling = -1;
    s->want = -1;
    s->routed_upto = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->loader_cv, NULL);
    pthread_cond_init(&s->ready_cv, NULL);
    pthread_cond_init(&s->idle_cv, NULL);
    es_status st = ES_OK;
    s->sparse_of = malloc(sizeof(int) * (size_t)hp->n_layer);
    s->sparse_layer = malloc(sizeof(int) * (size_t)hp->n_layer);
    if (!s->sparse_of || !s->sparse_layer) goto nomem;
    for (int il = 0; il < hp->n_layer; il++) {
        s->sparse_of[il] = es_layer_is_moe(&m->layers[il]) ? s->n_sparse : -1;
        if (s->sparse_of[il] >= 0) s->sparse_layer[s->n_sparse++] = il;
    }
    if (s->n_sparse == 0) {
        st = es_fail(ES_E_INVAL, "streaming: the model has no expert layers");
        goto fail;
    }
    if (m->is_pack) {
        if (!(s->pl = calloc((size_t)s->n_sparse, sizeof(es_pack_layer)))) goto nomem;
        for (int w = 0; w < s->n_sparse && st == ES_OK; w++)
            st = es_pack_layer_info(m->gguf, s->sparse_layer[w], &s->pl[w]);
        if (st) goto fail;
    }
    s->n_seq = (int64_t)s->n_sparse * s->K;
    s->phi = calloc((size_t)s->E, sizeof(int32_t));
    s->slots = calloc((size_t)s->B * (size_t)s->G, sizeof(es_expert_slot));
    s->routed = malloc((size_t)s->n_seq);
    s->free_banks = malloc(sizeof(int) * (size_t)s->B);
    s->banks = calloc((size_t)s->B, sizeof(bank));
    s->trace_bank = calloc((size_t)s->B, sizeof(int));
    if (!s->phi || !s->slots || !s->routed || !s->free_banks || !s->banks || !s->trace_bank)
        goto nomem;
    if (params->record && !alloc_record(s)) goto nomem;
    memset(s->routed, -1, (size_t)s->n_seq);
    for (int b = s->B - 1; b >= 0; b--) {
        s->banks[b].entry = -1;
        s->free_banks[s->n_free++] = b;
    }
    const size_t bank_bytes = es_stream_bank_bytes(m, s->G);
    if (bank_bytes == 0) {
        st = es_fail(ES_E_INVAL, "streaming: no expert bytes to stream");
        goto fail;
    }
    if ((st = es_arena_create(s->B, bank_bytes, &s->arena))) goto fail;
    es_io_params io = params->io;
    if ((st = es_stream_io_open(m, &io, &s->io))) goto fail;
    s->st.io_backend = es_io_used_backend(s->io);
    s->st.direct = es_io_direct(s->io);
    s->st.queue_depth = es_io_queue_depth(s->io);
    s->st.arena_bytes = es_arena_bytes(s->arena);
    s->st.bank_bytes = es_arena_bank_bytes(s->arena);
    s->trace_groups = es_trace_track(s->p.trace, "expert groups");
    s->trace_waits = es_trace_track(s->p.trace, "waits for experts");
    for (int b = 0; b < s->B; b++) {
        char name[32];
        snprintf(name, sizeof(name), "bank %d", b);
        s->trace_bank[b] = es_trace_track(s->p.trace, name);
    }
    s->prov = (es_expert_provider){.group = s->G, .n_slots = s->B * s->G,
                                   .layer_begin = on_layer_begin,
                                   .layer_routed = on_layer_routed, .acquire = on_acquire,
                                   .release = on_release, .run_end = on_run_end};
    if (pthread_create(&s->loader, NULL, loader_main, s) != 0) {
        st = es_fail(ES_E_UNSUPPORTED, "cannot start the expert loader thread");
        goto fail;
    }
    s->loader_started = 1;
    *out = s;
    return ES_OK;
nomem:
    st = es_fail(ES_E_NOMEM, "out of memory for the expert streamer");
fail:
    es_stream_destroy(s);
    return st;
}

const char *es_policy_name(es_policy p)
{
    switch (p) {
    case ES_POLICY_EARLY: return "early";
    case ES_POLICY_AFTER_ROUTING: return "after-routing";
    case ES_POLICY_ON_DEMAND: return "on-demand";
    }
    return "unknown";
}

