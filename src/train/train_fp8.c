/* train/train_fp8.c - the training loop's part of the fp8 recipes
 * (tp/fp8_linear.h): the delayed-scaling update after each step's last
 * backward, the --metrics fields (clipped values per operand, the range of
 * the dequantization scales), the banner line, and the amax histories and
 * scales in the checkpoint's common state (every rank's layers gathered by
 * a MAX all-reduce: ranks holding a layer hold the same state for it).
 * Relies on train_internal.h; names no strategy (the groups are the fp8
 * state's own, from the grid). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cJSON.h"
#include "core/mem.h"
#include "tp/fp8_linear.h"
#include "train/train_internal.h"

void train_fp8_step_begin(train_rank *x) {
    for (int k = 0; x->cfg->fp8 && k < x->vpp; k++)
        if (x->chunks[k].model->fp8) tp_fp8_stats_reset(x->chunks[k].model->fp8);
}

mtc_result_t train_fp8_step_end(train_rank *x) {
    if (!x->cfg->fp8) return MTC_OK;
    double sat[TP_FP8_NOPS] = {0};
    float range[2] = {-INFINITY, 0.0f}; /* -min, max of scale_inv */
    for (int k = 0; k < x->vpp; k++) {
        tp_fp8_state *st = x->chunks[k].model->fp8;
        if (!st) continue;
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
    memset(x->fp8_log, 0, sizeof x->fp8_log);
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
    if (!cJSON_IsNumber(h) || (int)h->valuedouble != f->amax_history_len)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "%s holds fp8 amax histories of length %d; give --fp8-amax-history-len "
                         "%d to resume them",
                         path, cJSON_IsNumber(h) ? (int)h->valuedouble : -1,
                         cJSON_IsNumber(h) ? (int)h->valuedouble : 1);
    if (!cJSON_IsArray(a) || (size_t)cJSON_GetArraySize(a) != n)
        return mtc_error(MTC_ERR_FORMAT,
                         "%s: fp8 state has %d values, not %zu (a corrupted "
                         "checkpoint)",
                         path, cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1, n);
    float *v;
    MTC_CHECK(mtc_mem_calloc(n + 1, sizeof(float), (void **)&v));
    size_t i = 0;
    for (const cJSON *e = a->child; e; e = e->next)
        v[i++] = cJSON_IsNumber(e) ? (float)e->valuedouble : NAN;
    for (int k = 0; k < x->vpp; k++)
        for (int l = 0; l < x->cfg->model.num_layers; l++)
            tp_fp8_layer_set(x->chunks[k].model->fp8, l, v + (size_t)l * per);
    free(v);
    return MTC_OK;
}
