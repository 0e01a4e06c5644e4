/* train/tensorboard.h - TensorBoard event files, written by mtc (no
 * TensorFlow, no protobuf library): what Megatron's SummaryWriter writes
 * with --tensorboard-dir, scalars only.
 *
 * File: DIR/events.out.tfevents.<seconds>.<host>.<pid>.0, a sequence of
 * TFRecords, each
 *   uint64 length (little-endian) | uint32 masked CRC-32C of the length bytes
 *   | length bytes of data | uint32 masked CRC-32C of the data
 * with mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (TensorFlow's
 * record_writer). Each record's data is a serialized tensorflow.Event:
 *   1 wall_time double | 2 step int64 | 3 file_version string ("brain.Event:2",
 *   the first record) | 5 summary Summary
 * Summary: 1 value (repeated) Value; Value: 1 tag string | 2 simple_value
 * float (tensorboard/compat/proto/{event,summary}.proto).
 * Records are flushed at mtc_tb_flush and close; a crash loses at most the
 * records since the last flush, and a torn last record is what TensorBoard
 * skips (its CRC fails). Does not write histograms, images, text or the
 * newer tensor-typed scalars (TensorBoard reads simple_value as scalars). */
#ifndef MTC_TRAIN_TENSORBOARD_H
#define MTC_TRAIN_TENSORBOARD_H

#include <stdint.h>

#include "core/args.h"
#include "core/result.h"

typedef struct mtc_tb mtc_tb;

/* Megatron's TensorBoard flags (mtc train's table: MTC_TB_CLI_ARGS). */
typedef struct {
    const char *dir;        /* --tensorboard-dir (NULL: no events) */
    int log_interval;       /* --tensorboard-log-interval (default 1) */
    int queue_size;         /* --tensorboard-queue-size (accepted: flushed every log line) */
    int log_timers;         /* --log-timers-to-tensorboard */
    int log_memory;         /* --log-memory-to-tensorboard */
    int log_validation_ppl; /* --log-validation-ppl-to-tensorboard */
    int no_log_loss_scale;  /* --no-log-loss-scale-to-tensorboard */
    int log_world_size;     /* --log-world-size-to-tensorboard */
} mtc_tb_flags;
#define MTC_TB_FLAGS_DEFAULTS                                                                      \
    { NULL, 1, 1000, 0, 0, 0, 0, 0 }
#define MTC_TB_CLI_ARGS(f)                                                                         \
    {"tensorboard-dir",                                                                            \
     NULL,                                                                                         \
     MTC_ARG_STRING,                                                                               \
     &(f).dir,                                                                                     \
     "DIR",                                                                                        \
     "write TensorBoard event files there (Megatron's scalar names)",                              \
     0},                                                                                           \
        {"tensorboard-log-interval",                                                               \
         NULL,                                                                                     \
         MTC_ARG_INT,                                                                              \
         &(f).log_interval,                                                                        \
         "N",                                                                                      \
         "iterations between TensorBoard scalars (default 1)",                                     \
         0},                                                                                       \
        {"tensorboard-queue-size",                                                                 \
         NULL,                                                                                     \
         MTC_ARG_INT,                                                                              \
         &(f).queue_size,                                                                          \
         "N",                                                                                      \
         "accepted; mtc flushes the events at every log line",                                     \
         0},                                                                                       \
        {"log-timers-to-tensorboard",                                                              \
         NULL,                                                                                     \
         MTC_ARG_FLAG,                                                                             \
         &(f).log_timers,                                                                          \
         NULL,                                                                                     \
         "also the --timing-log-level timers (<name>-time), iteration-time and throughput",        \
         0},                                                                                       \
        {"log-memory-to-tensorboard",                                                              \
         NULL,                                                                                     \
         MTC_ARG_FLAG,                                                                             \
         &(f).log_memory,                                                                          \
         NULL,                                                                                     \
         "also mem-allocated-bytes (the rank's buffers), mem-max-allocated-bytes and "             \
         "mem-reserved-bytes (resident set)",                                                      \
         0},                                                                                       \
        {"log-validation-ppl-to-tensorboard", NULL, MTC_ARG_FLAG, &(f).log_validation_ppl, NULL,   \
         "also the validation perplexity",    0},                                                  \
        {"no-log-loss-scale-to-tensorboard",                                                       \
         NULL,                                                                                     \
         MTC_ARG_FLAG,                                                                             \
         &(f).no_log_loss_scale,                                                                   \
         NULL,                                                                                     \
         "no loss-scale scalar",                                                                   \
         0},                                                                                       \
    {                                                                                              \
        "log-world-size-to-tensorboard", NULL, MTC_ARG_FLAG, &(f).log_world_size, NULL,            \
            "also world-size", 0                                                                   \
    }

/* Before any work: creates dir (and parents) when missing and checks it is a
 * writable folder (INVALID_ARGUMENT naming it). */
mtc_result_t mtc_tb_check_dir(const char *dir);
/* Creates dir (and parents) when missing and opens a new event file there;
 * INVALID_ARGUMENT naming the folder when it cannot be made or written. */
mtc_result_t mtc_tb_open(const char *dir, mtc_tb **out);
/* One scalar event (Megatron's writer.add_scalar(tag, value, step)). */
mtc_result_t mtc_tb_scalar(mtc_tb *w, const char *tag, double value, int64_t step);
mtc_result_t mtc_tb_flush(mtc_tb *w);
/* The file's path (for the log). */
const char *mtc_tb_path(const mtc_tb *w);
/* Flushes and closes; NULL is a no-op. */
mtc_result_t mtc_tb_close(mtc_tb *w);

#endif
