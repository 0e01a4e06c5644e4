/* train/batch_schedule.c - Megatron's step batch-size schedule: parsing
 * (StepBatchsizeNumMicroBatchesCalculator._parse_schedule and
 * _validate_schedule), the batch in force and walks over iterations; see
 * batch_schedule.h. Does not know the layout (the caller checks micro batch
 * x data-parallel divisibility). */
#include "train/batch_schedule.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Megatron's _parse_numeric_value: int(float(digits) * multiplier), the
 * multiplier from a K/M/B/T suffix (either case). 0 on success. */
static int parse_value(const char *s, size_t n, double *out) {
    char buf[64];
    while (n && isspace((unsigned char)*s))
        s++, n--;
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, s, n);
    buf[n] = 0;
    double mult = 1;
    switch (toupper((unsigned char)buf[n - 1])) {
    case 'T': mult = 1e12; break;
    case 'B': mult = 1e9; break;
    case 'M': mult = 1e6; break;
    case 'K': mult = 1e3; break;
    default: break;
    }
    if (mult != 1) buf[--n] = 0;
    char *end = NULL;
    double v = strtod(buf, &end);
    if (n == 0 || end != buf + n || !isfinite(v)) return -1;
    v = trunc(v * mult);
    if (!(fabs(v) < 9e18)) return -1;
    *out = v;
    return 0;
}

mtc_result_t mtc_batch_schedule_parse(mtc_batch_schedule *s, const char *text, int seq_length) {
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    memset(s, 0, sizeof *s);
    double thr[MTC_BATCH_SCHEDULE_MAX], bs[MTC_BATCH_SCHEDULE_MAX];
    const char *p = text ? text : "";
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n')
            p++;
        if (!*p) break;
        const char *e = p;
        while (*e && *e != ' ' && *e != ',' && *e != '\t' && *e != '\n')
            e++;
        int len = (int)(e - p);
        const char *colon = memchr(p, ':', (size_t)len);
        if (!colon)
            return mtc_error(E,
                             "step-batch-size-schedule entry \"%.*s\" has no ':' (expected "
                             "THRESHOLD:BATCH_SIZE, e.g. \"0:16 2.4B:32\")",
                             len, p);
        if (s->n == MTC_BATCH_SCHEDULE_MAX)
            return mtc_error(E, "step-batch-size-schedule has more than %d entries",
                             MTC_BATCH_SCHEDULE_MAX);
        double t, b;
        if (parse_value(p, (size_t)(colon - p), &t) ||
            parse_value(colon + 1, (size_t)(e - colon - 1), &b))
            return mtc_error(E,
                             "step-batch-size-schedule entry \"%.*s\" is not a number:number "
                             "(suffixes K M B T allowed, e.g. \"2.4B:320\")",
                             len, p);
        /* tokens -> samples (Python's // on the integer) */
        if (seq_length > 0) t = floor(t / seq_length);
        int k = s->n++;
        while (k > 0 && thr[k - 1] > t) /* stable insertion: Python's sort */
            thr[k] = thr[k - 1], bs[k] = bs[k - 1], k--;
        thr[k] = t, bs[k] = b;
        p = e;
    }
    if (s->n == 0) return mtc_error(E, "step-batch-size-schedule is empty (give \"0:BATCH ...\")");
    const char *unit = seq_length > 0 ? " samples (threshold tokens // seq-length)" : " samples";
    if (thr[0] != 0)
        return mtc_error(E,
                         "step-batch-size-schedule: the first threshold must be 0, got %.0f%s "
                         "(start the schedule with \"0:BATCH\")",
                         thr[0], unit);
    for (int i = 1; i < s->n; i++)
        if (!(thr[i] > thr[i - 1]))
            return mtc_error(E,
                             "step-batch-size-schedule thresholds must be strictly increasing, "
                             "got %.0f twice%s",
                             thr[i], unit);
    for (int i = 0; i < s->n; i++) {
        if (!(bs[i] > 0) || bs[i] > 2147483647.0)
            return mtc_error(E,
                             "step-batch-size-schedule batch size %.0f must be in [1, 2^31) (at "
                             "threshold %.0f%s)",
                             bs[i], thr[i], unit);
        s->threshold[i] = (uint64_t)thr[i], s->batch[i] = (int64_t)bs[i];
    }
    return MTC_OK;
}

int mtc_batch_schedule_entry(const mtc_batch_schedule *s, uint64_t consumed) {
    int e = 0;
    while (e + 1 < s->n && consumed >= s->threshold[e + 1])
        e++;
    return e;
}

uint64_t mtc_batch_schedule_walk(const mtc_batch_schedule *s, uint64_t consumed, int64_t iters,
                                 int *reached) {
    if (reached) memset(reached, 0, (size_t)s->n * sizeof(int));
    while (iters > 0) {
        int e = mtc_batch_schedule_entry(s, consumed);
        uint64_t b = (uint64_t)s->batch[e];
        if (reached) reached[e] = 1;
        /* iterations at this batch until the next threshold (or the end) */
        int64_t k = iters;
        if (e + 1 < s->n) {
            uint64_t need = (s->threshold[e + 1] - consumed + b - 1) / b;
            if ((uint64_t)k > need) k = (int64_t)need;
        }
        consumed += (uint64_t)k * b, iters -= k;
    }
    return consumed;
}

int64_t mtc_batch_schedule_iters(const mtc_batch_schedule *s, uint64_t train_samples) {
    int64_t iters = 0;
    uint64_t consumed = 0;
    while (consumed < train_samples) {
        int e = mtc_batch_schedule_entry(s, consumed);
        uint64_t b = (uint64_t)s->batch[e];
        uint64_t stop = e + 1 < s->n && s->threshold[e + 1] < train_samples ? s->threshold[e + 1]
                                                                            : train_samples;
        uint64_t k = (stop - consumed + b - 1) / b; /* iterations until consumed >= stop */
        consumed += k * b, iters += (int64_t)k;
    }
    return iters;
}
