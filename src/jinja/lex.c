/*
 * The Jinja lexer: template source to tokens, with jinja2's whitespace control as Hugging
 * Face's environment configures it (trim_blocks, lstrip_blocks, keep_trailing_newline off).
 *
 * DESIGN: this reproduces the rules of jinja2's regex lexer (jinja2/lexer.py, 3.1), written as
 * a scanner:
 *  - the source's newlines (\r\n, \r) become \n, and one trailing newline is dropped;
 *  - text runs to the first "{{", "{%" or "{#"; a "-" after the opener strips all whitespace
 *    (Python's str.isspace, Unicode included) before it; otherwise, for "{%" and "{#" but not
 *    "{{" and not after "+", lstrip_blocks removes the spaces and tabs (any Python whitespace
 *    but newline) between the tag and the start of its line, if only whitespace is there -- a
 *    line start being a newline in the text or, for text at the very start of what follows a
 *    tag, that tag having ended with a newline;
 *  - "-%}", "-}}", "-#}" also eat all whitespace after them; "%}" and "#}" eat one newline
 *    (trim_blocks) unless written "+%}" / "+#}"; "}}" eats nothing;
 *  - inside a tag, an end marker counts only while brackets are balanced ({{ {'a': 1} }});
 *  - {% raw %}...{% endraw %} is text (its opener eats no newline);
 *  - string literals are decoded as jinja2 does: Python's unicode-escape applied to the text
 *    with its non-ASCII characters turned into \x, \u, \U escapes first (so "\é" is the four
 *    characters \xe9, as in jinja2).
 * Line numbers are those of the normalised source, as jinja2 reports them.
 */
#include "jinja/jinja_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct lx {
    ja_arena *a;
    const char *name;
    const char *s; /* normalised source */
    size_t n, pos;
    int line;
    bool line_starting; /* the last thing matched ended with a newline */
    jtok *t;
    size_t nt, cap;
    char bal[JA_MAX_DEPTH]; /* closing brackets expected inside the current tag */
    int nbal;
} lx;

static es_status fail(lx *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static es_status fail(lx *L, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    es_status st = ja_vfail(L->name, L->line, fmt, ap);
    va_end(ap);
    return st;
}

static jtok *emit(lx *L, int type)
{
    if (L->nt == L->cap) {
        size_t cap = L->cap ? 2 * L->cap : 256;
        jtok *t = ja_alloc(L->a, cap * sizeof(jtok));
        if (!t) return NULL;
        if (L->nt) memcpy(t, L->t, L->nt * sizeof(jtok));
        L->t = t, L->cap = cap;
    }
    jtok *t = &L->t[L->nt++];
    memset(t, 0, sizeof(*t));
    t->t = (uint8_t)type;
    t->line = L->line;
    return t;
}
#define EMIT(L, type, tok)                                                                         \
    do {                                                                                           \
        if (!((tok) = emit((L), (type))))                                                          \
            return es_fail(ES_E_NOMEM, "%s: out of memory", (L)->name);                            \
    } while (0)

/* Newlines in p[0..n) (for line numbers). */
static int count_nl(const char *p, size_t n)
{
    int c = 0;
    for (size_t i = 0; i < n; i++)
        c += p[i] == '\n';
    return c;
}

/* Bytes of the Python whitespace character at i (0 if none). */
static size_t ws_at(const char *s, size_t n, size_t i)
{
    if (i >= n) return 0;
    size_t j = i;
    return ja_py_isspace(ja_utf8_next(s, n, &j)) ? j - i : 0;
}
/* The first offset from i that is not Python whitespace. */
static size_t skip_ws(const char *s, size_t n, size_t i)
{
    for (size_t w; (w = ws_at(s, n, i)); i += w) {
    }
    return i;
}

/* Length of text[0..n) without trailing Python whitespace. */
static size_t rstrip_len(const char *p, size_t n)
{
    while (n) {
        size_t j = n - 1;
        while (j && ((uint8_t)p[j] & 0xC0) == 0x80)
            j--;
        size_t k = j;
        if (!ja_py_isspace(ja_utf8_next(p, n, &k))) break;
        n = j;
    }
    return n;
}

/* The text before a tag, whitespace control applied, as a T_DATA token (none if empty). sign
 * is the tag's '-', '+' or 0; lstrip whether lstrip_blocks applies to this kind of tag. */
static es_status text(lx *L, size_t from, size_t to, char sign, bool lstrip)
{
    const char *p = L->s + from;
    size_t n = to - from, keep = n;
    if (sign == '-') {
        keep = rstrip_len(p, n);
    } else if (sign != '+' && lstrip) {
        size_t l = n;
        while (l && p[l - 1] != '\n')
            l--; /* start of the tag's line within the text */
        if ((l > 0 || L->line_starting) && l < n) {
            size_t k = l;
            while (k < n && ws_at(p, n, k))
                k += ws_at(p, n, k);
            if (k == n) keep = l;
        }
    }
    if (keep) {
        jtok *t;
        EMIT(L, T_DATA, t);
        t->p = p, t->n = keep;
    }
    L->line += count_nl(p, n);
    return ES_OK;
}

/* "{%" sign? ws* word ws* then "-%}" ws* | "%}" [then \n if trim]: the end offset, or 0. */
static size_t match_word_tag(const lx *L, size_t i, const char *word, bool trim, char *sign)
{
    const char *s = L->s;
    size_t n = L->n;
    if (i + 2 > n || s[i] != '{' || s[i + 1] != '%') return 0;
    i += 2;
    *sign = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) *sign = s[i++];
    i = skip_ws(s, n, i);
    size_t wl = strlen(word);
    if (i + wl > n || memcmp(s + i, word, wl)) return 0;
    i = skip_ws(s, n, i + wl);
    if (i + 3 <= n && !memcmp(s + i, "-%}", 3)) return skip_ws(s, n, i + 3);
    if (trim && i + 3 <= n && !memcmp(s + i, "+%}", 3)) return i + 3;
    if (i + 2 <= n && !memcmp(s + i, "%}", 2)) {
        i += 2;
        if (trim && i < n && s[i] == '\n') i++;
        return i;
    }
    return 0;
}

/* {% raw %}: text up to {% endraw %}, which gets whitespace control like any block tag. */
static es_status raw(lx *L, size_t end_of_open)
{
    L->line += count_nl(L->s + L->pos, end_of_open - L->pos);
    L->line_starting = L->s[end_of_open - 1] == '\n';
    for (size_t i = end_of_open; i + 1 < L->n; i++) {
        char sign;
        size_t e = match_word_tag(L, i, "endraw", true, &sign);
        if (!e) continue;
        ES_TRY(text(L, end_of_open, i, sign, true));
        L->line += count_nl(L->s + i, e - i);
        L->line_starting = L->s[e - 1] == '\n';
        L->pos = e;
        return ES_OK;
    }
    return fail(L, "missing end of raw directive");
}

/* A comment: to the first "+#}", "-#}" (eats whitespace after) or "#}" (eats one newline). */
static es_status comment(lx *L)
{
    const char *s = L->s;
    for (size_t i = L->pos; i + 1 < L->n; i++) {
        size_t e = 0;
        if (s[i] == '+' && i + 2 < L->n && s[i + 1] == '#' && s[i + 2] == '}')
            e = i + 3;
        else if (s[i] == '-' && i + 2 < L->n && s[i + 1] == '#' && s[i + 2] == '}')
            e = skip_ws(s, L->n, i + 3);
        else if (s[i] == '#' && s[i + 1] == '}')
            e = i + 2 + (i + 2 < L->n && s[i + 2] == '\n');
        if (!e) continue;
        L->line += count_nl(s + L->pos, e - L->pos);
        L->line_starting = s[e - 1] == '\n';
        L->pos = e;
        return ES_OK;
    }
    return fail(L, "missing end of comment tag");
}

/* Decodes a string literal's body p[0..n) (quotes excluded) like jinja2. */
static es_status string_value(lx *L, const char *p, size_t n, jtok *t)
{
    /* non-ASCII characters first become escapes (Python's backslashreplace) */
    size_t cap = 0;
    for (size_t i = 0; i < n; i++)
        cap += ((uint8_t)p[i] & 0x80) ? 10 : 1;
    char *a = malloc(cap + 1), *o = malloc(n * 4 + 4);
    if (!a || !o) {
        free(a), free(o);
        return es_fail(ES_E_NOMEM, "%s: out of memory", L->name);
    }
    size_t an = 0, on = 0;
    for (size_t i = 0; i < n;) {
        if (!((uint8_t)p[i] & 0x80)) {
            a[an++] = p[i++];
            continue;
        }
        uint32_t c = ja_utf8_next(p, n, &i);
        an += (size_t)sprintf(a + an,
                              c < 0x100     ? "\\x%02x"
                              : c < 0x10000 ? "\\u%04x"
                                            : "\\U%08x",
                              (unsigned)c);
    }
    es_status st = ES_OK;
    for (size_t i = 0; i < an && st == ES_OK;) {
        if (a[i] != '\\') {
            o[on++] = a[i++];
            continue;
        }
        if (++i == an) {
            st = fail(L, "\\ at end of string");
            break;
        }
        char c = a[i++];
        uint32_t cp = 0;
        int hex = 0;
        switch (c) {
        case '\n':
            continue;
        case '\\':
            o[on++] = '\\';
            continue;
        case '\'':
            o[on++] = '\'';
            continue;
        case '"':
            o[on++] = '"';
            continue;
        case 'a':
            o[on++] = 7;
            continue;
        case 'b':
            o[on++] = 8;
            continue;
        case 'f':
            o[on++] = 12;
            continue;
        case 'n':
            o[on++] = 10;
            continue;
        case 'r':
            o[on++] = 13;
            continue;
        case 't':
            o[on++] = 9;
            continue;
        case 'v':
            o[on++] = 11;
            continue;
        case 'x':
            hex = 2;
            break;
        case 'u':
            hex = 4;
            break;
        case 'U':
            hex = 8;
            break;
        case 'N':
            st = fail(L, "named unicode escapes (\\N{...}) are not supported");
            continue;
        default:
            if (c >= '0' && c <= '7') {
                cp = (uint32_t)(c - '0');
                for (int k = 0; k < 2 && i < an && a[i] >= '0' && a[i] <= '7'; k++)
                    cp = cp * 8 + (uint32_t)(a[i++] - '0');
                on += ja_utf8_put(cp, o + on);
            } else {
                o[on++] = '\\', o[on++] = c; /* unknown escapes stay as written */
            }
            continue;
        }
        for (int k = 0; k < hex; k++, i++) {
            char h = i < an ? a[i] : 0;
            int d = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
            if (d < 0) {
                st = fail(L, "truncated \\%c escape in a string", c);
                break;
            }
            cp = cp * 16 + (uint32_t)d;
        }
        if (st != ES_OK) break;
        if (cp > 0x10FFFF)
            st = fail(L, "illegal Unicode character in a string escape");
        else if (cp >= 0xD800 && cp <= 0xDFFF)
            st = fail(L, "a string escape makes a lone surrogate (not supported)");
        else
            on += ja_utf8_put(cp, o + on);
    }
    if (st == ES_OK && !(t->s = ja_str_new(L->a, o, on)))
        st = es_fail(ES_E_NOMEM, "%s: out of memory", L->name);
    free(a), free(o);
    return st;
}

/* ASCII digits (Python's \d in jinja2's number patterns is ASCII here: refused otherwise). */
static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* (\d+_)*\d+ at i: the end, or i if none. */
static size_t digits(const char *s, size_t n, size_t i)
{
    size_t j = i;
    while (j < n && is_digit(s[j])) {
        while (j < n && is_digit(s[j]))
            j++;
        if (j + 1 < n && s[j] == '_' && is_digit(s[j + 1])) j++;
    }
    return j;
}

/* jinja2's float_re at i (not after a '.'): the end, or 0. */
static size_t float_end(const lx *L, size_t i)
{
    const char *s = L->s;
    size_t n = L->n, d = digits(s, n, i);
    if (d == i || (i > 0 && s[i - 1] == '.')) return 0;
    for (int with_frac = 1; with_frac >= 0; with_frac--) { /* (\.D)?e[+-]?D */
        size_t j = d;
        if (with_frac) {
            if (j >= n || s[j] != '.' || digits(s, n, j + 1) == j + 1) continue;
            j = digits(s, n, j + 1);
        }
        if (j < n && (s[j] == 'e' || s[j] == 'E')) {
            size_t k = j + 1;
            if (k < n && (s[k] == '+' || s[k] == '-')) k++;
            size_t e = digits(s, n, k);
            if (e > k) return e;
        }
    }
    if (d < n && s[d] == '.' && digits(s, n, d + 1) > d + 1) return digits(s, n, d + 1);
    return 0;
}

/* jinja2's integer_re at i: the end and the value, or 0. */
static size_t int_end(lx *L, size_t i, int64_t *v, bool *overflow)
{
    const char *s = L->s;
    size_t n = L->n, j = i;
    int base = 10;
    *v = 0, *overflow = false;
    if (s[i] == '0' && i + 1 < n && s[i + 1] && strchr("bBoOxX", s[i + 1])) {
        char b = (char)(s[i + 1] | 0x20);
        base = b == 'b' ? 2 : b == 'o' ? 8 : 16;
        j = i + 2;
        size_t k = j;
        for (;;) { /* (_?digit)+ */
            size_t m = k + (k < n && s[k] == '_');
            int d = m >= n                                         ? -1
                    : is_digit(s[m])                               ? s[m] - '0'
                    : (s[m] | 0x20) >= 'a' && (s[m] | 0x20) <= 'f' ? (s[m] | 0x20) - 'a' + 10
                                                                   : -1;
            if (d < 0 || d >= base) break;
            if (*v > (INT64_MAX - d) / base)
                *overflow = true;
            else
                *v = *v * base + d;
            k = m + 1;
        }
        if (k > j) return k;
        base = 10; /* "0b" without digits: just the 0 */
    }
    if (s[i] == '0') { /* 0(_?0)* */
        j = i + 1;
        while (j < n && (s[j] == '0' || (s[j] == '_' && j + 1 < n && s[j + 1] == '0')))
            j += s[j] == '_' ? 2 : 1;
        return j;
    }
    if (!is_digit(s[i])) return 0;
    for (j = i; j < n;) { /* [1-9](_?\d)* */
        size_t m = j + (j > i && s[j] == '_');
        if (m >= n || !is_digit(s[m])) break;
        int d = s[m] - '0';
        if (*v > (INT64_MAX - d) / 10)
            *overflow = true;
        else
            *v = *v * 10 + d;
        j = m + 1;
    }
    return j;
}

/* clang-format off */
static const struct { const char *s; int t; } ops[] = {
    {"//", T_FLOORDIV}, {"**", T_POW}, {"==", T_EQ}, {"!=", T_NE}, {">=", T_GTEQ},
    {"<=", T_LTEQ}, {"+", T_ADD}, {"-", T_SUB}, {"/", T_DIV}, {"*", T_MUL}, {"%", T_MOD},
    {"~", T_TILDE}, {"[", T_LBRACKET}, {"]", T_RBRACKET}, {"(", T_LPAREN}, {")", T_RPAREN},
    {"{", T_LBRACE}, {"}", T_RBRACE}, {">", T_GT}, {"<", T_LT}, {"=", T_ASSIGN}, {".", T_DOT},
    {":", T_COLON}, {"|", T_PIPE}, {",", T_COMMA}, {";", T_SEMICOLON},
};
/* clang-format on */

/* The tokens inside {% %} (block) or {{ }}, up to and including the end marker. */
static es_status tag(lx *L, bool block)
{
    const char *s = L->s;
    size_t n = L->n;
    L->nbal = 0;
    while (L->pos < n) {
        size_t i = L->pos, e = 0;
        jtok *t;
        if (!L->nbal) { /* the end marker, only with brackets balanced */
            if (block) {
                if (i + 3 <= n && !memcmp(s + i, "+%}", 3))
                    e = i + 3;
                else if (i + 3 <= n && !memcmp(s + i, "-%}", 3))
                    e = skip_ws(s, n, i + 3);
                else if (i + 2 <= n && !memcmp(s + i, "%}", 2))
                    e = i + 2 + (i + 2 < n && s[i + 2] == '\n');
            } else {
                if (i + 3 <= n && !memcmp(s + i, "-}}", 3))
                    e = skip_ws(s, n, i + 3);
                else if (i + 2 <= n && !memcmp(s + i, "}}", 2))
                    e = i + 2;
            }
            if (e) {
                EMIT(L, block ? T_BLOCK_END : T_VAR_END, t);
                L->line += count_nl(s + i, e - i);
                L->line_starting = s[e - 1] == '\n';
                L->pos = e;
                return ES_OK;
            }
        }
        if ((e = skip_ws(s, n, i)) > i) {
            L->line += count_nl(s + i, e - i);
            L->pos = e;
            continue;
        }
        char c = s[i];
        if ((e = float_end(L, i))) {
            EMIT(L, T_FLOAT, t);
            char *buf = malloc(e - i + 1);
            if (!buf) return es_fail(ES_E_NOMEM, "%s: out of memory", L->name);
            size_t k = 0;
            for (size_t j = i; j < e; j++)
                if (s[j] != '_') buf[k++] = s[j];
            buf[k] = 0;
            t->f = ja_strtod(buf, NULL);
            free(buf);
            L->pos = e;
            continue;
        }
        int64_t v;
        bool over;
        if (is_digit(c) && (e = int_end(L, i, &v, &over))) {
            if (over) return fail(L, "integer literal too large (more than 64 bits)");
            EMIT(L, T_INT, t);
            t->i = v;
            L->pos = e;
            continue;
        }
        if (c == '_' || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')) {
            for (e = i; e < n && (s[e] == '_' || is_digit(s[e]) ||
                                  ((s[e] | 0x20) >= 'a' && (s[e] | 0x20) <= 'z'));)
                e++;
            EMIT(L, T_NAME, t);
            t->p = s + i, t->n = e - i;
            L->pos = e;
            continue;
        }
        if (c == '\'' || c == '"') {
            for (e = i + 1; e < n && s[e] != c; e++)
                if (s[e] == '\\') e++;
            if (e >= n)
                return fail(L, "unexpected char %s (an unterminated string)",
                            c == '"' ? "'\"'" : "\"'\"");
            EMIT(L, T_STRING, t);
            ES_TRY(string_value(L, s + i + 1, e - i - 1, t));
            L->line += count_nl(s + i, e - i);
            L->pos = e + 1;
            continue;
        }
        size_t k = 0;
        while (k < sizeof(ops) / sizeof(ops[0]) &&
               (i + strlen(ops[k].s) > n || memcmp(s + i, ops[k].s, strlen(ops[k].s))))
            k++;
        if (k == sizeof(ops) / sizeof(ops[0])) {
            if ((uint8_t)c >= 0x80) return fail(L, "unexpected non-ASCII character in a tag");
            return fail(L, "unexpected char '%c'", c);
        }
        int ty = ops[k].t;
        if (ty == T_LBRACE || ty == T_LPAREN || ty == T_LBRACKET) {
            if (L->nbal == JA_MAX_DEPTH) return fail(L, "brackets nested too deep");
            L->bal[L->nbal++] = ty == T_LBRACE ? '}' : ty == T_LPAREN ? ')' : ']';
        } else if (ty == T_RBRACE || ty == T_RPAREN || ty == T_RBRACKET) {
            if (!L->nbal) return fail(L, "unexpected '%c'", c);
            if (L->bal[--L->nbal] != c)
                return fail(L, "unexpected '%c', expected '%c'", c, L->bal[L->nbal]);
        }
        EMIT(L, ty, t);
        L->pos = i + strlen(ops[k].s);
    }
    return ES_OK; /* end of source inside the tag: the parser reports it */
}

es_status ja_lex(ja_arena *a, const char *name, const char *src, size_t len, jtok **toks, size_t *n)
{
    lx L = {.a = a, .name = name, .line = 1, .line_starting = true};
    char *s = ja_alloc(a, len + 1);
    if (!s) return es_fail(ES_E_NOMEM, "%s: out of memory", name);
    size_t m = 0;
    for (size_t i = 0; i < len; i++) { /* \r\n and \r -> \n */
        if (src[i] == '\r') {
            s[m++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[m++] = src[i];
        }
    }
    if (m && s[m - 1] == '\n') m--; /* keep_trailing_newline=False */
    s[m] = 0;
    L.s = s, L.n = m;
    while (L.pos < L.n) {
        const char *p = s + L.pos;
        size_t rest = L.n - L.pos;
        const char *o = NULL;
        for (const char *q = p; (q = memchr(q, '{', rest - (size_t)(q - p))); q++)
            if (q + 1 < p + rest && (q[1] == '{' || q[1] == '%' || q[1] == '#')) {
                o = q;
                break;
            }
        if (!o) { /* the rest is text */
            ES_TRY(text(&L, L.pos, L.n, 0, false));
            break;
        }
        size_t at = (size_t)(o - s);
        char kind = o[1], sign = 0;
        if (at + 2 < L.n && (o[2] == '-' || o[2] == '+')) sign = o[2];
        char raw_sign;
        size_t raw_end = kind == '%' ? match_word_tag(&L, at, "raw", false, &raw_sign) : 0;
        ES_TRY(text(&L, L.pos, at, sign, kind != '{'));
        L.line_starting = false;
        if (raw_end) {
            L.pos = at;
            ES_TRY(raw(&L, raw_end));
            continue;
        }
        L.pos = at + 2 + (sign != 0);
        if (kind == '#') {
            ES_TRY(comment(&L));
            continue;
        }
        jtok *t;
        EMIT(&L, kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, t);
        ES_TRY(tag(&L, kind == '%'));
    }
    jtok *t;
    EMIT(&L, T_EOF, t);
    *toks = L.t, *n = L.nt;
    return ES_OK;
}

const char *ja_tok_desc(int t)
{
    static const char *const d[] = {
        [T_EOF] = "end of template",
        [T_DATA] = "template data / text",
        [T_BLOCK_BEGIN] = "begin of statement block",
        [T_BLOCK_END] = "end of statement block",
        [T_VAR_BEGIN] = "begin of print statement",
        [T_VAR_END] = "end of print statement",
        [T_NAME] = "name",
        [T_STRING] = "string",
        [T_INT] = "integer",
        [T_FLOAT] = "float",
        [T_ADD] = "+",
        [T_SUB] = "-",
        [T_DIV] = "/",
        [T_FLOORDIV] = "//",
        [T_MUL] = "*",
        [T_MOD] = "%",
        [T_POW] = "**",
        [T_TILDE] = "~",
        [T_LBRACKET] = "[",
        [T_RBRACKET] = "]",
        [T_LPAREN] = "(",
        [T_RPAREN] = ")",
        [T_LBRACE] = "{",
        [T_RBRACE] = "}",
        [T_EQ] = "==",
        [T_NE] = "!=",
        [T_GT] = ">",
        [T_GTEQ] = ">=",
        [T_LT] = "<",
        [T_LTEQ] = "<=",
        [T_ASSIGN] = "=",
        [T_DOT] = ".",
        [T_COLON] = ":",
        [T_PIPE] = "|",
        [T_COMMA] = ",",
        [T_SEMICOLON] = ";",
    };
    return t >= 0 && t < (int)(sizeof(d) / sizeof(d[0])) && d[t] ? d[t] : "token";
}
