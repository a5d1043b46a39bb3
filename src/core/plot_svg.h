/* Line charts as standalone SVG files, with no dependency: one polyline with point markers per
 * series, two axes with "nice" ticks, axis titles, a chart title and a legend. Made for
 * `estream bench --plot`: x = memory budget (MiB), y = tokens/s or latency (s), one series per
 * policy. Lives in the library (not src/cli) so that tests link it. */
#ifndef ES_PLOT_SVG_H
#define ES_PLOT_SVG_H

#include "estream.h"
#include "estream_tools.h"

/* es_plot_series and es_plot_svg_write() are public (include/estream.h, "measurements"). */

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
