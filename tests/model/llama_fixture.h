/* tests/model/llama_fixture.h - the Llama-shaped model of a PyTorch fixture
 * (tests/reference/llama_reference.py and mtp_reference.py write its
 * "config" as L C NH NG HS F V B T ..., with norm_eps and rope_base): RMSNorm,
 * RoPE, SwiGLU, untied, no linear biases. */
#ifndef MTC_TESTS_LLAMA_FIXTURE_H
#define MTC_TESTS_LLAMA_FIXTURE_H

#include "fixture.h"
#include "model/model.h"

static mtc_model_config fixture_llama_config(const fixture *fx) {
    const float *cf = fixture_get(fx, "config")->data;
    mtc_model_config cfg = {.num_layers = (int)cf[0],
                            .hidden_size = (int)cf[1],
                            .num_heads = (int)cf[2],
                            .num_query_groups = (int)cf[3],
                            .kv_channels = (int)cf[4],
                            .ffn_hidden_size = (int)cf[5],
                            .vocab_size = (int)cf[6],
                            .padded_vocab_size = (int)cf[6],
                            .seq_length = (int)cf[8],
                            .max_position_embeddings = (int)cf[8],
                            .init_std = 0.02f,
                            .normalization = MTC_NORM_RMSNORM,
                            .norm_epsilon = fixture_get(fx, "norm_eps")->data[0],
                            .position_embedding = MTC_POS_ROPE,
                            .rotary_base = fixture_get(fx, "rope_base")->data[0],
                            .swiglu = 1,
                            .untie_embeddings = 1,
                            .disable_bias_linear = 1};
    return cfg;
}

#endif
