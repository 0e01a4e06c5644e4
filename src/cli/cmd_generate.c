/* cli/cmd_generate.c - `mtc generate`: sample text from a model saved by
 * `mtc train --save`. Autoregressive, one full forward of the last
 * seq-length tokens per new token (no KV cache: models here are small),
 * Hugging Face's sampling (repetition penalty, temperature, top-k, top-p,
 * stopping at the end-of-document token) with the counter-based generator
 * keyed by (--seed, step), so a seed always gives the same text: the
 * sampling is serial and the model's forward gives the same logits for
 * any --threads. The prompt is
 * encoded and the output decoded with the tokenizer stored with the model
 * (any of data/tokenizer.h); output is printed whole UTF-8 characters at a
 * time (a character split over several BPE or byte tokens appears when it
 * is complete). Models trained on token ids (no tokenizer stored) take
 * --prompt-ids and print ids. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/outfile.h"
#include "core/limits.h"
#include "core/rng.h"
#include "data/tokenizer.h"
#include "ckpt/checkpoint.h"
#include "ckpt/state.h"

/* Hugging Face's sampling knobs, applied in its order: repetition penalty
 * (a logits processor), then temperature, top-k and top-p (warpers). */
typedef struct {
    float temperature; /* 0: greedy (top-k and top-p then do nothing, as in HF) */
    int top_k;         /* 0: off */
    float top_p;       /* 1: off */
    float penalty;     /* 1: off */
} gen_sampling;

/* HF's RepetitionPenaltyLogitsProcessor: each token already in the context
 * (prompt and generated) has its logit divided by the penalty when positive
 * and multiplied by it when negative, once however often it occurs. */
static void repetition_penalty(float *logits, int V, const int *ids, size_t n, float penalty,
                               unsigned char *seen) {
    if (penalty == 1.0f) return;
    memset(seen, 0, (size_t)V);
    for (size_t k = 0; k < n; k++) {
        int id = ids[k];
        if (id < 0 || id >= V || seen[id]) continue;
        seen[id] = 1;
        logits[id] = logits[id] < 0 ? logits[id] * penalty : logits[id] / penalty;
    }
}

typedef struct {
    float p;
    int id;
} gen_cand;
static int by_prob_desc(const void *a, const void *b) {
    const gen_cand *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id; /* ties by id: the same order on every run */
}

/* Index drawn with u in [0, 1) from softmax(logits / temperature) restricted
 * to the top k, then to the smallest set of likeliest tokens whose
 * probability reaches top_p (HF's TopPLogitsWarper: a token is dropped when
 * the tokens likelier than it already hold top_p; at least one is kept).
 * The arithmetic does not depend on threads. */
static int sample_next(const float *logits, int V, const gen_sampling *g, float *probs,
                       gen_cand *order, float u) {
    if (g->temperature <= 0) { /* greedy */
        int best = 0;
        for (int i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        return best;
    }
    float cut = -INFINITY;
    if (g->top_k > 0 && g->top_k < V) { /* k-th largest logit */
        memcpy(probs, logits, (size_t)V * sizeof(float));
        for (int k = 0; k < g->top_k; k++) {
            int best = k;
            for (int i = k + 1; i < V; i++)
                if (probs[i] > probs[best]) best = i;
            float t = probs[k];
            probs[k] = probs[best], probs[best] = t;
        }
        cut = probs[g->top_k - 1];
    }
    float mx = -INFINITY;
    for (int i = 0; i < V; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int i = 0; i < V; i++) {
        probs[i] = logits[i] >= cut ? expf((logits[i] - mx) / g->temperature) : 0.0f;
        sum += probs[i];
    }
    if (g->top_p < 1.0f) {
        for (int i = 0; i < V; i++)
            order[i] = (gen_cand){probs[i], i};
        qsort(order, (size_t)V, sizeof *order, by_prob_desc);
        double above = 0, kept = 0;
        for (int r = 0; r < V; r++) {
            float p = order[r].p;
            if (r > 0 && above >= g->top_p * sum)
                probs[order[r].id] = 0;
            else
                kept += p;
            above += p;
        }
        sum = kept;
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
                             "separated by spaces or commas)",
                             s, V);
        MTC_CHECK(data_tok_ids_push(ids, (int)v));
        s = end;
    }
}

/* One generation's state, shared by cli_cmd_generate's steps. status: the
 * exit status of a usage error a step printed (2), else 0. */
typedef struct {
    data_tok *tok;
    int have_tok, T, V, Vp, eod, status;
    gen_sampling g;
    data_tok_ids pids;
    data_tok_text out;
    size_t printed, n_prompt;
    float *probs, *row;
    gen_cand *order;
    unsigned char *seen;
    mtc_outfile lf;
} gen_state;

static void gen_state_free(gen_state *g, mtc_model *m, nn_pool *pool) {
    if (g->lf.f) mtc_outfile_abort(&g->lf);
    mtc_model_free(m);
    nn_pool_free(pool);
    data_tok_free(g->tok);
    data_tok_ids_free(&g->pids);
    data_tok_text_free(&g->out);
    free(g->probs), free(g->row), free(g->order), free(g->seen);
}

/* A usage error of a step: printed, kept as the exit status. */
static mtc_result_t gen_usage(gen_state *g, const char *fmt, const char *detail) {
    g->status = cli_usage_error("generate", fmt, detail);
    return MTC_ERR_INVALID_ARGUMENT;
}

/* The prompt's ids into g->pids: --prompt-ids, the encoded --prompt, or
 * without either the eod (GPT-2's way), else a newline, else id 0. */
static mtc_result_t gen_prompt(gen_state *g, const char *prompt, const char *prompt_ids) {
    int V = g->V;
    if (prompt_ids) {
        mtc_result_t rc = parse_ids(prompt_ids, V, &g->pids);
        if (rc == MTC_ERR_INVALID_ARGUMENT) return gen_usage(g, "%s", mtc_error_detail());
        MTC_CHECK(rc);
    } else if (g->have_tok && prompt && prompt[0]) {
        size_t unknown = 0;
        if (data_tok_encode(g->tok, NULL, prompt, strlen(prompt), &g->pids, &unknown) != MTC_OK)
            return gen_usage(g, "--prompt: %s", mtc_error_detail());
        if (unknown)
            fprintf(stderr,
                    "mtc generate: warning: %zu prompt characters are not in the model's "
                    "vocabulary (read as id 0)\n",
                    unknown);
        for (size_t k = 0; k < g->pids.n; k++)
            if (g->pids.ids[k] >= V) {
                g->status = cli_usage_error("generate",
                                            "--prompt encodes to id %d, outside the model's "
                                            "vocabulary of %d",
                                            g->pids.ids[k], V);
                return MTC_ERR_INVALID_ARGUMENT;
            }
    }
    if (g->pids.n == 0) { /* no prompt: the eod (GPT-2's way), else a newline, else id 0 */
        int start = 0;
        if (g->eod >= 0) {
            start = g->eod;
        } else if (g->have_tok) {
            data_tok_ids nl = {0};
            if (data_tok_encode(g->tok, NULL, "\n", 1, &nl, NULL) == MTC_OK && nl.n == 1 &&
                nl.ids[0] < V)
                start = nl.ids[0];
            data_tok_ids_free(&nl);
        }
        MTC_CHECK(data_tok_ids_push(&g->pids, start));
    }
    g->n_prompt = g->pids.n;
    return MTC_OK;
}

/* The prompt on stdout: ids with --print-ids, the text as given, or the
 * given ids decoded when the model has a tokenizer. */
static mtc_result_t gen_echo_prompt(gen_state *g, const char *prompt, const char *prompt_ids,
                                    int print_ids) {
    if (print_ids || (prompt_ids && !g->have_tok)) {
        for (size_t k = 0; k < g->pids.n; k++)
            printf("%s%d", k ? " " : "", g->pids.ids[k]);
    } else if (prompt) { /* the prompt as given */
        fputs(prompt, stdout);
    } else if (prompt_ids) {
        MTC_CHECK(data_tok_decode(g->tok, g->pids.ids, g->pids.n, &g->out, NULL));
        fputs(g->out.s, stdout);
        data_tok_text_free(&g->out);
    }
    return MTC_OK;
}

typedef struct {
    int max_new;
    uint64_t seed;
    int ignore_eos, print_ids, ids_given;
} gen_run_opts;

/* Sample up to o->max_new tokens after the prompt, printing each as it
 * comes (whole characters only) and, with --output-logits, each step's
 * raw logits. */
static mtc_result_t gen_run(gen_state *g, mtc_model *m, const gen_run_opts *o) {
    int T = g->T, V = g->V, Vp = g->Vp;
    mtc_model_pass pass = {0};
    MTC_CHECK(data_tok_text_append(&g->out, "", 0));
    for (int step = 0; step < o->max_new; step++) {
        int n = (int)g->pids.n, t = n < T ? n : T;
        const int *ctx = g->pids.ids + (n - t);
        mtc_model_forward(m, 0, ctx, NULL, 1, t, &pass);
        memcpy(g->row, mtc_model_logits(m) + (size_t)(t - 1) * Vp, (size_t)V * sizeof(float));
        repetition_penalty(g->row, V, g->pids.ids, g->pids.n, g->g.penalty, g->seen);
        float u = mtc_rng_uniform(o->seed, 0x67656e, (uint64_t)step);
        if (g->lf.f) { /* the logits before the penalty: HF's output_logits */
            const float *raw = mtc_model_logits(m) + (size_t)(t - 1) * Vp;
            fprintf(g->lf.f, "{\"step\": %d, \"u\": %.9g, \"logits\": [", step, (double)u);
            for (int i = 0; i < V; i++)
                fprintf(g->lf.f, "%s%.9g", i ? ", " : "", (double)raw[i]);
        }
        int next = sample_next(g->row, V, &g->g, g->probs, g->order, u);
        if (g->lf.f) fprintf(g->lf.f, "], \"token\": %d}\n", next);
        MTC_CHECK(data_tok_ids_push(&g->pids, next));
        int stop = next == g->eod && !o->ignore_eos;
        if (o->print_ids || !g->have_tok) {
            printf("%s%d", o->print_ids || o->ids_given || step ? " " : "", next);
        } else if (!stop) { /* print what forms whole characters; the eod is not text */
            MTC_CHECK(data_tok_decode_continue(g->tok, &next, 1, &g->out, NULL));
            size_t upto = utf8_complete(g->out.s, g->out.n);
            if (upto > g->printed) fwrite(g->out.s + g->printed, 1, upto - g->printed, stdout);
            if (upto > g->printed) g->printed = upto;
        }
        fflush(stdout);
        if (stop) break;
    }
    if (g->have_tok && !o->print_ids && g->out.n > g->printed)
        fwrite(g->out.s + g->printed, 1, g->out.n - g->printed, stdout);
    putchar('\n');
    if (g->lf.f && mtc_outfile_commit(&g->lf) != MTC_OK)
        return gen_usage(g, "%s", mtc_error_detail());
    return MTC_OK;
}

int cli_cmd_generate(int argc, char **argv) {
    const char *load = NULL, *prompt = NULL, *prompt_ids = NULL, *logits_path = NULL;
    int max_new = 200, top_k = 0, threads = 1, ignore_eos = 0, print_ids = 0;
    double temperature = 1.0, top_p = 1.0, penalty = 1.0;
    int64_t seed = 1234, ckpt_step = -1;
    mtc_arg args[] = {
        {"load", NULL, MTC_ARG_STRING, &load, "PATH",
         "checkpoint directory written by mtc train --save or mtc import (required)", 0},
        {"ckpt-step", NULL, MTC_ARG_I64, &ckpt_step, "N",
         "load iteration N of the directory instead of its latest", 0},
        {"prompt", NULL, MTC_ARG_STRING, &prompt, "TEXT",
         "text to continue, encoded with the model's tokenizer", 0},
        {"prompt-ids", NULL, MTC_ARG_STRING, &prompt_ids, "IDS",
         "token ids to continue, separated by spaces or commas (any model; printed as text when "
         "the model "
         "has a tokenizer)",
         0},
        {"max-new-tokens", NULL, MTC_ARG_INT, &max_new, "N", "tokens to generate (default 200)", 0},
        {"ignore-eos", NULL, MTC_ARG_FLAG, &ignore_eos, NULL,
         "go on past the end-of-document token (default: stop there, as Hugging Face does)", 0},
        {"temperature", NULL, MTC_ARG_DOUBLE, &temperature, "X",
         "softmax temperature, 0 = greedy (default 1.0)", 0},
        {"top-k", NULL, MTC_ARG_INT, &top_k, "K",
         "sample among the K likeliest tokens, 0 = all (default 0)", 0},
        {"top-p", NULL, MTC_ARG_DOUBLE, &top_p, "P",
         "sample among the likeliest tokens holding probability P, 1 = all (default 1.0)", 0},
        {"repetition-penalty", NULL, MTC_ARG_DOUBLE, &penalty, "X",
         "Hugging Face's: a token already present has its logit divided by X when positive, "
         "multiplied when negative; 1 = off (default 1.0)",
         0},
        {"print-ids", NULL, MTC_ARG_FLAG, &print_ids, NULL,
         "print the token ids (prompt, then new ones) instead of text", 0},
        {"output-logits", NULL, MTC_ARG_STRING, &logits_path, "FILE",
         "write each step's raw logits (Hugging Face's output_logits), the uniform draw and the "
         "token as JSON lines",
         0},
        {"seed", NULL, MTC_ARG_I64, &seed, "N",
         "sampling seed; the same seed gives the same tokens whatever --threads (default 1234)", 0},
        {"threads", NULL, MTC_ARG_INT, &threads, "N", "threads (default 1)", 0},
    };
    int nargs = (int)(sizeof args / sizeof args[0]);
    int st = cli_parse("generate", "--load DIR [options]", "Sample text from a saved model.", args,
                       nargs, argc, argv);
    if (st >= 0) return st;
    if (!load)
        return cli_usage_error("generate",
                               "--load DIR is required (a checkpoint saved by mtc train --save)");
    if (max_new < 0 || max_new > (1 << 24))
        return cli_usage_error("generate", "max-new-tokens=%d is outside [0, %d]", max_new,
                               1 << 24);
    if (top_k < 0) return cli_usage_error("generate", "top-k=%d must be >= 0", top_k);
    if (!(top_p > 0 && top_p <= 1))
        return cli_usage_error("generate", "top-p=%g must be in (0, 1] (1 = off)", top_p);
    if (!(penalty > 0) || isinf(penalty))
        return cli_usage_error("generate", "repetition-penalty=%g must be > 0 (1 = off)", penalty);
    if (!(temperature >= 0))
        return cli_usage_error("generate", "temperature=%g must be >= 0", temperature);
    if (threads < 1 || threads > mtc_threads_max(1))
        return cli_usage_error("generate", "--threads %d must be 1..%d (%d x this machine's cores)",
                               threads, mtc_threads_max(1), MTC_THREADS_PER_CORE_MAX);
    if (prompt && prompt_ids)
        return cli_usage_error("generate", "give --prompt TEXT or --prompt-ids IDS, not both");
    if (seed < 0) /* cast to a huge unsigned seed otherwise; train refuses it too */
        return cli_usage_error("generate", "seed=%lld must be >= 0", (long long)seed);
    struct stat lst;
    int load_dir = stat(load, &lst) == 0 && S_ISDIR(lst.st_mode);
    if (mtc_args_seen(args, nargs, "ckpt-step") && (ckpt_step < 0 || !load_dir))
        return cli_usage_error("generate",
                               "ckpt-step=%lld needs a checkpoint directory as --load and must be "
                               ">= 0",
                               (long long)ckpt_step);
    if (prompt_ids && !prompt_ids[strspn(prompt_ids, " \t\n,")])
        return cli_usage_error("generate",
                               "--prompt-ids \"%s\" holds no token id (give ids separated by "
                               "spaces, e.g. --prompt-ids \"464 3290\")",
                               prompt_ids);

    mtc_ckpt_info info;
    if ((load_dir ? mtc_ckpt_dist_read_info_at(load, ckpt_step, &info)
                  : mtc_ckpt_read_info(load, &info)) != MTC_OK)
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

    gen_state g = {.tok = tok, .have_tok = have_tok};
    if (logits_path && mtc_outfile_open(&g.lf, logits_path, "--output-logits") != MTC_OK) {
        data_tok_free(tok);
        return cli_usage_error("generate", "%s", mtc_error_detail());
    }
    g.T = info.cfg.seq_length, g.V = info.cfg.vocab_size, g.Vp = info.cfg.padded_vocab_size;
    g.eod = tok && data_tok_eod(tok) < g.V ? data_tok_eod(tok) : -1;
    g.g = (gen_sampling){(float)temperature, top_k, (float)top_p, (float)penalty};
    g.probs = malloc((size_t)g.Vp * sizeof(float)), g.row = malloc((size_t)g.Vp * sizeof(float));
    g.order = malloc((size_t)g.Vp * sizeof *g.order);
    g.seen = malloc((size_t)g.Vp);
    nn_pool *pool = NULL;
    mtc_model *m = NULL;
    mtc_result_t rc = MTC_OK;
    if (!g.probs || !g.row || !g.order || !g.seen) {
        rc = MTC_ERR_OUT_OF_MEMORY;
        goto fail;
    }
    if ((rc = gen_prompt(&g, prompt, prompt_ids)) != MTC_OK) goto end;

    info.cfg.hidden_dropout = info.cfg.attention_dropout = 0;
    info.cfg.init_std = 0.02f;
    MTC_CHECK_GOTO(nn_pool_create_opts(threads, cli_pool_opts(), &pool), rc, fail);
    MTC_CHECK_GOTO(mtc_model_init(&info.cfg, 1, 1, pool, &m), rc, fail);
    MTC_CHECK_GOTO(load_dir ? mtc_ckpt_dist_load_model_at(m, load, ckpt_step)
                            : mtc_ckpt_load(m, load, &info),
                   rc, fail);
    MTC_CHECK_GOTO(gen_echo_prompt(&g, prompt, prompt_ids, print_ids), rc, fail);
    gen_run_opts ro = {max_new, (uint64_t)seed, ignore_eos, print_ids, prompt_ids != NULL};
    if ((rc = gen_run(&g, m, &ro)) != MTC_OK) goto end;
    if (g.pids.n > g.n_prompt && g.pids.ids[g.pids.n - 1] == g.eod && g.eod >= 0 && !ignore_eos)
        fprintf(stderr,
                "mtc generate: stopped at the end-of-document token %d after %zu new "
                "tokens (--ignore-eos to go on)\n",
                g.eod, g.pids.n - g.n_prompt);
end:
    if (rc == MTC_OK || g.status) {
        gen_state_free(&g, m, pool);
        return g.status;
    }
fail:
    gen_state_free(&g, m, pool);
    if (rc == MTC_ERR_FORMAT) return cli_usage_error("generate", "%s", mtc_error_detail());
    return cli_fail("generate", rc);
}
