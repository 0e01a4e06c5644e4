/* model/model_internal.h - what model.c (registry, buffers, gathering) and
 * model_pass.c (forward / backward) share: the activation slot of one
 * in-flight microbatch. Not a public header. */
#ifndef MTC_MODEL_MODEL_INTERNAL_H
#define MTC_MODEL_MODEL_INTERNAL_H

#include "model/model.h"

/* Shapes are this TP rank's: T_loc = T/tp under sequence parallelism, C_tp,
 * NH_tp, F_tp = C/tp, NH/tp, F/tp. Per-layer arrays are strided by the
 * largest microbatch (m->B, m->T). */
struct mtc_model_slot {
    float *encoded;             /* (B,T_loc,C) chunk input (embedding output) */
    float *ln1_mean, *ln1_rstd; /* per layer (B,T_loc), (B,T_loc); the norms' outputs are
                                   rebuilt in backward (m->ln_tmp), not kept */
    float *qkv;                 /* per layer (B,T,QD_tp+2KD_tp) */
    float *lse;                 /* per layer (B,NH_tp,T) attention log-sum-exp */
    float *atty;                /* per layer (B,T,QD_tp) */
    float *qk_in, *qk_stat;     /* --qk-layernorm, per layer: (B,T,QD_tp+KD_tp) q | k before
                                   the norms, 2 x (B,T,NH_tp+NG_tp) their mean | rstd */
    float *mla;                 /* --multi-latent-attention, per layer model_mla_acts_floats */
    float *res2;                /* per layer (B,T_loc,C) */
    float *ln2_mean, *ln2_rstd;
    float *fch;                       /* per layer (B,T,F1_tp) */
    float *res3;                      /* per layer (B,T_loc,C) layer output */
    float *moe;                       /* per layer moe_acts_floats: an MoE layer's router,
                                         permutation and expert activations */
    float *sfch;                      /* per layer the shared expert's (B,T,SF1_tp) */
    float *lnf, *lnf_mean, *lnf_rstd; /* (B,T_loc,C), (B,T_loc), (B,T_loc) */
    float *losses;                    /* (B,T) */
    float *dlnf;                      /* (B,T_loc,C) d(loss)/d(lnf) from the training forward's
                                         fused head, until this microbatch's backward */
    float *logits;                    /* (B,T,Vp_tp) with opts.logits only: a forward without
                                         targets' logits (generation); else NULL */
    float *mtp;                       /* the MTP depths' activations (model/mtp.c) */
    int mtp_ready;                    /* they hold this microbatch's heads' gradients */
    int dlnf_ready;                   /* dlnf holds this microbatch's head gradient */
    int zeroed;                       /* the forward zeroed the gradients (first microbatch) */
};

/* For model/mtp.c (model_pass.c): layer l (chunk slot index k) forward
 * from x into the slot's arrays, and backward from d(output) in m->dres to
 * d(x) in m->dres; ready 0 leaves the grads_ready call to the caller. The
 * configured norm and the dropout spec as the layers use them. */
mtc_result_t model_layer_forward(mtc_model *m, const mtc_model_pass *pass, mtc_model_slot *a, int k,
                                 int l, const float *x, int B, int T);
mtc_result_t model_layer_backward(mtc_model *m, const mtc_model_pass *pass, mtc_model_slot *a,
                                  int k, int l, const float *x, int B, int T, float loss_scale,
                                  int ready);
const float *model_layer_output(const mtc_model *m, const mtc_model_slot *a, int k);
void model_norm_forward(const mtc_model *m, float *out, float *mean, float *rstd, const float *in,
                        const float *w, const float *b, int N);
void model_norm_backward(const mtc_model *m, float *din, float *dw, float *db, const float *dout,
                         const float *in, const float *w, const float *mean, const float *rstd,
                         int N);
nn_dropout_spec model_dropout(const mtc_model *m, const mtc_model_pass *pass, int layer, int site,
                              float p, int T);
#define MODEL_SITE_EMBED 0
/* pass->params_needed for params [first, last), then their --bf16 copies. */
mtc_result_t model_params_needed(mtc_model *m, const mtc_model_pass *pass, int first, int last);

/* The MoE layers' shapes (model.c), and the shared expert's block dims. */
moe_dims mtc_model_moe_dims(const mtc_model *m);
model_block_dims mtc_model_shared_dims(const mtc_model *m);
size_t mtc_model_moe_floats(const mtc_model *m);
/* --bf16 / --fp16: make params [first, last)'s rounded copies current
 * (model.c); a no-op in fp32. */
void model_lowp_refresh(mtc_model *m, int first, int last);
/* Round an activation to the model's precision in place (no-op in fp32). */
void model_lowp_round(const mtc_model *m, float *x, size_t n);
/* MLA's options for the model's layers (model.c). */
model_mla_opts mtc_model_mla_opts(const mtc_model *m);
/* MLA's views of layer l's weights (w[]: params or gradients). */
model_mla_params mtc_model_mla_params(float *const *w);
/* MLA's scratch over the chunk's layers, and one layer's activations (0
 * without MLA); its rotary table and recompute flag; its bf16 GEMMs. */
size_t mtc_model_mla_scratch(const mtc_model *m);
size_t mtc_model_mla_floats(const mtc_model *m);
mtc_result_t mtc_model_mla_init(mtc_model *m, const mtc_model_chunk_opts *o);
mtc_result_t mtc_model_mla_bf16_prepare(const mtc_model *m);

#endif
