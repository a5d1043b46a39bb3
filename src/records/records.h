/* JSON records of estream score and estream embed: a record (one JSON object) as the library's
 * es_record_spec (what a record means is the library's: src/job/record.c), and its output fields
 * once it has run. The CLI's JSONL jobs (src/cli/jsonl.c) and the HTTP service (src/serve/)
 * share them, so a record reads the same everywhere. A client of include/estream.h and Jansson
 * only.
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

/* One record: the library's es_record (its sequences and outputs) made from a JSON object, or
 * the record's first error. */
typedef struct rec {
    char *error;        /* malloc'd one-line message (the first failure wins), NULL when fine;
                         * release it with rec_free (out of memory may leave a static string) */
    es_record *r;       /* the record (NULL with an error) */
    const es_seq *seqs; /* its sequences (es_record_seqs), NULL with an error */
    int n_seqs;         /* es_record_n_seqs */
    int64_t n_tokens;   /* es_record_n_tokens */
    void *priv;         /* the kind's state (one allocation: rec_free frees it) */
} rec;

/* The message of a record that ran out of memory. */
#define REC_OOM "out of memory"

/* Marks r bad with a formatted message; the first one wins (later calls do nothing). */
void rec_fail(rec *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* r failed for want of memory (its error is REC_OOM), not for what it says. */
bool rec_oom(const rec *r);
/* Destroys the record, priv and error; leaves *r zeroed. */
void rec_free(rec *r);
/* Makes r's es_record from spec (es_record_create): its sequences and counts, or r failed with
 * the library's message. */
void rec_make(const es_model *m, const es_record_spec *spec, rec *r);

/* Tokenizes text[0..len) as es_tokenize does (add_special: BOS/EOS as the tokenizer asks); a
 * malloc'd array of *n ids (*n may be 0), or NULL with r failed. */
int32_t *rec_tokenize(const es_model *m, rec *r, const char *text, size_t len, int add_special,
                      int parse_special, size_t *n);
/* The ids of a record's "ids" member: a non-empty array of vocabulary ids (malloc'd), or NULL
 * with r failed. */
int32_t *rec_ids(const es_model *m, rec *r, const json_t *ids, size_t *n);
/* JSON numbers of a float32 result: a real, or null when it is not finite (NULL: no memory). */
json_t *rec_json_float(double v);

/* Length of the valid UTF-8 character at s[0..n), 0 if none (RFC 3629: no overlongs, no
 * surrogates, at most U+10FFFF); n >= 1. The CLI and the server check their inputs with it. */
size_t rec_utf8_char(const unsigned char *s, size_t n);

/* ---- chats (chat_rec.c) ---------------------------------------------------------------- */
/* A "messages" list read from JSON: es_chat_message values (roles static, contents owned). */
typedef struct rec_chat {
    es_chat_message *msgs;
    int n;
} rec_chat;
/* Reads messages (OpenAI's chat shape: role one of system, developer, user, assistant, tool;
 * content a string, null or text parts joined with newlines) into c; false with the message
 * (naming the field, "messages[2].role ...") in err. */
bool rec_chat_parse(const json_t *messages, rec_chat *c, char *err, size_t ecap);
void rec_chat_free(rec_chat *c);

/* ---- estream score's records (score_rec.c; the kinds are the library's: include/estream.h and
 * estream score --help) ----------------------------------------------------------------------- */
#define SCORE_MAX_TOP 20
typedef struct score_opts {
    int top;         /* --top: alternatives per position of a text record, 0..SCORE_MAX_TOP */
    int next_top;    /* the best next tokens after a text record (the server's completions) */
    es_bos_rule bos; /* ids records (and prompts): include/estream.h's BOS rule */
    bool prompts;    /* {"text"} is a prompt (ES_RECORD_PROMPT: a completion's), not a text */
    const char *chat_template;   /* {"messages"} records (NULL: the model's) */
    const char *rerank_template; /* {"query", "documents"} records (NULL: Qwen3-Reranker's) */
    int chat_top;    /* {"messages"} without labels: the best next tokens (0: 10) */
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
/* At most the positions the output of r lists one by one (a text or ids record: each position's
 * id, log-prob, greedy flag and alternatives; a chat: its next tokens); 0 for a record with an
 * error. An upper bound (a pair's scored positions count though it writes their sum): the
 * server sizes a reply with it. */
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
