/* HTTP/1.1 request heads, chunked bodies and reply heads (http1.h). */
#include "serve/http1.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* RFC 9110 5.6.2: the characters of a token (method, field name). */
static bool tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool ows(char c)
{
    return c == ' ' || c == '\t';
}

/* Empty lines before the request line (RFC 9112 2.2: a server should ignore at least one). */
static size_t skip_empty_lines(const char *b, size_t n)
{
    size_t i = 0;
    while (i < n && (b[i] == '\r' || b[i] == '\n')) i++;
    return i;
}

int sv_http_head_end(const char *b, size_t n, size_t *end)
{
    if (n == 0) return -1; /* b may be NULL: nothing read yet */
    const size_t i = skip_empty_lines(b, n);
    const char *lf = memchr(b + i, '\n', n - i);
    /* the request line: method (15), target, version and CR around SV_TARGET_MAX */
    const size_t line_max = SV_TARGET_MAX + 32;
    if (!lf) {
        if (n - i > line_max) return 414;
        return n >= SV_HEAD_MAX ? 431 : -1;
    }
    if ((size_t)(lf - (b + i)) > line_max) return 414;
    for (size_t j = (size_t)(lf - b) + 1; j < n;) {
        const char *q = memchr(b + j, '\n', n - j);
        if (!q) break;
        const size_t len = (size_t)(q - (b + j));
        if (len == 0 || (len == 1 && b[j] == '\r')) {
            *end = (size_t)(q - b) + 1;
            return *end > SV_HEAD_MAX ? 431 : 0;
        }
        j = (size_t)(q - b) + 1;
    }
    return n >= SV_HEAD_MAX ? 431 : -1;
}

/* A line of b from i: its start and its length without CR LF (or LF); *next: after its LF.
 * The head was checked to end with an empty line, so an LF is always there. */
static char *line_at(char *b, size_t i, size_t end, size_t *len, size_t *next)
{
    char *l = b + i;
    const char *lf = memchr(l, '\n', end - i);
    size_t k = lf ? (size_t)(lf - l) : end - i;
    *next = i + k + 1;
    if (k && l[k - 1] == '\r') k--;
    *len = k;
    return l;
}

/* The request line into h (method, path, minor); 0 or a status. */
static int request_line(char *l, size_t len, sv_head *h, char *why, size_t wl)
{
    l[len] = 0; /* over its CR or LF */
    char *sp1 = memchr(l, ' ', len);
    if (!sp1 || sp1 == l || sp1 - l > 15) {
        snprintf(why, wl, "the request line is not \"METHOD TARGET HTTP/1.1\"");
        return 400;
    }
    for (const char *c = l; c < sp1; c++)
        if (!tchar((unsigned char)*c)) {
            snprintf(why, wl, "the method is not a token");
            return 400;
        }
    char *target = sp1 + 1;
    char *sp2 = memchr(target, ' ', len - (size_t)(target - l));
    if (!sp2 || sp2 == target) {
        snprintf(why, wl, "the request line is not \"METHOD TARGET HTTP/1.1\"");
        return 400;
    }
    if ((size_t)(sp2 - target) > SV_TARGET_MAX) {
        snprintf(why, wl, "the request target is %zu bytes, more than %u", (size_t)(sp2 - target),
                 SV_TARGET_MAX);
        return 414;
    }
    for (const char *c = target; c < sp2; c++)
        if ((unsigned char)*c <= 0x20 || *c == 0x7f) {
            snprintf(why, wl, "the request target holds a control character");
            return 400;
        }
    const char *v = sp2 + 1;
    const size_t vl = len - (size_t)(v - l);
    if (vl != 8 || memcmp(v, "HTTP/", 5) || v[5] < '0' || v[5] > '9' || v[6] != '.' ||
        v[7] < '0' || v[7] > '9') {
        snprintf(why, wl, "the request line does not end with a version like HTTP/1.1");
        return 400;
    }
    if (v[5] != '1') {
        snprintf(why, wl, "HTTP/%c.%c is not supported: this server speaks HTTP/1.0 and 1.1",
                 v[5], v[7]);
        return 505;
    }
    h->minor = v[7] >= '1' ? 1 : 0;
    *sp1 = 0;
    *sp2 = 0;
    h->method = l;
    /* origin-form "/p?q", absolute-form "http://host/p?q" (RFC 9112 3.2.2), or "*" */
    char *path = target;
    if (!strncasecmp(target, "http://", 7) || !strncasecmp(target, "https://", 8)) {
        path = strchr(strstr(target, "//") + 2, '/');
        if (!path) path = sp2; /* no path: the empty string, routed as nothing */
    } else if (target[0] != '/' && strcmp(target, "*")) {
        snprintf(why, wl, "the request target is not a path");
        return 400;
    }
    path[strcspn(path, "?#")] = 0;
    h->path = path;
    return 0;
}

/* One header field "name: value" (len bytes at l, NUL-terminated on return) into h. */
static int field(char *l, size_t len, sv_head *h, bool *conn_close, bool *conn_keep,
                 bool *seen_te, char *why, size_t wl)
{
    if (ows(l[0])) {
        snprintf(why, wl, "a header field is folded over lines (obs-fold)");
        return 400;
    }
    char *colon = memchr(l, ':', len);
    if (!colon || colon == l) {
        snprintf(why, wl, "a header line is not \"Name: value\"");
        return 400;
    }
    for (const char *c = l; c < colon; c++)
        if (!tchar((unsigned char)*c)) {
            snprintf(why, wl, "a header field name is not a token");
            return 400;
        }
    const size_t nl = (size_t)(colon - l);
    char *v = colon + 1, *e = l + len;
    while (v < e && ows(*v)) v++;
    while (e > v && ows(e[-1])) e--;
    for (const char *c = v; c < e; c++)
        if (((unsigned char)*c < 0x20 && *c != '\t') || *c == 0x7f) {
            snprintf(why, wl, "the value of %.*s holds a control character", (int)nl, l);
            return 400;
        }
    *e = 0;
#define IS(name) (nl == sizeof(name) - 1 && !strncasecmp(l, name, nl))
    if (IS("Content-Length")) {
        if (h->has_length) {
            snprintf(why, wl, "more than one Content-Length");
            return 400;
        }
        if (v == e) {
            snprintf(why, wl, "Content-Length is empty");
            return 400;
        }
        uint64_t x = 0;
        for (const char *c = v; c < e; c++) {
            if (*c < '0' || *c > '9') {
                snprintf(why, wl, "Content-Length is not a number of bytes: \"%.40s\"", v);
                return 400;
            }
            const uint64_t d = (uint64_t)(*c - '0');
            x = x > (UINT64_MAX - d) / 10 ? UINT64_MAX : x * 10 + d;
        }
        h->content_length = x;
        h->has_length = true;
    } else if (IS("Transfer-Encoding")) {
        if (*seen_te) {
            snprintf(why, wl, "more than one Transfer-Encoding");
            return 400;
        }
        *seen_te = true;
        if (strcasecmp(v, "chunked")) {
            snprintf(why, wl, "Transfer-Encoding \"%.40s\" is not supported (only chunked)", v);
            return 501;
        }
        h->chunked = true;
    } else if (IS("Connection")) {
        for (char *t = v; *t;) {
            while (*t == ',' || ows(*t)) t++;
            size_t k = strcspn(t, ",");
            size_t m = k;
            while (m && ows(t[m - 1])) m--;
            if (m == 5 && !strncasecmp(t, "close", 5)) *conn_close = true;
            if (m == 10 && !strncasecmp(t, "keep-alive", 10)) *conn_keep = true;
            t += k;
        }
    } else if (IS("Expect")) {
        h->expect_continue = !strcasecmp(v, "100-continue");
    } else if (IS("Authorization")) {
        if (h->authorization) {
            snprintf(why, wl, "more than one Authorization");
            return 400;
        }
        h->authorization = v;
    }
#undef IS
    return 0;
}

int sv_http_parse_head(char *b, size_t end, sv_head *h, char *why, size_t why_len)
{
    memset(h, 0, sizeof(*h));
    size_t i = skip_empty_lines(b, end), len, next;
    char *l = line_at(b, i, end, &len, &next);
    int st = request_line(l, len, h, why, why_len);
    if (st) return st;
    bool conn_close = false, conn_keep = false, seen_te = false;
    for (int n = 0; (i = next) < end; n++) {
        l = line_at(b, i, end, &len, &next);
        if (len == 0) break;
        if (n == SV_HEADERS_MAX) {
            snprintf(why, why_len, "more than %d header fields", SV_HEADERS_MAX);
            return 431;
        }
        if ((st = field(l, len, h, &conn_close, &conn_keep, &seen_te, why, why_len))) return st;
    }
    if (h->chunked && h->has_length) {
        snprintf(why, why_len, "both Content-Length and Transfer-Encoding");
        return 400;
    }
    if (h->chunked && h->minor == 0) {
        snprintf(why, why_len, "Transfer-Encoding in an HTTP/1.0 request");
        return 400;
    }
    h->expect_continue = h->expect_continue && h->minor >= 1;
    h->keep_alive = h->minor ? !conn_close : conn_keep && !conn_close;
    h->head_only = !strcmp(h->method, "HEAD");
    return 0;
}

enum { CH_SIZE0, CH_SIZE, CH_WS, CH_EXT, CH_SIZE_LF, CH_DATA, CH_DATA_CR, CH_DATA_LF,
       CH_TRAILER0, CH_TRAILER, CH_END_LF, CH_DONE };
enum { CH_LINE_MAX = 4096, CH_TRAILER_MAX = 8192 };

static int hexval(unsigned char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                          : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int sv_chunked_decode(sv_chunked *c, char *p, size_t n, size_t *at, size_t *out, const char **why)
{
    size_t i = *at, o = *out;
    int r = 0;
    *why = NULL;
    while (i < n && !r) {
        if (c->state == CH_DATA) {
            const size_t k = c->left < n - i ? (size_t)c->left : n - i;
            if (o != i) memmove(p + o, p + i, k);
            i += k;
            o += k;
            c->left -= k;
            if (!c->left) c->state = CH_DATA_CR;
            continue;
        }
        const unsigned char ch = (unsigned char)p[i++];
        const int hv = hexval(ch);
        bool size_end = false;
        switch (c->state) {
        case CH_SIZE0:
        case CH_SIZE:
            if (hv >= 0) {
                /* saturates: the caller refuses a chunk larger than any body it takes */
                c->left = c->left > (UINT64_MAX - (uint64_t)hv) / 16 ? UINT64_MAX
                                                                     : c->left * 16 + (uint64_t)hv;
                c->state = CH_SIZE;
            } else if (c->state == CH_SIZE0) *why = "a chunk size is not a hexadecimal number";
            else if (ch == ';') c->state = CH_EXT;
            else if (ows((char)ch)) c->state = CH_WS;
            else if (ch == '\r') c->state = CH_SIZE_LF;
            else if (ch == '\n') size_end = true;
            else *why = "a chunk size is not a hexadecimal number";
            break;
        case CH_WS:
            if (ch == ';') c->state = CH_EXT;
            else if (ch == '\r') c->state = CH_SIZE_LF;
            else if (ch == '\n') size_end = true;
            else if (!ows((char)ch)) *why = "a chunk size line has text after the size";
            break;
        case CH_EXT: /* a chunk extension: ignored (RFC 9112 7.1.1) */
            if (ch == '\n') size_end = true;
            else if (ch == '\r') c->state = CH_SIZE_LF;
            else if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
                *why = "a chunk extension holds a control character";
            break;
        case CH_SIZE_LF:
            if (ch == '\n') size_end = true;
            else *why = "a chunk size line has CR without LF";
            break;
        case CH_DATA_CR:
            if (ch == '\r') c->state = CH_DATA_LF;
            else if (ch == '\n') c->state = CH_SIZE0;
            else *why = "a chunk's data is longer than its size";
            break;
        case CH_DATA_LF:
            if (ch == '\n') c->state = CH_SIZE0;
            else *why = "a chunk's data is longer than its size";
            break;
        case CH_TRAILER0:
            if (ch == '\r') c->state = CH_END_LF;
            else if (ch == '\n') r = 1;
            else c->state = CH_TRAILER;
            break;
        case CH_TRAILER: /* trailer fields: read and dropped */
            if (ch == '\n') c->state = CH_TRAILER0;
            else if (++c->trailer > CH_TRAILER_MAX) *why = "the trailer fields are too long";
            break;
        case CH_END_LF:
            if (ch == '\n') r = 1;
            else *why = "the chunked body ends with CR without LF";
            break;
        default: *why = "the chunked body was already complete"; break;
        }
        if (c->state <= CH_SIZE_LF && ++c->line > CH_LINE_MAX)
            *why = "a chunk size line is too long";
        if (size_end) {
            c->line = 0;
            c->state = c->left ? CH_DATA : CH_TRAILER0;
        }
        if (*why) r = -1;
    }
    if (r == 1) c->state = CH_DONE;
    *at = i;
    *out = o;
    return r;
}

const char *sv_http_reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
    }
}

size_t sv_http_reply_head(char *out, size_t cap, int status, const char *type, size_t body_len,
                          const char *retry_after, const char *allow, bool close)
{
    /* IMF-fixdate (RFC 9110 5.6.7), written without strftime's locale */
    static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    const time_t now = time(NULL);
    struct tm t;
    gmtime_r(&now, &t);
    const int k = snprintf(out, cap,
                           "HTTP/1.1 %d %s\r\nDate: %s, %02d %s %04d %02d:%02d:%02d GMT\r\n"
                           "Content-Type: %s\r\nContent-Length: %zu\r\n%s%s%s%s%s%s%s\r\n",
                           status, sv_http_reason(status), days[t.tm_wday % 7], t.tm_mday,
                           months[t.tm_mon % 12], t.tm_year + 1900, t.tm_hour, t.tm_min,
                           t.tm_sec, type, body_len, retry_after ? "Retry-After: " : "",
                           retry_after ? retry_after : "", retry_after ? "\r\n" : "",
                           allow ? "Allow: " : "", allow ? allow : "", allow ? "\r\n" : "",
                           close ? "Connection: close\r\n" : "");
    return k > 0 && (size_t)k < cap ? (size_t)k : 0;
}
