/* JSON records of estream score and estream embed: what a record (one JSON object) asks for, as
 * the es_seq sequences es_session_run() needs, and its output fields once they have run. The
 * CLI's JSONL jobs (src/cli/jsonl.c) and the HTTP service (src/serve/) share them, so a record
 * means the same everywhere. A client of include/estream.h and Jansson only.
 *
 * Nothing here exits or prints: a bad record is a record error (rec.error), and so is running
 * out of memory ("out of memory", rec_oom()); an emit that runs out of memory returns false.
 * A record is used by one thread at a time; the functions keep no state of their own. */
#ifndef ES_RECORDS_H
#define ES_RECORDS_H

#include "estream.h"
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One record's sequences: what es_session_run needs, plus the record's first error. */
typedef struct rec {
    char *error;      /* malloc'd one-line message (the first failure wins), NULL when fine;
                       * release it with rec_free (out of memory may leave a static string) */
    es_seq *seqs;     /* [n_seqs], every array in them malloc'd and owned by the record */
    int n_seqs;       /* at most ES_MAX_BATCH_SEQS in a record without error */
    int64_t n_tokens; /* the tokens of all its sequences (sum of n_ids) */
    void *priv;       /* the kind's state (one allocation: rec_free frees it) */
} rec;

/* The message of a record that ran out of memory. */
#define REC_OOM "out of memory"

/* Marks r bad with a formatted message; the first one wins (later calls do nothing). */
void rec_fail(rec *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* r failed for want of memory (its error is REC_OOM), not for what it says. */
bool rec_oom(const rec *r);
/* Frees every array of every es_seq (ids, labels, token_logprob, token_rank, top_ids,
 * top_logprobs, next_ids, next_logprobs, label_logprobs, embedding, logits: free() on each, so a
 * caller may add output arrays of its own, e.g. next_ids, and rec_free releases them), seqs,
 * priv and error; leaves *r zeroed. */
void rec_free(rec *r);
/* Ends a kind's parse: n_tokens, and r failed when it has more than ES_MAX_BATCH_SEQS
 * sequences. Each *_rec_parse calls it. */
void rec_finish(rec *r);

/* Tokenizes text[0..len) as es_tokenize does (add_special: BOS/EOS as the tokenizer asks); a
 * malloc'd array of *n ids (*n may be 0), or NULL with r failed. */
int32_t *rec_tokenize(const es_model *m, rec *r, const char *text, size_t len, int add_special,
                      int parse_special, size_t *n);
/* The ids of a record's "ids" member: a non-empty array of vocabulary ids (malloc'd), or NULL
 * with r failed. */
int32_t *rec_ids(const es_model *m, rec *r, const json_t *ids, size_t *n);
/* Checks a sequence: 1..n_ctx tokens, ids in the vocabulary; false with r failed ("<what> has
 * no tokens", ...). */
bool rec_check_ids(const es_model *m, rec *r, const int32_t *ids, size_t n, const char *what);
/* JSON numbers of a float32 result: a real, or null when it is not finite (NULL: no memory). */
json_t *rec_json_float(double v);

/* Length of the valid UTF-8 character at s[0..n), 0 if none (RFC 3629: no overlongs, no
 * surrogates, at most U+10FFFF); n >= 1. The CLI and the server check their inputs with it. */
size_t rec_utf8_char(const unsigned char *s, size_t n);

/* ---- estream score's records (score_rec.c; the kinds are described there and in the help of
 * estream score) ------------------------------------------------------------------------------ */
#define SCORE_MAX_TOP 20
typedef struct score_opts {
    int top; /* --top: alternatives per position of a text record, 0..SCORE_MAX_TOP */
} score_opts;
/* The records with "gold" and how many of them each rule (chosen, chosen_norm_tokens,
 * chosen_norm_bytes) got right. Zero it to start. */
typedef struct score_tally {
    int64_t n_gold, correct[3];
} score_tally;
/* Parses the record obj into r (zeroed by the caller): its sequences with their output arrays,
 * or r->error for a bad record. Deterministic: the same record gives the same sequences. */
void score_rec_parse(const es_model *m, const score_opts *o, json_t *obj, rec *r);
/* Adds the output fields of r (parsed with the same o, then run) to out, in the order estream
 * score writes them; counts a record with "gold" in t (may be NULL). A record with an error
 * adds nothing. False when memory ran out: out is then incomplete and t unchanged. */
bool score_rec_emit(const es_model *m, const score_opts *o, const rec *r, json_t *out,
                    score_tally *t);
/* The positions the output of r lists one by one (a text or ids record: each position's id,
 * log-prob, greedy flag and alternatives); 0 for the other kinds (a sum per choice or label)
 * and for a record with an error. The server sizes a reply with it. */
size_t score_rec_listed_tokens(const rec *r);
/* Counts an output record written before (its "correct" member), e.g. when a job resumes. */
void score_tally_add_record(score_tally *t, const json_t *out_record);
/* Adds "gold_records" and the accuracy of each rule (acc, acc_norm_tokens, acc_norm_bytes) to
 * sum when t has records with gold; nothing otherwise. */
void score_tally_summary(const score_tally *t, json_t *sum);

/* ---- estream embed's records (embed_rec.c) ------------------------------------------------ */
typedef struct embed_opts {
    es_pooling pooling;
    int normalize; /* 1: L2-normalised */
} embed_opts;
/* Parses {"text": S} or {"ids": [..]} into r (zeroed by the caller): one sequence with its
 * embedding array, or r->error. */
void embed_rec_parse(const es_model *m, const embed_opts *o, json_t *obj, rec *r);
/* Adds "embedding" ([n_embd] floats, [n_tokens][n_embd] with ES_POOLING_NONE) and "n_tokens"
 * of r (parsed with the same o, then run) to out; nothing for a record with an error. False
 * when memory ran out (out incomplete). */
bool embed_rec_emit(const es_model *m, const embed_opts *o, const rec *r, json_t *out);

#endif
