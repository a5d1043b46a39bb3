/*
 * The configurator (docs/design.md §6-7): profiles of one request per candidate group size G, the
 * max-plus model of the streaming pipeline that predicts a request's time for any (Q, B) from
 * them, the choice of (G, B, Q) for a budget, and the "<model>.tune" file that keeps it all.
 *
 * DESIGN
 * - A profile (one per G) is derived from the timestamps the streamer records during one
 *   calibration request (es_stream_record): per sparse layer the non-expert time N_w (from the
 *   previous layer's last expert group to this layer's first acquire: attention, router, the
 *   dense parts); per group k the execution time X_k (acquired -> released, plus the gap to the
 *   next acquire), the checksum time V_k (last byte arrived -> published), its bytes and routes;
 *   the time after the last group (output head). Read service times come from the storage
 *   characterization (bandwidth per read size and queue depth), not from the profile run, so
 *   one profile serves every Q and every --io-limit.
 * - The model (docs/design.md §6, with the device and the loader as in-order servers). For the request's
 *   routed groups n = 1..N in sequence order, queue depth q, banks b, group n in layer w:
 *     T_ne(w) = f(last group of layer w-1) + N_w                      (0 before the first)
 *     a_n = max(gate_n, p_{n-q}, f_{n-b})     read start: a slot and a bank free, policy gate
 *     d_n = max(a_n, d_{n-1}) + L_n           L_n = bytes_n / bw(G, min(q, b)), capped by the
 *                                             --io-limit; the device serves reads in order
 *     p_n = max(d_n, p_{n-1}) + V_n           the loader checks the records, in order
 *     s_n = max(p_n, T_ne(w), f_{n-1})
 *     f_n = s_n + X_n
 *   gate_n: early 0; after-routing T_ne(w); on-demand T_ne(w) for a layer's first group, else
 *   f_{n-1}. The request takes f_N + tail.
 * - Choice: B_max(G) = (budget - M_other) / bank_bytes(G) (at most ES_STREAM_MAX_BANKS and one
 *   bank per routed group); every B <= B_max(G) and every characterized depth q <= B (Q0
 *   first); the fastest (G, B, Q) wins, and among those within 0.1 % of the fastest the smallest
 *   arena. The prediction never grows with B, so B_max gives each (G, depth)'s fastest and a
 *   bisection its smallest B within the limit: the same choice as trying every B. Q0 alone is not enough: the loader checks each group's records before
 *   it submits the next read, so with Q = 1 the device idles during the checksums, which a
 *   deeper queue hides when reading is the bottleneck (measured: 4.7 % at 800 MB/s).
 */
#ifndef ES_TUNE_H
#define ES_TUNE_H

#include "estream.h"
#include "model/model.h"
#include "stream/pipeline.h"

/* ES_TUNE_MAX_G (candidate group sizes) and ES_TUNE_N_DEPTHS (queue depths characterized: 1,
 * 2, 4, 8) are public, with es_tune_choice, es_tune_run(), es_tune_choose(), es_tune_describe(),
 * es_tune_save() and es_tune_default_path(): include/estream.h. */
#define ES_TUNE_MAX_CHOICES 64

extern const int es_tune_depths[ES_TUNE_N_DEPTHS];

/* One candidate G: its profile request and the storage bandwidth at its read size. */
typedef struct es_tune_profile {
    int G, n_sparse, K;        /* K groups per sparse layer; n_seq = n_sparse * K */
    uint64_t bank_bytes;       /* es_stream_bank_bytes(m, G) */
    double seconds;            /* the profile request, measured */
    double tail;               /* seconds after the last group */
    double bw[ES_TUNE_N_DEPTHS]; /* bytes/s reading groups of this G at each depth */
    double *ne;                /* [n_sparse] N_w */
    double *x, *v;             /* [n_seq] X_k, V_k (0 for a group without routes) */
    double *l;                 /* [n_seq] read time measured in the profile run (submitted ->
                                  last byte; 0 if not read): shown by --explain, not used by
                                  the model, which takes L_k from the storage figures */
    uint64_t *bytes;           /* [n_seq] */
    int64_t *routes;           /* [n_seq] */
} es_tune_profile;

struct es_tune {
    uint64_t model_bytes, model_hash;
    char cpu[128];
    char kernels[16];
    int threads;
    int calib_tokens;
    int q0;
    uint64_t other_bytes;      /* M_other measured on the smallest-G profile run (its peak
                                  resident memory less the arena) */
    uint64_t other_estimate;   /* the session's estimate of M_other for that run (stream/budget.h) */
    double profile_seconds;    /* storage characterization + profile requests */
    int n_profiles;
    es_tune_profile prof[ES_TUNE_MAX_G];
    int n_choices;             /* es_tune_choose() keeps at most ES_TUNE_MAX_CHOICES - 1 */
    es_tune_choice choices[ES_TUNE_MAX_CHOICES]; /* what `estream tune` chose for its budgets */
};

/* Allocates p's arrays for n_sparse x K groups (zeroed). ES_E_NOMEM. */
es_status es_tune_profile_alloc(es_tune_profile *p, int G, int n_sparse, int K);
void es_tune_profile_free(es_tune_profile *p);

/* Fills p's timings from a streamer record of one request that ran from t_start to t_stop
 * (es_now_ns) with route counts routes[n_seq]. ES_E_INVAL if the record is incomplete (a
 * routed group never acquired or released). */
es_status es_tune_profile_from_record(es_tune_profile *p, const es_stream_record *r,
                                      const int64_t *routes, uint64_t t_start, uint64_t t_stop);

/* Bandwidth the model assumes for G's reads with q in flight and an io limit (0 = none). */
double es_tune_bandwidth(const es_tune_profile *p, int q, double io_limit);

/* The recurrence: predicted seconds of the profile's request with depth q and b banks under
 * the policy (verify: the loader checks records). layer_done [n_sparse] (may be NULL) gets each
 * sparse layer's last group's completion, seconds from the request start. */
double es_tune_predict(const es_tune_profile *p, int q, int b, double io_limit, es_policy pol,
                       int verify, double *layer_done);

/* The routed groups of p's request (the most banks that can help). */
int64_t es_tune_routed_groups(const es_tune_profile *p);

/* B_max(G): the most banks of p's G worth having under the budget with M_other = other (at most
 * one per routed group and ES_STREAM_MAX_BANKS); 0 when not one bank fits. */
int64_t es_tune_max_banks(const es_tune_profile *p, uint64_t budget, uint64_t other);

/* Chooses (G, B, Q) for `budget` with M_other = other. ES_E_BUDGET (message: the smallest
 * budget that works) when no G has one bank. */
es_status es_tune_select(const es_tune *t, uint64_t budget, uint64_t other, double io_limit,
                         es_policy pol, int verify, es_tune_choice *out);

/* Identity of a model file: its size and XXH3-64 of its first 4 MiB (the header). */
es_status es_tune_model_id(const char *path, uint64_t *bytes, uint64_t *hash);
/* This CPU's name (/proc/cpuinfo "model name", else the architecture). */
void es_tune_cpu_name(char *buf, size_t cap);

#endif
