/*
 * bench_kern: throughput of the prefill matrix kernels (es_gemm) against the machine's measured
 * int8 peak. See bench/README.md for what each number means.
 *
 *   build-x/bench/bench_kern [--reps N] [--isa scalar|avx2|avx512] [--type q4_0,...] [--quick]
 *
 * Method: the peak is a loop of independent vpdpbusd zmm instructions (12 accumulators, no
 * memory operands), run on 1 and on 2 threads; on CPUs without AVX-512 VNNI it is the same loop
 * of vpmaddubsw ymm (64 int8 ops each). The float kernels are compared with a loop of
 * independent vfmadd231ps (zmm, or ymm without AVX-512). Each GEMM is checked against the scalar
 * table on a subset of columns before it is timed; then 1-thread and 2-thread runs alternate
 * (A B A B, so a period of shared cores hits both) and the median of each is reported. With 2
 * threads the pool splits [0, N) in two halves (multiples of 32 columns). G ops/s counts
 * 2*rows*N*K operations (multiply and add) per GEMM.
 */
#include "core/cpu.h"
#include "quant/kern.h"
#include "sched/pool.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- peaks --------------------------------------------------------------------------------- */

#define PEAK_ITERS 20000000L

__attribute__((target("avx512f,avx512vnni"))) static void vnni_loop(long n)
{
    __asm__ volatile("vpxord %%zmm0, %%zmm0, %%zmm0\n\t"
                     "vpternlogd $0xff, %%zmm30, %%zmm30, %%zmm30\n\t"
                     "vpxord %%zmm31, %%zmm31, %%zmm31\n\t" ::
                         : "zmm0", "zmm30", "zmm31");
    for (long i = 0; i < n; i++)
        __asm__ volatile(
            "vpdpbusd %%zmm30, %%zmm31, %%zmm0\n\t vpdpbusd %%zmm30, %%zmm31, %%zmm1\n\t"
            "vpdpbusd %%zmm30, %%zmm31, %%zmm2\n\t vpdpbusd %%zmm30, %%zmm31, %%zmm3\n\t"
            "vpdpbusd %%zmm30, %%zmm31, %%zmm4\n\t vpdpbusd %%zmm30, %%zmm31, %%zmm5\n\t"
            "vpdpbusd %%zmm30, %%zmm31, %%zmm6\n\t vpdpbusd %%zmm30, %%zmm31, %%zmm7\n\t"
            "vpdpbusd %%zmm30, %%zmm31, %%zmm8\n\t vpdpbusd %%zmm30, %%zmm31, %%zmm9\n\t"
            "vpdpbusd %%zmm30, %%zmm31, %%zmm10\n\t vpdpbusd %%zmm30, %%zmm31, %%zmm11\n\t" ::
                : "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9",
                  "zmm10", "zmm11");
}

__attribute__((target("avx2"))) static void maddubs_loop(long n)
{
    for (long i = 0; i < n; i++)
        __asm__ volatile(
            "vpmaddubsw %%ymm14, %%ymm15, %%ymm0\n\t vpmaddubsw %%ymm14, %%ymm15, %%ymm1\n\t"
            "vpmaddubsw %%ymm14, %%ymm15, %%ymm2\n\t vpmaddubsw %%ymm14, %%ymm15, %%ymm3\n\t"
            "vpmaddubsw %%ymm14, %%ymm15, %%ymm4\n\t vpmaddubsw %%ymm14, %%ymm15, %%ymm5\n\t"
            "vpmaddubsw %%ymm14, %%ymm15, %%ymm6\n\t vpmaddubsw %%ymm14, %%ymm15, %%ymm7\n\t"
            "vpmaddubsw %%ymm14, %%ymm15, %%ymm8\n\t vpmaddubsw %%ymm14, %%ymm15, %%ymm9\n\t"
            "vpmaddubsw %%ymm14, %%ymm15, %%ymm10\n\t vpmaddubsw %%ymm14, %%ymm15, %%ymm11\n\t" ::
                : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
                  "xmm10", "xmm11");
}

__attribute__((target("avx512f"))) static void fma512_loop(long n)
{
    __asm__ volatile("vpxord %%zmm30, %%zmm30, %%zmm30\n\t vpxord %%zmm31, %%zmm31, %%zmm31" ::
                         : "zmm30", "zmm31");
    for (long i = 0; i < n; i++)
        __asm__ volatile(
            "vfmadd231ps %%zmm30, %%zmm31, %%zmm0\n\t vfmadd231ps %%zmm30, %%zmm31, %%zmm1\n\t"
            "vfmadd231ps %%zmm30, %%zmm31, %%zmm2\n\t vfmadd231ps %%zmm30, %%zmm31, %%zmm3\n\t"
            "vfmadd231ps %%zmm30, %%zmm31, %%zmm4\n\t vfmadd231ps %%zmm30, %%zmm31, %%zmm5\n\t"
            "vfmadd231ps %%zmm30, %%zmm31, %%zmm6\n\t vfmadd231ps %%zmm30, %%zmm31, %%zmm7\n\t"
            "vfmadd231ps %%zmm30, %%zmm31, %%zmm8\n\t vfmadd231ps %%zmm30, %%zmm31, %%zmm9\n\t"
            "vfmadd231ps %%zmm30, %%zmm31, %%zmm10\n\t vfmadd231ps %%zmm30, %%zmm31, %%zmm11\n\t" ::
                : "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9",
                  "zmm10", "zmm11");
}

__attribute__((target("avx2,fma"))) static void fma256_loop(long n)
{
    for (long i = 0; i < n; i++)
        __asm__ volatile(
            "vfmadd231ps %%ymm14, %%ymm15, %%ymm0\n\t vfmadd231ps %%ymm14, %%ymm15, %%ymm1\n\t"
            "vfmadd231ps %%ymm14, %%ymm15, %%ymm2\n\t vfmadd231ps %%ymm14, %%ymm15, %%ymm3\n\t"
            "vfmadd231ps %%ymm14, %%ymm15, %%ymm4\n\t vfmadd231ps %%ymm14, %%ymm15, %%ymm5\n\t"
            "vfmadd231ps %%ymm14, %%ymm15, %%ymm6\n\t vfmadd231ps %%ymm14, %%ymm15, %%ymm7\n\t"
            "vfmadd231ps %%ymm14, %%ymm15, %%ymm8\n\t vfmadd231ps %%ymm14, %%ymm15, %%ymm9\n\t"
            "vfmadd231ps %%ymm14, %%ymm15, %%ymm10\n\t vfmadd231ps %%ymm14, %%ymm15, %%ymm11\n\t" ::
                : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
                  "xmm10", "xmm11");
}

typedef struct peak_job {
    void (*loop)(long);
    long iters;
} peak_job;

static void peak_fn(void *arg, int ith, int nth)
{
    (void)ith, (void)nth;
    peak_job *j = arg;
    j->loop(j->iters);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ops per iteration: 12 instructions x ops per instruction */
static void measure_peak(void (*loop)(long), double ops_per_iter, es_pool *p1, es_pool *p2,
                         double out[2])
{
    enum { REPS = 5 };
    double t[2][REPS];
    peak_job j = {loop, PEAK_ITERS / 4};
    es_pool_run(p1, peak_fn, &j); /* warm up (frequency, page-in) */
    j.iters = PEAK_ITERS;
    for (int r = 0; r < REPS; r++)
        for (int k = 0; k < 2; k++) {
            es_pool *p = k ? p2 : p1;
            double t0 = now_s();
            es_pool_run(p, peak_fn, &j);
            t[k][r] = now_s() - t0;
        }
    for (int k = 0; k < 2; k++)
        out[k] = ops_per_iter * PEAK_ITERS * (k ? es_pool_size(p2) : 1) / median(t[k], REPS) / 1e9;
}

/* ---- GEMM -------------------------------------------------------------------------------------- */

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
    int64_t n0 = j->N * ith / nth / 32 * 32, n1 = ith == nth - 1 ? j->N : j->N * (ith + 1) / nth / 32 * 32;
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

typedef struct shape { int64_t K, N, R; } shape;

static int is_int_type(uint32_t t) { return t != ES_QTYPE_F32 && t != ES_QTYPE_F16 && t != ES_QTYPE_BF16; }

/* Returns 0 if the check against scalar failed. */
static int bench_one(const es_kern *k, const es_kern *ks, uint32_t type, shape s, int reps,
                     es_pool *p1, es_pool *p2, const double peak_int[2], const double peak_flt[2])
{
    const es_kern_ops *o = &k->op[type], *os = &ks->op[type];
    const size_t wrb = es_qtype_row_bytes(type, s.K);
    uint8_t *W = aalloc(wrb * s.N);
    float *tmp = malloc(sizeof(float) * s.K), *X = aalloc(sizeof(float) * s.R * s.K);
    for (int64_t n = 0; n < s.N; n++) {
        for (int64_t i = 0; i < s.K; i++) tmp[i] = 0.05f * urand();
        es_quantize_row(type, tmp, W + n * wrb, s.K);
    }
    for (int64_t i = 0; i < s.R * s.K; i++) X[i] = urand() * (i % 331 == 0 ? 200.0f : 2.0f);
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
    double worst = 0;
    for (int64_t r = 0; r < s.R; r++)
        for (int64_t n = 0; n < s.N; n++) {
            if (n >= nchk - 16 && n < s.N - 16) continue;
            double a = Y[r * s.N + n], b = Ys[r * s.N + n];
            double e = fabs(a - b) / (fabs(b) + 1e-3);
            if (e > worst) worst = e;
        }
    const double tol = type == ES_QTYPE_BF16 ? 5e-2 : 1e-4;
    if (!(worst <= tol)) {
        printf("%-7s %-5s K=%-5ld N=%-5ld rows=%-4ld CHECK FAILED: worst relative error %.3g\n",
               k->isa, es_qtype_name(type), (long)s.K, (long)s.N, (long)s.R, worst);
        return 0;
    }

    /* timing: 1 thread and 2 threads alternate */
    double t[2][64];
    if (reps > 64) reps = 64;
    es_pool_run(p1, gemm_fn, &j); /* warm */
    for (int r = 0; r < reps; r++)
        for (int c = 0; c < 2; c++) {
            double t0 = now_s();
            es_pool_run(c ? p2 : p1, gemm_fn, &j);
            t[c][r] = now_s() - t0;
        }
    const double ops = 2.0 * s.R * s.N * s.K;
    const double *peak = is_int_type(type) ? peak_int : peak_flt;
    double med[2];
    for (int c = 0; c < 2; c++) {
        med[c] = median(t[c], reps);
        const double g = ops / med[c] / 1e9;
        printf("%-7s %-5s K=%-5ld N=%-5ld rows=%-4ld thr=%d %9.3f ms %8.1f Gops/s %5.1f %% of %s "
               "peak  act %.3f ms (%.1f%%)\n",
               k->isa, es_qtype_name(type), (long)s.K, (long)s.N, (long)s.R, c ? 2 : 1,
               med[c] * 1e3, g, 100.0 * g / peak[c], is_int_type(type) ? "int8" : "fma", t_act * 1e3,
               100.0 * t_act / med[c]);
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

static void noop_fn(void *arg, int ith, int nth) { (void)arg, (void)ith, (void)nth; }

int main(int argc, char **argv)
{
    int reps = 11, quick = 0;
    const char *only_isa = NULL, *only_types = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc) only_isa = argv[++i];
        else if (!strcmp(argv[i], "--type") && i + 1 < argc) only_types = argv[++i];
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else {
            fprintf(stderr, "usage: %s [--reps N] [--isa scalar|avx2|avx512] [--type q4_0,f16,...] "
                            "[--quick]\n", argv[0]);
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
        for (int i = 0; i < RUNS; i++) es_pool_run(p2, noop_fn, NULL);
        printf("pool: empty 2-thread fork-join %.2f us\n", (now_s() - t0) / RUNS * 1e6);
    }

    double pk_int[2], pk_flt[2];
    const char *pk_name;
    if (es_cpu_has(ES_CPU_AVX512F | ES_CPU_AVX512_VNNI)) {
        measure_peak(vnni_loop, 12 * 128.0, p1, p2, pk_int);
        measure_peak(fma512_loop, 12 * 32.0, p1, p2, pk_flt);
        pk_name = "vpdpbusd zmm / vfmadd231ps zmm";
    } else if (es_cpu_has(ES_CPU_AVX2 | ES_CPU_FMA)) {
        measure_peak(maddubs_loop, 12 * 64.0, p1, p2, pk_int);
        measure_peak(fma256_loop, 12 * 16.0, p1, p2, pk_flt);
        pk_name = "vpmaddubsw ymm / vfmadd231ps ymm";
    } else {
        pk_int[0] = pk_int[1] = pk_flt[0] = pk_flt[1] = 1.0;
        pk_name = "none (no AVX2): percentages meaningless";
    }
    printf("peak (%s): int8 %.1f / %.1f Gops/s, fma %.1f / %.1f GFLOP/s (1 / 2 threads)\n",
           pk_name, pk_int[0], pk_int[1], pk_flt[0], pk_flt[1]);
    printf("GEMM: median of %d runs each, 1 and 2 threads alternating; act = es_act_prepare, 1 thread\n",
           reps);

    static const uint32_t types[] = {ES_QTYPE_Q4_0, ES_QTYPE_Q8_0, ES_QTYPE_Q4_K, ES_QTYPE_Q5_K,
                                     ES_QTYPE_Q6_K, ES_QTYPE_F16,  ES_QTYPE_BF16, ES_QTYPE_F32};
    const shape shapes_full[] = {{2048, 1024, 128}, {1024, 2048, 128}, {2048, 2048, 512}, {2048, 1024, 16}};
    const shape shapes_quick[] = {{2048, 1024, 128}};
    const shape *shapes = quick ? shapes_quick : shapes_full;
    const int n_shapes = quick ? 1 : (int)(sizeof(shapes_full) / sizeof(shapes_full[0]));
    static const char *isas[] = {"avx2", "avx512", "scalar"};
    es_kern ks;
    es_kern_get("scalar", &ks);
    int ok = 1;
    for (size_t ii = 0; ii < 3; ii++) {
        es_kern k;
        if (only_isa ? strcmp(only_isa, isas[ii]) != 0 : !strcmp(isas[ii], "scalar")) continue;
        if (!es_kern_get(isas[ii], &k)) {
            printf("%s: not available on this CPU\n", isas[ii]);
            continue;
        }
        for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
            if (only_types && !strstr(only_types, es_qtype_name(types[ti]))) continue;
            for (int si = 0; si < n_shapes; si++)
                ok &= bench_one(&k, &ks, types[ti], shapes[si], reps, p1, p2, pk_int, pk_flt);
        }
    }
    es_pool_destroy(p1);
    es_pool_destroy(p2);
    return ok ? 0 : 1;
}
