/*
 * Reference forward pass for every family of arch.h: the oracle for every fast path.
 *
 * DESIGN: clarity over speed. Weights are dequantized to f32 (es_dequantize_row, the scalar
 * oracle) and every sum runs in a fixed, sequential order in f32 (norm sums in double, as ggml
 * does). One token row at a time where that reads most plainly; the only concession to speed is
 * that matrix products dequantize a chunk of weight rows once and reuse it for every token.
 *
 * Per layer (llama.cpp's graphs for olmoe, qwen3moe, llama with experts, deepseek, lfm2moe,
 * deepseek2 (mla_ref below) and gpt-oss):
 *   h   = rmsnorm(x) * attn_norm
 *   q,k,v = h Wq^T, h Wk^T, h Wv^T;  q, k normed as the family says (none, over the whole
 *   projection, or per head);  rope (NEOX: pairs (i, i + n_rot/2); normal: (2i, 2i + 1)) on q, k;
 *   (gpt-oss: q, k, v plus their biases first); causal GQA attention, scale 1/sqrt(d_head)
 *   (gpt-oss: a sink logit per head in the softmax, and on sliding layers the last n_swa
 *   positions only)
 *   x  += attn Wo^T (+ its bias)
 *   or, in an LFM2 short-convolution layer, x += conv_ref(h) (below)
 *   (Llama 4: NoPE layers take no RoPE and scale q by the temperature, the others RMS-norm q
 *   and k per head after RoPE; chunked attention on the pattern's layers)
 *   h   = rmsnorm(x) * ffn_norm;  p = softmax(h Wr^T);  top-k experts by p (es_arch_route: the
 *   weights w_e = p_e, or p_e / sum of the chosen p where the family renormalises; Llama 4:
 *   the one expert's input is w_e h and its output is taken as is)
 *   x  += moe, moe = sum over chosen e (increasing e) of w_e * down_e(silu(gate_e h) * up_e h)
 *         (gpt-oss: the router's logits plus a bias, w the softmax of the k chosen logits,
 *         each expert's outputs plus its biases, its GLU glu_oai below)
 *         (+ the shared experts' FFN, down(silu(gate h) * up h), where the family has them;
 *         qwen2moe's one times sigmoid(h . gate_inp_shexp))
 *   or, in a dense layer, x += down(silu(gate h) * up h)
 * then logits = (rmsnorm(x) * output_norm) Wout^T.
 * Hunyuan normalises q and k per head after RoPE instead of before.
 * Granite scales x's embedding rows by embedding_scale, each block's output by residual_scale
 * before it joins x, q.k by attention.scale, and the logits by 1/logit_scale.
 */
#include "model/model.h"
#include "quant/tiles.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { CHUNK_ROWS = 64 }; /* weight rows dequantized at a time */

/* y[t][n] = sum_k x[t][k] * W[n][k] for t < T, n < N. W: N rows of K elements of `type` with
 * row stride row_bytes, or (layout ES_LAYOUT_TILES) a tiled matrix whose rows are rebuilt by
 * es_tiles_dequantize_row (the same floats). x: [T][ldx], y: [T][ldy]. wt is scratch of
 * K*CHUNK_ROWS floats, row is scratch of K floats. The sum over k runs in increasing k. */
static void matmul_ref_l(const void *w, uint32_t type, uint32_t layout, size_t row_bytes,
                         int64_t N, int64_t K, const float *x, int64_t ldx, int64_t T, float *y,
                         int64_t ldy, float *wt, float *row)
{
    for (int64_t n0 = 0; n0 < N; n0 += CHUNK_ROWS) {
        const int64_t nb = N - n0 < CHUNK_ROWS ? N - n0 : CHUNK_ROWS;
        for (int64_t j = 0; j < nb; j++) {
            if (layout == ES_LAYOUT_TILES)
                es_tiles_dequantize_row(type, w, K, N, n0 + j, row);
            else
                es_dequantize_row(type, (const uint8_t *)w + (size_t)(n0 + j) * row_bytes, row,
                                  K);
            for (int64_t k = 0; k < K; k++) wt[k * CHUNK_ROWS + j] = row[k]; /* transpose */
        }
        for (int64_t t = 0; t < T; t++) {
            float acc[CHUNK_ROWS] = {0};
            const float *xt = x + t * ldx;
            for (int64_t k = 0; k < K; k++) {
                const float xv = xt[k];
                const float *wk = wt + k * CHUNK_ROWS;
                for (int j = 0; j < CHUNK_ROWS; j++) acc[j] += xv * wk[j];
            }
            memcpy(y + t * ldy + n0, acc, (size_t)nb * sizeof(float));
        }
    }
}

static void matmul_ref(const void *w, uint32_t type, size_t row_bytes, int64_t N, int64_t K,
                       const float *x, int64_t ldx, int64_t T, float *y, int64_t ldy, float *wt,
                       float *row)
{
    matmul_ref_l(w, type, ES_LAYOUT_ROWS, row_bytes, N, K, x, ldx, T, y, ldy, wt, row);
}

/* out = x / sqrt(mean(x^2) + eps) * w (w NULL: no weight, ggml_rms_norm alone). */
static void rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps)
{
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    for (int64_t i = 0; i < n; i++) out[i] = w ? x[i] * scale * w[i] : x[i] * scale;
}

/* Rotary embedding of one head vector with the position's (cos, sin) per pair
 * (es_rope_cos_sin): pair i is (i, i + n_rot/2) for NEOX and (2i, 2i + 1) for the normal kind. */
static void rope(es_rope_kind kind, float *v, int n_rot, const float *cs)
{
    const int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const int a = kind == ES_ROPE_NEOX ? i : 2 * i, b = kind == ES_ROPE_NEOX ? i + half : 2 * i + 1;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
    }
}

/* The family's q/k normalisation of token t's projections. */
static void qk_norm_ref(const es_model *m, const es_layer *L, float *q, float *k)
{
    const es_hparams *hp = &m->hp;
    const int dh = hp->n_embd_head;
    if (!L->q_norm.data) return; /* none, or optional and absent */
    switch (m->family->qk_norm) {
    case ES_QK_NORM_NONE: break;
    case ES_QK_NORM_WHOLE:
        rmsnorm(q, q, L->q_norm.data, hp->n_embd_q, hp->rms_eps);
        rmsnorm(k, k, L->k_norm.data, hp->n_embd_kv, hp->rms_eps);
        break;
    case ES_QK_NORM_HEAD:
        for (int h = 0; h < hp->n_head; h++) rmsnorm(q + h * dh, q + h * dh, L->q_norm.data, dh, hp->rms_eps);
        for (int h = 0; h < hp->n_head_kv; h++) rmsnorm(k + h * dh, k + h * dh, L->k_norm.data, dh, hp->rms_eps);
        break;
    }
}

static float silu(float x) { return x / (1.0f + expf(-x)); }

/* gpt-oss's clamped SwiGLU of one gate and up value (ggml's swiglu_oai with llama.cpp's alpha
 * 1.702 and limit 7; the fast path's element-wise tables restate it as glu_oai). */
static float glu_oai(float g, float u)
{
    const float x = g < 7.0f ? g : 7.0f;
    const float y = u < -7.0f ? -7.0f : u > 7.0f ? 7.0f : u;
    return x / (1.0f + expf(1.702f * -x)) * (y + 1.0f);
}

/* y[i] += b[i] for i < n, where the bias exists (b not NULL). */
static void add_bias(float *y, const float *b, int64_t n)
{
    for (int64_t i = 0; b && i < n; i++) y[i] += b[i];
}

/* The rows [t0, T) of x normed into out: rmsnorm with the weight w, plus the bias b where the
 * model has one (norm_bias: llama.cpp's RMS norm with a bias). */
static void norm_rows_ref(const es_hparams *hp, float *out, const float *x, const es_tensor *w,
                          const es_tensor *b, int64_t t0, int64_t T)
{
    const int64_t d = hp->n_embd;
    for (int64_t t = t0; t < T; t++) {
        rmsnorm(out + t * d, x + t * d, w->data, d, hp->rms_eps);
        add_bias(out + t * d, b->data, d);
    }
}

/* x[i] += y[i] for i < n: a block's output joining the residual stream, multiplied first by
 * Granite's residual_scale where it is set (scale 0: not), as llama.cpp scales then adds. */
static void residual_add(float *x, const float *y, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++) x[i] += scale != 0.0f ? y[i] * scale : y[i];
}

/* out[t] = down(silu(gate h_t) * up h_t) for t < T: a dense FFN (a dense layer's, or the shared
 * experts'). g, u: scratch of [T][ff]. */
static void ffn_ref(const es_tensor *gate, const es_tensor *up, const es_tensor *down,
                    const float *h, int64_t T, int64_t d, float *g, float *u, float *out,
                    float *wt, float *row)
{
    const int64_t ff = gate->ne[1];
    matmul_ref(gate->data, gate->type, gate->row_bytes, ff, d, h, d, T, g, ff, wt, row);
    matmul_ref(up->data, up->type, up->row_bytes, ff, d, h, d, T, u, ff, wt, row);
    for (int64_t i = 0; i < T * ff; i++) g[i] = silu(g[i]) * u[i];
    matmul_ref(down->data, down->type, down->row_bytes, d, ff, g, ff, T, out, d, wt, row);
}

/* scores[s] = exp(scores[s] - mx) for s < n; returns 1 / (extra + their sum) (summed in
 * double). */
static float exp_scores(float *scores, int64_t n, float mx, double extra)
{
    double sum = extra;
    for (int64_t s = 0; s < n; s++) {
        scores[s] = expf(scores[s] - mx);
        sum += scores[s];
    }
    return (float)(1.0 / sum);
}

/* Multi-head latent attention (deepseek2) over h into att [T][n_embd_att], in the absorbed form
 * llama.cpp computes (the fast path decompresses keys and values instead, which cross-checks
 * the two): q = h Wq^T, [c | k_pe] = h Wkv_a^T, c = rmsnorm(c) * kv_a_norm, RoPE on k_pe and on
 * the last n_rot dims of each query head; per head, q_nope absorbed into the latent space (q_c =
 * Wk_h^T q_nope), score(t, s) = (q_c . c_s + q_pe . k_pe_s) * attn_scale, o_c = sum_s p c_s,
 * out = Wv_h o_c. Wk_h [nope][kv] and Wv_h [dv][kv] come from attn_k_b / attn_v_b or the joined
 * attn_kv_b. */
static es_status mla_ref(const es_model *m, const es_layer *L, const float *h, int64_t T,
                         float *att, float *wt, float *row)
{
    const es_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd, nh = hp->n_head, kv = hp->n_lora_kv, rot = hp->n_rot;
    const int64_t dk = hp->n_embd_head, nope = dk - rot, dv = hp->n_embd_head_v;
    const int64_t dq = hp->n_embd_q, dc = kv + rot;
    float *q = malloc(sizeof(float) * (size_t)(T * dq));
    float *ckv = malloc(sizeof(float) * (size_t)(T * dc));
    float *wk = malloc(sizeof(float) * (size_t)(nh * nope * kv)); /* [h][d][c] */
    float *wv = malloc(sizeof(float) * (size_t)(nh * dv * kv));   /* [h][j][c] */
    float *qc = malloc(sizeof(float) * (size_t)kv), *oc = malloc(sizeof(float) * (size_t)kv);
    float *scores = malloc(sizeof(float) * (size_t)T), *cs = malloc(sizeof(float) * (size_t)rot);
    es_status st = ES_OK;
    if (!q || !ckv || !wk || !wv || !qc || !oc || !scores || !cs) {
        st = es_fail(ES_E_NOMEM, "reference forward: out of memory for %lld tokens", (long long)T);
        goto done;
    }
    if (hp->n_lora_q) { /* q = rmsnorm(h Wq_a) * q_a_norm, then Wq_b */
        const int64_t r = hp->n_lora_q;
        float *qa = malloc(sizeof(float) * (size_t)(T * r));
        if (!qa) {
            st = es_fail(ES_E_NOMEM, "reference forward: out of memory for %lld tokens", (long long)T);
            goto done;
        }
        matmul_ref(L->wq_a.data, L->wq_a.type, L->wq_a.row_bytes, r, d, h, d, T, qa, r, wt, row);
        for (int64_t t = 0; t < T; t++) rmsnorm(qa + t * r, qa + t * r, L->q_a_norm.data, r, hp->rms_eps);
        matmul_ref(L->wq_b.data, L->wq_b.type, L->wq_b.row_bytes, dq, r, qa, r, T, q, dq, wt, row);
        free(qa);
    } else {
        matmul_ref(L->wq.data, L->wq.type, L->wq.row_bytes, dq, d, h, d, T, q, dq, wt, row);
    }
    matmul_ref(L->wkv_a.data, L->wkv_a.type, L->wkv_a.row_bytes, dc, d, h, d, T, ckv, dc, wt, row);
    for (int64_t t = 0; t < T; t++) {
        float *c = ckv + t * dc;
        rmsnorm(c, c, L->kv_a_norm.data, kv, hp->rms_eps);
        es_rope_cos_sin(hp, es_rope_factors(hp, T), t, cs);
        rope(m->family->rope, c + kv, (int)rot, cs);
        for (int64_t hh = 0; hh < nh; hh++) rope(m->family->rope, q + t * dq + hh * dk + nope, (int)rot, cs);
    }
    for (int64_t hh = 0; hh < nh; hh++) {
        if (L->wk_b.data) {
            for (int64_t c = 0; c < kv; c++) {
                es_dequantize_row(L->wk_b.type, (const uint8_t *)L->wk_b.data + (size_t)(hh * kv + c) * L->wk_b.row_bytes, row, nope);
                for (int64_t i = 0; i < nope; i++) wk[(hh * nope + i) * kv + c] = row[i];
            }
            for (int64_t j = 0; j < dv; j++)
                es_dequantize_row(L->wv_b.type, (const uint8_t *)L->wv_b.data + (size_t)(hh * dv + j) * L->wv_b.row_bytes, wv + (hh * dv + j) * kv, kv);
        } else {
            const uint8_t *base = (const uint8_t *)L->wkv_b.data + (size_t)(hh * (nope + dv)) * L->wkv_b.row_bytes;
            for (int64_t i = 0; i < nope; i++)
                es_dequantize_row(L->wkv_b.type, base + (size_t)i * L->wkv_b.row_bytes, wk + (hh * nope + i) * kv, kv);
            for (int64_t j = 0; j < dv; j++)
                es_dequantize_row(L->wkv_b.type, base + (size_t)(nope + j) * L->wkv_b.row_bytes, wv + (hh * dv + j) * kv, kv);
        }
    }
    for (int64_t hh = 0; hh < nh; hh++)
        for (int64_t t = 0; t < T; t++) {
            const float *qn = q + t * dq + hh * dk, *qp = qn + nope;
            for (int64_t c = 0; c < kv; c++) qc[c] = 0.0f;
            for (int64_t i = 0; i < nope; i++)
                for (int64_t c = 0; c < kv; c++) qc[c] += qn[i] * wk[(hh * nope + i) * kv + c];
            float mx = -INFINITY;
            for (int64_t s = 0; s <= t; s++) {
                const float *cs_ = ckv + s * dc;
                float dot = 0.0f;
                for (int64_t c = 0; c < kv; c++) dot += qc[c] * cs_[c];
                for (int64_t i = 0; i < rot; i++) dot += qp[i] * cs_[kv + i];
                scores[s] = dot * hp->attn_scale;
                if (scores[s] > mx) mx = scores[s];
            }
            const float inv = exp_scores(scores, t + 1, mx, 0.0);
            for (int64_t c = 0; c < kv; c++) oc[c] = 0.0f;
            for (int64_t s = 0; s <= t; s++)
                for (int64_t c = 0; c < kv; c++) oc[c] += scores[s] * inv * ckv[s * dc + c];
            float *out = att + t * hp->n_embd_att + hh * dv;
            for (int64_t j = 0; j < dv; j++) {
                float acc = 0.0f;
                for (int64_t c = 0; c < kv; c++) acc += wv[(hh * dv + j) * kv + c] * oc[c];
                out[j] = acc;
            }
        }
done:
    free(q); free(ckv); free(wk); free(wv); free(qc); free(oc); free(scores); free(cs);
    return st;
}

/* Causal attention for all heads: out[t][h*dh..] from q [T][n_head*dh], k,v [T][n_kv*dh];
 * with a window (n_swa > 0) position t sees s > t - n_swa only, or with hp->swa_chunked only
 * s >= t - t % n_swa (its own chunk); with sinks, head h's sink logit joins each softmax's max
 * and denominator (ggml's soft_max with sinks). scores is scratch of T floats. */
static void attention_ref(const es_hparams *hp, int64_t T, const float *q, const float *k,
                          const float *v, float *out, float *scores, int n_swa,
                          const float *sinks)
{
    const int dh = hp->n_embd_head, nq = hp->n_head, group = hp->n_head / hp->n_head_kv;
    const int64_t ldq = (int64_t)nq * dh, ldkv = (int64_t)hp->n_head_kv * dh;
    const float scale = hp->attn_scale;
    for (int h = 0; h < nq; h++) {
        const int hk = h / group;
        for (int64_t t = 0; t < T; t++) {
            const float *qt = q + t * ldq + h * dh;
            int64_t s0 = n_swa > 0 && t - n_swa + 1 > 0 ? t - n_swa + 1 : 0;
            if (n_swa > 0 && hp->swa_chunked) s0 = t - t % n_swa;
            float mx = -INFINITY;
            for (int64_t s = s0; s <= t; s++) {
                const float *ks = k + s * ldkv + hk * dh;
                float d = 0.0f;
                for (int i = 0; i < dh; i++) d += qt[i] * ks[i];
                scores[s] = d * scale;
                if (scores[s] > mx) mx = scores[s];
            }
            if (sinks && sinks[h] > mx) mx = sinks[h];
            const float inv = exp_scores(scores + s0, t + 1 - s0, mx,
                                         sinks ? (double)expf(sinks[h] - mx) : 0.0);
            float *ot = out + t * ldq + h * dh;
            for (int i = 0; i < dh; i++) ot[i] = 0.0f;
            for (int64_t s = s0; s <= t; s++) {
                const float p = scores[s] * inv;
                const float *vs = v + s * ldkv + hk * dh;
                for (int i = 0; i < dh; i++) ot[i] += p * vs[i];
            }
        }
    }
}


/* LFM2's short-convolution block: [B | C | X] = h Win^T (bcx: [T][3d]), y[t][c] = C[t][c] *
 * sum_j w[c][j] * B[s][c] * X[s][c] over s = t - taps + 1 + j >= 0 (j increasing; earlier rows
 * are the empty state), out = y Wout^T. y: [T][d] scratch. */
static void conv_ref(const es_hparams *hp, const es_layer *L, const float *h, int64_t T,
                     float *bcx, float *y, float *out, float *wt, float *row)
{
    const int64_t d = hp->n_embd;
    const int taps = hp->n_conv_taps;
    const float *w = L->conv.data;
    matmul_ref(L->conv_in.data, L->conv_in.type, L->conv_in.row_bytes, 3 * d, d, h, d, T, bcx,
               3 * d, wt, row);
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < d; c++) {
            float sum = 0.0f;
            for (int j = 0; j < taps; j++) {
                const int64_t s = t - taps + 1 + j;
                if (s >= 0) sum += bcx[s * 3 * d + c] * bcx[s * 3 * d + 2 * d + c] * w[c * taps + j];
            }
            y[t * d + c] = bcx[t * 3 * d + d + c] * sum;
        }
    matmul_ref(L->conv_out.data, L->conv_out.type, L->conv_out.row_bytes, d, d, y, d, T, out, d,
               wt, row);
}

/* GQA attention over h into att [T][n_embd_q]: projections, the family's q/k norms, RoPE. */
static void attention_layer_ref(const es_model *m, const es_layer *L, const float *h, int64_t T,
                                float *q, float *kk, float *vv, float *att, float *scores,
                                float *wt, float *row)
{
    const es_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd, dq = hp->n_embd_q, dkv = hp->n_embd_kv;
    float cs[4096]; /* n_rot <= n_embd_head <= 4096 (hparams.c) */
    matmul_ref(L->wq.data, L->wq.type, L->wq.row_bytes, dq, d, h, d, T, q, dq, wt, row);
    matmul_ref(L->wk.data, L->wk.type, L->wk.row_bytes, dkv, d, h, d, T, kk, dkv, wt, row);
    matmul_ref(L->wv.data, L->wv.type, L->wv.row_bytes, dkv, d, h, d, T, vv, dkv, wt, row);
    const es_rope_kind rk = m->family->rope;
    for (int64_t t = 0; t < T; t++) {
        add_bias(q + t * dq, L->bq.data, dq);
        add_bias(kk + t * dkv, L->bk.data, dkv);
        add_bias(vv + t * dkv, L->bv.data, dkv);
        if (!m->family->qk_norm_after_rope) qk_norm_ref(m, L, q + t * dq, kk + t * dkv);
        if (L->no_rope) { /* Llama 4's NoPE layer: the queries times the temperature */
            const float temp = m->family->irope ? es_attn_temperature(t) : 1.0f;
            for (int64_t i = 0; temp != 1.0f && i < dq; i++) q[t * dq + i] *= temp;
            continue;
        }
        es_rope_cos_sin(hp, es_rope_factors(hp, T), t, cs);
        const int dh = hp->n_embd_head;
        for (int hh = 0; hh < hp->n_head; hh++) rope(rk, q + t * dq + hh * dh, hp->n_rot, cs);
        for (int hh = 0; hh < hp->n_head_kv; hh++) rope(rk, kk + t * dkv + hh * dh, hp->n_rot, cs);
        for (int hh = 0; hp->kq_norm_rope && hh < hp->n_head; hh++) /* Llama 4: after RoPE */
            rmsnorm(q + t * dq + hh * dh, q + t * dq + hh * dh, NULL, dh, hp->rms_eps);
        for (int hh = 0; hp->kq_norm_rope && hh < hp->n_head_kv; hh++)
            rmsnorm(kk + t * dkv + hh * dh, kk + t * dkv + hh * dh, NULL, dh, hp->rms_eps);
        if (m->family->qk_norm_after_rope) qk_norm_ref(m, L, q + t * dq, kk + t * dkv);
        for (int64_t i = 0; hp->q_scale != 0.0f && i < dq; i++) q[t * dq + i] *= hp->q_scale;
    }
    attention_ref(hp, T, q, kk, vv, att, scores, L->is_swa ? hp->n_swa : 0, L->sinks.data);
}

/* Each of the T tokens' experts (chosen, [T][K]) and weights (cw) from the router over in
 * ([T][n_embd]): the logits, the router's bias, the family's selection. rl: 2 n_expert floats. */
static void route_ref(const es_model *m, const es_layer *L, const float *in, int64_t T, float *rl,
                      int *chosen, float *cw, float *wt, float *row)
{
    const es_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd;
    const int E = hp->n_expert, K = hp->n_expert_used;
    for (int64_t t = 0; t < T; t++) {
        matmul_ref(L->gate_inp.data, L->gate_inp.type, L->gate_inp.row_bytes, E, d, in + t * d, d,
                   1, rl, E, wt, row);
        add_bias(rl, L->gate_inp_b.data, E);
        es_arch_route(&hp->router, rl, E, K, L->exp_probs_b.data, rl + E, chosen + t * K,
                      cw + t * K);
    }
}

es_status es_forward_ref(const es_model *m, const int32_t *ids, size_t n, int all_logits,
                         float *logits, float *hidden)
{
    const es_hparams *hp = &m->hp;
    const int64_t T = (int64_t)n, d = hp->n_embd, dq = hp->n_embd_q, dkv = hp->n_embd_kv;
    const int64_t ff = hp->n_ff_exp, nv = hp->n_vocab;
    int64_t ffmax = ff > hp->n_ff_shexp ? ff : hp->n_ff_shexp; /* the widest FFN */
    if (es_hparams_has_dense_ffn(hp) && hp->n_ff > ffmax) ffmax = hp->n_ff;
    int64_t dmax = d > dq ? d : dq; /* widest of the hidden, query and attention rows */
    dmax = dmax > hp->n_embd_att ? dmax : hp->n_embd_att;
    int64_t kmax = dmax > ffmax ? dmax : ffmax; /* longest weight row */
    kmax = kmax > hp->n_lora_kv ? kmax : hp->n_lora_kv;
    kmax = kmax > hp->n_lora_q ? kmax : hp->n_lora_q;
    const int E = hp->n_expert, K = hp->n_expert_used;
    es_status st = ES_OK;

    float *x = malloc(sizeof(float) * (size_t)(T * d));      /* residual stream */
    float *h = malloc(sizeof(float) * (size_t)(T * d));      /* normed input */
    float *q = malloc(sizeof(float) * (size_t)(T * dmax)); /* queries, then Wo's output */
    float *kk = malloc(sizeof(float) * (size_t)(T * dkv));
    float *vv = malloc(sizeof(float) * (size_t)(T * dkv));
    float *att = malloc(sizeof(float) * (size_t)(T * dmax)); /* attention, then moe */
    float *scores = malloc(sizeof(float) * (size_t)T);
    float *wt = malloc(sizeof(float) * (size_t)(kmax * CHUNK_ROWS));
    float *row = malloc(sizeof(float) * (size_t)kmax);
    float *rl = malloc(sizeof(float) * (size_t)E * 2);       /* router logits + probs */
    float *g = malloc(sizeof(float) * (size_t)(T * ffmax)); /* FFN gate, then silu(g)*u */
    float *u = malloc(sizeof(float) * (size_t)(T * ffmax)); /* FFN up */
    float *xe = malloc(sizeof(float) * (size_t)(T * d));    /* gathered rows, then expert out */
    int64_t *rows = malloc(sizeof(int64_t) * (size_t)T);    /* token of each routed row */
    float *rw = malloc(sizeof(float) * (size_t)T);          /* router weight of each row */
    int *chosen = malloc(sizeof(int) * (size_t)(T * K));    /* [T][K] experts per token */
    float *cw = malloc(sizeof(float) * (size_t)(T * K));    /* [T][K] their probabilities */
    float *conv = hp->n_conv_layers ? malloc(sizeof(float) * (size_t)(T * 3 * d)) : NULL;
    if (!x || !h || !q || !kk || !vv || !att || !scores || !wt || !row || !rl || !g || !u || !xe ||
        !rows || !rw || !chosen || !cw || (hp->n_conv_layers && !conv)) {
        st = es_fail(ES_E_NOMEM, "reference forward: out of memory for %zu tokens", n);
        goto done;
    }

    for (int64_t t = 0; t < T; t++) {
        const uint8_t *src = (const uint8_t *)m->tok_embd.data + (size_t)ids[t] * m->tok_embd.row_bytes;
        es_dequantize_row(m->tok_embd.type, src, x + t * d, d);
        for (int64_t i = 0; hp->embd_scale != 0.0f && i < d; i++) x[t * d + i] *= hp->embd_scale;
    }

    for (int il = 0; il < hp->n_layer; il++) {
        const es_layer *L = &m->layers[il];
        if (m->family->router_pre_attn && es_layer_is_moe(L)) /* the layer's input, un-normed */
            route_ref(m, L, x, T, rl, chosen, cw, wt, row);
        /* attention, or a short-convolution block */
        norm_rows_ref(hp, h, x, &L->attn_norm, &L->attn_norm_b, 0, T);
        if (L->is_conv) {
            conv_ref(hp, L, h, T, conv, att, q, wt, row);
        } else {
            if (m->family->mla) {
                if ((st = mla_ref(m, L, h, T, att, wt, row)) != ES_OK) goto done;
            } else {
                attention_layer_ref(m, L, h, T, q, kk, vv, att, scores, wt, row);
            }
            matmul_ref(L->wo.data, L->wo.type, L->wo.row_bytes, d, hp->n_embd_att, att,
                       hp->n_embd_att, T, q, d, wt, row);
            for (int64_t t = 0; t < T; t++) add_bias(q + t * d, L->bo.data, d);
        }
        residual_add(x, q, T * d, hp->resid_scale);

        norm_rows_ref(hp, h, x, &L->ffn_norm, &L->ffn_norm_b, 0, T);
        if (!es_layer_is_moe(L)) { /* a dense layer */
            ffn_ref(&L->ffn_gate, &L->ffn_up, &L->ffn_down, h, T, d, g, u, att, wt, row);
            residual_add(x, att, T * d, hp->resid_scale);
            continue;
        }
        /* mixture of experts: route every token (SmallThinker did before attention), then run
         * each expert (in increasing id) over the rows routed to it; moe[t] collects the
         * weighted outputs in that order. */
        if (!m->family->router_pre_attn) route_ref(m, L, h, T, rl, chosen, cw, wt, row);
        memset(att, 0, sizeof(float) * (size_t)(T * d)); /* att holds moe[] now */
        for (int e = 0; e < E; e++) {
            int64_t R = 0;
            for (int64_t t = 0; t < T; t++)
                for (int j = 0; j < K; j++)
                    if (chosen[t * K + j] == e) {
                        rows[R] = t;
                        rw[R] = cw[t * K + j];
                        memcpy(xe + R * d, h + t * d, sizeof(float) * (size_t)d);
                        if (m->family->weight_before_ffn) { /* Llama 4: w h in, output as is */
                            for (int64_t i = 0; i < d; i++) xe[R * d + i] *= rw[R];
                            rw[R] = 1.0f;
                        }
                        R++;
                    }
            if (R == 0) continue;
            const uint8_t *wg = es_layer_expert(L, 0, e), *wu = es_layer_expert(L, 1, e);
            const uint8_t *wd = es_layer_expert(L, 2, e);
            matmul_ref_l(wg, L->gate_exps.type, L->gate_exps.layout, L->gate_exps.row_bytes, ff,
                         d, xe, d, R, g, ff, wt, row);
            matmul_ref_l(wu, L->up_exps.type, L->up_exps.layout, L->up_exps.row_bytes, ff, d, xe,
                         d, R, u, ff, wt, row);
            const float *bg = L->gate_exps_b.data ? (const float *)L->gate_exps_b.data + e * ff : NULL;
            const float *bu = L->up_exps_b.data ? (const float *)L->up_exps_b.data + e * ff : NULL;
            const float *bd = L->down_exps_b.data ? (const float *)L->down_exps_b.data + e * d : NULL;
            for (int64_t r = 0; r < R; r++) {
                add_bias(g + r * ff, bg, ff);
                add_bias(u + r * ff, bu, ff);
            }
            for (int64_t i = 0; i < R * ff; i++)
                g[i] = m->family->glu_oai    ? glu_oai(g[i], u[i])
                       : m->family->glu_relu ? (g[i] > 0.0f ? g[i] * u[i] : 0.0f)
                                             : silu(g[i]) * u[i];
            matmul_ref_l(wd, L->down_exps.type, L->down_exps.layout, L->down_exps.row_bytes, d,
                         ff, g, ff, R, xe, d, wt, row);
            for (int64_t r = 0; r < R; r++) add_bias(xe + r * d, bd, d);
            for (int64_t r = 0; r < R; r++)
                for (int64_t i = 0; i < d; i++) att[rows[r] * d + i] += rw[r] * xe[r * d + i];
        }
        if (L->gate_shexp.data) { /* moe += shared experts */
            ffn_ref(&L->gate_shexp, &L->up_shexp, &L->down_shexp, h, T, d, g, u, xe, wt, row);
            for (int64_t t = 0; L->gate_inp_shexp.data && t < T; t++) { /* qwen2moe's gate */
                const float *w = L->gate_inp_shexp.data;
                float s = 0.0f;
                for (int64_t k = 0; k < d; k++) s += h[t * d + k] * w[k];
                const float gt = 1.0f / (1.0f + expf(-s));
                for (int64_t k = 0; k < d; k++) xe[t * d + k] *= gt;
            }
            for (int64_t i = 0; i < T * d; i++) att[i] += xe[i];
        }
        residual_add(x, att, T * d, hp->resid_scale);
    }

    const int64_t t0 = all_logits || hidden ? 0 : T - 1;
    norm_rows_ref(hp, h, x, &m->output_norm, &m->output_norm_b, t0, T);
    if (hidden) memcpy(hidden, h, sizeof(float) * (size_t)(T * d));
    if (!logits) goto done;
    const int64_t l0 = all_logits ? 0 : T - 1;
    matmul_ref(m->output.data, m->output.type, m->output.row_bytes, nv, d, h + l0 * d, d, T - l0,
               logits, nv, wt, row);
    for (int64_t t = 0; t < T - l0; t++) add_bias(logits + t * nv, m->output_b.data, nv);
    for (int64_t i = 0; hp->logit_mul != 0.0f && i < (T - l0) * nv; i++) logits[i] *= hp->logit_mul;
done:
    free(x); free(h); free(q); free(kk); free(vv); free(att); free(scores); free(wt); free(row);
    free(rl); free(g); free(u); free(xe); free(rows); free(rw); free(chosen); free(cw); free(conv);
    return st;
}
