/* tests/dp/test_distopt.c - the distributed optimizer on dp = 1, 2, 4, 8
 * shm rank-threads (1 and 2 optimizer instances): after K steps of
 * reduce-scatter + clipped AdamW on the shard + all-gather, every rank's
 * whole param buffer equals a serial AdamW (nn_adamw_update per param over
 * the closed-form summed gradient, weight decay on 2-D params only) within
 * 1e-6 relative; the gradient norm equals the closed-form norm (also with a
 * TP group where TP-duplicated params count once); optimizer state is the
 * model's size / dp (all ranks' state sums to exactly the model) while param
 * and grad buffers stay full size. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dp/distopt.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "test.h"
#include "test_ddp_fake.h"

typedef struct {
    int instances, overlap_grad, overlap_param;
    int64_t bucket;
    mtc_ddp_grad_scale scale;
    float max_norm;
} opt_case;

static const mtc_distopt_hparams HP = {
    .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};

/* The global gradient norm as train computes it (optim/optim.h's norm
 * plan): the ranges this rank holds (its shard pieces with the distributed
 * optimizer, every param without), TP duplicates on TP rank 0 only, the
 * squares summed over the shard group with the distributed optimizer and
 * over mp (NULL: none). */
static mtc_result_t held_norm(const mtc_ddp *d, const mtc_registry *reg, int tp_rank, mtc_comm_t mp,
                              double *norm) {
    mtc_grad_norm_plan plan = {0};
    mtc_result_t rc = MTC_OK;
    const dp_layout *l = &d->layout;
    if (!d->cfg.use_distopt) {
        for (int p = 0; rc == MTC_OK && p < reg->count; p++)
            if (mtc_param_counted_here(&reg->params[p], tp_rank))
                rc = mtc_grad_norm_plan_add(&plan, d->grads + l->param[p].start,
                                            (size_t)(l->param[p].end - l->param[p].start));
    } else
        for (int b = 0; rc == MTC_OK && b < l->nbuckets; b++) {
            int n;
            const dp_shard_param *sp = dp_layout_shard_params(l, d->shard_rank, b, &n);
            for (int j = 0; rc == MTC_OK && j < n; j++)
                if (mtc_param_counted_here(&reg->params[sp[j].param], tp_rank))
                    rc = mtc_grad_norm_plan_add(
                        &plan, d->grads + sp[j].gbuf_world.start,
                        (size_t)(sp[j].gbuf_world.end - sp[j].gbuf_world.start));
        }
    double s = mtc_grad_norm_sumsq(&plan, NULL);
    mtc_grad_norm_plan_free(&plan);
    MTC_CHECK(rc);
    /* comm: all-reduce(intra) with the distributed optimizer, all-reduce(mp) */
    if (d->cfg.use_distopt && d->comms.intra && mtc_comm_size(d->comms.intra) > 1)
        MTC_CHECK(mtc_all_reduce(&s, &s, 1, MTC_DTYPE_F64, MTC_OP_SUM, d->comms.intra));
    if (mp && mtc_comm_size(mp) > 1)
        MTC_CHECK(mtc_all_reduce(&s, &s, 1, MTC_DTYPE_F64, MTC_OP_SUM, mp));
    *norm = sqrt(s);
    return MTC_OK;
}

/* The serial run: params[p] (numel) after each step, the norm of step k. */
typedef struct {
    float *param[FAKE_NPARAMS], *m[FAKE_NPARAMS], *v[FAKE_NPARAMS], *g[FAKE_NPARAMS];
} serial_state;

static double serial_step(serial_state *s, const mtc_registry *reg, const opt_case *c, int dp,
                          int k, int M, float lr) {
    double sq = 0;
    for (int p = 0; p < FAKE_NPARAMS; p++)
        for (size_t i = 0; i < reg->params[p].numel; i++) {
            double g = 0;
            for (int r = 0; r < dp; r++)
                for (int mb = 0; mb < M; mb++)
                    g += fake_grad(r, p, (int64_t)i, k, mb);
            if (c->scale == MTC_DDP_GRAD_AVG) g /= dp;
            s->g[p][i] = (float)g;
            sq += g * g;
        }
    double norm = sqrt(sq);
    double coeff = c->max_norm > 0 ? (double)c->max_norm / (norm + 1e-6) : 1.0;
    for (int p = 0; p < FAKE_NPARAMS; p++) {
        size_t n = reg->params[p].numel;
        if (coeff < 1.0) nn_scale(s->g[p], (float)coeff, n);
        nn_adamw_update(s->param[p], s->g[p], s->m[p], s->v[p], n, lr, HP.beta1, HP.beta2, HP.eps,
                        reg->params[p].is_2d ? HP.weight_decay : 0.0f, k + 1);
    }
    return norm;
}

static mtc_result_t check_case(mtc_comm_t world, const opt_case *c) {
    int r = mtc_comm_rank(world), dp = mtc_comm_size(world);
    const int M = 2, K = 3;
    const float lr = 0.01f;
    mtc_registry reg;
    MTC_CHECK(fake_registry(&reg));
    mtc_comm_t intra, inter;
    MTC_CHECK(fake_instance_comms(world, c->instances, &intra, &inter));
    mtc_ddp_config cfg = {.use_distopt = 1,
                          .overlap_grad_reduce = c->overlap_grad,
                          .bucket_size = c->bucket,
                          .scale = c->scale,
                          .shared_embedding = fake_shared_embedding};
    mtc_ddp_comms comms = {.dp = world, .intra = intra, .inter = inter};
    mtc_ddp *d;
    mtc_distopt *o;
    MTC_CHECK(mtc_ddp_init(&reg, &cfg, &comms, NULL, NULL, &d));
    MTC_CHECK(mtc_distopt_init(d, c->overlap_param, &o));
    mtc_ddp_assign_offsets(d, &reg);
    T_CHECK(reg.total == (size_t)d->layout.numel);
    serial_state s;
    for (int p = 0; p < FAKE_NPARAMS; p++) {
        size_t n = reg.params[p].numel;
        s.param[p] = malloc(n * sizeof(float)), s.g[p] = malloc(n * sizeof(float));
        s.m[p] = calloc(n, sizeof(float)), s.v[p] = calloc(n, sizeof(float));
        for (size_t i = 0; i < n; i++)
            s.param[p][i] = d->params[reg.params[p].offset + i] = fake_param0(p, (int64_t)i);
    }
    int bad = 0, exact = 0, count = 0;
    for (int k = 0; k < K; k++) {
        double norm_want = serial_step(&s, &reg, c, dp, k, M, lr);
        mtc_ddp_zero_grad(d);
        for (int mb = 0; mb < M; mb++)
            for (int p = FAKE_NPARAMS - 1; p >= 0; p--) {
                if (k > 0 && mb == 0) /* the "forward" of the next step reads param p */
                    MTC_CHECK(mtc_distopt_param_gather_wait_param(o, p));
                float *g = d->grads + reg.params[p].offset;
                for (size_t i = 0; i < reg.params[p].numel; i++)
                    g[i] += fake_grad(r, p, (int64_t)i, k, mb);
                if (mb == M - 1) MTC_CHECK(mtc_ddp_param_grad_ready(d, p));
            }
        MTC_CHECK(mtc_ddp_finish(d));
        double norm;
        MTC_CHECK(held_norm(d, &reg, 0, NULL, &norm));
        T_CLOSE(norm, norm_want, 0, 1e-12);
        /* clipping folded into the update, as train does */
        float clip = mtc_grad_clip_coeff(norm, c->max_norm);
        MTC_CHECK(mtc_distopt_step(o, lr, clip, &HP));
        MTC_CHECK(mtc_distopt_param_gather_wait(o));
        for (int p = 0; p < FAKE_NPARAMS; p++)
            for (size_t i = 0; i < reg.params[p].numel; i++) {
                float got = d->params[reg.params[p].offset + i], want = s.param[p][i];
                count++;
                exact += got == want;
                if (!(fabsf(got - want) <= 1e-6f * fabsf(want) + 1e-9f) && bad++ < 3)
                    fprintf(stderr, "dp %d/%d rank %d step %d param %d [%zu]: %.9g want %.9g\n", dp,
                            c->instances, r, k, p, i, got, want);
            }
    }
    T_CHECKF(bad == 0, "dp %d instances %d overlap %d/%d bucket %lld: %d of %d params differ", dp,
             c->instances, c->overlap_grad, c->overlap_param, (long long)c->bucket, bad, count);
    if (r == 0 && exact != count)
        printf("dp %d instances %d: %d of %d params bit-identical to serial\n", dp, c->instances,
               exact, count);
    /* memory: full buffers, state = this rank's pieces; the intra group's
     * state adds up to exactly the model, each rank within padding of 1/dp */
    mtc_dp_memory mem;
    mtc_ddp_memory(d, &mem);
    int dpi = dp / c->instances;
    T_CHECK(mem.param_bytes == (size_t)d->layout.numel * 4 && mem.grad_bytes == mem.param_bytes);
    T_CHECK(mem.optim_state_bytes == (size_t)o->n * 8);
    int64_t state = (int64_t)mem.optim_state_bytes, sum = state;
    MTC_CHECK(mtc_all_reduce(&state, &sum, 1, MTC_DTYPE_I64, MTC_OP_SUM, intra ? intra : world));
    T_CHECK(sum == 8 * FAKE_TOTAL);
    int64_t slack =
        64 * FAKE_NPARAMS + (int64_t)d->layout.nbuckets * dp_layout_bucket_divisor(dpi, 0);
    T_CHECKF(state <= 8 * (FAKE_TOTAL + slack) / dpi, "state %lld bytes at dp %d", (long long)state,
             dpi);
    for (int p = 0; p < FAKE_NPARAMS; p++)
        free(s.param[p]), free(s.g[p]), free(s.m[p]), free(s.v[p]);
    mtc_distopt_free(o);
    mtc_ddp_free(d);
    mtc_comm_free(intra), mtc_comm_free(inter);
    mtc_registry_free(&reg);
    return MTC_OK;
}

/* World 4 = tp 2 x dp 2 (tp fastest, as Megatron's tp-dp order): norm over
 * both groups, TP-duplicated params counted once; plain DDP and dist-opt. */
static mtc_result_t check_tp_norm(mtc_comm_t world) {
    int r = mtc_comm_rank(world), tp_rank = r % 2;
    mtc_comm_t tp, dpc;
    MTC_CHECK(mtc_comm_split(world, r / 2, r, "TENSOR_MODEL_PARALLEL_GROUP", &tp));
    MTC_CHECK(mtc_comm_split(world, r % 2, r, "DATA_PARALLEL_GROUP", &dpc));
    mtc_registry reg;
    MTC_CHECK(fake_registry(&reg));
    double sq = 0;
    for (int t = 0; t < 2; t++)
        for (int p = 0; p < FAKE_NPARAMS; p++)
            for (int64_t i = 0; i < (int64_t)reg.params[p].numel; i++) {
                if (t == 1 && fake_params[p].tp_dup) continue;
                double g = fake_grad(10 * t, p, i, 0, 0) + fake_grad(10 * t + 1, p, i, 0, 0);
                sq += g * g;
            }
    for (int distopt = 0; distopt < 2; distopt++) {
        mtc_ddp_config cfg = {.use_distopt = distopt, .bucket_size = 100};
        mtc_ddp_comms comms = {.dp = dpc};
        mtc_ddp *d;
        MTC_CHECK(mtc_ddp_init(&reg, &cfg, &comms, NULL, NULL, &d));
        for (int p = 0; p < FAKE_NPARAMS; p++)
            for (int64_t i = 0; i < d->layout.param[p].end - d->layout.param[p].start; i++)
                d->grads[d->layout.param[p].start + i] =
                    fake_grad(10 * tp_rank + mtc_comm_rank(dpc), p, i, 0, 0);
        MTC_CHECK(mtc_ddp_finish(d));
        double norm;
        MTC_CHECK(held_norm(d, &reg, tp_rank, tp, &norm));
        T_CLOSE(norm, sqrt(sq), 0, 1e-12);
        /* Megatron's clipping factor: half the norm gives 1/2, twice it none */
        T_CLOSE(mtc_grad_clip_coeff(norm, (float)(norm / 2)), norm / 2 / (norm + 1e-6), 0, 1e-6);
        T_CHECK(mtc_grad_clip_coeff(norm, (float)(norm * 2)) == 1.0f);
        mtc_ddp_free(d);
    }
    mtc_registry_free(&reg);
    mtc_comm_free(tp), mtc_comm_free(dpc);
    return MTC_OK;
}

/* Plain DDP holds the whole optimizer state; bad sizes are refused. */
static mtc_result_t check_plain_and_errors(mtc_comm_t world) {
    mtc_registry reg;
    MTC_CHECK(fake_registry(&reg));
    mtc_ddp_config cfg = {0};
    mtc_ddp_comms comms = {.dp = world};
    mtc_ddp *d;
    mtc_distopt *o;
    MTC_CHECK(mtc_ddp_init(&reg, &cfg, &comms, NULL, NULL, &d));
    mtc_dp_memory mem;
    mtc_ddp_memory(d, &mem);
    T_CHECK(mem.optim_state_bytes == 8 * FAKE_TOTAL && mem.param_bytes == 4 * FAKE_TOTAL);
    T_CHECK(mtc_distopt_init(d, 0, &o) == MTC_ERR_INVALID_ARGUMENT);
    mtc_ddp_free(d);
    /* no communicators at all (serial): one step equals nn_adamw_update */
    mtc_ddp_config one = {.use_distopt = 1};
    mtc_ddp_comms none = {0};
    MTC_CHECK(mtc_ddp_init(&reg, &one, &none, NULL, NULL, &d));
    MTC_CHECK(mtc_distopt_init(d, 1, &o));
    const dp_range w = d->layout.param[3]; /* a 2-D param: decayed */
    int64_t n = w.end - w.start;
    float *want = malloc((size_t)n * 4), *m = calloc((size_t)n, 4), *v = calloc((size_t)n, 4);
    for (int64_t i = 0; i < n; i++) {
        want[i] = d->params[w.start + i] = fake_param0(3, i);
        d->grads[w.start + i] = fake_grad(0, 3, i, 0, 0);
    }
    MTC_CHECK(mtc_ddp_finish(d));
    double norm, sq = 0;
    MTC_CHECK(held_norm(d, &reg, 0, NULL, &norm));
    for (int64_t i = 0; i < n; i++)
        sq += (double)d->grads[w.start + i] * d->grads[w.start + i];
    T_CLOSE(norm, sqrt(sq), 0, 1e-12);
    nn_adamw_update(want, d->grads + w.start, m, v, (size_t)n, 0.01f, HP.beta1, HP.beta2, HP.eps,
                    HP.weight_decay, 1);
    MTC_CHECK(mtc_distopt_step(o, 0.01f, 1.0f, &HP));
    MTC_CHECK(mtc_distopt_param_gather_wait(o));
    int off = 0;
    for (int64_t i = 0; i < n; i++)
        off += !(fabsf(d->params[w.start + i] - want[i]) <= 1e-6f * fabsf(want[i]) + 1e-9f);
    T_CHECKF(off == 0, "%d of %lld elements differ from nn_adamw_update", off, (long long)n);
    T_CHECK(o->n == FAKE_TOTAL);
    free(want), free(m), free(v);
    mtc_distopt_free(o);
    mtc_ddp_free(d);
    if (mtc_comm_size(world) == 4) {
        mtc_comm_t intra, inter;
        MTC_CHECK(fake_instance_comms(world, 2, &intra, &inter));
        mtc_ddp_comms two = {.dp = world, .intra = intra, .inter = inter};
        T_CHECK(mtc_ddp_init(&reg, &cfg, &two, NULL, NULL, &d) == MTC_ERR_INVALID_ARGUMENT);
        cfg.use_distopt = 1;
        two.inter = NULL;
        T_CHECK(mtc_ddp_init(&reg, &cfg, &two, NULL, NULL, &d) == MTC_ERR_INVALID_ARGUMENT);
        mtc_comm_free(intra), mtc_comm_free(inter);
    }
    mtc_registry_free(&reg);
    return MTC_OK;
}

static mtc_result_t rank_main(mtc_comm_t world, void *arg) {
    (void)arg;
    int dp = mtc_comm_size(world);
    for (int inst = 1; inst <= 2; inst++) {
        if (inst == 2 && dp < 2) continue; /* dp 2: intra groups of 1 */
        for (int v = 0; v < 4; v++) {
            opt_case c = {.instances = inst,
                          .overlap_grad = v & 1,
                          .overlap_param = v >> 1,
                          .bucket = v == 0   ? 0
                                    : v == 1 ? 200
                                             : 1,
                          .scale = v == 2 ? MTC_DDP_GRAD_AVG : MTC_DDP_GRAD_SUM,
                          .max_norm = v & 1 ? 1.0f : 0.0f};
            MTC_CHECK(check_case(world, &c));
        }
    }
    if (dp == 4) MTC_CHECK(check_tp_norm(world));
    MTC_CHECK(check_plain_and_errors(world));
    return MTC_OK;
}

int main(void) {
    static const int dps[] = {1, 2, 4, 8};
    for (int j = 0; j < 4; j++) {
        mtc_launch_opts o = {.backend = MTC_BACKEND_SHM, .world_size = dps[j], .timeout_s = 60};
        mtc_result_t rc = mtc_launch(&o, rank_main, NULL);
        T_CHECKF(rc == MTC_OK, "dp %d: %s %s", dps[j], mtc_result_name(rc), mtc_error_detail());
    }
    return T_DONE();
}
