/* Line charts as standalone SVG files, with no dependency: one polyline with point markers per
 * series, two axes with "nice" ticks, axis titles, a chart title and a legend. Made for
 * `estream bench --plot`: x = memory budget (MiB), y = tokens/s or latency (s), one series per
 * policy. Lives in the library (not src/cli) so that tests link it. */
#ifndef ES_PLOT_SVG_H
#define ES_PLOT_SVG_H

#include "estream.h"

/* One series: n points (x[i], y[i]); the arrays are borrowed for the call. */
typedef struct es_plot_series {
    const char *name; /* legend text; NULL is "" */
    int n;
    const double *x, *y;
} es_plot_series;

/* Writes the chart of s[0..n_series) to path. Points with a coordinate that is NaN, infinite or
 * larger than 1e300 in magnitude are skipped; each series' remaining points are joined in
 * increasing x (a polyline when it has 2 or more, markers always), and every series has a
 * legend entry, even with no point left. The x axis spans the data; the y axis spans the data
 * and 0. A single value (all x or all y equal) gets a range around it. Text (title, labels,
 * names; NULL is "") is XML-escaped. Atomic (core/outfile.h): on error nothing is left at path.
 * Errors: ES_E_INVAL (n_series < 0, s NULL with n_series > 0, a series with n < 0 or NULL
 * arrays with n > 0, path NULL), ES_E_IO, ES_E_NOMEM. */
es_status es_plot_svg_write(const char *path, const char *title, const char *x_label,
                            const char *y_label, const es_plot_series *s, int n_series);

/* An axis: ticks at lo, lo + step, ..., hi (n of them). */
typedef struct es_plot_axis {
    double lo, hi, step;
    int n;
} es_plot_axis;

/* The "nice" axis (Heckbert, Graphics Gems 1990) around [lo, hi] (finite, lo < hi) with about
 * target ticks (>= 2): step is 1, 2 or 5 times a power of ten, lo and hi are multiples of step
 * with lo <= the data's lo and hi >= the data's hi. Exposed for tests. */
es_plot_axis es_plot_nice_axis(double lo, double hi, int target);

#endif
