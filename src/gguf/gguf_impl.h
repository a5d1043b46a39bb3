/* Internal glue between the GGUF reader (gguf_read.c) and writer (gguf_write.c). Not for other
 * modules: they use gguf.h. */
#ifndef ES_GGUF_IMPL_H
#define ES_GGUF_IMPL_H

#include "gguf/gguf.h"

/* Byte size of one element of a scalar value type; 0 for STRING, ARRAY and unknown types. */
size_t es_gguf_scalar_size(uint32_t type);

/* The serialized value of key i, exactly as in the file (after its u32 type field): for an
 * array that is { u32 elem_type, u64 n, elements }. Validated by es_gguf_open(), so the writer
 * can copy it verbatim (nested arrays included). False if i is out of range. */
bool es_gguf_kv_raw(const es_gguf *g, int64_t i, const void **val, uint64_t *len);

#endif
