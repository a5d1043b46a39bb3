/*
 * es_model_open/close and the public accessors: reads the architecture's hyperparameters
 * (hparams.c), checks every tensor it needs (name, type, shape) and keeps views into the
 * mapping. A file that lacks a tensor, has a wrong shape or an unknown weight type is refused
 * here with a message naming the tensor, so no later code has to re-check.
 */
#include "model/model.h"
#include "model/hparams.h"

#include "pack/pack.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Binds tensor `name` with the expected shape (n_dims dims, ne). Norms must be F32. */
static void free_tensor(const es_tensor *t) { free((void *)t->name); }

static es_status bind(es_model *m, const char *name, uint32_t n_dims, const int64_t *ne,
                      bool want_f32, es_tensor *out)
{
    const char *path = es_gguf_path(m->gguf);
    const es_gguf_tensor *t = es_gguf_find_tensor(m->gguf, name);
    if (!t) return es_fail(ES_E_FORMAT, "%s: missing tensor %s (%s)", path, name, m->arch);
    if (!es_qtype_is_weight(t->type))
        return es_fail(ES_E_UNSUPPORTED, "%s: tensor %s has weight type %s, which estream cannot "
                       "compute with (it computes %s: a file of the model in one of those, such "
                       "as its Q4_K_M, runs)", path, name, es_qtype_name(t->type),
                       es_qtype_weight_list());
    if (want_f32 && t->type != ES_QTYPE_F32)
        return es_fail(ES_E_UNSUPPORTED, "%s: tensor %s must be f32, not %s", path, name,
                       es_qtype_name(t->type));
    bool ok = true;
    for (uint32_t d = 0; d < 4; d++) {
        int64_t want = d < n_dims ? ne[d] : 1;
        int64_t got = d < t->n_dims ? t->ne[d] : 1;
        ok = ok && want == got;
    }
    if (!ok)
        return es_fail(ES_E_FORMAT,
                       "%s: tensor %s has shape [%lld, %lld, %lld], expected [%lld, %lld, %lld]",
                       path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)ne[0], (long long)(n_dims > 1 ? ne[1] : 1),
                       (long long)(n_dims > 2 ? ne[2] : 1));
    out->name = strndup(t->name.ptr, t->name.len);
    if (!out->name) return es_fail(ES_E_NOMEM, "%s: out of memory binding tensor %s", path, name);
    out->data = t->data;
    out->type = t->type;
    for (int d = 0; d < 4; d++) out->ne[d] = d < (int)t->n_dims ? t->ne[d] : 1;
    out->row_bytes = es_qtype_row_bytes(t->type, t->ne[0]);
    out->nbytes = t->nbytes;
    return ES_OK;
}

static es_status bind_layer(es_model *m, int il, const char *suffix, uint32_t n_dims,
                            int64_t ne0, int64_t ne1, int64_t ne2, bool want_f32, es_tensor *out)
{
    char name[96];
    snprintf(name, sizeof(name), "blk.%d.%s.weight", il, suffix);
    int64_t ne[3] = {ne0, ne1, ne2};
    return bind(m, name, n_dims, ne, want_f32, out);
}

/* An f32 tensor blk.<il>.<stem>.<kind> of shape [ne0] or [ne0, ne1]; absent and not required:
 * left unbound (data NULL). */
static es_status bind_f32(es_model *m, int il, const char *stem, const char *kind, int64_t ne0,
                          int64_t ne1, bool required, es_tensor *out)
{
    char name[96];
    snprintf(name, sizeof(name), "blk.%d.%s.%s", il, stem, kind);
    if (!required && !es_gguf_find_tensor(m->gguf, name)) return ES_OK;
    const int64_t ne[2] = {ne0, ne1};
    return bind(m, name, ne1 > 1 ? 2 : 1, ne, true, out);
}

/* Rows [r0, r0 + n) of t as a tensor of their own, named "<t's name>[part]". */
static es_status view_rows(const es_model *m, const es_tensor *t, int64_t r0, int64_t n,
                           const char *part, es_tensor *out)
{
    char name[112];
    snprintf(name, sizeof(name), "%s[%s]", t->name, part);
    *out = *t;
    if (!(out->name = strdup(name)))
        return es_fail(ES_E_NOMEM, "%s: out of memory binding %s", es_gguf_path(m->gguf), name);
    out->data = (const uint8_t *)t->data + (size_t)r0 * t->row_bytes;
    out->ne[1] = n;
    out->nbytes = (size_t)n * t->row_bytes;
    return ES_OK;
}

/* Splits a fused q/k/v tensor (or bias, one row of dq + 2 dkv floats) into three views. */
static es_status split_qkv(const es_model *m, const es_tensor *fused, bool is_bias, es_tensor *q,
                           es_tensor *k, es_tensor *v)
{
    const int64_t dq = m->hp.n_embd_q, dkv = m->hp.n_embd_kv;
    if (!is_bias) {
        ES_TRY(view_rows(m, fused, 0, dq, "q", q));
        ES_TRY(view_rows(m, fused, dq, dkv, "k", k));
        return view_rows(m, fused, dq + dkv, dkv, "v", v);
    }
    es_tensor row = *fused; /* a bias is one row: view it as dq + 2 dkv rows of one float */
    row.ne[0] = 1;
    row.ne[1] = dq + 2 * dkv;
    row.row_bytes = sizeof(float);
    es_tensor *ts[3] = {q, k, v};
    ES_TRY(view_rows(m, &row, 0, dq, "q", q));
    ES_TRY(view_rows(m, &row, dq, dkv, "k", k));
    ES_TRY(view_rows(m, &row, dq + dkv, dkv, "v", v));
    for (int i = 0; i < 3; i++) { /* back to one row of floats */
        ts[i]->ne[0] = ts[i]->ne[1];
        ts[i]->ne[1] = 1;
        ts[i]->row_bytes = ts[i]->nbytes;
    }
    return ES_OK;
}

/* The q, k and v projections and their biases where the file has them (llama.cpp's
 * create_tensor_qkv, which every family here goes through): three tensors, or one fused
 * attn_qkv of [n_embd] x (n_embd_q + 2 n_embd_kv) rows (and attn_qkv.bias), as Ling 2.0's
 * converter writes it, bound as three row views so that every later step sees q, k and v. */
static es_status bind_qkv(es_model *m, int il, es_layer *L)
{
    const es_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd, dq = hp->n_embd_q, dkv = hp->n_embd_kv;
    char name[64];
    snprintf(name, sizeof(name), "blk.%d.attn_qkv.weight", il);
    if (!es_gguf_find_tensor(m->gguf, name)) {
        snprintf(name, sizeof(name), "blk.%d.attn_q.weight", il);
        if (!es_gguf_find_tensor(m->gguf, name))
            return es_fail(ES_E_FORMAT, "%s: missing tensor %s (or a fused blk.%d.attn_qkv.weight) "
                           "(%s)", es_gguf_path(m->gguf), name, il, m->arch);
        ES_TRY(bind_layer(m, il, "attn_q", 2, d, dq, 1, false, &L->wq));
        ES_TRY(bind_layer(m, il, "attn_k", 2, d, dkv, 1, false, &L->wk));
        ES_TRY(bind_layer(m, il, "attn_v", 2, d, dkv, 1, false, &L->wv));
        ES_TRY(bind_f32(m, il, "attn_q", "bias", dq, 1, false, &L->bq));
        ES_TRY(bind_f32(m, il, "attn_k", "bias", dkv, 1, false, &L->bk));
        return bind_f32(m, il, "attn_v", "bias", dkv, 1, false, &L->bv);
    }
    es_tensor fused = {0}, fused_b = {0};
    es_status st = bind_layer(m, il, "attn_qkv", 2, d, dq + 2 * dkv, 1, false, &fused);
    if (!st) st = split_qkv(m, &fused, false, &L->wq, &L->wk, &L->wv);
    if (!st) st = bind_f32(m, il, "attn_qkv", "bias", dq + 2 * dkv, 1, false, &fused_b);
    if (!st && fused_b.data) st = split_qkv(m, &fused_b, true, &L->bq, &L->bk, &L->bv);
    free_tensor(&fused);
    free_tensor(&fused_b);
    return st;
}

/* The attention extras of gpt-oss and Llama 4 (arch.h): the output bias, the sinks, whether the
 * layer slides (llama.cpp's set_swa_pattern) and, in Llama 4, whether it turns no RoPE. */
static es_status bind_attn_extras(es_model *m, int il, es_layer *L)
{
    const es_hparams *hp = &m->hp;
    if (m->family->attn_out_bias)
        ES_TRY(bind_f32(m, il, "attn_output", "bias", hp->n_embd, 1, true, &L->bo));
    if (m->family->attn_sinks)
        ES_TRY(bind_f32(m, il, "attn_sinks", "weight", hp->n_head, 1, true, &L->sinks));
    L->is_swa = es_hparams_layer_slides(m, il);
    L->no_rope = es_hparams_layer_no_rope(m, il);
    return ES_OK;
}

/* A pack layer: one record per expert (pack.h). The three matrices become tensor views whose
 * data is expert 0's matrix; the stride between experts is the record size. */
static es_status bind_pack_layer(es_model *m, int il, es_layer *L)
{
    const es_hparams *hp = &m->hp;
    const char *path = es_gguf_path(m->gguf);
    es_pack_layer pl;
    ES_TRY(es_pack_layer_info(m->gguf, il, &pl));
    const int64_t d = hp->n_embd, ff = hp->n_ff_exp;
    const int64_t want[3][2] = {{d, ff}, {d, ff}, {ff, d}};
    static const char *const names[3] = {"gate", "up", "down"};
    es_tensor *ts[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
    if (pl.n_expert != hp->n_expert)
        return es_fail(ES_E_FORMAT, "%s: layer %d packs %lld experts, the model has %d", path, il,
                       (long long)pl.n_expert, hp->n_expert);
    for (int i = 0; i < 3; i++) {
        if (pl.ne[i][0] != want[i][0] || pl.ne[i][1] != want[i][1])
            return es_fail(ES_E_FORMAT, "%s: layer %d %s experts are [%lld, %lld], expected "
                           "[%lld, %lld]", path, il, names[i], (long long)pl.ne[i][0],
                           (long long)pl.ne[i][1], (long long)want[i][0], (long long)want[i][1]);
        if (!es_qtype_is_weight(pl.types[i]))
            return es_fail(ES_E_UNSUPPORTED, "%s: layer %d %s experts have weight type %s, which "
                           "estream cannot compute with (it computes %s)", path, il, names[i],
                           es_qtype_name(pl.types[i]), es_qtype_weight_list());
        char name[64];
        snprintf(name, sizeof(name), "blk.%d.ffn_exps[%s]", il, names[i]);
        if (!(ts[i]->name = strdup(name)))
            return es_fail(ES_E_NOMEM, "%s: out of memory binding %s", path, name);
        ts[i]->data = pl.data + pl.offsets[i];
        ts[i]->type = pl.types[i];
        ts[i]->layout = (uint8_t)pl.layouts[i]; /* tiles: the plan runs es_gemm_tiled on them */
        ts[i]->ne[0] = pl.ne[i][0];
        ts[i]->ne[1] = pl.ne[i][1];
        ts[i]->ne[2] = pl.n_expert;
        ts[i]->ne[3] = 1;
        ts[i]->row_bytes = es_qtype_row_bytes(pl.types[i], pl.ne[i][0]);
        ts[i]->nbytes = pl.matrix_bytes[i] * (size_t)pl.n_expert; /* weights, not padding */
        L->exp_data[i] = pl.data + pl.offsets[i];
        L->exp_file_off[i] = pl.file_offset + pl.offsets[i];
        L->exp_stride[i] = pl.record_bytes;
        L->exp_bytes[i] = pl.matrix_bytes[i];
    }
    return ES_OK;
}

/* llama.cpp's older naming of the experts, one 2-D tensor per expert and matrix:
 * blk.N.ffn_{gate,up,down}.E.weight (its converters wrote Mixtral so until early 2024, and it
 * still loads such files), instead of blk.N.ffn_{gate,up,down}_exps.weight. */
static bool has_split_experts(const es_model *m, int il)
{
    char name[64];
    snprintf(name, sizeof(name), "blk.%d.ffn_gate_exps.weight", il);
    if (es_gguf_find_tensor(m->gguf, name)) return false;
    snprintf(name, sizeof(name), "blk.%d.ffn_gate.0.weight", il);
    return es_gguf_find_tensor(m->gguf, name) != NULL;
}

/* Binds split experts as the views bind_tensors() makes of merged ones: expert e's matrix k at
 * exp_data[k] + e * exp_stride[k]. That needs each matrix's experts at one stride in the file,
 * which is how converters wrote them (every expert's three tensors in turn, or one matrix's
 * experts in a row); a file placed otherwise is refused with the way out (the pack writer takes
 * any placement). */
static es_status bind_split_experts(es_model *m, int il, es_layer *L)
{
    const char *path = es_gguf_path(m->gguf);
    const int64_t d = m->hp.n_embd, ff = m->hp.n_ff_exp, E = m->hp.n_expert;
    const int64_t shape[3][2] = {{d, ff}, {d, ff}, {ff, d}};
    static const char *const names[3] = {"gate", "up", "down"};
    es_tensor *ts[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
    for (int k = 0; k < 3; k++) {
        uint64_t off0 = 0, stride = 0;
        uint32_t file0 = 0;
        for (int64_t e = 0; e < E; e++) {
            char sfx[48];
            snprintf(sfx, sizeof(sfx), "ffn_%s.%lld", names[k], (long long)e);
            es_tensor te = {0};
            ES_TRY(bind_layer(m, il, sfx, 2, shape[k][0], shape[k][1], 1, false, &te));
            const es_gguf_tensor *gt = es_gguf_find_tensor(m->gguf, te.name);
            const uint64_t off = gt->offset;
            if (e == 0) {
                *ts[k] = te;
                off0 = off;
                file0 = gt->file;
                stride = te.nbytes;
                continue;
            }
            const bool same_type = te.type == ts[k]->type;
            free((void *)te.name);
            if (!same_type)
                return es_fail(ES_E_FORMAT, "%s: blk.%d.ffn_%s.%lld.weight is %s, but expert 0's "
                               "is %s", path, il, names[k], (long long)e, es_qtype_name(te.type),
                               es_qtype_name(ts[k]->type));
            if (e == 1) stride = off > off0 ? off - off0 : 0;
            if (stride < ts[k]->nbytes || off != off0 + (uint64_t)e * stride || gt->file != file0)
                return es_fail(ES_E_UNSUPPORTED, "%s: layer %d's experts are one tensor each "
                               "(blk.%d.ffn_%s.E.weight) and not evenly spaced in one file, which "
                               "estream needs to read them in groups; pack the file first "
                               "(estream pack -m %s -o model.pack) and run the pack", path, il,
                               il, names[k], path);
        }
        char name[64];
        snprintf(name, sizeof(name), "blk.%d.ffn_%s.[0-%lld].weight", il, names[k],
                 (long long)E - 1);
        free((void *)ts[k]->name);
        if (!(ts[k]->name = strdup(name)))
            return es_fail(ES_E_NOMEM, "%s: out of memory binding %s", path, name);
        L->exp_data[k] = ts[k]->data;
        L->exp_file[k] = file0;
        L->exp_file_off[k] = es_gguf_data_offset(es_gguf_file(m->gguf, file0)) + off0;
        L->exp_stride[k] = (size_t)stride;
        L->exp_bytes[k] = ts[k]->nbytes;
        ts[k]->ne[2] = E;
        ts[k]->nbytes *= (size_t)E; /* weights, not what lies between them */
    }
    return ES_OK;
}

/* The output head: output.weight, or where the family ties it and the file has none, a second
 * view of the token embedding (with its own name, so that closing frees each once). */
static es_status bind_output(es_model *m, const int64_t *ne)
{
    if (es_gguf_find_tensor(m->gguf, "output.weight") || !m->family->output_optional)
        return bind(m, "output.weight", 2, ne, false, &m->output);
    m->output = m->tok_embd;
    m->output.name = strdup(m->tok_embd.name);
    return m->output.name ? ES_OK : es_fail(ES_E_NOMEM, "out of memory");
}

/* A table of RoPE frequency factors (f32 [n_rot/2]) copied into *out and checked: a factor
 * that is not a positive finite number would turn every angle into NaN. */
static es_status copy_rope_factors(es_model *m, const char *name, float **out)
{
    const int64_t n = m->hp.n_rot / 2;
    es_tensor t = {0};
    ES_TRY(bind(m, name, 1, &n, true, &t));
    free_tensor(&t); /* the view's name: its data stays mapped */
    if (!(*out = malloc(sizeof(float) * (size_t)n)))
        return es_fail(ES_E_NOMEM, "%s: out of memory", es_gguf_path(m->gguf));
    memcpy(*out, t.data, sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        if (!((*out)[i] > 0.0f) || !isfinite((*out)[i]))
            return es_fail(ES_E_FORMAT, "%s: %s[%lld] = %g: RoPE frequency factors must be "
                           "positive", es_gguf_path(m->gguf), name, (long long)i,
                           (double)(*out)[i]);
    return ES_OK;
}

/* The RoPE frequency factors the family reads where the file has them, pointed at by
 * hp.rope_factors: llama3's (rope_freqs.weight), or LongRoPE's short and long ones
 * (rope_factors_short / rope_factors_long.weight, the long ones in hp.rope_factors_long),
 * as llama.cpp's get_rope_factors prefers rope_freqs over them. */
static es_status bind_rope_factors(es_model *m)
{
    const es_arch *fam = m->family;
    if ((fam->rope_factors || fam->rope_long_short) &&
        es_gguf_find_tensor(m->gguf, "rope_freqs.weight")) {
        ES_TRY(copy_rope_factors(m, "rope_freqs.weight", &m->rope_factors));
        m->hp.rope_factors = m->rope_factors;
        return ES_OK;
    }
    if (!fam->rope_long_short) return ES_OK;
    m->hp.rope_long_short = true;
    if (es_gguf_find_tensor(m->gguf, "rope_factors_short.weight")) {
        ES_TRY(copy_rope_factors(m, "rope_factors_short.weight", &m->rope_factors));
        m->hp.rope_factors = m->rope_factors;
    }
    if (es_gguf_find_tensor(m->gguf, "rope_factors_long.weight")) {
        ES_TRY(copy_rope_factors(m, "rope_factors_long.weight", &m->rope_factors_long));
        m->hp.rope_factors_long = m->rope_factors_long;
    }
    return ES_OK;
}

static es_status bind_qk_norms(es_model *m, int il, es_layer *L)
{
    const es_hparams *hp = &m->hp;
    char name[64];
    snprintf(name, sizeof(name), "blk.%d.attn_q_norm.weight", il);
    if (m->family->qk_norm_optional && !es_gguf_find_tensor(m->gguf, name)) return ES_OK;
    switch (m->family->qk_norm) {
    case ES_QK_NORM_NONE: return ES_OK;
    case ES_QK_NORM_WHOLE:
        ES_TRY(bind_layer(m, il, "attn_q_norm", 1, hp->n_embd_q, 1, 1, true, &L->q_norm));
        return bind_layer(m, il, "attn_k_norm", 1, hp->n_embd_kv, 1, 1, true, &L->k_norm);
    case ES_QK_NORM_HEAD:
        ES_TRY(bind_layer(m, il, "attn_q_norm", 1, hp->n_embd_head, 1, 1, true, &L->q_norm));
        return bind_layer(m, il, "attn_k_norm", 1, hp->n_embd_head, 1, 1, true, &L->k_norm);
    }
    return ES_OK;
}

/* A multi-head latent attention block (model.h): its decompression matrices split (attn_k_b,
 * attn_v_b, as llama.cpp's converter writes them now) or joined (attn_kv_b, older files), as
 * the _mla keys say (llama.cpp's rule). */
static es_status bind_mla(es_model *m, int il, es_layer *L)
{
    const es_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd, kv = hp->n_lora_kv, nh = hp->n_head;
    const int64_t nope = hp->n_embd_head - hp->n_rot, dv = hp->n_embd_head_v;
    if (hp->n_lora_q) { /* q LoRA: rmsnorm(h Wq_a) Wq_b */
        ES_TRY(bind_layer(m, il, "attn_q_a", 2, d, hp->n_lora_q, 1, false, &L->wq_a));
        ES_TRY(bind_layer(m, il, "attn_q_a_norm", 1, hp->n_lora_q, 1, 1, true, &L->q_a_norm));
        ES_TRY(bind_layer(m, il, "attn_q_b", 2, hp->n_lora_q, hp->n_embd_q, 1, false, &L->wq_b));
    } else {
        ES_TRY(bind_layer(m, il, "attn_q", 2, d, hp->n_embd_q, 1, false, &L->wq));
    }
    ES_TRY(bind_layer(m, il, "attn_kv_a_mqa", 2, d, kv + hp->n_rot, 1, false, &L->wkv_a));
    ES_TRY(bind_layer(m, il, "attn_kv_a_norm", 1, kv, 1, 1, true, &L->kv_a_norm));
    if (hp->mla_split) {
        ES_TRY(bind_layer(m, il, "attn_k_b", 3, nope, kv, nh, false, &L->wk_b));
        ES_TRY(bind_layer(m, il, "attn_v_b", 3, kv, dv, nh, false, &L->wv_b));
    } else {
        ES_TRY(bind_layer(m, il, "attn_kv_b", 2, kv, nh * (nope + dv), 1, false, &L->wkv_b));
    }
    return bind_layer(m, il, "attn_output", 2, hp->n_embd_att, d, 1, false, &L->wo);
}

/* The FFN of a dense layer, or the shared experts of a MoE layer: gate and up [d] x ff rows,
 * down [ff] x d rows, named <prefix>{gate,up,down}<suffix>. */
static es_status bind_ffn(es_model *m, int il, const char *suffix, int64_t ff, es_tensor *gate,
                          es_tensor *up, es_tensor *down)
{
    const int64_t d = m->hp.n_embd;
    char name[48];
    snprintf(name, sizeof(name), "ffn_gate%s", suffix);
    ES_TRY(bind_layer(m, il, name, 2, d, ff, 1, false, gate));
    snprintf(name, sizeof(name), "ffn_up%s", suffix);
    ES_TRY(bind_layer(m, il, name, 2, d, ff, 1, false, up));
    snprintf(name, sizeof(name), "ffn_down%s", suffix);
    return bind_layer(m, il, name, 2, ff, d, 1, false, down);
}

static es_status bind_tensors(es_model *m)
{
    const es_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd, dq = hp->n_embd_q;
    const int64_t ff = hp->n_ff_exp, ne_ = hp->n_expert, nv = hp->n_vocab;
    int64_t ne[2] = {d, nv};
    ES_TRY(bind(m, "token_embd.weight", 2, ne, false, &m->tok_embd));
    const char *out_norm = m->family->output_norm ? m->family->output_norm : "output_norm.weight";
    ES_TRY(bind(m, out_norm, 1, ne, true, &m->output_norm));
    ES_TRY(bind_output(m, ne));
    if (m->family->norm_bias) ES_TRY(bind(m, "output_norm.bias", 1, ne, true, &m->output_norm_b));
    if (m->family->output_bias) ES_TRY(bind(m, "output.bias", 1, ne + 1, true, &m->output_b));
    ES_TRY(bind_rope_factors(m));
    m->layers = calloc((size_t)hp->n_layer, sizeof(*m->layers));
    if (!m->layers)
        return es_fail(ES_E_NOMEM, "%s: out of memory for %d layers", es_gguf_path(m->gguf),
                       hp->n_layer);
    for (int il = 0; il < hp->n_layer; il++) {
        es_layer *L = &m->layers[il];
        ES_TRY(bind_layer(m, il, "attn_norm", 1, d, 1, 1, true, &L->attn_norm));
        if (m->family->norm_bias) ES_TRY(bind_f32(m, il, "attn_norm", "bias", d, 1, true, &L->attn_norm_b));
        L->is_conv = m->family->conv_layers && es_hparams_head_count_kv(m, il) == 0;
        if (L->is_conv) {
            ES_TRY(bind_layer(m, il, "shortconv.conv", 2, hp->n_conv_taps, d, 1, true, &L->conv));
            ES_TRY(bind_layer(m, il, "shortconv.in_proj", 2, d, 3 * d, 1, false, &L->conv_in));
            ES_TRY(bind_layer(m, il, "shortconv.out_proj", 2, d, d, 1, false, &L->conv_out));
        } else if (m->family->mla) {
            ES_TRY(bind_mla(m, il, L));
        } else {
            ES_TRY(bind_qkv(m, il, L));
            ES_TRY(bind_layer(m, il, "attn_output", 2, dq, d, 1, false, &L->wo));
            ES_TRY(bind_qk_norms(m, il, L));
            ES_TRY(bind_attn_extras(m, il, L));
        }
        const char *ffn_norm = m->family->ffn_norm ? m->family->ffn_norm : "ffn_norm";
        ES_TRY(bind_layer(m, il, ffn_norm, 1, d, 1, 1, true, &L->ffn_norm));
        if (m->family->norm_bias) ES_TRY(bind_f32(m, il, ffn_norm, "bias", d, 1, true, &L->ffn_norm_b));
        if (!es_hparams_layer_has_experts(hp, il)) {
            ES_TRY(bind_ffn(m, il, "", hp->n_ff, &L->ffn_gate, &L->ffn_up, &L->ffn_down));
            continue;
        }
        ES_TRY(bind_layer(m, il, "ffn_gate_inp", 2, d, ne_, 1, false, &L->gate_inp));
        if (m->family->router_bias)
            ES_TRY(bind_f32(m, il, "ffn_gate_inp", "bias", ne_, 1, true, &L->gate_inp_b));
        if (m->family->expert_out_bias) { /* resident rows, in a pack as in the GGUF */
            ES_TRY(bind_f32(m, il, "ffn_gate_exps", "bias", ff, ne_, true, &L->gate_exps_b));
            ES_TRY(bind_f32(m, il, "ffn_up_exps", "bias", ff, ne_, true, &L->up_exps_b));
            ES_TRY(bind_f32(m, il, "ffn_down_exps", "bias", d, ne_, true, &L->down_exps_b));
        }
        char bname[64];
        snprintf(bname, sizeof(bname), "blk.%d.exp_probs_b.bias", il);
        /* deepseek2 files of DeepSeek-V3's kind have it (llama.cpp: optional there) */
        if (m->family->expert_bias ||
            (m->family->expert_bias_optional && es_gguf_find_tensor(m->gguf, bname))) {
            const int64_t nb[1] = {ne_};
            ES_TRY(bind(m, bname, 1, nb, true, &L->exp_probs_b));
        }
        if (hp->n_expert_shared > 0)
            ES_TRY(bind_ffn(m, il, "_shexp", hp->n_ff_shexp, &L->gate_shexp, &L->up_shexp,
                            &L->down_shexp));
        if (m->family->shexp_gated)
            ES_TRY(bind_f32(m, il, "ffn_gate_inp_shexp", "weight", d, 1, true, &L->gate_inp_shexp));
        if (m->is_pack) {
            ES_TRY(bind_pack_layer(m, il, L));
            continue;
        }
        if (has_split_experts(m, il)) {
            ES_TRY(bind_split_experts(m, il, L));
            continue;
        }
        ES_TRY(bind_layer(m, il, "ffn_gate_exps", 3, d, ff, ne_, false, &L->gate_exps));
        ES_TRY(bind_layer(m, il, "ffn_up_exps", 3, d, ff, ne_, false, &L->up_exps));
        ES_TRY(bind_layer(m, il, "ffn_down_exps", 3, ff, d, ne_, false, &L->down_exps));
        es_tensor *ts[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
        for (int i = 0; i < 3; i++) {
            const es_gguf_tensor *t = es_gguf_find_tensor(m->gguf, ts[i]->name);
            L->exp_data[i] = ts[i]->data;
            L->exp_file[i] = t->file;
            L->exp_file_off[i] = es_gguf_data_offset(es_gguf_file(m->gguf, t->file)) + t->offset;
            L->exp_bytes[i] = L->exp_stride[i] = ts[i]->nbytes / (size_t)ne_;
        }
    }
    return ES_OK;
}

static es_status read_arch(es_model *m)
{
    const char *path = es_gguf_path(m->gguf);
    es_str arch = {"", 0};
    ES_TRY(es_gguf_read_str(m->gguf, "general.architecture", !m->vocab_only, &arch));
    if (arch.len == 0 && m->vocab_only) return ES_OK;
    if (arch.len >= sizeof(m->arch) || memchr(arch.ptr, 0, arch.len))
        return es_fail(ES_E_FORMAT, "%s: bad general.architecture", path);
    memcpy(m->arch, arch.ptr, arch.len);
    m->arch[arch.len] = 0;
    if (m->vocab_only || (m->family = es_arch_find(m->arch)) != NULL) return ES_OK;
    return es_fail(ES_E_UNSUPPORTED, "%s: unknown architecture '%s' (estream runs %s)", path,
                   m->arch, es_arch_supported());
}

/* Prefixes es_last_error() with "<path>: " unless it names the file already (the tokenizer's
 * messages name the key only). */
static es_status name_file(es_status st, const char *path)
{
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", es_last_error());
    if (strncmp(msg, path, strlen(path)) == 0) return st;
    return es_fail(st, "%s: %s", path, msg);
}

/* Warnings logged while opening are held: printed if the open succeeds, dropped if it fails,
 * so a failed open reports exactly one line (the error, which names the file). */
/* A pack cut short fails in the GGUF reader on its expert tensor blk.N.ffn_exps, whose last
 * dimension is the expert: say which layer and experts are missing, in the user's terms. */
static void explain_truncated_pack(const char *path)
{
    const char *msg = strstr(es_last_error(), "tensor 'blk.");
    int il;
    long long e, n;
    if (!msg || !strstr(msg, ".ffn_exps' runs past the end") ||
        sscanf(msg, "tensor 'blk.%d.ffn_exps'", &il) != 1)
        return;
    const char *sl = strstr(msg, "inside slice ");
    if (!sl || sscanf(sl, "inside slice %lld of %lld", &e, &n) != 2) return;
    es_fail(ES_E_FORMAT, "%s: layer %d, expert %lld: the pack is truncated (its records of "
                         "experts %lld-%lld of that layer lie past the end of the file); make it "
                         "again with estream pack", path, il, e, e, n - 1);
}

es_status es_model_open(const char *path, unsigned flags, es_model **out)
{
    *out = NULL;
    if (!path) return es_fail(ES_E_INVAL, "no model path given");
    es_model *m = calloc(1, sizeof(*m));
    if (!m) return es_fail(ES_E_NOMEM, "%s: out of memory", path);
    const size_t log_mark = es_log_hold();
    m->vocab_only = (flags & ES_OPEN_VOCAB_ONLY) != 0;
    es_status st;
    if ((st = es_gguf_open(path, &m->gguf)) != ES_OK) {
        explain_truncated_pack(path);
        goto fail;
    }
    if ((st = read_arch(m)) != ES_OK) goto fail;
    if ((st = es_tok_create(m->gguf, &m->tok)) != ES_OK) {
        st = name_file(st, path);
        goto fail;
    }
    m->hp.n_vocab = es_tok_n_vocab(m->tok);
    if (!m->vocab_only) {
        if ((st = es_hparams_read(m)) != ES_OK) goto fail;
        m->is_pack = es_pack_is_pack(m->gguf);
        if ((st = bind_tensors(m)) != ES_OK) goto fail;
    }
    es_log_release(log_mark, 1);
    *out = m;
    return ES_OK;
fail:
    es_log_release(log_mark, 0);
    es_model_close(m);
    return st;
}

void es_model_close(es_model *m)
{
    if (!m) return;
    if (m->layers) {
        for (int il = 0; il < m->hp.n_layer; il++) {
            const es_layer *L = &m->layers[il];
            const es_tensor *ts[ES_LAYER_N_RESIDENT];
            es_layer_resident(L, ts);
            for (int i = 0; i < ES_LAYER_N_RESIDENT; i++) free_tensor(ts[i]);
            free_tensor(&L->gate_exps);
            free_tensor(&L->up_exps);
            free_tensor(&L->down_exps);
        }
        free(m->layers);
    }
    free_tensor(&m->tok_embd);
    free_tensor(&m->output_norm);
    free_tensor(&m->output_norm_b);
    free_tensor(&m->output_b);
    free_tensor(&m->output);
    free(m->rope_factors);
    free(m->rope_factors_long);
    es_tok_destroy(m->tok);
    es_gguf_close(m->gguf);
    free(m);
}

size_t es_model_expert_bytes(const es_model *m, int il)
{
    const es_layer *L = &m->layers[il]; /* a dense layer's expert tensors are empty: 0 */
    const int64_t ne = m->hp.n_expert;
    return (L->gate_exps.nbytes + L->up_exps.nbytes + L->down_exps.nbytes) / (size_t)ne;
}

const char *es_model_arch(const es_model *m) { return m->arch[0] ? m->arch : "(none)"; }
int es_model_n_vocab(const es_model *m) { return m->hp.n_vocab; }
int es_model_n_ctx(const es_model *m) { return m->hp.n_ctx; }
int es_model_add_bos(const es_model *m) { return es_tok_add_bos(m->tok); }
int32_t es_model_bos(const es_model *m) { return es_tok_bos(m->tok); }
int32_t es_model_eos(const es_model *m) { return es_tok_eos(m->tok); }

const char *es_token_piece(const es_model *m, int32_t id, size_t *len_out)
{
    return es_tok_piece(m->tok, id, len_out);
}

es_status es_tokenize(const es_model *m, const char *text, size_t len, int add_special,
                      int parse_special, int32_t *ids, size_t cap, size_t *n_out)
{
    int32_t *all = NULL;
    size_t n = 0;
    ES_TRY(es_tok_encode(m->tok, text, len, add_special != 0, parse_special != 0, &all, &n));
    *n_out = n;
    memcpy(ids, all, es_min_size(n, cap) * sizeof(int32_t));
    free(all);
    if (n > cap) return es_fail(ES_E_SHORT_BUFFER, "token buffer too small (%zu < %zu)", cap, n);
    return ES_OK;
}
