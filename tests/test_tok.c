/*
 * Tokenizer tests.
 *
 * Reference ids: every vocabulary in $ESTREAM_DATA/vocab with .inp/.out files (llama.cpp's
 * test-tokenizer-0 data) must give exactly the expected ids for every input, tokenized as that
 * test does (add_special = false, parse_special = false; inputs separated by
 * "\n__ggml_vocab_test__\n"). One cmocka test per file; mismatches print input, expected, got.
 * Then: decode(encode(s)) == s on the same inputs and on WikiText, BOS/EOS handling,
 * parse_special and Phi-3's right-stripping special tokens, pieces, hand-checked gpt-neox ids,
 * llama3/qwen2 pre-tokenizer splits on a synthetic vocabulary, the model families' pre-tokenizers
 * (qwen2, lfm2, llama-bpe) and vocabularies against llama.cpp's ids on mixed inputs, random bytes (no crash, ids in
 * range), concurrent encoding, malformed metadata (ES_E_FORMAT naming the key) and a lossless
 * round trip of WikiText-2's test split with each vocabulary (bench/bench_tok times it).
 */
#include <dirent.h>
#include <pthread.h>
#include <time.h>

#include "t.h"

#include "gguf/gguf.h"
#include "tok/tok.h"
#include "tok/utf8.h"

/* ---------------------------------------------------------------------------------------------
 * helpers
 * ------------------------------------------------------------------------------------------- */

static char *vocab_path(const char *name)
{
    static char buf[8][1024];
    static int k;
    char *p = buf[k++ & 7];
    snprintf(p, 1024, "%s/vocab/%s", t_data_dir(), name);
    return p;
}

/* Opens a vocab file and builds its tokenizer; skips the test if the file is not there. */
static es_tok *open_tok(const char *name)
{
    const char *path = vocab_path(name);
    if (access(path, R_OK) != 0) {
        print_message("  %s not found: skipped\n", path);
        return NULL;
    }
    es_gguf *g = NULL;
    es_status st = es_gguf_open(path, &g);
    if (st != ES_OK) fail_msg("open %s: %s", path, es_last_error());
    es_tok *t = NULL;
    st = es_tok_create(g, &t);
    es_gguf_close(g); /* the tokenizer keeps copies */
    if (st != ES_OK) fail_msg("es_tok_create %s: %s", path, es_last_error());
    return t;
}

typedef struct idvec {
    int32_t *v;
    size_t n;
} idvec;

static idvec enc(const es_tok *t, const char *s, size_t len, bool add_special, bool parse_special)
{
    idvec r = {0};
    es_status st = es_tok_encode(t, s, len, add_special, parse_special, &r.v, &r.n);
    if (st != ES_OK) fail_msg("encode: %s", es_last_error());
    assert_non_null(r.v);
    return r;
}

static idvec encs(const es_tok *t, const char *s, bool add_special, bool parse_special)
{
    return enc(t, s, strlen(s), add_special, parse_special);
}

static void expect_ids(const es_tok *t, const char *s, bool add_special, bool parse_special,
                       const int32_t *want, size_t n_want)
{
    idvec r = encs(t, s, add_special, parse_special);
    bool ok = r.n == n_want;
    for (size_t i = 0; ok && i < n_want; i++)
        ok = r.v[i] == want[i];
    if (!ok) {
        print_error("input '%s': expected", s);
        for (size_t i = 0; i < n_want; i++)
            print_error(" %d", want[i]);
        print_error(", got");
        for (size_t i = 0; i < r.n; i++)
            print_error(" %d", r.v[i]);
        print_error("\n");
    }
    free(r.v);
    assert_true(ok);
}
#define EXPECT_IDS(t, s, add, parse, ...)                                                          \
    do {                                                                                           \
        static const int32_t want_[] = {__VA_ARGS__};                                              \
        expect_ids(t, s, add, parse, want_, sizeof(want_) / sizeof(want_[0]));                     \
    } while (0)

static char *decode(const es_tok *t, idvec r, size_t *len)
{
    char *s = NULL;
    es_status st = es_tok_decode(t, r.v, r.n, &s, len);
    if (st != ES_OK) fail_msg("decode: %s", es_last_error());
    return s;
}

/* Prints a string with non-printable bytes escaped (for failure messages). */
static void print_escaped(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            print_error("\\n");
        else if (c == '\t')
            print_error("\\t");
        else if (c < 0x20 || c == 0x7F)
            print_error("\\x%02x", c);
        else
            print_error("%c", c);
    }
}

/* ---------------------------------------------------------------------------------------------
 * llama.cpp's test-tokenizer-0 data
 * ------------------------------------------------------------------------------------------- */

typedef struct vtest {
    char *inp;   /* the input file; cases point into it */
    char **s;    /* [n] */
    size_t *len; /* [n] */
    idvec *want; /* [n] */
    size_t n;
} vtest;

static void vtest_free(vtest *v)
{
    for (size_t i = 0; i < v->n; i++)
        free(v->want[i].v);
    free(v->inp);
    free(v->s);
    free(v->len);
    free(v->want);
}

/* Reads test inputs (pi) and expected ids (po) the way test-tokenizer-0.cpp does. false if
 * they do not exist. */
static bool vtest_read_paths(const char *pi, const char *po, const char *name, vtest *v)
{
    memset(v, 0, sizeof(*v));
    size_t ni = 0, no = 0;
    v->inp = t_read_file(pi, &ni);
    char *out = t_read_file(po, &no);
    if (!v->inp || !out) {
        free(v->inp);
        free(out);
        v->inp = NULL;
        return false;
    }
    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t sl = sizeof(sep) - 1;
    size_t cap = 16;
    v->s = malloc(cap * sizeof(*v->s));
    v->len = malloc(cap * sizeof(*v->len));
    for (size_t pos = 0; pos < ni;) {
        if (v->n == cap) {
            cap *= 2;
            v->s = realloc(v->s, cap * sizeof(*v->s));
            v->len = realloc(v->len, cap * sizeof(*v->len));
        }
        char *m = memmem(v->inp + pos, ni - pos, sep, sl);
        size_t end = m ? (size_t)(m - v->inp) : ni;
        v->s[v->n] = v->inp + pos;
        v->len[v->n] = end - pos;
        v->n++;
        if (!m) break;
        pos = end + sl;
    }
    /* one line of space-separated ids per case */
    v->want = calloc(v->n, sizeof(*v->want));
    size_t line = 0;
    for (char *p = out; *p && line < v->n; line++) {
        char *e = strchr(p, '\n');
        if (e) *e = 0;
        idvec *w = &v->want[line];
        w->v = malloc((strlen(p) / 2 + 2) * sizeof(int32_t));
        for (char *q = p;;) {
            while (*q == ' ' || *q == '\r' || *q == '\t')
                q++;
            if (!*q) break;
            w->v[w->n++] = (int32_t)strtol(q, &q, 10);
        }
        p = e ? e + 1 : p + strlen(p);
    }
    if (line != v->n) fail_msg("%s: %zu inputs but %zu expected-id lines", name, v->n, line);
    free(out);
    return true;
}

/* NAME.inp / NAME.out of a vocabulary in the data folder. */
static bool vtest_read(const char *name, vtest *v)
{
    char pi[1100], po[1100];
    snprintf(pi, sizeof(pi), "%s.inp", vocab_path(name));
    snprintf(po, sizeof(po), "%s.out", vocab_path(name));
    return vtest_read_paths(pi, po, name, v);
}

/* Every input of v tokenized by t (add_special and parse_special off) equals llama.cpp's ids;
 * mismatches print the input, the expected and the actual ids. */
static void check_vtest(const char *name, const es_tok *t, const vtest *v)
{
    size_t pass = 0;
    for (size_t i = 0; i < v->n; i++) {
        idvec r = enc(t, v->s[i], v->len[i], false, false);
        bool ok = r.n == v->want[i].n;
        for (size_t k = 0; ok && k < r.n; k++)
            ok = r.v[k] == v->want[i].v[k];
        if (ok) {
            pass++;
        } else {
            print_error("%s case %zu: input '", name, i);
            print_escaped(v->s[i], v->len[i]);
            print_error("'\n  expected:");
            for (size_t k = 0; k < v->want[i].n; k++)
                print_error(" %d", v->want[i].v[k]);
            print_error("\n  got:     ");
            for (size_t k = 0; k < r.n; k++)
                print_error(" %d", r.v[k]);
            print_error("\n");
        }
        free(r.v);
    }
    print_message("  %s: %zu/%zu cases match llama.cpp\n", name, pass, v->n);
    assert_int_equal(pass, v->n);
}

static void test_vocab_file(void **state)
{
    const char *name = *state;
    vtest v;
    if (!vtest_read(name, &v)) skip();
    es_tok *t = open_tok(name);
    if (!t) {
        vtest_free(&v);
        skip();
    }
    check_vtest(name, t, &v);
    es_tok_destroy(t);
    vtest_free(&v);
}

/*
 * Pre-tokenizers of the model families that have no reference vocabulary in the data folder
 * (qwen2: Qwen3-MoE; lfm2: LFM2; llama-bpe: Llama-3-style BPE files): GPT-2's vocabulary with
 * tokenizer.ggml.pre set to each, written here by estream's GGUF writer. The expected ids in
 * tests/data/tok-PRE.*.out are llama.cpp's for the same file (tests/data/README.md), on
 * llama.cpp's own test inputs and on tests/data/tok-mixed.inp (mixed scripts, digits, code,
 * whitespace runs, emoji). The three pre-tokenizers give different ids from gpt-2's on 5-6 of
 * the 16 mixed inputs, and qwen2 from llama-bpe on 3. bailingmoe2 (Ling 2.0) is llama.cpp's
 * BAILINGMOE expression, which estream runs as qwen2's: its ids are llama.cpp's own for that name.
 */
static void test_family_pre_tokenizers(void **state)
{
    (void)state;
    const char *gpt2 = vocab_path("ggml-vocab-gpt-2.gguf");
    if (access(gpt2, R_OK) != 0) {
        print_message("  %s not found: skipped\n", gpt2);
        skip();
    }
    static const char *const pres[] = {"qwen2", "lfm2", "llama-bpe", "bailingmoe2"};
    for (size_t i = 0; i < T_LEN(pres); i++) {
        es_gguf *g = NULL;
        es_gguf_writer *w = NULL;
        const char *path = t_tmp_path("vocab-pre.gguf");
        assert_int_equal(es_gguf_open(gpt2, &g), ES_OK);
        assert_int_equal(es_gguf_writer_create(&w), ES_OK);
        assert_int_equal(es_gguf_writer_copy_kv(w, g, NULL), ES_OK);
        assert_int_equal(es_gguf_writer_set_str(w, "tokenizer.ggml.pre", pres[i]), ES_OK);
        assert_int_equal(es_gguf_writer_write(w, path), ES_OK);
        es_gguf_writer_destroy(w);
        es_gguf_close(g);
        assert_int_equal(es_gguf_open(path, &g), ES_OK);
        es_tok *t = NULL;
        assert_int_equal(es_tok_create(g, &t), ES_OK);
        es_gguf_close(g);
        unlink(path);
        char pi[1100], po[1100], name[128];
        const char *inputs[2][2] = {{"gpt2-inp", NULL}, {"mixed", "tests/data/tok-mixed.inp"}};
        char gpt2_inp[1100];
        snprintf(gpt2_inp, sizeof(gpt2_inp), "%s.inp", gpt2);
        inputs[0][1] = gpt2_inp;
        for (int k = 0; k < 2; k++) {
            snprintf(pi, sizeof(pi), "%s", inputs[k][1]);
            snprintf(po, sizeof(po), "tests/data/tok-%s.%s.out", pres[i], inputs[k][0]);
            snprintf(name, sizeof(name), "%s on %s", pres[i], inputs[k][0]);
            vtest v;
            if (!vtest_read_paths(pi, po, name, &v)) fail_msg("%s: %s or %s missing", name, pi, po);
            check_vtest(name, t, &v);
            vtest_free(&v);
        }
        es_tok_destroy(t);
    }
    /* the families' own vocabularies (Mixtral: llama-spm; DeepSeek-MoE: deepseek-llm) on the
     * mixed inputs too */
    static const char *const own[] = {"llama-spm", "deepseek-llm"};
    for (size_t i = 0; i < T_LEN(own); i++) {
        char file[64], po[128];
        snprintf(file, sizeof(file), "ggml-vocab-%s.gguf", own[i]);
        snprintf(po, sizeof(po), "tests/data/tok-%s.mixed.out", own[i]);
        es_tok *t = open_tok(file);
        assert_non_null(t);
        vtest v;
        if (!vtest_read_paths("tests/data/tok-mixed.inp", po, file, &v)) fail_msg("%s missing", po);
        check_vtest(file, t, &v);
        vtest_free(&v);
        es_tok_destroy(t);
    }
}

/* decode(encode(s)) == s for every test input, with every vocabulary (including gpt-neox). */
static void test_round_trip(void **state)
{
    (void)state;
    static const char *names[] = {"ggml-vocab-gpt-2.gguf",        "ggml-vocab-gpt-neox.gguf",
                                  "ggml-vocab-llama-spm.gguf",    "ggml-vocab-phi-3.gguf",
                                  "ggml-vocab-deepseek-llm.gguf", "ggml-vocab-deepseek-coder.gguf",
                                  "ggml-vocab-falcon.gguf",       "ggml-vocab-mpt.gguf",
                                  "ggml-vocab-refact.gguf",       "ggml-vocab-starcoder.gguf"};
    vtest v;
    /* the inputs are the same for every vocabulary */
    if (!vtest_read("ggml-vocab-gpt-2.gguf", &v)) skip();
    int n_files = 0;
    for (size_t f = 0; f < T_LEN(names); f++) {
        es_tok *t = open_tok(names[f]);
        if (!t) continue;
        n_files++;
        size_t bad = 0;
        for (size_t i = 0; i < v.n; i++) {
            idvec r = enc(t, v.s[i], v.len[i], false, false);
            size_t dl;
            char *d = decode(t, r, &dl);
            if (dl != v.len[i] || memcmp(d, v.s[i], dl) != 0) {
                bad++;
                print_error("%s: round trip of '", names[f]);
                print_escaped(v.s[i], v.len[i]);
                print_error("' gave '");
                print_escaped(d, dl);
                print_error("'\n");
            }
            free(d);
            free(r.v);
        }
        es_tok_destroy(t);
        assert_int_equal(bad, 0);
    }
    vtest_free(&v);
    if (n_files == 0) skip();
}

/* ---------------------------------------------------------------------------------------------
 * behaviour checks on the real vocabularies
 * ------------------------------------------------------------------------------------------- */

static void test_bos_eos(void **state)
{
    (void)state;
    es_tok *t = open_tok("ggml-vocab-llama-spm.gguf");
    if (!t) skip();
    assert_true(es_tok_add_bos(t));
    assert_false(es_tok_add_eos(t));
    assert_int_equal(es_tok_bos(t), 1);
    assert_int_equal(es_tok_eos(t), 2);
    EXPECT_IDS(t, "", true, false, 1); /* empty text: just BOS */
    idvec e = encs(t, "", false, false);
    assert_int_equal(e.n, 0);
    free(e.v);
    idvec a = encs(t, "Hello world", false, false), b = encs(t, "Hello world", true, false);
    assert_int_equal(b.n, a.n + 1);
    assert_int_equal(b.v[0], 1);
    assert_memory_equal(b.v + 1, a.v, a.n * sizeof(int32_t));
    free(a.v);
    free(b.v);
    es_tok_destroy(t);

    /* gpt-2: no BOS by default for byte-level BPE */
    t = open_tok("ggml-vocab-gpt-2.gguf");
    assert_non_null(t);
    assert_false(es_tok_add_bos(t));
    assert_int_equal(es_tok_bos(t), 50256);
    EXPECT_IDS(t, "Hello", true, false, 15496);
    es_tok_destroy(t);

    /* deepseek-llm asks for BOS in its metadata */
    t = open_tok("ggml-vocab-deepseek-llm.gguf");
    assert_non_null(t);
    assert_true(es_tok_add_bos(t));
    idvec c = encs(t, "Hello", true, false);
    assert_true(c.n >= 2);
    assert_int_equal(c.v[0], 100000);
    free(c.v);
    es_tok_destroy(t);
}

static void test_parse_special(void **state)
{
    (void)state;
    es_tok *t = open_tok("ggml-vocab-gpt-2.gguf");
    if (!t) skip();
    EXPECT_IDS(t, "<|endoftext|>", false, true, 50256);
    EXPECT_IDS(t, "Hello<|endoftext|> world", false, true, 15496, 50256, 995);
    /* without parse_special a CONTROL token's text is ordinary text */
    idvec r = encs(t, "<|endoftext|>", false, false);
    assert_true(r.n > 1);
    for (size_t i = 0; i < r.n; i++)
        assert_int_not_equal(r.v[i], 50256);
    free(r.v);
    es_tok_destroy(t);

    /* SPM: no space prefix after a special token's fragment boundary other than at start */
    t = open_tok("ggml-vocab-llama-spm.gguf");
    assert_non_null(t);
    EXPECT_IDS(t, "<s>", false, true, 1);
    idvec a = encs(t, "<s>Hello", false, true), b = encs(t, "Hello", false, false);
    assert_int_equal(a.n, b.n + 1);
    assert_int_equal(a.v[0], 1);
    assert_memory_equal(a.v + 1, b.v, b.n * sizeof(int32_t)); /* " Hello" after a special */
    free(a.v);
    free(b.v);
    es_tok_destroy(t);

    /* Phi-3: special tokens eat the spaces after them (RSTRIP), "<s>" does not */
    t = open_tok("ggml-vocab-phi-3.gguf");
    assert_non_null(t);
    idvec u = encs(t, "<|user|>\n  Hi", false, true), v = encs(t, "<|user|>Hi", false, true);
    assert_int_equal(u.n, v.n);
    assert_memory_equal(u.v, v.v, u.n * sizeof(int32_t));
    assert_int_equal(u.v[0], 32010);
    free(u.v);
    free(v.v);
    idvec s1 = encs(t, "<s> Hi", false, true), s2 = encs(t, "<s>Hi", false, true);
    assert_int_not_equal(s1.n == s2.n && !memcmp(s1.v, s2.v, s1.n * 4), 1);
    free(s1.v);
    free(s2.v);
    es_tok_destroy(t);
}

static void test_pieces(void **state)
{
    (void)state;
    es_tok *t = open_tok("ggml-vocab-gpt-2.gguf");
    if (!t) skip();
    size_t n;
    const char *p = es_tok_piece(t, 995, &n); /* "Ġworld" */
    assert_non_null(p);
    assert_int_equal(n, 6);
    assert_memory_equal(p, " world", 6);
    p = es_tok_piece(t, 198, &n); /* "Ċ" */
    assert_int_equal(n, 1);
    assert_int_equal(p[0], '\n');
    p = es_tok_piece(t, 50256, &n);
    assert_int_equal(n, 13);
    assert_memory_equal(p, "<|endoftext|>", 13);
    assert_null(es_tok_piece(t, -1, &n));
    assert_null(es_tok_piece(t, es_tok_n_vocab(t), &n));
    int32_t bad = es_tok_n_vocab(t);
    char *s = NULL;
    size_t sl;
    assert_int_equal(es_tok_decode(t, &bad, 1, &s, &sl), ES_E_INVAL);
    assert_null(s);
    es_tok_destroy(t);

    t = open_tok("ggml-vocab-llama-spm.gguf");
    assert_non_null(t);
    p = es_tok_piece(t, 13, &n); /* <0x0A> */
    assert_int_equal(n, 1);
    assert_int_equal(p[0], '\n');
    p = es_tok_piece(t, 15043, &n); /* "▁Hello" */
    assert_int_equal(n, 6);
    assert_memory_equal(p, " Hello", 6);
    es_tok_destroy(t);
}

/* gpt-neox has no expected-ids file: ids checked by hand against its vocabulary. It has no
 * tokenizer.ggml.pre, so llama.cpp's default pre-tokenizer applies, and USER_DEFINED tokens
 * for runs of spaces are split out before BPE even without parse_special. */
static void test_gpt_neox(void **state)
{
    (void)state;
    es_tok *t = open_tok("ggml-vocab-gpt-neox.gguf");
    if (!t) skip();
    EXPECT_IDS(t, "Hello world", false, false, 12092, 1533);
    EXPECT_IDS(t, "Hello, world!", false, false, 12092, 13, 1533, 2);
    EXPECT_IDS(t, "a  b", false, false, 66, 50276, 67);  /* "  " is a USER_DEFINED token */
    EXPECT_IDS(t, "a   b", false, false, 66, 50275, 67); /* "   " likewise */
    EXPECT_IDS(t, "\n", false, false, 187);
    EXPECT_IDS(t, "123", false, false, 10683);
    EXPECT_IDS(t, "<|endoftext|>", false, true, 0);
    assert_false(es_tok_add_bos(t));
    es_tok_destroy(t);
}

/* The decoder on each way a sequence can be broken, against UTF-8's definition (RFC 3629) with
 * llama.cpp's leniency (utf8.h): a lead byte whose continuation bytes are missing or wrong, in any
 * position, gives U+FFFD and consumes one byte; overlong forms and surrogates decode. */
static void test_utf8_decode(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        size_t n, used;
        uint32_t cp;
    } cases[] = {
        {"A", 1, 1, 0x41},
        {"\xC3\xA9", 2, 2, 0xE9},
        {"\xE2\x82\xAC", 3, 3, 0x20AC},
        {"\xF0\x9F\x98\x80", 4, 4, 0x1F600},
        {"\xF4\x8F\xBF\xBF", 4, 4, 0x10FFFF},
        {"\xC0\xAF", 2, 2, 0x2F},        /* overlong '/', accepted as llama.cpp does */
        {"\xED\xA0\x80", 3, 3, 0xD800}, /* a surrogate, likewise */
        {"\x80", 1, 1, ES_UTF8_REPLACEMENT},
        {"\xBF\x80", 2, 1, ES_UTF8_REPLACEMENT},
        {"\xC3\x28", 2, 1, ES_UTF8_REPLACEMENT},
        {"\xC3", 1, 1, ES_UTF8_REPLACEMENT},
        {"\xE2\x28\xAC", 3, 1, ES_UTF8_REPLACEMENT},
        {"\xE2\x82\x28", 3, 1, ES_UTF8_REPLACEMENT},
        {"\xE2\x82", 2, 1, ES_UTF8_REPLACEMENT},
        {"\xF0\x28\x98\x80", 4, 1, ES_UTF8_REPLACEMENT},
        {"\xF0\x9F\x28\x80", 4, 1, ES_UTF8_REPLACEMENT},
        {"\xF0\x9F\x98\x41", 4, 1, ES_UTF8_REPLACEMENT},
        {"\xF0\x9F\x98", 3, 1, ES_UTF8_REPLACEMENT},
        {"\xF8\x88\x80\x80\x80", 5, 1, ES_UTF8_REPLACEMENT},
        {"\xFF", 1, 1, ES_UTF8_REPLACEMENT},
    };
    for (size_t i = 0; i < T_LEN(cases); i++) {
        size_t used = 99;
        const uint32_t cp = es_utf8_decode((const uint8_t *)cases[i].s, cases[i].n, &used);
        if (cp != cases[i].cp || used != cases[i].used)
            fail_msg("case %zu: U+%04X using %zu bytes, want U+%04X using %zu", i, (unsigned)cp,
                     used, (unsigned)cases[i].cp, cases[i].used);
        uint8_t out[4]; /* the first five, canonical forms, encode back to their bytes */
        if (i < 5 && (es_utf8_encode(cp, out) != used || memcmp(out, cases[i].s, used)))
            fail_msg("case %zu: U+%04X does not encode back to its bytes", i, (unsigned)cp);
    }
}

/* Random bytes (mostly invalid UTF-8): no crash, ids in range, with every tokenizer kind. */
static void test_random_bytes(void **state)
{
    (void)state;
    static const char *names[] = {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf",
                                  "ggml-vocab-deepseek-llm.gguf", "ggml-vocab-deepseek-coder.gguf",
                                  "ggml-vocab-falcon.gguf"};
    t_rng rng = {42};
    int n_files = 0;
    for (size_t f = 0; f < T_LEN(names); f++) {
        es_tok *t = open_tok(names[f]);
        if (!t) continue;
        n_files++;
        for (int it = 0; it < 200; it++) {
            char buf[300];
            size_t n = t_next(&rng) % sizeof(buf);
            for (size_t i = 0; i < n; i++) {
                uint64_t r = t_next(&rng);
                /* mix ASCII, spaces and high bytes so words, runs and bad UTF-8 all occur */
                buf[i] = (char)(r % 4 == 0 ? ' ' : r % 4 == 1 ? 'a' + (r >> 8) % 26 : (r >> 16));
            }
            for (int special = 0; special < 2; special++) {
                idvec r = enc(t, buf, n, special, special);
                for (size_t i = 0; i < r.n; i++)
                    assert_true(r.v[i] >= 0 && r.v[i] < es_tok_n_vocab(t));
                size_t dl;
                free(decode(t, r, &dl));
                free(r.v);
            }
        }
        es_tok_destroy(t);
    }
    if (n_files == 0) skip();
}

/* Several threads encode with one tokenizer at once and must agree with a serial run. */
typedef struct thr_arg {
    const es_tok *t;
    const vtest *v;
    const idvec *want;
    int bad;
} thr_arg;

static void *thr_main(void *p)
{
    thr_arg *a = p;
    for (int rep = 0; rep < 20; rep++)
        for (size_t i = 0; i < a->v->n; i++) {
            int32_t *ids;
            size_t n;
            if (es_tok_encode(a->t, a->v->s[i], a->v->len[i], true, true, &ids, &n) != ES_OK ||
                n != a->want[i].n || memcmp(ids, a->want[i].v, n * sizeof(int32_t)) != 0)
                a->bad++;
            free(ids);
        }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    vtest v;
    if (!vtest_read("ggml-vocab-deepseek-llm.gguf", &v)) skip();
    es_tok *t = open_tok("ggml-vocab-deepseek-llm.gguf");
    assert_non_null(t);
    idvec *want = calloc(v.n, sizeof(*want));
    for (size_t i = 0; i < v.n; i++)
        want[i] = enc(t, v.s[i], v.len[i], true, true);
    pthread_t th[4];
    thr_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thr_arg){t, &v, want, 0};
        assert_int_equal(pthread_create(&th[i], NULL, thr_main, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].bad, 0);
    }
    for (size_t i = 0; i < v.n; i++)
        free(want[i].v);
    free(want);
    es_tok_destroy(t);
    vtest_free(&v);
}

/* ---------------------------------------------------------------------------------------------
 * synthetic vocabularies (GGUF writer)
 * ------------------------------------------------------------------------------------------- */

/* A small byte-level vocabulary: the 256 GPT-2 byte characters, then extra tokens. */
typedef struct synth {
    const char *model;  /* tokenizer.ggml.model, NULL = leave out */
    const char *pre;    /* tokenizer.ggml.pre, NULL = leave out */
    const char **extra; /* tokens after the 256 byte tokens */
    int n_extra;
    const char **merges; /* NULL = leave the key out */
    int n_merges;
    bool no_tokens; /* leave tokenizer.ggml.tokens out */
    bool tokens_not_strings;
    int64_t bos;      /* < 0: leave out */
    bool short_types; /* token_type with too few entries */
    bool short_scores;
} synth;

/* Writes the vocabulary to a temp file and runs es_tok_create on it. */
static es_status synth_create(const synth *s, es_tok **out)
{
    static char bytes[256][4];
    const char *toks[512];
    int n = 0;
    for (int b = 0; b < 256; b++) {
        t_gpt2_char(b, bytes[b]);
        toks[n++] = bytes[b];
    }
    for (int i = 0; i < s->n_extra; i++)
        toks[n++] = s->extra[i];
    es_gguf_writer *w;
    assert_int_equal(es_gguf_writer_create(&w), ES_OK);
    if (s->model)
        assert_int_equal(es_gguf_writer_set_str(w, "tokenizer.ggml.model", s->model), ES_OK);
    if (s->pre) assert_int_equal(es_gguf_writer_set_str(w, "tokenizer.ggml.pre", s->pre), ES_OK);
    if (s->tokens_not_strings) {
        int32_t x[3] = {1, 2, 3};
        assert_int_equal(es_gguf_writer_set_arr(w, "tokenizer.ggml.tokens", ES_GGUF_INT32, x, 3),
                         ES_OK);
    } else if (!s->no_tokens) {
        assert_int_equal(
            es_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, (uint64_t)n), ES_OK);
    }
    int32_t types[512];
    float scores[512];
    for (int i = 0; i < n; i++)
        types[i] = 1, scores[i] = (float)-i;
    assert_int_equal(es_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", ES_GGUF_INT32, types,
                                            (uint64_t)(s->short_types ? n - 1 : n)),
                     ES_OK);
    if (s->short_scores)
        assert_int_equal(
            es_gguf_writer_set_arr(w, "tokenizer.ggml.scores", ES_GGUF_FLOAT32, scores, 10), ES_OK);
    if (s->merges)
        assert_int_equal(es_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", s->merges, NULL,
                                                    (uint64_t)s->n_merges),
                         ES_OK);
    if (s->bos >= 0)
        assert_int_equal(es_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)s->bos),
                         ES_OK);
    const char *path = t_tmp_path("tok.gguf");
    assert_int_equal(es_gguf_writer_write(w, path), ES_OK);
    es_gguf_writer_destroy(w);
    es_gguf *g;
    assert_int_equal(es_gguf_open(path, &g), ES_OK);
    *out = NULL;
    es_status st = es_tok_create(g, out);
    es_gguf_close(g);
    unlink(path);
    return st;
}

static void expect_format_error(const synth *s, es_status want, const char *needle)
{
    es_tok *t = (es_tok *)1;
    es_status st = synth_create(s, &t);
    if (st != want || !strstr(es_last_error(), needle))
        fail_msg("expected status %d mentioning '%s', got %d: '%s'", want, needle, st,
                 es_last_error());
    assert_null(t);
}

static void test_malformed(void **state)
{
    (void)state;
    static const char *ok_merges[] = {"a b"};
    static const char *extra_ab[] = {"ab"};
    synth base = {.model = "gpt2",
                  .pre = "gpt-2",
                  .extra = extra_ab,
                  .n_extra = 1,
                  .merges = ok_merges,
                  .n_merges = 1,
                  .bos = -1};
    es_tok *t;
    assert_int_equal(synth_create(&base, &t), ES_OK); /* the base case is valid */
    EXPECT_IDS(t, "ab", false, false, 256);
    es_tok_destroy(t);

    synth s = base;
    s.model = NULL;
    expect_format_error(&s, ES_E_FORMAT, "tokenizer.ggml.model");
    s = base;
    s.model = "bert";
    expect_format_error(&s, ES_E_UNSUPPORTED, "tokenizer.ggml.model");
    s = base;
    s.no_tokens = true;
    expect_format_error(&s, ES_E_FORMAT, "tokenizer.ggml.tokens");
    s = base;
    s.tokens_not_strings = true;
    expect_format_error(&s, ES_E_FORMAT, "tokenizer.ggml.tokens");
    static const char *dup[] = {"ab", "ab"};
    s = base;
    s.extra = dup;
    s.n_extra = 2;
    expect_format_error(&s, ES_E_FORMAT, "duplicate");
    static const char *unknown_merge[] = {"a b", "x zz"};
    s = base;
    s.merges = unknown_merge;
    s.n_merges = 2;
    expect_format_error(&s, ES_E_FORMAT, "tokenizer.ggml.merges[1]");
    static const char *bad_merge[] = {"ab"};
    s = base;
    s.merges = bad_merge;
    expect_format_error(&s, ES_E_FORMAT, "tokenizer.ggml.merges[0]");
    s = base;
    s.merges = NULL;
    expect_format_error(&s, ES_E_FORMAT, "tokenizer.ggml.merges");
    s = base;
    s.bos = 100000;
    expect_format_error(&s, ES_E_FORMAT, "tokenizer.ggml.bos_token_id");
    s = base;
    s.short_types = true;
    expect_format_error(&s, ES_E_FORMAT, "tokenizer.ggml.token_type");
    s = base;
    s.short_scores = true;
    expect_format_error(&s, ES_E_FORMAT, "tokenizer.ggml.scores");

    /* an empty token list */
    es_gguf_writer *w;
    assert_int_equal(es_gguf_writer_create(&w), ES_OK);
    assert_int_equal(es_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama"), ES_OK);
    assert_int_equal(es_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", NULL, NULL, 0), ES_OK);
    const char *path = t_tmp_path("empty.gguf");
    assert_int_equal(es_gguf_writer_write(w, path), ES_OK);
    es_gguf_writer_destroy(w);
    es_gguf *g;
    assert_int_equal(es_gguf_open(path, &g), ES_OK);
    assert_int_equal(es_tok_create(g, &t), ES_E_FORMAT);
    assert_non_null(strstr(es_last_error(), "tokenizer.ggml.tokens"));
    assert_null(t);
    es_gguf_close(g);
    unlink(path);

    /* an unknown pre-tokenizer is not an error: llama.cpp's default one is used */
    s = base;
    s.pre = "no-such-pre";
    assert_int_equal(synth_create(&s, &t), ES_OK);
    EXPECT_IDS(t, "ab", false, false, 256);
    es_tok_destroy(t);
}

/* Pre-tokenizer splits of llama3 and qwen2 (no reference vocabulary here): the vocabulary has
 * whole pre-token words as tokens, which llama3's ignore_merges rule emits directly, so the
 * ids show where the text was split. */
static void test_llama3_split(void **state)
{
    (void)state;
    /* 256 + i */
    static const char *words[] = {"Hello",
                                  "\xC4\xA0world",
                                  "'s",
                                  "'S",
                                  "123",
                                  "45",
                                  "\xC4\xA0!!",
                                  "\xC4\x8A\xC4\x8A",
                                  "\xC4\xA0\xC4\xA0",
                                  "!!\xC4\x8A",
                                  "\xC4\xA0\x31\x32" /* "Ġ12" */};
    static const char *no_merges[] = {"a b"};
    synth s = {.model = "gpt2",
               .pre = "llama3",
               .extra = words,
               .n_extra = (int)T_LEN(words),
               .merges = no_merges,
               .n_merges = 1,
               .bos = -1};
    es_tok *t;
    assert_int_equal(synth_create(&s, &t), ES_OK);
    /* llama3 asks for BOS by default; BPE's default BOS id 11 exists in this vocabulary */
    assert_true(es_tok_add_bos(t));
    assert_int_equal(es_tok_bos(t), 11);
    /* byte tokens have the byte's value as id. "'s"/"'S" are contractions, digits go in
     * threes, a space never joins digits, punctuation takes trailing newlines */
    EXPECT_IDS(t, "Hello world's", false, false, 256, 257, 258);
    EXPECT_IDS(t, "world'S", false, false, 'w', 'o', 'r', 'l', 'd', 259);
    EXPECT_IDS(t, "12345", false, false, 260, 261);
    EXPECT_IDS(t, " 12", false, false, ' ', '1', '2');
    EXPECT_IDS(t, " !!", false, false, 262);
    EXPECT_IDS(t, "!!\n", false, false, 265);
    EXPECT_IDS(t, "\n\n", false, false, 263);
    EXPECT_IDS(t, "Hello  world", false, false, 256, ' ', 257);
    EXPECT_IDS(t, "Hello", true, false, 11, 256);
    es_tok_destroy(t);

    /* qwen2: single digits, no ignore_merges (so no whole-word shortcut), no BOS */
    s.pre = "qwen2";
    assert_int_equal(synth_create(&s, &t), ES_OK);
    assert_false(es_tok_add_bos(t));
    EXPECT_IDS(t, "12345", false, false, '1', '2', '3', '4', '5');
    EXPECT_IDS(t, "'s", false, false, '\'', 's');
    es_tok_destroy(t);

    /* gpt-2: " 12" is one pre-token; with the merge "Ġ 12" and "1 2" it becomes one token */
    static const char *m2[] = {"1 2", "\xC4\xA0 12"};
    static const char *w2[] = {"12", "\xC4\xA0\x31\x32" /* "Ġ12" */};
    synth g2 = {.model = "gpt2",
                .pre = "gpt-2",
                .extra = w2,
                .n_extra = 2,
                .merges = m2,
                .n_merges = 2,
                .bos = -1};
    assert_int_equal(synth_create(&g2, &t), ES_OK);
    EXPECT_IDS(t, " 12", false, false, 257);
    EXPECT_IDS(t, "12 1", false, false, 256, ' ', '1');
    es_tok_destroy(t);
}

/* EXAONE-MoE's pre-tokenizer: words joined by single spaces are one pre-token (so a merge
 * across them applies), letters keep their combining marks, a punctuation run takes one line
 * break. The ids are llama.cpp's (3f545bec, llama_tokenize on the same 268-token vocabulary
 * written by gguf-py), which differ from qwen2's on every line but "the  cat". */
static void test_exaone_moe_split(void **state)
{
    (void)state;
    static const char *words[] = {"th", "the", "\xC4\xA0" "c", "\xC4\xA0" "ca", "\xC4\xA0" "cat",
                                  "the\xC4\xA0" "cat", "\xC3\x8C\xC4\xA3", "e\xC3\x8C\xC4\xA3",
                                  "!/", "!\xC4\x8A", "\xC4\x8A\xC4\x8A", "!\xC4\x8A\xC4\x8A"};
    static const char *merges[] = {"t h", "th e", "\xC4\xA0 c", "\xC4\xA0" "c a", "\xC4\xA0" "ca t",
                                   "the \xC4\xA0" "cat", "\xC3\x8C \xC4\xA3", "e \xC3\x8C\xC4\xA3", "! /",
                                   "! \xC4\x8A", "\xC4\x8A \xC4\x8A", "!\xC4\x8A \xC4\x8A"};
    synth s = {.model = "gpt2", .pre = "exaone-moe", .extra = words,
               .n_extra = (int)T_LEN(words), .merges = merges, .n_merges = (int)T_LEN(merges),
               .bos = -1};
    es_tok *t;
    assert_int_equal(synth_create(&s, &t), ES_OK);
    EXPECT_IDS(t, "the cat", false, false, 261);
    EXPECT_IDS(t, "the  cat", false, false, 257, 32, 260);
    EXPECT_IDS(t, "e\xCC\x81", false, false, 263); /* e and U+0301 */
    EXPECT_IDS(t, "hi!\n\nx", false, false, 104, 105, 265, 10, 120);
    EXPECT_IDS(t, "the cat sat", false, false, 261, 32, 115, 97, 116);
    EXPECT_IDS(t, "the\xC2\xA0" "cat", false, false, 257, 194, 160, 99, 97, 116); /* NBSP */
    EXPECT_IDS(t, "a the cat", false, false, 97, 32, 261);
    es_tok_destroy(t);
    s.pre = "qwen2"; /* the same vocabulary split as qwen2 splits */
    assert_int_equal(synth_create(&s, &t), ES_OK);
    EXPECT_IDS(t, "the cat", false, false, 257, 260);
    EXPECT_IDS(t, "e\xCC\x81", false, false, 101, 262);
    EXPECT_IDS(t, "hi!\n\nx", false, false, 104, 105, 267, 120);
    es_tok_destroy(t);
}

/* Every pre-tokenizer compiles and, on a vocabulary of the 256 byte tokens alone, gives back
 * exactly the input bytes (byte-level BPE is lossless whatever the split). */
static void test_all_pre(void **state)
{
    (void)state;
    static const char *pres[] = {"default",     "llama3",    "dbrx",         "gpt-2",
                                 "olmo",        "falcon",    "starcoder",    "refact",
                                 "qwen2",       "stablelm2", "deepseek-llm", "deepseek-coder",
                                 "deepseek-v3", "gpt-4o",    "command-r",    "smollm",
                                 "exaone-moe",  "bailingmoe2"};
    static const char *m[] = {"a b"};
    static const char *text = "Hello, y'all! How are you \xF0\x9F\x98\x81 ?\xE6\x88\x91\xE6\x83\xB3"
                              "\xE5\x9C\xA8"
                              "apple\xE5\xB7\xA5\xE4\xBD\x9C"
                              "1314151\xE5\xA4\xA9"
                              "\xEF\xBD\x9E  \n\n\t x\xC2\x85y\xE3\x80\x80z 333333 'S 'll";
    for (size_t i = 0; i < T_LEN(pres); i++) {
        synth s = {.model = "gpt2", .pre = pres[i], .merges = m, .n_merges = 1, .bos = -1};
        es_tok *t;
        if (synth_create(&s, &t) != ES_OK) fail_msg("pre %s: %s", pres[i], es_last_error());
        idvec r = encs(t, text, false, false);
        if (r.n != strlen(text)) {
            print_error("pre %s: %zu ids for %zu bytes:", pres[i], r.n, strlen(text));
            for (size_t k = 0; k < r.n; k++)
                print_error(" %d", r.v[k]);
            print_error("\n");
        }
        assert_int_equal(r.n, strlen(text)); /* one byte token per byte */
        for (size_t k = 0; k < r.n; k++)
            assert_int_equal(r.v[k], (uint8_t)text[k]);
        free(r.v);
        es_tok_destroy(t);
    }
}

/* ---------------------------------------------------------------------------------------------
 * a whole text (its speed is measured by bench/bench_tok, never asserted here)
 * ------------------------------------------------------------------------------------------- */

static void test_wikitext_roundtrip(void **state)
{
    (void)state;
    char path[1024];
    snprintf(path, sizeof(path), "%s/text/wikitext-2-test.txt", t_data_dir());
    size_t n = 0;
    char *text = t_read_file(path, &n);
    if (!text) skip();
    static const char *names[] = {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf",
                                  "ggml-vocab-deepseek-llm.gguf", "ggml-vocab-gpt-neox.gguf",
                                  "ggml-vocab-falcon.gguf"};
    for (size_t f = 0; f < T_LEN(names); f++) {
        es_tok *t = open_tok(names[f]);
        if (!t) continue;
        idvec r = enc(t, text, n, false, false);
        assert_true(r.n > n / 8); /* a real tokenization, not a byte-per-id fallback or nothing */
        assert_true(r.n < n);
        size_t dl;
        char *d = decode(t, r, &dl);
        assert_int_equal(dl, n); /* WikiText is valid UTF-8: lossless */
        assert_memory_equal(d, text, n);
        free(d);
        free(r.v);
        es_tok_destroy(t);
    }
    free(text);
}

/* ---------------------------------------------------------------------------------------------
 * main
 * ------------------------------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(void)
{
    /* one test per vocabulary with expected ids */
    char *files[64];
    int n_files = 0;
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/vocab", t_data_dir());
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) && n_files < 64) {
            size_t l = strlen(e->d_name);
            if (l > 5 && !strcmp(e->d_name + l - 5, ".gguf")) {
                char out[1400];
                snprintf(out, sizeof(out), "%s/%s.out", dir, e->d_name);
                if (access(out, R_OK) == 0) files[n_files++] = strdup(e->d_name);
            }
        }
        closedir(d);
    }
    qsort(files, (size_t)n_files, sizeof(files[0]), cmp_str);

    static const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_round_trip),     cmocka_unit_test(test_bos_eos),
        cmocka_unit_test(test_parse_special),  cmocka_unit_test(test_pieces),
        cmocka_unit_test(test_gpt_neox),       cmocka_unit_test(test_random_bytes),
        cmocka_unit_test(test_threads),        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_llama3_split),   cmocka_unit_test(test_all_pre),
        cmocka_unit_test(test_exaone_moe_split), cmocka_unit_test(test_utf8_decode),
        cmocka_unit_test(test_family_pre_tokenizers),
        cmocka_unit_test(test_wikitext_roundtrip),
    };
    size_t n = (size_t)n_files + T_LEN(fixed);
    struct CMUnitTest *tests = calloc(n, sizeof(*tests));
    for (int i = 0; i < n_files; i++) {
        tests[i].name = files[i];
        tests[i].test_func = test_vocab_file;
        tests[i].initial_state = files[i];
    }
    memcpy(tests + n_files, fixed, sizeof(fixed));
    int rc = _cmocka_run_group_tests("test_tok", tests, n, NULL, NULL);
    for (int i = 0; i < n_files; i++)
        free(files[i]);
    free(tests);
    return rc;
}
