/*
 * Multi-head latent attention (deepseek2) for the fast forward pass: each token's keys and values
 * are compressed into one latent row c (n_lora_kv wide) plus a shared RoPE key k_pe; the block
 * decompresses what attention needs and runs the same blocked attention as the standard block.
 *
 * DESIGN: two layouts, as in llama.cpp. Split files (attn_k_b / attn_v_b): keys are decompressed
 * (each token's keys per head from its latent row in one f32 product, so scores run over
 * n_embd_head dims where llama.cpp's absorbed form runs over n_lora_kv + n_rot), with q_nope
 * rounded as llama.cpp's absorption rounds it; values stay latent as in llama.cpp: every head
 * attends over the shared rows c and its output goes through that head's attn_v_b with
 * activations in the weight's format (decompressing the values too would skip that rounding: KL
 * 1e-3 on a Q4_K_M file). Joined files (attn_kv_b): keys and values decompressed in one product,
 * as llama.cpp does for them. The split form's f32 decompression matrix (f->mla_w) is rebuilt
 * for each layer from attn_k_b, so one buffer serves every layer. The buffers are allocated and
 * freed by fast.c; this file only fills them.
 */
#include "run/forward_impl.h"

#include <string.h>

int64_t es_mla_kvd_width(const es_hparams *hp)
{
    const int64_t nope = hp->n_embd_head - hp->n_rot;
    return (int64_t)hp->n_head * (hp->mla_split ? nope : nope + hp->n_embd_head_v);
}

bool es_mla_latent_values(const es_hparams *hp) { return hp->n_lora_kv && hp->mla_split; }

/* Layer L's key decompression matrix in f32 (f->mla_w), attn_k_b transposed, one head per
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
            const uint8_t *row =
                (const uint8_t *)L->wk_b.data + (size_t)(hh * kv + c) * L->wk_b.row_bytes;
            es_dequantize_row(L->wk_b.type, row, tmp, nope);
            for (int64_t i = 0; i < nope; i++) w[i * kv + c] = tmp[i];
        }
    }
}

/* es_layer_rows job (q LoRA): each row of h Wq_a (n_lora_q wide at the start of f->q) RMS-normed
 * and multiplied by q_a_norm, in place. */
static void mla_q_norm_worker(void *arg, int ith, int nth)
{
    const es_layer_rows *j = arg;
    const int64_t r = j->m->hp.n_lora_q;
    int64_t r0, r1;
    if (!es_row_span(0, j->T, ith, nth, &r0, &r1)) return;
    for (int64_t t = r0; t < r1; t++)
        j->f->kern->rmsnorm(j->f->q + t * r, j->f->q + t * r, j->L->q_a_norm.data, r,
                            j->m->hp.rms_eps);
}

/* es_layer_rows job: c = rmsnorm(c) * kv_a_norm in f->mla_ckv; RoPE on k_pe and on each query
 * head's last n_rot in f->q; each head's q_nope rounded as llama.cpp's product with attn_k_b
 * rounds it (its q_nope . (Wk c) is our (Wk^T q_nope) . c). */
static void mla_rope_worker(void *arg, int ith, int nth)
{
    const es_layer_rows *j = arg;
    es_fast *f = j->f;
    const es_hparams *hp = &j->m->hp;
    const es_layer *L = j->L;
    const int64_t kv = hp->n_lora_kv, dc = kv + hp->n_rot, dk = hp->n_embd_head;
    const int64_t dq = hp->n_embd_q;
    const es_rope_kind rk = j->m->family->rope;
    int64_t r0, r1;
    if (!es_row_span(0, j->T, ith, nth, &r0, &r1)) return;
    for (int64_t t = r0; t < r1; t++) {
        float *c = f->mla_ckv + t * dc;
        const float *cs = f->rope_cs + t * hp->n_rot;
        f->kern->rmsnorm(c, c, L->kv_a_norm.data, kv, hp->rms_eps);
        es_rope_head(rk, c + kv, hp->n_rot, cs);
        for (int hh = 0; hh < hp->n_head; hh++) {
            float *q = f->q + t * dq + hh * dk;
            if (hp->mla_split) es_act_round(L->wk_b.type, q, dk - hp->n_rot);
            es_rope_head(rk, q + (dk - hp->n_rot), hp->n_rot, cs);
        }
    }
}

/* es_layer_rows job: each head's key [k_nope | the shared k_pe] into f->k; the value into f->v:
 * the latent row c, or in the joined form each head's decompressed value. */
static void mla_kv_worker(void *arg, int ith, int nth)
{
    const es_layer_rows *j = arg;
    es_fast *f = j->f;
    const es_hparams *hp = &j->m->hp;
    const int64_t kv = hp->n_lora_kv, rot = hp->n_rot, dc = kv + rot, dk = hp->n_embd_head;
    const int64_t nope = dk - rot, dv = hp->n_embd_head_v, w = es_mla_kvd_width(hp) / hp->n_head;
    const int64_t dkv = hp->n_embd_kv;
    int64_t r0, r1;
    if (!es_row_span(0, j->T, ith, nth, &r0, &r1)) return;
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
}

/* The block: q and [c | k_pe] from h, then the norms and RoPE, the decompression, attention, and
 * Wo (in the split form after each head's value matrix). */
void es_mla_block(es_fast *f, const es_model *m, const es_layer *L, int64_t T)
{
    const es_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd, kv = hp->n_lora_kv, dc = kv + hp->n_rot;
    if (hp->mla_split) {
        es_fast_phase(f, ES_PHASE_ATTN_PROJ);
        mla_w_job wj = {f, hp, L};
        es_pool_run(f->pool, mla_w_worker, &wj);
    }
    /* with q LoRA the first product is h Wq_a (n_lora_q wide, into the start of f->q) */
    const es_tensor *wq = hp->n_lora_q ? &L->wq_a : &L->wq;
    const int64_t dq0 = hp->n_lora_q ? hp->n_lora_q : hp->n_embd_q;
    es_fast_prepare(f, f->h, d, wq->type, 0, T);
    if (wq->type == L->wkv_a.type) {
        es_gemm_task qc[2] = {{wq, f->act, f->q, dq0, T}, {&L->wkv_a, f->act, f->mla_ckv, dc, T}};
        es_fast_gemms(f, qc, 2);
    } else {
        es_gemm_task q = {wq, f->act, f->q, dq0, T};
        es_fast_gemms(f, &q, 1);
        es_fast_prepare(f, f->h, d, L->wkv_a.type, 0, T);
        es_gemm_task c = {&L->wkv_a, f->act, f->mla_ckv, dc, T};
        es_fast_gemms(f, &c, 1);
    }
    if (hp->n_lora_q) { /* q = rmsnorm(h Wq_a) Wq_b: the act takes the rows before f->q is
                         * written again */
        es_fast_phase(f, ES_PHASE_NORM);
        es_fast_layer_rows(f, m, L, T, mla_q_norm_worker);
        es_fast_prepare_ld(f, f->q, hp->n_lora_q, hp->n_lora_q, L->wq_b.type, 0, T);
        es_gemm_task qb = {&L->wq_b, f->act, f->q, hp->n_embd_q, T};
        es_fast_gemms(f, &qb, 1);
    }
    es_fast_phase(f, ES_PHASE_NORM);
    es_fast_layer_rows(f, m, L, T, mla_rope_worker);
    const es_tensor *dw = hp->mla_split ? &f->mla_w : &L->wkv_b;
    es_fast_prepare_ld(f, f->mla_ckv, dc, kv, dw->type, 0, T); /* the c part of each row */
    es_gemm_task dk = {dw, f->act, f->mla_kvd, es_mla_kvd_width(hp), T};
    es_fast_gemms(f, &dk, 1);
    es_fast_attention(f, hp->n_head, hp->mla_split ? dc : hp->n_embd_head,
                      hp->mla_split ? kv : hp->n_embd_head_v, 0, false);
    es_fast_layer_rows(f, m, L, T, mla_kv_worker);
    es_attn_set_kv(f->attn, f->k, f->v, f->seq_start, f->n_seq);
    es_attn_run(f->attn, f->q, f->att, f->seq_start, f->n_seq, hp->attn_scale, 0, false, NULL);
    if (!hp->mla_split) {
        es_fast_project_out(f, m, L, f->att, T);
        return;
    }
    /* each head's latent output [T][kv] (stride n_head kv) through its value matrix */
    const int64_t dv = hp->n_embd_head_v;
    for (int hh = 0; hh < hp->n_head; hh++) {
        es_tensor w = L->wv_b; /* head hh's dv rows */
        w.data = (const uint8_t *)w.data + (size_t)(hh * dv) * w.row_bytes;
        w.ne[1] = dv;
        w.ne[2] = 1;
        es_fast_prepare_ld(f, f->att + hh * kv, hp->n_head * kv, kv, w.type, 0, T);
        es_gemm_task g = {&w, f->act, f->mla_out + hh * dv, hp->n_embd_att, T};
        es_fast_gemms(f, &g, 1);
    }
    es_fast_project_out(f, m, L, f->mla_out, T);
}
