/*
 * Sequential read bandwidth through es_io (src/io/io.h): the whole file in chunks of BLOCK
 * bytes with DEPTH reads in flight, for each backend, O_DIRECT unless --buffered. Prints the
 * median MB/s (10^6 bytes/s) of RUNS passes, one line per backend. It drops no cache itself:
 * direct reads bypass the page cache; bench/io_vs_fio.sh drops it before buffered comparisons.
 * Before timing, the first and the last chunk read through es_io are compared with plain pread.
 *
 * usage: bench_io FILE [BLOCK=1M] [DEPTH=2] [RUNS=3] [--backend uring|pread|both] [--buffered]
 *                [--small-pages]
 * BLOCK takes a K or M suffix (KiB, MiB) and must be a multiple of 4096.
 */
#include "core/util.h"
#include "io/io.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static size_t parse_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end == 'K' || *end == 'k') v <<= 10, end++;
    else if (*end == 'M' || *end == 'm') v <<= 20, end++;
    return *end ? 0 : (size_t)v;
}

/* Reads the whole file once; returns seconds, or < 0 after printing an error. With check set,
 * the chunks at offsets `check_off[0..1]` are copied to `check_dst` as they arrive. */
static double pass(es_io *io, size_t block, int depth, uint8_t *bufs, uint64_t *check_off,
                   uint8_t *check_dst)
{
    const uint64_t size = es_io_file_bytes(io);
    const uint64_t n_chunks = (size + block - 1) / block;
    int slot_free[64], n_free = depth;
    for (int i = 0; i < depth; i++)
        slot_free[i] = i;
    uint64_t next = 0, done = 0, chunk_of[64];
    double t0 = now_s();
    while (done < n_chunks) {
        while (next < n_chunks && n_free > 0) {
            int s = slot_free[--n_free];
            uint64_t off = next * block;
            size_t need = size - off < block ? (size_t)(size - off) : block;
            chunk_of[s] = next;
            if (es_io_submit(io, off, block, need, bufs + (size_t)s * block, (uint64_t)s) !=
                ES_OK) {
                fprintf(stderr, "bench_io: submit: %s\n", es_last_error());
                return -1;
            }
            next++;
        }
        uint64_t tag;
        es_status rs;
        if (es_io_wait(io, &tag, &rs) != ES_OK || rs != ES_OK) {
            fprintf(stderr, "bench_io: read: %s\n", es_last_error());
            return -1;
        }
        for (int k = 0; check_dst && k < 2; k++)
            if (chunk_of[tag] * block == check_off[k]) {
                size_t n = size - check_off[k] < block ? (size_t)(size - check_off[k]) : block;
                memcpy(check_dst + (size_t)k * block, bufs + tag * block, n);
            }
        slot_free[n_free++] = (int)tag;
        done++;
    }
    return now_s() - t0;
}

int main(int argc, char **argv)
{
    const char *path = NULL, *which = "both";
    size_t block = 1u << 20;
    int depth = 2, runs = 3, buffered = 0, small_pages = 0, pos = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--buffered")) buffered = 1;
        else if (!strcmp(argv[i], "--small-pages")) small_pages = 1;
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) which = argv[++i];
        else if (pos == 0) path = argv[i], pos++;
        else if (pos == 1) block = parse_size(argv[i]), pos++;
        else if (pos == 2) depth = atoi(argv[i]), pos++;
        else if (pos == 3) runs = atoi(argv[i]), pos++;
        else path = NULL;
    }
    if (!path || block == 0 || block % es_io_alignment() || depth < 1 || depth > 64 ||
        runs < 1 || runs > 99) {
        fprintf(stderr, "usage: bench_io FILE [BLOCK=1M] [DEPTH=2] [RUNS=3] "
                        "[--backend uring|pread|both] [--buffered] [--small-pages]\n");
        return 2;
    }
    /* Read buffers as the loader's arena will get them: es_alloc_big (mmap + MADV_HUGEPAGE, asked
     * for at least 2 MiB so that it maps rather than mallocs). O_DIRECT pins the buffer's pages
     * for each read; with 2 MiB pages the same disk delivered ~1.8x more (bench/README.md).
     * --small-pages: aligned_alloc (4 KiB pages), for comparison. */
    size_t buf_bytes = block * (size_t)depth;
    const int big = !small_pages;
    if (big && buf_bytes < ((size_t)2 << 20)) buf_bytes = (size_t)2 << 20;
    uint8_t *bufs = big ? es_alloc_big(buf_bytes) : aligned_alloc(es_io_alignment(), buf_bytes);
    uint8_t *got = aligned_alloc(es_io_alignment(), 2 * block);
    uint8_t *want = malloc(2 * block);
    if (!bufs || !got || !want) return 1;
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        perror(path);
        return 1;
    }

    static const es_io_backend kinds[] = {ES_IO_URING, ES_IO_PREAD};
    int status = 0;
    for (int k = 0; k < 2; k++) {
        if ((k == 0 && !strcmp(which, "pread")) || (k == 1 && !strcmp(which, "uring"))) continue;
        es_io *io = NULL;
        es_io_params p = {.queue_depth = depth, .backend = kinds[k], .no_direct = buffered};
        if (es_io_open(path, &p, &io) != ES_OK) {
            printf("bench_io %s: skipped (%s)\n", k == 0 ? "io_uring" : "pread",
                   es_last_error());
            continue;
        }
        /* Check: the first and the last chunk against pread. */
        uint64_t size = es_io_file_bytes(io);
        uint64_t off[2] = {0, (size - 1) / block * block};
        memset(got, 0, 2 * block);
        double times[99];
        times[0] = pass(io, block, depth, bufs, off, got);
        for (int c = 0; c < 2 && times[0] >= 0; c++) {
            size_t n = size - off[c] < block ? (size_t)(size - off[c]) : block;
            if (pread(fd, want + (size_t)c * block, n, (off_t)off[c]) != (ssize_t)n ||
                memcmp(want + (size_t)c * block, got + (size_t)c * block, n)) {
                fprintf(stderr, "bench_io: %s: chunk at %llu differs from pread\n",
                        es_io_used_backend(io), (unsigned long long)off[c]);
                times[0] = -1;
            }
        }
        for (int r = 1; r < runs && times[0] >= 0; r++)
            if ((times[r] = pass(io, block, depth, bufs, NULL, NULL)) < 0) times[0] = -1;
        if (times[0] < 0) {
            status = 1;
            es_io_close(io);
            continue;
        }
        double mbs[99];
        for (int r = 0; r < runs; r++)
            mbs[r] = (double)size / times[r] / 1e6;
        qsort(mbs, (size_t)runs, sizeof(double), cmp_double);
        printf("bench_io %s: direct=%d block=%zu depth=%d file=%.1f MB runs=%d  MB/s=%.1f "
               "(min %.1f, max %.1f)\n",
               es_io_used_backend(io), es_io_direct(io), block, depth, (double)size / 1e6, runs,
               mbs[runs / 2], mbs[0], mbs[runs - 1]);
        es_io_close(io);
    }
    close(fd);
    if (big) es_free_big(bufs, buf_bytes);
    else free(bufs);
    free(got);
    free(want);
    return status;
}
