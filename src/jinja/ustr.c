/*
 * Unicode for the Jinja interpreter: Python's whitespace (str.isspace, the \s of Python
 * regexes) and Python's case mapping for the scripts it covers (UTF-8 itself is codepoints.c's).
 *
 * DESIGN: case mapping is where Python needs the Unicode database; rather than carry it, we
 * implement ASCII, Latin-1, Latin Extended-A and basic Cyrillic exactly, treat blocks known to
 * have no case (CJK, kana, Hangul, emoji, Arabic, Indic, punctuation, symbols) as such, and
 * refuse anything else with ES_E_FORMAT (strict: never a guess). Mappings that grow a character
 * ('ß'.upper() is "SS") are refused too.
 */
#include "jinja/jinja_int.h"

#include <string.h>

/* Python's str.isspace(): the White_Space characters plus U+001C..U+001F (bidi class B/S). */
bool ja_py_isspace(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Blocks with no cased character and no case mapping (checked against Python 3.11's
 * str.upper/lower/isupper/islower): the code points here map to themselves. */
static bool caseless(uint32_t c)
{
    /* clang-format off */
    static const uint32_t r[][2] = {
        {0x0080, 0x00A9}, {0x00AB, 0x00B4}, {0x00B6, 0x00B9}, {0x00BB, 0x00BF},
        {0x00D7, 0x00D7}, {0x00F7, 0x00F7}, {0x0300, 0x0344}, {0x0346, 0x036F},
        {0x0590, 0x0FFF}, {0x1100, 0x11FF}, {0x2000, 0x206F}, {0x20A0, 0x20CF},
        {0x2190, 0x23FF}, {0x2500, 0x27BF}, {0x2800, 0x2BFF}, {0x3000, 0x4DBF},
        {0x4E00, 0x9FFF}, {0xA000, 0xA4CF}, {0xAC00, 0xD7AF}, {0xF900, 0xFAFF},
        {0xFE00, 0xFE1F}, {0xFE30, 0xFE6F}, {0xFF01, 0xFF20}, {0xFF3B, 0xFF40},
        {0xFF5B, 0xFFEF}, {0x1F000, 0x1F12F}, {0x1F18A, 0x1FAFF}, {0x20000, 0x3134F},
        {0xE0000, 0xE01EF},
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++)
        if (c >= r[i][0] && c <= r[i][1]) return true;
    return false;
}

/* Upper/lower pairs: *up and *lo for a cased code point of the covered ranges; false if c is
 * not one (or its mapping is not one code point). */
static bool pair(uint32_t c, uint32_t *up, uint32_t *lo)
{
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')) {
        *up = c & ~0x20u, *lo = c | 0x20u;
        return true;
    }
    if ((c >= 0xC0 && c <= 0xDE && c != 0xD7) || (c >= 0xE0 && c <= 0xFE && c != 0xF7)) {
        *up = c & ~0x20u, *lo = c | 0x20u;
        return true;
    }
    if (c == 0xFF || c == 0x178) {
        *up = 0x178, *lo = 0xFF;
        return true;
    }
    if ((c >= 0x100 && c <= 0x12F) || (c >= 0x132 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) {
        *up = c & ~1u, *lo = c | 1u;
        return true;
    }
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) {
        *up = (c & 1) ? c : c - 1, *lo = (c & 1) ? c + 1 : c;
        return true;
    }
    if (c >= 0x400 && c <= 0x40F) {
        *up = c, *lo = c + 0x50;
        return true;
    }
    if (c >= 0x450 && c <= 0x45F) {
        *up = c - 0x50, *lo = c;
        return true;
    }
    if (c >= 0x410 && c <= 0x42F) {
        *up = c, *lo = c + 0x20;
        return true;
    }
    if (c >= 0x430 && c <= 0x44F) {
        *up = c - 0x20, *lo = c;
        return true;
    }
    return false;
}

bool ja_is_cased(uint32_t c, int *is_upper, int *is_lower, bool *known)
{
    uint32_t up, lo;
    *known = true;
    *is_upper = *is_lower = 0;
    if (pair(c, &up, &lo)) {
        *is_upper = c == up, *is_lower = c == lo;
        return true;
    }
    /* lowercase letters without a one-code-point uppercase: micro, sharp s, dotless i, kra,
     * apostrophe n, long s; U+0130 is uppercase */
    if (c == 0xB5 || c == 0xDF || c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17F) {
        *is_lower = 1;
        return true;
    }
    if (c == 0x130) {
        *is_upper = 1;
        return true;
    }
    if (c < 0x80 || caseless(c)) return false;
    *known = false;
    return false;
}

bool ja_case_map(uint32_t c, int upper, uint32_t *out)
{
    uint32_t up, lo;
    if (pair(c, &up, &lo)) {
        *out = upper ? up : lo;
        return true;
    }
    if (c < 0x80 || caseless(c)) {
        *out = c;
        return true;
    }
    switch (c) {
    case 0xB5:
        *out = upper ? 0x39C : c;
        return true; /* micro sign -> Greek capital mu */
    case 0x131:
        *out = upper ? 'I' : c;
        return true; /* dotless i */
    case 0x17F:
        *out = upper ? 'S' : c;
        return true; /* long s */
    case 0x138:
        *out = c;
        return true; /* kra: no uppercase */
    case 0xDF:
    case 0x149:
        if (!upper) {
            *out = c;
            return true;
        }
        return false; /* -> "SS", "ʼN" */
    case 0x130:
        if (upper) {
            *out = c;
            return true;
        }
        return false; /* -> "i̇" */
    }
    return false;
}

/* A separator of jinja2's title filter: its regex ([-\s({\[<]+). */
static bool title_sep(uint32_t c)
{
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || ja_py_isspace(c);
}

es_status jr_case(jr *R, const jstr *s, int mode, jv *out)
{
    bool prev_cased = false, first = true;
    /* one unit a character: this loop is the cost */
    ES_TRY(jr_charge(R, (int64_t)s->len));
    /* every supported mapping is one code point to one no longer (ı -> I, ſ -> S shrink) */
    jstr *r = ja_alloc(&R->a, sizeof(jstr) + s->len + 1);
    if (!r) return jr_oom(R);
    size_t n = 0;
    for (size_t i = 0; i < s->len;) {
        uint32_t c = ja_utf8_next(s->b, s->len, &i), m;
        int up;
        switch (mode) {
        case 'U': up = 1; break;
        case 'L': up = 0; break;
        case 'C': up = first; break;                /* str.capitalize */
        case 'J': up = first || !prev_cased; break; /* jinja's title: after a separator */
        default: up = !prev_cased; break;           /* str.title: after an uncased char */
        }
        if (!ja_case_map(c, up, &m))
            return jr_fail(R, "case mapping of U+%04X is not supported", (unsigned)c);
        if (mode == 'T') {
            int iu, il;
            bool known;
            bool cased = ja_is_cased(c, &iu, &il, &known);
            if (!known) return jr_fail(R, "case mapping of U+%04X is not supported", (unsigned)c);
            prev_cased = cased;
        } else if (mode == 'J') {
            prev_cased = !title_sep(c); /* the first of each run after separators goes up */
        }
        first = false;
        n += ja_utf8_put(m, r->b + n);
    }
    r->len = n, r->b[n] = 0;
    *out = jv_str(r);
    return ES_OK;
}

static bool in_set(uint32_t c, const jstr *chars)
{
    if (!chars) return ja_py_isspace(c);
    for (size_t i = 0; i < chars->len;)
        if (ja_utf8_next(chars->b, chars->len, &i) == c) return true;
    return false;
}

es_status jr_strip(jr *R, const jstr *s, const jstr *chars, int ends, jv *out)
{
    size_t lo = 0, hi = s->len;
    /* each character looked at is compared with every one of chars */
    ES_TRY(jr_charge(R, (int64_t)s->len / 16 * (chars ? (int64_t)chars->len / 16 + 1 : 1)));
    if (ends & 1) {
        while (lo < hi) {
            size_t j = lo;
            if (!in_set(ja_utf8_next(s->b, hi, &j), chars)) break;
            lo = j;
        }
    }
    if (ends & 2) {
        while (hi > lo) {
            size_t j = hi - 1;
            while (j > lo && ((uint8_t)s->b[j] & 0xC0) == 0x80)
                j--;
            size_t k = j;
            if (!in_set(ja_utf8_next(s->b, hi, &k), chars)) break;
            hi = j;
        }
    }
    if (lo == 0 && hi == s->len) {
        *out = jv_str(s);
        return ES_OK;
    }
    return jr_str(R, s->b + lo, hi - lo, out);
}
