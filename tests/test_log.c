/*
 * The log sink (es_log_set): a callback receives the library's warnings, with their level and
 * without the stderr prefix, and nothing reaches stderr while it is set.
 */
#include "t.h"

#include "estream.h"

#include <fcntl.h>

static char got[4][512];
static int n_got, got_level;

static void sink(void *user, int level, const char *line)
{
    assert_ptr_equal(user, &n_got);
    if (n_got < 4) snprintf(got[n_got], sizeof(got[0]), "%s", line);
    n_got++;
    got_level = level;
}

static void test_callback_gets_warnings(void **st)
{
    (void)st;
    /* stderr to a file, to check that nothing is written there */
    const char *err_path = t_tmp_path("stderr.txt");
    fflush(stderr);
    const int saved = dup(2), fd = open(err_path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    es_log_set(sink, &n_got);
    setenv("ESTREAM_ISA", "no-such-table", 1); /* the kernel table's first use warns */
    es_model *m = NULL;
    es_status r = es_model_open("tests/data/tiny-f32.gguf", 0, &m);
    es_session *s = NULL;
    if (r == ES_OK) r = es_session_create(m, NULL, &s);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    es_log_set(NULL, NULL);
    assert_int_equal(r, ES_OK);
    assert_int_equal(n_got, 1);
    assert_int_equal(got_level, ES_LOG_LEVEL_WARN);
    assert_non_null(strstr(got[0], "ESTREAM_ISA=no-such-table"));
    assert_null(strstr(got[0], "estream: "));
    struct stat sb;
    assert_int_equal(stat(err_path, &sb), 0);
    assert_int_equal(sb.st_size, 0);
    unlink(err_path);
    es_session_destroy(s);
    es_model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_callback_gets_warnings)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
