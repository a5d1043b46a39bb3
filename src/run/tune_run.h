/* Making a tuning (DESIGN §7 steps 1-2): the storage characterization and the profile requests.
 *
 * DESIGN
 * - Storage: for each candidate G, the loader's grouped reads of the model (the same extents in
 *   the same order, O_DIRECT, no compute, es_stream_probe_bandwidth) at depths 1, 2, 4, 8, the median of three passes
 *   of at least 192 MiB each;
 *   Q0 = the smallest depth within 5 % of every G's best. Results are cached per device and
 *   file system in ~/.cache/estream/storage-MAJOR-MINOR-FSTYPE.txt (or $XDG_CACHE_HOME), keyed
 *   by read size (within 10 %), depth and O_DIRECT, so a second model on the same disk measures
 *   only read sizes it has not seen. A damaged cache is measured again.
 * - Profiles: one request per G on the calibration prompt, streaming with G, Q0 and about
 *   256 MiB of banks, the streamer recording every group's timestamps (tune.h derives N_w, X_k,
 *   V_k). The smallest G runs first; its peak resident memory less its arena is M_other.
 */
#ifndef ES_TUNE_RUN_H
#define ES_TUNE_RUN_H

#include "tune/tune.h"

typedef struct es_tune_run_params {
    const int32_t *ids;    /* the calibration prompt */
    size_t n_ids;
    const int *groups;     /* candidate G (1..ES_TUNE_MAX_G of them) */
    int n_groups;
    int n_threads;         /* > 0 */
    const char *kernels;   /* NULL: the default table */
    es_io_backend io_backend;
    int direct_io;         /* 1: O_DIRECT reads, as es_session_params */
    int no_cache;          /* measure the storage even if it is cached */
    /* progress (may be NULL): phase "storage" or "profile", steps done of total */
    void (*progress)(void *user, const char *phase, int done, int total);
    void *user;
} es_tune_run_params;

/* Characterizes the storage and profiles every candidate G; *out is new (es_tune_free). */
es_status es_tune_run(const es_model *m, const es_tune_run_params *p, es_tune **out);

#endif
