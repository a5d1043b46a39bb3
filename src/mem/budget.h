/*
 * The memory budget (DESIGN §5, §7): what a run needs besides the expert arena (M_other), and
 * the arena (G experts per bank, B banks) that fits the rest.
 *
 * DESIGN: M_other is measured, not modelled, where it can be: the process's resident memory when
 * the session is made (code, the tokenizer, the file's metadata pages), plus the bytes the
 * session reserves for activations and plans (es_big_bytes_live() before and after), plus the
 * non-expert weights the prefill will touch through the mapping (every attention, norm, router
 * and output tensor whole; of the token embedding only the rows a prompt can touch), plus the
 * logits the caller said it will hold, plus a fixed margin for thread stacks, the I/O ring and
 * small allocations. Each term is an upper bound of what it stands for, so the estimate errs on
 * the side of staying under the budget; the benchmark reports the measured peak next to it.
 */
#ifndef ES_BUDGET_H
#define ES_BUDGET_H

#include "model/model.h"

#define ES_BUDGET_MARGIN_BYTES ((uint64_t)24 << 20)
#define ES_BUDGET_MAX_GROUP 8 /* the default rule's largest G */

/* The process's resident memory now (VmRSS), 0 if unknown. */
uint64_t es_rss_bytes(void);

/* Bytes of non-expert weights a prefill of up to max_tokens tokens touches (upper bound). */
uint64_t es_budget_weight_bytes(const es_model *m, int64_t max_tokens);

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
