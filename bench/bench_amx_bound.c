/*
 * bench_amx_bound: how fast the amx table can be, measured on an AVX-512 CPU whose AMX cannot
 * run (a virtual machine that hides it, or a CPU without it), against the avx512 table.
 *
 *   build/bench/bench_amx_bound [--reps N] [--quick]
 *
 * Method. This program links the amx table built with ES_AMX_NO_TMUL (quant/amx_ops.h): every
 * instruction of the real table runs except the matrix unit's. The weight tiles are decoded,
 * the activation rows packed, each tile load and store moves its rows through the load and store
 * ports, the float epilogue scales and adds what the stores left (meaningless values: nothing is
 * checked), and each tdpbssd is only counted. On an AMX core of the same design (this one's
 * vector units, caches and memory), the real table's time t_amx then satisfies
 *
 *   t_amx >= max(t_rest, t_tmul),  t_tmul = n_tdpbssd * 16 / f
 *
 * where t_rest is the time measured here, 16 cycles is Intel's issue interval of a tdpbssd on
 * 16-row tiles and f the clock measured here (a chain of dependent adds, one per cycle). The
 * table's bound "ceiling" is t_avx512 / max(t_rest, t_tmul): the speed-up over the avx512 table
 * that no tuning of the tile code can pass while it keeps its operands and its float epilogue
 * (the bit-identity contract, kern.h); "serial" is t_avx512 / (t_rest + t_tmul), what it gets if
 * the matrix unit's work overlaps nothing. Each tdpbssd here multiplies 16 tokens x 32 k (one
 * scale block) by 16 output rows: half a full tile's 64 k, so a kernel at its ceiling uses at
 * most half of the AMX int8 peak, and less where t_rest dominates ("% AMX peak" below, against
 * 2048 int8 ops per cycle at f).
 *
 * On a CPU with usable AMX this program says so and measures nothing (run bench_kern --isa amx
 * and ESTREAM_ISA=amx bench_expert there). Each figure is the median of REPS runs, the avx512
 * and amx-without-TMUL runs interleaved (docs/design.md §9).
 *
 * Cases: es_gemm at K=2048 N=1024 (bench_kern's shape) with 16, 128 and 512 token rows for the
 * integer kinds the amx table covers, on 1 thread; the expert operator (bench/moe_layer.h: one
 * OLMoE-1B-7B layer, top-8 of 64) at 128 and 1,024 tokens in Q4_0 and Q4_K, on 1 and 2 threads
 * (its tdpbssd time divided over the threads).
 */
#include "moe_layer.h"
#include "peak.h"

#include "core/cpu.h"
#include "core/pool.h"
#include "moe/plan.h"
#include "quant/kern.h"
#include "quant/qtypes.h"
#include "quant/tiles.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t es_amx_no_tmul_products(void); /* x86_amx.c built with ES_AMX_NO_TMUL */

#define TMUL_CYCLES 16.0         /* Intel: one tdpbssd on 16-row tiles issues every 16 cycles */
#define AMX_OPS_PER_CYCLE 2048.0 /* 16 x 16 x 64 multiply-adds per 16 cycles, 2 ops each */

/* Cycles per second: a chain of dependent register adds, one cycle each. (Not adds of an
 * immediate: recent Intel cores fold chains of those at rename, several per cycle.) */
static double clock_hz(void)
{
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        const long n = 50000000;
        long x = 0, one = 1;
        const double t0 = now_s();
        for (long i = 0; i < n / 10; i++)
            __asm__ volatile("add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
                             "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
                             "add %1, %0\n\tadd %1, %0"
                             : "+r"(x)
                             : "r"(one));
        const double hz = (double)n / (now_s() - t0);
        best = hz > best ? hz : best;
    }
    return best;
}

typedef struct row_out {
    double t_avx, t_rest, t_tmul, ops;
} row_out;

/* f: the clock times the threads (the AMX peak of the row's threads). */
static void print_row(const char *what, const row_out *o, double f)
{
    const double t_amx = o->t_rest > o->t_tmul ? o->t_rest : o->t_tmul;
    printf("%-34s %9.3f %9.3f %9.3f %8.2fx %7.2fx %7.1f %%\n", what, o->t_avx * 1e3,
           o->t_rest * 1e3, o->t_tmul * 1e3, o->t_avx / t_amx, o->t_avx / (o->t_rest + o->t_tmul),
           100.0 * o->ops / t_amx / (AMX_OPS_PER_CYCLE * f));
}

static void print_head(const char *first)
{
    printf("%-34s %9s %9s %9s %9s %8s %9s\n", first, "avx512 ms", "rest ms", "tmul ms", "ceiling",
           "serial", "AMX peak");
}

/* ---- es_gemm --------------------------------------------------------------------------------- */

/* One GEMM shape on 1 thread: the avx512 table and the amx table without its matrix unit,
 * interleaved, the weights in GGUF rows or (tiled) in the pack's tile layout (quant/tiles.h);
 * the tdpbssd count from the latter (checked against the tiling: 16-row blocks x 16-column
 * groups x 32-k blocks, two per block for Q6_K's halves). Returns 0 if it differs. */
static int gemm_case(const es_kern *kv, const es_kern *ka, es_qtype type, int tiled, int64_t K,
                     int64_t N, int64_t R, int reps, double f, row_out *o)
{
    const es_kern_ops *ov = &kv->op[type], *oa = &ka->op[type];
    const size_t wrb = es_qtype_row_bytes(type, K);
    uint8_t *W = moe_alloc(wrb * N);
    float *row = malloc(sizeof(float) * K), *X = moe_alloc(sizeof(float) * R * K);
    for (int64_t n = 0; n < N; n++) {
        for (int64_t i = 0; i < K; i++)
            row[i] = 0.05f * (float)(moe_urand() * 2 - 1);
        es_quantize_row(type, row, W + n * wrb, K);
    }
    if (tiled) {
        uint8_t *Wt = moe_alloc(wrb * N);
        es_tiles_from_rows(type, W, K, N, Wt);
        es_free_big(W, wrb * N);
        W = Wt;
    }
    for (int64_t i = 0; i < R * K; i++)
        X[i] = (float)(moe_urand() * 4 - 2);
    /* the amx table prepares activations with the avx512 code: one act serves both */
    void *act = moe_alloc(ov->act_row_bytes(K) * R);
    ov->act_prepare(X, K, R, K, act);
    float *Y = moe_alloc(sizeof(float) * R * N);
    const size_t sb =
        ov->scratch_bytes(K) > oa->scratch_bytes(K) ? ov->scratch_bytes(K) : oa->scratch_bytes(K);
    void *scratch = moe_alloc(sb);
#define GEMM(ops)                                                                                  \
    (tiled ? (ops)->gemm_tiled(W, K, N, 0, N, act, NULL, R, Y, N, 0, scratch)                      \
           : (ops)->gemm(W, K, 0, N, act, NULL, R, Y, N, 0, scratch))
    const uint64_t n0 = es_amx_no_tmul_products();
    GEMM(oa); /* warm, and the count */
    const uint64_t n_dp = es_amx_no_tmul_products() - n0;
    const uint64_t want = (uint64_t)((R + 15) / 16) * (uint64_t)(N / 16) * (uint64_t)(K / 32) *
                          (type == ES_QTYPE_Q6_K ? 2u : 1u);
    GEMM(ov);
    double tv[64], ta[64];
    if (reps > 64) reps = 64;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        GEMM(ov);
        tv[r] = now_s() - t0;
        t0 = now_s();
        GEMM(oa);
        ta[r] = now_s() - t0;
    }
#undef GEMM
    *o = (row_out){median(tv, reps), median(ta, reps), (double)n_dp * TMUL_CYCLES / f,
                   2.0 * (double)R * (double)N * (double)K};
    es_free_big(W, wrb * N);
    es_free_big(X, sizeof(float) * R * K);
    es_free_big(act, ov->act_row_bytes(K) * R);
    es_free_big(Y, sizeof(float) * R * N);
    es_free_big(scratch, sb);
    free(row);
    if (n_dp != want) {
        fprintf(stderr,
                "bench_amx_bound: %s K=%ld N=%ld rows=%ld: %llu tdpbssd, the tiling "
                "gives %llu\n",
                es_qtype_name(type), (long)K, (long)N, (long)R, (unsigned long long)n_dp,
                (unsigned long long)want);
        return 0;
    }
    return 1;
}

/* ---- the expert operator --------------------------------------------------------------------- */

static double invoke_s(es_plan *plan, const moe_layer *m, const es_expert_slot *slots)
{
    const double t0 = now_s();
    moe_invoke(plan, m, m->routes, m->R, slots, m->y);
    return now_s() - t0;
}

/* The operator on T tokens of type, the experts in GGUF rows or (tiled) the pack's tile layout,
 * on pool p: the two tables interleaved; the tdpbssd count from a run on the 1-thread pool p1
 * (the caller's thread, whose counter this program reads). */
static void operator_case(const es_kern *kv, const es_kern *ka, es_qtype type, int tiled, int T,
                          es_pool *p, es_pool *p1, int reps, double f, row_out *o)
{
    moe_layer m;
    moe_layer_make(&m, type, T);
    es_expert_shape sh = {MOE_D, MOE_FF, type, type, type, MOE_E, {0}};
    es_expert_slot slots[MOE_E];
    memcpy(slots, m.slots, sizeof(slots));
    uint8_t *wt = NULL;
    if (tiled) {
        sh.layout[0] = sh.layout[1] = sh.layout[2] = ES_LAYOUT_TILES;
        wt = moe_layer_tiles(&m, slots);
    }
    es_plan *pv, *pa, *pc;
    if (es_plan_create(&sh, m.R, T, MOE_E, p, kv, &pv) ||
        es_plan_create(&sh, m.R, T, MOE_E, p, ka, &pa) ||
        es_plan_create(&sh, m.R, T, MOE_E, p1, ka, &pc)) {
        fprintf(stderr, "bench_amx_bound: %s\n", es_last_error());
        exit(1);
    }
    es_plan_set_input(pv, m.x, MOE_D, T);
    es_plan_set_input(pa, m.x, MOE_D, T);
    es_plan_set_input(pc, m.x, MOE_D, T);
    const uint64_t n0 = es_amx_no_tmul_products();
    invoke_s(pc, &m, slots);
    const uint64_t n_dp = es_amx_no_tmul_products() - n0;
    invoke_s(pv, &m, slots);
    invoke_s(pa, &m, slots);
    double tv[64], ta[64];
    if (reps > 64) reps = 64;
    for (int r = 0; r < reps; r++) {
        tv[r] = invoke_s(pv, &m, slots);
        ta[r] = invoke_s(pa, &m, slots);
    }
    *o = (row_out){median(tv, reps), median(ta, reps),
                   (double)n_dp * TMUL_CYCLES / f / es_pool_size(p), moe_ops(&m)};
    es_plan_destroy(pv);
    es_plan_destroy(pa);
    es_plan_destroy(pc);
    if (wt) es_free_big(wt, moe_layer_bytes(&m));
    moe_layer_free(&m);
}

static int wanted(const char *only_types, es_qtype t)
{
    if (!only_types) return 1;
    const char *name = es_qtype_name(t);
    const size_t n = strlen(name);
    for (const char *p = only_types; (p = strstr(p, name)) != NULL; p += n)
        if ((p == only_types || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return 1;
    return 0;
}

int main(int argc, char **argv)
{
    int reps = 9, quick = 0, gemm = 1, op = 1;
    const char *only_types = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc && atoi(argv[i + 1]) > 0)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--type") && i + 1 < argc)
            only_types = argv[++i];
        else if (!strcmp(argv[i], "--gemm"))
            op = 0;
        else if (!strcmp(argv[i], "--operator"))
            gemm = 0;
        else {
            fprintf(stderr,
                    "usage: %s [--reps N] [--quick] [--type q4_0,q8_0,...] [--gemm | --operator]\n"
                    "  the amx table without its matrix unit against avx512, on an AVX-512 CPU "
                    "whose AMX cannot run (bench/README.md)\n",
                    argv[0]);
            return 2;
        }
    }
    if (es_kern_isa_available("amx") && !es_kern_amx_emulated()) {
        printf("bench_amx_bound: this CPU runs AMX: measure the amx table itself "
               "(bench_kern --isa amx; ESTREAM_ISA=amx bench_expert)\n");
        return 0;
    }
    es_kern kv, ka;
    if (!es_kern_get("avx512", &kv) || !es_kern_get("amx", &ka)) {
        printf("bench_amx_bound: needs AVX-512 (the amx table decodes and scales with it): %s\n",
               es_kern_isa_why_not("avx512") ? es_kern_isa_why_not("avx512") : "no amx table");
        return 0;
    }
    const double f = clock_hz();
    es_pool *p1, *p2;
    if (es_pool_create(1, &p1) || es_pool_create(2, &p2)) {
        fprintf(stderr, "bench_amx_bound: %s\n", es_last_error());
        return 1;
    }
    printf("bench_amx_bound: the amx table without its matrix unit (tdpbssd counted, not run) "
           "against avx512; AMX here: %s\n",
           es_cpu_amx_unusable() ? es_cpu_amx_unusable() : "usable");
    printf("clock %.2f GHz (dependent adds); tmul = tdpbssd x %.0f cycles; AMX int8 peak %.0f G "
           "ops/s per thread at this clock; medians of %d interleaved runs\n\n",
           f / 1e9, TMUL_CYCLES, AMX_OPS_PER_CYCLE * f / 1e9, reps);

    static const es_qtype types[] = {ES_QTYPE_Q4_0, ES_QTYPE_Q8_0, ES_QTYPE_Q4_K,
                                     ES_QTYPE_Q5_K, ES_QTYPE_Q6_K, ES_QTYPE_IQ4_XS};
    static const int64_t rows[] = {16, 128, 512};
    int ok = 1;
    if (gemm) print_head("es_gemm K=2048 N=1024, 1 thread");
    for (size_t ti = 0; gemm && ti < ES_LEN(types); ti++)
        for (int tiled = 0; tiled < 2; tiled++)
            for (size_t ri = 0; ri < ES_LEN(rows); ri++) {
                if (!wanted(only_types, types[ti]) || (quick && (rows[ri] == 512 || ti > 1)))
                    continue;
                if (tiled && !es_tiles_type_ok(types[ti])) continue;
                row_out o;
                if (!gemm_case(&kv, &ka, types[ti], tiled, 2048, 1024, rows[ri], reps, f, &o)) {
                    ok = 0;
                    continue;
                }
                char what[64];
                snprintf(what, sizeof(what), "%-6s %-5s rows=%ld", es_qtype_name(types[ti]),
                         tiled ? "tiles" : "rows", (long)rows[ri]);
                print_row(what, &o, f);
                fflush(stdout);
            }
    if (gemm && op) printf("\n");
    if (op) print_head("expert operator (OLMoE layer)");
    static const es_qtype op_types[] = {ES_QTYPE_Q4_0, ES_QTYPE_Q4_K};
    static const int op_tokens[] = {128, 1024};
    for (size_t ti = 0; op && ti < ES_LEN(op_types); ti++)
        for (int tiled = 0; tiled < 2; tiled++)
            for (size_t ni = 0; ni < ES_LEN(op_tokens); ni++)
                for (int th = 1; th <= 2; th++) {
                    if (!wanted(only_types, op_types[ti]) ||
                        (quick && (op_tokens[ni] > 128 || ti > 0)))
                        continue;
                    if (tiled && !es_tiles_type_ok(op_types[ti])) continue;
                    row_out o;
                    operator_case(&kv, &ka, op_types[ti], tiled, op_tokens[ni], th == 1 ? p1 : p2,
                                  p1, reps, f, &o);
                    char what[64];
                    snprintf(what, sizeof(what), "%-6s %-5s T=%-5d thr=%d",
                             es_qtype_name(op_types[ti]), tiled ? "tiles" : "rows", op_tokens[ni],
                             th);
                    print_row(what, &o, f * th);
                    fflush(stdout);
                }
    es_pool_destroy(p1);
    es_pool_destroy(p2);
    return ok ? 0 : 1;
}
