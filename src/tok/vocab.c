/*
 * The vocabulary: loads and validates tokenizer.ggml.* metadata (es_tok_create), derives token
 * attributes the way llama.cpp does, lists the special tokens longest first, builds the byte
 * tables the encoders use, and renders tokens back to bytes (es_tok_piece, es_tok_decode). The
 * encoding itself is tok.c's (the special-token partition) and bpe.c's / spm.c's.
 *
 * DESIGN: llama.cpp is the reference. Where its loader fixes up metadata by token text (EOG
 * tokens marked CONTROL, Phi-3's right-stripping special tokens, gpt-oss's channel tokens), we
 * apply the same rules, because they change how text is split. Where llama.cpp would abort or
 * throw (duplicate tokens, merges naming unknown tokens, out-of-range BOS/EOS/UNK ids) we
 * return ES_E_FORMAT naming the key instead.
 */
#include "tok/tok_int.h"
#include "tok/utf8.h"

#include <stdio.h>

/* ---- metadata helpers ---- */

/* The array key's element count if it is an array of elem (any of two types); ES_E_FORMAT
 * if it exists with another type. *n = 0 and *present = false if it is absent. */
static es_status get_array(const es_gguf *g, const char *key, es_gguf_type want1,
                           es_gguf_type want2, es_gguf_type *type, uint64_t *n, bool *present)
{
    *present = false;
    *n = 0;
    if (es_gguf_find_key(g, key) < 0) return ES_OK;
    if (!es_gguf_get_arr(g, key, type, n) || (*type != want1 && *type != want2))
        return es_fail(ES_E_FORMAT, "%s: wrong type (expected an array of %s)", key,
                       want1 == ES_GGUF_STRING ? "strings" : "numbers");
    *present = true;
    return ES_OK;
}

/* Reads an optional string key; ES_E_FORMAT if it exists but is not a string. */
static es_status get_opt_str(const es_gguf *g, const char *key, es_str *s, bool *present)
{
    *present = false;
    s->ptr = "";
    s->len = 0;
    if (es_gguf_find_key(g, key) < 0) return ES_OK;
    if (!es_gguf_get_str(g, key, s)) return es_fail(ES_E_FORMAT, "%s: not a string", key);
    *present = true;
    return ES_OK;
}

static es_status get_opt_bool(const es_gguf *g, const char *key, bool *v)
{
    if (es_gguf_find_key(g, key) < 0) return ES_OK;
    if (!es_gguf_get_bool(g, key, v)) return es_fail(ES_E_FORMAT, "%s: not a boolean", key);
    return ES_OK;
}

/* A special token id key. Absent: *id keeps its default. Out of range: ES_E_FORMAT if strict,
 * else a warning and the default stays. */
static es_status get_token_id(const es_tok *t, const es_gguf *g, const char *key, int32_t *id,
                              bool strict)
{
    if (es_gguf_find_key(g, key) < 0) return ES_OK;
    int64_t v;
    if (!es_gguf_get_i64(g, key, &v)) return es_fail(ES_E_FORMAT, "%s: not an integer", key);
    if (v < 0 || v >= t->n_vocab) {
        if (strict)
            return es_fail(ES_E_FORMAT, "%s: id %lld out of range (n_vocab %d)", key, (long long)v,
                           t->n_vocab);
        es_log(ES_LOG_WARN, "%s: id %lld out of range (n_vocab %d), ignored", key, (long long)v,
               t->n_vocab);
        return ES_OK;
    }
    *id = (int32_t)v;
    return ES_OK;
}

/* Copies the token texts. Empty texts become "[EMPTY_<id>]" as in llama.cpp. Refuses a token
 * text over ES_TOK_MAX_TOKEN_BYTES and texts over ES_TOK_MAX_TEXT_BYTES in all, before
 * allocating anything (tok.h says why these limits). */
static es_status load_texts(es_tok *t, const es_gguf *g, const char *key)
{
    size_t total = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        es_str s = es_gguf_arr_str(g, key, (uint64_t)i);
        if (s.len > ES_TOK_MAX_TOKEN_BYTES)
            return es_fail(ES_E_FORMAT,
                           "%s: %s[%d]: token of %llu bytes is longer than the limit of %zu "
                           "bytes",
                           es_gguf_path(g), key, i, (unsigned long long)s.len,
                           ES_TOK_MAX_TOKEN_BYTES);
        total += s.len ? s.len : 32; /* both terms <= 64 KiB: no overflow before the check */
        if (total > ES_TOK_MAX_TEXT_BYTES)
            return es_fail(ES_E_FORMAT,
                           "%s: %s: token texts take more than the limit of %zu bytes "
                           "(passed at token %d)",
                           es_gguf_path(g), key, ES_TOK_MAX_TEXT_BYTES, i);
    }
    t->text = malloc(total + 1);
    t->text_off = malloc(((size_t)t->n_vocab + 1) * sizeof(*t->text_off));
    if (!t->text || !t->text_off)
        return es_fail(ES_E_NOMEM, "%s: out of memory for %zu bytes of token text", key, total);
    uint32_t off = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        es_str s = es_gguf_arr_str(g, key, (uint64_t)i);
        t->text_off[i] = off;
        if (s.len == 0) {
            es_log(ES_LOG_WARN, "%s: empty token at index %d", key, i);
            off += (uint32_t)snprintf(t->text + off, 32, "[EMPTY_%d]", i);
        } else {
            memcpy(t->text + off, s.ptr, s.len);
            off += (uint32_t)s.len;
        }
    }
    t->text_off[t->n_vocab] = off;
    return ES_OK;
}

/* tokenizer.ggml.scores (float32 or int32) and tokenizer.ggml.token_type (int32). */
static es_status load_scores_types(es_tok *t, const es_gguf *g)
{
    es_gguf_type ty;
    uint64_t n;
    bool present;
    t->score = calloc((size_t)t->n_vocab, sizeof(*t->score));
    t->attr = malloc((size_t)t->n_vocab);
    if (!t->score || !t->attr)
        return es_fail(ES_E_NOMEM, "tokenizer: out of memory for the scores of %d tokens", t->n_vocab);

    const char *key = "tokenizer.ggml.scores";
    ES_TRY(get_array(g, key, ES_GGUF_FLOAT32, ES_GGUF_INT32, &ty, &n, &present));
    if (present) {
        if (n < (uint64_t)t->n_vocab)
            return es_fail(ES_E_FORMAT, "%s: %llu entries for %d tokens", key,
                           (unsigned long long)n, t->n_vocab);
        const uint8_t *p = es_gguf_arr_data(g, key);
        for (int32_t i = 0; i < t->n_vocab; i++) {
            if (ty == ES_GGUF_FLOAT32) {
                memcpy(&t->score[i], p + 4 * (size_t)i, 4);
            } else {
                int32_t v;
                memcpy(&v, p + 4 * (size_t)i, 4);
                t->score[i] = (float)v;
            }
        }
    }

    key = "tokenizer.ggml.token_type";
    ES_TRY(get_array(g, key, ES_GGUF_INT32, ES_GGUF_INT32, &ty, &n, &present));
    if (!present) {
        memset(t->attr, TOK_ATTR_NORMAL, (size_t)t->n_vocab);
        return ES_OK;
    }
    if (n < (uint64_t)t->n_vocab)
        return es_fail(ES_E_FORMAT, "%s: %llu entries for %d tokens", key, (unsigned long long)n,
                       t->n_vocab);
    const uint8_t *p = es_gguf_arr_data(g, key);
    for (int32_t i = 0; i < t->n_vocab; i++) {
        int32_t v;
        memcpy(&v, p + 4 * (size_t)i, 4);
        /* llama.cpp's token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused,
         * 6 byte; 0 and anything else is "undefined" (no attribute at all). */
        static const uint8_t map[7] = {0,
                                       TOK_ATTR_NORMAL,
                                       TOK_ATTR_UNKNOWN,
                                       TOK_ATTR_CONTROL,
                                       TOK_ATTR_USER,
                                       TOK_ATTR_UNUSED,
                                       TOK_ATTR_BYTE};
        t->attr[i] = (v >= 0 && v < 7) ? map[v] : 0;
    }
    return ES_OK;
}

/* ---- attribute fix-ups by token text (llama.cpp's loader does the same) ---- */

/* Texts llama.cpp treats as end-of-generation or fill-in-the-middle tokens: if such a token is
 * not CONTROL in the file, it becomes CONTROL (so parse_special decides whether it is split). */
static const char *const k_control_texts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
    "[e~[",
    /* fill-in-the-middle: prefix, suffix, middle, pad, repo, file separator */
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<\xEF\xBD\x9C"
    "fim\xE2\x96\x81"
    "begin\xEF\xBD\x9C>",
    "<PRE>",
    "\xE2\x96\x81<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<\xEF\xBD\x9C"
    "fim\xE2\x96\x81hole\xEF\xBD\x9C>",
    "<SUF>",
    "\xE2\x96\x81<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<\xEF\xBD\x9C"
    "fim\xE2\x96\x81"
    "end\xEF\xBD\x9C>",
    "<MID>",
    "\xE2\x96\x81<MID>",
    "<|code_middle|>",
    "<|middle|>",
    "<|fim_pad|>",
    "<fim-pad>",
    "<fim_pad>",
    "<PAD>",
    "[PAD]",
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
    "<|file_sep|>",
};

static int32_t find_cstr(const es_tok *t, const char *s)
{
    return es_tok_find(t, s, strlen(s));
}

static bool str_contains(es_str hay, const char *needle)
{
    size_t n = strlen(needle);
    return hay.len >= n && memmem(hay.ptr, hay.len, needle, n) != NULL;
}

static void fix_attributes(es_tok *t)
{
    for (size_t i = 0; i < ES_LEN(k_control_texts); i++) {
        int32_t id = find_cstr(t, k_control_texts[i]);
        if (id >= 0 && !(t->attr[id] & TOK_ATTR_CONTROL)) {
            es_log(ES_LOG_INFO, "tokenizer: token %d '%s' marked CONTROL", id, k_control_texts[i]);
            t->attr[id] |= TOK_ATTR_CONTROL;
        }
    }
    /* gpt-oss: these are always rendered and always split out */
    static const char *const user[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
    for (size_t i = 0; i < ES_LEN(user); i++) {
        int32_t id = find_cstr(t, user[i]);
        if (id >= 0) t->attr[id] = TOK_ATTR_USER;
    }
    /* o200k_harmony / solar-open: "<|end|>" is not an end-of-generation token there */
    int32_t end = find_cstr(t, "<|end|>");
    bool calls = find_cstr(t, "<|call|>") >= 0 || find_cstr(t, "<|calls|>") >= 0;
    if (end >= 0 && calls && (find_cstr(t, "<|return|>") >= 0 || find_cstr(t, "<|flush|>") >= 0))
        t->attr[end] = TOK_ATTR_USER;
    /* gemma4 / paddleocr: "</s>" is a normal token when "<|tool_response>" exists */
    int32_t s_end = find_cstr(t, "</s>");
    if (s_end >= 0 && find_cstr(t, "<|tool_response>") >= 0) t->attr[s_end] = TOK_ATTR_NORMAL;
}

static int cmp_special(const void *a, const void *b, void *arg)
{
    const es_tok *t = arg;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    size_t lx = t->text_off[x + 1] - t->text_off[x], ly = t->text_off[y + 1] - t->text_off[y];
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : (x > y);
}

/* The special-token list, longest first, then llama.cpp's per-model strip rules. */
static es_status build_specials(es_tok *t, const es_gguf *g)
{
    t->special = malloc((size_t)t->n_vocab * sizeof(*t->special));
    if (!t->special) return es_fail(ES_E_NOMEM, "tokenizer: out of memory for the special tokens");
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_USER | TOK_ATTR_UNKNOWN))
            t->special[t->n_special++] = id;
    qsort_r(t->special, (size_t)t->n_special, sizeof(*t->special), cmp_special, t);

    es_str name = {"", 0}, pre = {"", 0}, arch = {"", 0};
    es_gguf_get_str(g, "general.name", &name);
    es_gguf_get_str(g, "tokenizer.ggml.pre", &pre);
    es_gguf_get_str(g, "general.architecture", &arch);
    char lname[256];
    size_t nl = es_min_size(name.len, sizeof(lname) - 1);
    for (size_t i = 0; i < nl; i++) {
        char c = name.ptr[i];
        lname[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    es_str low = {lname, nl};

    if (str_contains(pre, "jina-v2-de") || str_contains(pre, "jina-v2-es") ||
        str_contains(pre, "jina-v2-code") || str_contains(arch, "nomic-bert-moe") ||
        str_contains(arch, "jina-bert-v3")) {
        int32_t id = find_cstr(t, "<mask>");
        if (id >= 0) t->attr[id] |= TOK_ATTR_LSTRIP;
    } else if (str_contains(low, "phi-3") || str_contains(low, "phi3")) {
        /* Phi-3: special tokens eat the spaces after them, except these three */
        for (int32_t i = 0; i < t->n_special; i++)
            t->attr[t->special[i]] |= TOK_ATTR_RSTRIP;
        int32_t id = find_cstr(t, "</s>");
        if (id >= 0) t->attr[id] |= TOK_ATTR_RSTRIP;
        static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (size_t i = 0; i < ES_LEN(keep); i++)
            if ((id = find_cstr(t, keep[i])) >= 0) t->attr[id] &= (uint8_t)~TOK_ATTR_RSTRIP;
    } else if (str_contains(low, "modern-bert")) {
        int32_t id = find_cstr(t, "[MASK]");
        if (id >= 0) t->attr[id] |= TOK_ATTR_LSTRIP;
    }
    return ES_OK;
}

/* ---- pieces (token_to_piece with special = true) ---- */

typedef struct strbuf {
    char *p;
    size_t n, cap;
} strbuf;

static es_status sb_put(strbuf *b, const void *s, size_t n)
{
    ES_TRY(tok_reserve((void **)&b->p, &b->cap, b->n + n + 1, 1));
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return ES_OK;
}

/* Byte of a <0xXX> token: llama.cpp parses the two characters after "<0x" with strtol. */
static char byte_token_value(const char *s, size_t n)
{
    char hex[3] = {0, 0, 0};
    for (size_t i = 3; i < 5 && i < n; i++)
        hex[i - 3] = s[i];
    return (char)strtol(hex, NULL, 16);
}

/* Byte-level BPE text back to bytes, written to out unless out is NULL; returns the length.
 * A character outside the GPT-2 mapping renders as "[UNK_BYTE_0x<its UTF-8 in hex>]".
 * llama.cpp also repeats the whole token text inside those brackets, so that a token of n such
 * characters renders to O(n^2) bytes (a 120 KB token asked for 4.7 GB); here every input byte
 * gives at most 19 output bytes (an invalid byte stands for U+FFFD: "[UNK_BYTE_0xefbfbd]"). */
static size_t gpt2_decode(const char *s, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    const uint8_t *u = (const uint8_t *)s;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t used;
        uint32_t cp = es_utf8_decode(u + i, n - i, &used);
        i += used;
        if (cp > 0x10FFFF) cp = ES_UTF8_REPLACEMENT;
        int byte = es_gpt2_cp_to_byte(cp);
        if (byte >= 0) {
            if (out) out[k] = (char)byte;
            k++;
            continue;
        }
        uint8_t enc[4];
        size_t el = es_utf8_encode(cp, enc);
        if (out) {
            memcpy(out + k, "[UNK_BYTE_0x", 12);
            for (size_t j = 0; j < el; j++) {
                out[k + 12 + 2 * j] = hex[enc[j] >> 4];
                out[k + 13 + 2 * j] = hex[enc[j] & 15];
            }
            out[k + 12 + 2 * el] = ']';
        }
        k += 13 + 2 * el;
    }
    return k;
}

/* SPM text with U+2581 turned into spaces, written to out unless out is NULL; returns the
 * length (never more than n). */
static size_t spm_unescape(const char *s, size_t n, char *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        bool sp = n - i >= 3 && memcmp(s + i, "\xE2\x96\x81", 3) == 0;
        if (out) out[k] = sp ? ' ' : s[i];
        k++;
        i += sp ? 3 : 1;
    }
    return k;
}

/* The piece of token id, written to out unless out is NULL; returns its length. build_pieces
 * calls it twice per token (count, then write), so the bytes counted are the bytes written. */
static size_t render_piece(const es_tok *t, int32_t id, char *out)
{
    size_t n;
    const char *s = tok_text(t, id, &n);
    uint8_t a = t->attr[id];
    if (a & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL | TOK_ATTR_USER)) {
        if (out) memcpy(out, s, n);
        return n;
    }
    if (a & TOK_ATTR_NORMAL)
        return t->kind == TOK_BPE ? gpt2_decode(s, n, out) : spm_unescape(s, n, out);
    if (a & TOK_ATTR_BYTE) {
        if (out) out[0] = byte_token_value(s, n);
        return 1;
    }
    return 0; /* unused / undefined tokens render as nothing */
}

/* Every token's piece in one exactly sized block: a counting pass (linear in the texts) checks
 * ES_TOK_MAX_PIECE_BYTES before anything is allocated, then a writing pass fills the block. */
static es_status build_pieces(es_tok *t, const es_gguf *g)
{
    t->piece_off = malloc(((size_t)t->n_vocab + 1) * sizeof(*t->piece_off));
    if (!t->piece_off) return es_fail(ES_E_NOMEM, "tokenizer: out of memory for the token pieces");
    size_t total = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        t->piece_off[id] = (uint32_t)total;
        total += render_piece(t, id, NULL); /* <= 19 * ES_TOK_MAX_TOKEN_BYTES: no overflow */
        if (total > ES_TOK_MAX_PIECE_BYTES)
            return es_fail(ES_E_FORMAT,
                           "%s: tokenizer.ggml.tokens: detokenized tokens take more than the "
                           "limit of %zu bytes (passed at token %d)",
                           es_gguf_path(g), ES_TOK_MAX_PIECE_BYTES, id);
    }
    t->piece_off[t->n_vocab] = (uint32_t)total;
    t->piece = malloc(total + 1);
    if (!t->piece) return es_fail(ES_E_NOMEM, "tokenizer: out of memory for the token pieces");
    for (int32_t id = 0; id < t->n_vocab; id++)
        render_piece(t, id, t->piece + t->piece_off[id]);
    return ES_OK;
}

/* Byte tables used by the encoders for single bytes and byte fallback. */
static void build_byte_tables(es_tok *t)
{
    for (int b = 0; b < 256; b++) {
        uint8_t enc[4];
        size_t el = es_utf8_encode(es_gpt2_byte_to_cp((uint8_t)b), enc);
        t->byte_tok[b] = es_tok_find(t, (const char *)enc, el);
        for (size_t k = 0; k < 2; k++)
            t->byte_fb[b][k] = k < el ? es_tok_find(t, (const char *)enc + k, 1) : -1;
        char hex[8];
        snprintf(hex, sizeof(hex), "<0x%02X>", b);
        int32_t id = es_tok_find(t, hex, 6);
        if (id < 0) {
            char c = (char)b;
            id = es_tok_find(t, &c, 1);
        }
        t->spm_byte[b] = id;
    }
}

/* ---- create / destroy ---- */

void es_tok_destroy(es_tok *t)
{
    if (!t) return;
    for (int i = 0; i < t->n_re; i++)
        pcre2_code_free(t->re[i]);
    free(t->text);
    free(t->text_off);
    free(t->score);
    free(t->attr);
    free(t->piece);
    free(t->piece_off);
    free(t->map_id);
    free(t->map_hash);
    free(t->special);
    free(t->pairs);
    free(t);
}

es_status es_tok_create(const es_gguf *g, es_tok **out)
{
    es_status st = ES_OK;
    *out = NULL;
    es_str model;
    bool present;
    ES_TRY(get_opt_str(g, "tokenizer.ggml.model", &model, &present));
    if (!present) return es_fail(ES_E_FORMAT, "tokenizer.ggml.model: missing");
    int kind;
    if (es_str_eq(model, "gpt2"))
        kind = TOK_BPE;
    else if (es_str_eq(model, "llama"))
        kind = TOK_SPM;
    else
        return es_fail(ES_E_UNSUPPORTED, "tokenizer.ggml.model: '%.*s' is not supported",
                       (int)es_min_size(model.len, 64), model.ptr);

    const char *key = "tokenizer.ggml.tokens";
    es_gguf_type ty;
    uint64_t n;
    ES_TRY(get_array(g, key, ES_GGUF_STRING, ES_GGUF_STRING, &ty, &n, &present));
    if (!present) return es_fail(ES_E_FORMAT, "%s: missing", key);
    if (n == 0) return es_fail(ES_E_FORMAT, "%s: empty vocabulary", key);
    if (n > ES_TOK_MAX_TOKENS)
        return es_fail(ES_E_FORMAT, "%s: %s: %llu tokens is more than the limit of %d",
                       es_gguf_path(g), key, (unsigned long long)n, ES_TOK_MAX_TOKENS);

    es_tok *t = calloc(1, sizeof(*t));
    if (!t) return es_fail(ES_E_NOMEM, "tokenizer: out of memory");
    t->kind = kind;
    t->n_vocab = (int32_t)n;
    if ((st = load_texts(t, g, key)) != ES_OK) goto fail;
    if ((st = es_tok_build_map(t)) != ES_OK) goto fail;
    if ((st = load_scores_types(t, g)) != ES_OK) goto fail;

    /* defaults by tokenizer kind, as llama.cpp */
    if (kind == TOK_SPM) {
        t->bos = 1, t->eos = 2, t->unk = 0;
        t->add_bos = true;
        t->add_space_prefix = true;
    } else {
        t->bos = 11, t->eos = 11, t->unk = -1;
        es_str pre;
        if ((st = get_opt_str(g, "tokenizer.ggml.pre", &pre, &present)) != ES_OK) goto fail;
        if ((st = es_tok_bpe_setup(t, pre.ptr, pre.len, &t->add_bos)) != ES_OK) goto fail;
        if ((st = es_tok_bpe_load_merges(t, g)) != ES_OK) goto fail;
    }
    if (t->bos >= t->n_vocab) t->bos = -1;
    if (t->eos >= t->n_vocab) t->eos = -1;
    if (t->unk >= t->n_vocab) t->unk = -1;
    if ((st = get_opt_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix)) != ES_OK)
        goto fail;

    if ((st = get_token_id(t, g, "tokenizer.ggml.bos_token_id", &t->bos, true)) != ES_OK) goto fail;
    if ((st = get_token_id(t, g, "tokenizer.ggml.eos_token_id", &t->eos, true)) != ES_OK) goto fail;
    if ((st = get_token_id(t, g, "tokenizer.ggml.unknown_token_id", &t->unk, true)) != ES_OK)
        goto fail;
    int32_t unused = -1; /* validated only: the encoder does not use these */
    static const char *const other_ids[] = {
        "tokenizer.ggml.padding_token_id", "tokenizer.ggml.seperator_token_id",
        "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id",
        "tokenizer.ggml.mask_token_id"};
    for (size_t i = 0; i < ES_LEN(other_ids); i++)
        if ((st = get_token_id(t, g, other_ids[i], &unused, false)) != ES_OK) goto fail;

    if ((st = get_opt_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos)) != ES_OK) goto fail;
    if ((st = get_opt_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos)) != ES_OK) goto fail;
    if (t->add_bos && t->bos < 0) {
        es_log(ES_LOG_WARN, "tokenizer: add_bos_token is set but there is no BOS token; ignored");
        t->add_bos = false;
    }
    if (t->add_eos && t->eos < 0) {
        es_log(ES_LOG_WARN, "tokenizer: add_eos_token is set but there is no EOS token; ignored");
        t->add_eos = false;
    }

    fix_attributes(t);
    if ((st = build_specials(t, g)) != ES_OK) goto fail;
    build_byte_tables(t);
    if ((st = build_pieces(t, g)) != ES_OK) goto fail;
    *out = t;
    return ES_OK;
fail:
    es_tok_destroy(t);
    return st;
}

int32_t es_tok_n_vocab(const es_tok *t)
{
    return t->n_vocab;
}
int32_t es_tok_bos(const es_tok *t)
{
    return t->bos;
}
int32_t es_tok_eos(const es_tok *t)
{
    return t->eos;
}
bool es_tok_add_bos(const es_tok *t)
{
    return t->add_bos;
}
bool es_tok_add_eos(const es_tok *t)
{
    return t->add_eos;
}

const char *es_tok_piece(const es_tok *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->piece_off[id + 1] - t->piece_off[id];
    return t->piece + t->piece_off[id];
}

es_status es_tok_decode(const es_tok *t, const int32_t *ids, size_t n, char **text, size_t *len)
{
    strbuf b = {0};
    *text = NULL;
    *len = 0;
    for (size_t i = 0; i < n; i++) {
        size_t pl;
        const char *p = es_tok_piece(t, ids[i], &pl);
        if (!p) {
            free(b.p);
            return es_fail(ES_E_INVAL, "decode: token id %d out of range (n_vocab %d)", ids[i],
                           t->n_vocab);
        }
        /* an SPM vocabulary added one space in front of the text: drop it again */
        if (i == 0 && t->add_space_prefix && pl > 0 && p[0] == ' ') p++, pl--;
        if (sb_put(&b, p, pl) != ES_OK) {
            free(b.p);
            return es_fail(ES_E_NOMEM, "decode: out of memory for %zu ids", n);
        }
    }
    if (!b.p && sb_put(&b, "", 0) != ES_OK) return es_fail(ES_E_NOMEM, "decode: out of memory");
    b.p[b.n] = 0;
    *text = b.p;
    *len = b.n;
    return ES_OK;
}
