/* Internal view of a session (session.c): what the prefill and perplexity code need. */
#ifndef ES_SESSION_H
#define ES_SESSION_H

#include "estream.h"
#include "model/model.h"

/* Input checks shared by every prefill entry point (prefill.c). */
es_status es_check_ids(const es_model *m, const int32_t *ids, size_t n);

/* The model a session runs (NULL for a NULL session). */
const es_model *es_session_model(const es_session *s);

#endif
