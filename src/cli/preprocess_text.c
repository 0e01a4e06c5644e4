/* cli/preprocess_text.c - plain-text documents for mtc preprocess
 * (preprocess_text.h). POSIX directory reading; files opened one at a time
 * through mtc_infile_open (never blocking on a FIFO). */
#include "cli/preprocess_text.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/outfile.h"

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static mtc_result_t add_file(pre_text_reader *r, const char *path) {
    char **g = realloc(r->files, (size_t)(r->nfiles + 1) * sizeof *g);
    if (!g) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory listing the input");
    r->files = g;
    r->files[r->nfiles] = strdup(path);
    if (!r->files[r->nfiles]) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory");
    r->nfiles++;
    return MTC_OK;
}

mtc_result_t pre_text_open(pre_text_reader *r, const char *mode, const char *input) {
    memset(r, 0, sizeof *r);
    if (!strcmp(mode, "paragraphs"))
        r->paragraphs = 1;
    else if (strcmp(mode, "lines"))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "text-documents=%s is unknown (use lines: a document per line, or "
                         "paragraphs: a document per blank-line-separated paragraph)",
                         mode);
    struct stat st;
    if (stat(input, &st) != 0)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "--input %s: %s (give a text file or folder)",
                         input, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return add_file(r, input);
    DIR *d = opendir(input);
    if (!d)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "--input %s: cannot read the folder: %s", input,
                         strerror(errno));
    mtc_result_t rc = MTC_OK;
    for (struct dirent *e; rc == MTC_OK && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[MTC_PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", input, e->d_name);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) rc = add_file(r, path);
    }
    closedir(d);
    if (rc == MTC_OK && r->nfiles == 0)
        rc = mtc_error(MTC_ERR_INVALID_ARGUMENT, "--input %s: the folder holds no file", input);
    if (rc != MTC_OK) {
        pre_text_close(r);
        return rc;
    }
    qsort(r->files, (size_t)r->nfiles, sizeof *r->files, cmp_str);
    return MTC_OK;
}

static int blank(const char *s, size_t n) { return strspn(s, " \t\r\n") >= n; }

/* Appends s[0..n) to the document. */
static int doc_add(char **doc, size_t *cap, size_t *len, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1)
            c *= 2;
        char *g = realloc(*doc, c);
        if (!g) return -1;
        *doc = g, *cap = c;
    }
    memcpy(*doc + *len, s, n), *len += n, (*doc)[*len] = 0;
    return 0;
}

ssize_t pre_text_next(pre_text_reader *r, char **doc, size_t *cap) {
    size_t len = 0;
    int have = 0;
    for (;;) {
        if (!r->f) {
            if (have) break; /* a paragraph ends with its file */
            if (r->next >= r->nfiles) return -1;
            r->path = r->files[r->next++], r->line_no = 0;
            if (mtc_infile_open(r->path, &r->f) != MTC_OK) return -2;
        }
        ssize_t got = getline(&r->buf, &r->cap, r->f);
        if (got < 0) {
            int bad = ferror(r->f);
            fclose(r->f), r->f = NULL;
            if (bad) {
                mtc_error(MTC_ERR_IO, "%s: read failed", r->path);
                return -2;
            }
            continue;
        }
        r->line_no++;
        size_t n = (size_t)got;
        while (n && (r->buf[n - 1] == '\n' || r->buf[n - 1] == '\r'))
            n--;
        if (blank(r->buf, n)) {
            if (have) break; /* the blank line after a paragraph */
            continue;
        }
        if (!have) r->doc_line = r->line_no, have = 1;
        if ((len && doc_add(doc, cap, &len, "\n", 1)) || doc_add(doc, cap, &len, r->buf, n)) {
            mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory reading %s", r->path);
            return -2;
        }
        if (!r->paragraphs) break;
    }
    return (ssize_t)len;
}

void pre_text_close(pre_text_reader *r) {
    if (r->f) fclose(r->f);
    for (int i = 0; i < r->nfiles; i++)
        free(r->files[i]);
    free(r->files), free(r->buf);
    memset(r, 0, sizeof *r);
}
