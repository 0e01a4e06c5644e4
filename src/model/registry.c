/* model/registry.c - the parameter registry; see registry.h. Relies on
 * core/rng.h for layout-invariant initial values. */
#include "model/registry.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/rng.h"

mtc_result_t mtc_registry_init(mtc_registry *reg, int capacity) {
    memset(reg, 0, sizeof *reg);
    void *p;
    MTC_CHECK(mtc_mem_calloc((size_t)capacity, sizeof(mtc_param), &p));
    reg->params = p;
    reg->capacity = capacity;
    reg->tp = 1;
    reg->expert_first = 0, reg->expert_end = INT_MAX;
    return MTC_OK;
}

void mtc_registry_free(mtc_registry *reg) {
    if (!reg) return;
    free(reg->params);
    memset(reg, 0, sizeof *reg);
}

mtc_result_t mtc_registry_add(mtc_registry *reg, const char *name, int layer, int64_t shape0,
                              int64_t shape1, mtc_init_kind init, float init_std) {
    if (reg->count >= reg->capacity)
        return mtc_error(MTC_ERR_INTERNAL, "registry full (%d parameters) adding %s", reg->capacity,
                         name);
    if (strlen(name) >= MTC_PARAM_NAME_MAX)
        return mtc_error(MTC_ERR_INTERNAL, "parameter name too long: %s", name);
    mtc_param *p = &reg->params[reg->count++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = shape1 > 0 ? 2 : 1;
    p->shape[0] = shape0;
    p->shape[1] = shape1 > 0 ? shape1 : 1;
    p->numel = (size_t)shape0 * (size_t)p->shape[1];
    p->layer = layer;
    p->init = init;
    p->init_std = init_std;
    p->is_2d = p->ndim == 2;
    p->split_dim = -1;
    p->expert = -1;
    p->split_blocks = 1;
    p->block_rows[0] = shape0;
    p->local_numel = p->numel;
    return MTC_OK;
}

void mtc_registry_layout(mtc_registry *reg) {
    size_t off = 0, goff = 0;
    for (int i = reg->count - 1; i >= 0; i--) {
        reg->params[i].offset = off;
        reg->params[i].global_offset = goff;
        off += reg->params[i].local_numel;
        goff += reg->params[i].numel;
    }
    reg->total = off;
    reg->global_total = goff;
}

void mtc_registry_split(mtc_registry *reg, int p, int split_dim, int nblocks, const int64_t *rows) {
    mtc_param *q = &reg->params[p];
    MTC_ASSERT(nblocks >= 1 && nblocks <= MTC_PARAM_MAX_BLOCKS);
    q->split_blocks = rows ? nblocks : 1;
    int64_t sum = 0;
    for (int b = 0; b < q->split_blocks; b++)
        sum += q->block_rows[b] = rows ? rows[b] : q->shape[0];
    MTC_ASSERT(sum == q->shape[0]);
    if (reg->tp <= 1) return;
    q->split_dim = split_dim;
    q->local_numel = q->numel / (size_t)reg->tp;
}

void mtc_registry_split_ep(mtc_registry *reg, int first, int end) {
    reg->expert_first = first, reg->expert_end = end, reg->ep_split = 1;
    for (int i = 0; i < reg->count; i++) {
        mtc_param *p = &reg->params[i];
        if (p->expert < 0) continue;
        if (p->expert < first || p->expert >= end) p->local_numel = 0;
        /* the expert buffer's expert-DP reduction holds the TP ranks' partial
         * sums (etp 1 under SP): a TP sum on top would pair other experts */
        p->reduce_groups &= ~(unsigned)MTC_REDUCE_TP;
    }
}

size_t mtc_registry_global_index(const mtc_registry *reg, const mtc_param *p, int rank,
                                 size_t local) {
    if (p->split_dim < 0 || reg->tp <= 1) return local;
    size_t cols = (size_t)p->shape[1], tp = (size_t)reg->tp, r = (size_t)rank;
    if (p->split_dim == 1) { /* columns [r*cols_tp, (r+1)*cols_tp) of every row */
        size_t ct = cols / tp, i = local / ct, j = local % ct;
        return i * cols + r * ct + j;
    }
    /* rows: local block b (block_rows[b]/tp rows) is global rows
     * [start_b + r*bl, start_b + (r+1)*bl) of fused block b */
    size_t row = local / cols, c = local % cols, start = 0;
    for (int b = 0; b < p->split_blocks; b++) {
        size_t bs = (size_t)p->block_rows[b], bl = bs / tp;
        if (row < bl) return (start + r * bl + row) * cols + c;
        row -= bl, start += bs;
    }
    MTC_ASSERT(0 && "local row outside the shard");
    return 0;
}

void mtc_registry_init_local(const mtc_registry *reg, const mtc_param *p, float *dst, size_t first,
                             size_t n, uint64_t seed) {
    if (p->split_dim < 0 || reg->tp <= 1 || p->init != MTC_INIT_NORMAL) {
        mtc_registry_init_range(p, dst, first, n, seed);
        return;
    }
    /* runs of consecutive global elements: a row piece of the local shard */
    size_t run = p->split_dim == 1 ? (size_t)p->shape[1] / (size_t)reg->tp : (size_t)p->shape[1];
    size_t k = 0;
    while (k < n) {
        size_t l = first + k, len = run - l % run;
        if (len > n - k) len = n - k;
        mtc_registry_init_range(p, dst + k, mtc_registry_global_index(reg, p, reg->tp_rank, l), len,
                                seed);
        k += len;
    }
}

int mtc_registry_find(const mtc_registry *reg, const char *name) {
    for (int i = 0; i < reg->count; i++)
        if (!strcmp(reg->params[i].name, name)) return i;
    return -1;
}

const char *mtc_param_stream_name(const char *name) {
    return strncmp(name, "transformer.", 12) ? name : name + 12;
}

void mtc_registry_init_range(const mtc_param *p, float *dst, size_t first, size_t n,
                             uint64_t seed) {
    switch (p->init) {
    case MTC_INIT_NORMAL:
        mtc_rng_fill_normal(dst, n, seed, mtc_rng_stream_of(mtc_param_stream_name(p->name)), first,
                            0.0f, p->init_std);
        break;
    case MTC_INIT_ZEROS: memset(dst, 0, n * sizeof(float)); break;
    case MTC_INIT_ONES:
        for (size_t k = 0; k < n; k++)
            dst[k] = 1.0f;
        break;
    }
}

void mtc_registry_init_params(const mtc_registry *reg, float *params, uint64_t seed) {
    for (int i = 0; i < reg->count; i++) {
        const mtc_param *p = &reg->params[i];
        mtc_registry_init_local(reg, p, params + p->offset, 0, p->local_numel, seed);
    }
}
