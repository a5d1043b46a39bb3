/* The expert arena (arena.h). */
#include "stream/arena.h"

#include <stdlib.h>

#define ARENA_ALIGN ((size_t)4096)

struct es_arena {
    uint8_t *base;
    size_t bank_bytes;
    size_t bytes;       /* the banks: n_banks * bank_bytes */
    size_t alloc_bytes; /* what es_alloc_big was asked for */
    int n_banks;
};

#define MIN_ALLOC ((size_t)2 << 20) /* es_alloc_big is 4096-aligned only from 2 MiB on */

size_t es_arena_reserved_bytes(int n_banks, size_t bank_bytes)
{
    const size_t bb = es_align_up(bank_bytes, ARENA_ALIGN);
    if (n_banks < 1 || bb < bank_bytes || bb > SIZE_MAX / 2 / (size_t)n_banks) return 0;
    const size_t bytes = bb * (size_t)n_banks;
    return es_big_reserved_bytes(bytes < MIN_ALLOC ? MIN_ALLOC : bytes);
}

es_status es_arena_create(int n_banks, size_t bank_bytes, es_arena **out)
{
    *out = NULL;
    if (n_banks < 1 || bank_bytes == 0)
        return es_fail(ES_E_INVAL, "arena: %d banks of %zu bytes", n_banks, bank_bytes);
    const size_t bb = es_align_up(bank_bytes, ARENA_ALIGN);
    if (!es_arena_reserved_bytes(n_banks, bank_bytes))
        return es_fail(ES_E_INVAL, "arena: %d banks of %zu bytes overflow", n_banks, bank_bytes);
    es_arena *a = calloc(1, sizeof(*a));
    if (!a) return es_fail(ES_E_NOMEM, "out of memory for the arena");
    a->n_banks = n_banks;
    a->bank_bytes = bb;
    a->bytes = bb * (size_t)n_banks;
    /* es_alloc_big: 64-byte aligned when small, 2 MiB aligned when big; we need 4096. */
    a->alloc_bytes = a->bytes < MIN_ALLOC ? MIN_ALLOC : a->bytes;
    a->base = es_alloc_big(a->alloc_bytes);
    if (!a->base) {
        free(a);
        return es_fail(ES_E_NOMEM, "out of memory for an expert arena of %d banks x %.1f MiB",
                       n_banks, (double)bb / (1 << 20));
    }
    ES_ASSERT((uintptr_t)a->base % ARENA_ALIGN == 0);
    /* Pre-fault: one write per page, so reads land in resident memory and the cost is counted
     * before the run (es_alloc_big memory is zeroed already, rewriting a zero keeps it so). */
    volatile uint8_t *p = a->base;
    for (size_t off = 0; off < a->bytes; off += ARENA_ALIGN)
        p[off] = 0;
    *out = a;
    return ES_OK;
}

void es_arena_destroy(es_arena *a)
{
    if (!a) return;
    es_free_big(a->base, a->alloc_bytes);
    free(a);
}

int es_arena_n_banks(const es_arena *a)
{
    return a->n_banks;
}
size_t es_arena_bank_bytes(const es_arena *a)
{
    return a->bank_bytes;
}
size_t es_arena_bytes(const es_arena *a)
{
    return es_arena_reserved_bytes(a->n_banks, a->bank_bytes);
}

uint8_t *es_arena_bank(const es_arena *a, int bank)
{
    ES_ASSERT(bank >= 0 && bank < a->n_banks);
    return a->base + (size_t)bank * a->bank_bytes;
}
