/* train/train_fp8.c - the training loop's part of the fp8 recipes
 * (tp/fp8_linear.h): the delayed-scaling update after each step's last
 * backward, the --metrics fields (clipped values per operand, the range of
 * the dequantization scales), the banner line, and the amax histories and
 * scales in the checkpoint's common state (every rank's layers gathered by
 * a MAX all-reduce: ranks holding a layer hold the same state for it).
 * Relies on train_internal.h; names no strategy (the groups are the fp8
 * state's own, from the grid). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cJSON.h"
#include "core/mem.h"
#include "dp/distopt_fp8.h"
#include "model/model.h"
#include "tp/fp8_linear.h"
#include "train/train_internal.h"

void train_fp8_step_begin(train_rank *x) {
    for (int k = 0; x->cfg->fp8 && k < x->vpp; k++)
        if (x->chunks[k].model->fp8) tp_fp8_stats_reset(x->chunks[k].model->fp8);
}

/* Chunk k's fp8 parameter gather, or NULL. */
static mtc_distopt_fp8 *fp8_pg(const train_rank *x, int k) {
    const mtc_distopt *o = x->chunks[k].buf[TRAIN_GBUF_DENSE].dopt;
    return o ? o->fp8 : NULL;
}

mtc_result_t train_fp8_step_end(train_rank *x) {
    if (!x->cfg->fp8) return MTC_OK;
    double sat[TP_FP8_NOPS] = {0};
    float range[2] = {-INFINITY, 0.0f}; /* -min, max of scale_inv */
    for (int k = 0; k < x->vpp; k++) {
        tp_fp8_state *st = x->chunks[k].model->fp8;
        if (!st) continue;
        mtc_distopt_fp8 *pg = fp8_pg(x, k);
        if (pg) { /* the cast the step's weights came from: its clipped values and scales */
            st->stats.sat[TP_FP8_W] += pg->clipped;
            if (pg->sinv_max > 0) {
                st->stats.sinv_min = fminf(st->stats.sinv_min, pg->sinv_min);
                st->stats.sinv_max = fmaxf(st->stats.sinv_max, pg->sinv_max);
            }
            x->fp8_pg_log[0] += (double)pg->casts * (double)(pg->gather_bytes + pg->amax_bytes);
            x->fp8_pg_log[1] += (double)pg->casts * (double)pg->bf16_bytes;
            pg->clipped = 0, pg->casts = 0;
            pg->sinv_min = INFINITY, pg->sinv_max = 0.0f;
        }
        /* comm: all-reduce MAX(TP x DP x CP) of the step's amaxes (delayed) */
        MTC_CHECK(tp_fp8_step_end(st));
        for (int o = 0; o < TP_FP8_NOPS; o++)
            sat[o] += st->stats.sat[o];
        if (st->stats.sinv_max > 0) {
            range[0] = fmaxf(range[0], -st->stats.sinv_min);
            range[1] = fmaxf(range[1], st->stats.sinv_max);
        }
    }
    /* comm: all-reduce SUM and MAX(world): each value was counted by one rank */
    MTC_CHECK(mtc_all_reduce(sat, sat, TP_FP8_NOPS, MTC_DTYPE_F64, MTC_OP_SUM, x->world));
    MTC_CHECK(mtc_all_reduce(range, range, 2, MTC_DTYPE_F32, MTC_OP_MAX, x->world));
    for (int o = 0; o < TP_FP8_NOPS; o++)
        x->fp8_log[o] += sat[o];
    if (range[1] > 0) {
        if (x->fp8_log[4] == 0 || -range[0] < x->fp8_log[3]) x->fp8_log[3] = -range[0];
        if (range[1] > x->fp8_log[4]) x->fp8_log[4] = range[1];
    }
    return MTC_OK;
}

void train_fp8_metrics(train_rank *x, FILE *metrics) {
    if (!x->cfg->fp8) return;
    if (metrics)
        fprintf(metrics,
                ", \"fp8_recipe\": \"%s\", \"fp8_clipped_input\": %.0f, \"fp8_clipped_weight\": "
                "%.0f, \"fp8_clipped_grad\": %.0f, \"fp8_scale_inv_min\": %.9g, "
                "\"fp8_scale_inv_max\": %.9g",
                tp_fp8_recipe_name(x->cfg->fp8->recipe), x->fp8_log[0], x->fp8_log[1],
                x->fp8_log[2], x->fp8_log[3], x->fp8_log[4]);
    if (metrics && x->fp8_pg_log[1] > 0) /* this rank's, since the last log */
        fprintf(metrics,
                ", \"fp8_param_gather_bytes\": %.0f, \"fp8_param_gather_bf16_bytes\": %.0f",
                x->fp8_pg_log[0], x->fp8_pg_log[1]);
    memset(x->fp8_log, 0, sizeof x->fp8_log);
    memset(x->fp8_pg_log, 0, sizeof x->fp8_pg_log);
}

void train_fp8_banner(const train_rank *x, FILE *out) {
    const tp_fp8_config *f = x->cfg->fp8;
    if (!f) return;
    int L = x->cfg->model.num_layers, n = 0;
    for (int l = 0; l < L; l++)
        n += tp_fp8_layer_is_fp8(f, L, l);
    fprintf(out,
            "> fp8 (emulated: this CPU has no fp8 arithmetic): recipe %s, format %s (%s "
            "gradients); the qkv, proj, fc1 and fc2 GEMMs of %d of %d layers run on E4M3/E5M2 "
            "values quantized as Transformer Engine does, multiplied in fp32%s; embedding, head, "
            "norms, attention%s stay bf16\n",
            tp_fp8_recipe_name(f->recipe), f->hybrid ? "hybrid" : "e4m3",
            f->hybrid ? "E5M2" : "E4M3", n, L, f->wgrad ? "" : " (weight gradients in bf16)",
            x->cfg->model.moe.num_experts > 0 ? ", experts" : "");
    if (f->recipe == TP_FP8_DELAYED)
        fprintf(out,
                "> fp8 delayed scaling: amax history %d, %s, margin %d, amaxes reduced over "
                "%s after each step\n",
                f->amax_history_len, f->amax_max ? "max" : "most_recent", f->margin,
                f->tp_only_amax_red ? "TP" : "TP x DP x CP");
    double vals = 0, gb = 0, ab = 0, bb = 0; /* every chunk of this rank */
    for (int k = 0; k < x->vpp; k++) {
        const mtc_distopt_fp8 *pg = fp8_pg(x, k);
        if (!pg) continue;
        vals += (double)pg->fp8_values, gb += (double)pg->gather_bytes;
        ab += (double)pg->amax_bytes, bb += (double)pg->bf16_bytes;
    }
    if (bb > 0) {
        double mb = 1.0 / (1 << 20);
        fprintf(out,
                "> fp8 parameter all-gather: the owners cast %.0f weight values to E4M3 codes (1 "
                "byte each; the other params as bf16, 2 bytes), dequantized after the gather: "
                "%.3f MiB per step on this rank (+ %.1f KiB of amax all-reduce) instead of %.3f "
                "MiB as bf16 (%.2fx)\n",
                vals, gb * mb, ab / 1024.0, bb * mb, (gb + ab) / bb);
    } else if (f->param_gather && x->fp8_pg_off)
        fprintf(out, "> fp8 parameter all-gather: not applied (%s): the gather stays bf16\n",
                x->fp8_pg_off);
}

/* The fp8 weight of registry param p of a chunk (its linear's index), or -1. */
static int fp8_linear_of(int role) {
    switch (role) {
    case MTC_ROLE_QKV_W: return TP_FP8_QKV;
    case MTC_ROLE_PROJ_W: return TP_FP8_PROJ;
    case MTC_ROLE_FC1_W: return TP_FP8_FC1;
    case MTC_ROLE_FC2_W: return TP_FP8_FC2;
    default: return -1;
    }
}

mtc_result_t train_fp8_param_gather_init(train_rank *x) {
    const tp_fp8_config *f = x->cfg->fp8;
    if (!f || !f->param_gather) return MTC_OK;
    if (f->recipe == TP_FP8_MXFP8) {
        /* TE's MXFP8 parameters carry a rowwise and a columnwise copy (2 bytes a value);
         * Megatron gathers them in bf16 (--reuse-grad-buf-for-mxfp8-param-ag) */
        x->fp8_pg_off = "mxfp8 weights need a rowwise and a columnwise copy, 2 bytes per value; "
                        "Megatron gathers bf16 for mxfp8";
        return MTC_OK;
    }
    mtc_distopt_fp8_mode mode = f->recipe == TP_FP8_DELAYED      ? MTC_DISTOPT_FP8_DELAYED
                                : f->recipe == TP_FP8_TENSORWISE ? MTC_DISTOPT_FP8_TENSORWISE
                                                                 : MTC_DISTOPT_FP8_BLOCKWISE;
    for (int k = 0; k < x->vpp; k++) {
        mtc_model *m = x->chunks[k].model;
        mtc_distopt *o = x->chunks[k].buf[TRAIN_GBUF_DENSE].dopt;
        if (!o || !o->copy || !m->fp8) {
            x->fp8_pg_off = x->cfg->model.moe.num_experts > 0
                                ? "an MoE model keeps fp32 main params whole"
                                : "no bf16 compute copy gathered (Megatron-FSDP)";
            continue;
        }
        const mtc_registry *r = &m->reg;
        mtc_distopt_fp8_weight *w = NULL;
        MTC_CHECK(mtc_mem_calloc((size_t)r->count + 1, sizeof *w, (void **)&w));
        int nw = 0;
        for (int i = 0; i < r->count; i++) {
            const mtc_param *p = &r->params[i];
            int lin = fp8_linear_of(p->role);
            tp_fp8_gemm *g = lin < 0 ? NULL : tp_fp8_layer(m->fp8, p->layer);
            if (!g || p->ndim != 2 || !p->local_numel) continue;
            int rows =
                p->split_dim == 1 ? (int)p->shape[0] : (int)(p->local_numel / (size_t)p->shape[1]);
            w[nw++] = (mtc_distopt_fp8_weight){.param = i,
                                               .rows = rows,
                                               .cols = (int)(p->local_numel / (size_t)rows),
                                               .scale = &g[lin].t[TP_FP8_W].scale,
                                               .amax_slot = &g[lin].t[TP_FP8_W].hist[0]};
        }
        mtc_distopt_fp8 *pg;
        mtc_result_t rc = mtc_distopt_fp8_init(o, mode, w, nw, m->fp8->weight_comm, &pg);
        free(w);
        MTC_CHECK(rc);
        m->fp8->w_cast = 1;
        /* the first step's weights: cast from the initial (or loaded) params */
        MTC_CHECK(mtc_distopt_fp8_gather(pg));
    }
    return MTC_OK;
}

/* The delayed state of every layer, (L, per-layer floats), on every rank. */
static mtc_result_t fp8_gather(train_rank *x, float **out, size_t *per) {
    const tp_fp8_config *f = x->cfg->fp8;
    int L = x->cfg->model.num_layers;
    *per = tp_fp8_layer_floats(f);
    MTC_CHECK(mtc_mem_calloc((size_t)L * *per + 1, sizeof(float), (void **)out));
    for (int k = 0; k < x->vpp; k++)
        for (int l = 0; l < L; l++)
            tp_fp8_layer_get(x->chunks[k].model->fp8, l, *out + (size_t)l * *per);
    /* comm: all-reduce MAX(world): scales > 0 and amaxes >= 0 of the ranks holding each layer */
    mtc_result_t rc =
        mtc_all_reduce(*out, *out, (size_t)L * *per, MTC_DTYPE_F32, MTC_OP_MAX, x->world);
    if (rc != MTC_OK) free(*out);
    return rc;
}

mtc_result_t train_fp8_ckpt_save(train_rank *x, cJSON *common) {
    const tp_fp8_config *f = x->cfg->fp8;
    if (!f || f->recipe != TP_FP8_DELAYED) return MTC_OK;
    float *v;
    size_t per;
    MTC_CHECK(fp8_gather(x, &v, &per));
    if (common) {
        cJSON *j = cJSON_AddObjectToObject(common, "fp8");
        cJSON_AddStringToObject(j, "recipe", tp_fp8_recipe_name(f->recipe));
        cJSON_AddNumberToObject(j, "amax_history_len", f->amax_history_len);
        cJSON *a =
            cJSON_AddArrayToObject(j, "state"); /* per layer, linear, operand: [scale, hist] */
        size_t n = (size_t)x->cfg->model.num_layers * per;
        for (size_t i = 0; a && i < n; i++)
            cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i])); /* exact: float in double */
    }
    free(v);
    return MTC_OK;
}

mtc_result_t train_fp8_ckpt_load(train_rank *x, const cJSON *common, const char *path) {
    const tp_fp8_config *f = x->cfg->fp8;
    const cJSON *j = cJSON_GetObjectItem(common, "fp8");
    if (!f || f->recipe != TP_FP8_DELAYED || !cJSON_IsObject(j)) return MTC_OK; /* fresh scales */
    const cJSON *h = cJSON_GetObjectItem(j, "amax_history_len"),
                *a = cJSON_GetObjectItem(j, "state");
    size_t per = tp_fp8_layer_floats(f), n = (size_t)x->cfg->model.num_layers * per;
    if (!cJSON_IsNumber(h) || !(h->valuedouble >= 1 && h->valuedouble <= (1 << 20)) ||
        h->valuedouble != floor(h->valuedouble))
        return mtc_error(MTC_ERR_FORMAT,
                         "%s: fp8 amax_history_len is not a whole number in [1, 1048576] (a "
                         "corrupted checkpoint: load an earlier iteration with --ckpt-step)",
                         path);
    if (h->valuedouble != (double)f->amax_history_len)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "%s holds fp8 amax histories of length %d; give --fp8-amax-history-len "
                         "%d to resume them",
                         path, (int)h->valuedouble, (int)h->valuedouble);
    if (!cJSON_IsArray(a) || (size_t)cJSON_GetArraySize(a) != n)
        return mtc_error(MTC_ERR_FORMAT,
                         "%s: fp8 state has %d values, not %zu (a corrupted "
                         "checkpoint)",
                         path, cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1, n);
    float *v;
    MTC_CHECK(mtc_mem_calloc(n + 1, sizeof(float), (void **)&v));
    size_t i = 0, H = (size_t)f->amax_history_len;
    for (const cJSON *e = a->child; e; e = e->next, i++) {
        /* [scale, hist...] per tensor: a scale finite and > 0, amaxes finite and >= 0 (a
         * NaN or string here would have quantized every value with it) */
        int is_scale = i % (1 + H) == 0;
        double d = cJSON_IsNumber(e) ? e->valuedouble : NAN;
        if (!(isfinite(d) && fabs(d) <= FLT_MAX && (is_scale ? d > 0 : d >= 0))) {
            free(v);
            return mtc_error(MTC_ERR_FORMAT,
                             "%s: fp8 state value %zu is not a%s (a corrupted checkpoint: load "
                             "an earlier iteration with --ckpt-step)",
                             path, i,
                             is_scale ? " finite scale > 0" : "n amax: a finite number >= 0");
        }
        v[i] = (float)d;
    }
    for (int k = 0; k < x->vpp; k++)
        for (int l = 0; l < x->cfg->model.num_layers; l++)
            tp_fp8_layer_set(x->chunks[k].model->fp8, l, v + (size_t)l * per);
    free(v);
    return MTC_OK;
}
