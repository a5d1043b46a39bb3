/* The geometry of expert groups (geometry.h), and the bank and request sizes of pipeline.h. */
#include "stream/geometry.h"

#include "stream/pipeline.h"

#include <string.h>

void es_stream_map_group(const es_layer *L, const es_pack_layer *pl, int e0, int e1, es_group_map *g)
{
    memset(g, 0, sizeof(*g));
    if (pl) { /* G consecutive records: one aligned extent */
        const uint64_t start = pl->file_offset + (uint64_t)e0 * pl->record_bytes;
        g->n_ext = 1;
        g->ext[0] = (es_group_extent){start, (size_t)((uint64_t)(e1 - e0) * pl->record_bytes),
                             (size_t)((uint64_t)(e1 - e0) * pl->record_bytes), 0};
        for (int i = 0; i < 3; i++) {
            g->mat_bank_off[i] = (size_t)pl->offsets[i];
            g->stride[i] = (size_t)pl->record_bytes;
        }
        return;
    }
    size_t at = 0;
    g->n_ext = 3;
    for (int i = 0; i < 3; i++) { /* one tensor slice per matrix kind */
        const uint64_t start = L->exp_file_off[i] + (uint64_t)e0 * L->exp_stride[i];
        const uint64_t end = L->exp_file_off[i] + (uint64_t)(e1 - 1) * L->exp_stride[i] +
                             L->exp_bytes[i];
        const uint64_t a = start / ES_STREAM_ALIGN * ES_STREAM_ALIGN;
        const uint64_t b = (end + ES_STREAM_ALIGN - 1) / ES_STREAM_ALIGN * ES_STREAM_ALIGN;
        g->ext[i] = (es_group_extent){a, (size_t)(b - a), (size_t)(end - a), at};
        g->mat_bank_off[i] = at + (size_t)(start - a);
        g->stride[i] = L->exp_stride[i];
        at += (size_t)(b - a);
    }
}

size_t es_stream_map_bytes(const es_group_map *g)
{
    size_t n = 0;
    for (int x = 0; x < g->n_ext; x++) n += g->ext[x].len;
    return n;
}

es_status es_stream_walk_groups(const es_model *m, int G,
                             void (*fn)(void *u, const es_group_map *g), void *u)
{
    const int E = m->hp.n_expert;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const es_layer *L = &m->layers[il];
        if (!es_layer_is_moe(L)) continue;
        es_pack_layer pl, *plp = NULL;
        if (m->is_pack) {
            ES_TRY(es_pack_layer_info(m->gguf, il, &pl));
            plp = &pl;
        }
        for (int e0 = 0; e0 < E; e0 += G) {
            es_group_map g;
            es_stream_map_group(L, plp, e0, e0 + G < E ? e0 + G : E, &g);
            fn(u, &g);
        }
    }
    return ES_OK;
}

typedef struct size_acc { size_t max; uint64_t sum; } size_acc;
static void acc_group(void *u, const es_group_map *g)
{
    size_acc *a = u;
    const size_t n = es_stream_map_bytes(g);
    a->max = n > a->max ? n : a->max;
    a->sum += n;
}

size_t es_stream_bank_bytes(const es_model *m, int G)
{
    size_acc a = {0, 0};
    if (G < 1 || es_stream_walk_groups(m, G, acc_group, &a) != ES_OK) return 0;
    return a.max;
}

uint64_t es_stream_request_bytes(const es_model *m, int G)
{
    size_acc a = {0, 0};
    if (G < 1 || es_stream_walk_groups(m, G, acc_group, &a) != ES_OK) return 0;
    return a.sum;
}

