/*
 * The phase profile (es_session_profile): its times add up to the request's, and its work counts
 * equal the ones computed here from the model's shapes and the routes the request took
 * (es_session_route_counts), for a single prefill and a batch, resident and streamed.
 */
#include "t.h"

#include "estream.h"
#include "model/model.h"
#include "quant/qtypes.h"

#include <math.h>
#include <string.h>

/* |a - b| <= eps (cmocka 1.1 has no double assertion) */
#define assert_near(a, b, eps) assert_true(fabs((double)(a) - (double)(b)) <= (eps))

/* Bytes of a 2-D weight, and 2 x its multiply-adds over n rows. */
static double wbytes(const es_tensor *w)
{
    return (double)es_qtype_row_bytes(w->type, w->ne[0]) * (double)w->ne[1];
}
static double wops(const es_tensor *w, double n) { return 2.0 * n * (double)w->ne[0] * (double)w->ne[1]; }

/* The operator's blocks for one layer's routes: experts in groups of G (the provider's), each
 * group's routes (sorted by expert) in invocations of at most cap, each expert's part of an
 * invocation in blocks of at most 512 rows. */
static int64_t count_blocks(const int64_t *counts, int E, int G, int64_t cap)
{
    int64_t blocks = 0;
    for (int e0 = 0; e0 < E; e0 += G) {
        int64_t start = 0; /* route offset of expert e within the group */
        for (int e = e0; e < e0 + G && e < E; start += counts[e], e++)
            for (int64_t r0 = 0; r0 < start + counts[e]; r0 += cap) {
                const int64_t a = r0 > start ? r0 : start;
                const int64_t b = r0 + cap < start + counts[e] ? r0 + cap : start + counts[e];
                if (b > a) blocks += (b - a + 511) / 512;
            }
    }
    return blocks;
}

/* Checks p against the model's shapes for a request of T rows in sequences of lengths len[];
 * G experts per group and cap routes per invocation as the session runs them. */
static void check_profile(es_session *s, const es_model *m, const es_phase_profile *p, int64_t T,
                          const int64_t *len, int n_seq, int G, int64_t cap)
{
    const es_hparams *hp = &m->hp;
    es_run_stats st;
    es_session_stats(s, &st);
    double sum = 0;
    for (int ph = 0; ph < ES_PHASE_COUNT; ph++) {
        assert_true(p->phase_seconds[ph] >= 0);
        sum += p->phase_seconds[ph];
    }
    assert_true(fabs(sum - p->seconds) <= 1e-9 * (1 + p->seconds));
    assert_true(p->seconds > 0 && p->seconds <= st.seconds + 1e-6);
    assert_int_equal(p->tokens, T);
    assert_true(p->phase_seconds[ES_PHASE_EXPERT_GATE_UP] > 0);
    assert_true(p->phase_seconds[ES_PHASE_ATTN_PROJ] > 0);

    /* the products: attention projections, router, experts (from the routes), head */
    double proj_i = 0, proj_b = 0, router_f = 0, router_i = 0, gu = 0, dn = 0, gu_b = 0, dn_b = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const es_layer *L = &m->layers[il];
        const es_tensor *ws[4] = {&L->wq, &L->wk, &L->wv, &L->wo};
        for (int i = 0; i < 4; i++) {
            proj_i += wops(ws[i], (double)T);
            proj_b += wbytes(ws[i]);
        }
        if (es_qtype_is_float(L->gate_inp.type))
            router_f += wops(&L->gate_inp, (double)T);
        else
            router_i += wops(&L->gate_inp, (double)T);
        int64_t counts[512];
        assert_int_equal(es_session_route_counts(s, il, counts, 512), ES_OK);
        int64_t routes = 0;
        for (int e = 0; e < hp->n_expert; e++) routes += counts[e];
        const int64_t blocks = count_blocks(counts, hp->n_expert, G, cap);
        assert_int_equal(routes, T * hp->n_expert_used);
        gu += 2 * wops(&(es_tensor){.type = L->gate_exps.type, .ne = {hp->n_embd, hp->n_ff_exp}},
                       (double)routes);
        dn += wops(&(es_tensor){.type = L->down_exps.type, .ne = {hp->n_ff_exp, hp->n_embd}},
                   (double)routes);
        gu_b += 2.0 * (double)blocks * (double)hp->n_ff_exp *
                (double)es_qtype_row_bytes(L->gate_exps.type, hp->n_embd);
        dn_b += (double)blocks * (double)hp->n_embd *
                (double)es_qtype_row_bytes(L->down_exps.type, hp->n_ff_exp);
    }
    /* the fixture's weights are all quantized but the router's (F32) */
    assert_true(!es_qtype_is_float(m->layers[0].wq.type));
    assert_near(p->int_ops[ES_PHASE_ATTN_PROJ], proj_i, 0.5);
    assert_near(p->weight_bytes[ES_PHASE_ATTN_PROJ], proj_b, 0.5);
    assert_near(p->float_ops[ES_PHASE_ROUTER] + p->int_ops[ES_PHASE_ROUTER],
                        router_f + router_i, 0.5);
    assert_near(p->int_ops[ES_PHASE_EXPERT_GATE_UP], gu, 0.5);
    assert_near(p->int_ops[ES_PHASE_EXPERT_DOWN], dn, 0.5);
    assert_near(p->weight_bytes[ES_PHASE_EXPERT_GATE_UP], gu_b, 0.5);
    assert_near(p->weight_bytes[ES_PHASE_EXPERT_DOWN], dn_b, 0.5);
    /* attention: 2 (dk + dv) multiply-adds per head per causal (query, key) pair */
    double att = 0;
    for (int i = 0; i < n_seq; i++)
        att += 2.0 * hp->n_head * (hp->n_embd_head + hp->n_embd_head_v) * (double)len[i] *
               (double)(len[i] + 1) / 2;
    assert_near(p->float_ops[ES_PHASE_ATTN], att * hp->n_layer, 0.5);
}

static void run_cases(es_session_params sp, int G)
{
    const int64_t cap = sp.plan_capacity ? sp.plan_capacity : 16384;
    es_model *m = NULL;
    assert_int_equal(es_model_open("tests/data/tiny-q4_0.gguf", 0, &m), ES_OK);
    es_session *s = NULL;
    assert_int_equal(es_session_create(m, &sp, &s), ES_OK);
    es_phase_profile p;
    assert_int_equal(es_session_profile(s, &p), ES_E_INVAL); /* nothing has run yet */
    const int nv = es_model_n_vocab(m);
    int32_t ids[100];
    for (int i = 0; i < 100; i++) ids[i] = (i * 7919) % nv;
    float *logits = malloc(sizeof(float) * (size_t)nv);

    assert_int_equal(es_session_prefill(s, ids, 100, 0, logits), ES_OK);
    assert_int_equal(es_session_profile(s, &p), ES_OK);
    const int64_t one[1] = {100};
    check_profile(s, m, &p, 100, one, 1, G, cap);
    assert_near(p.weight_bytes[ES_PHASE_HEAD], wbytes(&m->output), 0.5);

    /* a batch of three sequences: attention is per sequence */
    es_seq seqs[3];
    memset(seqs, 0, sizeof(seqs));
    const int64_t lens[3] = {40, 17, 60};
    float *emb = malloc(sizeof(float) * (size_t)es_model_n_embd(m) * 3);
    for (int i = 0, off = 0; i < 3; off += (int)lens[i], i++) {
        seqs[i].ids = ids + off % 40;
        seqs[i].n_ids = (size_t)lens[i];
        seqs[i].embedding = emb + (size_t)i * (size_t)es_model_n_embd(m);
        seqs[i].pooling = ES_POOLING_MEAN;
    }
    assert_int_equal(es_session_run(s, seqs, 3), ES_OK);
    assert_int_equal(es_session_profile(s, &p), ES_OK);
    check_profile(s, m, &p, 117, lens, 3, G, cap);

    free(emb);
    free(logits);
    es_session_destroy(s);
    es_model_close(m);
}

static void test_profile_resident(void **state)
{
    (void)state;
    es_session_params sp = es_session_default_params();
    sp.n_threads = 2;
    run_cases(sp, 8); /* tiny: 8 experts, one group */
}

static void test_profile_streamed(void **state)
{
    (void)state;
    es_session_params sp = es_session_default_params();
    sp.n_threads = 2;
    sp.groups = 2;
    sp.banks = 2;
    sp.plan_capacity = 64; /* several invocations per layer */
    run_cases(sp, 2);
}

static void test_profile_errors(void **state)
{
    (void)state;
    es_phase_profile p;
    assert_int_equal(es_session_profile(NULL, &p), ES_E_INVAL);
    es_model *m = NULL;
    assert_int_equal(es_model_open("tests/data/tiny-q4_0.gguf", 0, &m), ES_OK);
    es_session_params sp = es_session_default_params();
    sp.reference = 1;
    es_session *s = NULL;
    assert_int_equal(es_session_create(m, &sp, &s), ES_OK);
    int32_t id = 1;
    float *logits = malloc(sizeof(float) * (size_t)es_model_n_vocab(m));
    assert_int_equal(es_session_prefill(s, &id, 1, 0, logits), ES_OK);
    assert_int_equal(es_session_profile(s, &p), ES_E_INVAL); /* the reference path has none */
    free(logits);
    es_session_destroy(s);
    es_model_close(m);
    /* names: all distinct, NULL out of range */
    for (int i = 0; i < ES_PHASE_COUNT; i++) {
        assert_non_null(es_phase_name((es_phase)i));
        for (int j = 0; j < i; j++)
            assert_string_not_equal(es_phase_name((es_phase)i), es_phase_name((es_phase)j));
    }
    assert_null(es_phase_name(ES_PHASE_COUNT));
    assert_null(es_phase_name((es_phase)-1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profile_resident),
        cmocka_unit_test(test_profile_streamed),
        cmocka_unit_test(test_profile_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
