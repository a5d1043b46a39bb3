/*
 * Expert streaming (src/stream/): logits bit-identical to the resident run for
 * every tested source (GGUF or pack), G, B, Q, policy and thread count; groups without routes
 * skipped; faults (a flipped byte in a pack record, a truncated pack, a read failing with EIO,
 * short and slow reads) end with an error naming the layer and expert, or change nothing; the
 * budget rule and its refusals.
 *
 * The oracle is the resident fast path on the same model file, itself checked against the
 * reference path by test_forward. Models: the `small` preset (2 layers, 8 experts top-4,
 * hidden 320, FFN 288) in Q4_0 and F32, written by es_synth and packed by es_pack.
 */
#include "t.h"
#include "stream/arena.h"

#include <fcntl.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "estream.h"
#include "io/io.h"
#include "stream/budget.h"
#include "model/model.h"
#include "run/session.h"
#include "pack/pack.h"
#include "stream/pipeline.h"
#include "split_experts.h"
#include "split_parts.h"

enum { T_LONG = 300, T_SHORT = 3 };

typedef struct fixture {
    char gguf[512], pack[520];
    int32_t ids[T_LONG];
} fixture;

static fixture fx_q4, fx_f32, fx_qwen3moe, fx_mixtral, fx_deepseek, fx_lfm2moe, fx_deepseek2;

static void make_fixture(fixture *fx, const char *preset, const char *type)
{
    snprintf(fx->gguf, sizeof(fx->gguf), "%s", t_tmp_path(type));
    strcat(fx->gguf, "-stream-");
    strcat(fx->gguf, preset);
    strcat(fx->gguf, ".gguf");
    snprintf(fx->pack, sizeof(fx->pack), "%s.pack", fx->gguf);
    es_synth_opts so = {.preset = preset, .type = type, .seed = 5};
    if (es_synth(&so, fx->gguf) != ES_OK) fail_msg("synth: %s", es_last_error());
    if (es_pack(fx->gguf, fx->pack, NULL, NULL) != ES_OK) fail_msg("pack: %s", es_last_error());
    t_rng r = {99};
    for (int i = 0; i < T_LONG; i++) fx->ids[i] = (int32_t)(t_next(&r) % 320);
}

static es_model *open_model(const char *path)
{
    es_model *m = NULL;
    if (es_model_open(path, 0, &m) != ES_OK) fail_msg("open %s: %s", path, es_last_error());
    return m;
}

/* All-position logits of ids[0..n) through a session made from p (io may be NULL). */
static es_status run(const char *path, const es_session_params *p, const es_io_params *io,
                     const int32_t *ids, int n, float **out, es_run_stats *stats)
{
    es_model *m = open_model(path);
    es_session *s = NULL;
    es_status st = es_session_create_io(m, p, io, &s);
    if (st == ES_OK) {
        *out = malloc(sizeof(float) * (size_t)n * (size_t)es_model_n_vocab(m));
        assert_non_null(*out);
        st = es_session_prefill(s, ids, (size_t)n, 1, *out);
        if (stats) es_session_stats(s, stats);
    }
    es_session_destroy(s);
    es_model_close(m);
    return st;
}

static float *resident(const fixture *fx, int n, int threads)
{
    es_session_params p = es_session_default_params();
    p.n_threads = threads;
    float *y = NULL;
    if (run(fx->gguf, &p, NULL, fx->ids, n, &y, NULL)) fail_msg("resident: %s", es_last_error());
    return y;
}

static void assert_same(const float *a, const float *b, size_t count, const char *what)
{
    for (size_t i = 0; i < count; i++)
        if (!isfinite(a[i]) || !isfinite(b[i]) || memcmp(&a[i], &b[i], sizeof(float)) != 0)
            fail_msg("%s: logit %zu differs (%.9g vs %.9g)", what, i, a[i], b[i]);
}

typedef struct config {
    int from_pack, G, B, Q, threads;
    es_policy policy;
    int backend; /* 0 auto, 2 pread */
} config;

static void check_configs(fixture *fx, const config *cs, size_t n_cs, int n)
{
    const size_t count = (size_t)n * 320;
    float *want[3] = {NULL, resident(fx, n, 1), resident(fx, n, 2)};
    assert_same(want[1], want[2], count, "resident 1 vs 2 threads");
    for (size_t i = 0; i < n_cs; i++) {
        const config *c = &cs[i];
        es_session_params p = es_session_default_params();
        p.n_threads = c->threads;
        p.groups = c->G;
        p.banks = c->B;
        p.queue_depth = c->Q;
        p.policy = c->policy;
        p.io_backend = c->backend;
        p.plan_capacity = i % 2 ? 333 : 0; /* some invocations split too */
        float *y = NULL;
        es_run_stats rs;
        char what[160];
        snprintf(what, sizeof(what), "%s G%d B%d Q%d %s %d threads %s",
                 c->from_pack ? "pack" : "gguf", c->G, c->B, c->Q, es_policy_name(c->policy),
                 c->threads, c->backend == 2 ? "pread" : "auto");
        if (run(c->from_pack ? fx->pack : fx->gguf, &p, NULL, fx->ids, n, &y, &rs))
            fail_msg("%s: %s", what, es_last_error());
        assert_true(rs.streaming);
        assert_int_equal(rs.groups, c->G);
        assert_int_equal(rs.banks, c->B);
        if (rs.bytes_read == 0) fail_msg("%s: nothing was read", what);
        assert_same(want[c->threads], y, count, what);
        free(y);
    }
    free(want[1]);
    free(want[2]);
}

static const config every[] = {
    /* pack and GGUF, each policy, G dividing 8 and not, B from 1 to more than the groups */
    {1, 1, 1, 1, 1, ES_POLICY_EARLY, 0},        {1, 2, 2, 2, 2, ES_POLICY_EARLY, 0},
    {1, 3, 2, 4, 2, ES_POLICY_AFTER_ROUTING, 0}, {1, 8, 1, 1, 1, ES_POLICY_ON_DEMAND, 0},
    {1, 4, 5, 4, 2, ES_POLICY_EARLY, 0},        {1, 3, 3, 2, 2, ES_POLICY_ON_DEMAND, 2},
    {0, 1, 2, 3, 2, ES_POLICY_EARLY, 0},        {0, 3, 2, 1, 1, ES_POLICY_AFTER_ROUTING, 0},
    {0, 8, 2, 4, 2, ES_POLICY_ON_DEMAND, 0},    {0, 5, 1, 2, 2, ES_POLICY_EARLY, 2},
    {0, 2, 9, 8, 2, ES_POLICY_EARLY, 0},        {0, 4, 3, 3, 1, ES_POLICY_AFTER_ROUTING, 2},
};

static void test_identical_q4_0(void **state)
{
    (void)state;
    check_configs(&fx_q4, every, T_LEN(every), T_LONG);
}

static void test_identical_f32(void **state)
{
    (void)state;
    const config some[] = {{1, 3, 2, 2, 2, ES_POLICY_EARLY, 0},
                           {0, 2, 3, 4, 2, ES_POLICY_AFTER_ROUTING, 0},
                           {1, 8, 2, 1, 1, ES_POLICY_ON_DEMAND, 2}};
    check_configs(&fx_f32, some, T_LEN(some), 97);
}

/* The other families stream the same way (their experts are the same three tensors; attention,
 * norms, a tied head, dense layers and shared experts stay resident): tiny-qwen3moe,
 * tiny-mixtral and tiny-deepseek (its dense first layer has nothing to stream), Q4_0, pack and
 * GGUF. */
static void test_identical_families(void **state)
{
    (void)state;
    const config some[] = {{1, 3, 2, 2, 2, ES_POLICY_EARLY, 0},
                           {0, 2, 3, 4, 2, ES_POLICY_AFTER_ROUTING, 0},
                           {1, 1, 1, 1, 1, ES_POLICY_ON_DEMAND, 2}};
    check_configs(&fx_qwen3moe, some, T_LEN(some), T_LONG);
    check_configs(&fx_mixtral, some, T_LEN(some), T_LONG);
    check_configs(&fx_deepseek, some, T_LEN(some), T_LONG);
    check_configs(&fx_lfm2moe, some, T_LEN(some), T_LONG);
    check_configs(&fx_deepseek2, some, T_LEN(some), T_LONG);
}

/* Logits of ids through path with session params p (fails the test on an error). */
static float *logits_of(const char *path, const es_session_params *p, const fixture *fx, int n,
                        es_run_stats *rs, const char *what)
{
    float *y = NULL;
    if (run(path, p, NULL, fx->ids, n, &y, rs)) fail_msg("%s: %s", what, es_last_error());
    return y;
}

/* A GGUF with one tensor per expert (llama.cpp's older naming, tests/split_experts.h) runs as
 * the merged file does, bit for bit: resident, streamed (the groups of a file whose experts lie
 * in turn are read as one extent, not three overlapping ones: no more bytes than the merged
 * file's) and packed. A file whose experts are not at one stride is refused with the way out,
 * and its pack runs. tiny-mixtral (Mixtral is the family such files hold) and small (OLMoE). */
static void check_split(fixture *fx, int n)
{
    const size_t count = (size_t)n * 320;
    es_session_params p = es_session_default_params();
    p.n_threads = 2;
    float *want = logits_of(fx->gguf, &p, fx, n, NULL, "merged resident");
    es_session_params ps = p;
    ps.groups = 3;
    ps.banks = 2;
    es_run_stats rs_merged, rs;
    float *y = logits_of(fx->gguf, &ps, fx, n, &rs_merged, "merged streamed");
    assert_same(want, y, count, "merged streamed");
    free(y);
    static const char *const places[3] = {"in turn", "grouped", "uneven"};
    for (int place = SPLIT_IN_TURN; place <= SPLIT_UNEVEN; place++) {
        char split[600], pack[610], what[160];
        snprintf(split, sizeof(split), "%s.split%d.gguf", fx->gguf, place);
        snprintf(pack, sizeof(pack), "%s.pack", split);
        split_experts(fx->gguf, split, (enum split_place)place);
        if (place == SPLIT_UNEVEN) {
            es_model *m = NULL;
            assert_int_equal(es_model_open(split, 0, &m), ES_E_UNSUPPORTED);
            assert_null(m);
            assert_non_null(strstr(es_last_error(), "not evenly spaced"));
            assert_non_null(strstr(es_last_error(), "estream pack"));
        } else {
            snprintf(what, sizeof(what), "split %s resident", places[place]);
            y = logits_of(split, &p, fx, n, NULL, what);
            assert_same(want, y, count, what);
            free(y);
            snprintf(what, sizeof(what), "split %s streamed", places[place]);
            y = logits_of(split, &ps, fx, n, &rs, what);
            assert_same(want, y, count, what);
            free(y);
            assert_true(rs.streaming);
            /* the same groups are read: about as many bytes (the 4 KiB rounding differs) */
            if (rs.bytes_read > rs_merged.bytes_read + rs_merged.bytes_read / 16)
                fail_msg("%s: read %llu bytes, the merged file %llu", what,
                         (unsigned long long)rs.bytes_read,
                         (unsigned long long)rs_merged.bytes_read);
        }
        if (es_pack(split, pack, NULL, NULL) != ES_OK)
            fail_msg("pack %s: %s", places[place], es_last_error());
        snprintf(what, sizeof(what), "pack of split %s", places[place]);
        y = logits_of(pack, &p, fx, n, NULL, what);
        assert_same(want, y, count, what);
        free(y);
        snprintf(what, sizeof(what), "pack of split %s streamed", places[place]);
        y = logits_of(pack, &ps, fx, n, NULL, what);
        assert_same(want, y, count, what);
        free(y);
        unlink(split);
        unlink(pack);
    }
    free(want);
}

static void test_split_experts(void **state)
{
    (void)state;
    check_split(&fx_mixtral, T_LONG);
    check_split(&fx_q4, 97);
}

/* A model split in parts by gguf-split (tests/split_parts.h) runs from its first part as the
 * whole file does, bit for bit: resident, streamed (a group's slices read from several parts
 * through one queue: the parts are cut so that a layer's expert tensors lie in two of them) and
 * through the pack of the parts (one file, without the split keys). tiny-mixtral in 4 and 5
 * parts. */
static void test_split_parts(void **state)
{
    (void)state;
    fixture *fx = &fx_mixtral;
    const int n = T_LONG;
    const size_t count = (size_t)n * 320;
    es_session_params p = es_session_default_params();
    p.n_threads = 2;
    float *want = logits_of(fx->gguf, &p, fx, n, NULL, "whole file");
    bool spans = false; /* some layer's expert tensors lie in two parts */
    for (int n_parts = 4; n_parts <= 5; n_parts++) {
        char prefix[1024], first[1024], pack[1100];
        snprintf(prefix, sizeof(prefix), "%.900s.parts", fx->gguf);
        snprintf(first, sizeof(first), "%s", split_parts(fx->gguf, prefix, n_parts, PARTS_OK));
        snprintf(pack, sizeof(pack), "%s.pack", first);
        {
            es_gguf *pg = NULL;
            assert_int_equal(es_gguf_open(first, &pg), ES_OK);
            for (int il = 0; il < 2; il++) {
                uint32_t files[3];
                static const char *const kn[3] = {"gate", "up", "down"};
                for (int k = 0; k < 3; k++) {
                    char name[64];
                    snprintf(name, sizeof(name), "blk.%d.ffn_%s_exps.weight", il, kn[k]);
                    files[k] = es_gguf_find_tensor(pg, name)->file;
                }
                spans |= files[0] != files[1] || files[1] != files[2];
            }
            es_gguf_close(pg);
        }
        float *y = logits_of(first, &p, fx, n, NULL, "parts resident");
        assert_same(want, y, count, "parts resident");
        free(y);
        es_session_params ps = p;
        ps.groups = 3;
        ps.banks = 2;
        es_run_stats rs_whole, rs;
        y = logits_of(fx->gguf, &ps, fx, n, &rs_whole, "whole file streamed");
        free(y);
        y = logits_of(first, &ps, fx, n, &rs, "parts streamed");
        assert_same(want, y, count, "parts streamed");
        free(y);
        assert_true(rs.streaming);
        /* the same groups: as many bytes but for the 4 KiB rounding of other offsets */
        if (rs.bytes_read > rs_whole.bytes_read + rs_whole.bytes_read / 8 ||
            rs.bytes_read < rs_whole.bytes_read - rs_whole.bytes_read / 8)
            fail_msg("parts streamed: read %llu bytes, the whole file %llu",
                     (unsigned long long)rs.bytes_read, (unsigned long long)rs_whole.bytes_read);
        if (es_pack(first, pack, NULL, NULL) != ES_OK) fail_msg("pack parts: %s", es_last_error());
        es_gguf *g = NULL;
        assert_int_equal(es_gguf_open(pack, &g), ES_OK);
        assert_int_equal(es_gguf_n_files(g), 1);
        assert_true(es_gguf_find_key(g, "split.count") < 0 && es_gguf_find_key(g, "split.no") < 0);
        es_gguf_close(g);
        y = logits_of(pack, &p, fx, n, NULL, "pack of parts");
        assert_same(want, y, count, "pack of parts");
        free(y);
        y = logits_of(pack, &ps, fx, n, NULL, "pack of parts streamed");
        assert_same(want, y, count, "pack of parts streamed");
        free(y);
        for (int i = 0; i < n_parts; i++)
            unlink(part_path(prefix, i, n_parts));
        unlink(pack);
    }
    assert_true(spans);
    free(want);
}

/* A 3-token prompt routes 12 of 16 (layer, expert) pairs at most: unrouted groups are skipped
 * once routing is known (after-routing, on-demand), and early reads them but still matches. */
static void test_unrouted_groups_skipped(void **state)
{
    (void)state;
    float *want = resident(&fx_q4, T_SHORT, 2);
    const es_policy pols[] = {ES_POLICY_EARLY, ES_POLICY_AFTER_ROUTING, ES_POLICY_ON_DEMAND};
    int64_t skipped[3];
    for (int i = 0; i < 3; i++) {
        es_session_params p = es_session_default_params();
        p.n_threads = 2;
        p.groups = 1;
        p.banks = 2;
        p.policy = pols[i];
        float *y = NULL;
        es_run_stats rs;
        if (run(fx_q4.pack, &p, NULL, fx_q4.ids, T_SHORT, &y, &rs))
            fail_msg("%s: %s", es_policy_name(pols[i]), es_last_error());
        assert_same(want, y, (size_t)T_SHORT * 320, es_policy_name(pols[i]));
        skipped[i] = rs.groups_skipped;
        assert_int_equal(rs.groups_read + rs.groups_skipped <= 16, 1);
        free(y);
    }
    /* 3 tokens x top-4 = 12 routes per layer over 8 experts: with these ids some expert of
     * some layer gets none (checked through the resident run's route counts) */
    es_model *m = open_model(fx_q4.gguf);
    es_session *s = NULL;
    assert_int_equal(es_session_create(m, NULL, &s), ES_OK);
    assert_int_equal(es_session_prefill(s, fx_q4.ids, T_SHORT, 1, want), ES_OK);
    int64_t idle = 0, c[8];
    for (int il = 0; il < 2; il++) {
        assert_int_equal(es_session_route_counts(s, il, c, 8), ES_OK);
        for (int e = 0; e < 8; e++) idle += c[e] == 0;
    }
    es_session_destroy(s);
    es_model_close(m);
    if (idle == 0) fail_msg("the fixture's 3-token prompt routes every expert: pick other ids");
    assert_int_equal(skipped[1], idle);
    assert_int_equal(skipped[2], idle);
    free(want);
}

/* One session, several requests of different lengths: each identical to its resident run. */
static void test_session_reuse(void **state)
{
    (void)state;
    es_model *m = open_model(fx_q4.pack);
    es_session_params p = es_session_default_params();
    p.n_threads = 2;
    p.groups = 3;
    p.banks = 2;
    es_session *s = NULL;
    if (es_session_create(m, &p, &s)) fail_msg("%s", es_last_error());
    const int lens[] = {T_LONG, 17, T_LONG, 1};
    for (size_t i = 0; i < T_LEN(lens); i++) {
        float *want = resident(&fx_q4, lens[i], 2);
        float *y = malloc(sizeof(float) * (size_t)lens[i] * 320);
        assert_non_null(y);
        if (es_session_prefill(s, fx_q4.ids, (size_t)lens[i], 1, y))
            fail_msg("request %zu: %s", i, es_last_error());
        assert_same(want, y, (size_t)lens[i] * 320, "reused session");
        free(want);
        free(y);
    }
    es_session_destroy(s);
    es_model_close(m);
}

/* Short reads (resumed), a slow loader and buffered reads change nothing. */
static void test_slow_and_short_reads(void **state)
{
    (void)state;
    float *want = resident(&fx_q4, 64, 2);
    const es_io_params ios[] = {
        {.fault_short_bytes = 4096 * 3},
        {.fault_short_bytes = 5000}, /* unaligned: the rest goes buffered */
        {.fault_delay_us = 3000},
        {.no_direct = 1},
    };
    for (size_t i = 0; i < T_LEN(ios); i++)
        for (int from_pack = 0; from_pack < 2; from_pack++) {
            es_session_params p = es_session_default_params();
            p.n_threads = 2;
            p.groups = 2;
            p.banks = 2;
            p.queue_depth = 2;
            float *y = NULL;
            if (run(from_pack ? fx_q4.pack : fx_q4.gguf, &p, &ios[i], fx_q4.ids, 64, &y, NULL))
                fail_msg("io case %zu: %s", i, es_last_error());
            assert_same(want, y, (size_t)64 * 320, "faulty io");
            free(y);
        }
    free(want);
}

/* The n-th read fails with EIO: the prefill fails with a message naming the layer and experts;
 * the same session then runs the next request correctly (the fault fires once). */
static void test_eio_names_layer_and_expert(void **state)
{
    (void)state;
    float *want = resident(&fx_q4, 64, 2);
    for (int from_pack = 0; from_pack < 2; from_pack++) {
        es_model *m = open_model(from_pack ? fx_q4.pack : fx_q4.gguf);
        es_session_params p = es_session_default_params();
        p.n_threads = 2;
        p.groups = 2;
        p.banks = 3;
        p.policy = ES_POLICY_ON_DEMAND; /* reads in order, one group each: read n = group n */
        es_io_params io = {.fault_eio_at = from_pack ? 6 : 16};
        es_session *s = NULL;
        if (es_session_create_io(m, &p, &io, &s)) fail_msg("%s", es_last_error());
        float *y = malloc(sizeof(float) * 64 * 320);
        assert_non_null(y);
        assert_int_equal(es_session_prefill(s, fx_q4.ids, 64, 1, y), ES_E_IO);
        /* pack: the 6th read is group 5 = layer 1, experts 2-3; GGUF: 3 reads per group, the
         * 16th is the first of group 5 */
        const char *msg = es_last_error();
        if (!strstr(msg, "layer 1, experts 2-3") || !strstr(msg, "Input/output error"))
            fail_msg("message: %s", msg);
        assert_null(strchr(msg, '\n'));
        assert_int_equal(es_session_prefill(s, fx_q4.ids, 64, 1, y), ES_OK);
        assert_same(want, y, (size_t)64 * 320, "after an EIO");
        free(y);
        es_session_destroy(s);
        es_model_close(m);
    }
    free(want);
}

static char *copy_file(const char *src, const char *name)
{
    size_t len = 0;
    char *bytes = t_read_file(src, &len);
    assert_non_null(bytes);
    char *dst = strdup(t_tmp_path(name));
    FILE *f = fopen(dst, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    free(bytes);
    return dst;
}

/* A flipped byte in expert 5's record of layer 1: ES_E_FORMAT naming layer 1 and expert 5. */
static void test_flipped_byte(void **state)
{
    (void)state;
    char *bad = copy_file(fx_q4.pack, "flipped.pack");
    es_model *m = open_model(bad);
    es_pack_layer pl;
    assert_int_equal(es_pack_layer_info(m->gguf, 1, &pl), ES_OK);
    const uint64_t at = pl.file_offset + 5 * pl.record_bytes + pl.offsets[ES_PACK_DOWN] + 77;
    es_model_close(m);
    t_flip_byte(bad, at, 0x10);
    for (int G = 1; G <= 8; G += 3) {
        es_session_params p = es_session_default_params();
        p.groups = G;
        p.banks = 2;
        float *y = NULL;
        assert_int_equal(run(bad, &p, NULL, fx_q4.ids, T_LONG, &y, NULL), ES_E_FORMAT);
        const char *msg = es_last_error();
        if (!strstr(msg, "layer 1, expert 5: the record does not match the pack's checksum"))
            fail_msg("G %d: %s", G, msg);
        free(y);
    }
    unlink(bad);
    free(bad);
}

/* A pack cut inside layer 1's record of expert 5: refused when opened, naming the layer and
 * the expert (the strict reader checks every tensor lies inside the file). */
static void test_truncated_pack(void **state)
{
    (void)state;
    char *cut = copy_file(fx_q4.pack, "cut.pack");
    es_model *m0 = open_model(cut);
    es_pack_layer pl;
    assert_int_equal(es_pack_layer_info(m0->gguf, 1, &pl), ES_OK);
    const uint64_t at = pl.file_offset + 5 * pl.record_bytes + 100;
    es_model_close(m0);
    assert_int_equal(truncate(cut, (off_t)at), 0);
    es_model *m = NULL;
    assert_int_equal(es_model_open(cut, 0, &m), ES_E_FORMAT);
    assert_null(m);
    const char *msg = es_last_error();
    if (!strstr(msg, "layer 1, expert 5: the pack is truncated")) fail_msg("message: %s", msg);
    assert_null(strchr(msg, '\n'));
    unlink(cut);
    free(cut);
}

/* The budget rule: largest G <= 8 with 2 banks, B as many as fit; refusals name the minimum. */
static void test_budget_rule(void **state)
{
    (void)state;
    es_model *m = open_model(fx_q4.pack);
    const size_t b8 = es_stream_bank_bytes(m, 8), b1 = es_stream_bank_bytes(m, 1);
    assert_true(b8 >= 8 * b1 - 8 * 4096 && b8 <= 8 * b1); /* records are whole pages */
    const uint64_t other = 100u << 20;
    /* an arena is held in whole 2 MiB pages (es_arena_reserved_bytes): the rule counts those */
    const uint64_t r8 = es_arena_reserved_bytes(2, b8), r1 = es_arena_reserved_bytes(2, b1);
    assert_true(r8 >= 2 * b8 && r8 % (2u << 20) == 0 && r1 == (2u << 20));
    es_budget_plan plan;
    /* room for 2 banks of 8 plus a bit: G 8, B 2 */
    assert_int_equal(es_budget_plan_make(m, other + r8 + 5, other, 0, 0, 1, &plan), ES_OK);
    assert_int_equal(plan.groups, 8);
    assert_int_equal(plan.banks, 2);
    /* just under 2 banks of 8: the largest G whose 2 banks fit */
    assert_int_equal(es_budget_plan_make(m, other + r8 - 1, other, 0, 0, 1, &plan), ES_OK);
    assert_true(plan.groups < 8 && plan.banks >= 2);
    assert_true(es_arena_reserved_bytes(2, es_stream_bank_bytes(m, plan.groups)) <= r8 - 1);
    assert_true(es_arena_reserved_bytes(2, es_stream_bank_bytes(m, plan.groups + 1)) > r8 - 1);
    assert_true(es_arena_reserved_bytes(plan.banks, plan.bank_bytes) <= r8 - 1);
    /* banks capped at the request's groups (2 layers x 1 group of 8) */
    assert_int_equal(es_budget_plan_make(m, other + 40 * b8, other, 0, 0, 1, &plan), ES_OK);
    assert_int_equal(plan.groups, 8);
    assert_int_equal(plan.banks, 2);
    /* everything fits and streaming is not forced: resident */
    assert_int_equal(es_budget_plan_make(m, other + 40 * b8, other, 0, 0, 0, &plan), ES_OK);
    assert_int_equal(plan.resident, 1);
    /* too small: ES_E_BUDGET, the message gives other + 2 banks of 1 (one 2 MiB page) and the
     * MiB for the next run's moves (ES_BUDGET_RERUN_BYTES), rounded up */
    assert_int_equal(es_budget_plan_make(m, other + r1 - 1, other, 0, 0, 1, &plan),
                     ES_E_BUDGET);
    char want[64];
    snprintf(want, sizeof(want), "is %llu MiB",
             (unsigned long long)((other + r1 + ES_BUDGET_RERUN_BYTES + (1u << 20) - 1) >> 20));
    if (!strstr(es_last_error(), want)) fail_msg("%s (want '%s')", es_last_error(), want);
    assert_int_equal(plan.min_budget, other + r1);
    /* fixed G: B from the budget; fixed G that does not fit once: refused */
    const size_t b3 = es_stream_bank_bytes(m, 3);
    assert_int_equal(es_budget_plan_make(m, other + es_arena_reserved_bytes(3, b3), other, 3, 0,
                                         1, &plan),
                     ES_OK);
    assert_int_equal(plan.groups, 3);
    assert_true(plan.banks >= 3 && es_arena_reserved_bytes(plan.banks, b3) ==
                                       es_arena_reserved_bytes(3, b3));
    assert_int_equal(es_budget_plan_make(m, other + b8 - 1, other, 8, 0, 1, &plan), ES_E_BUDGET);
    es_model_close(m);
}

/* A session with a budget: streams, stays identical, reports its arena within the budget. */
static void test_session_budget(void **state)
{
    (void)state;
    float *want = resident(&fx_q4, T_LONG, 2);
    es_model *m = open_model(fx_q4.pack);
    es_session_params p = es_session_default_params();
    p.n_threads = 2;
    p.max_tokens = T_LONG;
    /* find M_other with a budget that is far too small, then give it 3 banks of 8 */
    p.mem_budget_bytes = 1 << 20;
    es_session *s = NULL;
    assert_int_equal(es_session_create(m, &p, &s), ES_E_BUDGET);
    assert_non_null(strstr(es_last_error(), "the smallest budget that works is"));
    /* 1 GiB holds this small model resident, with room for what ASan's quarantine (256 MiB by
     * default) keeps of earlier tests' frees in the process's RSS: with 400 MiB a CI run under
     * ASan once found too little left and streamed */
    p.mem_budget_bytes = 1u << 30;
    assert_int_equal(es_session_create(m, &p, &s), ES_OK);
    es_run_stats rs;
    es_session_stats(s, &rs);
    assert_int_equal(rs.streaming, 0); /* resident */
    es_session_destroy(s);
    /* This model's experts (2.5 MB) fit any budget with slack for the process's memory moving
     * between sessions (ASan's quarantine moves it by megabytes), so streaming is forced: the
     * rule then takes G 8 and as many banks as useful (2 groups in the request). */
    p.mem_budget_bytes = rs.other_bytes + (32u << 20);
    p.stream = 1;
    assert_int_equal(es_session_create(m, &p, &s), ES_OK);
    es_session_stats(s, &rs);
    assert_int_equal(rs.streaming, 1);
    assert_int_equal(rs.groups, 8);
    assert_int_equal(rs.banks, 2);
    assert_int_equal(rs.budget_bytes, p.mem_budget_bytes);
    assert_true(rs.other_bytes + rs.arena_bytes <= p.mem_budget_bytes);
    assert_true(rs.min_budget_bytes ==
                rs.other_bytes + es_arena_reserved_bytes(2, es_stream_bank_bytes(m, 1)));
    float *y = malloc(sizeof(float) * T_LONG * 320);
    assert_non_null(y);
    assert_int_equal(es_session_prefill(s, fx_q4.ids, T_LONG, 1, y), ES_OK);
    assert_same(want, y, (size_t)T_LONG * 320, "budget");
    es_session_stats(s, &rs);
    assert_true(rs.bubble_rate >= 0 && rs.bubble_rate <= 1);
    assert_true(rs.bytes_read >= 2 * 8 * es_stream_bank_bytes(m, 1) / 2);
    es_session_destroy(s);
    /* memory the caller reserves (a server's requests) counts in M_other: 64 MiB more than the
     * 32 MiB of slack cannot fit */
    p.reserve_bytes = 64u << 20;
    assert_int_equal(es_session_create(m, &p, &s), ES_E_BUDGET);
    p.reserve_bytes = 0;
    free(y);
    free(want);
    es_model_close(m);
}

static void test_bad_params(void **state)
{
    (void)state;
    es_model *m = open_model(fx_q4.pack);
    es_session *s = NULL;
    es_session_params p = es_session_default_params();
    p.banks = -1;
    assert_int_equal(es_session_create(m, &p, &s), ES_E_INVAL);
    p = es_session_default_params();
    p.queue_depth = 65;
    assert_int_equal(es_session_create(m, &p, &s), ES_E_INVAL);
    p = es_session_default_params();
    p.policy = (es_policy)7;
    assert_int_equal(es_session_create(m, &p, &s), ES_E_INVAL);
    p = es_session_default_params();
    p.reference = 1;
    p.groups = 2;
    assert_int_equal(es_session_create(m, &p, &s), ES_E_INVAL);
    assert_null(s);
    es_model_close(m);
}


/* --trace: the Chrome trace of a streamed prefill has a track per compute phase, per bank, the
 * expert groups and the waits, and the two counters; an unwritable path fails the request. */
static void test_trace_file(void **state)
{
    (void)state;
    char path[520];
    snprintf(path, sizeof(path), "%s", t_tmp_path("stream-trace.json"));
    es_session_params p = es_session_default_params();
    p.groups = 3;
    p.banks = 2;
    p.trace_path = path;
    float *y = NULL;
    if (run(fx_q4.pack, &p, NULL, fx_q4.ids, 64, &y, NULL)) fail_msg("%s", es_last_error());
    free(y);
    size_t len = 0;
    char *json = t_read_file(path, &len);
    assert_non_null(json);
    const char *want[] = {"\"traceEvents\"", "\"name\":\"attention\"", "\"name\":\"router\"",
                          "\"name\":\"moe\"", "\"name\":\"expert groups\"", "\"name\":\"bank 1\"",
                          "\"name\":\"ready banks\"", "\"name\":\"reads in flight\"",
                          "\"name\":\"read L1 e6-7\"", "\"name\":\"experts L0 e0-2\""};
    for (size_t i = 0; i < T_LEN(want); i++)
        if (!strstr(json, want[i])) fail_msg("trace lacks %s", want[i]);
    free(json);
    unlink(path);
    snprintf(path, sizeof(path), "%s/x.json", t_tmp_path("no-such-dir"));
    assert_int_equal(run(fx_q4.pack, &p, NULL, fx_q4.ids, 8, &y, NULL), ES_E_IO);
    free(y);
}

static int setup(void **state)
{
    (void)state;
    make_fixture(&fx_q4, "small", "q4_0");
    make_fixture(&fx_f32, "small", "f32");
    make_fixture(&fx_qwen3moe, "tiny-qwen3moe", "q4_0");
    make_fixture(&fx_mixtral, "tiny-mixtral", "q4_0");
    make_fixture(&fx_deepseek, "tiny-deepseek", "q4_0");
    make_fixture(&fx_lfm2moe, "tiny-lfm2moe", "q4_0");
    make_fixture(&fx_deepseek2, "tiny-deepseek2", "q4_0");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    const fixture *fs[] = {&fx_q4, &fx_f32, &fx_qwen3moe, &fx_mixtral, &fx_deepseek, &fx_lfm2moe, &fx_deepseek2};
    for (size_t i = 0; i < T_LEN(fs); i++) {
        unlink(fs[i]->gguf);
        unlink(fs[i]->pack);
    }
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identical_q4_0),
        cmocka_unit_test(test_identical_f32),
        cmocka_unit_test(test_identical_families),
        cmocka_unit_test(test_split_experts),
        cmocka_unit_test(test_split_parts),
        cmocka_unit_test(test_unrouted_groups_skipped),
        cmocka_unit_test(test_session_reuse),
        cmocka_unit_test(test_slow_and_short_reads),
        cmocka_unit_test(test_eio_names_layer_and_expert),
        cmocka_unit_test(test_flipped_byte),
        cmocka_unit_test(test_truncated_pack),
        cmocka_unit_test(test_budget_rule),
        cmocka_unit_test(test_session_budget),
        cmocka_unit_test(test_bad_params),
        cmocka_unit_test(test_trace_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
