/*
 * The memory budget (docs/design.md §5, §7): what a run needs besides the expert arena (M_other), and
 * the arena (G experts per bank, B banks) that fits the rest.
 *
 * DESIGN: M_other is measured, not modelled, where it can be: the non-expert weights the
 * prefill reads through the mapping are touched first (es_budget_touch_weights), so the
 * process's resident memory when the session is made includes them as the kernel really maps
 * them (fault-around and large page-cache folios map more than the tensors' bytes, especially
 * in a GGUF where they sit between expert tensors); to that come the bytes the session reserves
 * for activations and plans (es_big_bytes_live() before and after), a row buffer per thread
 * for the token embedding (read from the file, not the mapping: es_fast_embed_from_file), the
 * logits the caller said it will hold, the head's chunk of logit rows only when the session's
 * batches may ask for head outputs (es_session_params.head_outputs), and a small margin for
 * thread stacks, the I/O ring and small allocations. Nothing is counted that the run does not
 * use: the estimate is held within 15 % (or 8 MiB) above the measured peak less the arena by
 * tests/test_budget.c, and every summary prints both.
 */
#ifndef ES_BUDGET_H
#define ES_BUDGET_H

#include "model/model.h"

#define ES_BUDGET_MAX_GROUP 8 /* the default rule's largest G */
/* A refusal names the smallest budget that works rounded up to a MiB after adding this: the
 * process's memory when a session is made moves by a few hundred KiB from one run to the next
 * (page-cache folios mapped, the allocator's heap), and running again with the budget named
 * must work. */
#define ES_BUDGET_RERUN_BYTES ((uint64_t)1 << 20)

/* What the estimate adds for memory it does not size term by term: thread stacks, the I/O
 * ring, small allocations (measured: see budget.c). */
uint64_t es_budget_margin_bytes(int n_threads);

/* The process's resident memory now (VmRSS), 0 if unknown. */
uint64_t es_rss_bytes(void);
/* The same after the allocator has given back the memory it holds free (malloc_trim): what the
 * process holds live. Freed heap that glibc keeps (its thresholds rise after a large free) would
 * otherwise count as M_other, more after each session made and destroyed. */
uint64_t es_budget_live_rss_bytes(void);

/* Reads one byte per page of every non-expert tensor but the token embedding (through the
 * model's mapping), so that they are resident and counted in es_rss_bytes(). */
void es_budget_touch_weights(const es_model *m);

typedef struct es_budget_plan {
    int resident;        /* 1: every expert fits with M_other: no arena, no streaming */
    int groups, banks;   /* the arena, when not resident */
    size_t bank_bytes;
    uint64_t min_budget; /* the smallest budget with a working arena (2 banks of G = 1, or
                            the requested G/B) */
} es_budget_plan;

/* Chooses the arena for `budget` bytes given M_other = other. groups/banks > 0 fix G/B (the
 * other is then chosen: largest B, or largest G <= 8); both 0: the largest G <= 8 with at least
 * 2 banks, and as many banks as fit, up to one per group of the request. force_stream: never
 * answer resident. budget 0 with fixed G/B: no check, defaults G 8 / B 2.
 * ES_E_BUDGET when nothing fits, with the smallest budget that works in the message. */
es_status es_budget_plan_make(const es_model *m, uint64_t budget, uint64_t other, int groups,
                              int banks, int force_stream, es_budget_plan *out);

#endif
