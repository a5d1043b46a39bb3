/* Small internal helpers shared by every module: assertions, error returns, min/max. */
#ifndef ES_UTIL_H
#define ES_UTIL_H

#include "estream.h"
#include "estream_tools.h" /* the tree's own helpers (not installed, not in the ABI) */
#include <stddef.h>
#include <stdint.h>

/* Always-on assertion for broken invariants (our bugs, never bad input). */
#define ES_ASSERT(c)                                                                               \
    do {                                                                                           \
        if (__builtin_expect(!(c), 0)) es_abort(__FILE__, __LINE__, #c);                           \
    } while (0)
#ifdef ES_DEBUG
#define ES_DASSERT(c) ES_ASSERT(c)
#else
#define ES_DASSERT(c) ((void)0)
#endif
/* Only in functions with nothing to clean up. */
#define ES_TRY(e)                                                                                  \
    do {                                                                                           \
        es_status st_ = (e);                                                                       \
        if (st_ != ES_OK) return st_;                                                              \
    } while (0)
#define ES_LEN(a) (sizeof(a) / sizeof((a)[0]))

_Noreturn void es_abort(const char *file, int line, const char *cond);

/* Records a printf-style message for es_last_error() and returns code. */
es_status es_fail(es_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Logging to the sink es_log_set chose (default stderr). Level from ESTREAM_LOG (0 quiet .. 3
 * debug, default 1 = warnings). */
enum { ES_LOG_WARN = 1, ES_LOG_INFO = 2, ES_LOG_DEBUG = 3 };
void es_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int es_log_level(void);
/* Holding log lines (this thread only): between es_log_hold() and the matching
 * es_log_release(mark, emit), es_log() keeps its lines instead of printing them. release with
 * emit = false drops the lines logged since that hold (an operation that failed: its error
 * message is the one line the user sees); with emit = true they stay, and are printed when the
 * outermost hold is released. Holds nest. */
size_t es_log_hold(void);
void es_log_release(size_t mark, int emit);

static inline int es_min_int(int a, int b) { return a < b ? a : b; }
static inline int es_max_int(int a, int b) { return a > b ? a : b; }
static inline size_t es_min_size(size_t a, size_t b) { return a < b ? a : b; }
static inline size_t es_max_size(size_t a, size_t b) { return a > b ? a : b; }
static inline size_t es_align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* Monotonic clock in nanoseconds. */
uint64_t es_now_ns(void);

/* Large aligned allocation (64-byte aligned; 2 MiB aligned and MADV_HUGEPAGE when big, since
 * first touch of 4 KiB pages is slow on our VMs). Zeroed. Free with es_free_big(p, bytes). */
void *es_alloc_big(size_t bytes);
void es_free_big(void *p, size_t bytes);
/* Bytes currently held by es_alloc_big in the whole process, as reserved (rounded up to 64 B,
 * or to 2 MiB for huge-page allocations, which may become resident whole). */
size_t es_big_bytes_live(void);
/* What es_alloc_big(bytes) reserves: bytes rounded up as above (what a budget must count). */
size_t es_big_reserved_bytes(size_t bytes);

/* es_peak_rss_bytes() and es_peak_rss_reset() (log.c) are public: include/estream.h. */

#endif
