/*
 * The tile layout (quant/tiles.h) and es_gemm_tiled: conversions round-trip, and for every kernel
 * table this machine has (an ISA it lacks is skipped, not passed) and every tiled type (Q4_0 and
 * Q8_0 of packs, F32 of the attention, aligned and not), the tiled kernel gives Y bit-identical to
 * the row kernel of the same table on the same weights: at odd shapes (K of 1 and 65 blocks, F32
 * rows of 16 and 40, N with short last tiles), 1..600 token rows, gather lists
 * with repeats, accumulation, and [n0, n1) ranges that do and do not fall on tile boundaries.
 * A tiled matrix ending at an inaccessible page must not be read past its end. The amx table
 * (real tiles, or the emulation this program links where the CPU has no AMX) is also held to
 * the scalar table's tiled results, bit for bit.
 */
#include "t.h"

#include "core/cpu.h"
#include "quant/kern.h"
#include "quant/tiles.h"

#include <sys/mman.h>

/* the packs' tiled types, then F32 (the attention's keys and values) */
static const uint32_t types[] = {ES_QTYPE_Q4_0, ES_QTYPE_Q8_0, ES_QTYPE_F32};
/* K of a case: F32 rows need not be whole blocks (heads of 16 or 40), and its longest K runs two
 * slices on 1 MiB of L2 (2,048 k per slice of avx512's [k][32] tiles in a quarter of it) */
static int64_t case_k(uint32_t type, size_t ki)
{
    static const int64_t Kq[] = {32, 96, 2080}, Kf[] = {16, 40, 2080};
    return type == ES_QTYPE_F32 ? Kf[ki] : Kq[ki];
}
static const char *const *const isas = es_kern_isa_names;

static void *aalloc(size_t n)
{
    void *p = NULL;
    assert_int_equal(posix_memalign(&p, 64, n ? n : 64), 0);
    memset(p, 0, n);
    return p;
}

/* N rows of K random weights in GGUF rows (a few rows all zero, magnitudes vary by row). */
static uint8_t *make_rows(uint32_t type, int64_t N, int64_t K, uint64_t seed)
{
    const size_t rb = es_qtype_row_bytes(type, K);
    uint8_t *w = aalloc(rb * (size_t)N);
    float *tmp = malloc(sizeof(float) * (size_t)K);
    assert_non_null(tmp);
    t_rng r = {seed};
    for (int64_t n = 0; n < N; n++) {
        const float scale = (n % 7 == 3) ? 0.0f : 0.02f * (float)(1 + n % 5);
        for (int64_t k = 0; k < K; k++) tmp[k] = scale * t_uniform(&r);
        assert_true(es_quantize_row(type, tmp, w + (size_t)n * rb, K));
    }
    free(tmp);
    return w;
}

static uint8_t *make_tiles(uint32_t type, const uint8_t *rows, int64_t N, int64_t K)
{
    uint8_t *t = aalloc(es_qtype_row_bytes(type, K) * (size_t)N);
    es_tiles_from_rows(type, rows, K, N, t);
    return t;
}

static float *make_x(int64_t rows, int64_t K, uint64_t seed)
{
    float *x = malloc(sizeof(float) * (size_t)(rows * K));
    assert_non_null(x);
    t_rng r = {seed};
    for (int64_t i = 0; i < rows * K; i++) {
        float v = t_uniform(&r) * 2.0f;
        if (t_next(&r) % 97 == 0) v *= 300.0f;
        if (t_next(&r) % 53 == 0) v = 0.0f;
        x[i] = v;
    }
    return x;
}

static void test_roundtrip(void **state)
{
    (void)state;
    static const int64_t Ns[] = {1, 17, 31, 32, 33, 45, 64, 100};
    assert_true(es_tiles_type_ok(ES_QTYPE_Q4_0) && es_tiles_type_ok(ES_QTYPE_Q8_0));
    /* F32 tiles live in memory only: a pack never tiles F32 */
    assert_false(es_tiles_type_ok(ES_QTYPE_Q4_K) || es_tiles_type_ok(ES_QTYPE_F32));
    for (size_t ti = 0; ti < T_LEN(types); ti++)
        for (size_t ki = 0; ki < 3; ki++)
            for (size_t ni = 0; ni < T_LEN(Ns); ni++) {
                const uint32_t type = types[ti];
                const int64_t K = case_k(type, ki), N = Ns[ni];
                const size_t rb = es_qtype_row_bytes(type, K);
                uint8_t *w = make_rows(type, N, K, 5 + ki * 10 + ni);
                uint8_t *t = make_tiles(type, w, N, K);
                /* a permutation of the bytes: same multiset of bytes, and not the identity
                 * beyond one row */
                if (N > 1) assert_true(memcmp(w, t, rb * (size_t)N) != 0);
                uint8_t *row = malloc(rb);
                float *a = malloc(sizeof(float) * (size_t)K), *b = malloc(sizeof(float) * (size_t)K);
                for (int64_t n = 0; n < N; n++) {
                    es_tiles_get_row(type, t, K, N, n, row);
                    assert_memory_equal(row, w + (size_t)n * rb, rb);
                    es_tiles_dequantize_row(type, t, K, N, n, a);
                    es_dequantize_row(type, w + (size_t)n * rb, b, K);
                    assert_memory_equal(a, b, sizeof(float) * (size_t)K);
                }
                if (type == ES_QTYPE_F32) /* tiles.h's formula, element by element */
                    for (int64_t n = 0; n < N; n++)
                        for (int64_t k = 0; k < K; k++) {
                            const int64_t n0 = n / 32 * 32, nt = N - n0 < 32 ? N - n0 : 32;
                            assert_memory_equal(t + 4 * (n0 * K + k * nt + n - n0),
                                                w + (size_t)n * rb + 4 * k, 4);
                        }
                /* tile t starts where row 32t starts in the row layout */
                if (N > 32) {
                    es_tiles_get_row(type, t, K, N, 32, row);
                    uint8_t *t2 = make_tiles(type, w + 32 * rb, N - 32, K);
                    assert_memory_equal(t + 32 * rb, t2, rb * (size_t)(N - 32));
                    free(t2);
                }
                free(a);
                free(b);
                free(row);
                free(t);
                free(w);
            }
}

/* Tiled vs rows with table k: every listed case, Y compared bit for bit (all ldy columns); with
 * ref_isa, the tiled result of that table too (its own act rows). */
static void check_table(const char *isa, const char *ref_isa)
{
    es_kern k, kr;
    if (!es_kern_get(isa, &k)) {
        print_message("%s: not available on this CPU (%s), skipped\n", isa,
                      es_kern_isa_why_not(isa));
        skip();
    }
    if (ref_isa) assert_true(es_kern_get(ref_isa, &kr));
    static const int64_t Ns[] = {1, 17, 45, 96, 130};
    /* 1..7: a call of at most one register block, which avx512 and avx2 run on the raw tiles
     * (es_kern_tiling.direct), every block height of it, and the first call past it */
    static const int64_t rows_list[] = {1, 2, 3, 4, 5, 6, 7, 17, 130, 600};
    long cases = 0;
    for (size_t ti = 0; ti < T_LEN(types); ti++) {
        const uint32_t type = types[ti];
        assert_true(es_kern_supports_tiled(&k, type));
        for (size_t ki = 0; ki < 3; ki++)
            for (size_t ni = 0; ni < T_LEN(Ns); ni++) {
                const int64_t K = case_k(type, ki), N = Ns[ni];
                uint8_t *w = make_rows(type, N, K, 100 + ti * 100 + ki * 10 + ni);
                uint8_t *wt = make_tiles(type, w, N, K);
                /* the same tiles 4 bytes off a 64-byte boundary: F32 tiles are read in place
                 * only when aligned (es_kern_tiling.in_place), else copied out */
                const size_t wbytes = es_qtype_row_bytes(type, K) * (size_t)N;
                uint8_t *wu_buf = aalloc(wbytes + 64), *wu = wu_buf + 4;
                memcpy(wu, wt, wbytes);
                void *scratch = aalloc(es_gemm_scratch_bytes(&k, type, K));
                for (size_t ri = 0; ri < T_LEN(rows_list); ri++) {
                    const int64_t nr = rows_list[ri], nx = nr + 3;
                    if (nr == 600 && K > 96) continue; /* keeps the scalar table quick */
                    float *X = make_x(nx, K, 7 + ri);
                    void *act = aalloc(es_act_bytes(&k, type, nx, K));
                    es_act_prepare(&k, type, X, K, nx, K, act);
                    void *act_r = ref_isa ? aalloc(es_act_bytes(&kr, type, nx, K)) : NULL;
                    if (ref_isa) es_act_prepare(&kr, type, X, K, nx, K, act_r);
                    int32_t *rows = malloc(sizeof(int32_t) * (size_t)nr);
                    t_rng rg = {ri + 11};
                    for (int64_t r = 0; r < nr; r++) rows[r] = (int32_t)(t_next(&rg) % nx);
                    const int64_t ldy = N + 5;
                    float *Y1 = aalloc(sizeof(float) * (size_t)(nr * ldy));
                    float *Y2 = aalloc(sizeof(float) * (size_t)(nr * ldy));
                    float *Y3 = aalloc(sizeof(float) * (size_t)(nr * ldy));
                    /* ranges: all, tile-aligned inside, unaligned both ends, one row */
                    const int64_t ranges[][2] = {
                        {0, N}, {N > 64 ? 32 : 0, N > 64 ? 64 : N}, {N / 3, N - N / 4}, {N - 1, N}};
                    for (size_t qi = 0; qi < T_LEN(ranges); qi++)
                        for (int acc = 0; acc < 2; acc++) {
                            const int64_t n0 = ranges[qi][0], n1 = ranges[qi][1];
                            const int32_t *rl = (qi + (size_t)acc) % 2 ? rows : NULL;
                            for (int64_t i = 0; i < nr * ldy; i++)
                                Y1[i] = Y2[i] = Y3[i] = (float)(i % 13) - 6;
                            es_gemm(&k, type, w, K, n0, n1, act, rl, nr, Y1, ldy, acc, scratch);
                            /* F32: aligned and not, alternately */
                            const uint8_t *wti = type == ES_QTYPE_F32 && (qi + (size_t)acc) % 2
                                                     ? wu
                                                     : wt;
                            es_gemm_tiled(&k, type, wti, K, N, n0, n1, act, rl, nr, Y2, ldy, acc,
                                          scratch);
                            if (ref_isa) {
                                void *sr = aalloc(es_gemm_scratch_bytes(&kr, type, K));
                                es_gemm_tiled(&kr, type, wt, K, N, n0, n1, act_r, rl, nr, Y3, ldy,
                                              acc, sr);
                                free(sr);
                                if (memcmp(Y2, Y3, sizeof(float) * (size_t)(nr * ldy)) != 0)
                                    fail_msg("%s %s K=%ld N=%ld rows=%ld [%ld, %ld) acc=%d: tiled "
                                             "differs from %s's",
                                             isa, es_qtype_name(type), (long)K, (long)N, (long)nr,
                                             (long)n0, (long)n1, acc, ref_isa);
                            }
                            if (memcmp(Y1, Y2, sizeof(float) * (size_t)(nr * ldy)) != 0) {
                                for (int64_t i = 0; i < nr * ldy; i++)
                                    if (memcmp(&Y1[i], &Y2[i], 4))
                                        fail_msg("%s %s K=%ld N=%ld rows=%ld [%ld, %ld) acc=%d "
                                                 "gather=%d: Y[%ld][%ld] tiled %.9g, rows %.9g",
                                                 isa, es_qtype_name(type), (long)K, (long)N,
                                                 (long)nr, (long)n0, (long)n1, acc, rl != NULL,
                                                 (long)(i / ldy), (long)(i % ldy), Y2[i], Y1[i]);
                            }
                            cases++;
                        }
                    free(Y1);
                    free(Y2);
                    free(Y3);
                    free(rows);
                    free(act);
                    free(act_r);
                    free(X);
                }
                free(scratch);
                free(wu_buf);
                free(wt);
                free(w);
            }
    }
    print_message("%s: %ld tiled cases bit-identical to rows\n", isa, cases);
}

static void test_scalar(void **state)
{
    (void)state;
    check_table("scalar", NULL);
}
static void test_avx2(void **state)
{
    (void)state;
    check_table("avx2", NULL);
}
static void test_avxvnni(void **state)
{
    (void)state;
    check_table("avxvnni", NULL);
}
static void test_avx512(void **state)
{
    (void)state;
    check_table("avx512", NULL);
}
static void test_amx(void **state)
{
    (void)state;
    check_table("amx", "scalar");
}
static void test_asimd(void **state)
{
    (void)state;
    check_table("asimd", NULL);
}
static void test_neon(void **state)
{
    (void)state;
    check_table("neon", NULL);
}
static void test_i8mm(void **state)
{
    (void)state;
    check_table("i8mm", NULL);
}

/* A tiled matrix that ends where an inaccessible page begins (a short last tile, too): the
 * kernels' masked loads must stay inside it. */
static void test_guard_pages(void **state)
{
    (void)state;
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    for (size_t ii = 0; ii < ES_KERN_N_ISA; ii++) {
        es_kern k;
        if (!es_kern_get(isas[ii], &k)) continue;
        for (size_t ti = 0; ti < 3 * T_LEN(types); ti++) {
            const uint32_t type = types[ti / 3];
            /* 17: the amx table's tiles; 3: avx512's and avx2's raw tiles (direct), on a matrix
             * whose last tile is whole and so read by it up to the page's start */
            const int64_t K = 96, nr = (int64_t[]){3, 9, 17}[ti % 3], N = nr == 3 ? 64 : 45;
            const size_t bytes = es_qtype_row_bytes(type, K) * (size_t)N;
            uint8_t *w = make_rows(type, N, K, 31 + ti), *wt = make_tiles(type, w, N, K);
            const size_t len = (bytes + pg - 1) / pg * pg + pg;
            uint8_t *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                                -1, 0);
            assert_true(map != MAP_FAILED);
            assert_int_equal(mprotect(map + len - pg, pg, PROT_NONE), 0);
            uint8_t *g = map + len - pg - bytes;
            memcpy(g, wt, bytes);
            float *X = make_x(nr, K, 3);
            void *act = aalloc(es_act_bytes(&k, type, nr, K));
            es_act_prepare(&k, type, X, K, nr, K, act);
            float *Y1 = aalloc(sizeof(float) * (size_t)(nr * N));
            float *Y2 = aalloc(sizeof(float) * (size_t)(nr * N));
            void *scratch = aalloc(es_gemm_scratch_bytes(&k, type, K));
            es_gemm(&k, type, w, K, 0, N, act, NULL, nr, Y1, N, 0, scratch);
            es_gemm_tiled(&k, type, g, K, N, 0, N, act, NULL, nr, Y2, N, 0, scratch);
            assert_memory_equal(Y1, Y2, sizeof(float) * (size_t)(nr * N));
            munmap(map, len);
            free(scratch);
            free(Y1);
            free(Y2);
            free(act);
            free(X);
            free(wt);
            free(w);
        }
    }
}

/* A few rows over two K-slices: a direct kernel (es_kern_tiling.direct) starts its second slice
 * at the slice's tile-block of each tile, and that slice's Y adds to the first's. K is one
 * 256-value unit past the longest slice of the table's tiles in a quarter of L2 (kern_drive.c):
 * avx512's tiles of 32 rows x 1,152 bytes per 256 k, or the avx2 tables' Q8_0 tiles of 8 rows x
 * 320 bytes (their Q4_0 tiles are two such), so each of these tables runs two slices. */
static void test_few_rows_two_slices(void **state)
{
    (void)state;
    const int64_t N = 81;
    long cases = 0;
    for (size_t ii = 0; ii < ES_KERN_N_ISA; ii++) {
        es_kern k;
        if (!es_kern_get(isas[ii], &k)) continue;
        const bool avx2 = !strcmp(isas[ii], "avx2") || !strcmp(isas[ii], "avxvnni");
        const int64_t tile_256 = avx2 ? 8 * 320 : 8 * 1152;
        const int64_t K = ((int64_t)es_cpu_get()->l2_bytes / 4 / tile_256 + 1) * 256;
        for (size_t ti = 0; ti < 2; ti++) { /* Q4_0 and Q8_0: the types with direct kernels */
            const uint32_t type = types[ti];
            uint8_t *w = make_rows(type, N, K, 77 + ti), *wt = make_tiles(type, w, N, K);
            void *scratch = aalloc(es_gemm_scratch_bytes(&k, type, K));
            for (int64_t nr = 1; nr <= 7; nr++) {
                const int64_t nx = nr + 2;
                float *X = make_x(nx, K, 40 + nr);
                void *act = aalloc(es_act_bytes(&k, type, nx, K));
                es_act_prepare(&k, type, X, K, nx, K, act);
                int32_t rows[7];
                for (int64_t r = 0; r < nr; r++) rows[r] = (int32_t)((r * 5 + 1) % nx);
                float *Y1 = aalloc(sizeof(float) * (size_t)(nr * N));
                float *Y2 = aalloc(sizeof(float) * (size_t)(nr * N));
                for (int q = 0; q < 4; q++) {
                    const int64_t n0 = q % 2 ? 5 : 0, n1 = q % 2 ? 70 : N;
                    const int acc = q / 2;
                    for (int64_t i = 0; i < nr * N; i++) Y1[i] = Y2[i] = (float)(i % 7) - 3;
                    es_gemm(&k, type, w, K, n0, n1, act, rows, nr, Y1, N, acc, scratch);
                    es_gemm_tiled(&k, type, wt, K, N, n0, n1, act, rows, nr, Y2, N, acc, scratch);
                    if (memcmp(Y1, Y2, sizeof(float) * (size_t)(nr * N)) != 0)
                        fail_msg("%s %s K=%ld rows=%ld [%ld, %ld) acc=%d: tiled differs from rows",
                                 isas[ii], es_qtype_name(type), (long)K, (long)nr, (long)n0,
                                 (long)n1, acc);
                    cases++;
                }
                free(Y1);
                free(Y2);
                free(act);
                free(X);
            }
            free(scratch);
            free(wt);
            free(w);
        }
    }
    print_message("%ld cases of 1-7 rows over two slices bit-identical to rows\n", cases);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),   cmocka_unit_test(test_scalar),
        cmocka_unit_test(test_avx2),        cmocka_unit_test(test_avxvnni),
        cmocka_unit_test(test_avx512),      cmocka_unit_test(test_amx),
        cmocka_unit_test(test_asimd),
        cmocka_unit_test(test_neon),
        cmocka_unit_test(test_i8mm),
        cmocka_unit_test(test_guard_pages),
        cmocka_unit_test(test_few_rows_two_slices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
