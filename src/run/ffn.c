/*
 * The FFN of the fast forward pass: a dense SwiGLU FFN (dense layers, and the shared experts of a
 * MoE layer), the router (gate logits plus the layer's router bias, the family's top-k, routes
 * sorted by expert), the mixture of experts through the expert plan (with the layer's expert
 * biases and the family's GLU as the plan's extras), and the all-resident expert provider it
 * uses when the session streams nothing.
 *
 * DESIGN: a dense FFN runs FFN_ROWS token rows at a time, which bounds its gate and up buffers
 * whatever the prompt length. The routes are stored per token by the route job, then counting-
 * sorted by expert (stable: tokens stay increasing within an expert) so each expert's routes are
 * contiguous; the mixture of experts then walks the provider's groups of experts in increasing
 * id and hands each group's routes to the plan in invocations of at most its capacity. The
 * route counts of the last prefill are kept for es_fast_route_counts(). The plans (one per
 * expert weight-type mix) are made by fast.c's reserve, through es_ffn_plan.
 */
#include "run/forward_impl.h"

#include <math.h>
#include <string.h>

es_plan *es_ffn_plan(es_fast *f, const es_model *m, const es_layer *L, es_status *st)
{
    es_expert_shape sh = {m->hp.n_embd, m->hp.n_ff_exp, L->gate_exps.type, L->up_exps.type,
                          L->down_exps.type, m->hp.n_expert,
                          {L->gate_exps.layout, L->up_exps.layout, L->down_exps.layout}};
    for (int i = 0; i < f->n_plans; i++) /* keyed on the whole expert shape */
        if (!memcmp(&f->plans[i].shape, &sh, sizeof(sh))) return f->plans[i].plan;
    if (f->n_plans == MAX_PLANS) {
        *st = es_fail(ES_E_UNSUPPORTED, "too many expert weight-type mixes");
        return NULL;
    }
    es_plan *p = NULL;
    if ((*st = es_plan_create(&sh, f->plan_capacity, (int)f->t_cap, f->n_slots, f->pool, f->kern,
                              &p)))
        return NULL;
    f->plans[f->n_plans++] = (es_plan_entry){sh, f->n_slots, p};
    return p;
}

/* ---- the all-resident provider ---- */

/* One group of every expert, each in the slot of its id. */
static es_status resident_acquire(es_expert_provider *p, int il, int e0, const int32_t **phi,
                                  const es_expert_slot **slots)
{
    es_fast *f = (es_fast *)((char *)p - offsetof(es_fast, resident));
    (void)e0;
    *phi = f->phi;
    *slots = f->slots + (size_t)il * (size_t)f->n_expert;
    return ES_OK;
}
static void resident_release(es_expert_provider *p, int il, int e0) { (void)p, (void)il, (void)e0; }

es_expert_provider es_ffn_resident(const es_hparams *hp)
{
    /* the callbacks find their es_fast from the provider's address: it must be f->resident */
    return (es_expert_provider){.group = hp->n_expert, .n_slots = hp->n_expert,
                                .acquire = resident_acquire, .release = resident_release};
}

/* ---- the dense FFN ---- */

/* SwiGLU over n token rows of the FFN width ff: f->ffn_g = silu(f->ffn_g) * f->ffn_u. */
typedef struct swiglu_job { es_fast *f; int64_t ff, n; } swiglu_job;

static void swiglu_worker(void *arg, int ith, int nth)
{
    const swiglu_job *j = arg;
    es_fast *f = j->f;
    const int64_t ff = j->ff;
    int64_t r0, r1;
    if (!es_row_span(0, j->n, ith, nth, &r0, &r1)) return;
    for (int64_t t = r0; t < r1; t++) f->kern->swiglu(f->ffn_g + t * ff, f->ffn_u + t * ff, ff);
}

/* out = down(silu(gate h) * up h), FFN_ROWS token rows at a time. */
void es_ffn_dense(es_fast *f, const es_model *m, const es_tensor *gate, const es_tensor *up,
                  const es_tensor *down, int64_t T, float *out)
{
    const int64_t d = m->hp.n_embd, ff = gate->ne[1];
    es_fast_gemm_phase(f, ES_PHASE_DENSE_FFN);
    for (int64_t t0 = 0; t0 < T; t0 += FFN_ROWS) {
        const int64_t n = T - t0 < FFN_ROWS ? T - t0 : FFN_ROWS;
        es_fast_prepare(f, f->h + t0 * d, d, gate->type, 0, n);
        if (gate->type == up->type) {
            es_gemm_task gu[2] = {{gate, f->act, f->ffn_g, ff, n}, {up, f->act, f->ffn_u, ff, n}};
            es_fast_gemms(f, gu, 2);
        } else {
            es_gemm_task g = {gate, f->act, f->ffn_g, ff, n};
            es_fast_gemms(f, &g, 1);
            es_fast_prepare(f, f->h + t0 * d, d, up->type, 0, n);
            es_gemm_task u = {up, f->act, f->ffn_u, ff, n};
            es_fast_gemms(f, &u, 1);
        }
        es_fast_phase(f, ES_PHASE_SWIGLU);
        swiglu_job sw = {f, ff, n};
        es_pool_run(f->pool, swiglu_worker, &sw);
        es_fast_prepare(f, f->ffn_g, ff, down->type, 0, n);
        es_gemm_task dn = {down, f->act, out + t0 * d, d, n};
        es_fast_gemms(f, &dn, 1);
    }
}

/* ---- the shared expert's gate (qwen2moe) ---- */

typedef struct shexp_gate_job { es_fast *f; const float *w; float *out; int64_t d, T; } shexp_gate_job;

static void shexp_gate_worker(void *arg, int ith, int nth)
{
    const shexp_gate_job *j = arg;
    int64_t r0, r1;
    if (!es_row_span(0, j->T, ith, nth, &r0, &r1)) return;
    for (int64_t t = r0; t < r1; t++) {
        const float *h = j->f->h + t * j->d;
        float s = 0.0f; /* in increasing k, as the reference sums it */
        for (int64_t k = 0; k < j->d; k++) s += h[k] * j->w[k];
        const float g = 1.0f / (1.0f + expf(-s));
        for (int64_t k = 0; k < j->d; k++) j->out[t * j->d + k] *= g;
    }
}

void es_ffn_shexp_gate(es_fast *f, const es_model *m, const es_layer *L, float *out, int64_t T)
{
    es_fast_phase(f, ES_PHASE_NORM);
    shexp_gate_job j = {f, L->gate_inp_shexp.data, out, m->hp.n_embd, T};
    es_pool_run(f->pool, shexp_gate_worker, &j);
}

/* ---- the router ---- */

/* es_layer_rows job: each token's experts and weights from its logits in f->router (the
 * family's selection, es_arch_route), stored per token into f->routes; where the weight goes
 * before the expert (weight_before_ffn), the weighted input row into f->tmp and a weight of 1
 * (the output times 1 is the output exactly). */
static void route_worker(void *arg, int ith, int nth)
{
    const es_layer_rows *j = arg;
    es_fast *f = j->f;
    const es_hparams *hp = &j->m->hp;
    float probs[4096], weight[4096];
    int chosen[4096];
    const int E = hp->n_expert, K = hp->n_expert_used;
    int64_t r0, r1;
    if (!es_row_span(0, j->T, ith, nth, &r0, &r1)) return;
    const float *bias = j->L->gate_inp_b.data; /* the router's bias (gpt-oss), or NULL */
    for (int64_t t = r0; t < r1; t++) {
        float *logits = f->router + t * E;
        for (int e = 0; bias && e < E; e++) logits[e] += bias[e];
        es_arch_route(&hp->router, logits, E, K, j->L->exp_probs_b.data, probs, chosen, weight);
        if (j->m->family->weight_before_ffn) { /* the one expert's input is h w, its output
                                               * taken as is (hparams.c: K is 1) */
            const int64_t d = hp->n_embd;
            for (int64_t i = 0; i < d; i++) f->tmp[t * d + i] = f->h[t * d + i] * weight[0];
            weight[0] = 1.0f;
        }
        for (int jj = 0; jj < K; jj++) {
            /* store per token; sorted by expert afterwards */
            es_route *r = &f->routes[t * K + jj];
            r->token = (int32_t)t;
            r->expert = chosen[jj];
            r->weight = weight[jj];
        }
    }
}

/* Counting sort of the routes by expert (stable: tokens stay increasing within an expert);
 * keeps layer il's counts for es_fast_route_counts(). */
static void sort_routes(es_fast *f, const es_hparams *hp, int64_t T, int il)
{
    const int E = hp->n_expert;
    const int64_t R = T * hp->n_expert_used;
    int64_t *start = f->route_start;
    memset(start, 0, sizeof(int64_t) * ((size_t)E + 1));
    for (int64_t i = 0; i < R; i++) start[f->routes[i].expert + 1]++;
    memcpy(f->route_counts + (size_t)il * (size_t)E, start + 1, sizeof(int64_t) * (size_t)E);
    for (int e = 0; e < E; e++) start[e + 1] += start[e];
    for (int64_t i = 0; i < R; i++) f->routes_tmp[start[f->routes[i].expert]++] = f->routes[i];
    memcpy(f->routes, f->routes_tmp, sizeof(es_route) * (size_t)R);
}

void es_ffn_router_logits(es_fast *f, const es_model *m, const es_layer *L, const float *in,
                          int64_t T)
{
    const es_hparams *hp = &m->hp;
    es_fast_gemm_phase(f, ES_PHASE_ROUTER);
    es_fast_prepare(f, in, hp->n_embd, L->gate_inp.type, 0, T);
    es_gemm_task rt = {&L->gate_inp, f->act, f->router, hp->n_expert, T};
    es_fast_gemms(f, &rt, 1);
}

void es_ffn_route(es_fast *f, const es_model *m, const es_layer *L, int il, int64_t T)
{
    const es_hparams *hp = &m->hp;
    if (!m->family->router_pre_attn) es_ffn_router_logits(f, m, L, f->h, T);
    es_fast_phase(f, ES_PHASE_ROUTER);
    es_fast_layer_rows(f, m, L, T, route_worker);
    sort_routes(f, hp, T, il);
}

/* ---- the mixture of experts ---- */

/* Groups of the provider's G experts in increasing id, each group's routes (contiguous: the
 * routes are sorted by expert) in invocations of at most the plan's capacity. */
es_status es_ffn_moe(es_fast *f, const es_model *m, es_expert_provider *prov, int il, int64_t T)
{
    const es_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd;
    const int E = hp->n_expert;
    es_status st = ES_OK;
    es_plan *plan = es_ffn_plan(f, m, &m->layers[il], &st);
    ES_ASSERT(plan); /* made for every layer's shape by es_fast_reserve */
    const int64_t *counts = f->route_counts + (size_t)il * (size_t)E;
    es_fast_phase(f, ES_PHASE_EXPERT_WAIT);
    if (prov->layer_routed) ES_TRY(prov->layer_routed(prov, il, counts));
    const es_layer *L = &m->layers[il];
    const es_glu glu = m->family->glu_oai    ? ES_GLU_OAI
                       : m->family->glu_relu ? ES_GLU_RELU
                                             : ES_GLU_SWIGLU;
    const es_expert_extras extras = {glu,
                                     L->gate_exps_b.data, L->up_exps_b.data, L->down_exps_b.data};
    es_plan_set_extras(plan, &extras);
    es_fast_phase(f, ES_PHASE_ACT_QUANT);
    es_plan_set_input(plan, m->family->weight_before_ffn ? f->tmp : f->h, d, T);
    es_fast_phase(f, ES_PHASE_OTHER);
    memset(f->moe, 0, fbytes(T, d));
    const int64_t cap = es_plan_capacity(plan);
    const int G = prov->group;
    int64_t r_begin = 0;
    for (int e0 = 0; e0 < E; e0 += G) {
        const int e1 = e0 + G < E ? e0 + G : E;
        int64_t n = 0;
        for (int e = e0; e < e1; e++) n += counts[e];
        if (n == 0) continue;
        const int32_t *phi;
        const es_expert_slot *slots;
        es_fast_phase(f, ES_PHASE_EXPERT_WAIT);
        ES_TRY(prov->acquire(prov, il, e0, &phi, &slots));
        es_fast_phase(f, ES_PHASE_COUNT); /* split by es_fast_prof_end */
        for (int64_t r0 = r_begin; r0 < r_begin + n && st == ES_OK; r0 += cap) {
            const int nr = (int)(r_begin + n - r0 < cap ? r_begin + n - r0 : cap);
            st = es_plan_invoke(plan, f->routes + r0, nr, phi, slots, f->moe, d);
        }
        es_fast_phase(f, ES_PHASE_EXPERT_WAIT);
        prov->release(prov, il, e0);
        ES_TRY(st);
        r_begin += n;
    }
    return ES_OK;
}
