/* Timing helpers of the CLI (cli.h): the clock the commands time runs with, and the median of
 * repetitions (bench's rows, tune's sweep). No estream types, so they are the CLI's own. */
#include "cli/cli.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

uint64_t cli_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double cli_median(double *v, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(v[i])) v[k++] = v[i];
    if (k == 0) return NAN;
    qsort(v, (size_t)k, sizeof(double), cmp_double);
    return k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
}
