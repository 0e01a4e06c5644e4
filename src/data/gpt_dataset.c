/* data/gpt_dataset.c - Megatron's GPTDataset and BlendedDataset index
 * construction; see gpt_dataset.h for the algorithm. Relies on nothing but
 * libc and libm; reads no tokens (source.c does, through the stream). */
#include "data/gpt_dataset.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- numpy's legacy RandomState: MT19937 ---------------------------------------- */

typedef struct {
    uint32_t mt[624];
    int i;
} mt19937;

static void mt_seed(mt19937 *m, uint32_t seed) { /* init_genrand */
    m->mt[0] = seed;
    for (int i = 1; i < 624; i++)
        m->mt[i] = 1812433253u * (m->mt[i - 1] ^ (m->mt[i - 1] >> 30)) + (uint32_t)i;
    m->i = 624;
}

static uint32_t mt_u32(mt19937 *m) {
    if (m->i >= 624) {
        for (int k = 0; k < 624; k++) {
            uint32_t y = (m->mt[k] & 0x80000000u) | (m->mt[(k + 1) % 624] & 0x7fffffffu);
            m->mt[k] = m->mt[(k + 397) % 624] ^ (y >> 1) ^ (y & 1 ? 0x9908b0dfu : 0);
        }
        m->i = 0;
    }
    uint32_t y = m->mt[m->i++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

/* numpy's random_interval: uniform in [0, max] by masked rejection. */
static uint64_t mt_interval(mt19937 *m, uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max, v;
    for (int s = 1; s <= 32; s *= 2)
        mask |= mask >> s;
    if (max <= 0xffffffffu) {
        while ((v = (mt_u32(m) & mask)) > max) {
        }
    } else {
        do {
            uint64_t hi = mt_u32(m);
            v = ((hi << 32) | mt_u32(m)) & mask;
        } while (v > max);
    }
    return v;
}

/* RandomState.shuffle of a 1-D array: Fisher-Yates from the end. */
static void shuffle_i32(mt19937 *m, int32_t *a, uint64_t n) {
    for (uint64_t i = n > 0 ? n - 1 : 0; i > 0; i--) {
        uint64_t j = mt_interval(m, i);
        int32_t t = a[i];
        a[i] = a[j], a[j] = t;
    }
}
static void shuffle_u64(mt19937 *m, uint64_t *a, uint64_t n) {
    for (uint64_t i = n > 0 ? n - 1 : 0; i > 0; i--) {
        uint64_t j = mt_interval(m, i), t = a[i];
        a[i] = a[j], a[j] = t;
    }
}

mtc_result_t data_gpt_numpy_shuffle(uint32_t seed, uint64_t n, uint64_t *out) {
    mt19937 m;
    mt_seed(&m, seed);
    for (uint64_t i = 0; i < n; i++)
        out[i] = i;
    shuffle_u64(&m, out, n);
    return MTC_OK;
}

/* ---- GPTDataset ----------------------------------------------------------------- */

void data_gpt_split_matrix(const double w[3], double b[3][2], int has[3]) {
    double at = 0;
    for (int s = 0; s < 3; s++) {
        b[s][0] = at, at += w[s], b[s][1] = at;
        has[s] = b[s][1] > b[s][0];
    }
}

static mtc_result_t build_split(data_gpt *g, data_gpt_split *sp, const double bounds[2],
                                uint64_t num_samples, int T, uint32_t seed) {
    memset(sp, 0, sizeof *sp);
    int64_t beg = (int64_t)nearbyint(bounds[0] * (double)g->n_seq); /* Python's round() */
    int64_t end = (int64_t)nearbyint(bounds[1] * (double)g->n_seq);
    uint64_t n_docs = end > beg ? (uint64_t)(end - beg) : 0, E = 0;
    for (int64_t d = beg; d < end; d++)
        E += (uint64_t)g->len[d];
    if (E <= 1 || (E - 1) / (uint64_t)T == 0) return MTC_OK; /* no sample: an empty split */
    uint64_t epochs = 1;
    if (num_samples > 0)
        for (uint64_t tokens = E; tokens < num_samples * (uint64_t)T + 1; tokens += E)
            epochs++;
    int separate = 0;
    uint64_t sans_final = 0;
    if (epochs > 1) {
        sans_final = ((epochs - 1) * E - 1) / (uint64_t)T;
        uint64_t from_final = num_samples > sans_final ? num_samples - sans_final : 0;
        uint64_t per_epoch = (E - 1) / (uint64_t)T;
        separate = from_final < (uint64_t)(0.80 * (double)per_epoch);
    }
    mt19937 m;
    mt_seed(&m, seed);
    uint64_t n_idx = epochs * n_docs;
    sp->doc = malloc(n_idx * sizeof *sp->doc);
    if (!sp->doc) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory for a document index");
    for (uint64_t e = 0; e < epochs; e++)
        for (uint64_t d = 0; d < n_docs; d++)
            sp->doc[e * n_docs + d] = (int32_t)(beg + (int64_t)d);
    if (separate) { /* the first epochs together, then the last alone */
        shuffle_i32(&m, sp->doc, (epochs - 1) * n_docs);
        shuffle_i32(&m, sp->doc + (epochs - 1) * n_docs, n_docs);
    } else {
        shuffle_i32(&m, sp->doc, n_idx);
    }
    /* build_sample_idx (drop_last_partial_sequence, add_extra_token_to_sequence) */
    uint64_t n = (epochs * E - 1) / (uint64_t)T;
    sp->sample = malloc(2 * (n + 1) * sizeof *sp->sample);
    sp->order = malloc((n ? n : 1) * sizeof *sp->order);
    if (!sp->sample || !sp->order)
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory for a sample index");
    int64_t di = 0, off = 0;
    sp->sample[0] = 0, sp->sample[1] = 0;
    for (uint64_t k = 1; k <= n; k++) {
        int64_t remaining = T + 1;
        while (remaining != 0) {
            int64_t doc_len = g->len[sp->doc[di]] - off;
            remaining -= doc_len;
            if (remaining <= 0) {
                off += remaining + doc_len - 1;
                remaining = 0;
            } else {
                if ((uint64_t)di == n_idx - 1) { /* the end of the data */
                    off = g->len[sp->doc[di]] - 1;
                    break;
                }
                di++, off = 0;
            }
        }
        sp->sample[2 * k] = di, sp->sample[2 * k + 1] = off;
    }
    for (uint64_t k = 0; k < n; k++)
        sp->order[k] = k;
    if (separate) {
        shuffle_u64(&m, sp->order, sans_final);
        shuffle_u64(&m, sp->order + sans_final, n - sans_final);
    } else {
        shuffle_u64(&m, sp->order, n);
    }
    sp->n = n;
    return MTC_OK;
}

mtc_result_t data_gpt_build(data_gpt *g, const double bounds[3][2], const int has[3],
                            const uint64_t num_samples[3], int T, uint32_t seed) {
    for (int s = 0; s < 3; s++) {
        if (!has[s]) {
            memset(&g->sp[s], 0, sizeof g->sp[s]);
            continue;
        }
        MTC_CHECK(build_split(g, &g->sp[s], bounds[s], num_samples[s], T, seed));
    }
    return MTC_OK;
}

void data_gpt_free(data_gpt *g) {
    if (!g) return;
    for (int s = 0; s < 3; s++)
        free(g->sp[s].doc), free(g->sp[s].sample), free(g->sp[s].order);
    memset(g->sp, 0, sizeof g->sp);
}

size_t data_gpt_read(const data_gpt *g, int split, uint64_t k, int T, data_gpt_reader read,
                     void *ctx, int *tokens) {
    const data_gpt_split *sp = &g->sp[split];
    uint64_t idx = sp->order[k];
    int64_t b = sp->sample[2 * idx], bo = sp->sample[2 * idx + 1];
    int64_t e = sp->sample[2 * idx + 2], eo = sp->sample[2 * idx + 3];
    size_t at = 0, want = (size_t)T + 1;
    for (int64_t i = b; i <= e && at < want; i++) {
        int32_t d = sp->doc[i];
        int64_t from = i == b ? bo : 0;
        int64_t to = i == e ? eo + 1 : g->len[d]; /* eo + 1: the extra token */
        if (to > g->len[d]) to = g->len[d];
        if (to <= from) continue;
        size_t n = (size_t)(to - from) < want - at ? (size_t)(to - from) : want - at;
        read(ctx, g->pos[d] + (uint64_t)from, n, tokens + at);
        at += n;
    }
    return at;
}

/* ---- BlendedDataset ------------------------------------------------------------- */

mtc_result_t data_gpt_blend(const double *w, int nd, uint64_t size, int16_t **dataset,
                            uint64_t **dataset_sample) {
    int16_t *di = malloc((size ? size : 1) * sizeof *di);
    uint64_t *ds = malloc((size ? size : 1) * sizeof *ds);
    int64_t *cur = calloc((size_t)nd, sizeof *cur);
    if (!di || !ds || !cur) {
        free(di), free(ds), free(cur);
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory for the blend's index");
    }
    for (uint64_t k = 0; k < size; k++) {
        double kd = k > 1 ? (double)k : 1.0;
        int best = 0;
        double best_err = w[0] * kd - (double)cur[0];
        for (int d = 1; d < nd; d++) {
            double err = w[d] * kd - (double)cur[d];
            if (err > best_err) best_err = err, best = d;
        }
        di[k] = (int16_t)best, ds[k] = (uint64_t)cur[best]++;
    }
    free(cur);
    *dataset = di, *dataset_sample = ds;
    return MTC_OK;
}
