/*
 * The fast path's state (struct es_fast, forward_impl.h): its lifetime (create, reserve,
 * destroy), the phase profile of a request, and the accessors. The pool jobs the blocks share are
 * pool_jobs.c's, the layer loop is forward.c's.
 *
 * DESIGN: buffers are sized for the prompt and allocated once per prefill call (huge pages);
 * layers reuse them. This file allocates and frees every buffer, side by side (STYLE §11); the
 * block files only compute into them.
 */
#include "run/forward_impl.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
    PLAN_CAPACITY = 16384, /* default routes per expert-plan invocation; more are split */
};

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

/* f->q's row: the queries, or with q LoRA first h Wq_a (mla.c), whichever is wider */
static int64_t q_width(const es_hparams *hp)
{
    return hp->n_embd_q > hp->n_lora_q ? hp->n_embd_q : hp->n_lora_q;
}

static void free_buffers(es_fast *f, const es_hparams *hp)
{
    const int64_t T = f->t_cap, d = hp->n_embd, dq = q_width(hp), dkv = hp->n_embd_kv;
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
    if (f->embd_fd >= 0) close(f->embd_fd);
    free(f->embd_rows);
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
    int64_t w = es_hparams_has_dense_ffn(&m->hp) ? m->hp.n_ff : 0;
    return m->hp.n_ff_shexp > w ? m->hp.n_ff_shexp : w;
}

/* Activation buffers and expert plans for batches of up to T tokens in n_seq sequences (plans
 * are sized to T, not to the model's context, which may be far longer than any prompt). */
static es_status alloc_buffers(es_fast *f, const es_model *m, int64_t T, int n_seq)
{
    const es_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd, dq = q_width(hp), dkv = hp->n_embd_kv;
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
    f->embd_fd = -1;
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

const float *es_fast_hidden(const es_fast *f) { return f->h; }

es_status es_fast_embed_from_file(es_fast *f, const es_model *m, int fd, uint64_t offset)
{
    const size_t rb = m->tok_embd.row_bytes;
    uint8_t *rows = malloc((size_t)f->n_threads * rb);
    if (!rows) {
        close(fd);
        return es_fail(ES_E_NOMEM, "out of memory");
    }
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM); /* a row each: no read-ahead */
    if (f->embd_fd >= 0) close(f->embd_fd);
    free(f->embd_rows);
    f->embd_fd = fd;
    f->embd_off = offset;
    f->embd_rows = rows;
    f->embd_row_bytes = rb;
    return ES_OK;
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

int es_fast_n_threads(const es_fast *f) { return f->n_threads; }

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
