/*
 * The standard attention block of the fast path: Q, K and V projections of f->h, the family's
 * q/k norms and RoPE, blocked causal attention (attention.c) and the output projection added to
 * the residual stream. The other kinds of block are mla.c's (latent attention) and conv.c's
 * (short convolutions); forward.c's layer loop picks one per layer.
 */
#include "run/forward_impl.h"

/* The family's q/k normalisation of one token's projections (arch.h). */
static void qk_norm(const es_fast *f, const es_model *m, const es_layer *L, float *q, float *k)
{
    const es_hparams *hp = &m->hp;
    if (!L->q_norm.data) return; /* none, or optional and absent */
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

/* y += b where the layer has the bias (the table's axpy with 1: exactly y + b). */
static void add_bias(const es_fast *f, float *y, const es_tensor *b, int64_t n)
{
    if (b->data) f->kern->axpy(y, 1.0f, b->data, n);
}

enum { HEAD_MAX = 4096 }; /* attention.key_length's limit (hparams.c) */

/* Llama 4's q/k norm of a rotated head: RMS-normalised with no weight (ggml_rms_norm; the
 * table's norm times ones is exactly that). */
static void norm_heads(const es_fast *f, float *x, int n_head, int dh, const float *ones,
                       float eps)
{
    for (int hh = 0; hh < n_head; hh++) f->kern->rmsnorm(x + hh * dh, x + hh * dh, ones, dh, eps);
}

/* es_layer_rows job: f->q, f->k and f->v with their biases where the layer has them; f->q and
 * f->k normalised as the family says, then rotated (Hunyuan: rotated, then normalised; Llama 4:
 * then normalised again, or on its NoPE layers not rotated and the queries scaled by the
 * position's temperature); phi3's graph then scales the rotated queries (hp->q_scale). */
static void qk_rope_worker(void *arg, int ith, int nth)
{
    const es_layer_rows *j = arg;
    es_fast *f = j->f;
    const es_hparams *hp = &j->m->hp;
    const int64_t dq = hp->n_embd_q, dkv = hp->n_embd_kv;
    const es_rope_kind rk = j->m->family->rope;
    int64_t r0, r1;
    if (!es_row_span(0, j->T, ith, nth, &r0, &r1)) return;
    const bool rope = !j->L->no_rope, kq_norm = rope && hp->kq_norm_rope;
    float ones[HEAD_MAX];
    for (int i = 0; kq_norm && i < hp->n_embd_head; i++) ones[i] = 1.0f;
    for (int64_t t = r0; t < r1; t++) {
        float *q = f->q + t * dq, *k = f->k + t * dkv;
        add_bias(f, q, &j->L->bq, dq);
        add_bias(f, k, &j->L->bk, dkv);
        add_bias(f, f->v + t * dkv, &j->L->bv, dkv);
        const bool after = j->m->family->qk_norm_after_rope;
        if (!after) qk_norm(f, j->m, j->L, q, k);
        if (!rope) { /* a NoPE layer: Llama 4's queries times the temperature (EXAONE's not) */
            const float temp = j->m->family->irope ? es_attn_temperature(f->pos[t]) : 1.0f;
            for (int64_t i = 0; temp != 1.0f && i < dq; i++) q[i] *= temp;
            continue;
        }
        const float *cs = f->rope_cs + t * hp->n_rot;
        for (int hh = 0; hh < hp->n_head; hh++)
            es_rope_head(rk, q + hh * hp->n_embd_head, hp->n_rot, cs);
        for (int hh = 0; hh < hp->n_head_kv; hh++)
            es_rope_head(rk, k + hh * hp->n_embd_head, hp->n_rot, cs);
        if (kq_norm) {
            norm_heads(f, q, hp->n_head, hp->n_embd_head, ones, hp->rms_eps);
            norm_heads(f, k, hp->n_head_kv, hp->n_embd_head, ones, hp->rms_eps);
        }
        if (after) qk_norm(f, j->m, j->L, q, k); /* Hunyuan: the rotated heads */
        for (int64_t i = 0; hp->q_scale != 0.0f && i < dq; i++) q[i] *= hp->q_scale; /* phi3 */
    }
}

/* Attention over f->h (GQA, q/k norms and RoPE as the family says), added to the residual
 * stream. */
void es_attention_block(es_fast *f, const es_model *m, const es_layer *L, int64_t T)
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
    const int64_t window = L->is_swa ? hp->n_swa : 0;
    es_fast_attention(f, hp->n_head, hp->n_embd_head, hp->n_embd_head_v, window,
                      hp->swa_chunked);
    es_attn_set_kv(f->attn, f->k, f->v, f->seq_start, f->n_seq);
    es_attn_run(f->attn, f->q, f->att, f->seq_start, f->n_seq, m->hp.attn_scale, window,
                hp->swa_chunked, L->sinks.data);
    es_fast_project_out(f, m, L, f->att, T);
}
