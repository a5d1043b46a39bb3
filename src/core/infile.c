/* Input files (infile.h): open with O_NONBLOCK, then fstat, then refuse anything but a regular
 * file. O_NONBLOCK makes open() of a FIFO return at once (a read-only open of a FIFO otherwise
 * waits for a writer) and keeps a terminal or modem device from waiting for carrier; O_NOCTTY
 * keeps a terminal from becoming the process's controlling terminal. A directory opens fine
 * read-only and is refused by the same check. */
#include "core/infile.h"
#include "core/util.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What a file of mode m is, for the message ("a FIFO"). */
static const char *kind(mode_t m)
{
    return S_ISFIFO(m)   ? "a FIFO"
           : S_ISDIR(m)  ? "a directory"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "not a regular file";
}

es_status es_infile_open(const char *path, int *fd, uint64_t *size)
{
    *fd = -1;
    const int f = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (f < 0) return es_fail(ES_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(f, &sb) != 0) {
        const int e = errno;
        close(f);
        return es_fail(ES_E_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(f);
        return es_fail(ES_E_IO, "%s: %s, not a regular file", path, kind(sb.st_mode));
    }
    /* regular files ignore O_NONBLOCK today; clear it so that no future reader sees EAGAIN */
    const int fl = fcntl(f, F_GETFL);
    if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        const int e = errno;
        close(f);
        return es_fail(ES_E_IO, "%s: fcntl: %s", path, strerror(e));
    }
    *fd = f;
    if (size) *size = (uint64_t)sb.st_size;
    return ES_OK;
}
