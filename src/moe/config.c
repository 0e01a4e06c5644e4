/* moe/config.c - the MoE configuration: which layers are MoE
 * (--moe-layer-freq, int or Megatron's list), and Megatron's validation
 * rules as one-line errors. Does not parse the other flags (cli/ does). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"
#include "moe/moe_cli.h"

int mtc_moe_is_layer(const mtc_moe_config *m, int l) {
    if (!m || m->num_experts <= 0) return 0;
    if (m->pattern_len > 0) return l >= 0 && l < m->pattern_len && m->pattern[l];
    int f = m->layer_freq > 0 ? m->layer_freq : 1;
    return l % f == 0;
}

int mtc_moe_dense_lead(const mtc_moe_config *m, int num_layers) {
    int k = 0;
    while (k < num_layers && !mtc_moe_is_layer(m, k))
        k++;
    for (int l = k; l < num_layers; l++)
        if (!mtc_moe_is_layer(m, l)) return -1;
    return k;
}

int mtc_moe_num_layers(const mtc_moe_config *m, int num_layers) {
    int n = 0;
    for (int l = 0; l < num_layers; l++)
        n += mtc_moe_is_layer(m, l);
    return n;
}

/* A list term: "[a,b,...]" optionally followed by "*n"; terms joined by
 * '+', the whole optionally "( ... )*n". Appends to out (len). */
static int parse_list(const char **p, uint8_t *out, int *len);

static void skip_ws(const char **p) {
    while (isspace((unsigned char)**p))
        (*p)++;
}

static int parse_count(const char **p, long *n) {
    skip_ws(p);
    if (**p != '*') {
        *n = 1;
        return 0;
    }
    (*p)++;
    skip_ws(p);
    char *end;
    *n = strtol(*p, &end, 10);
    if (end == *p || *n < 0 || *n > MOE_PATTERN_MAX) return -1;
    *p = end;
    return 0;
}

static int repeat(uint8_t *out, int *len, int from, long n) {
    int seg = *len - from;
    if (n == 0) {
        *len = from;
        return 0;
    }
    for (long r = 1; r < n; r++) {
        if (*len + seg > MOE_PATTERN_MAX) return -1;
        memcpy(out + *len, out + from, (size_t)seg);
        *len += seg;
    }
    return 0;
}

static int parse_term(const char **p, uint8_t *out, int *len) {
    skip_ws(p);
    int from = *len;
    if (**p == '(') {
        (*p)++;
        if (parse_list(p, out, len)) return -1;
        skip_ws(p);
        if (**p != ')') return -1;
        (*p)++;
    } else if (**p == '[') {
        (*p)++;
        for (;;) {
            skip_ws(p);
            if (**p == ']') break;
            if (**p != '0' && **p != '1') return -1;
            if (*len >= MOE_PATTERN_MAX) return -1;
            out[(*len)++] = (uint8_t)(**p - '0');
            (*p)++;
            skip_ws(p);
            if (**p == ',') (*p)++;
        }
        (*p)++;
    } else {
        return -1;
    }
    long n;
    if (parse_count(p, &n)) return -1;
    return repeat(out, len, from, n);
}

static int parse_list(const char **p, uint8_t *out, int *len) {
    if (parse_term(p, out, len)) return -1;
    for (;;) {
        skip_ws(p);
        if (**p != '+') return 0;
        (*p)++;
        if (parse_term(p, out, len)) return -1;
    }
}

mtc_result_t mtc_moe_parse_layer_freq(mtc_moe_config *m, const char *s) {
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    char *end;
    long f = strtol(s, &end, 10);
    if (end != s && *end == '\0') {
        if (f < 1 || f > (1 << 14))
            return mtc_error(E, "moe-layer-freq=%s must be >= 1 (or a list such as [1,0,1,0])", s);
        m->layer_freq = (int)f, m->pattern_len = 0;
        return MTC_OK;
    }
    const char *p = s;
    int len = 0;
    if (parse_list(&p, m->pattern, &len) || (skip_ws(&p), *p))
        return mtc_error(E,
                         "moe-layer-freq=%s is neither an integer nor a list of 0/1 such as "
                         "[1,0,1,0] or ([1]*3+[0]*1)*2 (at most %d entries)",
                         s, MOE_PATTERN_MAX);
    if (len == 0) return mtc_error(E, "moe-layer-freq=%s is an empty list", s);
    m->pattern_len = len;
    return MTC_OK;
}

mtc_result_t mtc_moe_validate(const mtc_moe_config *m, int num_layers, int ffn, int tp, int sp,
                              int ep, int etp, int add_bias_linear) {
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    int ne = m->num_experts;
    if (ep < 1) return mtc_error(E, "expert-model-parallel-size=%d must be >= 1", ep);
    if (etp < 1) return mtc_error(E, "expert-tensor-parallel-size=%d must be >= 1", etp);
    if (ne < 0 || ne > 4096) return mtc_error(E, "num-experts=%d is outside [1, 4096]", ne);
    if (ne == 0) {
        if (ep > 1)
            return mtc_error(E,
                             "expert-model-parallel-size=%d needs --num-experts (expert "
                             "parallelism splits experts; the model has none)",
                             ep);
        return MTC_OK;
    }
    int k = mtc_moe_topk(m);
    if (k < 1 || k > ne)
        return mtc_error(E, "moe-router-topk=%d must be in [1, num-experts=%d]", k, ne);
    if (ne % ep)
        return mtc_error(E,
                         "num-experts=%d is not divisible by expert-model-parallel-size=%d (each "
                         "EP rank owns num-experts/ep experts)",
                         ne, ep);
    if (m->pattern_len > 0 && m->pattern_len != num_layers)
        return mtc_error(E,
                         "moe-layer-freq has %d entries but num-layers=%d (give one 0/1 per "
                         "layer)",
                         m->pattern_len, num_layers);
    if (mtc_moe_num_layers(m, num_layers) == 0)
        return mtc_error(E, "moe-layer-freq makes no layer an MoE layer (put a 1 in the list)");
    int F = m->ffn_hidden_size > 0 ? m->ffn_hidden_size : ffn;
    if (m->ffn_hidden_size < 0 || F < 1 || F > (1 << 22))
        return mtc_error(E, "moe-ffn-hidden-size=%d is outside [1, %d]", m->ffn_hidden_size,
                         1 << 22);
    if (F % etp)
        return mtc_error(E,
                         "moe-ffn-hidden-size=%d is not divisible by "
                         "expert-tensor-parallel-size=%d",
                         F, etp);
    if (m->shared_ffn < 0 || m->shared_ffn > (1 << 22))
        return mtc_error(E, "moe-shared-expert-intermediate-size=%d is outside [1, %d]",
                         m->shared_ffn, 1 << 22);
    if (m->shared_ffn % tp)
        return mtc_error(E,
                         "moe-shared-expert-intermediate-size=%d is not divisible by "
                         "tensor-model-parallel-size=%d",
                         m->shared_ffn, tp);
    if (tp > 1 && !sp)
        return mtc_error(E,
                         "tensor-model-parallel-size=%d with --num-experts needs "
                         "--sequence-parallel (Megatron's MoE layer refuses TP without SP in "
                         "training)",
                         tp);
    if (add_bias_linear && etp > 1)
        return mtc_error(E,
                         "expert-tensor-parallel-size=%d with expert biases: Megatron's MoE "
                         "biases need etp 1 (add --disable-bias-linear or use --etp 1)",
                         etp);
    if (m->score == MOE_SCORE_SOFTMAX && !m->pre_softmax && k == 1)
        return mtc_error(E, "moe-router-topk=1 with the softmax score function needs "
                            "--moe-router-pre-softmax (softmax over one chosen expert is 1)");
    if (m->expert_bias && m->score != MOE_SCORE_SIGMOID)
        return mtc_error(E, "--moe-router-enable-expert-bias needs "
                            "--moe-router-score-function sigmoid");
    if (!(m->bias_update_rate >= 0 && m->bias_update_rate < 1))
        return mtc_error(E, "moe-router-bias-update-rate=%g must be in [0, 1)",
                         m->bias_update_rate);
    if (m->num_groups || m->group_topk) {
        if (m->num_groups < 1 || ne % m->num_groups)
            return mtc_error(E,
                             "num-experts=%d is not divisible by moe-router-num-groups=%d "
                             "(groups hold equal numbers of experts)",
                             ne, m->num_groups);
        if (m->group_topk < 1 || m->group_topk > m->num_groups)
            return mtc_error(E, "moe-router-group-topk=%d must be in [1, moe-router-num-groups=%d]",
                             m->group_topk, m->num_groups);
        if (k % m->group_topk)
            return mtc_error(E,
                             "moe-router-topk=%d is not divisible by moe-router-group-topk=%d "
                             "(each chosen group contributes topk/group_topk experts)",
                             k, m->group_topk);
        if (k / m->group_topk > ne / m->num_groups)
            return mtc_error(E,
                             "moe-router-topk=%d over moe-router-group-topk=%d groups needs %d "
                             "experts per group, but a group holds %d",
                             k, m->group_topk, k / m->group_topk, ne / m->num_groups);
    }
    if (!(m->topk_scaling >= 0 && m->topk_scaling < 1e6))
        return mtc_error(E, "moe-router-topk-scaling-factor=%g must be > 0", m->topk_scaling);
    if (!(m->aux_coeff >= 0 && m->aux_coeff < 1e6))
        return mtc_error(E, "moe-aux-loss-coeff=%g must be >= 0", m->aux_coeff);
    if (!(m->z_coeff >= 0 && m->z_coeff < 1e6))
        return mtc_error(E, "moe-z-loss-coeff=%g must be >= 0", m->z_coeff);
    if (!(m->capacity_factor >= 0 && m->capacity_factor < 1e6) && m->capacity_factor != -1)
        return mtc_error(E, "moe-expert-capacity-factor=%g must be > 0", m->capacity_factor);
    if (m->pad_to_capacity && !(m->capacity_factor > 0))
        return mtc_error(E, "--moe-pad-expert-input-to-capacity needs "
                            "--moe-expert-capacity-factor");
    return MTC_OK;
}

mtc_result_t moe_cli_resolve(const moe_cli_flags *f, int capacity_seen, mtc_moe_config *out) {
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    if (f->num_experts < 0 || f->num_experts > 4096)
        return mtc_error(E, "num-experts=%d is outside [1, 4096]", f->num_experts);
    out->num_experts = f->num_experts;
    MTC_CHECK(mtc_moe_parse_layer_freq(out, f->layer_freq ? f->layer_freq : "1"));
    if (f->topk < 1 || f->topk > 64)
        return mtc_error(E, "moe-router-topk=%d is outside [1, 64]", f->topk);
    out->topk = f->topk, out->ffn_hidden_size = f->ffn;
    if (!strcmp(f->score, "softmax"))
        out->score = MOE_SCORE_SOFTMAX;
    else if (!strcmp(f->score, "sigmoid"))
        out->score = MOE_SCORE_SIGMOID;
    else
        return mtc_error(E, "moe-router-score-function=%s is unknown (use softmax or sigmoid)",
                         f->score);
    static const char *lbs[] = {"aux_loss", "seq_aux_loss", "global_aux_loss", "none"};
    int lb = -1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(f->lb, lbs[i])) lb = i;
    if (lb < 0)
        return mtc_error(E,
                         "moe-router-load-balancing-type=%s is unknown (use aux_loss, "
                         "seq_aux_loss, global_aux_loss or none; sinkhorn is not implemented)",
                         f->lb);
    out->lb = (moe_lb_type)lb;
    if (!strcmp(f->drop, "probs"))
        out->drop = MOE_DROP_PROBS;
    else if (!strcmp(f->drop, "position"))
        out->drop = MOE_DROP_POSITION;
    else
        return mtc_error(E, "moe-token-drop-policy=%s is unknown (use probs or position)", f->drop);
    if (!strcmp(f->dispatcher, "allgather"))
        out->dispatcher = MOE_DISPATCH_ALLGATHER;
    else if (!strcmp(f->dispatcher, "alltoall"))
        out->dispatcher = MOE_DISPATCH_ALLTOALL;
    else
        return mtc_error(E,
                         "moe-token-dispatcher-type=%s is unknown (use allgather or alltoall; flex "
                         "needs DeepEP GPUs)",
                         f->dispatcher);
    if (capacity_seen && !(f->capacity > 0 && f->capacity < 1e6))
        return mtc_error(E, "moe-expert-capacity-factor=%g must be > 0 (omit it for dropless)",
                         f->capacity);
    if (!(f->scaling >= 0 && f->scaling < 1e6))
        return mtc_error(E, "moe-router-topk-scaling-factor=%g must be > 0", f->scaling);
    if (!(f->aux >= 0 && f->aux < 1e6))
        return mtc_error(E, "moe-aux-loss-coeff=%g must be >= 0", f->aux);
    if (!(f->z >= 0 && f->z < 1e6)) return mtc_error(E, "moe-z-loss-coeff=%g must be >= 0", f->z);
    if (!(f->bias_rate >= 0 && f->bias_rate < 1))
        return mtc_error(E, "moe-router-bias-update-rate=%g must be in [0, 1)", f->bias_rate);
    out->pre_softmax = f->pre_softmax, out->topk_scaling = (float)f->scaling;
    out->num_groups = f->num_groups, out->group_topk = f->group_topk;
    out->expert_bias = f->expert_bias, out->bias_update_rate = (float)f->bias_rate;
    out->aux_coeff = (float)f->aux, out->z_coeff = (float)f->z;
    out->capacity_factor = capacity_seen ? (float)f->capacity : 0.0f;
    out->pad_to_capacity = f->pad, out->shared_ffn = f->shared;
    out->force_balance = f->force_balance;
    return MTC_OK;
}
