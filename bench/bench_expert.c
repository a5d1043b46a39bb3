/*
 * The expert operator alone (es_plan_invoke, the fused gate/up -> SwiGLU -> down -> weighted
 * scatter-add) in int8 operations per second, against the machine's int8 peak measured in the
 * same run (bench/peak.h).
 *
 * Workload: one OLMoE-1B-7B layer's experts (hidden 2048, expert FFN 1024, 64 experts, top-8)
 * in Q4_0 (or the type given), T tokens routed with a skewed distribution like a trained router
 * (a few experts take several times the mean, some few). Work counted: 2 x 3 x hidden x FFN int8
 * operations per route (a multiply and an add per weight, gate + up + down).
 *
 * LAYOUT: the experts' weights in GGUF rows ("rows", as in a GGUF or a version 1 pack), in the
 * tile layout of quant/tiles.h ("tiles", as a version 2 pack stores Q4_0/Q8_0), or both
 * ("both": the same weights in both layouts, runs interleaved).
 *
 * Method: results are checked against the scalar kernel table first (per layout); then per
 * layout and thread count (1 and all) one warm-up invocation and REPS timed ones, interleaved
 * rows-1, rows-N, tiles-1, tiles-N, rows-1, ... so a phase of the two vCPUs sharing one core
 * hits all alike; medians reported.
 *
 * The kernel table is the default one or ESTREAM_ISA's; with ESTREAM_ISA=amx on a CPU without
 * AMX it says so and runs the best table it has (the tests' emulation of the tiles is not linked
 * here and never timed). With the amx table the peak is tdpbssd's, and avx512's is printed too.
 *
 * usage: bench_expert [T=1024] [TYPE=q4_0] [REPS=5] [LAYOUT=rows|tiles|both]
 */
#include "moe_layer.h"
#include "peak.h"

#include "moe/plan.h"
#include "quant/kern.h"
#include "quant/qtypes.h"
#include "quant/tiles.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum { D = MOE_D };

/* One pass over all routes of m through plan: seconds. */
static double run_once(es_plan *plan, const moe_layer *m, const es_route *routes, int R,
                       const es_expert_slot *slots, float *y)
{
    const double t0 = now_s();
    moe_invoke(plan, m, routes, R, slots, y);
    return now_s() - t0;
}

int main(int argc, char **argv)
{
    const int T = argc > 1 ? atoi(argv[1]) : 1024;
    es_qtype type = ES_QTYPE_Q4_0;
    if (argc > 2 && !es_qtype_parse(argv[2], &type)) {
        fprintf(stderr, "bench_expert: unknown type %s\n", argv[2]);
        return 1;
    }
    const int reps = argc > 3 ? atoi(argv[3]) : 5;
    const char *lay = argc > 4 ? argv[4] : "rows";
    const bool lay_ok = !strcmp(lay, "rows") || !strcmp(lay, "tiles") || !strcmp(lay, "both");
    if (T < 1 || T > 16384 || reps < 1 || !lay_ok) {
        fprintf(stderr, "usage: bench_expert [T=1024] [TYPE=q4_0] [REPS=5] "
                        "[LAYOUT=rows|tiles|both]\n");
        return 1;
    }
    /* layouts to run: [0] rows, [1] tiles */
    const bool run_l[2] = {strcmp(lay, "tiles") != 0, strcmp(lay, "rows") != 0};
    if (run_l[1] && !es_tiles_type_ok(type)) {
        fprintf(stderr, "bench_expert: %s has no tile layout (q4_0, q8_0)\n", es_qtype_name(type));
        return 1;
    }
    const int n_cpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    es_pool *p1, *pn;
    if (es_pool_create(1, &p1) || es_pool_create(n_cpu, &pn)) return 1;
    const char *want = getenv("ESTREAM_ISA");
    if (want && !strcmp(want, "amx") && !es_kern_isa_available("amx"))
        printf("amx: not available here: %s (the tests' emulation of the tiles is not timed)\n",
               es_kern_isa_why_not("amx"));
    es_kern_init(NULL);
    double peak[2], vpeak[2] = {0, 0};
    const char *peak_isa = measure_int8_peak(es_kern_isa_name(), p1, pn, peak);
    const char *vpeak_isa =
        !strcmp(es_kern_isa_name(), "amx") ? measure_int8_peak("avx512", p1, pn, vpeak) : NULL;

    moe_layer m;
    moe_layer_make(&m, type, T);
    const int R = m.R;
    es_expert_slot tslots[MOE_E];
    /* the same weights in the tile layout */
    if (run_l[1]) moe_layer_tiles(&m, tslots); /* kept until exit, as the rest */
    const es_route *sorted = m.routes;
    float *x = m.x, *y = m.y, *yref = moe_alloc(sizeof(float) * (size_t)T * D);

    es_plan *plans[2][2] = {{NULL}}; /* [layout][1 thread, all] */
    for (int l = 0; l < 2; l++) {
        if (!run_l[l]) continue;
        es_expert_shape sh = {MOE_D, MOE_FF, type, type, type, MOE_E, {0}};
        if (l) sh.layout[0] = sh.layout[1] = sh.layout[2] = ES_LAYOUT_TILES;
        if (es_plan_create(&sh, R, T, MOE_E, p1, es_kern_default(), &plans[l][0]) ||
            es_plan_create(&sh, R, T, MOE_E, pn, es_kern_default(), &plans[l][1])) {
            fprintf(stderr, "bench_expert: %s\n", es_last_error());
            return 1;
        }
    }
    const es_expert_slot *lslots[2] = {m.slots, tslots};
    static const char *const lname[2] = {"rows", "tiles"};
    /* check against the scalar table on the first 64 tokens' routes */
    const int check_tokens = T < 64 ? T : 64;
    int check_R = 0;
    es_route *check = malloc(sizeof(es_route) * (size_t)R);
    for (int i = 0; i < R; i++)
        if (sorted[i].token < check_tokens) check[check_R++] = sorted[i];
    const char *isa = es_kern_isa_name();
    double err = 0, mag = 0;
    for (int l = 0; l < 2; l++) {
        if (!run_l[l]) continue;
        memset(y, 0, sizeof(float) * (size_t)T * D);
        memset(yref, 0, sizeof(float) * (size_t)T * D);
        es_plan_set_input(plans[l][1], x, D, T);
        run_once(plans[l][1], &m, check, check_R, lslots[l], y);
        es_kern_init("scalar");
        es_plan_set_input(plans[l][1], x, D, T);
        run_once(plans[l][1], &m, check, check_R, lslots[l], yref);
        es_kern_init(NULL);
        for (size_t i = 0; i < (size_t)check_tokens * D; i++) {
            err = fmax(err, fabs(y[i] - yref[i]));
            mag = fmax(mag, fabs(yref[i]));
        }
        if (!(err <= 1e-3 * mag + 1e-6)) {
            fprintf(stderr, "bench_expert: %s (%s) differs from scalar: max err %g (max %g)\n", isa,
                    lname[l], err, mag);
            return 1;
        }
    }

    double ts[2][2][64];
    for (int l = 0; l < 2; l++)
        for (int k = 0; k < 2 && run_l[l]; k++) {
            es_plan_set_input(plans[l][k], x, D, T);
            run_once(plans[l][k], &m, sorted, R, lslots[l], y); /* warm-up */
        }
    for (int r = 0; r < reps && r < 64; r++)
        for (int l = 0; l < 2; l++)
            for (int k = 0; k < 2 && run_l[l]; k++) {
                ts[l][k][r] = run_once(plans[l][k], &m, sorted, R, lslots[l], y);
            }
    const double ops = moe_ops(&m);
    /* the weight bytes a pass reads: every matrix of each expert with a route, once */
    int touched = 0;
    for (int i = 0; i < R; i++)
        touched += i == 0 || sorted[i].expert != sorted[i - 1].expert;
    const double wbytes = (double)touched * (double)(2 * es_qtype_row_bytes(type, MOE_D) * MOE_FF +
                                                     es_qtype_row_bytes(type, MOE_FF) * MOE_D);
    const double dram[2] = {dram_read_bw(p1), dram_read_bw(pn)}; /* 1 thread, all */
    printf("expert operator: hidden %d, FFN %d, %d experts, top-%d, %d tokens (%d routes; "
           "busiest expert %d, idlest %d, mean %d), %s weights, kernels %s\n",
           MOE_D, MOE_FF, MOE_E, MOE_TOPK, T, R, m.busiest, m.idlest, R / MOE_E,
           es_qtype_name(type), isa);
    printf("checked against scalar kernels on %d tokens: max |diff| %.3g (max |y| %.3g)\n",
           check_tokens, err, mag);
    printf("int8 peak (%s): %.1f G ops/s on 1 thread, %.1f on %d\n", peak_isa, peak[0], peak[1],
           n_cpu);
    if (vpeak_isa)
        printf("vector int8 peak (%s, the amx table's calls below 16 rows): %.1f G ops/s on 1 "
               "thread, %.1f on %d\n",
               vpeak_isa, vpeak[0], vpeak[1], n_cpu);
    printf("weights read per pass: %d experts with routes, %.1f MB; DRAM read (1 GiB summed, "
           "best of 5) %.1f GB/s on 1 thread, %.1f on %d\n",
           touched, wbytes / 1e6, dram[0] / 1e9, dram[1] / 1e9, n_cpu);
    printf("\n");
    printf("%-7s %-8s %12s %14s %10s %12s %8s\n", "layout", "threads", "median ms", "G int8 ops/s",
           "% of peak", "weight GB/s", "% DRAM");
    for (int l = 0; l < 2; l++)
        for (int k = 0; k < 2 && run_l[l]; k++) {
            const double med = median(ts[l][k], reps < 64 ? reps : 64);
            printf("%-7s %-8d %12.2f %14.1f %9.1f%% %12.1f %7.1f%%\n", lname[l], k ? n_cpu : 1,
                   med * 1e3, ops / med / 1e9, 100.0 * ops / med / 1e9 / peak[k],
                   wbytes / med / 1e9, 100.0 * wbytes / med / dram[k]);
        }
    for (int l = 0; l < 2; l++)
        for (int k = 0; k < 2; k++)
            es_plan_destroy(plans[l][k]);
    es_pool_destroy(p1);
    es_pool_destroy(pn);
    return 0;
}
