/* The raw read bandwidth of a model's experts (pipeline.h es_stream_probe_bandwidth, and the
 * public es_stream_measure_bandwidth): the streamer's reads, in its order, with no compute. */
#include "stream/geometry.h"
#include "stream/pipeline.h"

#include "core/util.h"

typedef struct probe_state {
    es_io *io;
    uint8_t *buf;
    size_t slot_bytes;
    int Q;
    uint64_t busy_slots; /* bit set of busy buffers (Q <= 64) */
    uint64_t bytes, max_bytes;
    es_status st;
} probe_state;

static void probe_group(void *u, const es_group_map *g)
{
    probe_state *ps = u;
    for (int x = 0; x < g->n_ext && ps->st == ES_OK; x++) {
        if (ps->max_bytes && ps->bytes >= ps->max_bytes) return;
        int slot = -1;
        for (int i = 0; i < ps->Q && slot < 0; i++)
            if (!(ps->busy_slots & ((uint64_t)1 << i))) slot = i;
        if (slot < 0) { /* every buffer busy: wait for one */
            uint64_t tag;
            es_status rst;
            if ((ps->st = es_io_wait(ps->io, &tag, &rst))) return;
            if (tag == ES_IO_WAKE_TAG) { x--; continue; }
            if ((ps->st = rst)) return;
            ps->busy_slots &= ~((uint64_t)1 << tag);
            slot = (int)tag;
        }
        const es_group_extent *e = &g->ext[x];
        ps->st = es_io_submit_file(ps->io, e->file, e->off, e->len, e->need,
                              ps->buf + (size_t)slot * ps->slot_bytes, (uint64_t)slot);
        ps->busy_slots |= (uint64_t)1 << slot;
        ps->bytes += e->len;
    }
}

es_status es_stream_probe_bandwidth(const es_model *m, const es_stream_probe *p, double *bps)
{
    *bps = 0;
    const int Q = p->queue_depth ? p->queue_depth : 4;
    if (p->groups < 1 || Q < 1 || Q > 64)
        return es_fail(ES_E_INVAL, "probe: %d experts per group, queue depth %d (1..64)",
                       p->groups, Q);
    size_t slot = 0; /* the largest single extent */
    const int G = p->groups < m->hp.n_expert ? p->groups : m->hp.n_expert;
    slot = es_stream_bank_bytes(m, G);
    if (slot == 0) return es_fail(ES_E_INVAL, "probe: the model has no experts");
    probe_state ps = {.Q = Q, .slot_bytes = es_align_up(slot, 4096), .max_bytes = p->max_bytes};
    /* es_alloc_big aligns to 2 MiB (hence 4096, as O_DIRECT needs) only from 2 MiB up */
    const size_t buf_bytes = es_max_size(ps.slot_bytes * (size_t)Q, (size_t)2 << 20);
    ps.buf = es_alloc_big(buf_bytes);
    if (!ps.buf) return es_fail(ES_E_NOMEM, "probe: out of memory");
    es_io_params io = {.queue_depth = Q, .limit_bytes_per_s = p->limit_bytes_per_s,
                       .no_direct = !p->direct_io, .backend = p->io_backend};
    es_status st = es_stream_io_open(m, &io, &ps.io);
    if (st == ES_OK) {
        const uint64_t t0 = es_now_ns();
        st = es_stream_walk_groups(m, G, probe_group, &ps);
        if (st == ES_OK) st = ps.st;
        while (es_io_in_flight(ps.io) > 0) { /* drain (also after an error) */
            uint64_t tag;
            es_status rst;
            if (es_io_wait(ps.io, &tag, &rst) != ES_OK) break;
            if (st == ES_OK && tag != ES_IO_WAKE_TAG) st = rst;
        }
        const double secs = (double)(es_now_ns() - t0) * 1e-9;
        if (st == ES_OK && secs > 0) *bps = (double)ps.bytes / secs;
    }
    es_io_close(ps.io);
    es_free_big(ps.buf, buf_bytes);
    return st;
}

es_status es_stream_measure_bandwidth(const es_model *m, const es_session_params *p, int groups,
                                      int queue_depth, uint64_t max_bytes, double *bytes_per_s)
{
    /* NULL: the defaults (backend auto, O_DIRECT, no limit), without calling up into run/ */
    es_stream_probe probe = {.groups = groups, .queue_depth = queue_depth,
                             .io_backend = ES_IO_AUTO, .direct_io = 1, .max_bytes = max_bytes};
    if (p) {
        probe.io_backend = p->io_backend;
        probe.direct_io = p->direct_io;
        probe.limit_bytes_per_s = p->io_limit_bytes_per_s;
    }
    return es_stream_probe_bandwidth(m, &probe, bytes_per_s);
}
