/* ckpt/gguf_internal.h - what ckpt/gguf.c (the writer, the dense and MoE
 * architectures) shares with ckpt/gguf_mla.c (llama.cpp's deepseek2): the
 * tensor table entry and the little-endian key/value writers. */
#ifndef MTC_CKPT_GGUF_INTERNAL_H
#define MTC_CKPT_GGUF_INTERNAL_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/result.h"
#include "model/model.h"

enum { G_U32 = 4, G_I32 = 5, G_F32 = 6, G_BOOL = 7, G_STR = 8, G_ARR = 9 };
#define ALIGN 32

typedef struct {
    char name[64];
    int param;
    int64_t r0, nrows;
    int heads; /* > 0: permute rows per head of nrows/heads (RoPE pairs) */
    int nexp;  /* > 0: the experts' tensors stacked, (nexp, nrows, cols); param is
                  expert 0's, expert e's is efmt with (layer, e) */
    int layer;
    char efmt[96];
    /* deepseek2's split kv_b and the qwen2moe shared-expert gate: */
    int kind;    /* GG_PLAIN, GG_KB, GG_VB (of param kv_b: heads x [dn | dv] rows), GG_FILL */
    int dn, dv;  /* GG_KB / GG_VB: per head rows [0, dn) are k_nope's, [dn, dn + dv) v's */
    int nh;      /* GG_KB / GG_VB: heads */
    float value; /* GG_FILL: every element (1-D, nrows elements, param -1) */
    float scale; /* 0: 1; else the rows times scale (exact: a power of 2) */
} gg_tensor;

enum { GG_PLAIN = 0, GG_KB, GG_VB, GG_FILL };

typedef struct {
    FILE *f;
    int ok;
} gg_out;

static inline void put(gg_out *o, const void *p, size_t n) {
    if (o->ok && fwrite(p, 1, n, o->f) != n) o->ok = 0;
}
static inline void put_u32(gg_out *o, uint32_t v) { put(o, &v, 4); }
static inline void put_u64(gg_out *o, uint64_t v) { put(o, &v, 8); }
static inline void put_str(gg_out *o, const char *s) {
    put_u64(o, strlen(s));
    put(o, s, strlen(s));
}
static inline void kv_u32(gg_out *o, const char *k, uint32_t v) {
    put_str(o, k), put_u32(o, G_U32), put_u32(o, v);
}
static inline void kv_f32(gg_out *o, const char *k, float v) {
    put_str(o, k), put_u32(o, G_F32), put(o, &v, 4);
}
static inline void kv_str(gg_out *o, const char *k, const char *v) {
    put_str(o, k), put_u32(o, G_STR), put_str(o, v);
}
static inline void kv_bool(gg_out *o, const char *k, int v) {
    unsigned char b = (unsigned char)(v != 0);
    put_str(o, k), put_u32(o, G_BOOL), put(o, &b, 1);
}

/* ---- gguf_mla.c: llama.cpp's deepseek2 (multi-latent attention) ---- */
/* UNSUPPORTED naming the setting deepseek2 cannot express. */
mtc_result_t gguf_mla_check(const mtc_model_config *c);
/* The tensors of MLA model m from t[*k] on (the MTP depths left out). */
mtc_result_t gguf_mla_table(const mtc_model *m, gg_tensor *t, int *k);
/* Number of deepseek2.* keys gguf_mla_kv writes, and the writer. */
int gguf_mla_nkv(const mtc_model_config *c);
void gguf_mla_kv(gg_out *out, const mtc_model_config *c);

#endif
