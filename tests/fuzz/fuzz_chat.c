/*
 * libFuzzer harness for the chat-template interpreter (src/jinja): arbitrary bytes as a
 * template, compiled and rendered with a fixed conversation (the variables es_chat_render
 * passes). Nothing may crash, leak or hang: every input ends in text or a clean ES_E_FORMAT.
 * Build and run:
 *   make fuzz && build-fuzz/fuzz_chat -max_total_time=60 -rss_limit_mb=2048 -timeout=10 \
 *       -dict=tests/fuzz/chat.dict NEW_DIR tests/fuzz/corpus-chat
 *
 * The limits are tighter than the defaults (16 MiB of memory, 1 MiB of output, 100,000
 * iterations, 20 million work units) so that a hostile input ends in milliseconds; the limit
 * paths are the same code either way. A failure must leave es_last_error() naming the template
 * line, and a success must give text of the length it says, NUL-terminated.
 */
#include "jinja/jinja.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static es_jinja_vars *g_vars;

static void die(const char *what)
{
    fprintf(stderr, "fuzz_chat: %s: %s\n", what, es_last_error());
    abort();
}

static es_jinja_val *str(const char *s)
{
    es_jinja_val *v;
    if (es_jinja_new_str(g_vars, s, strlen(s), &v) != ES_OK) die("string");
    return v;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    static const char *const msgs[][2] = {{"system", "You are helpful."},
                                          {"user", "Héllo 日本 😀 \"q\" \\ {{ x }}"},
                                          {"assistant", "<think>\nhm\n</think>\n\nHi!"},
                                          {"tool", "{\"a\": 1}"},
                                          {"user", ""}};
    es_jinja_val *list, *v;
    if (es_jinja_vars_create(&g_vars) != ES_OK || es_jinja_new_list(g_vars, &list) != ES_OK)
        die("vars");
    for (size_t i = 0; i < sizeof(msgs) / sizeof(msgs[0]); i++) {
        es_jinja_val *d;
        if (es_jinja_new_dict(g_vars, &d) != ES_OK ||
            es_jinja_dict_set(g_vars, d, "role", str(msgs[i][0])) != ES_OK ||
            es_jinja_dict_set(g_vars, d, "content", str(msgs[i][1])) != ES_OK ||
            es_jinja_list_append(g_vars, list, d) != ES_OK)
            die("message");
    }
    if (es_jinja_vars_set(g_vars, "messages", list) != ES_OK || es_jinja_new_none(g_vars, &v) ||
        es_jinja_vars_set(g_vars, "tools", v) || es_jinja_vars_set(g_vars, "documents", v) ||
        es_jinja_new_bool(g_vars, 1, &v) || es_jinja_vars_set(g_vars, "add_generation_prompt", v) ||
        es_jinja_vars_set(g_vars, "bos_token", str("<s>")) ||
        es_jinja_vars_set(g_vars, "eos_token", str("</s>")))
        die("variables");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    es_jinja_tmpl *t;
    es_status st = es_jinja_compile((const char *)data, size, "chat template", &t);
    if (st != ES_OK) {
        if (st != ES_E_FORMAT || strncmp(es_last_error(), "chat template line ", 19))
            die("compile");
        return 0;
    }
    es_jinja_limits lim = es_jinja_default_limits();
    lim.max_memory_bytes = 16 << 20;
    lim.max_output_bytes = 1 << 20;
    lim.max_iterations = 100000;
    lim.max_work = 20000000;
    lim.now = 1700000000;
    char *out;
    size_t n;
    st = es_jinja_render(t, g_vars, &lim, &out, &n);
    if (st == ES_OK) {
        if (!out || out[n] != 0 || n > lim.max_output_bytes) die("render result");
        free(out);
    } else if (st != ES_E_FORMAT || strncmp(es_last_error(), "chat template line ", 19)) {
        die("render");
    }
    es_jinja_tmpl_free(t);
    return 0;
}
