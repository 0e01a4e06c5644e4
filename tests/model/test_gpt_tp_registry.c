/* tests/model/test_gpt_tp_registry.c - the registry's TP split of the GPT:
 * for tp in {2, 4} and every parameter, the local -> global index maps of
 * the tp ranks (built by mtc_model_init_tp on shm rank-threads, SP on)
 * together hit every split parameter's global element exactly once; the fused
 * c_attn rows follow tp/layers.h's tp_qkv_row; split parameters hold 1/tp
 * of the elements and replicated ones are flagged tp_duplicate (and, under
 * sequence parallelism, MTC_REDUCE_TP except wpe); a shard's initial
 * values are the serial model's values at the mapped global indices; a
 * pipeline chunk's global offsets are the whole model's. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "model/model.h"
#include "test.h"
#include "tp/layers.h"

static mtc_model_config GPT2 = {.num_layers = 2,
                                .hidden_size = 16,
                                .num_heads = 4,
                                .ffn_hidden_size = 64,
                                .seq_length = 8,
                                .max_position_embeddings = 8,
                                .vocab_size = 30,
                                .padded_vocab_size = 32,
                                .init_std = 0.02f};
/* Llama-style: GQA (8 heads, 4 groups, head size 8 != C/NH), SwiGLU,
 * RMSNorm, RoPE, untied head, no biases */
static mtc_model_config LLAMA = {.num_layers = 2,
                                 .hidden_size = 16,
                                 .num_heads = 8,
                                 .num_query_groups = 4,
                                 .kv_channels = 8,
                                 .ffn_hidden_size = 24,
                                 .seq_length = 8,
                                 .max_position_embeddings = 8,
                                 .vocab_size = 30,
                                 .padded_vocab_size = 32,
                                 .init_std = 0.02f,
                                 .normalization = MTC_NORM_RMSNORM,
                                 .position_embedding = MTC_POS_ROPE,
                                 .swiglu = 1,
                                 .untie_embeddings = 1,
                                 .disable_bias_linear = 1};
static mtc_model_config CFG;

/* Which parameters are split over TP, by name (an oracle written out here,
 * not the family table). */
static int expect_split(const char *n) {
    static const char *split[] = {"wte.weight",   "c_attn.",       "c_fc.",  "c_proj.weight",
                                  "embed_tokens", "qkv_proj",      "o_proj", "gate_up_proj",
                                  "down_proj",    "lm_head.weight"};
    for (size_t k = 0; k < sizeof split / sizeof split[0]; k++)
        if (strstr(n, split[k])) return 1;
    return 0;
}

/* Global row of local row i of rank r for a fused parameter whose global
 * blocks have rows[b] rows each (block b's local part is rows[b]/tp). */
static size_t fused_row(const int64_t *rows, int nb, int tp, int r, size_t i) {
    size_t start = 0;
    for (int b = 0; b < nb; b++) {
        size_t bl = (size_t)rows[b] / (size_t)tp;
        if (i < bl) return start + (size_t)r * bl + i;
        i -= bl, start += (size_t)rows[b];
    }
    return (size_t)-1;
}

/* What rank r of a tp run reports: per parameter, the global index and
 * initial value of each local element, and its registry flags. */
typedef struct {
    size_t *gidx[64];
    float *val[64];
    size_t local[64];
    int split[64], dup[64], tpred[64];
} rank_view;
static rank_view g_view[4];

static mtc_result_t rank_fn(mtc_comm_t world, void *arg) {
    (void)arg;
    int r = mtc_comm_rank(world);
    mtc_model *m;
    mtc_grid_t grid; /* every rank of the world in one TP group */
    mtc_grid_config gc;
    mtc_grid_config_default(&gc);
    gc.world_size = mtc_comm_size(world), gc.tp = gc.world_size;
    MTC_CHECK(mtc_grid_init(&grid, world, &gc));
    mtc_result_t rc = mtc_model_init_tp(&CFG, 1, 1, NULL, grid, 1, &m);
    if (rc != MTC_OK) mtc_grid_free(grid);
    MTC_CHECK(rc);
    mtc_model_init_params(m, 77);
    rank_view *v = &g_view[r];
    for (int i = 0; i < m->reg.count; i++) {
        const mtc_param *p = &m->reg.params[i];
        v->local[i] = p->local_numel;
        v->split[i] = p->split_dim >= 0;
        v->dup[i] = p->tp_duplicate;
        v->tpred[i] = (p->reduce_groups & MTC_REDUCE_TP) != 0;
        v->gidx[i] = malloc(p->local_numel * sizeof(size_t));
        v->val[i] = malloc(p->local_numel * sizeof(float));
        for (size_t l = 0; l < p->local_numel; l++) {
            v->gidx[i][l] = mtc_registry_global_index(&m->reg, p, r, l);
            v->val[i][l] = m->params[p->offset + l];
        }
    }
    mtc_model_free(m);
    mtc_grid_free(grid);
    return MTC_OK;
}

static int check_config(const mtc_model_config *config) {
    CFG = *config;
    mtc_model_config cfg = CFG;
    mtc_model *serial;
    T_CHECK(mtc_model_init(&cfg, 1, 1, NULL, &serial) == MTC_OK);
    mtc_model_init_params(serial, 77);
    int C = cfg.hidden_size;
    for (int tp = 2; tp <= 4; tp *= 2) {
        mtc_launch_opts lo = {.backend = MTC_BACKEND_SHM, .world_size = tp};
        T_CHECK(mtc_launch(&lo, rank_fn, NULL) == MTC_OK);
        for (int i = 0; i < serial->reg.count; i++) {
            const mtc_param *g = &serial->reg.params[i];
            int split = g_view[0].split[i];
            T_CHECKF(split == expect_split(g->name) && g_view[0].dup[i] == !split,
                     "tp=%d %s: split %d duplicate %d", tp, g->name, split, g_view[0].dup[i]);
            T_CHECKF(g_view[0].tpred[i] == (!split && !strstr(g->name, "wpe.weight")),
                     "tp=%d %s: SP reduce over TP flag", tp, g->name);
            unsigned char *hit = calloc(g->numel, 1);
            int init_ok = 1, qkv_ok = 1;
            for (int r = 0; r < tp; r++) {
                rank_view *v = &g_view[r];
                T_CHECK(v->local[i] * (size_t)(split ? tp : 1) == g->numel);
                for (size_t l = 0; l < v->local[i]; l++) {
                    size_t gi = v->gidx[i][l];
                    T_CHECK(gi < g->numel);
                    if (gi >= g->numel) break;
                    hit[gi]++;
                    init_ok &= v->val[i][l] == serial->params[g->offset + gi];
                    size_t cols = (size_t)g->shape[1];
                    if (strstr(g->name, "c_attn."))
                        qkv_ok &= gi / cols == (size_t)tp_qkv_row((int)(l / cols), C, tp, r);
                    int64_t HS = mtc_model_head_size(&cfg), F = cfg.ffn_hidden_size;
                    int64_t qkv[3] = {cfg.num_heads * HS, mtc_model_groups(&cfg) * HS,
                                      mtc_model_groups(&cfg) * HS};
                    int64_t fc1[2] = {F, F};
                    if (strstr(g->name, "qkv_proj"))
                        qkv_ok &= gi / cols == fused_row(qkv, 3, tp, r, l / cols);
                    if (strstr(g->name, "gate_up_proj"))
                        qkv_ok &= gi / cols == fused_row(fc1, 2, tp, r, l / cols);
                }
                free(v->gidx[i]);
                free(v->val[i]);
            }
            int once = 1;
            for (size_t k = 0; k < g->numel; k++)
                once &= hit[k] == (split ? 1 : tp);
            T_CHECKF(once, "tp=%d %s: every global element held once (split) or by every rank", tp,
                     g->name);
            T_CHECKF(init_ok, "tp=%d %s: shard init = serial values", tp, g->name);
            T_CHECKF(qkv_ok, "tp=%d %s: fused rows follow tp_qkv_row", tp, g->name);
            free(hit);
        }
    }
    /* a pipeline chunk: the last stage (layer 1, the final norm, and its own
     * wte copy when tied, the output layer when untied) */
    mtc_model *last;
    int gpt2 = !cfg.untie_embeddings;
    mtc_model_chunk_opts o = {
        .B = 1, .nslots = 2, .first_layer = 1, .last_layer = 2, .has_embedding = 0, .has_head = 1};
    T_CHECK(mtc_model_init_chunk(&cfg, &o, &last) == MTC_OK);
    T_CHECKF(last->reg.count == (gpt2 ? 1 + 12 + 2 : 6 + 2), "last chunk holds %d params",
             last->reg.count);
    T_CHECK(last->g[MTC_ROLE_WPE] == NULL && last->layers[0].w[MTC_ROLE_QKV_W] == NULL);
    T_CHECK(last->layers[1].w[MTC_ROLE_QKV_W] != NULL);
    T_CHECK(gpt2 ? last->g[MTC_ROLE_WTE] != NULL && last->head_w == last->g[MTC_ROLE_WTE]
                 : last->g[MTC_ROLE_WTE] == NULL && last->head_w == last->g[MTC_ROLE_HEAD]);
    for (int i = 0; i < last->reg.count; i++) {
        const mtc_param *p = &last->reg.params[i];
        int wte = strstr(p->name, "wte.weight") != NULL;
        T_CHECKF(p->shared_copy == wte && !!(p->reduce_groups & MTC_REDUCE_EMBEDDING) == wte,
                 "%s: tied copy flags", p->name);
    }
    for (int i = 0; i < last->reg.count; i++) {
        int k = mtc_registry_find(&serial->reg, last->reg.params[i].name);
        T_CHECK(k >= 0 && serial->reg.params[k].offset == last->reg.params[i].global_offset);
    }
    T_CHECK(last->reg.global_total == serial->reg.total);
    mtc_model_free(last);
    mtc_model_free(serial);
    return 0;
}

int main(void) {
    check_config(&GPT2);
    check_config(&LLAMA);
    /* the Llama names and shapes, as Hugging Face's (q/k/v and gate/up fused) */
    mtc_model *m;
    T_CHECK(mtc_model_init(&LLAMA, 1, 1, NULL, &m) == MTC_OK);
    const char *names[] = {"model.embed_tokens.weight",
                           "model.layers.0.input_layernorm.weight",
                           "model.layers.0.self_attn.qkv_proj.weight",
                           "model.layers.0.self_attn.o_proj.weight",
                           "model.layers.0.post_attention_layernorm.weight",
                           "model.layers.0.mlp.gate_up_proj.weight",
                           "model.layers.0.mlp.down_proj.weight"};
    int64_t rows[] = {32, 16, (8 + 2 * 4) * 8, 16, 16, 48, 16}, cols[] = {16, 1, 16, 64, 1, 16, 24};
    for (int k = 0; k < 7; k++) {
        const mtc_param *p = &m->reg.params[k];
        T_CHECKF(!strcmp(p->name, names[k]) && p->shape[0] == rows[k] && p->shape[1] == cols[k],
                 "param %d is %s (%lld, %lld), want %s", k, p->name, (long long)p->shape[0],
                 (long long)p->shape[1], names[k]);
    }
    T_CHECK(m->reg.count == 1 + 2 * 6 + 2);
    T_CHECK(!strcmp(m->reg.params[m->reg.count - 2].name, "model.norm.weight"));
    T_CHECK(!strcmp(m->reg.params[m->reg.count - 1].name, "lm_head.weight"));
    mtc_model_free(m);
    return T_DONE();
}
