/*
 * The fast forward pass: the reference path's arithmetic restated for speed. Dense projections
 * and the output head go through the SIMD kernels (es_gemm) split over output rows across the
 * pool, attention is blocked with an online softmax, and the mixture of experts runs through the
 * expert plan (the fused expert operator) with every expert resident: phi maps expert e to slot e
 * and each slot points into the model's mapping.
 *
 * This file holds the layer loop: the embeddings, the norms, each layer's block and FFN, and the
 * trace of their phases. The state (create, reserve, destroy) is fast.c's, the pool jobs every
 * block shares are pool_jobs.c's, and each block kind has its own file: attention_block.c (the
 * standard attention), mla.c (latent attention), conv.c (short convolutions), ffn.c (dense FFN,
 * router, experts); forward_impl.h is what they share. The dependencies go one way: this file
 * calls the blocks, the blocks call the pool jobs, and nothing calls back.
 *
 * DESIGN: each row step has its own worker and job struct and runs as one fork-join
 * (es_pool_run); a layer's fork-joins are the steps its block and FFN functions call, in the
 * order they call them. Row-wise work (norms, RoPE) is split statically by rows (es_row_span).
 */
#include "run/forward_impl.h"

#include "core/trace.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

/* RMS norms: f->h = rmsnorm(f->x) * w (+ b where the model has the bias) over rows
 * [r_begin, T) (the norm before attention, the FFN, or the output head). */
typedef struct norm_job {
    es_fast *f;
    const float *w; /* [n_embd] */
    const float *b; /* [n_embd] or NULL */
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
    for (int64_t t = r0; t < r1; t++) {
        f->kern->rmsnorm(f->h + t * d, f->x + t * d, j->w, d, j->eps);
        if (j->b) f->kern->axpy(f->h + t * d, 1.0f, j->b, d); /* exactly h + b */
    }
}

static void norm_rows(es_fast *f, const es_model *m, const es_tensor *w, const es_tensor *b,
                      int64_t r_begin, int64_t T)
{
    es_fast_phase(f, ES_PHASE_NORM);
    norm_job j = {f, w->data, b->data, m->hp.n_embd, m->hp.rms_eps, r_begin, T};
    es_pool_run(f->pool, norm_worker, &j);
}

/* The embeddings of ids into f->x, and each row's RoPE (cos, sin) at its position within its
 * sequence (f->pos) into f->rope_cs. */
typedef struct embed_job {
    es_fast *f;
    const es_model *m;
    const int32_t *ids; /* [T] token ids */
    int64_t T;
    _Atomic int failed_row; /* -1, or a row whose read from the file failed */
    int failed_errno;       /* its errno (0: the file ended before the row) */
} embed_job;

/* n bytes at off of fd into buf, through short reads and interrupts: n, or what pread gave
 * (< 0 with errno, or the bytes before the end of the file). */
static ssize_t pread_full(int fd, uint8_t *buf, size_t n, off_t off)
{
    size_t done = 0;
    while (done < n) {
        const ssize_t r = pread(fd, buf + done, n - done, off + (off_t)done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return r < 0 ? r : (ssize_t)done;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

static void embed_worker(void *arg, int ith, int nth)
{
    embed_job *j = arg;
    es_fast *f = j->f;
    const es_hparams *hp = &j->m->hp;
    const es_tensor *te = &j->m->tok_embd;
    const int64_t d = hp->n_embd;
    int64_t r0, r1;
    if (!es_row_span(0, j->T, ith, nth, &r0, &r1)) return;
    for (int64_t t = r0; t < r1; t++) {
        const size_t off = (size_t)j->ids[t] * te->row_bytes;
        const uint8_t *row = (const uint8_t *)te->data + off;
        if (f->embd_fd >= 0) { /* es_fast_embed_from_file */
            uint8_t *buf = f->embd_rows + (size_t)ith * f->embd_row_bytes;
            const ssize_t got = pread_full(f->embd_fd, buf, te->row_bytes, (off_t)(f->embd_off + off));
            if (got != (ssize_t)te->row_bytes) {
                int none = -1;
                if (atomic_compare_exchange_strong(&j->failed_row, &none, (int)t))
                    j->failed_errno = got < 0 ? errno : 0;
                return;
            }
            row = buf;
        }
        es_dequantize_row(te->type, row, f->x + t * d, d);
        for (int64_t i = 0; hp->embd_scale != 0.0f && i < d; i++) f->x[t * d + i] *= hp->embd_scale;
    }
    int si = 0; /* row t's sequence: LongRoPE's factors follow its length */
    for (int64_t t = r0; t < r1; t++) {
        while (f->seq_start[si + 1] <= t) si++;
        const float *factors = es_rope_factors(hp, f->seq_start[si + 1] - f->seq_start[si]);
        es_rope_cos_sin(hp, factors, f->pos[t], f->rope_cs + t * hp->n_rot);
    }
}

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
    if (m->family->router_pre_attn && es_layer_is_moe(L)) /* SmallThinker: from the input */
        es_ffn_router_logits(f, m, L, f->x, T);
    es_fast_gemm_phase(f, ES_PHASE_ATTN_PROJ);
    /* attention, or a short-convolution block */
    norm_rows(f, m, &L->attn_norm, &L->attn_norm_b, 0, T);
    if (L->is_conv)
        es_conv_block(f, m, L, T);
    else if (m->family->mla)
        es_mla_block(f, m, L, T);
    else
        es_attention_block(f, m, L, T);
    span(f, PHASE_ATTENTION, il, t0);

    /* the FFN: dense, or the mixture of experts (+ shared experts) */
    t0 = f->trace ? es_now_ns() : 0;
    norm_rows(f, m, &L->ffn_norm, &L->ffn_norm_b, 0, T);
    if (!es_layer_is_moe(L)) {
        es_ffn_dense(f, m, &L->ffn_gate, &L->ffn_up, &L->ffn_down, T, f->moe);
        es_fast_residual_add(f, m, f->moe, T);
        span(f, PHASE_MOE, il, t0);
        return ES_OK;
    }
    es_ffn_route(f, m, L, il, T);
    span(f, PHASE_ROUTER, il, t0);
    t0 = f->trace ? es_now_ns() : 0;
    ES_TRY(es_ffn_moe(f, m, prov, il, T));
    if (L->gate_shexp.data) { /* moe += shared, as llama.cpp adds the two */
        es_ffn_dense(f, m, &L->gate_shexp, &L->up_shexp, &L->down_shexp, T, f->tmp);
        if (L->gate_inp_shexp.data) es_ffn_shexp_gate(f, m, L, f->tmp, T);
        es_fast_add(f, m, f->tmp, f->moe, T);
    }
    es_fast_residual_add(f, m, f->moe, T);
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
    embed_job ej = {f, m, b->ids, T, -1, 0};
    es_pool_run(f->pool, embed_worker, &ej);
    es_status st = ES_OK;
    if (ej.failed_row >= 0)
        st = es_fail(ES_E_IO, "reading token %d's embedding row from the model file: %s",
                     b->ids[ej.failed_row],
                     ej.failed_errno ? strerror(ej.failed_errno) : "the file is shorter");
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
    norm_rows(f, m, &m->output_norm, &m->output_norm_b, 0, T); /* every row: embeddings and logits read f->h */
    es_fast_prepare(f, f->h, hp->n_embd, m->output.type, 0, T);
    f->head_ready = true;
    return ES_OK;
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

int es_model_n_layer(const es_model *m) { return m->hp.n_layer; }
int es_model_n_embd(const es_model *m) { return m->hp.n_embd; }
int es_model_n_expert(const es_model *m) { return m->hp.n_expert; }
