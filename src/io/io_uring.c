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
 * - Wake-ups: an eventfd that es_io_wake() write()s from any thread (notify never touches the
 *   ring, which only its single issuer may submit to). Before a reap blocks, the loader arms an
 *   8-byte IORING_OP_READ of that eventfd with user_data WAKE_UD; its completion is reported as
 *   ES_IO_SLOT_WAKE and the next blocking reap re-arms it. Writes made while it is not armed add
 *   up in the eventfd's counter and complete the next arming at once; one read drains them all
 *   (not EFD_SEMAPHORE). The eventfd is blocking: a read of an O_NONBLOCK file fails with EAGAIN
 *   in the ring instead of waiting; its writes cannot block (the counter stays tiny).
 * - The armed read is not a read of the file: it is not in io->ops_in_flight and not in the
 *   statistics. The ring holds at most queue_depth file reads plus this one: its SQ is empty
 *   whenever the loader arms (each SQE is submitted at once) and its CQ has 2 * queue_depth
 *   entries.
 * - fini with the read armed writes the eventfd and reaps that completion before the ring and
 *   the 8-byte target are freed, so the kernel never writes into freed memory.
 */
#include "io/io_impl.h"

#include "core/util.h"

#ifdef ES_HAVE_URING

#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

/* user_data of the eventfd read. Slots are 0..63, and liburing keeps UINT64_MAX
 * (LIBURING_UDATA_TIMEOUT) for the timeout SQEs it adds on kernels without IORING_FEAT_EXT_ARG. */
#define WAKE_UD (UINT64_MAX - 1)

typedef struct uring_be {
    struct io_uring ring;
    int enabled;       /* io_uring_enable_rings done (only when created disabled) */
    int wake_fd;       /* eventfd: es_io_wake writes, the ring reads */
    int wake_armed;    /* the eventfd read is in the ring (loader thread only) */
    uint64_t wake_val; /* target of the eventfd read; written by the kernel while armed */
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
    u->wake_fd = eventfd(0, EFD_CLOEXEC);
    if (u->wake_fd < 0) {
        int err = errno;
        io_uring_queue_exit(&u->ring);
        free(u);
        return es_fail(err == ENOMEM ? ES_E_NOMEM : ES_E_IO, "io_uring: eventfd: %s",
                       strerror(err));
    }
    io->be = u;
    return ES_OK;
}

/* Puts the eventfd read into the ring (loader thread: the ring's single issuer). */
static es_status arm_wake(uring_be *u)
{
    ES_ASSERT(u->enabled); /* a read was started before any wait blocks */
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    ES_ASSERT(sqe != NULL); /* the SQ is empty between calls (see DESIGN) */
    io_uring_prep_read(sqe, u->wake_fd, &u->wake_val, sizeof(u->wake_val), 0);
    io_uring_sqe_set_data64(sqe, WAKE_UD);
    int ret;
    while ((ret = io_uring_submit(&u->ring)) == -EINTR) {
    }
    if (ret < 0) return es_fail(ES_E_IO, "io_uring: submit (wake read): %s", strerror(-ret));
    ES_ASSERT(ret == 1);
    u->wake_armed = 1;
    return ES_OK;
}

void es_io_uring_notify(es_io *io)
{
    uring_be *u = io->be;
    uint64_t one = 1;
    ssize_t n;
    while ((n = write(u->wake_fd, &one, sizeof(one))) < 0 && errno == EINTR) {
    }
    /* 8 bytes to a valid eventfd far from its counter's limit cannot fail: a failure is a bug
     * (a wake after close, or a clobbered descriptor). */
    ES_ASSERT(n == (ssize_t)sizeof(one));
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

es_status es_io_uring_reap(es_io *io, uint64_t deadline_ns, int *slot, int64_t *res)
{
    uring_be *u = io->be;
    struct io_uring_cqe *cqe = NULL;
    int ret;
    for (;;) {
        uint64_t left = 0; /* ns to the deadline; 0: do not block; UINT64_MAX: no deadline */
        if (deadline_ns == ES_IO_NO_DEADLINE) {
            left = UINT64_MAX;
        } else if (deadline_ns > 0) {
            uint64_t now = es_now_ns();
            if (deadline_ns > now) left = deadline_ns - now;
        }
        if (left == 0) {
            ret = io_uring_peek_cqe(&u->ring, &cqe); /* no syscall unless the CQ overflowed */
            if (ret == -EAGAIN) {
                *slot = ES_IO_SLOT_NONE;
                return ES_OK;
            }
        } else {
            if (!u->wake_armed) ES_TRY(arm_wake(u)); /* else a wake could not end the wait */
            if (left == UINT64_MAX) {
                ret = io_uring_wait_cqe(&u->ring, &cqe);
            } else {
                struct __kernel_timespec ts = {.tv_sec = (long long)(left / 1000000000u),
                                               .tv_nsec = (long long)(left % 1000000000u)};
                ret = io_uring_wait_cqe_timeout(&u->ring, &cqe, &ts);
                if (ret == -ETIME) {
                    *slot = ES_IO_SLOT_NONE;
                    return ES_OK;
                }
            }
        }
        if (ret == -EINTR) continue;
        if (ret < 0)
            return es_fail(ES_E_IO, "io_uring: wait for a completion: %s", strerror(-ret));
        break;
    }
    uint64_t ud = io_uring_cqe_get_data64(cqe);
    int64_t r = cqe->res;
    io_uring_cqe_seen(&u->ring, cqe);
    if (ud == WAKE_UD) {
        u->wake_armed = 0;
        /* A failed eventfd read would fail again at each re-arm: report it rather than spin. */
        if (r != (int64_t)sizeof(u->wake_val) && r != -EINTR)
            return es_fail(ES_E_IO, "io_uring: read of the wake eventfd: %s",
                           r < 0 ? strerror((int)-r) : "short read");
        *slot = ES_IO_SLOT_WAKE;
        return ES_OK;
    }
    ES_ASSERT(ud < ES_IO_MAX_DEPTH);
    *slot = (int)ud;
    *res = r;
    return ES_OK;
}

void es_io_uring_fini(es_io *io)
{
    uring_be *u = io->be;
    if (!u) return;
    if (u->wake_armed) {
        /* The armed read would write u->wake_val: complete it (no one else writes the
         * eventfd now) and reap it. Other completions (none unless es_io_close gave up on a
         * broken ring) are dropped. */
        es_io_uring_notify(io);
        while (u->wake_armed) {
            struct io_uring_cqe *cqe = NULL;
            int ret = io_uring_wait_cqe(&u->ring, &cqe);
            if (ret == -EINTR) continue;
            if (ret < 0) break;
            if (io_uring_cqe_get_data64(cqe) == WAKE_UD) u->wake_armed = 0;
            io_uring_cqe_seen(&u->ring, cqe);
        }
    }
    io_uring_queue_exit(&u->ring);
    close(u->wake_fd);
    if (u->wake_armed) {
        /* The ring broke with the read still armed: the kernel may yet complete it, so its
         * target must stay valid. Leak the few bytes rather than risk a write into freed
         * memory. */
        es_log(ES_LOG_WARN, "io_uring: close: the wake read is still armed; its state is kept");
        io->be = NULL;
        return;
    }
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
es_status es_io_uring_reap(es_io *io, uint64_t deadline_ns, int *slot, int64_t *res)
{
    (void)io, (void)deadline_ns, (void)slot, (void)res;
    return es_fail(ES_E_UNSUPPORTED, "io_uring: not built");
}
void es_io_uring_notify(es_io *io) { (void)io; }
void es_io_uring_fini(es_io *io) { (void)io; }

#endif
