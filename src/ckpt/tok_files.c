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

#include <cjson/cJSON.h>

#include "ckpt/dist_internal.h"

#define TOK_MAX_FILES 2
#define TOK_MAX_FORM 16384

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

/* ---- "<Type>:{JSON}" forms (SentencePiece, TikTokenizer): one file, "model" ---------- */

static const struct {
    const char *kind, *name;
} JSON_KINDS[] = {
    {"SentencePieceTokenizer", "tokenizer.model"},
    {"GPTSentencePieceTokenizer", "tokenizer.model"},
    {"Llama2Tokenizer", "tokenizer.model"},
    {"TikTokenizer", "tiktoken.json"},
};

typedef struct {
    char kind[64];
    const char *name; /* the copy's file name */
    cJSON *j;         /* the options; "model" a string */
} json_form;

/* 1 when form is such a form (j to be freed), else 0. */
static int json_split(const char *form, json_form *f) {
    const char *colon = strchr(form, ':');
    memset(f, 0, sizeof *f);
    if (!colon || colon[1] != '{' || (size_t)(colon - form) >= sizeof f->kind) return 0;
    for (size_t i = 0; i < sizeof JSON_KINDS / sizeof JSON_KINDS[0]; i++)
        if (strlen(JSON_KINDS[i].kind) == (size_t)(colon - form) &&
            !strncmp(form, JSON_KINDS[i].kind, (size_t)(colon - form)))
            f->name = JSON_KINDS[i].name;
    if (!f->name) return 0;
    memcpy(f->kind, form, (size_t)(colon - form));
    f->j = cJSON_Parse(colon + 1);
    if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(f->j, "model"))) {
        cJSON_Delete(f->j);
        f->j = NULL;
        return 0;
    }
    return 1;
}

static const char *json_model(const json_form *f) {
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f->j, "model"));
}

/* out = the form with "model" set to model; frees f->j. */
static mtc_result_t json_join(json_form *f, const char *model, char *out, size_t cap) {
    cJSON_ReplaceItemInObjectCaseSensitive(f->j, "model", cJSON_CreateString(model));
    char *s = cJSON_PrintUnformatted(f->j);
    cJSON_Delete(f->j);
    f->j = NULL;
    if (!s) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory writing a tokenizer form");
    size_t w = (size_t)snprintf(out, cap, "%s:%s", f->kind, s);
    cJSON_free(s);
    if (w >= cap)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "the tokenizer's text form is too long");
    return MTC_OK;
}

/* The form's file made absolute against dir (a relative name). */
static void json_abs(const char *model, const char *dir, char *out, size_t cap) {
    char base[PATH_MAX];
    if (model[0] == '/') {
        snprintf(out, cap, "%s", model);
        return;
    }
    if (!realpath(dir, base)) snprintf(base, sizeof base, "%s", dir);
    snprintf(out, cap, "%s/%s", base, model);
}

mtc_result_t mtc_ckpt_tok_copy_model(const char *form, const char *dir) {
    json_form f;
    if (!json_split(form, &f)) return MTC_OK;
    char dst[PATH_MAX + 32];
    snprintf(dst, sizeof dst, "%s/%s", dir, f.name);
    mtc_result_t rc = copy_file(json_model(&f), dst);
    cJSON_Delete(f.j);
    return rc;
}

mtc_result_t mtc_ckpt_tok_embed(const char *form, const char *dir, char *out, size_t cap) {
    char buf[PATH_MAX * TOK_MAX_FILES + 8], *f[TOK_MAX_FILES], src[PATH_MAX + 32],
        dst[PATH_MAX + 32];
    int n = 0, k = tok_split(form, buf, sizeof buf, f, &n);
    json_form jf;
    if (k < 0 && json_split(form, &jf)) { /* the model file as tokenizer.model (tiktoken.json) */
        snprintf(dst, sizeof dst, "%s/%s", dir, jf.name);
        mtc_result_t rc = copy_file(json_model(&jf), dst);
        if (rc != MTC_OK) {
            cJSON_Delete(jf.j);
            return rc;
        }
        return json_join(&jf, jf.name, out, cap);
    }
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
    json_form jf;
    if (k < 0 && json_split(form, &jf)) return json_join(&jf, jf.name, out, cap);
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
    json_form jf;
    if (k < 0 && json_split(form, &jf)) {
        json_abs(json_model(&jf), dir, abs[0], sizeof abs[0]);
        return json_join(&jf, abs[0], out, cap);
    }
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
    json_form ja, jb;
    if (ka < 0 && kb < 0 && json_split(a, &ja)) { /* the same options, files of the same bytes */
        int same = 0;
        if (json_split(b, &jb)) {
            char ma[PATH_MAX], mb[PATH_MAX], fa_[TOK_MAX_FORM], fb_[TOK_MAX_FORM];
            snprintf(ma, sizeof ma, "%s", json_model(&ja));
            snprintf(mb, sizeof mb, "%s", json_model(&jb));
            same = !strcmp(ja.kind, jb.kind) && same_bytes(ma, mb) &&
                   json_join(&ja, "", fa_, sizeof fa_) == MTC_OK &&
                   json_join(&jb, "", fb_, sizeof fb_) == MTC_OK && !strcmp(fa_, fb_);
            cJSON_Delete(jb.j);
        }
        cJSON_Delete(ja.j);
        return same;
    }
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

/* The form of a folder's SentencePiece tokenizer.model (absolute path a):
 * mtc_tokenizer.txt's SentencePiece form (text) with its options when it has
 * one, else Llama2Tokenizer with the defaults. */
static mtc_result_t spm_import(const char *text, const char *a, char *out, size_t cap) {
    json_form jf;
    if (text && json_split(text, &jf)) {
        if (!strcmp(jf.name, "tokenizer.model")) return json_join(&jf, a, out, cap);
        cJSON_Delete(jf.j);
    }
    snprintf(jf.kind, sizeof jf.kind, "Llama2Tokenizer");
    jf.j = cJSON_CreateObject();
    cJSON_AddStringToObject(jf.j, "model", "");
    cJSON_AddBoolToObject(jf.j, "legacy", 0);
    cJSON_AddArrayToObject(jf.j, "special_tokens");
    return json_join(&jf, a, out, cap);
}

mtc_result_t mtc_ckpt_tok_import(const char *dir, char *out, size_t cap) {
    char path[PATH_MAX + 32], a[PATH_MAX], b[PATH_MAX], *text = NULL, form[PATH_MAX * 2 + 40];
    form[0] = 0;
    snprintf(path, sizeof path, "%s/mtc_tokenizer.txt", dir);
    json_form jf;
    if (is_file(path)) {
        MTC_CHECK(ckpt_read_text(path, &text, NULL));
        text[strcspn(text, "\n")] = 0;
        char buf[PATH_MAX * TOK_MAX_FILES + 8], *f[TOK_MAX_FILES];
        int n = 0, js = json_split(text, &jf);
        if (js) cJSON_Delete(jf.j);
        int names_files = js || tok_split(text, buf, sizeof buf, f, &n) >= 0;
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
    /* the folder's own files, as transformers reads them: a SentencePiece
     * tokenizer.model first (a Llama folder's tokenizer.json is its
     * conversion, which mtc's HuggingFaceTokenizer does not read) */
    mtc_result_t rc = MTC_OK;
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    if (is_file(path) && realpath(path, a)) {
        rc = spm_import(text, a, out, cap);
        free(text);
        return rc;
    }
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
