/* comm/comm_trace.c - what a traced call leaves in the rank's recorder
 * (core/trace.h): a span on the communication track (blocking calls) or the
 * non-blocking track (the progress thread), named by the operation, with the
 * group's name and members, its sequence number, the bytes, the algorithm
 * and nccl-tests' bus bandwidth; for point-to-point calls the flow arrow
 * ends; and the group's running totals.
 *
 * Flow ids: the n-th send from world rank a to world rank b on a
 * communicator matches b's n-th receive from a (sends are matched in order
 * per pair and communicator), so both ends compute the same id from
 * (group name, a, b, n) without talking. Called from coll.c (collectives)
 * and comm.c (mtc_send / mtc_recv / mtc_sendrecv) only when a recorder is
 * attached. Does not time anything itself: the caller passes the start. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "core/timer.h"
#include "core/trace.h"

static size_t sum_counts(const size_t *v, int n) {
    size_t s = 0;
    for (int i = 0; v && i < n; i++)
        s += v[i];
    return s;
}

/* Bytes of the call as nccl-tests counts them (the large buffer), and the
 * factor from algorithm bandwidth to bus bandwidth. */
static size_t coll_bytes(const mtc_comm_t comm, const comm_op *op, double *bus_factor) {
    size_t es = mtc_dtype_size(op->dtype), n = (size_t)comm->size;
    double p = (double)comm->size;
    *bus_factor = p > 1 ? (p - 1) / p : 0;
    switch (op->kind) {
    case MTC_COLL_ALL_REDUCE: *bus_factor *= 2; return op->count * es;
    case MTC_COLL_REDUCE_SCATTER:
    case MTC_COLL_ALL_GATHER:
    case MTC_COLL_ALL_TO_ALL: return op->count * n * es;
    case MTC_COLL_REDUCE_SCATTER_V:
    case MTC_COLL_ALL_GATHER_V: return op->count * es;
    case MTC_COLL_ALL_TO_ALL_V: return sum_counts(op->sendcounts, comm->size) * es;
    case MTC_COLL_BROADCAST:
    case MTC_COLL_REDUCE: *bus_factor = p > 1 ? 1 : 0; return op->count * es;
    default: *bus_factor = 0; return 0;
    }
}

/* The kind of call the group totals file it under. */
static int trace_op(int kind) {
    switch (kind) {
    case MTC_COLL_ALL_REDUCE: return MTC_TRACE_OP_ALL_REDUCE;
    case MTC_COLL_REDUCE_SCATTER:
    case MTC_COLL_REDUCE_SCATTER_V: return MTC_TRACE_OP_REDUCE_SCATTER;
    case MTC_COLL_ALL_GATHER:
    case MTC_COLL_ALL_GATHER_V: return MTC_TRACE_OP_ALL_GATHER;
    case MTC_COLL_ALL_TO_ALL:
    case MTC_COLL_ALL_TO_ALL_V: return MTC_TRACE_OP_ALL_TO_ALL;
    case MTC_COLL_SEND:
    case MTC_COLL_RECV:
    case MTC_COLL_SENDRECV: return MTC_TRACE_OP_P2P;
    default: return MTC_TRACE_OP_OTHER;
    }
}

/* "0 1 2 3": the group's world ranks (cut at the buffer's end). */
static void members_text(const mtc_comm_t comm, char *buf, size_t len) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < comm->size && k + 12 < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%d", i ? " " : "", comm->members[i]);
}

void comm_trace_coll(mtc_comm_t comm, struct mtc_trace *tr, const comm_op *op, mtc_algo_t algo,
                     uint64_t t0_ns) {
    uint64_t t1 = mtc_time_ns();
    double bus_factor;
    size_t bytes = coll_bytes(comm, op, &bus_factor);
    if (op->kind < MTC_COLL_COUNT)
        mtc_trace_stats_add(tr, comm->name, trace_op(op->kind), bytes, t1 - t0_ns);
    if (!mtc_trace_recording(tr)) return;
    char members[256], args[512];
    members_text(comm, members, sizeof members);
    double s = (double)(t1 - t0_ns) * 1e-9;
    double busbw = s > 0 ? (double)bytes * bus_factor / s * 1e-9 : 0;
    snprintf(args, sizeof args,
             "\"group\": \"%s\", \"ranks\": \"%s\", \"seq\": %llu, \"bytes\": %zu, \"dtype\": "
             "\"%s\", \"algo\": \"%s\", \"busbw_GBps\": %.3f",
             comm->name, members, (unsigned long long)comm->seq, bytes, mtc_dtype_name(op->dtype),
             comm->size > 1 ? mtc_algo_name(algo) : "local", busbw);
    int track = MTC_TRACK_COMM;
    if (op->queued) { /* the progress thread: one track per communicator */
        if (!comm->trace_track) comm->trace_track = mtc_trace_new_track(tr, comm->name);
        track = comm->trace_track;
    }
    mtc_trace_span(tr, track, mtc_coll_name((mtc_coll_t)op->kind), "comm", t0_ns, t1, args);
}

/* FNV-1a over (name, from, to, n), kept to 53 bits (JSON numbers). */
static uint64_t flow_id(const char *name, int from, int to, uint64_t n) {
    uint64_t h = 1469598103934665603ull;
    for (const char *c = name; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    uint64_t v[3] = {(uint64_t)(unsigned)from, (uint64_t)(unsigned)to, n};
    for (int i = 0; i < 3; i++)
        for (int b = 0; b < 8; b++)
            h = (h ^ ((v[i] >> (8 * b)) & 0xff)) * 1099511628211ull;
    return h & ((1ull << 53) - 1);
}

void comm_trace_p2p(mtc_comm_t comm, struct mtc_trace *tr, int kind, size_t bytes, int dst, int src,
                    uint64_t t0_ns) {
    uint64_t t1 = mtc_time_ns();
    if (!comm->p2p_n) {
        comm->p2p_n = calloc((size_t)comm->size * 2, sizeof *comm->p2p_n);
        if (!comm->p2p_n) return; /* no arrows rather than a failed run */
    }
    int me = comm->members[comm->rank];
    uint64_t out_id = 0, in_id = 0;
    if (dst >= 0) out_id = flow_id(comm->name, me, comm->members[dst], comm->p2p_n[dst]++);
    if (src >= 0)
        in_id = flow_id(comm->name, comm->members[src], me, comm->p2p_n[comm->size + src]++);
    mtc_trace_stats_add(tr, comm->name, MTC_TRACE_OP_P2P, bytes, t1 - t0_ns);
    if (!mtc_trace_recording(tr)) return;
    char args[384];
    int n = snprintf(args, sizeof args, "\"group\": \"%s\", \"bytes\": %zu", comm->name, bytes);
    if (dst >= 0)
        n += snprintf(args + n, sizeof args - (size_t)n, ", \"dst\": %d, \"flow_out\": %llu",
                      comm->members[dst], (unsigned long long)out_id);
    if (src >= 0)
        snprintf(args + n, sizeof args - (size_t)n, ", \"src\": %d, \"flow_in\": %llu",
                 comm->members[src], (unsigned long long)in_id);
    mtc_trace_span(tr, MTC_TRACK_COMM, mtc_coll_name((mtc_coll_t)kind), "p2p", t0_ns, t1, args);
    uint64_t mid = t0_ns + (t1 - t0_ns) / 2;
    if (dst >= 0) mtc_trace_flow(tr, MTC_TRACK_COMM, 1, out_id, mid);
    if (src >= 0) mtc_trace_flow(tr, MTC_TRACK_COMM, 0, in_id, mid);
}
