/* UTF-8 decoding/encoding and the GPT-2 byte mapping (see utf8.h). */
#include "tok/utf8.h"

static inline int is_cont(uint8_t c)
{
    return (c & 0xC0) == 0x80;
}

uint32_t es_utf8_decode(const uint8_t *s, size_t n, size_t *used)
{
    uint8_t c = s[0];
    *used = 1;
    if (c < 0x80) return c;
    if (!(c & 0x40)) return ES_UTF8_REPLACEMENT; /* stray continuation byte */
    if (!(c & 0x20)) {
        if (n < 2 || !is_cont(s[1])) return ES_UTF8_REPLACEMENT;
        *used = 2;
        return ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
    }
    if (!(c & 0x10)) {
        if (n < 3 || !is_cont(s[1]) || !is_cont(s[2])) return ES_UTF8_REPLACEMENT;
        *used = 3;
        return ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    }
    if (!(c & 0x08)) {
        if (n < 4 || !is_cont(s[1]) || !is_cont(s[2]) || !is_cont(s[3])) return ES_UTF8_REPLACEMENT;
        *used = 4;
        return ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
               ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    }
    return ES_UTF8_REPLACEMENT; /* 0xF8..0xFF never start a sequence */
}

size_t es_utf8_encode(uint32_t cp, uint8_t *out)
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | ((cp >> 18) & 0x07));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* Bytes that map to themselves: '!'..'~', 0xA1..0xAC, 0xAE..0xFF. The others, in byte order:
 * 0x00..0x20 (33 bytes), 0x7F..0xA0 (34 bytes), 0xAD (1 byte) -> U+0100 + their rank. */
static inline int gpt2_identity(uint32_t b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t es_gpt2_byte_to_cp(uint8_t b)
{
    if (gpt2_identity(b)) return b;
    if (b <= 0x20) return 0x100u + b;
    if (b <= 0xA0) return 0x100u + 33 + (b - 0x7Fu);
    return 0x100u + 67; /* 0xAD */
}

int es_gpt2_cp_to_byte(uint32_t cp)
{
    if (cp < 0x100) return gpt2_identity(cp) ? (int)cp : -1;
    if (cp < 0x100 + 33) return (int)(cp - 0x100);
    if (cp < 0x100 + 67) return (int)(0x7F + (cp - 0x100 - 33));
    if (cp == 0x100 + 67) return 0xAD;
    return -1;
}
