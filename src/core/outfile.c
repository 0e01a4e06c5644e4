/* core/outfile.c - see outfile.h. POSIX only (lstat, realpath, mkstemp,
 * fsync). */
#include "core/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind_of(mode_t m) {
    return S_ISDIR(m)    ? "a directory"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISSOCK(m) ? "a socket"
                         : "not a regular file";
}

mtc_result_t mtc_infile_open_fd(const char *path, int *out, unsigned long long *size) {
    *out = -1;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return mtc_error(MTC_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return mtc_error(MTC_ERR_IO, "cannot open %s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "%s is %s, not a regular file (pass a file)",
                         path, kind_of(st.st_mode));
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        return mtc_error(MTC_ERR_IO, "cannot open %s: %s", path, strerror(e));
    }
    *out = fd;
    if (size) *size = (unsigned long long)st.st_size;
    return MTC_OK;
}

mtc_result_t mtc_infile_inside(const char *path, const char *dir) {
    char rp[PATH_MAX], rd[PATH_MAX];
    if (!realpath(path, rp)) return MTC_OK; /* missing: the open names it */
    if (!realpath(dir, rd))
        return mtc_error(MTC_ERR_IO, "cannot resolve folder %s: %s", dir, strerror(errno));
    size_t n = strlen(rd);
    if (n == 1 && rd[0] == '/') return MTC_OK;
    if (strncmp(rp, rd, n) || rp[n] != '/')
        return mtc_error(MTC_ERR_FORMAT,
                         "%s resolves to %s, outside %s (a symlink out of the folder: copy the "
                         "file in)",
                         path, rp, rd);
    return MTC_OK;
}

mtc_result_t mtc_infile_open(const char *path, FILE **out) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return mtc_error(MTC_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return mtc_error(MTC_ERR_IO, "cannot open %s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "%s is %s, not a regular file (pass a file)",
                         path, kind_of(st.st_mode));
    }
    int fl = fcntl(fd, F_GETFL);
    FILE *f = fl >= 0 && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        int e = errno;
        close(fd);
        return mtc_error(MTC_ERR_IO, "cannot open %s: %s", path, strerror(e));
    }
    *out = f;
    return MTC_OK;
}

/* dir (cap) = the folder of path ("." when none). */
static void dir_of(const char *path, char *dir, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, cap, ".");
    else if (slash == path)
        snprintf(dir, cap, "/");
    else
        snprintf(dir, cap, "%.*s", (int)(slash - path), path);
}

mtc_result_t mtc_outfile_check(const char *path, const char *what, char *real, size_t cap) {
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    if (!path || !path[0]) return mtc_error(E, "%s needs a file name", what);
    if (strlen(path) >= MTC_PATH_MAX || strlen(path) >= cap)
        return mtc_error(E, "%s %.64s...: the path is too long", what, path);
    struct stat sb;
    snprintf(real, cap, "%s", path);
    /* a symlink at path is not followed: the commit's rename replaces the
     * link itself, so no write reaches a file the user did not name */
    if (lstat(path, &sb) == 0 && !S_ISLNK(sb.st_mode) && !S_ISREG(sb.st_mode))
        return mtc_error(E, "%s %s is %s, not a file mtc may replace (pass a file path)", what,
                         path, kind_of(sb.st_mode));
    char dir[MTC_PATH_MAX];
    dir_of(real, dir, sizeof dir);
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return mtc_error(E, "%s %s: folder %s does not exist (create it first)", what, path, dir);
    if (access(dir, W_OK) != 0)
        return mtc_error(E, "%s %s: folder %s is not writable", what, path, dir);
    return MTC_OK;
}

mtc_result_t mtc_outfile_open(mtc_outfile *o, const char *path, const char *what) {
    memset(o, 0, sizeof *o);
    o->what = what;
    MTC_CHECK(mtc_outfile_check(path, what, o->path, sizeof o->path));
    char dir[MTC_PATH_MAX];
    dir_of(o->path, dir, sizeof dir);
    snprintf(o->tmp, sizeof o->tmp, "%s/.mtc-XXXXXX", dir);
    int fd = mkstemp(o->tmp);
    if (fd < 0) {
        o->tmp[0] = 0;
        return mtc_error(MTC_ERR_IO, "%s %s: cannot create a file in %s: %s", what, path, dir,
                         strerror(errno));
    }
    fchmod(fd, 0644);
    o->f = fdopen(fd, "w");
    if (!o->f) {
        close(fd);
        mtc_outfile_abort(o);
        return mtc_error(MTC_ERR_IO, "%s %s: %s", what, path, strerror(errno));
    }
    return MTC_OK;
}

void mtc_outfile_abort(mtc_outfile *o) {
    if (o->f) fclose(o->f);
    o->f = NULL;
    if (o->tmp[0]) unlink(o->tmp);
    o->tmp[0] = 0;
}

mtc_result_t mtc_outfile_commit(mtc_outfile *o) {
    int ok = o->f && fflush(o->f) == 0 && !ferror(o->f) && fsync(fileno(o->f)) == 0;
    int e = errno;
    if (o->f && fclose(o->f) != 0) ok = 0, e = errno;
    o->f = NULL;
    if (!ok) {
        mtc_outfile_abort(o);
        return mtc_error(MTC_ERR_IO, "writing %s %s failed: %s (nothing was replaced)", o->what,
                         o->path, strerror(e));
    }
    if (rename(o->tmp, o->path) != 0) {
        e = errno;
        mtc_outfile_abort(o);
        return mtc_error(MTC_ERR_IO, "cannot rename into %s %s: %s", o->what, o->path, strerror(e));
    }
    o->tmp[0] = 0;
    char dir[MTC_PATH_MAX];
    dir_of(o->path, dir, sizeof dir);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) fsync(dfd), close(dfd);
    return MTC_OK;
}
