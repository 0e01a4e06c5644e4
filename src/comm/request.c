/* comm/request.c - non-blocking collectives: one progress thread per
 * communicator, created at the first _start, runs queued operations in
 * issue order and sleeps on a condition variable when the queue is empty.
 *
 * The thread executes the same code as a blocking call (coll.c
 * comm_op_run), so sequence numbers, signature checks, timeouts and aborts
 * behave identically; its error detail is copied into the request and
 * re-raised on the waiting thread by mtc_request_wait. A blocking call, a
 * p2p call or a split on the communicator first drains the queue
 * (comm_queue_drain), so only one thread ever runs operations on a
 * communicator at a time. Relies on pthreads. Does not reorder, merge or
 * cancel operations. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "core/log.h"

struct mtc_request {
    struct mtc_request *next;
    comm_op op;
    mtc_comm_t comm;
    int done;
    mtc_result_t rc;
    char detail[1024];
};

struct comm_queue {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work, idle;
    mtc_request_t head, tail;
    int pending; /* queued or running */
    int stop;
    int log_rank;
};

static void *progress_main(void *arg) {
    mtc_comm_t comm = arg;
    comm_queue *q = comm->queue;
    mtc_log_set_rank(q->log_rank, NULL);
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->head && !q->stop)
            pthread_cond_wait(&q->work, &q->mu);
        if (!q->head) break;
        mtc_request_t r = q->head;
        pthread_mutex_unlock(&q->mu);
        mtc_error_clear();
        mtc_result_t rc = comm_op_run(comm, &r->op);
        pthread_mutex_lock(&q->mu);
        r->rc = rc;
        if (rc != MTC_OK) snprintf(r->detail, sizeof r->detail, "%s", mtc_error_detail());
        r->done = 1;
        q->head = r->next;
        if (!q->head) q->tail = NULL;
        q->pending--;
        pthread_cond_broadcast(&q->idle);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

static mtc_result_t queue_init(mtc_comm_t comm) {
    comm_queue *q = calloc(1, sizeof *q);
    if (!q) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "cannot allocate a request queue");
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->work, NULL);
    pthread_cond_init(&q->idle, NULL);
    q->log_rank = mtc_log_rank();
    comm->queue = q;
    if (pthread_create(&q->thread, NULL, progress_main, comm) != 0) {
        comm->queue = NULL;
        pthread_cond_destroy(&q->work);
        pthread_cond_destroy(&q->idle);
        pthread_mutex_destroy(&q->mu);
        free(q);
        return mtc_error(MTC_ERR_SYSTEM, "cannot start the progress thread of %s", comm->name);
    }
    return MTC_OK;
}

mtc_result_t comm_queue_push(mtc_comm_t comm, const comm_op *op, mtc_request_t *req) {
    if (!req)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "non-blocking call without a request pointer");
    *req = NULL;
    if (!comm->queue) MTC_CHECK(queue_init(comm));
    mtc_request_t r = calloc(1, sizeof *r);
    if (!r) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "cannot allocate a request");
    r->op = *op;
    r->op.queued = 1;
    r->comm = comm;
    comm_queue *q = comm->queue;
    pthread_mutex_lock(&q->mu);
    if (q->tail)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
    q->pending++;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->mu);
    *req = r;
    return MTC_OK;
}

void comm_queue_drain(mtc_comm_t comm) {
    comm_queue *q = comm->queue;
    /* the progress thread itself (e.g. building node sub-communicators) */
    if (!q || pthread_equal(pthread_self(), q->thread)) return;
    pthread_mutex_lock(&q->mu);
    while (q->pending)
        pthread_cond_wait(&q->idle, &q->mu);
    pthread_mutex_unlock(&q->mu);
}

void comm_queue_free(mtc_comm_t comm) {
    comm_queue *q = comm->queue;
    if (!q) return;
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL);
    pthread_cond_destroy(&q->work);
    pthread_cond_destroy(&q->idle);
    pthread_mutex_destroy(&q->mu);
    free(q);
    comm->queue = NULL;
}

mtc_result_t mtc_request_test(mtc_request_t req, int *done) {
    if (!done) return mtc_error(MTC_ERR_INVALID_ARGUMENT, "mtc_request_test: done is NULL");
    if (!req) {
        *done = 1;
        return MTC_OK;
    }
    comm_queue *q = req->comm->queue;
    pthread_mutex_lock(&q->mu);
    *done = req->done;
    pthread_mutex_unlock(&q->mu);
    return MTC_OK;
}

mtc_result_t mtc_request_wait(mtc_request_t *req) {
    if (!req || !*req) return MTC_OK;
    mtc_request_t r = *req;
    comm_queue *q = r->comm->queue;
    pthread_mutex_lock(&q->mu);
    while (!r->done)
        pthread_cond_wait(&q->idle, &q->mu);
    pthread_mutex_unlock(&q->mu);
    mtc_result_t rc = r->rc;
    if (rc != MTC_OK) mtc_error(rc, "%s", r->detail);
    free(r);
    *req = NULL;
    return rc;
}
