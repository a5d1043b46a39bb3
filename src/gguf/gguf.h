/*
 * GGUF v3 reader and writer.
 *
 * File layout (all little-endian):
 *   magic "GGUF" | u32 version (3; 2 accepted) | u64 n_tensors | u64 n_kv
 *   n_kv x  { string key | u32 value_type | value }
 *   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
 *   padding to general.alignment (default 32)
 *   tensor data: each tensor at data_start + offset, offsets multiples of the alignment
 * string = u64 length + bytes (no NUL). array = u32 elem_type + u64 count + elements
 * (arrays of arrays and arrays of strings allowed).
 *
 * DESIGN: the reader maps the file read-only and validates everything before anything else
 * looks at it: every count, string length, nested array, tensor shape, type, offset and size is
 * checked against the bytes actually present, with overflow-safe arithmetic. Allocation is
 * bounded by the file size (a count can never ask for more entries than the file could hold).
 * After es_gguf_open() succeeds, every accessor below is safe without further checks.
 * Strings are (pointer, length) views into the mapping, valid until es_gguf_close().
 */
#ifndef ES_GGUF_H
#define ES_GGUF_H

#include "core/util.h"
#include <stdbool.h>

typedef enum es_gguf_type {
    ES_GGUF_UINT8 = 0,
    ES_GGUF_INT8 = 1,
    ES_GGUF_UINT16 = 2,
    ES_GGUF_INT16 = 3,
    ES_GGUF_UINT32 = 4,
    ES_GGUF_INT32 = 5,
    ES_GGUF_FLOAT32 = 6,
    ES_GGUF_BOOL = 7,
    ES_GGUF_STRING = 8,
    ES_GGUF_ARRAY = 9,
    ES_GGUF_UINT64 = 10,
    ES_GGUF_INT64 = 11,
    ES_GGUF_FLOAT64 = 12,
    ES_GGUF_TYPE_COUNT
} es_gguf_type;

/* Strings are es_str views (include/estream.h): ptr is not NUL-terminated. */

#define ES_GGUF_MAX_DIMS 4

typedef struct es_gguf_tensor {
    es_str name;
    uint32_t n_dims;
    int64_t ne[ES_GGUF_MAX_DIMS]; /* ne[0] is the contiguous (row) dimension; unused dims = 1 */
    uint32_t type;                /* ggml type id (es_qtype) */
    uint64_t offset;              /* relative to the data section (of its file) */
    uint64_t nbytes;              /* validated: offset + nbytes lies inside the file */
    const void *data;             /* points into the mapping (NULL for in-memory builds) */
    uint32_t file;                /* 0, or in a split model the part that holds it (0-based) */
} es_gguf_tensor;

typedef struct es_gguf es_gguf; /* opaque */

/* Opens and validates the file. Errors name the file: "model.gguf: tensor blk.0.x runs past the
 * end of the file". ES_E_IO if it cannot be opened/mapped, ES_E_FORMAT if malformed (including
 * tensor types this build does not know).
 * A split model (llama.cpp's gguf-split: split.count > 1, files <prefix>-00001-of-0000N.gguf ...)
 * opens from its first part: the other parts are opened and validated too, their tensors are
 * listed after the first part's (es_gguf_tensor.file says which part), the metadata is the first
 * part's. ES_E_INVAL for another part than the first (the message names the first), ES_E_IO
 * for a part that is missing, ES_E_FORMAT for parts that disagree (split.no, split.count,
 * split.tensors.count, a tensor in two parts). */
es_status es_gguf_open(const char *path, es_gguf **out);
/* Same over a caller-owned buffer (tests, fuzzing). buf must outlive the handle. name is used in
 * error messages. */
es_status es_gguf_open_memory(const void *buf, size_t size, const char *name, es_gguf **out);
void es_gguf_close(es_gguf *g); /* NULL is a no-op; accepts half-built handles */

const char *es_gguf_path(const es_gguf *g);
/* True if g is a file mapped by es_gguf_open (its path can be read), false for a buffer. */
bool es_gguf_is_mapped(const es_gguf *g);
/* True if fd (opened again by g's path, to read it otherwise than through the mapping) is the
 * file g mapped as it was then: the same device, inode, size and modification time. A file
 * replaced or rewritten at that path since is not, and reading it would mix two files. */
bool es_gguf_same_file(const es_gguf *g, int fd);
/* ES_OK if es_gguf_same_file(g, fd), else ES_E_IO naming g's path and what to do (`use`: what
 * the caller reads it for, in the message). */
es_status es_gguf_check_same_file(const es_gguf *g, int fd, const char *use);
uint32_t es_gguf_version(const es_gguf *g);
uint64_t es_gguf_alignment(const es_gguf *g);
/* File offset of the tensor data section. A file without tensors may end before the padding
 * (llama.cpp's vocab files do): then this is the file size. */
uint64_t es_gguf_data_offset(const es_gguf *g);
uint64_t es_gguf_file_size(const es_gguf *g);
/* Files of the model: 1, or a split model's parts. es_gguf_file(g, i): part i's handle (0: g
 * itself; its path, data offset and size through the accessors above; NULL past the parts). */
uint32_t es_gguf_n_files(const es_gguf *g);
const es_gguf *es_gguf_file(const es_gguf *g, uint32_t i);
uint64_t es_gguf_files_size(const es_gguf *g); /* the bytes of all its files */

/* ---- metadata ---- */
int64_t es_gguf_n_kv(const es_gguf *g);
int64_t es_gguf_find_key(const es_gguf *g, const char *key); /* index or -1 */
es_str es_gguf_key(const es_gguf *g, int64_t i);
es_gguf_type es_gguf_kv_type(const es_gguf *g, int64_t i);

/* Typed getters by key. Return false if the key is absent or has an incompatible type.
 * Integer getters accept any integer type whose value fits (and bool for get_bool);
 * get_f32 accepts FLOAT32, FLOAT64 and integers. */
bool es_gguf_get_u32(const es_gguf *g, const char *key, uint32_t *out);
bool es_gguf_get_i64(const es_gguf *g, const char *key, int64_t *out);
bool es_gguf_get_f32(const es_gguf *g, const char *key, float *out);
bool es_gguf_get_bool(const es_gguf *g, const char *key, bool *out);
bool es_gguf_get_str(const es_gguf *g, const char *key, es_str *out);

/* The same, with errors: a key that is present but has a type that does not convert fails with
 * ES_E_FORMAT "<file>: <key> has type uint32, expected string" (a value out of the result's
 * range: "<file>: <key> = <v> is out of range"). An absent key fails with "<file>: missing key
 * <key>" if required, else returns ES_OK and leaves *out as it was. */
es_status es_gguf_read_str(const es_gguf *g, const char *key, bool required, es_str *out);
es_status es_gguf_read_i64(const es_gguf *g, const char *key, bool required, int64_t *out);
es_status es_gguf_read_f32(const es_gguf *g, const char *key, bool required, float *out);
/* "uint32", "string", ...; "unknown" for a value outside the enum. */
const char *es_gguf_type_name(es_gguf_type t);

/* Arrays: element type and count. For ES_GGUF_ARRAY-typed keys only. */
bool es_gguf_get_arr(const es_gguf *g, const char *key, es_gguf_type *elem_type, uint64_t *n);
/* Raw little-endian elements of a scalar-typed array (not STRING/ARRAY): n * elem size bytes.
 * May be unaligned: read with memcpy. NULL if not such an array. */
const void *es_gguf_arr_data(const es_gguf *g, const char *key);
/* i-th string of a STRING array. The reader pre-indexes string arrays so this is O(1).
 * {NULL, 0} if the key is absent, not a string array, or i is out of range. */
es_str es_gguf_arr_str(const es_gguf *g, const char *key, uint64_t i);

/* ---- tensors ---- */
int64_t es_gguf_n_tensors(const es_gguf *g);
const es_gguf_tensor *es_gguf_tensor_at(const es_gguf *g, int64_t i);
const es_gguf_tensor *es_gguf_find_tensor(const es_gguf *g, const char *name); /* NULL if absent */

/* Compares an es_str with a C string. */
static inline bool es_str_eq(es_str s, const char *c)
{
    size_t i = 0;
    for (; i < s.len; i++)
        if (c[i] != s.ptr[i] || c[i] == 0) return false;
    return c[i] == 0;
}

/* ---- writer ----
 * Builds a GGUF v3 file in memory (metadata) and streams tensor data on write. Keys keep insertion
 * order. Tensor data is borrowed: the pointers passed to add_tensor must stay valid until
 * es_gguf_writer_write() returns. The output is made as estream.h's "Output files" says: a
 * regular file via a uniquely named temporary file renamed into place (a failed write never
 * leaves a partial file at path, nor a temporary file), a FIFO or character device in place. */
typedef struct es_gguf_writer es_gguf_writer;
es_status es_gguf_writer_create(es_gguf_writer **out);
void es_gguf_writer_destroy(es_gguf_writer *w); /* NULL is a no-op */
es_status es_gguf_writer_set_u16(es_gguf_writer *w, const char *key, uint16_t v);
es_status es_gguf_writer_set_u32(es_gguf_writer *w, const char *key, uint32_t v);
es_status es_gguf_writer_set_i32(es_gguf_writer *w, const char *key, int32_t v);
es_status es_gguf_writer_set_u64(es_gguf_writer *w, const char *key, uint64_t v);
es_status es_gguf_writer_set_f32(es_gguf_writer *w, const char *key, float v);
es_status es_gguf_writer_set_bool(es_gguf_writer *w, const char *key, bool v);
es_status es_gguf_writer_set_str(es_gguf_writer *w, const char *key, const char *v);
/* Array of scalars: elem_type any scalar type; data holds n little-endian elements. */
es_status es_gguf_writer_set_arr(es_gguf_writer *w, const char *key, es_gguf_type elem_type,
                                 const void *data, uint64_t n);
/* Array of strings (each NUL-terminated, or with explicit lengths if lens != NULL). */
es_status es_gguf_writer_set_arr_str(es_gguf_writer *w, const char *key, const char *const *strs,
                                     const size_t *lens, uint64_t n);
/* Copies every key (including nested arrays) of g whose name starts with prefix ("" = all),
 * replacing keys already set with the same name. Used to copy a tokenizer from a vocab file. */
es_status es_gguf_writer_copy_kv(es_gguf_writer *w, const es_gguf *g, const char *prefix);
/* Removes the keys set so far whose names start with prefix (keeping the others' order). */
void es_gguf_writer_remove_keys(es_gguf_writer *w, const char *prefix);
/* Sets general.alignment (power of two, default 32). */
es_status es_gguf_writer_set_alignment(es_gguf_writer *w, uint32_t alignment);
/* Adds a tensor; ne[0] is the row length. nbytes must equal the size implied by type and ne. */
es_status es_gguf_writer_add_tensor(es_gguf_writer *w, const char *name, uint32_t type,
                                    uint32_t n_dims, const int64_t *ne, const void *data,
                                    uint64_t nbytes);
/* Adds a tensor whose bytes are produced at write time, for files too big to hold in memory:
 * fill(user, offset, buf, len) must write bytes [offset, offset+len) of the tensor into buf; it is
 * called with increasing offsets covering [0, nbytes) exactly once. A non-ES_OK return aborts the
 * write (the temporary file is removed). */
typedef es_status (*es_gguf_fill_fn)(void *user, uint64_t offset, void *buf, size_t len);
es_status es_gguf_writer_add_tensor_fn(es_gguf_writer *w, const char *name, uint32_t type,
                                       uint32_t n_dims, const int64_t *ne, uint64_t nbytes,
                                       es_gguf_fill_fn fill, void *user);
/* Progress during write: called after each tensor with bytes written so far and the total. */
typedef void (*es_gguf_progress_fn)(void *user, uint64_t done, uint64_t total);
void es_gguf_writer_set_progress(es_gguf_writer *w, es_gguf_progress_fn fn, void *user);
es_status es_gguf_writer_write(es_gguf_writer *w, const char *path);

#endif
