/* Input files: opening a path the user named (a model, a pack, a key) without blocking on what
 * is not a regular file. open() of a FIFO for reading blocks until a writer appears, and a
 * device may block or have side effects, so a check after the open comes too late: the file is
 * opened with O_NONBLOCK, checked with fstat, and refused unless it is a regular file. */
#ifndef ES_INFILE_H
#define ES_INFILE_H

#include "estream.h"
#include <stdint.h>

/* Opens path read-only (close-on-exec, blocking reads: O_NONBLOCK is cleared once the file is
 * known to be regular) into *fd and its size into *size (may be NULL). Returns ES_OK, or ES_E_IO
 * with a one-line message naming path and what it is ("a FIFO", "a directory", "a character
 * device", ...) or the open's error; *fd is then -1. Never blocks on a FIFO or device. */
es_status es_infile_open(const char *path, int *fd, uint64_t *size);

#endif
