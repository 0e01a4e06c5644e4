/* tests/model/test_gpt_tp_registry.c - the registry's TP split of the GPT:
 * for tp in {2, 4} and every parameter, the local -> global index maps of
 * the tp ranks (built by mtc_gpt_init_tp on shm rank-threads, SP on)
 * together hit every split parameter's global element exactly once; the fused
 * c_attn rows follow tp/layers.h's tp_qkv_row; split parameters hold 1/tp
 * of the elements and replicated ones are flagged tp_duplicate (and, under
 * sequence parallelism, MTC_REDUCE_TP except wpe); a shard's initial
 * values are the serial model's values at the mapped global indices; a
 * pipeline chunk's global offsets are the whole model's. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "model/gpt.h"
#include "test.h"
#include "tp/layers.h"

static mtc_gpt_config CFG = {.num_layers = 2,
                             .hidden_size = 16,
                             .num_heads = 4,
                             .ffn_hidden_size = 64,
                             .seq_length = 8,
                             .max_position_embeddings = 8,
                             .vocab_size = 30,
                             .padded_vocab_size = 32,
                             .init_std = 0.02f};

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
    mtc_gpt *m;
    MTC_CHECK(mtc_gpt_init_tp(&CFG, 1, 1, NULL, world, 1, &m));
    mtc_gpt_init_params(m, 77);
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
    mtc_gpt_free(m);
    return MTC_OK;
}

int main(void) {
    mtc_gpt_config cfg = CFG;
    mtc_gpt *serial;
    T_CHECK(mtc_gpt_init(&cfg, 1, 1, NULL, &serial) == MTC_OK);
    mtc_gpt_init_params(serial, 77);
    int C = cfg.hidden_size;
    for (int tp = 2; tp <= 4; tp *= 2) {
        mtc_launch_opts lo = {.backend = MTC_BACKEND_SHM, .world_size = tp};
        T_CHECK(mtc_launch(&lo, rank_fn, NULL) == MTC_OK);
        for (int i = 0; i < serial->reg.count; i++) {
            const mtc_param *g = &serial->reg.params[i];
            int split = g_view[0].split[i];
            int expect_split = !strcmp(g->name, "wte.weight") || strstr(g->name, "c_attn.") ||
                               strstr(g->name, "c_fc.") || strstr(g->name, "c_proj.weight");
            T_CHECKF(split == expect_split && g_view[0].dup[i] == !split,
                     "tp=%d %s: split %d duplicate %d", tp, g->name, split, g_view[0].dup[i]);
            T_CHECKF(g_view[0].tpred[i] == (!split && strcmp(g->name, "wpe.weight") != 0),
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
                    if (strstr(g->name, "c_attn.")) {
                        size_t cols = (size_t)g->shape[1];
                        qkv_ok &= gi / cols == (size_t)tp_qkv_row((int)(l / cols), C, tp, r);
                    }
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
    /* a pipeline chunk: the last stage (layer 1, ln_f, its own wte copy) */
    mtc_gpt *last;
    T_CHECK(mtc_gpt_init_chunk(&cfg, 1, 2, NULL, NULL, 0, 1, 2, 0, 1, &last) == MTC_OK);
    T_CHECK(last->reg.count == 1 + 12 + 2);
    T_CHECK(last->wpe == NULL && last->wte != NULL && last->layers[0].qkvw == NULL);
    for (int i = 0; i < last->reg.count; i++) {
        int k = mtc_registry_find(&serial->reg, last->reg.params[i].name);
        T_CHECK(k >= 0 && serial->reg.params[k].offset == last->reg.params[i].global_offset);
    }
    T_CHECK(last->reg.global_total == serial->reg.total);
    mtc_gpt_free(last);
    mtc_gpt_free(serial);
    return T_DONE();
}
