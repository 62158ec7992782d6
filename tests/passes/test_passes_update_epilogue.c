/* The update_epilogue pass (executor/passes/epilogue_update.c): apply_sgd
 * of a weight gradient matmul(a, dz, transpose_a) becomes one
 * matmul_apply_sgd whose GEMM adds -lr a^T dz into the variable. On
 * crafted graphs: what is rewritten and recorded; the updated variable
 * against a long double reference within the rounding bound of its
 * terms, in f32 and f64, for short and long sums (the library splits
 * long ones into blocks), passes on and off, 1 and 2 threads; what must
 * stay (another reader of the gradient, a product not transposed as a
 * weight gradient, the variable read by its own product, momentum); a
 * session fetching the gradient and the update together; an MLP's
 * training step, close to the unfused one with no weight gradient in
 * its plan and a smaller arena; and matmul_apply_sgd nodes built by hand
 * with bad inputs, refused with the node's name and the values. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "executor/cuda_backend.h"
#include "test_passes_mlp.h"

/* How the crafted update varies. */
typedef struct up_opts {
  fg_dtype dt;
  int64_t rows, m, n; /* a [rows, m], dz [rows, n], w [m, n] */
  int other_reader;   /* "ngw" = neg(gw) reads the gradient too */
  int a_given_t;      /* gw = matmul(at, dz) with at [m, rows]: no transpose_a */
  int a_is_w;         /* a is the variable itself (square w, rows == m) */
  int momentum;       /* apply_momentum instead of apply_sgd */
  int unknown_rows;   /* a and dz [-1, ...] */
} up_opts;

static double lr_of(fg_dtype dt) { return dt == FG_F64 ? 0.1 : (double)(float)0.1; }

/* sin-based values of dtype dt, shifted by salt. */
static fg_tensor *vals(fg_dtype dt, int rank, const int64_t *dims, int salt) {
  fg_tensor *t = fg_tensor_new(dt, rank, dims, NULL);
  for (int64_t i = 0; i < fg_tensor_num_elements(t); i++) {
    const double v = sin(0.61 * (double)(i + 1) + salt);
    if (dt == FG_F64)
      ((double *)fg_tensor_data(t))[i] = v;
    else
      ((float *)fg_tensor_data(t))[i] = (float)v;
  }
  return t;
}

static double at(const fg_tensor *t, int64_t i) {
  return fg_tensor_dtype(t) == FG_F64 ? ((const double *)fg_tensor_data(t))[i]
                                      : (double)((const float *)fg_tensor_data(t))[i];
}

/* w = variable, gw = matmul(a, dz, transpose_a), upd = apply_sgd(w, gw,
 * lr) (or the variations of o). */
static fg_graph *update_graph(const up_opts *o) {
  fg_graph *g = fg_graph_new();
  const int64_t r = o->unknown_rows ? -1 : o->rows;
  const int64_t ad[2] = {r, o->m}, atd[2] = {o->m, o->rows}, zd[2] = {r, o->n};
  const int64_t wd[2] = {o->m, o->n};
  fg_tensor *w0 = vals(o->dt, 2, wd, 3);
  fg_output w = fg_variable(g, "w", w0);
  fg_tensor_free(w0);
  fg_output dz = fg_placeholder(g, "dz", o->dt, 2, zd), gw;
  if (o->a_is_w) {
    gw = fg_matmul(g, w, dz, 1, 0);
  } else if (o->a_given_t) {
    gw = fg_matmul(g, fg_placeholder(g, "a", o->dt, 2, atd), dz, 0, 0);
  } else {
    gw = fg_matmul(g, fg_placeholder(g, "a", o->dt, 2, ad), dz, 1, 0);
  }
  fg_set_name(g, gw, "gw");
  if (o->other_reader) fg_set_name(g, fg_neg(g, gw), "ngw");
  fg_output lr = fg_scalar(g, o->dt, 0.1);
  if (o->momentum) {
    fg_tensor *b0 = fg_tensor_new(o->dt, 2, wd, NULL);
    fg_output buf = fg_variable(g, "buf", b0);
    fg_tensor_free(b0);
    fg_attrs *a = fg_attrs_new();
    fg_attrs_set_float(a, "momentum", 0.9);
    fg_op(g, "apply_momentum", "upd", (fg_output[]){w, buf, gw, lr}, 4, a);
    fg_attrs_free(a);
  } else {
    fg_op(g, "apply_sgd", "upd", (fg_output[]){w, gw, lr}, 3, NULL);
  }
  return g;
}

/* The device run_updates runs on (NULL: the CPU). */
static const char *run_device;

/* Runs `steps` updates of o's graph (passes on or off, `threads`), the
 * fetches of the last run into out[] (NULL: none) and w after into *w. */
static int run_updates(const up_opts *o, int no_passes, int threads, int steps, const char **fetch,
                       int n_fetch, fg_tensor **out, fg_tensor **w) {
  fg_graph *g = update_graph(o);
  fg_status *st = fg_status_new();
  fg_session_options so;
  fg_session_options_init(&so);
  so.num_threads = threads;
  so.no_passes = no_passes;
  so.device = run_device;
  fg_session *s = fg_session_new(g, &so, st);
  const int64_t ad[2] = {o->rows, o->m}, zd[2] = {o->rows, o->n};
  fg_tensor *a = vals(o->dt, 2, ad, 1), *dz = vals(o->dt, 2, zd, 2);
  fg_feed feeds[2] = {{"dz", dz}, {"a", a}};
  const char *target = "upd";
  int rc = s ? 0 : -1;
  for (int k = 0; rc == 0 && k < steps; k++)
    rc = fg_session_run(s, feeds, o->a_is_w ? 1 : 2, k == steps - 1 ? fetch : NULL,
                        k == steps - 1 ? n_fetch : 0, k == steps - 1 ? out : NULL, &target, 1, st);
  *w = rc == 0 ? fg_session_variable(s, "w", st) : NULL;
  if (!*w) fprintf(stderr, "run_updates: %s\n", fg_status_message(st));
  fg_tensor_free(a), fg_tensor_free(dz);
  fg_session_free(s);
  fg_status_free(st);
  fg_graph_free(g);
  return *w ? 0 : -1;
}

/* 1 when w is, element by element, w0 - steps * lr * a^T dz (a long
 * double reference, a and dz as fed) within steps * (rows + 3) * eps *
 * (|w0| + steps * lr * sum |a| |dz|): the rounding bound of each update's
 * sum and of the update itself, step after step. Prints the worst
 * element's ratio to it. */
static int close_to_reference(const up_opts *o, const fg_tensor *w, int steps) {
  const int64_t ad[2] = {o->rows, o->m}, zd[2] = {o->rows, o->n}, wd[2] = {o->m, o->n};
  fg_tensor *a = vals(o->dt, 2, ad, 1), *dz = vals(o->dt, 2, zd, 2), *w0 = vals(o->dt, 2, wd, 3);
  const double eps = o->dt == FG_F64 ? DBL_EPSILON / 2 : FLT_EPSILON / 2, lr = lr_of(o->dt);
  double worst = 0;
  for (int64_t i = 0; i < o->m; i++)
    for (int64_t j = 0; j < o->n; j++) {
      long double s = 0, mag = 0;
      for (int64_t r = 0; r < o->rows; r++) {
        const long double p = (long double)at(a, r * o->m + i) * at(dz, r * o->n + j);
        s += p, mag += fabsl(p);
      }
      const double w00 = at(w0, i * o->n + j), got = at(w, i * o->n + j);
      const long double ref = w00 - (long double)steps * lr * s;
      const double bound =
          steps * (double)(o->rows + 3) * eps * (fabs(w00) + steps * lr * (double)mag);
      const double ratio = fabs((double)((long double)got - ref)) / bound;
      worst = ratio > worst || ratio != ratio ? ratio : worst;
    }
  fg_tensor_free(a), fg_tensor_free(dz), fg_tensor_free(w0);
  if (!(worst <= 1)) fprintf(stderr, "worst error %.3g x its bound\n", worst);
  return worst <= 1;
}

FG_TEST(update_epilogue_rewrites_sgd_of_weight_gradient, "") {
  const up_opts o = {FG_F32, 8, 6, 5, 0, 0, 0, 0, 0};
  fg_graph *g = update_graph(&o);
  const char *fetch[1] = {"upd"};
  fg_pass_report *r = NULL;
  fg_graph *opt = optimize_fetches(g, fetch, 1, &r);
  FG_REQUIRE(opt);
  FG_CHECK_INT(count_op(opt, "matmul_apply_sgd"), 1);
  FG_CHECK_INT(count_op(opt, "apply_sgd") + count_op(opt, "matmul"), 0);
  const fg_pass_change *c = find_change(r, "update_epilogue", "gw");
  FG_REQUIRE(c);
  FG_CHECK_STR(c->action, "fused");
  FG_CHECK_STR(c->into, "upd");
  FG_CHECK_STR(c->rule, "matmul+apply_sgd");
  /* The update keeps its name; its inputs are var, a, lr, dz. */
  const int u = fg_graph_find(opt, "upd");
  FG_REQUIRE(u >= 0);
  FG_CHECK_STR(fg_node_op(opt, u), "matmul_apply_sgd");
  FG_REQUIRE(fg_node_num_inputs(opt, u) == 4);
  const char *want[4] = {"w", "a", NULL, "dz"};
  for (int i = 0; i < 4; i++)
    if (want[i]) FG_CHECK_STR(fg_node_name(opt, fg_node_input(opt, u, i).node), want[i]);
  fg_pass_report_free(r);
  fg_graph_free(opt);
  fg_graph_free(g);
  /* Two steps, passes on and off: both within the bound of the reference. */
  for (int off = 0; off < 2; off++) {
    fg_tensor *w = NULL;
    FG_REQUIRE(run_updates(&o, off, 1, 2, NULL, 0, NULL, &w) == 0);
    FG_CHECK(close_to_reference(&o, w, 2));
    fg_tensor_free(w);
  }
}

/* Long sums (1000 rows: the GEMM adds several blocks of them into w in
 * turn) and f64, on 1 and 2 threads: within the bound, and the same bits
 * for both thread counts. */
FG_TEST(update_epilogue_long_sums_f32_f64_any_threads, "") {
  const up_opts cases[3] = {{FG_F32, 1000, 40, 24, 0, 0, 0, 0, 0},
                            {FG_F64, 1000, 40, 24, 0, 0, 0, 0, 0},
                            {FG_F32, 300, 520, 36, 0, 0, 0, 0, 0}};
  for (int k = 0; k < 3; k++) {
    fg_tensor *w1 = NULL, *w2 = NULL;
    FG_REQUIRE(run_updates(&cases[k], 0, 1, 1, NULL, 0, NULL, &w1) == 0);
    FG_REQUIRE(run_updates(&cases[k], 0, 2, 1, NULL, 0, NULL, &w2) == 0);
    if (!close_to_reference(&cases[k], w1, 1)) FG_FAIL_AT("case %d: off the reference", k);
    if (!mlp_same_tensors(&w1, &w2, 1)) FG_FAIL_AT("case %d: 1 and 2 threads differ", k);
    fg_tensor_free(w1), fg_tensor_free(w2);
  }
}

/* What stays: each variation keeps its matmul and its update. */
FG_TEST(update_epilogue_leaves_what_it_must, "") {
  up_opts cases[4] = {{FG_F32, 8, 6, 5, 1, 0, 0, 0, 0},
                      {FG_F32, 8, 6, 5, 0, 1, 0, 0, 0},
                      {FG_F32, 5, 5, 5, 0, 0, 1, 0, 0},
                      {FG_F32, 8, 6, 5, 0, 0, 0, 1, 0}};
  const char *why[4] = {"another reader", "a given transposed", "a is w", "momentum"};
  for (int k = 0; k < 4; k++) {
    fg_graph *g = update_graph(&cases[k]);
    const char *fetch[2] = {"upd", "ngw"};
    fg_pass_report *r = NULL;
    fg_graph *opt = optimize_fetches(g, fetch, cases[k].other_reader ? 2 : 1, &r);
    FG_REQUIRE(opt);
    if (count_op(opt, "matmul_apply_sgd") != 0 || count_op(opt, "matmul") != 1 ||
        find_change(r, "update_epilogue", "gw") != NULL)
      FG_FAIL_AT("%s: fused", why[k]);
    fg_pass_report_free(r);
    fg_graph_free(opt);
    fg_graph_free(g);
  }
  /* The variable read by its own product: the session's result is the
   * unfused update's, w - lr w^T dz with the old w. */
  fg_tensor *on = NULL, *off = NULL;
  FG_REQUIRE(run_updates(&cases[2], 0, 1, 1, NULL, 0, NULL, &on) == 0);
  FG_REQUIRE(run_updates(&cases[2], 1, 1, 1, NULL, 0, NULL, &off) == 0);
  FG_CHECK(mlp_same_tensors(&on, &off, 1));
  fg_tensor_free(on), fg_tensor_free(off);
}

/* A session run that fetches the gradient and runs the update: the
 * fetched gradient is a^T dz and w is updated once. */
FG_TEST(update_epilogue_session_fetches_the_gradient, "") {
  const up_opts o = {FG_F32, 8, 6, 5, 0, 0, 0, 0, 1};
  const char *fetch[1] = {"gw"};
  fg_tensor *gw = NULL, *w = NULL;
  FG_REQUIRE(run_updates(&o, 0, 2, 1, fetch, 1, &gw, &w) == 0);
  FG_REQUIRE(gw);
  FG_CHECK(close_to_reference(&o, w, 1));
  const int64_t ad[2] = {8, 6}, zd[2] = {8, 5};
  fg_tensor *a = vals(FG_F32, 2, ad, 1), *dz = vals(FG_F32, 2, zd, 2);
  for (int64_t i = 0; i < 6; i++)
    for (int64_t j = 0; j < 5; j++) {
      double s = 0, mag = 0;
      for (int64_t r = 0; r < 8; r++)
        s += at(a, r * 6 + i) * at(dz, r * 5 + j),
            mag += fabs(at(a, r * 6 + i) * at(dz, r * 5 + j));
      if (fabs(at(gw, i * 5 + j) - s) > 10 * FLT_EPSILON * mag)
        FG_FAIL_AT("gw[%lld,%lld] = %.9g, expected %.9g", (long long)i, (long long)j,
                   at(gw, i * 5 + j), s);
    }
  fg_tensor_free(a), fg_tensor_free(dz), fg_tensor_free(gw), fg_tensor_free(w);
}

/* The largest |x - y| over the largest |y| of two tensors of one shape. */
static double rel_diff(const fg_tensor *x, const fg_tensor *y) {
  double d = 0, m = 0;
  for (int64_t i = 0; i < fg_tensor_num_elements(y); i++) {
    d = fmax(d, fabs(at(x, i) - at(y, i)));
    m = fmax(m, fabs(at(y, i)));
  }
  return m > 0 ? d / m : d;
}

/* The 96-256-256-10 MLP of the training cases, batch 64, SGD at 0.001 (its
 * sin-valued weights make larger rates diverge), its step in *target. */
static fg_graph *wide_mlp(mlp_spec *m, const char **target) {
  *m = (mlp_spec){3, {96, 256, 256, 10}, 64, 0, 7, {0}};
  fg_optimizer_config_init(&m->opt, FG_OPTIMIZER_SGD);
  m->opt.learning_rate = 0.001;
  return mlp_build(m, target);
}

/* A 96-256-256-10 MLP, batch 64, 5 SGD steps on 2 threads with the
 * passes on, on but for update_epilogue, and off: with them on the plan
 * updates each weight in its gradient's GEMM (3 matmul_apply_sgd, no
 * apply_sgd and no weight gradient of its own), and the arena holds no
 * weight gradient (at least the 256 x 256 one's bytes fewer than without
 * the pass); the losses and weights stay within 1e-6 of the unfused
 * step's (relative to each tensor's largest value). */
FG_TEST(update_epilogue_mlp_training_close_and_smaller, "") {
  mlp_spec m;
  const char *target = NULL;
  fg_graph *g = wide_mlp(&m, &target);
  FG_REQUIRE(g && target);
  float loss[3][5];
  fg_tensor *vars[3][6];
  fg_plan_info *plan[3] = {NULL, NULL, NULL};
  const char *lists[3] = {NULL, NO_UPDATE_EPILOGUE, NULL};
  for (int k = 0; k < 3; k++) {
    const mlp_run r = {NULL, 2, k == 2, 5};
    test_pass_list = lists[k];
    mlp_train(g, &m, target, &r, loss[k], vars[k], &plan[k]);
    FG_REQUIRE(plan[k]);
  }
  test_pass_list = NULL;
  FG_CHECK_INT(mlp_count_step_op(plan[0], "matmul_apply_sgd"), 3);
  FG_CHECK_INT(
      mlp_count_step_op(plan[0], "apply_sgd") + mlp_count_step_op(plan[0], "matmul_bias_grad"), 0);
  FG_CHECK_INT(mlp_count_step_op(plan[1], "matmul_bias_grad"), 3);
  FG_CHECK_INT(mlp_count_step_op(plan[2], "apply_sgd"), 6);
  if (!(plan[0]->arena_bytes + 256 * 256 * 4 <= plan[1]->arena_bytes))
    FG_FAIL_AT("arena %zu with update_epilogue, %zu without", plan[0]->arena_bytes,
               plan[1]->arena_bytes);
  if (getenv("FG_TEST_VERBOSE"))
    fprintf(stderr, "losses %g %g %g %g %g\n", loss[0][0], loss[0][1], loss[0][2], loss[0][3],
            loss[0][4]);
  FG_CHECK(loss[0][4] < loss[0][0]); /* it trains */
  for (int i = 0; i < 5; i++)
    if (fabs(loss[0][i] - loss[2][i]) > 1e-6 * fabs(loss[2][i]))
      FG_FAIL_AT("loss %d: %.9g on, %.9g off", i, loss[0][i], loss[2][i]);
  for (int i = 0; i < 6; i++) {
    FG_REQUIRE(vars[0][i] && vars[2][i]);
    const double d = rel_diff(vars[0][i], vars[2][i]);
    if (getenv("FG_TEST_VERBOSE")) fprintf(stderr, "variable %d: %.3g\n", i, d);
    if (!(d <= 1e-6)) FG_FAIL_AT("variable %d: relative difference %.3g", i, d);
  }
  for (int k = 0; k < 3; k++) {
    mlp_free_tensors(vars[k], 6);
    fg_plan_info_free(plan[k]);
  }
  fg_graph_free(g);
}

/* matmul_apply_sgd built by hand: inputs that do not fit are refused when
 * the graph is built (shapes known) or run (a row count fed), with the
 * node's name, the input and the values. */
FG_TEST(matmul_apply_sgd_bad_inputs_refused, "badinput") {
  static const struct {
    fg_dtype var_dt, a_dt;
    int64_t a_rows, a_cols, z_rows, lr_rank;
    const char *msg;
  } cases[] = {
      {FG_F32, FG_F32, 8, 7, 8, 0, "must have input 0's (var) shape [6,5]"},
      {FG_F32, FG_F32, 8, 6, 9, 0, "input 3 (b) [9,5]"},
      {FG_F32, FG_F64, 8, 6, 8, 0, "input 1 (a) is f64"},
      {FG_F32, FG_F32, 8, 6, 8, 1, "lr"},
      {FG_I32, FG_I32, 8, 6, 8, 0, "input 0 (var) dtype i32 is not allowed"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    fg_graph *g = fg_graph_new();
    const int64_t wd[2] = {6, 5}, ad[2] = {cases[c].a_rows, cases[c].a_cols};
    const int64_t zd[2] = {cases[c].z_rows, 5}, ld[1] = {1};
    fg_tensor *w0 = fg_tensor_new(cases[c].var_dt, 2, wd, NULL);
    fg_output w = fg_variable(g, "w", w0);
    fg_tensor_free(w0);
    fg_output a = fg_placeholder(g, "a", cases[c].a_dt, 2, ad);
    fg_output dz = fg_placeholder(g, "dz", cases[c].var_dt, 2, zd);
    fg_output lr = fg_placeholder(g, "lr", FG_F32, (int)cases[c].lr_rank, ld);
    fg_op(g, "matmul_apply_sgd", "upd", (fg_output[]){w, a, lr, dz}, 4, NULL);
    fg_status *st = fg_status_new();
    FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), "'upd'");
    if (!strstr(fg_status_message(st), cases[c].msg))
      FG_FAIL_AT("case %zu: '%s' lacks '%s'", c, fg_status_message(st), cases[c].msg);
    fg_status_free(st);
    fg_graph_free(g);
  }
  /* Unknown rows, fed 8 and 7: the kernel refuses the run. */
  fg_graph *g = fg_graph_new();
  const int64_t wd[2] = {6, 5}, ad[2] = {-1, 6}, zd[2] = {-1, 5}, af[2] = {8, 6}, zf[2] = {7, 5};
  fg_tensor *w0 = fg_tensor_new(FG_F32, 2, wd, NULL);
  fg_output w = fg_variable(g, "w", w0);
  fg_output a = fg_placeholder(g, "a", FG_F32, 2, ad), dz = fg_placeholder(g, "dz", FG_F32, 2, zd);
  fg_op(g, "matmul_apply_sgd", "upd", (fg_output[]){w, a, fg_scalar(g, FG_F32, 0.1), dz}, 4, NULL);
  fg_status *st = fg_status_new();
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  fg_tensor *at_ = fg_tensor_new(FG_F32, 2, af, NULL), *zt = fg_tensor_new(FG_F32, 2, zf, NULL);
  fg_feed feeds[2] = {{"a", at_}, {"dz", zt}};
  const char *target = "upd";
  FG_CHECK(fg_session_run(s, feeds, 2, NULL, 0, NULL, &target, 1, st) != 0);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'upd'");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "input 1 (a) [8,6] and input 3 (b) [7,5]");
  /* w is untouched. */
  fg_tensor *wv = fg_session_variable(s, "w", st);
  FG_REQUIRE(wv);
  FG_CHECK(memcmp(fg_tensor_data(wv), fg_tensor_data(w0), fg_tensor_num_bytes(w0)) == 0);
  fg_tensor_free(wv), fg_tensor_free(w0), fg_tensor_free(at_), fg_tensor_free(zt);
  fg_session_free(s);
  fg_status_free(st);
  fg_graph_free(g);
}

/* On a GPU, matmul_apply_sgd is one cuBLAS GEMM with alpha -lr and beta 1
 * read from the device: the crafted updates within the bound of the
 * reference (f32 and f64, short and long sums), and the MLP's steps
 * within f32 rounding of the CPU's unfused ones. Skips visibly without a
 * CUDA build or a device (fails with FG_REQUIRE_GPU=1). */
FG_TEST(gpu_update_epilogue_vs_reference_and_cpu, "gpu") {
  if (fg_cuda_device_count() < 1) FG_SKIP_NO_GPU("no CUDA build or no CUDA device");
  const up_opts cases[3] = {{FG_F32, 8, 6, 5, 0, 0, 0, 0, 0},
                            {FG_F32, 1000, 40, 24, 0, 0, 0, 0, 0},
                            {FG_F64, 1000, 40, 24, 0, 0, 0, 0, 0}};
  run_device = "cuda:0";
  for (int k = 0; k < 3; k++) {
    fg_tensor *w = NULL;
    FG_REQUIRE(run_updates(&cases[k], 0, 1, 2, NULL, 0, NULL, &w) == 0);
    if (!close_to_reference(&cases[k], w, 2)) FG_FAIL_AT("case %d: off the reference", k);
    fg_tensor_free(w);
  }
  run_device = NULL;
  mlp_spec m;
  const char *target = NULL;
  fg_graph *g = wide_mlp(&m, &target);
  FG_REQUIRE(g && target);
  float loss[2][5];
  fg_tensor *vars[2][6];
  fg_plan_info *plan = NULL;
  const mlp_run gpu = {"cuda:0", 1, 0, 5}, cpu = {NULL, 2, 1, 5};
  mlp_train(g, &m, target, &gpu, loss[0], vars[0], &plan);
  mlp_train(g, &m, target, &cpu, loss[1], vars[1], NULL);
  FG_CHECK_INT(mlp_count_step_op(plan, "matmul_apply_sgd"), 3);
  for (int i = 0; i < 5; i++)
    FG_CHECK(fabsf(loss[0][i] - loss[1][i]) <= 1e-5f * (1 + fabsf(loss[1][i])));
  for (int i = 0; i < 6; i++) {
    FG_REQUIRE(vars[0][i] && vars[1][i]);
    const double d = rel_diff(vars[0][i], vars[1][i]);
    if (!(d <= 1e-5)) FG_FAIL_AT("variable %d: GPU and CPU differ by %.3g", i, d);
  }
  mlp_free_tensors(vars[0], 6), mlp_free_tensors(vars[1], 6);
  fg_plan_info_free(plan);
  fg_graph_free(g);
}
