/* Memory that requests hold before they are admitted: a pool of bytes shared by the connections
 * (the bodies being received and the JSON trees they parse into), a bound of what parsing a
 * body costs, and Jansson's allocations counted per thread (to measure, e.g. in the fuzz target,
 * that the bounds hold).
 *
 * DESIGN
 * - A body's bytes are taken from the pool as they arrive. Its JSON tree costs several times its
 *   bytes for some bodies (a token id of 2 characters becomes a 32-byte integer node and up to
 *   16 bytes of array slots) and about its bytes for others (a long string), so the tree is
 *   bounded from what the text holds, by one scan that counts its values and its strings' bytes
 *   (sv_json_parse_bound), and that bound is taken from the pool before the parse. Refusing
 *   allocations inside Jansson instead is not an option: its lexer does not survive a failed
 *   allocation (libjansson 2.14 crashes).
 * - Counting (sv_jmem_begin .. sv_jmem_end) replaces Jansson's allocator once
 *   (sv_jmem_install) by malloc and free that, on a thread inside a scope, add each block's
 *   usable size to the scope; outside a scope they are malloc and free.
 */
#ifndef ES_SERVE_JMEM_H
#define ES_SERVE_JMEM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sv_pool {
    _Atomic uint64_t used;
    uint64_t cap;
} sv_pool;

/* Takes n bytes; false (nothing taken) when used would pass cap. Any thread. */
bool sv_pool_take(sv_pool *p, uint64_t n);
/* Gives back n bytes taken before. Any thread. */
void sv_pool_give(sv_pool *p, uint64_t n);

/* An upper bound of the bytes Jansson holds at once while it parses p[0..n) (json_loadb) and
 * while the tree it makes is turned into a request (sv_api_parse): from the values, strings and
 * string bytes the text holds. */
uint64_t sv_json_parse_bound(const char *p, size_t n);

typedef struct sv_jmem {
    uint64_t held;         /* bytes of live blocks allocated in the scope */
    uint64_t peak;         /* the most held at once */
    struct sv_jmem *outer; /* the scope this one interrupted on the thread (restored at end) */
} sv_jmem;

/* Makes Jansson allocate through the counting allocator. Call once, before any other Jansson
 * call of the process (json_set_alloc_funcs' rule). */
void sv_jmem_install(void);
/* From now on this thread's Jansson allocations count in s (zeroed here). */
void sv_jmem_begin(sv_jmem *s);
/* Ends the scope (the thread's outer one, if any, counts again). */
void sv_jmem_end(sv_jmem *s);

#endif
