/* HTTP/1.1 on the wire (RFC 9112), as far as estream serve speaks it: the request head (request
 * line and header fields), chunked request bodies and the head of a reply. Pure functions over
 * buffers, no sockets, so that the fuzz target (tests/fuzz/fuzz_serve.c) reaches every branch.
 *
 * DESIGN
 * - Strict where a lenient reading would let two parties disagree about where a request ends
 *   (request smuggling): one Content-Length of digits only, never with Transfer-Encoding, which
 *   must be exactly "chunked"; no obs-fold; no whitespace between a field name and its colon;
 *   no control characters but HTAB in values. Lenient where no such disagreement can arise: a
 *   bare LF ends a line as CRLF does (RFC 9112 2.2 allows it), empty lines before a request line
 *   are skipped (a client may send CRLF after a body).
 * - Limits: a head of at most SV_HEAD_MAX bytes (431 past it), a request target of at most
 *   SV_TARGET_MAX (414), SV_HEADERS_MAX fields (431). A size that overflows 64 bits saturates, so
 *   that the caller refuses it as too large (413) rather than as malformed.
 * - The parsed head points into the caller's buffer, which the parser changes in place (NULs at
 *   the ends of the method, path and field values).
 */
#ifndef ES_SERVE_HTTP1_H
#define ES_SERVE_HTTP1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SV_HEAD_MAX (32u << 10)  /* request line and header fields */
#define SV_TARGET_MAX (8u << 10) /* the request target */
#define SV_HEADERS_MAX 100       /* header fields */

typedef struct sv_head {
    const char *method;        /* "GET", "POST", ... (a token of at most 15 characters) */
    const char *path;          /* the target's path: without query, without scheme and host */
    int minor;                 /* HTTP/1.minor: 0 or 1 (a higher minor is read as 1) */
    const char *authorization; /* the Authorization field's value, NULL when absent */
    uint64_t content_length;   /* with has_length; UINT64_MAX when it does not fit */
    bool has_length;           /* a Content-Length field */
    bool chunked;              /* Transfer-Encoding: chunked */
    bool keep_alive;           /* the connection stays open after the reply (version, Connection) */
    bool expect_continue;      /* Expect: 100-continue (HTTP/1.1) */
    bool head_only;            /* HEAD: the reply has no body */
} sv_head;

/* Where the head in b[0..n) ends: returns 0 when it is complete (*end: the index after its empty
 * line), -1 when more bytes are needed, else the status that refuses it already (414: the request
 * line is longer than a target may be; 431: no end within SV_HEAD_MAX bytes). Empty lines before
 * the request line belong to the head. */
int sv_http_head_end(const char *b, size_t n, size_t *end);

/* Parses the complete head b[0..end) (end from sv_http_head_end) into h, writing NULs into b.
 * Returns 0, or the status that refuses the request (400 malformed, 414, 431, 501 a transfer
 * coding other than chunked, 505 a version other than HTTP/1.x) with a one-line reason in why. */
int sv_http_parse_head(char *b, size_t end, sv_head *h, char *why, size_t why_len);

/* A chunked body being decoded (zero it to start). */
typedef struct sv_chunked {
    int state;
    uint64_t left;  /* data bytes left in the current chunk */
    size_t line;    /* bytes of the current size line or trailer line */
    size_t trailer; /* bytes of trailer fields so far */
} sv_chunked;

/* Decodes the raw bytes p[*at..n) in place: chunk data is moved down to p[*out..] (*out <= *at
 * always), and *at and *out advance. Returns 1 when the body ended (the last chunk, the trailer
 * fields and the final empty line read; *at is then where the next request starts), 0 when it
 * needs more bytes, -1 on a malformed body with a reason in *why. */
int sv_chunked_decode(sv_chunked *c, char *p, size_t n, size_t *at, size_t *out,
                      const char **why);

/* The reason phrase of a status ("Not Found"); "Unknown" for one this server never sends. */
const char *sv_http_reason(int status);

/* The status line and header fields of a reply, each field once, into out (cap bytes): Date,
 * Content-Type, Content-Length body_len, Retry-After and Allow when not NULL, Connection: close
 * when close. Returns the length, or 0 when cap is too small. */
size_t sv_http_reply_head(char *out, size_t cap, int status, const char *type, size_t body_len,
                          const char *retry_after, const char *allow, bool close);

#endif
