/* estream bench: prompt-processing speed like llama-bench -p N -n 0 (median of repetitions), and
 * the latency-memory table of expert streaming (--mem LIST --policy LIST). */
#include "cli/cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: estream bench -m MODEL [-p 128,512,1024,2048] [-t THREADS] [-r REPS] [--json]\n"
    "                     [--reference] [--mem LIST] [--policy LIST] [--plot FILE.svg]\n"
    "                     [--no-bounds] [streaming options]\n"
    "\n"
    "For each prompt length: one warm-up prefill, then REPS timed prefills of pseudo-random token\n"
    "ids (fixed seed; the last position's logits), reporting the median tokens/s, the spread\n"
    "(min..max) and the process's peak resident memory. Like llama-bench -p N -n 0.\n"
    "  -p LIST      comma-separated prompt lengths (default 128,512,1024,2048; capped at the\n"
    "               model's context)\n"
    "  -t THREADS   compute threads, 1.." CLI_XSTR(ES_MAX_THREADS) " (default: OMP_NUM_THREADS,\n"
    "               else one per physical core this process may use, within its cgroup CPU\n"
    "               quota: estream info --system)\n"
    "  -r REPS      timed repetitions per length (default 5)\n"
    "  --json       one JSON object per row: n_prompt, tokens_per_second (median),\n"
    "               tokens_per_second_min, tokens_per_second_max, seconds_median, reps,\n"
    "               n_threads, peak_rss_bytes, path, kernels (fast path only), the streaming\n"
    "               fields of estream prefill --json (of the median repetition), and with\n"
    "               bounds: resident_tokens_per_second, raw_read_bytes_per_second,\n"
    "               disk_bound_tokens_per_second, bound_tokens_per_second (the lower),\n"
    "               of_bound (tokens_per_second / bound_tokens_per_second)\n"
    "  --reference  time the reference path (single-threaded, no SIMD kernel table)\n"
    "\n"
    "The latency-memory table: --mem LIST (e.g. 2G,1G,600M or 50%,25%) and/or --policy LIST\n"
    "(early,after-routing,on-demand) run every budget x policy, each on a fresh model and\n"
    "session with the process's peak RSS reset before it (/proc/self/clear_refs), so each row's\n"
    "peak is its own. Unless --no-bounds, two bounds are measured in the same run and printed\n"
    "next to each row: the resident run's tokens/s (every expert in memory) and the disk bound,\n"
    "n_tokens x raw read bandwidth / expert bytes the row read, where the raw bandwidth is the\n"
    "same grouped O_DIRECT reads at the same size and queue depth with no compute\n"
    "(bench/io_vs_fio.sh compares that reader with fio).\n"
    "  --plot FILE.svg  tokens/s against the budget, one line per policy and length\n"
    "With a tuning (estream tune; MODEL.tune or --tune FILE), each budget's arena is chosen\n"
    "from it; such rows are marked 't' after the arena.\n";

typedef struct bench_opts {
    const char *model;
    int lens[64], n_lens, reps, n_threads;
    bool json, reference, bounds;
    bool table; /* the latency-memory table's rows (a --mem of auto may still run resident) */
    cli_stream so;
} bench_opts;

/* One measured row: a length under one configuration. */
typedef struct bench_row {
    int n_prompt;
    double tps, tps_min, tps_max, secs_med;
    size_t peak_rss;
    es_run_stats stats; /* of the median repetition */
} bench_row;

/* Runs every length on a fresh model and session made from sp; rows[n_lens]. */
static void run_config(const bench_opts *b, const es_session_params *sp, const int32_t *ids,
                       bench_row *rows)
{
    if (es_peak_rss_reset() != ES_OK && (sp->mem_budget_bytes || sp->stream))
        fprintf(stderr, "bench: %s; peak RSS is the process's since it started\n",
                es_last_error());
    es_model *m = cli_open_model(b->model, 0);
    es_session *ses = NULL;
    es_status st = es_session_create(m, sp, &ses);
    if (st) cli_die_status(st, "bench");
    float *logits = malloc(sizeof(float) * (size_t)es_model_n_vocab(m));
    double *secs = malloc(sizeof(double) * (size_t)b->reps);
    es_run_stats *runs = malloc(sizeof(es_run_stats) * (size_t)b->reps);
    if (!logits || !secs || !runs) cli_die("out of memory");
    for (int i = 0; i < b->n_lens; i++) {
        const size_t n = (size_t)b->lens[i];
        if ((st = es_session_prefill(ses, ids, n, 0, logits))) cli_die_status(st, "bench");
        for (int r = 0; r < b->reps; r++) {
            const uint64_t t0 = cli_now_ns();
            if ((st = es_session_prefill(ses, ids, n, 0, logits))) cli_die_status(st, "bench");
            secs[r] = (double)(cli_now_ns() - t0) * 1e-9;
            es_session_stats(ses, &runs[r]);
        }
        /* the median repetition's statistics go with the median time */
        int med_r = 0;
        double sorted[1000];
        memcpy(sorted, secs, sizeof(double) * (size_t)b->reps);
        const int reps = b->reps;
        const double med = cli_median(sorted, reps); /* and sorted is sorted: times are finite */
        for (int r = 0; r < reps; r++)
            if (fabs(secs[r] - med) < fabs(secs[med_r] - med)) med_r = r;
        rows[i] = (bench_row){.n_prompt = b->lens[i], .tps = (double)n / med,
                              .tps_min = (double)n / sorted[reps - 1],
                              .tps_max = (double)n / sorted[0], .secs_med = med,
                              .peak_rss = es_peak_rss_bytes(), .stats = runs[med_r]};
    }
    free(logits);
    free(secs);
    free(runs);
    es_session_destroy(ses);
    es_model_close(m);
}

/* Raw grouped-read bandwidth of m's experts at the row's G and Q (cached per pair). */
typedef struct raw_bw { int G, Q; double bps; } raw_bw;

static double raw_bandwidth(const bench_opts *b, const es_session_params *sp, int G, int Q,
                            raw_bw *cache, int *n_cache)
{
    for (int i = 0; i < *n_cache; i++)
        if (cache[i].G == G && cache[i].Q == Q) return cache[i].bps;
    es_model *m = cli_open_model(b->model, 0);
    double bps = 0;
    es_status st = es_stream_measure_bandwidth(m, sp, G, Q, (uint64_t)2 << 30, &bps);
    if (st) cli_die_status(st, "bench: raw read bandwidth");
    es_model_close(m);
    if (*n_cache < 64) cache[(*n_cache)++] = (raw_bw){G, Q, bps};
    return bps;
}

static void parse_lengths(const char *list, bench_opts *b)
{
    for (const char *p = list; *p;) {
        char num[32];
        size_t k = strcspn(p, ",");
        if (k == 0 || k >= sizeof(num) || b->n_lens == 64) cli_die("bench: bad -p list '%s'", list);
        memcpy(num, p, k);
        num[k] = 0;
        b->lens[b->n_lens++] = (int)cli_int("-p", num, 1, 1 << 24);
        p += k + (p[k] == ',');
    }
    if (b->n_lens == 0) cli_die("bench: bad -p list '%s' (give lengths like 128,512)", list);
}

/* One row, as text or JSON, with the resident and disk bounds when they were measured. */
static void print_row(const bench_opts *b, const bench_row *r, const es_session_params *sp,
                      double res_tps, double raw_bps)
{
    const es_run_stats *s = &r->stats;
    const int threads = b->reference ? 1 : b->n_threads;
    double disk = 0, bound = 0;
    if (raw_bps > 0 && s->bytes_read > 0)
        disk = (double)r->n_prompt * raw_bps / (double)s->bytes_read;
    if (res_tps > 0) bound = disk > 0 && disk < res_tps ? disk : res_tps;
    if (b->json) {
        printf("{\"n_prompt\": %d, \"tokens_per_second\": %.3f, \"tokens_per_second_min\": %.3f, "
               "\"tokens_per_second_max\": %.3f, \"seconds_median\": %.6f, \"reps\": %d, "
               "\"n_threads\": %d, \"peak_rss_bytes\": %zu, ",
               r->n_prompt, r->tps, r->tps_min, r->tps_max, r->secs_med, b->reps, threads,
               r->peak_rss);
        if (b->reference)
            printf("\"path\": \"reference\", ");
        else
            printf("\"path\": \"fast\", \"kernels\": \"%s\", ", s->kernels);
        cli_system_json(stdout);
        printf(", ");
        cli_stream_print(stdout, s, true);
        if (res_tps > 0)
            printf(", \"resident_tokens_per_second\": %.3f, \"raw_read_bytes_per_second\": %.0f, "
                   "\"disk_bound_tokens_per_second\": %.3f, \"bound_tokens_per_second\": %.3f, "
                   "\"of_bound\": %.4f",
                   res_tps, raw_bps, disk, bound, bound > 0 ? r->tps / bound : 0);
        printf("}\n");
    } else if (!b->table) {
        printf("%-8d %8d %12.1f %9.1f .. %-9.1f %12.1f  %s\n", r->n_prompt, threads, r->tps,
               r->tps_min, r->tps_max, (double)r->peak_rss / (1 << 20),
               b->reference ? "ref" : s->kernels);
    } else {
        char budget[32] = "-", arena[32] = "resident", bounds[64] = "";
        if (sp->mem_budget_bytes)
            snprintf(budget, sizeof(budget), "%.0f", (double)sp->mem_budget_bytes / (1 << 20));
        if (s->streaming) snprintf(arena, sizeof(arena), "%dx%d q%d%s", s->banks, s->groups,
                                   s->queue_depth, s->tuned ? " t" : "");
        if (res_tps > 0)
            snprintf(bounds, sizeof(bounds), "%9.1f %9.1f %6.2f", res_tps, disk,
                     bound > 0 ? r->tps / bound : 0);
        printf("%-7s %-13s %7d %9.1f %9.1f %7.1f%% %-12s %8.0f %-7s %s\n", budget,
               s->streaming ? s->policy : "-", r->n_prompt, r->tps, (double)r->peak_rss / (1 << 20),
               100.0 * s->bubble_rate, arena, (double)s->bytes_read / 1e6,
               b->reference ? "ref" : s->kernels, bounds);
    }
    fflush(stdout);
}

int cmd_bench(int argc, char **argv)
{
    cli_args a = {argc, 1, argv, "bench"};
    const char *list = "128,512,1024,2048", *mem_list = NULL, *policy_list = NULL;
    const char *plot = NULL;
    bool list_given = false;
    bench_opts b = {.reps = 5, .n_threads = cli_default_threads(), .bounds = true};
    for (; a.i < argc; a.i++) {
        const char *s = argv[a.i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            fputs(help, stdout);
            fputs(cli_stream_help, stdout);
            return 0;
        } else if (!strcmp(s, "--mem")) mem_list = cli_value(&a, s);
        else if (!strcmp(s, "--policy")) policy_list = cli_value(&a, s);
        else if (cli_stream_flag(&a, s, &b.so)) continue;
        else if (!strcmp(s, "-m") || !strcmp(s, "--model")) b.model = cli_value(&a, s);
        else if (!strcmp(s, "-p") || !strcmp(s, "--prompt-lengths")) { list = cli_value(&a, s); list_given = true; }
        else if (!strcmp(s, "-t") || !strcmp(s, "--threads")) b.n_threads = (int)cli_int(s, cli_value(&a, s), 1, ES_MAX_THREADS);
        else if (!strcmp(s, "-r") || !strcmp(s, "--reps")) b.reps = (int)cli_int(s, cli_value(&a, s), 1, 1000);
        else if (!strcmp(s, "--json")) b.json = true;
        else if (!strcmp(s, "--reference")) b.reference = true;
        else if (!strcmp(s, "--plot")) plot = cli_value(&a, s);
        else if (!strcmp(s, "--no-bounds")) b.bounds = false;
        else cli_unknown(&a, s);
    }
    parse_lengths(list, &b);
    if (!b.model) cli_die("bench: give the model with -m MODEL");
    /* the model's size limits: open it once to read them */
    es_model *m0 = cli_open_model(b.model, 0);
    const int nv = es_model_n_vocab(m0), ctx = es_model_n_ctx(m0);
    int max_len = 0, kept = 0;
    for (int i = 0; i < b.n_lens; i++) {
        if (b.lens[i] > ctx && list_given)
            cli_die("bench: prompt length %d exceeds the model's context %d", b.lens[i], ctx);
        if (b.lens[i] > ctx) continue; /* the default list is capped at the context */
        b.lens[kept++] = b.lens[i];
        max_len = b.lens[i] > max_len ? b.lens[i] : max_len;
    }
    if (kept == 0) b.lens[kept++] = max_len = ctx; /* a context under 128: one run at the context */
    b.n_lens = kept;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)max_len);
    if (!ids) cli_die("out of memory");
    uint64_t seed = 0x243f6a8885a308d3ull;
    for (int i = 0; i < max_len; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((seed >> 33) % (uint64_t)nv);
    }

    /* configurations: budgets x policies (a single one without the lists) */
    char *mem_copy = NULL, *pol_copy = NULL, *mems[32] = {NULL}, *pols[3] = {NULL};
    int n_mem = 1, n_pol = 1;
    if (mem_list) n_mem = cli_split_list("bench", "--mem", mem_list, &mem_copy, mems, 32);
    if (policy_list) n_pol = cli_split_list("bench", "--policy", policy_list, &pol_copy, pols, 3);
    es_session_params base = es_session_default_params();
    base.n_threads = b.n_threads;
    base.reference = b.reference;
    base.max_tokens = max_len;
    base.head_outputs = 0; /* prefills only */
    cli_stream_apply("bench", &b.so, b.model, &base);
    /* the tuning, if any, serves every budget of the list (each row re-selects) */
    es_tune *tune = cli_stream_tune("bench", &b.so, m0, b.model,
                                    mem_list || base.mem_budget_bytes, &base);
    es_model_close(m0);
    const bool table = mem_list || policy_list || base.stream || base.mem_budget_bytes ||
                       base.groups || base.banks || base.queue_depth;
    b.table = table;
    if (b.reference && table) cli_die("bench: --mem and --policy need the fast path");
    if (plot && !table) cli_die("bench: --plot needs --mem or --policy");

    /* the resident bound first (its own model and session, like every row) */
    double *res_tps = calloc((size_t)b.n_lens, sizeof(double));
    bench_row *rows = malloc(sizeof(bench_row) * (size_t)b.n_lens);
    const int n_cfg = n_mem * n_pol;
    double *plot_x = malloc(sizeof(double) * (size_t)n_cfg * (size_t)b.n_lens);
    double *plot_y = malloc(sizeof(double) * (size_t)n_cfg * (size_t)b.n_lens);
    if (!res_tps || !rows || !plot_x || !plot_y) cli_die("out of memory");
    if (table && b.bounds) {
        es_session_params rp = es_session_default_params();
        rp.n_threads = b.n_threads;
        rp.max_tokens = max_len;
        rp.head_outputs = 0;
        run_config(&b, &rp, ids, rows);
        for (int i = 0; i < b.n_lens; i++) res_tps[i] = rows[i].tps;
    }
    if (!b.json) {
        cli_print_system(stdout);
        if (b.reference)
            printf("model %s, reference path, 1 thread, %d reps (median)\n", b.model, b.reps);
        else
            printf("model %s, %s kernels, fast path, %d threads, %d reps (median)\n", b.model,
                   es_kernels_name(), b.n_threads, b.reps);
        if (!table)
            printf("%-8s %8s %12s %21s %12s  %s\n", "n_prompt", "threads", "tokens/s",
                   "(min .. max)", "peak RSS MiB", "table");
        else
            printf("%-7s %-13s %7s %9s %9s %8s %-12s %8s %-7s%s\n", "MiB", "policy", "n_prompt",
                   "tok/s", "peak MiB", "bubble", "BxG qQ", "MB read", "table",
                   b.bounds ? "  resident  disk-bnd  /bound" : "");
    }
    raw_bw cache[64];
    int n_cache = 0;
    for (int im = 0; im < n_mem; im++)
        for (int ip = 0; ip < n_pol; ip++) {
            es_session_params sp = base;
            if (mem_list) sp.mem_budget_bytes = cli_budget_bytes("bench", mems[im], b.model);
            if (policy_list) {
                if (cli_policy(pols[ip], &sp.policy) != 0)
                    cli_die("bench: --policy: expected early, after-routing or on-demand, got "
                            "'%s'", pols[ip]);
                sp.stream = 1;
            }
            run_config(&b, &sp, ids, rows);
            for (int i = 0; i < b.n_lens; i++) {
                double raw = 0;
                const es_run_stats *s = &rows[i].stats;
                if (table && b.bounds && s->streaming)
                    raw = raw_bandwidth(&b, &sp, s->groups, s->queue_depth, cache, &n_cache);
                print_row(&b, &rows[i], &sp, table && b.bounds ? res_tps[i] : 0, raw);
                const size_t k = ((size_t)ip * (size_t)b.n_lens + (size_t)i) * (size_t)n_mem +
                                 (size_t)im;
                plot_x[k] = (double)(sp.mem_budget_bytes ? sp.mem_budget_bytes
                                                         : rows[i].peak_rss) / (1 << 20);
                plot_y[k] = rows[i].tps;
            }
        }
    if (plot) {
        const int n_series = n_pol * b.n_lens;
        es_plot_series *series = calloc((size_t)n_series, sizeof(es_plot_series));
        char (*names)[64] = calloc((size_t)n_series, 64);
        if (!series || !names) cli_die("out of memory");
        for (int ip = 0; ip < n_pol; ip++)
            for (int i = 0; i < b.n_lens; i++) {
                const int k = ip * b.n_lens + i;
                snprintf(names[k], 64, "%s, %d tokens", policy_list ? pols[ip] : "early",
                         b.lens[i]);
                series[k] = (es_plot_series){names[k], n_mem, plot_x + (size_t)k * n_mem,
                                             plot_y + (size_t)k * n_mem};
            }
        es_status st = es_plot_svg_write(plot, "estream prefill under a memory budget",
                                         "memory budget (MiB)", "tokens/s", series, n_series);
        if (st) cli_die_status(st, "bench: --plot");
        free(series);
        free(names);
        if (!b.json) printf("plot: %s\n", plot);
    }
    free(mem_copy);
    free(pol_copy);
    free(res_tps);
    free(rows);
    free(plot_x);
    free(plot_y);
    free(ids);
    es_tune_destroy(tune);
    return fflush(stdout) == 0 ? 0 : 1;
}
