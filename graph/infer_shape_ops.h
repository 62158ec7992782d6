/* Shape inference and parse hooks of pad, pad_grad, flatten, squeeze,
 * expand, tile, tile_grad, split and stack (graph/infer_shape_ops.c), which
 * graph/op_table.c puts in the table. Internal to graph/. */
#ifndef FG_INFER_SHAPE_OPS_H
#define FG_INFER_SHAPE_OPS_H

#include "graph/infer_common.h"

#define FGI_SHAPE_OPS_INFER(fn)                                                                    \
  int fn(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status);
#define FGI_SHAPE_OPS_PARSE(fn)                                                                    \
  int fn(const fg_node *node, const fg_tinfo *in, fg_op_params *p, fg_status *status);

FGI_SHAPE_OPS_INFER(fgi_infer_pad)
FGI_SHAPE_OPS_INFER(fgi_infer_pad_grad)
FGI_SHAPE_OPS_INFER(fgi_infer_flatten)
FGI_SHAPE_OPS_INFER(fgi_infer_squeeze)
FGI_SHAPE_OPS_INFER(fgi_infer_expand)
FGI_SHAPE_OPS_INFER(fgi_infer_tile)
FGI_SHAPE_OPS_INFER(fgi_infer_tile_grad)
FGI_SHAPE_OPS_INFER(fgi_infer_split)
FGI_SHAPE_OPS_INFER(fgi_infer_stack)
FGI_SHAPE_OPS_PARSE(fgi_parse_pad)  /* also pad_grad (shapes from input 1, like) */
FGI_SHAPE_OPS_PARSE(fgi_parse_tile) /* also tile_grad */
FGI_SHAPE_OPS_PARSE(fgi_parse_split)
FGI_SHAPE_OPS_PARSE(fgi_parse_stack)

/* split's output count: the length of `sizes`, or `num_outputs`. */
int fgi_count_split(const char *name, const struct fg_attrs *attrs, fg_status *st);
/* The most outputs a split may have: each is a node output the graph
 * allocates, so a file must not make it allocate without bound. */
#define FGI_SPLIT_MAX_OUTPUTS 65536

#undef FGI_SHAPE_OPS_INFER
#undef FGI_SHAPE_OPS_PARSE

#endif
