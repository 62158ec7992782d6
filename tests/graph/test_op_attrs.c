/* The op table's attributes: every attribute a node carries is declared by
 * its op (or is an annotation whose name starts with '_'), of the declared
 * type, and the parse hooks turn them into each op's typed parameters.
 * Expected messages and parameter values are written out by hand from the
 * rows in graph/op_table.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fgtest.h"
#include "flowgraph/flowgraph.h"
#include "graph/op_table.h"

static fg_output placeholder(fg_graph *g, const char *name, int rank, const int64_t *dims) {
  return fg_placeholder(g, name, FG_F32, rank, dims);
}

FG_TEST(op_attrs_misspelt_matmul_attribute_refused, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t d[2] = {2, 3};
  fg_output in[2] = {placeholder(g, "a", 2, d), placeholder(g, "b", 2, d)};
  fg_attrs *at = fg_attrs_new();
  fg_attrs_set_int(at, "transpose_bb", 1);
  FG_CHECK_INT(fg_op(g, "matmul", "mm", in, 2, at).node, -1);
  fg_attrs_free(at);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR(fg_status_message(st),
               "node 'mm' (matmul): unknown attribute 'transpose_bb'; did you mean "
               "'transpose_b'?; matmul accepts: "
               "transpose_a (int, default 0), transpose_b (int, default 0)");
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(op_attrs_op_without_attributes_says_none, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t d[1] = {4};
  fg_output in[2] = {placeholder(g, "a", 1, d), placeholder(g, "b", 1, d)};
  fg_attrs *at = fg_attrs_new();
  fg_attrs_set_float(at, "alpha", 0.5);
  FG_CHECK_INT(fg_op(g, "add", "sum", in, 2, at).node, -1);
  fg_attrs_free(at);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR(fg_status_message(st),
               "node 'sum' (add): unknown attribute 'alpha'; add accepts: none");
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(op_attrs_wrong_type_refused_float_takes_int, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t d[2] = {2, 2};
  fg_output in[2] = {placeholder(g, "a", 2, d), placeholder(g, "b", 2, d)};
  /* An int where a float is declared is the same number. */
  fg_attrs *at = fg_attrs_new();
  fg_attrs_set_int(at, "alpha", 2);
  fg_output lr = fg_op(g, "leaky_relu", "lr", in, 1, at);
  fg_attrs_free(at);
  FG_CHECK(lr.node >= 0);
  /* A float where an int is declared is refused, not truncated. */
  at = fg_attrs_new();
  fg_attrs_set_float(at, "transpose_a", 1.0);
  FG_CHECK_INT(fg_op(g, "matmul", "mm", in, 2, at).node, -1);
  fg_attrs_free(at);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR(fg_status_message(st),
               "node 'mm' (matmul): attribute 'transpose_a' has type float, expected int");
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(op_attrs_annotations_are_kept, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t d[1] = {3};
  fg_output x = placeholder(g, "x", 1, d);
  fg_attrs *at = fg_attrs_new();
  fg_attrs_set_string(at, "_note", "from a converter");
  fg_output y = fg_op(g, "neg", "y", &x, 1, at);
  fg_attrs_free(at);
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK && y.node >= 0);
  const char *s = NULL;
  FG_CHECK(fg_node_attr_string(g, y.node, "_note", &s) == 0 && strcmp(s, "from a converter") == 0);
  fg_graph_free(g);
  fg_status_free(st);
}

/* A JSON file with reduce_sum's keepdims misspelt used to load and sum over
 * every axis; now the load fails naming the attribute. */
FG_TEST(op_attrs_misspelt_in_json_file_refused, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t d[2] = {2, 3}, axes[1] = {1};
  fg_reduce_sum(g, placeholder(g, "x", 2, d), axes, 1, 1);
  char path[] = "/tmp/fg_op_attrs_XXXXXX";
  int fd = mkstemp(path);
  FG_REQUIRE(fd >= 0);
  close(fd);
  FG_REQUIRE(fg_graph_save_json(g, path, st) == 0);
  fg_graph_free(g);
  FILE *f = fopen(path, "rb");
  FG_REQUIRE(f);
  char text[8192];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  char *k = strstr(text, "\"keepdims\"");
  FG_REQUIRE(k != NULL);
  memmove(k + 8, k + 9, strlen(k + 9) + 1); /* "keepdims" -> "keepdim" */
  f = fopen(path, "wb");
  FG_REQUIRE(f);
  fwrite(text, 1, strlen(text), f);
  fclose(f);
  FG_CHECK(fg_graph_load_json(path, st) == NULL);
  remove(path);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st),
                        "(reduce_sum): unknown attribute 'keepdim'; did you mean 'keepdims'?; "
                        "reduce_sum accepts: axes "
                        "(ints, default all), keepdims (int, default 0)");
  fg_status_free(st);
}

/* The rows themselves: what `flowgraph ops` and docs/ops.md print. */
FG_TEST(op_attrs_table_rows_are_complete, "") {
  for (int op = 0; op < fg_num_ops(); op++) {
    fg_op_info info;
    FG_REQUIRE(fg_op_info_get(op, &info) == 0);
    FG_CHECK(info.name && info.inputs && info.doc && info.doc[0]);
    /* An op whose kernels read parameters has attributes to read them from. */
    if (fg_op_table[op].parse && info.n_attrs == 0)
      FG_FAIL_AT("%s: parse hook, no attributes", info.name);
    for (int k = 0; k < info.n_attrs; k++) {
      fg_op_attr_info a;
      FG_REQUIRE(fg_op_attr_info_get(op, k, &a) == 0);
      FG_CHECK(a.name && a.name[0] && a.name[0] != '_' && a.doc && a.doc[0]);
      FG_CHECK(a.type >= FG_ATTR_INT && a.type <= FG_ATTR_TENSOR);
      FG_CHECK(a.dflt == NULL || a.dflt[0]);
      for (int j = 0; j < k; j++) {
        fg_op_attr_info b;
        fg_op_attr_info_get(op, j, &b);
        if (strcmp(a.name, b.name) == 0) FG_FAIL_AT("%s: attribute %s twice", info.name, a.name);
      }
    }
    fg_op_attr_info none;
    FG_CHECK_INT(fg_op_attr_info_get(op, info.n_attrs, &none), -1);
    /* A field filled by the shared parse step lies inside fg_op_params and
     * has the C type its attribute's type can fill. */
    for (const fg_attr_def *a = fg_op_table[op].attrs; a && a->name; a++) {
      if (a->kind == FG_PARAM_NONE) continue;
      size_t size = a->kind == FG_PARAM_FLAG ? sizeof(int) : 8;
      if (a->offset + size > sizeof(fg_op_params) || a->offset % (size == 8 ? 8 : 4) != 0)
        FG_FAIL_AT("%s.%s: field at %zu", info.name, a->name, a->offset);
      if ((a->kind == FG_PARAM_F64) != (a->type == FG_ATTR_FLOAT) || a->type > FG_ATTR_FLOAT)
        FG_FAIL_AT("%s.%s: kind %d for type %d", info.name, a->name, (int)a->kind, (int)a->type);
    }
  }
  fg_op_info info;
  FG_CHECK_INT(fg_op_info_get(fg_num_ops(), &info), -1);
  FG_CHECK_INT(fg_op_info_get(-1, &info), -1);
  FG_REQUIRE(fg_op_info_get(fg_op_find("apply_adam"), &info) == 0);
  FG_CHECK_STR(info.inputs, "var, m, v, grad, lr, step, ctrl...");
  FG_CHECK_INT(info.n_attrs, 5);
  FG_CHECK_INT(info.min_inputs, 6);
  FG_CHECK_INT(info.max_inputs, -1);
  FG_CHECK(info.flags & FG_OP_INFO_STATEFUL);
  FG_CHECK(!(info.flags & FG_OP_INFO_DIFFERENTIABLE));
  FG_CHECK_INT(fg_op_common_attrs(), 1);
  fg_op_attr_info a;
  FG_REQUIRE(fg_op_attr_info_get(-1, 0, &a) == 0);
  FG_CHECK_STR(a.name, "_colocate");
  FG_CHECK_INT(a.type, FG_ATTR_STRING);
  FG_CHECK_STR(fg_attr_type_name(FG_ATTR_FLOATS), "floats");
  FG_CHECK_STR(fg_attr_type_name((fg_attr_type)99), "unknown");
}

/* ---- parse hooks: the values kernels receive ---------------------------- */

/* Parses node `id` of g with its inferred input tinfos. */
static int parse(const fg_graph *g, int id, fg_op_params *p, fg_status *st) {
  const fg_node *n = fg_graph_node(g, id);
  fg_tinfo in[4];
  for (int i = 0; i < n->n_inputs && i < 4; i++)
    in[i] = *fg_graph_tinfo(g, n->inputs[i]);
  memset(p, 0xab, sizeof *p); /* the hook zeroes what it does not set */
  return fg_op_parse_params(n, in, p, st);
}

FG_TEST(op_attrs_parse_normalises_axes, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t d[3] = {2, 3, 4}, axes[2] = {-1, 0}, perm[3] = {2, 0, 1};
  fg_output x = placeholder(g, "x", 3, d);
  fg_output r = fg_reduce_sum(g, x, axes, 2, 1);
  fg_output all = fg_reduce_max(g, x, NULL, 0, 0);
  fg_output sm = fg_softmax(g, x, -1);
  fg_output cat = fg_concat(g, (fg_output[]){x, x}, 2, -2);
  fg_output am = fg_argmax(g, x, -3);
  fg_output tr = fg_transpose(g, x, 3, perm);
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  fg_op_params p;
  FG_REQUIRE(parse(g, r.node, &p, st) == 0);
  FG_CHECK_INT(p.reduce.n_axes, 2); /* -1 -> 2, sorted */
  FG_CHECK_INT(p.reduce.axes[0], 0);
  FG_CHECK_INT(p.reduce.axes[1], 2);
  FG_CHECK_INT(p.reduce.keepdims, 1);
  FG_REQUIRE(parse(g, all.node, &p, st) == 0);
  FG_CHECK_INT(p.reduce.n_axes, 3);
  FG_CHECK(p.reduce.axes[0] == 0 && p.reduce.axes[1] == 1 && p.reduce.axes[2] == 2);
  FG_CHECK_INT(p.reduce.keepdims, 0);
  FG_REQUIRE(parse(g, sm.node, &p, st) == 0);
  FG_CHECK_INT(p.softmax.axis, 2);
  FG_REQUIRE(parse(g, cat.node, &p, st) == 0);
  FG_CHECK_INT(p.concat.axis, 1);
  FG_REQUIRE(parse(g, am.node, &p, st) == 0);
  FG_CHECK_INT(p.argmax.axis, 0);
  FG_REQUIRE(parse(g, tr.node, &p, st) == 0);
  FG_CHECK(p.transpose.perm[0] == 2 && p.transpose.perm[1] == 0 && p.transpose.perm[2] == 1);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(op_attrs_parse_defaults_and_values, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t d[2] = {2, 2}, begin[2] = {1, 0}, size[2] = {1, -1};
  fg_output x = placeholder(g, "x", 2, d);
  fg_output mm = fg_matmul(g, x, x, 0, 1);
  fg_output lr = fg_leaky_relu(g, x, 0.25);
  fg_output sl = fg_slice(g, x, 2, begin, size);
  fg_output fl = fg_fill(g, FG_F64, 2, d, -1.5);
  fg_attrs *at = fg_attrs_new();
  fg_output lr_default = fg_op(g, "leaky_relu", "lr_default", &x, 1, at);
  fg_attrs_free(at);
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  fg_op_params p;
  FG_REQUIRE(parse(g, mm.node, &p, st) == 0);
  FG_CHECK(p.matmul.transpose_a == 0 && p.matmul.transpose_b == 1);
  FG_REQUIRE(parse(g, lr.node, &p, st) == 0);
  FG_CHECK(p.leaky_relu.alpha == 0.25);
  FG_REQUIRE(parse(g, lr_default.node, &p, st) == 0);
  FG_CHECK(p.leaky_relu.alpha == 0.01); /* torch.nn.LeakyReLU's default */
  FG_REQUIRE(parse(g, sl.node, &p, st) == 0);
  FG_CHECK(p.slice.begin[0] == 1 && p.slice.begin[1] == 0);
  FG_REQUIRE(parse(g, fl.node, &p, st) == 0);
  FG_CHECK(p.fill.value == -1.5);
  /* An op without parameters gets all zeros. */
  fg_op_params zero;
  memset(&zero, 0, sizeof zero);
  FG_REQUIRE(parse(g, fg_add(g, x, x).node, &p, st) == 0);
  FG_CHECK(memcmp(&p, &zero, sizeof p) == 0);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(op_attrs_parse_optimizer_and_dist_params, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t d[1] = {2}, rows[2] = {6, 2};
  float zeros[2] = {0, 0};
  fg_tensor *z = fg_tensor_from_data(FG_F32, 1, d, zeros, sizeof zeros, st);
  fg_output in[6] = {fg_variable(g, "w", z),    fg_variable(g, "m", z),
                     fg_variable(g, "v", z),    placeholder(g, "grad", 1, d),
                     fg_scalar(g, FG_F32, 0.1), fg_scalar(g, FG_F32, 1)};
  fg_tensor_free(z);
  fg_attrs *at = fg_attrs_new();
  fg_attrs_set_float(at, "weight_decay", 0.01);
  fg_output adam = fg_op(g, "apply_adam", "adam", in, 6, at);
  fg_attrs_free(at);
  at = fg_attrs_new();
  fg_attrs_set_float(at, "momentum", 0.9);
  fg_attrs_set_int(at, "nesterov", 1);
  fg_output mom =
      fg_op(g, "apply_momentum", "mom", (fg_output[]){in[0], in[1], in[3], in[4]}, 4, at);
  fg_attrs_free(at);
  at = fg_attrs_new();
  fg_output ar = fg_op(g, "all_reduce", "ar", &in[3], 1, at); /* mean defaults to 1 */
  fg_attrs_set_int(at, "index", 2);
  fg_attrs_set_int(at, "count", 3);
  fg_output sh = fg_op(g, "shard", "sh", (fg_output[]){placeholder(g, "rows", 2, rows)}, 1, at);
  fg_attrs_free(at);
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  fg_op_params p;
  FG_REQUIRE(parse(g, adam.node, &p, st) == 0);
  /* torch.optim.AdamW's betas and eps; l2 absent is 0. */
  FG_CHECK(p.adam.beta1 == 0.9 && p.adam.beta2 == 0.999 && p.adam.epsilon == 1e-8);
  FG_CHECK(p.adam.weight_decay == 0.01 && p.adam.l2 == 0);
  FG_REQUIRE(parse(g, mom.node, &p, st) == 0);
  FG_CHECK(p.momentum.momentum == 0.9 && p.momentum.nesterov == 1);
  FG_REQUIRE(parse(g, ar.node, &p, st) == 0);
  FG_CHECK(p.all_reduce.mean == 1 && p.all_reduce.weighted == 0);
  FG_REQUIRE(parse(g, sh.node, &p, st) == 0);
  FG_CHECK(p.shard.index == 2 && p.shard.count == 3);
  fg_graph_free(g);
  fg_status_free(st);
}

/* A required scalar that a saved file omits is caught when the plan parses
 * it, naming the node and attribute (fg_op's inference catches it first for
 * graphs built through the API; this is the parse step's own check). */
FG_TEST(op_attrs_parse_refuses_missing_and_bad_flags, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t d[2] = {2, 2};
  fg_output x = placeholder(g, "x", 2, d);
  fg_output mm = fg_matmul(g, x, x, 0, 0);
  fg_output oh = fg_one_hot(g, fg_cast(g, x, FG_I32), 3, FG_F32);
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  /* Tamper with the built nodes as a hostile file could. */
  fg_node *m = (fg_node *)fg_graph_node(g, mm.node);
  fg_attrs_set_int(&m->attrs, "transpose_b", 2);
  fg_op_params p;
  FG_CHECK_INT(parse(g, mm.node, &p, st), -1);
  FG_CHECK_STR_CONTAINS(fg_status_message(st),
                        "(matmul): attribute 'transpose_b' = 2 must be 0 or 1");
  fg_node *o = (fg_node *)fg_graph_node(g, oh.node);
  fg_attrs_clear(&o->attrs);
  FG_CHECK_INT(parse(g, oh.node, &p, st), -1);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "(one_hot): missing attribute 'depth' (int)");
  fg_graph_free(g);
  fg_status_free(st);
}
