/*
 * The head's arithmetic on one row of logits, and the pooling of hidden states: what the batch's
 * outputs (per-token log-probs, ranks, alternatives, next-token top-K, label log-probs,
 * embeddings) are made of. The fast and reference paths both use these, so an output differs
 * between them only by the logits and hidden states they computed.
 *
 * DESIGN: sums in double (a 151,936-way log-sum-exp in float loses ~4 digits); ties between equal
 * logits go to the lower token id, in the top list and in the rank alike, so a token is "greedy"
 * exactly when it is the first of the top list.
 */
#ifndef ES_HEAD_H
#define ES_HEAD_H

#include "estream.h"

#include <stdint.h>

/* log(sum_j exp(logits[j])) over j in [0, n), computed as max + log(sum exp(l - max)). */
double es_head_lse(const float *logits, int n);

/* 1 + the number of tokens that come before target: a larger logit, or an equal one with a lower
 * id. 1 = the greedy token. */
int32_t es_head_rank(const float *logits, int n, int32_t target);

/* The k best tokens (largest logit first, ties by lower id): ids[0..k) and their log-probs
 * logits[id] - lse in lp[0..k). k <= n. */
void es_head_top(const float *logits, int n, double lse, int k, int32_t *ids, float *lp);

/* Pools rows x[0..n_rows) of width d into out[0..d): ES_POOLING_MEAN (the mean, summed in
 * double), ES_POOLING_FIRST, ES_POOLING_LAST; then, if normalize, divides by the L2 norm (when
 * it is not 0), as llama.cpp's --embd-normalize 2. ES_POOLING_NONE copies every row (out:
 * [n_rows][d]), each normalised on its own. */
void es_head_pool(const float *x, int64_t n_rows, int64_t d, es_pooling pooling, int normalize,
                  float *out);

/* What sequence q asks of the logits of its row r (0-based within the sequence): the score of
 * ids[r + 1] when r + 1 is a scored position, the next-token outputs when r is the last row, and
 * the raw row itself. */
int es_head_row_wanted(const es_seq *q, int64_t r);
/* Writes those outputs of q from row r's logits [n_vocab]. */
void es_head_row_outputs(es_seq *q, int64_t r, const float *logits, int n_vocab);
/* Whether q asks for per-token scores (log-probs, ranks or alternatives). */
int es_head_wants_scores(const es_seq *q);

/* Checks q's output request against a model of n_vocab tokens and n_embd (the message names
 * sequence i). Sets a score_from of 0 to 1. */
es_status es_head_check(es_seq *q, int i, int n_vocab, int n_ctx);

#endif
