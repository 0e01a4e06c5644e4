/* data/gpt_dataset.h - Megatron's GPTDataset and BlendedDataset sample
 * order (internal to data/; source.c uses it for Megatron .bin/.idx data).
 *
 * For one indexed dataset of N sequences ("documents" to GPTDataset) and
 * one split [round(b0 N), round(b1 N)) of them, with seed s, sequence
 * length T and a requested number of samples S (0: one epoch):
 *   tokens per epoch E = sum of the split's sequence lengths;
 *   epochs: the fewest with epochs * E >= S * T + 1;
 *   separate final epoch when epochs > 1 and the samples needed from the
 *     last one are fewer than int(0.8 * (E - 1) / T);
 *   document index: the split's sequence ids repeated per epoch and shuffled
 *     by numpy's RandomState(s) (the last epoch shuffled on its own when
 *     separate);
 *   sample index: helpers.cpp build_sample_idx: sample i starts at (document
 *     index position, offset) and takes T + 1 tokens across documents, the
 *     next sample starting at the previous one's last token;
 *   shuffle index: a permutation of the samples by the same RandomState
 *     (with a separate final epoch, [0, samples before it) and the rest
 *     are shuffled apart).
 * Sample k of the split is sample shuffle[k] of the sample index.
 * RandomState is numpy's legacy MT19937 (init_genrand(s)) and its shuffle
 * Fisher-Yates from the end with random_interval's masked rejection.
 * Blend (BlendedDataset, helpers.cpp build_blending_indices): sample k of a
 * blend of size S goes to the dataset whose weight * max(k, 1) exceeds the
 * samples it has given so far by the most (first on ties), and is that
 * dataset's next sample; each dataset is built for
 * ceil(ceil(S * weight) * 1.005) samples.
 * Not modelled: Megatron's index cache files (everything is rebuilt in
 * memory, in milliseconds for small data), --mock-data's MockGPTDataset,
 * blends without weights. */
#ifndef MTC_DATA_GPT_DATASET_H
#define MTC_DATA_GPT_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "core/result.h"

typedef struct {
    int32_t *doc;    /* document index: sequence ids */
    int64_t *sample; /* (n + 1) x 2: (document index position, offset) */
    uint64_t *order; /* shuffle index (n) */
    uint64_t n;      /* samples (0: the split is empty) */
} data_gpt_split;

typedef struct {
    const int32_t *len;  /* sequence lengths (n_seq), owned by the caller */
    const uint64_t *pos; /* first token of each sequence in the stream */
    uint64_t n_seq;
    data_gpt_split sp[3];
} data_gpt;

/* Megatron's split matrix from --split weights (normalized):
 * bookends [0, w0), [w0, w0 + w1), [w0 + w1, w0 + w1 + w2]; has[s] = 0 when
 * split s has none. */
void data_gpt_split_matrix(const double weights[3], double bounds[3][2], int has[3]);
/* Builds every split that has bounds; num_samples[s] 0 = one epoch. */
mtc_result_t data_gpt_build(data_gpt *g, const double bounds[3][2], const int has[3],
                            const uint64_t num_samples[3], int T, uint32_t seed);
void data_gpt_free(data_gpt *g);
/* Reads sample k (< sp[split].n) of a split: its pieces, in order, through
 * read(ctx, stream position, count, out); returns the tokens read (T + 1
 * but past the very end of the data). */
typedef void (*data_gpt_reader)(void *ctx, uint64_t pos, size_t n, int *out);
size_t data_gpt_read(const data_gpt *g, int split, uint64_t k, int T, data_gpt_reader read,
                     void *ctx, int *tokens);

/* build_blending_indices: which dataset and which of its samples. */
mtc_result_t data_gpt_blend(const double *weights, int n_datasets, uint64_t size, int16_t **dataset,
                            uint64_t **dataset_sample);

/* numpy.random.RandomState(seed).shuffle of 0..n-1 (for tests). */
mtc_result_t data_gpt_numpy_shuffle(uint32_t seed, uint64_t n, uint64_t *out);

#endif
