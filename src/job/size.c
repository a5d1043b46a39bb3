/*
 * Sizing a session for a job (include/estream.h es_session_create_for_job): the batch budget
 * and sequence count that fit the memory budget. estream score and embed, estream serve and the
 * Python package size their sessions here.
 *
 * DESIGN
 * - The session measures what it needs besides the experts (stream/budget.h) only when it is
 *   made, so each candidate is tried by making it: the first that es_session_create accepts is
 *   the largest that fits. Candidates: 4096, 2048, 1024, 512, then halving while larger than the
 *   longest unit, and last the longest unit alone; each capped at the job's total tokens (a
 *   batch larger than the job would only reserve memory nobody uses).
 * - Sequences: one per 32 tokens of the budget and, from 512 tokens on, at least 64 (each
 *   sequence costs attention a padded block of values per head: 1 MiB on OLMoE-1B-7B, so not
 *   ES_MAX_BATCH_SEQS), always at least the most one unit has. The last candidate (the longest
 *   unit alone) takes exactly that unit's sequences.
 * - The session's max_tokens is the larger of the batch budget and the longest unit: a unit
 *   longer than the budget runs alone (es_batch_pick).
 */
#include "estream.h"

#include "core/util.h"

static int seqs_for(int64_t batch_tokens, int most_seqs)
{
    int64_t n = batch_tokens / 32;
    if (batch_tokens >= 512 && n < 64) n = 64;
    if (n > ES_MAX_BATCH_SEQS) n = ES_MAX_BATCH_SEQS;
    if (n < most_seqs) n = most_seqs;
    return (int)(n < 1 ? 1 : n);
}

typedef struct candidate {
    int64_t tokens;
    int seqs;
} candidate;

es_status es_session_create_for_job(const es_model *m, const es_session_params *p,
                                    const es_job_shape *job, es_session **out, es_job_size *size)
{
    if (out) *out = NULL;
    if (!m || !job || !out) return es_fail(ES_E_INVAL, "es_session_create_for_job: NULL argument");
    const int n_ctx = es_model_n_ctx(m);
    const int64_t longest = job->longest > 0 ? job->longest : n_ctx;
    const int most = job->most_seqs > 0 ? job->most_seqs : 1;
    if (longest > ES_MAX_BATCH_TOKENS || most > ES_MAX_BATCH_SEQS || job->batch_tokens < 0 ||
        job->batch_tokens > ES_MAX_BATCH_TOKENS || job->total_tokens < 0)
        return es_fail(ES_E_INVAL, "a job of %lld-token units with %d sequences, batch %d: out "
                                   "of range", (long long)longest, most, job->batch_tokens);
    es_session_params sp = p ? *p : es_session_default_params();
    sp.head_outputs = job->head_outputs ? 1 : 0;
    /* no batch larger than the whole job, nor smaller than its longest unit needs */
    const int64_t cap = job->total_tokens > 0
                            ? (job->total_tokens > longest ? job->total_tokens : longest)
                            : ES_MAX_BATCH_TOKENS;
    candidate tries[32];
    int n = 0;
    if (job->batch_tokens) {
        tries[n++] = (candidate){job->batch_tokens, seqs_for(job->batch_tokens, most)};
    } else if (!sp.mem_budget_bytes) {
        const int64_t bt = cap < 2048 ? cap : 2048;
        tries[n++] = (candidate){bt, seqs_for(bt, most)};
    } else {
        for (int64_t bt = 4096; bt > longest && n < 30; bt /= 2) {
            const int64_t t = bt < cap ? bt : cap;
            if (n == 0 || t < tries[n - 1].tokens) tries[n++] = (candidate){t, seqs_for(t, most)};
        }
        /* last, the smallest batch that works: the longest unit alone */
        if (n == 0 || longest < tries[n - 1].tokens || most < tries[n - 1].seqs)
            tries[n++] = (candidate){longest, most};
    }
    es_status st = ES_E_BUDGET;
    for (int k = 0; k < n && st == ES_E_BUDGET; k++) {
        sp.max_tokens = (int)(longest > tries[k].tokens ? longest : tries[k].tokens);
        sp.max_seqs = tries[k].seqs;
        st = es_session_create(m, &sp, out);
        if (st == ES_OK && size)
            *size = (es_job_size){(int)tries[k].tokens, sp.max_seqs, sp.max_tokens};
    }
    return st;
}
