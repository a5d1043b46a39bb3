/*
 * Batches of independent sequences (batch.c): checks, the reference path's batch and the fast
 * path's, whose head computes each sequence's outputs from the logits in chunks of rows.
 */
#ifndef ES_BATCH_H
#define ES_BATCH_H

#include "model/model.h"
#include "moe/provider.h"
#include "run/forward.h"

/* The session's callbacks (es_session_params), any of them NULL. */
typedef struct es_batch_cb {
    int (*abort_cb)(void *user);
    void (*progress_cb)(void *user, int steps_done, int n_steps, int64_t tokens);
    void *user;
} es_batch_cb;

/* Checks every sequence's tokens and output request (es_head_check) and the batch against the
 * session's limits (max_tokens 0: none); *T_out is the batch's tokens. */
es_status es_batch_check(const es_model *m, es_seq *seqs, int n_seqs, int max_tokens,
                         int max_seqs, int64_t *T_out);

/* Rows of logits the fast head holds at once for batches of up to T tokens (about
 * ES_HEAD_CHUNK_BYTES of them, at least one row), and their bytes: what the head adds to a
 * session's memory, counted in the budget. */
enum { ES_HEAD_CHUNK_BYTES = 32 << 20 };
int64_t es_batch_head_rows(const es_model *m, int64_t T);
uint64_t es_batch_head_bytes(const es_model *m, int64_t T);

/* The reference path's batch: each sequence alone through es_forward_ref, its outputs from the
 * whole logits matrix. abort_cb is checked before each sequence. */
es_status es_batch_ref(const es_model *m, es_seq *seqs, int n_seqs, const es_batch_cb *cb);

/* The fast path's batch of T tokens: every sequence's rows through es_fast_layers together, then
 * the outputs each asks for, from chunks of at most es_batch_head_rows rows of logits. */
es_status es_batch_fast(es_fast *f, const es_model *m, es_expert_provider *prov, es_seq *seqs,
                        int n_seqs, int64_t T, const es_batch_cb *cb);

#endif
