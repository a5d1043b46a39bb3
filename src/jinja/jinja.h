/*
 * A strict interpreter for the subset of Jinja that chat templates use, rendering byte for byte
 * what Python's jinja2 (3.1) renders in the environment Hugging Face's apply_chat_template sets
 * up: ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols
 * extension and the {% generation %} tag, default Undefined, tojson as json.dumps(ensure_ascii=
 * False), and the globals raise_exception and strftime_now. docs/chat.md lists the subset.
 *
 * DESIGN: compile once (lexer -> tokens -> parser -> tree), render many times. A template and
 * everything it owns live in one arena; so do the variables of a render (es_jinja_vars) and,
 * during a render, every value the template makes, so nothing is freed piecemeal and an error
 * anywhere just drops the arena. The interpreter knows no estream type: it takes text and plain
 * values (strings, numbers, lists, dicts) and gives text.
 *
 * Strictness: whatever this interpreter does not implement (a filter, a test, a tag, a string
 * method, printing a value whose Python form it cannot reproduce) fails with ES_E_FORMAT and a
 * message naming the construct and the template line ("chat template line 12: filter
 * 'wordcount' is not supported"); it never guesses. Hostile templates meet limits (nesting
 * depth, output bytes, memory, loop iterations, work) that end the render with ES_E_FORMAT.
 *
 * Thread-safety: a compiled template is read-only and may be rendered by several threads at
 * once, each with its own es_jinja_vars. The error message goes to es_last_error() of the
 * calling thread.
 */
#ifndef ES_JINJA_H
#define ES_JINJA_H

#include "core/util.h"

#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef struct es_jinja_tmpl es_jinja_tmpl; /* a compiled template */
typedef struct es_jinja_vars es_jinja_vars; /* the variables of a render and their values */
typedef struct es_jinja_val es_jinja_val;   /* one value, owned by its es_jinja_vars */

/* Compiles src[0..len) (UTF-8; NUL bytes allowed). name prefixes every error message of the
 * template ("chat template" gives "chat template line 3: ..."); it is copied. On success *out
 * owns everything; release it with es_jinja_tmpl_free(). Errors: ES_E_FORMAT (invalid UTF-8,
 * a syntax error, an unsupported construct, nesting past the depth limit), ES_E_NOMEM. */
es_status es_jinja_compile(const char *src, size_t len, const char *name, es_jinja_tmpl **out);
void es_jinja_tmpl_free(es_jinja_tmpl *t); /* NULL is a no-op */

/* ---- variables ----------------------------------------------------------------------------
 * Values are built bottom-up and owned by the es_jinja_vars they were made in; a value may be
 * put in several containers of the same vars. Strings must be valid UTF-8 (ES_E_INVAL if not;
 * the message says so). Every function returns ES_E_NOMEM when out of memory. */
es_status es_jinja_vars_create(es_jinja_vars **out);
void es_jinja_vars_destroy(es_jinja_vars *v); /* NULL is a no-op */
es_status es_jinja_new_str(es_jinja_vars *v, const char *s, size_t len, es_jinja_val **out);
es_status es_jinja_new_int(es_jinja_vars *v, int64_t i, es_jinja_val **out);
es_status es_jinja_new_float(es_jinja_vars *v, double f, es_jinja_val **out);
es_status es_jinja_new_bool(es_jinja_vars *v, int b, es_jinja_val **out);
es_status es_jinja_new_none(es_jinja_vars *v, es_jinja_val **out);
es_status es_jinja_new_list(es_jinja_vars *v, es_jinja_val **out);
es_status es_jinja_new_dict(es_jinja_vars *v, es_jinja_val **out);
/* Appends item to list (ES_E_INVAL if list is not a list). */
es_status es_jinja_list_append(es_jinja_vars *v, es_jinja_val *list, const es_jinja_val *item);
/* Sets dict[key] = item, keeping the order keys were first set in, as a Python dict does (it
 * shows in tojson and when the dict is printed). ES_E_INVAL if dict is not a dict or key is not
 * valid UTF-8. */
es_status es_jinja_dict_set(es_jinja_vars *v, es_jinja_val *dict, const char *key,
                            const es_jinja_val *item);
/* Binds name (an identifier) to val for the render; a later call with the same name wins. */
es_status es_jinja_vars_set(es_jinja_vars *v, const char *name, const es_jinja_val *val);

/* ---- rendering ---------------------------------------------------------------------------- */
typedef struct es_jinja_limits {
    size_t max_output_bytes; /* the rendered text, and any string the template builds */
    size_t max_memory_bytes; /* everything the render allocates (its arena) */
    int64_t max_iterations;  /* loop iterations of the whole render, filtered-out items too */
    int64_t max_work;        /* evaluation steps plus bytes scanned / 16, a time bound */
    time_t now;              /* strftime_now's clock (0: the current time) */
} es_jinja_limits;

/* The defaults: 32 MiB of output, 512 MiB of memory, 1,000,000 iterations, 100,000,000 work
 * units (a few seconds of CPU at worst: a unit is one node evaluated, 16 bytes scanned or one
 * character case-mapped, about 40 ns; Qwen3's template over a chat of 1,000 messages and 2 MB
 * takes 0.5 million and 13 ms). */
es_jinja_limits es_jinja_default_limits(void);

/* Renders t with the variables of vars (NULL: none) under lim (NULL: the defaults). On success
 * *out is malloc'd, NUL-terminated text the caller frees, *len its length without the NUL (the
 * text itself may hold NUL bytes if the template writes them). Errors: ES_E_FORMAT (the
 * template raised, used something unsupported, failed as jinja2 would fail, or hit a limit:
 * es_last_error() says which and where), ES_E_NOMEM. vars is only read. */
es_status es_jinja_render(const es_jinja_tmpl *t, const es_jinja_vars *vars,
                          const es_jinja_limits *lim, char **out, size_t *len);

#endif
