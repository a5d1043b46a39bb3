/*
 * Test helper: writes a GGUF as the parts of a split model, the way llama.cpp's gguf-split does
 * (examples/gguf-split, split by tensor count): part i is <prefix>-<i+1>-of-<n>.gguf (5 digits
 * each); every part has split.no (u16, 0-based), split.count (u16) and split.tensors.count (i32);
 * the first part also has every key of the source (before the split keys); the tensors go in
 * order, ceil(T / n) to a part. Faults for the reader's refusals (`fault`):
 *   PARTS_OK           as gguf-split writes them
 *   PARTS_BAD_NO       the last part says split.no = 0
 *   PARTS_DUP_TENSOR   the last part repeats the first part's first tensor
 *   PARTS_BAD_COUNT    split.tensors.count one more than the tensors
 * Returns the first part's path (static buffer).
 */
#ifndef ES_TEST_SPLIT_PARTS_H
#define ES_TEST_SPLIT_PARTS_H

#include "gguf/gguf.h"

enum parts_fault { PARTS_OK, PARTS_BAD_NO, PARTS_DUP_TENSOR, PARTS_BAD_COUNT };

static inline const char *part_path(const char *prefix, int i, int n)
{
    static char path[1024];
    snprintf(path, sizeof(path), "%.990s-%05d-of-%05d.gguf", prefix, i + 1, n);
    return path;
}

static inline const char *split_parts(const char *src, const char *prefix, int n,
                                      enum parts_fault fault)
{
    es_gguf *g = NULL;
    if (es_gguf_open(src, &g) != ES_OK) fail_msg("open %s: %s", src, es_last_error());
    const int64_t T = es_gguf_n_tensors(g), per = (T + n - 1) / n;
    for (int i = 0; i < n; i++) {
        es_gguf_writer *w = NULL;
        if (es_gguf_writer_create(&w) != ES_OK) fail_msg("%s", es_last_error());
        if (i == 0 && es_gguf_writer_copy_kv(w, g, "") != ES_OK) fail_msg("%s", es_last_error());
        const int no = fault == PARTS_BAD_NO && i == n - 1 ? 0 : i;
        if (es_gguf_writer_set_u16(w, "split.no", (uint16_t)no) != ES_OK ||
            es_gguf_writer_set_u16(w, "split.count", (uint16_t)n) != ES_OK ||
            es_gguf_writer_set_i32(w, "split.tensors.count",
                                   (int32_t)(T + (fault == PARTS_BAD_COUNT))) != ES_OK)
            fail_msg("%s", es_last_error());
        for (int64_t j = i * per; j < T && j < (i + 1) * per; j++) {
            const es_gguf_tensor *t = es_gguf_tensor_at(g, j);
            char name[256];
            snprintf(name, sizeof(name), "%.*s", (int)t->name.len, t->name.ptr);
            if (es_gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data,
                                          t->nbytes) != ES_OK)
                fail_msg("%s", es_last_error());
        }
        if (fault == PARTS_DUP_TENSOR && i == n - 1) {
            const es_gguf_tensor *t = es_gguf_tensor_at(g, 0);
            char name[256];
            snprintf(name, sizeof(name), "%.*s", (int)t->name.len, t->name.ptr);
            if (es_gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data,
                                          t->nbytes) != ES_OK)
                fail_msg("%s", es_last_error());
        }
        if (es_gguf_writer_write(w, part_path(prefix, i, n)) != ES_OK)
            fail_msg("write part %d: %s", i, es_last_error());
        es_gguf_writer_destroy(w);
    }
    es_gguf_close(g);
    return part_path(prefix, 0, n);
}

#endif
