/*
 * bench_kern: throughput of the prefill matrix kernels (es_gemm) against the machine's measured
 * int8 peak. See bench/README.md for what each number means.
 *
 *   build-x/bench/bench_kern [--reps N] [--isa scalar|avx2|avxvnni|avx512|amx] [--type q4_0,...]
 *                            [--quick] [--shape K,N,ROWS]
 *
 * --type takes type names in any case (q4_k, Q4_K); a name that is not one of the types below, or
 * an --isa that is not a table, is an error (exit 2), not an empty table.
 *
 * Method: each kernel table is compared with the peak of the instruction it is built on: a loop
 * of independent vpdpbusd zmm (avx512), vpdpbusd ymm (avxvnni) or vpmaddubsw ymm (avx2; 64 int8
 * ops each) instructions (12 accumulators, no memory operands; bench/peak.h), or of tdpbssd on
 * full tiles (amx: 32768 ops each, 6 accumulator tiles; the avx512 peak is printed beside it),
 * run on 1 and on 2 threads. The amx table runs only where the CPU has AMX: the tests'
 * emulation of the tiles is not linked here and never timed. The float kernels are compared
 * with a loop of independent vfmadd231ps (zmm for avx512, else ymm). Each GEMM is checked
 * against the scalar table on a subset of columns before it is timed. Then, per repetition: a short peak run
 * on 1 thread, the GEMM on 1 thread, a short peak run on 2 threads, the GEMM on 2 threads
 * (interleaved, docs/design.md §9, so a period of shared cores hits both sides); the table gives the
 * median GEMM time, G ops/s from it, and the median ratio of each GEMM run to its adjacent peak
 * run. With 2 threads the pool splits [0, N) in two halves (multiples of 32 columns). G ops/s
 * counts 2*rows*N*K operations (multiply and add) per GEMM, float kernels included.
 */
#include "core/cpu.h"
#include "peak.h"
#include "quant/kern.h"
#include "core/pool.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- peaks (loops and helpers in peak.h, shared with bench_expert) --------------------------- */

static void (*g_int_loop)(long), (*g_flt_loop)(long);
static double g_int_ops, g_flt_ops; /* ops per loop iteration */

/* A short peak run (about 4 ms) on all threads of p: Gops/s. */
static double peak_now(int integer, es_pool *p)
{
    if (!g_int_loop) return 1.0;
    peak_job j = {integer ? g_int_loop : g_flt_loop, PEAK_ITERS / 8};
    double t0 = now_s();
    es_pool_run(p, peak_fn, &j);
    return (integer ? g_int_ops : g_flt_ops) * j.iters * es_pool_size(p) / (now_s() - t0) / 1e9;
}

/* ---- GEMM --------------------------------------------------------------------------------------
 */

typedef struct gemm_job {
    const es_kern_ops *ops;
    const void *W;
    int64_t K, N, R;
    const void *act;
    float *Y;
    void *scratch[2];
} gemm_job;

static void gemm_fn(void *arg, int ith, int nth)
{
    gemm_job *j = arg;
    int64_t n0 = j->N * ith / nth / 32 * 32,
            n1 = ith == nth - 1 ? j->N : j->N * (ith + 1) / nth / 32 * 32;
    j->ops->gemm(j->W, j->K, n0, n1, j->act, NULL, j->R, j->Y, j->N, 0, j->scratch[ith]);
}

static void *aalloc(size_t n)
{
    void *p = es_alloc_big(n);
    if (!p) {
        fprintf(stderr, "bench_kern: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static uint64_t rng_state = 42;
static float urand(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) * (2.0 / 16777216.0) - 1.0);
}

typedef struct shape {
    int64_t K, N, R;
} shape;

static int is_int_type(uint32_t t)
{
    return t != ES_QTYPE_F32 && t != ES_QTYPE_F16 && t != ES_QTYPE_BF16;
}

/* Returns 0 if the check against scalar failed. */
static int bench_one(const es_kern *k, const es_kern *ks, uint32_t type, shape s, int reps,
                     es_pool *p1, es_pool *p2)
{
    const es_kern_ops *o = &k->op[type], *os = &ks->op[type];
    const size_t wrb = es_qtype_row_bytes(type, s.K);
    uint8_t *W = aalloc(wrb * s.N);
    float *tmp = malloc(sizeof(float) * s.K), *X = aalloc(sizeof(float) * s.R * s.K);
    for (int64_t n = 0; n < s.N; n++) {
        for (int64_t i = 0; i < s.K; i++)
            tmp[i] = 0.05f * urand();
        if (es_quantize_row(type, tmp, W + n * wrb, s.K)) continue;
        /* IQ4_NL (estream reads it, never writes it): random nibbles, each block's F16 d 0.001 */
        for (size_t b = 0; b < wrb; b++)
            W[n * wrb + b] = (uint8_t)(urand() * 128.0f + 128.0f);
        const size_t bb = es_qtype_info_get(type)->block_bytes;
        for (size_t b = 0; b < wrb; b += bb) {
            const es_f16 d = es_f32_to_f16(0.001f);
            memcpy(W + n * wrb + b, &d, 2);
        }
    }
    for (int64_t i = 0; i < s.R * s.K; i++)
        X[i] = urand() * (i % 331 == 0 ? 200.0f : 2.0f);
    void *act = aalloc(o->act_row_bytes(s.K) * s.R), *acts = aalloc(os->act_row_bytes(s.K) * s.R);
    float *Y = aalloc(sizeof(float) * s.R * s.N), *Ys = aalloc(sizeof(float) * s.R * s.N);
    const size_t sb = o->scratch_bytes(s.K);
    gemm_job j = {o, W, s.K, s.N, s.R, act, Y, {aalloc(sb), aalloc(sb)}};

    /* activation preparation: time it (median of 5), then check the GEMM against scalar */
    double ta[5];
    for (int r = 0; r < 5; r++) {
        double t0 = now_s();
        o->act_prepare(X, s.K, s.R, s.K, act);
        ta[r] = now_s() - t0;
    }
    const double t_act = median(ta, 5);
    os->act_prepare(X, s.K, s.R, s.K, acts);
    es_pool_run(p2, gemm_fn, &j);
    void *ss = aalloc(os->scratch_bytes(s.K));
    const int64_t nchk = s.N < 48 ? s.N : 48;
    os->gemm(W, s.K, 0, nchk - 16, acts, NULL, s.R, Ys, s.N, 0, ss);
    os->gemm(W, s.K, s.N - 16, s.N, acts, NULL, s.R, Ys, s.N, 0, ss);
    /* error relative to the largest reference output (dot products cancel, so per-element
     * relative errors mean nothing) */
    double maxdiff = 0, maxref = 0;
    for (int64_t r = 0; r < s.R; r++)
        for (int64_t n = 0; n < s.N; n++) {
            if (n >= nchk - 16 && n < s.N - 16) continue;
            const double a = Y[r * s.N + n], b = Ys[r * s.N + n];
            if (fabs(a - b) > maxdiff || a != a) maxdiff = a != a ? INFINITY : fabs(a - b);
            if (fabs(b) > maxref) maxref = fabs(b);
        }
    const double worst = maxdiff / (maxref + 1e-30);
    const double tol = 1e-5;
    if (!(worst <= tol)) {
        printf("%-7s %-5s K=%-5ld N=%-5ld rows=%-4ld CHECK FAILED: max |diff| / max |y| = %.3g\n",
               k->isa, es_qtype_name(type), (long)s.K, (long)s.N, (long)s.R, worst);
        return 0;
    }

    /* timing: peak, 1-thread GEMM, peak on 2 threads, 2-thread GEMM, repeated; the % of peak
     * is the median of each GEMM run against the peak run just before it, so a period when the
     * machine is shared (docs/design.md §9) hits both sides of the ratio */
    double t[2][64], pct[2][64];
    if (reps > 64) reps = 64;
    es_pool_run(p1, gemm_fn, &j); /* warm */
    const double ops = 2.0 * s.R * s.N * s.K;
    for (int r = 0; r < reps; r++)
        for (int c = 0; c < 2; c++) {
            es_pool *p = c ? p2 : p1;
            const double pk = peak_now(is_int_type(type), p);
            double t0 = now_s();
            es_pool_run(p, gemm_fn, &j);
            t[c][r] = now_s() - t0;
            pct[c][r] = 100.0 * ops / t[c][r] / 1e9 / pk;
        }
    double med[2];
    for (int c = 0; c < 2; c++) {
        med[c] = median(t[c], reps);
        const double g = ops / med[c] / 1e9;
        printf("%-7s %-5s K=%-5ld N=%-5ld rows=%-4ld thr=%d %9.3f ms %8.1f Gops/s %5.1f %% of %s "
               "peak  act %.3f ms (%.1f%%)\n",
               k->isa, es_qtype_name(type), (long)s.K, (long)s.N, (long)s.R, c ? 2 : 1,
               med[c] * 1e3, g, median(pct[c], reps), is_int_type(type) ? "int8" : "fma",
               t_act * 1e3, 100.0 * t_act / med[c]);
    }
    printf("%-7s %-5s K=%-5ld N=%-5ld rows=%-4ld 2-thread speedup %.2fx\n", k->isa,
           es_qtype_name(type), (long)s.K, (long)s.N, (long)s.R, med[0] / med[1]);
    fflush(stdout);
    es_free_big(W, wrb * s.N);
    free(tmp);
    es_free_big(X, sizeof(float) * s.R * s.K);
    es_free_big(act, o->act_row_bytes(s.K) * s.R);
    es_free_big(acts, os->act_row_bytes(s.K) * s.R);
    es_free_big(Y, sizeof(float) * s.R * s.N);
    es_free_big(Ys, sizeof(float) * s.R * s.N);
    es_free_big(j.scratch[0], sb);
    es_free_big(j.scratch[1], sb);
    es_free_big(ss, os->scratch_bytes(s.K));
    return 1;
}

static void noop_fn(void *arg, int ith, int nth)
{
    (void)arg, (void)ith, (void)nth;
}

static const uint32_t types[] = {ES_QTYPE_Q4_0,  ES_QTYPE_Q8_0,   ES_QTYPE_Q4_K,  ES_QTYPE_Q5_K,
                                 ES_QTYPE_Q6_K,  ES_QTYPE_Q3_K,   ES_QTYPE_Q2_K,  ES_QTYPE_Q5_0,
                                 ES_QTYPE_Q4_1,  ES_QTYPE_Q5_1,   ES_QTYPE_IQ4_NL, ES_QTYPE_IQ4_XS,
                                 ES_QTYPE_MXFP4, ES_QTYPE_F16,    ES_QTYPE_BF16,  ES_QTYPE_F32};
enum { N_TYPES = sizeof(types) / sizeof(types[0]) };

/* --type LIST: comma-separated names in any case (es_qtype_parse) into want[]; false, with
 * the name said, for one that is not a type or not one benchmarked here. */
static bool parse_types(const char *list, bool want[N_TYPES])
{
    char name[32];
    for (const char *p = list;;) {
        const size_t n = strcspn(p, ",");
        es_qtype t;
        bool found = false;
        if (n > 0 && n < sizeof(name)) {
            memcpy(name, p, n);
            name[n] = '\0';
            if (es_qtype_parse(name, &t))
                for (size_t i = 0; i < N_TYPES; i++)
                    if (types[i] == (uint32_t)t) want[i] = found = true;
        }
        if (!found) {
            fprintf(stderr, "bench_kern: --type: '%.*s' is not one of the benchmarked types\n",
                    (int)n, p);
            return false;
        }
        if (!p[n]) return true;
        p += n + 1;
    }
}

/* --isa NAME: one of es_kern_isa_names. */
static bool known_isa(const char *name)
{
    for (size_t i = 0; i < ES_KERN_N_ISA; i++)
        if (!strcmp(name, es_kern_isa_names[i])) return true;
    fprintf(stderr, "bench_kern: --isa: '%s' is not a kernel table (", name);
    for (size_t i = 0; i < ES_KERN_N_ISA; i++)
        fprintf(stderr, "%s%s", i ? ", " : "", es_kern_isa_names[i]);
    fprintf(stderr, ")\n");
    return false;
}

int main(int argc, char **argv)
{
    int reps = 11, quick = 0;
    const char *only_isa = NULL;
    bool only_types = false, want[N_TYPES] = {false};
    shape one = {0, 0, 0}; /* --shape K,N,ROWS: that shape alone */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
            only_isa = argv[++i];
            if (!known_isa(only_isa)) return 2;
        } else if (!strcmp(argv[i], "--type") && i + 1 < argc) {
            only_types = true;
            if (!parse_types(argv[++i], want)) return 2;
        }
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc &&
                 sscanf(argv[i + 1], "%" SCNd64 ",%" SCNd64 ",%" SCNd64, &one.K, &one.N,
                        &one.R) == 3 &&
                 one.K > 0 && one.K % 256 == 0 && one.N > 0 && one.R > 0)
            i++;
        else {
            fprintf(stderr,
                    "usage: %s [--reps N] [--isa scalar|avx2|avxvnni|avx512|amx] "
                    "[--type q4_0,f16,...] [--quick] [--shape K,N,ROWS (K a multiple of 256)]\n",
                    argv[0]);
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    const es_cpu_info *ci = es_cpu_get();
    char fl[512];
    printf("machine: %s, %s\n", ci->brand, es_cpu_flags_str(ci->flags, fl, sizeof(fl)));
    printf("caches (cpuid%s): L1d %zu KiB, L2 %zu KiB, L3 %zu KiB\n",
           ci->cache_from_cpuid ? "" : ", defaults", ci->l1d_bytes >> 10, ci->l2_bytes >> 10,
           ci->l3_bytes >> 10);

    es_pool *p1 = NULL, *p2 = NULL;
    if (es_pool_create(1, &p1) != ES_OK || es_pool_create(2, &p2) != ES_OK) {
        fprintf(stderr, "bench_kern: cannot create thread pools\n");
        return 1;
    }
    {
        enum { RUNS = 20000 };
        double t0 = now_s();
        for (int i = 0; i < RUNS; i++)
            es_pool_run(p2, noop_fn, NULL);
        printf("pool: empty 2-thread fork-join %.2f us\n", (now_s() - t0) / RUNS * 1e6);
    }

    printf(
        "GEMM: median of %d runs each; 1 and 2 threads alternate, each run right after a short\n"
        "      peak run on the same threads; %% of peak = median of (run / adjacent peak);\n"
        "      act = es_act_prepare of all rows on 1 thread, and its share of the 1-thread GEMM\n",
        reps);

    const shape shapes_full[] = {
        {2048, 1024, 128}, {1024, 2048, 128}, {2048, 2048, 512}, {2048, 1024, 16}};
    const shape shapes_quick[] = {{2048, 1024, 128}};
    const shape *shapes = one.K ? &one : quick ? shapes_quick : shapes_full;
    const int n_shapes =
        one.K || quick ? 1 : (int)(sizeof(shapes_full) / sizeof(shapes_full[0]));
    const char *const *isas = es_kern_isa_names;
    es_kern ks;
    es_kern_get("scalar", &ks);
    int ok = 1;
    for (size_t ii = 0; ii < ES_KERN_N_ISA; ii++) {
        es_kern k;
        if (only_isa ? strcmp(only_isa, isas[ii]) != 0 : !strcmp(isas[ii], "scalar")) continue;
        if (!es_kern_get(isas[ii], &k)) {
            printf("%s: not available here: %s%s\n", isas[ii], es_kern_isa_why_not(isas[ii]),
                   strcmp(isas[ii], "amx") ? ""
                                           : " (the tests' emulation of the tiles is not timed)");
            continue;
        }
        /* the peak of the instruction this table is built on (scalar: the AVX2 one) */
        const peak_kind pk = peak_for_isa(isas[ii]);
        double pk_int[2], pk_flt[2];
        measure_peak(pk.int_loop, pk.int_ops, p1, p2, pk_int);
        measure_peak(pk.flt_loop, pk.flt_ops, p1, p2, pk_flt);
        g_int_loop = pk.int_loop, g_flt_loop = pk.flt_loop, g_int_ops = pk.int_ops,
        g_flt_ops = pk.flt_ops;
        printf("%s peak (%s, vfmadd231ps): int8 %.1f / %.1f Gops/s, fma %.1f / %.1f GFLOP/s "
               "(1 / 2 threads)\n",
               isas[ii], pk.name, pk_int[0], pk_int[1], pk_flt[0], pk_flt[1]);
        if (!strcmp(isas[ii], "amx")) { /* the vector peak its calls below 16 rows run at */
            const peak_kind pv = peak_for_isa("avx512");
            double pv_int[2];
            measure_peak(pv.int_loop, pv.int_ops, p1, p2, pv_int);
            printf("amx: its calls of fewer than 16 rows run the avx512 kernels: %s peak %.1f / "
                   "%.1f Gops/s (1 / 2 threads)\n",
                   pv.name, pv_int[0], pv_int[1]);
        }
        if (!strcmp(isas[ii], "avx2")) {
            double mix[2];
            measure_peak(q8_sign_mix_loop, 12 * 64.0, p1, p2, mix);
            printf("avx2 q8_0 ceiling (bare vpsignb+vpmaddubsw+vpmaddwd+vpaddd, no VNNI): "
                   "%.1f %% / %.1f %% of the int8 peak (1 / 2 threads)\n",
                   100 * mix[0] / pk_int[0], 100 * mix[1] / pk_int[1]);
        }
        for (size_t ti = 0; ti < N_TYPES; ti++) {
            if (only_types && !want[ti]) continue;
            for (int si = 0; si < n_shapes; si++)
                ok &= bench_one(&k, &ks, types[ti], shapes[si], reps, p1, p2);
        }
    }
    es_pool_destroy(p1);
    es_pool_destroy(p2);
    return ok ? 0 : 1;
}
