/*
 * The tile layout ("tiles-v2") of Q4_0 and Q8_0 weight matrices: the GGUF bytes of a matrix,
 * rearranged so that the SIMD kernels' weight operand comes from plain vector loads (no
 * transposes, no gathers), with exactly as many bytes as the row layout. Pack files store the
 * expert matrices of these types in it (pack.h); every kernel table reads it (es_gemm_tiled in
 * kern.h), the scalar one and the reference path by rebuilding GGUF rows (es_tiles_get_row).
 *
 * Byte layout of a matrix of N rows x K weights, nb = K / 32 blocks per row, bb bytes per block
 * (Q4_0: 18 = f16 d + 16 bytes qs; Q8_0: 34 = f16 d + 32 bytes qs), rb = nb * bb bytes per row:
 *
 *   - Rows go in tiles of ES_TILE_ROWS = 32 consecutive rows. Tile t holds rows [32t, 32t + nt)
 *     with nt = min(32, N - 32t): only the last tile may be short. Tile t starts at byte
 *     32t * rb (where row 32t starts in the row layout) and has nt * rb bytes, so the matrix has
 *     N * rb bytes, as many as in the row layout, and a tile-aligned row range is the same byte
 *     range in both layouts.
 *   - A tile is nb tile-blocks in increasing k. Tile-block b (weights 32b .. 32b+31 of the tile's
 *     rows) starts at byte b * nt * bb of the tile:
 *         f16 d[nt]          d[j] = the scale of block b of the tile's row j
 *         u8  q[G][nt][4]    G = 4 (Q4_0) or 8 (Q8_0); q[g][j][0..3] = qs[4g .. 4g+3] of block b
 *                            of row j, unchanged
 *     i.e. the block's qs bytes as dwords, group-major and row-minor. Q4_0: qs[i] holds weight i
 *     (low nibble) and weight i + 16 (high nibble), each + 8; Q8_0: qs[i] is int8 weight i.
 *
 * Why this shape: with the matrix at a 64-byte aligned address (pack records align matrices to
 * 64 bytes), a full tile-block is a whole number of cache lines (576 or 1088 bytes), d[32] is one
 * line (two 16-lane f16->f32 converts), and dword g of rows 16c .. 16c+15 is the aligned 64-byte
 * vector at byte 64 + 128g + 64c: exactly column c of group g of the AVX-512 kernel's 32-row
 * tile (16 rows in the 16 lanes, 4 weights per lane per vpdpbusd). The AVX2 kernel's 8-row tile
 * s (rows 8s .. 8s+7) reads 32 bytes at 64 + 128g + 32s. Only the nibble split and the kernel's
 * unsigned encoding remain per tile. Short tiles use the same formulas with nt < 32 (masked
 * loads). K-quants are not tiled: a pack keeps them in rows and says so per matrix.
 *
 * F32 has a tile layout too, for matrices estream lays out in memory itself (the attention's
 * keys and values, run/attention.c), never in a pack: each tile is its rows transposed, float
 * w[K][nt] (w[k][j] = weight k of the tile's row j), starting at float 32t * K as above. K need
 * not be a multiple of 32. A whole tile is then the x86 float kernels' operand itself ([k][32]),
 * and a 16-row tile of the NEON tables is 16 consecutive floats per k.
 */
#ifndef ES_TILES_H
#define ES_TILES_H

#include "quant/qtypes.h"

/* Weight layouts of a matrix (pack.h per-matrix layout ids; es_expert_shape in moe/plan.h). */
enum {
    ES_LAYOUT_ROWS = 0,  /* GGUF rows: row n at n * es_qtype_row_bytes(type, K) */
    ES_LAYOUT_TILES = 1, /* this file's tile layout (Q4_0 and Q8_0 only) */
    ES_LAYOUT_COUNT
};

#define ES_TILE_ROWS 32

/* True if matrices of this type have a tile layout in packs (Q4_0, Q8_0). The conversions below
 * take these and F32. */
bool es_tiles_type_ok(uint32_t type);

/* Rows of the tile that starts at row n0 (a multiple of 32) of N rows. */
static inline int es_tile_rows(int64_t N, int64_t n0)
{
    return N - n0 < ES_TILE_ROWS ? (int)(N - n0) : ES_TILE_ROWS;
}

/* Converts a matrix from GGUF rows (N rows of K weights) to tiles; rows and tiles do not overlap
 * and have es_qtype_row_bytes(type, K) * N bytes each. type: es_tiles_type_ok() or F32. */
void es_tiles_from_rows(uint32_t type, const void *rows, int64_t K, int64_t N, void *tiles);

/* Rebuilds GGUF row n (0 <= n < N) of a tiled matrix into row (es_qtype_row_bytes(type, K)
 * bytes). */
void es_tiles_get_row(uint32_t type, const void *tiles, int64_t K, int64_t N, int64_t n,
                      void *row);

/* Dequantizes row n of a tiled matrix into K floats: the same floats es_dequantize_row() gives
 * for that row in the row layout. */
void es_tiles_dequantize_row(uint32_t type, const void *tiles, int64_t K, int64_t N, int64_t n,
                             float *out);

#endif
