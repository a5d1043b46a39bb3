/*
 * Machine peaks for the benchmarks: loops of independent vpdpbusd (int8: zmm for AVX-512 VNNI,
 * ymm for AVX-VNNI), vpmaddubsw (int8, AVX2) and vfmadd (float) instructions with 12 accumulators,
 * and of AMX tdpbssd (int8 tiles, 6 accumulator tiles) where AMX runs, timed on one thread and
 * on every thread of a pool. Header-only (static functions) so each benchmark program is one
 * file.
 */
#ifndef ES_BENCH_PEAK_H
#define ES_BENCH_PEAK_H

#include "core/pool.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* The instruction mix of the AVX2 table's Q8_0 product without VNNI, 8 weight rows x 4 weights
 * for one token (64 int8 ops): the weight's sign onto the activation (vpsignb), |w| times it
 * (vpmaddubsw), the int16 pair sums widened (vpmaddwd by ones: two of them could overflow
 * int16) and accumulated (vpaddd), 12 independent chains, operands in registers. Its rate over
 * the vpmaddubsw peak is the most a Q8_0 kernel built on it can reach on this core (kernels
 * also decode, load and scale), reported by bench_kern beside the kernel's own figure. */
__attribute__((target("avx2"), unused)) static void q8_sign_mix_loop(long n)
{
    __asm__ volatile("vpcmpeqw %%ymm13, %%ymm13, %%ymm13\n\t vpsrlw $15, %%ymm13, %%ymm13" ::
                         : "xmm13");
    for (long i = 0; i < n; i++)
        __asm__ volatile(
#define Q8MIX(r)                                                                                   \
    "vpsignb %%ymm15, %%ymm14, %%ymm12\n\t vpmaddubsw %%ymm12, %%ymm15, %%ymm12\n\t"                \
    "vpmaddwd %%ymm13, %%ymm12, %%ymm12\n\t vpaddd %%ymm12, %%ymm" #r ", %%ymm" #r "\n\t"
            Q8MIX(0) Q8MIX(1) Q8MIX(2) Q8MIX(3) Q8MIX(4) Q8MIX(5) Q8MIX(6) Q8MIX(7) Q8MIX(8)
                Q8MIX(9) Q8MIX(10) Q8MIX(11)
#undef Q8MIX
            ::
                : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
                  "xmm10", "xmm11", "xmm12");
}

/* The VEX-encoded vpdpbusd of AVX-VNNI (ymm). */
__attribute__((target("avxvnni"))) static void vnni_vex_loop(long n)
{
    for (long i = 0; i < n; i++)
        __asm__ volatile(
            "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm0\n\t %{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm1\n\t"
            "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm2\n\t %{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm3\n\t"
            "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm4\n\t %{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm5\n\t"
            "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm6\n\t %{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm7\n\t"
            "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm8\n\t %{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm9\n\t"
            "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm10\n\t %{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm11\n\t" ::
                : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
                  "xmm10", "xmm11");
}

__attribute__((target("avx512f"), unused)) static void fma512_loop(long n)
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

__attribute__((target("avx2,fma"), unused)) static void fma256_loop(long n)
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

/* AMX tdpbssd on full tiles: C (16 x 16 int32) += A (16 x 64 s8) . B (16 x 64 s8), 16 x 16 x 64
 * multiply-adds = 32768 ops per instruction, into 6 independent C tiles (A and B zero: the unit
 * does not look at values). One tdpbssd issues about every 16 cycles on Sapphire Rapids (Intel's
 * figure, not measured here), so an "iteration" of n here is a 16th of a loop of 6, to keep the
 * run about as long as the vector loops' (AMX_LOOP_OPS ops per n). Only where es_kernels_why_not("amx") is NULL (that call also
 * obtains the kernel's permission); each call configures and releases its thread's tiles. */
#define AMX_LOOP_OPS (6 * 32768.0 / 16)
__attribute__((target("amx-tile,amx-int8"), unused)) static void amx_loop(long n)
{
    _Alignas(64) unsigned char cfg[64] = {1}; /* palette 1 */
    for (int t = 0; t < 8; t++) {
        cfg[16 + 2 * t] = 64; /* colsb: 64 bytes */
        cfg[48 + t] = 16;     /* rows */
    }
    _tile_loadconfig(cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    _tile_zero(7);
    for (long i = 0; i < n / 16; i++) {
        _tile_dpbssd(0, 6, 7);
        _tile_dpbssd(1, 6, 7);
        _tile_dpbssd(2, 6, 7);
        _tile_dpbssd(3, 6, 7);
        _tile_dpbssd(4, 6, 7);
        _tile_dpbssd(5, 6, 7);
    }
    _tile_release();
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

__attribute__((unused)) static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct read_job {
    const uint64_t *buf;
    size_t n; /* words */
    uint64_t sink[ES_MAX_THREADS];
} read_job;

static void read_fn(void *arg, int ith, int nth)
{
    read_job *j = arg;
    const size_t a = j->n * (size_t)ith / (size_t)nth, b = j->n * (size_t)(ith + 1) / (size_t)nth;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = a; i + 4 <= b; i += 4) {
        s0 += j->buf[i];
        s1 += j->buf[i + 1];
        s2 += j->buf[i + 2];
        s3 += j->buf[i + 3];
    }
    j->sink[ith] = s0 + s1 + s2 + s3;
}

/* Bytes/s all threads of p read from DRAM (the best of 5 passes over 1 GiB). */
__attribute__((unused)) static double dram_read_bw(es_pool *p)
{
    const size_t bytes = (size_t)1 << 30;
    uint64_t *buf = malloc(bytes);
    if (!buf) return 0;
    memset(buf, 1, bytes);
    read_job j = {buf, bytes / 8, {0}};
    double best = 0;
    for (int r = 0; r < 5; r++) {
        const double t0 = now_s();
        es_pool_run(p, read_fn, &j);
        const double bw = (double)bytes / (now_s() - t0);
        best = bw > best ? bw : best;
    }
    free(buf);
    return best;
}

/* ops per iteration: 12 instructions x ops per instruction */
__attribute__((unused)) static void measure_peak(void (*loop)(long), double ops_per_iter, es_pool *p1, es_pool *p2,
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

/* The peak loops that go with a kernel table: the int8 product instruction it is built on and
 * the float FMA of its register width. ops = operations per loop iteration (12 instructions;
 * AMX_LOOP_OPS for the tiles). */
typedef struct peak_kind {
    const char *name;
    void (*int_loop)(long);
    double int_ops;
    void (*flt_loop)(long);
    double flt_ops;
    const char *flt_name;
} peak_kind;

__attribute__((unused)) static peak_kind peak_for_isa(const char *isa)
{
    if (!strcmp(isa, "amx"))
        return (peak_kind){"amx tdpbssd", amx_loop, AMX_LOOP_OPS, fma512_loop, 12 * 32.0,
                           "vfmadd zmm"};
    if (!strcmp(isa, "avx512"))
        return (peak_kind){"avx512 vpdpbusd zmm", vnni_loop, 12 * 128.0, fma512_loop, 12 * 32.0,
                           "vfmadd zmm"};
    if (!strcmp(isa, "avxvnni"))
        return (peak_kind){"avx-vnni vpdpbusd ymm", vnni_vex_loop, 12 * 64.0, fma256_loop,
                           12 * 16.0, "vfmadd ymm"};
    return (peak_kind){"avx2 vpmaddubsw ymm", maddubs_loop, 12 * 64.0, fma256_loop, 12 * 16.0,
                       "vfmadd ymm"};
}

/* The int8 peak of the named kernel table's instruction, 1 thread and all of p2's threads
 * (G ops/s); returns the instruction's name. */
__attribute__((unused)) static const char *measure_int8_peak(const char *isa, es_pool *p1,
                                                             es_pool *p2, double out[2])
{
    const peak_kind k = peak_for_isa(isa);
    measure_peak(k.int_loop, k.int_ops, p1, p2, out);
    return k.name;
}

#endif
