/*
 * Byte-level BPE ("gpt2" tokenizer model): pre-tokenizer regexes, GPT-2 byte mapping and merges
 * by rank, reproducing llama.cpp's llm_tokenizer_bpe.
 *
 * DESIGN
 * - Pre-tokenizer. llama.cpp applies a list of regexes in turn: each one splits every current
 *   fragment into its matches and the text between them (nothing is dropped). It runs some
 *   regexes through hand-written code and the rest through std::regex on a "collapsed" text
 *   where each non-ASCII code point stands for its Unicode category. Both amount to ordinary
 *   Unicode-property regex semantics with two quirks that the PCRE2 patterns below spell out:
 *   whitespace is llama.cpp's set (PCRE2's \s plus U+0085), and in regexes written with
 *   explicit non-ASCII ranges, non-ASCII whitespace never matches a range (llama.cpp replaced it
 *   by a placeholder first), so those ranges leave the whitespace code points out.
 * - Input text is first re-encoded code point by code point the way llama.cpp decodes it:
 *   invalid bytes become U+FFFD. PCRE2 then sees valid UTF-8 only (surrogates, which llama.cpp
 *   lets through, are matched as U+E000, a code point of the same class, but keep their bytes
 *   for the merges).
 * - Merges. A word's symbols start as single bytes (each is one GPT-2 character). A heap holds
 *   adjacent pairs keyed by (merge rank, left position); the lowest is merged, stale entries are
 *   recognised by their byte size and skipped. Every symbol carries its token id, so the rank
 *   lookup is one hash probe on (left id, right id). Merge parts are validated at load time to
 *   be tokens, so a symbol that is not a token can never merge again.
 */
#include "tok/tok_int.h"
#include "tok/utf8.h"

/* ---- pre-tokenizers ---- */

/* llama.cpp's whitespace set, for use inside a character class. */
#define WS "\\s\\x{85}"
#define CONTRACTIONS "'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]"
/* The tail shared by the llama3-style regexes: punctuation runs, newlines, whitespace runs. */
#define WS_TAIL "[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+"

static const char re_gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS
                              "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS "])|[" WS "]+";
static const char re_llama3[] = CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^" WS
                                             "\\p{L}\\p{N}]+[\\r\\n]*|" WS_TAIL;
static const char re_qwen2[] =
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|" WS_TAIL;
/* EXAONE-MoE's: letters with their combining marks, runs of words joined by single spaces as one
 * pre-token, a punctuation run taking one line break or slash */
static const char re_exaone_moe[] =
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^" WS
                 "\\p{L}\\p{N}]+[\\r\\n/]?|" WS_TAIL;
static const char re_gpt4o[] =
    "[^\\r\\n\\p{L}\\p{N}]?(?:(?=\\p{L})[^a-z])*(?:(?=\\p{L})[^A-Z])+(?:" CONTRACTIONS ")?"
    "|[^\\r\\n\\p{L}\\p{N}]?(?:(?=\\p{L})[^a-z])+(?:(?=\\p{L})[^A-Z])*(?:" CONTRACTIONS ")?"
    "|\\p{N}{1,3}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n/]*|" WS_TAIL;
static const char re_ds3_main[] =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?"
    "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|" WS_TAIL;
/* CJK ranges of the DeepSeek pre-tokenizers: U+4E00-9FA5, U+0800-4E00, U+AC00-D7FF, with the
 * whitespace code points inside U+0800-4E00 left out (see DESIGN). */
static const char re_ds_cjk[] = "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{167F}\\x{1681}-\\x{1FFF}"
                                "\\x{200B}-\\x{2027}\\x{202A}-\\x{202E}\\x{2030}-\\x{205E}"
                                "\\x{2060}-\\x{2FFF}\\x{3001}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+";
/* DeepSeek-LLM's letters: the cased letters of its tokenizer.json, as code point ranges. */
static const char re_ds_letters[] =
    "[" WS "]?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}"
    "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}"
    "\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}"
    "\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}"
    "\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}"
    "\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}"
    "\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}"
    "\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}"
    "\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}"
    "\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}"
    "\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}"
    "\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}"
    "\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}"
    "\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}"
    "\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+";
/* DeepSeek-LLM's punctuation: ASCII and fullwidth punctuation, quotes U+2018-201F, U+3001-3002
 * (the source range starts at U+3000, a whitespace code point that never matches it). */
static const char re_ds_punct[] = "[" WS "]?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}"
                                  "\\x{2018}-\\x{201F}\\x{3001}-\\x{3002}]+";

typedef struct pre_def {
    const char *names;          /* '|'-separated tokenizer.ggml.pre values */
    const char *re[TOK_MAX_RE]; /* NULL-terminated */
    bool ignore_merges, add_bos;
} pre_def;

/* Index 0 is llama.cpp's default pre-tokenizer (tokenizer.ggml.pre absent, "default", or, here,
 * a name we do not know). */
static const pre_def k_pre[] = {
    {"default", {"[\\p{P}$+<=>^~|]+", re_gpt2, "\\p{N}+", "[0-9][0-9][0-9]"}, false, false},
    {"llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2|jina-v5-nano",
     {re_llama3},
     true,
     true},
    {"dbrx|smaug-bpe|glm4|chatglm-bpe", {re_llama3}, false, false}, /* glm4: llama.cpp's CHATGLM4,
                                                                     * the same expression */
    {"gpt-2|mpt|olmo|jais|trillion|granite-docling|exaone4|phi-2|jina-es|jina-de|gigachat|"
     "jina-v2-es|jina-v2-de|a.x-4.0|mellum|modern-bert|jina-v1-en|jina-v2-code|roberta-bpe",
     {re_gpt2},
     false,
     false},
    {"starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b|mellum2",
     {"\\p{N}", re_gpt2},
     false,
     false},
    {"falcon", {"[\\p{P}$+<=>^~|`]+", re_gpt2, "[0-9][0-9][0-9]"}, false, false},
    /* bailingmoe's expression (llama.cpp's BAILINGMOE) differs from qwen2's in spelling only:
     * its newline alternative \s*[\r\n] and qwen2's \s*[\r\n]+ both take the whitespace up
     * to and with its last line break, and its contractions are the same seven */
    {"qwen2|deepseek-r1-qwen|kormo|f2llmv2|stablelm2|hunyuan|solar-open|megrez|grok-2|"
     "bailingmoe|bailingmoe2|llada-moe",
     {re_qwen2},
     false,
     false},
    {"deepseek-llm",
     {"[\\r\\n]", re_ds_letters, re_ds_punct, "[" WS "]+$", re_ds_cjk, "\\p{N}+"},
     false,
     false},
    {"deepseek-coder",
     {"[\\r\\n]", "[" WS "]?\\p{L}+", "[" WS "]?\\p{P}+", re_ds_cjk, "\\p{N}"},
     false,
     false},
    {"deepseek-v3",
     {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+", re_ds3_main},
     false,
     false},
    {"gpt-4o|llama4|kanana2|talkie|minimax-m2", {re_gpt4o}, false, false},
    {"exaone-moe", {re_exaone_moe}, false, false},
};

static bool name_in_list(const char *list, const char *name, size_t len)
{
    for (const char *p = list;;) {
        const char *e = strchr(p, '|');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == len && memcmp(p, name, len) == 0) return true;
        if (!e) return false;
        p = e + 1;
    }
}

es_status es_tok_bpe_setup(es_tok *t, const char *pre, size_t pre_len, bool *add_bos)
{
    const pre_def *d = &k_pre[0];
    if (pre_len == 0) {
        es_log(ES_LOG_WARN, "tokenizer.ggml.pre: missing, using the default pre-tokenizer");
    } else {
        size_t i = 0;
        while (i < ES_LEN(k_pre) && !name_in_list(k_pre[i].names, pre, pre_len))
            i++;
        if (i < ES_LEN(k_pre))
            d = &k_pre[i];
        else
            es_log(ES_LOG_WARN,
                   "tokenizer.ggml.pre: unknown pre-tokenizer '%.*s', using the "
                   "default one; ids may differ from the model's own tokenizer",
                   (int)es_min_size(pre_len, 64), pre);
    }
    t->ignore_merges = d->ignore_merges;
    *add_bos = d->add_bos;
    for (int i = 0; i < TOK_MAX_RE && d->re[i]; i++) {
        int err;
        PCRE2_SIZE erroff;
        pcre2_code *re =
            pcre2_compile((PCRE2_SPTR)d->re[i], PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &erroff, NULL);
        if (!re) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(err, msg, sizeof(msg));
            return es_fail(ES_E_UNSUPPORTED,
                           "tokenizer: cannot compile pre-tokenizer regex %d "
                           "at %zu: %s",
                           i, (size_t)erroff, (const char *)msg);
        }
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional: the interpreter is the fallback */
        t->re[t->n_re++] = re;
    }
    return ES_OK;
}

/* ---- merges ---- */

static inline uint64_t pair_key(int32_t l, int32_t r)
{
    return (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
}

static inline uint64_t pair_hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xFF51AFD7ED558CCDull;
    k ^= k >> 33;
    return k;
}

static inline const tok_pair_slot *pair_find(const es_tok *t, int32_t l, int32_t r)
{
    uint64_t k = pair_key(l, r);
    for (uint64_t i = pair_hash(k) & t->pair_mask;; i = (i + 1) & t->pair_mask) {
        const tok_pair_slot *s = &t->pairs[i];
        if (s->key == k) return s;
        if (s->key == TOK_PAIR_EMPTY) return NULL;
    }
}

es_status es_tok_bpe_load_merges(es_tok *t, const es_gguf *g)
{
    const char *key = "tokenizer.ggml.merges";
    es_gguf_type ty;
    uint64_t n;
    if (es_gguf_find_key(g, key) < 0) return es_fail(ES_E_FORMAT, "%s: missing", key);
    if (!es_gguf_get_arr(g, key, &ty, &n) || ty != ES_GGUF_STRING)
        return es_fail(ES_E_FORMAT, "%s: wrong type (expected an array of strings)", key);
    if (n > (uint64_t)INT32_MAX / 4) return es_fail(ES_E_FORMAT, "%s: too many merges", key);
    uint64_t cap = 16;
    while (cap < n * 2)
        cap <<= 1;
    t->pairs = malloc(cap * sizeof(*t->pairs));
    if (!t->pairs)
        return es_fail(ES_E_NOMEM, "%s: out of memory for the merge table (%zu bytes)", key,
                       (size_t)cap * sizeof(*t->pairs));
    t->pair_mask = cap - 1;
    for (uint64_t i = 0; i < cap; i++)
        t->pairs[i].key = TOK_PAIR_EMPTY;

    for (uint64_t i = 0; i < n; i++) {
        es_str m = es_gguf_arr_str(g, key, i);
        /* "left right", split at the first space after the first byte (llama.cpp) */
        const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', m.len - 1) : NULL;
        if (!sp)
            return es_fail(ES_E_FORMAT, "%s[%llu]: '%.*s' is not two tokens separated by a space",
                           key, (unsigned long long)i, (int)es_min_size(m.len, 64), m.ptr);
        size_t ll = (size_t)(sp - m.ptr), rl = m.len - ll - 1;
        int32_t l = es_tok_find(t, m.ptr, ll), r = es_tok_find(t, sp + 1, rl);
        if (l < 0 || r < 0)
            return es_fail(ES_E_FORMAT,
                           "%s[%llu]: '%.*s' names a token that is not in "
                           "tokenizer.ggml.tokens",
                           key, (unsigned long long)i, (int)es_min_size(m.len, 64), m.ptr);
        uint64_t k = pair_key(l, r), j = pair_hash(k) & t->pair_mask;
        while (t->pairs[j].key != TOK_PAIR_EMPTY && t->pairs[j].key != k)
            j = (j + 1) & t->pair_mask;
        if (t->pairs[j].key == k) continue; /* a repeated merge keeps its first rank */
        /* the merged text, looked up once here instead of at every merge */
        char stackbuf[512];
        char *buf = m.len <= sizeof(stackbuf) ? stackbuf : malloc(m.len);
        if (!buf) return es_fail(ES_E_NOMEM, "%s[%llu]: out of memory", key, (unsigned long long)i);
        memcpy(buf, m.ptr, ll);
        memcpy(buf + ll, sp + 1, rl);
        int32_t res = es_tok_find(t, buf, ll + rl);
        if (buf != stackbuf) free(buf);
        t->pairs[j] = (tok_pair_slot){k, (int32_t)i, res};
    }
    return ES_OK;
}

/* ---- pre-tokenizer split ---- */

typedef struct span {
    size_t off, len;
} span;

/* Re-encodes text as llama.cpp decodes it into w->buf (valid UTF-8 for PCRE2). Where the bytes
 * to merge differ from the ones to match (encoded surrogates), w->buf2 holds them and *src
 * points to it; otherwise *src is w->buf. Returns the new length through *n. */
static es_status sanitize(tok_work *w, const char *text, size_t len, const uint8_t **src, size_t *n)
{
    /* each input byte becomes at most 3 output bytes (U+FFFD) */
    if (len > SIZE_MAX / 3) return es_fail(ES_E_NOMEM, "tokenizer: input too large");
    ES_TRY(tok_reserve((void **)&w->buf, &w->buf_cap, 3 * len + 4, 1));
    const uint8_t *u = (const uint8_t *)text;
    uint8_t *o = w->buf;
    bool surrogates = false;
    size_t i = 0, k = 0;
    while (i < len) {
        if (u[i] < 0x80) { /* fast path for ASCII */
            o[k++] = u[i++];
            continue;
        }
        size_t used;
        uint32_t cp = es_utf8_decode(u + i, len - i, &used);
        i += used;
        if (cp > 0x10FFFF) cp = ES_UTF8_REPLACEMENT; /* llama.cpp throws here */
        if (cp >= 0xD800 && cp <= 0xDFFF) surrogates = true;
        k += es_utf8_encode(cp, o + k);
    }
    *n = k;
    *src = w->buf;
    if (!surrogates) return ES_OK;
    /* keep the surrogate bytes for the merges; the regexes see U+E000 in their place: same
     * length, and like a surrogate in llama.cpp's tables a "control" code point that is neither
     * letter, number, punctuation, symbol, mark nor whitespace */
    ES_TRY(tok_reserve((void **)&w->buf2, &w->buf2_cap, k + 4, 1));
    memcpy(w->buf2, w->buf, k);
    for (size_t j = 0; j + 2 < k; j++) {
        if (w->buf[j] == 0xED && (w->buf[j + 1] & 0xE0) == 0xA0) {
            memcpy(w->buf + j, "\xEE\x80\x80", 3); /* U+E000 */
            j += 2;
        }
    }
    *src = w->buf2;
    return ES_OK;
}

static inline size_t utf8_char_len(const uint8_t *s, size_t n)
{
    size_t l = es_utf8_len(s[0]);
    return l < n ? l : n;
}

/* Splits every span of in[0..n_in) with regex re into matches and gaps, writing out[] and
 * returning the count through *n_out. out has room for one span per byte of text. */
static es_status split_spans(const pcre2_code *re, tok_work *w, const uint8_t *subj, const span *in,
                             size_t n_in, span *out, size_t *n_out)
{
    size_t no = 0;
    for (size_t s = 0; s < n_in; s++) {
        const uint8_t *base = subj + in[s].off;
        size_t len = in[s].len, prev = 0, pos = 0;
        uint32_t opts = 0;
        while (pos <= len) {
            int rc = pcre2_match(re, base, len, pos, opts | PCRE2_NO_UTF_CHECK, w->md, w->mctx);
            if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
                rc = pcre2_match(re, base, len, pos, opts | PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                                 w->md, w->mctx);
            if (rc == PCRE2_ERROR_NOMATCH) {
                if (!opts) break;
                /* no non-empty match right after an empty one: step one character */
                opts = 0;
                pos += utf8_char_len(base + pos, len - pos);
                if (pos > len) break;
                continue;
            }
            if (rc < 0)
                return es_fail(ES_E_UNSUPPORTED,
                               "tokenizer: pre-tokenizer regex failed "
                               "(pcre2 error %d)",
                               rc);
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
            size_t m0 = ov[0], m1 = ov[1];
            if (m0 > prev) out[no++] = (span){in[s].off + prev, m0 - prev};
            if (m1 > m0) out[no++] = (span){in[s].off + m0, m1 - m0};
            prev = m1;
            pos = m1;
            if (m1 == m0) {
                if (m0 >= len) break;
                opts = PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED;
            } else {
                opts = 0;
            }
        }
        if (prev < len) out[no++] = (span){in[s].off + prev, len - prev};
    }
    *n_out = no;
    return ES_OK;
}

/* ---- merges of one word ---- */

typedef struct bsym {
    int32_t prev, next;
    int32_t id;   /* token id of the symbol's text, -1 if it is not a token */
    uint32_t off; /* byte offset in the word */
    uint32_t n;   /* bytes; 0 once merged into its left neighbour */
} bsym;

typedef struct bigram {
    int32_t rank, left, right, result;
    uint32_t size;
} bigram;

static inline bool bigram_before(const bigram *a, const bigram *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(bigram *h, size_t *n, bigram b)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(&b, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = b;
}

static bigram heap_pop(bigram *h, size_t *n)
{
    bigram top = h[0], last = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && bigram_before(&h[c + 1], &h[c])) c++;
        if (!bigram_before(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = last;
    return top;
}

static inline void try_pair(const es_tok *t, const bsym *sym, int32_t l, int32_t r, bigram *h,
                            size_t *nh)
{
    if (l < 0 || r < 0 || sym[l].id < 0 || sym[r].id < 0) return;
    const tok_pair_slot *p = pair_find(t, sym[l].id, sym[r].id);
    if (!p) return;
    heap_push(h, nh, (bigram){p->rank, l, r, p->result, sym[l].n + sym[r].n});
}

/* Emits a final symbol that is not a token: like llama.cpp, each byte of its GPT-2 text that is
 * a one-byte token on its own (the printable ASCII ones, in practice). */
static es_status emit_fallback(const es_tok *t, const uint8_t *word, const bsym *s, tok_ids *out)
{
    for (uint32_t i = 0; i < s->n; i++)
        for (int k = 0; k < 2; k++)
            if (t->byte_fb[word[s->off + i]][k] >= 0)
                ES_TRY(tok_ids_push(out, t->byte_fb[word[s->off + i]][k]));
    return ES_OK;
}

static es_status bpe_word(const es_tok *t, tok_work *w, const uint8_t *word, size_t n, tok_ids *out)
{
    if (n == 1) {
        int32_t id = t->byte_tok[word[0]];
        if (id >= 0) return tok_ids_push(out, id);
        bsym s = {-1, -1, -1, 0, 1};
        return emit_fallback(t, word, &s, out);
    }
    if (t->ignore_merges) { /* the whole word may be a token of its own */
        ES_TRY(tok_reserve((void **)&w->enc, &w->enc_cap, 2 * n, 1));
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            k += es_utf8_encode(es_gpt2_byte_to_cp(word[i]), w->enc + k);
        int32_t id = es_tok_find(t, (const char *)w->enc, k);
        if (id >= 0) return tok_ids_push(out, id);
    }
    if (n > UINT32_MAX / 2) return es_fail(ES_E_NOMEM, "tokenizer: word too long");
    ES_TRY(tok_reserve(&w->sym, &w->sym_cap, n, sizeof(bsym)));
    ES_TRY(tok_reserve(&w->heap, &w->heap_cap, 3 * n, sizeof(bigram)));
    bsym *sym = w->sym;
    bigram *h = w->heap;
    size_t nh = 0;
    for (size_t i = 0; i < n; i++)
        sym[i] = (bsym){(int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1, t->byte_tok[word[i]],
                        (uint32_t)i, 1};
    for (size_t i = 1; i < n; i++)
        try_pair(t, sym, (int32_t)i - 1, (int32_t)i, h, &nh);

    while (nh > 0) {
        bigram b = heap_pop(h, &nh);
        bsym *l = &sym[b.left], *r = &sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; /* stale */
        l->n += r->n;
        l->id = b.result;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        /* each merge adds at most two pairs: the heap never outgrows 3 * n (n - 1 initial) */
        try_pair(t, sym, l->prev, b.left, h, &nh);
        try_pair(t, sym, b.left, l->next, h, &nh);
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next) {
        if (sym[i].id >= 0)
            ES_TRY(tok_ids_push(out, sym[i].id));
        else
            ES_TRY(emit_fallback(t, word, &sym[i], out));
    }
    return ES_OK;
}

es_status es_tok_bpe_encode(const es_tok *t, tok_work *w, const char *text, size_t len,
                            tok_ids *out)
{
    if (len == 0) return ES_OK;
    if (!w->md) {
        w->md = pcre2_match_data_create(1, NULL);
        w->mctx = pcre2_match_context_create(NULL);
        w->jit = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, NULL);
        if (!w->md || !w->mctx) return es_fail(ES_E_NOMEM, "tokenizer: out of memory");
        if (w->jit) pcre2_jit_stack_assign(w->mctx, NULL, w->jit);
    }
    const uint8_t *src = NULL;
    size_t n = 0;
    ES_TRY(sanitize(w, text, len, &src, &n));

    /* spans ping-pong between the two halves of w->span; a split never makes more spans than
     * there are bytes */
    ES_TRY(tok_reserve(&w->span, &w->span_cap, 2 * (n + 1), sizeof(span)));
    span *a = w->span, *b = (span *)w->span + n + 1;
    size_t na = 1;
    a[0] = (span){0, n};
    for (int i = 0; i < t->n_re; i++) {
        size_t nb = 0;
        ES_TRY(split_spans(t->re[i], w, w->buf, a, na, b, &nb));
        span *tmp = a;
        a = b;
        b = tmp;
        na = nb;
    }
    for (size_t i = 0; i < na; i++)
        ES_TRY(bpe_word(t, w, src + a[i].off, a[i].len, out));
    return ES_OK;
}
