/* The synthetic models' presets (synth_presets.h). */
#include "model/synth_presets.h"

#include "estream_tools.h"

#include <stddef.h>
#include <string.h>


/* Sizes from each model's config.json on Hugging Face where a preset is named after a model. */
static const es_synth_preset presets[] = {
    /* tiny: every code path (several experts, top-k > 1, 32-multiple rows), for tests. llama.cpp's
     * olmoe wants attn_k_norm over n_embd, so it cannot load grouped-query attention: tiny-gqa
     * (2 KV heads) covers GQA for estream's own paths only. */
    {.name = "tiny", .arch = "olmoe", .n_vocab = 320, .n_ctx = 512, .n_embd = 64, .n_layer = 2,
     .n_head = 4, .n_head_kv = 4, .n_ff_exp = 64, .n_expert = 8, .n_expert_used = 2,
     .rope_base = 1e4f, .rms_eps = 1e-5f},
    {.name = "tiny-gqa", .arch = "olmoe", .n_vocab = 320, .n_ctx = 512, .n_embd = 64,
     .n_layer = 2, .n_head = 4, .n_head_kv = 2, .n_ff_exp = 64, .n_expert = 8,
     .n_expert_used = 2, .rope_base = 1e4f, .rms_eps = 1e-5f},
    /* small: the sizes where the fast path splits its work, for tests that must see it: hidden
     * 320 and FFN 288 exceed every column chunk (128) with a tail, top-4 of 8 routes a busy
     * expert past the plan's 512-row block at ~600 tokens, and a context for several key blocks. */
    {.name = "small", .arch = "olmoe", .n_vocab = 320, .n_ctx = 1024, .n_embd = 320,
     .n_layer = 2, .n_head = 5, .n_head_kv = 5, .n_ff_exp = 288, .n_expert = 8,
     .n_expert_used = 4, .rope_base = 1e4f, .rms_eps = 1e-5f},
    {.name = "mini", .arch = "olmoe", .n_vocab = 1024, .n_ctx = 2048, .n_embd = 512,
     .n_layer = 4, .n_head = 8, .n_head_kv = 8, .n_ff_exp = 512, .n_expert = 32,
     .n_expert_used = 4, .rope_base = 1e4f, .rms_eps = 1e-5f},
    {.name = "olmoe-1b-7b", .arch = "olmoe", .n_vocab = 50304, .n_ctx = 4096, .n_embd = 2048,
     .n_layer = 16, .n_head = 16, .n_head_kv = 16, .n_ff_exp = 1024, .n_expert = 64,
     .n_expert_used = 8, .rope_base = 1e4f, .rms_eps = 1e-5f},
    /* tiny-qwen3moe: GQA, a head size (32) that is not hidden / heads (16), per-head q/k norms,
     * top-k renormalised and a tied output head, as small Qwen3 models have. */
    {.name = "tiny-qwen3moe", .arch = "qwen3moe", .n_vocab = 320, .n_ctx = 512, .n_embd = 64,
     .n_layer = 2, .n_head = 4, .n_head_kv = 2, .n_embd_head = 32, .n_ff_exp = 64,
     .n_expert = 8, .n_expert_used = 2, .rope_base = 1e6f, .rms_eps = 1e-6f, .tied = true,
     .n_ff = 512},
    /* tiny-qwen3vlmoe: tiny-qwen3moe as Qwen3-VL-MoE's language model; its sections leave
     * two of the 16 pairs to the fourth axis, as Qwen3-VL's [24, 20, 20, 0] leave two of 64; a
     * RoPE base of 10,000, so that those pairs would turn visibly over the tests' positions */
    {.name = "tiny-qwen3vlmoe", .arch = "qwen3vlmoe", .n_vocab = 320, .n_ctx = 512, .n_embd = 64,
     .n_layer = 2, .n_head = 4, .n_head_kv = 2, .n_embd_head = 32, .n_ff_exp = 64,
     .n_expert = 8, .n_expert_used = 2, .rope_base = 1e4f, .rms_eps = 1e-6f, .tied = true,
     .n_ff = 512, .rope_sections = {6, 4, 4, 2}, .n_deepstack = 2},
    /* tiny-qwen3moe-yarn: the same with YaRN scaling x4 of 64 positions, as long-context
     * Qwen3 files carry it (x4 of 32,768) */
    {.name = "tiny-qwen3moe-yarn", .arch = "qwen3moe", .n_vocab = 320, .n_ctx = 512, .n_embd = 64,
     .n_layer = 2, .n_head = 4, .n_head_kv = 2, .n_embd_head = 32, .n_ff_exp = 64,
     .n_expert = 8, .n_expert_used = 2, .rope_base = 1e6f, .rms_eps = 1e-6f, .tied = true,
     .n_ff = 512, .yarn_factor = 4.0f, .yarn_orig_ctx = 64},
    /* tiny-qwen3moe-vocab: tiny-qwen3moe with Qwen3's 151,936-token vocabulary and a context of
     * 4,096: the head's memory with a real vocabulary, on a model that runs in seconds */
    {.name = "tiny-qwen3moe-vocab", .arch = "qwen3moe", .n_vocab = 151936, .n_ctx = 4096,
     .n_embd = 64, .n_layer = 2, .n_head = 4, .n_head_kv = 2, .n_embd_head = 32, .n_ff_exp = 64,
     .n_expert = 8, .n_expert_used = 2, .rope_base = 1e6f, .rms_eps = 1e-6f, .tied = true,
     .n_ff = 512},
    {.name = "qwen3-30b-a3b", .arch = "qwen3moe", .n_vocab = 151936, .n_ctx = 40960,
     .n_embd = 2048, .n_layer = 48, .n_head = 32, .n_head_kv = 4, .n_embd_head = 128,
     .n_ff_exp = 768, .n_expert = 128, .n_expert_used = 8, .rope_base = 1e6f, .rms_eps = 1e-6f,
     .n_ff = 6144},
    /* tiny-mixtral: llama with experts, GQA, normal RoPE, top-2 of 8 renormalised. */
    {.name = "tiny-mixtral", .arch = "llama", .n_vocab = 320, .n_ctx = 512, .n_embd = 64,
     .n_layer = 2, .n_head = 4, .n_head_kv = 2, .n_ff_exp = 64, .n_expert = 8,
     .n_expert_used = 2, .rope_base = 1e6f, .rms_eps = 1e-5f},
    /* tiny-mixtral-l3: tiny-mixtral with llama3's RoPE frequency factors (rope_freqs.weight, x8
     * of 64 positions), as mixtures built of Llama 3 models carry them */
    {.name = "tiny-mixtral-l3", .arch = "llama", .n_vocab = 320, .n_ctx = 512, .n_embd = 64,
     .n_layer = 2, .n_head = 4, .n_head_kv = 2, .n_ff_exp = 64, .n_expert = 8,
     .n_expert_used = 2, .rope_base = 5e5f, .rms_eps = 1e-5f, .l3_factor = 8.0f, .l3_low = 1.0f,
     .l3_high = 4.0f, .l3_orig_ctx = 64},
    {.name = "mixtral-8x7b", .arch = "llama", .n_vocab = 32000, .n_ctx = 32768, .n_embd = 4096,
     .n_layer = 32, .n_head = 32, .n_head_kv = 8, .n_ff_exp = 14336, .n_expert = 8,
     .n_expert_used = 2, .rope_base = 1e6f, .rms_eps = 1e-5f},
    /* tiny-deepseek: a dense first layer, then MoE layers with 2 shared experts; top-2 of 8 as
     * is, scaled by expert_weights_scale. */
    {.name = "tiny-deepseek", .arch = "deepseek", .n_vocab = 320, .n_ctx = 512, .n_embd = 64,
     .n_layer = 3, .n_head = 4, .n_head_kv = 4, .n_ff_exp = 32, .n_expert = 8,
     .n_expert_used = 2, .rope_base = 1e4f, .rms_eps = 1e-6f, .n_ff = 128, .n_dense_lead = 1,
     .n_shared = 2, .weights_scale = 1.5f},
    /* small-*: hidden 256 and FFNs of multiples of 256, so that llama-quantize can write the
     * K-quant mixes of real downloads (Q4_K_M, Q5_K_M) of them */
    {.name = "small-qwen3moe", .arch = "qwen3moe", .n_vocab = 320, .n_ctx = 512, .n_embd = 256,
     .n_layer = 2, .n_head = 4, .n_head_kv = 2, .n_embd_head = 128, .n_ff_exp = 256,
     .n_expert = 8, .n_expert_used = 2, .rope_base = 1e6f, .rms_eps = 1e-6f, .n_ff = 1024},
    {.name = "small-mixtral", .arch = "llama", .n_vocab = 320, .n_ctx = 512, .n_embd = 256,
     .n_layer = 2, .n_head = 4, .n_head_kv = 2, .n_ff_exp = 256, .n_expert = 8,
     .n_expert_used = 2, .rope_base = 1e6f, .rms_eps = 1e-5f},
    {.name = "small-deepseek", .arch = "deepseek", .n_vocab = 320, .n_ctx = 512, .n_embd = 256,
     .n_layer = 3, .n_head = 4, .n_head_kv = 4, .n_ff_exp = 256, .n_expert = 8,
     .n_expert_used = 2, .rope_base = 1e4f, .rms_eps = 1e-6f, .n_ff = 512, .n_dense_lead = 1,
     .n_shared = 2, .weights_scale = 1.0f},
    {.name = "deepseek-moe-16b", .arch = "deepseek", .n_vocab = 102400, .n_ctx = 4096,
     .n_embd = 2048, .n_layer = 28, .n_head = 16, .n_head_kv = 16, .n_ff_exp = 1408,
     .n_expert = 64, .n_expert_used = 6, .rope_base = 1e4f, .rms_eps = 1e-6f, .n_ff = 10944,
     .n_dense_lead = 1, .n_shared = 2, .weights_scale = 1.0f},
    /* tiny-lfm2moe: a dense short-conv first layer, then attention, conv, attention MoE layers
     * with a sigmoid router and expert bias, per-head q/k norms, GQA */
    {.name = "tiny-lfm2moe", .arch = "lfm2moe", .n_vocab = 320, .n_ctx = 512, .n_embd = 64,
     .n_layer = 4, .n_head = 4, .n_head_kv = 2, .n_ff_exp = 64, .n_expert = 8,
     .n_expert_used = 2, .rope_base = 1e6f, .rms_eps = 1e-5f, .n_ff = 128, .n_dense_lead = 1,
     .kinds = "caca", .tied = true},
    {.name = "small-lfm2moe", .arch = "lfm2moe", .n_vocab = 320, .n_ctx = 512, .n_embd = 256,
     .n_layer = 4, .n_head = 4, .n_head_kv = 2, .n_ff_exp = 256, .n_expert = 8,
     .n_expert_used = 2, .rope_base = 1e6f, .rms_eps = 1e-5f, .n_ff = 512, .n_dense_lead = 1,
     .kinds = "caca"},
    /* LFM2-8B-A1B: 24 layers, 6 of them GQA attention (the others short convolutions, 3 taps;
     * the attention layers' positions approximate the released model's, which cost the same),
     * the first 2 dense, 32 experts top-4, tied head */
    {.name = "lfm2-8b-a1b", .arch = "lfm2moe", .n_vocab = 65536, .n_ctx = 128000,
     .n_embd = 2048, .n_layer = 24, .n_head = 32, .n_head_kv = 8, .n_ff_exp = 1792,
     .n_expert = 32, .n_expert_used = 4, .rope_base = 1e6f, .rms_eps = 1e-5f, .n_ff = 7168,
     .n_dense_lead = 2, .kinds = "ccaccaccaccaccaccacccacc", .tied = true},
    /* tiny-deepseek2: multi-head latent attention without q LoRA (latent 64, heads of 32 + 16
     * rope, values of 32), YaRN as DeepSeek-V2-Lite's, a dense first layer, 2 shared experts.
     * llama.cpp treats a deepseek2 file as q-LoRA-less (-Lite) only at 26 or 27 layers or where
     * attention.q_lora_rank is 0, which the small presets write. */
    {.name = "tiny-deepseek2", .arch = "deepseek2", .n_vocab = 320, .n_ctx = 512, .n_embd = 64,
     .n_layer = 3, .n_head = 4, .n_head_kv = 4, .n_embd_head = 48, .n_ff_exp = 32,
     .n_expert = 8, .n_expert_used = 2, .rope_base = 1e4f, .rms_eps = 1e-6f, .n_ff = 128,
     .n_dense_lead = 1, .n_shared = 2, .weights_scale = 1.0f, .kv_lora = 64, .qk_rope = 16,
     .v_head = 32, .yarn_factor = 40.0f, .yarn_orig_ctx = 4096, .yarn_mscale_all = 0.707f},
    {.name = "tiny-deepseek2-joined", .arch = "deepseek2", .n_vocab = 320, .n_ctx = 512,
     .n_embd = 64, .n_layer = 3, .n_head = 4, .n_head_kv = 4, .n_embd_head = 48, .n_ff_exp = 32,
     .n_expert = 8, .n_expert_used = 2, .rope_base = 1e4f, .rms_eps = 1e-6f, .n_ff = 128,
     .n_dense_lead = 1, .n_shared = 2, .weights_scale = 1.0f, .kv_lora = 64, .qk_rope = 16,
     .v_head = 32, .yarn_factor = 40.0f, .yarn_orig_ctx = 4096, .yarn_mscale_all = 0.707f,
     .mla_joined = true},
    {.name = "small-deepseek2", .arch = "deepseek2", .n_vocab = 320, .n_ctx = 512,
     .n_embd = 256, .n_layer = 3, .n_head = 4, .n_head_kv = 4, .n_embd_head = 192,
     .n_ff_exp = 256, .n_expert = 8, .n_expert_used = 2, .rope_base = 1e4f, .rms_eps = 1e-6f,
     .n_ff = 512, .n_dense_lead = 1, .n_shared = 2, .weights_scale = 1.0f, .kv_lora = 256,
     .qk_rope = 64, .v_head = 128, .yarn_factor = 40.0f, .yarn_orig_ctx = 4096,
     .yarn_mscale_all = 0.707f},
    /* tiny-deepseek3: DeepSeek-V3's kind of deepseek2 file (DeepSeek-V3/R1, Kimi-K2, GLM-4.7-
     * Flash): queries through q LoRA (rank 64), a sigmoid router with a selection bias whose
     * top-4 of 16 experts come from the best 2 of 4 groups, renormalised and scaled by 2.5, one
     * shared expert, YaRN x40 of 4,096 (mscale_all_dim 0.707, V2-Lite's: with DeepSeek-V3's 1.0
     * this file's Q4_0 logits meet activation-rounding near-ties against llama.cpp's, one to
     * three positions per seed, as llama.cpp's own builds do among themselves) */
    {.name = "tiny-deepseek3", .arch = "deepseek2", .n_vocab = 320, .n_ctx = 512, .n_embd = 64,
     .n_layer = 3, .n_head = 4, .n_head_kv = 4, .n_embd_head = 48, .n_ff_exp = 32,
     .n_expert = 16, .n_expert_used = 4, .rope_base = 1e4f, .rms_eps = 1e-6f, .n_ff = 128,
     .n_dense_lead = 1, .n_shared = 1, .weights_scale = 2.5f, .kv_lora = 64, .qk_rope = 16,
     .v_head = 32, .yarn_factor = 40.0f, .yarn_orig_ctx = 4096, .yarn_mscale_all = 0.707f,
     .q_lora = 64, .v3_router = true, .n_group = 4, .n_group_used = 2},
    /* Moonlight-16B-A3B (Kimi's DeepSeek-V3-kind model without q LoRA): 27 layers (the first
     * dense), 16 heads of 128 + 64 rope, latent 512, values of 128, 64 experts top-6 + 2 shared,
     * sigmoid router with selection bias, renormalised, x2.446 */
    {.name = "moonlight-16b-a3b", .arch = "deepseek2", .n_vocab = 163840, .n_ctx = 8192,
     .n_embd = 2048, .n_layer = 27, .n_head = 16, .n_head_kv = 16, .n_embd_head = 192,
     .n_ff_exp = 1408, .n_expert = 64, .n_expert_used = 6, .rope_base = 5e4f, .rms_eps = 1e-5f,
     .n_ff = 11264, .n_dense_lead = 1, .n_shared = 2, .weights_scale = 2.446f, .kv_lora = 512,
     .qk_rope = 64, .v_head = 128, .v3_router = true},
    /* DeepSeek-V2-Lite: 27 layers (the first dense), 16 heads of 128 + 64 rope, latent 512,
     * values of 128, 64 experts top-6 + 2 shared, YaRN x40 of 4,096 */
    {.name = "deepseek-v2-lite", .arch = "deepseek2", .n_vocab = 102400, .n_ctx = 163840,
     .n_embd = 2048, .n_layer = 27, .n_head = 16, .n_head_kv = 16, .n_embd_head = 192,
     .n_ff_exp = 1408, .n_expert = 64, .n_expert_used = 6, .rope_base = 1e4f, .rms_eps = 1e-6f,
     .n_ff = 10944, .n_dense_lead = 1, .n_shared = 2, .weights_scale = 1.0f, .kv_lora = 512,
     .qk_rope = 64, .v_head = 128, .yarn_factor = 40.0f, .yarn_orig_ctx = 4096,
     .yarn_mscale_all = 0.707f},
    /* tiny-qwen2moe: Qwen2-MoE's graph in small: q/k/v biases, 4 heads (2 KV), 8 experts of 32
     * top-2 as chosen (no renormalisation), a shared expert of 96 gated by a sigmoid */
    {.name = "tiny-qwen2moe", .arch = "qwen2moe", .n_vocab = 320, .n_ctx = 512, .n_embd = 64,
     .n_layer = 2, .n_head = 4, .n_head_kv = 2, .n_ff_exp = 32, .n_expert = 8,
     .n_expert_used = 2, .rope_base = 1e6f, .rms_eps = 1e-6f, .n_ff = 128, .n_ff_shexp = 96},
    /* Qwen1.5-MoE-A2.7B: 24 layers of 2048, 16 heads, 60 experts of 1408 top-4, a shared expert
     * of 5632, vocab 151936 */
    {.name = "qwen1.5-moe-a2.7b", .arch = "qwen2moe", .n_vocab = 151936, .n_ctx = 8192,
     .n_embd = 2048, .n_layer = 24, .n_head = 16, .n_head_kv = 16, .n_ff_exp = 1408,
     .n_expert = 60, .n_expert_used = 4, .rope_base = 1e6f, .rms_eps = 1e-6f, .n_ff = 5632,
     .n_ff_shexp = 5632},
    /* tiny-gptoss: gpt-oss's graph in small: 4 query heads of 32 over 2 KV heads (wider than
     * the hidden size, as gpt-oss's 64 x 64 over 2,880), a window of 40 positions on layer 0 (and
     * 2), YaRN x4 of 128, top-2 of 8 biased experts; the expert biases are wide enough that the
     * clamped SwiGLU's limits of 7 are met. */
    {.name = "tiny-gptoss", .arch = "gpt-oss", .n_vocab = 320, .n_ctx = 512, .n_embd = 64,
     .n_layer = 3, .n_head = 4, .n_head_kv = 2, .n_embd_head = 32, .n_ff_exp = 64,
     .n_expert = 8, .n_expert_used = 2, .rope_base = 1.5e5f, .rms_eps = 1e-5f, .n_ff = 64,
     .yarn_factor = 4.0f, .yarn_orig_ctx = 128, .n_swa = 40},
    /* small-gptoss: tiny-gptoss at sizes where the expert operator splits its columns (hidden
     * 320, expert FFN 288: chunks of 128 with a partial last one), 4 heads of 64 over 2 KV */
    {.name = "small-gptoss", .arch = "gpt-oss", .n_vocab = 320, .n_ctx = 1024, .n_embd = 320,
     .n_layer = 2, .n_head = 4, .n_head_kv = 2, .n_embd_head = 64, .n_ff_exp = 288,
     .n_expert = 8, .n_expert_used = 2, .rope_base = 1.5e5f, .rms_eps = 1e-5f, .n_ff = 288,
     .yarn_factor = 4.0f, .yarn_orig_ctx = 128, .n_swa = 40},
    /* gpt-oss-20b: 24 layers of 2,880, 64 heads of 64 over 8 KV heads, 32 experts of 2,880
     * top-4, windows of 128 on every other layer, YaRN x32 of 4,096 (config.json) */
    {.name = "gpt-oss-20b", .arch = "gpt-oss", .n_vocab = 201088, .n_ctx = 131072,
     .n_embd = 2880, .n_layer = 24, .n_head = 64, .n_head_kv = 8, .n_embd_head = 64,
     .n_ff_exp = 2880, .n_expert = 32, .n_expert_used = 4, .rope_base = 1.5e5f,
     .rms_eps = 1e-5f, .n_ff = 2880, .yarn_factor = 32.0f, .yarn_orig_ctx = 4096, .n_swa = 128},
    /* tiny-glm4moe: GLM-4.5-Air's graph in small: 4 heads of 32 over 2 KV heads (wider than
     * the hidden size, as 96 x 128 over 4,096), q/k/v biases, RoPE on half of each head, a dense
     * first layer, 8 experts of 32 top-2 and one shared, a sigmoid router with selection bias,
     * renormalised and scaled by 2.5 (GLM-4.5's routed_scaling_factor), one multi-token
     * prediction block after the 3 that run */
    {.name = "tiny-glm4moe", .arch = "glm4moe", .n_vocab = 320, .n_ctx = 512, .n_embd = 64,
     .n_layer = 3, .n_head = 4, .n_head_kv = 2, .n_embd_head = 32, .n_ff_exp = 32,
     .n_expert = 8, .n_expert_used = 2, .rope_base = 1e6f, .rms_eps = 1e-5f, .n_ff = 128,
     .n_dense_lead = 1, .n_shared = 1, .weights_scale = 2.5f, .v3_router = true, .n_rot = 16,
     .n_nextn = 1},
    /* small-glm4moe: GLM-4.5 (355B)'s graph (per-head q/k norms) at sizes K-quants fit: hidden
     * 256, heads of 64 (RoPE on 32), experts of 256 */
    {.name = "small-glm4moe", .arch = "glm4moe", .n_vocab = 320, .n_ctx = 512, .n_embd = 256,
     .n_layer = 3, .n_head = 4, .n_head_kv = 2, .n_embd_head = 64, .n_ff_exp = 256,
     .n_expert = 8, .n_expert_used = 2, .rope_base = 1e6f, .rms_eps = 1e-5f, .n_ff = 512,
     .n_dense_lead = 1, .n_shared = 1, .weights_scale = 2.5f, .v3_router = true, .n_rot = 32,
     .qk_norm = true, .n_nextn = 1},
    /* GLM-4.5-Air: 46 layers of 4,096 (and one MTP block), 96 heads of 128 over 8 KV heads, RoPE
     * on 64 dims, a dense first layer of 10,944, 128 experts of 1,408 top-8 and one shared,
     * vocab 151,552 (config.json) */
    {.name = "glm-4.5-air", .arch = "glm4moe", .n_vocab = 151552, .n_ctx = 131072,
     .n_embd = 4096, .n_layer = 46, .n_head = 96, .n_head_kv = 8, .n_embd_head = 128,
     .n_ff_exp = 1408, .n_expert = 128, .n_expert_used = 8, .rope_base = 1e6f, .rms_eps = 1e-5f,
     .n_ff = 10944, .n_dense_lead = 1, .n_shared = 1, .weights_scale = 1.0f, .v3_router = true,
     .n_rot = 64, .n_nextn = 1},
    /* tiny-ernie: ERNIE-4.5-21B-A3B's graph in small: 4 heads (2 KV), q/k/v biases, normal
     * RoPE, a dense first layer, 8 experts of 32 top-2 by a softmax with a selection bias,
     * renormalised, one shared expert of 64 */
    {.name = "tiny-ernie", .arch = "ernie4_5-moe", .n_vocab = 320, .n_ctx = 512, .n_embd = 64,
     .n_layer = 3, .n_head = 4, .n_head_kv = 2, .n_ff_exp = 32, .n_expert = 8,
     .n_expert_used = 2, .rope_base = 5e5f, .rms_eps = 1e-5f, .n_ff = 128, .n_dense_lead = 1,
     .n_ff_shexp = 64, .sel_bias = true},
    /* ERNIE-4.5-21B-A3B: 28 layers of 2,560, 20 heads of 128 over 4 KV heads, a dense first
     * layer of 12,288, 64 experts of 1,536 top-6 and a shared FFN of 3,072, vocab 103,424
     * (config.json) */
    {.name = "ernie-4.5-21b-a3b", .arch = "ernie4_5-moe", .n_vocab = 103424, .n_ctx = 131072,
     .n_embd = 2560, .n_layer = 28, .n_head = 20, .n_head_kv = 4, .n_embd_head = 128,
     .n_ff_exp = 1536, .n_expert = 64, .n_expert_used = 6, .rope_base = 5e5f, .rms_eps = 1e-5f,
     .n_ff = 12288, .n_dense_lead = 1, .n_ff_shexp = 3072, .sel_bias = true},
    /* tiny-llama4: Llama 4's graph in small, Maverick's interleave (experts on every other
     * layer, dense FFNs of 128 between), 8 layers so that two NoPE layers and six chunked ones
     * run, 4 heads of 32 over 2 KV heads, 8 experts of 64 top-1 plus the shared one, llama3's
     * frequency factors (x8 of 64 positions: the pairs span all three branches), a context for
     * prompts past the 8,192-position chunk */
    {.name = "tiny-llama4", .arch = "llama4", .n_vocab = 320, .n_ctx = 16384, .n_embd = 64,
     .n_layer = 8, .n_head = 4, .n_head_kv = 2, .n_embd_head = 32, .n_ff_exp = 64,
     .n_expert = 8, .n_expert_used = 1, .rope_base = 5e5f, .rms_eps = 1e-5f, .n_ff = 128,
     .n_shared = 1, .moe_step = 2, .l3_factor = 8.0f, .l3_low = 1.0f, .l3_high = 4.0f,
     .l3_orig_ctx = 64},
    /* Llama-4-Scout-17B-16E: 48 layers of 5,120, 40 heads of 128 over 8 KV heads, 16 experts of
     * 8,192 top-1 and a shared one on every layer, vocab 202,048, llama3 scaling x16 of 8,192
     * (config.json) */
    {.name = "llama-4-scout", .arch = "llama4", .n_vocab = 202048, .n_ctx = 10485760,
     .n_embd = 5120, .n_layer = 48, .n_head = 40, .n_head_kv = 8, .n_embd_head = 128,
     .n_ff_exp = 8192, .n_expert = 16, .n_expert_used = 1, .rope_base = 5e5f, .rms_eps = 1e-5f,
     .n_ff = 16384, .n_shared = 1, .moe_step = 1, .l3_factor = 16.0f, .l3_low = 1.0f,
     .l3_high = 1.0f, .l3_orig_ctx = 8192},
    /* tiny-granitemoe: Granite MoE's graph in small: 4 heads of 16 over 2 KV heads, 8 experts
     * of 32 top-3 renormalised, a tied head, muP's multipliers as Granite 3's config.json sets
     * them (embedding 12, residual 0.22, attention 1/64, logits over 6) */
    {.name = "tiny-granitemoe", .arch = "granitemoe", .n_vocab = 320, .n_ctx = 512, .n_embd = 64,
     .n_layer = 3, .n_head = 4, .n_head_kv = 2, .n_ff_exp = 32, .n_expert = 8,
     .n_expert_used = 3, .rope_base = 1e7f, .rms_eps = 1e-6f, .tied = true, .embd_scale = 12.0f,
     .resid_scale = 0.22f, .attn_scale = 0.015625f, .logit_scale = 6.0f},
    /* tiny-granitemoe-shared: the same with GraniteMoeShared's ungated shared expert of 64 */
    {.name = "tiny-granitemoe-shared", .arch = "granitemoe", .n_vocab = 320, .n_ctx = 512,
     .n_embd = 64, .n_layer = 3, .n_head = 4, .n_head_kv = 2, .n_ff_exp = 32, .n_expert = 8,
     .n_expert_used = 3, .rope_base = 1e7f, .rms_eps = 1e-6f, .tied = true, .n_ff_shexp = 64,
     .embd_scale = 12.0f, .resid_scale = 0.22f, .attn_scale = 0.015625f, .logit_scale = 6.0f},
    /* granite-3.1-3b-a800m: 32 layers of 1,536, 24 heads of 64 over 8 KV heads, 40 experts of
     * 512 top-8, a tied head, vocab 49,155, RoPE base 1e7, muP's multipliers (config.json) */
    {.name = "granite-3.1-3b-a800m", .arch = "granitemoe", .n_vocab = 49155, .n_ctx = 131072,
     .n_embd = 1536, .n_layer = 32, .n_head = 24, .n_head_kv = 8, .n_ff_exp = 512,
     .n_expert = 40, .n_expert_used = 8, .rope_base = 1e7f, .rms_eps = 1e-6f, .tied = true,
     .embd_scale = 12.0f, .resid_scale = 0.22f, .attn_scale = 0.015625f, .logit_scale = 6.0f},
    /* tiny-hunyuan: Hunyuan-A13B's graph in small: 4 heads of 16 over 2 KV heads with per-head
     * q/k norms after NEOX RoPE, 8 experts of 32 top-2 renormalised, one shared expert of 64 */
    {.name = "tiny-hunyuan", .arch = "hunyuan-moe", .n_vocab = 320, .n_ctx = 512, .n_embd = 64,
     .n_layer = 3, .n_head = 4, .n_head_kv = 2, .n_ff_exp = 32, .n_expert = 8,
     .n_expert_used = 2, .rope_base = 1e6f, .rms_eps = 1e-5f, .n_ff = 32, .n_shared = 1,
     .n_ff_shexp = 64},
    /* Hunyuan-A13B: 32 layers of 4,096, 32 heads of 128 over 8 KV heads, 64 experts of 3,072
     * top-8 and a shared FFN of 3,072, vocab 128,167, the converter's NTK-alpha RoPE base
     * (10,000 x 1000^(128/126)), context 256K (config.json, conversion/hunyuan.py) */
    {.name = "hunyuan-a13b", .arch = "hunyuan-moe", .n_vocab = 128167, .n_ctx = 262144,
     .n_embd = 4096, .n_layer = 32, .n_head = 32, .n_head_kv = 8, .n_ff_exp = 3072,
     .n_expert = 64, .n_expert_used = 8, .rope_base = 11158840.0f, .rms_eps = 1e-5f,
     .n_ff = 3072, .n_shared = 1, .n_ff_shexp = 3072},
    /* tiny-phimoe: Phi-3.5-MoE's graph in small: 4 heads of 16 over 2 KV heads, 8 experts of
     * 64 top-2, LongRoPE of 256 positions within 1,024 (a 114-token text turns by the short
     * factors, 342 tokens by the long ones), a sliding window key its loader ignores */
    {.name = "tiny-phimoe", .arch = "phimoe", .n_vocab = 320, .n_ctx = 1024, .n_embd = 64,
     .n_layer = 2, .n_head = 4, .n_head_kv = 2, .n_ff_exp = 64, .n_expert = 8,
     .n_expert_used = 2, .rope_base = 1e4f, .rms_eps = 1e-5f, .n_swa = 32, .lr_orig_ctx = 256},
    /* Phi-3.5-MoE-instruct: 32 layers of 4,096, 32 heads of 128 over 8 KV heads, 16 experts of
     * 6,400 top-2, vocab 32,064, LongRoPE from 4,096 to 131,072 positions (config.json) */
    {.name = "phi-3.5-moe", .arch = "phimoe", .n_vocab = 32064, .n_ctx = 131072, .n_embd = 4096,
     .n_layer = 32, .n_head = 32, .n_head_kv = 8, .n_ff_exp = 6400, .n_expert = 16,
     .n_expert_used = 2, .rope_base = 1e4f, .rms_eps = 1e-5f, .lr_orig_ctx = 4096},
    /* tiny-qwen2moe-qkv: tiny-qwen2moe with q, k and v (and their biases) in one attn_qkv, the
     * same values: its logits are tiny-qwen2moe's */
    {.name = "tiny-qwen2moe-qkv", .arch = "qwen2moe", .n_vocab = 320, .n_ctx = 512, .n_embd = 64,
     .n_layer = 2, .n_head = 4, .n_head_kv = 2, .n_ff_exp = 32, .n_expert = 8,
     .n_expert_used = 2, .rope_base = 1e6f, .rms_eps = 1e-6f, .n_ff = 128, .n_ff_shexp = 96,
     .fused_qkv = true},
    /* tiny-bailingmoe2: Ling 2.0's graph in small: a fused attn_qkv, 4 heads of 16 over 2 KV
     * heads with per-head q/k norms, RoPE on half of each head, a dense first layer, 16 experts
     * of 32 top-4 in 4 groups of which 2 are eligible, a sigmoid router with selection bias,
     * renormalised and scaled by 2.5, 2 shared experts of 32, one multi-token-prediction
     * block after the 3 that run */
    {.name = "tiny-bailingmoe2", .arch = "bailingmoe2", .n_vocab = 320, .n_ctx = 512,
     .n_embd = 64, .n_layer = 3, .n_head = 4, .n_head_kv = 2, .n_ff_exp = 32, .n_expert = 16,
     .n_expert_used = 4, .rope_base = 6e5f, .rms_eps = 1e-6f, .n_ff = 128, .n_dense_lead = 1,
     .n_shared = 2, .n_ff_shexp = 32, .weights_scale = 2.5f, .v3_router = true, .n_group = 4,
     .n_group_used = 2, .n_rot = 8, .n_nextn = 1, .fused_qkv = true},
    /* tiny-bailingmoe: Ling 1.x's layers (Ling-lite's RoPE base), q, k and v fused as its
     * converter writes them, 8 experts of 32 top-2 by a softmax renormalised as
     * expert_weights_norm says, 2 shared experts */
    {.name = "tiny-bailingmoe", .arch = "bailingmoe", .n_vocab = 320, .n_ctx = 512,
     .n_embd = 64, .n_layer = 2, .n_head = 4, .n_head_kv = 2, .n_embd_head = 32, .n_ff_exp = 32,
     .n_expert = 8, .n_expert_used = 2, .rope_base = 6e5f, .rms_eps = 1e-6f, .n_ff = 128,
     .n_shared = 2, .weights_norm = true, .fused_qkv = true},
    /* Ling-mini-2.0: 20 layers of 2,048, 16 heads of 128 over 4 KV heads, RoPE on half of each
     * head, a dense first layer of 5,120, 256 experts of 512 top-8 in 8 groups of which 4 are
     * eligible, one shared expert, routed_scaling_factor 2.5, vocab 157,184 (BailingMoeV2Config
     * and the model card; the converter's keys) */
    {.name = "ling-mini-2.0", .arch = "bailingmoe2", .n_vocab = 157184, .n_ctx = 32768,
     .n_embd = 2048, .n_layer = 20, .n_head = 16, .n_head_kv = 4, .n_embd_head = 128,
     .n_ff_exp = 512, .n_expert = 256, .n_expert_used = 8, .rope_base = 6e5f, .rms_eps = 1e-6f,
     .n_ff = 5120, .n_dense_lead = 1, .n_shared = 1, .n_ff_shexp = 512, .weights_scale = 2.5f,
     .v3_router = true, .n_group = 8, .n_group_used = 4, .n_rot = 64, .fused_qkv = true},
    /* tiny-dots1: dots.llm1's graph in small: 4 heads of 16 with per-head q/k norms, a dense
     * first layer, 8 experts of 32 top-2 and 2 shared ones, a sigmoid router with selection
     * bias, renormalised and scaled by 2.5 */
    {.name = "tiny-dots1", .arch = "dots1", .n_vocab = 320, .n_ctx = 512, .n_embd = 64,
     .n_layer = 3, .n_head = 4, .n_head_kv = 4, .n_ff_exp = 32, .n_expert = 8,
     .n_expert_used = 2, .rope_base = 1e4f, .rms_eps = 1e-5f, .n_ff = 128, .n_dense_lead = 1,
     .n_shared = 2, .weights_scale = 2.5f, .v3_router = true},
    /* tiny-minimax-m2: MiniMax-M2's graph in small: 4 heads of 32 over 2 KV heads with q/k norms
     * over the whole projections, RoPE on half of each head, 16 experts of 32 top-4 by a
     * sigmoid router with selection bias, renormalised */
    {.name = "tiny-minimax-m2", .arch = "minimax-m2", .n_vocab = 320, .n_ctx = 512, .n_embd = 64,
     .n_layer = 3, .n_head = 4, .n_head_kv = 2, .n_embd_head = 32, .n_ff_exp = 32,
     .n_expert = 16, .n_expert_used = 4, .rope_base = 5e6f, .rms_eps = 1e-6f, .n_ff = 32,
     .n_rot = 16},
    /* MiniMax-M2: 62 layers of 3,072, 48 heads of 128 over 8 KV heads, RoPE on 64 dims of each,
     * 256 experts of 1,536 top-8, vocab 200,064 (config.json; the converter writes
     * intermediate_size as both FFN lengths) */
    {.name = "minimax-m2", .arch = "minimax-m2", .n_vocab = 200064, .n_ctx = 196608,
     .n_embd = 3072, .n_layer = 62, .n_head = 48, .n_head_kv = 8, .n_embd_head = 128,
     .n_ff_exp = 1536, .n_expert = 256, .n_expert_used = 8, .rope_base = 5e6f, .rms_eps = 1e-6f,
     .n_ff = 1536, .n_rot = 64},
    /* tiny-exaone-moe: EXAONE-MoE's graph in small: 4 heads of 16 over 2 KV heads with per-head
     * q/k norms, RoPE on the sliding layers 0-2 (a window of 40), layer 3
     * global without it, a dense first layer, 8 experts of 32 top-2 by a sigmoid router with
     * selection bias, renormalised and scaled by 2.5, a shared expert of 64, one
     * multi-token-prediction block */
    {.name = "tiny-exaone-moe", .arch = "exaone-moe", .n_vocab = 320, .n_ctx = 512,
     .n_embd = 64, .n_layer = 4, .n_head = 4, .n_head_kv = 2, .n_ff_exp = 32, .n_expert = 8,
     .n_expert_used = 2, .rope_base = 1e6f, .rms_eps = 1e-5f, .n_ff = 128, .n_dense_lead = 1,
     .n_shared = 1, .n_ff_shexp = 64, .weights_scale = 2.5f, .v3_router = true, .n_swa = 40,
     .n_nextn = 1},
    /* tiny-smallthinker: SmallThinker's graph in small: the router on each layer's input
     * before attention, 8 ReGLU experts of 32 top-2 by a softmax renormalised, 4 heads of 16
     * over 2 KV heads, a sliding window (llama.cpp's 4,096) and RoPE on layers 1-3, layers 0
     * and 4 global without RoPE (5 layers: with 4, llama.cpp would turn RoPE on every one), a
     * tied head */
    {.name = "tiny-smallthinker", .arch = "smallthinker", .n_vocab = 320, .n_ctx = 8192,
     .n_embd = 64, .n_layer = 5, .n_head = 4, .n_head_kv = 2, .n_ff_exp = 32, .n_expert = 8,
     .n_expert_used = 2, .rope_base = 1.5e6f, .rms_eps = 1e-6f, .n_ff = 32, .n_swa = 4096,
     .tied = true},
};
static const char *const preset_names[] = {
    "tiny", "tiny-gqa", "small", "mini", "olmoe-1b-7b", "tiny-qwen3moe", "tiny-qwen3moe-yarn",
    "tiny-qwen3moe-vocab", "qwen3-30b-a3b", "tiny-qwen3vlmoe",
    "tiny-mixtral", "tiny-mixtral-l3", "mixtral-8x7b", "tiny-deepseek", "small-qwen3moe", "small-mixtral",
    "small-deepseek", "deepseek-moe-16b", "tiny-lfm2moe", "small-lfm2moe", "lfm2-8b-a1b",
    "tiny-deepseek2", "tiny-deepseek2-joined", "small-deepseek2", "tiny-deepseek3",
    "moonlight-16b-a3b", "deepseek-v2-lite", "tiny-qwen2moe", "qwen1.5-moe-a2.7b", "tiny-gptoss",
    "small-gptoss", "gpt-oss-20b", "tiny-glm4moe", "small-glm4moe", "glm-4.5-air", "tiny-ernie",
    "ernie-4.5-21b-a3b", "tiny-llama4", "llama-4-scout", "tiny-granitemoe", "tiny-granitemoe-shared",
    "granite-3.1-3b-a800m", "tiny-hunyuan", "hunyuan-a13b", "tiny-qwen2moe-qkv", "tiny-bailingmoe",
    "tiny-bailingmoe2",
    "ling-mini-2.0", "tiny-dots1", "tiny-minimax-m2", "minimax-m2",
    "tiny-exaone-moe", "tiny-smallthinker", "tiny-phimoe", "phi-3.5-moe", NULL};

const char *const *es_synth_presets(void) { return preset_names; }

const es_synth_preset *es_synth_preset_find(const char *name)
{
    for (size_t i = 0; name && i < sizeof(presets) / sizeof(presets[0]); i++)
        if (strcmp(name, presets[i].name) == 0) return &presets[i];
    return NULL;
}
