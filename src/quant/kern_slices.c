/*
 * Cache-sized slices for the SIMD kernel tables (kern.h, "shared by the kernel tables").
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
 * determinism).
 */
#include "quant/kern.h"

#include "core/cpu.h"

es_kern_slices es_kern_make_slices(int64_t K, int64_t n_rows, int64_t unit, size_t tile_u,
                                   size_t act_u)
{
    const size_t l2 = es_cpu_get()->l2_bytes;
    const int64_t k_units = (K + unit - 1) / unit;
    int64_t n = (int64_t)(l2 / 4 / tile_u); /* the tile in a quarter of L2 */
    if (n > k_units) n = k_units;
    if (n < 1) n = 1;
    /* rows whose act slice fits half of L2; at least 96 (decode amortized), else thinner slices */
    int64_t rg = (int64_t)(l2 / 2 / (act_u * (size_t)n));
    if (rg < 96) {
        n = (int64_t)(l2 / 2 / (act_u * 96));
        if (n < 1) n = 1;
        rg = (int64_t)(l2 / 2 / (act_u * (size_t)n));
    }
    if (rg < 24) rg = 24;
    es_kern_slices p = {n * unit, n_rows};
    if (p.rg > rg) p.rg = rg / 24 * 24; /* a multiple of every register block height */
    return p;
}

int64_t es_kern_max_slice(int64_t unit, size_t tile_u)
{
    const size_t n = es_cpu_get()->l2_bytes / 4 / tile_u;
    return (int64_t)(n < 1 ? 1 : n) * unit;
}
