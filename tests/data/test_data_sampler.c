/* tests/data/test_data_sampler.c - splits, the per-epoch permutation, sample
 * windows, mock data and Megatron's batch order.
 *
 * The stream under test is an llm.c shard whose token at position p is p,
 * so a sample tells which window it is (tokens[0] / T) and the expected
 * content is a closed form. Split bounds are checked against values worked
 * out by hand from Megatron's _get_split_indices, and the batch order
 * against a transcription of MegatronPretrainingSampler's loop. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/data.h"
#include "test.h"

static char dir[64], shard[128];

static void write_position_shard(int n) {
    unsigned char *b = calloc(1, 1024 + 4 * (size_t)n);
    uint32_t h[3] = {20240801u, 7u, (uint32_t)n};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++)
            b[4 * i + k] = (unsigned char)(h[i] >> (8 * k));
    for (int p = 0; p < n; p++)
        for (int k = 0; k < 4; k++)
            b[1024 + 4 * p + k] = (unsigned char)((uint32_t)p >> (8 * k));
    snprintf(shard, sizeof shard, "%s/pos.bin", dir);
    FILE *f = fopen(shard, "wb");
    if (!f || fwrite(b, 1, 1024 + 4 * (size_t)n, f) != 1024 + 4 * (size_t)n) exit(2);
    fclose(f);
    free(b);
}

static void test_split_bounds(void) {
    struct {
        const char *split;
        uint64_t n, b[4];
    } cases[] = {
        {"949,50,1", 1000, {0, 949, 999, 1000}},
        {"969,30,1", 1000, {0, 969, 999, 1000}},
        {"949,50,1", 100, {0, 95, 100, 100}}, /* 94.9 -> 95, 5, 0.1 -> 0 */
        {"98,2", 10, {0, 10, 10, 10}},        /* 9.8 -> 10, 0.2 -> 0 */
        {"1,1,1", 10, {0, 4, 7, 10}},         /* 3, 3, 3 -> sum 9: shifted by 1 */
        {"1/1", 5, {0, 3, 5, 5}},             /* 2.5 -> 2 twice (half to even), then +1 */
        {"3,1", 7, {0, 5, 7, 7}},             /* 5.25 -> 5, 1.75 -> 2 */
        {"0,1,0", 9, {0, 0, 9, 9}},
        /* Megatron takes the numbers out with the regex [.0-9]+: separators are anything */
        {"'99,1,0'", 100, {0, 99, 100, 100}}, /* a shell array's quotes reach the program */
        {"1,,2", 3, {0, 1, 3, 3}},
        {"-1,2", 3, {0, 1, 3, 3}}, /* the minus is no part of a number there */
        {"1;2", 3, {0, 1, 3, 3}},
        {"1,2,", 3, {0, 1, 3, 3}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double w[3];
        uint64_t b[4];
        T_CHECKF(data_split_parse(cases[c].split, w) == MTC_OK, "%s", cases[c].split);
        data_split_bounds(w, cases[c].n, b);
        T_CHECKF(!memcmp(b, cases[c].b, sizeof b), "%s n=%llu: %llu %llu %llu %llu", cases[c].split,
                 (unsigned long long)cases[c].n, (unsigned long long)b[0], (unsigned long long)b[1],
                 (unsigned long long)b[2], (unsigned long long)b[3]);
    }
    const char *bad[] = {"", "a,b", "1,2,3,4", "0,0,0", "nan", "1.2.3,1", ".,1", "'0,0'"};
    for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
        double w[3];
        T_CHECKF(data_split_parse(bad[c], w) == MTC_ERR_INVALID_ARGUMENT, "\"%s\" accepted",
                 bad[c]);
    }
}

static void test_permutation(void) {
    uint64_t sizes[] = {1, 2, 3, 5, 16, 17, 100, 1000, 4097};
    for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++) {
        uint64_t n = sizes[c];
        char *hit = calloc(n, 1);
        int ok = 1, same_key = 1, same_seed = 1;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t v = data_permute(i, n, 5, 0);
            if (v >= n || hit[v])
                ok = 0;
            else
                hit[v] = 1;
            ok &= data_permute(i, n, 5, 0) == v; /* deterministic */
            same_key &= data_permute(i, n, 5, 4) == v;
            same_seed &= data_permute(i, n, 6, 0) == v;
        }
        T_CHECKF(ok, "n=%llu: not a bijection", (unsigned long long)n);
        if (n >= 16)
            T_CHECKF(!same_key && !same_seed, "n=%llu: key/seed ignored", (unsigned long long)n);
        free(hit);
    }
    /* spread: in a shuffle of 1000 few elements stay in place (expected ~1) */
    int fixed = 0;
    for (uint64_t i = 0; i < 1000; i++)
        fixed += data_permute(i, 1000, 9, 0) == i;
    T_CHECKF(fixed < 10, "%d fixed points", fixed);
    uint64_t big = (1ull << 40) + 3, v = data_permute(big - 1, big, 1, 2);
    T_CHECK(v < big);
}

static data_source *open_pos(int T, const char *split, uint64_t seed) {
    data_source_opts o = {.data_path = shard, .seq_length = T, .split = split, .seed = seed};
    data_source *s = NULL;
    mtc_result_t rc = data_source_open(&o, &s);
    T_CHECKF(rc == MTC_OK, "%s", mtc_error_detail());
    return s;
}

static void test_samples(void) {
    const int N = 1001, T = 8; /* 125 windows */
    write_position_shard(N);
    data_source *s = open_pos(T, "949,50,1", 3), *s2 = open_pos(T, "949,50,1", 3),
                *s3 = open_pos(T, "949,50,1", 4);
    if (!s || !s2 || !s3) return;
    /* Megatron bounds of 125 windows: 118.6 -> 119, 6.25 -> 6, 0.125 -> 0 => 119, 125, 125 */
    uint64_t lo[3] = {0, 119, 125}, hi[3] = {119, 125, 125};
    for (int sp = 0; sp < 3; sp++)
        T_CHECK(data_source_split_size(s, (data_split)sp) == hi[sp] - lo[sp]);
    int tok[9], tok2[9];
    for (int sp = 0; sp < 2; sp++) {
        uint64_t n = hi[sp] - lo[sp];
        uint64_t *order = calloc(2 * n, sizeof *order);
        int shape_ok = 1, same_seed = 1, other_seed = 1;
        for (uint64_t i = 0; i < 2 * n; i++) { /* two epochs */
            T_CHECK(data_source_sample(s, (data_split)sp, i, tok) == MTC_OK);
            for (int k = 0; k <= T; k++)
                shape_ok &= tok[k] == tok[0] + k; /* shifted targets */
            shape_ok &= tok[0] % T == 0;
            order[i] = (uint64_t)tok[0] / T;
            data_source_sample(s2, (data_split)sp, i, tok2);
            same_seed &= !memcmp(tok, tok2, sizeof tok);
            data_source_sample(s3, (data_split)sp, i, tok2);
            other_seed &= !memcmp(tok, tok2, sizeof tok);
        }
        T_CHECKF(shape_ok, "split %d: samples are not windows of T+1 at multiples of T", sp);
        T_CHECK(same_seed);
        T_CHECK(!other_seed);
        for (int e = 0; e < 2; e++) { /* each epoch visits every window of the split once */
            char *seen = calloc(125, 1);
            int ok = 1;
            for (uint64_t i = 0; i < n; i++) {
                uint64_t w = order[e * n + i];
                ok &= w >= lo[sp] && w < hi[sp] && !seen[w];
                if (w < 125) seen[w] = 1;
            }
            T_CHECKF(ok, "split %d epoch %d is not a permutation of its windows", sp, e);
            free(seen);
        }
        T_CHECKF(memcmp(order, order + n, n * sizeof *order) != 0, "split %d: epoch 1 == epoch 0",
                 sp);
        free(order);
    }
    mtc_result_t rc = data_source_sample(s, DATA_SPLIT_TEST, 0, tok);
    T_CHECKF(rc == MTC_ERR_INVALID_USAGE && strstr(mtc_error_detail(), "test"), "%s",
             mtc_error_detail());
    data_source_free(s);
    data_source_free(s2);
    data_source_free(s3);
    s = open_pos(T, "1,0,0", 3);
    if (s) {
        uint64_t total = 0;
        for (int sp = 0; sp < 3; sp++)
            total += data_source_split_size(s, (data_split)sp);
        T_CHECK(total == (uint64_t)(N - 1) / T && data_source_split_size(s, DATA_SPLIT_VALID) == 0);
        data_source_free(s);
    }
}

/* Rank-threads share one source: samples read concurrently equal the
 * serial ones (and ThreadSanitizer sees no race: the source is read-only). */
typedef struct {
    data_source *s;
    int rank, ok;
} reader_arg;
static int serial_first[400]; /* tokens[0] of train sample i, read serially */

static void *reader(void *p) {
    reader_arg *a = p;
    int tok[9], want[9];
    for (uint64_t i = (uint64_t)a->rank; i < 400; i += 4) {
        data_source_sample(a->s, DATA_SPLIT_TRAIN, i, tok);
        for (int k = 0; k <= 8; k++)
            want[k] = tok[0] + k;
        a->ok &= !memcmp(tok, want, sizeof tok) && tok[0] == serial_first[i];
    }
    return NULL;
}

static void test_threads(void) {
    data_source *s = open_pos(8, "949,50,1", 3);
    if (!s) return;
    int tok[9];
    for (uint64_t i = 0; i < 400; i++) {
        data_source_sample(s, DATA_SPLIT_TRAIN, i, tok);
        serial_first[i] = tok[0];
    }
    pthread_t th[4];
    reader_arg args[4];
    for (int r = 0; r < 4; r++) {
        args[r] = (reader_arg){.s = s, .rank = r, .ok = 1};
        pthread_create(&th[r], NULL, reader, &args[r]);
    }
    for (int r = 0; r < 4; r++) {
        pthread_join(th[r], NULL);
        T_CHECKF(args[r].ok, "thread %d read wrong samples", r);
    }
    data_source_free(s);
}

/* MegatronPretrainingSampler.__iter__, transcribed: indices from consumed
 * on are grouped into batches of micro_batch * dp; rank r takes rows
 * [r * micro_batch, (r + 1) * micro_batch) of each; each such batch is one
 * microbatch, and an iteration takes M of them in order. */
static void test_megatron_order(void) {
    const int mbs = 2, dp = 2, M = 3, iters = 4, gbs = mbs * dp * M;
    for (int r = 0; r < dp; r++) {
        uint64_t consumed = 0; /* the sampler's consumed_samples at start */
        int ok = 1, yielded = 0;
        uint64_t batch[4];
        int nb = 0;
        for (uint64_t idx = consumed; yielded < iters * M; idx++) {
            batch[nb++] = idx;
            if (nb == mbs * dp) {
                int it = yielded / M, m = yielded % M;
                for (int j = 0; j < mbs; j++)
                    ok &= data_sample_index((uint64_t)it * gbs, m, r, j, mbs, dp) ==
                          batch[r * mbs + j];
                yielded++;
                nb = 0;
            }
        }
        T_CHECKF(ok, "rank %d: data_sample_index disagrees with Megatron's sampler", r);
    }
    /* one global batch covers [consumed, consumed + gbs) exactly once */
    char seen[12] = {0};
    int ok = 1;
    for (int m = 0; m < M; m++)
        for (int r = 0; r < dp; r++)
            for (int j = 0; j < mbs; j++) {
                uint64_t i = data_sample_index(120, m, r, j, mbs, dp) - 120;
                ok &= i < 12 && !seen[i];
                if (i < 12) seen[i] = 1;
            }
    T_CHECK(ok);
}

static void test_mock(void) {
    const int V = 256, T = 64;
    data_source_opts o = {.mock = 1, .vocab_size = V, .seq_length = T, .seed = 11};
    data_source *a = NULL, *b = NULL, *c = NULL;
    T_CHECK(data_source_open(&o, &a) == MTC_OK);
    T_CHECK(data_source_open(&o, &b) == MTC_OK);
    o.seed = 12;
    T_CHECK(data_source_open(&o, &c) == MTC_OK);
    if (!a || !b || !c) return;
    T_CHECK(data_source_vocab_size(a) == V && data_source_tokenizer(a) == NULL);
    T_CHECK(data_source_num_tokens(a) == DATA_MOCK_TOKENS);
    int ta[65], tb[65], tc[65], in_range = 1, same = 1, differ = 0;
    for (uint64_t i = 0; i < 50; i++) {
        data_source_sample(a, DATA_SPLIT_TRAIN, i, ta);
        data_source_sample(b, DATA_SPLIT_TRAIN, i, tb);
        data_source_sample(c, DATA_SPLIT_TRAIN, i, tc);
        for (int k = 0; k <= T; k++)
            in_range &= ta[k] >= 0 && ta[k] < V;
        same &= !memcmp(ta, tb, sizeof ta);
        differ += memcmp(ta, tc, sizeof ta) != 0;
    }
    T_CHECK(in_range && same && differ > 40);
    /* the stream is data_mock_token of the position: the first train window
       of seed 11 is one of its windows */
    data_source_sample(a, DATA_SPLIT_TRAIN, 0, ta);
    uint64_t w = data_permute(0, data_source_split_size(a, DATA_SPLIT_TRAIN), 11, 0);
    int match = 1;
    for (int k = 0; k <= T; k++)
        match &= ta[k] == data_mock_token(11, V, w * T + (uint64_t)k);
    T_CHECK(match);
    /* learnable: predicting each token from the one before by the most
       frequent successor is right far more often than chance (1/V); a single
       token is ambiguous (16 phrases x 32 tokens over 256 ids share ids), so
       bigrams reach ~0.45 and longer contexts more */
    enum { L = 1 << 16 };
    static int succ[256][256];
    int prev = data_mock_token(11, V, 0);
    for (uint64_t p = 1; p < L; p++) {
        int t = data_mock_token(11, V, p);
        succ[prev][t]++;
        prev = t;
    }
    long best = 0;
    for (int x = 0; x < V; x++) {
        int m = 0;
        for (int y = 0; y < V; y++)
            m = succ[x][y] > m ? succ[x][y] : m;
        best += m;
    }
    double acc = (double)best / (L - 1);
    T_CHECKF(acc > 0.3, "bigram accuracy %.3f: mock data is not learnable", acc);
    data_source_free(a);
    data_source_free(b);
    data_source_free(c);
    o.vocab_size = 0;
    T_CHECK(data_source_open(&o, &a) == MTC_ERR_INVALID_ARGUMENT && !a);
    o.vocab_size = V, o.seq_length = 0;
    T_CHECK(data_source_open(&o, &a) == MTC_ERR_INVALID_ARGUMENT && !a);
    o.seq_length = T, o.split = "1.2.3"; /* float("1.2.3") fails in Megatron too */
    T_CHECK(data_source_open(&o, &a) == MTC_ERR_INVALID_ARGUMENT && !a);
    data_source_opts none = {.seq_length = 4};
    T_CHECK(data_source_open(&none, &a) == MTC_ERR_INVALID_ARGUMENT && !a);
}

int main(void) {
    strcpy(dir, "/tmp/mtc-test-sampler-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_split_bounds();
    test_permutation();
    test_samples();
    test_threads();
    test_megatron_order();
    test_mock();
    remove(shard);
    rmdir(dir);
    return T_DONE();
}
