/*
 * libFuzzer harness for the GGUF reader: any input must either be rejected with ES_E_FORMAT or
 * open into a handle whose every getter is safe. Build and run:
 *   make fuzz && build-fuzz/fuzz_gguf -max_total_time=60 -dict=tests/fuzz/gguf.dict tests/fuzz/corpus
 * The input buffer is exactly the file, so ASan reports any read past its end.
 */
#include "gguf/gguf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink; /* keeps the reads below from being optimized away */

static void walk_key(const es_gguf *g, const char *key)
{
    uint32_t u;
    int64_t s;
    float f;
    bool b;
    es_str str;
    es_gguf_type et;
    uint64_t n, sum = 0;
    if (es_gguf_get_u32(g, key, &u)) sum += u;
    if (es_gguf_get_i64(g, key, &s)) sum += (uint64_t)s;
    if (es_gguf_get_f32(g, key, &f)) sum += f == f;
    if (es_gguf_get_bool(g, key, &b)) sum += b;
    if (es_gguf_get_str(g, key, &str))
        for (size_t i = 0; i < str.len; i++) sum += (uint8_t)str.ptr[i];
    if (es_gguf_get_arr(g, key, &et, &n)) {
        static const size_t esize[ES_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
        const uint8_t *d = es_gguf_arr_data(g, key);
        if (d)
            for (uint64_t i = 0; i < n * esize[et]; i++) sum += d[i];
        if (et == ES_GGUF_STRING)
            for (uint64_t i = 0; i < n; i++) {
                es_str e = es_gguf_arr_str(g, key, i);
                if (e.len) sum += (uint8_t)e.ptr[0] + (uint8_t)e.ptr[e.len - 1];
            }
        sum += es_gguf_arr_str(g, key, n).len; /* out of range: empty */
    }
    sink += sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    es_gguf *g;
    if (es_gguf_open_memory(data, size, "fuzz.gguf", &g) != ES_OK) {
        if (g) abort(); /* a failed open must not hand out a handle */
        return 0;
    }
    uint64_t sum = es_gguf_version(g) + es_gguf_alignment(g);
    if (es_gguf_data_offset(g) > es_gguf_file_size(g)) abort();
    char key[512];
    for (int64_t i = 0; i < es_gguf_n_kv(g); i++) {
        es_str k = es_gguf_key(g, i);
        sum += es_gguf_kv_type(g, i);
        if (k.len >= sizeof(key) || memchr(k.ptr, 0, k.len)) continue;
        memcpy(key, k.ptr, k.len);
        key[k.len] = 0;
        if (es_gguf_find_key(g, key) != i) abort(); /* keys are unique */
        walk_key(g, key);
    }
    for (int64_t i = 0; i < es_gguf_n_tensors(g); i++) {
        const es_gguf_tensor *t = es_gguf_tensor_at(g, i);
        const uint8_t *d = t->data;
        if (d < data || (uint64_t)(d - data) > size || t->nbytes > size - (size_t)(d - data))
            abort(); /* the data region lies inside the input */
        if (t->nbytes) sum += d[0] + d[t->nbytes - 1];
        if (t->name.len < sizeof(key) && !memchr(t->name.ptr, 0, t->name.len)) {
            memcpy(key, t->name.ptr, t->name.len);
            key[t->name.len] = 0;
            if (es_gguf_find_tensor(g, key) != t) abort();
        }
    }
    /* The writer copies validated values verbatim, nested arrays included. */
    es_gguf_writer *w;
    if (es_gguf_writer_create(&w) == ES_OK) {
        if (es_gguf_writer_copy_kv(w, g, "") != ES_OK) abort();
        es_gguf_writer_destroy(w);
    }
    sink += sum;
    es_gguf_close(g);
    return 0;
}
