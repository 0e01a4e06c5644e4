/* tests/train/test_lr_schedule.c - mtc_lr_at / mtc_wd_at against Megatron's
 * OptimizerParamScheduler, computed independently in plain Python by
 * tests/reference/lr_schedule_reference.py (the fixture it printed is
 * tests/reference/lr_schedule.fixture): every decay style, WSD with its
 * four annealing shapes, warm-up from iterations, samples and a fraction,
 * --lr-warmup-init, and the weight-decay increment. Each case gives the
 * scheduler's parameters in Megatron's units (samples) and the values after
 * every iteration; the schedule here is filled from those parameters alone.
 * (tests/train/lr_schedule_cli.sh checks that mtc train's flags produce the
 * same parameters.) */
#include <stdlib.h>
#include <string.h>

#include "optim/optim.h"
#include "test.h"

int main(void) {
    FILE *f = fopen("tests/reference/lr_schedule.fixture", "r");
    T_CHECK(f != NULL);
    if (!f) return T_DONE();
    char line[1024], name[128] = "", style[64], wsd[64], wds[64];
    mtc_lr_schedule s;
    int cases = 0, rows = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "case ", 5)) {
            sscanf(line + 5, "%127s", name);
        } else if (!strncmp(line, "sched ", 6)) {
            double W, init, mx, mn, swd, ewd;
            long long D, S, I, inc;
            T_CHECK(sscanf(line + 6, "%lf %lld %lld %lld %lld %lf %lf %lf %63s %63s %lf %lf %63s",
                           &W, &D, &S, &I, &inc, &init, &mx, &mn, style, wsd, &swd, &ewd,
                           wds) == 13);
            memset(&s, 0, sizeof s);
            s.lr = mx, s.min_lr = mn, s.init_lr = init;
            s.style = (mtc_lr_style)mtc_lr_style_parse(style);
            s.wsd_style = (mtc_wsd_style)mtc_wsd_style_parse(wsd);
            s.wd_style = (mtc_wd_style)mtc_wd_style_parse(wds);
            T_CHECKF((int)s.style >= 0 && (int)s.wsd_style >= 0 && (int)s.wd_style >= 0, "%s",
                     name);
            s.step_samples = inc, s.warmup_samples = W, s.decay_samples = D;
            s.wsd_decay_samples = S, s.wd_incr_samples = I;
            s.start_wd = swd, s.end_wd = ewd;
            cases++;
        } else if (line[0] >= '0' && line[0] <= '9') {
            long long k;
            double lr, wd;
            T_CHECK(sscanf(line, "%lld %lf %lf", &k, &lr, &wd) == 3);
            /* the wd argument is what AdamW's weight_decay would be: used when constant */
            T_CHECKF(fabs(mtc_lr_at(&s, k) - lr) <= 1e-15 + 1e-12 * fabs(lr),
                     "%s step %lld: lr %.17g, Megatron %.17g", name, k, mtc_lr_at(&s, k), lr);
            T_CHECKF(fabs(mtc_wd_at(&s, k, s.end_wd) - wd) <= 1e-15 + 1e-12 * fabs(wd),
                     "%s step %lld: wd %.17g, Megatron %.17g", name, k, mtc_wd_at(&s, k, s.end_wd),
                     wd);
            rows++;
        }
    }
    fclose(f);
    T_CHECKF(cases == 13 && rows > 400, "%d cases, %d rows", cases, rows);
    printf("%d schedules, %d steps compared with Megatron's formulas\n", cases, rows);
    /* the iteration form (step_samples 0) callers use gives the same as samples */
    mtc_lr_schedule a = {.lr = 1e-3,
                         .min_lr = 1e-5,
                         .warmup_iters = 4,
                         .decay_iters = 20,
                         .style = MTC_LR_WSD,
                         .wsd_decay_iters = 8,
                         .wsd_style = MTC_WSD_COSINE};
    mtc_lr_schedule b = a;
    b.step_samples = 8, b.warmup_samples = 32, b.decay_samples = 160, b.wsd_decay_samples = 64;
    for (int k = 0; k <= 24; k++)
        T_CLOSE(mtc_lr_at(&a, k), mtc_lr_at(&b, k), 1e-18, 1e-14);
    T_CHECK(mtc_lr_style_parse("WSD") == MTC_LR_WSD && mtc_lr_style_parse("wsd") == -1);
    T_CHECK(!strcmp(mtc_lr_style_name(MTC_LR_INVERSE_SQRT), "inverse-square-root"));
    return T_DONE();
}
