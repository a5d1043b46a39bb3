/* Logging, clock, big allocations and resident-memory reading: the few OS touch points that
 * every module needs. */
#include "core/util.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

int es_log_level(void)
{
    static int level = -1;
    if (level < 0) {
        const char *s = getenv("ESTREAM_LOG");
        level = s && *s ? atoi(s) : ES_LOG_WARN;
    }
    return level;
}

_Static_assert((int)ES_LOG_LEVEL_WARN == (int)ES_LOG_WARN &&
                   (int)ES_LOG_LEVEL_INFO == (int)ES_LOG_INFO &&
                   (int)ES_LOG_LEVEL_DEBUG == (int)ES_LOG_DEBUG, "public and internal levels agree");

/* The log sink (es_log_set): read and written under the lock, so a line never goes to a
 * callback that is being replaced with a user pointer of another. */
static pthread_mutex_t sink_lock = PTHREAD_MUTEX_INITIALIZER;
static es_log_fn sink_cb;
static void *sink_user;

void es_log_set(es_log_fn cb, void *user)
{
    pthread_mutex_lock(&sink_lock);
    sink_cb = cb;
    sink_user = user;
    pthread_mutex_unlock(&sink_lock);
}

/* One finished line (no prefix, no newline) to the sink. */
static void emit_line(int level, const char *line)
{
    pthread_mutex_lock(&sink_lock);
    if (sink_cb)
        sink_cb(sink_user, level, line);
    else
        fprintf(stderr, "estream: %s\n", line);
    pthread_mutex_unlock(&sink_lock);
}

/* Lines logged while a hold is active (see es_log_hold in util.h). A line that does not fit
 * is dropped and counted. */
static _Thread_local struct {
    int depth;
    int dropped;
    size_t len;
    char buf[4096]; /* lines, each: level byte, text, NUL */
} held;

void es_log(int level, const char *fmt, ...)
{
    if (level > es_log_level()) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (held.depth == 0) {
        emit_line(level, line);
        return;
    }
    const size_t len = strlen(line) + 2;
    if (len <= sizeof(held.buf) - held.len) {
        held.buf[held.len] = (char)level;
        memcpy(held.buf + held.len + 1, line, len - 1);
        held.len += len;
    } else {
        held.dropped++;
    }
}

size_t es_log_hold(void)
{
    held.depth++;
    return held.len;
}

void es_log_release(size_t mark, int emit)
{
    if (held.depth <= 0) return;
    if (!emit && mark <= held.len) held.len = mark;
    if (--held.depth > 0) return;
    for (size_t i = 0; i < held.len;) {
        const char *text = held.buf + i + 1;
        emit_line(held.buf[i], text);
        i += strlen(text) + 2;
    }
    if (held.dropped) {
        char line[64];
        snprintf(line, sizeof(line), "(%d more log lines dropped)", held.dropped);
        emit_line(ES_LOG_WARN, line);
    }
    held.len = 0;
    held.dropped = 0;
}

uint64_t es_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#define HUGE_BYTES ((size_t)2 << 20)

/* Bytes held by es_alloc_big, as reserved (a huge-page allocation may become resident whole). */
static _Atomic size_t big_live;

size_t es_big_reserved_bytes(size_t bytes)
{
    if (bytes == 0) bytes = 1;
    return bytes < HUGE_BYTES ? es_align_up(bytes, 64) : es_align_up(bytes, HUGE_BYTES);
}

void *es_alloc_big(size_t bytes)
{
    if (bytes == 0) bytes = 1;
    void *p = NULL;
    if (bytes < HUGE_BYTES) {
        if (posix_memalign(&p, 64, es_align_up(bytes, 64)) != 0) return NULL;
        memset(p, 0, bytes);
    } else {
        /* mmap gives zeroed memory; the hint asks for 2 MiB pages where THP is in madvise mode */
        size_t len = es_align_up(bytes, HUGE_BYTES);
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return NULL;
        madvise(p, len, MADV_HUGEPAGE);
    }
    /* relaxed: a statistic read by the thread that sets a session up, not a synchronisation */
    atomic_fetch_add_explicit(&big_live, es_big_reserved_bytes(bytes), memory_order_relaxed);
    return p;
}

void es_free_big(void *p, size_t bytes)
{
    if (!p) return;
    if (bytes == 0) bytes = 1;
    if (bytes < HUGE_BYTES)
        free(p);
    else
        munmap(p, es_align_up(bytes, HUGE_BYTES));
    atomic_fetch_sub_explicit(&big_live, es_big_reserved_bytes(bytes), memory_order_relaxed);
}

size_t es_big_bytes_live(void) { return atomic_load_explicit(&big_live, memory_order_relaxed); }

es_status es_peak_rss_reset(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return es_fail(ES_E_UNSUPPORTED, "cannot reset the peak RSS: /proc/self/clear_refs");
    const int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok ? ES_OK
                                : es_fail(ES_E_UNSUPPORTED, "the kernel refused to reset the peak RSS");
}

size_t es_peak_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "VmHWM:", 6) == 0) {
            kb = strtoull(line + 6, NULL, 10);
            break;
        }
    fclose(f);
    return kb * 1024;
}
