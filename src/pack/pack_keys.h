/*
 * What the pack writer and its validating reader share (pack_write.c, pack_read.c): the keys
 * of the format (pack.h describes it) and the names of a record's matrices.
 */
#ifndef ES_PACK_KEYS_H
#define ES_PACK_KEYS_H

#define KEY_PREFIX "estream.pack."
#define KEY_VERSION KEY_PREFIX "version"
#define KEY_LAYOUT KEY_PREFIX "layout"
#define KEY_SOURCE KEY_PREFIX "source"
#define KEY_SOURCE_BYTES KEY_PREFIX "source_bytes"

/* gate, up, down: the matrices of a record, in order */
static const char *const es_pack_kind_names[3] = {"gate", "up", "down"};

#endif
