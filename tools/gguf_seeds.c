/*
 * Writes the small GGUF seed files of the fuzzer corpus (tests/fuzz/corpus/).
 *   make BUILD=build build/tools/gguf_seeds && build/tools/gguf_seeds tests/fuzz/corpus
 * Seeds cover every value type, nested arrays, string arrays, several tensor types, a non-default
 * alignment, a zero-size tensor, a version 2 header and a vocabulary-style file without final
 * padding. Each is under 2 KB so the fuzzer mutates structure rather than bulk data.
 */
#include "gguf/gguf.h"
#include "quant/qtypes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a byte builder for the seeds the writer cannot make (nested arrays, v2, no padding) ---- */
typedef struct bb {
    uint8_t b[4096];
    size_t n;
} bb;
static void put(bb *b, const void *p, size_t n)
{
    if (b->n + n > sizeof(b->b)) abort();
    memcpy(b->b + b->n, p, n);
    b->n += n;
}
static void u8(bb *b, uint8_t v) { put(b, &v, 1); }
static void u16(bb *b, uint16_t v) { put(b, &v, 2); }
static void u32(bb *b, uint32_t v) { put(b, &v, 4); }
static void u64(bb *b, uint64_t v) { put(b, &v, 8); }
static void str(bb *b, const char *s)
{
    u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void key(bb *b, const char *k, uint32_t type)
{
    str(b, k);
    u32(b, type);
}

static int save(const char *dir, const char *name, const bb *b)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b->b, 1, b->n, f) != b->n || fclose(f) != 0) {
        fprintf(stderr, "gguf_seeds: cannot write %s\n", path);
        return 1;
    }
    return 0;
}

static int check(es_status st)
{
    if (st != ES_OK) fprintf(stderr, "gguf_seeds: %s\n", es_last_error());
    return st != ES_OK;
}

/* A miniature model written by our writer: scalars, arrays, strings, four tensor types. */
static int tiny_model(const char *dir)
{
    static uint8_t data[4096];
    for (size_t i = 0; i < sizeof(data); i++) data[i] = (uint8_t)(i * 37 + 11);
    static const char *const toks[] = {"<s>", "</s>", "a", "b", "ab", "\xc4\xa0the", "", "x y"};
    const int32_t types[8] = {3, 3, 1, 1, 1, 1, 1, 2};
    es_gguf_writer *w;
    int err = check(es_gguf_writer_create(&w));
    if (err) return 1;
    err |= check(es_gguf_writer_set_str(w, "general.architecture", "olmoe"));
    err |= check(es_gguf_writer_set_u32(w, "olmoe.block_count", 2));
    err |= check(es_gguf_writer_set_u32(w, "olmoe.expert_count", 4));
    err |= check(es_gguf_writer_set_f32(w, "olmoe.rope.freq_base", 10000.0f));
    err |= check(es_gguf_writer_set_i32(w, "x.i32", -3));
    err |= check(es_gguf_writer_set_u64(w, "x.u64", 1ull << 40));
    err |= check(es_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true));
    err |= check(es_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2"));
    err |= check(es_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 8));
    err |= check(es_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", ES_GGUF_INT32, types, 8));
    const int64_t ne_f32[2] = {8, 2}, ne_q8[1] = {32}, ne_q4k[1] = {256}, ne_f16[2] = {4, 3};
    err |= check(es_gguf_writer_add_tensor(w, "token_embd.weight", ES_QTYPE_F32, 2, ne_f32, data,
                                           64));
    err |= check(es_gguf_writer_add_tensor(w, "blk.0.attn_q.weight", ES_QTYPE_Q8_0, 1, ne_q8, data,
                                           34));
    err |= check(es_gguf_writer_add_tensor(w, "blk.0.ffn_up_exps.weight", ES_QTYPE_Q4_K, 1, ne_q4k,
                                           data, 144));
    err |= check(es_gguf_writer_add_tensor(w, "output_norm.weight", ES_QTYPE_F16, 2, ne_f16, data,
                                           24));
    char path[1024];
    snprintf(path, sizeof(path), "%s/tiny_model.gguf", dir);
    if (!err) err |= check(es_gguf_writer_write(w, path));
    es_gguf_writer_destroy(w);

    /* the same with alignment 16, a zero-size tensor and a 4-d tensor */
    if (check(es_gguf_writer_create(&w))) return 1;
    err |= check(es_gguf_writer_set_alignment(w, 16));
    const int64_t ne_z[2] = {0, 3}, ne_4d[4] = {2, 2, 2, 2};
    err |= check(es_gguf_writer_add_tensor(w, "empty", ES_QTYPE_Q6_K, 2, ne_z, NULL, 0));
    err |= check(es_gguf_writer_add_tensor(w, "t4", ES_QTYPE_BF16, 4, ne_4d, data, 32));
    err |= check(es_gguf_writer_add_tensor(w, "q40", ES_QTYPE_Q4_0, 1, ne_q8, data, 18));
    snprintf(path, sizeof(path), "%s/align16.gguf", dir);
    if (!err) err |= check(es_gguf_writer_write(w, path));
    es_gguf_writer_destroy(w);
    return err;
}

/* Every value type and nested arrays, built by hand (the writer's API has no nested setter). */
static int all_types(const char *dir)
{
    bb b = {.n = 0};
    put(&b, "GGUF", 4), u32(&b, 3), u64(&b, 1), u64(&b, 15);
    key(&b, "u8", 0), u8(&b, 200);
    key(&b, "i8", 1), u8(&b, 0xfb);
    key(&b, "u16", 2), u16(&b, 60000);
    key(&b, "i16", 3), u16(&b, 0x8001);
    key(&b, "u32", 4), u32(&b, 4000000000u);
    key(&b, "i32", 5), u32(&b, 0x80000000u);
    float f = 1.5f;
    key(&b, "f32", 6), put(&b, &f, 4);
    key(&b, "bool", 7), u8(&b, 1);
    key(&b, "str", 8), str(&b, "hello");
    key(&b, "u64", 10), u64(&b, ~0ull);
    key(&b, "i64", 11), u64(&b, 1ull << 63);
    double d = -2.25;
    key(&b, "f64", 12), put(&b, &d, 8);
    key(&b, "strs", 9), u32(&b, 8), u64(&b, 3), str(&b, "x"), str(&b, ""), str(&b, "yz");
    key(&b, "nested", 9), u32(&b, 9), u64(&b, 3);
    u32(&b, 2), u64(&b, 2), u16(&b, 1), u16(&b, 2);
    u32(&b, 8), u64(&b, 1), str(&b, "q");
    u32(&b, 9), u64(&b, 1), u32(&b, 7), u64(&b, 2), u8(&b, 0), u8(&b, 1);
    key(&b, "general.alignment", 4), u32(&b, 32);
    str(&b, "w"), u32(&b, 1), u64(&b, 8), u32(&b, 0), u64(&b, 0);
    while (b.n % 32) u8(&b, 0);
    for (int i = 0; i < 32; i++) u8(&b, (uint8_t)i);
    return save(dir, "all_types.gguf", &b);
}

/* Version 2 vocabulary-style file: no tensors, no final padding. */
static int vocab_v2(const char *dir)
{
    bb b = {.n = 0};
    put(&b, "GGUF", 4), u32(&b, 2), u64(&b, 0), u64(&b, 3);
    key(&b, "tokenizer.ggml.model", 8), str(&b, "llama");
    key(&b, "tokenizer.ggml.tokens", 9), u32(&b, 8), u64(&b, 5);
    str(&b, "<unk>"), str(&b, "<s>"), str(&b, "\xe2\x96\x81the"), str(&b, "a"), str(&b, "<0x0A>");
    key(&b, "tokenizer.ggml.scores", 9), u32(&b, 6), u64(&b, 5);
    for (int i = 0; i < 5; i++) {
        float s = -(float)i;
        put(&b, &s, 4);
    }
    int err = save(dir, "vocab_v2.gguf", &b);
    b.n = 0;
    put(&b, "GGUF", 4), u32(&b, 3), u64(&b, 0), u64(&b, 0);
    return err | save(dir, "header_only.gguf", &b);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gguf_seeds DIR\n");
        return 2;
    }
    int err = tiny_model(argv[1]);
    err |= all_types(argv[1]);
    err |= vocab_v2(argv[1]);
    return err ? 1 : 0;
}
