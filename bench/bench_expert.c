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
#include "peak.h"

#include "moe/plan.h"
#include "quant/kern.h"
#include "quant/qtypes.h"
#include "quant/tiles.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum { D = 2048, FF = 1024, E = 64, TOPK = 8 };

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void) /* [0, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

typedef struct run_args { es_plan *plan; const es_route *routes; int R; const int32_t *phi;
                          const es_expert_slot *slots; float *y; } run_args;

static double run_once(const run_args *a)
{
    const double t0 = now_s();
    const int cap = es_plan_capacity(a->plan);
    for (int r0 = 0; r0 < a->R; r0 += cap)
        if (es_plan_invoke(a->plan, a->routes + r0, a->R - r0 < cap ? a->R - r0 : cap, a->phi,
                           a->slots, a->y, D) != ES_OK) {
            fprintf(stderr, "bench_expert: invoke failed: %s\n", es_last_error());
            exit(1);
        }
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

    /* experts: random weights quantized to type */
    const size_t gb = FF * es_qtype_row_bytes(type, D), db = D * es_qtype_row_bytes(type, FF);
    uint8_t *w = es_alloc_big(E * (2 * gb + db));
    float *row = malloc(sizeof(float) * D);
    es_expert_slot slots[E], tslots[E];
    int32_t phi[E];
    for (int e = 0; e < E; e++) {
        uint8_t *base = w + (size_t)e * (2 * gb + db);
        slots[e] = (es_expert_slot){base, base + gb, base + 2 * gb};
        phi[e] = e;
        for (int j = 0; j < 2 * FF; j++) {
            for (int k = 0; k < D; k++) row[k] = (float)(urand() - 0.5) * 0.05f;
            es_quantize_row(type, row, base + (size_t)j * es_qtype_row_bytes(type, D), D);
        }
        for (int j = 0; j < D; j++) {
            for (int k = 0; k < FF; k++) row[k] = (float)(urand() - 0.5) * 0.05f;
            es_quantize_row(type, row, base + 2 * gb + (size_t)j * es_qtype_row_bytes(type, FF), FF);
        }
    }
    /* the same weights in the tile layout */
    uint8_t *wt = run_l[1] ? es_alloc_big(E * (2 * gb + db)) : NULL;
    for (int e = 0; e < E && wt; e++) {
        const uint8_t *src = w + (size_t)e * (2 * gb + db);
        uint8_t *base = wt + (size_t)e * (2 * gb + db);
        es_tiles_from_rows(type, src, D, FF, base);
        es_tiles_from_rows(type, src + gb, D, FF, base + gb);
        es_tiles_from_rows(type, src + 2 * gb, FF, D, base + 2 * gb);
        tslots[e] = (es_expert_slot){base, base + gb, base + 2 * gb};
    }
    /* skewed routing: expert popularity ~ exp(3 u^3) (u uniform), top-8 without repeats */
    double pop[E], tot = 0;
    for (int e = 0; e < E; e++) tot += (pop[e] = exp(3.0 * pow(urand(), 3)));
    const int R = T * TOPK;
    es_route *routes = malloc(sizeof(es_route) * (size_t)R);
    int *count = calloc(E, sizeof(int));
    for (int t = 0, k = 0; t < T; t++) {
        int chosen[TOPK], n = 0;
        while (n < TOPK) {
            double x = urand() * tot;
            int e = 0;
            while (e < E - 1 && (x -= pop[e]) > 0) e++;
            bool dup = false;
            for (int i = 0; i < n; i++) dup = dup || chosen[i] == e;
            if (!dup) chosen[n++] = e;
        }
        for (int i = 0; i < TOPK; i++) routes[k++] = (es_route){t, chosen[i], 0.125f};
    }
    /* sort by expert so split invocations keep each token's contributions in expert order */
    es_route *sorted = malloc(sizeof(es_route) * (size_t)R);
    int start[E + 1];
    memset(start, 0, sizeof(start));
    for (int i = 0; i < R; i++) count[routes[i].expert]++;
    for (int e = 0; e < E; e++) start[e + 1] = start[e] + count[e];
    for (int i = 0; i < R; i++) sorted[start[routes[i].expert]++] = routes[i];
    int cmax = 0, cmin = R;
    for (int e = 0; e < E; e++) {
        cmax = count[e] > cmax ? count[e] : cmax;
        cmin = count[e] < cmin ? count[e] : cmin;
    }
    float *x = malloc(sizeof(float) * (size_t)T * D);
    for (size_t i = 0; i < (size_t)T * D; i++) x[i] = (float)(urand() * 2 - 1);
    float *y = calloc((size_t)T * D, sizeof(float)), *yref = calloc((size_t)T * D, sizeof(float));

    es_plan *plans[2][2] = {{NULL}}; /* [layout][1 thread, all] */
    for (int l = 0; l < 2; l++) {
        if (!run_l[l]) continue;
        es_expert_shape sh = {D, FF, type, type, type, E, {0}};
        if (l) sh.layout[0] = sh.layout[1] = sh.layout[2] = ES_LAYOUT_TILES;
        if (es_plan_create(&sh, R, T, E, p1, es_kern_default(), &plans[l][0]) ||
            es_plan_create(&sh, R, T, E, pn, es_kern_default(), &plans[l][1])) {
            fprintf(stderr, "bench_expert: %s\n", es_last_error());
            return 1;
        }
    }
    const es_expert_slot *lslots[2] = {slots, tslots};
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
        run_args ca = {plans[l][1], check, check_R, phi, lslots[l], y};
        run_once(&ca);
        es_kern_init("scalar");
        es_plan_set_input(plans[l][1], x, D, T);
        ca.y = yref;
        run_once(&ca);
        es_kern_init(NULL);
        for (size_t i = 0; i < (size_t)check_tokens * D; i++) {
            err = fmax(err, fabs(y[i] - yref[i]));
            mag = fmax(mag, fabs(yref[i]));
        }
        if (!(err <= 1e-3 * mag + 1e-6)) {
            fprintf(stderr, "bench_expert: %s (%s) differs from scalar: max err %g (max %g)\n",
                    isa, lname[l], err, mag);
            return 1;
        }
    }

    double ts[2][2][64];
    for (int l = 0; l < 2; l++)
        for (int k = 0; k < 2 && run_l[l]; k++) {
            es_plan_set_input(plans[l][k], x, D, T);
            run_args a = {plans[l][k], sorted, R, phi, lslots[l], y};
            run_once(&a); /* warm-up */
        }
    for (int r = 0; r < reps && r < 64; r++)
        for (int l = 0; l < 2; l++)
            for (int k = 0; k < 2 && run_l[l]; k++) {
                run_args a = {plans[l][k], sorted, R, phi, lslots[l], y};
                ts[l][k][r] = run_once(&a);
            }
    const double ops = 2.0 * 3.0 * D * FF * (double)R;
    printf("expert operator: hidden %d, FFN %d, %d experts, top-%d, %d tokens (%d routes; "
           "busiest expert %d, idlest %d, mean %d), %s weights, kernels %s\n",
           D, FF, E, TOPK, T, R, cmax, cmin, R / E, es_qtype_name(type), isa);
    printf("checked against scalar kernels on %d tokens: max |diff| %.3g (max |y| %.3g)\n",
           check_tokens, err, mag);
    printf("int8 peak (%s): %.1f G ops/s on 1 thread, %.1f on %d\n", peak_isa, peak[0],
           peak[1], n_cpu);
    if (vpeak_isa)
        printf("vector int8 peak (%s, the amx table's calls below 16 rows): %.1f G ops/s on 1 "
               "thread, %.1f on %d\n",
               vpeak_isa, vpeak[0], vpeak[1], n_cpu);
    printf("\n");
    printf("%-7s %-8s %12s %14s %10s\n", "layout", "threads", "median ms", "G int8 ops/s",
           "% of peak");
    for (int l = 0; l < 2; l++)
        for (int k = 0; k < 2 && run_l[l]; k++) {
            const double med = median(ts[l][k], reps < 64 ? reps : 64);
            printf("%-7s %-8d %12.2f %14.1f %9.1f%%\n", lname[l], k ? n_cpu : 1, med * 1e3,
                   ops / med / 1e9, 100.0 * ops / med / 1e9 / peak[k]);
        }
    for (int l = 0; l < 2; l++)
        for (int k = 0; k < 2; k++) es_plan_destroy(plans[l][k]);
    es_pool_destroy(p1);
    es_pool_destroy(pn);
    return 0;
}
