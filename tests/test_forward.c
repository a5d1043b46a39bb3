/*
 * The fast path against the reference path (the oracle) on the committed tiny models, and its
 * determinism: bit-identical logits for 1, 2, 3 and 4 threads. The amx kernel table (AMX tiles,
 * or on a CPU without AMX the emulation of the tile instructions this program links, on the
 * CPU's AVX-512 or, without it, on the emulation of AVX-512 on AVX2) gives the avx512 table's
 * logits bit for bit, resident and streamed, on 1-3 threads.
 */
#include "t.h"

#include "estream.h"
#include "quant/kern.h"

#include <math.h>

#define DATA "tests/data/"

static es_model *open_ok(const char *path)
{
    es_model *m = NULL;
    if (es_model_open(path, 0, &m)) fail_msg("open %s: %s", path, es_last_error());
    return m;
}

/* What two logit matrices must agree on: per-position max |diff| (median, p90, max), the share
 * of positions with the same top-1, and the mean KL divergence (t_compare_logits). */
typedef struct limits { double median, p90, max, top1, kl; } limits;

static void check_limits(const char *what, const char *model, t_logit_stats s, limits lim)
{
    print_message("%s: %s per-position max |diff|: median %.3g, p90 %.3g, max %.3g; top-1 "
                  "%.1f%%; mean KL %.3g\n", model, what, s.median, s.p90, s.max, 100 * s.top1, s.kl);
    assert_true(s.median <= lim.median);
    assert_true(s.p90 <= lim.p90);
    assert_true(s.max <= lim.max);
    assert_true(s.top1 >= lim.top1);
    assert_true(s.kl <= lim.kl);
}

/* The looser of two limits, field by field. */
static limits loosest(limits a, limits b)
{
    return (limits){fmax(a.median, b.median), fmax(a.p90, b.p90), fmax(a.max, b.max),
                    fmin(a.top1, b.top1), fmax(a.kl, b.kl)};
}

/* Fast vs reference within `self`; where llama.cpp's logits of the same file are given, fast vs
 * them within `llama`, and the reference vs them within the looser of the two (the reference
 * computes in float: from a quantized file it is as far from llama.cpp as from the fast path). */
/* Every position's logits of tiny-ids.txt repeated `times` times from `model`, by the fast
 * path and the reference. */
static void prefill_times(const char *model, int times, size_t *n, size_t *nv, float **fast,
                          float **ref)
{
    size_t n1;
    int32_t *one = t_read_ids(DATA "tiny-ids.txt", &n1);
    int32_t *ids = malloc(sizeof(int32_t) * n1 * (size_t)times);
    for (int i = 0; i < times; i++) memcpy(ids + n1 * (size_t)i, one, sizeof(int32_t) * n1);
    free(one);
    *n = n1 * (size_t)times;
    es_model *m = open_ok(model);
    *nv = (size_t)es_model_n_vocab(m);
    *ref = malloc(sizeof(float) * *n * *nv);
    *fast = malloc(sizeof(float) * *n * *nv);
    es_session_params o = es_session_default_params();
    o.reference = 1;
    o.n_threads = 2;
    int o_all_logits = 1;
    assert_int_equal(es_prefill(m, ids, *n, &o, o_all_logits, *ref), ES_OK);
    o.reference = 0;
    assert_int_equal(es_prefill(m, ids, *n, &o, o_all_logits, *fast), ES_OK);
    free(ids);
    es_model_close(m);
}
static void prefill_both(const char *model, size_t *n, size_t *nv, float **fast, float **ref)
{
    prefill_times(model, 1, n, nv, fast, ref);
}

/* llama.cpp's logits of tiny-ids.txt, [n][nv] floats, from a tests/data file. */
static float *read_llama_logits(const char *path, size_t n, size_t nv)
{
    size_t len;
    float *want = (float *)t_read_file(path, &len);
    assert_non_null(want);
    assert_int_equal(len, sizeof(float) * n * nv);
    return want;
}

/* compare_lim over tiny-ids.txt repeated `times` times. */
static void compare_times(const char *model, int times, limits self, const char *llama_logits,
                          limits llama)
{
    size_t n, nv;
    float *fast, *ref;
    prefill_times(model, times, &n, &nv, &fast, &ref);
    check_limits("fast vs reference", model, t_compare_logits(fast, ref, n, nv), self);
    if (llama_logits) {
        float *want = read_llama_logits(llama_logits, n, nv);
        check_limits("fast vs llama.cpp", model, t_compare_logits(fast, want, n, nv), llama);
        check_limits("reference vs llama.cpp", model, t_compare_logits(ref, want, n, nv),
                     loosest(self, llama));
        free(want);
    }
    free(ref);
    free(fast);
}
static void compare_lim(const char *model, limits self, const char *llama_logits, limits llama)
{
    compare_times(model, 1, self, llama_logits, llama);
}

/*
 * Quantized files. The fast path quantizes activations in llama.cpp's formats to the bit (Q8_0
 * with its F16 scale for Q4_0/Q8_0 weights, Q8_K per 256 for K-quants), the reference does not:
 *   quant_self   fast vs reference: the 8-bit activation error (top-1 at least 93 %: near-ties
 *                in the output and router flips), KL free
 *   quant_llama  fast vs llama.cpp: the same rounding, so only float sum order differs; a router
 *                near-tie that flips early moves later positions (attention), which p90/max
 *                allow; the median stays at float noise unless a format differs (per-32 float
 *                scales gave a median of 0.06-0.1 here)
 */
static const limits quant_self = {INFINITY, 0.12, 3.0, 0.93, INFINITY};
static const limits quant_llama = {1e-4, 0.15, 0.3, 0.98, 2e-4};

static void compare_quant(const char *model, const char *llama_logits, limits self)
{
    compare_lim(model, self, llama_logits, quant_llama);
}

/* F32: the fast path's float kernels only reorder sums. */
static void test_fast_f32(void **s)
{
    (void)s;
    const limits f32 = {1e-4, 1e-3, 1e-3, 1.0, 1e-9};
    compare_lim(DATA "tiny-f32.gguf", f32, DATA "tiny-f32.llama-logits.bin", f32);
}
static void test_fast_q8_0(void **s)
{
    (void)s;
    compare_quant(DATA "tiny-q8_0.gguf", DATA "tiny-q8_0.llama-logits.bin", quant_self);
}
static void test_fast_q4_0(void **s)
{
    (void)s;
    compare_quant(DATA "tiny-q4_0.gguf", DATA "tiny-q4_0.llama-logits.bin", quant_self);
}

/* Q4_1 and Q5_1 (w = d q + m per block) in whole files as llama-quantize makes them (their
 * attn_k and attn_v in Q8_0, the head in Q8_0): the mins take llama.cpp's Q8_1 block sums. */
static void test_fast_q4_1_q5_1(void **s)
{
    (void)s;
    compare_quant(DATA "tiny-q4_1.gguf", DATA "tiny-q4_1.llama-logits.bin", quant_self);
    compare_quant(DATA "tiny-q5_1.gguf", DATA "tiny-q5_1.llama-logits.bin", quant_self);
}

/* The other families against llama.cpp on the same files (tests/data/README.md), each file as
 * (stem, how far the fast path may be from the reference):
 *   tiny-qwen3moe  per-head q/k norms, a head size (32) that is not hidden / heads (16) and a tied
 *                  output head; its Q4_0 head is the tied embedding (llama-quantize would keep a
 *                  Q8_0/Q6_K head), so logits move more with 8-bit activations (one router flip
 *                  reaches 7.8)
 *   tiny-mixtral   normal RoPE and no q/k norms; both GQA and a renormalised top-k
 *   tiny-deepseek  a dense first layer, shared experts through the dense kernels, a scaled top-k
 * F16 within the terms (top-1 >= 99.6 %, mean KL <= 1e-5; measured 100 % and 0.4-2.5e-7;
 * a planted NORM-for-NEOX RoPE swap or a missing renormalisation fails them). */
/* The fast path rounds activations to F16 before F16 products, as ggml does; the reference
 * does not (measured: fast vs reference KL 3-10e-7; fast vs llama.cpp 0.4-2.5e-7, max 0.008, where
 * float activations gave 3-9e-7 and a router flip in tiny-lfm2moe's perplexity text). */
static const limits f16_self = {0.01, 0.02, 0.03, 0.996, 1e-5};
static const limits f16_llama = {0.005, 0.01, 0.02, 0.996, 1e-6};

static void family(const char *stem, limits q4_0_self, limits q4_0_llama)
{
    char model[128], golden[128];
    snprintf(model, sizeof(model), DATA "%s-f16.gguf", stem);
    snprintf(golden, sizeof(golden), DATA "%s-f16.llama-logits.bin", stem);
    compare_lim(model, f16_self, golden, f16_llama);
    snprintf(model, sizeof(model), DATA "%s-q4_0.gguf", stem);
    snprintf(golden, sizeof(golden), DATA "%s-q4_0.llama-logits.bin", stem);
    compare_lim(model, q4_0_self, golden, q4_0_llama);
}
static void test_family_qwen3moe(void **s)
{
    (void)s;
    /* a router near-tie early in the text: the avx512 table's sum order flips it, so later
     * positions move by ~0.09 there (median; top-1 97.4 %, KL 2.2e-4 with its near-tied tied
     * head); the other tables agree with llama.cpp to 2e-6 at the median */
    family("tiny-qwen3moe", (limits){INFINITY, 0.3, 9.0, 0.93, 0.05},
           (limits){0.1, 0.15, 0.3, 0.96, 3e-4});
}
static void test_family_mixtral(void **s)
{
    (void)s;
    family("tiny-mixtral", quant_self, quant_llama);
}
static void test_family_deepseek(void **s)
{
    (void)s;
    family("tiny-deepseek", (limits){INFINITY, 0.15, 3.0, 0.93, INFINITY}, quant_llama);
}

/* tiny-mixtral-q4_0 cut in 3 parts by llama.cpp's own llama-gguf-split (tests/data/README.md):
 * from its first part estream gives the whole file's logits bit for bit, resident and streamed
 * (a group's slices then come from several parts), and so llama.cpp's within its terms (which
 * gives the same logits for the parts as for the whole file). */
static void test_gguf_split_parts(void **s)
{
    (void)s;
    size_t n;
    int32_t *ids = t_read_ids(DATA "tiny-ids.txt", &n);
    const char *paths[2] = {DATA "tiny-mixtral-q4_0.gguf",
                            DATA "tiny-mixtral-q4_0-parts-00001-of-00003.gguf"};
    float *y[2][2];
    size_t nv = 0;
    for (int f = 0; f < 2; f++) {
        es_model *m = open_ok(paths[f]);
        nv = (size_t)es_model_n_vocab(m);
        for (int streamed = 0; streamed < 2; streamed++) {
            es_session_params p = es_session_default_params();
            p.n_threads = 2;
            p.stream = streamed;
            p.groups = p.banks = streamed ? 2 : 0;
            es_session *ss = NULL;
            y[f][streamed] = malloc(sizeof(float) * n * nv);
            if (es_session_create(m, &p, &ss) || es_session_prefill(ss, ids, n, 1, y[f][streamed]))
                fail_msg("%s: %s", paths[f], es_last_error());
            es_run_stats rs;
            es_session_stats(ss, &rs);
            assert_int_equal(rs.streaming, streamed);
            es_session_destroy(ss);
        }
        es_model_close(m);
    }
    for (int streamed = 0; streamed < 2; streamed++)
        for (size_t i = 0; i < n * nv; i++)
            if (!isfinite(y[1][streamed][i]) ||
                memcmp(&y[0][streamed][i], &y[1][streamed][i], sizeof(float)) != 0)
                fail_msg("parts %s: logit %zu differs (%.9g vs %.9g)",
                         streamed ? "streamed" : "resident", i, y[1][streamed][i],
                         y[0][streamed][i]);
    float *want = read_llama_logits(DATA "tiny-mixtral-q4_0.llama-logits.bin", n, nv);
    check_limits("parts vs llama.cpp", paths[1], t_compare_logits(y[1][0], want, n, nv),
                 quant_llama);
    free(want);
    for (int f = 0; f < 2; f++)
        for (int streamed = 0; streamed < 2; streamed++) free(y[f][streamed]);
    free(ids);
}

/* lfm2moe: short-convolution blocks beside GQA attention, a dense short-conv first layer, a
 * sigmoid router with an expert bias, a tied head */
static void test_family_lfm2moe(void **s)
{
    (void)s;
    /* a tied Q4_0 head, like tiny-qwen3moe's: logits move more with 8-bit activations */
    family("tiny-lfm2moe", (limits){INFINITY, 0.35, 6.0, 0.93, 0.03}, quant_llama);
}

/* deepseek2 (DeepSeek-V2-Lite's form): multi-head latent attention with YaRN, a dense first
 * layer, shared experts. The fast path decompresses the keys and keeps the values latent, the
 * reference attends in the latent space as llama.cpp does, so the two check each other; the
 * Q4_0 files agree with llama.cpp to 1e-6 at the median (q_nope and each head's latent output
 * rounded as llama.cpp's products round them). tiny-deepseek2-joined is the older layout (one
 * attn_kv_b; llama.cpp decompresses keys and values from it, and so does estream). */
static void test_family_deepseek2(void **s)
{
    (void)s;
    family("tiny-deepseek2", quant_self, quant_llama);
    family("tiny-deepseek2-joined", quant_self, quant_llama);
}

/* deepseek2 files of DeepSeek-V3's kind (DeepSeek-V3/R1, Kimi-K2, GLM-4.7-Flash): queries
 * through q LoRA (rmsnorm(h Wq_a) Wq_b), a sigmoid router whose selection adds exp_probs_b and
 * keeps to the best 2 of 4 expert groups, weights renormalised and scaled by 2.5. The fast path
 * agrees with llama.cpp to float noise (measured, every x86 table: F16 max 0.006, KL 4.4e-7;
 * Q4_0 max 1.9e-6, KL 7e-14), held tighter than f16_llama / quant_llama; the reference's float
 * activations flip one router choice in each file (max 2.9 / 3.3 from both), which the self
 * limits allow. */
static void test_family_deepseek3(void **s)
{
    (void)s;
    const limits self = {INFINITY, 0.15, 4.0, 0.99, 0.012};
    compare_lim(DATA "tiny-deepseek3-f16.gguf", self, DATA "tiny-deepseek3-f16.llama-logits.bin",
                (limits){0.005, 0.01, 0.02, 1.0, 1e-6});
    compare_lim(DATA "tiny-deepseek3-q4_0.gguf", self,
                DATA "tiny-deepseek3-q4_0.llama-logits.bin", (limits){1e-5, 1e-5, 1e-4, 1.0, 1e-10});
}

/* qwen2moe (Qwen1.5-MoE, Qwen2-57B-A14B): q/k/v biases, a softmax top-k as is, one shared
 * expert of its own size gated per token by sigmoid(h . ffn_gate_inp_shexp). Measured against
 * llama.cpp (avx512 and scalar tables): F16 max 0.0027, Q4_0 median 9.5e-7, max 0.024. */
static void test_family_qwen2moe(void **s)
{
    (void)s;
    family("tiny-qwen2moe", quant_self, quant_llama);
}

/* gpt-oss (llama.cpp's openai-moe graph): biases on the q/k/v and output projections, a sink
 * logit per head, a window of 40 positions on layers 0 and 2 (tiny-ids.txt has 114), YaRN x4,
 * a router bias with the softmax over the top-2 logits, biased experts with the clamped SwiGLU
 * (its limits met: the synthetic expert biases are wide). Measured against llama.cpp (avx512
 * table): F16 max 0.0043, Q4_0 max 9.5e-7; the reference's float activations stay within the
 * F16 terms of the other families; against Q4_0 weights they move the logits more (median 0.11,
 * p90 0.13, a router flip reaching 5.2, KL 0.011: the wide expert biases amplify the 8-bit
 * activation error), which the self limits allow. */
static void test_family_gptoss(void **s)
{
    (void)s;
    compare_lim(DATA "tiny-gptoss-f16.gguf", f16_self, DATA "tiny-gptoss-f16.llama-logits.bin",
                (limits){0.005, 0.006, 0.01, 1.0, 1e-6});
    /* small-gptoss: hidden 320 and expert FFN 288, so the expert operator's column chunks (128,
     * a partial last one) each take their own biases (measured: median 9.5e-7, max 0.08; the
     * reference's float activations: KL 0.018-0.021, top-1 94 %) */
    compare_lim(DATA "small-gptoss-q4_0.gguf", (limits){INFINITY, 0.2, 6.0, 0.93, 0.03},
                DATA "small-gptoss-q4_0.llama-logits.bin", quant_llama);
    compare_lim(DATA "tiny-gptoss-q4_0.gguf", (limits){INFINITY, 0.2, 6.0, 0.93, 0.02},
                DATA "tiny-gptoss-q4_0.llama-logits.bin",
                (limits){1e-5, 1e-5, 1e-4, 1.0, 1e-10});
}

/* A quantized file with llama.cpp's logits from two builds (tests/data/README.md: STEM.gguf,
 * STEM.llama-logits.bin from the AVX-512 build, STEM.llama-avx2-logits.bin from the AVX2 one),
 * both paths' logits of it, and how far the builds are from each other. */
typedef struct two_builds {
    char model[128];
    size_t n, nv;
    float *fast, *ref, *native, *avx2;
    t_logit_stats spread; /* the AVX2 build against the AVX-512 one */
} two_builds;

static void two_builds_load(const char *stem, two_builds *b)
{
    char path[160];
    snprintf(b->model, sizeof(b->model), DATA "%s.gguf", stem);
    prefill_both(b->model, &b->n, &b->nv, &b->fast, &b->ref);
    snprintf(path, sizeof(path), DATA "%s.llama-logits.bin", stem);
    b->native = read_llama_logits(path, b->n, b->nv);
    snprintf(path, sizeof(path), DATA "%s.llama-avx2-logits.bin", stem);
    b->avx2 = read_llama_logits(path, b->n, b->nv);
    b->spread = t_compare_logits(b->avx2, b->native, b->n, b->nv);
    print_message("%s: llama.cpp AVX2 vs AVX-512 build: median %.3g, max %.3g, top-1 %.1f%%, "
                  "mean KL %.3g\n", b->model, b->spread.median, b->spread.max,
                  100 * b->spread.top1, b->spread.kl);
}

static void two_builds_free(two_builds *b)
{
    free(b->fast);
    free(b->ref);
    free(b->native);
    free(b->avx2);
}

/* glm4moe (GLM-4.5-Air, GLM-4.5, GLM-4.6): q/k/v biases, NEOX RoPE on the first half of each
 * head (tiny: 16 of 32), a dense first layer, one shared expert, a sigmoid router with a
 * selection bias, renormalised and scaled by 2.5, one multi-token-prediction block in the file
 * that is not run; small-glm4moe adds GLM-4.5's per-head q/k norms, in llama-quantize's
 * Q4_K_M. On tiny-glm4moe-q4_0 llama.cpp's AVX-512 build and its AVX2 build disagree from
 * position 4 on (median 0.017, max 0.16; no router near-tie in the AVX-512 build's scores,
 * smallest margin 3.7e-4): the fast path agrees with the AVX2 build to float noise at 90 % of
 * the positions and is held there, and within the builds' spread of the other. The router is
 * that sensitive: the avx2 table's element-wise steps (exp by polynomial, within ulps of libm's
 * expf: test_vec) flip one route at position 112 of 114 on an AMD Zen 3 (max 0.158 there and
 * 0.037 at 113, every other position 9.5e-7; the scalar table 9.5e-7 everywhere), as large a
 * move as the two builds' own disagreement, so the largest position is bounded by that.
 * Measured: F16 median 5e-4, max 0.0074 (both builds); small-glm4moe-q4_k_m median 3e-7,
 * max 0.073. */
static void test_family_glm4moe(void **s)
{
    (void)s;
    const char *model = DATA "tiny-glm4moe-q4_0.gguf";
    compare_lim(DATA "tiny-glm4moe-f16.gguf", f16_self, DATA "tiny-glm4moe-f16.llama-logits.bin",
                f16_llama);
    two_builds b;
    two_builds_load("tiny-glm4moe-q4_0", &b);
    assert_true(b.spread.median > 1e-3); /* the premise: the two builds differ */
    const t_logit_stats sp = b.spread;
    /* the reference's float activations against Q4_0 weights (measured: p90 0.15, a router flip
     * reaching 3.5, KL 0.011: routed weights scaled by 2.5 amplify the 8-bit error) */
    compare_lim(model, (limits){INFINITY, 0.2, 4.5, 0.93, 0.02},
                DATA "tiny-glm4moe-q4_0.llama-avx2-logits.bin",
                (limits){1e-5, 1e-5, 1.01 * sp.max, 1.0, sp.kl});
    check_limits("fast vs llama.cpp (AVX-512 build)", model,
                 t_compare_logits(b.fast, b.native, b.n, b.nv),
                 /* 10 %: the avx2 table's one flipped route (above) adds its own to the spread
                  * (measured on Zen 3: median 0.0818 and KL 3.46e-4 against 0.0812, 3.28e-4) */
                 (limits){1.1 * sp.median, 1.1 * sp.p90, 1.1 * sp.max, sp.top1, 1.1 * sp.kl});
    two_builds_free(&b);
    compare_lim(DATA "small-glm4moe-q4_k_m.gguf", (limits){INFINITY, 0.3, 6.0, 0.93, 0.04},
                DATA "small-glm4moe-q4_k_m.llama-logits.bin", quant_llama);
}

/* ernie4_5-moe (ERNIE-4.5-21B-A3B, ERNIE-4.5-300B-A47B): q/k/v biases, normal RoPE, a dense
 * first layer, a softmax router whose choice adds exp_probs_b, renormalised, one shared expert of
 * expert_shared_feed_forward_length. Measured against llama.cpp (both its AVX-512 and AVX2
 * builds, avx512 table): F16 max 0.0042, Q4_0 max 1.9e-6. */
static void test_family_ernie(void **s)
{
    (void)s;
    family("tiny-ernie", quant_self, (limits){1e-5, 1e-5, 1e-4, 1.0, 1e-10});
}

/* granitemoe (granite-3.0/3.1 MoE): Mixtral's layers with muP's multipliers (embeddings x12,
 * each block's output x0.22 before the residual, q.k x1/64, logits x1/6) and, in
 * GraniteMoeShared, an ungated shared expert. Measured against llama.cpp 3f545bec (its AVX-512
 * and AVX2 builds give the same Q4_0 logits), per-position max |diff|: F16 median 9.5e-7, max
 * 1.9e-4; Q4_0 median 4.8e-7, max 9.5e-7 (both files). */
static void test_family_granitemoe(void **s)
{
    (void)s;
    const limits q4_0_llama = {1e-5, 1e-5, 1e-4, 1.0, 1e-10};
    family("tiny-granitemoe", quant_self, q4_0_llama);
    compare_lim(DATA "tiny-granitemoe-shared-q4_0.gguf", quant_self,
                DATA "tiny-granitemoe-shared-q4_0.llama-logits.bin", q4_0_llama);
}

/* hunyuan-moe (Hunyuan-A13B): per-head q/k norms after NEOX RoPE, a softmax top-k renormalised,
 * one ungated shared expert on every layer. Measured against llama.cpp 3f545bec (per-position
 * max |diff|): F16 median 0.0017, max 0.0049; Q4_0 median 9.5e-7 (its AVX2 build gives the same
 * Q4_0 logits bit for bit), max 0.02 where one 8-bit activation rounds the other way. The F32
 * file (not committed) agrees to 7.6e-6 on both paths; with Q4_0's 8-bit activations the fast
 * path moves further from the float reference here than on the other tiny files (p90 0.123,
 * one router flip), so that limit is Llama 4's. */
static void test_family_hunyuan(void **s)
{
    (void)s;
    family("tiny-hunyuan", (limits){INFINITY, 0.2, 3.0, 0.93, INFINITY}, quant_llama);
}

/* phimoe (Phi-3.5-MoE, llama.cpp's phi3 graph): RMS norms with biases, q/k/v and output
 * projections with biases, NEOX RoPE with LongRoPE's factors and attn_factor, queries scaled
 * before attention, a softmax top-2 renormalised, an output bias. tiny-ids.txt (114 tokens)
 * turns by the short factors, the same text three times (342 tokens, past the original 256)
 * by the long ones, llama.cpp's with its context at 512. Measured against llama.cpp 3f545bec
 * (per-position max |diff|): see the limits. */
static void test_family_phimoe(void **s)
{
    (void)s;
    family("tiny-phimoe", quant_self, quant_llama);
    compare_times(DATA "tiny-phimoe-f16.gguf", 3, f16_self,
                  DATA "tiny-phimoe-f16.llama-long-logits.bin", f16_llama);
}

/* bailingmoe2 (Ling 2.0): q, k and v in one fused attn_qkv, per-head q/k norms before NEOX RoPE
 * on half of each head, a dense first layer, 16 experts in 4 groups (2 eligible) chosen by a
 * sigmoid router with selection bias, renormalised and scaled by 2.5, 2 shared experts of 32
 * each, a multi-token-prediction block not run. Measured against llama.cpp 3f545bec (per-position
 * max |diff|): F16 median 3.5e-4, max 0.0042; Q4_0 median 1.2e-7, max 9.5e-7 (its AVX2 build
 * gives the same Q4_0 logits bit for bit). The reference's float activations against Q4_0
 * weights: median 0.10, p90 0.128, max 1.04, KL 0.0012 (the routed weights' 2.5 amplifies the
 * 8-bit error, as in glm4moe). */
static void test_family_bailingmoe2(void **s)
{
    (void)s;
    family("tiny-bailingmoe2", (limits){INFINITY, 0.16, 2.0, 0.93, 0.005},
           (limits){1e-5, 1e-5, 1e-4, 1.0, 1e-10});
}

/* dots1 (dots.llm1): Qwen3's attention with DeepSeek-V3's experts (a dense first layer, 2 shared
 * experts, a sigmoid router with selection bias, renormalised and scaled by 2.5). Measured
 * against llama.cpp 3f545bec: F16 median 4.9e-4, max 0.0070; Q4_0 median 2.4e-7, max 0.10 where
 * an 8-bit activation rounds the other way (its AVX2 build differs from its AVX-512 one by
 * 0.028 there). The reference's float activations against Q4_0 weights move further (median
 * 0.13, p90 0.20, router flips reaching 6.7, top-1 97.4 %, KL 0.018: 8 experts of which the 2
 * chosen are scaled by 2.5 beside 2 shared ones), which the self limits allow. */
static void test_family_dots1(void **s)
{
    (void)s;
    family("tiny-dots1", (limits){INFINITY, 0.25, 8.0, 0.93, 0.03}, quant_llama);
}

/* minimax-m2 (MiniMax-M2): q/k norms over the whole projections (k's over the 2 KV heads),
 * NEOX RoPE on half of each head, 16 experts top-4 by a sigmoid router with selection bias,
 * renormalised. Measured against llama.cpp 3f545bec: F16 median 1.5e-4, max 0.0027; Q4_0 max
 * 9.5e-7 (its AVX2 build gives the same Q4_0 logits bit for bit); F32 (not committed) 6.7e-6
 * on both paths. The reference's float activations against Q4_0 weights (per-position max):
 * median 0.066, a router flip reaching 1.45. */
static void test_family_minimax_m2(void **s)
{
    (void)s;
    family("tiny-minimax-m2", quant_self, (limits){1e-5, 1e-5, 1e-4, 1.0, 1e-10});
}

/* exaone-moe (K-EXAONE): per-head q/k norms, RoPE on the sliding-window layers only (0-2, a
 * window of 40 of tiny-ids.txt's 114 positions), layer 3 global without RoPE or temperature, a
 * dense first layer, a sigmoid router with selection bias renormalised and scaled by 2.5, a
 * shared expert, a multi-token-prediction block not run. Measured against llama.cpp 3f545bec:
 * F32 (not committed) 5.7e-6 on both paths; F16 median 4.7e-4, max 0.0055 (its two builds differ
 * by 0.0057); Q4_0: its AVX2 build bit for bit (max 9.5e-7), its AVX-512 build median 9.5e-7,
 * p90 0.067, max 0.10 (its two builds differ from each other the same way). The reference's float activations
 * against Q4_0 weights: median 0.12, p90 0.15, max 0.21 (the routed weights' 2.5, as in
 * glm4moe). */
static void test_family_exaone_moe(void **s)
{
    (void)s;
    const char *model = DATA "tiny-exaone-moe-q4_0.gguf";
    const limits self = {INFINITY, 0.2, 3.0, 0.93, 0.005};
    compare_lim(DATA "tiny-exaone-moe-f16.gguf", f16_self,
                DATA "tiny-exaone-moe-f16.llama-logits.bin", f16_llama);
    compare_lim(model, self, DATA "tiny-exaone-moe-q4_0.llama-avx2-logits.bin",
                (limits){1e-5, 1e-5, 1e-4, 1.0, 1e-10});
    compare_lim(model, self, DATA "tiny-exaone-moe-q4_0.llama-logits.bin", quant_llama);
}

/* bailingmoe (Ling 1.x): q, k and v fused in attn_qkv, normal RoPE, no q/k norm, 8 experts top-2
 * by a softmax renormalised (expert_weights_norm), 2 shared experts. Measured against llama.cpp
 * 3f545bec (per-position max |diff|): F32 (not committed) 5.7e-6 on both paths; F16 median
 * 1.1e-4, max 0.0051; Q4_0 median 1.2e-7, max 0.092 where an 8-bit activation rounds the other
 * way (its AVX2 build gives the same Q4_0 logits bit for bit). */
static void test_family_bailingmoe(void **s)
{
    (void)s;
    family("tiny-bailingmoe", quant_self, quant_llama);
}

/* qwen3vlmoe (Qwen3-VL-MoE's language model on text): tiny-qwen3moe's layers with interleaved
 * multimodal RoPE (sections [6, 4, 4, 2]: pairs 13 and 14 on the fourth axis, which stays at 0
 * for text) and 2 deepstack layers (zeros for text in llama.cpp). Measured against llama.cpp
 * 3f545bec (per-position max |diff|): F32 (not committed) 1.05e-5 on both paths; F16 median
 * 0.0022, max 0.0074; Q4_0 median 0, max 0.018. Turning those two pairs as plain NEOX RoPE
 * would move F32 by 0.038 and Q4_0 by 5.3. The reference's float activations against Q4_0
 * weights move as on tiny-qwen3moe (p90 0.19, a router flip reaching 3.25), hence its limits. */
static void test_family_qwen3vlmoe(void **s)
{
    (void)s;
    family("tiny-qwen3vlmoe", (limits){INFINITY, 0.3, 9.0, 0.93, 0.05}, quant_llama);
}

/* smallthinker (SmallThinker): the router on each layer's input before attention, ReGLU experts,
 * a softmax top-2 renormalised, RoPE on layers 1-3 and none on layers 0 and 4 (llama.cpp's step
 * of 4 with a window), a tied head. Measured against llama.cpp 3f545bec: F32 max 1.1e-5 on both
 * paths (the graph is the same); F16 max 0.0077 (its two builds differ by 0.010). Q4_0 is bit
 * for bit up to position 7, then from position 8 on median 0.11, max 0.20, top-1 95.6 % (both of
 * its builds alike): the difference appears only with 8-bit activations and global layers
 * without RoPE (with RoPE on every layer, windows or not, this file agrees to 1.9e-6), so a
 * float-order difference in llama.cpp's attention there flips roundings; its cause was not
 * found. */
static void test_family_smallthinker(void **s)
{
    (void)s;
    const limits f32 = {1e-4, 1e-3, 1e-3, 1.0, 1e-9};
    compare_lim(DATA "tiny-smallthinker-f32.gguf", f32,
                DATA "tiny-smallthinker-f32.llama-logits.bin", f32);
    compare_lim(DATA "tiny-smallthinker-q4_0.gguf", (limits){INFINITY, 0.25, 6.0, 0.93, 0.03},
                DATA "tiny-smallthinker-q4_0.llama-logits.bin",
                (limits){0.15, 0.2, 0.3, 0.95, 1e-3});
}

/* A fused attn_qkv (and attn_qkv.bias), which llama.cpp loads in every family: tiny-qwen2moe-qkv
 * holds tiny-qwen2moe's q, k and v weights and biases end to end in one tensor each, so both
 * paths must give tiny-qwen2moe's logits bit for bit, and llama.cpp's logits of the separate
 * file within the usual limits. */
static void test_fused_qkv(void **s)
{
    (void)s;
    static const char *const types[] = {"f16", "q4_0"};
    for (size_t i = 0; i < ES_LEN(types); i++) {
        const char *path = t_tmp_path("fused-qkv.gguf");
        es_synth_opts o = {.arch = "qwen2moe", .preset = "tiny-qwen2moe-qkv", .type = types[i],
                           .seed = 1};
        assert_int_equal(es_synth(&o, path), ES_OK);
        char split[128], golden[128];
        snprintf(split, sizeof(split), DATA "tiny-qwen2moe-%s.gguf", types[i]);
        snprintf(golden, sizeof(golden), DATA "tiny-qwen2moe-%s.llama-logits.bin", types[i]);
        size_t n, nv, n2, nv2;
        float *fast, *ref, *fast2, *ref2;
        prefill_both(path, &n, &nv, &fast, &ref);
        prefill_both(split, &n2, &nv2, &fast2, &ref2);
        assert_int_equal(n, n2);
        assert_int_equal(nv, nv2);
        assert_memory_equal(fast, fast2, sizeof(float) * n * nv);
        assert_memory_equal(ref, ref2, sizeof(float) * n * nv);
        compare_lim(path, i ? quant_self : f16_self, golden, i ? quant_llama : f16_llama);
        free(fast);
        free(ref);
        free(fast2);
        free(ref2);
    }
}

/* llama3's RoPE frequency factors on a Mixtral-kind file (tiny-mixtral-l3: rope_freqs.weight, x8
 * of 64 positions, as mixtures built of Llama 3 models carry it); measured against llama.cpp
 * (per-position max |diff|): median 2.7e-4, max 0.0042. */
static void test_family_mixtral_l3(void **s)
{
    (void)s;
    compare_lim(DATA "tiny-mixtral-l3-f16.gguf", f16_self,
                DATA "tiny-mixtral-l3-f16.llama-logits.bin", f16_llama);
}

/* Llama 4 (tiny-llama4: Maverick's interleave, two NoPE and six chunked layers, q/k norms after
 * RoPE, llama3 frequency factors, the router weight on the one expert's input). F16 within
 * the family terms (per-position max |diff|, measured: median 0.0033, max 0.0052, KL 4.4e-7).
 * Q4_0 agrees with llama.cpp (its AVX2 and AVX-512 builds alike) to 9.5e-7 at the median; from position 70,
 * where attention first spans two key blocks, one 8-bit activation of layer 0 rounds the other
 * way (1.4e-4), which eight layers of top-1 routing grow to at most 0.12 by the last positions.
 * Fast vs reference (float activations) moves more over eight layers than over two (p90 0.12). */
static void test_family_llama4(void **s)
{
    (void)s;
    family("tiny-llama4", (limits){INFINITY, 0.2, 3.0, 0.93, INFINITY}, quant_llama);
}

/* Llama 4 past its first 8,192-position chunk: tiny-llama4-f16 over the 8,320 ids of
 * tiny-llama4-long-ids.txt, positions 8,160-8,319 against llama.cpp's (tests/data/README.md).
 * From 8,192 on the chunked layers see their own chunk only, and from 8,191 the NoPE layers
 * scale their queries by log(2) 0.1 + 1 (es_attn_temperature). Measured (per-position max):
 * median 0.0030, max 0.0058, KL 3.8e-7, as F16 agrees below the chunk; a whole window gives a
 * median of 0.69, no temperature 0.025. Not run under qemu or TSan (tools/cross-aarch64.sh,
 * tools/test-all.sh): over 15 minutes there. */
static void test_llama4_past_chunk(void **s)
{
    (void)s;
    size_t n;
    int32_t *ids = t_read_ids(DATA "tiny-llama4-long-ids.txt", &n);
    assert_int_equal(n, 8320);
    es_model *m = open_ok(DATA "tiny-llama4-f16.gguf");
    const size_t nv = (size_t)es_model_n_vocab(m), first = 8160, rows = n - first;
    float *all = malloc(sizeof(float) * n * nv);
    assert_non_null(all);
    es_session_params o = es_session_default_params();
    o.n_threads = 2;
    assert_int_equal(es_prefill(m, ids, n, &o, 1, all), ES_OK);
    float *want = read_llama_logits(DATA "tiny-llama4-f16-long.llama-logits.bin", rows, nv);
    /* over 8,320 positions a router near-tie may flip on one row (three rows of the 8,160
     * before these did on x86-64), so the max and KL allow one; the median and p90 hold the
     * rest to F16 noise */
    check_limits("fast vs llama.cpp past the chunk", "tiny-llama4-f16",
                 t_compare_logits(all + first * nv, want, rows, nv),
                 (limits){f16_llama.median, f16_llama.p90, 3.5, 0.98, 1e-3});
    free(want);
    free(all);
    free(ids);
    es_model_close(m);
}

/* MXFP4 (gpt-oss's expert format; llama-quantize's MXFP4_MOE mix: experts MXFP4, every other
 * matrix Q8_0) on gpt-oss and on qwen3moe (tests/data/README.md). The fast path agrees with
 * llama.cpp's logits to float noise (measured, scalar, avx2 and avx512 tables alike: median
 * 9.5e-7 for both, max 1.4e-6 / 0.068), so the median and KL are held tight; the reference's
 * float activations are the usual 8-bit error (a router flip allowed). */
static void test_mxfp4_files(void **s)
{
    (void)s;
    const limits llama = {1e-5, 0.05, 0.15, 0.99, 2e-5};
    compare_lim(DATA "tiny-gptoss-mxfp4_moe.gguf", (limits){INFINITY, 0.2, 6.0, 0.93, 0.02},
                DATA "tiny-gptoss-mxfp4_moe.llama-logits.bin", llama);
    compare_lim(DATA "small-qwen3moe-mxfp4_moe.gguf", (limits){INFINITY, 0.2, 4.0, 0.93, 0.012},
                DATA "small-qwen3moe-mxfp4_moe.llama-logits.bin", llama);
}

/* YaRN rope scaling on another family: tiny-qwen3moe's weights with rope.scaling x4 of 64
 * positions (which moves llama.cpp's logits by 1.5 at the median from the unscaled file). */
static void test_yarn_qwen3moe(void **s)
{
    (void)s;
    family("tiny-qwen3moe-yarn", (limits){INFINITY, 0.3, 9.0, 0.93, 0.05},
           (limits){0.1, 0.15, 0.3, 0.96, 3e-4});
}

/* Q4_K_M files as llama-quantize writes them of the small-* F16 presets (tests/data/README.md):
 * the mix of real downloads (Q4_K, with Q5_K, Q6_K and Q8_0 for some tensors and the head).
 * The terms against llama.cpp's own logits: top-1 >= 98 %, mean KL <= 2e-4 (measured
 * 99.1-100 % and 0.7-1.9e-4; with per-32 float activation scales it was 97.4-98.2 % and
 * 6-18e-4). small-qwen3moe has an early router near-tie that moves most later positions by
 * ~0.06 (median), the others agree to float noise at the median. Fast vs reference is the per-256
 * activation error (KL 4.4-14e-4). */
static void test_family_q4_k_m(void **s)
{
    (void)s;
    /* small-lfm2moe: a router flip of the reference path (float activations) moves one
     * position by 3.5 and the next two through the convolution. Against llama.cpp its KL is
     * 1.9e-4 with the x86 tables but 2.5e-4 (top-1 98.2 %) with AArch64's, whose element-wise
     * float steps tip a sigmoid-router near-tie the other way: the limit allows 3e-4 there. */
    static const struct {
        const char *stem;
        double median, self_max, self_kl, llama_kl, llama_max; /* llama_max 0: quant_llama's */
    } files[] = {
        {"small-qwen3moe", 0.1, 1.0, 2e-3, 2e-4, 0}, {"small-mixtral", 1e-4, 1.0, 2e-3, 2e-4, 0},
        {"small-deepseek", 1e-4, 1.0, 2e-3, 2e-4, 0}, {"small-lfm2moe", 0.1, 4.0, 0.012, 3e-4, 0}};
    for (size_t i = 0; i < T_LEN(files); i++) {
        const limits self = {INFINITY, 0.2, files[i].self_max, 0.96, files[i].self_kl};
        char model[128], golden[128];
        snprintf(model, sizeof(model), DATA "%s-q4_k_m.gguf", files[i].stem);
        snprintf(golden, sizeof(golden), DATA "%s-q4_k_m.llama-logits.bin", files[i].stem);
        limits llama = quant_llama;
        llama.median = files[i].median;
        llama.kl = files[i].llama_kl;
        if (files[i].llama_max > 0) llama.max = files[i].llama_max;
        compare_lim(model, self, golden, llama);
    }
}

/* Q3_K_M files as llama-quantize writes them of small-qwen3moe and small-mixtral
 * (tests/data/README.md): Q3_K for the expert gate/up, attn_q and the embedding, with Q4_K,
 * Q5_K and Q8_0 elsewhere. The fast path agrees with llama.cpp's logits of each file to float
 * noise (measured on x86, every table: median 1.9e-6, max 0.06-0.07 / 4.8e-6, KL 2.8e-6 /
 * 1.5e-13), so the median and KL are held tighter than quant_llama's. The reference keeps float
 * activations: against 3-bit weights that is a larger error than for Q4_K_M (a router flip in
 * each file: max 3.5 / 2.5, top-1 98.2 % / 95.6 %, KL 8.9e-3 / 2.7e-3). */
/* The small-qwen3moe and small-mixtral files of llama-quantize's mix `mix` (a file name part)
 * against llama.cpp's logits within llama[i] (i: the stem), and the reference within the
 * low-bit self limits. */
static void small_mix(const char *mix, const limits llama[2])
{
    static const char *const stems[] = {"small-qwen3moe", "small-mixtral"};
    for (size_t i = 0; i < T_LEN(stems); i++) {
        char model[128], golden[128];
        snprintf(model, sizeof(model), DATA "%s-%s.gguf", stems[i], mix);
        snprintf(golden, sizeof(golden), DATA "%s-%s.llama-logits.bin", stems[i], mix);
        compare_lim(model, (limits){INFINITY, 0.2, 4.0, 0.93, 0.012}, golden, llama[i]);
    }
}

static void test_family_q3_k_m(void **s)
{
    (void)s;
    limits llama = quant_llama;
    llama.median = 1e-4;
    llama.kl = 2e-5;
    small_mix("q3_k_m", (limits[2]){llama, llama});
}

/* Q2_K files as llama-quantize writes them of small-qwen3moe and small-mixtral
 * (tests/data/README.md): Q2_K for the expert gate/up, attn_q and the embedding, Q3_K for the
 * expert down, with Q5_K, Q6_K and Q8_0 elsewhere. The fast path agrees with llama.cpp's logits
 * to float noise (measured on x86, scalar, avx512 and amx tables: median 2.4e-6 / 1.9e-6, max
 * 0.10 / 0.079, KL 3.2e-5 / 3.6e-6, top-1 100 %), so the median is held at 1e-4. On the avx2 and
 * avxvnni tables, whose element-wise steps sum in another order (8 lanes), one router near-tie
 * of small-mixtral falls the other way and moves the positions after it (max 1.46, top-1
 * 97.4 %, KL 2.4e-3, median still 1.9e-6; the same numbers with the scalar Q2_K kernel inside
 * that table, so not a Q2_K kernel's doing): that file's max, top-1 and KL allow one flip.
 * Against the reference's float activations, 2-bit weights move the logits more (mixtral: a
 * router flip, max 3.55, top-1 95.6 %, KL 8.6e-3). */
static void test_family_q2_k(void **s)
{
    (void)s;
    limits qwen = quant_llama;
    qwen.median = 1e-4;
    qwen.kl = 1e-4;
    small_mix("q2_k", (limits[2]){qwen, {1e-4, 0.15, 2.0, 0.96, 5e-3} /* one router flip */});
}

/* small-deepseek2 in Q4_K_M: a file on which llama.cpp disagrees with itself beyond the issue's
 * terms. Its builds with and without AVX-512 (tests/data/README.md) differ by top-1 94.7 %,
 * mean KL 6.5e-4: both agree to float noise until one activation rounding (Q8_K, Q8_0) falls
 * the other way, and from there every later position moves by ~0.1. MLA rounds ~1,500
 * activations per token per layer (each head's latent output, q_nope) whose float values
 * depend on the attention's summation order, so a perturbation at one position re-rounds many
 * values at every later one: the whole activation-rounding noise (fast vs reference, KL 1.3e-3)
 * is drawn again. A hidden size of 512 or no YaRN changes nothing (KL 5.2e-4, 6.5e-4 between
 * the llama.cpp builds). So the terms are checked relative to llama.cpp's own spread, computed
 * here from the two sets of logits: estream must be at least as close to each llama.cpp build
 * as the builds are to each other (measured: KL 7.0e-4 / 4.1e-4 against the spread's 6.5e-4,
 * top-1 96.5 % / 98.2 % against 94.7 %; the scalar table 7.1e-4 / 3.1e-4). The premise is
 * asserted too, so that a regenerated, better-conditioned file gets the plain terms instead. */
static void test_mla_q4_k_m_within_llama_spread(void **s)
{
    (void)s;
    two_builds b;
    two_builds_load("small-deepseek2-q4_k_m", &b);
    const t_logit_stats spread = b.spread;
    assert_true(spread.kl > quant_llama.kl || spread.top1 < quant_llama.top1); /* the premise */
    /* within the spread (KL with 25 % room for other tables' float order); the per-position
     * differences at the spread's size (median 0.12, max 0.44) */
    const limits within = {0.15, 0.2, 0.6, spread.top1, 1.25 * spread.kl};
    check_limits("fast vs llama.cpp (AVX-512 build)", b.model,
                 t_compare_logits(b.fast, b.native, b.n, b.nv), within);
    check_limits("fast vs llama.cpp (AVX2 build)", b.model,
                 t_compare_logits(b.fast, b.avx2, b.n, b.nv), within);
    /* the reference keeps float activations: the whole rounding noise */
    check_limits("fast vs reference", b.model, t_compare_logits(b.fast, b.ref, b.n, b.nv),
                 (limits){INFINITY, 0.2, 1.0, 0.96, 2e-3});
    two_builds_free(&b);
}

/* The types llama-quantize falls back to where rows do not fit its K-quants' 256 (DeepSeek's
 * expert FFN of 1408, every row of a hidden-64 model): tiny-deepseek in llama-quantize's
 * Q4_K_M (Q5_0 and Q8_0 then), Q5_K_M (Q5_1, Q8_0) and IQ4_XS (IQ4_NL, Q5_1 for its first
 * layers), and small-qwen3moe in IQ4_XS (IQ4_XS blocks). The fast path against llama.cpp's
 * logits of each file; the reference path keeps floats (as for every quantized file). */
static void test_fallback_types(void **s)
{
    (void)s;
    /* measured: 1e-6 at the median and max for all four with the scalar table; the SIMD
     * tables' element-wise float steps tip one router near-tie of tiny-deepseek-iq4_xs at
     * position 21 (median 0.057, max 0.14, KL 1.5e-4 from there on) */
    const struct { const char *stem; limits llama; } files[] = {
        {"tiny-deepseek-q4_k_m", quant_llama},
        {"tiny-deepseek-q5_k_m", quant_llama},
        {"tiny-deepseek-iq4_xs", {0.1, 0.15, 0.3, 0.98, 3e-4}},
        /* 1e-6 on the AVX-512 Zen 4 machine the golden was checked on; on a 2-vCPU AVX2-only
         * Zen 3 (2026-12-04) median 0.06, max 0.12, KL 1.5e-4 with every table, scalar
         * included: not understood yet (no memory error under valgrind; tests/data/README.md) */
        {"small-qwen3moe-iq4_xs", {0.1, 0.15, 0.3, 0.98, 3e-4}}};
    for (size_t i = 0; i < T_LEN(files); i++) {
        char model[128], golden[128];
        snprintf(model, sizeof(model), DATA "%s.gguf", files[i].stem);
        snprintf(golden, sizeof(golden), DATA "%s.llama-logits.bin", files[i].stem);
        compare_lim(model, (limits){INFINITY, 0.2, 3.0, 0.93, INFINITY}, golden, files[i].llama);
    }
}

/* Grouped-query attention (2 KV heads for 4 query heads): llama.cpp's olmoe cannot load it, so
 * the fast and reference paths (two separate attention implementations) check each other. */
static void test_fast_gqa(void **s)
{
    (void)s;
    const char *path = t_tmp_path("tiny-gqa.gguf");
    es_synth_opts o = {.arch = "olmoe", .preset = "tiny-gqa", .type = "q8_0", .seed = 3};
    assert_int_equal(es_synth(&o, path), ES_OK);
    compare_lim(path, quant_self, NULL, quant_llama);
    unlink(path);
}

/* ---- the sizes where the fast path splits its work ---------------------------------------------
 * The tiny models fit every phase in one work item: hidden and FFN 64 (< the 128-column chunks),
 * 114 tokens (< one 128-key attention block), 228 routes per layer (< one plan invocation). The
 * `small` preset (hidden 320, FFN 288, top-4 of 8 experts) with SMALL_T tokens splits all of
 * them: 7 key blocks (the last query alone in its block and on a key block's first key), 3
 * column chunks with a tail in gate/up and down, a busy expert past the 512-row block, and with
 * a small plan capacity several invocations per layer. */
enum { SMALL_T = 769 };

/* A small model written to TMPDIR and SMALL_T ids drawn from its vocabulary (BOS first). */
static es_model *small_model(const char *type, int32_t **ids_out)
{
    char name[64];
    snprintf(name, sizeof(name), "small-%s.gguf", type);
    const char *path = t_tmp_path(name);
    es_synth_opts so = {.arch = "olmoe", .preset = "small", .type = type, .seed = 11};
    assert_int_equal(es_synth(&so, path), ES_OK);
    es_model *m = open_ok(path);
    unlink(path); /* the mapping stays valid */
    int32_t *ids = malloc(sizeof(int32_t) * SMALL_T);
    t_rng r = {99};
    ids[0] = es_model_bos(m);
    for (int i = 1; i < SMALL_T; i++) ids[i] = (int32_t)(t_next(&r) % (uint64_t)es_model_n_vocab(m));
    *ids_out = ids;
    return m;
}

/* The split really happens: some expert of some layer takes more routes than a 512-row block. */
static void assert_busy_expert(const es_model *m, const int32_t *ids)
{
    es_session_params sp = es_session_default_params();
    sp.n_threads = 2;
    es_session *ses;
    assert_int_equal(es_session_create(m, &sp, &ses), ES_OK);
    float *logits = malloc(sizeof(float) * (size_t)es_model_n_vocab(m));
    assert_int_equal(es_session_prefill(ses, ids, SMALL_T, 0, logits), ES_OK);
    free(logits);
    int64_t busiest = 0, counts[8];
    for (int il = 0; il < es_model_n_layer(m); il++) {
        assert_int_equal(es_session_route_counts(ses, il, counts, 8), ES_OK);
        for (int e = 0; e < 8; e++) busiest = counts[e] > busiest ? counts[e] : busiest;
    }
    es_session_destroy(ses);
    print_message("busiest expert: %lld routes\n", (long long)busiest);
    assert_true(busiest > 512);
}

static void check_small(const char *type, double p90, double max, double top1)
{
    int32_t *ids;
    es_model *m = small_model(type, &ids);
    const size_t nv = (size_t)es_model_n_vocab(m), bytes = sizeof(float) * SMALL_T * nv;
    float *ref = malloc(bytes), *fast = malloc(bytes), *other = malloc(bytes);
    es_session_params o = es_session_default_params();
    o.reference = 1;
    o.n_threads = 2;
    int o_all_logits = 1;
    assert_int_equal(es_prefill(m, ids, SMALL_T, &o, o_all_logits, ref), ES_OK);
    o.reference = 0;
    assert_int_equal(es_prefill(m, ids, SMALL_T, &o, o_all_logits, fast), ES_OK);
    assert_busy_expert(m, ids);
    t_logit_stats s = t_compare_logits(fast, ref, SMALL_T, nv);
    print_message("small %s, %d tokens: fast vs reference per-position max |diff|: median %.3g, "
                  "p90 %.3g, max %.3g; top-1 %.1f%%\n", type, SMALL_T, s.median, s.p90, s.max,
                  100 * s.top1);
    assert_true(s.p90 <= p90);
    assert_true(s.max <= max);
    assert_true(s.top1 >= top1);
    /* bit-identical for 1-4 threads and plan capacities that split every layer's 3,076 routes
     * into 3-10 invocations (one of them not a multiple of top-k, so a token's routes straddle) */
    static const int caps[] = {0, 1200, 333};
    for (int t = 1; t <= 4; t++)
        for (size_t c = 0; c < T_LEN(caps); c++) {
            if (t == 2 && caps[c] == 0) continue; /* that is `fast` */
            o.n_threads = t;
            o.plan_capacity = caps[c];
            assert_int_equal(es_prefill(m, ids, SMALL_T, &o, o_all_logits, other), ES_OK);
            if (memcmp(other, fast, bytes) != 0)
                fail_msg("small %s: %d threads, capacity %d differ from 2 threads", type, t, caps[c]);
        }
    free(ref);
    free(fast);
    free(other);
    free(ids);
    es_model_close(m);
}

/* F32: only the float kernels' summation order differs from the reference. */
static void test_small_f32(void **s) { (void)s; check_small("f32", 1e-4, 1e-4, 0.99); }
/* Q4_0: the fast path quantizes activations per block of 32, the reference does not. */
static void test_small_q4_0(void **s) { (void)s; check_small("q4_0", 0.12, 3.0, 0.93); }

static void test_fast_threads_bit_identical(void **state)
{
    (void)state;
    size_t n;
    int32_t *ids = t_read_ids(DATA "tiny-ids.txt", &n);
    const char *models[] = {DATA "tiny-q4_0.gguf", DATA "tiny-f32.gguf"};
    for (size_t mi = 0; mi < T_LEN(models); mi++) {
        es_model *m = open_ok(models[mi]);
        const size_t nv = (size_t)es_model_n_vocab(m);
        float *first = malloc(sizeof(float) * n * nv), *other = malloc(sizeof(float) * n * nv);
        es_session_params o = es_session_default_params();
        o.n_threads = 1;
        int o_all_logits = 1;
        assert_int_equal(es_prefill(m, ids, n, &o, o_all_logits, first), ES_OK);
        for (size_t i = 0; i < n * nv; i++) /* equal garbage would compare equal */
            if (!isfinite(first[i])) fail_msg("%s: logit %zu is not finite", models[mi], i);
        for (int t = 2; t <= 4; t++) {
            o.n_threads = t;
            assert_int_equal(es_prefill(m, ids, n, &o, o_all_logits, other), ES_OK);
            assert_memory_equal(first, other, sizeof(float) * n * nv);
        }
        /* a shorter prompt after a longer one (buffers reused) gives the prefix's logits */
        o.n_threads = 3;
        assert_int_equal(es_prefill(m, ids, n / 2, &o, o_all_logits, other), ES_OK);
        assert_memory_equal(first, other, sizeof(float) * (n / 2) * nv);
        free(first);
        free(other);
        es_model_close(m);
    }
    free(ids);
}

/* Fast-path perplexity equals the reference path's within 0.1%. */
static void test_fast_ppl(void **state)
{
    (void)state;
    size_t len = 0;
    char *text = t_read_file(DATA "ppl-text.txt", &len);
    assert_non_null(text);
    const char *models[] = {DATA "tiny-f32.gguf", DATA "tiny-q4_0.gguf"};
    for (size_t mi = 0; mi < T_LEN(models); mi++) {
        es_model *m = open_ok(models[mi]);
        int32_t *ids = malloc(sizeof(int32_t) * (len + 2));
        size_t n;
        assert_int_equal(es_tokenize(m, text, len, 1, 0, ids, len + 2, &n), ES_OK);
        es_session_params o = es_session_default_params();
        o.reference = 1;
        o.n_threads = 2;
        es_ppl_result ref, fast;
        assert_int_equal(es_perplexity(m, ids, n, 128, 0, &o, NULL, NULL, &ref), ES_OK);
        o.reference = 0;
        assert_int_equal(es_perplexity(m, ids, n, 128, 0, &o, NULL, NULL, &fast), ES_OK);
        print_message("%s: ppl reference %.6f fast %.6f\n", models[mi], ref.ppl, fast.ppl);
        assert_true(fabs(ref.ppl - fast.ppl) / ref.ppl < 1e-3);
        free(ids);
        es_model_close(m);
    }
    free(text);
}

/* Synthetic routers are skewed like trained ones: in every layer the busiest expert takes well
 * over the mean share of routes and the idlest well under it. */
static void test_route_skew(void **state)
{
    (void)state;
    size_t n;
    int32_t *ids = t_read_ids(DATA "tiny-ids.txt", &n);
    es_model *m = open_ok(DATA "tiny-q8_0.gguf");
    int64_t counts[8];
    es_session_params sp = es_session_default_params();
    sp.n_threads = 2;
    es_session *ses;
    assert_int_equal(es_session_create(m, &sp, &ses), ES_OK);
    assert_int_equal(es_session_route_counts(ses, 0, counts, 8), ES_E_INVAL); /* none run yet */
    float *logits = malloc(sizeof(float) * 320);
    assert_int_equal(es_session_prefill(ses, ids, n, 0, logits), ES_OK);
    assert_int_equal(es_model_n_expert(m), 8);
    for (int il = 0; il < es_model_n_layer(m); il++) {
        assert_int_equal(es_session_route_counts(ses, il, counts, 8), ES_OK);
        int64_t sum = 0, mx = 0, mn = INT64_MAX;
        for (int e = 0; e < 8; e++) {
            sum += counts[e];
            mx = counts[e] > mx ? counts[e] : mx;
            mn = counts[e] < mn ? counts[e] : mn;
        }
        assert_int_equal(sum, (int64_t)n * 2); /* top-2: every token routed twice */
        print_message("layer %d: busiest %.2fx the mean, idlest %.2fx\n", il, mx / (sum / 8.0),
                      mn / (sum / 8.0));
        assert_true(mx >= 1.5 * (sum / 8.0));
        assert_true(mn <= 0.5 * (sum / 8.0));
    }
    assert_int_equal(es_session_route_counts(ses, 2, counts, 8), ES_E_INVAL); /* 2 layers */
    es_session_destroy(ses);
    free(logits);
    free(ids);
    es_model_close(m);
}

/* The fast path with each kernel table this CPU has (scalar, avx2, avxvnni, avx512; on AArch64
 * asimd, neon, i8mm) gives the same
 * logits within a small tolerance: the tables differ only in the exp approximation and the
 * float lane order of a few element-wise steps. */
static void test_fast_every_isa(void **state)
{
    (void)state;
    size_t n;
    int32_t *ids = t_read_ids(DATA "tiny-ids.txt", &n);
    const char *isas[] = {"scalar", "avx2", "avxvnni", "avx512", "amx", "asimd", "neon", "i8mm"};
    const char *models[] = {DATA "tiny-q4_0.gguf", DATA "tiny-f32.gguf"};
    int n_tables = 0;
    for (size_t i = 0; i < T_LEN(isas); i++) n_tables += es_kernels_available(isas[i]);
    if (n_tables < 2) {
        print_message("only the scalar kernel table runs on this CPU: nothing to compare, skipped\n");
        free(ids);
        skip();
    }
    for (size_t mi = 0; mi < T_LEN(models); mi++) {
        float *base = NULL;
        for (size_t i = 0; i < T_LEN(isas); i++) {
            if (!es_kernels_available(isas[i])) continue;
            es_model *m = open_ok(models[mi]);
            const size_t nv = (size_t)es_model_n_vocab(m);
            float *got = malloc(sizeof(float) * n * nv);
            es_session_params sp = es_session_default_params();
            sp.n_threads = 2;
            sp.kernels = isas[i];
            es_session *ses;
            assert_int_equal(es_session_create(m, &sp, &ses), ES_OK);
            es_run_stats rs;
            es_session_stats(ses, &rs);
            assert_string_equal(rs.kernels, isas[i]);
            assert_int_equal(es_session_prefill(ses, ids, n, 1, got), ES_OK);
            es_session_destroy(ses);
            if (!base) {
                base = got;
            } else {
                t_logit_stats s = t_compare_logits(got, base, n, nv);
                print_message("%s: %s vs scalar kernels: max |diff| %.3g, top-1 %.1f%%\n",
                              models[mi], isas[i], s.max, 100 * s.top1);
                assert_true(s.max <= 2e-3);
                free(got);
            }
            es_model_close(m);
        }
        free(base);
    }
    assert_int_equal(es_kernels_select("sse9"), ES_E_INVAL);
    es_session_params bad = es_session_default_params();
    bad.kernels = "sse9";
    es_model *m = open_ok(DATA "tiny-q4_0.gguf");
    es_session *ses = NULL;
    assert_int_not_equal(es_session_create(m, &bad, &ses), ES_OK);
    assert_null(ses);
    es_model_close(m);
    free(ids);
}

/* Every logit of a prefill of ids with session parameters p (NULL on failure, reported). */
static float *all_logits(es_model *m, const es_session_params *p, const int32_t *ids, size_t n)
{
    float *out = malloc(sizeof(float) * n * (size_t)es_model_n_vocab(m));
    es_session *s = NULL;
    if (es_session_create(m, p, &s) || es_session_prefill(s, ids, n, 1, out))
        fail_msg("%s session: %s", p->kernels, es_last_error());
    es_run_stats rs;
    es_session_stats(s, &rs);
    assert_string_equal(rs.kernels, p->kernels);
    es_session_destroy(s);
    return out;
}

/*
 * The amx table against avx512, bit for bit: every logit of the 114-token prompt on files whose
 * integer kinds span the table (Q4_0, Q8_0, Q5_0 and IQ4_NL at hidden 64; Q4_K, Q5_K, Q6_K,
 * Q3_K, Q2_K and IQ4_XS at 256; shared experts and dense layers in the deepseek files), resident on 1 and 3
 * threads (each worker configures its own tiles) and streamed on 2, from the GGUF and from a
 * pack (its tile layout for Q4_0 experts). The expert, attention-projection and head products
 * of 16 rows or more run on the tiles, the smaller ones on the avx512 kernels.
 */
static void test_amx_bit_identical(void **state)
{
    (void)state;
    if (!es_kernels_available("amx") || !es_kernels_available("avx512")) {
        print_message("amx: %s, skipped\n", es_kernels_why_not("amx"));
        skip();
    }
    size_t n;
    int32_t *ids = t_read_ids(DATA "tiny-ids.txt", &n);
    const char *models[] = {DATA "tiny-q4_0.gguf",           DATA "tiny-q8_0.gguf",
                            DATA "tiny-deepseek-q4_k_m.gguf", DATA "tiny-deepseek-iq4_xs.gguf",
                            DATA "small-qwen3moe-iq4_xs.gguf", DATA "small-deepseek-q4_k_m.gguf",
                            DATA "small-mixtral-q3_k_m.gguf", DATA "small-mixtral-q2_k.gguf",
                            DATA "tiny-gptoss-q4_0.gguf", DATA "tiny-gptoss-mxfp4_moe.gguf",
                            DATA "small-qwen3moe-mxfp4_moe.gguf", DATA "tiny-glm4moe-q4_0.gguf",
                            DATA "small-glm4moe-q4_k_m.gguf"};
    const char *pack = t_tmp_path("amx.pack");
    assert_int_equal(es_pack(models[0], pack, NULL, NULL), ES_OK);
    for (size_t mi = 0; mi <= T_LEN(models); mi++) {
        const char *path = mi < T_LEN(models) ? models[mi] : pack;
        es_model *m = open_ok(path);
        const size_t nv = (size_t)es_model_n_vocab(m), n_ids = n;
        es_session_params p = es_session_default_params();
        p.n_threads = 1;
        p.kernels = "avx512";
        float *want = all_logits(m, &p, ids, n_ids);
        p.kernels = "amx";
        /* (threads, streamed): resident 1 and 3, streamed 2 (the pack is read streamed only) */
        const int cfg[][2] = {{1, 0}, {3, 0}, {2, 1}};
        for (size_t c = mi < T_LEN(models) ? 0 : 2; c < T_LEN(cfg); c++) {
            p.n_threads = cfg[c][0];
            p.stream = cfg[c][1];
            p.groups = p.banks = cfg[c][1] ? 2 : 0;
            float *got = all_logits(m, &p, ids, n_ids);
            for (size_t i = 0; i < n_ids * nv; i++)
                if (memcmp(&got[i], &want[i], 4))
                    fail_msg("%s, %d threads%s: amx logit %zu of token %zu is %.9g, avx512's %.9g",
                             path, cfg[c][0], cfg[c][1] ? ", streamed" : "", i % nv, i / nv,
                             got[i], want[i]);
            free(got);
        }
        print_message("%s: amx%s = avx512 bit for bit (%zu tokens)\n", path,
                      es_kern_amx_emulated() ? " (emulated tiles)" : "", n_ids);
        free(want);
        es_model_close(m);
    }
    unlink(pack);
    free(ids);
}

/* The comparison itself: NaN or infinity anywhere must fail every tolerance. */
static void test_compare_rejects_garbage(void **state)
{
    (void)state;
    float a[2][4] = {{0, 1, 2, 3}, {3, 2, 1, 0}}, b[2][4];
    memcpy(b, a, sizeof(a));
    t_logit_stats s = t_compare_logits(&a[0][0], &b[0][0], 2, 4);
    assert_true(s.max == 0 && s.top1 == 1);
    const float bad[] = {NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < T_LEN(bad); i++) {
        memcpy(b, a, sizeof(a));
        b[1][2] = bad[i];
        s = t_compare_logits(&a[0][0], &b[0][0], 2, 4);
        assert_false(s.max <= 1e30);
        assert_true(s.top1 <= 0.5);
        s = t_compare_logits(&b[0][0], &a[0][0], 2, 4); /* either side */
        assert_false(s.max <= 1e30);
    }
    assert_false(t_near(NAN, NAN, 1.0));
    assert_false(t_near(1.0, NAN, 1.0));
    assert_false(t_near(INFINITY, INFINITY, 1.0));
    assert_true(t_near(1.0, 1.5, 0.5));
    assert_false(t_near(1.0, 1.6, 0.5));
}

/* A session keeps the kernel table it was made with: selecting another table after its first
 * prefill (which used to resize nothing and overflow the old buffers) changes nothing for it,
 * and a session made afterwards uses the new table. */
static void test_kernels_reselect(void **state)
{
    (void)state;
    /* a SIMD table to switch to: avx2 on x86-64, asimd on AArch64 */
    const char *simd = es_kernels_available("avx2")    ? "avx2"
                       : es_kernels_available("asimd") ? "asimd"
                                                       : NULL;
    if (!simd) {
        print_message("no avx2 or asimd table on this CPU: nothing to switch to, skipped\n");
        skip();
    }
    size_t n;
    int32_t *ids = t_read_ids(DATA "tiny-ids.txt", &n);
    es_model *m = open_ok(DATA "tiny-q4_0.gguf");
    const size_t nv = (size_t)es_model_n_vocab(m);
    float *a = malloc(sizeof(float) * n * nv), *b = malloc(sizeof(float) * n * nv);
    assert_int_equal(es_kernels_select("scalar"), ES_OK);
    es_session *ses;
    assert_int_equal(es_session_create(m, NULL, &ses), ES_OK);
    assert_int_equal(es_session_prefill(ses, ids, n, 1, a), ES_OK);
    assert_int_equal(es_kernels_select(simd), ES_OK);
    assert_int_equal(es_session_prefill(ses, ids, n, 1, b), ES_OK); /* still scalar buffers */
    assert_memory_equal(a, b, sizeof(float) * n * nv);
    es_run_stats rs;
    es_session_stats(ses, &rs);
    assert_string_equal(rs.kernels, "scalar");
    es_session_destroy(ses);
    assert_int_equal(es_session_create(m, NULL, &ses), ES_OK);
    es_session_stats(ses, &rs);
    assert_string_equal(rs.kernels, simd);
    assert_int_equal(es_session_prefill(ses, ids, n, 1, b), ES_OK);
    t_logit_stats s = t_compare_logits(b, a, n, nv);
    assert_true(s.max <= 2e-3);
    es_session_destroy(ses);
    assert_int_equal(es_kernels_select(NULL), ES_OK); /* back to the best table */
    free(a);
    free(b);
    free(ids);
    es_model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compare_rejects_garbage),
        cmocka_unit_test(test_fast_f32),
        cmocka_unit_test(test_fast_q8_0),
        cmocka_unit_test(test_fast_q4_0),
        cmocka_unit_test(test_fast_q4_1_q5_1),
        cmocka_unit_test(test_fast_gqa),
        cmocka_unit_test(test_family_qwen3moe),
        cmocka_unit_test(test_family_mixtral),
        cmocka_unit_test(test_family_deepseek),
        cmocka_unit_test(test_family_lfm2moe),
        cmocka_unit_test(test_family_deepseek2),
        cmocka_unit_test(test_family_deepseek3),
        cmocka_unit_test(test_family_qwen2moe),
        cmocka_unit_test(test_family_glm4moe),
        cmocka_unit_test(test_family_ernie),
        cmocka_unit_test(test_family_mixtral_l3),
        cmocka_unit_test(test_family_llama4),
        cmocka_unit_test(test_family_granitemoe),
        cmocka_unit_test(test_family_hunyuan),
        cmocka_unit_test(test_family_phimoe),
        cmocka_unit_test(test_family_bailingmoe2),
        cmocka_unit_test(test_family_dots1),
        cmocka_unit_test(test_family_minimax_m2),
        cmocka_unit_test(test_family_exaone_moe),
        cmocka_unit_test(test_family_smallthinker),
        cmocka_unit_test(test_family_qwen3vlmoe),
        cmocka_unit_test(test_family_bailingmoe),
        cmocka_unit_test(test_fused_qkv),
        cmocka_unit_test(test_llama4_past_chunk),
        cmocka_unit_test(test_family_gptoss),
        cmocka_unit_test(test_mxfp4_files),
        cmocka_unit_test(test_yarn_qwen3moe),
        cmocka_unit_test(test_fallback_types),
        cmocka_unit_test(test_family_q4_k_m),
        cmocka_unit_test(test_gguf_split_parts),
        cmocka_unit_test(test_family_q3_k_m),
        cmocka_unit_test(test_family_q2_k),
        cmocka_unit_test(test_mla_q4_k_m_within_llama_spread),
        cmocka_unit_test(test_small_f32),
        cmocka_unit_test(test_small_q4_0),
        cmocka_unit_test(test_fast_threads_bit_identical),
        cmocka_unit_test(test_fast_ppl),
        cmocka_unit_test(test_route_skew),
        cmocka_unit_test(test_fast_every_isa),
        cmocka_unit_test(test_amx_bit_identical),
        cmocka_unit_test(test_kernels_reselect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
