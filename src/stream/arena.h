/*
 * The expert arena: B banks of one fixed size, each holding the expert data of one group of G
 * experts (docs/design.md §5). Allocated once per session, aligned for O_DIRECT, backed by huge pages
 * where the kernel gives them, and pre-faulted, so the loader never takes a page fault on the
 * read path and the memory the arena costs is resident (and counted) from the start.
 *
 * The arena is only memory. Who may write a bank and when (the residency protocol: Available ->
 * Filling -> Ready -> InUse -> Available) is the pipeline's business (stream/pipeline.c).
 */
#ifndef ES_ARENA_H
#define ES_ARENA_H

#include "core/util.h"

typedef struct es_arena es_arena;

/* n_banks >= 1 banks of bank_bytes each (rounded up to 4096; bank b starts at a 4096-aligned
 * address). Errors: ES_E_INVAL (zero sizes or a product that overflows), ES_E_NOMEM. */
es_status es_arena_create(int n_banks, size_t bank_bytes, es_arena **out);
void es_arena_destroy(es_arena *a); /* NULL is a no-op */

int es_arena_n_banks(const es_arena *a);
size_t es_arena_bank_bytes(const es_arena *a); /* the rounded size */
size_t es_arena_bytes(const es_arena *a);      /* what it holds: es_arena_reserved_bytes */
/* The memory an arena of n_banks x bank_bytes holds: the banks (each rounded up to 4096),
 * rounded up as es_alloc_big reserves them, at least one 2 MiB page (huge pages become
 * resident whole). What a budget must count; 0 if the product overflows. */
size_t es_arena_reserved_bytes(int n_banks, size_t bank_bytes);
/* The most es_arena_reserved_bytes(B, b) exceeds B x b (b a multiple of 4096) by: the model of
 * the configurator counts banks in bytes and adds this to M_other. */
#define ES_ARENA_SLACK_BYTES ((uint64_t)2 << 20)
uint8_t *es_arena_bank(const es_arena *a, int bank);

#endif
