/* estream ppl: perplexity of a text, with llama.cpp's llama-perplexity convention. */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: estream ppl -m MODEL -f TEXT [-c CTX] [--chunks N] [-t THREADS] [--json]\n"
    "                   [--reference] [--mem BUDGET] [--groups G] [--banks B] [--qd Q]\n"
    "                   [--policy P] [--trace FILE]\n"
    "\n"
    "Perplexity exactly as llama.cpp's llama-perplexity computes it, so the numbers compare\n"
    "directly: the text is tokenized once (BOS first when the tokenizer adds one), cut into\n"
    "non-overlapping chunks of CTX tokens (BOS replaces the first token of each chunk when the\n"
    "tokenizer adds one) and only the second half of each chunk is scored. Needs at least 2*CTX\n"
    "tokens of text.\n"
    "  -c CTX       chunk length in tokens (default 512)\n"
    "  --chunks N   evaluate at most N chunks (default all)\n"
    "  -t THREADS   compute threads, 1.." CLI_XSTR(ES_MAX_THREADS) " (default: OMP_NUM_THREADS,\n"
    "               else one per physical core this process may use, within its cgroup CPU\n"
    "               quota: estream info --system)\n"
    "  --json       print {\"ppl\", \"n_scored\", \"chunks\", \"seconds\", peak_rss_bytes and\n"
    "               the streaming fields of estream prefill --json} as one JSON object\n"
    "Progress goes to stderr, one line per chunk.\n";

typedef struct progress_state { uint64_t t0; } progress_state;

static void progress(void *user, int done, int total, double ppl)
{
    progress_state *p = user;
    const double secs = (double)(cli_now_ns() - p->t0) * 1e-9;
    fprintf(stderr, "ppl: chunk %d/%d  ppl %.4f  (%.2f s/chunk, about %.0f s left)\n", done,
            total, ppl, secs / done, secs / done * (total - done));
}

int cmd_ppl(int argc, char **argv)
{
    cli_args a = {argc, 1, argv, "ppl"};
    const char *model = NULL, *file = NULL;
    int ctx = 512, chunks = 0;
    bool json = false;
    struct { int n_threads, reference; } o = {.n_threads = cli_default_threads()};
    cli_stream so = {0};
    for (; a.i < argc; a.i++) {
        const char *s = argv[a.i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            fputs(help, stdout);
            fputs(cli_stream_help, stdout);
            return 0;
        } else if (cli_stream_flag(&a, s, &so)) continue;
        else if (!strcmp(s, "-m") || !strcmp(s, "--model")) model = cli_value(&a, s);
        else if (!strcmp(s, "-f") || !strcmp(s, "--file")) file = cli_value(&a, s);
        else if (!strcmp(s, "-c") || !strcmp(s, "--ctx")) ctx = (int)cli_int(s, cli_value(&a, s), 4, 1 << 24);
        else if (!strcmp(s, "--chunks")) chunks = (int)cli_int(s, cli_value(&a, s), 1, 1 << 30);
        else if (!strcmp(s, "-t") || !strcmp(s, "--threads")) o.n_threads = (int)cli_int(s, cli_value(&a, s), 1, ES_MAX_THREADS);
        else if (!strcmp(s, "--json")) json = true;
        else if (!strcmp(s, "--reference")) o.reference = 1;
        else cli_unknown(&a, s);
    }
    if (!file) cli_die("ppl: give the text with -f FILE");
    size_t len;
    char *text = cli_read_file(file, (size_t)1 << 30, &len);
    es_model *m = cli_open_model(model, 0);
    size_t n;
    int32_t *ids = cli_tokenize(m, text, len, true, false, &n);
    free(text);
    es_session_params sp = es_session_default_params();
    sp.n_threads = o.n_threads;
    sp.reference = o.reference;
    sp.max_tokens = ctx <= es_model_n_ctx(m) ? ctx : 0; /* a longer ctx is refused below */
    sp.max_logits_rows = ctx;
    sp.head_outputs = 0; /* es_session_perplexity: the logits above are all it holds */
    cli_stream_apply("ppl", &so, model, &sp);
    es_tune *tune = cli_stream_tune("ppl", &so, m, model, sp.mem_budget_bytes > 0, &sp);
    es_session *ses = NULL;
    es_status st = es_session_create(m, &sp, &ses);
    es_tune_destroy(tune); /* only the choice needed it */
    if (st) cli_die_status(st, "ppl");
    progress_state ps = {cli_now_ns()};
    es_ppl_result r;
    st = es_session_perplexity(ses, ids, n, ctx, chunks, progress, &ps, &r);
    if (st) cli_die_status(st, "ppl");
    const double secs = (double)(cli_now_ns() - ps.t0) * 1e-9;
    es_run_stats rs;
    es_session_stats(ses, &rs);
    if (json) {
        printf("{\"ppl\": %.6f, \"nll\": %.8f, \"n_scored\": %lld, \"chunks\": %d, \"ctx\": %d, "
               "\"n_tokens\": %zu, \"seconds\": %.3f, \"peak_rss_bytes\": %zu, ", r.ppl, r.nll,
               (long long)r.n_scored, r.chunks, ctx, n, secs, es_peak_rss_bytes());
        cli_stream_print(stdout, &rs, true);
        printf("}\n");
    } else {
        printf("perplexity: %.4f over %lld predictions (%d chunks of %d tokens, %.1f s)\n", r.ppl,
               (long long)r.n_scored, r.chunks, ctx, secs);
        printf("peak RSS:   %.1f MiB\n", (double)es_peak_rss_bytes() / (1 << 20));
        cli_stream_print(stdout, &rs, false);
    }
    es_session_destroy(ses);
    free(ids);
    es_model_close(m);
    return fflush(stdout) == 0 ? 0 : 1;
}
