/* The helpers cli.h declares, shared by the subcommands: errors, arguments, files and prompts,
 * the model and its tokens, JSON strings. */
#include "cli/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

void cli_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("estream: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

void cli_die_status(es_status st, const char *what)
{
    const char *msg = es_last_error();
    if (!msg || !*msg) msg = es_status_name(st);
    size_t n = strlen(what);
    if (strncmp(msg, what, n) == 0 && msg[n] == ':') cli_die("%s", msg); /* says "what:" already */
    cli_die("%s: %s", what, msg);
}

const char *cli_value(cli_args *a, const char *flag)
{
    if (a->i + 1 >= a->argc) cli_die("%s: option %s needs a value", a->cmd, flag);
    return a->argv[++a->i];
}

long long cli_int(const char *flag, const char *s, long long lo, long long hi)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        cli_die("%s: expected an integer in [%lld, %lld], got '%s'", flag, lo, hi, s);
    return v;
}

void cli_unknown(const cli_args *a, const char *arg)
{
    cli_die("%s: unknown option '%s' (see estream %s --help)", a->cmd, arg, a->cmd);
}

char *cli_read_file(const char *path, size_t max_bytes, size_t *len)
{
    /* O_NONBLOCK: a FIFO is refused at once instead of waiting for a writer in open() */
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) cli_die("cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) cli_die("%s is not a regular file", path);
    FILE *f = fdopen(fd, "rb");
    if (!f) cli_die("cannot open %s: %s", path, strerror(errno));
    if ((uint64_t)sb.st_size > max_bytes)
        cli_die("%s is too large (%lld bytes, limit %zu)", path, (long long)sb.st_size, max_bytes);
    char *buf = malloc((size_t)sb.st_size + 1);
    if (!buf) cli_die("out of memory reading %s", path);
    size_t n = fread(buf, 1, (size_t)sb.st_size, f);
    if (ferror(f)) cli_die("cannot read %s: %s", path, strerror(errno));
    fclose(f);
    buf[n] = 0;
    *len = n;
    return buf;
}

char *cli_read_text(const char *path, const char *flag)
{
    size_t len;
    char *t = cli_read_file(path, (size_t)1 << 20, &len);
    if (memchr(t, 0, len)) cli_die("%s %s: the file holds a NUL byte: not a template", flag, path);
    return t;
}

json_t *cli_text_hash(const char *s)
{
    if (!s) return json_null();
    char hex[17];
    snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)XXH3_64bits(s, strlen(s)));
    return json_string(hex);
}

int32_t *cli_read_ids(const char *path, size_t *n)
{
    size_t len;
    char *text = cli_read_file(path, (size_t)1 << 30, &len);
    size_t cap = 1024, k = 0;
    int32_t *ids = malloc(cap * sizeof(int32_t));
    if (!ids) cli_die("out of memory");
    char *p = text;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < INT32_MIN || v > INT32_MAX ||
            (*end && *end != ' ' && *end != '\t' && *end != '\n' && *end != '\r'))
            cli_die("%s: token %zu is not an integer id", path, k + 1);
        if (k == cap && !(ids = realloc(ids, (cap *= 2) * sizeof(int32_t))))
            cli_die("out of memory");
        ids[k++] = (int32_t)v;
        p = end;
    }
    free(text);
    *n = k;
    return ids;
}

char *cli_prompt(const char *text, const char *file, size_t *len)
{
    if (text && file) cli_die("give either -p TEXT or -f FILE, not both");
    if (file) return cli_read_file(file, (size_t)1 << 30, len);
    if (!text) cli_die("no prompt: give -p TEXT or -f FILE");
    *len = strlen(text);
    char *copy = strdup(text);
    if (!copy) cli_die("out of memory");
    return copy;
}

int32_t *cli_tokenize(const es_model *m, const char *text, size_t len, bool add_special,
                      bool parse_special, size_t *n)
{
    size_t cap = len + 16; /* every token covers at least one byte, plus BOS/EOS/space prefix */
    int32_t *ids = malloc(cap * sizeof(int32_t));
    if (!ids) cli_die("out of memory");
    es_status st = es_tokenize(m, text, len, add_special, parse_special, ids, cap, n);
    if (st == ES_E_SHORT_BUFFER) {
        cap = *n;
        if (!(ids = realloc(ids, cap * sizeof(int32_t)))) cli_die("out of memory");
        st = es_tokenize(m, text, len, add_special, parse_special, ids, cap, n);
    }
    if (st) cli_die_status(st, "tokenize");
    return ids;
}

es_model *cli_open_model(const char *path, unsigned flags)
{
    if (!path || !*path) cli_die("no model: give -m MODEL");
    es_model *m = NULL;
    es_status st = es_model_open(path, flags, &m);
    if (st) {
        const char *msg = es_last_error();
        cli_die("%s", msg && *msg ? msg : es_status_name(st));
    }
    return m;
}

int cli_default_threads(void)
{
    return es_session_default_params().n_threads; /* the library's rule, not a second copy */
}

void cli_json_str(FILE *f, const char *s, size_t len)
{
    fputc('"', f);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\u%04x", c);
        else if (c < 0x80) fputc(c, f);
        else {
            /* a whole valid UTF-8 sequence passes through; a stray byte (a token that is part of
             * a multi-byte character) becomes U+FFFD so the output stays valid JSON */
            size_t k = c >= 0xF0 && c < 0xF5 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
            bool ok = k && i + k <= len;
            for (size_t j = 1; ok && j < k; j++) ok = ((unsigned char)s[i + j] & 0xC0) == 0x80;
            if (ok) {
                fwrite(s + i, 1, k, f);
                i += k - 1;
            } else {
                fputs("\\ufffd", f);
            }
        }
    }
    fputc('"', f);
}
