/* ckpt/onnx_pb.h - the ONNX protobuf written by mtc itself: a small
 * protobuf encoder and a graph builder over it, for ckpt/onnx.c.
 *
 * Protobuf wire format: each field is a key varint (field << 3 | wire type)
 * then a varint (type 0), 4 little-endian bytes (type 5) or a length varint
 * and that many bytes (type 2: strings, bytes, nested messages). Repeated
 * scalars are written unpacked (every parser accepts both forms).
 * ONNX messages and field numbers (onnx/onnx.proto, IR version 8):
 *   ModelProto      ir_version 1, producer_name 2, graph 7, opset_import 8
 *   GraphProto      node 1, name 2, initializer 5, input 11, output 12
 *   NodeProto       input 1, output 2, name 3, op_type 4, attribute 5
 *   AttributeProto  name 1, f 2, i 3, ints 8, type 20
 *   TensorProto     dims 1, data_type 2, name 8, raw_data 9, external_data 13
 *                   (StringStringEntryProto key 1, value 2), data_location 14
 *   ValueInfoProto  name 1, type 2 -> TypeProto.tensor_type 1 -> elem_type 1,
 *                   shape 2 -> dim 1 -> dim_value 1 | dim_param 2
 * Names of values are SSA: every node output gets a fresh name. The graph
 * is built in memory (one copy of the weights), then written in one pass.
 * Does not read ONNX, and knows nothing of models. */
#ifndef MTC_CKPT_ONNX_PB_H
#define MTC_CKPT_ONNX_PB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/result.h"

/* ONNX TensorProto.DataType values used here */
enum { OX_FLOAT = 1, OX_INT64 = 7, OX_BOOL = 9, OX_FLOAT16 = 10 };

typedef struct {
    unsigned char *p;
    size_t n, cap;
    int oom; /* sticky: an append failed */
} pb_buf;

/* An attribute: type 'i' (int), 'f' (float) or 'I' (ints). */
typedef struct {
    const char *name;
    char type;
    int64_t i;
    float f;
    const int64_t *ints;
    int nints;
} ox_attr;

typedef struct {
    pb_buf nodes, inits, inputs, outputs;
    char **names; /* every value name made (freed by ox_graph_free) */
    int nnames, capnames;
    int counter;
    mtc_result_t rc; /* sticky: the first failure */
    FILE *ext;       /* non-NULL: initializers of 1 kB and more go here (ox_external) */
    const char *ext_name;
    uint64_t ext_at;
} ox_graph;

/* Stores the payload of every later initializer of 1 kB or more in f (its
 * file name, relative to the .onnx file, is name) as ONNX's external data:
 * TensorProto.external_data {location, offset, length} and data_location
 * EXTERNAL (1) instead of raw_data; offsets aligned to 64 bytes. */
void ox_external(ox_graph *g, FILE *f, const char *name);

void ox_graph_free(ox_graph *g);

/* A new value name from a printf format (owned by g). */
const char *ox_name(ox_graph *g, const char *fmt, ...);
/* Adds node `op` with inputs in[0..nin) (NULL entries: an omitted optional
 * input) and nout outputs; out[k] NULL gets a fresh name. Returns out[0]'s
 * name (fresh names are written back into out when it is not NULL). */
const char *ox_node(ox_graph *g, const char *op, int nin, const char *const *in, int nout,
                    const char **out, const ox_attr *attrs, int nattrs);
/* One-output shorthands. */
const char *ox_op1(ox_graph *g, const char *op, const char *a);
const char *ox_op2(ox_graph *g, const char *op, const char *a, const char *b);
const char *ox_op1a(ox_graph *g, const char *op, const char *a, const ox_attr *at, int nat);
const char *ox_op2a(ox_graph *g, const char *op, const char *a, const char *b, const ox_attr *at,
                    int nat);

/* A float initializer `name` with dims[0..nd) from data (row-major); f16:
 * stored as FLOAT16 and cast to float by a Cast node. Returns the name of
 * the float value. */
const char *ox_init_f32(ox_graph *g, const char *name, const int64_t *dims, int nd,
                        const float *data, int f16);
/* Constants: an int64 vector (nd 1) or scalar (nd 0), a float scalar. */
const char *ox_const_i64(ox_graph *g, const int64_t *v, int n, int nd);
const char *ox_const_f32(ox_graph *g, float v);

/* A graph input or output: elem OX_*, dims[k] >= 0 a fixed size, < 0 the
 * symbolic dim_param params[k]. */
void ox_io(ox_graph *g, int output, const char *name, int elem, int nd, const int64_t *dims,
           const char *const *params);

/* Writes the ModelProto (IR 8, default domain at opset) to path. */
mtc_result_t ox_write(ox_graph *g, const char *path, int opset, const char *producer);

#endif
