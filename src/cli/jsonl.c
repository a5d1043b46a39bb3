/* The JSONL job driver of estream score and estream embed (cli.h "JSONL jobs").
 *
 * DESIGN
 * - Input: the whole file (or stdin) is read into memory and cut into lines; line numbers are
 *   1-based and count blank lines, which produce no record. A shard keeps the lines whose 0-based
 *   index is I mod N (--shard), or the I-th of N contiguous ranges of ceil(lines/N) lines
 *   (--shard-range).
 * - Two passes over the records: the first parses and tokenizes every pending record only to
 *   size the job (longest record, total tokens for the progress line) and, unless bad records
 *   are skipped, to stop on the first bad one before anything runs; the second parses again per
 *   batch and runs. Parsing is deterministic, so both passes see the same sequences.
 * - Batches: records in input order, together at most batch_tokens tokens and max_seqs
 *   sequences (seqs_for); a record is never split, and one longer than the budget runs alone (the session's
 *   max_tokens is the larger of the budget and the longest record). es_session_run's outputs do
 *   not depend on what else is in the batch, so neither does the output file.
 * - Output: one line per record ({"line": N, "id": ..., fields}) written with jansson (compact,
 *   keys in insertion order, 9 significant digits: float32 round-trips), flushed and fsync'ed
 *   after each batch. A regular output file is fingerprinted by OUT.meta (written atomically
 *   before the first record): command, model (path, size, XXH3 of its first and last MiB),
 *   input (path, size, XXH3 of all of it) and the options that change records (paths are
 *   recorded, not compared: files are the same when size and hash are). Started again,
 *   the job keeps the complete records (a line ending in a newline that parses as an object with
 *   "line"), truncates a torn tail and goes on after the last record kept; an output without a
 *   matching OUT.meta is refused, never extended.
 * - A path under /dev/ or /proc/ (/dev/stdout may lead to a regular file), a FIFO or another
 *   device is written in place, appended to: no fingerprint, no resume.
 * - Signals: SIGINT/SIGTERM set a flag (and restore the default action, so a second one kills);
 *   the job stops after the batch in progress is written and exits 128 + the signal.
 */
#include "cli/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define META_FORMAT 1 /* the sidecar's format; a change refuses outputs of older versions */

const char cli_job_help[] =
    "\nbatches, shards, errors and output (score and embed):\n"
    "  -f IN.jsonl        input, one JSON object a line ('-': stdin); blank lines are skipped\n"
    "                     but counted, so \"line\" is always the input's line number\n"
    "  -o OUT             output (default: stdout). A regular file is written record by record\n"
    "                     (flushed and fsync'ed after each batch) with a fingerprint beside it,\n"
    "                     OUT.meta (model, input and the options that change records); the same\n"
    "                     command started again resumes after the last complete record (a torn\n"
    "                     last line is redone), and an OUT not made by this command and input\n"
    "                     is refused\n"
    "  --batch-tokens N   most tokens in one batch (default 2048; under --mem the largest of\n"
    "                     4096, 2048, 1024, 512 that fits the budget); a record is never split,\n"
    "                     one longer than N runs alone. The output does not depend on N\n"
    "  --on-error stop|skip  a bad record (not JSON, not an object, missing or ill-typed\n"
    "                     fields, invalid UTF-8, ids outside the vocabulary, longer than the\n"
    "                     context, empty) stops the job before anything runs with\n"
    "                     'estream: IN:LINE: <what>' and exit 1 (default stop); skip writes\n"
    "                     {\"line\": N, \"id\": ..., \"error\": \"<what>\"} instead and goes on\n"
    "                     (not part of OUT.meta: a job stopped by a bad record may be\n"
    "                     continued with skip)\n"
    "  --shard I/N        only the lines whose 0-based index is I mod N (0 <= I < N)\n"
    "  --shard-range I/N  only the I-th of N contiguous ranges of ceil(lines/N) lines\n"
    "                     (records carry \"line\": merge shard outputs by sorting on it)\n"
    "  --json             the summary as one JSON object (records, resumed, errors, tokens,\n"
    "                     seconds, tokens_per_second, batch_tokens, and the command's own):\n"
    "                     on stdout when -o names a file, else as the last line of stderr\n"
    "  -t THREADS         compute threads (default: all CPUs)\n"
    "On a terminal, stderr shows progress (records, records/s, tokens/s, ETA). SIGINT/SIGTERM\n"
    "stop after the batch in progress (the output stays complete; exit 130/143).\n";

/* ---- small helpers ------------------------------------------------------------------------ */

/* Offset of the first byte of s[0..n) that is not valid UTF-8 (overlongs, surrogates and code
 * points past U+10FFFF are invalid), or n. */
static size_t utf8_bad(const unsigned char *s, size_t n)
{
    for (size_t i = 0, k; i < n; i += k)
        if (!(k = rec_utf8_char(s + i, n - i))) return i;
    return n;
}

/* ---- input -------------------------------------------------------------------------------- */

typedef struct input {
    char *buf;
    size_t len;
    size_t n_lines;
    size_t *start, *end; /* [n_lines]: each line's bytes, newline (and a CR before it) excluded */
} input;

/* Reads f to its end (a pipe, a FIFO, stdin) into a NUL-terminated buffer. */
static char *read_stream(FILE *f, const char *name, size_t *len)
{
    size_t cap = 1 << 16, n = 0, r;
    char *b = malloc(cap + 1);
    if (!b) cli_die("out of memory");
    while ((r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap && !(b = realloc(b, (cap *= 2) + 1))) cli_die("out of memory");
    }
    if (ferror(f)) cli_die("cannot read %s: %s", name, strerror(errno));
    b[n] = 0;
    *len = n;
    return b;
}

static void read_input(const char *path, input *in)
{
    struct stat sb;
    if (!strcmp(path, "-")) {
        in->buf = read_stream(stdin, "stdin", &in->len);
    } else if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode)) {
        /* a pipe or FIFO (-f <(cmd)): read like stdin */
        FILE *f = fopen(path, "rb");
        if (!f) cli_die("cannot open %s: %s", path, strerror(errno));
        in->buf = read_stream(f, path, &in->len);
        fclose(f);
    } else {
        in->buf = cli_read_file(path, (size_t)1 << 40, &in->len);
    }
    size_t cap = 1024;
    in->start = malloc(cap * sizeof(size_t));
    in->end = malloc(cap * sizeof(size_t));
    if (!in->start || !in->end) cli_die("out of memory");
    in->n_lines = 0;
    for (size_t p = 0; p < in->len;) {
        const char *nl = memchr(in->buf + p, '\n', in->len - p);
        size_t e = nl ? (size_t)(nl - in->buf) : in->len;
        if (in->n_lines == cap) {
            cap *= 2;
            if (!(in->start = realloc(in->start, cap * sizeof(size_t))) ||
                !(in->end = realloc(in->end, cap * sizeof(size_t))))
                cli_die("out of memory");
        }
        in->start[in->n_lines] = p;
        in->end[in->n_lines] = e > p && in->buf[e - 1] == '\r' ? e - 1 : e;
        in->n_lines++;
        p = e + 1;
    }
}

static bool blank(const input *in, size_t i)
{
    for (size_t p = in->start[i]; p < in->end[i]; p++)
        if (!strchr(" \t\r\f\v", in->buf[p])) return false;
    return true;
}

static bool selected(const cli_job *j, const input *in, size_t i)
{
    if (!j->shard_n) return true;
    if (!j->shard_range) return i % (size_t)j->shard_n == (size_t)j->shard_i;
    const size_t per = (in->n_lines + (size_t)j->shard_n - 1) / (size_t)j->shard_n;
    return i / (per ? per : 1) == (size_t)j->shard_i;
}

/* Parses line i into r (r->line set). The record's JSON object is released here; id is kept.
 * Dies when memory runs out (a record error of records.h otherwise). */
static void parse_line(cli_job *j, const input *in, size_t i, cli_rec *r)
{
    memset(r, 0, sizeof(*r));
    r->line = (int64_t)i + 1;
    const char *s = in->buf + in->start[i];
    const size_t n = in->end[i] - in->start[i];
    const size_t bad = utf8_bad((const unsigned char *)s, n);
    json_error_t err;
    json_t *o = NULL;
    if (bad < n) rec_fail(&r->rec, "invalid UTF-8 at byte %zu", bad + 1);
    else if (!(o = json_loadb(s, n, 0, &err)))
        rec_fail(&r->rec, "not JSON: %s (column %d)", err.text, err.column);
    else if (!json_is_object(o)) rec_fail(&r->rec, "not a JSON object");
    if (!r->rec.error) {
        json_t *id = json_object_get(o, "id");
        if (id) r->id = json_incref(id);
        j->ops->parse(j, o, &r->rec);
    }
    json_decref(o);
    if (rec_oom(&r->rec)) cli_die("out of memory");
}

static void free_rec(cli_rec *r)
{
    rec_free(&r->rec);
    json_decref(r->id);
    memset(r, 0, sizeof(*r));
}

/* ---- fingerprint and resume --------------------------------------------------------------- */

static uint64_t file_hash_ends(const char *path, uint64_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) cli_die("cannot open %s: %s", path, strerror(errno));
    *size = (uint64_t)sb.st_size;
    const size_t mib = 1 << 20;
    char *b = malloc(2 * mib);
    if (!b) cli_die("out of memory");
    ssize_t a = pread(fd, b, mib, 0), z = 0;
    if (a < 0) cli_die("cannot read %s: %s", path, strerror(errno));
    if (*size > 2 * mib && (z = pread(fd, b + a, mib, (off_t)(*size - mib))) < 0)
        cli_die("cannot read %s: %s", path, strerror(errno));
    const uint64_t h = XXH3_64bits(b, (size_t)(a + z));
    free(b);
    close(fd);
    return h;
}

static json_t *hex64(uint64_t v)
{
    char s[17];
    snprintf(s, sizeof(s), "%016llx", (unsigned long long)v);
    return json_string(s);
}

static json_t *fingerprint(const cli_job *j, const input *in)
{
    uint64_t msize;
    const uint64_t mh = file_hash_ends(j->model_path, &msize);
    json_t *shard = j->shard_n ? json_pack("{s:s,s:i,s:i}", "mode",
                                           j->shard_range ? "range" : "modulo", "index",
                                           (json_int_t)j->shard_i, "count",
                                           (json_int_t)j->shard_n)
                               : json_null();
    json_t *f = json_pack("{s:i,s:s,s:{s:s,s:I,s:o},s:{s:s,s:I,s:o},s:O,s:o}", "format",
                          META_FORMAT, "command", j->cmd, "model", "path", j->model_path, "bytes",
                          (json_int_t)msize, "xxh3_ends", hex64(mh), "input", "path", j->in_path,
                          "bytes", (json_int_t)in->len, "xxh3", hex64(XXH3_64bits(in->buf, in->len)),
                          "options", j->options, "shard", shard);
    if (!f) cli_die("out of memory");
    return f;
}

static char *meta_path(const char *out)
{
    char *p;
    if (asprintf(&p, "%s.meta", out) < 0) cli_die("out of memory");
    return p;
}

/* Writes the fingerprint to OUT.meta atomically (temporary file, fsync, rename). */
static void write_meta(const char *out, const json_t *f)
{
    char *path = meta_path(out);
    char *text = json_dumps(f, JSON_COMPACT);
    if (!text) cli_die("out of memory");
    es_status st = es_outfile_save(path, text, strlen(text));
    if (st) cli_die_status(st, path);
    free(text);
    free(path);
}

/* Which member of the fingerprint differs, for the refusal. Files are compared by size and
 * hash, not path: the same job resumed from another directory or with a moved model goes on. */
static const char *meta_diff(const json_t *want, const json_t *got)
{
    static const char *keys[] = {"format", "command", "options", "shard"};
    static const char *files[][2] = {{"model", "xxh3_ends"}, {"input", "xxh3"}};
    if (!json_is_object(got)) return "its OUT.meta is not a fingerprint";
    for (size_t k = 0; k < CLI_LEN(keys); k++)
        if (!json_equal(json_object_get(want, keys[k]), json_object_get(got, keys[k])))
            return keys[k];
    for (size_t k = 0; k < CLI_LEN(files); k++) {
        const json_t *w = json_object_get(want, files[k][0]), *g = json_object_get(got, files[k][0]);
        if (!json_equal(json_object_get(w, "bytes"), json_object_get(g, "bytes")) ||
            !json_equal(json_object_get(w, files[k][1]), json_object_get(g, files[k][1])))
            return files[k][0];
    }
    return NULL;
}

/* An existing output: keeps its complete records, truncates the rest. Returns the line of the
 * last record kept (0: none) and calls restat for each. Refuses an output without a matching
 * OUT.meta. Returns -1 when the output is missing or empty (a fresh start). */
static int64_t resume(cli_job *j, const json_t *f)
{
    struct stat sb;
    if (stat(j->out_path, &sb) != 0) {
        if (errno != ENOENT) cli_die("%s: %s", j->out_path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) return -1; /* a FIFO or /dev/stdout: written in place, no resume */
    char *mp = meta_path(j->out_path);
    json_error_t err;
    json_t *got = json_load_file(mp, 0, &err);
    if (sb.st_size == 0) {
        json_decref(got);
        free(mp);
        return -1;
    }
    const char *diff = got ? meta_diff(f, got) : "it has no OUT.meta";
    if (diff)
        cli_die("%s: %s exists and was not made by this command (%s%s); remove it or choose "
                "another -o", j->cmd, j->out_path, got ? "different " : "", diff);
    json_decref(got);
    free(mp);
    size_t len;
    char *text = cli_read_file(j->out_path, (size_t)1 << 40, &len);
    size_t keep = 0;
    int64_t last = 0;
    for (size_t p = 0; p < len;) {
        const char *nl = memchr(text + p, '\n', len - p);
        if (!nl) break; /* torn: no newline */
        json_t *r = json_loadb(text + p, (size_t)(nl - (text + p)), 0, &err);
        json_t *line = r ? json_object_get(r, "line") : NULL;
        if (!json_is_integer(line) || json_integer_value(line) <= last) {
            json_decref(r);
            break;
        }
        last = json_integer_value(line);
        j->n_records++;
        if (json_object_get(r, "error")) j->n_errors++;
        if (j->ops->restat) j->ops->restat(j, r);
        json_decref(r);
        keep = p = (size_t)(nl - text) + 1;
    }
    free(text);
    if (keep < len) {
        if (truncate(j->out_path, (off_t)keep) != 0)
            cli_die("%s: cannot truncate its torn end: %s", j->out_path, strerror(errno));
        fprintf(stderr, "estream: %s: %zu bytes after the last complete record removed\n",
                j->out_path, len - keep);
    }
    return last;
}

/* ---- progress, signals -------------------------------------------------------------------- */

static volatile sig_atomic_t stop_signal;

static void on_stop(int sig)
{
    stop_signal = sig; /* SA_RESETHAND: a second signal takes the default action */
}

typedef struct progress {
    bool on;
    uint64_t t0, last;
    int64_t done, total, tokens_done, tokens_total, batch_tokens;
} progress;

static void show(progress *p, double frac)
{
    const uint64_t now = cli_now_ns();
    if (!p->on || (frac < 1 && now - p->last < 200000000ull)) return;
    p->last = now;
    const double s = (double)(now - p->t0) * 1e-9;
    const double tok = (double)p->tokens_done + frac * (double)p->batch_tokens;
    const double tps = s > 0 ? tok / s : 0, rps = s > 0 ? (double)p->done / s : 0;
    const double eta = tps > 0 ? ((double)p->tokens_total - tok) / tps : 0;
    fprintf(stderr, "\r\033[K%lld/%lld records, %.1f records/s, %.0f tokens/s, ETA %d:%02d",
            (long long)p->done, (long long)p->total, rps, tps, (int)(eta / 60), (int)eta % 60);
}

static void on_batch_progress(void *user, int done, int n, int64_t tokens)
{
    (void)tokens;
    show(user, n ? (double)done / n : 0);
}

/* ---- the job ------------------------------------------------------------------------------ */

bool cli_job_flag(cli_args *a, const char *s, cli_job *j)
{
    if (cli_stream_flag(a, s, &j->so)) return true;
    if (!strcmp(s, "-m") || !strcmp(s, "--model")) j->model_path = cli_value(a, s);
    else if (!strcmp(s, "-f") || !strcmp(s, "--file")) j->in_path = cli_value(a, s);
    else if (!strcmp(s, "-o") || !strcmp(s, "--output")) j->out_path = cli_value(a, s);
    else if (!strcmp(s, "--batch-tokens"))
        j->batch_tokens = (int)cli_int(s, cli_value(a, s), 1, ES_MAX_BATCH_TOKENS);
    else if (!strcmp(s, "-t") || !strcmp(s, "--threads"))
        j->n_threads = (int)cli_int(s, cli_value(a, s), 1, ES_MAX_THREADS);
    else if (!strcmp(s, "--json")) j->json = true;
    else if (!strcmp(s, "--on-error")) {
        const char *v = cli_value(a, s);
        if (!strcmp(v, "skip")) j->skip_errors = true;
        else if (!strcmp(v, "stop")) j->skip_errors = false;
        else cli_die("%s: --on-error: expected stop or skip, got '%s'", a->cmd, v);
    } else if (!strcmp(s, "--shard") || !strcmp(s, "--shard-range")) {
        const char *v = cli_value(a, s);
        long long i, n;
        char tail;
        if (sscanf(v, "%lld/%lld%c", &i, &n, &tail) != 2 || n < 1 || n > 1000000 || i < 0 ||
            i >= n)
            cli_die("%s: %s: expected I/N with 0 <= I < N, got '%s'", a->cmd, s, v);
        j->shard_i = (int)i;
        j->shard_n = (int)n;
        j->shard_range = !strcmp(s, "--shard-range");
    } else return false;
    return true;
}

/* Sequences per batch for a budget of batch_tokens: one per 32 tokens, at least 64 (the
 * library's default) and at least the largest record's. Each costs the attention a block of
 * values per head (n_kv x d_v x 128 floats: 1 MiB on OLMoE-1B-7B), so not ES_MAX_BATCH_SEQS. */
static int seqs_for(int batch_tokens, int most_seqs)
{
    int n = batch_tokens / 32 > 64 ? batch_tokens / 32 : 64;
    n = n > ES_MAX_BATCH_SEQS ? ES_MAX_BATCH_SEQS : n;
    return most_seqs > n ? most_seqs : n;
}

/* Creates the session: the given budget, or under --mem the largest of 4096..512 that fits;
 * *max_seqs the sequences a batch may hold. */
static es_session *make_session(cli_job *j, int64_t longest, int most_seqs, int *budget,
                                int *max_seqs, progress *pg)
{
    es_session_params sp = es_session_default_params();
    sp.n_threads = j->n_threads ? j->n_threads : cli_default_threads();
    sp.head_outputs = !j->no_head;
    sp.progress_cb = on_batch_progress; /* a signal stops the job after the batch, so no abort_cb */
    sp.cb_user = pg;
    cli_stream_apply(j->cmd, &j->so, j->model_path, &sp);
    es_tune *tune = cli_stream_tune(j->cmd, &j->so, j->m, j->model_path,
                                    sp.mem_budget_bytes > 0, &sp);
    static const int tries[] = {4096, 2048, 1024, 512};
    const bool search = !j->batch_tokens && sp.mem_budget_bytes > 0;
    es_session *s = NULL;
    es_status st = ES_OK;
    for (size_t k = 0; k < (search ? CLI_LEN(tries) : 1); k++) {
        *budget = j->batch_tokens ? j->batch_tokens : search ? tries[k] : 2048;
        sp.max_tokens = (int)(longest > *budget ? longest : *budget);
        sp.max_seqs = *max_seqs = seqs_for(*budget, most_seqs);
        st = es_session_create(j->m, &sp, &s);
        if (st != ES_E_BUDGET) break;
    }
    es_tune_free(tune);
    if (st) cli_die_status(st, j->cmd);
    return s;
}

static void write_all(FILE *f, const char *what, const char *s, size_t n)
{
    if (fwrite(s, 1, n, f) != n) cli_die("cannot write %s: %s", what, strerror(errno));
}

int cli_job_run(cli_job *j)
{
    if (!j->in_path) cli_die("%s: no input: give -f IN.jsonl (or -f - for stdin)", j->cmd);
    if (j->out_path && !strcmp(j->out_path, "-")) j->out_path = NULL;
    input in;
    read_input(j->in_path, &in);
    j->m = cli_open_model(j->model_path, 0);
    const char *out_name = j->out_path ? j->out_path : "stdout";

    /* a FIFO or a character device (/dev/stdout) is written in place: no fingerprint, no resume */
    struct stat osb;
    const bool in_place = j->out_path && (!strncmp(j->out_path, "/dev/", 5) ||
                                          !strncmp(j->out_path, "/proc/", 6));
    const bool regular = j->out_path && !j->no_resume && !in_place &&
                         (stat(j->out_path, &osb) != 0 || S_ISREG(osb.st_mode));
    json_t *f = NULL;
    int64_t after = -1;
    if (regular) {
        f = fingerprint(j, &in);
        after = resume(j, f);
    }
    const int64_t resumed = j->n_records;

    /* pass 1: size the job; stop on the first bad record unless they are skipped */
    int64_t longest = 1, total = 0, tokens_total = 0;
    int most_seqs = 1; /* the most sequences one record needs */
    for (size_t i = 0; i < in.n_lines; i++) {
        if ((int64_t)i + 1 <= after || !selected(j, &in, i) || blank(&in, i)) continue;
        cli_rec r;
        parse_line(j, &in, i, &r);
        const rec *q = &r.rec;
        if (q->error && !j->skip_errors)
            cli_die("%s:%lld: %s", j->in_path, (long long)r.line, q->error);
        if (!q->error) {
            longest = q->n_tokens > longest ? q->n_tokens : longest;
            most_seqs = q->n_seqs > most_seqs ? q->n_seqs : most_seqs;
            tokens_total += q->n_tokens;
        }
        total++;
        free_rec(&r);
    }

    progress pg = {.on = isatty(2), .t0 = cli_now_ns(), .total = total,
                   .tokens_total = tokens_total};
    int budget = 0, max_seqs = 0;
    es_session *ses = total > 0 ? make_session(j, longest, most_seqs, &budget, &max_seqs, &pg)
                                : NULL;

    FILE *out = stdout;
    if (j->out_path && !j->no_resume) {
        if (regular && after < 0) write_meta(j->out_path, f); /* before the first record */
        /* in place (a FIFO, /dev/stdout): appended to, never truncated */
        out = fopen(j->out_path, after < 0 && regular ? "w" : "a");
        if (!out) cli_die("cannot open %s: %s", j->out_path, strerror(errno));
    }
    json_decref(f);

    struct sigaction sa = {.sa_handler = on_stop, .sa_flags = SA_RESETHAND};
    sigemptyset(&sa.sa_mask);
    struct sigaction old_int, old_term;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);

    cli_rec *batch = NULL;
    es_seq *seqs = NULL;
    size_t batch_cap = 0, seqs_cap = 0;
    const uint64_t t0 = cli_now_ns();
    int64_t tokens_run = 0;
    size_t i = 0;
    while (i < in.n_lines && !stop_signal) {
        /* gather one batch */
        size_t nb = 0, ns = 0;
        int64_t tok = 0;
        for (; i < in.n_lines; i++) {
            if ((int64_t)i + 1 <= after || !selected(j, &in, i) || blank(&in, i)) continue;
            cli_rec r;
            parse_line(j, &in, i, &r);
            const rec *q = &r.rec;
            if (!q->error && nb > 0 &&
                (tok + q->n_tokens > budget || ns + (size_t)q->n_seqs > (size_t)max_seqs)) {
                free_rec(&r);
                break; /* line i starts the next batch */
            }
            if (q->error && !j->skip_errors)
                cli_die("%s:%lld: %s", j->in_path, (long long)r.line, q->error);
            if (nb == batch_cap && !(batch = realloc(batch, (batch_cap = 2 * batch_cap + 16) *
                                                                 sizeof(cli_rec))))
                cli_die("out of memory");
            batch[nb++] = r;
            if (!r.rec.error) {
                tok += r.rec.n_tokens;
                ns += (size_t)r.rec.n_seqs;
            }
        }
        if (nb == 0) break;
        if (ns > 0) {
            if (ns > seqs_cap && !(seqs = realloc(seqs, (seqs_cap = ns) * sizeof(es_seq))))
                cli_die("out of memory");
            size_t k = 0;
            for (size_t b = 0; b < nb; b++)
                for (int q = 0; !batch[b].rec.error && q < batch[b].rec.n_seqs; q++)
                    seqs[k++] = batch[b].rec.seqs[q];
            pg.batch_tokens = tok;
            es_status st = es_session_run(ses, seqs, (int)ns);
            if (st) cli_die_status(st, j->cmd);
            k = 0; /* outputs went to the records' own arrays; copy back the structs anyway */
            for (size_t b = 0; b < nb; b++)
                for (int q = 0; !batch[b].rec.error && q < batch[b].rec.n_seqs; q++)
                    batch[b].rec.seqs[q] = seqs[k++];
        }
        for (size_t b = 0; b < nb; b++) {
            cli_rec *r = &batch[b];
            json_t *o = NULL;
            if (!j->no_resume) {
                o = json_object();
                json_object_set_new(o, "line", json_integer((json_int_t)r->line));
                if (r->id) json_object_set(o, "id", r->id);
            }
            if (r->rec.error) {
                if (o) json_object_set_new(o, "error", json_string(r->rec.error));
                j->n_errors++;
            } else if (!j->ops->emit(j, &r->rec, o)) {
                cli_die("out of memory");
            }
            if (o) {
                char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
                if (!s) cli_die("out of memory");
                write_all(out, out_name, s, strlen(s));
                write_all(out, out_name, "\n", 1);
                free(s);
                json_decref(o);
            }
            j->n_records++;
            pg.done++;
            free_rec(r);
        }
        if (fflush(out) != 0) cli_die("cannot write %s: %s", out_name, strerror(errno));
        if (regular && fsync(fileno(out)) != 0 && errno != EINVAL)
            cli_die("cannot write %s: %s", out_name, strerror(errno));
        tokens_run += tok;
        pg.tokens_done += tok;
        pg.batch_tokens = 0;
        show(&pg, 1);
    }
    const double secs = (double)(cli_now_ns() - t0) * 1e-9;
    if (pg.on) fputs("\r\033[K", stderr);
    if (out != stdout && fclose(out) != 0) cli_die("cannot write %s: %s", out_name, strerror(errno));
    free(batch);
    free(seqs);
    es_run_stats rs = {0};
    if (ses) es_session_stats(ses, &rs);
    es_session_destroy(ses);
    free(in.buf);
    free(in.start);
    free(in.end);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);

    /* summary */
    json_t *sum = json_pack("{s:I,s:I,s:I,s:I,s:f,s:f,s:i}", "records", (json_int_t)j->n_records,
                            "resumed", (json_int_t)resumed, "errors", (json_int_t)j->n_errors,
                            "tokens", (json_int_t)tokens_run, "seconds", secs,
                            "tokens_per_second", secs > 0 ? (double)tokens_run / secs : 0.0,
                            "batch_tokens", budget);
    if (j->ops->summary) j->ops->summary(j, sum);
    json_object_set_new(sum, "peak_rss_bytes", json_integer((json_int_t)es_peak_rss_bytes()));
    if (rs.streaming) {
        json_object_set_new(sum, "budget_bytes", json_integer((json_int_t)rs.budget_bytes));
        json_object_set_new(sum, "other_bytes", json_integer((json_int_t)rs.other_bytes));
        json_object_set_new(sum, "other_measured_bytes",
                            json_integer((json_int_t)cli_other_measured(&rs)));
        json_object_set_new(sum, "arena_bytes", json_integer((json_int_t)rs.arena_bytes));
    }
    if (stop_signal) json_object_set_new(sum, "interrupted", json_true());
    if (j->json) {
        char *s = json_dumps(sum, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
        FILE *to = j->out_path && !in_place ? stdout : stderr; /* never mixed with records */
        fprintf(to, "%s\n", s);
        fflush(to);
        free(s);
    } else {
        fprintf(stderr, "%s: %lld records (%lld resumed), %lld errors, %lld tokens in %.2f s "
                "(%.1f tokens/s, batches of %d tokens)", j->cmd, (long long)j->n_records,
                (long long)resumed, (long long)j->n_errors, (long long)tokens_run, secs,
                secs > 0 ? (double)tokens_run / secs : 0.0, budget);
        const char *key;
        json_t *v;
        json_object_foreach(sum, key, v) {
            if (!strncmp(key, "acc", 3) && json_is_real(v))
                fprintf(stderr, ", %s %.4f", key, json_real_value(v));
        }
        fputc('\n', stderr);
        if (rs.streaming)
            fprintf(stderr, "%s: memory: budget %.0f MiB = %.1f MiB other (estimated; %.1f MiB "
                    "measured) + arena %.1f MiB; peak RSS %.1f MiB\n", j->cmd,
                    (double)rs.budget_bytes / (1 << 20), (double)rs.other_bytes / (1 << 20),
                    (double)cli_other_measured(&rs) / (1 << 20),
                    (double)rs.arena_bytes / (1 << 20), (double)es_peak_rss_bytes() / (1 << 20));
    }
    json_decref(sum);
    if (stop_signal) {
        fprintf(stderr, "estream: %s: stopped by signal %d after a complete batch; run the same "
                "command again to resume\n", j->cmd, (int)stop_signal);
        exit(128 + stop_signal);
    }
    return 0;
}
