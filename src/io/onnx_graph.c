/*
 * io/onnx_graph.c — f8_onnx, the graph builder: value names and their
 * checks, initializers and shared constants, the weight cache, inputs and
 * outputs, undo on failure, and writing the model (f8.h, "ONNX export").
 *
 * Design note. The graph is kept as the structs onnx_proto.c encodes, in
 * growable arrays, with every string in one pool and every initializer's data
 * a host copy the graph owns. A public call marks the array lengths first
 * and, if anything fails half-way, truncates back to the mark (freeing what
 * came after), so a failed call changes nothing. Values are looked up by a
 * linear scan: a 48-layer GPT has about 2k of them, and a lookup per node is
 * far below the cost of downloading the weights.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/onnx.h"

typedef struct cache_entry {
    const void *key;
    f8i_onnx_form form;
    const char *value;
} cache_entry;

struct f8_onnx {
    f8_ctx *ctx;
    f8_onnx_config cfg;
    f8i_onnx_node *nodes;
    size_t n_nodes, cap_nodes;
    f8i_onnx_value *values;
    size_t n_values, cap_values;
    f8i_onnx_tensor *inits;
    size_t n_inits, cap_inits;
    f8i_onnx_io *inputs, *outputs;
    size_t n_inputs, cap_inputs, n_outputs, cap_outputs;
    cache_entry *cache;
    size_t n_cache, cap_cache;
    char **strings;
    size_t n_strings, cap_strings;
    uint64_t counter; /* internal names */
};

#define GROW(g, arr, n, cap) f8i_grow((void **)&(g)->arr, &(g)->cap, (g)->n, sizeof *(g)->arr)

f8_status f8i_onnx_oom(f8_onnx *g) { return f8i_error(g->ctx, F8_ERR_OUT_OF_MEMORY, "ONNX export: out of host memory"); }

f8_ctx *f8i_onnx_ctx(const f8_onnx *g) { return g->ctx; }
const f8_onnx_config *f8i_onnx_config(const f8_onnx *g) { return &g->cfg; }

/* A copy of s in the pool (printf format), or NULL. */
static const char *pool(f8_onnx *g, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = k >= 0 ? (char *)malloc((size_t)k + 1) : NULL;
    if (!s || !GROW(g, strings, n_strings, cap_strings)) {
        free(s);
        return NULL;
    }
    va_start(ap, fmt);
    vsnprintf(s, (size_t)k + 1, fmt, ap);
    va_end(ap);
    g->strings[g->n_strings++] = s;
    return s;
}

const char *f8i_onnx_tmp(f8_onnx *g, const char *hint) { return pool(g, "_f8.%llu.%s", (unsigned long long)g->counter++, hint); }

/* ---- names and shapes ------------------------------------------------------ */

static int name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '/' || c == ':' || c == '-';
}

/* A user's name: 1..128 characters of [A-Za-z0-9_./:-], not "_f8.*". */
static int name_ok(const char *s)
{
    if (!s || !*s || strncmp(s, "_f8.", 4) == 0) return 0;
    size_t n = 0;
    for (; s[n]; n++)
        if (n >= 128 || !name_char(s[n])) return 0;
    return 1;
}

static f8i_onnx_value *find_value(const f8_onnx *g, const char *name)
{
    for (size_t i = 0; i < g->n_values; i++)
        if (strcmp(g->values[i].name, name) == 0) return &g->values[i];
    return NULL;
}

f8_status f8i_onnx_check_new(f8_onnx *g, const char *fn, const char *name)
{
    if (!name_ok(name))
        return f8i_error(g->ctx, F8_ERR_INVALID_ARGUMENT,
                         "%s: output name '%.140s' must be 1 to 128 characters of [A-Za-z0-9_./:-], not starting "
                         "with '_f8.'", fn, name ? name : "(null)");
    if (find_value(g, name))
        return f8i_error(g->ctx, F8_ERR_INVALID_ARGUMENT, "%s: a value named '%s' exists already", fn, name);
    return F8_OK;
}

f8_status f8i_onnx_need(f8_onnx *g, const char *fn, const char *name, int type, const f8i_onnx_value **v)
{
    *v = name && name_ok(name) ? find_value(g, name) : NULL;
    if (!*v)
        return f8i_error(g->ctx, F8_ERR_INVALID_ARGUMENT, "%s: no value named '%.140s' in the graph", fn,
                         name ? name : "(null)");
    if ((*v)->type != type)
        return f8i_error(g->ctx, F8_ERR_INVALID_ARGUMENT, "%s: value '%s' is %s, not %s", fn, name,
                         (*v)->type == F8I_ONNX_INT64 ? "int64" : "float", type == F8I_ONNX_INT64 ? "int64" : "float");
    return F8_OK;
}

/* Parse "batch,seq,768" into io (names pooled). Returns 0 on a bad shape. */
static int parse_shape(f8_onnx *g, const char *shape, f8i_onnx_io *io)
{
    io->rank = 0;
    const char *p = shape;
    for (;;) {
        const char *e = p;
        while (*e && *e != ',') e++;
        const size_t n = (size_t)(e - p);
        if (n == 0 || n > 64 || io->rank == F8I_ONNX_MAX_DIMS) return 0;
        int digits = 1, ident = !(p[0] >= '0' && p[0] <= '9');
        for (size_t k = 0; k < n; k++) {
            const char c = p[k];
            digits &= c >= '0' && c <= '9';
            ident &= name_char(c) && c != '.' && c != '/' && c != ':' && c != '-';
        }
        if (digits) {
            if (n > 12 || p[0] == '0') return 0; /* positive, below 10^12 */
            io->dims[io->rank] = strtoll(p, NULL, 10);
            io->dim_names[io->rank] = NULL;
        } else if (ident) {
            io->dims[io->rank] = -1;
            if (!(io->dim_names[io->rank] = pool(g, "%.*s", (int)n, p))) return -1;
        } else {
            return 0;
        }
        io->rank++;
        if (!*e) return 1;
        p = e + 1;
    }
}

/* ---- nodes, values, initializers --------------------------------------------- */

static int value_add(f8_onnx *g, const char *name, int type, int rank, int64_t last)
{
    if (!GROW(g, values, n_values, cap_values)) return 0;
    g->values[g->n_values++] = (f8i_onnx_value){name, type, rank, last};
    return 1;
}

void f8i_onnx_set_value(f8_onnx *g, const char *name, int type, int rank, int64_t last)
{
    f8i_onnx_value *v = find_value(g, name);
    if (v) *v = (f8i_onnx_value){v->name, type, rank, last};
}

f8i_onnx_node *f8i_onnx_node_add(f8_onnx *g, const char *op, int n_in, const char *const *in, int n_out,
                                 const char *const *out)
{
    for (int k = 0; k < n_in; k++)
        if (!in[k]) return NULL; /* an input name that could not be made */
    for (int k = 0; k < n_out; k++)
        if (!out[k] || !value_add(g, out[k], F8I_ONNX_FLOAT, -1, -1)) return NULL;
    if (!GROW(g, nodes, n_nodes, cap_nodes)) return NULL;
    f8i_onnx_node *n = &g->nodes[g->n_nodes++];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->n_in = n_in;
    n->n_out = n_out;
    for (int k = 0; k < n_in; k++) n->in[k] = in[k];
    for (int k = 0; k < n_out; k++) n->out[k] = out[k];
    return n;
}

static f8i_onnx_attr *attr(f8i_onnx_node *n, const char *name, int type)
{
    f8i_onnx_attr *a = &n->attr[n->n_attr++];
    memset(a, 0, sizeof *a);
    a->name = name;
    a->type = type;
    return a;
}

void f8i_onnx_attr_int(f8i_onnx_node *n, const char *name, int64_t v) { attr(n, name, F8I_ATTR_INT)->i = v; }
void f8i_onnx_attr_float(f8i_onnx_node *n, const char *name, float v) { attr(n, name, F8I_ATTR_FLOAT)->f = v; }
void f8i_onnx_attr_string(f8i_onnx_node *n, const char *name, const char *v) { attr(n, name, F8I_ATTR_STRING)->s = v; }

void f8i_onnx_attr_ints(f8i_onnx_node *n, const char *name, const int64_t *v, int count)
{
    f8i_onnx_attr *a = attr(n, name, F8I_ATTR_INTS);
    memcpy(a->ints, v, (size_t)count * sizeof *v);
    a->n_ints = count;
}

/* Append an initializer (taking data) and its value; 0 on out of memory,
 * with data freed. */
static int push_init(f8_onnx *g, const char *name, int type, const int64_t *dims, int ndim, void *data, size_t bytes)
{
    if (!name || !data || !GROW(g, inits, n_inits, cap_inits) ||
        !value_add(g, name, type, ndim, ndim ? dims[ndim - 1] : 1)) {
        free(data);
        return 0;
    }
    f8i_onnx_tensor t = {name, type, {0, 0, 0, 0}, ndim, data, bytes};
    if (ndim) memcpy(t.dims, dims, (size_t)ndim * sizeof *dims);
    g->inits[g->n_inits++] = t;
    return 1;
}

const char *f8i_onnx_init(f8_onnx *g, const char *hint, int type, const int64_t *dims, int ndim, void *data,
                          size_t bytes)
{
    const char *name = data ? f8i_onnx_tmp(g, hint) : NULL;
    return push_init(g, name, type, dims, ndim, data, bytes) ? name : NULL;
}

/* A named constant: reused when an initializer of that name exists. */
static const char *constant(f8_onnx *g, const char *name, int type, const int64_t *dims, int ndim, const void *v,
                            size_t bytes)
{
    for (size_t i = 0; name && i < g->n_inits; i++)
        if (strcmp(g->inits[i].name, name) == 0) return g->inits[i].name;
    void *data = name ? malloc(bytes) : NULL;
    if (data) memcpy(data, v, bytes);
    return push_init(g, name, type, dims, ndim, data, bytes) ? name : NULL;
}

const char *f8i_onnx_const_float(f8_onnx *g, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return constant(g, pool(g, "_f8.f.%08x", (unsigned)u), F8I_ONNX_FLOAT, NULL, 0, &v, 4);
}

const char *f8i_onnx_const_ints(f8_onnx *g, const int64_t *v, int count)
{
    char name[200];
    int k = snprintf(name, sizeof name, "_f8.i%s", count < 0 ? "s" : "");
    for (int i = 0; i < (count < 0 ? 1 : count) && k < 160; i++) k += snprintf(name + k, sizeof name - (size_t)k, ".%lld", (long long)v[i]);
    const int64_t dims[1] = {count};
    return constant(g, pool(g, "%s", name), F8I_ONNX_INT64, dims, count < 0 ? 0 : 1, v,
                    (size_t)(count < 0 ? 1 : count) * 8);
}

const char *f8i_onnx_zero_point(f8_onnx *g, f8_dtype fp8)
{
    const unsigned char zero = 0;
    const int e5 = fp8 == F8_DTYPE_E5M2;
    return constant(g, pool(g, e5 ? "_f8.zp.e5m2" : "_f8.zp.e4m3"), e5 ? F8I_ONNX_E5M2 : F8I_ONNX_E4M3, NULL, 0,
                    &zero, 1);
}

const char *f8i_onnx_cache_find(const f8_onnx *g, const void *key, f8i_onnx_form form)
{
    for (size_t i = 0; i < g->n_cache; i++)
        if (g->cache[i].key == key && g->cache[i].form == form) return g->cache[i].value;
    return NULL;
}

f8_status f8i_onnx_cache_add(f8_onnx *g, const void *key, f8i_onnx_form form, const char *value)
{
    if (!GROW(g, cache, n_cache, cap_cache)) return f8i_onnx_oom(g);
    g->cache[g->n_cache++] = (cache_entry){key, form, value};
    return F8_OK;
}

const char *f8i_onnx_round(f8_onnx *g, const char *name, f8_dtype dtype)
{
    if (!name || dtype != F8_DTYPE_BF16) return name;
    const char *b = f8i_onnx_tmp(g, "bf16"), *f = f8i_onnx_tmp(g, "rounded");
    f8i_onnx_node *n = f8i_onnx_node_add(g, "Cast", 1, &name, 1, &b);
    if (n) f8i_onnx_attr_int(n, "to", F8I_ONNX_BF16);
    f8i_onnx_node *m = n ? f8i_onnx_node_add(g, "Cast", 1, &b, 1, &f) : NULL;
    if (m) f8i_onnx_attr_int(m, "to", F8I_ONNX_FLOAT);
    return m ? f : NULL;
}

f8_status f8i_onnx_define(f8_onnx *g, const char *cur, const char *name, int rank, int64_t last)
{
    const char *y = pool(g, "%s", name);
    f8i_onnx_node *n = g->n_nodes ? &g->nodes[g->n_nodes - 1] : NULL;
    f8i_onnx_value *v = find_value(g, cur);
    if (!y) return f8i_onnx_oom(g);
    if (n && n->out[0] == cur && v && strncmp(cur, "_f8.", 4) == 0) {
        n->out[0] = y;
        v->name = y;
    } else if (!f8i_onnx_node_add(g, "Identity", 1, &cur, 1, &y)) {
        return f8i_onnx_oom(g);
    }
    f8i_onnx_set_value(g, y, F8I_ONNX_FLOAT, rank, last);
    return F8_OK;
}

/* ---- undo ------------------------------------------------------------------- */

f8i_onnx_mark f8i_onnx_mark_now(const f8_onnx *g)
{
    return (f8i_onnx_mark){g->n_nodes, g->n_values, g->n_inits, g->n_cache, g->n_strings, g->n_outputs};
}

void f8i_onnx_rollback(f8_onnx *g, f8i_onnx_mark m)
{
    for (size_t i = m.inits; i < g->n_inits; i++) free(g->inits[i].data);
    for (size_t i = m.strings; i < g->n_strings; i++) free(g->strings[i]);
    g->n_nodes = m.nodes;
    g->n_values = m.values;
    g->n_inits = m.inits;
    g->n_cache = m.cache;
    g->n_strings = m.strings;
    g->n_outputs = m.outputs;
}

/* ---- the public calls --------------------------------------------------------- */

f8_onnx_config f8_onnx_config_default(void)
{
    f8_onnx_config c;
    c.opset = 21;
    c.fp8 = 1;
    c.exact_cast = 0;
    c.fp8_embedding = 0;
    c.dtype = F8_DTYPE_FP32;
    c.name = "f8";
    return c;
}

f8_status f8_onnx_create(f8_ctx *ctx, const f8_onnx_config *config, f8_onnx **graph)
{
    static const char fn[] = "f8_onnx_create";
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (!config || !graph) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: config or graph is NULL", fn);
    *graph = NULL;
    const f8_onnx_config *c = config;
    if (c->opset < 20 || c->opset > 23)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: opset %d is not in [20, 23]", fn, c->opset);
    if ((c->fp8 != 0 && c->fp8 != 1) || (c->exact_cast != 0 && c->exact_cast != 1) ||
        (c->fp8_embedding != 0 && c->fp8_embedding != 1))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: fp8 (%d), exact_cast (%d) and fp8_embedding (%d) must be 0 "
                         "or 1", fn, c->fp8, c->exact_cast, c->fp8_embedding);
    if (c->dtype != F8_DTYPE_FP32 && c->dtype != F8_DTYPE_BF16)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: dtype must be fp32 or bf16, not %s", fn,
                         f8_dtype_name(c->dtype));
    if (!name_ok(c->name))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "%s: name '%.140s' must be 1 to 128 characters of "
                                                       "[A-Za-z0-9_./:-]", fn, c->name ? c->name : "(null)");
    f8_onnx *g = (f8_onnx *)calloc(1, sizeof *g);
    if (!g) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    g->ctx = ctx;
    g->cfg = *c;
    g->cfg.name = pool(g, "%s", c->name);
    if (!g->cfg.name) {
        f8_onnx_destroy(g);
        return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    }
    *graph = g;
    return F8_OK;
}

void f8_onnx_destroy(f8_onnx *g)
{
    if (!g) return;
    for (size_t i = 0; i < g->n_inits; i++) free(g->inits[i].data);
    for (size_t i = 0; i < g->n_strings; i++) free(g->strings[i]);
    free(g->nodes);
    free(g->values);
    free(g->inits);
    free(g->inputs);
    free(g->outputs);
    free(g->cache);
    free(g->strings);
    free(g);
}

f8_status f8_onnx_add_input(f8_onnx *g, const char *name, f8_onnx_type type, const char *shape)
{
    static const char fn[] = "f8_onnx_add_input";
    if (!g) return F8_ERR_INVALID_ARGUMENT;
    F8I_TRY(f8i_onnx_check_new(g, fn, name));
    if (type != F8_ONNX_FLOAT && type != F8_ONNX_INT64)
        return f8i_error(g->ctx, F8_ERR_INVALID_ARGUMENT, "%s: type %d is not F8_ONNX_FLOAT or F8_ONNX_INT64", fn,
                         (int)type);
    const f8i_onnx_mark mark = f8i_onnx_mark_now(g);
    f8i_onnx_io io;
    memset(&io, 0, sizeof io);
    io.type = (int)type;
    io.name = pool(g, "%s", name);
    const int ok = io.name && shape ? parse_shape(g, shape, &io) : -1;
    if (ok == 1 && GROW(g, inputs, n_inputs, cap_inputs) && value_add(g, io.name, io.type, io.rank, io.dims[io.rank - 1])) {
        g->inputs[g->n_inputs++] = io;
        return F8_OK;
    }
    f8i_onnx_rollback(g, mark);
    if (ok == 0 || !shape)
        return f8i_error(g->ctx, F8_ERR_INVALID_ARGUMENT, "%s: shape '%.140s' of '%s' must be 1 to 8 comma-separated "
                                                          "positive integers or names", fn, shape ? shape : "(null)", name);
    return f8i_onnx_oom(g);
}

f8_status f8_onnx_add_output(f8_onnx *g, const char *name, const char *shape)
{
    static const char fn[] = "f8_onnx_add_output";
    if (!g) return F8_ERR_INVALID_ARGUMENT;
    const f8i_onnx_value *v = name && name_ok(name) ? find_value(g, name) : NULL;
    if (!v) return f8i_error(g->ctx, F8_ERR_INVALID_ARGUMENT, "%s: no value named '%.140s'", fn, name ? name : "(null)");
    for (size_t i = 0; i < g->n_outputs; i++)
        if (strcmp(g->outputs[i].name, name) == 0)
            return f8i_error(g->ctx, F8_ERR_INVALID_ARGUMENT, "%s: '%s' is an output already", fn, name);
    const f8i_onnx_mark mark = f8i_onnx_mark_now(g);
    f8i_onnx_io io;
    memset(&io, 0, sizeof io);
    io.name = v->name;
    io.type = v->type;
    io.rank = -1;
    const int ok = shape ? parse_shape(g, shape, &io) : v->rank > 0;
    if (!shape && ok) { /* the known rank: unknown dimensions but the last */
        io.rank = v->rank;
        for (int d = 0; d < io.rank; d++) io.dims[d] = d == io.rank - 1 ? v->last : -1;
    }
    f8_status st = F8_OK;
    if (!shape && !ok)
        st = f8i_error(g->ctx, F8_ERR_INVALID_ARGUMENT, "%s: the rank of '%s' is not known: state its shape", fn, name);
    else if (ok == 0)
        st = f8i_error(g->ctx, F8_ERR_INVALID_ARGUMENT, "%s: shape '%.140s' of '%s' must be 1 to 8 comma-separated "
                                                        "positive integers or names", fn, shape, name);
    else if (ok == 1 && shape && ((io.dims[io.rank - 1] > 0 && v->last > 0 && io.dims[io.rank - 1] != v->last) ||
                                  (v->rank > 0 && io.rank != v->rank)))
        st = f8i_error(g->ctx, F8_ERR_SHAPE, "%s: '%s' has rank %d and last dimension %lld; shape '%s' says otherwise",
                       fn, name, v->rank, (long long)v->last, shape);
    else if (ok < 0 || !GROW(g, outputs, n_outputs, cap_outputs))
        st = f8i_onnx_oom(g);
    if (st != F8_OK) {
        f8i_onnx_rollback(g, mark);
        return st;
    }
    g->outputs[g->n_outputs++] = io;
    return F8_OK;
}

static f8i_onnx_model model_of(const f8_onnx *g)
{
    const int opset = g->cfg.opset;
    return (f8i_onnx_model){
        .ir_version = opset >= 23 ? 11 : opset >= 21 ? 10 : 9, /* the IR each opset came with */
        .opset = opset,
        .producer = "f8",
        .producer_version = "0.1.0",
        .graph_name = g->cfg.name,
        .nodes = g->nodes, .n_nodes = g->n_nodes,
        .inits = g->inits, .n_inits = g->n_inits,
        .inputs = g->inputs, .n_inputs = g->n_inputs,
        .outputs = g->outputs, .n_outputs = g->n_outputs,
    };
}

static f8_status check_complete(const f8_onnx *g, const char *fn)
{
    if (!g->n_inputs || !g->n_outputs)
        return f8i_error(g->ctx, F8_ERR_INVALID_ARGUMENT, "%s: the graph needs an input and an output (it has %zu and "
                                                          "%zu)", fn, g->n_inputs, g->n_outputs);
    return F8_OK;
}

f8_status f8_onnx_serialize(const f8_onnx *g, void *buf, size_t capacity, size_t *size)
{
    static const char fn[] = "f8_onnx_serialize";
    if (!g) return F8_ERR_INVALID_ARGUMENT;
    if (!size) return f8i_error(g->ctx, F8_ERR_INVALID_ARGUMENT, "%s: size is NULL", fn);
    F8I_TRY(check_complete(g, fn));
    const f8i_onnx_model m = model_of(g);
    int werr = 0;
    const size_t need = f8i_onnx_encode(&m, NULL, NULL, &werr);
    *size = need;
    if (!buf) return F8_OK;
    if (capacity < need)
        return f8i_error(g->ctx, F8_ERR_INVALID_ARGUMENT, "%s: capacity %zu is below the %zu bytes needed", fn,
                         capacity, need);
    f8i_onnx_encode(&m, buf, NULL, &werr);
    return F8_OK;
}

f8_status f8_onnx_save(const f8_onnx *g, const char *path)
{
    static const char fn[] = "f8_onnx_save";
    if (!g) return F8_ERR_INVALID_ARGUMENT;
    if (!path || !*path) return f8i_error(g->ctx, F8_ERR_INVALID_ARGUMENT, "%s: path is NULL or empty", fn);
    F8I_TRY(check_complete(g, fn));
    char *tmp = (char *)malloc(strlen(path) + 32);
    if (!tmp) return f8i_error(g->ctx, F8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    /* beside path, so the rename stays on one file system */
    sprintf(tmp, "%s.tmp.%ld", path, (long)getpid());
    const f8i_onnx_model m = model_of(g);
    FILE *f = fopen(tmp, "wb");
    int werr = !f;
    if (f) {
        f8i_onnx_encode(&m, NULL, f, &werr);
        if (fflush(f) != 0 || fsync(fileno(f)) != 0) werr = 1;
        if (fclose(f) != 0) werr = 1;
        if (!werr && rename(tmp, path) != 0) werr = 1;
        if (werr) unlink(tmp);
    }
    f8_status st = F8_OK;
    if (werr) st = f8i_error(g->ctx, F8_ERR_IO, "%s: writing %.200s: %s", fn, path, strerror(errno));
    free(tmp);
    return st;
}
