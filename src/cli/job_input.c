/* The input of a JSONL job (cli.h "JSONL jobs"): lines read with a bound, never the whole file
 * in memory.
 *
 * DESIGN
 * - One scan first: it counts the lines (--shard-range needs the count), hashes every byte
 *   (XXH3-64, OUT.meta's fingerprint: the same value as hashing the file at once) and refuses a
 *   line longer than the bound (--max-line-bytes) with its number, so an endless input
 *   (/dev/zero) stops at once with a clear error in bounded memory. An input that cannot be
 *   read twice (stdin, a pipe, a FIFO) is copied to an unlinked temporary file as it is
 *   scanned; a regular file is read again.
 * - Then each pass (sizing, running) rewinds and reads the lines in order. Line numbers are
 *   1-based and count blank lines; a CR before the newline is not part of the line.
 */
#include "cli/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define CHUNK ((size_t)1 << 16)

/* Fills the buffer from the stream; false at the end. */
static bool refill(cli_input *in)
{
    if (in->pos < in->len) return true;
    in->pos = 0;
    in->len = fread(in->chunk, 1, CHUNK, in->f);
    if (in->len == 0 && ferror(in->f))
        cli_die("cannot read %s: %s", in->name, strerror(errno));
    return in->len > 0;
}

bool cli_input_line(cli_input *in, const char **line, size_t *len)
{
    size_t n = 0;
    bool any = false;
    in->newline = false;
    for (;;) {
        if (!refill(in)) break;
        any = true;
        const char *s = in->chunk + in->pos;
        const size_t avail = in->len - in->pos;
        const char *nl = memchr(s, '\n', avail);
        const size_t take = nl ? (size_t)(nl - s) : avail;
        if (n + take > in->max_line)
            cli_die("%s:%lld: the line is longer than %zu bytes (--max-line-bytes): not a "
                    "record", in->name, (long long)in->line_no + 1, in->max_line);
        if (n + take + 1 > in->cap) {
            size_t cap = in->cap ? in->cap : CHUNK;
            while (cap < n + take + 1) cap *= 2;
            if (cap > in->max_line + 1) cap = in->max_line + 1;
            char *b = realloc(in->buf, cap);
            if (!b) cli_die("out of memory");
            in->buf = b;
            in->cap = cap;
        }
        memcpy(in->buf + n, s, take);
        n += take;
        in->pos += take + (nl ? 1 : 0);
        in->offset += take + (nl ? 1 : 0);
        if (nl) {
            in->newline = true;
            break;
        }
    }
    if (!any && n == 0) return false;
    if (n > 0 && in->buf[n - 1] == '\r') n--;
    in->buf[n] = 0;
    in->line_no++;
    *line = in->buf;
    *len = n;
    return true;
}

bool cli_input_open_plain(cli_input *in, const char *path, size_t max_line)
{
    memset(in, 0, sizeof(*in));
    in->name = path;
    in->max_line = max_line;
    if (!(in->f = fopen(path, "rb"))) return false;
    if (!(in->chunk = malloc(CHUNK))) cli_die("out of memory");
    return true;
}

void cli_input_open(cli_input *in, const char *path, size_t max_line)
{
    memset(in, 0, sizeof(*in));
    in->max_line = max_line;
    in->chunk = malloc(CHUNK);
    if (!in->chunk) cli_die("out of memory");
    struct stat sb;
    FILE *src;
    bool spool;
    if (!strcmp(path, "-")) {
        in->name = "stdin";
        src = stdin;
        spool = true;
    } else {
        in->name = path;
        /* a FIFO's open waits for its writer, as a reader of one expects (-f <(cmd) is a pipe
         * that has one already) */
        const int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) cli_die("cannot open %s: %s", path, strerror(errno));
        if (fstat(fd, &sb) != 0) cli_die("cannot read %s: %s", path, strerror(errno));
        if (S_ISDIR(sb.st_mode)) cli_die("%s is a directory, not a JSONL file", path);
        if (!(src = fdopen(fd, "rb"))) cli_die("cannot read %s: %s", path, strerror(errno));
        spool = !S_ISREG(sb.st_mode); /* a pipe, FIFO or device cannot be read twice */
    }
    FILE *copy = NULL;
    if (spool && !(copy = tmpfile()))
        cli_die("cannot make a temporary copy of %s: %s", in->name, strerror(errno));
    XXH3_state_t *h = XXH3_createState();
    if (!h || XXH3_64bits_reset(h) == XXH_ERROR) cli_die("out of memory");
    /* the scan: every byte hashed (and copied), lines counted and bounded */
    in->f = src;
    size_t line_len = 0;
    for (;;) {
        const size_t r = fread(in->chunk, 1, CHUNK, src);
        if (r == 0) {
            if (ferror(src)) cli_die("cannot read %s: %s", in->name, strerror(errno));
            break;
        }
        XXH3_64bits_update(h, in->chunk, r);
        if (copy && fwrite(in->chunk, 1, r, copy) != r)
            cli_die("cannot copy %s to a temporary file: %s", in->name, strerror(errno));
        in->bytes += r;
        for (size_t p = 0; p < r;) {
            const char *nl = memchr(in->chunk + p, '\n', r - p);
            const size_t take = nl ? (size_t)(nl - (in->chunk + p)) : r - p;
            line_len += take;
            if (line_len > max_line)
                cli_die("%s:%lld: the line is longer than %zu bytes (--max-line-bytes): not a "
                        "record", in->name, (long long)in->n_lines + 1, max_line);
            if (nl) {
                in->n_lines++;
                line_len = 0;
            }
            p += take + (nl ? 1 : 0);
        }
    }
    if (line_len > 0) in->n_lines++; /* a last line without a newline */
    in->hash = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    if (copy) {
        if (src != stdin) fclose(src);
        if (fflush(copy) != 0) cli_die("cannot copy %s: %s", in->name, strerror(errno));
        in->f = copy;
    }
    cli_input_rewind(in);
}

void cli_input_rewind(cli_input *in)
{
    if (fseeko(in->f, 0, SEEK_SET) != 0) cli_die("cannot read %s again: %s", in->name,
                                                 strerror(errno));
    clearerr(in->f);
    in->pos = in->len = 0;
    in->line_no = 0;
    in->offset = 0;
}

void cli_input_close(cli_input *in)
{
    if (in->f && in->f != stdin) fclose(in->f);
    free(in->chunk);
    free(in->buf);
    memset(in, 0, sizeof(*in));
}
