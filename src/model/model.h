/*
 * The in-memory model: hyperparameters, tensor views into the GGUF mapping, tokenizer.
 *
 * DESIGN: es_model_open() maps the file (gguf reader), checks every tensor the architecture needs
 * (name, type, shape) against the hyperparameters, and keeps views. Nothing is copied or
 * converted at open (but llama3's RoPE factors, n_rot/2 floats), so a model costs its mapped
 * pages and nothing more until a prefill runs.
 * Architectures: the families of model/arch.h (es_arch_supported() names them); others are
 * refused with ES_E_UNSUPPORTED, naming the ones estream runs.
 */
#ifndef ES_MODEL_H
#define ES_MODEL_H

#include "gguf/gguf.h"
#include "model/arch.h"
#include "quant/qtypes.h"
#include "tok/tok.h"

typedef struct es_hparams {
    int n_vocab;
    int n_ctx;          /* training context length: prompts longer than this are refused */
    int n_embd;         /* hidden size */
    int n_layer;        /* the layers of the forward pass (block_count less n_layer_nextn) */
    int n_layer_nextn;  /* deepseek2: trailing multi-token-prediction blocks, never run */
    int n_head;
    int n_head_kv;
    int n_embd_head;    /* key (and query) head size: attention.key_length, by default
                         * n_embd / n_head; MLA: qk_nope + qk_rope (key_length_mla) */
    int n_embd_head_v;  /* value head size (= n_embd_head but in MLA: value_length_mla) */
    int n_embd_q;       /* n_head * n_embd_head: the query projection */
    int n_embd_kv;      /* n_head_kv * n_embd_head: the key projection */
    int n_embd_v;       /* n_head_kv * n_embd_head_v: the value projection */
    int n_embd_att;     /* n_head * n_embd_head_v: the attention output (Wo's input) */
    int n_rot;          /* rotary dimensions per head: n_embd_head, or in MLA the last qk_rope
                         * dims of each query head and the shared k_pe */
    int n_lora_kv;      /* MLA: kv_lora_rank, the compressed KV row (0: not MLA) */
    int n_lora_q;       /* MLA: q_lora_rank, queries through attn_q_a and attn_q_b (0: attn_q) */
    bool mla_split;     /* MLA: attn_k_b / attn_v_b (the file has key_length_mla and
                         * value_length_mla, as llama.cpp decides it); else one attn_kv_b */
    int n_ff;           /* feed_forward_length: the dense FFN of dense layers */
    int n_ff_exp;       /* expert FFN size (expert_feed_forward_length, else n_ff) */
    int n_expert;
    int n_expert_used;  /* top-k */
    int n_layer_dense_lead; /* layers [0, this) have a dense FFN instead of experts */
    int n_expert_shared;    /* shared experts of each MoE layer: one FFN of n_ff_shexp */
    int n_ff_shexp;         /* their width, by the family's es_shexp_rule (0: none) */
    int n_conv_taps;    /* shortconv.l_cache: taps of the short convolution (conv families) */
    int n_conv_layers;  /* layers that are short-convolution blocks instead of attention */
    es_router router;   /* how the router chooses and weighs the experts (es_arch_route) */
    float rope_freq_base;
    float rope_freq_scale;  /* 1 / rope.scaling.factor (1: no scaling) */
    float rope_ext_factor;  /* YaRN's extrapolation mix (1 with YaRN scaling, else 0) */
    float rope_cs_scale;    /* multiplies every RoPE cos and sin (YaRN's magnitude) */
    float rope_corr[2];     /* YaRN's correction range of pair indices */
    bool rope_imrope;       /* Qwen3-VL's interleaved multimodal RoPE (families with imrope) */
    int rope_sections[4];   /* its rope.dimension_sections: which pairs turn by which axis */
    float attn_scale;       /* the softmax scale of q.k: 1/sqrt(n_embd_head), MLA's mscale^2,
                             * Granite's attention.scale; 1 where q_scale is set */
    float q_scale;          /* q_prescale families: 1/sqrt(n_embd_head) multiplies the rotated
                             * queries instead (0: not) */
    /* Granite's muP multipliers (granite_scales; 0: not applied): */
    float embd_scale;       /* multiplies each token's embedding row (embedding_scale) */
    float resid_scale;      /* multiplies each block's output before it joins the residual */
    float logit_mul;        /* multiplies every logit: 1.0f / logit_scale, as llama.cpp scales */
    int n_swa;              /* sliding window of the layers with is_swa (families with swa), or
                             * with swa_chunked the chunk they see */
    bool swa_chunked;       /* irope: a layer with is_swa sees the positions of its own chunk
                             * [pos - pos % n_swa, pos] instead of the last n_swa */
    int swa_period;         /* sliding_window_pattern: layer il slides where il % period <
                             * period - 1 (0: every layer), llama.cpp's set_swa_pattern */
    int moe_step;           /* interleave_moe_layer_step: layer il (from n_layer_dense_lead on)
                             * has experts where (il + 1) % moe_step == 0 (1: every layer) */
    bool kq_norm_rope;      /* irope: q and k RMS-normalised per head, no weight, after RoPE */
    const float *rope_factors; /* [n_rot/2] llama3's frequency factors (rope_freqs.weight, a
                                * copy the model owns), or LongRoPE's short ones, or NULL */
    bool rope_long_short;   /* LongRoPE (a family's rope_long_short, no rope_freqs): the
                             * sequence's length chooses rope_factors (short) or: */
    const float *rope_factors_long; /* [n_rot/2] LongRoPE's long factors, for sequences longer
                                     * than rope_orig_ctx (NULL: none, as either may be) */
    int rope_orig_ctx;      /* rope.scaling.original_context_length (n_ctx where absent) */
    float rms_eps;
} es_hparams;

/* The cos and sin of RoPE at position pos for each of the n_rot/2 pairs, (cos, sin) interleaved
 * in cs[n_rot]: ggml's rope cache (the angle built by repeated multiplication, each pair's angle
 * divided by its frequency factor where factors is not NULL, YaRN's ramp between interpolated
 * and extrapolated angles, the magnitude scale). Shared by the reference and the fast path
 * because it is the spec. */
void es_rope_cos_sin(const es_hparams *hp, const float *factors, int64_t pos, float *cs);

/* The frequency factors of a sequence of seq_len tokens: LongRoPE's long ones past
 * rope_orig_ctx, else rope_factors (NULL: none). llama.cpp chooses by its context size
 * instead; estream by the sequence, as the model's own code does, so that a record's numbers
 * never depend on a setting or on the records beside it. llama.cpp gives the same numbers
 * with its context set to the sequence's length. */
static inline const float *es_rope_factors(const es_hparams *hp, int64_t seq_len)
{
    if (!hp->rope_long_short) return hp->rope_factors;
    return seq_len > hp->rope_orig_ctx ? hp->rope_factors_long : hp->rope_factors;
}

/* True if layer il has experts (from n_layer_dense_lead on, every moe_step-th layer). */
static inline bool es_hparams_layer_has_experts(const es_hparams *hp, int il)
{
    return il >= hp->n_layer_dense_lead && (hp->moe_step <= 1 || (il + 1) % hp->moe_step == 0);
}
/* True if some layer has a dense FFN of n_ff. */
static inline bool es_hparams_has_dense_ffn(const es_hparams *hp)
{
    return hp->n_layer_dense_lead > 0 || hp->moe_step > 1;
}
/* Llama 4's query temperature at position pos (the NoPE layers of irope): llama.cpp's
 * log(floor((pos + 1) / 8192) + 1) * 0.1 + 1, in its float and double steps; 1 below 8191. */
float es_attn_temperature(int64_t pos);

/* A read-only view of one tensor in the mapping. ne[0] is the row length. */
typedef struct es_tensor {
    const char *name;
    const void *data;
    uint32_t type;
    int64_t ne[4];
    size_t row_bytes; /* bytes of one ne[0] row */
    size_t nbytes;
    uint8_t layout;   /* ES_LAYOUT_ROWS (quant/tiles.h): row n at data + n * row_bytes; or
                       * ES_LAYOUT_TILES (a pack's tiled expert matrices): rows interleaved in
                       * 32-row tiles, read them with es_tiles_*() or es_gemm_tiled() */
} es_tensor;

typedef struct es_layer {
    bool is_conv;         /* a short-convolution block (conv, conv_in, conv_out) where the other
                           * layers have attention (wq ... k_norm absent then) */
    es_tensor attn_norm;  /* [n_embd] f32 (the operator norm of a conv block too) */
    es_tensor attn_norm_b, ffn_norm_b; /* norm_bias families: [n_embd] f32 added after the norm's
                                        * weight (absent: data NULL) */
    es_tensor wq;         /* [n_embd] x n_embd_q rows  */
    es_tensor wk, wv;     /* [n_embd] x n_embd_kv rows */
    es_tensor wo;         /* [n_embd_q] x n_embd rows  */
    es_tensor q_norm;     /* ES_QK_NORM_WHOLE: [n_embd_q]; ES_QK_NORM_HEAD: [n_embd_head];
                           * ES_QK_NORM_NONE: absent (data NULL) */
    es_tensor k_norm;     /* the same for K: [n_embd_kv], [n_embd_head] or absent */
    /* families with attn_bias (gpt-oss), f32, absent: data NULL */
    es_tensor bq, bk, bv; /* [n_embd_q], [n_embd_kv], [n_embd_kv]: where the file has them */
    es_tensor bo;         /* [n_embd]: added to the output projection */
    es_tensor sinks;      /* attn_sinks: [n_head] f32, each head's sink logit (or absent) */
    bool is_swa;          /* sliding-window attention: sees the last hp.n_swa positions only
                           * (or with hp.swa_chunked its own chunk of them) */
    bool no_rope;         /* irope: no RoPE; the queries scaled by es_attn_temperature() */
    /* MLA (deepseek2) layers have wq (or with q LoRA wq_a, q_a_norm and wq_b) and wo (of
     * n_embd_att) and, instead of wk and wv: */
    es_tensor wq_a;       /* [n_embd] x n_lora_q rows */
    es_tensor q_a_norm;   /* [n_lora_q] f32 */
    es_tensor wq_b;       /* [n_lora_q] x n_embd_q rows */
    es_tensor wkv_a;      /* [n_embd] x (n_lora_kv + n_rot) rows: [c | k_pe] */
    es_tensor kv_a_norm;  /* [n_lora_kv] f32 */
    es_tensor wk_b;       /* [qk_nope, n_lora_kv, n_head]: key decompression, transposed */
    es_tensor wv_b;       /* [n_lora_kv, n_embd_head_v, n_head]: value decompression */
    es_tensor wkv_b;      /* older files (!mla_split), instead of the two: [n_lora_kv] x n_head *
                           * (qk_nope + n_embd_head_v) rows, each head's key rows then its
                           * value rows */
    es_tensor conv;       /* [n_conv_taps] x n_embd rows, f32: tap j of channel c at c*taps + j */
    es_tensor conv_in;    /* [n_embd] x 3 n_embd rows: B, C and X, n_embd each */
    es_tensor conv_out;   /* [n_embd] x n_embd rows */
    es_tensor ffn_norm;   /* [n_embd] */
    /* A dense layer (il < n_layer_dense_lead) has these and no router or experts: */
    es_tensor ffn_gate, ffn_up; /* [n_embd] x n_ff rows */
    es_tensor ffn_down;   /* [n_ff] x n_embd rows */
    /* A MoE layer has a router, experts and, with n_expert_shared > 0, the shared experts: */
    es_tensor gate_shexp, up_shexp; /* [n_embd] x n_ff_shexp rows (absent: data NULL) */
    es_tensor gate_inp_shexp;       /* shexp_gated: [n_embd] f32, the shared expert's gate */
    es_tensor down_shexp; /* [n_ff_shexp] x n_embd rows */
    es_tensor gate_inp;   /* router: [n_embd] x n_expert rows */
    es_tensor gate_inp_b; /* [n_expert] f32 added to the router's logits (router_bias) */
    es_tensor exp_probs_b; /* [n_expert] f32 selection bias (families with expert_bias; in
                            * deepseek2 files where they have it, DeepSeek-V3's kind) */
    es_tensor gate_exps;  /* [n_embd] x n_ff_exp rows x n_expert */
    es_tensor up_exps;    /* [n_embd] x n_ff_exp rows x n_expert */
    es_tensor down_exps;  /* [n_ff_exp] x n_embd rows x n_expert */
    /* expert_out_bias families: f32 rows, one per expert, added to its outputs (absent: NULL) */
    es_tensor gate_exps_b, up_exps_b; /* [n_ff_exp] x n_expert */
    es_tensor down_exps_b;            /* [n_embd] x n_expert */
    /* Where expert e's gate (0), up (1) and down (2) matrices are: exp_data[i] + e * exp_stride
     * in the mapping, exp_file_off[i] + e * exp_stride in the file. In a GGUF the stride is one
     * matrix (three tensors; with one tensor per expert, the distance between two experts'
     * tensors); in a pack it is one record [gate | up | down] (pack.h). */
    const uint8_t *exp_data[3];
    uint32_t exp_file[3]; /* the file exp_file_off is in: a split model's part, else 0 */
    uint64_t exp_file_off[3];
    size_t exp_stride[3];
    size_t exp_bytes[3];  /* one expert's matrix (0 in a dense layer) */
} es_layer;

/* True if layer L routes to experts (false: a dense FFN layer). */
static inline bool es_layer_is_moe(const es_layer *L) { return L->exp_bytes[0] > 0; }

/* A layer's matrices that the dense kernels multiply whole (everything but the norms, MLA's
 * per-head attn_k_b / attn_v_b and the routed experts), in this order: wq, wk, wv, wo, MLA's
 * wkv_a, wkv_b, wq_a and wq_b, the short convolution's in and out projections, the router, the
 * dense FFN's gate/up/down, the shared experts' gate/up/down. Those a layer's kind lacks are
 * listed with data NULL. The FFN ones (index >= ES_LAYER_FIRST_FFN) run a bounded number of
 * rows at a time. */
enum { ES_LAYER_N_MATRICES = 17, ES_LAYER_FIRST_FFN = 11 };
static inline void es_layer_matrices(const es_layer *L, const es_tensor *out[ES_LAYER_N_MATRICES])
{
    const es_tensor *ts[ES_LAYER_N_MATRICES] = {
        &L->wq,       &L->wk,       &L->wv,         &L->wo,       &L->wkv_a,
        &L->wkv_b,    &L->wq_a,     &L->wq_b,       &L->conv_in,  &L->conv_out,
        &L->gate_inp, &L->ffn_gate, &L->ffn_up,     &L->ffn_down, &L->gate_shexp,
        &L->up_shexp, &L->down_shexp};
    for (int i = 0; i < ES_LAYER_N_MATRICES; i++) out[i] = ts[i];
}

/* Every tensor a layer keeps resident: its norms, convolution taps, biases and sinks, MLA's
 * decompression matrices and es_layer_matrices(). */
enum { ES_LAYER_N_RESIDENT = ES_LAYER_N_MATRICES + 22 };
static inline void es_layer_resident(const es_layer *L, const es_tensor *out[ES_LAYER_N_RESIDENT])
{
    const es_tensor *ts[] = {&L->attn_norm,   &L->q_norm,      &L->k_norm,    &L->ffn_norm,
                             &L->conv,        &L->exp_probs_b, &L->kv_a_norm, &L->q_a_norm,
                             &L->wk_b,        &L->wv_b,        &L->bq,        &L->bk,
                             &L->bv,          &L->bo,          &L->sinks,     &L->gate_inp_b,
                             &L->gate_exps_b, &L->up_exps_b,   &L->down_exps_b,
                             &L->gate_inp_shexp, &L->attn_norm_b, &L->ffn_norm_b};
    _Static_assert(sizeof(ts) / sizeof(ts[0]) + ES_LAYER_N_MATRICES == ES_LAYER_N_RESIDENT,
                   "resident list");
    for (int i = 0; i < ES_LAYER_N_RESIDENT - ES_LAYER_N_MATRICES; i++) out[i] = ts[i];
    es_layer_matrices(L, out + ES_LAYER_N_RESIDENT - ES_LAYER_N_MATRICES);
}

/* Expert e's matrix i (0 gate, 1 up, 2 down) of layer L in the mapping. */
static inline const uint8_t *es_layer_expert(const es_layer *L, int i, int64_t e)
{
    return L->exp_data[i] + (size_t)e * L->exp_stride[i];
}

struct es_model {
    es_gguf *gguf;
    char arch[32];
    const es_arch *family; /* the op variants of arch (NULL for a vocabulary-only open) */
    bool is_pack;          /* experts come from estream pack records (pack.h) */
    bool vocab_only;
    es_hparams hp;
    es_tok *tok;
    es_tensor tok_embd;    /* [n_embd] x n_vocab rows */
    es_tensor output_norm; /* [n_embd] */
    es_tensor output_norm_b; /* norm_bias families: [n_embd] f32 (absent: data NULL) */
    es_tensor output_b;    /* output_bias families: [n_vocab] f32 added to the logits */
    es_tensor output;      /* [n_embd] x n_vocab rows; the token embedding's view when the file
                            * has no output.weight and its family ties them */
    es_layer *layers;      /* [n_layer] */
    float *rope_factors;   /* hp.rope_factors' copy (NULL: none) */
    float *rope_factors_long; /* hp.rope_factors_long's copy (NULL: none) */
};

/* Bytes of one expert's gate+up+down weights in layer il (all experts of a layer are equal). */
size_t es_model_expert_bytes(const es_model *m, int il);

/* Reference forward pass (model/ref_forward.c): plain dequantize-and-fp32 code, the oracle for
 * every fast path. logits (NULL: none): [n][n_vocab] if all_logits, else [n_vocab] for the last
 * position. hidden (NULL: none): [n][n_embd], every position's final hidden state after the
 * output norm. */
es_status es_forward_ref(const es_model *m, const int32_t *ids, size_t n, int all_logits,
                         float *logits, float *hidden);

/* Templates (model/chat.c). es_chat_render into a malloc'd NUL-terminated text (*out, *n_out:
 * its length); the caller frees it. */
es_status es_chat_render_alloc(const es_model *m, const char *tmpl,
                               const es_chat_message *messages, int n_messages,
                               int add_generation_prompt, char **out, size_t *n_out);
/* Renders the Jinja template tmpl[0..tmpl_len) (name prefixes its errors) with the string
 * variables names[i] = values[i] and the model's bos_token and eos_token, in the environment
 * of es_chat_render, into a malloc'd text. Errors as es_chat_render's. */
es_status es_template_render(const es_model *m, const char *tmpl, size_t tmpl_len,
                             const char *name, const char *const *names, const es_str *values,
                             int n, char **out, size_t *n_out);

#endif
