/*
 * The pack writer (es_pack_write). The format is laid out in pack.h; the validating reader is
 * pack_read.c.
 *
 * DESIGN
 * - The source is memory-mapped by es_gguf_open(); nothing of it is copied into memory. The
 *   output goes through the streaming GGUF writer: every tensor is supplied by a fill function
 *   (resident tensors are copied from the mapping, expert records are assembled from the three
 *   source tensors' expert slices), so memory stays constant whatever the model size, and the
 *   writer's temp-file-and-rename makes the output atomic.
 * - Two passes over the expert bytes: GGUF puts metadata before data, and the checksums are
 *   metadata, so pass 1 hashes each record as it will be written (source slices and zero
 *   padding fed to a streaming XXH3, without building the record). Pass 2 hashes the bytes it
 *   actually hands to the writer and compares: a source that changed between the passes fails
 *   the pack (ES_E_IO) instead of producing a pack whose checksums lie.
 * - Record geometry: gate at 0, up and down at the next multiples of ES_PACK_MATRIX_ALIGN after
 *   the previous matrix, the record rounded up to ES_PACK_ALIGN. The reader does not assume
 *   this placement: it accepts any disjoint, 64-aligned offsets inside the record, so a later
 *   writer may move matrices without a version bump.
 * - Output tensor order is the source's, with blk.N.ffn_exps where the layer's first expert
 *   tensor was, so a layer's resident tensors and its records stay near each other.
 * - The source's experts may be named either way llama.cpp has written them: one 3-D tensor per
 *   matrix (blk.N.ffn_gate_exps.weight, [a, b, E]) or, in files its converters wrote before
 *   2024 (the first Mixtral GGUFs), one 2-D tensor per expert and matrix
 *   (blk.N.ffn_gate.E.weight), anywhere in the file: a record takes expert e's slice or tensor.
 */
#include "pack/pack.h"
#include "pack/pack_keys.h"
#include "quant/qtypes.h"
#include "quant/tiles.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

static uint64_t align_up64(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

uint64_t es_pack_checksum(const void *record, size_t bytes)
{
    return XXH3_64bits(record, bytes);
}

/* ---------------------------------------------------------------------------------------------
 * Writer
 * ------------------------------------------------------------------------------------------- */

struct packer;

/* One sparse layer of the source and its records in the pack. */
typedef struct layer {
    struct packer *p;
    int il;
    const es_gguf_tensor *t[3]; /* source gate, up, down: [ne0, ne1, n_expert], or expert 0's
                                 * [ne0, ne1] where the source has a tensor per expert */
    const es_gguf_tensor **split[3]; /* [n_expert]: expert e's tensors (NULL: t[] has all) */
    int64_t n_split[3];         /* while finding: 1 + the highest expert index seen */
    bool merged_seen;           /* while finding: a 3-D expert tensor of the layer was seen */
    int64_t first;              /* source index of the first of the three (output position) */
    int64_t n_expert;
    uint64_t mbytes[3];         /* bytes of one expert's matrix in t[k] */
    uint64_t off[3];            /* matrix offsets inside a record */
    uint64_t rb;                /* record bytes, a multiple of ES_PACK_ALIGN */
    uint64_t *sums;             /* [n_expert] XXH3-64 per record (pass 1) */
    uint32_t layout[3];         /* ES_LAYOUT_* of each matrix in the pack */
    uint8_t *conv[3];           /* tiled matrices: expert conv_e[k]'s matrix k in tiles */
    int64_t conv_e[3];          /* -1: nothing converted yet */
} layer;

/* A resident tensor copied unchanged. */
typedef struct resident {
    struct packer *p;
    const es_gguf_tensor *t;
} resident;

typedef struct packer {
    const char *src_path;
    es_gguf *g;
    layer *layers; /* [n_layers] sorted by il */
    int n_layers;
    resident *res; /* [n_tensors of the source] */
    XXH3_state_t *xs;
    const es_pack_opts *opts;
    uint32_t version;     /* ES_PACK_VERSION or ES_PACK_VERSION_V1 */
    uint64_t done, total; /* progress units: bytes */
    long first_mtp;       /* blocks from here on are multi-token-prediction heads (LONG_MAX:
                           * none), which no prefill runs: left out of the pack */
} packer;

static void report(packer *p, uint64_t add)
{
    p->done += add;
    if (p->opts && p->opts->progress)
        p->opts->progress(p->opts->user, p->done < p->total ? p->done : p->total, p->total);
}

/* Parses the digits at *s (no leading zero, under 7 digits) and advances *s past them; -1 if
 * there are none. */
static long parse_index(const char **s)
{
    long n = 0;
    int digits = 0;
    const char *p = *s;
    while (*p >= '0' && *p <= '9' && digits < 7) n = n * 10 + (*p++ - '0'), digits++;
    if (digits == 0 || digits == 7 || (digits > 1 && **s == '0')) return -1;
    *s = p;
    return n;
}

/* The first multi-token-prediction block: the last <arch>.nextn_predict_layers of
 * <arch>.block_count (DeepSeek-V3's and GLM-4.5's files), which the model loader never binds;
 * LONG_MAX where the file has none. */
static long first_mtp_block(const es_gguf *g)
{
    es_str arch;
    char key[96];
    uint32_t blocks = 0, nextn = 0;
    if (!es_gguf_get_str(g, "general.architecture", &arch) || arch.len > 48) return LONG_MAX;
    snprintf(key, sizeof(key), "%.*s.nextn_predict_layers", (int)arch.len, arch.ptr);
    if (!es_gguf_get_u32(g, key, &nextn) || nextn == 0) return LONG_MAX;
    snprintf(key, sizeof(key), "%.*s.block_count", (int)arch.len, arch.ptr);
    if (!es_gguf_get_u32(g, key, &blocks) || nextn >= blocks) return LONG_MAX;
    return (long)(blocks - nextn);
}

/* True if the tensor belongs to a multi-token-prediction block ("blk.<N>." with N >= first). */
static bool in_mtp_block(const packer *p, es_str name)
{
    if (p->first_mtp == LONG_MAX || name.len < 5 || memcmp(name.ptr, "blk.", 4) != 0)
        return false;
    char buf[16];
    const size_t n = name.len - 4 < sizeof(buf) - 1 ? name.len - 4 : sizeof(buf) - 1;
    memcpy(buf, name.ptr + 4, n);
    buf[n] = 0;
    const char *d = buf;
    const long il = parse_index(&d);
    return il >= 0 && *d == '.' && il >= p->first_mtp;
}

/* Parses an expert tensor's name: "blk.<N>.ffn_<gate|up|down>_exps.weight" returns 1 and sets
 * *il, *kind; "blk.<N>.ffn_<gate|up|down>.<E>.weight" (a tensor per expert) returns 2 and also
 * sets *e. 0 for a name that is not an expert tensor (the experts' output biases
 * "blk.<N>.ffn_<gate|up|down>_exps.bias" among them: a row per expert, copied resident); -1 for
 * a name with "_exps" in it that pack does not know (merged gate_up, ...), which must not be
 * copied as a resident tensor. */
static int parse_expert_name(es_str name, int *il, int *kind, long *e)
{
    char buf[128];
    if (name.len >= sizeof(buf)) return memmem(name.ptr, name.len, "_exps", 5) ? -1 : 0;
    memcpy(buf, name.ptr, name.len);
    buf[name.len] = 0;
    const bool merged = strstr(buf, "_exps") != NULL;
    const char *s = buf + 4;
    const long n = strncmp(buf, "blk.", 4) == 0 ? parse_index(&s) : -1;
    for (int k = 0; k < 3 && n >= 0; k++) {
        char want[40];
        snprintf(want, sizeof(want), ".ffn_%s_exps.weight", es_pack_kind_names[k]);
        if (strcmp(s, want) == 0) {
            *il = (int)n;
            *kind = k;
            return 1;
        }
        snprintf(want, sizeof(want), ".ffn_%s_exps.bias", es_pack_kind_names[k]);
        if (strcmp(s, want) == 0) return 0;
        snprintf(want, sizeof(want), ".ffn_%s.", es_pack_kind_names[k]);
        const size_t wl = strlen(want);
        const char *x = s + wl;
        long ex;
        if (!merged && strncmp(s, want, wl) == 0 && (ex = parse_index(&x)) >= 0 &&
            strcmp(x, ".weight") == 0) {
            *il = (int)n;
            *kind = k;
            *e = ex;
            return 2;
        }
    }
    return merged ? -1 : 0;
}

static int cmp_layer(const void *a, const void *b)
{
    const layer *x = a, *y = b;
    return (x->il > y->il) - (x->il < y->il);
}

static layer *find_layer(packer *p, int il)
{
    for (int j = 0; j < p->n_layers; j++)
        if (p->layers[j].il == il) return &p->layers[j];
    return NULL;
}

/* For the layers whose experts are a tensor each: gathers them into L->split (expert 0's as
 * L->t) and checks every expert of every matrix is there, 2-D, non-empty, of one type and shape,
 * and the three matrices have as many experts. */
static es_status find_split_tensors(packer *p)
{
    const char *path = p->src_path;
    const int64_t nt = es_gguf_n_tensors(p->g);
    for (int j = 0; j < p->n_layers; j++) {
        layer *L = &p->layers[j];
        const int64_t *n = L->n_split;
        if (!n[0] && !n[1] && !n[2]) continue;
        if (L->merged_seen)
            return es_fail(ES_E_FORMAT, "%s: layer %d names its experts both ways "
                           "(blk.%d.ffn_*_exps.weight and blk.%d.ffn_*.E.weight)", path, L->il,
                           L->il, L->il);
        for (int k = 1; k < 3; k++)
            if (n[k] != n[0])
                return es_fail(ES_E_FORMAT, "%s: layer %d has %lld %s experts (blk.%d.ffn_%s.E."
                               "weight), but %lld %s experts", path, L->il, (long long)n[k],
                               es_pack_kind_names[k], L->il, es_pack_kind_names[k],
                               (long long)n[0], es_pack_kind_names[0]);
        for (int k = 0; k < 3; k++) /* n[0] <= nt: at most one slot per tensor is allocated */
            if (!(L->split[k] = calloc((size_t)(n[0] < nt ? n[0] : nt), sizeof(*L->split[k]))))
                return es_fail(ES_E_NOMEM, "pack: out of memory");
        if (n[0] > nt)
            return es_fail(ES_E_FORMAT, "%s: layer %d has expert tensors up to blk.%d.ffn_gate."
                           "%lld.weight, more than the file's %lld tensors", path, L->il, L->il,
                           (long long)n[0] - 1, (long long)nt);
    }
    for (int64_t i = 0; i < nt; i++) {
        const es_gguf_tensor *t = es_gguf_tensor_at(p->g, i);
        int il = 0, kind = 0;
        long e = 0;
        if (parse_expert_name(t->name, &il, &kind, &e) == 2) find_layer(p, il)->split[kind][e] = t;
    }
    for (int j = 0; j < p->n_layers; j++) {
        layer *L = &p->layers[j];
        for (int k = 0; k < 3 && L->split[0]; k++) {
            const es_gguf_tensor *t0 = L->split[k][0];
            for (int64_t e = 0; e < L->n_split[k]; e++) {
                const es_gguf_tensor *t = L->split[k][e];
                if (!t)
                    return es_fail(ES_E_FORMAT, "%s: layer %d has expert tensors up to "
                                   "blk.%d.ffn_%s.%lld.weight but no blk.%d.ffn_%s.%lld.weight",
                                   path, L->il, L->il, es_pack_kind_names[k],
                                   (long long)L->n_split[k] - 1, L->il, es_pack_kind_names[k],
                                   (long long)e);
                if (t->ne[2] != 1 || t->ne[3] != 1 || t->ne[0] < 1 || t->ne[1] < 1)
                    return es_fail(ES_E_FORMAT, "%s: tensor %.*s: expected a non-empty 2-D tensor "
                                   "[rows, columns], got [%lld, %lld, %lld, %lld]", path,
                                   (int)t->name.len, t->name.ptr, (long long)t->ne[0],
                                   (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
                if (t->type != t0->type || t->ne[0] != t0->ne[0] || t->ne[1] != t0->ne[1])
                    return es_fail(ES_E_FORMAT, "%s: tensor %.*s is %s [%lld, %lld], but %.*s is "
                                   "%s [%lld, %lld]", path, (int)t->name.len, t->name.ptr,
                                   es_qtype_name(t->type), (long long)t->ne[0],
                                   (long long)t->ne[1], (int)t0->name.len, t0->name.ptr,
                                   es_qtype_name(t0->type), (long long)t0->ne[0],
                                   (long long)t0->ne[1]);
            }
            L->t[k] = t0;
        }
    }
    return ES_OK;
}

/* Finds the source's sparse layers and checks their expert tensors agree: all three present,
 * 3-D, non-empty, the same expert count, gate and up [a, b, E], down [b, a, E]. */
static es_status find_layers(packer *p)
{
    const es_gguf *g = p->g;
    const char *path = p->src_path;
    int64_t nt = es_gguf_n_tensors(g);
    p->layers = calloc((size_t)(nt > 0 ? nt : 1), sizeof(layer)); /* at most one per tensor */
    if (!p->layers) return es_fail(ES_E_NOMEM, "pack: out of memory");
    for (int64_t i = 0; i < nt; i++) {
        const es_gguf_tensor *t = es_gguf_tensor_at(g, i);
        if (in_mtp_block(p, t->name)) continue;
        int il = 0, kind = 0;
        long e = 0;
        int r = parse_expert_name(t->name, &il, &kind, &e);
        if (r == 0) continue;
        if (r < 0)
            return es_fail(ES_E_UNSUPPORTED, "%s: tensor %.*s: an expert tensor estream pack does "
                           "not know (it packs blk.N.ffn_{gate,up,down}_exps.weight or "
                           "blk.N.ffn_{gate,up,down}.E.weight)", path, (int)t->name.len,
                           t->name.ptr);
        layer *L = find_layer(p, il);
        if (!L) {
            L = &p->layers[p->n_layers++];
            L->p = p;
            L->il = il;
            L->first = i;
        }
        if (r == 1) {
            L->t[kind] = t; /* the reader refuses duplicate names, so no slot is set twice */
            L->merged_seen = true;
        } else if (e + 1 > L->n_split[kind]) {
            L->n_split[kind] = e + 1;
        }
    }
    qsort(p->layers, (size_t)p->n_layers, sizeof(layer), cmp_layer);
    ES_TRY(find_split_tensors(p));
    for (int j = 0; j < p->n_layers; j++) {
        layer *L = &p->layers[j];
        for (int k = 0; k < 3; k++)
            if (!L->t[k])
                return es_fail(ES_E_FORMAT, "%s: layer %d has expert tensors but no "
                               "blk.%d.ffn_%s_exps.weight", path, L->il, L->il, es_pack_kind_names[k]);
        for (int k = 0; k < 3 && !L->split[0]; k++) {
            const es_gguf_tensor *t = L->t[k];
            if (t->n_dims != 3 || t->ne[0] < 1 || t->ne[1] < 1 || t->ne[2] < 1)
                return es_fail(ES_E_FORMAT, "%s: tensor %.*s: expected a non-empty 3-D tensor "
                               "[rows, columns, experts], got %u dimensions [%lld, %lld, %lld]",
                               path, (int)t->name.len, t->name.ptr, t->n_dims,
                               (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2]);
        }
        const es_gguf_tensor *gt = L->t[ES_PACK_GATE], *ut = L->t[ES_PACK_UP],
                             *dt = L->t[ES_PACK_DOWN];
        for (int k = 1; k < 3 && !L->split[0]; k++)
            if (L->t[k]->ne[2] != gt->ne[2])
                return es_fail(ES_E_FORMAT, "%s: tensor %.*s has %lld experts, but %.*s has "
                               "%lld", path, (int)L->t[k]->name.len, L->t[k]->name.ptr,
                               (long long)L->t[k]->ne[2], (int)gt->name.len, gt->name.ptr,
                               (long long)gt->ne[2]);
        if (ut->ne[0] != gt->ne[0] || ut->ne[1] != gt->ne[1])
            return es_fail(ES_E_FORMAT, "%s: tensor %.*s has shape [%lld, %lld], but %.*s has "
                           "[%lld, %lld]", path, (int)ut->name.len, ut->name.ptr,
                           (long long)ut->ne[0], (long long)ut->ne[1], (int)gt->name.len,
                           gt->name.ptr, (long long)gt->ne[0], (long long)gt->ne[1]);
        if (dt->ne[0] != gt->ne[1] || dt->ne[1] != gt->ne[0])
            return es_fail(ES_E_FORMAT, "%s: tensor %.*s has shape [%lld, %lld], expected "
                           "[%lld, %lld] (the transpose of %.*s)", path, (int)dt->name.len,
                           dt->name.ptr, (long long)dt->ne[0], (long long)dt->ne[1],
                           (long long)gt->ne[1], (long long)gt->ne[0], (int)gt->name.len,
                           gt->name.ptr);
        char name[64];
        snprintf(name, sizeof(name), "blk.%d.ffn_exps", L->il);
        if (es_gguf_find_tensor(g, name))
            return es_fail(ES_E_FORMAT, "%s: the source already has a tensor %s", path, name);
        /* The reader checked nbytes == row bytes x rows x experts and that it fits the file. */
        L->n_expert = L->split[0] ? L->n_split[0] : gt->ne[2];
        for (int k = 0; k < 3; k++)
            L->mbytes[k] = L->split[k] ? L->t[k]->nbytes : L->t[k]->nbytes / (uint64_t)L->n_expert;
        L->off[ES_PACK_GATE] = 0;
        L->off[ES_PACK_UP] = align_up64(L->mbytes[ES_PACK_GATE], ES_PACK_MATRIX_ALIGN);
        L->off[ES_PACK_DOWN] =
            align_up64(L->off[ES_PACK_UP] + L->mbytes[ES_PACK_UP], ES_PACK_MATRIX_ALIGN);
        L->rb = align_up64(L->off[ES_PACK_DOWN] + L->mbytes[ES_PACK_DOWN], ES_PACK_ALIGN);
        uint64_t total;
        if (__builtin_mul_overflow(L->rb, (uint64_t)L->n_expert, &total) || total > INT64_MAX)
            return es_fail(ES_E_FORMAT, "%s: layer %d: records too large", path, L->il);
    }
    return ES_OK;
}

/* Feeds zeros to the hash until *pos reaches to. */
static void hash_zeros(XXH3_state_t *s, uint64_t *pos, uint64_t to)
{
    static const uint8_t zeros[4096];
    while (*pos < to) {
        size_t n = to - *pos < sizeof(zeros) ? (size_t)(to - *pos) : sizeof(zeros);
        XXH3_64bits_update(s, zeros, n);
        *pos += n;
    }
}

/* Expert e's matrix k as it is written: the source slice (rows), or the slice converted to
 * tiles in L->conv[k] (one expert per matrix kept, as the writer asks for increasing ranges). */
static const uint8_t *matrix_out(layer *L, int64_t e, int k)
{
    const uint8_t *src = L->split[k] ? (const uint8_t *)L->split[k][e]->data
                                     : (const uint8_t *)L->t[k]->data + (uint64_t)e * L->mbytes[k];
    if (L->layout[k] == ES_LAYOUT_ROWS) return src;
    if (L->conv_e[k] != e) {
        es_tiles_from_rows(L->t[k]->type, src, L->t[k]->ne[0], L->t[k]->ne[1], L->conv[k]);
        L->conv_e[k] = e;
    }
    return L->conv[k];
}

/* Pass 1: the XXH3-64 of every record as it will be written, from the source slices. */
static void hash_layer(packer *p, layer *L)
{
    for (int64_t e = 0; e < L->n_expert; e++) {
        XXH3_64bits_reset(p->xs);
        uint64_t pos = 0;
        for (int k = 0; k < 3; k++) {
            hash_zeros(p->xs, &pos, L->off[k]);
            XXH3_64bits_update(p->xs, matrix_out(L, e, k), L->mbytes[k]);
            pos += L->mbytes[k];
        }
        hash_zeros(p->xs, &pos, L->rb);
        L->sums[e] = XXH3_64bits_digest(p->xs);
        report(p, L->rb);
    }
}

/* Bytes [r, r + n) of record e (n <= rb - r) into dst: matrix bytes from the source slices,
 * zeros between them and after the last. */
static void record_bytes(layer *L, int64_t e, uint64_t r, uint8_t *dst, size_t n)
{
    const uint64_t end = r + n;
    while (r < end) {
        uint64_t m = 0;
        int in = -1;
        for (int k = 0; k < 3 && in < 0; k++)
            if (r >= L->off[k] && r < L->off[k] + L->mbytes[k]) in = k;
        if (in >= 0) {
            const uint64_t stop =
                L->off[in] + L->mbytes[in] < end ? L->off[in] + L->mbytes[in] : end;
            m = stop - r;
            const uint8_t *src = matrix_out(L, e, in) + (r - L->off[in]);
            memcpy(dst, src, (size_t)m);
        } else {
            uint64_t next = end;
            for (int k = 0; k < 3; k++)
                if (L->off[k] > r && L->off[k] < next) next = L->off[k];
            m = next - r;
            memset(dst, 0, (size_t)m);
        }
        dst += m;
        r += m;
    }
}

/* Writer fill for blk.N.ffn_exps: the writer asks for increasing, contiguous ranges, so one
 * streaming hash follows the records; each finished record is checked against pass 1. */
static es_status fill_records(void *user, uint64_t offset, void *buf, size_t len)
{
    layer *L = user;
    packer *p = L->p;
    uint8_t *dst = buf;
    const size_t total = len;
    while (len) {
        const int64_t e = (int64_t)(offset / L->rb);
        const uint64_t r = offset % L->rb;
        const size_t n = L->rb - r < len ? (size_t)(L->rb - r) : len;
        record_bytes(L, e, r, dst, n);
        if (r == 0) XXH3_64bits_reset(p->xs);
        XXH3_64bits_update(p->xs, dst, n);
        if (r + n == L->rb && XXH3_64bits_digest(p->xs) != L->sums[e])
            return es_fail(ES_E_IO, "%s: the source changed while it was being packed (layer "
                           "%d, expert %lld)", p->src_path, L->il, (long long)e);
        offset += n;
        dst += n;
        len -= n;
    }
    report(p, total);
    return ES_OK;
}

static es_status fill_resident(void *user, uint64_t offset, void *buf, size_t len)
{
    resident *r = user;
    memcpy(buf, (const uint8_t *)r->t->data + offset, len);
    report(r->p, len);
    return ES_OK;
}

/* The per-layer keys (after pass 1 filled L->sums). */
static es_status set_layer_keys(es_gguf_writer *w, const layer *L)
{
    char key[96];
    uint32_t types[3];
    uint64_t shapes[6], offs[4];
    for (int k = 0; k < 3; k++) {
        types[k] = L->t[k]->type;
        shapes[2 * k] = (uint64_t)L->t[k]->ne[0];
        shapes[2 * k + 1] = (uint64_t)L->t[k]->ne[1];
        offs[k] = L->off[k];
    }
    offs[3] = L->rb;
    snprintf(key, sizeof(key), KEY_PREFIX "blk.%d.types", L->il);
    ES_TRY(es_gguf_writer_set_arr(w, key, ES_GGUF_UINT32, types, 3));
    snprintf(key, sizeof(key), KEY_PREFIX "blk.%d.shapes", L->il);
    ES_TRY(es_gguf_writer_set_arr(w, key, ES_GGUF_UINT64, shapes, 6));
    snprintf(key, sizeof(key), KEY_PREFIX "blk.%d.offsets", L->il);
    ES_TRY(es_gguf_writer_set_arr(w, key, ES_GGUF_UINT64, offs, 4));
    snprintf(key, sizeof(key), KEY_PREFIX "blk.%d.checksums", L->il);
    ES_TRY(es_gguf_writer_set_arr(w, key, ES_GGUF_UINT64, L->sums, (uint64_t)L->n_expert));
    if (L->p->version == ES_PACK_VERSION_V1) return ES_OK; /* rows only, no key */
    snprintf(key, sizeof(key), KEY_PREFIX "blk.%d.layouts", L->il);
    return es_gguf_writer_set_arr(w, key, ES_GGUF_UINT32, L->layout, 3);
}

/* Refuses a source that is a pack already: any estream.pack.* key. */
static es_status check_not_pack(const es_gguf *g, const char *path)
{
    const size_t pl = strlen(KEY_PREFIX);
    for (int64_t i = 0; i < es_gguf_n_kv(g); i++) {
        es_str k = es_gguf_key(g, i);
        if (k.len >= pl && memcmp(k.ptr, KEY_PREFIX, pl) == 0)
            return es_fail(ES_E_INVAL, "%s is already an estream pack (it has the key %.*s); "
                           "pack the original GGUF model instead", path, (int)k.len, k.ptr);
    }
    return ES_OK;
}

es_status es_pack_write(const char *src_path, const char *out_path, const es_pack_opts *opts,
                        es_pack_result *result)
{
    return es_pack_write_version(src_path, out_path, opts, result, ES_PACK_VERSION);
}

es_status es_pack_write_version(const char *src_path, const char *out_path,
                                const es_pack_opts *opts, es_pack_result *result,
                                uint32_t version)
{
    if (!src_path || !out_path) return es_fail(ES_E_INVAL, "pack: missing source or output path");
    if (version != ES_PACK_VERSION && version != ES_PACK_VERSION_V1)
        return es_fail(ES_E_INVAL, "pack: cannot write format version %u", version);
    if (result) memset(result, 0, sizeof(*result));
    packer p = {.src_path = src_path, .opts = opts, .version = version};
    es_gguf_writer *w = NULL;
    es_status st = es_gguf_open(src_path, &p.g);
    if (st) return st;
    /* Writing over the source would replace the file being read (rename keeps our mapping
     * alive, but the user's model would be gone). */
    struct stat ss, os;
    if (stat(src_path, &ss) == 0 && stat(out_path, &os) == 0 && ss.st_dev == os.st_dev &&
        ss.st_ino == os.st_ino) {
        st = es_fail(ES_E_INVAL, "pack: output %s is the source file itself", out_path);
        goto done;
    }
    if ((st = check_not_pack(p.g, src_path)) != ES_OK) goto done;
    p.first_mtp = first_mtp_block(p.g);
    if ((st = find_layers(&p)) != ES_OK) goto done;
    if (p.n_layers == 0) {
        st = es_fail(ES_E_UNSUPPORTED, "%s has no expert tensors (blk.N.ffn_gate_exps.weight "
                     "or blk.N.ffn_gate.E.weight, ...): nothing to pack", src_path);
        goto done;
    }
    const int64_t nt = es_gguf_n_tensors(p.g);
    p.res = calloc((size_t)nt, sizeof(resident));
    p.xs = XXH3_createState();
    if (!p.res || !p.xs) {
        st = es_fail(ES_E_NOMEM, "pack: out of memory");
        goto done;
    }
    for (int j = 0; j < p.n_layers; j++) {
        layer *L = &p.layers[j];
        L->p = &p;
        if (!(L->sums = malloc((size_t)L->n_expert * sizeof(uint64_t)))) {
            st = es_fail(ES_E_NOMEM, "pack: out of memory");
            goto done;
        }
        for (int k = 0; k < 3; k++) { /* version 2: Q4_0 and Q8_0 matrices go in tiles */
            L->conv_e[k] = -1;
            L->layout[k] = version != ES_PACK_VERSION_V1 && es_tiles_type_ok(L->t[k]->type)
                               ? ES_LAYOUT_TILES
                               : ES_LAYOUT_ROWS;
            if (L->layout[k] == ES_LAYOUT_TILES && !(L->conv[k] = malloc(L->mbytes[k]))) {
                st = es_fail(ES_E_NOMEM, "pack: out of memory");
                goto done;
            }
        }
        p.total += 2 * L->rb * (uint64_t)L->n_expert;
    }
    for (int64_t i = 0; i < nt; i++) {
        const es_gguf_tensor *t = es_gguf_tensor_at(p.g, i);
        int il, kind;
        long e;
        if (!in_mtp_block(&p, t->name) && parse_expert_name(t->name, &il, &kind, &e) == 0)
            p.total += t->nbytes;
    }

    /* Metadata: the source's keys in their order, then the pack's. */
    const char *base = strrchr(src_path, '/');
    base = base ? base + 1 : src_path;
    if ((st = es_gguf_writer_create(&w)) != ES_OK) goto done;
    if ((st = es_gguf_writer_copy_kv(w, p.g, "")) != ES_OK) goto done;
    es_gguf_writer_remove_keys(w, "split."); /* a split model's parts make one pack */
    if ((st = es_gguf_writer_set_alignment(w, ES_PACK_ALIGN)) != ES_OK) goto done;
    if ((st = es_gguf_writer_set_u32(w, KEY_VERSION, version)) != ES_OK) goto done;
    if ((st = es_gguf_writer_set_str(w, KEY_LAYOUT, version == ES_PACK_VERSION_V1
                                                        ? ES_PACK_LAYOUT_V1
                                                        : ES_PACK_LAYOUT)) != ES_OK)
        goto done;
    if ((st = es_gguf_writer_set_str(w, KEY_SOURCE, base)) != ES_OK) goto done;
    if ((st = es_gguf_writer_set_u64(w, KEY_SOURCE_BYTES, es_gguf_files_size(p.g))) != ES_OK)
        goto done;
    for (int j = 0; j < p.n_layers; j++) {
        hash_layer(&p, &p.layers[j]);
        if ((st = set_layer_keys(w, &p.layers[j])) != ES_OK) goto done;
    }

    /* Tensors in the source's order; a layer's records where its first expert tensor was. */
    for (int64_t i = 0; i < nt; i++) {
        const es_gguf_tensor *t = es_gguf_tensor_at(p.g, i);
        int il, kind;
        long e;
        if (in_mtp_block(&p, t->name)) continue;
        if (parse_expert_name(t->name, &il, &kind, &e) == 0) {
            char name[512];
            if (t->name.len >= sizeof(name)) {
                st = es_fail(ES_E_FORMAT, "%s: tensor name of %zu bytes is too long", src_path,
                             t->name.len);
                goto done;
            }
            memcpy(name, t->name.ptr, t->name.len);
            name[t->name.len] = 0;
            p.res[i] = (resident){&p, t};
            st = es_gguf_writer_add_tensor_fn(w, name, t->type, t->n_dims, t->ne, t->nbytes,
                                              fill_resident, &p.res[i]);
            if (st) goto done;
            continue;
        }
        for (int j = 0; j < p.n_layers; j++) {
            layer *L = &p.layers[j];
            if (L->first != i) continue;
            char name[64];
            snprintf(name, sizeof(name), "blk.%d.ffn_exps", L->il);
            const int64_t ne[2] = {(int64_t)L->rb, L->n_expert};
            st = es_gguf_writer_add_tensor_fn(w, name, ES_QTYPE_I8, 2, ne,
                                              L->rb * (uint64_t)L->n_expert, fill_records, L);
            if (st) goto done;
        }
    }
    if ((st = es_gguf_writer_write(w, out_path)) != ES_OK) goto done;
    report(&p, p.total - p.done); /* ends at done == total */

    if (result) {
        result->n_layers = p.n_layers;
        result->record_bytes = p.layers[0].rb;
        result->source_bytes = es_gguf_files_size(p.g);
        for (int j = 0; j < p.n_layers; j++) {
            result->n_records += p.layers[j].n_expert;
            result->expert_bytes += p.layers[j].rb * (uint64_t)p.layers[j].n_expert;
        }
        if (stat(out_path, &os) == 0) result->file_bytes = (uint64_t)os.st_size;
    }
done:
    es_gguf_writer_destroy(w);
    if (p.layers)
        for (int j = 0; j < p.n_layers; j++) {
            free(p.layers[j].sums);
            for (int k = 0; k < 3; k++) {
                free(p.layers[j].conv[k]);
                free(p.layers[j].split[k]);
            }
        }
    free(p.layers);
    free(p.res);
    XXH3_freeState(p.xs);
    es_gguf_close(p.g);
    return st;
}

es_status es_pack(const char *src, const char *dst, const es_pack_opts *opts,
                  es_pack_result *result)
{
    return es_pack_write(src, dst, opts, result);
}

