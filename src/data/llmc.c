/* data/llmc.c - llm.c token shards (karpathy/llm.c dev/data/data_common.py;
 * docs/formats.md section 3).
 *
 * Layout: a header of 256 little-endian int32 (1024 bytes): [0] magic,
 * [1] version, [2] number of tokens n; then n tokens.
 *   magic 20240520, version 1: uint16 tokens (GPT-2)
 *   magic 20240801, version 7: uint32 tokens (Llama-3)
 * The file size must be exactly 1024 + n * itemsize. The shard is mmap'ed
 * and appended to the stream as is (llm.c puts EOT before each document; we
 * keep the tokens as they are). Does not read llm.c's eval (20240522),
 * checkpoint or tokenizer files. */
#include <stdio.h>
#include <string.h>

#include "data/stream.h"

enum { LLMC_HEADER_BYTES = 1024, LLMC_MAGIC_GPT2 = 20240520, LLMC_MAGIC_LLAMA3 = 20240801 };

static int32_t rd_i32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

int data_llmc_probe(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    unsigned char b[4];
    int ok = fread(b, 1, 4, f) == 4;
    fclose(f);
    if (!ok) return 0;
    int32_t magic = rd_i32(b);
    return magic == LLMC_MAGIC_GPT2 || magic == LLMC_MAGIC_LLAMA3;
}

mtc_result_t data_llmc_open(data_stream *st, const char *path) {
    void *map = NULL;
    size_t len = 0;
    MTC_CHECK(data_file_map(path, &map, &len));
    mtc_result_t rc = MTC_OK;
    const unsigned char *b = map;
    if (len < LLMC_HEADER_BYTES) {
        rc = mtc_error(MTC_ERR_FORMAT,
                       "%s: truncated: %zu bytes, an llm.c shard header alone needs %d", path, len,
                       LLMC_HEADER_BYTES);
        goto out;
    }
    int32_t magic = rd_i32(b), version = rd_i32(b + 4), ntok = rd_i32(b + 8);
    data_ids_type type;
    int want_version;
    if (magic == LLMC_MAGIC_GPT2)
        type = DATA_IDS_U16, want_version = 1;
    else if (magic == LLMC_MAGIC_LLAMA3)
        type = DATA_IDS_U32, want_version = 7;
    else {
        rc = mtc_error(MTC_ERR_FORMAT,
                       "%s: bad magic %d: not an llm.c token shard (expected %d or %d)", path,
                       magic, LLMC_MAGIC_GPT2, LLMC_MAGIC_LLAMA3);
        goto out;
    }
    if (version != want_version) {
        rc = mtc_error(MTC_ERR_FORMAT, "%s: unsupported version %d for magic %d (expected %d)",
                       path, version, magic, want_version);
        goto out;
    }
    if (ntok < 0) {
        rc = mtc_error(MTC_ERR_FORMAT, "%s: header says %d tokens (negative)", path, ntok);
        goto out;
    }
    size_t item = data_ids_size(type);
    uint64_t want = LLMC_HEADER_BYTES + (uint64_t)ntok * item;
    if ((uint64_t)len != want) {
        rc = mtc_error(MTC_ERR_FORMAT,
                       "%s: %s: header says %d tokens of %s, needs %llu bytes, file has %zu", path,
                       len < want ? "truncated" : "wrong size", ntok, data_ids_name(type),
                       (unsigned long long)want, len);
        goto out;
    }
    rc = data_stream_add(st, path, b + LLMC_HEADER_BYTES, type, (uint64_t)ntok, map, len, 1);
    map = NULL; /* owned by the stream now */
out:
    data_file_unmap(map, len);
    return rc;
}
