/* tests/nn/nn_fd.h - the finite-difference check and the two comparisons
 * the kernel-gradient tests share (test_nn_grad.c, test_nn_llama.c). */
#ifndef MTC_TESTS_NN_FD_H
#define MTC_TESTS_NN_FD_H

#include <math.h>
#include <stddef.h>

#include "test.h"

typedef double (*loss_fn)(void *ctx);

/* check grad (float, analytic) against FD of fn w.r.t. x (double, perturbed in place);
 * `stride` samples every stride-th coordinate. */
static void check_fd(const char *what, loss_fn fn, void *ctx, double *x, const float *grad,
                     size_t n, size_t stride, double tol) {
    double worst = 0;
    size_t worst_k = 0;
    for (size_t k = 0; k < n; k += stride) {
        double x0 = x[k], h = 1e-5 * (fabs(x0) > 1 ? fabs(x0) : 1);
        x[k] = x0 + h;
        double lp = fn(ctx);
        x[k] = x0 - h;
        double lm = fn(ctx);
        x[k] = x0;
        double fd = (lp - lm) / (2 * h);
        double err = fabs(fd - grad[k]) / (1e-3 + fabs(fd));
        if (err > worst) worst = err, worst_k = k;
    }
    T_CHECKF(worst <= tol, "%s: worst relative error %.3g at %zu", what, worst, worst_k);
}

static double dot(const double *a, const float *g, size_t n) {
    double s = 0;
    for (size_t k = 0; k < n; k++)
        s += a[k] * g[k];
    return s;
}

static double max_rel(const float *a, const double *b, size_t n) {
    double worst = 0;
    for (size_t k = 0; k < n; k++) {
        double e = fabs(a[k] - b[k]) / (1e-3 + fabs(b[k]));
        if (e > worst) worst = e;
    }
    return worst;
}

#endif
