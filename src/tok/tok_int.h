/*
 * Tokenizer internals shared by vocab.c (loading, special tokens, pieces), vocab_map.c (the text
 * -> id map), tok.c (the special-token partition and the dispatch), bpe.c (byte-level BPE and its
 * pre-tokenizer) and spm.c (SentencePiece-style merges). Not a public header.
 *
 * DESIGN: everything the encoder needs is built once in es_tok_create() and is read-only
 * afterwards, so one es_tok may encode on many threads at once. Per-call memory (symbols,
 * heaps, regex match data) lives in a tok_work owned by the calling es_tok_encode().
 */
#ifndef ES_TOK_INT_H
#define ES_TOK_INT_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tok/tok.h"

#include <stdlib.h>
#include <string.h>

enum tok_kind { TOK_BPE = 1, TOK_SPM = 2 };

/* Token attributes (llama.cpp's llama_token_attr, the subset that changes behaviour). */
enum {
    TOK_ATTR_NORMAL = 1 << 0,
    TOK_ATTR_UNKNOWN = 1 << 1,
    TOK_ATTR_CONTROL = 1 << 2,
    TOK_ATTR_USER = 1 << 3, /* user-defined: split out of text even without parse_special */
    TOK_ATTR_UNUSED = 1 << 4,
    TOK_ATTR_BYTE = 1 << 5,
    TOK_ATTR_LSTRIP = 1 << 6, /* eats ASCII spaces to its left when split out */
    TOK_ATTR_RSTRIP = 1 << 7, /* eats ASCII spaces to its right */
};

#define TOK_MAX_RE 6

/* Merge table of byte-level BPE: (left id, right id) -> (rank, id of the merged text or -1).
 * Open addressing, linear probing; an empty slot has key TOK_PAIR_EMPTY. */
#define TOK_PAIR_EMPTY UINT64_MAX
typedef struct tok_pair_slot {
    uint64_t key; /* (uint64_t)left << 32 | right */
    int32_t rank;
    int32_t result;
} tok_pair_slot;

struct es_tok {
    int kind;        /* TOK_BPE or TOK_SPM */
    int32_t n_vocab; /* > 0 */

    /* token texts: text of id i is text[text_off[i] .. text_off[i+1]) */
    char *text;
    uint32_t *text_off; /* [n_vocab + 1] */
    float *score;       /* [n_vocab] (SPM merge priority; 0 when absent) */
    uint8_t *attr;      /* [n_vocab] TOK_ATTR_* */

    /* detokenized pieces, same layout as the texts */
    char *piece;
    uint32_t *piece_off; /* [n_vocab + 1] */

    /* text -> id: open addressing over ids, hash kept beside to skip most compares */
    uint32_t map_mask;
    int32_t *map_id;    /* [map_mask + 1], -1 = empty */
    uint32_t *map_hash; /* [map_mask + 1] */

    /* special tokens (CONTROL, USER_DEFINED, UNKNOWN), longest text first */
    int32_t *special;
    int32_t n_special;

    int32_t bos, eos, unk; /* -1 = none */
    bool add_bos, add_eos, add_space_prefix;

    /* byte-level BPE */
    tok_pair_slot *pairs;
    uint64_t pair_mask;
    int32_t byte_tok[256];      /* id of the GPT-2 character of byte b, -1 if none */
    int32_t byte_fb[256][2];    /* ids to emit for byte b when its symbol is not a token */
    bool ignore_merges;         /* a word that is itself a token skips the merges (llama3) */
    pcre2_code *re[TOK_MAX_RE]; /* pre-tokenizer regexes, applied in order */
    int n_re;

    /* SentencePiece */
    int32_t spm_byte[256]; /* "<0xXX>" token, else the one-byte token, else -1 */
};

/* ---- growable buffers (per call) ---- */

typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;

static inline es_status tok_ids_push(tok_ids *o, int32_t id)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        int32_t *v = realloc(o->v, cap * sizeof(*v));
        if (!v) return es_fail(ES_E_NOMEM, "tokenizer: out of memory");
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = id;
    return ES_OK;
}

/* Makes *buf hold at least n elements of size elem; keeps the old contents. */
static inline es_status tok_reserve(void **buf, size_t *cap, size_t n, size_t elem)
{
    if (n <= *cap) return ES_OK;
    size_t c = *cap ? *cap : 256;
    while (c < n)
        c *= 2;
    if (c > SIZE_MAX / elem) return es_fail(ES_E_NOMEM, "tokenizer: input too large");
    void *p = realloc(*buf, c * elem);
    if (!p) return es_fail(ES_E_NOMEM, "tokenizer: out of memory");
    *buf = p;
    *cap = c;
    return ES_OK;
}

/* Scratch memory of one es_tok_encode() call, reused across fragments and words. */
typedef struct tok_work {
    void *sym;
    size_t sym_cap; /* symbols of the current word (bpe.c / spm.c) */
    void *heap;
    size_t heap_cap; /* bigram priority queue */
    void *span;
    size_t span_cap; /* pre-tokenizer spans (two halves, ping-pong) */
    uint8_t *buf;
    size_t buf_cap; /* sanitized / escaped text */
    uint8_t *buf2;
    size_t buf2_cap; /* original bytes where they differ from buf */
    uint8_t *enc;
    size_t enc_cap; /* GPT-2-encoded word (ignore_merges lookups) */
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit;
} tok_work;

void es_tok_work_free(tok_work *w);

/* ---- lookups (vocab_map.c) ---- */

static inline const char *tok_text(const es_tok *t, int32_t id, size_t *len)
{
    *len = t->text_off[id + 1] - t->text_off[id];
    return t->text + t->text_off[id];
}

/* The id of the token whose text is s[0..n), or -1. */
int32_t es_tok_find(const es_tok *t, const char *s, size_t n);
/* Builds the map of t's texts (es_tok_create, vocab.c); ES_E_FORMAT on a duplicate text. */
es_status es_tok_build_map(es_tok *t);

/* ---- byte-level BPE (bpe.c) ---- */

/* Selects the pre-tokenizer named pre (tokenizer.ggml.pre; len 0 = absent) and compiles its
 * regexes into t. *add_bos gets the pre-tokenizer's default for add_bos_token. An unknown name
 * falls back to llama.cpp's default pre-tokenizer with a warning. */
es_status es_tok_bpe_setup(es_tok *t, const char *pre, size_t pre_len, bool *add_bos);
/* Reads tokenizer.ggml.merges into t->pairs. Needs t's texts and map. */
es_status es_tok_bpe_load_merges(es_tok *t, const es_gguf *g);
/* Encodes one fragment of plain text (no special tokens in it), appending to out. */
es_status es_tok_bpe_encode(const es_tok *t, tok_work *w, const char *text, size_t len,
                            tok_ids *out);

/* ---- SentencePiece (spm.c) ---- */

/* Encodes one fragment: spaces become U+2581, a leading one is added if prefix_space. */
es_status es_tok_spm_encode(const es_tok *t, tok_work *w, const char *text, size_t len,
                            bool prefix_space, tok_ids *out);

#endif
