/*
 * io/onnx.h — the ONNX exporter's internals, shared by its three files:
 *   onnx_proto.c    the model as plain structs, and their protobuf encoding
 *   onnx_graph.c    f8_onnx: names, values, initializers, nodes, rollback, save
 *   onnx_modules.c  f8 objects (modules, attention, embedding) -> nodes
 */
#ifndef F8_IO_ONNX_H
#define F8_IO_ONNX_H

#include <stdio.h>

#include "core/f8i.h"

/* ONNX TensorProto.DataType numbers used here. */
enum {
    F8I_ONNX_FLOAT = 1,
    F8I_ONNX_INT64 = 7,
    F8I_ONNX_BOOL = 9,
    F8I_ONNX_BF16 = 16,
    F8I_ONNX_E4M3 = 17, /* FLOAT8E4M3FN */
    F8I_ONNX_E5M2 = 19
};

/* AttributeProto.AttributeType numbers used here. */
enum { F8I_ATTR_FLOAT = 1, F8I_ATTR_INT = 2, F8I_ATTR_STRING = 3, F8I_ATTR_INTS = 7 };

#define F8I_ONNX_MAX_DIMS 8

typedef struct f8i_onnx_attr {
    const char *name; /* static */
    int type;
    float f;
    int64_t i;
    const char *s;    /* static */
    int64_t ints[F8I_ONNX_MAX_DIMS];
    int n_ints;
} f8i_onnx_attr;

typedef struct f8i_onnx_node {
    const char *op;   /* static */
    const char *in[4], *out[3]; /* owned by the graph's string pool */
    int n_in, n_out;
    f8i_onnx_attr attr[3];
    int n_attr;
} f8i_onnx_node;

/* An initializer: raw little-endian data (host, owned by the graph). */
typedef struct f8i_onnx_tensor {
    const char *name;
    int type;
    int64_t dims[4];
    int ndim;
    void *data;
    size_t bytes;
} f8i_onnx_tensor;

/* A graph input or output: rank < 0 leaves the shape unstated; a dimension
 * with a name is symbolic. */
typedef struct f8i_onnx_io {
    const char *name;
    int type;
    int rank;
    int64_t dims[F8I_ONNX_MAX_DIMS];
    const char *dim_names[F8I_ONNX_MAX_DIMS];
} f8i_onnx_io;

typedef struct f8i_onnx_model {
    int64_t ir_version, opset;
    const char *producer, *producer_version, *graph_name;
    const f8i_onnx_node *nodes;
    size_t n_nodes;
    const f8i_onnx_tensor *inits;
    size_t n_inits;
    const f8i_onnx_io *inputs, *outputs;
    size_t n_inputs, n_outputs;
} f8i_onnx_model;

/* Encode the model: to out (size bytes, exactly what a measuring call
 * returned), to a FILE (buffered), or neither (measure). Returns the size;
 * *write_error (when f is used) is set on a failed fwrite. */
size_t f8i_onnx_encode(const f8i_onnx_model *m, void *out, FILE *f, int *write_error);

/* ---- the builder (onnx_graph.c), as onnx_modules.c uses it ---------------- */

/* A value's element type, rank and last dimension (-1 unknown; rank -1 too). */
typedef struct f8i_onnx_value {
    const char *name;
    int type;
    int rank;
    int64_t last;
} f8i_onnx_value;

/* How a parameter is stored, for the cache of weights met again. */
typedef enum f8i_onnx_form {
    F8I_FORM_HP = 0,   /* float value of the parameter as held, [rows, cols] */
    F8I_FORM_HP_T = 1, /* its transpose [cols, rows] */
    F8I_FORM_FP8_T = 2, /* dequantized FP8 codes, transposed [cols, rows] */
    F8I_FORM_FP8_ROWS = 3 /* an embedding table as per-row FP8 codes (fp8_embedding), [rows, cols];
                             also cached as F8I_FORM_HP, which a tied LM head then reads */
} f8i_onnx_form;

f8_ctx *f8i_onnx_ctx(const f8_onnx *g);
const f8_onnx_config *f8i_onnx_config(const f8_onnx *g);

/* *v = the value named `name`, of element type `type`; otherwise
 * F8_ERR_INVALID_ARGUMENT naming fn. The pointer is valid until the next
 * value is added. */
f8_status f8i_onnx_need(f8_onnx *g, const char *fn, const char *name, int type, const f8i_onnx_value **v);
/* Check a new output name (valid, unused). */
f8_status f8i_onnx_check_new(f8_onnx *g, const char *fn, const char *name);

/* A fresh internal name "_f8.<n>.<hint>" (NULL on out of memory). */
const char *f8i_onnx_tmp(f8_onnx *g, const char *hint);
/* Add a node; out names are defined as values (type FLOAT unless set later
 * with f8i_onnx_set_value). The strings must be the graph's (tmp, or values).
 * Returns NULL on out of memory; else the node for attributes. */
f8i_onnx_node *f8i_onnx_node_add(f8_onnx *g, const char *op, int n_in, const char *const *in, int n_out,
                                 const char *const *out);
void f8i_onnx_set_value(f8_onnx *g, const char *name, int type, int rank, int64_t last);
void f8i_onnx_attr_int(f8i_onnx_node *n, const char *name, int64_t v);
void f8i_onnx_attr_float(f8i_onnx_node *n, const char *name, float v);
void f8i_onnx_attr_string(f8i_onnx_node *n, const char *name, const char *v);
void f8i_onnx_attr_ints(f8i_onnx_node *n, const char *name, const int64_t *v, int count);

/* An initializer taking ownership of data (malloc'd; freed on failure);
 * NULL name picks a fresh one from hint. Returns its name or NULL. */
const char *f8i_onnx_init(f8_onnx *g, const char *hint, int type, const int64_t *dims, int ndim, void *data,
                          size_t bytes);
/* Shared constants, one initializer each per graph: a float scalar, an int64
 * vector (ndim 1) or scalar (count -1 with v[0]), the FP8 zero point. */
const char *f8i_onnx_const_float(f8_onnx *g, float v);
const char *f8i_onnx_const_ints(f8_onnx *g, const int64_t *v, int count);
const char *f8i_onnx_zero_point(f8_onnx *g, f8_dtype fp8);

/* The weight cache: the value a (backend pointer, form) pair was stored as. */
const char *f8i_onnx_cache_find(const f8_onnx *g, const void *key, f8i_onnx_form form);
f8_status f8i_onnx_cache_add(f8_onnx *g, const void *key, f8i_onnx_form form, const char *value);

/* The first ctx error of a failing build step: out of memory. */
f8_status f8i_onnx_oom(f8_onnx *g);

/* A float value of `name` rounded to BF16 when dtype is BF16 (Cast pair);
 * returns the new value's name, or name itself for FP32. */
const char *f8i_onnx_round(f8_onnx *g, const char *name, f8_dtype dtype);

/* The value cur (made by this call) becomes `name` (a user's name, checked
 * new) with rank and last dimension: the node that made it is renamed when it
 * is the last one, else an Identity is added. */
f8_status f8i_onnx_define(f8_onnx *g, const char *cur, const char *name, int rank, int64_t last);

/* Undo mark: what f8i_onnx_rollback removes everything added after. */
typedef struct f8i_onnx_mark {
    size_t nodes, values, inits, cache, strings, outputs;
} f8i_onnx_mark;
f8i_onnx_mark f8i_onnx_mark_now(const f8_onnx *g);
void f8i_onnx_rollback(f8_onnx *g, f8i_onnx_mark mark);

#endif /* F8_IO_ONNX_H */
