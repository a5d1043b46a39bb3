/* The memory budget (budget.h). */
#include "stream/budget.h"

#include "stream/arena.h"
#include "stream/pipeline.h"

#include <stdio.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <string.h>
#include <unistd.h>

uint64_t es_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long long size = 0, resident = 0;
    const int n = fscanf(f, "%llu %llu", &size, &resident);
    fclose(f);
    return n == 2 ? resident * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}

uint64_t es_budget_live_rss_bytes(void)
{
#ifdef __GLIBC__
    malloc_trim(0);
#endif
    return es_rss_bytes();
}

/* Reads one byte per page of t's data (and its last byte). */
static uint8_t touch(const es_tensor *t)
{
    const volatile uint8_t *p = t->data;
    uint8_t x = 0;
    if (!p || t->nbytes == 0) return 0;
    for (size_t off = 0; off < t->nbytes; off += 4096) x ^= p[off];
    return x ^ p[t->nbytes - 1];
}

void es_budget_touch_weights(const es_model *m)
{
    uint8_t sink = touch(&m->output_norm) ^ touch(&m->output_norm_b) ^ touch(&m->output) ^
                   touch(&m->output_b);
    for (int il = 0; il < m->hp.n_layer; il++) {
        const es_tensor *ts[ES_LAYER_N_RESIDENT];
        es_layer_resident(&m->layers[il], ts);
        for (int i = 0; i < ES_LAYER_N_RESIDENT; i++) sink ^= touch(ts[i]);
    }
    (void)sink;
}

/* Measured on the demo's model and the small and tiny presets, 1 and 2 threads, prefill under a
 * budget (Intel Xeon, avx512 table): the terms above leave 0.1-0.6 MiB unexplained (thread
 * stacks, the ring, malloc's arenas). The margin covers that with room (tests/test_budget.c holds
 * it): an estimate below the measured peak would let the process pass its budget. */
uint64_t es_budget_margin_bytes(int n_threads)
{
    return ((uint64_t)2 << 20) + (uint64_t)n_threads * (256u << 10);
}

static uint64_t mib_up(uint64_t b) { return (b + ((uint64_t)1 << 20) - 1) >> 20; }

/* Groups in one request (an upper bound on useful banks). */
static int64_t request_groups(const es_model *m, int G)
{
    int64_t n = 0;
    const int K = (m->hp.n_expert + G - 1) / G;
    for (int il = 0; il < m->hp.n_layer; il++) n += es_layer_is_moe(&m->layers[il]) ? K : 0;
    return n;
}

es_status es_budget_plan_make(const es_model *m, uint64_t budget, uint64_t other, int groups,
                              int banks, int force_stream, es_budget_plan *out)
{
    memset(out, 0, sizeof(*out));
    const int E = m->hp.n_expert;
    if (E < 1) return es_fail(ES_E_INVAL, "the model has no experts to stream");
    if (groups > E) groups = E;
    if (budget == 0) { /* forced streaming with no budget: defaults for what is not given */
        out->groups = groups > 0 ? groups : (E < ES_BUDGET_MAX_GROUP ? E : ES_BUDGET_MAX_GROUP);
        out->banks = banks > 0 ? banks : 2;
        out->bank_bytes = es_stream_bank_bytes(m, out->groups);
        return out->bank_bytes ? ES_OK : es_fail(ES_E_INVAL, "no expert bytes to stream");
    }
    const uint64_t all_experts = es_stream_request_bytes(m, E);
    if (!force_stream && groups == 0 && banks == 0 && budget >= other + all_experts) {
        out->resident = 1;
        return ES_OK;
    }
    const uint64_t avail = budget > other ? budget - other : 0;
    /* candidates: the fixed G, or G = min(8, E) down to 1 */
    const int g_hi = groups > 0 ? groups : (E < ES_BUDGET_MAX_GROUP ? E : ES_BUDGET_MAX_GROUP);
    const int g_lo = groups > 0 ? groups : 1;
    const int need_banks = banks > 0 ? banks : groups > 0 ? 1 : 2;
    for (int G = g_hi; G >= g_lo; G--) {
        const size_t bb = es_stream_bank_bytes(m, G);
        if (bb == 0) return es_fail(ES_E_INVAL, "no expert bytes to stream");
        /* the arena as es_alloc_big holds it (rounded up, at least one huge page) */
        const uint64_t need = es_arena_reserved_bytes(need_banks, bb);
        out->min_budget = other + need; /* the last one tried is the smallest */
        if (need == 0 || avail < need) continue;
        int64_t B = banks > 0 ? banks : (int64_t)(avail / bb);
        const int64_t useful = request_groups(m, G);
        if (banks == 0 && B > useful) B = useful;
        if (B > ES_STREAM_MAX_BANKS) B = ES_STREAM_MAX_BANKS;
        while (B > need_banks && es_arena_reserved_bytes((int)B, bb) > avail) B--;
        out->groups = G;
        out->banks = (int)B;
        out->bank_bytes = bb;
        out->min_budget =
            other + es_arena_reserved_bytes(need_banks, es_stream_bank_bytes(m, g_lo));
        return ES_OK;
    }
    /* a model whose experts are fewer bytes than an arena's huge page runs resident first */
    if (!force_stream && groups == 0 && banks == 0 && other + all_experts < out->min_budget)
        out->min_budget = other + all_experts;
    return es_fail(ES_E_BUDGET,
                   "a memory budget of %.1f MiB is too small: this run needs %llu MiB besides "
                   "the experts, and at least %d bank%s of %d expert%s; the smallest budget that "
                   "works is %llu MiB",
                   (double)budget / (1 << 20), (unsigned long long)mib_up(other),
                   need_banks, need_banks > 1 ? "s" : "", g_lo, g_lo > 1 ? "s" : "",
                   (unsigned long long)mib_up(out->min_budget + ES_BUDGET_RERUN_BYTES));
}
