/* ckpt/onnx_pb.c - protobuf encoding and the ONNX graph builder; see
 * onnx_pb.h. Limitations: the whole graph (weights included) is held in
 * memory before it is written, unless its weights go to an external-data
 * file (ox_external); protobuf caps one message at 2 GB, so ox_write refuses
 * a larger graph. */
#include "ckpt/onnx_pb.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/gguf.h"

/* ---- protobuf ------------------------------------------------------------------- */

static void pb_raw(pb_buf *b, const void *s, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p, b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void pb_varint(pb_buf *b, uint64_t v) {
    unsigned char s[10];
    int n = 0;
    do {
        s[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    pb_raw(b, s, (size_t)n);
}

static void pb_key(pb_buf *b, int field, int wire) { pb_varint(b, (uint64_t)field << 3 | wire); }
static void pb_int(pb_buf *b, int field, int64_t v) {
    pb_key(b, field, 0), pb_varint(b, (uint64_t)v);
}
static void pb_bytes(pb_buf *b, int field, const void *s, size_t n) {
    pb_key(b, field, 2), pb_varint(b, n), pb_raw(b, s, n);
}
static void pb_str(pb_buf *b, int field, const char *s) { pb_bytes(b, field, s, strlen(s)); }
static void pb_msg(pb_buf *b, int field, pb_buf *child) {
    if (child->oom) b->oom = 1;
    pb_bytes(b, field, child->p, child->n);
    free(child->p);
    memset(child, 0, sizeof *child);
}
static void pb_f32(pb_buf *b, int field, float f) {
    unsigned char s[4];
    uint32_t u;
    memcpy(&u, &f, 4);
    for (int k = 0; k < 4; k++)
        s[k] = (unsigned char)(u >> (8 * k));
    pb_key(b, field, 5), pb_raw(b, s, 4);
}

/* ---- the graph -------------------------------------------------------------------- */

void ox_graph_free(ox_graph *g) {
    for (int i = 0; i < g->nnames; i++)
        free(g->names[i]);
    free(g->names);
    free(g->nodes.p), free(g->inits.p), free(g->inputs.p), free(g->outputs.p);
    memset(g, 0, sizeof *g);
}

static void ox_fail(ox_graph *g, const char *what) {
    if (g->rc == MTC_OK)
        g->rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory building %s", what);
}

const char *ox_name(ox_graph *g, const char *fmt, ...) {
    static const char none[] = "oom";
    char s[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s, sizeof s, fmt, ap);
    va_end(ap);
    if (g->nnames == g->capnames) {
        int cap = g->capnames ? 2 * g->capnames : 1024;
        char **v = realloc(g->names, (size_t)cap * sizeof *v);
        if (!v) {
            ox_fail(g, "the ONNX graph");
            return none;
        }
        g->names = v, g->capnames = cap;
    }
    char *d = strdup(s);
    if (!d) {
        ox_fail(g, "the ONNX graph");
        return none;
    }
    g->names[g->nnames++] = d;
    return d;
}

const char *ox_node(ox_graph *g, const char *op, int nin, const char *const *in, int nout,
                    const char **out, const ox_attr *attrs, int nattrs) {
    pb_buf n = {0};
    const char *first = NULL;
    for (int k = 0; k < nin; k++)
        pb_str(&n, 1, in[k] ? in[k] : "");
    for (int k = 0; k < nout; k++) {
        const char *o = out && out[k] ? out[k] : ox_name(g, "%s_%d", op, g->counter++);
        if (out) out[k] = o;
        if (!k) first = o;
        pb_str(&n, 2, o);
    }
    char nm[64];
    snprintf(nm, sizeof nm, "n%d_%s", g->counter++, op);
    pb_str(&n, 3, nm);
    pb_str(&n, 4, op);
    for (int k = 0; k < nattrs; k++) {
        const ox_attr *a = &attrs[k];
        pb_buf at = {0};
        pb_str(&at, 1, a->name);
        if (a->type == 'f') {
            pb_f32(&at, 2, a->f), pb_int(&at, 20, 1);
        } else if (a->type == 'i') {
            pb_int(&at, 3, a->i), pb_int(&at, 20, 2);
        } else {
            for (int j = 0; j < a->nints; j++)
                pb_int(&at, 8, a->ints[j]);
            pb_int(&at, 20, 7);
        }
        pb_msg(&n, 5, &at);
    }
    pb_msg(&g->nodes, 1, &n);
    if (g->nodes.oom) ox_fail(g, "the ONNX graph");
    return first;
}

const char *ox_op1(ox_graph *g, const char *op, const char *a) {
    return ox_node(g, op, 1, &a, 1, NULL, NULL, 0);
}
const char *ox_op2(ox_graph *g, const char *op, const char *a, const char *b) {
    const char *in[2] = {a, b};
    return ox_node(g, op, 2, in, 1, NULL, NULL, 0);
}
const char *ox_op1a(ox_graph *g, const char *op, const char *a, const ox_attr *at, int nat) {
    return ox_node(g, op, 1, &a, 1, NULL, at, nat);
}
const char *ox_op2a(ox_graph *g, const char *op, const char *a, const char *b, const ox_attr *at,
                    int nat) {
    const char *in[2] = {a, b};
    return ox_node(g, op, 2, in, 1, NULL, at, nat);
}

/* TensorProto header fields (dims, type, name), then raw_data of n bytes
 * appended from data straight into the graph's initializers. */
void ox_external(ox_graph *g, FILE *f, const char *name) {
    g->ext = f, g->ext_name = name, g->ext_at = 0;
}

static void entry(pb_buf *t, const char *key, const char *value) {
    pb_buf e = {0};
    pb_str(&e, 1, key), pb_str(&e, 2, value);
    pb_msg(t, 13, &e);
}

static void tensor(ox_graph *g, const char *name, int type, const int64_t *dims, int nd,
                   const void *data, size_t n) {
    pb_buf t = {0};
    for (int k = 0; k < nd; k++)
        pb_int(&t, 1, dims[k]);
    pb_int(&t, 2, type);
    pb_str(&t, 8, name);
    if (g->ext && n >= 1024) { /* external data: the payload goes to the side file */
        static const char pad[64];
        size_t skip = (size_t)((64 - g->ext_at % 64) % 64);
        if (fwrite(pad, 1, skip, g->ext) != skip || fwrite(data, 1, n, g->ext) != n) {
            if (g->rc == MTC_OK)
                g->rc =
                    mtc_error(MTC_ERR_IO, "writing %s failed: %s", g->ext_name, strerror(errno));
        }
        g->ext_at += skip;
        char off[32], len[32];
        snprintf(off, sizeof off, "%llu", (unsigned long long)g->ext_at);
        snprintf(len, sizeof len, "%zu", n);
        g->ext_at += n;
        entry(&t, "location", g->ext_name), entry(&t, "offset", off), entry(&t, "length", len);
        pb_int(&t, 14, 1);
        pb_msg(&g->inits, 5, &t);
        if (g->inits.oom) ox_fail(g, "the ONNX initializers");
        return;
    }
    pb_key(&t, 9, 2), pb_varint(&t, n);
    /* the initializer message: its header, then the payload without a copy */
    pb_key(&g->inits, 5, 2), pb_varint(&g->inits, t.n + n);
    pb_raw(&g->inits, t.p, t.n);
    pb_raw(&g->inits, data, n);
    if (t.oom || g->inits.oom) ox_fail(g, "the ONNX initializers");
    free(t.p);
}

const char *ox_init_f32(ox_graph *g, const char *name, const int64_t *dims, int nd,
                        const float *data, int f16) {
    size_t n = 1;
    for (int k = 0; k < nd; k++)
        n *= (size_t)dims[k];
    const char *nm = ox_name(g, "%s", name);
    if (!f16) {
        tensor(g, nm, OX_FLOAT, dims, nd, data, n * 4); /* x86: little-endian as ONNX */
        return nm;
    }
    uint16_t *h = malloc((n ? n : 1) * 2);
    if (!h) {
        ox_fail(g, "the ONNX initializers");
        return nm;
    }
    for (size_t i = 0; i < n; i++)
        h[i] = mtc_gguf_f32_to_f16(data[i]);
    const char *h16 = ox_name(g, "%s_fp16", name);
    tensor(g, h16, OX_FLOAT16, dims, nd, h, n * 2);
    free(h);
    ox_attr to = {"to", 'i', OX_FLOAT, 0, NULL, 0};
    const char *out[1] = {nm};
    ox_node(g, "Cast", 1, &h16, 1, out, &to, 1);
    return nm;
}

const char *ox_const_i64(ox_graph *g, const int64_t *v, int n, int nd) {
    const char *nm = ox_name(g, "c%d", g->counter++);
    int64_t d = n;
    tensor(g, nm, OX_INT64, &d, nd, v, (size_t)n * 8);
    return nm;
}

const char *ox_const_f32(ox_graph *g, float v) {
    const char *nm = ox_name(g, "c%d", g->counter++);
    tensor(g, nm, OX_FLOAT, NULL, 0, &v, 4);
    return nm;
}

void ox_io(ox_graph *g, int output, const char *name, int elem, int nd, const int64_t *dims,
           const char *const *params) {
    pb_buf shape = {0}, tt = {0}, ty = {0}, vi = {0};
    for (int k = 0; k < nd; k++) {
        pb_buf d = {0};
        if (dims[k] >= 0)
            pb_int(&d, 1, dims[k]);
        else
            pb_str(&d, 2, params[k]);
        pb_msg(&shape, 1, &d);
    }
    pb_int(&tt, 1, elem);
    pb_msg(&tt, 2, &shape);
    pb_msg(&ty, 1, &tt);
    pb_str(&vi, 1, name);
    pb_msg(&vi, 2, &ty);
    pb_msg(output ? &g->outputs : &g->inputs, output ? 12 : 11, &vi);
}

mtc_result_t ox_write(ox_graph *g, const char *path, int opset, const char *producer) {
    if (g->rc != MTC_OK) return g->rc;
    pb_buf head = {0}, ops = {0}, gh = {0};
    pb_str(&gh, 2, "mtc");
    size_t glen = gh.n + g->nodes.n + g->inits.n + g->inputs.n + g->outputs.n;
    if (glen > 0x7fffffffu)
        return mtc_error(MTC_ERR_UNSUPPORTED,
                         "the ONNX graph is %.2f GB, over protobuf's 2 GB (export "
                         "--format safetensors and convert that folder with Optimum)",
                         (double)glen / 1e9);
    pb_int(&head, 1, 8); /* IR version 8 */
    pb_str(&head, 2, producer);
    pb_str(&ops, 1, "");
    pb_int(&ops, 2, opset);
    pb_msg(&head, 8, &ops);
    pb_key(&head, 7, 2), pb_varint(&head, glen);
    mtc_result_t rc = MTC_OK;
    if (head.oom || gh.oom) rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory writing %s", path);
    FILE *f = rc == MTC_OK ? fopen(path, "wb") : NULL;
    if (rc == MTC_OK && !f)
        rc = mtc_error(MTC_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    /* GraphProto's fields in order: name, nodes, initializers, inputs, outputs */
    const pb_buf *parts[] = {&head, &gh, &g->nodes, &g->inits, &g->inputs, &g->outputs};
    for (size_t k = 0; rc == MTC_OK && k < sizeof parts / sizeof parts[0]; k++)
        if (parts[k]->n && fwrite(parts[k]->p, 1, parts[k]->n, f) != parts[k]->n)
            rc = mtc_error(MTC_ERR_IO, "writing %s failed: %s", path, strerror(errno));
    if (f && fclose(f) != 0 && rc == MTC_OK)
        rc = mtc_error(MTC_ERR_IO, "writing %s failed: %s", path, strerror(errno));
    free(head.p), free(gh.p);
    return rc;
}
