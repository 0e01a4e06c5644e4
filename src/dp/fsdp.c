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
 * says what is resident. Relies on dp/ddp.h, dp/distopt.h, comm/. Does
 * not: prefetch, overlap, reduce in bf16, or shard over several optimizer
 * instances (HSDP). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "dp/fsdp.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/mem.h"
#include "dp/distopt.h"
#include "model/model.h"

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

static int64_t fsdp_page_floats(void) {
    long page = sysconf(_SC_PAGESIZE);
    return (page > 0 ? page : 4096) / (int64_t)sizeof(float);
}

int64_t mtc_fsdp_pad_divisor(int dp) { return (int64_t)(dp > 0 ? dp : 1) * fsdp_page_floats(); }

struct mtc_fsdp {
    mtc_ddp *d;
    mtc_distopt *opt; /* the optimizer of the shards (set by mtc_fsdp_attach_optimizer) */
    int strategy;
    int nb;                       /* buckets = units */
    unsigned char *gathered;      /* [nb] params resident outside the shard */
    unsigned char *need_cur;      /* [nb] needed by the last params_needed call */
    unsigned char *need_prev;     /* [nb] ... and by the one before */
    int *nready;                  /* [nb] params marked ready this microbatch */
    int *nreduced;                /* [nb] reduce-scatters since zero_grad */
    unsigned char *ready;         /* [nparams] */
    int64_t seen_step;            /* the optimizer step the gathered units are from */
    size_t peak_param, peak_grad; /* resident bytes seen */
    unsigned char *vec;           /* mincore's page vector */
    size_t npages;
};

int mtc_fsdp_shards_params(const mtc_fsdp *f) { return f->strategy == MTC_FSDP_OPTIM_GRADS_PARAMS; }

/* Give back the pages of buf [a, b) (floats; page-aligned by the layout). */
static void fsdp_release(float *buf, int64_t a, int64_t b) {
    if (b <= a) return;
    (void)madvise(buf + a, (size_t)(b - a) * sizeof(float), MADV_DONTNEED);
}

/* Release bucket b of buf outside this rank's shard. */
static void fsdp_release_bucket(mtc_fsdp *f, float *buf, int b) {
    const dp_layout *l = &f->d->layout;
    dp_range bk = l->bucket[b], s = dp_layout_shard_range(l, f->d->shard_rank, b);
    fsdp_release(buf, bk.start, s.start);
    fsdp_release(buf, s.end, bk.end);
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

static void fsdp_sample(mtc_fsdp *f) {
    size_t p = fsdp_resident(f, f->d->params), g = fsdp_resident(f, f->d->grads);
    if (p > f->peak_param) f->peak_param = p;
    if (g > f->peak_grad) f->peak_grad = g;
}

mtc_result_t mtc_fsdp_init(mtc_ddp *d, int strategy, mtc_fsdp **out) {
    *out = NULL;
    if (strategy != MTC_FSDP_OPTIM_GRADS && strategy != MTC_FSDP_OPTIM_GRADS_PARAMS)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "mtc_fsdp serves optim_grads and optim_grads_params, not %s",
                         mtc_fsdp_strategy_name(strategy));
    if (!d->cfg.use_distopt || d->instances > 1 || d->cfg.overlap_grad_reduce)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "mtc_fsdp needs a distributed-optimizer buffer of one instance without "
                         "its own overlap (got use_distopt %d, %d instances, overlap %d)",
                         d->cfg.use_distopt, d->instances, d->cfg.overlap_grad_reduce);
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
    f->d = d, f->strategy = strategy, f->nb = d->layout.nbuckets;
    size_t nb = (size_t)(f->nb > 0 ? f->nb : 1), np = (size_t)d->layout.nparams + 1;
    MTC_CHECK_GOTO(mtc_mem_calloc(nb, 1, (void **)&f->gathered), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_calloc(nb, 1, (void **)&f->need_cur), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_calloc(nb, 1, (void **)&f->need_prev), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_calloc(nb, sizeof(int), (void **)&f->nready), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_calloc(nb, sizeof(int), (void **)&f->nreduced), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_calloc(np, 1, (void **)&f->ready), rc, fail);
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
    *out = f;
    return MTC_OK;
fail:
    mtc_fsdp_free(f);
    return rc;
}

void mtc_fsdp_free(mtc_fsdp *f) {
    if (!f) return;
    free(f->gathered), free(f->need_cur), free(f->need_prev), free(f->nready);
    free(f->nreduced), free(f->ready), free(f->vec);
    free(f);
}

void mtc_fsdp_attach_optimizer(mtc_fsdp *f, mtc_distopt *o) {
    f->opt = o;
    f->seen_step = o ? o->step : 0;
    if (o && mtc_fsdp_shards_params(f)) o->no_gather = 1;
}

void mtc_fsdp_shard(mtc_fsdp *f) {
    for (int b = 0; b < f->nb; b++) {
        if (mtc_fsdp_shards_params(f)) fsdp_release_bucket(f, f->d->params, b), f->gathered[b] = 0;
        fsdp_release_bucket(f, f->d->grads, b);
    }
    memset(f->need_cur, 0, (size_t)f->nb), memset(f->need_prev, 0, (size_t)f->nb);
    f->peak_param = f->peak_grad = 0;
    fsdp_sample(f);
}

/* comm: all-gather(intra) of bucket b's shards in place. */
static mtc_result_t fsdp_gather(mtc_fsdp *f, int b) {
    mtc_ddp *d = f->d;
    if (f->gathered[b]) return MTC_OK;
    dp_range bk = d->layout.bucket[b];
    size_t shard = (size_t)(bk.end - bk.start) / (size_t)d->layout.dp;
    float *base = d->params + bk.start;
    if (d->comms.intra)
        MTC_CHECK(mtc_all_gather(base + (size_t)d->shard_rank * shard, base, shard, MTC_DTYPE_F32,
                                 d->comms.intra));
    f->gathered[b] = 1;
    return MTC_OK;
}

/* A new optimizer step since the units were gathered: drop them. */
static void fsdp_check_step(mtc_fsdp *f) {
    if (!f->opt || f->opt->step == f->seen_step) return;
    f->seen_step = f->opt->step;
    for (int b = 0; b < f->nb; b++)
        if (f->gathered[b]) fsdp_release_bucket(f, f->d->params, b), f->gathered[b] = 0;
}

mtc_result_t mtc_fsdp_params_needed(mtc_fsdp *f, int first, int last) {
    if (!mtc_fsdp_shards_params(f)) return MTC_OK;
    fsdp_check_step(f);
    const dp_layout *l = &f->d->layout;
    unsigned char *t = f->need_prev; /* the call before becomes prev */
    f->need_prev = f->need_cur, f->need_cur = t;
    memset(f->need_cur, 0, (size_t)f->nb);
    for (int p = first < 0 ? 0 : first; p < last && p < l->nparams; p++)
        if (l->param_bucket[p] >= 0) f->need_cur[l->param_bucket[p]] = 1;
    for (int b = 0; b < f->nb; b++) /* release first: the peak stays at two units */
        if (f->gathered[b] && !f->need_cur[b] && !f->need_prev[b])
            fsdp_release_bucket(f, f->d->params, b), f->gathered[b] = 0;
    /* forward order (last bucket first), as every rank issues them */
    for (int b = f->nb - 1; b >= 0; b--)
        if (f->need_cur[b]) MTC_CHECK(fsdp_gather(f, b));
    fsdp_sample(f);
    return MTC_OK;
}

mtc_result_t mtc_fsdp_gather_all(mtc_fsdp *f) {
    if (!mtc_fsdp_shards_params(f)) return MTC_OK;
    fsdp_check_step(f);
    for (int b = f->nb - 1; b >= 0; b--)
        MTC_CHECK(fsdp_gather(f, b));
    return MTC_OK;
}

/* comm: reduce-scatter(intra) of bucket b's grads in place into the shard. */
static mtc_result_t fsdp_reduce(mtc_fsdp *f, int b) {
    mtc_ddp *d = f->d;
    dp_range bk = d->layout.bucket[b];
    size_t shard = (size_t)(bk.end - bk.start) / (size_t)d->layout.dp;
    float *g = d->grads + bk.start;
    fsdp_sample(f); /* the unit's gradients are all resident now */
    if (d->comms.intra)
        MTC_CHECK(mtc_reduce_scatter(g, g + (size_t)d->shard_rank * shard, shard, MTC_DTYPE_F32,
                                     MTC_OP_SUM, d->comms.intra));
    fsdp_release_bucket(f, d->grads, b);
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
    for (int b = 0; b < f->nb; b++) {
        dp_range s = dp_layout_shard_range(l, f->d->shard_rank, b);
        memset(f->d->grads + s.start, 0, (size_t)(s.end - s.start) * sizeof(float));
        fsdp_release_bucket(f, f->d->grads, b);
        f->nready[b] = f->nreduced[b] = 0;
    }
    memset(f->ready, 0, (size_t)l->nparams);
}

mtc_result_t mtc_fsdp_finish(mtc_fsdp *f) {
    for (int b = 0; b < f->nb; b++)
        if (f->nready[b] || !f->nreduced[b])
            return mtc_error(MTC_ERR_INVALID_USAGE,
                             "FSDP unit (bucket %d) has %d of its params ready and was reduced %d "
                             "times this step; the backward must mark every param of every unit",
                             b, f->nready[b], f->nreduced[b]);
    return MTC_OK;
}

void mtc_fsdp_memory(const mtc_fsdp *f, mtc_dp_memory *out) {
    out->param_bytes = f->peak_param;
    out->grad_bytes = f->peak_grad;
    out->optim_state_bytes = 2 * (size_t)mtc_ddp_held_numel(f->d) * sizeof(float);
}

int64_t mtc_fsdp_max_unit(const mtc_fsdp *f) {
    int64_t m = 0;
    for (int b = 0; b < f->nb; b++) {
        int64_t n = f->d->layout.bucket[b].end - f->d->layout.bucket[b].start;
        if (n > m) m = n;
    }
    return m;
}
