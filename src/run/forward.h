/*
 * The fast forward pass (forward.c, with mla.c, conv.c and ffn.c for the other block kinds): SIMD
 * kernels, thread pool, blocked attention, expert plan. Its internals are in forward_impl.h.
 * An es_fast is one session's fast-path state (pool, activation buffers, plans); the session
 * (session.c) creates it. It never writes to the model.
 */
#ifndef ES_FORWARD_H
#define ES_FORWARD_H

#include "model/model.h"
#include "moe/provider.h"
#include "quant/kern.h"

typedef struct es_fast es_fast;

/* Creates the pool (n_threads) and per-thread scratch; checks every tensor has a kernel in k.
 * plan_capacity: routes per expert-plan invocation (0 = 16384). n_slots: physical expert slots
 * the plans must address (at least n_expert; more when the arena has more slots). k is borrowed
 * and must outlive the es_fast. */
es_status es_fast_create(const es_model *m, const es_kern *k, int n_threads, int plan_capacity,
                         int n_slots, es_fast **out);
void es_fast_destroy(es_fast *f, const es_hparams *hp); /* NULL is a no-op */

/* Activation buffers and plans for prompts of up to T tokens (kept for shorter prompts). */
es_status es_fast_reserve(es_fast *f, const es_model *m, int64_t T);

/* Runs the prefill over ids[0..n) with experts from prov (NULL: every expert resident in the
 * model's mapping). logits: [n][n_vocab] if all_logits, else [n_vocab] for the last position. */
es_status es_fast_forward(es_fast *f, const es_model *m, es_expert_provider *prov,
                          const int32_t *ids, size_t n, int all_logits, float *logits);

/* Records the compute phases of each layer on t (NULL: off), one track per phase: attention,
 * router, moe. t is borrowed and must outlive the es_fast. */
typedef struct es_trace es_trace;
void es_fast_set_trace(es_fast *f, es_trace *t);

/* Routes per expert of layer il in the last forward: counts[0..n_expert). */
es_status es_fast_route_counts(const es_fast *f, int il, int64_t *counts, int cap);

/* The pool the fast path runs on (the streaming provider does not use it, only reads sizes). */
int es_fast_n_threads(const es_fast *f);

#endif
