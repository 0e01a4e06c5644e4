/* dp/layout_print.c - the human-readable form of a dp_layout (buffer,
 * buckets, params, per-rank shards), shared by `mtc layout` and
 * `mtc train --print-layout` so both print the same text for the same
 * numels and config. Relies on dp/layout.h; only formats. */
#include <stdio.h>

#include "dp/layout.h"

void dp_layout_print(FILE *f, const dp_layout *l, const dp_layout_config *cfg,
                     const int *is_shared) {
    fprintf(f, "buffer: %lld elements (%lld without padding), %d bucket%s, data-parallel size %d\n",
            (long long)l->numel, (long long)l->numel_unpadded, l->nbuckets,
            l->nbuckets == 1 ? "" : "s", cfg->dp);
    if (l->use_distopt)
        fprintf(f,
                "distributed optimizer: param starts aligned to 64, bucket ends padded to %lld\n",
                (long long)dp_layout_bucket_divisor(cfg->dp, cfg->pad_high_busbw));
    else
        fprintf(f, "plain DDP (no distributed optimizer): no alignment, no padding, buckets "
                   "all-reduced\n");
    fprintf(f, "\nbuckets (params laid out in backward order):\n");
    for (int b = 0; b < l->nbuckets; b++) {
        fprintf(f, "  bucket %d: [%lld, %lld) %lld elements, %lld used; params", b,
                (long long)l->bucket[b].start, (long long)l->bucket[b].end,
                (long long)(l->bucket[b].end - l->bucket[b].start),
                (long long)l->bucket_numel_unpadded[b]);
        for (int k = l->bucket_param_off[b]; k < l->bucket_param_off[b + 1]; k++)
            fprintf(f, " %d", l->bucket_params[k]);
        fprintf(f, "\n");
    }
    fprintf(f, "\nparams (forward index: place in the buffer):\n");
    for (int i = 0; i < l->nparams; i++)
        if (l->param_bucket[i] < 0)
            fprintf(f, "  param %d: not in this buffer\n", i);
        else
            fprintf(
                f, "  param %d: [%lld, %lld) bucket %d%s\n", i, (long long)l->param[i].start,
                (long long)l->param[i].end, l->param_bucket[i],
                is_shared && is_shared[i]
                    ? (l->use_distopt
                           ? "  shared embedding"
                           : "  shared embedding (no own bucket without the distributed optimizer)")
                    : "");
    if (!l->use_distopt) return;
    fprintf(f, "\nshards (each DP rank owns 1/%d of every bucket):\n", cfg->dp);
    for (int r = 0; r < l->dp; r++) {
        fprintf(f, "  dp rank %d: %lld elements of optimizer state\n", r,
                (long long)dp_layout_shard_numel(l, r));
        for (int b = 0; b < l->nbuckets; b++) {
            dp_range w = dp_layout_shard_range(l, r, b);
            int n;
            const dp_shard_param *sp = dp_layout_shard_params(l, r, b, &n);
            fprintf(f, "    bucket %d [%lld, %lld):%s\n", b, (long long)w.start, (long long)w.end,
                    n ? "" : " padding only");
            for (int k = 0; k < n; k++)
                fprintf(f,
                        "      param %d elements [%lld, %lld) at buffer [%lld, %lld), shard offset "
                        "[%lld, %lld)\n",
                        sp[k].param, (long long)sp[k].param_sub.start,
                        (long long)sp[k].param_sub.end, (long long)sp[k].gbuf_world.start,
                        (long long)sp[k].gbuf_world.end, (long long)sp[k].gbuf_local.start,
                        (long long)sp[k].gbuf_local.end);
        }
    }
}
