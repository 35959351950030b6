/*
 * io/onnx_proto.c — the protobuf encoding of the ONNX messages the exporter
 * writes (ModelProto, GraphProto, NodeProto, AttributeProto, TensorProto,
 * ValueInfoProto with TypeProto.Tensor and TensorShapeProto,
 * OperatorSetIdProto), from the structs of onnx.h. Field numbers are
 * onnx.proto's.
 *
 * Design note. A length-delimited field needs its length before its bytes,
 * so each message has one encoder that both measures (a sink with nowhere to
 * write only counts) and writes: a parent measures a child, writes the tag
 * and length, then writes the child. Measuring walks the structs, not the
 * data (a tensor's raw bytes count by their length), so a model of a billion
 * weights is measured in microseconds and written once, straight from the
 * initializers' host copies to memory or to a FILE through a 1 MiB buffer;
 * nothing is copied into intermediate message buffers. Integers are varints
 * (negative int64 as ten bytes, as protobuf does); floats fixed32; repeated
 * int64 fields are written unpacked (proto2's default; parsers accept both).
 */
#include <stdlib.h>
#include <string.h>

#include "io/onnx.h"

typedef struct sink {
    unsigned char *mem; /* write here (exact size), or */
    FILE *f;            /* here through buf, or neither: measure */
    unsigned char *buf;
    size_t used;
    size_t n;           /* bytes so far */
    int err;
} sink;

enum { BUF_BYTES = 1 << 20 };
enum { WT_VARINT = 0, WT_FIXED32 = 5, WT_LEN = 2 };

static void flush(sink *s)
{
    if (s->f && s->used && fwrite(s->buf, 1, s->used, s->f) != s->used) s->err = 1;
    s->used = 0;
}

static void put(sink *s, const void *p, size_t k)
{
    if (s->mem) {
        memcpy(s->mem + s->n, p, k);
    } else if (s->f) {
        if (s->used + k > BUF_BYTES) flush(s);
        if (k >= BUF_BYTES) {
            if (fwrite(p, 1, k, s->f) != k) s->err = 1;
        } else {
            memcpy(s->buf + s->used, p, k);
            s->used += k;
        }
    }
    s->n += k;
}

static void varint(sink *s, uint64_t v)
{
    unsigned char b[10];
    size_t k = 0;
    do {
        b[k] = (unsigned char)(v & 0x7Fu);
        v >>= 7;
        if (v) b[k] |= 0x80u;
        k++;
    } while (v);
    put(s, b, k);
}

static void key(sink *s, int field, int wire) { varint(s, ((uint64_t)field << 3) | (uint64_t)wire); }
static void f_int(sink *s, int field, int64_t v) { key(s, field, WT_VARINT), varint(s, (uint64_t)v); }

static void f_bytes(sink *s, int field, const void *p, size_t k)
{
    key(s, field, WT_LEN);
    varint(s, k);
    if (k) put(s, p, k);
}

static void f_str(sink *s, int field, const char *str)
{
    if (str) f_bytes(s, field, str, strlen(str));
}

static void f_float(sink *s, int field, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    unsigned char b[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16), (unsigned char)(u >> 24)};
    key(s, field, WT_FIXED32);
    put(s, b, 4);
}

/* A length-delimited submessage: measured, then written. */
#define SUB(s, field, enc, x)                                                                                          \
    do {                                                                                                               \
        sink m_ = {0};                                                                                                 \
        enc(&m_, x);                                                                                                   \
        key(s, field, WT_LEN);                                                                                         \
        varint(s, m_.n);                                                                                               \
        if ((s)->mem || (s)->f) enc(s, x);                                                                             \
        else (s)->n += m_.n;                                                                                           \
    } while (0)

/* TensorProto: dims 1, data_type 2, name 8, raw_data 9. */
static void enc_tensor(sink *s, const f8i_onnx_tensor *t)
{
    for (int d = 0; d < t->ndim; d++) f_int(s, 1, t->dims[d]);
    f_int(s, 2, t->type);
    f_str(s, 8, t->name);
    f_bytes(s, 9, t->data, t->bytes);
}

/* AttributeProto: name 1, f 2, i 3, s 4, ints 8, type 20. */
static void enc_attr(sink *s, const f8i_onnx_attr *a)
{
    f_str(s, 1, a->name);
    switch (a->type) {
    case F8I_ATTR_FLOAT: f_float(s, 2, a->f); break;
    case F8I_ATTR_INT: f_int(s, 3, a->i); break;
    case F8I_ATTR_STRING: f_str(s, 4, a->s); break;
    default:
        for (int k = 0; k < a->n_ints; k++) f_int(s, 8, a->ints[k]);
    }
    f_int(s, 20, a->type);
}

/* NodeProto: input 1, output 2, op_type 4, attribute 5. */
static void enc_node(sink *s, const f8i_onnx_node *n)
{
    for (int k = 0; k < n->n_in; k++) f_str(s, 1, n->in[k] ? n->in[k] : "");
    for (int k = 0; k < n->n_out; k++) f_str(s, 2, n->out[k]);
    f_str(s, 4, n->op);
    for (int k = 0; k < n->n_attr; k++) SUB(s, 5, enc_attr, &n->attr[k]);
}

/* TensorShapeProto.Dimension: dim_value 1, dim_param 2. */
typedef struct dim_ref {
    int64_t value;
    const char *name;
} dim_ref;

static void enc_dim(sink *s, const dim_ref *d)
{
    if (d->name) f_str(s, 2, d->name);
    else if (d->value >= 0) f_int(s, 1, d->value); /* else: an unknown dimension, no field */
}

/* TensorShapeProto: dim 1. */
static void enc_shape(sink *s, const f8i_onnx_io *io)
{
    for (int k = 0; k < io->rank; k++) {
        const dim_ref d = {io->dims[k], io->dim_names[k]};
        SUB(s, 1, enc_dim, &d);
    }
}

/* TypeProto.Tensor: elem_type 1, shape 2. */
static void enc_tensor_type(sink *s, const f8i_onnx_io *io)
{
    f_int(s, 1, io->type);
    if (io->rank >= 0) SUB(s, 2, enc_shape, io);
}

/* TypeProto: tensor_type 1. */
static void enc_type(sink *s, const f8i_onnx_io *io) { SUB(s, 1, enc_tensor_type, io); }

/* ValueInfoProto: name 1, type 2. */
static void enc_value_info(sink *s, const f8i_onnx_io *io)
{
    f_str(s, 1, io->name);
    SUB(s, 2, enc_type, io);
}

/* GraphProto: node 1, name 2, initializer 5, input 11, output 12. */
static void enc_graph(sink *s, const f8i_onnx_model *m)
{
    for (size_t k = 0; k < m->n_nodes; k++) SUB(s, 1, enc_node, &m->nodes[k]);
    f_str(s, 2, m->graph_name);
    for (size_t k = 0; k < m->n_inits; k++) SUB(s, 5, enc_tensor, &m->inits[k]);
    for (size_t k = 0; k < m->n_inputs; k++) SUB(s, 11, enc_value_info, &m->inputs[k]);
    for (size_t k = 0; k < m->n_outputs; k++) SUB(s, 12, enc_value_info, &m->outputs[k]);
}

/* OperatorSetIdProto: domain 1 (empty: the default domain), version 2. */
static void enc_opset(sink *s, const f8i_onnx_model *m) { f_int(s, 2, m->opset); }

/* ModelProto: ir_version 1, producer_name 2, producer_version 3, graph 7,
 * opset_import 8. */
static void enc_model(sink *s, const f8i_onnx_model *m)
{
    f_int(s, 1, m->ir_version);
    f_str(s, 2, m->producer);
    f_str(s, 3, m->producer_version);
    SUB(s, 7, enc_graph, m);
    SUB(s, 8, enc_opset, m);
}

size_t f8i_onnx_encode(const f8i_onnx_model *m, void *out, FILE *f, int *write_error)
{
    sink s = {0};
    s.mem = (unsigned char *)out;
    if (!out && f) {
        s.buf = (unsigned char *)malloc(BUF_BYTES);
        if (!s.buf) {
            *write_error = 1;
            return 0;
        }
        s.f = f;
    }
    enc_model(&s, m);
    if (s.f) {
        flush(&s);
        free(s.buf);
        *write_error = s.err;
    }
    return s.n;
}
