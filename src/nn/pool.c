/* nn/pool.c - the per-rank thread pool every nn kernel runs on.
 *
 * Persistent workers wait for a job generation number to change: they spin
 * a short while (20 us by default, so back-to-back kernels do not pay a
 * wake-up) and then sleep on a condition variable, because this machine may
 * run many rank-threads, each with a pool, on few cores and spinning there
 * steals the cores the other ranks need. The caller takes part in every
 * job. Work items are handed out through an atomic counter; determinism
 * comes from the kernels (each item writes its own outputs), not from
 * which thread runs which item.
 *
 * nn_pool_create sets OpenBLAS to one thread: the pool owns a rank's
 * threads and splits GEMMs itself (gemm.c).
 * A call made from inside a job (a kernel calling another kernel), or while
 * another thread's job holds the pool (two ranks given one pool by
 * mistake), runs its items inline on the calling thread: slower, never a
 * deadlock, and the same bits, since results do not depend on who runs an
 * item. */
#include "nn/nn.h"

#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "nn/lowp.h"

/* Spin budget before sleeping, in microseconds (env MTC_NN_SPIN_US, 0 = sleep
 * at once): long enough to cover the gap between back-to-back kernels,
 * short enough not to matter when ranks outnumber cores. */
#define POOL_SPIN_US 20

struct nn_pool {
    int nthreads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    atomic_uint gen;    /* bumped once per job */
    atomic_int next;    /* next work item */
    atomic_int pending; /* workers that have not finished the job */
    atomic_int stop;
    atomic_flag busy; /* a job is in flight */
    uint64_t spin_ns;
    int n;
    void (*fn)(int i, void *arg);
    void *arg;
    nn_lowp *lp; /* fp32 GEMMs through oneDNN (NULL: OpenBLAS) */
};

static inline void pool_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static inline uint64_t pool_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Spin while *v == old, at most budget_ns; returns the last value seen. */
static unsigned pool_spin_while_eq(atomic_uint *v, unsigned old, uint64_t budget_ns) {
    unsigned g = atomic_load(v);
    if (g != old || budget_ns == 0) return g;
    uint64_t t0 = pool_now_ns();
    for (;;) {
        for (int s = 0; s < 32; s++) {
            pool_pause();
            if ((g = atomic_load(v)) != old) return g;
        }
        if (pool_now_ns() - t0 > budget_ns) return g;
    }
}

/* set while this thread runs items of a job (worker) or submits one */
static _Thread_local int pool_inside;

static void pool_do_items(nn_pool *p) {
    int n = p->n;
    void (*fn)(int, void *) = p->fn;
    void *arg = p->arg;
    for (;;) {
        int i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (i >= n) break;
        fn(i, arg);
    }
}

static void *pool_worker(void *vp) {
    nn_pool *p = vp;
    unsigned seen = 0;
    for (;;) {
        unsigned g = pool_spin_while_eq(&p->gen, seen, p->spin_ns);
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv_work, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        pool_inside = 1;
        pool_do_items(p);
        pool_inside = 0;
        if (atomic_fetch_sub(&p->pending, 1) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

/* The fp32 GEMM engine is fixed once per process (nn_gemm_engine_choose,
 * gemm_engine.c: the engine requested, else bench-peak's cached
 * measurement, else oneDNN), so the same command with the same cache gives the same bits run
 * to run. nn_gemm_engine_force overrides it for pools created afterwards
 * (the measurement itself). */
static int pool_dnnl_wanted;
static atomic_int pool_forced;    /* nn_gemm_engine: 0 = not forced */
static atomic_int pool_requested; /* nn_gemm_engine_request's: 0 = auto */
static char pool_engine_why[160];
static pthread_once_t pool_dnnl_once = PTHREAD_ONCE_INIT;
static pthread_key_t pool_lp_key; /* the calling thread's context for a NULL pool */

static void pool_lp_free(void *lp) { nn_lowp_free(lp); }

static void pool_dnnl_init(void) {
    nn_gemm_engine e = nn_gemm_engine_choose((nn_gemm_engine)atomic_load(&pool_requested),
                                             pool_engine_why, sizeof pool_engine_why);
    pool_dnnl_wanted = e == NN_GEMM_DNNL;
    pthread_key_create(&pool_lp_key, pool_lp_free);
}

static int pool_want_dnnl(void) {
    pthread_once(&pool_dnnl_once, pool_dnnl_init);
    int f = atomic_load(&pool_forced);
    if (f) return f == NN_GEMM_DNNL && nn_lowp_available();
    return pool_dnnl_wanted;
}

void nn_gemm_engine_request(nn_gemm_engine e) { atomic_store(&pool_requested, (int)e); }

void nn_gemm_engine_force(nn_gemm_engine e) {
    pthread_once(&pool_dnnl_once, pool_dnnl_init);
    atomic_store(&pool_forced, (int)e);
}

nn_gemm_engine nn_gemm_engine_current(void) {
    return pool_want_dnnl() ? NN_GEMM_DNNL : NN_GEMM_OPENBLAS;
}

void nn_blas_describe(char *buf, size_t size) {
    /* OpenBLAS's own variable (it reads it when it loads; not an mtc setting):
     * the banner names it as the reason for the kernels */
    const char *forced = getenv("OPENBLAS_CORETYPE");
    char dnnl[128] = "";
    int want = pool_want_dnnl();
    if (want) {
        nn_lowp *lp = NULL;
        if (nn_lowp_create(&lp) == MTC_OK) nn_lowp_describe(lp, dnnl, sizeof dnnl);
        nn_lowp_free(lp);
    }
    snprintf(buf, size, "fp32 GEMM engine %s (%s); %s%s%s by %s; kernels for %s%s%s%s",
             want ? "oneDNN" : "OpenBLAS", pool_engine_why, dnnl,
             dnnl[0] ? ", elementwise BLAS" : "", dnnl[0] ? "" : "GEMMs", openblas_get_config(),
             openblas_get_corename(), forced && *forced ? " (OPENBLAS_CORETYPE=" : "",
             forced && *forced ? forced : "", forced && *forced ? ")" : "");
}

/* A NULL pool is the calling thread alone: its own context (freed when the
 * thread exits), so every pool size and NULL compute the same bits. */
nn_lowp *nn_pool_lowp(const nn_pool *pool) {
    if (pool) return pool->lp;
    if (!pool_want_dnnl()) return NULL;
    nn_lowp *lp = pthread_getspecific(pool_lp_key);
    if (!lp && nn_lowp_create(&lp) == MTC_OK) pthread_setspecific(pool_lp_key, lp);
    return lp;
}

mtc_result_t nn_pool_create(int nthreads, nn_pool **out) {
    return nn_pool_create_opts(nthreads, NULL, out);
}

mtc_result_t nn_pool_create_opts(int nthreads, const nn_pool_opts *o, nn_pool **out) {
    *out = NULL;
    if (nthreads < 1)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "nn pool: nthreads=%d must be >= 1", nthreads);
    openblas_set_num_threads(1);
    nn_pool *p = calloc(1, sizeof *p);
    if (!p) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "nn pool: out of memory");
    p->nthreads = nthreads;
    atomic_flag_clear(&p->busy);
    p->spin_ns = 1000u * (uint64_t)(o && o->spin_us >= 0 ? o->spin_us : POOL_SPIN_US);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    if (pool_want_dnnl() && nn_lowp_create(&p->lp) != MTC_OK) p->lp = NULL;
    if (nthreads > 1) {
        p->threads = calloc((size_t)nthreads - 1, sizeof *p->threads);
        if (!p->threads) {
            nn_pool_free(p);
            return mtc_error(MTC_ERR_OUT_OF_MEMORY, "nn pool: out of memory");
        }
        for (int t = 0; t < nthreads - 1; t++) {
            if (pthread_create(&p->threads[t], NULL, pool_worker, p) != 0) {
                p->nthreads = t + 1; /* join only the ones that started */
                nn_pool_free(p);
                return mtc_error(MTC_ERR_SYSTEM,
                                 "nn pool: could not start thread %d of %d (lower the "
                                 "number of threads per rank)",
                                 t + 1, nthreads - 1);
            }
        }
    }
    *out = p;
    return MTC_OK;
}

void nn_pool_free(nn_pool *p) {
    if (!p) return;
    if (p->threads) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->stop, 1);
        atomic_fetch_add(&p->gen, 1); /* wakes spinners too */
        pthread_cond_broadcast(&p->cv_work);
        pthread_mutex_unlock(&p->mu);
        for (int t = 0; t < p->nthreads - 1; t++)
            pthread_join(p->threads[t], NULL);
        free(p->threads);
    }
    nn_lowp_free(p->lp);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int nn_pool_size(const nn_pool *p) { return p ? p->nthreads : 1; }

void nn_pool_run(nn_pool *p, int n, void (*fn)(int i, void *arg), void *arg) {
    if (n <= 0) return;
    if (!p || p->nthreads == 1 || n == 1 || pool_inside ||
        atomic_flag_test_and_set_explicit(&p->busy, memory_order_acquire)) {
        for (int i = 0; i < n; i++)
            fn(i, arg);
        return;
    }
    pool_inside = 1;
    p->n = n;
    p->fn = fn;
    p->arg = arg;
    atomic_store(&p->next, 0);
    atomic_store(&p->pending, p->nthreads - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->gen, 1);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    pool_do_items(p);
    if (atomic_load(&p->pending) != 0 && p->spin_ns) {
        uint64_t t0 = pool_now_ns();
        while (atomic_load(&p->pending) != 0 && pool_now_ns() - t0 < p->spin_ns)
            for (int s = 0; s < 32 && atomic_load(&p->pending) != 0; s++)
                pool_pause();
    }
    if (atomic_load(&p->pending) != 0) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->pending) != 0)
            pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
    pool_inside = 0;
    atomic_flag_clear_explicit(&p->busy, memory_order_release);
}

typedef struct {
    char *dst;
    size_t bytes;
} pool_zero_job;

#define POOL_ZERO_PIECE ((size_t)4 << 20)

static void pool_zero_piece(int i, void *arg) {
    pool_zero_job *j = arg;
    size_t lo = (size_t)i * POOL_ZERO_PIECE;
    memset(j->dst + lo, 0, j->bytes - lo < POOL_ZERO_PIECE ? j->bytes - lo : POOL_ZERO_PIECE);
}

void nn_pool_zero(nn_pool *p, void *dst, size_t bytes) {
    pool_zero_job j = {dst, bytes};
    nn_pool_run(p, (int)((bytes + POOL_ZERO_PIECE - 1) / POOL_ZERO_PIECE), pool_zero_piece, &j);
}
