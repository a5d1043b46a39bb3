/*
 * Renders chat templates with estream's Jinja interpreter, for comparisons with Python's jinja2
 * (tests/data/chat/differential.py, run by tools/chat-check.sh).
 *
 * usage: chat_render MESSAGES.json FILE...
 * MESSAGES.json holds one message list ([{"role": ..., "content": ...}, ...]) and the flag
 * {"add_generation_prompt": true|false} as {"messages": [...], "add_generation_prompt": ...};
 * each FILE is a template. Prints one JSON line per file: {"file": FILE, "text": ...} or
 * {"file": FILE, "error": es_last_error()}. The render gets what es_chat_render passes
 * (messages, tools and documents None, add_generation_prompt, bos_token "<s>", eos_token
 * "</s>") under the fuzzer's limits (16 MiB of memory, 1 MiB of output, 100,000 iterations,
 * 20 million work units), so a hostile template ends quickly. Exit status 0, or 2 on bad usage.
 *
 * DESIGN: estream-independent in the sense the check needs: it links libestream.a for the
 * interpreter only (src/jinja), builds the variables itself, and writes JSON with jansson so
 * any bytes the template produces come back intact.
 */
#include "jinja/jinja.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static es_jinja_val *str(es_jinja_vars *v, const char *s, size_t n)
{
    es_jinja_val *r;
    if (es_jinja_new_str(v, s, n, &r) != ES_OK) {
        fprintf(stderr, "chat_render: %s\n", es_last_error());
        exit(2);
    }
    return r;
}

/* The variables of the render from the JSON conversation. */
static es_jinja_vars *conversation(const char *path)
{
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e), *m;
    if (!j) {
        fprintf(stderr, "chat_render: %s:%d: %s\n", path, e.line, e.text);
        exit(2);
    }
    es_jinja_vars *v;
    es_jinja_val *list, *x;
    size_t i;
    if (es_jinja_vars_create(&v) || es_jinja_new_list(v, &list)) exit(2);
    json_array_foreach(json_object_get(j, "messages"), i, m) {
        es_jinja_val *d;
        json_t *r = json_object_get(m, "role"), *c = json_object_get(m, "content");
        if (es_jinja_new_dict(v, &d) ||
            es_jinja_dict_set(v, d, "role", str(v, json_string_value(r), json_string_length(r))) ||
            es_jinja_dict_set(v, d, "content", str(v, json_string_value(c), json_string_length(c))) ||
            es_jinja_list_append(v, list, d))
            exit(2);
    }
    if (es_jinja_vars_set(v, "messages", list) || es_jinja_new_none(v, &x) ||
        es_jinja_vars_set(v, "tools", x) || es_jinja_vars_set(v, "documents", x) ||
        es_jinja_new_bool(v, json_is_true(json_object_get(j, "add_generation_prompt")), &x) ||
        es_jinja_vars_set(v, "add_generation_prompt", x) ||
        es_jinja_vars_set(v, "bos_token", str(v, "<s>", 3)) ||
        es_jinja_vars_set(v, "eos_token", str(v, "</s>", 4)))
        exit(2);
    json_decref(j);
    return v;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: chat_render MESSAGES.json FILE...\n");
        return 2;
    }
    es_jinja_vars *v = conversation(argv[1]);
    es_jinja_limits lim = es_jinja_default_limits();
    lim.max_memory_bytes = 16 << 20;
    lim.max_output_bytes = 1 << 20;
    lim.max_iterations = 100000;
    lim.max_work = 20000000;
    for (int a = 2; a < argc; a++) {
        FILE *f = fopen(argv[a], "rb");
        if (!f) {
            fprintf(stderr, "chat_render: cannot open %s\n", argv[a]);
            return 2;
        }
        size_t cap = 1 << 16, n = 0;
        char *src = malloc(cap);
        for (size_t k; src && (k = fread(src + n, 1, cap - n, f)) > 0;)
            if ((n += k) == cap) src = realloc(src, cap *= 2);
        fclose(f);
        if (!src) return 2;
        es_jinja_tmpl *t;
        char *out = NULL;
        size_t on = 0;
        es_status st = es_jinja_compile(src, n, "chat template", &t);
        if (st == ES_OK) {
            st = es_jinja_render(t, v, &lim, &out, &on);
            es_jinja_tmpl_free(t);
        }
        json_t *o = json_object();
        json_object_set_new(o, "file", json_string(argv[a]));
        if (st == ES_OK) json_object_set_new(o, "text", json_stringn(out, on));
        else {
            json_t *e = json_string(es_last_error()); /* NULL if truncation cut a character */
            json_object_set_new(o, "error", e ? e : json_string("(message not UTF-8)"));
        }
        char *line = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
        puts(line);
        free(line);
        json_decref(o);
        free(out);
        free(src);
    }
    es_jinja_vars_destroy(v);
    return 0;
}
