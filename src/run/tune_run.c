/* Making a tuning (tune_run.h): the storage characterization (cached per device) and one
 * profile request per candidate G; and estream tune --explain's run of a choice. */
#include "run/tune_run.h"

#include "core/outbuf.h"
#include "core/util.h"
#include "run/session.h"

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>

/* ---- storage characterization, cached per device ---- */

#define CACHE_MAX 256

typedef struct cache_row {
    uint64_t read_bytes;
    int depth, direct;
    double bw;
} cache_row;

typedef struct storage_cache {
    char path[1024]; /* "" when there is no cache directory */
    int n;
    cache_row rows[CACHE_MAX];
    int dirty;
} storage_cache;

/* ~/.cache/estream (or $XDG_CACHE_HOME/estream), created if missing; 0 if none. */
static int cache_dir(char *buf, size_t cap)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (xdg && xdg[0] == '/')
        n = snprintf(buf, cap, "%s/estream", xdg);
    else if (home && home[0] == '/')
        n = snprintf(buf, cap, "%s/.cache/estream", home);
    else
        return 0;
    if (n < 0 || (size_t)n >= cap) return 0;
    for (char *s = buf + 1; *s; s++) { /* mkdir -p */
        if (*s != '/') continue;
        *s = 0;
        const int ok = mkdir(buf, 0755) == 0 || errno == EEXIST;
        *s = '/';
        if (!ok) return 0;
    }
    return mkdir(buf, 0755) == 0 || errno == EEXIST;
}

/* The cache file of the device and file system that hold model_path. */
static void cache_open(storage_cache *c, const char *model_path)
{
    memset(c, 0, sizeof(*c));
    struct stat sb;
    struct statfs fs;
    char dir[900];
    if (stat(model_path, &sb) != 0 || statfs(model_path, &fs) != 0 ||
        !cache_dir(dir, sizeof(dir)))
        return;
    snprintf(c->path, sizeof(c->path), "%s/storage-%u-%u-%lx.txt", dir, major(sb.st_dev),
             minor(sb.st_dev), (unsigned long)fs.f_type);
    FILE *f = fopen(c->path, "r");
    if (!f) return;
    char line[256];
    int ok = fgets(line, sizeof(line), f) && strcmp(line, "estream-storage 1\n") == 0;
    while (ok && c->n < CACHE_MAX && fgets(line, sizeof(line), f)) {
        cache_row r;
        unsigned long long rb;
        char tail;
        if (sscanf(line, "%llu %d %d %lf%c", &rb, &r.depth, &r.direct, &r.bw, &tail) != 5 ||
            tail != '\n' || r.depth < 1 || r.depth > 64 || !(r.bw > 0) || rb == 0) {
            ok = 0; /* a damaged cache is measured again, not trusted */
            break;
        }
        r.read_bytes = rb;
        c->rows[c->n++] = r;
    }
    fclose(f);
    if (!ok) c->n = 0;
}

static const cache_row *cache_find(const storage_cache *c, uint64_t read_bytes, int depth,
                                   int direct)
{
    for (int i = 0; i < c->n; i++) {
        const cache_row *r = &c->rows[i];
        const double ratio = (double)r->read_bytes / (double)read_bytes;
        if (r->depth == depth && r->direct == direct && ratio > 0.9 && ratio < 1.1) return r;
    }
    return NULL;
}

static void cache_save(storage_cache *c)
{
    if (!c->dirty || !c->path[0]) return;
    es_outbuf *b = malloc(sizeof(*b));
    if (!b) return;
    if (es_outbuf_open(b, c->path) == ES_OK) {
        es_outbuf_puts(b, "estream-storage 1\n");
        for (int i = 0; i < c->n; i++)
            es_outbuf_printf(b, "%llu %d %d %.6g\n", (unsigned long long)c->rows[i].read_bytes,
                             c->rows[i].depth, c->rows[i].direct, c->rows[i].bw);
        if (es_outbuf_commit(b) != ES_OK)
            es_log(1, "cannot write the storage cache %s: %s", c->path, es_last_error());
    }
    free(b);
}

static es_status characterize(const es_model *m, const es_tune_run_params *rp, es_tune *t,
                              int *measured)
{
    storage_cache *c = calloc(1, sizeof(*c));
    if (!c) return es_fail(ES_E_NOMEM, "out of memory");
    if (!rp->no_cache) cache_open(c, es_gguf_path(m->gguf));
    const int direct = rp->direct_io;
    es_status st = ES_OK;
    int step = 0, total = t->n_profiles * ES_TUNE_N_DEPTHS;
    *measured = 0;
    for (int i = 0; i < t->n_profiles && st == ES_OK; i++) {
        es_tune_profile *p = &t->prof[i];
        const uint64_t all = es_stream_request_bytes(m, p->G);
        for (int q = 0; q < ES_TUNE_N_DEPTHS && st == ES_OK; q++, step++) {
            const int depth = es_tune_depths[q];
            const cache_row *hit = cache_find(c, p->bank_bytes, depth, direct);
            if (hit) {
                p->bw[q] = hit->bw;
                continue;
            }
            if (rp->progress) rp->progress(rp->user, "storage", step, total);
            /* enough reads to keep every slot busy a few times over, at least 192 MiB */
            uint64_t bytes = (uint64_t)3 * (uint64_t)depth * p->bank_bytes;
            if (bytes < ((uint64_t)192 << 20)) bytes = (uint64_t)192 << 20;
            if (bytes > all) bytes = all;
            es_stream_probe pr = {.groups = p->G, .queue_depth = depth,
                                  .io_backend = rp->io_backend, .direct_io = rp->direct_io,
                                  .max_bytes = bytes};
            /* the median of three passes: a shared virtual disk has moments */
            double bw3[3];
            for (int k = 0; k < 3 && st == ES_OK; k++)
                st = es_stream_probe_bandwidth(m, &pr, &bw3[k]);
            if (st == ES_OK) {
                const double lo = bw3[0] < bw3[1] ? bw3[0] : bw3[1];
                const double hi = bw3[0] < bw3[1] ? bw3[1] : bw3[0];
                p->bw[q] = bw3[2] < lo ? lo : bw3[2] > hi ? hi : bw3[2];
            }
            if (st == ES_OK && c->n < CACHE_MAX) {
                c->rows[c->n++] = (cache_row){p->bank_bytes, depth, direct, p->bw[q]};
                c->dirty = 1;
            }
            ++*measured;
        }
    }
    if (st == ES_OK) cache_save(c);
    free(c);
    if (st) return st;
    /* Q0: the smallest depth within 5 % of every G's best; when none is (a noisy device), the
     * depth whose worst ratio to a G's best is the highest */
    double best_worst = -1;
    for (int q = 0; q < ES_TUNE_N_DEPTHS; q++) {
        double worst = 1;
        for (int i = 0; i < t->n_profiles; i++) {
            double best = 0;
            for (int k = 0; k < ES_TUNE_N_DEPTHS; k++)
                if (t->prof[i].bw[k] > best) best = t->prof[i].bw[k];
            const double ratio = best > 0 ? t->prof[i].bw[q] / best : 1;
            if (ratio < worst) worst = ratio;
        }
        if (worst >= 0.95) {
            t->q0 = es_tune_depths[q];
            break;
        }
        if (worst > best_worst) {
            best_worst = worst;
            t->q0 = es_tune_depths[q];
        }
    }
    return ES_OK;
}

/* ---- profile requests ---- */

/* Banks for a profile run: enough to keep Q0 reads in flight, about 256 MiB. */
static int profile_banks(const es_tune_profile *p, int q0)
{
    int64_t b = (int64_t)(((uint64_t)256 << 20) / p->bank_bytes);
    if (b < q0 + 1) b = q0 + 1;
    const int64_t n = (int64_t)p->n_sparse * p->K;
    if (b > n) b = n;
    if (b > ES_STREAM_MAX_BANKS) b = ES_STREAM_MAX_BANKS;
    return (int)b;
}

static es_status profile_one(const es_model *m, const es_tune_run_params *rp, es_tune *t,
                             es_tune_profile *p, int measure_other)
{
    es_session_params sp = es_session_default_params();
    sp.n_threads = rp->n_threads;
    sp.kernels = rp->kernels;
    sp.max_tokens = (int)rp->n_ids;
    sp.head_outputs = 0; /* profiles are prefills */
    sp.stream = 1;
    sp.groups = p->G;
    sp.banks = profile_banks(p, t->q0);
    sp.queue_depth = t->q0;
    sp.io_backend = rp->io_backend;
    sp.direct_io = rp->direct_io;
    if (measure_other) {
        malloc_trim(0); /* freed heap would be counted as M_other */
        es_peak_rss_reset();
    }
    es_session *s = NULL;
    ES_TRY(es_session_create_rec(m, &sp, NULL, 1, &s));
    float *logits = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)m->hp.n_expert);
    int64_t *routes = calloc((size_t)p->n_sparse * (size_t)p->K, sizeof(int64_t));
    es_status st = logits && counts && routes ? ES_OK : es_fail(ES_E_NOMEM, "out of memory");
    const uint64_t t0 = es_now_ns();
    if (st == ES_OK) st = es_session_prefill(s, rp->ids, rp->n_ids, 0, logits);
    const uint64_t t1 = es_now_ns();
    for (int il = 0, w = 0; st == ES_OK && il < m->hp.n_layer; il++) {
        if (!es_layer_is_moe(&m->layers[il])) continue;
        st = es_session_route_counts(s, il, counts, m->hp.n_expert);
        for (int e = 0; st == ES_OK && e < m->hp.n_expert; e++)
            routes[(int64_t)w * p->K + e / p->G] += counts[e];
        w++;
    }
    const es_stream_record *r = es_session_stream_record(s);
    if (st == ES_OK && !r) st = es_fail(ES_E_INVAL, "profile: the run did not stream");
    if (st == ES_OK) st = es_tune_profile_from_record(p, r, routes, t0, t1);
    if (st == ES_OK && measure_other) {
        es_run_stats rs;
        es_session_stats(s, &rs);
        t->other_estimate = rs.other_bytes;
        const uint64_t peak = es_peak_rss_bytes();
        t->other_bytes = peak > rs.arena_bytes ? peak - rs.arena_bytes : 0;
    }
    free(logits);
    free(counts);
    free(routes);
    es_session_destroy(s);
    return st;
}

es_status es_tune_run(const es_model *m, const es_tune_run_params *rp, es_tune **out)
{
    *out = NULL;
    if (!rp->ids || rp->n_ids < 1 || rp->n_groups < 1 || rp->n_groups > ES_TUNE_MAX_G)
        return es_fail(ES_E_INVAL, "tune: a calibration prompt and 1..%d group sizes",
                       ES_TUNE_MAX_G);
    const uint64_t t_begin = es_now_ns();
    es_tune *t = calloc(1, sizeof(*t));
    if (!t) return es_fail(ES_E_NOMEM, "out of memory");
    es_status st = es_tune_model_id(es_gguf_path(m->gguf), &t->model_bytes, &t->model_hash);
    es_tune_cpu_name(t->cpu, sizeof(t->cpu));
    t->threads = rp->n_threads;
    snprintf(t->kernels, sizeof(t->kernels), "%s", rp->kernels ? rp->kernels : es_kernels_name());
    t->calib_tokens = (int)rp->n_ids;
    int n_sparse = 0;
    for (int il = 0; il < m->hp.n_layer; il++) n_sparse += es_layer_is_moe(&m->layers[il]);
    const int E = m->hp.n_expert;
    for (int i = 0; st == ES_OK && i < rp->n_groups; i++) {
        const int G = rp->groups[i];
        if (G < 1 || G > E) {
            st = es_fail(ES_E_INVAL, "a group of %d experts: this model has %d per layer", G, E);
            break;
        }
        for (int k = 0; k < t->n_profiles; k++)
            if (t->prof[k].G == G) st = es_fail(ES_E_INVAL, "group size %d given twice", G);
        if (st) break;
        es_tune_profile *p = &t->prof[t->n_profiles];
        if ((st = es_tune_profile_alloc(p, G, n_sparse, (E + G - 1) / G))) break;
        t->n_profiles++;
        p->bank_bytes = es_stream_bank_bytes(m, G);
    }
    int measured = 0;
    if (st == ES_OK) st = characterize(m, rp, t, &measured);
    if (st == ES_OK && rp->progress) rp->progress(rp->user, "storage", 1, 1);
    /* the smallest G first: M_other is measured on it */
    int order[ES_TUNE_MAX_G];
    for (int i = 0; i < t->n_profiles; i++) order[i] = i;
    for (int i = 1; i < t->n_profiles; i++)
        for (int k = i; k > 0 && t->prof[order[k]].G < t->prof[order[k - 1]].G; k--) {
            const int tmp = order[k];
            order[k] = order[k - 1];
            order[k - 1] = tmp;
        }
    for (int i = 0; st == ES_OK && i < t->n_profiles; i++) {
        if (rp->progress) rp->progress(rp->user, "profile", i, t->n_profiles);
        st = profile_one(m, rp, t, &t->prof[order[i]], i == 0);
    }
    if (st == ES_OK && rp->progress) rp->progress(rp->user, "profile", 1, 1);
    t->profile_seconds = (double)(es_now_ns() - t_begin) * 1e-9;
    if (st) {
        es_tune_destroy(t);
        return st;
    }
    *out = t;
    return ES_OK;
}

/* ---- estream tune --explain ---- */

es_status es_tune_explain(const es_model *m, const es_tune *t, const es_tune_choice *c,
                          const int32_t *ids, size_t n, int n_threads, es_tune_layer_times *layers,
                          int cap, int *n_layers, es_tune_explain_result *result)
{
    *n_layers = 0;
    const es_tune_profile *p = NULL;
    for (int i = 0; i < t->n_profiles && !p; i++)
        if (t->prof[i].G == c->groups) p = &t->prof[i];
    if (!p) return es_fail(ES_E_INVAL, "explain: the tuning has no profile of G %d", c->groups);
    /* the arena as chosen, without the session's budget check (the choice applied it) */
    es_session_params sp = es_session_default_params();
    sp.n_threads = n_threads;
    sp.max_tokens = (int)n;
    sp.head_outputs = 0;
    sp.groups = c->groups;
    sp.banks = c->banks;
    sp.queue_depth = c->qd;
    sp.io_limit_bytes_per_s = c->io_limit;
    malloc_trim(0); /* as before every run the configurator times: the same heap to start from */
    double *pred = calloc((size_t)p->n_sparse, sizeof(double));
    float *logits = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
    es_session *s = NULL;
    es_status st = pred && logits ? ES_OK : es_fail(ES_E_NOMEM, "out of memory");
    if (st == ES_OK) st = es_session_create_rec(m, &sp, NULL, 1, &s);
    const uint64_t t0 = es_now_ns();
    if (st == ES_OK) st = es_session_prefill(s, ids, n, 0, logits);
    const double seconds = (double)(es_now_ns() - t0) * 1e-9;
    if (st == ES_OK) {
        es_run_stats rs;
        es_session_stats(s, &rs);
        es_tune_predict(p, c->qd, c->banks, c->io_limit, ES_POLICY_EARLY, 1, pred);
        /* the layers' reads: bytes at the modelled bandwidth, and their read times in the
         * profile run (which had Q0 reads in flight) */
        const double bw = es_tune_bandwidth(p, c->qd < c->banks ? c->qd : c->banks, c->io_limit);
        const es_stream_record *r = es_session_stream_record(s);
        for (int w = 0; w < p->n_sparse && w < cap; w++) {
            es_tune_layer_times *l = &layers[w];
            *l = (es_tune_layer_times){.predicted_seconds = pred[w]};
            uint64_t last = 0; /* the layer's last group released: the layer is done */
            for (int k = 0; r && w < r->n_sparse && k < r->K; k++) {
                const uint64_t x = r->t_released[(int64_t)w * r->K + k];
                if (x > last) last = x;
            }
            l->measured_seconds = last > t0 ? (double)(last - t0) * 1e-9 : 0;
            for (int k = 0; k < p->K; k++) {
                const int64_t j = (int64_t)w * p->K + k;
                if (p->routes[j] == 0) continue;
                l->model_read_seconds += bw > 0 ? (double)p->bytes[j] / bw : 0;
                l->profile_read_seconds += p->l[j];
            }
            ++*n_layers;
        }
        if (result)
            *result = (es_tune_explain_result){.predicted_seconds = c->predicted,
                                               .measured_seconds = seconds,
                                               .bubble_rate = rs.bubble_rate};
    }
    es_session_destroy(s);
    free(logits);
    free(pred);
    return st;
}
