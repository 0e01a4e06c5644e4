/* cli/cmd_layout.c - `mtc layout`: Megatron's gradient-buffer, bucket and
 * per-DP-rank shard layout for a list of parameter sizes, as text or as JSON
 * in the shape of one case of tests/data/megatron/dist_opt_layout.json.
 * Relies on dp/layout.h for the layout; only parses and formats. Bad input
 * exits 2 with nothing on stdout. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "dp/layout.h"

/* "4096,512,512" -> numels (malloc'd); returns the count, or -1 with msg set. */
static int layout_parse_numels(const char *s, int64_t **out, char *msg, size_t msglen) {
    int cap = 16, n = 0;
    int64_t *v = malloc(sizeof *v * (size_t)cap);
    const char *p = s;
    while (v && *p) {
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || x < 1 || x > (1ll << 40) || (*end && *end != ',')) {
            snprintf(msg, msglen,
                     "--param-numels: '%.*s' is not an integer in [1, 2^40] (e.g. "
                     "--param-numels 4096,512,512)",
                     (int)strcspn(p, ","), p);
            free(v);
            return -1;
        }
        if (n == cap) {
            int64_t *w = realloc(v, sizeof *v * (size_t)(cap *= 2));
            if (!w) break;
            v = w;
        }
        v[n++] = x;
        p = *end ? end + 1 : end;
    }
    if (!v || *p) {
        snprintf(msg, msglen, "out of memory reading --param-numels");
        free(v);
        return -1;
    }
    *out = v;
    return n;
}

static cJSON *layout_range_json(dp_range r) {
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, cJSON_CreateNumber((double)r.start));
    cJSON_AddItemToArray(a, cJSON_CreateNumber((double)r.end));
    return a;
}

/* param_index_map and bucket_indices of a layout into obj. */
static void layout_maps_json(cJSON *obj, const dp_layout *l, int with_unpadded) {
    cJSON *pim = cJSON_AddArrayToObject(obj, "param_index_map");
    for (int i = 0; i < l->nparams; i++) {
        cJSON *e = layout_range_json(l->param[i]);
        cJSON_AddItemToArray(e, cJSON_CreateNumber(l->param_bucket[i]));
        cJSON_AddItemToArray(pim, e);
    }
    cJSON *bi = cJSON_AddArrayToObject(obj, "bucket_indices");
    for (int b = 0; b < l->nbuckets; b++)
        cJSON_AddItemToArray(bi, layout_range_json(l->bucket[b]));
    if (!with_unpadded) return;
    cJSON *un = cJSON_AddArrayToObject(obj, "per_bucket_numel_unpadded");
    for (int b = 0; b < l->nbuckets; b++)
        cJSON_AddItemToArray(un, cJSON_CreateNumber((double)l->bucket_numel_unpadded[b]));
}

static int layout_json(const dp_layout *l, const dp_layout *plain, const int64_t *numels,
                       const dp_layout_config *cfg, const mtc_arg_ints *shared) {
    cJSON *root = cJSON_CreateObject();
    cJSON *pn = cJSON_AddArrayToObject(root, "param_numels_forward_order");
    for (int i = 0; i < l->nparams; i++)
        cJSON_AddItemToArray(pn, cJSON_CreateNumber((double)numels[i]));
    if (cfg->bucket_size > 0)
        cJSON_AddNumberToObject(root, "bucket_size", (double)cfg->bucket_size);
    else
        cJSON_AddNullToObject(root, "bucket_size");
    cJSON_AddNumberToObject(root, "data_parallel_world_size", cfg->dp);
    cJSON_AddBoolToObject(root, "pad_buckets_for_high_nccl_busbw", cfg->pad_high_busbw);
    cJSON *se = cJSON_AddArrayToObject(root, "shared_embedding_param_indices");
    for (int i = 0; i < shared->n; i++)
        cJSON_AddItemToArray(se, cJSON_CreateNumber((double)shared->v[i]));
    cJSON_AddBoolToObject(root, "use_distributed_optimizer", cfg->use_distopt);
    layout_maps_json(root, l, 1);
    if (l->use_distopt) {
        cJSON *shards = cJSON_AddArrayToObject(root, "shards");
        for (int r = 0; r < l->dp; r++) {
            cJSON *rank = cJSON_CreateObject();
            cJSON_AddNumberToObject(rank, "dp_rank", r);
            cJSON *buckets = cJSON_AddArrayToObject(rank, "buckets");
            for (int b = 0; b < l->nbuckets; b++) {
                cJSON *bo = cJSON_CreateObject();
                cJSON_AddNumberToObject(bo, "bucket", b);
                cJSON_AddItemToObject(bo, "gbuf_world_range",
                                      layout_range_json(dp_layout_shard_range(l, r, b)));
                cJSON *params = cJSON_AddArrayToObject(bo, "params");
                int n;
                const dp_shard_param *sp = dp_layout_shard_params(l, r, b, &n);
                for (int k = 0; k < n; k++) {
                    cJSON *e = cJSON_CreateArray();
                    cJSON_AddItemToArray(e, cJSON_CreateNumber(sp[k].param));
                    cJSON_AddItemToArray(e, layout_range_json(sp[k].gbuf_world));
                    cJSON_AddItemToArray(e, layout_range_json(sp[k].gbuf_local));
                    cJSON_AddItemToArray(e, layout_range_json(sp[k].param_sub));
                    cJSON_AddItemToArray(params, e);
                }
                cJSON_AddItemToArray(buckets, bo);
            }
            cJSON_AddItemToArray(shards, rank);
        }
    }
    cJSON *ddp = cJSON_AddObjectToObject(root, "ddp_no_distopt_layout");
    layout_maps_json(ddp, plain, 0);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return cli_fail("layout", mtc_error(MTC_ERR_OUT_OF_MEMORY, "formatting JSON"));
    printf("%s\n", text);
    free(text);
    return 0;
}

int cli_cmd_layout(int argc, char **argv) {
    const char *numels_arg = NULL;
    int dp = 1, pad_high = 0, distopt = 1, json = 0;
    int64_t bucket_size = 0;
    mtc_arg_ints shared = {0};
    mtc_arg args[] = {
        {"param-numels", NULL, MTC_ARG_STRING, &numels_arg, "N1,N2,...",
         "element counts of the params in model (forward) order (required)", 0},
        {"data-parallel-size", "dp", MTC_ARG_INT, &dp, "D", "data-parallel size (default 1)", 0},
        {"ddp-bucket-size", NULL, MTC_ARG_I64, &bucket_size, "S",
         "bucket size in elements as the layout gets it (default: one bucket)", 0},
        {"pad-buckets-for-high-nccl-busbw", NULL, MTC_ARG_FLAG, &pad_high, NULL,
         "pad bucket ends to lcm(D, 128, 65536)", 0},
        {"shared-embedding-params", NULL, MTC_ARG_INTS, &shared, "I,J",
         "forward indices of tied embedding params", 0},
        {"distributed-optimizer", "use-distributed-optimizer", MTC_ARG_FLAG, &distopt, NULL,
         "(default on) --no-distributed-optimizer gives the plain DDP layout", 0},
        {"json", NULL, MTC_ARG_FLAG, &json, NULL, "print JSON (dist_opt_layout.json case shape)",
         0},
    };
    int nargs = (int)(sizeof args / sizeof args[0]);
    int st = cli_parse(
        "layout",
        "--param-numels N1,N2,... --data-parallel-size D [--ddp-bucket-size S] "
        "[--pad-buckets-for-high-nccl-busbw] [--shared-embedding-params I,J] "
        "[--no-distributed-optimizer] [--json]",
        "Show where each parameter's gradient lives in the flat buffer, the buckets,\n"
        "and the shard every data-parallel rank owns, as Megatron-LM core_v0.18.0 lays them out.",
        args, nargs, argc, argv);
    if (st >= 0) return st;
    if (!numels_arg)
        return cli_usage_error("layout",
                               "--param-numels is required (e.g. --param-numels 4096,512,512)");
    if (dp < 1 || dp > (1 << 20))
        return cli_usage_error("layout", "--data-parallel-size %d is outside [1, %d]", dp, 1 << 20);
    if (mtc_args_seen(args, nargs, "ddp-bucket-size") && bucket_size < 1)
        return cli_usage_error("layout",
                               "--ddp-bucket-size %lld must be at least 1 (omit it for one bucket)",
                               (long long)bucket_size);
    char msg[256];
    int64_t *numels = NULL;
    int n = layout_parse_numels(numels_arg, &numels, msg, sizeof msg);
    if (n < 0) return cli_usage_error("layout", "%s", msg);
    if (n == 0) return cli_usage_error("layout", "--param-numels lists no params");
    int *is_shared = calloc((size_t)n, sizeof(int));
    if (!is_shared) {
        free(numels);
        return cli_fail("layout", mtc_error(MTC_ERR_OUT_OF_MEMORY, "layout flags"));
    }
    for (int i = 0; i < shared.n; i++) {
        if (shared.v[i] < 0 || shared.v[i] >= n) {
            free(numels), free(is_shared);
            return cli_usage_error("layout",
                                   "--shared-embedding-params index %lld is not a param (0..%d)",
                                   (long long)shared.v[i], n - 1);
        }
        is_shared[shared.v[i]] = 1;
    }
    dp_layout_config cfg = {.dp = dp,
                            .bucket_size = bucket_size,
                            .pad_high_busbw = pad_high,
                            .use_distopt = distopt,
                            .shared_embedding = is_shared};
    dp_layout_config plain_cfg = cfg;
    plain_cfg.use_distopt = 0;
    dp_layout l, plain;
    int status = 0;
    mtc_result_t rc = dp_layout_build(&l, numels, n, &cfg);
    if (rc == MTC_OK) {
        rc = dp_layout_build(&plain, numels, n, &plain_cfg);
        if (rc != MTC_OK) dp_layout_free(&l);
    }
    if (rc != MTC_OK) {
        status = rc == MTC_ERR_INVALID_ARGUMENT
                     ? cli_usage_error("layout", "%s", mtc_error_detail())
                     : cli_fail("layout", rc);
    } else {
        if (json)
            status = layout_json(&l, &plain, numels, &cfg, &shared);
        else
            dp_layout_print(stdout, &l, &cfg, is_shared);
        dp_layout_free(&l), dp_layout_free(&plain);
    }
    free(numels), free(is_shared);
    return status;
}
