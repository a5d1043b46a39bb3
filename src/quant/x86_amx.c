/*
 * amx kernel table: the integer products on Intel AMX tiles (AMX-TILE + AMX-INT8), the rest from
 * the avx512 table. Built with AVX-512 and AMX flags; exports only es_kern_fill_amx() (STYLE §6).
 * Its second build (ES_AMX_EMULATE, amx_ops.h) runs the same code on a C emulation of the tile
 * instructions and only registers itself with the dispatcher, for the tests; a third
 * (ES_AMX_NO_TMUL) leaves the matrix unit's work out, for bench/bench_amx_bound; a fourth
 * (ES_AMX_EMULATE and ES_AVX512_EMULATE: avx512_emu.h) runs on AVX2 alone, for the tests on
 * CPUs without AVX-512.
 *
 * DESIGN. The table is the avx512 one (act preparation, float kernels, element-wise steps) with
 * the gemm of every integer weight kind replaced: a call with at least ROWS_MIN token rows goes
 * through the tiles, a smaller one through the avx512 kernels (a tile product wastes most of
 * its 16 rows on a few tokens). Both give the same bits (kern.h, determinism), so the choice per
 * call changes no result.
 *
 * Operands. tdpbssd C[m][n] += sum_k A[m][k] * B[k/4][4n + k%4] with A and B signed bytes:
 *   A = 16 token rows x one block of 32 int8 activations (the act's q, as prepared);
 *   B = the weights of one block for 16 output rows in 4-byte VNNI groups, which is exactly a
 *       column of x86_avx512_dec.h's record (8 groups x 64 bytes, 128 bytes apart), decoded
 *       once per tile by the avx512 decoders built with DEC_BIAS 0 (signed weights);
 *   C = 16 tokens x 16 output rows of int32: row t is the zmm of 16 output rows that the avx512
 *       micro-kernel accumulates for token t, lane for lane.
 * Why tdpbssd: the activations are signed int8 with no unsigned form, so A is signed; the
 * vector table stores weights as w + 128 only because vpdpbusd's weight operand must be
 * unsigned, which then costs it the -128 * sum(x) correction. With B signed too, the sum is the
 * exact integer dot product with no correction (tdpbsud on the unsigned record would need an
 * extra vpaddd per token, column and block in the float epilogue, the part that bounds this
 * kernel). Q4_K/Q5_K weights (0..31) are the same bytes in both encodings.
 *
 * Exact blocks. Every block of 32 k has its own scale, so one tdpbssd covers one block: A has
 * 32-byte rows (K = 32), B 8 rows. Q6_K scales each half of 16: its blocks take two products
 * with 16-byte A rows and 4-row B tiles into two C tiles. The int32 sums are then exactly the
 * avx512 table's accumulators, and the float epilogue is its float code, operation for
 * operation: f = (float)C[t] * s; [Q6_K: f = fma((float)C_hi[t], s_hi, f)]; y = fma(f, d_x, y);
 * [Q4_K/Q5_K: y = fma(-(dmin*m), d_x * sum(q_x), y)] [Q2_K: before that y, f = fma(sum_lo(x),
 * -(dmin*m_lo), f) and the same for hi], block after block in increasing k. So the
 * table's outputs are bit-identical to avx512's and scalar's for every weight kind (tests:
 * test_kern, test_tiles, test_forward, test_batch, test_plan compare them bit for bit).
 *
 * The loops are kern_drive.c's, with the matrix-table parts of es_kern_tiling: the row group's
 * activation rows are packed once per K-slice into A tiles (16 rows x 32 bytes contiguous per
 * block: a tile row is loaded at one stride, and the call's rows are a gather list), each
 * followed by its 16 rows' activation scales (the epilogue's one address for them), with zero
 * rows after the last token; and tiles are decoded one ahead into two buffers: the first block
 * of 16 tokens of tile i decodes tile i+1 unit by unit (256 k) while its own products run,
 * while the raw rows of tile i+2 are prefetched into L2 (docs/design.md §10: vector decode, matrix
 * engine and the fetch of the next weights overlap inside one call). A call on 16 tokens
 * multiplies each column of 16 output rows per block: load A and B, zero C, tdpbssd, store C,
 * then 16 zmm of float work; two C tiles alternate between blocks, so block b+1's product can
 * run while block b's sums are scaled.
 *
 * Tile state: the configuration (tile_cfg) is per thread. A thread loads it before its first
 * tile instruction (tiles_ready: a thread-local flag) and a thread-specific destructor releases
 * the tiles when it exits, so every pool worker configures itself and nothing else in the
 * process changes. (The flag assumes that no other code in the thread loads another tile
 * configuration between two calls: estream has no other AMX user.) The dispatcher enables this
 * table only where CPUID reports AMX-TILE and AMX-INT8, XCR0 enables the tile state and the kernel
 * granted it (core/cpu.c).
 */
#include "quant/kern.h"

#include "core/cpu.h"

#include <immintrin.h>
#include <pthread.h>
#include <string.h>

#define DEC_BIAS 0 /* signed weights: tdpbssd multiplies signed by signed bytes */
#include "quant/x86_avx512_dec.h"

#include "quant/amx_ops.h"

#define ROWS_MIN 16    /* calls with fewer token rows run the avx512 kernels */
#define TT 16          /* token rows per A and C tile (the register block height) */
#define A_BLOCK 512    /* packed bytes of one A tile: 16 rows x 32 k */
#define PACK_BLOCK 640 /* an A tile and its rows' d and ds (16 floats each): 16 rows x 40 */
#define ACT256_Q 416   /* act bytes per 256 k of a row (kern.h's integer act rows) */

/* kinds as in x86_avx512.c: one scale per block; + mins; Q6_K halves; Q2_K (+ the halves' mins) */
enum { KQ, KM, K6, K2 };

/* Tile numbers. C0/C1 alternate between blocks (Q6_K: its two halves); A and B hold one block
 * of 32 k; Q6_K uses AL/BL and AH/BH for its halves of 16 k. */
#define T_C0 0
#define T_C1 1
#define T_A 2
#define T_B 3
#define T_AL 4
#define T_BL 5
#define T_AH 6
#define T_BH 7

/* Shapes: C 16 x 64 bytes (16 int32), A 16 x 32 (K = 32), B 8 x 64, AL/AH 16 x 16, BL/BH 4 x 64. */
static const _Alignas(64) amx_config tile_cfg = {
    .palette = 1,
    .colsb = {64, 64, 32, 64, 16, 64, 16, 64},
    .rows = {16, 16, 16, 8, 16, 4, 16, 4},
};

/* ---- the per-thread tile configuration ------------------------------------------------------ */

static _Thread_local int tiles_loaded;
static pthread_key_t release_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

/* Runs in a thread that exits with its tiles configured. */
static void release_tiles(void *unused)
{
    (void)unused;
    amx_release();
}

static void make_key(void)
{
    ES_ASSERT(pthread_key_create(&release_key, release_tiles) == 0);
}

/* Before this thread's first tile instruction: loads its configuration and arranges the release
 * at its exit. Later calls cost a thread-local load. */
static inline void tiles_ready(void)
{
    if (__builtin_expect(tiles_loaded, 1)) return;
    pthread_once(&key_once, make_key);
    amx_load_config(&tile_cfg);
    pthread_setspecific(release_key, &tiles_loaded); /* non-NULL: the destructor runs */
    tiles_loaded = 1;
}

/* ---- activation rows into A tiles ---------------------------------------------------------- */

/* es_kern_tiling.pack_rows: rows [r0, r1) of the call, k [k0, k1): for each 16-row block j and
 * each block b of 32 k, its A tile (16 rows x 32 bytes) and then the 16 rows' activation scales
 * of that block (d, then ds: 16 floats each), PACK_BLOCK bytes at dst + (16j * nk / 32 + b) *
 * 40, nk = k1 - k0, so register block r's starts at dst + (r - r0) * nk / 32 * 40 as the driver
 * expects, and the epilogue finds the scales of its 16 tokens at one address (a pointer per
 * token row would take 16 registers). Rows past r1 are zero (their C rows are never stored). */
static void pack_rows(const void *act, size_t arb, int64_t K, const int32_t *rows, int64_t r0,
                      int64_t r1, int64_t k0, int64_t k1, uint8_t *dst)
{
    const int64_t nbs = (k1 - k0) / 32, kb0 = k0 / 32;
    const uint8_t *base = act;
    const float *d0 = (const float *)(base + es_act_q8_off_d(K)) + kb0;
    const float *ds0 = (const float *)(base + es_act_q8_off_ds(K)) + kb0;
    for (int64_t j0 = r0; j0 < r1; j0 += TT) {
        uint8_t *blk = dst + (j0 - r0) * nbs * (PACK_BLOCK / TT);
        const int n = r1 - j0 < TT ? (int)(r1 - j0) : TT;
        int64_t off[TT] = {0}; /* the rows' byte offsets in act */
        for (int i = 0; i < TT; i++) {
            uint8_t *d = blk + 32 * i;
            if (i >= n) {
                for (int64_t b = 0; b < nbs; b++)
                    _mm256_store_si256((__m256i *)(d + PACK_BLOCK * b), _mm256_setzero_si256());
                continue;
            }
            const int64_t r = rows ? rows[j0 + i] : j0 + i;
            off[i] = r * (int64_t)arb;
            const uint8_t *s = base + off[i] + k0;
            for (int64_t b = 0; b < nbs; b++)
                _mm256_store_si256((__m256i *)(d + PACK_BLOCK * b),
                                   _mm256_loadu_si256((const __m256i *)(s + 32 * b)));
        }
        /* the scales: two gathers of 8 per block for the 16 rows (zeros past the last) */
        const __m512i vlo = _mm512_loadu_si512(off), vhi = _mm512_loadu_si512(off + 8);
        const __mmask8 mlo = (__mmask8)(n >= 8 ? 0xff : (1u << n) - 1),
                       mhi = (__mmask8)(n <= 8 ? 0 : (1u << (n - 8)) - 1);
        const __m256 z = _mm256_setzero_ps();
        for (int64_t b = 0; b < nbs; b++) {
            float *sc = (float *)(blk + PACK_BLOCK * b + A_BLOCK);
            _mm256_store_ps(sc, _mm512_mask_i64gather_ps(z, mlo, vlo, d0 + b, 1));
            _mm256_store_ps(sc + 8, _mm512_mask_i64gather_ps(z, mhi, vhi, d0 + b, 1));
            _mm256_store_ps(sc + 16, _mm512_mask_i64gather_ps(z, mlo, vlo, ds0 + b, 1));
            _mm256_store_ps(sc + 24, _mm512_mask_i64gather_ps(z, mhi, vhi, ds0 + b, 1));
        }
    }
}

/* ---- the tile micro-kernel ------------------------------------------------------------------- */

/* One block of 32 k for one column into tile TC: C = A . B, stored as 16 rows of 16 int32. */
#define BLOCK_PRODUCT(TC, xa, w, out)                                                              \
    do {                                                                                           \
        amx_load(T_A, xa, 32);                                                                     \
        amx_load(T_B, w, 128);                                                                     \
        amx_zero(TC);                                                                              \
        amx_dp(TC, T_A, T_B);                                                                      \
        amx_store(TC, out, 64);                                                                    \
    } while (0)

/* Q6_K: the block's two halves of 16 k, into C0 (k 0..15) and C1 (k 16..31). */
#define HALF_PRODUCTS(xa, w, out0, out1)                                                           \
    do {                                                                                           \
        amx_load(T_AL, xa, 32);                                                                    \
        amx_load(T_BL, w, 128);                                                                    \
        amx_load(T_AH, (xa) + 16, 32);                                                             \
        amx_load(T_BH, (w) + 512, 128);                                                            \
        amx_zero(T_C0);                                                                            \
        amx_zero(T_C1);                                                                            \
        amx_dp(T_C0, T_AL, T_BL);                                                                  \
        amx_dp(T_C1, T_AH, T_BH);                                                                  \
        amx_store(T_C0, out0, 64);                                                                 \
        amx_store(T_C1, out1, 64);                                                                 \
    } while (0)

/*
 * One register block: T <= 16 token rows (packed at a->xp) x the decoded tile, one column of 16
 * output rows at a time with its 16 y vectors in registers. Rows past T compute on zero rows
 * (their act pointers repeat row T-1) and are never stored. With a->next, the decode of the
 * next tile follows the products of each unit of the first column.
 */
static inline __attribute__((always_inline)) void mk_tiles(const int kind, const es_kern_block *a)
{
    tiles_ready();
    const size_t bs = kind == KQ ? REC_Q : kind == K2 ? REC_K2 : REC_K;
    const int64_t nbs = a->nk / 32, unit_blocks = a->tl->unit / 32;
    const int64_t oc2 = es_act_q8_off_c2(a->K) + 8 * (a->k0 / 32);
    const int T = a->T;
    _Alignas(64) int32_t cb[2][TT * 16];
    const int columns = a->hi > 16 ? 2 : 1;
    for (int c = 0; c < columns; c++) {
        const __mmask16 m = lane_range(a->lo - 16 * c, a->hi - 16 * c);
        __m512 y[TT];
#pragma GCC unroll 16
        for (int t = 0; t < TT; t++)
            y[t] = a->load_y && t < T ? _mm512_maskz_loadu_ps(m, a->yp[t] + 16 * c)
                                      : _mm512_setzero_ps();
        const uint8_t *rec = a->tile;
        for (int64_t b = 0; b < nbs; b++, rec += bs) {
            const uint8_t *xa = a->xp + PACK_BLOCK * b, *w = rec + 64 * c;
            const float *dx = (const float *)(xa + A_BLOCK), *dsx = dx + TT;
            const int32_t *lo = cb[b & 1], *hi = cb[1];
            if (kind == K6) {
                HALF_PRODUCTS(xa, w, cb[0], cb[1]);
                lo = cb[0];
            } else if (b & 1) {
                BLOCK_PRODUCT(T_C1, xa, w, cb[1]);
            } else {
                BLOCK_PRODUCT(T_C0, xa, w, cb[0]);
            }
            const __m512 s = _mm512_load_ps(rec + 1024 + 64 * c);
            const __m512 s2 = kind == KQ ? s : _mm512_load_ps(rec + 1152 + 64 * c);
            /* K2: each token's sums of the block's halves (the act's c2, times 1), 0 past T */
            _Alignas(64) float sl[TT], sh[TT];
            if (kind == K2)
                for (int t = 0; t < TT; t++) {
                    int32_t v[2] = {0, 0};
                    if (t < T) memcpy(v, a->xr[t] + oc2 + 8 * b, sizeof(v));
                    sl[t] = (float)v[0];
                    sh[t] = (float)v[1];
                }
#pragma GCC unroll 16
            for (int t = 0; t < TT; t++) {
                __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(lo + 16 * t)), s);
                if (kind == K2) {
                    f = _mm512_fmadd_ps(_mm512_set1_ps(sl[t]), s2, f);
                    f = _mm512_fmadd_ps(_mm512_set1_ps(sh[t]), _mm512_load_ps(rec + 1280 + 64 * c),
                                        f);
                }
                if (kind == K6)
                    f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(hi + 16 * t)), s2, f);
                y[t] = _mm512_fmadd_ps(f, _mm512_set1_ps(dx[t]), y[t]);
                if (kind == KM) y[t] = _mm512_fmadd_ps(s2, _mm512_set1_ps(dsx[t]), y[t]);
            }
            if (c == 0) {
                if (a->pf) es_kern_prefetch_step(a, b, NRI);
                if (a->next && ((b + 1) % unit_blocks == 0 || b + 1 == nbs))
                    es_kern_decode_next(a, b / unit_blocks);
            }
        }
#pragma GCC unroll 16
        for (int t = 0; t < TT; t++)
            if (t < T) _mm512_mask_storeu_ps(a->yp[t] + 16 * c, m, y[t]);
    }
}

static void mk_KQ(const es_kern_block *a)
{
    mk_tiles(KQ, a);
}
static void mk_KM(const es_kern_block *a)
{
    mk_tiles(KM, a);
}
static void mk_K6(const es_kern_block *a)
{
    mk_tiles(K6, a);
}
static void mk_K2(const es_kern_block *a)
{
    mk_tiles(K2, a);
}
static void (*const mk_table[4])(const es_kern_block *) = {mk_KQ, mk_KM, mk_K6, mk_K2};

static es_kern_tiling tile_tiling(int kind, int tiled,
                                  void (*decode)(const es_kern_tile *, uint8_t *))
{
    return (es_kern_tiling){.tile_rows = NRI,
                            .unit = 256,
                            .tile_bytes = 8 * (size_t)(kind == KQ   ? REC_Q
                                                       : kind == K2 ? REC_K2
                                                                    : REC_K),
                            .act_bytes = ACT256_Q,
                            .act_row_bytes = es_act_q8_row_bytes,
                            .tb = TT,
                            .tb_narrow = TT,
                            .tiled = tiled,
                            .decode = decode,
                            .kernel = mk_table[kind],
                            .decode_ahead = 1,
                            .pack_bytes_32 = PACK_BLOCK / TT,
                            .pack_rows = pack_rows};
}

/* ---- the table ------------------------------------------------------------------------------ */

/* The avx512 table, for the calls of fewer than ROWS_MIN rows (filled once, then read-only). */
static es_kern vector_kern;
static pthread_once_t vector_once = PTHREAD_ONCE_INIT;
static void fill_vector(void)
{
    es_kern_fill_avx512(&vector_kern);
}
static const es_kern_ops *vector_ops(uint32_t type)
{
    pthread_once(&vector_once, fill_vector);
    return &vector_kern.op[type];
}

/* Scratch: the larger of the avx512 kernels' and the tile driver's (kind KQ or the K kinds). */
static size_t scratch_of(int kind, uint32_t vector_type, int64_t K)
{
    const es_kern_tiling tl = tile_tiling(kind, 0, NULL);
    const size_t v = vector_ops(vector_type)->scratch_bytes(K), t = es_kern_drive_scratch(&tl, K);
    return v > t ? v : t;
}
static size_t scratch_q(int64_t K)
{
    return scratch_of(KQ, ES_QTYPE_Q4_0, K);
}
static size_t scratch_k(int64_t K)
{
    return scratch_of(KM, ES_QTYPE_Q4_K, K);
}
static size_t scratch_k2(int64_t K)
{
    return scratch_of(K2, ES_QTYPE_Q2_K, K);
}

#define GEMM_AMX(name, kind, dec, type)                                                            \
    static void name##_decode(const es_kern_tile *t, uint8_t *tile)                                \
    {                                                                                              \
        dec((const uint8_t *)t->W + t->nt * t->wrb, t->wrb, t->hi, t->k0 / 32, t->k1 / 32, tile);  \
    }                                                                                              \
    static void name(const void *W, int64_t K, int64_t n0, int64_t n1, const void *act,            \
                     const int32_t *rows, int64_t n_rows, float *Y, int64_t ldy, int accumulate,   \
                     void *scratch)                                                                \
    {                                                                                              \
        if (n_rows < ROWS_MIN) {                                                                   \
            vector_ops(type)->gemm(W, K, n0, n1, act, rows, n_rows, Y, ldy, accumulate, scratch);  \
            return;                                                                                \
        }                                                                                          \
        ES_ASSERT(K % 32 == 0);                                                                    \
        const es_kern_tiling tl = tile_tiling(kind, 0, name##_decode);                             \
        es_kern_drive(&tl, type, W, K, 0, n0, n1, act, rows, n_rows, Y, ldy, accumulate, scratch); \
    }
GEMM_AMX(gemm_q4_0, KQ, dec_q4_0, ES_QTYPE_Q4_0)
GEMM_AMX(gemm_q8_0, KQ, dec_q8_0, ES_QTYPE_Q8_0)
GEMM_AMX(gemm_q4_K, KM, dec_q4_K, ES_QTYPE_Q4_K)
GEMM_AMX(gemm_q5_K, KM, dec_q5_K, ES_QTYPE_Q5_K)
GEMM_AMX(gemm_q6_K, K6, dec_q6_K, ES_QTYPE_Q6_K)
GEMM_AMX(gemm_q3_K, K6, dec_q3_K, ES_QTYPE_Q3_K)
GEMM_AMX(gemm_q2_K, K2, dec_q2_K, ES_QTYPE_Q2_K)
GEMM_AMX(gemm_q5_0, KQ, dec_q5_0, ES_QTYPE_Q5_0)
GEMM_AMX(gemm_iq4_nl, KQ, dec_iq4_nl, ES_QTYPE_IQ4_NL)
GEMM_AMX(gemm_iq4_xs, KQ, dec_iq4_xs, ES_QTYPE_IQ4_XS)
GEMM_AMX(gemm_mxfp4, KQ, dec_mxfp4, ES_QTYPE_MXFP4)

/* The tile layout (quant/tiles.h): the same records from x86_avx512_dec.h's tiled decoders. */
#define GEMM_AMX_TILED(name, dec, type)                                                            \
    static void name##_decode(const es_kern_tile *t, uint8_t *tile)                                \
    {                                                                                              \
        dec((const uint8_t *)t->W + t->nt * t->wrb, es_tile_rows(t->N, t->nt), t->k0 / 32,         \
            t->k1 / 32, tile);                                                                     \
    }                                                                                              \
    static void name(const void *W, int64_t K, int64_t N, int64_t n0, int64_t n1, const void *act, \
                     const int32_t *rows, int64_t n_rows, float *Y, int64_t ldy, int accumulate,   \
                     void *scratch)                                                                \
    {                                                                                              \
        if (n_rows < ROWS_MIN) {                                                                   \
            vector_ops(type)->gemm_tiled(W, K, N, n0, n1, act, rows, n_rows, Y, ldy, accumulate,   \
                                         scratch);                                                 \
            return;                                                                                \
        }                                                                                          \
        ES_ASSERT(K % 32 == 0);                                                                    \
        const es_kern_tiling tl = tile_tiling(KQ, 1, name##_decode);                               \
        es_kern_drive(&tl, type, W, K, N, n0, n1, act, rows, n_rows, Y, ldy, accumulate, scratch); \
    }
GEMM_AMX_TILED(gemm_tiled_q4_0, dec_t_q4_0, ES_QTYPE_Q4_0)
GEMM_AMX_TILED(gemm_tiled_q8_0, dec_t_q8_0, ES_QTYPE_Q8_0)

/* Overrides the integer products of k, which holds the avx512 table. */
static void fill(es_kern *k)
{
    k->isa = "amx";
    k->wide_calls = true;
    static const struct {
        uint32_t type;
        void (*gemm)(const void *, int64_t, int64_t, int64_t, const void *, const int32_t *,
                     int64_t, float *, int64_t, int, void *);
        size_t (*scratch)(int64_t);
    } tab[] = {
        {ES_QTYPE_Q4_0, gemm_q4_0, scratch_q},     {ES_QTYPE_Q8_0, gemm_q8_0, scratch_q},
        {ES_QTYPE_Q4_K, gemm_q4_K, scratch_k},     {ES_QTYPE_Q5_K, gemm_q5_K, scratch_k},
        {ES_QTYPE_Q6_K, gemm_q6_K, scratch_k},     {ES_QTYPE_Q5_0, gemm_q5_0, scratch_q},
        {ES_QTYPE_IQ4_NL, gemm_iq4_nl, scratch_q}, {ES_QTYPE_IQ4_XS, gemm_iq4_xs, scratch_q},
        {ES_QTYPE_Q3_K, gemm_q3_K, scratch_k},     {ES_QTYPE_Q2_K, gemm_q2_K, scratch_k2},
        {ES_QTYPE_MXFP4, gemm_mxfp4, scratch_q},
    };
    for (size_t i = 0; i < ES_LEN(tab); i++) {
        ES_ASSERT(k->op[tab[i].type].act_prepare != NULL); /* the avx512 table is underneath */
        k->op[tab[i].type].gemm = tab[i].gemm;
        k->op[tab[i].type].scratch_bytes = tab[i].scratch;
    }
    k->op[ES_QTYPE_Q4_0].gemm_tiled = gemm_tiled_q4_0;
    k->op[ES_QTYPE_Q8_0].gemm_tiled = gemm_tiled_q8_0;
}

#if !defined(ES_AMX_EMULATE) && !defined(ES_AMX_NO_TMUL)
void es_kern_fill_amx(es_kern *k)
{
    fill(k);
}
#elif defined(ES_AVX512_EMULATE)
/* The tests' build on AVX2 (avx512_emu.h; the fills of its x86_avx512.c and vec_avx512.c builds
 * are renamed there): before main, offer the dispatcher avx512 and amx where the CPU has no
 * AVX-512 of its own. */
__attribute__((constructor)) static void register_emulation(void)
{
    es_kern_avx512_register_emulation(es_kern_fill_avx512, es_vec_fill_avx512, fill);
}
#else
/* The tests' build (emulated tiles) and bench_amx_bound's (no matrix unit): before main, offer
 * the dispatcher this table as "amx" where the CPU has no AMX of its own. */
__attribute__((constructor)) static void register_emulation(void)
{
    es_kern_amx_register_emulation(fill);
}
#endif
#ifdef ES_AMX_NO_TMUL
/* bench_amx_bound: the tdpbssd this thread has skipped so far. */
uint64_t es_amx_no_tmul_products(void);
uint64_t es_amx_no_tmul_products(void)
{
    return notmul_products;
}
#endif
