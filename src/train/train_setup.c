/* train/train_setup.c - building one rank's side of training: the grid and
 * its groups, the model chunks (chunk c = virtual stage c*pp + pp_rank)
 * each with its DDP and its optimizer state (AdamW, or with
 * --use-distributed-optimizer Megatron-LM core_v0.18.0 distrib_optimizer.py:
 * buffers padded as Megatron's param_and_grad_buffer, the state of the
 * owned shard only, one DDP per chunk, an inter-instance group per chunk
 * with several optimizer instances; with EP > 1 a second DDP per chunk, and
 * instance, for its local experts over EXPERT_DATA_PARALLEL_GROUP, laid
 * after the dense buffer), activation slots sized by the
 * schedule, the gradient-norm plan; gathering the global model, loading a
 * single-file model and the --print-layout printer (directory checkpoints:
 * train_ckpt.c). Each chunk's buffers are laid out once (dp/chunk_layout.h),
 * before the model allocates its buffers (the layout hook), and the DDPs
 * take those layouts. Relies on model/, dp/, pp/, grid/, comm/, optim/,
 * ckpt/. */
#include <stdlib.h>
#include <string.h>

#include "ckpt/checkpoint.h"
#include "core/log.h"
#include "core/timer.h"
#include "nn/lowp.h"
#include "dp/chunk_layout.h"
#include "dp/fsdp.h"
#include "train/train_internal.h"

/* Chunk k's buffers laid out once (dp/chunk_layout.h): by the model's
 * layout hook before the model allocates its buffers, or from the built
 * model's registry when it keeps its own packing; then handed to the DDPs. */
typedef struct {
    const train_rank *x;
    int k;
    mtc_ddp_chunk_layout cl;
    int built;
} layout_ctx;

/* Experts split over EP (EP > 1 with experts): Megatron's expert-parallel
 * buffers, separate from the dense ones. */
static int train_ep_split(const train_rank *x) { return x->nbuf > 1; }

static mtc_result_t train_chunk_layout(layout_ctx *lc, const mtc_registry *r) {
    const train_rank *x = lc->x;
    const mtc_train_config *c = x->cfg;
    mtc_ddp_chunk_opts o = {.use_distopt = c->use_distributed_optimizer,
                            .overlap_grad_reduce = c->overlap_grad_reduce,
                            .bucket_size = c->ddp_bucket_size,
                            .pad_high_busbw = c->pad_high_busbw,
                            .grad_reduce_bf16 = c->grad_reduce_in_bf16,
                            .fsdp_strategy = c->fsdp_strategy,
                            .fsdp_unit_size = c->fsdp_unit_size,
                            .num_layers = c->model.num_layers,
                            .dp = x->dp_size,
                            .dp_cp = train_replicas(x) ? mtc_comm_size(train_replicas(x)) : 1,
                            .pp_size = x->pp_size,
                            .pp_rank = x->pp_rank,
                            .chunk = lc->k};
    mtc_ddp_params params[MTC_DDP_KINDS_MAX];
    int ranks[MTC_DDP_KINDS_MAX]; /* the shard group's, or without sharding the reduction's */
    for (int b = 0; b < x->nbuf; b++) {
        mtc_comm_t g = c->use_distributed_optimizer ? x->gbuf[b].shard : x->gbuf[b].dp;
        params[b] = x->gbuf[b].params;
        ranks[b] = g ? mtc_comm_size(g) : 1;
        /* HFSDP: whole pages per optimizer slice too (the shard over the instances) */
        if (c->fsdp_outer_optim && train_fsdp_grads(c) && x->gbuf[b].dp)
            o.fsdp_pad_ranks[b] = mtc_comm_size(x->gbuf[b].dp);
    }
    MTC_CHECK(mtc_ddp_chunk_layout_init(&lc->cl, r, &o, x->nbuf, params, ranks));
    lc->built = 1;
    return MTC_OK;
}

/* The model's layout hook: the chunk's buffers one after the other (the
 * distributed optimizer's padding, the expert buffer after the dense one). */
static mtc_result_t train_layout(void *arg, const mtc_registry *r, size_t *offsets, size_t *total) {
    layout_ctx *lc = arg;
    MTC_CHECK(train_chunk_layout(lc, r));
    mtc_ddp_chunk_layout_offsets(&lc->cl, offsets);
    *total = lc->cl.total;
    return MTC_OK;
}

/* Peak number of microbatches between forward and backward of chunk k in
 * this rank's training order (at least 1). */
static mtc_result_t train_slot_counts(const train_rank *x, const pp_schedule_config *sc,
                                      int *peak) {
    return pp_schedule_peak_inflight(sc, x->pp_rank, x->vpp, peak);
}

/* Chunk k: the model (laid out for its DDP), the DDP on the model's
 * buffers, the optimizer state and the slot tables. */
static mtc_result_t train_chunk_init(train_rank *x, int k, int nslots) {
    const mtc_train_config *c = x->cfg;
    train_chunk *ch = &x->chunks[k];
    int L = c->model.num_layers;
    pp_layout_stage ls; /* the chunk's layers: pp/layout.c */
    MTC_CHECK(pp_layout_stage_get(&ls, &c->pp_split, L, x->pp_size, x->vpp,
                                  pp_virtual_stage(x->pp_size, x->pp_rank, k)));
    layout_ctx lc = {.x = x, .k = k};
    mtc_model_chunk_opts o = {.B = c->micro_batch,
                              .nslots = nslots,
                              .pool = x->pool,
                              .grid = x->grid,
                              .parallel = c->parallel,
                              .first_layer = ls.first_layer,
                              .last_layer = ls.first_layer + ls.num_layers,
                              .has_embedding = ls.has_embedding,
                              .has_head = ls.has_loss,
                              .layout =
                                  c->use_distributed_optimizer || x->nbuf > 1 ? train_layout : NULL,
                              /* full recomputation: uniform recomputes every layer of the
                               * chunk, block its first recompute-num-layers */
                              .recompute_layers = !c->recompute_full   ? 0
                                                  : c->recompute_block ? c->recompute_num_layers
                                                                       : L,
                              .recompute_mtp = c->recompute_full && !c->recompute_block,
                              .mtp_standalone = pp_layout_mtp_role(&ls),
                              .recompute_mlp = c->recompute_mlp,
                              .recompute_mla_up = c->recompute_mla_up,
                              .recompute_shared = c->recompute_shared,
                              .recompute_moe = c->recompute_moe,
                              .recompute_moe_act = c->recompute_moe_act,
                              .bf16_gemm_f32 = x->bf16_gemm == NN_BF16_GEMM_F32,
                              .head_chunk = c->head_chunk,
                              .fp8 = c->fp8,
                              .precision = c->bf16   ? TP_PREC_BF16
                                           : c->fp16 ? TP_PREC_FP16
                                                     : TP_PREC_F32,
                              .layout_ctx = &lc,
                              .lazy_buffers = train_fsdp_meta(c)};
    mtc_result_t mrc = mtc_model_init_chunk(&c->model, &o, &ch->model);
    if (mrc != MTC_OK) mtc_ddp_chunk_layout_free(&lc.cl);
    MTC_CHECK(mrc);
    /* progress: three steps per chunk (model buffers, DDP, optimizer state) */
    mtc_progress_update(&x->progress, 3 * k + 1, 3 * x->vpp);
    mtc_model *m = ch->model;
    /* plain DP with one buffer: the model's packing is the DDP's layout
     * (mtc_ddp_init_layout checks every param's place) */
    mtc_result_t rc = lc.built ? MTC_OK : train_chunk_layout(&lc, &m->reg);
    for (int b = 0; rc == MTC_OK && b < x->nbuf; b++) {
        if (!lc.cl.held[b]) continue; /* a chunk without local experts */
        mtc_ddp_comms comms =
            mtc_ddp_kind_comms(x->grid, &x->gbuf[b], c->use_distributed_optimizer, k);
        rc = mtc_ddp_init_layout(&m->reg, &lc.cl.cfg[b], &comms, &lc.cl.layout[b], m->params,
                                 m->grads, &ch->buf[b].ddp);
    }
    mtc_ddp_chunk_layout_free(&lc.cl);
    MTC_CHECK(rc);
    mtc_progress_update(&x->progress, 3 * k + 2, 3 * x->vpp);
    if (c->use_distributed_optimizer) {
        for (int b = 0; b < x->nbuf; b++)
            if (ch->buf[b].ddp)
                MTC_CHECK(
                    mtc_distopt_init(ch->buf[b].ddp, c->overlap_param_gather, &ch->buf[b].dopt));
    } else
        MTC_CHECK(mtc_adamw_init(&ch->opt, &m->reg));
    MTC_CHECK(train_fsdp_chunk_init(x, ch));
    mtc_progress_update(&x->progress, 3 * k + 3, 3 * x->vpp);
    MTC_CHECK(mtc_mem_alloc((size_t)x->nmb_max * sizeof(int), (void **)&ch->slot_of));
    for (int i = 0; i < x->nmb_max; i++)
        ch->slot_of[i] = -1;
    return mtc_mem_calloc((size_t)nslots, sizeof(int), (void **)&ch->slot_busy);
}

/* What this rank counts in the global norm: every chunk's buffer (plain DP)
 * or owned shard pieces (distributed optimizer), in buffer order, less what
 * the registry says is counted elsewhere. An expert-parallel param's
 * replicas are its expert-DP group (TP ranks included when etp < tp), which
 * the expert sum never adds up over (or shards), so a TP duplicate counts. */
static int train_norm_counts(const mtc_registry *r, const mtc_param *p, int tp_rank) {
    return mtc_param_expert_parallel(r, p) ? !p->shared_copy : mtc_param_counted_here(p, tp_rank);
}

static mtc_result_t train_norm_plan(train_rank *x) {
    int tp_rank = train_tp_rank(x);
    for (int k = 0; k < x->vpp; k++) {
        train_chunk *ch = &x->chunks[k];
        const mtc_registry *r = &ch->model->reg;
        if (!x->cfg->use_distributed_optimizer) { /* each param in its buffer's sum */
            for (int i = r->count - 1; i >= 0; i--)
                if (train_norm_counts(r, &r->params[i], tp_rank))
                    MTC_CHECK(mtc_grad_norm_plan_add(
                        &ch->buf[mtc_param_expert_parallel(r, &r->params[i]) ? TRAIN_GBUF_EXPERT
                                                                             : TRAIN_GBUF_DENSE]
                             .norm,
                        ch->model->grads + r->params[i].offset, r->params[i].local_numel));
            continue;
        }
        for (int b = 0; b < x->nbuf; b++) { /* the optimizer's pieces (HFSDP: its slices) */
            const mtc_distopt *o = ch->buf[b].dopt;
            for (int j = 0; o && j < o->npieces; j++)
                if (train_norm_counts(r, &r->params[o->pieces[j].param], tp_rank))
                    MTC_CHECK(mtc_grad_norm_plan_add(&ch->buf[b].norm,
                                                     o->ddp->grads + o->pieces[j].start,
                                                     (size_t)o->pieces[j].n));
        }
    }
    return MTC_OK;
}

/* --log-params-norm: the norm plan's pieces moved from the gradients to the
 * params at the same offsets (the model's buffers with plain DP, the DDP's
 * with the distributed optimizer: there the owned shard of the fp32 main
 * params, which the step updates in place). */
static mtc_result_t train_pnorm_plan(train_rank *x) {
    for (int k = 0; x->cfg->log_params_norm && k < x->vpp; k++)
        for (int b = 0; b < x->nbuf; b++) {
            train_gbuf *gb = &x->chunks[k].buf[b];
            const mtc_ddp *d = gb->ddp;
            int in_ddp = x->cfg->use_distributed_optimizer && d;
            const float *g0 = in_ddp ? d->grads : x->chunks[k].model->grads;
            const float *p0 = in_ddp ? d->params : x->chunks[k].model->params;
            for (int i = 0; i < gb->norm.n; i++)
                MTC_CHECK(mtc_grad_norm_plan_add(&gb->pnorm, p0 + (gb->norm.base[i] - g0),
                                                 gb->norm.len[i]));
        }
    return MTC_OK;
}

/* --load FILE (a single-file model): every rank reads the file into a
 * serial model and keeps its shards. */
static mtc_result_t train_load_file(train_rank *x) {
    mtc_model *full = NULL;
    mtc_ckpt_info info;
    MTC_CHECK(mtc_model_init(&x->cfg->model, 1, 1, NULL, &full));
    mtc_result_t rc = mtc_ckpt_load(full, x->cfg->load_path, &info);
    for (int k = 0; k < x->vpp; k++) {
        mtc_model *m = x->chunks[k].model;
        const mtc_registry *r = &m->reg;
        for (int i = 0; rc == MTC_OK && i < r->count; i++) {
            const mtc_param *p = &r->params[i];
            for (size_t l = 0; l < p->local_numel; l++)
                m->params[p->offset + l] =
                    full->params[p->global_offset + mtc_registry_global_index(r, p, r->tp_rank, l)];
        }
    }
    mtc_model_free(full);
    return rc;
}

typedef struct {
    mtc_progress *p;
    size_t before, total; /* elements of earlier chunks, of all chunks */
} init_progress;

static void train_init_progress(void *ctx, size_t done, size_t total) {
    const init_progress *ip = ctx;
    (void)total;
    mtc_progress_update(ip->p, (double)(ip->before + done), (double)ip->total);
}

/* Megatron's choice of scaler: --loss-scale S gives the constant one
 * (with --fp16 or --bf16), --fp16 alone the dynamic one, bf16 and fp32
 * none (loss scale 1). */
mtc_result_t train_scaler_init(train_rank *x) {
    const mtc_train_config *c = x->cfg;
    x->loss_scale = 1.0f;
    x->use_scaler = 0;
    if ((c->fp16 || c->bf16) && c->loss_scale > 0)
        MTC_CHECK(mtc_grad_scaler_init_constant(&x->scaler, c->loss_scale));
    else if (c->fp16)
        MTC_CHECK(mtc_grad_scaler_init_dynamic(
            &x->scaler, c->initial_loss_scale > 0 ? c->initial_loss_scale : MTC_LOSS_SCALE_INITIAL,
            c->min_loss_scale > 0 ? c->min_loss_scale : MTC_LOSS_SCALE_MIN,
            c->loss_scale_window > 0 ? c->loss_scale_window : MTC_LOSS_SCALE_WINDOW,
            c->hysteresis > 0 ? c->hysteresis : MTC_LOSS_SCALE_HYSTERESIS));
    else
        return MTC_OK;
    x->use_scaler = 1;
    x->loss_scale = x->scaler.scale;
    return MTC_OK;
}

/* --bf16: the GEMM engine. --bf16-gemm auto: world rank 0 takes both
 * engines' rates on the model's MLP up-projection (the widest of its usual
 * GEMMs: B x T_rank rows, ffn / tp columns, hidden deep) from the machine's
 * cache, measuring them the first time (nn_bf16_gemm_rates), and broadcasts
 * them, so every rank and every later run of the shape runs the same engine.
 * Without oneDNN auto is fp32. comm: broadcast(world) with auto. */
static mtc_result_t train_bf16_engine(train_rank *x) {
    const mtc_train_config *c = x->cfg;
    x->bf16_gemm = c->bf16 ? c->bf16_gemm : NN_BF16_GEMM_AUTO;
    if (c->fp8) x->bf16_gemm = NN_BF16_GEMM_F32; /* fp8: fp32 GEMMs on fp8 values */
    if (!c->bf16 || x->bf16_gemm != NN_BF16_GEMM_AUTO) return MTC_OK;
    if (!nn_lowp_available()) {
        x->bf16_gemm = NN_BF16_GEMM_F32;
        return MTC_OK;
    }
    const mtc_model_config *mc = &c->model;
    int tp = c->grid.tp;
    int M = c->micro_batch * x->T_rank, N = (mc->swiglu ? 2 : 1) * (mc->ffn_hidden_size / tp);
    int K = mc->hidden_size;
    double v[3] = {0, 0, 0};
    int cached = 0;
    if (x->world_rank == 0)
        MTC_CHECK(
            nn_bf16_gemm_rates(x->pool, nn_pool_size(x->pool), M, N, K, &v[0], &v[1], &cached));
    v[2] = cached;
    MTC_CHECK(mtc_broadcast(v, 3, MTC_DTYPE_F64, 0, x->world));
    x->bf16_gf[0] = v[0], x->bf16_gf[1] = v[1], x->bf16_cached = v[2] != 0;
    x->bf16_shape[0] = M < 1024 ? M : 1024, x->bf16_shape[1] = N, x->bf16_shape[2] = K;
    /* oneDNN bf16 only when clearly faster (10%): the fp32 engine needs no
     * bf16 copy of the weights, and a margin keeps the choice stable run to
     * run where the two are close (the engines' sums differ in order) */
    x->bf16_gemm = v[0] > 1.1 * v[1] ? NN_BF16_GEMM_DNNL : NN_BF16_GEMM_F32;
    return MTC_OK;
}

static int keep_cmp(const void *a, const void *b) {
    int64_t x = ((const int64_t *)a)[0], y = ((const int64_t *)b)[0];
    return (x > y) - (x < y);
}

/* --bf16 --use-distributed-optimizer, after the params are initialised or
 * loaded: each rank keeps fp32 main params only for its optimizer shard
 * and the param all-gather carries the owners' bf16-rounded params into
 * every rank's compute copy (Megatron's layout: 4/dp bytes of fp32 main
 * params per parameter). Not with MoE (expert params step outside the
 * distributed optimizer's shard). */
static mtc_result_t train_shard_main(train_rank *x) {
    const mtc_train_config *c = x->cfg;
    train_fsdp_shard(x); /* Megatron-FSDP: only the shards stay (the bf16 copies whole) */
    if (train_fsdp_grads(c)) return MTC_OK;
    if (!c->bf16 || !c->use_distributed_optimizer || c->model.moe.num_experts > 0) return MTC_OK;
    for (int k = 0; k < x->vpp; k++) {
        train_chunk *ch = &x->chunks[k];
        mtc_distopt *o = ch->buf[TRAIN_GBUF_DENSE].dopt;
        if (!o) continue;
        int64_t(*keep)[2] = calloc((size_t)(o->npieces ? o->npieces : 1), sizeof *keep);
        if (!keep) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "shard ranges of a rank");
        for (int i = 0; i < o->npieces; i++)
            keep[i][0] = o->pieces[i].start, keep[i][1] = o->pieces[i].start + o->pieces[i].n;
        qsort(keep, (size_t)o->npieces, sizeof *keep, keep_cmp);
        mtc_result_t rc =
            mtc_model_shard_main_params(ch->model, (const int64_t(*)[2])keep, o->npieces);
        free(keep);
        MTC_CHECK(rc);
        mtc_distopt_gather_into(o, ch->model->params_c);
    }
    return MTC_OK;
}

mtc_result_t train_setup(train_rank *x, mtc_comm_t world, int threads, FILE *out) {
    const mtc_train_config *c = x->cfg;
    mtc_progress_begin(&x->progress, "building GPT model (parameters, gradients, optimizer state)");
    int B = c->micro_batch, T = c->model.seq_length;
    mtc_grid_config gc = c->grid;
    gc.world_size = mtc_comm_size(world);
    /* a standalone MTP stage's wte copy joins EMBEDDING_GROUP */
    gc.embd_mtp_rank = 1 + pp_layout_mtp_standalone_rank(&c->pp_split, c->model.num_layers, gc.pp,
                                                         gc.pp > 1 ? gc.vpp : 1);
    gc.embd_untied = c->model.untie_embeddings;
    MTC_CHECK(mtc_grid_init(&x->grid, world, &gc));
    x->world = world;
    const mtc_grid_coord *co = mtc_grid_coords(x->grid);
    /* the kinds of gradient buffer and their groups (dp/groups.c) */
    x->nbuf =
        mtc_ddp_kinds(x->grid, c->use_distributed_optimizer, c->model.moe.num_experts, x->gbuf);
    x->pp_size = gc.pp, x->pp_rank = co->pp;
    x->dp_size = mtc_grid_spec_get(x->grid)->dp;
    x->dp_rank = co->dp; /* the data rank; CP ranks of one DP rank share its samples */
    x->T_rank = mtc_model_seq_per_rank(&c->model, x->grid);
    x->world_rank = mtc_comm_rank(world);
    MTC_CHECK(nn_pool_create_opts(threads, c->pool_opts, &x->pool));
    MTC_CHECK(train_scaler_init(x));
    int P = x->pp_size;
    x->vpp = mtc_grid_chunks(x->grid);
    MTC_CHECK(mtc_mem_calloc((size_t)x->vpp, sizeof(train_chunk), (void **)&x->chunks));
    pp_schedule_config sc = {.pp = P,
                             .vpp = x->vpp > 1 ? x->vpp : 0,
                             .num_microbatches = c->global_batch / (B * x->dp_size),
                             .group_size = c->microbatch_group_size};
    int peak[64], pk[64];
    if (x->vpp > (int)(sizeof peak / sizeof peak[0]))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "virtual pipeline size %d is above %d", x->vpp,
                         (int)(sizeof peak / sizeof peak[0]));
    /* activation slots: each chunk's peak of microbatches between forward
     * and backward, over every microbatch count the run can have (the
     * evaluation batch and each --step-batch-size-schedule entry reached) */
    const mtc_batch_schedule *bs = c->batch_schedule;
    for (int k = 0; k < x->vpp; k++)
        peak[k] = 1;
    x->nmb_max = 1;
    if (!bs || c->eval_iters > 0) { /* the evaluation's (and without a schedule, training's) */
        MTC_CHECK(train_slot_counts(x, &sc, peak));
        x->nmb_max = sc.num_microbatches;
    }
    /* the entries the run reaches (those mtc_train_validate_layout checked;
     * the same schedule gives a resumed run the same ones) */
    int reached[MTC_BATCH_SCHEDULE_MAX] = {0};
    if (bs) mtc_batch_schedule_walk(bs, 0, c->train_iters, reached);
    for (int e = 0; bs && e < bs->n; e++) {
        pp_schedule_config se = sc;
        se.num_microbatches = (int)(bs->batch[e] / (B * x->dp_size));
        if (!reached[e]) continue;
        if (se.num_microbatches > x->nmb_max) x->nmb_max = se.num_microbatches;
        MTC_CHECK(train_slot_counts(x, &se, pk));
        for (int k = 0; k < x->vpp; k++)
            if (pk[k] > peak[k]) peak[k] = pk[k];
    }
    x->nmb = sc.num_microbatches; /* train_set_batch sets the pass's */
    MTC_CHECK(train_bf16_engine(x));
    for (int k = 0; k < x->vpp; k++)
        MTC_CHECK(train_chunk_init(x, k, peak[k]));
    x->msg_count = (size_t)B * x->chunks[0].model->T_loc * c->model.hidden_size;
    x->pos = mtc_model_positions(x->chunks[0].model);
    /* every executor the run will use, made now (each is collective over
     * PIPELINE_MODEL_PARALLEL_GROUP and allocates): the step loop only picks */
    for (int e = 0; bs && e < bs->n; e++)
        if (reached[e]) MTC_CHECK(train_set_batch(x, bs->batch[e]));
    if (!bs || c->eval_iters > 0) MTC_CHECK(train_set_batch(x, c->global_batch));
    MTC_CHECK(train_set_batch(x, train_batch_at(c, 0)));
    MTC_CHECK(mtc_mem_alloc((size_t)(T + 1) * sizeof(int), (void **)&x->buf));
    MTC_CHECK(mtc_mem_alloc((size_t)x->nmb_max * B * x->T_rank * sizeof(int), (void **)&x->tokens));
    MTC_CHECK(
        mtc_mem_alloc((size_t)x->nmb_max * B * x->T_rank * sizeof(int), (void **)&x->targets));
    size_t red_n = 0; /* red_buf: the largest chunk's packed group reduction */
    for (int k = 0; k < x->vpp; k++)
        for (unsigned bit = MTC_REDUCE_TP; bit <= MTC_REDUCE_EMBEDDING; bit <<= 1) {
            const mtc_registry *r = &x->chunks[k].model->reg;
            size_t n = 0;
            for (int i = 0; i < r->count; i++)
                if (r->params[i].reduce_groups & bit) n += r->params[i].local_numel;
            if (n > red_n) red_n = n;
        }
    if (red_n) MTC_CHECK(mtc_mem_alloc(red_n * sizeof(float), (void **)&x->red_buf));
    MTC_CHECK(train_norm_plan(x));
    MTC_CHECK(train_pnorm_plan(x));
    mtc_progress_end(&x->progress);
    /* initialised even when loading: vocabulary rows a checkpoint padded for
     * another TP size lacks keep their initial values */
    init_progress ip = {&x->progress, 0, 0};
    for (int k = 0; k < x->vpp; k++)
        ip.total += x->chunks[k].model->reg.total;
    char count[16];
    mtc_progress_begin(&x->progress, "initialising %s parameters",
                       mtc_progress_count(count, (double)ip.total));
    for (int k = 0; k < x->vpp; k++) {
        if (train_fsdp_meta(c)) /* --init-model-with-meta-device: the shards alone */
            MTC_CHECK(train_fsdp_init_params(x, &x->chunks[k]));
        else
            mtc_model_init_params_progress(x->chunks[k].model, c->seed, train_init_progress, &ip);
        ip.before += x->chunks[k].model->reg.total;
    }
    mtc_progress_end(&x->progress);
    x->last_saved = -1;
    if (c->load_path && c->load_weights_file)
        MTC_CHECK(train_load_file(x));
    else if (c->load_path)
        MTC_CHECK(train_ckpt_load(x, out));
    MTC_CHECK(train_shard_main(x));
    return train_fp8_param_gather_init(x);
}

size_t train_memory(const train_rank *x, mtc_dp_memory *mem) {
    size_t act = 0;
    memset(mem, 0, sizeof *mem);
    for (int k = 0; k < x->vpp; k++) {
        mtc_dp_memory m;
        for (int b = 0; b < x->nbuf; b++) {
            const mtc_ddp *d = x->chunks[k].buf[b].ddp;
            if (!d) continue;
            if (x->chunks[k].buf[b].fsdp) /* the measured peak of resident pages */
                mtc_fsdp_memory(x->chunks[k].buf[b].fsdp, &m);
            else
                mtc_ddp_memory(d, &m);
            mem->param_bytes += m.param_bytes, mem->grad_bytes += m.grad_bytes;
            mem->optim_state_bytes += m.optim_state_bytes;
        }
        mem->param_bytes -= x->chunks[k].model->main_released; /* --bf16 distopt: the shard */
        act += mtc_model_activation_bytes(x->chunks[k].model);
    }
    return act;
}

mtc_result_t train_set_batch(train_rank *x, int64_t batch) {
    const mtc_train_config *c = x->cfg;
    int nmb = (int)(batch / ((int64_t)c->micro_batch * x->dp_size));
    if (nmb < 1 || nmb > x->nmb_max || batch % ((int64_t)c->micro_batch * x->dp_size))
        return mtc_error(MTC_ERR_INVALID_USAGE,
                         "global batch %lld does not fit micro-batch-size=%d x data-parallel "
                         "size %d (up to %d microbatches); a checkpoint from another batch "
                         "schedule?",
                         (long long)batch, c->micro_batch, x->dp_size, x->nmb_max);
    x->nmb = nmb, x->cur_batch = batch;
    if (x->pp_size == 1) return MTC_OK;
    for (int i = 0; i < x->nex; i++)
        if (x->ex_nmb[i] == nmb) {
            x->ex = x->ex_of[i];
            return MTC_OK;
        }
    if (x->nex == (int)(sizeof x->ex_of / sizeof x->ex_of[0]))
        return mtc_error(MTC_ERR_INTERNAL, "more microbatch counts than schedule entries");
    pp_executor_config ec = {.schedule = {.pp = x->pp_size,
                                          .vpp = x->vpp > 1 ? x->vpp : 0,
                                          .num_microbatches = nmb,
                                          .group_size = c->microbatch_group_size},
                             .count = x->msg_count};
    size_t *counts = NULL; /* a standalone MTP stage's 1 + D states (pp/layout.h) */
    MTC_CHECK(pp_layout_message_counts(&counts, &ec.count, x->msg_count, &c->pp_split,
                                       c->model.num_layers, x->pp_size, x->vpp));
    ec.stage_count = counts;
    pp_channels ch; /* the grid's (pp/executor.c) */
    pp_channels_from_grid(&ch, x->grid);
    mtc_result_t rc = pp_executor_init(&x->ex_of[x->nex], &ec, &ch, NULL);
    free(counts);
    MTC_CHECK(rc);
    if (c->bf16) MTC_CHECK(pp_executor_set_activations_bf16(x->ex_of[x->nex]));
    x->ex = x->ex_of[x->nex], x->ex_nmb[x->nex++] = nmb;
    return MTC_OK;
}

void train_teardown(train_rank *x) {
    for (int k = 0; x->chunks && k < x->vpp; k++) {
        train_chunk *ch = &x->chunks[k];
        for (int b = TRAIN_GBUF_MAX - 1; b >= 0; b--) {
            mtc_fsdp_free(ch->buf[b].fsdp);
            mtc_distopt_free(ch->buf[b].dopt);
        }
        mtc_adamw_free(&ch->opt);
        for (int b = TRAIN_GBUF_MAX - 1; b >= 0; b--) {
            mtc_ddp_free(ch->buf[b].ddp); /* before the model: it waits on the model's buffers */
            mtc_grad_norm_plan_free(&ch->buf[b].norm);
            mtc_grad_norm_plan_free(&ch->buf[b].pnorm);
        }
        mtc_model_free(ch->model);
        free(ch->slot_of), free(ch->slot_busy);
    }
    free(x->chunks);
    x->chunks = NULL;
    free(x->buf), free(x->tokens), free(x->targets), free(x->red_buf);
    for (int i = 0; i < x->nex; i++)
        pp_executor_free(x->ex_of[i]);
    x->nex = 0, x->ex = NULL;
    nn_pool_free(x->pool);
    mtc_grid_free(x->grid);
}

mtc_result_t train_gather(train_rank *x, float *global) {
    MTC_CHECK(train_params_wait(x));
    const mtc_registry *r0 = &x->chunks[0].model->reg;
    size_t big = 0;
    for (int k = 0; k < x->vpp; k++)
        for (int i = 0; i < x->chunks[k].model->reg.count; i++)
            if (x->chunks[k].model->reg.params[i].local_numel > big)
                big = x->chunks[k].model->reg.params[i].local_numel;
    float *scratch;
    MTC_CHECK(mtc_mem_alloc(big * (size_t)x->chunks[0].model->tp_size * sizeof(float),
                            (void **)&scratch));
    memset(global, 0, r0->global_total * sizeof(float));
    mtc_result_t rc = MTC_OK;
    float *full = NULL; /* --bf16 distopt: the fp32 main params from the shards */
    for (int k = 0; k < x->vpp && rc == MTC_OK; k++) { /* chunks hold disjoint layers */
        const mtc_model *m = x->chunks[k].model;
        const float *src = m->params;
        if (m->main_sharded) {
            free(full);
            full = NULL;
            const train_gbuf *d = &x->chunks[k].buf[TRAIN_GBUF_DENSE];
            rc = mtc_mem_alloc(d->ddp->layout.numel * sizeof(float), (void **)&full);
            /* comm: all-gather(intra) per bucket */
            if (rc == MTC_OK) rc = mtc_distopt_gather_main(d->dopt, full);
            src = full;
        }
        /* comm: all-gather(tp) per split parameter */
        if (rc == MTC_OK) rc = mtc_model_gather(m, global, src, scratch);
        for (int i = 0; rc == MTC_OK && i < m->reg.count; i++) /* the first copy counts */
            if (m->reg.params[i].shared_copy)
                memset(global + m->reg.params[i].global_offset, 0,
                       m->reg.params[i].numel * sizeof(float));
    }
    free(scratch);
    free(full);
    MTC_CHECK(rc);
    const mtc_model *models[64]; /* the layers other ranks hold (model/model_ranks.c) */
    for (int k = 0; k < x->vpp; k++)
        models[k] = x->chunks[k].model;
    MTC_CHECK(mtc_model_gather_ranks(models, x->vpp, x->grid, global));
    return MTC_OK;
}

/* The header and layout of one of chunk k's buffers. */
static void train_print_buffer(const train_rank *x, int k, const mtc_ddp *d, const int *shared,
                               FILE *out) {
    const dp_layout *l = &d->layout;
    const mtc_registry *r = &x->chunks[k].model->reg;
    dp_layout_config cfg = {.dp = l->dp,
                            .bucket_size = d->cfg.bucket_size,
                            .pad_high_busbw = d->cfg.pad_high_busbw,
                            .use_distopt = d->cfg.use_distopt,
                            .skip_empty = 1,
                            .shared_embedding = shared};
    int split = train_ep_split(x);
    fprintf(out, "> %sgradient buffer layout of the last rank (pipeline stage %d, tensor rank %d",
            d->cfg.params == MTC_DDP_PARAMS_EXPERT ? "expert-parallel "
            : split                                ? "dense "
                                                   : "",
            x->pp_rank, train_tp_rank(x));
    if (x->vpp > 1) fprintf(out, ", model chunk %d of %d", k, x->vpp);
    if (split) { /* params of the other buffer, or of another EP rank, have no place here */
        fprintf(out, ", %s group of %d ranks):\n",
                d->cfg.params == MTC_DDP_PARAMS_EXPERT ? "expert-data-parallel" : "data-parallel",
                d->comms.dp ? mtc_comm_size(d->comms.dp) : 1);
    } else {
        fprintf(out, "), as `mtc layout --param-numels ");
        for (int i = 0; i < r->count; i++)
            fprintf(out, "%s%zu", i ? "," : "", r->params[i].local_numel);
        fprintf(out, " --data-parallel-size %d", l->dp);
        if (cfg.bucket_size > 0)
            fprintf(out, " --ddp-bucket-size %lld", (long long)cfg.bucket_size);
        if (cfg.pad_high_busbw) fprintf(out, " --pad-buckets-for-high-nccl-busbw");
        for (int i = 0; i < r->count; i++)
            if (shared[i]) fprintf(out, " --shared-embedding-params %d", i);
        if (!cfg.use_distopt) fprintf(out, " --no-distributed-optimizer");
        fprintf(out, "` prints it:\n");
    }
    dp_layout_print(out, l, &cfg, shared);
    fprintf(out, "> end of layout\n");
}

/* One DDP per model chunk, as Megatron builds them: each chunk's layout
 * (and with EP > 1 its expert-parallel buffer's). */
void train_print_layout(const train_rank *x, FILE *out) {
    for (int k = 0; k < x->vpp; k++) {
        const mtc_registry *r = &x->chunks[k].model->reg;
        int *shared = calloc((size_t)(r->count > 0 ? r->count : 1), sizeof(int));
        if (!shared) return;
        for (int i = 0; i < r->count; i++)
            shared[i] = mtc_ddp_shared_embedding(&r->params[i], x->pp_size);
        for (int b = 0; b < x->nbuf; b++)
            if (x->chunks[k].buf[b].ddp)
                train_print_buffer(x, k, x->chunks[k].buf[b].ddp, shared, out);
        free(shared);
    }
}
