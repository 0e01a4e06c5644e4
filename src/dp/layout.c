/* dp/layout.c - the gradient-buffer layout of dp/layout.h: one reverse walk
 * over the params places them and closes buckets, then each bucket is cut
 * into dp equal contiguous shards and intersected with its params.
 *
 *   buffer:  | bucket 0 (last params) | bucket 1 | ... |     (backward order)
 *   bucket:  | rank 0 | rank 1 | ... | rank dp-1 |           (n/dp each)
 *
 * Relies on core/result.h and libc. Does not allocate tensors, choose the
 * bucket size (the caller applies Megatron's max(4e7, 1e6*dp) / None rules),
 * or group params into buffers by dtype / expert-ness (one call per buffer). */
#include "dp/layout.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int64_t layout_gcd(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b, b = t;
    }
    return a;
}

static int64_t layout_lcm(int64_t a, int64_t b) { return a / layout_gcd(a, b) * b; }

static int64_t layout_round_up(int64_t x, int64_t d) { return (x + d - 1) / d * d; }

int64_t dp_layout_bucket_divisor(int dp, int pad_high_busbw) {
    int64_t d = layout_lcm(dp, 128);
    return pad_high_busbw ? layout_lcm(d, 65536) : d;
}

int64_t dp_layout_bucket_size(int64_t requested, int dp_cp, int overlap_grad_reduce, int pp_rank,
                              int model_chunk) {
    if (!overlap_grad_reduce || pp_rank > 0 || model_chunk > 0) return 0;
    if (requested > 0) return requested;
    int64_t by_dp = (int64_t)1000000 * dp_cp;
    return by_dp > 40000000 ? by_dp : 40000000;
}

void dp_layout_free(dp_layout *l) {
    if (!l) return;
    free(l->param), free(l->param_bucket), free(l->bucket), free(l->bucket_numel_unpadded);
    free(l->bucket_param_off), free(l->bucket_params), free(l->shard_off), free(l->shard_params);
    memset(l, 0, sizeof *l);
}

/* State of the reverse walk. */
typedef struct {
    dp_layout *l;
    int64_t bucket_start, divisor;
    int in_bucket; /* params in the open bucket */
} layout_walk;

/* Close the open bucket whose last param ends at `end`; returns the padded end. */
static int64_t layout_close_bucket(layout_walk *w, int64_t end) {
    dp_layout *l = w->l;
    int64_t padded = l->use_distopt ? layout_round_up(end, w->divisor) : end;
    l->bucket_numel_unpadded[l->nbuckets] = end - w->bucket_start;
    l->bucket[l->nbuckets] = (dp_range){w->bucket_start, padded};
    l->nbuckets++;
    w->bucket_start = padded;
    w->in_bucket = 0;
    return padded;
}

static mtc_result_t layout_place_params(dp_layout *l, const int64_t *numels,
                                        const dp_layout_config *cfg) {
    layout_walk w = {.l = l, .divisor = dp_layout_bucket_divisor(cfg->dp, cfg->pad_high_busbw)};
    if (cfg->pad_divisor > 0) w.divisor = layout_lcm(cfg->dp, cfg->pad_divisor);
    int64_t start = 0, end = 0;
    int unit = -1; /* the open bucket's FSDP unit */
    for (int i = l->nparams - 1; i >= 0; i--) {
        /* Megatron splits tied embeddings out only with the distributed optimizer */
        if (cfg->skip_empty && numels[i] == 0) { /* not in this buffer */
            l->param[i] = (dp_range){start, start};
            l->param_bucket[i] = -1;
            continue;
        }
        int shared = l->use_distopt && cfg->shared_embedding && cfg->shared_embedding[i];
        if (l->use_distopt) start = layout_round_up(start, 64);
        if (shared && w.in_bucket > 0) start = layout_close_bucket(&w, start);
        if (cfg->unit_of && w.in_bucket > 0 && cfg->unit_of[i] != unit)
            start = layout_close_bucket(&w, start);
        if (cfg->unit_of) unit = cfg->unit_of[i];
        end = start + numels[i];
        l->param[i] = (dp_range){start, end};
        l->param_bucket[i] = l->nbuckets;
        w.in_bucket++;
        if ((cfg->bucket_size > 0 && end - w.bucket_start >= cfg->bucket_size) || shared)
            start = layout_close_bucket(&w, end);
        else
            start = end;
    }
    if (w.in_bucket > 0) layout_close_bucket(&w, end);
    l->numel = l->nbuckets ? l->bucket[l->nbuckets - 1].end : 0;
    l->numel_unpadded = 0;
    for (int b = 0; b < l->nbuckets; b++)
        l->numel_unpadded += l->bucket_numel_unpadded[b];
    /* bucket -> params, in buffer order (descending forward index) */
    for (int i = 0; i < l->nparams; i++)
        if (l->param_bucket[i] >= 0) l->bucket_param_off[l->param_bucket[i] + 1]++;
    for (int b = 0; b < l->nbuckets; b++)
        l->bucket_param_off[b + 1] += l->bucket_param_off[b];
    int *fill = calloc((size_t)(l->nbuckets ? l->nbuckets : 1), sizeof(int));
    if (!fill) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "layout bucket index");
    for (int i = l->nparams - 1; i >= 0; i--) {
        int b = l->param_bucket[i];
        if (b < 0) continue;
        l->bucket_params[l->bucket_param_off[b] + fill[b]++] = i;
    }
    free(fill);
    return MTC_OK;
}

/* Intersect param p with the world range ws..ws+size of one shard. */
static int layout_piece(dp_shard_param *out, const dp_layout *l, int p, int64_t ws, int64_t size) {
    int64_t ps = l->param[p].start, pe = l->param[p].end;
    int64_t lo = ps - ws > 0 ? ps - ws : 0;
    int64_t hi = pe - ws < size ? pe - ws : size;
    if (hi <= lo) return 0;
    int64_t sub = ws - ps > 0 ? ws - ps : 0;
    if (out)
        *out = (dp_shard_param){.param = p,
                                .gbuf_world = {ws + lo, ws + hi},
                                .gbuf_local = {lo, hi},
                                .param_sub = {sub, sub + (hi - lo)}};
    return 1;
}

/* Two passes over (rank, bucket): count the pieces, then write them. The
 * params of a bucket sit in buffer order without overlap, so the ones a
 * shard touches are a run of them, found by one cursor per bucket that
 * only moves forward: O(dp x nbuckets + pieces), not O(dp x nparams). */
static mtc_result_t layout_build_shards(dp_layout *l) {
    int nshards = l->dp * l->nbuckets;
    l->shard_off = calloc((size_t)nshards + 1, sizeof(int));
    int *cursor = malloc(sizeof(int) * (size_t)(l->nbuckets ? l->nbuckets : 1));
    if (!l->shard_off || !cursor) {
        free(cursor);
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "layout shard index");
    }
    for (int pass = 0; pass < 2; pass++) {
        int n = 0;
        for (int b = 0; b < l->nbuckets; b++)
            cursor[b] = l->bucket_param_off[b];
        for (int r = 0; r < l->dp; r++)
            for (int b = 0; b < l->nbuckets; b++) {
                dp_range world = dp_layout_shard_range(l, r, b);
                l->shard_off[r * l->nbuckets + b] = n;
                int first = cursor[b], end = l->bucket_param_off[b + 1];
                while (first < end && l->param[l->bucket_params[first]].end <= world.start)
                    first++;
                int last = first;
                while (last < end && l->param[l->bucket_params[last]].start < world.end)
                    last++;
                cursor[b] = first;
                /* ascending param index = reverse of the bucket's buffer order */
                for (int k = last - 1; k >= first; k--)
                    n += layout_piece(pass ? &l->shard_params[n] : NULL, l, l->bucket_params[k],
                                      world.start, world.end - world.start);
            }
        l->shard_off[nshards] = n;
        if (pass == 0) {
            l->shard_params = malloc(sizeof(dp_shard_param) * (size_t)(n ? n : 1));
            if (!l->shard_params) {
                free(cursor);
                return mtc_error(MTC_ERR_OUT_OF_MEMORY, "layout shards");
            }
        }
    }
    free(cursor);
    return MTC_OK;
}

mtc_result_t dp_layout_build(dp_layout *out, const int64_t *numels, int nparams,
                             const dp_layout_config *cfg) {
    memset(out, 0, sizeof *out);
    if (nparams < 0) /* 0: an empty pipeline stage's chunk, no buckets */
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "a layout needs at least zero params, got %d",
                         nparams);
    if (cfg->dp < 1)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "data-parallel-size=%d must be at least 1",
                         cfg->dp);
    for (int i = 0; i < nparams; i++)
        if (numels[i] < (cfg->skip_empty ? 0 : 1))
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "param %d has %lld elements; every param needs at least 1", i,
                             (long long)numels[i]);
    dp_layout *l = out;
    l->nparams = nparams, l->dp = cfg->dp, l->use_distopt = cfg->use_distopt != 0;
    size_t n = (size_t)(nparams ? nparams : 1);
    l->param = calloc(n, sizeof *l->param);
    l->param_bucket = calloc(n, sizeof(int));
    l->bucket = calloc(n, sizeof *l->bucket); /* at most one bucket per param */
    l->bucket_numel_unpadded = calloc(n, sizeof(int64_t));
    l->bucket_param_off = calloc(n + 1, sizeof(int));
    l->bucket_params = calloc(n, sizeof(int));
    if (!l->param || !l->param_bucket || !l->bucket || !l->bucket_numel_unpadded ||
        !l->bucket_param_off || !l->bucket_params) {
        dp_layout_free(l);
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "layout of %d params", nparams);
    }
    mtc_result_t rc = layout_place_params(l, numels, cfg);
    if (rc == MTC_OK && l->use_distopt && !cfg->placement_only) rc = layout_build_shards(l);
    if (rc != MTC_OK) dp_layout_free(l);
    return rc;
}

dp_range dp_layout_shard_range(const dp_layout *l, int rank, int bucket) {
    dp_range b = l->bucket[bucket];
    int64_t size = (b.end - b.start) / l->dp;
    return (dp_range){b.start + rank * size, b.start + (rank + 1) * size};
}

const dp_shard_param *dp_layout_shard_params(const dp_layout *l, int rank, int bucket, int *n) {
    if (!l->shard_off) {
        *n = 0;
        return NULL;
    }
    int s = rank * l->nbuckets + bucket;
    *n = l->shard_off[s + 1] - l->shard_off[s];
    return l->shard_params + l->shard_off[s];
}

int64_t dp_layout_shard_numel(const dp_layout *l, int rank) {
    int64_t total = 0;
    for (int b = 0; b < l->nbuckets; b++) {
        dp_range r = dp_layout_shard_range(l, rank, b);
        total += r.end - r.start;
    }
    return total;
}

/* The padding of a layout seen per rank: gap(q) = the padding inside rank
 * q's shards. Each gap adds len to one shard or, spanning several, a run
 * of whole shards; kept as +len at q and -len at q_end, summed by a sweep
 * in rank order, so the cost follows the gaps, not dp. */
typedef struct {
    int q;
    int64_t delta;
} layout_event;

typedef struct {
    layout_event *e;
    int n, cap, rank; /* rank >= 0: only sum that rank's padding */
    int64_t rank_gap;
} layout_gaps;

static int event_cmp(const void *a, const void *b) {
    int x = ((const layout_event *)a)->q, y = ((const layout_event *)b)->q;
    return (x > y) - (x < y);
}

static int gaps_add(layout_gaps *g, int q, int q_end, int64_t len) {
    if (g->rank >= 0) {
        if (g->rank >= q && g->rank < q_end) g->rank_gap += len;
        return 1;
    }
    if (g->n + 2 > g->cap) {
        int nc = g->cap ? 2 * g->cap : 64;
        layout_event *ne = realloc(g->e, sizeof *ne * (size_t)nc);
        if (!ne) return 0;
        g->e = ne, g->cap = nc;
    }
    g->e[g->n++] = (layout_event){q, len};
    g->e[g->n++] = (layout_event){q_end, -len};
    return 1;
}

/* The padding [gs, ge) of bucket b: a partial shard at each end, whole
 * shards between. */
static int gaps_add_range(layout_gaps *g, const dp_layout *l, int b, int64_t gs, int64_t ge) {
    if (ge <= gs) return 1;
    int64_t bs = l->bucket[b].start, size = (l->bucket[b].end - bs) / l->dp;
    int q0 = (int)((gs - bs) / size), q1 = (int)((ge - 1 - bs) / size);
    if (q0 == q1) return gaps_add(g, q0, q0 + 1, ge - gs);
    int ok = gaps_add(g, q0, q0 + 1, bs + (int64_t)(q0 + 1) * size - gs);
    if (ok && q1 > q0 + 1) ok = gaps_add(g, q0 + 1, q1, size);
    if (ok) ok = gaps_add(g, q1, q1 + 1, ge - (bs + (int64_t)q1 * size));
    return ok;
}

int64_t dp_layout_held_numel(const dp_layout *l, int rank) {
    if (!l->use_distopt || l->dp < 1) return 0;
    int64_t total = 0; /* every shard's size, padding included */
    layout_gaps g = {.rank = rank};
    int ok = 1;
    for (int b = 0; b < l->nbuckets && ok; b++) {
        total += (l->bucket[b].end - l->bucket[b].start) / l->dp;
        int64_t pos = l->bucket[b].start; /* params of b in buffer order; gaps between */
        for (int k = l->bucket_param_off[b]; k < l->bucket_param_off[b + 1] && ok; k++) {
            dp_range p = l->param[l->bucket_params[k]];
            ok = gaps_add_range(&g, l, b, pos, p.start);
            pos = p.end;
        }
        if (ok) ok = gaps_add_range(&g, l, b, pos, l->bucket[b].end);
    }
    if (!ok) {
        free(g.e);
        return -1;
    }
    if (rank >= 0) return total - g.rank_gap;
    if (g.n) qsort(g.e, (size_t)g.n, sizeof *g.e, event_cmp);
    int64_t least = INT64_MAX, cur = 0;
    int prev = 0;
    for (int i = 0; i < g.n;) {
        int q = g.e[i].q;
        if (q > prev && cur < least) least = cur; /* ranks [prev, q) have cur */
        for (; i < g.n && g.e[i].q == q; i++)
            cur += g.e[i].delta;
        prev = q;
    }
    if (prev < l->dp && cur < least) least = cur;
    free(g.e);
    return total - least;
}

mtc_result_t dp_options_check(int distopt, int instances, int overlap_param_gather,
                              int64_t bucket_size) {
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    if (bucket_size < 0)
        return mtc_error(E, "ddp-bucket-size=%lld must be >= 0", (long long)bucket_size);
    if (instances < 1)
        return mtc_error(E, "num-distributed-optimizer-instances=%d must be >= 1", instances);
    if (instances > 1 && !distopt)
        return mtc_error(E,
                         "num-distributed-optimizer-instances=%d needs --use-distributed-optimizer",
                         instances);
    if (overlap_param_gather && !distopt)
        return mtc_error(E, "--overlap-param-gather needs --use-distributed-optimizer");
    return MTC_OK;
}
