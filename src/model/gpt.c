/* model/gpt.c - GPT-2 registry (with the TP split of every parameter),
 * flat buffers, activation slots, initial values and the gather of TP
 * shards back to global shapes; see gpt.h. The forward / backward pass is
 * in gpt_pass.c. Relies on nn/, tp/ (scratch sizes) and core/mem.h; never
 * allocates after mtc_gpt_init. */
#include "model/gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "model/gpt_internal.h"
#include "tp/mappings.h"

int mtc_gpt_pad_vocab(int vocab_size, int divisible_by, int tp) {
    int multiple = (divisible_by > 0 ? divisible_by : 1) * (tp > 0 ? tp : 1);
    return (vocab_size + multiple - 1) / multiple * multiple;
}

mtc_result_t mtc_gpt_config_validate(const mtc_gpt_config *c) {
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    if (c->num_layers < 1) return mtc_error(E, "num-layers=%d must be >= 1", c->num_layers);
    if (c->hidden_size < 1) return mtc_error(E, "hidden-size=%d must be >= 1", c->hidden_size);
    if (c->num_heads < 1) return mtc_error(E, "num-attention-heads=%d must be >= 1", c->num_heads);
    if (c->hidden_size % c->num_heads) {
        char valid[256] = "";
        size_t n = 0;
        for (int h = 1; h <= c->hidden_size && n + 12 < sizeof valid; h++)
            if (c->hidden_size % h == 0)
                n += (size_t)snprintf(valid + n, sizeof valid - n, " %d", h);
        return mtc_error(
            E, "hidden-size=%d is not divisible by num-attention-heads=%d (valid head counts:%s)",
            c->hidden_size, c->num_heads, valid);
    }
    if (c->ffn_hidden_size < 1)
        return mtc_error(E, "ffn-hidden-size=%d must be >= 1", c->ffn_hidden_size);
    if (c->seq_length < 1) return mtc_error(E, "seq-length=%d must be >= 1", c->seq_length);
    if (c->max_position_embeddings < c->seq_length)
        return mtc_error(E,
                         "seq-length=%d is longer than max-position-embeddings=%d (raise "
                         "--max-position-embeddings or lower --seq-length)",
                         c->seq_length, c->max_position_embeddings);
    if (c->vocab_size < 1) return mtc_error(E, "vocab-size=%d must be >= 1", c->vocab_size);
    if (c->padded_vocab_size < c->vocab_size)
        return mtc_error(E, "padded vocabulary %d is smaller than vocab-size=%d",
                         c->padded_vocab_size, c->vocab_size);
    if (!(c->hidden_dropout >= 0 && c->hidden_dropout < 1))
        return mtc_error(E, "hidden-dropout=%g must be in [0, 1)", c->hidden_dropout);
    if (!(c->attention_dropout >= 0 && c->attention_dropout < 1))
        return mtc_error(E, "attention-dropout=%g must be in [0, 1)", c->attention_dropout);
    double acts = (double)c->seq_length * c->seq_length * c->num_heads;
    if (acts > 1e10) return mtc_error(E, "seq-length=%d is too long for this build", c->seq_length);
    return MTC_OK;
}

double mtc_gpt_flops(const mtc_gpt_config *c, int64_t global_batch) {
    double B = (double)global_batch, s = c->seq_length, L = c->num_layers, h = c->hidden_size,
           V = c->padded_vocab_size;
    return 72.0 * B * s * L * h * h * (1.0 + s / (12.0 * h) + V / (12.0 * h * L));
}

/* Register the chunk's parameters with their TP split and reduction groups
 * (tp/layers.h: c_attn and c_fc column-parallel, the c_proj weights
 * row-parallel, wte vocabulary-parallel; the rest replicated over TP, and
 * under SP their gradients are partial sums over the rank's tokens). A
 * chunk holds wte when it embeds or has the head (tied: the last pipeline
 * stage keeps its own copy), wpe when it embeds, its layers, and ln_f with
 * the head; `full` = every parameter, tp 1 (the serial layout). */
static mtc_result_t gpt_register(mtc_gpt *m, mtc_registry *r, int full) {
    const mtc_gpt_config *c = &m->cfg;
    int L = c->num_layers, C = c->hidden_size, F = c->ffn_hidden_size;
    int l0 = full ? 0 : m->first_layer, l1 = full ? L : m->last_layer;
    int emb = full || m->has_embedding, head = full || m->has_head;
    float std = c->init_std, std_out = c->init_std / sqrtf(2.0f * (float)L);
    MTC_CHECK(mtc_registry_init(r, 4 + 12 * L));
    r->tp = full ? 1 : m->tp_size, r->tp_rank = full ? 0 : m->tp_rank;
    if (emb || head)
        MTC_CHECK(
            mtc_registry_add(r, "wte.weight", -1, c->padded_vocab_size, C, MTC_INIT_NORMAL, std));
    if (emb)
        MTC_CHECK(mtc_registry_add(r, "wpe.weight", -1, c->max_position_embeddings, C,
                                   MTC_INIT_NORMAL, std));
    char n[MTC_PARAM_NAME_MAX];
#define ADD(suffix, s0, s1, kind, sd)                                                              \
    do {                                                                                           \
        snprintf(n, sizeof n, "h.%d.%s", l, suffix);                                               \
        MTC_CHECK(mtc_registry_add(r, n, l, s0, s1, kind, sd));                                    \
    } while (0)
    for (int l = l0; l < l1; l++) {
        ADD("ln_1.weight", C, 0, MTC_INIT_ONES, 0);
        ADD("ln_1.bias", C, 0, MTC_INIT_ZEROS, 0);
        ADD("attn.c_attn.weight", 3 * C, C, MTC_INIT_NORMAL, std);
        ADD("attn.c_attn.bias", 3 * C, 0, MTC_INIT_ZEROS, 0);
        ADD("attn.c_proj.weight", C, C, MTC_INIT_NORMAL, std_out);
        ADD("attn.c_proj.bias", C, 0, MTC_INIT_ZEROS, 0);
        ADD("ln_2.weight", C, 0, MTC_INIT_ONES, 0);
        ADD("ln_2.bias", C, 0, MTC_INIT_ZEROS, 0);
        ADD("mlp.c_fc.weight", F, C, MTC_INIT_NORMAL, std);
        ADD("mlp.c_fc.bias", F, 0, MTC_INIT_ZEROS, 0);
        ADD("mlp.c_proj.weight", C, F, MTC_INIT_NORMAL, std_out);
        ADD("mlp.c_proj.bias", C, 0, MTC_INIT_ZEROS, 0);
    }
#undef ADD
    if (head) {
        MTC_CHECK(mtc_registry_add(r, "ln_f.weight", -1, C, 0, MTC_INIT_ONES, 0));
        MTC_CHECK(mtc_registry_add(r, "ln_f.bias", -1, C, 0, MTC_INIT_ZEROS, 0));
    }
    int tp = r->tp, sp = !full && m->tp.sequence_parallel;
    for (int i = 0; i < r->count; i++) {
        mtc_param *p = &r->params[i];
        p->reduce_groups = MTC_REDUCE_DP_CP;
        const char *s = p->name;
        if (!strcmp(s, "wte.weight")) {
            p->reduce_groups |= MTC_REDUCE_EMBEDDING;
            mtc_registry_split(r, i, 0, 1);
        } else if (strstr(s, "c_attn.")) {
            mtc_registry_split(r, i, 0, 3);
        } else if (strstr(s, "c_fc.")) {
            mtc_registry_split(r, i, 0, 1);
        } else if (strstr(s, "c_proj.weight")) {
            mtc_registry_split(r, i, 1, 1);
        } else {
            p->tp_duplicate = tp > 1;
            /* layer norms and row-parallel biases see only local tokens under SP */
            if (sp && strcmp(s, "wpe.weight")) p->reduce_groups |= MTC_REDUCE_TP;
        }
    }
    mtc_registry_layout(r);
    return MTC_OK;
}

/* The chunk's registry, with global offsets taken from the serial layout
 * of the whole model (so gathers and checkpoints address global shapes). */
static mtc_result_t gpt_register_chunk(mtc_gpt *m) {
    MTC_CHECK(gpt_register(m, &m->reg, 0));
    mtc_registry full;
    MTC_CHECK(gpt_register(m, &full, 1));
    for (int i = 0; i < m->reg.count; i++) {
        int k = mtc_registry_find(&full, m->reg.params[i].name);
        MTC_ASSERT(k >= 0);
        m->reg.params[i].global_offset = full.params[k].global_offset;
    }
    m->reg.global_total = full.global_total;
    mtc_registry_free(&full);
    mtc_registry *r = &m->reg;
    m->pidx_wte = mtc_registry_find(r, "wte.weight");
    m->pidx_wpe = mtc_registry_find(r, "wpe.weight");
    m->pidx_lnf = mtc_registry_find(r, "ln_f.weight");
    m->pidx_layer0 = m->has_embedding ? 2 : m->pidx_wte >= 0 ? 1 : 0;
    return MTC_OK;
}

/* Point views of one flat buffer at the registry's offsets (NULL outside
 * the chunk). */
static void gpt_bind(mtc_gpt *m, float *base, float **wte, float **wpe, float **lnfw, float **lnfb,
                     mtc_gpt_layer *layers) {
    const mtc_registry *r = &m->reg;
#define AT(i) (base + r->params[(i)].offset)
    *wte = m->pidx_wte >= 0 ? AT(m->pidx_wte) : NULL;
    *wpe = m->pidx_wpe >= 0 ? AT(m->pidx_wpe) : NULL;
    for (int l = m->first_layer; l < m->last_layer; l++) {
        int i = m->pidx_layer0 + 12 * (l - m->first_layer);
        mtc_gpt_layer *y = &layers[l];
        y->ln1w = AT(i + 0), y->ln1b = AT(i + 1), y->qkvw = AT(i + 2), y->qkvb = AT(i + 3);
        y->attprojw = AT(i + 4), y->attprojb = AT(i + 5), y->ln2w = AT(i + 6), y->ln2b = AT(i + 7);
        y->fcw = AT(i + 8), y->fcb = AT(i + 9), y->fcprojw = AT(i + 10), y->fcprojb = AT(i + 11);
    }
    *lnfw = m->pidx_lnf >= 0 ? AT(m->pidx_lnf) : NULL;
    *lnfb = m->pidx_lnf >= 0 ? AT(m->pidx_lnf + 1) : NULL;
#undef AT
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* Floats of TP-layer scratch one pass needs (largest of every call). */
static size_t gpt_scratch_floats(const mtc_gpt *m) {
    const mtc_gpt_config *c = &m->cfg;
    int B = m->B, T = m->T, C = c->hidden_size;
    size_t s = tp_attention_scratch_floats(&m->tp, B, T, C, c->num_heads);
    s = max_sz(s, tp_mlp_scratch_floats(&m->tp, B, T, C, c->ffn_hidden_size));
    s = max_sz(s, tp_vocab_embedding_scratch_floats(&m->tp, B, T, C));
    s = max_sz(s, tp_column_linear_scratch_floats(&m->tp, 0, B, T, C, c->padded_vocab_size));
    s = max_sz(s, 3 * (size_t)B * T);
    return s;
}

/* Carve (or, with a NULL arena base, just count) the activation arena. */
static size_t gpt_carve(mtc_gpt *m, char *base) {
    const mtc_gpt_config *c = &m->cfg;
    size_t tp = (size_t)m->tp_size;
    size_t B = (size_t)m->B, T = (size_t)m->T, C = (size_t)c->hidden_size,
           F_tp = (size_t)c->ffn_hidden_size / tp, NH_tp = (size_t)c->num_heads / tp, C_tp = C / tp,
           V_tp = (size_t)c->padded_vocab_size / tp, nl = (size_t)(m->last_layer - m->first_layer);
    size_t N = B * T, Nl = B * (size_t)m->T_loc, off = 0;
#define TAKE(ptr, count)                                                                           \
    do {                                                                                           \
        float *p_ = base ? (float *)(base + off) : NULL;                                           \
        (ptr) = p_;                                                                                \
        off += ((size_t)(count) * sizeof(float) + 63) & ~(size_t)63;                               \
    } while (0)
    for (int s = 0; s < m->nslots; s++) {
        mtc_gpt_slot *a = &m->slots[s];
        TAKE(a->encoded, Nl * C);
        TAKE(a->ln1, nl * Nl * C);
        TAKE(a->ln1_mean, nl * Nl);
        TAKE(a->ln1_rstd, nl * Nl);
        TAKE(a->qkv, nl * N * 3 * C_tp);
        TAKE(a->lse, nl * B * NH_tp * T);
        TAKE(a->atty, nl * N * C_tp);
        TAKE(a->res2, nl * Nl * C);
        TAKE(a->ln2, nl * Nl * C);
        TAKE(a->ln2_mean, nl * Nl);
        TAKE(a->ln2_rstd, nl * Nl);
        TAKE(a->fch, nl * N * F_tp);
        TAKE(a->fchg, nl * N * F_tp);
        TAKE(a->res3, nl * Nl * C);
        TAKE(a->lnf, Nl * C);
        TAKE(a->lnf_mean, Nl);
        TAKE(a->lnf_rstd, Nl);
        TAKE(a->losses, N);
    }
    TAKE(m->logits, m->has_head ? N * V_tp : 1);
    TAKE(m->fwd_tmp, Nl * C);
    TAKE(m->dres, Nl * C);
    TAKE(m->dtmp, Nl * C);
    TAKE(m->dtmp2, Nl * C);
    TAKE(m->in_total, m->tp.sequence_parallel ? N * C : 1);
    TAKE(m->scratch, gpt_scratch_floats(m));
#undef TAKE
    return off;
}

/* The TP split's own rules, one line each naming the fix. */
static mtc_result_t gpt_check_tp(const mtc_gpt_config *c, int tp, int sp) {
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    if (tp <= 1) return MTC_OK;
    if (c->num_heads % tp)
        return mtc_error(E,
                         "num-attention-heads=%d is not divisible by tensor-model-parallel-size=%d "
                         "(use a tp that divides %d)",
                         c->num_heads, tp, c->num_heads);
    if (c->ffn_hidden_size % tp)
        return mtc_error(E, "ffn-hidden-size=%d is not divisible by tensor-model-parallel-size=%d",
                         c->ffn_hidden_size, tp);
    if (c->padded_vocab_size % tp)
        return mtc_error(E,
                         "padded vocabulary %d is not divisible by tensor-model-parallel-size=%d "
                         "(pad with make-vocab-size-divisible-by x tp)",
                         c->padded_vocab_size, tp);
    if (sp && c->seq_length % tp)
        return mtc_error(E,
                         "seq-length=%d is not divisible by tensor-model-parallel-size=%d, which "
                         "sequence parallelism needs",
                         c->seq_length, tp);
    return MTC_OK;
}

mtc_result_t mtc_gpt_init_chunk(const mtc_gpt_config *cfg, int B, int nslots, nn_pool *pool,
                                mtc_comm_t tp, int sequence_parallel, int first_layer,
                                int last_layer, int has_embedding, int has_head, mtc_gpt **out) {
    *out = NULL;
    if (first_layer < 0 || last_layer > cfg->num_layers || first_layer > last_layer)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "chunk layers [%d, %d) outside [0, %d)",
                         first_layer, last_layer, cfg->num_layers);
    MTC_CHECK(mtc_gpt_config_validate(cfg));
    int tps = tp_size(tp);
    if (tps <= 1) sequence_parallel = 0;
    MTC_CHECK(gpt_check_tp(cfg, tps, sequence_parallel));
    if (B < 1 || nslots < 1)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "micro batch %d and slots %d must be >= 1", B,
                         nslots);
    mtc_gpt *m;
    MTC_CHECK(mtc_mem_calloc(1, sizeof *m, (void **)&m));
    mtc_result_t rc = MTC_OK;
    m->cfg = *cfg;
    if (m->cfg.init_std <= 0) m->cfg.init_std = 0.02f;
    m->B = B;
    m->T = cfg->seq_length;
    m->tp =
        (tp_ctx){.comm = tps > 1 ? tp : NULL, .pool = pool, .sequence_parallel = sequence_parallel};
    m->tp_size = tps;
    m->tp_rank = tp_rank(m->tp.comm);
    m->T_loc = sequence_parallel ? m->T / tps : m->T;
    m->first_layer = first_layer;
    m->last_layer = last_layer;
    m->has_embedding = has_embedding;
    m->has_head = has_head;
    m->nslots = nslots;
    m->pool = pool;
    MTC_CHECK_GOTO(gpt_register_chunk(m), rc, fail);
    size_t bytes = m->reg.total * sizeof(float);
    MTC_CHECK_GOTO(mtc_mem_alloc_big(bytes, 1, (void **)&m->params), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_alloc_big(bytes, 1, (void **)&m->grads), rc, fail);
    MTC_CHECK_GOTO(
        mtc_mem_calloc((size_t)cfg->num_layers, sizeof(mtc_gpt_layer), (void **)&m->layers), rc,
        fail);
    MTC_CHECK_GOTO(
        mtc_mem_calloc((size_t)cfg->num_layers, sizeof(mtc_gpt_layer), (void **)&m->dlayers), rc,
        fail);
    MTC_CHECK_GOTO(mtc_mem_calloc((size_t)nslots, sizeof(mtc_gpt_slot), (void **)&m->slots), rc,
                   fail);
    gpt_bind(m, m->params, &m->wte, &m->wpe, &m->lnfw, &m->lnfb, m->layers);
    gpt_bind(m, m->grads, &m->dwte, &m->dwpe, &m->dlnfw, &m->dlnfb, m->dlayers);
    size_t need = gpt_carve(m, NULL);
    MTC_CHECK_GOTO(mtc_arena_init(&m->arena, need + 4096), rc, fail);
    void *base;
    MTC_CHECK_GOTO(mtc_arena_alloc(&m->arena, need, 64, &base), rc, fail);
    gpt_carve(m, base);
    memset(base, 0, need); /* fault the pages in now, not in the first step */
    *out = m;
    return MTC_OK;
fail:
    mtc_gpt_free(m);
    return rc;
}

mtc_result_t mtc_gpt_init_tp(const mtc_gpt_config *cfg, int B, int nslots, nn_pool *pool,
                             mtc_comm_t tp, int sequence_parallel, mtc_gpt **out) {
    return mtc_gpt_init_chunk(cfg, B, nslots, pool, tp, sequence_parallel, 0, cfg->num_layers, 1, 1,
                              out);
}

mtc_result_t mtc_gpt_init(const mtc_gpt_config *cfg, int B, int nslots, nn_pool *pool,
                          mtc_gpt **out) {
    return mtc_gpt_init_tp(cfg, B, nslots, pool, NULL, 0, out);
}

mtc_result_t mtc_gpt_relayout(mtc_gpt *m, const size_t *offsets, size_t total) {
    mtc_registry *r = &m->reg;
    for (int i = 0; i < r->count; i++)
        if (offsets[i] + r->params[i].local_numel > total)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "param %s at offset %zu (+%zu) does not fit a buffer of %zu floats",
                             r->params[i].name, offsets[i], r->params[i].local_numel, total);
    float *p = NULL, *g = NULL;
    MTC_CHECK(mtc_mem_alloc_big(total * sizeof(float), 1, (void **)&p));
    mtc_result_t rc = mtc_mem_alloc_big(total * sizeof(float), 1, (void **)&g);
    if (rc != MTC_OK) {
        mtc_mem_free_big(p, total * sizeof(float));
        return rc;
    }
    mtc_mem_free_big(m->params, r->total * sizeof(float));
    mtc_mem_free_big(m->grads, r->total * sizeof(float));
    m->params = p, m->grads = g;
    for (int i = 0; i < r->count; i++)
        r->params[i].offset = offsets[i];
    r->total = total;
    gpt_bind(m, m->params, &m->wte, &m->wpe, &m->lnfw, &m->lnfb, m->layers);
    gpt_bind(m, m->grads, &m->dwte, &m->dwpe, &m->dlnfw, &m->dlnfb, m->dlayers);
    return MTC_OK;
}

void mtc_gpt_free(mtc_gpt *m) {
    if (!m) return;
    size_t bytes = m->reg.total * sizeof(float);
    mtc_mem_free_big(m->params, bytes);
    mtc_mem_free_big(m->grads, bytes);
    mtc_arena_free(&m->arena);
    free(m->layers);
    free(m->dlayers);
    free(m->slots);
    mtc_registry_free(&m->reg);
    free(m);
}

typedef struct {
    mtc_gpt *m;
    uint64_t seed;
} gpt_init_job;

#define GPT_INIT_CHUNK ((size_t)1 << 18)

/* Task i fills the i-th GPT_INIT_CHUNK elements of the flat buffer, split
 * along parameter boundaries (values do not depend on the split). */
static void gpt_init_task(int i, void *arg) {
    gpt_init_job *j = arg;
    const mtc_registry *r = &j->m->reg;
    size_t lo = (size_t)i * GPT_INIT_CHUNK, hi = lo + GPT_INIT_CHUNK;
    if (hi > r->total) hi = r->total;
    for (int k = 0; k < r->count; k++) {
        const mtc_param *p = &r->params[k];
        size_t a = p->offset > lo ? p->offset : lo;
        size_t b = p->offset + p->local_numel < hi ? p->offset + p->local_numel : hi;
        if (a < b) mtc_registry_init_local(r, p, j->m->params + a, a - p->offset, b - a, j->seed);
    }
}

void mtc_gpt_init_params(mtc_gpt *m, uint64_t seed) {
    gpt_init_job j = {m, seed};
    nn_pool_run(m->pool, (int)((m->reg.total + GPT_INIT_CHUNK - 1) / GPT_INIT_CHUNK), gpt_init_task,
                &j);
}

void mtc_gpt_zero_grad(mtc_gpt *m) { memset(m->grads, 0, m->reg.total * sizeof(float)); }

size_t mtc_gpt_activation_bytes(const mtc_gpt *m) { return m->arena.high_water; }

mtc_result_t mtc_gpt_gather(const mtc_gpt *m, float *out, const float *from, float *scratch) {
    const mtc_registry *r = &m->reg;
    for (int i = 0; i < r->count; i++) {
        const mtc_param *p = &r->params[i];
        float *dst = out + p->global_offset;
        if (p->split_dim < 0 || m->tp_size <= 1) {
            memcpy(dst, from + p->offset, p->numel * sizeof(float));
            continue;
        }
        /* comm: all-gather(tp) of the shard */
        MTC_CHECK(
            mtc_all_gather(from + p->offset, scratch, p->local_numel, MTC_DTYPE_F32, m->tp.comm));
        for (int k = 0; k < m->tp_size; k++)
            for (size_t l = 0; l < p->local_numel; l++)
                dst[mtc_registry_global_index(r, p, k, l)] =
                    scratch[(size_t)k * p->local_numel + l];
    }
    return MTC_OK;
}

float *mtc_gpt_slot_input(mtc_gpt *m, int slot) {
    MTC_ASSERT(slot >= 0 && slot < m->nslots);
    return m->slots[slot].encoded;
}

const float *mtc_gpt_slot_output(const mtc_gpt *m, int slot) {
    MTC_ASSERT(slot >= 0 && slot < m->nslots);
    const mtc_gpt_slot *a = &m->slots[slot];
    int nl = m->last_layer - m->first_layer;
    return nl ? a->res3 + (size_t)(nl - 1) * m->B * m->T_loc * m->cfg.hidden_size : a->encoded;
}
