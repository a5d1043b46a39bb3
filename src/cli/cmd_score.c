/* estream score: log-probabilities of texts, continuations, multiple choices and labels from a
 * JSONL file, one output line per record (the job driver is jsonl.c).
 *
 * DESIGN
 * - Record kinds map onto es_seq outputs: a text is one sequence scored from position 1; a
 *   context/continuation pair is one sequence scored from the end of the context, tokenized as
 *   lm-evaluation-harness does (_encode_pair: trailing whitespace of the context moves to the
 *   continuation; whole = tok(context + continuation), context = tok(context), the continuation
 *   is whole past len(context); BOS first when the model adds one; an empty context is the
 *   prefix token: BOS, or EOS without one); multiple choices are one pair each; labels of one token each are one
 *   sequence with es_seq.labels on its last position, longer labels one pair each.
 * - Sums are in double over the float32 log-probs; the argmax rules take the first maximum, so
 *   ties go to the lowest index. Nothing timed goes into a record: two runs compare bytewise.
 */
#include "cli/cli.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOP 20

static const char help[] =
    "usage: estream score -m MODEL -f IN.jsonl [-o OUT.jsonl] [--top N] [--batch-tokens N]\n"
    "                     [--on-error stop|skip] [--shard I/N | --shard-range I/N] [--json]\n"
    "                     [-t THREADS] [--mem BUDGET] [streaming options]\n"
    "\n"
    "Scores each input record with the model and writes one JSON line per record, in input\n"
    "order: {\"line\": N (1-based input line), \"id\": ... (copied when the record has one), ...}.\n"
    "Records hold no timings, so two runs give identical files. Text is tokenized as plain text\n"
    "(special-token text is not parsed); BOS is put first when the model's tokenizer adds one.\n"
    "Log-probs are natural logarithms of the model's softmax over the whole vocabulary.\n"
    "\n"
    "record kinds:\n"
    "  {\"text\": S} or {\"ids\": [..]}  every token given the ones before it. Output \"ids\" (the\n"
    "      tokens scored: BOS + the text's tokens; ids exactly as given, no BOS added),\n"
    "      \"logprobs\" (one per id, the first null), \"sum\", \"greedy\" (per id: true when it is\n"
    "      the model's top token; the first null) and with --top N \"top\" (per position the N\n"
    "      best [id, logprob] pairs, best first; the first null)\n"
    "  {\"context\": C, \"continuation\": X}  log P(X | C) with lm-evaluation-harness's\n"
    "      tokenization: trailing whitespace of C moves to the front of X, the sequence is BOS +\n"
    "      tok(C + X) and the continuation its tokens past len(tok(C)); an empty C has BOS (EOS\n"
    "      without one) as its prefix. Output \"logprob\" (the continuation's sum), \"greedy\"\n"
    "      (every continuation token is the top token), \"n_tokens\"\n"
    "  {\"context\": C, \"choices\": [X1, ..], \"gold\": G (optional index)}  each choice scored as\n"
    "      a continuation. Output \"logprobs\" (per choice), \"n_tokens\", \"n_bytes\" (UTF-8\n"
    "      bytes of the choice), \"chosen\" (argmax of the sum: lm-eval's acc),\n"
    "      \"chosen_norm_tokens\" (argmax of sum/n_tokens), \"chosen_norm_bytes\" (argmax of\n"
    "      sum/n_bytes: lm-eval's acc_norm); ties go to the lowest index. With \"gold\":\n"
    "      \"correct\": {\"chosen\": b, \"chosen_norm_tokens\": b, \"chosen_norm_bytes\": b}, and the\n"
    "      summary gives the accuracy of each rule (acc, acc_norm_tokens, acc_norm_bytes)\n"
    "  {\"text\": S, \"labels\": [L1, ..]}  which label continues the text. When every label is\n"
    "      one token (tokenized alone, as given: \" yes\" and \"yes\" differ), the next-token\n"
    "      log-probs of the labels after the text; otherwise each label is scored as a\n"
    "      continuation. Output \"label_logprobs\" (log P of each label under the model),\n"
    "      \"probs\" (renormalised over the labels) and \"label\" (index of the best)\n"
    "Other members (metadata) are ignored. A bad record is {\"line\", \"id\", \"error\"} with\n"
    "--on-error skip.\n"
    "\n"
    "  --top N            alternatives per position for text records, 0.." CLI_XSTR(MAX_TOP)
    " (default 0)\n"
    "summary (stderr): records, errors, tokens, seconds, tokens/s, accuracy when records have\n"
    "gold (over every record with \"gold\", resumed ones included: acc, acc_norm_tokens,\n"
    "acc_norm_bytes, and gold_records in --json).\n";

typedef enum kind { K_TEXT, K_PAIR, K_CHOICES, K_LABELS } kind;

typedef struct srec {
    kind k;
    int gold;          /* -1: none */
    bool one_token;    /* K_LABELS: every label is one token (es_seq.labels) */
    int n_labels;
    size_t *n_bytes;   /* K_CHOICES: [n_seqs] */
} srec;

typedef struct score_ctx {
    int top;
    int64_t n_gold, correct[3];
} score_ctx;

static const char *const rule_names[3] = {"chosen", "chosen_norm_tokens", "chosen_norm_bytes"};
static const char *const acc_names[3] = {"acc", "acc_norm_tokens", "acc_norm_bytes"};

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' ||
           (c >= 0x1c && c <= 0x1f); /* Python's str.rstrip() on ASCII */
}

/* Allocates the per-token outputs of q (n_ids set). */
static void alloc_outputs(es_seq *q, int top)
{
    q->token_logprob = malloc(q->n_ids * sizeof(float));
    q->token_rank = malloc(q->n_ids * sizeof(int32_t));
    if (!q->token_logprob || !q->token_rank) cli_die("out of memory");
    if (top > 0) {
        q->top_n = top;
        q->top_ids = malloc(q->n_ids * (size_t)top * sizeof(int32_t));
        q->top_logprobs = malloc(q->n_ids * (size_t)top * sizeof(float));
        if (!q->top_ids || !q->top_logprobs) cli_die("out of memory");
    }
}

/* BOS (when the model adds one) + the text's tokens, into q->ids. */
static bool text_seq(cli_job *j, cli_rec *r, const char *s, size_t len, es_seq *q)
{
    if (len == 0) {
        cli_rec_fail(r, "\"text\" is empty");
        return false;
    }
    size_t n;
    int32_t *t = cli_rec_tokenize(j, r, s, len, 0, 0, &n);
    if (!t) return false;
    const int bos = es_model_add_bos(j->m) && es_model_bos(j->m) >= 0;
    int32_t *ids = malloc((n + 1) * sizeof(int32_t));
    if (!ids) cli_die("out of memory");
    if (bos) ids[0] = es_model_bos(j->m);
    memcpy(ids + bos, t, n * sizeof(int32_t));
    free(t);
    q->ids = ids;
    q->n_ids = n + (size_t)bos;
    return cli_rec_check_ids(j, r, ids, q->n_ids, "the text");
}

/* lm-evaluation-harness's _encode_pair of (ctx, cont) into q: ids and score_from. */
static bool pair_seq(cli_job *j, cli_rec *r, const char *ctx, size_t clen, const char *cont,
                     size_t xlen, es_seq *q, const char *what)
{
    size_t c = clen;
    while (c > 0 && is_space(ctx[c - 1])) c--; /* the whitespace goes to the continuation */
    char *whole = malloc(clen + xlen + 1);
    if (!whole) cli_die("out of memory");
    memcpy(whole, ctx, clen);
    memcpy(whole + clen, cont, xlen);
    size_t nw = 0, nc = 0;
    int32_t *w = clen + xlen ? cli_rec_tokenize(j, r, whole, clen + xlen, 0, 0, &nw) : NULL;
    free(whole);
    if (r->error) return false;
    int32_t *ct = c ? cli_rec_tokenize(j, r, ctx, c, 0, 0, &nc) : NULL;
    if (r->error) {
        free(w);
        return false;
    }
    free(ct); /* only its length counts, as in the harness */
    const int32_t bos = es_model_bos(j->m), eos = es_model_eos(j->m);
    /* the prefix: BOS when the model adds one; an empty context gets the harness's prefix token
     * (BOS, or EOS for a model without one) */
    const int32_t prefix = nc == 0 ? (bos >= 0 ? bos : eos) : bos;
    const bool add_bos = (es_model_add_bos(j->m) || nc == 0) && prefix >= 0;
    if (nc == 0 && prefix < 0) {
        free(w);
        cli_rec_fail(r, "%s: the context is empty and the model has neither BOS nor EOS", what);
        return false;
    }
    if (nw <= nc) {
        free(w);
        cli_rec_fail(r, "%s: the continuation has no tokens", what);
        return false;
    }
    int32_t *ids = malloc((nw + 1) * sizeof(int32_t));
    if (!ids) cli_die("out of memory");
    if (add_bos) ids[0] = prefix;
    memcpy(ids + add_bos, w, nw * sizeof(int32_t));
    free(w);
    q->ids = ids;
    q->n_ids = nw + (size_t)add_bos;
    q->score_from = nc + (size_t)add_bos;
    return cli_rec_check_ids(j, r, ids, q->n_ids, what);
}

static const char *str_of(json_t *v, size_t *len)
{
    *len = json_string_length(v);
    return json_string_value(v);
}

/* A non-empty array of strings, or r failed. */
static bool string_list(cli_rec *r, json_t *a, const char *name)
{
    if (!json_is_array(a) || json_array_size(a) == 0) {
        cli_rec_fail(r, "\"%s\" must be a non-empty array of strings", name);
        return false;
    }
    for (size_t i = 0; i < json_array_size(a); i++)
        if (!json_is_string(json_array_get(a, i))) {
            cli_rec_fail(r, "\"%s\"[%zu] is not a string", name, i);
            return false;
        }
    return true;
}

static void parse(cli_job *j, json_t *o, cli_rec *r)
{
    score_ctx *c = j->ctx;
    srec *p = calloc(1, sizeof(srec));
    if (!p) cli_die("out of memory");
    p->gold = -1;
    r->priv = p;
    json_t *text = json_object_get(o, "text"), *ids = json_object_get(o, "ids");
    json_t *ctx = json_object_get(o, "context"), *cont = json_object_get(o, "continuation");
    json_t *choices = json_object_get(o, "choices"), *labels = json_object_get(o, "labels");
    if (ctx) {
        if (text || ids || labels) {
            cli_rec_fail(r, "\"context\" goes with \"continuation\" or \"choices\", not with "
                            "\"text\", \"ids\" or \"labels\"");
            return;
        }
        if (!json_is_string(ctx)) {
            cli_rec_fail(r, "\"context\" is not a string");
            return;
        }
        if (!!cont == !!choices) {
            cli_rec_fail(r, "\"context\" needs \"continuation\" or \"choices\" (one of them)");
            return;
        }
        size_t cl, xl;
        const char *cs = str_of(ctx, &cl);
        if (cont) {
            if (!json_is_string(cont)) {
                cli_rec_fail(r, "\"continuation\" is not a string");
                return;
            }
            p->k = K_PAIR;
            r->seqs = calloc(1, sizeof(es_seq));
            if (!r->seqs) cli_die("out of memory");
            r->n_seqs = 1;
            const char *xs = str_of(cont, &xl);
            if (pair_seq(j, r, cs, cl, xs, xl, &r->seqs[0], "the continuation"))
                alloc_outputs(&r->seqs[0], 0);
            return;
        }
        if (!string_list(r, choices, "choices")) return;
        p->k = K_CHOICES;
        const int n = (int)(json_array_size(choices) < ES_MAX_BATCH_SEQS + 1
                                ? json_array_size(choices) : ES_MAX_BATCH_SEQS + 1);
        json_t *gold = json_object_get(o, "gold");
        if (gold && !json_is_null(gold)) {
            if (!json_is_integer(gold) || json_integer_value(gold) < 0 ||
                json_integer_value(gold) >= n) {
                cli_rec_fail(r, "\"gold\" must be an index into \"choices\" (0..%d)", n - 1);
                return;
            }
            p->gold = (int)json_integer_value(gold);
        }
        r->seqs = calloc((size_t)n, sizeof(es_seq));
        p->n_bytes = calloc((size_t)n, sizeof(size_t));
        if (!r->seqs || !p->n_bytes) cli_die("out of memory");
        r->n_seqs = n;
        for (int i = 0; i < n; i++) {
            char what[48];
            snprintf(what, sizeof(what), "choice %d", i);
            const char *xs = str_of(json_array_get(choices, (size_t)i), &xl);
            p->n_bytes[i] = xl;
            if (!pair_seq(j, r, cs, cl, xs, xl, &r->seqs[i], what)) return;
            alloc_outputs(&r->seqs[i], 0);
        }
        return;
    }
    if (cont || choices) {
        cli_rec_fail(r, "\"%s\" needs a \"context\"", cont ? "continuation" : "choices");
        return;
    }
    if (text && ids) {
        cli_rec_fail(r, "give \"text\" or \"ids\", not both");
        return;
    }
    if (!text && !ids) {
        cli_rec_fail(r, "no \"text\", \"ids\" or \"context\" member");
        return;
    }
    if (text && !json_is_string(text)) {
        cli_rec_fail(r, "\"text\" is not a string");
        return;
    }
    size_t tl;
    const char *ts = text ? str_of(text, &tl) : NULL;
    if (labels) {
        if (!text) {
            cli_rec_fail(r, "\"labels\" go with \"text\"");
            return;
        }
        if (!string_list(r, labels, "labels")) return;
        if (tl == 0) {
            cli_rec_fail(r, "\"text\" is empty");
            return;
        }
        p->k = K_LABELS;
        const int n = (int)(json_array_size(labels) < ES_MAX_BATCH_SEQS + 1
                                ? json_array_size(labels) : ES_MAX_BATCH_SEQS + 1);
        p->n_labels = n;
        int32_t *one = malloc((size_t)n * sizeof(int32_t));
        if (!one) cli_die("out of memory");
        p->one_token = true;
        for (int i = 0; i < n && p->one_token; i++) {
            size_t ll, k;
            const char *ls = str_of(json_array_get(labels, (size_t)i), &ll);
            int32_t *t = ll ? cli_rec_tokenize(j, r, ls, ll, 0, 0, &k) : NULL;
            if (r->error) {
                free(one);
                return;
            }
            p->one_token = ll > 0 && k == 1;
            if (p->one_token) one[i] = t[0];
            free(t);
        }
        if (p->one_token) {
            r->seqs = calloc(1, sizeof(es_seq));
            if (!r->seqs) cli_die("out of memory");
            r->n_seqs = 1;
            es_seq *q = &r->seqs[0];
            q->labels = one;
            q->n_labels = n;
            q->renormalize = 0; /* raw log P; renormalised below like the multi-token case */
            q->label_logprobs = malloc((size_t)n * sizeof(float));
            if (!q->label_logprobs) cli_die("out of memory");
            text_seq(j, r, ts, tl, q);
            return;
        }
        free(one);
        r->seqs = calloc((size_t)n, sizeof(es_seq));
        if (!r->seqs) cli_die("out of memory");
        r->n_seqs = n;
        for (int i = 0; i < n; i++) {
            char what[48];
            snprintf(what, sizeof(what), "label %d", i);
            size_t ll;
            const char *ls = str_of(json_array_get(labels, (size_t)i), &ll);
            if (!pair_seq(j, r, ts, tl, ls, ll, &r->seqs[i], what)) return;
            alloc_outputs(&r->seqs[i], 0);
        }
        return;
    }
    p->k = K_TEXT;
    r->seqs = calloc(1, sizeof(es_seq));
    if (!r->seqs) cli_die("out of memory");
    r->n_seqs = 1;
    es_seq *q = &r->seqs[0];
    if (text) {
        if (!text_seq(j, r, ts, tl, q)) return;
    } else {
        size_t n;
        int32_t *v = cli_rec_ids(j, r, ids, &n);
        if (!v) return;
        q->ids = v;
        q->n_ids = n;
        if (!cli_rec_check_ids(j, r, v, n, "\"ids\"")) return;
    }
    q->score_from = 1;
    alloc_outputs(q, c->top);
}

/* Sum of q's log-probs from score_from, and whether every scored token was the top one. */
static double seq_sum(const es_seq *q, bool *greedy)
{
    double s = 0;
    bool g = true;
    for (size_t i = q->score_from ? q->score_from : 1; i < q->n_ids; i++) {
        s += (double)q->token_logprob[i];
        g = g && q->token_rank[i] == 1;
    }
    if (greedy) *greedy = g;
    return s;
}

static int argmax(const double *v, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i; /* strict: ties go to the lowest index */
    return b;
}

static void emit(cli_job *j, cli_rec *r, json_t *o)
{
    score_ctx *c = j->ctx;
    srec *p = r->priv;
    if (p->k == K_TEXT) {
        const es_seq *q = &r->seqs[0];
        json_t *ids = json_array(), *lp = json_array(), *gr = json_array();
        json_t *top = c->top ? json_array() : NULL;
        for (size_t i = 0; i < q->n_ids; i++) {
            json_array_append_new(ids, json_integer(q->ids[i]));
            json_array_append_new(lp, i ? cli_json_float(q->token_logprob[i]) : json_null());
            json_array_append_new(gr, i ? json_boolean(q->token_rank[i] == 1) : json_null());
            if (!top) continue;
            if (!i) {
                json_array_append_new(top, json_null());
                continue;
            }
            json_t *row = json_array();
            for (int k = 0; k < c->top; k++)
                json_array_append_new(
                    row, json_pack("[i,o]", q->top_ids[i * (size_t)c->top + (size_t)k],
                                   cli_json_float(q->top_logprobs[i * (size_t)c->top + (size_t)k])));
            json_array_append_new(top, row);
        }
        json_object_set_new(o, "ids", ids);
        json_object_set_new(o, "logprobs", lp);
        json_object_set_new(o, "sum", cli_json_float(seq_sum(q, NULL)));
        json_object_set_new(o, "greedy", gr);
        if (top) json_object_set_new(o, "top", top);
    } else if (p->k == K_PAIR) {
        bool g;
        const es_seq *q = &r->seqs[0];
        json_object_set_new(o, "logprob", cli_json_float(seq_sum(q, &g)));
        json_object_set_new(o, "greedy", json_boolean(g));
        json_object_set_new(o, "n_tokens", json_integer((json_int_t)(q->n_ids - q->score_from)));
    } else if (p->k == K_CHOICES) {
        const int n = r->n_seqs;
        double *v[3];
        for (int k = 0; k < 3; k++)
            if (!(v[k] = malloc((size_t)n * sizeof(double)))) cli_die("out of memory");
        json_t *lp = json_array(), *nt = json_array(), *nb = json_array();
        for (int i = 0; i < n; i++) {
            const es_seq *q = &r->seqs[i];
            const double s = seq_sum(q, NULL);
            const size_t ntok = q->n_ids - q->score_from;
            v[0][i] = s;
            v[1][i] = s / (double)ntok;
            v[2][i] = p->n_bytes[i] ? s / (double)p->n_bytes[i] : s;
            json_array_append_new(lp, cli_json_float(s));
            json_array_append_new(nt, json_integer((json_int_t)ntok));
            json_array_append_new(nb, json_integer((json_int_t)p->n_bytes[i]));
        }
        json_object_set_new(o, "logprobs", lp);
        json_object_set_new(o, "n_tokens", nt);
        json_object_set_new(o, "n_bytes", nb);
        int best[3];
        for (int k = 0; k < 3; k++) {
            best[k] = argmax(v[k], n);
            json_object_set_new(o, rule_names[k], json_integer(best[k]));
        }
        if (p->gold >= 0) {
            json_t *cor = json_object();
            for (int k = 0; k < 3; k++) {
                json_object_set_new(cor, rule_names[k], json_boolean(best[k] == p->gold));
                c->correct[k] += best[k] == p->gold;
            }
            c->n_gold++;
            json_object_set_new(o, "correct", cor);
        }
        for (int k = 0; k < 3; k++) free(v[k]);
    } else {
        const int n = p->n_labels;
        double *raw = malloc((size_t)n * sizeof(double));
        if (!raw) cli_die("out of memory");
        for (int i = 0; i < n; i++)
            raw[i] = p->one_token ? (double)r->seqs[0].label_logprobs[i] : seq_sum(&r->seqs[i], NULL);
        double mx = raw[0], z = 0;
        for (int i = 1; i < n; i++) mx = raw[i] > mx ? raw[i] : mx;
        for (int i = 0; i < n; i++) z += exp(raw[i] - mx);
        json_t *lp = json_array(), *pr = json_array();
        for (int i = 0; i < n; i++) {
            json_array_append_new(lp, cli_json_float(raw[i]));
            json_array_append_new(pr, cli_json_float(exp(raw[i] - mx) / z));
        }
        json_object_set_new(o, "label_logprobs", lp);
        json_object_set_new(o, "probs", pr);
        json_object_set_new(o, "label", json_integer(argmax(raw, n)));
        free(raw);
    }
}

static void free_rec(cli_job *j, cli_rec *r)
{
    (void)j;
    srec *p = r->priv;
    for (int i = 0; i < r->n_seqs; i++) {
        es_seq *q = &r->seqs[i];
        free((void *)q->ids);
        free((void *)q->labels);
        free(q->token_logprob);
        free(q->token_rank);
        free(q->top_ids);
        free(q->top_logprobs);
        free(q->label_logprobs);
    }
    free(r->seqs);
    if (p) free(p->n_bytes);
    free(p);
}

static void restat(cli_job *j, json_t *rec)
{
    score_ctx *c = j->ctx;
    json_t *cor = json_object_get(rec, "correct");
    if (!json_is_object(cor)) return;
    c->n_gold++;
    for (int k = 0; k < 3; k++) c->correct[k] += json_is_true(json_object_get(cor, rule_names[k]));
}

static void summary(cli_job *j, json_t *sum)
{
    score_ctx *c = j->ctx;
    if (!c->n_gold) return;
    json_object_set_new(sum, "gold_records", json_integer((json_int_t)c->n_gold));
    for (int k = 0; k < 3; k++)
        json_object_set_new(sum, acc_names[k], json_real((double)c->correct[k] / (double)c->n_gold));
}

static const cli_job_ops ops = {parse, emit, free_rec, restat, summary};

int cmd_score(int argc, char **argv)
{
    cli_args a = {argc, 1, argv, "score"};
    score_ctx c = {0};
    cli_job j = {.cmd = "score", .ops = &ops, .ctx = &c};
    for (; a.i < argc; a.i++) {
        const char *s = argv[a.i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            fputs(help, stdout);
            fputs(cli_job_help, stdout);
            fputs(cli_stream_help, stdout);
            return 0;
        } else if (cli_job_flag(&a, s, &j)) continue;
        else if (!strcmp(s, "--top")) c.top = (int)cli_int(s, cli_value(&a, s), 0, MAX_TOP);
        else cli_unknown(&a, s);
    }
    /* what changes the records (OUT.meta); --on-error does not: a job stopped on a bad record
     * may go on with skip and keep what it wrote */
    j.options = json_pack("{s:i}", "top", c.top);
    cli_job_run(&j);
    json_decref(j.options);
    es_model_close(j.m);
    return 0;
}
