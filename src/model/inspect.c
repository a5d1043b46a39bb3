/* What `estream info` shows, as data (include/estream.h, "file inspection"): a GGUF file's
 * header, a few metadata strings, its tensor index and, for a pack, the records of each sparse
 * layer; an open model's architecture and hyperparameters.
 *
 * DESIGN
 * - A file description owns a copy of every string it has (GGUF strings are views into a mapping
 *   that es_file_describe() closes before it returns, and they are not NUL-terminated), so it
 *   outlives the file and the model it came from. Weight type names are the static names of
 *   quant/qtypes.c and are not copied.
 * - Nothing is computed and no weight is read: the header and the index were validated when the
 *   file was opened (gguf/), and the pack's keys are validated here by pack/'s reader, whose
 *   message is kept where a layer or the pack-wide keys fail. A pack that does not validate is
 *   described, not refused: the CLI shows what is wrong and what is there.
 * - It lives on the model floor because es_model_describe() reads the loader's hyperparameters
 *   and family; the file part alone needs only gguf/, quant/ and pack/.
 */
#include "model/model.h"

#include "core/util.h"
#include "pack/pack.h"
#include "quant/tiles.h"

#include <stdlib.h>
#include <string.h>

/* A NUL-terminated copy of a GGUF string view; *ok = false when out of memory. */
static char *copy_str(es_str s, bool *ok)
{
    char *c = malloc(s.len + 1);
    if (!c) {
        *ok = false;
        return NULL;
    }
    memcpy(c, s.ptr, s.len);
    c[s.len] = 0;
    return c;
}

/* The string value of key, copied; NULL when the key is absent or not a string. */
static char *meta_str(const es_gguf *g, const char *key, bool *ok)
{
    es_str s;
    return es_gguf_get_str(g, key, &s) ? copy_str(s, ok) : NULL;
}

/* Layers of a pack: one past the highest N of any tensor named blk.N.* */
static int pack_n_layer(const es_gguf *g)
{
    int n_layer = 0;
    for (int64_t i = 0; i < es_gguf_n_tensors(g); i++) {
        const es_str n = es_gguf_tensor_at(g, i)->name;
        long il = 0;
        size_t k = 4;
        if (n.len < 6 || memcmp(n.ptr, "blk.", 4) != 0) continue;
        while (k < n.len && k < 10 && n.ptr[k] >= '0' && n.ptr[k] <= '9')
            il = il * 10 + (n.ptr[k++] - '0');
        if (k > 4 && k < n.len && n.ptr[k] == '.' && il + 1 > n_layer) n_layer = (int)il + 1;
    }
    return n_layer;
}

/* The pack part of d: the pack-wide keys, then every layer that has records. */
static void describe_pack(const es_gguf *g, es_file_desc *d, bool *ok)
{
    es_pack_header h;
    if (es_pack_header_get(g, &h) != ES_OK) {
        d->pack_error = strdup(es_last_error());
        *ok = d->pack_error != NULL;
        return;
    }
    d->pack_version = h.version;
    d->pack_layout = copy_str(h.layout, ok);
    d->pack_source = copy_str(h.source, ok);
    d->pack_source_bytes = h.source_bytes;
    const int n_layer = pack_n_layer(g);
    d->pack_layers = calloc((size_t)(n_layer > 0 ? n_layer : 1), sizeof(es_file_pack_layer));
    if (!d->pack_layers) {
        *ok = false;
        return;
    }
    for (int il = 0; il < n_layer && *ok; il++) {
        if (!es_pack_has_layer(g, il)) continue; /* a dense layer */
        es_file_pack_layer *o = &d->pack_layers[d->n_pack_layers++];
        o->layer = il;
        es_pack_layer l;
        if (es_pack_layer_info(g, il, &l) != ES_OK) {
            o->error = strdup(es_last_error());
            *ok = o->error != NULL;
            continue;
        }
        o->n_records = l.n_expert;
        o->record_bytes = l.record_bytes;
        o->file_offset = l.file_offset;
        for (int i = 0; i < 3; i++) {
            o->types[i] = es_qtype_name(l.types[i]);
            o->offsets[i] = l.offsets[i];
            o->tiles[i] = l.layouts[i] == ES_LAYOUT_TILES;
        }
    }
}

/* Fills a new description of the open file g. ES_E_NOMEM. */
static es_status describe(const es_gguf *g, es_file_desc **out)
{
    *out = NULL;
    es_file_desc *d = calloc(1, sizeof(*d));
    if (!d) return es_fail(ES_E_NOMEM, "out of memory");
    bool ok = true;
    d->gguf_version = es_gguf_version(g);
    d->n_kv = es_gguf_n_kv(g);
    d->n_tensors = es_gguf_n_tensors(g);
    d->file_bytes = es_gguf_files_size(g);
    d->n_files = es_gguf_n_files(g);
    d->name = meta_str(g, "general.name", &ok);
    d->arch = meta_str(g, "general.architecture", &ok);
    d->tok_model = meta_str(g, "tokenizer.ggml.model", &ok);
    d->tok_pre = meta_str(g, "tokenizer.ggml.pre", &ok);
    d->tensors = calloc((size_t)(d->n_tensors > 0 ? d->n_tensors : 1), sizeof(es_file_tensor));
    if (!d->tensors) ok = false;
    for (int64_t i = 0; ok && i < d->n_tensors; i++) {
        const es_gguf_tensor *t = es_gguf_tensor_at(g, i);
        es_file_tensor *o = &d->tensors[i];
        o->name = copy_str(t->name, &ok);
        o->type = es_qtype_name(t->type);
        o->n_dims = (int)t->n_dims;
        for (int k = 0; k < 4; k++)
            o->ne[k] = k < ES_GGUF_MAX_DIMS ? t->ne[k] : 1;
        o->bytes = t->nbytes;
    }
    d->is_pack = es_pack_is_pack(g);
    if (ok && d->is_pack) describe_pack(g, d, &ok);
    if (!ok) {
        es_file_desc_destroy(d);
        return es_fail(ES_E_NOMEM, "out of memory describing %s", es_gguf_path(g));
    }
    *out = d;
    return ES_OK;
}

es_status es_file_describe(const char *path, es_file_desc **out)
{
    *out = NULL;
    es_gguf *g = NULL;
    ES_TRY(es_gguf_open(path, &g));
    const es_status st = describe(g, out);
    es_gguf_close(g);
    return st;
}

es_status es_model_describe_file(const es_model *m, es_file_desc **out)
{
    return describe(m->gguf, out);
}

void es_file_desc_destroy(es_file_desc *d)
{
    if (!d) return;
    /* the strings are this description's copies (type names excepted: static) */
    free((char *)d->name);
    free((char *)d->arch);
    free((char *)d->tok_model);
    free((char *)d->tok_pre);
    for (int64_t i = 0; d->tensors && i < d->n_tensors; i++)
        free((char *)d->tensors[i].name);
    free(d->tensors);
    free((char *)d->pack_error);
    free((char *)d->pack_layout);
    free((char *)d->pack_source);
    for (int i = 0; i < d->n_pack_layers; i++)
        free((char *)d->pack_layers[i].error);
    free(d->pack_layers);
    free(d);
}

void es_model_describe(const es_model *m, es_model_desc *out)
{
    memset(out, 0, sizeof(*out));
    const es_hparams *hp = &m->hp;
    out->arch = es_model_arch(m);
    out->family_names = m->family ? m->family->model_names : NULL;
    out->n_vocab = hp->n_vocab;
    out->vocab_only = m->vocab_only;
    if (m->vocab_only) return;
    out->n_ctx = hp->n_ctx;
    out->n_embd = hp->n_embd;
    out->n_layer = hp->n_layer;
    out->n_head = hp->n_head;
    out->n_head_kv = hp->n_head_kv;
    out->n_embd_head = hp->n_embd_head;
    out->n_embd_head_v = hp->n_embd_head_v;
    out->n_rot = hp->n_rot;
    out->n_expert = hp->n_expert;
    out->n_expert_used = hp->n_expert_used;
    out->n_ff_exp = hp->n_ff_exp;
    out->gating_sigmoid = hp->router.gating == ES_GATING_SIGMOID;
    out->topk_renorm = hp->router.renorm;
    out->n_expert_shared = hp->n_expert_shared;
    out->n_ff_shexp = hp->n_ff_shexp;
    out->n_layer_dense_lead = hp->n_layer_dense_lead;
    out->n_ff = hp->n_ff;
    out->n_conv_layers = hp->n_conv_layers;
    out->n_conv_taps = hp->n_conv_taps;
    out->n_lora_kv = hp->n_lora_kv;
    out->mla_split = hp->mla_split;
    out->rope_freq_base = hp->rope_freq_base;
    out->rope_freq_scale = hp->rope_freq_scale;
    out->rope_ext_factor = hp->rope_ext_factor;
    out->attn_scale = hp->attn_scale;
    out->rms_eps = hp->rms_eps;
    int il = 0; /* the first MoE layer */
    while (il < hp->n_layer && !es_hparams_layer_has_experts(hp, il)) il++;
    out->expert_layer = il;
    if (il >= hp->n_layer) return;
    const es_layer *L = &m->layers[il];
    out->expert_bytes = es_model_expert_bytes(m, il);
    out->expert_types[0] = es_qtype_name(L->gate_exps.type);
    out->expert_types[1] = es_qtype_name(L->up_exps.type);
    out->expert_types[2] = es_qtype_name(L->down_exps.type);
}

void es_model_describe_details(const es_model *m, es_model_details *out)
{
    memset(out, 0, sizeof(*out));
    if (m->vocab_only) return;
    const es_hparams *hp = &m->hp;
    const es_router *r = &hp->router;
    out->gating = r->gating == ES_GATING_SIGMOID          ? "sigmoid"
                  : r->gating == ES_GATING_SOFTMAX_WEIGHT ? "softmax over the chosen"
                                                          : "softmax";
    out->by_logit = r->by_logit;
    out->router_scale = r->scale;
    out->n_group = r->n_group > 1 ? r->n_group : 0;
    out->n_group_used = r->n_group > 1 ? r->n_group_used : 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const es_layer *L = &m->layers[il];
        if (es_layer_is_moe(L) && !out->selection_bias && !out->router_bias) {
            out->selection_bias = L->exp_probs_b.data != NULL;
            out->router_bias = L->gate_inp_b.data != NULL;
        }
        out->n_layer_no_rope += L->no_rope;
        if (L->wq.data && L->wk.data && !out->fused_qkv && !out->qkv_bias) {
            out->fused_qkv = strstr(L->wq.name, "attn_qkv") != NULL;
            out->qkv_bias = L->bq.data || L->bk.data || L->bv.data;
        }
    }
    for (int il = 0; il < hp->n_layer && !out->qk_norm; il++) /* weighted norms only */
        if (m->layers[il].q_norm.data)
            out->qk_norm = m->family->qk_norm == ES_QK_NORM_HEAD ? "per head" : "whole projections";
    out->qk_norm_after_rope = m->family->qk_norm_after_rope;
    out->qk_norm_unweighted = hp->kq_norm_rope;
    out->nope_temperature = m->family->irope;
    out->mla = m->family->mla;
    if (m->family->swa || m->family->irope) {
        out->n_swa = hp->n_swa;
        out->swa_period = hp->swa_period;
        out->swa_chunked = hp->swa_chunked;
    }
    out->n_layer_nextn = hp->n_layer_nextn;
    if (hp->rope_imrope) memcpy(out->rope_sections, hp->rope_sections, sizeof(out->rope_sections));
    out->norm_bias = m->output_norm_b.data != NULL;
    out->output_bias = m->output_b.data != NULL;
    out->q_prescale = hp->q_scale != 0.0f;
    if (hp->rope_long_short) {
        out->longrope_ctx = hp->rope_orig_ctx;
        out->longrope_short = hp->rope_factors != NULL;
        out->longrope_long = hp->rope_factors_long != NULL;
    }
    out->rope_cs_scale = hp->rope_cs_scale;
    if (m->family->granite_scales) {
        out->embd_scale = hp->embd_scale;
        out->resid_scale = hp->resid_scale;
        out->logit_mul = hp->logit_mul;
    }
}
