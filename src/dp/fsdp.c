/* dp/fsdp.c - Megatron-FSDP's optim_grads and optim_grads_params over the
 * distributed optimizer's unit-per-bucket buffers; see dp/fsdp.h.
 *
 *   forward / backward of unit u:
 *     params_needed(u) ──► all-gather(intra) of u in place ──► compute
 *                          units needed neither now nor by the call before:
 *                          pages outside the owned shard given back
 *     grads_ready(u)   ──► reduce-scatter(intra) of u in place: the owned
 *                          shard += every rank's microbatch gradient; the
 *                          rest of u's gradient pages given back (they read
 *                          as zero, the next microbatch adds into zeros)
 *   optimizer: AdamW on the shards (dp/distopt.c, its all-gather off); the
 *   next params_needed sees the new step and drops every gathered unit.
 *
 * Pages: every shard starts and ends on a page (mtc_fsdp_pad_divisor), so
 * madvise(MADV_DONTNEED) frees exactly what is not owned, and mincore(2)
 * says what is resident.
 *
 * HFSDP (several optimizer instances, outer strategy optim): the shard is
 * the instance's as in HSDP; after the last microbatch each unit's shard
 * is reduce-scattered over the inter-instance group into this rank's
 * optimizer slice (1/outer of it), AdamW updates the slice only, and the
 * first need after the step all-gathers the slices back into the shard
 * over the same group. Relies on dp/ddp.h, dp/distopt.h, comm/. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "dp/fsdp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/mem.h"
#include "core/timer.h"
#include "core/trace.h"
#include "dp/distopt.h"
#include "model/model.h"
#include "nn/lowp.h"

static const char *const fsdp_names[] = {"off", "no_shard", "optim", "optim_grads",
                                         "optim_grads_params"};

int mtc_fsdp_strategy_parse(const char *s) {
    for (int i = MTC_FSDP_NO_SHARD; i <= MTC_FSDP_OPTIM_GRADS_PARAMS; i++)
        if (s && strcmp(s, fsdp_names[i]) == 0) return i;
    return -1;
}

const char *mtc_fsdp_strategy_name(int strategy) {
    return strategy >= 0 && strategy <= MTC_FSDP_OPTIM_GRADS_PARAMS ? fsdp_names[strategy] : "?";
}

void mtc_fsdp_units(const mtc_registry *reg, int num_layers, int *unit_of) {
    /* MTP depths are layers num_layers + d, registered before the final
     * norm and head: those come after them, so units rise in registry order */
    for (int i = 0; i < reg->count; i++)
        if (reg->params[i].layer >= num_layers) num_layers = reg->params[i].layer + 1;
    for (int i = 0; i < reg->count; i++) {
        const mtc_param *p = &reg->params[i];
        if (p->layer >= 0)
            unit_of[i] = 1 + p->layer;
        else if (p->role == MTC_ROLE_WTE || p->role == MTC_ROLE_WPE)
            unit_of[i] = 0; /* a last stage's tied wte copy too: its own bucket then */
        else
            unit_of[i] = num_layers + 1; /* final norm, output layer */
    }
}

void mtc_fsdp_group_units(const mtc_registry *reg, int *unit_of, int64_t suggested) {
    if (suggested <= 0 || reg->count < 1) return;
    int group = 0, last = unit_of[0];
    int64_t held = 0;
    for (int i = 0; i < reg->count; i++) {
        if (unit_of[i] != last) { /* a new unit: it joins the run unless the run is full */
            if (held >= suggested) group++, held = 0;
            last = unit_of[i];
        }
        held += (int64_t)reg->params[i].local_numel;
        unit_of[i] = group;
    }
}

static int64_t fsdp_page_floats(void) {
    long page = sysconf(_SC_PAGESIZE);
    return (page > 0 ? page : 4096) / (int64_t)sizeof(float);
}

int64_t mtc_fsdp_pad_divisor(int dp) { return (int64_t)(dp > 0 ? dp : 1) * fsdp_page_floats(); }

/* The page pool: a released unit's pages outside the shard are moved
 * (mremap(2) with MREMAP_DONTUNMAP: page tables move, nothing is copied,
 * zeroed or freed) into a free slot, and the next unit to become resident
 * takes them instead of faulting in fresh zeroed pages one by one (the
 * kernel's fault path cost 5-7x the copy itself: docs/fsdp.md). Megatron
 * gets the same from PyTorch's caching allocator. Slots still holding
 * pages once the call that released them is done are given back
 * (madvise), so the resident memory is what it was without the pool. */
#define FSDP_POOL_SLOTS 4
enum { FSDP_PARAMS = 0, FSDP_GRADS = 1 };
typedef struct {
    char *area;                   /* FSDP_POOL_SLOTS slots of slot_bytes, NULL: no pool */
    size_t slot_bytes;            /* the largest unit's bytes outside its shard */
    size_t held[FSDP_POOL_SLOTS]; /* bytes of pages moved into each slot */
} fsdp_pool;

struct mtc_fsdp {
    mtc_ddp *d;
    mtc_distopt *opt; /* the optimizer of the shards (set by mtc_fsdp_attach_optimizer) */
    int strategy;
    int nb;                       /* buckets = units */
    unsigned char *gathered;      /* [nb] params resident outside the shard: 1 current, 2 from
                                     before the last optimizer step (re-gathered in place) */
    unsigned char *need_cur;      /* [nb] needed by the last params_needed call */
    unsigned char *need_prev;     /* [nb] ... and by the one before */
    int *nready;                  /* [nb] params marked ready this microbatch */
    int *nreduced;                /* [nb] reduce-scatters since zero_grad */
    unsigned char *ready;         /* [nparams] */
    int64_t seen_step;            /* the optimizer step the gathered units are from */
    size_t peak_param, peak_grad; /* resident bytes seen */
    unsigned char *vec;           /* mincore's page vector */
    size_t npages;
    /* --overlap-param-gather: the next unit's all-gather started after a
     * need (prefetch, in the pass's direction); --overlap-grad-reduce: a
     * unit's reduce-scatter left running until the next one starts */
    int overlap_param_gather, overlap_grad_reduce;
    mtc_request_t *ag; /* [nb] all-gathers in flight */
    mtc_request_t rs;  /* the reduce-scatter in flight, of bucket rs_b */
    int rs_b;
    int last_lo, last_hi; /* buckets of the last need, -1 none */
    int dir;              /* -1 forward (bucket indices fall), +1 backward */
    int pref;             /* the bucket last prefetched, -1 none */
    float *acc;           /* HSDP: each bucket's shard as accumulated before this microbatch, at
                             bucket.start / dp; NULL with one instance */
    fsdp_pool pool[2];    /* FSDP_PARAMS, FSDP_GRADS: pages of released units kept for the next */
    int64_t gathers, reuses; /* units made resident, and of those from the pool */
    int backward;            /* the pass running is a backward (mtc_fsdp_begin_pass) */
    int persistent;          /* --fsdp-double-buffer: two slots, never trimmed */
    int phased;              /* mtc_fsdp_begin_pass gives the direction */
    mtc_bf16 *g16;           /* --grad-reduce-in-bf16: the unit's bf16 staging (largest unit) */
    mtc_trace *trace;        /* per-unit spans (mtc_fsdp_set_trace), NULL none */
    int track;
    char label[32];
    uint64_t *ag_t0; /* [nb] when bucket b's all-gather started, 0 none open */
    uint64_t rs_t0;  /* when the reduce-scatter in flight started */
    /* HFSDP (mtc_fsdp_set_outer_optim): the optimizer's slice of each shard
     * is the outer_rank-th of `outer` (the inter-instance group's size);
     * 1 otherwise */
    int outer, outer_rank;
    size_t setup_bytes; /* params + grads resident when mtc_fsdp_shard began */
    /* --bf16 (mtc_fsdp_set_compute_copies): the model's compute copies at
     * this buffer's place; a unit is gathered as bf16 into p16 and widened
     * into pc, whose pages outside the shard the release and the pool take
     * instead of the fp32 params' (those stay the shard only) */
    float *pc;
    mtc_bf16 *p16;        /* NULL: the unit gathered as the rounded values in pc (fp32 storage) */
    int f16;              /* the copies hold fp16 values (--fp16), else bf16 */
    unsigned char *widen; /* [nb] a bf16 gather's widening into pc still to do */
    int fp32_whole; /* mtc_fsdp_gather_all gathered the fp32 params: released at the next need */
};

int mtc_fsdp_shards_params(const mtc_fsdp *f) { return f->strategy == MTC_FSDP_OPTIM_GRADS_PARAMS; }

/* Give back the pages of buf [a, b) (floats; page-aligned by the layout). */
static void fsdp_release(float *buf, int64_t a, int64_t b) {
    if (b <= a) return;
    (void)madvise(buf + a, (size_t)(b - a) * sizeof(float), MADV_DONTNEED);
}

/* Move n bytes of pages from src to dst (both page-aligned); src reads as
 * zero afterwards. 0 on success. */
static int fsdp_move(void *dst, void *src, size_t n) {
    if (n == 0) return 0;
    void *q = mremap(src, n, n, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, dst);
    return q == dst ? 0 : -1;
}

static float *fsdp_buf(const mtc_fsdp *f, int which) {
    return which == FSDP_PARAMS ? (f->pc ? f->pc : f->d->params) : f->d->grads;
}

/* The two ranges of bucket b outside this rank's shard. */
static void fsdp_outside(const mtc_fsdp *f, int b, dp_range r[2]) {
    const dp_layout *l = &f->d->layout;
    dp_range bk = l->bucket[b], s = dp_layout_shard_range(l, f->d->shard_rank, b);
    r[0] = (dp_range){bk.start, s.start}, r[1] = (dp_range){s.end, bk.end};
}

/* Release bucket b of buffer `which` outside this rank's shard: into a free
 * pool slot when there is one, else back to the OS. */
static void fsdp_release_bucket(mtc_fsdp *f, int which, int b) {
    float *buf = fsdp_buf(f, which);
    fsdp_pool *p = &f->pool[which];
    dp_range r[2];
    fsdp_outside(f, b, r);
    size_t n0 = (size_t)(r[0].end - r[0].start) * sizeof(float);
    size_t n1 = (size_t)(r[1].end - r[1].start) * sizeof(float);
    for (int k = 0; p->area && n0 + n1 > 0 && k < (f->persistent ? 2 : FSDP_POOL_SLOTS); k++) {
        if (p->held[k]) continue;
        char *slot = p->area + (size_t)k * p->slot_bytes;
        if (fsdp_move(slot, buf + r[0].start, n0) || fsdp_move(slot + n0, buf + r[1].start, n1))
            break; /* the kernel refused: the ranges are released below */
        p->held[k] = n0 + n1;
        return;
    }
    fsdp_release(buf, r[0].start, r[0].end);
    fsdp_release(buf, r[1].start, r[1].end);
}

/* 1 when none of buf [a, b)'s pages is resident (a range the pool may map
 * over: nothing in it is lost). */
static int fsdp_empty(mtc_fsdp *f, float *buf, int64_t a, int64_t b) {
    if (b <= a) return 1;
    size_t pf = (size_t)fsdp_page_floats(), np = (size_t)(b - a) / pf;
    if (mincore(buf + a, (size_t)(b - a) * sizeof(float), f->vec)) return 0;
    for (size_t i = 0; i < np; i++)
        if (f->vec[i] & 1) return 0;
    return 1;
}

/* Bucket b of buffer `which` is about to be written outside the shard:
 * give it a held slot's pages when its ranges are empty. Grads must read as
 * zero there, so moved-in gradient pages are cleared (params are all
 * overwritten by the all-gather). */
static void fsdp_acquire(mtc_fsdp *f, int which, int b) {
    float *buf = fsdp_buf(f, which);
    fsdp_pool *p = &f->pool[which];
    if (!p->area) return;
    int k = 0;
    while (k < FSDP_POOL_SLOTS && !p->held[k])
        k++;
    if (k == FSDP_POOL_SLOTS) return;
    dp_range r[2];
    fsdp_outside(f, b, r);
    if (!fsdp_empty(f, buf, r[0].start, r[0].end) || !fsdp_empty(f, buf, r[1].start, r[1].end))
        return;
    char *slot = p->area + (size_t)k * p->slot_bytes;
    size_t off = 0;
    for (int i = 0; i < 2; i++) {
        size_t n = (size_t)(r[i].end - r[i].start) * sizeof(float);
        if (off + n > p->held[k]) n = off < p->held[k] ? p->held[k] - off : 0;
        if (n && fsdp_move(buf + r[i].start, slot + off, n) == 0) {
            if (which == FSDP_GRADS) memset(buf + r[i].start, 0, n);
            off += n;
        }
    }
    if (off < p->held[k]) (void)madvise(slot + off, p->held[k] - off, MADV_DONTNEED);
    p->held[k] = 0;
    f->reuses++;
}

/* Slots still holding pages go back to the OS. */
static void fsdp_pool_trim(mtc_fsdp *f) {
    for (int w = 0; w < 2 && !f->persistent; w++)
        for (int k = 0; f->pool[w].area && k < FSDP_POOL_SLOTS; k++)
            if (f->pool[w].held[k]) {
                (void)madvise(f->pool[w].area + (size_t)k * f->pool[w].slot_bytes,
                              f->pool[w].held[k], MADV_DONTNEED);
                f->pool[w].held[k] = 0;
            }
}

/* Resident bytes of a buffer of the layout's numel floats. */
static size_t fsdp_resident(mtc_fsdp *f, float *buf) {
    if (!f->vec || mincore(buf, f->npages * (size_t)fsdp_page_floats() * sizeof(float), f->vec))
        return 0;
    size_t n = 0;
    for (size_t i = 0; i < f->npages; i++)
        n += f->vec[i] & 1;
    return n * (size_t)fsdp_page_floats() * sizeof(float);
}

/* Resident bytes of the bf16 copy's pages (those it shares with a
 * neighbouring buffer included). */
static size_t fsdp_resident16(mtc_fsdp *f) {
    if (!f->p16) return 0;
    size_t page = (size_t)fsdp_page_floats() * sizeof(float);
    uintptr_t lo = (uintptr_t)f->p16 / page * page;
    uintptr_t hi = ((uintptr_t)(f->p16 + f->d->layout.numel) + page - 1) / page * page;
    size_t np = (hi - lo) / page, n = 0;
    if (!f->vec || np > f->npages || mincore((void *)lo, hi - lo, f->vec)) return 0;
    for (size_t i = 0; i < np; i++)
        n += f->vec[i] & 1;
    return n * page;
}

/* Resident bytes of buffer `which`'s pool slots. */
static size_t fsdp_pool_resident(mtc_fsdp *f, int which) {
    const fsdp_pool *p = &f->pool[which];
    size_t pf = (size_t)fsdp_page_floats(), bytes = p->slot_bytes * FSDP_POOL_SLOTS, n = 0;
    for (size_t off = 0; p->area && off < bytes; off += f->npages * pf * sizeof(float)) {
        size_t len = bytes - off < f->npages * pf * sizeof(float) ? bytes - off
                                                                  : f->npages * pf * sizeof(float);
        if (mincore(p->area + off, len, f->vec)) return n;
        for (size_t i = 0; i < len / (pf * sizeof(float)); i++)
            n += (f->vec[i] & 1) * pf * sizeof(float);
    }
    return n;
}

static void fsdp_sample(mtc_fsdp *f) {
    size_t p = fsdp_resident(f, f->d->params) + fsdp_pool_resident(f, FSDP_PARAMS) +
               (f->pc ? fsdp_resident(f, f->pc) + fsdp_resident16(f) : 0);
    size_t g = fsdp_resident(f, f->d->grads) + fsdp_pool_resident(f, FSDP_GRADS);
    if (p > f->peak_param) f->peak_param = p;
    if (g > f->peak_grad) f->peak_grad = g;
}

mtc_result_t mtc_fsdp_init(mtc_ddp *d, int strategy, mtc_fsdp **out) {
    *out = NULL;
    if (strategy != MTC_FSDP_OPTIM_GRADS && strategy != MTC_FSDP_OPTIM_GRADS_PARAMS)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "mtc_fsdp serves optim_grads and optim_grads_params, not %s",
                         mtc_fsdp_strategy_name(strategy));
    if (!d->cfg.use_distopt || d->cfg.overlap_grad_reduce)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "mtc_fsdp needs a distributed-optimizer buffer without its own overlap "
                         "(got use_distopt %d, overlap %d)",
                         d->cfg.use_distopt, d->cfg.overlap_grad_reduce);
    int64_t page = fsdp_page_floats();
    if (((uintptr_t)d->params | (uintptr_t)d->grads) % (uintptr_t)(page * (int64_t)sizeof(float)))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "FSDP buffers must start on a page");
    for (int b = 0; b < d->layout.nbuckets; b++)
        if ((d->layout.bucket[b].end - d->layout.bucket[b].start) %
                (page * (int64_t)d->layout.dp) ||
            d->layout.bucket[b].start % page)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "FSDP unit %d is not padded to whole pages per shard (lay the buffer "
                             "out with mtc_fsdp_pad_divisor)",
                             b);
    mtc_result_t rc;
    mtc_fsdp *f = NULL;
    MTC_CHECK_GOTO(mtc_mem_calloc(1, sizeof *f, (void **)&f), rc, fail);
    f->d = d, f->strategy = strategy, f->nb = d->layout.nbuckets, f->outer = 1;
    size_t nb = (size_t)(f->nb > 0 ? f->nb : 1), np = (size_t)d->layout.nparams + 1;
    MTC_CHECK_GOTO(mtc_mem_calloc(nb, 1, (void **)&f->gathered), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_calloc(nb, 1, (void **)&f->need_cur), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_calloc(nb, 1, (void **)&f->need_prev), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_calloc(nb, sizeof(int), (void **)&f->nready), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_calloc(nb, sizeof(int), (void **)&f->nreduced), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_calloc(np, 1, (void **)&f->ready), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_calloc(nb, sizeof(mtc_request_t), (void **)&f->ag), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_calloc(nb, sizeof(uint64_t), (void **)&f->ag_t0), rc, fail);
    if (d->comms.inter)
        MTC_CHECK_GOTO(mtc_mem_calloc((size_t)(d->layout.numel / d->layout.dp + 1), sizeof(float),
                                      (void **)&f->acc),
                       rc, fail);
    f->rs_b = f->last_lo = f->last_hi = f->pref = -1, f->dir = -1;
    f->npages = (size_t)((d->layout.numel + page - 1) / page);
    MTC_CHECK_GOTO(mtc_mem_calloc(f->npages ? f->npages : 1, 1, (void **)&f->vec), rc, fail);
#ifdef MADV_NOHUGEPAGE /* a huge page would keep a released shard resident */
    if (d->layout.numel > 0) {
        size_t bytes = f->npages * (size_t)page * sizeof(float);
        (void)madvise(d->params, bytes, MADV_NOHUGEPAGE);
        (void)madvise(d->grads, bytes, MADV_NOHUGEPAGE);
    }
#endif
    for (int b = 0; b < f->nb; b++)
        f->gathered[b] = 1; /* every rank starts with the whole model */
    size_t most = 0;
    for (int b = 0; b < f->nb; b++) {
        dp_range r[2];
        fsdp_outside(f, b, r);
        size_t n = (size_t)(r[0].end - r[0].start + r[1].end - r[1].start) * sizeof(float);
        most = n > most ? n : most;
    }
    for (int w = 0; w < 2 && most > 0; w++) { /* address space only: no page is touched */
        void *a = mmap(NULL, most * FSDP_POOL_SLOTS, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (a == MAP_FAILED) continue; /* no pool: every release goes back to the OS */
#ifdef MADV_NOHUGEPAGE
        (void)madvise(a, most * FSDP_POOL_SLOTS, MADV_NOHUGEPAGE);
#endif
        f->pool[w].area = a, f->pool[w].slot_bytes = most;
    }
    *out = f;
    return MTC_OK;
fail:
    mtc_fsdp_free(f);
    return rc;
}

static mtc_result_t fsdp_wait_rs(mtc_fsdp *f);

void mtc_fsdp_free(mtc_fsdp *f) {
    if (!f) return;
    for (int b = 0; f->ag && b < f->nb; b++)
        (void)mtc_request_wait(&f->ag[b]);
    (void)fsdp_wait_rs(f);
    for (int w = 0; w < 2; w++)
        if (f->pool[w].area) munmap(f->pool[w].area, f->pool[w].slot_bytes * FSDP_POOL_SLOTS);
    free(f->ag), free(f->acc), free(f->g16), free(f->ag_t0);
    free(f->gathered), free(f->need_cur), free(f->need_prev), free(f->nready);
    free(f->nreduced), free(f->ready), free(f->vec), free(f->widen);
    free(f);
}

void mtc_fsdp_set_overlap(mtc_fsdp *f, int overlap_param_gather, int overlap_grad_reduce) {
    f->overlap_param_gather = overlap_param_gather != 0;
    f->overlap_grad_reduce = overlap_grad_reduce != 0;
}

mtc_result_t mtc_fsdp_set_grad_reduce_bf16(mtc_fsdp *f) {
    mtc_ddp *d = f->d;
    if (f->g16) return MTC_OK;
    MTC_CHECK(
        mtc_mem_calloc((size_t)(mtc_fsdp_max_unit(f) + 1), sizeof(mtc_bf16), (void **)&f->g16));
    if (!f->acc)
        MTC_CHECK(mtc_mem_calloc((size_t)(d->layout.numel / d->layout.dp + 1), sizeof(float),
                                 (void **)&f->acc));
    return MTC_OK;
}

void mtc_fsdp_set_double_buffer(mtc_fsdp *f) { f->persistent = 1; }

void mtc_fsdp_begin_pass(mtc_fsdp *f, int backward) {
    f->backward = backward != 0, f->phased = 1;
    f->dir = backward ? +1 : -1;
}

void mtc_fsdp_set_trace(mtc_fsdp *f, mtc_trace *t, const char *label) {
    if (f->trace || !t) return;
    f->trace = t;
    snprintf(f->label, sizeof f->label, "%s", label ? label : "");
    char name[64];
    snprintf(name, sizeof name, "FSDP units%s%s", f->label[0] ? " " : "", f->label);
    f->track = mtc_trace_new_track(t, name);
}

/* The span of bucket b's collective `what` from t0 to now. */
static void fsdp_span(mtc_fsdp *f, const char *what, int b, uint64_t t0, int prefetch) {
    if (!t0 || !mtc_trace_recording(f->trace)) return;
    dp_range bk = f->d->layout.bucket[b];
    char name[64], args[160];
    snprintf(name, sizeof name, "%s unit %d", what, b);
    snprintf(args, sizeof args,
             "\"unit\": %d, \"elements\": %lld, \"prefetch\": %d, \"backward\": %d", b,
             (long long)(bk.end - bk.start), prefetch, f->backward);
    mtc_trace_span(f->trace, f->track, name, "fsdp", t0, mtc_time_ns(), args);
}

/* Wait for bucket b's all-gather if one runs (the span of a prefetch
 * ends); a bf16 gather's unit widened into the compute copy. */
static mtc_result_t fsdp_wait_ag(mtc_fsdp *f, int b) {
    MTC_CHECK(mtc_request_wait(&f->ag[b]));
    if (f->ag_t0[b]) fsdp_span(f, "all-gather", b, f->ag_t0[b], 1), f->ag_t0[b] = 0;
    if (f->widen && f->widen[b]) {
        dp_range bk = f->d->layout.bucket[b];
        nn_bf16_to_f32(f->pc + bk.start, f->p16 + bk.start, (size_t)(bk.end - bk.start));
        f->widen[b] = 0;
    }
    return MTC_OK;
}

mtc_result_t mtc_fsdp_set_compute_copies(mtc_fsdp *f, float *pc, mtc_bf16 *p16, int f16) {
    if (!mtc_fsdp_shards_params(f) || !pc) return MTC_OK;
    if (p16 && f16)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "FSDP compute copies: a bf16 copy of fp16 values");
    MTC_CHECK(mtc_mem_calloc((size_t)(f->nb > 0 ? f->nb : 1), 1, (void **)&f->widen));
#ifdef MADV_NOHUGEPAGE /* as the buffers: a huge page would keep a released range resident */
    if (f->d->layout.numel > 0) {
        size_t bytes = f->npages * (size_t)fsdp_page_floats() * sizeof(float);
        (void)madvise(pc, bytes, MADV_NOHUGEPAGE);
        if (!p16) goto done;
        size_t page = (size_t)fsdp_page_floats() * sizeof(float); /* p16: its whole pages */
        uintptr_t lo = (uintptr_t)p16 / page * page;
        (void)madvise((void *)lo, (uintptr_t)p16 + bytes / 2 - lo, MADV_NOHUGEPAGE);
    }
done:
#endif
    f->pc = pc, f->p16 = p16, f->f16 = f16;
    return MTC_OK;
}

/* The fp32 params outside the shards given back (after mtc_fsdp_gather_all
 * with compute copies: the units gather into those, not into params). */
static void fsdp_release_fp32(mtc_fsdp *f) {
    for (int b = 0; f->pc && b < f->nb; b++) {
        dp_range r[2];
        fsdp_outside(f, b, r);
        fsdp_release(f->d->params, r[0].start, r[0].end);
        fsdp_release(f->d->params, r[1].start, r[1].end);
    }
    f->fp32_whole = 0;
}

/* The bf16 copy's whole pages in [a, b) elements given back. */
static void fsdp_release16(mtc_fsdp *f, int64_t a, int64_t b) {
    size_t page = (size_t)fsdp_page_floats() * sizeof(float);
    uintptr_t lo = ((uintptr_t)(f->p16 + a) + page - 1) / page * page;
    uintptr_t hi = (uintptr_t)(f->p16 + b) / page * page;
    if (b > a && hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* Release bucket b's params outside the shard (after its all-gather); the
 * bf16 copy's too (its whole pages: a shard ends mid-page in bf16). */
static mtc_result_t fsdp_drop(mtc_fsdp *f, int b) {
    MTC_CHECK(fsdp_wait_ag(f, b));
    fsdp_release_bucket(f, FSDP_PARAMS, b);
    if (f->p16) {
        dp_range r[2];
        fsdp_outside(f, b, r);
        fsdp_release16(f, r[0].start, r[0].end), fsdp_release16(f, r[1].start, r[1].end);
    }
    f->gathered[b] = 0;
    return MTC_OK;
}

void mtc_fsdp_attach_optimizer(mtc_fsdp *f, mtc_distopt *o) {
    f->opt = o;
    f->seen_step = o ? o->step : 0;
    if (o && mtc_fsdp_shards_params(f)) o->no_gather = 1;
}

void mtc_fsdp_shard(mtc_fsdp *f) {
    if (!f->setup_bytes) /* the first: what set-up made resident */
        f->setup_bytes = fsdp_resident(f, f->d->params) + fsdp_resident(f, f->d->grads) +
                         (f->pc ? fsdp_resident(f, f->pc) + fsdp_resident16(f) : 0);
    for (int b = 0; b < f->nb; b++) {
        if (mtc_fsdp_shards_params(f)) (void)fsdp_drop(f, b);
        fsdp_release_bucket(f, FSDP_GRADS, b);
    }
    fsdp_release_fp32(f);
    memset(f->need_cur, 0, (size_t)f->nb), memset(f->need_prev, 0, (size_t)f->nb);
    fsdp_pool_trim(f);
    f->peak_param = f->peak_grad = 0;
    fsdp_sample(f);
}

/* comm: all-gather(intra) of bucket b's shards in place; `start`: leave
 * it running (a prefetch), else wait for it (one already running too). */
static mtc_result_t fsdp_gather(mtc_fsdp *f, int b, int start) {
    mtc_ddp *d = f->d;
    if (f->gathered[b] == 1) return start ? MTC_OK : fsdp_wait_ag(f, b);
    dp_range bk = d->layout.bucket[b];
    size_t shard = (size_t)(bk.end - bk.start) / (size_t)d->layout.dp;
    float *base = d->params + bk.start;
    uint64_t t0 = f->trace ? mtc_time_ns() : 0;
    if (f->gathered[b] == 2) /* stale: its pages stay, the gather overwrites them */
        MTC_CHECK(fsdp_wait_ag(f, b));
    else
        fsdp_acquire(f, FSDP_PARAMS, b);
    f->gathers++;
    if (f->pc && !f->p16) { /* the shard rounded into pc, gathered there (fp32 storage) */
        float *c = f->pc + bk.start;
        size_t own = (size_t)d->shard_rank * shard;
        if (f->f16)
            nn_round_f16_to(c + own, base + own, shard);
        else
            nn_round_bf16_to(c + own, base + own, shard);
        if (d->comms.intra && start) {
            MTC_CHECK(
                mtc_all_gather_start(c + own, c, shard, MTC_DTYPE_F32, d->comms.intra, &f->ag[b]));
            f->ag_t0[b] = t0;
        } else if (d->comms.intra) {
            MTC_CHECK(mtc_all_gather(c + own, c, shard, MTC_DTYPE_F32, d->comms.intra));
            fsdp_span(f, "all-gather", b, t0, 0);
        }
    } else if (f->pc) { /* bf16: the shard rounded, gathered as bf16, widened (at the wait) */
        mtc_bf16 *b16 = f->p16 + bk.start;
        size_t own = (size_t)d->shard_rank * shard;
        nn_f32_to_bf16(b16 + own, base + own, shard);
        f->widen[b] = 1;
        if (d->comms.intra && start) {
            MTC_CHECK(mtc_all_gather_start(b16 + own, b16, shard, MTC_DTYPE_BF16, d->comms.intra,
                                           &f->ag[b]));
            f->ag_t0[b] = t0;
        } else {
            if (d->comms.intra)
                MTC_CHECK(mtc_all_gather(b16 + own, b16, shard, MTC_DTYPE_BF16, d->comms.intra));
            MTC_CHECK(fsdp_wait_ag(f, b)); /* the widening */
            fsdp_span(f, "all-gather", b, t0, 0);
        }
    } else if (d->comms.intra) {
        if (start) {
            MTC_CHECK(mtc_all_gather_start(base + (size_t)d->shard_rank * shard, base, shard,
                                           MTC_DTYPE_F32, d->comms.intra, &f->ag[b]));
            f->ag_t0[b] = t0;
        } else {
            MTC_CHECK(mtc_all_gather(base + (size_t)d->shard_rank * shard, base, shard,
                                     MTC_DTYPE_F32, d->comms.intra));
            fsdp_span(f, "all-gather", b, t0, 0);
        }
    }
    f->gathered[b] = 1;
    return MTC_OK;
}

/* HFSDP after the optimizer step: comm: all-gather(inter-instance group)
 * of every unit's updated optimizer slices into the whole shard, in
 * place, forward order (last bucket first). */
static mtc_result_t fsdp_outer_gather(mtc_fsdp *f) {
    mtc_ddp *d = f->d;
    for (int b = f->nb - 1; f->outer > 1 && b >= 0; b--) {
        dp_range s = dp_layout_shard_range(&d->layout, d->shard_rank, b);
        size_t w = (size_t)(s.end - s.start) / (size_t)f->outer;
        float *base = d->params + s.start;
        uint64_t t0 = f->trace ? mtc_time_ns() : 0;
        MTC_CHECK(mtc_all_gather(base + (size_t)f->outer_rank * w, base, w, MTC_DTYPE_F32,
                                 d->comms.inter));
        fsdp_span(f, "outer all-gather", b, t0, 0);
    }
    return MTC_OK;
}

/* HFSDP after the last microbatch: comm: reduce-scatter(inter-instance
 * group) of every unit's shard (summed over the instance's ranks and
 * microbatches) into this rank's optimizer slice, in place. */
static mtc_result_t fsdp_outer_reduce(mtc_fsdp *f) {
    mtc_ddp *d = f->d;
    for (int b = 0; f->outer > 1 && b < f->nb; b++) {
        dp_range s = dp_layout_shard_range(&d->layout, d->shard_rank, b);
        size_t w = (size_t)(s.end - s.start) / (size_t)f->outer;
        float *g = d->grads + s.start;
        uint64_t t0 = f->trace ? mtc_time_ns() : 0;
        MTC_CHECK(mtc_reduce_scatter(g, g + (size_t)f->outer_rank * w, w, MTC_DTYPE_F32, MTC_OP_SUM,
                                     d->comms.inter));
        fsdp_span(f, "outer reduce-scatter", b, t0, 0);
    }
    return MTC_OK;
}

mtc_result_t mtc_fsdp_set_outer_optim(mtc_fsdp *f) {
    mtc_ddp *d = f->d;
    int n = d->comms.inter ? mtc_comm_size(d->comms.inter) : 1;
    if (n < 2) return MTC_OK; /* one instance: nothing outside it to shard over */
    if (!mtc_fsdp_shards_params(f) || !f->opt)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "HFSDP (outer strategy optim) needs optim_grads_params with its "
                         "optimizer attached");
    int64_t page = fsdp_page_floats();
    for (int b = 0; b < f->nb; b++)
        if ((d->layout.bucket[b].end - d->layout.bucket[b].start) % (page * d->layout.dp * n))
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "FSDP unit %d is not padded to whole pages per optimizer slice of "
                             "%d x %d ranks (lay it out with mtc_fsdp_pad_divisor(%d))",
                             b, d->layout.dp, n, d->layout.dp * n);
    MTC_CHECK(mtc_distopt_narrow(f->opt, mtc_comm_rank(d->comms.inter), n));
    f->outer = n, f->outer_rank = mtc_comm_rank(d->comms.inter);
    if (!f->g16) free(f->acc), f->acc = NULL; /* no per-microbatch sum over the instances */
    return MTC_OK;
}

/* A new optimizer step since the units were gathered: they are stale.
 * They keep their pages (no release into the pool and no refill): a stale
 * unit needed again is re-gathered in place, one not needed is released by
 * the usual rule, so the resident units are those the backward left. */
static mtc_result_t fsdp_check_step(mtc_fsdp *f) {
    if (!f->opt || f->opt->step == f->seen_step) return MTC_OK;
    f->seen_step = f->opt->step;
    f->pref = -1;
    MTC_CHECK(fsdp_outer_gather(f));
    for (int b = 0; b < f->nb; b++)
        if (f->gathered[b]) f->gathered[b] = 2;
    return MTC_OK;
}

mtc_result_t mtc_fsdp_params_needed(mtc_fsdp *f, int first, int last) {
    const dp_layout *l = &f->d->layout;
    /* the pass writes a unit's gradients only after it needed the unit:
     * a reduce-scatter still running on them must finish first */
    for (int p = first < 0 ? 0 : first; f->rs && p < last && p < l->nparams; p++)
        if (l->param_bucket[p] == f->rs_b) MTC_CHECK(fsdp_wait_rs(f));
    if (f->backward) /* the unit's gradients are written next: pages from the pool */
        for (int p = first < 0 ? 0 : first; p < last && p < l->nparams; p++) {
            int b = l->param_bucket[p];
            if (b >= 0 && (p == first || b != l->param_bucket[p - 1]))
                fsdp_acquire(f, FSDP_GRADS, b);
        }
    if (!mtc_fsdp_shards_params(f)) return MTC_OK;
    MTC_CHECK(fsdp_check_step(f));
    if (f->fp32_whole) fsdp_release_fp32(f);
    /* a call needing exactly the units of the one before (an untied head's
     * norm and output layer; the backward's first call after the forward's
     * last) is the same need: the window does not move, so the unit before
     * stays (it is needed next in the backward) */
    int same = 1, ncur = 0, nnew = 0;
    for (int b = 0; b < f->nb; b++)
        ncur += f->need_cur[b];
    for (int p = first < 0 ? 0 : first; p < last && p < l->nparams; p++) {
        int b = l->param_bucket[p];
        if (b >= 0 && (p == first || b != l->param_bucket[p - 1])) nnew++, same &= f->need_cur[b];
    }
    if (!(same && nnew == ncur && nnew > 0)) {
        unsigned char *t = f->need_prev; /* the call before becomes prev */
        f->need_prev = f->need_cur, f->need_cur = t;
        memset(f->need_cur, 0, (size_t)f->nb);
        for (int p = first < 0 ? 0 : first; p < last && p < l->nparams; p++)
            if (l->param_bucket[p] >= 0) f->need_cur[l->param_bucket[p]] = 1;
    }
    int lo = f->nb, hi = -1;
    for (int b = 0; b < f->nb; b++)
        if (f->need_cur[b]) lo = b < lo ? b : lo, hi = b;
    if (hi < 0) return MTC_OK;
    /* without mtc_fsdp_begin_pass: the direction from the order of the calls
     * (a tied head's call for the embedding in between misleads it) */
    if (!f->phased && f->last_lo >= 0 && hi < f->last_lo) f->dir = -1; /* forward */
    if (!f->phased && f->last_lo >= 0 && lo > f->last_hi) f->dir = +1; /* backward */
    f->last_lo = lo, f->last_hi = hi;
    for (int b = 0; b < f->nb; b++) /* release first: the peak stays at two units */
        if (f->gathered[b] && !f->need_cur[b] && !f->need_prev[b]) MTC_CHECK(fsdp_drop(f, b));
    /* forward order (last bucket first), as every rank issues them */
    for (int b = f->nb - 1; b >= 0; b--)
        if (f->need_cur[b]) MTC_CHECK(fsdp_gather(f, b, 0));
    /* --overlap-param-gather: the next unit of the pass gathers while this one computes */
    int next = f->dir < 0 ? lo - 1 : hi + 1;
    f->pref = -1;
    if (f->overlap_param_gather && next >= 0 && next < f->nb) {
        MTC_CHECK(fsdp_gather(f, next, 1));
        f->pref = next;
        f->need_cur[next] = 1; /* kept by the next call's release */
    }
    fsdp_pool_trim(f); /* pages no unit took go back */
    fsdp_sample(f);
    return MTC_OK;
}

mtc_result_t mtc_fsdp_gather_all(mtc_fsdp *f) {
    if (!mtc_fsdp_shards_params(f)) return MTC_OK;
    MTC_CHECK(fsdp_check_step(f));
    mtc_ddp *d = f->d;
    for (int b = f->nb - 1; f->pc && b >= 0; b--) { /* readers want the fp32 params whole */
        dp_range bk = d->layout.bucket[b];
        size_t shard = (size_t)(bk.end - bk.start) / (size_t)d->layout.dp;
        float *base = d->params + bk.start;
        if (d->comms.intra)
            MTC_CHECK(mtc_all_gather(base + (size_t)d->shard_rank * shard, base, shard,
                                     MTC_DTYPE_F32, d->comms.intra));
        f->fp32_whole = 1;
    }
    for (int b = f->nb - 1; b >= 0; b--)
        MTC_CHECK(fsdp_gather(f, b, 0));
    fsdp_pool_trim(f);
    return MTC_OK;
}

/* After bucket b's reduce-scatter: the shard holds acc + this microbatch's
 * sum (fp32), or with --grad-reduce-in-bf16 the sum sits in the bf16
 * staging. HSDP (several optimizer instances, outer no_shard): the shard
 * replicated over the instances, the microbatch's sum added up over them;
 * the all-reduce must add only the new part, so acc is taken out first and
 * put back after. bf16: the new part widened and added to acc in fp32 (the
 * inter-instance all-reduce stays fp32).
 * comm: all-reduce(inter-instance group) of the shard. */
static mtc_result_t fsdp_reduce_post(mtc_fsdp *f, int b) {
    mtc_ddp *d = f->d;
    if (!f->acc) return MTC_OK;
    dp_range s = dp_layout_shard_range(&d->layout, d->shard_rank, b);
    float *g = d->grads + s.start, *acc = f->acc + d->layout.bucket[b].start / d->layout.dp;
    size_t n = (size_t)(s.end - s.start);
    if (f->g16)
        nn_bf16_to_f32(g, f->g16 + (size_t)d->shard_rank * n, n);
    else
        for (size_t i = 0; i < n; i++)
            g[i] -= acc[i];
    if (d->comms.inter && f->outer == 1) /* HFSDP reduces over the instances in finish */
        MTC_CHECK(mtc_all_reduce(g, g, n, MTC_DTYPE_F32, MTC_OP_SUM, d->comms.inter));
    for (size_t i = 0; i < n; i++)
        g[i] += acc[i], acc[i] = g[i];
    return MTC_OK;
}

/* The reduce-scatter in flight finished: its bucket's other pages go back. */
static mtc_result_t fsdp_wait_rs(mtc_fsdp *f) {
    if (f->rs_b < 0) return MTC_OK;
    mtc_result_t rc = mtc_request_wait(&f->rs);
    if (rc == MTC_OK) rc = fsdp_reduce_post(f, f->rs_b);
    fsdp_span(f, "reduce-scatter", f->rs_b, f->rs_t0, 0);
    fsdp_release_bucket(f, FSDP_GRADS, f->rs_b);
    f->rs_b = -1;
    return rc;
}

/* comm: reduce-scatter(intra) of bucket b's grads in place into the shard
 * (left running with --overlap-grad-reduce until the next one starts). */
static mtc_result_t fsdp_reduce(mtc_fsdp *f, int b) {
    mtc_ddp *d = f->d;
    dp_range bk = d->layout.bucket[b];
    size_t shard = (size_t)(bk.end - bk.start) / (size_t)d->layout.dp;
    float *g = d->grads + bk.start;
    fsdp_sample(f); /* the unit's gradients are all resident now */
    MTC_CHECK(fsdp_wait_rs(f));
    uint64_t t0 = f->trace ? mtc_time_ns() : 0;
    void *buf = g;
    mtc_dtype_t dt = MTC_DTYPE_F32;
    size_t esz = sizeof(float);
    if (f->g16) { /* --grad-reduce-in-bf16: this microbatch's part rounded, reduced as bf16 */
        float *own = g + (size_t)d->shard_rank * shard;
        const float *acc = f->acc + bk.start / d->layout.dp;
        for (size_t i = 0; i < shard; i++)
            own[i] -= acc[i];
        nn_f32_to_bf16(f->g16, g, shard * (size_t)d->layout.dp);
        buf = f->g16, dt = MTC_DTYPE_BF16, esz = sizeof(mtc_bf16);
    }
    char *own = (char *)buf + (size_t)d->shard_rank * shard * esz;
    if (d->comms.intra && f->overlap_grad_reduce) {
        MTC_CHECK(
            mtc_reduce_scatter_start(buf, own, shard, dt, MTC_OP_SUM, d->comms.intra, &f->rs));
        f->rs_b = b, f->rs_t0 = t0;
    } else {
        if (d->comms.intra)
            MTC_CHECK(mtc_reduce_scatter(buf, own, shard, dt, MTC_OP_SUM, d->comms.intra));
        MTC_CHECK(fsdp_reduce_post(f, b));
        fsdp_span(f, "reduce-scatter", b, t0, 0);
        fsdp_release_bucket(f, FSDP_GRADS, b);
    }
    const dp_layout *l = &d->layout;
    for (int k = l->bucket_param_off[b]; k < l->bucket_param_off[b + 1]; k++)
        f->ready[l->bucket_params[k]] = 0;
    f->nready[b] = 0, f->nreduced[b]++;
    return MTC_OK;
}

mtc_result_t mtc_fsdp_grads_ready(mtc_fsdp *f, int first, int last) {
    const dp_layout *l = &f->d->layout;
    for (int p = last - 1; p >= first; p--) {
        if (p < 0 || p >= l->nparams || l->param_bucket[p] < 0) continue;
        if (f->ready[p])
            return mtc_error(MTC_ERR_INVALID_USAGE,
                             "param %d marked grad-ready twice in one microbatch", p);
        int b = l->param_bucket[p];
        f->ready[p] = 1;
        if (++f->nready[b] == l->bucket_param_off[b + 1] - l->bucket_param_off[b])
            MTC_CHECK(fsdp_reduce(f, b));
    }
    return MTC_OK;
}

void mtc_fsdp_zero_grad(mtc_fsdp *f) {
    const dp_layout *l = &f->d->layout;
    (void)fsdp_wait_rs(f); /* a failure was returned by the step's finish already */
    for (int b = 0; b < f->nb; b++) {
        dp_range s = dp_layout_shard_range(l, f->d->shard_rank, b);
        memset(f->d->grads + s.start, 0, (size_t)(s.end - s.start) * sizeof(float));
        if (f->acc)
            memset(f->acc + l->bucket[b].start / l->dp, 0,
                   (size_t)(s.end - s.start) * sizeof(float));
        fsdp_release_bucket(f, FSDP_GRADS, b);
        f->nready[b] = f->nreduced[b] = 0;
    }
    memset(f->ready, 0, (size_t)l->nparams);
    fsdp_pool_trim(f);
}

mtc_result_t mtc_fsdp_finish(mtc_fsdp *f) {
    MTC_CHECK(fsdp_wait_rs(f));
    f->backward = 0;
    fsdp_pool_trim(f); /* the last units' gradient pages: the optimizer step does not need them */
    for (int b = 0; b < f->nb; b++)
        if (f->nready[b] || !f->nreduced[b])
            return mtc_error(MTC_ERR_INVALID_USAGE,
                             "FSDP unit (bucket %d) has %d of its params ready and was reduced %d "
                             "times this step; the backward must mark every param of every unit",
                             b, f->nready[b], f->nreduced[b]);
    return fsdp_outer_reduce(f);
}

int mtc_fsdp_held_grad(const mtc_fsdp *f, int p, float **g, size_t *n) {
    const dp_layout *l = &f->d->layout;
    *g = NULL, *n = 0;
    if (p < 0 || p >= l->nparams || l->param_bucket[p] < 0) return -1;
    dp_range s = dp_layout_shard_range(l, f->d->shard_rank, l->param_bucket[p]), r = l->param[p];
    int64_t w = (s.end - s.start) / f->outer; /* HFSDP: the optimizer slice alone is reduced */
    s.start += f->outer_rank * w, s.end = s.start + w;
    int64_t a = r.start > s.start ? r.start : s.start, b = r.end < s.end ? r.end : s.end;
    *g = f->d->grads + a;
    *n = b > a ? (size_t)(b - a) : 0;
    return 0;
}

void mtc_fsdp_memory(const mtc_fsdp *f, mtc_dp_memory *out) {
    out->param_bytes = f->peak_param;
    out->grad_bytes = f->peak_grad;
    /* the optimizer's pieces: the shard's, or HFSDP's slice of it */
    out->optim_state_bytes =
        2 * (size_t)(f->opt ? f->opt->n : mtc_ddp_held_numel(f->d)) * sizeof(float);
}

size_t mtc_fsdp_setup_bytes(const mtc_fsdp *f) { return f->setup_bytes; }

int64_t mtc_fsdp_max_unit(const mtc_fsdp *f) {
    int64_t m = 0;
    for (int b = 0; b < f->nb; b++) {
        int64_t n = f->d->layout.bucket[b].end - f->d->layout.bucket[b].start;
        if (n > m) m = n;
    }
    return m;
}
