/*
 * Records (include/estream.h): a spec's sequences and the output arrays they ask for. The one
 * place where what a scoring or embedding record means is written: estream score and embed,
 * estream serve and the Python package all make their records here.
 *
 * DESIGN
 * - Record kinds map onto es_seq outputs: a text is one sequence scored from position 1; a
 *   context/continuation pair is one sequence scored from the end of the context, tokenized as
 *   lm-evaluation-harness does (_encode_pair: trailing whitespace of the context moves to the
 *   continuation; whole = tok(context + continuation), context = tok(context), the continuation
 *   is whole past len(context); BOS first when the model adds one; an empty context is the
 *   prefix token: BOS, or EOS without one); multiple choices are one pair each; labels of one
 *   token each are one sequence with es_seq.labels on its last position, longer labels one pair
 *   each; an embedding is one sequence pooled.
 * - Text is tokenized with special-token text recognised and without the tokenizer's BOS/EOS;
 *   the record puts BOS first by hand (not twice: text that starts with the BOS token keeps
 *   that one). Prompts and ids follow the BOS rule of estream.h: under ES_BOS_IMPLICIT one
 *   that does not start with BOS runs as BOS + its tokens (shift 1), and its results skip the
 *   BOS. Embedding text is tokenized as llama-embedding tokenizes it.
 * - Errors are es_fail(ES_E_INVAL) with the message estream score prints for the record; the
 *   first failure wins, in the order the checks are written here.
 */
#include "job/record.h"

#include "core/util.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = {"text",  "ids",    "pair",  "choices",
                                         "labels", "embed", "prompt", "rerank"};

const char *es_record_kind_name(es_record_kind k)
{
    return (unsigned)k < sizeof(kind_names) / sizeof(kind_names[0]) ? kind_names[k] : NULL;
}

static es_status oom(void) { return es_fail(ES_E_NOMEM, "out of memory for a record"); }

/* Python's str.rstrip() on ASCII: the whitespace lm-evaluation-harness moves. */
static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' ||
           (c >= 0x1c && c <= 0x1f);
}

/* Tokenizes s as es_tokenize does into a malloc'd array of *n ids (*n may be 0). */
static es_status tokenize(const es_model *m, es_str s, int add_special, int parse_special,
                          int32_t **out, size_t *n)
{
    *out = NULL;
    size_t cap = s.len + 16; /* every token covers at least one byte, plus BOS/EOS */
    int32_t *ids = malloc(cap * sizeof(int32_t));
    if (!ids) return oom();
    es_status st = es_tokenize(m, s.ptr ? s.ptr : "", s.len, add_special, parse_special, ids,
                               cap, n);
    if (st == ES_E_SHORT_BUFFER) {
        cap = *n;
        int32_t *more = realloc(ids, cap * sizeof(int32_t));
        if (!more) {
            free(ids);
            return oom();
        }
        ids = more;
        st = es_tokenize(m, s.ptr ? s.ptr : "", s.len, add_special, parse_special, ids, cap, n);
    }
    if (st) {
        free(ids);
        if (st == ES_E_NOMEM) return st;
        char why[400]; /* es_fail formats into the buffer es_last_error() points at */
        snprintf(why, sizeof(why), "%s", es_last_error());
        return es_fail(ES_E_INVAL, "cannot tokenize: %s", why);
    }
    *out = ids;
    return ES_OK;
}

/* A sequence of 1..n_ctx tokens of the vocabulary; what names it in the message. */
static es_status check_ids(const es_model *m, const int32_t *ids, size_t n, const char *what)
{
    const int nv = es_model_n_vocab(m), nc = es_model_n_ctx(m);
    if (n == 0) return es_fail(ES_E_INVAL, "%s has no tokens", what);
    if (n > (size_t)nc)
        return es_fail(ES_E_INVAL, "%s has %zu tokens, more than the model's context of %d", what,
                       n, nc);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= nv)
            return es_fail(ES_E_INVAL, "%s: id %d at %zu is outside the vocabulary (0..%d)", what,
                           ids[i], i, nv - 1);
    return ES_OK;
}

/* ids as given: a non-empty list of vocabulary ids, copied into q. */
static es_status given_ids(const es_model *m, const int32_t *ids, size_t n, es_seq *q)
{
    if (n == 0 || !ids) return es_fail(ES_E_INVAL, "\"ids\" is empty");
    const int nv = es_model_n_vocab(m);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= nv)
            return es_fail(ES_E_INVAL, "\"ids\"[%zu] is not an id of the vocabulary (0..%d)", i,
                           nv - 1);
    int32_t *v = malloc(n * sizeof(int32_t));
    if (!v) return oom();
    memcpy(v, ids, n * sizeof(int32_t));
    q->ids = v;
    q->n_ids = n;
    return ES_OK;
}

/* The BOS rule (estream.h) on q's tokens: under ES_BOS_IMPLICIT, for a model that adds BOS,
 * tokens that do not start with it get one before them (*shift 1). Then the sequence's checks;
 * what names the tokens in a message. */
static es_status bos_rule(const es_model *m, es_bos_rule rule, es_seq *q, int *shift,
                          const char *what)
{
    const int32_t bos = es_model_bos(m);
    *shift = rule == ES_BOS_IMPLICIT && es_model_add_bos(m) && bos >= 0 &&
             (q->n_ids == 0 || q->ids[0] != bos);
    if (*shift) {
        int32_t *v = malloc((q->n_ids + 1) * sizeof(int32_t));
        if (!v) return oom();
        v[0] = bos;
        memcpy(v + 1, q->ids, q->n_ids * sizeof(int32_t));
        free((void *)q->ids);
        q->ids = v;
        q->n_ids++;
        if (q->n_ids > (size_t)es_model_n_ctx(m))
            return es_fail(ES_E_INVAL, "%s has %zu tokens (and the BOS before them %zu), more "
                                       "than the model's context of %d", what, q->n_ids - 1,
                           q->n_ids, es_model_n_ctx(m));
    }
    return check_ids(m, q->ids, q->n_ids, what);
}

/* BOS (when the model adds one) + the text's tokens, into q->ids. */
static es_status text_seq(const es_model *m, es_str text, es_seq *q)
{
    if (text.len == 0) return es_fail(ES_E_INVAL, "\"text\" is empty");
    int32_t *t;
    size_t n;
    ES_TRY(tokenize(m, text, 0, 1, &t, &n));
    /* BOS first, unless the text wrote it itself */
    const int bos = es_model_add_bos(m) && es_model_bos(m) >= 0 && !(n && t[0] == es_model_bos(m));
    int32_t *ids = malloc((n + 1) * sizeof(int32_t));
    if (!ids) {
        free(t);
        return oom();
    }
    if (bos) ids[0] = es_model_bos(m);
    memcpy(ids + bos, t, n * sizeof(int32_t));
    free(t);
    q->ids = ids;
    q->n_ids = n + (size_t)bos;
    return check_ids(m, ids, q->n_ids, "the text");
}

/* lm-evaluation-harness's _encode_pair of (ctx, cont) into q: ids and score_from. */
static es_status pair_seq(const es_model *m, es_str ctx, es_str cont, es_seq *q, const char *what)
{
    size_t c = ctx.len;
    while (c > 0 && is_space(ctx.ptr[c - 1])) c--; /* the whitespace goes to the continuation */
    char *whole = malloc(ctx.len + cont.len + 1);
    if (!whole) return oom();
    if (ctx.len) memcpy(whole, ctx.ptr, ctx.len);
    if (cont.len) memcpy(whole + ctx.len, cont.ptr, cont.len);
    size_t nw = 0, nc = 0;
    int32_t *w = NULL, *ct = NULL;
    es_status st = ES_OK;
    if (ctx.len + cont.len) st = tokenize(m, (es_str){whole, ctx.len + cont.len}, 0, 1, &w, &nw);
    free(whole);
    if (st) return st;
    if (c && (st = tokenize(m, (es_str){ctx.ptr, c}, 0, 1, &ct, &nc))) {
        free(w);
        return st;
    }
    free(ct); /* only its length counts, as in the harness */
    const int32_t bos = es_model_bos(m), eos = es_model_eos(m);
    /* the prefix: BOS when the model adds one; an empty context gets the harness's prefix token
     * (BOS, or EOS for a model without one) */
    const int32_t prefix = nc == 0 ? (bos >= 0 ? bos : eos) : bos;
    /* not twice: a context that wrote the BOS token itself keeps that one */
    const int add_bos = (es_model_add_bos(m) || nc == 0) && prefix >= 0 && !(nw && w[0] == prefix);
    if (nc == 0 && prefix < 0) {
        free(w);
        return es_fail(ES_E_INVAL, "%s: the context is empty and the model has neither BOS nor "
                                   "EOS", what);
    }
    if (nw <= nc) {
        free(w);
        return es_fail(ES_E_INVAL, "%s: the continuation has no tokens", what);
    }
    int32_t *ids = malloc((nw + 1) * sizeof(int32_t));
    if (!ids) {
        free(w);
        return oom();
    }
    if (add_bos) ids[0] = prefix;
    memcpy(ids + add_bos, w, nw * sizeof(int32_t));
    free(w);
    q->ids = ids;
    q->n_ids = nw + (size_t)add_bos;
    q->score_from = nc + (size_t)add_bos;
    /* the sequence is the context and the continuation: say how long each is (the
     * continuation alone may be one token) */
    if (q->n_ids > (size_t)es_model_n_ctx(m))
        return es_fail(ES_E_INVAL, "%s: the context (%zu tokens) and the continuation (%zu) "
                       "together have %zu tokens, more than the model's context of %d", what,
                       q->score_from, q->n_ids - q->score_from, q->n_ids, es_model_n_ctx(m));
    return check_ids(m, ids, q->n_ids, what);
}

/* The per-token outputs of q (n_ids set), top alternatives per position. */
static es_status score_outputs(es_seq *q, int top)
{
    q->token_logprob = malloc(q->n_ids * sizeof(float));
    q->token_rank = malloc(q->n_ids * sizeof(int32_t));
    if (top > 0) {
        q->top_n = top;
        q->top_ids = malloc(q->n_ids * (size_t)top * sizeof(int32_t));
        q->top_logprobs = malloc(q->n_ids * (size_t)top * sizeof(float));
    }
    if (!q->token_logprob || !q->token_rank || (top > 0 && (!q->top_ids || !q->top_logprobs)))
        return oom();
    return ES_OK;
}

/* n zeroed sequences, and room for n items' results. */
static es_status start(es_record *r, int n_seqs, int n_items)
{
    r->seqs = calloc((size_t)n_seqs, sizeof(es_seq));
    if (!r->seqs) return oom();
    r->n_seqs = n_seqs;
    if (n_items > 0) {
        r->n_items = n_items;
        r->item_logprobs = calloc((size_t)n_items, sizeof(double));
        r->item_tokens = calloc((size_t)n_items, sizeof(int64_t));
        r->item_bytes = calloc((size_t)n_items, sizeof(int64_t));
        r->probs = calloc((size_t)n_items, sizeof(double));
        r->ranking = calloc((size_t)n_items, sizeof(int));
        if (!r->item_logprobs || !r->item_tokens || !r->item_bytes || !r->probs || !r->ranking)
            return oom();
    }
    return ES_OK;
}

/* Items a record may have: one past ES_MAX_BATCH_SEQS is built, then refused as too many (so
 * the first error of a huge record is the one a smaller one gives). */
static int capped(int n) { return n < ES_MAX_BATCH_SEQS + 1 ? n : ES_MAX_BATCH_SEQS + 1; }

/* A render's failure as a record's: a template that raises (ES_E_FORMAT) or a model without
 * one (ES_E_UNSUPPORTED) is a record that cannot run, ES_E_INVAL, with the same message. */
static es_status render_status(es_status st)
{
    if (st != ES_E_FORMAT && st != ES_E_UNSUPPORTED) return st;
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", es_last_error());
    return es_fail(ES_E_INVAL, "%s", msg);
}

/* A spec's text: its chat rendered with the chat template and the generation prompt when it
 * has messages (malloc'd into *owned), else its text as given. */
static es_status spec_text(const es_model *m, const es_record_spec *sp, es_str *text,
                           char **owned)
{
    *owned = NULL;
    if (sp->n_messages <= 0) {
        *text = sp->text;
        return ES_OK;
    }
    size_t n;
    ES_TRY(render_status(
        es_chat_render_alloc(m, sp->template_text, sp->messages, sp->n_messages, 1, owned, &n)));
    *text = (es_str){*owned, n};
    return ES_OK;
}

static es_status make_text(const es_model *m, const es_record_spec *sp, es_record *r)
{
    if (sp->top < 0 || sp->top > ES_MAX_TOP)
        return es_fail(ES_E_INVAL, "top must be 0..%d, not %d", ES_MAX_TOP, sp->top);
    if (sp->next_top < 0 || sp->next_top > ES_MAX_TOP)
        return es_fail(ES_E_INVAL, "next_top must be 0..%d, not %d", ES_MAX_TOP, sp->next_top);
    if (sp->bos != ES_BOS_IMPLICIT && sp->bos != ES_BOS_AS_SENT)
        return es_fail(ES_E_INVAL, "unknown BOS rule %d", (int)sp->bos);
    ES_TRY(start(r, 1, 0));
    es_seq *q = &r->seqs[0];
    if (sp->kind == ES_RECORD_TEXT) {
        ES_TRY(text_seq(m, sp->text, q));
    } else if (sp->kind == ES_RECORD_IDS) {
        ES_TRY(given_ids(m, sp->ids, sp->n_ids, q));
        ES_TRY(bos_rule(m, sp->bos, q, &r->shift, "\"ids\""));
    } else { /* a prompt: its tokens, with the tokenizer's BOS only as sent */
        es_str text;
        char *owned;
        ES_TRY(spec_text(m, sp, &text, &owned));
        if (text.len == 0) {
            free(owned);
            return es_fail(ES_E_INVAL, sp->n_messages > 0 ? "the chat renders to no text"
                                                          : "\"text\" is empty");
        }
        int32_t *t;
        size_t n;
        const es_status st = tokenize(m, text, sp->bos == ES_BOS_AS_SENT, 1, &t, &n);
        free(owned);
        ES_TRY(st);
        q->ids = t;
        q->n_ids = n;
        ES_TRY(bos_rule(m, sp->bos, q, &r->shift, "the prompt"));
    }
    q->score_from = 1;
    r->top = sp->top;
    ES_TRY(score_outputs(q, sp->top));
    if (sp->next_top > 0) {
        r->next_top = q->next_top_k = sp->next_top;
        q->next_ids = malloc((size_t)sp->next_top * sizeof(int32_t));
        q->next_logprobs = malloc((size_t)sp->next_top * sizeof(float));
        if (!q->next_ids || !q->next_logprobs) return oom();
    }
    return ES_OK;
}

static es_status make_pair(const es_model *m, const es_record_spec *sp, es_record *r)
{
    ES_TRY(start(r, 1, 0));
    ES_TRY(pair_seq(m, sp->context, sp->continuation, &r->seqs[0], "the continuation"));
    return score_outputs(&r->seqs[0], 0);
}

static es_status make_choices(const es_model *m, const es_record_spec *sp, es_record *r)
{
    if (sp->n_items < 1 || !sp->items)
        return es_fail(ES_E_INVAL, "\"choices\" must be a non-empty array of strings");
    const int n = capped(sp->n_items);
    if (sp->gold < -1 || sp->gold >= n)
        return es_fail(ES_E_INVAL, "\"gold\" must be an index into \"choices\" (0..%d)", n - 1);
    ES_TRY(start(r, n, n));
    r->gold = sp->gold;
    for (int i = 0; i < n; i++) {
        char what[48];
        snprintf(what, sizeof(what), "choice %d", i);
        r->item_bytes[i] = (int64_t)sp->items[i].len;
        ES_TRY(pair_seq(m, sp->context, sp->items[i], &r->seqs[i], what));
        ES_TRY(score_outputs(&r->seqs[i], 0));
    }
    return ES_OK;
}

static es_status make_labels_of(const es_model *m, const es_record_spec *sp, es_str text,
                                es_record *r);

static es_status make_labels(const es_model *m, const es_record_spec *sp, es_record *r)
{
    if (sp->n_items < 1 || !sp->items)
        return es_fail(ES_E_INVAL, "\"labels\" must be a non-empty array of strings");
    es_str text;
    char *owned;
    ES_TRY(spec_text(m, sp, &text, &owned));
    const es_status st = text.len == 0 ? es_fail(ES_E_INVAL, sp->n_messages > 0
                                                                ? "the chat renders to no text"
                                                                : "\"text\" is empty")
                                       : make_labels_of(m, sp, text, r);
    free(owned);
    return st;
}

/* Labels after text (sp's items). */
static es_status make_labels_of(const es_model *m, const es_record_spec *sp, es_str text,
                                es_record *r)
{
    const int n = capped(sp->n_items);
    int32_t *one = malloc((size_t)n * sizeof(int32_t));
    if (!one) return oom();
    bool one_token = true;
    for (int i = 0; i < n && one_token; i++) {
        int32_t *t = NULL;
        size_t k = 0;
        if (sp->items[i].len) {
            const es_status st = tokenize(m, sp->items[i], 0, 1, &t, &k);
            if (st) {
                free(one);
                return st;
            }
        }
        one_token = sp->items[i].len > 0 && k == 1;
        if (one_token) one[i] = t[0];
        free(t);
    }
    const es_status st = start(r, one_token ? 1 : n, n);
    if (st) {
        free(one);
        return st;
    }
    r->one_token = one_token;
    if (one_token) {
        es_seq *q = &r->seqs[0];
        q->labels = one;
        q->n_labels = n;
        q->renormalize = 0; /* raw log P; renormalised with the multi-token case's rule */
        q->label_logprobs = malloc((size_t)n * sizeof(float));
        if (!q->label_logprobs) return oom();
        return text_seq(m, text, q);
    }
    free(one);
    for (int i = 0; i < n; i++) {
        char what[48];
        snprintf(what, sizeof(what), "label %d", i);
        ES_TRY(pair_seq(m, text, sp->items[i], &r->seqs[i], what));
        ES_TRY(score_outputs(&r->seqs[i], 0));
    }
    return ES_OK;
}

/* Qwen3-Reranker's published prompt (the model's card): the pair is judged by the next token,
 * "yes" or "no", after an empty thinking block. Special-token text is recognised. The final
 * "\n\n" is an expression: Jinja drops a template's last newline (as Hugging Face renders). */
static const char rerank_qwen3[] =
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
    "and the Instruct provided. Note that the answer can only be \"yes\" or \"no\"."
    "<|im_end|>\n<|im_start|>user\n<Instruct>: {{ instruction }}\n<Query>: {{ query }}\n"
    "<Document>: {{ document }}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>"
    "{{ '\\n\\n' }}";

const char *es_rerank_default_template(void) { return rerank_qwen3; }

/* The one token of a rerank answer. */
static es_status answer_token(const es_model *m, es_str s, const char *dflt, int32_t *id)
{
    if (s.len == 0) s = (es_str){dflt, strlen(dflt)};
    int32_t *t;
    size_t n;
    ES_TRY(tokenize(m, s, 0, 1, &t, &n));
    const int32_t first = n ? t[0] : -1;
    free(t);
    if (n != 1)
        return es_fail(ES_E_INVAL, "the rerank answer \"%.*s\" is %zu tokens, not one",
                       (int)s.len, s.ptr, n);
    *id = first;
    return ES_OK;
}

/* A query and documents: per document one sequence, the rendered prompt with the two answers
 * as labels of its last position. */
static es_status make_rerank(const es_model *m, const es_record_spec *sp, es_record *r)
{
    if (sp->n_items < 1 || !sp->items)
        return es_fail(ES_E_INVAL, "\"documents\" must be a non-empty array of strings");
    if (sp->n_items > ES_MAX_BATCH_SEQS)
        return es_fail(ES_E_INVAL, "%d documents, more than %d", sp->n_items, ES_MAX_BATCH_SEQS);
    int32_t ans[2];
    ES_TRY(answer_token(m, sp->rerank_labels[0], "yes", &ans[0]));
    ES_TRY(answer_token(m, sp->rerank_labels[1], "no", &ans[1]));
    const char *tmpl = sp->template_text ? sp->template_text : rerank_qwen3;
    const es_str instr = sp->instruction.len ? sp->instruction
                                             : (es_str){ES_RERANK_INSTRUCTION,
                                                        strlen(ES_RERANK_INSTRUCTION)};
    ES_TRY(start(r, sp->n_items, sp->n_items));
    static const char *const names[3] = {"query", "document", "instruction"};
    for (int i = 0; i < sp->n_items; i++) {
        const es_str vals[3] = {sp->query, sp->items[i], instr};
        char *text;
        size_t n;
        ES_TRY(render_status(es_template_render(m, tmpl, strlen(tmpl), "rerank template", names,
                                                vals, 3, &text, &n)));
        es_seq *q = &r->seqs[i];
        const es_status st = n ? text_seq(m, (es_str){text, n}, q)
                               : es_fail(ES_E_INVAL, "the rerank template renders to no text");
        free(text);
        ES_TRY(st);
        int32_t *labels = malloc(2 * sizeof(int32_t));
        q->label_logprobs = malloc(2 * sizeof(float));
        if (!labels || !q->label_logprobs) {
            free(labels);
            return oom();
        }
        memcpy(labels, ans, sizeof(ans));
        q->labels = labels;
        q->n_labels = 2;
    }
    return ES_OK;
}

static es_status make_embed(const es_model *m, const es_record_spec *sp, es_record *r)
{
    if (sp->pooling < ES_POOLING_NONE || sp->pooling > ES_POOLING_LAST)
        return es_fail(ES_E_INVAL, "unknown pooling %d", (int)sp->pooling);
    ES_TRY(start(r, 1, 0));
    es_seq *q = &r->seqs[0];
    if (sp->ids) {
        ES_TRY(given_ids(m, sp->ids, sp->n_ids, q));
        ES_TRY(check_ids(m, q->ids, q->n_ids, "\"ids\""));
    } else {
        if (sp->text.len == 0) return es_fail(ES_E_INVAL, "\"text\" is empty");
        int32_t *ids;
        size_t n;
        ES_TRY(tokenize(m, sp->text, 1, 1, &ids, &n));
        q->ids = ids;
        q->n_ids = n;
        ES_TRY(check_ids(m, ids, n, "the text"));
    }
    q->pooling = sp->pooling;
    q->normalize = sp->normalize ? 1 : 0;
    r->n_embd = es_model_n_embd(m);
    const size_t rows = sp->pooling == ES_POOLING_NONE ? q->n_ids : 1;
    q->embedding = malloc(rows * (size_t)r->n_embd * sizeof(float));
    return q->embedding ? ES_OK : oom();
}

es_status es_record_create(const es_model *m, const es_record_spec *spec, es_record **out)
{
    if (out) *out = NULL;
    if (!m || !spec || !out) return es_fail(ES_E_INVAL, "es_record_create: NULL argument");
    es_record *r = calloc(1, sizeof(*r));
    if (!r) return oom();
    r->kind = spec->kind;
    r->gold = -1;
    es_status st;
    switch (spec->kind) {
    case ES_RECORD_TEXT:
    case ES_RECORD_IDS:
    case ES_RECORD_PROMPT: st = make_text(m, spec, r); break;
    case ES_RECORD_PAIR: st = make_pair(m, spec, r); break;
    case ES_RECORD_CHOICES: st = make_choices(m, spec, r); break;
    case ES_RECORD_LABELS: st = make_labels(m, spec, r); break;
    case ES_RECORD_EMBED: st = make_embed(m, spec, r); break;
    case ES_RECORD_RERANK: st = make_rerank(m, spec, r); break;
    default: st = es_fail(ES_E_INVAL, "unknown record kind %d", (int)spec->kind);
    }
    if (st == ES_OK && r->n_seqs > ES_MAX_BATCH_SEQS)
        st = es_fail(ES_E_INVAL, "%d sequences, more than %d", r->n_seqs, ES_MAX_BATCH_SEQS);
    if (st) {
        es_record_destroy(r);
        return st;
    }
    for (int k = 0; k < r->n_seqs; k++) r->n_tokens += (int64_t)r->seqs[k].n_ids;
    *out = r;
    return ES_OK;
}

void es_record_destroy(es_record *r)
{
    if (!r) return;
    for (int i = 0; r->seqs && i < r->n_seqs; i++) {
        es_seq *q = &r->seqs[i];
        free((void *)q->ids);
        free((void *)q->labels);
        free(q->token_logprob);
        free(q->token_rank);
        free(q->top_ids);
        free(q->top_logprobs);
        free(q->next_ids);
        free(q->next_logprobs);
        free(q->label_logprobs);
        free(q->embedding);
    }
    free(r->seqs);
    free(r->item_logprobs);
    free(r->item_tokens);
    free(r->item_bytes);
    free(r->probs);
    free(r->ranking);
    free(r);
}

int es_record_n_seqs(const es_record *r) { return r ? r->n_seqs : 0; }
int64_t es_record_n_tokens(const es_record *r) { return r ? r->n_tokens : 0; }
const es_seq *es_record_seqs(const es_record *r) { return r ? r->seqs : NULL; }
