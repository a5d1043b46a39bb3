/*
 * embed_lines: one embedding per line of a text file, mean-pooled and L2-normalised.
 *
 *   embed_lines MODEL.gguf LINES.txt [MEM_BUDGET]
 *
 * Prints one line per non-empty input line: its line number, then n_embd floats. Each line is
 * tokenized as `estream embed` tokenizes a {"text": ...} record (the tokenizer's BOS/EOS added,
 * special-token text recognised), so the vectors equal that command's (--pooling mean, the
 * default). Lines go through the model in batches of up to 32: es_session_run gives each the
 * same numbers it would have alone, and under MEM_BUDGET a batch reads each expert once.
 *
 * Build against an installed estream:  cc embed_lines.c $(pkg-config --cflags --libs estream)
 */
#include <estream.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 32

static int fail(const char *what)
{
    fprintf(stderr, "embed_lines: %s: %s\n", what, es_last_error());
    return 1;
}

static uint64_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    const char *units = "KMGT";
    const char *u = *end ? strchr(units, *end) : NULL;
    if (u && *u) v *= (double)(1ull << (10 * (1 + (u - units)))), end++;
    return v > 0 && *end == 0 ? (uint64_t)v : 0;
}

typedef struct line {
    long number;
    int32_t *ids;
    float *embedding;
} line;

/* Runs the batch, prints it and frees its lines. */
static int flush(es_session *s, line *b, es_seq *q, int n, int n_embd)
{
    if (n && es_session_run(s, q, n)) return fail("prefill");
    for (int i = 0; i < n; i++) {
        printf("%ld", b[i].number);
        for (int k = 0; k < n_embd; k++) printf(" %.9g", b[i].embedding[k]);
        putchar('\n');
        free(b[i].ids);
        free(b[i].embedding);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: embed_lines MODEL LINES.txt [MEM_BUDGET]\n");
        return 2;
    }
    FILE *f = fopen(argv[2], "r");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    es_model *m;
    if (es_model_open(argv[1], 0, &m)) return fail("cannot open the model");
    es_session_params p = es_session_default_params();
    if (argc == 4 && !(p.mem_budget_bytes = parse_size(argv[3]))) {
        fprintf(stderr, "embed_lines: '%s' is not a memory size (e.g. 512M, 1G)\n", argv[3]);
        return 2;
    }
    es_session *s;
    if (es_session_create(m, &p, &s)) return fail("cannot make the session");
    const int n_embd = es_model_n_embd(m);

    line b[BATCH];
    es_seq q[BATCH];
    int n = 0;
    long number = 0;
    char *text = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&text, &cap, f)) >= 0) {
        number++;
        while (len && (text[len - 1] == '\n' || text[len - 1] == '\r')) len--;
        if (!len) continue;
        size_t n_ids, room = (size_t)len + 2; /* every token covers a byte, plus BOS and EOS */
        int32_t *ids = malloc(room * sizeof *ids);
        float *e = malloc((size_t)n_embd * sizeof *e);
        if (!ids || !e || es_tokenize(m, text, (size_t)len, 1, 1, ids, room, &n_ids))
            return fail("tokenize");
        b[n] = (line){number, ids, e};
        q[n] = (es_seq){.ids = ids, .n_ids = n_ids, .pooling = ES_POOLING_MEAN, .normalize = 1,
                        .embedding = e};
        if (++n == BATCH) {
            if (flush(s, b, q, n, n_embd)) return 1;
            n = 0;
        }
    }
    if (flush(s, b, q, n, n_embd)) return 1;
    free(text);
    fclose(f);
    es_session_destroy(s);
    es_model_close(m);
    return 0;
}
