/*
 * libFuzzer harness for the readers of /proc and /sys that size a run (core/cgroup.c,
 * core/cpuset.c, core/memlimit.c): the input is split at NUL bytes into the files of a fake
 * root (mountinfo, /proc/self/cgroup, meminfo, then one text written as every cgroup limit file
 * and CPU topology file the readers look for), and both readers run on it; the fourth part is
 * also read as a memory budget (es_mem_budget_parse, `--mem`). Build and run:
 *   make fuzz && build-fuzz/fuzz_cgroup -max_total_time=60 -rss_limit_mb=2048 -timeout=10 \
 *       NEW_DIR tests/fuzz/corpus-cgroup
 * Checked: no crash or leak, 1 <= threads <= cores <= allowed CPUs, threads <= runnable <=
 * allowed, a quota and a memory limit that are 0 or positive, a memory limit never above a known
 * MemTotal unless no MemTotal, a hybrid CPU's kinds both 0 or both counted within the allowed
 * CPUs, and a budget accepted only within 1 byte .. 1e18 (auto: 0 too).
 */
#include "core/cpuset.h"
#include "core/memlimit.h"
#include "estream.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_root[256];

static const char *const dirs[] = {
    "/proc",
    "/proc/self",
    "/sys",
    "/sys/fs",
    "/sys/fs/cgroup",
    "/sys/fs/cgroup/a",
    "/sys/fs/cgroup/a/b",
    "/sys/fs/cgroup/cpu,cpuacct",
    "/sys/fs/cgroup/cpu,cpuacct/a",
    "/sys/fs/cgroup/memory",
    "/sys/fs/cgroup/memory/a",
    "/sys/devices",
    "/sys/devices/system",
    "/sys/devices/system/cpu",
    "/sys/devices/system/cpu/cpu0",
    "/sys/devices/system/cpu/cpu0/topology",
    "/sys/devices/system/cpu/cpu1",
    "/sys/devices/system/cpu/cpu1/topology",
    "/sys/devices/cpu_core",
    "/sys/devices/cpu_atom",
};
/* every file the fourth part is written to */
static const char *const limits[] = {
    "/sys/fs/cgroup/cpu.max",
    "/sys/fs/cgroup/a/cpu.max",
    "/sys/fs/cgroup/a/b/memory.max",
    "/sys/fs/cgroup/a/memory.max",
    "/sys/fs/cgroup/cpu,cpuacct/a/cpu.cfs_quota_us",
    "/sys/fs/cgroup/cpu,cpuacct/a/cpu.cfs_period_us",
    "/sys/fs/cgroup/memory/a/memory.limit_in_bytes",
    "/sys/devices/system/cpu/cpu0/topology/thread_siblings_list",
    "/sys/devices/cpu_core/cpus",
    "/sys/devices/cpu_atom/cpus",
};

static void put(const char *path, const uint8_t *text, size_t n)
{
    char full[512];
    snprintf(full, sizeof(full), "%s%s", g_root, path);
    FILE *f = fopen(full, "w");
    if (!f) abort();
    if (n && fwrite(text, 1, n, f) != n) abort();
    fclose(f);
}

static void remove_root(void)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_root);
    if (system(cmd) != 0) fprintf(stderr, "fuzz_cgroup: could not remove %s\n", g_root);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    /* in memory where there is a /dev/shm: each input writes eleven files (20x faster there) */
    const char *tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
    snprintf(g_root, sizeof(g_root), "%s/es-fuzz-cgroup-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_root)) abort();
    atexit(remove_root);
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        char full[512];
        snprintf(full, sizeof(full), "%s%s", g_root, dirs[i]);
        mkdir(full, 0755);
    }
    put("/sys/devices/system/cpu/cpu1/topology/thread_siblings_list", (const uint8_t *)"0-1\n", 4);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *part[4] = {data, NULL, NULL, NULL};
    size_t len[4] = {size, 0, 0, 0};
    for (int p = 1; p < 4; p++) { /* split at the first three NUL bytes */
        const uint8_t *z = len[p - 1] ? memchr(part[p - 1], 0, len[p - 1]) : NULL;
        if (!z) break;
        part[p] = z + 1;
        len[p] = len[p - 1] - (size_t)(part[p] - part[p - 1]);
        len[p - 1] = (size_t)(z - part[p - 1]);
    }
    put("/proc/self/mountinfo", part[0], len[0]);
    put("/proc/self/cgroup", part[1], len[1]);
    put("/proc/meminfo", part[2], len[2]);
    for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++)
        put(limits[i], part[3], len[3]);

    static const int cpus[] = {0, 1};
    es_cpuset c;
    es_cpuset_read(g_root, cpus, 2, 4, &c);
    if (c.threads < 1 || c.threads > c.cores || c.cores > c.allowed || c.allowed != 2 ||
        !(c.quota >= 0) || c.threads > c.runnable || c.runnable > c.allowed ||
        c.perf_cores < 0 || c.eff_cpus < 0 || (c.perf_cores == 0) != (c.eff_cpus == 0) ||
        c.perf_cores + c.eff_cpus > c.allowed)
        abort();
    es_memlimit m;
    es_memlimit_read(g_root, &m);
    if (m.total && m.bytes > m.total) abort();
    if (m.bytes && m.bytes != m.total && m.bytes != m.cgroup) abort();

    char spec[64], file[512];
    const size_t n = len[3] < sizeof(spec) - 1 ? len[3] : sizeof(spec) - 1;
    memcpy(spec, part[3], n);
    spec[n] = 0;
    snprintf(file, sizeof(file), "%s/proc/meminfo", g_root); /* a file for "%" and auto */
    uint64_t bytes = 7;
    const es_status st = es_mem_budget_parse(spec, file, &bytes);
    if (st == ES_OK && !(bytes >= 1 && bytes <= 1000000000000000000ull) &&
        !(strcmp(spec, "auto") == 0 && bytes <= 1000000000000000000ull))
        abort();
    if (st != ES_OK && (st != ES_E_INVAL || bytes != 0)) abort();
    return 0;
}
