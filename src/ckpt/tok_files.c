/* ckpt/tok_files.c - copying, resolving and comparing the files a
 * tokenizer's text form names (tok_files.h). Plain POSIX file I/O; the
 * copies are fsynced, and their folder is made durable by its owner (a
 * checkpoint's iteration folder is renamed into place after this). */
#include "ckpt/tok_files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/dist_internal.h"

#define TOK_MAX_FILES 2

/* The kinds whose form names files, and the names their copies take. */
static const struct {
    const char *kind;
    int nfiles;
    const char *names[TOK_MAX_FILES];
} TOK_KINDS[] = {
    {"GPT2BPETokenizer", 2, {"vocab.json", "merges.txt"}},
    {"HuggingFaceTokenizer", 1, {"tokenizer.json", NULL}},
};

/* Splits a form naming files: its kind's index, the files in f[] (within
 * buf). -1 for a form naming no files. */
static int tok_split(const char *form, char *buf, size_t cap, char *f[TOK_MAX_FILES], int *n) {
    const char *colon = strchr(form, ':');
    if (!colon) return -1;
    int k = -1;
    for (int i = 0; i < (int)(sizeof TOK_KINDS / sizeof TOK_KINDS[0]); i++)
        if (strlen(TOK_KINDS[i].kind) == (size_t)(colon - form) &&
            !strncmp(form, TOK_KINDS[i].kind, (size_t)(colon - form)))
            k = i;
    if (k < 0 || strlen(colon + 1) >= cap) return -1;
    memcpy(buf, colon + 1, strlen(colon + 1) + 1);
    *n = 0;
    for (char *s = buf; s && *n < TOK_KINDS[k].nfiles;) {
        f[(*n)++] = s;
        s = strchr(s, '|');
        if (s) *s++ = 0;
    }
    return *n == TOK_KINDS[k].nfiles ? k : -1;
}

static mtc_result_t tok_join(char *out, size_t cap, int k, char *const f[], int n) {
    size_t w = (size_t)snprintf(out, cap, "%s:", TOK_KINDS[k].kind);
    for (int i = 0; i < n && w < cap; i++)
        w += (size_t)snprintf(out + w, cap - w, "%s%s", i ? "|" : "", f[i]);
    if (w >= cap)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "the tokenizer's file names are too long");
    return MTC_OK;
}

static mtc_result_t copy_file(const char *src, const char *dst) {
    char *data = NULL;
    size_t n = 0;
    mtc_result_t rc = ckpt_read_text(src, &data, &n);
    if (rc != MTC_OK)
        return mtc_error(MTC_ERR_IO,
                         "cannot copy the tokenizer's file %s into the checkpoint: %s (restore "
                         "it, or train again with its current path)",
                         src, mtc_error_detail());
    int fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    rc = fd < 0 ? mtc_error(MTC_ERR_IO, "cannot write %s: %s", dst, strerror(errno)) : MTC_OK;
    for (size_t at = 0; rc == MTC_OK && at < n;) {
        ssize_t w = write(fd, data + at, n - at);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            rc = mtc_error(MTC_ERR_IO, "writing %s failed: %s", dst, strerror(errno));
        else
            at += (size_t)w;
    }
    if (rc == MTC_OK && fsync(fd) != 0)
        rc = mtc_error(MTC_ERR_IO, "fsync %s: %s", dst, strerror(errno));
    if (fd >= 0) close(fd);
    free(data);
    return rc;
}

/* The folder part of path into out ("." when it has none). */
static void dir_of(const char *path, char *out, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(out, cap, ".");
    else if (slash == path)
        snprintf(out, cap, "/");
    else
        snprintf(out, cap, "%.*s", (int)(slash - path), path);
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

mtc_result_t mtc_ckpt_tok_embed(const char *form, const char *dir, char *out, size_t cap) {
    char buf[PATH_MAX * TOK_MAX_FILES + 8], *f[TOK_MAX_FILES], src[PATH_MAX + 32],
        dst[PATH_MAX + 32];
    int n = 0, k = tok_split(form, buf, sizeof buf, f, &n);
    if (k < 0) {
        if (strlen(form) >= cap)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT, "the tokenizer's text form is too long");
        memcpy(out, form, strlen(form) + 1);
        return MTC_OK;
    }
    for (int i = 0; i < n; i++) {
        snprintf(dst, sizeof dst, "%s/%s", dir, TOK_KINDS[k].names[i]);
        MTC_CHECK(copy_file(f[i], dst));
    }
    if (k == 1) { /* tokenizer_config.json beside tokenizer.json says the eos token */
        char folder[PATH_MAX];
        dir_of(f[0], folder, sizeof folder);
        snprintf(src, sizeof src, "%s/tokenizer_config.json", folder);
        snprintf(dst, sizeof dst, "%s/tokenizer_config.json", dir);
        if (is_file(src)) MTC_CHECK(copy_file(src, dst));
    }
    char *names[TOK_MAX_FILES];
    for (int i = 0; i < n; i++)
        names[i] = (char *)TOK_KINDS[k].names[i];
    return tok_join(out, cap, k, names, n);
}

mtc_result_t mtc_ckpt_tok_export_form(const char *form, char *out, size_t cap) {
    char buf[PATH_MAX * TOK_MAX_FILES + 8], *f[TOK_MAX_FILES];
    int n = 0, k = tok_split(form, buf, sizeof buf, f, &n);
    if (k < 0) {
        if (strlen(form) >= cap)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT, "the tokenizer's text form is too long");
        memcpy(out, form, strlen(form) + 1);
        return MTC_OK;
    }
    char *names[TOK_MAX_FILES];
    for (int i = 0; i < n; i++)
        names[i] = (char *)TOK_KINDS[k].names[i];
    return tok_join(out, cap, k, names, n);
}

mtc_result_t mtc_ckpt_tok_resolve(const char *form, const char *dir, char *out, size_t cap) {
    char buf[PATH_MAX * TOK_MAX_FILES + 8], *f[TOK_MAX_FILES];
    char abs[TOK_MAX_FILES][PATH_MAX + 32], base[PATH_MAX];
    int n = 0, k = tok_split(form, buf, sizeof buf, f, &n);
    if (k < 0) {
        if (strlen(form) >= cap)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT, "the tokenizer's text form is too long");
        memcpy(out, form, strlen(form) + 1);
        return MTC_OK;
    }
    if (!realpath(dir, base)) snprintf(base, sizeof base, "%s", dir);
    char *names[TOK_MAX_FILES];
    for (int i = 0; i < n; i++) {
        if (f[i][0] == '/')
            snprintf(abs[i], sizeof abs[i], "%s", f[i]);
        else
            snprintf(abs[i], sizeof abs[i], "%s/%s", base, f[i]);
        names[i] = abs[i];
    }
    return tok_join(out, cap, k, names, n);
}

/* 1 when both files can be read and hold the same bytes. */
static int same_bytes(const char *a, const char *b) {
    char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    int same = ckpt_read_text(a, &x, &nx) == MTC_OK && ckpt_read_text(b, &y, &ny) == MTC_OK &&
               nx == ny && !memcmp(x, y, nx);
    free(x), free(y);
    return same;
}

int mtc_ckpt_tok_same(const char *a, const char *b) {
    if (!strcmp(a, b)) return 1;
    char ba[PATH_MAX * TOK_MAX_FILES + 8], bb[PATH_MAX * TOK_MAX_FILES + 8];
    char *fa[TOK_MAX_FILES], *fb[TOK_MAX_FILES];
    int na = 0, nb = 0;
    int ka = tok_split(a, ba, sizeof ba, fa, &na), kb = tok_split(b, bb, sizeof bb, fb, &nb);
    if (ka < 0 || ka != kb || na != nb) return 0;
    for (int i = 0; i < na; i++)
        if (!same_bytes(fa[i], fb[i])) return 0;
    if (ka == 1) { /* and the eos token tokenizer_config.json names */
        char da[PATH_MAX], db[PATH_MAX], ca[PATH_MAX + 32], cb[PATH_MAX + 32];
        dir_of(fa[0], da, sizeof da), dir_of(fb[0], db, sizeof db);
        snprintf(ca, sizeof ca, "%s/tokenizer_config.json", da);
        snprintf(cb, sizeof cb, "%s/tokenizer_config.json", db);
        if (is_file(ca) != is_file(cb) || (is_file(ca) && !same_bytes(ca, cb))) return 0;
    }
    return 1;
}

mtc_result_t mtc_ckpt_tok_import(const char *dir, char *out, size_t cap) {
    char path[PATH_MAX + 32], a[PATH_MAX], b[PATH_MAX], *text = NULL, form[PATH_MAX * 2 + 40];
    form[0] = 0;
    /* a tokenizer file that is there but is no regular file (a FIFO, a
     * folder) is refused, not skipped (the import went on without it) */
    static const char *const names[] = {"mtc_tokenizer.txt", "tokenizer.json", "vocab.json",
                                        "merges.txt", "tokenizer_config.json"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
            return mtc_error(MTC_ERR_FORMAT, "%s is %s, not a regular file (copy the file in)",
                             path,
                             S_ISFIFO(st.st_mode)  ? "a FIFO"
                             : S_ISDIR(st.st_mode) ? "a folder"
                                                   : "a device or socket");
    }
    snprintf(path, sizeof path, "%s/mtc_tokenizer.txt", dir);
    if (is_file(path)) {
        MTC_CHECK(ckpt_read_text(path, &text, NULL));
        text[strcspn(text, "\n")] = 0;
        char buf[PATH_MAX * TOK_MAX_FILES + 8], *f[TOK_MAX_FILES];
        int n = 0;
        int names_files = tok_split(text, buf, sizeof buf, f, &n) >= 0;
        if (!names_files) {
            mtc_result_t rc =
                strlen(text) < cap
                    ? MTC_OK
                    : mtc_error(MTC_ERR_FORMAT, "%s: the tokenizer form is too long", path);
            if (rc == MTC_OK) memcpy(out, text, strlen(text) + 1);
            free(text);
            return rc;
        }
    }
    /* the folder's own files, as transformers reads them */
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (is_file(path) && realpath(path, a)) {
        snprintf(form, sizeof form, "HuggingFaceTokenizer:%s", a);
    } else {
        snprintf(path, sizeof path, "%s/vocab.json", dir);
        int va = is_file(path) && realpath(path, a);
        snprintf(path, sizeof path, "%s/merges.txt", dir);
        if (va && is_file(path) && realpath(path, b))
            snprintf(form, sizeof form, "GPT2BPETokenizer:%s|%s", a, b);
    }
    mtc_result_t rc = MTC_OK;
    if (form[0]) {
        if (strlen(form) >= cap)
            rc = mtc_error(MTC_ERR_FORMAT, "%s: the tokenizer's path is too long", dir);
        else
            memcpy(out, form, strlen(form) + 1);
    } else if (text) { /* an mtc form naming files the folder does not hold */
        rc = mtc_ckpt_tok_resolve(text, dir, out, cap);
    } else {
        snprintf(out, cap, "none");
    }
    free(text);
    return rc;
}
