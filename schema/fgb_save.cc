/* Writing .fgb files: the graph IR into FlatBuffers bytes (schema/graph.fbs). */
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "schema/fgb_common.h"

extern "C" {
#include "flowgraph/flowgraph.h"
}

namespace fb = flowgraph::fb;
using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

namespace fgb {
namespace {

/* Saturating add: the bound only has to reach the 2 GiB limit. */
void add(size_t *total, size_t n) { *total = n > SIZE_MAX - *total ? SIZE_MAX : *total + n; }

/* An upper bound of the serialised size (generous per-object overheads), so a
 * graph over the format's 2 GiB limit is refused before the builder grows. */
size_t size_bound(const fg_graph *g) {
  size_t total = 1024;
  for (int i = 0; i < g->n_nodes; i++) {
    const fg_node *n = &g->nodes[i];
    add(&total, 256 + strlen(n->name) + (n->device ? strlen(n->device) : 0));
    add(&total, (size_t)n->n_inputs * 8 + (size_t)n->n_outputs * (64 + 8 * FG_MAX_RANK));
    for (int j = 0; j < n->attrs.n; j++) {
      const fg_attr *a = &n->attrs.items[j];
      add(&total, 128 + strlen(a->name) + (a->s ? strlen(a->s) : 0) + (size_t)a->n * 8);
      if (a->t) add(&total, 256 + fg_tensor_num_bytes(a->t) + kBufferAlign);
    }
  }
  for (int i = 0; i < g->n_meta; i++)
    add(&total, 64 + strlen(g->meta_keys[i]) + strlen(g->meta_vals[i]));
  add(&total, (size_t)g->n_outputs * 8);
  return total;
}

Offset<fb::TensorInfo> tensor_info(FlatBufferBuilder *fbb, const fg_tinfo &t) {
  auto shape = fbb->CreateVector(t.dims, (size_t)t.rank);
  return fb::CreateTensorInfo(*fbb, (fb::DType)t.dtype, shape);
}

/* Tensor attributes get buffer numbers in node order, `*next_buffer` onward;
 * serialize() writes the buffers in the same order. */
int attr(FlatBufferBuilder *fbb, const fg_node *n, const fg_attr *a, uint32_t *next_buffer,
         Offset<fb::Attr> *out, fg_status *st) {
  auto name = fbb->CreateString(a->name);
  fb::AttrValue type;
  Offset<void> value;
  switch (a->type) {
  case FG_ATTR_INT:
    type = fb::AttrValue::IntValue;
    value = fb::CreateIntValue(*fbb, a->i).Union();
    break;
  case FG_ATTR_FLOAT:
    type = fb::AttrValue::FloatValue;
    value = fb::CreateFloatValue(*fbb, a->f).Union();
    break;
  case FG_ATTR_STRING:
    type = fb::AttrValue::StringValue;
    value = fb::CreateStringValue(*fbb, fbb->CreateString(a->s ? a->s : "")).Union();
    break;
  case FG_ATTR_INTS:
    type = fb::AttrValue::IntList;
    value = fb::CreateIntList(*fbb, fbb->CreateVector(a->ints, (size_t)a->n)).Union();
    break;
  case FG_ATTR_FLOATS:
    type = fb::AttrValue::FloatList;
    value = fb::CreateFloatList(*fbb, fbb->CreateVector(a->floats, (size_t)a->n)).Union();
    break;
  case FG_ATTR_TENSOR: {
    if (!a->t) {
      fg_status_set(st, FG_INTERNAL, "node '%s' (%s): attribute '%s' holds no tensor", n->name,
                    fg_op_table[n->op].name, a->name);
      return -1;
    }
    auto shape = fbb->CreateVector(fg_tensor_dims(a->t), (size_t)fg_tensor_rank(a->t));
    type = fb::AttrValue::TensorValue;
    value = fb::CreateTensorValue(*fbb, (fb::DType)fg_tensor_dtype(a->t), shape, (*next_buffer)++)
                .Union();
    break;
  }
  default:
    fg_status_set(st, FG_INTERNAL, "node '%s' (%s): attribute '%s' has unknown type %d", n->name,
                  fg_op_table[n->op].name, a->name, (int)a->type);
    return -1;
  }
  *out = fb::CreateAttr(*fbb, name, type, value);
  return 0;
}

Offset<fb::Buffer> buffer(FlatBufferBuilder *fbb, const fg_tensor *t) {
  size_t bytes = fg_tensor_num_bytes(t);
  /* ForceVectorAlignment() without its assert: FlatBuffers 2.0.8 caps
   * alignment at 32, but padding to 64 is just padding, and the builder pads
   * the whole file to a multiple of its largest alignment. */
  if (bytes) fbb->PreAlign(bytes, kBufferAlign);
  auto data = fbb->CreateVector((const uint8_t *)fg_tensor_data(t), bytes);
  return fb::CreateBuffer(*fbb, data);
}

} // namespace

int serialize(const fg_graph *g, FlatBufferBuilder *fbb, fg_status *st) {
  size_t bound = size_bound(g);
  if (bound > kMaxFileBytes) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED,
                  "graph needs about %zu bytes, over the %zu-byte limit of .fgb files", bound,
                  kMaxFileBytes);
    return -1;
  }
  std::vector<Offset<fb::Node>> nodes;
  std::vector<const fg_tensor *> tensors;
  std::vector<flatbuffers::Offset<flatbuffers::String>> placeholders;
  uint32_t next_buffer = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const fg_node *n = &g->nodes[i];
    auto name = fbb->CreateString(n->name);
    auto op = fbb->CreateString(fg_op_table[n->op].name);
    std::vector<fb::TensorRef> refs;
    for (int j = 0; j < n->n_inputs; j++)
      refs.emplace_back(n->inputs[j].node, n->inputs[j].index);
    auto inputs = fbb->CreateVectorOfStructs(refs);
    std::vector<Offset<fb::Attr>> attrs;
    for (int j = 0; j < n->attrs.n; j++) {
      Offset<fb::Attr> a;
      if (attr(fbb, n, &n->attrs.items[j], &next_buffer, &a, st) != 0) return -1;
      attrs.push_back(a);
      if (n->attrs.items[j].type == FG_ATTR_TENSOR) tensors.push_back(n->attrs.items[j].t);
    }
    auto attrs_vec = fbb->CreateVector(attrs);
    std::vector<Offset<fb::TensorInfo>> outs;
    for (int j = 0; j < n->n_outputs; j++)
      outs.push_back(tensor_info(fbb, n->outputs[j]));
    auto outs_vec = fbb->CreateVector(outs);
    auto device = n->device ? fbb->CreateString(n->device) : 0;
    nodes.push_back(fb::CreateNode(*fbb, name, op, inputs, attrs_vec, outs_vec, device,
                                   (n->flags & FG_NODE_MADE_BY_GRADIENTS) != 0));
    if (n->op == FG_OP_PLACEHOLDER) placeholders.push_back(fbb->CreateString(n->name));
  }
  auto nodes_vec = fbb->CreateVector(nodes);

  std::vector<Offset<fb::Buffer>> buffers;
  for (const fg_tensor *t : tensors)
    buffers.push_back(buffer(fbb, t));
  auto buffers_vec = fbb->CreateVector(buffers);
  auto inputs_vec = fbb->CreateVector(placeholders);

  std::vector<fb::TensorRef> outs;
  for (int i = 0; i < g->n_outputs; i++)
    outs.emplace_back(g->outputs[i].node, g->outputs[i].index);
  auto outputs_vec = fbb->CreateVectorOfStructs(outs);

  std::vector<Offset<fb::KeyValue>> meta;
  bool has_producer = false;
  for (int i = 0; i < g->n_meta; i++) {
    has_producer = has_producer || strcmp(g->meta_keys[i], "producer") == 0;
    meta.push_back(fb::CreateKeyValue(*fbb, fbb->CreateString(g->meta_keys[i]),
                                      fbb->CreateString(g->meta_vals[i])));
  }
  if (!has_producer)
    meta.push_back(fb::CreateKeyValue(*fbb, fbb->CreateString("producer"),
                                      fbb->CreateString("flowgraph " FLOWGRAPH_VERSION_STRING)));
  auto meta_vec = fbb->CreateVector(meta);

  auto root = fb::CreateGraph(*fbb, FG_FORMAT_VERSION, nodes_vec, buffers_vec, inputs_vec,
                              outputs_vec, meta_vec);
  fb::FinishGraphBuffer(*fbb, root);
  return 0;
}

int check_graph(const fg_graph *g, const char *what, fg_status *st) {
  if (!g) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "%s: graph is NULL", what);
    return -1;
  }
  if (fg_graph_failed(g)) {
    fg_status *err = fg_status_new();
    fg_graph_status(g, err);
    fg_status_set(st, err ? fg_status_code(err) : FG_RESOURCE_EXHAUSTED,
                  "%s: the graph holds an error: %s", what, err ? fg_status_message(err) : "");
    fg_status_free(err);
    return -1;
  }
  return 0;
}

} // namespace fgb

extern "C" int fg_graph_save_memory(const fg_graph *g, void **data, size_t *size,
                                    fg_status *status) {
  if (data) *data = NULL;
  if (size) *size = 0;
  if (!data || !size) {
    fg_status_set(status, FG_INVALID_ARGUMENT, "fg_graph_save_memory: data or size is NULL");
    return -1;
  }
  if (fgb::check_graph(g, "fg_graph_save_memory", status) != 0) return -1;
  try {
    FlatBufferBuilder fbb(1 << 16);
    if (fgb::serialize(g, &fbb, status) != 0) return -1;
    void *copy = malloc(fbb.GetSize() ? fbb.GetSize() : 1);
    if (!copy) {
      fg_status_set(status, FG_RESOURCE_EXHAUSTED,
                    "fg_graph_save_memory: cannot allocate %zu bytes", (size_t)fbb.GetSize());
      return -1;
    }
    memcpy(copy, fbb.GetBufferPointer(), fbb.GetSize());
    *data = copy;
    *size = fbb.GetSize();
  } catch (...) {
    fgb::status_from_exception(status, "fg_graph_save_memory");
    return -1;
  }
  fg_status_clear(status);
  return 0;
}

extern "C" int fg_graph_save(const fg_graph *g, const char *path, fg_status *status) {
  if (!path) {
    fg_status_set(status, FG_INVALID_ARGUMENT, "fg_graph_save: path is NULL");
    return -1;
  }
  if (fgb::check_graph(g, "fg_graph_save", status) != 0) return -1;
  try {
    FlatBufferBuilder fbb(1 << 16);
    if (fgb::serialize(g, &fbb, status) != 0) return -1;
    return fgb::write_file_atomic(path, fbb.GetBufferPointer(), fbb.GetSize(), status);
  } catch (...) {
    fgb::status_from_exception(status, "fg_graph_save");
    return -1;
  }
}
