/*
 * GGUF reader and writer tests.
 *
 * Files are built byte by byte here (bb_* helpers), independently of the writer, so that the
 * reader is checked against the format and not against our own writer. Then: field-by-field
 * reads, every value type through the getters and their coercions, writer round trips (all
 * value types, nested arrays via copy_kv, tensors of several types), truncation at every byte,
 * single-byte corruption at every byte (with ASan, any over-read is a failure), one test per
 * validation rule with the message checked, and writer failures leaving no file behind.
 */
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include "t.h"

#include "gguf/gguf.h"
#include "gguf/gguf_impl.h"
#include "quant/qtypes.h"
#include "split_parts.h"

/* ---------------------------------------------------------------------------------------------
 * Byte builder
 * ------------------------------------------------------------------------------------------- */

typedef struct bb {
    uint8_t *p;
    size_t n, cap;
} bb;

static void bb_put(bb *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void bb_u8(bb *b, uint8_t v) { bb_put(b, &v, 1); }
static void bb_u16(bb *b, uint16_t v) { bb_put(b, &v, 2); }
static void bb_u32(bb *b, uint32_t v) { bb_put(b, &v, 4); }
static void bb_u64(bb *b, uint64_t v) { bb_put(b, &v, 8); }
static void bb_f32(bb *b, float v) { bb_put(b, &v, 4); }
static void bb_f64(bb *b, double v) { bb_put(b, &v, 8); }
static void bb_str(bb *b, const char *s)
{
    bb_u64(b, strlen(s));
    bb_put(b, s, strlen(s));
}
static void bb_pad(bb *b, size_t align)
{
    while (b->n % align) bb_u8(b, 0);
}
static void bb_free(bb *b)
{
    free(b->p);
    *b = (bb){0};
}
/* key + type; the caller appends the value */
static void bb_key(bb *b, const char *key, uint32_t type)
{
    bb_str(b, key);
    bb_u32(b, type);
}
static void bb_header(bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    bb_put(b, "GGUF", 4);
    bb_u32(b, version);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}
static void bb_tinfo(bb *b, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type,
                     uint64_t offset)
{
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) bb_u64(b, (uint64_t)ne[d]);
    bb_u32(b, type);
    bb_u64(b, offset);
}

typedef struct tdesc {
    const char *name;
    uint32_t n_dims;
    int64_t ne[4];
    uint32_t type;
    uint64_t offset;
} tdesc;

/* A whole file: header, the serialized kvs (n_kv of them), tensor infos, padding to align, then
 * data_bytes bytes of data (byte i of the data section = i * 7). */
static bb build(uint32_t version, uint64_t n_kv, const bb *kvs, const tdesc *t, int nt,
                size_t align, size_t data_bytes)
{
    bb b = {0};
    bb_header(&b, version, (uint64_t)nt, n_kv);
    if (kvs) bb_put(&b, kvs->p, kvs->n);
    for (int i = 0; i < nt; i++) bb_tinfo(&b, t[i].name, t[i].n_dims, t[i].ne, t[i].type, t[i].offset);
    bb_pad(&b, align);
    for (size_t i = 0; i < data_bytes; i++) bb_u8(&b, (uint8_t)(i * 7));
    return b;
}

/* ---------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------- */

/* Opens an exact-size heap copy of buf[0..n) (so ASan sees any over-read). */
static es_status open_copy(const void *buf, size_t n, const char *name, es_gguf **g, void **copy)
{
    *copy = malloc(n ? n : 1);
    assert_non_null(*copy);
    if (n) memcpy(*copy, buf, n);
    return es_gguf_open_memory(*copy, n, name, g);
}

/* buf must be rejected with ES_E_FORMAT and a one-line message "bad.gguf: ...want...". */
static void expect_format_(const bb *b, size_t n, const char *want, int line)
{
    es_gguf *g = (es_gguf *)1;
    void *copy;
    es_status st = open_copy(b->p, n, "bad.gguf", &g, &copy);
    const char *m = es_last_error();
    if (st != ES_E_FORMAT) fail_msg("line %d: status %d (%s), expected format error", line, st, m);
    assert_null(g);
    if (strncmp(m, "bad.gguf: ", 10) != 0 || (want && !strstr(m, want)))
        fail_msg("line %d: message \"%s\" lacks \"%s\"", line, m, want ? want : "");
    assert_null(strchr(m, '\n'));
    free(copy);
}
#define expect_format(b, want) expect_format_((b), (b)->n, (want), __LINE__)

/* Calls every getter on every key and tensor, touching every byte they point to (as the fuzzer
 * does). Returns a checksum so the reads are not optimized away. */
static uint64_t walk(const es_gguf *g)
{
    uint64_t sum = es_gguf_version(g) + es_gguf_alignment(g) + es_gguf_data_offset(g);
    assert_true(es_gguf_data_offset(g) <= es_gguf_file_size(g));
    for (int64_t i = 0; i < es_gguf_n_kv(g); i++) {
        es_str k = es_gguf_key(g, i);
        char key[256];
        if (k.len >= sizeof(key) || memchr(k.ptr, 0, k.len)) continue;
        memcpy(key, k.ptr, k.len);
        key[k.len] = 0;
        assert_int_equal(es_gguf_find_key(g, key), i);
        uint32_t u;
        int64_t s;
        float f;
        bool bo;
        es_str str;
        es_gguf_type et;
        uint64_t n;
        sum += es_gguf_get_u32(g, key, &u) ? u : 0;
        sum += es_gguf_get_i64(g, key, &s) ? (uint64_t)s : 0;
        sum += es_gguf_get_f32(g, key, &f) ? (f == f) : 0;
        sum += es_gguf_get_bool(g, key, &bo) ? bo : 0;
        if (es_gguf_get_str(g, key, &str))
            for (size_t j = 0; j < str.len; j++) sum += (uint8_t)str.ptr[j];
        if (es_gguf_get_arr(g, key, &et, &n)) {
            const uint8_t *d = es_gguf_arr_data(g, key);
            if (d)
                for (uint64_t j = 0; j < n * es_gguf_scalar_size(et); j++) sum += d[j];
            if (et == ES_GGUF_STRING)
                for (uint64_t j = 0; j < n; j++) {
                    es_str e = es_gguf_arr_str(g, key, j);
                    for (size_t q = 0; q < e.len; q++) sum += (uint8_t)e.ptr[q];
                }
        }
    }
    for (int64_t i = 0; i < es_gguf_n_tensors(g); i++) {
        const es_gguf_tensor *t = es_gguf_tensor_at(g, i);
        const uint8_t *d = t->data;
        if (t->nbytes) sum += d[0] + d[t->nbytes - 1];
        sum += t->nbytes;
    }
    return sum;
}

static bool kv_equal(const es_gguf *a, int64_t ia, const es_gguf *b, int64_t ib)
{
    const void *va, *vb;
    uint64_t la, lb;
    es_str ka = es_gguf_key(a, ia), kb = es_gguf_key(b, ib);
    assert_true(es_gguf_kv_raw(a, ia, &va, &la));
    assert_true(es_gguf_kv_raw(b, ib, &vb, &lb));
    return ka.len == kb.len && memcmp(ka.ptr, kb.ptr, ka.len) == 0 &&
           es_gguf_kv_type(a, ia) == es_gguf_kv_type(b, ib) && la == lb && memcmp(va, vb, la) == 0;
}

static bool file_exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* ---------------------------------------------------------------------------------------------
 * The hand-built reference file
 * ------------------------------------------------------------------------------------------- */

#define REF_NKV 17
#define REF_ALIGN 64

/* Every value type, nested arrays, alignment 64, two tensors (f32 [4,2] at 0, q8_0 [32] at 64). */
static bb ref_file(size_t *data_offset)
{
    bb k = {0};
    bb_key(&k, "a.u8", ES_GGUF_UINT8), bb_u8(&k, 200);
    bb_key(&k, "a.i8", ES_GGUF_INT8), bb_u8(&k, (uint8_t)-5);
    bb_key(&k, "a.u16", ES_GGUF_UINT16), bb_u16(&k, 60000);
    bb_key(&k, "a.i16", ES_GGUF_INT16), bb_u16(&k, (uint16_t)-30000);
    bb_key(&k, "a.u32", ES_GGUF_UINT32), bb_u32(&k, 4000000000u);
    bb_key(&k, "a.i32", ES_GGUF_INT32), bb_u32(&k, (uint32_t)-2000000000);
    bb_key(&k, "a.f32", ES_GGUF_FLOAT32), bb_f32(&k, 1.5f);
    bb_key(&k, "a.bool", ES_GGUF_BOOL), bb_u8(&k, 1);
    bb_key(&k, "a.str", ES_GGUF_STRING), bb_str(&k, "hello");
    bb_key(&k, "a.u64", ES_GGUF_UINT64), bb_u64(&k, (1ull << 63) + 5);
    bb_key(&k, "a.i64", ES_GGUF_INT64), bb_u64(&k, (uint64_t)-(1ll << 40));
    bb_key(&k, "a.f64", ES_GGUF_FLOAT64), bb_f64(&k, 2.25);
    bb_key(&k, "a.arr_i32", ES_GGUF_ARRAY), bb_u32(&k, ES_GGUF_INT32), bb_u64(&k, 3);
    bb_u32(&k, 1), bb_u32(&k, (uint32_t)-2), bb_u32(&k, 3);
    bb_key(&k, "a.arr_str", ES_GGUF_ARRAY), bb_u32(&k, ES_GGUF_STRING), bb_u64(&k, 3);
    bb_str(&k, "x"), bb_str(&k, ""), bb_str(&k, "yz");
    /* [[u16 1, 2], [str "q"], []] */
    bb_key(&k, "a.nested", ES_GGUF_ARRAY), bb_u32(&k, ES_GGUF_ARRAY), bb_u64(&k, 3);
    bb_u32(&k, ES_GGUF_UINT16), bb_u64(&k, 2), bb_u16(&k, 1), bb_u16(&k, 2);
    bb_u32(&k, ES_GGUF_STRING), bb_u64(&k, 1), bb_str(&k, "q");
    bb_u32(&k, ES_GGUF_FLOAT64), bb_u64(&k, 0);
    bb_key(&k, "a.arr_bool", ES_GGUF_ARRAY), bb_u32(&k, ES_GGUF_BOOL), bb_u64(&k, 2);
    bb_u8(&k, 0), bb_u8(&k, 1);
    bb_key(&k, "general.alignment", ES_GGUF_UINT32), bb_u32(&k, REF_ALIGN);
    tdesc t[2] = {{"t0", 2, {4, 2}, ES_QTYPE_F32, 0}, {"blk.1.q", 1, {32}, ES_QTYPE_Q8_0, 64}};
    bb b = build(3, REF_NKV, &k, t, 2, REF_ALIGN, 64 + 34);
    *data_offset = b.n - 98;
    bb_free(&k);
    return b;
}

static void test_hand_built_fields(void **state)
{
    size_t data_off;
    bb b = ref_file(&data_off);
    es_gguf *g;
    void *copy;
    assert_int_equal(open_copy(b.p, b.n, "ref.gguf", &g, &copy), ES_OK);
    const uint8_t *base = copy;
    assert_string_equal(es_gguf_path(g), "ref.gguf");
    assert_int_equal(es_gguf_version(g), 3);
    assert_int_equal(es_gguf_alignment(g), REF_ALIGN);
    assert_int_equal(es_gguf_data_offset(g), data_off);
    assert_int_equal(data_off % REF_ALIGN, 0);
    assert_int_equal(es_gguf_file_size(g), b.n);
    assert_int_equal(es_gguf_n_kv(g), REF_NKV);

    /* keys in file order */
    static const char *const keys[REF_NKV] = {
        "a.u8",  "a.i8",  "a.u16", "a.i16", "a.u32",     "a.i32",     "a.f32",    "a.bool",
        "a.str", "a.u64", "a.i64", "a.f64", "a.arr_i32", "a.arr_str", "a.nested", "a.arr_bool",
        "general.alignment"};
    static const es_gguf_type types[REF_NKV] = {
        ES_GGUF_UINT8,  ES_GGUF_INT8,   ES_GGUF_UINT16, ES_GGUF_INT16,  ES_GGUF_UINT32,
        ES_GGUF_INT32,  ES_GGUF_FLOAT32, ES_GGUF_BOOL,  ES_GGUF_STRING, ES_GGUF_UINT64,
        ES_GGUF_INT64,  ES_GGUF_FLOAT64, ES_GGUF_ARRAY, ES_GGUF_ARRAY,  ES_GGUF_ARRAY,
        ES_GGUF_ARRAY,  ES_GGUF_UINT32};
    for (int i = 0; i < REF_NKV; i++) {
        assert_true(es_str_eq(es_gguf_key(g, i), keys[i]));
        assert_int_equal(es_gguf_kv_type(g, i), types[i]);
        assert_int_equal(es_gguf_find_key(g, keys[i]), i);
        /* key strings point into the buffer: 8-byte length just before them */
        uint64_t len;
        memcpy(&len, es_gguf_key(g, i).ptr - 8, 8);
        assert_int_equal(len, strlen(keys[i]));
    }
    assert_int_equal(es_gguf_find_key(g, "a.u"), -1);
    assert_int_equal(es_gguf_find_key(g, "a.u88"), -1);
    assert_null(es_gguf_key(g, -1).ptr);
    assert_null(es_gguf_key(g, REF_NKV).ptr);
    assert_int_equal(es_gguf_kv_type(g, REF_NKV), ES_GGUF_TYPE_COUNT);

    /* integer getters: any integer type whose value fits */
    uint32_t u;
    int64_t s;
    float f;
    bool bo;
    es_str str;
    assert_true(es_gguf_get_u32(g, "a.u8", &u)), assert_int_equal(u, 200);
    assert_true(es_gguf_get_u32(g, "a.u16", &u)), assert_int_equal(u, 60000);
    assert_true(es_gguf_get_u32(g, "a.u32", &u)), assert_int_equal(u, 4000000000u);
    assert_false(es_gguf_get_u32(g, "a.i8", &u));  /* negative */
    assert_false(es_gguf_get_u32(g, "a.u64", &u)); /* too big */
    assert_false(es_gguf_get_u32(g, "a.i64", &u));
    assert_false(es_gguf_get_u32(g, "a.f32", &u));
    assert_false(es_gguf_get_u32(g, "a.bool", &u));
    assert_false(es_gguf_get_u32(g, "a.str", &u));
    assert_false(es_gguf_get_u32(g, "a.arr_i32", &u));
    assert_false(es_gguf_get_u32(g, "missing", &u));
    assert_true(es_gguf_get_i64(g, "a.i8", &s)), assert_int_equal(s, -5);
    assert_true(es_gguf_get_i64(g, "a.i16", &s)), assert_int_equal(s, -30000);
    assert_true(es_gguf_get_i64(g, "a.i32", &s)), assert_int_equal(s, -2000000000);
    assert_true(es_gguf_get_i64(g, "a.i64", &s)), assert_true(s == -(1ll << 40));
    assert_true(es_gguf_get_i64(g, "a.u32", &s)), assert_int_equal(s, 4000000000ll);
    assert_false(es_gguf_get_i64(g, "a.u64", &s)); /* 2^63 + 5 does not fit */
    assert_false(es_gguf_get_i64(g, "a.f64", &s));
    /* floats: float32, float64 and integers */
    assert_true(es_gguf_get_f32(g, "a.f32", &f)), assert_true(f == 1.5f);
    assert_true(es_gguf_get_f32(g, "a.f64", &f)), assert_true(f == 2.25f);
    assert_true(es_gguf_get_f32(g, "a.i16", &f)), assert_true(f == -30000.0f);
    assert_true(es_gguf_get_f32(g, "a.u8", &f)), assert_true(f == 200.0f);
    assert_false(es_gguf_get_f32(g, "a.str", &f));
    assert_false(es_gguf_get_f32(g, "a.bool", &f));
    /* bool: bool, or an integer 0/1 */
    assert_true(es_gguf_get_bool(g, "a.bool", &bo)), assert_true(bo);
    assert_false(es_gguf_get_bool(g, "a.u8", &bo));
    assert_false(es_gguf_get_bool(g, "a.f32", &bo));
    /* strings */
    assert_true(es_gguf_get_str(g, "a.str", &str));
    assert_true(es_str_eq(str, "hello"));
    assert_false(es_str_eq(str, "hell"));
    assert_false(es_str_eq(str, "hello!"));
    assert_false(es_gguf_get_str(g, "a.u8", &str));
    assert_false(es_gguf_get_str(g, "a.arr_str", &str));
    /* NULL outs just test presence */
    assert_true(es_gguf_get_u32(g, "a.u8", NULL));

    /* arrays */
    es_gguf_type et;
    uint64_t n;
    assert_true(es_gguf_get_arr(g, "a.arr_i32", &et, &n));
    assert_int_equal(et, ES_GGUF_INT32), assert_int_equal(n, 3);
    int32_t iv[3];
    memcpy(iv, es_gguf_arr_data(g, "a.arr_i32"), sizeof(iv));
    assert_int_equal(iv[0], 1), assert_int_equal(iv[1], -2), assert_int_equal(iv[2], 3);
    assert_true(es_gguf_get_arr(g, "a.arr_str", &et, &n));
    assert_int_equal(et, ES_GGUF_STRING), assert_int_equal(n, 3);
    assert_null(es_gguf_arr_data(g, "a.arr_str"));
    assert_true(es_str_eq(es_gguf_arr_str(g, "a.arr_str", 0), "x"));
    assert_true(es_str_eq(es_gguf_arr_str(g, "a.arr_str", 1), ""));
    assert_non_null(es_gguf_arr_str(g, "a.arr_str", 1).ptr);
    assert_true(es_str_eq(es_gguf_arr_str(g, "a.arr_str", 2), "yz"));
    assert_null(es_gguf_arr_str(g, "a.arr_str", 3).ptr);
    assert_null(es_gguf_arr_str(g, "a.arr_i32", 0).ptr);
    assert_null(es_gguf_arr_str(g, "a.str", 0).ptr);
    assert_true(es_gguf_get_arr(g, "a.nested", &et, &n));
    assert_int_equal(et, ES_GGUF_ARRAY), assert_int_equal(n, 3);
    assert_null(es_gguf_arr_data(g, "a.nested"));
    assert_null(es_gguf_arr_str(g, "a.nested", 0).ptr);
    assert_true(es_gguf_get_arr(g, "a.arr_bool", &et, &n));
    assert_int_equal(et, ES_GGUF_BOOL), assert_int_equal(n, 2);
    assert_int_equal(((const uint8_t *)es_gguf_arr_data(g, "a.arr_bool"))[1], 1);
    assert_false(es_gguf_get_arr(g, "a.str", &et, &n));
    assert_null(es_gguf_arr_data(g, "a.u8"));

    /* tensors */
    assert_int_equal(es_gguf_n_tensors(g), 2);
    const es_gguf_tensor *t0 = es_gguf_tensor_at(g, 0), *t1 = es_gguf_tensor_at(g, 1);
    assert_true(es_str_eq(t0->name, "t0"));
    assert_int_equal(t0->n_dims, 2);
    assert_int_equal(t0->ne[0], 4), assert_int_equal(t0->ne[1], 2);
    assert_int_equal(t0->ne[2], 1), assert_int_equal(t0->ne[3], 1);
    assert_int_equal(t0->type, ES_QTYPE_F32);
    assert_int_equal(t0->offset, 0);
    assert_int_equal(t0->nbytes, 32);
    assert_ptr_equal(t0->data, base + data_off);
    assert_true(es_str_eq(t1->name, "blk.1.q"));
    assert_int_equal(t1->n_dims, 1);
    assert_int_equal(t1->ne[0], 32), assert_int_equal(t1->ne[1], 1);
    assert_int_equal(t1->type, ES_QTYPE_Q8_0);
    assert_int_equal(t1->offset, 64);
    assert_int_equal(t1->nbytes, 34);
    assert_ptr_equal(t1->data, base + data_off + 64);
    assert_int_equal(((const uint8_t *)t1->data)[0], (uint8_t)(64 * 7));
    assert_ptr_equal(es_gguf_find_tensor(g, "blk.1.q"), t1);
    assert_ptr_equal(es_gguf_find_tensor(g, "t0"), t0);
    assert_null(es_gguf_find_tensor(g, "t"));
    assert_null(es_gguf_tensor_at(g, 2));
    assert_null(es_gguf_tensor_at(g, -1));
    walk(g);
    es_gguf_close(g);
    free(copy);
    bb_free(&b);
}

/* Version 2 has the v3 layout; a header-only file is valid; no-tensor files may lack padding. */
static void test_minimal_files(void **state)
{
    bb b = {0};
    bb_header(&b, 2, 0, 0);
    es_gguf *g;
    void *copy;
    assert_int_equal(open_copy(b.p, b.n, "v2.gguf", &g, &copy), ES_OK);
    assert_int_equal(es_gguf_version(g), 2);
    assert_int_equal(es_gguf_n_kv(g), 0);
    assert_int_equal(es_gguf_n_tensors(g), 0);
    assert_int_equal(es_gguf_alignment(g), 32);
    assert_int_equal(es_gguf_data_offset(g), 24); /* clamped to the file size */
    es_gguf_close(g);
    free(copy);
    bb_free(&b);
    es_gguf_close(NULL);

    /* a zero-size tensor (ne[0] = 0) is fine, even at the end of the file */
    bb k = {0};
    tdesc t[2] = {{"e", 2, {0, 5}, ES_QTYPE_Q4_K, 0}, {"f", 1, {8}, ES_QTYPE_F32, 0}};
    b = build(3, 0, &k, t, 2, 32, 32);
    assert_int_equal(open_copy(b.p, b.n, "z.gguf", &g, &copy), ES_OK);
    assert_int_equal(es_gguf_find_tensor(g, "e")->nbytes, 0);
    assert_int_equal(es_gguf_find_tensor(g, "f")->nbytes, 32);
    es_gguf_close(g);
    free(copy);
    bb_free(&b);
}

/* ---------------------------------------------------------------------------------------------
 * Truncation and corruption
 * ------------------------------------------------------------------------------------------- */

static void test_truncation_every_byte(void **state)
{
    size_t data_off;
    bb b = ref_file(&data_off);
    for (size_t n = 0; n < b.n; n++) expect_format_(&b, n, NULL, __LINE__);
    bb_free(&b);
}

/* Every byte set to a few values: never a crash or an over-read; whatever opens must walk. */
static void test_corruption_every_byte(void **state)
{
    size_t data_off;
    bb b = ref_file(&data_off);
    int ok = 0, bad = 0;
    for (size_t i = 0; i < b.n; i++) {
        const uint8_t orig = b.p[i];
        const uint8_t vals[] = {0x00, 0xff, 0x01, (uint8_t)(orig ^ 0x01), (uint8_t)(orig ^ 0x80),
                                (uint8_t)(orig + 8)};
        for (size_t v = 0; v < ES_LEN(vals); v++) {
            if (vals[v] == orig) continue;
            b.p[i] = vals[v];
            es_gguf *g;
            void *copy;
            es_status st = open_copy(b.p, b.n, "flip.gguf", &g, &copy);
            if (st == ES_OK) {
                walk(g);
                es_gguf_close(g);
                ok++;
            } else {
                if (st != ES_E_FORMAT) fail_msg("byte %zu = %u: status %d", i, vals[v], st);
                assert_null(g);
                assert_memory_equal(es_last_error(), "flip.gguf: ", 11);
                bad++;
            }
            free(copy);
        }
        b.p[i] = orig;
    }
    assert_true(ok > 0 && bad > 0);
    bb_free(&b);
}

/* ---------------------------------------------------------------------------------------------
 * One test per validation rule
 * ------------------------------------------------------------------------------------------- */

static void test_bad_header(void **state)
{
    bb b = {0};
    bb_put(&b, "GGUG", 4), bb_u32(&b, 3), bb_u64(&b, 0), bb_u64(&b, 0);
    expect_format(&b, "not a GGUF file");
    bb_free(&b);

    bb_header(&b, 1, 0, 0);
    expect_format(&b, "unsupported GGUF version 1");
    bb_free(&b);
    bb_header(&b, 4, 0, 0);
    expect_format(&b, "unsupported GGUF version 4");
    bb_free(&b);
    bb_header(&b, 0x03000000, 0, 0);
    expect_format(&b, "big-endian");
    bb_free(&b);

    bb_put(&b, "GGUF", 4);
    expect_format(&b, "too small for a GGUF header (4 bytes");
    bb_free(&b);

    /* counts no file could hold: rejected before any allocation */
    bb_header(&b, 3, 0, 1ull << 62);
    for (int i = 0; i < 100; i++) bb_u64(&b, 0);
    expect_format(&b, "header claims 4611686018427387904 keys");
    bb_free(&b);
    bb_header(&b, 3, 1ull << 62, 0);
    for (int i = 0; i < 100; i++) bb_u64(&b, 0);
    expect_format(&b, "4611686018427387904 tensors");
    bb_free(&b);
    bb_header(&b, 3, UINT64_MAX, UINT64_MAX);
    expect_format(&b, "more than the remaining 0 bytes");
    bb_free(&b);
    /* each count fits on its own, both together do not: 2 keys (26) + 1 tensor (32) > 50 */
    bb_header(&b, 3, 1, 2);
    for (int i = 0; i < 50; i++) bb_u8(&b, 0);
    expect_format(&b, "header claims 2 keys and 1 tensors");
    bb_free(&b);
}

static void test_bad_strings(void **state)
{
    bb k = {0}, b;
    bb_u64(&k, 1000), bb_put(&k, "abc", 3), bb_u32(&k, 0), bb_u8(&k, 0); /* key length 1000 */
    for (int i = 0; i < 8; i++) bb_u8(&k, 0);
    b = build(3, 1, &k, NULL, 0, 1, 0);
    expect_format(&b, "key 0 length 1000 runs past the end of the file");
    bb_free(&b), bb_free(&k);

    bb_key(&k, "s", ES_GGUF_STRING), bb_u64(&k, 1ull << 63), bb_put(&k, "abcdefgh", 8);
    b = build(3, 1, &k, NULL, 0, 1, 0);
    expect_format(&b, "key 's': string value length 9223372036854775808 runs past the end");
    bb_free(&b), bb_free(&k);

    bb_key(&k, "s", ES_GGUF_ARRAY), bb_u32(&k, ES_GGUF_STRING), bb_u64(&k, 2);
    bb_str(&k, "ok"), bb_u64(&k, 50), bb_put(&k, "short", 5);
    b = build(3, 1, &k, NULL, 0, 1, 0);
    expect_format(&b, "key 's': string element length 50 runs past the end");
    bb_free(&b), bb_free(&k);

    /* a tensor name past the end */
    b = (bb){0};
    bb_header(&b, 3, 1, 0);
    bb_u64(&b, 99);
    for (int i = 0; i < 30; i++) bb_u8(&b, 'x');
    expect_format(&b, "name of tensor 0 length 99 runs past the end");
    bb_free(&b);

    /* a hostile name is quoted on one line, cut to 64 bytes */
    char name[200];
    memset(name, 'n', sizeof(name) - 1);
    name[sizeof(name) - 1] = 0;
    name[3] = '\n';
    bb_key(&k, name, 13), bb_u32(&k, 0);
    b = build(3, 1, &k, NULL, 0, 1, 0);
    char want[128];
    snprintf(want, sizeof(want), "key 'nnn?%.60s...': unknown value type 13", name + 4);
    expect_format(&b, want);
    bb_free(&b), bb_free(&k);
}

static void test_bad_values(void **state)
{
    bb k = {0}, b;
    bb_key(&k, "v", 13), bb_u32(&k, 0);
    b = build(3, 1, &k, NULL, 0, 1, 0);
    expect_format(&b, "key 'v': unknown value type 13");
    bb_free(&b), bb_free(&k);

    bb_key(&k, "v", 0xffffffffu), bb_u32(&k, 0);
    b = build(3, 1, &k, NULL, 0, 1, 0);
    expect_format(&b, "unknown value type 4294967295");
    bb_free(&b), bb_free(&k);

    bb_key(&k, "v", ES_GGUF_ARRAY), bb_u32(&k, 13), bb_u64(&k, 0);
    b = build(3, 1, &k, NULL, 0, 1, 0);
    expect_format(&b, "key 'v': unknown array element type 13");
    bb_free(&b), bb_free(&k);

    bb_key(&k, "v", ES_GGUF_BOOL), bb_u8(&k, 2);
    b = build(3, 1, &k, NULL, 0, 1, 0);
    expect_format(&b, "key 'v': bool value 2 is not 0 or 1");
    bb_free(&b), bb_free(&k);

    bb_key(&k, "v", ES_GGUF_ARRAY), bb_u32(&k, ES_GGUF_BOOL), bb_u64(&k, 3);
    bb_u8(&k, 1), bb_u8(&k, 0), bb_u8(&k, 7);
    b = build(3, 1, &k, NULL, 0, 1, 0);
    expect_format(&b, "bool element 2 is 7");
    bb_free(&b), bb_free(&k);

    /* scalar, string and nested arrays whose count cannot fit */
    bb_key(&k, "v", ES_GGUF_ARRAY), bb_u32(&k, ES_GGUF_UINT64), bb_u64(&k, 1ull << 61);
    bb_u64(&k, 0);
    b = build(3, 1, &k, NULL, 0, 1, 0);
    expect_format(&b, "array of 2305843009213693952 uint64 elements runs past the end");
    bb_free(&b), bb_free(&k);
    bb_key(&k, "v", ES_GGUF_ARRAY), bb_u32(&k, ES_GGUF_STRING), bb_u64(&k, UINT64_MAX);
    bb_u64(&k, 0);
    b = build(3, 1, &k, NULL, 0, 1, 0);
    expect_format(&b, "string elements runs past the end");
    bb_free(&b), bb_free(&k);
    bb_key(&k, "v", ES_GGUF_ARRAY), bb_u32(&k, ES_GGUF_ARRAY), bb_u64(&k, 3);
    bb_u32(&k, ES_GGUF_UINT8), bb_u64(&k, 0), bb_u32(&k, ES_GGUF_UINT8), bb_u64(&k, 0);
    b = build(3, 1, &k, NULL, 0, 1, 0);
    expect_format(&b, "array of 3 array elements runs past the end");
    bb_free(&b), bb_free(&k);

    /* nesting: 8 levels are fine, 9 are not */
    for (int depth = 8; depth <= 9; depth++) {
        bb_key(&k, "deep", ES_GGUF_ARRAY);
        for (int d = 1; d < depth; d++) bb_u32(&k, ES_GGUF_ARRAY), bb_u64(&k, 1);
        bb_u32(&k, ES_GGUF_INT16), bb_u64(&k, 1), bb_u16(&k, 7);
        b = build(3, 1, &k, NULL, 0, 1, 0);
        if (depth == 8) {
            es_gguf *g;
            void *copy;
            assert_int_equal(open_copy(b.p, b.n, "deep.gguf", &g, &copy), ES_OK);
            walk(g);
            es_gguf_close(g);
            free(copy);
        } else {
            expect_format(&b, "key 'deep': arrays nested more than 8 deep");
        }
        bb_free(&b), bb_free(&k);
    }

    /* duplicate keys */
    bb_key(&k, "dup", ES_GGUF_UINT8), bb_u8(&k, 1);
    bb_key(&k, "other", ES_GGUF_UINT8), bb_u8(&k, 1);
    bb_key(&k, "dup", ES_GGUF_STRING), bb_str(&k, "x");
    b = build(3, 3, &k, NULL, 0, 1, 0);
    expect_format(&b, "key 'dup': duplicate key");
    bb_free(&b), bb_free(&k);
}

static void test_bad_alignment(void **state)
{
    const uint32_t bad[] = {0, 3, 48, 0x80000001u};
    for (size_t i = 0; i < ES_LEN(bad); i++) {
        bb k = {0}, b;
        bb_key(&k, "general.alignment", ES_GGUF_UINT32), bb_u32(&k, bad[i]);
        b = build(3, 1, &k, NULL, 0, 1, 0);
        char want[96];
        snprintf(want, sizeof(want), "key 'general.alignment': alignment %u is not a non-zero "
                 "power of two", bad[i]);
        expect_format(&b, want);
        bb_free(&b), bb_free(&k);
    }
    bb k = {0}, b;
    bb_key(&k, "general.alignment", ES_GGUF_UINT64), bb_u64(&k, 32);
    b = build(3, 1, &k, NULL, 0, 1, 0);
    expect_format(&b, "has type uint64, expected uint32");
    bb_free(&b), bb_free(&k);
}

static void test_bad_tensors(void **state)
{
    bb b, k = {0};
    /* past the end of the file: message names the tensor, offset, size and file size */
    {
        tdesc t[] = {{"blk.0.attn_q.weight", 1, {64}, ES_QTYPE_F32, 0}};
        b = build(3, 0, NULL, t, 1, 32, 100);
        char want[160];
        snprintf(want, sizeof(want), "bad.gguf: tensor 'blk.0.attn_q.weight' runs past the end of "
                 "the file (offset %zu + 256 bytes > file size %zu)", b.n - 100, b.n);
        expect_format(&b, want);
        bb_free(&b);
    }
    /* offsets near 2^64 must not wrap around */
    {
        bb_key(&k, "general.alignment", ES_GGUF_UINT32), bb_u32(&k, 16);
        tdesc t[] = {{"w", 1, {4}, ES_QTYPE_F32, 0xFFFFFFFFFFFFFFF0ull}};
        b = build(3, 1, &k, t, 1, 16, 64);
        expect_format(&b, "tensor 'w' offset 18446744073709551600 is past the end of the file "
                          "(data section at");
        bb_free(&b), bb_free(&k);
        tdesc t2[] = {{"w", 1, {4}, ES_QTYPE_F32, 0xFFFFFFFFFFFFFFE0ull}};
        b = build(3, 0, NULL, t2, 1, 32, 64);
        expect_format(&b, "is past the end of the file");
        bb_free(&b);
        /* offset inside the file, offset + size past it */
        tdesc t3[] = {{"w", 1, {1ll << 60}, ES_QTYPE_F16, 32}};
        b = build(3, 0, NULL, t3, 1, 32, 64);
        expect_format(&b, "tensor 'w' runs past the end of the file (offset");
        bb_free(&b);
    }
    /* misaligned offset */
    {
        tdesc t[] = {{"w", 1, {4}, ES_QTYPE_F32, 8}};
        b = build(3, 0, NULL, t, 1, 32, 64);
        expect_format(&b, "tensor 'w': offset 8 is not a multiple of the alignment 32");
        bb_free(&b);
    }
    /* unknown types: retired ids, past the table, huge */
    {
        const uint32_t types[] = {4, 5, 31, 40, 1000, 0xffffffffu};
        for (size_t i = 0; i < ES_LEN(types); i++) {
            tdesc t[] = {{"w", 1, {32}, types[i], 0}};
            b = build(3, 0, NULL, t, 1, 32, 256);
            char want[64];
            snprintf(want, sizeof(want), "tensor 'w': unknown tensor type %u", types[i]);
            expect_format(&b, want);
            bb_free(&b);
        }
    }
    /* shapes */
    {
        tdesc t[] = {{"w", 0, {0}, ES_QTYPE_F32, 0}};
        b = build(3, 0, NULL, t, 1, 32, 64);
        expect_format(&b, "tensor 'w': has 0 dimensions (must be 1 to 4)");
        bb_free(&b);
        tdesc t5[] = {{"w", 4, {1, 1, 1, 1}, ES_QTYPE_F32, 0}};
        b = build(3, 0, NULL, t5, 1, 32, 64);
        /* patch n_dims to 5 in place: it follows the header and the name */
        uint32_t five = 5;
        memcpy(b.p + 24 + 8 + 1, &five, 4);
        expect_format(&b, "tensor 'w': has 5 dimensions");
        bb_free(&b);
        tdesc tn[] = {{"w", 2, {4, -1}, ES_QTYPE_F32, 0}};
        b = build(3, 0, NULL, tn, 1, 32, 64);
        expect_format(&b, "tensor 'w': dimension 1 is negative (-1)");
        bb_free(&b);
        tdesc to[] = {{"w", 3, {1ll << 32, 1ll << 16, 1ll << 16}, ES_QTYPE_F32, 0}};
        b = build(3, 0, NULL, to, 1, 32, 64);
        expect_format(&b, "tensor 'w': element count overflows int64");
        bb_free(&b);
        tdesc to2[] = {{"w", 4, {0, 1ll << 40, 1ll << 40, 1ll << 40}, ES_QTYPE_F32, 0}};
        b = build(3, 0, NULL, to2, 1, 32, 64);
        expect_format(&b, "element count overflows");
        bb_free(&b);
        tdesc tb[] = {{"w", 2, {1ll << 31, 1ll << 31}, ES_QTYPE_F32, 0}}; /* 2^62 elems, 2^64 B */
        b = build(3, 0, NULL, tb, 1, 32, 64);
        expect_format(&b, "tensor 'w': byte size overflows");
        bb_free(&b);
        tdesc tr[] = {{"w", 2, {33, 2}, ES_QTYPE_Q8_0, 0}};
        b = build(3, 0, NULL, tr, 1, 32, 256);
        expect_format(&b, "tensor 'w': row length 33 is not a multiple of the q8_0 block size 32");
        bb_free(&b);
    }
    /* duplicate names, overlapping data */
    {
        tdesc t[] = {{"a", 1, {8}, ES_QTYPE_F32, 0}, {"b", 1, {8}, ES_QTYPE_F32, 32},
                     {"a", 1, {8}, ES_QTYPE_F32, 64}};
        b = build(3, 0, NULL, t, 3, 32, 96);
        expect_format(&b, "tensor 'a': duplicate tensor name");
        bb_free(&b);
        tdesc o[] = {{"a", 1, {8}, ES_QTYPE_F32, 64}, {"b", 1, {16}, ES_QTYPE_F32, 32},
                     {"c", 1, {8}, ES_QTYPE_F32, 0}};
        b = build(3, 0, NULL, o, 3, 32, 96);
        expect_format(&b, "tensors 'b' (bytes 32..96) and 'a' (bytes 64..96) overlap");
        bb_free(&b);
        tdesc same[] = {{"a", 1, {8}, ES_QTYPE_F32, 0}, {"b", 1, {8}, ES_QTYPE_F32, 0}};
        b = build(3, 0, NULL, same, 2, 32, 32);
        expect_format(&b, "overlap");
        bb_free(&b);
        /* one shared byte (byte tensors, alignment 1); ending where the next starts is fine */
        bb_key(&k, "general.alignment", ES_GGUF_UINT32), bb_u32(&k, 1);
        tdesc one[] = {{"a", 1, {33}, ES_QTYPE_I8, 0}, {"b", 1, {8}, ES_QTYPE_I8, 32}};
        b = build(3, 1, &k, one, 2, 1, 40);
        expect_format(&b, "tensors 'a' (bytes 0..33) and 'b' (bytes 32..40) overlap");
        bb_free(&b);
        tdesc touch[] = {{"a", 1, {32}, ES_QTYPE_I8, 0}, {"b", 1, {8}, ES_QTYPE_I8, 32}};
        b = build(3, 1, &k, touch, 2, 1, 40);
        es_gguf *g = NULL;
        void *copy;
        if (open_copy(b.p, b.n, "touch.gguf", &g, &copy) != ES_OK)
            fail_msg("tensors that meet without sharing a byte: %s", es_last_error());
        es_gguf_close(g);
        free(copy);
        bb_free(&b), bb_free(&k);
    }
    /* truncated inside the tensor infos */
    {
        tdesc t[] = {{"wwwwwwwwwwwwwwwwwwww", 2, {4, 4}, ES_QTYPE_F32, 0}};
        b = build(3, 0, NULL, t, 1, 32, 64);
        b.n = 24 + 28 + 4 + 8 + 3;
        expect_format(&b, "file ends inside the shape (8 bytes needed at offset 64, file size 67)");
        bb_free(&b);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Files on disk
 * ------------------------------------------------------------------------------------------- */

static void test_open_file(void **state)
{
    es_gguf *g = (es_gguf *)1;
    const char *missing = t_tmp_path("missing.gguf");
    assert_int_equal(es_gguf_open(missing, &g), ES_E_IO);
    assert_null(g);
    assert_non_null(strstr(es_last_error(), missing));
    assert_non_null(strstr(es_last_error(), strerror(ENOENT)));

    const char *dir = t_tmp_path("a-dir");
    assert_int_equal(mkdir(dir, 0755), 0);
    assert_int_equal(es_gguf_open(dir, &g), ES_E_IO);
    assert_non_null(strstr(es_last_error(), "not a regular file"));
    rmdir(dir);

    const char *empty = t_tmp_path("empty.gguf");
    FILE *f = fopen(empty, "wb");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(es_gguf_open(empty, &g), ES_E_FORMAT);
    assert_non_null(strstr(es_last_error(), empty));
    assert_non_null(strstr(es_last_error(), "too small"));
    unlink(empty);

    size_t data_off;
    bb b = ref_file(&data_off);
    const char *p = t_tmp_path("ref.gguf");
    f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b.p, 1, b.n, f), b.n);
    fclose(f);
    assert_int_equal(es_gguf_open(p, &g), ES_OK);
    assert_string_equal(es_gguf_path(g), p);
    assert_int_equal(es_gguf_file_size(g), b.n);
    assert_int_equal(es_gguf_data_offset(g), data_off);
    const es_gguf_tensor *t = es_gguf_find_tensor(g, "blk.1.q");
    assert_non_null(t);
    assert_int_equal((uintptr_t)t->data % REF_ALIGN, 0); /* the mapping is page-aligned */
    assert_memory_equal(t->data, b.p + data_off + 64, 34);
    walk(g);
    es_gguf_close(g);
    unlink(p);
    bb_free(&b);
}

/* Shared data: the vocabularies read, and survive a copy_kv round trip unchanged. */
static void test_vocab_files(void **state)
{
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/vocab", t_data_dir());
    DIR *d = opendir(dir);
    if (!d) skip();
    int n_files = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 5, ".gguf") != 0) continue;
        char path[2048];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        es_gguf *g, *g2;
        if (es_gguf_open(path, &g) != ES_OK) fail_msg("%s", es_last_error());
        es_gguf_type et;
        uint64_t n;
        assert_true(es_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n));
        assert_int_equal(et, ES_GGUF_STRING);
        assert_true(n > 1000);
        assert_non_null(es_gguf_arr_str(g, "tokenizer.ggml.tokens", n - 1).ptr);
        es_str model;
        assert_true(es_gguf_get_str(g, "tokenizer.ggml.model", &model));
        walk(g);

        es_gguf_writer *w;
        assert_int_equal(es_gguf_writer_create(&w), ES_OK);
        assert_int_equal(es_gguf_writer_copy_kv(w, g, ""), ES_OK);
        const char *out = t_tmp_path("vocab-copy.gguf");
        assert_int_equal(es_gguf_writer_write(w, out), ES_OK);
        es_gguf_writer_destroy(w);
        assert_int_equal(es_gguf_open(out, &g2), ES_OK);
        assert_int_equal(es_gguf_n_kv(g2), es_gguf_n_kv(g));
        for (int64_t i = 0; i < es_gguf_n_kv(g); i++) assert_true(kv_equal(g, i, g2, i));
        es_gguf_close(g2);
        es_gguf_close(g);
        unlink(out);
        n_files++;
    }
    closedir(d);
    if (n_files == 0) skip();
}

/* ---------------------------------------------------------------------------------------------
 * Writer
 * ------------------------------------------------------------------------------------------- */

typedef struct tspec {
    const char *name;
    uint32_t type, n_dims;
    int64_t ne[4];
} tspec;

static const tspec round_trip_tensors[] = {
    {"tok_embd.weight", ES_QTYPE_F32, 2, {8, 3}},
    {"blk.0.attn_q.weight", ES_QTYPE_F16, 2, {16, 5}},
    {"blk.0.attn_k.weight", ES_QTYPE_BF16, 1, {7}},
    {"blk.0.ffn_up_exps.weight", ES_QTYPE_Q8_0, 3, {64, 2, 3}},
    {"blk.0.ffn_gate_exps.weight", ES_QTYPE_Q4_0, 4, {32, 1, 2, 2}},
    {"blk.0.ffn_down_exps.weight", ES_QTYPE_Q4_K, 3, {256, 2, 2}},
    {"empty", ES_QTYPE_Q6_K, 2, {0, 4}},
    {"output.weight", ES_QTYPE_Q6_K, 2, {256, 2}},
    {"blk.1.q5", ES_QTYPE_Q5_K, 1, {256}},
    {"last", ES_QTYPE_F32, 1, {16}}, /* 64 bytes: the file ends on an aligned tensor end */
};

static void test_round_trip(void **state)
{
    size_t data_off;
    bb ref = ref_file(&data_off);
    es_gguf *src;
    void *copy;
    assert_int_equal(open_copy(ref.p, ref.n, "ref.gguf", &src, &copy), ES_OK);

    es_gguf_writer *w;
    assert_int_equal(es_gguf_writer_create(&w), ES_OK);
    assert_int_equal(es_gguf_writer_set_u32(w, "w.u32", 0xdeadbeef), ES_OK);
    assert_int_equal(es_gguf_writer_set_i32(w, "w.i32", -7), ES_OK);
    assert_int_equal(es_gguf_writer_set_u64(w, "w.u64", UINT64_MAX), ES_OK);
    assert_int_equal(es_gguf_writer_set_f32(w, "w.f32", -0.25f), ES_OK);
    assert_int_equal(es_gguf_writer_set_bool(w, "w.bool", true), ES_OK);
    assert_int_equal(es_gguf_writer_set_str(w, "w.str", "héllo"), ES_OK);
    assert_int_equal(es_gguf_writer_set_str(w, "w.empty", ""), ES_OK);
    /* a scalar array of each scalar type */
    const uint8_t raw[64] = {1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    static const es_gguf_type scalar_types[] = {
        ES_GGUF_UINT8, ES_GGUF_INT8,  ES_GGUF_UINT16, ES_GGUF_INT16, ES_GGUF_UINT32, ES_GGUF_INT32,
        ES_GGUF_FLOAT32, ES_GGUF_BOOL, ES_GGUF_UINT64, ES_GGUF_INT64, ES_GGUF_FLOAT64};
    for (size_t i = 0; i < ES_LEN(scalar_types); i++) {
        char key[32];
        snprintf(key, sizeof(key), "w.arr%zu", i);
        assert_int_equal(es_gguf_writer_set_arr(w, key, scalar_types[i], raw, 4), ES_OK);
    }
    assert_int_equal(es_gguf_writer_set_arr(w, "w.arr_empty", ES_GGUF_FLOAT32, NULL, 0), ES_OK);
    const char *strs[] = {"a", "", "b\0c", "longer string"};
    const size_t lens[] = {1, 0, 3, 13};
    assert_int_equal(es_gguf_writer_set_arr_str(w, "w.strs", strs, NULL, 4), ES_OK);
    assert_int_equal(es_gguf_writer_set_arr_str(w, "w.strs_len", strs, lens, 4), ES_OK);
    /* every type of the reference file, nested arrays included */
    assert_int_equal(es_gguf_writer_copy_kv(w, src, "a."), ES_OK);
    /* replacing keeps the position */
    assert_int_equal(es_gguf_writer_set_u32(w, "w.i32", 9), ES_OK);
    assert_int_equal(es_gguf_writer_set_alignment(w, 64), ES_OK);

    t_rng rng = {42};
    void *data[ES_LEN(round_trip_tensors)];
    uint64_t nbytes[ES_LEN(round_trip_tensors)];
    for (size_t i = 0; i < ES_LEN(round_trip_tensors); i++) {
        const tspec *s = &round_trip_tensors[i];
        int64_t rows = s->ne[1] * (s->n_dims > 2 ? s->ne[2] : 1) * (s->n_dims > 3 ? s->ne[3] : 1);
        if (s->n_dims == 1) rows = 1;
        nbytes[i] = es_qtype_row_bytes(s->type, s->ne[0]) * (uint64_t)rows;
        data[i] = malloc(nbytes[i] + 1);
        for (uint64_t j = 0; j < nbytes[i]; j++) ((uint8_t *)data[i])[j] = (uint8_t)t_next(&rng);
        assert_int_equal(es_gguf_writer_add_tensor(w, s->name, s->type, s->n_dims, s->ne,
                                                   data[i], nbytes[i]), ES_OK);
    }
    char *dir = t_mkdtemp("rt");
    char p[600];
    snprintf(p, sizeof(p), "%s/rt.gguf", dir);
    char *before = t_dir_snapshot(dir, NULL);
    assert_int_equal(es_gguf_writer_write(w, p), ES_OK);
    T_DIR_UNCHANGED(dir, "rt.gguf", before); /* the file and nothing else (no temporary file) */
    free(before);
    es_gguf_writer_destroy(w);

    es_gguf *g;
    assert_int_equal(es_gguf_open(p, &g), ES_OK);
    assert_int_equal(es_gguf_version(g), 3);
    assert_int_equal(es_gguf_alignment(g), 64);
    /* order: the w.* keys as set, then the copied a.* keys, then general.alignment */
    const int n_w = 7 + (int)ES_LEN(scalar_types) + 3;
    assert_int_equal(es_gguf_n_kv(g), n_w + REF_NKV - 1 + 1);
    assert_true(es_str_eq(es_gguf_key(g, 0), "w.u32"));
    assert_true(es_str_eq(es_gguf_key(g, 1), "w.i32"));
    assert_int_equal(es_gguf_kv_type(g, 1), ES_GGUF_UINT32);
    for (int i = 0; i < REF_NKV - 1; i++) assert_true(kv_equal(src, i, g, n_w + i));
    assert_true(kv_equal(src, REF_NKV - 1, g, es_gguf_n_kv(g) - 1)); /* general.alignment 64 */

    uint32_t u;
    int64_t s;
    float f;
    bool bo;
    es_str str;
    assert_true(es_gguf_get_u32(g, "w.u32", &u)), assert_int_equal(u, 0xdeadbeef);
    assert_true(es_gguf_get_u32(g, "w.i32", &u)), assert_int_equal(u, 9);
    assert_false(es_gguf_get_i64(g, "w.u64", &s));
    assert_true(es_gguf_get_f32(g, "w.f32", &f)), assert_true(f == -0.25f);
    assert_true(es_gguf_get_bool(g, "w.bool", &bo)), assert_true(bo);
    assert_true(es_gguf_get_str(g, "w.str", &str)), assert_true(es_str_eq(str, "héllo"));
    assert_true(es_gguf_get_str(g, "w.empty", &str)), assert_int_equal(str.len, 0);
    for (size_t i = 0; i < ES_LEN(scalar_types); i++) {
        char key[32];
        snprintf(key, sizeof(key), "w.arr%zu", i);
        es_gguf_type et;
        uint64_t n;
        assert_true(es_gguf_get_arr(g, key, &et, &n));
        assert_int_equal(et, scalar_types[i]);
        assert_int_equal(n, 4);
        assert_memory_equal(es_gguf_arr_data(g, key), raw, 4 * es_gguf_scalar_size(et));
    }
    es_gguf_type et;
    uint64_t n;
    assert_true(es_gguf_get_arr(g, "w.arr_empty", &et, &n));
    assert_int_equal(n, 0);
    assert_true(es_str_eq(es_gguf_arr_str(g, "w.strs", 2), "b"));
    es_str e = es_gguf_arr_str(g, "w.strs_len", 2);
    assert_int_equal(e.len, 3);
    assert_memory_equal(e.ptr, "b\0c", 3);
    assert_true(es_str_eq(es_gguf_arr_str(g, "w.strs_len", 3), "longer string"));

    /* tensors: same fields and bytes, offsets aligned, padding zero */
    size_t flen;
    uint8_t *file = (uint8_t *)t_read_file(p, &flen);
    assert_non_null(file);
    assert_int_equal(es_gguf_n_tensors(g), ES_LEN(round_trip_tensors));
    uint64_t expect_off = 0, doff = es_gguf_data_offset(g);
    assert_int_equal(doff % 64, 0);
    for (size_t i = 0; i < ES_LEN(round_trip_tensors); i++) {
        const tspec *ts = &round_trip_tensors[i];
        const es_gguf_tensor *t = es_gguf_tensor_at(g, (int64_t)i);
        assert_true(es_str_eq(t->name, ts->name));
        assert_ptr_equal(es_gguf_find_tensor(g, ts->name), t);
        assert_int_equal(t->type, ts->type);
        assert_int_equal(t->n_dims, ts->n_dims);
        for (uint32_t d = 0; d < 4; d++)
            assert_int_equal(t->ne[d], d < ts->n_dims ? ts->ne[d] : 1);
        assert_int_equal(t->nbytes, nbytes[i]);
        assert_int_equal(t->offset, expect_off);
        assert_int_equal((uintptr_t)t->data % 64, 0);
        if (nbytes[i]) assert_memory_equal(t->data, data[i], nbytes[i]);
        uint64_t end = expect_off + nbytes[i];
        expect_off = (end + 63) / 64 * 64;
        for (uint64_t j = doff + end; j < doff + expect_off; j++) assert_int_equal(file[j], 0);
    }
    assert_int_equal(flen, doff + expect_off);
    walk(g);

    /* every truncation of the written file fails (it ends at an aligned tensor end) */
    bb fb = {file, flen, flen};
    for (size_t len = 0; len < flen; len += (len < 2048 ? 1 : 61))
        expect_format_(&fb, len, NULL, __LINE__);
    free(file);

    es_gguf_close(g);
    unlink(p);
    rmdir(dir);
    free(dir);
    for (size_t i = 0; i < ES_LEN(round_trip_tensors); i++) free(data[i]);
    es_gguf_close(src);
    free(copy);
    bb_free(&ref);
}

/* A string array of many entries: O(1) lookups, correct at both ends. */
static void test_large_string_array(void **state)
{
    enum { N = 200000 };
    char **strs = malloc(N * sizeof(char *));
    char *pool = malloc(N * 12);
    for (int i = 0; i < N; i++) {
        strs[i] = pool + i * 12;
        snprintf(strs[i], 12, "t%d", i % 10000000);
    }
    es_gguf_writer *w;
    assert_int_equal(es_gguf_writer_create(&w), ES_OK);
    assert_int_equal(es_gguf_writer_set_arr_str(w, "tokens", (const char *const *)strs, NULL, N),
                     ES_OK);
    const char *p = t_tmp_path("big-strs.gguf");
    assert_int_equal(es_gguf_writer_write(w, p), ES_OK);
    es_gguf_writer_destroy(w);
    es_gguf *g;
    assert_int_equal(es_gguf_open(p, &g), ES_OK);
    t_rng rng = {7};
    for (int k = 0; k < 100000; k++) {
        uint64_t i = t_next(&rng) % N;
        assert_true(es_str_eq(es_gguf_arr_str(g, "tokens", i), strs[i]));
    }
    assert_true(es_str_eq(es_gguf_arr_str(g, "tokens", N - 1), strs[N - 1]));
    es_gguf_close(g);
    unlink(p);
    free(pool);
    free(strs);
}

static void test_writer_validation(void **state)
{
    es_gguf_writer *w;
    assert_int_equal(es_gguf_writer_create(&w), ES_OK);
    float buf[512] = {0};
    int64_t ne[4] = {8, 2, 1, 1};
    assert_int_equal(es_gguf_writer_add_tensor(w, "a", ES_QTYPE_F32, 2, ne, buf, 63), ES_E_INVAL);
    assert_non_null(strstr(es_last_error(), "tensor 'a': 63 bytes given, its f32 shape needs 64"));
    assert_int_equal(es_gguf_writer_add_tensor(w, "a", 4, 2, ne, buf, 64), ES_E_INVAL);
    assert_non_null(strstr(es_last_error(), "unknown type 4"));
    assert_int_equal(es_gguf_writer_add_tensor(w, "a", ES_QTYPE_F32, 0, ne, buf, 64), ES_E_INVAL);
    assert_int_equal(es_gguf_writer_add_tensor(w, "a", ES_QTYPE_F32, 5, ne, buf, 64), ES_E_INVAL);
    assert_int_equal(es_gguf_writer_add_tensor(w, "a", ES_QTYPE_Q8_0, 2, ne, buf, 64),
                     ES_E_INVAL);
    assert_non_null(strstr(es_last_error(), "row length 8 is not a multiple"));
    int64_t neg[2] = {8, -1};
    assert_int_equal(es_gguf_writer_add_tensor(w, "a", ES_QTYPE_F32, 2, neg, buf, 0), ES_E_INVAL);
    int64_t big[3] = {1ll << 40, 1ll << 20, 1ll << 20};
    assert_int_equal(es_gguf_writer_add_tensor(w, "a", ES_QTYPE_F32, 3, big, buf, 0), ES_E_INVAL);
    assert_int_equal(es_gguf_writer_add_tensor(w, "a", ES_QTYPE_F32, 2, ne, NULL, 64), ES_E_INVAL);
    assert_int_equal(es_gguf_writer_add_tensor(w, "a", ES_QTYPE_F32, 2, ne, buf, 64), ES_OK);
    assert_int_equal(es_gguf_writer_add_tensor(w, "a", ES_QTYPE_F32, 2, ne, buf, 64), ES_E_INVAL);
    assert_non_null(strstr(es_last_error(), "tensor 'a' added twice"));

    assert_int_equal(es_gguf_writer_set_alignment(w, 0), ES_E_INVAL);
    assert_int_equal(es_gguf_writer_set_alignment(w, 3), ES_E_INVAL);
    assert_int_equal(es_gguf_writer_set_i32(w, "general.alignment", 32), ES_E_INVAL);
    assert_int_equal(es_gguf_writer_set_str(w, "general.alignment", "32"), ES_E_INVAL);
    assert_int_equal(es_gguf_writer_set_u32(w, "general.alignment", 16), ES_OK);
    assert_int_equal(es_gguf_writer_set_arr(w, "x", ES_GGUF_STRING, buf, 1), ES_E_INVAL);
    assert_int_equal(es_gguf_writer_set_arr(w, "x", ES_GGUF_ARRAY, buf, 1), ES_E_INVAL);
    assert_int_equal(es_gguf_writer_set_arr(w, "x", ES_GGUF_UINT8, NULL, 1), ES_E_INVAL);
    const uint8_t bools[2] = {1, 2};
    assert_int_equal(es_gguf_writer_set_arr(w, "x", ES_GGUF_BOOL, bools, 2), ES_E_INVAL);
    const char *nul[1] = {NULL};
    assert_int_equal(es_gguf_writer_set_arr_str(w, "x", nul, NULL, 1), ES_E_INVAL);
    assert_int_equal(es_gguf_writer_set_str(w, "x", NULL), ES_E_INVAL);
    assert_int_equal(es_gguf_writer_set_u32(w, NULL, 1), ES_E_INVAL);

    /* a key set twice keeps its first position and takes the new type */
    assert_int_equal(es_gguf_writer_set_u32(w, "k1", 1), ES_OK);
    assert_int_equal(es_gguf_writer_set_u32(w, "k2", 2), ES_OK);
    assert_int_equal(es_gguf_writer_set_str(w, "k1", "one"), ES_OK);
    const char *p = t_tmp_path("val.gguf");
    assert_int_equal(es_gguf_writer_write(w, p), ES_OK);
    es_gguf_writer_destroy(w);
    es_gguf_writer_destroy(NULL);
    es_gguf *g;
    assert_int_equal(es_gguf_open(p, &g), ES_OK);
    assert_int_equal(es_gguf_n_kv(g), 3);
    assert_int_equal(es_gguf_alignment(g), 16);
    assert_true(es_str_eq(es_gguf_key(g, 1), "k1"));
    assert_int_equal(es_gguf_kv_type(g, 1), ES_GGUF_STRING);
    assert_true(es_str_eq(es_gguf_key(g, 2), "k2"));
    assert_int_equal(es_gguf_data_offset(g) % 16, 0);
    assert_int_equal(es_gguf_file_size(g), es_gguf_data_offset(g) + 64);
    es_gguf_close(g);
    unlink(p);
}

static es_gguf_writer *small_writer(const void *data, uint64_t nbytes)
{
    es_gguf_writer *w;
    assert_int_equal(es_gguf_writer_create(&w), ES_OK);
    assert_int_equal(es_gguf_writer_set_str(w, "general.name", "x"), ES_OK);
    int64_t ne[1] = {(int64_t)(nbytes / 4)};
    assert_int_equal(es_gguf_writer_add_tensor(w, "t", ES_QTYPE_F32, 1, ne, data, nbytes), ES_OK);
    return w;
}

/* Writes a small file of a given name in dir; a helper for the user's own files. */
static void put_file(const char *dir, const char *name, const char *text)
{
    char p[600];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Fails at its second chunk, after 4 MiB of tensor data went to the file. */
static es_status failing_fill(void *user, uint64_t offset, void *buf, size_t len)
{
    (void)user;
    memset(buf, 0, len);
    return offset ? es_fail(ES_E_FORMAT, "fill failed on purpose") : ES_OK;
}

/* A failed write returns ES_E_IO with a one-line message and leaves the directory exactly as it
 * was: no file, no temporary file, and a user's own "out.gguf.tmp" untouched. */
static void test_writer_failures(void **state)
{
    static float data[1 << 18]; /* 1 MiB */
    es_gguf_writer *w = small_writer(data, sizeof(data));
    char p[600];

    /* missing directory */
    char *dir = t_mkdtemp("wfail");
    snprintf(p, sizeof(p), "%s/no-such-dir/out.gguf", dir);
    assert_int_equal(es_gguf_writer_write(w, p), ES_E_IO);
    assert_non_null(strstr(es_last_error(), "no-such-dir/out.gguf"));
    assert_non_null(strstr(es_last_error(), strerror(ENOENT)));
    assert_null(strchr(es_last_error(), '\n'));
    assert_false(file_exists(p));

    /* the target is a directory: refused before anything is written */
    put_file(dir, "out.gguf.tmp", "user's own file");
    char *before = t_dir_snapshot(dir, NULL);
    snprintf(p, sizeof(p), "%s/target-dir", dir);
    assert_int_equal(mkdir(p, 0755), 0);
    free(before);
    before = t_dir_snapshot(dir, NULL);
    assert_int_equal(es_gguf_writer_write(w, p), ES_E_IO);
    assert_non_null(strstr(es_last_error(), "is a directory"));
    T_DIR_UNCHANGED(dir, NULL, before);
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));

    /* the disk "fills up" mid-write: a file size limit makes write() fail with EFBIG */
    snprintf(p, sizeof(p), "%s/out.gguf", dir);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 100000;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    es_status st = es_gguf_writer_write(w, p);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, old_handler);
    assert_int_equal(st, ES_E_IO);
    assert_non_null(strstr(es_last_error(), "write failed"));
    T_DIR_UNCHANGED(dir, NULL, before);

    /* a fill function that fails midway: its message stands, nothing is left */
    es_gguf_writer *wf;
    assert_int_equal(es_gguf_writer_create(&wf), ES_OK);
    int64_t ne[1] = {(int64_t)(3 * (4u << 20) / 4)}; /* three 4 MiB fill chunks */
    assert_int_equal(es_gguf_writer_add_tensor_fn(wf, "t", ES_QTYPE_F32, 1, ne, 3u * (4u << 20),
                                                  failing_fill, NULL), ES_OK);
    snprintf(p, sizeof(p), "%s/out.gguf", dir);
    assert_int_equal(es_gguf_writer_write(wf, p), ES_E_FORMAT);
    assert_string_equal(es_last_error(), "fill failed on purpose");
    T_DIR_UNCHANGED(dir, NULL, before);
    es_gguf_writer_destroy(wf);

    /* a directory we may not write to (root may write anywhere: then /sys, which refuses root) */
    char ro[520];
    snprintf(ro, sizeof(ro), "%s/ro-dir", dir);
    assert_int_equal(mkdir(ro, 0555), 0);
    const char *rodir = access(ro, W_OK) != 0 ? ro : access("/sys", F_OK) == 0 ? "/sys" : NULL;
    if (rodir) {
        char *ro_before = t_dir_snapshot(rodir, NULL);
        snprintf(p, sizeof(p), "%s/out.gguf", rodir);
        assert_int_equal(es_gguf_writer_write(w, p), ES_E_IO);
        assert_non_null(strstr(es_last_error(), strerror(EACCES)));
        assert_false(file_exists(p));
        T_DIR_UNCHANGED(rodir, NULL, ro_before);
        free(ro_before);
    }
    rmdir(ro);

    /* after all that, a good write still works, replaces an old file and leaves the user's
     * out.gguf.tmp as it was */
    free(before);
    put_file(dir, "out.gguf", "old");
    before = t_dir_snapshot(dir, "out.gguf");
    snprintf(p, sizeof(p), "%s/out.gguf", dir);
    assert_int_equal(es_gguf_writer_write(w, p), ES_OK);
    T_DIR_UNCHANGED(dir, "out.gguf", before);
    es_gguf *g;
    assert_int_equal(es_gguf_open(p, &g), ES_OK);
    assert_int_equal(es_gguf_find_tensor(g, "t")->nbytes, sizeof(data));
    es_gguf_close(g);
    size_t len = 0;
    snprintf(p, sizeof(p), "%s/out.gguf.tmp", dir);
    char *text = t_read_file(p, &len);
    assert_string_equal(text, "user's own file");
    free(text);
    free(before);
    t_rm_rf(dir);
    free(dir);
    es_gguf_writer_destroy(w);
}

/* A fill function standing in for a signal handler: at the second call it checks that exactly
 * one temporary file exists in the output's directory, calls es_cleanup_temp_files() and checks
 * that it is gone. The write must then fail at its rename. */
typedef struct cleanup_probe {
    const char *dir;
    int calls, temps_before, temps_after;
} cleanup_probe;

static int count_temps(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) n += strstr(e->d_name, ".gguf.tmp.") != NULL;
    if (d) closedir(d);
    return n;
}

static es_status probe_fill(void *user, uint64_t offset, void *buf, size_t len)
{
    cleanup_probe *c = user;
    (void)offset;
    memset(buf, 0, len);
    if (++c->calls == 2) {
        c->temps_before = count_temps(c->dir);
        es_cleanup_temp_files();
        c->temps_after = count_temps(c->dir);
    }
    return ES_OK;
}

/* Outputs that are not plain new files: the registry of temporary files, the umask, a symbolic
 * link (its target is replaced, the link stays), a dangling link (refused), a FIFO (written in
 * place, stays a FIFO). */
static void *fifo_reader(void *arg)
{
    const char *fifo = arg;
    FILE *f = fopen(fifo, "rb");
    size_t *n = calloc(1, sizeof(size_t) + 4);
    if (!f) return n;
    char buf[65536];
    size_t r;
    while ((r = fread(buf, 1, sizeof(buf), f)) > 0) {
        if (*n == 0 && r >= 4) memcpy(n + 1, buf, 4);
        *n += r;
    }
    fclose(f);
    return n;
}

static void test_writer_outputs(void **state)
{
    (void)state;
    static float data[1 << 16]; /* 256 KiB */
    es_gguf_writer *w = small_writer(data, sizeof(data));
    char *dir = t_mkdtemp("wout");
    char p[600], q[600];

    /* es_cleanup_temp_files() removes the temporary file of a write in progress */
    cleanup_probe c = {.dir = dir};
    es_gguf_writer *wp;
    assert_int_equal(es_gguf_writer_create(&wp), ES_OK);
    int64_t ne[1] = {(int64_t)(3 * (4u << 20) / 4)}; /* three 4 MiB fill chunks */
    assert_int_equal(es_gguf_writer_add_tensor_fn(wp, "t", ES_QTYPE_F32, 1, ne, 3u * (4u << 20),
                                                  probe_fill, &c), ES_OK);
    char *before = t_dir_snapshot(dir, NULL);
    snprintf(p, sizeof(p), "%s/m.gguf", dir);
    assert_int_equal(es_gguf_writer_write(wp, p), ES_E_IO);
    assert_int_equal(c.temps_before, 1);
    assert_int_equal(c.temps_after, 0);
    T_DIR_UNCHANGED(dir, NULL, before);
    free(before);
    es_gguf_writer_destroy(wp);

    /* a new file gets 0666 less the umask, like any new file (mkstemp would give 0600) */
    mode_t old_mask = umask(027);
    assert_int_equal(es_gguf_writer_write(w, p), ES_OK);
    umask(old_mask);
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0640);

    /* a symbolic link to a file: the target gets the new content, the link stays a link */
    snprintf(q, sizeof(q), "%s/link.gguf", dir);
    assert_int_equal(symlink("m.gguf", q), 0);
    const ino_t old_ino = sb.st_ino;
    static float data2[1 << 14];
    es_gguf_writer *w2 = small_writer(data2, sizeof(data2));
    before = t_dir_snapshot(dir, "m.gguf");
    assert_int_equal(es_gguf_writer_write(w2, q), ES_OK);
    T_DIR_UNCHANGED(dir, "m.gguf", before);
    free(before);
    assert_int_equal(lstat(q, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    assert_int_equal(stat(p, &sb), 0);
    assert_true(sb.st_ino != old_ino);
    es_gguf *g;
    assert_int_equal(es_gguf_open(q, &g), ES_OK);
    assert_int_equal(es_gguf_find_tensor(g, "t")->nbytes, sizeof(data2));
    es_gguf_close(g);
    es_gguf_writer_destroy(w2);

    /* a dangling link is refused and stays as it was */
    snprintf(q, sizeof(q), "%s/dangling.gguf", dir);
    assert_int_equal(symlink("missing/x.gguf", q), 0);
    before = t_dir_snapshot(dir, NULL);
    assert_int_equal(es_gguf_writer_write(w, q), ES_E_IO);
    assert_non_null(strstr(es_last_error(), "symbolic link to a missing file"));
    T_DIR_UNCHANGED(dir, NULL, before);
    free(before);

    /* a FIFO: the reader gets the whole file, the FIFO stays a FIFO, nothing else appears */
    snprintf(p, sizeof(p), "%s/ref.gguf", dir);
    assert_int_equal(es_gguf_writer_write(w, p), ES_OK); /* the size to expect */
    snprintf(q, sizeof(q), "%s/fifo", dir);
    assert_int_equal(mkfifo(q, 0600), 0);
    before = t_dir_snapshot(dir, NULL);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, fifo_reader, q), 0);
    assert_int_equal(es_gguf_writer_write(w, q), ES_OK);
    size_t *got;
    assert_int_equal(pthread_join(th, (void **)&got), 0);
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(*got, (size_t)sb.st_size);
    assert_memory_equal(got + 1, "GGUF", 4);
    free(got);
    T_DIR_UNCHANGED(dir, NULL, before);
    free(before);
    assert_int_equal(lstat(q, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));

    /* a character device is written in place */
    assert_int_equal(es_gguf_writer_write(w, "/dev/null"), ES_OK);
    assert_int_equal(stat("/dev/null", &sb), 0);
    assert_true(S_ISCHR(sb.st_mode));

    t_rm_rf(dir);
    free(dir);
    es_gguf_writer_destroy(w);
}

/* A split model (llama.cpp's gguf-split parts, tests/split_parts.h) opens from its first part
 * as one file would: every tensor of the source by name, with its bytes and the part it is in;
 * the first part's keys. Another part, a missing part, parts that disagree (split.no, a tensor in
 * two parts, split.tensors.count) and a first part renamed are refused with the rule named. */
static void test_split_model(void **state)
{
    (void)state;
    char src[512], prefix[512], moved[600];
    snprintf(src, sizeof(src), "%s", t_tmp_path("split-src.gguf"));
    snprintf(prefix, sizeof(prefix), "%s", t_tmp_path("split-model"));
    es_synth_opts o = {.arch = "olmoe", .preset = "tiny", .type = "q4_0", .seed = 3};
    if (es_synth(&o, src) != ES_OK) fail_msg("synth: %s", es_last_error());
    es_gguf *s = NULL, *g = NULL;
    assert_int_equal(es_gguf_open(src, &s), ES_OK);
    const int64_t T = es_gguf_n_tensors(s), per = (T + 2) / 3;
    assert_true(T >= 6);
    char first[1024];
    snprintf(first, sizeof(first), "%s", split_parts(src, prefix, 3, PARTS_OK));
    if (es_gguf_open(first, &g) != ES_OK) fail_msg("open parts: %s", es_last_error());
    assert_int_equal(es_gguf_n_files(g), 3);
    assert_int_equal(es_gguf_n_tensors(g), T);
    uint64_t bytes = 0;
    for (int i = 0; i < 3; i++) {
        struct stat sb;
        assert_int_equal(stat(part_path(prefix, i, 3), &sb), 0);
        bytes += (uint64_t)sb.st_size;
        assert_non_null(es_gguf_file(g, (uint32_t)i));
        assert_int_equal(es_gguf_file_size(es_gguf_file(g, (uint32_t)i)), (uint64_t)sb.st_size);
    }
    assert_null(es_gguf_file(g, 3));
    assert_int_equal(es_gguf_files_size(g), bytes);
    for (int64_t j = 0; j < T; j++) {
        const es_gguf_tensor *a = es_gguf_tensor_at(s, j);
        char name[256];
        snprintf(name, sizeof(name), "%.*s", (int)a->name.len, a->name.ptr);
        const es_gguf_tensor *b = es_gguf_find_tensor(g, name);
        if (!b) fail_msg("tensor %s missing", name);
        assert_int_equal(b->file, (uint32_t)(j / per));
        assert_int_equal(b->type, a->type);
        assert_int_equal(b->nbytes, a->nbytes);
        assert_int_equal(b->ne[0], a->ne[0]);
        assert_int_equal(b->ne[1], a->ne[1]);
        assert_int_equal(memcmp(a->data, b->data, a->nbytes), 0);
        /* the offset is its part's */
        const es_gguf *part = es_gguf_file(g, b->file);
        assert_ptr_equal((const uint8_t *)b->data,
                         (const uint8_t *)es_gguf_tensor_at(part, 0)->data - es_gguf_tensor_at(part, 0)->offset + b->offset);
    }
    es_str arch;
    assert_true(es_gguf_get_str(g, "general.architecture", &arch));
    assert_true(es_str_eq(arch, "olmoe"));
    es_gguf_close(g);
    g = NULL;

    /* another part than the first: names the first */
    assert_int_equal(es_gguf_open(part_path(prefix, 1, 3), &g), ES_E_INVAL);
    assert_null(g);
    assert_non_null(strstr(es_last_error(), "is part 2 of a model split in 3 files"));
    assert_non_null(strstr(es_last_error(), part_path(prefix, 0, 3)));
    /* the first part under another name: the others cannot be found */
    snprintf(moved, sizeof(moved), "%s.gguf", prefix);
    assert_int_equal(rename(first, moved), 0);
    assert_int_equal(es_gguf_open(moved, &g), ES_E_FORMAT);
    assert_non_null(strstr(es_last_error(), "does not end in -00001-of-00003.gguf"));
    assert_int_equal(rename(moved, first), 0);
    /* a missing part */
    assert_int_equal(unlink(part_path(prefix, 2, 3)), 0);
    assert_int_equal(es_gguf_open(first, &g), ES_E_IO);
    assert_null(g);
    assert_non_null(strstr(es_last_error(), "its part 3"));
    assert_non_null(strstr(es_last_error(), "is not there"));
    /* parts that disagree */
    static const struct {
        enum parts_fault f;
        const char *msg;
    } faults[] = {{PARTS_BAD_NO, "should say split.no = 2 and split.count = 3; it says 0 and 3"},
                  {PARTS_DUP_TENSOR, "is in two parts of the split model"},
                  {PARTS_BAD_COUNT, "split.tensors.count is"}};
    for (size_t i = 0; i < T_LEN(faults); i++) {
        split_parts(src, prefix, 3, faults[i].f);
        assert_int_equal(es_gguf_open(first, &g), ES_E_FORMAT);
        assert_null(g);
        if (!strstr(es_last_error(), faults[i].msg))
            fail_msg("fault %zu: %s", i, es_last_error());
    }
    /* one part (split.count 1) is a plain file */
    char one[1024];
    snprintf(one, sizeof(one), "%s", split_parts(src, prefix, 1, PARTS_OK));
    assert_int_equal(es_gguf_open(one, &g), ES_OK);
    assert_int_equal(es_gguf_n_files(g), 1);
    assert_int_equal(es_gguf_n_tensors(g), T);
    es_gguf_close(g);
    for (int i = 0; i < 3; i++) unlink(part_path(prefix, i, 3));
    unlink(one);
    es_gguf_close(s);
    unlink(src);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_built_fields),
        cmocka_unit_test(test_minimal_files),
        cmocka_unit_test(test_truncation_every_byte),
        cmocka_unit_test(test_corruption_every_byte),
        cmocka_unit_test(test_bad_header),
        cmocka_unit_test(test_bad_strings),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_bad_alignment),
        cmocka_unit_test(test_bad_tensors),
        cmocka_unit_test(test_open_file),
        cmocka_unit_test(test_vocab_files),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_large_string_array),
        cmocka_unit_test(test_writer_validation),
        cmocka_unit_test(test_writer_failures),
        cmocka_unit_test(test_writer_outputs),
        cmocka_unit_test(test_split_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
