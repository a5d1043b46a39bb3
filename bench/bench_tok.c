/*
 * Tokenizer speed on WikiText-2 (test split, 1.26 MB) with each shared vocabulary: median time
 * of REPS encodings, MB/s and tokens/s. The encoding is checked first: decoding the ids must give
 * the text back byte for byte (WikiText is valid UTF-8, so encoding is lossless).
 *
 * usage: bench_tok [DATA_DIR=../shared/data] [REPS=5]
 */
#include "tok/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = NULL;
    size_t cap = 0, n = 0, r;
    do {
        if (n == cap && !(b = realloc(b, cap = cap ? 2 * cap : 1 << 20))) break;
        r = fread(b + n, 1, cap - n, f);
        n += r;
    } while (r > 0);
    fclose(f);
    *len = n;
    return b;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *data = argc > 1 ? argv[1] : "../shared/data";
    const int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (reps < 1 || reps > 100) {
        fprintf(stderr, "bench_tok: REPS must be 1..100\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s/text/wikitext-2-test.txt", data);
    size_t n = 0;
    char *text = read_all(path, &n);
    if (!text) {
        fprintf(stderr, "bench_tok: cannot read %s\n", path);
        return 2;
    }
    static const char *names[] = {"gpt-2", "llama-spm", "deepseek-llm", "gpt-neox", "falcon",
                                  "starcoder", "phi-3"};
    printf("tokenizing %s (%zu bytes), median of %d\n", path, n, reps);
    printf("%-14s %10s %10s %10s %12s\n", "vocabulary", "tokens", "median s", "MB/s", "tokens/s");
    int status = 0;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-%s.gguf", data, names[i]);
        es_gguf *g = NULL;
        es_tok *t = NULL;
        if (es_gguf_open(path, &g) != ES_OK || es_tok_create(g, &t) != ES_OK) {
            fprintf(stderr, "bench_tok: %s: %s\n", path, es_last_error());
            es_gguf_close(g);
            status = 1;
            continue;
        }
        es_gguf_close(g);
        double secs[100];
        size_t n_ids = 0;
        for (int r = 0; r < reps; r++) {
            int32_t *ids = NULL;
            const double t0 = now_s();
            es_status st = es_tok_encode(t, text, n, false, false, &ids, &n_ids);
            secs[r] = now_s() - t0;
            char *back = NULL;
            size_t blen = 0;
            if (st != ES_OK || es_tok_decode(t, ids, n_ids, &back, &blen) != ES_OK || blen != n ||
                memcmp(back, text, n) != 0) {
                fprintf(stderr, "bench_tok: %s: encoding is not lossless\n", names[i]);
                status = 1;
            }
            free(back);
            free(ids);
        }
        qsort(secs, (size_t)reps, sizeof(double), cmp_double);
        const double med = secs[reps / 2];
        printf("%-14s %10zu %10.3f %10.1f %12.0f\n", names[i], n_ids, med, (double)n / med / 1e6,
               (double)n_ids / med);
        es_tok_destroy(t);
    }
    free(text);
    return status;
}
