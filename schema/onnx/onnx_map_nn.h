/* The neural-network op mappers of the ONNX importer, split by family:
 * onnx_map_nn.c (the fgx_ops_nn table, activations, Gemm, MatMul, the
 * softmax family), onnx_map_conv.c (Conv, ConvTranspose), onnx_map_pool.c
 * (MaxPool, AveragePool, the global pools) and onnx_map_norm.c (the
 * normalizations and the two losses). Internal to schema/onnx/. */
#ifndef FG_SCHEMA_ONNX_MAP_NN_H
#define FG_SCHEMA_ONNX_MAP_NN_H

#include "schema/onnx/onnx_import.h"

/* Window and channel attributes above this are refused before any
 * arithmetic on them, so that sizes computed from them cannot overflow
 * (flowgraph's own convolution limit). */
#define NNX_ATTR_MAX ((int64_t)1 << 30)

/* Binds output i to o once the graph holds no error; a builder's error
 * (the graph's sticky status) becomes the import's, naming the node. */
int nnx_set(fgx_ctx *c, const fgx_node *n, int i, fg_output o);
/* onnx_map_einsum.c: Einsum of one or two operands. */
int nnx_map_einsum(fgx_ctx *c, const fgx_node *n);
/* -1 after fgx_fail when the graph holds an error (a builder refused). */
int nnx_graph_ok(fgx_ctx *c, const fgx_node *n);

/* An ints attribute of exactly `want` entries, each in [lo, NNX_ATTR_MAX];
 * absent: out[k] = def for every k and *present = 0 (present may be
 * NULL). -1 after fgx_fail naming the attribute and its values. */
int nnx_ints(fgx_ctx *c, const fgx_node *n, const char *name, int want, int64_t lo, int64_t def,
             int64_t *out, int *present);
/* "[a, b, c]" into buf (for messages). */
const char *nnx_fmt(const int64_t *v, int64_t n, char *buf, size_t size);

/* The auto_pad attribute: NNX_PAD_NOTSET (explicit pads), SAME_UPPER,
 * SAME_LOWER or VALID; -1 after fgx_fail for any other value. */
enum { NNX_PAD_NOTSET, NNX_PAD_SAME_UPPER, NNX_PAD_SAME_LOWER, NNX_PAD_VALID };
int nnx_auto_pad(fgx_ctx *c, const fgx_node *n, int *mode);
/* The begin and end pads that make the output ceil(in / stride) long for
 * an extent `ext` = dilation (kernel - 1) + 1 window (ONNX's SAME_*: the
 * odd element at the end for upper, at the beginning for lower). in may be
 * unknown (< 0) only when stride is 1 (the total is then ext - 1). -1
 * after fgx_fail otherwise, naming the spatial axis `axis`. */
int nnx_same_pads(fgx_ctx *c, const fgx_node *n, int upper, int64_t in, int64_t ext, int64_t stride,
                  int axis, int64_t *begin, int64_t *end);

/* A scalar constant of dtype dt. */
fg_output nnx_scalar(fgx_ctx *c, fg_dtype dt, double v);

int nnx_map_conv(fgx_ctx *c, const fgx_node *n);
int nnx_map_conv_transpose(fgx_ctx *c, const fgx_node *n);
int nnx_map_max_pool(fgx_ctx *c, const fgx_node *n);
int nnx_map_avg_pool(fgx_ctx *c, const fgx_node *n);
int nnx_map_global_avg_pool(fgx_ctx *c, const fgx_node *n);
int nnx_map_global_max_pool(fgx_ctx *c, const fgx_node *n);
/* onnx_map_resize.c: Resize (nearest and linear). */
int nnx_map_resize(fgx_ctx *c, const fgx_node *n);
int nnx_map_batch_norm(fgx_ctx *c, const fgx_node *n);
int nnx_map_layer_norm(fgx_ctx *c, const fgx_node *n);
int nnx_map_instance_norm(fgx_ctx *c, const fgx_node *n);
int nnx_map_sce_loss(fgx_ctx *c, const fgx_node *n);
int nnx_map_nll_loss(fgx_ctx *c, const fgx_node *n);

#endif /* FG_SCHEMA_ONNX_MAP_NN_H */
