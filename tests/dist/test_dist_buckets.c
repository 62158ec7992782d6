/* How fg_data_parallel reduces a bucket: gradients under
 * FG_DP_FUSE_MAX_BYTES are concatenated into one all_reduce, larger ones
 * get an all_reduce of their own on the gradient itself (no copies), and
 * either way training equals one device on the full batch. */
#include "fgtest.h"
#include "test_dist_util.h"

static const char *const batch_names[2] = {"x", "y"};

/* x [?,256] -> dense 256x1024 (w: exactly 1 MiB in f32) -> relu -> dense
 * 1024x10 -> softmax cross-entropy; SGD. */
static fg_graph *wide_mlp(void) {
  return dist_wide_mlp(FG_F32, 256, 1024, FG_OPTIMIZER_SGD, "wide", "out");
}

static void batch(int step, int rows, fg_tensor **x, fg_tensor **y) {
  int64_t xd[2] = {rows, 256}, yd[1] = {rows};
  *x = fg_tensor_new(FG_F32, 2, xd, NULL);
  *y = fg_tensor_new(FG_I32, 1, yd, NULL);
  uint64_t rng = 100 + (uint64_t)step;
  for (int i = 0; i < rows * 256; i++)
    ((float *)fg_tensor_data(*x))[i] = (float)((double)(dist_rng(&rng) >> 40) * 0x1p-24 - 0.5);
  for (int i = 0; i < rows; i++)
    ((int32_t *)fg_tensor_data(*y))[i] = (int32_t)(dist_rng(&rng) % 10);
}

/* Trains 3 steps of 20 rows; losses into l[3]. */
static void train(fg_graph *g, double *l) {
  fg_status *st = fg_status_new();
  fg_session *s = fg_session_new(g, NULL, st);
  if (!s) fprintf(stderr, "%s\n", fg_status_message(st));
  FG_REQUIRE(s);
  for (int k = 0; k < 3; k++) {
    fg_tensor *x, *y, *out = NULL;
    batch(0, 20, &x, &y); /* the same rows: the loss must fall */
    fg_feed feeds[2] = {{"x", x}, {"y", y}};
    const char *fetch = "loss", *target = "train";
    FG_REQUIRE(fg_session_run(s, feeds, 2, &fetch, 1, &out, &target, 1, st) == 0);
    l[k] = ((float *)fg_tensor_data(out))[0];
    fg_tensor_free(out);
    fg_tensor_free(x);
    fg_tensor_free(y);
  }
  /* The trained variables follow the losses: l[3 + v] = sum of |w|. */
  const char *vars[4] = {"wide/w", "wide/b", "out/w", "out/b"};
  for (int v = 0; v < 4; v++) {
    fg_tensor *t = fg_session_variable(s, vars[v], st);
    FG_REQUIRE(t);
    double acc = 0;
    for (int64_t i = 0; i < fg_tensor_num_elements(t); i++)
      acc += fabs(((float *)fg_tensor_data(t))[i]);
    l[3 + v] = acc;
    fg_tensor_free(t);
  }
  fg_session_free(s);
  fg_status_free(st);
}

FG_TEST(dist_dp_large_gradient_reduced_in_place, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = wide_mlp();
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  fg_data_parallel_options o;
  fg_data_parallel_options_init(&o); /* 25 MB: one bucket */
  fg_graph *dg = fg_data_parallel(g, 2, batch_names, 2, &o, st);
  FG_REQUIRE(dg);
  FG_CHECK_INT(atoi(fg_graph_metadata(dg, "data_parallel_buckets")), 1);
  /* Per replica: the row counts, wide/w's gradient alone, and one fused
   * all_reduce of the other three (a concat of 1024 + 10240 + 10 floats). */
  int n_ar = 0, alone = 0, fused = 0;
  for (int n = 0; n < fg_graph_num_nodes(dg); n++) {
    if (strcmp(fg_node_op(dg, n), "all_reduce") != 0 || strstr(fg_node_name(dg, n), "/rows"))
      continue;
    n_ar++;
    int in = fg_node_input(dg, n, 0).node;
    int64_t dims[FG_MAX_RANK];
    int rank = fg_output_shape(dg, fg_node_input(dg, n, 0), dims);
    if (strcmp(fg_node_op(dg, in), "concat") == 0) {
      fused++;
      FG_CHECK_INT(fg_node_num_inputs(dg, in), 3);
      FG_CHECK(rank == 1 && dims[0] == 1024 + 10240 + 10);
    } else {
      alone++;
      FG_CHECK(strstr(fg_node_name(dg, in), "gradients/") != NULL);
      FG_CHECK(rank == 2 && dims[0] == 256 && dims[1] == 1024);
    }
  }
  FG_CHECK_INT(n_ar, 4);
  FG_CHECK_INT(alone, 2);
  FG_CHECK_INT(fused, 2);
  /* Same training as one device on the full batch, and the same bits as
   * one bucket per gradient (every element's mean is formed alike). */
  o.bucket_bytes = 1;
  fg_graph *dg1 = fg_data_parallel(g, 2, batch_names, 2, &o, st);
  FG_REQUIRE(dg1);
  double l1[7], ln[7], lb[7];
  train(g, l1);
  train(dg, ln);
  train(dg1, lb);
  for (int k = 0; k < 7; k++) {
    FG_CHECK_NEAR(ln[k], l1[k], 1e-5 * fabs(l1[k]));
    FG_CHECK(ln[k] == lb[k]);
  }
  FG_CHECK(l1[2] < l1[0]);
  fg_graph_free(dg1);
  fg_graph_free(dg);
  fg_graph_free(g);
  fg_status_free(st);
}
