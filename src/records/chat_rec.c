/* Chats and reranking as JSON (records.h): the "messages" list of a record or a request (the
 * OpenAI chat shape), a chat record of estream score, and a query with documents.
 *
 * DESIGN
 * - A message is {"role": R, "content": C}: R one of OpenAI's roles (system, developer, user,
 *   assistant, tool); C a string, null, or a list of content parts of which only text parts
 *   ({"type": "text", "text": T}) are taken, joined with a newline as vLLM joins them; an image
 *   or audio part is refused (this is a text model). Other members (name, tool_call_id) are
 *   accepted and not passed to the template. Every error names the field: messages[2].role.
 * - Rendering (the chat template) and what the rendered text means are the library's
 *   (ES_RECORD_PROMPT / ES_RECORD_LABELS with messages, ES_RECORD_RERANK): this file only
 *   reads the JSON.
 */
#include "records/records.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};

void rec_chat_free(rec_chat *c)
{
    for (int i = 0; c->msgs && i < c->n; i++) free((void *)c->msgs[i].content);
    free(c->msgs);
    memset(c, 0, sizeof(*c));
}

/* The text of a content value (a string, null, or text parts), malloc'd; NULL with *err set
 * (the message, as static text) for a bad one. */
static char *content_text(const json_t *v, int i, char *err, size_t ecap, bool *null)
{
    *null = false;
    if (json_is_null(v) || !v) {
        *null = true;
        return NULL;
    }
    if (json_is_string(v)) {
        if (memchr(json_string_value(v), 0, json_string_length(v))) {
            snprintf(err, ecap, "messages[%d].content holds a NUL character", i);
            return NULL;
        }
        return strndup(json_string_value(v), json_string_length(v));
    }
    if (!json_is_array(v)) {
        snprintf(err, ecap, "messages[%d].content must be a string, null or a list of text parts",
                 i);
        return NULL;
    }
    size_t len = 0;
    for (size_t k = 0; k < json_array_size(v); k++) {
        const json_t *p = json_array_get(v, k), *type = json_object_get(p, "type");
        const json_t *text = json_object_get(p, "text");
        if (!json_is_object(p) || !json_is_string(type)) {
            snprintf(err, ecap, "messages[%d].content[%zu] is not a content part with a \"type\"",
                     i, k);
            return NULL;
        }
        if (strcmp(json_string_value(type), "text") || !json_is_string(text)) {
            snprintf(err, ecap, "messages[%d].content[%zu]: only text parts are supported (\"%s\")",
                     i, k, json_string_value(type));
            return NULL;
        }
        if (memchr(json_string_value(text), 0, json_string_length(text))) {
            snprintf(err, ecap, "messages[%d].content[%zu] holds a NUL character", i, k);
            return NULL;
        }
        len += json_string_length(text) + 1;
    }
    char *s = malloc(len + 1), *w = s;
    if (!s) return NULL;
    for (size_t k = 0; k < json_array_size(v); k++) {
        const json_t *text = json_object_get(json_array_get(v, k), "text");
        if (k) *w++ = '\n';
        memcpy(w, json_string_value(text), json_string_length(text));
        w += json_string_length(text);
    }
    *w = 0;
    return s;
}

bool rec_chat_parse(const json_t *messages, rec_chat *c, char *err, size_t ecap)
{
    memset(c, 0, sizeof(*c));
    err[0] = 0;
    if (!json_is_array(messages) || json_array_size(messages) == 0) {
        snprintf(err, ecap, "\"messages\" must be a non-empty list of {\"role\", \"content\"}");
        return false;
    }
    if (json_array_size(messages) > 100000) {
        snprintf(err, ecap, "\"messages\" has %zu messages, more than 100000",
                 json_array_size(messages));
        return false;
    }
    const int n = (int)json_array_size(messages);
    if (!(c->msgs = calloc((size_t)n, sizeof(es_chat_message)))) {
        snprintf(err, ecap, REC_OOM);
        return false;
    }
    for (int i = 0; i < n; i++) {
        const json_t *m = json_array_get(messages, (size_t)i), *role = json_object_get(m, "role");
        if (!json_is_object(m)) {
            snprintf(err, ecap, "messages[%d] is not an object", i);
            break;
        }
        if (!json_is_string(role)) {
            snprintf(err, ecap, "messages[%d].role must be a string", i);
            break;
        }
        const char *r = json_string_value(role);
        size_t k = 0;
        while (k < sizeof(roles) / sizeof(roles[0]) && strcmp(r, roles[k])) k++;
        if (k == sizeof(roles) / sizeof(roles[0]) || strlen(r) != json_string_length(role)) {
            snprintf(err, ecap, "messages[%d].role \"%.40s\" is not one of system, developer, "
                     "user, assistant, tool", i, r);
            break;
        }
        bool null;
        char *text = content_text(json_object_get(m, "content"), i, err, ecap, &null);
        if (!text && !null) {
            if (!err[0]) snprintf(err, ecap, REC_OOM);
            break;
        }
        c->msgs[i].role = roles[k];
        c->msgs[i].content = text;
        c->n = i + 1;
    }
    if (err[0]) {
        rec_chat_free(c);
        return false;
    }
    return true;
}
