/*
 * The GEMM driver of the SIMD kernel tables (kern.h, "one driver for every table").
 *
 * Loop order of a GEMM: for each row group, for each K-slice, for each tile of output rows:
 * decode the tile, then run the micro-kernel over the group's token rows. The group's activation
 * slice should stay in L2 (each tile re-reads it from there), and so should the decoded tile (the
 * micro-kernel loads each weight vector once per register block of tokens, an L2 stream it
 * sustains; measured on AVX-512: a tile sized for L2 beats one sized for L1 by 5-10 %, because
 * fewer slices mean fewer Y round trips and kernel calls). Y is read and written once per slice.
 * Slices are as long as the tile budget (a quarter of L2) allows; rows are then grouped so that a
 * group's act slice fits half of L2 (each group decodes the tiles again, so groups are at least
 * 96 rows; below that the slices get thinner instead). None of this changes results (kern.h,
 * determinism): every Y element still takes its k blocks in increasing order, one slice after
 * the other.
 *
 * The tables differ only in what es_kern_tiling holds: the tile width, the record sizes, the
 * register block heights, the decoders and micro-kernels. A change to the loops (the slices, the
 * prefetch hint, the row split) reaches every table through this file.
 *
 * The matrix-engine table (amx) runs through the same loops with two additions of its tiling
 * (kern.h): the group's rows are packed once per slice into the operand layout its tiles load
 * (a tile row is read at a fixed stride, so a gathered row list cannot be read in place), and
 * tiles are decoded one ahead into two buffers, the kernel decoding the next tile while its
 * matrix work on the current one runs. Neither changes which float operations a Y element sees.
 */
#include "quant/kern.h"

#include "core/cpu.h"
#include "core/util.h"

typedef struct slices {
    int64_t ks, rg; /* k values per slice (a multiple of unit), token rows per group */
} slices;

/* Row groups are a multiple of every register block height: 24 for the vector tables (blocks
 * of at most 8 rows), 48 with the matrix tables' 16. */
static int64_t group_multiple(int tb)
{
    return tb <= 8 ? 24 : 48;
}

/* tile_u: the decoded tile's bytes per unit of k, doubled for decode_ahead (two buffers). */
static slices make_slices(int64_t K, int64_t n_rows, int64_t unit, size_t tile_u, size_t act_u,
                          int64_t mult)
{
    const size_t l2 = es_cpu_get()->l2_bytes;
    const int64_t k_units = (K + unit - 1) / unit;
    int64_t n = (int64_t)(l2 / 4 / tile_u); /* the tile (both buffers) in a quarter of L2 */
    if (n > k_units) n = k_units;
    if (n < 1) n = 1;
    /* rows whose act slice fits half of L2; at least 96 (decode amortized), else thinner slices */
    int64_t rg = (int64_t)(l2 / 2 / (act_u * (size_t)n));
    if (rg < 96) {
        n = (int64_t)(l2 / 2 / (act_u * 96));
        if (n < 1) n = 1;
        rg = (int64_t)(l2 / 2 / (act_u * (size_t)n));
    }
    if (rg < mult) rg = mult;
    slices p = {n * unit, n_rows};
    if (p.rg > rg) p.rg = rg / mult * mult; /* a multiple of every register block height */
    return p;
}

/* The longest slice make_slices() can choose: it sizes the per-thread scratch. */
static int64_t max_slice(int64_t unit, size_t tile_u)
{
    const size_t n = es_cpu_get()->l2_bytes / 4 / tile_u;
    return (int64_t)(n < 1 ? 1 : n) * unit;
}

static size_t tile_unit_bytes(const es_kern_tiling *tl)
{
    return tl->tile_bytes * (tl->decode_ahead ? 2 : 1);
}

/* One tile buffer's bytes for rows of K weights (a multiple of 64). */
static size_t tile_buf_bytes(const es_kern_tiling *tl, int64_t K)
{
    const int64_t ks = max_slice(tl->unit, tile_unit_bytes(tl));
    const int64_t k = (K + 31) / 32 * 32; /* float decoders write whole 16-value steps */
    return ((size_t)(k < ks ? k : ks) * tl->tile_bytes / (size_t)tl->unit + 63) / 64 * 64;
}

/* The packed rows' bytes: a group of rg rows takes rg x the slice's k / 32 x pack_bytes_32
 * bytes, and make_slices keeps rg x slice x act_bytes / unit within half of L2 unless rg is at
 * its floor (mult), plus up to tb - 1 zero rows: rg x slice is bounded whatever the slice. */
static size_t pack_buf_bytes(const es_kern_tiling *tl, int64_t K)
{
    if (!tl->pack_rows) return 0;
    const int64_t ks = max_slice(tl->unit, tile_unit_bytes(tl));
    const size_t k = (size_t)(K < ks ? K : ks);
    const size_t half_l2 = es_cpu_get()->l2_bytes / 2;
    const size_t floor_rows = (size_t)(group_multiple(tl->tb) + tl->tb);
    const size_t row_k = half_l2 * (size_t)tl->unit / tl->act_bytes + floor_rows * k;
    return ((row_k + 31) / 32 * tl->pack_bytes_32 + 63) / 64 * 64;
}

size_t es_kern_drive_scratch(const es_kern_tiling *tl, int64_t K)
{
    return tile_buf_bytes(tl, K) * (tl->decode_ahead ? 2 : 1) + pack_buf_bytes(tl, K) + 64;
}

/* The height of the next register block when `left` token rows remain and a block holds at most
 * tb. Even: the rows spread evenly over the fewest blocks (16 rows at tb 5 run as 4+4+4+4, not
 * 5+5+5+1), because a block of one or two rows has too few independent accumulators to hide the
 * multiply latency while it still loads the whole tile. Which block a row falls in never
 * changes its result. */
static int block_rows(int64_t left, int tb, int even)
{
    if (!even) return (int)(left < tb ? left : tb);
    const int64_t nb = (left + tb - 1) / tb;
    return (int)((left + nb - 1) / nb);
}

/* The raw bytes of a later tile's slice, if it is a whole tile, for the first register block
 * of tile nt to fetch into L2 while it works (es_kern_block.pf), or NULL: rows of the row
 * layout, or the tile layout's one range of 32 x the slice's row bytes, taken as tw parts. With
 * decode_ahead the next tile is being decoded already, so the one after it. A table whose tiles
 * are narrower than the layout's (avx2: 16 or 8 rows) fetches the next layout tile's whole
 * range during the first tile of each layout tile (the hardware prefetcher follows the rest);
 * with decode_ahead (amx) only a table whose tiles are the layout's fetches. */
static const uint8_t *fetch_ahead(const es_kern_tiling *tl, const void *W, size_t wrb,
                                  size_t row_k0, int64_t nt, int64_t n1)
{
    const int64_t tw = tl->tile_rows;
    const uint8_t *w = W;
    if (!tl->tiled || tw == ES_TILE_ROWS) {
        const int64_t pt = nt + (tl->decode_ahead ? 2 : 1) * tw;
        return pt + tw > n1 ? NULL : w + pt * wrb + (tl->tiled ? (size_t)tw : 1) * row_k0;
    }
    const int64_t next = nt / ES_TILE_ROWS * ES_TILE_ROWS + ES_TILE_ROWS;
    return !tl->decode_ahead && nt % ES_TILE_ROWS == 0 && next + ES_TILE_ROWS <= n1
               ? w + next * wrb + ES_TILE_ROWS * row_k0
               : NULL;
}

void es_kern_drive(const es_kern_tiling *tl, uint32_t type, const void *W, int64_t K, int64_t N,
                   int64_t n0, int64_t n1, const void *act, const int32_t *rows, int64_t n_rows,
                   float *Y, int64_t ldy, int accumulate, void *scratch)
{
    ES_ASSERT(K > 0 && ((uintptr_t)scratch & 63) == 0);
    ES_ASSERT(tl->tb <= ES_KERN_TB_MAX && tl->tb_narrow <= ES_KERN_TB_MAX);
    ES_ASSERT(!tl->pack_rows || (!tl->even_split && tl->tb == tl->tb_narrow));
    /* a direct kernel reads the weights in place: nothing decodes a tile ahead for it */
    ES_ASSERT(!tl->direct || !tl->decode_ahead);
    ES_ASSERT(!tl->in_place || (tl->tiled && tl->tile_rows == ES_TILE_ROWS && !tl->decode_ahead));
    const int64_t mult = group_multiple(tl->tb);
    const slices pl = make_slices(K, n_rows, tl->unit, tile_unit_bytes(tl), tl->act_bytes, mult);
    const size_t wrb = es_qtype_row_bytes(type, K), arb = tl->act_row_bytes(K);
    const int64_t tw = tl->tile_rows;
    /* scratch: the tile buffer (two with decode_ahead: tile i in buf[i % 2]), then packed rows */
    const size_t tbb = tile_buf_bytes(tl, K);
    uint8_t *const buf[2] = {scratch, (uint8_t *)scratch + (tl->decode_ahead ? tbb : 0)};
    uint8_t *const packed = tl->pack_rows ? buf[1] + tbb : NULL;
    es_kern_tile t = {.W = W, .wrb = wrb, .N = N, .type = type}, tn = t;
    es_kern_block b;
    b.K = K;
    b.wrb = b.pf_wrb = wrb;
    b.pf_step = ((uint64_t)wrb << 21) / (uint64_t)K; /* bytes per block of 32 k, << 16 */
    b.xp = NULL;
    b.tl = tl;
    for (int64_t rg = 0; rg < n_rows; rg += pl.rg) {
        const int64_t rg1 = rg + pl.rg < n_rows ? rg + pl.rg : n_rows;
        for (int64_t k0 = 0; k0 < K; k0 += pl.ks) {
            t.k0 = tn.k0 = b.k0 = k0;
            t.k1 = tn.k1 = k0 + pl.ks < K ? k0 + pl.ks : K;
            b.nk = t.k1 - k0;
            b.load_y = accumulate || k0 > 0;
            const size_t row_k0 = wrb * (size_t)k0 / (size_t)K; /* a row's bytes before k0 */
            if (tl->tiled) { /* a part: the slice's bytes of 32 / tw rows */
                b.pf_wrb = wrb * (size_t)b.nk / (size_t)K * (size_t)(ES_TILE_ROWS / tw);
                b.pf_step = ((uint64_t)wrb << 21) / (uint64_t)K * (uint64_t)(ES_TILE_ROWS / tw);
            }
            if (packed) tl->pack_rows(act, arb, K, rows, rg, rg1, k0, t.k1, packed);
            /* the tile layout's tiles start at multiples of the width; rows below n0 are masked */
            const int64_t nt0 = tl->tiled ? n0 / tw * tw : n0;
            int64_t i = 0;
            for (int64_t nt = nt0; nt < n1; nt += tw, i++) {
                t.nt = nt;
                t.lo = b.lo = (int)(n0 > nt ? n0 - nt : 0);
                t.hi = b.hi = (int)(n1 - nt < tw ? n1 - nt : tw);
                uint8_t *const cur = buf[i & 1];
                /* a few rows on a whole tile: the direct kernel reads the tile's slice itself
                 * (on the tile layout from the layout's tile holding it, which must be whole for
                 * its tile-blocks to be ES_TILE_ROWS rows apart) */
                const int64_t lt = nt / ES_TILE_ROWS * ES_TILE_ROWS;
                const int whole = tl->tiled ? lt + ES_TILE_ROWS <= N : nt + tw <= n1;
                const int direct = tl->direct && n_rows <= tl->tb_direct && whole;
                /* in_place: a whole layout tile is the decoded tile itself */
                const int raw = direct || (tl->in_place && whole);
                b.sub = tl->tiled ? (int)(nt - lt) : 0;
                if (raw)
                    b.tile = tl->tiled ? (const uint8_t *)W + lt * wrb + ES_TILE_ROWS * row_k0
                                       : (const uint8_t *)W + nt * wrb;
                else if (!tl->decode_ahead || nt == nt0)
                    tl->decode(&t, cur);
                if (!raw) b.tile = cur;
                /* decode_ahead: the next tile, for the first register block to decode */
                tn.nt = nt + tw;
                tn.lo = 0;
                tn.hi = (int)(n1 - tn.nt < tw ? n1 - tn.nt : tw);
                const es_kern_tile *next = tl->decode_ahead && tn.nt < n1 ? &tn : NULL;
                b.next_buf = buf[(i + 1) & 1];
                b.pf = fetch_ahead(tl, W, wrb, row_k0, nt, n1);
                const int tb = direct                    ? tl->tb_direct
                               : b.hi <= tl->narrow_rows ? tl->tb_narrow
                                                         : tl->tb;
                for (int64_t r = rg; r < rg1; r += b.T) {
                    b.T = block_rows(rg1 - r, tb, tl->even_split);
                    for (int j = 0; j < b.T; j++) {
                        b.xr[j] = (const uint8_t *)act + (rows ? rows[r + j] : r + j) * arb;
                        /* may point below column n0: the kernel touches only [lo, hi) */
                        b.yp[j] = Y + (r + j) * ldy + nt;
                    }
                    if (packed) b.xp = packed + (r - rg) * (b.nk / 32) * tl->pack_bytes_32;
                    b.next = r == rg ? next : NULL;
                    (direct ? tl->direct : tl->kernel)(&b);
                    b.pf = NULL; /* fetched during the first register block */
                }
            }
        }
    }
}
