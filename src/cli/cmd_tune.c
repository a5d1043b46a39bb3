/* estream tune: the configurator (docs/design.md §7). Characterizes the storage, profiles one request
 * per candidate group size, chooses (G, B, Q) for each budget with the pipeline model, stores
 * the tuning beside the model; --sweep runs every feasible configuration end to end (the
 * oracle) and reports the regret; --explain compares predicted and measured layer times. */
#include "cli/cli.h"

#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char help[] =
    "usage: estream tune -m MODEL --mem BUDGET[,BUDGET...] [--calib FILE] [--tokens N]\n"
    "                    [--groups 1,2,4,8,16] [--io-limit MBPS[,MBPS...]] [-t THREADS]\n"
    "                    [--out FILE] [--json] [--sweep] [--reps N] [--explain] [--no-cache]\n"
    "\n"
    "Chooses the expert arena (G experts per bank, B banks) and the reads in flight (Q) for\n"
    "each memory budget, so that `estream prefill|ppl|bench --mem BUDGET` runs near the best\n"
    "configuration without being told one (docs/design.md §6-7):\n"
    "  1. the storage: grouped O_DIRECT reads of the model at depths 1, 2, 4, 8 for each G\n"
    "     (cached per device in ~/.cache/estream); Q0 = the smallest depth within 5 % of the\n"
    "     best for every G;\n"
    "  2. one profiling request per G on a calibration prompt: per layer the non-expert time,\n"
    "     per expert group its compute and checksum times and routes; the memory besides the\n"
    "     arena (M_other) is measured on the smallest G;\n"
    "  3. for each budget and G, every bank count that fits and every depth up to it are\n"
    "     evaluated with the pipeline's max-plus recurrence; the fastest (G, B, Q) wins (the\n"
    "     smallest arena among those within 0.1 %).\n"
    "The profiles and choices are written to MODEL.tune (never into the model). prefill, ppl\n"
    "and bench with --mem and no --groups/--banks/--qd use it when it is there (and say so),\n"
    "re-selecting for their own budget, prompt length and --io-limit in milliseconds.\n"
    "\n"
    "  --mem LIST       budgets: 600M, 1.5G, 25% (of the model file), comma-separated\n"
    "  --calib FILE     calibration text (default: an English text built into estream)\n"
    "  --tokens N       calibration prompt length (default 1024, at most the context); the\n"
    "                   text is repeated when it is shorter\n"
    "  --groups LIST    candidate experts per bank (default 1,2,4,8,16, those <= the experts\n"
    "                   per layer; at most 8 sizes)\n"
    "  --io-limit LIST  storage regimes to choose for, MB/s, 0 = the device as it is\n"
    "                   (default 0); every budget is chosen for each\n"
    "  -t THREADS       compute threads (default: OMP_NUM_THREADS, else one per physical core\n"
    "                   this process may use, within its cgroup CPU quota); a tuning applies to\n"
    "                   that count\n"
    "  --out FILE       where to write the tuning (default MODEL.tune)\n"
    "  --json           one JSON object: tune_seconds, q0, other_bytes, storage, rows\n"
    "  --no-cache       measure the storage again even if it is cached\n"
    "  --explain        run each chosen configuration once and print, per layer, the\n"
    "                   recurrence's predicted completion time against the measured one\n"
    "                   (a table: not with --json)\n"
    "  --sweep          the oracle: run every feasible configuration end to end (G in the\n"
    "                   candidates, B in 1, 2, 4, ... and the most that fit, Q in 1, 2, 4, 8\n"
    "                   up to B), then time the oracle's best, the configurator's choice and\n"
    "                   the default --mem path REPS times each, interleaved, and report the\n"
    "                   regret (chosen median / oracle median - 1, 0 when they are the same\n"
    "                   configuration or the choice was faster) and the time each method took.\n"
    "                   JSON rows: budget_bytes, io_limit, chosen {groups, banks, qd, seconds,\n"
    "                   predicted_seconds, peak_rss_bytes}, oracle {groups, banks, qd,\n"
    "                   seconds}, default {...}, regret, sweep_runs, sweep_seconds; top level\n"
    "                   tune_seconds, sweep_seconds\n"
    "  --reps N         timed repetitions of the sweep's final comparison (default 3)\n"
    "Progress goes to stderr on a terminal; Ctrl-C leaves no partial tune file.\n";

#define MAX_LIST 16

typedef struct tune_opts {
    const char *model, *calib, *out;
    const char *mem_list, *io_list, *groups_list;
    uint64_t budgets[MAX_LIST];
    int n_budgets;
    double io[MAX_LIST]; /* bytes/s, 0 none */
    int n_io;
    int groups[ES_TUNE_MAX_G], n_groups;
    int n_threads, tokens, reps;
    bool json, sweep, explain, no_cache;
} tune_opts;

static void parse_lists(tune_opts *o, const es_model *m)
{
    char *items[MAX_LIST], *s = NULL;
    o->n_budgets = cli_split_list("tune", "--mem", o->mem_list, &s, items, MAX_LIST);
    for (int i = 0; i < o->n_budgets; i++) {
        uint64_t b;
        if (!strcmp(items[i], "auto") && es_mem_budget_parse("auto", o->model, &b) == ES_OK && !b)
            cli_die("tune: --mem auto: the model runs resident here, with nothing to tune; give a "
                    "budget below the model file's size");
        o->budgets[i] = cli_budget_bytes("tune", items[i], o->model);
    }
    free(s);
    o->n_io = 1;
    o->io[0] = 0;
    if (o->io_list) {
        o->n_io = cli_split_list("tune", "--io-limit", o->io_list, &s, items, MAX_LIST);
        for (int i = 0; i < o->n_io; i++) {
            char *end;
            const double v = strtod(items[i], &end);
            if (end == items[i] || *end || !(v >= 0) || v > 1e7)
                cli_die("tune: --io-limit: expected MB/s (0 = none), got '%s'", items[i]);
            o->io[i] = v * 1e6;
        }
        free(s);
    }
    const int E = es_model_n_expert(m);
    if (!o->groups_list) {
        static const int def[] = {1, 2, 4, 8, 16};
        for (size_t i = 0; i < CLI_LEN(def); i++)
            if (def[i] <= E) o->groups[o->n_groups++] = def[i];
        return;
    }
    o->n_groups = cli_split_list("tune", "--groups", o->groups_list, &s, items, ES_TUNE_MAX_G);
    for (int i = 0; i < o->n_groups; i++) {
        o->groups[i] = (int)cli_int("--groups", items[i], 1, E);
        for (int k = 0; k < i; k++)
            if (o->groups[k] == o->groups[i])
                cli_die("tune: --groups: %d is given twice", o->groups[i]);
    }
    free(s);
}

/* The calibration prompt: the text, repeated until it has `want` tokens, cut there. */
static int32_t *calib_ids(const tune_opts *o, const es_model *m, int want, size_t *n)
{
    size_t len = 0;
    char *text = o->calib ? cli_read_file(o->calib, (size_t)64 << 20, &len)
                          : strdup(es_tune_calib_text());
    if (!text) cli_die("out of memory");
    if (!o->calib) len = strlen(text);
    if (len == 0) cli_die("tune: the calibration text %s is empty", o->calib);
    for (int rep = 1;; rep *= 2) {
        char *buf = malloc(len * (size_t)rep + 1);
        if (!buf) cli_die("out of memory");
        for (int r = 0; r < rep; r++) memcpy(buf + len * (size_t)r, text, len);
        buf[len * (size_t)rep] = 0;
        int32_t *ids = cli_tokenize(m, buf, len * (size_t)rep, true, false, n);
        free(buf);
        if (*n >= (size_t)want) {
            *n = (size_t)want;
            free(text);
            return ids;
        }
        free(ids);
        if (rep >= 1 << 16) cli_die("tune: the calibration text gives too few tokens");
    }
}

static bool progress_on;
static void progress(void *user, const char *phase, int done, int total)
{
    (void)user;
    if (!progress_on) return;
    if (done >= total)
        fprintf(stderr, "\r\033[K");
    else
        fprintf(stderr, "\r\033[Ktune: %s %d/%d", phase, done + 1, total);
    fflush(stderr);
}

/* The profile of G in d (NULL when there is none). */
static const es_tune_profile_desc *profile_of(const es_tune_desc *d, int G)
{
    for (int i = 0; i < d->n_profiles; i++)
        if (d->profiles[i].groups == G) return &d->profiles[i];
    return NULL;
}

/* One end-to-end run of the calibration prompt with the arena G x B and depth Q, or (tune
 * given, G/B/Q 0) the default --mem path. */
typedef struct run_result {
    double seconds;
    uint64_t peak;
    es_run_stats stats;
} run_result;

static es_status run_once(const es_model *m, const tune_opts *o, const int32_t *ids, size_t n,
                          uint64_t budget, double io, int G, int B, int Q, const es_tune *tune,
                          run_result *out)
{
    /* An explicit arena runs without the session's budget check (the configurator's B_max
     * already applied it); the default path (tune) gets the budget and chooses. */
    es_session_params sp = es_session_default_params();
    sp.n_threads = o->n_threads;
    sp.max_tokens = (int)n;
    sp.mem_budget_bytes = tune ? budget : 0;
    sp.groups = G;
    sp.banks = B;
    sp.queue_depth = Q;
    sp.io_limit_bytes_per_s = io;
    sp.tune = tune;
    malloc_trim(0); /* freed heap from earlier runs would count as this one's M_other */
    es_peak_rss_reset();
    es_session *s = NULL;
    es_status st = es_session_create(m, &sp, &s);
    if (st == ES_E_BUDGET && tune) return st; /* the default path refused the budget */
    if (st) cli_die_status(st, "tune");
    float *logits = malloc(sizeof(float) * (size_t)es_model_n_vocab(m));
    if (!logits) cli_die("out of memory");
    const uint64_t t0 = cli_now_ns();
    if ((st = es_session_prefill(s, ids, n, 0, logits))) cli_die_status(st, "tune");
    out->seconds = (double)(cli_now_ns() - t0) * 1e-9;
    out->peak = es_peak_rss_bytes();
    es_session_stats(s, &out->stats);
    free(logits);
    es_session_destroy(s);
    return ES_OK;
}

static void explain(const es_model *m, const tune_opts *o, const es_tune *t,
                    const es_tune_choice *c, const int32_t *ids, size_t n)
{
    const int cap = es_model_n_layer(m);
    es_tune_layer_times *l = calloc((size_t)cap, sizeof(*l));
    if (!l) cli_die("out of memory");
    int n_layers = 0;
    es_tune_explain_result r;
    es_status st = es_tune_explain(m, t, c, ids, n, o->n_threads, l, cap, &n_layers, &r);
    if (st) cli_die_status(st, "tune");
    printf("\nexplain: budget %.0f MiB%s, G %d, B %d, Q %d\n", (double)c->budget / (1 << 20),
           c->io_limit > 0 ? " (io-limit)" : "", c->groups, c->banks, c->qd);
    printf("  layer  predicted ms  measured ms   diff   reads: model ms  profile ms\n");
    for (int w = 0; w < n_layers; w++) {
        const double pred = l[w].predicted_seconds, meas = l[w].measured_seconds;
        printf("  %5d  %12.1f  %11.1f  %+5.1f%%  %14.1f  %10.1f\n", w, pred * 1e3, meas * 1e3,
               meas > 0 ? 100.0 * (pred / meas - 1) : 0.0, l[w].model_read_seconds * 1e3,
               l[w].profile_read_seconds * 1e3);
    }
    printf("  total  %12.1f  %11.1f  %+5.1f%%  (bubbles %.1f%% measured)\n",
           r.predicted_seconds * 1e3, r.measured_seconds * 1e3,
           100.0 * (r.predicted_seconds / r.measured_seconds - 1), 100.0 * r.bubble_rate);
    free(l);
}

/* ---- the sweep ---- */

typedef struct sweep_row {
    es_tune_choice chosen;
    int og, ob, oq;                      /* the oracle's best */
    double oracle_single;                /* its single sweep run */
    double chosen_med, oracle_med, default_med, regret;
    int dg, db, dq;                      /* what the default --mem path chose */
    uint64_t chosen_peak, default_peak;
    int runs, over_budget;
    double seconds;
} sweep_row;

/* A JSON number, or null for NaN/infinity (which JSON cannot hold). */
static void json_num(double v)
{
    if (isfinite(v)) printf("%.6f", v);
    else printf("null");
}

static void sweep_one(const es_model *m, const tune_opts *o, const es_tune *t,
                      const int32_t *ids, size_t n, sweep_row *row)
{
    const es_tune_choice *c = &row->chosen;
    es_tune_desc d;
    es_tune_describe(t, &d);
    const uint64_t t_begin = cli_now_ns();
    double best = INFINITY;
    run_result *r = calloc(1, sizeof(*r));
    if (!r) cli_die("out of memory");
    int total = 0; /* count first, for the progress line */
    for (int pass = 0; pass < 2; pass++) {
        int done = 0;
        for (int i = 0; i < d.n_profiles; i++) {
            const int G = d.profiles[i].groups;
            const int64_t bmax = es_tune_bank_limit(t, G, c->budget);
            for (int64_t b = 1; b <= bmax; b = b * 2 > bmax && b < bmax ? bmax : b * 2) {
                for (int q = 0; q < ES_TUNE_N_DEPTHS && d.depths[q] <= b; q++) {
                    if (pass == 0) {
                        total++;
                        continue;
                    }
                    if (progress_on) {
                        fprintf(stderr, "\r\033[Ktune: sweep %.0f MiB: %d/%d (G %d, B %lld, Q %d)",
                                (double)c->budget / (1 << 20), done + 1, total, G,
                                (long long)b, d.depths[q]);
                        fflush(stderr);
                    }
                    run_once(m, o, ids, n, c->budget, c->io_limit, G, (int)b, d.depths[q], NULL,
                             r);
                    done++;
                    row->runs++;
                    if (r->peak > c->budget) row->over_budget++;
                    /* the oracle: the fastest run that kept its budget */
                    if (r->peak <= c->budget && r->seconds < best) {
                        best = r->seconds;
                        row->og = G;
                        row->ob = (int)b;
                        row->oq = d.depths[q];
                    }
                }
            }
        }
    }
    row->oracle_single = best;
    row->seconds = (double)(cli_now_ns() - t_begin) * 1e-9;
    if (!isfinite(best)) { /* every run went over the budget: nothing to compare */
        row->regret = NAN;
        free(r);
        return;
    }
    /* the final comparison: chosen, oracle, default path, interleaved */
    double *tc = calloc((size_t)o->reps, sizeof(double));
    double *to = calloc((size_t)o->reps, sizeof(double));
    double *td = calloc((size_t)o->reps, sizeof(double));
    if (!tc || !to || !td) cli_die("out of memory");
    for (int k = 0; k < o->reps; k++) {
        if (progress_on) {
            fprintf(stderr, "\r\033[Ktune: comparing %d/%d", k + 1, o->reps);
            fflush(stderr);
        }
        run_once(m, o, ids, n, c->budget, c->io_limit, c->groups, c->banks, c->qd, NULL, r);
        tc[k] = r->seconds;
        row->chosen_peak = r->peak > row->chosen_peak ? r->peak : row->chosen_peak;
        run_once(m, o, ids, n, c->budget, c->io_limit, row->og, row->ob, row->oq, NULL, r);
        to[k] = r->seconds;
        if (run_once(m, o, ids, n, c->budget, c->io_limit, 0, 0, 0, t, r) != ES_OK) {
            /* this process's M_other grew past the budget (a sanitizer's allocator, say) */
            fprintf(stderr, "estream: tune: the default --mem path refused %.0f MiB here: %s\n",
                    (double)c->budget / (1 << 20), es_last_error());
            td[k] = NAN;
            continue;
        }
        td[k] = r->seconds;
        row->dg = r->stats.groups;
        row->db = r->stats.banks;
        row->dq = r->stats.queue_depth;
        row->default_peak = r->peak > row->default_peak ? r->peak : row->default_peak;
    }
    if (progress_on) fprintf(stderr, "\r\033[K");
    row->chosen_med = cli_median(tc, o->reps);
    row->oracle_med = cli_median(to, o->reps);
    row->default_med = cli_median(td, o->reps);
    const int same = row->og == c->groups && row->ob == c->banks && row->oq == c->qd;
    row->regret = same ? 0 : fmax(0, row->chosen_med / row->oracle_med - 1);
    free(tc);
    free(to);
    free(td);
    free(r);
}

static void print_choice_json(const char *key, int G, int B, int Q, double secs)
{
    printf("\"%s\": {\"groups\": %d, \"banks\": %d, \"qd\": %d, \"seconds\": ", key, G, B, Q);
    json_num(secs);
}

int cmd_tune(int argc, char **argv)
{
    tune_opts o = {.n_threads = cli_default_threads(), .tokens = 1024, .reps = 3};
    cli_args a = {argc, 0, argv, "tune"};
    for (a.i = 1; a.i < argc; a.i++) {
        const char *s = argv[a.i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            fputs(help, stdout);
            return 0;
        } else if (!strcmp(s, "-m")) o.model = cli_value(&a, s);
        else if (!strcmp(s, "--mem")) o.mem_list = cli_value(&a, s);
        else if (!strcmp(s, "--calib")) o.calib = cli_value(&a, s);
        else if (!strcmp(s, "--tokens")) o.tokens = (int)cli_int(s, cli_value(&a, s), 2, 1 << 20);
        else if (!strcmp(s, "--groups")) o.groups_list = cli_value(&a, s);
        else if (!strcmp(s, "--io-limit")) o.io_list = cli_value(&a, s);
        else if (!strcmp(s, "-t")) o.n_threads = (int)cli_int(s, cli_value(&a, s), 1, ES_MAX_THREADS);
        else if (!strcmp(s, "--out")) o.out = cli_value(&a, s);
        else if (!strcmp(s, "--json")) o.json = true;
        else if (!strcmp(s, "--sweep")) o.sweep = true;
        else if (!strcmp(s, "--reps")) o.reps = (int)cli_int(s, cli_value(&a, s), 1, 100);
        else if (!strcmp(s, "--explain")) o.explain = true;
        else if (!strcmp(s, "--no-cache")) o.no_cache = true;
        else cli_unknown(&a, s);
    }
    if (!o.model) cli_die("tune: -m MODEL is required (see estream tune --help)");
    if (!o.mem_list) cli_die("tune: --mem BUDGET[,BUDGET...] is required (see estream tune --help)");
    if (o.explain && o.json) cli_die("tune: --explain prints a table; leave out --json");
    es_model *m = cli_open_model(o.model, 0);
    if (es_model_n_expert(m) < 1) cli_die("tune: %s has no experts to stream", o.model);
    parse_lists(&o, m);
    if (o.tokens > es_model_n_ctx(m)) o.tokens = es_model_n_ctx(m);
    size_t n = 0;
    int32_t *ids = calib_ids(&o, m, o.tokens, &n);
    char *out = o.out ? strdup(o.out) : es_tune_default_path(o.model);
    if (!out) cli_die("out of memory");
    progress_on = isatty(2);

    es_tune_run_params rp = {.ids = ids, .n_ids = n, .groups = o.groups, .n_groups = o.n_groups,
                             .n_threads = o.n_threads, .io_backend = ES_IO_AUTO,
                             .direct_io = 1, .no_cache = o.no_cache, .progress = progress};
    es_tune *t = NULL;
    es_status st = es_tune_run(m, &rp, &t);
    if (st) cli_die_status(st, "tune");
    /* selection for every budget x regime */
    const uint64_t s0 = cli_now_ns();
    es_tune_choice infeasible[MAX_LIST * MAX_LIST];
    int n_infeasible = 0;
    for (int i = 0; i < o.n_budgets; i++)
        for (int k = 0; k < o.n_io; k++) {
            es_tune_choice c;
            st = es_tune_choose(t, o.budgets[i], o.io[k], &c); /* t keeps it */
            if (st == ES_E_BUDGET) { /* reported with the smallest budget that works */
                infeasible[n_infeasible++] = c;
                continue;
            }
            if (st) cli_die_status(st, "tune");
        }
    const double select_seconds = (double)(cli_now_ns() - s0) * 1e-9;
    if ((st = es_tune_save(t, out)))
        cli_die("tune: cannot write %s: %s (choose another place with --out FILE)", out,
                es_last_error());
    es_tune_desc d; /* what t holds now: the profiles and the choices kept */
    es_tune_describe(t, &d);
    const uint64_t other = d.select_other_bytes;
    const double tune_seconds = d.profile_seconds + select_seconds;

    if (!o.json) {
        printf("model:      %s (%d tokens of calibration, %d threads, %s kernels)\n", o.model,
               (int)n, d.n_threads, d.kernels);
        printf("cpu:        %s\n", d.cpu);
        printf("storage:    MB/s at depth");
        for (int q = 0; q < ES_TUNE_N_DEPTHS; q++) printf(" %6d", d.depths[q]);
        printf("   (Q0 = %d)\n", d.q0);
        for (int i = 0; i < d.n_profiles; i++) {
            const es_tune_profile_desc *p = &d.profiles[i];
            printf("   G %2d  %6.1f MiB", p->groups, (double)p->bank_bytes / (1 << 20));
            for (int q = 0; q < ES_TUNE_N_DEPTHS; q++)
                printf(" %6.0f", p->bytes_per_second[q] / 1e6);
            printf("   profile %.2f s\n", p->seconds);
        }
        printf("M_other:    %.0f MiB measured on G %d (estimate %.0f MiB)\n",
               (double)d.other_bytes / (1 << 20), d.profiles[0].groups,
               (double)d.other_estimate_bytes / (1 << 20));
        printf("\n  budget  io-limit    G     B   Q   arena MiB  predicted s  tokens/s\n");
        for (int i = 0; i < d.n_choices; i++) {
            const es_tune_choice *c = &d.choices[i];
            char io[32] = "-";
            if (c->io_limit > 0) snprintf(io, sizeof(io), "%.0f MB/s", c->io_limit / 1e6);
            const es_tune_profile_desc *p = profile_of(&d, c->groups);
            printf("%6.0fM  %8s  %3d  %4d  %2d  %10.0f  %11.3f  %8.1f\n",
                   (double)c->budget / (1 << 20), io, c->groups, c->banks, c->qd,
                   (double)c->banks * (double)p->bank_bytes / (1 << 20), c->predicted,
                   (double)n / c->predicted);
        }
        for (int i = 0; i < n_infeasible; i++)
            printf("%6.0fM  too small: %.0f MiB besides the experts; the smallest budget that "
                   "works is %.0f MiB\n",
                   (double)infeasible[i].budget / (1 << 20), (double)other / (1 << 20),
                   (double)infeasible[i].min_budget / (1 << 20));
        printf("\ntuned in %.1f s (selection %.2f ms); wrote %s\n", tune_seconds,
               select_seconds * 1e3, out);
    }
    if (o.explain)
        for (int i = 0; i < d.n_choices; i++) explain(m, &o, t, &d.choices[i], ids, n);

    sweep_row *rows = calloc((size_t)d.n_choices, sizeof(sweep_row));
    if (!rows) cli_die("out of memory");
    double sweep_seconds = 0;
    if (o.sweep) {
        if (!o.json)
            printf("\nsweep (%d reps of the final comparison)\n"
                   "  budget  io-limit   runs  sweep s   oracle G/B/Q  median s   chosen G/B/Q"
                   "  median s  predicted  regret   default G/B/Q  median s  peak MiB\n",
                   o.reps);
        for (int i = 0; i < d.n_choices; i++) {
            sweep_row *row = &rows[i];
            row->chosen = d.choices[i];
            sweep_one(m, &o, t, ids, n, row);
            sweep_seconds += row->seconds;
            if (o.json) continue;
            const es_tune_choice *c = &row->chosen;
            char io[32] = "-";
            if (c->io_limit > 0) snprintf(io, sizeof(io), "%.0f MB/s", c->io_limit / 1e6);
            printf("%6.0fM  %8s  %5d  %7.1f   %3d/%3d/%d  %8.3f   %3d/%3d/%d  %8.3f  %9.3f  "
                   "%5.2f%%   %3d/%3d/%d  %8.3f  %8.0f%s\n",
                   (double)c->budget / (1 << 20), io, row->runs, row->seconds, row->og, row->ob,
                   row->oq, row->oracle_med, c->groups, c->banks, c->qd, row->chosen_med,
                   c->predicted, 100 * row->regret, row->dg, row->db, row->dq, row->default_med,
                   (double)(row->chosen_peak > row->default_peak ? row->chosen_peak
                                                                 : row->default_peak) /
                       (1 << 20),
                   row->over_budget ? "  (some sweep runs over budget)" : "");
            fflush(stdout);
        }
        for (int i = 0; i < d.n_choices; i++)
            if (rows[i].og == 0)
                fprintf(stderr, "estream: tune: at %.0f MiB every sweep run went over the budget "
                                "(M_other is underestimated here)\n",
                        (double)rows[i].chosen.budget / (1 << 20));
        if (!o.json && d.n_choices > 0)
            printf("\nconfigurator %.1f s, sweep %.1f s: %.0fx faster\n", tune_seconds,
                   sweep_seconds, sweep_seconds / tune_seconds);
    }
    if (o.json) {
        printf("{\"model\": ");
        cli_json_str(stdout, o.model, strlen(o.model));
        printf(", \"tokens\": %zu, \"n_threads\": %d, \"kernels\": \"%s\", \"q0\": %d, "
               "\"other_bytes\": %llu, \"other_estimate_bytes\": %llu, \"tune_seconds\": %.3f, "
               "\"select_seconds\": %.6f",
               n, d.n_threads, d.kernels, d.q0, (unsigned long long)d.other_bytes,
               (unsigned long long)d.other_estimate_bytes, tune_seconds, select_seconds);
        if (o.sweep) printf(", \"sweep_seconds\": %.3f", sweep_seconds);
        printf(", \"storage\": [");
        for (int i = 0; i < d.n_profiles; i++) {
            const es_tune_profile_desc *p = &d.profiles[i];
            printf("%s{\"groups\": %d, \"bank_bytes\": %llu, \"profile_seconds\": %.4f, "
                   "\"bytes_per_second\": [",
                   i ? ", " : "", p->groups, (unsigned long long)p->bank_bytes, p->seconds);
            for (int q = 0; q < ES_TUNE_N_DEPTHS; q++)
                printf("%s%.0f", q ? ", " : "", p->bytes_per_second[q]);
            printf("]}");
        }
        printf("], \"rows\": [");
        for (int i = 0; i < d.n_choices; i++) {
            const es_tune_choice *c = &d.choices[i];
            const sweep_row *row = &rows[i];
            printf("%s\n {\"budget_bytes\": %llu, \"io_limit\": %.0f, ", i ? "," : "",
                   (unsigned long long)c->budget, c->io_limit);
            print_choice_json("chosen", c->groups, c->banks, c->qd,
                              o.sweep ? row->chosen_med : 0);
            printf(", \"predicted_seconds\": %.6f", c->predicted);
            if (o.sweep) printf(", \"peak_rss_bytes\": %llu", (unsigned long long)row->chosen_peak);
            printf("}");
            if (o.sweep) {
                printf(", ");
                print_choice_json("oracle", row->og, row->ob, row->oq, row->oracle_med);
                printf("}, ");
                print_choice_json("default", row->dg, row->db, row->dq, row->default_med);
                printf(", \"peak_rss_bytes\": %llu}, \"regret\": ",
                       (unsigned long long)row->default_peak);
                json_num(row->regret);
                printf(", \"sweep_runs\": %d, \"sweep_seconds\": %.3f, \"over_budget_runs\": %d",
                       row->runs, row->seconds, row->over_budget);
            }
            printf("}");
        }
        for (int i = 0; i < n_infeasible; i++)
            printf("%s\n {\"budget_bytes\": %llu, \"io_limit\": %.0f, \"feasible\": false, "
                   "\"min_budget_bytes\": %llu}",
                   d.n_choices + i ? "," : "", (unsigned long long)infeasible[i].budget,
                   infeasible[i].io_limit, (unsigned long long)infeasible[i].min_budget);
        printf("]}\n");
    }
    free(rows);
    es_tune_destroy(t);
    free(out);
    free(ids);
    es_model_close(m);
    return 0;
}
