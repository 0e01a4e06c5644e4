/* tests/parity/parity_harness.h - what test_parity.c and
 * test_parity_distopt.c share: the tiny model both train (2 layers by
 * default, g_layers for deeper pipeline cases), K in-process steps on shm
 * rank-threads with the per-step loss and grad norm and every parameter
 * gathered to the serial layout, the key-bias elements left out of the
 * parameter comparison, and the comparison itself with its tolerances.
 *
 * Tolerance (fp32; layouts only reorder sums): loss and grad norm within
 * 2e-5 relative; parameters |p - p_serial| <= 1e-5 * |p_serial| + 2e-5
 * after K = 4 AdamW steps at lr 1e-2. AdamW's update is scale-free, so a
 * relative error e in an element's gradient moves it by up to about
 * K * lr * e: the absolute term allows e = 5e-4, which the elements whose
 * gradient is a sum that nearly cancels reach in fp32 (measured: up to
 * 1e-5, e.g. h.0.mlp.c_fc.weight[34]); a wrong gradient (e ~ 1) moves
 * parameters by ~K * lr = 4e-2, 2000 times more. Excluded from the parameter
 * comparison: the key bias (rows [C, 2C) of every c_attn.bias), whose
 * gradient is exactly 0 in exact arithmetic (softmax ignores a constant
 * added to every key), so fp32 leaves rounding noise there that AdamW
 * normalizes into lr-sized steps of arbitrary sign in any two orders of
 * summation; it still counts in the compared grad norm.
 * A header of static functions, included once per test program. */
#ifndef MTC_TESTS_PARITY_HARNESS_H
#define MTC_TESTS_PARITY_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "data/data.h"
#include "model/model.h"
#include "test.h"
#include "train/train.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PARITY_SANITIZED 1
#else
#define PARITY_SANITIZED 0
#endif

enum { K = 4, V = 64, SEQ = 16, MBS = 2, GBS = 8 };

static data_source *g_src;
static size_t g_nparams;
static unsigned char *g_skip; /* [g_nparams]: key-bias elements */
static int g_layers = 2;

/* The run every layout is compared with, before its layout fields. */
static void base_config(mtc_train_config *c, float dropout, double *losses, double *norms,
                        float *params) {
    memset(c, 0, sizeof *c);
    mtc_grid_config_default(&c->grid);
    mtc_model_config *m = &c->model;
    m->num_layers = g_layers, m->hidden_size = 32, m->num_heads = 4, m->ffn_hidden_size = 128;
    m->seq_length = SEQ, m->max_position_embeddings = SEQ;
    m->vocab_size = 60, m->padded_vocab_size = V; /* the softmax covers the padding too */
    m->hidden_dropout = m->attention_dropout = dropout;
    m->init_std = 0.02f;
    c->micro_batch = MBS, c->global_batch = GBS, c->train_iters = K;
    c->lr = (mtc_lr_schedule){
        .lr = 1e-2, .min_lr = 0, .warmup_iters = 0, .decay_iters = K, .style = MTC_LR_CONSTANT};
    c->adam = (mtc_adamw_config){.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    c->clip_grad = 1.0f;
    c->seed = 1234;
    c->log_interval = 1000, c->eval_interval = 1000, c->eval_iters = 0;
    c->threads = 1;
    c->quiet = 1;
    c->losses_out = losses, c->grad_norms_out = norms, c->params_out = params;
}

/* The mock tokens every run reads. */
static void parity_open_data(void) {
    data_source_opts o = {
        .mock = 1, .vocab_size = 60, .seq_length = SEQ, .seed = 7, .split = "100,0,0"};
    T_CHECK(data_source_open(&o, &g_src) == MTC_OK);
}

typedef struct {
    double loss[K], norm[K];
    float *params;
} result;

/* Train c in-process on shm rank-threads, its log thrown away. */
static mtc_result_t parity_train(mtc_train_config *c) {
    c->backend = MTC_BACKEND_SHM;
    FILE *devnull = fopen("/dev/null", "w");
    mtc_result_t rc = mtc_train_run(c, g_src, devnull);
    if (devnull) fclose(devnull);
    return rc;
}

/* g_layers = layers; g_nparams and g_skip (the key-bias elements) of the
 * serial model with that many layers. */
static void parity_set_layers(int layers) {
    g_layers = layers;
    mtc_train_config c;
    base_config(&c, 0, NULL, NULL, NULL);
    mtc_model *sm;
    T_CHECK(mtc_model_init(&c.model, 1, 1, NULL, &sm) == MTC_OK);
    g_nparams = sm->reg.global_total;
    free(g_skip);
    g_skip = calloc(g_nparams, 1);
    for (int l = 0; l < layers; l++) {
        char n[64];
        snprintf(n, sizeof n, "transformer.h.%d.attn.c_attn.bias", l);
        int i = mtc_registry_find(&sm->reg, n);
        T_CHECK(i >= 0);
        memset(g_skip + sm->reg.params[i].global_offset + c.model.hidden_size, 1,
               (size_t)c.model.hidden_size);
    }
    mtc_model_free(sm);
}

/* Run a against the serial run s with the tolerances above; prints one line. */
static int compare(const char *name, const result *a, const result *s) {
    double worst_loss = 0, worst_norm = 0, worst_p = 0;
    size_t worst_i = 0;
    int ok = 1;
    for (int k = 0; k < K; k++) {
        double el = fabs(a->loss[k] - s->loss[k]) / fabs(s->loss[k]);
        double en = fabs(a->norm[k] - s->norm[k]) / fabs(s->norm[k]);
        if (el > worst_loss) worst_loss = el;
        if (en > worst_norm) worst_norm = en;
    }
    ok &= worst_loss <= 2e-5 && worst_norm <= 2e-5;
    for (size_t i = 0; i < g_nparams; i++) {
        if (g_skip[i]) continue;
        double d = fabs((double)a->params[i] - s->params[i]);
        double lim = 1e-5 * fabs(s->params[i]) + K * 1e-2 * 5e-4;
        if (d / lim > worst_p) worst_p = d / lim, worst_i = i;
    }
    ok &= worst_p <= 1.0;
    printf("%s %-34s loss rel %.1e, norm rel %.1e, params worst %.2f of tolerance (elem %zu)\n",
           ok ? "ok  " : "FAIL", name, worst_loss, worst_norm, worst_p, worst_i);
    return ok;
}

#endif
