/*
 * Packs (src/pack): the writer and the reader-side validation.
 *
 * Synthetic models (presets tiny and small; f32, q8_0, q4_0) are packed (format version 2, and
 * version 1 for some), and the pack is checked against the source independently of the pack
 * code: every record's gate/up/down bytes equal the source tensors' expert slices (found by name
 * in the source), in rows, or for version 2's Q4_0/Q8_0 matrices at the places the tile layout
 * of quant/tiles.h documents (recomputed here from the documented formulas), the padding is zero,
 * each stored checksum equals XXH3_64bits over the record (called here directly, not through
 * es_pack_checksum), each record lies at a 4096-aligned file offset and pread at the reported
 * offset gives the mapped bytes, every non-expert tensor and metadata key is identical.
 * Then hostile packs (metadata rewritten with the GGUF writer) must be refused by
 * es_pack_layer_info with the rule named, and the writer's refusals and failures are checked:
 * packing a pack, a model without experts, inconsistent expert tensors, an unwritable output.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "t.h"

#include <math.h>

#include "estream.h"
#include "gguf/gguf.h"
#include "gguf/gguf_impl.h"
#include "pack/pack.h"
#include "quant/qtypes.h"
#include "quant/tiles.h"

static const char *const kinds[3] = {"gate", "up", "down"};

static bool file_exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* t_tmp_path() reuses 8 buffers; paths kept across many calls are copied (freed by the test). */
static char *tmp_path(const char *name)
{
    char *p = strdup(t_tmp_path(name));
    assert_non_null(p);
    return p;
}

static char *synth(const char *preset, const char *type, const char *name)
{
    char *path = tmp_path(name);
    es_synth_opts o = {.arch = "olmoe", .preset = preset, .type = type, .seed = 7};
    if (es_synth(&o, path) != ES_OK) fail_msg("synth %s %s: %s", preset, type, es_last_error());
    return path;
}

typedef struct prog_seen { uint64_t last_done, total; int calls; bool monotonic; } prog_seen;
static void on_progress(void *user, uint64_t done, uint64_t total)
{
    prog_seen *s = user;
    if (done < s->last_done || done > total || (s->calls && total != s->total))
        s->monotonic = false;
    s->last_done = done;
    s->total = total;
    s->calls++;
}

static es_gguf *open_or_fail(const char *path)
{
    es_gguf *g = NULL;
    if (es_gguf_open(path, &g) != ES_OK) fail_msg("open %s: %s", path, es_last_error());
    return g;
}

/* Whether tensor name (es_str) is one of the source's expert tensors. */
static bool is_expert_name(es_str n)
{
    return n.len >= 12 && memcmp(n.ptr + n.len - 12, "_exps.weight", 12) == 0;
}

/* Checks the pack at pack_path against its source, as described at the top of this file. */
/* Whether the matrix of n rows x ne0 weights of type at m (one expert's, in the tile layout of
 * quant/tiles.h) holds the GGUF rows at src: every block's d and qs dwords are looked up at the
 * places the layout's header documents. */
static bool tiles_hold(uint32_t type, const uint8_t *m, const uint8_t *src, int64_t ne0,
                       int64_t n)
{
    const size_t bb = type == ES_QTYPE_Q4_0 ? 18 : 34, nb = (size_t)ne0 / 32, rb = nb * bb;
    const int G = type == ES_QTYPE_Q4_0 ? 4 : 8;
    for (int64_t r = 0; r < n; r++) {
        const int64_t t0 = r / 32 * 32;
        const size_t nt = (size_t)(n - t0 < 32 ? n - t0 : 32), j = (size_t)(r - t0);
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blk = src + (size_t)r * rb + b * bb;
            const uint8_t *tb = m + (size_t)t0 * rb + b * nt * bb;
            if (memcmp(tb + 2 * j, blk, 2)) return false;
            for (int g = 0; g < G; g++)
                if (memcmp(tb + 2 * nt + 4 * nt * (size_t)g + 4 * j, blk + 2 + 4 * g, 4))
                    return false;
        }
    }
    return true;
}

static void check_pack(const char *src_path, const char *pack_path, uint32_t version)
{
    es_gguf *s = open_or_fail(src_path), *p = open_or_fail(pack_path);
    assert_true(es_pack_is_pack(p));
    assert_false(es_pack_is_pack(s));

    /* metadata: every source key, byte for byte (general.alignment aside), plus the pack's */
    for (int64_t i = 0; i < es_gguf_n_kv(s); i++) {
        es_str k = es_gguf_key(s, i);
        char key[256];
        assert_true(k.len < sizeof(key));
        memcpy(key, k.ptr, k.len);
        key[k.len] = 0;
        if (!strcmp(key, "general.alignment")) continue;
        int64_t j = es_gguf_find_key(p, key);
        if (j < 0) fail_msg("key %s not copied", key);
        assert_int_equal(es_gguf_kv_type(s, i), es_gguf_kv_type(p, j));
        const void *va, *vb;
        uint64_t la, lb;
        assert_true(es_gguf_kv_raw(s, i, &va, &la));
        assert_true(es_gguf_kv_raw(p, j, &vb, &lb));
        assert_int_equal(la, lb);
        assert_memory_equal(va, vb, la);
    }
    uint32_t u32 = 0;
    assert_true(es_gguf_get_u32(p, "general.alignment", &u32));
    assert_int_equal(u32, 4096);
    assert_int_equal(es_gguf_kv_type(p, es_gguf_find_key(p, "general.alignment")), ES_GGUF_UINT32);
    assert_true(es_gguf_get_u32(p, "estream.pack.version", &u32));
    assert_int_equal(u32, version);
    es_str str;
    assert_true(es_gguf_get_str(p, "estream.pack.layout", &str));
    assert_true(es_str_eq(str, version == 1 ? "gguf-rows" : "tiles-v2"));
    assert_true(es_gguf_get_str(p, "estream.pack.source", &str));
    const char *base = strrchr(src_path, '/') + 1;
    assert_true(es_str_eq(str, base));
    int64_t sb = 0;
    assert_true(es_gguf_get_i64(p, "estream.pack.source_bytes", &sb));
    assert_int_equal((uint64_t)sb, es_gguf_file_size(s));
    es_pack_header h;
    assert_int_equal(es_pack_header_get(p, &h), ES_OK);
    assert_int_equal(h.version, version);
    assert_int_equal(h.source_bytes, es_gguf_file_size(s));

    /* non-expert tensors identical; expert tensors replaced by one per layer */
    int64_t n_expert_tensors = 0;
    for (int64_t i = 0; i < es_gguf_n_tensors(s); i++) {
        const es_gguf_tensor *a = es_gguf_tensor_at(s, i);
        if (is_expert_name(a->name)) { n_expert_tensors++; continue; }
        char name[256];
        memcpy(name, a->name.ptr, a->name.len);
        name[a->name.len] = 0;
        const es_gguf_tensor *b = es_gguf_find_tensor(p, name);
        if (!b) fail_msg("tensor %s not copied", name);
        assert_int_equal(a->type, b->type);
        assert_int_equal(a->n_dims, b->n_dims);
        for (int d = 0; d < ES_GGUF_MAX_DIMS; d++) assert_int_equal(a->ne[d], b->ne[d]);
        assert_int_equal(a->nbytes, b->nbytes);
        assert_memory_equal(a->data, b->data, a->nbytes);
    }
    int64_t n_layer = 0;
    assert_true(es_gguf_get_i64(s, "olmoe.block_count", &n_layer));
    assert_int_equal(n_expert_tensors, 3 * n_layer);
    assert_int_equal(es_gguf_n_tensors(p), es_gguf_n_tensors(s) - 2 * n_layer);

    int fd = open(pack_path, O_RDONLY);
    assert_true(fd >= 0);
    for (int il = 0; il < n_layer; il++) {
        assert_true(es_pack_has_layer(p, il));
        es_pack_layer l;
        if (es_pack_layer_info(p, il, &l) != ES_OK) fail_msg("layer %d: %s", il, es_last_error());
        assert_int_equal(l.il, il);
        assert_int_equal(l.record_bytes % 4096, 0);
        assert_int_equal(l.file_offset % 4096, 0);
        assert_int_equal(l.offsets[ES_PACK_GATE], 0);
        char name[64];
        snprintf(name, sizeof(name), "blk.%d.ffn_exps", il);
        const es_gguf_tensor *pt = es_gguf_find_tensor(p, name);
        assert_non_null(pt);
        assert_int_equal(pt->type, 24); /* ggml's I8 */
        assert_int_equal(pt->n_dims, 2);
        assert_int_equal(pt->ne[0], (int64_t)l.record_bytes);
        assert_int_equal(pt->ne[1], l.n_expert);
        assert_int_equal(l.file_offset, es_gguf_data_offset(p) + pt->offset);
        assert_ptr_equal(l.data, pt->data);
        const es_gguf_tensor *st[3];
        uint64_t mb[3], sum_mb = 0;
        for (int k = 0; k < 3; k++) {
            snprintf(name, sizeof(name), "blk.%d.ffn_%s_exps.weight", il, kinds[k]);
            st[k] = es_gguf_find_tensor(s, name);
            assert_non_null(st[k]);
            assert_int_equal(st[k]->ne[2], l.n_expert);
            assert_int_equal(l.types[k], st[k]->type);
            assert_int_equal(l.ne[k][0], st[k]->ne[0]);
            assert_int_equal(l.ne[k][1], st[k]->ne[1]);
            mb[k] = st[k]->nbytes / (uint64_t)st[k]->ne[2];
            assert_int_equal(l.matrix_bytes[k], mb[k]);
            assert_int_equal(l.offsets[k] % 64, 0);
            const bool tileable = st[k]->type == ES_QTYPE_Q4_0 || st[k]->type == ES_QTYPE_Q8_0;
            assert_int_equal(l.layouts[k], version >= 2 && tileable ? 1 : 0);
            sum_mb += mb[k];
        }
        /* never more bytes per weight than the source, padding aside (< 64 between matrices,
         * < 4096 at the end) */
        assert_true(l.record_bytes < sum_mb + 2 * 64 + 4096);
        uint8_t *rec = malloc(l.record_bytes), *mask = calloc(1, l.record_bytes);
        assert_non_null(rec);
        for (int k = 0; k < 3; k++)
            memset(mask + l.offsets[k], 1, mb[k]); /* also checks the matrices fit */
        for (int64_t e = 0; e < l.n_expert; e++) {
            const uint8_t *r = es_pack_record(&l, e);
            assert_ptr_equal(r, pt->data + (uint64_t)e * l.record_bytes);
            assert_int_equal((l.file_offset + (uint64_t)e * l.record_bytes) % 4096, 0);
            /* the file holds the record at the reported offset */
            ssize_t got = pread(fd, rec, l.record_bytes,
                                (off_t)(l.file_offset + (uint64_t)e * l.record_bytes));
            assert_int_equal(got, (ssize_t)l.record_bytes);
            assert_memory_equal(rec, r, l.record_bytes);
            for (int k = 0; k < 3; k++) {
                const uint8_t *want = (const uint8_t *)st[k]->data + (uint64_t)e * mb[k];
                if (l.layouts[k] ? !tiles_hold(l.types[k], r + l.offsets[k], want, l.ne[k][0],
                                               l.ne[k][1])
                                 : memcmp(r + l.offsets[k], want, mb[k]) != 0)
                    fail_msg("layer %d expert %lld: %s differs from the source", il, (long long)e,
                             kinds[k]);
            }
            for (uint64_t b = 0; b < l.record_bytes; b++)
                if (!mask[b] && r[b]) fail_msg("layer %d expert %lld: padding byte %llu is %u",
                                               il, (long long)e, (unsigned long long)b, r[b]);
            const uint64_t want = XXH3_64bits(r, l.record_bytes);
            assert_int_equal(es_pack_expected_checksum(&l, e), want);
            assert_int_equal(es_pack_checksum(r, l.record_bytes), want);
        }
        free(rec);
        free(mask);
    }
    assert_false(es_pack_has_layer(p, (int)n_layer));
    es_pack_layer l;
    assert_int_equal(es_pack_layer_info(p, (int)n_layer, &l), ES_E_FORMAT);
    assert_non_null(strstr(es_last_error(), "no expert records"));
    assert_int_equal(es_pack_layer_info(p, -1, &l), ES_E_INVAL);
    close(fd);
    es_gguf_close(s);
    es_gguf_close(p);
}

static void pack_and_check_v(const char *preset, const char *type, uint32_t version)
{
    char name[64];
    snprintf(name, sizeof(name), "%s-%s.gguf", preset, type);
    char *src = synth(preset, type, name);
    snprintf(name, sizeof(name), "%s-%s.v%u.pack", preset, type, version);
    char *out = tmp_path(name);
    prog_seen ps = {.monotonic = true};
    es_pack_opts o = {.progress = on_progress, .user = &ps};
    es_pack_result r;
    es_status st = version == ES_PACK_VERSION ? es_pack(src, out, &o, &r)
                                              : es_pack_write_version(src, out, &o, &r, version);
    if (st != ES_OK) fail_msg("pack %s: %s", src, es_last_error());
    assert_true(ps.calls > 0);
    assert_true(ps.monotonic);
    assert_int_equal(ps.last_done, ps.total);
    assert_int_equal(r.n_layers, 2);
    assert_int_equal(r.n_records, 16);
    assert_int_equal(r.record_bytes % 4096, 0);
    assert_int_equal(r.expert_bytes, 16 * r.record_bytes);
    struct stat sb;
    assert_int_equal(stat(out, &sb), 0);
    assert_int_equal(r.file_bytes, (uint64_t)sb.st_size);
    check_pack(src, out, version);

    /* a pack opens as the same model: logits bit-identical to the source's, fast and reference
     * (the tiled kernels equal the row kernels bit for bit, and the reference path dequantizes
     * a tiled row to the same floats) */
    es_model *ms = NULL, *mp = NULL;
    assert_int_equal(es_model_open(src, 0, &ms), ES_OK);
    if (es_model_open(out, 0, &mp) != ES_OK) fail_msg("open pack %s: %s", out, es_last_error());
    enum { N = 150 };
    const size_t nv = (size_t)es_model_n_vocab(ms);
    int32_t ids[N];
    t_rng rg = {5};
    for (int i = 0; i < N; i++) ids[i] = (int32_t)(t_next(&rg) % nv);
    float *a = malloc(sizeof(float) * N * nv), *b = malloc(sizeof(float) * N * nv);
    for (int reference = 0; reference <= 1; reference++) {
        es_session_params po = es_session_default_params();
        po.n_threads = 2;
        po.reference = reference;
        int po_all_logits = 1;
        assert_int_equal(es_prefill(ms, ids, N, &po, po_all_logits, a), ES_OK);
        assert_int_equal(es_prefill(mp, ids, N, &po, po_all_logits, b), ES_OK);
        for (size_t i = 0; i < N * nv; i++)
            if (!isfinite(a[i])) fail_msg("logit %zu is not finite", i);
        assert_memory_equal(a, b, sizeof(float) * N * nv);
    }
    free(a);
    free(b);
    es_model_close(ms);
    es_model_close(mp);
    unlink(src);
    unlink(out);
    free(src);
    free(out);
}

static void pack_and_check(const char *preset, const char *type)
{
    pack_and_check_v(preset, type, ES_PACK_VERSION);
}

static void test_tiny_f32(void **state) { (void)state; pack_and_check("tiny", "f32"); }
static void test_tiny_q8_0(void **state) { (void)state; pack_and_check("tiny", "q8_0"); }
static void test_tiny_q4_0(void **state) { (void)state; pack_and_check("tiny", "q4_0"); }
static void test_small_f32(void **state) { (void)state; pack_and_check("small", "f32"); }
static void test_small_q8_0(void **state) { (void)state; pack_and_check("small", "q8_0"); }
static void test_small_q4_0(void **state) { (void)state; pack_and_check("small", "q4_0"); }
/* version 1 packs ("gguf-rows") are still written on request and read */
static void test_tiny_q4_0_v1(void **state) { (void)state; pack_and_check_v("tiny", "q4_0", 1); }
static void test_small_q8_0_v1(void **state) { (void)state; pack_and_check_v("small", "q8_0", 1); }
/* The multi-token-prediction blocks of a GLM-4.5 or DeepSeek-V3 file (the last
 * nextn_predict_layers of block_count) are never run: the pack leaves them out, experts and
 * other tensors (tiny-glm4moe: block 3 of 4), keeps every other tensor and runs like the GGUF. */
static void test_mtp_blocks_left_out(void **state)
{
    (void)state;
    const char *src = "tests/data/tiny-glm4moe-q4_0.gguf", *dst = t_tmp_path("glm4moe.pack");
    es_pack_result r;
    assert_int_equal(es_pack(src, dst, NULL, &r), ES_OK);
    assert_int_equal(r.n_layers, 2); /* MoE blocks 1 and 2; block 0 is dense */
    es_gguf *g, *pk;
    assert_int_equal(es_gguf_open(src, &g), ES_OK);
    assert_int_equal(es_gguf_open(dst, &pk), ES_OK);
    int kept = 0, left = 0;
    for (int64_t i = 0; i < es_gguf_n_tensors(g); i++) {
        const es_gguf_tensor *t = es_gguf_tensor_at(g, i);
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)t->name.len, t->name.ptr);
        const bool mtp = strncmp(name, "blk.3.", 6) == 0;
        const bool expert = strstr(name, "_exps.weight") != NULL;
        const es_gguf_tensor *u = es_gguf_find_tensor(pk, name);
        if (mtp) {
            assert_null(u);
            left++;
        } else if (!expert) {
            assert_non_null(u);
            assert_int_equal(u->nbytes, t->nbytes);
            assert_memory_equal(u->data, t->data, t->nbytes);
            kept++;
        }
    }
    assert_int_equal(left, 21); /* the block's 17 (3 of them experts) and the MTP head's 4 */
    assert_true(kept > 30);
    assert_null(es_gguf_find_tensor(pk, "blk.3.ffn_exps"));
    es_gguf_close(g);
    es_gguf_close(pk);
    /* the pack's logits are the file's */
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = (i * 37 + 5) % 320;
    float *y[2];
    const char *paths[2] = {src, dst};
    for (int k = 0; k < 2; k++) {
        es_model *m;
        es_session *ss;
        assert_int_equal(es_model_open(paths[k], 0, &m), ES_OK);
        es_session_params sp = es_session_default_params();
        sp.n_threads = 1;
        assert_int_equal(es_session_create(m, &sp, &ss), ES_OK);
        y[k] = malloc(sizeof(float) * 320);
        assert_int_equal(es_session_prefill(ss, ids, 40, 0, y[k]), ES_OK);
        es_session_destroy(ss);
        es_model_close(m);
    }
    assert_memory_equal(y[0], y[1], sizeof(float) * 320);
    free(y[0]);
    free(y[1]);
    unlink(dst);
}

static void test_write_version_refused(void **state)
{
    (void)state;
    assert_int_equal(es_pack_write_version("a", "b", NULL, NULL, 3), ES_E_INVAL);
}

/* I8 is a storage type: known (so GGUF files with it open), never computable. */
static void test_i8_storage_only(void **state)
{
    (void)state;
    const es_qtype_info *q = es_qtype_info_get(ES_QTYPE_I8);
    assert_non_null(q);
    assert_int_equal(ES_QTYPE_I8, 24);
    assert_string_equal(q->name, "i8");
    assert_int_equal(q->block_elems, 1);
    assert_int_equal(q->block_bytes, 1);
    assert_false(q->supported);
    assert_int_equal(es_qtype_row_bytes(ES_QTYPE_I8, 4096), 4096);
    float f[4];
    assert_false(es_quantize_row(ES_QTYPE_I8, f, f, 4));
}

/* ---------------------------------------------------------------------------------------------
 * Hostile packs: a valid tiny pack rewritten with one thing changed.
 * ------------------------------------------------------------------------------------------- */

typedef enum mut {
    MUT_VERSION, MUT_VERSION_TYPE, MUT_LAYOUT, MUT_RECORD_NOT_4096, MUT_OVERLAP, MUT_PAST_RECORD,
    MUT_UNALIGNED_OFFSET, MUT_GATE_NOT_0, MUT_CHECKSUMS_SHORT, MUT_CHECKSUMS_TYPE,
    MUT_TENSOR_SHAPE, MUT_TENSOR_TYPE, MUT_TYPES_BIG, MUT_TYPES_UNKNOWN, MUT_SHAPES_NOT_T,
    MUT_SHAPES_ZERO, MUT_MISSING_OFFSETS, MUT_MISSING_TENSOR, MUT_ALIGN_32, MUT_LAYOUTS_MISSING,
    MUT_LAYOUTS_ID, MUT_LAYOUTS_TYPE, MUT_TILES_BAD_TYPE, MUT_V1_WITH_LAYOUTS, MUT_V1_LAYOUT_NAME,
    MUT_NONE,
} mut;

/* Writes a copy of pack g to path with mutation m applied to layer 0. */
static void rewrite(const es_gguf *g, const char *path, mut m)
{
    es_gguf_writer *w;
    assert_int_equal(es_gguf_writer_create(&w), ES_OK);
    es_pack_layer l;
    assert_int_equal(es_pack_layer_info(g, 0, &l), ES_OK);
    uint64_t offs[4] = {l.offsets[0], l.offsets[1], l.offsets[2], l.record_bytes};
    uint64_t shapes[6];
    for (int k = 0; k < 3; k++)
        shapes[2 * k] = (uint64_t)l.ne[k][0], shapes[2 * k + 1] = (uint64_t)l.ne[k][1];
    uint32_t types[3] = {l.types[0], l.types[1], l.types[2]};
    for (int64_t i = 0; i < es_gguf_n_kv(g); i++) {
        es_str k = es_gguf_key(g, i);
        if (m == MUT_MISSING_OFFSETS && es_str_eq(k, "estream.pack.blk.0.offsets")) continue;
        if (m == MUT_LAYOUTS_MISSING && es_str_eq(k, "estream.pack.blk.0.layouts")) continue;
        char key[256];
        memcpy(key, k.ptr, k.len);
        key[k.len] = 0;
        /* copy_kv takes a prefix: a key that is a prefix of a later one (estream.pack.source of
         * estream.pack.source_bytes) copies both, and the later copy replaces in place */
        assert_int_equal(es_gguf_writer_copy_kv(w, g, key), ES_OK);
    }
    switch (m) {
    case MUT_VERSION: es_gguf_writer_set_u32(w, "estream.pack.version", 3); break;
    case MUT_VERSION_TYPE: es_gguf_writer_set_str(w, "estream.pack.version", "1"); break;
    case MUT_LAYOUT: es_gguf_writer_set_str(w, "estream.pack.layout", "avx512-interleaved"); break;
    case MUT_RECORD_NOT_4096: offs[3] += 64; break;
    case MUT_OVERLAP: offs[1] = 64; break;
    case MUT_PAST_RECORD: offs[2] = offs[3] - 64; break;
    case MUT_UNALIGNED_OFFSET: offs[2] += 32; break;
    case MUT_GATE_NOT_0: offs[0] = 64; break;
    case MUT_TYPES_BIG: types[0] = types[1] = types[2] = ES_QTYPE_F32; break;
    case MUT_TYPES_UNKNOWN: types[1] = 4; break; /* a retired ggml id */
    case MUT_SHAPES_NOT_T: shapes[4] = shapes[0] / 2; break;
    case MUT_SHAPES_ZERO: shapes[1] = 0; break;
    case MUT_TILES_BAD_TYPE: types[2] = ES_QTYPE_Q4_1; break; /* fits the record, not tiles */
    case MUT_V1_WITH_LAYOUTS: es_gguf_writer_set_u32(w, "estream.pack.version", 1);
                              es_gguf_writer_set_str(w, "estream.pack.layout", "gguf-rows"); break;
    case MUT_V1_LAYOUT_NAME: es_gguf_writer_set_u32(w, "estream.pack.version", 1); break;
    default: break;
    }
    if (m == MUT_LAYOUTS_ID) {
        const uint32_t lay[3] = {1, 7, 1};
        es_gguf_writer_set_arr(w, "estream.pack.blk.0.layouts", ES_GGUF_UINT32, lay, 3);
    }
    if (m == MUT_LAYOUTS_TYPE) {
        const uint64_t lay[3] = {1, 1, 1};
        es_gguf_writer_set_arr(w, "estream.pack.blk.0.layouts", ES_GGUF_UINT64, lay, 3);
    }
    if (m != MUT_MISSING_OFFSETS)
        assert_int_equal(
            es_gguf_writer_set_arr(w, "estream.pack.blk.0.offsets", ES_GGUF_UINT64, offs, 4),
            ES_OK);
    assert_int_equal(
        es_gguf_writer_set_arr(w, "estream.pack.blk.0.shapes", ES_GGUF_UINT64, shapes, 6), ES_OK);
    assert_int_equal(
        es_gguf_writer_set_arr(w, "estream.pack.blk.0.types", ES_GGUF_UINT32, types, 3), ES_OK);
    if (m == MUT_CHECKSUMS_SHORT)
        es_gguf_writer_set_arr(w, "estream.pack.blk.0.checksums", ES_GGUF_UINT64, l.checksums,
                               (uint64_t)l.n_expert - 1);
    if (m == MUT_CHECKSUMS_TYPE)
        es_gguf_writer_set_arr(w, "estream.pack.blk.0.checksums", ES_GGUF_UINT32, l.checksums,
                               (uint64_t)l.n_expert);
    if (m == MUT_ALIGN_32) es_gguf_writer_set_alignment(w, 32);
    for (int64_t i = 0; i < es_gguf_n_tensors(g); i++) {
        const es_gguf_tensor *t = es_gguf_tensor_at(g, i);
        char name[256];
        memcpy(name, t->name.ptr, t->name.len);
        name[t->name.len] = 0;
        uint32_t type = t->type;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        if (!strcmp(name, "blk.0.ffn_exps")) {
            if (m == MUT_MISSING_TENSOR) continue;
            if (m == MUT_TENSOR_SHAPE) ne[0] *= 2, ne[1] /= 2;
            if (m == MUT_TENSOR_TYPE) type = ES_QTYPE_F32, ne[0] /= 4;
        }
        assert_int_equal(
            es_gguf_writer_add_tensor(w, name, type, t->n_dims, ne, t->data, t->nbytes), ES_OK);
    }
    assert_int_equal(es_gguf_writer_write(w, path), ES_OK);
    es_gguf_writer_destroy(w);
}

static void test_hostile(void **state)
{
    (void)state;
    char *src = synth("tiny", "q4_0", "hostile-src.gguf");
    char *good = tmp_path("hostile-good.pack");
    assert_int_equal(es_pack(src, good, NULL, NULL), ES_OK);
    es_gguf *g = open_or_fail(good);
    static const struct { mut m; es_status st; const char *needle; } cases[] = {
        {MUT_VERSION, ES_E_UNSUPPORTED, "pack version 3 is not supported"},
        {MUT_VERSION_TYPE, ES_E_FORMAT, "estream.pack.version"},
        {MUT_LAYOUT, ES_E_UNSUPPORTED, "layout 'avx512-interleaved' is not supported"},
        {MUT_RECORD_NOT_4096, ES_E_FORMAT, "multiple of 4096"},
        {MUT_OVERLAP, ES_E_FORMAT, "overlap"},
        {MUT_PAST_RECORD, ES_E_FORMAT, "runs past"},
        {MUT_UNALIGNED_OFFSET, ES_E_FORMAT, "not a multiple of 64"},
        {MUT_GATE_NOT_0, ES_E_FORMAT, "gate offset"},
        {MUT_CHECKSUMS_SHORT, ES_E_FORMAT, "checksums has 7 elements, expected 8"},
        {MUT_CHECKSUMS_TYPE, ES_E_FORMAT, "checksums must be an array of uint64"},
        {MUT_TENSOR_SHAPE, ES_E_FORMAT, "tensor blk.0.ffn_exps"},
        {MUT_TENSOR_TYPE, ES_E_FORMAT, "tensor blk.0.ffn_exps is f32"},
        {MUT_TYPES_BIG, ES_E_FORMAT, "runs past"},
        {MUT_TYPES_UNKNOWN, ES_E_FORMAT, "unknown type 4"},
        {MUT_SHAPES_NOT_T, ES_E_FORMAT, "do not fit"},
        {MUT_SHAPES_ZERO, ES_E_FORMAT, "must be 1..2^31"},
        {MUT_MISSING_OFFSETS, ES_E_FORMAT, "missing key estream.pack.blk.0.offsets"},
        {MUT_MISSING_TENSOR, ES_E_FORMAT, "missing tensor blk.0.ffn_exps"},
        {MUT_ALIGN_32, ES_E_FORMAT, "alignment 32"},
        {MUT_LAYOUTS_MISSING, ES_E_FORMAT, "missing key estream.pack.blk.0.layouts"},
        {MUT_LAYOUTS_ID, ES_E_FORMAT, "up has unknown layout id 7"},
        {MUT_LAYOUTS_TYPE, ES_E_FORMAT, "layouts must be an array of uint32"},
        {MUT_TILES_BAD_TYPE, ES_E_FORMAT, "down is q4_1, which has no tile layout"},
        {MUT_V1_WITH_LAYOUTS, ES_E_FORMAT, "layouts in a version 1 pack"},
        {MUT_V1_LAYOUT_NAME, ES_E_UNSUPPORTED, "reads 'gguf-rows' in version 1 packs"},
    };
    for (size_t i = 0; i < T_LEN(cases); i++) {
        char *bad = tmp_path("hostile-bad.pack");
        rewrite(g, bad, cases[i].m);
        es_gguf *b = NULL;
        if (es_gguf_open(bad, &b) != ES_OK) fail_msg("case %zu: %s", i, es_last_error());
        es_pack_layer l;
        memset(&l, 0xab, sizeof(l));
        es_status st = es_pack_layer_info(b, 0, &l);
        if (st != cases[i].st || !strstr(es_last_error(), cases[i].needle))
            fail_msg("case %zu: status %d, message '%s', want %d with '%s'", i, st,
                     es_last_error(), cases[i].st, cases[i].needle);
        assert_int_equal(l.record_bytes, 0); /* zeroed on failure */
        assert_null(l.data);
        /* layer 1 is untouched: it passes unless the pack-wide keys are bad */
        const bool header_bad = cases[i].m == MUT_VERSION || cases[i].m == MUT_VERSION_TYPE ||
                                cases[i].m == MUT_LAYOUT || cases[i].m == MUT_ALIGN_32 ||
                                cases[i].m == MUT_V1_LAYOUT_NAME ||
                                cases[i].m == MUT_V1_WITH_LAYOUTS; /* layer 1 has layouts too */
        assert_int_equal(es_pack_layer_info(b, 1, &l) == ES_OK, !header_bad);
        es_gguf_close(b);
        unlink(bad);
        free(bad);
    }
    /* a pristine rewrite (no mutation effect) still validates: the harness itself is sound */
    char *same = tmp_path("hostile-same.pack");
    rewrite(g, same, MUT_NONE);
    es_gguf *b = open_or_fail(same);
    es_pack_layer l;
    assert_int_equal(es_pack_layer_info(b, 0, &l), ES_OK);
    es_gguf_close(b);
    unlink(same);
    free(same);

    /* a file that is not a pack */
    es_gguf *s = open_or_fail(src);
    assert_false(es_pack_has_layer(s, 0));
    es_pack_header h;
    assert_int_equal(es_pack_header_get(s, &h), ES_E_FORMAT);
    assert_non_null(strstr(es_last_error(), "not an estream pack"));
    assert_int_equal(es_pack_layer_info(s, 0, &l), ES_E_FORMAT);
    es_gguf_close(s);
    es_gguf_close(g);
    unlink(good);
    unlink(src);
    free(good);
    free(src);
}

/* Byte patches instead of the writer: a flipped checksum is not the reader's business (it is
 * the loader's, per record), but es_pack_checksum must then disagree with the stored value. */
static void test_corrupt_record_detected(void **state)
{
    (void)state;
    char *src = synth("tiny", "q8_0", "corrupt-src.gguf");
    char *pk = tmp_path("corrupt.pack");
    assert_int_equal(es_pack(src, pk, NULL, NULL), ES_OK);
    es_gguf *g = open_or_fail(pk);
    es_pack_layer l;
    assert_int_equal(es_pack_layer_info(g, 1, &l), ES_OK);
    const uint64_t at = l.file_offset + 3 * l.record_bytes + 100;
    es_gguf_close(g);
    t_flip_byte(pk, at, 0x10);
    g = open_or_fail(pk);
    assert_int_equal(es_pack_layer_info(g, 1, &l), ES_OK);
    for (int64_t e = 0; e < l.n_expert; e++)
        assert_int_equal(es_pack_checksum(es_pack_record(&l, e), l.record_bytes) ==
                             es_pack_expected_checksum(&l, e), e != 3);
    es_gguf_close(g);
    unlink(pk);
    unlink(src);
    free(pk);
    free(src);
}

/* ---------------------------------------------------------------------------------------------
 * Writer refusals and failures
 * ------------------------------------------------------------------------------------------- */

/* Writes an olmoe-named GGUF with the given 3-D f32 tensors, n_layer blocks. Tensor i holds
 * the distinct non-zero values i * 100000 + j + 1, so a byte moved or a zero pad read as data
 * shows. */
typedef struct fake_t { const char *name; int64_t ne[3]; } fake_t;
static void write_fake(const char *path, const fake_t *ts, size_t n, uint32_t n_layer)
{
    enum { CAP = 64 * 64 * 8 };
    float *data = malloc(n * CAP * sizeof(float));
    assert_non_null(data);
    es_gguf_writer *w;
    assert_int_equal(es_gguf_writer_create(&w), ES_OK);
    assert_int_equal(es_gguf_writer_set_str(w, "general.architecture", "olmoe"), ES_OK);
    assert_int_equal(es_gguf_writer_set_u32(w, "olmoe.block_count", n_layer), ES_OK);
    for (size_t i = 0; i < n; i++) {
        const int64_t elems = ts[i].ne[0] * ts[i].ne[1] * ts[i].ne[2];
        assert_true(elems <= CAP);
        for (int64_t j = 0; j < elems; j++)
            data[i * CAP + (size_t)j] = (float)(i * 100000 + (size_t)j + 1);
        assert_int_equal(es_gguf_writer_add_tensor(w, ts[i].name, ES_QTYPE_F32, 3, ts[i].ne,
                                                   data + i * CAP, (uint64_t)elems * 4), ES_OK);
    }
    assert_int_equal(es_gguf_writer_write(w, path), ES_OK);
    es_gguf_writer_destroy(w);
    free(data);
}

/* Matrices whose sizes are not multiples of 64 (120 bytes each): padding between them, a
 * different expert count per layer, the records still checked byte for byte. */
static void test_odd_shapes(void **state)
{
    (void)state;
    char *src = tmp_path("odd.gguf"), *out = tmp_path("odd.pack");
    const fake_t ts[] = {{"token_embd.weight", {8, 3, 1}},
                         {"blk.0.ffn_gate_exps.weight", {6, 5, 4}},
                         {"blk.0.ffn_up_exps.weight", {6, 5, 4}},
                         {"blk.0.ffn_down_exps.weight", {5, 6, 4}},
                         {"blk.0.ffn_norm.weight", {6, 1, 1}},
                         {"blk.1.ffn_down_exps.weight", {5, 6, 3}},
                         {"blk.1.ffn_up_exps.weight", {6, 5, 3}},
                         {"blk.1.ffn_gate_exps.weight", {6, 5, 3}}};
    write_fake(src, ts, T_LEN(ts), 2);
    es_pack_result r;
    if (es_pack(src, out, NULL, &r) != ES_OK) fail_msg("%s", es_last_error());
    assert_int_equal(r.n_layers, 2);
    assert_int_equal(r.n_records, 7);
    assert_int_equal(r.record_bytes, 4096);
    check_pack(src, out, ES_PACK_VERSION);
    es_gguf *g = open_or_fail(out);
    es_pack_layer l;
    assert_int_equal(es_pack_layer_info(g, 1, &l), ES_OK);
    assert_int_equal(l.n_expert, 3);
    assert_int_equal(l.offsets[ES_PACK_UP], 128);
    assert_int_equal(l.offsets[ES_PACK_DOWN], 256);
    es_gguf_close(g);
    unlink(src);
    unlink(out);
    free(src);
    free(out);
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void expect_refusal(const char *src, es_status want, const char *needle)
{
    const char *out = t_tmp_path("refused.pack");
    es_status st = es_pack(src, out, NULL, NULL);
    if (st != want || !strstr(es_last_error(), needle))
        fail_msg("pack %s: status %d '%s', want %d with '%s'", src, st, es_last_error(), want,
                 needle);
    assert_false(file_exists(out));
}

static void test_refusals(void **state)
{
    (void)state;
    char *src = synth("tiny", "f32", "refuse-src.gguf");
    char *pk = tmp_path("refuse.pack");
    assert_int_equal(es_pack(src, pk, NULL, NULL), ES_OK);
    expect_refusal(pk, ES_E_INVAL, "already an estream pack");
    /* the output is the source itself */
    assert_int_equal(es_pack(src, src, NULL, NULL), ES_E_INVAL);
    assert_non_null(strstr(es_last_error(), "source file itself"));
    assert_true(file_exists(src));
    assert_int_equal(es_pack(NULL, pk, NULL, NULL), ES_E_INVAL);
    expect_refusal("/nonexistent/model.gguf", ES_E_IO, "/nonexistent/model.gguf");

    char *fake = tmp_path("fake.gguf");
    const fake_t none[] = {{"blk.0.attn_q.weight", {64, 64, 1}}};
    write_fake(fake, none, 1, 1);
    expect_refusal(fake, ES_E_UNSUPPORTED, "no expert tensors");
    const fake_t count[] = {{"blk.0.ffn_gate_exps.weight", {64, 64, 8}},
                            {"blk.0.ffn_up_exps.weight", {64, 64, 4}},
                            {"blk.0.ffn_down_exps.weight", {64, 64, 8}}};
    write_fake(fake, count, 3, 1);
    expect_refusal(fake, ES_E_FORMAT, "blk.0.ffn_up_exps.weight has 4 experts");
    const fake_t missing[] = {{"blk.0.ffn_gate_exps.weight", {64, 64, 8}},
                              {"blk.0.ffn_up_exps.weight", {64, 64, 8}},
                              {"blk.1.ffn_gate_exps.weight", {64, 64, 8}},
                              {"blk.1.ffn_up_exps.weight", {64, 64, 8}},
                              {"blk.1.ffn_down_exps.weight", {64, 64, 8}}};
    write_fake(fake, missing, 5, 2);
    expect_refusal(fake, ES_E_FORMAT, "no blk.0.ffn_down_exps.weight");
    const fake_t shape[] = {{"blk.0.ffn_gate_exps.weight", {64, 32, 8}},
                            {"blk.0.ffn_up_exps.weight", {64, 32, 8}},
                            {"blk.0.ffn_down_exps.weight", {64, 32, 8}}};
    write_fake(fake, shape, 3, 1);
    expect_refusal(fake, ES_E_FORMAT,
                   "blk.0.ffn_down_exps.weight has shape [64, 32], expected [32, 64]");
    /* one tensor per expert (llama.cpp's older naming): each expert of each matrix, of one
     * shape, as many of each matrix, not both namings in a layer */
    const fake_t split_ok[] = {{"blk.0.ffn_gate.0.weight", {64, 32, 1}},
                               {"blk.0.ffn_down.1.weight", {32, 64, 1}},
                               {"blk.0.ffn_up.1.weight", {64, 32, 1}},
                               {"blk.0.ffn_up.0.weight", {64, 32, 1}},
                               {"blk.0.ffn_down.0.weight", {32, 64, 1}},
                               {"blk.0.ffn_gate.1.weight", {64, 32, 1}}};
    write_fake(fake, split_ok, 6, 1);
    char *fpk = tmp_path("fake.pack");
    if (es_pack(fake, fpk, NULL, NULL) != ES_OK) fail_msg("split: %s", es_last_error());
    {
        es_gguf *g = open_or_fail(fpk);
        es_pack_layer pl;
        assert_int_equal(es_pack_layer_info(g, 0, &pl), ES_OK);
        assert_int_equal(pl.n_expert, 2);
        assert_int_equal(pl.ne[ES_PACK_DOWN][0], 32);
        assert_int_equal(pl.ne[ES_PACK_DOWN][1], 64);
        /* expert 1's down matrix is the tensor written second: its first float is 100001 */
        float first;
        memcpy(&first, pl.data + pl.record_bytes + pl.offsets[ES_PACK_DOWN], sizeof(first));
        assert_true(first == 100001.0f);
        es_gguf_close(g);
    }
    unlink(fpk);
    free(fpk);
    const fake_t split_count[] = {{"blk.0.ffn_gate.0.weight", {64, 32, 1}},
                                  {"blk.0.ffn_gate.1.weight", {64, 32, 1}},
                                  {"blk.0.ffn_up.0.weight", {64, 32, 1}},
                                  {"blk.0.ffn_down.0.weight", {32, 64, 1}},
                                  {"blk.0.ffn_down.1.weight", {32, 64, 1}}};
    write_fake(fake, split_count, 5, 1);
    expect_refusal(fake, ES_E_FORMAT, "layer 0 has 1 up experts (blk.0.ffn_up.E.weight), but 2");
    const fake_t split_gap[] = {{"blk.0.ffn_gate.0.weight", {64, 32, 1}},
                                {"blk.0.ffn_gate.2.weight", {64, 32, 1}},
                                {"blk.0.ffn_up.2.weight", {64, 32, 1}},
                                {"blk.0.ffn_down.2.weight", {32, 64, 1}}};
    write_fake(fake, split_gap, 4, 1);
    expect_refusal(fake, ES_E_FORMAT, "no blk.0.ffn_gate.1.weight");
    const fake_t split_shape[] = {{"blk.0.ffn_gate.0.weight", {64, 32, 1}},
                                  {"blk.0.ffn_gate.1.weight", {64, 16, 1}},
                                  {"blk.0.ffn_up.0.weight", {64, 32, 1}},
                                  {"blk.0.ffn_up.1.weight", {64, 32, 1}},
                                  {"blk.0.ffn_down.0.weight", {32, 64, 1}},
                                  {"blk.0.ffn_down.1.weight", {32, 64, 1}}};
    write_fake(fake, split_shape, 6, 1);
    expect_refusal(fake, ES_E_FORMAT, "blk.0.ffn_gate.1.weight is f32 [64, 16], but "
                                      "blk.0.ffn_gate.0.weight is f32 [64, 32]");
    const fake_t split_3d[] = {{"blk.0.ffn_gate.0.weight", {64, 32, 2}},
                               {"blk.0.ffn_up.0.weight", {64, 32, 1}},
                               {"blk.0.ffn_down.0.weight", {32, 64, 1}}};
    write_fake(fake, split_3d, 3, 1);
    expect_refusal(fake, ES_E_FORMAT, "blk.0.ffn_gate.0.weight: expected a non-empty 2-D");
    const fake_t split_far[] = {{"blk.0.ffn_gate.999999.weight", {64, 32, 1}},
                                {"blk.0.ffn_up.999999.weight", {64, 32, 1}},
                                {"blk.0.ffn_down.999999.weight", {32, 64, 1}}};
    write_fake(fake, split_far, 3, 1);
    expect_refusal(fake, ES_E_FORMAT, "more than the file's 3 tensors");
    const fake_t both[] = {{"blk.0.ffn_gate_exps.weight", {64, 32, 1}},
                           {"blk.0.ffn_up.0.weight", {64, 32, 1}},
                           {"blk.0.ffn_up_exps.weight", {64, 32, 1}},
                           {"blk.0.ffn_down_exps.weight", {32, 64, 1}}};
    write_fake(fake, both, 4, 1);
    expect_refusal(fake, ES_E_FORMAT, "layer 0 names its experts both ways");
    const fake_t merged[] = {{"blk.0.ffn_gate_up_exps.weight", {64, 64, 8}}};
    write_fake(fake, merged, 1, 1);
    expect_refusal(fake, ES_E_UNSUPPORTED, "blk.0.ffn_gate_up_exps.weight");
    unlink(fake);
    free(fake);

    /* an output folder that does not exist, and a path under a regular file */
    char out[1024];
    snprintf(out, sizeof(out), "%s/x.pack", t_tmp_path("no-such-dir"));
    assert_int_equal(es_pack(src, out, NULL, NULL), ES_E_IO);
    assert_null(strchr(es_last_error(), '\n'));
    snprintf(out, sizeof(out), "%s/x.pack", src);
    assert_int_equal(es_pack(src, out, NULL, NULL), ES_E_IO);

    /* a folder we may not write to (root writes anywhere: then nothing to check) */
    char *ro = tmp_path("ro-dir");
    assert_int_equal(mkdir(ro, 0555), 0);
    if (access(ro, W_OK) != 0) {
        snprintf(out, sizeof(out), "%s/x.pack", ro);
        assert_int_equal(es_pack(src, out, NULL, NULL), ES_E_IO);
        assert_int_equal(count_entries(ro), 0);
    }
    rmdir(ro);
    free(ro);

    /* the disk fills up mid-write: nothing is left in the output folder, whatever the temp
     * file's name */
    char *dir = tmp_path("full-dir");
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(out, sizeof(out), "%s/x.pack", dir);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 100000; /* the tiny f32 pack is ~400 KB */
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    es_status st = es_pack(src, out, NULL, NULL);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, old_handler);
    assert_int_equal(st, ES_E_IO);
    assert_int_equal(count_entries(dir), 0);
    rmdir(dir);
    free(dir);

    unlink(pk);
    unlink(src);
    free(pk);
    free(src);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_i8_storage_only),
        cmocka_unit_test(test_tiny_f32),
        cmocka_unit_test(test_tiny_q8_0),
        cmocka_unit_test(test_tiny_q4_0),
        cmocka_unit_test(test_small_f32),
        cmocka_unit_test(test_small_q8_0),
        cmocka_unit_test(test_small_q4_0),
        cmocka_unit_test(test_tiny_q4_0_v1),
        cmocka_unit_test(test_small_q8_0_v1),
        cmocka_unit_test(test_write_version_refused),
        cmocka_unit_test(test_mtp_blocks_left_out),
        cmocka_unit_test(test_odd_shapes),
        cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_corrupt_record_detected),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
