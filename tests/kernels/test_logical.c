/* logical_not, logical_and and logical_or: truth tables, NumPy broadcasting
 * (scalar, row, column, rank-mismatched), nonzero bytes read as true, the
 * dtype checks of shape inference and of the kernels, and the same cases on
 * cuda:0 when there is a GPU. Every expected value is written out by hand
 * from the truth tables. */
#include <string.h>

#include "fgtest.h"
#include "flowgraph/flowgraph.h"
#include "kernels/kernel.h"

/* A bool tensor of the given shape and bytes. */
static fg_tensor *bools(int rank, const int64_t *dims, const uint8_t *v) {
  fg_tensor *t = fg_tensor_new(FG_BOOL, rank, dims, NULL);
  if (t) memcpy(fg_tensor_data(t), v, fg_tensor_num_bytes(t));
  return t;
}

/* Runs op on constants a (and b when rank_b >= 0) on device, and checks
 * the output's shape and bytes against want. */
static void check_op(const char *device, const char *op, int rank_a, const int64_t *da,
                     const uint8_t *a, int rank_b, const int64_t *db, const uint8_t *b, int rank_o,
                     const int64_t *dout, const uint8_t *want) {
  fg_graph *g = fg_graph_new();
  fg_tensor *ta = bools(rank_a, da, a), *tb = rank_b >= 0 ? bools(rank_b, db, b) : NULL;
  FG_REQUIRE(ta && (rank_b < 0 || tb));
  /* Placeholders, not constants, so that no constant folding runs the
   * op anywhere but on `device`. */
  fg_output x = fg_placeholder(g, "a", FG_BOOL, rank_a, da), y;
  fg_output z = rank_b >= 0 ? fg_placeholder(g, "b", FG_BOOL, rank_b, db) : FG_NO_OUTPUT;
  if (!strcmp(op, "logical_not"))
    y = fg_logical_not(g, x);
  else if (!strcmp(op, "logical_and"))
    y = fg_logical_and(g, x, z);
  else
    y = fg_logical_or(g, x, z);
  fg_set_name(g, y, "y");
  fg_status *st = fg_status_new();
  fg_session_options o;
  fg_session_options_init(&o);
  o.device = device;
  fg_session *s = fg_session_new(g, &o, st);
  const char *fetch = "y";
  fg_tensor *out = NULL;
  const fg_feed feeds[2] = {{"a", ta}, {"b", tb}};
  int rc = s ? fg_session_run(s, feeds, rank_b >= 0 ? 2 : 1, &fetch, 1, &out, NULL, 0, st) : -1;
  if (rc != 0) FG_FAIL_AT("%s on %s: %s", op, device, fg_status_message(st));
  if (rc == 0) {
    FG_CHECK_INT(fg_tensor_dtype(out), FG_BOOL);
    FG_CHECK_INT(fg_tensor_rank(out), rank_o);
    int64_t n = 1;
    for (int d = 0; d < rank_o && d < fg_tensor_rank(out); d++) {
      FG_CHECK_INT(fg_tensor_dim(out, d), dout[d]);
      n *= dout[d];
    }
    const uint8_t *got = fg_tensor_data(out);
    for (int64_t i = 0; i < n && i < fg_tensor_num_elements(out); i++)
      if (got[i] != want[i])
        FG_FAIL_AT("%s on %s: element %lld is %d, want %d", op, device, (long long)i, got[i],
                   want[i]);
  }
  fg_tensor_free(out);
  fg_session_free(s);
  fg_status_free(st);
  fg_tensor_free(ta);
  fg_tensor_free(tb);
  fg_graph_free(g);
}

static void truth_tables(const char *dev) {
  const int64_t d4[1] = {4};
  const uint8_t a[4] = {0, 0, 1, 1}, b[4] = {0, 1, 0, 1};
  const uint8_t w_and[4] = {0, 0, 0, 1}, w_or[4] = {0, 1, 1, 1}, w_not[4] = {1, 1, 0, 0};
  check_op(dev, "logical_and", 1, d4, a, 1, d4, b, 1, d4, w_and);
  check_op(dev, "logical_or", 1, d4, a, 1, d4, b, 1, d4, w_or);
  check_op(dev, "logical_not", 1, d4, a, -1, NULL, NULL, 1, d4, w_not);
  /* Bytes other than 1 read as true; the output is 0 or 1. */
  const uint8_t odd[4] = {0, 2, 255, 1}, ones[4] = {1, 1, 1, 1};
  const uint8_t w_and_odd[4] = {0, 1, 1, 1}, w_not_odd[4] = {1, 0, 0, 0};
  check_op(dev, "logical_and", 1, d4, odd, 1, d4, ones, 1, d4, w_and_odd);
  check_op(dev, "logical_or", 1, d4, odd, 1, d4, odd, 1, d4, w_and_odd);
  check_op(dev, "logical_not", 1, d4, odd, -1, NULL, NULL, 1, d4, w_not_odd);
}

static void broadcasts(const char *dev) {
  /* [2, 3] with a scalar: and with true is the identity, or with true all 1. */
  const int64_t d23[2] = {2, 3};
  const uint8_t m[6] = {1, 0, 1, 0, 0, 1}, t[1] = {1}, f[1] = {0};
  const uint8_t all1[6] = {1, 1, 1, 1, 1, 1}, all0[6] = {0, 0, 0, 0, 0, 0};
  check_op(dev, "logical_and", 2, d23, m, 0, NULL, t, 2, d23, m);
  check_op(dev, "logical_or", 0, NULL, t, 2, d23, m, 2, d23, all1);
  check_op(dev, "logical_and", 0, NULL, f, 2, d23, m, 2, d23, all0);
  /* [2, 3] with a row [3] = {1, 1, 0}: column 2 cleared (and), columns 0
   * and 1 set (or). */
  const int64_t d3[1] = {3};
  const uint8_t row[3] = {1, 1, 0};
  const uint8_t w_and_row[6] = {1, 0, 0, 0, 0, 0}, w_or_row[6] = {1, 1, 1, 1, 1, 1};
  check_op(dev, "logical_and", 2, d23, m, 1, d3, row, 2, d23, w_and_row);
  check_op(dev, "logical_or", 2, d23, m, 1, d3, row, 2, d23, w_or_row);
  /* [2, 1] column {0, 1} with [2, 3]: row 0 cleared (and) or kept (or). */
  const int64_t d21[2] = {2, 1};
  const uint8_t col[2] = {0, 1};
  const uint8_t w_and_col[6] = {0, 0, 0, 0, 0, 1}, w_or_col[6] = {1, 0, 1, 1, 1, 1};
  check_op(dev, "logical_and", 2, d21, col, 2, d23, m, 2, d23, w_and_col);
  check_op(dev, "logical_or", 2, d23, m, 2, d21, col, 2, d23, w_or_col);
  /* Rank-mismatched outer product: [2, 1, 1] {1, 0} and [3] {1, 0, 1} ->
   * [2, 1, 3]; and: row 0 is the [3] operand, row 1 zeros; or: row 0 ones,
   * row 1 the [3] operand. */
  const int64_t d211[3] = {2, 1, 1}, d213[3] = {2, 1, 3};
  const uint8_t c2[2] = {1, 0}, r3[3] = {1, 0, 1};
  const uint8_t w_and_o[6] = {1, 0, 1, 0, 0, 0}, w_or_o[6] = {1, 1, 1, 1, 0, 1};
  check_op(dev, "logical_and", 3, d211, c2, 1, d3, r3, 3, d213, w_and_o);
  check_op(dev, "logical_or", 1, d3, r3, 3, d211, c2, 3, d213, w_or_o);
}

FG_TEST(logical_truth_tables, "") { truth_tables("cpu"); }
FG_TEST(logical_broadcasting, "") { broadcasts("cpu"); }

FG_TEST(logical_on_cuda, "gpu") {
  if (fg_cuda_device_count() < 1) {
    FG_SKIP_NO_GPU("no CUDA device in this build or machine");
    return;
  }
  truth_tables("cuda:0");
  broadcasts("cuda:0");
}

/* Numbers are refused when the node is made, naming the node, the input
 * and its dtype; shapes that do not broadcast name both shapes. */
FG_TEST(logical_refuses_numbers_and_bad_shapes, "badinput") {
  fg_graph *g = fg_graph_new();
  const int64_t d2[1] = {2}, d3[1] = {3};
  fg_output f = fg_placeholder(g, "f", FG_F32, 1, d2);
  fg_output y = fg_logical_not(g, f);
  FG_CHECK(y.node < 0);
  fg_status *st = fg_status_new();
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "logical_not");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "input 0 dtype f32");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "needs bool");
  fg_graph_free(g);

  g = fg_graph_new();
  fg_output b2 = fg_placeholder(g, "b2", FG_BOOL, 1, d2);
  fg_output i3 = fg_placeholder(g, "i3", FG_I32, 1, d3);
  FG_CHECK(fg_logical_or(g, b2, i3).node < 0);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "input 1 dtype i32");
  fg_graph_free(g);

  g = fg_graph_new();
  b2 = fg_placeholder(g, "b2", FG_BOOL, 1, d2);
  fg_output b3 = fg_placeholder(g, "b3", FG_BOOL, 1, d3);
  FG_CHECK(fg_logical_and(g, b2, b3).node < 0);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "[2]");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "[3]");
  fg_graph_free(g);
  fg_status_free(st);
}

/* The kernel alone refuses a non-bool operand (a direct caller, or a
 * registry key other than bool), with a message and no crash. */
FG_TEST(logical_kernel_refuses_non_bool, "badinput") {
  fg_kernel_fn fn = fg_cpu_kernel("logical_and", FG_F32);
  FG_REQUIRE(fn != NULL);
  float a[2] = {1, 0};
  uint8_t b[2] = {1, 1}, o[2] = {7, 7};
  fg_kbuf in[2], out;
  memset(in, 0, sizeof in);
  memset(&out, 0, sizeof out);
  in[0].dtype = FG_F32;
  in[0].rank = 1;
  in[0].dims[0] = 2;
  in[0].data = a;
  in[1].dtype = FG_BOOL;
  in[1].rank = 1;
  in[1].dims[0] = 2;
  in[1].data = b;
  out = in[1];
  out.data = o;
  fg_op_params p;
  memset(&p, 0, sizeof p);
  char err[128] = "";
  fg_kctx ctx = {in,   2,    &out, 1, &p, err, sizeof err, NULL, NULL, NULL,
                 NULL, NULL, 0,    0, 0,  0,   0,          0,    NULL};
  FG_CHECK_INT(fn(&ctx), -1);
  FG_CHECK_STR_CONTAINS(err, "input 0 is f32");
  FG_CHECK(o[0] == 7 && o[1] == 7);
}
