/*
 * The memory this process may use: the machine's (MemTotal in /proc/meminfo), or less where a
 * cgroup limits it (v2 memory.max, v1 memory.limit_in_bytes, the lowest up the hierarchy:
 * core/cgroup.h), as `docker --memory`, Kubernetes memory limits, Slurm's --mem and systemd's
 * MemoryMax= set. A session that runs a model resident whose file is larger than this reads its
 * experts through the page cache again and again; run/session.c warns and names the budget
 * that streams them instead.
 *
 * ESTREAM_MEM_LIMIT (bytes) replaces what was read, so that tests can see a small machine.
 * Read once per process; thread-safe.
 */
#ifndef ES_MEMLIMIT_H
#define ES_MEMLIMIT_H

#include <stdint.h>

typedef struct es_memlimit {
    uint64_t total;     /* MemTotal; 0 if unknown */
    uint64_t cgroup;    /* the cgroup's limit; 0: none */
    uint64_t bytes;     /* what the process may use: the lower of those known; 0: unknown */
    const char *source; /* what set bytes: "MemTotal", "cgroup", "ESTREAM_MEM_LIMIT" or "" */
} es_memlimit;

/* This process's, read on the first call. */
const es_memlimit *es_memlimit_get(void);

/* The same from the files under root ("" for the real ones; tests give a directory holding
 * proc/meminfo, proc/self/cgroup, proc/self/mountinfo and the cgroup files), without the
 * environment's override. */
void es_memlimit_read(const char *root, es_memlimit *out);

#endif
