/*
 * A record of the job layer (include/estream.h "records, batches and a session sized for a
 * job"): the state record.c builds from a spec and record_result.c reads the results from.
 *
 * DESIGN: one allocation per array, each owned by the record; the sequences point into them, so
 * a batch may copy the es_seq structs (es_session_run writes through their pointers). The
 * derived results (sums, argmaxes, probabilities) are computed once, when es_session_run_records
 * has run the record, into arrays sized at creation: reading them allocates nothing.
 */
#ifndef ES_JOB_RECORD_H
#define ES_JOB_RECORD_H

#include "estream.h"

#include <stdbool.h>

struct es_record {
    es_record_kind kind;
    int n_seqs;
    es_seq *seqs;      /* [n_seqs], arrays owned by the record */
    int64_t n_tokens;  /* all its sequences' */
    int top, next_top; /* TEXT, IDS, PROMPT */
    int shift;         /* IDS, PROMPT: 1 when an implicit BOS precedes the tokens given */
    int n_embd;
    /* CHOICES, LABELS */
    int n_items;
    int gold;
    bool one_token;        /* LABELS: every label one token: one sequence with es_seq.labels */
    int64_t *item_bytes;   /* CHOICES: [n_items] */
    /* results, filled when it has run */
    bool ran;
    double sum;
    int greedy;
    double *item_logprobs; /* [n_items] */
    int64_t *item_tokens;  /* [n_items] */
    double *probs;         /* [n_items] */
    int *ranking;          /* RERANK: [n_items] */
    int chosen[ES_RECORD_RULES];
    int label;
};

/* Computes the derived results of r from its sequences' outputs (record_result.c); sets ran. */
void es_record_finish(es_record *r);

#endif
