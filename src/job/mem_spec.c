/*
 * A memory budget as people write it (include/estream.h es_mem_budget_parse): `--mem` of every
 * command, `mem=` of the Python package, and `auto`, read here once for all of them.
 *
 * DESIGN: auto is the budget the resident run's warning names (run/session.c): 80 % of the
 * memory this process may use (core/memlimit.h), the rest left to what the budget does not
 * count (the interpreter of a Python caller, the page cache of the files it reads). A model
 * file that fits within it runs resident, as with no budget at all, since streaming it would only
 * read again what the page cache would keep.
 */
#include "estream.h"

#include "core/memlimit.h"
#include "core/util.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

uint64_t es_memory_limit(const char **source)
{
    const es_memlimit *lim = es_memlimit_get();
    if (source) *source = lim->source;
    return lim->bytes;
}

static es_status file_size(const char *spec, const char *model_path, uint64_t *out)
{
    struct stat sb;
    if (!model_path) return es_fail(ES_E_INVAL, "'%s' needs the model file's size", spec);
    if (stat(model_path, &sb) != 0)
        return es_fail(ES_E_IO, "'%s': cannot read the size of %s: %s", spec, model_path,
                       strerror(errno));
    *out = (uint64_t)sb.st_size;
    return ES_OK;
}

static es_status auto_budget(const char *model_path, uint64_t *bytes)
{
    const char *source;
    const uint64_t limit = es_memory_limit(&source);
    if (!limit)
        return es_fail(ES_E_INVAL, "'auto' needs the memory this process may use, which could "
                                   "not be read here (no /proc/meminfo): give a size");
    uint64_t file;
    ES_TRY(file_size("auto", model_path, &file));
    const uint64_t budget = limit / 100 * ES_MEM_AUTO_PERCENT;
    *bytes = file > budget ? (budget ? budget : 1) : 0; /* 0 would mean resident */
    return ES_OK;
}

es_status es_mem_budget_parse(const char *spec, const char *model_path, uint64_t *bytes)
{
    if (!spec || !bytes) return es_fail(ES_E_INVAL, "es_mem_budget_parse: NULL argument");
    *bytes = 0;
    if (!strcmp(spec, "auto")) return auto_budget(model_path, bytes);
    const char *p = spec;
    while (isspace((unsigned char)*p))
        p++;
    if (*p == '+') p++;
    /* strtod reads hex, "inf" and "nan" too: a size is decimal digits or a point first */
    const bool decimal =
        (isdigit((unsigned char)*p) || *p == '.') && !(p[0] == '0' && (p[1] == 'x' || p[1] == 'X'));
    char *end = NULL;
    errno = 0;
    const double x = decimal ? strtod(p, &end) : 0;
    if (!end || end == p || errno || !(x > 0) || !isfinite(x))
        return es_fail(ES_E_INVAL, "expected a size such as 600M, 1.5G, 25%% or auto, got '%s'",
                       spec);
    double b;
    if (!strcmp(end, "%")) {
        if (x > 100) return es_fail(ES_E_INVAL, "%s is more than the whole file", spec);
        uint64_t file;
        ES_TRY(file_size(spec, model_path, &file));
        b = x / 100.0 * (double)file;
    } else {
        static const struct {
            const char *name;
            double unit;
        } units[] = {{"", 1},
                     {"B", 1},
                     {"K", 1024.0},
                     {"KiB", 1024.0},
                     {"k", 1024.0},
                     {"M", 1048576.0},
                     {"MiB", 1048576.0},
                     {"G", 1073741824.0},
                     {"GiB", 1073741824.0},
                     {"T", 1099511627776.0},
                     {"TiB", 1099511627776.0}};
        size_t i = 0;
        while (i < sizeof(units) / sizeof(units[0]) && strcmp(end, units[i].name))
            i++;
        if (i == sizeof(units) / sizeof(units[0]))
            return es_fail(ES_E_INVAL,
                           "unknown unit in '%s' (use K, M, G, T: powers of 1024, or %%)", spec);
        b = x * units[i].unit;
    }
    if (b < 1 || b > 1e18) return es_fail(ES_E_INVAL, "'%s' is out of range", spec);
    *bytes = (uint64_t)b;
    return ES_OK;
}
