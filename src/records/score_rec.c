/* estream score's records (records.h): log-probabilities of texts, continuations, multiple
 * choices and labels, as JSON.
 *
 * DESIGN
 * - What a record means (its sequences, the tokenization of a context and its continuation, the
 *   rules of a multiple choice and of labels) is the library's (src/job/record.c, include/
 *   estream.h "records"): this file only checks the JSON's members and types, fills an
 *   es_record_spec, and writes the results (es_record_result) as estream score's fields.
 * - Nothing timed goes into a record: two runs compare bytewise.
 */
#include "records/records.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const rule_names[ES_RECORD_RULES] = {"chosen", "chosen_norm_tokens",
                                                          "chosen_norm_bytes"};
static const char *const acc_names[ES_RECORD_RULES] = {"acc", "acc_norm_tokens", "acc_norm_bytes"};

/* ---- parse -------------------------------------------------------------------------------- */

static es_str str_of(const json_t *v)
{
    return (es_str){json_string_value(v), json_string_length(v)};
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

/* The strings of a (checked by string_list), at most capped(a) of them, as es_str views into
 * the JSON (valid while it lives); NULL with r failed when memory runs out. */
static es_str *str_items(rec *r, const json_t *a, int *n)
{
    *n = capped(a);
    es_str *v = malloc((size_t)*n * sizeof(es_str));
    if (!v) {
        rec_fail(r, REC_OOM);
        return NULL;
    }
    for (int i = 0; i < *n; i++) v[i] = str_of(json_array_get(a, (size_t)i));
    return v;
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
    es_record_spec sp = {.context = str_of(ctx), .gold = -1};
    if (cont) {
        if (!json_is_string(cont)) {
            rec_fail(r, "\"continuation\" is not a string");
            return;
        }
        sp.kind = ES_RECORD_PAIR;
        sp.continuation = str_of(cont);
        rec_make(m, &sp, r);
        return;
    }
    if (!string_list(r, choices, "choices")) return;
    const int n = capped(choices);
    json_t *gold = json_object_get(obj, "gold");
    if (gold && !json_is_null(gold)) {
        if (!json_is_integer(gold) || json_integer_value(gold) < 0 ||
            json_integer_value(gold) >= n) {
            rec_fail(r, "\"gold\" must be an index into \"choices\" (0..%d)", n - 1);
            return;
        }
        sp.gold = (int)json_integer_value(gold);
    }
    es_str *items = str_items(r, choices, &sp.n_items);
    if (!items) return;
    sp.kind = ES_RECORD_CHOICES;
    sp.items = items;
    rec_make(m, &sp, r);
    free(items);
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
    es_record_spec sp = {.gold = -1};
    if (text) sp.text = str_of(text);
    if (labels) {
        if (!text) {
            rec_fail(r, "\"labels\" go with \"text\"");
            return;
        }
        if (!string_list(r, labels, "labels")) return;
        if (sp.text.len == 0) {
            rec_fail(r, "\"text\" is empty");
            return;
        }
        es_str *items = str_items(r, labels, &sp.n_items);
        if (!items) return;
        sp.kind = ES_RECORD_LABELS;
        sp.items = items;
        rec_make(m, &sp, r);
        free(items);
        return;
    }
    if (o->top < 0 || o->top > SCORE_MAX_TOP) {
        rec_fail(r, "top must be 0..%d, not %d", SCORE_MAX_TOP, o->top);
        return;
    }
    sp.top = o->top;
    sp.next_top = o->next_top;
    sp.bos = o->bos;
    int32_t *v = NULL;
    if (text) {
        sp.kind = o->prompts ? ES_RECORD_PROMPT : ES_RECORD_TEXT;
    } else {
        if (!(v = rec_ids(m, r, ids, &sp.n_ids))) return;
        sp.kind = ES_RECORD_IDS;
        sp.ids = v;
    }
    rec_make(m, &sp, r);
    free(v);
}

/* What emit needs to know beyond the library's result: a chat record's output is its next-token
 * distribution, not the rendered prompt's per-token scores. */
typedef struct srec {
    bool chat;
} srec;

/* {"messages": [...]} or {"messages": [...], "labels": [...]}: the chat rendered with the chat
 * template and the generation prompt; the next tokens after it, or which label follows. */
static void parse_chat(const es_model *m, const score_opts *o, json_t *obj, rec *r)
{
    json_t *labels = json_object_get(obj, "labels");
    if (json_object_get(obj, "text") || json_object_get(obj, "ids") ||
        json_object_get(obj, "context") || json_object_get(obj, "query")) {
        rec_fail(r, "\"messages\" goes alone or with \"labels\", not with \"text\", \"ids\", "
                    "\"context\" or \"query\"");
        return;
    }
    rec_chat c;
    char err[256];
    if (!rec_chat_parse(json_object_get(obj, "messages"), &c, err, sizeof(err))) {
        rec_fail(r, "%s", err);
        return;
    }
    es_record_spec sp = {.gold = -1, .messages = c.msgs, .n_messages = c.n,
                         .template_text = o->chat_template, .bos = o->bos};
    es_str *items = NULL;
    if (labels) {
        if (!string_list(r, labels, "labels")) {
            rec_chat_free(&c);
            return;
        }
        if (!(items = str_items(r, labels, &sp.n_items))) {
            rec_chat_free(&c);
            return;
        }
        sp.kind = ES_RECORD_LABELS;
        sp.items = items;
    } else {
        sp.kind = ES_RECORD_PROMPT;
        sp.next_top = o->chat_top > 0 ? o->chat_top : 10;
        srec *p = calloc(1, sizeof(*p));
        if (!p) {
            rec_chat_free(&c);
            rec_fail(r, REC_OOM);
            return;
        }
        p->chat = true;
        r->priv = p;
    }
    rec_make(m, &sp, r);
    free(items);
    rec_chat_free(&c);
}

/* {"query": Q, "documents": [D, ..], "instruction": I (optional)}: each document's relevance. */
static void parse_rerank(const es_model *m, const score_opts *o, json_t *obj, rec *r)
{
    json_t *q = json_object_get(obj, "query"), *docs = json_object_get(obj, "documents");
    json_t *ins = json_object_get(obj, "instruction");
    if (!json_is_string(q)) {
        rec_fail(r, "\"query\" is not a string");
        return;
    }
    if (!docs) {
        rec_fail(r, "\"query\" needs \"documents\"");
        return;
    }
    if (!string_list(r, docs, "documents")) return;
    if (ins && !json_is_null(ins) && !json_is_string(ins)) {
        rec_fail(r, "\"instruction\" is not a string");
        return;
    }
    es_record_spec sp = {.kind = ES_RECORD_RERANK, .gold = -1, .query = str_of(q),
                         .template_text = o->rerank_template};
    if (json_is_string(ins)) sp.instruction = str_of(ins);
    es_str *items = str_items(r, docs, &sp.n_items);
    if (!items) return;
    sp.items = items;
    rec_make(m, &sp, r);
    free(items);
}

void score_rec_parse(const es_model *m, const score_opts *o, json_t *obj, rec *r)
{
    if (json_object_get(obj, "messages")) parse_chat(m, o, obj, r);
    else if (json_object_get(obj, "query")) parse_rerank(m, o, obj, r);
    else if (json_object_get(obj, "context")) parse_context(m, obj, r);
    else parse_text(m, o, obj, r);
}

/* ---- emit --------------------------------------------------------------------------------- */

/* The jansson calls below return 0, or -1 when a value could not be made (NULL) or added: the
 * emitters OR them into err and report any failure once. */

static int emit_text(const es_record_result *x, json_t *out)
{
    const int top = x->top;
    int err = 0;
    json_t *ids = json_array(), *lp = json_array(), *gr = json_array();
    json_t *tops = top ? json_array() : NULL;
    for (size_t i = 0; i < x->n_ids && !err; i++) {
        const bool scored = i >= x->first_scored; /* a first token with nothing before it */
        err |= json_array_append_new(ids, json_integer(x->ids[i]));
        err |= json_array_append_new(lp, scored ? rec_json_float(x->logprobs[i]) : json_null());
        err |= json_array_append_new(gr, scored ? json_boolean(x->ranks[i] == 1) : json_null());
        if (!top) continue;
        if (!scored) {
            err |= json_array_append_new(tops, json_null());
            continue;
        }
        json_t *row = json_array();
        for (int k = 0; k < top; k++) {
            const size_t at = i * (size_t)top + (size_t)k;
            json_t *pair = json_array(); /* [id, logprob] */
            err |= json_array_append_new(pair, json_integer(x->top_ids[at]));
            err |= json_array_append_new(pair, rec_json_float(x->top_logprobs[at]));
            err |= json_array_append_new(row, pair);
        }
        err |= json_array_append_new(tops, row);
    }
    err |= json_object_set_new(out, "ids", ids);
    err |= json_object_set_new(out, "logprobs", lp);
    err |= json_object_set_new(out, "sum", rec_json_float(x->sum));
    err |= json_object_set_new(out, "greedy", gr);
    if (top) err |= json_object_set_new(out, "top", tops);
    return err;
}

static int emit_pair(const es_record_result *x, json_t *out)
{
    int err = json_object_set_new(out, "logprob", rec_json_float(x->sum));
    err |= json_object_set_new(out, "greedy", json_boolean(x->greedy));
    err |= json_object_set_new(out, "n_tokens", json_integer((json_int_t)x->n_tokens));
    return err;
}

static int emit_choices(const es_record_result *x, json_t *out)
{
    int err = 0;
    json_t *lp = json_array(), *nt = json_array(), *nb = json_array();
    for (int i = 0; i < x->n_items; i++) {
        err |= json_array_append_new(lp, rec_json_float(x->item_logprobs[i]));
        err |= json_array_append_new(nt, json_integer((json_int_t)x->item_tokens[i]));
        err |= json_array_append_new(nb, json_integer((json_int_t)x->item_bytes[i]));
    }
    err |= json_object_set_new(out, "logprobs", lp);
    err |= json_object_set_new(out, "n_tokens", nt);
    err |= json_object_set_new(out, "n_bytes", nb);
    for (int k = 0; k < ES_RECORD_RULES; k++)
        err |= json_object_set_new(out, rule_names[k], json_integer(x->chosen[k]));
    if (x->gold >= 0) {
        json_t *cor = json_object();
        for (int k = 0; k < ES_RECORD_RULES; k++)
            err |= json_object_set_new(cor, rule_names[k], json_boolean(x->chosen[k] == x->gold));
        err |= json_object_set_new(out, "correct", cor);
    }
    return err;
}

/* A chat's next-token distribution: "n_tokens" of the rendered prompt, "next": [[id, lp], ..]. */
static int emit_next(const es_record_result *x, json_t *out)
{
    int err = json_object_set_new(out, "n_tokens", json_integer((json_int_t)x->n_ids));
    json_t *next = json_array();
    for (int k = 0; k < x->next_top; k++) {
        json_t *pair = json_array();
        err |= json_array_append_new(pair, json_integer(x->next_ids[k]));
        err |= json_array_append_new(pair, rec_json_float(x->next_logprobs[k]));
        err |= json_array_append_new(next, pair);
    }
    return err | json_object_set_new(out, "next", next);
}

/* A rerank: "scores" per document (P(yes) / (P(yes) + P(no))) and "ranking", the documents'
 * indexes by decreasing score (ties: the lower index first). */
static int emit_rerank(const es_record_result *x, json_t *out)
{
    int err = 0;
    json_t *sc = json_array(), *rank = json_array();
    for (int i = 0; i < x->n_items; i++) {
        err |= json_array_append_new(sc, rec_json_float(x->probs[i]));
        err |= json_array_append_new(rank, json_integer(x->ranking[i]));
    }
    err |= json_object_set_new(out, "scores", sc);
    return err | json_object_set_new(out, "ranking", rank);
}

static int emit_labels(const es_record_result *x, json_t *out)
{
    int err = 0;
    json_t *lp = json_array(), *pr = json_array();
    for (int i = 0; i < x->n_items; i++) {
        err |= json_array_append_new(lp, rec_json_float(x->item_logprobs[i]));
        err |= json_array_append_new(pr, rec_json_float(x->probs[i]));
    }
    err |= json_object_set_new(out, "label_logprobs", lp);
    err |= json_object_set_new(out, "probs", pr);
    err |= json_object_set_new(out, "label", json_integer(x->label));
    return err;
}

size_t score_rec_listed_tokens(const rec *r)
{
    size_t n = 0;
    for (int i = 0; !r->error && i < r->n_seqs; i++)
        n += (r->seqs[i].token_logprob ? r->seqs[i].n_ids : 0) + (size_t)r->seqs[i].next_top_k;
    return n;
}

bool score_rec_emit(const es_model *m, const score_opts *o, const rec *r, json_t *out,
                    score_tally *t)
{
    (void)m;
    (void)o; /* the record says how many alternatives it has */
    es_record_result x;
    if (r->error || !r->r || es_record_result_get(r->r, &x)) return true; /* no output fields */
    int err;
    switch (x.kind) {
    case ES_RECORD_TEXT:
    case ES_RECORD_IDS:
    case ES_RECORD_PROMPT:
        err = r->priv && ((const srec *)r->priv)->chat ? emit_next(&x, out) : emit_text(&x, out);
        break;
    case ES_RECORD_RERANK: err = emit_rerank(&x, out); break;
    case ES_RECORD_PAIR: err = emit_pair(&x, out); break;
    case ES_RECORD_CHOICES: err = emit_choices(&x, out); break;
    default: err = emit_labels(&x, out); break;
    }
    if (err) return false;
    if (t && x.kind == ES_RECORD_CHOICES && x.gold >= 0) {
        t->n_gold++;
        for (int k = 0; k < ES_RECORD_RULES; k++) t->correct[k] += x.chosen[k] == x.gold;
    }
    return true;
}

/* ---- the tally ---------------------------------------------------------------------------- */

void score_tally_add_record(score_tally *t, const json_t *out_record)
{
    json_t *cor = json_object_get(out_record, "correct");
    if (!json_is_object(cor)) return;
    t->n_gold++;
    for (int k = 0; k < ES_RECORD_RULES; k++) t->correct[k] += json_is_true(json_object_get(cor, rule_names[k]));
}

void score_tally_summary(const score_tally *t, json_t *sum)
{
    if (!t->n_gold) return;
    json_object_set_new(sum, "gold_records", json_integer((json_int_t)t->n_gold));
    for (int k = 0; k < ES_RECORD_RULES; k++) {
        const double acc = (double)t->correct[k] / (double)t->n_gold;
        json_object_set_new(sum, acc_names[k], json_real(acc));
    }
}
