/* estream embed: pooled embeddings (the final hidden state after the output norm) of texts or
 * token ids from a JSONL file, as JSONL records or one float32 .npy matrix (job driver: jsonl.c).
 *
 * What a record means (tokenization, pooling) is the library's (src/job/record.c), read from
 * JSON by src/records/embed_rec.c.
 *
 * DESIGN
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
    embed_opts o;
    bool npy;
    float *rows; /* .npy: [n_rows][n_embd] */
    size_t n_rows, cap_rows;
} embed_ctx;

static void parse(cli_job *j, json_t *o, rec *r)
{
    embed_ctx *c = j->ctx;
    embed_rec_parse(j->m, &c->o, o, r);
}

/* JSONL: the record's fields; .npy (o NULL): its row, kept for the end. */
static bool emit(cli_job *j, const rec *r, json_t *o)
{
    embed_ctx *c = j->ctx;
    if (!c->npy) return embed_rec_emit(j->m, &c->o, r, o);
    const size_t d = (size_t)es_model_n_embd(j->m);
    if (c->n_rows == c->cap_rows &&
        !(c->rows = realloc(c->rows, (c->cap_rows = 2 * c->cap_rows + 64) * d * sizeof(float))))
        cli_die("out of memory");
    memcpy(c->rows + c->n_rows++ * d, r->seqs[0].embedding, d * sizeof(float));
    return true;
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

static const cli_job_ops ops = {parse, emit, NULL, NULL};

int cmd_embed(int argc, char **argv)
{
    cli_args a = {argc, 1, argv, "embed"};
    embed_ctx c = {.o = {.pooling = ES_POOLING_MEAN, .normalize = 1}};
    cli_job j = {.cmd = "embed", .ops = &ops, .ctx = &c};
    for (; a.i < argc; a.i++) {
        const char *s = argv[a.i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            fputs(help, stdout);
            fputs(cli_job_help, stdout);
            fputs(cli_stream_help, stdout);
            return 0;
        } else if (cli_job_flag(&a, s, &j)) continue;
        else if (!strcmp(s, "--no-normalize")) c.o.normalize = 0;
        else if (!strcmp(s, "--pooling")) {
            const char *v = cli_value(&a, s);
            static const es_pooling all[] = {ES_POOLING_MEAN, ES_POOLING_LAST, ES_POOLING_FIRST,
                                             ES_POOLING_NONE};
            size_t i = 0;
            while (i < CLI_LEN(all) && strcmp(v, es_pooling_name(all[i]))) i++;
            if (i == CLI_LEN(all))
                cli_die("embed: --pooling: expected mean, last, first or none, got '%s'", v);
            c.o.pooling = all[i];
        } else cli_unknown(&a, s);
    }
    const char *o = j.out_path;
    c.npy = o && strlen(o) >= 4 && !strcmp(o + strlen(o) - 4, ".npy");
    if (c.npy && c.o.pooling == ES_POOLING_NONE)
        cli_die("embed: --pooling none gives a matrix per record; write JSONL, not .npy");
    if (c.npy && j.skip_errors)
        cli_die("embed: --on-error skip needs JSONL output (an .npy has no place for errors)");
    j.no_resume = c.npy;
    j.no_head = true; /* embeddings only: no chunk of logits is counted in the budget */
    j.options = json_pack("{s:s,s:b}", "pooling", es_pooling_name(c.o.pooling), "normalize",
                          c.o.normalize);
    cli_job_run(&j);
    if (c.npy) write_npy(o, c.rows, c.n_rows, (size_t)es_model_n_embd(j.m));
    free(c.rows);
    json_decref(j.options);
    es_model_close(j.m);
    return 0;
}
