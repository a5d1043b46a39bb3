/* Shared helpers of the estream command-line tool: argument parsing, file reading, errors,
 * timing. Only cli/ prints usage or calls exit(). The CLI is a client of include/estream.h
 * alone (tools/check-layers.sh): what it needs from the library is public there; the JSON
 * records of score and embed are records/'s, a client of it too. */
#ifndef ES_CLI_H
#define ES_CLI_H

#include "estream.h"
#include "estream_tools.h" /* the tree's own helpers (not installed, not in the ABI) */
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
/* A text file (a template) of at most 1 MiB, NUL-terminated, without NUL bytes in it; dies with
 * the flag's name otherwise. */
char *cli_read_text(const char *path, const char *flag);
/* The XXH3-64 of s as 16 hex digits (a new JSON string), or JSON null for NULL. */
json_t *cli_text_hash(const char *s);
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
/* Default thread count: the library's (es_session_default_params, core/cpuset.h). */
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
 * be used. Sets sp->tune; free the result with es_tune_destroy() after the session is made. */
es_tune *cli_stream_tune(const char *cmd, const cli_stream *o, const es_model *m,
                         const char *model_path, bool budget, es_session_params *sp);
/* Splits a comma-separated value of flag into at most cap items pointing into *copy (a
 * strdup of list the caller frees); dies on an empty list or too many items. */
int cli_split_list(const char *cmd, const char *flag, const char *list, char **copy,
                   char **items, int cap);
/* A size (es_mem_budget_parse: "600M", "1.5G", "25%" of the file at model_path, plain bytes,
 * and "auto" where allow_auto, said on stderr) for the option named by what ("score: --mem");
 * dies on anything else. cli_budget_bytes: --mem of the command cmd. */
uint64_t cli_size_bytes(const char *what, const char *v, const char *model_path, bool allow_auto);
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

/* ---- JSONL jobs: estream score and estream embed ---------------------------------------------
 * A job reads one JSON record a line (job_input.c: streamed, each line bounded), makes each
 * record with the library's job layer (es_record_create through records/: what a record means
 * is the library's), forms batches with es_batch_pick from a window of pending records (a
 * record never split, shorter records filling the room a long one leaves), runs them with
 * es_session_run_records on a session sized by es_session_create_for_job, and writes one JSON
 * line per record, in input order, each batch's lines whole and fsync'ed (job_output.c: resume
 * through a sidecar OUT.meta fingerprint of model, input and options). jsonl.c drives it:
 * flags, passes, progress, signals, the summary. JSON values are jansson's (json_t). */

/* One record of the job. */
typedef struct cli_rec {
    int64_t line;          /* 1-based line number in the input */
    json_t *id;            /* the record's "id" (a reference the record holds), or NULL */
    rec rec;               /* its es_record or its error: the kind's parse() fills it */
    bool done;             /* it has run (or is an error): ready to be written */
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
    int batch_tokens;        /* 0: chosen (es_session_create_for_job) */
    size_t max_line;         /* --max-line-bytes (0: CLI_JOB_MAX_LINE) */
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

#define CLI_JOB_MAX_LINE ((size_t)16 << 20) /* --max-line-bytes' default */

/* Parses a job flag shared by score and embed (--batch-tokens, --on-error, --shard,
 * --shard-range, --max-line-bytes, --json, -t, streaming flags); false if s is not one. */
bool cli_job_flag(cli_args *a, const char *s, cli_job *j);
extern const char cli_job_help[];
/* Runs the job (opens the model into j->m, which stays open for the caller); exits 1 on a bad
 * record (stop mode) or any failure, 128+signal after SIGINT/SIGTERM. Returns 0. */
int cli_job_run(cli_job *j);

/* The input (job_input.c): lines of at most max_line bytes, read in passes. */
typedef struct cli_input {
    const char *name;        /* the path, or "stdin" */
    FILE *f;                 /* the file, or the temporary copy of a stream */
    size_t max_line;
    uint64_t bytes, hash;    /* the scan: every byte, and their XXH3-64 */
    int64_t n_lines;         /* the scan: lines (a last one without a newline counts) */
    int64_t line_no;         /* lines returned since the last rewind */
    uint64_t offset;         /* bytes consumed through the last line returned */
    bool newline;            /* the last line returned ended with a newline */
    char *chunk;             /* read buffer */
    size_t pos, len;
    char *buf;               /* the current line, NUL-terminated */
    size_t cap;
} cli_input;
/* Opens path ("-": stdin) and scans it (count, hash, bound; a stream is copied to a temporary
 * file); dies with "NAME:LINE: the line is longer than N bytes" past the bound. */
void cli_input_open(cli_input *in, const char *path, size_t max_line);
/* Opens a regular file to read its lines, without a scan; false when it cannot be opened. */
bool cli_input_open_plain(cli_input *in, const char *path, size_t max_line);
/* The next line (without its newline, and a CR before it), valid until the next call; false at
 * the end. */
bool cli_input_line(cli_input *in, const char **line, size_t *len);
void cli_input_rewind(cli_input *in);
void cli_input_close(cli_input *in);

/* The output (job_output.c). */
/* OUT.meta's fingerprint of the job (a new JSON object). */
json_t *cli_job_fingerprint(const cli_job *j, const cli_input *in);
/* Writes the fingerprint to OUT.meta atomically. */
void cli_job_write_meta(const char *out, const json_t *f);
/* An existing output: keeps its complete records (counting them in j, restat for each),
 * truncates the rest; the line of the last one kept (0: none), or -1 for a fresh start (no
 * output, an empty one, or one written in place). Dies on an output without a matching
 * OUT.meta. */
int64_t cli_job_resume(cli_job *j, const json_t *f);
/* Whole batches: lines are added to a buffer and committed with one write loop (and fsync for
 * a regular file); a failed write truncates a regular file back to the records before it. */
typedef struct cli_output {
    int fd;
    const char *name;
    bool regular, sync;
    off_t at_rest;           /* where the pending batch starts */
    char *buf;
    size_t len, cap;
} cli_output;
void cli_output_begin(cli_output *o, int fd, const char *name, bool sync);
void cli_output_add(cli_output *o, const char *s, size_t n);
void cli_output_commit(cli_output *o);
void cli_output_end(cli_output *o); /* commits and frees the buffer; the fd stays open */

int cmd_score(int argc, char **argv);
int cmd_embed(int argc, char **argv);

#endif
