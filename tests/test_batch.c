/*
 * Batches of independent sequences (es_session_run): batch invariance and the head's outputs.
 *
 * Invariance: for every family's tiny file (and the olmoe "small" preset, whose context holds
 * 700-token sequences), sequences of mixed lengths (1 to 512, or 700: key and query block edges
 * included) are run alone on one thread, resident; then in random batches (1 to 64 sequences, in
 * random order) on 1-3 threads, resident and streamed (GGUF and pack, G/B and policy varied,
 * plan_capacity small so each layer's experts are split): every output of every sequence must
 * be bit-identical to the same sequence's alone. A bug that lets one sequence's keys into
 * another's attention, or that counts positions from the batch's start, changes them.
 *
 * The amx kernel table (AMX tiles, or on a CPU without AMX the emulation of the tile
 * instructions this program links, on AVX-512 or its emulation on AVX2) is held to the same
 * check with the avx512 table's outputs
 * alone as the reference: its batches, resident and streamed, on 1-3 threads, must give them
 * bit for bit.
 *
 * The outputs themselves: the last row's logits equal es_session_prefill's bit for bit (the path
 * the llama.cpp comparisons check); log-probs, ranks, the top lists, label log-probs and pooled
 * embeddings are checked against values computed here, in this file, from the reference path's
 * whole logits matrix (es_prefill with all logits) with plain double arithmetic.
 */
#include "t.h"

#include "estream.h"
#include "run/head.h"

#define TOP 5
#define NLAB 3

static const char *data(const char *name)
{
    static char buf[4][512];
    static int k;
    char *p = buf[k++ & 3];
    snprintf(p, 512, "tests/data/%s", name);
    return p;
}

/* One sequence and every output asked of it, in its own arrays. */
typedef struct tseq {
    int32_t *ids;
    size_t n;
    size_t score_from;
    int pooling, normalize, renormalize;
    int32_t labels[NLAB];
    float *lp, *top_lp, *next_lp, *lab_lp, *emb, *logits;
    int32_t *rank, *top_ids, *next_ids;
} tseq;

#define RNG_SEED 88172645463325252ull
static uint64_t rng = RNG_SEED;
/* Every case starts from the same state (cmocka setup), so its requests do not depend on which
 * cases ran before it: a filtered or skipped run tests what the whole program tests. */
static int reseed(void **st)
{
    (void)st;
    rng = RNG_SEED;
    return 0;
}
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Fresh (zeroed) output arrays for t's request. */
static void outputs_alloc(tseq *t, int nv, int d)
{
    const size_t n = t->n, rows = t->pooling == ES_POOLING_NONE ? n : 1;
    t->lp = calloc(n, sizeof(float));
    t->rank = calloc(n, sizeof(int32_t));
    t->top_ids = calloc(n * TOP, sizeof(int32_t));
    t->top_lp = calloc(n * TOP, sizeof(float));
    t->next_ids = calloc(TOP, sizeof(int32_t));
    t->next_lp = calloc(TOP, sizeof(float));
    t->lab_lp = calloc(NLAB, sizeof(float));
    t->emb = calloc(rows * (size_t)d, sizeof(float));
    t->logits = calloc((size_t)nv, sizeof(float));
}

static void tseq_alloc(tseq *t, size_t n, int nv, int d)
{
    memset(t, 0, sizeof(*t));
    t->n = n;
    t->ids = malloc(sizeof(int32_t) * n);
    for (size_t i = 0; i < n; i++) t->ids[i] = (int32_t)(rnd() % (uint64_t)nv);
    t->score_from = n > 3 ? 1 + rnd() % 3 : 1;
    t->pooling = (int)(rnd() % 4);
    t->normalize = (int)(rnd() % 2);
    t->renormalize = (int)(rnd() % 2);
    for (int j = 0; j < NLAB; j++) t->labels[j] = (int32_t)(rnd() % (uint64_t)nv);
    outputs_alloc(t, nv, d);
}

static void tseq_free(tseq *t)
{
    free(t->ids); free(t->lp); free(t->rank); free(t->top_ids); free(t->top_lp);
    free(t->next_ids); free(t->next_lp); free(t->lab_lp); free(t->emb); free(t->logits);
}

/* A copy of t's request with fresh (zeroed) output arrays. */
static void tseq_clone(tseq *dst, const tseq *t, int nv, int d)
{
    *dst = *t;
    dst->ids = malloc(sizeof(int32_t) * t->n);
    memcpy(dst->ids, t->ids, sizeof(int32_t) * t->n);
    outputs_alloc(dst, nv, d);
}

static es_seq to_seq(tseq *t)
{
    return (es_seq){.ids = t->ids, .n_ids = t->n, .score_from = t->score_from,
                    .token_logprob = t->lp, .token_rank = t->rank, .top_n = TOP,
                    .top_ids = t->top_ids, .top_logprobs = t->top_lp, .next_top_k = TOP,
                    .next_ids = t->next_ids, .next_logprobs = t->next_lp, .labels = t->labels,
                    .n_labels = NLAB, .renormalize = t->renormalize, .label_logprobs = t->lab_lp,
                    .pooling = (es_pooling)t->pooling, .normalize = t->normalize,
                    .embedding = t->emb, .logits = t->logits};
}

/* Bit-identical outputs (memcmp: NAN before score_from compares as bytes too). */
static void assert_same(const tseq *a, const tseq *b, int nv, int d, const char *what)
{
    const size_t n = a->n, rows = a->pooling == ES_POOLING_NONE ? n : 1;
    int bad = memcmp(a->lp, b->lp, n * sizeof(float)) ? 1
            : memcmp(a->rank, b->rank, n * sizeof(int32_t)) ? 2
            : memcmp(a->top_ids, b->top_ids, n * TOP * sizeof(int32_t)) ? 3
            : memcmp(a->top_lp, b->top_lp, n * TOP * sizeof(float)) ? 4
            : memcmp(a->next_ids, b->next_ids, TOP * sizeof(int32_t)) ? 5
            : memcmp(a->next_lp, b->next_lp, TOP * sizeof(float)) ? 6
            : memcmp(a->lab_lp, b->lab_lp, NLAB * sizeof(float)) ? 7
            : memcmp(a->emb, b->emb, rows * (size_t)d * sizeof(float)) ? 8
            : memcmp(a->logits, b->logits, (size_t)nv * sizeof(float)) ? 9 : 0;
    if (bad) fail_msg("%s: a sequence of %zu tokens differs from it alone (output %d)", what, n, bad);
}

/* A session on threads, resident (mode 0) or streamed (1, 2), with kernels (NULL: the default). */
static es_session *session(es_model *m, int threads, int mode, const char *kernels)
{
    es_session_params p = es_session_default_params();
    p.n_threads = threads;
    p.kernels = kernels;
    p.max_seqs = 64;
    if (mode >= 1) { /* streamed: several G/B/policy shapes, small plans */
        p.stream = 1;
        p.groups = mode == 1 ? 2 : 3;
        p.banks = mode == 1 ? 2 : 3;
        p.policy = mode == 1 ? ES_POLICY_EARLY : ES_POLICY_ON_DEMAND;
        p.plan_capacity = 48;
        p.max_tokens = 40000; /* a streamed session's buffers (and arena) are sized for it */
    }
    es_session *s = NULL;
    es_status st = es_session_create(m, &p, &s);
    if (st) fail_msg("session (threads %d, mode %d): %s", threads, mode, es_last_error());
    return s;
}

static void run_batch(es_session *s, tseq *ts, const int *order, int k)
{
    es_seq *q = calloc((size_t)k, sizeof(es_seq));
    for (int i = 0; i < k; i++) q[i] = to_seq(&ts[order[i]]);
    const es_status st = es_session_run(s, q, k);
    if (st) fail_msg("es_session_run of %d sequences: %s", k, es_last_error());
    free(q);
}

static void shuffle(int *a, int n)
{
    for (int i = n - 1; i > 0; i--) {
        const int j = (int)(rnd() % (uint64_t)(i + 1)), t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* The invariance check on one file (path; NULL: synthesize preset into a temporary file). With
 * kernels, the batches run that table and the sequences alone the avx512 table. */
static void invariance_with(const char *path, const char *preset, int max_len,
                            const char *pack_to, const char *kernels)
{
    char tmp[512] = "";
    if (!path) {
        snprintf(tmp, sizeof(tmp), "%s", t_tmp_path("batch.gguf"));
        es_synth_opts so = {.preset = preset, .type = "q4_0", .seed = 7};
        assert_int_equal(es_synth(&so, tmp), ES_OK);
        path = tmp;
    }
    es_model *m = NULL;
    assert_int_equal(es_model_open(path, 0, &m), ES_OK);
    const int nv = es_model_n_vocab(m), d = es_model_n_embd(m);
    /* lengths at the blocks' edges (64 queries, 128 keys) and random ones */
    const int edges[] = {1, 2, 63, 64, 65, 127, 128, 129, 255, 257, 511, 512, 700};
    enum { N = 28 };
    tseq ts[N], alone[N];
    for (int i = 0; i < N; i++) {
        int len = i < (int)T_LEN(edges) ? edges[i] : 1 + (int)(rnd() % (uint64_t)max_len);
        if (len > max_len) len = 1 + (int)(rnd() % (uint64_t)max_len);
        tseq_alloc(&ts[i], (size_t)len, nv, d);
        tseq_clone(&alone[i], &ts[i], nv, d);
    }
    es_session *s1 = session(m, 1, 0, kernels ? "avx512" : NULL);
    for (int i = 0; i < N; i++) {
        const int one[1] = {i};
        run_batch(s1, alone, one, 1);
    }
    es_session_destroy(s1);

    /* batches: (threads, mode) over resident, two streamed shapes, and the pack */
    es_model *pm = NULL;
    if (pack_to) {
        assert_int_equal(es_pack(path, pack_to, NULL, NULL), ES_OK);
        assert_int_equal(es_model_open(pack_to, 0, &pm), ES_OK);
    }
    const int cfg[][3] = {{3, 0, 0}, {2, 1, 0}, {1, 2, 0}, {2, 1, 1}};
    for (size_t c = 0; c < T_LEN(cfg); c++) {
        if (cfg[c][2] && !pm) continue;
        es_session *s = session(cfg[c][2] ? pm : m, cfg[c][0], cfg[c][1], kernels);
        int order[N];
        for (int i = 0; i < N; i++) order[i] = i;
        shuffle(order, N);
        /* the shuffled list cut into batches of random sizes */
        tseq out[N];
        for (int i = 0; i < N; i++) tseq_clone(&out[i], &ts[i], nv, d);
        for (int b0 = 0; b0 < N;) {
            int k = 1 + (int)(rnd() % 12);
            if (c == 0) k = N; /* everything at once */
            if (b0 + k > N) k = N - b0;
            run_batch(s, out, order + b0, k);
            b0 += k;
        }
        char what[640];
        snprintf(what, sizeof(what), "%s, %d threads, mode %d%s%s%s", preset ? preset : path,
                 cfg[c][0], cfg[c][1], cfg[c][2] ? ", pack" : "", kernels ? ", kernels " : "",
                 kernels ? kernels : "");
        for (int i = 0; i < N; i++) {
            assert_same(&alone[i], &out[i], nv, d, what);
            tseq_free(&out[i]);
        }
        es_session_destroy(s);
    }
    for (int i = 0; i < N; i++) {
        tseq_free(&ts[i]);
        tseq_free(&alone[i]);
    }
    es_model_close(pm);
    es_model_close(m);
    if (pack_to) unlink(pack_to);
    if (tmp[0]) unlink(tmp);
}

static void invariance(const char *path, const char *preset, int max_len, const char *pack_to)
{
    invariance_with(path, preset, max_len, pack_to, NULL);
}

/* amx batches = avx512 alone, on Q4_0 (tiny, with its pack's tile layout) and on K-quants at
 * hidden 256 with shared experts and a dense layer (sequences up to 128 tokens: the emulation is
 * slow under the sanitizers). test_forward holds the other kinds to avx512 bit for bit. */
static void test_amx_batches(void **st)
{
    (void)st;
    if (!es_kernels_available("amx") || !es_kernels_available("avx512")) {
        print_message("amx: %s, skipped\n", es_kernels_why_not("amx"));
        skip();
    }
    invariance_with(data("tiny-qwen3moe-q4_0.gguf"), NULL, 512, t_tmp_path("amx.pack"), "amx");
    invariance_with(data("small-deepseek-q4_k_m.gguf"), NULL, 128, NULL, "amx");
}

static void test_invariance_olmoe(void **st)
{
    (void)st;
    invariance(data("tiny-f32.gguf"), NULL, 512, t_tmp_path("tiny.pack"));
}
static void test_invariance_olmoe_700(void **st) { (void)st; invariance(NULL, "small", 700, NULL); }
static void test_invariance_qwen3moe(void **st)
{
    (void)st;
    invariance(data("tiny-qwen3moe-q4_0.gguf"), NULL, 512, NULL);
}
static void test_invariance_mixtral(void **st)
{
    (void)st;
    invariance(data("tiny-mixtral-q4_0.gguf"), NULL, 512, NULL);
}
static void test_invariance_deepseek(void **st)
{
    (void)st;
    invariance(data("tiny-deepseek-q4_0.gguf"), NULL, 512, NULL);
}
static void test_invariance_deepseek2(void **st)
{
    (void)st;
    invariance(data("tiny-deepseek2-q4_0.gguf"), NULL, 512, t_tmp_path("ds2.pack"));
    invariance(data("tiny-deepseek2-joined-q4_0.gguf"), NULL, 512, NULL);
}
static void test_invariance_lfm2moe(void **st)
{
    (void)st;
    invariance(data("tiny-lfm2moe-q4_0.gguf"), NULL, 512, NULL);
}
/* qwen2moe: q/k/v biases, the gated shared expert (row by row: each token its own gate) */
static void test_invariance_qwen2moe(void **st)
{
    (void)st;
    invariance(data("tiny-qwen2moe-q4_0.gguf"), NULL, 512, NULL);
}
/* glm4moe: partial RoPE, a dense first layer, a shared expert, the sigmoid router; the pack
 * leaves out the multi-token-prediction block's experts (never run) */
static void test_invariance_glm4moe(void **st)
{
    (void)st;
    invariance(data("tiny-glm4moe-q4_0.gguf"), NULL, 512, t_tmp_path("glm4moe.pack"));
}

/* granitemoe: the embedding, residual and logit multipliers (the head's scaled in its row
 * jobs), GraniteMoeShared's ungated shared expert; from its pack too */
static void test_invariance_granitemoe(void **st)
{
    (void)st;
    invariance(data("tiny-granitemoe-shared-q4_0.gguf"), NULL, 512, t_tmp_path("granite.pack"));
}

/* hunyuan-moe: q/k norms after RoPE (positions from each sequence's start) */
static void test_invariance_hunyuan(void **st)
{
    (void)st;
    invariance(data("tiny-hunyuan-q4_0.gguf"), NULL, 512, NULL);
}

/* phimoe: LongRoPE's factors chosen by each sequence's own length (lengths on both sides of
 * the original 256 share batches), norm and output biases; from its pack too */
static void test_invariance_phimoe(void **st)
{
    (void)st;
    invariance(data("tiny-phimoe-q4_0.gguf"), NULL, 512, t_tmp_path("phimoe.pack"));
}

/* bailingmoe2: the fused attn_qkv's views, half-RoPE, grouped sigmoid routing, two shared
 * experts; from its pack too (the multi-token-prediction block's experts left out) */
static void test_invariance_bailingmoe2(void **st)
{
    (void)st;
    invariance(data("tiny-bailingmoe2-q4_0.gguf"), NULL, 512, t_tmp_path("bailing.pack"));
}

/* dots1: per-head q/k norms, a dense first layer, shared experts, the sigmoid router */
static void test_invariance_dots1(void **st)
{
    (void)st;
    invariance(data("tiny-dots1-q4_0.gguf"), NULL, 512, NULL);
}

/* minimax-m2: q/k norms over the whole projections under GQA, half-RoPE, the sigmoid router */
static void test_invariance_minimax_m2(void **st)
{
    (void)st;
    invariance(data("tiny-minimax-m2-q4_0.gguf"), NULL, 512, NULL);
}

/* bailingmoe (Ling 1.x): the fused attn_qkv, shared experts, the softmax renormalised */
static void test_invariance_bailingmoe(void **st)
{
    (void)st;
    invariance(data("tiny-bailingmoe-q4_0.gguf"), NULL, 512, NULL);
}

/* qwen3vlmoe: interleaved multimodal RoPE from each sequence's own positions */
static void test_invariance_qwen3vlmoe(void **st)
{
    (void)st;
    invariance(data("tiny-qwen3vlmoe-q4_0.gguf"), NULL, 512, NULL);
}

/* exaone-moe: windows counted from each sequence's start, RoPE on the sliding layers only; from
 * its pack too (the MTP block's dense FFN is no expert) */
static void test_invariance_exaone_moe(void **st)
{
    (void)st;
    invariance(data("tiny-exaone-moe-q4_0.gguf"), NULL, 512, t_tmp_path("exaone.pack"));
}

/* smallthinker: the router on the layer's input before attention, ReGLU experts, layers without
 * RoPE; from its pack too */
static void test_invariance_smallthinker(void **st)
{
    (void)st;
    invariance(data("tiny-smallthinker-q4_0.gguf"), NULL, 512, t_tmp_path("smallthinker.pack"));
}

/* ernie4_5-moe: a softmax router with a selection bias, an ungated shared expert */
static void test_invariance_ernie(void **st)
{
    (void)st;
    invariance(data("tiny-ernie-q4_0.gguf"), NULL, 512, NULL);
}

/* llama4: dense layers between the MoE ones, NoPE and chunked layers (positions from each
 * sequence's start), the weight on the expert's input; from its pack too (rope_freqs and the
 * dense layers travel as resident tensors) */
static void test_invariance_llama4(void **st)
{
    (void)st;
    invariance(data("tiny-llama4-q4_0.gguf"), NULL, 512, t_tmp_path("llama4.pack"));
}

/* gpt-oss: sliding windows counted from each sequence's start, sinks, biased experts; from its
 * pack too (the expert biases travel as resident tensors) */
static void test_invariance_gptoss(void **st)
{
    (void)st;
    invariance(data("tiny-gptoss-q4_0.gguf"), NULL, 512, t_tmp_path("gptoss.pack"));
}

/* 64 sequences in one batch (the default max_seqs), and one more refused. */
static void test_sixty_four(void **st)
{
    (void)st;
    es_model *m = NULL;
    assert_int_equal(es_model_open(data("tiny-qwen3moe-f16.gguf"), 0, &m), ES_OK);
    const int nv = es_model_n_vocab(m), d = es_model_n_embd(m);
    tseq ts[65], alone[64];
    for (int i = 0; i < 65; i++) tseq_alloc(&ts[i], 1 + rnd() % 40, nv, d);
    es_session *s = session(m, 2, 0, NULL);
    for (int i = 0; i < 64; i++) {
        tseq_clone(&alone[i], &ts[i], nv, d);
        const int one[1] = {i};
        run_batch(s, alone, one, 1);
    }
    int order[65];
    for (int i = 0; i < 65; i++) order[i] = i;
    shuffle(order, 64);
    run_batch(s, ts, order, 64);
    for (int i = 0; i < 64; i++) assert_same(&alone[i], &ts[i], nv, d, "64 sequences");
    es_seq q[65];
    for (int i = 0; i < 65; i++) q[i] = to_seq(&ts[i]);
    assert_int_equal(es_session_run(s, q, 65), ES_E_INVAL);
    assert_non_null(strstr(es_last_error(), "max_seqs"));
    for (int i = 0; i < 65; i++) tseq_free(&ts[i]);
    for (int i = 0; i < 64; i++) tseq_free(&alone[i]);
    es_session_destroy(s);
    es_model_close(m);
}

/* The outputs against values computed here from the reference path's logits and hidden
 * states: es_prefill(reference, all logits) for the scores, the fast path's last row equal to
 * es_session_prefill's. */
static void test_outputs_from_logits(void **st)
{
    (void)st;
    es_model *m = NULL;
    assert_int_equal(es_model_open(data("tiny-mixtral-f16.gguf"), 0, &m), ES_OK);
    const int nv = es_model_n_vocab(m), d = es_model_n_embd(m);
    const size_t n = 150;
    tseq t;
    tseq_alloc(&t, n, nv, d);
    t.score_from = 7;
    t.renormalize = 1;
    t.pooling = ES_POOLING_MEAN;
    t.normalize = 1;
    free(t.emb);
    t.emb = calloc((size_t)d, sizeof(float));
    for (int ref = 0; ref <= 1; ref++) {
        es_session_params p = es_session_default_params();
        p.reference = ref;
        p.n_threads = 2;
        es_session *s = NULL;
        assert_int_equal(es_session_create(m, &p, &s), ES_OK);
        es_seq q = to_seq(&t);
        assert_int_equal(es_session_run(s, &q, 1), ES_OK);
        /* the whole logits matrix of the same path */
        float *L = malloc(sizeof(float) * n * (size_t)nv);
        assert_int_equal(es_session_prefill(s, t.ids, n, 1, L), ES_OK);
        assert_memory_equal(t.logits, L + (n - 1) * (size_t)nv, sizeof(float) * (size_t)nv);
        for (size_t r = 0; r < n; r++) {
            const float *row = L + r * (size_t)nv;
            double mx = row[0], sum = 0;
            for (int j = 1; j < nv; j++) mx = row[j] > mx ? row[j] : mx;
            for (int j = 0; j < nv; j++) sum += exp((double)row[j] - mx);
            const double lse = mx + log(sum);
            if (r + 1 < n) {
                const size_t pos = r + 1;
                if (pos < t.score_from) {
                    assert_true(isnan(t.lp[pos]));
                    assert_int_equal(t.rank[pos], 0);
                    continue;
                }
                const int32_t tok = t.ids[pos];
                assert_float_equal(t.lp[pos], (float)(row[tok] - lse), 1e-6);
                int rank = 1;
                for (int j = 0; j < nv; j++)
                    rank += row[j] > row[tok] || (row[j] == row[tok] && j < tok);
                assert_int_equal(t.rank[pos], rank);
                /* the top list: descending, ties by id, the best being the rank-1 token */
                for (int k = 0; k < TOP; k++) {
                    const int32_t id = t.top_ids[pos * TOP + k];
                    int before = 0;
                    for (int j = 0; j < nv; j++)
                        before += row[j] > row[id] || (row[j] == row[id] && j < id);
                    assert_int_equal(before, k);
                    assert_float_equal(t.top_lp[pos * TOP + k], (float)(row[id] - lse), 1e-6);
                }
                assert_int_equal(t.rank[pos] == 1, t.top_ids[pos * TOP] == tok);
            } else {
                double ls = -INFINITY, s2 = 0;
                for (int k = 0; k < NLAB; k++) ls = row[t.labels[k]] > ls ? row[t.labels[k]] : ls;
                for (int k = 0; k < NLAB; k++) s2 += exp((double)row[t.labels[k]] - ls);
                double total = 0;
                for (int k = 0; k < NLAB; k++) {
                    assert_float_equal(t.lab_lp[k], (float)(row[t.labels[k]] - ls - log(s2)), 1e-6);
                    total += exp((double)t.lab_lp[k]);
                }
                assert_float_equal(total, 1.0, 1e-5);
                for (int k = 0; k < TOP; k++) {
                    int before = 0;
                    const int32_t id = t.next_ids[k];
                    for (int j = 0; j < nv; j++)
                        before += row[j] > row[id] || (row[j] == row[id] && j < id);
                    assert_int_equal(before, k);
                }
            }
        }
        /* the embedding: unit length */
        double ss = 0;
        for (int i = 0; i < d; i++) ss += (double)t.emb[i] * t.emb[i];
        assert_float_equal(ss, 1.0, 1e-5);
        free(L);
        es_session_destroy(s);
    }
    tseq_free(&t);
    es_model_close(m);
}

/* The fast path's outputs against the reference path's: same request, within the logits'
 * tolerances (tight for f32 weights; f16 files quantize activations for some products, and a
 * router may pick another expert: test_forward's limits). */
static void test_fast_matches_reference(void **st)
{
    (void)st;
    /* tiny-gptoss: windows of 40 across the attention's key blocks (lengths 130 and 300) */
    const char *files[] = {"tiny-f32.gguf", "tiny-lfm2moe-f16.gguf", "tiny-deepseek2-f16.gguf",
                           "tiny-gptoss-f16.gguf", "tiny-glm4moe-f16.gguf"};
    const float tol[] = {1e-4f, 0.05f, 0.05f, 0.05f, 0.05f};
    const double cos_min[] = {0.99999, 0.999, 0.999, 0.999, 0.999};
    for (size_t f = 0; f < T_LEN(files); f++) {
        es_model *m = NULL;
        assert_int_equal(es_model_open(data(files[f]), 0, &m), ES_OK);
        const int nv = es_model_n_vocab(m), d = es_model_n_embd(m);
        tseq a[3], b[3];
        const size_t lens[3] = {5, 130, 300};
        for (int i = 0; i < 3; i++) {
            tseq_alloc(&a[i], lens[i], nv, d);
            a[i].pooling = i == 1 ? ES_POOLING_NONE : ES_POOLING_LAST;
            free(a[i].emb);
            a[i].emb = calloc(lens[i] * (size_t)d, sizeof(float));
            tseq_clone(&b[i], &a[i], nv, d);
        }
        for (int ref = 0; ref <= 1; ref++) {
            es_session_params p = es_session_default_params();
            p.reference = ref;
            es_session *s = NULL;
            assert_int_equal(es_session_create(m, &p, &s), ES_OK);
            const int order[3] = {0, 1, 2};
            run_batch(s, ref ? b : a, order, 3);
            es_session_destroy(s);
        }
        for (int i = 0; i < 3; i++) {
            /* f32: every position; f16: a router flip moves a few positions a lot */
            size_t off = 0, scored = a[i].n - a[i].score_from;
            for (size_t r = a[i].score_from; r < a[i].n; r++)
                if (fabsf(a[i].lp[r] - b[i].lp[r]) > tol[f]) {
                    off++;
                    if (f == 0 || off * 20 > scored + 20)
                        fail_msg("%s: log-prob at %zu: fast %g, reference %g (%zu of %zu off)",
                                 files[f], r, (double)a[i].lp[r], (double)b[i].lp[r], off, scored);
                }
            const size_t rows = a[i].pooling == ES_POOLING_NONE ? a[i].n : 1;
            for (size_t r = 0; r < rows; r++) {
                double dot = 0, na = 0, nb = 0;
                for (int k = 0; k < d; k++) {
                    const double x = a[i].emb[r * d + k], y = b[i].emb[r * d + k];
                    dot += x * y; na += x * x; nb += y * y;
                }
                if (dot / sqrt(na * nb) < cos_min[f] && (f == 0 || rows == 1))
                    fail_msg("%s: embedding row %zu: cosine %.7f", files[f], r, dot / sqrt(na * nb));
            }
            tseq_free(&a[i]);
            tseq_free(&b[i]);
        }
        es_model_close(m);
    }
}

/* Bad requests: each a clear ES_E_INVAL naming the sequence, and the session still works. */
static void test_bad_requests(void **st)
{
    (void)st;
    es_model *m = NULL;
    assert_int_equal(es_model_open(data("tiny-f32.gguf"), 0, &m), ES_OK);
    const int nv = es_model_n_vocab(m);
    es_session *s = session(m, 1, 0, NULL);
    int32_t ids[4] = {1, 2, 3, 4}, bad[2] = {1, nv};
    float lp[4], out[8];
    int32_t top[8];
    es_seq ok = {.ids = ids, .n_ids = 4, .token_logprob = lp};
    es_seq q[2] = {ok, ok};
    q[1].ids = bad;
    q[1].n_ids = 2;
    assert_int_equal(es_session_run(s, q, 2), ES_E_INVAL);
    assert_non_null(strstr(es_last_error(), "sequence 1"));
    q[1] = ok;
    q[1].n_ids = 0;
    assert_int_equal(es_session_run(s, q, 2), ES_E_INVAL);
    q[1] = ok;
    q[1].top_n = 2; /* no arrays */
    assert_int_equal(es_session_run(s, q, 2), ES_E_INVAL);
    q[1] = ok;
    q[1].next_top_k = ES_MAX_TOP + 1;
    q[1].next_ids = top;
    q[1].next_logprobs = out;
    assert_int_equal(es_session_run(s, q, 2), ES_E_INVAL);
    q[1] = ok;
    q[1].score_from = 5;
    assert_int_equal(es_session_run(s, q, 2), ES_E_INVAL);
    q[1] = ok;
    q[1].pooling = (es_pooling)9;
    float emb[64];
    q[1].embedding = emb;
    assert_int_equal(es_session_run(s, q, 2), ES_E_INVAL);
    assert_int_equal(es_session_run(s, q, 0), ES_E_INVAL);
    q[1] = ok;
    assert_int_equal(es_session_run(s, q, 2), ES_OK);
    assert_true(isnan(lp[0]) && lp[1] < 0);
    es_session_destroy(s);
    es_model_close(m);
}

/* The abort callback: ES_E_CANCELLED at the n-th check, resident and streamed; the next batch
 * on the same session gives the outputs of an uninterrupted run. Progress reaches the end. */
typedef struct cb_state { int checks, stop_at, last_step, n_steps; } cb_state;
static int abort_at(void *u)
{
    cb_state *c = u;
    return ++c->checks == c->stop_at;
}
static void progress(void *u, int done, int total, int64_t tokens)
{
    cb_state *c = u;
    assert_true(done == c->last_step + 1 && tokens > 0);
    c->last_step = done;
    c->n_steps = total;
}

static void test_abort_and_progress(void **st)
{
    (void)st;
    es_model *m = NULL;
    assert_int_equal(es_model_open(data("tiny-deepseek-f16.gguf"), 0, &m), ES_OK);
    const int nv = es_model_n_vocab(m), d = es_model_n_embd(m);
    tseq want, got;
    tseq_alloc(&want, 200, nv, d);
    for (int mode = 0; mode <= 1; mode++) {
        es_session *s1 = session(m, 1, mode, NULL);
        const int one[1] = {0};
        tseq_clone(&got, &want, nv, d);
        run_batch(s1, &want, one, 1);
        es_session_destroy(s1);
        for (int stop = 1; stop <= 5; stop++) {
            cb_state c = {0, stop, 0, 0};
            es_session_params p = es_session_default_params();
            p.n_threads = 2;
            p.abort_cb = abort_at;
            p.progress_cb = progress;
            p.cb_user = &c;
            if (mode) {
                p.max_tokens = 512;
                p.stream = 1;
                p.groups = 2;
                p.banks = 2;
            }
            es_session *s = NULL;
            assert_int_equal(es_session_create(m, &p, &s), ES_OK);
            es_seq q = to_seq(&got);
            const es_status r = es_session_run(s, &q, 1);
            /* 3 layers + the head's one chunk: checks 1-4 stop it, the 5th is never made */
            if (stop <= 4) {
                assert_int_equal(r, ES_E_CANCELLED);
            } else {
                assert_int_equal(r, ES_OK);
                assert_int_equal(c.last_step, c.n_steps);
                assert_int_equal(c.n_steps, es_model_n_layer(m) + 1);
            }
            c.stop_at = -1;
            c.last_step = 0;
            assert_int_equal(es_session_run(s, &q, 1), ES_OK);
            assert_same(&want, &got, nv, d, "after a cancelled batch");
            es_session_destroy(s);
        }
        tseq_free(&got);
    }
    tseq_free(&want);
    es_model_close(m);
}

/* es_session_prefill and es_session_perplexity honour the abort callback too, before each
 * layer (resident and streamed): ES_E_CANCELLED, then the same session gives the logits and
 * the perplexity of an uninterrupted run. */
static void test_abort_prefill_and_ppl(void **st)
{
    (void)st;
    es_model *m = NULL;
    assert_int_equal(es_model_open(data("tiny-deepseek-f16.gguf"), 0, &m), ES_OK);
    const int nv = es_model_n_vocab(m), n = 64;
    int32_t ids[128];
    for (int i = 0; i < 128; i++) ids[i] = (int32_t)((i * 7 + 3) % nv);
    float *want = malloc(sizeof(float) * (size_t)nv), *got = malloc(sizeof(float) * (size_t)nv);
    assert_non_null(want);
    assert_non_null(got);
    for (int mode = 0; mode <= 1; mode++) {
        cb_state c = {0, -1, 0, 0};
        es_session_params p = es_session_default_params();
        p.n_threads = 2;
        p.abort_cb = abort_at;
        p.cb_user = &c;
        if (mode) {
            p.max_tokens = 512;
            p.stream = 1;
            p.groups = 2;
            p.banks = 2;
        }
        es_session *s = NULL;
        assert_int_equal(es_session_create(m, &p, &s), ES_OK);
        assert_int_equal(es_session_prefill(s, ids, (size_t)n, 0, want), ES_OK);
        assert_int_equal(c.checks, es_model_n_layer(m)); /* one check per layer */
        es_ppl_result whole;
        assert_int_equal(es_session_perplexity(s, ids, 128, 32, 0, NULL, NULL, &whole), ES_OK);
        for (int stop = 1; stop <= es_model_n_layer(m); stop++) {
            c = (cb_state){0, stop, 0, 0};
            assert_int_equal(es_session_prefill(s, ids, (size_t)n, 0, got), ES_E_CANCELLED);
            assert_non_null(strstr(es_last_error(), "cancelled"));
            c.stop_at = -1;
            assert_int_equal(es_session_prefill(s, ids, (size_t)n, 0, got), ES_OK);
            assert_memory_equal(want, got, sizeof(float) * (size_t)nv);
        }
        /* the second of 4 chunks is stopped: the whole call is cancelled, then runs again */
        c = (cb_state){0, es_model_n_layer(m) + 2, 0, 0};
        es_ppl_result r;
        assert_int_equal(es_session_perplexity(s, ids, 128, 32, 0, NULL, NULL, &r), ES_E_CANCELLED);
        c.stop_at = -1;
        assert_int_equal(es_session_perplexity(s, ids, 128, 32, 0, NULL, NULL, &r), ES_OK);
        assert_true(r.ppl == whole.ppl && r.chunks == 4);
        es_session_destroy(s);
    }
    free(want);
    free(got);
    es_model_close(m);
}

/* The head's arithmetic on hand-made rows: ties go to the lower id in the rank and the top list
 * alike; the log-sum-exp of a 151,936-wide row keeps its digits; pooling as llama.cpp's. */
static void test_head_arithmetic(void **st)
{
    (void)st;
    const float l[6] = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 3.0f};
    assert_int_equal(es_head_rank(l, 6, 1), 1); /* the first of three equal maxima */
    assert_int_equal(es_head_rank(l, 6, 3), 2);
    assert_int_equal(es_head_rank(l, 6, 5), 3);
    assert_int_equal(es_head_rank(l, 6, 2), 4);
    assert_int_equal(es_head_rank(l, 6, 4), 6);
    int32_t ids[4];
    float lp[4];
    const double lse = es_head_lse(l, 6);
    assert_float_equal(lse, log(exp(1) + 3 * exp(3) + exp(2) + exp(-1)), 1e-12);
    es_head_top(l, 6, lse, 4, ids, lp);
    const int32_t want[4] = {1, 3, 5, 2};
    assert_memory_equal(ids, want, sizeof(want));
    assert_float_equal(lp[3], (float)(2.0 - lse), 1e-7);
    /* a wide row of equal logits: log-prob -log(n) to float precision */
    enum { NV = 151936 };
    float *w = malloc(sizeof(float) * NV);
    for (int i = 0; i < NV; i++) w[i] = 0.25f;
    assert_float_equal(0.25 - es_head_lse(w, NV), -log((double)NV), 1e-9);
    free(w);
    /* mean pooling then L2 */
    const float x[2][3] = {{1, 2, 2}, {3, 2, 2}};
    float out[3];
    es_head_pool(&x[0][0], 2, 3, ES_POOLING_MEAN, 1, out);
    assert_float_equal(out[0], 2.0 / sqrt(12.0), 1e-7);
    es_head_pool(&x[0][0], 2, 3, ES_POOLING_LAST, 0, out);
    assert_float_equal(out[0], 3.0, 0);
    es_head_pool(&x[0][0], 2, 3, ES_POOLING_FIRST, 1, out);
    assert_float_equal(out[1], 2.0 / 3.0, 1e-7);
}

/* Per-token log-probs against the log-softmax of llama.cpp's logits for the same file and ids
 * (tests/data: tiny-ids.txt, all positions, llama.cpp 3f545bec, F32 KV, no repacking): within
 * what the logits meet (test_forward: every logit within 1e-4 for F32, 0.02 for F16; a log-prob
 * moves by its logit's error and the log-sum-exp's, so twice that). Fast path, one batch that
 * also holds other sequences. */
static void test_logprobs_vs_llama(void **st)
{
    (void)st;
    const char *stems[] = {"tiny-f32", "tiny-qwen3moe-f16", "tiny-mixtral-f16", "tiny-deepseek-f16",
                           "tiny-deepseek2-f16", "tiny-lfm2moe-f16", "tiny-qwen2moe-f16",
                           "tiny-gptoss-f16", "tiny-glm4moe-f16", "tiny-ernie-f16",
                           "tiny-llama4-f16", "tiny-granitemoe-f16", "tiny-hunyuan-f16",
                           "tiny-bailingmoe2-f16", "tiny-dots1-f16", "tiny-minimax-m2-f16",
                           "tiny-exaone-moe-f16", "tiny-smallthinker-f32", "tiny-qwen3vlmoe-f16",
                           "tiny-bailingmoe-f16", "tiny-phimoe-f16"};
    size_t n = 0;
    char *ids_text = t_read_file("tests/data/tiny-ids.txt", &n);
    assert_non_null(ids_text);
    int32_t ids[512];
    size_t n_ids = 0;
    for (char *p = ids_text, *e; n_ids < T_LEN(ids); p = e) {
        const long v = strtol(p, &e, 10);
        if (e == p) break;
        ids[n_ids++] = (int32_t)v;
    }
    free(ids_text);
    assert_true(n_ids >= 32);
    for (size_t k = 0; k < T_LEN(stems); k++) {
        char path[256], golden[256];
        snprintf(path, sizeof(path), "tests/data/%s.gguf", stems[k]);
        snprintf(golden, sizeof(golden), "tests/data/%s.llama-logits.bin", stems[k]);
        es_model *m = NULL;
        assert_int_equal(es_model_open(path, 0, &m), ES_OK);
        const int nv = es_model_n_vocab(m), d = es_model_n_embd(m);
        size_t len = 0;
        float *L = (float *)t_read_file(golden, &len);
        assert_non_null(L);
        assert_int_equal(len, n_ids * (size_t)nv * sizeof(float));
        float lp[512];
        int32_t rank[512];
        tseq other;
        tseq_alloc(&other, 77, nv, d);
        es_seq q[2] = {to_seq(&other), {.ids = ids, .n_ids = n_ids, .token_logprob = lp,
                                         .token_rank = rank}};
        es_session *s = session(m, 2, 0, NULL);
        assert_int_equal(es_session_run(s, q, 2), ES_OK);
        const double tol = strstr(stems[k], "f32") ? 2e-4 : 0.04;
        double worst = 0;
        for (size_t r = 1; r < n_ids; r++) {
            const float *row = L + (r - 1) * (size_t)nv;
            double mx = row[0], sum = 0;
            for (int j = 1; j < nv; j++) mx = row[j] > mx ? row[j] : mx;
            for (int j = 0; j < nv; j++) sum += exp((double)row[j] - mx);
            const double want = (double)row[ids[r]] - mx - log(sum);
            const double diff = fabs((double)lp[r] - want);
            worst = diff > worst ? diff : worst;
            if (diff > tol)
                fail_msg("%s: log-prob of position %zu: estream %.6f, llama.cpp %.6f", stems[k], r,
                         (double)lp[r], want);
        }
        print_message("%s: per-token log-probs vs llama.cpp's: max |diff| %.2g over %zu tokens\n",
                      stems[k], worst, n_ids - 1);
        es_session_destroy(s);
        tseq_free(&other);
        free(L);
        es_model_close(m);
    }
}

/* The head in several chunks: with Qwen3's 151,936-token vocabulary a chunk holds 55 rows, so
 * 130 scored rows take three (the last partial). Each position's log-prob and top-1 against the
 * log-softmax of the same session's whole logits matrix (es_session_prefill, one product). */
static void test_head_chunks(void **st)
{
    (void)st;
    const char *path = t_tmp_path("vocab.gguf");
    es_synth_opts so = {.preset = "tiny-qwen3moe-vocab", .type = "q4_0", .seed = 3};
    assert_int_equal(es_synth(&so, path), ES_OK);
    es_model *m = NULL;
    assert_int_equal(es_model_open(path, 0, &m), ES_OK);
    const int nv = es_model_n_vocab(m);
    enum { N = 131 };
    int32_t ids[N], top[N];
    float lp[N], top_lp[N];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)(rnd() % (uint64_t)nv);
    es_session *s = session(m, 2, 0, NULL);
    es_seq q = {.ids = ids, .n_ids = N, .token_logprob = lp, .top_n = 1, .top_ids = top,
                .top_logprobs = top_lp};
    assert_int_equal(es_session_run(s, &q, 1), ES_OK);
    float *L = malloc(sizeof(float) * (size_t)N * (size_t)nv);
    assert_int_equal(es_session_prefill(s, ids, N, 1, L), ES_OK);
    for (int r = 1; r < N; r++) {
        const float *row = L + (size_t)(r - 1) * (size_t)nv;
        double mx = row[0], sum = 0;
        int best = 0;
        for (int j = 1; j < nv; j++)
            if (row[j] > mx) mx = row[best = j];
        for (int j = 0; j < nv; j++) sum += exp((double)row[j] - mx);
        if (fabs((double)lp[r] - ((double)row[ids[r]] - mx - log(sum))) > 1e-5 ||
            top[r] != best)
            fail_msg("position %d of %d: log-prob %g, top %d; from the matrix %g, %d", r, N,
                     (double)lp[r], top[r], (double)row[ids[r]] - mx - log(sum), best);
    }
    free(L);
    es_session_destroy(s);
    es_model_close(m);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_head_arithmetic, reseed),
        cmocka_unit_test_setup(test_invariance_olmoe, reseed),
        cmocka_unit_test_setup(test_invariance_olmoe_700, reseed),
        cmocka_unit_test_setup(test_invariance_qwen3moe, reseed),
        cmocka_unit_test_setup(test_invariance_mixtral, reseed),
        cmocka_unit_test_setup(test_invariance_deepseek, reseed),
        cmocka_unit_test_setup(test_invariance_deepseek2, reseed),
        cmocka_unit_test_setup(test_invariance_lfm2moe, reseed),
        cmocka_unit_test_setup(test_invariance_qwen2moe, reseed),
        cmocka_unit_test_setup(test_invariance_gptoss, reseed),
        cmocka_unit_test_setup(test_invariance_glm4moe, reseed),
        cmocka_unit_test_setup(test_invariance_ernie, reseed),
        cmocka_unit_test_setup(test_invariance_granitemoe, reseed),
        cmocka_unit_test_setup(test_invariance_hunyuan, reseed),
        cmocka_unit_test_setup(test_invariance_phimoe, reseed),
        cmocka_unit_test_setup(test_invariance_bailingmoe2, reseed),
        cmocka_unit_test_setup(test_invariance_dots1, reseed),
        cmocka_unit_test_setup(test_invariance_minimax_m2, reseed),
        cmocka_unit_test_setup(test_invariance_qwen3vlmoe, reseed),
        cmocka_unit_test_setup(test_invariance_bailingmoe, reseed),
        cmocka_unit_test_setup(test_invariance_exaone_moe, reseed),
        cmocka_unit_test_setup(test_invariance_smallthinker, reseed),
        cmocka_unit_test_setup(test_invariance_llama4, reseed),
        cmocka_unit_test_setup(test_amx_batches, reseed),
        cmocka_unit_test_setup(test_sixty_four, reseed),
        cmocka_unit_test_setup(test_outputs_from_logits, reseed),
        cmocka_unit_test_setup(test_logprobs_vs_llama, reseed),
        cmocka_unit_test_setup(test_head_chunks, reseed),
        cmocka_unit_test_setup(test_fast_matches_reference, reseed),
        cmocka_unit_test_setup(test_bad_requests, reseed),
        cmocka_unit_test_setup(test_abort_and_progress, reseed),
        cmocka_unit_test_setup(test_abort_prefill_and_ppl, reseed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
