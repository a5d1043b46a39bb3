/*
 * Causal GQA attention over T tokens in blocks, with an online softmax (flash-attention style):
 * memory O(T * d), never a T x T matrix.
 *
 * DESIGN: work items are (head, block of ATTN_BQ queries), handed out by an atomic counter. For
 * each item the key blocks of ATTN_BK keys up to the diagonal are visited in increasing order:
 * S = Q K^T through es_gemm_tiled (F32 "weights" = the head's keys of the sequence), the running
 * max and sum are updated, the partial output is rescaled and O += P V through es_gemm_tiled
 * (each key block's V a weight matrix of dv rows of ATTN_BK keys). es_attn_set_kv stores keys
 * and values once per layer in the F32 tile layout (quant/tiles.h), the kernels' own operand
 * layout, so the kernels read them without transposing; as rows, every query block transposed
 * its keys and values again (40 % of the attention's time at 2,048 tokens). Every output element
 * is computed by one thread in a fixed order, so results do not depend on the thread count.
 */
#ifndef ES_ATTENTION_H
#define ES_ATTENTION_H

#include "quant/kern.h"
#include "core/pool.h"

enum { ATTN_BQ = 64, ATTN_BK = 128 };
/* Every query of a block then has at least one key in each visited key block. */
_Static_assert(ATTN_BK % ATTN_BQ == 0, "key blocks must be whole query blocks");

typedef struct es_attn es_attn;

/* Buffers for up to t_max tokens in up to max_seqs sequences, n_head query heads, n_kv key heads
 * of size dk (the queries' size) and n_kv_v value heads of size dv (query head h reads key head
 * h / (n_head / n_kv) and value head h / (n_head / n_kv_v): GQA has n_kv_v = n_kv; MLA's latent
 * values are one head shared by all), for es_pool_size(pool) threads. */
es_status es_attn_create(int64_t t_max, int max_seqs, int n_head, int n_kv, int dk, int n_kv_v,
                         int dv, es_pool *pool, const es_kern *k, es_attn **out);
void es_attn_destroy(es_attn *a);
int64_t es_attn_t_max(const es_attn *a);
int es_attn_max_seqs(const es_attn *a);

/* A batch: rows [seq_start[i], seq_start[i+1]) of every [T][...] array are sequence i, for i in
 * [0, n_seq), seq_start[0] = 0, T = seq_start[n_seq] <= t_max, each sequence at least one row,
 * n_seq <= max_seqs. A query attends to the keys of its own sequence only, and the blocks of
 * queries and keys are counted from the sequence's first row, so each sequence's output is
 * bit-identical to the same sequence run alone. */

/* Stores K and V of the batch's T tokens (after RoPE) in the attention's layouts. k:
 * [T][n_kv*dk], v: [T][n_kv_v*dv]. seq_start must stay valid until es_attn_run. */
void es_attn_set_kv(es_attn *a, const float *k, const float *v, const int64_t *seq_start,
                    int n_seq);

/* out[t][h*dv + i] = sum_{s<=t, s in t's sequence} softmax_s(q_t . k_s * scale) v_s[i], q:
 * [T][n_head*dk]; the batch of the last es_attn_set_kv. window > 0: only the keys s > t - window
 * (sliding-window attention), or with chunked only the keys s >= t - t % window (t's own chunk
 * of window positions: Llama 4's chunked attention); positions count from each sequence's
 * start. sinks (NULL: none): head h's softmax has sinks[h] as one more logit in its
 * denominator, with no value (gpt-oss's attention sinks). */
void es_attn_run(es_attn *a, const float *q, float *out, const int64_t *seq_start, int n_seq,
                 float scale, int64_t window, bool chunked, const float *sinks);

#endif
