/* Output files: atomic replacement of regular files, in-place writes to FIFOs and character
 * devices, and the registry of temporary files that es_cleanup_temp_files() empties (outfile.c
 * explains the choices). Every file the library or the CLI writes goes through here. */
#ifndef ES_OUTFILE_H
#define ES_OUTFILE_H

#include "estream.h"
#include "estream_tools.h"
#include <stdbool.h>
#include <stddef.h>

/* One output in progress. Zero-initialising is not enough for abort: use es_outfile_open(),
 * which leaves the struct closed (fd -1) on failure, or initialise fd to -1. One es_outfile is
 * used by one thread at a time; different ones may be used on different threads at once (the
 * list of temporary files is claimed slot by slot with atomics, no lock). */
typedef struct es_outfile {
    int fd;           /* write here; -1 once committed, aborted or never opened */
    bool direct;      /* FIFO or character device: written in place, no temporary file */
    int slot;         /* registry slot of tmp, -1 none */
    const char *path; /* as the caller gave it, for messages; borrowed until commit or abort */
    char *final;      /* the name renamed over: path, or a symbolic link's resolved target */
    char *tmp;        /* the temporary file ("<final>.tmp.XXXXXXXXXXXX"); NULL when direct */
} es_outfile;

/* Opens path for writing. A regular file (new or existing, or the target of a symbolic link) is
 * written to a new temporary file beside it; a FIFO or character device is opened in place (the
 * caller must then only append, never seek). On success f->fd is ready and the caller ends with
 * es_outfile_commit() or es_outfile_abort(). On failure nothing was created and f is closed.
 * Errors: ES_E_IO (missing or read-only directory, path is a directory or a dangling symbolic
 * link, open failed), ES_E_UNSUPPORTED (a socket or block device), ES_E_NOMEM. */
es_status es_outfile_open(const char *path, es_outfile *f);

/* Writes all n bytes (retrying short writes and EINTR). ES_E_IO with a message on failure; the
 * caller then aborts. */
es_status es_outfile_write(es_outfile *f, const void *p, size_t n);

/* Finishes the output. Temporary file: fsync, close, rename over the final name, then fsync of
 * the directory (best effort). Direct output: close. On failure the temporary file is removed
 * and the final name is untouched. f is closed either way. */
es_status es_outfile_commit(es_outfile *f);

/* Closes f and removes its temporary file; the final name is untouched. A closed f is a no-op. */
void es_outfile_abort(es_outfile *f);

#endif
