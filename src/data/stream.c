/* data/stream.c - segments of token ids, reading windows across them, id
 * checks, and file mapping helpers shared by the readers.
 * Relies on POSIX mmap; does not interpret any file format. */
#include "data/stream.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"

size_t data_ids_size(data_ids_type t) {
    switch (t) {
    case DATA_IDS_U8:
    case DATA_IDS_I8: return 1;
    case DATA_IDS_I16:
    case DATA_IDS_U16: return 2;
    case DATA_IDS_I32:
    case DATA_IDS_U32: return 4;
    case DATA_IDS_I64: return 8;
    }
    return 0;
}

const char *data_ids_name(data_ids_type t) {
    static const char *names[] = {"uint8", "int8", "int16", "uint16", "int32", "uint32", "int64"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

static void segment_release(data_segment *s) {
    if (s->owned) {
        if (s->is_mmap)
            data_file_unmap(s->owned, s->owned_len);
        else
            free(s->owned);
    }
    free(s->name);
    memset(s, 0, sizeof *s);
}

mtc_result_t data_stream_add(data_stream *st, const char *name, const void *ids, data_ids_type type,
                             uint64_t n, void *owned, size_t owned_len, int is_mmap) {
    data_segment s = {.ids = ids,
                      .type = type,
                      .n = n,
                      .start = st->n_tokens,
                      .owned = owned,
                      .owned_len = owned_len,
                      .is_mmap = is_mmap};
    s.name = strdup(name);
    if (!s.name) {
        segment_release(&s);
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory adding %s", name);
    }
    if (st->n_seg == st->cap_seg) {
        size_t cap = st->cap_seg ? 2 * st->cap_seg : 8;
        data_segment *p = realloc(st->seg, cap * sizeof *p);
        if (!p) {
            segment_release(&s);
            return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory adding %s", name);
        }
        st->seg = p, st->cap_seg = cap;
    }
    st->seg[st->n_seg++] = s;
    st->n_tokens += n;
    return MTC_OK;
}

void data_stream_free(data_stream *st) {
    if (!st) return;
    for (size_t i = 0; i < st->n_seg; i++)
        segment_release(&st->seg[i]);
    free(st->seg);
    memset(st, 0, sizeof *st);
}

/* Token k of a segment as int64 (unaligned-safe loads). */
static inline int64_t segment_get(const data_segment *s, uint64_t k) {
    const unsigned char *p = s->ids + k * data_ids_size(s->type);
    switch (s->type) {
    case DATA_IDS_U8: return p[0];
    case DATA_IDS_I8: return (int8_t)p[0];
    case DATA_IDS_I16: {
        int16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case DATA_IDS_U16: {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case DATA_IDS_I32: {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case DATA_IDS_U32: {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case DATA_IDS_I64: {
        int64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    }
    return -1;
}

/* Index of the segment holding stream token `pos` (binary search). */
static size_t stream_find(const data_stream *st, uint64_t pos) {
    size_t lo = 0, hi = st->n_seg; /* answer in [lo, hi) */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (st->seg[mid].start <= pos)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

void data_stream_read(const data_stream *st, uint64_t first, size_t n, int *tokens) {
    MTC_ASSERT(first + n <= st->n_tokens);
    size_t done = 0;
    size_t si = n ? stream_find(st, first) : 0;
    while (done < n) {
        const data_segment *s = &st->seg[si];
        uint64_t k = first + done - s->start;
        if (k >= s->n) { /* empty segments or end of this one */
            si++;
            continue;
        }
        uint64_t take = s->n - k;
        if (take > n - done) take = n - done;
        if (s->type == DATA_IDS_U8) { /* text: the common case */
            for (uint64_t i = 0; i < take; i++)
                tokens[done + i] = s->ids[k + i];
        } else {
            for (uint64_t i = 0; i < take; i++)
                tokens[done + i] = (int)segment_get(s, k + i);
        }
        done += take;
        si++;
    }
}

mtc_result_t data_stream_check_ids(const data_stream *st, int vocab_size, int64_t *max_id_out) {
    int64_t max_id = -1;
    for (size_t si = 0; si < st->n_seg; si++) {
        const data_segment *s = &st->seg[si];
        int64_t seg_max = -1;
        uint64_t at = 0;
        if (s->type == DATA_IDS_U8) {
            for (uint64_t k = 0; k < s->n; k++)
                if (s->ids[k] > seg_max) seg_max = s->ids[k], at = k;
        } else {
            for (uint64_t k = 0; k < s->n; k++) {
                int64_t v = segment_get(s, k);
                if (v < 0)
                    return mtc_error(MTC_ERR_FORMAT, "%s: negative token id %lld at position %llu",
                                     s->name, (long long)v, (unsigned long long)k);
                if (v > seg_max) seg_max = v, at = k;
            }
        }
        if (vocab_size > 0 && seg_max >= vocab_size)
            return mtc_error(MTC_ERR_FORMAT,
                             "%s: token id %lld at position %llu is >= --vocab-size %d (use a "
                             "larger --vocab-size or the matching data)",
                             s->name, (long long)seg_max, (unsigned long long)at, vocab_size);
        if (seg_max > INT32_MAX)
            return mtc_error(MTC_ERR_FORMAT, "%s: token id %lld at position %llu exceeds int32",
                             s->name, (long long)seg_max, (unsigned long long)at);
        if (seg_max > max_id) max_id = seg_max;
    }
    *max_id_out = max_id;
    return MTC_OK;
}

mtc_result_t data_file_map(const char *path, void **map, size_t *len) {
    *map = NULL, *len = 0;
    /* non-blocking: the open of a FIFO would wait for a writer */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return mtc_error(MTC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return mtc_error(MTC_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return mtc_error(MTC_ERR_IO, "%s: not a regular file", path);
    }
    if (sb.st_size == 0) {
        close(fd);
        return MTC_OK;
    }
    void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) return mtc_error(MTC_ERR_IO, "%s: cannot mmap: %s", path, strerror(e));
    *map = p, *len = (size_t)sb.st_size;
    return MTC_OK;
}

void data_file_unmap(void *map, size_t len) {
    if (map && len) munmap(map, len);
}

mtc_result_t data_file_read(const char *path, unsigned char **buf, size_t *len) {
    *buf = NULL, *len = 0;
    /* non-blocking open, regular files only: a FIFO's open would wait for a
     * writer, a device such as /dev/zero would read forever */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return mtc_error(MTC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    mtc_result_t rc = MTC_OK;
    unsigned char *p = NULL;
    if (fstat(fd, &sb) != 0) {
        rc = mtc_error(MTC_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(sb.st_mode)) {
        rc = mtc_error(MTC_ERR_IO, "%s: not a regular file", path);
        goto out;
    }
    size_t want = (size_t)sb.st_size, got = 0;
    if (want == 0) goto out;
    p = malloc(want);
    if (!p) {
        rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes", path, want);
        goto out;
    }
    while (got < want) {
        ssize_t r = read(fd, p + got, want - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            rc = mtc_error(MTC_ERR_IO, "%s: read failed: %s", path, strerror(errno));
            goto out;
        }
        if (r == 0) break; /* shrank while reading: keep what is there */
        got += (size_t)r;
    }
    *buf = p, *len = got;
    p = NULL;
out:
    free(p);
    close(fd);
    return rc;
}

void data_paths_free(char **paths, size_t n) {
    if (!paths) return;
    for (size_t i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
}
