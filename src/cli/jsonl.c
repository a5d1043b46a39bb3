/* The JSONL job driver of estream score and estream embed (cli.h "JSONL jobs").
 *
 * DESIGN
 * - Passes over the input (job_input.c): a scan (count, hash, bound), a sizing pass that parses
 *   every pending record only to size the job (longest record, most sequences, total tokens for
 *   the session and the progress line) and, unless bad records are skipped, to stop on the first
 *   bad one before anything runs; then the run, which parses again. Parsing is deterministic, so
 *   both passes see the same records. A shard keeps the lines whose 0-based index is I mod N
 *   (--shard), or the I-th of N contiguous ranges of ceil(lines/N) lines (--shard-range).
 * - Batches: a window of pending records in input order (about two batches' worth); each batch
 *   is es_batch_pick's choice from it (the first always, then what fits: shorter records fill
 *   the room a long one leaves) and runs with es_session_run_records. Records are written in
 *   input order as soon as every record before them has run, so the output is the same for any
 *   batching (es_session_run's outputs do not depend on the batch) and at rest it is always a
 *   complete prefix of the records (job_output.c writes each batch's lines whole).
 * - Output: one line per record ({"line": N, "id": ..., fields}) written with jansson (compact,
 *   keys in insertion order, 9 significant digits: float32 round-trips). A regular output is
 *   fingerprinted and resumed (job_output.c); a path under /dev/ or /proc/ (/dev/stdout may lead
 *   to a regular file), a FIFO or another device is written in place, appended to: no
 *   fingerprint, no resume.
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
    "  --batch-tokens N   most tokens in one batch (default 2048, or all the job's tokens when\n"
    "                     fewer; under --mem the largest of 4096, 2048, 1024, 512, then halving\n"
    "                     down to the longest record, that fits the budget, and below that\n"
    "                     the smallest budget that works is named). A record is never split;\n"
    "                     one longer than N runs alone, and shorter ones behind a long one\n"
    "                     fill the room it leaves. The output does not depend on N\n"
    "  --max-line-bytes N longest input line (default 16M: K, M, G suffixes); a longer one\n"
    "                     stops the job with its line number before anything runs\n"
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
    "  -t THREADS         compute threads (default: OMP_NUM_THREADS, else one per physical core\n"
    "                     this process may use, within its cgroup CPU quota: estream info\n"
    "                     --system)\n"
    "On a terminal, stderr shows progress (records, records/s, tokens/s, ETA). SIGINT/SIGTERM\n"
    "stop after the batch in progress (the output stays complete; exit 130/143).\n";

/* ---- records -------------------------------------------------------------------------- */

/* Offset of the first byte of s[0..n) that is not valid UTF-8 (overlongs, surrogates and code
 * points past U+10FFFF are invalid), or n. */
static size_t utf8_bad(const unsigned char *s, size_t n)
{
    for (size_t i = 0, k; i < n; i += k)
        if (!(k = rec_utf8_char(s + i, n - i))) return i;
    return n;
}

static bool blank(const char *s, size_t n)
{
    for (size_t p = 0; p < n; p++)
        if (!strchr(" \t\r\f\v", s[p])) return false;
    return true;
}

static bool selected(const cli_job *j, const cli_input *in, int64_t i)
{
    if (!j->shard_n) return true;
    if (!j->shard_range) return i % j->shard_n == j->shard_i;
    const int64_t per = (in->n_lines + j->shard_n - 1) / j->shard_n;
    return i / (per ? per : 1) == j->shard_i;
}

/* The next record of this job (pending, selected, not blank) into r; false at the end. Dies on
 * a bad record unless they are skipped. */
static bool next_record(cli_job *j, cli_input *in, int64_t after, cli_rec *r)
{
    const char *s;
    size_t n;
    while (cli_input_line(in, &s, &n)) {
        const int64_t i = in->line_no - 1;
        if (i + 1 <= after || !selected(j, in, i) || blank(s, n)) continue;
        memset(r, 0, sizeof(*r));
        r->line = i + 1;
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
        if (r->rec.error && !j->skip_errors)
            cli_die("%s:%lld: %s", j->in_path, (long long)r->line, r->rec.error);
        return true;
    }
    return false;
}

static void free_rec(cli_rec *r)
{
    rec_free(&r->rec);
    json_decref(r->id);
    memset(r, 0, sizeof(*r));
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
    else if (!strcmp(s, "--max-line-bytes")) {
        const char *v = cli_value(a, s);
        char *end;
        errno = 0;
        unsigned long long b = strtoull(v, &end, 10);
        const int shift = !strcmp(end, "K") ? 10 : !strcmp(end, "M") ? 20 : !strcmp(end, "G") ? 30
                          : !*end                                     ? 0
                                                                      : -1;
        if (errno || end == v || *v == '-' || shift < 0 || b > (1ull << 32) >> shift ||
            (b <<= shift) < 64)
            cli_die("%s: --max-line-bytes: expected 64 to 4G bytes (K, M, G suffixes), got '%s'",
                    a->cmd, v);
        j->max_line = (size_t)b;
    }
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

/* The session for the job: es_session_create_for_job with the job's shape. */
static es_session *make_session(cli_job *j, const es_job_shape *shape, es_job_size *size,
                                progress *pg)
{
    es_session_params sp = es_session_default_params();
    sp.n_threads = j->n_threads ? j->n_threads : cli_default_threads();
    sp.progress_cb = on_batch_progress; /* a signal stops the job after the batch, so no abort_cb */
    sp.cb_user = pg;
    cli_stream_apply(j->cmd, &j->so, j->model_path, &sp);
    es_tune *tune = cli_stream_tune(j->cmd, &j->so, j->m, j->model_path,
                                    sp.mem_budget_bytes > 0, &sp);
    es_session *s = NULL;
    const es_status st = es_session_create_for_job(j->m, &sp, shape, &s, size);
    es_tune_destroy(tune);
    if (st) cli_die_status(st, j->cmd);
    return s;
}

/* A window of pending records, in input order. */
typedef struct window {
    cli_rec *r;
    size_t n, cap;
    int64_t pending_tokens; /* of the records that have not run */
    int pending_seqs;
} window;

static void push(window *w, const cli_rec *r)
{
    if (w->n == w->cap && !(w->r = realloc(w->r, (w->cap = 2 * w->cap + 64) * sizeof(cli_rec))))
        cli_die("out of memory");
    w->r[w->n++] = *r;
    w->pending_tokens += r->rec.n_tokens;
    w->pending_seqs += r->rec.n_seqs;
}

/* Writes the record's line into the batch's output (or hands it to the command). */
static void emit(cli_job *j, cli_rec *r, cli_output *out)
{
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
        cli_output_add(out, s, strlen(s));
        cli_output_add(out, "\n", 1);
        free(s);
        json_decref(o);
    }
    j->n_records++;
}

int cli_job_run(cli_job *j)
{
    if (!j->in_path) cli_die("%s: no input: give -f IN.jsonl (or -f - for stdin)", j->cmd);
    if (j->out_path && !strcmp(j->out_path, "-")) j->out_path = NULL;
    cli_input in;
    cli_input_open(&in, j->in_path, j->max_line ? j->max_line : CLI_JOB_MAX_LINE);
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
        f = cli_job_fingerprint(j, &in);
        after = cli_job_resume(j, f);
    }
    const int64_t resumed = j->n_records;

    /* pass 1: size the job; stop on the first bad record unless they are skipped */
    es_job_shape shape = {.longest = 1, .most_seqs = 1, .batch_tokens = j->batch_tokens,
                          .head_outputs = !j->no_head};
    int64_t total = 0;
    cli_rec r;
    while (next_record(j, &in, after, &r)) {
        if (!r.rec.error) {
            shape.longest = r.rec.n_tokens > shape.longest ? r.rec.n_tokens : shape.longest;
            shape.most_seqs = r.rec.n_seqs > shape.most_seqs ? r.rec.n_seqs : shape.most_seqs;
            shape.total_tokens += r.rec.n_tokens;
        }
        total++;
        free_rec(&r);
    }

    progress pg = {.on = isatty(2), .t0 = cli_now_ns(), .total = total,
                   .tokens_total = shape.total_tokens};
    es_job_size size = {0};
    es_session *ses = shape.total_tokens > 0 ? make_session(j, &shape, &size, &pg) : NULL;

    int fd = 1;
    if (j->out_path && !j->no_resume) {
        if (regular && after < 0) cli_job_write_meta(j->out_path, f); /* before the first record */
        /* in place (a FIFO, /dev/stdout): appended to, never truncated */
        const int flags = O_WRONLY | O_CREAT | O_CLOEXEC |
                          (after < 0 && regular ? O_TRUNC : O_APPEND);
        if ((fd = open(j->out_path, flags, 0666)) < 0)
            cli_die("cannot open %s: %s", j->out_path, strerror(errno));
    }
    json_decref(f);
    cli_output out;
    cli_output_begin(&out, fd, out_name, regular);

    struct sigaction sa = {.sa_handler = on_stop, .sa_flags = SA_RESETHAND};
    sigemptyset(&sa.sa_mask);
    struct sigaction old_int, old_term;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);

    /* pass 2: batches from a window of about two batches' worth of pending records (a job of
     * bad records alone has no session: they go one by one, as error lines) */
    cli_input_rewind(&in);
    const int64_t batch_tokens = size.batch_tokens > 0 ? size.batch_tokens : 1;
    const int max_seqs = size.max_seqs > 0 ? size.max_seqs : 1;
    window w = {0};
    int64_t *cand_tokens = NULL;
    int *cand_seqs = NULL, *cand = NULL, *pick = NULL;
    es_record **batch = NULL;
    size_t cand_cap = 0;
    bool eof = false;
    const uint64_t t0 = cli_now_ns();
    int64_t tokens_run = 0;
    while (!stop_signal) {
        while (!eof && (w.pending_tokens < 2 * batch_tokens || w.pending_seqs < 2 * max_seqs) &&
               w.n < 4 * (size_t)max_seqs + 64) {
            if (!next_record(j, &in, after, &r)) eof = true;
            else push(&w, &r);
        }
        if (w.n == 0) break;
        if (w.n > cand_cap) {
            cand_cap = w.n;
            cand_tokens = realloc(cand_tokens, cand_cap * sizeof(int64_t));
            cand_seqs = realloc(cand_seqs, cand_cap * sizeof(int));
            cand = realloc(cand, cand_cap * sizeof(int));
            pick = realloc(pick, cand_cap * sizeof(int));
            batch = realloc(batch, cand_cap * sizeof(es_record *));
            if (!cand_tokens || !cand_seqs || !cand || !pick || !batch) cli_die("out of memory");
        }
        int nc = 0;
        for (size_t k = 0; k < w.n; k++)
            if (!w.r[k].done) {
                cand[nc] = (int)k;
                cand_tokens[nc] = w.r[k].rec.n_tokens; /* a bad record: 0, it rides along */
                cand_seqs[nc++] = w.r[k].rec.n_seqs;
            }
        const int np = es_batch_pick(cand_tokens, cand_seqs, nc, batch_tokens, max_seqs, pick);
        int nb = 0;
        int64_t tok = 0;
        for (int p = 0; p < np; p++) {
            cli_rec *x = &w.r[cand[pick[p]]];
            x->done = true;
            w.pending_tokens -= x->rec.n_tokens;
            w.pending_seqs -= x->rec.n_seqs;
            if (!x->rec.error) {
                batch[nb++] = x->rec.r;
                tok += x->rec.n_tokens;
            }
        }
        if (nb > 0) {
            pg.batch_tokens = tok;
            const es_status st = es_session_run_records(ses, batch, nb);
            if (st) cli_die_status(st, j->cmd);
        }
        /* every record up to the first that has not run: written, in input order */
        size_t k = 0;
        while (k < w.n && w.r[k].done) {
            emit(j, &w.r[k], &out);
            free_rec(&w.r[k]);
            pg.done++;
            k++;
        }
        memmove(w.r, w.r + k, (w.n - k) * sizeof(cli_rec));
        w.n -= k;
        cli_output_commit(&out);
        tokens_run += tok;
        pg.tokens_done += tok;
        pg.batch_tokens = 0;
        show(&pg, 1);
    }
    const double secs = (double)(cli_now_ns() - t0) * 1e-9;
    if (pg.on) fputs("\r\033[K", stderr);
    cli_output_end(&out);
    if (fd != 1 && close(fd) != 0) cli_die("cannot write %s: %s", out_name, strerror(errno));
    for (size_t k = 0; k < w.n; k++) free_rec(&w.r[k]); /* stopped by a signal: redone later */
    free(w.r);
    free(cand_tokens);
    free(cand_seqs);
    free(cand);
    free(pick);
    free(batch);
    es_run_stats rs = {0};
    if (ses) es_session_stats(ses, &rs);
    es_session_destroy(ses);
    cli_input_close(&in);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);

    /* summary */
    json_t *sum = json_pack("{s:I,s:I,s:I,s:I,s:f,s:f,s:i}", "records", (json_int_t)j->n_records,
                            "resumed", (json_int_t)resumed, "errors", (json_int_t)j->n_errors,
                            "tokens", (json_int_t)tokens_run, "seconds", secs,
                            "tokens_per_second", secs > 0 ? (double)tokens_run / secs : 0.0,
                            "batch_tokens", size.batch_tokens);
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
        fprintf(stderr, "%s: %lld records (%lld resumed), %lld errors, %lld tokens in %.2f s",
                j->cmd, (long long)j->n_records, (long long)resumed, (long long)j->n_errors,
                (long long)tokens_run, secs);
        if (size.batch_tokens) /* no session was made for a job with nothing to run */
            fprintf(stderr, " (%.1f tokens/s, batches of %d tokens)",
                    secs > 0 ? (double)tokens_run / secs : 0.0, size.batch_tokens);
        else
            fputs(" (nothing to run)", stderr);
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
