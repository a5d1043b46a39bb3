/* I/O layer (src/io): both backends (io_uring, pread), direct and buffered, against a file of
 * known pseudo-random content whose tail is not aligned (8 MiB + 1234 bytes): random reads at
 * depths 1, 2, 8 checked byte for byte, the unaligned tail, reads past the end of file,
 * two files through one queue (a split model's parts), injected EIO / short reads / delays, the
 * O_DIRECT fallback, the rate limit, bad arguments,
 * close with reads in flight, wake-ups from another thread (during a slow read, pending before
 * a wait, a stream of them during many reads, close with one pending or armed). A backend or
 * mode this machine lacks is skipped with the reason. Run under ThreadSanitizer too (the pread
 * backend has worker threads; es_io_wake is called from a second thread). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "t.h"

#include "core/util.h"
#include "io/io.h"

#define FILE_BYTES ((size_t)(8u << 20) + 1234)
#define ALIGN ((size_t)4096)

static uint8_t *g_data; /* the file's content */
static char *g_path;

typedef struct cfg {
    es_io_backend backend;
    int direct;
    const char *name;
} cfg;

static const cfg CFG_URING_DIRECT = {ES_IO_URING, 1, "io_uring direct"};
static const cfg CFG_URING_BUF = {ES_IO_URING, 0, "io_uring buffered"};
static const cfg CFG_PREAD_DIRECT = {ES_IO_PREAD, 1, "pread direct"};
static const cfg CFG_PREAD_BUF = {ES_IO_PREAD, 0, "pread buffered"};

static int group_setup(void **state)
{
    (void)state;
    g_data = malloc(FILE_BYTES);
    if (!g_data) return -1;
    t_rng r = {20240607};
    for (size_t i = 0; i < FILE_BYTES; i += 8) {
        uint64_t v = t_next(&r);
        memcpy(g_data + i, &v, es_min_size(8, FILE_BYTES - i));
    }
    g_path = strdup(t_tmp_path("io.bin")); /* t_tmp_path reuses its buffers */
    if (!g_path) return -1;
    FILE *f = fopen(g_path, "wb");
    if (!f) return -1;
    size_t w = fwrite(g_data, 1, FILE_BYTES, f);
    if (fclose(f) != 0 || w != FILE_BYTES) return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    unlink(g_path);
    free(g_path);
    free(g_data);
    return 0;
}

/* Opens the test file for configuration c with params p (backend and no_direct are set from
 * c). Skips, saying why, when the backend or O_DIRECT is not available here. */
static es_io *open_cfg(const cfg *c, es_io_params p)
{
    p.backend = c->backend;
    p.no_direct = !c->direct;
    es_io *io = NULL;
    es_status st = es_io_open(g_path, &p, &io);
    if (st == ES_E_UNSUPPORTED && c->backend == ES_IO_URING) {
        print_message("%s: no io_uring here (%s), skipped\n", c->name, es_last_error());
        skip();
    }
    if (st != ES_OK) fail_msg("%s: open: %s", c->name, es_last_error());
    assert_string_equal(es_io_used_backend(io), c->backend == ES_IO_URING ? "io_uring" : "pread");
    assert_int_equal(es_io_file_bytes(io), FILE_BYTES);
    if (c->direct && !es_io_direct(io)) {
        es_io_close(io);
        print_message("%s: the file system of TMPDIR refuses O_DIRECT, skipped\n", c->name);
        skip();
    }
    if (!c->direct) assert_int_equal(es_io_direct(io), 0);
    return io;
}

static void *abuf(size_t n)
{
    void *p = aligned_alloc(ALIGN, es_align_up(n, ALIGN));
    assert_non_null(p);
    memset(p, 0xA5, es_align_up(n, ALIGN));
    return p;
}

/* Checks dst[0..need) against the file at off; names the first differing byte. */
static void check_bytes(const uint8_t *dst, uint64_t off, size_t need, const char *what)
{
    if (memcmp(dst, g_data + off, need) == 0) return;
    size_t i = 0;
    while (dst[i] == g_data[off + i])
        i++;
    fail_msg("%s: read at %llu: byte %zu differs (%02x, want %02x)", what,
             (unsigned long long)off, i, dst[i], g_data[off + i]);
}

/* n random reads (aligned offsets, 1..64 blocks long, tail reads with need < len) with up to
 * qd in flight; every completion is checked byte for byte. */
static void random_reads(es_io *io, int qd, int n, uint64_t seed, const char *what)
{
    enum { MAXB = 64 };
    t_rng r = {seed};
    uint8_t *buf[64];
    uint64_t off[64];
    size_t need[64];
    int free_tag[64], n_free = qd;
    for (int i = 0; i < qd; i++) {
        buf[i] = abuf(MAXB * ALIGN);
        free_tag[i] = i;
    }
    const uint64_t blocks = (FILE_BYTES + ALIGN - 1) / ALIGN; /* the last one is partial */
    int submitted = 0, completed = 0;
    while (completed < n) {
        while (submitted < n && n_free > 0) {
            int tag = free_tag[--n_free];
            off[tag] = t_next(&r) % blocks * ALIGN;
            size_t len = (1 + t_next(&r) % MAXB) * ALIGN;
            need[tag] = es_min_size(len, FILE_BYTES - off[tag]);
            if (need[tag] > 1 && t_next(&r) % 4 == 0) /* sometimes need less than is there */
                need[tag] -= t_next(&r) % need[tag];
            memset(buf[tag], 0xA5, len);
            es_status st = es_io_submit(io, off[tag], len, need[tag], buf[tag], (uint64_t)tag);
            if (st != ES_OK) fail_msg("%s: submit: %s", what, es_last_error());
            submitted++;
            assert_true(es_io_in_flight(io) <= qd);
        }
        uint64_t tag;
        es_status rs;
        assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
        assert_true(tag < (uint64_t)qd);
        if (rs != ES_OK) fail_msg("%s: read %d failed: %s", what, completed, es_last_error());
        check_bytes(buf[tag], off[tag], need[tag], what);
        free_tag[n_free++] = (int)tag;
        completed++;
    }
    assert_int_equal(es_io_in_flight(io), 0);
    for (int i = 0; i < qd; i++)
        free(buf[i]);
}

/* ---- content at depths 1, 2, 8 -------------------------------------------------------------- */

static void test_random(void **state)
{
    const cfg *c = *state;
    static const int depths[] = {1, 2, 8};
    for (size_t d = 0; d < T_LEN(depths); d++) {
        es_io *io = open_cfg(c, (es_io_params){.queue_depth = depths[d]});
        random_reads(io, depths[d], 300, 100 + d, c->name);
        es_io_stats s;
        es_io_get_stats(io, &s);
        assert_int_equal(s.requests, 300);
        assert_true(s.reads >= s.requests);
        assert_true(s.bytes > 0 && s.busy_s > 0);
        es_io_close(io);
    }
}

/* The whole file in 1 MiB chunks at depth 4, the last one shorter than its length. */
static void test_sequential(void **state)
{
    const cfg *c = *state;
    es_io *io = open_cfg(c, (es_io_params){0}); /* default depth 4 */
    assert_int_equal(es_io_queue_depth(io), 4);
    const size_t chunk = 1u << 20;
    int n_chunks = (int)((FILE_BYTES + chunk - 1) / chunk), next = 0, done = 0;
    uint8_t *all = abuf((size_t)n_chunks * chunk); /* room for the whole last chunk */
    while (done < n_chunks) {
        while (next < n_chunks && es_io_in_flight(io) < 4) {
            uint64_t off = (uint64_t)next * chunk;
            size_t need = es_min_size(chunk, FILE_BYTES - off);
            assert_int_equal(es_io_submit(io, off, chunk, need, all + off, (uint64_t)next),
                             ES_OK);
            next++;
        }
        uint64_t tag;
        es_status rs;
        assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
        if (rs != ES_OK) fail_msg("%s: chunk %llu: %s", c->name, (unsigned long long)tag,
                                  es_last_error());
        done++;
    }
    check_bytes(all, 0, FILE_BYTES, c->name);
    es_io_stats s;
    es_io_get_stats(io, &s);
    assert_int_equal(s.bytes, FILE_BYTES);
    free(all);
    es_io_close(io);
}

/* ---- the unaligned tail and reads past the end ---------------------------------------------- */

static void test_tail_and_eof(void **state)
{
    const cfg *c = *state;
    es_io *io = open_cfg(c, (es_io_params){.queue_depth = 2});
    const uint64_t tail = FILE_BYTES / ALIGN * ALIGN; /* 8 MiB: 1234 bytes follow */
    uint8_t *b = abuf(4 * ALIGN);
    uint64_t tag;
    es_status rs;

    /* need < len: exactly the bytes that exist */
    assert_int_equal(es_io_submit(io, tail, 4 * ALIGN, 1234, b, 7), ES_OK);
    assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
    assert_int_equal(tag, 7);
    if (rs != ES_OK) fail_msg("%s: tail: %s", c->name, es_last_error());
    check_bytes(b, tail, 1234, c->name);

    /* one byte more than exists */
    assert_int_equal(es_io_submit(io, tail, ALIGN, 1235, b, 8), ES_OK);
    assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
    assert_int_equal(tag, 8);
    assert_int_equal(rs, ES_E_IO);
    assert_non_null(strstr(es_last_error(), "file ends at 8389842, 1 bytes short"));

    /* a read across the end, started before the last block */
    assert_int_equal(es_io_submit(io, tail - ALIGN, 4 * ALIGN, 4 * ALIGN, b, 9), ES_OK);
    assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
    assert_int_equal(rs, ES_E_IO);
    char want[128];
    snprintf(want, sizeof(want), "read of 16384 bytes at offset %llu: file ends at 8389842, "
             "%zu bytes short", (unsigned long long)(tail - ALIGN), 4 * ALIGN - ALIGN - 1234);
    if (!strstr(es_last_error(), want))
        fail_msg("%s: got \"%s\", want \"%s\"", c->name, es_last_error(), want);

    /* entirely past the end */
    assert_int_equal(es_io_submit(io, 16u << 20, ALIGN, 10, b, 10), ES_OK);
    assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
    assert_int_equal(rs, ES_E_IO);
    assert_non_null(strstr(es_last_error(), "file ends at 8389842, 10 bytes short"));

    /* the descriptor still works afterwards */
    random_reads(io, 2, 20, 7, c->name);
    free(b);
    es_io_close(io);
}

/* ---- several files (a model split in parts) ------------------------------------------------- */

/* Two files read through one queue: the test file and a second one (its bytes reversed, 1 MiB +
 * 77) opened after it; reads of both interleaved at depth 4 land byte for byte, each file has
 * its own end, a file index out of range is refused, a missing file fails the open naming it. */
static void test_several_files(void **state)
{
    const cfg *c = *state;
    const size_t nb = (1u << 20) + 77;
    uint8_t *rev = malloc(nb);
    assert_non_null(rev);
    for (size_t i = 0; i < nb; i++) rev[i] = g_data[FILE_BYTES - 1 - i];
    char second[512];
    snprintf(second, sizeof(second), "%s", t_tmp_path("io-second.bin"));
    FILE *f = fopen(second, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(rev, 1, nb, f), nb);
    assert_int_equal(fclose(f), 0);
    const char *paths[2] = {g_path, second};
    es_io_params p = {.queue_depth = 4, .backend = c->backend, .no_direct = !c->direct};
    es_io *io = NULL;
    es_status st = es_io_open_files(paths, 2, &p, &io);
    if (st == ES_E_UNSUPPORTED && c->backend == ES_IO_URING) {
        print_message("%s: no io_uring here (%s), skipped\n", c->name, es_last_error());
        skip();
    }
    if (st != ES_OK) fail_msg("%s: open: %s", c->name, es_last_error());
    uint8_t *b = abuf(16 * 64 * ALIGN);
    uint64_t tag;
    es_status rs;
    int next = 0, done = 0;
    const int n = 64;
    while (done < n) {
        while (next < n && es_io_in_flight(io) < 4) {
            const int file = next % 2;
            const uint64_t off = (uint64_t)(next * 7 % 200) * ALIGN;
            assert_int_equal(es_io_submit_file(io, file, off, 4 * ALIGN, 4 * ALIGN,
                                               b + (size_t)next * 4 * ALIGN, (uint64_t)next),
                             ES_OK);
            next++;
        }
        assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
        if (rs != ES_OK) fail_msg("%s: read %llu: %s", c->name, (unsigned long long)tag,
                                  es_last_error());
        const uint64_t off = (uint64_t)(tag * 7 % 200) * ALIGN;
        const uint8_t *got = b + (size_t)tag * 4 * ALIGN;
        const uint8_t *want = tag % 2 ? rev + off : g_data + off;
        if (memcmp(got, want, 4 * ALIGN) != 0)
            fail_msg("%s: read %llu of file %d differs", c->name, (unsigned long long)tag,
                     (int)(tag % 2));
        done++;
    }
    /* the second file ends at its own size, the first goes on */
    const uint64_t tail = nb / ALIGN * ALIGN;
    assert_int_equal(es_io_submit_file(io, 1, tail, ALIGN, 78, b, 1), ES_OK);
    assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
    assert_int_equal(rs, ES_E_IO);
    assert_non_null(strstr(es_last_error(), "file ends at 1048653, 1 bytes short"));
    /* entirely past the second file's end, inside the first's: the second's end is named */
    assert_int_equal(es_io_submit_file(io, 1, 2u << 20, ALIGN, 10, b, 4), ES_OK);
    assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
    assert_int_equal(rs, ES_E_IO);
    assert_non_null(strstr(es_last_error(), "file ends at 1048653, 10 bytes short"));
    assert_int_equal(es_io_submit_file(io, 0, tail, ALIGN, 78, b, 2), ES_OK);
    assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
    assert_int_equal(rs, ES_OK);
    check_bytes(b, tail, 78, c->name);
    assert_int_equal(es_io_submit_file(io, 2, 0, ALIGN, ALIGN, b, 3), ES_E_INVAL);
    assert_int_equal(es_io_submit_file(io, -1, 0, ALIGN, ALIGN, b, 3), ES_E_INVAL);
    es_io_close(io);
    /* a missing file, and no files */
    unlink(second);
    assert_int_equal(es_io_open_files(paths, 2, &p, &io), ES_E_IO);
    assert_null(io);
    assert_non_null(strstr(es_last_error(), second));
    assert_int_equal(es_io_open_files(paths, 0, &p, &io), ES_E_INVAL);
    free(b);
    free(rev);
}

/* ---- injected faults ------------------------------------------------------------------------ */

static void test_fault_eio(void **state)
{
    const cfg *c = *state;
    es_io *io = open_cfg(c, (es_io_params){.queue_depth = 2, .fault_eio_at = 3});
    enum { N = 10 };
    uint8_t *b = abuf(N * 8 * ALIGN); /* request k reads blocks 8k.. into b + 8k blocks */
    int next = 0, done = 0, failed = 0;
    while (done < N) {
        while (next < N && es_io_in_flight(io) < 2) {
            size_t o = (size_t)next * 8 * ALIGN;
            assert_int_equal(es_io_submit(io, o, 8 * ALIGN, 8 * ALIGN, b + o, (uint64_t)next),
                             ES_OK);
            next++;
        }
        uint64_t tag;
        es_status rs;
        assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
        done++;
        if (tag == 2) { /* the third request */
            assert_int_equal(rs, ES_E_IO);
            if (!strstr(es_last_error(), "read of 32768 bytes at offset 65536: "
                                         "Input/output error"))
                fail_msg("%s: message \"%s\"", c->name, es_last_error());
            failed++;
        } else {
            if (rs != ES_OK) fail_msg("%s: request %d: %s", c->name, (int)tag, es_last_error());
            check_bytes(b + tag * 8 * ALIGN, tag * 8 * ALIGN, 8 * ALIGN, c->name);
        }
    }
    assert_int_equal(failed, 1);
    free(b);
    es_io_close(io);
}

/* Short reads of 4096 (aligned), 1000 and 6000 bytes (unaligned: with O_DIRECT the rest goes
 * buffered, or restarts at a 4 KiB boundary): the content must still be right. */
static void test_fault_short(void **state)
{
    const cfg *c = *state;
    static const size_t shorts[] = {4096, 1000, 6000};
    for (size_t i = 0; i < T_LEN(shorts); i++) {
        es_io *io = open_cfg(c, (es_io_params){.queue_depth = 4,
                                               .fault_short_bytes = shorts[i]});
        random_reads(io, 4, 60, 300 + i, c->name);
        es_io_stats s;
        es_io_get_stats(io, &s);
        assert_true(s.reads > s.requests); /* reads were resumed */
        if (c->direct) assert_int_equal(es_io_direct(io), 1);
        es_io_close(io);
    }
}

static void test_fault_delay(void **state)
{
    const cfg *c = *state;
    es_io *io = open_cfg(c, (es_io_params){.queue_depth = 1, .fault_delay_us = 20000});
    uint8_t *b = abuf(ALIGN);
    uint64_t t0 = es_now_ns();
    for (int i = 0; i < 3; i++) {
        uint64_t tag;
        es_status rs;
        assert_int_equal(es_io_submit(io, (uint64_t)i * ALIGN, ALIGN, ALIGN, b, 0), ES_OK);
        assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
        assert_int_equal(rs, ES_OK);
        check_bytes(b, (uint64_t)i * ALIGN, ALIGN, c->name);
    }
    double s = (double)(es_now_ns() - t0) * 1e-9;
    if (s < 0.060) fail_msg("%s: 3 reads delayed 20 ms each took %.3f s", c->name, s);
    free(b);
    es_io_close(io);
}

/* A file system that takes O_DIRECT at open and refuses it at the first read. */
static void test_direct_fallback(void **state)
{
    const cfg *c = *state;
    es_io *io = open_cfg(c, (es_io_params){.queue_depth = 8, .fault_direct_einval = 1});
    random_reads(io, 8, 50, 500, c->name);
    assert_int_equal(es_io_direct(io), 0);
    es_io_close(io);
}

/* ---- rate limit ----------------------------------------------------------------------------- */

/* 8 MiB at 40 MB/s takes at least 0.21 s (lower bound only: no upper-bound timing asserts). */
static void test_rate_limit(void **state)
{
    const cfg *c = *state;
    es_io *io = open_cfg(c, (es_io_params){.queue_depth = 4, .limit_bytes_per_s = 40e6});
    const size_t chunk = 1u << 20;
    uint8_t *all = abuf(8 * chunk);
    uint64_t t0 = es_now_ns();
    int next = 0, done = 0;
    while (done < 8) {
        while (next < 8 && es_io_in_flight(io) < 4) {
            assert_int_equal(es_io_submit(io, (uint64_t)next * chunk, chunk, chunk,
                                          all + (size_t)next * chunk, 0),
                             ES_OK);
            next++;
        }
        uint64_t tag;
        es_status rs;
        assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
        assert_int_equal(rs, ES_OK);
        done++;
    }
    double s = (double)(es_now_ns() - t0) * 1e-9;
    if (s < 0.18) fail_msg("%s: 8 MiB at 40 MB/s took %.3f s", c->name, s);
    check_bytes(all, 0, 8 * chunk, c->name);
    es_io_stats st;
    es_io_get_stats(io, &st);
    assert_true(st.busy_s >= 0.18);
    free(all);
    es_io_close(io);
}

/* ---- bad arguments, close with reads in flight ---------------------------------------------- */

static void test_inval(void **state)
{
    const cfg *c = *state;
    es_io *io = open_cfg(c, (es_io_params){.queue_depth = 2});
    uint8_t *b = abuf(4 * ALIGN);
    uint64_t tag;
    es_status rs;
    assert_int_equal(es_io_wait(io, &tag, &rs), ES_E_INVAL); /* nothing in flight */
    assert_int_equal(es_io_submit(io, 512, ALIGN, ALIGN, b, 0), ES_E_INVAL);
    assert_int_equal(es_io_submit(io, 0, ALIGN + 1, ALIGN, b, 0), ES_E_INVAL);
    assert_int_equal(es_io_submit(io, 0, ALIGN, ALIGN, b + 8, 0), ES_E_INVAL);
    assert_int_equal(es_io_submit(io, 0, ALIGN, ALIGN + 1, b, 0), ES_E_INVAL);
    assert_int_equal(es_io_submit(io, 0, ALIGN, 0, b, 0), ES_E_INVAL);
    assert_int_equal(es_io_submit(io, 0, 0, 0, b, 0), ES_E_INVAL);
    /* the wake tag is reserved */
    assert_int_equal(es_io_submit(io, 0, ALIGN, ALIGN, b, ES_IO_WAKE_TAG), ES_E_INVAL);
    assert_non_null(strstr(es_last_error(), "reserved for wake-ups"));
    assert_int_equal(es_io_in_flight(io), 0);
    assert_int_equal(es_io_submit(io, 0, ALIGN, ALIGN, b, 1), ES_OK);
    assert_int_equal(es_io_submit(io, ALIGN, ALIGN, ALIGN, b + ALIGN, 2), ES_OK);
    assert_int_equal(es_io_submit(io, 2 * ALIGN, ALIGN, ALIGN, b + 2 * ALIGN, 3), ES_E_INVAL);
    assert_non_null(strstr(es_last_error(), "queue depth 2"));
    assert_int_equal(es_io_in_flight(io), 2);
    int seen = 0;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
        assert_int_equal(rs, ES_OK);
        seen |= 1 << tag;
    }
    assert_int_equal(seen, 6);
    check_bytes(b, 0, 2 * ALIGN, c->name);
    free(b);
    es_io_close(io);

    es_io_params p = {.queue_depth = 65, .backend = c->backend};
    assert_int_equal(es_io_open(g_path, &p, &io), ES_E_INVAL);
    assert_null(io);
    p.queue_depth = -1;
    assert_int_equal(es_io_open(g_path, &p, &io), ES_E_INVAL);
    p = (es_io_params){.limit_bytes_per_s = -1, .backend = c->backend};
    assert_int_equal(es_io_open(g_path, &p, &io), ES_E_INVAL);
    p = (es_io_params){.backend = c->backend};
    assert_int_equal(es_io_open(t_tmp_path("no-such-file"), &p, &io), ES_E_IO);
    assert_non_null(strstr(es_last_error(), "no-such-file"));
    assert_null(io);
    es_io_close(NULL);
}

/* Close returns with reads still in flight (delayed and queued ones): no leak (ASan), no
 * hang (the runner's timeout), no write into the buffers after close (they are freed then). */
static void test_close_in_flight(void **state)
{
    const cfg *c = *state;
    for (int round = 0; round < 3; round++) {
        es_io *io = open_cfg(c, (es_io_params){.queue_depth = 8, .fault_delay_us = 20000,
                                               .fault_short_bytes = round == 2 ? 4096 : 0});
        uint8_t *b = abuf(8 * 16 * ALIGN);
        for (int i = 0; i < 8; i++)
            assert_int_equal(es_io_submit(io, (uint64_t)i * 16 * ALIGN, 16 * ALIGN, 16 * ALIGN,
                                          b + (size_t)i * 16 * ALIGN, (uint64_t)i),
                             ES_OK);
        if (round == 1) { /* reap one, so that one request is mid-way in the others */
            uint64_t tag;
            es_status rs;
            assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
            assert_int_equal(rs, ES_OK);
        }
        es_io_close(io);
        free(b);
    }
}

/* ---- wake-ups (es_io_wake) ------------------------------------------------------------------ */

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, us % 1000000 * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* A second thread that calls es_io_wake: once after start_us, or (every_us > 0) every every_us
 * until stop is set. */
typedef struct waker {
    es_io *io;
    long start_us, every_us;
    atomic_int stop;
    atomic_int n_calls;
    pthread_t th;
} waker;

static void *waker_main(void *arg)
{
    waker *w = arg;
    sleep_us(w->start_us);
    do {
        es_io_wake(w->io);
        atomic_fetch_add_explicit(&w->n_calls, 1, memory_order_relaxed);
        if (w->every_us > 0) sleep_us(w->every_us);
    } while (w->every_us > 0 && !atomic_load_explicit(&w->stop, memory_order_relaxed));
    return NULL;
}

static void waker_start(waker *w, es_io *io, long start_us, long every_us)
{
    w->io = io;
    w->start_us = start_us;
    w->every_us = every_us;
    atomic_init(&w->stop, 0);
    atomic_init(&w->n_calls, 0);
    assert_int_equal(pthread_create(&w->th, NULL, waker_main, w), 0);
}

static void waker_join(waker *w)
{
    atomic_store_explicit(&w->stop, 1, memory_order_relaxed);
    assert_int_equal(pthread_join(w->th, NULL), 0);
}

/* The loader blocks in es_io_wait on a read delayed 300 ms; another thread wakes it 50 ms in.
 * The wake must come back first, with the read still in flight, and the read afterwards with
 * its bytes. (Order only: the 300 ms make it unambiguous without an upper time bound.) */
static void test_wake_blocked(void **state)
{
    const cfg *c = *state;
    es_io *io = open_cfg(c, (es_io_params){.queue_depth = 2, .fault_delay_us = 300000});
    uint8_t *b = abuf(16 * ALIGN);
    const uint64_t off = 40 * ALIGN;
    assert_int_equal(es_io_submit(io, off, 16 * ALIGN, 16 * ALIGN, b, 5), ES_OK);
    waker w;
    waker_start(&w, io, 50000, 0);
    uint64_t tag;
    es_status rs = ES_E_IO;
    assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
    if (tag != ES_IO_WAKE_TAG)
        fail_msg("%s: the read (tag %llu) came back before the wake", c->name,
                 (unsigned long long)tag);
    assert_int_equal(rs, ES_OK);
    assert_int_equal(es_io_in_flight(io), 1); /* the read is still in flight */
    waker_join(&w);
    assert_int_equal(atomic_load(&w.n_calls), 1);

    assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
    assert_int_equal(tag, 5);
    if (rs != ES_OK) fail_msg("%s: read: %s", c->name, es_last_error());
    check_bytes(b, off, 16 * ALIGN, c->name);
    assert_int_equal(es_io_in_flight(io), 0);
    /* one wake, one wake returned: nothing is left pending */
    assert_int_equal(es_io_wait(io, &tag, &rs), ES_E_INVAL);
    es_io_stats s;
    es_io_get_stats(io, &s); /* the wake counts nowhere */
    assert_int_equal(s.requests, 1);
    assert_int_equal(s.reads, 1);
    assert_int_equal(s.bytes, 16 * ALIGN);
    assert_true(s.busy_s >= 0.29); /* lower bound: the delay, wake or not */
    free(b);
    es_io_close(io);
}

/* A wake made before the wait is pending: the next wait returns it, once however many calls
 * were made, with or without reads in flight. */
static void test_wake_pending(void **state)
{
    const cfg *c = *state;
    es_io *io = open_cfg(c, (es_io_params){.queue_depth = 2, .fault_delay_us = 100000});
    uint8_t *b = abuf(2 * ALIGN);
    uint64_t tag;
    es_status rs;

    /* nothing in flight: the pending wake comes back at once, then ES_E_INVAL again */
    es_io_wake(io);
    es_io_wake(io);
    es_io_wake(io);
    rs = ES_E_IO;
    assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
    assert_true(tag == ES_IO_WAKE_TAG);
    assert_int_equal(rs, ES_OK);
    assert_int_equal(es_io_wait(io, &tag, &rs), ES_E_INVAL);

    /* pending before the first submit (the ring is not even enabled yet), then a slow read:
     * the wake first; the leftover notifications must not return a second wake */
    es_io_wake(io);
    es_io_wake(io);
    assert_int_equal(es_io_submit(io, 3 * ALIGN, ALIGN, ALIGN, b, 11), ES_OK);
    assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
    assert_true(tag == ES_IO_WAKE_TAG);
    assert_int_equal(es_io_in_flight(io), 1);
    assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
    assert_int_equal(tag, 11);
    assert_int_equal(rs, ES_OK);
    check_bytes(b, 3 * ALIGN, ALIGN, c->name);

    /* pending while a slow read is in flight */
    assert_int_equal(es_io_submit(io, 7 * ALIGN, ALIGN, ALIGN, b + ALIGN, 12), ES_OK);
    es_io_wake(io);
    assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
    assert_true(tag == ES_IO_WAKE_TAG);
    assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
    assert_int_equal(tag, 12);
    assert_int_equal(rs, ES_OK);
    check_bytes(b + ALIGN, 7 * ALIGN, ALIGN, c->name);
    assert_int_equal(es_io_wait(io, &tag, &rs), ES_E_INVAL);
    es_io_close(io);

    /* no delay: the read may be ready before the wake is looked at (completions go first), so
     * only "each exactly once" is checked, not the order */
    io = open_cfg(c, (es_io_params){.queue_depth = 2});
    assert_int_equal(es_io_submit(io, 9 * ALIGN, ALIGN, ALIGN, b, 13), ES_OK);
    es_io_wake(io);
    int got_read = 0, got_wake = 0;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
        assert_int_equal(rs, ES_OK);
        if (tag == ES_IO_WAKE_TAG) {
            got_wake++;
        } else {
            assert_int_equal(tag, 13);
            got_read++;
        }
    }
    assert_int_equal(got_read, 1);
    assert_int_equal(got_wake, 1);
    check_bytes(b, 9 * ALIGN, ALIGN, c->name);
    assert_int_equal(es_io_wait(io, &tag, &rs), ES_E_INVAL);
    free(b);
    es_io_close(io);
}

/* 200 reads at depth 4 while another thread wakes every 20 us: every read completes exactly
 * once with its bytes, wakes come back in between, nothing hangs (the runner's timeout). The
 * second round adds short reads (resumed parts) and pacing. */
static void test_wake_stress(void **state)
{
    const cfg *c = *state;
    enum { N = 200, QD = 4, MAXB = 16 };
    const es_io_params rounds[] = {
        {.queue_depth = QD, .fault_delay_us = 1000},
        {.queue_depth = QD, .fault_delay_us = 200, .fault_short_bytes = 3 * ALIGN,
         .limit_bytes_per_s = 2e9},
    };
    for (size_t k = 0; k < T_LEN(rounds); k++) {
        es_io *io = open_cfg(c, rounds[k]);
        t_rng r = {4000 + k};
        uint8_t *buf[QD];
        int free_buf[QD], n_free = QD, buf_of[N];
        uint64_t off[N];
        size_t need[N];
        unsigned char done[N] = {0};
        for (int i = 0; i < QD; i++) {
            buf[i] = abuf(MAXB * ALIGN);
            free_buf[i] = i;
        }
        const uint64_t blocks = (FILE_BYTES + ALIGN - 1) / ALIGN;
        waker w;
        waker_start(&w, io, 0, 20);
        int submitted = 0, completed = 0, wakes = 0;
        while (completed < N) {
            while (submitted < N && n_free > 0) {
                int i = submitted++, bi = free_buf[--n_free];
                buf_of[i] = bi;
                off[i] = t_next(&r) % blocks * ALIGN;
                size_t len = (1 + t_next(&r) % MAXB) * ALIGN;
                need[i] = es_min_size(len, FILE_BYTES - off[i]);
                memset(buf[bi], 0xA5, len);
                if (es_io_submit(io, off[i], len, need[i], buf[bi], (uint64_t)i) != ES_OK)
                    fail_msg("%s: submit %d: %s", c->name, i, es_last_error());
            }
            uint64_t tag;
            es_status rs = ES_E_IO;
            assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
            if (rs != ES_OK)
                fail_msg("%s: read %llu: %s", c->name, (unsigned long long)tag, es_last_error());
            if (tag == ES_IO_WAKE_TAG) {
                wakes++;
                assert_int_equal(es_io_in_flight(io), submitted - completed);
                continue;
            }
            assert_true(tag < (uint64_t)submitted);
            if (done[tag])
                fail_msg("%s: read %llu completed twice", c->name, (unsigned long long)tag);
            done[tag] = 1;
            check_bytes(buf[buf_of[tag]], off[tag], need[tag], c->name);
            free_buf[n_free++] = buf_of[tag];
            completed++;
        }
        waker_join(&w);
        /* at most the one wake the last calls left pending, then nothing */
        uint64_t tag;
        es_status rs;
        es_status st = es_io_wait(io, &tag, &rs);
        if (st == ES_OK) {
            assert_true(tag == ES_IO_WAKE_TAG);
            st = es_io_wait(io, &tag, &rs);
        }
        assert_int_equal(st, ES_E_INVAL);
        print_message("%s: %d reads, %d wakes returned for %d es_io_wake calls\n", c->name, N,
                      wakes, atomic_load(&w.n_calls));
        assert_true(wakes >= 1 && wakes <= atomic_load(&w.n_calls));
        es_io_stats s;
        es_io_get_stats(io, &s);
        assert_int_equal(s.requests, N);
        for (int i = 0; i < QD; i++)
            free(buf[i]);
        es_io_close(io);
    }
}

/* Close right after a wake, no wait having taken it: nothing leaks (ASan), nothing writes into
 * freed memory, nothing hangs. Rounds: nothing ever submitted; a slow read in flight; the ring's
 * wake read armed by an earlier wait, then a wake (its completion sits unreaped); armed with no
 * wake (close must complete it itself); a wake from another thread during reads. */
static void test_wake_close(void **state)
{
    const cfg *c = *state;
    for (int round = 0; round < 5; round++) {
        es_io *io = open_cfg(c, (es_io_params){.queue_depth = 2, .fault_delay_us = 20000});
        uint8_t *b = abuf(2 * ALIGN);
        uint64_t tag;
        es_status rs;
        switch (round) {
        case 0:
            es_io_wake(io);
            break;
        case 1:
            assert_int_equal(es_io_submit(io, 0, 2 * ALIGN, 2 * ALIGN, b, 1), ES_OK);
            es_io_wake(io);
            break;
        case 2:
        case 3: /* the wait blocks 20 ms on the delayed read: it arms the ring's wake read */
            assert_int_equal(es_io_submit(io, 0, 2 * ALIGN, 2 * ALIGN, b, 1), ES_OK);
            assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
            assert_int_equal(tag, 1);
            assert_int_equal(rs, ES_OK);
            if (round == 2) es_io_wake(io);
            break;
        case 4: {
            waker w;
            waker_start(&w, io, 0, 50);
            assert_int_equal(es_io_submit(io, 0, ALIGN, ALIGN, b, 1), ES_OK);
            assert_int_equal(es_io_submit(io, ALIGN, ALIGN, ALIGN, b + ALIGN, 2), ES_OK);
            int n = 0;
            while (n < 2) {
                assert_int_equal(es_io_wait(io, &tag, &rs), ES_OK);
                if (tag != ES_IO_WAKE_TAG) n++;
            }
            waker_join(&w);
            break;
        }
        }
        es_io_close(io);
        free(b);
    }
}

/* AUTO picks a backend that works; explicit pread names itself. */
static void test_auto(void **state)
{
    (void)state;
    es_io *io = NULL;
    es_io_params p = {.queue_depth = 3};
    assert_int_equal(es_io_open(g_path, &p, &io), ES_OK);
    const char *name = es_io_used_backend(io);
    assert_true(strcmp(name, "io_uring") == 0 || strcmp(name, "pread") == 0);
    print_message("auto backend: %s, O_DIRECT %s\n", name, es_io_direct(io) ? "on" : "off");
    random_reads(io, 3, 50, 900, "auto");
    es_io_close(io);
}

/* One case per configuration, named "test/configuration" so run.sh lists skips by name. */
#define CASE(fn, c) {#fn "/" #c, fn, NULL, NULL, (void *)&CFG_##c}
#define FOR_CFGS(fn)                                                                               \
    CASE(fn, URING_DIRECT), CASE(fn, URING_BUF), CASE(fn, PREAD_DIRECT), CASE(fn, PREAD_BUF)

int main(void)
{
    const struct CMUnitTest tests[] = {
        FOR_CFGS(test_random),
        FOR_CFGS(test_sequential),
        FOR_CFGS(test_tail_and_eof),
        FOR_CFGS(test_several_files),
        FOR_CFGS(test_fault_eio),
        FOR_CFGS(test_fault_short),
        FOR_CFGS(test_fault_delay),
        CASE(test_direct_fallback, URING_DIRECT),
        CASE(test_direct_fallback, PREAD_DIRECT),
        FOR_CFGS(test_rate_limit),
        FOR_CFGS(test_inval),
        FOR_CFGS(test_close_in_flight),
        FOR_CFGS(test_wake_blocked),
        FOR_CFGS(test_wake_pending),
        FOR_CFGS(test_wake_stress),
        FOR_CFGS(test_wake_close),
        cmocka_unit_test(test_auto),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
