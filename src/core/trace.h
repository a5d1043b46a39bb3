/* Trace recorder: timed spans and counter samples from several threads, written as a Chrome
 * trace-event JSON file (open it in https://ui.perfetto.dev or chrome://tracing).
 *
 * The expert-streaming pipeline records, for instance, one track per thread ("compute": the
 * attention, router and expert-group phases of each layer; "loader 0", "loader 1": reads per
 * loader slot) and counters ("ready banks", "reads in flight").
 *
 * Every function takes t == NULL as a no-op (es_trace_track then returns -1), so call sites need
 * no "if (trace)"; only es_trace_create() and es_trace_write() report errors. Recording never
 * fails: if memory runs out the event is dropped and counted, and es_trace_write() notes how
 * many were dropped. All functions are thread-safe (one mutex per trace). */
#ifndef ES_TRACE_H
#define ES_TRACE_H

#include "estream.h"
#include <stdint.h>

typedef struct es_trace es_trace; /* opaque */

/* Creates an empty trace whose time origin is now (es_trace_now_ns()). Release it with
 * es_trace_destroy(). Errors: ES_E_INVAL (out is NULL), ES_E_NOMEM. */
es_status es_trace_create(es_trace **out);
void es_trace_destroy(es_trace *t); /* NULL is a no-op; no thread may record at that time */

/* The clock of every timestamp: CLOCK_MONOTONIC in nanoseconds. */
uint64_t es_trace_now_ns(void);

/* The id (0, 1, ...) of the track named name (NULL is ""): one row in the viewer (a Chrome
 * "tid" with a thread_name metadata event), in order of creation. A name seen before gives the
 * same id. The name is copied. Returns -1 for t == NULL or when out of memory; events on
 * track -1 are dropped (and counted). */
int es_trace_track(es_trace *t, const char *name);

/* Records a complete event ("ph":"X") named name (NULL is "") on track, from t0_ns to t1_ns
 * (es_trace_now_ns() values; a start before the origin is clamped to it, an end before the
 * start gives a zero duration). arg1 and arg2 (NULL: none) name up to two integer arguments,
 * v1 and v2 (e.g. "layer", "expert0"). Strings are copied into the trace (callers may pass
 * snprintf buffers); each distinct string is stored once. A track that es_trace_track() did
 * not return drops the event (counted). */
void es_trace_span(es_trace *t, int track, const char *name, uint64_t t0_ns, uint64_t t1_ns,
                   const char *arg1, int64_t v1, const char *arg2, int64_t v2);

/* Records a counter sample ("ph":"C"): the counter name (NULL is "") has value from ts_ns on.
 * A value that is not finite cannot be written in JSON: the sample is dropped (counted). */
void es_trace_counter(es_trace *t, const char *name, uint64_t ts_ns, double value);

/* Writes the trace to path: {"traceEvents":[...],"displayTimeUnit":"ms","otherData":{...}}.
 * Metadata events come first (process_name "estream" for pid 1, then thread_name and
 * thread_sort_index per track; track k is tid k + 2, counters are on tid 1), then spans and
 * counter samples sorted by start time (ties in recording order), timestamps in microseconds
 * from the origin with 3 decimals (exact nanoseconds). Strings are JSON-escaped (invalid UTF-8
 * becomes U+FFFD). otherData.dropped_events counts the events lost; when it is not 0 a warning
 * is logged. Atomic (core/outfile.h): on error nothing is left at path. Thread-safe: threads
 * that record meanwhile wait for it (it holds the trace's lock while it formats and writes), so
 * call it once the run is over.
 * Errors: ES_E_INVAL (t or path NULL), ES_E_IO, ES_E_NOMEM. */
es_status es_trace_write(const es_trace *t, const char *path);

#endif
