/*
 * Tokenizer front end: cuts special tokens out of the input (llama.cpp's partition) and
 * dispatches each plain fragment to the BPE (bpe.c) or SPM (spm.c) encoder, with BOS/EOS around
 * the result. The vocabulary it reads is vocab.c's.
 */
#include "tok/tok_int.h"

/* ---- encode ---- */

/* A piece of the input: plain text (tok < 0) or one special token. */
typedef struct frag {
    size_t off, len;
    int32_t tok;
} frag;

typedef struct frag_list {
    frag *v;
    size_t n, cap;
} frag_list;

static es_status frag_push(frag_list *l, size_t off, size_t len, int32_t tok)
{
    ES_TRY(tok_reserve((void **)&l->v, &l->cap, l->n + 1, sizeof(frag)));
    l->v[l->n++] = (frag){off, len, tok};
    return ES_OK;
}

static inline bool is_c_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* llama.cpp's tokenizer_st_partition: each special token in turn (longest first) is cut out of
 * every plain fragment at all its non-overlapping occurrences, left to right. Tokens with
 * LSTRIP/RSTRIP also eat the ASCII whitespace next to them. */
static es_status partition(const es_tok *t, const char *text, size_t len, bool parse_special,
                           frag_list *cur, frag_list *next)
{
    cur->n = 0;
    if (len == 0) return ES_OK;
    ES_TRY(frag_push(cur, 0, len, -1));
    if (t->n_special == 0) return ES_OK;

    /* Which byte pairs occur in the text: most special tokens are never present and are
     * skipped without a search. */
    uint64_t *pairs = calloc(65536 / 64, sizeof(uint64_t));
    uint8_t bytes[256] = {0};
    if (!pairs) return es_fail(ES_E_NOMEM, "tokenizer: out of memory");
    const uint8_t *u = (const uint8_t *)text;
    for (size_t i = 0; i < len; i++) {
        bytes[u[i]] = 1;
        if (i + 1 < len) {
            unsigned p = (unsigned)u[i] << 8 | u[i + 1];
            pairs[p >> 6] |= 1ull << (p & 63);
        }
    }

    es_status st = ES_OK;
    for (int32_t k = 0; k < t->n_special && st == ES_OK; k++) {
        int32_t id = t->special[k];
        uint8_t a = t->attr[id];
        if (!parse_special && (a & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN))) continue;
        size_t sl;
        const char *s = tok_text(t, id, &sl);
        const uint8_t *su = (const uint8_t *)s;
        if (sl > len || !bytes[su[0]]) continue;
        if (sl >= 2) {
            unsigned p = (unsigned)su[0] << 8 | su[1];
            if (!(pairs[p >> 6] & (1ull << (p & 63)))) continue;
        }
        next->n = 0;
        bool changed = false;
        for (size_t f = 0; f < cur->n && st == ES_OK; f++) {
            frag fr = cur->v[f];
            if (fr.tok >= 0 || fr.len < sl) {
                st = frag_push(next, fr.off, fr.len, fr.tok);
                continue;
            }
            size_t base = fr.off, blen = fr.len;
            while (st == ES_OK) {
                const char *m = blen >= sl ? memmem(text + base, blen, s, sl) : NULL;
                if (!m) {
                    if (blen > 0) st = frag_push(next, base, blen, -1);
                    break;
                }
                changed = true;
                size_t mpos = (size_t)(m - text);
                size_t llen = mpos - base;
                if (a & TOK_ATTR_LSTRIP)
                    while (llen > 0 && is_c_space(text[base + llen - 1]))
                        llen--;
                if (llen > 0) st = frag_push(next, base, llen, -1);
                if (st == ES_OK) st = frag_push(next, mpos, sl, id);
                size_t roff = mpos + sl, rlen = base + blen - roff;
                if (a & TOK_ATTR_RSTRIP)
                    while (rlen > 0 && is_c_space(text[roff]))
                        roff++, rlen--;
                base = roff;
                blen = rlen;
            }
        }
        if (changed) {
            frag_list tmp = *cur;
            *cur = *next;
            *next = tmp;
        }
    }
    free(pairs);
    return st;
}

void es_tok_work_free(tok_work *w)
{
    free(w->sym);
    free(w->heap);
    free(w->span);
    free(w->buf);
    free(w->buf2);
    free(w->enc);
    pcre2_match_data_free(w->md);
    pcre2_match_context_free(w->mctx);
    pcre2_jit_stack_free(w->jit);
}

es_status es_tok_encode(const es_tok *t, const char *text, size_t len, bool add_special,
                        bool parse_special, int32_t **ids, size_t *n_ids)
{
    *ids = NULL;
    *n_ids = 0;
    if (!text && len) return es_fail(ES_E_INVAL, "tokenize: NULL text");
    tok_ids out = {0};
    tok_work w = {0};
    frag_list a = {0}, b = {0};
    es_status st = partition(t, text, len, parse_special, &a, &b);

    if (st == ES_OK && add_special && t->add_bos) st = tok_ids_push(&out, t->bos);
    bool prev_special = true; /* SPM: a space goes in front of the first fragment */
    for (size_t i = 0; i < a.n && st == ES_OK; i++) {
        const frag *f = &a.v[i];
        if (f->tok >= 0) {
            st = tok_ids_push(&out, f->tok);
            prev_special = true;
        } else if (t->kind == TOK_BPE) {
            st = es_tok_bpe_encode(t, &w, text + f->off, f->len, &out);
        } else {
            st = es_tok_spm_encode(t, &w, text + f->off, f->len,
                                   t->add_space_prefix && prev_special, &out);
            prev_special = false;
        }
    }
    if (st == ES_OK && add_special && t->add_eos) st = tok_ids_push(&out, t->eos);
    if (st == ES_OK && !out.v) st = tok_reserve((void **)&out.v, &out.cap, 1, sizeof(int32_t));

    es_tok_work_free(&w);
    free(a.v);
    free(b.v);
    if (st != ES_OK) {
        free(out.v);
        return st;
    }
    *ids = out.v;
    *n_ids = out.n;
    return ES_OK;
}
