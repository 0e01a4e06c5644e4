/* tests/nn/test_nn_fixture.c - the nn kernels against PyTorch: layernorm,
 * tanh GELU, causal attention and padded-vocabulary cross-entropy, forward
 * and backward, from tests/reference/nn_tiny.fixture (written by
 * tests/reference/nn_reference.py in float64; this test needs no PyTorch). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "test.h"

#define FIXTURE "tests/reference/nn_tiny.fixture"
#define MAXREC 64

typedef struct {
    char name[64];
    size_t n;
    float *data;
} rec;
static rec recs[MAXREC];
static int nrec;

static int load(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char magic[8];
    int32_t count;
    int ok = fread(magic, 1, 8, f) == 8 && memcmp(magic, "MTCFIX1\n", 8) == 0 &&
             fread(&count, 4, 1, f) == 1 && count > 0 && count <= MAXREC;
    for (int r = 0; ok && r < count; r++) {
        int32_t len, ndim, d;
        ok = fread(&len, 4, 1, f) == 1 && len > 0 && len < 64 &&
             fread(recs[r].name, 1, (size_t)len, f) == (size_t)len && fread(&ndim, 4, 1, f) == 1;
        recs[r].name[ok ? len : 0] = 0;
        size_t n = 1;
        for (int k = 0; ok && k < ndim; k++) {
            ok = fread(&d, 4, 1, f) == 1 && d >= 0;
            n *= (size_t)d;
        }
        if (!ok) break;
        recs[r].n = n;
        recs[r].data = malloc(n * sizeof(float) + 1);
        ok = fread(recs[r].data, sizeof(float), n, f) == n;
        nrec = r + 1;
    }
    fclose(f);
    return ok ? 0 : -1;
}

static float *get(const char *name, size_t n) {
    for (int r = 0; r < nrec; r++)
        if (strcmp(recs[r].name, name) == 0) {
            T_CHECKF(n == 0 || recs[r].n == n, "%s: %zu values, expected %zu", name, recs[r].n, n);
            return recs[r].data;
        }
    fprintf(stderr, "fixture lacks %s\n", name);
    exit(1);
}

/* every |a - b| <= atol + rtol |b| */
static void close_all(const char *what, const float *a, const float *b, size_t n, double atol,
                      double rtol) {
    size_t bad = 0, first = 0;
    for (size_t k = 0; k < n; k++)
        if (!(fabs((double)a[k] - b[k]) <= atol + rtol * fabs((double)b[k])))
            if (bad++ == 0) first = k;
    T_CHECKF(bad == 0, "%s: %zu of %zu differ, first [%zu] %.8g vs torch %.8g", what, bad, n, first,
             bad ? a[first] : 0.0, bad ? b[first] : 0.0);
}

int main(void) {
    if (load(FIXTURE) != 0) {
        fprintf(stderr, "cannot read %s (run from the repository root)\n", FIXTURE);
        return 1;
    }
    nn_pool *pool = NULL;
    T_CHECK(nn_pool_create(2, &pool) == MTC_OK);

    { /* layernorm (5, 12) */
        int N = 5, C = 12;
        size_t n = (size_t)N * C;
        float y[60], dx[60], dw[12] = {0}, db[12] = {0}, mean[5], rstd[5];
        const float *x = get("ln.x", n), *w = get("ln.w", C), *b = get("ln.b", C);
        nn_layernorm_forward(pool, y, mean, rstd, x, w, b, N, C);
        close_all("layernorm y", y, get("ln.y", n), n, 1e-5, 1e-5);
        nn_layernorm_backward(pool, dx, dw, db, get("ln.dy", n), x, w, mean, rstd, N, C);
        close_all("layernorm dx", dx, get("ln.dx", n), n, 1e-5, 1e-4);
        close_all("layernorm dw", dw, get("ln.dw", C), C, 1e-5, 1e-5);
        close_all("layernorm db", db, get("ln.db", C), C, 1e-5, 1e-5);
    }
    { /* gelu (97) */
        size_t n = 97;
        float y[97], dx[97];
        const float *x = get("gelu.x", n);
        nn_gelu_forward(pool, y, x, n);
        close_all("gelu y", y, get("gelu.y", n), n, 1e-6, 1e-5);
        nn_gelu_backward(pool, dx, x, get("gelu.dy", n), n);
        close_all("gelu dx", dx, get("gelu.dx", n), n, 1e-6, 1e-5);
    }
    { /* attention */
        const float *dims = get("att.dims", 4);
        int B = (int)dims[0], T = (int)dims[1], NH = (int)dims[2], HS = (int)dims[3];
        size_t nq = (size_t)B * T * 3 * NH * HS, no = nq / 3, nl = (size_t)B * NH * T;
        float *y = malloc(no * 4), *lse = malloc(nl * 4), *dqkv = malloc(nq * 4);
        const float *qkv = get("att.qkv", nq);
        nn_attention_shape s = nn_attention_shape_qkv(B, T, NH, HS);
        int C = NH * HS;
        nn_attention_forward(pool, y, lse, qkv, qkv + C, qkv + 2 * C, &s, NULL);
        close_all("attention y", y, get("att.y", no), no, 1e-5, 1e-5);
        close_all("attention lse", lse, get("att.lse", nl), nl, 1e-5, 1e-6);
        nn_attention_backward(pool, dqkv, dqkv + C, dqkv + 2 * C, get("att.dy", no), qkv, qkv + C,
                              qkv + 2 * C, y, lse, &s, NULL);
        close_all("attention dqkv", dqkv, get("att.dqkv", nq), nq, 1e-5, 1e-4);
        free(y), free(lse), free(dqkv);
    }
    { /* cross-entropy over a padded vocabulary, mean over tokens */
        const float *dims = get("xent.dims", 3);
        int N = (int)dims[0], V = (int)dims[1], Vp = (int)dims[2];
        const float *lg = get("xent.logits", (size_t)N * V), *tf = get("xent.targets", N);
        float *x = malloc((size_t)N * Vp * 4), *losses = malloc(N * 4);
        int *tg = malloc(N * sizeof(int));
        for (int n = 0; n < N; n++) {
            tg[n] = (int)tf[n];
            memcpy(x + (size_t)n * Vp, lg + (size_t)n * V, (size_t)V * 4);
            for (int v = V; v < Vp; v++)
                x[(size_t)n * Vp + v] = 1e9f; /* must be ignored */
        }
        nn_softmax_xent_forward(pool, losses, x, tg, N, V, Vp);
        close_all("xent losses", losses, get("xent.losses", N), N, 1e-6, 1e-5);
        nn_softmax_xent_backward(pool, x, tg, 1.0f / N, N, V, Vp);
        const float *dl = get("xent.dlogits", (size_t)N * V);
        int pad_zero = 1;
        for (int n = 0; n < N; n++) {
            close_all("xent dlogits", x + (size_t)n * Vp, dl + (size_t)n * V, V, 1e-7, 1e-5);
            for (int v = V; v < Vp; v++)
                pad_zero &= x[(size_t)n * Vp + v] == 0.0f;
        }
        T_CHECK(pad_zero);
        free(x), free(losses), free(tg);
    }
    nn_pool_free(pool);
    for (int r = 0; r < nrec; r++)
        free(recs[r].data);
    return T_DONE();
}
