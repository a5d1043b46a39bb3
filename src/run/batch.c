/*
 * Batches of independent sequences (es_session_run): the checks of a batch, the reference path's
 * batch, which runs each sequence alone through the oracle and takes its outputs from the whole
 * logits matrix, and the fast path's, which runs every sequence's rows through the layers at once
 * (each sequence's rows contiguous, in the caller's order) and computes the same outputs from
 * chunks of logits rows.
 *
 * DESIGN: the head's rows are the rows some output needs (es_head_row_wanted), in batch order;
 * each chunk is one product with the output matrix over a gather list (es_gemm reads act rows by
 * index, with the same arithmetic as contiguous rows), then a pool job in which each row's
 * outputs are computed by one thread. Nothing depends on the chunk size or the thread count.
 */
#include "run/batch.h"

#include "core/util.h"
#include "run/head.h"
#include "core/pool.h"

#include <stdlib.h>
#include <string.h>

es_status es_batch_check(const es_model *m, es_seq *seqs, int n_seqs, int max_tokens,
                         int max_seqs, int64_t *T_out)
{
    if (!seqs || n_seqs < 1)
        return es_fail(ES_E_INVAL, "es_session_run: no sequences");
    if (n_seqs > max_seqs)
        return es_fail(ES_E_INVAL, "a batch of %d sequences exceeds the session's max_seqs of %d",
                       n_seqs, max_seqs);
    int64_t T = 0;
    for (int i = 0; i < n_seqs; i++) {
        ES_TRY(es_head_check(&seqs[i], i, m->hp.n_vocab, m->hp.n_ctx));
        T += (int64_t)seqs[i].n_ids;
    }
    if (max_tokens && T > max_tokens)
        return es_fail(ES_E_INVAL, "a batch of %lld tokens exceeds the session's max_tokens of %d",
                       (long long)T, max_tokens);
    *T_out = T;
    return ES_OK;
}

es_status es_batch_ref(const es_model *m, es_seq *seqs, int n_seqs, const es_batch_cb *cb)
{
    const int64_t d = m->hp.n_embd, nv = m->hp.n_vocab;
    es_status st = ES_OK;
    for (int i = 0; i < n_seqs && st == ES_OK; i++) {
        if (cb->abort_cb && cb->abort_cb(cb->user))
            return es_fail(ES_E_CANCELLED, "cancelled by the abort callback");
        es_seq *q = &seqs[i];
        const int64_t n = (int64_t)q->n_ids;
        float *logits = malloc(sizeof(float) * (size_t)(n * nv));
        float *hidden = q->embedding ? malloc(sizeof(float) * (size_t)(n * d)) : NULL;
        if (!logits || (q->embedding && !hidden)) {
            free(logits);
            free(hidden);
            return es_fail(ES_E_NOMEM, "reference path: out of memory for %lld x %lld logits",
                           (long long)n, (long long)nv);
        }
        st = es_forward_ref(m, q->ids, q->n_ids, 1, logits, hidden);
        for (int64_t r = 0; st == ES_OK && r < n; r++)
            if (es_head_row_wanted(q, r)) es_head_row_outputs(q, r, logits + r * nv, (int)nv);
        if (st == ES_OK && hidden) es_head_pool(hidden, n, d, q->pooling, q->normalize, q->embedding);
        free(logits);
        free(hidden);
    }
    if (st == ES_OK && cb->progress_cb)
        cb->progress_cb(cb->user, m->hp.n_layer + 1, m->hp.n_layer + 1,
                        (int64_t)seqs[n_seqs - 1].n_ids);
    return st;
}

int64_t es_batch_head_rows(const es_model *m, int64_t T)
{
    const int64_t per = ES_HEAD_CHUNK_BYTES / ((int64_t)sizeof(float) * m->hp.n_vocab);
    const int64_t rows = per > 1 ? per : 1;
    return T > 0 && T < rows ? T : rows;
}

uint64_t es_batch_head_bytes(const es_model *m, int64_t T)
{
    /* the chunk of logits as es_alloc_big reserves it (a huge-page allocation becomes resident
     * whole), and the batch's ids and row lists (three int32 per row) */
    return es_big_reserved_bytes((size_t)es_batch_head_rows(m, T) * (size_t)m->hp.n_vocab *
                                 sizeof(float)) +
           (uint64_t)T * 3 * sizeof(int32_t);
}

/* One chunk of the head: row i of logits [n][n_vocab] is row `rows[i]` of the batch, of
 * sequence `row_seq[i]`. */
typedef struct head_job {
    es_seq *seqs;
    const int64_t *seq_start;
    const int32_t *rows, *row_seq;
    int64_t n;
    const float *logits;
    int n_vocab;
} head_job;

static void head_worker(void *arg, int ith, int nth)
{
    const head_job *j = arg;
    const int64_t i0 = j->n * ith / nth, i1 = j->n * (ith + 1) / nth;
    for (int64_t i = i0; i < i1; i++) {
        const int sq = j->row_seq[i];
        es_head_row_outputs(&j->seqs[sq], j->rows[i] - j->seq_start[sq],
                            j->logits + i * j->n_vocab, j->n_vocab);
    }
}

es_status es_batch_fast(es_fast *f, const es_model *m, es_expert_provider *prov, es_seq *seqs,
                        int n_seqs, int64_t T, const es_batch_cb *cb)
{
    const int64_t d = m->hp.n_embd, nv = m->hp.n_vocab;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)T);
    int64_t *seq_start = malloc(sizeof(int64_t) * (size_t)(n_seqs + 1));
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)T * 2);
    float *chunk = NULL;
    size_t chunk_bytes = 0;
    es_status st = ES_OK;
    if (!ids || !seq_start || !rows) {
        st = es_fail(ES_E_NOMEM, "out of memory for a batch of %lld tokens", (long long)T);
        goto done;
    }
    int32_t *row_seq = rows + T;
    int64_t n_rows = 0, r = 0;
    for (int i = 0; i < n_seqs; i++) {
        seq_start[i] = r;
        memcpy(ids + r, seqs[i].ids, sizeof(int32_t) * seqs[i].n_ids);
        for (int64_t k = 0; k < (int64_t)seqs[i].n_ids; k++)
            if (es_head_row_wanted(&seqs[i], k)) {
                rows[n_rows] = (int32_t)(r + k);
                row_seq[n_rows++] = i;
            }
        r += (int64_t)seqs[i].n_ids;
    }
    seq_start[n_seqs] = r;

    const es_fast_batch b = {ids, seq_start, n_seqs, cb->abort_cb, cb->progress_cb, cb->user};
    if ((st = es_fast_layers(f, m, prov, &b))) goto done;

    const int64_t chunk_rows = es_batch_head_rows(m, n_rows);
    chunk_bytes = sizeof(float) * (size_t)chunk_rows * (size_t)nv;
    if (n_rows && !(chunk = es_alloc_big(chunk_bytes))) {
        st = es_fail(ES_E_NOMEM, "out of memory for %lld rows of logits", (long long)chunk_rows);
        goto done;
    }
    for (int64_t c0 = 0; c0 < n_rows; c0 += chunk_rows) {
        if (cb->abort_cb && cb->abort_cb(cb->user)) {
            st = es_fail(ES_E_CANCELLED, "cancelled by the abort callback in the head");
            goto done;
        }
        const int64_t n = n_rows - c0 < chunk_rows ? n_rows - c0 : chunk_rows;
        es_fast_logits(f, m, rows + c0, 0, n, chunk);
        head_job j = {seqs, seq_start, rows + c0, row_seq + c0, n, chunk, (int)nv};
        es_pool_run(es_fast_pool(f), head_worker, &j);
    }
    const float *hidden = es_fast_hidden(f);
    for (int i = 0; i < n_seqs; i++)
        if (seqs[i].embedding)
            es_head_pool(hidden + seq_start[i] * d, (int64_t)seqs[i].n_ids, d, seqs[i].pooling,
                         seqs[i].normalize, seqs[i].embedding);
    if (cb->progress_cb) cb->progress_cb(cb->user, m->hp.n_layer + 1, m->hp.n_layer + 1, T);
done:
    if (chunk) es_free_big(chunk, chunk_bytes);
    free(ids);
    free(seq_start);
    free(rows);
    return st;
}
