/*
 * Tokenizer vocabulary limits (tok.h: ES_TOK_MAX_*): vocabularies built here with the GGUF
 * writer, one hostile token at a time. A vocabulary past a limit is refused with ES_E_FORMAT and
 * a message naming the token; one inside the limits builds with memory linear in its size
 * (checked through the length of the detokenized pieces, which used to grow with the square of
 * a token's length) and tokenizes as usual.
 */
#include "t.h"

#include "gguf/gguf.h"
#include "tok/tok.h"

/* First id after the fixed part of the vocabularies below. */
#define BPE_FIRST 256 /* gpt2: the 256 byte characters */
#define SPM_FIRST 260 /* llama: <0x00>..<0xFF>, then "▁" "a" "b" "c" */

/* Builds a vocabulary of kind model ("gpt2" or "llama") with extra tokens (texts with lengths)
 * after the fixed part, writes it to a temp file and runs es_tok_create on it. The gpt2 one has
 * an empty merge list and no pre-tokenizer name (like the reported file). */
static es_status make_tok(const char *model, const char *const *extra, const size_t *extra_len,
                          int n_extra, es_tok **out)
{
    bool spm = strcmp(model, "llama") == 0;
    int n_fixed = spm ? SPM_FIRST : BPE_FIRST, n = n_fixed + n_extra;
    static const char *const spm_fixed[] = {"\xE2\x96\x81", "a", "b", "c"};
    static char fixed[SPM_FIRST][8];
    const char **toks = calloc((size_t)n, sizeof(*toks));
    size_t *lens = calloc((size_t)n, sizeof(*lens));
    int32_t *types = calloc((size_t)n, sizeof(*types));
    assert_non_null(toks);
    assert_non_null(lens);
    assert_non_null(types);
    for (int i = 0; i < n_fixed; i++) {
        if (!spm)
            t_gpt2_char(i, fixed[i]);
        else if (i < 256)
            snprintf(fixed[i], sizeof(fixed[i]), "<0x%02X>", i);
        else
            snprintf(fixed[i], sizeof(fixed[i]), "%s", spm_fixed[i - 256]);
        toks[i] = fixed[i];
        lens[i] = strlen(fixed[i]);
        types[i] = spm && i < 256 ? 6 : 1; /* BYTE / NORMAL */
    }
    for (int i = 0; i < n_extra; i++) {
        toks[n_fixed + i] = extra[i];
        lens[n_fixed + i] = extra_len[i];
        types[n_fixed + i] = 1;
    }
    es_gguf_writer *w;
    assert_int_equal(es_gguf_writer_create(&w), ES_OK);
    assert_int_equal(es_gguf_writer_set_str(w, "tokenizer.ggml.model", model), ES_OK);
    assert_int_equal(
        es_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, lens, (uint64_t)n), ES_OK);
    assert_int_equal(
        es_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", ES_GGUF_INT32, types, (uint64_t)n),
        ES_OK);
    if (!spm)
        assert_int_equal(es_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", NULL, NULL, 0),
                         ES_OK);
    const char *path = t_tmp_path("limits.gguf");
    assert_int_equal(es_gguf_writer_write(w, path), ES_OK);
    es_gguf_writer_destroy(w);
    free(toks);
    free(lens);
    free(types);
    es_gguf *g;
    assert_int_equal(es_gguf_open(path, &g), ES_OK);
    *out = (es_tok *)1;
    es_status st = es_tok_create(g, out);
    es_gguf_close(g);
    unlink(path);
    if (st != ES_OK) assert_null(*out);
    return st;
}

/* n CJK characters (U+4E00 onwards, 3 bytes each) in a malloc'd buffer. */
static char *cjk(size_t n)
{
    char *s = malloc(3 * n + 1);
    assert_non_null(s);
    for (size_t i = 0; i < n; i++) {
        unsigned cp = 0x4E00 + (unsigned)(i % 20000);
        s[3 * i] = (char)(0xE0 | (cp >> 12));
        s[3 * i + 1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        s[3 * i + 2] = (char)(0x80 | (cp & 0x3F));
    }
    s[3 * n] = 0;
    return s;
}

static void expect_ids(const es_tok *t, const char *text, const int32_t *want, size_t n_want)
{
    int32_t *ids;
    size_t n;
    assert_int_equal(es_tok_encode(t, text, strlen(text), false, false, &ids, &n), ES_OK);
    assert_int_equal(n, n_want);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ids[i], want[i]);
    free(ids);
}

static void expect_abc(const es_tok *t, bool spm)
{
    static const int32_t bpe[] = {'a', 'b', 'c'};
    static const int32_t sp[] = {256, 257, 258, 259}; /* "▁" "a" "b" "c" */
    if (spm)
        expect_ids(t, "abc", sp, T_LEN(sp));
    else
        expect_ids(t, "abc", bpe, T_LEN(bpe));
}

/* The reported file: one token of 40,000 CJK characters (120,000 bytes). Before the fix its
 * byte-level BPE piece took 4.7 GB. Either refused with a message naming the token, or built
 * linearly and tokenizing as usual. */
static void test_bomb(void **state)
{
    (void)state;
    const size_t n_char = 40000;
    char *big = cjk(n_char);
    size_t len = 3 * n_char;
    static const char *const models[] = {"gpt2", "llama"};
    for (size_t m = 0; m < T_LEN(models); m++) {
        bool spm = m == 1;
        es_tok *t;
        es_status st = make_tok(models[m], (const char *const *)&big, &len, 1, &t);
        if (st == ES_OK) {
            expect_abc(t, spm);
            size_t pl;
            es_tok_piece(t, spm ? SPM_FIRST : BPE_FIRST, &pl);
            assert_true(pl <= 19 * len);
            es_tok_destroy(t);
        } else {
            if (st != ES_E_FORMAT || !strstr(es_last_error(), "tokenizer.ggml.tokens["))
                fail_msg("%s: status %d '%s'", models[m], st, es_last_error());
            print_message("  %s: refused: %s\n", models[m], es_last_error());
        }
    }
    free(big);
}

/* A long but legal token (4,000 CJK characters): its piece is linear in its length. For
 * byte-level BPE each character outside the GPT-2 mapping renders as "[UNK_BYTE_0x<hex>]"
 * (19 bytes); llama.cpp's rendering would repeat the 12,000-byte text for each of them. */
static void test_long_token(void **state)
{
    (void)state;
    const size_t n_char = 4000;
    char *big = cjk(n_char);
    size_t len = 3 * n_char;
    es_tok *t;
    assert_int_equal(make_tok("gpt2", (const char *const *)&big, &len, 1, &t), ES_OK);
    expect_abc(t, false);
    size_t pl;
    const char *p = es_tok_piece(t, BPE_FIRST, &pl);
    assert_int_equal(pl, 19 * n_char);
    assert_memory_equal(p, "[UNK_BYTE_0xe4b880][UNK_BYTE_0xe4b881]", 38);
    es_tok_destroy(t);

    /* SentencePiece: the piece is the text itself; encoding the text (no bigram of it is a
     * token) gives the prefix space's token, then one <0xXX> token per byte */
    assert_int_equal(make_tok("llama", (const char *const *)&big, &len, 1, &t), ES_OK);
    expect_abc(t, true);
    p = es_tok_piece(t, SPM_FIRST, &pl);
    assert_int_equal(pl, len);
    assert_memory_equal(p, big, len);
    int32_t *ids;
    size_t n;
    assert_int_equal(es_tok_encode(t, big, len, false, false, &ids, &n), ES_OK);
    assert_int_equal(n, 1 + len); /* the "▁" token, then every byte */
    assert_int_equal(ids[0], 256);
    for (size_t i = 0; i < len; i++)
        assert_int_equal(ids[1 + i], (uint8_t)big[i]);
    free(ids);
    es_tok_destroy(t);
    free(big);
}

/* A token of exactly ES_TOK_MAX_TOKEN_BYTES is accepted, one byte more is refused. */
static void test_token_limit(void **state)
{
    (void)state;
    size_t len = ES_TOK_MAX_TOKEN_BYTES;
    char *s = malloc(len + 1);
    assert_non_null(s);
    memset(s, 'x', len + 1);
    static const char *const models[] = {"gpt2", "llama"};
    for (size_t m = 0; m < T_LEN(models); m++) {
        es_tok *t;
        assert_int_equal(make_tok(models[m], (const char *const *)&s, &len, 1, &t), ES_OK);
        expect_abc(t, m == 1);
        size_t pl;
        es_tok_piece(t, m == 1 ? SPM_FIRST : BPE_FIRST, &pl);
        assert_int_equal(pl, len);
        es_tok_destroy(t);
        size_t over = len + 1;
        assert_int_equal(make_tok(models[m], (const char *const *)&s, &over, 1, &t), ES_E_FORMAT);
        const char *e = es_last_error();
        if (!strstr(e, "tokenizer.ggml.tokens[") || !strstr(e, "65537 bytes"))
            fail_msg("%s: message '%s'", models[m], e);
    }
    free(s);
}

/* Texts within the per-token limit whose pieces pass ES_TOK_MAX_PIECE_BYTES: 70 tokens of
 * 60,000 invalid bytes (19 bytes of piece each for byte-level BPE). SPM pieces are never
 * longer than the texts, so the same vocabulary is fine there. */
static void test_piece_limit(void **state)
{
    (void)state;
    enum { N = 70, LEN = 60000 };
    char *buf = malloc((size_t)N * LEN);
    assert_non_null(buf);
    memset(buf, 0xFF, (size_t)N * LEN);
    const char *toks[N];
    size_t lens[N];
    for (int i = 0; i < N; i++) {
        toks[i] = buf + (size_t)i * LEN;
        lens[i] = LEN;
        buf[(size_t)i * LEN] = (char)('A' + i); /* distinct texts */
    }
    es_tok *t;
    assert_int_equal(make_tok("gpt2", toks, lens, N, &t), ES_E_FORMAT);
    assert_non_null(strstr(es_last_error(), "detokenized"));
    assert_int_equal(make_tok("llama", toks, lens, N, &t), ES_OK);
    expect_abc(t, true);
    es_tok_destroy(t);
    free(buf);
}

/* All texts together over ES_TOK_MAX_TEXT_BYTES: 1,025 tokens of 64 KiB, as windows of one
 * pseudo-random buffer (distinct with overwhelming probability; a duplicate would be reported as
 * such and fail the test). */
static void test_text_limit(void **state)
{
    (void)state;
    const int n = (int)(ES_TOK_MAX_TEXT_BYTES / ES_TOK_MAX_TOKEN_BYTES) + 1;
    size_t len = ES_TOK_MAX_TOKEN_BYTES;
    char *buf = malloc(len + (size_t)n);
    const char **toks = calloc((size_t)n, sizeof(*toks));
    size_t *lens = calloc((size_t)n, sizeof(*lens));
    assert_non_null(buf);
    assert_non_null(toks);
    assert_non_null(lens);
    t_rng r = {7};
    for (size_t i = 0; i < len + (size_t)n; i++)
        buf[i] = (char)('a' + t_next(&r) % 26);
    for (int i = 0; i < n; i++)
        toks[i] = buf + i, lens[i] = len;
    es_tok *t;
    assert_int_equal(make_tok("llama", toks, lens, n, &t), ES_E_FORMAT);
    if (!strstr(es_last_error(), "token texts take more than"))
        fail_msg("message '%s'", es_last_error());
    /* two tokens fewer fit (with one fewer, the 260 fixed tokens pass the limit) */
    assert_int_equal(make_tok("llama", toks, lens, n - 2, &t), ES_OK);
    es_tok_destroy(t);
    free(lens);
    free(toks);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bomb),        cmocka_unit_test(test_long_token),
        cmocka_unit_test(test_token_limit), cmocka_unit_test(test_piece_limit),
        cmocka_unit_test(test_text_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
