/* The memory this process may use (memlimit.h). */
#include "core/memlimit.h"

#include "core/cgroup.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Limits at or above 2^60 bytes are "none": v1 writes its unlimited as about 2^63. */
static double bytes_of(double v)
{
    return isfinite(v) && v >= 1 && v < 0x1p60 ? v : 0;
}

static double read_bytes(const char *root, const char *dir, const char *file)
{
    char path[ES_CGROUP_PATH_CAP], line[256], *end;
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    if (!es_read_first_line(root, path, line, sizeof(line))) return 0;
    const double v = strtod(line, &end); /* "max" (v2's none) does not parse */
    return end != line && *end == 0 ? bytes_of(v) : 0;
}

static double memory_max(const char *root, const char *dir)
{
    return read_bytes(root, dir, "memory.max");
}

static double memory_limit_in_bytes(const char *root, const char *dir)
{
    return read_bytes(root, dir, "memory.limit_in_bytes");
}

/* MemTotal from meminfo ("MemTotal:       24574400 kB"), 0 if absent. */
static uint64_t mem_total(const char *root)
{
    char line[256];
    uint64_t kib = 0;
    return es_read_first_line(root, "/proc/meminfo", line, sizeof(line)) &&
                   sscanf(line, "MemTotal: %" SCNu64 " kB", &kib) == 1 && kib < (1ull << 50)
               ? kib << 10
               : 0;
}

void es_memlimit_read(const char *root, es_memlimit *out)
{
    out->total = mem_total(root);
    out->cgroup = (uint64_t)es_cgroup_lowest(root, "memory", memory_max, memory_limit_in_bytes);
    const bool by_cgroup = out->cgroup && (!out->total || out->cgroup < out->total);
    out->bytes = by_cgroup ? out->cgroup : out->total;
    out->source = by_cgroup ? "cgroup" : out->total ? "MemTotal" : "";
}

static es_memlimit detected;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void detect(void)
{
    es_memlimit_read("", &detected);
    const char *e = getenv("ESTREAM_MEM_LIMIT");
    char *end;
    const double v = e && *e ? strtod(e, &end) : 0;
    if (e && *e && end != e && *end == 0 && bytes_of(v) > 0) {
        detected.bytes = (uint64_t)v;
        detected.source = "ESTREAM_MEM_LIMIT";
    }
}

const es_memlimit *es_memlimit_get(void)
{
    pthread_once(&once, detect);
    return &detected;
}
