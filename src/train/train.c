/* train/train.c - the serial training loop; see train.h. Relies on
 * model/gpt.h, model/checkpoint.h, optim/optim.h and data/data.h. Allocates
 * everything before the first iteration; the step loop only computes. */
#include "train/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/timer.h"
#include "model/checkpoint.h"

mtc_result_t mtc_train_validate(const mtc_train_config *c) {
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    MTC_CHECK(mtc_gpt_config_validate(&c->model));
    if (c->micro_batch < 1) return mtc_error(E, "micro-batch-size=%d must be >= 1", c->micro_batch);
    if (c->global_batch < 1) return mtc_error(E, "global-batch-size=%d must be >= 1", c->global_batch);
    if (c->global_batch % c->micro_batch)
        return mtc_error(E, "global-batch-size=%d is not divisible by micro-batch-size=%d x data-parallel size 1 (use a multiple of %d)",
                         c->global_batch, c->micro_batch, c->micro_batch);
    if (c->train_iters < 1) return mtc_error(E, "train-iters=%lld must be >= 1", (long long)c->train_iters);
    if (!(c->lr.lr >= 0)) return mtc_error(E, "lr=%g must be >= 0", c->lr.lr);
    if (!(c->lr.min_lr >= 0) || c->lr.min_lr > c->lr.lr)
        return mtc_error(E, "min-lr=%g must be in [0, lr=%g]", c->lr.min_lr, c->lr.lr);
    if (c->lr.warmup_iters < 0) return mtc_error(E, "lr-warmup-iters must be >= 0");
    if (c->lr.decay_iters < 1) return mtc_error(E, "lr-decay-iters must be >= 1");
    if (c->lr.style != MTC_LR_CONSTANT && c->lr.warmup_iters >= c->lr.decay_iters && c->lr.warmup_iters > 0)
        return mtc_error(E, "lr-warmup-iters=%lld must be smaller than lr-decay-iters=%lld",
                         (long long)c->lr.warmup_iters, (long long)c->lr.decay_iters);
    if (c->log_interval < 1) return mtc_error(E, "log-interval=%d must be >= 1", c->log_interval);
    if (c->eval_interval < 1) return mtc_error(E, "eval-interval=%d must be >= 1", c->eval_interval);
    if (c->eval_iters < 0) return mtc_error(E, "eval-iters=%d must be >= 0", c->eval_iters);
    if (!(c->adam.beta1 >= 0 && c->adam.beta1 < 1) || !(c->adam.beta2 >= 0 && c->adam.beta2 < 1))
        return mtc_error(E, "adam-beta1=%g and adam-beta2=%g must be in [0, 1)", c->adam.beta1, c->adam.beta2);
    if (!(c->adam.eps > 0)) return mtc_error(E, "adam-eps=%g must be > 0", c->adam.eps);
    if (!(c->adam.weight_decay >= 0)) return mtc_error(E, "weight-decay=%g must be >= 0", c->adam.weight_decay);
    if (c->threads < 0) return mtc_error(E, "threads=%d must be >= 1 (0 = all cores)", c->threads);
    return MTC_OK;
}

typedef struct {
    const mtc_train_config *cfg;
    const data_source *src;
    mtc_gpt *model;
    int *buf;              /* (T+1) one sample */
    int *tokens, *targets; /* (B, T) */
    uint64_t valid_consumed;
} train_ctx;

/* Fill tokens/targets of microbatch m of the global batch at `consumed`. */
static mtc_result_t train_load_batch(train_ctx *x, data_split split, uint64_t consumed, int m) {
    int B = x->cfg->micro_batch, T = x->cfg->model.seq_length;
    for (int j = 0; j < B; j++) {
        uint64_t idx = data_sample_index(consumed, m, 0, j, B, 1);
        MTC_CHECK(data_source_sample(x->src, split, idx, x->buf));
        memcpy(x->tokens + (size_t)j * T, x->buf, (size_t)T * sizeof(int));
        memcpy(x->targets + (size_t)j * T, x->buf + 1, (size_t)T * sizeof(int));
    }
    return MTC_OK;
}

/* Mean validation loss over eval_iters global batches (the validation
 * iterator continues from one evaluation to the next, as Megatron's). */
static mtc_result_t train_evaluate(train_ctx *x, double *loss) {
    const mtc_train_config *c = x->cfg;
    int B = c->micro_batch, T = c->model.seq_length, nmb = c->global_batch / B;
    mtc_gpt_pass pass = {0};
    double sum = 0;
    for (int it = 0; it < c->eval_iters; it++) {
        for (int m = 0; m < nmb; m++) {
            MTC_CHECK(train_load_batch(x, DATA_SPLIT_VALID, x->valid_consumed, m));
            sum += mtc_gpt_forward(x->model, 0, x->tokens, x->targets, B, T, &pass);
        }
        x->valid_consumed += (uint64_t)c->global_batch;
    }
    *loss = sum / ((double)c->eval_iters * c->global_batch * T);
    return MTC_OK;
}

static void train_print_eval(FILE *out, int64_t iteration, double loss) {
    char line[256];
    int n = snprintf(line, sizeof line,
                     " validation loss at iteration %lld | lm loss value: %.6E | lm loss PPL: %.6E | ",
                     (long long)iteration, loss, exp(loss < 700 ? loss : 700));
    char dashes[300];
    int k = n + 1 < (int)sizeof dashes - 1 ? n + 1 : (int)sizeof dashes - 1;
    memset(dashes, '-', (size_t)k);
    dashes[k] = 0;
    fprintf(out, "%s\n%s\n%s\n", dashes, line, dashes);
}

mtc_result_t mtc_train_run(const mtc_train_config *c, const data_source *src, FILE *out) {
    MTC_CHECK(mtc_train_validate(c));
    mtc_result_t rc = MTC_OK;
    nn_pool *pool = NULL;
    mtc_gpt *model = NULL;
    mtc_adamw opt;
    memset(&opt, 0, sizeof opt);
    FILE *metrics = NULL;
    train_ctx x = {.cfg = c, .src = src};
    int B = c->micro_batch, T = c->model.seq_length, nmb = c->global_batch / B;
    int threads = c->threads > 0 ? c->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1) threads = 1;

    if (data_source_split_size(src, DATA_SPLIT_TRAIN) == 0)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "the training split is empty (check --split and that the data holds more than seq-length+1 tokens)");
    MTC_CHECK_GOTO(nn_pool_create(threads, &pool), rc, done);
    MTC_CHECK_GOTO(mtc_gpt_init(&c->model, B, 1, pool, &model), rc, done);
    x.model = model;
    MTC_CHECK_GOTO(mtc_mem_alloc((size_t)(T + 1) * sizeof(int), (void **)&x.buf), rc, done);
    MTC_CHECK_GOTO(mtc_mem_alloc((size_t)B * T * sizeof(int), (void **)&x.tokens), rc, done);
    MTC_CHECK_GOTO(mtc_mem_alloc((size_t)B * T * sizeof(int), (void **)&x.targets), rc, done);
    MTC_CHECK_GOTO(mtc_adamw_init(&opt, &model->reg), rc, done);
    if (c->load_path) {
        mtc_ckpt_info info;
        MTC_CHECK_GOTO(mtc_ckpt_load(model, c->load_path, &info), rc, done);
    } else {
        mtc_gpt_init_params(model, c->seed);
    }
    if (c->metrics_path) {
        metrics = fopen(c->metrics_path, "w");
        if (!metrics) {
            rc = mtc_error(MTC_ERR_IO, "cannot write metrics file %s", c->metrics_path);
            goto done;
        }
    }
    int do_eval = c->eval_iters > 0 && data_source_split_size(src, DATA_SPLIT_VALID) > 0;
    if (!c->quiet) {
        fprintf(out, "using world size: 1, data-parallel size: 1, context-parallel size: 1, tensor-model-parallel size: 1, pipeline-model-parallel size: 1\n");
        fprintf(out, "> data: %s\n", data_source_describe(src));
        fprintf(out, " > number of parameters on (tensor, pipeline) model parallel rank (0, 0): %zu\n",
                model->reg.total);
        fprintf(out, "> model: %d layers, hidden %d, %d heads, ffn %d, seq %d, vocab %d (padded %d)\n",
                c->model.num_layers, c->model.hidden_size, c->model.num_heads,
                c->model.ffn_hidden_size, T, c->model.vocab_size, c->model.padded_vocab_size);
        fprintf(out, "> activation arena: %.1f MB; threads: %d\n",
                (double)mtc_gpt_activation_bytes(model) / 1048576.0, threads);
        fprintf(out, "> micro batch %d x %d microbatches = global batch %d; %lld iterations\n", B,
                nmb, c->global_batch, (long long)c->train_iters);
        if (c->eval_iters > 0 && !do_eval)
            fprintf(out, "> validation split is empty: no evaluation\n");
        fflush(out);
    }

    double flops = mtc_gpt_flops(&c->model, c->global_batch);
    float loss_scale = 1.0f / ((float)c->global_batch * (float)T);
    uint64_t consumed = 0;
    double sum_loss = 0, sum_ms = 0;
    int n_logged = 0, skipped = 0, nan_iters = 0;
    for (int64_t it = 1; it <= c->train_iters; it++) {
        uint64_t t0 = mtc_time_ns();
        double loss_sum = 0;
        for (int m = 0; m < nmb; m++) {
            MTC_CHECK_GOTO(train_load_batch(&x, DATA_SPLIT_TRAIN, consumed, m), rc, done);
            mtc_gpt_pass pass = {.train = 1, .seed = c->seed, .iteration = (uint64_t)it,
                                 .b0 = m * B, .loss_scale = loss_scale,
                                 .first_microbatch = m == 0};
            loss_sum += mtc_gpt_forward(model, 0, x.tokens, x.targets, B, T, &pass);
            mtc_gpt_backward(model, 0, x.tokens, x.targets, B, T, loss_scale, &pass);
        }
        /* (parallel issues: gradient reduction over the registry's groups here) */
        double loss = loss_sum / ((double)c->global_batch * T);
        double norm = mtc_grad_norm(&opt, pool, model->grads);
        if (isnan(loss)) nan_iters++;
        if (!isfinite(norm)) {
            skipped++;
        } else {
            float lr = (float)mtc_lr_at(&c->lr, opt.step);
            mtc_adamw_step(&opt, pool, model->params, model->grads, lr,
                           mtc_grad_clip_coeff(norm, c->clip_grad), &c->adam);
        }
        consumed += (uint64_t)c->global_batch;
        double ms = (double)(mtc_time_ns() - t0) * 1e-6;
        sum_loss += loss, sum_ms += ms, n_logged++;

        int log_now = it % c->log_interval == 0 || it == c->train_iters;
        int eval_now = do_eval && it % c->eval_interval == 0;
        double avg_ms = sum_ms / n_logged, avg_loss = sum_loss / n_logged;
        double lr_now = mtc_lr_at(&c->lr, opt.step);
        if (log_now) {
            char stamp[32];
            time_t now = time(NULL);
            struct tm tmv;
            strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", localtime_r(&now, &tmv));
            double tps = (double)c->global_batch * T / (avg_ms * 1e-3);
            fprintf(out,
                    " [%s] iteration %8lld/%8lld | consumed samples: %12llu | elapsed time per iteration (ms): %.1f | throughput per GPU (TFLOP/s/GPU): %.1f | tokens per second: %.1f | learning rate: %.6E | global batch size: %5d | lm loss: %.6E | loss scale: 1.0 | grad norm: %.3f | number of skipped iterations: %3d | number of nan iterations: %3d |\n",
                    stamp, (long long)it, (long long)c->train_iters, (unsigned long long)consumed,
                    avg_ms, flops / (avg_ms * 1e-3 * 1e12), tps, lr_now, c->global_batch, avg_loss,
                    norm, skipped, nan_iters);
            fflush(out);
        }
        double vloss = 0;
        if (eval_now) {
            MTC_CHECK_GOTO(train_evaluate(&x, &vloss), rc, done);
            train_print_eval(out, it, vloss);
            fflush(out);
        }
        if (metrics && (log_now || eval_now)) {
            fprintf(metrics, "{\"iteration\": %lld", (long long)it);
            if (log_now)
                fprintf(metrics,
                        ", \"lm_loss\": %.9g, \"grad_norm\": %.9g, \"lr\": %.9g, \"elapsed_ms\": %.3f, \"tokens_per_s\": %.1f",
                        avg_loss, norm, lr_now, avg_ms, (double)c->global_batch * T / (avg_ms * 1e-3));
            if (eval_now) fprintf(metrics, ", \"val_loss\": %.9g", vloss);
            fprintf(metrics, "}\n");
            fflush(metrics);
        }
        if (log_now) sum_loss = sum_ms = 0, n_logged = 0, skipped = 0, nan_iters = 0;
    }
    if (c->save_path) {
        MTC_CHECK_GOTO(mtc_ckpt_save(model, c->save_path, c->train_iters, c->tokenizer), rc, done);
        if (!c->quiet) fprintf(out, "> saved model to %s\n", c->save_path);
    }
done:
    if (metrics) fclose(metrics);
    free(x.buf);
    free(x.tokens);
    free(x.targets);
    mtc_adamw_free(&opt);
    mtc_gpt_free(model);
    nn_pool_free(pool);
    return rc;
}
