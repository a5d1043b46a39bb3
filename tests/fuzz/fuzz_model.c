/*
 * libFuzzer harness for es_model_open on whole files: the GGUF reader, the hyperparameter and
 * tensor checks of the model loader and the tokenizer builder. An input must be refused with an
 * error (and no handle), or open into a model whose tokenizer encodes a few fixed texts into
 * in-range ids and renders every token. Build and run:
 *   make fuzz && build-fuzz/fuzz_model -max_total_time=60 -dict=tests/fuzz/model.dict \
 *       -rss_limit_mb=2048 -timeout=10 NEW_DIR tests/fuzz/corpus-model
 *
 * Byte flips rarely get past the GGUF checks, so a custom mutator edits the metadata instead,
 * half of the time: it parses the input, copies every key and tensor through the GGUF writer
 * with one change (a hyperparameter, a token text, a token type, a merge, the tokenizer kind or
 * pre-tokenizer name, a key or tensor dropped, a tensor renamed or its type changed) and hands
 * the rewritten file back. Inputs that do not parse get libFuzzer's own byte mutations.
 * Each input is also packed (es_pack: the writer reads the expert tensors of either naming),
 * and a pack that is written must open.
 */
#include "estream.h"
#include "gguf/gguf.h"
#include "quant/qtypes.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);

static int g_fd = -1;        /* memfd the input is written to, opened by path */
static char g_path[64];      /* "/proc/self/fd/N" */
static char g_tmp[256];      /* file the mutator's writer writes to */
static char g_pack[256];     /* the pack of an input */
static volatile uint64_t sink;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    setenv("ESTREAM_LOG", "0", 0); /* warnings about odd vocabularies: noise here */
    g_fd = memfd_create("fuzz_model", 0);
    if (g_fd < 0) abort();
    snprintf(g_path, sizeof(g_path), "/proc/self/fd/%d", g_fd);
    const char *tmp = getenv("TMPDIR");
    snprintf(g_tmp, sizeof(g_tmp), "%s/fuzz_model.%d.gguf", tmp && *tmp ? tmp : "/tmp",
             (int)getpid());
    snprintf(g_pack, sizeof(g_pack), "%s/fuzz_model.%d.pack", tmp && *tmp ? tmp : "/tmp",
             (int)getpid());
    return 0;
}

static void use_model(const es_model *m)
{
    static const char *const texts[] = {
        "Hello world's 123 !!\n\n",
        "\xE6\x88\x91 \xF0\x9F\x98\x81 \xFF\xC0\x80 <|endoftext|><s></s><tool>",
        " \xE2\x96\x81 ab  the",
    };
    int n_vocab = es_model_n_vocab(m);
    if (n_vocab <= 0) abort();
    int32_t ids[512];
    uint64_t sum = (uint64_t)es_model_n_ctx(m) + (uint64_t)es_model_n_layer(m);
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
        for (int flags = 0; flags < 4; flags++) {
            size_t n = 0;
            es_status st = es_tokenize(m, texts[i], strlen(texts[i]), flags & 1, flags & 2, ids,
                                       sizeof(ids) / sizeof(ids[0]), &n);
            if (st != ES_OK) continue; /* e.g. too many ids for the buffer */
            for (size_t k = 0; k < n; k++) {
                if (ids[k] < 0 || ids[k] >= n_vocab) abort();
                size_t len;
                const char *p = es_token_piece(m, ids[k], &len);
                if (!p) abort();
                if (len) sum += (uint8_t)p[0] + (uint8_t)p[len - 1];
            }
        }
    for (int32_t id = 0; id < n_vocab; id++) {
        size_t len;
        const char *p = es_token_piece(m, id, &len);
        if (!p) abort();
        if (len) sum += (uint8_t)p[len - 1];
    }
    if (es_token_piece(m, n_vocab, NULL) || es_token_piece(m, -1, NULL)) abort();
    sink += sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (ftruncate(g_fd, 0) != 0 || pwrite(g_fd, data, size, 0) != (ssize_t)size) abort();
    static const unsigned flags[] = {0, ES_OPEN_VOCAB_ONLY};
    bool opened = false; /* in full */
    for (size_t f = 0; f < 2; f++) {
        es_model *m = (es_model *)1;
        es_status st = es_model_open(g_path, flags[f], &m);
        if (st != ES_OK) {
            if (m) abort(); /* a failed open must not hand out a handle */
            if (!*es_last_error()) abort(); /* and must say why */
            continue;
        }
        opened |= flags[f] == 0;
        use_model(m);
        es_model_close(m);
    }
    if (es_pack(g_path, g_pack, NULL, NULL) != ES_OK) {
        if (!*es_last_error()) abort(); /* a refusal says why */
        return 0;
    }
    es_model *m = (es_model *)1;
    if (es_model_open(g_pack, 0, &m) == ES_OK)
        es_model_close(m);
    else if (m || !*es_last_error() || opened) /* the pack of a model that opens opens too */
        abort();
    unlink(g_pack);
    return 0;
}

/* ---- the metadata mutator ---- */

typedef struct rng {
    uint64_t s;
} rng;
static uint64_t next(rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static uint64_t below(rng *r, uint64_t n) { return n ? next(r) % n : 0; }

static const char *const int_keys[] = {
    "olmoe.context_length", "olmoe.embedding_length", "olmoe.block_count",
    "olmoe.feed_forward_length", "olmoe.expert_feed_forward_length", "olmoe.attention.head_count",
    "olmoe.attention.head_count_kv", "olmoe.expert_count", "olmoe.expert_used_count",
    "olmoe.rope.dimension_count", "olmoe.attention.key_length", "olmoe.attention.value_length",
    "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id", "general.alignment",
};
static const char *const float_keys[] = {"olmoe.rope.freq_base",
                                         "olmoe.attention.layer_norm_rms_epsilon",
                                         "olmoe.rope.scaling.factor"};
static const char *const bool_keys[] = {"tokenizer.ggml.add_bos_token",
                                        "tokenizer.ggml.add_eos_token",
                                        "tokenizer.ggml.add_space_prefix"};
static const char *const str_values[][2] = {
    {"tokenizer.ggml.model", "gpt2"},      {"tokenizer.ggml.model", "llama"},
    {"tokenizer.ggml.model", "bert"},      {"tokenizer.ggml.pre", "default"},
    {"tokenizer.ggml.pre", "llama3"},      {"tokenizer.ggml.pre", "gpt-2"},
    {"tokenizer.ggml.pre", "qwen2"},       {"tokenizer.ggml.pre", "deepseek-llm"},
    {"tokenizer.ggml.pre", "deepseek-coder"}, {"tokenizer.ggml.pre", "deepseek-v3"},
    {"tokenizer.ggml.pre", "gpt-4o"},      {"tokenizer.ggml.pre", "falcon"},
    {"tokenizer.ggml.pre", "starcoder"},   {"tokenizer.ggml.pre", "dbrx"},
    {"general.architecture", "olmoe"},     {"general.architecture", "mixtral"},
    {"general.name", "Phi-3 mini"},        {"general.name", "modern-bert"},
};
/* Texts a token may be replaced by (besides other tokens, empty and random bytes). */
static const char *const tok_texts[] = {"<|endoftext|>", "<s>", "</s>", "<unk>", "<0x0A>",
                                        "<0xZZ>", "\xE2\x96\x81", "\xC4\xA0", "<|eot_id|>",
                                        "<|channel|>", "<|end|>", "<|call|>", "<|return|>",
                                        "<mask>", "a b", " ", "\xFF\xFE"};

static int64_t interesting(rng *r)
{
    static const int64_t v[] = {0, 1, 2, 3, 4, 7, 8, 16, 31, 32, 33, 64, 255, 256, 300,
                                1023, 1024, 65535, 65536, 1 << 24, INT32_MAX, -1, -2};
    if (below(r, 4) == 0) return (int64_t)below(r, 200);
    return v[below(r, sizeof(v) / sizeof(v[0]))];
}

/* Rewrites a string array key with element i replaced (op 0), removed (op 1) or a copy of it
 * appended (op 2). */
static es_status edit_str_array(es_gguf_writer *w, const es_gguf *g, const char *key, rng *r)
{
    es_gguf_type et;
    uint64_t n;
    if (!es_gguf_get_arr(g, key, &et, &n) || et != ES_GGUF_STRING || n == 0 || n > 1000000)
        return ES_OK;
    const char **s = malloc((n + 1) * sizeof(*s));
    size_t *l = malloc((n + 1) * sizeof(*l));
    char rnd[64];
    if (!s || !l) {
        free(s);
        free(l);
        return ES_E_NOMEM;
    }
    for (uint64_t i = 0; i < n; i++) {
        es_str e = es_gguf_arr_str(g, key, i);
        s[i] = e.ptr ? e.ptr : "";
        l[i] = e.len;
    }
    uint64_t i = below(r, n), m = n;
    switch (below(r, 3)) {
    case 0:
        switch (below(r, 4)) {
        case 0: { /* another element's text: a duplicate */
            uint64_t j = below(r, n);
            s[i] = s[j], l[i] = l[j];
            break;
        }
        case 1: s[i] = "", l[i] = 0; break;
        case 2: {
            size_t k = 1 + below(r, sizeof(rnd));
            for (size_t q = 0; q < k; q++)
                rnd[q] = (char)next(r);
            s[i] = rnd, l[i] = k;
            break;
        }
        default: {
            const char *t = tok_texts[below(r, sizeof(tok_texts) / sizeof(tok_texts[0]))];
            s[i] = t, l[i] = strlen(t);
        }
        }
        break;
    case 1:
        memmove(s + i, s + i + 1, (n - i - 1) * sizeof(*s));
        memmove(l + i, l + i + 1, (n - i - 1) * sizeof(*l));
        m = n - 1;
        break;
    default:
        s[n] = s[i], l[n] = l[i];
        m = n + 1;
    }
    es_status st = es_gguf_writer_set_arr_str(w, key, s, l, m);
    free(s);
    free(l);
    return st;
}

/* Sets element i of an int32 array key to a value that matters for token types. */
static es_status edit_types(es_gguf_writer *w, const es_gguf *g, rng *r)
{
    const char *key = "tokenizer.ggml.token_type";
    es_gguf_type et;
    uint64_t n;
    if (!es_gguf_get_arr(g, key, &et, &n) || et != ES_GGUF_INT32 || n == 0 || n > 1000000)
        return ES_OK;
    int32_t *v = malloc(n * sizeof(*v));
    if (!v) return ES_E_NOMEM;
    memcpy(v, es_gguf_arr_data(g, key), n * sizeof(*v));
    v[below(r, n)] = (int32_t)below(r, 9) - 1;
    es_status st = es_gguf_writer_set_arr(w, key, ES_GGUF_INT32, v, n - below(r, 2));
    free(v);
    return st;
}

/* Copies the tensors of g into w, dropping, renaming or retyping one of them. */
static es_status copy_tensors(es_gguf_writer *w, const es_gguf *g, rng *r, bool edit,
                              void **owned)
{
    int64_t n = es_gguf_n_tensors(g);
    int64_t pick = edit && n ? (int64_t)below(r, (uint64_t)n) : -1;
    unsigned op = (unsigned)below(r, 3);
    for (int64_t i = 0; i < n; i++) {
        const es_gguf_tensor *t = es_gguf_tensor_at(g, i);
        char name[128];
        if (t->name.len >= sizeof(name)) continue;
        memcpy(name, t->name.ptr, t->name.len);
        name[t->name.len] = 0;
        uint32_t type = t->type;
        const void *data = t->data;
        uint64_t nbytes = t->nbytes;
        if (i == pick) {
            if (op == 0) continue; /* dropped */
            if (op == 1) {         /* renamed: another layer, or another expert's tensor */
                char *b = strstr(name, "blk.");
                const size_t len = strlen(name);
                char *e = len > 9 ? name + len - 8 : NULL; /* "<digit>.weight" */
                if (e && !strcmp(e + 1, ".weight") && e[0] >= '0' && e[0] <= '8' &&
                    e[-1] == '.' && below(r, 2))
                    e[0]++;
                else if (b && b[4] >= '0' && b[4] <= '8') b[4]++;
                else if (t->name.len + 2 < sizeof(name)) memcpy(name, "x.", 2);
            } else { /* another weight type; the data is zeros of the new size */
                static const uint32_t types[] = {ES_QTYPE_F32, ES_QTYPE_F16, ES_QTYPE_Q4_0,
                                                 ES_QTYPE_Q8_0, ES_QTYPE_Q4_K, ES_QTYPE_BF16};
                type = types[below(r, sizeof(types) / sizeof(types[0]))];
                size_t rb = es_qtype_row_bytes(type, t->ne[0]);
                uint64_t rows = 1;
                for (uint32_t d = 1; d < t->n_dims; d++)
                    rows *= (uint64_t)t->ne[d];
                if (rb == 0 || rows > (1u << 20) || rb * rows > (16u << 20)) {
                    type = t->type;
                } else {
                    nbytes = rb * rows;
                    *owned = calloc(1, nbytes ? nbytes : 1);
                    if (!*owned) return ES_E_NOMEM;
                    data = *owned;
                }
            }
        }
        es_status st = es_gguf_writer_add_tensor(w, name, type, t->n_dims, t->ne, data, nbytes);
        if (st != ES_OK) return st;
    }
    return ES_OK;
}

static es_status mutate_gguf(const es_gguf *g, rng *r)
{
    es_gguf_writer *w;
    void *owned = NULL;
    es_status st = es_gguf_writer_create(&w);
    if (st != ES_OK) return st;
    unsigned what = (unsigned)below(r, 10);
    if (what == 0) { /* drop one key: copy the others one by one (by full name as prefix) */
        int64_t n = es_gguf_n_kv(g), drop = (int64_t)below(r, (uint64_t)(n ? n : 1));
        char key[256];
        for (int64_t i = 0; i < n && st == ES_OK; i++) {
            es_str k = es_gguf_key(g, i);
            if (i == drop || k.len >= sizeof(key)) continue;
            memcpy(key, k.ptr, k.len);
            key[k.len] = 0;
            st = es_gguf_writer_copy_kv(w, g, key);
        }
    } else {
        st = es_gguf_writer_copy_kv(w, g, "");
    }
    if (st == ES_OK) {
        switch (what) {
        case 1:
            st = es_gguf_writer_set_u32(w, int_keys[below(r, sizeof(int_keys) / sizeof(int_keys[0]))],
                                        (uint32_t)interesting(r));
            if (st == ES_E_INVAL) st = ES_OK; /* an alignment the writer refuses */
            break;
        case 2: {
            static const float v[] = {0.0f, -1.0f, 1e-30f, 1e30f, 2.0f, 0.5f, 1e12f};
            st = es_gguf_writer_set_f32(
                w, float_keys[below(r, sizeof(float_keys) / sizeof(float_keys[0]))],
                v[below(r, sizeof(v) / sizeof(v[0]))]);
            break;
        }
        case 3:
            st = es_gguf_writer_set_bool(w, bool_keys[below(r, 3)], below(r, 2));
            break;
        case 4: {
            size_t k = below(r, sizeof(str_values) / sizeof(str_values[0]));
            st = es_gguf_writer_set_str(w, str_values[k][0], str_values[k][1]);
            break;
        }
        case 5:
        case 6: st = edit_str_array(w, g, "tokenizer.ggml.tokens", r); break;
        case 7: st = edit_str_array(w, g, "tokenizer.ggml.merges", r); break;
        case 8: st = edit_types(w, g, r); break;
        default: break; /* 0: a key dropped; 9: a tensor edited */
        }
    }
    if (st == ES_OK) st = copy_tensors(w, g, r, what == 9, &owned);
    if (st == ES_OK) st = es_gguf_writer_write(w, g_tmp);
    es_gguf_writer_destroy(w);
    free(owned);
    return st;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
    rng r = {seed};
    if (below(&r, 2) == 0) return LLVMFuzzerMutate(data, size, max_size);
    es_gguf *g;
    if (es_gguf_open_memory(data, size, "mutator", &g) != ES_OK)
        return LLVMFuzzerMutate(data, size, max_size);
    es_status st = mutate_gguf(g, &r);
    es_gguf_close(g);
    if (st != ES_OK) return LLVMFuzzerMutate(data, size, max_size);
    size_t n = 0;
    FILE *f = fopen(g_tmp, "rb");
    if (f) {
        long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
        if (len > 0 && (size_t)len <= max_size && fseek(f, 0, SEEK_SET) == 0)
            n = fread(data, 1, (size_t)len, f); /* data is overwritten only when it all fits */
        fclose(f);
    }
    unlink(g_tmp);
    return n ? n : LLVMFuzzerMutate(data, size, max_size);
}
