/* Error reporting: status names and the thread-local last-error message. */
#include "core/util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static _Thread_local char last_error[512];

const char *es_status_str(es_status st)
{
    switch (st) {
    case ES_OK: return "ok";
    case ES_E_INVAL: return "invalid argument";
    case ES_E_NOMEM: return "out of memory";
    case ES_E_BUDGET: return "memory budget too small";
    case ES_E_IO: return "I/O error";
    case ES_E_FORMAT: return "format error";
    case ES_E_UNSUPPORTED: return "unsupported";
    case ES_E_CANCELLED: return "cancelled";
    case ES_E_SHORT_BUFFER: return "buffer too small";
    }
    return "unknown status";
}

const char *es_last_error(void) { return last_error; }

es_status es_fail(es_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    return code;
}

void es_abort(const char *file, int line, const char *cond)
{
    fprintf(stderr, "estream: internal error at %s:%d: assertion failed: %s\n", file, line, cond);
    abort();
}

#define ES_STR_(x) #x
#define ES_STR(x) ES_STR_(x)
const char *es_version(void)
{
    return ES_STR(ES_VERSION_MAJOR) "." ES_STR(ES_VERSION_MINOR) "." ES_STR(ES_VERSION_PATCH);
}
