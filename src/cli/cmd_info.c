/* estream info: architecture, hyperparameters, tensor table and expert sizes of a GGUF file;
 * with --system, the CPU, its features and the kernel table the fast path would use. */
#include "cli/cli.h"
#include "core/cpu.h"
#include "model/model.h"
#include "quant/kern.h"
#include "pack/pack.h"
#include "quant/tiles.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char help[] =
    "usage: estream info -m MODEL\n"
    "       estream info --system\n"
    "\n"
    "Prints the architecture, hyperparameters, tokenizer, every tensor (type, shape, bytes) and the\n"
    "bytes of one expert per layer. Vocabulary-only files (no weights) show the tokenizer only.\n"
    "A pack (estream pack) shows its version, layout, source and the record size of each layer.\n"
    "\n"
    "--system prints this machine instead: the CPU, the features estream detected (and the OS\n"
    "enabled), its caches, and the kernel table the fast path uses (the best this CPU runs, or the\n"
    "one ESTREAM_ISA names) with every table it could run. `estream bench` prints the same.\n";

void cli_print_system(FILE *f)
{
    const es_cpu_info *ci = es_cpu_get();
    char fl[512];
    fprintf(f, "cpu:           %s (%ld online CPUs)\n", ci->brand, sysconf(_SC_NPROCESSORS_ONLN));
    fprintf(f, "features:      %s\n", es_cpu_flags_str(ci->flags, fl, sizeof(fl)));
    fprintf(f, "caches:        L1d %zu KiB, L2 %zu KiB, L3 %zu KiB (%s)\n", ci->l1d_bytes >> 10,
            ci->l2_bytes >> 10, ci->l3_bytes >> 10, ci->cache_from_cpuid ? "cpuid" : "defaults");
}

static void print_kernels(FILE *f)
{
    fprintf(f, "kernels:       %s (runs here:", es_kernels_name());
    for (int i = 0; i < ES_KERN_N_ISA; i++)
        if (es_kernels_available(es_kern_isa_names[i])) fprintf(f, " %s", es_kern_isa_names[i]);
    const char *env = getenv("ESTREAM_ISA");
    fprintf(f, "; %s)\n", env && *env ? "ESTREAM_ISA is set" : "the best; ESTREAM_ISA picks another");
}

void cli_system_json(FILE *f)
{
    const es_cpu_info *ci = es_cpu_get();
    char fl[512];
    es_cpu_flags_str(ci->flags, fl, sizeof(fl));
    fputs("\"cpu\": ", f);
    cli_json_str(f, ci->brand, strlen(ci->brand));
    fputs(", \"cpu_features\": ", f);
    cli_json_str(f, fl, strlen(fl));
}

static void print_bytes(double b)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) { b /= 1024; i++; }
    printf("%.2f %s", b, u[i]);
}

/* The tensor table; returns all bytes and sets *expert_total to the expert tensors' bytes
 * (blk.N.ffn_*_exps.weight in a model, blk.N.ffn_exps in a pack). */
static uint64_t print_tensors(const es_gguf *g, uint64_t *expert_total)
{
    printf("\n%-32s %-6s %-24s %s\n", "tensor", "type", "shape", "bytes");
    uint64_t total = 0;
    *expert_total = 0;
    for (int64_t i = 0; i < es_gguf_n_tensors(g); i++) {
        const es_gguf_tensor *t = es_gguf_tensor_at(g, i);
        char shape[64] = "";
        size_t o = 0;
        for (uint32_t d = 0; d < t->n_dims; d++)
            o += (size_t)snprintf(shape + o, sizeof(shape) - o, "%s%lld", d ? " x " : "",
                                  (long long)t->ne[d]);
        printf("%-32.*s %-6s %-24s %llu\n", (int)t->name.len, t->name.ptr,
               es_qtype_name(t->type), shape, (unsigned long long)t->nbytes);
        total += t->nbytes;
        const es_str n = t->name;
        if ((n.len >= 12 && !memcmp(n.ptr + n.len - 12, "_exps.weight", 12)) ||
            (n.len >= 9 && !memcmp(n.ptr + n.len - 9, ".ffn_exps", 9)))
            *expert_total += t->nbytes;
    }
    return total;
}

/* The pack section: header, then one line per sparse layer. Returns false (after printing
 * the error) if the pack does not validate. */
static bool print_pack(const es_gguf *g)
{
    es_pack_header h;
    if (es_pack_header_get(g, &h) != ES_OK) {
        printf("pack:          invalid: %s\n", es_last_error());
        return false;
    }
    printf("pack:          version %u, layout %.*s, from %.*s (", h.version, (int)h.layout.len,
           h.layout.ptr, (int)h.source.len, h.source.ptr);
    print_bytes((double)h.source_bytes);
    printf(")\n");
    /* Layers: one past the highest N of any tensor named blk.N.* */
    int n_layer = 0;
    for (int64_t i = 0; i < es_gguf_n_tensors(g); i++) {
        const es_str n = es_gguf_tensor_at(g, i)->name;
        long il = 0;
        size_t k = 4;
        if (n.len < 6 || memcmp(n.ptr, "blk.", 4) != 0) continue;
        while (k < n.len && k < 10 && n.ptr[k] >= '0' && n.ptr[k] <= '9')
            il = il * 10 + (n.ptr[k++] - '0');
        if (k > 4 && k < n.len && n.ptr[k] == '.' && il + 1 > n_layer) n_layer = (int)il + 1;
    }
    bool ok = true;
    for (int il = 0; il < n_layer; il++) {
        if (!es_pack_has_layer(g, il)) continue; /* a dense layer */
        es_pack_layer l;
        if (es_pack_layer_info(g, il, &l) != ES_OK) {
            printf("  layer %-3d    invalid: %s\n", il, es_last_error());
            ok = false;
            continue;
        }
        /* a matrix in the kernels' tile order is marked "/tiles" (quant/tiles.h) */
        const char *lay[3];
        for (int i = 0; i < 3; i++) lay[i] = l.layouts[i] == ES_LAYOUT_TILES ? "/tiles" : "";
        printf("  layer %-3d    %lld records of %llu bytes (gate %s%s @0, up %s%s @%llu, down "
               "%s%s @%llu) at file offset %llu\n", il, (long long)l.n_expert,
               (unsigned long long)l.record_bytes, es_qtype_name(l.types[ES_PACK_GATE]), lay[0],
               es_qtype_name(l.types[ES_PACK_UP]), lay[1], (unsigned long long)l.offsets[ES_PACK_UP],
               es_qtype_name(l.types[ES_PACK_DOWN]), lay[2],
               (unsigned long long)l.offsets[ES_PACK_DOWN], (unsigned long long)l.file_offset);
    }
    return ok;
}

/* A pack that does not open as a model: file line, name, architecture, pack, tensors. */
static int info_pack_only(const char *model, const es_gguf *g)
{
    printf("file:          %s (GGUF v%u, %lld tensors, %lld metadata keys, ", model,
           es_gguf_version(g), (long long)es_gguf_n_tensors(g), (long long)es_gguf_n_kv(g));
    print_bytes((double)es_gguf_file_size(g));
    printf(")\n");
    es_str s;
    if (es_gguf_get_str(g, "general.name", &s)) printf("name:          %.*s\n", (int)s.len, s.ptr);
    if (es_gguf_get_str(g, "general.architecture", &s))
        printf("architecture:  %.*s\n", (int)s.len, s.ptr);
    bool ok = print_pack(g);
    uint64_t expert_total;
    const uint64_t total = print_tensors(g, &expert_total);
    printf("\nweights:       ");
    print_bytes((double)total);
    printf(" (expert records ");
    print_bytes((double)expert_total);
    printf(")\n");
    if (!ok) cli_die("%s: the pack does not validate (see above)", model);
    return 0;
}

int cmd_info(int argc, char **argv)
{
    cli_args a = {argc, 1, argv, "info"};
    const char *model = NULL;
    bool sys = false;
    for (; a.i < argc; a.i++) {
        const char *s = argv[a.i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) { fputs(help, stdout); return 0; }
        else if (!strcmp(s, "-m") || !strcmp(s, "--model")) model = cli_value(&a, s);
        else if (!strcmp(s, "--system")) sys = true;
        else cli_unknown(&a, s);
    }
    if (sys) {
        if (model) cli_die("info: give either -m MODEL or --system, not both");
        cli_print_system(stdout);
        print_kernels(stdout);
        return 0;
    }
    if (!model) cli_die("info: no model: give -m MODEL (or --system for this machine)");
    /* Open with weights; a file without an architecture or weights falls back to vocab-only. */
    es_model *m = NULL;
    es_status st = es_model_open(model, 0, &m);
    if (st) {
        /* A pack the model loader does not open (yet): show it from the GGUF alone. */
        char *err = strdup(es_last_error());
        es_gguf *pg = NULL;
        if (es_gguf_open(model, &pg) == ES_OK && es_pack_is_pack(pg)) {
            free(err);
            int rc = info_pack_only(model, pg);
            es_gguf_close(pg);
            return rc;
        }
        es_gguf_close(pg);
        es_fail(st, "%s", err ? err : es_status_str(st));
        free(err);
        es_model *v = NULL;
        if (es_model_open(model, ES_OPEN_VOCAB_ONLY, &v) != ES_OK || v->arch[0])
            cli_die("%s", es_last_error());
        m = v;
    }
    const es_gguf *g = m->gguf;
    printf("file:          %s (GGUF v%u, %lld tensors, %lld metadata keys, ", model,
           es_gguf_version(g), (long long)es_gguf_n_tensors(g), (long long)es_gguf_n_kv(g));
    print_bytes((double)es_gguf_file_size(g));
    printf(")\n");
    es_str name;
    if (es_gguf_get_str(g, "general.name", &name)) printf("name:          %.*s\n", (int)name.len, name.ptr);
    printf("architecture:  %s%s%s%s\n", es_model_arch(m), m->family ? " (" : "",
           m->family ? m->family->model_names : "", m->family ? ")" : "");
    es_str tm = {0}, tp = {0};
    es_gguf_get_str(g, "tokenizer.ggml.model", &tm);
    es_gguf_get_str(g, "tokenizer.ggml.pre", &tp);
    printf("tokenizer:     %.*s (pre: %.*s), %d tokens, BOS %d%s\n", (int)tm.len, tm.ptr,
           tp.len ? (int)tp.len : 7, tp.len ? tp.ptr : "default", m->hp.n_vocab,
           es_model_bos(m), es_model_add_bos(m) ? " (added)" : " (not added)");
    if (m->vocab_only) {
        es_model_close(m);
        return 0;
    }
    const es_hparams *hp = &m->hp;
    printf("context:       %d\n", hp->n_ctx);
    printf("hidden:        %d, layers %d, heads %d (kv %d, head dim %d)\n", hp->n_embd,
           hp->n_layer, hp->n_head, hp->n_head_kv, hp->n_embd_head);
    printf("experts:       %d, top-%d%s%s, expert FFN %d\n", hp->n_expert, hp->n_expert_used,
           m->family->gating == ES_GATING_SIGMOID ? " by sigmoid" : "",
           m->family->topk_renorm ? " renormalised" : "", hp->n_ff_exp);
    if (hp->n_conv_layers)
        printf("conv layers:   %d of %d are short convolutions (%d taps) instead of attention\n",
               hp->n_conv_layers, hp->n_layer, hp->n_conv_taps);
    if (hp->n_expert_shared)
        printf("shared:        %d experts (FFN %d) in every MoE layer\n", hp->n_expert_shared,
               hp->n_ff_shexp);
    if (hp->n_layer_dense_lead)
        printf("dense layers:  %d (FFN %d) before the MoE layers\n", hp->n_layer_dense_lead,
               hp->n_ff);
    if (hp->n_lora_kv)
        printf("latent attn:   MLA, latent %d, key heads %d (%d rotary), value heads %d, %s\n",
               hp->n_lora_kv, hp->n_embd_head, hp->n_rot, hp->n_embd_head_v,
               hp->mla_split ? "attn_k_b/attn_v_b" : "joined attn_kv_b");
    printf("rope base:     %g, rms eps %g\n", (double)hp->rope_freq_base, (double)hp->rms_eps);
    if (hp->rope_freq_scale != 1.0f)
        printf("rope scaling:  %s x%g (softmax scale %.6g)\n",
               hp->rope_ext_factor != 0.0f ? "yarn" : "linear", 1.0 / (double)hp->rope_freq_scale,
               (double)hp->attn_scale);
    if (es_pack_is_pack(g)) print_pack(g);
    uint64_t expert_total;
    const uint64_t total = print_tensors(g, &expert_total);
    printf("\nweights:       ");
    print_bytes((double)total);
    printf(" (experts ");
    print_bytes((double)expert_total);
    printf(", %.1f%%)\n", total ? 100.0 * (double)expert_total / (double)total : 0.0);
    const int il = hp->n_layer_dense_lead; /* the first MoE layer */
    const es_layer *L = &m->layers[il];
    printf("one expert:    ");
    print_bytes((double)es_model_expert_bytes(m, il));
    printf(" (gate %s, up %s, down %s in layer %d)\n", es_qtype_name(L->gate_exps.type),
           es_qtype_name(L->up_exps.type), es_qtype_name(L->down_exps.type), il);
    es_model_close(m);
    return 0;
}
