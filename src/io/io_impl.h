/*
 * Internals shared by io.c (common part) and the two backends (io_uring.c, io_pread.c).
 *
 * A backend knows nothing about requests, resumes or faults: it issues one read (fd, offset,
 * length, buffer) for a slot 0..depth-1 and later reports (slot, result) with result = bytes
 * read or -errno. At most one read per slot is in flight. All backend calls come from the thread
 * that calls es_io_submit/es_io_wait, except notify, which es_io_wake() calls from any thread.
 *
 * reap(io, deadline_ns, ...) blocks until a result, a notification or deadline_ns (es_now_ns()
 * time; 0 or any past time: do not block, UINT64_MAX: no deadline), and reports which in *slot:
 * 0..depth-1 with *res, ES_IO_SLOT_WAKE (a notify arrived, possibly one whose wake io.c has
 * already returned: io.c's flag decides), or ES_IO_SLOT_NONE (deadline reached). Results and
 * notifications may come in either order (io.c polls for results again before it returns a
 * wake). Only read results count in io->ops_in_flight.
 */
#ifndef ES_IO_IMPL_H
#define ES_IO_IMPL_H

#include "io/io.h"

#include <stdatomic.h>
#include <stdint.h>

#define ES_IO_ALIGN ((size_t)4096)
#define ES_IO_MAX_DEPTH 64
#define ES_IO_MAX_OP ((size_t)1 << 30) /* longest single read (pread caps near 2 GiB) */
#define ES_IO_SLOT_WAKE (-1) /* reap: a notification (es_io_wake) arrived */
#define ES_IO_SLOT_NONE (-2) /* reap: the deadline passed with nothing to report */
#define ES_IO_NO_DEADLINE UINT64_MAX

/* One request: a slot of the queue. */
typedef struct io_req {
    int busy;           /* submitted, not yet returned by es_io_wait */
    int inject_eio;     /* fault_eio_at picked this request */
    int file;           /* which of the files (es_io_open_files) */
    uint64_t off;       /* file offset of dst[0] */
    size_t len, need;
    uint8_t *dst;
    uint64_t tag;
    size_t done;        /* dst[0..done) has arrived */
    size_t op_from;     /* the read in flight covers dst[op_from .. op_from + op_len) */
    size_t op_len;
    int op_direct;      /* the read in flight uses the O_DIRECT descriptor */
    uint64_t op_start_ns;
    int64_t res;        /* reaped, held result (faults applied): bytes or -errno */
    uint64_t due_ns;    /* the held result is returned no sooner (fault_delay_us, pacing) */
} io_req;

struct es_io {
    es_io_params p;     /* validated copy; p.queue_depth is the depth in use */
    int n_files;
    int *fd_direct;     /* [n_files], -1 when not direct */
    int *fd_buf;        /* [n_files], always open: buffered reads and unaligned remainders */
    int direct;         /* new reads go to fd_direct */
    int direct_proven;  /* a direct read has succeeded: EINVAL is a real error from now on */
    uint64_t *file_bytes; /* [n_files] */
    es_io_backend kind; /* ES_IO_URING or ES_IO_PREAD */
    void *be;           /* backend state */
    io_req req[ES_IO_MAX_DEPTH];
    int in_flight;      /* busy requests = ops_in_flight + n_held at each step of es_io_wait */
    int ops_in_flight;  /* backend reads not yet reaped (<= in_flight) */
    int held[ES_IO_MAX_DEPTH]; /* FIFO of slots whose result is reaped but not yet due */
    int held_head, n_held;
    /* 1 while a wake is pending (set by es_io_wake on any thread, cleared by es_io_wait). Both
     * sides exchange it with acq_rel, so a waiter that takes the wake sees what the wakers
     * wrote before waking. Rarely written (once per wake, not per read), hence not padded to
     * its own cache line: es_io is calloc'd, which does not promise 64-byte alignment. */
    atomic_int wake_pending;
    uint64_t n_submits; /* for fault_eio_at */
    uint64_t pace_free_ns; /* rate limit: when the emulated device is free again */
    uint64_t busy_since_ns;
    es_io_stats st;
};

/* io_uring.c; without ES_HAVE_URING, init returns ES_E_UNSUPPORTED. */
es_status es_io_uring_init(es_io *io);
es_status es_io_uring_start(es_io *io, int slot, int fd, uint64_t off, size_t len, void *dst);
es_status es_io_uring_reap(es_io *io, uint64_t deadline_ns, int *slot, int64_t *res);
void es_io_uring_notify(es_io *io); /* any thread: writes the wake eventfd */
void es_io_uring_fini(es_io *io); /* reads in flight have been reaped by the caller */

/* io_pread.c */
es_status es_io_pread_init(es_io *io);
es_status es_io_pread_start(es_io *io, int slot, int fd, uint64_t off, size_t len, void *dst);
es_status es_io_pread_reap(es_io *io, uint64_t deadline_ns, int *slot, int64_t *res);
void es_io_pread_notify(es_io *io); /* any thread: flag under the mutex, signal done_cv */
void es_io_pread_fini(es_io *io); /* joins workers after their current read; drops queued ones */

#endif
