/*
 * The architecture's hyperparameters, read from the GGUF metadata into m->hp and checked
 * (es_hparams_read, es_model_open's step before the tensors are bound): sizes, heads (per layer
 * where LFM2 writes an array, latent heads for MLA), experts, the router's options, RoPE and its
 * scaling (linear, YaRN), and es_rope_cos_sin, the rotation's (cos, sin) at a position that both
 * forward passes use.
 */
#include "model/hparams.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static es_status get_int(const es_model *m, const char *key, bool required, int lo, int hi,
                         int *out)
{
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", m->arch, key);
    int64_t v = *out;
    if (es_gguf_find_key(m->gguf, full) < 0 && !required) return ES_OK; /* keep the default */
    ES_TRY(es_gguf_read_i64(m->gguf, full, required, &v));
    if (v < lo || v > hi)
        return es_fail(ES_E_FORMAT, "%s: %s = %lld is out of range [%d, %d]",
                       es_gguf_path(m->gguf), full, (long long)v, lo, hi);
    *out = (int)v;
    return ES_OK;
}

static es_status get_float(const es_model *m, const char *key, bool required, float lo, float hi,
                           float *out)
{
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", m->arch, key);
    float v = *out; /* optional: absent keeps the default */
    ES_TRY(es_gguf_read_f32(m->gguf, full, required, &v));
    if (!(v >= lo && v <= hi))
        return es_fail(ES_E_FORMAT, "%s: %s = %g is out of range", es_gguf_path(m->gguf), full,
                       (double)v);
    *out = v;
    return ES_OK;
}

/* attention.head_count_kv of layer il: the key, or its il-th entry where it is an array of
 * n_layer integers (LFM2 writes one, 0 marking a short-convolution layer). Checked by
 * es_hparams_read before any call. */
int es_hparams_head_count_kv(const es_model *m, int il)
{
    char full[128];
    snprintf(full, sizeof(full), "%s.attention.head_count_kv", m->arch);
    es_gguf_type et;
    uint64_t n;
    if (!es_gguf_get_arr(m->gguf, full, &et, &n)) return m->hp.n_head_kv;
    int32_t v;
    memcpy(&v, (const uint8_t *)es_gguf_arr_data(m->gguf, full) + 4 * (size_t)il, 4);
    return v;
}

/* The KV heads: one value, or (conv families) an array with one entry per layer whose non-zero
 * entries must agree; sets n_head_kv and n_conv_layers. */
static es_status read_head_count_kv(es_model *m)
{
    es_hparams *hp = &m->hp;
    const char *path = es_gguf_path(m->gguf);
    char full[128];
    snprintf(full, sizeof(full), "%s.attention.head_count_kv", m->arch);
    es_gguf_type et;
    uint64_t n;
    hp->n_head_kv = hp->n_head;
    if (!es_gguf_get_arr(m->gguf, full, &et, &n))
        return get_int(m, "attention.head_count_kv", false, 1, 4096, &hp->n_head_kv);
    if (!m->family->conv_layers)
        return es_fail(ES_E_UNSUPPORTED, "%s: %s is an array (per-layer KV heads), which %s does "
                       "not have", path, full, m->arch);
    if ((et != ES_GGUF_INT32 && et != ES_GGUF_UINT32) ||
        n != (uint64_t)(hp->n_layer + hp->n_layer_nextn))
        return es_fail(ES_E_FORMAT, "%s: %s must be %d 32-bit integers (one per layer)", path,
                       full, hp->n_layer);
    int common = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const int v = es_hparams_head_count_kv(m, il);
        if (v < 0 || v > 4096)
            return es_fail(ES_E_FORMAT, "%s: %s[%d] = %d is out of range [0, 4096]", path, full,
                           il, v);
        if (v == 0) {
            hp->n_conv_layers++;
        } else if (common && v != common) {
            return es_fail(ES_E_UNSUPPORTED, "%s: attention layers with %d and %d KV heads (%s) "
                           "are not supported", path, common, v, full);
        } else {
            common = v;
        }
    }
    if (common) hp->n_head_kv = common;
    return ES_OK;
}

/* Head sizes of the families with plain attention. The head size is its own key where hidden /
 * heads would be wrong (Qwen3-MoE: 128 with hidden 2048 and 32 heads); without the key the
 * hidden size must split into the heads. */
static es_status read_heads(es_model *m)
{
    es_hparams *hp = &m->hp;
    const char *path = es_gguf_path(m->gguf);
    int key_len = 0, val_len = 0;
    ES_TRY(get_int(m, "attention.key_length", false, 1, 4096, &key_len));
    ES_TRY(get_int(m, "attention.value_length", false, 1, 4096, &val_len));
    if (key_len == 0 && hp->n_embd % hp->n_head)
        return es_fail(ES_E_FORMAT, "%s: embedding length %d is not a multiple of %d heads and "
                       "there is no %s.attention.key_length", path, hp->n_embd, hp->n_head,
                       m->arch);
    hp->n_embd_head = hp->n_embd_head_v = key_len ? key_len : hp->n_embd / hp->n_head;
    if (val_len && val_len != hp->n_embd_head)
        return es_fail(ES_E_UNSUPPORTED, "%s: value heads of %d differ from key heads of %d, "
                       "which %s does not have", path, val_len, hp->n_embd_head, m->arch);
    if ((int64_t)hp->n_head * hp->n_embd_head > (1 << 20))
        return es_fail(ES_E_FORMAT, "%s: %d heads of %d are too large", path, hp->n_head,
                       hp->n_embd_head);
    hp->n_rot = hp->n_embd_head; /* fewer: RoPE turns each head's first n_rot dims (GLM-4.5) */
    ES_TRY(get_int(m, "rope.dimension_count", false, 2, hp->n_embd_head, &hp->n_rot));
    if (hp->n_rot % 2)
        return es_fail(ES_E_FORMAT, "%s: odd rotary dimension %d", path, hp->n_rot);
    hp->n_embd_q = hp->n_embd_att = hp->n_head * hp->n_embd_head;
    hp->n_embd_kv = hp->n_embd_v = hp->n_head_kv * hp->n_embd_head;
    return ES_OK;
}

/* Multi-head latent attention (deepseek2, llama.cpp's hparams): kv_lora_rank, the per-head key
 * (qk_nope + qk_rope) and value sizes from key_length_mla / value_length_mla, or in files from
 * before the split (one attn_kv_b) from key_length / value_length; qk_rope is
 * rope.dimension_count. After decompression every query head has its own key and value head
 * (n_head_kv = n_head, whatever the file's MQA head_count_kv says). */
static es_status read_mla_heads(es_model *m)
{
    es_hparams *hp = &m->hp;
    const char *path = es_gguf_path(m->gguf);
    /* absent (-Lite) or 0: the queries have one projection, attn_q; else attn_q_a, its norm
     * and attn_q_b (DeepSeek-V2/V3, Kimi-K2, GLM-4.7-Flash) */
    ES_TRY(get_int(m, "attention.q_lora_rank", false, 0, 1 << 14, &hp->n_lora_q));
    float temp_scale = 0.0f; /* llama.cpp's attention temperature tuning (Mistral-Large-3) */
    ES_TRY(get_float(m, "attention.temperature_scale", false, 0.0f, 1e6f, &temp_scale));
    if (temp_scale != 0.0f)
        return es_fail(ES_E_UNSUPPORTED, "%s: %s.attention.temperature_scale = %g: attention "
                       "temperature tuning is not supported", path, m->arch, temp_scale);
    ES_TRY(get_int(m, "attention.kv_lora_rank", true, 1, 1 << 14, &hp->n_lora_kv));
    int key_len = 0, val_len = 0;
    ES_TRY(get_int(m, "attention.key_length", true, 2, 1 << 14, &key_len));
    ES_TRY(get_int(m, "attention.value_length", true, 1, 1 << 14, &val_len));
    char k1[96], k2[96];
    snprintf(k1, sizeof(k1), "%s.attention.key_length_mla", m->arch);
    snprintf(k2, sizeof(k2), "%s.attention.value_length_mla", m->arch);
    hp->mla_split = es_gguf_find_key(m->gguf, k1) >= 0 && es_gguf_find_key(m->gguf, k2) >= 0;
    if (hp->mla_split) {
        ES_TRY(get_int(m, "attention.key_length_mla", true, 2, 4096, &key_len));
        ES_TRY(get_int(m, "attention.value_length_mla", true, 1, 4096, &val_len));
    }
    if (key_len > 4096 || val_len > 4096)
        return es_fail(ES_E_FORMAT, "%s: MLA head sizes %d / %d are too large (no %s.attention."
                       "key_length_mla?)", path, key_len, val_len, m->arch);
    ES_TRY(get_int(m, "rope.dimension_count", true, 2, 4096, &hp->n_rot));
    if (hp->n_rot % 2 || hp->n_rot >= key_len)
        return es_fail(ES_E_FORMAT, "%s: rotary dimension %d must be even and below the key "
                       "head size %d", path, hp->n_rot, key_len);
    if ((int64_t)hp->n_head * (key_len + val_len) > (1 << 20))
        return es_fail(ES_E_FORMAT, "%s: %d heads of %d + %d are too large", path, hp->n_head,
                       key_len, val_len);
    hp->n_embd_head = key_len;
    hp->n_embd_head_v = val_len;
    hp->n_head_kv = hp->n_head;
    hp->n_embd_q = hp->n_embd_kv = hp->n_head * key_len;
    hp->n_embd_v = hp->n_embd_att = hp->n_head * val_len;
    return ES_OK;
}

static float yarn_mscale(float factor, float mscale)
{
    return factor <= 1.0f ? 1.0f : 0.1f * mscale * logf(factor) + 1.0f;
}

static float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base)
{
    return (float)n_dims * logf((float)n_ctx_orig / (n_rot * 2.0f * (float)M_PI)) /
           (2.0f * logf(base));
}

/* RoPE scaling as llama.cpp applies it (llama-context.cpp's cparams, ggml's rope_yarn): none, or
 * linear (angles times 1/factor), or YaRN (per pair a ramp between the interpolated and the
 * original angle, cos and sin scaled by its magnitude factor); the softmax scale, which MLA
 * multiplies by YaRN's mscale squared. */
static es_status read_rope_scaling(es_model *m)
{
    es_hparams *hp = &m->hp;
    const char *path = es_gguf_path(m->gguf);
    char key[96];
    es_str type = {"linear", 6}; /* llama.cpp's default: a no-op without a factor */
    snprintf(key, sizeof(key), "%s.rope.scaling.type", m->arch);
    ES_TRY(es_gguf_read_str(m->gguf, key, false, &type));
    const bool none = type.len == 4 && !memcmp(type.ptr, "none", 4);
    const bool linear = type.len == 6 && !memcmp(type.ptr, "linear", 6);
    const bool yarn = type.len == 4 && !memcmp(type.ptr, "yarn", 4);
    if (!none && !linear && !yarn)
        return es_fail(ES_E_UNSUPPORTED, "%s: %s = '%.*s': estream supports none, linear and "
                       "yarn", path, key, (int)es_min_size(type.len, 32), type.ptr);
    float factor = 0.0f, attn_factor = 1.0f, log_mul = 0.0f;
    ES_TRY(get_float(m, "rope.scaling.factor", false, 0.0f, 1e6f, &factor));
    ES_TRY(get_float(m, "rope.scaling.attn_factor", false, 1e-6f, 1e6f, &attn_factor));
    if (m->family->mla) ES_TRY(get_float(m, "rope.scaling.yarn_log_multiplier", false, 0.0f, 1e3f, &log_mul));
    log_mul /= 0.1f; /* the converter writes 0.1 * mscale_all_dim */
    int n_ctx_orig = hp->n_ctx;
    ES_TRY(get_int(m, "rope.scaling.original_context_length", false, 1, 1 << 24, &n_ctx_orig));
    hp->rope_orig_ctx = n_ctx_orig;
    hp->rope_freq_scale = none || factor == 0.0f ? 1.0f : 1.0f / factor;
    hp->rope_ext_factor = yarn ? 1.0f : 0.0f;
    const float fs = hp->rope_freq_scale, ln_inv = logf(1.0f / fs);
    float af = 1.0f;
    if (yarn) {
        const float f = 1.0f / fs;
        if (log_mul != 0.0f) {
            const float mscale = log_mul != 1.0f ? log_mul : 1.0f; /* DeepSeek-V2's case */
            af = yarn_mscale(f, mscale) / yarn_mscale(f, log_mul);
        } else {
            af = yarn_mscale(f, 1.0f);
        }
        af *= 1.0f / (1.0f + 0.1f * logf(f));
        const float lo = floorf(yarn_corr_dim(hp->n_rot, n_ctx_orig, 32.0f, hp->rope_freq_base));
        const float hi = ceilf(yarn_corr_dim(hp->n_rot, n_ctx_orig, 1.0f, hp->rope_freq_base));
        hp->rope_corr[0] = lo > 0.0f ? lo : 0.0f;
        hp->rope_corr[1] = hi < (float)(hp->n_rot - 1) ? hi : (float)(hp->n_rot - 1);
    }
    af *= attn_factor;
    hp->rope_cs_scale = yarn ? af * (1.0f + 0.1f * ln_inv) : af;
    hp->attn_scale = 1.0f / sqrtf((float)hp->n_embd_head);
    if (m->family->q_prescale) { /* phi3's graph: the queries scaled, then q.k taken as is */
        hp->q_scale = hp->attn_scale;
        hp->attn_scale = 1.0f;
    }
    if (m->family->mla) { /* deepseek2's graph: the original attn_factor, YaRN's mscale */
        const float mscale = af * (1.0f + 0.1f * ln_inv) * (1.0f + 0.1f * log_mul * ln_inv);
        hp->attn_scale = mscale * mscale / sqrtf((float)hp->n_embd_head);
    }
    return ES_OK;
}

/* IMROPE: whether pair i turns by the fourth axis's position (ggml's ggml_mrope_cache_init: the
 * three axes interleave, each over three times its section's pairs; what is left is the fourth's) */
static bool imrope_fourth_axis(const int *sec, int i)
{
    const int s = i % (sec[0] + sec[1] + sec[2] + sec[3]);
    if (s % 3 == 1) return s >= 3 * sec[1];
    if (s % 3 == 2) return s >= 3 * sec[2];
    return s >= 3 * sec[0];
}

void es_rope_cos_sin(const es_hparams *hp, const float *factors, int64_t pos, float *cs)
{
    const float theta_scale = powf(hp->rope_freq_base, -2.0f / (float)hp->n_rot);
    const float fs = hp->rope_freq_scale, ext = hp->rope_ext_factor;
    float theta_extrap = (float)pos;
    for (int i = 0; i < hp->n_rot / 2; i++) {
        /* a text token's fourth position is 0: its angle stays 0 (ggml's theta_e) */
        const float t = hp->rope_imrope && imrope_fourth_axis(hp->rope_sections, i) ? 0.0f
                                                                                     : theta_extrap;
        /* ggml's rope cache divides the angle by the pair's frequency factor */
        const float te = factors ? t / factors[i] : t;
        float theta = fs * te;
        if (ext != 0.0f) {
            const float lo = hp->rope_corr[0], hi = hp->rope_corr[1];
            const float span = hi - lo > 0.001f ? hi - lo : 0.001f;
            float y = ((float)i - lo) / span;
            y = y < 0.0f ? 0.0f : y > 1.0f ? 1.0f : y;
            const float mix = (1.0f - y) * ext;
            theta = theta * (1.0f - mix) + te * mix;
        }
        cs[2 * i] = cosf(theta) * hp->rope_cs_scale;
        cs[2 * i + 1] = sinf(theta) * hp->rope_cs_scale;
        theta_extrap *= theta_scale;
    }
}

float es_attn_temperature(int64_t pos)
{
    const float fl = floorf(((float)pos + 1.0f) / 8192.0f); /* float, as llama.cpp's set_input */
    return (float)(log((double)fl + 1.0) * (double)0.1f + 1.0);
}

/* The router's gating where the file names it (router_keys; llama.cpp's expert_gating_func: 1
 * softmax, 2 sigmoid, 3 a softmax over the chosen logits); absent or 0, the family's, except in
 * deepseek2 (files from before the key): softmax, but GLM-4.7's lite model (47 or 48 layers and a
 * 154,880-token vocabulary) sigmoid. */
static es_status read_gating(es_model *m)
{
    es_hparams *hp = &m->hp;
    int gating = 0;
    ES_TRY(get_int(m, "expert_gating_func", false, 0, 1 << 16, &gating));
    if (gating == 0 && !m->family->mla) {
        hp->router.gating = m->family->gating;
        return ES_OK;
    }
    if (gating == 0) {
        es_gguf_type et;
        uint64_t n_vocab = 0;
        if (!es_gguf_get_arr(m->gguf, "tokenizer.ggml.tokens", &et, &n_vocab)) n_vocab = 0;
        gating = (hp->n_layer == 47 || hp->n_layer == 48) && n_vocab == 154880 ? 2 : 1;
    }
    if (gating < 1 || gating > 3)
        return es_fail(ES_E_UNSUPPORTED, "%s: %s.expert_gating_func = %d: estream runs %s with "
                       "the softmax (1), sigmoid (2) or softmax-over-the-chosen (3) router",
                       es_gguf_path(m->gguf), m->arch, gating, m->arch);
    hp->router.gating = gating == 1   ? ES_GATING_SOFTMAX
                        : gating == 2 ? ES_GATING_SIGMOID
                                      : ES_GATING_SOFTMAX_WEIGHT;
    return ES_OK;
}

/* Expert groups (any family, as llama.cpp reads them): expert_group_count groups of equal size,
 * expert_group_used_count of them eligible per token (llama.cpp's limits: fewer groups than
 * experts, fewer used than groups), with room for the k experts. */
static es_status read_expert_groups(es_model *m)
{
    es_hparams *hp = &m->hp;
    es_router *r = &hp->router;
    const char *path = es_gguf_path(m->gguf);
    r->n_group = r->n_group_used = 0;
    ES_TRY(get_int(m, "expert_group_count", false, 0, ES_ROUTE_MAX_GROUPS, &r->n_group));
    ES_TRY(get_int(m, "expert_group_used_count", false, 0, ES_ROUTE_MAX_GROUPS,
                   &r->n_group_used));
    if (r->n_group <= 1) return ES_OK;
    if (r->n_group >= hp->n_expert || hp->n_expert % r->n_group ||
        r->n_group_used < 1 || r->n_group_used >= r->n_group ||
        (int64_t)r->n_group_used * (hp->n_expert / r->n_group) < hp->n_expert_used ||
        hp->n_expert / r->n_group < 2)
        return es_fail(ES_E_FORMAT, "%s: %d expert groups with %d used cannot hold %d of %d "
                       "experts (the groups must divide the experts, at least two each, and "
                       "fewer be used than there are)", path, r->n_group, r->n_group_used,
                       hp->n_expert_used, hp->n_expert);
    return ES_OK;
}

/* Sliding-window attention (gpt-oss, llama.cpp's rule): attention.sliding_window positions,
 * on the layers sliding_window_pattern marks (2 where absent: the even ones); a separate RoPE
 * base for those layers is refused, since every layer here shares one rotation.
 * Llama 4 (irope, llama.cpp's llama4 loader): chunks of 8,192 positions whatever the key says,
 * on the layers the pattern marks (4 where absent), NoPE every 4th layer, the unweighted q/k
 * norms unless the model has 128 experts; a file whose sliding_window is 0 (every layer full
 * attention and RoPE'd, MobileLLM-R1's kind) is refused: llama.cpp's graph asserts on it. */
bool es_hparams_layer_slides(const es_model *m, int il)
{
    const es_hparams *hp = &m->hp;
    const int period = hp->swa_period;
    if (!(m->family->swa || m->family->irope) || hp->n_swa <= 0) return false;
    if (period == 0) return true;
    /* llama.cpp's set_swa_pattern; SmallThinker's passes dense_first: layer 0 of each period is
     * the global one */
    return m->family->swa_window_4096 ? il % period != 0 : il % period < period - 1;
}

bool es_hparams_layer_no_rope(const es_model *m, int il)
{
    const es_arch *fam = m->family;
    if (fam->irope) return (il + 1) % 4 == 0; /* llama.cpp's n_no_rope_layer_step */
    if (!fam->rope_swa_only || m->hp.n_swa <= 0) return false;
    /* SmallThinker: llama.cpp's use_rope, whose step (4) equal to the layer count means every
     * layer turns RoPE */
    if (fam->swa_window_4096) return m->hp.n_layer != 4 && il % 4 == 0;
    return !es_hparams_layer_slides(m, il);
}

/* A per-layer sliding_window_pattern (EXAONE's converter writes one bool per layer): llama.cpp's
 * exaone-moe and smallthinker loaders do not read an array and slide three layers in four; a file
 * whose array says otherwise would run as it does not mean, so it is refused. */
static es_status check_swa_array(const es_model *m, const char *key, es_gguf_type et, uint64_t n)
{
    const es_hparams *hp = &m->hp;
    const char *path = es_gguf_path(m->gguf);
    const uint8_t *v = es_gguf_arr_data(m->gguf, key);
    const size_t w = et == ES_GGUF_BOOL || et == ES_GGUF_UINT8 || et == ES_GGUF_INT8 ? 1
                     : et == ES_GGUF_INT32 || et == ES_GGUF_UINT32                   ? 4
                                                                                     : 0;
    if (w == 0 || n < (uint64_t)hp->n_layer)
        return es_fail(ES_E_FORMAT, "%s: %s must hold a flag for each of the %d layers", path,
                       key, hp->n_layer);
    for (int il = 0; il < hp->n_layer; il++) {
        uint32_t x = 0;
        memcpy(&x, v + (size_t)il * w, w); /* little-endian: the low byte first */
        const bool slides = es_hparams_layer_slides(m, il);
        if ((x != 0) != slides)
            return es_fail(ES_E_UNSUPPORTED, "%s: %s marks layer %d as %s, but llama.cpp runs %s "
                           "with three sliding-window layers in four (the array is not read), so "
                           "estream does too and refuses a file whose array says otherwise", path,
                           key, il, x ? "sliding" : "global", m->arch);
    }
    return ES_OK;
}

static es_status read_swa(es_model *m)
{
    es_hparams *hp = &m->hp;
    const char *path = es_gguf_path(m->gguf);
    char key[96];
    if (m->family->swa_window_4096) { /* SmallThinker: llama.cpp's fixed window, if any */
        int window = 0;
        ES_TRY(get_int(m, "attention.sliding_window", false, 0, 1 << 24, &window));
        hp->n_swa = window > 0 ? 4096 : 0;
        if (hp->n_swa == 0) return ES_OK; /* no window: every layer full and RoPE'd */
    } else if (m->family->irope) {
        int window = -1;
        ES_TRY(get_int(m, "attention.sliding_window", false, 0, 1 << 24, &window));
        if (window == 0)
            return es_fail(ES_E_UNSUPPORTED, "%s: %s.attention.sliding_window = 0 (full attention "
                           "with RoPE on every layer) is not supported", path, m->arch);
        hp->n_swa = 8192;
        hp->swa_chunked = true;
        hp->kq_norm_rope = hp->n_expert != 128;
    } else {
        ES_TRY(get_int(m, "attention.sliding_window", true, 1, 1 << 24, &hp->n_swa));
    }
    snprintf(key, sizeof(key), "%s.attention.sliding_window_pattern", m->arch);
    es_gguf_type et;
    uint64_t n;
    hp->swa_period = m->family->irope || m->family->rope_swa_only ? 4 : 2;
    if (es_gguf_get_arr(m->gguf, key, &et, &n)) {
        if (!m->family->rope_swa_only) /* gpt-oss, Llama 4 */
            return es_fail(ES_E_UNSUPPORTED, "%s: %s is an array (a per-layer pattern), which "
                           "estream does not read for %s", path, key, m->arch);
        ES_TRY(check_swa_array(m, key, et, n));
    } else {
        ES_TRY(get_int(m, "attention.sliding_window_pattern", false, 0, 1 << 16, &hp->swa_period));
    }
    float base_swa = hp->rope_freq_base;
    ES_TRY(get_float(m, "rope.freq_base_swa", false, 1.0f, 1e12f, &base_swa));
    if (m->family->swa_window_4096) { /* RoPE turns the sliding layers alone, by their base */
        hp->rope_freq_base = base_swa;
        return ES_OK;
    }
    if (m->family->rope_swa_only) return ES_OK; /* EXAONE: llama.cpp turns by rope.freq_base */
    if (base_swa != hp->rope_freq_base)
        return es_fail(ES_E_UNSUPPORTED, "%s: %s.rope.freq_base_swa = %g differs from "
                       "rope.freq_base = %g: a separate RoPE base for the sliding-window layers "
                       "is not supported", path, m->arch, (double)base_swa,
                       (double)hp->rope_freq_base);
    return ES_OK;
}

/* Multimodal RoPE (rope.dimension_sections with a section set: GLM-4.5V, Qwen-VL files) turns
 * positions of several axes, which a text prefill does not have; llama.cpp's glm4moe graph
 * refuses such a file for text too. */
static es_status refuse_mrope(es_model *m)
{
    char key[96];
    snprintf(key, sizeof(key), "%s.rope.dimension_sections", m->arch);
    es_gguf_type et;
    uint64_t n = 0;
    if (!es_gguf_get_arr(m->gguf, key, &et, &n)) return ES_OK;
    const uint8_t *v = es_gguf_arr_data(m->gguf, key); /* may be unaligned */
    if ((et != ES_GGUF_INT32 && et != ES_GGUF_UINT32) || !v)
        return es_fail(ES_E_FORMAT, "%s: %s must be an array of integers",
                       es_gguf_path(m->gguf), key);
    for (uint64_t i = 0; i < n; i++) {
        int32_t x;
        memcpy(&x, v + 4 * i, 4);
        if (x != 0)
            return es_fail(ES_E_UNSUPPORTED, "%s: %s sets multimodal RoPE sections (a vision "
                           "model's file), which estream does not run", es_gguf_path(m->gguf),
                           key);
    }
    return ES_OK;
}

/* Qwen3-VL's interleaved multimodal RoPE (llama.cpp's IMROPE), read as its qwen3vlmoe loader
 * reads rope.dimension_sections: required, four integers (or one for all four). A text token's
 * positions on the four axes are (p, p, p, 0), so the sections only decide which pairs turn by 0
 * (es_rope_cos_sin). */
static es_status read_imrope(es_model *m)
{
    es_hparams *hp = &m->hp;
    const char *path = es_gguf_path(m->gguf);
    char key[96];
    snprintf(key, sizeof(key), "%s.rope.dimension_sections", m->arch);
    es_gguf_type et;
    uint64_t n = 0;
    if (es_gguf_get_arr(m->gguf, key, &et, &n)) {
        const uint8_t *v = es_gguf_arr_data(m->gguf, key); /* may be unaligned */
        if ((et != ES_GGUF_INT32 && et != ES_GGUF_UINT32) || n != 4 || !v)
            return es_fail(ES_E_FORMAT, "%s: %s must be an array of four integers", path, key);
        for (int i = 0; i < 4; i++) memcpy(&hp->rope_sections[i], v + 4 * i, 4);
    } else {
        int64_t one = 0;
        ES_TRY(es_gguf_read_i64(m->gguf, key, true, &one));
        if (one < 0 || one > hp->n_rot)
            return es_fail(ES_E_FORMAT, "%s: %s = %lld is out of range [0, %d]", path, key,
                           (long long)one, hp->n_rot);
        for (int i = 0; i < 4; i++) hp->rope_sections[i] = (int)one;
    }
    int sum = 0;
    for (int i = 0; i < 4; i++) {
        if (hp->rope_sections[i] < 0 || hp->rope_sections[i] > hp->n_rot)
            return es_fail(ES_E_FORMAT, "%s: %s[%d] = %d is out of range [0, %d]", path, key, i,
                           hp->rope_sections[i], hp->n_rot);
        sum += hp->rope_sections[i];
    }
    if (hp->rope_sections[0] + hp->rope_sections[1] + hp->rope_sections[2] == 0 || sum > hp->n_rot)
        return es_fail(ES_E_FORMAT, "%s: %s = [%d, %d, %d, %d]: the first three cannot all be 0 "
                       "and their sum cannot pass the %d rotated dimensions", path, key,
                       hp->rope_sections[0], hp->rope_sections[1], hp->rope_sections[2],
                       hp->rope_sections[3], hp->n_rot);
    hp->rope_imrope = true;
    return ES_OK;
}

/* The shared experts' count and width, by the family's rule (arch.h, es_shexp_rule): one FFN
 * of n_ff_shexp beside the routed experts. Needs n_ff and n_ff_exp. */
static es_status read_shared_experts(es_model *m)
{
    es_hparams *hp = &m->hp;
    const es_shexp_rule rule = m->family->shexp;
    switch (rule) {
    case ES_SHEXP_NONE:
        return ES_OK;
    case ES_SHEXP_COUNT:
    case ES_SHEXP_COUNT_KEYED: {
        ES_TRY(get_int(m, "expert_shared_count", false, 0, 256, &hp->n_expert_shared));
        int width = 0; /* each one's: the experts' unless the file says (Ling) */
        if (rule == ES_SHEXP_COUNT_KEYED)
            ES_TRY(get_int(m, "expert_shared_feed_forward_length", false, 0, 1 << 18, &width));
        hp->n_ff_shexp = hp->n_expert_shared * (width ? width : hp->n_ff_exp);
        return ES_OK;
    }
    case ES_SHEXP_KEY_OR_NONE:
        ES_TRY(get_int(m, "expert_shared_feed_forward_length", false, 0, 1 << 18,
                       &hp->n_ff_shexp));
        hp->n_expert_shared = hp->n_ff_shexp > 0;
        return ES_OK;
    case ES_SHEXP_ONE_EXPERT:
        hp->n_expert_shared = 1;
        hp->n_ff_shexp = hp->n_ff_exp;
        return ES_OK;
    case ES_SHEXP_ONE_KEY_OR_FF:
    case ES_SHEXP_ONE_KEY_OR_EXPERT:
        hp->n_expert_shared = 1;
        hp->n_ff_shexp = rule == ES_SHEXP_ONE_KEY_OR_EXPERT ? hp->n_ff_exp : hp->n_ff;
        return get_int(m, "expert_shared_feed_forward_length", false, 1, 1 << 18,
                       &hp->n_ff_shexp);
    }
    return ES_OK;
}

/* Granite's muP multipliers, as llama.cpp's granite loader reads them: logit_scale required,
 * the others optional (absent or 0: not applied; attention.scale 0: 1/sqrt(head)). Read after
 * read_rope_scaling, whose attn_scale attention.scale replaces. */
static es_status read_granite_scales(es_model *m)
{
    es_hparams *hp = &m->hp;
    float logit = 0.0f, attn = 0.0f;
    ES_TRY(get_float(m, "logit_scale", true, 1e-6f, 1e6f, &logit));
    ES_TRY(get_float(m, "embedding_scale", false, 0.0f, 1e6f, &hp->embd_scale));
    ES_TRY(get_float(m, "residual_scale", false, 0.0f, 1e6f, &hp->resid_scale));
    ES_TRY(get_float(m, "attention.scale", false, 0.0f, 1e6f, &attn));
    hp->logit_mul = 1.0f / logit;
    if (attn != 0.0f) hp->attn_scale = attn;
    return ES_OK;
}

es_status es_hparams_read(es_model *m)
{
    es_hparams *hp = &m->hp;
    ES_TRY(get_int(m, "context_length", true, 1, 1 << 24, &hp->n_ctx));
    ES_TRY(get_int(m, "embedding_length", true, 1, 1 << 16, &hp->n_embd));
    ES_TRY(get_int(m, "block_count", true, 1, 1024, &hp->n_layer));
    if (m->family->nextn) { /* llama.cpp's deepseek2 and glm4moe: the last nextn_predict_layers
                             * blocks are multi-token-prediction heads, not in the forward pass */
        ES_TRY(get_int(m, "nextn_predict_layers", false, 0, hp->n_layer - 1,
                       &hp->n_layer_nextn));
        hp->n_layer -= hp->n_layer_nextn;
    }
    ES_TRY(get_int(m, "feed_forward_length", true, 1, 1 << 18, &hp->n_ff));
    ES_TRY(get_int(m, "attention.head_count", true, 1, 4096, &hp->n_head));
    ES_TRY(read_head_count_kv(m));
    const char *path = es_gguf_path(m->gguf);
    char key[64];
    snprintf(key, sizeof(key), "%s.expert_count", m->arch);
    int64_t n_expert = 0; /* absent or 0: a dense model under a MoE name (Granite 3's dense
                           * models are written as granitemoe with 0 experts) */
    if (es_gguf_find_key(m->gguf, key) >= 0) ES_TRY(es_gguf_read_i64(m->gguf, key, true, &n_expert));
    if (n_expert == 0)
        return es_fail(ES_E_UNSUPPORTED, "%s: a dense %s model (%s %s): estream runs mixture-of-"
                       "experts models only", path, m->arch,
                       es_gguf_find_key(m->gguf, key) < 0 ? "no" : "0 in", key);
    ES_TRY(get_int(m, "expert_count", true, 1, ES_ROUTE_MAX_EXPERTS, &hp->n_expert));
    ES_TRY(get_int(m, "expert_used_count", true, 1, ES_ROUTE_MAX_EXPERTS, &hp->n_expert_used));
    const es_arch *fam = m->family;
    /* the experts' FFN: its key, else feed_forward_length (qwen2moe: that over top-k, as llama.cpp
     * reads Qwen1.5-MoE files without the key) */
    hp->n_ff_exp = fam->shexp_gated ? hp->n_ff / hp->n_expert_used : hp->n_ff;
    ES_TRY(get_int(m, "expert_feed_forward_length", false, 1, 1 << 18, &hp->n_ff_exp));
    if (hp->n_ff_exp < 1)
        return es_fail(ES_E_FORMAT, "%s: an expert FFN of %d (no %s.expert_feed_forward_length)",
                       path, hp->n_ff_exp, m->arch);
    if (fam->dense_lead)
        ES_TRY(get_int(m, "leading_dense_block_count", false, 0, hp->n_layer,
                       &hp->n_layer_dense_lead));
    hp->moe_step = 1;
    if (fam->moe_interleave) /* llama.cpp's llama4 loader requires the key */
        ES_TRY(get_int(m, "interleave_moe_layer_step", true, 1, 1 << 16, &hp->moe_step));
    bool any_moe = false;
    for (int il = 0; il < hp->n_layer; il++) any_moe = any_moe || es_hparams_layer_has_experts(hp, il);
    if (!any_moe)
        return es_fail(ES_E_UNSUPPORTED, "%s: every layer is dense (%s.leading_dense_block_count "
                       "= %d, interleave_moe_layer_step = %d, %d layers): estream runs "
                       "mixture-of-experts models only", path, m->arch, hp->n_layer_dense_lead,
                       hp->moe_step, hp->n_layer);
    if (fam->weight_before_ffn && hp->n_expert_used != 1)
        return es_fail(ES_E_UNSUPPORTED, "%s: %s.expert_used_count = %d: %s weighs each expert's "
                       "input, which estream runs for one expert per token only (Llama 4's 1)",
                       path, m->arch, hp->n_expert_used, m->arch);
    ES_TRY(read_shared_experts(m));
    if (fam->moe_step_one) {
        int step = 1; /* llama.cpp's loader makes every layer after the dense ones MoE */
        ES_TRY(get_int(m, "interleave_moe_layer_step", true, 1, 1 << 16, &step));
        if (step != 1)
            return es_fail(ES_E_UNSUPPORTED, "%s: %s.interleave_moe_layer_step = %d: dense layers "
                           "between the MoE layers are not supported (llama.cpp loads experts "
                           "for every layer after the leading dense ones)", path, m->arch, step);
    }
    if (hp->n_conv_layers > 0)
        ES_TRY(get_int(m, "shortconv.l_cache", true, 2, 64, &hp->n_conv_taps));
    if (fam->gating == ES_GATING_SIGMOID && !fam->router_keys) { /* llama.cpp reads the key;
                                                                  * 2 is its sigmoid */
        int gating = 2;
        ES_TRY(get_int(m, "expert_gating_func", false, 0, 1 << 16, &gating));
        if (gating != 2)
            return es_fail(ES_E_UNSUPPORTED, "%s: %s.expert_gating_func = %d: estream runs %s "
                           "with the sigmoid router (2) only", path, m->arch, gating, m->arch);
    }
    es_router *r = &hp->router;
    r->gating = fam->gating;
    r->by_logit = fam->select_by_logit;
    if (fam->router_keys || fam->gating_key) ES_TRY(read_gating(m));
    r->renorm = fam->topk_renorm;
    snprintf(key, sizeof(key), "%s.expert_weights_norm", m->arch);
    if ((fam->router_keys || fam->norm_key) && es_gguf_find_key(m->gguf, key) >= 0 &&
        !es_gguf_get_bool(m->gguf, key, &r->renorm))
        return es_fail(ES_E_FORMAT, "%s: %s must be a bool", path, key);
    r->scale = 0.0f; /* none; read only where llama.cpp's graph uses it */
    if (fam->weights_scale) ES_TRY(get_float(m, "expert_weights_scale", false, 0.0f, 1e6f, &r->scale));
    ES_TRY(read_expert_groups(m));
    if (hp->n_head % hp->n_head_kv)
        return es_fail(ES_E_FORMAT, "%s: %d heads are not a multiple of %d KV heads", path,
                       hp->n_head, hp->n_head_kv);
    if (hp->n_expert_used > hp->n_expert)
        return es_fail(ES_E_FORMAT, "%s: expert_used_count %d > expert_count %d", path,
                       hp->n_expert_used, hp->n_expert);
    ES_TRY(fam->mla ? read_mla_heads(m) : read_heads(m));
    hp->rope_freq_base = 10000.0f;
    hp->rms_eps = 1e-5f;
    ES_TRY(get_float(m, "rope.freq_base", false, 1.0f, 1e12f, &hp->rope_freq_base));
    ES_TRY(get_float(m, "attention.layer_norm_rms_epsilon", false, 0.0f, 1.0f, &hp->rms_eps));
    if (fam->swa || fam->irope) ES_TRY(read_swa(m));
    ES_TRY(fam->imrope ? read_imrope(m) : refuse_mrope(m));
    ES_TRY(read_rope_scaling(m));
    return fam->granite_scales ? read_granite_scales(m) : ES_OK;
}
