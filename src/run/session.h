/* Internal view of a session (session.c): what the prefill and perplexity code need. */
#ifndef ES_SESSION_H
#define ES_SESSION_H

#include "estream.h"
#include "io/io.h"
#include "model/model.h"

/* Input checks shared by every prefill entry point (session.c). */
es_status es_check_ids(const es_model *m, const int32_t *ids, size_t n);

/* The model a session runs (NULL for a NULL session). */
const es_model *es_session_model(const es_session *s);

/* es_session_create() with the expert loader's I/O parameters (fault injection, backend) as
 * the base that the session's own streaming parameters are applied over. io may be NULL. */
es_status es_session_create_io(const es_model *m, const es_session_params *p,
                               const es_io_params *io, es_session **out);

/* es_session_create_io() whose streamer (if any) records each request's timestamps
 * (record = 1), which es_session_stream_record() returns after a prefill (NULL when the
 * session does not stream or does not record). For the configurator's profiles. */
es_status es_session_create_rec(const es_model *m, const es_session_params *p,
                                const es_io_params *io, int record, es_session **out);
struct es_stream_record;
const struct es_stream_record *es_session_stream_record(const es_session *s);

#endif
