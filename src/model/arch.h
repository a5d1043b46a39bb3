/*
 * The model families estream runs, as data: one table entry per GGUF architecture (arch.c),
 * giving the op variants in which its layers differ. The forward passes (reference and fast) and
 * the synthetic writer read these fields; none of them asks which family it runs.
 *
 * DESIGN: a family is what llama.cpp's graph for that architecture computes, read from its
 * `src/models/<arch>.cpp`: which q/k normalisation, which RoPE pairing, whether the chosen
 * experts' weights are renormalised. Sizes come from the file's metadata (hparams.c), never from
 * the family.
 */
#ifndef ES_ARCH_H
#define ES_ARCH_H

#include <stdbool.h>

/* RMS normalisation of the query and key projections before RoPE. */
typedef enum es_qk_norm {
    ES_QK_NORM_NONE,  /* none (llama / Mixtral) */
    ES_QK_NORM_WHOLE, /* over the whole projection: weight [n_head * head] (olmoe) */
    ES_QK_NORM_HEAD,  /* over each head vector: weight [head], shared by all heads (qwen3moe) */
} es_qk_norm;

/* Which elements of a head vector RoPE rotates together (ggml's rope modes). */
typedef enum es_rope_kind {
    ES_ROPE_NORM, /* adjacent pairs (2i, 2i + 1) (llama, deepseek) */
    ES_ROPE_NEOX, /* halves: (i, i + n_rot/2) (olmoe, qwen3moe) */
} es_rope_kind;

/* How the router turns logits into the probabilities it ranks (llama.cpp's gating func). */
typedef enum es_gating {
    ES_GATING_SOFTMAX, /* softmax over the experts (olmoe, qwen3moe, Mixtral, deepseek) */
    ES_GATING_SIGMOID, /* each expert's own sigmoid (lfm2moe; deepseek2 files of DeepSeek-V3's
                        * kind: DeepSeek-V3/R1, Kimi-K2, Moonlight, GLM-4.7-Flash) */
    ES_GATING_SOFTMAX_WEIGHT, /* the k largest logits chosen, their weights a softmax over
                               * those k alone (gpt-oss) */
} es_gating;

/* How many shared experts a MoE layer has beside the routed ones, and how wide they are: one
 * rule per family, each a llama.cpp loader's (hparams.c reads the keys). Shared experts are one
 * FFN (ffn_*_shexp) whatever their number: n_expert_shared of width w are one of width n * w. */
typedef enum es_shexp_rule {
    ES_SHEXP_NONE,
    ES_SHEXP_COUNT,             /* expert_shared_count of the experts' width (DeepSeek, GLM-4.5,
                                 * dots.llm1) */
    ES_SHEXP_COUNT_KEYED,       /* expert_shared_count of expert_shared_feed_forward_length
                                 * each, the experts' width where absent (Ling 2.0) */
    ES_SHEXP_KEY_OR_NONE,       /* one of expert_shared_feed_forward_length, none without the
                                 * key (ERNIE-4.5, Granite MoE Shared) */
    ES_SHEXP_ONE_EXPERT,        /* one of the experts' width (Llama 4) */
    ES_SHEXP_ONE_KEY_OR_FF,     /* one of expert_shared_feed_forward_length, feed_forward_length
                                 * where absent (Qwen2-MoE, Hunyuan) */
    ES_SHEXP_ONE_KEY_OR_EXPERT, /* one of expert_shared_feed_forward_length, the experts' width
                                 * where absent, whatever expert_shared_count says (EXAONE-MoE) */
} es_shexp_rule;

typedef struct es_arch {
    const char *name;         /* general.architecture */
    const char *model_names;  /* the models people know it by, for messages and --help */
    es_qk_norm qk_norm;
    bool qk_norm_after_rope;  /* the q/k norms are applied to the rotated heads (Hunyuan), not
                               * before RoPE */
    bool qk_norm_optional;    /* the q/k norms are used where the file has them (GLM-4.5 355B
                               * has them, GLM-4.5-Air not) */
    es_rope_kind rope;
    bool topk_renorm;         /* the chosen experts' router probabilities are divided by their
                               * sum (llama.cpp's norm_w) */
    bool output_optional;     /* no output.weight: the head is the token embedding (tied) */
    bool dense_lead;          /* the first leading_dense_block_count layers have a dense FFN
                               * (ffn_gate/up/down) instead of experts */
    es_shexp_rule shexp;      /* the shared experts (above) */
    bool weights_scale;       /* expert_weights_scale multiplies the routed weights */
    bool imrope;              /* Qwen3-VL's interleaved multimodal RoPE (NEOX pairs) with
                               * rope.dimension_sections required: a text token turns by its
                               * position on three axes and by 0 on the fourth */
    bool shexp_gated;         /* the shared expert's output is multiplied per token by
                               * sigmoid(h . ffn_gate_inp_shexp), and the experts' width is
                               * feed_forward_length over top-k where the file has no key
                               * (Qwen2-MoE) */
    es_gating gating;
    bool router_keys;         /* the file's expert_gating_func (1 softmax, 2 sigmoid, 3 softmax
                               * over the chosen; absent or 0: the family's gating) and
                               * expert_weights_norm (absent: topk_renorm) choose the router */
    bool norm_key;            /* expert_weights_norm (absent: topk_renorm) alone of the
                               * router keys says whether the chosen weights are renormalised
                               * (Ling 1.x; router_keys reads it too) */
    bool nextn;               /* the last nextn_predict_layers blocks are multi-token-prediction
                               * heads, not part of the forward pass */
    bool expert_bias_optional; /* exp_probs_b where the file has it (deepseek2, ERNIE-4.5) */
    bool moe_step_one;        /* interleave_moe_layer_step is required and must be 1 (ERNIE-4.5:
                               * llama.cpp loads experts for every layer after the dense ones) */
    bool expert_bias;         /* blk.N.exp_probs_b.bias [n_expert] is added to the probabilities
                               * for choosing the experts only (their weights stay unbiased) */
    bool conv_layers;         /* layers whose attention.head_count_kv entry is 0 are LFM2
                               * short-convolution blocks (shortconv.in_proj, a causal depthwise
                               * convolution of shortconv.l_cache taps, shortconv.out_proj) */
    bool mla;                 /* DeepSeek-V2/V3 multi-head latent attention: q = h Wq, or
                               * with q LoRA q = rmsnorm(h Wq_a) Wq_b, one compressed KV row [c | k_pe] = h Wkv_a per token (c
                               * RMS-normed, k_pe one RoPE key shared by all heads), keys and
                               * values decompressed per head from c by attn_k_b / attn_v_b (or
                               * the older joined attn_kv_b); RoPE on the last n_rot dims only;
                               * YaRN's log multiplier is its mscale (kq scale mscale^2/sqrt) */
    /* gpt-oss (llama.cpp's openai-moe graph) has these (qwen2moe the q/k/v biases): */
    bool attn_bias;           /* the family's models have attn_q/k/v biases (synthetic files
                               * get them); every family adds them where the file has them,
                               * as llama.cpp does */
    bool attn_out_bias;       /* attn_output.bias [n_embd] added to the output projection */
    bool attn_sinks;          /* attn_sinks.weight [n_head]: a learned logit per head that joins
                               * every softmax's denominator (and takes no value) */
    bool swa;                 /* attention.sliding_window: the layers sliding_window_pattern
                               * marks (by default every other one, from layer 0) see only the
                               * last n_swa positions, their own included */
    bool rope_swa_only;       /* with swa: only the sliding-window layers turn RoPE; the others
                               * attend to every position without it (no temperature), and the
                               * pattern's period defaults to 4 (EXAONE-MoE) */
    bool router_bias;         /* ffn_gate_inp.bias [n_expert] added to the router's logits */
    bool expert_out_bias;     /* ffn_{gate,up,down}_exps.bias: one bias row per expert added to
                               * its gate, up and down outputs */
    bool gating_key;          /* expert_gating_func chooses the gating (1 softmax, 2 sigmoid;
                               * absent: the family's), no other router key is read (SmallThinker) */
    bool glu_relu;            /* the experts' GLU is relu(g) u, ggml's reglu (SmallThinker) */
    bool router_pre_attn;     /* the router reads the layer's input (the residual stream before
                               * the attention norm), not the FFN norm's output (SmallThinker) */
    bool swa_window_4096;     /* with swa and rope_swa_only: attention.sliding_window > 0 turns on
                               * llama.cpp's 4,096-position window (the key's value is not used)
                               * on the layers il % period != 0, RoPE (by rope.freq_base_swa
                               * where set) on the layers il % 4 != 0; absent or 0: no window,
                               * RoPE on every layer (SmallThinker) */
    bool glu_oai;             /* the experts' GLU is gpt-oss's clamped one:
                               * min(g, 7) sigmoid(1.702 min(g, 7)) (clamp(u, -7, 7) + 1) */
    /* Llama 4 (llama.cpp's llama4 graph) has these: */
    bool moe_interleave;      /* interleave_moe_layer_step N: layer il has experts where
                               * (il + 1) % N == 0 and a dense FFN of feed_forward_length
                               * elsewhere (Scout 1, Maverick 2) */
    bool irope;               /* every 4th layer ((il + 1) % 4 == 0) turns no RoPE, sees every
                               * earlier position and scales its queries by the temperature
                               * log(floor((pos + 1) / 8192) + 1) * 0.1 + 1; the others turn
                               * RoPE, then RMS-normalise q and k per head without a weight
                               * (not in models of 128 experts: Maverick) and see only their
                               * own 8,192-position chunk on the layers sliding_window_pattern
                               * marks (4 where absent: three in four) */
    bool rope_factors;        /* rope_freqs.weight [n_rot/2] where the file has it: pair i's
                               * angle divided by factor i (llama3's rope scaling) */
    bool select_by_logit;     /* the router ranks the experts by their logits (the weights are
                               * still the gating's: llama4's sigmoid of the chosen) */
    bool weight_before_ffn;   /* the router weight multiplies the expert's input, not its output
                               * (llama4; one expert per token) */
    /* Granite MoE (llama.cpp's granitemoe graph) has these (muP's multipliers): */
    bool granite_scales;      /* embedding_scale multiplies the token embeddings, residual_scale
                               * each block's output before it joins the residual (both where the
                               * file has them), attention.scale replaces 1/sqrt(head) where set,
                               * and the logits are multiplied by 1/logit_scale (required) */
    /* Phi-3.5-MoE (llama.cpp's phimoe, phi3's graph) has these: */
    bool norm_bias;           /* attn_norm, ffn_norm and output_norm have a bias [n_embd] added
                               * after the RMS norm's weight (llama.cpp's LLM_NORM_RMS with a
                               * bias, as it builds phimoe; not a LayerNorm) */
    bool output_bias;         /* output.bias [n_vocab] added to every logit */
    bool q_prescale;          /* the rotated queries are multiplied by 1/sqrt(head) and q.k is
                               * not scaled again (the same scale, in llama.cpp's order) */
    bool rope_long_short;     /* LongRoPE: rope_factors_long / rope_factors_short.weight
                               * [n_rot/2] where the file has them, a pair's angle divided by
                               * its factor as rope_freqs'; a sequence longer than
                               * rope.scaling.original_context_length turns by the long ones */
    const char *ffn_norm;     /* the FFN norm's tensor suffix (NULL: ffn_norm) */
    const char *output_norm;  /* the final norm's tensor name (NULL: output_norm.weight) */
    const char *synth_pre;    /* tokenizer.ggml.pre of the synthetic models' built-in BPE */
} es_arch;

/* The entry for a general.architecture value, or NULL when estream does not run it. */
const es_arch *es_arch_find(const char *name);

/* "olmoe (OLMoE), qwen3moe (...), ...": the supported architectures, for messages. */
const char *es_arch_supported(void);

/* The i-th family of the table (0-based), NULL past the last. */
const es_arch *es_arch_at(int i);

#define ES_ROUTE_MAX_EXPERTS 4096 /* expert_count above this is refused (hparams.c) */
#define ES_ROUTE_MAX_GROUPS 256

/* How a model's router chooses and weighs its experts (hparams.c fills it from the family and
 * the file, as llama.cpp's build_moe_ffn reads them). */
typedef struct es_router {
    es_gating gating;   /* softmax over the experts, or a sigmoid each */
    bool renorm;        /* the chosen weights divided by their sum (norm_w) */
    float scale;        /* then multiplied by this (0 or 1: not at all) */
    int n_group;        /* expert_group_count: experts in n_group equal groups (0, 1: none) */
    int n_group_used;   /* expert_group_used_count: the groups the choice may come from */
    bool by_logit;      /* the choice ranks the logits themselves (select_by_logit) */
} es_router;

/* The router's decision for one token, shared by the reference and the fast path because it is
 * the spec: r's gating of the n_expert logits (softmax, a sigmoid each, or for softmax-weight
 * the logits themselves); with groups, only
 * the n_group_used groups whose two best experts score most (their sum; ties to the lower
 * group) stay eligible; then the k eligible experts with the largest probability (by_logit: the
 * largest logit; plus bias[e]
 * where bias is not NULL: DeepSeek-V3's selection bias; ties to the lower id) in that order in
 * chosen[], their probabilities (unbiased) in weight[] (softmax-weight: the softmax of the k
 * chosen logits), divided by their sum (at least 2^-14,
 * as llama.cpp clamps it) where r->renorm, then multiplied by r->scale unless it is 0 or 1.
 * probs: scratch of n_expert floats. */
void es_arch_route(const es_router *r, const float *logits, int n_expert, int k, const float *bias,
                   float *probs, int *chosen, float *weight);

#endif
