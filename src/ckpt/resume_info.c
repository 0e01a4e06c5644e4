/* ckpt/resume_info.c - a checkpoint's common state as plain values
 * (ckpt/resume_info.h). */
#include "ckpt/resume_info.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/state.h"
#include "ckpt/tok_files.h"
#include "core/outfile.h"
#include "optim/optim.h"

mtc_result_t mtc_ckpt_resume_info_read(const char *dir, int64_t it, mtc_ckpt_resume_info *out) {
    memset(out, 0, sizeof *out);
    out->sched_style = -1;
    mtc_ckpt_dist *ck = NULL;
    mtc_result_t rc = mtc_ckpt_dist_open(dir, it, &ck);
    if (rc != MTC_OK) return rc;
    const cJSON *common = mtc_ckpt_dist_common(ck);
    snprintf(out->path, sizeof out->path, "%s", mtc_ckpt_dist_path(ck));
    mtc_result_t prc =
        mtc_ckpt_config_parse(cJSON_GetObjectItem(common, "model"), out->path, &out->cfg);
    const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(common, "tokenizer"));
    char iter_dir[MTC_PATH_MAX]; /* its tokenizer's files are copies in there */
    mtc_ckpt_dist_dirname(iter_dir, sizeof iter_dir, dir, it, 0);
    rc = mtc_ckpt_tok_resolve(t ? t : "none", iter_dir, out->tokenizer, sizeof out->tokenizer);
    if (rc != MTC_OK) {
        mtc_ckpt_dist_close(ck);
        return rc;
    }
    const cJSON *sch = cJSON_GetObjectItem(common, "opt_param_scheduler");
    if (cJSON_IsObject(sch)) {
        static const char *keys[4] = {"max_lr", "min_lr", "lr_warmup_steps", "lr_decay_steps"};
        out->have_sched = 1;
        for (int k = 0; k < 4; k++) {
            const cJSON *v = cJSON_GetObjectItem(sch, keys[k]);
            out->sched[k] = cJSON_IsNumber(v) ? v->valuedouble : -1;
        }
        const char *st = cJSON_GetStringValue(cJSON_GetObjectItem(sch, "lr_decay_style"));
        out->sched_style = st ? mtc_lr_style_parse(st) : -1;
    }
    const char *sd =
        cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(common, "rng"), "seed"));
    if (sd) out->have_seed = 1, out->seed = (int64_t)strtoull(sd, NULL, 10);
    mtc_ckpt_dist_close(ck);
    return prc;
}
