/* Buffered text output over es_outfile with JSON and XML escaping (outbuf.h has the contract). */
#include "core/outbuf.h"
#include "core/util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

es_status es_outbuf_open(es_outbuf *b, const char *path)
{
    b->len = 0;
    b->st = es_outfile_open(path, &b->f);
    return b->st;
}

static void flush(es_outbuf *b)
{
    if (b->st == ES_OK && b->len) b->st = es_outfile_write(&b->f, b->buf, b->len);
    b->len = 0;
}

void es_outbuf_put(es_outbuf *b, const void *p, size_t n)
{
    if (b->st != ES_OK) return;
    if (n > sizeof(b->buf) - b->len) {
        flush(b);
        if (n > sizeof(b->buf)) { /* big piece: straight through */
            if (b->st == ES_OK) b->st = es_outfile_write(&b->f, p, n);
            return;
        }
    }
    memcpy(b->buf + b->len, p, n);
    b->len += n;
}

void es_outbuf_puts(es_outbuf *b, const char *s) { es_outbuf_put(b, s, strlen(s)); }

void es_outbuf_printf(es_outbuf *b, const char *fmt, ...)
{
    if (b->st != ES_OK) return;
    va_list ap;
    va_start(ap, fmt);
    const size_t room = sizeof(b->buf) - b->len;
    int n = vsnprintf(b->buf + b->len, room, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->st = es_fail(ES_E_INVAL, "%s: cannot format output", b->f.path);
        return;
    }
    if ((size_t)n < room) { /* it fitted */
        b->len += (size_t)n;
        return;
    }
    /* It did not fit: format again into a buffer of the right size. */
    char *tmp = malloc((size_t)n + 1);
    if (!tmp) {
        b->st = es_fail(ES_E_NOMEM, "%s: out of memory", b->f.path);
        return;
    }
    va_start(ap, fmt);
    vsnprintf(tmp, (size_t)n + 1, fmt, ap);
    va_end(ap);
    es_outbuf_put(b, tmp, (size_t)n);
    free(tmp);
}

size_t es_utf8_valid_len(const unsigned char *s, size_t n)
{
    const unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0; /* overlong */
        if (c == 0xED) hi = 0x9F; /* surrogates U+D800..U+DFFF */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90; /* overlong */
        if (c == 0xF4) hi = 0x8F; /* above U+10FFFF */
    } else {
        return 0; /* continuation byte, C0/C1 (overlong), F5..FF */
    }
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}

static const char REPLACEMENT[] = "\xEF\xBF\xBD"; /* U+FFFD in UTF-8 */

void es_outbuf_json_str(es_outbuf *b, const char *s)
{
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    const size_t n = strlen((const char *)p);
    es_outbuf_put(b, "\"", 1);
    for (size_t i = 0; i < n;) {
        const unsigned char c = p[i];
        const char *esc = NULL;
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default: break;
        }
        if (esc) {
            es_outbuf_puts(b, esc);
            i++;
        } else if (c < 0x20) {
            es_outbuf_printf(b, "\\u%04x", c);
            i++;
        } else {
            size_t k = es_utf8_valid_len(p + i, n - i);
            if (k) {
                es_outbuf_put(b, p + i, k);
                i += k;
            } else {
                es_outbuf_puts(b, "\\ufffd");
                i++;
            }
        }
    }
    es_outbuf_put(b, "\"", 1);
}

void es_outbuf_xml_str(es_outbuf *b, const char *s)
{
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    const size_t n = strlen((const char *)p);
    for (size_t i = 0; i < n;) {
        const unsigned char c = p[i];
        const char *ent = NULL;
        switch (c) {
        case '&': ent = "&amp;"; break;
        case '<': ent = "&lt;"; break;
        case '>': ent = "&gt;"; break;
        case '"': ent = "&quot;"; break;
        case '\'': ent = "&apos;"; break;
        default: break;
        }
        if (ent) {
            es_outbuf_puts(b, ent);
            i++;
            continue;
        }
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') {
            es_outbuf_puts(b, REPLACEMENT); /* not a character XML 1.0 allows */
            i++;
            continue;
        }
        size_t k = es_utf8_valid_len(p + i, n - i);
        /* U+FFFE and U+FFFF (EF BF BE, EF BF BF) are not XML characters either */
        if (k == 3 && c == 0xEF && p[i + 1] == 0xBF && p[i + 2] >= 0xBE) k = 0;
        if (k) {
            es_outbuf_put(b, p + i, k);
            i += k;
        } else {
            es_outbuf_puts(b, REPLACEMENT);
            i++;
        }
    }
}

es_status es_outbuf_commit(es_outbuf *b)
{
    flush(b);
    if (b->st != ES_OK) {
        es_outfile_abort(&b->f);
        return b->st;
    }
    b->st = es_outfile_commit(&b->f);
    return b->st;
}

void es_outbuf_abort(es_outbuf *b)
{
    es_outfile_abort(&b->f);
    b->len = 0;
}
