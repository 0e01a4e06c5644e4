/* core/peak.c - measuring and caching the machine's fp32 FMA peak (see
 * peak.h). The kernel keeps 12 independent accumulators in registers per
 * thread, so the FMA units' latency is hidden and the loop runs at their
 * throughput; the vector width is what the build targets (-march=native by
 * default).
 * Relies on pthreads and cJSON. Limitations: fp32 only; a loaded machine
 * measures low (the caller should measure on an idle one). */
#include "core/peak.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/timer.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#define PEAK_ISA "avx512"
typedef __m512 peak_vec;
#define PEAK_LANES 16
#define PEAK_SET(x) _mm512_set1_ps(x)
#define PEAK_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define PEAK_SUM(v) _mm512_reduce_add_ps(v)
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define PEAK_ISA "avx2+fma"
typedef __m256 peak_vec;
#define PEAK_LANES 8
#define PEAK_SET(x) _mm256_set1_ps(x)
#define PEAK_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
static float peak_sum8(__m256 v) {
    float f[8];
    _mm256_storeu_ps(f, v);
    return f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7];
}
#define PEAK_SUM(v) peak_sum8(v)
#else
#define PEAK_ISA "scalar"
typedef float peak_vec;
#define PEAK_LANES 1
#define PEAK_SET(x) (x)
#define PEAK_FMA(a, b, c) ((a) * (b) + (c))
#define PEAK_SUM(v) (v)
#endif

/* The build's kind, from this translation unit's compiler macros (gcc
 * defines __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__; clang answers
 * __has_feature, in its own #if: gcc before 14 cannot parse it) */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PEAK_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define PEAK_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(PEAK_ASAN)
#define PEAK_BUILD "asan"
#elif defined(__SANITIZE_THREAD__) || defined(PEAK_TSAN)
#define PEAK_BUILD "tsan"
#elif !defined(__OPTIMIZE__)
#define PEAK_BUILD "debug"
#else
#define PEAK_BUILD "release"
#endif

const char *mtc_peak_build_kind(void) { return PEAK_BUILD; }

static const char *peak_article(const char *kind) { return kind[0] == 'a' ? "an" : "a"; }

int mtc_peak_usable(const mtc_peak *p, char *why, size_t len) {
    if (!strcmp(p->build, PEAK_BUILD)) return 1;
    char them[64];
    if (p->build[0])
        snprintf(them, sizeof them, "%s %s build", peak_article(p->build), p->build);
    else
        snprintf(them, sizeof them, "a build that did not record its kind");
    if (len)
        snprintf(why, len, "measured by %s and this is %s %s build (run mtc bench-peak)", them,
                 peak_article(PEAK_BUILD), PEAK_BUILD);
    return 0;
}

typedef struct {
    double seconds;
    double flops;
    float sink;
} peak_job;

/* The kernel: PEAK_CHAINS independent accumulators as named locals (an
 * array would be kept on the stack at -O2, and each FMA would then wait on a
 * store-to-load round trip: the old probe read a quarter below the GEMM).
 * Twelve chains cover an FMA latency of 4 cycles on 2 ports with room to
 * spare and stay within the 16 (AVX2) or 32 (AVX-512) vector registers;
 * each step is a block of 4 rounds, so the loop overhead is one branch per
 * 48 FMAs. acc = acc * m + a converges to a / (1 - m) = 0.1: no overflow,
 * no denormals. */
#define PEAK_CHAINS 12
#define PEAK_ROUND()                                                                               \
    do {                                                                                           \
        a0 = PEAK_FMA(a0, m, c), a1 = PEAK_FMA(a1, m, c), a2 = PEAK_FMA(a2, m, c);                 \
        a3 = PEAK_FMA(a3, m, c), a4 = PEAK_FMA(a4, m, c), a5 = PEAK_FMA(a5, m, c);                 \
        a6 = PEAK_FMA(a6, m, c), a7 = PEAK_FMA(a7, m, c), a8 = PEAK_FMA(a8, m, c);                 \
        a9 = PEAK_FMA(a9, m, c), a10 = PEAK_FMA(a10, m, c), a11 = PEAK_FMA(a11, m, c);             \
    } while (0)

static void *peak_thread(void *arg) {
    peak_job *j = arg;
    peak_vec m = PEAK_SET(0.999999f), c = PEAK_SET(1e-7f);
    peak_vec a0 = PEAK_SET(0.f), a1 = PEAK_SET(1.f), a2 = PEAK_SET(2.f), a3 = PEAK_SET(3.f);
    peak_vec a4 = PEAK_SET(4.f), a5 = PEAK_SET(5.f), a6 = PEAK_SET(6.f), a7 = PEAK_SET(7.f);
    peak_vec a8 = PEAK_SET(8.f), a9 = PEAK_SET(9.f), a10 = PEAK_SET(10.f), a11 = PEAK_SET(11.f);
    const int inner = 1 << 12; /* blocks of 4 rounds between clock reads */
    uint64_t t0 = mtc_time_ns(), until = t0 + (uint64_t)(j->seconds * 1e9), rounds = 0;
    do {
        for (int k = 0; k < inner; k++) {
            PEAK_ROUND();
            PEAK_ROUND();
            PEAK_ROUND();
            PEAK_ROUND();
        }
        rounds += 4 * (uint64_t)inner;
    } while (mtc_time_ns() < until);
    peak_vec s = PEAK_SET(0.f);
    s = PEAK_FMA(a0, m, s), s = PEAK_FMA(a1, m, s), s = PEAK_FMA(a2, m, s);
    s = PEAK_FMA(a3, m, s), s = PEAK_FMA(a4, m, s), s = PEAK_FMA(a5, m, s);
    s = PEAK_FMA(a6, m, s), s = PEAK_FMA(a7, m, s), s = PEAK_FMA(a8, m, s);
    s = PEAK_FMA(a9, m, s), s = PEAK_FMA(a10, m, s), s = PEAK_FMA(a11, m, s);
    j->sink = PEAK_SUM(s); /* keeps the loop */
    j->flops = (double)rounds * PEAK_CHAINS * PEAK_LANES * 2;
    j->seconds = (double)(mtc_time_ns() - t0) * 1e-9;
    return NULL;
}

mtc_result_t mtc_peak_measure(mtc_peak *out, int threads, double seconds) {
    memset(out, 0, sizeof *out);
    if (threads <= 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1) threads = 1;
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    peak_job *jobs = calloc((size_t)threads, sizeof *jobs);
    if (!th || !jobs) {
        free(th), free(jobs);
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "no memory for %d peak threads", threads);
    }
    int started = 0;
    for (int i = 0; i < threads; i++) {
        jobs[i].seconds = seconds > 0 ? seconds : 0.5;
        if (pthread_create(&th[i], NULL, peak_thread, &jobs[i]) != 0) break;
        started++;
    }
    double tflops = 0;
    for (int i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        tflops += jobs[i].flops / jobs[i].seconds * 1e-12;
    }
    free(th), free(jobs);
    if (started < threads)
        return mtc_error(MTC_ERR_SYSTEM, "could start only %d of %d peak threads", started,
                         threads);
    out->fma_fp32_tflops = tflops;
    out->cores = threads;
    snprintf(out->isa, sizeof out->isa, "%s", PEAK_ISA);
    snprintf(out->build, sizeof out->build, "%s", PEAK_BUILD);
    time_t now = time(NULL);
    struct tm tmv;
    strftime(out->measured_at, sizeof out->measured_at, "%Y-%m-%d %H:%M:%S", gmtime_r(&now, &tmv));
    return MTC_OK;
}

static char peak_path[4096]; /* mtc_peak_set_cache_path's; "": no cache */

void mtc_peak_set_cache_path(const char *path) {
    snprintf(peak_path, sizeof peak_path, "%s", path ? path : "");
}

void mtc_peak_cache_path(char *buf, size_t len) {
    size_t k = strlen(peak_path);
    if (len == 0) return;
    if (k >= len) k = len - 1; /* the caller's buffer bounds it */
    memcpy(buf, peak_path, k);
    buf[k] = 0;
}

mtc_result_t mtc_peak_load(mtc_peak *out) {
    memset(out, 0, sizeof *out);
    char path[4096];
    mtc_peak_cache_path(path, sizeof path);
    if (!path[0]) return mtc_error(MTC_ERR_IO, "no peak cache (none set: mtc_peak_set_cache_path)");
    FILE *f = fopen(path, "rb");
    if (!f) return mtc_error(MTC_ERR_IO, "no peak cache at %s", path);
    char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    cJSON *doc = cJSON_Parse(text);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, "fma_fp32_tflops");
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0)) {
        cJSON_Delete(doc);
        return mtc_error(MTC_ERR_FORMAT,
                         "%s is not an mtc peak cache (no positive fma_fp32_tflops): delete it "
                         "and measure again",
                         path);
    }
    out->fma_fp32_tflops = v->valuedouble;
    v = cJSON_GetObjectItemCaseSensitive(doc, "gemm_tflops");
    out->gemm_tflops = cJSON_IsNumber(v) ? v->valuedouble : 0;
    v = cJSON_GetObjectItemCaseSensitive(doc, "cores");
    out->cores = cJSON_IsNumber(v) ? v->valueint : 0;
    v = cJSON_GetObjectItemCaseSensitive(doc, "isa");
    snprintf(out->isa, sizeof out->isa, "%s", cJSON_IsString(v) ? v->valuestring : "?");
    v = cJSON_GetObjectItemCaseSensitive(doc, "measured_at");
    snprintf(out->measured_at, sizeof out->measured_at, "%s",
             cJSON_IsString(v) ? v->valuestring : "?");
    v = cJSON_GetObjectItemCaseSensitive(doc, "build"); /* absent: a cache from before it */
    snprintf(out->build, sizeof out->build, "%s", cJSON_IsString(v) ? v->valuestring : "");
    /* "gemm_engines": {"threads": 2, "dnnl": 226, "openblas": {"Cooperlake": 341}} */
    const cJSON *ge = cJSON_GetObjectItemCaseSensitive(doc, "gemm_engines");
    v = cJSON_GetObjectItemCaseSensitive(ge, "dnnl");
    out->gemm_dnnl_gflops = cJSON_IsNumber(v) && v->valuedouble > 0 ? v->valuedouble : 0;
    v = cJSON_GetObjectItemCaseSensitive(ge, "measured_at");
    snprintf(out->gemm_measured_at, sizeof out->gemm_measured_at, "%s",
             cJSON_IsString(v) ? v->valuestring : "?");
    v = cJSON_GetObjectItemCaseSensitive(ge, "threads");
    out->gemm_threads = cJSON_IsNumber(v) ? v->valueint : 0;
    const cJSON *ob = cJSON_GetObjectItemCaseSensitive(ge, "openblas"), *e;
    cJSON_ArrayForEach(e, ob) {
        if (out->blas_count >= MTC_PEAK_BLAS_CORES) break;
        if (!cJSON_IsNumber(e) || !(e->valuedouble > 0) || !e->string) continue;
        mtc_peak_blas *b = &out->blas[out->blas_count++];
        snprintf(b->core, sizeof b->core, "%s", e->string);
        b->gflops = e->valuedouble;
    }
    cJSON_Delete(doc);
    return MTC_OK;
}

void mtc_peak_cache_dir(char *dir, size_t len) {
    char path[4096];
    mtc_peak_cache_path(path, sizeof path);
    snprintf(dir, len, "%s", path);
    if (!path[0]) return; /* no cache */
    char *slash = strrchr(dir, '/');
    if (!slash) {
        snprintf(dir, len, ".");
        return;
    }
    if (slash == dir) {
        dir[1] = 0;
        return;
    }
    *slash = 0; /* created one level up at most, as $XDG_CACHE_HOME/mtc */
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        char *up = strrchr(dir, '/'); /* $HOME/.cache may be missing too */
        if (up && up != dir) {
            *up = 0;
            mkdir(dir, 0777);
            *up = '/';
        }
        mkdir(dir, 0777);
    }
}

mtc_result_t mtc_peak_save(const mtc_peak *p) {
    char path[4096], tmp[4200], dir[4096];
    mtc_peak_cache_path(path, sizeof path);
    if (!path[0])
        return mtc_error(MTC_ERR_IO, "no peak cache to write (none set: mtc_peak_set_cache_path)");
    mtc_peak_cache_dir(dir, sizeof dir);
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return mtc_error(MTC_ERR_IO, "cannot write the peak cache %s", tmp);
    fprintf(
        f,
        "{\"fma_fp32_tflops\": %.6g, \"gemm_tflops\": %.6g, \"cores\": %d, \"isa\": \"%s\", "
        "\"build\": \"%s\", \"measured_at\": \"%s\", \"gemm_engines\": {\"measured_at\": \"%s\", "
        "\"threads\": %d, \"dnnl\": %.6g, \"openblas\": {",
        p->fma_fp32_tflops, p->gemm_tflops, p->cores, p->isa, p->build, p->measured_at,
        p->gemm_measured_at, p->gemm_threads, p->gemm_dnnl_gflops);
    for (int i = 0; i < p->blas_count && i < MTC_PEAK_BLAS_CORES; i++)
        fprintf(f, "%s\"%s\": %.6g", i ? ", " : "", p->blas[i].core, p->blas[i].gflops);
    fprintf(f, "}}}\n");
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        remove(tmp);
        return mtc_error(MTC_ERR_IO, "cannot write the peak cache %s", path);
    }
    return MTC_OK;
}
