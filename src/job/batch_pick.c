/*
 * The batch former (include/estream.h es_batch_pick): which waiting units make the next batch.
 * estream score and embed, estream serve's executor and the Python package form their batches
 * with it, so a job batches the same way whoever runs it.
 *
 * DESIGN: the first unit always goes (nothing waits behind a unit forever, and one larger than
 * the budget runs alone); the queue is then scanned in order for units that still fit, so a
 * long unit that does not fit the room left keeps its place while shorter ones behind it fill
 * the batch: under a memory budget each batch costs a whole pass over the experts, and a fuller
 * one reads each expert for more tokens. Outputs never depend on the batch (es_session_run's
 * batch invariance), only the throughput does.
 */
#include "estream.h"

int es_batch_pick(const int64_t *n_tokens, const int *n_seqs, int n_units, int64_t batch_tokens,
                  int max_seqs, int *pick)
{
    int n = 0;
    int64_t tokens = 0;
    int seqs = 0;
    for (int i = 0; i < n_units && tokens < batch_tokens && seqs < max_seqs; i++) {
        if (n > 0 && (tokens + n_tokens[i] > batch_tokens || seqs + n_seqs[i] > max_seqs))
            continue; /* too large for the room left: it stays, in its place */
        pick[n++] = i;
        tokens += n_tokens[i];
        seqs += n_seqs[i];
    }
    return n;
}
