/*
 * The residency seam of the MoE stage: where a layer's expert weights come from.
 *
 * DESIGN: the MoE stage of the fast path walks the experts of a layer in groups of G consecutive
 * ids, in increasing order. For each group with routes it acquires the group from a provider,
 * which returns the placement phi (expert -> physical slot) and the slot table, runs the expert
 * plan on the group's routes, then releases the group. The all-resident provider maps every
 * expert to a slot pointing into the model's mapping (G = n_expert, nothing to wait for); the
 * streaming provider (stream/pipeline.c) returns a bank of the arena once the loader has filled
 * it, and recycles the bank on release. The plan cannot tell the two apart, so the numbers do
 * not depend on which one runs (docs/design.md §4 invariant).
 *
 * Calls come from the one thread that drives the prefill, in this order per layer:
 * layer_begin(il), then layer_routed(il, counts), then acquire/release for each group with
 * routes in increasing e0; finally run_end() once after the last layer (or on an error).
 */
#ifndef ES_PROVIDER_H
#define ES_PROVIDER_H

#include "moe/plan.h"

typedef struct es_expert_provider es_expert_provider;
struct es_expert_provider {
    int group;   /* G: experts per acquire (the last group of a layer may be shorter) */
    int n_slots; /* P: physical slots phi may point to */
    /* Before layer il's attention (the early policy starts reads here). May be NULL. */
    es_status (*layer_begin)(es_expert_provider *p, int il);
    /* Layer il's routing is known: counts[e] routes for expert e (groups without routes will not
     * be acquired). May be NULL. */
    es_status (*layer_routed)(es_expert_provider *p, int il, const int64_t *counts);
    /* Experts [e0, e0 + G) of layer il, blocking until they are resident. *phi [n_expert] and
     * *slots [n_slots] stay valid until release; only the group's entries are meaningful.
     * Errors (a failed or corrupt read) name the layer and expert. */
    es_status (*acquire)(es_expert_provider *p, int il, int e0, const int32_t **phi,
                         const es_expert_slot **slots);
    void (*release)(es_expert_provider *p, int il, int e0);
    /* The request is over (normally or not): nothing more will be acquired. May be NULL. */
    void (*run_end)(es_expert_provider *p);
};

#endif
