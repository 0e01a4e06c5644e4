/* data/text.c - plain text sources: listing a folder and tokenizing files.
 *
 * A folder is read recursively with the entries of each directory sorted by
 * name (strcmp, so the order does not depend on the locale). Skipped: names
 * starting with '.', files ending in ".dat" (strfile indexes, as in Debian's
 * /usr/share/games/fortunes), and anything already seen through another
 * name (symlinks such as fortunes' "*.u8" are deduplicated by device and
 * inode). Files are concatenated as they are, with no separator.
 * Each file becomes one uint8 segment of token ids (both tokenizers have
 * at most 256 ids), so memory is one byte per character. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/stream.h"

typedef struct {
    char **paths;
    size_t n, cap;
    struct {
        dev_t dev;
        ino_t ino;
    } * seen;
    size_t n_seen, cap_seen;
} walk_state;

static int seen_before(walk_state *w, const struct stat *sb) {
    for (size_t i = 0; i < w->n_seen; i++)
        if (w->seen[i].dev == sb->st_dev && w->seen[i].ino == sb->st_ino) return 1;
    if (w->n_seen == w->cap_seen) {
        size_t cap = w->cap_seen ? 2 * w->cap_seen : 64;
        void *p = realloc(w->seen, cap * sizeof *w->seen);
        if (!p) return -1;
        w->seen = p, w->cap_seen = cap;
    }
    w->seen[w->n_seen].dev = sb->st_dev;
    w->seen[w->n_seen].ino = sb->st_ino;
    w->n_seen++;
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static mtc_result_t walk(walk_state *w, const char *dir, int depth) {
    if (depth > 32) return mtc_error(MTC_ERR_INVALID_ARGUMENT, "%s: folders nested too deep", dir);
    DIR *d = opendir(dir);
    if (!d) return mtc_error(MTC_ERR_IO, "%s: cannot open folder", dir);
    char **names = NULL;
    size_t n = 0, cap = 0;
    mtc_result_t rc = MTC_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **p = realloc(names, cap * sizeof *p);
            if (!p) goto oom;
            names = p;
        }
        if (!(names[n] = strdup(e->d_name))) goto oom;
        n++;
    }
    closedir(d);
    d = NULL;
    if (n) qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n && rc == MTC_OK; i++) {
        size_t len = strlen(dir) + strlen(names[i]) + 2;
        char *path = malloc(len);
        if (!path) goto oom;
        snprintf(path, len, "%s/%s", dir, names[i]);
        struct stat sb;
        int keep = 0;
        if (stat(path, &sb) != 0) { /* dangling symlink: nothing to read */
        } else if (S_ISDIR(sb.st_mode)) {
            int s = seen_before(w, &sb);
            if (s < 0) {
                free(path);
                goto oom;
            }
            if (!s) rc = walk(w, path, depth + 1);
        } else if (S_ISREG(sb.st_mode) && !ends_with(names[i], ".dat")) {
            int s = seen_before(w, &sb);
            if (s < 0) {
                free(path);
                goto oom;
            }
            keep = !s;
        }
        if (keep) {
            if (w->n == w->cap) {
                size_t c = w->cap ? 2 * w->cap : 64;
                char **p = realloc(w->paths, c * sizeof *p);
                if (!p) {
                    free(path);
                    goto oom;
                }
                w->paths = p, w->cap = c;
            }
            w->paths[w->n++] = path;
        } else {
            free(path);
        }
    }
    data_paths_free(names, n);
    return rc;
oom:
    if (d) closedir(d);
    data_paths_free(names, n);
    return mtc_error(MTC_ERR_OUT_OF_MEMORY, "%s: out of memory listing the folder", dir);
}

mtc_result_t data_text_list_folder(const char *dir, char ***paths, size_t *n_paths) {
    walk_state w = {0};
    struct stat sb;
    *paths = NULL, *n_paths = 0;
    if (stat(dir, &sb) == 0 && seen_before(&w, &sb) < 0)
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "%s: out of memory", dir);
    mtc_result_t rc = walk(&w, dir, 0);
    free(w.seen);
    if (rc != MTC_OK) {
        data_paths_free(w.paths, w.n);
        return rc;
    }
    *paths = w.paths, *n_paths = w.n;
    return MTC_OK;
}

mtc_result_t data_text_open(data_stream *st, data_tokenizer *tok, data_tokenizer_kind kind,
                            char *const *paths, size_t n_paths) {
    unsigned char **bufs = calloc(n_paths ? n_paths : 1, sizeof *bufs);
    size_t *lens = calloc(n_paths ? n_paths : 1, sizeof *lens);
    mtc_result_t rc = MTC_OK;
    if (!bufs || !lens) {
        rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory reading text");
        goto out;
    }
    unsigned char present[256] = {0};
    for (size_t i = 0; i < n_paths; i++) {
        MTC_CHECK_GOTO(data_file_read(paths[i], &bufs[i], &lens[i]), rc, out);
        for (size_t k = 0; k < lens[i]; k++)
            present[bufs[i][k]] = 1;
    }
    if (kind == DATA_TOKENIZER_BYTE) {
        data_tokenizer_init_byte(tok);
    } else {
        unsigned char chars[256];
        size_t nc = 0;
        for (int c = 0; c < 256; c++)
            if (present[c]) chars[nc++] = (unsigned char)c;
        data_tokenizer_init_char(tok, chars, nc);
    }
    for (size_t i = 0; i < n_paths; i++) {
        if (lens[i] == 0) continue;
        for (size_t k = 0; k < lens[i]; k++)
            bufs[i][k] = (unsigned char)tok->id_of[bufs[i][k]];
        rc = data_stream_add(st, paths[i], bufs[i], DATA_IDS_U8, lens[i], bufs[i], lens[i], 0);
        bufs[i] = NULL; /* owned by the stream now */
        if (rc != MTC_OK) goto out;
    }
out:
    if (bufs)
        for (size_t i = 0; i < n_paths; i++)
            free(bufs[i]);
    free(bufs);
    free(lens);
    return rc;
}
