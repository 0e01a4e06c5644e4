/* dp/chunk_layout.c - a chunk's gradient buffers laid out once (see
 * dp/chunk_layout.h): Megatron's DDP configuration of each kind of buffer,
 * then one mtc_ddp_layout per kind the chunk holds, laid after the kinds
 * before it. Relies on dp/ddp.c (the layout of one buffer) and dp/fsdp.c
 * (the FSDP units); allocates only the layouts and two per-param tables. */
#include "dp/chunk_layout.h"

#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "dp/fsdp.h"

int mtc_ddp_shared_embedding(const mtc_param *p, int pp_size) {
    return pp_size > 1 && (p->reduce_groups & MTC_REDUCE_EMBEDDING) != 0;
}

/* Kind b's configuration: Megatron's rule of buckets only with overlap, on
 * the first stage's first chunk (one bucket elsewhere); the distributed
 * optimizer's tied embedding alone in the dense buffer; Megatron-FSDP's
 * bucket per unit, and with sharded gradients its own reduction (no
 * overlap or bf16 staging in the DDP) and page padding over the shard
 * (HFSDP: over the instances too). */
static mtc_ddp_config chunk_buffer_config(const mtc_ddp_chunk_layout *cl,
                                          const mtc_ddp_chunk_opts *o, mtc_ddp_params params,
                                          int shard, int pad_ranks, size_t base) {
    mtc_ddp_config dc = {.use_distopt = o->use_distopt,
                         .overlap_grad_reduce = o->overlap_grad_reduce,
                         .bucket_size = dp_layout_bucket_size(
                             o->bucket_size, o->dp, o->overlap_grad_reduce, o->pp_rank, o->chunk),
                         .pad_high_busbw = o->use_distopt && o->pad_high_busbw,
                         .scale = MTC_DDP_GRAD_SUM,
                         .grad_reduce_bf16 = o->grad_reduce_bf16,
                         .params = params,
                         .shared_embedding = o->use_distopt ? cl->shared : NULL};
    if (params == MTC_DDP_PARAMS_EXPERT) {
        /* Megatron's expert buffer: reduced over EXPERT_DATA_PARALLEL_GROUP,
         * pre-scaled (when averaging) by 1/|dp x cp| as the dense one, and
         * sharded over that group by its own distributed-optimizer instance */
        dc.shared_embedding = NULL;
        dc.base = base;
        dc.avg_size = o->dp_cp;
    }
    if (o->fsdp_strategy >= MTC_FSDP_OPTIM) {
        dc.unit_of = cl->units;
        dc.bucket_size = 0; /* the units are the buckets */
        if (o->fsdp_strategy >= MTC_FSDP_OPTIM_GRADS) {
            dc.overlap_grad_reduce = 0; /* mtc_fsdp reduces each unit itself */
            dc.grad_reduce_bf16 = 0;    /* ... in bf16 with its own unit-sized staging */
            /* the expert-parallel buffer shards over expert-DP, the dense one over DP x CP */
            dc.pad_divisor = mtc_fsdp_pad_divisor(pad_ranks > 0 ? pad_ranks : shard);
        }
    }
    return dc;
}

mtc_result_t mtc_ddp_chunk_layout_init(mtc_ddp_chunk_layout *out, const mtc_registry *reg,
                                       const mtc_ddp_chunk_opts *o, int n,
                                       const mtc_ddp_params *params, const int *ranks) {
    memset(out, 0, sizeof *out);
    if (n < 1 || n > MTC_DDP_KINDS_MAX)
        return mtc_error(MTC_ERR_INTERNAL, "%d kinds of gradient buffer (1 to %d)", n,
                         MTC_DDP_KINDS_MAX);
    size_t np = (size_t)(reg->count > 0 ? reg->count : 1);
    mtc_result_t rc;
    MTC_CHECK_GOTO(mtc_mem_calloc(np, sizeof(int), (void **)&out->shared), rc, fail);
    for (int i = 0; i < reg->count; i++)
        out->shared[i] = mtc_ddp_shared_embedding(&reg->params[i], o->pp_size);
    if (o->fsdp_strategy >= MTC_FSDP_OPTIM) {
        MTC_CHECK_GOTO(mtc_mem_calloc(np, sizeof(int), (void **)&out->units), rc, fail);
        mtc_fsdp_units(reg, o->num_layers, out->units);
        mtc_fsdp_group_units(reg, out->units, o->fsdp_unit_size);
    }
    out->n = n;
    size_t base = 0;
    for (int b = 0; b < n; b++) {
        int held = b == 0; /* the dense buffer always exists */
        for (int i = 0; !held && i < reg->count; i++)
            held = mtc_ddp_holds(reg, &reg->params[i], params[b]);
        out->cfg[b] = chunk_buffer_config(out, o, params[b], ranks[b], o->fsdp_pad_ranks[b], base);
        if (!held) continue; /* a chunk without local experts */
        out->held[b] = 1;
        MTC_CHECK_GOTO(
            mtc_ddp_layout(reg, &out->cfg[b], ranks[b], o->placement_only, &out->layout[b]), rc,
            fail);
        base += (size_t)out->layout[b].numel;
    }
    out->total = base;
    return MTC_OK;
fail:
    mtc_ddp_chunk_layout_free(out);
    return rc;
}

void mtc_ddp_chunk_layout_offsets(const mtc_ddp_chunk_layout *cl, size_t *offsets) {
    const dp_layout *d = &cl->layout[0];
    for (int i = 0; i < d->nparams; i++) /* the dense buffer's places (empty ones included) */
        offsets[i] = (size_t)d->param[i].start;
    for (int b = 1; b < cl->n; b++) /* ... and the params of the buffers after it */
        for (int i = 0; cl->held[b] && i < cl->layout[b].nparams; i++)
            if (cl->layout[b].param_bucket[i] >= 0)
                offsets[i] = cl->cfg[b].base + (size_t)cl->layout[b].param[i].start;
}

void mtc_ddp_chunk_layout_free(mtc_ddp_chunk_layout *cl) {
    if (!cl) return;
    for (int b = 0; b < MTC_DDP_KINDS_MAX; b++)
        dp_layout_free(&cl->layout[b]);
    free(cl->shared), free(cl->units);
    memset(cl, 0, sizeof *cl);
}
