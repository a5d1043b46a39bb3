/* estream embed: pooled embeddings (the final hidden state after the output norm) of texts or
 * token ids from a JSONL file, as JSONL records or one float32 .npy matrix (job driver: jsonl.c).
 *
 * DESIGN
 * - Tokenization is llama-embedding's (common_tokenize with add_special and parse_special):
 *   BOS (and EOS) as the tokenizer asks, special-token text recognised; ids are used as given.
 * - The .npy output holds one row per record in input order (blank lines have none), kept in
 *   memory and written once at the end as an output file (estream.h: a temporary file renamed
 *   when complete), so it has no resume and no place for error records.
 */
#include "cli/cli.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: estream embed -m MODEL -f IN.jsonl [-o OUT.jsonl | -o OUT.npy]\n"
    "                     [--pooling mean|last|first|none] [--no-normalize] [--batch-tokens N]\n"
    "                     [--on-error stop|skip] [--shard I/N | --shard-range I/N] [--json]\n"
    "                     [-t THREADS] [--mem BUDGET] [streaming options]\n"
    "\n"
    "Embeds each record: the model's final hidden state (after the output norm), pooled over the\n"
    "record's tokens. Records: {\"text\": S} (tokenized as llama-embedding does: BOS, and EOS,\n"
    "where the tokenizer adds them; special-token text recognised) or {\"ids\": [..]} (used as\n"
    "given); other members are ignored.\n"
    "  -o OUT.jsonl       (or stdout) one line per record: {\"line\": N, \"id\": ..., \"embedding\":\n"
    "                     [n_embd floats], \"n_tokens\": k}; with --pooling none \"embedding\" is\n"
    "                     [k][n_embd]. Resumable like estream score\n"
    "  -o OUT.npy         a float32 little-endian array [records][n_embd] (NPY 1.0), written\n"
    "                     once at the end (it appears only when complete; no resume; not with\n"
    "                     --pooling none or --on-error skip)\n"
    "  --pooling P        mean (default: over every token, BOS included), last, first, none\n"
    "  --no-normalize     raw vectors (default: L2-normalised, llama-embedding's\n"
    "                     --embd-normalize 2)\n";

typedef struct embed_ctx {
    es_pooling pooling;
    int normalize;
    int n_embd;
    bool npy;
    float *rows; /* .npy: [n_rows][n_embd] */
    size_t n_rows, cap_rows;
} embed_ctx;

static void parse(cli_job *j, json_t *o, cli_rec *r)
{
    embed_ctx *c = j->ctx;
    json_t *text = json_object_get(o, "text"), *ids = json_object_get(o, "ids");
    if (!!text == !!ids) {
        cli_rec_fail(r, text ? "give \"text\" or \"ids\", not both" : "no \"text\" or \"ids\" member");
        return;
    }
    r->seqs = calloc(1, sizeof(es_seq));
    if (!r->seqs) cli_die("out of memory");
    r->n_seqs = 1;
    es_seq *q = &r->seqs[0];
    if (text) {
        if (!json_is_string(text)) {
            cli_rec_fail(r, "\"text\" is not a string");
            return;
        }
        if (json_string_length(text) == 0) {
            cli_rec_fail(r, "\"text\" is empty");
            return;
        }
        size_t n;
        int32_t *v = cli_rec_tokenize(j, r, json_string_value(text), json_string_length(text), 1,
                                      1, &n);
        if (!v) return;
        q->ids = v;
        q->n_ids = n;
    } else {
        size_t n;
        if (!(q->ids = cli_rec_ids(j, r, ids, &n))) return;
        q->n_ids = n;
    }
    if (!cli_rec_check_ids(j, r, q->ids, q->n_ids, text ? "the text" : "\"ids\"")) return;
    q->pooling = c->pooling;
    q->normalize = c->normalize;
    const size_t rows = c->pooling == ES_POOLING_NONE ? q->n_ids : 1;
    q->embedding = malloc(rows * (size_t)es_model_n_embd(j->m) * sizeof(float));
    if (!q->embedding) cli_die("out of memory");
}

static void emit(cli_job *j, cli_rec *r, json_t *o)
{
    embed_ctx *c = j->ctx;
    const es_seq *q = &r->seqs[0];
    const size_t d = (size_t)es_model_n_embd(j->m);
    if (c->npy) {
        if (c->n_rows == c->cap_rows &&
            !(c->rows = realloc(c->rows, (c->cap_rows = 2 * c->cap_rows + 64) * d * sizeof(float))))
            cli_die("out of memory");
        memcpy(c->rows + c->n_rows++ * d, q->embedding, d * sizeof(float));
        return;
    }
    const size_t rows = c->pooling == ES_POOLING_NONE ? q->n_ids : 1;
    json_t *all = c->pooling == ES_POOLING_NONE ? json_array() : NULL, *v = NULL;
    for (size_t t = 0; t < rows; t++) {
        v = json_array();
        for (size_t i = 0; i < d; i++)
            json_array_append_new(v, cli_json_float(q->embedding[t * d + i]));
        if (all) json_array_append_new(all, v);
    }
    json_object_set_new(o, "embedding", all ? all : v);
    json_object_set_new(o, "n_tokens", json_integer((json_int_t)q->n_ids));
}

static void free_rec(cli_job *j, cli_rec *r)
{
    (void)j;
    for (int i = 0; i < r->n_seqs; i++) {
        free((void *)r->seqs[i].ids);
        free(r->seqs[i].embedding);
    }
    free(r->seqs);
}

/* NPY 1.0: magic, version, a little-endian u16 header length, the header dict padded with
 * spaces and a newline to a multiple of 64 bytes, then the data. */
static void write_npy(const char *path, const float *rows, size_t n, size_t d)
{
    char dict[128];
    int k = snprintf(dict, sizeof(dict),
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, %zu), }", n, d);
    const size_t pre = 10, hlen = ((pre + (size_t)k + 1 + 63) / 64) * 64 - pre;
    const size_t bytes = pre + hlen + n * d * sizeof(float);
    unsigned char *b = malloc(bytes);
    if (!b) cli_die("out of memory");
    memcpy(b, "\x93NUMPY\x01\x00", 8);
    b[8] = (unsigned char)(hlen & 0xff);
    b[9] = (unsigned char)(hlen >> 8);
    memset(b + pre, ' ', hlen);
    memcpy(b + pre, dict, (size_t)k);
    b[pre + hlen - 1] = '\n';
    /* float32 little-endian: the host order on x86-64 and AArch64 Linux */
    if (n) memcpy(b + pre + hlen, rows, n * d * sizeof(float));
    es_status st = es_outfile_save(path, b, bytes);
    if (st) cli_die_status(st, path);
    free(b);
}

static const cli_job_ops ops = {parse, emit, free_rec, NULL, NULL};

int cmd_embed(int argc, char **argv)
{
    cli_args a = {argc, 1, argv, "embed"};
    embed_ctx c = {.pooling = ES_POOLING_MEAN, .normalize = 1};
    cli_job j = {.cmd = "embed", .ops = &ops, .ctx = &c};
    for (; a.i < argc; a.i++) {
        const char *s = argv[a.i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            fputs(help, stdout);
            fputs(cli_job_help, stdout);
            fputs(cli_stream_help, stdout);
            return 0;
        } else if (cli_job_flag(&a, s, &j)) continue;
        else if (!strcmp(s, "--no-normalize")) c.normalize = 0;
        else if (!strcmp(s, "--pooling")) {
            const char *v = cli_value(&a, s);
            static const es_pooling all[] = {ES_POOLING_MEAN, ES_POOLING_LAST, ES_POOLING_FIRST,
                                             ES_POOLING_NONE};
            size_t i = 0;
            while (i < CLI_LEN(all) && strcmp(v, es_pooling_name(all[i]))) i++;
            if (i == CLI_LEN(all))
                cli_die("embed: --pooling: expected mean, last, first or none, got '%s'", v);
            c.pooling = all[i];
        } else cli_unknown(&a, s);
    }
    const char *o = j.out_path;
    c.npy = o && strlen(o) >= 4 && !strcmp(o + strlen(o) - 4, ".npy");
    if (c.npy && c.pooling == ES_POOLING_NONE)
        cli_die("embed: --pooling none gives a matrix per record; write JSONL, not .npy");
    if (c.npy && j.skip_errors)
        cli_die("embed: --on-error skip needs JSONL output (an .npy has no place for errors)");
    j.no_resume = c.npy;
    j.options = json_pack("{s:s,s:b}", "pooling", es_pooling_name(c.pooling), "normalize",
                          c.normalize);
    cli_job_run(&j);
    if (c.npy) write_npy(o, c.rows, c.n_rows, (size_t)es_model_n_embd(j.m));
    free(c.rows);
    json_decref(j.options);
    es_model_close(j.m);
    return 0;
}
