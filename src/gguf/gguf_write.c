/*
 * GGUF v3 writer: collects metadata and tensor descriptions in memory, then streams the file.
 *
 * DESIGN
 * - Each key keeps its value serialized exactly as in a file (the bytes after the u32 type), so
 *   writing is a copy and es_gguf_writer_copy_kv() can take a reader's validated bytes verbatim,
 *   nested arrays included. Replacing a key keeps its original position.
 * - Everything is validated when it is added (ES_E_INVAL), so that the files this writer makes
 *   always pass the reader: known tensor types, shapes whose size matches nbytes, no duplicate
 *   names, a general.alignment that is a uint32 power of two.
 * - Tensor data is borrowed and streamed: metadata goes through a 1 MiB buffer, tensor data is
 *   written straight from the caller's memory in large chunks. The writer only appends (offsets
 *   are computed first), so it can write to a FIFO or /dev/stdout. Files go through
 *   core/outfile.c: a regular file is written to a uniquely named temporary file beside path,
 *   fsync'ed, then renamed over path; on any failure the temporary file is removed, so path is
 *   either untouched or complete.
 * - Layout matches ggml's: tensor data in insertion order, each tensor at an offset that is a
 *   multiple of the alignment, zero padding after the tensor infos and after every tensor.
 * - A writer is used by one thread at a time.
 */
#include "core/outfile.h"
#include "gguf/gguf_impl.h"
#include "quant/qtypes.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OUT_BUF_BYTES ((size_t)1 << 20)
#define WRITE_CHUNK ((size_t)1 << 30) /* Linux writes at most ~2 GiB per call */
#define ALIGN_KEY "general.alignment"

typedef struct wkv {
    char *key; /* [key_len], not NUL-terminated (copied keys may hold any bytes) */
    size_t key_len;
    uint32_t type;
    uint8_t *val; /* [val_len] the value as serialized in the file */
    size_t val_len;
} wkv;

typedef struct wtensor {
    char *name; /* NUL-terminated copy */
    uint32_t type, n_dims;
    int64_t ne[ES_GGUF_MAX_DIMS];
    const void *data; /* borrowed until es_gguf_writer_write() returns */
    uint64_t nbytes;
    es_gguf_fill_fn fill; /* or: bytes produced at write time by fill(user, ...) */
    void *user;
} wtensor;

struct es_gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    es_gguf_progress_fn progress;
    void *progress_user;
};

#define FILL_CHUNK_BYTES ((size_t)4 << 20) /* tensors with a fill function are made in chunks */

es_status es_gguf_writer_create(es_gguf_writer **out)
{
    if (!out) return es_fail(ES_E_INVAL, "gguf writer: out is NULL");
    *out = calloc(1, sizeof(**out));
    return *out ? ES_OK : es_fail(ES_E_NOMEM, "gguf writer: out of memory");
}

void es_gguf_writer_destroy(es_gguf_writer *w)
{
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val);
    }
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

/* Grows *arr (of *cap elements of size elem) so that one more fits. */
static bool grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap) return true;
    size_t c = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, c * elem);
    if (!p) return false;
    *arr = p;
    *cap = c;
    return true;
}

/* Sets key (key_len bytes) to a value of type t serialized in val[len] (copied). */
static es_status put_kv(es_gguf_writer *w, const char *key, size_t key_len, uint32_t t,
                        const void *val, size_t len)
{
    if (key_len == strlen(ALIGN_KEY) && memcmp(key, ALIGN_KEY, key_len) == 0) {
        uint32_t a = 0;
        if (t == ES_GGUF_UINT32) memcpy(&a, val, 4);
        if (a == 0 || (a & (a - 1)) != 0)
            return es_fail(ES_E_INVAL, "gguf writer: %s must be a uint32 power of two", ALIGN_KEY);
    }
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) return es_fail(ES_E_NOMEM, "gguf writer: out of memory");
    if (len) memcpy(copy, val, len);
    for (size_t i = 0; i < w->n_kv; i++) {
        wkv *k = &w->kv[i];
        if (k->key_len == key_len && memcmp(k->key, key, key_len) == 0) {
            free(k->val);
            k->type = t;
            k->val = copy;
            k->val_len = len;
            return ES_OK;
        }
    }
    char *kcopy = malloc(key_len ? key_len : 1);
    if (!kcopy || !grow((void **)&w->kv, &w->cap_kv, w->n_kv, sizeof(wkv))) {
        free(copy);
        free(kcopy);
        return es_fail(ES_E_NOMEM, "gguf writer: out of memory");
    }
    memcpy(kcopy, key, key_len);
    w->kv[w->n_kv++] = (wkv){kcopy, key_len, t, copy, len};
    return ES_OK;
}

/* Scalars are stored as their little-endian bytes (the host order, see gguf_read.c). */
static es_status put_scalar(es_gguf_writer *w, const char *key, uint32_t t, const void *v)
{
    if (!w || !key) return es_fail(ES_E_INVAL, "gguf writer: NULL writer or key");
    return put_kv(w, key, strlen(key), t, v, es_gguf_scalar_size(t));
}

es_status es_gguf_writer_set_u16(es_gguf_writer *w, const char *key, uint16_t v)
{
    return put_scalar(w, key, ES_GGUF_UINT16, &v);
}

es_status es_gguf_writer_set_u32(es_gguf_writer *w, const char *key, uint32_t v)
{
    return put_scalar(w, key, ES_GGUF_UINT32, &v);
}

es_status es_gguf_writer_set_i32(es_gguf_writer *w, const char *key, int32_t v)
{
    return put_scalar(w, key, ES_GGUF_INT32, &v);
}

es_status es_gguf_writer_set_u64(es_gguf_writer *w, const char *key, uint64_t v)
{
    return put_scalar(w, key, ES_GGUF_UINT64, &v);
}

es_status es_gguf_writer_set_f32(es_gguf_writer *w, const char *key, float v)
{
    return put_scalar(w, key, ES_GGUF_FLOAT32, &v);
}

es_status es_gguf_writer_set_bool(es_gguf_writer *w, const char *key, bool v)
{
    uint8_t b = v ? 1 : 0;
    return put_scalar(w, key, ES_GGUF_BOOL, &b);
}

/* A string value is { u64 len, bytes } with no NUL. */
es_status es_gguf_writer_set_str(es_gguf_writer *w, const char *key, const char *v)
{
    if (!w || !key || !v) return es_fail(ES_E_INVAL, "gguf writer: NULL writer, key or value");
    uint64_t len = strlen(v);
    uint8_t *buf = malloc(8 + len);
    if (!buf) return es_fail(ES_E_NOMEM, "gguf writer: out of memory");
    memcpy(buf, &len, 8);
    memcpy(buf + 8, v, len);
    es_status st = put_kv(w, key, strlen(key), ES_GGUF_STRING, buf, 8 + len);
    free(buf);
    return st;
}

/* Serializes { u32 elem_type, u64 n, n elements }. Bool elements must be 0 or 1, as the reader
 * demands. */
es_status es_gguf_writer_set_arr(es_gguf_writer *w, const char *key, es_gguf_type elem_type,
                                 const void *data, uint64_t n)
{
    if (!w || !key || (!data && n))
        return es_fail(ES_E_INVAL, "gguf writer: NULL writer, key or data");
    size_t es = es_gguf_scalar_size(elem_type);
    if (!es)
        return es_fail(ES_E_INVAL, "gguf writer: key '%s': element type %d is not a scalar type",
                       key, (int)elem_type);
    if (n > (SIZE_MAX - 12) / es)
        return es_fail(ES_E_INVAL, "gguf writer: key '%s': array too large", key);
    if (elem_type == ES_GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (((const uint8_t *)data)[i] > 1)
                return es_fail(ES_E_INVAL, "gguf writer: key '%s': bool element %llu is not 0/1",
                               key, (unsigned long long)i);
    size_t len = 12 + (size_t)n * es;
    uint8_t *buf = malloc(len);
    if (!buf) return es_fail(ES_E_NOMEM, "gguf writer: out of memory");
    uint32_t et = elem_type;
    memcpy(buf, &et, 4);
    memcpy(buf + 4, &n, 8);
    if (n) memcpy(buf + 12, data, (size_t)n * es);
    es_status st = put_kv(w, key, strlen(key), ES_GGUF_ARRAY, buf, len);
    free(buf);
    return st;
}

/* Serializes { u32 STRING, u64 n, n x { u64 len, bytes } }. A first pass sizes the buffer with
 * overflow checks, a second fills it. */
es_status es_gguf_writer_set_arr_str(es_gguf_writer *w, const char *key, const char *const *strs,
                                     const size_t *lens, uint64_t n)
{
    if (!w || !key || (!strs && n))
        return es_fail(ES_E_INVAL, "gguf writer: NULL writer, key or strings");
    size_t len = 12;
    for (uint64_t i = 0; i < n; i++) {
        if (!strs[i] && (!lens || lens[i]))
            return es_fail(ES_E_INVAL, "gguf writer: key '%s': string %llu is NULL", key,
                           (unsigned long long)i);
        size_t sl = lens ? lens[i] : strlen(strs[i]);
        if (sl > SIZE_MAX - 8 - len)
            return es_fail(ES_E_INVAL, "gguf writer: key '%s': array too large", key);
        len += 8 + sl;
    }
    uint8_t *buf = malloc(len), *p = buf + 12;
    if (!buf) return es_fail(ES_E_NOMEM, "gguf writer: out of memory");
    uint32_t et = ES_GGUF_STRING;
    memcpy(buf, &et, 4);
    memcpy(buf + 4, &n, 8);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t sl = lens ? lens[i] : strlen(strs[i]);
        memcpy(p, &sl, 8);
        if (sl) memcpy(p + 8, strs[i], sl);
        p += 8 + sl;
    }
    es_status st = put_kv(w, key, strlen(key), ES_GGUF_ARRAY, buf, len);
    free(buf);
    return st;
}

/* The reader validated g's values (nested arrays included), so their bytes are copied as they
 * are: the copy is faithful whatever the depth. */
void es_gguf_writer_remove_keys(es_gguf_writer *w, const char *prefix)
{
    const size_t pl = strlen(prefix);
    size_t n = 0;
    for (size_t i = 0; i < w->n_kv; i++) {
        wkv *k = &w->kv[i];
        if (k->key_len >= pl && memcmp(k->key, prefix, pl) == 0) {
            free(k->key);
            free(k->val);
        } else {
            w->kv[n++] = *k; /* the others keep their order */
        }
    }
    w->n_kv = n;
}

es_status es_gguf_writer_copy_kv(es_gguf_writer *w, const es_gguf *g, const char *prefix)
{
    if (!w || !g) return es_fail(ES_E_INVAL, "gguf writer: NULL writer or source");
    size_t pl = prefix ? strlen(prefix) : 0;
    for (int64_t i = 0; i < es_gguf_n_kv(g); i++) {
        es_str k = es_gguf_key(g, i);
        if (pl && (k.len < pl || memcmp(k.ptr, prefix, pl) != 0)) continue;
        const void *val;
        uint64_t len;
        ES_ASSERT(es_gguf_kv_raw(g, i, &val, &len));
        ES_TRY(put_kv(w, k.ptr, k.len, es_gguf_kv_type(g, i), val, len));
    }
    return ES_OK;
}

es_status es_gguf_writer_set_alignment(es_gguf_writer *w, uint32_t alignment)
{
    return es_gguf_writer_set_u32(w, ALIGN_KEY, alignment);
}

/* Checks what the reader will check (known type, 1..4 dims, ne >= 0, no int64 overflow, row
 * length a multiple of the block size, unique name) plus nbytes == row bytes x rows, so that a
 * file this writer makes always opens. Only the pointer is kept: data is read during write. */
static es_status add_tensor(es_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                            const int64_t *ne, const void *data, uint64_t nbytes,
                            es_gguf_fill_fn fill, void *user)
{
    if (!w || !name || !ne) return es_fail(ES_E_INVAL, "gguf writer: NULL writer, name or shape");
    if (n_dims < 1 || n_dims > ES_GGUF_MAX_DIMS)
        return es_fail(ES_E_INVAL, "gguf writer: tensor '%s': %u dimensions (must be 1 to %d)",
                       name, n_dims, ES_GGUF_MAX_DIMS);
    const es_qtype_info *q = es_qtype_info_get(type);
    if (!q) return es_fail(ES_E_INVAL, "gguf writer: tensor '%s': unknown type %u", name, type);
    wtensor t = {.type = type, .n_dims = n_dims, .data = data, .nbytes = nbytes, .fill = fill,
                 .user = user};
    int64_t rows = 1, n_elems;
    for (uint32_t d = 0; d < ES_GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] < 0)
            return es_fail(ES_E_INVAL, "gguf writer: tensor '%s': negative dimension", name);
        if (d > 0 && __builtin_mul_overflow(rows, t.ne[d], &rows))
            return es_fail(ES_E_INVAL, "gguf writer: tensor '%s': shape overflows", name);
    }
    if (__builtin_mul_overflow(rows, t.ne[0], &n_elems))
        return es_fail(ES_E_INVAL, "gguf writer: tensor '%s': shape overflows", name);
    if (t.ne[0] % q->block_elems != 0)
        return es_fail(ES_E_INVAL, "gguf writer: tensor '%s': row length %lld is not a multiple "
                       "of the %s block size %u", name, (long long)t.ne[0], q->name,
                       q->block_elems);
    uint64_t want;
    size_t row = es_qtype_row_bytes(type, t.ne[0]);
    if ((row == 0 && t.ne[0] != 0) || __builtin_mul_overflow((uint64_t)row, (uint64_t)rows, &want))
        return es_fail(ES_E_INVAL, "gguf writer: tensor '%s': byte size overflows", name);
    if (nbytes != want)
        return es_fail(ES_E_INVAL, "gguf writer: tensor '%s': %llu bytes given, its %s shape "
                       "needs %llu", name, (unsigned long long)nbytes, q->name,
                       (unsigned long long)want);
    if (!data && !fill && nbytes)
        return es_fail(ES_E_INVAL, "gguf writer: tensor '%s': data is NULL", name);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return es_fail(ES_E_INVAL, "gguf writer: tensor '%s' added twice", name);
    if (!(t.name = strdup(name)) || !grow((void **)&w->t, &w->cap_t, w->n_t, sizeof(wtensor))) {
        free(t.name);
        return es_fail(ES_E_NOMEM, "gguf writer: out of memory");
    }
    w->t[w->n_t++] = t;
    return ES_OK;
}

es_status es_gguf_writer_add_tensor(es_gguf_writer *w, const char *name, uint32_t type,
                                    uint32_t n_dims, const int64_t *ne, const void *data,
                                    uint64_t nbytes)
{
    return add_tensor(w, name, type, n_dims, ne, data, nbytes, NULL, NULL);
}

es_status es_gguf_writer_add_tensor_fn(es_gguf_writer *w, const char *name, uint32_t type,
                                       uint32_t n_dims, const int64_t *ne, uint64_t nbytes,
                                       es_gguf_fill_fn fill, void *user)
{
    if (!fill) return es_fail(ES_E_INVAL, "gguf writer: tensor '%s': no fill function", name);
    return add_tensor(w, name, type, n_dims, ne, NULL, nbytes, fill, user);
}

void es_gguf_writer_set_progress(es_gguf_writer *w, es_gguf_progress_fn fn, void *user)
{
    w->progress = fn;
    w->progress_user = user;
}

/* ---------------------------------------------------------------------------------------------
 * Output
 * ------------------------------------------------------------------------------------------- */

/* Buffered output to fd. The first error sticks in err (an errno) and turns later calls into
 * no-ops, so the writing code checks once at the end. */
typedef struct out {
    int fd;
    int err;
    uint8_t *buf; /* [OUT_BUF_BYTES] */
    size_t len;
    uint64_t pos; /* bytes accepted so far = file offset of the next byte */
    es_status fill_st; /* first failure of a tensor's fill function */
    uint8_t *chunk;    /* [FILL_CHUNK_BYTES] for fill functions, allocated on first use */
} out;

/* write() until done; retries EINTR and short writes, records the first error. */
static void write_all(out *o, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n && !o->err) {
        ssize_t r = write(o->fd, b, n < WRITE_CHUNK ? n : WRITE_CHUNK);
        if (r < 0) {
            if (errno != EINTR) o->err = errno;
        } else if (r == 0) {
            o->err = EIO;
        } else {
            b += r;
            n -= (size_t)r;
        }
    }
}

static void out_flush(out *o)
{
    write_all(o, o->buf, o->len);
    o->len = 0;
}

/* Appends n bytes. Small pieces are gathered in the buffer; a piece as large as the buffer
 * (tensor data) is written directly after a flush, so it is never copied. */
static void out_put(out *o, const void *p, size_t n)
{
    if (o->err) return;
    o->pos += n;
    if (n > OUT_BUF_BYTES - o->len) out_flush(o);
    if (n >= OUT_BUF_BYTES) {
        write_all(o, p, n); /* large tensor data: straight from the caller's memory */
        return;
    }
    memcpy(o->buf + o->len, p, n);
    o->len += n;
}

static void out_u32(out *o, uint32_t v) { out_put(o, &v, 4); }
static void out_u64(out *o, uint64_t v) { out_put(o, &v, 8); }

/* Zero bytes up to the next multiple of align. */
static void out_pad(out *o, uint64_t align)
{
    static const uint8_t zeros[4096];
    uint64_t n = (align - o->pos % align) % align;
    while (n) {
        size_t k = n < sizeof(zeros) ? (size_t)n : sizeof(zeros);
        out_put(o, zeros, k);
        n -= k;
    }
}

/* general.alignment if set (put_kv checked it), else GGUF's default 32. */
static uint64_t writer_alignment(const es_gguf_writer *w)
{
    for (size_t i = 0; i < w->n_kv; i++) {
        const wkv *k = &w->kv[i];
        if (k->key_len == strlen(ALIGN_KEY) && memcmp(k->key, ALIGN_KEY, k->key_len) == 0) {
            uint32_t a;
            memcpy(&a, k->val, 4); /* put_kv checked type and value */
            return a;
        }
    }
    return 32;
}

/* Header, KVs, tensor infos (offsets from offs), padding, then each tensor's data followed by
 * padding to the alignment (ggml pads after the last tensor too). */
static void write_body(const es_gguf_writer *w, out *o, const uint64_t *offs, uint64_t align)
{
    out_put(o, "GGUF", 4);
    out_u32(o, 3);
    out_u64(o, w->n_t);
    out_u64(o, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        const wkv *k = &w->kv[i];
        out_u64(o, k->key_len);
        out_put(o, k->key, k->key_len);
        out_u32(o, k->type);
        out_put(o, k->val, k->val_len);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        out_u64(o, strlen(t->name));
        out_put(o, t->name, strlen(t->name));
        out_u32(o, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) out_u64(o, (uint64_t)t->ne[d]);
        out_u32(o, t->type);
        out_u64(o, offs[i]);
    }
    out_pad(o, align);
    const uint64_t total = o->pos + (w->n_t ? offs[w->n_t - 1] + w->t[w->n_t - 1].nbytes : 0);
    for (size_t i = 0; i < w->n_t && !o->err && o->fill_st == ES_OK; i++) {
        const wtensor *t = &w->t[i];
        if (!t->fill) {
            out_put(o, t->data, t->nbytes);
        } else {
            if (!o->chunk && !(o->chunk = malloc(FILL_CHUNK_BYTES))) {
                o->fill_st = es_fail(ES_E_NOMEM, "gguf writer: out of memory");
                break;
            }
            for (uint64_t at = 0; at < t->nbytes && !o->err; at += FILL_CHUNK_BYTES) {
                size_t n = t->nbytes - at < FILL_CHUNK_BYTES ? (size_t)(t->nbytes - at) : FILL_CHUNK_BYTES;
                if ((o->fill_st = t->fill(t->user, at, o->chunk, n)) != ES_OK) break;
                out_put(o, o->chunk, n);
            }
        }
        out_pad(o, align);
        if (w->progress) w->progress(w->progress_user, o->pos < total ? o->pos : total, total);
    }
    out_flush(o);
    free(o->chunk);
    o->chunk = NULL;
}

/* Offsets first (each tensor's size rounded up to the alignment), then the whole file through
 * es_outfile (core/outfile.c): a regular path gets a temporary file renamed into place when
 * complete, a FIFO or character device is written in place (the body only appends, never seeks).
 * Any failure removes the temporary file; path is then untouched. */
es_status es_gguf_writer_write(es_gguf_writer *w, const char *path)
{
    if (!w || !path) return es_fail(ES_E_INVAL, "gguf writer: NULL writer or path");
    es_status st = ES_OK;
    uint64_t align = writer_alignment(w), end = 0;
    uint64_t *offs = malloc((w->n_t ? w->n_t : 1) * sizeof(uint64_t));
    es_outfile f = {.fd = -1, .slot = -1};
    out o = {.fd = -1, .buf = malloc(OUT_BUF_BYTES)};
    if (!offs || !o.buf) {
        st = es_fail(ES_E_NOMEM, "gguf writer: out of memory");
        goto done;
    }
    for (size_t i = 0; i < w->n_t; i++) {
        offs[i] = end;
        uint64_t padded = w->t[i].nbytes + (align - w->t[i].nbytes % align) % align;
        if (padded < w->t[i].nbytes || __builtin_add_overflow(end, padded, &end)) {
            st = es_fail(ES_E_INVAL, "gguf writer: %s: tensor data exceeds 2^64 bytes", path);
            goto done;
        }
    }
    if ((st = es_outfile_open(path, &f)) != ES_OK) goto done;
    o.fd = f.fd;
    write_body(w, &o, offs, align);
    if (o.fill_st != ES_OK) {
        st = o.fill_st; /* the fill function's message stands */
    } else if (o.err) {
        st = es_fail(ES_E_IO, "%s: write failed: %s", path, strerror(o.err));
    } else {
        st = es_outfile_commit(&f); /* fsync, close, rename; on failure removes the temp file */
    }
done:
    es_outfile_abort(&f); /* no-op after a commit */
    free(o.buf);
    free(offs);
    return st;
}
