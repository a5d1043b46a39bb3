/*
 * Internals of the fast forward pass, shared by its files and by nothing else (forward.h is the
 * session's interface): the per-session state (struct es_fast), the pool jobs every block uses
 * (dense products, activation preparation, residual adds, row jobs over a layer) and the entry
 * point of each block kind.
 *
 *   fast.c      the state's lifetime (create, reserve, destroy), the phase profile, accessors
 *   pool_jobs.c the shared jobs (dense products, preparation, residual adds, row jobs)
 *   forward.c   the layer loop: embeddings, norms, each layer's block and FFN
 *   attention_block.c  the standard attention block
 *   mla.c       multi-head latent attention (deepseek2)
 *   conv.c      the short-convolution block (LFM2)
 *   ffn.c       the FFN: dense (SwiGLU), the router, the mixture of experts, the resident
 *               expert provider
 *
 * DESIGN: fast.c allocates and frees every buffer below, side by side, so that the sizes freed
 * are visibly the sizes allocated (STYLE §11); the block files only compute into them. Every
 * output element is computed by one thread in a fixed order, so the logits are bit-identical for
 * any thread count: row-wise work (norms, RoPE, residual adds) is split statically by rows
 * (es_row_span), matrix products by chunks of output rows handed out by a counter.
 *
 * Thread-safety: the functions declared here run on the thread that owns the es_fast (the caller
 * of es_fast_create, es_fast_reserve or es_fast_forward), one at a time; the pool jobs they start
 * write only the rows, heads or chunks each thread is given. es_row_span and es_rope_head are pure.
 */
#ifndef ES_FORWARD_IMPL_H
#define ES_FORWARD_IMPL_H

#include "core/pool.h"
#include "model/model.h"
#include "moe/plan.h"
#include "moe/provider.h"
#include "quant/kern.h"
#include "run/attention.h"
#include "run/forward.h"

#include <stdbool.h>
#include <stddef.h>

enum {
    MAX_PLANS = 8,  /* distinct expert shape classes (weight-type mixes) per model */
    FFN_ROWS = 256, /* token rows per pass of a dense FFN (bounds its gate/up buffers) */
};

typedef struct es_plan_entry { es_expert_shape shape; int n_slots; es_plan *plan; } es_plan_entry;

struct es_fast {
    const es_kern *kern;  /* the session's kernel table */
    int n_threads;
    int plan_capacity;    /* routes per expert-plan invocation; more are split */
    int n_slots;          /* physical slots the plans address (>= n_expert) */
    int n_layer, n_expert;
    es_expert_provider resident; /* every expert in the mapping: phi = identity (ffn.c) */
    es_pool *pool;
    int64_t t_cap;        /* tokens the buffers below hold */
    int seq_cap;          /* sequences per batch the attention is sized for */
    int32_t *pos;         /* [t_cap] each row's position within its sequence */
    const int64_t *seq_start; /* the running batch's [n_seq + 1] sequence starts (borrowed) */
    int n_seq;
    float *x, *h, *q, *k, *v, *att, *tmp, *moe; /* [t_cap][...] activations */
    float *rope_cs;       /* [t_cap][n_rot/2][2] cos, sin */
    float *router;        /* [t_cap][n_expert] logits */
    float *ffn_g, *ffn_u; /* [FFN_ROWS][ffn_width]: a dense FFN's gate and up (NULL: none) */
    float *conv_bcx;      /* [t_cap][3 n_embd]: a short-conv block's B, C, X (NULL: none) */
    float *mla_ckv;       /* MLA: [t_cap][n_lora_kv + n_rot] compressed KV rows [c | k_pe] */
    float *mla_kvd;       /* MLA: [t_cap][es_mla_kvd_width] keys (without RoPE) decompressed,
                           * and in the joined form values */
    float *mla_out;       /* MLA split: [t_cap][n_embd_att] the values' heads, Wo's input */
    es_tensor mla_w;      /* MLA split: the layer's key decompression matrix in f32, n_head nope
                           * rows of n_lora_kv */
    int64_t ffn_width;    /* the widest dense FFN: n_ff of dense layers, n_ff_shexp */
    es_route *routes;     /* [t_cap * n_expert_used], sorted by expert then token */
    es_route *routes_tmp; /* [t_cap * n_expert_used] counting-sort scratch */
    int64_t *route_start; /* [n_expert + 1] counting-sort offsets */
    int64_t *route_counts;/* [n_layer][n_expert] routes per expert in the last prefill */
    bool have_counts;
    bool head_ready;      /* f->h and f->act hold the last batch's normed rows for the head */
    int32_t *phi;         /* [n_expert] identity placement */
    es_expert_slot *slots;/* [n_layer][n_expert] */
    void *act;            /* prepared activations for dense products */
    size_t act_bytes;
    void **scratch;       /* [n_threads] gemm scratch */
    size_t scratch_bytes;
    int embd_fd;          /* >= 0: token embedding rows are read from this file (es_fast_
                           * embed_from_file) instead of through the mapping */
    uint64_t embd_off;    /* the tensor's first byte in that file */
    uint8_t *embd_rows;   /* [n_threads][embd_row_bytes] each thread's row being read */
    size_t embd_row_bytes;
    es_attn *attn;
    es_plan_entry plans[MAX_PLANS];
    int n_plans;
    es_trace *trace;      /* NULL: no trace */
    int trace_track[3];   /* one track per phase: attention, router, moe */
    /* The phase clock of the running request (es_fast_prof_*): the calling thread's time is
     * added to the phase it is in; slot ES_PHASE_COUNT holds the expert operator's wall time
     * until es_fast_prof_end() splits it by what the plan's threads did. */
    uint64_t prof_ns[ES_PHASE_COUNT + 1];
    uint64_t prof_t;      /* when the current phase began */
    int prof_cur;         /* the current phase */
    int gemm_phase;       /* the phase es_fast_gemms() charges: the block that calls it */
    es_phase_profile prof; /* the work counts of the running request, then its whole profile */
};

/* The phase clock: from now on the calling thread's time counts for phase. */
static inline void es_fast_phase(es_fast *f, int phase)
{
    const uint64_t t = es_now_ns();
    f->prof_ns[f->prof_cur] += t - f->prof_t;
    f->prof_t = t;
    f->prof_cur = phase;
}
/* Switches to ES_PHASE_ATTN and counts the float work of attention over the running batch's
 * sequences for n_head heads of key size dk and value size dv, each query seeing window keys at
 * most (0: all before it), or with chunked the keys of its own chunk of window positions. */
void es_fast_attention(es_fast *f, int n_head, int64_t dk, int64_t dv, int64_t window,
                       bool chunked);
/* The phase of the products es_fast_gemms() runs from now on (the block's kind). */
static inline void es_fast_gemm_phase(es_fast *f, int phase) { f->gemm_phase = phase; }

static inline size_t fbytes(int64_t a, int64_t b) { return sizeof(float) * (size_t)a * (size_t)b; }

/* Thread ith's share [*r0, *r1) of rows [r_begin, T), a static split; false if it is empty. */
static inline bool es_row_span(int64_t r_begin, int64_t T, int ith, int nth, int64_t *r0,
                               int64_t *r1)
{
    const int64_t n = T - r_begin;
    *r0 = r_begin + n * ith / nth;
    *r1 = r_begin + n * (ith + 1) / nth;
    return *r1 > *r0;
}

/* RoPE of one head vector with the position's (cos, sin) per pair: NEOX pairs (i, i + n_rot/2),
 * normal pairs (2i, 2i + 1). */
static inline void es_rope_head(es_rope_kind kind, float *v, int n_rot, const float *cs)
{
    const int half = n_rot / 2;
    const int step = kind == ES_ROPE_NEOX ? 1 : 2, other = kind == ES_ROPE_NEOX ? half : 1;
    for (int i = 0; i < half; i++) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        float *a = v + i * step, *b = a + other;
        const float x0 = *a, x1 = *b;
        *a = x0 * c - x1 * s;
        *b = x0 * s + x1 * c;
    }
}

/* ---- shared pool jobs (pool_jobs.c); each is one es_pool_run ---- */

/* One dense product Y = act W^T: w's ne[1] output rows for n_rows prepared activation rows,
 * written to y with row stride ldy. */
typedef struct es_gemm_task {
    const es_tensor *w;
    const void *act;
    float *y;
    int64_t ldy, n_rows;
} es_gemm_task;

/* Runs n products in one job, output rows in chunks handed out by a counter. */
void es_fast_gemms(es_fast *f, const es_gemm_task *tasks, int n);

/* Prepares rows [r_begin, T) of src (row length K, row stride ld) for weights of wtype into
 * f->act (row r_begin first). es_fast_prepare: ld = K. */
void es_fast_prepare_ld(es_fast *f, const float *src, int64_t ld, int64_t K, uint32_t wtype,
                        int64_t r_begin, int64_t T);
void es_fast_prepare(es_fast *f, const float *src, int64_t K, uint32_t wtype, int64_t r_begin,
                     int64_t T);

/* dst[t][i] += src[t][i] for T rows of n_embd (the shared experts' output into the routed
 * ones'). */
void es_fast_add(es_fast *f, const es_model *m, const float *src, float *dst, int64_t T);

/* A block's output src [T][n_embd] joins the residual stream f->x (times Granite's
 * residual_scale where the model has it). */
void es_fast_residual_add(es_fast *f, const es_model *m, const float *src, int64_t T);

/* The attention output src [T][n_embd_att] projected by Wo (plus its bias where the layer has
 * one) and added to the residual stream (es_fast_residual_add's scale). */
void es_fast_project_out(es_fast *f, const es_model *m, const es_layer *L, const float *src,
                         int64_t T);

/* A row job over tokens [0, T) of layer L: fn splits the rows with es_row_span and reads and
 * writes only the buffers of f its comment names. */
typedef struct es_layer_rows {
    es_fast *f;
    const es_model *m;
    const es_layer *L;
    int64_t T;
} es_layer_rows;
void es_fast_layer_rows(es_fast *f, const es_model *m, const es_layer *L, int64_t T,
                        es_pool_fn fn);

/* ---- blocks: each reads f->h (the normed residual stream) ---- */

/* attention_block.c. Attention over f->h (GQA, q/k norms and RoPE as the family says), added to
 * the residual stream f->x. */
void es_attention_block(es_fast *f, const es_model *m, const es_layer *L, int64_t T);

/* mla.c. Multi-head latent attention over f->h, added to the residual stream f->x. */
void es_mla_block(es_fast *f, const es_model *m, const es_layer *L, int64_t T);
/* The width of a token's decompressed keys without RoPE, all heads (and in the joined form each
 * head's values after its keys): f->mla_kvd's row length. */
int64_t es_mla_kvd_width(const es_hparams *hp);
/* Whether values stay latent (split MLA files): f->v then holds the latent row (one value head
 * shared by all heads) and f->att each head's attention over it. */
bool es_mla_latent_values(const es_hparams *hp);

/* conv.c. LFM2's short-convolution block over f->h, added to the residual stream f->x. */
void es_conv_block(es_fast *f, const es_model *m, const es_layer *L, int64_t T);

/* ffn.c. A dense FFN over f->h into out ([T][n_embd], overwritten). */
void es_ffn_dense(es_fast *f, const es_model *m, const es_tensor *gate, const es_tensor *up,
                  const es_tensor *down, int64_t T, float *out);
/* The router of MoE layer il over f->h: f->routes sorted by expert, layer il's route counts. */
void es_ffn_route(es_fast *f, const es_model *m, const es_layer *L, int il, int64_t T);
/* The router's logits of the T rows of in into f->router: es_ffn_route's first step, which a
 * family with router_pre_attn runs on the layer's input before attention instead. */
void es_ffn_router_logits(es_fast *f, const es_model *m, const es_layer *L, const float *in,
                          int64_t T);
/* qwen2moe's shared-expert gate: out[t] *= sigmoid(f->h[t] . L->gate_inp_shexp) for t < T. */
void es_ffn_shexp_gate(es_fast *f, const es_model *m, const es_layer *L, float *out, int64_t T);
/* The mixture of experts of layer il over f->h into f->moe (overwritten), experts from prov.
 * Errors: whatever prov's callbacks return. */
es_status es_ffn_moe(es_fast *f, const es_model *m, es_expert_provider *prov, int il, int64_t T);
/* The expert plan for layer L's expert shape, made on first use (f->plans). Returns NULL with
 * *st = ES_E_UNSUPPORTED past MAX_PLANS shapes, or es_plan_create's error. */
es_plan *es_ffn_plan(es_fast *f, const es_model *m, const es_layer *L, es_status *st);
/* The all-resident provider of f: one group of every expert, expert e in slot e (f->phi,
 * f->slots), valid as long as f. */
es_expert_provider es_ffn_resident(const es_hparams *hp);

#endif
