/* Conversions between the GGUF row layout and the tile layout (layout in tiles.h). Portable
 * code: used by the pack writer, the scalar kernel table and the reference forward pass. */
#include "quant/tiles.h"

#include <string.h>

bool es_tiles_type_ok(uint32_t type)
{
    return type == ES_QTYPE_Q4_0 || type == ES_QTYPE_Q8_0;
}

/* Bytes per block and dword groups per block of a tileable type. */
static void geometry(uint32_t type, size_t *bb, int *G)
{
    ES_ASSERT(es_tiles_type_ok(type));
    *bb = type == ES_QTYPE_Q4_0 ? 18 : 34;
    *G = type == ES_QTYPE_Q4_0 ? 4 : 8;
}

/* Where block b of row n lives in a tiled matrix: its tile-block, the row's index j in the tile
 * and the tile's row count nt. */
static const uint8_t *tile_block(const uint8_t *tiles, size_t bb, int64_t nb, int64_t N,
                                 int64_t n, int64_t b, int *j, int *nt)
{
    const int64_t n0 = n / ES_TILE_ROWS * ES_TILE_ROWS;
    *nt = es_tile_rows(N, n0);
    *j = (int)(n - n0);
    return tiles + (size_t)n0 * nb * bb + (size_t)b * (size_t)*nt * bb;
}

/* Block b of row n (GGUF bytes, bb of them) out of a tiled matrix. */
static void get_block(const uint8_t *tiles, size_t bb, int G, int64_t nb, int64_t N, int64_t n,
                      int64_t b, uint8_t *dst)
{
    int j, nt;
    const uint8_t *tb = tile_block(tiles, bb, nb, N, n, b, &j, &nt);
    memcpy(dst, tb + 2 * j, 2);
    for (int g = 0; g < G; g++)
        memcpy(dst + 2 + 4 * g, tb + 2 * nt + (size_t)4 * nt * g + 4 * j, 4);
}

/* F32: tile t is float w[K][nt] at float 32t * K (tiles.h). */
static void f32_from_rows(const float *rows, int64_t K, int64_t N, float *tiles)
{
    for (int64_t n0 = 0; n0 < N; n0 += ES_TILE_ROWS) {
        const int nt = es_tile_rows(N, n0);
        for (int j = 0; j < nt; j++)
            for (int64_t k = 0; k < K; k++)
                tiles[n0 * K + k * nt + j] = rows[(n0 + j) * K + k];
    }
}

static void f32_get_row(const float *tiles, int64_t K, int64_t N, int64_t n, float *row)
{
    const int64_t n0 = n / ES_TILE_ROWS * ES_TILE_ROWS;
    const int nt = es_tile_rows(N, n0);
    for (int64_t k = 0; k < K; k++)
        row[k] = tiles[n0 * K + k * nt + (n - n0)];
}

void es_tiles_from_rows(uint32_t type, const void *rows, int64_t K, int64_t N, void *tiles)
{
    if (type == ES_QTYPE_F32) {
        f32_from_rows(rows, K, N, tiles);
        return;
    }
    size_t bb;
    int G;
    geometry(type, &bb, &G);
    const int64_t nb = K / 32;
    const size_t rb = (size_t)nb * bb;
    for (int64_t n0 = 0; n0 < N; n0 += ES_TILE_ROWS) {
        const int nt = es_tile_rows(N, n0);
        const uint8_t *src = (const uint8_t *)rows + (size_t)n0 * rb;
        uint8_t *tile = (uint8_t *)tiles + (size_t)n0 * rb;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *tb = tile + (size_t)b * (size_t)nt * bb;
            for (int j = 0; j < nt; j++) {
                const uint8_t *blk = src + (size_t)j * rb + (size_t)b * bb;
                memcpy(tb + 2 * j, blk, 2);
                for (int g = 0; g < G; g++)
                    memcpy(tb + 2 * nt + (size_t)4 * nt * g + 4 * j, blk + 2 + 4 * g, 4);
            }
        }
    }
}

void es_tiles_get_row(uint32_t type, const void *tiles, int64_t K, int64_t N, int64_t n,
                      void *row)
{
    ES_ASSERT(n >= 0 && n < N);
    if (type == ES_QTYPE_F32) {
        f32_get_row(tiles, K, N, n, row);
        return;
    }
    size_t bb;
    int G;
    geometry(type, &bb, &G);
    const int64_t nb = K / 32;
    for (int64_t b = 0; b < nb; b++)
        get_block(tiles, bb, G, nb, N, n, b, (uint8_t *)row + (size_t)b * bb);
}

void es_tiles_dequantize_row(uint32_t type, const void *tiles, int64_t K, int64_t N, int64_t n,
                             float *out)
{
    ES_ASSERT(n >= 0 && n < N);
    if (type == ES_QTYPE_F32) {
        f32_get_row(tiles, K, N, n, out);
        return;
    }
    size_t bb;
    int G;
    geometry(type, &bb, &G);
    const int64_t nb = K / 32;
    uint8_t blk[34];
    for (int64_t b = 0; b < nb; b++) {
        get_block(tiles, bb, G, nb, N, n, b, blk);
        es_dequantize_row(type, blk, out + 32 * b, 32);
    }
}
