/*
 * SentencePiece-style tokenizer ("llama" tokenizer model), reproducing llama.cpp's
 * llm_tokenizer_spm: spaces become U+2581, the text is cut into UTF-8 characters, and adjacent
 * symbols whose concatenation is a token are merged, highest token score first.
 *
 * DESIGN: a binary heap of candidate bigrams ordered by (score descending, left position
 * ascending) — llama.cpp's priority_queue order. A bigram goes stale when either side has been
 * merged since; its recorded byte size no longer matches then, and it is skipped. The whole
 * fragment is one word (no pre-tokenizer), so the heap can hold O(text) entries. A symbol that
 * ends up not being a token is emitted as byte tokens (<0xXX>), falling back to the one-byte
 * token and then to UNK (llama.cpp would throw where neither exists).
 */
#include "tok/tok_int.h"
#include "tok/utf8.h"

typedef struct ssym {
    int32_t prev, next;
    uint32_t off, n; /* bytes in the escaped text; n = 0 once merged away */
} ssym;

typedef struct sbigram {
    float score;
    int32_t left, right;
    uint32_t size;
} sbigram;

static inline bool before(const sbigram *a, const sbigram *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void push(sbigram *h, size_t *n, sbigram b)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(&b, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = b;
}

static sbigram pop(sbigram *h, size_t *n)
{
    sbigram top = h[0], last = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && before(&h[c + 1], &h[c])) c++;
        if (!before(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = last;
    return top;
}

static inline void try_bigram(const es_tok *t, const uint8_t *s, const ssym *sym, int32_t l,
                              int32_t r, sbigram *h, size_t *nh)
{
    if (l < 0 || r < 0) return;
    uint32_t size = sym[l].n + sym[r].n;
    int32_t id = es_tok_find(t, (const char *)s + sym[l].off, size);
    if (id < 0) return;
    push(h, nh, (sbigram){t->score[id], l, r, size});
}

es_status es_tok_spm_encode(const es_tok *t, tok_work *w, const char *text, size_t len,
                            bool prefix_space, tok_ids *out)
{
    /* escape: ' ' -> U+2581 (3 bytes), optional leading one */
    if (len > (SIZE_MAX - 8) / 3) return es_fail(ES_E_NOMEM, "tokenizer: input too large");
    ES_TRY(tok_reserve((void **)&w->buf, &w->buf_cap, 3 * len + 3, 1));
    uint8_t *s = w->buf;
    size_t n = 0;
    if (prefix_space) memcpy(s, "\xE2\x96\x81", 3), n = 3;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ')
            memcpy(s + n, "\xE2\x96\x81", 3), n += 3;
        else
            s[n++] = (uint8_t)text[i];
    }
    if (n == 0) return ES_OK;
    if (n > INT32_MAX / 2) return es_fail(ES_E_NOMEM, "tokenizer: fragment too long");

    /* symbols: UTF-8 characters by their lead byte (clipped at the end, not validated) */
    ES_TRY(tok_reserve(&w->sym, &w->sym_cap, n, sizeof(ssym)));
    ssym *sym = w->sym;
    int32_t ns = 0;
    for (size_t off = 0; off < n;) {
        size_t l = es_utf8_len(s[off]);
        if (l > n - off) l = n - off;
        sym[ns] = (ssym){ns - 1, off + l < n ? ns + 1 : -1, (uint32_t)off, (uint32_t)l};
        ns++;
        off += l;
    }

    /* at most ns - 1 initial bigrams plus two per merge */
    ES_TRY(tok_reserve(&w->heap, &w->heap_cap, 3 * (size_t)ns, sizeof(sbigram)));
    sbigram *h = w->heap;
    size_t nh = 0;
    for (int32_t i = 1; i < ns; i++)
        try_bigram(t, s, sym, i - 1, i, h, &nh);
    while (nh > 0) {
        sbigram b = pop(h, &nh);
        ssym *l = &sym[b.left], *r = &sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        try_bigram(t, s, sym, l->prev, b.left, h, &nh);
        try_bigram(t, s, sym, b.left, l->next, h, &nh);
    }

    for (int32_t i = 0; i >= 0; i = sym[i].next) {
        int32_t id = es_tok_find(t, (const char *)s + sym[i].off, sym[i].n);
        if (id >= 0) {
            ES_TRY(tok_ids_push(out, id));
            continue;
        }
        for (uint32_t k = 0; k < sym[i].n; k++) {
            id = t->spm_byte[s[sym[i].off + k]];
            if (id < 0) id = t->unk;
            if (id >= 0) ES_TRY(tok_ids_push(out, id));
        }
    }
    return ES_OK;
}
