/* tests/train/test_batch_schedule.c - Megatron's step batch-size schedule
 * parser and walks (train/batch_schedule.h) against values worked out by
 * hand from num_microbatches_calculator.py: suffixes (int(float(x) * 1eN)),
 * tokens // seq_length, sorting, the three refusals, the batch in force,
 * update_train_iters' loop and the samples consumed after N iterations
 * (checked against a plain per-iteration loop too). */
#include <string.h>

#include "test.h"
#include "train/batch_schedule.h"

/* The per-iteration loop the closed forms must match. */
static uint64_t walk_loop(const mtc_batch_schedule *s, uint64_t consumed, int64_t iters) {
    for (int64_t i = 0; i < iters; i++)
        consumed += (uint64_t)mtc_batch_schedule_at(s, consumed);
    return consumed;
}

static int64_t iters_loop(const mtc_batch_schedule *s, uint64_t n) {
    int64_t it = 0;
    for (uint64_t c = 0; c < n; it++)
        c += (uint64_t)mtc_batch_schedule_at(s, c);
    return it;
}

int main(void) {
    mtc_batch_schedule s;
    /* GPT-3's example, thresholds in tokens with seq-length 2048 */
    T_CHECK(mtc_batch_schedule_parse(&s, "0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536",
                                     2048) == MTC_OK);
    T_CHECK(s.n == 6);
    T_CHECK(s.threshold[0] == 0 && s.batch[0] == 16);
    T_CHECK(s.threshold[1] == 2400000000ull / 2048); /* 1171875 */
    T_CHECK(s.threshold[1] == 1171875 && s.batch[1] == 320);
    T_CHECK(s.threshold[5] == 12000000000ull / 2048 && s.batch[5] == 1536);
    T_CHECK(mtc_batch_schedule_at(&s, 0) == 16);
    T_CHECK(mtc_batch_schedule_at(&s, 1171874) == 16);
    T_CHECK(mtc_batch_schedule_at(&s, 1171875) == 320);
    T_CHECK(mtc_batch_schedule_at(&s, (uint64_t)1e12) == 1536);
    /* samples (no seq_length), commas, lower-case suffix, unsorted input */
    T_CHECK(mtc_batch_schedule_parse(&s, " 1.5k:8,0:4  3K:16 ", 0) == MTC_OK);
    T_CHECK(s.n == 3 && s.threshold[0] == 0 && s.threshold[1] == 1500 && s.threshold[2] == 3000);
    T_CHECK(s.batch[0] == 4 && s.batch[1] == 8 && s.batch[2] == 16);
    /* a batch size with a suffix, as Megatron's parser allows */
    T_CHECK(mtc_batch_schedule_parse(&s, "0:1K", 0) == MTC_OK && s.batch[0] == 1000);
    /* refusals */
    T_CHECK(mtc_batch_schedule_parse(&s, "16:4 32:8", 0) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(mtc_batch_schedule_parse(&s, "0:4 8:8 8:16", 0) == MTC_ERR_INVALID_ARGUMENT);
    /* 100 and 110 tokens are both sample 6 at seq-length 16: not increasing */
    T_CHECK(mtc_batch_schedule_parse(&s, "0:4 100:8 110:16", 16) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(mtc_batch_schedule_parse(&s, "0:4 100:8 140:16", 16) == MTC_OK);
    T_CHECK(mtc_batch_schedule_parse(&s, "0:0", 0) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(mtc_batch_schedule_parse(&s, "0:-4", 0) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(mtc_batch_schedule_parse(&s, "0-4", 0) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(mtc_batch_schedule_parse(&s, "0:4 x:8", 0) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(mtc_batch_schedule_parse(&s, "0:4Q", 0) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(mtc_batch_schedule_parse(&s, "", 0) == MTC_ERR_INVALID_ARGUMENT);
    /* walks: "0:4 12:8" in samples: 0 4 8 12 | 20 28 ... */
    T_CHECK(mtc_batch_schedule_parse(&s, "0:4 192:8", 16) == MTC_OK);
    T_CHECK(s.threshold[1] == 12);
    int reached[MTC_BATCH_SCHEDULE_MAX];
    T_CHECK(mtc_batch_schedule_walk(&s, 0, 3, reached) == 12 && reached[0] && !reached[1]);
    T_CHECK(mtc_batch_schedule_walk(&s, 0, 5, reached) == 28 && reached[0] && reached[1]);
    T_CHECK(mtc_batch_schedule_walk(&s, 12, 2, reached) == 28 && !reached[0] && reached[1]);
    T_CHECK(mtc_batch_schedule_iters(&s, 28) == 5);
    T_CHECK(mtc_batch_schedule_iters(&s, 27) == 5);
    T_CHECK(mtc_batch_schedule_iters(&s, 12) == 3);
    T_CHECK(mtc_batch_schedule_iters(&s, 13) == 4);
    T_CHECK(mtc_batch_schedule_iters(&s, 1) == 1);
    /* a threshold that is not a multiple of the batch: 0 3 6 9 (>= 8) 14 ... */
    T_CHECK(mtc_batch_schedule_parse(&s, "0:3 8:5 30:7", 0) == MTC_OK);
    for (int64_t n = 0; n < 60; n++)
        for (uint64_t c0 = 0; c0 < 40; c0 += 3)
            T_CHECKF(mtc_batch_schedule_walk(&s, c0, n, NULL) == walk_loop(&s, c0, n),
                     "from %llu, %lld iterations", (unsigned long long)c0, (long long)n);
    for (uint64_t n = 1; n < 200; n++)
        T_CHECKF(mtc_batch_schedule_iters(&s, n) == iters_loop(&s, n), "train-samples %llu",
                 (unsigned long long)n);
    T_CHECK(mtc_batch_schedule_walk(&s, 0, 4, NULL) == 14); /* 3+3+3+5 */
    /* a large run stays closed-form: 500000 iterations of GPT-3's schedule */
    T_CHECK(mtc_batch_schedule_parse(&s, "0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536",
                                     2048) == MTC_OK);
    T_CHECK(mtc_batch_schedule_walk(&s, 0, 500000, NULL) == walk_loop(&s, 0, 500000));
    return T_DONE();
}
