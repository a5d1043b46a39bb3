/*
 * What the CLI reads through the public header alone (include/estream.h): the file inspection
 * of `estream info` (es_file_describe, es_model_describe_file, es_model_describe) on a model, a
 * pack and a file that is not GGUF; this machine (es_cpu_describe, es_kernels_list); the peak
 * resident memory; es_outfile_save. The numbers are checked against the model's own accessors
 * and against each other (the two ways to describe a file agree), not against printed text:
 * test_cli compares what `estream info` prints.
 */
#include "t.h"

#include "estream.h"

#include <sys/mman.h>

#define MODEL "tests/data/tiny-f32.gguf"

/* The two descriptions of one file agree field by field. */
static void same_desc(const es_file_desc *a, const es_file_desc *b)
{
    assert_int_equal(a->gguf_version, b->gguf_version);
    assert_int_equal(a->n_kv, b->n_kv);
    assert_int_equal(a->n_tensors, b->n_tensors);
    assert_int_equal(a->file_bytes, b->file_bytes);
    assert_string_equal(a->arch, b->arch);
    assert_int_equal(a->is_pack, b->is_pack);
    for (int64_t i = 0; i < a->n_tensors; i++) {
        assert_string_equal(a->tensors[i].name, b->tensors[i].name);
        assert_string_equal(a->tensors[i].type, b->tensors[i].type);
        assert_int_equal(a->tensors[i].bytes, b->tensors[i].bytes);
    }
}

static void test_model_file(void **state)
{
    (void)state;
    es_model *m = NULL;
    assert_int_equal(es_model_open(MODEL, 0, &m), ES_OK);
    es_file_desc *d = NULL, *e = NULL;
    assert_int_equal(es_model_describe_file(m, &d), ES_OK);
    assert_int_equal(es_file_describe(MODEL, &e), ES_OK);
    same_desc(d, e);
    assert_int_equal(d->gguf_version, 3);
    assert_string_equal(d->arch, es_model_arch(m));
    assert_non_null(d->tok_model);
    assert_false(d->is_pack);
    assert_null(d->pack_layers);
    struct stat sb;
    assert_int_equal(stat(MODEL, &sb), 0);
    assert_int_equal(d->file_bytes, (uint64_t)sb.st_size);
    /* the tensors fit in the file, and every expert tensor is 3-D with n_expert slices */
    uint64_t total = 0;
    int n_exps = 0;
    for (int64_t i = 0; i < d->n_tensors; i++) {
        const es_file_tensor *t = &d->tensors[i];
        assert_true(t->n_dims >= 1 && t->n_dims <= 4);
        assert_string_equal(t->type, "f32");
        int64_t elems = 1;
        for (int k = 0; k < 4; k++) elems *= t->ne[k];
        assert_int_equal(t->bytes, (uint64_t)elems * 4);
        total += t->bytes;
        if (strstr(t->name, "_exps.weight")) {
            n_exps++;
            assert_int_equal(t->n_dims, 3);
            assert_int_equal(t->ne[2], es_model_n_expert(m));
        }
    }
    assert_true(total < d->file_bytes);
    assert_int_equal(n_exps, 3 * es_model_n_layer(m));

    es_model_desc md;
    es_model_describe(m, &md);
    assert_string_equal(md.arch, es_model_arch(m));
    assert_non_null(md.family_names);
    assert_false(md.vocab_only);
    assert_int_equal(md.n_vocab, es_model_n_vocab(m));
    assert_int_equal(md.n_ctx, es_model_n_ctx(m));
    assert_int_equal(md.n_layer, es_model_n_layer(m));
    assert_int_equal(md.n_expert, es_model_n_expert(m));
    assert_true(md.n_expert_used >= 1 && md.n_expert_used <= md.n_expert);
    assert_int_equal(md.expert_layer, md.n_layer_dense_lead);
    /* one expert: gate, up [n_embd x n_ff_exp] and down [n_ff_exp x n_embd], f32 */
    assert_int_equal(md.expert_bytes, (uint64_t)3 * md.n_embd * md.n_ff_exp * 4);
    for (int i = 0; i < 3; i++) assert_string_equal(md.expert_types[i], "f32");
    es_file_desc_destroy(d);
    es_file_desc_destroy(e);
    es_model_close(m);
    es_file_desc_destroy(NULL);
}

/* es_model_describe_details of the file at path (opened with flags). */
static es_model_details details_of(const char *path, int flags)
{
    es_model *m = NULL;
    es_model_details x;
    assert_int_equal(es_model_open(path, flags, &m), ES_OK);
    es_model_describe_details(m, &x);
    es_model_close(m);
    return x;
}

/* es_model_describe_details: the router and attention as estream read them, on files of
 * several families (what synth wrote: tests/data/README.md). */
static void test_details(void **state)
{
    (void)state;
    es_model_details x = details_of("tests/data/tiny-bailingmoe2-q4_0.gguf", 0);
    assert_string_equal(x.gating, "sigmoid");
    assert_true(x.fused_qkv && x.selection_bias && !x.router_bias && !x.qkv_bias);
    assert_int_equal(x.n_group, 4);
    assert_int_equal(x.n_group_used, 2);
    assert_true(x.router_scale == 2.5f);
    assert_string_equal(x.qk_norm, "per head");
    assert_false(x.qk_norm_after_rope);
    assert_int_equal(x.n_layer_nextn, 1);
    assert_int_equal(x.n_swa, 0);
    assert_true(x.logit_mul == 0.0f);
    assert_int_equal(x.rope_sections[0] + x.rope_sections[3], 0);
    x = details_of("tests/data/tiny-qwen3vlmoe-q4_0.gguf", 0);
    assert_true(x.rope_sections[0] == 6 && x.rope_sections[1] == 4 && x.rope_sections[2] == 4 &&
                x.rope_sections[3] == 2);
    x = details_of("tests/data/tiny-gptoss-q4_0.gguf", 0);
    assert_string_equal(x.gating, "softmax over the chosen");
    assert_true(x.router_bias && x.qkv_bias && !x.fused_qkv && !x.selection_bias);
    assert_int_equal(x.n_swa, 40);
    assert_int_equal(x.swa_period, 2);
    assert_false(x.swa_chunked);
    assert_null(x.qk_norm);
    x = details_of("tests/data/tiny-llama4-q4_0.gguf", 0);
    assert_true(x.by_logit && x.swa_chunked && x.qk_norm_unweighted);
    assert_int_equal(x.n_layer_no_rope, 2); /* 8 layers, every 4th */
    x = details_of("tests/data/tiny-granitemoe-q4_0.gguf", 0);
    assert_true(x.embd_scale == 12.0f && x.resid_scale == 0.22f && x.logit_mul == 1.0f / 6.0f);
    x = details_of("tests/data/tiny-hunyuan-q4_0.gguf", 0);
    assert_true(x.qk_norm_after_rope && !x.mla);
    assert_false(x.norm_bias || x.output_bias || x.q_prescale || x.longrope_ctx);
    x = details_of("tests/data/tiny-phimoe-q4_0.gguf", 0);
    assert_true(x.norm_bias && x.output_bias && x.q_prescale && x.qkv_bias);
    assert_int_equal(x.longrope_ctx, 256);
    assert_true(x.longrope_short && x.longrope_long);
    assert_float_equal(x.rope_cs_scale, 1.118034, 1e-6);
    x = details_of("tests/data/tiny-deepseek2-q4_0.gguf", 0);
    assert_true(x.mla && !x.fused_qkv);
    x = details_of("tests/data/tiny-f32.gguf", ES_OPEN_VOCAB_ONLY);
    assert_null(x.gating);
}

static void test_pack_file(void **state)
{
    (void)state;
    const char *pk = t_tmp_path("inspect.pack");
    es_pack_result r;
    assert_int_equal(es_pack(MODEL, pk, NULL, &r), ES_OK);
    es_file_desc *d = NULL;
    assert_int_equal(es_file_describe(pk, &d), ES_OK);
    assert_true(d->is_pack);
    assert_null(d->pack_error);
    assert_non_null(d->pack_layout);
    assert_string_equal(d->pack_source, "tiny-f32.gguf");
    struct stat sb;
    assert_int_equal(stat(MODEL, &sb), 0);
    assert_int_equal(d->pack_source_bytes, (uint64_t)sb.st_size);
    assert_int_equal(d->n_pack_layers, r.n_layers);
    int64_t records = 0;
    for (int i = 0; i < d->n_pack_layers; i++) {
        const es_file_pack_layer *l = &d->pack_layers[i];
        assert_null(l->error);
        assert_true(i == 0 || l->layer > d->pack_layers[i - 1].layer);
        assert_int_equal(l->record_bytes % 4096, 0);
        assert_int_equal(l->file_offset % 4096, 0);
        assert_int_equal(l->offsets[0], 0);
        assert_true(l->offsets[1] > 0 && l->offsets[2] > l->offsets[1]);
        assert_true(l->offsets[2] < l->record_bytes);
        for (int k = 0; k < 3; k++) assert_string_equal(l->types[k], "f32");
        records += l->n_records;
    }
    assert_int_equal(records, r.n_records);
    assert_int_equal(d->pack_layers[0].record_bytes, r.record_bytes);
    es_file_desc_destroy(d);
    unlink(pk);
}

static void test_not_gguf(void **state)
{
    (void)state;
    const char *p = t_tmp_path("inspect-bad.gguf");
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    fputs("this is not a GGUF file, only text long enough to hold a header", f);
    fclose(f);
    es_file_desc *d = (es_file_desc *)1;
    assert_int_equal(es_file_describe(p, &d), ES_E_FORMAT);
    assert_null(d);
    assert_non_null(strstr(es_last_error(), p));
    unlink(p);
    assert_int_equal(es_file_describe(p, &d), ES_E_IO);
    assert_null(d);
}

static void test_machine(void **state)
{
    (void)state;
    es_cpu_desc c;
    es_cpu_describe(&c);
    assert_true(c.brand[0] != 0);
    assert_true(c.l1d_bytes > 0 && c.l2_bytes > 0);
    /* the kernel table in use is one of the list, and it runs here */
    bool found = false;
    int n = 0;
    for (const char *const *k = es_kernels_list(); *k; k++, n++)
        if (!strcmp(*k, es_kernels_name())) found = true;
    assert_true(found);
    assert_true(es_kernels_available(es_kernels_name()));
    assert_true(es_kernels_available("scalar"));
    assert_int_equal(n, 8); /* scalar, avx2, avxvnni, avx512, amx, asimd, neon, i8mm */
    /* the peak resident memory grows with memory touched, and a reset brings it down to now
     * (mmap, not malloc: munmap gives the pages back whatever the allocator, ASan's included) */
    const size_t before = es_peak_rss_bytes();
    assert_true(before > 0);
    const size_t big = (size_t)64 << 20;
    char *p = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    memset(p, 1, big);
    const size_t during = es_peak_rss_bytes();
    assert_true(during >= before + big / 2);
    munmap(p, big);
    if (es_peak_rss_reset() == ES_OK) assert_true(es_peak_rss_bytes() < during);
}

static void test_outfile_save(void **state)
{
    (void)state;
    const char *p = t_tmp_path("inspect-save.bin");
    const float v[3] = {1.0f, -2.5f, 3.25f};
    assert_int_equal(es_outfile_save(p, v, sizeof(v)), ES_OK);
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    float w[4];
    assert_int_equal(fread(w, 1, sizeof(w), f), sizeof(v));
    fclose(f);
    assert_memory_equal(v, w, sizeof(v));
    unlink(p);
    /* a missing directory: ES_E_IO and nothing written */
    char q[600];
    snprintf(q, sizeof(q), "%s/x.bin", t_tmp_path("no-such-dir"));
    assert_int_equal(es_outfile_save(q, v, sizeof(v)), ES_E_IO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_file), cmocka_unit_test(test_pack_file),
        cmocka_unit_test(test_not_gguf),   cmocka_unit_test(test_machine),
        cmocka_unit_test(test_outfile_save), cmocka_unit_test(test_details),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
