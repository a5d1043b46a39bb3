/*
 * The fast forward pass (forward.c's layer loop, fast.c's state, pool_jobs.c, and a file per block
 * kind: attention_block.c, mla.c, conv.c, ffn.c): SIMD kernels, thread pool, blocked attention,
 * expert plan. Its internals are in forward_impl.h.
 * An es_fast is one session's fast-path state (pool, activation buffers, plans); the session
 * (session.c) creates it. It never writes to the model.
 */
#ifndef ES_FORWARD_H
#define ES_FORWARD_H

#include "model/model.h"
#include "moe/provider.h"
#include "core/pool.h"
#include "quant/kern.h"

typedef struct es_fast es_fast;

/* Creates the pool (n_threads) and per-thread scratch; checks every tensor has a kernel in k.
 * plan_capacity: routes per expert-plan invocation (0 = 16384). n_slots: physical expert slots
 * the plans must address (at least n_expert; more when the arena has more slots). k is borrowed
 * and must outlive the es_fast. */
es_status es_fast_create(const es_model *m, const es_kern *k, int n_threads, int plan_capacity,
                         int n_slots, es_fast **out);
void es_fast_destroy(es_fast *f, const es_hparams *hp); /* NULL is a no-op */

/* From now on the token embedding's rows are read with pread from fd (which the es_fast then
 * owns; closed here on failure), where the tensor's bytes start at offset, not through the
 * model's mapping: under a memory budget a prompt's rows then cost page cache, not this
 * process's memory. How much of a mapping a scattered read makes resident is the kernel's
 * choice (fault-around, large page-cache folios mapped whole: 75 MiB for 512 random rows of a
 * 160k-token vocabulary on Linux 6.18, where 64 KiB windows would make 33 MiB), so no estimate
 * of it holds. */
es_status es_fast_embed_from_file(es_fast *f, const es_model *m, int fd, uint64_t offset);

/* Activation buffers and plans for batches of up to T tokens in up to n_seq sequences (kept for
 * smaller batches). */
es_status es_fast_reserve(es_fast *f, const es_model *m, int64_t T, int n_seq);

/* A batch of independent sequences as one run of rows: sequence i is rows [seq_start[i],
 * seq_start[i+1]) of ids, positions restart at 0 in each, attention stays within each. */
typedef struct es_fast_batch {
    const int32_t *ids;       /* [T] */
    const int64_t *seq_start; /* [n_seq + 1], seq_start[0] = 0, T = seq_start[n_seq] */
    int n_seq;
    int (*abort_cb)(void *user); /* checked before each layer (NULL: none) */
    /* after each layer: layers done of n_layer + 1 (the head, which the caller runs, is last) */
    void (*progress_cb)(void *user, int steps_done, int n_steps, int64_t tokens);
    void *cb_user;
} es_fast_batch;

/* Runs every layer over the batch with experts from prov (NULL: every expert resident in the
 * model's mapping) and the output norm of every row: es_fast_hidden and es_fast_logits then
 * read the result. ES_E_CANCELLED when abort_cb asked. */
es_status es_fast_layers(es_fast *f, const es_model *m, es_expert_provider *prov,
                         const es_fast_batch *b);

/* The final hidden states of the last es_fast_layers, after the output norm: [T][n_embd]. */
const float *es_fast_hidden(const es_fast *f);

/* Logits of n rows of the last es_fast_layers into out[n][n_vocab]: rows[i] (NULL: rows r0 + i).
 * Runs on the pool. */
void es_fast_logits(es_fast *f, const es_model *m, const int32_t *rows, int64_t r0, int64_t n,
                    float *out);

/* The prefill of one sequence: es_fast_layers, then the logits of every row (all_logits) or the
 * last one into logits ([n][n_vocab] or [n_vocab]); abort_cb (NULL: none) before each layer. */
es_status es_fast_forward(es_fast *f, const es_model *m, es_expert_provider *prov,
                          const int32_t *ids, size_t n, int all_logits, float *logits,
                          int (*abort_cb)(void *user), void *cb_user);

/* The pool the fast path runs on, for the head's per-row jobs (batch.c). */
es_pool *es_fast_pool(const es_fast *f);

/* Records the compute phases of each layer on t (NULL: off), one track per phase: attention,
 * router, moe. t is borrowed and must outlive the es_fast. */
typedef struct es_trace es_trace;
void es_fast_set_trace(es_fast *f, es_trace *t);

/* The phase profile of a request (estream.h es_session_profile): es_fast_prof_begin() when it
 * starts, es_fast_prof_end() when it is over, which fills *out (seconds in the phases, the work
 * counts) and keeps it for es_fast_profile(). */
void es_fast_prof_begin(es_fast *f);
void es_fast_prof_end(es_fast *f, int64_t tokens);
const es_phase_profile *es_fast_profile(const es_fast *f);

/* Routes per expert of layer il in the last forward: counts[0..n_expert). */
es_status es_fast_route_counts(const es_fast *f, int il, int64_t *counts, int cap);

/* The pool the fast path runs on (the streaming provider does not use it, only reads sizes). */
int es_fast_n_threads(const es_fast *f);

#endif
