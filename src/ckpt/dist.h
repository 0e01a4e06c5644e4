/* ckpt/dist.h - directory checkpoints in Megatron's layout, written by every
 * rank in parallel and read back into any other layout.
 *
 *   SAVE/latest_checkpointed_iteration.txt     "100\n" (the tracker)
 *   SAVE/iter_0000100/__R.distcp               rank R's pieces, raw float32
 *   SAVE/iter_0000100/metadata.json            common state + every piece
 *   SAVE/iter_0000100/metadata.json.crc32c     checksum of metadata.json
 *
 * A tensor is known by its key (the registry name, "optimizer.exp_avg.NAME"
 * ...), dtype and global shape; a piece is a box of it (global offset and
 * shape; a 1-D tensor of n elements is an (n, 1) box) and a flat range of
 * that box in row-major order, so both a TP shard (a box) and a distributed
 * optimizer's shard of it (a range inside the box) are one piece. Each
 * piece records its file, byte range and CRC-32C.
 *
 * Atomic: the ranks write into iter_N.tmp/ (fsync each file), then one rank
 * (mtc_ckpt_dist_commit) merges the per-rank index files into
 * metadata.json, fsyncs it and the directory, renames iter_N.tmp to iter_N
 * (swapping atomically with an older iter_N), fsyncs SAVE and only then
 * replaces the tracker (written to a temporary name, fsynced, renamed). A
 * crash at any moment leaves the previous checkpoint complete, and the
 * tracker never names a directory that is not complete.
 *
 * Reading (mtc_ckpt_dist_read) takes the pieces THIS rank needs (targets, in
 * its own layout) and copies from every stored piece that overlaps them,
 * each stored piece read once and verified against its checksum; every
 * element of a target must be covered exactly once. Errors name the file
 * and the tensor (MTC_ERR_FORMAT).
 *
 * Fault injection for tests (mtc_ckpt_write_opts.fault; mtc train takes it
 * from MTC_CKPT_FAULT_AFTER=k at the CLI's edge): the writer kills the
 * process (SIGKILL, no cleanup, as kill -9) at the k-th write, fsync or
 * rename of a save, counted over every writer sharing the counter; a data
 * write at the fault point is torn (half written first).
 * Does not: communicate (the caller orders the ranks: begin on one rank,
 * barrier, write_shard on all, barrier, commit on one), or store dtypes
 * other than float32. */
#ifndef MTC_CKPT_DIST_H
#define MTC_CKPT_DIST_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/result.h"

#define MTC_CKPT_KEY_MAX 112
#define MTC_CKPT_TRACKER "latest_checkpointed_iteration.txt"

/* One piece of one tensor held in memory (to write, or to fill). */
typedef struct {
    char key[MTC_CKPT_KEY_MAX];
    int ndim;             /* of the global tensor: 1 or 2 */
    int64_t gshape[2];    /* global shape; 1-D tensors have gshape[1] = 1 */
    int64_t off[2];       /* the box's global offset */
    int64_t shape[2];     /* the box's shape */
    int64_t flat0, flat1; /* elements [flat0, flat1) of the box, row-major */
    float *data;          /* flat1 - flat0 floats */
    int rows_may_differ;  /* read: the stored tensor may have another row count
                             (a vocabulary padded for another TP size); rows
                             outside it are left as they are */
} mtc_ckpt_piece;

/* A growable list of pieces. */
typedef struct {
    mtc_ckpt_piece *v;
    int n, cap;
} mtc_ckpt_pieces;

mtc_result_t mtc_ckpt_pieces_push(mtc_ckpt_pieces *l, const mtc_ckpt_piece *p);
void mtc_ckpt_pieces_free(mtc_ckpt_pieces *l);

/* CRC-32C (Castagnoli), hardware-assisted where the CPU has SSE4.2. */
uint32_t mtc_crc32c(uint32_t crc, const void *buf, size_t n);

/* "SAVE/iter_0000100" and "SAVE/iter_0000100.tmp" (7 digits, as Megatron). */
void mtc_ckpt_dist_dirname(char *buf, size_t len, const char *save, int64_t iteration, int tmp);

/* Checks that `save` is, or can be made, a writable directory (creates it),
 * before any work: INVALID_ARGUMENT naming the path otherwise. */
mtc_result_t mtc_ckpt_dist_check_save_dir(const char *save);

/* One rank, before the others write: creates SAVE, removes a stale
 * iter_N.tmp left by a crash and creates it afresh. */
mtc_result_t mtc_ckpt_dist_begin(const char *save, int64_t iteration);

/* The fault-injection counter of the writers that share it (the rank
 * threads of a run and their --async-save writers): after = k > 0 dies at
 * the k-th write point; 0 never. */
typedef struct {
    long after;
    atomic_long count;
} mtc_ckpt_fault;
/* What a checkpoint writer is told (NULL: the defaults, no fault). */
typedef struct {
    mtc_ckpt_fault *fault; /* NULL: none */
} mtc_ckpt_write_opts;

/* Every rank that holds pieces to write: writes them to iter_N.tmp/__R.distcp
 * with their index (__R.json), both fsynced. n may be 0. */
mtc_result_t mtc_ckpt_dist_write_shard(const char *save, int64_t iteration, int rank,
                                       const mtc_ckpt_piece *pieces, int n,
                                       const mtc_ckpt_write_opts *w);
/* --async-save: write_shard on a thread of its own. start copies the
 * pieces' data (a snapshot: the caller may change its buffers at once) and
 * starts the writer; done polls it without waiting (1 when finished, or for
 * NULL); finish waits, frees and returns the write's result (NULL: MTC_OK).
 * The caller commits after every rank's writer finished, as for the
 * synchronous write_shard (ckpt/dist_async.c). */
typedef struct mtc_ckpt_async mtc_ckpt_async;
mtc_result_t mtc_ckpt_async_start(mtc_ckpt_async **out, const char *save, int64_t iteration,
                                  int rank, const mtc_ckpt_piece *pieces, int n,
                                  const mtc_ckpt_write_opts *w);
int mtc_ckpt_async_done(const mtc_ckpt_async *a);
mtc_result_t mtc_ckpt_async_finish(mtc_ckpt_async *a);
/* One rank, after every rank's write_shard returned: merges the nranks
 * index files with `common` (the caller's JSON object, not consumed) into
 * metadata.json, commits the directory and updates the tracker. */
mtc_result_t mtc_ckpt_dist_commit(const char *save, int64_t iteration, int nranks,
                                  const cJSON *common, const mtc_ckpt_write_opts *w);

/* The iteration to load: the tracker's, or `step` when >= 0 (that
 * directory must exist). *found = 0 (and MTC_OK) when `dir` does not exist,
 * is empty or has no tracker: Megatron then starts from scratch. A tracker
 * that does not hold an iteration number is FORMAT. */
mtc_result_t mtc_ckpt_dist_find(const char *dir, int64_t step, int64_t *iteration, int *found);

typedef struct mtc_ckpt_dist mtc_ckpt_dist;

/* Opens DIR/iter_N: verifies metadata.json's checksum and parses it (each
 * piece's bounds, dtype, file name and byte range against the file sizes). */
mtc_result_t mtc_ckpt_dist_open(const char *dir, int64_t iteration, mtc_ckpt_dist **out);
void mtc_ckpt_dist_close(mtc_ckpt_dist *c);
/* The common state object the saver passed to commit. */
const cJSON *mtc_ckpt_dist_common(const mtc_ckpt_dist *c);
/* "DIR/iter_N/metadata.json", for messages. */
const char *mtc_ckpt_dist_path(const mtc_ckpt_dist *c);
/* progress(ctx, done, total) after each tensor mtc_ckpt_dist_read filled
 * (elements of the targets), on the calling thread; NULL: none. */
void mtc_ckpt_dist_set_progress(mtc_ckpt_dist *c,
                                void (*progress)(void *ctx, uint64_t done, uint64_t total),
                                void *ctx);
/* Fill every target from the stored pieces (see the file comment). */
mtc_result_t mtc_ckpt_dist_read(mtc_ckpt_dist *c, const mtc_ckpt_piece *targets, int n);
/* No tensor ignored: used[i] (i < mtc_ckpt_dist_count) is 1 for each
 * stored tensor a target of this handle's reads named; OR them over every
 * rank that read (the ranks of a layout read parts of the model), then
 * check_used refuses (MTC_ERR_FORMAT, naming it) a stored tensor no rank
 * read, unless it is an optimizer state ("optimizer.S.NAME") of a weight
 * NAME that was read (the moments, when the optimizer is not loaded). */
int mtc_ckpt_dist_count(const mtc_ckpt_dist *c);
void mtc_ckpt_dist_used(const mtc_ckpt_dist *c, int32_t *used);
mtc_result_t mtc_ckpt_dist_check_used(const mtc_ckpt_dist *c, const int32_t *used);

#endif
