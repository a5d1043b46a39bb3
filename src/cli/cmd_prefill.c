/* estream prefill: run the prefill of a prompt and print the next-token distribution's top-k. */
#include "cli/cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char help[] =
    "usage: estream prefill -m MODEL (-p TEXT | -f FILE | --ids FILE) [--top K] [-t THREADS]\n"
    "                       [--json] [--dump-logits OUT] [--reference] [--mem BUDGET]\n"
    "                       [--groups G] [--banks B] [--qd Q] [--policy P] [--trace FILE]\n"
    "\n"
    "Tokenizes the prompt (adding BOS where the model's tokenizer asks for it), runs one prefill\n"
    "and prints the top-K next tokens with probabilities, the token count, the wall time and the\n"
    "peak resident memory.\n"
    "  --ids FILE         pre-tokenized ids, whitespace-separated, used exactly as given\n"
    "  --top K            how many next tokens to print (default 5)\n"
    "  -t THREADS         compute threads, 1.." CLI_XSTR(ES_MAX_THREADS) " (default:\n"
    "                     OMP_NUM_THREADS, else one per physical core this process may use,\n"
    "                     within its cgroup CPU quota: estream info --system)\n"
    "  --json             one JSON object: n_tokens, top [{id, piece, prob}], seconds,\n"
    "                     tokens_per_second, peak_rss_bytes, path, kernels (fast path only),\n"
    "                     n_threads, budget_bytes, streaming, and when streaming: groups,\n"
    "                     banks, qd, policy, io_backend, bytes_read, read_seconds,\n"
    "                     read_bytes_per_second, bubble_rate, wait_seconds, arena_bytes,\n"
    "                     other_bytes, min_budget_bytes, groups_read, groups_skipped\n"
    "  --dump-logits OUT  write the logits of every position as little-endian float32,\n"
    "                     row-major [n_tokens x n_vocab]; a regular file appears only when\n"
    "                     complete, a FIFO or /dev/stdout is written in place\n"
    "  --reference        use the plain reference path (the oracle) instead of the fast path\n"
    "  --route-stats      per layer: routes of the busiest and idlest expert against the mean,\n"
    "                     and experts that got none (fast path; in JSON as route_stats)\n";

typedef struct top_entry { int32_t id; double prob; } top_entry;

static int by_prob(const void *a, const void *b)
{
    const top_entry *x = a, *y = b;
    if (x->prob != y->prob) return x->prob < y->prob ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Writes the logits to path as an output file (estream.h): a regular file appears only when
 * complete (a failure or a signal leaves nothing, not even the temporary file); a FIFO or
 * /dev/stdout gets the bytes in place. */
static void dump_logits(const char *path, const float *logits, size_t count)
{
    es_status st = es_outfile_save(path, logits, count * sizeof(float));
    if (st) cli_die_status(st, "prefill: --dump-logits");
}

/* Per layer: the busiest and idlest expert's routes over the mean, and experts with none. */
static void print_route_stats(const es_model *m, const es_session *ses, bool json)
{
    const int L = es_model_n_layer(m), E = es_model_n_expert(m);
    int64_t *c = malloc(sizeof(int64_t) * (size_t)E);
    if (!c) cli_die("out of memory");
    for (int il = 0; il < L; il++) {
        es_status st = es_session_route_counts(ses, il, c, E);
        if (st) cli_die_status(st, "prefill");
        int64_t mx = c[0], mn = c[0], sum = 0;
        int idle = 0;
        for (int e = 0; e < E; e++) {
            mx = c[e] > mx ? c[e] : mx;
            mn = c[e] < mn ? c[e] : mn;
            sum += c[e];
            idle += c[e] == 0;
        }
        const double mean = (double)sum / E;
        if (json)
            printf("%s{\"layer\": %d, \"max_over_mean\": %.3f, \"min_over_mean\": %.3f, "
                   "\"idle_experts\": %d}%s", il ? ", " : "{\"route_stats\": [", il, mx / mean,
                   mn / mean, idle, il == L - 1 ? "]}\n" : "");
        else
            printf("layer %2d: busiest expert %.2fx the mean (%lld routes), idlest %.2fx (%lld), "
                   "%d without routes\n", il, mx / mean, (long long)mx, mn / mean, (long long)mn,
                   idle);
    }
    free(c);
}

int cmd_prefill(int argc, char **argv)
{
    cli_args a = {argc, 1, argv, "prefill"};
    const char *model = NULL, *text = NULL, *file = NULL, *ids_file = NULL, *dump = NULL;
    int top = 5;
    bool json = false, route_stats = false;
    struct { int n_threads, reference, all_logits; } o = {.n_threads = cli_default_threads()};
    cli_stream so = {0};
    for (; a.i < argc; a.i++) {
        const char *s = argv[a.i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            fputs(help, stdout);
            fputs(cli_stream_help, stdout);
            return 0;
        } else if (cli_stream_flag(&a, s, &so)) continue;
        else if (!strcmp(s, "-m") || !strcmp(s, "--model")) model = cli_value(&a, s);
        else if (!strcmp(s, "-p") || !strcmp(s, "--prompt")) text = cli_value(&a, s);
        else if (!strcmp(s, "-f") || !strcmp(s, "--file")) file = cli_value(&a, s);
        else if (!strcmp(s, "--ids")) ids_file = cli_value(&a, s);
        else if (!strcmp(s, "--top")) top = (int)cli_int(s, cli_value(&a, s), 1, 1000000);
        else if (!strcmp(s, "-t") || !strcmp(s, "--threads")) o.n_threads = (int)cli_int(s, cli_value(&a, s), 1, ES_MAX_THREADS);
        else if (!strcmp(s, "--json")) json = true;
        else if (!strcmp(s, "--dump-logits")) dump = cli_value(&a, s);
        else if (!strcmp(s, "--reference")) o.reference = 1;
        else if (!strcmp(s, "--route-stats")) route_stats = true;
        else cli_unknown(&a, s);
    }
    if (dump && !strcmp(dump, "-"))
        cli_die("prefill: --dump-logits -: stdout carries the report; give a file, a FIFO or "
                "/dev/stdout");
    if (route_stats && o.reference) cli_die("prefill: --route-stats needs the fast path");
    if ((text || file) && ids_file) cli_die("prefill: give a prompt (-p/-f) or --ids, not both");
    es_model *m = cli_open_model(model, 0);
    size_t n;
    int32_t *ids;
    if (ids_file) {
        ids = cli_read_ids(ids_file, &n);
    } else {
        size_t len;
        char *prompt = cli_prompt(text, file, &len);
        if (len == 0) cli_die("prefill: the prompt is empty");
        ids = cli_tokenize(m, prompt, len, true, true, &n);
        free(prompt);
    }
    if (n == 0) cli_die("prefill: the prompt is empty (no tokens)");
    if (n > (size_t)es_model_n_ctx(m))
        cli_die("prefill: the prompt has %zu tokens, more than the model's context of %d", n,
                es_model_n_ctx(m));
    const size_t nv = (size_t)es_model_n_vocab(m);
    o.all_logits = dump != NULL;
    const size_t n_out = o.all_logits ? n : 1;
    float *logits = malloc(sizeof(float) * nv * n_out);
    if (!logits) cli_die("out of memory for %zu x %zu logits", n_out, nv);
    es_session_params sp = es_session_default_params();
    sp.n_threads = o.n_threads;
    sp.reference = o.reference;
    sp.max_tokens = (int)n;
    sp.max_logits_rows = (int)n_out;
    sp.head_outputs = 0; /* es_session_prefill: the logits above are all it holds */
    cli_stream_apply("prefill", &so, model, &sp);
    es_tune *tune = cli_stream_tune("prefill", &so, m, model, sp.mem_budget_bytes > 0, &sp);
    es_session *ses = NULL;
    es_status st = es_session_create(m, &sp, &ses);
    es_tune_destroy(tune); /* only the choice needed it */
    if (st) cli_die_status(st, "prefill");
    const uint64_t t0 = cli_now_ns();
    st = es_session_prefill(ses, ids, n, o.all_logits, logits);
    const double secs = (double)(cli_now_ns() - t0) * 1e-9;
    if (st) cli_die_status(st, "prefill");
    if (dump) dump_logits(dump, logits, n_out * nv);

    const float *last = logits + (n_out - 1) * nv;
    float mx = last[0];
    for (size_t i = 1; i < nv; i++) mx = last[i] > mx ? last[i] : mx;
    double sum = 0.0;
    for (size_t i = 0; i < nv; i++) sum += exp((double)(last[i] - mx));
    top_entry *e = malloc(sizeof(top_entry) * nv);
    if (!e) cli_die("out of memory");
    for (size_t i = 0; i < nv; i++) e[i] = (top_entry){(int32_t)i, exp((double)(last[i] - mx)) / sum};
    qsort(e, nv, sizeof(*e), by_prob);
    if ((size_t)top > nv) top = (int)nv;
    const size_t rss = es_peak_rss_bytes();
    if (route_stats) print_route_stats(m, ses, json);
    if (json) {
        printf("{\"n_tokens\": %zu, \"top\": [", n);
        for (int i = 0; i < top; i++) {
            size_t plen;
            const char *piece = es_token_piece(m, e[i].id, &plen);
            printf("%s{\"id\": %d, \"piece\": ", i ? ", " : "", e[i].id);
            cli_json_str(stdout, piece ? piece : "", piece ? plen : 0);
            printf(", \"prob\": %.9g}", e[i].prob);
        }
        printf("], \"seconds\": %.6f, \"tokens_per_second\": %.3f, \"peak_rss_bytes\": %zu, ",
               secs, (double)n / secs, rss);
        es_run_stats rs;
        es_session_stats(ses, &rs);
        cli_stream_print(stdout, &rs, true);
        printf(", ");
        if (o.reference) /* single-threaded plain C: no kernel table */
            printf("\"path\": \"reference\", \"n_threads\": 1}\n");
        else
            printf("\"path\": \"fast\", \"kernels\": \"%s\", \"n_threads\": %d}\n",
                   es_kernels_name(), o.n_threads);
    } else {
        printf("tokens:     %zu\n", n);
        printf("top %d next tokens:\n", top);
        for (int i = 0; i < top; i++) {
            size_t plen;
            const char *piece = es_token_piece(m, e[i].id, &plen);
            printf("  %2d. %8d  %.6f  ", i + 1, e[i].id, e[i].prob);
            cli_json_str(stdout, piece ? piece : "", piece ? plen : 0);
            putchar('\n');
        }
        if (o.reference)
            printf("time:       %.3f s (%.1f tokens/s, reference path, 1 thread)\n", secs,
                   (double)n / secs);
        else
            printf("time:       %.3f s (%.1f tokens/s, fast path, %s kernels, %d threads)\n", secs,
                   (double)n / secs, es_kernels_name(), o.n_threads);
        printf("peak RSS:   %.1f MiB\n", (double)rss / (1 << 20));
        es_run_stats rs;
        es_session_stats(ses, &rs);
        cli_stream_print(stdout, &rs, false);
    }
    free(e);
    free(logits);
    free(ids);
    es_session_destroy(ses);
    es_model_close(m);
    return fflush(stdout) == 0 ? 0 : 1;
}
