/* The importer's own state, shared by onnx_import.c (the driver),
 * onnx_values.c (the fgx_* interface the mappers call) and onnx_tensor.c
 * (TensorProto to fg_tensor). Mappers see only onnx_import.h. */
#ifndef FG_SCHEMA_ONNX_INTERNAL_H
#define FG_SCHEMA_ONNX_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <stdio.h>

#include "flowgraph/onnx.h"
#include "graph/batch_shapes.h"
#include "schema/onnx/onnx_import.h"

/* Who defines a tensor name. */
enum { FGX_FROM_INITIALIZER = -2, FGX_FROM_INPUT = -1 /* >= 0: the node's index */ };

/* One ONNX tensor name. Until it is bound, out.node is -1 and known.t NULL. */
typedef struct fgx_value {
  const char *name;                 /* points into the decoded model */
  int producer;                     /* FGX_FROM_* or a node index */
  int used;                         /* read by a node or listed as a graph output */
  int output_index;                 /* 1 + its index among the graph outputs, or 0 */
  int initializer;                  /* a float initializer may become a variable */
  const Onnx__TensorProto *init;    /* the initializer, converted on first use */
  const Onnx__ValueInfoProto *info; /* value_info or graph output: dtype, shape */
  fg_output out;
  fgx_known known;
} fgx_value;

/* An initializer whose raw_data fg_onnx_load left in the file
 * (onnx_stream.c): its length is in the decoded message, its bytes at
 * `offset` of the model file. */
typedef struct fgx_self_raw {
  const Onnx__TensorProto *tp;
  uint64_t offset;
} fgx_self_raw;

struct fgx_ctx {
  fg_graph *g;
  Onnx__ModelProto *model;
  Onnx__GraphProto *graph;
  fg_status *st;
  int failed;
  int opset;
  int trainable;
  const char *base_dir; /* NULL: external data refused */
  int node;             /* the node being mapped, or -1 */
  /* A graph input whose leading dimension is the unknown batch size (node
   * -1: none), from which fgx_batch_ones builds batch-sized values. */
  fg_output batch_src;
  /* The graph's shapes with the batch taken as 2 and as 4 (batch 0: not
   * started), for fgx_input_batch_multiple. */
  fg_batch_shapes at_batch[2];

  fgx_value *vals;
  int n_vals, cap_vals;
  int *index; /* open addressing over vals by name: -1 empty */
  size_t index_cap;

  /* Node ids whose name the importer chose for a reason the renaming
   * after a mapper must keep (placeholders, materialised known values). */
  unsigned char *fixed;
  int fixed_cap;

  /* fgx_unique_name's next suffix per base name, so a file repeating one
   * name n times costs n lookups, not n^2. */
  struct fgx_suffix {
    const char *base; /* importer-owned */
    long next;
  } * suffix;
  size_t suffix_cap, n_suffix;

  /* The model file and its initializers read from it on conversion,
   * sorted by address (fg_onnx_load; none for a model in memory). */
  FILE *self;
  fgx_self_raw *self_raw;
  size_t n_self_raw;

  /* Memory the importer hands out for the import's length (attribute
   * strings, int64 copies of int32 inputs, node labels). */
  void **owned;
  int n_owned, cap_owned;
};

/* ---- onnx_values.c -------------------------------------------------------- */
int fgx_value_index(const fgx_ctx *c, const char *name); /* -1 when absent */
/* Adds a name (pointing into the model); its index, or -1 when out of memory. */
int fgx_value_add(fgx_ctx *c, const char *name, int producer);
void fgx_values_free(fgx_ctx *c);
/* Converts value v's initializer on first use; -1 after fgx_fail (who:
 * the node reading it, for errors, or NULL). */
int fgx_value_ready(fgx_ctx *c, int v, const fgx_node *who);
/* Memory freed with the import; NULL (after fgx_fail) when out of memory. */
void *fgx_alloc(fgx_ctx *c, size_t size);
char *fgx_strdup(fgx_ctx *c, const char *s, size_t len);
/* Sets the import's error for no node; returns -1. Keeps the first error. */
int fgx_fail_model(fgx_ctx *c, fg_code code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
int fgx_mark_fixed(fgx_ctx *c, int node);
int fgx_is_fixed(const fgx_ctx *c, int node);
/* A node name flowgraph accepts: ':' (flowgraph's node:index separator)
 * becomes '_', empty becomes "_", and a name in use gets "_2", "_3", ...
 * Writes into the importer's memory; NULL after fgx_fail. */
const char *fgx_unique_name(fgx_ctx *c, const char *want);
/* Makes value v a graph value (a constant, or a variable for a float
 * initializer when trainable); FG_NO_OUTPUT after fgx_fail. who names the
 * reader for errors (NULL: the model). */
fg_output fgx_materialize(fgx_ctx *c, int v, const fgx_node *who);

/* ---- onnx_tensor.c -------------------------------------------------------- */
/* Sorts c->self_raw for the conversions' lookups. */
void fgx_self_raw_sort(fgx_ctx *c);
/* FG_DTYPE_INVALID for ONNX types flowgraph lacks. */
fg_dtype fgx_dtype_from_onnx(int32_t t);
/* "uint8 (ONNX TensorProto.UINT8)"; "ONNX element type N" when unknown. */
const char *fgx_onnx_dtype_name(int32_t t);
/* Checks and converts; `where` names the tensor in errors ("initializer
 * 'w'", "attribute 'value'"), n the node (NULL: the model). NULL after
 * fgx_fail. */
/* The same checks without reading the data: the element count, or -1
 * after fgx_fail. */
int64_t fgx_tensor_check(fgx_ctx *c, const fgx_node *n, const Onnx__TensorProto *tp,
                         const char *where);
fg_tensor *fgx_tensor_from_proto(fgx_ctx *c, const fgx_node *n, const Onnx__TensorProto *tp,
                                 const char *where);

/* ---- onnx_wire.c ---------------------------------------------------------- */
/* Walks the protobuf wire format of a ModelProto and writes where it is
 * malformed ("ModelProto.graph.node[3].attribute[0]: ...") into buf;
 * returns 0 when the walk finds nothing wrong. */
int fgx_wire_check(const uint8_t *data, size_t size, char *buf, size_t buf_size);

#endif /* FG_SCHEMA_ONNX_INTERNAL_H */
