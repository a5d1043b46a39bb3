/* estream score's records (records.h): log-probabilities of texts, continuations, multiple
 * choices and labels.
 *
 * DESIGN
 * - Record kinds map onto es_seq outputs: a text is one sequence scored from position 1; a
 *   context/continuation pair is one sequence scored from the end of the context, tokenized as
 *   lm-evaluation-harness does (_encode_pair: trailing whitespace of the context moves to the
 *   continuation; whole = tok(context + continuation), context = tok(context), the continuation
 *   is whole past len(context); BOS first when the model adds one; an empty context is the
 *   prefix token: BOS, or EOS without one); multiple choices are one pair each; labels of one
 *   token each are one sequence with es_seq.labels on its last position, longer labels one pair
 *   each.
 * - Text is tokenized as plain text (no BOS from the tokenizer, special-token text not parsed);
 *   the BOS above is put by hand.
 * - Sums are in double over the float32 log-probs; the argmax rules take the first maximum, so
 *   ties go to the lowest index. Nothing timed goes into a record: two runs compare bytewise.
 */
#include "records/records.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum kind { K_TEXT, K_PAIR, K_CHOICES, K_LABELS } kind;

/* A record's priv: one allocation (rec_free frees it). */
typedef struct srec {
    kind k;
    int gold;          /* -1: none */
    bool one_token;    /* K_LABELS: every label is one token (es_seq.labels) */
    int n_labels;
    size_t n_bytes[];  /* K_CHOICES: [n_seqs] */
} srec;

static const char *const rule_names[3] = {"chosen", "chosen_norm_tokens", "chosen_norm_bytes"};
static const char *const acc_names[3] = {"acc", "acc_norm_tokens", "acc_norm_bytes"};

/* ---- parse -------------------------------------------------------------------------------- */

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' ||
           (c >= 0x1c && c <= 0x1f); /* Python's str.rstrip() on ASCII */
}

/* Makes r's priv of kind k (room for n_bytes byte counts) and n_seqs zeroed sequences; NULL
 * with r failed when memory runs out. */
static srec *start(rec *r, kind k, int n_seqs, int n_bytes)
{
    srec *p = calloc(1, sizeof(srec) + (size_t)n_bytes * sizeof(size_t));
    r->priv = p;
    r->seqs = calloc((size_t)n_seqs, sizeof(es_seq));
    if (!p || !r->seqs) {
        rec_fail(r, REC_OOM);
        return NULL;
    }
    r->n_seqs = n_seqs;
    p->k = k;
    p->gold = -1;
    return p;
}

/* Allocates the per-token outputs of q (n_ids set); false with r failed. */
static bool alloc_outputs(rec *r, es_seq *q, int top)
{
    q->token_logprob = malloc(q->n_ids * sizeof(float));
    q->token_rank = malloc(q->n_ids * sizeof(int32_t));
    if (top > 0) {
        q->top_n = top;
        q->top_ids = malloc(q->n_ids * (size_t)top * sizeof(int32_t));
        q->top_logprobs = malloc(q->n_ids * (size_t)top * sizeof(float));
    }
    if (!q->token_logprob || !q->token_rank || (top > 0 && (!q->top_ids || !q->top_logprobs))) {
        rec_fail(r, REC_OOM);
        return false;
    }
    return true;
}

/* BOS (when the model adds one) + the text's tokens, into q->ids. */
static bool text_seq(const es_model *m, rec *r, const char *s, size_t len, es_seq *q)
{
    if (len == 0) {
        rec_fail(r, "\"text\" is empty");
        return false;
    }
    size_t n;
    int32_t *t = rec_tokenize(m, r, s, len, 0, 0, &n);
    if (!t) return false;
    const int bos = es_model_add_bos(m) && es_model_bos(m) >= 0;
    int32_t *ids = malloc((n + 1) * sizeof(int32_t));
    if (!ids) {
        free(t);
        rec_fail(r, REC_OOM);
        return false;
    }
    if (bos) ids[0] = es_model_bos(m);
    memcpy(ids + bos, t, n * sizeof(int32_t));
    free(t);
    q->ids = ids;
    q->n_ids = n + (size_t)bos;
    return rec_check_ids(m, r, ids, q->n_ids, "the text");
}

/* lm-evaluation-harness's _encode_pair of (ctx, cont) into q: ids and score_from. */
static bool pair_seq(const es_model *m, rec *r, const char *ctx, size_t clen, const char *cont,
                     size_t xlen, es_seq *q, const char *what)
{
    size_t c = clen;
    while (c > 0 && is_space(ctx[c - 1])) c--; /* the whitespace goes to the continuation */
    char *whole = malloc(clen + xlen + 1);
    if (!whole) {
        rec_fail(r, REC_OOM);
        return false;
    }
    memcpy(whole, ctx, clen);
    memcpy(whole + clen, cont, xlen);
    size_t nw = 0, nc = 0;
    int32_t *w = clen + xlen ? rec_tokenize(m, r, whole, clen + xlen, 0, 0, &nw) : NULL;
    free(whole);
    if (r->error) return false;
    int32_t *ct = c ? rec_tokenize(m, r, ctx, c, 0, 0, &nc) : NULL;
    if (r->error) {
        free(w);
        return false;
    }
    free(ct); /* only its length counts, as in the harness */
    const int32_t bos = es_model_bos(m), eos = es_model_eos(m);
    /* the prefix: BOS when the model adds one; an empty context gets the harness's prefix token
     * (BOS, or EOS for a model without one) */
    const int32_t prefix = nc == 0 ? (bos >= 0 ? bos : eos) : bos;
    const bool add_bos = (es_model_add_bos(m) || nc == 0) && prefix >= 0;
    if (nc == 0 && prefix < 0) {
        free(w);
        rec_fail(r, "%s: the context is empty and the model has neither BOS nor EOS", what);
        return false;
    }
    if (nw <= nc) {
        free(w);
        rec_fail(r, "%s: the continuation has no tokens", what);
        return false;
    }
    int32_t *ids = malloc((nw + 1) * sizeof(int32_t));
    if (!ids) {
        free(w);
        rec_fail(r, REC_OOM);
        return false;
    }
    if (add_bos) ids[0] = prefix;
    memcpy(ids + add_bos, w, nw * sizeof(int32_t));
    free(w);
    q->ids = ids;
    q->n_ids = nw + (size_t)add_bos;
    q->score_from = nc + (size_t)add_bos;
    /* the sequence is the context and the continuation: say so, and say how long each is (the
     * continuation alone may be one token) */
    if (q->n_ids > (size_t)es_model_n_ctx(m)) {
        rec_fail(r, "%s: the context (%zu tokens) and the continuation (%zu) together have %zu "
                 "tokens, more than the model's context of %d", what, q->score_from,
                 q->n_ids - q->score_from, q->n_ids, es_model_n_ctx(m));
        return false;
    }
    return rec_check_ids(m, r, ids, q->n_ids, what);
}

static const char *str_of(const json_t *v, size_t *len)
{
    *len = json_string_length(v);
    return json_string_value(v);
}

/* A non-empty array of strings, or r failed. */
static bool string_list(rec *r, const json_t *a, const char *name)
{
    if (!json_is_array(a) || json_array_size(a) == 0) {
        rec_fail(r, "\"%s\" must be a non-empty array of strings", name);
        return false;
    }
    for (size_t i = 0; i < json_array_size(a); i++)
        if (!json_is_string(json_array_get(a, i))) {
            rec_fail(r, "\"%s\"[%zu] is not a string", name, i);
            return false;
        }
    return true;
}

/* Items of an array that a record may use: one past ES_MAX_BATCH_SEQS says "too many". */
static int capped(const json_t *a)
{
    const size_t n = json_array_size(a);
    return (int)(n < ES_MAX_BATCH_SEQS + 1 ? n : ES_MAX_BATCH_SEQS + 1);
}

/* {"context", "continuation"} or {"context", "choices", "gold"}. */
static void parse_context(const es_model *m, json_t *obj, rec *r)
{
    json_t *ctx = json_object_get(obj, "context"), *cont = json_object_get(obj, "continuation");
    json_t *choices = json_object_get(obj, "choices");
    if (json_object_get(obj, "text") || json_object_get(obj, "ids") ||
        json_object_get(obj, "labels")) {
        rec_fail(r, "\"context\" goes with \"continuation\" or \"choices\", not with "
                    "\"text\", \"ids\" or \"labels\"");
        return;
    }
    if (!json_is_string(ctx)) {
        rec_fail(r, "\"context\" is not a string");
        return;
    }
    if (!!cont == !!choices) {
        rec_fail(r, "\"context\" needs \"continuation\" or \"choices\" (one of them)");
        return;
    }
    size_t cl, xl;
    const char *cs = str_of(ctx, &cl);
    if (cont) {
        if (!json_is_string(cont)) {
            rec_fail(r, "\"continuation\" is not a string");
            return;
        }
        if (!start(r, K_PAIR, 1, 0)) return;
        const char *xs = str_of(cont, &xl);
        if (pair_seq(m, r, cs, cl, xs, xl, &r->seqs[0], "the continuation"))
            alloc_outputs(r, &r->seqs[0], 0);
        return;
    }
    if (!string_list(r, choices, "choices")) return;
    const int n = capped(choices);
    json_t *gold = json_object_get(obj, "gold");
    int g = -1;
    if (gold && !json_is_null(gold)) {
        if (!json_is_integer(gold) || json_integer_value(gold) < 0 ||
            json_integer_value(gold) >= n) {
            rec_fail(r, "\"gold\" must be an index into \"choices\" (0..%d)", n - 1);
            return;
        }
        g = (int)json_integer_value(gold);
    }
    srec *p = start(r, K_CHOICES, n, n);
    if (!p) return;
    p->gold = g;
    for (int i = 0; i < n; i++) {
        char what[48];
        snprintf(what, sizeof(what), "choice %d", i);
        const char *xs = str_of(json_array_get(choices, (size_t)i), &xl);
        p->n_bytes[i] = xl;
        if (!pair_seq(m, r, cs, cl, xs, xl, &r->seqs[i], what)) return;
        if (!alloc_outputs(r, &r->seqs[i], 0)) return;
    }
}

/* {"text", "labels"}: the text is not empty, the labels a list of strings. */
static void parse_labels(const es_model *m, const char *ts, size_t tl, const json_t *labels,
                         rec *r)
{
    const int n = capped(labels);
    int32_t *one = malloc((size_t)n * sizeof(int32_t));
    if (!one) {
        rec_fail(r, REC_OOM);
        return;
    }
    bool one_token = true;
    for (int i = 0; i < n && one_token; i++) {
        size_t ll, k;
        const char *ls = str_of(json_array_get(labels, (size_t)i), &ll);
        int32_t *t = ll ? rec_tokenize(m, r, ls, ll, 0, 0, &k) : NULL;
        if (r->error) {
            free(one);
            return;
        }
        one_token = ll > 0 && k == 1;
        if (one_token) one[i] = t[0];
        free(t);
    }
    srec *p = start(r, K_LABELS, one_token ? 1 : n, 0);
    if (!p) {
        free(one);
        return;
    }
    p->n_labels = n;
    p->one_token = one_token;
    if (one_token) {
        es_seq *q = &r->seqs[0];
        q->labels = one;
        q->n_labels = n;
        q->renormalize = 0; /* raw log P; renormalised in emit like the multi-token case */
        q->label_logprobs = malloc((size_t)n * sizeof(float));
        if (!q->label_logprobs) {
            rec_fail(r, REC_OOM);
            return;
        }
        text_seq(m, r, ts, tl, q);
        return;
    }
    free(one);
    for (int i = 0; i < n; i++) {
        char what[48];
        snprintf(what, sizeof(what), "label %d", i);
        size_t ll;
        const char *ls = str_of(json_array_get(labels, (size_t)i), &ll);
        if (!pair_seq(m, r, ts, tl, ls, ll, &r->seqs[i], what)) return;
        if (!alloc_outputs(r, &r->seqs[i], 0)) return;
    }
}

/* Every member but "context": {"text"}, {"ids"} or {"text", "labels"}. */
static void parse_text(const es_model *m, const score_opts *o, json_t *obj, rec *r)
{
    json_t *text = json_object_get(obj, "text"), *ids = json_object_get(obj, "ids");
    json_t *cont = json_object_get(obj, "continuation"), *labels = json_object_get(obj, "labels");
    if (cont || json_object_get(obj, "choices")) {
        rec_fail(r, "\"%s\" needs a \"context\"", cont ? "continuation" : "choices");
        return;
    }
    if (text && ids) {
        rec_fail(r, "give \"text\" or \"ids\", not both");
        return;
    }
    if (!text && !ids) {
        rec_fail(r, "no \"text\", \"ids\" or \"context\" member");
        return;
    }
    if (text && !json_is_string(text)) {
        rec_fail(r, "\"text\" is not a string");
        return;
    }
    size_t tl = 0;
    const char *ts = text ? str_of(text, &tl) : NULL;
    if (labels) {
        if (!text) {
            rec_fail(r, "\"labels\" go with \"text\"");
            return;
        }
        if (!string_list(r, labels, "labels")) return;
        if (tl == 0) {
            rec_fail(r, "\"text\" is empty");
            return;
        }
        parse_labels(m, ts, tl, labels, r);
        return;
    }
    if (o->top < 0 || o->top > SCORE_MAX_TOP) {
        rec_fail(r, "top must be 0..%d, not %d", SCORE_MAX_TOP, o->top);
        return;
    }
    if (!start(r, K_TEXT, 1, 0)) return;
    es_seq *q = &r->seqs[0];
    if (text) {
        if (!text_seq(m, r, ts, tl, q)) return;
    } else {
        size_t n;
        int32_t *v = rec_ids(m, r, ids, &n);
        if (!v) return;
        q->ids = v;
        q->n_ids = n;
        if (!rec_check_ids(m, r, v, n, "\"ids\"")) return;
    }
    q->score_from = 1;
    alloc_outputs(r, q, o->top);
}

void score_rec_parse(const es_model *m, const score_opts *o, json_t *obj, rec *r)
{
    if (json_object_get(obj, "context")) parse_context(m, obj, r);
    else parse_text(m, o, obj, r);
    rec_finish(r);
}

/* ---- emit --------------------------------------------------------------------------------- */

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

/* The jansson calls below return 0, or -1 when a value could not be made (NULL) or added: the
 * emitters OR them into err and report any failure once. */

static int emit_text(const es_seq *q, json_t *out)
{
    const int top = q->top_ids ? q->top_n : 0;
    int err = 0;
    json_t *ids = json_array(), *lp = json_array(), *gr = json_array();
    json_t *tops = top ? json_array() : NULL;
    for (size_t i = 0; i < q->n_ids && !err; i++) {
        err |= json_array_append_new(ids, json_integer(q->ids[i]));
        err |= json_array_append_new(lp, i ? rec_json_float(q->token_logprob[i]) : json_null());
        err |= json_array_append_new(gr, i ? json_boolean(q->token_rank[i] == 1) : json_null());
        if (!top) continue;
        if (!i) {
            err |= json_array_append_new(tops, json_null());
            continue;
        }
        json_t *row = json_array();
        for (int k = 0; k < top; k++) {
            const size_t at = i * (size_t)top + (size_t)k;
            json_t *pair = json_array(); /* [id, logprob] */
            err |= json_array_append_new(pair, json_integer(q->top_ids[at]));
            err |= json_array_append_new(pair, rec_json_float(q->top_logprobs[at]));
            err |= json_array_append_new(row, pair);
        }
        err |= json_array_append_new(tops, row);
    }
    err |= json_object_set_new(out, "ids", ids);
    err |= json_object_set_new(out, "logprobs", lp);
    err |= json_object_set_new(out, "sum", rec_json_float(seq_sum(q, NULL)));
    err |= json_object_set_new(out, "greedy", gr);
    if (top) err |= json_object_set_new(out, "top", tops);
    return err;
}

static int emit_pair(const es_seq *q, json_t *out)
{
    bool g;
    int err = json_object_set_new(out, "logprob", rec_json_float(seq_sum(q, &g)));
    err |= json_object_set_new(out, "greedy", json_boolean(g));
    err |= json_object_set_new(out, "n_tokens",
                               json_integer((json_int_t)(q->n_ids - q->score_from)));
    return err;
}

/* best[3]: the choice of each rule. */
static int emit_choices(const rec *r, const srec *p, json_t *out, int best[3])
{
    const int n = r->n_seqs;
    double *v = malloc(3 * (size_t)n * sizeof(double)); /* [rule][choice] */
    if (!v) return -1;
    int err = 0;
    json_t *lp = json_array(), *nt = json_array(), *nb = json_array();
    for (int i = 0; i < n; i++) {
        const es_seq *q = &r->seqs[i];
        const double s = seq_sum(q, NULL);
        const size_t ntok = q->n_ids - q->score_from;
        v[i] = s;
        v[n + i] = s / (double)ntok;
        v[2 * n + i] = p->n_bytes[i] ? s / (double)p->n_bytes[i] : s;
        err |= json_array_append_new(lp, rec_json_float(s));
        err |= json_array_append_new(nt, json_integer((json_int_t)ntok));
        err |= json_array_append_new(nb, json_integer((json_int_t)p->n_bytes[i]));
    }
    err |= json_object_set_new(out, "logprobs", lp);
    err |= json_object_set_new(out, "n_tokens", nt);
    err |= json_object_set_new(out, "n_bytes", nb);
    for (int k = 0; k < 3; k++) {
        best[k] = argmax(v + (size_t)k * (size_t)n, n);
        err |= json_object_set_new(out, rule_names[k], json_integer(best[k]));
    }
    free(v);
    if (p->gold >= 0) {
        json_t *cor = json_object();
        for (int k = 0; k < 3; k++)
            err |= json_object_set_new(cor, rule_names[k], json_boolean(best[k] == p->gold));
        err |= json_object_set_new(out, "correct", cor);
    }
    return err;
}

static int emit_labels(const rec *r, const srec *p, json_t *out)
{
    const int n = p->n_labels;
    double *raw = malloc((size_t)n * sizeof(double));
    if (!raw) return -1;
    for (int i = 0; i < n; i++)
        raw[i] = p->one_token ? (double)r->seqs[0].label_logprobs[i] : seq_sum(&r->seqs[i], NULL);
    double mx = raw[0], z = 0;
    for (int i = 1; i < n; i++) mx = raw[i] > mx ? raw[i] : mx;
    for (int i = 0; i < n; i++) z += exp(raw[i] - mx);
    int err = 0;
    json_t *lp = json_array(), *pr = json_array();
    for (int i = 0; i < n; i++) {
        err |= json_array_append_new(lp, rec_json_float(raw[i]));
        err |= json_array_append_new(pr, rec_json_float(exp(raw[i] - mx) / z));
    }
    err |= json_object_set_new(out, "label_logprobs", lp);
    err |= json_object_set_new(out, "probs", pr);
    err |= json_object_set_new(out, "label", json_integer(argmax(raw, n)));
    free(raw);
    return err;
}

size_t score_rec_listed_tokens(const rec *r)
{
    const srec *p = r->priv;
    return !r->error && p && p->k == K_TEXT && r->n_seqs == 1 ? r->seqs[0].n_ids : 0;
}

bool score_rec_emit(const es_model *m, const score_opts *o, const rec *r, json_t *out,
                    score_tally *t)
{
    (void)m;
    (void)o; /* the record's arrays say how many alternatives it has */
    const srec *p = r->priv;
    if (r->error || !p) return true; /* a bad record has no output fields */
    int best[3], err;
    switch (p->k) {
    case K_TEXT: err = emit_text(&r->seqs[0], out); break;
    case K_PAIR: err = emit_pair(&r->seqs[0], out); break;
    case K_CHOICES: err = emit_choices(r, p, out, best); break;
    default: err = emit_labels(r, p, out); break;
    }
    if (err) return false;
    if (t && p->k == K_CHOICES && p->gold >= 0) {
        t->n_gold++;
        for (int k = 0; k < 3; k++) t->correct[k] += best[k] == p->gold;
    }
    return true;
}

/* ---- the tally ---------------------------------------------------------------------------- */

void score_tally_add_record(score_tally *t, const json_t *out_record)
{
    json_t *cor = json_object_get(out_record, "correct");
    if (!json_is_object(cor)) return;
    t->n_gold++;
    for (int k = 0; k < 3; k++) t->correct[k] += json_is_true(json_object_get(cor, rule_names[k]));
}

void score_tally_summary(const score_tally *t, json_t *sum)
{
    if (!t->n_gold) return;
    json_object_set_new(sum, "gold_records", json_integer((json_int_t)t->n_gold));
    for (int k = 0; k < 3; k++) {
        const double acc = (double)t->correct[k] / (double)t->n_gold;
        json_object_set_new(sum, acc_names[k], json_real(acc));
    }
}
