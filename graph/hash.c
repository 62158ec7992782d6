/* Hashes of a graph for processes to check that they hold the same one
 * (ranks that disagree on the graph are refused, naming both hashes)
 * before they exchange anything: its structure and
 * constants, and separately the bytes of tensors (variables' values),
 * which data-parallel replicas must also agree on. */
#include <string.h>

#include "graph/graph_internal.h"
#include "graph/op_table.h"

/* 64-bit words at a time (bytes at the tail), each mixed in with a
 * multiply and a rotate, then a final avalanche (splitmix64's): fast enough
 * for gigabytes of variables, and any changed byte changes the result with
 * overwhelming probability. Not cryptographic. */
uint64_t fg_hash64(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  const uint64_t k = 0x9e3779b97f4a7c15ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = (h ^ (w * k)) * 0xff51afd7ed558ccdull;
    h = (h << 29) | (h >> 35);
  }
  for (; i < n; i++)
    h = (h ^ p[i]) * 0x100000001b3ull;
  h ^= (uint64_t)n;
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

static uint64_t hash_str(uint64_t h, const char *s) {
  return fg_hash64(h, s ? s : "", s ? strlen(s) + 1 : 0);
}

static uint64_t hash_i64(uint64_t h, int64_t v) { return fg_hash64(h, &v, sizeof v); }

static uint64_t hash_tensor(uint64_t h, const fg_tensor *t) {
  if (!t) return hash_i64(h, -1);
  h = hash_i64(h, fg_tensor_dtype(t));
  h = hash_i64(h, fg_tensor_rank(t));
  for (int d = 0; d < fg_tensor_rank(t); d++)
    h = hash_i64(h, fg_tensor_dim(t, d));
  return fg_hash64(h, fg_tensor_data(t), fg_tensor_num_bytes(t));
}

static uint64_t hash_attr(uint64_t h, const fg_attr *a, int skip_tensor) {
  h = hash_str(h, a->name);
  h = hash_i64(h, a->type);
  switch (a->type) {
  case FG_ATTR_INT: return hash_i64(h, a->i);
  case FG_ATTR_FLOAT: return fg_hash64(h, &a->f, sizeof a->f);
  case FG_ATTR_STRING: return hash_str(h, a->s);
  case FG_ATTR_INTS: return fg_hash64(hash_i64(h, a->n), a->ints, (size_t)a->n * sizeof *a->ints);
  case FG_ATTR_FLOATS:
    return fg_hash64(hash_i64(h, a->n), a->floats, (size_t)a->n * sizeof *a->floats);
  case FG_ATTR_TENSOR: return skip_tensor ? h : hash_tensor(h, a->t);
  default: return h;
  }
}

uint64_t fg_graph_structure_hash(const fg_graph *g) {
  uint64_t h = hash_i64(0x666c6f7767726170ull, g->n_nodes);
  for (int id = 0; id < g->n_nodes; id++) {
    const fg_node *n = &g->nodes[id];
    h = hash_str(h, fg_op_table[n->op].name);
    h = hash_str(h, n->name);
    /* Only the rank a device names must agree: which process runs a node
     * (and so the transfers between processes). Each process may place its
     * own nodes on its own devices (its replica on cuda:<its rank>). */
    const char *slash =
        n->device && strncmp(n->device, "rank:", 5) == 0 ? strchr(n->device, '/') : NULL;
    h = fg_hash64(h, slash ? n->device : "", slash ? (size_t)(slash - n->device) : 0);
    h = hash_i64(h, n->n_inputs);
    for (int i = 0; i < n->n_inputs; i++)
      h = hash_i64(hash_i64(h, n->inputs[i].node), n->inputs[i].index);
    h = hash_i64(h, n->attrs.n);
    /* A variable's value is what replicas may start from differently
     * (fg_session_broadcast_variables fixes that): hashed apart. */
    for (int k = 0; k < n->attrs.n; k++)
      h = hash_attr(h, &n->attrs.items[k], n->op == FG_OP_VARIABLE);
    h = hash_i64(h, n->n_outputs);
    for (int o = 0; o < n->n_outputs; o++) {
      const fg_tinfo *t = &n->outputs[o];
      h = hash_i64(hash_i64(h, t->dtype), t->rank);
      h = fg_hash64(h, t->dims, (size_t)t->rank * sizeof t->dims[0]);
    }
  }
  return h;
}
