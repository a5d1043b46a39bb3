/* The "<model>.tune" file (tune.h): a line-oriented text file, written atomically, read
 * strictly (every line and every number checked; anything else is ES_E_FORMAT naming the line).
 *
 *   estream-tune 1
 *   model <bytes> <xxh3 of the first 4 MiB, hex>
 *   cpu <name to the end of the line>
 *   threads <n>
 *   kernels <isa>
 *   calib_tokens <n>
 *   q0 <depth>
 *   other_bytes <measured> <estimated>
 *   profile_seconds <s>
 *   profile <G> <n_sparse> <K> <bank_bytes> <seconds> <tail> <bw at depth 1 2 4 8>
 *   ne <n_sparse values>
 *   x <n_seq values>          (one line each, after every profile line)
 *   v <n_seq values>
 *   l <n_seq values>
 *   bytes <n_seq values>
 *   routes <n_seq values>
 *   choice <budget> <io_limit> <G> <B> <Q> <predicted>
 *   end
 */
#include "core/outbuf.h"
#include "core/util.h"
#include "quant/kern.h"
#include "tune/tune.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TUNE_MAX_FILE ((size_t)256 << 20)

static void put_doubles(es_outbuf *b, const char *key, const double *v, int64_t n)
{
    es_outbuf_puts(b, key);
    for (int64_t i = 0; i < n; i++) es_outbuf_printf(b, " %.9g", v[i]);
    es_outbuf_puts(b, "\n");
}

static void put_u64s(es_outbuf *b, const char *key, const uint64_t *v, int64_t n)
{
    es_outbuf_puts(b, key);
    for (int64_t i = 0; i < n; i++) es_outbuf_printf(b, " %llu", (unsigned long long)v[i]);
    es_outbuf_puts(b, "\n");
}

es_status es_tune_save(const es_tune *t, const char *path)
{
    es_outbuf *b = malloc(sizeof(*b));
    if (!b) return es_fail(ES_E_NOMEM, "out of memory");
    es_status st = es_outbuf_open(b, path);
    if (st) {
        free(b);
        return st;
    }
    es_outbuf_printf(b, "estream-tune 1\nmodel %llu %016llx\ncpu %s\nthreads %d\nkernels %s\n",
                     (unsigned long long)t->model_bytes, (unsigned long long)t->model_hash,
                     t->cpu, t->threads, t->kernels);
    es_outbuf_printf(b, "calib_tokens %d\nq0 %d\nother_bytes %llu %llu\nprofile_seconds %.6f\n",
                     t->calib_tokens, t->q0, (unsigned long long)t->other_bytes,
                     (unsigned long long)t->other_estimate, t->profile_seconds);
    for (int i = 0; i < t->n_profiles; i++) {
        const es_tune_profile *p = &t->prof[i];
        const int64_t n = (int64_t)p->n_sparse * p->K;
        es_outbuf_printf(b, "profile %d %d %d %llu %.9g %.9g", p->G, p->n_sparse, p->K,
                         (unsigned long long)p->bank_bytes, p->seconds, p->tail);
        for (int q = 0; q < ES_TUNE_N_DEPTHS; q++) es_outbuf_printf(b, " %.6g", p->bw[q]);
        es_outbuf_puts(b, "\n");
        put_doubles(b, "ne", p->ne, p->n_sparse);
        put_doubles(b, "x", p->x, n);
        put_doubles(b, "v", p->v, n);
        put_doubles(b, "l", p->l, n);
        put_u64s(b, "bytes", p->bytes, n);
        put_u64s(b, "routes", (const uint64_t *)p->routes, n);
    }
    for (int i = 0; i < t->n_choices; i++) {
        const es_tune_choice *c = &t->choices[i];
        es_outbuf_printf(b, "choice %llu %.6g %d %d %d %.9g\n", (unsigned long long)c->budget,
                         c->io_limit, c->groups, c->banks, c->qd, c->predicted);
    }
    es_outbuf_puts(b, "end\n");
    st = es_outbuf_commit(b);
    free(b);
    return st;
}

/* ---- reading ---- */

typedef struct reader {
    char *text, *cur;
    int line;
    const char *path;
    char *fields; /* the current line after its key */
} reader;

static es_status bad(const reader *r, const char *what)
{
    return es_fail(ES_E_FORMAT, "%s: line %d: %s (make it again with estream tune)", r->path,
                   r->line, what);
}

/* The next line, whose first word must be key; r->fields points after it. */
static es_status next(reader *r, const char *key)
{
    if (!*r->cur) return bad(r, "the file ends early");
    char *nl = strchr(r->cur, '\n');
    if (!nl) return bad(r, "the last line is not terminated");
    *nl = 0;
    r->line++;
    char *line = r->cur;
    r->cur = nl + 1;
    const size_t kl = strlen(key);
    if (strncmp(line, key, kl) != 0 || (line[kl] != ' ' && line[kl] != 0)) {
        char msg[96];
        snprintf(msg, sizeof(msg), "expected '%s'", key);
        return bad(r, msg);
    }
    r->fields = line + kl;
    return ES_OK;
}

static int get_double(char **s, double *v)
{
    if (**s != ' ') return 0;
    char *end;
    errno = 0;
    *v = strtod(*s + 1, &end);
    if (end == *s + 1 || errno || !isfinite(*v) || *v < 0) return 0;
    *s = end;
    return 1;
}

static int get_u64(char **s, uint64_t *v)
{
    if ((*s)[0] != ' ' || (*s)[1] < '0' || (*s)[1] > '9') return 0;
    char *end;
    errno = 0;
    const unsigned long long x = strtoull(*s + 1, &end, 10);
    if (errno) return 0;
    *v = (uint64_t)x;
    *s = end;
    return 1;
}

static int get_int(char **s, int *v, int lo, int hi)
{
    uint64_t x;
    if (!get_u64(s, &x) || x < (uint64_t)lo || x > (uint64_t)hi) return 0;
    *v = (int)x;
    return 1;
}

static es_status doubles_line(reader *r, const char *key, double *v, int64_t n)
{
    ES_TRY(next(r, key));
    char *s = r->fields;
    for (int64_t i = 0; i < n; i++)
        if (!get_double(&s, &v[i])) return bad(r, "a number is missing or out of range");
    if (*s) return bad(r, "extra text after the numbers");
    return ES_OK;
}

static es_status u64s_line(reader *r, const char *key, uint64_t *v, int64_t n)
{
    ES_TRY(next(r, key));
    char *s = r->fields;
    for (int64_t i = 0; i < n; i++)
        if (!get_u64(&s, &v[i])) return bad(r, "a number is missing or out of range");
    return *s ? bad(r, "extra text after the numbers") : ES_OK;
}

static es_status int_line(reader *r, const char *key, int *v, int lo, int hi)
{
    ES_TRY(next(r, key));
    char *s = r->fields;
    if (!get_int(&s, v, lo, hi) || *s) return bad(r, "bad value");
    return ES_OK;
}

static es_status read_profile(reader *r, es_tune_profile *p)
{
    char *s = r->fields;
    int G, W, K;
    uint64_t bank;
    double sec, tail, bw[ES_TUNE_N_DEPTHS];
    if (!get_int(&s, &G, 1, 1 << 16) || !get_int(&s, &W, 1, 1 << 16) ||
        !get_int(&s, &K, 1, 1 << 16) || !get_u64(&s, &bank) || !get_double(&s, &sec) ||
        !get_double(&s, &tail))
        return bad(r, "bad profile header");
    for (int q = 0; q < ES_TUNE_N_DEPTHS; q++)
        if (!get_double(&s, &bw[q])) return bad(r, "bad storage bandwidth");
    if (*s) return bad(r, "extra text after the profile header");
    ES_TRY(es_tune_profile_alloc(p, G, W, K));
    p->bank_bytes = bank;
    p->seconds = sec;
    p->tail = tail;
    memcpy(p->bw, bw, sizeof(bw));
    const int64_t n = (int64_t)W * K;
    ES_TRY(doubles_line(r, "ne", p->ne, W));
    ES_TRY(doubles_line(r, "x", p->x, n));
    ES_TRY(doubles_line(r, "v", p->v, n));
    ES_TRY(doubles_line(r, "l", p->l, n));
    ES_TRY(u64s_line(r, "bytes", p->bytes, n));
    ES_TRY(u64s_line(r, "routes", (uint64_t *)p->routes, n));
    for (int64_t j = 0; j < n; j++)
        if (p->routes[j] < 0 || p->bytes[j] > bank) return bad(r, "a group larger than its bank");
    return ES_OK;
}

static es_status parse(reader *r, es_tune *t)
{
    ES_TRY(next(r, "estream-tune"));
    if (strcmp(r->fields, " 1") != 0) return bad(r, "not version 1 of the tune format");
    ES_TRY(next(r, "model"));
    char *s = r->fields;
    if (!get_u64(&s, &t->model_bytes) || *s != ' ') return bad(r, "bad model line");
    char *end;
    errno = 0;
    t->model_hash = strtoull(s + 1, &end, 16);
    if (errno || end == s + 1 || *end) return bad(r, "bad model hash");
    ES_TRY(next(r, "cpu"));
    if (r->fields[0] != ' ' || strlen(r->fields + 1) >= sizeof(t->cpu)) return bad(r, "bad cpu");
    strcpy(t->cpu, r->fields + 1);
    ES_TRY(int_line(r, "threads", &t->threads, 1, ES_MAX_THREADS));
    ES_TRY(next(r, "kernels"));
    if (r->fields[0] != ' ' || strlen(r->fields + 1) >= sizeof(t->kernels))
        return bad(r, "bad kernels");
    strcpy(t->kernels, r->fields + 1);
    ES_TRY(int_line(r, "calib_tokens", &t->calib_tokens, 1, 1 << 24));
    ES_TRY(int_line(r, "q0", &t->q0, 1, 64));
    uint64_t other[2];
    ES_TRY(u64s_line(r, "other_bytes", other, 2));
    t->other_bytes = other[0];
    t->other_estimate = other[1];
    ES_TRY(doubles_line(r, "profile_seconds", &t->profile_seconds, 1));
    for (;;) {
        /* peek at the key: profile, choice or end */
        if (strncmp(r->cur, "profile ", 8) == 0) {
            if (t->n_profiles == ES_TUNE_MAX_G) return bad(r, "too many profiles");
            ES_TRY(next(r, "profile"));
            ES_TRY(read_profile(r, &t->prof[t->n_profiles++]));
        } else if (strncmp(r->cur, "choice ", 7) == 0) {
            if (t->n_choices == ES_TUNE_MAX_CHOICES) return bad(r, "too many choices");
            ES_TRY(next(r, "choice"));
            es_tune_choice *c = &t->choices[t->n_choices++];
            s = r->fields;
            if (!get_u64(&s, &c->budget) || !get_double(&s, &c->io_limit) ||
                !get_int(&s, &c->groups, 1, 1 << 16) || !get_int(&s, &c->banks, 1, 1 << 16) ||
                !get_int(&s, &c->qd, 1, 64) || !get_double(&s, &c->predicted) || *s)
                return bad(r, "bad choice");
        } else {
            ES_TRY(next(r, "end"));
            if (*r->fields || *r->cur) return bad(r, "text after 'end'");
            break;
        }
    }
    if (t->n_profiles == 0) return bad(r, "no profile");
    return ES_OK;
}

es_status es_tune_load(const es_model *m, const char *path, es_tune **out)
{
    *out = NULL;
    if (!m || !path) return es_fail(ES_E_INVAL, "es_tune_load: NULL argument");
    FILE *f = fopen(path, "rb");
    if (!f) return es_fail(ES_E_IO, "open %s: %s", path, strerror(errno));
    char *text = malloc(TUNE_MAX_FILE + 1);
    size_t n = text ? fread(text, 1, TUNE_MAX_FILE + 1, f) : 0;
    const int err = ferror(f);
    fclose(f);
    if (!text) return es_fail(ES_E_NOMEM, "out of memory");
    if (err || n > TUNE_MAX_FILE) {
        free(text);
        return es_fail(err ? ES_E_IO : ES_E_FORMAT, "%s: %s", path,
                       err ? "read error" : "larger than a tune file can be");
    }
    text[n] = 0;
    es_tune *t = calloc(1, sizeof(*t));
    if (!t) {
        free(text);
        return es_fail(ES_E_NOMEM, "out of memory");
    }
    reader r = {.text = text, .cur = text, .path = path};
    es_status st = memchr(text, 0, n) ? bad(&r, "a NUL byte") : parse(&r, t);
    free(text);
    uint64_t bytes = 0, hash = 0;
    if (st == ES_OK && (st = es_tune_model_id(es_gguf_path(m->gguf), &bytes, &hash)) == ES_OK &&
        (bytes != t->model_bytes || hash != t->model_hash))
        st = es_fail(ES_E_FORMAT, "%s was made for another model file (or %s changed since): "
                                  "run estream tune again",
                     path, es_gguf_path(m->gguf));
    int n_sparse = 0;
    for (int il = 0; il < m->hp.n_layer; il++) n_sparse += es_layer_is_moe(&m->layers[il]);
    for (int i = 0; st == ES_OK && i < t->n_profiles; i++) {
        const es_tune_profile *p = &t->prof[i];
        const int E = m->hp.n_expert;
        const int K = (E + p->G - 1) / p->G;
        if (p->G > E || p->K != K || p->n_sparse != n_sparse ||
            p->bank_bytes != es_stream_bank_bytes(m, p->G))
            st = es_fail(ES_E_FORMAT, "%s: the profile of %d experts per group does not fit "
                                      "this model: run estream tune again",
                         path, p->G);
    }
    if (st) {
        es_tune_destroy(t);
        return st;
    }
    *out = t;
    return ES_OK;
}

void es_tune_destroy(es_tune *t)
{
    if (!t) return;
    for (int i = 0; i < t->n_profiles; i++) es_tune_profile_free(&t->prof[i]);
    free(t);
}

es_status es_tune_applies(const es_tune *t, int n_threads, const char *isa)
{
    if (!t) return es_fail(ES_E_INVAL, "no tuning");
    char cpu[sizeof(t->cpu)];
    es_tune_cpu_name(cpu, sizeof(cpu));
    const char *want_isa = isa ? isa : es_kern_default()->isa;
    if (strcmp(cpu, t->cpu) != 0)
        return es_fail(ES_E_INVAL, "it was made on another CPU (%s)", t->cpu);
    if (n_threads != t->threads)
        return es_fail(ES_E_INVAL, "it was made for %d thread%s, this run uses %d", t->threads,
                       t->threads == 1 ? "" : "s", n_threads);
    if (strcmp(want_isa, t->kernels) != 0)
        return es_fail(ES_E_INVAL, "it was made with the %s kernels, this run uses %s",
                       t->kernels, want_isa);
    return ES_OK;
}
