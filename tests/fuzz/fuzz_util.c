/* tests/fuzz/fuzz_util.c - the temporary folder and input splitting of
 * fuzz.h. Not thread-safe: libFuzzer and replay.c run one input at a time. */
#include "fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir_[256];

static void rm_tree(const char *path, int keep_top) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char sub[4096];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            struct stat st;
            if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
                rm_tree(sub, 0);
            else
                unlink(sub);
        }
        closedir(d);
    }
    if (!keep_top) rmdir(path);
}

static void remove_dir(void) {
    if (dir_[0]) rm_tree(dir_, 0);
}

const char *fuzz_dir(void) {
    if (!dir_[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir_, sizeof dir_, "%s/mtc-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir_)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(remove_dir);
    }
    return dir_;
}

void fuzz_clean(void) { rm_tree(fuzz_dir(), 1); }

void fuzz_write(const char *name, const void *data, size_t n, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", fuzz_dir(), name);
    for (char *s = path + strlen(fuzz_dir()) + 1; (s = strchr(s, '/')); s++) {
        *s = 0;
        if (mkdir(path, 0700) && errno != EEXIST) {
            perror(path);
            abort();
        }
        *s = '/';
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        perror(path);
        abort();
    }
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) {
            perror(path);
            abort();
        }
        p += w, n -= (size_t)w;
    }
    close(fd);
}

int fuzz_split(const uint8_t *data, size_t size, fuzz_part *parts, int nparts) {
    const size_t sl = strlen(FUZZ_SEP);
    int k = 0;
    for (int i = 0; i < nparts; i++)
        parts[i].p = data, parts[i].n = 0;
    size_t start = 0;
    while (k < nparts - 1) {
        const uint8_t *hit = NULL;
        if (size - start >= sl) hit = memmem(data + start, size - start, FUZZ_SEP, sl);
        if (!hit) break;
        parts[k].p = data + start;
        parts[k].n = (size_t)(hit - (data + start));
        k++;
        start = (size_t)(hit - data) + sl;
    }
    parts[k].p = data + start;
    parts[k].n = size - start;
    return k + 1;
}
