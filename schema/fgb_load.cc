/* Reading .fgb files: verify, validate (schema/fgb_validate.cc), then build
 * the graph through fg_op(), the same path as the C API, so every op's own
 * checks (shape inference, attribute ranges, dtypes) apply to files too. */
#include <stdint.h>
#include <string.h>

#include <memory>
#include <new>
#include <vector>

#include "schema/fgb_common.h"

namespace fb = flowgraph::fb;

namespace fgb {
namespace {

using GraphPtr = std::unique_ptr<fg_graph, void (*)(fg_graph *)>;
using AttrsPtr = std::unique_ptr<fg_attrs, void (*)(fg_attrs *)>;
using StatusPtr = std::unique_ptr<fg_status, void (*)(fg_status *)>;

std::string tinfo_str(const fg_tinfo &t) {
  char buf[FG_SHAPE_STR_MAX];
  return std::string(fg_dtype_name(t.dtype)) + fg_shape_str(t.rank, t.dims, buf, sizeof buf);
}

struct Builder {
  const fb::Graph *root;
  const Plan &plan;
  fg_status *st;
  GraphPtr g{fg_graph_new(), fg_graph_free};
  std::vector<int> gid; /* graph node id of each file node */

  Builder(const fb::Graph *r, const Plan &p, fg_status *s) : root(r), plan(p), st(s) {}

  const fb::Node *node(int i) const { return root->nodes()->Get((flatbuffers::uoffset_t)i); }
  std::string label(int i) const {
    return "node '" + esc(node(i)->name()) + "' (" + fg_op_table[plan.op[i]].name + ")";
  }

  /* Moves the graph's sticky error, if any, into the status; node errors
   * from fg_op already name the node, others get the file node's label. A
   * bad "argument" to a builder came from the file: the graph is invalid. */
  int graph_error(int i) {
    StatusPtr err(fg_status_new(), fg_status_free);
    if (!err) throw std::bad_alloc();
    fg_code code = fg_graph_status(g.get(), err.get());
    if (code == FG_OK) return 0;
    if (code == FG_INVALID_ARGUMENT) code = FG_INVALID_GRAPH;
    const char *msg = fg_status_message(err.get());
    if (i >= 0 && !strstr(msg, ("'" + std::string(node(i)->name()->c_str()) + "'").c_str()))
      fg_status_set(st, code, "%s: %s", label(i).c_str(), msg);
    else
      fg_status_set(st, code, "%s", msg);
    return -1;
  }

  /* 0; -1 when out of memory; -2 when `st` says why. */
  int set_attr(fg_attrs *a, const fb::Attr *attr) {
    const char *name = attr->name()->c_str();
    switch (attr->value_type()) {
    case fb::AttrValue::IntValue: return fg_attrs_set_int(a, name, attr->value_as_IntValue()->v());
    case fb::AttrValue::FloatValue:
      return fg_attrs_set_float(a, name, attr->value_as_FloatValue()->v());
    case fb::AttrValue::StringValue: {
      auto s = attr->value_as_StringValue()->v();
      return fg_attrs_set_string(a, name, s ? s->c_str() : "");
    }
    case fb::AttrValue::IntList: {
      auto v = attr->value_as_IntList()->v();
      return fg_attrs_set_ints(a, name, v ? v->data() : nullptr, v ? (int)v->size() : 0);
    }
    case fb::AttrValue::FloatList: {
      auto v = attr->value_as_FloatList()->v();
      return fg_attrs_set_floats(a, name, v ? v->data() : nullptr, v ? (int)v->size() : 0);
    }
    case fb::AttrValue::TensorValue: {
      /* Validation checked dtype, rank, dims, buffer index and size. */
      auto tv = attr->value_as_TensorValue();
      int64_t dims[FG_MAX_RANK];
      int rank = tv->shape() ? (int)tv->shape()->size() : 0;
      for (int d = 0; d < rank; d++)
        dims[d] = tv->shape()->Get((flatbuffers::uoffset_t)d);
      auto data = root->buffers()->Get(tv->buffer())->data();
      static uint8_t none;
      void *bytes = data ? (void *)data->data() : (void *)&none;
      size_t n = data ? data->size() : 0;
      /* The attribute borrows the file's bytes (fg_attrs_set_tensor would
       * copy them); fg_op deep-copies attributes into the node, so a big
       * constant is copied once, not twice. */
      fg_tensor *t = fg_tensor_wrap((fg_dtype)tv->dtype(), rank, dims, bytes, n, st);
      if (!t) return -2;
      fg_attr *slot = fg_attrs_set_int(a, name, 0) == 0
                          ? const_cast<fg_attr *>(fg_attrs_find(a, name))
                          : nullptr;
      if (!slot) {
        fg_tensor_free(t);
        return -1;
      }
      slot->type = FG_ATTR_TENSOR;
      slot->t = t; /* freed with `a`; a borrowed tensor leaves the bytes alone */
      return 0;
    }
    default: return -2; /* validation refused these */
    }
  }

  int check_outputs(int i, int id) {
    const fg_node *gn = fg_graph_node(g.get(), id);
    auto outs = node(i)->outputs();
    if (!gn || !outs) return 0;
    if (gn->n_outputs != (int)outs->size()) {
      fg_status_set(st, FG_INVALID_GRAPH, "%s: the file declares %d output(s), the node has %d",
                    label(i).c_str(), (int)outs->size(), gn->n_outputs);
      return -1;
    }
    for (int j = 0; j < gn->n_outputs && j < (int)outs->size(); j++) {
      const fb::TensorInfo *ti = outs->Get((flatbuffers::uoffset_t)j);
      fg_tinfo want = {};
      want.dtype = (fg_dtype)ti->dtype();
      want.rank = ti->shape() ? (int)ti->shape()->size() : 0;
      for (int d = 0; d < want.rank; d++)
        want.dims[d] = ti->shape()->Get((flatbuffers::uoffset_t)d);
      const fg_tinfo &got = gn->outputs[j];
      bool same = want.dtype == got.dtype && want.rank == got.rank;
      for (int d = 0; same && d < want.rank; d++)
        same = want.dims[d] == got.dims[d];
      if (!same) {
        fg_status_set(st, FG_INVALID_GRAPH,
                      "%s: output %d is declared %s in the file, but infers as %s",
                      label(i).c_str(), j, tinfo_str(want).c_str(), tinfo_str(got).c_str());
        return -1;
      }
    }
    return 0;
  }

  int build_node(int i) {
    const fb::Node *n = node(i);
    AttrsPtr a(fg_attrs_new(), fg_attrs_free);
    if (!a) throw std::bad_alloc();
    if (n->attrs())
      for (auto attr : *n->attrs()) {
        int rc = set_attr(a.get(), attr);
        if (rc == -2) {
          if (fg_status_code(st) == FG_OK)
            fg_status_set(st, FG_INTERNAL, "%s: attribute '%s' passed validation but not building",
                          label(i).c_str(), esc(attr->name()).c_str());
          return -1;
        }
        if (rc != 0) throw std::bad_alloc();
      }
    std::vector<fg_output> ins;
    if (n->inputs())
      for (auto r : *n->inputs())
        ins.push_back(fg_output{gid[(size_t)r->node()], r->index()});
    fg_output o =
        fg_op(g.get(), n->op()->c_str(), n->name()->c_str(), ins.data(), (int)ins.size(), a.get());
    if (graph_error(i) != 0) return -1;
    if (n->device()) {
      fg_set_device(g.get(), o, n->device()->c_str());
      if (graph_error(i) != 0) return -1;
    }
    if (o.node < 0) {
      fg_status_set(st, FG_INTERNAL, "%s: fg_op failed without an error", label(i).c_str());
      return -1;
    }
    if (n->made_by_gradients()) g.get()->nodes[o.node].flags |= FG_NODE_MADE_BY_GRADIENTS;
    gid[(size_t)i] = o.node;
    return check_outputs(i, o.node);
  }

  fg_graph *build() {
    if (!g) throw std::bad_alloc();
    gid.assign(plan.op.size(), -1);
    for (int i : plan.order)
      if (build_node(i) != 0) return nullptr;
    if (auto outs = root->outputs())
      for (auto r : *outs)
        fg_graph_add_output(g.get(), fg_output{gid[(size_t)r->node()], r->index()});
    if (auto meta = root->metadata())
      for (auto kv : *meta)
        if (fg_graph_set_metadata(g.get(), kv->key()->c_str(),
                                  kv->value() ? kv->value()->c_str() : "") != 0 &&
            !fg_graph_failed(g.get()))
          throw std::bad_alloc();
    if (graph_error(-1) != 0) return nullptr;
    return g.release();
  }
};

} // namespace

fg_graph *load_bytes(const void *data, size_t size, const char *path, unsigned max_depth,
                     unsigned max_tables, fg_status *st) {
  std::string pre = path ? "'" + path_str(path) + "': " : "";
  if (!data && size) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "fg_graph_load_memory: data is NULL");
    return nullptr;
  }
  if (size < 8) {
    fg_status_set(st, FG_FORMAT_ERROR, "%snot a .fgb file: %s", pre.c_str(),
                  size ? (std::to_string(size) + " bytes are too few").c_str() : "it is empty");
    return nullptr;
  }
  if (size > kMaxFileBytes) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "%s%zu bytes, over the %zu-byte limit of .fgb files",
                  pre.c_str(), size, kMaxFileBytes);
    return nullptr;
  }
  /* Scalars up to 8 bytes are read in place: give them 8-byte alignment. */
  std::unique_ptr<uint64_t[]> aligned;
  if ((uintptr_t)data % 8 != 0) {
    aligned.reset(new uint64_t[(size + 7) / 8]);
    memcpy(aligned.get(), data, size);
    data = aligned.get();
  }
  const uint8_t *buf = (const uint8_t *)data;
  if (!flatbuffers::BufferHasIdentifier(buf, fb::GraphIdentifier())) {
    fg_status_set(st, FG_FORMAT_ERROR, "%snot a .fgb file: file identifier is '%s', expected '%s'",
                  pre.c_str(), esc((const char *)buf + 4, 4).c_str(), fb::GraphIdentifier());
    return nullptr;
  }
  flatbuffers::Verifier::Options opts;
  opts.max_depth = max_depth;
  opts.max_tables = max_tables;
  flatbuffers::Verifier verifier(buf, size, opts);
  if (!fb::VerifyGraphBuffer(verifier)) {
    fg_status_set(st, FG_FORMAT_ERROR,
                  "%snot a valid .fgb file: verifier failed (truncated, corrupt, or over its "
                  "limits: depth %u, %u tables)",
                  pre.c_str(), max_depth, max_tables);
    return nullptr;
  }
  const fb::Graph *root = fb::GetGraph(buf);
  if (root->version() > FG_FORMAT_VERSION) {
    fg_status_set(st, FG_UNSUPPORTED,
                  "%sfile format version %u is newer than this reader's version %d: upgrade "
                  "flowgraph",
                  pre.c_str(), root->version(), FG_FORMAT_VERSION);
    return nullptr;
  }
  if (root->version() == 0) {
    fg_status_set(st, FG_FORMAT_ERROR, "%sfile format version is missing (0)", pre.c_str());
    return nullptr;
  }
  Plan plan;
  if (validate(root, &plan, st) != 0) return nullptr;
  fg_graph *g = Builder(root, plan, st).build();
  if (g) fg_status_clear(st);
  return g;
}

} // namespace fgb

extern "C" fg_graph *fgb_load_memory_limits(const void *data, size_t size, unsigned max_depth,
                                            unsigned max_tables, fg_status *status) {
  try {
    return fgb::load_bytes(data, size, nullptr, max_depth, max_tables, status);
  } catch (...) {
    fgb::status_from_exception(status, "fg_graph_load_memory");
    return nullptr;
  }
}

extern "C" fg_graph *fg_graph_load_memory(const void *data, size_t size, fg_status *status) {
  return fgb_load_memory_limits(data, size, FGB_VERIFY_MAX_DEPTH, FGB_VERIFY_MAX_TABLES, status);
}

extern "C" fg_graph *fg_graph_load(const char *path, fg_status *status) {
  if (!path) {
    fg_status_set(status, FG_INVALID_ARGUMENT, "fg_graph_load: path is NULL");
    return nullptr;
  }
  try {
    std::string bytes;
    if (fgb::read_file(path, fgb::kMaxFileBytes, &bytes, status) != 0) return nullptr;
    return fgb::load_bytes(bytes.data(), bytes.size(), path, FGB_VERIFY_MAX_DEPTH,
                           FGB_VERIFY_MAX_TABLES, status);
  } catch (...) {
    fgb::status_from_exception(status, "fg_graph_load");
    return nullptr;
  }
}
