/* What every record kind shares (records.h): errors, the record's memory, tokenization, "ids",
 * JSON numbers. */
#include "records/records.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The error of a record when even the copy of REC_OOM could not be made. */
static char oom_static[] = REC_OOM;

void rec_fail(rec *r, const char *fmt, ...)
{
    if (r->error) return;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&r->error, fmt, ap) < 0) r->error = NULL;
    va_end(ap);
    if (!r->error && !(r->error = strdup(REC_OOM))) r->error = oom_static;
}

bool rec_oom(const rec *r)
{
    return r->error && !strcmp(r->error, REC_OOM);
}

void rec_free(rec *r)
{
    es_record_destroy(r->r);
    free(r->priv);
    if (r->error != oom_static) free(r->error);
    memset(r, 0, sizeof(*r));
}

void rec_make(const es_model *m, const es_record_spec *spec, rec *r)
{
    if (r->error) return;
    const es_status st = es_record_create(m, spec, &r->r);
    if (st) {
        rec_fail(r, "%s", st == ES_E_NOMEM ? REC_OOM : es_last_error());
        return;
    }
    r->seqs = es_record_seqs(r->r);
    r->n_seqs = es_record_n_seqs(r->r);
    r->n_tokens = es_record_n_tokens(r->r);
}

json_t *rec_json_float(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

int32_t *rec_tokenize(const es_model *m, rec *r, const char *text, size_t len, int add_special,
                      int parse_special, size_t *n)
{
    size_t cap = len + 16; /* every token covers at least one byte, plus BOS/EOS */
    int32_t *ids = malloc(cap * sizeof(int32_t));
    if (!ids) {
        rec_fail(r, REC_OOM);
        return NULL;
    }
    es_status st = es_tokenize(m, text, len, add_special, parse_special, ids, cap, n);
    if (st == ES_E_SHORT_BUFFER) {
        cap = *n;
        int32_t *more = realloc(ids, cap * sizeof(int32_t));
        if (!more) {
            free(ids);
            rec_fail(r, REC_OOM);
            return NULL;
        }
        ids = more;
        st = es_tokenize(m, text, len, add_special, parse_special, ids, cap, n);
    }
    if (st) {
        rec_fail(r, "cannot tokenize: %s", es_last_error());
        free(ids);
        return NULL;
    }
    return ids;
}

int32_t *rec_ids(const es_model *m, rec *r, const json_t *ids, size_t *n_out)
{
    if (!json_is_array(ids)) {
        rec_fail(r, "\"ids\" is not an array");
        return NULL;
    }
    const size_t n = json_array_size(ids);
    if (n == 0) {
        rec_fail(r, "\"ids\" is empty");
        return NULL;
    }
    int32_t *v = malloc(n * sizeof(int32_t));
    if (!v) {
        rec_fail(r, REC_OOM);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(ids, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0 ||
            json_integer_value(e) >= es_model_n_vocab(m)) {
            rec_fail(r, "\"ids\"[%zu] is not an id of the vocabulary (0..%d)", i,
                     es_model_n_vocab(m) - 1);
            free(v);
            return NULL;
        }
        v[i] = (int32_t)json_integer_value(e);
    }
    *n_out = n;
    return v;
}

size_t rec_utf8_char(const unsigned char *s, size_t n)
{
    const unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t k;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) k = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        k = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        k = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 0;
    if (n < k || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < k; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return k;
}
