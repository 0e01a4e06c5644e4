/* tests/dp/test_layout.c - the distributed-optimizer buffer layout against
 * Megatron's own outputs (every case of
 * tests/data/megatron/dist_opt_layout.json, every field, both with and
 * without the distributed optimizer) and against the layout's invariants
 * over many generated param lists: params disjoint, in backward order,
 * 64-aligned; buckets tile the buffer, padded to lcm(dp, 128[, 65536]),
 * closed exactly where Megatron's rule says; shards partition every bucket
 * in equal parts; the per-param pieces cover every param exactly once. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "dp/layout.h"
#include "example_json.h"
#include "test.h"

static int64_t jnum(const cJSON *a, int i) {
    return (int64_t)cJSON_GetArrayItem(a, i)->valuedouble;
}

static int range_eq(const cJSON *a, dp_range r) {
    return cJSON_GetArraySize(a) == 2 && jnum(a, 0) == r.start && jnum(a, 1) == r.end;
}

/* param_index_map + bucket_indices of a layout equal the JSON ones. */
static int maps_equal(const cJSON *obj, const dp_layout *l) {
    const cJSON *pim = cJSON_GetObjectItem(obj, "param_index_map");
    const cJSON *bi = cJSON_GetObjectItem(obj, "bucket_indices");
    int ok = cJSON_GetArraySize(pim) == l->nparams && cJSON_GetArraySize(bi) == l->nbuckets;
    for (int i = 0; ok && i < l->nparams; i++) {
        const cJSON *e = cJSON_GetArrayItem(pim, i);
        ok = jnum(e, 0) == l->param[i].start && jnum(e, 1) == l->param[i].end &&
             jnum(e, 2) == l->param_bucket[i];
    }
    for (int b = 0; ok && b < l->nbuckets; b++)
        ok = range_eq(cJSON_GetArrayItem(bi, b), l->bucket[b]);
    return ok;
}

static void test_examples(void) {
    cJSON *root = load_example("dist_opt_layout.json");
    T_CHECK(root != NULL);
    if (!root) return;
    int ncases = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "cases")) {
        const cJSON *pn = cJSON_GetObjectItem(c, "param_numels_forward_order");
        int n = cJSON_GetArraySize(pn);
        int64_t *numels = malloc(sizeof(int64_t) * (size_t)n);
        int *shared = calloc((size_t)n, sizeof(int));
        for (int i = 0; i < n; i++)
            numels[i] = jnum(pn, i);
        const cJSON *s;
        cJSON_ArrayForEach(s, cJSON_GetObjectItem(c, "shared_embedding_param_indices"))
            shared[s->valueint] = 1;
        const cJSON *bs = cJSON_GetObjectItem(c, "bucket_size");
        dp_layout_config cfg = {.dp = cJSON_GetObjectItem(c, "data_parallel_world_size")->valueint,
                                .bucket_size = cJSON_IsNumber(bs) ? (int64_t)bs->valuedouble : 0,
                                .pad_high_busbw = cJSON_IsTrue(
                                    cJSON_GetObjectItem(c, "pad_buckets_for_high_nccl_busbw")),
                                .use_distopt = 1,
                                .shared_embedding = shared};
        dp_layout l;
        T_CHECK(dp_layout_build(&l, numels, n, &cfg) == MTC_OK);
        T_CHECKF(maps_equal(c, &l), "case %d param_index_map / bucket_indices", ncases);
        const cJSON *un = cJSON_GetObjectItem(c, "per_bucket_numel_unpadded");
        int ok = cJSON_GetArraySize(un) == l.nbuckets;
        for (int b = 0; ok && b < l.nbuckets; b++)
            ok = jnum(un, b) == l.bucket_numel_unpadded[b];
        T_CHECKF(ok, "case %d per_bucket_numel_unpadded", ncases);
        /* shards: every rank, every bucket, every piece */
        const cJSON *shards = cJSON_GetObjectItem(c, "shards");
        ok = cJSON_GetArraySize(shards) == cfg.dp;
        for (int r = 0; ok && r < cfg.dp; r++) {
            const cJSON *rank = cJSON_GetArrayItem(shards, r);
            const cJSON *buckets = cJSON_GetObjectItem(rank, "buckets");
            ok = cJSON_GetObjectItem(rank, "dp_rank")->valueint == r &&
                 cJSON_GetArraySize(buckets) == l.nbuckets;
            for (int b = 0; ok && b < l.nbuckets; b++) {
                const cJSON *bo = cJSON_GetArrayItem(buckets, b);
                const cJSON *params = cJSON_GetObjectItem(bo, "params");
                int np;
                const dp_shard_param *sp = dp_layout_shard_params(&l, r, b, &np);
                ok = cJSON_GetObjectItem(bo, "bucket")->valueint == b &&
                     range_eq(cJSON_GetObjectItem(bo, "gbuf_world_range"),
                              dp_layout_shard_range(&l, r, b)) &&
                     cJSON_GetArraySize(params) == np;
                for (int k = 0; ok && k < np; k++) {
                    const cJSON *e = cJSON_GetArrayItem(params, k);
                    ok = jnum(e, 0) == sp[k].param &&
                         range_eq(cJSON_GetArrayItem(e, 1), sp[k].gbuf_world) &&
                         range_eq(cJSON_GetArrayItem(e, 2), sp[k].gbuf_local) &&
                         range_eq(cJSON_GetArrayItem(e, 3), sp[k].param_sub);
                }
                T_CHECKF(ok, "case %d shard rank %d bucket %d", ncases, r, b);
            }
        }
        T_CHECK(ok);
        dp_layout_free(&l);
        /* the plain DDP layout */
        cfg.use_distopt = 0;
        T_CHECK(dp_layout_build(&l, numels, n, &cfg) == MTC_OK);
        T_CHECKF(maps_equal(cJSON_GetObjectItem(c, "ddp_no_distopt_layout"), &l),
                 "case %d ddp layout", ncases);
        int np;
        T_CHECK(dp_layout_shard_params(&l, 0, 0, &np) == NULL && np == 0);
        dp_layout_free(&l);
        free(numels), free(shared);
        ncases++;
    }
    T_CHECK(ncases >= 3);
    cJSON_Delete(root);
}

/* Invariants of one layout; returns 1 when all hold. */
static int check_invariants(const dp_layout *l, const int64_t *numels,
                            const dp_layout_config *cfg) {
    int n = l->nparams, ok = 1, distopt = cfg->use_distopt;
    int64_t div = dp_layout_bucket_divisor(cfg->dp, cfg->pad_high_busbw);
    /* params: in backward order, disjoint, sized, aligned */
    for (int i = 0; i < n; i++) {
        ok &= l->param[i].end - l->param[i].start == numels[i];
        if (distopt) ok &= l->param[i].start % 64 == 0;
        if (i + 1 < n) ok &= l->param[i + 1].end <= l->param[i].start;
        dp_range b = l->bucket[l->param_bucket[i]];
        ok &= b.start <= l->param[i].start && l->param[i].end <= b.end;
    }
    if (!distopt) { /* no gaps at all: params tile the buffer */
        int64_t pos = 0;
        for (int i = n - 1; i >= 0; i--)
            ok &= l->param[i].start == pos, pos = l->param[i].end;
        ok &= l->numel == pos && l->numel == l->numel_unpadded;
    }
    /* buckets tile the buffer; padded ends */
    for (int b = 0; b < l->nbuckets; b++) {
        ok &= l->bucket[b].start == (b ? l->bucket[b - 1].end : 0);
        if (distopt) ok &= l->bucket[b].end % div == 0;
        int first = l->bucket_params[l->bucket_param_off[b]];
        int last = l->bucket_params[l->bucket_param_off[b + 1] - 1];
        ok &= l->param[first].start - l->bucket[b].start < 64; /* only alignment before the first */
        ok &= l->bucket_numel_unpadded[b] >= l->param[last].end - l->bucket[b].start;
        ok &= l->bucket_numel_unpadded[b] <= l->bucket[b].end - l->bucket[b].start;
        /* Megatron's closing rule, from the bucket's own contents */
        for (int k = l->bucket_param_off[b]; k < l->bucket_param_off[b + 1]; k++) {
            int p = l->bucket_params[k], is_last = k == l->bucket_param_off[b + 1] - 1;
            int shared = distopt && cfg->shared_embedding && cfg->shared_embedding[p];
            int full =
                cfg->bucket_size > 0 && l->param[p].end - l->bucket[b].start >= cfg->bucket_size;
            if (!is_last) ok &= !full && !shared;
            if (shared) ok &= l->bucket_param_off[b + 1] - l->bucket_param_off[b] == 1;
            if (is_last && b + 1 < l->nbuckets) {
                int next = p - 1; /* the next param in backward order opens bucket b+1 */
                int next_shared = distopt && cfg->shared_embedding && cfg->shared_embedding[next];
                ok &= full || shared || next_shared;
            }
        }
    }
    ok &= l->numel == l->bucket[l->nbuckets - 1].end;
    if (!distopt) return ok;
    /* shards: equal contiguous parts of each bucket; pieces cover every param once */
    int64_t *covered = calloc((size_t)n, sizeof(int64_t));
    for (int b = 0; b < l->nbuckets; b++) {
        int64_t size = (l->bucket[b].end - l->bucket[b].start) / cfg->dp;
        ok &= size * cfg->dp == l->bucket[b].end - l->bucket[b].start;
        for (int r = 0; r < cfg->dp; r++) {
            dp_range w = dp_layout_shard_range(l, r, b);
            ok &= w.start == l->bucket[b].start + r * size && w.end - w.start == size;
            int np;
            const dp_shard_param *sp = dp_layout_shard_params(l, r, b, &np);
            for (int k = 0; k < np; k++) {
                const dp_shard_param *q = &sp[k];
                int64_t len = q->gbuf_world.end - q->gbuf_world.start;
                ok &= len > 0 && q->gbuf_local.end - q->gbuf_local.start == len &&
                      q->param_sub.end - q->param_sub.start == len;
                ok &= q->gbuf_world.start == l->param[q->param].start + q->param_sub.start;
                ok &= q->gbuf_local.start == q->gbuf_world.start - w.start;
                ok &= w.start <= q->gbuf_world.start && q->gbuf_world.end <= w.end;
                ok &= l->param_bucket[q->param] == b;
                if (k) ok &= sp[k - 1].param < q->param;
                covered[q->param] += len;
            }
        }
    }
    for (int i = 0; i < n; i++)
        ok &= covered[i] == numels[i];
    free(covered);
    /* the held count from the gaps alone equals the pieces, rank by rank */
    int64_t most = 0;
    for (int r = 0; r < cfg->dp; r++) {
        int64_t h = 0;
        for (int b = 0; b < l->nbuckets; b++) {
            int np;
            const dp_shard_param *sp = dp_layout_shard_params(l, r, b, &np);
            for (int k = 0; k < np; k++)
                h += sp[k].gbuf_world.end - sp[k].gbuf_world.start;
        }
        ok &= dp_layout_held_numel(l, r) == h;
        if (h > most) most = h;
    }
    ok &= dp_layout_held_numel(l, -1) == most;
    dp_layout_config placement = *cfg;
    placement.placement_only = 1;
    dp_layout p;
    if (dp_layout_build(&p, numels, n, &placement) != MTC_OK) return 0;
    ok &= !p.shard_off && p.numel == l->numel && dp_layout_held_numel(&p, -1) == most;
    dp_layout_free(&p);
    return ok;
}

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

static void test_properties(void) {
    static const int dps[] = {1, 2, 3, 4, 6, 8, 16, 256};
    static const int64_t sizes[] = {0, 1, 100, 1000, 5000, 40000};
    uint64_t seed = 12345;
    int nlayouts = 0, bad = 0;
    for (int trial = 0; trial < 60; trial++) {
        int n = 1 + (int)(lcg(&seed) % 24);
        int64_t numels[24];
        int shared[24] = {0};
        for (int i = 0; i < n; i++) {
            int kind = (int)(lcg(&seed) % 4); /* tiny, odd, layer-sized, 64-multiples */
            numels[i] = kind == 0   ? 1 + (int64_t)(lcg(&seed) % 7)
                        : kind == 1 ? 1 + (int64_t)(lcg(&seed) % 999)
                        : kind == 2 ? 1 + (int64_t)(lcg(&seed) % 20000)
                                    : 64 * (1 + (int64_t)(lcg(&seed) % 64));
        }
        if (trial % 3 == 0) shared[0] = 1, shared[n - 1] = 1; /* tied embeddings */
        for (size_t d = 0; d < sizeof dps / sizeof dps[0]; d++)
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
                for (int pad = 0; pad <= 1; pad++)
                    for (int distopt = 0; distopt <= 1; distopt++) {
                        dp_layout_config cfg = {.dp = dps[d],
                                                .bucket_size = sizes[s],
                                                .pad_high_busbw = pad,
                                                .use_distopt = distopt,
                                                .shared_embedding = shared};
                        dp_layout l;
                        if (dp_layout_build(&l, numels, n, &cfg) != MTC_OK) {
                            bad++;
                            continue;
                        }
                        if (!check_invariants(&l, numels, &cfg)) {
                            if (bad++ < 5)
                                fprintf(stderr,
                                        "invariants broken: trial %d n=%d dp=%d bucket=%lld pad=%d "
                                        "distopt=%d\n",
                                        trial, n, cfg.dp, (long long)cfg.bucket_size, pad, distopt);
                        }
                        dp_layout_free(&l);
                        nlayouts++;
                    }
    }
    printf("property layouts: %d, broken: %d\n", nlayouts, bad);
    T_CHECK(bad == 0 && nlayouts > 5000);
}

static void test_closed_forms(void) {
    T_CHECK(dp_layout_bucket_divisor(1, 0) == 128);
    T_CHECK(dp_layout_bucket_divisor(6, 0) == 384);
    T_CHECK(dp_layout_bucket_divisor(256, 0) == 256);
    T_CHECK(dp_layout_bucket_divisor(6, 1) == 196608);
    /* Megatron's training defaults: max(4e7, 1e6*dp_cp), None without overlap,
     * on pp ranks > 0 and on model chunks > 0 */
    T_CHECK(dp_layout_bucket_size(0, 8, 1, 0, 0) == 40000000);
    T_CHECK(dp_layout_bucket_size(0, 64, 1, 0, 0) == 64000000);
    T_CHECK(dp_layout_bucket_size(1000, 64, 1, 0, 0) == 1000);
    T_CHECK(dp_layout_bucket_size(1000, 64, 0, 0, 0) == 0);
    T_CHECK(dp_layout_bucket_size(0, 8, 1, 1, 0) == 0);
    T_CHECK(dp_layout_bucket_size(0, 8, 1, 0, 1) == 0);
    /* one 1000-element param, dp 3: padded to lcm(3,128)=384 -> 1152, 384 each */
    int64_t numel = 1000;
    dp_layout_config cfg = {.dp = 3, .use_distopt = 1};
    dp_layout l;
    T_CHECK(dp_layout_build(&l, &numel, 1, &cfg) == MTC_OK);
    T_CHECK(l.numel == 1152 && l.numel_unpadded == 1000 && l.nbuckets == 1);
    T_CHECK(dp_layout_shard_numel(&l, 2) == 384);
    int np;
    const dp_shard_param *sp = dp_layout_shard_params(&l, 2, 0, &np);
    T_CHECK(np == 1 && sp[0].param_sub.start == 768 && sp[0].param_sub.end == 1000);
    dp_layout_free(&l);
    dp_layout_free(&l); /* idempotent */
    dp_layout_free(NULL);
    /* bad input */
    int64_t zero = 0;
    T_CHECK(dp_layout_build(&l, &zero, 1, &cfg) == MTC_ERR_INVALID_ARGUMENT);
    cfg.dp = 0;
    T_CHECK(dp_layout_build(&l, &numel, 1, &cfg) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(strstr(mtc_error_detail(), "data-parallel-size=0") != NULL);
    dp_layout_free(&l);
}

int main(void) {
    test_examples();
    test_properties();
    test_closed_forms();
    return T_DONE();
}
