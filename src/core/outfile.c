/*
 * Output files: how estream writes every file it makes (GGUF models, logit dumps).
 *
 * DESIGN
 * - A regular output, new or existing, is written to a temporary file in the same directory,
 *   "<name>.tmp.XXXXXXXXXXXX" (12 random characters from getrandom). It is created with O_EXCL,
 *   so no existing file (a user's "<name>.tmp" included) is ever opened or clobbered, and with
 *   mode 0666 so that open() applies the umask as for any new file (no umask() call, which
 *   would race with other threads). It is fsync'ed, then renamed over the name only when
 *   complete; any failure unlinks it. Replacing breaks hard links, as mv does.
 * - A symbolic link to a regular file is resolved (realpath) and its target is replaced the same
 *   way, from a temporary file in the target's directory: the link stays a link and the file it
 *   names gets the content. A dangling link is refused: creating a file at a name the user never
 *   typed is a surprise, and cp refuses the same.
 * - A FIFO or character device (/dev/stdout, /dev/null, a terminal), directly or through links,
 *   is opened without O_CREAT or O_TRUNC and written in place: renaming would replace the node
 *   with a regular file. Writers must only append (the GGUF writer and the logit dump never
 *   seek). Opening a FIFO waits for a reader, as any write to a FIFO does. A failure midway
 *   leaves what was written with the reader; there is no file to remove.
 * - Directories are refused before anything is written; sockets and block devices too.
 * - Temporary files in progress are listed in a fixed table so that a signal handler can remove
 *   them: es_cleanup_temp_files() reads lock-free atomics and calls unlink(), both
 *   async-signal-safe. A slot is claimed (FREE -> CLAIMED by compare-and-swap, so writers on
 *   several threads never share one), its path copied, then published (LISTED, release) before
 *   the file is created; it is withdrawn after the rename or the unlink. So every temporary file
 *   that exists is listed; unlinking a name not yet created or already renamed fails harmlessly
 *   with ENOENT. Two windows remain, both documented in estream.h: if open() finds the random
 *   name taken (EEXIST, odds about 2^-71) a signal before the slot is withdrawn would remove that
 *   file; and a handler running on another thread while a slot is reused could read a torn path.
 */
#include "core/outfile.h"
#include "core/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h> /* rename */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TEMP_SLOTS 16          /* outputs in progress at once, over all threads */
#define TEMP_PATH_BYTES 4096   /* PATH_MAX on Linux, NUL included */
#define SUFFIX ".tmp."
#define RAND_CHARS 12

enum { SLOT_FREE, SLOT_CLAIMED, SLOT_LISTED };

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "signal handlers need lock-free atomics");
static atomic_int slot_state[TEMP_SLOTS];
static char slot_path[TEMP_SLOTS][TEMP_PATH_BYTES]; /* valid while the slot is LISTED */

/* Takes a free slot (CLAIMED, not yet visible to the handler); -1 if all are in use. */
static int slot_claim(void)
{
    for (int i = 0; i < TEMP_SLOTS; i++) {
        int want = SLOT_FREE;
        if (atomic_compare_exchange_strong(&slot_state[i], &want, SLOT_CLAIMED)) return i;
    }
    return -1;
}

/* Makes path (shorter than TEMP_PATH_BYTES) visible to es_cleanup_temp_files(). Release: a
 * handler that sees LISTED sees the whole path. */
static void slot_publish(int i, const char *path)
{
    atomic_store_explicit(&slot_state[i], SLOT_CLAIMED, memory_order_relaxed);
    memcpy(slot_path[i], path, strlen(path) + 1);
    atomic_store_explicit(&slot_state[i], SLOT_LISTED, memory_order_release);
}

static void slot_set(int i, int state)
{
    if (i >= 0) atomic_store_explicit(&slot_state[i], state, memory_order_release);
}

void es_cleanup_temp_files(void)
{
    const int saved = errno; /* a handler must not change errno under the code it interrupted */
    for (int i = 0; i < TEMP_SLOTS; i++)
        if (atomic_load_explicit(&slot_state[i], memory_order_acquire) == SLOT_LISTED)
            unlink(slot_path[i]);
    errno = saved;
}

/* RAND_CHARS characters from [A-Za-z0-9]. getrandom() normally; if it cannot answer (a very
 * early boot), a mix of the clock, the pid and a counter: O_EXCL still guarantees uniqueness. */
static void random_name(char *out)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    static atomic_uint counter;
    unsigned char r[RAND_CHARS];
    if (getrandom(r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t z = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
                     ((uint64_t)getpid() << 20) ^ atomic_fetch_add(&counter, 1);
        for (size_t i = 0; i < sizeof(r); i++) {
            z = (z ^ (z >> 31)) * 0x9e3779b97f4a7c15ull + i;
            r[i] = (unsigned char)(z >> 32);
        }
    }
    for (size_t i = 0; i < sizeof(r); i++) out[i] = abc[r[i] % (sizeof(abc) - 1)];
}

/* Creates the temporary file for f->final, listed in a slot. */
static es_status create_temp(es_outfile *f)
{
    const size_t len = strlen(f->final);
    if (len + strlen(SUFFIX) + RAND_CHARS + 1 > TEMP_PATH_BYTES)
        return es_fail(ES_E_IO, "cannot write %s: %s", f->path, strerror(ENAMETOOLONG));
    if (!(f->tmp = malloc(len + strlen(SUFFIX) + RAND_CHARS + 1)))
        return es_fail(ES_E_NOMEM, "cannot write %s: out of memory", f->path);
    memcpy(f->tmp, f->final, len);
    memcpy(f->tmp + len, SUFFIX, strlen(SUFFIX));
    char *rnd = f->tmp + len + strlen(SUFFIX);
    rnd[RAND_CHARS] = 0;
    if ((f->slot = slot_claim()) < 0)
        return es_fail(ES_E_UNSUPPORTED, "cannot write %s: %d outputs already in progress",
                       f->path, TEMP_SLOTS);
    for (int attempt = 0; attempt < 100; attempt++) {
        random_name(rnd);
        slot_publish(f->slot, f->tmp); /* listed before it exists: see DESIGN */
        f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0666);
        if (f->fd >= 0) return ES_OK;
        const int e = errno;
        slot_set(f->slot, SLOT_CLAIMED); /* not ours: never unlink it */
        if (e != EEXIST) return es_fail(ES_E_IO, "cannot write %s: %s", f->path, strerror(e));
    }
    return es_fail(ES_E_IO, "cannot write %s: no free temporary name", f->path);
}

/* Releases everything f holds; the temporary file must be gone or renamed already. */
static void release(es_outfile *f)
{
    slot_set(f->slot, SLOT_FREE);
    free(f->final);
    free(f->tmp);
    *f = (es_outfile){.fd = -1, .slot = -1, .path = f->path};
}

es_status es_outfile_open(const char *path, es_outfile *f)
{
    *f = (es_outfile){.fd = -1, .slot = -1, .path = path};
    if (!path || !*path) return es_fail(ES_E_INVAL, "output: empty path");
    struct stat ls, ts;
    bool exists = lstat(path, &ls) == 0;
    if (!exists && errno != ENOENT)
        return es_fail(ES_E_IO, "cannot write %s: %s", path, strerror(errno));
    const bool link = exists && S_ISLNK(ls.st_mode);
    ts = ls;
    if (link && stat(path, &ts) != 0) {
        if (errno == ENOENT)
            return es_fail(ES_E_IO, "cannot write %s: it is a symbolic link to a missing file",
                           path);
        return es_fail(ES_E_IO, "cannot write %s: %s", path, strerror(errno));
    }
    if (exists && S_ISDIR(ts.st_mode))
        return es_fail(ES_E_IO, "cannot write %s: it is a directory", path);
    if (exists && (S_ISFIFO(ts.st_mode) || S_ISCHR(ts.st_mode))) {
        f->fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
        if (f->fd < 0) return es_fail(ES_E_IO, "cannot write %s: %s", path, strerror(errno));
        f->direct = true;
        return ES_OK;
    }
    if (exists && !S_ISREG(ts.st_mode))
        return es_fail(ES_E_UNSUPPORTED, "cannot write %s: not a regular file, FIFO or character "
                       "device", path);
    if (link) {
        if (!(f->final = realpath(path, NULL))) {
            const int e = errno;
            return es_fail(e == ENOMEM ? ES_E_NOMEM : ES_E_IO, "cannot write %s: resolving the "
                           "symbolic link: %s", path, strerror(e));
        }
    } else if (!(f->final = strdup(path))) {
        return es_fail(ES_E_NOMEM, "cannot write %s: out of memory", path);
    }
    es_status st = create_temp(f);
    if (st != ES_OK) release(f); /* create_temp left no file behind */
    return st;
}

es_status es_outfile_write(es_outfile *f, const void *p, size_t n)
{
    const unsigned char *b = p;
    while (n) {
        ssize_t r = write(f->fd, b, n < ((size_t)1 << 30) ? n : ((size_t)1 << 30));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return es_fail(ES_E_IO, "%s: write failed: %s", f->path, strerror(r < 0 ? errno : EIO));
        b += r;
        n -= (size_t)r;
    }
    return ES_OK;
}

/* fsync of the directory holding name, so that the rename survives a crash. Best effort: some
 * file systems refuse fsync on a directory, and the file is complete either way. */
static void sync_dir(const char *name)
{
    const char *slash = strrchr(name, '/');
    char *dir = slash ? strndup(name, slash == name ? 1 : (size_t)(slash - name)) : strdup(".");
    if (!dir) return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

es_status es_outfile_commit(es_outfile *f)
{
    if (f->fd < 0) return es_fail(ES_E_INVAL, "output %s: not open", f->path ? f->path : "");
    es_status st = ES_OK;
    int e = 0;
    if (!f->direct && fsync(f->fd) != 0) e = errno;
    if (close(f->fd) != 0 && !e) e = errno;
    f->fd = -1;
    if (e) {
        st = es_fail(ES_E_IO, "%s: write failed: %s", f->path, strerror(e));
    } else if (!f->direct && rename(f->tmp, f->final) != 0) {
        e = errno;
        st = es_fail(ES_E_IO, "cannot write %s: renaming the temporary file: %s", f->path,
                     strerror(e));
    }
    if (st != ES_OK && f->tmp) unlink(f->tmp);
    if (st == ES_OK && !f->direct) sync_dir(f->final);
    release(f);
    return st;
}

void es_outfile_abort(es_outfile *f)
{
    if (f->fd < 0) return; /* never opened, or already committed or aborted: nothing held */
    close(f->fd);
    if (f->tmp) unlink(f->tmp); /* before the slot is freed: listed until gone */
    release(f);
}

es_status es_outfile_save(const char *path, const void *data, size_t bytes)
{
    es_outfile f;
    es_status st = es_outfile_open(path, &f);
    if (!st) st = es_outfile_write(&f, data, bytes);
    if (!st) st = es_outfile_commit(&f);
    es_outfile_abort(&f); /* a no-op after a commit, and after a failed open */
    return st;
}
