/* cli/cmd_generate.c - `mtc generate`: sample text from a model saved by
 * `mtc train --save`. Autoregressive, one full forward of the last
 * seq-length tokens per new token (no KV cache: models here are small),
 * temperature and top-k sampling with the counter-based generator keyed by
 * (--seed, step), so a seed always gives the same text. Models trained on
 * token ids (no tokenizer stored) read and print ids. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/rng.h"
#include "data/data.h"
#include "ckpt/checkpoint.h"

/* Index drawn from softmax(logits / temperature) restricted to the top k. */
static int sample_next(const float *logits, int V, float temperature, int top_k, float *probs,
                       float u) {
    if (temperature <= 0) { /* greedy */
        int best = 0;
        for (int i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        return best;
    }
    float cut = -INFINITY;
    if (top_k > 0 && top_k < V) { /* k-th largest logit */
        memcpy(probs, logits, (size_t)V * sizeof(float));
        for (int k = 0; k < top_k; k++) {
            int best = k;
            for (int i = k + 1; i < V; i++)
                if (probs[i] > probs[best]) best = i;
            float t = probs[k];
            probs[k] = probs[best], probs[best] = t;
        }
        cut = probs[top_k - 1];
    }
    float mx = -INFINITY;
    for (int i = 0; i < V; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int i = 0; i < V; i++) {
        probs[i] = logits[i] >= cut ? expf((logits[i] - mx) / temperature) : 0.0f;
        sum += probs[i];
    }
    double r = u * sum, acc = 0;
    int last = 0;
    for (int i = 0; i < V; i++) {
        if (probs[i] == 0) continue;
        acc += probs[i], last = i;
        if (r < acc) return i;
    }
    return last;
}

int cli_cmd_generate(int argc, char **argv) {
    const char *load = NULL, *prompt = "";
    int max_new = 200, top_k = 0, threads = 1;
    double temperature = 1.0;
    int64_t seed = 1234;
    mtc_arg args[] = {
        {"load", NULL, MTC_ARG_STRING, &load, "FILE",
         "model written by mtc train --save (required)", 0},
        {"prompt", NULL, MTC_ARG_STRING, &prompt, "TEXT",
         "text to continue (token ids for id models)", 0},
        {"max-new-tokens", NULL, MTC_ARG_INT, &max_new, "N", "tokens to generate (default 200)", 0},
        {"temperature", NULL, MTC_ARG_DOUBLE, &temperature, "X",
         "softmax temperature, 0 = greedy (default 1.0)", 0},
        {"top-k", NULL, MTC_ARG_INT, &top_k, "K",
         "sample among the K likeliest tokens, 0 = all (default 0)", 0},
        {"seed", NULL, MTC_ARG_I64, &seed, "N", "sampling seed (default 1234)", 0},
        {"threads", NULL, MTC_ARG_INT, &threads, "N", "threads (default 1)", 0},
    };
    int nargs = (int)(sizeof args / sizeof args[0]);
    int st = cli_parse("generate", "--load FILE [options]", "Sample text from a saved model.", args,
                       nargs, argc, argv);
    if (st >= 0) return st;
    if (!load)
        return cli_usage_error("generate",
                               "--load FILE is required (a model saved by mtc train --save)");
    if (max_new < 0 || max_new > (1 << 24))
        return cli_usage_error("generate", "max-new-tokens=%d is outside [0, %d]", max_new,
                               1 << 24);
    if (top_k < 0) return cli_usage_error("generate", "top-k=%d must be >= 0", top_k);
    if (!(temperature >= 0))
        return cli_usage_error("generate", "temperature=%g must be >= 0", temperature);
    if (threads < 1) return cli_usage_error("generate", "threads=%d must be >= 1", threads);

    mtc_ckpt_info info;
    if (mtc_ckpt_read_info(load, &info) != MTC_OK)
        return cli_usage_error("generate", "%s", mtc_error_detail());
    data_tokenizer tok;
    int have_tok = strcmp(info.tokenizer, "none") != 0;
    if (have_tok && data_tokenizer_deserialize(&tok, info.tokenizer) != MTC_OK)
        return cli_usage_error("generate", "%s: %s", load, mtc_error_detail());

    int T = info.cfg.seq_length, V = info.cfg.vocab_size;
    size_t plen = strlen(prompt);
    int cap = (int)plen + max_new + 1;
    int *ids = malloc((size_t)cap * sizeof(int));
    float *probs = malloc((size_t)info.cfg.padded_vocab_size * sizeof(float));
    int n = 0;
    if (have_tok) {
        size_t unknown = data_tokenizer_encode(&tok, (const unsigned char *)prompt, plen, ids);
        n = (int)plen;
        if (unknown)
            fprintf(stderr,
                    "mtc generate: warning: %zu prompt characters are not in the model's "
                    "vocabulary (read as id 0)\n",
                    unknown);
    } else {
        char *end, *s = (char *)prompt;
        for (long v = strtol(s, &end, 10); end != s; v = strtol(s, &end, 10)) {
            if (v < 0 || v >= V) {
                free(ids), free(probs);
                return cli_usage_error("generate",
                                       "prompt token %ld is outside the vocabulary [0, %d)", v, V);
            }
            ids[n++] = (int)v, s = end;
        }
    }
    if (n == 0) { /* start from a newline when the vocabulary has one, else id 0 */
        ids[0] = have_tok && tok.id_of['\n'] >= 0 ? tok.id_of['\n'] : 0;
        n = 1;
    }

    info.cfg.hidden_dropout = info.cfg.attention_dropout = 0;
    info.cfg.init_std = 0.02f;
    nn_pool *pool = NULL;
    mtc_model *m = NULL;
    mtc_result_t rc;
    MTC_CHECK_GOTO(nn_pool_create(threads, &pool), rc, fail);
    MTC_CHECK_GOTO(mtc_model_init(&info.cfg, 1, 1, pool, &m), rc, fail);
    MTC_CHECK_GOTO(mtc_ckpt_load(m, load, &info), rc, fail);

    fputs(prompt, stdout);
    mtc_model_pass pass = {0};
    int Vp = info.cfg.padded_vocab_size;
    for (int step = 0; step < max_new; step++) {
        int t = n < T ? n : T;
        const int *ctx = ids + (n - t);
        mtc_model_forward(m, 0, ctx, NULL, 1, t, &pass);
        const float *row = mtc_model_logits(m) + (size_t)(t - 1) * Vp;
        float u = mtc_rng_uniform((uint64_t)seed, 0x67656e, (uint64_t)step);
        int next = sample_next(row, V, (float)temperature, top_k, probs, u);
        ids[n++] = next;
        if (have_tok) {
            char c[4];
            data_tokenizer_decode(&tok, &next, 1, c, sizeof c);
            fputs(c, stdout);
        } else {
            printf("%s%d", step || prompt[0] ? " " : "", next);
        }
        fflush(stdout);
    }
    putchar('\n');
    mtc_model_free(m);
    nn_pool_free(pool);
    free(ids), free(probs);
    return 0;
fail:
    mtc_model_free(m);
    nn_pool_free(pool);
    free(ids), free(probs);
    if (rc == MTC_ERR_FORMAT) return cli_usage_error("generate", "%s", mtc_error_detail());
    return cli_fail("generate", rc);
}
