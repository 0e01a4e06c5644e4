/* core/outdir.c - see outdir.h. Linux (renameat2, nftw). */
#include "core/outdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)ftw;
    return flag == FTW_DP ? rmdir(p) : unlink(p);
}

int mtc_rm_tree(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(sb.st_mode)) return unlink(path);
    return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* dir (cap) = the parent of path, base = its last component. */
static void split_path(const char *path, char *dir, size_t cap, const char **base) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') /* "out/" names out */
        n--;
    const char *end = path + n, *slash = end;
    while (slash > path && slash[-1] != '/')
        slash--;
    *base = slash;
    if (slash == path)
        snprintf(dir, cap, ".");
    else if (slash - path == 1)
        snprintf(dir, cap, "/");
    else
        snprintf(dir, cap, "%.*s", (int)(slash - path - 1), path);
}

/* 1 when folder `path` is empty or an earlier export: regular files only,
 * one of them an export's; *odd names the first entry that is not. */
static int replaceable(const char *path, char *odd, size_t cap) {
    DIR *d = opendir(path);
    if (!d) {
        snprintf(odd, cap, "(cannot list it: %s)", strerror(errno));
        return 0;
    }
    int files = 0, known = 0, ok = 1;
    for (struct dirent *e; ok && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[MTC_PATH_MAX + 256];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        if (lstat(p, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            snprintf(odd, cap, "%s, which is not a regular file", e->d_name);
            ok = 0;
            break;
        }
        files++;
        known |= !strcmp(e->d_name, "config.json") || !strcmp(e->d_name, "mtc_tokenizer.txt") ||
                 !strncmp(e->d_name, "model", 5);
        if (!known && files == 1) snprintf(odd, cap, "%s", e->d_name);
    }
    closedir(d);
    if (ok && files && !known) ok = 0;
    return ok;
}

mtc_result_t mtc_outdir_check(const char *path, const char *what) {
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    if (!path || !path[0]) return mtc_error(E, "%s needs a folder name", what);
    if (strlen(path) >= MTC_PATH_MAX - 64)
        return mtc_error(E, "%s %.64s...: the path is too long", what, path);
    char dir[MTC_PATH_MAX];
    const char *base;
    split_path(path, dir, sizeof dir, &base);
    if (!strcmp(base, ".") || !strcmp(base, "..") || !strcmp(base, "/") || !base[0])
        return mtc_error(E, "%s %s: name the export folder itself (e.g. %s/hf)", what, path, path);
    struct stat sb;
    if (lstat(path, &sb) == 0 && !S_ISLNK(sb.st_mode)) {
        if (!S_ISDIR(sb.st_mode))
            return mtc_error(E,
                             "%s %s exists and is not a folder (pass a new folder name or remove "
                             "it)",
                             what, path);
        char odd[300] = "";
        if (!replaceable(path, odd, sizeof odd))
            return mtc_error(E,
                             "%s %s is a folder mtc will not replace: it holds %s, not only an "
                             "earlier export (pass a new or empty folder)",
                             what, path, odd);
    }
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return mtc_error(E, "%s %s: folder %s does not exist (create it first)", what, path, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return mtc_error(E, "%s %s: folder %s is not writable", what, path, dir);
    /* access() says yes to root on a read-only mount or in /proc: a folder made and removed
     * now is the proof, before any work */
    char probe[MTC_PATH_MAX + 80];
    int pn = snprintf(probe, sizeof probe, "%s/.%.40s.mtc-probe-XXXXXX", dir, base);
    if (pn < 0 || (size_t)pn >= sizeof probe || !mkdtemp(probe))
        return mtc_error(E, "%s %s: cannot create a folder in %s (%s)", what, path, dir,
                         strerror(errno));
    rmdir(probe);
    return MTC_OK;
}

mtc_result_t mtc_outdir_begin(mtc_outdir *o, const char *path, const char *what) {
    memset(o, 0, sizeof *o);
    o->what = what;
    MTC_CHECK(mtc_outdir_check(path, what));
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    snprintf(o->path, sizeof o->path, "%.*s", (int)n, path);
    char dir[MTC_PATH_MAX];
    const char *base;
    split_path(o->path, dir, sizeof dir, &base);
    snprintf(o->tmp, sizeof o->tmp, "%s/.%.40s.mtc-XXXXXX", dir, base);
    if (!mkdtemp(o->tmp)) {
        int e = errno;
        o->tmp[0] = 0;
        return mtc_error(MTC_ERR_IO, "%s %s: cannot create a folder in %s: %s", what, path, dir,
                         strerror(e));
    }
    chmod(o->tmp, 0755);
    return MTC_OK;
}

void mtc_outdir_abort(mtc_outdir *o) {
    if (o->tmp[0]) mtc_rm_tree(o->tmp);
    o->tmp[0] = 0;
}

static int fsync_path(const char *p, int flags) {
    int fd = open(p, O_RDONLY | O_CLOEXEC | flags);
    if (fd < 0) return -1;
    int r = fsync(fd);
    close(fd);
    return r;
}

static int sync_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)ftw;
    if (flag == FTW_F && S_ISREG(sb->st_mode)) return fsync_path(p, 0);
    if (flag == FTW_DP || flag == FTW_D) return fsync_path(p, O_DIRECTORY);
    return 0;
}

mtc_result_t mtc_outdir_commit(mtc_outdir *o) {
    char dir[MTC_PATH_MAX];
    const char *base;
    split_path(o->path, dir, sizeof dir, &base);
    if (nftw(o->tmp, sync_one, 16, FTW_DEPTH | FTW_PHYS) != 0) {
        int e = errno;
        mtc_outdir_abort(o);
        return mtc_error(MTC_ERR_IO, "writing %s %s failed: %s (nothing was replaced)", o->what,
                         o->path, strerror(e));
    }
    struct stat sb;
    if (lstat(o->path, &sb) == 0) {
        if (renameat2(AT_FDCWD, o->tmp, AT_FDCWD, o->path, RENAME_EXCHANGE) != 0) {
            int e = errno;
            mtc_outdir_abort(o);
            return mtc_error(MTC_ERR_IO, "cannot replace %s %s: %s (nothing was replaced)", o->what,
                             o->path, strerror(e));
        }
        fsync_path(dir, O_DIRECTORY);
        mtc_rm_tree(o->tmp); /* the old folder (or link), now under the temporary name */
    } else if (rename(o->tmp, o->path) != 0) {
        int e = errno;
        mtc_outdir_abort(o);
        return mtc_error(MTC_ERR_IO, "cannot rename into %s %s: %s", o->what, o->path, strerror(e));
    }
    o->tmp[0] = 0;
    fsync_path(dir, O_DIRECTORY);
    return MTC_OK;
}
