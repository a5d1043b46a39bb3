/*
 * The validating reader of packs (pack.h: es_pack_is_pack, es_pack_header_get,
 * es_pack_layer_info): every key of a layer is checked against the format and the file before
 * the streamer reads a byte of it. The writer is pack_write.c.
 *
 * DESIGN: the reader does not assume the writer's placement of matrices inside a record: it
 * accepts any disjoint, 64-aligned offsets inside the record, so a later writer may move them
 * without a version bump; dimensions are bounded (MAX_DIM) and every product checked.
 */
#include "pack/pack.h"
#include "pack/pack_keys.h"
#include "quant/qtypes.h"
#include "quant/tiles.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIM ((int64_t)1 << 31) /* bound on a pack's matrix dimensions */

/* ---------------------------------------------------------------------------------------------
 * Reader
 * ------------------------------------------------------------------------------------------- */

bool es_pack_is_pack(const es_gguf *g)
{
    return g && es_gguf_find_key(g, KEY_VERSION) >= 0;
}

es_status es_pack_header_get(const es_gguf *g, es_pack_header *out)
{
    if (!g || !out) return es_fail(ES_E_INVAL, "pack: NULL file or output");
    memset(out, 0, sizeof(*out));
    const char *path = es_gguf_path(g);
    if (!es_pack_is_pack(g))
        return es_fail(ES_E_FORMAT, "%s is not an estream pack (no key %s)", path, KEY_VERSION);
    int64_t v = 0, sb = 0;
    ES_TRY(es_gguf_read_i64(g, KEY_VERSION, true, &v));
    if (v != ES_PACK_VERSION && v != ES_PACK_VERSION_V1)
        return es_fail(ES_E_UNSUPPORTED, "%s: pack version %lld is not supported (this estream "
                       "reads versions %u and %u); repack the model with this estream", path,
                       (long long)v, ES_PACK_VERSION_V1, ES_PACK_VERSION);
    ES_TRY(es_gguf_read_str(g, KEY_LAYOUT, true, &out->layout));
    const char *want = v == ES_PACK_VERSION_V1 ? ES_PACK_LAYOUT_V1 : ES_PACK_LAYOUT;
    if (!es_str_eq(out->layout, want))
        return es_fail(ES_E_UNSUPPORTED, "%s: pack layout '%.*s' is not supported (this "
                       "estream reads '%s' in version %lld packs)", path,
                       (int)(out->layout.len > 64 ? 64 : out->layout.len), out->layout.ptr, want,
                       (long long)v);
    ES_TRY(es_gguf_read_str(g, KEY_SOURCE, true, &out->source));
    ES_TRY(es_gguf_read_i64(g, KEY_SOURCE_BYTES, true, &sb));
    if (sb < 0) return es_fail(ES_E_FORMAT, "%s: %s is negative", path, KEY_SOURCE_BYTES);
    if (es_gguf_alignment(g) % ES_PACK_ALIGN != 0)
        return es_fail(ES_E_FORMAT, "%s: pack alignment %llu is not a multiple of %u", path,
                       (unsigned long long)es_gguf_alignment(g), ES_PACK_ALIGN);
    out->version = (uint32_t)v;
    out->source_bytes = (uint64_t)sb;
    return ES_OK;
}

bool es_pack_has_layer(const es_gguf *g, int il)
{
    if (!g || il < 0 || !es_pack_is_pack(g)) return false;
    char name[96];
    snprintf(name, sizeof(name), "blk.%d.ffn_exps", il);
    if (es_gguf_find_tensor(g, name)) return true;
    static const char *const keys[] = {"types", "shapes", "offsets", "checksums", "layouts"};
    for (size_t i = 0; i < ES_LEN(keys); i++) {
        snprintf(name, sizeof(name), KEY_PREFIX "blk.%d.%s", il, keys[i]);
        if (es_gguf_find_key(g, name) >= 0) return true;
    }
    return false;
}

/* The raw elements of array key estream.pack.blk.<il>.<what>: element type et, exactly n
 * elements (n == 0: any count, returned in *n_out). */
static es_status layer_arr(const es_gguf *g, int il, const char *what, es_gguf_type et,
                           uint64_t n, const uint8_t **data, uint64_t *n_out)
{
    char key[96];
    snprintf(key, sizeof(key), KEY_PREFIX "blk.%d.%s", il, what);
    const char *path = es_gguf_path(g);
    int64_t i = es_gguf_find_key(g, key);
    if (i < 0) return es_fail(ES_E_FORMAT, "%s: pack layer %d: missing key %s", path, il, key);
    es_gguf_type t;
    uint64_t cnt;
    if (!es_gguf_get_arr(g, key, &t, &cnt) || t != et)
        return es_fail(ES_E_FORMAT, "%s: pack layer %d: %s must be an array of %s", path, il,
                       key, es_gguf_type_name(et));
    if (n && cnt != n)
        return es_fail(ES_E_FORMAT, "%s: pack layer %d: %s has %llu elements, expected %llu",
                       path, il, key, (unsigned long long)cnt, (unsigned long long)n);
    *data = es_gguf_arr_data(g, key);
    if (n_out) *n_out = cnt;
    ES_ASSERT(*data || cnt == 0);
    return ES_OK;
}

static uint64_t rd_u64(const uint8_t *p, uint64_t i)
{
    uint64_t v;
    memcpy(&v, p + 8 * i, 8);
    return v;
}

static es_status layer_info(const es_gguf *g, int il, es_pack_layer *out)
{
    const char *path = es_gguf_path(g);
    es_pack_header h;
    ES_TRY(es_pack_header_get(g, &h));
    if (!es_pack_has_layer(g, il))
        return es_fail(ES_E_FORMAT, "%s: pack has no expert records for layer %d", path, il);
    out->il = il;
    const uint8_t *types, *shapes, *offs, *sums;
    ES_TRY(layer_arr(g, il, "types", ES_GGUF_UINT32, 3, &types, NULL));
    ES_TRY(layer_arr(g, il, "shapes", ES_GGUF_UINT64, 6, &shapes, NULL));
    ES_TRY(layer_arr(g, il, "offsets", ES_GGUF_UINT64, 4, &offs, NULL));
    for (int k = 0; k < 3; k++) {
        memcpy(&out->types[k], types + 4 * k, 4);
        const es_qtype_info *q = es_qtype_info_get(out->types[k]);
        if (!q)
            return es_fail(ES_E_FORMAT, "%s: pack layer %d: %s has unknown type %u", path, il,
                           es_pack_kind_names[k], out->types[k]);
        for (int d = 0; d < 2; d++) {
            const uint64_t v = rd_u64(shapes, (uint64_t)(2 * k + d));
            if (v < 1 || v > (uint64_t)MAX_DIM)
                return es_fail(ES_E_FORMAT, "%s: pack layer %d: %s dimension %d is %llu (must "
                               "be 1..2^31)", path, il, es_pack_kind_names[k], d, (unsigned long long)v);
            out->ne[k][d] = (int64_t)v;
        }
        const size_t row = es_qtype_row_bytes(out->types[k], out->ne[k][0]);
        if (row == 0)
            return es_fail(ES_E_FORMAT, "%s: pack layer %d: %s row length %lld is not a "
                           "multiple of the %s block size", path, il, es_pack_kind_names[k],
                           (long long)out->ne[k][0], q->name);
        if (__builtin_mul_overflow((uint64_t)row, (uint64_t)out->ne[k][1], &out->matrix_bytes[k]))
            return es_fail(ES_E_FORMAT, "%s: pack layer %d: %s size overflows", path, il,
                           es_pack_kind_names[k]);
        out->offsets[k] = rd_u64(offs, (uint64_t)k);
    }
    if (out->ne[ES_PACK_UP][0] != out->ne[ES_PACK_GATE][0] ||
        out->ne[ES_PACK_UP][1] != out->ne[ES_PACK_GATE][1] ||
        out->ne[ES_PACK_DOWN][0] != out->ne[ES_PACK_GATE][1] ||
        out->ne[ES_PACK_DOWN][1] != out->ne[ES_PACK_GATE][0])
        return es_fail(ES_E_FORMAT, "%s: pack layer %d: shapes gate [%lld, %lld], up [%lld, "
                       "%lld], down [%lld, %lld] do not fit (up = gate, down = gate transposed)",
                       path, il, (long long)out->ne[0][0], (long long)out->ne[0][1],
                       (long long)out->ne[1][0], (long long)out->ne[1][1],
                       (long long)out->ne[2][0], (long long)out->ne[2][1]);
    out->record_bytes = rd_u64(offs, 3);
    const uint64_t rb = out->record_bytes;
    if (rb == 0 || rb % ES_PACK_ALIGN != 0 || rb > (uint64_t)INT64_MAX)
        return es_fail(ES_E_FORMAT, "%s: pack layer %d: record size %llu is not a positive "
                       "multiple of %u", path, il, (unsigned long long)rb, ES_PACK_ALIGN);
    if (out->offsets[ES_PACK_GATE] != 0)
        return es_fail(ES_E_FORMAT, "%s: pack layer %d: gate offset %llu, expected 0", path, il,
                       (unsigned long long)out->offsets[ES_PACK_GATE]);
    for (int k = 0; k < 3; k++) {
        uint64_t end;
        if (out->offsets[k] % ES_PACK_MATRIX_ALIGN != 0)
            return es_fail(ES_E_FORMAT, "%s: pack layer %d: %s offset %llu is not a multiple of "
                           "%u", path, il, es_pack_kind_names[k], (unsigned long long)out->offsets[k],
                           ES_PACK_MATRIX_ALIGN);
        if (__builtin_add_overflow(out->offsets[k], out->matrix_bytes[k], &end) || end > rb)
            return es_fail(ES_E_FORMAT, "%s: pack layer %d: %s (offset %llu, %llu bytes) runs "
                           "past the %llu-byte record", path, il, es_pack_kind_names[k],
                           (unsigned long long)out->offsets[k],
                           (unsigned long long)out->matrix_bytes[k], (unsigned long long)rb);
    }
    for (int a = 0; a < 3; a++)
        for (int b = a + 1; b < 3; b++)
            if (out->offsets[a] < out->offsets[b] + out->matrix_bytes[b] &&
                out->offsets[b] < out->offsets[a] + out->matrix_bytes[a])
                return es_fail(ES_E_FORMAT, "%s: pack layer %d: %s and %s overlap in the record",
                               path, il, es_pack_kind_names[a], es_pack_kind_names[b]);
    char name[64];
    snprintf(name, sizeof(name), "blk.%d.ffn_exps", il);
    const es_gguf_tensor *t = es_gguf_find_tensor(g, name);
    if (!t) return es_fail(ES_E_FORMAT, "%s: pack layer %d: missing tensor %s", path, il, name);
    if (t->type != ES_QTYPE_I8 || t->n_dims != 2 || t->ne[0] < 0 || (uint64_t)t->ne[0] != rb ||
        t->ne[1] < 1)
        return es_fail(ES_E_FORMAT, "%s: tensor %s is %s [%lld, %lld] (%u dimensions), expected "
                       "i8 [%llu, n_expert >= 1]", path, name, es_qtype_name(t->type),
                       (long long)t->ne[0], (long long)t->ne[1], t->n_dims,
                       (unsigned long long)rb);
    out->n_expert = t->ne[1];
    out->file_offset = es_gguf_data_offset(g) + t->offset; /* inside the file: reader-checked */
    if (out->file_offset % ES_PACK_ALIGN != 0)
        return es_fail(ES_E_FORMAT, "%s: tensor %s starts at file offset %llu, not a multiple "
                       "of %u", path, name, (unsigned long long)out->file_offset, ES_PACK_ALIGN);
    out->data = t->data;
    ES_TRY(layer_arr(g, il, "checksums", ES_GGUF_UINT64, (uint64_t)out->n_expert, &sums, NULL));
    out->checksums = sums;
    char key[96];
    snprintf(key, sizeof(key), KEY_PREFIX "blk.%d.layouts", il);
    if (h.version == ES_PACK_VERSION_V1) { /* rows only */
        if (es_gguf_find_key(g, key) >= 0)
            return es_fail(ES_E_FORMAT, "%s: pack layer %d: %s in a version 1 pack", path, il,
                           key);
        return ES_OK;
    }
    const uint8_t *lay;
    ES_TRY(layer_arr(g, il, "layouts", ES_GGUF_UINT32, 3, &lay, NULL));
    for (int k = 0; k < 3; k++) {
        memcpy(&out->layouts[k], lay + 4 * k, 4);
        if (out->layouts[k] == ES_LAYOUT_ROWS) continue;
        if (out->layouts[k] != ES_LAYOUT_TILES)
            return es_fail(ES_E_FORMAT, "%s: pack layer %d: %s has unknown layout id %u", path,
                           il, es_pack_kind_names[k], out->layouts[k]);
        if (!es_tiles_type_ok(out->types[k]))
            return es_fail(ES_E_FORMAT, "%s: pack layer %d: %s is %s, which has no tile layout",
                           path, il, es_pack_kind_names[k], es_qtype_name(out->types[k]));
    }
    return ES_OK;
}

es_status es_pack_layer_info(const es_gguf *g, int il, es_pack_layer *out)
{
    if (!g || !out || il < 0)
        return es_fail(ES_E_INVAL, "pack: NULL file or output, or negative layer %d", il);
    memset(out, 0, sizeof(*out));
    es_status st = layer_info(g, il, out);
    if (st) memset(out, 0, sizeof(*out));
    return st;
}

uint64_t es_pack_expected_checksum(const es_pack_layer *l, int64_t e)
{
    ES_ASSERT(l && e >= 0 && e < l->n_expert && l->checksums);
    return rd_u64(l->checksums, (uint64_t)e);
}
