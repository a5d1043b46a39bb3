/*
 * Synthetic models of every family in model/arch.h: llama.cpp's tensor names, shapes and
 * metadata keys for the architecture with random weights, so that estream and llama.cpp can run
 * the very same file. Each preset names its family; the family decides which tensors there are
 * (q/k norms, a tied output head).
 *
 * DESIGN: every tensor is generated row by row at write time from (seed, tensor, row), so a file
 * of any size streams to disk in constant memory and the bytes do not depend on write order.
 * Scales keep activations finite through every layer: a shared direction c is added to every
 * token embedding, and router row e gets bias_e * c with bias_e = u_e^3 (u_e uniform), so a few
 * experts take several times the mean share of routes and some take few, as in trained models.
 */
#include "estream.h"
#include "estream_tools.h"
#include "gguf/gguf.h"
#include "model/arch.h"
#include "model/synth_presets.h"
#include "quant/qtypes.h"
#include "tok/bpe_builder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>


/* ---- deterministic random numbers ---- */
static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
/* Approximately standard normal: Irwin-Hall sum of four 16-bit uniforms, centred and scaled. */
static inline float normal(uint64_t *s)
{
    uint64_t r = mix64(*s += 0x9e3779b97f4a7c15ull);
    float sum = (float)(r & 0xffff) + (float)((r >> 16) & 0xffff) + (float)((r >> 32) & 0xffff) +
                (float)(r >> 48);
    return (sum / 65535.0f - 2.0f) * 1.7320508f; /* sqrt(3): var of the sum of 4 U(0,1) = 1/3 */
}
static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h;
}

enum gen_kind { GEN_NORMAL, GEN_NORM_WEIGHT, GEN_EMBED, GEN_ROUTER, GEN_VALUES };

typedef struct gen {
    char name[64];
    enum gen_kind kind;
    uint32_t type;
    int n_dims;
    int64_t ne[3];
    float scale;
    uint64_t seed;
    const float *common; /* [cols] shared direction c (embed, router) */
    const float *bias;   /* [rows] router bias per expert */
    const float *values; /* GEN_VALUES: the one row's values */
    int n_parts;         /* > 1: rows [part_end[i-1], part_end[i]) are those of the tensor
                          * part_seed[i] seeds (a fused q/k/v: the three tensors' rows) */
    uint64_t part_seed[3];
    int64_t part_end[3];
    float *row;          /* scratch: one row of floats */
    uint8_t *qrow;       /* scratch: one quantized row */
    int64_t cached_row;  /* row currently in qrow, -1 none */
} gen;

/* cols values of row r of the tensor seed seeds. */
static void gen_values(const gen *g, uint64_t seed, int64_t r, int64_t cols, float *out)
{
    uint64_t s = mix64(seed ^ mix64((uint64_t)r + 1));
    for (int64_t k = 0; k < cols; k++) {
        float z = normal(&s);
        switch (g->kind) {
        case GEN_NORMAL: out[k] = g->scale * z; break;
        case GEN_NORM_WEIGHT: out[k] = 1.0f + 0.1f * z; break;
        case GEN_EMBED: out[k] = g->scale * (z + 0.8f * g->common[k]); break;
        case GEN_ROUTER: out[k] = g->scale * z; break;
        case GEN_VALUES: out[k] = g->values[k]; break;
        }
    }
}

static void gen_row(const gen *g, int64_t r, float *out)
{
    const int64_t cols = g->ne[0];
    int64_t p0 = 0; /* where part i starts: a row, or in a fused bias (one row) a column */
    const bool bias = g->ne[1] * g->ne[2] == 1;
    for (int i = 0; i < g->n_parts; p0 = g->part_end[i++]) {
        if (bias) {
            gen_values(g, g->part_seed[i], 0, g->part_end[i] - p0, out + p0);
        } else if (r < g->part_end[i]) {
            gen_values(g, g->part_seed[i], r - p0, cols, out);
            return;
        }
    }
    if (g->n_parts) return;
    gen_values(g, g->seed, r, cols, out);
    if (g->kind == GEN_ROUTER) {
        /* Router row e: random, minus its component along c, plus bias_e c. Every token's
         * hidden state leans along c, so without the projection each expert would get a random
         * static preference (and some none at all); with it the preference is bias_e alone. */
        double proj = 0.0;
        for (int64_t k = 0; k < cols; k++) proj += (double)out[k] * g->common[k];
        const float p = (float)(proj / (double)cols); /* |c|^2 = cols (entries are +-1) */
        for (int64_t k = 0; k < cols; k++) out[k] += (g->bias[r] - p) * g->common[k];
    }
}

static es_status gen_fill(void *user, uint64_t offset, void *buf, size_t len)
{
    gen *g = user;
    const size_t rb = es_qtype_row_bytes(g->type, g->ne[0]);
    uint8_t *dst = buf;
    while (len > 0) {
        const int64_t r = (int64_t)(offset / rb);
        const size_t in_row = (size_t)(offset % rb);
        if (r != g->cached_row) {
            gen_row(g, r, g->row);
            if (!es_quantize_row(g->type, g->row, g->qrow, g->ne[0]))
                return es_fail(ES_E_UNSUPPORTED, "cannot quantize to %s", es_qtype_name(g->type));
            g->cached_row = r;
        }
        const size_t take = es_min_size(rb - in_row, len);
        memcpy(dst, g->qrow + in_row, take);
        dst += take;
        offset += take;
        len -= take;
    }
    return ES_OK;
}

typedef struct synth_ctx {
    gen *gens;
    int n_gens, cap_gens;
    float *common;  /* [n_embd] */
    float *bias;    /* [n_layer][n_expert] */
    float *rope_factors; /* [n_rot/2] llama3's RoPE frequency factors, or NULL */
    float *rope_long;    /* [n_rot] LongRoPE's short factors, then its long ones, or NULL */
} synth_ctx;

/* llama3's RoPE frequency factors as llama.cpp's converter computes them (conversion/llama.py):
 * 1 for wavelengths under orig / high, factor over orig / low, smoothly between. */
static void llama3_factors(const es_synth_preset *p, int n_rot, float *out)
{
    const double lo_wl = p->l3_orig_ctx / p->l3_low, hi_wl = p->l3_orig_ctx / p->l3_high;
    for (int i = 0; i < n_rot / 2; i++) {
        const double freq = 1.0 / pow(p->rope_base, 2.0 * i / n_rot);
        const double wl = 2.0 * 3.14159265358979323846 / freq;
        if (wl < hi_wl) {
            out[i] = 1.0f;
        } else if (wl > lo_wl) {
            out[i] = p->l3_factor;
        } else {
            const double smooth = (p->l3_orig_ctx / wl - p->l3_low) / (p->l3_high - p->l3_low);
            out[i] = (float)(1.0 / ((1.0 - smooth) / p->l3_factor + smooth));
        }
    }
}

/* LongRoPE's factors for a synthetic model, n_rot/2 of each: short ones near 1 (1 to 1.35),
 * long ones growing with the wavelength to 1 + half^2 / 2, as trained sets do (Phi-3.5's run
 * from about 1 to 60 over 64 pairs). */
static void longrope_factors(int n_rot, float *short_f, float *long_f)
{
    const int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        short_f[i] = 1.0f + 0.05f * (float)i;
        long_f[i] = 1.0f + 0.5f * (float)(i * i);
    }
}

/* True if the preset's layer il has experts (arch.h: dense lead, interleave). */
static bool synth_has_experts(const es_synth_preset *p, int il)
{
    if (il >= p->n_layer && strcmp(p->arch, "exaone-moe") == 0)
        return false; /* its loader wants a dense FFN in the multi-token-prediction blocks */
    return il >= p->n_dense_lead && (p->moe_step <= 1 || (il + 1) % p->moe_step == 0);
}

static gen *add_gen(synth_ctx *c, const char *name, enum gen_kind kind, uint32_t type, int n_dims,
                    int64_t ne0, int64_t ne1, int64_t ne2, float scale, uint64_t seed)
{
    if (c->n_gens == c->cap_gens) return NULL;
    gen *g = &c->gens[c->n_gens++];
    snprintf(g->name, sizeof(g->name), "%s", name);
    g->kind = kind;
    g->type = type;
    g->n_dims = n_dims;
    g->ne[0] = ne0;
    g->ne[1] = ne1;
    g->ne[2] = ne2;
    g->scale = scale;
    g->seed = mix64(seed ^ hash_str(name));
    g->cached_row = -1;
    g->row = malloc(sizeof(float) * (size_t)ne0);
    g->qrow = malloc(es_qtype_row_bytes(ES_QTYPE_F32, ne0));
    return g->row && g->qrow ? g : NULL;
}

/* Makes g (blk.<il>.attn_qkv.<kind>) the q, k and v tensors of that layer end to end: rows (or
 * a bias's columns) [0, dq) are attn_q's, then dkv of attn_k's and of attn_v's, the very values
 * synth writes into those three tensors when it writes them apart. */
static void fuse_qkv(gen *g, int il, const char *kind, int64_t dq, int64_t dkv, uint64_t seed)
{
    static const char *const parts[3] = {"attn_q", "attn_k", "attn_v"};
    const int64_t ends[3] = {dq, dq + dkv, dq + 2 * dkv};
    char name[64];
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof(name), "blk.%d.%s.%s", il, parts[i], kind);
        g->part_seed[i] = mix64(seed ^ hash_str(name));
        g->part_end[i] = ends[i];
    }
    g->n_parts = 3;
}

static es_status set_tokenizer_builtin(es_gguf_writer *w, int n_vocab, const char *pre)
{
    es_bpe_vocab v;
    ES_TRY(es_bpe_vocab_build(n_vocab, &v));
    es_status st = es_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    if (!st) st = es_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    if (!st) st = es_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tokens, NULL, (uint64_t)v.n_tokens);
    if (!st) st = es_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", ES_GGUF_INT32, v.types, (uint64_t)v.n_tokens);
    if (!st) st = es_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v.merges, NULL, (uint64_t)v.n_merges);
    if (!st) st = es_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v.bos_id);
    if (!st) st = es_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v.eos_id);
    if (!st) st = es_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    if (!st) st = es_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);
    es_bpe_vocab_free(&v);
    return st;
}

/* Copies the tokenizer of a vocabulary GGUF; pads its token list with unused tokens up to
 * *n_vocab, or raises *n_vocab to its size. */
static es_status set_tokenizer_from(es_gguf_writer *w, const char *path, int *n_vocab)
{
    es_gguf *g = NULL;
    ES_TRY(es_gguf_open(path, &g));
    es_status st = ES_OK;
    char **toks = NULL;
    int32_t *types = NULL;
    float *scores = NULL;
    es_gguf_type et;
    uint64_t n = 0;
    if (!es_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n) || et != ES_GGUF_STRING || n == 0) {
        st = es_fail(ES_E_FORMAT, "%s: no tokenizer.ggml.tokens string array", path);
        goto done;
    }
    if (n > (1u << 22)) { st = es_fail(ES_E_FORMAT, "%s: too many tokens", path); goto done; }
    if ((st = es_gguf_writer_copy_kv(w, g, "tokenizer.")) != ES_OK) goto done;
    if ((int64_t)n >= *n_vocab) {
        *n_vocab = (int)n;
        goto done;
    }
    const uint64_t nv = (uint64_t)*n_vocab;
    toks = calloc(nv, sizeof(char *));
    types = calloc(nv, sizeof(int32_t));
    scores = calloc(nv, sizeof(float));
    if (!toks || !types || !scores) { st = es_fail(ES_E_NOMEM, "out of memory"); goto done; }
    es_gguf_type tt, stt;
    uint64_t ntt = 0, nst = 0;
    const bool has_types = es_gguf_get_arr(g, "tokenizer.ggml.token_type", &tt, &ntt) && tt == ES_GGUF_INT32 && ntt == n;
    const bool has_scores = es_gguf_get_arr(g, "tokenizer.ggml.scores", &stt, &nst) && stt == ES_GGUF_FLOAT32 && nst == n;
    for (uint64_t i = 0; i < nv; i++) {
        if (i < n) {
            es_str s = es_gguf_arr_str(g, "tokenizer.ggml.tokens", i);
            toks[i] = strndup(s.ptr, s.len);
            types[i] = ES_TOKEN_TYPE_NORMAL;
            if (has_types) memcpy(&types[i], (const uint8_t *)es_gguf_arr_data(g, "tokenizer.ggml.token_type") + 4 * i, 4);
            if (has_scores) memcpy(&scores[i], (const uint8_t *)es_gguf_arr_data(g, "tokenizer.ggml.scores") + 4 * i, 4);
        } else {
            char buf[40];
            snprintf(buf, sizeof(buf), "<|estream_pad_%llu|>", (unsigned long long)i);
            toks[i] = strdup(buf);
            types[i] = ES_TOKEN_TYPE_UNUSED;
        }
        if (!toks[i]) { st = es_fail(ES_E_NOMEM, "out of memory"); goto done; }
    }
    st = es_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, NULL, nv);
    if (!st) st = es_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", ES_GGUF_INT32, types, nv);
    if (!st && has_scores) st = es_gguf_writer_set_arr(w, "tokenizer.ggml.scores", ES_GGUF_FLOAT32, scores, nv);
done:
    if (toks)
        for (uint64_t i = 0; i < (uint64_t)*n_vocab; i++) free(toks[i]);
    free(toks);
    free(types);
    free(scores);
    es_gguf_close(g);
    return st;
}

/* The weight type of every matrix (*out) and of the 3-D ones, the experts (*exp): one type, or
 * for mxfp4 llama-quantize's MXFP4_MOE mix (3-D tensors MXFP4, every other matrix Q8_0). */
static es_status parse_type(const char *name, uint32_t *out, uint32_t *exp)
{
    es_qtype t;
    if (!name) name = "f32";
    if (!es_qtype_parse(name, &t) ||
        (t != ES_QTYPE_F32 && t != ES_QTYPE_F16 && t != ES_QTYPE_Q8_0 && t != ES_QTYPE_Q4_0 &&
         t != ES_QTYPE_Q4_1 && t != ES_QTYPE_Q5_1 && t != ES_QTYPE_MXFP4))
        return es_fail(ES_E_INVAL,
                       "unknown weight type '%s' (use f32, f16, q8_0, q4_0, q4_1, q5_1 or mxfp4)",
                       name);
    *exp = t;
    *out = t == ES_QTYPE_MXFP4 ? ES_QTYPE_Q8_0 : t;
    return ES_OK;
}

/* llama.cpp's general.file_type (llama_ftype) for the main weight type. */
static uint32_t file_type_of(uint32_t t)
{
    switch (t) {
    case ES_QTYPE_F32: return 0;
    case ES_QTYPE_F16: return 1;
    case ES_QTYPE_Q4_0: return 2;
    case ES_QTYPE_Q4_1: return 3;
    case ES_QTYPE_Q5_1: return 9;
    case ES_QTYPE_Q8_0: return 7;
    case ES_QTYPE_MXFP4: return 38; /* MXFP4_MOE */
    default: return 0;
    }
}

/* Writes "<arch>.<key>" = v. */
static es_status set_arch_u32(es_gguf_writer *w, const char *arch, const char *key, uint32_t v)
{
    char full[96];
    snprintf(full, sizeof(full), "%s.%s", arch, key);
    return es_gguf_writer_set_u32(w, full, v);
}
static es_status set_arch_f32(es_gguf_writer *w, const char *arch, const char *key, float v)
{
    char full[96];
    snprintf(full, sizeof(full), "%s.%s", arch, key);
    return es_gguf_writer_set_f32(w, full, v);
}

/* MLA's keys as llama.cpp's converter writes them (MQA over the latent row: key_length is the
 * latent plus the rope part, value_length the latent; the per-head sizes in the _mla keys). */
static es_status set_mla(es_gguf_writer *w, const es_synth_preset *p)
{
    const char *a = p->arch;
    es_status st = ES_OK;
    if (p->q_lora || (p->n_layer != 26 && p->n_layer != 27))
        st = set_arch_u32(w, a, "attention.q_lora_rank", (uint32_t)p->q_lora);
    if (!st) st = set_arch_u32(w, a, "attention.kv_lora_rank", (uint32_t)p->kv_lora);
    if (p->mla_joined) {
        if (!st) st = set_arch_u32(w, a, "attention.key_length", (uint32_t)p->n_embd_head);
        if (!st) st = set_arch_u32(w, a, "attention.value_length", (uint32_t)p->v_head);
    } else {
        if (!st) st = set_arch_u32(w, a, "attention.key_length", (uint32_t)(p->kv_lora + p->qk_rope));
        if (!st) st = set_arch_u32(w, a, "attention.value_length", (uint32_t)p->kv_lora);
        if (!st) st = set_arch_u32(w, a, "attention.key_length_mla", (uint32_t)p->n_embd_head);
        if (!st) st = set_arch_u32(w, a, "attention.value_length_mla", (uint32_t)p->v_head);
    }
    if (!st) st = set_arch_u32(w, a, "rope.dimension_count", (uint32_t)p->qk_rope);
    return st;
}

/* YaRN rope scaling as converters write it (the log multiplier only where it is set). */
static es_status set_yarn(es_gguf_writer *w, const es_synth_preset *p)
{
    const char *a = p->arch;
    char key[96];
    snprintf(key, sizeof(key), "%s.rope.scaling.type", a);
    es_status st = es_gguf_writer_set_str(w, key, "yarn");
    if (!st) st = set_arch_f32(w, a, "rope.scaling.factor", p->yarn_factor);
    if (!st) st = set_arch_u32(w, a, "rope.scaling.original_context_length", (uint32_t)p->yarn_orig_ctx);
    if (!st && p->yarn_mscale_all != 0.0f)
        st = set_arch_f32(w, a, "rope.scaling.yarn_log_multiplier", 0.1f * p->yarn_mscale_all);
    return st;
}

/* The metadata llama.cpp's loader reads for the preset's architecture. */
static es_status set_hparams(es_gguf_writer *w, const es_synth_preset *p, uint32_t wtype)
{
    const char *a = p->arch;
    char name[96];
    snprintf(name, sizeof(name), "estream synthetic %s %s", a, p->name);
    /* llama.cpp's vocabulary loader takes Phi-3's special tokens by name where general.name says
     * "phi-3", and the built-in vocabulary has none: phi-3.5-moe is written "phi 3.5-moe" */
    char *phi = strstr(name, "phi-3");
    if (phi) phi[3] = ' ';
    es_status st = es_gguf_writer_set_str(w, "general.architecture", a);
    if (!st) st = es_gguf_writer_set_str(w, "general.name", name);
    if (!st) st = es_gguf_writer_set_u32(w, "general.file_type", file_type_of(wtype));
    if (!st) st = set_arch_u32(w, a, "context_length", (uint32_t)p->n_ctx);
    if (!st) st = set_arch_u32(w, a, "embedding_length", (uint32_t)p->n_embd);
    if (!st) st = set_arch_u32(w, a, "block_count", (uint32_t)(p->n_layer + p->n_nextn));
    if (!st && p->n_nextn) st = set_arch_u32(w, a, "nextn_predict_layers", (uint32_t)p->n_nextn);
    if (!st && p->n_rot) st = set_arch_u32(w, a, "rope.dimension_count", (uint32_t)p->n_rot);
    if (!st) st = set_arch_u32(w, a, "feed_forward_length", (uint32_t)(p->n_ff ? p->n_ff : p->n_ff_exp));
    if (!st && p->n_ff) st = set_arch_u32(w, a, "expert_feed_forward_length", (uint32_t)p->n_ff_exp);
    if (!st && p->n_dense_lead) st = set_arch_u32(w, a, "leading_dense_block_count", (uint32_t)p->n_dense_lead);
    if (!st && p->n_shared) st = set_arch_u32(w, a, "expert_shared_count", (uint32_t)p->n_shared);
    if (!st && p->weights_scale != 0.0f) st = set_arch_f32(w, a, "expert_weights_scale", p->weights_scale);
    if (!st) st = set_arch_u32(w, a, "attention.head_count", (uint32_t)p->n_head);
    if (!st && !p->kinds) st = set_arch_u32(w, a, "attention.head_count_kv", (uint32_t)(p->kv_lora && !p->mla_joined ? 1 : p->n_head_kv));
    if (!st && p->kinds) { /* per layer, 0 for a short-convolution block, as LFM2's converter */
        int32_t kv[1024];
        for (int il = 0; il < p->n_layer; il++) kv[il] = p->kinds[il] == 'c' ? 0 : p->n_head_kv;
        snprintf(name, sizeof(name), "%s.attention.head_count_kv", a);
        st = es_gguf_writer_set_arr(w, name, ES_GGUF_INT32, kv, (uint64_t)p->n_layer);
        if (!st) st = set_arch_u32(w, a, "shortconv.l_cache", 3);
    }
    if (!st && (es_arch_find(a)->gating == ES_GATING_SIGMOID || p->v3_router))
        st = set_arch_u32(w, a, "expert_gating_func", 2);
    else if (!st && es_arch_find(a)->gating_key) /* SmallThinker's converter: softmax, 1 */
        st = set_arch_u32(w, a, "expert_gating_func", 1);
    if (!st && (p->v3_router || p->weights_norm)) {
        snprintf(name, sizeof(name), "%s.expert_weights_norm", a);
        st = es_gguf_writer_set_bool(w, name, true);
    }
    if (!st && p->n_group) st = set_arch_u32(w, a, "expert_group_count", (uint32_t)p->n_group);
    if (!st && p->n_group) st = set_arch_u32(w, a, "expert_group_used_count", (uint32_t)p->n_group_used);
    if (!st && p->kv_lora) st = set_mla(w, p);
    if (!st && p->yarn_factor > 0.0f) st = set_yarn(w, p);
    if (!st && p->lr_orig_ctx) { /* LongRoPE as Phi-3's converter writes it (no scaling type) */
        const double scale = (double)p->n_ctx / p->lr_orig_ctx;
        const double af = scale > 1.0 ? sqrt(1.0 + log(scale) / log(p->lr_orig_ctx)) : 1.0;
        st = set_arch_u32(w, a, "rope.scaling.original_context_length", (uint32_t)p->lr_orig_ctx);
        if (!st) st = set_arch_f32(w, a, "rope.scaling.attn_factor", (float)af);
    }
    if (!st && p->n_embd_head && !p->kv_lora) st = set_arch_u32(w, a, "attention.key_length", (uint32_t)p->n_embd_head);
    if (!st && p->n_embd_head && !p->kv_lora) st = set_arch_u32(w, a, "attention.value_length", (uint32_t)p->n_embd_head);
    if (!st) st = set_arch_f32(w, a, "rope.freq_base", p->rope_base);
    if (!st) st = set_arch_f32(w, a, "attention.layer_norm_rms_epsilon", p->rms_eps);
    if (!st) st = set_arch_u32(w, a, "expert_count", (uint32_t)p->n_expert);
    if (!st) st = set_arch_u32(w, a, "expert_used_count", (uint32_t)p->n_expert_used);
    if (!st && p->n_swa) st = set_arch_u32(w, a, "attention.sliding_window", (uint32_t)p->n_swa);
    if (!st && es_arch_find(a)->imrope) {
        snprintf(name, sizeof(name), "%s.rope.dimension_sections", a);
        st = es_gguf_writer_set_arr(w, name, ES_GGUF_INT32, p->rope_sections, 4);
        if (!st) st = set_arch_u32(w, a, "n_deepstack_layers", (uint32_t)p->n_deepstack);
    }
    if (!st && p->n_ff_shexp)
        st = set_arch_u32(w, a, "expert_shared_feed_forward_length", (uint32_t)p->n_ff_shexp);
    if (!st && es_arch_find(a)->granite_scales) { /* Granite's converter: the config's values */
        st = set_arch_f32(w, a, "logit_scale", p->logit_scale);
        if (!st) st = set_arch_f32(w, a, "embedding_scale", p->embd_scale);
        if (!st) st = set_arch_f32(w, a, "residual_scale", p->resid_scale);
        if (!st) st = set_arch_f32(w, a, "attention.scale", p->attn_scale);
    }
    if (!st && (es_arch_find(a)->moe_step_one || es_arch_find(a)->moe_interleave))
        /* ERNIE-4.5's converter: MoE every layer; Llama 4's: the config's step */
        st = set_arch_u32(w, a, "interleave_moe_layer_step", (uint32_t)(p->moe_step ? p->moe_step : 1));
    return st;
}

es_status es_synth(const es_synth_opts *o, const char *path)
{
    if (!o || !path) return es_fail(ES_E_INVAL, "synth: missing options or output path");
    const es_synth_preset *p = es_synth_preset_find(o->preset);
    if (o->arch && !es_arch_find(o->arch))
        return es_fail(ES_E_UNSUPPORTED, "synth: unknown architecture '%s' (estream runs %s)",
                       o->arch, es_arch_supported());
    if (!p) {
        char names[512] = "";
        for (size_t i = 0; es_synth_presets()[i]; i++)
            snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", i ? ", " : "",
                     es_synth_presets()[i]);
        return es_fail(ES_E_INVAL, "synth: unknown preset '%s' (use %s)", o->preset ? o->preset : "",
                       names);
    }
    if (o->arch && strcmp(o->arch, p->arch) != 0)
        return es_fail(ES_E_INVAL, "synth: preset %s is a %s model, not %s", p->name, p->arch,
                       o->arch);
    const es_arch *fam = es_arch_find(p->arch);
    ES_ASSERT(fam);
    uint32_t wtype = ES_QTYPE_F32, etype = ES_QTYPE_F32;
    ES_TRY(parse_type(o->type, &wtype, &etype));
    const int dh = p->n_embd_head ? p->n_embd_head : p->n_embd / p->n_head;
    const int dq = dh * p->n_head, dkv = dh * p->n_head_kv;
    const int datt = (p->kv_lora ? p->v_head : dh) * p->n_head; /* the attention output */
    if (es_qtype_row_bytes(wtype, p->n_embd) == 0 || es_qtype_row_bytes(wtype, p->n_ff_exp) == 0 ||
        es_qtype_row_bytes(wtype, datt) == 0 ||
        (p->kv_lora && (es_qtype_row_bytes(wtype, p->kv_lora) == 0 ||
                        es_qtype_row_bytes(wtype, dh - p->qk_rope) == 0)) ||
        (p->q_lora && es_qtype_row_bytes(wtype, p->q_lora) == 0))
        return es_fail(ES_E_INVAL, "synth: preset %s rows do not fit type %s", p->name, o->type);
    /* llama-quantize keeps the output head of a Q4_0, Q4_1 or Q5_1 model in Q6_K; do the same
     * where rows allow. */
    uint32_t out_type = wtype;
    if (wtype == ES_QTYPE_Q4_0 || wtype == ES_QTYPE_Q4_1 || wtype == ES_QTYPE_Q5_1)
        out_type = p->n_embd % 256 == 0 ? ES_QTYPE_Q6_K : ES_QTYPE_Q8_0;

    es_gguf_writer *w = NULL;
    synth_ctx c = {0};
    es_status st = es_gguf_writer_create(&w);
    if (st) return st;
    int n_vocab = p->n_vocab;
    const int d = p->n_embd, L = p->n_layer, E = p->n_expert;
    char name[64];

    st = set_hparams(w, p, etype);
    if (!st) st = o->vocab_path ? set_tokenizer_from(w, o->vocab_path, &n_vocab)
                                : set_tokenizer_builtin(w, n_vocab, fam->synth_pre);
    if (!st && o->chat_template)
        st = es_gguf_writer_set_str(w, "tokenizer.chat_template", o->chat_template);
    if (st) goto done;

    c.cap_gens = 8 + 24 * (L + p->n_nextn);
    c.gens = calloc((size_t)c.cap_gens, sizeof(gen));
    c.common = malloc(sizeof(float) * (size_t)d);
    c.bias = malloc(sizeof(float) * (size_t)((L + p->n_nextn) * E));
    if (!c.gens || !c.common || !c.bias) { st = es_fail(ES_E_NOMEM, "out of memory"); goto done; }
    uint64_t s = mix64(o->seed ^ 0x5eed);
    for (int k = 0; k < d; k++) c.common[k] = (mix64(++s) & 1) ? 1.0f : -1.0f;
    /* router logit shift bias_e * (h . c) = u^3 (in logit units) with u uniform: h . c is about
     * 0.6 d for rms-normed h. Measured on mini over 1,024 tokens: the busiest expert takes 2.5-3.4x
     * the mean share of routes, the idlest a handful, as in trained OLMoE routers. */
    for (int i = 0; i < (L + p->n_nextn) * E; i++) {
        const double u = (double)(mix64(++s) >> 11) / 9007199254740992.0;
        c.bias[i] = (float)(1.0 * u * u * u / (0.6 * d));
    }
    const float sd = 1.0f / sqrtf((float)d), sdq = 1.0f / sqrtf((float)datt), sf = 1.0f / sqrtf((float)p->n_ff_exp);
    const float res = 1.0f / sqrtf((float)L);
    gen *g;
#define GEN(...) do { if (!(g = add_gen(&c, __VA_ARGS__))) { st = es_fail(ES_E_NOMEM, "out of memory"); goto done; } } while (0)
    /* A tied head multiplies by the embedding: give it the output head's scale. */
    GEN("token_embd.weight", GEN_EMBED, wtype, 2, d, n_vocab, 1, p->tied ? 3.0f * sd : 1.0f, o->seed);
    g->common = c.common;
    if (p->l3_factor > 0.0f) { /* one tensor for every layer, as the converter writes it */
        const int n_rot = p->n_rot ? p->n_rot : dh;
        if (!(c.rope_factors = malloc(sizeof(float) * (size_t)(n_rot / 2)))) {
            st = es_fail(ES_E_NOMEM, "out of memory");
            goto done;
        }
        llama3_factors(p, n_rot, c.rope_factors);
        GEN("rope_freqs.weight", GEN_VALUES, ES_QTYPE_F32, 1, n_rot / 2, 1, 1, 1.0f, o->seed);
        g->values = c.rope_factors;
    }
    if (p->lr_orig_ctx) { /* LongRoPE: one pair of tables for every layer, long first */
        const int n_rot = p->n_rot ? p->n_rot : dh;
        if (!(c.rope_long = malloc(sizeof(float) * (size_t)n_rot))) {
            st = es_fail(ES_E_NOMEM, "out of memory");
            goto done;
        }
        longrope_factors(n_rot, c.rope_long, c.rope_long + n_rot / 2);
        GEN("rope_factors_long.weight", GEN_VALUES, ES_QTYPE_F32, 1, n_rot / 2, 1, 1, 1.0f, o->seed);
        g->values = c.rope_long + n_rot / 2;
        GEN("rope_factors_short.weight", GEN_VALUES, ES_QTYPE_F32, 1, n_rot / 2, 1, 1, 1.0f, o->seed);
        g->values = c.rope_long;
    }
    for (int il = 0; il < L + p->n_nextn; il++) {
#define LNAME(suffix) (snprintf(name, sizeof(name), "blk.%d." suffix ".weight", il), name)
#define BNAME(stem, kind) (snprintf(name, sizeof(name), "blk.%d." stem "." kind, il), name)
        GEN(LNAME("attn_norm"), GEN_NORM_WEIGHT, ES_QTYPE_F32, 1, d, 1, 1, 1.0f, o->seed);
        if (fam->norm_bias)
            GEN(BNAME("attn_norm", "bias"), GEN_NORMAL, ES_QTYPE_F32, 1, d, 1, 1, 0.1f, o->seed);
        if (p->kinds && p->kinds[il] == 'c') { /* a short-convolution block */
            GEN(LNAME("shortconv.conv"), GEN_NORMAL, ES_QTYPE_F32, 2, 3, d, 1, 0.5f, o->seed);
            GEN(LNAME("shortconv.in_proj"), GEN_NORMAL, wtype, 2, d, 3 * d, 1, sd, o->seed);
            GEN(LNAME("shortconv.out_proj"), GEN_NORMAL, wtype, 2, d, d, 1, 0.7f * sd * res, o->seed);
            goto ffn;
        }
        if (p->kv_lora) { /* multi-head latent attention */
            const int kv = p->kv_lora, nope = dh - p->qk_rope;
            const float skv = 1.0f / sqrtf((float)kv);
            if (p->q_lora) {
                GEN(LNAME("attn_q_a"), GEN_NORMAL, wtype, 2, d, p->q_lora, 1, sd, o->seed);
                GEN(LNAME("attn_q_a_norm"), GEN_NORM_WEIGHT, ES_QTYPE_F32, 1, p->q_lora, 1, 1, 1.0f, o->seed);
                GEN(LNAME("attn_q_b"), GEN_NORMAL, wtype, 2, p->q_lora, dq, 1, 1.0f / sqrtf((float)p->q_lora), o->seed);
            } else {
                GEN(LNAME("attn_q"), GEN_NORMAL, wtype, 2, d, dq, 1, sd, o->seed);
            }
            GEN(LNAME("attn_kv_a_mqa"), GEN_NORMAL, wtype, 2, d, kv + p->qk_rope, 1, sd, o->seed);
            GEN(LNAME("attn_kv_a_norm"), GEN_NORM_WEIGHT, ES_QTYPE_F32, 1, kv, 1, 1, 1.0f, o->seed);
            if (p->mla_joined) {
                GEN(LNAME("attn_kv_b"), GEN_NORMAL, wtype, 2, kv, p->n_head * (nope + p->v_head), 1, skv, o->seed);
            } else {
                GEN(LNAME("attn_k_b"), GEN_NORMAL, etype, 3, nope, kv, p->n_head, skv, o->seed);
                GEN(LNAME("attn_v_b"), GEN_NORMAL, etype, 3, kv, p->v_head, p->n_head, skv, o->seed);
            }
            GEN(LNAME("attn_output"), GEN_NORMAL, wtype, 2, datt, d, 1, 0.7f * sdq * res, o->seed);
            goto ffn;
        }
        if (p->fused_qkv) { /* one attn_qkv (and bias), the three below end to end */
            GEN(LNAME("attn_qkv"), GEN_NORMAL, wtype, 2, d, dq + 2 * dkv, 1, sd, o->seed);
            fuse_qkv(g, il, "weight", dq, dkv, o->seed);
        } else {
            GEN(LNAME("attn_q"), GEN_NORMAL, wtype, 2, d, dq, 1, sd, o->seed);
            GEN(LNAME("attn_k"), GEN_NORMAL, wtype, 2, d, dkv, 1, sd, o->seed);
            GEN(LNAME("attn_v"), GEN_NORMAL, wtype, 2, d, dkv, 1, sd, o->seed);
        }
        GEN(LNAME("attn_output"), GEN_NORMAL, wtype, 2, dq, d, 1, 0.7f * sdq * res, o->seed);
        if (fam->attn_bias && p->fused_qkv) {
            GEN(BNAME("attn_qkv", "bias"), GEN_NORMAL, ES_QTYPE_F32, 1, dq + 2 * dkv, 1, 1, 0.3f, o->seed);
            fuse_qkv(g, il, "bias", dq, dkv, o->seed);
        } else if (fam->attn_bias) {
            GEN(BNAME("attn_q", "bias"), GEN_NORMAL, ES_QTYPE_F32, 1, dq, 1, 1, 0.3f, o->seed);
            GEN(BNAME("attn_k", "bias"), GEN_NORMAL, ES_QTYPE_F32, 1, dkv, 1, 1, 0.3f, o->seed);
            GEN(BNAME("attn_v", "bias"), GEN_NORMAL, ES_QTYPE_F32, 1, dkv, 1, 1, 0.3f, o->seed);
        }
        if (fam->attn_out_bias)
            GEN(BNAME("attn_output", "bias"), GEN_NORMAL, ES_QTYPE_F32, 1, d, 1, 1, 0.1f, o->seed);
        if (fam->attn_sinks) /* logits a softmax's own scores are of the order of */
            GEN(LNAME("attn_sinks"), GEN_NORMAL, ES_QTYPE_F32, 1, p->n_head, 1, 1, 1.5f, o->seed);
        if (fam->qk_norm != ES_QK_NORM_NONE && (!fam->qk_norm_optional || p->qk_norm)) {
            const bool head = fam->qk_norm == ES_QK_NORM_HEAD;
            GEN(LNAME("attn_q_norm"), GEN_NORM_WEIGHT, ES_QTYPE_F32, 1, head ? dh : dq, 1, 1, 1.0f, o->seed);
            GEN(LNAME("attn_k_norm"), GEN_NORM_WEIGHT, ES_QTYPE_F32, 1, head ? dh : dkv, 1, 1, 1.0f, o->seed);
        }
    ffn:
        snprintf(name, sizeof(name), "blk.%d.%s.weight", il, fam->ffn_norm ? fam->ffn_norm : "ffn_norm");
        GEN(name, GEN_NORM_WEIGHT, ES_QTYPE_F32, 1, d, 1, 1, 1.0f, o->seed);
        if (fam->norm_bias) {
            snprintf(name, sizeof(name), "blk.%d.%s.bias", il, fam->ffn_norm ? fam->ffn_norm : "ffn_norm");
            GEN(name, GEN_NORMAL, ES_QTYPE_F32, 1, d, 1, 1, 0.1f, o->seed);
        }
        if (!synth_has_experts(p, il)) { /* a dense FFN instead of experts */
            const float sff = 1.0f / sqrtf((float)p->n_ff);
            GEN(LNAME("ffn_gate"), GEN_NORMAL, wtype, 2, d, p->n_ff, 1, sd, o->seed);
            GEN(LNAME("ffn_down"), GEN_NORMAL, wtype, 2, p->n_ff, d, 1, 1.5f * sff * res, o->seed);
            GEN(LNAME("ffn_up"), GEN_NORMAL, wtype, 2, d, p->n_ff, 1, sd, o->seed);
            goto nextn;
        }
        if (p->n_shared || p->n_ff_shexp) { /* the shared experts: one FFN of n_shared experts'
                                               * size, or of n_ff_shexp (ES_SHEXP_COUNT_KEYED: of
                                               * n_shared times n_ff_shexp) */
            const int each = p->n_ff_shexp ? p->n_ff_shexp : p->n_ff_exp;
            const int fs = fam->shexp == ES_SHEXP_COUNT_KEYED ? p->n_shared * each
                           : p->n_ff_shexp                    ? p->n_ff_shexp
                                                              : p->n_shared * p->n_ff_exp;
            const float sfs = 1.0f / sqrtf((float)fs);
            GEN(LNAME("ffn_gate_shexp"), GEN_NORMAL, wtype, 2, d, fs, 1, sd, o->seed);
            GEN(LNAME("ffn_down_shexp"), GEN_NORMAL, wtype, 2, fs, d, 1, 1.5f * sfs * res, o->seed);
            GEN(LNAME("ffn_up_shexp"), GEN_NORMAL, wtype, 2, d, fs, 1, sd, o->seed);
            if (fam->shexp_gated) /* its gate's logit h . w: about unit size */
                GEN(LNAME("ffn_gate_inp_shexp"), GEN_NORMAL, ES_QTYPE_F32, 1, d, 1, 1, sd, o->seed);
        }
        /* a sigmoid router ranks sigmoid(logit) + bias, which squeezes logit gaps by 4 near
         * 0.5: wider logits keep its choices as clear as a softmax router's */
        const float rs = fam->gating == ES_GATING_SIGMOID || p->v3_router ? 3.0f * sd : sd;
        GEN(LNAME("ffn_gate_inp"), GEN_ROUTER, ES_QTYPE_F32, 2, d, E, 1, rs, o->seed);
        g->common = c.common;
        g->bias = c.bias + il * E;
        if (fam->expert_bias || p->v3_router || p->sel_bias) { /* the selection bias: small next to sigmoid
                                                    * probabilities */
            snprintf(name, sizeof(name), "blk.%d.exp_probs_b.bias", il);
            GEN(name, GEN_NORMAL, ES_QTYPE_F32, 1, E, 1, 1, 0.02f, o->seed);
        }
        if (fam->router_bias)
            GEN(BNAME("ffn_gate_inp", "bias"), GEN_NORMAL, ES_QTYPE_F32, 1, E, 1, 1, 0.5f, o->seed);
        GEN(LNAME("ffn_gate_exps"), GEN_NORMAL, etype, 3, d, p->n_ff_exp, E, sd, o->seed);
        GEN(LNAME("ffn_down_exps"), GEN_NORMAL, etype, 3, p->n_ff_exp, d, E, 1.5f * sf * res, o->seed);
        GEN(LNAME("ffn_up_exps"), GEN_NORMAL, etype, 3, d, p->n_ff_exp, E, sd, o->seed);
        if (fam->expert_out_bias) { /* wide: some gate and up values pass the GLU's limits */
            GEN(BNAME("ffn_gate_exps", "bias"), GEN_NORMAL, ES_QTYPE_F32, 2, p->n_ff_exp, E, 1, 2.5f, o->seed);
            GEN(BNAME("ffn_up_exps", "bias"), GEN_NORMAL, ES_QTYPE_F32, 2, p->n_ff_exp, E, 1, 2.5f, o->seed);
            GEN(BNAME("ffn_down_exps", "bias"), GEN_NORMAL, ES_QTYPE_F32, 2, d, E, 1, 0.1f, o->seed);
        }
    nextn:
        if (il >= L) { /* a multi-token-prediction block's own tensors (llama.cpp loads them) */
            GEN(LNAME("nextn.eh_proj"), GEN_NORMAL, wtype, 2, 2 * d, d, 1, sd, o->seed);
            GEN(LNAME("nextn.enorm"), GEN_NORM_WEIGHT, ES_QTYPE_F32, 1, d, 1, 1, 1.0f, o->seed);
            GEN(LNAME("nextn.hnorm"), GEN_NORM_WEIGHT, ES_QTYPE_F32, 1, d, 1, 1, 1.0f, o->seed);
            GEN(LNAME("nextn.shared_head_norm"), GEN_NORM_WEIGHT, ES_QTYPE_F32, 1, d, 1, 1, 1.0f, o->seed);
            if (strcmp(p->arch, "bailingmoe2") == 0) /* its loader wants one more */
                GEN(LNAME("layer_output_norm"), GEN_NORM_WEIGHT, ES_QTYPE_F32, 1, d, 1, 1, 1.0f, o->seed);
        }
#undef BNAME
#undef LNAME
    }
    GEN(fam->output_norm ? fam->output_norm : "output_norm.weight", GEN_NORM_WEIGHT,
        ES_QTYPE_F32, 1, d, 1, 1, 1.0f, o->seed);
    if (fam->norm_bias) GEN("output_norm.bias", GEN_NORMAL, ES_QTYPE_F32, 1, d, 1, 1, 0.1f, o->seed);
    if (!p->tied) GEN("output.weight", GEN_NORMAL, out_type, 2, d, n_vocab, 1, 3.0f * sd, o->seed);
    if (fam->output_bias) GEN("output.bias", GEN_NORMAL, ES_QTYPE_F32, 1, n_vocab, 1, 1, 0.5f, o->seed);
#undef GEN
    for (int i = 0; i < c.n_gens; i++) {
        gen *t = &c.gens[i];
        const uint64_t rows = (uint64_t)t->ne[1] * (uint64_t)t->ne[2];
        const uint64_t nbytes = rows * es_qtype_row_bytes(t->type, t->ne[0]);
        st = es_gguf_writer_add_tensor_fn(w, t->name, t->type, (uint32_t)t->n_dims, t->ne, nbytes,
                                          gen_fill, t);
        if (st) goto done;
    }
    if (o->progress) es_gguf_writer_set_progress(w, o->progress, o->user);
    st = es_gguf_writer_write(w, path);
done:
    for (int i = 0; i < c.n_gens; i++) {
        free(c.gens[i].row);
        free(c.gens[i].qrow);
    }
    free(c.gens);
    free(c.common);
    free(c.bias);
    free(c.rope_factors);
    free(c.rope_long);
    es_gguf_writer_destroy(w);
    return st;
}
