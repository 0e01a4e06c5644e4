/* plan/report.c - `mtc plan --explain`: every term of one prediction, with
 * the formula or the mtc buffer it comes from, so a reader can redo it. */
#include "cp/cp.h"
#include "dp/fsdp.h"
#include "moe/moe.h"
#include "plan/plan.h"

static double mb(size_t b) { return (double)b / 1048576.0; }

void mtc_plan_explain(FILE *f, const mtc_plan_layout *l, const mtc_plan_machine *m,
                      const mtc_plan_memory *mem, const mtc_plan_time *t) {
    char name[96];
    mtc_plan_layout_name(l, name, sizeof name);
    const mtc_model_config *c = &l->model;
    int M = l->global_batch / (l->micro_batch * l->dp);
    fprintf(f, "layout %s on %s (%d ranks; %s, %s)\n", name, m->name, l->world,
            l->precision == MTC_PLAN_BF16 ? "bf16 weights, fp32 main grads and Adam state"
                                          : "fp32 weights, grads and Adam state",
            l->act_model == MTC_PLAN_ACT_MTC ? "activations: mtc's arena"
            : l->flash_attention ? "activations: Korthikanti et al. 2022 with flash attention "
                                   "(its log-sum-exp instead of the 5as/h term)"
                                 : "activations: Korthikanti et al. 2022");
    fprintf(f,
            "model: L=%d h=%d a=%d ffn=%d s=%d V=%d (padded %d); micro batch %d x %d "
            "microbatches x dp %d = global %d; recompute %s\n",
            c->num_layers, c->hidden_size, c->num_heads, c->ffn_hidden_size, c->seq_length,
            c->vocab_size, c->padded_vocab_size, l->micro_batch, M, l->dp, l->global_batch,
            l->recompute == MTC_PLAN_RECOMPUTE_FULL        ? "full"
            : l->recompute == MTC_PLAN_RECOMPUTE_SELECTIVE ? "selective"
                                                           : "none");
    if (l->pp > 1) { /* the layers of each (rank, chunk): pp/layout.c */
        char name[256], table[4096];
        pp_layout_name(name, sizeof name, &l->split);
        if (pp_layout_describe(table, sizeof table, &l->split, c->num_layers, l->pp, l->vpp) ==
            MTC_OK)
            fprintf(f, "pipeline split (%s):\n%s\n", name, table);
        pp_layout_describe_messages(table, sizeof table, &l->split, c->num_layers, l->pp, l->vpp);
        if (table[0]) /* time.c prices them as 1 + D single messages */
            fprintf(f, "%s; step time: priced approximately as that many messages\n", table);
    }
    fprintf(f, "memory of pipeline rank %d (the largest):\n", mem->pp_rank);
    fprintf(f, "  parameters        %12.2f MB  %lld held (registry), buffer %lld elements%s\n",
            mb(mem->param_bytes), (long long)mem->params, (long long)mem->buffer_numel,
            l->distopt ? " (distributed-optimizer padding)" : "");
    if (l->fsdp_strategy >= MTC_FSDP_OPTIM_GRADS) /* dp/fsdp.c's resident pages */
        fprintf(f,
                "  FSDP %s: params %zu B resident (fp32 shard + %s gathered units' other "
                "shards%s), gradients at most %zu B (shard + 2 units)\n",
                mtc_fsdp_strategy_name(l->fsdp_strategy), mem->param_bytes,
                l->fsdp_strategy == MTC_FSDP_OPTIM_GRADS ? "all"
                : l->overlap_param_gather                ? "3"
                                                         : "2",
                l->precision != MTC_PLAN_BF16 ? ""
                : l->fsdp_strategy == MTC_FSDP_OPTIM_GRADS_PARAMS
                    ? "; bf16: the units' bf16 compute copy, the fp32 main params the shard"
                    : "; plus the whole bf16 compute copy",
                (size_t)mem->fsdp_grad_numel * 4);
    else
        fprintf(f, "  gradients         %12.2f MB  buffer x 4 B\n", mb(mem->grad_bytes));
    fprintf(f, "  optimizer state   %12.2f MB  %lld elements x %d B (%s)\n", mb(mem->optim_bytes),
            (long long)mem->optim_numel,
            l->precision == MTC_PLAN_BF16 && l->fsdp_strategy < MTC_FSDP_OPTIM_GRADS ? 12 : 8,
            mtc_plan_hfsdp(l) ? "this rank's slice of its shard"
            : l->distopt      ? "this rank's shard"
                              : "every element");
    fprintf(f, "  activations       %12.2f MB  chunk 0 slot %.2f MB; in flight per chunk:",
            mb(mem->act_bytes), mb(mem->act_slot_bytes));
    for (int k = 0; k < mem->nchunks; k++)
        fprintf(f, " %d", mem->inflight[k]);
    fprintf(f, "\n");
    const mtc_moe_config *moe = &c->moe;
    if (moe->num_experts > 0) {
        int ep = l->ep > 1 ? l->ep : 1;
        fprintf(f,
                "  mixture of experts: %d of %d layers, %d experts (ffn %d), top-%d, %s, %s "
                "dispatcher; ep %d x etp %d, expert-DP %d\n",
                mtc_moe_num_layers(moe, c->num_layers), c->num_layers, moe->num_experts,
                mtc_model_moe_ffn(c), mtc_moe_topk(moe),
                moe->capacity_factor > 0 ? "capacity-bounded" : "dropless",
                moe->dispatcher == MOE_DISPATCH_ALLTOALL ? "alltoall" : "allgather", ep, l->etp,
                l->edp);
        fprintf(f, "    expert params   %12lld      held: the %d local experts%s\n",
                (long long)mem->expert_params, moe->num_experts / ep,
                l->etp > 1 ? " (their ETP slices)" : "");
        if (mem->expert_buffer_numel > 0)
            fprintf(f,
                    "    expert buffer   %12.2f MB  %lld elements (params + grads in the totals), "
                    "reduced over expert-DP %d; optimizer state of %lld elements (%s)\n",
                    mb((size_t)mem->expert_buffer_numel * 4), (long long)mem->expert_buffer_numel,
                    l->edp, (long long)mem->expert_optim_numel,
                    l->distopt ? "its own distributed-optimizer instance's shard" : "all");
        else
            fprintf(f, "    expert buffer   %12s      ep 1: the experts live in the dense buffer\n",
                    "-");
        fprintf(f,
                "    MoE activations %12.2f MB  of the activations above: routing, dispatched "
                "rows, expert fc1 / act, %s, shared expert\n",
                mb(mem->moe_act_bytes),
                moe->dispatcher == MOE_DISPATCH_ALLTOALL ? "received rows" : "gathered tokens");
    }
    fprintf(f, "  comm buffers      %12.2f MB  pipeline messages\n", mb(mem->comm_bytes));
    fprintf(f, "  total             %12.2f MB  of %.2f MB per %s\n", mb(mem->total_bytes),
            m->mem_bytes / 1048576.0 / (m->is_cpu ? l->world : 1), m->is_cpu ? "rank" : "device");
    fprintf(f, "step time:\n");
    if (t->kernels) {
        fprintf(f,
                "  GEMMs             %12.3f ms  linear layers at %.4g GFLOP/s + %.3g us per call "
                "(a layer's linears as bench-peak timed them) per core at mtc's shapes x %.3g "
                "cores x %.3f share of a core under load\n",
                t->compute_s * 1e3, m->kern.gemm_rate * 1e-9, m->kern.gemm_call * 1e6, t->devices,
                t->cpu_share);
        if (t->devices < 1)
            fprintf(f,
                    "  (%d ranks on %d cores: a rank runs at a whole core while it has one; the "
                    "compute +%.1f%% and each collective +%.1f us x %d / %d, bench-peak's "
                    "oversubscribed probe)\n",
                    l->world, m->devices_per_node, m->oversub_frac * 100, m->oversub_sync * 1e6,
                    m->devices_per_node, l->world);
    } else if (m->is_cpu)
        fprintf(f,
                "  GEMMs             %12.3f ms  %.4g FLOPs per rank at %.4g TFLOP/s (%.4g per "
                "core at mtc's shapes x %.3g cores x %.3f share of a core under load)\n",
                t->compute_s * 1e3, t->flops_rank, t->gemm_rate * 1e-12,
                (m->shape_flops_fp32 > 0 ? m->shape_flops_fp32 : m->peak_flops_fp32) * 1e-12,
                t->devices, t->cpu_share);
    else
        fprintf(f,
                "  GEMMs             %12.3f ms  %.4g FLOPs per rank at %.4g TFLOP/s x %.3f "
                "achieved\n",
                t->compute_s * 1e3, t->flops_rank,
                (l->precision == MTC_PLAN_BF16 ? m->peak_flops : m->peak_flops_fp32) * 1e-12,
                m->achieved);
    if (t->kernels) {
        fprintf(f,
                "  other kernels     %12.3f ms  mtc's non-GEMM kernels at bench-peak's costs, the "
                "same cores and share:\n",
                t->elementwise_s * 1e3);
        fprintf(f,
                "    attention       %12.3f ms  tiled: 64x64 causal tiles x (%.0f + %.0f HS) ns "
                "forward, (%.0f + %.0f HS) ns backward%s\n",
                t->attention_s * 1e3, m->kern.attn_fwd_tile * 1e9, m->kern.attn_fwd_hs * 1e9,
                m->kern.attn_bwd_tile * 1e9, m->kern.attn_bwd_hs * 1e9,
                c->attention_dropout > 0 ? ", dropout masks per visible score" : "");
        fprintf(f,
                "    per element     %12.3f ms  norms, GELU, dropout, residuals, embedding, "
                "cross-entropy\n",
                (t->elementwise_s - t->attention_s - t->optimizer_s) * 1e3);
        fprintf(f, "    optimizer       %12.3f ms  AdamW on the shard, gradient norm and zeroing\n",
                t->optimizer_s * 1e3);
    } else {
        fprintf(f, "  element-wise      %12.3f ms  activations and optimizer at %.3g GB/s\n",
                t->elementwise_s * 1e3, m->mem_bw * 1e-9);
    }
    if (moe->num_experts > 0) {
        int ep = l->ep > 1 ? l->ep : 1;
        fprintf(f,
                "  MoE GEMMs         %12.3f ms  of the GEMMs: router, expert rows, shared expert "
                "(%.4g FLOPs per rank; %.0f rows per layer per microbatch = local tokens x top-%d "
                "x etp %d%s)\n",
                t->moe_gemm_s * 1e3, t->moe_flops_rank, t->moe_rows, mtc_moe_topk(moe), l->etp,
                moe->capacity_factor > 0 ? " x capacity" : "");
        if (t->kernels)
            fprintf(
                f,
                "  MoE kernels       %12.3f ms  of the other kernels: routing, permutation, the "
                "rows' copies, activation and probability loops, weighted sum (%.2f / %.2f ns "
                "per row element, bench-peak's MoE layer)\n",
                t->moe_elem_s * 1e3, m->kern.moe_row_fwd * 1e9, m->kern.moe_row_bwd * 1e9);
        if (moe->dispatcher == MOE_DISPATCH_ALLTOALL)
            fprintf(f,
                    "  MoE dispatch      %12.3f ms  all-to-all over EP %d there and back, "
                    "all-gather-v / reduce-scatter-v over ETP %d, counts (each way)\n",
                    t->moe_comm_s * 1e3, ep, l->etp);
        else
            fprintf(f,
                    "  MoE dispatch      %12.3f ms  all-gather + reduce-scatter of the tokens over "
                    "ETP x EP %d, routing all-gathers (each way)\n",
                    t->moe_comm_s * 1e3, ep * l->etp);
    }
    fprintf(f, "  TP collectives    %12.3f ms%s\n", t->tp_comm_s * 1e3,
            l->tp_comm_overlap && l->sequence_parallel && l->tp > 1 && !m->is_cpu
                ? "  exposed: what each layer's GEMMs do not cover (--tp-comm-overlap)"
                : "");
    if (l->cp > 1)
        fprintf(f, "  CP exchanges      %12.3f ms  %s over %d ranks\n", t->cp_comm_s * 1e3,
                cp_comm_type_name((cp_comm_type)l->cp_comm_type), l->cp);
    fprintf(f, "  pipeline p2p      %12.3f ms\n", t->pp_comm_s * 1e3);
    fprintf(f, "  pipeline bubble   %12.3f ms  %.1f%% of busy time (simulated schedule)\n",
            t->bubble_s * 1e3, 100 * t->bubble_fraction);
    fprintf(f, "  DP reduction      %12.3f ms  exposed of %.3f ms%s%s\n", t->dp_comm_s * 1e3,
            t->dp_comm_total_s * 1e3, l->overlap_grad_reduce ? " (overlapped with backward)" : "",
            l->overlap_param_gather && l->distopt ? " (parameter all-gather under the forward)"
                                                  : "");
    if (l->fsdp_strategy >= MTC_FSDP_OPTIM_GRADS && l->dp * l->cp > 1) {
        const mtc_plan_fsdp_comm *c = &mem->fsdp_comm;
        fprintf(f, "    FSDP %s       %.0f units; of the DP reduction (before overlap):\n",
                mtc_fsdp_strategy_name(l->fsdp_strategy), c->units);
        if (l->fsdp_strategy == MTC_FSDP_OPTIM_GRADS_PARAMS) {
            fprintf(f, "    forward gather  %12.3f ms  %.0f all-gathers of units, %.0f B\n",
                    t->fsdp_ag_fwd_s * 1e3, c->ag_fwd_calls, c->ag_fwd_bytes);
            fprintf(f,
                    "    backward gather %12.3f ms  %.0f all-gathers (the head's unit still "
                    "resident, the embedding's not read), %.0f B\n",
                    t->fsdp_ag_bwd_s * 1e3, c->ag_bwd_calls, c->ag_bwd_bytes);
        } else
            fprintf(
                f,
                "    step gather     %12.3f ms  %.0f all-gathers of units after the step, %.0f B\n",
                t->fsdp_ag_step_s * 1e3, c->ag_step_calls, c->ag_step_bytes);
        fprintf(f, "    reduce-scatter  %12.3f ms  %.0f of units (every microbatch), %.0f B%s\n",
                t->fsdp_rs_s * 1e3, c->rs_calls, c->rs_bytes,
                c->ar_calls > 0 ? "; with the instances' all-reduce of each shard" : "");
        if (c->outer_rs_calls > 0) /* not "    reduce-scatter": tests read that line */
            fprintf(f,
                    "    HFSDP outer     %12.3f ms  %.0f reduce-scatters of unit shards over the "
                    "%d instances after the last microbatch, %.0f B; %.0f all-gathers of the "
                    "slices after the step, %.0f B (blocking)\n",
                    t->fsdp_outer_s * 1e3, c->outer_rs_calls, l->distopt_instances,
                    c->outer_rs_bytes, c->outer_ag_calls, c->outer_ag_bytes);
        fprintf(f, "    exposed         %12.3f ms  %s\n", t->fsdp_exposed_s * 1e3,
                !(l->overlap_param_gather || l->overlap_grad_reduce) ? "no overlap"
                : m->is_cpu && t->devices < 1
                    ? "ranks share cores: the overlap hides nothing"
                    : "each pass's collectives under its compute but the first gather and last "
                      "reduce-scatter of each microbatch");
        if (m->is_cpu) /* not "  FSDP ...": tests read that line as the memory's */
            fprintf(f, "  page pool         %12.3f ms  %s\n", t->fsdp_page_s * 1e3,
                    m->kern.page_move > 0
                        ? "units' pages moved to and from the pool at bench-peak's cost per page, "
                          "the gradient pages a backward takes cleared"
                        : "not priced: the machine has no page_move_ns (run mtc bench-peak)");
    }
    if (t->edp_comm_total_s > 0)
        fprintf(f, "    expert-DP       %12.3f ms  of it: the expert buffer over expert-DP %d\n",
                t->edp_comm_total_s * 1e3, l->edp);
    fprintf(f, "  step              %12.3f ms\n", t->step_s * 1e3);
    fprintf(f,
            "throughput: %.4g TFLOP/s per device (Megatron's model FLOPs), %.4g with recompute; "
            "MFU %.1f%%\n",
            t->tflops_per_device, t->hw_tflops_per_device, 100 * t->mfu);
}
