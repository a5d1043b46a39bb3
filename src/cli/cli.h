/* Shared helpers of the estream command-line tool: argument parsing, file reading, errors,
 * timing. Only cli/ prints usage or calls exit(). The CLI is a client of include/estream.h
 * alone (tools/check-layers.sh): what it needs from the library is public there; the JSON
 * records of score and embed are records/'s, a client of it too. */
#ifndef ES_CLI_H
#define ES_CLI_H

#include "estream.h"
#include "records/records.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Prints "estream: <message>" on stderr and exits 1. */
_Noreturn void cli_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Dies with es_last_error() (or the status name) prefixed by what. */
_Noreturn void cli_die_status(es_status st, const char *what);

/* Argument cursor: cli_next_value() takes the value after a flag or dies. */
typedef struct cli_args { int argc, i; char **argv; const char *cmd; } cli_args;
const char *cli_value(cli_args *a, const char *flag);
long long cli_int(const char *flag, const char *s, long long lo, long long hi);
_Noreturn void cli_unknown(const cli_args *a, const char *arg);

/* Reads a whole regular file (at most max_bytes) into a malloc'd NUL-terminated buffer. */
char *cli_read_file(const char *path, size_t max_bytes, size_t *len);
/* Parses whitespace-separated token ids; dies on anything else. */
int32_t *cli_read_ids(const char *path, size_t *n);
/* Prompt text from -p or -f (exactly one must be given). */
char *cli_prompt(const char *text, const char *file, size_t *len);
/* Tokenizes the text; dies on error. */
int32_t *cli_tokenize(const es_model *m, const char *text, size_t len, bool add_special,
                      bool parse_special, size_t *n);
/* Opens a model or dies. */
es_model *cli_open_model(const char *path, unsigned flags);
/* Elements of an array. */
#define CLI_LEN(a) (sizeof(a) / sizeof((a)[0]))
/* Monotonic clock in nanoseconds (timing.c). */
uint64_t cli_now_ns(void);
/* The median of v[0..n)'s finite values (NAN when there is none). Moves the finite values to
 * the front of v, sorted in increasing order (timing.c). */
double cli_median(double *v, int n);
/* A macro's value as a string literal, for help texts ("1.." CLI_XSTR(ES_MAX_THREADS)). */
#define CLI_STR(x) #x
#define CLI_XSTR(x) CLI_STR(x)
/* Default thread count: online CPUs, at most ES_MAX_THREADS (what the library accepts). */
int cli_default_threads(void);
/* Writes s as a JSON string literal (quotes included) to f. */
void cli_json_str(FILE *f, const char *s, size_t len);
/* This machine for people (estream info --system, bench): CPU, features, caches. */
void cli_print_system(FILE *f);
/* The same as JSON members ("cpu": ..., "cpu_features": ...), no braces, for result rows. */
void cli_system_json(FILE *f);

/* --mem, --groups, --banks, --qd, --policy, --io-limit, --io-backend, --no-direct,
 * --no-verify, --trace (stream_opts.c): prefill, ppl and bench take them. */
typedef struct cli_stream {
    const char *mem;    /* as given; resolved against the model file by cli_stream_apply */
    int groups, banks, qd;
    es_io_backend io_backend;
    es_policy policy;
    bool policy_set, no_direct, no_verify;
    double io_limit_mbps;
    const char *trace;
    const char *tune;   /* --tune FILE or "none"; NULL: MODEL.tune when it exists */
} cli_stream;
extern const char cli_stream_help[];
/* Consumes a streaming flag (and its value) if s is one; false otherwise. */
bool cli_stream_flag(cli_args *a, const char *s, cli_stream *o);
/* Fills the session's streaming fields; dies on a bad --mem. */
void cli_stream_apply(const char *cmd, const cli_stream *o, const char *model_path,
                      es_session_params *sp);
/* The tuning (estream tune) a run with a budget (budget: one is given) and no
 * --groups/--banks/--qd uses: --tune
 * FILE, or MODEL.tune when it exists. Says on stderr which file it uses, or why a tuning that
 * exists does not apply (then NULL: the default rule); dies if an explicit --tune FILE cannot
 * be used. Sets sp->tune; free the result with es_tune_free() after the session is made. */
es_tune *cli_stream_tune(const char *cmd, const cli_stream *o, const es_model *m,
                         const char *model_path, bool budget, es_session_params *sp);
/* Splits a comma-separated value of flag into at most cap items pointing into *copy (a
 * strdup of list the caller frees); dies on an empty list or too many items. */
int cli_split_list(const char *cmd, const char *flag, const char *list, char **copy,
                   char **items, int cap);
/* "600M", "1.5G", "25%" (of the file at model_path), plain bytes; dies on anything else. */
uint64_t cli_budget_bytes(const char *cmd, const char *v, const char *model_path);
int cli_policy(const char *v, es_policy *out); /* 0, or -1 for an unknown name */
/* What the run used besides the arena: its peak resident memory less the arena. */
uint64_t cli_other_measured(const es_run_stats *st);
/* The run's streaming summary: text lines, or JSON fields (no braces) after a comma. */
void cli_stream_print(FILE *f, const es_run_stats *st, bool json);

int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_prefill(int argc, char **argv);
int cmd_ppl(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_pack(int argc, char **argv);
int cmd_tune(int argc, char **argv);
int cmd_serve(int argc, char **argv);

/* ---- JSONL jobs (jsonl.c): estream score and estream embed --------------------------------
 * A job reads one JSON record a line, packs the records in input order into batches of at most
 * batch_tokens tokens (a record's sequences never split), runs each batch with es_session_run()
 * and writes one JSON line per record, in input order, flushed and fsync'ed after each batch.
 * The command supplies the record kinds through cli_job_ops (what a record means is
 * records/records.h's, shared with the HTTP service); the driver does input, shards, resume (a
 * sidecar OUT.meta fingerprints model, input and options), errors, progress, signals and the
 * summary. JSON values are jansson's (json_t). */

/* One record of a batch. */
typedef struct cli_rec {
    int64_t line;          /* 1-based line number in the input */
    json_t *id;            /* the record's "id" (a reference the record holds), or NULL */
    rec rec;               /* its sequences or its error: the kind's parse() fills it */
} cli_rec;

typedef struct cli_job cli_job;
typedef struct cli_job_ops {
    /* Parses the object o into r (zeroed): a *_rec_parse of records.h. Called twice per record
     * (a sizing pass, then the run), so it must be deterministic. */
    void (*parse)(cli_job *j, json_t *o, rec *r);
    /* Adds the record's output fields to out (after "line" and "id"); out is NULL when the
     * command collects the output itself (embed to .npy). False: out of memory. */
    bool (*emit)(cli_job *j, const rec *r, json_t *out);
    /* A complete record already in the output when a job resumes (for the summary); may be
     * NULL. */
    void (*restat)(cli_job *j, const json_t *out_record);
    /* Adds the command's summary fields (accuracy) to sum; may be NULL. */
    void (*summary)(cli_job *j, json_t *sum);
} cli_job_ops;

struct cli_job {
    /* set by the command before cli_job_run */
    const char *cmd, *model_path, *in_path, *out_path;
    int batch_tokens;        /* 0: chosen (2048 resident, under a budget the largest that fits) */
    bool skip_errors;        /* --on-error skip */
    int shard_i, shard_n;    /* --shard I/N (shard_n 0: no shard) */
    bool shard_range;        /* --shard-range I/N */
    bool json;               /* --json summary */
    bool no_resume;          /* the output is written at the end by the command (.npy) */
    bool no_head;            /* the records ask nothing of the head (embeddings) */
    int n_threads;
    cli_stream so;
    json_t *options;         /* the options that change the output (fingerprint); the job owns it */
    const cli_job_ops *ops;
    void *ctx;               /* the command's state */
    /* set by the driver */
    es_model *m;
    int64_t n_records;       /* records written (resumed ones included) */
    int64_t n_errors;
};

/* Parses a job flag shared by score and embed (--batch-tokens, --on-error, --shard,
 * --shard-range, --json, -t, streaming flags); false if s is not one. */
bool cli_job_flag(cli_args *a, const char *s, cli_job *j);
extern const char cli_job_help[];
/* Runs the job (opens the model into j->m, which stays open for the caller); exits 1 on a bad
 * record (stop mode) or any failure, 128+signal after SIGINT/SIGTERM. Returns 0. */
int cli_job_run(cli_job *j);

int cmd_score(int argc, char **argv);
int cmd_embed(int argc, char **argv);

#endif
