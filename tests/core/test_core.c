/* tests/core/test_core.c - result codes, Philox known answers, layout
 * independence of the counter-based generator, bf16 rounding, the arena and
 * the argument parser. */
#include <stdint.h>
#include <string.h>

#include "core/args.h"
#include "core/dtype.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/result.h"
#include "core/rng.h"
#include "test.h"

static mtc_result_t fails_with_detail(void) {
    return mtc_error(MTC_ERR_INVALID_ARGUMENT, "value %d out of range", 7);
}

static mtc_result_t propagates(int *reached_cleanup) {
    mtc_result_t rc = MTC_OK;
    MTC_CHECK_GOTO(fails_with_detail(), rc, out);
    rc = MTC_ERR_INTERNAL; /* not reached */
out:
    *reached_cleanup = 1;
    return rc;
}

static void test_result(void) {
    int cleaned = 0;
    T_CHECK(propagates(&cleaned) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(cleaned == 1);
    T_CHECK(strcmp(mtc_error_detail(), "value 7 out of range") == 0);
    for (int rc = MTC_OK; rc <= MTC_ERR_INTERNAL; rc++) {
        T_CHECK(strlen(mtc_result_str((mtc_result_t)rc)) > 5);
        T_CHECK(strcmp(mtc_result_name((mtc_result_t)rc), "UNKNOWN") != 0);
    }
}

/* Known-answer vectors of Philox4x32-10 from the Random123 distribution
 * (kat_vectors): zero, all-ones and the digits of pi. */
static void test_philox_kat(void) {
    static const uint32_t ctr[3][4] = {{0, 0, 0, 0},
                                       {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                                       {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}};
    static const uint32_t key[3][2] = {{0, 0}, {0xffffffff, 0xffffffff}, {0xa4093822, 0x299f31d0}};
    static const uint32_t want[3][4] = {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
                                        {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
                                        {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}};
    for (int t = 0; t < 3; t++) {
        uint32_t out[4];
        mtc_philox4x32_10(ctr[t], key[t], out);
        for (int i = 0; i < 4; i++)
            T_CHECKF(out[i] == want[t][i], "vector %d word %d: %08x vs %08x", t, i, out[i],
                     want[t][i]);
    }
}

/* A shard drawn at an offset equals the same slice of the whole tensor:
 * the property the parity tests stand on. */
static void test_rng_layout_independent(void) {
    enum { N = 1001 };
    static float whole[N], part[N];
    mtc_rng_fill_normal(whole, N, 1234, 77, 0, 0.0f, 1.0f);
    for (size_t first = 0; first < 9; first++) {
        size_t n = N - first - 3;
        mtc_rng_fill_normal(part, n, 1234, 77, first, 0.0f, 1.0f);
        int same = memcmp(part, whole + first, n * sizeof(float)) == 0;
        T_CHECKF(same, "normal shard at offset %zu differs", first);
    }
    for (size_t i = 0; i < N; i += 97)
        T_CHECK(mtc_rng_normal(1234, 77, i) == whole[i]);
    /* different streams and seeds give different numbers */
    T_CHECK(mtc_rng_normal(1234, 78, 5) != whole[5]);
    T_CHECK(mtc_rng_normal(1235, 77, 5) != whole[5]);
    /* moments of a large sample: mean 0, variance 1 (4-sigma bounds) */
    enum { M = 200000 };
    static float big[M];
    mtc_rng_fill_normal(big, M, 42, 1, 0, 0.0f, 1.0f);
    double s = 0, s2 = 0;
    for (int i = 0; i < M; i++)
        s += big[i], s2 += (double)big[i] * big[i];
    double mean = s / M, var = s2 / M - mean * mean;
    T_CHECKF(fabs(mean) < 4.0 / sqrt(M), "mean %g", mean);
    T_CHECKF(fabs(var - 1.0) < 4.0 * sqrt(2.0 / M), "variance %g", var);
    mtc_rng_fill_uniform(big, M, 42, 2, 0);
    double lo = 1, hi = 0;
    s = 0;
    for (int i = 0; i < M; i++) {
        s += big[i];
        if (big[i] < lo) lo = big[i];
        if (big[i] > hi) hi = big[i];
    }
    T_CHECK(lo >= 0.0 && hi < 1.0);
    T_CHECKF(fabs(s / M - 0.5) < 4.0 * sqrt(1.0 / 12.0 / M), "uniform mean %g", s / M);
    T_CHECK(mtc_rng_stream_of("wte.weight") != mtc_rng_stream_of("wpe.weight"));
}

static void test_bf16(void) {
    T_CHECK(mtc_bf16_to_f32(mtc_f32_to_bf16(1.0f)) == 1.0f);
    T_CHECK(mtc_bf16_to_f32(mtc_f32_to_bf16(-2.5f)) == -2.5f);
    /* 1 + 2^-8 is exactly half-way between bf16 1.0 and 1 + 2^-7: ties to even (1.0) */
    T_CHECK(mtc_bf16_to_f32(mtc_f32_to_bf16(1.0f + 1.0f / 256)) == 1.0f);
    /* 1 + 3*2^-8 is half-way between 1+2^-7 and 1+2^-6: ties to even (1 + 2^-6) */
    T_CHECK(mtc_bf16_to_f32(mtc_f32_to_bf16(1.0f + 3.0f / 256)) == 1.0f + 1.0f / 64);
    T_CHECK(isnan(mtc_bf16_to_f32(mtc_f32_to_bf16(NAN))));
    T_CHECK(mtc_dtype_size(MTC_DTYPE_BF16) == 2 && mtc_dtype_size(MTC_DTYPE_I64) == 8);
    T_CHECK(mtc_dtype_parse("bf16") == MTC_DTYPE_BF16 && mtc_dtype_parse("f17") == -1);
}

static void test_arena(void) {
    mtc_arena a;
    T_CHECK(mtc_arena_init(&a, 1 << 20) == MTC_OK);
    void *p, *q;
    T_CHECK(mtc_arena_alloc(&a, 100, 0, &p) == MTC_OK);
    T_CHECK(((uintptr_t)p & 63) == 0);
    size_t mark = mtc_arena_mark(&a);
    T_CHECK(mtc_arena_alloc(&a, 1000, 4096, &q) == MTC_OK);
    T_CHECK(((uintptr_t)q & 4095) == 0);
    memset(q, 1, 1000);
    T_CHECK(mtc_arena_alloc(&a, 2 << 20, 0, &q) == MTC_ERR_OUT_OF_MEMORY);
    T_CHECK(strstr(mtc_error_detail(), "arena exhausted") != NULL);
    size_t hw = a.high_water;
    mtc_arena_reset(&a, mark);
    T_CHECK(a.used == mark && a.high_water == hw && hw >= 4096 + 1000);
    mtc_arena_free(&a);
}

static void test_args(void) {
    int tp = 1, flag = 0, on = 1;
    double lr = 0;
    const char *path = NULL;
    mtc_arg_ints sizes = {0};
    mtc_arg args[] = {
        {"tensor-model-parallel-size", "tp", MTC_ARG_INT, &tp, "N", "TP size", 0},
        {"sequence-parallel", NULL, MTC_ARG_FLAG, &flag, NULL, "SP", 0},
        {"overlap-grad-reduce", NULL, MTC_ARG_FLAG, &on, NULL, "overlap", 0},
        {"lr", NULL, MTC_ARG_DOUBLE, &lr, "X", "learning rate", 0},
        {"data-path", NULL, MTC_ARG_STRING, &path, "PATH", "data", 0},
        {"hierarchical-context-parallel-sizes", NULL, MTC_ARG_INTS, &sizes, "A,B", "sizes", 0},
    };
    int n = (int)(sizeof args / sizeof args[0]);
    char *argv1[] = {"--tp",
                     "4",
                     "--sequence-parallel",
                     "--lr=3e-4",
                     "--data-path",
                     "x.txt",
                     "--hierarchical-context-parallel-sizes",
                     "2",
                     "4",
                     "--no-overlap-grad-reduce"};
    char err[256] = "";
    T_CHECK(mtc_args_parse(args, n, 10, argv1, NULL, 0, NULL, err, sizeof err) == MTC_OK);
    T_CHECK(tp == 4 && flag == 1 && on == 0 && lr == 3e-4 && path && !strcmp(path, "x.txt"));
    T_CHECK(sizes.n == 2 && sizes.v[0] == 2 && sizes.v[1] == 4);
    T_CHECK(mtc_args_seen(args, n, "tensor-model-parallel-size") == 1);
    char *argv2[] = {"--tensor-parallel-size", "2"};
    T_CHECK(mtc_args_parse(args, n, 2, argv2, NULL, 0, NULL, err, sizeof err) != MTC_OK);
    T_CHECKF(strstr(err, "did you mean --tensor-model-parallel-size") != NULL, "%s", err);
    char *argv3[] = {"--tp", "two"};
    T_CHECK(mtc_args_parse(args, n, 2, argv3, NULL, 0, NULL, err, sizeof err) != MTC_OK);
    T_CHECKF(strstr(err, "'two'") != NULL, "%s", err);
    char *argv4[] = {"--lr"};
    T_CHECK(mtc_args_parse(args, n, 1, argv4, NULL, 0, NULL, err, sizeof err) != MTC_OK);
    /* words: Megatron's nargs='+' (--cp-comm-type p2p a2a ...), up to the next flag */
    mtc_arg_strings w = {0};
    mtc_arg wargs[] = {{"cp-comm-type", NULL, MTC_ARG_STRINGS, &w, "S", "types", 0},
                       {"tp", NULL, MTC_ARG_INT, &tp, "N", "tp", 0}};
    char *argv5[] = {"--cp-comm-type", "p2p", "a2a", "all_gather", "--tp", "2"};
    T_CHECK(mtc_args_parse(wargs, 2, 6, argv5, NULL, 0, NULL, err, sizeof err) == MTC_OK);
    T_CHECK(w.n == 3 && !strcmp(w.v[0], "p2p") && !strcmp(w.v[2], "all_gather") && tp == 2);
    char *argv6[] = {"--cp-comm-type=a2a", "p2p"}; /* --name=value takes one word */
    T_CHECK(mtc_args_parse(wargs, 2, 2, argv6, NULL, 0, NULL, err, sizeof err) != MTC_OK);
    T_CHECK(w.n == 1 && !strcmp(w.v[0], "a2a"));
    T_CHECK(mtc_edit_distance("kitten", "sitting") == 3);
}

int main(void) {
    mtc_log_set_rank(0, NULL);
    test_result();
    test_philox_kat();
    test_rng_layout_independent();
    test_bf16();
    test_arena();
    test_args();
    return T_DONE();
}
