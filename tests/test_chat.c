/*
 * Chat templates: the Jinja interpreter (src/jinja) and es_chat_render.
 *
 * Golden data (tests/data/chat, made by make_expected.py with Python's jinja2 as Hugging Face
 * sets it up; no Python runs here): every real template of templates.json with every message
 * list of messages.json, with and without add_generation_prompt, must render byte for byte what
 * jinja2 rendered, or fail where jinja2 raised (raise_exception's message included); and each
 * small template of units.json (one construct each: literals, operators, statements, loop
 * variables, scoping, whitespace control, every filter, test and string method implemented;
 * and real templates with variables the message lists lack, such as gpt-oss's with tools)
 * the same, strftime_now reading make_expected.py's fixed clock. Then what the golden data cannot
 * show because jinja2 accepts it: the strict refusals (unsupported filters, tags, methods, printing
 * what Python prints with addresses) name the construct and the line; syntax errors give their
 * line; the limits (nesting, iterations, output, memory, work) end hostile templates with a clear
 * error. es_chat_render: the model's BOS/EOS text, a short buffer (ES_E_SHORT_BUFFER and the size
 * needed), a model without a template (ES_E_UNSUPPORTED) and one with a template in its metadata.
 */
#include <jansson.h>
#include <pthread.h>

#include "t.h"

#include "estream.h"
#include "gguf/gguf.h"
#include "jinja/jinja.h"

#define DATA "tests/data/chat/"

/* The folder of jinja2's renderings: tests/data/chat/expected, or $ESTREAM_CHAT_EXPECTED
 * (tools/chat-check.sh points it at a fresh run of make_expected.py). */
static const char *expected_dir(void)
{
    const char *d = getenv("ESTREAM_CHAT_EXPECTED");
    return d && *d ? d : DATA "expected";
}

/* ---- helpers ------------------------------------------------------------------------------------
 */
static json_t *load_json(const char *path)
{
    json_error_t e;
    json_t *j = json_load_file(path, JSON_ALLOW_NUL, &e);
    if (!j) fail_msg("%s:%d: %s", path, e.line, e.text);
    return j;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
    p[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return p;
}

/* A JSON value as a template value (integers stay integers, reals floats). */
static es_jinja_val *from_json(es_jinja_vars *v, json_t *j)
{
    es_jinja_val *r = NULL, *x;
    size_t i;
    const char *k;
    json_t *e;
    switch (json_typeof(j)) {
    case JSON_STRING:
        assert_int_equal(es_jinja_new_str(v, json_string_value(j), json_string_length(j), &r),
                         ES_OK);
        break;
    case JSON_INTEGER:
        assert_int_equal(es_jinja_new_int(v, json_integer_value(j), &r), ES_OK);
        break;
    case JSON_REAL:
        assert_int_equal(es_jinja_new_float(v, json_real_value(j), &r), ES_OK);
        break;
    case JSON_TRUE:
    case JSON_FALSE:
        assert_int_equal(es_jinja_new_bool(v, json_is_true(j), &r), ES_OK);
        break;
    case JSON_NULL:
        assert_int_equal(es_jinja_new_none(v, &r), ES_OK);
        break;
    case JSON_ARRAY:
        assert_int_equal(es_jinja_new_list(v, &r), ES_OK);
        json_array_foreach(j, i, e)
            assert_int_equal(es_jinja_list_append(v, r, from_json(v, e)), ES_OK);
        break;
    case JSON_OBJECT:
        assert_int_equal(es_jinja_new_dict(v, &r), ES_OK);
        json_object_foreach(j, k, e)
        {
            x = from_json(v, e);
            assert_int_equal(es_jinja_dict_set(v, r, k, x), ES_OK);
        }
        break;
    }
    return r;
}

/* Renders src with vars (may be NULL) under lim (may be NULL): ES_OK and *out, or the status. */
static es_status render(const char *src, size_t len, es_jinja_vars *v, const es_jinja_limits *lim,
                        char **out, size_t *n)
{
    es_jinja_tmpl *t;
    *out = NULL, *n = 0;
    es_status st = es_jinja_compile(src, len, "chat template", &t);
    if (st != ES_OK) return st;
    st = es_jinja_render(t, v, lim, out, n);
    es_jinja_tmpl_free(t);
    return st;
}

static void print_diff(const char *what, const char *want, size_t wn, const char *got, size_t gn)
{
    size_t i = 0;
    while (i < wn && i < gn && want[i] == got[i])
        i++;
    size_t from = i > 40 ? i - 40 : 0;
    print_error(
        "%s: differs at byte %zu (want %zu bytes, got %zu)\n  want: ...%.*s\n  got:  ...%.*s\n",
        what, i, wn, gn, (int)(wn - from < 100 ? wn - from : 100), want + from,
        (int)(gn - from < 100 ? gn - from : 100), got + from);
}

/* Checks one case against jinja2's result (a "text", or an "error" of "error_type"). */
static bool check_case(const char *what, es_status st, const char *got, size_t gn, json_t *c)
{
    json_t *text = json_object_get(c, "text");
    if (text) {
        if (st != ES_OK) {
            print_error("%s: jinja2 rendered it, we failed: %s\n", what, es_last_error());
            return false;
        }
        if (gn != json_string_length(text) || memcmp(got, json_string_value(text), gn)) {
            print_diff(what, json_string_value(text), json_string_length(text), got, gn);
            return false;
        }
        return true;
    }
    const char *type = json_string_value(json_object_get(c, "error_type"));
    const char *msg = json_string_value(json_object_get(c, "error"));
    if (st != ES_E_FORMAT) {
        print_error("%s: jinja2 raised %s (%s), we gave status %d\n", what, type, msg, st);
        return false;
    }
    /* raise_exception's message and the undefined errors are deterministic: ours must say it */
    if ((!strcmp(type, "TemplateError") || !strcmp(type, "UndefinedError")) &&
        !strstr(es_last_error(), msg)) {
        print_error("%s: jinja2 raised '%s', our error is '%s'\n", what, msg, es_last_error());
        return false;
    }
    return true;
}

/* ---- golden data --------------------------------------------------------------------------------
 */
static es_jinja_vars *chat_vars(json_t *messages, bool agp, const char *bos, const char *eos)
{
    es_jinja_vars *v;
    es_jinja_val *list, *val;
    size_t i;
    json_t *m;
    assert_int_equal(es_jinja_vars_create(&v), ES_OK);
    assert_int_equal(es_jinja_new_list(v, &list), ES_OK);
    json_array_foreach(messages, i, m)
    {
        es_jinja_val *d;
        assert_int_equal(es_jinja_new_dict(v, &d), ES_OK); /* role, then content, as in Python */
        assert_int_equal(es_jinja_dict_set(v, d, "role", from_json(v, json_object_get(m, "role"))),
                         ES_OK);
        assert_int_equal(
            es_jinja_dict_set(v, d, "content", from_json(v, json_object_get(m, "content"))), ES_OK);
        assert_int_equal(es_jinja_list_append(v, list, d), ES_OK);
    }
    assert_int_equal(es_jinja_vars_set(v, "messages", list), ES_OK);
    assert_int_equal(es_jinja_new_none(v, &val), ES_OK);
    assert_int_equal(es_jinja_vars_set(v, "tools", val), ES_OK);
    assert_int_equal(es_jinja_vars_set(v, "documents", val), ES_OK);
    assert_int_equal(es_jinja_new_bool(v, agp, &val), ES_OK);
    assert_int_equal(es_jinja_vars_set(v, "add_generation_prompt", val), ES_OK);
    assert_int_equal(es_jinja_new_str(v, bos, strlen(bos), &val), ES_OK);
    assert_int_equal(es_jinja_vars_set(v, "bos_token", val), ES_OK);
    assert_int_equal(es_jinja_new_str(v, eos, strlen(eos), &val), ES_OK);
    assert_int_equal(es_jinja_vars_set(v, "eos_token", val), ES_OK);
    return v;
}

/* The limits of the golden renders: the defaults with make_expected.py's fixed clock for
 * strftime_now (2025-08-05 12:00:00, read in UTC), so a template printing the date (gpt-oss's)
 * renders what jinja2 rendered whatever day the test runs. */
static es_jinja_limits golden_limits(void)
{
    es_jinja_limits lim = es_jinja_default_limits();
    lim.now = 1754395200;
    setenv("TZ", "UTC", 1);
    tzset();
    return lim;
}

static json_t *find_named(json_t *arr, const char *key, const char *name)
{
    size_t i;
    json_t *e;
    json_array_foreach(arr, i,
                       e) if (!strcmp(json_string_value(json_object_get(e, key)), name)) return e;
    fail_msg("no %s '%s' in the test data", key, name);
    return NULL;
}

static void test_templates_match_jinja2(void **state)
{
    (void)state;
    json_t *templates = load_json(DATA "templates.json"), *lists = load_json(DATA "messages.json");
    const es_jinja_limits lim = golden_limits();
    int total = 0, same = 0, errors = 0;
    size_t i;
    json_t *t;
    json_array_foreach(templates, i, t)
    {
        const char *name = json_string_value(json_object_get(t, "name"));
        char path[512];
        snprintf(path, sizeof(path), DATA "%s", json_string_value(json_object_get(t, "file")));
        size_t len;
        char *src = read_file(path, &len);
        es_jinja_tmpl *tmpl;
        if (es_jinja_compile(src, len, "chat template", &tmpl) != ES_OK)
            fail_msg("%s: %s", name, es_last_error());
        snprintf(path, sizeof(path), "%s/%s.json", expected_dir(), name);
        json_t *exp = load_json(path), *c;
        size_t k;
        int t_same = 0, t_total = 0;
        json_array_foreach(json_object_get(exp, "cases"), k, c)
        {
            const char *ml = json_string_value(json_object_get(c, "messages"));
            bool agp = json_is_true(json_object_get(c, "add_generation_prompt"));
            es_jinja_vars *v = chat_vars(json_object_get(find_named(lists, "name", ml), "messages"),
                                         agp, json_string_value(json_object_get(t, "bos_token")),
                                         json_string_value(json_object_get(t, "eos_token")));
            char *out;
            size_t n;
            es_status st = es_jinja_render(tmpl, v, &lim, &out, &n);
            char what[256];
            snprintf(what, sizeof(what), "%s x %s, add_generation_prompt=%d", name, ml, agp);
            bool ok = check_case(what, st, out, n, c);
            t_same += ok, t_total++;
            errors += ok && json_object_get(c, "error");
            free(out);
            es_jinja_vars_destroy(v);
        }
        print_message("  %-24s %d/%d cases as jinja2 renders them\n", name, t_same, t_total);
        same += t_same, total += t_total;
        json_decref(exp);
        es_jinja_tmpl_free(tmpl);
        free(src);
    }
    print_message("  %d of %d template x message-list cases match jinja2 (%d of them its errors)\n",
                  same, total, errors);
    json_decref(templates), json_decref(lists);
    assert_int_equal(same, total);
    assert_true(total >= 6 * 20);
}

static void test_units_match_jinja2(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof(path), "%s/units.json", expected_dir());
    json_t *units = load_json(DATA "units.json"), *exp = load_json(path);
    json_t *cases = json_object_get(exp, "cases"), *u;
    const es_jinja_limits lim = golden_limits();
    size_t i;
    int bad = 0;
    assert_int_equal(json_array_size(units), json_array_size(cases));
    json_array_foreach(units, i, u)
    {
        json_t *c = json_array_get(cases, i);
        const char *name = json_string_value(json_object_get(u, "name"));
        assert_string_equal(name, json_string_value(json_object_get(c, "name")));
        es_jinja_vars *v;
        assert_int_equal(es_jinja_vars_create(&v), ES_OK);
        json_t *vars = json_object_get(u, "vars"), *x;
        const char *k;
        json_object_foreach(vars, k, x)
            assert_int_equal(es_jinja_vars_set(v, k, from_json(v, x)), ES_OK);
        /* the template's text, or a template file of DATA ("file": a real template rendered
         * with variables the message lists lack, such as tools and tool calls) */
        json_t *src = json_object_get(u, "template");
        char *file = NULL, *out;
        size_t n, len = json_string_length(src);
        if (!src) {
            char fpath[512];
            snprintf(fpath, sizeof(fpath), DATA "%s",
                     json_string_value(json_object_get(u, "file")));
            file = read_file(fpath, &len);
        }
        es_status st = render(file ? file : json_string_value(src), len, v, &lim, &out, &n);
        bad += !check_case(name, st, out, n, c);
        free(out);
        free(file);
        es_jinja_vars_destroy(v);
    }
    print_message("  %zu unit templates, %d differ from jinja2\n", json_array_size(units), bad);
    json_decref(units), json_decref(exp);
    assert_int_equal(bad, 0);
}

/* ---- strictness
 * ------------------------------------------------------------------------------------ */
typedef struct refusal {
    const char *tmpl, *want; /* the error must contain want */
} refusal;

static void expect_error(const char *src, size_t len, const es_jinja_limits *lim, const char *want)
{
    es_jinja_vars *v;
    es_jinja_val *x, *l, *d;
    assert_int_equal(es_jinja_vars_create(&v), ES_OK);
    assert_int_equal(es_jinja_new_str(v, "text", 4, &x), ES_OK);
    assert_int_equal(es_jinja_vars_set(v, "x", x), ES_OK);
    assert_int_equal(es_jinja_new_list(v, &l), ES_OK);
    assert_int_equal(es_jinja_list_append(v, l, x), ES_OK);
    assert_int_equal(es_jinja_vars_set(v, "l", l), ES_OK);
    assert_int_equal(es_jinja_new_dict(v, &d), ES_OK);
    assert_int_equal(es_jinja_dict_set(v, d, "k", x), ES_OK);
    assert_int_equal(es_jinja_vars_set(v, "d", d), ES_OK);
    char *out;
    size_t n;
    es_status st = render(src, len, v, lim, &out, &n);
    es_jinja_vars_destroy(v);
    if (st != ES_E_FORMAT || !strstr(es_last_error(), want)) {
        print_error("template %.*s: want an error with \"%s\", got status %d \"%s\" (%.*s)\n",
                    (int)(len < 200 ? len : 200), src, want, st, st ? es_last_error() : "",
                    st ? 0 : (int)(n < 100 ? n : 100), st ? "" : out);
        free(out);
        fail();
    }
}

static void test_strict_refusals(void **state)
{
    (void)state;
    static const refusal r[] = {
        /* what jinja2 has but this interpreter does not: refused by name, with the line */
        {"{{ x|wordcount }}", "chat template line 1: filter 'wordcount' is not supported"},
        {"a\n\nb {{ x|frobnicate }}", "chat template line 3: no filter named 'frobnicate'"},
        {"{{ x is frob }}", "no test named 'frob'"},
        {"{% include 'other' %}", "tag 'include' is not supported"},
        {"\n{% extends 'base' %}", "line 2: tag 'extends' is not supported"},
        {"{% macro m() %}{{ caller() }}{% endmacro %}",
         "uses caller ({% call %} is not supported)"},
        {"{% macro m() %}x{% endmacro %}{% call m() %}y{% endcall %}",
         "tag 'call' is not supported"},
        {"{% if true %}{{ x|sort }}{% endif %}", "filter 'sort' is not supported"},
        {"{% macro m(n) %}{{ m(n) }}{% endmacro %}{{ m(1) }}", "recursion limit"},
        {"{% filter upper %}x{% endfilter %}", "tag 'filter' is not supported"},
        {"{% with a = 1 %}{% endwith %}", "tag 'with' is not supported"},
        {"{{ foo(1) }}", "'foo' is undefined"},
        {"{{ lipsum() }}", "function 'lipsum' is not supported"},
        {"{{ x.zfill(9) }}", "string method 'zfill' is not supported"},
        {"{{ x.format(1) }}", "string method 'format' is not supported"},
        {"{{ l.append(1) }}", "list method 'append' is not supported"},
        {"{{ d.update({}) }}", "dict method 'update' is not supported"},
        {"{{ x.__class__ }}", "access to attribute '__class__'"},
        {"{{ '%s' % 1 }}", "printf-style formatting"},
        {"{{ 'straße'|upper }}", "case mapping of U+00DF is not supported"},
        {"{{ 'ὅ'.title() }}", "is not supported"},
        {"{{ ['é'] }}", "non-ASCII text"},
        {"{{ range(3) }}", "printing a range object"},
        {"{{ l|select }}", "printing a generator object"},
        {"{{ d.items() }}", "printing a dict_items object"},
        {"{{ namespace(a=1) }}", "printing a Namespace object"},
        {"{{ loop }}{% for i in l %}{{ loop }}{% endfor %}", "printing a LoopContext object"},
        {"{{ x.upper }}", "printing a builtin_function_or_method object"},
        /* a class's attributes and a macro's fields exist in Python (x.upper.y is undefined) */
        {"{{ dict.fromkeys }}", "attribute 'fromkeys' of a type value is not supported"},
        {"{% macro m() %}{% endmacro %}{{ m.name }}",
         "attribute 'name' of a Macro value is not supported"},
        {"{{ x.upper.__self__ }}", "access to attribute '__self__'"},
        {"{% for i in l recursive %}{% endfor %}", "recursive loops are not supported"},
        {"{{ '10'|int(base=16) }}", "base argument of int"},
        {"{{ '\\N{EM DASH}' }}", "named unicode escapes"},
        {"{{ '\\ud800' }}", "lone surrogate"},
        {"{% set g = l|select %}{{ g|list }}{{ g|list }}", "generator a second time"},
        {"{{ l[1, 2] }}", "subscripts with a tuple"},
        {"{{ f(*l) }}", "*args or **kwargs"},
        {"{{ 'x'|map('wordcount')|list }}", "filter 'wordcount' is not supported"},
        {"{{ l|select('frob')|list }}", "no test named 'frob'"},
        {"{{ '1_000.5'|float }}", "is not supported"},
        /* syntax errors: the line */
        {"line1\n{% if %}\nline3", "chat template line 2: expected an expression"},
        {"a\n{% for x in l %}\nb",
         "chat template line 3: unexpected end of template, expected 'endfor'"},
        {"x\n\n{% frobnicate %}", "chat template line 3: unknown tag 'frobnicate'"},
        {"{% endif %}", "unknown tag 'endif'"},
        {"{{ 1 + }}", "chat template line 1: unexpected 'end of print statement'"},
        {"{% break %}", "'break' outside a loop"},
        {"{{ x }", "line 1"},
        {"{{ 'abc }}", "unterminated string"},
        {"{# open comment", "missing end of comment tag"},
        {"{% raw %}never closed", "missing end of raw directive"},
        {"{{ (1 }}", "unexpected '}'"},
        {"{{ 99999999999999999999 }}", "integer literal too large"},
        {"{{ 9223372036854775807 + 1 }}", "integer overflow"},
        {"{{ x is not }}", "expected 'name'"},
        {"{{ 1 is odd is even }}", "line 1"},
        {"{% set 1 = 2 %}", "can't assign"},
        {"{{ x ä }}", "non-ASCII character in a tag"},
    };
    for (size_t i = 0; i < T_LEN(r); i++)
        expect_error(r[i].tmpl, strlen(r[i].tmpl), NULL, r[i].want);
    expect_error("ok \xff\xfe", 5, NULL, "chat template line 1: the template is not valid UTF-8");
    expect_error("{{ 'a\0b' }}{{ }}", 14, NULL, "line 1"); /* NUL bytes are text like any other */
}

/* A string of n copies of s, then tail. */
static char *repeat(const char *head, const char *s, int n, const char *tail)
{
    size_t l = strlen(s), hl = strlen(head), tl = strlen(tail);
    char *p = malloc(hl + l * (size_t)n + tl + 1);
    assert_non_null(p);
    memcpy(p, head, hl);
    for (int i = 0; i < n; i++)
        memcpy(p + hl + (size_t)i * l, s, l);
    memcpy(p + hl + (size_t)n * l, tail, tl + 1);
    return p;
}

static void expect_limit(const char *src, const es_jinja_limits *lim, const char *want)
{
    expect_error(src, strlen(src), lim, want);
}

static void test_limits(void **state)
{
    (void)state;
    char *p, *q;
    /* nesting: parentheses, lists, unary chains, left-deep chains, filters, statements */
    p = repeat("{{ ", "(", 300, "1");
    q = repeat(p, ")", 300, " }}");
    expect_limit(q, NULL, "nested too deep");
    free(p), free(q);
    p = repeat("{{ ", "[", 300, "");
    q = repeat(p, "]", 300, " }}");
    expect_limit(q, NULL, "nested too deep");
    free(p), free(q);
    p = repeat("{{ ", "-", 1000, "1 }}");
    expect_limit(p, NULL, "nested too deep");
    free(p);
    p = repeat("{{ 1", " + 1", 5000, " }}");
    expect_limit(p, NULL, "nested too deep");
    free(p);
    p = repeat("{{ x", "|trim", 5000, " }}");
    expect_limit(p, NULL, "nested too deep");
    free(p);
    p = repeat("{{ x", ".y", 5000, " }}");
    expect_limit(p, NULL, "nested too deep");
    free(p);
    p = repeat("", "{% if true %}", 500, "x");
    expect_limit(p, NULL, "nested too deep");
    free(p);
    p = repeat("", "{% for i in l %}", 500, "x");
    expect_limit(p, NULL, "nested too deep");
    free(p);
    p = repeat("{{ ", "not ", 1000, "1 }}");
    expect_limit(p, NULL, "nested too deep");
    free(p);
    /* a thousand levels of ifs at the JA_MAX_DEPTH edge still work */
    p = repeat("", "{% if true %}", 100, "ok");
    q = repeat(p, "{% endif %}", 100, "");
    char *out;
    size_t n;
    assert_int_equal(render(q, strlen(q), NULL, NULL, &out, &n), ES_OK);
    assert_string_equal(out, "ok");
    free(out), free(p), free(q);

    es_jinja_limits lim = es_jinja_default_limits();
    lim.max_iterations = 10000;
    expect_limit("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                 &lim, "iteration limit");
    expect_limit("{% for i in range(100000) if false %}{% endfor %}", &lim, "iteration limit");
    lim = es_jinja_default_limits();
    lim.max_output_bytes = 1 << 20;
    expect_limit("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", &lim, "output limit");
    expect_limit("{{ 'x' * 2000000 }}", &lim, "output limit");
    expect_limit(
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
        "{% endfor %}",
        &lim, "output limit");
    /* (64 KiB here: ThreadSanitizer's memmem marks the whole haystack read at each call, which
     * makes replace's scan quadratic under TSan only) */
    lim.max_output_bytes = 64 << 10;
    expect_limit("{% set ns = namespace(s='xy') %}{% for i in range(64) %}"
                 "{% set ns.s = ns.s|replace('x', 'xx') %}{% endfor %}",
                 &lim, "output limit");
    lim = es_jinja_default_limits();
    lim.max_memory_bytes = 8 << 20;
    expect_limit(
        "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}"
        "{% endfor %}",
        &lim, "memory limit");
    lim = es_jinja_default_limits();
    lim.max_work = 100000;
    expect_limit("{% set s = 'x' * 100000 %}{% for i in range(1000) %}{{ 'y' in s }}{% endfor %}",
                 &lim, "work limit");
    /* the defaults stop a runaway template too (the iteration limit's path is the same code as
     * above with a larger number: a million iterations are kept out of the sanitizer builds) */
    expect_limit(
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
        "{% endfor %}",
        NULL, "output limit");
}

/* NUL bytes inside template text and values go through (the length says where the text ends). */
static void test_nul_and_lengths(void **state)
{
    (void)state;
    char *out;
    size_t n;
    static const char src[] = "a\0b{{ 'c' }}";
    assert_int_equal(render(src, sizeof(src) - 1, NULL, NULL, &out, &n), ES_OK);
    assert_int_equal(n, 4);
    assert_memory_equal(out, "a\0bc", 4);
    assert_int_equal(out[4], 0);
    free(out);
    assert_int_equal(render("", 0, NULL, NULL, &out, &n), ES_OK);
    assert_int_equal(n, 0);
    assert_string_equal(out, "");
    free(out);
    /* strftime_now with a fixed clock */
    es_jinja_limits lim = es_jinja_default_limits();
    lim.now = 86400 * 365; /* 1971-01-01 */
    setenv("TZ", "UTC", 1);
    tzset();
    const char *t = "{{ strftime_now('%Y-%m-%d %b') }}";
    assert_int_equal(render(t, strlen(t), NULL, &lim, &out, &n), ES_OK);
    assert_string_equal(out, "1971-01-01 Jan");
    free(out);
}

/* ---- es_chat_render
 * ------------------------------------------------------------------------------- */
static void test_chat_render_model(void **state)
{
    (void)state;
    es_model *m;
    const char *path = "tests/data/tiny-f32.gguf";
    assert_int_equal(es_model_open(path, ES_OPEN_VOCAB_ONLY, &m), ES_OK);
    size_t len = 99;
    assert_null(es_model_chat_template(m, &len));
    assert_int_equal(len, 0);
    es_chat_message msgs[] = {{"system", "Be brief."}, {"user", "Héllo 日本"}, {"assistant", NULL}};
    char buf[512];
    size_t n;
    assert_int_equal(es_chat_render(m, NULL, msgs, 2, 1, buf, sizeof(buf), &n), ES_E_UNSUPPORTED);
    assert_non_null(strstr(es_last_error(), "no chat template"));

    /* the model's special tokens as text, the variables HF passes */
    const char *tmpl =
        "[{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ tools }}|"
        "{{ documents }}|{% for m in messages %}{{ m.role }}={{ m.content }};{% endfor %}"
        "{{ messages|tojson }}]";
    size_t bl, el;
    const char *bos = es_token_piece(m, es_model_bos(m), &bl),
               *eos = es_token_piece(m, es_model_eos(m), &el);
    assert_non_null(bos);
    assert_non_null(eos);
    char want[512];
    snprintf(
        want, sizeof(want),
        "[%.*s|%.*s|True|None|None|system=Be brief.;user=Héllo 日本;assistant=None;"
        "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": "
        "\"Héllo 日本\"}, {\"role\": \"assistant\", \"content\": null}]]",
        (int)bl, bos, (int)el, eos);
    assert_int_equal(es_chat_render(m, tmpl, msgs, 3, 1, buf, sizeof(buf), &n), ES_OK);
    assert_string_equal(buf, want);
    assert_int_equal(n, strlen(want));

    /* a short buffer: the size needed, then exactly that much works */
    size_t need;
    assert_int_equal(es_chat_render(m, tmpl, msgs, 3, 1, buf, 10, &need), ES_E_SHORT_BUFFER);
    assert_int_equal(need, strlen(want));
    assert_string_equal(buf, "");
    assert_int_equal(es_chat_render(m, tmpl, msgs, 3, 1, NULL, 0, &need), ES_E_SHORT_BUFFER);
    assert_int_equal(need, strlen(want));
    assert_int_equal(es_chat_render(m, tmpl, msgs, 3, 1, buf, need, &n), ES_E_SHORT_BUFFER);
    char *exact = malloc(need + 1);
    assert_int_equal(es_chat_render(m, tmpl, msgs, 3, 1, exact, need + 1, &n), ES_OK);
    assert_string_equal(exact, want);
    free(exact);

    /* errors: the template's own, bad arguments, bad text */
    assert_int_equal(es_chat_render(m, "x\n{{ raise_exception('no system role') }}", msgs, 3, 0,
                                    buf, sizeof(buf), &n),
                     ES_E_FORMAT);
    assert_string_equal(es_last_error(), "chat template line 2: no system role");
    assert_int_equal(es_chat_render(m, "{{ x|wordcount }}", msgs, 1, 0, buf, sizeof(buf), &n),
                     ES_E_FORMAT);
    assert_string_equal(es_last_error(),
                        "chat template line 1: filter 'wordcount' is not supported");
    es_chat_message bad[] = {{"user", "\xc3\x28"}};
    assert_int_equal(es_chat_render(m, "x", bad, 1, 0, buf, sizeof(buf), &n), ES_E_INVAL);
    es_chat_message norole[] = {{NULL, "x"}};
    assert_int_equal(es_chat_render(m, "x", norole, 1, 0, buf, sizeof(buf), &n), ES_E_INVAL);
    assert_int_equal(es_chat_render(m, "x", NULL, 1, 0, buf, sizeof(buf), &n), ES_E_INVAL);
    assert_int_equal(es_chat_render(m, "x", msgs, -1, 0, buf, sizeof(buf), &n), ES_E_INVAL);
    assert_int_equal(es_chat_render(m, "x", msgs, 1, 0, NULL, 5, &n), ES_E_INVAL);
    assert_int_equal(es_chat_render(NULL, "x", msgs, 1, 0, buf, sizeof(buf), &n), ES_E_INVAL);
    assert_int_equal(es_chat_render(m, "{{ messages|length }}", NULL, 0, 0, buf, sizeof(buf), &n),
                     ES_OK);
    assert_string_equal(buf, "0");
    assert_string_equal(es_status_name(ES_E_SHORT_BUFFER), "buffer too small");
    es_model_close(m);
}

/* A vocabulary file with tokenizer.chat_template: es_chat_render(tmpl NULL) uses it. */
static void test_chat_render_model_template(void **state)
{
    (void)state;
    es_gguf *g;
    assert_int_equal(es_gguf_open("tests/data/tiny-f32.gguf", &g), ES_OK);
    es_gguf_writer *w;
    assert_int_equal(es_gguf_writer_create(&w), ES_OK);
    assert_int_equal(es_gguf_writer_copy_kv(w, g, "tokenizer."), ES_OK);
    size_t len;
    char *chatml = read_file(DATA "chatml.jinja", &len);
    assert_int_equal(es_gguf_writer_set_str(w, "tokenizer.chat_template", chatml), ES_OK);
    const char *path = t_tmp_path("chat-vocab.gguf");
    assert_int_equal(es_gguf_writer_write(w, path), ES_OK);
    es_gguf_writer_destroy(w);
    es_gguf_close(g);
    es_model *m;
    assert_int_equal(es_model_open(path, ES_OPEN_VOCAB_ONLY, &m), ES_OK);
    size_t n;
    const char *t = es_model_chat_template(m, &n);
    assert_non_null(t);
    assert_int_equal(n, len);
    assert_memory_equal(t, chatml, len);
    es_chat_message msgs[] = {{"system", "S"}, {"user", "U"}};
    char buf[256];
    assert_int_equal(es_chat_render(m, NULL, msgs, 2, 1, buf, sizeof(buf), &n), ES_OK);
    assert_string_equal(buf, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
                             "<|im_start|>assistant\n");
    es_model_close(m);
    unlink(path);
    free(chatml);
}

/* One compiled template rendered by several threads at once, each with its own variables. */
typedef struct thr_arg {
    const es_jinja_tmpl *t;
    int id, ok;
} thr_arg;

static void *thr_main(void *p)
{
    thr_arg *a = p;
    a->ok = 1;
    for (int r = 0; r < 200 && a->ok; r++) {
        es_jinja_vars *v;
        es_jinja_val *x;
        if (es_jinja_vars_create(&v) || es_jinja_new_int(v, a->id, &x) ||
            es_jinja_vars_set(v, "id", x)) {
            a->ok = 0;
            break;
        }
        char *out, want[64];
        size_t n;
        snprintf(want, sizeof(want), "%d:0,1,2,", a->id);
        a->ok = es_jinja_render(a->t, v, NULL, &out, &n) == ES_OK && !strcmp(out, want);
        free(out);
        es_jinja_vars_destroy(v);
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    const char *src = "{{ id }}:{% for i in range(3) %}{{ i }},{% endfor %}";
    es_jinja_tmpl *t;
    assert_int_equal(es_jinja_compile(src, strlen(src), "chat template", &t), ES_OK);
    pthread_t th[4];
    thr_arg a[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (thr_arg){t, i, 0};
        assert_int_equal(pthread_create(&th[i], NULL, thr_main, &a[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_true(a[i].ok);
    }
    es_jinja_tmpl_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_templates_match_jinja2),
        cmocka_unit_test(test_units_match_jinja2),
        cmocka_unit_test(test_strict_refusals),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_nul_and_lengths),
        cmocka_unit_test(test_chat_render_model),
        cmocka_unit_test(test_chat_render_model_template),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
