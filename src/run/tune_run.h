/* Making a tuning (docs/design.md §7 steps 1-2): the storage characterization and the profile requests;
 * and checking one: --explain's run of a choice.
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
 * - Explain: a choice's arena runs the calibration prompt once with the streamer recording; a
 *   layer is done when its last group is released, which the recurrence's layer_done predicts.
 *   Both live here, not in tune/, because they drive sessions (the floor above the model).
 */
#ifndef ES_TUNE_RUN_H
#define ES_TUNE_RUN_H

#include "tune/tune.h"

/* es_tune_run() and its params, and es_tune_explain() (which runs a choice once with the
 * streamer recording, to set the model's predicted layer times against the measured ones), are
 * public: include/estream.h. */

#endif
