/*
 * The common part of the I/O layer: open (descriptors, O_DIRECT probe), backend choice, request
 * slots, resuming short reads, end of file, the O_DIRECT fallback, fault injection, the rate
 * limit and statistics. The backends (io_uring.c, io_pread.c) only issue and reap single reads.
 *
 * DESIGN
 * - A request is one slot; it has at most one backend read in flight. es_io_wait() reaps raw
 *   results, holds each in a FIFO until it is due (injected delay, pacing), then either
 *   finishes the request (returns it) or issues its next part, so a wait returns exactly one
 *   request and never reorders a request's parts. Results leave the FIFO in the order they
 *   were reaped, as when the loader slept on each in turn.
 * - Holding instead of sleeping lets a wait block on the backend with the head's due time as
 *   deadline, so a wake (es_io_wake) interrupts an emulated slow read as it does a real one.
 *   Order of a wait: a due held result; else a result the backend has ready (taken without
 *   blocking, held); else a pending wake; else block until a result, a notification or the
 *   head's due time. Completions first, so a stream of wakes cannot starve the reads.
 * - Resume rule (io.h): buffered reads resume at the first missing byte. A direct read resumes
 *   at the last 4 KiB boundary at or below it if that is past where the previous part started
 *   (progress is guaranteed), else the rest of the request goes through the buffered
 *   descriptor. With off, len and dst aligned, every direct part stays aligned.
 * - Faults and pacing are applied to raw results here, before anything else looks at them, so
 *   the resume, EOF and error paths see exactly what a real short/failed/slow read would give.
 */
#include "io/io_impl.h"

#include "core/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

size_t es_io_alignment(void) { return ES_IO_ALIGN; }

const char *es_io_backend_name(es_io_backend b)
{
    return b == ES_IO_URING ? "io_uring" : b == ES_IO_PREAD ? "pread" : "auto";
}

const char *es_io_used_backend(const es_io *io)
{
    return io->kind == ES_IO_URING ? "io_uring" : "pread";
}
int es_io_direct(const es_io *io) { return io->direct; }
uint64_t es_io_file_bytes(const es_io *io) { return io->file_bytes[0]; }
int es_io_queue_depth(const es_io *io) { return io->p.queue_depth; }
int es_io_in_flight(const es_io *io) { return io->in_flight; }

void es_io_get_stats(const es_io *io, es_io_stats *out)
{
    *out = io->st;
    if (io->in_flight > 0) /* count the busy period in progress too */
        out->busy_s += (double)(es_now_ns() - io->busy_since_ns) * 1e-9;
}

int es_io_file_fd(const es_io *io, int file)
{
    return file >= 0 && file < io->n_files ? io->fd_buf[file] : -1;
}

static es_status be_start(es_io *io, int slot, int fd, uint64_t off, size_t len, void *dst)
{
    return io->kind == ES_IO_URING ? es_io_uring_start(io, slot, fd, off, len, dst)
                                   : es_io_pread_start(io, slot, fd, off, len, dst);
}

static es_status be_reap(es_io *io, uint64_t deadline_ns, int *slot, int64_t *res)
{
    return io->kind == ES_IO_URING ? es_io_uring_reap(io, deadline_ns, slot, res)
                                   : es_io_pread_reap(io, deadline_ns, slot, res);
}

/* Issues the part of request r that starts at dst[from], on the direct descriptor or not. */
static es_status issue(es_io *io, int slot, size_t from, int direct)
{
    io_req *r = &io->req[slot];
    size_t n = es_min_size(r->len - from, ES_IO_MAX_OP);
    size_t cap = io->p.fault_short_bytes;
    if (cap) /* no point asking for more than the fault lets through (aligned when direct) */
        n = es_min_size(n, direct ? es_align_up(cap, ES_IO_ALIGN) : cap);
    r->op_from = from;
    r->op_len = n;
    r->op_direct = direct;
    r->op_start_ns = es_now_ns();
    es_status st = be_start(io, slot, direct ? io->fd_direct[r->file] : io->fd_buf[r->file],
                            r->off + from, n, r->dst + from);
    if (st == ES_OK) {
        io->ops_in_flight++;
        io->st.reads++;
    }
    return st;
}

es_status es_io_open(const char *path, const es_io_params *p, es_io **out)
{
    return es_io_open_files(&path, 1, p, out);
}

es_status es_io_open_files(const char *const *paths, int n_files, const es_io_params *p,
                           es_io **out)
{
    *out = NULL;
    es_io_params q = {0};
    if (p) q = *p;
    if (q.queue_depth == 0) q.queue_depth = 4;
    if (n_files < 1 || n_files > ES_IO_MAX_FILES)
        return es_fail(ES_E_INVAL, "io: %d files, not 1..%d", n_files, ES_IO_MAX_FILES);
    if (q.queue_depth < 1 || q.queue_depth > ES_IO_MAX_DEPTH)
        return es_fail(ES_E_INVAL, "io: queue depth %d is outside 1..%d", q.queue_depth,
                       ES_IO_MAX_DEPTH);
    if (!(q.limit_bytes_per_s >= 0)) /* also refuses NaN */
        return es_fail(ES_E_INVAL, "io: rate limit must be >= 0 bytes/s");
    if (q.backend != ES_IO_AUTO && q.backend != ES_IO_URING && q.backend != ES_IO_PREAD)
        return es_fail(ES_E_INVAL, "io: unknown backend %d", (int)q.backend);
    if (q.fault_eio_at < 0 || q.fault_delay_us < 0)
        return es_fail(ES_E_INVAL, "io: negative fault setting");

    es_status st = ES_OK;
    es_io *io = calloc(1, sizeof(*io));
    if (!io) return es_fail(ES_E_NOMEM, "io: out of memory opening %s", paths[0]);
    io->p = q;
    atomic_init(&io->wake_pending, 0);
    io->kind = ES_IO_PREAD;
    io->fd_direct = malloc(sizeof(int) * (size_t)n_files);
    io->fd_buf = malloc(sizeof(int) * (size_t)n_files);
    io->file_bytes = calloc((size_t)n_files, sizeof(uint64_t));
    if (!io->fd_direct || !io->fd_buf || !io->file_bytes) {
        free(io->fd_direct);
        free(io->fd_buf);
        free(io->file_bytes);
        free(io);
        return es_fail(ES_E_NOMEM, "io: out of memory opening %s", paths[0]);
    }
    for (int f = 0; f < n_files; f++) io->fd_direct[f] = io->fd_buf[f] = -1;
    io->n_files = n_files;
    io->direct = !q.no_direct;
    for (int f = 0; f < n_files; f++) {
        const char *path = paths[f];
        io->fd_buf[f] = open(path, O_RDONLY | O_CLOEXEC);
        if (io->fd_buf[f] < 0) {
            st = es_fail(ES_E_IO, "open %s: %s", path, strerror(errno));
            goto fail;
        }
        struct stat sb;
        if (fstat(io->fd_buf[f], &sb) != 0) {
            st = es_fail(ES_E_IO, "stat %s: %s", path, strerror(errno));
            goto fail;
        }
        io->file_bytes[f] = (uint64_t)sb.st_size;
        if (!io->direct) continue;
        io->fd_direct[f] = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
        if (io->fd_direct[f] < 0 && errno == EINVAL) { /* then buffered for every file */
            es_log(ES_LOG_INFO, "io: %s: the file system refuses O_DIRECT; buffered reads",
                   path);
            io->direct = 0;
        } else if (io->fd_direct[f] < 0) {
            st = es_fail(ES_E_IO, "open %s (O_DIRECT): %s", path, strerror(errno));
            goto fail;
        }
    }
    for (int f = 0; !io->direct && f < n_files; f++)
        if (io->fd_direct[f] >= 0) {
            close(io->fd_direct[f]);
            io->fd_direct[f] = -1;
        }

    if (q.backend == ES_IO_URING || q.backend == ES_IO_AUTO) {
        st = es_io_uring_init(io);
        if (st == ES_OK) {
            io->kind = ES_IO_URING;
        } else if (q.backend == ES_IO_URING) {
            goto fail; /* es_io_uring_init said why */
        } else {
            es_log(ES_LOG_INFO, "io: %s; using pread", es_last_error());
        }
    }
    if (io->kind == ES_IO_PREAD && (st = es_io_pread_init(io)) != ES_OK) goto fail;
    *out = io;
    return ES_OK;
fail:
    es_io_close(io);
    return st;
}

void es_io_close(es_io *io)
{
    if (!io) return;
    if (io->be && io->kind == ES_IO_URING) {
        /* The kernel may still write into the caller's buffers: wait for every read. Held
         * results and wake notifications are dropped; fini settles the wake read. */
        while (io->ops_in_flight > 0) {
            int slot;
            int64_t res;
            if (es_io_uring_reap(io, ES_IO_NO_DEADLINE, &slot, &res) != ES_OK) {
                es_log(ES_LOG_WARN, "io: close: %s", es_last_error());
                break;
            }
            if (slot >= 0) io->ops_in_flight--;
        }
        es_io_uring_fini(io);
    } else if (io->be) {
        es_io_pread_fini(io); /* joins the workers: no read runs after this */
    }
    for (int f = 0; f < io->n_files; f++) {
        if (io->fd_direct[f] >= 0) close(io->fd_direct[f]);
        if (io->fd_buf[f] >= 0) close(io->fd_buf[f]);
    }
    free(io->fd_direct);
    free(io->fd_buf);
    free(io->file_bytes);
    free(io);
}

es_status es_io_submit(es_io *io, uint64_t off, size_t len, size_t need, void *dst,
                       uint64_t tag)
{
    return es_io_submit_file(io, 0, off, len, need, dst, tag);
}

es_status es_io_submit_file(es_io *io, int file, uint64_t off, size_t len, size_t need,
                            void *dst, uint64_t tag)
{
    const size_t a = ES_IO_ALIGN;
    if (file < 0 || file >= io->n_files)
        return es_fail(ES_E_INVAL, "io: file %d of %d", file, io->n_files);
    if (off % a || len % a || (uintptr_t)dst % a)
        return es_fail(ES_E_INVAL,
                       "io: read of %zu bytes at offset %llu into %p: offset, length and buffer "
                       "must be multiples of %zu",
                       len, (unsigned long long)off, dst, a);
    if (len == 0 || need == 0 || need > len)
        return es_fail(ES_E_INVAL, "io: read of %zu bytes needing %zu: need must be 1..len",
                       len, need);
    if (off > UINT64_MAX - len)
        return es_fail(ES_E_INVAL, "io: read of %zu bytes at offset %llu overflows", len,
                       (unsigned long long)off);
    if (tag == ES_IO_WAKE_TAG)
        return es_fail(ES_E_INVAL, "io: tag %llu is ES_IO_WAKE_TAG, reserved for wake-ups",
                       (unsigned long long)tag);
    if (io->in_flight >= io->p.queue_depth)
        return es_fail(ES_E_INVAL, "io: %d reads already in flight (queue depth %d)",
                       io->in_flight, io->p.queue_depth);
    int slot = 0;
    while (io->req[slot].busy)
        slot++;
    ES_ASSERT(slot < io->p.queue_depth);
    io_req *r = &io->req[slot];
    *r = (io_req){.file = file, .off = off, .len = len, .need = need, .dst = dst, .tag = tag};
    r->inject_eio = io->p.fault_eio_at > 0 && io->n_submits + 1 == (uint64_t)io->p.fault_eio_at;
    es_status st = issue(io, slot, 0, io->direct);
    if (st != ES_OK) return st;
    io->n_submits++;
    io->st.requests++;
    r->busy = 1;
    if (io->in_flight++ == 0) io->busy_since_ns = r->op_start_ns;
    return ES_OK;
}

/* Ends request slot: fills the outputs, frees the slot, closes a busy period. */
static void finish(es_io *io, int slot, uint64_t *tag, es_status *req_status, es_status rs)
{
    io_req *r = &io->req[slot];
    *tag = r->tag;
    *req_status = rs;
    r->busy = 0;
    if (--io->in_flight == 0)
        io->st.busy_s += (double)(es_now_ns() - io->busy_since_ns) * 1e-9;
}

/* Takes one raw result of slot's read: applies the injected faults, works out when it is due
 * (delay, pacing) and appends it to the FIFO of held results. */
static void hold(es_io *io, int slot, int64_t res)
{
    ES_ASSERT(slot >= 0 && slot < io->p.queue_depth && io->req[slot].busy);
    ES_ASSERT(io->n_held < io->p.queue_depth);
    io_req *r = &io->req[slot];
    io->ops_in_flight--;
    if (r->inject_eio) {
        r->inject_eio = 0;
        res = -EIO;
    } else if (io->p.fault_direct_einval && r->op_direct && res >= 0) {
        res = -EINVAL;
    }
    if (res > 0 && io->p.fault_short_bytes && (size_t)res > io->p.fault_short_bytes)
        res = (int64_t)io->p.fault_short_bytes;
    uint64_t due = r->op_start_ns + (uint64_t)io->p.fault_delay_us * 1000u;
    if (io->p.limit_bytes_per_s > 0 && res > 0) {
        /* One emulated device serving reads one after another at the limit. */
        uint64_t t0 = io->pace_free_ns > r->op_start_ns ? io->pace_free_ns : r->op_start_ns;
        io->pace_free_ns = t0 + (uint64_t)((double)res / io->p.limit_bytes_per_s * 1e9);
        if (io->pace_free_ns > due) due = io->pace_free_ns;
    }
    r->res = res;
    r->due_ns = due;
    io->held[(io->held_head + io->n_held) % io->p.queue_depth] = slot;
    io->n_held++;
}

/* Atomically takes the pending wake, if any (acq_rel: see es_io.wake_pending). */
static int take_wake(es_io *io)
{
    return atomic_exchange_explicit(&io->wake_pending, 0, memory_order_acq_rel) != 0;
}

static es_status wake_out(uint64_t *tag, es_status *req_status)
{
    *tag = ES_IO_WAKE_TAG;
    *req_status = ES_OK;
    return ES_OK;
}

void es_io_wake(es_io *io)
{
    /* Only the call that makes the flag 1 notifies: while it is 1, a notification sent after
     * it was set is on its way (or the wait that clears it has not blocked yet), and the wait
     * that takes the flag answers every call made before. acq_rel: publishes the caller's
     * writes to that wait (release); acquire is harmless. */
    if (atomic_exchange_explicit(&io->wake_pending, 1, memory_order_acq_rel)) return;
    if (io->kind == ES_IO_URING)
        es_io_uring_notify(io);
    else
        es_io_pread_notify(io);
}

/* Moves the due result at the head of the FIFO on: finishes its request (returns 1, outputs
 * filled) or issues the request's next part (returns 0). */
static int advance(es_io *io, uint64_t *tag, es_status *req_status)
{
    int slot = io->held[io->held_head];
    io->held_head = (io->held_head + 1) % io->p.queue_depth;
    io->n_held--;
    io_req *r = &io->req[slot];
    int64_t res = r->res;
    if (res > 0) io->st.bytes += (uint64_t)res;

    es_status st;
    if (res == -EINVAL && r->op_direct && !io->direct_proven) {
        /* The file system took O_DIRECT at open but refuses it now: go buffered. Other
         * direct reads in flight come back here the same way. */
        if (io->direct)
            es_log(ES_LOG_INFO, "io: O_DIRECT refused at the first read; buffered reads");
        io->direct = 0;
        io->p.fault_direct_einval = 0;
        st = issue(io, slot, r->op_from, 0);
    } else if (res == -EINTR || res == -EAGAIN) {
        st = issue(io, slot, r->op_from, r->op_direct);
    } else if (res < 0) {
        es_fail(ES_E_IO, "read of %zu bytes at offset %llu: %s", r->len,
                (unsigned long long)r->off, strerror((int)-res));
        finish(io, slot, tag, req_status, ES_E_IO);
        return 1;
    } else {
        if (r->op_direct && res > 0) io->direct_proven = 1;
        size_t end = r->op_from + (size_t)res;
        if (end > r->done) r->done = end;
        if (r->done >= r->need) {
            finish(io, slot, tag, req_status, ES_OK);
            return 1;
        }
        uint64_t at = r->off + r->done;
        const uint64_t file_bytes = io->file_bytes[r->file];
        if (res == 0 || at >= file_bytes) {
            uint64_t eof = at < file_bytes ? at : file_bytes;
            es_fail(ES_E_IO, "read of %zu bytes at offset %llu: file ends at %llu, %zu "
                             "bytes short",
                    r->len, (unsigned long long)r->off, (unsigned long long)eof,
                    r->need - r->done);
            finish(io, slot, tag, req_status, ES_E_IO);
            return 1;
        }
        /* Resume (see DESIGN above). */
        if (!r->op_direct || r->done % ES_IO_ALIGN == 0) {
            st = issue(io, slot, r->done, r->op_direct);
        } else {
            size_t back = r->done / ES_IO_ALIGN * ES_IO_ALIGN;
            st = back > r->op_from ? issue(io, slot, back, 1) : issue(io, slot, r->done, 0);
        }
    }
    if (st != ES_OK) { /* the backend refused the next part: the request fails */
        finish(io, slot, tag, req_status, ES_E_IO);
        return 1;
    }
    return 0;
}

es_status es_io_wait(es_io *io, uint64_t *tag, es_status *req_status)
{
    if (io->in_flight == 0) {
        if (take_wake(io)) return wake_out(tag, req_status);
        return es_fail(ES_E_INVAL, "io: wait with no read in flight");
    }
    for (;;) {
        ES_ASSERT(io->in_flight == io->ops_in_flight + io->n_held);
        uint64_t due = io->n_held > 0 ? io->req[io->held[io->held_head]].due_ns
                                      : ES_IO_NO_DEADLINE;
        if (due != ES_IO_NO_DEADLINE && due <= es_now_ns()) {
            if (advance(io, tag, req_status)) return ES_OK;
            continue;
        }
        int slot;
        int64_t res;
        ES_TRY(be_reap(io, 0, &slot, &res)); /* what the backend has ready, without blocking */
        if (slot == ES_IO_SLOT_NONE) {
            if (take_wake(io)) return wake_out(tag, req_status);
            /* Block until a result, a notification, or the head of the FIFO is due. */
            ES_TRY(be_reap(io, due, &slot, &res));
        }
        if (slot >= 0) hold(io, slot, res);
        /* ES_IO_SLOT_WAKE: the next round sees the flag (or finds the notification stale);
         * ES_IO_SLOT_NONE after blocking: the head is due. */
    }
}
