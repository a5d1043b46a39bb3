/*
 * libFuzzer harness for the tokenizer: arbitrary bytes through every built-in pre-tokenizer of
 * the byte-level BPE encoder and through the SentencePiece encoder. The first input byte picks
 * the tokenizer and the flags (add_special, parse_special); the rest is the text. Build and run:
 *   make fuzz && build-fuzz/fuzz_tok -max_total_time=60 -rss_limit_mb=2048 -timeout=10 \
 *       NEW_DIR tests/fuzz/corpus-tok
 *
 * The vocabularies are built once in LLVMFuzzerInitialize: estream's built-in byte-level BPE
 * (src/tok/bpe_builder.c, 512 tokens with merges) plus a CONTROL and a USER_DEFINED token, once
 * per pre-tokenizer (and once named like Phi-3, whose special tokens strip spaces); and a
 * SentencePiece vocabulary with all 256 <0xXX> byte tokens, with and without the prefix space.
 * Checked: every id is in range, decoding succeeds, and where encoding is lossless
 * (valid UTF-8; for SentencePiece also without U+2581 or special tokens)
 * decode(encode(text)) == text.
 */
#include "gguf/gguf.h"
#include "tok/bpe_builder.h"
#include "tok/tok.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct fuzz_tok {
    es_tok *tok;
    bool spm, lossless;
} fuzz_tok;

/* One per entry of bpe.c's pre-tokenizer table, plus a name it does not know. */
static const char *const pres[] = {"default",      "llama3",         "dbrx",        "gpt-2",
                                   "starcoder",    "falcon",         "qwen2",       "deepseek-llm",
                                   "deepseek-coder", "deepseek-v3",  "gpt-4o",      "no-such-pre"};
enum { N_PRE = sizeof(pres) / sizeof(pres[0]), N_TOK = N_PRE + 3 };
static fuzz_tok g_tok[N_TOK];

static void die(const char *what)
{
    fprintf(stderr, "fuzz_tok: %s: %s\n", what, es_last_error());
    abort();
}

static es_tok *open_vocab(es_gguf_writer *w)
{
    char path[256];
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof(path), "%s/fuzz_tok.%d.gguf", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    if (es_gguf_writer_write(w, path) != ES_OK) die("write vocabulary");
    es_gguf_writer_destroy(w);
    es_gguf *g;
    es_tok *t;
    if (es_gguf_open(path, &g) != ES_OK) die("open vocabulary");
    if (es_tok_create(g, &t) != ES_OK) die("build tokenizer");
    es_gguf_close(g);
    unlink(path);
    return t;
}

static es_tok *bpe_tok(const char *pre, const char *name)
{
    enum { N = 512 };
    es_bpe_vocab v;
    if (es_bpe_vocab_build(N, &v) != ES_OK) die("es_bpe_vocab_build");
    /* The two tokens replaced by specials below are merge results: drop the merges that made
     * them, or the vocabulary would merge into text that is no token. llama.cpp (and estream)
     * then keep only the bytes of such a symbol that are one-character tokens, so the round
     * trip checked below would rightly lose bytes such as "\r" (found by this fuzzer). */
    int kept = 0;
    for (int i = 0; i < v.n_merges; i++) {
        const char *m = v.merges[i], *sp = strchr(m, ' ');
        bool makes_replaced = false;
        for (int k = N - 2; k < N && sp; k++) {
            const size_t ll = (size_t)(sp - m), tl = strlen(v.tokens[k]);
            makes_replaced |= tl == ll + strlen(sp + 1) && !memcmp(v.tokens[k], m, ll) &&
                              !strcmp(v.tokens[k] + ll, sp + 1);
        }
        if (makes_replaced)
            free(v.merges[i]);
        else
            v.merges[kept++] = v.merges[i];
    }
    v.n_merges = kept;
    free(v.tokens[N - 2]);
    free(v.tokens[N - 1]);
    v.tokens[N - 2] = strdup("<|endoftext|>");
    v.tokens[N - 1] = strdup("<tool>");
    v.types[N - 2] = ES_TOKEN_TYPE_CONTROL;
    v.types[N - 1] = ES_TOKEN_TYPE_USER_DEFINED;
    es_gguf_writer *w;
    if (!v.tokens[N - 2] || !v.tokens[N - 1] || es_gguf_writer_create(&w) != ES_OK ||
        es_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2") != ES_OK ||
        es_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre) != ES_OK ||
        (name && es_gguf_writer_set_str(w, "general.name", name) != ES_OK) ||
        es_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tokens,
                                   NULL, N) != ES_OK ||
        es_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", ES_GGUF_INT32, v.types, N) !=
            ES_OK ||
        es_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v.merges,
                                   NULL, (uint64_t)v.n_merges) != ES_OK ||
        es_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", N - 2) != ES_OK ||
        es_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", N - 2) != ES_OK)
        die("bpe vocabulary");
    es_bpe_vocab_free(&v);
    return open_vocab(w);
}

/* <unk> <s> </s>, <0x00>..<0xFF>, then pieces with decreasing scores and a user token. */
static es_tok *spm_tok(bool space_prefix)
{
    static const char *const pieces[] = {
        "\xE2\x96\x81", "a", "b", "c", "ab", "\xE2\x96\x81" "a", "\xE2\x96\x81" "ab",
        "\xE2\x96\x81the", "t", "h", "e", "th", "he", "the", "\xE6\x88\x91", "\xE2\x96\x81\xE2\x96\x81",
        "<|user|>"};
    enum { NP = sizeof(pieces) / sizeof(pieces[0]), N = 3 + 256 + NP };
    static char bytes[256][8];
    const char *toks[N];
    int32_t types[N];
    float scores[N];
    toks[0] = "<unk>", toks[1] = "<s>", toks[2] = "</s>";
    types[0] = ES_TOKEN_TYPE_UNKNOWN, types[1] = types[2] = ES_TOKEN_TYPE_CONTROL;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof(bytes[b]), "<0x%02X>", b);
        toks[3 + b] = bytes[b];
        types[3 + b] = ES_TOKEN_TYPE_BYTE;
    }
    for (int i = 0; i < NP; i++) {
        toks[259 + i] = pieces[i];
        types[259 + i] = i == NP - 1 ? ES_TOKEN_TYPE_USER_DEFINED : ES_TOKEN_TYPE_NORMAL;
    }
    for (int i = 0; i < N; i++)
        scores[i] = (float)((i * 7) % 13) - (float)i * 0.01f; /* ties and non-monotonic order */
    es_gguf_writer *w;
    if (es_gguf_writer_create(&w) != ES_OK ||
        es_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama") != ES_OK ||
        es_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, N) != ES_OK ||
        es_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", ES_GGUF_INT32, types, N) != ES_OK ||
        es_gguf_writer_set_arr(w, "tokenizer.ggml.scores", ES_GGUF_FLOAT32, scores, N) != ES_OK ||
        es_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", space_prefix) != ES_OK)
        die("spm vocabulary");
    return open_vocab(w);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    setenv("ESTREAM_LOG", "0", 0); /* warnings about odd vocabularies: noise here */
    for (int i = 0; i < N_PRE; i++)
        g_tok[i] = (fuzz_tok){bpe_tok(pres[i], NULL), false, true};
    g_tok[N_PRE] = (fuzz_tok){bpe_tok("gpt-2", "Phi-3 mini"), false, false}; /* strips spaces */
    g_tok[N_PRE + 1] = (fuzz_tok){spm_tok(true), true, true};
    g_tok[N_PRE + 2] = (fuzz_tok){spm_tok(false), true, true};
    return 0;
}

/* Strict UTF-8 (no overlong forms, surrogates or code points past U+10FFFF): the input on which
 * byte-level BPE is lossless. */
static bool valid_utf8(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!l || l > n - i) return false;
        uint32_t cp = l == 1 ? c : c & (0x7F >> l);
        for (size_t k = 1; k < l; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[l] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += l;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    const fuzz_tok *ft = &g_tok[data[0] % N_TOK];
    bool add_special = (data[0] / N_TOK) & 1, parse_special = (data[0] / N_TOK) & 2;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t *ids;
    size_t n;
    if (es_tok_encode(ft->tok, text, len, add_special, parse_special, &ids, &n) != ES_OK)
        die("encode"); /* inputs of a few KB: no limit can be hit */
    int32_t nv = es_tok_n_vocab(ft->tok);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= nv) abort();
    char *back;
    size_t blen;
    if (es_tok_decode(ft->tok, ids, n, &back, &blen) != ES_OK) die("decode");
    /* Invalid UTF-8 is not lossless in either (as in llama.cpp): byte-level BPE turns bad bytes
     * into U+FFFD, SentencePiece cuts symbols by lead byte, so a bad lead byte can swallow part
     * of the U+2581 that stands for a space, which then comes back as its three bytes. */
    bool check = ft->lossless && !add_special && valid_utf8((const uint8_t *)text, len);
    if (ft->spm)
        check = check && !parse_special && !memmem(text, len, "\xE2\x96\x81", 3) &&
                !memmem(text, len, "<|user|>", 8);
    if (check && (blen != len || memcmp(back, text, len) != 0)) {
        fprintf(stderr, "fuzz_tok: round trip differs (%zu bytes in, %zu out)\n", len, blen);
        abort();
    }
    free(back);
    free(ids);
    return 0;
}
