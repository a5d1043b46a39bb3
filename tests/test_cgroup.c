/* What the machine and its cgroups let this process use (core/cgroup.h): the default thread count
 * (core/cpuset.h: physical cores among the allowed CPUs, cgroup v2 and v1 CPU quotas up the
 * hierarchy, containers whose mount shows only their own cgroup, files that are missing or
 * malformed) and the memory (core/memlimit.h), on fake /proc and /sys trees; then this process's
 * own affinity, and the warning of a resident run on a model larger than its memory. */
#include "t.h"

#include "core/cpuset.h"
#include "core/memlimit.h"
#include "estream.h"

#include <sched.h>
#include <sys/stat.h>

/* Writes text to root + path, making the directories on the way. */
static void put(const char *root, const char *path, const char *text)
{
    char full[1024];
    snprintf(full, sizeof(full), "%s%s", root, path);
    for (char *s = strchr(full + strlen(root) + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = 0;
        mkdir(full, 0755);
        *s = '/';
    }
    FILE *f = fopen(full, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* CPUs 0..n-1 where CPU c and CPU c + n/2 are the two threads of core c % (n/2) (Linux's
 * numbering on x86 servers: the second threads after all the first ones). */
static void put_smt_topology(const char *root, int n)
{
    for (int c = 0; c < n; c++) {
        char path[128], text[32];
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list",
                 c);
        snprintf(text, sizeof(text), "%d,%d\n", c % (n / 2), c % (n / 2) + n / 2);
        put(root, path, text);
    }
}

static const char mountinfo_v2[] =
    "22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n"
    "25 21 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n";

static es_cpuset read_all(const char *root, int n_allowed, int online)
{
    int cpus[64];
    for (int i = 0; i < n_allowed; i++)
        cpus[i] = i;
    es_cpuset s;
    memset(&s, 0x5a, sizeof(s));
    es_cpuset_read(root, cpus, n_allowed, online, &s);
    return s;
}

static void test_physical_cores(void **state)
{
    (void)state;
    char *root = t_mkdtemp("cpuset");
    assert_non_null(root);
    put_smt_topology(root, 16); /* 8 cores of 2 threads */
    es_cpuset s = read_all(root, 16, 16);
    assert_int_equal(s.online, 16);
    assert_int_equal(s.allowed, 16);
    assert_int_equal(s.cores, 8);
    assert_true(s.quota == 0); /* no cgroup files at all: nothing bounds */
    assert_int_equal(s.threads, 8);
    assert_int_equal(s.runnable, 16); /* hyperthreads can run, if not by default */

    /* allowed: CPUs 0..5 = the first threads of cores 0..5 only */
    s = read_all(root, 6, 16);
    assert_int_equal(s.allowed, 6);
    assert_int_equal(s.cores, 6);
    assert_int_equal(s.threads, 6);
    assert_int_equal(s.runnable, 6);
    /* allowed: CPUs 0..11 = cores 0..7, four of them with both threads */
    s = read_all(root, 12, 16);
    assert_int_equal(s.cores, 8);
    assert_int_equal(s.threads, 8);

    /* a CPU whose topology is unreadable: the cores are unknown, every allowed CPU counts */
    char path[1024];
    snprintf(path, sizeof(path), "%s/sys/devices/system/cpu/cpu3/topology/thread_siblings_list",
             root);
    assert_int_equal(unlink(path), 0);
    s = read_all(root, 16, 16);
    assert_int_equal(s.cores, 16);
    assert_int_equal(s.threads, 16);
    /* a mask that could not be read: the online CPUs */
    s = read_all(root, 0, 12);
    assert_int_equal(s.allowed, 12);
    assert_int_equal(s.threads, 12);
    t_rm_rf(root);
    free(root);
}

/* An Intel hybrid CPU (sysfs cpu_core and cpu_atom): its kinds among the allowed CPUs are
 * reported, and the default still counts every core (the E-cores' effect is unmeasured). */
static void test_hybrid(void **state)
{
    (void)state;
    char *root = t_mkdtemp("hybrid");
    assert_non_null(root);
    /* 6 P-cores of 2 threads (CPUs 0-11: siblings 0-1, 2-3, ...), 8 E-cores (12-19) */
    for (int c = 0; c < 20; c++) {
        char path[128], text[32];
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list",
                 c);
        if (c < 12)
            snprintf(text, sizeof(text), "%d-%d\n", c / 2 * 2, c / 2 * 2 + 1);
        else
            snprintf(text, sizeof(text), "%d\n", c);
        put(root, path, text);
    }
    put(root, "/sys/devices/cpu_core/cpus", "0-11\n");
    put(root, "/sys/devices/cpu_atom/cpus", "12-19\n");
    es_cpuset s = read_all(root, 20, 20);
    assert_int_equal(s.cores, 14);
    assert_int_equal(s.threads, 14);
    assert_int_equal(s.perf_cores, 6);
    assert_int_equal(s.eff_cpus, 8);
    /* a mask of P-core CPUs 0-3 and 12 only: 2 P-cores, 1 E-core CPU */
    const int some[] = {0, 1, 2, 3, 12};
    es_cpuset_read(root, some, 5, 20, &s);
    assert_int_equal(s.perf_cores, 2);
    assert_int_equal(s.eff_cpus, 1);
    /* only one kind in the mask (CPUs 0-5: P-cores): nothing hybrid about this process */
    s = read_all(root, 6, 20);
    assert_int_equal(s.perf_cores, 0);
    assert_int_equal(s.eff_cpus, 0);
    /* lists of single CPUs and ranges mixed; a malformed list counts nothing as its kind */
    put(root, "/sys/devices/cpu_core/cpus", "0,1,2-3,4-5,6-11\n");
    put(root, "/sys/devices/cpu_atom/cpus", "12-15,16,17-19\n");
    s = read_all(root, 20, 20);
    assert_int_equal(s.perf_cores, 6);
    assert_int_equal(s.eff_cpus, 8);
    put(root, "/sys/devices/cpu_atom/cpus", "12-x\n");
    s = read_all(root, 20, 20);
    assert_int_equal(s.perf_cores, 0);
    assert_int_equal(s.eff_cpus, 0);
    /* no cpu_atom at all (not hybrid) */
    char path[1024];
    snprintf(path, sizeof(path), "%s/sys/devices/cpu_atom/cpus", root);
    assert_int_equal(unlink(path), 0);
    s = read_all(root, 20, 20);
    assert_int_equal(s.perf_cores, 0);
    assert_int_equal(s.eff_cpus, 0);
    assert_int_equal(s.threads, 14);
    t_rm_rf(root);
    free(root);
}

static void test_cgroup_v2(void **state)
{
    (void)state;
    char *root = t_mkdtemp("cpuset");
    assert_non_null(root);
    put_smt_topology(root, 16);
    put(root, "/proc/self/mountinfo", mountinfo_v2);
    put(root, "/proc/self/cgroup", "0::/slurm/job7/step0\n");
    put(root, "/sys/fs/cgroup/cpu.max", "max 100000\n");
    put(root, "/sys/fs/cgroup/slurm/cpu.max", "max 100000\n");
    put(root, "/sys/fs/cgroup/slurm/job7/cpu.max", "250000 100000\n");
    put(root, "/sys/fs/cgroup/slurm/job7/step0/cpu.max", "max 100000\n");
    es_cpuset s = read_all(root, 16, 16);
    assert_true(t_near(s.quota, 2.5, 1e-12));
    assert_int_equal(s.cores, 8);
    assert_int_equal(s.threads, 3); /* 2.5 CPUs of time keep three threads busy */
    assert_int_equal(s.runnable, 3);

    /* the lowest limit on the path wins, wherever it is */
    put(root, "/sys/fs/cgroup/slurm/cpu.max", "150000 100000\n");
    s = read_all(root, 16, 16);
    assert_true(t_near(s.quota, 1.5, 1e-12));
    assert_int_equal(s.threads, 2);
    put(root, "/sys/fs/cgroup/slurm/job7/step0/cpu.max", "50000 100000\n");
    s = read_all(root, 16, 16);
    assert_true(t_near(s.quota, 0.5, 1e-12));
    assert_int_equal(s.threads, 1);
    assert_int_equal(s.runnable, 1);

    /* a quota above the cores does not add threads */
    put(root, "/sys/fs/cgroup/slurm/cpu.max", "max 100000\n");
    put(root, "/sys/fs/cgroup/slurm/job7/step0/cpu.max", "max 100000\n");
    put(root, "/sys/fs/cgroup/slurm/job7/cpu.max", "2000000 100000\n");
    s = read_all(root, 16, 16);
    assert_true(t_near(s.quota, 20.0, 1e-12));
    assert_int_equal(s.threads, 8);
    assert_int_equal(s.runnable, 16); /* the CPUs bound it, not the quota */

    /* malformed or empty limits bound nothing, and crash nothing */
    put(root, "/sys/fs/cgroup/slurm/job7/cpu.max", "lots 100000\n");
    s = read_all(root, 16, 16);
    assert_true(s.quota == 0);
    assert_int_equal(s.threads, 8);
    put(root, "/sys/fs/cgroup/slurm/job7/cpu.max", "");
    assert_int_equal(read_all(root, 16, 16).threads, 8);
    put(root, "/sys/fs/cgroup/slurm/job7/cpu.max", "100000 0\n");
    assert_int_equal(read_all(root, 16, 16).threads, 8);
    put(root, "/sys/fs/cgroup/slurm/job7/cpu.max", "-100000 100000\n");
    assert_int_equal(read_all(root, 16, 16).threads, 8);
    t_rm_rf(root);
    free(root);
}

/* A container: the mount shows its own cgroup as the top (mountinfo's root is the cgroup's path
 * on the host, or the container has its own cgroup namespace and sees "/"). */
static void test_cgroup_container(void **state)
{
    (void)state;
    char *root = t_mkdtemp("cpuset");
    assert_non_null(root);
    put_smt_topology(root, 8);
    put(root, "/proc/self/mountinfo",
        "30 25 0:27 /docker/abc /sys/fs/cgroup ro,nosuid - cgroup2 cgroup rw\n");
    put(root, "/proc/self/cgroup", "0::/docker/abc\n");
    put(root, "/sys/fs/cgroup/cpu.max", "200000 100000\n");
    es_cpuset s = read_all(root, 8, 8);
    assert_true(t_near(s.quota, 2.0, 1e-12));
    assert_int_equal(s.threads, 2);
    /* a cgroup namespace: the process's path is outside the mount's root */
    put(root, "/proc/self/cgroup", "0::/\n");
    s = read_all(root, 8, 8);
    assert_int_equal(s.threads, 2);
    /* a mount point written with an escaped space and an escaped backslash */
    put(root, "/proc/self/mountinfo",
        "30 25 0:27 / /sys/fs/cg\\040v2\\134x rw - cgroup2 cgroup2 rw\n");
    put(root, "/proc/self/cgroup", "0::/a\n");
    put(root, "/sys/fs/cg v2\\x/a/cpu.max", "100000 100000\n");
    s = read_all(root, 8, 8);
    assert_true(t_near(s.quota, 1.0, 1e-12));
    assert_int_equal(s.threads, 1);

    /* broken files: short and overlong lines, no separator, no type, paths past any buffer */
    char *junk = malloc(20000);
    assert_non_null(junk);
    memset(junk, '/', 19999);
    junk[19999] = 0;
    put(root, "/proc/self/mountinfo", "30 25\n\n - cgroup2\n30 25 0:27 / /x rw cgroup2 cgroup2\n");
    put(root, "/proc/self/cgroup", "0:/a\n::\n0::\nnonsense\n");
    assert_true(read_all(root, 8, 8).quota == 0);
    put(root, "/proc/self/mountinfo", junk);
    put(root, "/proc/self/cgroup", junk);
    s = read_all(root, 8, 8);
    assert_true(s.quota == 0);
    assert_int_equal(s.threads, 4);
    put(root, "/proc/self/mountinfo", "30 25 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
    junk[0] = '0', junk[1] = ':', junk[2] = ':';
    put(root, "/proc/self/cgroup", junk);
    assert_int_equal(read_all(root, 8, 8).threads, 4);
    free(junk);
    t_rm_rf(root);
    free(root);
}

/* cgroup v1 (and the hybrid layout: v2 mounted without the cpu controller beside v1's cpu) */
static void test_cgroup_v1(void **state)
{
    (void)state;
    char *root = t_mkdtemp("cpuset");
    assert_non_null(root);
    put_smt_topology(root, 32);
    put(root, "/proc/self/mountinfo",
        "31 25 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
        "33 25 0:29 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        "34 25 0:30 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
        "35 25 0:31 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n");
    put(root, "/proc/self/cgroup",
        "12:memory:/kubepods/pod1/c1\n"
        "6:cpuset:/kubepods/pod1/c1\n"
        "4:cpu,cpuacct:/kubepods/pod1/c1\n"
        "0::/kubepods/pod1/c1\n");
    put(root, "/sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/c1/cpu.cfs_quota_us", "400000\n");
    put(root, "/sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/c1/cpu.cfs_period_us", "100000\n");
    put(root, "/sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/cpu.cfs_quota_us", "-1\n");
    put(root, "/sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/cpu.cfs_period_us", "100000\n");
    /* a cpuset controller's file named like a quota does not count */
    put(root, "/sys/fs/cgroup/cpuset/kubepods/pod1/c1/cpu.cfs_quota_us", "100000\n");
    es_cpuset s = read_all(root, 32, 32);
    assert_true(t_near(s.quota, 4.0, 1e-12));
    assert_int_equal(s.cores, 16);
    assert_int_equal(s.threads, 4);
    /* the pod's limit is lower */
    put(root, "/sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/cpu.cfs_quota_us", "300000\n");
    s = read_all(root, 32, 32);
    assert_true(t_near(s.quota, 3.0, 1e-12));
    assert_int_equal(s.threads, 3);
    /* v2 (unified) with a lower cpu.max too: the lower of the two */
    put(root, "/sys/fs/cgroup/unified/kubepods/pod1/c1/cpu.max", "120000 100000\n");
    s = read_all(root, 32, 32);
    assert_true(t_near(s.quota, 1.2, 1e-12));
    assert_int_equal(s.threads, 2);
    /* a period file that is missing: that level bounds nothing */
    put(root, "/sys/fs/cgroup/unified/kubepods/pod1/c1/cpu.max", "max 100000\n");
    char path[1024];
    snprintf(path, sizeof(path), "%s/sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/cpu.cfs_period_us",
             root);
    assert_int_equal(unlink(path), 0);
    s = read_all(root, 32, 32);
    assert_true(t_near(s.quota, 4.0, 1e-12));
    t_rm_rf(root);
    free(root);
}

static const uint64_t GIB = 1ull << 30;

static void test_memory_limit(void **state)
{
    (void)state;
    char *root = t_mkdtemp("memlimit");
    assert_non_null(root);
    es_memlimit m;
    es_memlimit_read(root, &m); /* nothing readable */
    assert_true(m.total == 0 && m.cgroup == 0 && m.bytes == 0);
    assert_string_equal(m.source, "");

    put(root, "/proc/meminfo", "MemTotal:       16777216 kB\nMemFree:         1000 kB\n");
    es_memlimit_read(root, &m);
    assert_true(m.total == 16 * GIB && m.cgroup == 0 && m.bytes == 16 * GIB);
    assert_string_equal(m.source, "MemTotal");

    /* v2: the job's limit below the slice's "max" */
    put(root, "/proc/self/mountinfo", mountinfo_v2);
    put(root, "/proc/self/cgroup", "0::/slurm/job7/step0\n");
    put(root, "/sys/fs/cgroup/slurm/memory.max", "max\n");
    put(root, "/sys/fs/cgroup/slurm/job7/memory.max", "4294967296\n");
    put(root, "/sys/fs/cgroup/slurm/job7/step0/memory.max", "max\n");
    es_memlimit_read(root, &m);
    assert_true(m.cgroup == 4 * GIB && m.bytes == 4 * GIB);
    assert_string_equal(m.source, "cgroup");
    /* a step's lower limit; then one above the machine's memory, which is the bound */
    put(root, "/sys/fs/cgroup/slurm/job7/step0/memory.max", "3221225472\n");
    es_memlimit_read(root, &m);
    assert_true(m.bytes == 3 * GIB);
    put(root, "/sys/fs/cgroup/slurm/job7/step0/memory.max", "max\n");
    put(root, "/sys/fs/cgroup/slurm/job7/memory.max", "68719476736\n");
    es_memlimit_read(root, &m);
    assert_true(m.cgroup == 64 * GIB && m.bytes == 16 * GIB);
    assert_string_equal(m.source, "MemTotal");
    /* junk bounds nothing */
    put(root, "/sys/fs/cgroup/slurm/job7/memory.max", "4294967296 bytes\n");
    es_memlimit_read(root, &m);
    assert_true(m.cgroup == 0 && m.bytes == 16 * GIB);

    /* v1: "unlimited" is about 2^63; the parent's 2 GiB holds */
    put(root, "/proc/self/mountinfo",
        "34 25 0:30 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n");
    put(root, "/proc/self/cgroup", "9:memory:/docker/abc\n0::/\n");
    put(root, "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "9223372036854771712\n");
    put(root, "/sys/fs/cgroup/memory/docker/memory.limit_in_bytes", "2147483648\n");
    es_memlimit_read(root, &m);
    assert_true(m.cgroup == 2 * GIB && m.bytes == 2 * GIB);
    assert_string_equal(m.source, "cgroup");
    t_rm_rf(root);
    free(root);
}

/* A resident run on a model file larger than the memory the process may use says so once, with
 * the budget that streams it; a run under a budget, or on a machine that holds the file, does
 * not. */
static void test_resident_warning(void **state)
{
    (void)state;
    static const char warning[] = "larger than the memory this process may use";
    char out[8192], err[8192];
    const char *bin = t_bin();
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "ESTREAM_MEM_LIMIT=1000000 %s prefill -m tests/data/tiny-f32.gguf -p hi", bin);
    assert_int_equal(t_run_cmd(cmd, out, sizeof(out), err, sizeof(err)), 0);
    const char *w = strstr(err, warning);
    assert_non_null(w);
    assert_non_null(strstr(err, "(0 MiB, ESTREAM_MEM_LIMIT)"));
    assert_non_null(strstr(err, "--mem 1M"));
    assert_null(strstr(w + 1, warning)); /* once */
    snprintf(cmd, sizeof(cmd),
             "ESTREAM_MEM_LIMIT=1000000 %s prefill -m tests/data/tiny-f32.gguf -p hi --mem 64M",
             bin);
    assert_int_equal(t_run_cmd(cmd, out, sizeof(out), err, sizeof(err)), 0);
    assert_null(strstr(err, warning));
    snprintf(cmd, sizeof(cmd),
             "ESTREAM_MEM_LIMIT=2000000 %s prefill -m tests/data/tiny-f32.gguf -p hi", bin);
    assert_int_equal(t_run_cmd(cmd, out, sizeof(out), err, sizeof(err)), 0);
    assert_null(strstr(err, warning));
}

/* The lowest CPU this process may run on (not always 0 in a container). */
static int first_allowed_cpu(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    assert_int_equal(sched_getaffinity(0, sizeof(set), &set), 0);
    int first = 0;
    while (first < CPU_SETSIZE && !CPU_ISSET(first, &set))
        first++;
    assert_true(first < CPU_SETSIZE);
    return first;
}

/* OMP_NUM_THREADS: a count (its first entry) is the default, whatever the CPUs; anything else is
 * ignored with a warning. */
static void test_omp_num_threads(void **state)
{
    (void)state;
    assert_int_equal(es_cpuset_omp_threads(NULL), 0);
    assert_int_equal(es_cpuset_omp_threads(""), 0);
    assert_int_equal(es_cpuset_omp_threads("4"), 4);
    assert_int_equal(es_cpuset_omp_threads("4,2"), 4);
    assert_int_equal(es_cpuset_omp_threads("3 "), 3);
    assert_int_equal(es_cpuset_omp_threads("100000"), ES_MAX_THREADS);
    const char *bad[] = {"0", "-2", "x", "4x", "99999999999999999999999", ",4", "2.5"};
    for (size_t i = 0; i < T_LEN(bad); i++)
        assert_int_equal(es_cpuset_omp_threads(bad[i]), -1);

    char cmd[1024], out[8192], err[8192];
    const int first = first_allowed_cpu();
    snprintf(cmd, sizeof(cmd),
             "OMP_NUM_THREADS=3 taskset -c %d %s prefill -m tests/data/tiny-f32.gguf -p hi --json",
             first, t_bin());
    assert_int_equal(t_run_cmd(cmd, out, sizeof(out), err, sizeof(err)), 0);
    const char *t = strstr(out, "\"n_threads\": ");
    assert_non_null(t);
    assert_int_equal(atoi(t + 13), 3);
    snprintf(cmd, sizeof(cmd),
             "OMP_NUM_THREADS=many taskset -c %d %s prefill -m tests/data/tiny-f32.gguf -p hi "
             "--json",
             first, t_bin());
    assert_int_equal(t_run_cmd(cmd, out, sizeof(out), err, sizeof(err)), 0);
    assert_non_null(strstr(err, "OMP_NUM_THREADS=many is not a positive number of threads"));
    assert_non_null(t = strstr(out, "\"n_threads\": "));
    assert_int_equal(atoi(t + 13), 1); /* the one CPU of the mask */
}

/* This process: the default never exceeds the CPUs it may run on, and a session created with
 * n_threads 0 runs the default; a child pinned to one CPU defaults to one thread. */
static void test_this_process(void **state)
{
    (void)state;
    const es_cpuset *s = es_cpuset_get();
    cpu_set_t set;
    CPU_ZERO(&set);
    assert_int_equal(sched_getaffinity(0, sizeof(set), &set), 0);
    assert_int_equal(s->allowed, CPU_COUNT(&set));
    assert_true(s->cores <= s->allowed && s->allowed <= s->online);
    if (s->omp <= 0) assert_true(s->threads >= 1 && s->threads <= s->cores);
    assert_int_equal(es_session_default_params().n_threads, s->threads);

    char cmd[1024], out[8192];
    const int first = first_allowed_cpu();
    snprintf(cmd, sizeof(cmd),
             "env -u OMP_NUM_THREADS taskset -c %d %s prefill -m tests/data/tiny-f32.gguf -p hi "
             "--json",
             first, t_bin());
    assert_int_equal(t_run(cmd, out, sizeof(out)), 0);
    const char *t = strstr(out, "\"n_threads\": ");
    assert_non_null(t);
    assert_int_equal(atoi(t + 13), 1);
}

/* An explicit count, or OMP_NUM_THREADS's, above the CPUs that can run at once is obeyed and
 * said on stderr with the count that runs; a count within them is not. */
static void test_thread_warning(void **state)
{
    (void)state;
    static const char warning[] = "but this process can run at most 1 at once (1 CPU in its "
                                  "affinity mask)";
    char cmd[1024], out[8192], err[8192];
    const int first = first_allowed_cpu();
    snprintf(cmd, sizeof(cmd),
             "env -u OMP_NUM_THREADS taskset -c %d %s prefill -m tests/data/tiny-f32.gguf -p hi "
             "-t 2 --json",
             first, t_bin());
    assert_int_equal(t_run_cmd(cmd, out, sizeof(out), err, sizeof(err)), 0);
    const char *w = strstr(err, "2 compute threads, but");
    assert_non_null(w);
    assert_non_null(strstr(err, warning));
    assert_non_null(strstr(err, "-t 1 (threads=1 in Python) runs faster"));
    assert_null(strstr(w + 22, "compute threads, but")); /* once */
    const char *t = strstr(out, "\"n_threads\": ");
    assert_non_null(t);
    assert_int_equal(atoi(t + 13), 2); /* obeyed */
    snprintf(cmd, sizeof(cmd),
             "OMP_NUM_THREADS=3 taskset -c %d %s prefill -m tests/data/tiny-f32.gguf -p hi",
             first, t_bin());
    assert_int_equal(t_run_cmd(cmd, out, sizeof(out), err, sizeof(err)), 0);
    assert_non_null(strstr(err, "3 compute threads (OMP_NUM_THREADS), but"));
    assert_non_null(strstr(err, "OMP_NUM_THREADS=1 runs faster"));
    snprintf(cmd, sizeof(cmd),
             "env -u OMP_NUM_THREADS taskset -c %d %s prefill -m tests/data/tiny-f32.gguf -p hi "
             "-t 1",
             first, t_bin());
    assert_int_equal(t_run_cmd(cmd, out, sizeof(out), err, sizeof(err)), 0);
    assert_null(strstr(err, "compute threads"));
    /* the reference path runs one thread whatever the count */
    snprintf(cmd, sizeof(cmd),
             "env -u OMP_NUM_THREADS taskset -c %d %s prefill -m tests/data/tiny-f32.gguf -p hi "
             "-t 2 --reference",
             first, t_bin());
    assert_int_equal(t_run_cmd(cmd, out, sizeof(out), err, sizeof(err)), 0);
    assert_null(strstr(err, "compute threads"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_physical_cores),   cmocka_unit_test(test_cgroup_v2),
        cmocka_unit_test(test_cgroup_container), cmocka_unit_test(test_cgroup_v1),
        cmocka_unit_test(test_memory_limit),     cmocka_unit_test(test_resident_warning),
        cmocka_unit_test(test_omp_num_threads),  cmocka_unit_test(test_this_process),
        cmocka_unit_test(test_thread_warning),   cmocka_unit_test(test_hybrid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
