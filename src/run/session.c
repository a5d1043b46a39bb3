/*
 * es_session: one run's state on an immutable model (STYLE §11; llama.cpp's context).
 *
 * DESIGN: the session owns everything a prefill changes: a copy of the kernel table it was
 * created with (so a later es_kernels_select() cannot change the format of buffers it already
 * sized), the fast path's pool, activation buffers and plans (fast.c), and under a budget or
 * when asked, the expert streamer (stream/pipeline.c: arena and loader thread). Buffers are sized
 * for max_tokens at creation when it is given (a budget without max_tokens sizes them for the
 * model's context), so M_other is measured before the arena takes the rest of the budget
 * (stream/budget.h); otherwise they grow to the longest prompt. Every size that is freed is the
 * size that was allocated, kept beside the pointer. The MoE stage takes its experts from a
 * provider (moe/provider.h): the streamer's, or the all-resident one, which reads every expert
 * through the model's mapping.
 */
#include "run/session.h"

#include "core/cpuset.h"
#include "core/memlimit.h"
#include "core/trace.h"
#include "core/util.h"
#include "stream/arena.h"
#include "stream/budget.h"
#include "run/batch.h"
#include "run/forward.h"
#include "run/head.h"
#include "quant/kern.h"
#include "stream/pipeline.h"
#include "tune/tune.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct es_session {
    const es_model *m;
    es_session_params p;
    es_kern kern;        /* the table this session's buffers are in */
    es_fast *fast;       /* NULL for a reference session */
    es_stream *stream;   /* NULL when every expert is resident */
    es_trace *trace;     /* NULL unless trace_path */
    char *trace_path;
    es_io_params io;     /* the loader's I/O (tests add faults: es_session_create_io) */
    int record;          /* the streamer records timestamps (es_session_create_rec) */
    es_run_stats stats;
    bool have_profile;      /* the last request completed on the fast path */
};

es_session_params es_session_default_params(void)
{
    return (es_session_params){
        .n_threads = es_cpuset_get()->threads, /* core/cpuset.h: OMP_NUM_THREADS, cores, quota */
        .plan_capacity = 16384,
        .policy = ES_POLICY_EARLY,
        .io_backend = ES_IO_AUTO,
        .direct_io = 1,
        .verify_checksums = 1,
        .max_logits_rows = 1,
        .head_outputs = 1,
        .max_seqs = 64,
    };
}

/* Whether the parameters ask for a budget or for streaming. */
static int streams(const es_session_params *p)
{
    return p->stream || p->mem_budget_bytes || p->groups || p->banks || p->queue_depth;
}

/* A model run resident whose file is larger than the memory this process may use reads its
 * experts from disk again and again through the page cache (often unnoticed in a container,
 * whose limit `free` does not show): said once per process, with the budget that streams them. */
static void warn_if_larger_than_memory(const es_model *m)
{
    static atomic_flag said = ATOMIC_FLAG_INIT;
    const es_memlimit *lim = es_memlimit_get();
    const uint64_t file = es_gguf_file_size(m->gguf);
    if (!lim->bytes || file <= lim->bytes || atomic_flag_test_and_set(&said)) return;
    const uint64_t mib = 1u << 20, suggest = lim->bytes / 5 * 4 / mib; /* room for the rest */
    es_log(ES_LOG_WARN,
           "the model file (%" PRIu64 " MiB) is larger than the memory this process may use (%" PRIu64
           " MiB, %s): run resident, its experts are read from disk again and again; a memory "
           "budget below that (--mem %" PRIu64 "M, or --mem auto; mem= in Python) streams them "
           "instead",
           file / mib, lim->bytes / mib, lim->source, suggest ? suggest : 1);
}

/* More threads than can run at once (an explicit count, or OMP_NUM_THREADS's, above the CPUs of
 * the affinity mask or the cgroup quota: core/cpuset.h) wait for one another at every barrier
 * of the fork-join pool: obeyed, but said once per process, with the count that runs. */
static void warn_if_more_threads_than_cpus(int n_threads)
{
    static atomic_flag said = ATOMIC_FLAG_INIT;
    const es_cpuset *cs = es_cpuset_get();
    if (n_threads <= cs->runnable || atomic_flag_test_and_set(&said)) return;
    char why[96];
    if (cs->quota > 0 && ceil(cs->quota) < cs->allowed)
        snprintf(why, sizeof(why), "a cgroup CPU quota of %.2f CPUs", cs->quota);
    else
        snprintf(why, sizeof(why), "%d CPU%s in its affinity mask", cs->allowed,
                 cs->allowed == 1 ? "" : "s");
    const bool omp = n_threads == cs->threads && cs->omp > 0;
    char fix[64];
    if (omp)
        snprintf(fix, sizeof(fix), "OMP_NUM_THREADS=%d", cs->runnable);
    else
        snprintf(fix, sizeof(fix), "-t %d (threads=%d in Python)", cs->runnable, cs->runnable);
    es_log(ES_LOG_WARN,
           "%d compute threads%s, but this process can run at most %d at once (%s): the others "
           "wait for them at every step; %s runs faster",
           n_threads, omp ? " (OMP_NUM_THREADS)" : "", cs->runnable, why, fix);
}

static es_status check_params(const es_model *m, const es_session_params *p)
{
    if (m->vocab_only) return es_fail(ES_E_INVAL, "the model was opened vocabulary-only");
    if (p->n_threads < 0 || p->n_threads > ES_MAX_THREADS)
        return es_fail(ES_E_INVAL, "thread count %d is outside 1..%d (0: the default)",
                       p->n_threads, ES_MAX_THREADS);
    if (p->plan_capacity < 0) return es_fail(ES_E_INVAL, "plan capacity must be >= 0");
    if (p->groups < 0 || p->banks < 0 || p->banks > ES_STREAM_MAX_BANKS || p->queue_depth < 0 ||
        p->queue_depth > 64 || p->io_limit_bytes_per_s < 0 || p->max_logits_rows < 0)
        return es_fail(ES_E_INVAL, "bad streaming parameters (groups %d, banks %d of at most %d, "
                                   "queue depth %d of at most 64)",
                       p->groups, p->banks, ES_STREAM_MAX_BANKS, p->queue_depth);
    if (p->io_backend < ES_IO_AUTO || p->io_backend > ES_IO_PREAD)
        return es_fail(ES_E_INVAL, "unknown I/O backend %d", (int)p->io_backend);
    if (p->direct_io != 0 && p->direct_io != 1)
        return es_fail(ES_E_INVAL, "direct_io must be 0 or 1, not %d", p->direct_io);
    if (p->verify_checksums != 0 && p->verify_checksums != 1)
        return es_fail(ES_E_INVAL, "verify_checksums must be 0 or 1, not %d", p->verify_checksums);
    if (p->head_outputs != 0 && p->head_outputs != 1)
        return es_fail(ES_E_INVAL, "head_outputs must be 0 or 1, not %d", p->head_outputs);
    if (p->policy < ES_POLICY_EARLY || p->policy > ES_POLICY_ON_DEMAND)
        return es_fail(ES_E_INVAL, "unknown streaming policy %d", (int)p->policy);
    if (p->reference && streams(p))
        return es_fail(ES_E_INVAL, "a memory budget or streaming needs the fast path, not the "
                                   "reference path (which reads every expert in place)");
    if (p->max_tokens < 0 || p->max_tokens > ES_MAX_BATCH_TOKENS)
        return es_fail(ES_E_INVAL, "max tokens %d is outside 0..%d", p->max_tokens,
                       ES_MAX_BATCH_TOKENS);
    if (p->max_seqs < 0 || p->max_seqs > ES_MAX_BATCH_SEQS)
        return es_fail(ES_E_INVAL, "max sequences %d is outside 0..%d (0: 64)", p->max_seqs,
                       ES_MAX_BATCH_SEQS);
    return ES_OK;
}

/* The arena and queue depth the configurator's profiles choose for the budget (tune.h), or
 * resident when every expert fits and streaming is not forced. */
static es_status tuned_plan(es_session *s, uint64_t other, es_budget_plan *plan, int *qd)
{
    const es_session_params *p = &s->p;
    const es_tune *t = p->tune;
    if (es_tune_applies(t, p->n_threads, s->kern.isa) != ES_OK) {
        char why[256]; /* es_fail formats into the buffer es_last_error() points at */
        snprintf(why, sizeof(why), "%s", es_last_error());
        return es_fail(ES_E_INVAL, "the tuning does not apply to this run: %s", why);
    }
    memset(plan, 0, sizeof(*plan));
    const uint64_t all = es_stream_request_bytes(s->m, s->m->hp.n_expert);
    if (!p->stream && p->mem_budget_bytes >= other + all) { /* as without a tuning */
        plan->resident = 1;
        return ES_OK;
    }
    /* what the profile run measured beyond the estimate, for its prompt length */
    const uint64_t extra =
        t->other_bytes > t->other_estimate ? t->other_bytes - t->other_estimate : 0;
    es_tune_choice c;
    const uint64_t t0 = es_now_ns();
    const es_status st =
        es_tune_select(t, p->mem_budget_bytes, other + extra + ES_ARENA_SLACK_BYTES,
                       p->io_limit_bytes_per_s, p->policy, p->verify_checksums, &c);
    plan->min_budget = c.min_budget;
    if (st) return st;
    plan->groups = c.groups;
    plan->banks = c.banks;
    plan->bank_bytes = es_stream_bank_bytes(s->m, c.groups);
    *qd = c.qd;
    s->stats.tuned = 1;
    s->stats.predicted_seconds = c.predicted;
    s->stats.tune_select_seconds = (double)(es_now_ns() - t0) * 1e-9;
    return ES_OK;
}

/* Under a budget the prompt's embedding rows are read from the file, not through the mapping
 * (es_fast_embed_from_file: what a mapping makes resident is the kernel's choice). A tied head
 * has the embedding resident already, and a model in memory has it in this process. */
static es_status embed_from_file(es_session *s)
{
    const es_model *m = s->m;
    if (m->tok_embd.data == m->output.data) return ES_OK;
    const es_gguf_tensor *t = es_gguf_find_tensor(m->gguf, m->tok_embd.name);
    const es_gguf *file = t ? es_gguf_file(m->gguf, t->file) : NULL;
    if (!file || !es_gguf_is_mapped(file)) return ES_OK;
    const char *path = es_gguf_path(file);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return es_fail(ES_E_IO, "%s: cannot open to read the token embedding: %s", path,
                       strerror(errno));
    const es_status st = es_gguf_check_same_file(file, fd, "read its embedding");
    if (st) {
        close(fd);
        return st;
    }
    return es_fast_embed_from_file(s->fast, m, fd, es_gguf_data_offset(file) + t->offset);
}

/* The arena for the session's budget (or its forced G/B), the streamer, and the fast path's
 * slots for it. Called with s->fast made for n_expert slots and reserved for max_tokens. */
static es_status setup_streaming(es_session *s, uint64_t rss_before, size_t big_before)
{
    const es_model *m = s->m;
    const es_session_params *p = &s->p;
    const int64_t T = p->max_tokens ? p->max_tokens : m->hp.n_ctx;
    const int rows = p->max_logits_rows > 0 ? p->max_logits_rows : 1;
    const uint64_t fast_bytes = es_big_bytes_live() - big_before;
    const uint64_t other = rss_before + fast_bytes +
                           (uint64_t)p->n_threads * m->tok_embd.row_bytes + /* embed_from_file */
                           (uint64_t)rows * (uint64_t)m->hp.n_vocab * sizeof(float) +
                           (p->head_outputs ? es_batch_head_bytes(m, T) : 0) +
                           p->reserve_bytes + es_budget_margin_bytes(p->n_threads);
    s->stats.budget_bytes = p->mem_budget_bytes;
    s->stats.other_bytes = other;
    const int force = p->stream || p->groups || p->banks || p->queue_depth;
    es_budget_plan plan;
    int qd = p->queue_depth;
    if (p->tune && p->mem_budget_bytes && !p->groups && !p->banks && !p->queue_depth) {
        ES_TRY(tuned_plan(s, other, &plan, &qd));
    } else {
        ES_TRY(es_budget_plan_make(m, p->mem_budget_bytes, other, p->groups, p->banks, force,
                                   &plan));
    }
    s->stats.min_budget_bytes = plan.min_budget;
    if (plan.resident) return ES_OK;
    const int P = plan.groups * plan.banks;
    if (P > m->hp.n_expert) { /* the plans must address every slot of the arena */
        es_fast_destroy(s->fast, &m->hp);
        s->fast = NULL;
        ES_TRY(es_fast_create(m, &s->kern, p->n_threads, p->plan_capacity, P, &s->fast));
        ES_TRY(es_fast_reserve(s->fast, m, T, p->max_seqs));
    }
    es_stream_params sp = {.groups = plan.groups, .banks = plan.banks, .policy = p->policy,
                           .verify = p->verify_checksums, .io = s->io, .trace = s->trace,
                           .record = s->record};
    if (qd) sp.io.queue_depth = qd;
    if (p->io_limit_bytes_per_s > 0) sp.io.limit_bytes_per_s = p->io_limit_bytes_per_s;
    if (p->io_backend != ES_IO_AUTO) sp.io.backend = p->io_backend;
    if (!p->direct_io) sp.io.no_direct = 1;
    es_fast_set_trace(s->fast, s->trace);
    ES_TRY(es_stream_create(m, &sp, &s->stream));
    es_stream_stats ss;
    es_stream_get_stats(s->stream, &ss);
    s->stats.streaming = 1;
    s->stats.groups = plan.groups;
    s->stats.banks = plan.banks;
    s->stats.queue_depth = ss.queue_depth;
    s->stats.arena_bytes = ss.arena_bytes;
    s->stats.policy = es_policy_name(p->policy);
    s->stats.io_backend = ss.io_backend;
    s->stats.direct = ss.direct;
    return ES_OK;
}

es_status es_session_create_io(const es_model *m, const es_session_params *params,
                               const es_io_params *io, es_session **out)
{
    return es_session_create_rec(m, params, io, 0, out);
}

const es_stream_record *es_session_stream_record(const es_session *s)
{
    return s && s->stream ? es_stream_get_record(s->stream) : NULL;
}

es_status es_session_create_rec(const es_model *m, const es_session_params *params,
                                const es_io_params *io, int record, es_session **out)
{
    *out = NULL;
    if (!m) return es_fail(ES_E_INVAL, "es_session_create: NULL model");
    es_session_params p = params ? *params : es_session_default_params();
    ES_TRY(check_params(m, &p));
    if (p.n_threads == 0) p.n_threads = es_cpuset_get()->threads;
    if (p.max_seqs == 0) p.max_seqs = 64;
    if (!streams(&p)) warn_if_larger_than_memory(m);
    if (!p.reference) warn_if_more_threads_than_cpus(p.n_threads);
    if (streams(&p)) es_budget_touch_weights(m); /* counted as mapped, in rss_before */
    const uint64_t rss_before = streams(&p) ? es_budget_live_rss_bytes() : 0;
    const size_t big_before = es_big_bytes_live();
    es_session *s = calloc(1, sizeof(*s));
    if (!s) return es_fail(ES_E_NOMEM, "out of memory for a session");
    s->m = m;
    es_status st = ES_OK;
    p.kernels = NULL; /* not kept: the table is copied below */
    p.trace_path = NULL; /* not kept: copied below */
    s->p = p;
    if (io) s->io = *io;
    s->record = record;
    s->stats.n_threads = p.reference ? 1 : p.n_threads;
    if (p.reference) {
        s->stats.kernels = "reference";
        *out = s;
        return ES_OK;
    }
    if (params && params->trace_path) {
        if (!(s->trace_path = strdup(params->trace_path))) {
            st = es_fail(ES_E_NOMEM, "out of memory");
            goto fail;
        }
        if ((st = es_trace_create(&s->trace))) goto fail;
    }
    const char *isa = params && params->kernels ? params->kernels : es_kern_default()->isa;
    if (!es_kern_get(isa, &s->kern)) {
        bool known = false;
        for (int i = 0; i < ES_KERN_N_ISA; i++) known |= strcmp(isa, es_kern_isa_names[i]) == 0;
        st = known ? es_fail(ES_E_UNSUPPORTED, "the %s kernels cannot run here: %s", isa,
                             es_kern_isa_why_not(isa))
                   : es_fail(ES_E_INVAL, "unknown kernel table '%s' (%s)", isa,
                             es_kern_isa_why_not(isa));
        goto fail;
    }
    s->stats.kernels = s->kern.isa;
    if ((st = es_fast_create(m, &s->kern, p.n_threads, p.plan_capacity, 0, &s->fast))) goto fail;
    const int64_t T = p.max_tokens ? p.max_tokens : streams(&p) ? m->hp.n_ctx : 0;
    if (T && (st = es_fast_reserve(s->fast, m, T, p.max_seqs))) goto fail;
    if (streams(&p) && (st = setup_streaming(s, rss_before, big_before))) goto fail;
    if (streams(&p) && (st = embed_from_file(s))) goto fail; /* on setup_streaming's es_fast */
    if (s->trace && !s->stream) es_fast_set_trace(s->fast, s->trace);
    *out = s;
    return ES_OK;
fail:
    es_session_destroy(s);
    return st;
}

es_status es_session_create(const es_model *m, const es_session_params *params, es_session **out)
{
    return es_session_create_io(m, params, NULL, out);
}

void es_session_destroy(es_session *s)
{
    if (!s) return;
    es_stream_destroy(s->stream); /* first: its loader may still be reading into the arena */
    es_fast_destroy(s->fast, &s->m->hp);
    es_trace_destroy(s->trace);
    free(s->trace_path);
    free(s);
}

/* The run's statistics after a prefill or a batch that started at t0, and the trace. */
static es_status finish_run(es_session *s, uint64_t t0, int64_t tokens, es_status st)
{
    if (s->fast && !s->p.reference) {
        es_fast_prof_end(s->fast, tokens);
        s->have_profile = st == ES_OK;
    }
    const double secs = (double)(es_now_ns() - t0) * 1e-9;
    s->stats.seconds = secs;
    s->stats.peak_rss_bytes = es_peak_rss_bytes();
    if (s->stream) {
        es_stream_stats ss;
        es_stream_get_stats(s->stream, &ss);
        s->stats.bytes_read = ss.bytes_read;
        s->stats.read_seconds = ss.read_seconds;
        s->stats.read_bytes_per_second =
            ss.read_seconds > 0 ? (double)ss.bytes_read / ss.read_seconds : 0;
        s->stats.wait_seconds = ss.wait_seconds;
        s->stats.bubble_rate = secs > 0 ? ss.wait_seconds / secs : 0;
        s->stats.groups_read = ss.groups_read;
        s->stats.groups_skipped = ss.groups_skipped;
        s->stats.direct = ss.direct;
    }
    if (s->trace && s->trace_path) {
        const es_status ts = es_trace_write(s->trace, s->trace_path);
        if (st == ES_OK) st = ts;
    }
    return st;
}

es_status es_check_ids(const es_model *m, const int32_t *ids, size_t n)
{
    if (m->vocab_only) return es_fail(ES_E_INVAL, "the model was opened vocabulary-only");
    if (n == 0) return es_fail(ES_E_INVAL, "empty prompt: nothing to prefill");
    if (n > (size_t)m->hp.n_ctx)
        return es_fail(ES_E_INVAL, "prompt of %zu tokens exceeds the model's context of %d tokens",
                       n, m->hp.n_ctx);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->hp.n_vocab)
            return es_fail(ES_E_INVAL, "token id %d at position %zu is outside the vocabulary "
                           "[0, %d)", ids[i], i, m->hp.n_vocab);
    return ES_OK;
}

es_status es_session_prefill(es_session *s, const int32_t *ids, size_t n, int all_logits,
                             float *out)
{
    if (!s || !ids || !out) return es_fail(ES_E_INVAL, "es_session_prefill: NULL argument");
    ES_TRY(es_check_ids(s->m, ids, n));
    if (s->p.max_tokens && n > (size_t)s->p.max_tokens)
        return es_fail(ES_E_INVAL, "prompt of %zu tokens exceeds the session's %d tokens", n,
                       s->p.max_tokens);
    const uint64_t t0 = es_now_ns();
    if (s->fast) es_fast_prof_begin(s->fast);
    es_status st;
    if (s->p.reference) {
        st = es_forward_ref(s->m, ids, n, all_logits, out, NULL);
    } else {
        st = es_fast_forward(s->fast, s->m, s->stream ? es_stream_provider(s->stream) : NULL,
                             ids, n, all_logits, out, s->p.abort_cb, s->p.cb_user);
    }
    return finish_run(s, t0, (int64_t)n, st);
}

es_status es_session_run(es_session *s, es_seq *seqs, int n_seqs)
{
    if (!s) return es_fail(ES_E_INVAL, "es_session_run: NULL session");
    /* Streaming sessions sized their buffers (and so the arena) for max_tokens, or the context */
    const int limit = s->p.max_tokens ? s->p.max_tokens : s->stream ? s->m->hp.n_ctx : 0;
    int64_t T;
    ES_TRY(es_batch_check(s->m, seqs, n_seqs, limit, s->p.max_seqs, &T));
    for (int i = 0; i < n_seqs && !s->p.head_outputs; i++)
        for (int64_t r = 0; r < (int64_t)seqs[i].n_ids; r++)
            if (es_head_row_wanted(&seqs[i], r))
                return es_fail(ES_E_INVAL, "sequence %d asks for outputs of the head, and the "
                                           "session was made with head_outputs = 0", i);
    const uint64_t t0 = es_now_ns();
    if (s->fast) es_fast_prof_begin(s->fast);
    const es_batch_cb cb = {s->p.abort_cb, s->p.progress_cb, s->p.cb_user};
    es_status st;
    if (s->p.reference)
        st = es_batch_ref(s->m, seqs, n_seqs, &cb);
    else
        st = es_batch_fast(s->fast, s->m, s->stream ? es_stream_provider(s->stream) : NULL, seqs,
                           n_seqs, T, &cb);
    return finish_run(s, t0, T, st);
}

es_status es_session_route_counts(const es_session *s, int il, int64_t *counts, int cap)
{
    if (!s || !s->fast)
        return es_fail(ES_E_INVAL, "route counts: the session runs the reference path");
    return es_fast_route_counts(s->fast, il, counts, cap);
}

void es_session_stats(const es_session *s, es_run_stats *out) { *out = s->stats; }

static const char *const phase_names[ES_PHASE_COUNT] = {
    "norm",       "act_quant", "attn_proj",    "attention", "router",
    "expert_gate_up", "swiglu", "expert_down", "scatter_add", "barrier",
    "expert_wait", "dense_ffn", "head",       "other"};

const char *es_phase_name(es_phase p)
{
    return (int)p >= 0 && p < ES_PHASE_COUNT ? phase_names[p] : NULL;
}

es_status es_session_profile(const es_session *s, es_phase_profile *out)
{
    if (!s || !out) return es_fail(ES_E_INVAL, "es_session_profile: NULL argument");
    if (s->p.reference || !s->fast)
        return es_fail(ES_E_INVAL, "phase profile: the session runs the reference path");
    if (!s->have_profile)
        return es_fail(ES_E_INVAL, "phase profile: no request has completed in this session");
    *out = *es_fast_profile(s->fast);
    return ES_OK;
}

const es_model *es_session_model(const es_session *s) { return s ? s->m : NULL; }
