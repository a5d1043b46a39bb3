/*
 * The CPUs this process may use, and how many compute threads it runs by default.
 *
 * DESIGN: a process started by a scheduler (Slurm, Kubernetes, docker --cpus or --cpuset-cpus,
 * taskset, systemd's CPUQuota=) sees every CPU of the host in sysconf(_SC_NPROCESSORS_ONLN) but
 * may run on fewer: its affinity mask names the CPUs it may run on (cpusets), and a cgroup CPU
 * quota caps the CPU time of all its threads (cpu.max in cgroup v2, cpu.cfs_quota_us over
 * cpu.cfs_period_us in v1; the lowest limit on the path from its cgroup to the hierarchy's root
 * applies). Threads beyond either bound wait at every barrier of the fork-join pool for one
 * another to be scheduled. Within the allowed CPUs the default is also one thread per physical
 * core: the hyperthreads of a core share its vector units and its L2, which the kernels size
 * their tiles and scratch for per thread (quant/kern_drive.c), and llama.cpp's default thread
 * count is the physical cores too, so the two engines compare at their defaults.
 *
 *   threads = min(physical cores among the allowed CPUs, ceil(cgroup quota), ES_MAX_THREADS),
 *             at least 1
 *
 * unless OMP_NUM_THREADS names a count (at most ES_MAX_THREADS): the convention numerical
 * libraries (OpenMP, BLAS, PyTorch) share for "this process's compute threads", which Ray sets
 * to each task's and actor's num_cpus (1 where none is given) and batch scripts set to their
 * allocation. A value that is not a positive number is ignored with a warning.
 *
 * A count given explicitly (-t, threads=) is obeyed, hyperthreads included, but one above the
 * CPUs that can run at once (`runnable`) is said once on stderr.
 *
 * On a hybrid CPU (Intel's P- and E-cores) the E-cores count as cores too: the expert operator
 * takes its chunks as threads come, the other phases split evenly, and which way the slower
 * cores tip a run has not been measured (llama.cpp's default leaves them out). `perf_cores` and
 * `eff_cpus` say what the machine has, for `estream info --system` and a user's -t.
 *
 * What cannot be read (no sysfs topology, no cgroup file, an unparsable line) bounds nothing: the
 * count falls back to the allowed CPUs, then to the online ones. Read once per process.
 *
 * Thread-safety: es_cpuset_get() may be called from any thread; es_cpuset_read() is reentrant.
 */
#ifndef ES_CPUSET_H
#define ES_CPUSET_H

typedef struct es_cpuset {
    int online;   /* CPUs online (sysconf) */
    int allowed;  /* CPUs in the affinity mask; online when the mask cannot be read */
    int cores;    /* physical cores the allowed CPUs belong to; allowed when the topology is
                   * unknown */
    double quota; /* the cgroup CPU limit in CPUs (1.5: 150 ms of CPU time per 100 ms); 0: none */
    int runnable; /* the most threads that can run at once: min(allowed, ceil(quota)); more (an
                   * explicit count) wait at the pool's barriers: run/session.c warns */
    int perf_cores; /* a hybrid CPU (Intel's P- and E-cores, sysfs cpu_core and cpu_atom) with
                     * both kinds allowed: the physical performance cores among them; else 0 */
    int eff_cpus;   /* ... and the allowed efficiency CPUs; else 0 */
    int omp;      /* OMP_NUM_THREADS's count; 0: unset, -1: not a count (ignored) */
    int threads;  /* the default compute thread count (the rule above): es_session_default_params */
} es_cpuset;

/* This process's, read on the first call. */
const es_cpuset *es_cpuset_get(void);

/* The thread count an OMP_NUM_THREADS value names (its first entry, at most ES_MAX_THREADS); 0
 * for NULL or empty, -1 (with a warning) for one that is not a positive number. */
int es_cpuset_omp_threads(const char *v);

/* The same from the files under root ("" for the real ones; tests give a directory holding
 * proc/self/mountinfo, proc/self/cgroup, the cgroup files the mountinfo names and
 * sys/devices/system/cpu/cpuN/topology/thread_siblings_list, and sys/devices/cpu_core/cpus and
 * sys/devices/cpu_atom/cpus on a hybrid CPU) for the n_cpus allowed CPU ids in
 * cpus, of online CPUs online. */
void es_cpuset_read(const char *root, const int *cpus, int n_cpus, int online, es_cpuset *out);

#endif
