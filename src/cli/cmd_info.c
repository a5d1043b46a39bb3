/* estream info: architecture, hyperparameters, tensor table and expert sizes of a GGUF file;
 * with --system, the CPU, its features and the kernel table the fast path would use. */
#include "cli/cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: estream info -m MODEL\n"
    "       estream info --system\n"
    "\n"
    "Prints the architecture, hyperparameters, tokenizer, how estream read the router (gating,\n"
    "selection bias, expert groups, weight scale) and the attention (fused q/k/v, biases, q/k\n"
    "norms, sliding windows, layers without RoPE), muP multipliers and multi-token-prediction\n"
    "blocks it does not run, every tensor (type, shape, bytes) and the bytes of one expert per\n"
    "layer. Vocabulary-only files (no weights) show the tokenizer only.\n"
    "A pack (estream pack) shows its version, layout, source and the record size of each layer.\n"
    "\n"
    "--system prints this machine instead: the CPU, the features estream detected (and the OS\n"
    "enabled), its caches, the default thread count and what set it (OMP_NUM_THREADS, else one\n"
    "per physical core among the CPUs this process may run on, at most its cgroup's CPU quota\n"
    "rounded up), the memory it may use (MemTotal, or its cgroup's lower limit), and the\n"
    "kernel table the fast path uses (the best this CPU runs, or the one ESTREAM_ISA names) with\n"
    "every table it could run, and why each other table of this architecture does not (amx:\n"
    "AMX-TILE/AMX-INT8 in CPUID, the tile state in XCR0, the kernel's permission). `estream\n"
    "bench` prints the same.\n";

void cli_print_system(FILE *f)
{
    es_cpu_desc c;
    es_cpu_describe(&c);
    fprintf(f, "cpu:           %s (%d online CPUs)\n", c.brand, c.cpus_online);
    fprintf(f, "features:      %s\n", c.features);
    fprintf(f, "caches:        L1d %zu KiB, L2 %zu KiB, L3 %zu KiB (%s)\n", c.l1d_bytes >> 10,
            c.l2_bytes >> 10, c.l3_bytes >> 10, c.cache_from_cpuid ? "cpuid" : "defaults");
    char quota[48] = "none";
    if (c.cpu_quota > 0) snprintf(quota, sizeof(quota), "%.2f CPUs", c.cpu_quota);
    fprintf(f, "threads:       %d by default (-t sets them)%s: CPUs it may run on %d of %d, "
               "physical cores %d, cgroup CPU quota %s\n",
            c.default_threads, c.omp_threads > 0 ? ", from OMP_NUM_THREADS" : "", c.cpus_allowed,
            c.cpus_online, c.cores, quota);
    if (c.perf_cores)
        fprintf(f, "hybrid:        %d performance cores and %d efficiency-core CPUs, both counted "
                   "(llama.cpp's default leaves the efficiency cores out: -t %d compares with it)\n",
                c.perf_cores, c.eff_cpus, c.perf_cores);
    const uint64_t mib = 1u << 20;
    char cg[48] = "none";
    if (c.mem_cgroup) snprintf(cg, sizeof(cg), "%" PRIu64 " MiB", c.mem_cgroup / mib);
    fprintf(f, "memory:        %" PRIu64 " MiB this process may use (%s): MemTotal %" PRIu64
               " MiB, cgroup limit %s; --mem auto streams a model file larger than %" PRIu64
               " MiB\n",
            c.mem_bytes / mib, c.mem_source[0] ? c.mem_source : "unknown", c.mem_total / mib, cg,
            c.mem_bytes / 100 * ES_MEM_AUTO_PERCENT / mib);
}

static void print_kernels(FILE *f)
{
    fprintf(f, "kernels:       %s (runs here:", es_kernels_name());
    for (const char *const *k = es_kernels_list(); *k; k++)
        if (es_kernels_available(*k)) fprintf(f, " %s", *k);
    const char *env = getenv("ESTREAM_ISA");
    fprintf(f, "; %s)\n", env && *env ? "ESTREAM_ISA is set" : "the best; ESTREAM_ISA picks another");
    /* the tables of this build's architecture that do not run here, and why */
    for (const char *const *k = es_kernels_list(); *k; k++) {
        const char *why = es_kernels_why_not(*k);
        if (why && !strstr(why, "this build is not for"))
            fprintf(f, "not here:      %s: %s\n", *k, why);
    }
}

void cli_system_json(FILE *f)
{
    es_cpu_desc c;
    es_cpu_describe(&c);
    fputs("\"cpu\": ", f);
    cli_json_str(f, c.brand, strlen(c.brand));
    fputs(", \"cpu_features\": ", f);
    cli_json_str(f, c.features, strlen(c.features));
    fprintf(f, ", \"cpus_online\": %d, \"cpus_allowed\": %d, \"cores\": %d, \"cpu_quota\": %g, "
               "\"default_threads\": %d, \"omp_num_threads\": %d, \"mem_total\": %" PRIu64 ", \"mem_cgroup\": %" PRIu64
               ", \"mem_limit\": %" PRIu64 ", \"perf_cores\": %d, \"eff_cpus\": %d",
            c.cpus_online, c.cpus_allowed, c.cores, c.cpu_quota, c.default_threads, c.omp_threads,
            c.mem_total,
            c.mem_cgroup, c.mem_bytes, c.perf_cores, c.eff_cpus);
}

static void print_bytes(double b)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) { b /= 1024; i++; }
    printf("%.2f %s", b, u[i]);
}

/* Whether name ends with suffix. */
static bool ends_with(const char *name, const char *suffix)
{
    const size_t n = strlen(name), k = strlen(suffix);
    return n >= k && !memcmp(name + n - k, suffix, k);
}

/* Whether name is a routed expert's tensor: blk.N.ffn_*_exps.weight in a model (or, one tensor
 * per expert, blk.N.ffn_{gate,up,down}.E.weight), blk.N.ffn_exps in a pack. */
static bool is_expert_tensor(const char *name)
{
    char kind[8];
    int e, end = 0;
    if (ends_with(name, "_exps.weight") || ends_with(name, ".ffn_exps")) return true;
    return sscanf(name, "blk.%*d.ffn_%7[a-z].%d.weight%n", kind, &e, &end) == 2 &&
           end == (int)strlen(name) &&
           (!strcmp(kind, "gate") || !strcmp(kind, "up") || !strcmp(kind, "down"));
}

/* The tensor table; returns all bytes and sets *expert_total to the expert tensors' bytes. */
static uint64_t print_tensors(const es_file_desc *d, uint64_t *expert_total)
{
    printf("\n%-32s %-6s %-24s %s\n", "tensor", "type", "shape", "bytes");
    uint64_t total = 0;
    *expert_total = 0;
    for (int64_t i = 0; i < d->n_tensors; i++) {
        const es_file_tensor *t = &d->tensors[i];
        char shape[64] = "";
        size_t o = 0;
        for (int k = 0; k < t->n_dims; k++)
            o += (size_t)snprintf(shape + o, sizeof(shape) - o, "%s%lld", k ? " x " : "",
                                  (long long)t->ne[k]);
        printf("%-32s %-6s %-24s %llu\n", t->name, t->type, shape, (unsigned long long)t->bytes);
        total += t->bytes;
        if (is_expert_tensor(t->name)) *expert_total += t->bytes;
    }
    return total;
}

/* The pack section: header, then one line per sparse layer. Returns false (after printing
 * the error) if the pack does not validate. */
static bool print_pack(const es_file_desc *d)
{
    if (d->pack_error) {
        printf("pack:          invalid: %s\n", d->pack_error);
        return false;
    }
    printf("pack:          version %u, layout %s, from %s (", d->pack_version, d->pack_layout,
           d->pack_source);
    print_bytes((double)d->pack_source_bytes);
    printf(")\n");
    bool ok = true;
    for (int i = 0; i < d->n_pack_layers; i++) {
        const es_file_pack_layer *l = &d->pack_layers[i];
        if (l->error) {
            printf("  layer %-3d    invalid: %s\n", l->layer, l->error);
            ok = false;
            continue;
        }
        /* a matrix in the kernels' tile order is marked "/tiles" */
        const char *lay[3];
        for (int k = 0; k < 3; k++) lay[k] = l->tiles[k] ? "/tiles" : "";
        printf("  layer %-3d    %lld records of %llu bytes (gate %s%s @0, up %s%s @%llu, down "
               "%s%s @%llu) at file offset %llu\n", l->layer, (long long)l->n_records,
               (unsigned long long)l->record_bytes, l->types[0], lay[0], l->types[1], lay[1],
               (unsigned long long)l->offsets[1], l->types[2], lay[2],
               (unsigned long long)l->offsets[2], (unsigned long long)l->file_offset);
    }
    return ok;
}

/* The first line: the file, its GGUF version, counts and size. */
static void print_file_line(const char *model, const es_file_desc *d)
{
    printf("file:          %s (GGUF v%u, %lld tensors, %lld metadata keys, ", model,
           d->gguf_version, (long long)d->n_tensors, (long long)d->n_kv);
    print_bytes((double)d->file_bytes);
    if (d->n_files > 1) printf(" in %u parts", d->n_files);
    printf(")\n");
}

/* A pack that does not open as a model: file line, name, architecture, pack, tensors. */
static int info_pack_only(const char *model, const es_file_desc *d)
{
    print_file_line(model, d);
    if (d->name) printf("name:          %s\n", d->name);
    if (d->arch) printf("architecture:  %s\n", d->arch);
    bool ok = print_pack(d);
    uint64_t expert_total;
    const uint64_t total = print_tensors(d, &expert_total);
    printf("\nweights:       ");
    print_bytes((double)total);
    printf(" (expert records ");
    print_bytes((double)expert_total);
    printf(")\n");
    if (!ok) cli_die("%s: the pack does not validate (see above)", model);
    return 0;
}

/* A model (or a vocabulary-only file): everything the loader read, then the file's tensors. */

/* The router and attention as estream read them (es_model_describe_details). */
static void print_details(const es_model *m)
{
    es_model_details x;
    es_model_describe_details(m, &x);
    printf("router:        %s%s", x.gating, x.by_logit ? ", ranked by logit" : "");
    if (x.router_bias) printf(", logit bias");
    if (x.selection_bias) printf(", selection bias (exp_probs_b)");
    if (x.n_group) printf(", %d expert groups of which %d eligible", x.n_group, x.n_group_used);
    if (x.router_scale != 0.0f && x.router_scale != 1.0f)
        printf(", weights x%g", (double)x.router_scale);
    printf("\n");
    printf("attention:     %s", x.mla         ? "multi-head latent (above)"
                                : x.fused_qkv ? "fused attn_qkv"
                                              : "q, k, v apart");
    if (x.qkv_bias) printf(", q/k/v biases");
    if (x.qk_norm)
        printf(", q/k RMSNorm %s%s", x.qk_norm, x.qk_norm_after_rope ? " after RoPE" : "");
    if (x.qk_norm_unweighted) printf(", q/k RMS-normalised per head after RoPE (no weight)");
    if (x.n_layer_no_rope)
        printf(", %d layer%s without RoPE%s", x.n_layer_no_rope, x.n_layer_no_rope > 1 ? "s" : "",
               x.nope_temperature ? " (queries temperature-scaled)" : "");
    if (x.q_prescale) printf(", queries scaled by 1/sqrt(head) before q.k");
    if (x.n_swa && x.swa_chunked)
        printf(", chunks of %d positions", x.n_swa);
    else if (x.n_swa)
        printf(", a window of %d positions", x.n_swa);
    if (x.n_swa && x.swa_period > 1)
        printf(" on %d of every %d layers", x.swa_period - 1, x.swa_period);
    const int *sec = x.rope_sections;
    if (sec[0] + sec[1] + sec[2] + sec[3])
        printf(", interleaved multimodal RoPE, sections [%d, %d, %d, %d] (text: the fourth "
               "axis's pairs stay unturned)", sec[0], sec[1], sec[2], sec[3]);
    printf("\n");
    if (x.longrope_ctx)
        printf("LongRoPE:      %s factors up to %d tokens per sequence, %s past it; cos and sin "
               "x%g\n", x.longrope_short ? "short" : "no", x.longrope_ctx,
               x.longrope_long ? "the long ones" : "none", (double)x.rope_cs_scale);
    if (x.norm_bias || x.output_bias)
        printf("biases:        %s%s%s\n", x.norm_bias ? "on every RMS norm" : "",
               x.norm_bias && x.output_bias ? ", " : "", x.output_bias ? "on the logits" : "");
    if (x.n_layer_nextn)
        printf("not run:       %d multi-token-prediction block%s after the layers\n",
               x.n_layer_nextn, x.n_layer_nextn > 1 ? "s" : "");
    if (x.logit_mul != 0.0f)
        printf("muP:           embeddings x%g, block outputs x%g, logits x%g\n",
               (double)(x.embd_scale != 0.0f ? x.embd_scale : 1.0f),
               (double)(x.resid_scale != 0.0f ? x.resid_scale : 1.0f), (double)x.logit_mul);
}

static int info_model(const char *model, es_model *m)
{
    es_file_desc *d = NULL;
    es_status st = es_model_describe_file(m, &d);
    if (st) cli_die_status(st, "info");
    es_model_desc md;
    es_model_describe(m, &md);
    print_file_line(model, d);
    if (d->name) printf("name:          %s\n", d->name);
    printf("architecture:  %s%s%s%s\n", md.arch, md.family_names ? " (" : "",
           md.family_names ? md.family_names : "", md.family_names ? ")" : "");
    printf("tokenizer:     %s (pre: %s), %d tokens, BOS %d%s\n",
           d->tok_model ? d->tok_model : "", d->tok_pre && *d->tok_pre ? d->tok_pre : "default",
           md.n_vocab, es_model_bos(m), es_model_add_bos(m) ? " (added)" : " (not added)");
    if (md.vocab_only) {
        es_file_desc_destroy(d);
        es_model_close(m);
        return 0;
    }
    printf("context:       %d\n", md.n_ctx);
    printf("hidden:        %d, layers %d, heads %d (kv %d, head dim %d)\n", md.n_embd,
           md.n_layer, md.n_head, md.n_head_kv, md.n_embd_head);
    printf("experts:       %d, top-%d%s%s, expert FFN %d\n", md.n_expert, md.n_expert_used,
           md.gating_sigmoid ? " by sigmoid" : "", md.topk_renorm ? " renormalised" : "",
           md.n_ff_exp);
    if (md.n_conv_layers)
        printf("conv layers:   %d of %d are short convolutions (%d taps) instead of attention\n",
               md.n_conv_layers, md.n_layer, md.n_conv_taps);
    if (md.n_expert_shared)
        printf("shared:        %d experts (FFN %d) in every MoE layer\n", md.n_expert_shared,
               md.n_ff_shexp);
    if (md.n_layer_dense_lead)
        printf("dense layers:  %d (FFN %d) before the MoE layers\n", md.n_layer_dense_lead,
               md.n_ff);
    if (md.n_lora_kv)
        printf("latent attn:   MLA, latent %d, key heads %d (%d rotary), value heads %d, %s\n",
               md.n_lora_kv, md.n_embd_head, md.n_rot, md.n_embd_head_v,
               md.mla_split ? "attn_k_b/attn_v_b" : "joined attn_kv_b");
    printf("rope base:     %g, rms eps %g", (double)md.rope_freq_base, (double)md.rms_eps);
    if (!md.n_lora_kv && md.n_rot != md.n_embd_head) /* partial rotation (GLM-4.5) */
        printf(", rotary %d of %d dims per head", md.n_rot, md.n_embd_head);
    printf("\n");
    if (md.rope_freq_scale != 1.0f)
        printf("rope scaling:  %s x%g (softmax scale %.6g)\n",
               md.rope_ext_factor != 0.0f ? "yarn" : "linear", 1.0 / (double)md.rope_freq_scale,
               (double)md.attn_scale);
    print_details(m);
    if (d->is_pack) print_pack(d);
    uint64_t expert_total;
    const uint64_t total = print_tensors(d, &expert_total);
    printf("\nweights:       ");
    print_bytes((double)total);
    printf(" (experts ");
    print_bytes((double)expert_total);
    printf(", %.1f%%)\n", total ? 100.0 * (double)expert_total / (double)total : 0.0);
    printf("one expert:    ");
    print_bytes((double)md.expert_bytes);
    printf(" (gate %s, up %s, down %s in layer %d)\n", md.expert_types[0], md.expert_types[1],
           md.expert_types[2], md.expert_layer);
    es_file_desc_destroy(d);
    es_model_close(m);
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
    if (es_model_open(model, 0, &m) == ES_OK) return info_model(model, m);
    /* A pack the model loader does not open (yet): show it from the GGUF alone. */
    char *err = strdup(es_last_error());
    if (!err) cli_die("out of memory");
    es_file_desc *d = NULL;
    const bool described = es_file_describe(model, &d) == ES_OK;
    if (described && d->is_pack) {
        free(err);
        const int rc = info_pack_only(model, d);
        es_file_desc_destroy(d);
        return rc;
    }
    const bool has_arch = described && d->arch && *d->arch;
    es_file_desc_destroy(d);
    /* Not a pack: a file without an architecture that opens for its vocabulary is shown as
     * one; anything else fails with the message of the first open. */
    if (es_model_open(model, ES_OPEN_VOCAB_ONLY, &m) != ES_OK) cli_die("%s", es_last_error());
    if (has_arch) cli_die("%s", err);
    free(err);
    return info_model(model, m);
}
