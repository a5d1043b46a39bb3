/*
 * The presets of es_synth (synth.c): each a model shape of one family, named after a model
 * where its sizes are that model's (config.json on Hugging Face), or tiny/small ones for tests.
 */
#ifndef ES_SYNTH_PRESETS_H
#define ES_SYNTH_PRESETS_H

#include <stdbool.h>

typedef struct es_synth_preset {
    const char *name, *arch;
    int n_vocab, n_ctx, n_embd, n_layer, n_head, n_head_kv;
    int n_embd_head; /* 0: n_embd / n_head (no attention.key_length key) */
    int n_ff_exp, n_expert, n_expert_used;
    float rope_base, rms_eps;
    bool tied;       /* no output.weight: the head is the token embedding */
    int n_ff;        /* feed_forward_length where it is not the experts' size (a dense FFN's;
                      * the experts' size is then expert_feed_forward_length); 0: it is */
    int n_dense_lead, n_shared; /* leading dense layers; shared experts per MoE layer */
    float weights_scale;        /* expert_weights_scale (written where the family reads it) */
    const char *kinds;          /* conv families: one letter per layer, 'a' attention, 'c' a
                                 * short-convolution block (head_count_kv 0); NULL: attention */
    /* MLA families: n_embd_head is qk_nope + qk_rope */
    int kv_lora, qk_rope, v_head;
    float yarn_factor;          /* YaRN rope scaling (0: none) of yarn_orig_ctx, with */
    int yarn_orig_ctx;
    float yarn_mscale_all;      /* mscale_all_dim (written as 0.1 x, as the converter does) */
    bool mla_joined;            /* one attn_kv_b per layer, as converters before the split wrote
                                 * (no _mla keys; key/value_length are the per-head sizes) */
    int q_lora;                 /* MLA: queries through attn_q_a / attn_q_b of this rank (0: attn_q) */
    bool v3_router;             /* DeepSeek-V3's router: sigmoid gating (expert_gating_func 2), a
                                 * selection bias exp_probs_b, weights renormalised */
    int n_group, n_group_used;  /* expert_group_count / _used_count (0: no groups) */
    int n_swa;                  /* attention.sliding_window (families with swa) */
    int n_ff_shexp;             /* the shared expert's FFN (its key), where the family reads it */
    int n_rot;                  /* rope.dimension_count where RoPE turns part of each head (0:
                                 * all of it, no key) */
    bool qk_norm;               /* qk_norm_optional families: the file has the q/k norms */
    bool sel_bias;              /* write exp_probs_b beside a softmax router (ERNIE-4.5) */
    int n_nextn;                /* nextn families: multi-token-prediction blocks after the
                                 * n_layer ones (in block_count, not run) */
    int moe_step;               /* moe_interleave families: experts every moe_step-th layer */
    /* llama3's RoPE scaling written as rope_freqs.weight (0: none), as llama.cpp's converter
     * computes it: factor, low and high frequency factors, the original context */
    float l3_factor, l3_low, l3_high;
    int l3_orig_ctx;
    bool fused_qkv;             /* one blk.N.attn_qkv (and its bias) instead of attn_q/k/v,
                                 * the same values (Ling 2.0's converter writes it so) */
    /* granite_scales families: the muP multipliers, written as the converter writes them */
    float embd_scale, resid_scale, attn_scale, logit_scale;
    /* imrope families: rope.dimension_sections, and n_deepstack_layers (visual features added
     * to the first layers' outputs, zeros for text: written as Qwen3-VL's converter does) */
    int rope_sections[4], n_deepstack;
    bool weights_norm;          /* norm_key families: expert_weights_norm written true */
    int lr_orig_ctx;            /* LongRoPE (rope_long_short families): the original context,
                                 * with rope_factors_short / _long.weight and the attn_factor
                                 * llama.cpp's converter derives from n_ctx over it (0: none) */
} es_synth_preset;

/* The preset called name, or NULL. */
const es_synth_preset *es_synth_preset_find(const char *name);

#endif
