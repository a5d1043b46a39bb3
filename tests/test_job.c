/*
 * The job layer of include/estream.h directly (the CLI, the server and Python reach it through
 * their own tests): the batch former's choices, records against sequences built here by the
 * rules written out again (lm-evaluation-harness's pair split, BOS, the choice and label rules),
 * records' errors, and the sizing of a session for a job.
 */
#include "t.h"

#include "estream.h"

#include <math.h>

#define DATA "tests/data/"

static es_model *model;

static int setup(void **state)
{
    (void)state;
    return es_model_open(DATA "tiny-q4_0.gguf", 0, &model) == ES_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    es_model_close(model);
    return 0;
}

static void test_batch_pick(void **state)
{
    (void)state;
    int pick[8];
    /* 900 does not fit after 300; 100 and 50 behind it do; 700 does not fit after 450 */
    const int64_t t1[] = {300, 900, 100, 50, 700};
    const int s1[] = {1, 1, 1, 1, 1};
    assert_int_equal(es_batch_pick(t1, s1, 5, 1000, 8, pick), 3);
    assert_int_equal(pick[0], 0);
    assert_int_equal(pick[1], 2);
    assert_int_equal(pick[2], 3);
    /* the first unit always goes, even past the budget; then the batch is full */
    const int64_t t2[] = {2000, 10};
    const int s2[] = {1, 1};
    assert_int_equal(es_batch_pick(t2, s2, 2, 1000, 8, pick), 1);
    assert_int_equal(pick[0], 0);
    /* sequences bound it too: 3 + 3, then 3 more would be 9 > 7; the one-sequence unit fits */
    const int64_t t3[] = {10, 10, 10, 10};
    const int s3[] = {3, 3, 3, 1};
    assert_int_equal(es_batch_pick(t3, s3, 4, 1000, 7, pick), 3);
    assert_int_equal(pick[2], 3);
    /* empty units (a bad record has no tokens) ride along */
    const int64_t t4[] = {1000, 0, 5};
    const int s4[] = {1, 0, 1};
    assert_int_equal(es_batch_pick(t4, s4, 3, 1000, 8, pick), 1);
    const int64_t t5[] = {999, 0, 5};
    assert_int_equal(es_batch_pick(t5, s4, 3, 1000, 8, pick), 2);
    assert_int_equal(es_batch_pick(t1, s1, 0, 1000, 8, pick), 0);
    /* a unit that fills the room left exactly goes (600 + 400 = the budget) */
    const int64_t t6[] = {600, 500, 400};
    assert_int_equal(es_batch_pick(t6, s1, 3, 1000, 8, pick), 2);
    assert_int_equal(pick[1], 2);
}

/* Plain tokens of s: no BOS or EOS, special-token text recognised (the records' rule). */
static int32_t *tok_in(const es_model *m, const char *s, size_t *n)
{
    int32_t *ids = malloc((strlen(s) + 16) * sizeof(int32_t));
    assert_non_null(ids);
    assert_int_equal(es_tokenize(m, s, strlen(s), 0, 1, ids, strlen(s) + 16, n), ES_OK);
    return ids;
}

static int32_t *tok(const char *s, size_t *n)
{
    return tok_in(model, s, n);
}

/* Runs one sequence alone: per-token log-probs into lp (NAN before score_from). */
static void run_alone(es_session *s, const int32_t *ids, size_t n, size_t from, float *lp,
                      int32_t *rank)
{
    es_seq q = {.ids = ids, .n_ids = n, .score_from = from, .token_logprob = lp,
                .token_rank = rank};
    assert_int_equal(es_session_run(s, &q, 1), ES_OK);
}

static es_record *make(const es_record_spec *sp)
{
    es_record *r = NULL;
    if (es_record_create(model, sp, &r) != ES_OK) fail_msg("es_record_create: %s", es_last_error());
    return r;
}

/* A pair, a multiple choice and labels against sequences built here by the rules: BOS +
 * tok(context + continuation), trailing whitespace of the context moved to the continuation,
 * scored from len(tok(context)) + 1; sums in double in order; argmax ties to the lowest. */
static void test_records_follow_the_rules(void **state)
{
    (void)state;
    assert_true(es_model_add_bos(model));
    es_session *s;
    assert_int_equal(es_session_create(model, NULL, &s), ES_OK);
    /* "The cat " + "sat down": the space moves to the continuation, so it is the pair below */
    const es_str ch[] = {{"sat down", 8}, {"ran", 3}, {"", 0}};
    es_record_spec sp = {.kind = ES_RECORD_CHOICES, .context = {"The cat ", 8}, .items = ch,
                         .n_items = 2, .gold = 1};
    es_record *c = make(&sp);
    const es_record_spec pp = {.kind = ES_RECORD_PAIR, .context = {"The cat", 7},
                               .continuation = {" sat down", 9}, .gold = -1};
    es_record *p = make(&pp);
    const es_str lab[] = {{" the", 4}, {" a", 2}};
    const es_record_spec lp = {.kind = ES_RECORD_LABELS, .text = {"Once upon", 9}, .items = lab,
                               .n_items = 2, .gold = -1};
    es_record *l = make(&lp);
    es_record_result x;
    assert_int_equal(es_record_result_get(p, &x), ES_E_INVAL); /* not run yet */
    es_record *all[] = {c, p, l};
    assert_int_equal(es_session_run_records(s, all, 3), ES_OK);

    /* the pair, by hand: "The cat" + " sat down" */
    size_t nw, nc;
    int32_t *w = tok("The cat sat down", &nw), *cx = tok("The cat", &nc);
    int32_t *ids = malloc((nw + 1) * sizeof(int32_t));
    ids[0] = es_model_bos(model);
    memcpy(ids + 1, w, nw * sizeof(int32_t));
    float *lpv = malloc((nw + 1) * sizeof(float));
    int32_t *rk = malloc((nw + 1) * sizeof(int32_t));
    run_alone(s, ids, nw + 1, nc + 1, lpv, rk);
    double want = 0;
    int greedy = 1;
    for (size_t i = nc + 1; i < nw + 1; i++) want += lpv[i], greedy &= rk[i] == 1;
    assert_int_equal(es_record_result_get(p, &x), ES_OK);
    assert_true(x.sum == want);
    assert_int_equal(x.greedy, greedy);
    assert_int_equal(x.n_tokens, (int64_t)(nw - nc));
    /* choice 0 is the same pair: its trailing spaces went to the continuation */
    es_record_result y;
    assert_int_equal(es_record_result_get(c, &y), ES_OK);
    assert_int_equal(y.n_items, 2);
    assert_true(y.item_logprobs[0] == want);
    assert_int_equal(y.item_tokens[0], (int64_t)(nw - nc));
    assert_int_equal(y.item_bytes[0], 8);
    assert_int_equal(y.item_bytes[1], 3);
    const double v0[3] = {y.item_logprobs[0], y.item_logprobs[0] / (double)y.item_tokens[0],
                          y.item_logprobs[0] / 8.0};
    const double v1[3] = {y.item_logprobs[1], y.item_logprobs[1] / (double)y.item_tokens[1],
                          y.item_logprobs[1] / 3.0};
    for (int k = 0; k < ES_RECORD_RULES; k++) assert_int_equal(y.chosen[k], v1[k] > v0[k]);
    assert_int_equal(y.gold, 1);
    /* four choices whose bytes per token differ: the rules choose differently here (on this
     * model, by tokens the fourth, by bytes the third), each by its own divisor */
    const es_str ch4[] = {{" there", 6}, {" xqzvwk", 7}, {" the the the the", 16},
                          {" internationalization", 21}};
    const es_record_spec sp4 = {.kind = ES_RECORD_CHOICES, .context = {"Once upon a time", 16},
                                .items = ch4, .n_items = 4, .gold = -1};
    es_record *c4 = make(&sp4);
    assert_int_equal(es_session_run_records(s, &c4, 1), ES_OK);
    es_record_result y4;
    assert_int_equal(es_record_result_get(c4, &y4), ES_OK);
    int want4[ES_RECORD_RULES] = {0, 0, 0};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(y4.item_bytes[i], (int64_t)ch4[i].len);
        const double v[3] = {y4.item_logprobs[i], y4.item_logprobs[i] / (double)y4.item_tokens[i],
                             y4.item_logprobs[i] / (double)ch4[i].len};
        for (int k = 0; k < ES_RECORD_RULES; k++) {
            const int b = want4[k];
            const double vb[3] = {y4.item_logprobs[b], y4.item_logprobs[b] / (double)y4.item_tokens[b],
                                  y4.item_logprobs[b] / (double)ch4[b].len};
            if (v[k] > vb[k]) want4[k] = i;
        }
    }
    for (int k = 0; k < ES_RECORD_RULES; k++) assert_int_equal(y4.chosen[k], want4[k]);
    assert_true(want4[1] != want4[2]); /* the data tell the two normalisations apart */
    es_record_destroy(c4);
    /* labels: " the" and " a" are one token each: the next-token log-probs, renormalised */
    assert_int_equal(es_record_n_seqs(l), 1);
    assert_int_equal(es_record_result_get(l, &x), ES_OK);
    const double z = exp(x.item_logprobs[0]) + exp(x.item_logprobs[1]);
    assert_true(fabs(x.probs[0] - exp(x.item_logprobs[0]) / z) < 1e-12);
    assert_true(fabs(x.probs[0] + x.probs[1] - 1) < 1e-12);
    assert_int_equal(x.label, x.item_logprobs[1] > x.item_logprobs[0]);
    /* an empty choice after a context without trailing whitespace has no tokens: a record
     * error naming it */
    sp.n_items = 3;
    sp.context = (es_str){"The cat", 7};
    es_record *bad = NULL;
    assert_int_equal(es_record_create(model, &sp, &bad), ES_E_INVAL);
    assert_null(bad);
    assert_string_equal(es_last_error(), "choice 2: the continuation has no tokens");
    free(w);
    free(cx);
    free(ids);
    free(lpv);
    free(rk);
    es_record_destroy(c);
    es_record_destroy(p);
    es_record_destroy(l);
    es_session_destroy(s);
}

static void expect_error(const es_record_spec *sp, const char *msg)
{
    es_record *r = NULL;
    assert_int_equal(es_record_create(model, sp, &r), ES_E_INVAL);
    assert_null(r);
    if (strcmp(es_last_error(), msg)) fail_msg("'%s', want '%s'", es_last_error(), msg);
}

static void test_record_errors(void **state)
{
    (void)state;
    const es_record_spec empty = {.kind = ES_RECORD_TEXT, .gold = -1};
    expect_error(&empty, "\"text\" is empty");
    const int32_t out[] = {1, 1 << 30};
    const es_record_spec ids = {.kind = ES_RECORD_IDS, .ids = out, .n_ids = 2, .gold = -1};
    char msg[128];
    snprintf(msg, sizeof(msg), "\"ids\"[1] is not an id of the vocabulary (0..%d)",
             es_model_n_vocab(model) - 1);
    expect_error(&ids, msg);
    const es_str one[] = {{"x", 1}};
    const es_record_spec gold = {.kind = ES_RECORD_CHOICES, .context = {"a", 1}, .items = one,
                                 .n_items = 1, .gold = 1};
    expect_error(&gold, "\"gold\" must be an index into \"choices\" (0..0)");
    const es_record_spec top = {.kind = ES_RECORD_TEXT, .text = {"a", 1}, .top = ES_MAX_TOP + 1,
                                .gold = -1};
    snprintf(msg, sizeof(msg), "top must be 0..%d, not %d", ES_MAX_TOP, ES_MAX_TOP + 1);
    expect_error(&top, msg);
    char *longtext = malloc(20000);
    memset(longtext, 'x', 19999);
    longtext[19999] = 0;
    const es_record_spec lng = {.kind = ES_RECORD_TEXT, .text = {longtext, 19999}, .gold = -1};
    es_record *r = NULL;
    assert_int_equal(es_record_create(model, &lng, &r), ES_E_INVAL);
    assert_non_null(strstr(es_last_error(), "more than the model's context"));
    free(longtext);
    const es_record_spec kind = {.kind = (es_record_kind)42};
    expect_error(&kind, "unknown record kind 42");
    assert_string_equal(es_record_kind_name(ES_RECORD_CHOICES), "choices");
    assert_null(es_record_kind_name((es_record_kind)42));
}

/* Sizing: 2048 without a budget (fewer for a smaller job), the budget given, capacity the
 * longest unit; sequences one per 32 tokens, at least 64 from 512 tokens on. */
static void test_sizing(void **state)
{
    (void)state;
    es_session *s;
    es_job_size z;
    es_job_shape j = {.longest = 100, .most_seqs = 3, .head_outputs = 1};
    assert_int_equal(es_session_create_for_job(model, NULL, &j, &s, &z), ES_OK);
    assert_int_equal(z.batch_tokens, 2048);
    assert_int_equal(z.max_seqs, 64);
    assert_int_equal(z.max_tokens, 2048);
    es_session_destroy(s);
    j.total_tokens = 300; /* the whole job: no batch larger than it */
    assert_int_equal(es_session_create_for_job(model, NULL, &j, &s, &z), ES_OK);
    assert_int_equal(z.batch_tokens, 300);
    assert_int_equal(z.max_seqs, 9);
    es_session_destroy(s);
    j.total_tokens = 0;
    j.batch_tokens = 64; /* given, smaller than the longest: capacity the longest */
    assert_int_equal(es_session_create_for_job(model, NULL, &j, &s, &z), ES_OK);
    assert_int_equal(z.batch_tokens, 64);
    assert_int_equal(z.max_tokens, 100);
    assert_int_equal(z.max_seqs, 3);
    /* the session refuses a batch past its capacity */
    int32_t ids[101] = {0};
    es_seq q = {.ids = ids, .n_ids = 101};
    assert_int_equal(es_session_run(s, &q, 1), ES_E_INVAL);
    es_session_destroy(s);
    /* a budget too small for one unit alone: ES_E_BUDGET naming the smallest that works */
    es_session_params p = es_session_default_params();
    p.mem_budget_bytes = 1 << 20;
    j.batch_tokens = 0;
    assert_int_equal(es_session_create_for_job(model, &p, &j, &s, &z), ES_E_BUDGET);
    assert_null(s);
    assert_non_null(strstr(es_last_error(), "the smallest budget that works is"));
    const es_job_shape bad = {.longest = (int64_t)ES_MAX_BATCH_TOKENS + 1};
    assert_int_equal(es_session_create_for_job(model, NULL, &bad, &s, &z), ES_E_INVAL);
}

/* The BOS rule of estream.h: text gets BOS first (once: text that writes the BOS token keeps
 * it); prompts and ids not starting with BOS are conditioned on one that is not theirs; as sent,
 * ids are scored as given and a prompt keeps the tokenizer's BOS. "<|endoftext|>" is tiny's BOS. */
static void test_bos_rule(void **state)
{
    (void)state;
    const int32_t bos = es_model_bos(model);
    assert_true(bos >= 0 && es_model_add_bos(model));
    es_session *s;
    assert_int_equal(es_session_create(model, NULL, &s), ES_OK);
    size_t n;
    int32_t *t = tok("hello there", &n);
    int32_t *with = malloc((n + 1) * sizeof(int32_t));
    with[0] = bos;
    memcpy(with + 1, t, n * sizeof(int32_t));
    const es_record_spec specs[] = {
        {.kind = ES_RECORD_TEXT, .text = {"hello there", 11}},
        {.kind = ES_RECORD_TEXT, .text = {"<|endoftext|>hello there", 24}},
        {.kind = ES_RECORD_IDS, .ids = t, .n_ids = n},
        {.kind = ES_RECORD_IDS, .ids = with, .n_ids = n + 1},
        {.kind = ES_RECORD_PROMPT, .text = {"hello there", 11}},
        {.kind = ES_RECORD_PROMPT, .text = {"hello there", 11}, .bos = ES_BOS_AS_SENT},
        {.kind = ES_RECORD_IDS, .ids = t, .n_ids = n, .bos = ES_BOS_AS_SENT},
    };
    es_record *r[7];
    for (int i = 0; i < 7; i++) r[i] = make(&specs[i]);
    assert_int_equal(es_session_run_records(s, r, 7), ES_OK);
    es_record_result x[7];
    for (int i = 0; i < 7; i++) assert_int_equal(es_record_result_get(r[i], &x[i]), ES_OK);
    /* BOS + tokens, one BOS either way, position 0 unscored: text, text with BOS, ids with
     * BOS, the prompt as sent */
    const int full[] = {0, 1, 3, 5};
    for (size_t k = 0; k < T_LEN(full); k++) {
        const es_record_result *y = &x[full[k]];
        assert_int_equal(y->n_ids, n + 1);
        assert_memory_equal(y->ids, with, (n + 1) * sizeof(int32_t));
        assert_int_equal(y->first_scored, 1);
        assert_memory_equal(y->logprobs + 1, x[0].logprobs + 1, n * sizeof(float));
        assert_true(y->sum == x[0].sum);
    }
    /* the tokens alone, conditioned on a BOS that is not theirs: ids and the prompt */
    for (int k = 2; k <= 4; k += 2) {
        assert_int_equal(x[k].n_ids, n);
        assert_memory_equal(x[k].ids, t, n * sizeof(int32_t));
        assert_int_equal(x[k].first_scored, 0);
        assert_memory_equal(x[k].logprobs, x[0].logprobs + 1, n * sizeof(float));
        assert_memory_equal(x[k].ranks, x[0].ranks + 1, n * sizeof(int32_t));
        assert_true(x[k].sum == x[0].sum);
        assert_int_equal(es_record_n_tokens(r[k]), (int64_t)n + 1); /* the BOS runs */
    }
    /* ids as sent: the first token has nothing before it */
    assert_int_equal(x[6].first_scored, 1);
    assert_int_equal(x[6].n_ids, n);
    assert_true(x[6].sum != x[0].sum);
    for (int i = 0; i < 7; i++) es_record_destroy(r[i]);
    /* the context bound counts the implicit BOS, and the message says so */
    int32_t *many = malloc(512 * sizeof(int32_t));
    for (int i = 0; i < 512; i++) many[i] = 10 + i % 200;
    const es_record_spec lng = {.kind = ES_RECORD_IDS, .ids = many, .n_ids = 512};
    expect_error(&lng, "\"ids\" has 512 tokens (and the BOS before them 513), more than the "
                       "model's context of 512");
    free(many);
    free(t);
    free(with);
    es_session_destroy(s);
}

/* ---- chats and reranking -------------------------------------------------------------------
 * A model with Llama's SentencePiece vocabulary (BOS <s>, "yes" and "no" one token each) and
 * Mixtral's chat template (which writes bos_token itself), made here. */

static es_model *chat_model(char **dir)
{
    *dir = t_mkdtemp("jobchat");
    char path[700], vocab[700];
    snprintf(path, sizeof(path), "%s/chat.gguf", *dir);
    snprintf(vocab, sizeof(vocab), "%s/vocab/ggml-vocab-llama-spm.gguf", t_data_dir());
    char *tmpl = t_read_file(DATA "chat/mixtral-8x7b-instruct.jinja", NULL);
    assert_non_null(tmpl);
    const es_synth_opts o = {.preset = "tiny", .type = "q4_0", .seed = 11, .vocab_path = vocab,
                             .chat_template = tmpl};
    if (es_synth(&o, path)) fail_msg("synth: %s", es_last_error());
    free(tmpl);
    es_model *m;
    assert_int_equal(es_model_open(path, 0, &m), ES_OK);
    return m;
}

static es_record *make_in(es_model *m, const es_record_spec *sp)
{
    es_record *r = NULL;
    if (es_record_create(m, sp, &r) != ES_OK) fail_msg("es_record_create: %s", es_last_error());
    return r;
}

/* A chat record is the prompt (or the labels) of its rendering, written out here by hand from
 * Mixtral's template: one BOS (the template's), the next-token distribution of the last
 * position. A rerank record's P(yes) / (P(yes) + P(no)) is computed here from the last
 * position's logits of Qwen3-Reranker's prompt, written out by hand. */
static void test_chats_and_reranking(void **state)
{
    (void)state;
    char *dir;
    es_model *m = chat_model(&dir);
    const int32_t bos = es_model_bos(m);
    assert_true(es_model_add_bos(m));
    es_session *s;
    assert_int_equal(es_session_create(m, NULL, &s), ES_OK);

    const es_chat_message chat[] = {{"user", "Is the sky blue?"},
                                    {"assistant", "Yes."},
                                    {"user", "And grass?"}};
    const char *by_hand = "<s>[INST] Is the sky blue? [/INST]Yes.</s>[INST] And grass? [/INST]";
    const es_record_spec cs = {.kind = ES_RECORD_PROMPT, .messages = chat, .n_messages = 3,
                               .next_top = 5, .gold = -1};
    const es_record_spec ts = {.kind = ES_RECORD_PROMPT, .text = {by_hand, strlen(by_hand)},
                               .next_top = 5, .gold = -1};
    const es_str yn[] = {{"yes", 3}, {"no", 2}};
    const es_record_spec cl = {.kind = ES_RECORD_LABELS, .messages = chat, .n_messages = 3,
                               .items = yn, .n_items = 2, .gold = -1};
    const es_record_spec tl = {.kind = ES_RECORD_LABELS, .text = {by_hand, strlen(by_hand)},
                               .items = yn, .n_items = 2, .gold = -1};
    es_record *r[4] = {make_in(m, &cs), make_in(m, &ts), make_in(m, &cl), make_in(m, &tl)};
    assert_int_equal(es_session_run_records(s, r, 4), ES_OK);
    es_record_result x[4];
    for (int i = 0; i < 4; i++) assert_int_equal(es_record_result_get(r[i], &x[i]), ES_OK);
    assert_true(x[0].n_ids > 10);
    assert_int_equal(x[0].ids[0], bos);
    assert_true(x[0].ids[1] != bos); /* the template's BOS, not a second one */
    assert_int_equal(es_record_n_tokens(r[0]), (int64_t)x[0].n_ids); /* nor a hidden one */
    assert_int_equal(x[0].n_ids, x[1].n_ids);
    assert_memory_equal(x[0].ids, x[1].ids, x[0].n_ids * sizeof(int32_t));
    assert_memory_equal(x[0].logprobs + 1, x[1].logprobs + 1, (x[0].n_ids - 1) * sizeof(float));
    assert_int_equal(x[0].next_top, 5);
    assert_memory_equal(x[0].next_ids, x[1].next_ids, 5 * sizeof(int32_t));
    assert_memory_equal(x[0].next_logprobs, x[1].next_logprobs, 5 * sizeof(float));
    assert_true(x[0].next_logprobs[0] >= x[0].next_logprobs[4]);
    assert_int_equal(x[2].n_items, 2);
    assert_memory_equal(x[2].item_logprobs, x[3].item_logprobs, 2 * sizeof(double));
    assert_memory_equal(x[2].probs, x[3].probs, 2 * sizeof(double));
    for (int i = 0; i < 4; i++) es_record_destroy(r[i]);

    /* a chat the template refuses: its own message */
    const es_chat_message bad[] = {{"assistant", "Hi"}};
    const es_record_spec bs = {.kind = ES_RECORD_PROMPT, .messages = bad, .n_messages = 1};
    es_record *b = NULL;
    assert_int_equal(es_record_create(m, &bs, &b), ES_E_INVAL);
    assert_null(b);
    assert_non_null(strstr(es_last_error(), "Conversation roles must alternate"));

    /* reranking: each document's prompt by hand; its last position's logits */
    const char *query = "what is a cat";
    const es_str docs[] = {{"A cat is a small animal.", 24}, {"Paris is a city.", 16}};
    const es_record_spec rs = {.kind = ES_RECORD_RERANK, .query = {query, strlen(query)},
                               .items = docs, .n_items = 2};
    es_record *rr = make_in(m, &rs);
    assert_int_equal(es_record_n_seqs(rr), 2);
    assert_int_equal(es_session_run_records(s, &rr, 1), ES_OK);
    es_record_result y;
    assert_int_equal(es_record_result_get(rr, &y), ES_OK);
    assert_int_equal(y.n_items, 2);
    size_t n1;
    int32_t *yes = tok_in(m, "yes", &n1);
    assert_int_equal(n1, 1);
    int32_t *no = tok_in(m, "no", &n1);
    assert_int_equal(n1, 1);
    const int nv = es_model_n_vocab(m);
    float *logits = malloc((size_t)nv * sizeof(float));
    for (int d = 0; d < 2; d++) {
        char prompt[2048];
        snprintf(prompt, sizeof(prompt),
                 "<|im_start|>system\nJudge whether the Document meets the requirements based on "
                 "the Query and the Instruct provided. Note that the answer can only be \"yes\" "
                 "or \"no\".<|im_end|>\n<|im_start|>user\n<Instruct>: %s\n<Query>: %s\n"
                 "<Document>: %.*s<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
                 ES_RERANK_INSTRUCTION, query, (int)docs[d].len, docs[d].ptr);
        size_t n;
        int32_t *t = tok_in(m, prompt, &n);
        int32_t *ids = malloc((n + 1) * sizeof(int32_t));
        ids[0] = bos;
        memcpy(ids + 1, t, n * sizeof(int32_t));
        const es_seq *rq = es_record_seqs(rr);
        if (rq[d].n_ids != n + 1 || memcmp(rq[d].ids, ids, (n + 1) * sizeof(int32_t)))
            fail_msg("document %d: the record's %zu ids are not the prompt's %zu", d,
                     rq[d].n_ids, n + 1);
        es_seq q = {.ids = ids, .n_ids = n + 1, .logits = logits};
        assert_int_equal(es_session_run(s, &q, 1), ES_OK);
        const double p = 1.0 / (1.0 + exp((double)logits[no[0]] - (double)logits[yes[0]]));
        if (fabs(y.probs[d] - p) > 1e-6) fail_msg("document %d: %.9g, by hand %.9g", d, y.probs[d], p);
        free(t);
        free(ids);
    }
    assert_int_equal(y.label, y.probs[1] > y.probs[0]);
    assert_int_equal(y.ranking[0], y.label);
    assert_int_equal(y.ranking[1], 1 - y.label);
    es_record_destroy(rr);
    free(logits);

    /* a template of one's own (query and document), and the answers' rule */
    const es_record_spec own = {.kind = ES_RECORD_RERANK, .query = {query, strlen(query)},
                                .items = docs, .n_items = 1,
                                .template_text = "Q: {{ query }} D: {{ document }} Relevant:"};
    rr = make_in(m, &own);
    size_t n;
    int32_t *t = tok_in(m, "Q: what is a cat D: A cat is a small animal. Relevant:", &n);
    const es_seq *sq = es_record_seqs(rr);
    assert_int_equal(sq[0].n_ids, n + 1);
    assert_int_equal(sq[0].ids[0], bos);
    assert_memory_equal(sq[0].ids + 1, t, n * sizeof(int32_t));
    free(t);
    es_record_destroy(rr);
    es_record_spec two = rs;
    two.rerank_labels[0] = (es_str){"yes indeed", 10};
    b = NULL;
    assert_int_equal(es_record_create(m, &two, &b), ES_E_INVAL);
    assert_string_equal(es_last_error(), "the rerank answer \"yes indeed\" is 2 tokens, not one");
    es_record_spec none = rs;
    none.n_items = 0;
    assert_int_equal(es_record_create(m, &none, &b), ES_E_INVAL);
    assert_null(b);
    free(yes);
    free(no);
    es_session_destroy(s);
    es_model_close(m);
    t_rm_rf(dir);
    free(dir);
}

/* Memory budgets as --mem and mem= write them (es_mem_budget_parse), against sizes worked out by
 * hand; auto against the limit main() sets (ESTREAM_MEM_LIMIT = 1,000,000 bytes: 80 % is
 * 800,000, above tiny-q4_0.gguf's 176,512 bytes and below tiny-f32.gguf's 1,095,552). */
static void test_mem_budget(void **state)
{
    (void)state;
    const char *q4 = DATA "tiny-q4_0.gguf", *f32 = DATA "tiny-f32.gguf";
    static const struct {
        const char *spec;
        uint64_t bytes;
    } good[] = {{"600M", 629145600}, {"1.5G", 1610612736}, {"2048", 2048},
                {"2048B", 2048},     {"64k", 65536},       {"64K", 65536},
                {"64KiB", 65536},    {" +1e3", 1000},      {"1T", 1099511627776ull},
                {"0.25MiB", 262144}, {"50%", 88256},       {"100%", 176512},
                {".5%", 882}};
    for (size_t i = 0; i < T_LEN(good); i++) {
        uint64_t b = 1;
        if (es_mem_budget_parse(good[i].spec, q4, &b) != ES_OK)
            fail_msg("'%s': %s", good[i].spec, es_last_error());
        if (b != good[i].bytes)
            fail_msg("'%s': %llu, want %llu", good[i].spec, (unsigned long long)b,
                     (unsigned long long)good[i].bytes);
    }
    static const struct {
        const char *spec, *why;
    } bad[] = {{"", "expected a size"},      {"G", "expected a size"},
               {"-1G", "expected a size"},   {"0", "expected a size"},
               {"1X", "unknown unit"},       {"1 G", "unknown unit"},
               {"nan", "expected a size"},   {"inf", "expected a size"},
               {"0x10", "expected a size"},  {"150%", "more than the whole file"},
               {"auto ", "expected a size"}, {"Auto", "expected a size"},
               {"0.5", "out of range"},      {"1e19", "out of range"}};
    for (size_t i = 0; i < T_LEN(bad); i++) {
        uint64_t b = 1;
        if (es_mem_budget_parse(bad[i].spec, q4, &b) != ES_E_INVAL)
            fail_msg("'%s' was accepted (%llu)", bad[i].spec, (unsigned long long)b);
        if (!strstr(es_last_error(), bad[i].why))
            fail_msg("'%s': '%s' lacks '%s'", bad[i].spec, es_last_error(), bad[i].why);
    }
    uint64_t b = 1;
    assert_int_equal(es_mem_budget_parse("25%", NULL, &b), ES_E_INVAL);
    assert_int_equal(es_mem_budget_parse("25%", DATA "no-such.gguf", &b), ES_E_IO);
    assert_non_null(strstr(es_last_error(), "no-such.gguf"));

    const char *source = NULL;
    assert_int_equal(es_memory_limit(&source), 1000000);
    assert_string_equal(source, "ESTREAM_MEM_LIMIT");
    assert_int_equal(es_mem_budget_parse("auto", q4, &b), ES_OK);
    assert_int_equal(b, 0); /* the file fits: resident */
    assert_int_equal(es_mem_budget_parse("auto", f32, &b), ES_OK);
    assert_int_equal(b, 800000);
    /* a file of 900,000 bytes: below the limit but above 80 % of it, so streamed too */
    const char *mid = t_tmp_path("900000.bin");
    FILE *f = fopen(mid, "wb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 899999, SEEK_SET), 0);
    assert_int_equal(fputc(0, f), 0);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(es_mem_budget_parse("auto", mid, &b), ES_OK);
    assert_int_equal(b, 800000);
    unlink(mid);
    assert_int_equal(es_mem_budget_parse("auto", NULL, &b), ES_E_INVAL);
}

int main(void)
{
    setenv("ESTREAM_MEM_LIMIT", "1000000", 1); /* before anything reads it: test_mem_budget */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_pick),
        cmocka_unit_test(test_records_follow_the_rules),
        cmocka_unit_test(test_record_errors),
        cmocka_unit_test(test_sizing),
        cmocka_unit_test(test_bos_rule),
        cmocka_unit_test(test_chats_and_reranking),
        cmocka_unit_test(test_mem_budget),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
