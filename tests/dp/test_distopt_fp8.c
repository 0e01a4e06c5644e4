/* tests/dp/test_distopt_fp8.c - the fp8 parameter all-gather
 * (dp/distopt_fp8.h) on dp = 1, 2, 3, 4 shm rank-threads, for the delayed,
 * tensorwise and blockwise casts, one bucket and small buckets: every rank's
 * gathered copy equals, value for value, the quantize-then-dequantize of the
 * whole parameter (nn_fp8_qdq with the whole tensor's scale, or
 * nn_fp8_qdq_blocks over its 128x128 blocks: blocks that straddle two
 * owners included), and the other params their bf16 values; the owners'
 * clipped counts add up to the whole tensor's; the delayed cast records the
 * whole tensor's amax; the bytes moved are one per fp8 value (plus the
 * bf16 params' two and the padding), not the two of a bf16 gather. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "dp/distopt.h"
#include "dp/distopt_fp8.h"
#include "nn/fp8.h"
#include "nn/nn.h"
#include "test.h"

/* Weights straddle shard and bucket boundaries; 200 x 150 has edge blocks. */
static const struct {
    const char *name;
    int64_t s0, s1;
    int fp8;
} P[] = {
    {"wte.weight", 40, 24, 0},        {"h.0.attn.qkv.weight", 200, 150, 1},
    {"h.0.attn.qkv.bias", 200, 0, 0}, {"h.0.mlp.fc1.weight", 64, 130, 1},
    {"h.0.ln.weight", 33, 0, 0},      {"h.0.mlp.fc2.weight", 130, 64, 1},
};
#define NP ((int)(sizeof P / sizeof P[0]))

/* Values spread over many binades (some beyond E4M3's range at scale 1),
 * rounded to bf16 as the compute copy holds them. */
static float val(int p, int64_t i) {
    uint32_t h = (uint32_t)(p * 2654435761u) ^ (uint32_t)(i * 40503u + 17u);
    h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
    float m = (float)(h & 0xffff) / 65536.0f - 0.5f;
    float v = ldexpf(m, (int)((h >> 16) % 24) - 14);
    if (p == 5 && i == 77) v = 900.0f; /* clipped at scale 1 (delayed) */
    return mtc_bf16_to_f32(mtc_f32_to_bf16(v));
}

typedef struct {
    mtc_distopt_fp8_mode mode;
    int64_t bucket;
} fcase;

static mtc_result_t check(mtc_comm_t world, const fcase *c) {
    int r = mtc_comm_rank(world), dp = mtc_comm_size(world);
    mtc_registry reg;
    MTC_CHECK(mtc_registry_init(&reg, NP));
    for (int p = 0; p < NP; p++)
        MTC_CHECK(mtc_registry_add(&reg, P[p].name, 0, P[p].s0, P[p].s1, MTC_INIT_ZEROS, 0.0f));
    mtc_registry_layout(&reg);
    mtc_ddp_config cfg = {.use_distopt = 1, .bucket_size = c->bucket};
    mtc_ddp_comms comms = {.dp = world, .intra = world};
    mtc_ddp *d;
    mtc_distopt *o;
    MTC_CHECK(mtc_ddp_init(&reg, &cfg, &comms, NULL, NULL, &d));
    MTC_CHECK(mtc_distopt_init(d, 0, &o));
    mtc_ddp_assign_offsets(d, &reg);
    size_t N = (size_t)d->layout.numel;
    float *copy = malloc(N * sizeof(float)), *want = calloc(N, sizeof(float));
    T_CHECK(copy && want);
    /* what a rank does not own is garbage until the gather fills it */
    for (size_t e = 0; e < N; e++)
        copy[e] = NAN;
    for (int k = 0; k < o->npieces; k++)
        for (int64_t e = o->pieces[k].start; e < o->pieces[k].start + o->pieces[k].n; e++)
            copy[e] = 0.0f;
    float scale[NP], slot[NP];
    mtc_distopt_fp8_weight w[NP];
    int nw = 0;
    double want_clip = 0;
    for (int p = 0; p < NP; p++) {
        const mtc_param *q = &reg.params[p];
        size_t n = q->numel;
        float *x = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            x[i] = val(p, (int64_t)i);
        for (int k = 0; k < o->npieces; k++) /* the owned pieces */
            if (o->pieces[k].param == p)
                for (int64_t e = o->pieces[k].start; e < o->pieces[k].start + o->pieces[k].n; e++)
                    copy[e] = x[e - (int64_t)q->offset];
        float *y = want + q->offset;
        scale[p] = 1.0f, slot[p] = 0.0f;
        if (!P[p].fp8) {
            memcpy(y, x, n * sizeof(float));
        } else {
            float amax = nn_fp8_amax(x, n), s = 1.0f, mn = INFINITY, mx = 0;
            if (c->mode == MTC_DISTOPT_FP8_DELAYED) s = scale[p] = p == 1 ? 0.5f : 1.0f;
            if (c->mode == MTC_DISTOPT_FP8_TENSORWISE)
                s = nn_fp8_scale_from_amax(amax, 448.0f, 0, FLT_MAX);
            if (c->mode == MTC_DISTOPT_FP8_BLOCKWISE)
                want_clip +=
                    (double)nn_fp8_qdq_blocks(NN_FP8_E4M3, NN_FP8_BLOCK_POW2, y, x, (int)P[p].s0,
                                              (int)P[p].s1, 128, 128, 0, (int)P[p].s0, &mn, &mx);
            else
                want_clip += (double)nn_fp8_qdq(NN_FP8_E4M3, y, x, n, s, 1.0f / s);
            w[nw++] = (mtc_distopt_fp8_weight){.param = p,
                                               .rows = (int)P[p].s0,
                                               .cols = (int)P[p].s1,
                                               .scale = &scale[p],
                                               .amax_slot = &slot[p]};
            slot[p] = c->mode == MTC_DISTOPT_FP8_DELAYED ? -amax : 0; /* the want, for now */
        }
        free(x);
    }
    float want_slot[NP];
    for (int p = 0; p < NP; p++)
        want_slot[p] = -slot[p], slot[p] = 0.0f;
    mtc_distopt_gather_into(o, copy);
    mtc_distopt_fp8 *f;
    MTC_CHECK(mtc_distopt_fp8_init(o, c->mode, w, nw, NULL, &f));
    MTC_CHECK(mtc_distopt_fp8_gather(f));
    int bad = 0;
    for (int p = 0; p < NP; p++) {
        const mtc_param *q = &reg.params[p];
        for (size_t i = 0; i < q->numel; i++) {
            float g = copy[q->offset + i], v = want[q->offset + i];
            if (memcmp(&g, &v, 4) && bad++ < 4)
                fprintf(stderr, "mode %d dp %d rank %d bucket %lld: %s[%zu] = %.9g, want %.9g\n",
                        c->mode, dp, r, (long long)c->bucket, P[p].name, i, g, v);
        }
        if (c->mode == MTC_DISTOPT_FP8_DELAYED && P[p].fp8)
            T_CHECKF(slot[p] == want_slot[p], "%s: delayed amax %g, want %g", P[p].name, slot[p],
                     want_slot[p]);
    }
    T_CHECKF(bad == 0, "mode %d dp %d bucket %lld: %d values differ from the whole tensor's qdq",
             c->mode, dp, (long long)c->bucket, bad);
    double clip = f->clipped;
    MTC_CHECK(mtc_all_reduce(&clip, &clip, 1, MTC_DTYPE_F64, MTC_OP_SUM, world));
    T_CHECKF(clip == want_clip, "mode %d dp %d: clipped %g, want %g", c->mode, dp, clip, want_clip);
    if (c->mode == MTC_DISTOPT_FP8_DELAYED) T_CHECK(want_clip > 0);
    /* bytes: each bucket's largest encoded shard x dp; at least the fp8 values' one byte and
     * the others' two, within a bucket's padding of it; bf16 would move two per element */
    int64_t fp8n = 0, other = 0;
    for (int p = 0; p < NP; p++)
        *(P[p].fp8 ? &fp8n : &other) += (int64_t)reg.params[p].numel;
    T_CHECK(f->fp8_values == fp8n);
    T_CHECK(f->bf16_bytes == 2 * N);
    size_t bytes = 0; /* each bucket: dp x its largest shard's encoding, rounded up to even */
    for (int b = 0; b < d->layout.nbuckets; b++) {
        int64_t s0 = d->layout.bucket[b].start, sh = (d->layout.bucket[b].end - s0) / dp;
        size_t most = 0;
        for (int k = 0; k < dp; k++) {
            size_t n = 0;
            for (int64_t e = s0 + k * sh; e < s0 + (k + 1) * sh; e++) {
                int is8 = 0;
                for (int p = 0; p < NP; p++)
                    is8 |= P[p].fp8 && e >= (int64_t)reg.params[p].offset &&
                           e < (int64_t)(reg.params[p].offset + reg.params[p].numel);
                n += is8 ? 1 : 2;
            }
            most = n > most ? n : most;
        }
        bytes += (most + 1) / 2 * 2 * (size_t)dp;
    }
    T_CHECKF(f->gather_bytes == bytes, "dp %d bucket %lld: %zu gather bytes, want %zu", dp,
             (long long)c->bucket, f->gather_bytes, bytes);
    if (c->bucket == 0 && dp <= 2) /* one balanced bucket: close to one byte a value */
        T_CHECKF((double)f->gather_bytes < 0.6 * (double)f->bf16_bytes, "%zu of %zu bytes",
                 f->gather_bytes, f->bf16_bytes);
    if (r == 0 && c->bucket == 0 && c->mode == MTC_DISTOPT_FP8_TENSORWISE)
        printf("dp %d: %zu bytes gathered for %lld fp8 + %lld bf16 values (bf16 gather: %zu)\n", dp,
               f->gather_bytes, (long long)fp8n, (long long)other, f->bf16_bytes);
    free(copy), free(want);
    mtc_distopt_free(o); /* frees f */
    mtc_ddp_free(d);
    mtc_registry_free(&reg);
    return MTC_OK;
}

static mtc_result_t rank_main(mtc_comm_t world, void *arg) {
    (void)arg;
    for (int m = 0; m < 3; m++)
        for (int b = 0; b < 2; b++) {
            fcase c = {(mtc_distopt_fp8_mode)m, b ? 5000 : 0};
            MTC_CHECK(check(world, &c));
        }
    return MTC_OK;
}

int main(void) {
    static const int dps[] = {1, 2, 3, 4};
    for (int j = 0; j < 4; j++) {
        mtc_launch_opts o = {.backend = MTC_BACKEND_SHM, .world_size = dps[j], .timeout_s = 60};
        mtc_result_t rc = mtc_launch(&o, rank_main, NULL);
        T_CHECKF(rc == MTC_OK, "dp %d: %s %s", dps[j], mtc_result_name(rc), mtc_error_detail());
    }
    return T_DONE();
}
