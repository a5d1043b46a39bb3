/*
 * A record's results (include/estream.h es_record_result): running records as one batch, and
 * the numbers derived from their sequences' outputs.
 *
 * DESIGN: sums are in double over the float32 log-probs, in position order; the argmax rules
 * take the first maximum, so ties go to the lowest index; labels are renormalised with a
 * softmax in double over the labels' log-probs (one-token labels: the next token's raw
 * log-prob; longer ones: the continuation's sum). Nothing timed or batch-dependent enters: two
 * runs give the same bits.
 */
#include "job/record.h"

#include "core/util.h"

#include <math.h>
#include <stdlib.h>

/* Sum of q's log-probs from score_from, and whether every scored token was the top one. */
static double seq_sum(const es_seq *q, int *greedy)
{
    double s = 0;
    int g = 1;
    for (size_t i = q->score_from ? q->score_from : 1; i < q->n_ids; i++) {
        s += (double)q->token_logprob[i];
        g = g && q->token_rank[i] == 1;
    }
    if (greedy) *greedy = g;
    return s;
}

static int argmax(const double *v, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i; /* strict: ties go to the lowest index */
    return b;
}

void es_record_finish(es_record *r)
{
    r->ran = true;
    switch (r->kind) {
    case ES_RECORD_TEXT:
    case ES_RECORD_IDS:
    case ES_RECORD_PROMPT: r->sum = seq_sum(&r->seqs[0], NULL); break;
    case ES_RECORD_PAIR: r->sum = seq_sum(&r->seqs[0], &r->greedy); break;
    case ES_RECORD_CHOICES: {
        const int n = r->n_items;
        double best[ES_RECORD_RULES]; /* the best value of each rule so far */
        for (int i = 0; i < n; i++) {
            const es_seq *q = &r->seqs[i];
            const double s = seq_sum(q, NULL);
            r->item_logprobs[i] = s;
            r->item_tokens[i] = (int64_t)(q->n_ids - q->score_from);
            const double v[ES_RECORD_RULES] = {
                s, s / (double)r->item_tokens[i],
                r->item_bytes[i] ? s / (double)r->item_bytes[i] : s};
            for (int k = 0; k < ES_RECORD_RULES; k++)
                if (i == 0 || v[k] > best[k]) { /* strict: ties go to the lowest index */
                    best[k] = v[k];
                    r->chosen[k] = i;
                }
        }
        break;
    }
    case ES_RECORD_LABELS: {
        const int n = r->n_items;
        for (int i = 0; i < n; i++)
            r->item_logprobs[i] = r->one_token ? (double)r->seqs[0].label_logprobs[i]
                                               : seq_sum(&r->seqs[i], NULL);
        double mx = r->item_logprobs[0], z = 0;
        for (int i = 1; i < n; i++) mx = r->item_logprobs[i] > mx ? r->item_logprobs[i] : mx;
        for (int i = 0; i < n; i++) z += exp(r->item_logprobs[i] - mx);
        for (int i = 0; i < n; i++) r->probs[i] = exp(r->item_logprobs[i] - mx) / z;
        r->label = argmax(r->item_logprobs, n);
        break;
    }
    case ES_RECORD_RERANK: /* P(yes) / (P(yes) + P(no)), as 1 / (1 + e^(lp_no - lp_yes)) */
        for (int i = 0; i < r->n_items; i++) {
            const float *lp = r->seqs[i].label_logprobs;
            r->item_logprobs[i] = (double)lp[0];
            r->probs[i] = 1.0 / (1.0 + exp((double)lp[1] - (double)lp[0]));
            r->ranking[i] = i;
        }
        for (int i = 1; i < r->n_items; i++) /* insertion sort: stable, ties keep index order */
            for (int j = i; j > 0 && r->probs[r->ranking[j]] > r->probs[r->ranking[j - 1]]; j--) {
                const int t = r->ranking[j];
                r->ranking[j] = r->ranking[j - 1];
                r->ranking[j - 1] = t;
            }
        r->label = r->ranking[0];
        break;
    case ES_RECORD_EMBED: break;
    }
}

es_status es_record_result_get(const es_record *r, es_record_result *out)
{
    if (!r || !out) return es_fail(ES_E_INVAL, "es_record_result_get: NULL argument");
    if (!r->ran) return es_fail(ES_E_INVAL, "the record has not run (es_session_run_records)");
    *out = (es_record_result){.kind = r->kind, .gold = r->gold};
    const es_seq *q = &r->seqs[0];
    switch (r->kind) {
    case ES_RECORD_TEXT:
    case ES_RECORD_IDS:
    case ES_RECORD_PROMPT: {
        /* an implicit BOS is not the caller's: the results start past it */
        const size_t k = (size_t)r->shift, kt = k * (size_t)r->top;
        out->ids = q->ids + k;
        out->n_ids = q->n_ids - k;
        out->first_scored = 1 - k;
        out->logprobs = q->token_logprob + k;
        out->ranks = q->token_rank + k;
        out->top = r->top;
        out->top_ids = q->top_ids ? q->top_ids + kt : NULL;
        out->top_logprobs = q->top_logprobs ? q->top_logprobs + kt : NULL;
        out->next_top = r->next_top;
        out->next_ids = q->next_ids;
        out->next_logprobs = q->next_logprobs;
        out->sum = r->sum;
        break;
    }
    case ES_RECORD_PAIR:
        out->ids = q->ids;
        out->n_ids = q->n_ids;
        out->first_scored = q->score_from;
        out->logprobs = q->token_logprob;
        out->ranks = q->token_rank;
        out->sum = r->sum;
        out->greedy = r->greedy;
        out->n_tokens = (int64_t)(q->n_ids - q->score_from);
        break;
    case ES_RECORD_CHOICES:
    case ES_RECORD_LABELS:
    case ES_RECORD_RERANK:
        out->n_items = r->n_items;
        out->item_logprobs = r->item_logprobs;
        if (r->kind == ES_RECORD_CHOICES) {
            out->item_tokens = r->item_tokens;
            out->item_bytes = r->item_bytes;
            for (int k = 0; k < ES_RECORD_RULES; k++) out->chosen[k] = r->chosen[k];
        } else {
            out->probs = r->probs;
            out->label = r->label;
            if (r->kind == ES_RECORD_RERANK) out->ranking = r->ranking;
        }
        break;
    case ES_RECORD_EMBED:
        out->ids = q->ids;
        out->n_ids = q->n_ids;
        out->n_tokens = (int64_t)q->n_ids;
        out->embedding = q->embedding;
        out->n_embd = r->n_embd;
        break;
    }
    return ES_OK;
}

es_status es_session_run_records(es_session *s, es_record *const *records, int n)
{
    if (!s || !records || n < 1) return es_fail(ES_E_INVAL, "es_session_run_records: no records");
    int ns = 0;
    for (int i = 0; i < n; i++) {
        if (!records[i]) return es_fail(ES_E_INVAL, "es_session_run_records: record %d is NULL", i);
        if (records[i]->n_seqs > ES_MAX_BATCH_SEQS - ns)
            return es_fail(ES_E_INVAL, "a batch of more than %d sequences", ES_MAX_BATCH_SEQS);
        ns += records[i]->n_seqs;
    }
    /* the records' sequences side by side; the outputs go through their pointers */
    es_seq *seqs = malloc((size_t)ns * sizeof(es_seq));
    if (!seqs) return es_fail(ES_E_NOMEM, "out of memory for a batch of %d sequences", ns);
    for (int i = 0, k = 0; i < n; i++)
        for (int j = 0; j < records[i]->n_seqs; j++) seqs[k++] = records[i]->seqs[j];
    const es_status st = es_session_run(s, seqs, ns);
    free(seqs);
    if (st) return st;
    for (int i = 0; i < n; i++) es_record_finish(records[i]);
    return ES_OK;
}
