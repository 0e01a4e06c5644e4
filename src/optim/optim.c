/* optim/optim.c - LR schedule, gradient norm / clipping and the AdamW
 * driver over the flat buffers; see optim.h. Relies on nn_adamw_update,
 * nn_sumsq for the element-wise work; clipping is folded into the update. */
#include "optim/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "nn/lowp.h"

/* 16K floats per pool task: small enough to balance threads, large enough
 * that the task overhead is negligible. */
#define OPTIM_CHUNK ((size_t)1 << 14)

struct optim_chunk {
    size_t offset, n;
    int decay;     /* weight decay applies */
    int decoupled; /* --decoupled-lr applies (embedding or output layer) */
    int param;     /* registry index */
};

static const char *const LR_STYLES[] = {"constant", "linear", "cosine", "inverse-square-root",
                                        "WSD"};
static const char *const WSD_STYLES[] = {"exponential", "linear", "cosine", "minus_sqrt"};
static const char *const WD_STYLES[] = {"constant", "linear", "cosine"};

static int find_name(const char *s, const char *const *names, int n) {
    for (int i = 0; s && i < n; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

int mtc_lr_style_parse(const char *s) { return find_name(s, LR_STYLES, 5); }
const char *mtc_lr_style_name(mtc_lr_style style) {
    return (unsigned)style < 5 ? LR_STYLES[style] : "?";
}
int mtc_wsd_style_parse(const char *s) { return find_name(s, WSD_STYLES, 4); }
int mtc_wd_style_parse(const char *s) { return find_name(s, WD_STYLES, 3); }

double mtc_lr_at(const mtc_lr_schedule *s, int64_t step) {
    int samples = s->step_samples > 0;
    return mtc_lr_at_n(s, samples ? (double)step * (double)s->step_samples : (double)step);
}

double mtc_lr_at_n(const mtc_lr_schedule *s, double n) {
    int samples = s->step_samples > 0;
    double W = samples ? s->warmup_samples : (double)s->warmup_iters;
    double D = samples ? (double)s->decay_samples : (double)s->decay_iters;
    double S = samples ? (double)s->wsd_decay_samples : (double)s->wsd_decay_iters;
    double max_lr = s->lr, min_lr = s->min_lr;
    if (W > 0 && n <= W) return s->init_lr + (max_lr - s->init_lr) * n / W;
    if (s->style == MTC_LR_CONSTANT) return max_lr;
    if (n > D) return min_lr;
    if (s->style == MTC_LR_INVERSE_SQRT) {
        double lr = max_lr * sqrt(W > 1 ? W : 1) / sqrt(n > 1 ? n : 1);
        return lr > min_lr ? lr : min_lr;
    }
    if (D - W <= 0) return min_lr;
    double r = (n - W) / (D - W), coeff = 1.0;
    if (s->style == MTC_LR_LINEAR) {
        coeff = 1.0 - r;
    } else if (s->style == MTC_LR_COSINE) {
        coeff = 0.5 * (cos(M_PI * r) + 1.0);
    } else if (s->style == MTC_LR_WSD && n > D - S && S > 0) {
        double q = (n - (D - S)) / S;
        switch (s->wsd_style) {
        case MTC_WSD_LINEAR: coeff = 1.0 - q; break;
        case MTC_WSD_COSINE: coeff = 0.5 * (cos(M_PI * q) + 1.0); break;
        case MTC_WSD_EXPONENTIAL: coeff = 2.0 * pow(0.5, q) - 1.0; break;
        case MTC_WSD_MINUS_SQRT: coeff = 1.0 - sqrt(q); break;
        }
    }
    return min_lr + coeff * (max_lr - min_lr);
}

double mtc_wd_at(const mtc_lr_schedule *s, int64_t step, double wd) {
    int samples = s->step_samples > 0;
    return mtc_wd_at_n(s, samples ? (double)step * (double)s->step_samples : (double)step, wd);
}

double mtc_wd_at_n(const mtc_lr_schedule *s, double n, double wd) {
    if (s->wd_style == MTC_WD_CONSTANT) return wd;
    int samples = s->step_samples > 0;
    double I = samples ? (double)s->wd_incr_samples : (double)s->wd_incr_iters;
    if (n > I || I <= 0) return s->end_wd;
    double q = n / I;
    double coeff = s->wd_style == MTC_WD_LINEAR ? q : 0.5 * (cos(M_PI * (1 - q)) + 1.0);
    return s->start_wd + coeff * (s->end_wd - s->start_wd);
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
            c->decoupled = p->emb_or_out;
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
                           j->opt->v + c->offset, c->n, j->scale,
                           c->decoupled && j->cfg->decoupled ? j->cfg->lr_decoupled : j->lr,
                           j->cfg->beta1, j->cfg->beta2, j->cfg->eps,
                           c->decay ? j->cfg->weight_decay : 0.0f, (int)j->opt->step);
    if (j->opt->copy16) {
        nn_f32_to_bf16_both(j->opt->copy16 + c->offset, j->opt->copy_c + c->offset,
                            j->params + c->offset, c->n);
    }
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

void mtc_grad_norm_sumsq_add(mtc_grad_norm_plan *plan, nn_pool *pool, double *sum) {
    if (plan->n) nn_pool_run(pool, plan->n, plan_task, plan);
    double s = *sum;
    for (int i = 0; i < plan->n; i++)
        s += plan->partial[i];
    *sum = s;
}

double mtc_grad_norm_sumsq(mtc_grad_norm_plan *plan, nn_pool *pool) {
    double s = 0;
    mtc_grad_norm_sumsq_add(plan, pool, &s);
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
