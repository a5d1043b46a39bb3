/*
 * LFM2's short-convolution block for the fast forward pass, in place of attention on the layers
 * the family marks: [B | C | X] = h Win^T, y = C * conv(B * X), x += y Wout^T, where conv is a
 * causal depthwise convolution of n_conv_taps taps over the tokens.
 *
 * DESIGN: a prefill starts from the empty state, so rows before the sequence's first are zero
 * (in a batch, the rows of the sequence before it are not read) and each output row depends only
 * on the taps rows of its sequence up to it: rows split statically over the threads,
 * each summing its taps in increasing order (as ggml_ssm_conv sums them), bit-identical for any
 * thread count. y goes into f->moe, which is free until the FFN; f->conv_bcx is allocated by
 * fast.c when the model has convolution layers.
 */
#include "run/forward_impl.h"

/* es_layer_rows job: row t of f->moe from rows t-taps+1 .. t of [B | C | X] (f->conv_bcx):
 * y[c] = C[t][c] * sum_j w[c][j] * (B * X)[t - taps + 1 + j][c], j increasing, rows before the
 * sequence zero (the empty state), as ggml_ssm_conv sums them. */
static void conv_worker(void *arg, int ith, int nth)
{
    const es_layer_rows *j = arg;
    es_fast *f = j->f;
    const es_hparams *hp = &j->m->hp;
    const int64_t d = hp->n_embd;
    const int taps = hp->n_conv_taps;
    const float *w = j->L->conv.data;
    int64_t r0, r1;
    if (!es_row_span(0, j->T, ith, nth, &r0, &r1)) return;
    for (int64_t t = r0; t < r1; t++) {
        const float *bcx = f->conv_bcx + t * 3 * d;
        float *y = f->moe + t * d;
        const int64_t first = t - f->pos[t]; /* the sequence's first row */
        for (int64_t c = 0; c < d; c++) {
            float sum = 0.0f;
            for (int jj = 0; jj < taps; jj++) {
                const int64_t ts = t - taps + 1 + jj;
                if (ts < first) continue;
                const float *r = f->conv_bcx + ts * 3 * d;
                sum += r[c] * r[2 * d + c] * w[c * taps + jj];
            }
            y[c] = bcx[d + c] * sum;
        }
    }
}

void es_conv_block(es_fast *f, const es_model *m, const es_layer *L, int64_t T)
{
    const int64_t d = m->hp.n_embd;
    es_fast_prepare(f, f->h, d, L->conv_in.type, 0, T);
    es_gemm_task in = {&L->conv_in, f->act, f->conv_bcx, 3 * d, T};
    es_fast_gemms(f, &in, 1);
    es_fast_phase(f, ES_PHASE_ATTN);
    es_fast_layer_rows(f, m, L, T, conv_worker);
    es_fast_prepare(f, f->moe, d, L->conv_out.type, 0, T);
    es_gemm_task out = {&L->conv_out, f->act, f->tmp, d, T};
    es_fast_gemms(f, &out, 1);
    es_fast_residual_add(f, m, f->tmp, T);
}
