/* Private to the element-wise, logic and reduction mappers of the ONNX
 * importer (onnx_map_math.c, onnx_math_fold.c, onnx_math_reduce.c). */
#ifndef FG_SCHEMA_ONNX_MATH_H
#define FG_SCHEMA_ONNX_MATH_H

#include "schema/onnx/onnx_import.h"

/* Binds output 0 to o, or fails naming the node with the graph's error
 * when a builder failed (o.node < 0). */
int onnx_math_finish(fgx_ctx *c, const fgx_node *n, fg_output o);

/* Fails naming the node and both shapes unless the present inputs in[0..k)
 * broadcast NumPy-style (unknown dims broadcast with anything). */
int onnx_math_check_bcast(fgx_ctx *c, const fgx_node *n, const int *in, int k);

/* ---- folding of values known at import (onnx_math_fold.c) ---------------- */

typedef enum onnx_fold_op {
  ONNX_FOLD_ADD,
  ONNX_FOLD_SUB,
  ONNX_FOLD_MUL,
  ONNX_FOLD_DIV,
  ONNX_FOLD_MIN,
  ONNX_FOLD_MAX,
  ONNX_FOLD_EQUAL,
  ONNX_FOLD_GREATER,
  ONNX_FOLD_LESS,
  ONNX_FOLD_NOT,
  ONNX_FOLD_WHERE,
  ONNX_FOLD_MOD, /* Mod, fmod 0: the remainder takes the divisor's sign */
  ONNX_FOLD_FMOD /* Mod, fmod 1: the dividend's (C's %) */
} onnx_fold_op;

/* Tries to compute the node's output 0 at import from its inputs (all of
 * them known, integer or bool). 1: bound as a known value; 0: not folded
 * (an input not known, a float, a result too large or one with no
 * representation), the caller builds graph ops; -1 after fgx_fail (an
 * integer division or remainder by zero). */
int onnx_math_fold(fgx_ctx *c, const fgx_node *n, onnx_fold_op op);

/* The reduction `op` (ONNX_FOLD_ADD: ReduceSum, MUL: ReduceProd, MAX,
 * MIN) of input 0 over axes[0..n_axes) (non-negative; none: every axis)
 * when the input is a known integer value; returns as onnx_math_fold. */
int onnx_math_fold_reduce(fgx_ctx *c, const fgx_node *n, onnx_fold_op op, const int64_t *axes,
                          int n_axes, int keepdims);

/* ---- reductions (onnx_math_reduce.c) ------------------------------------- */

int onnx_map_reduce_sum(fgx_ctx *c, const fgx_node *n);
int onnx_map_reduce_mean(fgx_ctx *c, const fgx_node *n);
int onnx_map_reduce_max(fgx_ctx *c, const fgx_node *n);
int onnx_map_reduce_min(fgx_ctx *c, const fgx_node *n);
int onnx_map_reduce_prod(fgx_ctx *c, const fgx_node *n);
int onnx_map_reduce_l1(fgx_ctx *c, const fgx_node *n);
int onnx_map_reduce_l2(fgx_ctx *c, const fgx_node *n);
int onnx_map_reduce_sum_square(fgx_ctx *c, const fgx_node *n);
int onnx_map_reduce_log_sum(fgx_ctx *c, const fgx_node *n);
int onnx_map_reduce_log_sum_exp(fgx_ctx *c, const fgx_node *n);
int onnx_map_argmax(fgx_ctx *c, const fgx_node *n);
int onnx_map_topk(fgx_ctx *c, const fgx_node *n);
int onnx_map_cumsum(fgx_ctx *c, const fgx_node *n);
int onnx_map_argmin(fgx_ctx *c, const fgx_node *n);

#endif /* FG_SCHEMA_ONNX_MATH_H */
