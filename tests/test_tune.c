/*
 * The configurator (src/tune/, src/run/tune_run.c): the max-plus recurrence against completion times worked
 * out by hand, its monotonicity and lower bounds on random profiles, the choice for a budget,
 * the tune file (round trip, damage, another model, another machine), the storage cache, and
 * profiles from a real streamed run on the `small` preset, whose choice a budgeted session
 * then uses with logits bit-identical to the resident run; the public view the CLI reads
 * (es_tune_choose, es_tune_bank_limit, es_tune_describe, es_tune_explain) against the internals.
 */
#include "t.h"
#include "stream/arena.h"

#include "estream.h"
#include "model/model.h"
#include "run/session.h"
#include "stream/pipeline.h"
#include "tune/tune.h"
#include "run/tune_run.h"

/* A profile of 2 sparse layers x 2 groups: N_w = 1 s, X = 2 s, 4 bytes per group, storage
 * 2 bytes/s at every depth (L = 2 s), checksums 0.5 s, tail 0.5 s. */
static void hand_profile(es_tune_profile *p)
{
    assert_int_equal(es_tune_profile_alloc(p, 1, 2, 2), ES_OK);
    p->tail = 0.5;
    for (int w = 0; w < 2; w++) p->ne[w] = 1;
    for (int j = 0; j < 4; j++) {
        p->x[j] = 2;
        p->v[j] = 0.5;
        p->bytes[j] = 4;
        p->routes[j] = 3;
    }
    for (int q = 0; q < ES_TUNE_N_DEPTHS; q++) p->bw[q] = 2;
    p->bank_bytes = 4;
}

static void expect_time(const es_tune_profile *p, int q, int b, double io, es_policy pol,
                        int verify, double want, double want_layer0)
{
    double layers[2];
    const double got = es_tune_predict(p, q, b, io, pol, verify, layers);
    if (!t_near(got, want, 1e-9) || !t_near(layers[0], want_layer0, 1e-9))
        fail_msg("q %d b %d io %g policy %d verify %d: %g (layer 0 %g), want %g (%g)", q, b, io,
                 (int)pol, verify, got, layers[0], want, want_layer0);
}

/* Each case below is docs/design.md §6 evaluated by hand (a_n, d_n, p_n, s_n, f_n per group). */
static void test_recurrence_by_hand(void **state)
{
    (void)state;
    es_tune_profile p;
    hand_profile(&p);
    /* q 1, b 1, early, no checksums: d = 2, 6 | 10, 14; f = 4, 8 | 12, 16; + tail */
    expect_time(&p, 1, 1, 0, ES_POLICY_EARLY, 0, 16.5, 8);
    /* q 2, b 4, early: reads back to back (d 2 4 6 8); f 4 6 | T_ne 7: 9 11 */
    expect_time(&p, 2, 4, 0, ES_POLICY_EARLY, 0, 11.5, 6);
    /* after-routing: layer 0 reads from T_ne = 1 (d 3 5, f 5 7), layer 1 from 8 (d 10 12) */
    expect_time(&p, 2, 4, 0, ES_POLICY_AFTER_ROUTING, 0, 14.5, 7);
    /* on-demand: each read starts when the executor asks (T_ne or the previous f) */
    expect_time(&p, 2, 4, 0, ES_POLICY_ON_DEMAND, 0, 18.5, 9);
    /* checksums in order after each read: p 2.5 4.5 6.5 8.5; f 4.5 6.5 | 9.5 11.5 */
    expect_time(&p, 2, 4, 0, ES_POLICY_EARLY, 1, 12, 6.5);
    /* an io limit of 1 byte/s under the device's 2: L = 4; d 4 8 12 16, f 6 10 | 14 18 */
    expect_time(&p, 2, 4, 1.0, ES_POLICY_EARLY, 0, 18.5, 10);
    /* a limit above the device changes nothing */
    expect_time(&p, 2, 4, 100.0, ES_POLICY_EARLY, 0, 11.5, 6);
    /* a group without routes is neither read nor run: layer 1 is one group (d 6, s 7, f 9) */
    p.routes[2] = 0;
    expect_time(&p, 2, 4, 0, ES_POLICY_EARLY, 0, 9.5, 6);
    assert_int_equal(es_tune_routed_groups(&p), 3);
    es_tune_profile_free(&p);
}

/* More banks or more reads in flight never make the prediction slower; it is never faster than
 * the compute chain or than reading every routed byte at the bandwidth. */
/* A random profile of W sparse layers x K groups of G experts; *chain (the compute alone) and
 * *bytes (what a request reads) for the bounds. */
static void random_profile(t_rng *r, es_tune_profile *p, int G, int W, int K, double *chain,
                           uint64_t *bytes)
{
    assert_int_equal(es_tune_profile_alloc(p, G, W, K), ES_OK);
    *chain = p->tail = (double)(t_next(r) % 100) / 100;
    *bytes = 0;
    for (int w = 0; w < W; w++) *chain += p->ne[w] = (double)(t_next(r) % 100) / 50;
    for (int j = 0; j < W * K; j++) {
        p->routes[j] = t_next(r) % 4 ? 1 + (int64_t)(t_next(r) % 9) : 0;
        p->bytes[j] = 1 + t_next(r) % 1000;
        p->x[j] = (double)(t_next(r) % 100) / 40;
        p->v[j] = (double)(t_next(r) % 10) / 40;
        if (p->routes[j]) {
            *chain += p->x[j];
            *bytes += p->bytes[j];
        }
    }
    double bw = 100 + (double)(t_next(r) % 400);
    for (int q = 0; q < ES_TUNE_N_DEPTHS; q++) p->bw[q] = bw *= 1.2;
    p->bank_bytes = (uint64_t)G * 1000;
}

static void test_recurrence_properties(void **state)
{
    (void)state;
    t_rng r = {7};
    for (int trial = 0; trial < 200; trial++) {
        es_tune_profile p;
        const int W = 1 + (int)(t_next(&r) % 4), K = 1 + (int)(t_next(&r) % 6);
        double chain;
        uint64_t bytes;
        random_profile(&r, &p, 2, W, K, &chain, &bytes);
        const es_policy pols[] = {ES_POLICY_EARLY, ES_POLICY_AFTER_ROUTING, ES_POLICY_ON_DEMAND};
        for (size_t k = 0; k < T_LEN(pols); k++)
            for (int q = 1; q <= 8; q *= 2) {
                double prev = INFINITY;
                for (int b = 1; b <= W * K + 2; b++) {
                    const double t = es_tune_predict(&p, q, b, 0, pols[k], trial & 1, NULL);
                    if (!(t <= prev + 1e-9)) fail_msg("trial %d: b %d slower than b - 1", trial, b);
                    if (!(t >= chain - 1e-9)) fail_msg("trial %d: under the compute chain", trial);
                    const double bound = (double)bytes / es_tune_bandwidth(&p, q < b ? q : b, 0);
                    if (!(t >= bound - 1e-9)) fail_msg("trial %d: under the read bound", trial);
                    prev = t;
                }
                if (q > 1) { /* deeper queues with many banks: never slower */
                    const double deep = es_tune_predict(&p, q, W * K, 0, pols[k], 0, NULL);
                    const double shallow = es_tune_predict(&p, q / 2, W * K, 0, pols[k], 0, NULL);
                    assert_true(deep <= shallow + 1e-9);
                }
            }
        es_tune_profile_free(&p);
    }
}

/* Two candidate sizes: G 1 (cheap banks, slow when reads are serial) and G 2. */
static void two_profiles(es_tune *t)
{
    memset(t, 0, sizeof(*t));
    t->q0 = 2;
    t->n_profiles = 2;
    hand_profile(&t->prof[0]); /* G 1, bank 4 bytes */
    es_tune_profile *p = &t->prof[1];
    assert_int_equal(es_tune_profile_alloc(p, 2, 2, 1), ES_OK);
    p->bank_bytes = 8;
    p->tail = 0.5;
    p->ne[0] = p->ne[1] = 1;
    for (int w = 0; w < 2; w++) {
        p->x[w] = 3.5; /* one invocation of two experts: a little faster than 2 x 2 */
        p->v[w] = 0;
        p->bytes[w] = 8;
        p->routes[w] = 6;
    }
    for (int q = 0; q < ES_TUNE_N_DEPTHS; q++) p->bw[q] = 2;
}

static void test_select(void **state)
{
    (void)state;
    es_tune t;
    two_profiles(&t);
    es_tune_choice c;
    /* room for 1 bank of G 1 only (other 100, budget 104): G 1 B 1, the hand value 16.5 + the
     * checksums (verify 0 here) */
    assert_int_equal(es_tune_select(&t, 104, 100, 0, ES_POLICY_EARLY, 0, &c), ES_OK);
    assert_int_equal(c.groups, 1);
    assert_int_equal(c.banks, 1);
    assert_int_equal(c.qd, 1);
    assert_true(t_near(c.predicted, 16.5, 1e-9));
    /* G 1 with b 2 (budget 108): q = min(Q0, b) = 2, both groups of a layer read back to back:
     * d 2 4, f 4 6; layer 1: a = max(p0, f0) = 4 -> d 6, s 7, f 9; a = f1 = 6 -> d 8, f 11:
     * 11.5. G 2 with one bank of 8 bytes (L 4): d 4, f 7.5 | T_ne 8.5; a = 7.5 -> d 11.5,
     * f 15: 15.5. G 1 wins. */
    assert_int_equal(es_tune_select(&t, 108, 100, 0, ES_POLICY_EARLY, 0, &c), ES_OK);
    assert_int_equal(c.groups, 1);
    assert_int_equal(c.banks, 2);
    assert_true(t_near(c.predicted, 11.5, 1e-9));
    /* plenty of room: G 1 B 4 = 11.5 as well, so the fewest banks (2) are kept; G 2 B 2:
     * d 4 8, f 7.5 | T_ne 8.5 -> s 8.5, f 12: 12.5, slower */
    assert_int_equal(es_tune_select(&t, 1000, 100, 0, ES_POLICY_EARLY, 0, &c), ES_OK);
    assert_int_equal(c.groups, 1);
    assert_int_equal(c.banks, 2);
    /* too small for any bank: the smallest budget is M_other + the smallest bank */
    assert_int_equal(es_tune_select(&t, 103, 100, 0, ES_POLICY_EARLY, 0, &c), ES_E_BUDGET);
    assert_non_null(strstr(es_last_error(), "the smallest budget that works"));
    assert_int_equal(c.min_budget, 104);
    /* Q0 = 1 from the storage, but the checksums (0.5 s after each 2 s read) idle the device
     * between reads at depth 1: G 1 B 2 at depth 1 takes 12.5 (d 2 4.5 | 7 9.5, f 4.5 7 | 10
     * 12), at depth 2 12 (reads back to back: d 2 4 | 6.5 8.5, f 4.5 6.5 | 9.5 11.5), so the
     * choice takes depth 2 (B 3 or 4 are no faster and larger) */
    t.q0 = 1;
    t.n_profiles = 1;
    assert_int_equal(es_tune_select(&t, 116, 100, 0, ES_POLICY_EARLY, 1, &c), ES_OK);
    assert_int_equal(c.groups, 1);
    assert_int_equal(c.banks, 2);
    assert_int_equal(c.qd, 2);
    assert_true(t_near(c.predicted, 12, 1e-9));
    assert_true(t_near(es_tune_predict(&t.prof[0], 1, 2, 0, ES_POLICY_EARLY, 1, NULL), 12.5, 1e-9));
    for (int i = 0; i < 2; i++) es_tune_profile_free(&t.prof[i]);
}

/* es_tune_select bisects over B (the prediction never grows with B): its choice must be the one
 * an exhaustive scan of every G, B <= B_max and depth finds (smallest arena within 0.1 % of the
 * fastest; ties: first profile, smallest B, first depth tried), on random tunings. */
static void test_select_matches_exhaustive(void **state)
{
    (void)state;
    t_rng r = {11};
    const es_policy pols[] = {ES_POLICY_EARLY, ES_POLICY_AFTER_ROUTING, ES_POLICY_ON_DEMAND};
    for (int trial = 0; trial < 400; trial++) {
        es_tune t;
        memset(&t, 0, sizeof(t));
        t.q0 = 1 << (t_next(&r) % 4);
        const int W = 1 + (int)(t_next(&r) % 3), experts = 8;
        t.n_profiles = 3;
        for (int i = 0; i < t.n_profiles; i++) {
            double chain;
            uint64_t bytes;
            random_profile(&r, &t.prof[i], 1 << i, W, experts >> i, &chain, &bytes);
        }
        const uint64_t other = 5000, budget = other + 1000 + t_next(&r) % 40000;
        const double io = trial % 3 == 0 ? 300 : 0;
        const es_policy pol = pols[trial % 3];
        const int verify = trial & 1;
        /* the exhaustive scan, written out here on its own */
        int depths[ES_TUNE_N_DEPTHS + 1], nd = 0;
        depths[nd++] = t.q0;
        for (int k = 0; k < ES_TUNE_N_DEPTHS; k++)
            if (es_tune_depths[k] != t.q0) depths[nd++] = es_tune_depths[k];
        double best = INFINITY;
        for (int i = 0; i < t.n_profiles; i++)
            for (int64_t b = 1; b <= es_tune_max_banks(&t.prof[i], budget, other); b++)
                for (int k = 0; k < nd; k++) {
                    if (k > 0 && depths[k] > b) continue;
                    const int q = depths[k] < b ? depths[k] : (int)b;
                    best = fmin(best, es_tune_predict(&t.prof[i], q, (int)b, io, pol, verify, NULL));
                }
        int wg = 0, wb = 0, wq = 0;
        uint64_t warena = UINT64_MAX;
        for (int i = 0; i < t.n_profiles; i++)
            for (int64_t b = 1; b <= es_tune_max_banks(&t.prof[i], budget, other); b++)
                for (int k = 0; k < nd; k++) {
                    if (k > 0 && depths[k] > b) continue;
                    const int q = depths[k] < b ? depths[k] : (int)b;
                    const double tp = es_tune_predict(&t.prof[i], q, (int)b, io, pol, verify, NULL);
                    const uint64_t arena = (uint64_t)b * t.prof[i].bank_bytes;
                    if (tp <= best * 1.001 && arena < warena) {
                        warena = arena;
                        wg = t.prof[i].G, wb = (int)b, wq = q;
                    }
                }
        es_tune_choice c;
        assert_int_equal(es_tune_select(&t, budget, other, io, pol, verify, &c), ES_OK);
        if (c.groups != wg || c.banks != wb || c.qd != wq)
            fail_msg("trial %d: chose G %d B %d Q %d, the exhaustive scan G %d B %d Q %d", trial,
                     c.groups, c.banks, c.qd, wg, wb, wq);
        for (int i = 0; i < t.n_profiles; i++) es_tune_profile_free(&t.prof[i]);
    }
}

/* ---- on a real model ---- */

static char gguf[512], pack[520], cache[512];
static int32_t ids[96];

static es_model *open_model(const char *path)
{
    es_model *m = NULL;
    if (es_model_open(path, 0, &m) != ES_OK) fail_msg("open %s: %s", path, es_last_error());
    return m;
}

static es_tune *make_tune(es_model *m, int n_threads)
{
    static const int groups[] = {1, 2, 4, 8};
    es_tune_run_params rp = {.ids = ids, .n_ids = T_LEN(ids), .groups = groups,
                             .n_groups = T_LEN(groups), .n_threads = n_threads,
                             .direct_io = 1}; /* as before direct_io replaced no_direct */
    es_tune *t = NULL;
    if (es_tune_run(m, &rp, &t) != ES_OK) fail_msg("tune: %s", es_last_error());
    return t;
}

/* The profile accounts for the whole request: non-expert, expert and tail times plus the
 * waits for experts add up to the measured time; routes add up to tokens x top-k per layer. */
static void test_profile_from_run(void **state)
{
    (void)state;
    for (int src = 0; src < 2; src++) { /* from the pack, and from the GGUF (3 reads a group) */
        es_model *m = open_model(src ? gguf : pack);
        es_tune *t = make_tune(m, 2);
        assert_int_equal(t->n_profiles, 4);
        assert_true(t->q0 == 1 || t->q0 == 2 || t->q0 == 4 || t->q0 == 8);
        assert_true(t->other_estimate > 0 && t->other_bytes > 0);
        for (int i = 0; i < t->n_profiles; i++) {
            const es_tune_profile *p = &t->prof[i];
            assert_int_equal(p->n_sparse, 2);
            assert_int_equal(p->K, (8 + p->G - 1) / p->G);
            assert_int_equal(p->bank_bytes, es_stream_bank_bytes(m, p->G));
            double sum = p->tail;
            for (int w = 0; w < p->n_sparse; w++) {
                int64_t routes = 0;
                sum += p->ne[w];
                for (int k = 0; k < p->K; k++) {
                    routes += p->routes[w * p->K + k];
                    sum += p->x[w * p->K + k];
                    assert_true(p->bytes[w * p->K + k] > 0 &&
                                p->bytes[w * p->K + k] <= p->bank_bytes);
                }
                assert_int_equal(routes, (int64_t)T_LEN(ids) * 4); /* small: top-4 */
            }
            for (int q = 0; q < ES_TUNE_N_DEPTHS; q++) assert_true(p->bw[q] > 0);
            assert_true(sum > 0 && sum <= p->seconds + 1e-6); /* the rest is waiting for experts */
        }
        es_tune_destroy(t);
        es_model_close(m);
    }
}

/* A budgeted session with the tuning takes the configurator's choice and gives the resident
 * logits bit for bit; the choice is what es_tune_select says for the session's M_other. */
static void test_session_uses_tuning(void **state)
{
    (void)state;
    es_model *m = open_model(pack);
    es_tune *t = make_tune(m, 1);
    const int n = (int)T_LEN(ids);
    float *res = malloc(sizeof(float) * (size_t)n * 320), *got = malloc(sizeof(float) * (size_t)n * 320);
    assert_int_equal(es_model_n_vocab(m), 320);
    es_session_params p = es_session_default_params();
    p.n_threads = 1;
    es_session *s = NULL;
    assert_int_equal(es_session_create(m, &p, &s), ES_OK);
    assert_int_equal(es_session_prefill(s, ids, (size_t)n, 1, res), ES_OK);
    es_session_destroy(s);
    /* a budget that streams, and the tuning chooses */
    p.max_tokens = n;
    p.max_logits_rows = n;
    p.mem_budget_bytes = 1; /* learn M_other from the refusal's numbers */
    p.tune = t;
    assert_int_equal(es_session_create(m, &p, &s), ES_E_BUDGET);
    p.mem_budget_bytes = 0;
    p.stream = 1;
    p.groups = 1;
    p.tune = NULL;
    assert_int_equal(es_session_create(m, &p, &s), ES_OK);
    es_run_stats rs;
    es_session_stats(s, &rs);
    es_session_destroy(s);
    /* forced streaming (the budget would hold every expert: M_other moves by megabytes
     * between sessions under a sanitizer, more than the small preset's 2.4 MiB of experts) */
    p.groups = 0;
    p.tune = t;
    p.mem_budget_bytes = rs.other_bytes + es_stream_request_bytes(m, 8) + ((uint64_t)64 << 20);
    assert_int_equal(es_session_create(m, &p, &s), ES_OK);
    assert_int_equal(es_session_prefill(s, ids, (size_t)n, 1, got), ES_OK);
    es_session_stats(s, &rs);
    es_session_destroy(s);
    assert_int_equal(rs.streaming, 1);
    assert_int_equal(rs.tuned, 1);
    assert_true(rs.predicted_seconds > 0);
    assert_memory_equal(res, got, sizeof(float) * (size_t)n * 320);
    /* the choice is the selection's for what the session measured (plus the measured excess) */
    const uint64_t extra = t->other_bytes > t->other_estimate ? t->other_bytes - t->other_estimate : 0;
    es_tune_choice c;
    assert_int_equal(es_tune_select(t, p.mem_budget_bytes, rs.other_bytes + extra, 0,
                                    ES_POLICY_EARLY, 1, &c), ES_OK);
    assert_int_equal(rs.groups, c.groups);
    assert_int_equal(rs.banks, c.banks);
    assert_int_equal(rs.queue_depth, c.qd);
    /* another thread count: the tuning does not apply, and the session says why */
    p.n_threads = 2;
    assert_int_equal(es_session_create(m, &p, &s), ES_E_INVAL);
    assert_non_null(strstr(es_last_error(), "made for 1 thread, this run uses 2"));
    free(res);
    free(got);
    es_tune_destroy(t);
    es_model_close(m);
}

/* The public view (include/estream.h) says what the internals hold: es_tune_choose is
 * es_tune_select with the larger M_other, early reads and checksums, and keeps each feasible
 * choice; es_tune_bank_limit is es_tune_max_banks with that M_other; es_tune_describe copies
 * the struct; es_tune_explain's predicted layer times are the recurrence's and its measured
 * ones fall inside the request. */
static void test_public_view(void **state)
{
    (void)state;
    es_model *m = open_model(pack);
    es_tune *t = make_tune(m, 1);
    const uint64_t other =
        (t->other_bytes > t->other_estimate ? t->other_bytes : t->other_estimate) +
        ES_ARENA_SLACK_BYTES; /* the arena's rounding to huge pages */
    es_tune_desc d;
    es_tune_describe(t, &d);
    assert_int_equal(d.select_other_bytes, other);
    assert_int_equal(d.other_bytes, t->other_bytes);
    assert_int_equal(d.other_estimate_bytes, t->other_estimate);
    assert_int_equal(d.q0, t->q0);
    assert_int_equal(d.n_threads, 1);
    assert_string_equal(d.kernels, t->kernels);
    assert_string_equal(d.cpu, t->cpu);
    assert_int_equal(d.n_profiles, t->n_profiles);
    assert_int_equal(d.n_choices, 0);
    for (int q = 0; q < ES_TUNE_N_DEPTHS; q++) assert_int_equal(d.depths[q], es_tune_depths[q]);
    for (int i = 0; i < d.n_profiles; i++) {
        assert_int_equal(d.profiles[i].groups, t->prof[i].G);
        assert_int_equal(d.profiles[i].bank_bytes, t->prof[i].bank_bytes);
        assert_memory_equal(d.profiles[i].bytes_per_second, t->prof[i].bw, sizeof(t->prof[i].bw));
    }
    const uint64_t budgets[] = {1, other + t->prof[0].bank_bytes, other + ((uint64_t)1 << 20),
                                other + ((uint64_t)8 << 20)};
    int kept = 0;
    for (size_t i = 0; i < T_LEN(budgets); i++)
        for (int io = 0; io < 2; io++) {
            es_tune_choice want, got;
            const double lim = io ? 100e6 : 0;
            const es_status sw = es_tune_select(t, budgets[i], other, lim, ES_POLICY_EARLY, 1,
                                                &want);
            assert_int_equal(es_tune_choose(t, budgets[i], lim, &got), sw);
            assert_memory_equal(&want, &got, sizeof(want));
            if (sw == ES_OK) kept++;
            assert_int_equal(t->n_choices, kept);
            for (int k = 0; k < t->n_profiles; k++)
                assert_int_equal(es_tune_bank_limit(t, t->prof[k].G, budgets[i]),
                                 es_tune_max_banks(&t->prof[k], budgets[i], other));
        }
    assert_int_equal(kept, 6); /* the budget of 1 byte is refused */
    assert_int_equal(es_tune_bank_limit(t, 3, budgets[3]), 0); /* no profile of G 3 */
    es_tune_describe(t, &d);
    assert_int_equal(d.n_choices, kept);
    assert_ptr_equal(d.choices, t->choices);
    /* explain the largest budget's choice */
    const es_tune_choice *c = &t->choices[kept - 1];
    const es_tune_profile *p = NULL;
    for (int k = 0; k < t->n_profiles; k++)
        if (t->prof[k].G == c->groups) p = &t->prof[k];
    assert_non_null(p);
    es_tune_layer_times layers[8];
    int n_layers = 0;
    es_tune_explain_result r;
    assert_int_equal(es_tune_explain(m, t, c, ids, T_LEN(ids), 1, layers, 8, &n_layers, &r),
                     ES_OK);
    assert_int_equal(n_layers, p->n_sparse);
    double pred[8];
    es_tune_predict(p, c->qd, c->banks, c->io_limit, ES_POLICY_EARLY, 1, pred);
    for (int w = 0; w < n_layers; w++) {
        assert_true(layers[w].predicted_seconds == pred[w]);
        assert_true(layers[w].measured_seconds > 0);
        assert_true(layers[w].measured_seconds <= r.measured_seconds);
        assert_true(w == 0 || layers[w].measured_seconds >= layers[w - 1].measured_seconds);
        assert_true(layers[w].model_read_seconds > 0);
    }
    assert_true(r.predicted_seconds == c->predicted);
    assert_true(r.bubble_rate >= 0 && r.bubble_rate <= 1);
    assert_int_equal(es_tune_explain(m, t, c, ids, T_LEN(ids), 1, layers, 1, &n_layers, NULL),
                     ES_OK);
    assert_int_equal(n_layers, 1); /* cap */
    es_tune_choice bad = *c;
    bad.groups = 3;
    assert_int_equal(es_tune_explain(m, t, &bad, ids, T_LEN(ids), 1, layers, 8, &n_layers, NULL),
                     ES_E_INVAL);
    es_tune_destroy(t);
    es_model_close(m);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* Saved and loaded, every number survives; damage and another model are refused by line. */
static void test_file_round_trip_and_damage(void **state)
{
    (void)state;
    es_model *m = open_model(pack);
    es_tune *t = make_tune(m, 1);
    t->choices[0] = (es_tune_choice){12345678, 5e8, 2, 7, 2, 1.25, 0};
    t->n_choices = 1;
    char path[512];
    snprintf(path, sizeof(path), "%s", t_tmp_path("round.tune"));
    assert_int_equal(es_tune_save(t, path), ES_OK);
    es_tune *u = NULL;
    if (es_tune_load(m, path, &u) != ES_OK) fail_msg("load: %s", es_last_error());
    assert_int_equal(u->n_profiles, t->n_profiles);
    assert_int_equal(u->q0, t->q0);
    assert_int_equal(u->other_bytes, t->other_bytes);
    assert_string_equal(u->cpu, t->cpu);
    assert_int_equal(u->n_choices, 1);
    assert_int_equal(u->choices[0].banks, 7);
    for (int i = 0; i < t->n_profiles; i++) {
        const es_tune_profile *a = &t->prof[i], *b = &u->prof[i];
        assert_int_equal(a->G, b->G);
        for (int64_t j = 0; j < (int64_t)a->n_sparse * a->K; j++) {
            assert_true(t_near(a->x[j], b->x[j], 1e-8 * (1 + a->x[j])));
            assert_true(t_near(a->l[j], b->l[j], 1e-8 * (1 + a->l[j])));
            assert_int_equal(a->bytes[j], b->bytes[j]);
            assert_int_equal(a->routes[j], b->routes[j]);
        }
        /* the loaded profile predicts what the original does */
        assert_true(t_near(es_tune_predict(a, 2, 3, 0, ES_POLICY_EARLY, 1, NULL),
                           es_tune_predict(b, 2, 3, 0, ES_POLICY_EARLY, 1, NULL), 1e-6));
    }
    assert_int_equal(es_tune_applies(u, 1, NULL), ES_OK);
    assert_int_equal(es_tune_applies(u, 3, NULL), ES_E_INVAL);
    es_tune_destroy(u);

    size_t len = 0;
    char *good = t_read_file(path, &len);
    assert_non_null(good);
    /* damage: cut short, a letter in a number, extra text, another version, an empty file */
    struct { const char *from, *to, *msg; } cases[] = {
        {"\nend\n", "\n", "the file ends early"},
        {"\nq0 ", "\nq0 x", "bad value"},
        {"\nend\n", "\nend\nmore\n", "text after 'end'"},
        {"estream-tune 1", "estream-tune 9", "not version 1"},
        {"\nx ", "\nx z", "a number is missing or out of range"},
        {"\nne ", "\nne 1 ", "extra text after the numbers"},
    };
    for (size_t i = 0; i < T_LEN(cases); i++) {
        char *bad = malloc(len + 64);
        const char *at = strstr(good, cases[i].from);
        assert_non_null(at);
        const size_t pre = (size_t)(at - good);
        memcpy(bad, good, pre);
        strcpy(bad + pre, cases[i].to);
        strcat(bad, at + strlen(cases[i].from));
        write_text(path, bad);
        free(bad);
        assert_int_equal(es_tune_load(m, path, &u), ES_E_FORMAT);
        if (!strstr(es_last_error(), cases[i].msg))
            fail_msg("case %zu: '%s' lacks '%s'", i, es_last_error(), cases[i].msg);
        assert_non_null(strstr(es_last_error(), "line "));
    }
    write_text(path, "");
    assert_int_equal(es_tune_load(m, path, &u), ES_E_FORMAT);
    /* made for another model file: the GGUF next to the pack */
    write_text(path, good);
    es_model *other = open_model(gguf);
    assert_int_equal(es_tune_load(other, path, &u), ES_E_FORMAT);
    assert_non_null(strstr(es_last_error(), "another model file"));
    es_model_close(other);
    unlink(path);
    assert_int_equal(es_tune_load(m, path, &u), ES_E_IO);
    free(good);
    es_tune_destroy(t);
    es_model_close(m);
}

/* The storage figures are cached per device: a second tuning reads them, a damaged cache is
 * measured again and rewritten. */
static void test_storage_cache(void **state)
{
    (void)state;
    char dir[600];
    snprintf(dir, sizeof(dir), "%s/estream", cache);
    es_model *m = open_model(pack);
    es_tune *t = make_tune(m, 1); /* the fixtures' setup tuned once already: cached */
    es_tune_destroy(t);
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    char file[1200] = "";
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "storage-", 8)) snprintf(file, sizeof(file), "%s/%s", dir, e->d_name);
    closedir(d);
    assert_true(file[0] != 0);
    size_t len = 0;
    char *text = t_read_file(file, &len);
    assert_non_null(text);
    assert_true(strncmp(text, "estream-storage 1\n", 18) == 0);
    int rows = 0;
    for (char *s = text; *s; s++) rows += *s == '\n';
    assert_true(rows >= 1 + 4 * 4); /* header + 4 group sizes x 4 depths (+ the GGUF's sizes) */
    write_text(file, "estream-storage 1\n12 x\n");
    t = make_tune(m, 1);
    es_tune_destroy(t);
    char *again = t_read_file(file, &len);
    assert_non_null(again);
    rows = 0;
    for (char *s = again; *s; s++) rows += *s == '\n';
    assert_int_equal(rows, 1 + 4 * 4); /* the pack's sizes alone, measured again */
    free(text);
    free(again);
    es_model_close(m);
}

static int setup(void **state)
{
    (void)state;
    snprintf(gguf, sizeof(gguf), "%s", t_tmp_path("tune-small.gguf"));
    snprintf(pack, sizeof(pack), "%s.pack", gguf);
    es_synth_opts so = {.arch = "olmoe", .preset = "small", .type = "q4_0", .seed = 11};
    if (es_synth(&so, gguf) != ES_OK || es_pack(gguf, pack, NULL, NULL) != ES_OK) return -1;
    char *d = t_mkdtemp("tune-cache");
    if (!d) return -1;
    snprintf(cache, sizeof(cache), "%s", d);
    free(d);
    setenv("XDG_CACHE_HOME", cache, 1);
    t_rng r = {3};
    for (size_t i = 0; i < T_LEN(ids); i++) ids[i] = (int32_t)(t_next(&r) % 320);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(gguf);
    unlink(pack);
    t_rm_rf(cache);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recurrence_by_hand),
        cmocka_unit_test(test_recurrence_properties),
        cmocka_unit_test(test_select),
        cmocka_unit_test(test_select_matches_exhaustive),
        cmocka_unit_test(test_profile_from_run),
        cmocka_unit_test(test_session_uses_tuning),
        cmocka_unit_test(test_public_view),
        cmocka_unit_test(test_file_round_trip_and_damage),
        cmocka_unit_test(test_storage_cache),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
