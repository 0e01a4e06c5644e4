/* train/batch_schedule.h - Megatron's step batch-size schedule
 * (--step-batch-size-schedule, num_microbatches_calculator.py
 * StepBatchsizeNumMicroBatchesCalculator): "THRESHOLD:BS THRESHOLD:BS ..."
 * (spaces or commas between entries; K M B T suffixes = 1e3 1e6 1e9 1e12
 * on either number, value = int(float(digits) * multiplier)). Thresholds
 * are tokens when seq_length > 0 (Megatron always passes --seq-length) and
 * are turned into samples by threshold // seq_length; entries are sorted by
 * threshold, the first must be 0, thresholds strictly increasing, batch
 * sizes > 0. The global batch of an iteration is the batch of the last
 * entry whose threshold <= the samples consumed before it.
 * Pure arithmetic: no allocation, no I/O. Divisibility by micro batch x
 * data-parallel size is the caller's check (mtc_train_validate_layout, for
 * every entry a run reaches). */
#ifndef MTC_TRAIN_BATCH_SCHEDULE_H
#define MTC_TRAIN_BATCH_SCHEDULE_H

#include <stdint.h>

#include "core/result.h"

#define MTC_BATCH_SCHEDULE_MAX 64

typedef struct {
    int n;
    uint64_t threshold[MTC_BATCH_SCHEDULE_MAX]; /* in samples, ascending, [0] == 0 */
    int64_t batch[MTC_BATCH_SCHEDULE_MAX];      /* global batch size from that threshold on */
} mtc_batch_schedule;

/* Parses `text`; seq_length > 0: thresholds in tokens. A malformed entry,
 * a first threshold other than 0, equal thresholds or a batch size <= 0 is
 * MTC_ERR_INVALID_ARGUMENT with one line naming the entry. */
mtc_result_t mtc_batch_schedule_parse(mtc_batch_schedule *s, const char *text, int seq_length);
/* Index of the entry in force after `consumed` samples. */
int mtc_batch_schedule_entry(const mtc_batch_schedule *s, uint64_t consumed);
/* The global batch after `consumed` samples. */
static inline int64_t mtc_batch_schedule_at(const mtc_batch_schedule *s, uint64_t consumed) {
    return s->batch[mtc_batch_schedule_entry(s, consumed)];
}
/* Walks `iters` iterations from `consumed` samples: returns the samples
 * consumed after them; reached (may be NULL, n entries) gets 1 for each
 * entry some of these iterations run with. Closed form per entry. */
uint64_t mtc_batch_schedule_walk(const mtc_batch_schedule *s, uint64_t consumed, int64_t iters,
                                 int *reached);
/* Megatron's update_train_iters for --train-samples N: iterations while
 * consumed < N, each adding the batch in force. */
int64_t mtc_batch_schedule_iters(const mtc_batch_schedule *s, uint64_t train_samples);

#endif
