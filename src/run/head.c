/*
 * The head's arithmetic on one row of logits and the pooling of hidden states (head.h).
 */
#include "run/head.h"

#include "core/util.h"

#include <math.h>
#include <string.h>

double es_head_lse(const float *logits, int n)
{
    float mx = logits[0];
    for (int i = 1; i < n; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += exp((double)logits[i] - (double)mx);
    return (double)mx + log(sum);
}

int32_t es_head_rank(const float *logits, int n, int32_t target)
{
    const float lt = logits[target];
    int32_t before = 0;
    for (int i = 0; i < target; i++) before += logits[i] >= lt;
    for (int i = target + 1; i < n; i++) before += logits[i] > lt;
    return before + 1;
}

/* a before b in the top list */
static int better(const float *l, int32_t a, int32_t b)
{
    return l[a] > l[b] || (l[a] == l[b] && a < b);
}

void es_head_top(const float *logits, int n, double lse, int k, int32_t *ids, float *lp)
{
    if (k <= 0) return;
    /* ids[0..m) sorted best first; a candidate better than the worst kept is inserted. k is
     * small (<= a few dozen), so insertion beats a heap and keeps the order for free. */
    int m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (m == k && !better(logits, i, ids[k - 1])) continue;
        int j = m < k ? m++ : k - 1;
        while (j > 0 && better(logits, i, ids[j - 1])) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = i;
    }
    for (int j = 0; j < k; j++) lp[j] = (float)((double)logits[ids[j]] - lse);
}

static void normalize_row(float *v, int64_t d)
{
    double ss = 0.0;
    for (int64_t i = 0; i < d; i++) ss += (double)v[i] * (double)v[i];
    if (ss <= 0.0) return;
    const double inv = 1.0 / sqrt(ss);
    for (int64_t i = 0; i < d; i++) v[i] = (float)((double)v[i] * inv);
}

void es_head_pool(const float *x, int64_t n_rows, int64_t d, es_pooling pooling, int normalize,
                  float *out)
{
    if (pooling == ES_POOLING_NONE) {
        memcpy(out, x, sizeof(float) * (size_t)(n_rows * d));
        for (int64_t r = 0; normalize && r < n_rows; r++) normalize_row(out + r * d, d);
        return;
    }
    if (pooling == ES_POOLING_MEAN) {
        for (int64_t i = 0; i < d; i++) {
            double s = 0.0;
            for (int64_t r = 0; r < n_rows; r++) s += x[r * d + i];
            out[i] = (float)(s / (double)n_rows);
        }
    } else {
        const int64_t r = pooling == ES_POOLING_FIRST ? 0 : n_rows - 1;
        memcpy(out, x + r * d, sizeof(float) * (size_t)d);
    }
    if (normalize) normalize_row(out, d);
}

int es_head_wants_scores(const es_seq *q)
{
    return q->token_logprob || q->token_rank || q->top_n > 0;
}

int es_head_row_wanted(const es_seq *q, int64_t r)
{
    const int64_t n = (int64_t)q->n_ids;
    if (q->logits && (q->all_logits || r == n - 1)) return 1;
    if (r == n - 1 && (q->next_top_k > 0 || q->n_labels > 0)) return 1;
    return r + 1 < n && r + 1 >= (int64_t)q->score_from && es_head_wants_scores(q);
}

void es_head_row_outputs(es_seq *q, int64_t r, const float *logits, int n_vocab)
{
    const int64_t n = (int64_t)q->n_ids;
    const double lse = es_head_lse(logits, n_vocab);
    if (q->logits && (q->all_logits || r == n - 1))
        memcpy(q->logits + (q->all_logits ? r : 0) * n_vocab, logits,
               sizeof(float) * (size_t)n_vocab);
    if (r + 1 < n && r + 1 >= (int64_t)q->score_from) {
        const int32_t t = q->ids[r + 1];
        if (q->token_logprob) q->token_logprob[r + 1] = (float)((double)logits[t] - lse);
        if (q->token_rank) q->token_rank[r + 1] = es_head_rank(logits, n_vocab, t);
        if (q->top_n > 0)
            es_head_top(logits, n_vocab, lse, q->top_n, q->top_ids + (r + 1) * q->top_n,
                        q->top_logprobs + (r + 1) * q->top_n);
    }
    if (r == n - 1) {
        es_head_top(logits, n_vocab, lse, q->next_top_k, q->next_ids, q->next_logprobs);
        if (q->n_labels > 0) {
            double mx = -INFINITY, sum = 0.0; /* log-sum-exp over the labels */
            for (int j = 0; j < q->n_labels; j++)
                mx = logits[q->labels[j]] > mx ? logits[q->labels[j]] : mx;
            for (int j = 0; j < q->n_labels; j++) sum += exp((double)logits[q->labels[j]] - mx);
            const double l2 = mx + log(sum) - lse;
            for (int j = 0; j < q->n_labels; j++) {
                const double lp = (double)logits[q->labels[j]] - lse;
                q->label_logprobs[j] = (float)(q->renormalize ? lp - l2 : lp);
            }
        }
    }
}

es_status es_head_check(es_seq *q, int i, int n_vocab, int n_ctx)
{
    if (!q->ids || q->n_ids == 0)
        return es_fail(ES_E_INVAL, "sequence %d: no tokens", i);
    if (q->n_ids > (size_t)n_ctx)
        return es_fail(ES_E_INVAL, "sequence %d: %zu tokens exceed the model's context of %d", i,
                       q->n_ids, n_ctx);
    for (size_t j = 0; j < q->n_ids; j++)
        if (q->ids[j] < 0 || q->ids[j] >= n_vocab)
            return es_fail(ES_E_INVAL, "sequence %d: token id %d at position %zu is outside the "
                           "vocabulary [0, %d)", i, q->ids[j], j, n_vocab);
    if (q->score_from == 0) q->score_from = 1;
    if (q->score_from > q->n_ids)
        return es_fail(ES_E_INVAL, "sequence %d: score_from %zu is past its %zu tokens", i,
                       q->score_from, q->n_ids);
    if (q->top_n < 0 || q->top_n > ES_MAX_TOP || (q->top_n && (!q->top_ids || !q->top_logprobs)))
        return es_fail(ES_E_INVAL, "sequence %d: top_n %d needs top_ids and top_logprobs and is "
                       "at most %d", i, q->top_n, ES_MAX_TOP);
    if (q->next_top_k < 0 || q->next_top_k > ES_MAX_TOP ||
        (q->next_top_k && (!q->next_ids || !q->next_logprobs)))
        return es_fail(ES_E_INVAL, "sequence %d: next_top_k %d needs next_ids and "
                       "next_logprobs and is at most %d", i, q->next_top_k, ES_MAX_TOP);
    if (q->next_top_k > n_vocab || q->top_n > n_vocab)
        return es_fail(ES_E_INVAL, "sequence %d: more alternatives than the %d tokens", i,
                       n_vocab);
    if (q->n_labels < 0 || (q->n_labels && (!q->labels || !q->label_logprobs)))
        return es_fail(ES_E_INVAL, "sequence %d: %d labels need labels and label_logprobs", i,
                       q->n_labels);
    for (int j = 0; j < q->n_labels; j++)
        if (q->labels[j] < 0 || q->labels[j] >= n_vocab)
            return es_fail(ES_E_INVAL, "sequence %d: label %d is token %d, outside the "
                           "vocabulary [0, %d)", i, j, q->labels[j], n_vocab);
    if (q->pooling < ES_POOLING_NONE || q->pooling > ES_POOLING_LAST)
        return es_fail(ES_E_INVAL, "sequence %d: unknown pooling %d", i, (int)q->pooling);
    if ((q->normalize != 0 && q->normalize != 1) || (q->all_logits != 0 && q->all_logits != 1) ||
        (q->renormalize != 0 && q->renormalize != 1))
        return es_fail(ES_E_INVAL, "sequence %d: normalize, renormalize and all_logits are 0 or "
                       "1", i);
    /* scored positions start as "not scored" */
    for (size_t j = 0; j < q->score_from; j++) {
        if (q->token_logprob) q->token_logprob[j] = NAN;
        if (q->token_rank) q->token_rank[j] = 0;
    }
    return ES_OK;
}

const char *es_pooling_name(es_pooling p)
{
    switch (p) {
    case ES_POOLING_NONE: return "none";
    case ES_POOLING_MEAN: return "mean";
    case ES_POOLING_FIRST: return "first";
    case ES_POOLING_LAST: return "last";
    }
    return "unknown";
}
