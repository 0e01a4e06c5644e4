/* nn/gemm_dnnl.c - GEMMs through oneDNN's matmul primitive, and the bf16
 * linear layer pair on top of them.
 *
 *   nn_lowp_gemm(shape) --cache hit--> entry: tiles 0..t-1, each a primitive
 *        |                              |
 *        +--miss: create the primitives  +--> nn_pool_run: tile i executes its
 *           (one per tile, LRU slot)          primitive on stream i, scratch i
 *
 * C is cut into row blocks (column blocks when it is wide and short) by the
 * same shape-only rule as gemm.c, so the pool runs the blocks and each block
 * is one single-threaded primitive: the bits never depend on the number of
 * threads. A wide bf16 product instead gets its B packed once per call (a
 * reorder primitive, into the layout the blocks' primitives chose) and row
 * blocks that share it: oneDNN 2.6's AMX kernel wants a dense C (lowp.h,
 * nn_lowp_set_pack). Every thread that creates or executes a primitive has its OpenMP
 * thread count set to 1 first (oneDNN's OpenMP runtime reads it, per
 * thread, when it plans a primitive and when it runs one), so oneDNN starts
 * no OpenMP team of its own. Memory objects are made with the primitive and
 * only re-pointed at the caller's buffers per call; scratchpads are
 * user-managed, one buffer per tile slot, grown when a primitive is created.
 *
 * Relies on oneDNN 2.x's C API (dnnl_matmul_desc_init; 3.x replaced it) and
 * on the CPU runtime being OpenMP or sequential; with TBB or a threadpool
 * runtime oneDNN would thread by itself (still correct, no longer
 * thread-count independent).
 * Limitations: one nn_lowp per rank, used by one thread at a time; shapes
 * beyond NN_LOWP_CACHE per step would recreate primitives every step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "nn/lowp.h"
#include "nn/nn_internal.h"

/* db (OUT) += column sums of dout (N,OUT) bf16, in fp32, rows in order. */
typedef struct {
    float *db;
    const mtc_bf16 *dout;
    int N, OUT, tiles;
} lowp_colsum_job;

static void lowp_colsum_tile(int i, void *vp) {
    const lowp_colsum_job *c = vp;
    size_t lo, hi;
    nn_split_range((size_t)c->OUT, c->tiles, i, 16, &lo, &hi);
    float acc[256], row[256];
    for (size_t j0 = lo; j0 < hi; j0 += 256) {
        size_t w = hi - j0 < 256 ? hi - j0 : 256;
        memset(acc, 0, w * sizeof(float));
        for (int r = 0; r < c->N; r++) { /* one sum per column: no reordering */
            nn_bf16_to_f32(row, c->dout + (size_t)r * c->OUT + j0, w);
            for (size_t j = 0; j < w; j++)
                acc[j] += row[j];
        }
        for (size_t j = 0; j < w; j++)
            c->db[j0 + j] += acc[j];
    }
}

static mtc_result_t lowp_check_dt(const char *what, mtc_dtype_t dt) {
    if (dt == MTC_DTYPE_F32 || dt == MTC_DTYPE_BF16) return MTC_OK;
    return mtc_error(MTC_ERR_INVALID_ARGUMENT, "%s: dtype %s is not f32 or bf16", what,
                     mtc_dtype_name(dt));
}

mtc_result_t nn_linear_bf16_forward(nn_pool *pool, nn_lowp *lp, void *out, mtc_dtype_t out_dt,
                                    const mtc_bf16 *inp, const mtc_bf16 *w, const mtc_bf16 *bias,
                                    int N, int IN, int OUT) {
    MTC_CHECK(lowp_check_dt("nn_linear_bf16_forward", out_dt));
    /* out (N,OUT) = inp (N,IN) · wᵀ (IN,OUT) + bias */
    return nn_lowp_gemm(pool, lp, MTC_DTYPE_BF16, out_dt, 0, 1, N, OUT, IN, 1.0f, inp, IN, w, IN,
                        bias, 0.0f, out, OUT);
}

mtc_result_t nn_linear_bf16_backward(nn_pool *pool, nn_lowp *lp, void *dinp, mtc_dtype_t dinp_dt,
                                     float *dw, float *db, const mtc_bf16 *dout,
                                     const mtc_bf16 *inp, const mtc_bf16 *w, int N, int IN,
                                     int OUT) {
    if (N <= 0) return MTC_OK;
    if (dinp) { /* dinp (N,IN) = dout (N,OUT) · w (OUT,IN) */
        MTC_CHECK(lowp_check_dt("nn_linear_bf16_backward", dinp_dt));
        MTC_CHECK(nn_lowp_gemm(pool, lp, MTC_DTYPE_BF16, dinp_dt, 0, 0, N, IN, OUT, 1.0f, dout, OUT,
                               w, IN, NULL, 0.0f, dinp, IN));
    }
    if (dw) /* dw (OUT,IN) += doutᵀ (OUT,N) · inp (N,IN), fp32 main grad */
        MTC_CHECK(nn_lowp_gemm(pool, lp, MTC_DTYPE_BF16, MTC_DTYPE_F32, 1, 0, OUT, IN, N, 1.0f,
                               dout, OUT, inp, IN, NULL, 1.0f, dw, IN));
    if (db) {
        lowp_colsum_job c = {db, dout, N, OUT, nn_split_count((size_t)OUT, 128)};
        nn_pool_run(pool, c.tiles, lowp_colsum_tile, &c);
    }
    return MTC_OK;
}

#ifndef MTC_HAVE_DNNL

#define LOWP_NO_DNNL                                                                               \
    "bf16 GEMMs need oneDNN and this mtc was built without it: install libdnnl-dev "               \
    "(scripts/deps.sh does) and re-run cmake"

int nn_lowp_available(void) { return 0; }
mtc_result_t nn_lowp_create(nn_lowp **out) {
    *out = NULL;
    return mtc_error(MTC_ERR_UNSUPPORTED, LOWP_NO_DNNL);
}
void nn_lowp_free(nn_lowp *lp) { (void)lp; }
void nn_lowp_set_pack(nn_lowp *lp, int pack) { (void)lp, (void)pack; }
long nn_lowp_packed_calls(const nn_lowp *lp) {
    (void)lp;
    return 0;
}
void nn_lowp_stats(const nn_lowp *lp, long *created, long *hits) {
    (void)lp;
    *created = *hits = 0;
}
void nn_lowp_describe(const nn_lowp *lp, char *buf, size_t size) {
    (void)lp;
    snprintf(buf, size, "oneDNN not built in");
}
mtc_result_t nn_lowp_gemm_prepare(nn_lowp *lp, mtc_dtype_t ab, mtc_dtype_t c, int transA,
                                  int transB, int M, int N, int K, float alpha, int lda, int ldb,
                                  int has_bias, float beta, int ldc) {
    return mtc_error(MTC_ERR_UNSUPPORTED, LOWP_NO_DNNL);
}
mtc_result_t nn_lowp_gemm(nn_pool *pool, nn_lowp *lp, mtc_dtype_t ab, mtc_dtype_t c, int transA,
                          int transB, int M, int N, int K, float alpha, const void *A, int lda,
                          const void *B, int ldb, const void *bias, float beta, void *C, int ldc) {
    return mtc_error(MTC_ERR_UNSUPPORTED, LOWP_NO_DNNL);
}

#else

#include <dnnl.h>
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
#include <omp.h>
#define LOWP_ONE_THREAD()                                                                          \
    do {                                                                                           \
        if (omp_get_max_threads() != 1) omp_set_num_threads(1);                                    \
    } while (0)
#else
#define LOWP_ONE_THREAD() ((void)0)
#endif

#define LOWP_TILES 4

typedef struct { /* built with memset so memcmp compares it */
    int ab, c, transA, transB, M, N, K, lda, ldb, ldc, bias, beta;
    uint32_t alpha;
} lowp_key;

typedef struct {
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, bias, c, scratch;
    size_t a_off, b_off, bias_off, c_off; /* elements from the caller's pointers */
    dnnl_memory_desc_t bmd;               /* B as the primitive reads it */
} lowp_tile;

typedef struct {
    lowp_key key;
    int used, tiles;
    unsigned long last; /* LRU clock */
    lowp_tile t[LOWP_TILES];
    /* packed B: the caller's B reordered once per call into the layout the
     * tiles' primitives chose (they share it), so no tile repacks it */
    dnnl_primitive_t pack;
    dnnl_memory_t pack_from, pack_to;
    size_t pack_bytes;
} lowp_entry;

struct nn_lowp {
    dnnl_engine_t engine;
    dnnl_stream_t stream[LOWP_TILES];
    void *scratch[LOWP_TILES];
    size_t scratch_size[LOWP_TILES];
    lowp_entry cache[NN_LOWP_CACHE];
    int pack;     /* NN_LOWP_PACK_* */
    void *packed; /* the packed B of the call in flight */
    size_t packed_size;
    unsigned long clock;
    long created, hits, packs;
    char impl[96];
};

int nn_lowp_available(void) { return 1; }

static mtc_result_t lowp_fail(dnnl_status_t st, const char *what) {
    return mtc_error(MTC_ERR_SYSTEM, "oneDNN: %s failed (status %d)", what, (int)st);
}
#define LOWP_DNNL(call, what)                                                                      \
    do {                                                                                           \
        dnnl_status_t st_ = (call);                                                                \
        if (st_ != dnnl_success) return lowp_fail(st_, what);                                      \
    } while (0)

mtc_result_t nn_lowp_create(nn_lowp **out) {
    *out = NULL;
    nn_lowp *lp = calloc(1, sizeof *lp);
    if (!lp) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "nn_lowp: out of memory");
    lp->pack = NN_LOWP_PACK_DEFAULT;
    mtc_result_t rc = MTC_OK;
    dnnl_status_t st = dnnl_engine_create(&lp->engine, dnnl_cpu, 0);
    for (int i = 0; st == dnnl_success && i < LOWP_TILES; i++)
        st = dnnl_stream_create(&lp->stream[i], lp->engine, dnnl_stream_default_flags);
    if (st != dnnl_success) {
        rc = lowp_fail(st, "creating the CPU engine and streams");
        nn_lowp_free(lp);
        return rc;
    }
    *out = lp;
    return MTC_OK;
}

static void lowp_entry_clear(lowp_entry *e) {
    for (int i = 0; i < e->tiles; i++) {
        lowp_tile *t = &e->t[i];
        if (t->prim) dnnl_primitive_destroy(t->prim);
        dnnl_memory_t *m[] = {&t->a, &t->b, &t->bias, &t->c, &t->scratch};
        for (size_t k = 0; k < sizeof m / sizeof m[0]; k++)
            if (*m[k]) dnnl_memory_destroy(*m[k]);
    }
    if (e->pack) dnnl_primitive_destroy(e->pack);
    if (e->pack_from) dnnl_memory_destroy(e->pack_from);
    if (e->pack_to) dnnl_memory_destroy(e->pack_to);
    memset(e, 0, sizeof *e);
}

void nn_lowp_free(nn_lowp *lp) {
    if (!lp) return;
    for (int i = 0; i < NN_LOWP_CACHE; i++)
        lowp_entry_clear(&lp->cache[i]);
    for (int i = 0; i < LOWP_TILES; i++) {
        if (lp->stream[i]) dnnl_stream_destroy(lp->stream[i]);
        free(lp->scratch[i]);
    }
    free(lp->packed);
    if (lp->engine) dnnl_engine_destroy(lp->engine);
    free(lp);
}

void nn_lowp_set_pack(nn_lowp *lp, int pack) {
    if (!lp || lp->pack == pack) return;
    for (int i = 0; i < NN_LOWP_CACHE; i++) /* made with the other rule */
        lowp_entry_clear(&lp->cache[i]);
    lp->pack = pack;
}

long nn_lowp_packed_calls(const nn_lowp *lp) { return lp ? lp->packs : 0; }

void nn_lowp_stats(const nn_lowp *lp, long *created, long *hits) {
    *created = lp ? lp->created : 0;
    *hits = lp ? lp->hits : 0;
}

void nn_lowp_describe(const nn_lowp *lp, char *buf, size_t size) {
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, size, "oneDNN %d.%d.%d (%s runtime)%s%s", v->major, v->minor, v->patch,
             v->cpu_runtime == DNNL_RUNTIME_OMP   ? "OpenMP"
             : v->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB"
             : v->cpu_runtime == DNNL_RUNTIME_SEQ ? "sequential"
                                                  : "other",
             lp && lp->impl[0] ? ", last matmul: " : "", lp && lp->impl[0] ? lp->impl : "");
}

static dnnl_data_type_t lowp_dnnl_dt(int dt) { return dt == MTC_DTYPE_BF16 ? dnnl_bf16 : dnnl_f32; }

/* 2-D memory descriptor of rows x cols, element (r, c) at r*rs + c*cs. */
static dnnl_status_t lowp_md(dnnl_memory_desc_t *md, int rows, int cols, int rs, int cs, int dt) {
    dnnl_dims_t d = {rows, cols}, s = {rs, cs};
    return dnnl_memory_desc_init_by_strides(md, 2, d, lowp_dnnl_dt(dt), s);
}

/* One tile: C rows [m0, m0+Mt) and columns [n0, n0+Nt). */
static mtc_result_t lowp_tile_make(nn_lowp *lp, const lowp_key *k, int slot, int m0, int Mt, int n0,
                                   int Nt, int packed, lowp_tile *t) {
    dnnl_memory_desc_t amd, bmd, biasmd, cmd;
    LOWP_DNNL(lowp_md(&amd, Mt, k->K, k->transA ? 1 : k->lda, k->transA ? k->lda : 1, k->ab),
              "describing A");
    if (packed) {
        dnnl_dims_t d = {k->K, Nt};
        LOWP_DNNL(
            dnnl_memory_desc_init_by_tag(&bmd, 2, d, lowp_dnnl_dt(k->ab), dnnl_format_tag_any),
            "describing B");
    } else {
        LOWP_DNNL(lowp_md(&bmd, k->K, Nt, k->transB ? 1 : k->ldb, k->transB ? k->ldb : 1, k->ab),
                  "describing B");
    }
    LOWP_DNNL(lowp_md(&biasmd, 1, Nt, Nt, 1, k->ab), "describing the bias");
    LOWP_DNNL(lowp_md(&cmd, Mt, Nt, k->ldc, 1, k->c), "describing C");
    t->a_off = k->transA ? (size_t)m0 : (size_t)m0 * k->lda;
    t->b_off = k->transB ? (size_t)n0 * k->ldb : (size_t)n0;
    t->bias_off = (size_t)n0;
    t->c_off = (size_t)m0 * k->ldc + n0;

    dnnl_matmul_desc_t desc;
    LOWP_DNNL(dnnl_matmul_desc_init(&desc, &amd, &bmd, k->bias ? &biasmd : NULL, &cmd),
              "describing the matmul");
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    float alpha;
    memcpy(&alpha, &k->alpha, sizeof alpha);
    dnnl_status_t st = dnnl_primitive_attr_create(&attr);
    if (st == dnnl_success)
        st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (st == dnnl_success && alpha != 1.0f)
        st = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha);
    if (st == dnnl_success && k->beta) {
        st = dnnl_post_ops_create(&po);
        if (st == dnnl_success) st = dnnl_post_ops_append_sum(po, 1.0f);
        if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(attr, po);
    }
    if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &desc, attr, lp->engine, NULL);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success) return lowp_fail(st, "creating a matmul primitive descriptor");

    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
        snprintf(lp->impl, sizeof lp->impl, "%s", impl);
    t->bmd = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t need = smd ? dnnl_memory_desc_get_size(smd) : 0;
    if (need > lp->scratch_size[slot]) {
        free(lp->scratch[slot]);
        lp->scratch[slot] = aligned_alloc(64, (need + 63) / 64 * 64);
        lp->scratch_size[slot] = lp->scratch[slot] ? need : 0;
        if (!lp->scratch[slot]) {
            dnnl_primitive_desc_destroy(pd);
            return mtc_error(MTC_ERR_OUT_OF_MEMORY, "oneDNN scratchpad of %zu bytes", need);
        }
    }
    st = dnnl_primitive_create(&t->prim, pd);
    if (st == dnnl_success) st = dnnl_memory_create(&t->a, &amd, lp->engine, DNNL_MEMORY_NONE);
    if (st == dnnl_success) st = dnnl_memory_create(&t->b, &t->bmd, lp->engine, DNNL_MEMORY_NONE);
    if (st == dnnl_success && k->bias)
        st = dnnl_memory_create(&t->bias, &biasmd, lp->engine, DNNL_MEMORY_NONE);
    if (st == dnnl_success) st = dnnl_memory_create(&t->c, &cmd, lp->engine, DNNL_MEMORY_NONE);
    if (st == dnnl_success && need)
        st = dnnl_memory_create(&t->scratch, smd, lp->engine, DNNL_MEMORY_NONE);
    dnnl_primitive_desc_destroy(pd);
    if (st != dnnl_success) return lowp_fail(st, "creating a matmul primitive");
    lp->created++;
    return MTC_OK;
}

/* The same shape-only split as gemm.c (see gemm_run there for why). */
static mtc_result_t lowp_entry_tiles(nn_lowp *lp, const lowp_key *k, lowp_entry *e, int packed) {
    int tiles, by_rows = nn_gemm_split(k->M, k->N, k->K, &tiles), extent;
    if (packed && !by_rows) { /* the tiles share the packed B whole: row blocks */
        by_rows = 1;
        tiles = nn_gemm_tiles(k->M, k->N, k->K, 1);
    }
    extent = by_rows ? k->M : k->N;
    e->key = *k;
    e->used = 1;
    e->tiles = tiles;
    for (int i = 0; i < tiles; i++) {
        size_t lo, hi;
        nn_split_range((size_t)extent, tiles, i, by_rows ? 8 : 16, &lo, &hi);
        mtc_result_t rc =
            by_rows ? lowp_tile_make(lp, k, i, (int)lo, (int)(hi - lo), 0, k->N, packed, &e->t[i])
                    : lowp_tile_make(lp, k, i, 0, k->M, (int)lo, (int)(hi - lo), 0, &e->t[i]);
        if (rc != MTC_OK) {
            lowp_entry_clear(e);
            return rc;
        }
        if (packed) e->t[i].b_off = 0;
    }
    return MTC_OK;
}

/* Only GEMMs gemm.c's rule would cut into column blocks for their width
 * (qkv, fc, the LM head's forward; fc2's input gradient): a GEMM cut into
 * row blocks already packs B on every thread at once, where the one packing
 * pass would leave the other threads waiting. */
static int lowp_want_packed(const nn_lowp *lp, const lowp_key *k) {
    int tiles;
    if (k->transA || k->M < NN_LOWP_PACK_MIN_ROWS || nn_gemm_split(k->M, k->N, k->K, &tiles))
        return 0;
    if ((double)k->K >= 8.0 * k->M && (double)k->K >= 8.0 * k->N) return 0;
    if ((double)k->K * k->N * mtc_dtype_size((mtc_dtype_t)k->ab) > NN_LOWP_PACK_MAX_BYTES) return 0;
    return k->ab == MTC_DTYPE_BF16 ? (lp->pack & NN_LOWP_PACK_BF16) != 0
                                   : (lp->pack & NN_LOWP_PACK_F32) != 0;
}

static mtc_result_t lowp_entry_make(nn_lowp *lp, const lowp_key *k, lowp_entry *e) {
    if (lowp_want_packed(lp, k)) {
        MTC_CHECK(lowp_entry_tiles(lp, k, e, 1));
        int same = 1;
        for (int i = 1; i < e->tiles; i++)
            same = same && dnnl_memory_desc_equal(&e->t[0].bmd, &e->t[i].bmd);
        dnnl_memory_desc_t from;
        dnnl_primitive_desc_t rpd = NULL;
        dnnl_status_t st = dnnl_success;
        if (same)
            st = lowp_md(&from, k->K, k->N, k->transB ? 1 : k->ldb, k->transB ? k->ldb : 1, k->ab);
        if (same && st == dnnl_success)
            st = dnnl_reorder_primitive_desc_create(&rpd, &from, lp->engine, &e->t[0].bmd,
                                                    lp->engine, NULL);
        if (same && st == dnnl_success) st = dnnl_primitive_create(&e->pack, rpd);
        if (rpd) dnnl_primitive_desc_destroy(rpd);
        if (same && st == dnnl_success)
            st = dnnl_memory_create(&e->pack_from, &from, lp->engine, DNNL_MEMORY_NONE);
        if (same && st == dnnl_success)
            st = dnnl_memory_create(&e->pack_to, &e->t[0].bmd, lp->engine, DNNL_MEMORY_NONE);
        if (same && st == dnnl_success) {
            e->pack_bytes = dnnl_memory_desc_get_size(&e->t[0].bmd);
            if (e->pack_bytes > lp->packed_size) {
                free(lp->packed);
                lp->packed = aligned_alloc(64, (e->pack_bytes + 63) / 64 * 64);
                lp->packed_size = lp->packed ? e->pack_bytes : 0;
                if (!lp->packed) {
                    lowp_entry_clear(e);
                    return mtc_error(MTC_ERR_OUT_OF_MEMORY, "nn_lowp: no memory for a packed B");
                }
            }
            return MTC_OK;
        }
        lowp_entry_clear(e); /* the tiles disagree or no reorder: unpacked */
    }
    return lowp_entry_tiles(lp, k, e, 0);
}

typedef struct {
    nn_lowp *lp;
    const lowp_entry *e;
    const char *A, *B, *bias;
    char *C;
    size_t ab_size, c_size;
    dnnl_status_t st[LOWP_TILES];
} lowp_call;

static void lowp_tile_run(int i, void *vp) {
    lowp_call *c = vp;
    const lowp_tile *t = &c->e->t[i];
    LOWP_ONE_THREAD();
    dnnl_exec_arg_t args[5];
    int n = 0;
    dnnl_status_t st = dnnl_memory_set_data_handle(t->a, (void *)(c->A + t->a_off * c->ab_size));
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, t->a};
    if (st == dnnl_success)
        st = dnnl_memory_set_data_handle(t->b, (void *)(c->B + t->b_off * c->ab_size));
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, t->b};
    if (st == dnnl_success) st = dnnl_memory_set_data_handle(t->c, c->C + t->c_off * c->c_size);
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DST, t->c};
    if (t->bias) {
        if (st == dnnl_success)
            st = dnnl_memory_set_data_handle(t->bias, (void *)(c->bias + t->bias_off * c->ab_size));
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, t->bias};
    }
    if (t->scratch) {
        if (st == dnnl_success) st = dnnl_memory_set_data_handle(t->scratch, c->lp->scratch[i]);
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, t->scratch};
    }
    if (st == dnnl_success) st = dnnl_primitive_execute(t->prim, c->lp->stream[i], n, args);
    if (st == dnnl_success) st = dnnl_stream_wait(c->lp->stream[i]);
    c->st[i] = st;
}

/* K = 0: C = beta * C + bias (alpha times an empty sum is 0). */
static void lowp_gemm_k0(mtc_dtype_t ab, mtc_dtype_t cdt, int M, int N, const void *bias,
                         float beta, void *C, int ldc) {
    for (int r = 0; r < M; r++)
        for (int j = 0; j < N; j++) {
            size_t at = (size_t)r * ldc + j;
            float v = beta != 0.0f ? (float)mtc_dtype_load(C, cdt, at) : 0.0f;
            if (bias) v += (float)mtc_dtype_load(bias, ab, (size_t)j);
            mtc_dtype_store(C, cdt, at, v);
        }
}

static mtc_result_t lowp_validate(const nn_lowp *lp, mtc_dtype_t ab, mtc_dtype_t c, int transA,
                                  int transB, int M, int N, int K, float alpha, int lda, int ldb,
                                  int has_bias, float beta, int ldc) {
    if (!lp) return mtc_error(MTC_ERR_INVALID_USAGE, "nn_lowp_gemm: no nn_lowp (nn_lowp_create)");
    if ((ab != MTC_DTYPE_BF16 && ab != MTC_DTYPE_F32) || (c != MTC_DTYPE_F32 && c != ab))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "nn_lowp_gemm: %s x %s -> %s is not supported (bf16 -> f32 or bf16, "
                         "f32 -> f32)",
                         mtc_dtype_name(ab), mtc_dtype_name(ab), mtc_dtype_name(c));
    if (beta != 0.0f && beta != 1.0f)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "nn_lowp_gemm: beta=%g must be 0 or 1",
                         (double)beta);
    if (has_bias && alpha != 1.0f)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "nn_lowp_gemm: alpha=%g with a bias (oneDNN would scale the bias too); "
                         "use alpha 1",
                         (double)alpha);
    if (M < 0 || N < 0 || K < 0 || lda < (transA ? M : K) || ldb < (transB ? K : N) || ldc < N)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "nn_lowp_gemm: M=%d N=%d K=%d lda=%d ldb=%d ldc=%d (transA=%d "
                         "transB=%d): sizes must be >= 0 and each leading dimension >= its row",
                         M, N, K, lda, ldb, ldc, transA, transB);
    return MTC_OK;
}

/* The cache entry for a call (validated, M, N, K > 0), made if missing. */
static mtc_result_t lowp_entry_get(nn_lowp *lp, mtc_dtype_t ab, mtc_dtype_t c, int transA,
                                   int transB, int M, int N, int K, float alpha, int lda, int ldb,
                                   int has_bias, float beta, int ldc, int count_hit,
                                   lowp_entry **out) {
    lowp_key k;
    memset(&k, 0, sizeof k);
    k.ab = ab, k.c = c, k.transA = !!transA, k.transB = !!transB, k.M = M, k.N = N, k.K = K;
    k.lda = lda, k.ldb = ldb, k.ldc = ldc, k.bias = !!has_bias, k.beta = beta != 0.0f;
    memcpy(&k.alpha, &alpha, sizeof k.alpha);

    lowp_entry *e = NULL, *victim = &lp->cache[0];
    for (int i = 0; i < NN_LOWP_CACHE && !e; i++) {
        lowp_entry *x = &lp->cache[i];
        if (x->used && memcmp(&x->key, &k, sizeof k) == 0)
            e = x;
        else if (!x->used ? victim->used : (victim->used && x->last < victim->last))
            victim = x;
    }
    if (e) {
        lp->hits += count_hit;
    } else {
        LOWP_ONE_THREAD(); /* oneDNN plans for the thread count it sees now */
        if (victim->used) {
            MTC_DEBUG("nn_lowp: primitive cache full (%d shapes), evicting one", NN_LOWP_CACHE);
            lowp_entry_clear(victim);
        }
        MTC_CHECK(lowp_entry_make(lp, &k, victim));
        e = victim;
    }
    e->last = ++lp->clock;
    *out = e;
    return MTC_OK;
}

mtc_result_t nn_lowp_gemm_prepare(nn_lowp *lp, mtc_dtype_t ab, mtc_dtype_t c, int transA,
                                  int transB, int M, int N, int K, float alpha, int lda, int ldb,
                                  int has_bias, float beta, int ldc) {
    MTC_CHECK(
        lowp_validate(lp, ab, c, transA, transB, M, N, K, alpha, lda, ldb, has_bias, beta, ldc));
    if (M == 0 || N == 0 || K == 0) return MTC_OK;
    lowp_entry *e;
    return lowp_entry_get(lp, ab, c, transA, transB, M, N, K, alpha, lda, ldb, has_bias, beta, ldc,
                          0, &e);
}

mtc_result_t nn_lowp_gemm(nn_pool *pool, nn_lowp *lp, mtc_dtype_t ab, mtc_dtype_t c, int transA,
                          int transB, int M, int N, int K, float alpha, const void *A, int lda,
                          const void *B, int ldb, const void *bias, float beta, void *C, int ldc) {
    MTC_CHECK(lowp_validate(lp, ab, c, transA, transB, M, N, K, alpha, lda, ldb, bias != NULL, beta,
                            ldc));
    if (M == 0 || N == 0) return MTC_OK;
    if (K == 0) {
        lowp_gemm_k0(ab, c, M, N, bias, beta, C, ldc);
        return MTC_OK;
    }
    lowp_entry *e;
    MTC_CHECK(lowp_entry_get(lp, ab, c, transA, transB, M, N, K, alpha, lda, ldb, bias != NULL,
                             beta, ldc, 1, &e));
    lowp_call call = {lp, e, A, B, bias, C, mtc_dtype_size(ab), mtc_dtype_size(c), {0}};
    if (e->pack) {
        LOWP_ONE_THREAD();
        dnnl_status_t st = dnnl_memory_set_data_handle(e->pack_from, (void *)B);
        if (st == dnnl_success) st = dnnl_memory_set_data_handle(e->pack_to, lp->packed);
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, e->pack_from}, {DNNL_ARG_TO, e->pack_to}};
        if (st == dnnl_success) st = dnnl_primitive_execute(e->pack, lp->stream[0], 2, args);
        if (st == dnnl_success) st = dnnl_stream_wait(lp->stream[0]);
        if (st != dnnl_success) return lowp_fail(st, "packing B");
        call.B = lp->packed;
        lp->packs++;
    }
    nn_pool_run(pool, e->tiles, lowp_tile_run, &call);
    for (int i = 0; i < e->tiles; i++)
        if (call.st[i] != dnnl_success) return lowp_fail(call.st[i], "executing a matmul");
    return MTC_OK;
}

#endif
