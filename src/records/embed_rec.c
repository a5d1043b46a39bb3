/* estream embed's records (records.h): the pooled final hidden state of a text or of ids.
 *
 * DESIGN
 * - Tokenization is llama-embedding's (common_tokenize with add_special and parse_special):
 *   BOS (and EOS) as the tokenizer asks, special-token text recognised; ids are used as given.
 * - A record is one sequence; its embedding array is [n_embd], or [n_ids][n_embd] with
 *   ES_POOLING_NONE (one row per token).
 */
#include "records/records.h"

#include <stdlib.h>

static void parse(const es_model *m, const embed_opts *o, json_t *obj, rec *r)
{
    json_t *text = json_object_get(obj, "text"), *ids = json_object_get(obj, "ids");
    if (!!text == !!ids) {
        rec_fail(r, text ? "give \"text\" or \"ids\", not both" : "no \"text\" or \"ids\" member");
        return;
    }
    if (!(r->seqs = calloc(1, sizeof(es_seq)))) {
        rec_fail(r, REC_OOM);
        return;
    }
    r->n_seqs = 1;
    es_seq *q = &r->seqs[0];
    size_t n;
    if (text) {
        if (!json_is_string(text)) {
            rec_fail(r, "\"text\" is not a string");
            return;
        }
        if (json_string_length(text) == 0) {
            rec_fail(r, "\"text\" is empty");
            return;
        }
        q->ids = rec_tokenize(m, r, json_string_value(text), json_string_length(text), 1, 1, &n);
    } else {
        q->ids = rec_ids(m, r, ids, &n);
    }
    if (!q->ids) return;
    q->n_ids = n;
    if (!rec_check_ids(m, r, q->ids, q->n_ids, text ? "the text" : "\"ids\"")) return;
    q->pooling = o->pooling;
    q->normalize = o->normalize;
    const size_t rows = o->pooling == ES_POOLING_NONE ? q->n_ids : 1;
    q->embedding = malloc(rows * (size_t)es_model_n_embd(m) * sizeof(float));
    if (!q->embedding) rec_fail(r, REC_OOM);
}

void embed_rec_parse(const es_model *m, const embed_opts *o, json_t *obj, rec *r)
{
    parse(m, o, obj, r);
    rec_finish(r);
}

bool embed_rec_emit(const es_model *m, const embed_opts *o, const rec *r, json_t *out)
{
    (void)o; /* the sequence says how it was pooled */
    if (r->error || !r->seqs) return true; /* a bad record has no output fields */
    const es_seq *q = &r->seqs[0];
    const size_t d = (size_t)es_model_n_embd(m);
    const bool none = q->pooling == ES_POOLING_NONE;
    const size_t rows = none ? q->n_ids : 1;
    json_t *all = none ? json_array() : NULL, *v = NULL;
    int err = none && !all ? -1 : 0; /* 0, or -1 once jansson could not make or add a value */
    for (size_t t = 0; t < rows && !err; t++) {
        v = json_array();
        for (size_t i = 0; i < d; i++)
            err |= json_array_append_new(v, rec_json_float(q->embedding[t * d + i]));
        if (all) err |= json_array_append_new(all, v);
    }
    err |= json_object_set_new(out, "embedding", all ? all : v);
    err |= json_object_set_new(out, "n_tokens", json_integer((json_int_t)q->n_ids));
    return !err;
}
