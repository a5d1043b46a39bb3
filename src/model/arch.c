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
    /* llama with experts: Mixtral. No q/k norm, normal RoPE, top-k renormalised. */
    {.name = "llama", .model_names = "Mixtral", .qk_norm = ES_QK_NORM_NONE, .rope = ES_ROPE_NORM,
     .topk_renorm = true, .output_optional = true, .synth_pre = "llama-bpe"},
    /* DeepSeek-MoE: leading dense layers, shared experts, normal RoPE, no q/k norm, softmax
     * top-k not renormalised but scaled by expert_weights_scale. */
    {.name = "deepseek", .model_names = "DeepSeek-MoE", .qk_norm = ES_QK_NORM_NONE,
     .rope = ES_ROPE_NORM, .topk_renorm = false, .output_optional = true, .dense_lead = true,
     .shared_experts = true, .weights_scale = true, .synth_pre = "deepseek-llm"},
    /* LFM2-MoE: short-convolution blocks where head_count_kv is 0 and GQA attention with
     * per-head q/k RMSNorm elsewhere, NEOX RoPE, leading dense layers, a sigmoid router whose
     * expert bias steers the choice, top-k renormalised; the final norm is token_embd_norm. */
    {.name = "lfm2moe", .model_names = "LFM2-MoE", .qk_norm = ES_QK_NORM_HEAD,
     .rope = ES_ROPE_NEOX, .topk_renorm = true, .output_optional = true, .dense_lead = true,
     .gating = ES_GATING_SIGMOID, .expert_bias = true, .conv_layers = true,
     .output_norm = "token_embd_norm.weight", .synth_pre = "lfm2"},
    /* DeepSeek-V2 (-Lite): multi-head latent attention without q LoRA, normal RoPE (with YaRN
     * in the released models) on the rope part of each head, a leading dense layer, shared
     * experts, softmax top-k scaled by expert_weights_scale and renormalised only where the
     * file sets expert_weights_norm. */
    {.name = "deepseek2", .model_names = "DeepSeek-V2-Lite", .qk_norm = ES_QK_NORM_NONE,
     .rope = ES_ROPE_NORM, .topk_renorm = false, .output_optional = true, .dense_lead = true,
     .shared_experts = true, .weights_scale = true, .mla = true, .synth_pre = "deepseek-llm"},
};

const es_arch *es_arch_find(const char *name)
{
    for (size_t i = 0; name && i < ES_LEN(families); i++)
        if (strcmp(families[i].name, name) == 0) return &families[i];
    return NULL;
}

const char *es_arch_supported(void)
{
    return "olmoe (OLMoE), qwen3moe (Qwen3-MoE), llama (Mixtral), deepseek (DeepSeek-MoE), "
           "lfm2moe (LFM2-MoE), deepseek2 (DeepSeek-V2-Lite)";
}

void es_arch_route(const es_arch *a, bool renorm, const float *logits, int n_expert, int k,
                   float scale, const float *bias, float *probs, int *chosen, float *weight)
{
    if (a->gating == ES_GATING_SIGMOID) {
        for (int e = 0; e < n_expert; e++) probs[e] = 1.0f / (1.0f + expf(-logits[e]));
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
    for (int j = 0; j < k; j++) { /* selection: k is small */
        int best = -1;
        float best_score = 0.0f;
        for (int e = 0; e < n_expert; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++) taken = taken || chosen[i] == e;
            const float score = bias ? probs[e] + bias[e] : probs[e];
            if (!taken && (best < 0 || score > best_score)) {
                best = e;
                best_score = score;
            }
        }
        chosen[j] = best;
        weight[j] = probs[best];
    }
    if (renorm) {
        float wsum = 0.0f;
        for (int j = 0; j < k; j++) wsum += weight[j];
        wsum = wsum > 6.103515625e-5f ? wsum : 6.103515625e-5f;
        for (int j = 0; j < k; j++) weight[j] /= wsum;
    }
    if (scale != 0.0f && scale != 1.0f)
        for (int j = 0; j < k; j++) weight[j] *= scale;
}
