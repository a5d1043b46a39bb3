/* The output of a JSONL job (cli.h "JSONL jobs"): its fingerprint, resuming after the last
 * complete record, and writing each batch's records whole.
 *
 * DESIGN
 * - A regular output file is fingerprinted by OUT.meta (written atomically before the first
 *   record): command, model (path, size, XXH3 of its first and last MiB), input (path, size,
 *   XXH3 of all of it) and the options that change records. Paths are recorded, not compared:
 *   files are the same when size and hash are, so a job resumed from another directory, or
 *   with the model moved, goes on.
 * - Resume: the old output is read line by line (never whole); a record is kept when its line
 *   ends in a newline and parses as an object with "line" above the last one kept; the first
 *   that is not, and everything after it, is truncated away. An output without a matching
 *   OUT.meta is refused, never extended.
 * - At rest the file holds only complete records: each batch's lines are written with one
 *   write loop and then fsync'ed; when the write fails (a full disk), the file is truncated
 *   back to the records before the batch and the job stops with the error. A FIFO or device is
 *   written in place (nothing to truncate: the error stops the job).
 */
#include "cli/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define META_FORMAT 1 /* the sidecar's format; a change refuses outputs of older versions */
/* An output line may be large (an embedding per token): the resume scan allows up to this. */
#define MAX_OUT_LINE ((size_t)1 << 32)

static uint64_t file_hash_ends(const char *path, uint64_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) cli_die("cannot open %s: %s", path, strerror(errno));
    *size = (uint64_t)sb.st_size;
    const size_t mib = 1 << 20;
    char *b = malloc(2 * mib);
    if (!b) cli_die("out of memory");
    ssize_t a = pread(fd, b, mib, 0), z = 0;
    if (a < 0) cli_die("cannot read %s: %s", path, strerror(errno));
    if (*size > 2 * mib && (z = pread(fd, b + a, mib, (off_t)(*size - mib))) < 0)
        cli_die("cannot read %s: %s", path, strerror(errno));
    const uint64_t h = XXH3_64bits(b, (size_t)(a + z));
    free(b);
    close(fd);
    return h;
}

static json_t *hex64(uint64_t v)
{
    char s[17];
    snprintf(s, sizeof(s), "%016llx", (unsigned long long)v);
    return json_string(s);
}

json_t *cli_job_fingerprint(const cli_job *j, const cli_input *in)
{
    uint64_t msize;
    const uint64_t mh = file_hash_ends(j->model_path, &msize);
    json_t *shard = j->shard_n ? json_pack("{s:s,s:i,s:i}", "mode",
                                           j->shard_range ? "range" : "modulo", "index",
                                           (json_int_t)j->shard_i, "count",
                                           (json_int_t)j->shard_n)
                               : json_null();
    json_t *f = json_pack("{s:i,s:s,s:{s:s,s:I,s:o},s:{s:s,s:I,s:o},s:O,s:o}", "format",
                          META_FORMAT, "command", j->cmd, "model", "path", j->model_path, "bytes",
                          (json_int_t)msize, "xxh3_ends", hex64(mh), "input", "path", j->in_path,
                          "bytes", (json_int_t)in->bytes, "xxh3", hex64(in->hash), "options",
                          j->options, "shard", shard);
    if (!f) cli_die("out of memory");
    return f;
}

static char *meta_path(const char *out)
{
    char *p;
    if (asprintf(&p, "%s.meta", out) < 0) cli_die("out of memory");
    return p;
}

void cli_job_write_meta(const char *out, const json_t *f)
{
    char *path = meta_path(out);
    char *text = json_dumps(f, JSON_COMPACT);
    if (!text) cli_die("out of memory");
    es_status st = es_outfile_save(path, text, strlen(text));
    if (st) cli_die_status(st, path);
    free(text);
    free(path);
}

/* Which member of the fingerprint differs, for the refusal. */
static const char *meta_diff(const json_t *want, const json_t *got)
{
    static const char *keys[] = {"format", "command", "options", "shard"};
    static const char *files[][2] = {{"model", "xxh3_ends"}, {"input", "xxh3"}};
    if (!json_is_object(got)) return "its OUT.meta is not a fingerprint";
    for (size_t k = 0; k < CLI_LEN(keys); k++)
        if (!json_equal(json_object_get(want, keys[k]), json_object_get(got, keys[k])))
            return keys[k];
    for (size_t k = 0; k < CLI_LEN(files); k++) {
        const json_t *w = json_object_get(want, files[k][0]), *g = json_object_get(got, files[k][0]);
        if (!json_equal(json_object_get(w, "bytes"), json_object_get(g, "bytes")) ||
            !json_equal(json_object_get(w, files[k][1]), json_object_get(g, files[k][1])))
            return files[k][0];
    }
    return NULL;
}

int64_t cli_job_resume(cli_job *j, const json_t *f)
{
    struct stat sb;
    if (stat(j->out_path, &sb) != 0) {
        if (errno != ENOENT) cli_die("%s: %s", j->out_path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) return -1; /* a FIFO or /dev/stdout: written in place, no resume */
    char *mp = meta_path(j->out_path);
    json_error_t err;
    json_t *got = json_load_file(mp, 0, &err);
    free(mp);
    if (sb.st_size == 0) {
        json_decref(got);
        return -1;
    }
    const char *diff = got ? meta_diff(f, got) : "it has no OUT.meta";
    if (diff)
        cli_die("%s: %s exists and was not made by this command (%s%s); remove it or choose "
                "another -o", j->cmd, j->out_path, got ? "different " : "", diff);
    json_decref(got);
    cli_input in;
    if (!cli_input_open_plain(&in, j->out_path, MAX_OUT_LINE))
        cli_die("cannot read %s: %s", j->out_path, strerror(errno));
    uint64_t keep = 0;
    int64_t last = 0;
    const char *s;
    size_t n;
    while (cli_input_line(&in, &s, &n) && in.newline) {
        json_t *r = json_loadb(s, n, 0, &err);
        json_t *line = r ? json_object_get(r, "line") : NULL;
        if (!json_is_integer(line) || json_integer_value(line) <= last) {
            json_decref(r);
            break;
        }
        last = json_integer_value(line);
        j->n_records++;
        if (json_object_get(r, "error")) j->n_errors++;
        if (j->ops->restat) j->ops->restat(j, r);
        json_decref(r);
        keep = in.offset;
    }
    cli_input_close(&in);
    if (keep < (uint64_t)sb.st_size) {
        if (truncate(j->out_path, (off_t)keep) != 0)
            cli_die("%s: cannot truncate its torn end: %s", j->out_path, strerror(errno));
        fprintf(stderr, "estream: %s: %llu bytes after the last complete record removed\n",
                j->out_path, (unsigned long long)((uint64_t)sb.st_size - keep));
    }
    return last;
}

/* ---- writing whole batches ---------------------------------------------------------------- */

void cli_output_begin(cli_output *o, int fd, const char *name, bool sync)
{
    memset(o, 0, sizeof(*o));
    o->fd = fd;
    o->name = name;
    struct stat sb;
    o->regular = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode);
    o->sync = sync && o->regular;
}

void cli_output_add(cli_output *o, const char *s, size_t n)
{
    if (o->len + n > o->cap) {
        size_t cap = o->cap ? o->cap : 1 << 16;
        while (cap < o->len + n) cap *= 2;
        char *b = realloc(o->buf, cap);
        if (!b) cli_die("out of memory");
        o->buf = b;
        o->cap = cap;
    }
    memcpy(o->buf + o->len, s, n);
    o->len += n;
}

void cli_output_commit(cli_output *o)
{
    /* where the batch starts: the end of the complete records (a shell's > or >> file too) */
    if (o->regular && (o->at_rest = lseek(o->fd, 0, SEEK_END)) < 0)
        cli_die("cannot write %s: %s", o->name, strerror(errno));
    for (size_t done = 0; done < o->len;) {
        const ssize_t w = write(o->fd, o->buf + done, o->len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            const int e = w < 0 ? errno : EIO;
            /* the file at rest holds only complete records: the batch goes, whole */
            if (o->regular && ftruncate(o->fd, o->at_rest) != 0)
                cli_die("cannot write %s: %s (and cannot truncate the partial batch: %s)",
                        o->name, strerror(e), strerror(errno));
            cli_die("cannot write %s: %s%s", o->name, strerror(e),
                    o->regular ? " (the records of the batch were removed; run the same command "
                                 "again to resume)"
                               : "");
        }
        done += (size_t)w;
    }
    if (o->sync && fsync(o->fd) != 0 && errno != EINVAL)
        cli_die("cannot write %s: %s", o->name, strerror(errno));
    o->len = 0;
}

void cli_output_end(cli_output *o)
{
    cli_output_commit(o);
    free(o->buf);
    o->buf = NULL;
    o->cap = 0;
}
