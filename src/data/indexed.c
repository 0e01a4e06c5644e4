/* data/indexed.c - Megatron's indexed dataset (PREFIX.bin + PREFIX.idx):
 * validating reader and writer.
 *
 * .idx layout (little-endian; docs/formats.md section 2):
 *   0   9      magic "MMIDIDX\0\0"
 *   9   8      version (u64) = 1
 *   17  1      dtype code (u8): 1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64, 7 f32, 8 u16
 *   18  8      sequence_count N (u64)
 *   26  8      document_count D+1 (u64)
 *   34  4N     sequence_lengths (i32)
 *   .   8N     sequence_pointers (i64): byte offsets in .bin, running sum of len * itemsize
 *   .   8(D+1) document_indices (i64): 0 .. N, non-decreasing
 *   .   N      optional sequence_modes (i8, multimodal only; ignored)
 * .bin: the tokens of all sequences back to back. Since the pointers are a
 * running sum and the .bin size must equal the total, the token stream is
 * the whole .bin (EOD tokens, if any, are already in the data).
 * Relies on stream.c for mapping; the .idx is read into memory (12 bytes per
 * sequence). Float dtypes are refused: they cannot hold token ids. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/outfile.h"
#include "data/data.h"
#include "data/stream.h"

static const unsigned char IDX_MAGIC[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
enum { IDX_HEADER = 34 };

int data_indexed_probe(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    unsigned char b[9];
    int ok = fread(b, 1, 9, f) == 9 && memcmp(b, IDX_MAGIC, 9) == 0;
    fclose(f);
    return ok;
}

static uint64_t rd_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
static int32_t rd_i32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

/* Megatron dtype code -> our id type; -1 for float codes, -2 unknown. */
static int dtype_of_code(int code, data_ids_type *t) {
    switch (code) {
    case 1: *t = DATA_IDS_U8; return 0;
    case 2: *t = DATA_IDS_I8; return 0;
    case 3: *t = DATA_IDS_I16; return 0;
    case 4: *t = DATA_IDS_I32; return 0;
    case 5: *t = DATA_IDS_I64; return 0;
    case 8: *t = DATA_IDS_U16; return 0;
    case 6:
    case 7: return -1;
    default: return -2;
    }
}

/* Validates the .idx bytes; on success *type and *n_tokens describe the .bin. */
static mtc_result_t idx_validate(const char *name, const unsigned char *b, size_t size,
                                 data_ids_type *type, uint64_t *n_tokens) {
    if (size < IDX_HEADER)
        return mtc_error(MTC_ERR_FORMAT, "%s: truncated: %zu bytes, the header alone needs %d",
                         name, size, IDX_HEADER);
    if (memcmp(b, IDX_MAGIC, 9) != 0)
        return mtc_error(MTC_ERR_FORMAT,
                         "%s: bad magic: not a Megatron indexed dataset index (expected "
                         "\"MMIDIDX\\0\\0\")",
                         name);
    uint64_t version = rd_u64(b + 9);
    if (version != 1)
        return mtc_error(MTC_ERR_FORMAT, "%s: unsupported version %llu (expected 1)", name,
                         (unsigned long long)version);
    int code = b[17];
    int k = dtype_of_code(code, type);
    if (k == -1)
        return mtc_error(MTC_ERR_FORMAT,
                         "%s: dtype code %d is a float type, which cannot hold token ids", name,
                         code);
    if (k == -2)
        return mtc_error(MTC_ERR_FORMAT,
                         "%s: unknown dtype code %d (valid: 1 uint8, 2 int8, 3 int16, 4 int32, "
                         "5 int64, 8 uint16)",
                         name, code);
    uint64_t N = rd_u64(b + 18), D1 = rd_u64(b + 26);
    if (D1 == 0)
        return mtc_error(MTC_ERR_FORMAT,
                         "%s: document_count is 0 (document_indices always starts with 0)", name);
    if (N > (UINT64_MAX / 64) || D1 > (UINT64_MAX / 64))
        return mtc_error(MTC_ERR_FORMAT,
                         "%s: truncated: header says %llu sequences and %llu document indices, "
                         "far more than the file's %zu bytes",
                         name, (unsigned long long)N, (unsigned long long)D1, size);
    uint64_t need = IDX_HEADER + 12 * N + 8 * D1;
    if (size < need)
        return mtc_error(MTC_ERR_FORMAT,
                         "%s: truncated: header says %llu sequences and %llu document indices, "
                         "needs %llu bytes, file has %zu",
                         name, (unsigned long long)N, (unsigned long long)D1,
                         (unsigned long long)need, size);
    if (size != need && size != need + N)
        return mtc_error(MTC_ERR_FORMAT,
                         "%s: size %zu bytes does not match the header (%llu sequences, %llu "
                         "document indices: %llu bytes, or %llu with sequence modes)",
                         name, size, (unsigned long long)N, (unsigned long long)D1,
                         (unsigned long long)need, (unsigned long long)(need + N));
    const unsigned char *lens = b + IDX_HEADER, *ptrs = lens + 4 * N, *docs = ptrs + 8 * N;
    uint64_t item = data_ids_size(*type), offset = 0, total = 0;
    for (uint64_t s = 0; s < N; s++) {
        int32_t len = rd_i32(lens + 4 * s);
        uint64_t ptr = rd_u64(ptrs + 8 * s);
        if (len < 0)
            return mtc_error(MTC_ERR_FORMAT, "%s: sequence %llu has negative length %d", name,
                             (unsigned long long)s, len);
        if (ptr != offset)
            return mtc_error(MTC_ERR_FORMAT,
                             "%s: sequence_pointers[%llu] = %lld, expected %llu (running sum "
                             "of sequence_lengths x itemsize %llu): pointers inconsistent",
                             name, (unsigned long long)s, (long long)ptr,
                             (unsigned long long)offset, (unsigned long long)item);
        offset += (uint64_t)len * item;
        total += (uint64_t)len;
    }
    uint64_t prev = 0;
    for (uint64_t d = 0; d < D1; d++) {
        uint64_t v = rd_u64(docs + 8 * d);
        if (d == 0 && v != 0)
            return mtc_error(MTC_ERR_FORMAT, "%s: document_indices[0] = %lld, expected 0", name,
                             (long long)v);
        if (v < prev || v > N)
            return mtc_error(MTC_ERR_FORMAT,
                             "%s: document_indices[%llu] = %lld is not in [%llu, %llu] "
                             "(must be non-decreasing sequence indices)",
                             name, (unsigned long long)d, (long long)v, (unsigned long long)prev,
                             (unsigned long long)N);
        prev = v;
    }
    if (prev != N)
        return mtc_error(MTC_ERR_FORMAT,
                         "%s: document_indices ends at %llu, expected sequence_count %llu", name,
                         (unsigned long long)prev, (unsigned long long)N);
    *n_tokens = total;
    return MTC_OK;
}

mtc_result_t data_indexed_open(data_stream *st, const char *prefix) {
    size_t n = strlen(prefix) + 5;
    char *idx = malloc(n), *bin = malloc(n);
    unsigned char *ib = NULL;
    void *map = NULL;
    size_t ilen = 0, blen = 0;
    mtc_result_t rc = MTC_OK;
    if (!idx || !bin) {
        rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory opening %s", prefix);
        goto out;
    }
    snprintf(idx, n, "%s.idx", prefix);
    snprintf(bin, n, "%s.bin", prefix);
    MTC_CHECK_GOTO(data_file_read(idx, &ib, &ilen), rc, out);
    data_ids_type type;
    uint64_t n_tok = 0;
    MTC_CHECK_GOTO(idx_validate(idx, ib, ilen, &type, &n_tok), rc, out);
    MTC_CHECK_GOTO(data_file_map(bin, &map, &blen), rc, out);
    uint64_t want = n_tok * data_ids_size(type);
    if ((uint64_t)blen != want) {
        rc = mtc_error(MTC_ERR_FORMAT,
                       "%s: %s: size %zu bytes, but %s says %llu tokens of %s = %llu bytes", bin,
                       blen < want ? "truncated" : "too long", blen, idx, (unsigned long long)n_tok,
                       data_ids_name(type), (unsigned long long)want);
        goto out;
    }
    rc = data_stream_add(st, bin, map, type, n_tok, map, blen, 1);
    map = NULL; /* owned by the stream now, even on failure */
out:
    data_file_unmap(map, blen);
    free(ib);
    free(idx);
    free(bin);
    return rc;
}

/* ---- writer --------------------------------------------------------------------- */

static void wr_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static int fits(int64_t v, data_ids_type t) {
    switch (t) {
    case DATA_IDS_U8: return v >= 0 && v <= 255;
    case DATA_IDS_I8: return v >= -128 && v <= 127;
    case DATA_IDS_I16: return v >= -32768 && v <= 32767;
    case DATA_IDS_U16: return v >= 0 && v <= 65535;
    default: return 1;
    }
}

/* Writes n bytes to a temporary file and returns its malloc'ed name. */
static mtc_result_t write_tmp(const char *path, const void *a, size_t na, const void *b, size_t nb,
                              char **tmp_out) {
    size_t n = strlen(path) + 8;
    char *tmp = malloc(n);
    if (!tmp) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory writing %s", path);
    snprintf(tmp, n, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        mtc_result_t rc = mtc_error(MTC_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        return rc;
    }
    int ok = (na == 0 || fwrite(a, 1, na, f) == na) && (nb == 0 || fwrite(b, 1, nb, f) == nb);
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        mtc_result_t rc = mtc_error(MTC_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
        remove(tmp);
        free(tmp);
        return rc;
    }
    *tmp_out = tmp;
    return MTC_OK;
}

mtc_result_t data_indexed_write(const char *prefix, const int *tokens, const int *seq_lengths,
                                size_t n_seqs, int dtype_code) {
    uint64_t total = 0;
    for (size_t s = 0; s < n_seqs; s++) {
        if (seq_lengths[s] < 0)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT, "sequence %zu has negative length %d", s,
                             seq_lengths[s]);
        total += (uint64_t)seq_lengths[s];
    }
    int max_id = -1;
    for (uint64_t i = 0; i < total; i++)
        if (tokens[i] > max_id) max_id = tokens[i];
    if (dtype_code == 0) dtype_code = max_id + 1 < 65500 ? 8 : 4; /* Megatron's optimal_dtype */
    data_ids_type type;
    if (dtype_of_code(dtype_code, &type) != 0)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "dtype code %d cannot hold token ids (use 1, 2, 3, 4, 5 or 8; 0 picks)",
                         dtype_code);
    size_t item = data_ids_size(type);
    size_t n_idx = IDX_HEADER + 12 * n_seqs + 8 * (n_seqs + 1);
    unsigned char *ib = calloc(1, n_idx), *bb = malloc(total * item + 1);
    char *tmp_idx = NULL, *tmp_bin = NULL, *idx = NULL, *bin = NULL;
    mtc_result_t rc = MTC_OK;
    size_t np = strlen(prefix) + 5;
    idx = malloc(np), bin = malloc(np);
    if (!ib || !bb || !idx || !bin) {
        rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory writing %s", prefix);
        goto out;
    }
    snprintf(idx, np, "%s.idx", prefix);
    snprintf(bin, np, "%s.bin", prefix);
    for (uint64_t i = 0; i < total; i++) {
        int64_t v = tokens[i];
        if (!fits(v, type)) {
            rc = mtc_error(MTC_ERR_INVALID_ARGUMENT, "token %llu = %lld does not fit dtype %s",
                           (unsigned long long)i, (long long)v, data_ids_name(type));
            goto out;
        }
        unsigned char *p = bb + i * item;
        for (size_t k = 0; k < item; k++)
            p[k] = (unsigned char)((uint64_t)v >> (8 * k));
    }
    memcpy(ib, IDX_MAGIC, 9);
    wr_u64(ib + 9, 1);
    ib[17] = (unsigned char)dtype_code;
    wr_u64(ib + 18, n_seqs);
    wr_u64(ib + 26, n_seqs + 1);
    unsigned char *lens = ib + IDX_HEADER, *ptrs = lens + 4 * n_seqs, *docs = ptrs + 8 * n_seqs;
    uint64_t offset = 0;
    for (size_t s = 0; s < n_seqs; s++) {
        uint32_t len = (uint32_t)seq_lengths[s];
        for (int k = 0; k < 4; k++)
            lens[4 * s + k] = (unsigned char)(len >> (8 * k));
        wr_u64(ptrs + 8 * s, offset);
        offset += (uint64_t)len * item;
    }
    for (size_t d = 0; d <= n_seqs; d++)
        wr_u64(docs + 8 * d, d); /* one document per sequence */
    MTC_CHECK_GOTO(write_tmp(bin, bb, total * item, NULL, 0, &tmp_bin), rc, out);
    MTC_CHECK_GOTO(write_tmp(idx, ib, n_idx, NULL, 0, &tmp_idx), rc, out);
    if (rename(tmp_bin, bin) != 0 || rename(tmp_idx, idx) != 0) {
        rc = mtc_error(MTC_ERR_IO, "%s: cannot rename into place: %s", prefix, strerror(errno));
        goto out;
    }
out:
    if (rc != MTC_OK) {
        if (tmp_bin) remove(tmp_bin);
        if (tmp_idx) remove(tmp_idx);
    }
    free(tmp_bin);
    free(tmp_idx);
    free(idx);
    free(bin);
    free(ib);
    free(bb);
    return rc;
}

/* ---- streaming builder (Megatron's IndexedDatasetBuilder) ------------------------ */

struct data_indexed_builder {
    char *bin, *idx, *tmp_bin, *tmp_idx;
    FILE *f;
    data_ids_type type;
    int code, finished;
    int32_t *lens; /* sequence_lengths */
    size_t n_lens, cap_lens;
    int64_t *docs; /* document_indices, starting with 0 */
    size_t n_docs, cap_docs;
    unsigned char *buf;
    size_t cap_buf;
};

int data_indexed_dtype_for_vocab(int vocab_size) { return vocab_size < 65500 ? 8 : 4; }

static char *cat2(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 1;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s%s", a, b);
    return s;
}

static int grow(void **p, size_t *cap, size_t need, size_t item) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * item);
    if (!q) return -1;
    *p = q, *cap = c;
    return 0;
}

mtc_result_t data_indexed_builder_init(const char *prefix, int dtype_code,
                                       data_indexed_builder **out) {
    *out = NULL;
    data_indexed_builder *b = calloc(1, sizeof *b);
    if (!b) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory writing %s", prefix);
    mtc_result_t rc = MTC_OK;
    if (dtype_of_code(dtype_code, &b->type) != 0) {
        rc = mtc_error(MTC_ERR_INVALID_ARGUMENT,
                       "dtype code %d cannot hold token ids (use 1, 2, 3, 4, 5 or 8)", dtype_code);
        goto fail;
    }
    b->code = dtype_code;
    /* the outputs may be new or regular files, or symlinks written through;
     * a FIFO, device or directory there is refused before any work */
    char *want_bin = cat2(prefix, ".bin"), *want_idx = cat2(prefix, ".idx");
    char real_bin[MTC_PATH_MAX], real_idx[MTC_PATH_MAX];
    if (want_bin && want_idx) {
        rc = mtc_outfile_check(want_bin, "output", real_bin, sizeof real_bin);
        if (rc == MTC_OK) rc = mtc_outfile_check(want_idx, "output", real_idx, sizeof real_idx);
        if (rc == MTC_OK) b->bin = cat2(real_bin, ""), b->idx = cat2(real_idx, "");
    }
    free(want_bin), free(want_idx);
    if (rc != MTC_OK) goto fail;
    if (b->bin) b->tmp_bin = cat2(b->bin, ".tmp");
    if (b->idx) b->tmp_idx = cat2(b->idx, ".tmp");
    if (!b->bin || !b->idx || !b->tmp_bin || !b->tmp_idx ||
        grow((void **)&b->docs, &b->cap_docs, 1, sizeof *b->docs)) {
        rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory writing %s", prefix);
        goto fail;
    }
    b->docs[b->n_docs++] = 0;
    b->f = fopen(b->tmp_bin, "wb");
    if (!b->f) {
        rc = mtc_error(MTC_ERR_IO, "%s: cannot create: %s", b->tmp_bin, strerror(errno));
        goto fail;
    }
    *out = b;
    return MTC_OK;
fail:
    data_indexed_builder_free(b);
    return rc;
}

mtc_result_t data_indexed_builder_add_document(data_indexed_builder *b, const int *ids,
                                               const int *lengths, size_t n_seqs) {
    size_t total = 0;
    for (size_t s = 0; s < n_seqs; s++) {
        if (lengths[s] < 0)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT, "sequence %zu has negative length %d", s,
                             lengths[s]);
        total += (size_t)lengths[s];
    }
    size_t item = data_ids_size(b->type);
    if (grow((void **)&b->buf, &b->cap_buf, total * item + 1, 1) ||
        grow((void **)&b->lens, &b->cap_lens, b->n_lens + n_seqs, sizeof *b->lens) ||
        grow((void **)&b->docs, &b->cap_docs, b->n_docs + 1, sizeof *b->docs))
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory writing %s", b->bin);
    for (size_t i = 0; i < total; i++) {
        if (!fits(ids[i], b->type))
            return mtc_error(MTC_ERR_INVALID_ARGUMENT, "token id %d does not fit dtype %s", ids[i],
                             data_ids_name(b->type));
        for (size_t k = 0; k < item; k++)
            b->buf[i * item + k] = (unsigned char)((uint64_t)(int64_t)ids[i] >> (8 * k));
    }
    if (total && fwrite(b->buf, item, total, b->f) != total)
        return mtc_error(MTC_ERR_IO, "%s: write failed: %s", b->tmp_bin, strerror(errno));
    for (size_t s = 0; s < n_seqs; s++)
        b->lens[b->n_lens++] = lengths[s];
    b->docs[b->n_docs++] = (int64_t)b->n_lens;
    return MTC_OK;
}

mtc_result_t data_indexed_builder_finish(data_indexed_builder *b) {
    FILE *f = b->f;
    b->f = NULL;
    if (fclose(f) != 0)
        return mtc_error(MTC_ERR_IO, "%s: write failed: %s", b->tmp_bin, strerror(errno));
    size_t N = b->n_lens, D = b->n_docs;
    size_t n_idx = IDX_HEADER + 12 * N + 8 * D;
    unsigned char *ib = calloc(1, n_idx);
    if (!ib) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory writing %s", b->idx);
    memcpy(ib, IDX_MAGIC, 9);
    wr_u64(ib + 9, 1);
    ib[17] = (unsigned char)b->code;
    wr_u64(ib + 18, N);
    wr_u64(ib + 26, D);
    unsigned char *lens = ib + IDX_HEADER, *ptrs = lens + 4 * N, *docs = ptrs + 8 * N;
    uint64_t offset = 0, item = data_ids_size(b->type);
    for (size_t s = 0; s < N; s++) {
        for (int k = 0; k < 4; k++)
            lens[4 * s + k] = (unsigned char)((uint32_t)b->lens[s] >> (8 * k));
        wr_u64(ptrs + 8 * s, offset);
        offset += (uint64_t)b->lens[s] * item;
    }
    for (size_t d = 0; d < D; d++)
        wr_u64(docs + 8 * d, (uint64_t)b->docs[d]);
    char *tmp = NULL;
    mtc_result_t rc = write_tmp(b->idx, ib, n_idx, NULL, 0, &tmp);
    free(ib);
    free(tmp); /* same name as b->tmp_idx */
    MTC_CHECK(rc);
    if (rename(b->tmp_bin, b->bin) != 0 || rename(b->tmp_idx, b->idx) != 0)
        return mtc_error(MTC_ERR_IO, "%s: cannot rename into place: %s", b->bin, strerror(errno));
    b->finished = 1;
    return MTC_OK;
}

void data_indexed_builder_free(data_indexed_builder *b) {
    if (!b) return;
    if (b->f) fclose(b->f);
    if (!b->finished) {
        if (b->tmp_bin) remove(b->tmp_bin);
        if (b->tmp_idx) remove(b->tmp_idx);
    }
    free(b->bin), free(b->idx), free(b->tmp_bin), free(b->tmp_idx);
    free(b->lens), free(b->docs), free(b->buf);
    free(b);
}

mtc_result_t data_indexed_lengths(const char *prefix, int32_t **lengths, uint64_t *n_seq) {
    *lengths = NULL, *n_seq = 0;
    size_t n = strlen(prefix) + 5;
    char *idx = malloc(n);
    unsigned char *ib = NULL;
    size_t ilen = 0;
    if (!idx) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory opening %s", prefix);
    snprintf(idx, n, "%s.idx", prefix);
    mtc_result_t rc = data_file_read(idx, &ib, &ilen);
    data_ids_type type;
    uint64_t n_tok = 0;
    if (rc == MTC_OK) rc = idx_validate(idx, ib, ilen, &type, &n_tok); /* as data_indexed_open */
    if (rc == MTC_OK) {
        uint64_t N = rd_u64(ib + 18);
        int32_t *l = malloc((N ? N : 1) * sizeof *l);
        if (!l) rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory reading %s", idx);
        for (uint64_t s = 0; l && s < N; s++) {
            const unsigned char *p = ib + IDX_HEADER + 4 * s;
            l[s] = (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                             (uint32_t)p[3] << 24);
        }
        *lengths = l, *n_seq = N;
    }
    free(ib);
    free(idx);
    return rc;
}
