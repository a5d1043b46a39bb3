/*
 * The estream command line, end to end: every command's --help, the outputs users script
 * against (--json, --dump-logits, tokenize ids), and bad input answered by one line on stderr
 * and a non-zero exit, with no partial output file left behind. Output files: a user's own
 * "m.gguf.tmp" is never touched, an interrupted synth leaves its directory as it was, symbolic
 * links stay links, FIFOs and stdout are written in place.
 */
#include "t.h"
#include "gguf/gguf.h"
#include "pack/pack.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>

#include "estream.h"
#include "core/util.h"
#include "gguf/gguf.h"

#define DATA "tests/data/"

/* Runs "estream ARGS" capturing stdout (and stderr into err when given). Returns the exit code. */
static int run(const char *args, char *out, size_t cap, char *err, size_t ecap)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "%s %s", t_bin(), args);
    return t_run_cmd(cmd, out, cap, err, ecap);
}

/* An error is one line on stderr starting with "estream: ", and a non-zero exit. */
static void expect_error_cmd(const char *cmd, const char *needle)
{
    char out[4096], err[4096];
    int rc = t_run_cmd(cmd, out, sizeof(out), err, sizeof(err));
    if (rc == 0 || rc >= 128) fail_msg("'%s': exit %d, want a clean non-zero exit", cmd, rc);
    if (strncmp(err, "estream: ", 9) != 0) fail_msg("'%s': stderr '%s'", cmd, err);
    const char *nl = strchr(err, '\n');
    if (!nl || nl[1] != 0) fail_msg("'%s': stderr is not one line: '%s'", cmd, err);
    if (needle && !strstr(err, needle)) fail_msg("'%s': '%s' lacks '%s'", cmd, err, needle);
}

static void expect_error(const char *args, const char *needle)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "%s %s", t_bin(), args);
    expect_error_cmd(cmd, needle);
}

static void test_help(void **state)
{
    (void)state;
    const char *cmds[] = {"info", "tokenize", "synth", "prefill", "ppl", "bench", "pack", "tune"};
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
    /* the default: the physical cores this process may use, at most ES_MAX_THREADS */
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
    assert_int_not_equal(run("synth --arch mamba --preset tiny -o x.gguf", out, sizeof(out), err,
                             sizeof(err)), 0);
    assert_null(strstr(err, "synth: synth:"));
    assert_non_null(strstr(err, "unknown architecture 'mamba'"));
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

/* info --system and every bench row name the kernel table in use and the CPU's features; the
 * table follows ESTREAM_ISA, and a table this CPU lacks is never claimed. */
static void test_system(void **state)
{
    (void)state;
    char out[8192], cmd[1024], want[64];
    assert_int_equal(run("info --system", out, sizeof(out), NULL, 0), 0);
    snprintf(want, sizeof(want), "kernels:       %s (", es_kernels_name());
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "features:"));
    const char *names[] = {"scalar", "avx2", "avxvnni", "avx512", "amx", "asimd", "neon", "i8mm"};
    /* a table of this architecture that does not run here is listed with the reason */
    for (size_t i = 0; i < T_LEN(names); i++) {
        const char *why = es_kernels_why_not(names[i]);
        assert_int_equal(why == NULL, es_kernels_available(names[i]));
        if (!why || strstr(why, "this build is not for")) continue;
        char line[512];
        snprintf(line, sizeof(line), "not here:      %s: %s\n", names[i], why);
        assert_non_null(strstr(out, line));
    }
    for (size_t i = 0; i < T_LEN(names); i++) {
        /* the "runs here" list holds exactly the available tables */
        snprintf(want, sizeof(want), " %s", names[i]);
        const char *list = strstr(out, "(runs here:");
        assert_non_null(list);
        const char *end = strchr(list, ';');
        const char *hit = strstr(list, want);
        const bool listed = hit && hit < end && (hit[strlen(want)] == ' ' || hit + strlen(want) == end);
        assert_int_equal(listed, es_kernels_available(names[i]));
        if (!es_kernels_available(names[i])) continue;
        snprintf(cmd, sizeof(cmd), "ESTREAM_ISA=%s %s bench -m " DATA "tiny-f32.gguf -p 8 -r 1 --json",
                 names[i], t_bin());
        assert_int_equal(t_run_cmd(cmd, out, sizeof(out), NULL, 0), 0);
        snprintf(want, sizeof(want), "\"kernels\": \"%s\"", names[i]);
        assert_non_null(strstr(out, want));
        assert_non_null(strstr(out, "\"cpu_features\": \""));
        snprintf(cmd, sizeof(cmd), "ESTREAM_ISA=%s %s bench -m " DATA "tiny-f32.gguf -p 8 -r 1",
                 names[i], t_bin());
        assert_int_equal(t_run_cmd(cmd, out, sizeof(out), NULL, 0), 0);
        snprintf(want, sizeof(want), "  %s\n", names[i]); /* the row's last column */
        assert_non_null(strstr(out, want));
        assert_non_null(strstr(out, "features:"));
        assert_int_equal(run("info --system", out, sizeof(out), NULL, 0), 0);
    }
    expect_error("info --system -m " DATA "tiny-f32.gguf", "not both");
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
/* `estream info` says how it read the router and attention: Ling 2.0's fused q/k/v, expert
 * groups, selection bias, weight scale and its skipped multi-token-prediction block. */
static void test_info_details(void **state)
{
    (void)state;
    char out[65536];
    assert_int_equal(run("info -m " DATA "tiny-bailingmoe2-q4_0.gguf", out, sizeof(out), NULL, 0),
                     0);
    assert_non_null(strstr(out, "\nrouter:        sigmoid, selection bias (exp_probs_b), 4 expert "
                                "groups of which 2 eligible, weights x2.5\n"));
    assert_non_null(strstr(out, "\nattention:     fused attn_qkv, q/k RMSNorm per head\n"));
    assert_non_null(strstr(out, "\nnot run:       1 multi-token-prediction block after the "
                                "layers\n"));
    assert_int_equal(run("info -m " DATA "tiny-gptoss-q4_0.gguf", out, sizeof(out), NULL, 0), 0);
    assert_non_null(strstr(out, "\nattention:     q, k, v apart, q/k/v biases, a window of 40 "
                                "positions on 1 of every 2 layers\n"));
    assert_null(strstr(out, "not run:"));
    assert_int_equal(run("info -m " DATA "tiny-qwen3vlmoe-q4_0.gguf", out, sizeof(out), NULL, 0),
                     0);
    assert_non_null(strstr(out, "\nattention:     q, k, v apart, q/k RMSNorm per head, interleaved "
                                "multimodal RoPE, sections [6, 4, 4, 2] (text: the fourth axis's "
                                "pairs stay unturned)\n"));
}

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

/* A vocabulary with one token of 40,000 CJK characters (byte-level BPE, no merges) used to take
 * gigabytes to load; it is refused by the tokenizer's limits with one line naming the token. */
static void test_tokenize_vocab_bomb(void **state)
{
    (void)state;
    static char bytes[256][4];
    const char *toks[257];
    for (int b = 0; b < 256; b++) { /* any 256 distinct short tokens do here */
        snprintf(bytes[b], sizeof(bytes[b]), "%02x", b);
        toks[b] = bytes[b];
    }
    const size_t n_char = 40000;
    char *big = malloc(3 * n_char + 1);
    for (size_t i = 0; i < n_char; i++)
        memcpy(big + 3 * i, "\xE4\xB8\x80", 3); /* U+4E00 */
    big[3 * n_char] = 0;
    toks[256] = big;
    const char *path = t_tmp_path("bomb.gguf");
    es_gguf_writer *w;
    assert_int_equal(es_gguf_writer_create(&w), ES_OK);
    assert_int_equal(es_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2"), ES_OK);
    assert_int_equal(es_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 257),
                     ES_OK);
    assert_int_equal(es_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", NULL, NULL, 0), ES_OK);
    assert_int_equal(es_gguf_writer_write(w, path), ES_OK);
    es_gguf_writer_destroy(w);
    free(big);
    char args[1024];
    snprintf(args, sizeof(args), "tokenize -m %s -p abc", path);
    expect_error(args, "tokenizer.ggml.tokens[256]: token of 120000 bytes is longer than the limit");
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

/* ---------------------------------------------------------------------------------------------
 * Output files: interrupted and hostile writes. Each case works in a fresh directory holding a
 * user's own "m.gguf.tmp", and checks that the directory is afterwards exactly as it was (or
 * holds just the new m.gguf).
 * ------------------------------------------------------------------------------------------- */

/* A fresh directory with the user's m.gguf.tmp in it. */
static char *user_dir(const char *name)
{
    char *dir = t_mkdtemp(name), p[600];
    assert_non_null(dir);
    snprintf(p, sizeof(p), "%s/m.gguf.tmp", dir);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    fputs("the user's own file", f);
    fclose(f);
    return dir;
}

static bool files_equal(const char *a, const char *b)
{
    size_t la = 0, lb = 0;
    char *x = t_read_file(a, &la), *y = t_read_file(b, &lb);
    bool eq = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return eq;
}

/* (a) a user's m.gguf.tmp survives a successful synth, one refused at the start and one that
 * fails midway (a file size limit: write() fails with EFBIG, which the CLI reports). */
static void test_user_tmp_untouched(void **state)
{
    (void)state;
    char *dir = user_dir("usertmp");
    char *before = t_dir_snapshot(dir, NULL);
    char args[1024], cmd[2048];
    snprintf(args, sizeof(args), "synth --preset tiny --type q4_0 -o %s/m.gguf", dir);
    assert_int_equal(run(args, NULL, 0, NULL, 0), 0);
    T_DIR_UNCHANGED(dir, "m.gguf", before);
    snprintf(args, sizeof(args), "%s/m.gguf", dir);
    unlink(args);
    snprintf(args, sizeof(args), "synth --preset tiny --type q2_k -o %s/m.gguf", dir);
    expect_error(args, "unknown weight type");
    T_DIR_UNCHANGED(dir, NULL, before);
    snprintf(cmd, sizeof(cmd), "ulimit -f 64; exec %s synth --preset tiny -o %s/m.gguf", t_bin(),
             dir);
    expect_error_cmd(cmd, "File too large");
    T_DIR_UNCHANGED(dir, NULL, before);
    free(before);
    t_rm_rf(dir);
    free(dir);
}

/* Starts argv with default signal dispositions (a test runner may ignore SIGINT), output to
 * /dev/null. */
static pid_t spawn(char *const argv[])
{
    pid_t pid = fork();
    if (pid == 0) {
        const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
        for (size_t i = 0; i < T_LEN(sigs); i++) signal(sigs[i], SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* Waits up to secs for pid; kills it and fails on a timeout. Returns the wait status. */
static int wait_for(pid_t pid, double secs)
{
    int st = 0;
    for (double t = 0; t < secs; t += 0.01) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return st;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    fail_msg("pid %d still running after %.0f s", (int)pid, secs);
    return st;
}

/* Whether dir holds a temporary file of ours ("*.tmp.XXXXXXXXXXXX"). */
static bool has_temp(const char *dir)
{
    DIR *d = opendir(dir);
    bool found = false;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        const char *t = strstr(e->d_name, ".tmp.");
        found |= t && strlen(t) == 5 + 12;
    }
    if (d) closedir(d);
    return found;
}

/* (b) synth of the 3.7 GiB olmoe-1b-7b preset, interrupted once its temporary file exists:
 * the process dies of the signal within seconds, and the directory (and, through a symbolic
 * link, the target's directory) is as it was. */
static void interrupt_synth(int sig, bool through_link)
{
    char *dir = user_dir("intr"), *tdir = through_link ? user_dir("intr-target") : NULL;
    char out[600], target[600];
    snprintf(out, sizeof(out), "%s/m.gguf", dir);
    if (through_link) {
        snprintf(target, sizeof(target), "%s/real.gguf", tdir);
        FILE *f = fopen(target, "wb");
        fputs("old model", f);
        fclose(f);
        assert_int_equal(symlink(target, out), 0);
    }
    char *before = t_dir_snapshot(dir, NULL), *tbefore = tdir ? t_dir_snapshot(tdir, NULL) : NULL;
    char *argv[] = {(char *)t_bin(), "synth", "--preset", "olmoe-1b-7b", "--type", "q4_0", "-o",
                    out, NULL};
    pid_t pid = spawn(argv);
    assert_true(pid > 0);
    const char *watch = through_link ? tdir : dir;
    int st = 0;
    for (int i = 0; i < 6000 && !has_temp(watch); i++) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            fail_msg("synth exited (status %d) before writing", st);
        usleep(10000);
    }
    assert_true(has_temp(watch));
    usleep(100000); /* well into the write */
    const uint64_t t0 = es_now_ns();
    assert_int_equal(kill(pid, sig), 0);
    st = wait_for(pid, 20.0);
    const double secs = (double)(es_now_ns() - t0) * 1e-9;
    if (!WIFSIGNALED(st) || WTERMSIG(st) != sig)
        fail_msg("synth: wait status %#x, want death by signal %d", st, sig);
    if (secs > 5.0) fail_msg("synth took %.1f s to die of signal %d", secs, sig);
    T_DIR_UNCHANGED(dir, NULL, before);
    if (tdir) T_DIR_UNCHANGED(tdir, NULL, tbefore);
    free(before);
    free(tbefore);
    t_rm_rf(dir);
    free(dir);
    if (tdir) t_rm_rf(tdir);
    free(tdir);
}

static void test_interrupted_synth(void **state)
{
    (void)state;
    interrupt_synth(SIGTERM, false);
    interrupt_synth(SIGINT, false);
    interrupt_synth(SIGHUP, true);
}

/* (c) a symbolic link to a file: the link stays a link and its target gets the model (the same
 * bytes as a direct write); a dangling link is refused and stays. */
static void test_output_symlink(void **state)
{
    (void)state;
    char *dir = user_dir("link");
    char p[600], link[600], ref[600], args[2048];
    snprintf(p, sizeof(p), "%s/real.gguf", dir);
    snprintf(link, sizeof(link), "%s/link.gguf", dir);
    snprintf(ref, sizeof(ref), "%s/ref.gguf", dir);
    FILE *f = fopen(p, "wb");
    fputs("old", f);
    fclose(f);
    assert_int_equal(symlink("real.gguf", link), 0);
    snprintf(args, sizeof(args), "synth --preset tiny --type q8_0 -o %s", ref);
    assert_int_equal(run(args, NULL, 0, NULL, 0), 0);
    char *before = t_dir_snapshot(dir, "real.gguf");
    snprintf(args, sizeof(args), "synth --preset tiny --type q8_0 -o %s", link);
    assert_int_equal(run(args, NULL, 0, NULL, 0), 0);
    T_DIR_UNCHANGED(dir, "real.gguf", before);
    free(before);
    struct stat sb;
    assert_int_equal(lstat(link, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    assert_true(files_equal(p, ref));
    /* --dump-logits through the link */
    snprintf(args, sizeof(args), "prefill -m %s -p hello --dump-logits %s", ref, link);
    assert_int_equal(run(args, NULL, 0, NULL, 0), 0);
    assert_int_equal(lstat(link, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    assert_int_equal(stat(p, &sb), 0);
    assert_true(sb.st_size > 0 && sb.st_size % 4 == 0);
    /* a dangling link */
    snprintf(p, sizeof(p), "%s/dangling.gguf", dir);
    assert_int_equal(symlink("nowhere/x.gguf", p), 0);
    before = t_dir_snapshot(dir, NULL);
    snprintf(args, sizeof(args), "synth --preset tiny -o %s", p);
    expect_error(args, "symbolic link to a missing file");
    T_DIR_UNCHANGED(dir, NULL, before);
    free(before);
    t_rm_rf(dir);
    free(dir);
}

/* (d) a FIFO, stdout and /dev/null are written in place: the reader gets exactly the bytes a
 * regular file gets, the FIFO stays a FIFO, nothing else appears. Every command runs under
 * timeout, so a bug cannot hang the test. */
static void test_output_fifo_and_stdout(void **state)
{
    (void)state;
    char *dir = user_dir("fifo");
    char fifo[600], ref[600], got[600], cmd[4096];
    snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
    snprintf(ref, sizeof(ref), "%s/ref.gguf", dir);
    snprintf(got, sizeof(got), "%s/got.bin", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    snprintf(cmd, sizeof(cmd), "%s synth --preset tiny --type q4_0 -o %s", t_bin(), ref);
    assert_int_equal(t_run_cmd(cmd, NULL, 0, NULL, 0), 0);
    char *before = t_dir_snapshot(dir, "got.bin");

    /* synth into a FIFO with a reader */
    snprintf(cmd, sizeof(cmd), "timeout 60 cat %s > %s & timeout 60 %s synth --preset tiny "
             "--type q4_0 -o %s; rc=$?; wait; exit $rc", fifo, got, t_bin(), fifo);
    assert_int_equal(t_run_cmd(cmd, NULL, 0, NULL, 0), 0);
    assert_true(files_equal(got, ref));
    T_DIR_UNCHANGED(dir, "got.bin", before);
    struct stat sb;
    assert_int_equal(lstat(fifo, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));

    /* synth -o - and -o /dev/stdout into a pipe */
    const char *outs[] = {"-", "/dev/stdout"};
    for (size_t i = 0; i < T_LEN(outs); i++) {
        unlink(got);
        snprintf(cmd, sizeof(cmd), "timeout 60 %s synth --preset tiny --type q4_0 -o %s | cat > %s",
                 t_bin(), outs[i], got);
        assert_int_equal(t_run_cmd(cmd, NULL, 0, NULL, 0), 0);
        assert_true(files_equal(got, ref));
    }
    assert_int_equal(run("synth --preset tiny -o /dev/null", NULL, 0, NULL, 0), 0);
    assert_int_equal(stat("/dev/null", &sb), 0);
    assert_true(S_ISCHR(sb.st_mode));

    /* --dump-logits into a FIFO, and into /dev/stdout ahead of the JSON report */
    char dump[600];
    snprintf(dump, sizeof(dump), "%s/logits.bin", dir);
    snprintf(cmd, sizeof(cmd), "%s prefill -m %s -p 'hello there' --dump-logits %s", t_bin(),
             ref, dump);
    assert_int_equal(t_run_cmd(cmd, NULL, 0, NULL, 0), 0);
    snprintf(cmd, sizeof(cmd), "timeout 60 cat %s > %s & timeout 60 %s prefill -m %s "
             "-p 'hello there' --dump-logits %s; rc=$?; wait; exit $rc", fifo, got, t_bin(), ref,
             fifo);
    assert_int_equal(t_run_cmd(cmd, NULL, 0, NULL, 0), 0);
    assert_true(files_equal(got, dump));
    snprintf(cmd, sizeof(cmd), "timeout 60 %s prefill -m %s -p 'hello there' --json "
             "--dump-logits /dev/stdout | cat > %s", t_bin(), ref, got);
    assert_int_equal(t_run_cmd(cmd, NULL, 0, NULL, 0), 0);
    size_t nd = 0, ng = 0;
    char *d = t_read_file(dump, &nd), *g = t_read_file(got, &ng);
    assert_true(ng > nd);
    assert_memory_equal(g, d, nd);
    assert_int_equal(strncmp(g + nd, "{\"n_tokens\": ", 13), 0);
    free(d);
    free(g);
    assert_int_equal(lstat(fifo, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
    expect_error("prefill -m tests/data/tiny-f32.gguf -p hi --dump-logits -", "stdout");
    free(before);
    t_rm_rf(dir);
    free(dir);
}

/* (e) a missing or read-only directory, or a directory as OUT: one line, nothing left behind. */
static void test_output_bad_dirs(void **state)
{
    (void)state;
    char *dir = user_dir("baddir");
    char ro[520], args[2048];
    snprintf(ro, sizeof(ro), "%s/ro", dir);
    assert_int_equal(mkdir(ro, 0555), 0);
    char *before = t_dir_snapshot(dir, NULL);
    snprintf(args, sizeof(args), "synth --preset tiny -o %s/missing/m.gguf", dir);
    expect_error(args, "No such file or directory");
    snprintf(args, sizeof(args), "prefill -m " DATA "tiny-f32.gguf -p hi --dump-logits "
             "%s/missing/x.bin", dir);
    expect_error(args, "missing/x.bin");
    snprintf(args, sizeof(args), "synth --preset tiny -o %s", ro);
    expect_error(args, "is a directory");
    T_DIR_UNCHANGED(dir, NULL, before);
    /* root may write into a 0555 directory; /sys refuses even root */
    const char *rodir = access(ro, W_OK) != 0 ? ro : access("/sys", F_OK) == 0 ? "/sys" : NULL;
    if (rodir) {
        char *ro_before = t_dir_snapshot(rodir, NULL);
        snprintf(args, sizeof(args), "synth --preset tiny -o %s/m.gguf", rodir);
        expect_error(args, "Permission denied");
        snprintf(args, sizeof(args), "prefill -m " DATA "tiny-f32.gguf -p hi --dump-logits "
                 "%s/x.bin", rodir);
        expect_error(args, "Permission denied");
        T_DIR_UNCHANGED(rodir, NULL, ro_before);
        free(ro_before);
    }
    T_DIR_UNCHANGED(dir, NULL, before);
    free(before);
    chmod(ro, 0755);
    t_rm_rf(dir);
    free(dir);
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
    assert_non_null(strstr(out, "pack:          version 2, layout tiles-v2, from tiny-f32.gguf"));
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


/* --mem and the streaming flags on prefill, ppl and bench: identical logits through the arena,
 * clear refusals, the flipped-byte pack failing with one line and no output file. */
static void test_streaming_flags(void **state)
{
    (void)state;
    char pk[512], bad[512], args[3000], out[65536], err[4096];
    snprintf(pk, sizeof(pk), "%s", t_tmp_path("stream-cli.pack"));
    snprintf(args, sizeof(args), "pack %s -o %s", DATA "tiny-q8_0.gguf", pk);
    assert_int_equal(run(args, out, sizeof(out), NULL, 0), 0);
    snprintf(args, sizeof(args), "info -m %s", pk); /* Q8_0 experts are stored as tiles */
    assert_int_equal(run(args, out, sizeof(out), NULL, 0), 0);
    assert_non_null(strstr(out, "(gate q8_0/tiles @0, up q8_0/tiles @"));
    char res[512], str[512];
    snprintf(res, sizeof(res), "%s", t_tmp_path("resident.f32"));
    snprintf(str, sizeof(str), "%s", t_tmp_path("streamed.f32"));
    snprintf(args, sizeof(args), "prefill -m %s -p 'hello world, once more' --dump-logits %s",
             DATA "tiny-q8_0.gguf", res);
    assert_int_equal(run(args, out, sizeof(out), NULL, 0), 0);
    const char *srcs[] = {DATA "tiny-q8_0.gguf", pk};
    const char *flags[] = {"--groups 3 --banks 2 --qd 1", "--policy on-demand",
                           "--groups 1 --banks 1 --policy after-routing -t 1",
                           "--groups 2 --io-backend pread", "--groups 2 --no-direct --no-verify"};
    for (size_t i = 0; i < T_LEN(srcs); i++)
        for (size_t j = 0; j < T_LEN(flags); j++) {
            snprintf(args, sizeof(args),
                     "prefill -m %s -p 'hello world, once more' --dump-logits %s --json %s",
                     srcs[i], str, flags[j]);
            if (run(args, out, sizeof(out), err, sizeof(err)) != 0)
                fail_msg("%s: %s", args, err);
            assert_non_null(strstr(out, "\"streaming\": true"));
            assert_non_null(strstr(out, "\"bubble_rate\": "));
            assert_non_null(strstr(out, "\"io_backend\": \""));
            if (strstr(flags[j], "--no-direct")) /* buffered reads, as asked */
                assert_non_null(strstr(out, "\"direct\": false"));
            size_t la = 0, lb = 0;
            char *a = t_read_file(res, &la), *b = t_read_file(str, &lb);
            assert_non_null(a);
            assert_non_null(b);
            if (la != lb || memcmp(a, b, la) != 0) fail_msg("%s: logits differ", args);
            free(a);
            free(b);
        }
    /* the text summary names the arena and the bubbles */
    snprintf(args, sizeof(args), "prefill -m %s -p hi --groups 4 --banks 2", pk);
    assert_int_equal(run(args, out, sizeof(out), NULL, 0), 0);
    assert_non_null(strstr(out, "arena:      2 banks x 4 experts"));
    assert_non_null(strstr(out, "bubbles:"));
    /* refusals */
    snprintf(args, sizeof(args), "prefill -m %s -p hi --mem 1K", pk);
    expect_error(args, "the smallest budget that works is");
    snprintf(args, sizeof(args), "prefill -m %s -p hi --mem 12Q", pk);
    expect_error(args, "unknown unit");
    snprintf(args, sizeof(args), "prefill -m %s -p hi --mem 150%%", pk);
    expect_error(args, "more than the whole file");
    /* auto: 80 % of the memory the process may use where the file is larger (here too small a
     * budget, refused as one), else resident; what it chose is said on stderr */
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "ESTREAM_MEM_LIMIT=524288 %s prefill -m %s -p hi --mem auto",
             t_bin(), pk);
    assert_int_not_equal(t_run_cmd(cmd, out, sizeof(out), err, sizeof(err)), 0);
    assert_non_null(strstr(err, "--mem auto: 0.4 MiB (80 % of the 0.5 MiB this process may use, "
                                "ESTREAM_MEM_LIMIT)"));
    assert_non_null(strstr(err, "the smallest budget that works is"));
    /* a limit under 100 bytes: 80 % of it rounds to 0, still a budget (refused), not resident */
    snprintf(cmd, sizeof(cmd), "ESTREAM_MEM_LIMIT=50 %s prefill -m %s -p hi --mem auto", t_bin(),
             pk);
    assert_int_not_equal(t_run_cmd(cmd, out, sizeof(out), err, sizeof(err)), 0);
    assert_non_null(strstr(err, "the smallest budget that works is"));
    snprintf(cmd, sizeof(cmd), "ESTREAM_MEM_LIMIT=1000000000 %s prefill -m %s -p hi --mem auto",
             t_bin(), pk);
    assert_int_equal(t_run_cmd(cmd, out, sizeof(out), err, sizeof(err)), 0);
    assert_non_null(strstr(err, "--mem auto: resident (the model file fits in 80 % of the 953.7 "
                                "MiB this process may use, ESTREAM_MEM_LIMIT)"));
    assert_null(strstr(out, "budget:"));
    /* bench's table: an auto row that runs resident is a table row like a budget's, not the
     * plain rows' format under the table's header */
    snprintf(cmd, sizeof(cmd),
             "ESTREAM_MEM_LIMIT=1000000000 %s bench -m %s -p 8 -r 1 --no-bounds --mem auto,4G",
             t_bin(), pk);
    assert_int_equal(t_run_cmd(cmd, out, sizeof(out), err, sizeof(err)), 0);
    assert_non_null(strstr(out, "\n-       -                   8 "));
    assert_non_null(strstr(out, "\n4096    -                   8 "));
    assert_null(strstr(out, "(min .. max)"));
    snprintf(args, sizeof(args), "serve -m %s --max-body auto", pk);
    expect_error(args, "serve: --max-body: expected a size such as 600M or 1.5G, got 'auto'");
    snprintf(args, sizeof(args), "tune -m %s --mem auto", pk);
    expect_error(args, "nothing to tune");
    snprintf(args, sizeof(args), "prefill -m %s -p hi --policy sometimes", pk);
    expect_error(args, "early, after-routing or on-demand");
    snprintf(args, sizeof(args), "prefill -m %s -p hi --mem 1G --reference", pk);
    expect_error(args, "fast path");
    snprintf(args, sizeof(args), "prefill -m %s -p hi --qd 65", pk);
    expect_error(args, "--qd");
    /* a budget that holds everything runs resident and says so */
    snprintf(args, sizeof(args), "prefill -m %s -p hi --mem 90%%", pk);
    snprintf(args, sizeof(args), "prefill -m %s -p hi --mem 4G", pk);
    assert_int_equal(run(args, out, sizeof(out), NULL, 0), 0);
    assert_non_null(strstr(out, "every expert fits, run resident"));
    /* ppl through the arena equals the resident ppl, digit for digit */
    char text[512], ppl_a[256], ppl_b[256];
    snprintf(text, sizeof(text), "%s", t_tmp_path("ppl.txt"));
    FILE *f = fopen(text, "w");
    assert_non_null(f);
    for (int i = 0; i < 40; i++) fprintf(f, "the quick brown fox %d jumps over the lazy dog. ", i);
    fclose(f);
    snprintf(args, sizeof(args), "ppl -m %s -f %s -c 64 --json 2>/dev/null", pk, text);
    assert_int_equal(run(args, out, sizeof(out), NULL, 0), 0);
    assert_non_null(strstr(out, "\"ppl\": "));
    snprintf(ppl_a, sizeof(ppl_a), "%.20s", strstr(out, "\"ppl\": "));
    snprintf(args, sizeof(args), "ppl -m %s -f %s -c 64 --json --groups 3 --banks 2", pk, text);
    assert_int_equal(run(args, out, sizeof(out), NULL, 0), 0);
    snprintf(ppl_b, sizeof(ppl_b), "%.20s", strstr(out, "\"ppl\": "));
    assert_string_equal(ppl_a, ppl_b);
    assert_non_null(strstr(out, "\"streaming\": true"));
    unlink(text);
    /* bench: one row per budget x policy, after the resident bound; a plot */
    char svg[512];
    snprintf(svg, sizeof(svg), "%s", t_tmp_path("bench.svg"));
    snprintf(args, sizeof(args),
             "bench -m %s -p 8,16 -r 1 --json --policy early,on-demand --groups 2 --banks 2 "
             "--plot %s", pk, svg);
    if (run(args, out, sizeof(out), err, sizeof(err)) != 0) fail_msg("%s: %s", args, err);
    int rows = 0;
    for (const char *q = out; (q = strstr(q, "\"n_prompt\"")); q++) rows++;
    assert_int_equal(rows, 4);
    assert_non_null(strstr(out, "\"policy\": \"on-demand\""));
    assert_non_null(strstr(out, "\"resident_tokens_per_second\": "));
    assert_non_null(strstr(out, "\"disk_bound_tokens_per_second\": "));
    size_t sl = 0;
    char *svgt = t_read_file(svg, &sl);
    assert_non_null(svgt);
    assert_non_null(strstr(svgt, "<svg"));
    assert_non_null(strstr(svgt, "on-demand, 16 tokens"));
    free(svgt);
    unlink(svg);
    /* the bounds' raw-read probe takes every queue depth the loader takes (up to 64) */
    snprintf(args, sizeof(args), "bench -m %s -p 8 -r 1 --json --groups 2 --qd 40", pk);
    if (run(args, out, sizeof(out), err, sizeof(err)) != 0) fail_msg("%s: %s", args, err);
    assert_non_null(strstr(out, "\"qd\": 40"));
    assert_non_null(strstr(out, "\"raw_read_bytes_per_second\": "));
    /* a flipped byte in an expert record: one line naming layer and expert, no logits file */
    snprintf(bad, sizeof(bad), "%s", t_tmp_path("stream-bad.pack"));
    size_t len = 0;
    char *bytes = t_read_file(pk, &len);
    assert_non_null(bytes);
    es_gguf *g = NULL;
    es_pack_layer pl;
    assert_int_equal(es_gguf_open(pk, &g), ES_OK);
    assert_int_equal(es_pack_layer_info(g, 1, &pl), ES_OK);
    const uint64_t at = pl.file_offset + 7 * pl.record_bytes + pl.offsets[ES_PACK_UP] + 5;
    es_gguf_close(g);
    assert_true(at < len);
    bytes[at] ^= 1; /* layer 1, expert 7, its up matrix */
    f = fopen(bad, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, len, f), len);
    fclose(f);
    free(bytes);
    unlink(str);
    snprintf(args, sizeof(args), "prefill -m %s -p 'hello world, once more' --groups 8 "
             "--dump-logits %s", bad, str);
    expect_error(args, "layer 1, expert 7: the record does not match the pack's checksum");
    assert_int_equal(access(str, F_OK), -1);
    unlink(bad);
    unlink(res);
    unlink(pk);
}

/* estream tune on the small preset: the tuning file, its use by prefill (said on stderr and in the
 * summary), --tune none and FILE, a tuning for another thread count or a damaged one, the
 * sweep's JSON, refusals, and an interrupted tune leaving no partial file. */
static void test_tune(void **state)
{
    (void)state;
    char *dir = t_mkdtemp("tune-cli");
    assert_non_null(dir);
    setenv("XDG_CACHE_HOME", dir, 1); /* the storage cache goes there */
    char pk[600], tf[600], args[3000], out[65536], err[4096];
    snprintf(pk, sizeof(pk), "%s/small.pack", dir);
    snprintf(tf, sizeof(tf), "%s/other.tune", dir);
    /* 2 layers x 8 experts of 155 KiB: room between one bank and all of them */
    snprintf(args, sizeof(args), "synth --preset small --type q4_0 -o %s/small.gguf && %s pack "
             "%s/small.gguf -o %s", dir, t_bin(), dir, pk);
    assert_int_equal(run(args, out, sizeof(out), NULL, 0), 0);
    /* an infeasible budget is reported with the smallest that works (not an error) */
    snprintf(args, sizeof(args), "tune -m %s --mem 1K --groups 1,2 --tokens 24 -t 2 --json --out %s",
             pk, tf);
    if (run(args, out, sizeof(out), err, sizeof(err)) != 0) fail_msg("%s: %s", args, err);
    const char *mb = strstr(out, "\"min_budget_bytes\": ");
    assert_non_null(mb);
    assert_non_null(strstr(out, "\"feasible\": false"));
    const unsigned long long min_budget = strtoull(mb + 20, NULL, 10);
    assert_true(min_budget > 1024);
    /* a budget 1 MiB above it (the experts are 2.4 MiB; the prefills below, of a few tokens,
     * need less memory than the tuning's 24-token prompt and would run resident, so they force
     * streaming with --policy early); the tuning goes beside the model by default */
    const unsigned long long budget = min_budget + (1 << 20);
    snprintf(args, sizeof(args), "tune -m %s --mem %llu --groups 1,2 --tokens 24 -t 2 --io-limit 0,50",
             pk, budget);
    if (run(args, out, sizeof(out), err, sizeof(err)) != 0) fail_msg("%s: %s", args, err);
    assert_non_null(strstr(out, "storage:"));
    assert_non_null(strstr(out, "predicted s"));
    char def[700];
    snprintf(def, sizeof(def), "%s.tune", pk);
    size_t len = 0;
    char *text = t_read_file(def, &len);
    assert_non_null(text);
    assert_true(strncmp(text, "estream-tune 1\n", 15) == 0);
    assert_true(len > 5 && strcmp(text + len - 4, "end\n") == 0);
    assert_non_null(strstr(text, "\nchoice "));
    /* prefill with the budget uses it and says so; --tune none does not */
    snprintf(args, sizeof(args), "prefill -m %s -p 'hello there' -t 2 --policy early --mem %llu",
             pk, budget);
    if (run(args, out, sizeof(out), err, sizeof(err)) != 0) fail_msg("%s: %s", args, err);
    assert_non_null(strstr(err, "the arena comes from the tuning"));
    assert_non_null(strstr(out, "tuned:      chosen from the profiles in"));
    snprintf(args, sizeof(args),
             "prefill -m %s -p 'hello there' -t 2 --policy early --mem %llu --json", pk, budget);
    assert_int_equal(run(args, out, sizeof(out), NULL, 0), 0);
    assert_non_null(strstr(out, "\"tuned\": true"));
    snprintf(args, sizeof(args),
             "prefill -m %s -p 'hello there' -t 2 --policy early --mem %llu --tune none", pk,
             budget);
    assert_int_equal(run(args, out, sizeof(out), err, sizeof(err)), 0);
    assert_null(strstr(out, "tuned:"));
    assert_null(strstr(err, "tuning"));
    /* made for 2 threads: a 1-thread run says why it does not use it, and goes on */
    snprintf(args, sizeof(args), "prefill -m %s -p 'hello there' -t 1 --policy early --mem %llu",
             pk, budget);
    assert_int_equal(run(args, out, sizeof(out), err, sizeof(err)), 0);
    assert_non_null(strstr(err, "made for 2 threads, this run uses 1"));
    assert_null(strstr(out, "tuned:"));
    /* --tune FILE that cannot be used is an error; a damaged default one a warning */
    snprintf(args, sizeof(args),
             "prefill -m %s -p hi -t 2 --policy early --mem %llu --tune %s/nothing.tune", pk,
             budget, dir);
    expect_error(args, "cannot use the tuning");
    FILE *f = fopen(def, "wb");
    assert_non_null(f);
    fwrite(text, 1, len / 2, f);
    fclose(f);
    snprintf(args, sizeof(args), "prefill -m %s -p hi -t 2 --policy early --mem %llu", pk, budget);
    assert_int_equal(run(args, out, sizeof(out), err, sizeof(err)), 0);
    assert_non_null(strstr(err, "not using the tuning"));
    snprintf(args, sizeof(args), "prefill -m %s -p hi -t 2 --policy early --mem %llu --tune %s", pk,
             budget, def);
    expect_error(args, "line ");
    snprintf(args, sizeof(args), "prefill -m %s -p hi -t 2 --groups 2 --tune %s", pk, tf);
    expect_error(args, "--tune needs --mem");
    free(text);
    /* the sweep: the oracle, the choice and the regret in JSON */
    snprintf(args, sizeof(args), "tune -m %s --mem %llu --groups 1,2 --tokens 16 -t 2 --sweep "
             "--reps 1 --json --out %s", pk, budget, tf);
    if (run(args, out, sizeof(out), err, sizeof(err)) != 0) fail_msg("%s: %s", args, err);
    const char *keys[] = {"\"tune_seconds\": ", "\"sweep_seconds\": ", "\"oracle\": {\"groups\": ",
                          "\"chosen\": {\"groups\": ", "\"regret\": ", "\"predicted_seconds\": ",
                          "\"default\": {\"groups\": ", "\"sweep_runs\": "};
    for (size_t i = 0; i < T_LEN(keys); i++)
        if (!strstr(out, keys[i])) fail_msg("no %s in %s", keys[i], out);
    const double regret = strtod(strstr(out, "\"regret\": ") + 10, NULL);
    assert_true(regret >= 0);
    /* refusals */
    snprintf(args, sizeof(args), "tune -m %s", pk);
    expect_error(args, "--mem");
    snprintf(args, sizeof(args), "tune -m %s --mem 1G --groups 0", pk);
    expect_error(args, "--groups");
    snprintf(args, sizeof(args), "tune -m %s --mem 1G --groups 1,1", pk);
    expect_error(args, "given twice");
    snprintf(args, sizeof(args), "tune -m %s --mem 1G --io-limit -5", pk);
    expect_error(args, "--io-limit");
    snprintf(args, sizeof(args), "tune -m %s --mem lots", pk);
    expect_error(args, "--mem");
    snprintf(args, sizeof(args), "tune -m %s --mem 1G --out %s", pk, dir); /* a directory */
    expect_error(args, "cannot write");
    /* interrupted: no temporary file, and the tuning is either absent or whole */
    unlink(tf);
    char bud[32];
    snprintf(bud, sizeof(bud), "%llu", budget);
    char *argv[] = {(char *)t_bin(), "tune", "-m", pk, "--mem", bud, "--groups", "1,2", "-t", "2",
                    "--tokens", "16", "--sweep", "--reps", "100", "--out", tf, NULL};
    pid_t pid = spawn(argv);
    assert_true(pid > 0);
    usleep(300000);
    assert_int_equal(kill(pid, SIGINT), 0);
    const int st = wait_for(pid, 20.0);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGINT)
        fail_msg("tune: wait status %#x, want death by SIGINT", st);
    assert_false(has_temp(dir));
    char *left = t_read_file(tf, &len);
    if (left) assert_true(len > 4 && strcmp(left + len - 4, "end\n") == 0);
    free(left);
    unsetenv("XDG_CACHE_HOME");
    t_rm_rf(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_info_details),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_flags),
        cmocka_unit_test(test_reference_output),
        cmocka_unit_test(test_system),
        cmocka_unit_test(test_unknown_architecture),
        cmocka_unit_test(test_broken_tokenizer_one_line),
        cmocka_unit_test(test_prefill_json_and_dump),
        cmocka_unit_test(test_tokenize_vocab_only),
        cmocka_unit_test(test_tokenize_vocab_bomb),
        cmocka_unit_test(test_synth_and_ppl_json),
        cmocka_unit_test(test_user_tmp_untouched),
        cmocka_unit_test(test_interrupted_synth),
        cmocka_unit_test(test_output_symlink),
        cmocka_unit_test(test_output_fifo_and_stdout),
        cmocka_unit_test(test_output_bad_dirs),
        cmocka_unit_test(test_pack),
        cmocka_unit_test(test_streaming_flags),
        cmocka_unit_test(test_tune),
    };
    if (getenv("T_FILTER")) cmocka_set_test_filter(getenv("T_FILTER")); /* e.g. T_FILTER=test_tune */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
