/* model/family.h - register a model chunk's parameters from its family's
 * table (model/family.c): Hugging Face names, global shapes, TP split
 * rules, reduction groups, TP duplicates and the tied embedding's copy. */
#ifndef MTC_MODEL_FAMILY_H
#define MTC_MODEL_FAMILY_H

#include "model/model.h"
#include "model/registry.h"

typedef struct {
    int first_layer, last_layer; /* the chunk's layers */
    int has_embedding, has_head; /* first / last virtual pipeline stage */
    int sequence_parallel;       /* norms and row-parallel biases reduce over TP */
    int mtp;       /* MTP depths the chunk holds after its layers (layers num_layers + d; the
                      chunk with the loss, model/mtp.h), 0: none */
    int mtp_split; /* Megatron's standalone MTP stage: 1 on it (the final norm without the
                      head), 2 on the loss's stage after it (the head without the final
                      norm); 0: neither */
} model_register_opts;

/* 1 when the configuration is Llama-style (RMSNorm, SwiGLU or RoPE): its
 * parameters are named as Hugging Face's LlamaForCausalLM. */
int model_family_is_llama(const mtc_model_config *c);
/* Parameters of one layer in this configuration. */
int model_family_params_per_layer(const mtc_model_config *c);
/* Registry capacity for a chunk of nlayers layers and mtp MTP depths. */
int model_family_capacity(const mtc_model_config *c, int nlayers, int mtp);
/* Adds the chunk's parameters to r (initialised with its tp / tp_rank) in
 * Megatron's forward order and lays the registry out. pidx
 * (MTC_NGLOBAL_ROLES) receives each global role's index or -1;
 * layer_first[l] for l in [first_layer, last_layer] the index of layer l's
 * first parameter (layer_first[last_layer] = one past the last layer's). */
mtc_result_t model_family_register(mtc_registry *r, const mtc_model_config *c,
                                   const model_register_opts *o, int *pidx, int *layer_first);

/* Which shards a rank holds: its TP rank of tp, the experts' ETP split
 * (reg.etp), and its EP rank of ep (ep > 1: only its E/ep experts). */
typedef struct {
    int tp, tp_rank, etp, ep, ep_rank;
} model_rank_split;
/* The one registration of a chunk as a rank holds it (the model's buffers
 * and the planner's memory both read it): r initialised for the chunk's
 * layers, the family's parameters, the EP rank's experts (the others with
 * no storage), laid out. pidx and layer_first as model_family_register;
 * free r with mtc_registry_free, also on failure. */
mtc_result_t model_family_register_rank(mtc_registry *r, const mtc_model_config *c,
                                        const model_register_opts *o, const model_rank_split *s,
                                        int *pidx, int *layer_first);

#endif
