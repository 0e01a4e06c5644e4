/* cli/cmd_generate.c - `mtc generate`: sample text from a model saved by
 * `mtc train --save`. Autoregressive, one full forward of the last
 * seq-length tokens per new token (no KV cache: models here are small),
 * temperature and top-k sampling with the counter-based generator keyed by
 * (--seed, step), so a seed always gives the same text. The prompt is
 * encoded and the output decoded with the tokenizer stored with the model
 * (any of data/tokenizer.h); output is printed whole UTF-8 characters at a
 * time (a character split over several BPE or byte tokens appears when it
 * is complete). Models trained on token ids (no tokenizer stored) take
 * --prompt-ids and print ids. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/limits.h"
#include "core/rng.h"
#include "data/tokenizer.h"
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

/* Length of the prefix of s[0..n) that ends on a UTF-8 character boundary:
 * a trailing lead byte whose continuation bytes have not all arrived is held
 * back (invalid bytes are not held: they will never complete). */
static size_t utf8_complete(const char *s, size_t n) {
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = (unsigned char)s[n - back];
        if ((c & 0xc0) == 0x80) continue; /* continuation: look further back */
        size_t need = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 1;
        if (c >= 0xf5) need = 1;
        return need > back ? n - back : n;
    }
    return n;
}

/* Ids in [0, V) separated by white space or commas, appended to ids.
 * MTC_ERR_INVALID_ARGUMENT (message set) on a word that is not one. */
static mtc_result_t parse_ids(const char *s, int V, data_tok_ids *ids) {
    char *end;
    for (;;) {
        while (*s == ' ' || *s == '\t' || *s == '\n' || *s == ',')
            s++;
        if (!*s) return MTC_OK;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v >= V || (*end && !strchr(" \t\n,", *end)))
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "prompt-ids: \"%.20s\" is not a token id in [0, %d) (give ids "
                             "separated by spaces)",
                             s, V);
        MTC_CHECK(data_tok_ids_push(ids, (int)v));
        s = end;
    }
}

int cli_cmd_generate(int argc, char **argv) {
    const char *load = NULL, *prompt = NULL, *prompt_ids = NULL;
    int max_new = 200, top_k = 0, threads = 1;
    double temperature = 1.0;
    int64_t seed = 1234;
    mtc_arg args[] = {
        {"load", NULL, MTC_ARG_STRING, &load, "FILE",
         "model written by mtc train --save (required)", 0},
        {"prompt", NULL, MTC_ARG_STRING, &prompt, "TEXT",
         "text to continue, encoded with the model's tokenizer", 0},
        {"prompt-ids", NULL, MTC_ARG_STRING, &prompt_ids, "IDS",
         "token ids to continue, separated by spaces (any model; printed as text when the model "
         "has a tokenizer)",
         0},
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
    if (threads < 1 || threads > mtc_threads_max(1))
        return cli_usage_error("generate", "--threads %d must be 1..%d (%d x this machine's cores)",
                               threads, mtc_threads_max(1), MTC_THREADS_PER_CORE_MAX);
    if (prompt && prompt_ids)
        return cli_usage_error("generate", "give --prompt TEXT or --prompt-ids IDS, not both");
    if (prompt_ids && !prompt_ids[strspn(prompt_ids, " \t\n,")])
        return cli_usage_error("generate",
                               "--prompt-ids \"%s\" holds no token id (give ids separated by "
                               "spaces, e.g. --prompt-ids \"464 3290\")",
                               prompt_ids);

    mtc_ckpt_info info;
    if (mtc_ckpt_read_info(load, &info) != MTC_OK)
        return cli_usage_error("generate", "%s", mtc_error_detail());
    data_tok *tok = NULL;
    int have_tok = strcmp(info.tokenizer, "none") != 0;
    if (have_tok && data_tok_deserialize(info.tokenizer, &tok) != MTC_OK)
        return cli_usage_error("generate", "%s: its tokenizer: %s", load, mtc_error_detail());
    if (!have_tok && prompt && prompt[0])
        return cli_usage_error("generate",
                               "%s was trained on token ids and has no tokenizer, so --prompt "
                               "text cannot be encoded: give --prompt-ids \"ID ID ...\"",
                               load);

    int T = info.cfg.seq_length, V = info.cfg.vocab_size;
    data_tok_ids pids = {0};
    data_tok_text out = {0};
    size_t printed = 0;
    float *probs = malloc((size_t)info.cfg.padded_vocab_size * sizeof(float));
    nn_pool *pool = NULL;
    mtc_model *m = NULL;
    mtc_result_t rc = MTC_OK;
    int status = 0;
    if (!probs) {
        rc = MTC_ERR_OUT_OF_MEMORY;
        goto fail;
    }
    if (prompt_ids) {
        rc = parse_ids(prompt_ids, V, &pids);
        if (rc == MTC_ERR_INVALID_ARGUMENT) {
            status = cli_usage_error("generate", "%s", mtc_error_detail());
            goto done;
        }
        MTC_CHECK_GOTO(rc, rc, fail);
    } else if (have_tok && prompt && prompt[0]) {
        size_t unknown = 0;
        if (data_tok_encode(tok, NULL, prompt, strlen(prompt), &pids, &unknown) != MTC_OK) {
            status = cli_usage_error("generate", "--prompt: %s", mtc_error_detail());
            goto done;
        }
        if (unknown)
            fprintf(stderr,
                    "mtc generate: warning: %zu prompt characters are not in the model's "
                    "vocabulary (read as id 0)\n",
                    unknown);
        for (size_t k = 0; k < pids.n; k++)
            if (pids.ids[k] >= V) {
                status = cli_usage_error("generate",
                                         "--prompt encodes to id %d, outside the model's "
                                         "vocabulary of %d",
                                         pids.ids[k], V);
                goto done;
            }
    }
    if (pids.n == 0) { /* no prompt: the eod (GPT-2's way), else a newline, else id 0 */
        int start = 0;
        if (have_tok && data_tok_eod(tok) >= 0 && data_tok_eod(tok) < V) {
            start = data_tok_eod(tok);
        } else if (have_tok) {
            data_tok_ids nl = {0};
            if (data_tok_encode(tok, NULL, "\n", 1, &nl, NULL) == MTC_OK && nl.n == 1 &&
                nl.ids[0] < V)
                start = nl.ids[0];
            data_tok_ids_free(&nl);
        }
        MTC_CHECK_GOTO(data_tok_ids_push(&pids, start), rc, fail);
    }

    info.cfg.hidden_dropout = info.cfg.attention_dropout = 0;
    info.cfg.init_std = 0.02f;
    MTC_CHECK_GOTO(nn_pool_create(threads, &pool), rc, fail);
    MTC_CHECK_GOTO(mtc_model_init(&info.cfg, 1, 1, pool, &m), rc, fail);
    MTC_CHECK_GOTO(mtc_ckpt_load(m, load, &info), rc, fail);

    if (prompt) { /* the prompt as given */
        fputs(prompt, stdout);
    } else if (prompt_ids && have_tok) {
        MTC_CHECK_GOTO(data_tok_decode(tok, pids.ids, pids.n, &out, NULL), rc, fail);
        fputs(out.s, stdout);
        data_tok_text_free(&out);
    } else if (prompt_ids) {
        for (size_t k = 0; k < pids.n; k++)
            printf("%s%d", k ? " " : "", pids.ids[k]);
    }
    mtc_model_pass pass = {0};
    int Vp = info.cfg.padded_vocab_size;
    MTC_CHECK_GOTO(data_tok_text_append(&out, "", 0), rc, fail);
    for (int step = 0; step < max_new; step++) {
        int n = (int)pids.n, t = n < T ? n : T;
        const int *ctx = pids.ids + (n - t);
        mtc_model_forward(m, 0, ctx, NULL, 1, t, &pass);
        const float *row = mtc_model_logits(m) + (size_t)(t - 1) * Vp;
        float u = mtc_rng_uniform((uint64_t)seed, 0x67656e, (uint64_t)step);
        int next = sample_next(row, V, (float)temperature, top_k, probs, u);
        MTC_CHECK_GOTO(data_tok_ids_push(&pids, next), rc, fail);
        if (have_tok) { /* print what forms whole characters */
            MTC_CHECK_GOTO(data_tok_decode(tok, &next, 1, &out, NULL), rc, fail);
            size_t upto = utf8_complete(out.s, out.n);
            if (upto > printed) fwrite(out.s + printed, 1, upto - printed, stdout);
            if (upto > printed) printed = upto;
        } else {
            printf("%s%d", step || prompt_ids ? " " : "", next);
        }
        fflush(stdout);
    }
    if (have_tok && out.n > printed) fwrite(out.s + printed, 1, out.n - printed, stdout);
    putchar('\n');
done:
    mtc_model_free(m);
    nn_pool_free(pool);
    data_tok_free(tok);
    data_tok_ids_free(&pids);
    data_tok_text_free(&out);
    free(probs);
    return status;
fail:
    mtc_model_free(m);
    nn_pool_free(pool);
    data_tok_free(tok);
    data_tok_ids_free(&pids);
    data_tok_text_free(&out);
    free(probs);
    if (rc == MTC_ERR_FORMAT) return cli_usage_error("generate", "%s", mtc_error_detail());
    return cli_fail("generate", rc);
}
