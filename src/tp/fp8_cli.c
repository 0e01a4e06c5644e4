/* tp/fp8_cli.c - the fp8 flags' checks (Megatron's where it has them);
 * see fp8_cli.h. */
#include "tp/fp8_cli.h"

#include <string.h>

static const char *OTHERS[] = {"fp8-recipe",
                               "fp8-margin",
                               "fp8-amax-history-len",
                               "fp8-amax-compute-algo",
                               "fp8-param-gather",
                               "fp8-wgrad",
                               "tp-only-amax-red",
                               "first-last-layers-bf16",
                               "num-layers-at-start-in-bf16",
                               "num-layers-at-end-in-bf16"};

mtc_result_t tp_fp8_cli_resolve(const tp_fp8_cli *f, const mtc_arg *args, int nargs, int bf16,
                                int distributed_optimizer, int num_layers, int pp,
                                tp_fp8_config *out) {
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    if (!f->format) {
        for (size_t i = 0; i < sizeof OTHERS / sizeof OTHERS[0]; i++)
            if (mtc_args_seen(args, nargs, OTHERS[i]))
                return mtc_error(E, "--%s needs --fp8-format e4m3|hybrid (add it or drop the flag)",
                                 OTHERS[i]);
        return MTC_OK;
    }
    if (strcmp(f->format, "e4m3") && strcmp(f->format, "hybrid"))
        return mtc_error(E, "--fp8-format %s is not e4m3 or hybrid", f->format);
    int recipe = tp_fp8_recipe_parse(f->recipe);
    if (recipe < 0)
        return mtc_error(E,
                         "--fp8-recipe %s is not delayed, tensorwise, mxfp8 or blockwise (custom "
                         "needs a Python quantizer factory)",
                         f->recipe);
    if (strcmp(f->algo, "max") && strcmp(f->algo, "most_recent"))
        return mtc_error(E, "--fp8-amax-compute-algo %s is not max or most_recent", f->algo);
    if (f->history < 1 || f->history > (1 << 20))
        return mtc_error(E, "fp8-amax-history-len=%d must be in [1, 1048576]", f->history);
    if (f->margin < -64 || f->margin > 64)
        return mtc_error(E, "fp8-margin=%d must be in [-64, 64]", f->margin);
    if (f->interval != 1)
        return mtc_error(E,
                         "fp8-interval=%d: only 1 (Megatron deprecated the flag; TE updates "
                         "every step)",
                         f->interval);
    if (!bf16)
        return mtc_error(E,
                         "--fp8-format %s needs --bf16 (the emulation runs on the bf16 model: the "
                         "tensors outside the fp8 GEMMs are bf16, as in Megatron's fp8 examples)",
                         f->format);
    if (f->param_gather && !distributed_optimizer)
        return mtc_error(E, "--fp8-param-gather needs --use-distributed-optimizer (Megatron: only "
                            "supported with distributed optimizer)");
    int ns = f->first_last ? f->n_start : 0, ne = f->first_last ? f->n_end : 0;
    int per_stage = num_layers / (pp > 0 ? pp : 1);
    if (f->first_last && recipe == TP_FP8_DELAYED) /* transformer_config.py's rule */
        return mtc_error(E, "--first-last-layers-bf16 does not work with --fp8-recipe delayed "
                            "(Megatron: delayed scaling does not support first / last layer in "
                            "BF16): choose tensorwise, mxfp8 or blockwise");
    if (ns < 0 || ns > per_stage || ne < 0 || ne > per_stage)
        return mtc_error(E,
                         "num-layers-at-start-in-bf16=%d and num-layers-at-end-in-bf16=%d must be "
                         "between 0 and the layers per pipeline stage (%d)",
                         ns, ne, per_stage);
    out->enabled = 1;
    out->hybrid = !strcmp(f->format, "hybrid");
    out->recipe = (tp_fp8_recipe)recipe;
    out->margin = f->margin;
    out->amax_history_len = f->history;
    out->amax_max = !strcmp(f->algo, "max");
    out->wgrad = f->wgrad;
    out->tp_only_amax_red = f->tp_only;
    out->bf16_start = ns, out->bf16_end = ne;
    out->param_gather = f->param_gather;
    return MTC_OK;
}

mtc_result_t tp_fp8_check_blocks(const tp_fp8_config *c, const tp_fp8_dims *d, int tp, int cp) {
    if (!c || !c->enabled || (c->recipe != TP_FP8_MXFP8 && c->recipe != TP_FP8_BLOCKWISE))
        return MTC_OK;
    int b = c->recipe == TP_FP8_MXFP8 ? 32 : 128;
    const char *r = tp_fp8_recipe_name(c->recipe);
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    if (tp > 1) {
        const struct {
            int n;
            const char *what, *flag;
        } dims[] = {{d->q, "the qkv weight's query rows per rank (heads x head size / tp)",
                     "--num-attention-heads x --kv-channels"},
                    {d->kv, "the qkv weight's key/value rows per rank (groups x head size / tp)",
                     "--num-query-groups x --kv-channels"},
                    {d->q, "the proj weight's columns per rank (heads x head size / tp)",
                     "--num-attention-heads x --kv-channels"},
                    {d->ffn, "the fc1 weight's rows per rank (ffn / tp)", "--ffn-hidden-size"},
                    {d->ffn, "the fc2 weight's columns per rank (ffn / tp)", "--ffn-hidden-size"}};
        for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
            if (dims[i].n > 0 && (dims[i].n % tp || (dims[i].n / tp) % b))
                return mtc_error(E,
                                 "--fp8-recipe %s on --tensor-model-parallel-size %d: %s is %d%s, "
                                 "not a multiple of its %d-value blocks (a block would straddle "
                                 "two ranks): make %s a multiple of %d, or change tp or the recipe",
                                 r, tp, dims[i].what, dims[i].n / tp, dims[i].n % tp ? "+" : "", b,
                                 dims[i].flag, b * tp);
    }
    if (cp > 1 && (d->seq % (2 * cp) || (d->seq / (2 * cp)) % b))
        return mtc_error(E,
                         "--fp8-recipe %s on --context-parallel-size %d: a sequence chunk (seq / "
                         "2cp) has %d tokens, not a multiple of the %d-token blocks of the "
                         "weight gradient: make --seq-length a multiple of %d",
                         r, cp, d->seq / (2 * cp), b, 2 * cp * b);
    return MTC_OK;
}
