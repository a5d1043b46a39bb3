/* The configurator's model and choice (tune.h): profiles from streamer records, the max-plus
 * recurrence, the selection for a budget. */
#include "tune/tune.h"

#include "core/infile.h"
#include "core/util.h"
#include "pack/pack.h"
#include "stream/arena.h"
#include "stream/budget.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const int es_tune_depths[ES_TUNE_N_DEPTHS] = {1, 2, 4, 8};

es_status es_tune_profile_alloc(es_tune_profile *p, int G, int n_sparse, int K)
{
    memset(p, 0, sizeof(*p));
    if (G < 1 || n_sparse < 1 || K < 1 || (int64_t)n_sparse * K > ((int64_t)1 << 24))
        return es_fail(ES_E_INVAL, "profile: %d layers x %d groups of %d", n_sparse, K, G);
    const size_t n = (size_t)n_sparse * (size_t)K;
    p->G = G;
    p->n_sparse = n_sparse;
    p->K = K;
    p->ne = calloc((size_t)n_sparse, sizeof(double));
    p->x = calloc(n, sizeof(double));
    p->v = calloc(n, sizeof(double));
    p->l = calloc(n, sizeof(double));
    p->bytes = calloc(n, sizeof(uint64_t));
    p->routes = calloc(n, sizeof(int64_t));
    if (!p->ne || !p->x || !p->v || !p->l || !p->bytes || !p->routes) {
        es_tune_profile_free(p);
        return es_fail(ES_E_NOMEM, "out of memory for a profile");
    }
    return ES_OK;
}

void es_tune_profile_free(es_tune_profile *p)
{
    free(p->ne);
    free(p->x);
    free(p->v);
    free(p->l);
    free(p->bytes);
    free(p->routes);
    p->ne = p->x = p->v = p->l = NULL;
    p->bytes = NULL;
    p->routes = NULL;
}

static double secs(uint64_t a, uint64_t b) { return b > a ? (double)(b - a) * 1e-9 : 0.0; }

es_status es_tune_profile_from_record(es_tune_profile *p, const es_stream_record *r,
                                      const int64_t *routes, uint64_t t_start, uint64_t t_stop)
{
    if (r->n_sparse != p->n_sparse || r->K != p->K || r->G != p->G)
        return es_fail(ES_E_INVAL, "profile: the record's shape differs from the profile's");
    uint64_t prev_end = t_start; /* the executor finished the previous layer's experts */
    for (int w = 0; w < p->n_sparse; w++) {
        int64_t prev = -1; /* previous routed group of this layer */
        for (int k = 0; k < p->K; k++) {
            const int64_t j = (int64_t)w * p->K + k;
            p->bytes[j] = r->bytes[j];
            p->routes[j] = routes[j];
            p->x[j] = p->v[j] = 0;
            p->l[j] = r->t_submit[j] && r->t_read_done[j] ? secs(r->t_submit[j], r->t_read_done[j])
                                                          : 0;
            if (routes[j] == 0) continue;
            if (!r->t_want[j] || !r->t_acquired[j] || !r->t_released[j] || !r->t_ready[j])
                return es_fail(ES_E_INVAL, "profile: layer %d group %d was not recorded", w, k);
            if (prev < 0)
                p->ne[w] = secs(prev_end, r->t_want[j]);
            else /* the gap between two groups is part of the previous one's work */
                p->x[prev] += secs(r->t_released[prev], r->t_want[j]);
            p->x[j] = secs(r->t_acquired[j], r->t_released[j]);
            p->v[j] = r->t_read_done[j] ? secs(r->t_read_done[j], r->t_ready[j]) : 0;
            prev = j;
        }
        if (prev < 0) return es_fail(ES_E_INVAL, "profile: layer %d had no routes", w);
        prev_end = r->t_released[prev];
    }
    p->tail = secs(prev_end, t_stop);
    p->seconds = secs(t_start, t_stop);
    return ES_OK;
}

double es_tune_bandwidth(const es_tune_profile *p, int q, double io_limit)
{
    int i = 0; /* the deepest characterized depth <= q */
    while (i + 1 < ES_TUNE_N_DEPTHS && es_tune_depths[i + 1] <= q) i++;
    double bw = p->bw[i];
    if (io_limit > 0 && (bw <= 0 || io_limit < bw)) bw = io_limit;
    return bw;
}

int64_t es_tune_routed_groups(const es_tune_profile *p)
{
    int64_t n = 0;
    for (int64_t j = 0; j < (int64_t)p->n_sparse * p->K; j++) n += p->routes[j] > 0;
    return n;
}

static double dmax(double a, double b) { return a > b ? a : b; }

double es_tune_predict(const es_tune_profile *p, int q, int b, double io_limit, es_policy pol,
                       int verify, double *layer_done)
{
    const int64_t N = es_tune_routed_groups(p);
    q = q < 1 ? 1 : q > 64 ? 64 : q;
    if (b > N) b = (int)(N < ES_STREAM_MAX_BANKS ? N : ES_STREAM_MAX_BANKS);
    b = b < 1 ? 1 : b > ES_STREAM_MAX_BANKS ? ES_STREAM_MAX_BANKS : b;
    const double bw = es_tune_bandwidth(p, q < b ? q : b, io_limit);
    /* ring buffers of the last max(q, b) completions */
    const int R = (q > b ? q : b) + 1;
    double pr[ES_STREAM_MAX_BANKS + 65], fr[ES_STREAM_MAX_BANKS + 65];
    ES_ASSERT(R <= (int)(sizeof(pr) / sizeof(pr[0])));
    double d_last = 0, p_last = 0, f_last = 0, f_layer = 0;
    int64_t n = 0;
    for (int w = 0; w < p->n_sparse; w++) {
        const double t_ne = f_layer + p->ne[w];
        int first = 1;
        for (int k = 0; k < p->K; k++) {
            const int64_t j = (int64_t)w * p->K + k;
            if (p->routes[j] == 0) continue;
            double a = pol == ES_POLICY_EARLY           ? 0
                       : pol == ES_POLICY_AFTER_ROUTING ? t_ne
                       : first                          ? t_ne
                                                        : f_last;
            if (n >= q) a = dmax(a, pr[(n - q) % R]);
            if (n >= b) a = dmax(a, fr[(n - b) % R]);
            const double d = dmax(a, d_last) + (bw > 0 ? (double)p->bytes[j] / bw : 0);
            const double pp = dmax(d, p_last) + (verify ? p->v[j] : 0);
            const double s = dmax(dmax(pp, t_ne), first ? t_ne : f_last);
            const double f = s + p->x[j];
            pr[n % R] = pp;
            fr[n % R] = f;
            d_last = d;
            p_last = pp;
            f_last = f;
            first = 0;
            n++;
        }
        if (first) f_last = t_ne; /* no routes in this layer */
        f_layer = f_last;
        if (layer_done) layer_done[w] = f_layer;
    }
    return f_layer + p->tail;
}

int64_t es_tune_max_banks(const es_tune_profile *p, uint64_t budget, uint64_t other)
{
    if (p->bank_bytes == 0 || budget < other + p->bank_bytes) return 0;
    int64_t bmax = (int64_t)((budget - other) / p->bank_bytes);
    const int64_t useful = es_tune_routed_groups(p);
    if (bmax > useful) bmax = useful;
    return bmax > ES_STREAM_MAX_BANKS ? ES_STREAM_MAX_BANKS : bmax;
}

es_status es_tune_select(const es_tune *t, uint64_t budget, uint64_t other, double io_limit,
                         es_policy pol, int verify, es_tune_choice *out)
{
    memset(out, 0, sizeof(*out));
    out->budget = budget;
    out->io_limit = io_limit;
    const int Q0 = t->q0 > 0 ? t->q0 : 4;
    uint64_t min_budget = UINT64_MAX;
    for (int i = 0; i < t->n_profiles; i++)
        if (t->prof[i].bank_bytes && other + t->prof[i].bank_bytes < min_budget)
            min_budget = other + t->prof[i].bank_bytes;
    out->min_budget = min_budget;
    /* Depths: Q0 first (the storage's own answer), then the other characterized ones: the
     * loader checks each group before it submits the next read, so a deeper queue can keep
     * the device busy where the device alone gains nothing from it. */
    int depths[ES_TUNE_N_DEPTHS + 1], n_depths = 0;
    depths[n_depths++] = Q0;
    for (int k = 0; k < ES_TUNE_N_DEPTHS; k++)
        if (es_tune_depths[k] != Q0) depths[n_depths++] = es_tune_depths[k];
    /* The predicted time never grows with B (more banks only relax a_n >= f_{n-B}, and the
     * recurrence is made of max and + alone, which floating point keeps monotone), nor with Q.
     * So pass 1 needs only B = B_max per (G, depth) for the fastest prediction, and pass 2 finds
     * by bisection, per (G, depth), the smallest B within 0.1 % of it: the same answer as trying
     * every B (the smallest arena; ties: the first profile, then the first depth tried), with
     * O(log B_max) predictions instead of B_max. */
    double best = INFINITY;
    for (int i = 0; i < t->n_profiles; i++) {
        const es_tune_profile *p = &t->prof[i];
        const int64_t bmax = es_tune_max_banks(p, budget, other);
        for (int k = 0; k < n_depths && bmax >= 1; k++) {
            const int q = depths[k] < bmax ? depths[k] : (int)bmax;
            const double tp = es_tune_predict(p, q, (int)bmax, io_limit, pol, verify, NULL);
            if (tp < best) best = tp;
        }
    }
    const double limit = best * 1.001;
    uint64_t best_arena = UINT64_MAX;
    for (int i = 0; i < t->n_profiles; i++) {
        const es_tune_profile *p = &t->prof[i];
        const int64_t bmax = es_tune_max_banks(p, budget, other);
        for (int k = 0; k < n_depths; k++) {
            /* depth k runs with q = min(depth, B); a depth above B is the same as q = B, which
             * the first depth (Q0) already covers, so the others start at B = depth */
            int64_t lo = k == 0 ? 1 : depths[k], hi = bmax;
            if (lo > hi) continue;
            const int q_hi = depths[k] < hi ? depths[k] : (int)hi;
            double t_hi = es_tune_predict(p, q_hi, (int)hi, io_limit, pol, verify, NULL);
            if (!(t_hi <= limit)) continue;
            while (lo < hi) { /* invariant: B = hi meets the limit, with time t_hi */
                const int64_t mid = lo + (hi - lo) / 2;
                const int q = depths[k] < mid ? depths[k] : (int)mid;
                const double tm = es_tune_predict(p, q, (int)mid, io_limit, pol, verify, NULL);
                if (tm <= limit) {
                    hi = mid;
                    t_hi = tm;
                } else {
                    lo = mid + 1;
                }
            }
            const uint64_t arena = (uint64_t)hi * p->bank_bytes;
            if (arena < best_arena) {
                best_arena = arena;
                out->groups = p->G;
                out->banks = (int)hi;
                out->qd = depths[k] < hi ? depths[k] : (int)hi;
                out->predicted = t_hi;
            }
        }
    }
    if (out->groups == 0) {
        if (min_budget == UINT64_MAX) return es_fail(ES_E_INVAL, "the tuning holds no profile");
        return es_fail(
            ES_E_BUDGET,
            "a memory budget of %.1f MiB is too small: this run needs %llu MiB "
            "besides the experts and one bank of the smallest group; the smallest "
            "budget that works is %llu MiB",
            (double)budget / (1 << 20), (unsigned long long)((other + (1 << 20) - 1) >> 20),
            (unsigned long long)((min_budget + ES_BUDGET_RERUN_BYTES + (1 << 20) - 1) >> 20));
    }
    return ES_OK;
}

/* ---- the public view (include/estream.h): estream tune's choices and what a tuning holds ---- */

/* M_other for estream tune's own choices: the larger of the measured and the estimated (the
 * session adds what the profile run measured beyond its estimate instead, tuned_plan()), and
 * room for the arena's rounding to huge pages (the model counts banks in bytes). */
static uint64_t choice_other(const es_tune *t)
{
    return (t->other_bytes > t->other_estimate ? t->other_bytes : t->other_estimate) +
           ES_ARENA_SLACK_BYTES;
}

es_status es_tune_choose(es_tune *t, uint64_t budget, double io_limit, es_tune_choice *out)
{
    /* chosen into the free slot past the kept ones; kept only while one more stays free */
    es_tune_choice *c = &t->choices[t->n_choices];
    const es_status st = es_tune_select(t, budget, choice_other(t), io_limit, ES_POLICY_EARLY,
                                        1, c);
    *out = *c;
    if (st == ES_OK && t->n_choices < ES_TUNE_MAX_CHOICES - 1) t->n_choices++;
    return st;
}

int64_t es_tune_bank_limit(const es_tune *t, int groups, uint64_t budget)
{
    for (int i = 0; i < t->n_profiles; i++)
        if (t->prof[i].G == groups) return es_tune_max_banks(&t->prof[i], budget, choice_other(t));
    return 0;
}

void es_tune_describe(const es_tune *t, es_tune_desc *out)
{
    memset(out, 0, sizeof(*out));
    out->cpu = t->cpu;
    out->kernels = t->kernels;
    out->n_threads = t->threads;
    out->calib_tokens = t->calib_tokens;
    out->q0 = t->q0;
    for (int q = 0; q < ES_TUNE_N_DEPTHS; q++) out->depths[q] = es_tune_depths[q];
    out->other_bytes = t->other_bytes;
    out->other_estimate_bytes = t->other_estimate;
    out->select_other_bytes = choice_other(t);
    out->profile_seconds = t->profile_seconds;
    out->n_profiles = t->n_profiles;
    for (int i = 0; i < t->n_profiles; i++) {
        const es_tune_profile *p = &t->prof[i];
        es_tune_profile_desc *d = &out->profiles[i];
        d->groups = p->G;
        d->bank_bytes = p->bank_bytes;
        d->seconds = p->seconds;
        for (int q = 0; q < ES_TUNE_N_DEPTHS; q++) d->bytes_per_second[q] = p->bw[q];
    }
    out->n_choices = t->n_choices;
    out->choices = t->choices;
}

es_status es_tune_model_id(const char *path, uint64_t *bytes, uint64_t *hash)
{
    *bytes = *hash = 0;
    int fd;
    uint64_t file_size;
    ES_TRY(es_infile_open(path, &fd, &file_size));
    const size_t cap = (size_t)4 << 20;
    const size_t want = file_size < cap ? (size_t)file_size : cap;
    uint8_t *buf = malloc(want ? want : 1);
    if (!buf) {
        close(fd);
        return es_fail(ES_E_NOMEM, "out of memory");
    }
    size_t got = 0;
    while (got < want) {
        const ssize_t r = pread(fd, buf + got, want - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    es_status st = ES_OK;
    if (got != want)
        st = es_fail(ES_E_IO, "read %s: %s", path, got < want ? "short read" : strerror(errno));
    else {
        *bytes = file_size;
        *hash = es_pack_checksum(buf, got);
    }
    free(buf);
    return st;
}

void es_tune_cpu_name(char *buf, size_t cap)
{
    snprintf(buf, cap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "model name", 10) != 0 && strncmp(line, "Model", 5) != 0) continue;
        const char *c = strchr(line, ':');
        if (!c) continue;
        c++;
        while (*c == ' ' || *c == '\t') c++;
        size_t n = strcspn(c, "\n");
        if (n >= cap) n = cap - 1;
        memcpy(buf, c, n);
        buf[n] = 0;
        break;
    }
    fclose(f);
}

char *es_tune_default_path(const char *model_path)
{
    const size_t n = strlen(model_path);
    char *s = malloc(n + 6);
    if (s) {
        memcpy(s, model_path, n);
        memcpy(s + n, ".tune", 6);
    }
    return s;
}
