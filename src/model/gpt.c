/* model/gpt.c - GPT-2 registry, buffers, activation slots and the forward /
 * backward of one microbatch on one chunk; see gpt.h. Relies on nn/ kernels
 * and core/mem.h; never allocates after mtc_gpt_init. */
#include "model/gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

struct mtc_gpt_slot {
    float *encoded;                 /* (B,T,C) chunk input (embedding output) */
    float *ln1, *ln1_mean, *ln1_rstd; /* per layer (B,T,C), (B,T), (B,T) */
    float *qkv;                     /* per layer (B,T,3C) */
    float *att;                     /* per layer (B,NH,T,T) */
    float *atty;                    /* per layer (B,T,C) */
    float *res2;                    /* per layer (B,T,C) */
    float *ln2, *ln2_mean, *ln2_rstd;
    float *fch, *fchg;              /* per layer (B,T,F) */
    float *res3;                    /* per layer (B,T,C) layer output */
    float *lnf, *lnf_mean, *lnf_rstd; /* (B,T,C), (B,T), (B,T) */
    float *losses;                  /* (B,T) */
};

int mtc_gpt_pad_vocab(int vocab_size, int divisible_by, int tp) {
    int multiple = (divisible_by > 0 ? divisible_by : 1) * (tp > 0 ? tp : 1);
    return (vocab_size + multiple - 1) / multiple * multiple;
}

mtc_result_t mtc_gpt_config_validate(const mtc_gpt_config *c) {
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    if (c->num_layers < 1) return mtc_error(E, "num-layers=%d must be >= 1", c->num_layers);
    if (c->hidden_size < 1) return mtc_error(E, "hidden-size=%d must be >= 1", c->hidden_size);
    if (c->num_heads < 1)
        return mtc_error(E, "num-attention-heads=%d must be >= 1", c->num_heads);
    if (c->hidden_size % c->num_heads) {
        char valid[256] = "";
        size_t n = 0;
        for (int h = 1; h <= c->hidden_size && n + 12 < sizeof valid; h++)
            if (c->hidden_size % h == 0) n += (size_t)snprintf(valid + n, sizeof valid - n, " %d", h);
        return mtc_error(E, "hidden-size=%d is not divisible by num-attention-heads=%d (valid head counts:%s)",
                         c->hidden_size, c->num_heads, valid);
    }
    if (c->ffn_hidden_size < 1)
        return mtc_error(E, "ffn-hidden-size=%d must be >= 1", c->ffn_hidden_size);
    if (c->seq_length < 1) return mtc_error(E, "seq-length=%d must be >= 1", c->seq_length);
    if (c->max_position_embeddings < c->seq_length)
        return mtc_error(E, "seq-length=%d is longer than max-position-embeddings=%d (raise --max-position-embeddings or lower --seq-length)",
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

static mtc_result_t gpt_register(mtc_gpt *m) {
    const mtc_gpt_config *c = &m->cfg;
    int L = c->num_layers, C = c->hidden_size, F = c->ffn_hidden_size;
    float std = c->init_std, std_out = c->init_std / sqrtf(2.0f * (float)L);
    mtc_registry *r = &m->reg;
    MTC_CHECK(mtc_registry_init(r, 4 + 12 * L));
    MTC_CHECK(mtc_registry_add(r, "wte.weight", -1, c->padded_vocab_size, C, MTC_INIT_NORMAL, std));
    MTC_CHECK(mtc_registry_add(r, "wpe.weight", -1, c->max_position_embeddings, C, MTC_INIT_NORMAL, std));
    char n[MTC_PARAM_NAME_MAX];
#define ADD(suffix, s0, s1, kind, sd)                                          \
    do {                                                                       \
        snprintf(n, sizeof n, "h.%d.%s", l, suffix);                           \
        MTC_CHECK(mtc_registry_add(r, n, l, s0, s1, kind, sd));                \
    } while (0)
    for (int l = 0; l < L; l++) {
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
    MTC_CHECK(mtc_registry_add(r, "ln_f.weight", -1, C, 0, MTC_INIT_ONES, 0));
    MTC_CHECK(mtc_registry_add(r, "ln_f.bias", -1, C, 0, MTC_INIT_ZEROS, 0));
    for (int i = 0; i < r->count; i++) {
        r->params[i].reduce_groups = MTC_REDUCE_DP_CP;
        if (!strcmp(r->params[i].name, "wte.weight"))
            r->params[i].reduce_groups |= MTC_REDUCE_EMBEDDING;
    }
    mtc_registry_layout(r);
    return MTC_OK;
}

/* Point views of one flat buffer at the registry's offsets. */
static void gpt_bind(mtc_gpt *m, float *base, float **wte, float **wpe, float **lnfw,
                     float **lnfb, mtc_gpt_layer *layers) {
    const mtc_registry *r = &m->reg;
#define AT(i) (base + r->params[(i)].offset)
    *wte = AT(0);
    *wpe = AT(1);
    for (int l = 0; l < m->cfg.num_layers; l++) {
        int i = 2 + 12 * l;
        mtc_gpt_layer *y = &layers[l];
        y->ln1w = AT(i + 0), y->ln1b = AT(i + 1), y->qkvw = AT(i + 2), y->qkvb = AT(i + 3);
        y->attprojw = AT(i + 4), y->attprojb = AT(i + 5), y->ln2w = AT(i + 6), y->ln2b = AT(i + 7);
        y->fcw = AT(i + 8), y->fcb = AT(i + 9), y->fcprojw = AT(i + 10), y->fcprojb = AT(i + 11);
    }
    *lnfw = AT(2 + 12 * m->cfg.num_layers);
    *lnfb = AT(3 + 12 * m->cfg.num_layers);
#undef AT
}

/* Carve (or, with a NULL arena base, just count) the activation arena. */
static size_t gpt_carve(mtc_gpt *m, char *base) {
    const mtc_gpt_config *c = &m->cfg;
    size_t B = (size_t)m->B, T = (size_t)m->T, C = (size_t)c->hidden_size,
           F = (size_t)c->ffn_hidden_size, NH = (size_t)c->num_heads,
           Vp = (size_t)c->padded_vocab_size, nl = (size_t)(m->last_layer - m->first_layer);
    size_t N = B * T, off = 0;
    size_t big = F > 3 * C ? F : 3 * C;
#define TAKE(ptr, count)                                                       \
    do {                                                                       \
        float *p_ = base ? (float *)(base + off) : NULL;                       \
        (ptr) = p_;                                                            \
        off += ((size_t)(count) * sizeof(float) + 63) & ~(size_t)63;           \
    } while (0)
    for (int s = 0; s < m->nslots; s++) {
        mtc_gpt_slot *a = &m->slots[s];
        TAKE(a->encoded, N * C);
        TAKE(a->ln1, nl * N * C);
        TAKE(a->ln1_mean, nl * N);
        TAKE(a->ln1_rstd, nl * N);
        TAKE(a->qkv, nl * N * 3 * C);
        TAKE(a->att, nl * B * NH * T * T);
        TAKE(a->atty, nl * N * C);
        TAKE(a->res2, nl * N * C);
        TAKE(a->ln2, nl * N * C);
        TAKE(a->ln2_mean, nl * N);
        TAKE(a->ln2_rstd, nl * N);
        TAKE(a->fch, nl * N * F);
        TAKE(a->fchg, nl * N * F);
        TAKE(a->res3, nl * N * C);
        TAKE(a->lnf, N * C);
        TAKE(a->lnf_mean, N);
        TAKE(a->lnf_rstd, N);
        TAKE(a->losses, N);
    }
    TAKE(m->logits, m->has_head ? N * Vp : 1);
    TAKE(m->fwd_tmp, N * C);
    TAKE(m->dres, N * C);
    TAKE(m->dtmp, N * C);
    TAKE(m->dtmp2, N * C);
    TAKE(m->dbig1, N * big);
    TAKE(m->dbig2, N * big);
    TAKE(m->datt, B * NH * T * T);
#undef TAKE
    return off;
}

mtc_result_t mtc_gpt_init(const mtc_gpt_config *cfg, int B, int nslots, nn_pool *pool,
                          mtc_gpt **out) {
    *out = NULL;
    MTC_CHECK(mtc_gpt_config_validate(cfg));
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
    m->first_layer = 0;
    m->last_layer = cfg->num_layers;
    m->has_embedding = m->has_head = 1;
    m->nslots = nslots;
    m->pool = pool;
    MTC_CHECK_GOTO(gpt_register(m), rc, fail);
    size_t bytes = m->reg.total * sizeof(float);
    MTC_CHECK_GOTO(mtc_mem_alloc_big(bytes, 1, (void **)&m->params), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_alloc_big(bytes, 1, (void **)&m->grads), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_calloc((size_t)cfg->num_layers, sizeof(mtc_gpt_layer), (void **)&m->layers), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_calloc((size_t)cfg->num_layers, sizeof(mtc_gpt_layer), (void **)&m->dlayers), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_calloc((size_t)nslots, sizeof(mtc_gpt_slot), (void **)&m->slots), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_calloc((size_t)m->reg.count, 1, (void **)&m->gemm_written), rc, fail);
    for (int i = 0; i < m->reg.count; i++) {
        const char *n = m->reg.params[i].name;
        m->gemm_written[i] = strstr(n, "c_attn.weight") || strstr(n, "c_proj.weight") ||
                             strstr(n, "c_fc.weight") || (!strcmp(n, "wte.weight") && m->has_head);
    }
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

void mtc_gpt_free(mtc_gpt *m) {
    if (!m) return;
    size_t bytes = m->reg.total * sizeof(float);
    mtc_mem_free_big(m->params, bytes);
    mtc_mem_free_big(m->grads, bytes);
    mtc_arena_free(&m->arena);
    free(m->layers);
    free(m->dlayers);
    free(m->slots);
    free(m->gemm_written);
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
        if (a < b) mtc_registry_init_range(p, j->m->params + a, a - p->offset, b - a, j->seed);
    }
}

void mtc_gpt_init_params(mtc_gpt *m, uint64_t seed) {
    gpt_init_job j = {m, seed};
    nn_pool_run(m->pool, (int)((m->reg.total + GPT_INIT_CHUNK - 1) / GPT_INIT_CHUNK), gpt_init_task,
                &j);
}

void mtc_gpt_zero_grad(mtc_gpt *m) { memset(m->grads, 0, m->reg.total * sizeof(float)); }

size_t mtc_gpt_activation_bytes(const mtc_gpt *m) { return m->arena.high_water; }

float *mtc_gpt_slot_input(mtc_gpt *m, int slot) {
    MTC_ASSERT(slot >= 0 && slot < m->nslots);
    return m->slots[slot].encoded;
}

const float *mtc_gpt_slot_output(const mtc_gpt *m, int slot) {
    MTC_ASSERT(slot >= 0 && slot < m->nslots);
    const mtc_gpt_slot *a = &m->slots[slot];
    int nl = m->last_layer - m->first_layer;
    return nl ? a->res3 + (size_t)(nl - 1) * m->B * m->T * m->cfg.hidden_size : a->encoded;
}

/* Dropout sites inside a layer; the embedding uses layer -1. */
enum { SITE_EMBED = 0, SITE_ATTN_PROBS = 1, SITE_ATTN_OUT = 2, SITE_MLP_OUT = 3 };

static nn_dropout_spec gpt_drop(const mtc_gpt *m, const mtc_gpt_pass *pass, int layer, int site,
                                float p, int T) {
    nn_dropout_spec s;
    memset(&s, 0, sizeof s);
    s.p = pass && pass->train ? p : 0.0f;
    if (s.p > 0) {
        s.seed = pass->seed;
        /* stream = (iteration, layer, site): fresh masks every step and site */
        s.stream = 0x6d74630000000000ull ^ (pass->iteration << 22) ^
                   ((uint64_t)(layer + 1) << 4) ^ (uint64_t)site;
        s.b0 = pass->b0;
    }
    s.Tg = T;
    s.Cg = m->cfg.hidden_size;
    s.NHg = m->cfg.num_heads;
    return s;
}

double mtc_gpt_forward(mtc_gpt *m, int slot, const int *tokens, const int *targets, int B, int T,
                       const mtc_gpt_pass *pass) {
    MTC_ASSERT(slot >= 0 && slot < m->nslots && B <= m->B && T <= m->T && B >= 1 && T >= 1);
    const mtc_gpt_config *c = &m->cfg;
    int C = c->hidden_size, NH = c->num_heads, HS = C / NH, F = c->ffn_hidden_size;
    int N = B * T, Vp = c->padded_vocab_size;
    size_t sN = (size_t)m->B * m->T; /* per-layer strides use the largest shape */
    mtc_gpt_slot *a = &m->slots[slot];
    nn_pool *pool = m->pool;

    if (m->has_embedding) {
        nn_token_embedding_forward(a->encoded, tokens, m->wte, 0, Vp, N, C);
        nn_position_embedding_forward(a->encoded, m->wpe, NULL, B, T, C);
        nn_dropout_spec d = gpt_drop(m, pass, -1, SITE_EMBED, c->hidden_dropout, T);
        if (d.p > 0) nn_dropout_forward(a->encoded, a->encoded, B, T, C, &d);
    }
    const float *x = a->encoded;
    for (int l = m->first_layer; l < m->last_layer; l++) {
        size_t k = (size_t)(l - m->first_layer);
        const mtc_gpt_layer *w = &m->layers[l];
        float *ln1 = a->ln1 + k * sN * C, *ln1m = a->ln1_mean + k * sN, *ln1r = a->ln1_rstd + k * sN;
        float *qkv = a->qkv + k * sN * 3 * C, *att = a->att + k * sN * NH * m->T;
        float *atty = a->atty + k * sN * C, *res2 = a->res2 + k * sN * C;
        float *ln2 = a->ln2 + k * sN * C, *ln2m = a->ln2_mean + k * sN, *ln2r = a->ln2_rstd + k * sN;
        float *fch = a->fch + k * sN * F, *fchg = a->fchg + k * sN * F, *res3 = a->res3 + k * sN * C;

        nn_layernorm_forward(pool, ln1, ln1m, ln1r, x, w->ln1w, w->ln1b, N, C);
        nn_linear_forward(pool, qkv, ln1, w->qkvw, w->qkvb, N, C, 3 * C);
        nn_dropout_spec da = gpt_drop(m, pass, l, SITE_ATTN_PROBS, c->attention_dropout, T);
        nn_attention_forward(pool, atty, att, qkv, B, T, NH, HS, da.p > 0 ? &da : NULL);
        nn_linear_forward(pool, m->fwd_tmp, atty, w->attprojw, w->attprojb, N, C, C);
        nn_dropout_spec dh = gpt_drop(m, pass, l, SITE_ATTN_OUT, c->hidden_dropout, T);
        if (dh.p > 0) nn_dropout_forward(m->fwd_tmp, m->fwd_tmp, B, T, C, &dh);
        nn_residual_forward(res2, x, m->fwd_tmp, (size_t)N * C);
        nn_layernorm_forward(pool, ln2, ln2m, ln2r, res2, w->ln2w, w->ln2b, N, C);
        nn_linear_forward(pool, fch, ln2, w->fcw, w->fcb, N, C, F);
        nn_gelu_forward(pool, fchg, fch, (size_t)N * F);
        nn_linear_forward(pool, m->fwd_tmp, fchg, w->fcprojw, w->fcprojb, N, F, C);
        nn_dropout_spec dm = gpt_drop(m, pass, l, SITE_MLP_OUT, c->hidden_dropout, T);
        if (dm.p > 0) nn_dropout_forward(m->fwd_tmp, m->fwd_tmp, B, T, C, &dm);
        nn_residual_forward(res3, res2, m->fwd_tmp, (size_t)N * C);
        x = res3;
    }
    if (!m->has_head) return 0.0;
    nn_layernorm_forward(pool, a->lnf, a->lnf_mean, a->lnf_rstd, x, m->lnfw, m->lnfb, N, C);
    nn_linear_forward(pool, m->logits, a->lnf, m->wte, NULL, N, C, Vp);
    m->dlogits_ready = 0;
    if (!targets) return 0.0;
    if (pass && pass->loss_scale > 0) {
        nn_softmax_xent_forward_backward(pool, a->losses, m->logits, targets, pass->loss_scale, N,
                                         c->vocab_size, Vp);
        m->dlogits_ready = 1;
    } else {
        nn_softmax_xent_forward(pool, a->losses, m->logits, targets, N, c->vocab_size, Vp);
    }
    double sum = 0;
    for (int i = 0; i < N; i++) sum += a->losses[i];
    return sum;
}

/* nn_linear_backward, with dw (OUT, IN) overwritten (beta 0) instead of
 * accumulated on the step's first microbatch. */
static void gpt_linear_backward(nn_pool *pool, float *dinp, float *dw, float *db, const float *dout,
                                const float *inp, const float *w, int N, int IN, int OUT,
                                int overwrite) {
    nn_linear_backward(pool, dinp, NULL, db, dout, inp, w, N, IN, OUT);
    nn_sgemm(pool, 1, 0, OUT, IN, N, 1.0f, dout, OUT, inp, IN, overwrite ? 0.0f : 1.0f, dw, IN);
}

void mtc_gpt_backward(mtc_gpt *m, int slot, const int *tokens, const int *targets, int B, int T,
                      float loss_scale, const mtc_gpt_pass *pass) {
    MTC_ASSERT(slot >= 0 && slot < m->nslots && B <= m->B && T <= m->T);
    const mtc_gpt_config *c = &m->cfg;
    int C = c->hidden_size, NH = c->num_heads, HS = C / NH, F = c->ffn_hidden_size;
    int N = B * T, Vp = c->padded_vocab_size;
    size_t sN = (size_t)m->B * m->T, nC = (size_t)N * C;
    mtc_gpt_slot *a = &m->slots[slot];
    nn_pool *pool = m->pool;
    int ow = pass && pass->first_microbatch;
    if (ow) /* gradients not written by a weight GEMM start from zero */
        for (int i = 0; i < m->reg.count; i++)
            if (!m->gemm_written[i])
                memset(m->grads + m->reg.params[i].offset, 0,
                       m->reg.params[i].local_numel * sizeof(float));

    /* dres = d(loss)/d(chunk output) */
    if (m->has_head) {
        MTC_ASSERT(targets);
        const float *xlast = m->last_layer > m->first_layer
                                 ? a->res3 + (size_t)(m->last_layer - m->first_layer - 1) * sN * C
                                 : a->encoded;
        if (!m->dlogits_ready)
            nn_softmax_xent_backward(pool, m->logits, targets, loss_scale, N, c->vocab_size, Vp);
        m->dlogits_ready = 0;
        gpt_linear_backward(pool, m->dtmp, m->dwte, NULL, m->logits, a->lnf, m->wte, N, C, Vp, ow);
        nn_layernorm_backward(pool, m->dres, m->dlnfw, m->dlnfb, m->dtmp, xlast, m->lnfw,
                              a->lnf_mean, a->lnf_rstd, N, C);
    }
    for (int l = m->last_layer - 1; l >= m->first_layer; l--) {
        size_t k = (size_t)(l - m->first_layer);
        const mtc_gpt_layer *w = &m->layers[l];
        const mtc_gpt_layer *g = &m->dlayers[l];
        const float *x = k ? a->res3 + (k - 1) * sN * C : a->encoded;
        float *ln1 = a->ln1 + k * sN * C, *ln1m = a->ln1_mean + k * sN, *ln1r = a->ln1_rstd + k * sN;
        float *qkv = a->qkv + k * sN * 3 * C, *att = a->att + k * sN * NH * m->T;
        float *atty = a->atty + k * sN * C, *res2 = a->res2 + k * sN * C;
        float *ln2 = a->ln2 + k * sN * C, *ln2m = a->ln2_mean + k * sN, *ln2r = a->ln2_rstd + k * sN;
        float *fch = a->fch + k * sN * F, *fchg = a->fchg + k * sN * F;

        /* MLP branch: dres holds d(res3) */
        const float *dy = m->dres;
        nn_dropout_spec dm = gpt_drop(m, pass, l, SITE_MLP_OUT, c->hidden_dropout, T);
        if (dm.p > 0) nn_dropout_backward(m->dtmp, m->dres, B, T, C, &dm), dy = m->dtmp;
        gpt_linear_backward(pool, m->dbig1, g->fcprojw, g->fcprojb, dy, fchg, w->fcprojw, N, F, C, ow);
        nn_gelu_backward(pool, m->dbig2, fch, m->dbig1, (size_t)N * F);
        gpt_linear_backward(pool, m->dtmp, g->fcw, g->fcb, m->dbig2, ln2, w->fcw, N, C, F, ow);
        nn_layernorm_backward(pool, m->dtmp2, g->ln2w, g->ln2b, m->dtmp, res2, w->ln2w, ln2m, ln2r,
                              N, C);
        nn_residual_forward(m->dres, m->dres, m->dtmp2, nC); /* now d(res2) */

        /* attention branch */
        dy = m->dres;
        nn_dropout_spec dh = gpt_drop(m, pass, l, SITE_ATTN_OUT, c->hidden_dropout, T);
        if (dh.p > 0) nn_dropout_backward(m->dtmp, m->dres, B, T, C, &dh), dy = m->dtmp;
        gpt_linear_backward(pool, m->dtmp2, g->attprojw, g->attprojb, dy, atty, w->attprojw, N, C, C, ow);
        nn_dropout_spec da = gpt_drop(m, pass, l, SITE_ATTN_PROBS, c->attention_dropout, T);
        nn_attention_backward(pool, m->dbig1, m->datt, m->dtmp2, qkv, att, B, T, NH, HS,
                              da.p > 0 ? &da : NULL);
        gpt_linear_backward(pool, m->dtmp, g->qkvw, g->qkvb, m->dbig1, ln1, w->qkvw, N, C, 3 * C, ow);
        nn_layernorm_backward(pool, m->dtmp2, g->ln1w, g->ln1b, m->dtmp, x, w->ln1w, ln1m, ln1r,
                              N, C);
        nn_residual_forward(m->dres, m->dres, m->dtmp2, nC); /* now d(layer input) */
    }
    if (m->has_embedding) {
        const float *dy = m->dres;
        nn_dropout_spec d = gpt_drop(m, pass, -1, SITE_EMBED, c->hidden_dropout, T);
        if (d.p > 0) nn_dropout_backward(m->dtmp, m->dres, B, T, C, &d), dy = m->dtmp;
        nn_token_embedding_backward(m->dwte, dy, tokens, 0, Vp, N, C);
        nn_position_embedding_backward(m->dwpe, dy, NULL, B, T, C);
    }
}
