/* train/tensorboard.c - TFRecord framing and the Event / Summary protos by
 * hand (tensorboard.h). Protobuf wire format: a field is a varint key
 * (number << 3 | wire type), then a varint (type 0), 8 bytes (type 1), a
 * varint length and bytes (type 2) or 4 bytes (type 5), little-endian. */
#include "train/tensorboard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/dist.h"
#include "core/outfile.h"

struct mtc_tb {
    FILE *f;
    char path[MTC_PATH_MAX];
};

/* A small growable byte buffer for one record. */
typedef struct {
    unsigned char b[1024];
    size_t n;
} tb_buf;

static void put(tb_buf *o, const void *p, size_t n) {
    if (o->n + n > sizeof o->b) n = sizeof o->b - o->n; /* tags are bounded below */
    memcpy(o->b + o->n, p, n), o->n += n;
}
static void put_varint(tb_buf *o, uint64_t v) {
    unsigned char c[10];
    size_t k = 0;
    do {
        c[k] = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v) c[k] |= 0x80;
        k++;
    } while (v);
    put(o, c, k);
}
static void put_key(tb_buf *o, int field, int wire) { put_varint(o, (uint64_t)field << 3 | wire); }
static void put_le(tb_buf *o, uint64_t v, int bytes) {
    unsigned char c[8];
    for (int i = 0; i < bytes; i++)
        c[i] = (unsigned char)(v >> (8 * i));
    put(o, c, (size_t)bytes);
}
static void put_double(tb_buf *o, int field, double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    put_key(o, field, 1), put_le(o, u, 8);
}
static void put_bytes(tb_buf *o, int field, const void *p, size_t n) {
    put_key(o, field, 2), put_varint(o, n), put(o, p, n);
}

static uint32_t masked_crc(const void *p, size_t n) {
    uint32_t c = mtc_crc32c(0, p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static mtc_result_t write_record(mtc_tb *w, const tb_buf *data) {
    tb_buf head = {.n = 0};
    put_le(&head, data->n, 8);
    uint32_t hc = masked_crc(head.b, 8), dc = masked_crc(data->b, data->n);
    put_le(&head, hc, 4);
    unsigned char tail[4] = {(unsigned char)dc, (unsigned char)(dc >> 8), (unsigned char)(dc >> 16),
                             (unsigned char)(dc >> 24)};
    if (fwrite(head.b, 1, head.n, w->f) != head.n || fwrite(data->b, 1, data->n, w->f) != data->n ||
        fwrite(tail, 1, 4, w->f) != 4)
        return mtc_error(MTC_ERR_IO, "writing the TensorBoard events %s failed: %s", w->path,
                         strerror(errno));
    return MTC_OK;
}

static double wall_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static mtc_result_t mkdirs(const char *dir) {
    char p[MTC_PATH_MAX];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1;; s++) {
        char c = *s;
        if (c != '/' && c != 0) continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "tensorboard-dir %s: cannot create %s: %s (give a writable folder)",
                             dir, p, strerror(errno));
        *s = c;
        if (!c) break;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "tensorboard-dir %s is not a folder (give a folder for the event files)",
                         dir);
    return MTC_OK;
}

mtc_result_t mtc_tb_check_dir(const char *dir) {
    MTC_CHECK(mkdirs(dir));
    if (access(dir, W_OK) != 0)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "tensorboard-dir %s is not writable: %s (fix its permissions or give "
                         "another folder)",
                         dir, strerror(errno));
    return MTC_OK;
}

mtc_result_t mtc_tb_open(const char *dir, mtc_tb **out) {
    *out = NULL;
    MTC_CHECK(mkdirs(dir));
    mtc_tb *w = calloc(1, sizeof *w);
    if (!w) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "TensorBoard writer");
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%ld.0", dir,
             (long long)time(NULL), host, (long)getpid());
    w->f = fopen(w->path, "wb");
    if (!w->f) {
        mtc_result_t rc = mtc_error(MTC_ERR_INVALID_ARGUMENT,
                                    "tensorboard-dir %s: cannot write %s: %s (give a writable "
                                    "folder)",
                                    dir, w->path, strerror(errno));
        free(w);
        return rc;
    }
    tb_buf e = {.n = 0}; /* the first event names the format version */
    put_double(&e, 1, wall_time());
    put_bytes(&e, 3, "brain.Event:2", 13);
    mtc_result_t rc = write_record(w, &e);
    if (rc == MTC_OK) rc = mtc_tb_flush(w);
    if (rc != MTC_OK) {
        fclose(w->f);
        free(w);
        return rc;
    }
    *out = w;
    return MTC_OK;
}

mtc_result_t mtc_tb_scalar(mtc_tb *w, const char *tag, double value, int64_t step) {
    size_t tn = strlen(tag);
    if (tn > 512) tn = 512;
    tb_buf v = {.n = 0}, s = {.n = 0}, e = {.n = 0};
    put_bytes(&v, 1, tag, tn);
    float f = (float)value;
    uint32_t u;
    memcpy(&u, &f, 4);
    put_key(&v, 2, 5), put_le(&v, u, 4);
    put_bytes(&s, 1, v.b, v.n);
    put_double(&e, 1, wall_time());
    put_key(&e, 2, 0), put_varint(&e, (uint64_t)step);
    put_bytes(&e, 5, s.b, s.n);
    return write_record(w, &e);
}

mtc_result_t mtc_tb_flush(mtc_tb *w) {
    if (fflush(w->f) != 0)
        return mtc_error(MTC_ERR_IO, "writing the TensorBoard events %s failed: %s", w->path,
                         strerror(errno));
    return MTC_OK;
}

const char *mtc_tb_path(const mtc_tb *w) { return w->path; }

mtc_result_t mtc_tb_close(mtc_tb *w) {
    if (!w) return MTC_OK;
    mtc_result_t rc = mtc_tb_flush(w);
    if (fclose(w->f) != 0 && rc == MTC_OK)
        rc = mtc_error(MTC_ERR_IO, "closing the TensorBoard events %s failed", w->path);
    free(w);
    return rc;
}
