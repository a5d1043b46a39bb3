/*
 * Where a prefill's time goes: the phase profile (estream.h es_session_profile) of prefills of
 * pseudo-random ids at several lengths, each phase against its own bound, measured on the spot:
 *
 *   int8 peak     the vector int8 product instruction of the kernel table in a register-only
 *                 loop (bench/peak.h; for the amx table, avx512's vpdpbusd)
 *   AMX peak      tdpbssd on full tiles, the same way, where AMX runs (else the output says why
 *                 there is no number)
 *   float peak    the FMA of the table's register width, the same way
 *   DRAM read     the best of 5 passes of all threads summing a 1 GiB buffer (far past the L3)
 *
 * Each phase names its engine: the int8 phases the table's product instruction (amx: the tiles
 * for calls of 16 rows or more, vpdpbusd below), the float ones the FMA, and its int8 rate is
 * given as a share of both peaks. A phase's bound is max(int_ops / its engine's int8 peak +
 * float_ops / float peak, weight_bytes / DRAM read): the least time its work could take on this
 * machine; "of bound" is that over the time measured. The request's floor is the same over the
 * whole request. Then the cold start: a new `estream prefill --ids` process (model file in the
 * page cache) of the first length, its own prefill seconds and its process wall time, against
 * the same length's median here.
 *
 * usage: bench_phases MODEL [LENGTHS=128,512,2048] [THREADS=all] [REPS=5] [ESTREAM=build/estream]
 * The kernel table is the default one, or ESTREAM_ISA's. Each length: one warm-up, REPS timed
 * prefills; the profile shown is the median repetition's (by wall time).
 */
#include "estream.h"
#include "estream_tools.h" /* the tree's own helpers (not installed, not in the ABI) */
#include "peak.h"

#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

enum { MAX_LENGTHS = 16, MAX_REPS = 31 };

/* The same pseudo-random ids for every run (a fixed LCG; ids in [0, n_vocab)). */
static void make_ids(int32_t *ids, int n, int n_vocab)
{
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((x >> 33) % (uint64_t)n_vocab);
    }
}

static double bound_s(double iops, double fops, double bytes, const double pk[3])
{
    const double c = iops / pk[0] + fops / pk[1], m = bytes / pk[2];
    return c > m ? c : m;
}

/* A new `estream prefill --ids FILE --json -t T` process: its prefill seconds (from the JSON)
 * and the process's wall time; false if it failed. */
static bool one_shot(const char *estream, const char *model, const char *ids_path, int threads,
                     double *prefill_s, double *wall_s)
{
    char out_path[] = "/tmp/bench_phases_out.XXXXXX";
    const int fd = mkstemp(out_path);
    if (fd < 0) return false;
    char tbuf[16];
    snprintf(tbuf, sizeof(tbuf), "%d", threads);
    char *argv[] = {(char *)estream, "prefill", "-m", (char *)model, "--ids", (char *)ids_path,
                    "--json", "-t", tbuf, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd, 1);
    pid_t pid;
    const double t0 = now_s();
    int rc = posix_spawn(&pid, estream, &fa, NULL, argv, environ), status = 0;
    if (rc == 0) waitpid(pid, &status, 0);
    *wall_s = now_s() - t0;
    posix_spawn_file_actions_destroy(&fa);
    bool ok = rc == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    char json[8192] = {0};
    if (ok) {
        lseek(fd, 0, SEEK_SET);
        const ssize_t got = read(fd, json, sizeof(json) - 1);
        const char *s = got > 0 ? strstr(json, "\"seconds\":") : NULL;
        ok = s && sscanf(s + 10, "%lf", prefill_s) == 1;
    }
    close(fd);
    unlink(out_path);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fprintf(stderr, "usage: bench_phases MODEL [LENGTHS=128,512,2048] [THREADS=all] "
                        "[REPS=5] [ESTREAM=build/estream]\n");
        return argc < 2;
    }
    const char *model_path = argv[1];
    const char *lens_arg = argc > 2 ? argv[2] : "128,512,2048";
    const int n_cpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    const int threads = argc > 3 ? atoi(argv[3]) : n_cpu;
    const int reps = argc > 4 ? atoi(argv[4]) : 5;
    const char *estream = argc > 5 ? argv[5] : "build/estream";
    int lens[MAX_LENGTHS], n_lens = 0;
    for (const char *p = lens_arg; *p && n_lens < MAX_LENGTHS;) {
        char *end;
        const long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 1 << 20) {
            fprintf(stderr, "bench_phases: bad length list %s\n", lens_arg);
            return 1;
        }
        lens[n_lens++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    if (threads < 1 || threads > ES_MAX_THREADS || reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "bench_phases: THREADS 1..%d, REPS 1..%d\n", ES_MAX_THREADS, MAX_REPS);
        return 1;
    }
    es_model *m = NULL;
    if (es_model_open(model_path, 0, &m)) {
        fprintf(stderr, "bench_phases: %s\n", es_last_error());
        return 1;
    }
    es_session_params sp = es_session_default_params();
    sp.n_threads = threads;
    es_session *s = NULL;
    if (es_session_create(m, &sp, &s)) {
        fprintf(stderr, "bench_phases: %s\n", es_last_error());
        return 1;
    }
    const int nv = es_model_n_vocab(m);
    float *logits = malloc(sizeof(float) * (size_t)nv);
    es_run_stats st;

    /* the machine's bounds, with the session's table */
    es_pool *p1, *pn;
    if (es_pool_create(1, &p1) || es_pool_create(threads, &pn)) return 1;
    int32_t one = 0;
    es_session_prefill(s, &one, 1, 0, logits);
    es_session_stats(s, &st);
    /* the vector int8 peak (amx: avx512's, which its small calls run at), the AMX one where AMX
     * runs here, and the bound of int8 work at the table's own engine */
    const bool amx = !strcmp(st.kernels, "amx");
    const peak_kind pkind = peak_for_isa(amx ? "avx512" : st.kernels);
    double ipk[2], fpk[2], apk[2] = {0, 0};
    measure_peak(pkind.int_loop, pkind.int_ops, p1, pn, ipk);
    measure_peak(pkind.flt_loop, pkind.flt_ops, p1, pn, fpk);
    const char *no_amx = es_kernels_why_not("amx");
    if (!no_amx) measure_peak(amx_loop, AMX_LOOP_OPS, p1, pn, apk);
    const double bw = dram_read_bw(pn);
    const double pk[3] = {(amx ? apk[1] : ipk[1]) * 1e9, fpk[1] * 1e9, bw};
    const char *int_engine = amx ? "amx tdpbssd (vpdpbusd < 16 rows)" : pkind.name;
    char cpu[512] = "?";
    FILE *ci = fopen("/proc/cpuinfo", "r");
    for (char line[512]; ci && fgets(line, sizeof(line), ci);)
        if (!strncmp(line, "model name", 10)) {
            const char *c = strchr(line, ':');
            snprintf(cpu, sizeof(cpu), "%.200s", c ? c + 2 : line);
            cpu[strcspn(cpu, "\n")] = 0;
            break;
        }
    if (ci) fclose(ci);
    printf("machine: %s, %d CPUs; kernels %s; %d threads; model %s\n", cpu, n_cpu, st.kernels,
           threads, model_path);
    printf("bounds measured now: int8 peak %.1f G ops/s (%s, %d threads), float peak %.1f G "
           "ops/s, DRAM read %.1f GB/s\n",
           ipk[1], pkind.name, threads, fpk[1], bw / 1e9);
    if (no_amx)
        printf("AMX peak: no number, no usable AMX on this machine: %s\n\n", no_amx);
    else
        printf("AMX peak: %.1f G ops/s (tdpbssd, %d threads)%s\n\n", apk[1], threads,
               amx ? "" : "; ESTREAM_ISA=amx runs the amx table");

    double med_s[MAX_LENGTHS] = {0};
    for (int li = 0; li < n_lens; li++) {
        const int n = lens[li];
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
        make_ids(ids, n, nv);
        es_phase_profile prof[MAX_REPS];
        double secs[MAX_REPS];
        if (es_session_prefill(s, ids, (size_t)n, 0, logits)) { /* warm-up */
            fprintf(stderr, "bench_phases: %s\n", es_last_error());
            return 1;
        }
        for (int r = 0; r < reps; r++) {
            if (es_session_prefill(s, ids, (size_t)n, 0, logits) ||
                es_session_profile(s, &prof[r])) {
                fprintf(stderr, "bench_phases: %s\n", es_last_error());
                return 1;
            }
            secs[r] = prof[r].seconds;
        }
        free(ids);
        double sorted[MAX_REPS];
        memcpy(sorted, secs, sizeof(double) * (size_t)reps);
        const double med = median(sorted, reps);
        int mi = 0;
        for (int r = 0; r < reps; r++)
            if (secs[r] == med || (reps % 2 == 0 && secs[r] <= med && secs[r] > secs[mi])) mi = r;
        const es_phase_profile *p = &prof[mi];
        med_s[li] = p->seconds;
        double ti = 0, tf = 0, tb = 0;
        printf("%d tokens: %.3f s, %.1f tok/s (median of %d)\n", n, p->seconds,
               n / p->seconds, reps);
        printf("| phase | engine | ms | share | G int8 ops/s | %% vector int8 peak | %% AMX peak | "
               "GB/s weights | %% DRAM | bound ms | of bound |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|\n");
        for (int ph = 0; ph < ES_PHASE_COUNT; ph++) {
            const double t = p->phase_seconds[ph];
            const double io = p->int_ops[ph], fo = p->float_ops[ph], wb = p->weight_bytes[ph];
            ti += io, tf += fo, tb += wb;
            if (t < 0.0005 * p->seconds && io == 0 && fo == 0) continue;
            const char *engine = io > 0 ? int_engine : fo > 0 ? pkind.flt_name : "";
            printf("| %s | %s | %.1f | %.1f %% |", es_phase_name((es_phase)ph), engine, t * 1e3,
                   100 * t / p->seconds);
            if (io > 0 && t > 0) {
                printf(" %.1f | %.1f %% |", io / t / 1e9, 100 * io / t / (ipk[1] * 1e9));
                if (no_amx)
                    printf(" no AMX here |");
                else
                    printf(" %.1f %% |", 100 * io / t / (apk[1] * 1e9));
            } else if (fo > 0 && t > 0) {
                printf(" (float %.1f) | (%.1f %%) | |", fo / t / 1e9, 100 * fo / t / pk[1]);
            } else {
                printf(" | | |");
            }
            if (wb > 0 && t > 0)
                printf(" %.1f | %.1f %% |", wb / t / 1e9, 100 * wb / t / pk[2]);
            else
                printf(" | |");
            const double b = bound_s(io, fo, wb, pk);
            if (b > 0 && t > 0)
                printf(" %.1f | %.0f %% |\n", b * 1e3, 100 * b / t);
            else
                printf(" | |\n");
        }
        const double floor_s = bound_s(ti, tf, tb, pk);
        char amx_share[32] = "no AMX here";
        if (!no_amx)
            snprintf(amx_share, sizeof(amx_share), "%.1f %%",
                     100 * ti / p->seconds / (apk[1] * 1e9));
        printf("| **request** | | %.1f | 100 %% | %.1f | %.1f %% | %s | %.1f | %.1f %% | %.1f "
               "(floor) | %.0f %% |\n\n",
               p->seconds * 1e3, ti / p->seconds / 1e9, 100 * ti / p->seconds / (ipk[1] * 1e9),
               amx_share, tb / p->seconds / 1e9, 100 * tb / p->seconds / pk[2], floor_s * 1e3,
               100 * floor_s / p->seconds);
        printf("%d tokens: %.2fx the floor (%.1f ms: %.2f G int8 ops at peak %.1f ms, %.2f GB of "
               "weights at DRAM read %.1f ms)\n\n",
               n, p->seconds / floor_s, floor_s * 1e3, ti / 1e9, 1e3 * (ti / pk[0] + tf / pk[1]),
               tb / 1e9, 1e3 * tb / pk[2]);
    }

    /* cold start: a new process of the first length */
    char ids_path[] = "/tmp/bench_phases_ids.XXXXXX";
    const int fd = mkstemp(ids_path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) return 1;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)lens[0]);
    make_ids(ids, lens[0], nv);
    for (int i = 0; i < lens[0]; i++) fprintf(f, "%d ", ids[i]);
    fclose(f);
    free(ids);
    double pre[MAX_REPS], wall[MAX_REPS];
    int ok = 0;
    for (int r = 0; r < 3; r++)
        if (one_shot(estream, model_path, ids_path, threads, &pre[ok], &wall[ok])) ok++;
    unlink(ids_path);
    if (!ok) {
        fprintf(stderr, "bench_phases: %s prefill failed (give ESTREAM, the estream binary)\n",
                estream);
        return 1;
    }
    const double mp = median(pre, ok), mw = median(wall, ok);
    printf("| cold start, %d tokens | prefill s | process wall s | in-process prefill s | "
           "one-shot / in-process |\n|---|---|---|---|---|\n",
           lens[0]);
    printf("| new `estream prefill` process (median of %d) | %.3f | %.3f | %.3f | %.2fx |\n", ok,
           mp, mw, med_s[0], mp / med_s[0]);
    free(logits);
    es_session_destroy(s);
    es_model_close(m);
    es_pool_destroy(p1);
    es_pool_destroy(pn);
    return 0;
}
