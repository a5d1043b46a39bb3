/*
 * The fast forward pass: the reference path's arithmetic restated for speed. Dense projections
 * and the output head go through the SIMD kernels (es_gemm) split over output rows across the
 * pool, attention is blocked with an online softmax, and the mixture of experts runs through the
 * expert plan (the fused expert operator) with every expert resident: phi maps expert e to slot e
 * and each slot points into the model's mapping.
 *
 * This file holds the session's fast-path state (create, reserve, destroy), the pool jobs every
 * block shares (dense products, activation preparation, residual adds, norms), the standard
 * attention block and the layer loop. The other block kinds have their own files: mla.c (latent
 * attention), conv.c (short convolutions), ffn.c (dense FFN, router, experts); forward_impl.h
 * is what they share.
 *
 * DESIGN: buffers are sized for the prompt and allocated once per prefill call (huge pages);
 * layers reuse them. Every output element is computed by one thread in a fixed order, so the
 * logits are bit-identical for any thread count. Row-wise work (norms, RoPE, residual adds) is
 * split statically by rows; matrix products by chunks of output rows handed out by a counter.
 * Each row step has its own worker and job struct and runs as one fork-join (es_pool_run); a
 * layer's fork-joins are the steps its block and FFN functions call, in the order they call them.
 */
#include "run/forward_impl.h"

#include "core/trace.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    GEMM_CHUNK = 64,       /* output rows per work item of a dense product */
    PLAN_CAPACITY = 16384, /* default routes per expert-plan invocation; more are split */
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

/* ---- state: every buffer is allocated and freed here, side by side ---- */

/* Widths of f->v and f->att: a token's values and attention output; in split MLA the latent
 * row (one value head shared by all) and each head's attention over it. */
static int64_t v_width(const es_hparams *hp)
{
    return es_mla_latent_values(hp) ? hp->n_lora_kv : hp->n_embd_v;
}
static int64_t att_width(const es_hparams *hp)
{
    return es_mla_latent_values(hp) ? (int64_t)hp->n_head * hp->n_lora_kv : hp->n_embd_att;
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
    es_free_big(f->pos, sizeof(int32_t) * (size_t)T);
    es_free_big(f->router, fbytes(T, hp->n_expert));
    es_free_big(f->ffn_g, fbytes(FFN_ROWS, f->ffn_width));
    es_free_big(f->ffn_u, fbytes(FFN_ROWS, f->ffn_width));
    f->ffn_g = f->ffn_u = NULL;
    if (f->conv_bcx) es_free_big(f->conv_bcx, fbytes(T, 3 * d));
    f->conv_bcx = NULL;
    if (f->mla_ckv) es_free_big(f->mla_ckv, fbytes(T, hp->n_lora_kv + hp->n_rot));
    if (f->mla_kvd) es_free_big(f->mla_kvd, fbytes(T, es_mla_kvd_width(hp)));
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
    f->pos = NULL;
    f->act = NULL;
    f->attn = NULL;
    f->t_cap = 0;
    f->seq_cap = 0;
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

/* Activation buffers and expert plans for batches of up to T tokens in n_seq sequences (plans
 * are sized to T, not to the model's context, which may be far longer than any prompt). */
static es_status alloc_buffers(es_fast *f, const es_model *m, int64_t T, int n_seq)
{
    const es_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd, dq = hp->n_embd_q, dkv = hp->n_embd_kv;
    free_buffers(f, hp);
    f->t_cap = T;
    f->seq_cap = n_seq;
    f->x = es_alloc_big(fbytes(T, d));
    f->h = es_alloc_big(fbytes(T, d));
    f->q = es_alloc_big(fbytes(T, dq));
    f->k = es_alloc_big(fbytes(T, dkv));
    f->v = es_alloc_big(fbytes(T, v_width(hp)));
    f->att = es_alloc_big(fbytes(T, att_width(hp)));
    f->tmp = es_alloc_big(fbytes(T, d));
    f->moe = es_alloc_big(fbytes(T, d));
    f->rope_cs = es_alloc_big(fbytes(T, hp->n_rot));
    f->pos = es_alloc_big(sizeof(int32_t) * (size_t)T);
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
        f->mla_kvd = es_alloc_big(fbytes(T, es_mla_kvd_width(hp)));
        if (hp->mla_split) f->mla_out = es_alloc_big(fbytes(T, hp->n_embd_att));
        if (!f->mla_ckv || !f->mla_kvd || (hp->mla_split && !f->mla_out))
            return es_fail(ES_E_NOMEM, "out of memory for the latent attention of %lld tokens",
                           (long long)T);
    }
    f->routes = es_alloc_big(sizeof(es_route) * (size_t)T * (size_t)hp->n_expert_used);
    f->routes_tmp = es_alloc_big(sizeof(es_route) * (size_t)T * (size_t)hp->n_expert_used);
    f->act_bytes = max_act_bytes(f->kern, m, T);
    for (int il = 0; es_mla_latent_values(hp) && il < hp->n_layer; il++) {
        /* the key decompression's f32 activations, the value heads' latent rows */
        size_t b = es_act_bytes(f->kern, ES_QTYPE_F32, T, hp->n_lora_kv);
        f->act_bytes = b > f->act_bytes ? b : f->act_bytes;
        b = es_act_bytes(f->kern, m->layers[il].wv_b.type, T, hp->n_lora_kv);
        f->act_bytes = b > f->act_bytes ? b : f->act_bytes;
    }
    f->act = es_alloc_big(f->act_bytes);
    if (!f->x || !f->h || !f->q || !f->k || !f->v || !f->att || !f->tmp || !f->moe ||
        !f->rope_cs || !f->pos || !f->router || !f->routes || !f->routes_tmp || !f->act)
        return es_fail(ES_E_NOMEM, "out of memory for the activations of %lld tokens",
                       (long long)T);
    es_status st = es_mla_latent_values(hp)
        ? es_attn_create(T, n_seq, hp->n_head, hp->n_head, hp->n_embd_head, 1, hp->n_lora_kv,
                         f->pool, f->kern, &f->attn)
        : es_attn_create(T, n_seq, hp->n_head, hp->n_head_kv, hp->n_embd_head, hp->n_head_kv,
                         hp->n_embd_head_v, f->pool, f->kern, &f->attn);
    for (int il = 0; il < hp->n_layer && st == ES_OK; il++)
        if (es_layer_is_moe(&m->layers[il])) es_ffn_plan(f, m, &m->layers[il], &st);
    return st;
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
    f->resident = es_ffn_resident(hp);
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
    if (es_mla_latent_values(hp)) { /* MLA's key decompression matrix, rebuilt in f32 per layer */
        const int64_t rows = es_mla_kvd_width(hp);
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


/* ---- shared pool jobs ---- */

/* Dense products: Y_i = act_i W_i^T for a few matrices at once, output rows in chunks. */
typedef struct gemm_job {
    es_fast *f;
    const es_gemm_task *tasks;
    int n_tasks;
    const int32_t *rows; /* NULL: act rows 0..n_rows; else the act row of each output row */
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
        const es_gemm_task *t = &j->tasks[ti];
        const int64_t n0 = (int64_t)(c - base) * GEMM_CHUNK;
        const int64_t n1 = n0 + GEMM_CHUNK < t->w->ne[1] ? n0 + GEMM_CHUNK : t->w->ne[1];
        es_gemm(j->f->kern, t->w->type, t->w->data, t->w->ne[0], n0, n1, t->act, j->rows, t->n_rows,
                t->y, t->ldy, 0, j->f->scratch[ith]);
    }
}

/* The work of a product with weight w over n_rows rows, counted for phase. */
static void count_gemm(es_fast *f, int phase, const es_tensor *w, int64_t n_rows)
{
    const double ops = 2.0 * (double)n_rows * (double)w->ne[0] * (double)w->ne[1];
    if (es_qtype_is_float(w->type))
        f->prof.float_ops[phase] += ops;
    else
        f->prof.int_ops[phase] += ops;
    f->prof.weight_bytes[phase] += (double)es_qtype_row_bytes(w->type, w->ne[0]) * (double)w->ne[1];
}

void es_fast_gemms(es_fast *f, const es_gemm_task *tasks, int n)
{
    es_fast_phase(f, f->gemm_phase);
    for (int i = 0; i < n; i++) count_gemm(f, f->gemm_phase, tasks[i].w, tasks[i].n_rows);
    gemm_job j = {f, tasks, n, NULL, {0}};
    es_pool_counter_set(&j.next, 0);
    es_pool_run(f->pool, gemm_worker, &j);
}

/* Activation preparation: rows [r_begin, T) of src quantized (or copied) for weights of wtype
 * into f->act. */
typedef struct prep_job {
    es_fast *f;
    const float *src; /* row t at src + t * ld */
    int64_t ld, K;    /* row stride, row length */
    uint32_t wtype;
    int64_t r_begin, T;
} prep_job;

static void prep_worker(void *arg, int ith, int nth)
{
    const prep_job *j = arg;
    es_fast *f = j->f;
    int64_t r0, r1;
    if (!es_row_span(j->r_begin, j->T, ith, nth, &r0, &r1)) return;
    const size_t rb = es_act_row_bytes(f->kern, j->wtype, j->K);
    es_act_prepare(f->kern, j->wtype, j->src + r0 * j->ld, j->ld, r1 - r0, j->K,
                   (uint8_t *)f->act + (size_t)(r0 - j->r_begin) * rb);
}

void es_fast_prepare_ld(es_fast *f, const float *src, int64_t ld, int64_t K, uint32_t wtype,
                        int64_t r_begin, int64_t T)
{
    es_fast_phase(f, ES_PHASE_ACT_QUANT);
    prep_job j = {f, src, ld, K, wtype, r_begin, T};
    es_pool_run(f->pool, prep_worker, &j);
}

void es_fast_prepare(es_fast *f, const float *src, int64_t K, uint32_t wtype, int64_t r_begin,
                     int64_t T)
{
    es_fast_prepare_ld(f, src, K, K, wtype, r_begin, T);
}

/* Residual adds: dst += src over T rows of d. */
typedef struct add_job { const float *src; float *dst; int64_t d, T; } add_job;

static void add_worker(void *arg, int ith, int nth)
{
    const add_job *j = arg;
    const int64_t d = j->d;
    int64_t r0, r1;
    if (!es_row_span(0, j->T, ith, nth, &r0, &r1)) return;
    for (int64_t t = r0; t < r1; t++)
        for (int64_t i = 0; i < d; i++) j->dst[t * d + i] += j->src[t * d + i];
}

void es_fast_add(es_fast *f, const es_model *m, const float *src, float *dst, int64_t T)
{
    es_fast_phase(f, ES_PHASE_NORM);
    add_job j = {src, dst, m->hp.n_embd, T};
    es_pool_run(f->pool, add_worker, &j);
}

void es_fast_layer_rows(es_fast *f, const es_model *m, const es_layer *L, int64_t T,
                        es_pool_fn fn)
{
    es_layer_rows j = {f, m, L, T};
    es_pool_run(f->pool, fn, &j);
}

/* RMS norms: f->h = rmsnorm(f->x) * w over rows [r_begin, T) (the norm before attention, the
 * FFN, or the output head). */
typedef struct norm_job {
    es_fast *f;
    const float *w; /* [n_embd] */
    int64_t d;
    float eps;
    int64_t r_begin, T;
} norm_job;

static void norm_worker(void *arg, int ith, int nth)
{
    const norm_job *j = arg;
    es_fast *f = j->f;
    const int64_t d = j->d;
    int64_t r0, r1;
    if (!es_row_span(j->r_begin, j->T, ith, nth, &r0, &r1)) return;
    for (int64_t t = r0; t < r1; t++)
        f->kern->rmsnorm(f->h + t * d, f->x + t * d, j->w, d, j->eps);
}

static void norm_rows(es_fast *f, const es_model *m, const es_tensor *w, int64_t r_begin,
                      int64_t T)
{
    es_fast_phase(f, ES_PHASE_NORM);
    norm_job j = {f, w->data, m->hp.n_embd, m->hp.rms_eps, r_begin, T};
    es_pool_run(f->pool, norm_worker, &j);
}

/* The embeddings of ids into f->x, and each row's RoPE (cos, sin) at its position within its
 * sequence (f->pos) into f->rope_cs. */
typedef struct embed_job {
    es_fast *f;
    const es_model *m;
    const int32_t *ids; /* [T] token ids */
    int64_t T;
} embed_job;

static void embed_worker(void *arg, int ith, int nth)
{
    const embed_job *j = arg;
    es_fast *f = j->f;
    const es_hparams *hp = &j->m->hp;
    const es_tensor *te = &j->m->tok_embd;
    const int64_t d = hp->n_embd;
    int64_t r0, r1;
    if (!es_row_span(0, j->T, ith, nth, &r0, &r1)) return;
    for (int64_t t = r0; t < r1; t++)
        es_dequantize_row(te->type, (const uint8_t *)te->data + (size_t)j->ids[t] * te->row_bytes,
                          f->x + t * d, d);
    for (int64_t t = r0; t < r1; t++) es_rope_cos_sin(hp, f->pos[t], f->rope_cs + t * hp->n_rot);
}

/* ---- the standard attention block ---- */

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

/* es_layer_rows job: f->q and f->k normalised as the family says, then rotated. */
static void qk_rope_worker(void *arg, int ith, int nth)
{
    const es_layer_rows *j = arg;
    es_fast *f = j->f;
    const es_hparams *hp = &j->m->hp;
    const int64_t dq = hp->n_embd_q, dkv = hp->n_embd_kv;
    const es_rope_kind rk = j->m->family->rope;
    int64_t r0, r1;
    if (!es_row_span(0, j->T, ith, nth, &r0, &r1)) return;
    for (int64_t t = r0; t < r1; t++) {
        float *q = f->q + t * dq, *k = f->k + t * dkv;
        qk_norm(f, j->m, j->L, q, k);
        const float *cs = f->rope_cs + t * hp->n_rot;
        for (int hh = 0; hh < hp->n_head; hh++)
            es_rope_head(rk, q + hh * hp->n_embd_head, hp->n_rot, cs);
        for (int hh = 0; hh < hp->n_head_kv; hh++)
            es_rope_head(rk, k + hh * hp->n_embd_head, hp->n_rot, cs);
    }
}

void es_fast_project_out(es_fast *f, const es_model *m, const es_layer *L, const float *src,
                         int64_t T)
{
    const es_hparams *hp = &m->hp;
    es_fast_prepare(f, src, hp->n_embd_att, L->wo.type, 0, T);
    es_gemm_task o = {&L->wo, f->act, f->tmp, hp->n_embd, T};
    es_fast_gemms(f, &o, 1);
    es_fast_add(f, m, f->tmp, f->x, T);
}

/* Attention over f->h (GQA, q/k norms and RoPE as the family says), added to the residual
 * stream. */
static void attention_block(es_fast *f, const es_model *m, const es_layer *L, int64_t T)
{
    const es_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd, dq = hp->n_embd_q, dkv = hp->n_embd_kv;
    if (L->wq.type == L->wk.type && L->wq.type == L->wv.type) {
        es_fast_prepare(f, f->h, d, L->wq.type, 0, T);
        es_gemm_task qkv[3] = {{&L->wq, f->act, f->q, dq, T}, {&L->wk, f->act, f->k, dkv, T},
                               {&L->wv, f->act, f->v, dkv, T}};
        es_fast_gemms(f, qkv, 3);
    } else {
        const es_tensor *ws[3] = {&L->wq, &L->wk, &L->wv};
        float *ys[3] = {f->q, f->k, f->v};
        for (int i = 0; i < 3; i++) {
            es_fast_prepare(f, f->h, d, ws[i]->type, 0, T);
            es_gemm_task t = {ws[i], f->act, ys[i], ws[i]->ne[1], T};
            es_fast_gemms(f, &t, 1);
        }
    }
    es_fast_phase(f, ES_PHASE_NORM);
    es_fast_layer_rows(f, m, L, T, qk_rope_worker);
    es_fast_attention(f, hp->n_head, hp->n_embd_head, hp->n_embd_head_v);
    es_attn_set_kv(f->attn, f->k, f->v, f->seq_start, f->n_seq);
    es_attn_run(f->attn, f->q, f->att, f->seq_start, f->n_seq, m->hp.attn_scale);
    es_fast_project_out(f, m, L, f->att, T);
}

void es_fast_attention(es_fast *f, int n_head, int64_t dk, int64_t dv)
{
    es_fast_phase(f, ES_PHASE_ATTN);
    for (int i = 0; i < f->n_seq; i++) {
        const double L = (double)(f->seq_start[i + 1] - f->seq_start[i]);
        f->prof.float_ops[ES_PHASE_ATTN] += 2.0 * n_head * (double)(dk + dv) * L * (L + 1) / 2;
    }
}

/* ---- the phase profile ---- */

void es_fast_prof_begin(es_fast *f)
{
    memset(f->prof_ns, 0, sizeof(f->prof_ns));
    memset(&f->prof, 0, sizeof(f->prof));
    f->prof_cur = ES_PHASE_OTHER;
    f->gemm_phase = ES_PHASE_OTHER;
    f->prof_t = es_now_ns();
}

void es_fast_prof_end(es_fast *f, int64_t tokens)
{
    es_fast_phase(f, ES_PHASE_OTHER);
    es_phase_profile *p = &f->prof;
    /* the expert operator's wall time, split by its threads' mean time in each sub-phase */
    double sub[ES_PHASE_COUNT] = {0}, sum = 0;
    for (int i = 0; i < f->n_plans; i++)
        es_plan_take_profile(f->plans[i].plan, sub, p->int_ops, p->float_ops, p->weight_bytes);
    for (int ph = 0; ph < ES_PHASE_COUNT; ph++) sum += sub[ph];
    const double moe = (double)f->prof_ns[ES_PHASE_COUNT];
    p->seconds = 0;
    for (int ph = 0; ph < ES_PHASE_COUNT; ph++) {
        double ns = (double)f->prof_ns[ph];
        if (sum > 0) ns += moe * sub[ph] / sum;
        else if (ph == ES_PHASE_OTHER) ns += moe;
        p->phase_seconds[ph] = ns * 1e-9;
        p->seconds += ns * 1e-9;
    }
    p->tokens = tokens;
}

const es_phase_profile *es_fast_profile(const es_fast *f) { return &f->prof; }

/* ---- the layer loop ---- */

/* Layer il over the batch's T rows: attention (or a short convolution), then the FFN. */
static es_status layer(es_fast *f, const es_model *m, es_expert_provider *prov, int il,
                       int64_t T)
{
    const es_layer *L = &m->layers[il];
    if (prov->layer_begin) {
        es_fast_phase(f, ES_PHASE_EXPERT_WAIT);
        ES_TRY(prov->layer_begin(prov, il));
    }
    uint64_t t0 = f->trace ? es_now_ns() : 0;
    es_fast_gemm_phase(f, ES_PHASE_ATTN_PROJ);
    /* attention, or a short-convolution block */
    norm_rows(f, m, &L->attn_norm, 0, T);
    if (L->is_conv)
        es_conv_block(f, m, L, T);
    else if (m->family->mla)
        es_mla_block(f, m, L, T);
    else
        attention_block(f, m, L, T);
    span(f, PHASE_ATTENTION, il, t0);

    /* the FFN: dense, or the mixture of experts (+ shared experts) */
    t0 = f->trace ? es_now_ns() : 0;
    norm_rows(f, m, &L->ffn_norm, 0, T);
    if (!es_layer_is_moe(L)) {
        es_ffn_dense(f, m, &L->ffn_gate, &L->ffn_up, &L->ffn_down, T, f->moe);
        es_fast_add(f, m, f->moe, f->x, T);
        span(f, PHASE_MOE, il, t0);
        return ES_OK;
    }
    es_ffn_route(f, m, L, il, T);
    span(f, PHASE_ROUTER, il, t0);
    t0 = f->trace ? es_now_ns() : 0;
    ES_TRY(es_ffn_moe(f, m, prov, il, T));
    if (L->gate_shexp.data) { /* moe += shared, as llama.cpp adds the two */
        es_ffn_dense(f, m, &L->gate_shexp, &L->up_shexp, &L->down_shexp, T, f->tmp);
        es_fast_add(f, m, f->tmp, f->moe, T);
    }
    es_fast_add(f, m, f->moe, f->x, T);
    span(f, PHASE_MOE, il, t0);
    return ES_OK;
}

es_status es_fast_layers(es_fast *f, const es_model *m, es_expert_provider *prov,
                         const es_fast_batch *b)
{
    const es_hparams *hp = &m->hp;
    const int64_t T = b->seq_start[b->n_seq];
    ES_TRY(es_fast_reserve(f, m, T, b->n_seq));
    if (!prov) prov = &f->resident;
    ES_ASSERT(prov->n_slots <= f->n_slots);
    f->seq_start = b->seq_start;
    f->n_seq = b->n_seq;
    for (int i = 0; i < b->n_seq; i++)
        for (int64_t t = b->seq_start[i]; t < b->seq_start[i + 1]; t++)
            f->pos[t] = (int32_t)(t - b->seq_start[i]);
    f->have_counts = false;
    es_fast_phase(f, ES_PHASE_NORM);
    embed_job ej = {f, m, b->ids, T};
    es_pool_run(f->pool, embed_worker, &ej);

    es_status st = ES_OK;
    for (int il = 0; il < hp->n_layer && st == ES_OK; il++) {
        if (b->abort_cb && b->abort_cb(b->cb_user)) {
            st = es_fail(ES_E_CANCELLED, "cancelled by the abort callback before layer %d", il);
            break;
        }
        st = layer(f, m, prov, il, T);
        if (st == ES_OK && b->progress_cb) b->progress_cb(b->cb_user, il + 1, hp->n_layer + 1, T);
    }
    if (prov->run_end) prov->run_end(prov);
    f->seq_start = NULL; /* borrowed for this call only */
    if (st) return st;
    f->have_counts = true;
    norm_rows(f, m, &m->output_norm, 0, T); /* every row: embeddings and logits read f->h */
    es_fast_prepare(f, f->h, hp->n_embd, m->output.type, 0, T);
    f->head_ready = true;
    return ES_OK;
}

const float *es_fast_hidden(const es_fast *f) { return f->h; }

void es_fast_logits(es_fast *f, const es_model *m, const int32_t *rows, int64_t r0, int64_t n,
                    float *out)
{
    ES_ASSERT(f->head_ready);
    const size_t rb = es_act_row_bytes(f->kern, m->output.type, m->output.ne[0]);
    es_gemm_task t = {&m->output, rows ? f->act : (const uint8_t *)f->act + (size_t)r0 * rb, out,
                      m->hp.n_vocab, n};
    es_fast_phase(f, ES_PHASE_HEAD);
    count_gemm(f, ES_PHASE_HEAD, &m->output, n);
    gemm_job j = {f, &t, 1, rows, {0}};
    es_pool_counter_set(&j.next, 0);
    es_pool_run(f->pool, gemm_worker, &j);
}

es_status es_fast_reserve(es_fast *f, const es_model *m, int64_t T, int n_seq)
{
    if (f->t_cap >= T && f->seq_cap >= n_seq) return ES_OK;
    const int64_t t_new = T > f->t_cap ? T : f->t_cap;
    const int s_new = n_seq > f->seq_cap ? n_seq : f->seq_cap;
    f->head_ready = false;
    es_status st = alloc_buffers(f, m, t_new, s_new);
    if (st) free_buffers(f, &m->hp);
    return st;
}

es_status es_fast_forward(es_fast *f, const es_model *m, es_expert_provider *prov,
                          const int32_t *ids, size_t n, int all_logits, float *logits,
                          int (*abort_cb)(void *user), void *cb_user)
{
    const int64_t T = (int64_t)n;
    const int64_t seq_start[2] = {0, T};
    const es_fast_batch b = {.ids = ids, .seq_start = seq_start, .n_seq = 1,
                             .abort_cb = abort_cb, .cb_user = cb_user};
    ES_TRY(es_fast_layers(f, m, prov, &b));
    if (all_logits)
        es_fast_logits(f, m, NULL, 0, T, logits);
    else
        es_fast_logits(f, m, NULL, T - 1, 1, logits);
    return ES_OK;
}

es_pool *es_fast_pool(const es_fast *f) { return f->pool; }

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
int es_model_n_embd(const es_model *m) { return m->hp.n_embd; }
int es_model_n_expert(const es_model *m) { return m->hp.n_expert; }

int es_fast_n_threads(const es_fast *f) { return f->n_threads; }
