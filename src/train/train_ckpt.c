/* train/train_ckpt.c - one rank's side of directory checkpoints (ckpt/dist.h):
 * which pieces of its state it writes, which it reads, and the common state
 * (iteration, consumed samples, optimizer step, scheduler, seed, arguments).
 *
 * Save (collective over the world, no gather):
 *   rank 0: begin ── barrier ── every rank: write_shard ── barrier ──
 *   rank 0: commit (metadata.json, rename, tracker) ── barrier
 * Each element is written once: weights and plain-AdamW moments are
 * replicated over data parallelism (and over TP for tp_duplicate params),
 * so the replica that writes a tensor is picked by a hash of its key (the
 * writes spread over the DP x CP ranks, and over TP for the duplicates); a
 * distributed optimizer's shards are each rank's own (with several
 * instances, one instance writes each piece, spread by the same hash); the
 * last stage's copy of a tied embedding is never written.
 * Load: every rank lists what it holds in its own layout (weights, and the
 * moments of its whole buffer or of its optimizer shard) and reads the
 * overlapping stored pieces: any tp x pp x vpp x dp x distopt layout loads
 * into any other. --async-save: the write_shard step runs on a writer
 * thread per rank from a snapshot of the pieces (ckpt/dist_async.c); the
 * loop asks after each iteration (train_ckpt_finalize) and the barriers and
 * commit follow once every writer finished, at the latest at the next save
 * or the end of the run. Relies on ckpt/, dp/, optim/, comm/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/state.h"
#include "core/timer.h"
#include "train/train_internal.h"

/* This replica writes a piece of hash h when h picks it among n. */
static int picks(uint32_t h, int n, int r) { return n <= 1 || (int)(h % (uint32_t)n) == r; }

static uint32_t key_hash(const char *key, uint32_t salt) {
    return mtc_crc32c(salt, key, strlen(key));
}

static mtc_result_t dopt_pieces(train_rank *x, const mtc_distopt *o, const mtc_model *m,
                                mtc_ckpt_pieces *l, int for_save, int with_optim, int sharded);

static mtc_result_t chunk_pieces(train_rank *x, const train_chunk *ch, mtc_ckpt_pieces *l,
                                 int for_save, int with_optim) {
    const mtc_model *m = ch->model;
    const mtc_registry *r = &m->reg;
    int tp_rank = m->tp_rank, tp = m->tp_size;
    /* parameters are replicated over DATA_PARALLEL_GROUP_WITH_CP (context
     * parallelism splits the sequence, not the weights): one replica of
     * that group writes each piece */
    mtc_comm_t rep = train_replicas(x);
    int rep_n = rep ? mtc_comm_size(rep) : 1, rep_r = rep ? mtc_comm_rank(rep) : 0;
    /* an expert split over EP is replicated over EXPERT_DATA_PARALLEL_GROUP only */
    mtc_comm_t edp = x->gbuf[TRAIN_GBUF_EXPERT].dp;
    int xrep_n = edp ? mtc_comm_size(edp) : 1, xrep_r = edp ? mtc_comm_rank(edp) : 0;
    char key[MTC_CKPT_KEY_MAX];
    /* --bf16 distopt: the fp32 main params are each rank's shard, written
     * with the moments below */
    const mtc_distopt *dopt = ch->buf[TRAIN_GBUF_DENSE].dopt;
    int sharded = m->main_sharded && dopt;
    for (int i = 0; i < r->count; i++) {
        const mtc_param *p = &r->params[i];
        if (for_save && p->shared_copy) continue;
        if (mtc_param_absent(p)) continue; /* another EP rank's expert */
        int xp = mtc_param_expert_parallel(r, p);
        for (int which = sharded; which < (with_optim && !dopt ? 3 : 1); which++) {
            mtc_ckpt_key(key, sizeof key, which, p->name);
            uint32_t h = key_hash(key, 0);
            /* (expert-DP holds an expert's TP duplicates too: it alone picks) */
            if (for_save && !(picks(h, xp ? xrep_n : rep_n, xp ? xrep_r : rep_r) &&
                              (!p->tp_duplicate || xp || picks(h >> 16, tp, tp_rank))))
                continue;
            float *base = which == 0 ? m->params : which == 1 ? ch->opt.m : ch->opt.v;
            if (!for_save && which == 0 && train_fsdp_meta(x->cfg)) { /* the shards alone */
                MTC_CHECK(train_fsdp_load_pieces(ch, l, i, key));
                continue;
            }
            MTC_CHECK(
                mtc_ckpt_param_pieces(l, r, p, tp_rank, key, base + p->offset, 0, p->local_numel));
        }
    }
    if ((!with_optim && !sharded) || !dopt) return MTC_OK;
    for (int b = 0; b < TRAIN_GBUF_MAX; b++) /* the fp32 main params: the dense shard's */
        if (ch->buf[b].dopt)
            MTC_CHECK(dopt_pieces(x, ch->buf[b].dopt, m, l, for_save, with_optim, b ? 0 : sharded));
    return MTC_OK;
}

/* The distributed optimizer's m and v of instance o (dense or expert), and
 * with sharded (--bf16 distopt) the fp32 main params of its shard. */
static mtc_result_t dopt_pieces(train_rank *x, const mtc_distopt *o, const mtc_model *m,
                                mtc_ckpt_pieces *l, int for_save, int with_optim, int sharded) {
    const mtc_registry *r = &m->reg;
    int tp_rank = m->tp_rank, tp = m->tp_size;
    char key[MTC_CKPT_KEY_MAX];
    mtc_comm_t inter = o->ddp->comms.inter;
    /* HFSDP's slices are disjoint over the instances: each rank writes its own */
    int nd = inter && o->parts == 1 ? mtc_comm_size(inter) : 1,
        ir = nd > 1 ? mtc_comm_rank(inter) : 0;
    int xbuf = o->ddp->cfg.params == MTC_DDP_PARAMS_EXPERT; /* shards over expert-DP: disjoint */
    for (int k = 0; k < o->npieces; k++) {
        const mtc_distopt_piece *pc = &o->pieces[k];
        const mtc_param *p = &r->params[pc->param];
        if (for_save && p->shared_copy) continue;
        /* the piece's place in the param (the buffer starts at base in the model's) */
        size_t a = o->ddp->cfg.base + (size_t)pc->start - p->offset, b = a + (size_t)pc->n;
        for (int which = sharded ? 0 : 1; which <= (with_optim ? 2 : 0); which++) {
            mtc_ckpt_key(key, sizeof key, which, p->name);
            uint32_t h = key_hash(key, (uint32_t)k);
            if (for_save &&
                !(picks(h, nd, ir) && (!p->tp_duplicate || xbuf || picks(h >> 16, tp, tp_rank))))
                continue;
            /* base: local element a of the piece */
            float *base = which == 0 ? m->params + o->ddp->cfg.base + pc->start
                                     : (which == 1 ? o->m : o->v) + pc->state;
            MTC_CHECK(mtc_ckpt_param_pieces(l, r, p, tp_rank, key, base, a, b));
        }
    }
    return MTC_OK;
}

static mtc_result_t train_ckpt_pieces(train_rank *x, mtc_ckpt_pieces *l, int for_save,
                                      int with_optim) {
    for (int k = 0; k < x->vpp; k++)
        MTC_CHECK(chunk_pieces(x, &x->chunks[k], l, for_save, with_optim));
    return MTC_OK;
}

/* Everything that is not a tensor (Megatron's common.pt). */
static cJSON *train_ckpt_common(const train_rank *x, int64_t it, uint64_t consumed) {
    const mtc_train_config *c = x->cfg;
    cJSON *j = cJSON_CreateObject();
    char s[32];
    cJSON_AddNumberToObject(j, "iteration", (double)it);
    cJSON_AddNumberToObject(j, "consumed_samples", (double)consumed);
    cJSON_AddNumberToObject(j, "optimizer_step", (double)x->step);
    cJSON_AddBoolToObject(j, "has_optimizer", 1);
    cJSON_AddStringToObject(j, "tokenizer", c->tokenizer ? c->tokenizer : "none");
    cJSON_AddItemToObject(j, "model", mtc_ckpt_config_json(&c->model));
    /* mtc's counter-based generator: dropout is keyed by (seed, iteration) */
    cJSON *rng = cJSON_AddObjectToObject(j, "rng");
    snprintf(s, sizeof s, "%llu", (unsigned long long)c->seed);
    cJSON_AddStringToObject(rng, "seed", s);
    cJSON_AddNumberToObject(rng, "position", (double)it);
    cJSON *sch = cJSON_AddObjectToObject(j, "opt_param_scheduler");
    /* Megatron's state_dict, in its units (samples when the schedule runs on them) */
    const mtc_lr_schedule *l = &c->lr;
    int smp = l->step_samples > 0;
    static const char *wd_styles[] = {"constant", "linear", "cosine"};
    cJSON_AddNumberToObject(sch, "max_lr", l->lr);
    cJSON_AddNumberToObject(sch, "min_lr", l->min_lr);
    cJSON_AddNumberToObject(sch, "lr_warmup_steps",
                            smp ? l->warmup_samples : (double)l->warmup_iters);
    cJSON_AddNumberToObject(sch, "lr_decay_steps",
                            (double)(smp ? l->decay_samples : l->decay_iters));
    cJSON_AddStringToObject(sch, "lr_decay_style", mtc_lr_style_name(l->style));
    cJSON_AddNumberToObject(sch, "num_steps", train_sched_steps(x));
    /* a schedule filled by mtc train carries both ends; other callers only AdamW's */
    int bare = l->wd_style == MTC_WD_CONSTANT && l->start_wd == 0 && l->end_wd == 0;
    cJSON_AddNumberToObject(sch, "start_wd", bare ? c->adam.weight_decay : l->start_wd);
    cJSON_AddNumberToObject(sch, "end_wd", bare ? c->adam.weight_decay : l->end_wd);
    cJSON_AddStringToObject(sch, "wd_incr_style", wd_styles[l->wd_style]);
    cJSON_AddNumberToObject(sch, "wd_incr_steps",
                            smp ? (double)l->wd_incr_samples
                                : (double)(l->wd_incr_iters ? l->wd_incr_iters : c->train_iters));
    cJSON *a = cJSON_AddObjectToObject(j, "args");
    cJSON_AddNumberToObject(a, "world_size", mtc_comm_size(x->world));
    cJSON_AddNumberToObject(a, "tensor_model_parallel_size", c->grid.tp);
    cJSON_AddNumberToObject(a, "pipeline_model_parallel_size", x->pp_size);
    cJSON_AddNumberToObject(a, "virtual_pipeline_model_parallel_size", x->vpp);
    cJSON_AddNumberToObject(a, "data_parallel_size", x->dp_size);
    /* as Megatron's args: off with tp 1 (the model's TP context says) */
    cJSON_AddBoolToObject(a, "sequence_parallel", x->chunks[0].model->tp.sequence_parallel);
    cJSON_AddBoolToObject(a, "use_distributed_optimizer", c->use_distributed_optimizer);
    cJSON_AddNumberToObject(a, "num_distributed_optimizer_instances",
                            c->grid.num_dist_opt_instances > 1 ? c->grid.num_dist_opt_instances
                                                               : 1);
    cJSON_AddNumberToObject(a, "micro_batch_size", c->micro_batch);
    cJSON_AddNumberToObject(a, "global_batch_size", c->global_batch);
    cJSON_AddNumberToObject(a, "train_iters", (double)c->train_iters);
    cJSON_AddStringToObject(a, "seed", s);
    cJSON_AddNumberToObject(a, "adam_beta1", c->adam.beta1);
    cJSON_AddNumberToObject(a, "adam_beta2", c->adam.beta2);
    cJSON_AddNumberToObject(a, "adam_eps", c->adam.eps);
    cJSON_AddNumberToObject(a, "weight_decay", c->adam.weight_decay);
    cJSON_AddNumberToObject(a, "clip_grad", c->clip_grad);
    cJSON_AddBoolToObject(a, "bf16", c->bf16);
    cJSON_AddBoolToObject(a, "fp16", c->fp16);
    if (x->use_scaler && x->scaler.dynamic) { /* Megatron's grad_scaler state_dict */
        cJSON *gs = cJSON_AddObjectToObject(j, "grad_scaler");
        cJSON_AddNumberToObject(gs, "scale", (double)x->scaler.scale);
        cJSON_AddNumberToObject(gs, "growth_tracker", x->scaler.growth_tracker);
        cJSON_AddNumberToObject(gs, "hysteresis_tracker", x->scaler.hysteresis_tracker);
    }
    cJSON_AddNumberToObject(a, "hidden_dropout", c->model.hidden_dropout);
    cJSON_AddNumberToObject(a, "attention_dropout", c->model.attention_dropout);
    return j;
}

/* --async-save: what the commit of a save being written needs. */
struct train_ckpt_pending {
    mtc_ckpt_async *writer; /* this rank's shard writer */
    int64_t it;
    cJSON *common; /* rank 0: the state as of the snapshot */
    uint64_t t0;
};

/* Collective over the world, after every rank's shard is durable: rank 0
 * commits (metadata.json, rename, tracker). */
static mtc_result_t train_ckpt_commit(train_rank *x, int64_t it, const cJSON *common, uint64_t t0,
                                      FILE *out) {
    const mtc_train_config *c = x->cfg;
    MTC_CHECK(mtc_barrier(x->world)); /* comm: barrier(world): every shard is durable */
    if (x->world_rank == 0) {
        mtc_result_t rc = common ? mtc_ckpt_dist_commit(c->save_path, it, mtc_comm_size(x->world),
                                                        common, &x->ckpt_write)
                                 : mtc_error(MTC_ERR_OUT_OF_MEMORY, "checkpoint state");
        MTC_CHECK(rc);
    }
    MTC_CHECK(mtc_barrier(x->world)); /* the tracker names the new checkpoint */
    if (out && !c->quiet) {
        char dir[4096];
        mtc_ckpt_dist_dirname(dir, sizeof dir, c->save_path, it, 0);
        fprintf(out, "  successfully saved checkpoint from iteration %7lld to %s [ %.3f s%s ]\n",
                (long long)it, dir, (double)(mtc_time_ns() - t0) * 1e-9,
                c->async_save ? ", written in the background" : "");
        fflush(out);
    }
    return MTC_OK;
}

mtc_result_t train_ckpt_save(train_rank *x, int64_t it, uint64_t consumed, FILE *out) {
    const mtc_train_config *c = x->cfg;
    MTC_CHECK(train_ckpt_finalize(x, 1, out)); /* one save at a time */
    uint64_t t0 = mtc_time_ns();
    mtc_progress_begin(&x->progress, "%s the checkpoint of iteration %lld",
                       c->async_save ? "taking a snapshot for" : "saving", (long long)it);
    /* comm: wait for the distributed optimizer's all-gathers */
    MTC_CHECK(train_params_wait(x));
    if (x->world_rank == 0) MTC_CHECK(mtc_ckpt_dist_begin(c->save_path, it));
    MTC_CHECK(mtc_barrier(x->world)); /* comm: barrier(world) */
    mtc_ckpt_pieces l = {0};
    mtc_result_t rc = train_ckpt_pieces(x, &l, 1, 1);
    struct train_ckpt_pending *p = NULL;
    if (rc == MTC_OK && c->async_save) {
        /* the pieces are copied now; the writer runs while training goes on */
        p = calloc(1, sizeof *p);
        rc = p ? mtc_ckpt_async_start(&p->writer, c->save_path, it, x->world_rank, l.v, l.n,
                                      &x->ckpt_write)
               : mtc_error(MTC_ERR_OUT_OF_MEMORY, "no memory for an asynchronous save");
    } else if (rc == MTC_OK) {
        rc = mtc_ckpt_dist_write_shard(c->save_path, it, x->world_rank, l.v, l.n, &x->ckpt_write);
    }
    mtc_ckpt_pieces_free(&l);
    if (rc != MTC_OK) {
        free(p);
        return rc;
    }
    x->last_saved = it;
    mtc_progress_end(&x->progress);
    cJSON *common = x->world_rank == 0 ? train_ckpt_common(x, it, consumed) : NULL;
    rc = train_fp8_ckpt_save(x, common); /* comm: every rank's amax histories */
    if (rc != MTC_OK) {
        cJSON_Delete(common);
        free(p);
        return rc;
    }
    if (p) {
        p->it = it, p->common = common, p->t0 = t0;
        x->ckpt_pending = p;
        return MTC_OK;
    }
    rc = train_ckpt_commit(x, it, common, t0, out);
    cJSON_Delete(common);
    return rc;
}

mtc_result_t train_ckpt_finalize(train_rank *x, int blocking, FILE *out) {
    struct train_ckpt_pending *p = x->ckpt_pending;
    if (!p) return MTC_OK; /* the same on every rank: saves happen at the same iterations */
    if (!blocking) {
        int32_t done = mtc_ckpt_async_done(p->writer);
        /* comm: all-reduce(world) MIN: has every rank's writer finished? */
        MTC_CHECK(mtc_all_reduce(&done, &done, 1, MTC_DTYPE_I32, MTC_OP_MIN, x->world));
        if (!done) return MTC_OK;
    }
    x->ckpt_pending = NULL;
    mtc_result_t rc = mtc_ckpt_async_finish(p->writer);
    /* comm: all-reduce(world) MAX: a failed writer anywhere stops the commit everywhere */
    int32_t failed = rc != MTC_OK;
    mtc_result_t rr = mtc_all_reduce(&failed, &failed, 1, MTC_DTYPE_I32, MTC_OP_MAX, x->world);
    if (rc == MTC_OK) rc = rr;
    if (rc == MTC_OK && failed)
        rc = mtc_error(MTC_ERR_REMOTE,
                       "another rank failed to write its part of the checkpoint of iteration "
                       "%lld (its message names the file)",
                       (long long)p->it);
    if (rc == MTC_OK) rc = train_ckpt_commit(x, p->it, p->common, p->t0, out);
    cJSON_Delete(p->common);
    free(p);
    return rc;
}

void train_ckpt_abandon(train_rank *x) {
    struct train_ckpt_pending *p = x->ckpt_pending;
    if (!p) return;
    x->ckpt_pending = NULL;
    (void)mtc_ckpt_async_finish(p->writer); /* never committed: iter_N.tmp stays unnamed */
    cJSON_Delete(p->common);
    free(p);
}

static void train_load_progress(void *ctx, uint64_t done, uint64_t total) {
    mtc_progress_update(ctx, (double)done, (double)total);
}

static int64_t common_int(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(j, key);
    return cJSON_IsNumber(v) && v->valuedouble >= 0 ? (int64_t)v->valuedouble : -1;
}

/* No stored tensor ignored: the tensors each rank read, OR-ed over the
 * world, must cover the checkpoint (ckpt/dist.h). A rank whose read failed
 * returns at once (its failure ends the job: the launch aborts the others).
 * comm: all-reduce(world). */
static mtc_result_t train_ckpt_check_used(train_rank *x, const mtc_ckpt_dist *ck, mtc_result_t rc) {
    if (rc != MTC_OK) return rc;
    int n = mtc_ckpt_dist_count(ck);
    int32_t *used = malloc(((size_t)n + 1) * sizeof *used);
    if (!used) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "checkpoint tensor list");
    mtc_ckpt_dist_used(ck, used);
    rc = mtc_all_reduce(used, used, (size_t)n, MTC_DTYPE_I32, MTC_OP_MAX, x->world);
    if (rc == MTC_OK) rc = mtc_ckpt_dist_check_used(ck, used);
    free(used);
    return rc;
}

mtc_result_t train_ckpt_load(train_rank *x, FILE *out) {
    const mtc_train_config *c = x->cfg;
    int found = 0;
    int64_t it = 0;
    MTC_CHECK(mtc_ckpt_dist_find(c->load_path, c->ckpt_step, &it, &found));
    if (!found) return MTC_OK; /* the CLI warned: start from scratch */
    uint64_t t0 = mtc_time_ns();
    mtc_ckpt_dist *ck = NULL;
    MTC_CHECK(mtc_ckpt_dist_open(c->load_path, it, &ck));
    const cJSON *common = mtc_ckpt_dist_common(ck);
    int64_t saved_it = common_int(common, "iteration");
    int64_t consumed = common_int(common, "consumed_samples");
    int64_t step = common_int(common, "optimizer_step");
    mtc_result_t rc = MTC_OK;
    if (saved_it != it || consumed < 0 || step < 0)
        rc = mtc_error(MTC_ERR_FORMAT,
                       "%s lacks the iteration, consumed samples or optimizer step (a corrupted "
                       "checkpoint)",
                       mtc_ckpt_dist_path(ck));
    int with_optim = !c->finetune && !c->no_load_optim &&
                     cJSON_IsTrue(cJSON_GetObjectItem(common, "has_optimizer"));
    mtc_ckpt_pieces l = {0};
    mtc_progress_begin(&x->progress, "loading checkpoint %s", mtc_ckpt_dist_path(ck));
    mtc_ckpt_dist_set_progress(ck, train_load_progress, &x->progress);
    if (rc == MTC_OK) rc = train_ckpt_pieces(x, &l, 0, with_optim);
    if (rc == MTC_OK) rc = mtc_ckpt_dist_read(ck, l.v, l.n);
    mtc_progress_end(&x->progress);
    mtc_ckpt_pieces_free(&l);
    rc = train_ckpt_check_used(x, ck, rc);
    if (rc == MTC_OK && !c->finetune) {
        x->start_iteration = it, x->start_consumed = (uint64_t)consumed;
        x->step = step;
        /* the scheduler's samples (batch sizes may have changed); a
         * checkpoint without them had one batch size throughout */
        const cJSON *ns =
            cJSON_GetObjectItem(cJSON_GetObjectItem(common, "opt_param_scheduler"), "num_steps");
        x->sched_n = c->lr.step_samples > 0 && cJSON_IsNumber(ns) && ns->valuedouble >= 0
                         ? ns->valuedouble
                         : (double)step * (double)c->lr.step_samples;
    }
    /* --fp16: the dynamic scaler goes on where it was (a checkpoint without
     * one, e.g. from bf16 or fp32, leaves the --initial-loss-scale start) */
    const cJSON *gs = cJSON_GetObjectItem(common, "grad_scaler");
    if (rc == MTC_OK && with_optim && x->use_scaler && x->scaler.dynamic && cJSON_IsObject(gs)) {
        const cJSON *sc = cJSON_GetObjectItem(gs, "scale"),
                    *gt = cJSON_GetObjectItem(gs, "growth_tracker"),
                    *ht = cJSON_GetObjectItem(gs, "hysteresis_tracker");
        if (!cJSON_IsNumber(sc) || !(sc->valuedouble > 0) || !cJSON_IsNumber(gt) ||
            !cJSON_IsNumber(ht))
            rc =
                mtc_error(MTC_ERR_FORMAT, "%s: grad_scaler needs a positive scale and two trackers",
                          mtc_ckpt_dist_path(ck));
        else {
            x->scaler.scale = (float)sc->valuedouble;
            x->scaler.growth_tracker = (int)gt->valuedouble;
            x->scaler.hysteresis_tracker = (int)ht->valuedouble;
            x->loss_scale = x->scaler.scale;
        }
    }
    if (rc == MTC_OK && !c->finetune) rc = train_fp8_ckpt_load(x, common, mtc_ckpt_dist_path(ck));
    for (int k = 0; rc == MTC_OK && with_optim && k < x->vpp; k++) {
        if (c->use_distributed_optimizer) {
            for (int b = 0; b < x->nbuf; b++)
                if (x->chunks[k].buf[b].dopt) x->chunks[k].buf[b].dopt->step = step;
        } else
            x->chunks[k].opt.step = step;
    }
    if (rc == MTC_OK && out && !c->quiet) {
        fprintf(out,
                "  successfully loaded checkpoint from %s [ iteration %lld, consumed samples "
                "%lld%s%s, %.3f s ]\n",
                mtc_ckpt_dist_path(ck), (long long)it, (long long)consumed,
                with_optim ? ", optimizer state" : ", no optimizer state",
                c->finetune ? ", finetune: iteration 0" : "", (double)(mtc_time_ns() - t0) * 1e-9);
        fflush(out);
    }
    mtc_ckpt_dist_close(ck);
    return rc;
}
