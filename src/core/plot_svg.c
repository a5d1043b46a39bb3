/*
 * Line charts as SVG (plot_svg.h has the contract).
 *
 * DESIGN
 * - Fixed layout (800 x 480 px): plot area with a margin for tick labels and axis titles on the
 *   left and bottom, the title on top, the legend in a column on the right. The chart is for
 *   a handful of series (policies) with a handful of points (memory budgets) each.
 * - Bad points never reach a coordinate: NaN, infinities and magnitudes above 1e300 (whose
 *   differences could overflow) are skipped before the ranges are computed, and every range has
 *   hi > lo (a single value gets a range around it), so no division by zero can produce a NaN
 *   attribute. The y axis includes 0: throughputs compare as ratios, and a chart that starts at
 *   the smallest value exaggerates small differences.
 * - Points of a series are joined in increasing x whatever the order of the arrays
 *   (`--mem 8192,1024,4096` still draws a line from left to right).
 */
#include "core/plot_svg.h"
#include "core/outbuf.h"
#include "core/util.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

enum { WIDTH = 800, HEIGHT = 480 };
/* the plot area */
#define LEFT 80.0
#define RIGHT 600.0
#define TOP 50.0
#define BOTTOM 410.0
#define TICKS 5        /* about this many ticks per axis */
#define MAX_ABS 1e300  /* larger magnitudes are skipped like NaN */

/* Distinct colours (Tableau 10), cycled. */
static const char *const COLORS[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                     "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

static bool plottable(double v) { return isfinite(v) && fabs(v) <= MAX_ABS; }

/* The nice number near x > 0: 1, 2, 5 or 10 times a power of ten; rounded to the nearest, or
 * the smallest not below x. */
static double nice_num(double x, bool round_it)
{
    const double e = floor(log10(x));
    const double p = pow(10, e);
    const double f = x / p; /* in [1, 10) */
    double nf;
    if (round_it)
        nf = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
    else
        nf = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
    return nf * p;
}

es_plot_axis es_plot_nice_axis(double lo, double hi, int target)
{
    if (target < 2) target = 2;
    if (!(hi > lo)) hi = lo + 1; /* outside the contract; still an axis */
    const double range = nice_num(hi - lo, false);
    double step = nice_num(range / (target - 1), true);
    double k0 = floor(lo / step), k1 = ceil(hi / step);
    if (!(step > 0) || !isfinite(step) || !isfinite(k0) || !isfinite(k1) || k1 - k0 > 100) {
        /* not reachable for ranges plot() builds; a plain split keeps the chart drawable */
        step = (hi - lo) / (target - 1);
        return (es_plot_axis){lo, hi, step, target};
    }
    if (k1 <= k0) k1 = k0 + 1;
    return (es_plot_axis){k0 * step, k1 * step, step, (int)(k1 - k0) + 1};
}

/* The axis for plottable values in [lo, hi] (has: any at all), with 0 if zero is set. */
static es_plot_axis make_axis(double lo, double hi, bool has, bool zero)
{
    if (!has) lo = hi = 0;
    if (zero) {
        lo = fmin(lo, 0);
        hi = fmax(hi, 0);
    }
    if (!(hi - lo > 1e-200 * fmax(1, fmax(fabs(lo), fabs(hi))))) { /* one value */
        const double v = lo;
        if (v == 0) {
            lo = 0;
            hi = 1;
        } else {
            const double pad = fabs(v) * 0.1;
            lo = zero && v > 0 ? 0 : v - pad;
            hi = zero && v < 0 ? 0 : v + pad;
        }
    }
    return es_plot_nice_axis(lo, hi, TICKS);
}

/* Decimals that show every tick of step exactly (step = 1, 2 or 5 times 10^e). */
static int tick_decimals(double step)
{
    const int d = -(int)floor(log10(step) + 1e-9);
    return d < 0 ? 0 : d > 15 ? 15 : d;
}

static double map(double v, const es_plot_axis *a, double p0, double p1)
{
    return p0 + (v - a->lo) / (a->hi - a->lo) * (p1 - p0);
}

typedef struct pt {
    double x, y;
    int i; /* index in the series: ties in x keep their order */
} pt;

static int pt_cmp(const void *a, const void *b)
{
    const pt *p = a, *q = b;
    if (p->x != q->x) return p->x < q->x ? -1 : 1;
    return p->i - q->i;
}

static void put_axes(es_outbuf *b, const es_plot_axis *ax, const es_plot_axis *ay)
{
    const int dx = tick_decimals(ax->step), dy = tick_decimals(ay->step);
    es_outbuf_puts(b, "<g stroke=\"#e0e0e0\" stroke-width=\"1\">\n");
    for (int k = 0; k < ax->n; k++) {
        const double px = map(ax->lo + k * ax->step, ax, LEFT, RIGHT);
        es_outbuf_printf(b, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", px, TOP,
                         px, BOTTOM);
    }
    for (int k = 0; k < ay->n; k++) {
        const double py = map(ay->lo + k * ay->step, ay, BOTTOM, TOP);
        es_outbuf_printf(b, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", LEFT, py,
                         RIGHT, py);
    }
    es_outbuf_puts(b, "</g>\n");
    es_outbuf_printf(b, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"none\" "
                        "stroke=\"#333\"/>\n", LEFT, TOP, RIGHT - LEFT, BOTTOM - TOP);
    es_outbuf_puts(b, "<g fill=\"#333\" text-anchor=\"middle\">\n");
    for (int k = 0; k < ax->n; k++) {
        const double v = (ax->lo + k * ax->step) + 0.0; /* + 0.0: never print "-0" */
        es_outbuf_printf(b, "<text x=\"%.2f\" y=\"%.2f\">%.*f</text>\n",
                         map(ax->lo + k * ax->step, ax, LEFT, RIGHT), BOTTOM + 18, dx,
                         fabs(v) < ax->step * 1e-9 ? 0.0 : v);
    }
    es_outbuf_puts(b, "</g>\n<g fill=\"#333\" text-anchor=\"end\">\n");
    for (int k = 0; k < ay->n; k++) {
        const double v = (ay->lo + k * ay->step) + 0.0;
        es_outbuf_printf(b, "<text x=\"%.2f\" y=\"%.2f\" dy=\"0.35em\">%.*f</text>\n", LEFT - 8,
                         map(ay->lo + k * ay->step, ay, BOTTOM, TOP), dy,
                         fabs(v) < ay->step * 1e-9 ? 0.0 : v);
    }
    es_outbuf_puts(b, "</g>\n");
}

es_status es_plot_svg_write(const char *path, const char *title, const char *x_label,
                            const char *y_label, const es_plot_series *s, int n_series)
{
    if (!path) return es_fail(ES_E_INVAL, "plot: no output path");
    if (n_series < 0 || (n_series > 0 && !s))
        return es_fail(ES_E_INVAL, "plot %s: bad series list", path);
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    int most = 0; /* points in the longest series */
    for (int i = 0; i < n_series; i++) {
        if (s[i].n < 0 || (s[i].n > 0 && (!s[i].x || !s[i].y)))
            return es_fail(ES_E_INVAL, "plot %s: series %d has no points array", path, i);
        most = es_max_int(most, s[i].n);
        for (int k = 0; k < s[i].n; k++) {
            if (!plottable(s[i].x[k]) || !plottable(s[i].y[k])) continue;
            x0 = fmin(x0, s[i].x[k]);
            x1 = fmax(x1, s[i].x[k]);
            y0 = fmin(y0, s[i].y[k]);
            y1 = fmax(y1, s[i].y[k]);
        }
    }
    const bool has = x0 <= x1;
    const es_plot_axis ax = make_axis(x0, x1, has, false), ay = make_axis(y0, y1, has, true);

    pt *pts = malloc((size_t)(most ? most : 1) * sizeof(*pts));
    if (!pts) return es_fail(ES_E_NOMEM, "plot %s: out of memory", path);
    es_outbuf b;
    es_status st = es_outbuf_open(&b, path);
    if (st != ES_OK) {
        free(pts);
        return st;
    }
    es_outbuf_printf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                         "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n",
                     WIDTH, HEIGHT, WIDTH, HEIGHT);
    es_outbuf_printf(&b, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", WIDTH, HEIGHT);
    es_outbuf_printf(&b, "<text x=\"%.2f\" y=\"28\" text-anchor=\"middle\" font-size=\"16\" "
                         "font-weight=\"bold\">", (LEFT + RIGHT) / 2);
    es_outbuf_xml_str(&b, title);
    es_outbuf_puts(&b, "</text>\n");
    put_axes(&b, &ax, &ay);
    es_outbuf_printf(&b, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">",
                     (LEFT + RIGHT) / 2, (double)HEIGHT - 22);
    es_outbuf_xml_str(&b, x_label);
    es_outbuf_printf(&b, "</text>\n<text transform=\"translate(22 %.2f) rotate(-90)\" "
                         "text-anchor=\"middle\">", (TOP + BOTTOM) / 2);
    es_outbuf_xml_str(&b, y_label);
    es_outbuf_puts(&b, "</text>\n");

    for (int i = 0; i < n_series; i++) {
        const char *color = COLORS[i % (int)ES_LEN(COLORS)];
        int n = 0;
        for (int k = 0; k < s[i].n; k++)
            if (plottable(s[i].x[k]) && plottable(s[i].y[k]))
                pts[n++] = (pt){s[i].x[k], s[i].y[k], k};
        qsort(pts, (size_t)n, sizeof(*pts), pt_cmp);
        es_outbuf_printf(&b, "<g fill=\"%s\" stroke=\"%s\">\n", color, color);
        if (n >= 2) {
            es_outbuf_puts(&b, "<polyline fill=\"none\" stroke-width=\"2\" points=\"");
            for (int k = 0; k < n; k++)
                es_outbuf_printf(&b, "%s%.2f,%.2f", k ? " " : "", map(pts[k].x, &ax, LEFT, RIGHT),
                                 map(pts[k].y, &ay, BOTTOM, TOP));
            es_outbuf_puts(&b, "\"/>\n");
        }
        for (int k = 0; k < n; k++)
            es_outbuf_printf(&b, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3.5\"/>\n",
                             map(pts[k].x, &ax, LEFT, RIGHT), map(pts[k].y, &ay, BOTTOM, TOP));
        /* legend entry: a line with a marker, then the name */
        const double ly = TOP + 10 + 20.0 * i;
        es_outbuf_printf(&b, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" "
                             "stroke-width=\"2\"/>\n<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3.5\"/>\n",
                         RIGHT + 20, ly, RIGHT + 44, ly, RIGHT + 32, ly);
        es_outbuf_printf(&b, "<text x=\"%.2f\" y=\"%.2f\" dy=\"0.35em\" fill=\"#333\" "
                             "stroke=\"none\">", RIGHT + 52, ly);
        es_outbuf_xml_str(&b, s[i].name);
        es_outbuf_puts(&b, "</text>\n</g>\n");
    }
    es_outbuf_puts(&b, "</svg>\n");
    free(pts);
    return es_outbuf_commit(&b);
}
