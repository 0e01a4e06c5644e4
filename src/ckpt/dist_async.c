/* ckpt/dist_async.c - the background writer of --async-save (dist.h).
 *
 *   caller thread                         writer thread
 *   start: copy every piece into one
 *          host buffer (the snapshot) ──► write_shard(iter_N.tmp/__R.*)
 *   ... training goes on ...                fsync, done = 1
 *   done?  (poll, no waiting)
 *   finish: join, the write's result ◄──┘
 *
 * The snapshot makes the write independent of the live buffers, which the
 * next optimizer step overwrites; the commit (metadata, rename, tracker)
 * stays with the caller, after every rank's writer finished, so the atomic
 * protocol of dist.c is unchanged and a crash while the writer runs leaves
 * only an iter_N.tmp that nothing names.
 * Relies on pthreads and mtc_ckpt_dist_write_shard. Limitations: one
 * snapshot of this rank's pieces in memory per pending save (the caller
 * waits for the previous one before starting another). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/dist.h"
#include "core/mem.h"

struct mtc_ckpt_async {
    pthread_t thread;
    char *save;
    int64_t iteration;
    int rank;
    mtc_ckpt_piece *pieces; /* their data point into `snapshot` */
    int n;
    mtc_ckpt_write_opts w;
    float *snapshot;
    atomic_int done;
    mtc_result_t rc;
    char detail[512]; /* the writer thread's error message (the detail is per thread) */
};

static void *async_main(void *arg) {
    mtc_ckpt_async *a = arg;
    a->rc = mtc_ckpt_dist_write_shard(a->save, a->iteration, a->rank, a->pieces, a->n, &a->w);
    if (a->rc != MTC_OK) snprintf(a->detail, sizeof a->detail, "%s", mtc_error_detail());
    atomic_store(&a->done, 1);
    return NULL;
}

mtc_result_t mtc_ckpt_async_start(mtc_ckpt_async **out, const char *save, int64_t iteration,
                                  int rank, const mtc_ckpt_piece *pieces, int n,
                                  const mtc_ckpt_write_opts *w) {
    *out = NULL;
    mtc_ckpt_async *a = calloc(1, sizeof *a);
    if (!a) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "no memory for an asynchronous save");
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += (size_t)(pieces[i].flat1 - pieces[i].flat0);
    a->save = strdup(save);
    a->iteration = iteration, a->rank = rank, a->n = n;
    if (w) a->w = *w;
    a->pieces = malloc((size_t)(n > 0 ? n : 1) * sizeof *a->pieces);
    mtc_result_t rc = a->save && a->pieces
                          ? MTC_OK
                          : mtc_error(MTC_ERR_OUT_OF_MEMORY, "no memory for an asynchronous save");
    if (rc == MTC_OK)
        rc = mtc_mem_alloc((total > 0 ? total : 1) * sizeof(float), (void **)&a->snapshot);
    if (rc != MTC_OK) {
        free(a->save), free(a->pieces), free(a->snapshot), free(a);
        return rc;
    }
    size_t at = 0;
    for (int i = 0; i < n; i++) { /* the snapshot: state as of now, in the write order */
        size_t k = (size_t)(pieces[i].flat1 - pieces[i].flat0);
        a->pieces[i] = pieces[i];
        memcpy(a->snapshot + at, pieces[i].data, k * sizeof(float));
        a->pieces[i].data = a->snapshot + at;
        at += k;
    }
    if (pthread_create(&a->thread, NULL, async_main, a) != 0) {
        free(a->save), free(a->pieces), free(a->snapshot), free(a);
        return mtc_error(MTC_ERR_SYSTEM, "cannot start the checkpoint writer thread");
    }
    *out = a;
    return MTC_OK;
}

int mtc_ckpt_async_done(const mtc_ckpt_async *a) {
    return !a || atomic_load(&((mtc_ckpt_async *)a)->done);
}

mtc_result_t mtc_ckpt_async_finish(mtc_ckpt_async *a) {
    if (!a) return MTC_OK;
    pthread_join(a->thread, NULL);
    mtc_result_t rc = a->rc;
    if (rc != MTC_OK) rc = mtc_error(rc, "%s", a->detail);
    free(a->save), free(a->pieces), free(a->snapshot), free(a);
    return rc;
}
