/*
 * Python's number text for the Jinja interpreter: repr(float), and reading a float (literals,
 * the float filter), both in the C locale.
 *
 * DESIGN: repr(float) is the shortest decimal string that reads back to the same double
 * (found by trying 1..17 significant digits, which picks the correctly rounded candidate, as
 * Python's dtoa mode 0 does), laid out as Python does: positional for exponents -4 < e <= 16,
 * else d.ddde+XX. Number text is made and read in the C locale whatever the process's locale
 * is (uselocale / strtod_l), so a host program with a comma decimal point changes nothing.
 */
#include "jinja/jinja_int.h"

#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;
static void make_c_locale(void)
{
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
}

/* snprintf(buf, 32, "%.*e", prec, f) in the C locale. */
static void fmt_e(char *buf, int prec, double f)
{
    pthread_once(&c_locale_once, make_c_locale);
    locale_t old = c_locale ? uselocale(c_locale) : (locale_t)0;
    snprintf(buf, 32, "%.*e", prec, f);
    if (c_locale) uselocale(old);
}

double ja_strtod(const char *s, char **end)
{
    pthread_once(&c_locale_once, make_c_locale);
    return c_locale ? strtod_l(s, end, c_locale) : strtod(s, end);
}

const char *ja_float_repr(double f, char *buf)
{
    if (isnan(f)) return strcpy(buf, "nan");
    if (isinf(f)) return strcpy(buf, f < 0 ? "-inf" : "inf");
    if (f == 0) return strcpy(buf, signbit(f) ? "-0.0" : "0.0");
    char e[40];
    for (int p = 0; p < 17; p++) {
        fmt_e(e, p, f);
        if (ja_strtod(e, NULL) == f) break;
    }
    /* e is [-]d[.ddd]e(+|-)XX: digits and the decimal exponent */
    char dig[24];
    int nd = 0;
    const char *q = e;
    bool neg = *q == '-';
    if (neg) q++;
    for (; *q && *q != 'e'; q++)
        if (*q != '.') dig[nd++] = *q;
    while (nd > 1 && dig[nd - 1] == '0')
        nd--;
    int decpt = atoi(q + 1) + 1; /* value = 0.DIGITS * 10^decpt */
    char *o = buf;
    if (neg) *o++ = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            *o++ = '0', *o++ = '.';
            for (int i = 0; i < -decpt; i++)
                *o++ = '0';
            memcpy(o, dig, (size_t)nd), o += nd;
        } else if (decpt >= nd) {
            memcpy(o, dig, (size_t)nd), o += nd;
            for (int i = nd; i < decpt; i++)
                *o++ = '0';
            *o++ = '.', *o++ = '0';
        } else {
            memcpy(o, dig, (size_t)decpt), o += decpt;
            *o++ = '.';
            memcpy(o, dig + decpt, (size_t)(nd - decpt)), o += nd - decpt;
        }
        *o = 0;
    } else {
        *o++ = dig[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, dig + 1, (size_t)(nd - 1)), o += nd - 1;
        }
        int x = decpt - 1;
        sprintf(o, "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
    }
    return buf;
}
