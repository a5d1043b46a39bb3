/*
 * The in-memory model: hyperparameters, tensor views into the GGUF mapping, tokenizer.
 *
 * DESIGN: es_model_open() maps the file (gguf reader), checks every tensor the architecture needs
 * (name, type, shape) against the hyperparameters, and keeps views. Nothing is copied or
 * converted at open, so a model costs its mapped pages and nothing more until a prefill runs.
 * Architectures: olmoe (the first target). Others are recognised by name and refused with
 * ES_E_UNSUPPORTED until they are implemented.
 */
#ifndef ES_MODEL_H
#define ES_MODEL_H

#include "gguf/gguf.h"
#include "quant/qtypes.h"
#include "tok/tok.h"

typedef struct es_hparams {
    int n_vocab;
    int n_ctx;          /* training context length: prompts longer than this are refused */
    int n_embd;         /* hidden size */
    int n_layer;
    int n_head;
    int n_head_kv;
    int n_embd_head;    /* n_embd / n_head */
    int n_rot;          /* rotary dimensions per head (NEOX layout: pairs offset by n_rot/2) */
    int n_ff_exp;       /* expert FFN size */
    int n_expert;
    int n_expert_used;  /* top-k */
    float rope_freq_base;
    float rms_eps;
} es_hparams;

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
    es_tensor attn_norm;  /* [n_embd] f32 */
    es_tensor wq;         /* [n_embd] x n_embd rows            */
    es_tensor wk, wv;     /* [n_embd] x n_head_kv*n_embd_head rows */
    es_tensor wo;         /* [n_embd] x n_embd rows            */
    es_tensor q_norm;     /* [n_embd] over the whole Q projection */
    es_tensor k_norm;     /* [n_head_kv*n_embd_head] over the whole K projection */
    es_tensor ffn_norm;   /* [n_embd] */
    es_tensor gate_inp;   /* router: [n_embd] x n_expert rows */
    es_tensor gate_exps;  /* [n_embd] x n_ff_exp rows x n_expert */
    es_tensor up_exps;    /* [n_embd] x n_ff_exp rows x n_expert */
    es_tensor down_exps;  /* [n_ff_exp] x n_embd rows x n_expert */
    /* Where expert e's gate (0), up (1) and down (2) matrices are: exp_data[i] + e * exp_stride
     * in the mapping, exp_file_off[i] + e * exp_stride in the file. In a GGUF the stride is one
     * matrix (three tensors); in a pack it is one record [gate | up | down] (pack.h). */
    const uint8_t *exp_data[3];
    uint64_t exp_file_off[3];
    size_t exp_stride[3];
    size_t exp_bytes[3];  /* one expert's matrix */
} es_layer;

/* Expert e's matrix i (0 gate, 1 up, 2 down) of layer L in the mapping. */
static inline const uint8_t *es_layer_expert(const es_layer *L, int i, int64_t e)
{
    return L->exp_data[i] + (size_t)e * L->exp_stride[i];
}

struct es_model {
    es_gguf *gguf;
    char arch[32];
    bool is_pack;          /* experts come from estream pack records (pack.h) */
    bool vocab_only;
    es_hparams hp;
    es_tok *tok;
    es_tensor tok_embd;    /* [n_embd] x n_vocab rows */
    es_tensor output_norm; /* [n_embd] */
    es_tensor output;      /* [n_embd] x n_vocab rows */
    es_layer *layers;      /* [n_layer] */
};

/* Bytes of one expert's gate+up+down weights in layer il (all experts of a layer are equal). */
size_t es_model_expert_bytes(const es_model *m, int il);

/* Reference forward pass (model/ref_forward.c): plain dequantize-and-fp32 code, the oracle for
 * every fast path. logits: [n][n_vocab] if all_logits, else [n_vocab] for the last position. */
es_status es_forward_ref(const es_model *m, const int32_t *ids, size_t n, int all_logits,
                         float *logits);

#endif
