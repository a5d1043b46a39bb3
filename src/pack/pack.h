/*
 * Packs: the execution-ready file the expert streamer reads.
 *
 * A pack is a GGUF v3 file (so the strict reader in src/gguf opens it and `estream info` lists
 * it) made from a source GGUF by es_pack_write():
 *
 *   metadata   every key of the source, unchanged, plus
 *     general.alignment             u32    4096
 *     estream.pack.version          u32    2 (ES_PACK_VERSION); 1 for packs of earlier builds
 *     estream.pack.layout           string "tiles-v2" (ES_PACK_LAYOUT) for version 2: each matrix
 *                                          is in the layout its layer's .layouts key names;
 *                                          "gguf-rows" (ES_PACK_LAYOUT_V1) for version 1: every
 *                                          matrix in the GGUF row layout of its type
 *     estream.pack.source           string base name of the source file
 *     estream.pack.source_bytes     u64    size of the source file
 *     per sparse layer N:
 *     estream.pack.blk.N.types      u32[3] ggml type ids of gate, up, down
 *     estream.pack.blk.N.shapes     u64[6] gate ne0, gate ne1, up ne0, up ne1, down ne0, down ne1
 *     estream.pack.blk.N.offsets    u64[4] gate, up, down byte offsets inside a record, then the
 *                                          record size (a multiple of 4096)
 *     estream.pack.blk.N.checksums  u64[n_expert] XXH3-64 of each whole record, padding included
 *     estream.pack.blk.N.layouts    u32[3] version 2 only: layout id of gate, up, down:
 *                                          0 (ES_LAYOUT_ROWS) GGUF rows as in the source, or
 *                                          1 (ES_LAYOUT_TILES) the tile layout of quant/tiles.h
 *                                          (Q4_0 and Q8_0 only). The writer tiles every Q4_0 and
 *                                          Q8_0 matrix and keeps the other types in rows
 *   tensors    every non-expert tensor of the source, unchanged (name, type, shape, bytes), and
 *              per sparse layer N one tensor "blk.N.ffn_exps" of type I8 with shape
 *              [record_bytes, n_expert] in place of the source's blk.N.ffn_{gate,up,down}_exps
 *              (or its blk.N.ffn_{gate,up,down}.E, one tensor per expert):
 *              record e = [gate_e | 0 pad | up_e | 0 pad | down_e | 0 pad to 4096]
 *
 * DESIGN
 * - The data section and every tensor start at multiples of 4096 (general.alignment), and every
 *   record is a multiple of 4096 bytes, so record e of a layer starts at a 4096-aligned file
 *   offset and G consecutive experts are one contiguous aligned extent: one O_DIRECT read per
 *   group, whatever G is (docs/design.md §5). Inside a record, gate starts at 0 and up and down at
 *   multiples of 64 (a cache line), so a kernel may use aligned loads on any matrix.
 * - A matrix keeps its source bytes, in rows or rearranged into tiles (quant/tiles.h: the same
 *   bytes in another order): a pack never has more bytes per weight than its source, padding
 *   aside (under 64 bytes between matrices, under 4096 at the end of a record). Tiles are the
 *   operator's execution layout: its kernels read them with plain vector loads instead of
 *   transposing rows per tile, and every kernel table (scalar included) reads them, so a pack
 *   runs on any machine. The layout does not depend on the machine that wrote the pack.
 * - The checksums are in the metadata (not in the records) so that a loader can verify a record
 *   it read without any other read; the writer computes them in a first pass over the source,
 *   because GGUF puts the metadata before the data, and checks them again on the bytes it writes.
 * - The version and the layout name say how to read a record: version 1 "gguf-rows" (rows only)
 *   and version 2 "tiles-v2" (per-matrix layouts) are read; a reader refuses a version or layout
 *   it does not know (ES_E_UNSUPPORTED) rather than guess. The writer writes version 2.
 * - The reader treats a pack as hostile: es_pack_layer_info() checks every key, count, type,
 *   shape, size and offset before returning anything a loader will use to read or compute.
 */
#ifndef ES_PACK_H
#define ES_PACK_H

#include "core/util.h"
#include "gguf/gguf.h"

#include <stdbool.h>

#define ES_PACK_VERSION 2u
#define ES_PACK_LAYOUT "tiles-v2"
#define ES_PACK_VERSION_V1 1u      /* still read; written only on request (es_pack_write_version) */
#define ES_PACK_LAYOUT_V1 "gguf-rows"
#define ES_PACK_ALIGN 4096u  /* file alignment of every record, and record size granularity */
#define ES_PACK_MATRIX_ALIGN 64u /* alignment of each matrix inside a record */

/* Index of a matrix inside a record (and in es_pack_layer's arrays). */
enum { ES_PACK_GATE = 0, ES_PACK_UP = 1, ES_PACK_DOWN = 2 };

/* Writes the pack of src_path to out_path (opts and result as in include/estream.h's es_pack()).
 * The source is read through es_gguf_open() (memory-mapped) and must be a GGUF with expert
 * tensors blk.N.ffn_gate_exps.weight, blk.N.ffn_up_exps.weight and blk.N.ffn_down_exps.weight
 * (3-D: gate and up [n_embd, n_ff, n_expert], down [n_ff, n_embd, n_expert]) for each sparse
 * layer, or llama.cpp's older naming of them, one 2-D tensor per expert:
 * blk.N.ffn_{gate,up,down}.E.weight for E = 0 .. n_expert - 1, anywhere in the file. The output is written atomically by the GGUF writer: on failure nothing is left at
 * out_path. Errors (es_last_error() names the file and, where one is at fault, the tensor):
 *   ES_E_INVAL        NULL path; the source is already a pack (or has estream.pack.* keys);
 *                     out_path is the source file itself
 *   ES_E_UNSUPPORTED  the source has no expert tensors, or an expert tensor pack does not know
 *                     (a name with "_exps" other than the three above)
 *   ES_E_FORMAT       the source is not a valid GGUF, or its expert tensors are inconsistent
 *                     (one missing, not 3-D (per expert: 2-D), shapes, types or expert counts
 *                     that do not match, a layer with both namings)
 *   ES_E_IO           cannot read the source or write out_path; the source changed while it
 *                     was being packed (a record's checksum differs between the two passes)
 *   ES_E_NOMEM
 * Thread-safety: independent calls may run concurrently (nothing global is written). */
es_status es_pack_write(const char *src_path, const char *out_path, const es_pack_opts *opts,
                        es_pack_result *result);

/* es_pack_write() for a chosen format version: ES_PACK_VERSION (what es_pack_write writes) or
 * ES_PACK_VERSION_V1 (every matrix in GGUF rows, as earlier builds wrote; for tests and for
 * readers that predate version 2). ES_E_INVAL for another version. */
es_status es_pack_write_version(const char *src_path, const char *out_path,
                                const es_pack_opts *opts, es_pack_result *result,
                                uint32_t version);

/* ---- reading a pack ----
 * Everything below takes an es_gguf opened with es_gguf_open() (or es_gguf_open_memory()) and
 * only reads it: calls may run concurrently on one handle. Pointers returned point into the
 * handle's mapping and stay valid until es_gguf_close(g). */

/* Whether g is a pack: it has the key estream.pack.version (of any type; es_pack_header_get()
 * and es_pack_layer_info() then validate it). A file with that key is never a plain model. */
bool es_pack_is_pack(const es_gguf *g);

/* The pack-wide keys. */
typedef struct es_pack_header {
    uint32_t version;      /* ES_PACK_VERSION or ES_PACK_VERSION_V1 */
    es_str layout;         /* the version's layout name; a view into the metadata */
    es_str source;         /* the source file's base name; a view into the metadata */
    uint64_t source_bytes; /* the source file's size */
} es_pack_header;

/* Reads and validates the pack-wide keys: ES_E_FORMAT if g is not a pack or a key is missing or
 * has the wrong type, ES_E_UNSUPPORTED if the version or the layout is one this build does not
 * know ("pack version 2 is not supported (this estream reads version 1)"), ES_E_FORMAT if
 * general.alignment is not a multiple of 4096. Versions 1 ("gguf-rows") and 2 ("tiles-v2") are
 * known; a layout name that is not its version's is ES_E_UNSUPPORTED. */
es_status es_pack_header_get(const es_gguf *g, es_pack_header *out);

/* Whether layer il has expert records in the pack: the tensor blk.<il>.ffn_exps or any
 * estream.pack.blk.<il>.* key exists. False for a dense layer (and for any il of a file that
 * is not a pack); es_pack_layer_info() then fails. */
bool es_pack_has_layer(const es_gguf *g, int il);

/* One sparse layer's records, validated. */
typedef struct es_pack_layer {
    int il;                      /* layer index */
    int64_t n_expert;            /* records in the layer (> 0) */
    uint32_t types[3];           /* ggml type id of gate, up, down (ES_PACK_GATE...); known to
                                  * es_qtype_info_get(), but possibly not computable
                                  * (supported == false): the loader decides */
    int64_t ne[3][2];            /* [matrix][ne0 (row length), ne1 (rows)]: gate and up
                                  * [n_embd, n_ff], down [n_ff, n_embd] */
    uint64_t offsets[3];         /* byte offset of each matrix inside a record: gate 0, each a
                                  * multiple of 64, disjoint, each inside the record */
    uint64_t matrix_bytes[3];    /* bytes of each matrix: es_qtype_row_bytes(type, ne0) * ne1 */
    uint32_t layouts[3];         /* ES_LAYOUT_ROWS or ES_LAYOUT_TILES (quant/tiles.h) of each
                                  * matrix; tiles only for types es_tiles_type_ok() accepts;
                                  * all rows in a version 1 pack */
    uint64_t record_bytes;       /* bytes of one record, a multiple of 4096 */
    uint64_t file_offset;        /* absolute file offset of record 0 (a multiple of 4096):
                                  * record e lies at file_offset + e * record_bytes, so experts
                                  * e0..e0+G-1 are the one extent [file_offset + e0 *
                                  * record_bytes, + G * record_bytes) for pread/O_DIRECT */
    const uint8_t *data;         /* record 0 in g's mapping (NULL for a handle without one);
                                  * borrowed, valid until es_gguf_close(g) */
    const uint8_t *checksums;    /* n_expert little-endian u64 (XXH3-64 of each record) in g's
                                  * metadata mapping, possibly unaligned: read them with
                                  * es_pack_expected_checksum(). Borrowed, valid until
                                  * es_gguf_close(g) */
} es_pack_layer;

/* Fills *out for layer il of the pack g, after validating (hostile file):
 * - the header (es_pack_header_get(): version and layout known, alignment 4096);
 * - estream.pack.blk.<il>.types: u32 array of 3 known ggml types;
 * - .shapes: u64 array of 6, each in 1..2^31, row lengths multiples of their type's block,
 *   gate and up the same shape, down its transpose ([gate ne1, gate ne0]);
 * - .offsets: u64 array of 4; record_bytes > 0 and a multiple of 4096; gate at 0; every offset
 *   a multiple of 64; offset + matrix bytes <= record_bytes for each matrix (overflow-safe);
 *   no two matrices overlapping;
 * - the tensor blk.<il>.ffn_exps: type I8, 2-D, shape [record_bytes, n_expert] with
 *   n_expert >= 1, data at a 4096-aligned file offset;
 * - .checksums: u64 array of exactly n_expert elements;
 * - .layouts (version 2: required; version 1: must be absent): u32 array of 3, each 0 (rows) or
 *   1 (tiles), tiles only for Q4_0 and Q8_0 matrices.
 * Errors: ES_E_INVAL (NULL argument or il < 0), ES_E_UNSUPPORTED (unknown version or layout),
 * ES_E_FORMAT for everything else, with a message naming the file, the layer and the key or
 * tensor at fault. On failure *out is zeroed. */
es_status es_pack_layer_info(const es_gguf *g, int il, es_pack_layer *out);

/* Checksum stored for record e (0 <= e < l->n_expert; outside that range is a caller bug and
 * aborts). */
uint64_t es_pack_expected_checksum(const es_pack_layer *l, int64_t e);

/* XXH3-64 (seed 0) of bytes [0, bytes) of record: what the checksums array holds for a whole
 * record, padding included. Thread-safe. */
uint64_t es_pack_checksum(const void *record, size_t bytes);

/* Pointer to record e of the layer in g's mapping (NULL if l->data is NULL); e in range. */
static inline const uint8_t *es_pack_record(const es_pack_layer *l, int64_t e)
{
    return l->data ? l->data + (uint64_t)e * l->record_bytes : NULL;
}

#endif
