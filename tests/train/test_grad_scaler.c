/* tests/train/test_grad_scaler.c - the --fp16 loss scalers against
 * Megatron's rules (megatron/core/optimizer/grad_scaler.py), step by step
 * with the expected scale and trackers written out: back-off only after
 * `hysteresis` inf/NaN iterations in a row (and on every further one), the
 * growth tracker reset by any overflow, growth by 2 after `window` clean
 * iterations restoring the hysteresis, the floor at min-loss-scale, the
 * constant scaler never moving, and the flag checks. */
#include <math.h>
#include <stdio.h>

#include "optim/grad_scaler.h"
#include "test.h"

typedef struct {
    int found_inf;
    double scale; /* after the update */
    int growth, hyst;
} step;

static int run(const char *name, mtc_grad_scaler *s, const step *st, int n) {
    int ok = 1;
    for (int i = 0; i < n; i++) {
        mtc_grad_scaler_update(s, st[i].found_inf);
        if ((double)s->scale != st[i].scale || s->growth_tracker != st[i].growth ||
            s->hysteresis_tracker != st[i].hyst) {
            printf("FAIL %s step %d (found_inf %d): scale %g growth %d hysteresis %d, expected %g "
                   "%d %d\n",
                   name, i + 1, st[i].found_inf, (double)s->scale, s->growth_tracker,
                   s->hysteresis_tracker, st[i].scale, st[i].growth, st[i].hyst);
            ok = 0;
        }
    }
    if (ok) printf("ok   %s: %d updates as Megatron's rules\n", name, n);
    return ok;
}

int main(void) {
    int fails = 0;
    mtc_grad_scaler s;
    const double S = 4294967296.0; /* 2^32, Megatron's default initial scale */
    T_CHECK(mtc_grad_scaler_init_dynamic(&s, S, 1.0, 3, 2) == MTC_OK);
    T_CHECK(s.scale == (float)S && s.hysteresis_tracker == 2 && s.growth_tracker == 0);
    T_CHECK(mtc_grad_scaler_inv_scale(&s) == 0x1p-32f);
    const step hyst[] = {
        {1, S, 0, 1},      /* first overflow: hysteresis absorbs it */
        {1, S / 2, 0, 0},  /* second in a row: back off */
        {1, S / 4, 0, -1}, /* every further one backs off again */
        {0, S / 4, 1, -1}, /* clean iterations count up ... */
        {0, S / 4, 2, -1}, /* */
        {0, S / 2, 0, 2},  /* ... to the window: grow, hysteresis restored */
        {1, S / 2, 0, 1},  /* one overflow: absorbed */
        {0, S / 2, 1, 1},  /* the hysteresis tracker is not restored by one clean step */
        {1, S / 4, 0, 0},  /* so this second (non-consecutive) overflow backs off */
        {0, S / 4, 1, 0},  /* */
        {0, S / 4, 2, 0},  /* */
        {1, S / 8, 0, -1}, /* an overflow resets the growth tracker */
        {0, S / 8, 1, -1}, /* */
        {0, S / 8, 2, -1}, /* */
        {0, S / 4, 0, 2},  /* */
    };
    fails += !run("dynamic, window 3, hysteresis 2", &s, hyst, (int)(sizeof hyst / sizeof hyst[0]));

    T_CHECK(mtc_grad_scaler_init_dynamic(&s, 4.0, 2.0, 1000, 1) == MTC_OK);
    const step floor_[] = {{1, 2.0, 0, 0}, {1, 2.0, 0, -1}, {0, 2.0, 1, -1}};
    fails += !run("floor at min-loss-scale", &s, floor_, 3);

    T_CHECK(mtc_grad_scaler_init_dynamic(&s, 1.0, 1.0, 1, 2) == MTC_OK);
    const step grow[] = {{0, 2.0, 0, 2}, {0, 4.0, 0, 2}, {1, 4.0, 0, 1}, {0, 8.0, 0, 2}};
    fails += !run("window 1 doubles every clean step", &s, grow, 4);

    T_CHECK(mtc_grad_scaler_init_constant(&s, 1024.0) == MTC_OK);
    const step cst[] = {{1, 1024.0, 0, 0}, {1, 1024.0, 0, 0}, {0, 1024.0, 0, 0}};
    fails += !run("constant --loss-scale", &s, cst, 3);

    /* Megatron's asserts become one-line argument errors */
    T_CHECK(mtc_grad_scaler_init_dynamic(&s, 0.0, 1.0, 1000, 2) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(mtc_grad_scaler_init_dynamic(&s, 8.0, 16.0, 1000, 2) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(mtc_grad_scaler_init_dynamic(&s, 8.0, 0.0, 1000, 2) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(mtc_grad_scaler_init_dynamic(&s, 8.0, 1.0, 0, 2) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(mtc_grad_scaler_init_dynamic(&s, 8.0, 1.0, 1000, 0) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(mtc_grad_scaler_init_constant(&s, -1.0) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(mtc_grad_scaler_init_constant(&s, 1e39) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(mtc_grad_scaler_init_constant(&s, 1e-30) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(mtc_grad_scaler_init_constant(&s, 0x1p-24) == MTC_OK);
    printf("ok   bad scaler flags refused\n");
    /* loss-scale sanity: MTC_LOSS_SCALE_BAD_STEPS stuck skips or zero norms in a row stop */
    const int K = MTC_LOSS_SCALE_BAD_STEPS;
    mtc_grad_scaler_init_constant(&s, 1e30);
    for (int k = 1; k < K; k++)
        T_CHECK(mtc_grad_scaler_watch(&s, 1, INFINITY) == MTC_OK);
    T_CHECK(mtc_grad_scaler_watch(&s, 0, 1.0) == MTC_OK); /* one good step resets the run */
    for (int k = 1; k < K; k++)
        T_CHECK(mtc_grad_scaler_watch(&s, 1, NAN) == MTC_OK);
    T_CHECK(mtc_grad_scaler_watch(&s, 1, NAN) == MTC_ERR_INVALID_ARGUMENT);
    mtc_grad_scaler_init_dynamic(&s, 0x1p32, 1.0, 1000, 2);
    int stopped_at = 0; /* the dynamic scaler halves down to min 1, then may stop */
    for (int k = 1; k <= 200 && !stopped_at; k++) {
        mtc_grad_scaler_update(&s, 1);
        if (mtc_grad_scaler_watch(&s, 1, INFINITY) != MTC_OK) stopped_at = k;
    }
    /* hysteresis 2: the first skip keeps 2^32, each later one halves: 1 at skip 33 */
    T_CHECK(s.scale == 1.0f && stopped_at == 33 + K - 1);
    mtc_grad_scaler_init_constant(&s, 1e-6);
    for (int k = 1; k < K; k++)
        T_CHECK(mtc_grad_scaler_watch(&s, 0, 0.0) == MTC_OK);
    T_CHECK(mtc_grad_scaler_watch(&s, 0, 0.0) == MTC_ERR_INVALID_ARGUMENT);
    printf("ok   a stuck or underflowing loss scale stops after %d steps\n", K);
    printf("%d failed\n", fails);
    return fails ? 1 : 0;
}
