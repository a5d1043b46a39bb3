/* The geometry of expert groups (geometry.h), and the bank and request sizes of pipeline.h. */
#include "stream/geometry.h"

#include "stream/pipeline.h"

#include <stdlib.h>
#include <string.h>

void es_stream_map_group(const es_layer *L, const es_pack_layer *pl, int e0, int e1, es_group_map *g)
{
    memset(g, 0, sizeof(*g));
    if (pl) { /* G consecutive records: one aligned extent */
        const uint64_t start = pl->file_offset + (uint64_t)e0 * pl->record_bytes;
        g->n_ext = 1;
        g->ext[0] = (es_group_extent){0, start,
                                      (size_t)((uint64_t)(e1 - e0) * pl->record_bytes),
                                      (size_t)((uint64_t)(e1 - e0) * pl->record_bytes), 0};
        for (int i = 0; i < 3; i++) {
            g->mat_bank_off[i] = (size_t)pl->offsets[i];
            g->stride[i] = (size_t)pl->record_bytes;
        }
        return;
    }
    /* One slice per matrix kind (in its file: a split model's part); slices that overlap (a
     * GGUF with one tensor per expert, each expert's three in turn: every kind's slice spans
     * the others) are read as one extent. */
    uint64_t s[3], end[3];
    for (int i = 0; i < 3; i++) {
        s[i] = L->exp_file_off[i] + (uint64_t)e0 * L->exp_stride[i];
        end[i] = L->exp_file_off[i] + (uint64_t)(e1 - 1) * L->exp_stride[i] + L->exp_bytes[i];
        g->stride[i] = L->exp_stride[i];
    }
    int order[3] = {0, 1, 2}; /* by file, then start */
#define BEFORE(a, b) (L->exp_file[a] != L->exp_file[b] ? L->exp_file[a] < L->exp_file[b] : s[a] < s[b])
    for (int i = 1; i < 3; i++)
        for (int j = i; j > 0 && BEFORE(order[j], order[j - 1]); j--) {
            const int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    size_t at = 0;
    for (int n = 0; n < 3;) {
        uint64_t lo = s[order[n]], hi = end[order[n]];
        int m = n + 1;
        const uint32_t file = L->exp_file[order[n]];
        for (; m < 3 && L->exp_file[order[m]] == file && s[order[m]] < hi; m++)
            hi = end[order[m]] > hi ? end[order[m]] : hi;
        const uint64_t a = lo / ES_STREAM_ALIGN * ES_STREAM_ALIGN;
        const uint64_t b = (hi + ES_STREAM_ALIGN - 1) / ES_STREAM_ALIGN * ES_STREAM_ALIGN;
        g->ext[g->n_ext++] = (es_group_extent){(int)file, a, (size_t)(b - a), (size_t)(hi - a), at};
        for (int j = n; j < m; j++) g->mat_bank_off[order[j]] = at + (size_t)(s[order[j]] - a);
        at += (size_t)(b - a);
        n = m;
    }
#undef BEFORE
}

es_status es_stream_io_open(const es_model *m, const es_io_params *p, es_io **out)
{
    const uint32_t n = es_gguf_n_files(m->gguf);
    const char **paths = malloc(sizeof(*paths) * n);
    if (!paths) return es_fail(ES_E_NOMEM, "streaming: out of memory");
    for (uint32_t i = 0; i < n; i++) paths[i] = es_gguf_path(es_gguf_file(m->gguf, i));
    es_status st = es_io_open_files(paths, (int)n, p, out);
    free(paths);
    for (uint32_t i = 0; st == ES_OK && i < n; i++) {
        st = es_gguf_check_same_file(es_gguf_file(m->gguf, i), es_io_file_fd(*out, (int)i),
                                     "stream from it");
        if (st) {
            es_io_close(*out);
            *out = NULL;
        }
    }
    return st;
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

