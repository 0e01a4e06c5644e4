/* tests/train/test_optim.c - Megatron's LR schedule in closed form, global
 * norm clipping, and one AdamW step against the closed form of the first
 * step (m = (1-b1)g, v = (1-b2)g^2, bias-corrected: update = g/(|g|+eps)),
 * with weight decay only on the 2-D parameter; the sum of squares leaving a
 * parameter out, independent of the pool size. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "optim/optim.h"
#include "test.h"

/* The norm plan of reg's buffer g, leaving out the params with numel
 * `skip` (0: none), in buffer order. */
static mtc_grad_norm_plan plan_of(const mtc_registry *reg, const float *g, size_t skip) {
    mtc_grad_norm_plan plan = {0};
    for (int i = reg->count - 1; i >= 0; i--)
        if (reg->params[i].numel != skip)
            T_CHECK(mtc_grad_norm_plan_add(&plan, g + reg->params[i].offset,
                                           reg->params[i].local_numel) == MTC_OK);
    return plan;
}

int main(void) {
    /* ---- LR schedule ---- */
    mtc_lr_schedule s = {
        .lr = 1e-3, .min_lr = 1e-5, .warmup_iters = 10, .decay_iters = 110, .style = MTC_LR_COSINE};
    T_CLOSE(mtc_lr_at(&s, 0), 0.0, 1e-15, 0);
    T_CLOSE(mtc_lr_at(&s, 5), 5e-4, 1e-15, 1e-12);
    T_CLOSE(mtc_lr_at(&s, 10), 1e-3, 1e-15, 1e-12);
    T_CLOSE(mtc_lr_at(&s, 60), (1e-3 + 1e-5) / 2, 1e-15, 1e-12); /* half way: cos(pi/2) = 0 */
    T_CLOSE(mtc_lr_at(&s, 35), 1e-5 + (1e-3 - 1e-5) * 0.5 * (1 + cos(M_PI * 0.25)), 1e-15, 1e-12);
    T_CLOSE(mtc_lr_at(&s, 110), 1e-5, 1e-15, 1e-12);
    T_CLOSE(mtc_lr_at(&s, 500), 1e-5, 1e-15, 1e-12);
    s.style = MTC_LR_LINEAR;
    T_CLOSE(mtc_lr_at(&s, 35), 1e-5 + (1e-3 - 1e-5) * 0.75, 1e-15, 1e-12);
    s.style = MTC_LR_CONSTANT;
    T_CLOSE(mtc_lr_at(&s, 35), 1e-3, 1e-15, 1e-12);
    T_CLOSE(mtc_lr_at(&s, 3), 3e-4, 1e-15, 1e-12); /* warm-up still applies */
    T_CHECK(mtc_lr_style_parse("cosine") == MTC_LR_COSINE && mtc_lr_style_parse("cos") == -1);

    /* ---- registry with a 2-D and a 1-D parameter ---- */
    mtc_registry reg;
    T_CHECK(mtc_registry_init(&reg, 2) == MTC_OK);
    T_CHECK(mtc_registry_add(&reg, "w", 0, 300, 700, MTC_INIT_NORMAL, 1.0f) ==
            MTC_OK); /* > 1 chunk */
    T_CHECK(mtc_registry_add(&reg, "b", 0, 5, 0, MTC_INIT_ZEROS, 0) == MTC_OK);
    mtc_registry_layout(&reg);
    T_CHECK(reg.total == 300 * 700 + 5 && reg.params[1].offset == 0 && reg.params[0].offset == 5);
    size_t n = reg.total;
    float *p = malloc(n * 4), *p0 = malloc(n * 4), *g = malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        p[i] = p0[i] = 0.5f + 0.001f * (float)(i % 97);
        g[i] = (i % 3 ? 1.0f : -2.0f) * (1.0f + (float)(i % 7));
    }
    nn_pool *pool;
    T_CHECK(nn_pool_create(2, &pool) == MTC_OK);
    mtc_adamw opt;
    T_CHECK(mtc_adamw_init(&opt, &reg) == MTC_OK);

    /* ---- grad norm and clipping ---- */
    double ss = 0;
    for (size_t i = 0; i < n; i++)
        ss += (double)g[i] * g[i];
    mtc_grad_norm_plan all = plan_of(&reg, g, 0), no_b = plan_of(&reg, g, 5);
    T_CHECK(all.n == (int)((300 * 700 + 16383) / 16384) + 1); /* 16K pieces per param */
    double norm = sqrt(mtc_grad_norm_sumsq(&all, pool));
    T_CLOSE(norm, sqrt(ss), 0, 1e-12);
    /* leaving a param out: the sum of squares of the others only ("b" is
     * offsets 0..4), the same with 1 and 2 pool threads */
    double ss_w = 0;
    for (size_t i = 5; i < n; i++)
        ss_w += (double)g[i] * g[i];
    double got_w = mtc_grad_norm_sumsq(&no_b, pool);
    T_CLOSE(got_w, ss_w, 0, 1e-12);
    nn_pool *one;
    T_CHECK(nn_pool_create(1, &one) == MTC_OK);
    T_CHECK(mtc_grad_norm_sumsq(&no_b, one) == got_w);
    T_CHECK(sqrt(mtc_grad_norm_sumsq(&all, one)) == norm);
    nn_pool_free(one);
    /* the registry's rule: TP duplicates off TP rank 0 and second copies are not counted */
    mtc_param q = reg.params[0];
    T_CHECK(mtc_param_counted_here(&q, 1));
    q.tp_duplicate = 1;
    T_CHECK(mtc_param_counted_here(&q, 0) && !mtc_param_counted_here(&q, 1));
    q.tp_duplicate = 0, q.shared_copy = 1;
    T_CHECK(!mtc_param_counted_here(&q, 0));
    mtc_grad_norm_plan_free(&all), mtc_grad_norm_plan_free(&no_b);
    T_CHECK(mtc_grad_clip_coeff(norm, (float)(2 * norm)) == 1.0f);
    T_CHECK(mtc_grad_clip_coeff(norm, 0.0f) == 1.0f);
    float coeff = mtc_grad_clip_coeff(norm, 1.0f);
    T_CLOSE(coeff, 1.0 / (norm + 1e-6), 0, 1e-6);

    /* ---- one AdamW step ---- */
    mtc_adamw_config ac = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    float lr = 0.01f;
    float *g1 = malloc(n * 4);
    memcpy(g1, g, n * 4);
    mtc_adamw_step(&opt, pool, p, g1, lr, coeff, &ac);
    T_CHECK(opt.step == 1);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        int decay = i >= 5;               /* offset 0..4 is the 1-D bias */
        double gs = (double)g[i] * coeff; /* first step: update = gs / (|gs| + eps) */
        double expect = p0[i] * (1.0 - (decay ? lr * 0.1 : 0.0)) - lr * gs / (fabs(gs) + 1e-8);
        if (fabs(p[i] - expect) > 1e-6) bad++;
    }
    T_CHECKF(bad == 0, "%d elements differ from the closed form", bad);
    /* second step on a zero gradient: moments decay, closed form again */
    memset(g1, 0, n * 4);
    float *p1 = malloc(n * 4);
    memcpy(p1, p, n * 4);
    mtc_adamw_step(&opt, pool, p, g1, lr, 1.0f, &ac);
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        int decay = i >= 5;
        double gs = (double)g[i] * coeff;
        double m2 = 0.9 * 0.1 * gs / (1 - 0.81), v2 = 0.95 * 0.05 * gs * gs / (1 - 0.9025);
        double expect = p1[i] * (1.0 - (decay ? lr * 0.1 : 0.0)) - lr * m2 / (sqrt(v2) + 1e-8);
        if (fabs(p[i] - expect) > 2e-6) bad++;
    }
    T_CHECKF(bad == 0, "%d elements differ from the closed form of step 2", bad);
    free(g1), free(p1);
    mtc_adamw_free(&opt);
    nn_pool_free(pool);
    mtc_registry_free(&reg);
    free(p), free(p0), free(g);
    return T_DONE();
}
