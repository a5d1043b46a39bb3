/* The CPUs this process may use and its default thread count (cpuset.h). */
#include "core/cpuset.h"

#include "core/cgroup.h"
#include "core/util.h"

#include "estream.h"

#include <ctype.h>
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
        char path[96], line[256], *end; /* "0,64", "0-1": only the first number is read */
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list",
                 cpus[i]);
        const long first =
            es_read_first_line(root, path, line, sizeof(line)) ? strtol(line, &end, 10) : -1;
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

/* Whether cpu is in a sysfs CPU list ("0-5,12,14-15"); false for a malformed list. */
static bool cpulist_has(const char *s, int cpu)
{
    while (*s) {
        char *end;
        const long a = strtol(s, &end, 10);
        long b = a;
        if (end == s || a < 0) return false;
        s = end;
        if (*s == '-') {
            b = strtol(s + 1, &end, 10);
            if (end == s + 1 || b < a) return false;
            s = end;
        }
        if (cpu >= a && cpu <= b) return true;
        if (*s != ',') return false;
        s++;
    }
    return false;
}

/* A hybrid CPU's kinds among the allowed CPUs: out->perf_cores and out->eff_cpus, both 0 unless
 * the machine lists both kinds (sysfs cpu_core and cpu_atom, as Linux does for Intel's hybrid
 * parts) and the mask holds some of each. */
static void hybrid_kinds(const char *root, const int *cpus, int n, es_cpuset *out)
{
    enum { LIST = 4096 }; /* a list of single CPUs of a large part is long */
    out->perf_cores = out->eff_cpus = 0;
    if (n < 1) return;
    char *perf = malloc(2 * LIST); /* then the efficiency CPUs' list */
    int *p = malloc((size_t)n * sizeof(*p)), np = 0, ne = 0;
    if (perf && p && es_read_first_line(root, "/sys/devices/cpu_core/cpus", perf, LIST) &&
        es_read_first_line(root, "/sys/devices/cpu_atom/cpus", perf + LIST, LIST)) {
        const char *eff = perf + LIST;
        for (int i = 0; i < n; i++) {
            if (cpulist_has(perf, cpus[i])) p[np++] = cpus[i];
            else if (cpulist_has(eff, cpus[i])) ne++;
        }
        if (np && ne) {
            out->perf_cores = count_cores(root, p, np);
            out->eff_cpus = ne;
        }
    }
    free(perf);
    free(p);
}

static double cpus_of(double quota, double period)
{
    return isfinite(quota) && isfinite(period) && quota > 0 && period > 0 ? quota / period : 0;
}

/* The CPU limit of one cgroup directory in CPUs, 0 for none or an unreadable file: v2's cpu.max
 * ("max 100000" for none, "150000 100000"), v1's cpu.cfs_quota_us (-1: none) over
 * cpu.cfs_period_us. */
static double cpu_max(const char *root, const char *dir)
{
    char path[ES_CGROUP_PATH_CAP], line[256];
    double quota = 0, period = 0;
    snprintf(path, sizeof(path), "%s/cpu.max", dir);
    return es_read_first_line(root, path, line, sizeof(line)) &&
                   sscanf(line, "%lf %lf", &quota, &period) == 2
               ? cpus_of(quota, period)
               : 0;
}

static double cpu_cfs(const char *root, const char *dir)
{
    char path[ES_CGROUP_PATH_CAP], line[256];
    double quota = 0, period = 0;
    snprintf(path, sizeof(path), "%s/cpu.cfs_quota_us", dir);
    if (!es_read_first_line(root, path, line, sizeof(line)) || sscanf(line, "%lf", &quota) != 1)
        return 0;
    snprintf(path, sizeof(path), "%s/cpu.cfs_period_us", dir);
    if (!es_read_first_line(root, path, line, sizeof(line)) || sscanf(line, "%lf", &period) != 1)
        return 0;
    return cpus_of(quota, period);
}

/* ---- the rule -------------------------------------------------------------------------------- */

void es_cpuset_read(const char *root, const int *cpus, int n_cpus, int online, es_cpuset *out)
{
    out->omp = 0;
    out->online = online > 0 ? online : 1;
    out->allowed = n_cpus > 0 ? n_cpus : out->online;
    out->cores = n_cpus > 0 ? count_cores(root, cpus, n_cpus) : out->allowed;
    hybrid_kinds(root, cpus, n_cpus, out);

    out->quota = es_cgroup_lowest(root, "cpu", cpu_max, cpu_cfs);
    out->runnable = out->allowed;
    if (out->quota > 0) {
        const double q = ceil(out->quota); /* 1.5 CPUs of time keep two threads busy */
        if (q < out->runnable) out->runnable = (int)q;
    }
    /* cores <= allowed, so this is min(cores, ceil(quota)) */
    const int threads = out->cores < out->runnable ? out->cores : out->runnable;
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
    detected.omp = es_cpuset_omp_threads(getenv("OMP_NUM_THREADS"));
    if (detected.omp > 0) detected.threads = detected.omp;
}

int es_cpuset_omp_threads(const char *v)
{
    if (!v || !*v) return 0;
    char *end;
    errno = 0;
    const long n = strtol(v, &end, 10);
    while (isspace((unsigned char)*end))
        end++;
    /* OpenMP's list of nested levels ("4,2"): the first is the outer team's */
    if (errno || end == v || n < 1 || (*end && *end != ',')) {
        es_log(ES_LOG_WARN, "OMP_NUM_THREADS=%s is not a positive number of threads; ignored", v);
        return -1;
    }
    return n > ES_MAX_THREADS ? ES_MAX_THREADS : (int)n;
}

const es_cpuset *es_cpuset_get(void)
{
    pthread_once(&once, detect);
    return &detected;
}
