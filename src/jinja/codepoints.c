/*
 * UTF-8 for the Jinja interpreter: validation, decoding and encoding one code point, code-point
 * counts and offsets.
 *
 * DESIGN: Python strings are sequences of code points; ours are UTF-8 bytes (valid: checked
 * where they enter), so lengths, indexes and slices are converted here on the fly.
 */
#include "jinja/jinja_int.h"

bool ja_utf8_valid(const char *s, size_t n)
{
    const uint8_t *u = (const uint8_t *)s;
    for (size_t i = 0; i < n;) {
        uint8_t c = u[i];
        size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!l || l > n - i) return false;
        uint32_t cp = l == 1 ? c : c & (0x7Fu >> l);
        for (size_t k = 1; k < l; k++) {
            if ((u[i + k] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (u[i + k] & 0x3F);
        }
        static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[l] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += l;
    }
    return true;
}

uint32_t ja_utf8_next(const char *s, size_t n, size_t *i)
{
    const uint8_t *u = (const uint8_t *)s;
    uint8_t c = u[*i];
    size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    if (l > n - *i) l = n - *i; /* cannot happen on valid input; stay in bounds */
    uint32_t cp = l == 1 ? c : c & (0x7Fu >> l);
    for (size_t k = 1; k < l; k++)
        cp = cp << 6 | (u[*i + k] & 0x3F);
    *i += l;
    return cp;
}

size_t ja_utf8_put(uint32_t cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t ja_cp_count(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((uint8_t)s[i] & 0xC0) != 0x80;
    return c;
}

size_t ja_cp_offset(const char *s, size_t n, size_t k)
{
    size_t i = 0;
    for (; i < n && k; k--) {
        i++;
        while (i < n && ((uint8_t)s[i] & 0xC0) == 0x80)
            i++;
    }
    return i;
}
