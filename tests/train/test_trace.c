/* tests/train/test_trace.c - the trace and timers of a pipelined,
 * interleaved, tensor- and data-parallel run (world 8: tp 2, pp 2, vpp 2,
 * dp 2, overlapped gradient reduction) trained in-process on shm:
 *   - the file is one JSON document in the Trace Event Format: every event
 *     has name/ph/pid/tid, every X event ts and dur >= 0, every rank a
 *     process_name naming its coordinates;
 *   - on every (rank, track) the spans nest (no partial overlap);
 *   - every rank ran K * m * vpp training forwards and as many backwards,
 *     one span each with its microbatch and chunk;
 *   - every flow start (a send) has exactly one finish (its receive) and
 *     the reverse, and each pipeline send span's flow_out equals the
 *     flow_in of a receive span on the rank it names;
 *   - on each group instance (name + member list) every member issued the
 *     same collectives (operation, bytes) in the same order;
 *   - the timer spans directly inside each iteration cover it within 5%;
 *   - the log has the timer block and the measured bubble.
 * And a run with neither --trace nor --metrics writes no file; and the
 * recorder's memory bound: past it every event is dropped and counted, the
 * kept text is a whole prefix (valid JSON once bracketed) within the bound,
 * and the group totals go on counting. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cJSON.h"
#include "comm/comm.h"
#include "core/trace.h"
#include "data/data.h"
#include "test.h"
#include "train/train.h"

enum { W = 8, K = 3, MB = 4, VPP = 2 };

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    fclose(f);
    return s;
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}
static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

typedef struct {
    const cJSON *e;
    double ts, end;
} span;

static int by_start(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return x->end > y->end ? -1 : x->end < y->end; /* the outer one first */
}

/* Spans of (pid, tid) sorted by start; returns the count. */
static int spans_of(const cJSON *events, int pid, int tid, span *out, int max) {
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        if (strcmp(str(e, "ph"), "X") || num(e, "pid") != pid || num(e, "tid") != tid) continue;
        if (n < max) out[n++] = (span){e, num(e, "ts"), num(e, "ts") + num(e, "dur")};
    }
    qsort(out, (size_t)n, sizeof *out, by_start);
    return n;
}

static void check_nesting(const span *s, int n, int pid, int tid) {
    const double eps = 0.002; /* ts and dur are each rounded to 1 ns */
    int stack[64], depth = 0, bad = 0;
    for (int i = 0; i < n; i++) {
        while (depth && s[stack[depth - 1]].end <= s[i].ts + eps)
            depth--;
        if (depth && s[i].end > s[stack[depth - 1]].end + eps) bad++;
        if (depth < 64) stack[depth++] = i;
    }
    T_CHECKF(bad == 0, "rank %d track %d: %d spans overlap their parent partially", pid, tid, bad);
}

/* Timer spans directly inside each iteration cover >= 95% of it. */
static void check_cover(const span *s, int n, int pid) {
    int iters = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(str(s[i].e, "cat"), "step")) continue;
        iters++;
        double covered = 0, last_end = s[i].ts;
        for (int j = i + 1; j < n && s[j].ts < s[i].end; j++)
            if (s[j].ts >= last_end - 0.002) { /* a direct child: starts after the previous one */
                covered += s[j].end - s[j].ts;
                last_end = s[j].end;
            }
        double dur = s[i].end - s[i].ts;
        T_CHECKF(covered >= 0.95 * dur && covered <= dur * 1.001 + 0.01,
                 "rank %d %s: timers cover %.1f of %.1f us", pid, str(s[i].e, "name"), covered,
                 dur);
    }
    T_CHECKF(iters == K, "rank %d has %d iteration spans, want %d", pid, iters, K);
}

/* Collectives of one group instance, in this rank's issue order (seq). */
static int colls_of(const cJSON *events, int pid, const char *group, const char *ranks,
                    const cJSON **out, int max) {
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(e, "args");
        if (strcmp(str(e, "cat"), "comm") || num(e, "pid") != pid) continue;
        if (strcmp(str(a, "group"), group) || strcmp(str(a, "ranks"), ranks)) continue;
        int j = n < max ? n++ : max - 1;
        while (j > 0 &&
               num(cJSON_GetObjectItemCaseSensitive(out[j - 1], "args"), "seq") > num(a, "seq")) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = e;
    }
    return n;
}

static void check_collective_order(const cJSON *events) {
    static const cJSON *mine[4096], *theirs[4096];
    int groups = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        if (strcmp(str(e, "cat"), "comm")) continue;
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(e, "args");
        int pid = (int)num(e, "pid");
        if (num(a, "seq") < 0) continue;
        /* check each instance once, from its first member's first call */
        char ranks[256];
        snprintf(ranks, sizeof ranks, "%s", str(a, "ranks"));
        if (atoi(ranks) != pid) continue;
        int n = colls_of(events, pid, str(a, "group"), ranks, mine, 4096);
        if (mine[0] != e) continue;
        groups++;
        char *save = NULL;
        for (char *tok = strtok_r(ranks, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
            int r = atoi(tok),
                m = colls_of(events, r, str(a, "group"), str(a, "ranks"), theirs, 4096),
                same = m == n;
            for (int i = 0; same && i < n; i++) {
                const cJSON *x = cJSON_GetObjectItemCaseSensitive(mine[i], "args"),
                            *y = cJSON_GetObjectItemCaseSensitive(theirs[i], "args");
                same = !strcmp(str(mine[i], "name"), str(theirs[i], "name")) &&
                       num(x, "bytes") == num(y, "bytes");
            }
            T_CHECKF(same,
                     "%s [%s]: rank %d issued %d collectives, rank %d %d, or in another "
                     "order",
                     str(a, "group"), str(a, "ranks"), pid, n, r, m);
        }
    }
    T_CHECKF(groups >= 4, "only %d group instances with collectives", groups);
}

static void check_flows(const cJSON *events) {
    int starts = 0, unmatched = 0, sends = 0, send_unmatched = 0;
    const cJSON *e, *f;
    cJSON_ArrayForEach(e, events) {
        if (!strcmp(str(e, "ph"), "s")) {
            starts++;
            int finishes = 0;
            cJSON_ArrayForEach(f, events) finishes +=
                !strcmp(str(f, "ph"), "f") && num(f, "id") == num(e, "id");
            unmatched += finishes != 1;
        }
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(e, "args");
        if (!strcmp(str(e, "cat"), "p2p") && num(a, "flow_out") >= 0) {
            sends++;
            int found = 0;
            cJSON_ArrayForEach(f, events) {
                const cJSON *b = cJSON_GetObjectItemCaseSensitive(f, "args");
                found += !strcmp(str(f, "cat"), "p2p") && num(f, "pid") == num(a, "dst") &&
                         num(b, "flow_in") == num(a, "flow_out") && num(b, "src") == num(e, "pid");
            }
            send_unmatched += found != 1;
        }
    }
    int finishes = 0;
    cJSON_ArrayForEach(e, events) finishes += !strcmp(str(e, "ph"), "f");
    T_CHECKF(starts > 0 && starts == finishes, "%d flow starts, %d finishes", starts, finishes);
    T_CHECKF(unmatched == 0, "%d flow starts without exactly one finish", unmatched);
    T_CHECKF(sends > 0 && send_unmatched == 0, "%d of %d pipeline sends without their receive",
             send_unmatched, sends);
}

static void check_trace(const char *path) {
    char *text = slurp(path);
    T_CHECKF(text != NULL, "no trace file %s", path);
    if (!text) return;
    cJSON *doc = cJSON_Parse(text);
    free(text);
    T_CHECKF(doc != NULL, "the trace is not JSON");
    if (!doc) return;
    const cJSON *events = cJSON_GetObjectItemCaseSensitive(doc, "traceEvents");
    T_CHECK(cJSON_IsArray(events));
    int bad = 0, named[W] = {0};
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        const char *ph = str(e, "ph");
        bad += !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "name")) || !ph[0] ||
               num(e, "pid") < 0 || num(e, "pid") >= W || num(e, "tid") < 0;
        if (!strcmp(ph, "X")) bad += num(e, "ts") < 0 || num(e, "dur") < 0;
        if (!strcmp(ph, "M") && !strcmp(str(e, "name"), "process_name")) {
            const char *n = str(cJSON_GetObjectItemCaseSensitive(e, "args"), "name");
            named[(int)num(e, "pid")] += strstr(n, "tp ") && strstr(n, "pp ") && strstr(n, "dp ");
        }
    }
    T_CHECKF(bad == 0, "%d malformed events", bad);
    static span s[20000];
    for (int r = 0; r < W; r++) {
        T_CHECKF(named[r] == 1, "rank %d: %d process names", r, named[r]);
        for (int tid = 0; tid < 8; tid++) {
            int n = spans_of(events, r, tid, s, 20000);
            check_nesting(s, n, r, tid);
            if (tid == 0) check_cover(s, n, r);
        }
        int fwd = 0, bwd = 0, chunk1 = 0;
        cJSON_ArrayForEach(e, events) {
            if (num(e, "pid") != r) continue;
            const cJSON *a = cJSON_GetObjectItemCaseSensitive(e, "args");
            if (num(a, "train") != 1) continue;
            fwd += !strcmp(str(e, "cat"), "forward-compute");
            bwd += !strcmp(str(e, "cat"), "backward-compute");
            chunk1 += num(a, "chunk") == 1;
        }
        T_CHECKF(fwd == K * MB * VPP && bwd == fwd && chunk1 == fwd,
                 "rank %d: %d forwards, %d backwards, %d on chunk 1 (want %d each)", r, fwd, bwd,
                 chunk1, K * MB * VPP);
    }
    check_flows(events);
    check_collective_order(events);
    cJSON_Delete(doc);
}

/* The recorder alone: 2000 spans against a bound of 16 KiB. */
static void check_bound(void) {
    mtc_trace *t = NULL;
    T_CHECK(mtc_trace_init(&t, 3, "rank 3") == MTC_OK);
    if (!t) return;
    size_t base;
    mtc_trace_events(t, &base);
    mtc_trace_set_limit(t, 16384);
    mtc_trace_window(t, 1);
    int kept_before_full = 0;
    for (int i = 0; i < 2000; i++) {
        size_t before, after;
        mtc_trace_events(t, &before);
        mtc_trace_span(t, MTC_TRACK_COMPUTE, "forward mb 1 chunk 0", "forward-compute",
                       (uint64_t)i * 1000, (uint64_t)i * 1000 + 500, "\"mb\": 1");
        mtc_trace_stats_add(t, "TENSOR_MODEL_PARALLEL_GROUP",
                            i % 2 ? MTC_TRACE_OP_ALL_GATHER : MTC_TRACE_OP_REDUCE_SCATTER, 100, 10);
        mtc_trace_events(t, &after);
        if (after > before) kept_before_full = i + 1;
        T_CHECKF(after > before ? kept_before_full == i + 1 : 1, "event %d kept after a drop", i);
    }
    size_t len;
    const char *text = mtc_trace_events(t, &len);
    uint64_t dropped = mtc_trace_dropped(t);
    T_CHECKF(len <= 16384 && len > 16384 - 512, "kept %zu bytes of a 16384 bound", len);
    T_CHECKF(dropped > 0 && dropped + (uint64_t)kept_before_full == 2000,
             "%llu dropped + %d kept != 2000", (unsigned long long)dropped, kept_before_full);
    char *doc = malloc(len + 3);
    if (doc) {
        doc[0] = '[';
        memcpy(doc + 1, text, len);
        doc[len + 1] = ']', doc[len + 2] = 0;
        cJSON *j = cJSON_Parse(doc);
        T_CHECKF(j && cJSON_GetArraySize(j) == 4 + kept_before_full, "%d events parsed",
                 j ? cJSON_GetArraySize(j) : -1);
        cJSON_Delete(j);
        free(doc);
    }
    const mtc_trace_group_stats *g;
    T_CHECK(mtc_trace_stats(t, &g) == 1 && g[0].calls == 2000 && g[0].bytes == 200000);
    /* the split by kind of call: half reduce-scatter, half all-gather */
    T_CHECK(g[0].op_calls[MTC_TRACE_OP_REDUCE_SCATTER] == 1000 &&
            g[0].op_bytes[MTC_TRACE_OP_ALL_GATHER] == 100000 &&
            g[0].op_ns[MTC_TRACE_OP_REDUCE_SCATTER] == 10000 &&
            g[0].op_calls[MTC_TRACE_OP_ALL_REDUCE] == 0);
    T_CHECK(strcmp(mtc_trace_op_name(MTC_TRACE_OP_ALL_GATHER), "all_gather") == 0);
    mtc_trace_stats_reset(t);
    T_CHECK(mtc_trace_stats(t, &g) == 1 && g[0].op_calls[MTC_TRACE_OP_ALL_GATHER] == 0 &&
            strcmp(g[0].name, "TENSOR_MODEL_PARALLEL_GROUP") == 0);
    mtc_trace_free(t);
}

int main(void) {
    check_bound();
    data_source *src = NULL;
    data_source_opts o = {
        .mock = 1, .vocab_size = 60, .seq_length = 16, .seed = 7, .split = "100,0,0"};
    T_CHECK(data_source_open(&o, &src) == MTC_OK);
    mtc_train_config c;
    memset(&c, 0, sizeof c);
    mtc_model_config *m = &c.model;
    m->num_layers = 4, m->hidden_size = 32, m->num_heads = 4, m->ffn_hidden_size = 64;
    m->seq_length = m->max_position_embeddings = 16;
    m->vocab_size = 60, m->padded_vocab_size = 64, m->init_std = 0.02f;
    c.micro_batch = 2, c.global_batch = 2 * MB * 2, c.train_iters = K;
    c.lr = (mtc_lr_schedule){
        .lr = 1e-3, .min_lr = 0, .warmup_iters = 0, .decay_iters = K, .style = MTC_LR_CONSTANT};
    c.adam = (mtc_adamw_config){.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    c.clip_grad = 1.0f, c.seed = 1234, c.log_interval = K, c.eval_interval = 1000;
    c.threads = 1, c.quiet = 1, c.backend = MTC_BACKEND_SHM;
    mtc_grid_config_default(&c.grid);
    c.world_size = W, c.grid.tp = 2, c.grid.pp = 2, c.grid.vpp = VPP, c.overlap_grad_reduce = 1;
    c.ddp_bucket_size = 4000;
    char path[64], log[64];
    snprintf(path, sizeof path, "/tmp/mtc_test_trace_%d.json", (int)getpid());
    snprintf(log, sizeof log, "/tmp/mtc_test_trace_%d.log", (int)getpid());
    c.trace_path = path, c.profile_step_start = 0, c.profile_step_end = K;
    c.timing_log_level = 2, c.timing_log_option = 1;
    FILE *out = fopen(log, "w+");
    T_CHECK(out != NULL);
    mtc_result_t rc = mtc_train_run(&c, src, out);
    T_CHECKF(rc == MTC_OK, "%s", mtc_error_detail());
    check_trace(path);
    fflush(out);
    char *text = slurp(log);
    T_CHECK(text && strstr(text, "(min, max) time across ranks (ms):"));
    const char *fb = text ? strstr(text, "    forward-backward ......") : NULL;
    T_CHECK(fb && !strstr(fb + 1, "    forward-backward ......")); /* once per log */
    T_CHECK(text && strstr(text, "    forward-send-forward-recv ...."));
    T_CHECK(text && strstr(text, " pipeline bubble: measured "));
    T_CHECK(text && strstr(text, "(p-1)/(v*m+p-1) = 11.1%")); /* 1 / (2*4 + 1) */
    free(text);
    fclose(out);
    remove(log);
    remove(path);

    /* off: no file, same losses as before (the hook must not change numbers) */
    c.trace_path = NULL, c.timing_log_level = 0;
    rc = mtc_train_run(&c, src, NULL);
    T_CHECK(rc == MTC_OK);
    T_CHECK(access(path, F_OK) != 0);
    data_source_free(src);
    return T_DONE();
}
