/* estream embed's records (records.h): the pooled final hidden state of a text or of ids.
 *
 * DESIGN
 * - Tokenization is llama-embedding's (common_tokenize with add_special and parse_special):
 *   BOS (and EOS) as the tokenizer asks, special-token text recognised; ids are used as given.
 * - A record is the library's ES_RECORD_EMBED (src/job/record.c); its embedding array is
 *   [n_embd], or [n_ids][n_embd] with ES_POOLING_NONE (one row per token).
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
    es_record_spec sp = {.kind = ES_RECORD_EMBED, .gold = -1, .pooling = o->pooling,
                         .normalize = o->normalize};
    int32_t *v = NULL;
    if (text) {
        if (!json_is_string(text)) {
            rec_fail(r, "\"text\" is not a string");
            return;
        }
        sp.text = (es_str){json_string_value(text), json_string_length(text)};
    } else {
        if (!(v = rec_ids(m, r, ids, &sp.n_ids))) return;
        sp.ids = v;
    }
    rec_make(m, &sp, r);
    free(v);
}

void embed_rec_parse(const es_model *m, const embed_opts *o, json_t *obj, rec *r)
{
    parse(m, o, obj, r);
}

bool embed_rec_emit(const es_model *m, const embed_opts *o, const rec *r, json_t *out)
{
    (void)o; /* the record says how it was pooled */
    es_record_result x;
    if (r->error || !r->r || es_record_result_get(r->r, &x)) return true; /* no output fields */
    const size_t d = (size_t)es_model_n_embd(m);
    const bool none = r->seqs[0].pooling == ES_POOLING_NONE;
    const size_t rows = none ? (size_t)x.n_tokens : 1;
    json_t *all = none ? json_array() : NULL, *v = NULL;
    int err = none && !all ? -1 : 0; /* 0, or -1 once jansson could not make or add a value */
    for (size_t t = 0; t < rows && !err; t++) {
        v = json_array();
        for (size_t i = 0; i < d; i++)
            err |= json_array_append_new(v, rec_json_float(x.embedding[t * d + i]));
        if (all) err |= json_array_append_new(all, v);
    }
    err |= json_object_set_new(out, "embedding", all ? all : v);
    err |= json_object_set_new(out, "n_tokens", json_integer((json_int_t)x.n_tokens));
    return !err;
}
