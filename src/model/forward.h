/* The fast forward pass (forward.c): SIMD kernels, thread pool, blocked attention, expert plan. */
#ifndef ES_FORWARD_H
#define ES_FORWARD_H

#include "model/model.h"

/* Runs the prefill on the fast path. The first call (and a call with a new thread count or plan
 * capacity) builds the pool and expert plans and keeps them in m->fast; buffers grow to the
 * longest prompt seen. plan_capacity: routes per expert-plan invocation, 0 = the default.
 * logits: [n][n_vocab] if all_logits, else [n_vocab] for the last position. */
es_status es_forward_fast(es_model *m, const int32_t *ids, size_t n, int n_threads,
                          int plan_capacity, int all_logits, float *logits);
void es_fast_destroy(es_fast *f, const es_hparams *hp);

#endif
