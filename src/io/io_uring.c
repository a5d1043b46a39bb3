/*
 * io_uring backend: one ring of queue_depth entries; each read is one IORING_OP_READ SQE with
 * the request slot in user_data, submitted at once (the loader submits one request at a time,
 * so batching would only add latency). Model: liburing's examples/io_uring-cp.c.
 *
 * DESIGN
 * - The ring is created disabled with IORING_SETUP_SINGLE_ISSUER and enabled at the first
 *   start: the kernel ties a single-issuer ring to the task that enables it, and es_io_open()
 *   may run on another thread than the loader. Kernels without SINGLE_ISSUER (< 6.0) reject the
 *   flags with EINVAL; then the ring is created plainly.
 * - Ring creation failing for any other reason (ENOSYS: no io_uring; EPERM: seccomp or
 *   io_uring_disabled; ENOMEM: locked-memory limit) is reported as ES_E_UNSUPPORTED, which
 *   es_io_open turns into the pread backend under ES_IO_AUTO.
 */
#include "io/io_impl.h"

#include "core/util.h"

#ifdef ES_HAVE_URING

#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct uring_be {
    struct io_uring ring;
    int enabled; /* io_uring_enable_rings done (only when created disabled) */
} uring_be;

es_status es_io_uring_init(es_io *io)
{
    uring_be *u = calloc(1, sizeof(*u));
    if (!u) return es_fail(ES_E_NOMEM, "io_uring: out of memory");
    unsigned entries = (unsigned)io->p.queue_depth;
    struct io_uring_params prm;
    memset(&prm, 0, sizeof(prm));
    prm.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_R_DISABLED;
    int ret = io_uring_queue_init_params(entries, &u->ring, &prm);
    if (ret == -EINVAL) { /* older kernel: no single-issuer rings */
        memset(&prm, 0, sizeof(prm));
        ret = io_uring_queue_init_params(entries, &u->ring, &prm);
        u->enabled = 1;
    }
    if (ret < 0) {
        free(u);
        return es_fail(ES_E_UNSUPPORTED, "io_uring: cannot create a ring: %s", strerror(-ret));
    }
    io->be = u;
    return ES_OK;
}

es_status es_io_uring_start(es_io *io, int slot, int fd, uint64_t off, size_t len, void *dst)
{
    uring_be *u = io->be;
    if (!u->enabled) {
        /* liburing 2.3 declares io_uring_enable_rings() but does not export it: call the
         * register syscall directly (it returns -1 and sets errno). */
        if (syscall(__NR_io_uring_register, u->ring.ring_fd, IORING_REGISTER_ENABLE_RINGS, NULL,
                    0) < 0)
            return es_fail(ES_E_IO, "io_uring: enable ring: %s", strerror(errno));
        u->enabled = 1;
    }
    /* At most queue_depth reads are in flight and the ring has that many entries, and each
     * SQE is submitted at once: a free SQE always exists. */
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    ES_ASSERT(sqe != NULL);
    io_uring_prep_read(sqe, fd, dst, (unsigned)len, off);
    io_uring_sqe_set_data64(sqe, (uint64_t)slot);
    int ret;
    while ((ret = io_uring_submit(&u->ring)) == -EINTR) {
    }
    if (ret < 0) return es_fail(ES_E_IO, "io_uring: submit: %s", strerror(-ret));
    ES_ASSERT(ret == 1);
    return ES_OK;
}

es_status es_io_uring_reap(es_io *io, int *slot, int64_t *res)
{
    uring_be *u = io->be;
    struct io_uring_cqe *cqe = NULL;
    int ret;
    while ((ret = io_uring_wait_cqe(&u->ring, &cqe)) == -EINTR) {
    }
    if (ret < 0) return es_fail(ES_E_IO, "io_uring: wait for a completion: %s", strerror(-ret));
    *slot = (int)io_uring_cqe_get_data64(cqe);
    *res = cqe->res;
    io_uring_cqe_seen(&u->ring, cqe);
    return ES_OK;
}

void es_io_uring_fini(es_io *io)
{
    uring_be *u = io->be;
    if (!u) return;
    io_uring_queue_exit(&u->ring);
    free(u);
    io->be = NULL;
}

#else /* built without liburing */

es_status es_io_uring_init(es_io *io)
{
    (void)io;
    return es_fail(ES_E_UNSUPPORTED, "io_uring: estream was built without liburing");
}
es_status es_io_uring_start(es_io *io, int slot, int fd, uint64_t off, size_t len, void *dst)
{
    (void)io, (void)slot, (void)fd, (void)off, (void)len, (void)dst;
    return es_fail(ES_E_UNSUPPORTED, "io_uring: not built");
}
es_status es_io_uring_reap(es_io *io, int *slot, int64_t *res)
{
    (void)io, (void)slot, (void)res;
    return es_fail(ES_E_UNSUPPORTED, "io_uring: not built");
}
void es_io_uring_fini(es_io *io) { (void)io; }

#endif
