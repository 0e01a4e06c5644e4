/* ckpt/state_mla.h - multi-latent attention's fields in a checkpoint's
 * model configuration: an "mla" object, absent for standard attention
 * (state_mla.c). */
#ifndef MTC_CKPT_STATE_MLA_H
#define MTC_CKPT_STATE_MLA_H

#include <cJSON.h>

#include "model/mla.h"

cJSON *mtc_ckpt_mla_json(const mtc_mla_config *c);
/* j NULL (no "mla" object): standard attention. MTC_ERR_FORMAT when a field
 * is missing or not a number. */
mtc_result_t mtc_ckpt_mla_parse(const cJSON *j, const char *path, mtc_mla_config *c);
/* The saved s against this run's r: every field changes the model's
 * function, so any difference is refused naming the flag. */
mtc_result_t mtc_ckpt_mla_check(const mtc_mla_config *s, const mtc_mla_config *r, const char *path);

#endif
