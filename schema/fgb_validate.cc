/* Semantic validation of a verified .fgb file, before anything is built:
 * what the FlatBuffers verifier cannot know (indices, dtypes, shapes, byte
 * sizes, names, cycles). Every failure names the node and the values. */
#include <stdint.h>
#include <string.h>

#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "schema/fgb_common.h"

namespace fb = flowgraph::fb;

namespace fgb {
namespace {

bool has_nul(const flatbuffers::String *s) {
  return s && memchr(s->c_str(), '\0', s->size()) != nullptr;
}
bool empty(const flatbuffers::String *s) { return !s || s->size() == 0; }
bool dtype_ok(fb::DType d) { return (int)d > 0 && (int)d < FG_DTYPE_COUNT; }

struct Validator {
  const fb::Graph *root = nullptr;
  fg_status *st = nullptr;
  int n_nodes = 0;
  Plan *plan = nullptr;
  std::unordered_map<std::string_view, int> names;

  const fb::Node *node(int i) const { return root->nodes()->Get((flatbuffers::uoffset_t)i); }

  /* "node 'name' (op)" once the name and op of node i are known good. */
  std::string label(int i) const {
    return "node '" + esc(node(i)->name()) + "' (" + fg_op_table[plan->op[i]].name + ")";
  }

  int fail(fg_code code, const std::string &msg) {
    fg_status_set(st, code, "%s", msg.c_str());
    return -1;
  }

  int names_and_ops() {
    for (int i = 0; i < n_nodes; i++) {
      const fb::Node *n = node(i);
      if (empty(n->name()))
        return fail(FG_INVALID_GRAPH, "node " + std::to_string(i) + " has no name");
      if (has_nul(n->name()))
        return fail(FG_INVALID_GRAPH, "node " + std::to_string(i) + ": name '" + esc(n->name()) +
                                          "' contains a NUL byte");
      std::string who = "node '" + esc(n->name()) + "'";
      if (empty(n->op())) return fail(FG_INVALID_GRAPH, who + " has no op");
      int op = has_nul(n->op()) ? -1 : fg_op_lookup(n->op()->c_str());
      if (op < 0) return fail(FG_UNIMPLEMENTED, who + ": unknown op '" + esc(n->op()) + "'");
      plan->op[i] = op;
      auto ins = names.emplace(std::string_view(n->name()->c_str(), n->name()->size()), i);
      if (!ins.second)
        return fail(FG_INVALID_GRAPH, "node name '" + esc(n->name()) + "' is used twice (nodes " +
                                          std::to_string(ins.first->second) + " and " +
                                          std::to_string(i) + ")");
      /* An op whose output count comes from its attributes (split) is
       * checked when the node is built (fgb_load.cc compares the counts). */
      int want = fg_op_table[op].n_outputs;
      if (want >= 0 && n->outputs() && n->outputs()->size() != (flatbuffers::uoffset_t)want)
        return fail(FG_INVALID_GRAPH, label(i) + ": the file declares " +
                                          std::to_string(n->outputs()->size()) +
                                          " output(s), the op has " + std::to_string(want));
    }
    return 0;
  }

  /* FlatBuffers 2.0's verifier checks the alignment of a vector's length but
   * not of its 8-byte elements; reading a misaligned [long] or [double] in
   * place is undefined behaviour (found by fuzzing). Writers align them,
   * except empty vectors, which are never read. */
  template <typename Who, typename V> int aligned8(const Who &who, const V *v) {
    if (!v || v->size() == 0 || (uintptr_t)v->Data() % 8 == 0) return 0;
    return fail(FG_FORMAT_ERROR, who() + ": a vector of 8-byte values is not 8-byte aligned");
  }

  /* `who` makes the start of the message, only when one is needed. */
  template <typename Who>
  int shape(const Who &who, const flatbuffers::Vector<int64_t> *dims, int64_t min_dim,
            fg_tinfo *t) {
    if (aligned8(who, dims) != 0) return -1;
    size_t rank = dims ? dims->size() : 0;
    if (rank > FG_MAX_RANK)
      return fail(FG_INVALID_GRAPH, who() + " has rank " + std::to_string(rank) +
                                        ", above the maximum " + std::to_string(FG_MAX_RANK));
    t->rank = (int)rank;
    for (size_t d = 0; d < rank; d++) {
      t->dims[d] = dims->Get((flatbuffers::uoffset_t)d);
      if (t->dims[d] < min_dim)
        return fail(FG_INVALID_GRAPH, who() + " has dimension " + std::to_string(d) + " = " +
                                          std::to_string(t->dims[d]));
    }
    return 0;
  }

  template <typename Who> int tensor(const Who &who, const fb::TensorValue *v) {
    if (!dtype_ok(v->dtype()))
      return fail(FG_INVALID_GRAPH,
                  who() + " has unknown dtype " + std::to_string((int)v->dtype()));
    fg_tinfo t = {};
    t.dtype = (fg_dtype)v->dtype();
    if (shape(who, v->shape(), 0, &t) != 0) return -1;
    char sbuf[FG_SHAPE_STR_MAX];
    std::string shape_s = std::string(fg_shape_str(t.rank, t.dims, sbuf, sizeof sbuf)) + " of " +
                          fg_dtype_name(t.dtype);
    size_t bytes;
    if (fg_tinfo_bytes(&t, &bytes) != 0)
      return fail(FG_INVALID_GRAPH, who() + ": shape " + shape_s + " overflows 64-bit byte size");
    uint32_t nbuf = root->buffers() ? root->buffers()->size() : 0;
    if (v->buffer() >= nbuf)
      return fail(FG_INVALID_GRAPH, who() + ": buffer " + std::to_string(v->buffer()) +
                                        " is out of range (the file has " + std::to_string(nbuf) +
                                        " buffers)");
    const fb::Buffer *b = root->buffers()->Get(v->buffer());
    size_t have = b->data() ? b->data()->size() : 0;
    if (have != bytes)
      return fail(FG_INVALID_GRAPH, who() + ": buffer " + std::to_string(v->buffer()) + " holds " +
                                        std::to_string(have) + " bytes but shape " + shape_s +
                                        " needs " + std::to_string(bytes));
    return 0;
  }

  int attrs(int i) {
    auto attrs = node(i)->attrs();
    if (!attrs) return 0;
    std::unordered_set<std::string_view> seen;
    for (flatbuffers::uoffset_t j = 0; j < attrs->size(); j++) {
      const fb::Attr *a = attrs->Get(j);
      if (empty(a->name()) || has_nul(a->name()))
        return fail(FG_INVALID_GRAPH, label(i) + ": attribute " + std::to_string(j) +
                                          " has no name or a NUL byte in it");
      auto who = [&] { return label(i) + ": attribute '" + esc(a->name()) + "'"; };
      if (!seen.emplace(a->name()->c_str(), a->name()->size()).second)
        return fail(FG_INVALID_GRAPH, who() + " appears twice");
      int type = (int)a->value_type();
      if (a->value_type() == fb::AttrValue::NONE || type > (int)fb::AttrValue::MAX)
        return fail(FG_INVALID_GRAPH, who() + " has unknown value type " + std::to_string(type));
      if (!a->value()) return fail(FG_INVALID_GRAPH, who() + " has no value");
      if (auto s = a->value_as_StringValue())
        if (has_nul(s->v())) return fail(FG_INVALID_GRAPH, who() + " contains a NUL byte");
      if (auto t = a->value_as_TensorValue())
        if (tensor(who, t) != 0) return -1;
      if (auto l = a->value_as_IntList())
        if (aligned8(who, l->v()) != 0) return -1;
      if (auto l = a->value_as_FloatList())
        if (aligned8(who, l->v()) != 0) return -1;
    }
    return 0;
  }

  int node_body(int i) {
    const fb::Node *n = node(i);
    if (n->outputs())
      for (flatbuffers::uoffset_t j = 0; j < n->outputs()->size(); j++) {
        const fb::TensorInfo *ti = n->outputs()->Get(j);
        auto who = [&] { return label(i) + ": output " + std::to_string(j); };
        if (!dtype_ok(ti->dtype()))
          return fail(FG_INVALID_GRAPH,
                      who() + " has unknown dtype " + std::to_string((int)ti->dtype()));
        fg_tinfo t = {};
        if (shape(who, ti->shape(), FG_DIM_UNKNOWN, &t) != 0) return -1;
      }
    if (attrs(i) != 0) return -1;
    if (has_nul(n->device()))
      return fail(FG_INVALID_GRAPH, label(i) + ": device contains a NUL byte");
    if (n->inputs())
      for (flatbuffers::uoffset_t j = 0; j < n->inputs()->size(); j++)
        if (ref(i, j, n->inputs()->Get(j)) != 0) return -1;
    return 0;
  }

  /* Input j of node i (i < 0: graph output j): node in range, index below
   * the producer's output count. */
  int ref(int i, flatbuffers::uoffset_t j, const fb::TensorRef *r) {
    auto who = [&] {
      return (i < 0 ? std::string("graph output ") : label(i) + ": input ") + std::to_string(j);
    };
    if (r->node() < 0 || r->node() >= n_nodes)
      return fail(FG_INVALID_GRAPH, who() + " refers to node " + std::to_string(r->node()) +
                                        ", but the file has " + std::to_string(n_nodes) + " nodes");
    int have = fg_op_table[plan->op[r->node()]].n_outputs;
    /* Split: the count the file declares; without one, building the node
     * checks the reference against the count its attributes give. */
    if (have < 0) {
      auto outs = node(r->node())->outputs();
      have = outs ? (int)outs->size() : INT32_MAX;
    }
    if (r->index() < 0 || r->index() >= have)
      return fail(FG_INVALID_GRAPH, who() + " refers to output " + std::to_string(r->index()) +
                                        " of " + label(r->node()) + ", which has " +
                                        std::to_string(have) + " output(s)");
    return 0;
  }

  int graph_fields() {
    if (auto outs = root->outputs())
      for (flatbuffers::uoffset_t j = 0; j < outs->size(); j++)
        if (ref(-1, j, outs->Get(j)) != 0) return -1;
    if (auto ins = root->inputs())
      for (flatbuffers::uoffset_t j = 0; j < ins->size(); j++) {
        const flatbuffers::String *s = ins->Get(j);
        auto it = s ? names.find(std::string_view(s->c_str(), s->size())) : names.end();
        int id = it == names.end() ? -1 : it->second;
        if (id < 0 || plan->op[id] != FG_OP_PLACEHOLDER)
          return fail(FG_INVALID_GRAPH, "graph input " + std::to_string(j) + " '" + esc(s) +
                                            "' is not a placeholder node of the file");
      }
    if (auto meta = root->metadata())
      for (flatbuffers::uoffset_t j = 0; j < meta->size(); j++) {
        const fb::KeyValue *kv = meta->Get(j);
        if (empty(kv->key()) || has_nul(kv->key()) || has_nul(kv->value()))
          return fail(FG_INVALID_GRAPH, "metadata entry " + std::to_string(j) + " ('" +
                                            esc(kv->key()) + "') has no key or a NUL byte in it");
      }
    return 0;
  }

  /* Depth-first post-order over inputs, in file order: a file that is
   * already topological keeps its order (so node ids survive a save/load),
   * any other acyclic file gets sorted, and a cycle is reported with the
   * nodes on it. Iterative, so a long chain cannot overflow the stack. */
  int topo_sort() {
    enum { WHITE, GRAY, BLACK };
    std::vector<char> color((size_t)n_nodes, WHITE);
    std::vector<std::pair<int, flatbuffers::uoffset_t>> stack;
    plan->order.reserve((size_t)n_nodes);
    for (int start = 0; start < n_nodes; start++) {
      if (color[start] != WHITE) continue;
      stack.emplace_back(start, 0);
      color[start] = GRAY;
      while (!stack.empty()) {
        int v = stack.back().first;
        auto ins = node(v)->inputs();
        flatbuffers::uoffset_t &next = stack.back().second;
        if (ins && next < ins->size()) {
          int u = ins->Get(next++)->node();
          if (color[u] == GRAY) return cycle(stack, u);
          if (color[u] == WHITE) {
            color[u] = GRAY;
            stack.emplace_back(u, 0);
          }
          continue;
        }
        color[v] = BLACK;
        plan->order.push_back(v);
        stack.pop_back();
      }
    }
    return 0;
  }

  /* The stack from `u` to its top is the cycle: each entry reads from the
   * one above it, and the top reads from `u`. */
  int cycle(const std::vector<std::pair<int, flatbuffers::uoffset_t>> &stack, int u) {
    size_t from = stack.size() - 1;
    while (stack[from].first != u)
      from--;
    std::string path;
    size_t shown = 0;
    for (size_t k = from; k < stack.size(); k++, shown++) {
      if (shown == 8) {
        path += " <- ...";
        break;
      }
      path += (shown ? " <- '" : "'") + esc(node(stack[k].first)->name()) + "'";
    }
    path += " <- '" + esc(node(u)->name()) + "'";
    if (from == stack.size() - 1)
      return fail(FG_INVALID_GRAPH, label(u) + " is its own input (a cycle)");
    return fail(FG_INVALID_GRAPH, label(u) + " is on a cycle: " + path + " (a <- b: a reads b)");
  }
};

} // namespace

int validate(const fb::Graph *root, Plan *plan, fg_status *st) {
  Validator v;
  v.root = root;
  v.st = st;
  v.plan = plan;
  v.n_nodes = root->nodes() ? (int)root->nodes()->size() : 0;
  plan->op.assign((size_t)v.n_nodes, -1);
  plan->order.clear();
  if (v.names_and_ops() != 0) return -1;
  for (int i = 0; i < v.n_nodes; i++)
    if (v.node_body(i) != 0) return -1;
  if (v.graph_fields() != 0) return -1;
  return v.topo_sort();
}

} // namespace fgb
