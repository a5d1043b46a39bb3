/*
 * es_session: one run's state on an immutable model (STYLE §11; llama.cpp's context).
 *
 * DESIGN: the session owns everything a prefill changes: a copy of the kernel table it was
 * created with (so a later es_kernels_select() cannot change the format of buffers it already
 * sized), and the fast path's pool, activation buffers and plans (forward.c). Buffers are sized
 * for max_tokens at creation when it is given (so the memory a run needs is known before it
 * starts: the expert arena will be sized from what is left of a budget); otherwise they grow to
 * the longest prompt. Every size that is freed is the size that was allocated, kept beside the
 * pointer. The MoE stage takes its experts from a provider (moe/provider.h); today the
 * all-resident one, which reads every expert through the model's mapping.
 */
#include "model/session.h"

#include "core/util.h"
#include "model/forward.h"
#include "quant/kern.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct es_session {
    const es_model *m;
    es_session_params p;
    es_kern kern;        /* the table this session's buffers are in */
    es_fast *fast;       /* NULL for a reference session */
    es_run_stats stats;
};

es_session_params es_session_default_params(void)
{
    return (es_session_params){0};
}

static int online_cpus(void)
{
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c < 1 ? 1 : c > ES_MAX_THREADS ? ES_MAX_THREADS : (int)c;
}

static es_status check_params(const es_model *m, const es_session_params *p)
{
    if (m->vocab_only) return es_fail(ES_E_INVAL, "the model was opened vocabulary-only");
    if (p->n_threads < 0 || p->n_threads > ES_MAX_THREADS)
        return es_fail(ES_E_INVAL, "thread count %d is outside 1..%d (0: online CPUs)",
                       p->n_threads, ES_MAX_THREADS);
    if (p->plan_capacity < 0) return es_fail(ES_E_INVAL, "plan capacity must be >= 0");
    if (p->max_tokens < 0 || p->max_tokens > m->hp.n_ctx)
        return es_fail(ES_E_INVAL, "max tokens %d is outside 0..%d (the model's context)",
                       p->max_tokens, m->hp.n_ctx);
    return ES_OK;
}

es_status es_session_create(const es_model *m, const es_session_params *params, es_session **out)
{
    *out = NULL;
    if (!m) return es_fail(ES_E_INVAL, "es_session_create: NULL model");
    es_session_params p = params ? *params : es_session_default_params();
    ES_TRY(check_params(m, &p));
    if (p.n_threads == 0) p.n_threads = online_cpus();
    es_session *s = calloc(1, sizeof(*s));
    if (!s) return es_fail(ES_E_NOMEM, "out of memory for a session");
    s->m = m;
    es_status st = ES_OK;
    p.kernels = NULL; /* not kept: the table is copied below */
    s->p = p;
    s->stats.n_threads = p.reference ? 1 : p.n_threads;
    if (p.reference) {
        s->stats.kernels = "reference";
        *out = s;
        return ES_OK;
    }
    const char *isa = params && params->kernels ? params->kernels : es_kern_default()->isa;
    if (!es_kern_get(isa, &s->kern)) {
        st = es_kern_isa_available(isa)
                 ? es_fail(ES_E_INVAL, "unknown kernel table '%s' (scalar, avx2, avx512)", isa)
                 : es_fail(ES_E_UNSUPPORTED, "this CPU or OS cannot run the %s kernels", isa);
        goto fail;
    }
    s->stats.kernels = s->kern.isa;
    if ((st = es_fast_create(m, &s->kern, p.n_threads, p.plan_capacity, 0, &s->fast))) goto fail;
    if (p.max_tokens && (st = es_fast_reserve(s->fast, m, p.max_tokens))) goto fail;
    *out = s;
    return ES_OK;
fail:
    es_session_destroy(s);
    return st;
}

void es_session_destroy(es_session *s)
{
    if (!s) return;
    es_fast_destroy(s->fast, &s->m->hp);
    free(s);
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
    es_status st;
    if (s->p.reference) {
        st = es_forward_ref(s->m, ids, n, all_logits, out);
    } else {
        st = es_fast_forward(s->fast, s->m, NULL, ids, n, all_logits, out);
    }
    const double secs = (double)(es_now_ns() - t0) * 1e-9;
    s->stats.seconds = secs;
    s->stats.peak_rss_bytes = es_peak_rss_bytes();
    return st;
}

es_status es_session_route_counts(const es_session *s, int il, int64_t *counts, int cap)
{
    if (!s || !s->fast)
        return es_fail(ES_E_INVAL, "route counts: the session runs the reference path");
    return es_fast_route_counts(s->fast, il, counts, cap);
}

void es_session_stats(const es_session *s, es_run_stats *out) { *out = s->stats; }

const es_model *es_session_model(const es_session *s) { return s ? s->m : NULL; }
