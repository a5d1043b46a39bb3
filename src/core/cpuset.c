/* The CPUs this process may use and its default thread count (cpuset.h). */
#include "core/cpuset.h"

#include "estream.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { PATH_CAP = 4096, DIR_CAP = 2 * PATH_CAP, LINE_CAP = 8192 };

static FILE *open_at(const char *root, const char *path)
{
    char full[PATH_CAP + DIR_CAP + 64];
    const int n = snprintf(full, sizeof(full), "%s%s", root, path);
    return n > 0 && (size_t)n < sizeof(full) ? fopen(full, "re") : NULL;
}

/* The first line of root + path in buf (newline removed); false if it cannot be read. */
static bool read_line(const char *root, const char *path, char *buf, size_t cap)
{
    FILE *f = open_at(root, path);
    if (!f) return false;
    const bool ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    if (ok) buf[strcspn(buf, "\n")] = 0;
    return ok;
}

/* ---- physical cores ------------------------------------------------------------------------ */

static int cmp_int(const void *a, const void *b)
{
    const int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The distinct cores of the n CPUs: a core is named by the first CPU of its thread siblings
 * list ("0,64", "0-1": sysfs lists them in increasing order). n when any CPU's is unreadable. */
static int count_cores(const char *root, const int *cpus, int n)
{
    int *core = malloc((size_t)n * sizeof(*core));
    if (!core) return n;
    for (int i = 0; i < n; i++) {
        char path[96], line[LINE_CAP], *end;
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list",
                 cpus[i]);
        const long first = read_line(root, path, line, sizeof(line)) ? strtol(line, &end, 10) : -1;
        if (first < 0 || first > INT_MAX || end == line) {
            free(core);
            return n;
        }
        core[i] = (int)first;
    }
    qsort(core, (size_t)n, sizeof(*core), cmp_int);
    int distinct = 0;
    for (int i = 0; i < n; i++)
        distinct += i == 0 || core[i] != core[i - 1];
    free(core);
    return distinct;
}

/* ---- cgroup CPU quota ------------------------------------------------------------------------ */

typedef struct hierarchy {
    bool found;
    char cgroup[PATH_CAP]; /* the process's cgroup in it (/proc/self/cgroup) */
    char root[PATH_CAP];   /* the part of the hierarchy its mount shows (mountinfo field 4) */
    char mount[PATH_CAP];  /* where it is mounted */
} hierarchy;

/* Whether the comma-separated list holds item. */
static bool list_has(const char *list, const char *item)
{
    const size_t n = strlen(item);
    for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, item, n) == 0 && (p[n] == ',' || p[n] == 0)) return true;
    return false;
}

/* mountinfo writes space, tab, newline and backslash in paths as \ooo. */
static void unescape(char *s)
{
    char *o = s;
    for (const char *p = s; *p; p++) {
        if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' &&
            p[3] >= '0' && p[3] <= '7') {
            *o++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
            p += 3;
        } else {
            *o++ = *p;
        }
    }
    *o = 0;
}

/* The process's cgroup in v2 (the "0::" line) and in v1's cpu controller. */
static void read_cgroups(const char *root, hierarchy *v2, hierarchy *v1)
{
    FILE *f = open_at(root, "/proc/self/cgroup");
    if (!f) return;
    char line[LINE_CAP];
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || c2[1] != '/') continue;
        *c1 = *c2 = 0;
        hierarchy *h = strcmp(line, "0") == 0 && c2 == c1 + 1 ? v2
                       : list_has(c1 + 1, "cpu")              ? v1
                                                              : NULL;
        if (h && strlen(c2 + 1) < sizeof(h->cgroup)) {
            strcpy(h->cgroup, c2 + 1);
            h->found = true;
        }
    }
    fclose(f);
}

/* Where each hierarchy is mounted: the first cgroup2 mount, the first cgroup mount with cpu. */
static void read_mounts(const char *root, hierarchy *v2, hierarchy *v1)
{
    FILE *f = open_at(root, "/proc/self/mountinfo");
    if (!f) {
        v2->found = v1->found = false;
        return;
    }
    bool got2 = false, got1 = false;
    char line[LINE_CAP];
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = 0;
        /* id parent major:minor root mount-point options [optional...] - type source super */
        char *field[6] = {0}, *save = NULL, *tok = strtok_r(line, " ", &save);
        int n = 0;
        for (; tok && n < 6; tok = strtok_r(NULL, " ", &save))
            field[n++] = tok;
        while (tok && strcmp(tok, "-") != 0)
            tok = strtok_r(NULL, " ", &save);
        char *type = tok ? strtok_r(NULL, " ", &save) : NULL;
        char *source = type ? strtok_r(NULL, " ", &save) : NULL;
        char *super = source ? strtok_r(NULL, " ", &save) : NULL;
        if (n < 5 || !type) continue;
        hierarchy *h = !got2 && strcmp(type, "cgroup2") == 0 ? v2
                       : !got1 && strcmp(type, "cgroup") == 0 && super && list_has(super, "cpu")
                           ? v1
                           : NULL;
        if (!h || strlen(field[3]) >= sizeof(h->root) || strlen(field[4]) >= sizeof(h->mount))
            continue;
        strcpy(h->root, field[3]);
        strcpy(h->mount, field[4]);
        unescape(h->root);
        unescape(h->mount);
        *(h == v2 ? &got2 : &got1) = true;
    }
    fclose(f);
    v2->found = v2->found && got2;
    v1->found = v1->found && got1;
}

/* The CPU limit one cgroup directory sets, in CPUs; 0 for none or an unreadable file. */
static double dir_limit(const char *root, const char *dir, bool v2)
{
    char path[DIR_CAP + 32], line[LINE_CAP];
    double quota = 0, period = 0;
    if (v2) {
        snprintf(path, sizeof(path), "%s/cpu.max", dir);
        /* "max 100000" (none) or "150000 100000" */
        if (!read_line(root, path, line, sizeof(line)) ||
            sscanf(line, "%lf %lf", &quota, &period) != 2)
            return 0;
    } else {
        snprintf(path, sizeof(path), "%s/cpu.cfs_quota_us", dir); /* -1: none */
        if (!read_line(root, path, line, sizeof(line)) || sscanf(line, "%lf", &quota) != 1)
            return 0;
        snprintf(path, sizeof(path), "%s/cpu.cfs_period_us", dir);
        if (!read_line(root, path, line, sizeof(line)) || sscanf(line, "%lf", &period) != 1)
            return 0;
    }
    return isfinite(quota) && isfinite(period) && quota > 0 && period > 0 ? quota / period : 0;
}

/* The lowest limit from the process's cgroup up to the top of what the mount shows; 0: none. */
static double hierarchy_limit(const char *root, const hierarchy *h, bool v2)
{
    if (!h->found) return 0;
    /* the cgroup's path below the mount's root; a cgroup outside it (another cgroup namespace)
     * is the mount's top, which is then the process's own */
    const size_t rl = strlen(h->root);
    const char *rel = h->cgroup;
    if (strcmp(h->root, "/") != 0)
        rel = strncmp(h->cgroup, h->root, rl) == 0 && (h->cgroup[rl] == 0 || h->cgroup[rl] == '/')
                  ? h->cgroup + rl
                  : "";
    char dir[DIR_CAP];
    snprintf(dir, sizeof(dir), "%s%s", h->mount, strcmp(rel, "/") == 0 ? "" : rel);
    const size_t top = strlen(h->mount);
    double lowest = 0;
    for (;;) {
        const double l = dir_limit(root, dir, v2);
        if (l > 0 && (lowest == 0 || l < lowest)) lowest = l;
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= top || !slash) break;
        *slash = 0;
        if (strlen(dir) < top) break;
    }
    return lowest;
}

/* ---- the rule ---------------------------------------------------------------------------------
 */

void es_cpuset_read(const char *root, const int *cpus, int n_cpus, int online, es_cpuset *out)
{
    out->online = online > 0 ? online : 1;
    out->allowed = n_cpus > 0 ? n_cpus : out->online;
    out->cores = n_cpus > 0 ? count_cores(root, cpus, n_cpus) : out->allowed;

    hierarchy *v2 = calloc(2, sizeof(*v2)), *v1 = v2 ? v2 + 1 : NULL;
    out->quota = 0;
    if (v2) {
        read_cgroups(root, v2, v1);
        read_mounts(root, v2, v1);
        const double l2 = hierarchy_limit(root, v2, true), l1 = hierarchy_limit(root, v1, false);
        out->quota = l2 > 0 && (l1 == 0 || l2 < l1) ? l2 : l1;
        free(v2);
    }
    int threads = out->cores;
    if (out->quota > 0) {
        const double q = ceil(out->quota); /* 1.5 CPUs of time keep two threads busy */
        if (q < threads) threads = (int)q;
    }
    out->threads = threads < 1 ? 1 : threads > ES_MAX_THREADS ? ES_MAX_THREADS : threads;
}

static es_cpuset detected;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void detect(void)
{
    const long on = sysconf(_SC_NPROCESSORS_ONLN), conf = sysconf(_SC_NPROCESSORS_CONF);
    const int online = on < 1 ? 1 : on > INT_MAX ? INT_MAX : (int)on;
    int *ids = NULL, n = 0;
    /* the kernel refuses a mask smaller than its own (EINVAL): grow until it fits */
    for (long cap = conf > 1024 ? conf : 1024; cap <= (1l << 20); cap *= 2) {
        cpu_set_t *set = CPU_ALLOC((int)cap);
        if (!set) break;
        const size_t bytes = CPU_ALLOC_SIZE((int)cap);
        CPU_ZERO_S(bytes, set);
        if (sched_getaffinity(0, bytes, set) == 0) {
            const int count = CPU_COUNT_S(bytes, set);
            ids = count > 0 ? malloc((size_t)count * sizeof(*ids)) : NULL;
            for (int c = 0; ids && c < (int)cap && n < count; c++)
                if (CPU_ISSET_S(c, bytes, set)) ids[n++] = c;
            CPU_FREE(set);
            break;
        }
        const int err = errno;
        CPU_FREE(set);
        if (err != EINVAL) break;
    }
    es_cpuset_read("", ids, ids ? n : 0, online, &detected);
    free(ids);
}

const es_cpuset *es_cpuset_get(void)
{
    pthread_once(&once, detect);
    return &detected;
}
