/* The request pool, the parse bound and Jansson's counted allocations (jmem.h). */
#include "serve/jmem.h"

#include <jansson.h>
#include <malloc.h>
#include <stdlib.h>

bool sv_pool_take(sv_pool *p, uint64_t n)
{
    /* a CAS loop, not add-then-undo: a failed take must not make another take fail */
    uint64_t u = atomic_load_explicit(&p->used, memory_order_relaxed);
    do {
        if (n > p->cap || u > p->cap - n) return false;
    } while (!atomic_compare_exchange_weak_explicit(&p->used, &u, u + n, memory_order_relaxed,
                                                    memory_order_relaxed));
    return true;
}

void sv_pool_give(sv_pool *p, uint64_t n)
{
    atomic_fetch_sub_explicit(&p->used, n, memory_order_relaxed);
}

/* What Jansson 2.14 allocates, per what the scan counts (malloc's usable sizes, measured with
 * the counting allocator below, about half of these at most; tests/fuzz/fuzz_serve.c checks the
 * bound on every input):
 *   an array or object: its node and first table, 256 bytes (an empty one costs 120 or 220);
 *   a number or literal: its node, 48 (an integer's is 32);
 *   a string: its node and its bytes' block, 80 (an empty one costs 74 with its slot);
 *   a comma: the slot of one more element, 16 (8 bytes, doubled while an array grows);
 *   a colon: an object's member, 160 (its pair, links and hash buckets; the key's bytes are
 *     among the strings');
 *   a string: its bytes twice (decoded, and a key's copy), and while the lexer reads the
 *     longest, its buffer (a power of two above its length);
 *   and what the endpoints' parsers make while the tree exists: a record object ({"text": s}
 *     or {"ids": [..]}, with "labels" for /v1/classify) for each string or array that may be a
 *     prompt or an input, 448 bytes each. */
enum { BOUND_CONTAINER = 256, BOUND_VALUE = 48, BOUND_STRING = 80, BOUND_SLOT = 16,
       BOUND_MEMBER = 160, BOUND_RECORD = 448 };

uint64_t sv_json_parse_bound(const char *p, size_t n)
{
    uint64_t containers = 0, values = 0, strings = 0, separators = 0, members = 0,
             string_bytes = 0, longest = 0;
    for (size_t i = 0; i < n; i++) {
        const char c = p[i];
        if (c == '"') {
            size_t j = i + 1;
            while (j < n && p[j] != '"') j += p[j] == '\\' ? 2 : 1;
            const uint64_t len = (uint64_t)((j < n ? j : n) - i - 1);
            strings++;
            string_bytes += len;
            if (len > longest) longest = len;
            i = j;
        } else if (c == '[' || c == '{') {
            containers++;
        } else if (c == '-' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z')) {
            /* a number or literal: its other characters are not values of their own */
            values++;
            while (i + 1 < n && ((p[i + 1] >= '0' && p[i + 1] <= '9') || p[i + 1] == '.' ||
                                 p[i + 1] == '+' || p[i + 1] == '-' ||
                                 (p[i + 1] >= 'a' && p[i + 1] <= 'z') ||
                                 (p[i + 1] >= 'A' && p[i + 1] <= 'Z')))
                i++;
        } else if (c == ',') {
            separators++;
        } else if (c == ':') {
            members++;
        }
    }
    uint64_t lexer = 16;
    while (lexer <= longest) lexer *= 2;
    return 4096 + containers * (BOUND_CONTAINER + BOUND_RECORD) + values * BOUND_VALUE +
           strings * (BOUND_STRING + BOUND_RECORD) + separators * BOUND_SLOT +
           members * BOUND_MEMBER + string_bytes * 2 + lexer;
}

static _Thread_local sv_jmem *scope;

static void *jm_malloc(size_t n)
{
    void *p = malloc(n);
    sv_jmem *s = scope;
    if (p && s) {
        s->held += malloc_usable_size(p);
        if (s->held > s->peak) s->peak = s->held;
    }
    return p;
}

static void jm_free(void *p)
{
    sv_jmem *s = scope;
    if (p && s) {
        /* a block allocated before the scope was never counted: never go below zero */
        const uint64_t k = malloc_usable_size(p);
        s->held -= k < s->held ? k : s->held;
    }
    free(p);
}

void sv_jmem_install(void)
{
    json_set_alloc_funcs(jm_malloc, jm_free);
}

void sv_jmem_begin(sv_jmem *s)
{
    *s = (sv_jmem){.outer = scope};
    scope = s;
}

void sv_jmem_end(sv_jmem *s)
{
    scope = s->outer;
}
