/*
 * The geometry of expert groups (stream/): where the bytes of G consecutive experts of a sparse
 * layer are in the model's file (one aligned extent of records in a pack, one slice per matrix
 * in a GGUF, slices that overlap merged: one tensor per expert, in turn) and where each matrix lands in a bank. The streamer (pipeline.c), the bandwidth
 * probe (probe.c) and the budget (bank sizes) read groups through it.
 */
#ifndef ES_STREAM_GEOMETRY_H
#define ES_STREAM_GEOMETRY_H

#include "io/io.h"
#include "model/model.h"
#include "pack/pack.h"

#define ES_STREAM_ALIGN ((uint64_t)4096) /* O_DIRECT: file offsets and lengths */
#define ES_STREAM_MAX_EXT 3              /* extents of one group: gate, up, down in a GGUF */

/* One read of a group: file [off, off + len) into bank bytes [bank_off, bank_off + len); the
 * first `need` bytes must exist (the rest is 4 KiB rounding past the data). */
typedef struct es_group_extent {
    int file;  /* which file of the model (a split model's part; 0 otherwise) */
    uint64_t off;
    size_t len, need, bank_off;
} es_group_extent;

/* Where a group's bytes are: its extents, and for each matrix which extent and the byte offset
 * of expert e0's matrix inside the bank. */
typedef struct es_group_map {
    int n_ext;
    es_group_extent ext[ES_STREAM_MAX_EXT];
    size_t mat_bank_off[3]; /* expert e0's matrix i at bank + mat_bank_off[i] */
    size_t stride[3];       /* expert e0 + k's at + k * stride[i] */
} es_group_map;

/* Extents of experts [e0, e1) of layer L (pl: its pack layout, or NULL for a GGUF). */
void es_stream_map_group(const es_layer *L, const es_pack_layer *pl, int e0, int e1,
                         es_group_map *g);
/* Opens the I/O queue over the model's files (a split model's parts, else its one file). */
es_status es_stream_io_open(const es_model *m, const es_io_params *p, es_io **out);
/* The bank bytes a group needs: its extents' lengths. */
size_t es_stream_map_bytes(const es_group_map *g);
/* Calls fn for every group of G experts of every sparse layer, in order (with the pack layout
 * when m is a pack). Errors: the pack layout's. */
es_status es_stream_walk_groups(const es_model *m, int G, void (*fn)(void *u, const es_group_map *g),
                                void *u);

#endif
