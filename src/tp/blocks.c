/* tp/blocks.c - the fused-QKV shard index mapping of GPT-2's c_attn (see
 * layers.h). The attention and MLP blocks themselves are composed in
 * model/block.c from the parallel linears. */
#include <string.h>

#include "tp/layers.h"
#include "tp/mappings.h"

void tp_qkv_shard(float *dst, const float *src, int C, int cols, int tp, int r) {
    int rows = 3 * (C / tp);
    for (int i = 0; i < rows; i++)
        memcpy(dst + (size_t)i * cols, src + (size_t)tp_qkv_row(i, C, tp, r) * cols,
               (size_t)cols * sizeof(float));
}

void tp_qkv_unshard(float *dst, const float *src, int C, int cols, int tp, int r) {
    int rows = 3 * (C / tp);
    for (int i = 0; i < rows; i++)
        memcpy(dst + (size_t)tp_qkv_row(i, C, tp, r) * cols, src + (size_t)i * cols,
               (size_t)cols * sizeof(float));
}
