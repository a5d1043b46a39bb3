/*
 * Test helper: rewrites a GGUF whose experts are merged (blk.N.ffn_{gate,up,down}_exps.weight,
 * [a, b, E]) into llama.cpp's older naming, one 2-D tensor per expert and matrix
 * (blk.N.ffn_{gate,up,down}.E.weight), as its converters wrote the first Mixtral files. The
 * bytes of every matrix are the merged tensor's expert slice, unchanged; keys, alignment and
 * the other tensors are copied. Where the expert tensors go (`place`):
 *   SPLIT_IN_TURN   at the layer's first merged tensor, expert by expert: gate.e, down.e, up.e
 *                   (the old converter's order: w1, w2, w3), so each matrix's experts lie at one
 *                   stride with the other two matrices between them;
 *   SPLIT_GROUPED   each merged tensor's experts in a row where it was (one matrix after another);
 *   SPLIT_UNEVEN    in turn, but experts 0 and 1 swapped: no single stride (a file estream can
 *                   pack but not stream in place).
 * Built on the tree's GGUF reader and writer, which test_gguf checks against llama.cpp's files.
 */
#ifndef ES_TEST_SPLIT_EXPERTS_H
#define ES_TEST_SPLIT_EXPERTS_H

#include "gguf/gguf.h"

enum split_place { SPLIT_IN_TURN, SPLIT_GROUPED, SPLIT_UNEVEN };

/* Kind (0 gate, 1 up, 2 down) and layer of a merged expert tensor's name; -1 if it is not one. */
static inline int split_merged_kind(es_str name, int *il)
{
    char buf[96], kind[8];
    int end = 0;
    if (name.len >= sizeof(buf)) return -1;
    memcpy(buf, name.ptr, name.len);
    buf[name.len] = 0;
    if (sscanf(buf, "blk.%d.ffn_%7[a-z]_exps.weight%n", il, kind, &end) != 2 ||
        end != (int)name.len)
        return -1;
    return !strcmp(kind, "gate") ? 0 : !strcmp(kind, "up") ? 1 : !strcmp(kind, "down") ? 2 : -1;
}

static inline void split_experts(const char *src, const char *dst, enum split_place place)
{
    static const char *const kn[3] = {"gate", "up", "down"};
    es_gguf *g = NULL;
    es_gguf_writer *w = NULL;
    if (es_gguf_open(src, &g) != ES_OK) fail_msg("open %s: %s", src, es_last_error());
    if (es_gguf_writer_create(&w) != ES_OK || es_gguf_writer_copy_kv(w, g, "") != ES_OK ||
        es_gguf_writer_set_alignment(w, (uint32_t)es_gguf_alignment(g)) != ES_OK)
        fail_msg("split writer: %s", es_last_error());
    const int64_t nt = es_gguf_n_tensors(g);
    for (int64_t i = 0; i < nt; i++) {
        const es_gguf_tensor *t = es_gguf_tensor_at(g, i);
        char name[96];
        int il = 0;
        const int k = split_merged_kind(t->name, &il);
        if (k < 0) {
            snprintf(name, sizeof(name), "%.*s", (int)t->name.len, t->name.ptr);
            if (es_gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data,
                                          t->nbytes) != ES_OK)
                fail_msg("split writer: %s", es_last_error());
            continue;
        }
        /* the layer's three merged tensors */
        const es_gguf_tensor *m[3] = {NULL, NULL, NULL};
        for (int kk = 0; kk < 3; kk++) {
            snprintf(name, sizeof(name), "blk.%d.ffn_%s_exps.weight", il, kn[kk]);
            m[kk] = es_gguf_find_tensor(g, name);
            assert_non_null(m[kk]);
        }
        const int64_t E = t->ne[2];
        bool first = true; /* this is the layer's first merged tensor in the file */
        for (int64_t j = 0; j < i; j++) {
            int jl = 0;
            if (split_merged_kind(es_gguf_tensor_at(g, j)->name, &jl) >= 0 && jl == il)
                first = false;
        }
        static const int in_turn[3] = {0, 2, 1}; /* gate, down, up */
        const int n_kinds = place == SPLIT_GROUPED ? 1 : 3;
        if (place != SPLIT_GROUPED && !first) continue;
        for (int64_t x = 0; x < E; x++) {
            const int64_t e = place == SPLIT_UNEVEN && x < 2 && E > 1 ? 1 - x : x;
            for (int q = 0; q < n_kinds; q++) {
                const int kk = place == SPLIT_GROUPED ? k : in_turn[q];
                const es_gguf_tensor *mt = m[kk];
                const uint64_t mb = mt->nbytes / (uint64_t)E;
                snprintf(name, sizeof(name), "blk.%d.ffn_%s.%lld.weight", il, kn[kk],
                         (long long)e);
                const int64_t ne[2] = {mt->ne[0], mt->ne[1]};
                if (es_gguf_writer_add_tensor(w, name, mt->type, 2, ne,
                                              (const uint8_t *)mt->data + (uint64_t)e * mb,
                                              mb) != ES_OK)
                    fail_msg("split writer: %s", es_last_error());
            }
        }
    }
    if (es_gguf_writer_write(w, dst) != ES_OK) fail_msg("write %s: %s", dst, es_last_error());
    es_gguf_writer_destroy(w);
    es_gguf_close(g);
}

#endif
