/*
 * The estream command line, end to end: every command's --help, the outputs users script
 * against (--json, --dump-logits, tokenize ids), and bad input answered by one line on stderr
 * and a non-zero exit, with no partial output file left behind.
 */
#include "t.h"

#include "estream.h"
#include "gguf/gguf.h"

#define DATA "tests/data/"

/* Runs "estream ARGS" capturing stdout (and stderr into err when given). Returns the exit code. */
static int run(const char *args, char *out, size_t cap, char *err, size_t ecap)
{
    char cmd[4096];
    const char *errf = t_tmp_path("stderr.txt");
    snprintf(cmd, sizeof(cmd), "%s %s 2>%s", t_bin(), args, errf);
    int rc = t_run(cmd, out, cap);
    if (err) {
        size_t len = 0;
        char *e = t_read_file(errf, &len);
        snprintf(err, ecap, "%s", e ? e : "");
        free(e);
    }
    unlink(errf);
    return rc;
}

/* An error is one line on stderr starting with "estream: ", and a non-zero exit. */
static void expect_error(const char *args, const char *needle)
{
    char out[4096], err[4096];
    int rc = run(args, out, sizeof(out), err, sizeof(err));
    if (rc == 0 || rc >= 128) fail_msg("'%s': exit %d, want a clean non-zero exit", args, rc);
    if (strncmp(err, "estream: ", 9) != 0) fail_msg("'%s': stderr '%s'", args, err);
    const char *nl = strchr(err, '\n');
    if (!nl || nl[1] != 0) fail_msg("'%s': stderr is not one line: '%s'", args, err);
    if (needle && !strstr(err, needle)) fail_msg("'%s': '%s' lacks '%s'", args, err, needle);
}

static void test_help(void **state)
{
    (void)state;
    const char *cmds[] = {"info", "tokenize", "synth", "prefill", "ppl", "bench", "pack"};
    char out[8192];
    for (size_t i = 0; i < T_LEN(cmds); i++) {
        char args[64];
        snprintf(args, sizeof(args), "%s --help", cmds[i]);
        assert_int_equal(run(args, out, sizeof(out), NULL, 0), 0);
        assert_non_null(strstr(out, "usage: estream"));
    }
    assert_int_equal(run("--help", out, sizeof(out), NULL, 0), 0);
    assert_non_null(strstr(out, "commands:"));
}

static void test_bad_input(void **state)
{
    (void)state;
    expect_error("frobnicate", "unknown command");
    expect_error("prefill -m /nonexistent.gguf -p hi", "/nonexistent.gguf");
    expect_error("prefill -m " DATA "tiny-f32.gguf", "no prompt");
    expect_error("prefill -m " DATA "tiny-f32.gguf -p ''", "empty");
    expect_error("prefill -m " DATA "tiny-f32.gguf -p hi --top 0", "--top");
    expect_error("prefill -m " DATA "tiny-f32.gguf -p hi --bogus", "unknown option");
    expect_error("prefill -m " DATA "tiny-f32.gguf -p hi -t", "needs a value");
    expect_error("prefill -m " DATA "tiny-f32.gguf -p hi -t abc", "integer");
    expect_error("ppl -m " DATA "tiny-f32.gguf -f " DATA "tiny-ids.txt -c 512", "needs at least");
    expect_error("synth --preset huge -o x.gguf", "unknown preset");
    expect_error("synth --preset tiny --type q2_k -o x.gguf", "unknown weight type");
    expect_error("info -m " DATA "README.md", "GGUF");
    expect_error("bench -m " DATA "tiny-f32.gguf -p 128,x", "integer");
    /* a prompt over the context (tiny: 512 tokens) */
    const char *ids = t_tmp_path("ids.txt");
    FILE *f = fopen(ids, "w");
    for (int i = 0; i < 600; i++) fprintf(f, "%d ", i % 300);
    fclose(f);
    char args[1024];
    snprintf(args, sizeof(args), "prefill -m %s --ids %s", DATA "tiny-f32.gguf", ids);
    expect_error(args, "context");
    /* ids out of the vocabulary, and garbage in an ids file */
    f = fopen(ids, "w");
    fprintf(f, "1 2 99999\n");
    fclose(f);
    expect_error(args, "outside the vocabulary");
    f = fopen(ids, "w");
    fprintf(f, "1 2 x3\n");
    fclose(f);
    expect_error(args, "not an integer");
    unlink(ids);
}

/* -t takes exactly what the library takes (1..ES_MAX_THREADS), other flags refuse garbage with
 * one line, and the default thread count works whatever the CPU count. */
static void test_flags(void **state)
{
    (void)state;
    char range[64], out[8192];
    snprintf(range, sizeof(range), "[1, %d]", ES_MAX_THREADS);
    const char *cmds[] = {"prefill -m " DATA "tiny-f32.gguf -p hi",
                          "bench -m " DATA "tiny-f32.gguf -p 8 -r 1",
                          "ppl -m " DATA "tiny-f32.gguf -f " DATA "ppl-text.txt -c 8"};
    for (size_t i = 0; i < T_LEN(cmds); i++) {
        char args[512];
        snprintf(args, sizeof(args), "%s -t 0", cmds[i]);
        expect_error(args, range);
        snprintf(args, sizeof(args), "%s -t %d", cmds[i], ES_MAX_THREADS + 1);
        expect_error(args, range);
        snprintf(args, sizeof(args), "%s -t -2", cmds[i]);
        expect_error(args, range);
    }
    char args[512];
    snprintf(args, sizeof(args), "prefill -m %s -p hi -t %d --json", DATA "tiny-f32.gguf",
             ES_MAX_THREADS);
    assert_int_equal(run(args, out, sizeof(out), NULL, 0), 0);
    /* the default: online CPUs, at most ES_MAX_THREADS */
    assert_int_equal(run("prefill -m " DATA "tiny-f32.gguf -p hi --json", out, sizeof(out), NULL, 0), 0);
    const char *t = strstr(out, "\"n_threads\": ");
    assert_non_null(t);
    int n = atoi(t + 13);
    assert_true(n >= 1 && n <= ES_MAX_THREADS);

    expect_error("ppl -m " DATA "tiny-f32.gguf -f " DATA "ppl-text.txt -c -5", "[4, ");
    expect_error("ppl -m " DATA "tiny-f32.gguf -f " DATA "ppl-text.txt -c", "needs a value");
    expect_error("ppl -m " DATA "tiny-f32.gguf -f " DATA "ppl-text.txt --chunks 0", "--chunks");
    expect_error("bench -m " DATA "tiny-f32.gguf -r abc", "-r");
    expect_error("bench -m " DATA "tiny-f32.gguf -p ''", "bad -p list");
    expect_error("bench -m " DATA "tiny-f32.gguf -p 16,,32", "bad -p list");
    expect_error("bench -m " DATA "tiny-f32.gguf -p 1024", "exceeds the model's context");
    expect_error("synth --preset tiny --seed -3 -o x.gguf", "--seed");
    expect_error("prefill -m '' -p hi", "no model");
    expect_error("prefill -m " DATA "tiny-f32.gguf -p hi --top -1", "--top");
    /* one "synth:" prefix, not two */
    char err[4096];
    assert_int_not_equal(run("synth --arch llama --preset tiny -o x.gguf", out, sizeof(out), err,
                             sizeof(err)), 0);
    assert_null(strstr(err, "synth: synth:"));
    assert_non_null(strstr(err, "unknown architecture 'llama'"));
    /* the default length list is capped at the context (tiny: 512) instead of failing */
    assert_int_equal(run("bench -m " DATA "tiny-f32.gguf -r 1 --json", out, sizeof(out), NULL, 0), 0);
    assert_non_null(strstr(out, "\"n_prompt\": 512"));
    assert_null(strstr(out, "\"n_prompt\": 1024"));
}

/* The reference path uses no SIMD kernel table and one thread: its outputs say so. */
static void test_reference_output(void **state)
{
    (void)state;
    char out[8192];
    assert_int_equal(run("prefill -m " DATA "tiny-f32.gguf -p hi --reference --json -t 4", out,
                         sizeof(out), NULL, 0), 0);
    assert_non_null(strstr(out, "\"path\": \"reference\""));
    assert_non_null(strstr(out, "\"n_threads\": 1}"));
    assert_null(strstr(out, "kernels"));
    assert_int_equal(run("prefill -m " DATA "tiny-f32.gguf -p hi --reference", out, sizeof(out),
                         NULL, 0), 0);
    assert_non_null(strstr(out, "reference path, 1 thread"));
    assert_null(strstr(out, "kernels"));
    assert_int_equal(run("bench -m " DATA "tiny-f32.gguf -p 8 -r 1 --reference --json", out,
                         sizeof(out), NULL, 0), 0);
    assert_non_null(strstr(out, "\"path\": \"reference\""));
    assert_null(strstr(out, "kernels"));
    assert_int_equal(run("bench -m " DATA "tiny-f32.gguf -p 8 -r 1 --reference", out, sizeof(out),
                         NULL, 0), 0);
    assert_non_null(strstr(out, "reference path"));
    assert_null(strstr(out, "kernels"));
    /* the fast path still names its table */
    assert_int_equal(run("prefill -m " DATA "tiny-f32.gguf -p hi --json", out, sizeof(out), NULL, 0), 0);
    assert_non_null(strstr(out, "\"kernels\": \""));
    assert_int_equal(run("bench -m " DATA "tiny-f32.gguf -p 8 -r 1", out, sizeof(out), NULL, 0), 0);
    assert_non_null(strstr(out, "kernels, fast path"));
}

static void test_unknown_architecture(void **state)
{
    (void)state;
    const char *path = t_tmp_path("mamba.gguf");
    es_gguf_writer *w;
    assert_int_equal(es_gguf_writer_create(&w), ES_OK);
    assert_int_equal(es_gguf_writer_set_str(w, "general.architecture", "mamba"), ES_OK);
    float data[32] = {0};
    int64_t ne[1] = {32};
    assert_int_equal(es_gguf_writer_add_tensor(w, "x.weight", 0, 1, ne, data, sizeof(data)), ES_OK);
    assert_int_equal(es_gguf_writer_write(w, path), ES_OK);
    es_gguf_writer_destroy(w);
    char args[1024];
    snprintf(args, sizeof(args), "prefill -m %s -p hi", path);
    expect_error(args, "unknown architecture 'mamba'");
    unlink(path);
}

/* A vocabulary-only GGUF with a byte-level BPE tokenizer: tokens a, b, ab, the given merge, and
 * an unknown pre-tokenizer (which logs a warning while the tokenizer loads). */
static void write_vocab(const char *path, const char *merge)
{
    es_gguf_writer *w;
    assert_int_equal(es_gguf_writer_create(&w), ES_OK);
    const char *toks[] = {"a", "b", "ab"};
    assert_int_equal(es_gguf_writer_set_str(w, "general.architecture", "olmoe"), ES_OK);
    assert_int_equal(es_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2"), ES_OK);
    assert_int_equal(es_gguf_writer_set_str(w, "tokenizer.ggml.pre", "no-such-pre"), ES_OK);
    assert_int_equal(es_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 3), ES_OK);
    assert_int_equal(es_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", &merge, NULL, 1), ES_OK);
    assert_int_equal(es_gguf_writer_write(w, path), ES_OK);
    es_gguf_writer_destroy(w);
}

/* A broken tokenizer: one line naming the file, and the warnings logged before the error are
 * not printed; a working one with the same warning prints it. */
static void test_broken_tokenizer_one_line(void **state)
{
    (void)state;
    const char *path = t_tmp_path("broken-tok.gguf");
    write_vocab(path, "a c");
    char args[1024], want[600];
    snprintf(want, sizeof(want), "%s: tokenizer.ggml.merges[0]", path);
    snprintf(args, sizeof(args), "prefill -m %s -p hi", path);
    expect_error(args, want);
    snprintf(args, sizeof(args), "tokenize -m %s -p ab", path);
    expect_error(args, want);
    snprintf(args, sizeof(args), "info -m %s", path);
    expect_error(args, want);
    write_vocab(path, "a b");
    char out[4096], err[4096];
    snprintf(args, sizeof(args), "tokenize -m %s -p ab", path);
    assert_int_equal(run(args, out, sizeof(out), err, sizeof(err)), 0);
    assert_string_equal(out, "2\n");
    assert_non_null(strstr(err, "unknown pre-tokenizer 'no-such-pre'"));
    unlink(path);
}

static void test_prefill_json_and_dump(void **state)
{
    (void)state;
    const char *dump = t_tmp_path("logits.bin");
    char args[1024], out[8192];
    snprintf(args, sizeof(args), "prefill -m %s --ids %s --top 3 --json --dump-logits %s",
             DATA "tiny-q8_0.gguf", DATA "tiny-ids.txt", dump);
    assert_int_equal(run(args, out, sizeof(out), NULL, 0), 0);
    assert_non_null(strstr(out, "\"n_tokens\": 114"));
    assert_non_null(strstr(out, "\"top\": [{\"id\": "));
    assert_non_null(strstr(out, "\"peak_rss_bytes\": "));
    assert_non_null(strstr(out, "\"seconds\": "));
    size_t len = 0;
    float *logits = (float *)t_read_file(dump, &len);
    assert_non_null(logits);
    assert_int_equal(len, 114 * 320 * sizeof(float));
    /* the top-1 id printed is the argmax of the last row dumped */
    int best = 0;
    for (int v = 1; v < 320; v++)
        if (logits[113 * 320 + v] > logits[113 * 320 + best]) best = v;
    char want[64];
    snprintf(want, sizeof(want), "\"top\": [{\"id\": %d,", best);
    assert_non_null(strstr(out, want));
    free(logits);
    unlink(dump);
    /* a dump into a missing directory fails cleanly and leaves nothing */
    snprintf(args, sizeof(args), "prefill -m %s -p hello --dump-logits /nonexistent-dir/x.bin",
             DATA "tiny-f32.gguf");
    expect_error(args, "/nonexistent-dir/x.bin");
}

static void test_tokenize_vocab_only(void **state)
{
    (void)state;
    char args[1024], out[4096];
    /* gpt-2's vocabulary: "Hello world" is 15496 995 with llama.cpp */
    snprintf(args, sizeof(args), "tokenize -m %s/vocab/ggml-vocab-gpt-2.gguf -p 'Hello world'",
             t_data_dir());
    assert_int_equal(run(args, out, sizeof(out), NULL, 0), 0);
    assert_string_equal(out, "15496 995\n");
    /* llama-spm: BOS 1 added with --bos */
    snprintf(args, sizeof(args), "tokenize -m %s/vocab/ggml-vocab-llama-spm.gguf -p 'Hello' --bos",
             t_data_dir());
    assert_int_equal(run(args, out, sizeof(out), NULL, 0), 0);
    assert_int_equal(strncmp(out, "1 ", 2), 0);
}

static void test_synth_and_ppl_json(void **state)
{
    (void)state;
    const char *model = t_tmp_path("synth-tiny.gguf");
    char args[1024], out[4096];
    snprintf(args, sizeof(args), "synth --preset tiny --type q4_0 --seed 5 -o %s", model);
    assert_int_equal(run(args, out, sizeof(out), NULL, 0), 0);
    snprintf(args, sizeof(args), "ppl -m %s -f %s -c 128 --chunks 2 --json", model,
             DATA "ppl-text.txt");
    assert_int_equal(run(args, out, sizeof(out), NULL, 0), 0);
    assert_non_null(strstr(out, "\"ppl\": "));
    assert_non_null(strstr(out, "\"n_scored\": 126"));
    assert_non_null(strstr(out, "\"chunks\": 2"));
    snprintf(args, sizeof(args), "bench -m %s -p 16,32 -r 2 --json", model);
    assert_int_equal(run(args, out, sizeof(out), NULL, 0), 0);
    assert_non_null(strstr(out, "\"n_prompt\": 16"));
    assert_non_null(strstr(out, "\"n_prompt\": 32"));
    assert_non_null(strstr(out, "\"tokens_per_second\": "));
    /* --vocab copies a real tokenizer: gpt-neox ids for "Hello world" are 12092 1533 */
    snprintf(args, sizeof(args), "synth --preset tiny --type q8_0 --vocab %s/vocab/ggml-vocab-gpt-neox.gguf -o %s",
             t_data_dir(), model);
    assert_int_equal(run(args, out, sizeof(out), NULL, 0), 0);
    snprintf(args, sizeof(args), "tokenize -m %s -p 'Hello world'", model);
    assert_int_equal(run(args, out, sizeof(out), NULL, 0), 0);
    assert_string_equal(out, "12092 1533\n");
    snprintf(args, sizeof(args), "prefill -m %s -p 'Hello world' --json", model);
    assert_int_equal(run(args, out, sizeof(out), NULL, 0), 0);
    assert_non_null(strstr(out, "\"n_tokens\": 2"));
    /* a synth into a missing directory leaves no file behind */
    expect_error("synth --preset tiny -o /nonexistent-dir/m.gguf", "/nonexistent-dir/m.gguf");
    unlink(model);
}

/* estream pack: both argument forms, the summary line, --json, info on the pack, and errors
 * (a pack as source, a missing -o, an unwritable output) as one line with nothing left. */
static void test_pack(void **state)
{
    (void)state;
    char pk[512], args[2048], out[65536], err[4096];
    snprintf(pk, sizeof(pk), "%s", t_tmp_path("cli.pack"));
    snprintf(args, sizeof(args), "pack %s -o %s", DATA "tiny-f32.gguf", pk);
    assert_int_equal(run(args, out, sizeof(out), err, sizeof(err)), 0);
    assert_non_null(strstr(out, "pack: wrote "));
    assert_non_null(strstr(out, "2 layers, 16 records of "));
    assert_non_null(strstr(out, "MB/s\n"));
    const char *nl = strchr(out, '\n'); /* one summary line, nothing on stderr (small file) */
    assert_non_null(nl);
    assert_int_equal(nl[1], 0);
    assert_string_equal(err, "");
    snprintf(args, sizeof(args), "pack -m %s -o %s --json", DATA "tiny-f32.gguf", pk);
    assert_int_equal(run(args, out, sizeof(out), NULL, 0), 0);
    assert_int_equal(out[0], '{');
    assert_non_null(strstr(out, "\"layers\": 2"));
    assert_non_null(strstr(out, "\"records\": 16"));
    assert_non_null(strstr(out, "\"record_bytes\": 49152")); /* 3 x 16 KiB (64 x 64 f32) */
    assert_non_null(strstr(out, "\"mb_per_s\": "));
    snprintf(args, sizeof(args), "info -m %s", pk);
    assert_int_equal(run(args, out, sizeof(out), NULL, 0), 0);
    assert_non_null(strstr(out, "pack:          version 1, layout gguf-rows, from tiny-f32.gguf"));
    assert_non_null(strstr(out, "layer 1      8 records of 49152 bytes"));
    assert_non_null(strstr(out, "blk.0.ffn_exps"));

    snprintf(args, sizeof(args), "pack %s -o %s.again", pk, pk);
    expect_error(args, "already an estream pack");
    snprintf(args, sizeof(args), "%s.again", pk);
    assert_int_equal(access(args, F_OK), -1);
    expect_error("pack " DATA "tiny-f32.gguf", "-o");
    expect_error("pack -o x.pack", "no model");
    expect_error("pack " DATA "tiny-f32.gguf -o x.pack --frobnicate", "unknown option");
    expect_error("pack " DATA "tiny-f32.gguf " DATA "tiny-q8_0.gguf -o x.pack", "more than one");
    expect_error("pack " DATA "tiny-f32.gguf -o /nonexistent-dir/x.pack", "/nonexistent-dir/x.pack");
    expect_error("pack " DATA "README.md -o x.pack", "README.md");
    assert_int_equal(access("x.pack", F_OK), -1);
    unlink(pk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_flags),
        cmocka_unit_test(test_reference_output),
        cmocka_unit_test(test_unknown_architecture),
        cmocka_unit_test(test_broken_tokenizer_one_line),
        cmocka_unit_test(test_prefill_json_and_dump),
        cmocka_unit_test(test_tokenize_vocab_only),
        cmocka_unit_test(test_synth_and_ppl_json),
        cmocka_unit_test(test_pack),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
