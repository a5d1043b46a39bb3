/*
 * Writes the seed corpora of the model and tokenizer fuzzers (tests/fuzz/corpus-model/ and
 * tests/fuzz/corpus-tok/):
 *   make build/tools/fuzz_seeds && build/tools/fuzz_seeds tests/fuzz
 * corpus-model: a complete olmoe model small enough to mutate (1 layer, 2 experts, 32 dims,
 * 300 tokens: about 25 KB), and vocabulary-only files for both tokenizer kinds (byte-level BPE
 * with merges and special tokens; SentencePiece with byte tokens and scores).
 * corpus-tok: texts for fuzz_tok, whose first byte picks the tokenizer and the flags (see
 * tests/fuzz/fuzz_tok.c).
 */
#include "gguf/gguf.h"
#include "quant/qtypes.h"
#include "tok/bpe_builder.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check(es_status st)
{
    if (st != ES_OK) fprintf(stderr, "fuzz_seeds: %s\n", es_last_error());
    return st != ES_OK;
}

/* The built-in byte-level BPE vocabulary of n tokens, with a CONTROL and a USER_DEFINED token
 * in its last two places. */
static int set_bpe_vocab(es_gguf_writer *w, int n)
{
    es_bpe_vocab v;
    if (check(es_bpe_vocab_build(n, &v))) return 1;
    free(v.tokens[n - 2]);
    free(v.tokens[n - 1]);
    v.tokens[n - 2] = strdup("<|endoftext|>");
    v.tokens[n - 1] = strdup("<tool>");
    v.types[n - 2] = ES_TOKEN_TYPE_CONTROL;
    v.types[n - 1] = ES_TOKEN_TYPE_USER_DEFINED;
    int err = !v.tokens[n - 2] || !v.tokens[n - 1];
    err |= check(es_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2"));
    err |= check(es_gguf_writer_set_str(w, "tokenizer.ggml.pre", "llama3"));
    err |= check(es_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens",
                                            (const char *const *)v.tokens, NULL, (uint64_t)n));
    err |= check(es_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", ES_GGUF_INT32, v.types,
                                        (uint64_t)n));
    err |= check(es_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges",
                                            (const char *const *)v.merges, NULL,
                                            (uint64_t)v.n_merges));
    err |= check(es_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)(n - 2)));
    err |= check(es_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)(n - 2)));
    err |= check(es_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true));
    es_bpe_vocab_free(&v);
    return err;
}

static int write_file(es_gguf_writer *w, const char *dir, const char *sub, const char *name)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s/%s", dir, sub, name);
    int err = check(es_gguf_writer_write(w, path));
    es_gguf_writer_destroy(w);
    return err;
}

/* olmoe with d = 32, one layer, two experts (top 1), n_ff = 32, two heads, 300 tokens; with
 * split, its experts are one tensor each (llama.cpp's older naming, blk.0.ffn_gate.E.weight). */
static int tiny_model(const char *dir, bool split)
{
    enum { MERGED = 1, SPLIT = 2 };
    enum { D = 32, NV = 300, E = 2, FF = 32 };
    static uint8_t data[NV * D * 4];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(i * 37 + 11);
    float *f = (float *)data; /* F32 tensors read the first floats: make them sane */
    for (int i = 0; i < D * E; i++)
        f[i] = 0.01f * (float)(i % 7) + 0.5f;
    es_gguf_writer *w;
    if (check(es_gguf_writer_create(&w))) return 1;
    int err = check(es_gguf_writer_set_str(w, "general.architecture", "olmoe"));
    err |= check(es_gguf_writer_set_str(w, "general.name", "fuzz seed"));
    static const struct {
        const char *key;
        uint32_t v;
    } ints[] = {{"olmoe.context_length", 64},   {"olmoe.embedding_length", D},
                {"olmoe.block_count", 1},       {"olmoe.feed_forward_length", FF},
                {"olmoe.attention.head_count", 2}, {"olmoe.attention.head_count_kv", 2},
                {"olmoe.expert_count", E},      {"olmoe.expert_used_count", 1}};
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
        err |= check(es_gguf_writer_set_u32(w, ints[i].key, ints[i].v));
    err |= check(es_gguf_writer_set_f32(w, "olmoe.rope.freq_base", 10000.0f));
    err |= check(es_gguf_writer_set_f32(w, "olmoe.attention.layer_norm_rms_epsilon", 1e-5f));
    err |= set_bpe_vocab(w, NV);
    static const struct {
        const char *name;
        uint32_t type, n_dims;
        int64_t ne[3];
        int naming; /* 0: every file; MERGED or SPLIT: that naming of the experts only */
    } ts[] = {
        {"token_embd.weight", ES_QTYPE_Q4_0, 2, {D, NV, 1}, 0},
        {"blk.0.attn_norm.weight", ES_QTYPE_F32, 1, {D, 1, 1}, 0},
        {"blk.0.attn_q.weight", ES_QTYPE_Q4_0, 2, {D, D, 1}, 0},
        {"blk.0.attn_k.weight", ES_QTYPE_Q4_0, 2, {D, D, 1}, 0},
        {"blk.0.attn_v.weight", ES_QTYPE_Q8_0, 2, {D, D, 1}, 0},
        {"blk.0.attn_output.weight", ES_QTYPE_F16, 2, {D, D, 1}, 0},
        {"blk.0.attn_q_norm.weight", ES_QTYPE_F32, 1, {D, 1, 1}, 0},
        {"blk.0.attn_k_norm.weight", ES_QTYPE_F32, 1, {D, 1, 1}, 0},
        {"blk.0.ffn_norm.weight", ES_QTYPE_F32, 1, {D, 1, 1}, 0},
        {"blk.0.ffn_gate_inp.weight", ES_QTYPE_F32, 2, {D, E, 1}, 0},
        {"blk.0.ffn_gate_exps.weight", ES_QTYPE_Q4_0, 3, {D, FF, E}, MERGED},
        {"blk.0.ffn_up_exps.weight", ES_QTYPE_Q4_0, 3, {D, FF, E}, MERGED},
        {"blk.0.ffn_down_exps.weight", ES_QTYPE_Q4_0, 3, {FF, D, E}, MERGED},
        {"blk.0.ffn_gate.0.weight", ES_QTYPE_Q4_0, 2, {D, FF, 1}, SPLIT},
        {"blk.0.ffn_down.0.weight", ES_QTYPE_Q4_0, 2, {FF, D, 1}, SPLIT},
        {"blk.0.ffn_up.0.weight", ES_QTYPE_Q4_0, 2, {D, FF, 1}, SPLIT},
        {"blk.0.ffn_gate.1.weight", ES_QTYPE_Q4_0, 2, {D, FF, 1}, SPLIT},
        {"blk.0.ffn_down.1.weight", ES_QTYPE_Q4_0, 2, {FF, D, 1}, SPLIT},
        {"blk.0.ffn_up.1.weight", ES_QTYPE_Q4_0, 2, {D, FF, 1}, SPLIT},
        {"output_norm.weight", ES_QTYPE_F32, 1, {D, 1, 1}, 0},
        {"output.weight", ES_QTYPE_Q4_0, 2, {D, NV, 1}, 0},
    };
    for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++) {
        if (ts[i].naming && ts[i].naming != (split ? SPLIT : MERGED)) continue;
        uint64_t nb = es_qtype_row_bytes(ts[i].type, ts[i].ne[0]) * (uint64_t)ts[i].ne[1] *
                      (uint64_t)ts[i].ne[2];
        if (nb > sizeof(data)) return 1;
        err |= check(es_gguf_writer_add_tensor(w, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].ne,
                                               data, nb));
    }
    return err | write_file(w, dir, "corpus-model",
                            split ? "tiny_olmoe_split_experts.gguf" : "tiny_olmoe.gguf");
}

static int bpe_vocab(const char *dir)
{
    es_gguf_writer *w;
    if (check(es_gguf_writer_create(&w))) return 1;
    int err = check(es_gguf_writer_set_str(w, "general.architecture", "olmoe"));
    err |= set_bpe_vocab(w, 300);
    return err | write_file(w, dir, "corpus-model", "vocab_bpe.gguf");
}

/* SentencePiece: <unk> <s> </s>, the 256 <0xXX> byte tokens, then pieces with scores. */
static int spm_vocab(const char *dir)
{
    static const char *const pieces[] = {"\xE2\x96\x81", "a", "b", "c", "ab", "\xE2\x96\x81" "a",
                                         "\xE2\x96\x81" "ab", "\xE2\x96\x81the", "t", "h", "e",
                                         "th", "he", "\xE6\x88\x91", "<|user|>"};
    enum { NP = sizeof(pieces) / sizeof(pieces[0]), N = 3 + 256 + NP };
    static char bytes[256][8];
    const char *toks[N];
    int32_t types[N];
    float scores[N];
    toks[0] = "<unk>", toks[1] = "<s>", toks[2] = "</s>";
    types[0] = 2, types[1] = 3, types[2] = 3;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof(bytes[b]), "<0x%02X>", b);
        toks[3 + b] = bytes[b];
        types[3 + b] = 6;
    }
    for (int i = 0; i < NP; i++) {
        toks[259 + i] = pieces[i];
        types[259 + i] = i == NP - 1 ? 4 : 1;
    }
    for (int i = 0; i < N; i++)
        scores[i] = -(float)i;
    es_gguf_writer *w;
    if (check(es_gguf_writer_create(&w))) return 1;
    int err = check(es_gguf_writer_set_str(w, "general.architecture", "olmoe"));
    err |= check(es_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama"));
    err |= check(es_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, N));
    err |= check(es_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", ES_GGUF_INT32, types, N));
    err |= check(es_gguf_writer_set_arr(w, "tokenizer.ggml.scores", ES_GGUF_FLOAT32, scores, N));
    err |= check(es_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0));
    err |= check(es_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", true));
    return err | write_file(w, dir, "corpus-model", "vocab_spm.gguf");
}

/* Texts for fuzz_tok: selector byte, then the text. */
static int tok_texts(const char *dir)
{
    static const char *const texts[] = {
        "Hello world's 12345 !!\n\n  x",
        "\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8 apple \xF0\x9F\x98\x81 \xC2\x85 \xE3\x80\x80 'll",
        "<|endoftext|>a<tool> b <s></s>",
        "\xFF\xFE\xED\xA0\x80 \xC0\x80 \xF4\x90\x80\x80 tail",
        "   \t\r\n 333333 'S 'Re \xE2\x96\x81the",
    };
    int err = 0;
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/corpus-tok/text%zu", dir, i);
        FILE *f = fopen(path, "wb");
        unsigned char sel = (unsigned char)(i * 37 + 3);
        if (!f || fwrite(&sel, 1, 1, f) != 1 || fputs(texts[i], f) < 0 || fclose(f) != 0) {
            fprintf(stderr, "fuzz_seeds: cannot write %s\n", path);
            err = 1;
        }
    }
    return err;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_seeds DIR   (writes DIR/corpus-model/ and DIR/corpus-tok/)\n");
        return 2;
    }
    int err = tiny_model(argv[1], false);
    err |= tiny_model(argv[1], true);
    err |= bpe_vocab(argv[1]);
    err |= spm_vocab(argv[1]);
    err |= tok_texts(argv[1]);
    return err ? 1 : 0;
}
