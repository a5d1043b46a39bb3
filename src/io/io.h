/*
 * Reads from a file (or the parts of a split model) with a bounded number of reads in flight:
 * the layer the expert loader sits on (docs/design.md §5-6: one group of experts = one
 * contiguous extent = one request).
 *
 * DESIGN
 * - Two backends behind one API: io_uring (one ring, one SQE per read, the request slot in
 *   user_data) and pread (one worker thread per queue slot, a FIFO of jobs and a completion FIFO
 *   under one mutex). ES_IO_AUTO takes io_uring when a ring can be created, else pread.
 * - Everything that is not "issue one read, get one result" lives in the common part (io.c),
 *   so both backends behave the same: resuming short reads, end of file, the O_DIRECT fallback,
 *   fault injection, the rate limit, statistics.
 * - Reads bypass the page cache (O_DIRECT) unless asked not to or the file system refuses it
 *   (EINVAL at open, or EINVAL from a direct read before any direct read succeeded): then the
 *   same requests go through a second, buffered descriptor. A resumed direct read restarts at
 *   the last 4 KiB boundary at or below what arrived (re-reading at most 4095 bytes) when that
 *   moves forward; otherwise (less than one aligned block arrived) the remainder is read
 *   through the buffered descriptor, which has no alignment rule.
 * - A request owns its slot and its buffer from es_io_submit() until es_io_wait() returns its
 *   tag; at most one read per request is in flight at a time.
 * - Wake-ups (es_io_wake): one atomic "wake pending" flag in the common part is the truth; the
 *   backend only interrupts a blocked wait (io_uring: an 8-byte read of an eventfd kept armed
 *   in the ring while the loader waits; pread: a flag under the backend's mutex and a signal of
 *   its completion condvar). A notification that arrives after its wake was already returned
 *   finds the flag clear and is ignored, so a wait never returns a wake no es_io_wake() asked
 *   for. The injected delay and the rate limit hold a result back by waiting on the backend
 *   with a deadline (never by sleeping), so a wake interrupts them too.
 *
 * Threading: es_io_open() may run on any thread. es_io_wake() may be called from any thread
 * while the es_io is open (between es_io_open() returning and es_io_close() starting), also
 * concurrently with the calls below. Every other call on one es_io (submit, wait, in_flight,
 * get_stats, direct, close) comes from one thread at a time, in practice the loader thread;
 * with io_uring the first thread that submits becomes the ring's only submitter
 * (IORING_SETUP_SINGLE_ISSUER, enabled at the first submit), so later submits, waits and the
 * final close belong on that thread (a wait may re-arm the wake read, which is a submit).
 * es_io_used_backend, es_io_file_bytes and es_io_alignment read values fixed at open and may be
 * called from any thread.
 */
#ifndef ES_IO_H
#define ES_IO_H

#include "estream.h"

#include <stddef.h>
#include <stdint.h>

typedef struct es_io es_io;

/* es_io_backend (ES_IO_AUTO, ES_IO_URING, ES_IO_PREAD) is the public enum of estream.h. */

typedef struct es_io_params {
    int queue_depth;          /* reads in flight, 1..64 (0 = 4) */
    double limit_bytes_per_s; /* 0 = unlimited; else reads are paced as if one device served
                                 them at this rate (emulates slow storage, e.g. a phone's): a
                                 read of n bytes completes no sooner than n / rate after both
                                 its start and the previous read's paced completion */
    es_io_backend backend;    /* AUTO: io_uring if a ring can be created (ENOSYS/EPERM from
                                 seccomp etc. -> pread), else pread. URING when no ring can be
                                 made: ES_E_UNSUPPORTED with the reason in es_last_error() */
    int no_direct;            /* 1: do not use O_DIRECT; 0: O_DIRECT, falling back to buffered
                                 reads if the file system refuses it (EINVAL at open or at the
                                 first read) */
    /* fault injection for tests (0 = off); the same for both backends: */
    int fault_eio_at;         /* the n-th read request (1-based, counting submits since open)
                                 completes with EIO */
    size_t fault_short_bytes; /* every read returns at most this many bytes (exercises resume).
                                 Counts are taken literally, also with O_DIRECT: a count that is
                                 not a multiple of 4096 sends the rest of that request through
                                 the buffered descriptor (see DESIGN above) */
    int fault_delay_us;       /* each read (each resumed part too) completes no sooner than
                                 this after it was issued */
    int fault_direct_einval;  /* 1: direct reads fail with EINVAL until the fallback switches
                                 to buffered reads (a file system that accepts O_DIRECT at open
                                 and refuses it at read) */
} es_io_params;

/* Opens path for reading. p may be NULL (all defaults). On success *out owns two descriptors
 * (direct and buffered) and the backend (ring or worker threads). Errors: ES_E_INVAL (bad
 * params), ES_E_IO (open/fstat failed), ES_E_UNSUPPORTED (ES_IO_URING asked for and no ring
 * can be created, or the build has no liburing), ES_E_NOMEM; *out is NULL then. */
es_status es_io_open(const char *path, const es_io_params *p, es_io **out);
/* The same over n_files files (1..ES_IO_MAX_FILES: a model split in parts), read with
 * es_io_submit_file(); one queue and one backend for all. O_DIRECT is used for all of them or,
 * if the file system refuses it for one, for none. */
#define ES_IO_MAX_FILES 4096
es_status es_io_open_files(const char *const *paths, int n_files, const es_io_params *p,
                           es_io **out);

/* NULL is a no-op. Reads still in flight are waited for (a read of a regular file cannot be
 * interrupted halfway), so no buffer is written after close returns; their results are
 * dropped, and so is a pending wake. Call it on the thread that submits, once no other thread
 * can still call es_io_wake() on io. */
void es_io_close(es_io *io);

const char *es_io_used_backend(const es_io *io); /* "io_uring" or "pread" */
int es_io_direct(const es_io *io); /* 1 if reads bypass the page cache (O_DIRECT); may turn 0
                                      after the first read (the EINVAL fallback) */
uint64_t es_io_file_bytes(const es_io *io); /* size at open (fstat), of file 0 */
int es_io_file_fd(const es_io *io, int file); /* a descriptor of file (buffered), for checks */
int es_io_queue_depth(const es_io *io);     /* the depth in use (params' 0 -> 4) */
size_t es_io_alignment(void); /* 4096: offsets, lengths and buffers of every request */

#define ES_IO_WAKE_TAG UINT64_MAX /* the tag es_io_wait() returns for a wake-up */

/* Queues a read of len bytes at file offset off into dst; completes when `need` bytes
 * (1 <= need <= len) have arrived or the read fails. off, len and dst must be aligned to
 * es_io_alignment() (ES_E_INVAL otherwise, whatever the direct mode). Reading past the end of
 * file is fine as long as the first `need` bytes exist (an O_DIRECT read of a file's aligned
 * tail is shorter than len). Bytes of dst past those that arrived are unspecified.
 * At most queue_depth requests may be in flight (ES_E_INVAL beyond). tag comes back with the
 * completion; ES_IO_WAKE_TAG is reserved for wake-ups (ES_E_INVAL). ES_E_IO if the backend
 * cannot take the read (ring submit failed). */
es_status es_io_submit(es_io *io, uint64_t off, size_t len, size_t need, void *dst,
                       uint64_t tag);
/* es_io_submit() of file `file` (0 .. n_files - 1 of es_io_open_files; ES_E_INVAL otherwise):
 * es_io_submit is file 0. */
es_status es_io_submit_file(es_io *io, int file, uint64_t off, size_t len, size_t need,
                            void *dst, uint64_t tag);

/* Waits for one completion or a wake-up (blocks while requests are in flight).
 * A completion: *tag is the request's tag; *req_status is ES_OK, or ES_E_IO with
 * es_last_error() describing it ("read of N bytes at offset O: Input/output error", "read of N
 * bytes at offset O: file ends at B, M bytes short"). Short reads are resumed internally until
 * `need` bytes arrived.
 * A wake-up (see es_io_wake): *tag is ES_IO_WAKE_TAG and *req_status ES_OK; no request ended and
 * es_io_in_flight() is unchanged. A completion that is ready (its read is done and its injected
 * delay or pacing has passed) is returned before a pending wake, so a stream of wakes cannot
 * starve the reads; the wake stays pending and the first wait that would block returns it.
 * With no read in flight: returns the wake at once if one is pending, else ES_E_INVAL (a loader
 * with nothing to read waits on its own condition variable instead).
 * Returns ES_E_IO (and no completion) only if waiting itself failed (the ring broke). */
es_status es_io_wait(es_io *io, uint64_t *tag, es_status *req_status);

/* Thread-safe: callable from any thread while io is open (not from a signal handler). Makes one
 * es_io_wait() return early with *tag = ES_IO_WAKE_TAG and *req_status = ES_OK: the one blocked
 * now, or else the next one (after any completions that are already ready; see es_io_wait).
 * Wakes do not accumulate: the calls made before a wait returns a wake are all answered by that
 * one return. A wake is returned only after an es_io_wake() call, but it carries no state of its
 * own: the caller treats it as "re-check your state" (what it was woken for may already have
 * been handled after an earlier return). A wake never loses, delays past its due time or
 * reorders a read completion, and never counts in the statistics. Memory order: what the calling
 * thread wrote before es_io_wake() is visible to the thread whose es_io_wait() returns that
 * wake. Cost: one atomic exchange, plus a write() or a mutex and signal when no wake was pending
 * already. */
void es_io_wake(es_io *io);

int es_io_in_flight(const es_io *io); /* requests submitted and not yet returned by wait */

/* Statistics since open. bytes: bytes that arrived (a resumed direct read may count up to
 * 4095 bytes twice); busy_s: seconds with >= 1 request in flight; requests: successful
 * submits; reads: reads issued to the backend (requests plus resumed parts and retries).
 * Wake-ups count nowhere (the io_uring backend's eventfd read is not a read). */
typedef struct es_io_stats {
    uint64_t bytes;
    double busy_s;
    uint64_t requests;
    uint64_t reads;
} es_io_stats;
void es_io_get_stats(const es_io *io, es_io_stats *out);

#endif
