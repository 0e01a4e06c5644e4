/* plan/machine.c - machine descriptions: the JSON format of docs/plan.md,
 * the compiled-in named machines (src/plan/machines.json, turned into a C
 * string by src/plan/machines.cmake) and the `mtc bench-peak` cache of this
 * machine. Relies on cJSON. Does not measure anything (plan/peak.c does). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "plan/plan.h"
#include "core/outfile.h"
#include "core/peak.h"

extern const char mtc_plan_machines_json[];

static double num(const cJSON *o, const char *key, double dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static mtc_result_t parse_link(const cJSON *o, const char *key, const char *origin,
                               mtc_plan_link *out) {
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsObject(k))
        return mtc_error(MTC_ERR_FORMAT, "%s: machine needs an \"%s\" object with bw_gbps, lat_us",
                         origin, key);
    out->bw = num(k, "bw_gbps", 0) * 1e9;
    out->lat = num(k, "lat_us", 0) * 1e-6;
    out->sync = num(k, "sync_us", 0) * 1e-6;
    if (!(out->bw > 0) || out->lat < 0 || out->sync < 0)
        return mtc_error(MTC_ERR_FORMAT, "%s: \"%s\" needs bw_gbps > 0 and lat_us >= 0", origin,
                         key);
    return MTC_OK;
}

/* The optional "kernels_ns" object (CPU hosts; docs/plan.md): nanoseconds
 * per element of each kernel. Absent: kern.measured = 0. */
static const char *const KERN_KEYS[] = {
    "norm_fwd",  "norm_bwd",  "gelu_fwd",      "gelu_bwd",    "dropout",       "resid",
    "xent",      "adam",      "attn_fwd_tile", "attn_fwd_hs", "attn_bwd_tile", "attn_bwd_hs",
    "attn_drop", "gemm_call", "gradnorm",      "moe_row_fwd", "moe_row_bwd"};

static double *kern_field(mtc_plan_kernels *k, int i) {
    double *f[] = {&k->norm_fwd,      &k->norm_bwd,    &k->gelu_fwd,      &k->gelu_bwd,
                   &k->dropout,       &k->resid,       &k->xent,          &k->adam,
                   &k->attn_fwd_tile, &k->attn_fwd_hs, &k->attn_bwd_tile, &k->attn_bwd_hs,
                   &k->attn_drop,     &k->gemm_call,   &k->gradnorm,      &k->moe_row_fwd,
                   &k->moe_row_bwd};
    return f[i];
}

enum { NKERN = (int)(sizeof KERN_KEYS / sizeof KERN_KEYS[0]) };

static mtc_result_t parse_kernels(const cJSON *o, const char *origin, mtc_plan_machine *m) {
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(o, "kernels_ns");
    if (!k) return MTC_OK;
    if (!cJSON_IsObject(k))
        return mtc_error(MTC_ERR_FORMAT, "%s: machine %s: \"kernels_ns\" must be an object", origin,
                         m->name);
    for (int i = 0; i < NKERN; i++) {
        double v = num(k, KERN_KEYS[i], -1);
        if (!(v >= 0))
            return mtc_error(MTC_ERR_FORMAT,
                             "%s: machine %s: kernels_ns needs \"%s\" >= 0 (run mtc bench-peak "
                             "again)",
                             origin, m->name, KERN_KEYS[i]);
        *kern_field(&m->kern, i) = v * 1e-9;
    }
    m->kern.gemm_rate = num(k, "gemm_gflops", 0) * 1e9;
    m->kern.base_rss = num(k, "base_rss_mb", 0) * 1048576.0;
    m->kern.rank_rss = num(k, "rank_rss_mb", 0) * 1048576.0;
    m->kern.mpi_rss = num(k, "mpi_rss_mb", 0) * 1048576.0;
    m->kern.page_move = num(k, "page_move_ns", 0) * 1e-9; /* optional: per 4 KiB page */
    if (!(m->kern.page_move >= 0))
        return mtc_error(MTC_ERR_FORMAT, "%s: machine %s: kernels_ns \"page_move_ns\" must be >= 0",
                         origin, m->name);
    if (!(m->kern.gemm_rate >= 0 && m->kern.base_rss >= 0 && m->kern.rank_rss >= 0 &&
          m->kern.mpi_rss >= 0))
        return mtc_error(
            MTC_ERR_FORMAT,
            "%s: machine %s: kernels_ns needs gemm_gflops, base_rss_mb, rank_rss_mb and "
            "mpi_rss_mb >= 0",
            origin, m->name);
    m->kern.measured = 1;
    return MTC_OK;
}

static mtc_result_t parse_one(const cJSON *o, const char *origin, mtc_plan_machine *m) {
    memset(m, 0, sizeof *m);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    if (!cJSON_IsString(name) || !name->valuestring[0])
        return mtc_error(MTC_ERR_FORMAT, "%s: a machine needs a \"name\"", origin);
    snprintf(m->name, sizeof m->name, "%s", name->valuestring);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "description");
    if (cJSON_IsString(d)) snprintf(m->description, sizeof m->description, "%s", d->valuestring);
    m->is_cpu = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "is_cpu"));
    double dpn = num(o, "devices_per_node", 0);
    if (!(dpn >= 1 && dpn <= 1 << 20)) /* checked before the cast: a huge value is no int */
        return mtc_error(MTC_ERR_FORMAT,
                         "%s: machine %s needs devices_per_node in [1, 1048576] (got %g)", origin,
                         m->name, dpn);
    m->devices_per_node = (int)dpn;
    m->peak_flops = num(o, "peak_tflops_bf16", 0) * 1e12;
    m->peak_flops_fp32 = num(o, "peak_tflops_fp32", 0) * 1e12;
    m->shape_flops_fp32 = num(o, "shape_tflops_fp32", 0) * 1e12;
    m->fma_flops_fp32 = num(o, "fma_tflops_fp32", 0) * 1e12;
    m->cpu_share = num(o, "cpu_share", 0);
    if (!(m->shape_flops_fp32 >= 0 && m->cpu_share >= 0 && m->cpu_share <= 1))
        return mtc_error(MTC_ERR_FORMAT,
                         "%s: machine %s: need shape_tflops_fp32 >= 0 (got %g) and cpu_share in "
                         "[0, 1] (got %g)",
                         origin, m->name, m->shape_flops_fp32 * 1e-12, m->cpu_share);
    m->mem_bytes = num(o, "hbm_gb", 0) * 1e9;
    m->mem_bw = num(o, "mem_bw_gbps", 0) * 1e9;
    m->achieved = num(o, "achieved_fraction", 1.0);
    m->oversub_lat = num(o, "oversub_lat_us", 0) * 1e-6;
    m->oversub_sync = num(o, "oversub_sync_us", 0) * 1e-6;
    m->oversub_frac = num(o, "oversub_frac", 0);
    m->mpi_oversub_sync = num(o, "mpi_oversub_sync_us", 0) * 1e-6;
    m->mpi_oversub_frac = num(o, "mpi_oversub_frac", 0);
    double ovs[2][2] = {{m->oversub_sync, m->oversub_frac},
                        {m->mpi_oversub_sync, m->mpi_oversub_frac}};
    for (int i = 0; i < 2; i++)
        if (!(ovs[i][0] >= 0 && ovs[i][0] < 1 && ovs[i][1] >= 0 && ovs[i][1] <= 1000))
            return mtc_error(MTC_ERR_FORMAT,
                             "%s: machine %s: need %soversub_sync_us in [0, 1e6) (got %g) and "
                             "%soversub_frac in [0, 1000] (got %g)",
                             origin, m->name, i ? "mpi_" : "", ovs[i][0] * 1e6, i ? "mpi_" : "",
                             ovs[i][1]);
    if (m->devices_per_node < 1)
        return mtc_error(MTC_ERR_FORMAT, "%s: machine %s needs devices_per_node >= 1", origin,
                         m->name);
    if (!(m->peak_flops > 0) && !(m->peak_flops_fp32 > 0))
        return mtc_error(MTC_ERR_FORMAT,
                         "%s: machine %s needs peak_tflops_bf16 or peak_tflops_fp32 > 0", origin,
                         m->name);
    if (!(m->achieved > 0 && m->achieved <= 1))
        return mtc_error(MTC_ERR_FORMAT, "%s: machine %s: achieved_fraction=%g must be in (0, 1]",
                         origin, m->name, m->achieved);
    if (!(m->mem_bytes > 0))
        return mtc_error(MTC_ERR_FORMAT, "%s: machine %s needs hbm_gb > 0", origin, m->name);
    MTC_CHECK(parse_kernels(o, origin, m));
    MTC_CHECK(parse_link(o, "intra", origin, &m->intra));
    return parse_link(o, "inter", origin, &m->inter);
}

mtc_result_t mtc_plan_machine_parse(const char *json, const char *origin, mtc_plan_machine *out) {
    cJSON *root = cJSON_Parse(json);
    if (!root) return mtc_error(MTC_ERR_FORMAT, "%s is not valid JSON", origin);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "machines");
    const cJSON *one = cJSON_IsArray(list) ? cJSON_GetArrayItem(list, 0) : root;
    mtc_result_t rc = one ? parse_one(one, origin, out)
                          : mtc_error(MTC_ERR_FORMAT, "%s holds no machine", origin);
    cJSON_Delete(root);
    return rc;
}

static mtc_result_t read_text(const char *path, char **out) {
    FILE *f;
    MTC_CHECK(mtc_infile_open(path, &f));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    size_t got = s ? fread(s, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!s || got != (size_t)n) {
        free(s);
        return mtc_error(MTC_ERR_IO, "cannot read %s", path);
    }
    s[n] = 0;
    *out = s;
    return MTC_OK;
}

static char machine_path[4096]; /* mtc_plan_machine_set_cache_path's; "": none */

void mtc_plan_machine_set_cache_path(const char *path) {
    snprintf(machine_path, sizeof machine_path, "%s", path ? path : "");
}

void mtc_plan_machine_cache_path(char *buf, size_t n) {
    size_t k = strlen(machine_path);
    if (n == 0) return;
    if (k >= n) k = n - 1; /* the caller's buffer bounds it */
    memcpy(buf, machine_path, k);
    buf[k] = 0;
}

const char *mtc_plan_machine_names(void) {
    static char names[512];
    if (names[0]) return names;
    cJSON *root = cJSON_Parse(mtc_plan_machines_json);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "machines"), *it;
    size_t k = (size_t)snprintf(names, sizeof names, "this");
    cJSON_ArrayForEach(it, list) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
        if (cJSON_IsString(nm) && k + 2 + strlen(nm->valuestring) < sizeof names)
            k += (size_t)snprintf(names + k, sizeof names - k, " %s", nm->valuestring);
    }
    cJSON_Delete(root);
    return names;
}

mtc_result_t mtc_plan_machine_load(const char *name, mtc_plan_machine *out) {
    if (!name || !name[0] || !strcmp(name, "this")) {
        char path[1024];
        mtc_plan_machine_cache_path(path, sizeof path);
        struct stat st;
        if (stat(path, &st) != 0)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "machine 'this' is not measured yet: run `mtc bench-peak` (writes %s) "
                             "or pass --machine NAME|FILE (named: %s)",
                             path, mtc_plan_machine_names());
        char *text = NULL;
        MTC_CHECK(read_text(path, &text));
        mtc_result_t rc = mtc_plan_machine_parse(text, path, out);
        free(text);
        /* MFU against the FMA peak bench-peak cached for mtc train (by a
         * build of this one's kind: a debug build's is several times low) */
        mtc_peak pk;
        if (rc == MTC_OK && !(out->fma_flops_fp32 > 0) && mtc_peak_load(&pk) == MTC_OK &&
            mtc_peak_usable(&pk, NULL, 0) && pk.cores > 0)
            out->fma_flops_fp32 = pk.fma_fp32_tflops * 1e12 / pk.cores;
        if (rc == MTC_OK) mtc_error_clear(); /* no FMA cache: the GEMM rates stand in */
        return rc;
    }
    cJSON *root = cJSON_Parse(mtc_plan_machines_json);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "machines"), *it;
    mtc_result_t rc = MTC_ERR_INVALID_ARGUMENT;
    cJSON_ArrayForEach(it, list) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
        if (cJSON_IsString(nm) && !strcmp(nm->valuestring, name)) {
            rc = parse_one(it, "src/plan/machines.json", out);
            break;
        }
    }
    cJSON_Delete(root);
    if (rc != MTC_ERR_INVALID_ARGUMENT) return rc;
    struct stat st;
    if (stat(name, &st) != 0)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "machine '%s' is neither a named machine (%s) nor a file", name,
                         mtc_plan_machine_names());
    char *text = NULL;
    MTC_CHECK(read_text(name, &text));
    rc = mtc_plan_machine_parse(text, name, out);
    free(text);
    return rc;
}

mtc_result_t mtc_plan_machine_write(const mtc_plan_machine *m, const char *path) {
    char tmp[1100], dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) { /* create the cache folder (and its parent) */
        *slash = 0;
        char *p = dir[0] == '/' ? dir + 1 : dir;
        for (; (p = strchr(p, '/')); *p++ = '/') {
            *p = 0;
            mkdir(dir, 0755);
        }
        mkdir(dir, 0755);
    }
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return mtc_error(MTC_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    fprintf(f,
            "{\n  \"format\": \"mtc-machine-1\",\n  \"name\": \"%s\",\n  \"description\": \"%s\",\n"
            "  \"is_cpu\": %s,\n  \"devices_per_node\": %d,\n  \"peak_tflops_bf16\": %.6g,\n"
            "  \"peak_tflops_fp32\": %.6g,\n  \"shape_tflops_fp32\": %.6g,\n  "
            "\"cpu_share\": %.4g,\n  \"hbm_gb\": "
            "%.6g,\n  \"mem_bw_gbps\": %.6g,\n"
            "  \"intra\": {\"bw_gbps\": %.6g, \"lat_us\": %.6g, \"sync_us\": %.6g},\n"
            "  \"inter\": {\"bw_gbps\": %.6g, \"lat_us\": %.6g, \"sync_us\": %.6g},\n"
            "  \"oversub_lat_us\": %.6g,\n  \"oversub_sync_us\": %.6g,\n  \"oversub_frac\": "
            "%.6g,\n  \"mpi_oversub_sync_us\": %.6g,\n  \"mpi_oversub_frac\": %.6g,\n  "
            "\"achieved_fraction\": %.6g",
            m->name, m->description, m->is_cpu ? "true" : "false", m->devices_per_node,
            m->peak_flops * 1e-12, m->peak_flops_fp32 * 1e-12, m->shape_flops_fp32 * 1e-12,
            m->cpu_share, m->mem_bytes * 1e-9, m->mem_bw * 1e-9, m->intra.bw * 1e-9,
            m->intra.lat * 1e6, m->intra.sync * 1e6, m->inter.bw * 1e-9, m->inter.lat * 1e6,
            m->inter.sync * 1e6, m->oversub_lat * 1e6, m->oversub_sync * 1e6, m->oversub_frac,
            m->mpi_oversub_sync * 1e6, m->mpi_oversub_frac, m->achieved);
    if (m->fma_flops_fp32 > 0) /* MFU's denominator (mtc_mfu) */
        fprintf(f, ",\n  \"fma_tflops_fp32\": %.6g", m->fma_flops_fp32 * 1e-12);
    if (m->kern.measured) {
        fprintf(f, ",\n  \"kernels_ns\": {");
        for (int i = 0; i < NKERN; i++)
            fprintf(f, "%s\"%s\": %.6g", i ? ", " : "", KERN_KEYS[i],
                    *kern_field((mtc_plan_kernels *)&m->kern, i) * 1e9);
        fprintf(f,
                ", \"gemm_gflops\": %.6g, \"base_rss_mb\": %.6g, \"rank_rss_mb\": %.6g, "
                "\"mpi_rss_mb\": %.6g",
                m->kern.gemm_rate * 1e-9, m->kern.base_rss / 1048576.0,
                m->kern.rank_rss / 1048576.0, m->kern.mpi_rss / 1048576.0);
        if (m->kern.page_move > 0) fprintf(f, ", \"page_move_ns\": %.6g", m->kern.page_move * 1e9);
        fprintf(f, "}");
    }
    fprintf(f, "\n}\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        remove(tmp);
        return mtc_error(MTC_ERR_IO, "cannot write %s", tmp);
    }
    if (rename(tmp, path) != 0) {
        remove(tmp);
        return mtc_error(MTC_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    }
    return MTC_OK;
}
