/* ckpt/dist_read.c - finding, opening and reading directory checkpoints
 * into any layout; see dist.h.
 *
 *   targets (this rank's pieces, its own layout)  ──┐
 *   stored pieces of the same tensor (any layout) ──┴─ box ∩ box, then the
 *   two flat ranges clip each row: one memcpy per row of the intersection
 *
 * Every number of metadata.json is checked before it is used (bounds,
 * byte ranges against the file sizes), so a corrupted or hostile file is
 * refused with a message, never read out of bounds. Each stored piece that
 * overlaps a target is read once (pread) and checked against its CRC-32C.
 * Limitations: a stored piece is read whole even when a target needs part
 * of it (a TP shard twice as wide is read twice by the two new ranks). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/dist.h"
#include "ckpt/dist_internal.h"
#include "core/outfile.h"

typedef struct {
    int64_t off[2], shape[2], flat0, flat1;
    int file;
    uint64_t b0, b1;
    uint32_t crc;
} stored_piece;

typedef struct {
    const char *key; /* points into the parsed JSON */
    int ndim;
    int64_t gshape[2];
    stored_piece *p;
    int np;
    int used; /* a target of mtc_ckpt_dist_read named it */
} stored_tensor;

struct mtc_ckpt_dist {
    char dir[4096];       /* DIR/iter_N */
    char meta_path[4200]; /* DIR/iter_N/metadata.json */
    cJSON *root;
    stored_tensor *t;
    int nt;
    char (*files)[64];
    int *fds;
    uint64_t *fsize;
    int nfiles;
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
};

void mtc_ckpt_dist_set_progress(mtc_ckpt_dist *c,
                                void (*progress)(void *ctx, uint64_t done, uint64_t total),
                                void *ctx) {
    c->progress = progress, c->progress_ctx = ctx;
}

mtc_result_t mtc_ckpt_dist_find(const char *dir, int64_t step, int64_t *iteration, int *found) {
    *found = 0, *iteration = 0;
    struct stat st;
    if (stat(dir, &st) != 0) return MTC_OK;
    if (!S_ISDIR(st.st_mode))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "%s is not a checkpoint directory", dir);
    char path[4200];
    if (step >= 0) {
        mtc_ckpt_dist_dirname(path, sizeof path, dir, step, 0);
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "ckpt-step=%lld: %s does not exist (pick an iteration saved in %s)",
                             (long long)step, path, dir);
        *found = 1, *iteration = step;
        return MTC_OK;
    }
    snprintf(path, sizeof path, "%s/%s", dir, MTC_CKPT_TRACKER);
    if (stat(path, &st) != 0) return MTC_OK;
    char *text = NULL;
    MTC_CHECK(ckpt_read_text(path, &text, NULL));
    char *end;
    long long it = strtoll(text, &end, 10);
    while (*end == '\n' || *end == ' ' || *end == '\r')
        end++;
    int bad = end == text || *end || it < 0;
    free(text);
    if (bad)
        return mtc_error(MTC_ERR_FORMAT,
                         "%s does not hold an iteration number (a corrupted tracker: write the "
                         "iteration to load into it, or pass --ckpt-step N)",
                         path);
    *found = 1, *iteration = it;
    return MTC_OK;
}

/* An integer in [0, 2^53] or -1. */
static int64_t num(const cJSON *x) {
    if (!cJSON_IsNumber(x)) return -1;
    double d = x->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != (double)(int64_t)d) return -1;
    return (int64_t)d;
}

static int pair(const cJSON *x, int64_t out[2]) {
    if (!cJSON_IsArray(x) || cJSON_GetArraySize(x) != 2) return 0;
    out[0] = num(cJSON_GetArrayItem(x, 0)), out[1] = num(cJSON_GetArrayItem(x, 1));
    return out[0] >= 0 && out[1] >= 0;
}

static int tensor_cmp(const void *a, const void *b) {
    return strcmp(((const stored_tensor *)a)->key, ((const stored_tensor *)b)->key);
}

static mtc_result_t bad_meta(const mtc_ckpt_dist *c, const char *key, const char *what) {
    return mtc_error(MTC_ERR_FORMAT,
                     "%s: tensor %s has %s (a corrupted checkpoint: load an earlier iteration with "
                     "--ckpt-step)",
                     c->meta_path, key, what);
}

static int file_index(mtc_ckpt_dist *c, const char *name) {
    for (int i = 0; i < c->nfiles; i++)
        if (!strcmp(c->files[i], name)) return i;
    return -1;
}

/* Parse one tensor entry; opens its files as they appear. */
static mtc_result_t parse_tensor(mtc_ckpt_dist *c, const cJSON *e, stored_tensor *t) {
    t->key = e->string;
    if (!t->key || strlen(t->key) >= MTC_CKPT_KEY_MAX) return bad_meta(c, "?", "a bad key");
    const char *dt = cJSON_GetStringValue(cJSON_GetObjectItem(e, "dtype"));
    if (!dt || strcmp(dt, "float32")) return bad_meta(c, t->key, "a dtype other than float32");
    const cJSON *gs = cJSON_GetObjectItem(e, "global_shape");
    int nd = cJSON_IsArray(gs) ? cJSON_GetArraySize(gs) : 0;
    if (nd < 1 || nd > 2) return bad_meta(c, t->key, "a bad global_shape");
    t->ndim = nd;
    t->gshape[0] = num(cJSON_GetArrayItem(gs, 0));
    t->gshape[1] = nd == 2 ? num(cJSON_GetArrayItem(gs, 1)) : 1;
    if (t->gshape[0] < 1 || t->gshape[1] < 1 || t->gshape[0] > (1ll << 40) / t->gshape[1])
        return bad_meta(c, t->key, "a bad global_shape");
    const cJSON *ps = cJSON_GetObjectItem(e, "pieces");
    if (!cJSON_IsArray(ps)) return bad_meta(c, t->key, "no piece list");
    t->np = cJSON_GetArraySize(ps);
    t->p = calloc((size_t)(t->np ? t->np : 1), sizeof *t->p);
    if (!t->p) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "checkpoint pieces");
    int k = 0;
    const cJSON *pc;
    cJSON_ArrayForEach(pc, ps) {
        stored_piece *s = &t->p[k++];
        int64_t fr[2], br[2];
        if (!pair(cJSON_GetObjectItem(pc, "offset"), s->off) ||
            !pair(cJSON_GetObjectItem(pc, "shape"), s->shape) ||
            !pair(cJSON_GetObjectItem(pc, "flat_range"), fr) ||
            !pair(cJSON_GetObjectItem(pc, "byte_range"), br))
            return bad_meta(c, t->key, "a piece with a malformed field");
        s->flat0 = fr[0], s->flat1 = fr[1], s->b0 = (uint64_t)br[0], s->b1 = (uint64_t)br[1];
        if (s->shape[0] < 1 || s->shape[1] < 1 || s->off[0] + s->shape[0] > t->gshape[0] ||
            s->off[1] + s->shape[1] > t->gshape[1] || s->flat0 >= s->flat1 ||
            s->flat1 > s->shape[0] * s->shape[1] ||
            s->b1 - s->b0 != (uint64_t)(s->flat1 - s->flat0) * sizeof(float) || s->b1 < s->b0)
            return bad_meta(c, t->key, "a piece outside its tensor or with a wrong byte count");
        const char *crc = cJSON_GetStringValue(cJSON_GetObjectItem(pc, "crc32c"));
        char *end = NULL;
        unsigned long v = crc ? strtoul(crc, &end, 16) : 0;
        if (!crc || !*crc || *end || strlen(crc) != 8)
            return bad_meta(c, t->key, "a piece without a checksum");
        s->crc = (uint32_t)v;
        const char *file = cJSON_GetStringValue(cJSON_GetObjectItem(pc, "file"));
        if (!file || !*file || strchr(file, '/') || strlen(file) >= 64 || file[0] == '.')
            return bad_meta(c, t->key, "a piece in a bad file name");
        s->file = file_index(c, file);
        if (s->file < 0) {
            if (c->nfiles % 16 == 0) {
                int cap = c->nfiles + 16;
                void *a = realloc(c->files, (size_t)cap * sizeof *c->files);
                if (a) c->files = a;
                void *b = realloc(c->fds, (size_t)cap * sizeof *c->fds);
                if (b) c->fds = b;
                void *d = realloc(c->fsize, (size_t)cap * sizeof *c->fsize);
                if (d) c->fsize = d;
                if (!a || !b || !d) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "checkpoint files");
            }
            s->file = c->nfiles++;
            snprintf(c->files[s->file], 64, "%s", file);
            char path[4300];
            snprintf(path, sizeof path, "%s/%s", c->dir, file);
            unsigned long long sz = 0;
            c->fds[s->file] = -1;
            MTC_CHECK(mtc_infile_inside(path, c->dir)); /* no symlink out of the checkpoint */
            mtc_result_t orc = mtc_infile_open_fd(path, &c->fds[s->file], &sz);
            if (orc != MTC_OK) { /* a FIFO or device is refused, never waited on */
                char why[512];
                snprintf(why, sizeof why, "%s", mtc_error_detail());
                return mtc_error(MTC_ERR_FORMAT,
                                 "%s (tensor %s) cannot be opened: %s (the checkpoint is "
                                 "incomplete: load an earlier iteration with --ckpt-step)",
                                 path, t->key, why);
            }
            c->fsize[s->file] = sz;
        }
        if (s->b1 > c->fsize[s->file])
            return mtc_error(MTC_ERR_FORMAT,
                             "%s/%s is %llu bytes but tensor %s needs bytes up to %llu (a "
                             "truncated file: load an earlier iteration with --ckpt-step)",
                             c->dir, c->files[s->file], (unsigned long long)c->fsize[s->file],
                             t->key, (unsigned long long)s->b1);
    }
    return MTC_OK;
}

/* An integer in [0, 2^53] (what a double holds exactly), or absent when
 * `optional`. */
static int common_count_ok(const cJSON *j, const char *key, int optional) {
    const cJSON *v = cJSON_GetObjectItem(j, key);
    if (!v) return optional;
    double d = v->valuedouble;
    return cJSON_IsNumber(v) && d >= 0 && d <= 9007199254740992.0 && d == (double)(int64_t)d;
}

/* A decimal uint64 string ("1234"), or absent. */
static int seed_ok(const cJSON *j) {
    const cJSON *v = cJSON_GetObjectItem(j, "seed");
    if (!v) return 1;
    const char *s = cJSON_GetStringValue(v);
    if (!s || !s[0] || strlen(s) > 20) return 0;
    for (const char *q = s; *q; q++)
        if (*q < '0' || *q > '9') return 0;
    return strlen(s) < 20 || strcmp(s, "18446744073709551615") <= 0;
}

/* The fields of "common" every reader relies on, by type and range: a
 * wrong one is a damaged checkpoint, refused here rather than read as 0
 * (seed "abc" once ran with seed 0, iteration 4.5 as 4). */
static mtc_result_t check_common(const mtc_ckpt_dist *c, int64_t iteration) {
    const cJSON *j = cJSON_GetObjectItem(c->root, "common");
    const char *bad = NULL;
    const cJSON *it = cJSON_GetObjectItem(j, "iteration");
    if (!common_count_ok(j, "iteration", 0) ||
        (iteration >= 0 && it->valuedouble != (double)iteration))
        bad = "iteration (an integer equal to the folder's iteration)";
    else if (!common_count_ok(j, "consumed_samples", 1))
        bad = "consumed_samples (an integer >= 0)";
    else if (!common_count_ok(j, "optimizer_step", 1))
        bad = "optimizer_step (an integer >= 0)";
    else if (cJSON_GetObjectItem(j, "has_optimizer") &&
             !cJSON_IsBool(cJSON_GetObjectItem(j, "has_optimizer")))
        bad = "has_optimizer (true or false)";
    else if (cJSON_GetObjectItem(j, "tokenizer") &&
             !cJSON_IsString(cJSON_GetObjectItem(j, "tokenizer")))
        bad = "tokenizer (a string)";
    else if (!cJSON_IsObject(cJSON_GetObjectItem(j, "model")))
        bad = "model (the model configuration object)";
    else if (cJSON_GetObjectItem(j, "rng") && (!cJSON_IsObject(cJSON_GetObjectItem(j, "rng")) ||
                                               !seed_ok(cJSON_GetObjectItem(j, "rng"))))
        bad = "rng.seed (a decimal string of an unsigned 64-bit number)";
    else if (cJSON_GetObjectItem(j, "args") && (!cJSON_IsObject(cJSON_GetObjectItem(j, "args")) ||
                                                !seed_ok(cJSON_GetObjectItem(j, "args"))))
        bad = "args.seed (a decimal string of an unsigned 64-bit number)";
    if (!bad) return MTC_OK;
    return mtc_error(MTC_ERR_FORMAT,
                     "%s: common.%s is missing or invalid (a corrupted checkpoint: load an "
                     "earlier iteration with --ckpt-step)",
                     c->meta_path, bad);
}

mtc_result_t mtc_ckpt_dist_open(const char *dir, int64_t iteration, mtc_ckpt_dist **out) {
    *out = NULL;
    mtc_ckpt_dist *c = calloc(1, sizeof *c);
    if (!c) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "checkpoint");
    mtc_ckpt_dist_dirname(c->dir, sizeof c->dir, dir, iteration, 0);
    snprintf(c->meta_path, sizeof c->meta_path, "%s/metadata.json", c->dir);
    char crc_path[4300];
    snprintf(crc_path, sizeof crc_path, "%s.crc32c", c->meta_path);
    char *text = NULL, *crc = NULL;
    size_t n = 0;
    mtc_result_t rc = ckpt_read_text(c->meta_path, &text, &n);
    if (rc != MTC_OK)
        rc = mtc_error(MTC_ERR_FORMAT,
                       "%s cannot be read (not a complete checkpoint: load another iteration "
                       "with --ckpt-step)",
                       c->meta_path);
    if (rc == MTC_OK && ckpt_read_text(crc_path, &crc, NULL) != MTC_OK)
        rc = mtc_error(MTC_ERR_FORMAT, "%s cannot be read (an incomplete checkpoint)", crc_path);
    if (rc == MTC_OK) {
        char *end;
        unsigned long want = strtoul(crc, &end, 16);
        if (end == crc || (*end && *end != '\n') || (uint32_t)want != mtc_crc32c(0, text, n))
            rc = mtc_error(MTC_ERR_FORMAT,
                           "%s does not match its checksum in %s (a corrupted checkpoint: load "
                           "an earlier iteration with --ckpt-step)",
                           c->meta_path, crc_path);
    }
    if (rc == MTC_OK) {
        c->root = cJSON_ParseWithLength(text, n);
        const char *fmt = cJSON_GetStringValue(cJSON_GetObjectItem(c->root, "format"));
        if (!fmt || strcmp(fmt, "mtc-dist-1") ||
            !cJSON_IsObject(cJSON_GetObjectItem(c->root, "common")) ||
            !cJSON_IsObject(cJSON_GetObjectItem(c->root, "tensors")))
            rc = mtc_error(MTC_ERR_FORMAT, "%s is not an mtc checkpoint index (format mtc-dist-1)",
                           c->meta_path);
        if (rc == MTC_OK) rc = check_common(c, iteration);
    }
    free(text), free(crc);
    if (rc == MTC_OK) {
        const cJSON *ts = cJSON_GetObjectItem(c->root, "tensors");
        c->nt = cJSON_GetArraySize(ts);
        c->t = calloc((size_t)(c->nt ? c->nt : 1), sizeof *c->t);
        if (!c->t) rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "checkpoint tensors");
        int k = 0;
        const cJSON *e, *list = rc == MTC_OK ? ts : NULL;
        cJSON_ArrayForEach(e, list) {
            rc = parse_tensor(c, e, &c->t[k++]);
            if (rc != MTC_OK) {
                c->nt = k;
                break;
            }
        }
        if (rc == MTC_OK) qsort(c->t, (size_t)c->nt, sizeof *c->t, tensor_cmp);
        for (int i = 1; rc == MTC_OK && i < c->nt; i++)
            if (!strcmp(c->t[i].key, c->t[i - 1].key)) rc = bad_meta(c, c->t[i].key, "two entries");
    }
    if (rc != MTC_OK) {
        mtc_ckpt_dist_close(c);
        return rc;
    }
    *out = c;
    return MTC_OK;
}

void mtc_ckpt_dist_close(mtc_ckpt_dist *c) {
    if (!c) return;
    for (int i = 0; i < c->nt; i++)
        free(c->t[i].p);
    for (int i = 0; i < c->nfiles; i++)
        if (c->fds[i] >= 0) close(c->fds[i]);
    free(c->t), free(c->files), free(c->fds), free(c->fsize);
    cJSON_Delete(c->root);
    free(c);
}

const cJSON *mtc_ckpt_dist_common(const mtc_ckpt_dist *c) {
    return cJSON_GetObjectItem(c->root, "common");
}

const char *mtc_ckpt_dist_path(const mtc_ckpt_dist *c) { return c->meta_path; }

static const stored_tensor *find_tensor(const mtc_ckpt_dist *c, const char *key) {
    stored_tensor k = {.key = key};
    return bsearch(&k, c->t, (size_t)c->nt, sizeof *c->t, tensor_cmp);
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Rows [lo, hi) of the global tensor a box's flat range touches. */
static void flat_rows(const int64_t off[2], const int64_t shape[2], int64_t f0, int64_t f1,
                      int64_t *lo, int64_t *hi) {
    *lo = off[0] + f0 / shape[1];
    *hi = off[0] + (f1 + shape[1] - 1) / shape[1];
}

/* Copy what stored piece s (data at buf) holds of target t; returns the
 * element count copied. */
static int64_t copy_overlap(const stored_piece *s, const float *buf, const mtc_ckpt_piece *t) {
    int64_t slo, shi, tlo, thi;
    flat_rows(s->off, s->shape, s->flat0, s->flat1, &slo, &shi);
    flat_rows(t->off, t->shape, t->flat0, t->flat1, &tlo, &thi);
    int64_t r0 = max64(max64(s->off[0], t->off[0]), max64(slo, tlo));
    int64_t r1 = min64(min64(s->off[0] + s->shape[0], t->off[0] + t->shape[0]), min64(shi, thi));
    int64_t c0 = max64(s->off[1], t->off[1]);
    int64_t c1 = min64(s->off[1] + s->shape[1], t->off[1] + t->shape[1]);
    if (r0 >= r1 || c0 >= c1) return 0;
    int64_t copied = 0, len = c1 - c0;
    for (int64_t r = r0; r < r1; r++) {
        int64_t si = (r - s->off[0]) * s->shape[1] + (c0 - s->off[1]);
        int64_t ti = (r - t->off[0]) * t->shape[1] + (c0 - t->off[1]);
        int64_t k0 = max64(0, max64(s->flat0 - si, t->flat0 - ti));
        int64_t k1 = min64(len, min64(s->flat1 - si, t->flat1 - ti));
        if (k1 <= k0) continue;
        memcpy(t->data + (ti + k0 - t->flat0), buf + (si + k0 - s->flat0),
               (size_t)(k1 - k0) * sizeof(float));
        copied += k1 - k0;
    }
    return copied;
}

static int boxes_meet(const stored_piece *s, const mtc_ckpt_piece *t) {
    return s->off[0] < t->off[0] + t->shape[0] && t->off[0] < s->off[0] + s->shape[0] &&
           s->off[1] < t->off[1] + t->shape[1] && t->off[1] < s->off[1] + s->shape[1];
}

typedef struct {
    int tensor, target;
} target_ref;

static int ref_cmp(const void *a, const void *b) {
    const target_ref *x = a, *y = b;
    return x->tensor != y->tensor ? x->tensor - y->tensor : x->target - y->target;
}

mtc_result_t mtc_ckpt_dist_read(mtc_ckpt_dist *c, const mtc_ckpt_piece *targets, int n) {
    target_ref *refs = calloc((size_t)(n ? n : 1), sizeof *refs);
    int64_t *copied = calloc((size_t)(n ? n : 1), sizeof *copied);
    float *buf = NULL;
    size_t buf_cap = 0;
    mtc_result_t rc = refs && copied ? MTC_OK : mtc_error(MTC_ERR_OUT_OF_MEMORY, "targets");
    for (int i = 0; rc == MTC_OK && i < n; i++) {
        const mtc_ckpt_piece *t = &targets[i];
        const stored_tensor *st = find_tensor(c, t->key);
        if (!st) {
            rc = mtc_error(MTC_ERR_FORMAT,
                           "%s holds no tensor %s (saved with another model configuration?)",
                           c->meta_path, t->key);
            break;
        }
        if (st->ndim != t->ndim || st->gshape[1] != t->gshape[1] ||
            (st->gshape[0] != t->gshape[0] && !t->rows_may_differ)) {
            rc = mtc_error(MTC_ERR_FORMAT,
                           "%s: tensor %s is (%lld, %lld) but this model's is (%lld, %lld) (use "
                           "the saved model's sizes)",
                           c->meta_path, t->key, (long long)st->gshape[0], (long long)st->gshape[1],
                           (long long)t->gshape[0], (long long)t->gshape[1]);
            break;
        }
        refs[i] = (target_ref){(int)(st - c->t), i};
        c->t[refs[i].tensor].used = 1;
    }
    if (rc == MTC_OK) qsort(refs, (size_t)n, sizeof *refs, ref_cmp);
    uint64_t total = 0, done = 0; /* elements of the targets, for the progress report */
    for (int i = 0; i < n; i++)
        total += (uint64_t)(targets[i].flat1 - targets[i].flat0);
    for (int a = 0; rc == MTC_OK && a < n;) {
        int b = a;
        while (b < n && refs[b].tensor == refs[a].tensor)
            b++;
        const stored_tensor *st = &c->t[refs[a].tensor];
        for (int k = 0; rc == MTC_OK && k < st->np; k++) {
            const stored_piece *s = &st->p[k];
            int need = 0;
            for (int j = a; j < b && !need; j++)
                need = boxes_meet(s, &targets[refs[j].target]);
            if (!need) continue;
            size_t bytes = (size_t)(s->b1 - s->b0);
            if (bytes > buf_cap) {
                free(buf);
                buf = malloc(bytes);
                buf_cap = buf ? bytes : 0;
                if (!buf) {
                    rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "%zu bytes to read %s", bytes, st->key);
                    break;
                }
            }
            size_t got = 0;
            while (got < bytes) {
                ssize_t r =
                    pread(c->fds[s->file], (char *)buf + got, bytes - got, (off_t)(s->b0 + got));
                if (r < 0 && errno == EINTR) continue;
                if (r <= 0) break;
                got += (size_t)r;
            }
            if (got != bytes || mtc_crc32c(0, buf, bytes) != s->crc) {
                rc = mtc_error(MTC_ERR_FORMAT,
                               "%s/%s: tensor %s, bytes [%llu, %llu) %s (a corrupted checkpoint: "
                               "load an earlier iteration with --ckpt-step)",
                               c->dir, c->files[s->file], st->key, (unsigned long long)s->b0,
                               (unsigned long long)s->b1,
                               got != bytes ? "cannot be read" : "do not match their checksum");
                break;
            }
            for (int j = a; j < b; j++)
                if (boxes_meet(s, &targets[refs[j].target]))
                    copied[refs[j].target] += copy_overlap(s, buf, &targets[refs[j].target]);
        }
        for (int j = a; rc == MTC_OK && j < b; j++) {
            const mtc_ckpt_piece *t = &targets[refs[j].target];
            int64_t want = t->flat1 - t->flat0;
            if (st->gshape[0] < t->off[0] + t->shape[0]) { /* fewer stored rows */
                int64_t lim = max64(0, st->gshape[0] - t->off[0]) * t->shape[1];
                want = max64(0, min64(t->flat1, lim) - t->flat0);
            }
            if (copied[refs[j].target] != want)
                rc = mtc_error(MTC_ERR_FORMAT,
                               "%s: tensor %s covers %lld of the %lld elements this rank needs "
                               "at (%lld, %lld) (an incomplete or inconsistent checkpoint)",
                               c->meta_path, t->key, (long long)copied[refs[j].target],
                               (long long)want, (long long)t->off[0], (long long)t->off[1]);
            done += (uint64_t)(t->flat1 - t->flat0);
        }
        if (c->progress) c->progress(c->progress_ctx, done, total);
        a = b;
    }
    free(buf), free(refs), free(copied);
    return rc;
}

int mtc_ckpt_dist_count(const mtc_ckpt_dist *c) { return c->nt; }

void mtc_ckpt_dist_used(const mtc_ckpt_dist *c, int32_t *used) {
    for (int i = 0; i < c->nt; i++)
        used[i] = c->t[i].used;
}

/* "optimizer.exp_avg.NAME" -> "NAME"; NULL for a key of no optimizer state. */
static const char *optimizer_base(const char *key) {
    if (strncmp(key, "optimizer.", 10)) return NULL;
    const char *dot = strchr(key + 10, '.');
    return dot && dot[1] ? dot + 1 : NULL;
}

mtc_result_t mtc_ckpt_dist_check_used(const mtc_ckpt_dist *c, const int32_t *used) {
    for (int i = 0; i < c->nt; i++) {
        if (used[i]) continue;
        const char *base = optimizer_base(c->t[i].key);
        const stored_tensor *b = base ? find_tensor(c, base) : NULL;
        if (b && used[b - c->t]) continue; /* the moments of a weight read: --no-load-optim */
        return mtc_error(MTC_ERR_FORMAT,
                         "%s holds tensor %s, which this model has no place for (saved with "
                         "another model configuration, or an edited checkpoint: pass the saved "
                         "model's flags)",
                         c->meta_path, c->t[i].key);
    }
    return MTC_OK;
}
