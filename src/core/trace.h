/* core/trace.h - one rank's recorder of what it did: spans (Chrome Trace
 * Event "X" events) on a compute track and two communication tracks, flow
 * arrows from a point-to-point send to its receive, and per-group
 * communication totals (bytes, time, calls) for --metrics.
 *
 * Contract. A recorder belongs to one rank; the comm layer may record from
 * that rank's progress thread too (non-blocking collectives), so recording
 * takes a mutex. Spans are recorded only while the window is open
 * (mtc_trace_window); group totals are kept whenever stats are on. Each
 * event is formatted into text when it is recorded, so writing the file is
 * a copy. Times are CLOCK_MONOTONIC nanoseconds (mtc_time_ns); the file's
 * `ts` are microseconds after the origin every rank of a run agreed on
 * (mtc_trace_set_origin), which aligns the ranks of one process exactly and
 * those of several processes on one host to the skew of a barrier.
 * Does not know about communicators or models: comm/ and train/ call it.
 * Off costs one pointer test per call at the call sites.
 * Memory is bounded (mtc_trace_set_limit, MTC_TRACE_DEFAULT_LIMIT): once the
 * text would pass the bound, that event and every later one are dropped
 * and counted (mtc_trace_dropped), so what is kept is a complete prefix of
 * the rank's events; group totals are kept regardless. */
#ifndef MTC_CORE_TRACE_H
#define MTC_CORE_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "core/result.h"

typedef struct mtc_trace mtc_trace;

typedef enum {
    MTC_TRACK_COMPUTE = 0, /* forward/backward, optimizer, data: the rank's own thread */
    MTC_TRACK_COMM,        /* blocking collectives and point-to-point calls */
    MTC_TRACK_COMM_ASYNC,  /* non-blocking collectives (first track of mtc_trace_new_track) */
    MTC_TRACK_COUNT
} mtc_trace_track;

#define MTC_TRACE_MAX_GROUPS 32
#define MTC_TRACE_DEFAULT_LIMIT ((size_t)256 << 20) /* bytes of event text per rank */

/* The kinds of call a group's totals are split by. */
typedef enum {
    MTC_TRACE_OP_ALL_REDUCE = 0,
    MTC_TRACE_OP_REDUCE_SCATTER,
    MTC_TRACE_OP_ALL_GATHER,
    MTC_TRACE_OP_ALL_TO_ALL,
    MTC_TRACE_OP_P2P,   /* send, recv, sendrecv */
    MTC_TRACE_OP_OTHER, /* broadcast, reduce, barrier */
    MTC_TRACE_NOPS
} mtc_trace_op;
/* "all_reduce", "reduce_scatter", ... */
const char *mtc_trace_op_name(int op);

/* Totals of one communicator name since the last mtc_trace_stats_reset,
 * and the same split by the kind of call. */
typedef struct {
    char name[64];
    uint64_t bytes, ns, calls;
    uint64_t op_bytes[MTC_TRACE_NOPS], op_ns[MTC_TRACE_NOPS], op_calls[MTC_TRACE_NOPS];
} mtc_trace_group_stats;

/* pid = the world rank; process_name as Perfetto shows it ("rank 3 (tp 1 ...)"). */
mtc_result_t mtc_trace_init(mtc_trace **out, int pid, const char *process_name);
void mtc_trace_free(mtc_trace *t); /* NULL: no-op */
void mtc_trace_set_origin(mtc_trace *t, uint64_t origin_ns);
/* At most max_bytes of event text (the names recorded at init always fit);
 * 0: MTC_TRACE_DEFAULT_LIMIT. */
void mtc_trace_set_limit(mtc_trace *t, size_t max_bytes);
/* Events dropped at the limit (or for want of memory) so far. */
uint64_t mtc_trace_dropped(const mtc_trace *t);
/* Open (1) or close (0) the window in which spans are recorded. */
void mtc_trace_window(mtc_trace *t, int open);
int mtc_trace_recording(const mtc_trace *t);

/* A further track (returns its tid, > MTC_TRACK_COMM_ASYNC) named `name`:
 * non-blocking calls of different communicators overlap in time, so each
 * communicator that issues them gets its own. */
int mtc_trace_new_track(mtc_trace *t, const char *name);

/* A complete span [t0_ns, t1_ns] on `track`. args_json: NULL or the inside
 * of a JSON object ("\"mb\": 3, \"chunk\": 0"). Strings are not escaped:
 * names are mtc's own. */
void mtc_trace_span(mtc_trace *t, int track, const char *name, const char *cat, uint64_t t0_ns,
                    uint64_t t1_ns, const char *args_json);
/* Flow arrow ends: start (1, on the sender) or finish (0, on the receiver)
 * of flow `id` at ts_ns, bound to the span enclosing ts_ns on `track`. */
void mtc_trace_flow(mtc_trace *t, mtc_trace_track track, int start, uint64_t id, uint64_t ts_ns);

/* Group totals: added by the comm layer for every call (op: mtc_trace_op). */
void mtc_trace_stats_add(mtc_trace *t, const char *group, int op, uint64_t bytes, uint64_t ns);
void mtc_trace_stats_reset(mtc_trace *t);
/* Number of groups seen; *out points at the recorder's table (valid until free). */
int mtc_trace_stats(const mtc_trace *t, const mtc_trace_group_stats **out);

/* This rank's events as JSON objects separated by ",\n" (no brackets),
 * with its process and thread names first. *len excludes the NUL. The text
 * is the recorder's: valid until the next record or free. */
const char *mtc_trace_events(const mtc_trace *t, size_t *len);

#endif
