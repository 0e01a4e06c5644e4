/* tests/nn/attention_old.h - the untiled causal attention kernel (saved
 * (B,NH,T,T) probabilities), kept as the oracle the tiled kernel is
 * compared with. Not part of the library. */
#ifndef MTC_TESTS_NN_ATTENTION_OLD_H
#define MTC_TESTS_NN_ATTENTION_OLD_H

#include "nn/nn.h"

/* qkv (B,T,3*NH*HS) [q | k | v]; out (B,T,NH*HS); att (B,NH,T,T) saved
 * probabilities P before dropout. Scale 1/sqrt(HS); causal over local
 * positions. drop may be NULL (zero Tg / NHg mean the local T / NH). */
void old_attention_forward(nn_pool *pool, float *out, float *att, const float *qkv, int B, int T,
                           int NH, int HS, const nn_dropout_spec *drop);
/* dqkv (B,T,3*NH*HS) =; scratch (B,NH,T,T). */
void old_attention_backward(nn_pool *pool, float *dqkv, float *scratch, const float *dout,
                            const float *qkv, const float *att, int B, int T, int NH, int HS,
                            const nn_dropout_spec *drop);

#endif
