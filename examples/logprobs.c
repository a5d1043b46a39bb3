/*
 * logprobs: the log-probability of every token of a text, each given the tokens before it.
 *
 *   logprobs MODEL.gguf "some text" [MEM_BUDGET]      e.g. logprobs olmoe.gguf "Hello" 1G
 *
 * Prints one line per token: position, id, log-prob (natural log; the first token has none)
 * and the token's text, then the sum; on stderr whether the experts were streamed and the
 * process's peak resident memory. The text is tokenized as `estream score` tokenizes a
 * {"text": ...} record: plain text, BOS first when the model's tokenizer adds one; so the
 * numbers equal that command's "logprobs". With MEM_BUDGET the experts are streamed from the
 * file and the process stays under that much resident memory.
 *
 * Build against an installed estream:  cc logprobs.c $(pkg-config --cflags --libs estream)
 */
#include <estream.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what)
{
    fprintf(stderr, "logprobs: %s: %s\n", what, es_last_error());
    return 1;
}

/* "512M", "1G", "1.5G" or plain bytes; 0 when it is not a size. */
static uint64_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    const char *units = "KMGT";
    const char *u = *end ? strchr(units, *end) : NULL;
    if (u && *u) v *= (double)(1ull << (10 * (1 + (u - units)))), end++;
    return v > 0 && *end == 0 ? (uint64_t)v : 0;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: logprobs MODEL TEXT [MEM_BUDGET]\n");
        return 2;
    }
    es_model *m;
    if (es_model_open(argv[1], 0, &m)) return fail("cannot open the model");

    /* BOS (when the tokenizer adds one) and the text's tokens, special-token text not parsed */
    const size_t len = strlen(argv[2]), cap = len + 2;
    int32_t *ids = malloc(cap * sizeof *ids);
    const int bos = es_model_add_bos(m) && es_model_bos(m) >= 0;
    size_t n = 0;
    if (!ids || es_tokenize(m, argv[2], len, 0, 0, ids + bos, cap - 1, &n)) return fail("tokenize");
    if (bos) ids[0] = es_model_bos(m);
    n += (size_t)bos;
    if (n < 2) {
        fprintf(stderr, "logprobs: the text must give at least two tokens\n");
        return 1;
    }

    es_session_params p = es_session_default_params();
    if (argc == 4 && !(p.mem_budget_bytes = parse_size(argv[3]))) {
        fprintf(stderr, "logprobs: '%s' is not a memory size (e.g. 512M, 1G)\n", argv[3]);
        return 2;
    }
    es_session *s;
    if (es_session_create(m, &p, &s)) return fail("cannot make the session");

    float *lp = malloc(n * sizeof *lp);
    es_seq seq = {.ids = ids, .n_ids = n, .score_from = 1, .token_logprob = lp};
    if (!lp || es_session_run(s, &seq, 1)) return fail("prefill");

    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        size_t plen;
        const char *piece = es_token_piece(m, ids[i], &plen);
        if (i == 0) printf("%zu\t%d\t-\t%.*s\n", i, ids[i], (int)plen, piece);
        else printf("%zu\t%d\t%.9g\t%.*s\n", i, ids[i], lp[i], (int)plen, piece), sum += lp[i];
    }
    printf("sum\t%.9g\n", sum);
    es_run_stats st;
    es_session_stats(s, &st);
    fprintf(stderr, "logprobs: %zu tokens, %s, peak RSS %.1f MiB\n", n,
            st.streaming ? "experts streamed from the file" : "resident",
            (double)st.peak_rss_bytes / 1048576.0);

    free(lp);
    free(ids);
    es_session_destroy(s);
    es_model_close(m);
    return 0;
}
