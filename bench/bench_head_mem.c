/*
 * The head's memory: peak RSS of a 2,048-token prefill of a model with Qwen3's 151,936-token
 * vocabulary (the tiny-qwen3moe-vocab preset, written to $TMPDIR if missing), asking for
 *   last    the last position's logits only (es_session_prefill, all_logits 0)
 *   scores  per-token log-probs, ranks and the top-5 alternatives of every position
 *           (es_session_run), which needs the logits of every row, computed in chunks
 *   matrix  the whole [n][n_vocab] logits matrix (es_session_prefill, all_logits 1), what the
 *           scores would cost without the chunks
 * each in a fresh process (fork), so each peak is its own. The target: scores at most 64 MiB
 * above last.
 *
 * usage: build/bench/bench_head_mem [MODEL] [TOKENS] [THREADS]
 */
#include "estream.h"
#include "estream_tools.h" /* the tree's own helpers (not installed, not in the ABI) */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { MODE_LAST, MODE_SCORES, MODE_MATRIX };
static const char *const mode_name[] = {"last", "scores", "matrix"};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One run in this process: returns 0 and the peak RSS and seconds in out[0..1]. */
static int run(const char *path, int mode, int n, int threads, double out[2])
{
    es_model *m = NULL;
    if (es_model_open(path, 0, &m)) return fprintf(stderr, "%s\n", es_last_error()), 1;
    const int nv = es_model_n_vocab(m);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    uint64_t r = 12345;
    for (int i = 0; i < n; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((r >> 33) % (uint64_t)nv);
    }
    es_session_params p = es_session_default_params();
    p.n_threads = threads;
    p.max_tokens = n;
    es_session *s = NULL;
    if (es_session_create(m, &p, &s)) return fprintf(stderr, "%s\n", es_last_error()), 1;
    const double t0 = now_s();
    es_status st;
    if (mode == MODE_SCORES) {
        float *lp = malloc(sizeof(float) * (size_t)n), *top_lp = malloc(sizeof(float) * 5 * (size_t)n);
        int32_t *rank = malloc(sizeof(int32_t) * (size_t)n), *top = malloc(sizeof(int32_t) * 5 * (size_t)n);
        es_seq q = {.ids = ids, .n_ids = (size_t)n, .token_logprob = lp, .token_rank = rank,
                    .top_n = 5, .top_ids = top, .top_logprobs = top_lp};
        st = es_session_run(s, &q, 1);
    } else {
        float *logits = malloc(sizeof(float) * (size_t)nv * (mode == MODE_MATRIX ? (size_t)n : 1));
        st = es_session_prefill(s, ids, (size_t)n, mode == MODE_MATRIX, logits);
    }
    if (st) return fprintf(stderr, "%s\n", es_last_error()), 1;
    out[1] = now_s() - t0;
    out[0] = (double)es_peak_rss_bytes();
    return 0;
}

int main(int argc, char **argv)
{
    char def[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(def, sizeof(def), "%s/estream-tiny-qwen3moe-vocab-q4_0.gguf", tmp && *tmp ? tmp : "/tmp");
    const char *path = argc > 1 ? argv[1] : def;
    const int n = argc > 2 ? atoi(argv[2]) : 2048, threads = argc > 3 ? atoi(argv[3]) : 2;
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "writing %s (preset tiny-qwen3moe-vocab, q4_0)\n", path);
        es_synth_opts so = {.preset = "tiny-qwen3moe-vocab", .type = "q4_0", .seed = 1};
        if (es_synth(&so, path)) return fprintf(stderr, "%s\n", es_last_error()), 1;
    }
    double res[3][2];
    for (int mode = 0; mode < 3; mode++) {
        int fd[2];
        if (pipe(fd)) return perror("pipe"), 1;
        const pid_t pid = fork();
        if (pid == 0) {
            double out[2] = {0, 0};
            const int rc = run(path, mode, n, threads, out);
            if (write(fd[1], out, sizeof(out)) != (ssize_t)sizeof(out)) _exit(2);
            _exit(rc);
        }
        close(fd[1]);
        int status = 0;
        const ssize_t got = read(fd[0], res[mode], sizeof(res[mode]));
        close(fd[0]);
        waitpid(pid, &status, 0);
        if (got != (ssize_t)sizeof(res[mode]) || !WIFEXITED(status) || WEXITSTATUS(status))
            return fprintf(stderr, "bench_head_mem: the %s run failed\n", mode_name[mode]), 1;
    }
    es_cpu_desc cpu;
    es_cpu_describe(&cpu);
    printf("bench_head_mem: %s, %d tokens, vocabulary 151936, %d threads, CPU %s, kernels %s\n", path, n,
           threads, cpu.brand, es_kernels_name());
    printf("| run | peak RSS MiB | above last MiB | seconds |\n|---|---|---|---|\n");
    for (int mode = 0; mode < 3; mode++)
        printf("| %s | %.1f | %+.1f | %.2f |\n", mode_name[mode], res[mode][0] / 1048576.0,
               (res[mode][0] - res[0][0]) / 1048576.0, res[mode][1]);
    const double extra = (res[MODE_SCORES][0] - res[MODE_LAST][0]) / 1048576.0;
    printf("scores need %.1f MiB above last (target <= 64): %s\n", extra,
           extra <= 64.0 ? "met" : "MISSED");
    return extra <= 64.0 ? 0 : 3;
}
