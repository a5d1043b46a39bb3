/*
 * SVG line charts (src/core/plot_svg.c): the file is checked by a small XML well-formedness
 * checker written here (balanced tags, one root, quoted attributes, '&' only in entities, no
 * '<' in text or attributes), then element by element: one polyline per series with 2 or more
 * drawable points, joined in increasing x, markers inside the plot area, escaped text, nice
 * tick labels. Also: NaN/infinite points are skipped, degenerate data (one point, equal values,
 * no series) still makes a valid chart, bad arguments and paths leave nothing behind.
 */
#include "t.h"

#include "core/plot_svg.h"

#include <ctype.h>

/* ---- a minimal XML well-formedness check ------------------------------------------------- */

/* Whether s[i..] starts an entity this checker accepts; *len gets its length. */
static bool entity(const char *s, size_t *len)
{
    static const char *const names[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
    for (size_t k = 0; k < T_LEN(names); k++)
        if (!strncmp(s, names[k], strlen(names[k]))) {
            *len = strlen(names[k]);
            return true;
        }
    return false;
}

/* Fails the test (with the reason and the offset) unless doc is one well-formed XML element
 * with root <root>, optionally followed by whitespace. */
static void check_xml(const char *doc, const char *root)
{
    const char *stack[64];
    size_t depth = 0, i = 0, n_roots = 0;
    const size_t n = strlen(doc);
#define XML_BAD(what) fail_msg("not well-formed XML: %s at byte %zu", what, i)
    while (i < n) {
        if (doc[i] == '&') {
            size_t l = 0;
            if (!entity(doc + i, &l)) XML_BAD("bare '&'");
            i += l;
            continue;
        }
        if (doc[i] == '>') XML_BAD("bare '>'");
        if (doc[i] != '<') {
            if (!depth && !isspace((unsigned char)doc[i])) XML_BAD("text outside the root");
            i++;
            continue;
        }
        i++;
        const bool closing = doc[i] == '/';
        if (closing) i++;
        const size_t name0 = i;
        while (i < n && (isalnum((unsigned char)doc[i]) || doc[i] == '-' || doc[i] == ':')) i++;
        if (i == name0) XML_BAD("tag without a name");
        const size_t name_len = i - name0;
        if (closing) {
            if (!depth) XML_BAD("close without open");
            const char *open = stack[--depth];
            if (strncmp(open, doc + name0, name_len) || isalnum((unsigned char)open[name_len]) ||
                open[name_len] == '-')
                XML_BAD("mismatched close tag");
            while (isspace((unsigned char)doc[i])) i++;
            if (doc[i] != '>') XML_BAD("'>' expected");
            i++;
            continue;
        }
        if (!depth) {
            if (n_roots++ || strncmp(doc + name0, root, strlen(root)) || name_len != strlen(root))
                XML_BAD("unexpected root");
        }
        /* attributes: name="value" */
        for (;;) {
            const size_t ws = i;
            while (isspace((unsigned char)doc[i])) i++;
            if (doc[i] == '>' || (doc[i] == '/' && doc[i + 1] == '>')) break;
            if (i == ws) XML_BAD("space expected before an attribute");
            const size_t a0 = i;
            while (isalnum((unsigned char)doc[i]) || doc[i] == '-' || doc[i] == ':') i++;
            if (i == a0 || doc[i] != '=' || doc[i + 1] != '"') XML_BAD("bad attribute");
            i += 2;
            while (i < n && doc[i] != '"') {
                size_t l = 0;
                if (doc[i] == '<') XML_BAD("'<' in an attribute");
                if (doc[i] == '&') {
                    if (!entity(doc + i, &l)) XML_BAD("bare '&' in an attribute");
                    i += l;
                } else {
                    i++;
                }
            }
            if (i >= n) XML_BAD("unterminated attribute");
            i++;
        }
        if (doc[i] == '/') {
            i += 2; /* empty element */
            continue;
        }
        i++;
        if (depth == T_LEN(stack)) XML_BAD("too deep");
        stack[depth++] = doc + name0;
    }
    if (depth) XML_BAD("unclosed element");
    if (n_roots != 1) XML_BAD("no root");
#undef XML_BAD
}

static int count_str(const char *doc, const char *what)
{
    int c = 0;
    for (const char *p = doc; (p = strstr(p, what)) != NULL; p += strlen(what)) c++;
    return c;
}

/* The k-th polyline's points; returns how many (at most cap) in x[], y[]. */
static int polyline_points(const char *doc, int k, double *x, double *y, int cap)
{
    const char *p = doc;
    for (int i = 0; i <= k; i++) {
        p = strstr(p, "<polyline");
        assert_non_null(p);
        p += 9;
    }
    p = strstr(p, "points=\"");
    assert_non_null(p);
    p += 8;
    int n = 0;
    while (*p != '"') {
        char *end;
        double a = strtod(p, &end);
        assert_true(end != p && *end == ',');
        double b = strtod(end + 1, &end);
        assert_true(n < cap);
        x[n] = a;
        y[n++] = b;
        p = end;
        while (*p == ' ') p++;
    }
    return n;
}

/* Every circle's centre lies in the drawing (800 x 480) and is a finite number. */
static void check_circles(const char *doc)
{
    for (const char *p = doc; (p = strstr(p, "<circle cx=\"")) != NULL;) {
        p += 12;
        char *end;
        const double cx = strtod(p, &end);
        assert_true(!strncmp(end, "\" cy=\"", 6));
        const double cy = strtod(end + 6, NULL);
        assert_true(isfinite(cx) && isfinite(cy));
        assert_true(cx >= 0 && cx <= 800 && cy >= 0 && cy <= 480);
    }
}

/* Reads a chart and checks what every chart must be. */
static char *read_svg(const char *path)
{
    char *doc = t_read_file(path, NULL);
    assert_non_null(doc);
    assert_true(!strncmp(doc, "<svg", 4));
    const size_t n = strlen(doc);
    assert_true(n > 8 && !strcmp(doc + n - 7, "</svg>\n"));
    check_xml(doc, "svg");
    /* no NaN or infinity reached a coordinate */
    for (const char *p = doc; *p; p++)
        assert_false(!strncasecmp(p, "nan", 3) || !strncasecmp(p, "inf", 3));
    check_circles(doc);
    return doc;
}

/* ---- tests ---------------------------------------------------------------------------------- */

/* The bench chart: 3 policies over 4 memory budgets, names that need escaping. */
static void test_three_series(void **state)
{
    (void)state;
    const double mem[] = {1024, 2048, 4096, 8192};
    const double a[] = {12.5, 30, 61, 97}, b[] = {10, 25, 58, 96}, c[] = {3, 9, 40, 95.5};
    const es_plot_series s[] = {
        {"lru <1>", 4, mem, a}, {"\"fifo\" & co", 4, mem, b}, {"belady's", 4, mem, c}};
    const char *path = t_tmp_path("three.svg");
    assert_int_equal(es_plot_svg_write(path, "tokens/s vs memory <budget>", "memory budget (MiB)",
                                       "tokens/s", s, 3),
                     ES_OK);
    char *doc = read_svg(path);
    unlink(path);
    assert_int_equal(count_str(doc, "<polyline"), 3);
    assert_int_equal(count_str(doc, "<circle"), 3 * 4 + 3); /* markers + legend */
    assert_non_null(strstr(doc, ">lru &lt;1&gt;</text>"));
    assert_non_null(strstr(doc, ">&quot;fifo&quot; &amp; co</text>"));
    assert_non_null(strstr(doc, ">belady&apos;s</text>"));
    assert_non_null(strstr(doc, ">tokens/s vs memory &lt;budget&gt;</text>"));
    assert_non_null(strstr(doc, ">memory budget (MiB)</text>"));
    assert_non_null(strstr(doc, ">tokens/s</text>"));
    /* nice ticks: x 0..10000 by 2000, y 0..100 by 20 */
    for (int v = 0; v <= 10000; v += 2000) {
        char want[32];
        snprintf(want, sizeof(want), ">%d</text>", v);
        assert_non_null(strstr(doc, want));
    }
    assert_non_null(strstr(doc, ">100</text>"));
    assert_non_null(strstr(doc, ">80</text>"));
    assert_null(strstr(doc, ">120</text>"));
    /* each polyline: 4 points inside the plot area, left to right, higher value = higher up */
    for (int k = 0; k < 3; k++) {
        double x[8], y[8];
        assert_int_equal(polyline_points(doc, k, x, y, 8), 4);
        for (int i = 0; i < 4; i++) {
            assert_true(x[i] >= 80 && x[i] <= 600 && y[i] >= 50 && y[i] <= 410);
            if (i) assert_true(x[i] > x[i - 1] && y[i] < y[i - 1]);
        }
        /* x = mem / 10000 of the plot width from the left edge */
        assert_true(t_near(x[3], 80 + 8192.0 / 10000 * 520, 0.01));
    }
    free(doc);
}

/* NaN, infinities and huge values are skipped; a series keeps its legend entry with no point
 * left; points join in increasing x whatever the input order. */
static void test_bad_points(void **state)
{
    (void)state;
    const double x1[] = {1, NAN, 3, INFINITY, 5, 2}, y1[] = {1, 2, NAN, 4, 5, 1e308};
    const double x2[] = {4}, y2[] = {-INFINITY};
    const double x3[] = {NAN, NAN}, y3[] = {1, 2};
    const double x4[] = {7}, y4[] = {3};
    const double x5[] = {9, 2, 5}, y5[] = {1, 2, 3}; /* unsorted */
    const es_plot_series s[] = {{"holes", 6, x1, y1}, {"no finite", 1, x2, y2},
                                {"all bad x", 2, x3, y3}, {"one point", 1, x4, y4},
                                {"empty", 0, NULL, NULL}, {"unsorted", 3, x5, y5}};
    const char *path = t_tmp_path("bad.svg");
    assert_int_equal(es_plot_svg_write(path, "t", "x", "y", s, 6), ES_OK);
    char *doc = read_svg(path);
    unlink(path);
    assert_int_equal(count_str(doc, "<polyline"), 2); /* "holes" (2 points) and "unsorted" */
    assert_int_equal(count_str(doc, "<circle"), 2 + 1 + 3 + 6);
    for (size_t k = 0; k < T_LEN(s); k++) {
        char want[64];
        snprintf(want, sizeof(want), ">%s</text>", s[k].name);
        assert_non_null(strstr(doc, want));
    }
    double x[8], y[8];
    assert_int_equal(polyline_points(doc, 0, x, y, 8), 2);
    assert_true(x[0] < x[1] && y[0] > y[1]);
    assert_int_equal(polyline_points(doc, 1, x, y, 8), 3);
    assert_true(x[0] < x[1] && x[1] < x[2]);
    assert_true(y[0] > y[1] && y[1] < y[2]); /* (2,2), (5,3), (9,1) */
    free(doc);
}

/* Degenerate data still gives a valid chart: equal values, one point, zeros, negatives, no
 * series, NULL texts. */
static void test_degenerate(void **state)
{
    (void)state;
    const char *path = t_tmp_path("degenerate.svg");
    const double same_x[] = {4096, 4096, 4096}, same_y[] = {42, 42, 42};
    const double zero[] = {0, 0}, neg[] = {-5, -1};
    struct {
        es_plot_series s;
        int polylines;
    } cases[] = {
        {{"equal", 3, same_x, same_y}, 1},
        {{"one", 1, same_x, same_y}, 0},
        {{"zeros", 2, zero, zero}, 1},
        {{"negative", 2, neg, neg}, 1},
    };
    for (size_t k = 0; k < T_LEN(cases); k++) {
        assert_int_equal(es_plot_svg_write(path, "deg", "x", "y", &cases[k].s, 1), ES_OK);
        char *doc = read_svg(path);
        assert_int_equal(count_str(doc, "<polyline"), cases[k].polylines);
        if (k == 3) assert_non_null(strstr(doc, ">-5</text>")); /* y axis reaches down to -5 */
        if (k == 3) assert_non_null(strstr(doc, ">0</text>"));  /* and up to 0 */
        free(doc);
    }
    assert_int_equal(es_plot_svg_write(path, NULL, NULL, NULL, NULL, 0), ES_OK);
    char *doc = read_svg(path);
    assert_int_equal(count_str(doc, "<polyline"), 0);
    free(doc);
    unlink(path);
}

/* Axes: the textbook cases, then properties over many ranges. */
static void test_nice_axis(void **state)
{
    (void)state;
    es_plot_axis a = es_plot_nice_axis(0, 97, 5);
    assert_true(a.lo == 0 && a.hi == 100 && a.step == 20 && a.n == 6);
    a = es_plot_nice_axis(1024, 8192, 5);
    assert_true(a.lo == 0 && a.hi == 10000 && a.step == 2000 && a.n == 6);
    a = es_plot_nice_axis(-3.2, 7.9, 5);
    assert_true(a.lo == -5 && a.hi == 10 && a.step == 5 && a.n == 4);
    t_rng r = {77};
    for (int it = 0; it < 2000; it++) {
        const double scale = pow(10, (int)(t_next(&r) % 24) - 12);
        double lo = t_uniform(&r) * 100 * scale, hi = lo + (t_uniform(&r) + 1.001) * 50 * scale;
        a = es_plot_nice_axis(lo, hi, 5);
        assert_true(a.lo <= lo && a.hi >= hi);
        assert_true(a.n >= 3 && a.n <= 11);
        const double m = a.step / pow(10, floor(log10(a.step)));
        assert_true(t_near(m, 1, 1e-9) || t_near(m, 2, 1e-9) || t_near(m, 5, 1e-9));
        assert_true(t_near(a.lo / a.step, round(a.lo / a.step), 1e-6));
        assert_true(t_near(a.lo + (a.n - 1) * a.step, a.hi, a.step * 1e-6));
    }
}

/* Bad arguments and bad paths: an error and no file. */
static void test_bad_args(void **state)
{
    (void)state;
    const double x[] = {1, 2}, y[] = {3, 4};
    const es_plot_series ok = {"s", 2, x, y}, neg = {"s", -1, x, y}, nox = {"s", 2, NULL, y};
    char *dir = t_mkdtemp("plot");
    assert_non_null(dir);
    char *before = t_dir_snapshot(dir, NULL);
    char path[600];
    snprintf(path, sizeof(path), "%s/chart.svg", dir);
    assert_int_equal(es_plot_svg_write(path, "t", "x", "y", &ok, -1), ES_E_INVAL);
    assert_int_equal(es_plot_svg_write(path, "t", "x", "y", NULL, 1), ES_E_INVAL);
    assert_int_equal(es_plot_svg_write(path, "t", "x", "y", &neg, 1), ES_E_INVAL);
    assert_int_equal(es_plot_svg_write(path, "t", "x", "y", &nox, 1), ES_E_INVAL);
    assert_int_equal(es_plot_svg_write(NULL, "t", "x", "y", &ok, 1), ES_E_INVAL);
    T_DIR_UNCHANGED(dir, NULL, before);
    snprintf(path, sizeof(path), "%s/missing/chart.svg", dir);
    assert_int_equal(es_plot_svg_write(path, "t", "x", "y", &ok, 1), ES_E_IO);
    assert_int_equal(es_plot_svg_write(dir, "t", "x", "y", &ok, 1), ES_E_IO);
    T_DIR_UNCHANGED(dir, NULL, before);
    snprintf(path, sizeof(path), "%s/chart.svg", dir);
    assert_int_equal(es_plot_svg_write(path, "t", "x", "y", &ok, 1), ES_OK);
    T_DIR_UNCHANGED(dir, "chart.svg", before); /* no temporary file left */
    free(before);
    t_rm_rf(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_three_series), cmocka_unit_test(test_bad_points),
        cmocka_unit_test(test_degenerate),   cmocka_unit_test(test_nice_axis),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
