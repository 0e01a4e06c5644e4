/* ckpt/dist.c - writing and committing directory checkpoints; see dist.h.
 *
 *   begin (one rank)    SAVE/iter_N.tmp/ created empty
 *   write_shard (all)   iter_N.tmp/__R.distcp + __R.json, fsynced
 *   commit (one rank)   metadata.json (+ .crc32c) from the __R.json files,
 *                       fsync dir, rename to iter_N, fsync SAVE,
 *                       tracker.tmp -> fsync -> rename -> fsync SAVE
 *
 * Reading is in ckpt/dist_read.c. Relies on cJSON and POSIX file calls.
 * The background writer of --async-save is ckpt/dist_async.c.
 * Limitations: float32 only. */
#include "ckpt/dist.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/checkpoint.h"
#include "ckpt/dist_internal.h"
#include "ckpt/tok_files.h"
#include "core/outfile.h"

/* ---- CRC-32C ------------------------------------------------------------ */

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

uint32_t mtc_crc32c(uint32_t crc, const void *buf, size_t n) {
    const unsigned char *p = buf;
    uint64_t c = ~crc;
#if defined(__SSE4_2__) && defined(__x86_64__)
    while (n && ((uintptr_t)p & 7))
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++), n--;
    while (n >= 8) {
        uint64_t a;
        memcpy(&a, p, 8);
        c = __builtin_ia32_crc32di(c, a);
        p += 8, n -= 8;
    }
    while (n)
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++), n--;
#else
    pthread_once(&crc_once, crc_init);
    uint32_t x = (uint32_t)c;
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4), memcpy(&hi, p + 4, 4);
        lo ^= x;
        x = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
            crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^
            crc_table[2][(hi >> 8) & 0xff] ^ crc_table[1][(hi >> 16) & 0xff] ^
            crc_table[0][hi >> 24];
        p += 8, n -= 8;
    }
    while (n--)
        x = (x >> 8) ^ crc_table[0][(x ^ *p++) & 0xff];
    c = x;
#endif
    (void)crc_once, (void)crc_init;
    return ~(uint32_t)c;
}

/* ---- fault injection ------------------------------------------------------ */

int ckpt_fault_point(mtc_ckpt_fault *f) {
    if (!f || f->after <= 0) return 0;
    return atomic_fetch_add(&f->count, 1) + 1 == f->after;
}

void ckpt_fault_die(void) {
    /* as kill -9: no atexit handlers, no buffered output, no cleanup */
    raise(SIGKILL);
    _exit(137);
}

/* ---- files ---------------------------------------------------------------- */

mtc_result_t ckpt_write_all(int fd, const void *buf, size_t n, const char *path,
                            mtc_ckpt_fault *f) {
    const char *p = buf;
    if (ckpt_fault_point(f)) {
        if (n > 1 && write(fd, p, n / 2) < 0) (void)0; /* a torn write, then death */
        ckpt_fault_die();
    }
    while (n) {
        size_t part = n < ((size_t)1 << 30) ? n : (size_t)1 << 30;
        ssize_t w = write(fd, p, part);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return mtc_error(MTC_ERR_IO, "writing %s failed: %s", path, strerror(errno));
        p += w, n -= (size_t)w;
    }
    return MTC_OK;
}

mtc_result_t ckpt_fsync_fd(int fd, const char *path, mtc_ckpt_fault *f) {
    if (ckpt_fault_point(f)) ckpt_fault_die();
    if (fsync(fd) != 0) return mtc_error(MTC_ERR_IO, "fsync %s: %s", path, strerror(errno));
    return MTC_OK;
}

mtc_result_t ckpt_fsync_dir(const char *path, mtc_ckpt_fault *f) {
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return mtc_error(MTC_ERR_IO, "cannot open directory %s: %s", path, strerror(errno));
    mtc_result_t rc = ckpt_fsync_fd(fd, path, f);
    close(fd);
    return rc;
}

/* Write a whole small file durably: PATH.tmp, fsync, rename, fsync its dir. */
static mtc_result_t ckpt_write_file_atomic(const char *dir, const char *name, const void *buf,
                                           size_t n, mtc_ckpt_fault *f) {
    char tmp[4096], path[4096];
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return mtc_error(MTC_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    mtc_result_t rc = ckpt_write_all(fd, buf, n, tmp, f);
    if (rc == MTC_OK) rc = ckpt_fsync_fd(fd, tmp, f);
    close(fd);
    if (rc == MTC_OK && ckpt_fault_point(f)) ckpt_fault_die();
    if (rc == MTC_OK && rename(tmp, path) != 0)
        rc = mtc_error(MTC_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    if (rc == MTC_OK) rc = ckpt_fsync_dir(dir, f);
    if (rc != MTC_OK) unlink(tmp); /* a full disk leaves no NAME.tmp behind */
    return rc;
}

static mtc_result_t ckpt_mkdir(const char *path) {
    if (mkdir(path, 0755) == 0 || errno == EEXIST) {
        struct stat st;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return MTC_OK;
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "checkpoint path %s exists and is not a directory (give --save a "
                         "directory)",
                         path);
    }
    return mtc_error(MTC_ERR_INVALID_ARGUMENT, "cannot create checkpoint directory %s: %s", path,
                     strerror(errno));
}

/* mkdir -p */
static mtc_result_t ckpt_mkdirs(const char *path) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *s = buf + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return mtc_error(MTC_ERR_INVALID_ARGUMENT, "cannot create directory %s: %s", buf,
                                 strerror(errno));
            *s = '/';
        }
    return ckpt_mkdir(buf);
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f) {
    (void)sb, (void)flag, (void)f;
    return remove(p);
}

static void ckpt_rm_rf(const char *path) {
    struct stat st;
    if (lstat(path, &st) == 0) (void)nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void mtc_ckpt_dist_dirname(char *buf, size_t len, const char *save, int64_t it, int tmp) {
    snprintf(buf, len, "%s/iter_%07lld%s", save, (long long)it, tmp ? ".tmp" : "");
}

mtc_result_t mtc_ckpt_dist_check_save_dir(const char *save) {
    MTC_CHECK(ckpt_mkdirs(save));
    char probe[4096];
    snprintf(probe, sizeof probe, "%s/.mtc_write_probe.%ld", save, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "checkpoint directory %s is not writable: %s (fix its permissions or "
                         "give --save another directory)",
                         save, strerror(errno));
    close(fd);
    unlink(probe);
    return MTC_OK;
}

/* ---- pieces --------------------------------------------------------------- */

mtc_result_t mtc_ckpt_pieces_push(mtc_ckpt_pieces *l, const mtc_ckpt_piece *p) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        void *v = realloc(l->v, (size_t)cap * sizeof *l->v);
        if (!v) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "checkpoint piece list of %d", cap);
        l->v = v, l->cap = cap;
    }
    l->v[l->n++] = *p;
    return MTC_OK;
}

void mtc_ckpt_pieces_free(mtc_ckpt_pieces *l) {
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* ---- save ----------------------------------------------------------------- */

mtc_result_t mtc_ckpt_dist_begin(const char *save, int64_t iteration) {
    MTC_CHECK(ckpt_mkdirs(save));
    char tmp[4096];
    mtc_ckpt_dist_dirname(tmp, sizeof tmp, save, iteration, 1);
    ckpt_rm_rf(tmp);
    if (mkdir(tmp, 0755) != 0)
        return mtc_error(MTC_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    return MTC_OK;
}

static cJSON *json_pair(int64_t a, int64_t b) {
    cJSON *x = cJSON_CreateArray();
    cJSON_AddItemToArray(x, cJSON_CreateNumber((double)a));
    cJSON_AddItemToArray(x, cJSON_CreateNumber((double)b));
    return x;
}

mtc_result_t mtc_ckpt_dist_write_shard(const char *save, int64_t iteration, int rank,
                                       const mtc_ckpt_piece *pieces, int n,
                                       const mtc_ckpt_write_opts *w) {
    mtc_ckpt_fault *f = w ? w->fault : NULL;
    char dir[4096], path[4200], name[64];
    mtc_ckpt_dist_dirname(dir, sizeof dir, save, iteration, 1);
    snprintf(name, sizeof name, "__%d.distcp", rank);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return mtc_error(MTC_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    cJSON *index = cJSON_CreateArray();
    mtc_result_t rc = index ? MTC_OK : mtc_error(MTC_ERR_OUT_OF_MEMORY, "checkpoint index");
    uint64_t at = 0;
    for (int i = 0; rc == MTC_OK && i < n; i++) {
        const mtc_ckpt_piece *p = &pieces[i];
        size_t bytes = (size_t)(p->flat1 - p->flat0) * sizeof(float);
        uint32_t crc = mtc_crc32c(0, p->data, bytes);
        rc = ckpt_write_all(fd, p->data, bytes, path, f);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "key", p->key);
        cJSON_AddStringToObject(e, "dtype", "float32");
        cJSON_AddItemToObject(e, "global_shape",
                              p->ndim == 1 ? cJSON_CreateIntArray((int[]){(int)p->gshape[0]}, 1)
                                           : json_pair(p->gshape[0], p->gshape[1]));
        cJSON_AddItemToObject(e, "offset", json_pair(p->off[0], p->off[1]));
        cJSON_AddItemToObject(e, "shape", json_pair(p->shape[0], p->shape[1]));
        cJSON_AddItemToObject(e, "flat_range", json_pair(p->flat0, p->flat1));
        cJSON_AddStringToObject(e, "file", name);
        cJSON_AddItemToObject(e, "byte_range", json_pair((int64_t)at, (int64_t)(at + bytes)));
        char hex[16];
        snprintf(hex, sizeof hex, "%08x", crc);
        cJSON_AddStringToObject(e, "crc32c", hex);
        cJSON_AddItemToArray(index, e);
        at += bytes;
    }
    if (rc == MTC_OK) rc = ckpt_fsync_fd(fd, path, f);
    close(fd);
    char *text = rc == MTC_OK ? cJSON_PrintUnformatted(index) : NULL;
    if (rc == MTC_OK && !text) rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "checkpoint index text");
    snprintf(name, sizeof name, "__%d.json", rank);
    if (rc == MTC_OK) rc = ckpt_write_file_atomic(dir, name, text, strlen(text), f);
    free(text);
    cJSON_Delete(index);
    /* this iteration can no longer be committed: remove its temporary
     * folder (a full disk left iter_N.tmp behind); the other ranks' writes
     * into it fail the same way, and the last checkpoint stays current */
    if (rc != MTC_OK) ckpt_rm_rf(dir);
    return rc;
}

static mtc_result_t read_small_file(const char *path, char **out, size_t *len) {
    *out = NULL;
    FILE *f;
    MTC_CHECK(mtc_infile_open(path, &f));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        fclose(f);
        return mtc_error(MTC_ERR_IO, "cannot read %s", path);
    }
    fclose(f);
    b[n] = 0;
    *out = b;
    if (len) *len = (size_t)n;
    return MTC_OK;
}

mtc_result_t ckpt_read_text(const char *path, char **out, size_t *len) {
    return read_small_file(path, out, len);
}

mtc_result_t mtc_ckpt_dist_commit(const char *save, int64_t iteration, int nranks,
                                  const cJSON *common, const mtc_ckpt_write_opts *w) {
    mtc_ckpt_fault *f = w ? w->fault : NULL;
    char dir[4096], path[4200], fin[4096];
    mtc_ckpt_dist_dirname(dir, sizeof dir, save, iteration, 1);
    mtc_ckpt_dist_dirname(fin, sizeof fin, save, iteration, 0);
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddStringToObject(meta, "format", "mtc-dist-1");
    cJSON *cm = cJSON_Duplicate(common, 1);
    cJSON_AddItemToObject(meta, "common", cm);
    cJSON *tensors = cJSON_AddObjectToObject(meta, "tensors");
    mtc_result_t rc = MTC_OK;
    /* the tokenizer's files are copied beside the weights (tok_files.h) */
    const char *tok = cJSON_GetStringValue(cJSON_GetObjectItem(cm, "tokenizer"));
    char *form = tok ? malloc(MTC_CKPT_TOKENIZER_MAX) : NULL;
    if (tok && !form) rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "checkpoint tokenizer");
    if (form) rc = mtc_ckpt_tok_embed(tok, dir, form, MTC_CKPT_TOKENIZER_MAX);
    if (form && rc == MTC_OK) cJSON_ReplaceItemInObject(cm, "tokenizer", cJSON_CreateString(form));
    free(form);
    for (int r = 0; rc == MTC_OK && r < nranks; r++) {
        snprintf(path, sizeof path, "%s/__%d.json", dir, r);
        char *text = NULL;
        rc = read_small_file(path, &text, NULL);
        cJSON *idx = rc == MTC_OK ? cJSON_Parse(text) : NULL;
        free(text);
        if (rc == MTC_OK && !cJSON_IsArray(idx))
            rc = mtc_error(MTC_ERR_FORMAT, "%s is not a piece index", path);
        cJSON *e, *list = rc == MTC_OK ? idx : NULL;
        cJSON_ArrayForEach(e, list) {
            const char *key = cJSON_GetStringValue(cJSON_GetObjectItem(e, "key"));
            cJSON *t = cJSON_GetObjectItem(tensors, key);
            if (!t) {
                t = cJSON_AddObjectToObject(tensors, key);
                cJSON_AddStringToObject(t, "dtype", "float32");
                cJSON_AddItemToObject(t, "global_shape",
                                      cJSON_Duplicate(cJSON_GetObjectItem(e, "global_shape"), 1));
                cJSON_AddArrayToObject(t, "pieces");
            }
            cJSON *pc = cJSON_CreateObject();
            static const char *fields[] = {"offset", "shape",      "flat_range",
                                           "file",   "byte_range", "crc32c"};
            for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++)
                cJSON_AddItemToObject(pc, fields[k],
                                      cJSON_Duplicate(cJSON_GetObjectItem(e, fields[k]), 1));
            cJSON_AddItemToArray(cJSON_GetObjectItem(t, "pieces"), pc);
        }
        cJSON_Delete(idx);
        if (rc == MTC_OK) unlink(path);
    }
    char *text = rc == MTC_OK ? cJSON_Print(meta) : NULL;
    cJSON_Delete(meta);
    if (rc == MTC_OK && !text) rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "checkpoint metadata");
    if (rc == MTC_OK) {
        size_t n = strlen(text);
        char crc[32];
        snprintf(crc, sizeof crc, "%08x\n", mtc_crc32c(0, text, n));
        rc = ckpt_write_file_atomic(dir, "metadata.json", text, n, f);
        if (rc == MTC_OK)
            rc = ckpt_write_file_atomic(dir, "metadata.json.crc32c", crc, strlen(crc), f);
    }
    free(text);
    if (rc != MTC_OK) { /* never committed: no iter_N.tmp left behind */
        ckpt_rm_rf(dir);
        return rc;
    }
    /* iter_N.tmp -> iter_N: swapped atomically with an older iter_N (then
     * removed), so the tracker's directory is complete at every moment */
    if (ckpt_fault_point(f)) ckpt_fault_die();
    struct stat st;
    if (stat(fin, &st) == 0) {
        if (renameat2(AT_FDCWD, dir, AT_FDCWD, fin, RENAME_EXCHANGE) != 0)
            return mtc_error(MTC_ERR_IO, "cannot swap %s and %s: %s", dir, fin, strerror(errno));
        MTC_CHECK(ckpt_fsync_dir(save, f));
        ckpt_rm_rf(dir);
    } else if (rename(dir, fin) != 0) {
        return mtc_error(MTC_ERR_IO, "cannot rename %s to %s: %s", dir, fin, strerror(errno));
    }
    MTC_CHECK(ckpt_fsync_dir(save, f));
    char it[32];
    snprintf(it, sizeof it, "%lld\n", (long long)iteration);
    return ckpt_write_file_atomic(save, MTC_CKPT_TRACKER, it, strlen(it), f);
}
