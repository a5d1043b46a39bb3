/*
 * The pool jobs every block of the fast path shares (forward_impl.h): dense products, the output
 * head's among them, activation preparation, residual adds, row jobs over a layer, the attention
 * output's projection and the attention's work count.
 *
 * DESIGN: every output element is computed by one thread in a fixed order, so the logits are
 * bit-identical for any thread count. Row-wise work (residual adds, preparation) is split
 * statically by rows; matrix products by chunks of output rows handed out by a counter.
 */
#include "run/forward_impl.h"

#include <math.h>

enum {
    GEMM_CHUNK = 64, /* output rows per work item of a dense product */
};

/* ---- shared pool jobs ---- */

/* Dense products: Y_i = act_i W_i^T for a few matrices at once, output rows in chunks. */
typedef struct gemm_job {
    es_fast *f;
    const es_gemm_task *tasks;
    int n_tasks;
    const int32_t *rows; /* NULL: act rows 0..n_rows; else the act row of each output row */
    es_pool_counter next;
    const float *y_bias; /* [N] added to each output once computed (NULL: not): the head's
                          * output.bias */
    float y_mul;         /* then each output multiplied by this (0: not): Granite's
                          * 1/logit_scale on the head */
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
        for (int64_t r = 0; j->y_bias && r < t->n_rows; r++)
            for (int64_t n = n0; n < n1; n++) t->y[r * t->ldy + n] += j->y_bias[n];
        for (int64_t r = 0; j->y_mul != 0.0f && r < t->n_rows; r++)
            for (int64_t n = n0; n < n1; n++) t->y[r * t->ldy + n] *= j->y_mul;
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
    gemm_job j = {f, tasks, n, NULL, {0}, NULL, 0.0f};
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

/* Row adds: dst += (src + bias, where not NULL) * scale (where not 0) over T rows of d, in
 * llama.cpp's order: the bias joins the product, the product is scaled, then added. */
typedef struct add_job { const float *src, *bias; float *dst; int64_t d, T; float scale; } add_job;

static void add_worker(void *arg, int ith, int nth)
{
    const add_job *j = arg;
    const int64_t d = j->d;
    int64_t r0, r1;
    if (!es_row_span(0, j->T, ith, nth, &r0, &r1)) return;
    for (int64_t t = r0; t < r1; t++)
        for (int64_t i = 0; i < d; i++) {
            float v = j->bias ? j->src[t * d + i] + j->bias[i] : j->src[t * d + i];
            if (j->scale != 0.0f) v *= j->scale;
            j->dst[t * d + i] += v;
        }
}

static void add_rows(es_fast *f, const es_model *m, const float *src, const float *bias,
                     float scale, float *dst, int64_t T)
{
    es_fast_phase(f, ES_PHASE_NORM);
    add_job j = {src, bias, dst, m->hp.n_embd, T, scale};
    es_pool_run(f->pool, add_worker, &j);
}

void es_fast_add(es_fast *f, const es_model *m, const float *src, float *dst, int64_t T)
{
    add_rows(f, m, src, NULL, 0.0f, dst, T);
}

void es_fast_residual_add(es_fast *f, const es_model *m, const float *src, int64_t T)
{
    add_rows(f, m, src, NULL, m->hp.resid_scale, f->x, T);
}

void es_fast_layer_rows(es_fast *f, const es_model *m, const es_layer *L, int64_t T,
                        es_pool_fn fn)
{
    es_layer_rows j = {f, m, L, T};
    es_pool_run(f->pool, fn, &j);
}

void es_fast_project_out(es_fast *f, const es_model *m, const es_layer *L, const float *src,
                         int64_t T)
{
    const es_hparams *hp = &m->hp;
    es_fast_prepare(f, src, hp->n_embd_att, L->wo.type, 0, T);
    es_gemm_task o = {&L->wo, f->act, f->tmp, hp->n_embd, T};
    es_fast_gemms(f, &o, 1);
    add_rows(f, m, f->tmp, L->bo.data, m->hp.resid_scale, f->x, T);
}

void es_fast_attention(es_fast *f, int n_head, int64_t dk, int64_t dv, int64_t window,
                       bool chunked)
{
    es_fast_phase(f, ES_PHASE_ATTN);
    for (int i = 0; i < f->n_seq; i++) {
        const double L = (double)(f->seq_start[i + 1] - f->seq_start[i]);
        double pairs = L * (L + 1) / 2; /* (query, key) pairs */
        const double W = (double)window;
        if (window > 0 && chunked) { /* whole chunks, then the last one's rows */
            const double n = floor(L / W), r = L - n * W;
            pairs = n * W * (W + 1) / 2 + r * (r + 1) / 2;
        } else if (window > 0 && L > W) { /* the first window queries, then window each */
            pairs = W * (W + 1) / 2 + (L - W) * W;
        }
        f->prof.float_ops[ES_PHASE_ATTN] += 2.0 * n_head * (double)(dk + dv) * pairs;
    }
}

void es_fast_logits(es_fast *f, const es_model *m, const int32_t *rows, int64_t r0, int64_t n,
                    float *out)
{
    ES_ASSERT(f->head_ready);
    const size_t rb = es_act_row_bytes(f->kern, m->output.type, m->output.ne[0]);
    es_gemm_task t = {&m->output, rows ? f->act : (const uint8_t *)f->act + (size_t)r0 * rb, out,
                      m->hp.n_vocab, n};
    es_fast_phase(f, ES_PHASE_HEAD);
    count_gemm(f, ES_PHASE_HEAD, &m->output, n);
    gemm_job j = {f, &t, 1, rows, {0}, m->output_b.data, m->hp.logit_mul};
    es_pool_counter_set(&j.next, 0);
    es_pool_run(f->pool, gemm_worker, &j);
}
