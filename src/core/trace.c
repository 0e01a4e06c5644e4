/* core/trace.c - the per-rank event recorder of trace.h: a growable text
 * buffer of Chrome Trace Event objects and a small table of per-group
 * communication totals, both behind one mutex (the rank's thread and its
 * progress threads record). Relies on core/result.h only. Does not write
 * files: train/ gathers every rank's text and writes one document. */
#include "core/trace.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const track_names[MTC_TRACK_COUNT] = {"compute", "communication",
                                                         "communication (non-blocking)"};

struct mtc_trace {
    pthread_mutex_t mu;
    int pid;
    int window;
    uint64_t origin_ns;
    char *text;
    size_t len, cap;
    int oom;      /* a failed growth drops events instead of failing the run */
    size_t limit; /* text bound; once reached, every later event is dropped */
    int full;     /* the bound was reached */
    uint64_t dropped;
    mtc_trace_group_stats groups[MTC_TRACE_MAX_GROUPS];
    int ngroups;
    int ntracks;
};

/* Append one formatted event (caller holds mu). */
static void trace_append(mtc_trace *t, const char *fmt, ...) {
    if (t->full) {
        t->dropped++;
        return;
    }
    size_t len0 = t->len;
    for (int attempt = 0; attempt < 2; attempt++) {
        size_t room = t->cap - t->len;
        va_list ap;
        va_start(ap, fmt);
        int n = t->text ? vsnprintf(t->text + t->len, room, fmt, ap) : -1;
        va_end(ap);
        if (n >= 0 && t->limit && len0 + (size_t)n > t->limit) { /* past the bound */
            t->full = 1, t->dropped++;
            t->text[len0] = 0; /* the kept text stays a whole prefix */
            return;
        }
        if (n >= 0 && (size_t)n < room) {
            t->len += (size_t)n;
            return;
        }
        size_t want = t->cap * 2 + (n > 0 ? (size_t)n : 0) + 4096;
        if (t->limit && want > t->limit + 4096) want = t->limit + 4096; /* all the bound needs */
        char *p = realloc(t->text, want);
        if (!p) {
            t->oom = 1, t->dropped++;
            if (t->text) t->text[t->len] = 0;
            return;
        }
        t->text = p, t->cap = want;
    }
}

mtc_result_t mtc_trace_init(mtc_trace **out, int pid, const char *process_name) {
    *out = NULL;
    mtc_trace *t = calloc(1, sizeof *t);
    if (!t) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "no memory for a trace recorder");
    pthread_mutex_init(&t->mu, NULL);
    t->pid = pid;
    trace_append(t,
                 "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": "
                 "{\"name\": \"%s\"}},\n{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": "
                 "%d, \"tid\": 0, \"args\": {\"sort_index\": %d}}",
                 pid, process_name, pid, pid);
    t->ntracks = MTC_TRACK_COMM_ASYNC;
    t->limit = MTC_TRACE_DEFAULT_LIMIT;
    for (int k = 0; k < MTC_TRACK_COMM_ASYNC; k++)
        trace_append(t,
                     ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                     "\"args\": {\"name\": \"%s\"}}",
                     pid, k, track_names[k]);
    if (!t->text) {
        mtc_trace_free(t);
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "no memory for a trace recorder");
    }
    *out = t;
    return MTC_OK;
}

void mtc_trace_free(mtc_trace *t) {
    if (!t) return;
    pthread_mutex_destroy(&t->mu);
    free(t->text);
    free(t);
}

void mtc_trace_set_origin(mtc_trace *t, uint64_t origin_ns) { t->origin_ns = origin_ns; }

void mtc_trace_set_limit(mtc_trace *t, size_t max_bytes) {
    pthread_mutex_lock(&t->mu);
    t->limit = max_bytes ? max_bytes : MTC_TRACE_DEFAULT_LIMIT;
    if (t->limit < t->len) t->limit = t->len; /* what init recorded stays */
    pthread_mutex_unlock(&t->mu);
}

uint64_t mtc_trace_dropped(const mtc_trace *t) {
    pthread_mutex_lock((pthread_mutex_t *)&t->mu);
    uint64_t n = t->dropped;
    pthread_mutex_unlock((pthread_mutex_t *)&t->mu);
    return n;
}
void mtc_trace_window(mtc_trace *t, int open) {
    pthread_mutex_lock(&t->mu);
    t->window = open;
    pthread_mutex_unlock(&t->mu);
}
int mtc_trace_recording(const mtc_trace *t) { return t && t->window; }

int mtc_trace_new_track(mtc_trace *t, const char *name) {
    pthread_mutex_lock(&t->mu);
    int tid = t->ntracks++;
    trace_append(t,
                 ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                 "\"args\": {\"name\": \"%s: %s\"}}",
                 t->pid, tid, track_names[MTC_TRACK_COMM_ASYNC], name);
    pthread_mutex_unlock(&t->mu);
    return tid;
}

/* Microseconds after the origin (times before it clamp to 0). */
static double trace_us(const mtc_trace *t, uint64_t ns) {
    return ns > t->origin_ns ? (double)(ns - t->origin_ns) * 1e-3 : 0.0;
}

void mtc_trace_span(mtc_trace *t, int track, const char *name, const char *cat, uint64_t t0_ns,
                    uint64_t t1_ns, const char *args_json) {
    pthread_mutex_lock(&t->mu);
    if (t->window) {
        if (t1_ns < t0_ns) t1_ns = t0_ns;
        trace_append(t,
                     ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": "
                     "%d, \"ts\": %.3f, \"dur\": %.3f, \"args\": {%s}}",
                     name, cat, t->pid, (int)track, trace_us(t, t0_ns),
                     (double)(t1_ns - t0_ns) * 1e-3, args_json ? args_json : "");
    }
    pthread_mutex_unlock(&t->mu);
}

void mtc_trace_flow(mtc_trace *t, mtc_trace_track track, int start, uint64_t id, uint64_t ts_ns) {
    pthread_mutex_lock(&t->mu);
    if (t->window)
        trace_append(t,
                     ",\n{\"name\": \"p2p\", \"cat\": \"p2p\", \"ph\": \"%s\", \"id\": %llu, "
                     "\"pid\": %d, \"tid\": %d, \"ts\": %.3f%s}",
                     start ? "s" : "f", (unsigned long long)id, t->pid, (int)track,
                     trace_us(t, ts_ns), start ? "" : ", \"bp\": \"e\"");
    pthread_mutex_unlock(&t->mu);
}

const char *mtc_trace_op_name(int op) {
    static const char *const names[MTC_TRACE_NOPS] = {
        "all_reduce", "reduce_scatter", "all_gather", "all_to_all", "p2p", "other"};
    return op >= 0 && op < MTC_TRACE_NOPS ? names[op] : "other";
}

void mtc_trace_stats_add(mtc_trace *t, const char *group, int op, uint64_t bytes, uint64_t ns) {
    if (op < 0 || op >= MTC_TRACE_NOPS) op = MTC_TRACE_OP_OTHER;
    pthread_mutex_lock(&t->mu);
    int i = 0;
    while (i < t->ngroups && strcmp(t->groups[i].name, group))
        i++;
    if (i == t->ngroups && i < MTC_TRACE_MAX_GROUPS) {
        snprintf(t->groups[i].name, sizeof t->groups[i].name, "%s", group);
        t->ngroups++;
    }
    if (i < t->ngroups) {
        t->groups[i].bytes += bytes;
        t->groups[i].ns += ns;
        t->groups[i].calls++;
        t->groups[i].op_bytes[op] += bytes;
        t->groups[i].op_ns[op] += ns;
        t->groups[i].op_calls[op]++;
    }
    pthread_mutex_unlock(&t->mu);
}

void mtc_trace_stats_reset(mtc_trace *t) {
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->ngroups; i++) {
        char name[sizeof t->groups[i].name];
        memcpy(name, t->groups[i].name, sizeof name);
        memset(&t->groups[i], 0, sizeof t->groups[i]);
        memcpy(t->groups[i].name, name, sizeof name);
    }
    pthread_mutex_unlock(&t->mu);
}

int mtc_trace_stats(const mtc_trace *t, const mtc_trace_group_stats **out) {
    *out = t->groups;
    return t->ngroups;
}

const char *mtc_trace_events(const mtc_trace *t, size_t *len) {
    *len = t->len;
    return t->text;
}
