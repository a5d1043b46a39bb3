/*
 * The expert streamer: the streaming provider of the MoE stage (moe/provider.h), an arena of B
 * banks x G expert slots (stream/arena.h) and a loader thread that fills banks from the model file
 * with grouped O_DIRECT reads (io/io.h) while the compute threads run (docs/design.md §5-6).
 *
 * DESIGN
 * - The request's groups form one sequence: sparse layer by layer, groups k = 0..K-1 of G
 *   consecutive experts in increasing id (the order the MoE stage acquires them). The loader
 *   reads that sequence strictly in order into free banks; the executor consumes it in order.
 *   Because both go in the same order and a bank holds exactly one group, no bank can be needed
 *   before the banks ahead of it in the sequence are released, so there is no deadlock for any
 *   B >= 1.
 * - A group is one extent of the file per matrix kind: in a pack, G consecutive records (one
 *   read); in a GGUF, the G experts' slices of the gate, up and down tensors (three reads). Each
 *   extent is read 4 KiB-aligned (the bank holds the aligned superset) so O_DIRECT works on any
 *   GGUF, whose tensors are only 32-byte aligned.
 * - Residency protocol, per bank, all transitions under one mutex:
 *     Available -> Filling (loader reserved it for a group; reads in flight; invisible)
 *     Filling   -> Ready   (every extent arrived and, in a pack, every record's XXH3 matched)
 *               -> Failed  (a read failed, or a checksum did not match: the error names the
 *                           layer and the experts)
 *     Ready     -> InUse   (the executor acquired it: phi points its experts at the bank's slots)
 *     InUse     -> Available (release: the last invocation on it has returned)
 *     Ready/Failed -> Available (the executor went past the group: it had no routes)
 *   The executor only ever sees Ready banks; a Filling or InUse bank is never handed to the
 *   loader. The slot pointers of a bank are written by the loader while it is Filling and read
 *   by the executor only after it saw Ready under the mutex.
 * - Policies (when the loader may start the read of sequence entry j, of sparse layer w):
 *     on-demand      only when the executor waits for j;
 *     after-routing  once layer w's routing is known;
 *     early          as soon as a bank is free (it reads into later layers while banks are
 *                    free; the request starts at the first layer_begin).
 *   Once layer w's routing is known, its groups without routes are skipped (not read), and a
 *   bank already holding one is recycled.
 * - The loader thread owns the es_io (single issuer). It blocks in es_io_wait() while reads are
 *   in flight, and is woken (es_io_wake) when a bank is released or a gate opens, so Q reads stay
 *   in flight whenever the policy and the banks allow.
 */
#ifndef ES_PIPELINE_H
#define ES_PIPELINE_H

#include "core/trace.h"
#include "io/io.h"
#include "model/model.h"
#include "moe/provider.h"

typedef struct es_stream es_stream;

#define ES_STREAM_MAX_BANKS 1024

typedef struct es_stream_params {
    int groups;       /* G >= 1 experts per bank (capped at n_expert) */
    int banks;        /* B >= 1 */
    es_policy policy;
    int verify;       /* 1: check each pack record's XXH3-64 after it arrives (ignored for a
                         GGUF source, which has no checksums) */
    es_io_params io;  /* backend, queue depth (Q), rate limit, O_DIRECT, fault injection */
    es_trace *trace;  /* NULL: no trace */
    int record;       /* 1: keep the timestamps of every group of each request (es_stream_record) */
} es_stream_params;

/* When each group of the last request was read and computed (es_now_ns() clock), for the
 * configurator's profiles (tune/tune.h). Entry j of the sequence is sparse layer j / K, experts
 * (j % K) * G ...; a time is 0 where the event did not happen (a group without routes is neither
 * acquired nor, once routing is known, read). */
typedef struct es_stream_record {
    int64_t n_seq;
    int n_sparse, K, G;
    uint64_t *bytes;       /* [n_seq] bytes of the group's extents (as read) */
    uint64_t *t_submit;    /* [n_seq] the loader reserved a bank and submitted the first read */
    uint64_t *t_read_done; /* [n_seq] the last extent arrived (before the checksums) */
    uint64_t *t_ready;     /* [n_seq] published Ready */
    uint64_t *t_want;      /* [n_seq] the executor asked for it */
    uint64_t *t_acquired;  /* [n_seq] the executor got it */
    uint64_t *t_released;  /* [n_seq] the executor released it */
    uint64_t *t_begin;     /* [n_sparse] layer_begin */
    uint64_t *t_routed;    /* [n_sparse] routing known */
    uint64_t t_end;        /* run_end */
} es_stream_record;
/* The record of the last request (NULL unless params.record); valid until es_stream_destroy()
 * and overwritten by the next request. Read it only between requests. */
const es_stream_record *es_stream_get_record(const es_stream *s);

/* Bytes one bank needs to hold any group of G experts of m (max over sparse layers and groups,
 * extents 4 KiB-aligned). 0 if m has no experts. */
size_t es_stream_bank_bytes(const es_model *m, int G);

/* Expert bytes the whole request reads when every group is routed (extents as read). */
uint64_t es_stream_request_bytes(const es_model *m, int G);

/* Opens the model's file for the loader, allocates the arena (pre-faulted) and starts the
 * loader thread. Errors: ES_E_INVAL (bad params, a model without experts), ES_E_IO (the file),
 * ES_E_UNSUPPORTED (io_uring asked for and unavailable), ES_E_FORMAT (a pack's layer index),
 * ES_E_NOMEM. */
es_status es_stream_create(const es_model *m, const es_stream_params *p, es_stream **out);
void es_stream_destroy(es_stream *s); /* NULL is a no-op; joins the loader */

/* The provider to hand to es_fast_forward(); valid until es_stream_destroy(). */
es_expert_provider *es_stream_provider(es_stream *s);

/* What the last request did (reset when the next request begins). */
typedef struct es_stream_stats {
    uint64_t bytes_read;     /* bytes of expert extents that arrived */
    double read_seconds;     /* seconds with at least one read in flight */
    double wait_seconds;     /* seconds the executor waited for a group */
    int64_t groups_read;     /* groups read (including ones found unrouted later) */
    int64_t groups_skipped;  /* groups not read: no routes */
    const char *io_backend;  /* "io_uring" or "pread" */
    int direct;              /* reads bypassed the page cache */
    int queue_depth;
    size_t arena_bytes;
    size_t bank_bytes;
} es_stream_stats;
void es_stream_get_stats(const es_stream *s, es_stream_stats *out);

/* The raw read bandwidth of m's expert groups: the loader's reads (same extents, in the same
 * order, Q in flight, O_DIRECT) with no compute and no checksum, over at most max_bytes
 * (0 = the whole request). What the disk bound of a streaming run is measured with. */
typedef struct es_stream_probe {
    int groups, queue_depth;  /* G, Q (0 = 4) */
    es_io_backend io_backend; /* as es_session_params */
    int direct_io;            /* as es_session_params (1: O_DIRECT) */
    double limit_bytes_per_s;
    uint64_t max_bytes;
} es_stream_probe;
es_status es_stream_probe_bandwidth(const es_model *m, const es_stream_probe *p, double *bps);

#endif
