/* Buffered text output over es_outfile (atomic: temporary file + rename), with the escaping that
 * JSON and XML writers need. Used by the trace writer (core/trace.c) and the SVG chart writer
 * (core/plot_svg.c).
 *
 * DESIGN: the first error sticks. Every put/printf after a failure is a no-op, so a writer emits
 * its whole document without checking each call and asks once, at es_outbuf_commit(), which
 * either renames the complete file into place or removes the temporary file. Text that is not
 * valid UTF-8 is never copied through: each byte that does not start a valid sequence becomes
 * U+FFFD, so the output is valid UTF-8 whatever names the callers pass. */
#ifndef ES_OUTBUF_H
#define ES_OUTBUF_H

#include "core/outfile.h"
#include "estream.h"
#include <stddef.h>

typedef struct es_outbuf {
    es_outfile f;
    es_status st; /* first error, ES_OK so far */
    size_t len;   /* bytes of buf not yet written */
    char buf[8192];
} es_outbuf;

/* Opens path through es_outfile_open() (same errors). On failure b holds nothing and nothing
 * was created. One es_outbuf is used by one thread. */
es_status es_outbuf_open(es_outbuf *b, const char *path);

/* Appends n bytes / a printf-formatted string. No-ops after an error. */
void es_outbuf_put(es_outbuf *b, const void *p, size_t n);
void es_outbuf_puts(es_outbuf *b, const char *s);
void es_outbuf_printf(es_outbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appends s (NULL is "") as a JSON string, quotes included: '"' and '\\' escaped, control
 * characters as \n, \t, ... or \u00XX, invalid UTF-8 as \ufffd. */
void es_outbuf_json_str(es_outbuf *b, const char *s);

/* Appends s (NULL is "") as XML character data or attribute value: & < > " ' as entities;
 * characters XML 1.0 forbids (controls other than tab, newline, return; U+FFFE, U+FFFF) and
 * invalid UTF-8 as U+FFFD. */
void es_outbuf_xml_str(es_outbuf *b, const char *s);

/* Flushes and commits: on success the file is in place. If any write failed (or the commit
 * fails) the temporary file is removed, nothing is left at the path, and the first error is
 * returned (its message in es_last_error()). b is closed either way. */
es_status es_outbuf_commit(es_outbuf *b);

/* Abandons the output: the temporary file is removed. A closed b is a no-op. */
void es_outbuf_abort(es_outbuf *b);

/* Length (1..4) of the valid UTF-8 sequence at s[0..n), n > 0; 0 if s does not start one
 * (stray continuation, overlong form, surrogate, above U+10FFFF, truncated). */
size_t es_utf8_valid_len(const unsigned char *s, size_t n);

#endif
