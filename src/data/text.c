/* data/text.c - plain text sources: listing a folder and tokenizing files.
 *
 * A folder is read recursively with the entries of each directory sorted by
 * name (strcmp, so the order does not depend on the locale). Skipped: names
 * starting with '.', files ending in ".dat" (strfile indexes, as in Debian's
 * /usr/share/games/fortunes), and anything already seen through another
 * name (symlinks such as fortunes' "*.u8" are deduplicated by device and
 * inode). Files are concatenated as they are, with no separator.
 * Each file is tokenized as a whole (data/tokenizer.h: char by default, or
 * any of Megatron's tokenizers) into one segment of ids in the narrowest
 * type that holds the vocabulary (uint8 for byte and small char ones). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/stream.h"
#include "data/tokenizer.h"

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

/* The narrowest id type holding every id below vocab_size. */
static data_ids_type ids_type_for(int vocab_size) {
    return vocab_size <= 256 ? DATA_IDS_U8 : vocab_size <= 65536 ? DATA_IDS_U16 : DATA_IDS_I32;
}

/* ids -> a malloc'ed array of type t (narrowing in place). */
static void *narrow_ids(int *ids, size_t n, data_ids_type t) {
    if (t == DATA_IDS_U8) {
        unsigned char *u = (unsigned char *)ids;
        for (size_t k = 0; k < n; k++)
            u[k] = (unsigned char)ids[k];
    } else if (t == DATA_IDS_U16) {
        uint16_t *u = (uint16_t *)ids;
        for (size_t k = 0; k < n; k++)
            u[k] = (uint16_t)ids[k];
    }
    return ids;
}

mtc_result_t data_text_open(data_stream *st, data_tok **tok, char *const *paths, size_t n_paths) {
    unsigned char **bufs = calloc(n_paths ? n_paths : 1, sizeof *bufs);
    size_t *lens = calloc(n_paths ? n_paths : 1, sizeof *lens);
    char *all = NULL;
    data_tok_cache *cache = NULL;
    mtc_result_t rc = MTC_OK;
    if (!bufs || !lens) {
        rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory reading text");
        goto out;
    }
    size_t total = 0;
    for (size_t i = 0; i < n_paths; i++) {
        MTC_CHECK_GOTO(data_file_read(paths[i], &bufs[i], &lens[i]), rc, out);
        total += lens[i];
    }
    if (!*tok) { /* the char vocabulary of all files together */
        all = malloc(total ? total : 1);
        if (!all) {
            rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory reading text");
            goto out;
        }
        size_t at = 0;
        for (size_t i = 0; i < n_paths; i++)
            if (lens[i]) memcpy(all + at, bufs[i], lens[i]), at += lens[i];
        MTC_CHECK_GOTO(data_tok_init_char(all, total, tok), rc, out);
    }
    if (!(cache = data_tok_cache_init())) {
        rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory for the tokenizer's cache");
        goto out;
    }
    data_ids_type type = ids_type_for(data_tok_vocab_size(*tok));
    for (size_t i = 0; i < n_paths; i++) {
        if (lens[i] == 0) continue;
        data_tok_ids ids = {0};
        rc = data_tok_encode(*tok, cache, (const char *)bufs[i], lens[i], &ids, NULL);
        free(bufs[i]);
        bufs[i] = NULL;
        if (rc != MTC_OK) {
            char detail[256];
            snprintf(detail, sizeof detail, "%s", mtc_error_detail());
            data_tok_ids_free(&ids);
            rc = mtc_error(rc, "%s: %s", paths[i], detail);
            goto out;
        }
        if (ids.n == 0) {
            data_tok_ids_free(&ids);
            continue;
        }
        void *owned = narrow_ids(ids.ids, ids.n, type);
        rc = data_stream_add(st, paths[i], owned, type, ids.n, owned, 0, 0); /* owned now */
        if (rc != MTC_OK) goto out;
    }
out:
    if (bufs)
        for (size_t i = 0; i < n_paths; i++)
            free(bufs[i]);
    free(bufs);
    free(lens);
    free(all);
    data_tok_cache_free(cache);
    return rc;
}
