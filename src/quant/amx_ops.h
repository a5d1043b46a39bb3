/*
 * The AMX tile instructions the amx table uses (x86_amx.c), behind one small interface with two
 * implementations chosen at build time:
 *
 *   default          the instructions themselves (gcc's intrinsics; the including file is built
 *                    with -mamx-tile -mamx-int8). Only a CPU with AMX-TILE and AMX-INT8, an OS
 *                    that enables the tile state and a kernel that granted it may run them.
 *   ES_AMX_EMULATE   plain C on a per-thread array of 8 tiles, with the instructions' shape
 *                    checks (an operand shape the hardware refuses with #UD aborts here). The
 *                    Makefile builds x86_amx.c a second time this way into an object that only
 *                    test programs link (x86_amx_emu.o), so the amx table's layout, driver and
 *                    per-thread configuration run in CI on machines without AMX; the library and
 *                    the estream binary never contain it.
 *   ES_AMX_NO_TMUL   everything but the matrix unit, for bench/bench_amx_bound only: a tile load
 *                    reads its rows (one vector load per row, as tileloadd occupies the load
 *                    ports), a tile store writes its rows as zeros (a zeroing idiom, no port:
 *                    the sums are not computed, and zeros keep the float steps after the
 *                    products at their usual speed, where garbage made denormals), tdpbssd only
 *                    counts itself.
 *                    Timing the amx table this way on an AVX-512 CPU without AMX measures the
 *                    work its vector units and memory do around the tiles (decode, row packing,
 *                    the float epilogue), a floor under its time on an AMX core of the same
 *                    design; the count gives the matrix unit's own time at its issue rate.
 *
 * The operations (t, c, a, b: tile numbers 0..7 as literal constants or macros expanding to one,
 * which the intrinsics need):
 *   amx_load_config(cfg)       ldtilecfg: the 64-byte palette-1 configuration of this thread
 *   amx_release()              tilerelease: back to the init state (no tile data to save)
 *   amx_load(t, base, stride)  tileloadd: rows[t] rows of colsb[t] bytes, row r at base + r*stride
 *   amx_store(t, base, stride) tilestored: the same rows written back
 *   amx_zero(t)                tilezero
 *   amx_dp(c, a, b)            tdpbssd: C[m][n] += sum over k < colsb[a] of
 *                              A[m][k] * B[k/4][4n + k%4], A and B signed bytes, C int32
 *                              (M = rows[c], N = colsb[c] / 4)
 * A tile row past colsb, and a row past rows, reads as zero after a load (as on the hardware).
 */
#ifndef ES_AMX_OPS_H
#define ES_AMX_OPS_H

#include <stdint.h>
#include <string.h>

/* ldtilecfg's memory operand, palette 1: 8 tiles of at most 16 rows x 64 bytes. */
typedef struct amx_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16]; /* bytes per row of tile i (i < 8; the rest 0) */
    uint8_t rows[16];   /* rows of tile i */
} amx_config;
_Static_assert(sizeof(amx_config) == 64, "ldtilecfg reads 64 bytes");

#if !defined(ES_AMX_EMULATE) && !defined(ES_AMX_NO_TMUL)

#include <immintrin.h>

/* gcc 12's tileloadd and ldtilecfg asm statements do not say that they read memory, so without
 * this barrier the compiler may move the stores that fill a tile's source (the decoder's record,
 * the packed rows) after the load. tilestored has its "memory" clobber already. */
#define amx_barrier() __asm__ volatile("" ::: "memory")
#define amx_load_config(cfg)                                                                       \
    do {                                                                                           \
        amx_barrier();                                                                             \
        _tile_loadconfig(cfg);                                                                     \
    } while (0)
#define amx_release() _tile_release()
#define amx_load(t, base, stride)                                                                  \
    do {                                                                                           \
        amx_barrier();                                                                             \
        _tile_loadd(t, base, (long)(stride));                                                      \
    } while (0)
#define amx_store(t, base, stride) _tile_stored(t, base, (long)(stride))
#define amx_zero(t) _tile_zero(t)
#define amx_dp(c, a, b) _tile_dpbssd(c, a, b)

#elif defined(ES_AMX_NO_TMUL)

#include <immintrin.h>

/* The tdpbssd this thread has skipped. */
static _Thread_local uint64_t notmul_products;

/* The asm statements keep every row access (the compiler may neither drop the loads nor forward
 * the stored values into the epilogue's loads) and touch no vector register the code keeps.
 * The shapes are the including file's tile_cfg (x86_amx.c) and the strides are constants where
 * the macros expand, so each row is one instruction on the base register with an immediate
 * offset, as near as C gets to tileloadd's and tilestored's cost. */
#define NOTMUL_ROW_OFFSETS(op, reg, rows, stride, base)                                            \
    do {                                                                                           \
        _Pragma("GCC unroll 16") for (int r_ = 0; r_ < (rows); r_++) __asm__ volatile(             \
            op ::"r"(base), "i"((long)r_ * (stride)) : reg, "memory");                             \
    } while (0)

#define amx_load_config(cfg) ((void)(cfg))
#define amx_release() ((void)0)
#define amx_load(t, base, stride)                                                                  \
    do {                                                                                           \
        if (tile_cfg.colsb[t] > 32)                                                                \
            NOTMUL_ROW_OFFSETS("vmovdqu64 %c1(%0), %%zmm31", "xmm31", tile_cfg.rows[t], stride,    \
                               base);                                                              \
        else                                                                                       \
            NOTMUL_ROW_OFFSETS("vmovdqu64 %c1(%0), %%ymm31", "xmm31", tile_cfg.rows[t], stride,    \
                               base);                                                              \
    } while (0)
#define amx_store(t, base, stride)                                                                 \
    do {                                                                                           \
        __asm__ volatile("vpxord %%zmm31, %%zmm31, %%zmm31" ::: "xmm31");                          \
        NOTMUL_ROW_OFFSETS("vmovdqu64 %%zmm31, %c1(%0)", "xmm31", tile_cfg.rows[t], stride, base); \
    } while (0)
#define amx_zero(t) ((void)0)
#define amx_dp(c, a, b) ((void)notmul_products++)

#else /* ES_AMX_EMULATE */

#include "core/util.h"

/* The tile state of one thread: what the hardware keeps per thread (ldtilecfg's configuration
 * and 8 KiB of tile data). */
static _Thread_local struct {
    amx_config cfg;
    int configured;
    int32_t t[8][16][16]; /* tile i, row r: 64 bytes, viewed as int32 for C tiles */
} emu;

static inline void emu_load_config(const amx_config *cfg)
{
    memcpy(&emu.cfg, cfg, sizeof(*cfg));
    ES_ASSERT(emu.cfg.palette == 1 && emu.cfg.start_row == 0);
    for (int i = 0; i < 16; i++)
        ES_ASSERT(i < 8 ? emu.cfg.rows[i] <= 16 && emu.cfg.colsb[i] <= 64
                        : emu.cfg.rows[i] == 0 && emu.cfg.colsb[i] == 0);
    memset(emu.t, 0, sizeof(emu.t)); /* ldtilecfg zeroes every tile */
    emu.configured = 1;
}

static inline void emu_release(void)
{
    memset(&emu, 0, sizeof(emu));
}

/* The checks every tile instruction makes: a configuration, a configured tile. */
static inline uint8_t *emu_tile(int t)
{
    ES_ASSERT(emu.configured && t >= 0 && t < 8 && emu.cfg.rows[t] && emu.cfg.colsb[t]);
    return (uint8_t *)emu.t[t];
}

static inline void emu_load(int t, const void *base, long stride)
{
    uint8_t *d = emu_tile(t);
    memset(d, 0, 16 * 64);
    for (int r = 0; r < emu.cfg.rows[t]; r++)
        memcpy(d + 64 * r, (const uint8_t *)base + (long)r * stride, emu.cfg.colsb[t]);
}

static inline void emu_store(int t, void *base, long stride)
{
    const uint8_t *s = emu_tile(t);
    for (int r = 0; r < emu.cfg.rows[t]; r++)
        memcpy((uint8_t *)base + (long)r * stride, s + 64 * r, emu.cfg.colsb[t]);
}

static inline void emu_zero(int t)
{
    memset(emu_tile(t), 0, 16 * 64);
}

/* tdpbssd, with the operand checks that raise #UD on the hardware. It reads and writes only this
 * thread's tile array (indices checked above), so AddressSanitizer, which would triple its
 * time in the sanitizer builds of the tests, has nothing to find here and is off. */
__attribute__((no_sanitize_address)) static inline void emu_dp(int c, int a, int b)
{
    const uint8_t *A = emu_tile(a), *B = emu_tile(b);
    int32_t(*C)[16] = (int32_t(*)[16])emu_tile(c);
    const amx_config *cf = &emu.cfg;
    const int M = cf->rows[c], N = cf->colsb[c] / 4, K = cf->colsb[a] / 4;
    ES_ASSERT(c != a && c != b && a != b);
    ES_ASSERT(cf->colsb[c] % 4 == 0 && cf->colsb[a] % 4 == 0 && cf->rows[a] == M);
    ES_ASSERT(cf->rows[b] == K && cf->colsb[b] == cf->colsb[c]);
    /* B widened once, byte i of column n of group g in lane n of wb[g][i], then per row 16
     * columns at once in a vector of the GNU C extension (SIMD even unoptimized or under the
     * sanitizers; columns past N are the zeros past colsb and are not written back). The sums
     * are taken modulo 2^32 in unsigned lanes, as the instruction wraps (and as two's
     * complement gives the same bits): no signed overflow, which is undefined in C. */
    typedef uint32_t v16 __attribute__((vector_size(64)));
    v16 wb[16][4];
    for (int g = 0; g < K; g++)
        for (int i = 0; i < 4; i++)
            for (int n = 0; n < 16; n++)
                wb[g][i][n] = (uint32_t)(int8_t)B[64 * g + 4 * n + i];
    for (int m = 0; m < M; m++) {
        v16 acc;
        memcpy(&acc, C[m], sizeof(acc));
        for (int g = 0; g < K; g++)
            for (int i = 0; i < 4; i++)
                acc += (uint32_t)(int8_t)A[64 * m + 4 * g + i] * wb[g][i];
        memcpy(C[m], &acc, sizeof(int32_t) * (size_t)N);
    }
}

#define amx_load_config(cfg) emu_load_config(cfg)
#define amx_release() emu_release()
#define amx_load(t, base, stride) emu_load(t, base, (long)(stride))
#define amx_store(t, base, stride) emu_store(t, base, (long)(stride))
#define amx_zero(t) emu_zero(t)
#define amx_dp(c, a, b) emu_dp(c, a, b)

#endif /* the three builds */

#endif
