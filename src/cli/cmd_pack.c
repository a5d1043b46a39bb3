/* estream pack: write the execution-ready pack of a GGUF model (src/pack/pack.h). */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char help[] =
    "usage: estream pack -m MODEL.gguf -o OUT.pack [--json]\n"
    "       estream pack MODEL.gguf -o OUT.pack [--json]\n"
    "\n"
    "Writes the pack of a GGUF MoE model: the file estream streams expert weights from when the\n"
    "model does not fit in memory. The weights of an expert are spread over three tensors in a\n"
    "GGUF file (gate, up and down of all experts), so reading one expert takes three reads; in a\n"
    "pack, each expert is one record [gate | up | down] padded to 4 KiB, stored in expert order\n"
    "at 4 KiB-aligned offsets, so any G consecutive experts are one contiguous aligned read\n"
    "(O_DIRECT, no page cache), whatever G the memory budget picks. Each record carries an\n"
    "XXH3-64 checksum so a loader can verify what it read.\n"
    "\n"
    "A pack is still a GGUF file: every metadata key and every non-expert tensor of the model is\n"
    "copied unchanged, and the weights keep their bytes (no requantization, no more bytes per\n"
    "weight, padding aside). `estream info` shows it. The file is written atomically: on failure\n"
    "nothing is left at OUT. Packing a pack is refused.\n"
    "\n"
    "Prints one summary line (records, bytes, time, MB/s) on stdout, or a JSON object with\n"
    "--json; progress goes to stderr.\n";

/* "3.38 MiB" into buf. */
static const char *fmt_bytes(char *buf, size_t cap, double b)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) { b /= 1024; i++; }
    snprintf(buf, cap, i ? "%.2f %s" : "%.0f %s", b, u[i]);
    return buf;
}

typedef struct prog {
    int last_tenth;
    bool tty;
} prog;

/* On a terminal one line redrawn in place; otherwise a line per 10% (large files only). */
static void progress(void *user, uint64_t done, uint64_t total)
{
    prog *p = user;
    if (total < ((uint64_t)64 << 20)) return;
    const double pct = 100.0 * (double)done / (double)total;
    if (p->tty) {
        fprintf(stderr, "\rpack: %5.1f%% of %.2f GiB of work", pct, (double)total / (1u << 30));
        if (done == total) fputc('\n', stderr);
    } else if ((int)(pct / 10) > p->last_tenth) {
        p->last_tenth = (int)(pct / 10);
        fprintf(stderr, "pack: %3.0f%% of %.2f GiB of work\n", pct, (double)total / (1u << 30));
    }
}

int cmd_pack(int argc, char **argv)
{
    cli_args a = {argc, 1, argv, "pack"};
    const char *model = NULL, *out = NULL;
    bool json = false;
    for (; a.i < argc; a.i++) {
        const char *s = argv[a.i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) { fputs(help, stdout); return 0; }
        else if (!strcmp(s, "-m") || !strcmp(s, "--model")) model = cli_value(&a, s);
        else if (!strcmp(s, "-o") || !strcmp(s, "--output")) out = cli_value(&a, s);
        else if (!strcmp(s, "--json")) json = true;
        else if (s[0] == '-' && s[1]) cli_unknown(&a, s);
        else if (!model) model = s;
        else cli_die("pack: more than one model given ('%s' and '%s')", model, s);
    }
    if (!model) cli_die("pack: no model: give -m MODEL.gguf");
    if (!out) cli_die("pack: give the output file with -o OUT.pack");
    prog pr = {.tty = isatty(STDERR_FILENO) != 0};
    es_pack_opts o = {.progress = progress, .user = &pr};
    es_pack_result r;
    const uint64_t t0 = cli_now_ns();
    es_status st = es_pack(model, out, &o, &r);
    const double secs = (double)(cli_now_ns() - t0) / 1e9;
    if (st) {
        if (pr.tty) fputc('\n', stderr); /* end a partly drawn progress line */
        cli_die_status(st, "pack");
    }
    const double mbps = secs > 0 ? (double)r.file_bytes / secs / 1e6 : 0.0;
    if (json) {
        printf("{\"source\": ");
        cli_json_str(stdout, model, strlen(model));
        printf(", \"output\": ");
        cli_json_str(stdout, out, strlen(out));
        printf(", \"layers\": %d, \"records\": %lld, \"record_bytes\": %llu, "
               "\"expert_bytes\": %llu, \"file_bytes\": %llu, \"source_bytes\": %llu, "
               "\"seconds\": %.3f, \"mb_per_s\": %.1f}\n",
               r.n_layers, (long long)r.n_records, (unsigned long long)r.record_bytes,
               (unsigned long long)r.expert_bytes, (unsigned long long)r.file_bytes,
               (unsigned long long)r.source_bytes, secs, mbps);
    } else {
        char rb[32], fb[32], sb[32];
        printf("pack: wrote %s: %d layers, %lld records of %s, %s (source %s) in %.2f s, "
               "%.0f MB/s\n", out, r.n_layers, (long long)r.n_records,
               fmt_bytes(rb, sizeof(rb), (double)r.record_bytes),
               fmt_bytes(fb, sizeof(fb), (double)r.file_bytes),
               fmt_bytes(sb, sizeof(sb), (double)r.source_bytes), secs, mbps);
    }
    return 0;
}
