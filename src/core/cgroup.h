/*
 * The limits the Linux cgroups of this process set (CPU quota, memory): the lowest value a limit
 * takes on the path from the process's cgroup up to the top of what its mount shows, in cgroup v2
 * (the unified hierarchy, the "0::" line of /proc/self/cgroup) and in v1 (the hierarchy that
 * carries the controller), whichever is lower. A container's mount often shows only its own
 * cgroup (mountinfo's root is the cgroup's path on the host, or a cgroup namespace shows "/"):
 * then that is where the walk starts and ends.
 *
 * Files that are missing or do not parse bound nothing. Reentrant.
 */
#ifndef ES_CGROUP_H
#define ES_CGROUP_H

#include <stdbool.h>
#include <stddef.h>

/* Room for a cgroup directory's path and a file name in it. */
#define ES_CGROUP_PATH_CAP (2 * 4096 + 128)

/* A limit file's value in one cgroup directory (a path under root), > 0; 0 for none or a file
 * that is missing or does not parse. */
typedef double (*es_cgroup_read_fn)(const char *root, const char *dir);

/* The lowest limit over both hierarchies, 0 if neither sets one. root: "" for the real files, or
 * a directory holding proc/self/cgroup, proc/self/mountinfo and the cgroup files (tests).
 * v1_controller names v1's hierarchy ("cpu", "memory"). */
double es_cgroup_lowest(const char *root, const char *v1_controller, es_cgroup_read_fn v2_read,
                        es_cgroup_read_fn v1_read);

/* The first line of the file root + path in buf (newline removed); false if it cannot be read. */
bool es_read_first_line(const char *root, const char *path, char *buf, size_t cap);

#endif
