/*
 * Internals shared by io.c (common part) and the two backends (io_uring.c, io_pread.c).
 *
 * A backend knows nothing about requests, resumes or faults: it issues one read (fd, offset,
 * length, buffer) for a slot 0..depth-1 and later reports (slot, result) with result = bytes
 * read or -errno. At most one read per slot is in flight. All backend calls come from the thread
 * that calls es_io_submit/es_io_wait.
 */
#ifndef ES_IO_IMPL_H
#define ES_IO_IMPL_H

#include "io/io.h"

#include <stdint.h>

#define ES_IO_ALIGN ((size_t)4096)
#define ES_IO_MAX_DEPTH 64
#define ES_IO_MAX_OP ((size_t)1 << 30) /* longest single read (pread caps near 2 GiB) */

/* One request: a slot of the queue. */
typedef struct io_req {
    int busy;           /* submitted, not yet returned by es_io_wait */
    int inject_eio;     /* fault_eio_at picked this request */
    uint64_t off;       /* file offset of dst[0] */
    size_t len, need;
    uint8_t *dst;
    uint64_t tag;
    size_t done;        /* dst[0..done) has arrived */
    size_t op_from;     /* the read in flight covers dst[op_from .. op_from + op_len) */
    size_t op_len;
    int op_direct;      /* the read in flight uses the O_DIRECT descriptor */
    uint64_t op_start_ns;
} io_req;

struct es_io {
    es_io_params p;     /* validated copy; p.queue_depth is the depth in use */
    int fd_direct;      /* -1 when not direct */
    int fd_buf;         /* always open: buffered reads and unaligned remainders */
    int direct;         /* new reads go to fd_direct */
    int direct_proven;  /* a direct read has succeeded: EINVAL is a real error from now on */
    uint64_t file_bytes;
    es_io_backend kind; /* ES_IO_URING or ES_IO_PREAD */
    void *be;           /* backend state */
    io_req req[ES_IO_MAX_DEPTH];
    int in_flight;      /* busy requests */
    int ops_in_flight;  /* backend reads not yet reaped (<= in_flight) */
    uint64_t n_submits; /* for fault_eio_at */
    uint64_t pace_free_ns; /* rate limit: when the emulated device is free again */
    uint64_t busy_since_ns;
    es_io_stats st;
};

/* io_uring.c; without ES_HAVE_URING, init returns ES_E_UNSUPPORTED. */
es_status es_io_uring_init(es_io *io);
es_status es_io_uring_start(es_io *io, int slot, int fd, uint64_t off, size_t len, void *dst);
es_status es_io_uring_reap(es_io *io, int *slot, int64_t *res); /* blocks for one result */
void es_io_uring_fini(es_io *io); /* reads in flight have been reaped by the caller */

/* io_pread.c */
es_status es_io_pread_init(es_io *io);
es_status es_io_pread_start(es_io *io, int slot, int fd, uint64_t off, size_t len, void *dst);
es_status es_io_pread_reap(es_io *io, int *slot, int64_t *res);
void es_io_pread_fini(es_io *io); /* joins workers after their current read; drops queued ones */

#endif
