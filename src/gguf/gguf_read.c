/*
 * GGUF reader: maps a file read-only (or borrows a caller's buffer), validates the header, the
 * metadata and the tensor index, then answers lookups by key and by tensor name.
 *
 * DESIGN
 * - Hostile input. Every count, length, offset and product read from the file is checked against
 *   the bytes that remain, with overflow-safe arithmetic (compare n against left / size, never
 *   multiply first). A check failure is ES_E_FORMAT with one line "<file>: <problem>"; nothing
 *   is asserted on file contents.
 * - Bounded allocation. The header's counts are checked against the smallest encoding of a KV
 *   (13 bytes) and of a tensor info (32 bytes) before anything is allocated, and an array of n
 *   strings needs n * 8 bytes of lengths, so every table we allocate is a small multiple of the
 *   file size whatever the counts claim.
 * - One pass over the metadata validates each value (nested arrays to depth MAX_DEPTH, bools
 *   0/1, strings inside the file) and records where it lies. Values stay in the mapping; the
 *   getters read them with memcpy (the file gives no alignment). String arrays at top level get a
 *   table of offsets so es_gguf_arr_str() is O(1); nested arrays are only validated.
 * - Keys and tensor names go into open-addressing hash tables, which also reject duplicates in
 *   O(n). Tensor data regions are sorted by offset to reject overlaps in O(n log n).
 * - A split model (llama.cpp's gguf-split: `split.count` parts named
 *   <prefix>-00001-of-0000N.gguf ...) opens from its first part, which holds the metadata: the
 *   other parts are opened and validated the same way, and their tensors join the first's
 *   table (the name index spans all, so a name in two parts is refused), each tensor keeping
 *   its part's mapping and offset (es_gguf_tensor.file). Metadata is the first part's.
 * - After es_gguf_open() returns ES_OK the handle is read-only: any number of threads may call
 *   the getters concurrently.
 */
#include "core/infile.h"
#include "gguf/gguf_impl.h"
#include "quant/qtypes.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "GGUF fields are read in host order");
_Static_assert(SIZE_MAX >= UINT64_MAX, "file offsets must fit in size_t");

#define MAX_DEPTH 8          /* arrays nested deeper than this are rejected */
#define MIN_KV_BYTES 13      /* empty key (8) + value type (4) + 1-byte value */
#define MIN_TENSOR_BYTES 32  /* empty name (8) + n_dims (4) + one dim (8) + type (4) + offset (8) */
#define MIN_ARRAY_BYTES 12   /* elem type (4) + count (8) */
#define HEADER_BYTES 24      /* magic, version, n_tensors, n_kv */
#define DEFAULT_ALIGNMENT 32 /* GGUF's default when general.alignment is absent */
#define SHOW_MAX 64          /* longest name quoted in an error message */

typedef struct kv {
    es_str key;
    es_gguf_type type;
    es_gguf_type elem_type;    /* arrays: type of the elements */
    uint64_t n;                /* arrays: element count */
    uint64_t val_off, val_len; /* file offset and size of the value (after the type field) */
    uint64_t elems_off;        /* arrays: file offset of element 0 */
    uint64_t *str_off;         /* STRING arrays: file offset of each string's u64 length */
} kv;

/* Open-addressing hash table from names to indexes; idx -1 marks an empty slot. */
typedef struct name_slot {
    es_str name;
    int64_t idx;
} name_slot;
typedef struct name_index {
    name_slot *slot;
    uint64_t mask; /* capacity - 1; capacity is a power of two at least twice the entries */
} name_index;

struct es_gguf {
    char *name;          /* file path or caller's name, for messages */
    const uint8_t *base; /* [size] the file */
    uint64_t size;
    void *map; /* mmap'ed region (es_gguf_open) or NULL (borrowed buffer) */
    struct stat id; /* the mapped file when it was opened (es_gguf_same_file) */
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    int64_t n_kv, n_tensors;
    kv *kvs;                 /* [n_kv] in file order */
    es_gguf_tensor *tensors; /* [n_tensors] in file order (a split model's: part by part) */
    name_index kv_index, tensor_index;
    es_gguf **parts; /* a split model's parts 2 .. n_files (their own tensors, mappings) */
    uint32_t n_files;
};

static const uint8_t scalar_size[ES_GGUF_TYPE_COUNT] = {
    [ES_GGUF_UINT8] = 1, [ES_GGUF_INT8] = 1,    [ES_GGUF_UINT16] = 2,  [ES_GGUF_INT16] = 2,
    [ES_GGUF_UINT32] = 4, [ES_GGUF_INT32] = 4,  [ES_GGUF_FLOAT32] = 4, [ES_GGUF_BOOL] = 1,
    [ES_GGUF_UINT64] = 8, [ES_GGUF_INT64] = 8,  [ES_GGUF_FLOAT64] = 8,
};

static const char *const type_names[ES_GGUF_TYPE_COUNT] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool",  "string", "array", "uint64", "int64", "float64",
};

size_t es_gguf_scalar_size(uint32_t type)
{
    return type < ES_GGUF_TYPE_COUNT ? scalar_size[type] : 0;
}

/* ---------------------------------------------------------------------------------------------
 * Error messages
 * ------------------------------------------------------------------------------------------- */

/* Copies a name from the file into out for quoting: at most SHOW_MAX bytes, anything but
 * printable ASCII (and the quote) replaced by '?', so a hostile name can neither break the
 * one-line message nor put invalid UTF-8 or terminal escapes in it. */
static const char *show(es_str s, char out[SHOW_MAX + 4])
{
    size_t n = s.len < SHOW_MAX ? s.len : SHOW_MAX, i;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        out[i] = (c < 0x20 || c >= 0x7f || c == '\'') ? '?' : (char)c;
    }
    if (s.len > SHOW_MAX) out[i++] = '.', out[i++] = '.', out[i++] = '.';
    out[i] = 0;
    return out;
}

/* Parsing position plus what is being parsed, for messages ("key 'x': ..."). */
typedef struct cur {
    es_gguf *g;
    uint64_t pos;
    const char *what; /* "key", "tensor" or NULL (header) */
    es_str item;      /* the key or tensor name */
} cur;

static uint64_t left(const cur *c) { return c->g->size - c->pos; }

/* Fails with "<file>: <what> '<item>': <message>". Always returns ES_E_FORMAT. */
static es_status bad(const cur *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static es_status bad(const cur *c, const char *fmt, ...)
{
    char msg[320], ctx[SHOW_MAX + 32] = "", name[SHOW_MAX + 4];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (c->what) snprintf(ctx, sizeof(ctx), "%s '%s': ", c->what, show(c->item, name));
    return es_fail(ES_E_FORMAT, "%s: %s%s", c->g->name, ctx, msg);
}

static es_status no_mem(const cur *c)
{
    return es_fail(ES_E_NOMEM, "%s: out of memory while indexing the metadata", c->g->name);
}

/* ---------------------------------------------------------------------------------------------
 * Primitive reads. Each checks the bytes left first; "what" names the field for the message.
 * ------------------------------------------------------------------------------------------- */

static es_status rd(cur *c, void *dst, uint64_t n, const char *what)
{
    if (n > left(c))
        return bad(c, "file ends inside the %s (%llu bytes needed at offset %llu, file size %llu)",
                   what, (unsigned long long)n, (unsigned long long)c->pos,
                   (unsigned long long)c->g->size);
    memcpy(dst, c->g->base + c->pos, n);
    c->pos += n;
    return ES_OK;
}

static es_status rd_str(cur *c, es_str *s, const char *what)
{
    uint64_t len = 0;
    ES_TRY(rd(c, &len, 8, what));
    if (len > left(c))
        return bad(c, "%s length %llu runs past the end of the file (%llu bytes left at offset %llu)",
                   what, (unsigned long long)len, (unsigned long long)left(c),
                   (unsigned long long)c->pos);
    s->ptr = (const char *)c->g->base + c->pos;
    s->len = len;
    c->pos += len;
    return ES_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Name index
 * ------------------------------------------------------------------------------------------- */

static uint64_t hash_name(const void *p, size_t n) /* FNV-1a, 64-bit */
{
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static bool index_init(name_index *ix, int64_t n)
{
    uint64_t cap = 8;
    while (cap < 2 * (uint64_t)n) cap *= 2;
    ix->slot = malloc(cap * sizeof(*ix->slot));
    if (!ix->slot) return false;
    for (uint64_t i = 0; i < cap; i++) ix->slot[i].idx = -1;
    ix->mask = cap - 1;
    return true;
}

/* Index of name, or -1. */
static int64_t index_find(const name_index *ix, const char *p, size_t n)
{
    if (!ix->slot) return -1;
    for (uint64_t h = hash_name(p, n) & ix->mask;; h = (h + 1) & ix->mask) {
        const name_slot *s = &ix->slot[h];
        if (s->idx < 0) return -1;
        if (s->name.len == n && memcmp(s->name.ptr, p, n) == 0) return s->idx;
    }
}

/* Adds name -> idx. Returns -1, or the index already holding that name (then nothing is added).
 * The table never fills: its capacity is at least twice the number of entries. */
static int64_t index_add(name_index *ix, es_str name, int64_t idx)
{
    uint64_t h = hash_name(name.ptr, name.len) & ix->mask;
    for (;; h = (h + 1) & ix->mask) {
        name_slot *s = &ix->slot[h];
        if (s->idx < 0) break;
        if (s->name.len == name.len && memcmp(s->name.ptr, name.ptr, name.len) == 0) return s->idx;
    }
    ix->slot[h].name = name;
    ix->slot[h].idx = idx;
    return -1;
}

/* ---------------------------------------------------------------------------------------------
 * Metadata values
 * ------------------------------------------------------------------------------------------- */

static es_status skip_array(cur *c, int depth, kv *top);

/* Validates one value of type t at the cursor and steps over it. depth: how many arrays enclose
 * it. */
static es_status skip_value(cur *c, uint32_t t, int depth)
{
    if (t >= ES_GGUF_TYPE_COUNT) return bad(c, "unknown value type %u", t);
    if (t == ES_GGUF_STRING) {
        es_str s;
        return rd_str(c, &s, "string value");
    }
    if (t == ES_GGUF_ARRAY) return skip_array(c, depth + 1, NULL);
    if (t == ES_GGUF_BOOL) {
        uint8_t b;
        ES_TRY(rd(c, &b, 1, "bool value"));
        if (b > 1) return bad(c, "bool value %u is not 0 or 1 (offset %llu)", b,
                              (unsigned long long)(c->pos - 1));
        return ES_OK;
    }
    uint64_t size = scalar_size[t];
    if (size > left(c))
        return bad(c, "file ends inside the %s value (%llu bytes needed at offset %llu, file size "
                   "%llu)", type_names[t], (unsigned long long)size, (unsigned long long)c->pos,
                   (unsigned long long)c->g->size);
    c->pos += size;
    return ES_OK;
}

/* Validates an array ({ u32 elem_type, u64 n, elements }) nested in depth arrays (1 = a key's
 * value) and steps over it. For a key's own array, top receives the element type, count and
 * position, and a string array gets its offsets table. */
static es_status skip_array(cur *c, int depth, kv *top)
{
    if (depth > MAX_DEPTH)
        return bad(c, "arrays nested more than %d deep (offset %llu)", MAX_DEPTH,
                   (unsigned long long)c->pos);
    uint32_t et;
    uint64_t n;
    ES_TRY(rd(c, &et, 4, "array element type"));
    ES_TRY(rd(c, &n, 8, "array length"));
    if (et >= ES_GGUF_TYPE_COUNT) return bad(c, "unknown array element type %u", et);
    if (top) {
        top->elem_type = (es_gguf_type)et;
        top->n = n;
        top->elems_off = c->pos;
    }
    /* The smallest encoding of one element bounds n before any loop or allocation. */
    uint64_t min_elem = et == ES_GGUF_STRING ? 8 : et == ES_GGUF_ARRAY ? MIN_ARRAY_BYTES
                                                                        : scalar_size[et];
    if (n > left(c) / min_elem)
        return bad(c, "array of %llu %s elements runs past the end of the file (%llu bytes left "
                   "at offset %llu)", (unsigned long long)n, type_names[et],
                   (unsigned long long)left(c), (unsigned long long)c->pos);
    if (et == ES_GGUF_STRING) {
        if (top && n) {
            top->str_off = malloc(n * sizeof(uint64_t)); /* n <= file size / 8 */
            if (!top->str_off) return no_mem(c);
        }
        for (uint64_t i = 0; i < n; i++) {
            es_str s;
            if (top) top->str_off[i] = c->pos;
            ES_TRY(rd_str(c, &s, "string element"));
        }
    } else if (et == ES_GGUF_ARRAY) {
        for (uint64_t i = 0; i < n; i++) ES_TRY(skip_array(c, depth + 1, NULL));
    } else {
        if (et == ES_GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (c->g->base[c->pos + i] > 1)
                    return bad(c, "bool element %llu is %u, not 0 or 1", (unsigned long long)i,
                               c->g->base[c->pos + i]);
        c->pos += n * min_elem;
    }
    return ES_OK;
}

static es_status read_header(cur *c)
{
    es_gguf *g = c->g;
    static const uint8_t magic[4] = {'G', 'G', 'U', 'F'};
    if (g->size >= 4 && memcmp(g->base, magic, 4) != 0)
        return bad(c, "not a GGUF file (magic bytes %02x %02x %02x %02x, expected \"GGUF\")",
                   g->base[0], g->base[1], g->base[2], g->base[3]);
    if (g->size < HEADER_BYTES)
        return bad(c, "file too small for a GGUF header (%llu bytes, need %d)",
                   (unsigned long long)g->size, HEADER_BYTES);
    c->pos = 4;
    uint64_t n_tensors, n_kv;
    ES_TRY(rd(c, &g->version, 4, "version"));
    ES_TRY(rd(c, &n_tensors, 8, "tensor count"));
    ES_TRY(rd(c, &n_kv, 8, "key count"));
    if (g->version != 2 && g->version != 3) {
        uint32_t v = g->version;
        if (__builtin_bswap32(v) == 2 || __builtin_bswap32(v) == 3)
            return bad(c, "big-endian GGUF files are not supported");
        return bad(c, "unsupported GGUF version %u (this reader accepts versions 2 and 3)", v);
    }
    if (n_kv > left(c) / MIN_KV_BYTES || n_tensors > left(c) / MIN_TENSOR_BYTES ||
        n_kv * MIN_KV_BYTES + n_tensors * MIN_TENSOR_BYTES > left(c))
        return bad(c, "header claims %llu keys and %llu tensors, more than the remaining %llu "
                   "bytes can hold", (unsigned long long)n_kv, (unsigned long long)n_tensors,
                   (unsigned long long)left(c));
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    return ES_OK;
}

static es_status read_kvs(cur *c)
{
    es_gguf *g = c->g;
    g->kvs = calloc(g->n_kv ? (size_t)g->n_kv : 1, sizeof(kv)); /* n_kv <= file size / 13 */
    if (!g->kvs || !index_init(&g->kv_index, g->n_kv)) return no_mem(c);
    for (int64_t i = 0; i < g->n_kv; i++) {
        kv *k = &g->kvs[i];
        uint32_t t;
        c->what = NULL;
        char where[48];
        snprintf(where, sizeof(where), "key %lld", (long long)i);
        ES_TRY(rd_str(c, &k->key, where));
        c->what = "key";
        c->item = k->key;
        ES_TRY(rd(c, &t, 4, "value type"));
        if (t >= ES_GGUF_TYPE_COUNT) return bad(c, "unknown value type %u", t);
        k->type = (es_gguf_type)t;
        k->val_off = c->pos;
        if (t == ES_GGUF_ARRAY)
            ES_TRY(skip_array(c, 1, k));
        else
            ES_TRY(skip_value(c, t, 0));
        k->val_len = c->pos - k->val_off;
        if (index_add(&g->kv_index, k->key, i) >= 0) return bad(c, "duplicate key");
    }
    c->what = NULL;

    g->alignment = DEFAULT_ALIGNMENT;
    int64_t ai = es_gguf_find_key(g, "general.alignment");
    if (ai >= 0) {
        const kv *k = &g->kvs[ai];
        c->what = "key";
        c->item = k->key;
        if (k->type != ES_GGUF_UINT32)
            return bad(c, "has type %s, expected uint32", type_names[k->type]);
        uint32_t a;
        memcpy(&a, g->base + k->val_off, 4);
        if (a == 0 || (a & (a - 1)) != 0)
            return bad(c, "alignment %u is not a non-zero power of two", a);
        g->alignment = a;
        c->what = NULL;
    }
    return ES_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Tensor index
 * ------------------------------------------------------------------------------------------- */

/* Reads one tensor info; checks everything that does not need the data section's position. */
static es_status read_tensor_info(cur *c, es_gguf_tensor *t)
{
    char where[48];
    c->what = NULL;
    snprintf(where, sizeof(where), "name of tensor %lld", (long long)(t - c->g->tensors));
    ES_TRY(rd_str(c, &t->name, where));
    c->what = "tensor";
    c->item = t->name;
    ES_TRY(rd(c, &t->n_dims, 4, "dimension count"));
    if (t->n_dims < 1 || t->n_dims > ES_GGUF_MAX_DIMS)
        return bad(c, "has %u dimensions (must be 1 to %d)", t->n_dims, ES_GGUF_MAX_DIMS);
    for (uint32_t d = 0; d < ES_GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if (d >= t->n_dims) continue;
        ES_TRY(rd(c, &t->ne[d], 8, "shape"));
        if (t->ne[d] < 0)
            return bad(c, "dimension %u is negative (%lld)", d, (long long)t->ne[d]);
    }
    int64_t rows, n_elems;
    if (__builtin_mul_overflow(t->ne[1], t->ne[2], &rows) ||
        __builtin_mul_overflow(rows, t->ne[3], &rows) ||
        __builtin_mul_overflow(rows, t->ne[0], &n_elems))
        return bad(c, "element count overflows int64 (shape %lld x %lld x %lld x %lld)",
                   (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                   (long long)t->ne[3]);
    ES_TRY(rd(c, &t->type, 4, "type"));
    ES_TRY(rd(c, &t->offset, 8, "offset"));
    const es_qtype_info *q = es_qtype_info_get(t->type);
    if (!q) return bad(c, "unknown tensor type %u", t->type);
    ES_ASSERT(q->block_elems > 0 && q->block_bytes > 0);
    if (t->ne[0] % q->block_elems != 0)
        return bad(c, "row length %lld is not a multiple of the %s block size %u",
                   (long long)t->ne[0], q->name, q->block_elems);
    /* The element count fits int64; only the byte count (up to 8 bytes/element) can overflow. */
    uint64_t blocks = (uint64_t)(t->ne[0] / q->block_elems);
    if (__builtin_mul_overflow(blocks, (uint64_t)q->block_bytes, &t->nbytes) ||
        __builtin_mul_overflow(t->nbytes, (uint64_t)rows, &t->nbytes))
        return bad(c, "byte size overflows (%lld elements of %s)", (long long)n_elems, q->name);
    return ES_OK;
}

typedef struct region {
    uint64_t off, end;
    int64_t idx;
} region;

static int cmp_region(const void *a, const void *b)
{
    const region *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Places each tensor in the data section: aligned, inside the file, no two overlapping. */
static es_status place_tensors(cur *c)
{
    es_gguf *g = c->g;
    uint64_t size = g->size, start = g->data_offset;
    region *r = malloc((g->n_tensors ? (size_t)g->n_tensors : 1) * sizeof(*r));
    if (!r) return no_mem(c);
    int64_t nr = 0;
    es_status st = ES_OK;
    /* A truncated file: report the tensor the file ends in (the lowest offset that does not
     * fit), not merely the first listed that does not fit. */
    int64_t cut = -1;
    for (int64_t i = 0; i < g->n_tensors && start <= size; i++) {
        const es_gguf_tensor *t = &g->tensors[i];
        if (t->offset <= size - start && t->nbytes > size - start - t->offset &&
            (cut < 0 || t->offset < g->tensors[cut].offset))
            cut = i;
    }
    for (int64_t j = 0; j < g->n_tensors; j++) {
        const int64_t i = cut < 0 ? j : j == 0 ? cut : j <= cut ? j - 1 : j;
        es_gguf_tensor *t = &g->tensors[i];
        c->what = "tensor";
        c->item = t->name;
        if (t->offset % g->alignment != 0) {
            st = bad(c, "offset %llu is not a multiple of the alignment %llu",
                     (unsigned long long)t->offset, (unsigned long long)g->alignment);
            goto done;
        }
        /* These two read as one sentence: "tensor 'x' runs past the end of the file (...)". */
        char nm[SHOW_MAX + 4];
        if (start > size || t->offset > size - start) {
            c->what = NULL;
            st = bad(c, "tensor '%s' offset %llu is past the end of the file (data section at "
                     "%llu, file size %llu)", show(t->name, nm), (unsigned long long)t->offset,
                     (unsigned long long)start, (unsigned long long)size);
            goto done;
        }
        if (t->nbytes > size - start - t->offset) {
            c->what = NULL;
            /* which slice of the outermost dimension the file ends in (a pack's expert) */
            const int64_t n_outer = t->ne[t->n_dims ? t->n_dims - 1 : 0];
            const uint64_t slice = n_outer > 0 ? t->nbytes / (uint64_t)n_outer : 0;
            const uint64_t have = size - start - t->offset;
            st = bad(c, "tensor '%s' runs past the end of the file (offset %llu + %llu bytes > "
                     "file size %llu): the file is truncated inside slice %llu of %lld of its "
                     "last dimension", show(t->name, nm), (unsigned long long)(start + t->offset),
                     (unsigned long long)t->nbytes, (unsigned long long)size,
                     (unsigned long long)(slice ? have / slice : 0), (long long)n_outer);
            goto done;
        }
        t->data = g->base + start + t->offset;
        if (t->nbytes) r[nr++] = (region){t->offset, t->offset + t->nbytes, i};
    }
    qsort(r, (size_t)nr, sizeof(*r), cmp_region);
    for (int64_t i = 1; i < nr; i++) {
        if (r[i].off < r[i - 1].end) {
            char a[SHOW_MAX + 4], b[SHOW_MAX + 4];
            c->what = NULL;
            st = bad(c, "tensors '%s' (bytes %llu..%llu) and '%s' (bytes %llu..%llu) overlap",
                     show(g->tensors[r[i - 1].idx].name, a), (unsigned long long)r[i - 1].off,
                     (unsigned long long)r[i - 1].end, show(g->tensors[r[i].idx].name, b),
                     (unsigned long long)r[i].off, (unsigned long long)r[i].end);
            goto done;
        }
    }
done:
    free(r);
    c->what = NULL;
    return st;
}

static es_status read_tensors(cur *c)
{
    es_gguf *g = c->g;
    g->tensors = calloc(g->n_tensors ? (size_t)g->n_tensors : 1, sizeof(es_gguf_tensor));
    if (!g->tensors || !index_init(&g->tensor_index, g->n_tensors)) return no_mem(c);
    for (int64_t i = 0; i < g->n_tensors; i++) {
        ES_TRY(read_tensor_info(c, &g->tensors[i]));
        if (index_add(&g->tensor_index, g->tensors[i].name, i) >= 0)
            return bad(c, "duplicate tensor name");
    }
    c->what = NULL;
    /* pos <= size < 2^63 and alignment <= 2^31: the sum cannot overflow. */
    g->data_offset = (c->pos + g->alignment - 1) / g->alignment * g->alignment;
    if (g->n_tensors == 0 && g->data_offset > g->size)
        g->data_offset = g->size; /* vocab-only files often omit the final padding */
    return place_tensors(c);
}

/* ---------------------------------------------------------------------------------------------
 * Open and close
 * ------------------------------------------------------------------------------------------- */

static es_gguf *alloc_handle(const char *name)
{
    es_gguf *g = calloc(1, sizeof(*g));
    if (!g) return NULL;
    g->name = strdup(name);
    if (!g->name) {
        free(g);
        return NULL;
    }
    return g;
}

/* Validates the whole file at g->base[0..size); on failure g is half built (close frees it). */
static es_status parse(es_gguf *g)
{
    cur c = {.g = g};
    ES_TRY(read_header(&c));
    ES_TRY(read_kvs(&c));
    return read_tensors(&c);
}

es_status es_gguf_open_memory(const void *buf, size_t size, const char *name, es_gguf **out)
{
    if (!out) return es_fail(ES_E_INVAL, "es_gguf_open_memory: out is NULL");
    *out = NULL;
    if (!buf && size) return es_fail(ES_E_INVAL, "es_gguf_open_memory: buf is NULL");
    es_gguf *g = alloc_handle(name ? name : "<memory>");
    if (!g) return es_fail(ES_E_NOMEM, "%s: out of memory", name ? name : "<memory>");
    g->base = buf ? buf : (const void *)"";
    g->size = size;
    es_status st = parse(g);
    if (st != ES_OK) {
        es_gguf_close(g);
        return st;
    }
    *out = g;
    return ES_OK;
}

/* Maps and validates one file (no parts). */
static es_status open_file(const char *path, es_gguf **out)
{
    *out = NULL;
    es_status st;
    es_gguf *g = NULL;
    /* a FIFO, device or directory is refused before anything can block on it */
    int fd;
    uint64_t size;
    if ((st = es_infile_open(path, &fd, &size)) != ES_OK) return st;
    if (!(g = alloc_handle(path))) {
        st = es_fail(ES_E_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    if (fstat(fd, &g->id) != 0) {
        st = es_fail(ES_E_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    g->size = size;
    g->base = (const uint8_t *)"";
    if (g->size > 0) {
        void *p = mmap(NULL, (size_t)g->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            st = es_fail(ES_E_IO, "%s: cannot map %llu bytes: %s", path,
                         (unsigned long long)g->size, strerror(errno));
            goto fail;
        }
        g->map = p;
        g->base = p;
    }
    close(fd); /* the mapping keeps the file */
    fd = -1;
    if ((st = parse(g)) != ES_OK) goto fail;
    *out = g;
    return ES_OK;
fail:
    if (fd >= 0) close(fd);
    es_gguf_close(g);
    return st;
}

/* Part i (0-based) of a split model whose first part is first (its name checked already):
 * <prefix>-<i+1, 5 digits>-of-<n, 5 digits>.gguf. */
static es_status open_part(const es_gguf *first, uint32_t i, uint32_t n, es_gguf **out)
{
    const size_t name_len = strlen(first->name), tail = strlen("-00001-of-00000.gguf");
    char *path = malloc(name_len + 16);
    if (!path) return es_fail(ES_E_NOMEM, "%s: out of memory", first->name);
    snprintf(path, name_len + 16, "%.*s-%05u-of-%05u.gguf", (int)(name_len - tail), first->name,
             i + 1, n);
    es_status st = access(path, F_OK) == 0
                       ? open_file(path, out)
                       : es_fail(ES_E_IO, "%s is part 1 of a model split in %u files "
                                 "(split.count), but its part %u, %s, is not there", first->name,
                                 n, i + 1, path);
    uint32_t no = UINT32_MAX, count = 0;
    if (st == ES_OK && (!es_gguf_get_u32(*out, "split.no", &no) ||
                        !es_gguf_get_u32(*out, "split.count", &count) || no != i || count != n))
        st = es_fail(ES_E_FORMAT, "%s: part %u of %u of %s's split model should say split.no = %u "
                     "and split.count = %u; it says %d and %u", path, i + 1, n, first->name, i,
                     n, no == UINT32_MAX ? -1 : (int)no, count);
    free(path);
    return st;
}

/* A split model: opens parts 2 .. n of g (its first part, parsed) and joins their tensors to
 * g's. Nothing to do for a file without split.count > 1. */
static es_status open_parts(es_gguf *g)
{
    uint32_t n = 0, no = 0;
    if (es_gguf_find_key(g, "split.count") < 0) return ES_OK;
    if (!es_gguf_get_u32(g, "split.count", &n) || n == 0 || n > 99999)
        return es_fail(ES_E_FORMAT, "%s: split.count is not a count of files (1 to 99999)",
                       g->name);
    if (n == 1) return ES_OK;
    if (!es_gguf_get_u32(g, "split.no", &no) || no >= n)
        return es_fail(ES_E_FORMAT, "%s: split.no is missing or not below split.count (%u)",
                       g->name, n);
    char want[32];
    snprintf(want, sizeof(want), "-%05u-of-%05u.gguf", 1u, n);
    const size_t len = strlen(g->name), wl = strlen(want);
    if (no != 0) {
        char mine[32];
        snprintf(mine, sizeof(mine), "-%05u-of-%05u.gguf", no + 1, n);
        const size_t ml = strlen(mine);
        if (len > ml && !strcmp(g->name + len - ml, mine))
            return es_fail(ES_E_INVAL, "%s is part %u of a model split in %u files: open its "
                           "first part, %.*s%s", g->name, no + 1, n, (int)(len - ml), g->name,
                           want);
        return es_fail(ES_E_INVAL, "%s is part %u of a model split in %u files (split.no %u): "
                       "open its first part", g->name, no + 1, n, no);
    }
    if (len <= wl || strcmp(g->name + len - wl, want) != 0)
        return es_fail(ES_E_FORMAT, "%s: split.count says the model is split in %u files, but "
                       "the name does not end in %s, so the other parts cannot be found (keep "
                       "the names gguf-split gave them)", g->name, n, want);
    if (!(g->parts = calloc(n - 1, sizeof(*g->parts))))
        return es_fail(ES_E_NOMEM, "%s: out of memory", g->name);
    g->n_files = n;
    int64_t total = g->n_tensors;
    for (uint32_t i = 1; i < n; i++) {
        ES_TRY(open_part(g, i, n, &g->parts[i - 1]));
        total += g->parts[i - 1]->n_tensors; /* each part's count is bounded by its size */
    }
    es_gguf_tensor *all = calloc((size_t)(total ? total : 1), sizeof(*all));
    name_index ix = {0};
    if (!all || !index_init(&ix, total)) {
        free(all);
        free(ix.slot);
        return es_fail(ES_E_NOMEM, "%s: out of memory", g->name);
    }
    memcpy(all, g->tensors, (size_t)g->n_tensors * sizeof(*all));
    int64_t at = g->n_tensors;
    for (uint32_t i = 1; i < n; i++) {
        const es_gguf *part = g->parts[i - 1];
        for (int64_t j = 0; j < part->n_tensors; j++) {
            all[at] = part->tensors[j];
            all[at++].file = i;
        }
    }
    free(g->tensors);
    free(g->tensor_index.slot);
    g->tensors = all;
    g->tensor_index = ix;
    g->n_tensors = total;
    for (int64_t j = 0; j < total; j++)
        if (index_add(&g->tensor_index, all[j].name, j) >= 0) {
            char nm[SHOW_MAX + 4];
            return es_fail(ES_E_FORMAT, "%s: tensor '%s' is in two parts of the split model (part "
                           "%u and another)", g->name, show(all[j].name, nm), all[j].file + 1);
        }
    int64_t want_tensors;
    if (es_gguf_get_i64(g, "split.tensors.count", &want_tensors) && want_tensors != total)
        return es_fail(ES_E_FORMAT, "%s: split.tensors.count is %lld, but the %u parts hold %lld "
                       "tensors", g->name, (long long)want_tensors, n, (long long)total);
    return ES_OK;
}

es_status es_gguf_open(const char *path, es_gguf **out)
{
    if (!out) return es_fail(ES_E_INVAL, "es_gguf_open: out is NULL");
    *out = NULL;
    if (!path) return es_fail(ES_E_INVAL, "es_gguf_open: path is NULL");
    es_gguf *g = NULL;
    es_status st = open_file(path, &g);
    if (st == ES_OK && (st = open_parts(g)) != ES_OK) {
        es_gguf_close(g);
        g = NULL;
    }
    *out = g;
    return st;
}

void es_gguf_close(es_gguf *g)
{
    if (!g) return;
    if (g->kvs)
        for (int64_t i = 0; i < g->n_kv; i++) free(g->kvs[i].str_off);
    free(g->kvs);
    free(g->tensors);
    free(g->kv_index.slot);
    free(g->tensor_index.slot);
    if (g->map) munmap(g->map, (size_t)g->size);
    for (uint32_t i = 0; g->parts && i + 1 < g->n_files; i++) es_gguf_close(g->parts[i]);
    free(g->parts);
    free(g->name);
    free(g);
}

/* ---------------------------------------------------------------------------------------------
 * Accessors
 * ------------------------------------------------------------------------------------------- */

/* All accessors only read the handle: safe from any number of threads. Index-based ones accept
 * any index and return an empty result when it is out of range. */

const char *es_gguf_path(const es_gguf *g) { return g->name; }
bool es_gguf_is_mapped(const es_gguf *g) { return g->map != NULL; }

bool es_gguf_same_file(const es_gguf *g, int fd)
{
    struct stat sb;
    if (!g->map || fstat(fd, &sb) != 0) return false;
    return sb.st_dev == g->id.st_dev && sb.st_ino == g->id.st_ino &&
           sb.st_size == g->id.st_size && sb.st_mtim.tv_sec == g->id.st_mtim.tv_sec &&
           sb.st_mtim.tv_nsec == g->id.st_mtim.tv_nsec;
}

es_status es_gguf_check_same_file(const es_gguf *g, int fd, const char *use)
{
    if (es_gguf_same_file(g, fd)) return ES_OK;
    return es_fail(ES_E_IO, "%s: the file is no longer the one the model was opened from "
                   "(replaced or rewritten since): open the model again to %s", g->name, use);
}
uint32_t es_gguf_version(const es_gguf *g) { return g->version; }
uint64_t es_gguf_alignment(const es_gguf *g) { return g->alignment; }
uint64_t es_gguf_data_offset(const es_gguf *g) { return g->data_offset; }
uint64_t es_gguf_file_size(const es_gguf *g) { return g->size; }
uint32_t es_gguf_n_files(const es_gguf *g) { return g->n_files ? g->n_files : 1; }

const es_gguf *es_gguf_file(const es_gguf *g, uint32_t i)
{
    return i == 0 ? g : i < es_gguf_n_files(g) && g->parts ? g->parts[i - 1] : NULL;
}

uint64_t es_gguf_files_size(const es_gguf *g)
{
    uint64_t n = g->size;
    for (uint32_t i = 1; i < es_gguf_n_files(g); i++) n += g->parts[i - 1]->size;
    return n;
}
int64_t es_gguf_n_kv(const es_gguf *g) { return g->n_kv; }
int64_t es_gguf_n_tensors(const es_gguf *g) { return g->n_tensors; }

int64_t es_gguf_find_key(const es_gguf *g, const char *key)
{
    if (!g || !key) return -1;
    return index_find(&g->kv_index, key, strlen(key));
}

es_str es_gguf_key(const es_gguf *g, int64_t i)
{
    if (i < 0 || i >= g->n_kv) return (es_str){NULL, 0};
    return g->kvs[i].key;
}

es_gguf_type es_gguf_kv_type(const es_gguf *g, int64_t i)
{
    if (i < 0 || i >= g->n_kv) return ES_GGUF_TYPE_COUNT;
    return g->kvs[i].type;
}

bool es_gguf_kv_raw(const es_gguf *g, int64_t i, const void **val, uint64_t *len)
{
    if (i < 0 || i >= g->n_kv) return false;
    *val = g->base + g->kvs[i].val_off;
    *len = g->kvs[i].val_len;
    return true;
}

static const kv *find(const es_gguf *g, const char *key)
{
    int64_t i = es_gguf_find_key(g, key);
    return i < 0 ? NULL : &g->kvs[i];
}

/* Reads an integer-typed value as sign and magnitude. False for non-integer types. */
static bool kv_int(const es_gguf *g, const kv *k, bool *neg, uint64_t *mag)
{
    const uint8_t *p = g->base + k->val_off;
    int64_t s;
    switch (k->type) {
    case ES_GGUF_UINT8: *neg = false, *mag = p[0]; return true;
    case ES_GGUF_UINT16: { uint16_t v; memcpy(&v, p, 2); *neg = false, *mag = v; return true; }
    case ES_GGUF_UINT32: { uint32_t v; memcpy(&v, p, 4); *neg = false, *mag = v; return true; }
    case ES_GGUF_UINT64: { uint64_t v; memcpy(&v, p, 8); *neg = false, *mag = v; return true; }
    case ES_GGUF_INT8: { int8_t v; memcpy(&v, p, 1); s = v; break; }
    case ES_GGUF_INT16: { int16_t v; memcpy(&v, p, 2); s = v; break; }
    case ES_GGUF_INT32: { int32_t v; memcpy(&v, p, 4); s = v; break; }
    case ES_GGUF_INT64: memcpy(&s, p, 8); break;
    default: return false;
    }
    *neg = s < 0;
    *mag = s < 0 ? 0 - (uint64_t)s : (uint64_t)s;
    return true;
}

/* Integer getters take any integer type whose value fits the result (so a uint8 head count or
 * an int32 that is non-negative reads as u32); floats, bools and strings do not coerce. */
bool es_gguf_get_u32(const es_gguf *g, const char *key, uint32_t *out)
{
    const kv *k = find(g, key);
    bool neg;
    uint64_t mag;
    if (!k || !kv_int(g, k, &neg, &mag) || neg || mag > UINT32_MAX) return false;
    if (out) *out = (uint32_t)mag;
    return true;
}

bool es_gguf_get_i64(const es_gguf *g, const char *key, int64_t *out)
{
    const kv *k = find(g, key);
    bool neg;
    uint64_t mag;
    if (!k || !kv_int(g, k, &neg, &mag)) return false;
    if (neg ? mag > (uint64_t)INT64_MAX + 1 : mag > (uint64_t)INT64_MAX) return false;
    if (out) *out = neg ? -(int64_t)(mag - 1) - 1 : (int64_t)mag;
    return true;
}

/* float32 as is; float64 and integers rounded to the nearest float. */
bool es_gguf_get_f32(const es_gguf *g, const char *key, float *out)
{
    const kv *k = find(g, key);
    if (!k) return false;
    const uint8_t *p = g->base + k->val_off;
    bool neg;
    uint64_t mag;
    float v;
    if (k->type == ES_GGUF_FLOAT32) {
        memcpy(&v, p, 4);
    } else if (k->type == ES_GGUF_FLOAT64) {
        double d;
        memcpy(&d, p, 8);
        v = (float)d;
    } else if (kv_int(g, k, &neg, &mag)) {
        v = neg ? -(float)mag : (float)mag;
    } else {
        return false;
    }
    if (out) *out = v;
    return true;
}

bool es_gguf_get_bool(const es_gguf *g, const char *key, bool *out)
{
    const kv *k = find(g, key);
    bool neg;
    uint64_t mag;
    if (!k) return false;
    if (k->type == ES_GGUF_BOOL) {
        mag = g->base[k->val_off];
    } else if (!kv_int(g, k, &neg, &mag) || neg || mag > 1) {
        return false; /* integers are accepted only as 0 or 1 */
    }
    if (out) *out = mag != 0;
    return true;
}

bool es_gguf_get_str(const es_gguf *g, const char *key, es_str *out)
{
    const kv *k = find(g, key);
    if (!k || k->type != ES_GGUF_STRING) return false;
    uint64_t len;
    memcpy(&len, g->base + k->val_off, 8);
    if (out) *out = (es_str){(const char *)g->base + k->val_off + 8, len};
    return true;
}

const char *es_gguf_type_name(es_gguf_type t)
{
    return (unsigned)t < ES_GGUF_TYPE_COUNT ? type_names[t] : "unknown";
}

/* The error of a typed read that did not succeed: missing (if required) or wrongly typed. */
static es_status read_failed(const es_gguf *g, const char *key, bool required, const char *want)
{
    const kv *k = find(g, key);
    if (!k) return required ? es_fail(ES_E_FORMAT, "%s: missing key %s", g->name, key) : ES_OK;
    return es_fail(ES_E_FORMAT, "%s: %s has type %s, expected %s", g->name, key,
                   es_gguf_type_name(k->type), want);
}

es_status es_gguf_read_str(const es_gguf *g, const char *key, bool required, es_str *out)
{
    return es_gguf_get_str(g, key, out) ? ES_OK : read_failed(g, key, required, "string");
}

es_status es_gguf_read_i64(const es_gguf *g, const char *key, bool required, int64_t *out)
{
    if (es_gguf_get_i64(g, key, out)) return ES_OK;
    const kv *k = find(g, key);
    bool neg;
    uint64_t mag;
    if (k && kv_int(g, k, &neg, &mag)) /* an integer, but beyond int64 */
        return es_fail(ES_E_FORMAT, "%s: %s = %s%llu is out of range", g->name, key,
                       neg ? "-" : "", (unsigned long long)mag);
    return read_failed(g, key, required, "an integer");
}

es_status es_gguf_read_f32(const es_gguf *g, const char *key, bool required, float *out)
{
    return es_gguf_get_f32(g, key, out) ? ES_OK : read_failed(g, key, required, "a number");
}

bool es_gguf_get_arr(const es_gguf *g, const char *key, es_gguf_type *elem_type, uint64_t *n)
{
    const kv *k = find(g, key);
    if (!k || k->type != ES_GGUF_ARRAY) return false;
    if (elem_type) *elem_type = k->elem_type;
    if (n) *n = k->n;
    return true;
}

const void *es_gguf_arr_data(const es_gguf *g, const char *key)
{
    const kv *k = find(g, key);
    if (!k || k->type != ES_GGUF_ARRAY || !scalar_size[k->elem_type]) return NULL;
    return g->base + k->elems_off;
}

/* O(1) through the offsets table built while validating. {NULL, 0} when the key is absent, not
 * a string array, or i >= n. */
es_str es_gguf_arr_str(const es_gguf *g, const char *key, uint64_t i)
{
    const kv *k = find(g, key);
    if (!k || k->type != ES_GGUF_ARRAY || k->elem_type != ES_GGUF_STRING || i >= k->n)
        return (es_str){NULL, 0};
    uint64_t len, off = k->str_off[i];
    memcpy(&len, g->base + off, 8);
    return (es_str){(const char *)g->base + off + 8, len};
}

const es_gguf_tensor *es_gguf_tensor_at(const es_gguf *g, int64_t i)
{
    if (i < 0 || i >= g->n_tensors) return NULL;
    return &g->tensors[i];
}

const es_gguf_tensor *es_gguf_find_tensor(const es_gguf *g, const char *name)
{
    if (!g || !name) return NULL;
    int64_t i = index_find(&g->tensor_index, name, strlen(name));
    return i < 0 ? NULL : &g->tensors[i];
}
