/*
 * The fast forward pass: the reference path's arithmetic restated for speed. Dense projections
 * and the output head go through the SIMD kernels (es_gemm) split over output rows across the
 * pool, attention is blocked with an online softmax, and the mixture of experts runs through the
 * expert plan (the fused expert operator) with every expert resident: phi maps expert e to slot e
 * and each slot points into the model's mapping.
 *
 * DESIGN: buffers are sized for the prompt and allocated once per prefill call (huge pages);
 * layers reuse them. Every output element is computed by one thread in a fixed order, so the
 * logits are bit-identical for any thread count. Row-wise work (norms, RoPE, residual adds) is
 * split statically by rows; matrix products by chunks of output rows handed out by a counter.
 */
#include "run/forward.h"

#include "core/trace.h"
#include "run/attention.h"
#include "moe/plan.h"
#include "moe/provider.h"
#include <stddef.h>
#include "quant/kern.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    GEMM_CHUNK = 64,     /* output rows per work item of a dense product */
    PLAN_CAPACITY = 16384, /* default routes per expert-plan invocation; more are split */
    MAX_PLANS = 8,       /* distinct expert shape classes (weight-type mixes) per model */
    FFN_ROWS = 256,      /* token rows per pass of a dense FFN (bounds its gate/up buffers) */
};

typedef struct plan_entry { es_expert_shape shape; int n_slots; es_plan *plan; } plan_entry;

struct es_fast {
    const es_kern *kern;  /* the session's kernel table */
    int n_threads;
    int plan_capacity;    /* routes per expert-plan invocation; more are split */
    int n_slots;          /* physical slots the plans address (>= n_expert) */
    int n_layer, n_expert;
    es_expert_provider resident; /* every expert in the mapping: phi = identity */
    es_pool *pool;
    int64_t t_cap;        /* tokens the buffers below hold */
    float *x, *h, *q, *k, *v, *att, *tmp, *moe; /* [t_cap][...] activations */
    float *rope_cs;       /* [t_cap][n_rot/2][2] cos, sin */
    float *router;        /* [t_cap][n_expert] logits */
    float *ffn_g, *ffn_u; /* [FFN_ROWS][ffn_width]: a dense FFN's gate and up (NULL: none) */
    float *conv_bcx;      /* [t_cap][3 n_embd]: a short-conv block's B, C, X (NULL: none) */
    float *mla_ckv;       /* MLA: [t_cap][n_lora_kv + n_rot] compressed KV rows [c | k_pe] */
    float *mla_kvd;       /* MLA: [t_cap][mla_kvd_width] keys (without RoPE) decompressed, and
                           * in the joined form values */
    float *mla_out;       /* MLA split: [t_cap][n_embd_att] the values' heads, Wo's input */
    es_tensor mla_w;      /* MLA split: the layer's key decompression matrix in f32, n_head nope
                           * rows of n_lora_kv */
    int64_t ffn_width;    /* the widest dense FFN: n_ff of dense layers, n_ff_shexp */
    es_route *routes;     /* [t_cap * n_expert_used], sorted by expert then token */
    es_route *routes_tmp; /* [t_cap * n_expert_used] counting-sort scratch */
    int64_t *route_start; /* [n_expert + 1] counting-sort offsets */
    int64_t *route_counts;/* [n_layer][n_expert] routes per expert in the last prefill */
    bool have_counts;
    int32_t *phi;         /* [n_expert] identity placement */
    es_expert_slot *slots;/* [n_layer][n_expert] */
    void *act;            /* prepared activations for dense products */
    size_t act_bytes;
    void **scratch;       /* [n_threads] gemm scratch */
    size_t scratch_bytes;
    es_attn *attn;
    plan_entry plans[MAX_PLANS];
    int n_plans;
    es_trace *trace;      /* NULL: no trace */
    int trace_track[3];   /* one track per phase: attention, router, moe */
};

enum { PHASE_ATTENTION, PHASE_ROUTER, PHASE_MOE };
static const char *const phase_name[3] = {"attention", "router", "moe"};

void es_fast_set_trace(es_fast *f, es_trace *t)
{
    f->trace = t;
    for (int i = 0; i < 3; i++) f->trace_track[i] = es_trace_track(t, phase_name[i]);
}

static void span(es_fast *f, int phase, int il, uint64_t t0)
{
    if (!f->trace) return;
    char name[48];
    snprintf(name, sizeof(name), "%s L%d", phase_name[phase], il);
    es_trace_span(f->trace, f->trace_track[phase], name, t0, es_now_ns(), "layer", il, NULL, 0);
}

static size_t fbytes(int64_t a, int64_t b) { return sizeof(float) * (size_t)a * (size_t)b; }

/* MLA: the width of a token's decompressed keys without RoPE, all heads (and in the joined
 * form each head's values after its keys). */
static int64_t mla_kvd_width(const es_hparams *hp)
{
    const int64_t nope = hp->n_embd_head - hp->n_rot;
    return (int64_t)hp->n_head * (hp->mla_split ? nope : nope + hp->n_embd_head_v);
}

/* Widths of f->v and f->att: a token's values and attention output; in split MLA the latent
 * row (one value head shared by all) and each head's attention over it. */
static bool latent_values(const es_hparams *hp) { return hp->n_lora_kv && hp->mla_split; }
static int64_t v_width(const es_hparams *hp)
{
    return latent_values(hp) ? hp->n_lora_kv : hp->n_embd_v;
}
static int64_t att_width(const es_hparams *hp)
{
    return latent_values(hp) ? (int64_t)hp->n_head * hp->n_lora_kv : hp->n_embd_att;
}

static void free_buffers(es_fast *f, const es_hparams *hp)
{
    const int64_t T = f->t_cap, d = hp->n_embd, dq = hp->n_embd_q, dkv = hp->n_embd_kv;
    es_free_big(f->x, fbytes(T, d));
    es_free_big(f->h, fbytes(T, d));
    es_free_big(f->q, fbytes(T, dq));
    es_free_big(f->k, fbytes(T, dkv));
    es_free_big(f->v, fbytes(T, v_width(hp)));
    es_free_big(f->att, fbytes(T, att_width(hp)));
    es_free_big(f->tmp, fbytes(T, d));
    es_free_big(f->moe, fbytes(T, d));
    es_free_big(f->rope_cs, fbytes(T, hp->n_rot));
    es_free_big(f->router, fbytes(T, hp->n_expert));
    es_free_big(f->ffn_g, fbytes(FFN_ROWS, f->ffn_width));
    es_free_big(f->ffn_u, fbytes(FFN_ROWS, f->ffn_width));
    f->ffn_g = f->ffn_u = NULL;
    if (f->conv_bcx) es_free_big(f->conv_bcx, fbytes(T, 3 * d));
    f->conv_bcx = NULL;
    if (f->mla_ckv) es_free_big(f->mla_ckv, fbytes(T, hp->n_lora_kv + hp->n_rot));
    if (f->mla_kvd) es_free_big(f->mla_kvd, fbytes(T, mla_kvd_width(hp)));
    if (f->mla_out) es_free_big(f->mla_out, fbytes(T, hp->n_embd_att));
    f->mla_ckv = f->mla_kvd = f->mla_out = NULL;
    es_free_big(f->routes, sizeof(es_route) * (size_t)T * (size_t)hp->n_expert_used);
    es_free_big(f->routes_tmp, sizeof(es_route) * (size_t)T * (size_t)hp->n_expert_used);
    es_free_big(f->act, f->act_bytes);
    es_attn_destroy(f->attn);
    for (int i = 0; i < f->n_plans; i++) es_plan_destroy(f->plans[i].plan);
    f->n_plans = 0;
    f->x = f->h = f->q = f->k = f->v = f->att = f->tmp = f->moe = f->rope_cs = f->router = NULL;
    f->routes = f->routes_tmp = NULL;
    f->act = NULL;
    f->attn = NULL;
    f->t_cap = 0;
}

void es_fast_destroy(es_fast *f, const es_hparams *hp)
{
    if (!f) return;
    free_buffers(f, hp);
    if (f->scratch)
        for (int i = 0; i < f->n_threads; i++) es_free_big(f->scratch[i], f->scratch_bytes);
    free(f->scratch);
    if (f->mla_w.data) es_free_big((void *)f->mla_w.data, f->mla_w.nbytes);
    free(f->phi);
    free(f->route_start);
    free(f->route_counts);
    free(f->slots);
    es_pool_destroy(f->pool);
    free(f);
}

/* Largest activation buffer any dense product of the model needs for T rows (the row length of
 * each product is its weight's ne[0]: n_embd, n_embd_q for the attention output, the FFN size
 * for a dense FFN's down projection, which runs FFN_ROWS rows at a time). */
static size_t max_act_bytes(const es_kern *k, const es_model *m, int64_t T)
{
    size_t mx = es_act_bytes(k, m->output.type, T, m->output.ne[0]);
    const int64_t T_ffn = T < FFN_ROWS ? T : FFN_ROWS;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const es_tensor *ts[ES_LAYER_N_MATRICES];
        es_layer_matrices(&m->layers[il], ts);
        for (int i = 0; i < ES_LAYER_N_MATRICES; i++) {
            if (!ts[i]->data) continue;
            const bool ffn = i >= ES_LAYER_FIRST_FFN;
            size_t b = es_act_bytes(k, ts[i]->type, ffn ? T_ffn : T, ts[i]->ne[0]);
            mx = b > mx ? b : mx;
        }
    }
    return mx;
}

/* The widest dense FFN of the model (0 if it has none). */
static int64_t ffn_width(const es_model *m)
{
    int64_t w = m->hp.n_layer_dense_lead > 0 ? m->hp.n_ff : 0;
    return m->hp.n_ff_shexp > w ? m->hp.n_ff_shexp : w;
}

static es_plan *plan_for(es_fast *f, const es_model *m, const es_layer *L, es_status *st);
static es_status resident_acquire(es_expert_provider *p, int il, int e0, const int32_t **phi,
                                  const es_expert_slot **slots);
static void resident_release(es_expert_provider *p, int il, int e0);

/* Activation buffers and expert plans for prompts of up to T tokens (plans are sized to T, not
 * to the model's context, which may be far longer than any prompt). */
static es_status alloc_buffers(es_fast *f, const es_model *m, int64_t T)
{
    const es_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd, dq = hp->n_embd_q, dkv = hp->n_embd_kv;
    free_buffers(f, hp);
    f->t_cap = T;
    f->x = es_alloc_big(fbytes(T, d));
    f->h = es_alloc_big(fbytes(T, d));
    f->q = es_alloc_big(fbytes(T, dq));
    f->k = es_alloc_big(fbytes(T, dkv));
    f->v = es_alloc_big(fbytes(T, v_width(hp)));
    f->att = es_alloc_big(fbytes(T, att_width(hp)));
    f->tmp = es_alloc_big(fbytes(T, d));
    f->moe = es_alloc_big(fbytes(T, d));
    f->rope_cs = es_alloc_big(fbytes(T, hp->n_rot));
    f->router = es_alloc_big(fbytes(T, hp->n_expert));
    f->ffn_width = ffn_width(m);
    if (f->ffn_width > 0) {
        f->ffn_g = es_alloc_big(fbytes(FFN_ROWS, f->ffn_width));
        f->ffn_u = es_alloc_big(fbytes(FFN_ROWS, f->ffn_width));
        if (!f->ffn_g || !f->ffn_u)
            return es_fail(ES_E_NOMEM, "out of memory for a dense FFN of %lld",
                           (long long)f->ffn_width);
    }
    if (hp->n_conv_layers > 0 && !(f->conv_bcx = es_alloc_big(fbytes(T, 3 * d))))
        return es_fail(ES_E_NOMEM, "out of memory for the short convolutions of %lld tokens",
                       (long long)T);
    if (hp->n_lora_kv > 0) {
        f->mla_ckv = es_alloc_big(fbytes(T, hp->n_lora_kv + hp->n_rot));
        f->mla_kvd = es_alloc_big(fbytes(T, mla_kvd_width(hp)));
        if (hp->mla_split) f->mla_out = es_alloc_big(fbytes(T, hp->n_embd_att));
        if (!f->mla_ckv || !f->mla_kvd || (hp->mla_split && !f->mla_out))
            return es_fail(ES_E_NOMEM, "out of memory for the latent attention of %lld tokens",
                           (long long)T);
    }
    f->routes = es_alloc_big(sizeof(es_route) * (size_t)T * (size_t)hp->n_expert_used);
    f->routes_tmp = es_alloc_big(sizeof(es_route) * (size_t)T * (size_t)hp->n_expert_used);
    f->act_bytes = max_act_bytes(f->kern, m, T);
    for (int il = 0; latent_values(hp) && il < hp->n_layer; il++) {
        /* the key decompression's f32 activations, the value heads' latent rows */
        size_t b = es_act_bytes(f->kern, ES_QTYPE_F32, T, hp->n_lora_kv);
        f->act_bytes = b > f->act_bytes ? b : f->act_bytes;
        b = es_act_bytes(f->kern, m->layers[il].wv_b.type, T, hp->n_lora_kv);
        f->act_bytes = b > f->act_bytes ? b : f->act_bytes;
    }
    f->act = es_alloc_big(f->act_bytes);
    if (!f->x || !f->h || !f->q || !f->k || !f->v || !f->att || !f->tmp || !f->moe ||
        !f->rope_cs || !f->router || !f->routes || !f->routes_tmp || !f->act)
        return es_fail(ES_E_NOMEM, "out of memory for the activations of %lld tokens", (long long)T);
    es_status st = latent_values(hp)
        ? es_attn_create(T, hp->n_head, hp->n_head, hp->n_embd_head, 1, hp->n_lora_kv, f->pool,
                         f->kern, &f->attn)
        : es_attn_create(T, hp->n_head, hp->n_head_kv, hp->n_embd_head, hp->n_head_kv,
                         hp->n_embd_head_v, f->pool, f->kern, &f->attn);
    for (int il = 0; il < hp->n_layer && st == ES_OK; il++)
        if (es_layer_is_moe(&m->layers[il])) plan_for(f, m, &m->layers[il], &st);
    return st;
}

static es_plan *plan_for(es_fast *f, const es_model *m, const es_layer *L, es_status *st)
{
    es_expert_shape sh = {m->hp.n_embd, m->hp.n_ff_exp, L->gate_exps.type, L->up_exps.type,
                          L->down_exps.type, m->hp.n_expert,
                          {L->gate_exps.layout, L->up_exps.layout, L->down_exps.layout}};
    for (int i = 0; i < f->n_plans; i++) /* keyed on the whole expert shape */
        if (!memcmp(&f->plans[i].shape, &sh, sizeof(sh))) return f->plans[i].plan;
    if (f->n_plans == MAX_PLANS) {
        *st = es_fail(ES_E_UNSUPPORTED, "too many expert weight-type mixes");
        return NULL;
    }
    es_plan *p = NULL;
    if ((*st = es_plan_create(&sh, f->plan_capacity, (int)f->t_cap, f->n_slots, f->pool, f->kern,
                              &p)))
        return NULL;
    f->plans[f->n_plans++] = (plan_entry){sh, f->n_slots, p};
    return p;
}

es_status es_fast_create(const es_model *m, const es_kern *k, int n_threads, int plan_capacity,
                         int n_slots, es_fast **out)
{
    const es_hparams *hp = &m->hp;
    es_fast *f = calloc(1, sizeof(*f));
    if (!f) return es_fail(ES_E_NOMEM, "out of memory");
    es_status st = es_pool_create(n_threads, &f->pool);
    if (st) {
        free(f);
        return st;
    }
    f->kern = k;
    f->n_layer = hp->n_layer;
    f->n_expert = hp->n_expert;
    f->resident = (es_expert_provider){.group = hp->n_expert, .n_slots = hp->n_expert,
                                       .acquire = resident_acquire, .release = resident_release};
    f->n_threads = n_threads;
    f->plan_capacity = plan_capacity > 0 ? plan_capacity : PLAN_CAPACITY;
    f->n_slots = n_slots > hp->n_expert ? n_slots : hp->n_expert;
    f->phi = calloc((size_t)hp->n_expert, sizeof(int32_t));
    f->slots = calloc((size_t)hp->n_layer * (size_t)hp->n_expert, sizeof(es_expert_slot));
    f->scratch = calloc((size_t)n_threads, sizeof(void *));
    f->route_start = calloc((size_t)hp->n_expert + 1, sizeof(int64_t));
    f->route_counts = calloc((size_t)hp->n_layer * (size_t)hp->n_expert, sizeof(int64_t));
    if (!f->phi || !f->slots || !f->scratch || !f->route_start || !f->route_counts) {
        es_fast_destroy(f, hp);
        return es_fail(ES_E_NOMEM, "out of memory");
    }
    size_t sb = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const es_layer *L = &m->layers[il];
        const es_tensor *ts[ES_LAYER_N_MATRICES + 1];
        es_layer_matrices(L, ts);
        ts[ES_LAYER_N_MATRICES] = &m->output;
        for (size_t i = 0; i < ES_LEN(ts); i++) {
            if (!ts[i]->data) continue; /* not in this layer's kind */
            if (!es_kern_supports(k, ts[i]->type)) {
                es_fast_destroy(f, hp);
                return es_fail(ES_E_UNSUPPORTED, "no fast kernel for %s (%s); use --reference",
                               ts[i]->name, es_qtype_name(ts[i]->type));
            }
            const size_t b = es_gemm_scratch_bytes(k, ts[i]->type, ts[i]->ne[0]);
            sb = b > sb ? b : sb;
        }
        if (!es_layer_is_moe(L)) continue;
        for (int e = 0; e < hp->n_expert; e++) {
            es_expert_slot *s = &f->slots[(size_t)il * (size_t)hp->n_expert + (size_t)e];
            s->gate = es_layer_expert(L, 0, e); /* pointers only: nothing is touched here */
            s->up = es_layer_expert(L, 1, e);
            s->down = es_layer_expert(L, 2, e);
        }
        const es_tensor *ex[] = {&L->gate_exps, &L->up_exps, &L->down_exps};
        for (size_t i = 0; i < ES_LEN(ex); i++)
            if (!es_kern_supports(k, ex[i]->type)) {
                es_fast_destroy(f, hp);
                return es_fail(ES_E_UNSUPPORTED, "no fast kernel for %s (%s); use --reference",
                               ex[i]->name, es_qtype_name(ex[i]->type));
            }
    }
    for (int e = 0; e < hp->n_expert; e++) f->phi[e] = e;
    if (latent_values(hp)) { /* MLA's key decompression matrix, rebuilt in f32 for each layer */
        const int64_t rows = mla_kvd_width(hp);
        f->mla_w = (es_tensor){.name = "mla decompression", .type = ES_QTYPE_F32,
                               .ne = {hp->n_lora_kv, rows, 1, 1},
                               .row_bytes = sizeof(float) * (size_t)hp->n_lora_kv,
                               .nbytes = fbytes(rows, hp->n_lora_kv)};
        if (!(f->mla_w.data = es_alloc_big(f->mla_w.nbytes))) {
            es_fast_destroy(f, hp);
            return es_fail(ES_E_NOMEM, "out of memory for the latent attention's matrices");
        }
        const size_t b = es_gemm_scratch_bytes(k, ES_QTYPE_F32, hp->n_lora_kv);
        sb = b > sb ? b : sb;
        for (int il = 0; il < hp->n_layer; il++) {
            const es_tensor *vb = &m->layers[il].wv_b;
            if (!es_kern_supports(k, vb->type)) {
                es_fast_destroy(f, hp);
                return es_fail(ES_E_UNSUPPORTED, "no fast kernel for %s (%s); use --reference",
                               vb->name, es_qtype_name(vb->type));
            }
            const size_t bv = es_gemm_scratch_bytes(k, vb->type, hp->n_lora_kv);
            sb = bv > sb ? bv : sb;
        }
    }
    f->scratch_bytes = es_align_up(sb, 64);
    for (int i = 0; i < n_threads; i++)
        if (!(f->scratch[i] = es_alloc_big(f->scratch_bytes))) {
            es_fast_destroy(f, hp);
            return es_fail(ES_E_NOMEM, "out of memory");
        }
    *out = f;
    return ES_OK;
}

/* ---- pool jobs ---- */

/* Dense products: Y_i = act_i W_i^T for a few matrices at once, output rows in chunks. */
typedef struct gemm_task {
    const es_tensor *w;
    const void *act;
    float *y;
    int64_t ldy, n_rows;
} gemm_task;

typedef struct gemm_job {
    es_fast *f;
    const gemm_task *tasks;
    int n_tasks;
    es_pool_counter next;
} gemm_job;

static void gemm_worker(void *arg, int ith, int nth)
{
    (void)nth;
    gemm_job *j = arg;
    for (long c; (c = es_pool_counter_next(&j->next, 1)) >= 0;) {
        /* find the task of global chunk c */
        int ti = 0;
        long base = 0;
        for (; ti < j->n_tasks; ti++) {
            const long nc = (long)((j->tasks[ti].w->ne[1] + GEMM_CHUNK - 1) / GEMM_CHUNK);
            if (c < base + nc) break;
            base += nc;
        }
        if (ti == j->n_tasks) return;
        const gemm_task *t = &j->tasks[ti];
        const int64_t n0 = (int64_t)(c - base) * GEMM_CHUNK;
        const int64_t n1 = n0 + GEMM_CHUNK < t->w->ne[1] ? n0 + GEMM_CHUNK : t->w->ne[1];
        es_gemm(j->f->kern, t->w->type, t->w->data, t->w->ne[0], n0, n1, t->act, NULL, t->n_rows, t->y, t->ldy,
                0, j->f->scratch[ith]);
    }
}

static void run_gemms(es_fast *f, const gemm_task *tasks, int n)
{
    gemm_job j = {f, tasks, n, {0}};
    es_pool_counter_set(&j.next, 0);
    es_pool_run(f->pool, gemm_worker, &j);
}

/* Row-wise steps, split statically by rows. */
enum row_op { ROW_EMBED, ROW_ATTN_NORM, ROW_PREP, ROW_QK_NORM_ROPE, ROW_ADD, ROW_FFN_NORM,
              ROW_ROUTE, ROW_OUT_NORM, ROW_SWIGLU, ROW_CONV, ROW_MLA_NORM_ROPE, ROW_MLA_KV };

typedef struct row_job {
    es_fast *f;
    const es_model *m;
    const es_layer *L;
    enum row_op op;
    const int32_t *ids;
    int64_t T, r_begin;
    const float *src;     /* ROW_PREP: rows to prepare; ROW_ADD: rows to add into dst */
    float *dst;           /* ROW_ADD: NULL adds into the residual stream x */
    uint32_t wtype;       /* ROW_PREP */
    int64_t K;            /* ROW_PREP: row length; ROW_SWIGLU: the FFN width */
    int64_t ld;           /* ROW_PREP: src's row stride (0: K) */
} row_job;

/* RoPE of one head vector with the position's (cos, sin) per pair: NEOX pairs (i, i + n_rot/2),
 * normal pairs (2i, 2i + 1). */
static void rope_head(es_rope_kind kind, float *v, int n_rot, const float *cs)
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

/* The family's q/k normalisation of one token's projections (arch.h). */
static void qk_norm(const es_fast *f, const es_model *m, const es_layer *L, float *q, float *k)
{
    const es_hparams *hp = &m->hp;
    switch (m->family->qk_norm) {
    case ES_QK_NORM_NONE: break;
    case ES_QK_NORM_WHOLE:
        f->kern->rmsnorm(q, q, L->q_norm.data, hp->n_embd_q, hp->rms_eps);
        f->kern->rmsnorm(k, k, L->k_norm.data, hp->n_embd_kv, hp->rms_eps);
        break;
    case ES_QK_NORM_HEAD:
        for (int hh = 0; hh < hp->n_head; hh++)
            f->kern->rmsnorm(q + hh * hp->n_embd_head, q + hh * hp->n_embd_head, L->q_norm.data,
                             hp->n_embd_head, hp->rms_eps);
        for (int hh = 0; hh < hp->n_head_kv; hh++)
            f->kern->rmsnorm(k + hh * hp->n_embd_head, k + hh * hp->n_embd_head, L->k_norm.data,
                             hp->n_embd_head, hp->rms_eps);
        break;
    }
}

static void row_worker(void *arg, int ith, int nth)
{
    row_job *j = arg;
    es_fast *f = j->f;
    const es_hparams *hp = &j->m->hp;
    const es_layer *L = j->L;
    const int64_t d = hp->n_embd, dq = hp->n_embd_q, dkv = hp->n_embd_kv;
    const int64_t n = j->T - j->r_begin;
    const int64_t r0 = j->r_begin + n * ith / nth, r1 = j->r_begin + n * (ith + 1) / nth;
    if (r1 <= r0) return;
    switch (j->op) {
    case ROW_EMBED: {
        const es_tensor *te = &j->m->tok_embd;
        for (int64_t t = r0; t < r1; t++)
            es_dequantize_row(te->type, (const uint8_t *)te->data + (size_t)j->ids[t] * te->row_bytes,
                              f->x + t * d, d);
        for (int64_t t = r0; t < r1; t++) es_rope_cos_sin(hp, t, f->rope_cs + t * hp->n_rot);
        break;
    }
    case ROW_ATTN_NORM:
        for (int64_t t = r0; t < r1; t++) f->kern->rmsnorm(f->h + t * d, f->x + t * d, L->attn_norm.data, d, hp->rms_eps);
        break;
    case ROW_FFN_NORM:
        for (int64_t t = r0; t < r1; t++) f->kern->rmsnorm(f->h + t * d, f->x + t * d, L->ffn_norm.data, d, hp->rms_eps);
        break;
    case ROW_OUT_NORM:
        for (int64_t t = r0; t < r1; t++)
            f->kern->rmsnorm(f->h + t * d, f->x + t * d, j->m->output_norm.data, d, hp->rms_eps);
        break;
    case ROW_PREP: {
        const size_t rb = es_act_row_bytes(f->kern, j->wtype, j->K);
        const int64_t ld = j->ld ? j->ld : j->K;
        es_act_prepare(f->kern, j->wtype, j->src + r0 * ld, ld, r1 - r0, j->K,
                       (uint8_t *)f->act + (size_t)(r0 - j->r_begin) * rb);
        break;
    }
    case ROW_QK_NORM_ROPE: {
        const es_rope_kind rk = j->m->family->rope;
        for (int64_t t = r0; t < r1; t++) {
            float *q = f->q + t * dq, *k = f->k + t * dkv;
            qk_norm(f, j->m, L, q, k);
            const float *cs = f->rope_cs + t * hp->n_rot;
            for (int hh = 0; hh < hp->n_head; hh++) rope_head(rk, q + hh * hp->n_embd_head, hp->n_rot, cs);
            for (int hh = 0; hh < hp->n_head_kv; hh++) rope_head(rk, k + hh * hp->n_embd_head, hp->n_rot, cs);
        }
        break;
    }
    case ROW_ADD: {
        float *dst = j->dst ? j->dst : f->x;
        for (int64_t t = r0; t < r1; t++)
            for (int64_t i = 0; i < d; i++) dst[t * d + i] += j->src[t * d + i];
        break;
    }
    case ROW_CONV: {
        /* LFM2's short convolution, row t of f->moe from rows t-taps+1 .. t of [B | C | X]:
         * y[c] = C[t][c] * sum_j w[c][j] * (B * X)[t - taps + 1 + j][c], j increasing, rows
         * before the prompt zero (the empty state), as ggml_ssm_conv sums them */
        const int taps = hp->n_conv_taps;
        const float *w = j->L->conv.data;
        for (int64_t t = r0; t < r1; t++) {
            const float *bcx = f->conv_bcx + t * 3 * d;
            float *y = f->moe + t * d;
            for (int64_t c = 0; c < d; c++) {
                float sum = 0.0f;
                for (int jj = 0; jj < taps; jj++) {
                    const int64_t ts = t - taps + 1 + jj;
                    if (ts < 0) continue;
                    const float *r = f->conv_bcx + ts * 3 * d;
                    sum += r[c] * r[2 * d + c] * w[c * taps + jj];
                }
                y[c] = bcx[d + c] * sum;
            }
        }
        break;
    }
    case ROW_MLA_NORM_ROPE: {
        /* MLA: c = rmsnorm(c) * kv_a_norm; RoPE on k_pe and on each query head's last n_rot;
         * each head's q_nope rounded as llama.cpp's product with attn_k_b rounds it (its
         * q_nope . (Wk c) is our (Wk^T q_nope) . c) */
        const int64_t kv = hp->n_lora_kv, dc = kv + hp->n_rot, dk = hp->n_embd_head;
        const es_rope_kind rk = j->m->family->rope;
        for (int64_t t = r0; t < r1; t++) {
            float *c = f->mla_ckv + t * dc;
            const float *cs = f->rope_cs + t * hp->n_rot;
            f->kern->rmsnorm(c, c, L->kv_a_norm.data, kv, hp->rms_eps);
            rope_head(rk, c + kv, hp->n_rot, cs);
            for (int hh = 0; hh < hp->n_head; hh++) {
                float *q = f->q + t * dq + hh * dk;
                if (hp->mla_split) es_act_round(L->wk_b.type, q, dk - hp->n_rot);
                rope_head(rk, q + (dk - hp->n_rot), hp->n_rot, cs);
            }
        }
        break;
    }
    case ROW_MLA_KV: {
        /* MLA: each head's key [k_nope | the shared k_pe]; the value is the latent row c, or
         * in the joined form each head's decompressed value */
        const int64_t kv = hp->n_lora_kv, rot = hp->n_rot, dc = kv + rot, dk = hp->n_embd_head;
        const int64_t nope = dk - rot, dv = hp->n_embd_head_v, w = mla_kvd_width(hp) / hp->n_head;
        for (int64_t t = r0; t < r1; t++) {
            const float *kd = f->mla_kvd + t * hp->n_head * w, *c = f->mla_ckv + t * dc;
            for (int hh = 0; hh < hp->n_head; hh++) {
                float *k = f->k + t * dkv + hh * dk;
                memcpy(k, kd + hh * w, sizeof(float) * (size_t)nope);
                memcpy(k + nope, c + kv, sizeof(float) * (size_t)rot);
                if (!hp->mla_split)
                    memcpy(f->v + t * hp->n_embd_v + hh * dv, kd + hh * w + nope,
                           sizeof(float) * (size_t)dv);
            }
            if (hp->mla_split) memcpy(f->v + t * kv, c, sizeof(float) * (size_t)kv);
        }
        break;
    }
    case ROW_SWIGLU:
        for (int64_t t = r0; t < r1; t++) f->kern->swiglu(f->ffn_g + t * j->K, f->ffn_u + t * j->K, j->K);
        break;
    case ROW_ROUTE: {
        float probs[4096], weight[4096];
        int chosen[4096];
        const int E = hp->n_expert, K = hp->n_expert_used;
        for (int64_t t = r0; t < r1; t++) {
            es_arch_route(j->m->family, hp->topk_renorm, f->router + t * E, E, K,
                          hp->expert_weights_scale,
                          j->L->exp_probs_b.data, probs, chosen, weight);
            for (int jj = 0; jj < K; jj++) {
                /* store per token; sorted by expert afterwards */
                es_route *r = &f->routes[t * K + jj];
                r->token = (int32_t)t;
                r->expert = chosen[jj];
                r->weight = weight[jj];
            }
        }
        break;
    }
    }
}

static void run_rows(es_fast *f, const es_model *m, const es_layer *L, enum row_op op, int64_t T)
{
    row_job j = {.f = f, .m = m, .L = L, .op = op, .T = T};
    es_pool_run(f->pool, row_worker, &j);
}

/* Prepares rows [r_begin, T) of src (row length K) for weights of wtype into f->act. */
static void prepare(es_fast *f, const es_model *m, const float *src, int64_t K, uint32_t wtype,
                    int64_t r_begin, int64_t T)
{
    row_job j = {.f = f, .m = m, .op = ROW_PREP, .T = T, .r_begin = r_begin, .src = src,
                 .wtype = wtype, .K = K};
    es_pool_run(f->pool, row_worker, &j);
}

/* Counting sort of the routes by expert (stable: tokens stay increasing within an expert);
 * keeps layer il's counts for es_route_counts(). */
static void sort_routes(es_fast *f, const es_hparams *hp, int64_t T, int il)
{
    const int E = hp->n_expert;
    const int64_t R = T * hp->n_expert_used;
    int64_t *start = f->route_start;
    memset(start, 0, sizeof(int64_t) * ((size_t)E + 1));
    for (int64_t i = 0; i < R; i++) start[f->routes[i].expert + 1]++;
    memcpy(f->route_counts + (size_t)il * (size_t)E, start + 1, sizeof(int64_t) * (size_t)E);
    for (int e = 0; e < E; e++) start[e + 1] += start[e];
    for (int64_t i = 0; i < R; i++) f->routes_tmp[start[f->routes[i].expert]++] = f->routes[i];
    memcpy(f->routes, f->routes_tmp, sizeof(es_route) * (size_t)R);
}

/* The all-resident provider: one group of every expert, each in the slot of its id. */
static es_status resident_acquire(es_expert_provider *p, int il, int e0, const int32_t **phi,
                                  const es_expert_slot **slots)
{
    es_fast *f = (es_fast *)((char *)p - offsetof(es_fast, resident));
    (void)e0;
    *phi = f->phi;
    *slots = f->slots + (size_t)il * (size_t)f->n_expert;
    return ES_OK;
}
static void resident_release(es_expert_provider *p, int il, int e0) { (void)p, (void)il, (void)e0; }

/* The mixture of experts of layer il over f->h into f->moe: groups of the provider's G experts
 * in increasing id, each group's routes (contiguous: the routes are sorted by expert) in
 * invocations of at most the plan's capacity. */
static es_status moe_stage(es_fast *f, const es_model *m, es_expert_provider *prov, int il,
                           int64_t T)
{
    const es_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd;
    const int E = hp->n_expert;
    es_status st = ES_OK;
    es_plan *plan = plan_for(f, m, &m->layers[il], &st);
    ES_ASSERT(plan); /* made for every layer's shape at alloc_buffers */
    const int64_t *counts = f->route_counts + (size_t)il * (size_t)E;
    if (prov->layer_routed) ES_TRY(prov->layer_routed(prov, il, counts));
    es_plan_set_input(plan, f->h, d, T);
    memset(f->moe, 0, fbytes(T, d));
    const int64_t cap = es_plan_capacity(plan);
    const int G = prov->group;
    int64_t r_begin = 0;
    for (int e0 = 0; e0 < E; e0 += G) {
        const int e1 = e0 + G < E ? e0 + G : E;
        int64_t n = 0;
        for (int e = e0; e < e1; e++) n += counts[e];
        if (n == 0) continue;
        const int32_t *phi;
        const es_expert_slot *slots;
        ES_TRY(prov->acquire(prov, il, e0, &phi, &slots));
        for (int64_t r0 = r_begin; r0 < r_begin + n && st == ES_OK; r0 += cap) {
            const int nr = (int)(r_begin + n - r0 < cap ? r_begin + n - r0 : cap);
            st = es_plan_invoke(plan, f->routes + r0, nr, phi, slots, f->moe, d);
        }
        prov->release(prov, il, e0);
        ES_TRY(st);
        r_begin += n;
    }
    return ES_OK;
}

/* A dense FFN over f->h into out ([T][n_embd], overwritten): out = down(silu(gate h) * up h),
 * FFN_ROWS token rows at a time. A dense layer's FFN, and the shared experts of a MoE layer. */
static void dense_ffn(es_fast *f, const es_model *m, const es_tensor *gate, const es_tensor *up,
                      const es_tensor *down, int64_t T, float *out)
{
    const int64_t d = m->hp.n_embd, ff = gate->ne[1];
    for (int64_t t0 = 0; t0 < T; t0 += FFN_ROWS) {
        const int64_t n = T - t0 < FFN_ROWS ? T - t0 : FFN_ROWS;
        prepare(f, m, f->h + t0 * d, d, gate->type, 0, n);
        if (gate->type == up->type) {
            gemm_task gu[2] = {{gate, f->act, f->ffn_g, ff, n}, {up, f->act, f->ffn_u, ff, n}};
            run_gemms(f, gu, 2);
        } else {
            gemm_task g = {gate, f->act, f->ffn_g, ff, n};
            run_gemms(f, &g, 1);
            prepare(f, m, f->h + t0 * d, d, up->type, 0, n);
            gemm_task u = {up, f->act, f->ffn_u, ff, n};
            run_gemms(f, &u, 1);
        }
        row_job sw = {.f = f, .m = m, .op = ROW_SWIGLU, .T = n, .K = ff};
        es_pool_run(f->pool, row_worker, &sw);
        prepare(f, m, f->ffn_g, ff, down->type, 0, n);
        gemm_task dn = {down, f->act, out + t0 * d, d, n};
        run_gemms(f, &dn, 1);
    }
}

/* LFM2's short-convolution block over f->h, added to the residual stream: [B | C | X] = h Win^T,
 * y = C * conv(B * X) (ROW_CONV, into f->moe, free until the MoE stage), x += y Wout^T. */
static void conv_block(es_fast *f, const es_model *m, const es_layer *L, int64_t T)
{
    const int64_t d = m->hp.n_embd;
    prepare(f, m, f->h, d, L->conv_in.type, 0, T);
    gemm_task in = {&L->conv_in, f->act, f->conv_bcx, 3 * d, T};
    run_gemms(f, &in, 1);
    run_rows(f, m, L, ROW_CONV, T);
    prepare(f, m, f->moe, d, L->conv_out.type, 0, T);
    gemm_task out = {&L->conv_out, f->act, f->tmp, d, T};
    run_gemms(f, &out, 1);
    row_job add = {.f = f, .m = m, .L = L, .op = ROW_ADD, .T = T, .src = f->tmp};
    es_pool_run(f->pool, row_worker, &add);
}

/* The attention output src [T][n_embd_att] projected by Wo and added to the residual stream. */
static void project_out(es_fast *f, const es_model *m, const es_layer *L, const float *src,
                        int64_t T)
{
    const es_hparams *hp = &m->hp;
    prepare(f, m, src, hp->n_embd_att, L->wo.type, 0, T);
    gemm_task o = {&L->wo, f->act, f->tmp, hp->n_embd, T};
    run_gemms(f, &o, 1);
    row_job add = {.f = f, .m = m, .L = L, .op = ROW_ADD, .T = T, .src = f->tmp};
    es_pool_run(f->pool, row_worker, &add);
}

/* Attention over f->h (GQA, q/k norms and RoPE as the family says), added to the residual
 * stream. */
static void attention_block(es_fast *f, const es_model *m, const es_layer *L, int64_t T)
{
    const es_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd, dq = hp->n_embd_q, dkv = hp->n_embd_kv;
    if (L->wq.type == L->wk.type && L->wq.type == L->wv.type) {
        prepare(f, m, f->h, d, L->wq.type, 0, T);
        gemm_task qkv[3] = {{&L->wq, f->act, f->q, dq, T}, {&L->wk, f->act, f->k, dkv, T},
                            {&L->wv, f->act, f->v, dkv, T}};
        run_gemms(f, qkv, 3);
    } else {
        const es_tensor *ws[3] = {&L->wq, &L->wk, &L->wv};
        float *ys[3] = {f->q, f->k, f->v};
        for (int i = 0; i < 3; i++) {
            prepare(f, m, f->h, d, ws[i]->type, 0, T);
            gemm_task t = {ws[i], f->act, ys[i], ws[i]->ne[1], T};
            run_gemms(f, &t, 1);
        }
    }
    run_rows(f, m, L, ROW_QK_NORM_ROPE, T);
    es_attn_set_kv(f->attn, f->k, f->v, T);
    es_attn_run(f->attn, f->q, f->att, T, m->hp.attn_scale);
    project_out(f, m, L, f->att, T);
}

/* MLA: layer L's key decompression matrix in f32 (f->mla_w), attn_k_b transposed, one head per
 * work item. */
typedef struct mla_w_job { es_fast *f; const es_hparams *hp; const es_layer *L; } mla_w_job;

static void mla_w_worker(void *arg, int ith, int nth)
{
    const mla_w_job *j = arg;
    const es_hparams *hp = j->hp;
    const es_layer *L = j->L;
    const int64_t kv = hp->n_lora_kv, nope = hp->n_embd_head - hp->n_rot;
    float tmp[4096]; /* nope <= n_embd_head <= 4096 (model.c) */
    for (int hh = ith; hh < hp->n_head; hh += nth) {
        float *w = (float *)j->f->mla_w.data + (size_t)(hh * nope * kv);
        for (int64_t c = 0; c < kv; c++) {
            es_dequantize_row(L->wk_b.type, (const uint8_t *)L->wk_b.data + (size_t)(hh * kv + c) * L->wk_b.row_bytes, tmp, nope);
            for (int64_t i = 0; i < nope; i++) w[i * kv + c] = tmp[i];
        }
    }
}

/* Multi-head latent attention (deepseek2) over f->h, added to the residual stream.
 * Split files (attn_k_b / attn_v_b): keys are decompressed (each token's keys per head from its
 * latent row in one f32 product, so scores run over n_embd_head dims where llama.cpp's absorbed
 * form runs over n_lora_kv + n_rot), with q_nope rounded as llama.cpp's absorption rounds it;
 * values stay latent as in llama.cpp: every head attends over the shared rows c and its output
 * goes through that head's attn_v_b with activations in the weight's format (decompressing the
 * values too would skip that rounding: KL 1e-3 on a Q4_K_M file). Joined files (attn_kv_b):
 * keys and values decompressed in one product, as llama.cpp does for them. */
static void mla_block(es_fast *f, const es_model *m, const es_layer *L, int64_t T)
{
    const es_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd, kv = hp->n_lora_kv, dc = kv + hp->n_rot;
    if (hp->mla_split) {
        mla_w_job wj = {f, hp, L};
        es_pool_run(f->pool, mla_w_worker, &wj);
    }
    prepare(f, m, f->h, d, L->wq.type, 0, T);
    if (L->wq.type == L->wkv_a.type) {
        gemm_task qc[2] = {{&L->wq, f->act, f->q, hp->n_embd_q, T}, {&L->wkv_a, f->act, f->mla_ckv, dc, T}};
        run_gemms(f, qc, 2);
    } else {
        gemm_task q = {&L->wq, f->act, f->q, hp->n_embd_q, T};
        run_gemms(f, &q, 1);
        prepare(f, m, f->h, d, L->wkv_a.type, 0, T);
        gemm_task c = {&L->wkv_a, f->act, f->mla_ckv, dc, T};
        run_gemms(f, &c, 1);
    }
    run_rows(f, m, L, ROW_MLA_NORM_ROPE, T);
    const es_tensor *dw = hp->mla_split ? &f->mla_w : &L->wkv_b;
    row_job pj = {.f = f, .m = m, .op = ROW_PREP, .T = T, .src = f->mla_ckv, .wtype = dw->type,
                  .K = kv, .ld = dc};
    es_pool_run(f->pool, row_worker, &pj);
    gemm_task dk = {dw, f->act, f->mla_kvd, mla_kvd_width(hp), T};
    run_gemms(f, &dk, 1);
    run_rows(f, m, L, ROW_MLA_KV, T);
    es_attn_set_kv(f->attn, f->k, f->v, T);
    es_attn_run(f->attn, f->q, f->att, T, hp->attn_scale);
    if (!hp->mla_split) {
        project_out(f, m, L, f->att, T);
        return;
    }
    /* each head's latent output [T][kv] (stride n_head kv) through its value matrix */
    const int64_t dv = hp->n_embd_head_v;
    for (int hh = 0; hh < hp->n_head; hh++) {
        es_tensor w = L->wv_b; /* head hh's dv rows */
        w.data = (const uint8_t *)w.data + (size_t)(hh * dv) * w.row_bytes;
        w.ne[1] = dv;
        w.ne[2] = 1;
        row_job pv = {.f = f, .m = m, .op = ROW_PREP, .T = T, .src = f->att + hh * kv,
                      .wtype = w.type, .K = kv, .ld = hp->n_head * kv};
        es_pool_run(f->pool, row_worker, &pv);
        gemm_task g = {&w, f->act, f->mla_out + hh * dv, hp->n_embd_att, T};
        run_gemms(f, &g, 1);
    }
    project_out(f, m, L, f->mla_out, T);
}

static es_status forward(es_fast *f, const es_model *m, es_expert_provider *prov,
                         const int32_t *ids, int64_t T, int all_logits, float *logits)
{
    const es_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd;
    row_job ej = {.f = f, .m = m, .op = ROW_EMBED, .ids = ids, .T = T};
    es_pool_run(f->pool, row_worker, &ej);

    for (int il = 0; il < hp->n_layer; il++) {
        const es_layer *L = &m->layers[il];
        if (prov->layer_begin) ES_TRY(prov->layer_begin(prov, il));
        uint64_t t0 = f->trace ? es_now_ns() : 0;
        /* attention, or a short-convolution block */
        run_rows(f, m, L, ROW_ATTN_NORM, T);
        if (L->is_conv)
            conv_block(f, m, L, T);
        else if (m->family->mla)
            mla_block(f, m, L, T);
        else
            attention_block(f, m, L, T);
        span(f, PHASE_ATTENTION, il, t0);

        /* the FFN: dense, or the mixture of experts (+ shared experts) */
        t0 = f->trace ? es_now_ns() : 0;
        run_rows(f, m, L, ROW_FFN_NORM, T);
        if (!es_layer_is_moe(L)) {
            dense_ffn(f, m, &L->ffn_gate, &L->ffn_up, &L->ffn_down, T, f->moe);
            row_job addd = {.f = f, .m = m, .L = L, .op = ROW_ADD, .T = T, .src = f->moe};
            es_pool_run(f->pool, row_worker, &addd);
            span(f, PHASE_MOE, il, t0);
            continue;
        }
        prepare(f, m, f->h, d, L->gate_inp.type, 0, T);
        gemm_task rt = {&L->gate_inp, f->act, f->router, hp->n_expert, T};
        run_gemms(f, &rt, 1);
        run_rows(f, m, L, ROW_ROUTE, T);
        sort_routes(f, hp, T, il);
        span(f, PHASE_ROUTER, il, t0);
        t0 = f->trace ? es_now_ns() : 0;
        ES_TRY(moe_stage(f, m, prov, il, T));
        if (L->gate_shexp.data) { /* moe += shared, as llama.cpp adds the two */
            dense_ffn(f, m, &L->gate_shexp, &L->up_shexp, &L->down_shexp, T, f->tmp);
            row_job adds = {.f = f, .m = m, .L = L, .op = ROW_ADD, .T = T, .src = f->tmp,
                            .dst = f->moe};
            es_pool_run(f->pool, row_worker, &adds);
        }
        row_job addm = {.f = f, .m = m, .L = L, .op = ROW_ADD, .T = T, .src = f->moe};
        es_pool_run(f->pool, row_worker, &addm);
        span(f, PHASE_MOE, il, t0);
    }

    f->have_counts = true;
    /* output head: every row, or the last */
    const int64_t t0 = all_logits ? 0 : T - 1;
    row_job on = {.f = f, .m = m, .op = ROW_OUT_NORM, .T = T, .r_begin = t0}; /* rows that get logits */
    es_pool_run(f->pool, row_worker, &on);
    prepare(f, m, f->h, d, m->output.type, t0, T);
    gemm_task out = {&m->output, f->act, logits, hp->n_vocab, T - t0};
    run_gemms(f, &out, 1);
    return ES_OK;
}

es_status es_fast_reserve(es_fast *f, const es_model *m, int64_t T)
{
    if (f->t_cap >= T) return ES_OK;
    es_status st = alloc_buffers(f, m, T);
    if (st) free_buffers(f, &m->hp);
    return st;
}

es_status es_fast_forward(es_fast *f, const es_model *m, es_expert_provider *prov,
                          const int32_t *ids, size_t n, int all_logits, float *logits)
{
    const int64_t T = (int64_t)n;
    ES_TRY(es_fast_reserve(f, m, T));
    if (!prov) prov = &f->resident;
    ES_ASSERT(prov->n_slots <= f->n_slots);
    es_status st = forward(f, m, prov, ids, T, all_logits, logits);
    if (prov->run_end) prov->run_end(prov);
    return st;
}

es_status es_fast_route_counts(const es_fast *f, int il, int64_t *counts, int cap)
{
    if (!f || !f->have_counts)
        return es_fail(ES_E_INVAL, "route counts: no fast-path prefill has run in this session");
    if (il < 0 || il >= f->n_layer || cap < f->n_expert)
        return es_fail(ES_E_INVAL, "route counts: bad layer %d or capacity %d", il, cap);
    memcpy(counts, f->route_counts + (size_t)il * (size_t)f->n_expert,
           sizeof(int64_t) * (size_t)f->n_expert);
    return ES_OK;
}

int es_model_n_layer(const es_model *m) { return m->hp.n_layer; }
int es_model_n_expert(const es_model *m) { return m->hp.n_expert; }

int es_fast_n_threads(const es_fast *f) { return f->n_threads; }
