/*
 * The vocabulary's text -> id map: open addressing over the token ids, each text's hash kept
 * beside its id. es_tok_create() (vocab.c) builds it once; the loader's fix-ups and the encoders
 * (bpe.c, spm.c) look tokens up in it. It is a file of its own so that the loader, which calls
 * the BPE setup, and the BPE encoder, which looks tokens up, both depend on it and not on each
 * other.
 */
#include "tok/tok_int.h"

/* ---- text -> id map ---- */

static uint32_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t k;
        memcpy(&k, s, 8);
        h = (h ^ k) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t k = 0;
    memcpy(&k, s, n);
    h = (h ^ k) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    return (uint32_t)h;
}

int32_t es_tok_find(const es_tok *t, const char *s, size_t n)
{
    uint32_t h = hash_bytes(s, n);
    for (uint32_t i = h & t->map_mask;; i = (i + 1) & t->map_mask) {
        int32_t id = t->map_id[i];
        if (id < 0) return -1;
        if (t->map_hash[i] != h) continue;
        size_t len;
        const char *txt = tok_text(t, id, &len);
        if (len == n && memcmp(txt, s, n) == 0) return id;
    }
}

/* Inserts every token; ES_E_FORMAT on a duplicate text. */
es_status es_tok_build_map(es_tok *t)
{
    uint32_t cap = 16;
    while (cap < (uint32_t)t->n_vocab * 2u)
        cap <<= 1;
    t->map_mask = cap - 1;
    t->map_id = malloc(cap * sizeof(*t->map_id));
    t->map_hash = malloc(cap * sizeof(*t->map_hash));
    if (!t->map_id || !t->map_hash)
        return es_fail(ES_E_NOMEM, "tokenizer: out of memory for the map of %d tokens", t->n_vocab);
    memset(t->map_id, 0xFF, cap * sizeof(*t->map_id)); /* all -1 */
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t n;
        const char *s = tok_text(t, id, &n);
        uint32_t h = hash_bytes(s, n), i = h & t->map_mask;
        for (; t->map_id[i] >= 0; i = (i + 1) & t->map_mask) {
            size_t m;
            const char *o = tok_text(t, t->map_id[i], &m);
            if (t->map_hash[i] == h && m == n && memcmp(o, s, n) == 0)
                return es_fail(ES_E_FORMAT,
                               "tokenizer.ggml.tokens: duplicate token '%.*s' (ids %d and %d)",
                               (int)es_min_size(n, 64), s, t->map_id[i], id);
        }
        t->map_id[i] = id;
        t->map_hash[i] = h;
    }
    return ES_OK;
}
