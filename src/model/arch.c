/*
 * The family table (arch.h). Each entry restates what llama.cpp's graph for that architecture
 * does (src/models/<arch>.cpp, commit 3f545bec): the q/k norm it builds, its rope type
 * (llama_model_rope_type) and the norm_w argument of its build_moe_ffn call.
 */
#include "model/arch.h"

#include "core/util.h"

#include <math.h>
#include <string.h>

static const es_arch families[] = {
    /* OLMoE: q/k RMSNorm over the whole projections, NEOX RoPE, softmax top-k as is. */
    {.name = "olmoe", .model_names = "OLMoE", .qk_norm = ES_QK_NORM_WHOLE, .rope = ES_ROPE_NEOX,
     .topk_renorm = false, .output_optional = false, .synth_pre = "gpt-2"},
    /* Qwen3-MoE: per-head q/k RMSNorm, NEOX RoPE, top-k renormalised, head size from
     * attention.key_length (128 in Qwen3-30B-A3B, not hidden / heads). */
    {.name = "qwen3moe", .model_names = "Qwen3-MoE", .qk_norm = ES_QK_NORM_HEAD,
     .rope = ES_ROPE_NEOX, .topk_renorm = true, .output_optional = true, .synth_pre = "qwen2"},
    /* Qwen3-VL-MoE's language model (llama.cpp's qwen3vlmoe: Qwen3-VL-30B-A3B, -235B-A22B) on
     * text: Qwen3-MoE's layers with interleaved multimodal RoPE (imrope above). Its deepstack
     * layers add visual features, which a text token does not have (llama.cpp adds zeros). */
    {.name = "qwen3vlmoe", .model_names = "Qwen3-VL-MoE", .qk_norm = ES_QK_NORM_HEAD,
     .rope = ES_ROPE_NEOX, .imrope = true, .topk_renorm = true, .output_optional = true,
     .synth_pre = "qwen2"},
    /* llama with experts: Mixtral. No q/k norm, normal RoPE (with llama3's frequency factors
     * where the file has them: mixtures made of Llama 3 models), top-k renormalised. */
    {.name = "llama", .model_names = "Mixtral", .qk_norm = ES_QK_NORM_NONE, .rope = ES_ROPE_NORM,
     .topk_renorm = true, .output_optional = true, .rope_factors = true,
     .synth_pre = "llama-bpe"},
    /* DeepSeek-MoE: leading dense layers, shared experts, normal RoPE, no q/k norm, softmax
     * top-k not renormalised but scaled by expert_weights_scale. */
    {.name = "deepseek", .model_names = "DeepSeek-MoE", .qk_norm = ES_QK_NORM_NONE,
     .rope = ES_ROPE_NORM, .topk_renorm = false, .output_optional = true, .dense_lead = true,
     .shexp = ES_SHEXP_COUNT, .weights_scale = true, .synth_pre = "deepseek-llm"},
    /* LFM2-MoE: short-convolution blocks where head_count_kv is 0 and GQA attention with
     * per-head q/k RMSNorm elsewhere, NEOX RoPE, leading dense layers, a sigmoid router whose
     * expert bias steers the choice, top-k renormalised; the final norm is token_embd_norm. */
    {.name = "lfm2moe", .model_names = "LFM2-MoE", .qk_norm = ES_QK_NORM_HEAD,
     .rope = ES_ROPE_NEOX, .topk_renorm = true, .output_optional = true, .dense_lead = true,
     .gating = ES_GATING_SIGMOID, .expert_bias = true, .conv_layers = true,
     .output_norm = "token_embd_norm.weight", .synth_pre = "lfm2"},
    /* DeepSeek-V2 (-Lite) and files of DeepSeek-V3's kind (V3/R1, Kimi-K2, Moonlight):
     * multi-head latent attention (with q LoRA where q_lora_rank is set), normal RoPE (with
     * YaRN in the released models) on the rope part of each head, leading dense layers, shared
     * experts, a softmax router, or a sigmoid one (expert_gating_func 2) whose choice adds
     * exp_probs_b and may keep to expert groups; top-k scaled by expert_weights_scale and
     * renormalised where the file sets expert_weights_norm; nextn_predict_layers trailing
     * blocks (multi-token prediction) are not run. */
    {.name = "deepseek2", .model_names = "DeepSeek-V2/V3", .qk_norm = ES_QK_NORM_NONE,
     .rope = ES_ROPE_NORM, .topk_renorm = false, .output_optional = true, .dense_lead = true,
     .shexp = ES_SHEXP_COUNT, .weights_scale = true, .router_keys = true, .nextn = true,
     .expert_bias_optional = true, .mla = true, .synth_pre = "deepseek-llm"},
    /* Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): q/k/v projections with biases, NEOX RoPE,
     * a softmax top-k as is, one shared expert gated per token by a sigmoid. */
    {.name = "qwen2moe", .model_names = "Qwen2-MoE", .qk_norm = ES_QK_NORM_NONE,
     .rope = ES_ROPE_NEOX, .topk_renorm = false, .output_optional = false, .attn_bias = true,
     .shexp = ES_SHEXP_ONE_KEY_OR_FF, .shexp_gated = true, .synth_pre = "qwen2"},
    /* gpt-oss (llama.cpp's openai-moe): NEOX RoPE (YaRN in the released models), biases on the
     * attention projections, a sink logit per head, sliding-window attention on every other
     * layer, a router with a bias whose k largest logits are chosen and weighed by a softmax over
     * those k, biased experts with the clamped SwiGLU, the FFN norm post_attention_norm. */
    {.name = "gpt-oss", .model_names = "gpt-oss", .qk_norm = ES_QK_NORM_NONE,
     .rope = ES_ROPE_NEOX, .topk_renorm = false, .output_optional = false,
     .gating = ES_GATING_SOFTMAX_WEIGHT, .attn_bias = true, .attn_out_bias = true,
     .attn_sinks = true, .swa = true,
     .router_bias = true, .expert_out_bias = true, .glu_oai = true,
     .ffn_norm = "post_attention_norm", .synth_pre = "gpt-4o"},
    /* GLM-4.5 / 4.6 (llama.cpp's glm4moe; GLM-4.5-Air, GLM-4.5, GLM-4.6): q/k/v biases, per-head
     * q/k RMSNorm where the file has them, NEOX RoPE on the first rope.dimension_count dims of
     * each head (half of them in the released models), leading dense layers, shared experts, a
     * sigmoid router with exp_probs_b (unless the file names another), top-k renormalised and
     * scaled as the file says, the FFN norm post_attention_norm; nextn_predict_layers trailing
     * blocks (multi-token prediction) are not run. */
    {.name = "glm4moe", .model_names = "GLM-4.5/4.6", .qk_norm = ES_QK_NORM_HEAD,
     .qk_norm_optional = true, .rope = ES_ROPE_NEOX, .topk_renorm = false,
     .output_optional = true, .dense_lead = true, .shexp = ES_SHEXP_COUNT,
     .weights_scale = true, .gating = ES_GATING_SIGMOID, .router_keys = true, .nextn = true,
     .expert_bias = true, .attn_bias = true, .ffn_norm = "post_attention_norm",
     .synth_pre = "glm4"},
    /* ERNIE-4.5 MoE (llama.cpp's ernie4_5-moe: ERNIE-4.5-21B-A3B, ERNIE-4.5-300B-A47B): q/k/v
     * biases where present (an output bias llama.cpp loads and does not add), normal RoPE,
     * leading dense layers, a softmax router with exp_probs_b where the file has it, top-k
     * renormalised and scaled by expert_weights_scale, one shared expert of
     * expert_shared_feed_forward_length; a MoE layer every interleave_moe_layer_step layers
     * (only 1, every layer after the dense ones, is a file llama.cpp loads). */
    {.name = "ernie4_5-moe", .model_names = "ERNIE-4.5-MoE", .qk_norm = ES_QK_NORM_NONE,
     .rope = ES_ROPE_NORM, .topk_renorm = true, .output_optional = true, .dense_lead = true,
     .weights_scale = true, .expert_bias_optional = true, .shexp = ES_SHEXP_KEY_OR_NONE,
     .moe_step_one = true, .attn_bias = true, .synth_pre = "llama-bpe"},
    /* Llama 4 (llama.cpp's llama4: Llama-4-Scout-17B-16E, Llama-4-Maverick-17B-128E): normal
     * RoPE with llama3's frequency factors, three chunked-attention RoPE layers with unweighted
     * q/k RMS norms then one NoPE layer with temperature-scaled queries (irope above), a MoE
     * layer every interleave_moe_layer_step layers (dense FFNs between), a sigmoid router that
     * ranks by logit and whose weight scales the one chosen expert's input, one shared expert of
     * the experts' size. */
    {.name = "llama4", .model_names = "Llama 4", .qk_norm = ES_QK_NORM_NONE, .rope = ES_ROPE_NORM,
     .topk_renorm = false, .output_optional = true, .gating = ES_GATING_SIGMOID,
     .moe_interleave = true, .irope = true, .rope_factors = true, .select_by_logit = true,
     .weight_before_ffn = true, .shexp = ES_SHEXP_ONE_EXPERT, .synth_pre = "llama4"},
    /* Granite MoE (llama.cpp's granitemoe: granite-3.0/3.1-1b-a400m, -3b-a800m, and the
     * GraniteMoeShared models): Mixtral's layers (normal RoPE, rope_freqs where present, a
     * softmax top-k renormalised) with muP's four multipliers (granite_scales above) and one
     * ungated shared expert of expert_shared_feed_forward_length where the file has the key. */
    {.name = "granitemoe", .model_names = "Granite MoE", .qk_norm = ES_QK_NORM_NONE,
     .rope = ES_ROPE_NORM, .rope_factors = true, .topk_renorm = true, .output_optional = true,
     .shexp = ES_SHEXP_KEY_OR_NONE, .granite_scales = true, .synth_pre = "refact"},
    /* Hunyuan MoE (llama.cpp's hunyuan-moe: Hunyuan-A13B): NEOX RoPE (NTK-alpha scaling folded
     * into rope.freq_base by the converter; rope_freqs where present), per-head q/k RMSNorm
     * after RoPE, a softmax top-k renormalised, one ungated shared expert on every layer. */
    {.name = "hunyuan-moe", .model_names = "Hunyuan-MoE", .qk_norm = ES_QK_NORM_HEAD,
     .qk_norm_after_rope = true, .rope = ES_ROPE_NEOX, .rope_factors = true,
     .topk_renorm = true, .output_optional = true, .shexp = ES_SHEXP_ONE_KEY_OR_FF,
     .synth_pre = "hunyuan"},
    /* Phi-3.5-MoE (llama.cpp's phimoe, built by its phi3 graph): biased RMS norms, q/k/v and
     * output projections with biases, NEOX RoPE with LongRoPE's short or long factors and the
     * file's attn_factor on cos and sin, queries scaled before attention, a softmax top-2
     * renormalised, an output head with a bias. Its attention.sliding_window is not read
     * (llama.cpp's phimoe loader does not: every layer sees every earlier position). */
    {.name = "phimoe", .model_names = "Phi-3.5-MoE", .qk_norm = ES_QK_NORM_NONE,
     .rope = ES_ROPE_NEOX, .rope_long_short = true, .topk_renorm = true, .attn_bias = true,
     .attn_out_bias = true, .norm_bias = true, .output_bias = true, .q_prescale = true,
     .output_optional = false, .synth_pre = "default"},
    /* Ling 1.x (llama.cpp's bailingmoe: Ling-lite, Ling-plus, Ling-Coder-lite): q, k and v
     * (fused in attn_qkv as its converter writes them), normal RoPE (rope_freqs where present),
     * no q/k norm, experts on every layer (llama.cpp reads leading_dense_block_count and builds
     * every layer with experts), expert_shared_count shared experts of the experts' width, a
     * softmax router renormalised where expert_weights_norm says and scaled by
     * expert_weights_scale. */
    {.name = "bailingmoe", .model_names = "Ling 1.x", .qk_norm = ES_QK_NORM_NONE,
     .rope = ES_ROPE_NORM, .rope_factors = true, .topk_renorm = false, .output_optional = false,
     .shexp = ES_SHEXP_COUNT, .weights_scale = true, .norm_key = true,
     .synth_pre = "bailingmoe"},
    /* Ling 2.0 (llama.cpp's bailingmoe2: Ling-mini-2.0, Ling-flash-2.0, Ring-2.0, Sarvam-MoE):
     * q, k and v in one fused attn_qkv, per-head q/k RMSNorm before NEOX RoPE on the first
     * rope.dimension_count dims of each head (half in Ling), leading dense layers, shared experts
     * of expert_shared_feed_forward_length each, a router of the file's gating (sigmoid in
     * Ling) with exp_probs_b where present and expert groups, top-k renormalised and scaled as
     * the file says; nextn_predict_layers trailing blocks (multi-token prediction) not run. */
    {.name = "bailingmoe2", .model_names = "Ling 2.0", .qk_norm = ES_QK_NORM_HEAD,
     .rope = ES_ROPE_NEOX, .topk_renorm = false, .output_optional = false, .dense_lead = true,
     .shexp = ES_SHEXP_COUNT_KEYED, .weights_scale = true,
     .gating = ES_GATING_SIGMOID, .router_keys = true, .nextn = true,
     .expert_bias_optional = true, .synth_pre = "bailingmoe2"},
    /* dots.llm1 (llama.cpp's dots1): Qwen3's attention (per-head q/k RMSNorm before NEOX RoPE)
     * with DeepSeek-V3's MoE: leading dense layers, shared experts, a router of the file's
     * gating (sigmoid in dots.llm1) with exp_probs_b where present, top-k renormalised and
     * scaled as the file says. */
    {.name = "dots1", .model_names = "dots.llm1", .qk_norm = ES_QK_NORM_HEAD,
     .rope = ES_ROPE_NEOX, .topk_renorm = false, .output_optional = false, .dense_lead = true,
     .shexp = ES_SHEXP_COUNT, .weights_scale = true, .gating = ES_GATING_SIGMOID,
     .router_keys = true, .expert_bias_optional = true, .synth_pre = "qwen2"},
    /* MiniMax-M2 (llama.cpp's minimax-m2: MiniMax-M2, M2.1, M2.5): q/k RMSNorm over the whole
     * projections (k's over the KV heads), NEOX RoPE on the first rope.dimension_count dims of
     * each head, experts on every layer and no shared ones, a sigmoid router with exp_probs_b,
     * top-k renormalised (llama.cpp passes norm_w true and no scale it reads). */
    {.name = "minimax-m2", .model_names = "MiniMax-M2", .qk_norm = ES_QK_NORM_WHOLE,
     .rope = ES_ROPE_NEOX, .topk_renorm = true, .output_optional = false,
     .gating = ES_GATING_SIGMOID, .expert_bias = true, .synth_pre = "minimax-m2"},
    /* EXAONE-MoE (llama.cpp's exaone-moe: K-EXAONE-236B-A23B): per-head q/k RMSNorm, NEOX RoPE
     * (rope_freqs where present) on the sliding-window layers only (three in four), the others
     * global without RoPE, leading dense layers, one shared expert, a router of the file's
     * gating (sigmoid in K-EXAONE) with exp_probs_b where present, renormalised and scaled as the
     * file says; nextn_predict_layers trailing blocks (multi-token prediction) not run. */
    {.name = "exaone-moe", .model_names = "EXAONE-MoE", .qk_norm = ES_QK_NORM_HEAD,
     .rope = ES_ROPE_NEOX, .rope_factors = true, .topk_renorm = false, .output_optional = false,
     .dense_lead = true, .shexp = ES_SHEXP_ONE_KEY_OR_EXPERT, .weights_scale = true,
     .gating = ES_GATING_SIGMOID, .router_keys = true, .nextn = true,
     .expert_bias_optional = true, .swa = true, .rope_swa_only = true,
     .synth_pre = "exaone-moe"},
    /* SmallThinker (llama.cpp's smallthinker: SmallThinker-21BA3B, -4BA0.6B): the router reads
     * each layer's input before attention (so experts can be fetched during it), ReGLU experts
     * on every layer, a softmax or sigmoid router as the file says, renormalised; with
     * attention.sliding_window, a 4,096-position window and RoPE on three layers in four (from
     * layer 1), the others global without RoPE; no q/k norms, a tied head where the file has no
     * output.weight. */
    {.name = "smallthinker", .model_names = "SmallThinker", .qk_norm = ES_QK_NORM_NONE,
     .rope = ES_ROPE_NEOX, .topk_renorm = true, .output_optional = true,
     .gating = ES_GATING_SOFTMAX, .gating_key = true, .glu_relu = true, .router_pre_attn = true,
     .swa = true, .rope_swa_only = true, .swa_window_4096 = true, .synth_pre = "qwen2"},
};

const es_arch *es_arch_find(const char *name)
{
    for (size_t i = 0; name && i < ES_LEN(families); i++)
        if (strcmp(families[i].name, name) == 0) return &families[i];
    return NULL;
}

const char *es_arch_supported(void)
{
    return "olmoe (OLMoE), qwen3moe (Qwen3-MoE), qwen3vlmoe (Qwen3-VL-MoE), llama (Mixtral), "
           "deepseek (DeepSeek-MoE), lfm2moe (LFM2-MoE), deepseek2 (DeepSeek-V2/V3), qwen2moe "
           "(Qwen2-MoE), gpt-oss (gpt-oss), glm4moe (GLM-4.5/4.6), ernie4_5-moe (ERNIE-4.5-MoE), "
           "llama4 (Llama 4), granitemoe (Granite MoE), hunyuan-moe (Hunyuan-MoE), phimoe "
           "(Phi-3.5-MoE), bailingmoe (Ling 1.x), bailingmoe2 (Ling 2.0), dots1 (dots.llm1), "
           "minimax-m2 (MiniMax-M2), exaone-moe (EXAONE-MoE), smallthinker (SmallThinker)";
}

const es_arch *es_arch_at(int i)
{
    return i >= 0 && (size_t)i < ES_LEN(families) ? &families[i] : NULL;
}

/* With groups: marks eligible[e] for the experts of the n_group_used groups whose two best
 * selection scores sum highest (llama.cpp's group choice for DeepSeek-V3). */
static void route_groups(const es_router *r, const float *score, int n_expert, bool *eligible)
{
    const int per = n_expert / r->n_group;
    float gs[ES_ROUTE_MAX_GROUPS];
    bool used[ES_ROUTE_MAX_GROUPS] = {false};
    for (int g = 0; g < r->n_group; g++) {
        float a = -INFINITY, b = -INFINITY; /* the best two of the group */
        for (int e = g * per; e < (g + 1) * per; e++) {
            if (score[e] > a) {
                b = a;
                a = score[e];
            } else if (score[e] > b) {
                b = score[e];
            }
        }
        gs[g] = a + b;
    }
    for (int j = 0; j < r->n_group_used; j++) {
        int best = -1;
        for (int g = 0; g < r->n_group; g++)
            if (!used[g] && (best < 0 || gs[g] > gs[best])) best = g;
        used[best] = true;
    }
    for (int e = 0; e < n_expert; e++) eligible[e] = used[e / per];
}

void es_arch_route(const es_router *r, const float *logits, int n_expert, int k, const float *bias,
                   float *probs, int *chosen, float *weight)
{
    if (r->gating == ES_GATING_SIGMOID) {
        for (int e = 0; e < n_expert; e++) probs[e] = 1.0f / (1.0f + expf(-logits[e]));
    } else if (r->gating == ES_GATING_SOFTMAX_WEIGHT) { /* ranked by logit; softmax below */
        for (int e = 0; e < n_expert; e++) probs[e] = logits[e];
    } else {
        float mx = -INFINITY;
        for (int e = 0; e < n_expert; e++) mx = logits[e] > mx ? logits[e] : mx;
        double sum = 0.0;
        for (int e = 0; e < n_expert; e++) {
            probs[e] = expf(logits[e] - mx);
            sum += probs[e];
        }
        for (int e = 0; e < n_expert; e++) probs[e] = (float)(probs[e] / sum);
    }
    float score[ES_ROUTE_MAX_EXPERTS];
    bool eligible[ES_ROUTE_MAX_EXPERTS];
    for (int e = 0; e < n_expert; e++) {
        score[e] = r->by_logit ? logits[e] : probs[e];
        if (bias) score[e] += bias[e];
        eligible[e] = true;
    }
    if (r->n_group > 1) route_groups(r, score, n_expert, eligible);
    for (int j = 0; j < k; j++) { /* selection: k is small */
        int best = -1;
        for (int e = 0; e < n_expert; e++) {
            bool taken = !eligible[e];
            for (int i = 0; i < j; i++) taken = taken || chosen[i] == e;
            if (!taken && (best < 0 || score[e] > score[best])) best = e;
        }
        chosen[j] = best;
        weight[j] = probs[best];
    }
    if (r->gating == ES_GATING_SOFTMAX_WEIGHT) { /* as ggml's soft_max over the k (max first) */
        float mx = -INFINITY;
        for (int j = 0; j < k; j++) mx = weight[j] > mx ? weight[j] : mx;
        double sum = 0.0;
        for (int j = 0; j < k; j++) {
            weight[j] = expf(weight[j] - mx);
            sum += weight[j];
        }
        const float inv = (float)(1.0 / sum);
        for (int j = 0; j < k; j++) weight[j] *= inv;
    }
    if (r->renorm) {
        float wsum = 0.0f;
        for (int j = 0; j < k; j++) wsum += weight[j];
        wsum = wsum > 6.103515625e-5f ? wsum : 6.103515625e-5f;
        for (int j = 0; j < k; j++) weight[j] /= wsum;
    }
    if (r->scale != 0.0f && r->scale != 1.0f)
        for (int j = 0; j < k; j++) weight[j] *= r->scale;
}
