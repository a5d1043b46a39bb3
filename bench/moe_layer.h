/*
 * The expert operator's workload for the benchmarks (bench_expert, bench_amx_bound): one
 * OLMoE-1B-7B layer's experts (hidden 2048, expert FFN 1024, 64 experts, top-8) with random
 * weights quantized to a type, and T tokens routed with a skewed distribution like a trained
 * router's (expert popularity ~ exp(3 u^3), u uniform: a few experts take several times the
 * mean, some few), sorted by expert so that split invocations keep each token's contributions
 * in expert order. Header-only (static functions) so each benchmark program is one file.
 */
#ifndef ES_BENCH_MOE_LAYER_H
#define ES_BENCH_MOE_LAYER_H

#include "core/util.h"
#include "moe/plan.h"
#include "quant/qtypes.h"
#include "quant/tiles.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MOE_D = 2048, MOE_FF = 1024, MOE_E = 64, MOE_TOPK = 8 };

static uint64_t moe_rng = 0x9e3779b97f4a7c15ull;
static double moe_urand(void) /* [0, 1) */
{
    moe_rng ^= moe_rng << 13;
    moe_rng ^= moe_rng >> 7;
    moe_rng ^= moe_rng << 17;
    return (double)(moe_rng >> 11) / 9007199254740992.0;
}

typedef struct moe_layer {
    es_qtype type;
    int T, R;                      /* tokens, routes (T * top-k) */
    size_t gate_bytes, down_bytes; /* one expert's gate (= up) and down matrices */
    uint8_t *w;                    /* the experts' weights: gate, up, down per expert */
    es_expert_slot slots[MOE_E];   /* into w */
    int32_t phi[MOE_E];            /* expert e in slot e */
    es_route *routes;              /* sorted by expert */
    int busiest, idlest;           /* routes of the busiest and the idlest expert */
    float *x, *y;                  /* input [T][D], output [T][D] */
} moe_layer;

static void *moe_alloc(size_t n)
{
    void *p = es_alloc_big(n);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* The bytes of the experts' weights. */
static size_t moe_layer_bytes(const moe_layer *m)
{
    return MOE_E * (2 * m->gate_bytes + m->down_bytes);
}

static void moe_layer_make(moe_layer *m, es_qtype type, int T)
{
    memset(m, 0, sizeof(*m));
    m->type = type;
    m->T = T;
    m->R = T * MOE_TOPK;
    m->gate_bytes = MOE_FF * es_qtype_row_bytes(type, MOE_D);
    m->down_bytes = MOE_D * es_qtype_row_bytes(type, MOE_FF);
    const size_t per = 2 * m->gate_bytes + m->down_bytes;
    m->w = moe_alloc(moe_layer_bytes(m));
    float row[MOE_D];
    for (int e = 0; e < MOE_E; e++) {
        uint8_t *base = m->w + (size_t)e * per;
        m->slots[e] = (es_expert_slot){base, base + m->gate_bytes, base + 2 * m->gate_bytes};
        m->phi[e] = e;
        for (int j = 0; j < 2 * MOE_FF; j++) {
            for (int k = 0; k < MOE_D; k++)
                row[k] = (float)(moe_urand() - 0.5) * 0.05f;
            es_quantize_row(type, row, base + (size_t)j * es_qtype_row_bytes(type, MOE_D), MOE_D);
        }
        for (int j = 0; j < MOE_D; j++) {
            for (int k = 0; k < MOE_FF; k++)
                row[k] = (float)(moe_urand() - 0.5) * 0.05f;
            es_quantize_row(type, row,
                            base + 2 * m->gate_bytes + (size_t)j * es_qtype_row_bytes(type, MOE_FF),
                            MOE_FF);
        }
    }
    double pop[MOE_E], tot = 0;
    for (int e = 0; e < MOE_E; e++)
        tot += (pop[e] = exp(3.0 * pow(moe_urand(), 3)));
    es_route *routes = malloc(sizeof(es_route) * (size_t)m->R);
    int count[MOE_E] = {0}, start[MOE_E + 1] = {0};
    for (int t = 0, k = 0; t < T; t++) {
        int chosen[MOE_TOPK], n = 0;
        while (n < MOE_TOPK) {
            double x = moe_urand() * tot;
            int e = 0;
            while (e < MOE_E - 1 && (x -= pop[e]) > 0)
                e++;
            bool dup = false;
            for (int i = 0; i < n; i++)
                dup = dup || chosen[i] == e;
            if (!dup) chosen[n++] = e;
        }
        for (int i = 0; i < MOE_TOPK; i++)
            routes[k++] = (es_route){t, chosen[i], 0.125f};
    }
    m->routes = malloc(sizeof(es_route) * (size_t)m->R);
    if (!routes || !m->routes) exit(1);
    for (int i = 0; i < m->R; i++)
        count[routes[i].expert]++;
    for (int e = 0; e < MOE_E; e++)
        start[e + 1] = start[e] + count[e];
    for (int i = 0; i < m->R; i++)
        m->routes[start[routes[i].expert]++] = routes[i];
    free(routes);
    m->busiest = 0, m->idlest = m->R;
    for (int e = 0; e < MOE_E; e++) {
        m->busiest = count[e] > m->busiest ? count[e] : m->busiest;
        m->idlest = count[e] < m->idlest ? count[e] : m->idlest;
    }
    m->x = moe_alloc(sizeof(float) * (size_t)T * MOE_D);
    m->y = moe_alloc(sizeof(float) * (size_t)T * MOE_D);
    for (size_t i = 0; i < (size_t)T * MOE_D; i++)
        m->x[i] = (float)(moe_urand() * 2 - 1);
    memset(m->y, 0, sizeof(float) * (size_t)T * MOE_D);
}

/* The experts' weights again in the pack's tile layout (quant/tiles.h; Q4_0 and Q8_0): a
 * buffer of m's size (es_free_big(..., moe_layer_bytes(m))) and its slots in slots. */
__attribute__((unused)) static uint8_t *moe_layer_tiles(const moe_layer *m, es_expert_slot *slots)
{
    const size_t gb = m->gate_bytes, per = 2 * gb + m->down_bytes;
    uint8_t *wt = moe_alloc(moe_layer_bytes(m));
    for (int e = 0; e < MOE_E; e++) {
        const uint8_t *src = m->w + (size_t)e * per;
        uint8_t *base = wt + (size_t)e * per;
        es_tiles_from_rows(m->type, src, MOE_D, MOE_FF, base);
        es_tiles_from_rows(m->type, src + gb, MOE_D, MOE_FF, base + gb);
        es_tiles_from_rows(m->type, src + 2 * gb, MOE_FF, MOE_D, base + 2 * gb);
        slots[e] = (es_expert_slot){base, base + gb, base + 2 * gb};
    }
    return wt;
}

__attribute__((unused)) static void moe_layer_free(moe_layer *m)
{
    es_free_big(m->w, moe_layer_bytes(m));
    es_free_big(m->x, sizeof(float) * (size_t)m->T * MOE_D);
    es_free_big(m->y, sizeof(float) * (size_t)m->T * MOE_D);
    free(m->routes);
}

/* Routes [0, R) of m through plan (whose input is set), split by its capacity, adding into y,
 * with the experts in slots. Exits on an error. */
static void moe_invoke(es_plan *plan, const moe_layer *m, const es_route *routes, int R,
                       const es_expert_slot *slots, float *y)
{
    const int cap = es_plan_capacity(plan);
    for (int r0 = 0; r0 < R; r0 += cap)
        if (es_plan_invoke(plan, routes + r0, R - r0 < cap ? R - r0 : cap, m->phi, slots, y,
                           MOE_D) != ES_OK) {
            fprintf(stderr, "invoke failed: %s\n", es_last_error());
            exit(1);
        }
}

/* 2 x 3 x hidden x FFN int8 operations per route (a multiply and an add per weight of gate, up
 * and down). */
static double moe_ops(const moe_layer *m)
{
    return 2.0 * 3.0 * MOE_D * MOE_FF * (double)m->R;
}

#endif
