/* optim/optim.c - LR schedule, gradient norm / clipping and the AdamW
 * driver over the flat buffers; see optim.h. Relies on nn_adamw_update,
 * nn_sumsq for the element-wise work; clipping is folded into the update. */
#include "optim/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"

/* 16K floats per pool task: small enough to balance threads, large enough
 * that the task overhead is negligible. */
#define OPTIM_CHUNK ((size_t)1 << 14)

struct optim_chunk {
    size_t offset, n;
    int decay; /* weight decay applies */
    int param; /* registry index */
};

int mtc_lr_style_parse(const char *s) {
    if (!s) return -1;
    if (!strcmp(s, "constant")) return MTC_LR_CONSTANT;
    if (!strcmp(s, "linear")) return MTC_LR_LINEAR;
    if (!strcmp(s, "cosine")) return MTC_LR_COSINE;
    return -1;
}

double mtc_lr_at(const mtc_lr_schedule *s, int64_t step) {
    if (s->warmup_iters > 0 && step <= s->warmup_iters)
        return s->lr * (double)step / (double)s->warmup_iters;
    if (s->style == MTC_LR_CONSTANT) return s->lr;
    if (step > s->decay_iters) return s->min_lr;
    int64_t span = s->decay_iters - s->warmup_iters;
    if (span <= 0) return s->min_lr;
    double r = (double)(step - s->warmup_iters) / (double)span;
    double coeff = s->style == MTC_LR_LINEAR ? 1.0 - r : 0.5 * (cos(M_PI * r) + 1.0);
    return s->min_lr + coeff * (s->lr - s->min_lr);
}

mtc_result_t mtc_adamw_init(mtc_adamw *opt, const mtc_registry *reg) {
    memset(opt, 0, sizeof *opt);
    opt->n = reg->total;
    int count = 0;
    for (int i = 0; i < reg->count; i++)
        count += (int)((reg->params[i].local_numel + OPTIM_CHUNK - 1) / OPTIM_CHUNK);
    mtc_result_t rc;
    MTC_CHECK_GOTO(mtc_mem_calloc((size_t)count, sizeof(optim_chunk), (void **)&opt->chunks), rc,
                   fail);
    MTC_CHECK_GOTO(mtc_mem_alloc_big(opt->n * sizeof(float), 1, (void **)&opt->m), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_alloc_big(opt->n * sizeof(float), 1, (void **)&opt->v), rc, fail);
    /* chunks in buffer order (reverse registration order) */
    for (int i = reg->count - 1; i >= 0; i--) {
        const mtc_param *p = &reg->params[i];
        for (size_t off = 0; off < p->local_numel; off += OPTIM_CHUNK) {
            optim_chunk *c = &opt->chunks[opt->nchunks++];
            c->offset = p->offset + off;
            c->n = p->local_numel - off < OPTIM_CHUNK ? p->local_numel - off : OPTIM_CHUNK;
            c->decay = p->is_2d;
            c->param = i;
        }
    }
    return MTC_OK;
fail:
    mtc_adamw_free(opt);
    return rc;
}

void mtc_adamw_free(mtc_adamw *opt) {
    if (!opt) return;
    mtc_mem_free_big(opt->m, opt->n * sizeof(float));
    mtc_mem_free_big(opt->v, opt->n * sizeof(float));
    free(opt->chunks);
    memset(opt, 0, sizeof *opt);
}

typedef struct {
    mtc_adamw *opt;
    float *params;
    float *grads;
    float lr, scale;
    const mtc_adamw_config *cfg;
} optim_job;

static void adamw_task(int i, void *arg) {
    optim_job *j = arg;
    const optim_chunk *c = &j->opt->chunks[i];
    nn_adamw_update_scaled(j->params + c->offset, j->grads + c->offset, j->opt->m + c->offset,
                           j->opt->v + c->offset, c->n, j->scale, j->lr, j->cfg->beta1,
                           j->cfg->beta2, j->cfg->eps, c->decay ? j->cfg->weight_decay : 0.0f,
                           (int)j->opt->step);
}

void mtc_adamw_step(mtc_adamw *opt, nn_pool *pool, float *params, float *grads, float lr,
                    float grad_scale, const mtc_adamw_config *cfg) {
    opt->step++;
    optim_job j = {
        .opt = opt, .params = params, .grads = grads, .lr = lr, .scale = grad_scale, .cfg = cfg};
    nn_pool_run(pool, opt->nchunks, adamw_task, &j);
}

mtc_result_t mtc_grad_norm_plan_add(mtc_grad_norm_plan *plan, const float *grads, size_t n) {
    for (size_t off = 0; off < n; off += OPTIM_CHUNK) {
        if (plan->n == plan->cap) {
            int cap = plan->cap ? 2 * plan->cap : 64;
            const float **b = realloc(plan->base, (size_t)cap * sizeof *b);
            if (b) plan->base = b;
            size_t *l = realloc(plan->len, (size_t)cap * sizeof *l);
            if (l) plan->len = l;
            double *q = realloc(plan->partial, (size_t)cap * sizeof *q);
            if (q) plan->partial = q;
            if (!b || !l || !q)
                return mtc_error(MTC_ERR_OUT_OF_MEMORY, "gradient-norm plan of %d pieces", cap);
            plan->cap = cap;
        }
        plan->base[plan->n] = grads + off;
        plan->len[plan->n++] = n - off < OPTIM_CHUNK ? n - off : OPTIM_CHUNK;
    }
    return MTC_OK;
}

static void plan_task(int i, void *arg) {
    mtc_grad_norm_plan *plan = arg;
    plan->partial[i] = nn_sumsq(plan->base[i], plan->len[i]);
}

double mtc_grad_norm_sumsq(mtc_grad_norm_plan *plan, nn_pool *pool) {
    nn_pool_run(pool, plan->n, plan_task, plan);
    double s = 0;
    for (int i = 0; i < plan->n; i++)
        s += plan->partial[i];
    return s;
}

void mtc_grad_norm_plan_free(mtc_grad_norm_plan *plan) {
    if (!plan) return;
    free(plan->base), free(plan->len), free(plan->partial);
    memset(plan, 0, sizeof *plan);
}

float mtc_grad_clip_coeff(double norm, float max_norm) {
    if (max_norm <= 0) return 1.0f;
    double coeff = (double)max_norm / (norm + 1e-6);
    return coeff < 1.0 ? (float)coeff : 1.0f;
}
