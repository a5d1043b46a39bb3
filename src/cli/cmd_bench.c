/* estream bench: prompt-processing speed like llama-bench -p N -n 0 (median of repetitions). */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: estream bench -m MODEL [-p 128,512,1024,2048] [-t THREADS] [-r REPS] [--json]\n"
    "                     [--reference]\n"
    "\n"
    "For each prompt length: one warm-up prefill, then REPS timed prefills of pseudo-random token\n"
    "ids (fixed seed; the last position's logits), reporting the median tokens/s, the spread\n"
    "(min..max) and the process's peak resident memory so far. Like llama-bench -p N -n 0.\n"
    "  -p LIST      comma-separated prompt lengths (default 128,512,1024,2048; capped at the\n"
    "               model's context)\n"
    "  -t THREADS   compute threads, 1.." CLI_XSTR(ES_MAX_THREADS) " (default: all CPUs, at most "
    CLI_XSTR(ES_MAX_THREADS) ")\n"
    "  -r REPS      timed repetitions per length (default 5)\n"
    "  --json       one JSON object per line: n_prompt, tokens_per_second (median),\n"
    "               tokens_per_second_min, tokens_per_second_max, seconds_median, reps,\n"
    "               n_threads, peak_rss_bytes, path, kernels (fast path only)\n"
    "  --reference  time the reference path (single-threaded, no SIMD kernel table)\n";

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int cmd_bench(int argc, char **argv)
{
    cli_args a = {argc, 1, argv, "bench"};
    const char *model = NULL, *list = "128,512,1024,2048";
    bool list_given = false;
    int reps = 5;
    bool json = false;
    es_prefill_opts o = {.n_threads = cli_default_threads()};
    for (; a.i < argc; a.i++) {
        const char *s = argv[a.i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) { fputs(help, stdout); return 0; }
        else if (!strcmp(s, "-m") || !strcmp(s, "--model")) model = cli_value(&a, s);
        else if (!strcmp(s, "-p") || !strcmp(s, "--prompt-lengths")) { list = cli_value(&a, s); list_given = true; }
        else if (!strcmp(s, "-t") || !strcmp(s, "--threads")) o.n_threads = (int)cli_int(s, cli_value(&a, s), 1, ES_MAX_THREADS);
        else if (!strcmp(s, "-r") || !strcmp(s, "--reps")) reps = (int)cli_int(s, cli_value(&a, s), 1, 1000);
        else if (!strcmp(s, "--json")) json = true;
        else if (!strcmp(s, "--reference")) o.reference = 1;
        else cli_unknown(&a, s);
    }
    int lens[64], n_lens = 0;
    for (const char *p = list; *p;) {
        char num[32];
        size_t k = strcspn(p, ",");
        if (k == 0 || k >= sizeof(num) || n_lens == 64) cli_die("bench: bad -p list '%s'", list);
        memcpy(num, p, k);
        num[k] = 0;
        lens[n_lens++] = (int)cli_int("-p", num, 1, 1 << 24);
        p += k + (p[k] == ',');
    }
    if (n_lens == 0) cli_die("bench: bad -p list '%s' (give lengths like 128,512)", list);
    es_model *m = cli_open_model(model, 0);
    const int nv = es_model_n_vocab(m), ctx = es_model_n_ctx(m);
    int max_len = 0, kept = 0;
    for (int i = 0; i < n_lens; i++) {
        if (lens[i] > ctx && list_given)
            cli_die("bench: prompt length %d exceeds the model's context %d", lens[i], ctx);
        if (lens[i] > ctx) continue; /* the default list is capped at the context */
        lens[kept++] = lens[i];
        max_len = lens[i] > max_len ? lens[i] : max_len;
    }
    if (kept == 0) lens[kept++] = max_len = ctx; /* a context under 128: one run at the context */
    n_lens = kept;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)max_len);
    float *logits = malloc(sizeof(float) * (size_t)nv);
    double *secs = malloc(sizeof(double) * (size_t)reps);
    if (!ids || !logits || !secs) cli_die("out of memory");
    uint64_t s = 0x243f6a8885a308d3ull;
    for (int i = 0; i < max_len; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((s >> 33) % (uint64_t)nv);
    }
    /* one session for every length: pool, buffers and plans built once, as a user's run would */
    es_session_params sp = es_session_default_params();
    sp.n_threads = o.n_threads;
    sp.reference = o.reference;
    sp.max_tokens = max_len;
    es_session *ses = NULL;
    es_status st = es_session_create(m, &sp, &ses);
    if (st) cli_die_status(st, "bench");
    const int threads = o.reference ? 1 : o.n_threads; /* the reference path is single-threaded */
    if (!json) {
        if (o.reference)
            printf("model %s, reference path\n", model);
        else
            printf("model %s, %s kernels, fast path\n", model, es_kernels_name());
        printf("%-8s %8s %12s %21s %12s\n", "n_prompt", "threads", "tokens/s", "(min .. max)",
               "peak RSS MiB");
    }
    for (int i = 0; i < n_lens; i++) {
        const size_t n = (size_t)lens[i];
        st = es_session_prefill(ses, ids, n, 0, logits); /* warm-up */
        if (st) cli_die_status(st, "bench");
        for (int r = 0; r < reps; r++) {
            const uint64_t t0 = es_now_ns();
            if ((st = es_session_prefill(ses, ids, n, 0, logits))) cli_die_status(st, "bench");
            secs[r] = (double)(es_now_ns() - t0) * 1e-9;
        }
        qsort(secs, (size_t)reps, sizeof(double), cmp_double);
        const double med = reps % 2 ? secs[reps / 2] : 0.5 * (secs[reps / 2 - 1] + secs[reps / 2]);
        const size_t rss = es_peak_rss_bytes();
        if (json) {
            printf("{\"n_prompt\": %d, \"tokens_per_second\": %.3f, \"tokens_per_second_min\": %.3f, "
                   "\"tokens_per_second_max\": %.3f, \"seconds_median\": %.6f, \"reps\": %d, "
                   "\"n_threads\": %d, \"peak_rss_bytes\": %zu, ",
                   lens[i], (double)n / med, (double)n / secs[reps - 1], (double)n / secs[0], med,
                   reps, threads, rss);
            if (o.reference)
                printf("\"path\": \"reference\"}\n");
            else
                printf("\"path\": \"fast\", \"kernels\": \"%s\"}\n", es_kernels_name());
        } else
            printf("%-8d %8d %12.1f %9.1f .. %-9.1f %12.1f\n", lens[i], threads,
                   (double)n / med, (double)n / secs[reps - 1], (double)n / secs[0],
                   (double)rss / (1 << 20));
        fflush(stdout);
    }
    free(ids);
    free(logits);
    free(secs);
    es_session_destroy(ses);
    es_model_close(m);
    return 0;
}
