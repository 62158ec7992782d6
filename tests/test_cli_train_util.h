/* Shared by tests/tools/test_cli_train*.c and the MPI training tests in
 * tests/dist/ (so it sits at the tests/ root): small models for `flowgraph
 * grad` and `flowgraph train`, their data, plain-C references (gradients by
 * hand, SGD in double) and parsers for train's epoch lines. Builds on
 * test_cli_harness.h (running the binary, temp dirs, .npy helpers). */
#ifndef FG_TEST_CLI_TRAIN_UTIL_H
#define FG_TEST_CLI_TRAIN_UTIL_H

#include "flowgraph/autodiff.h"
#include "flowgraph/session.h"
#include "test_cli_harness.h"

/* ---- the gradient model ------------------------------------------------------- */

/* x [?,3] placeholder, W [3,2] and b [2] variables, u [2] an unused variable,
 * y = x W + b, loss = sum(y * y), n = cast(sum(x), i32) (an integer). */
static const float GW[3][2] = {{0.5f, -1.0f}, {0.25f, 0.75f}, {-0.5f, 1.5f}};
static const float GB[2] = {0.1f, -0.3f};
static const float GX[2][3] = {{1.0f, 2.0f, -1.0f}, {0.5f, -1.5f, 2.0f}};

static inline int build_grad_model(const char *path, int json) {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {FG_DIM_UNKNOWN, 3}, wd[2] = {3, 2}, bd[1] = {2};
  float zero[2] = {0, 0};
  fg_tensor *w = tensor_f32(2, wd, &GW[0][0]), *b = tensor_f32(1, bd, GB);
  fg_tensor *u = tensor_f32(1, bd, zero);
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output vw = fg_variable(g, "W", w), vb = fg_variable(g, "b", b);
  fg_variable(g, "u", u);
  fg_output y = fg_set_name(g, fg_add(g, fg_matmul(g, x, vw, 0, 0), vb), "y");
  fg_set_name(g, fg_reduce_sum(g, fg_mul(g, y, y), NULL, 0, 0), "loss");
  fg_set_name(g, fg_cast(g, fg_reduce_sum(g, x, NULL, 0, 0), FG_I32), "n");
  fg_status *st = fg_status_new();
  int rc = -1;
  if (fg_graph_status(g, st) == FG_OK)
    rc = json ? fg_graph_save_json(g, path, st) : fg_graph_save(g, path, st);
  if (rc != 0) fprintf(stderr, "build_grad_model: %s\n", fg_status_message(st));
  fg_status_free(st);
  fg_tensor_free(w);
  fg_tensor_free(b);
  fg_tensor_free(u);
  fg_graph_free(g);
  return rc;
}

/* By hand: dloss/dy = 2y, dW = x^T (2y), db = sum over rows of 2y. */
static inline void grad_model_reference(double dw[3][2], double db[2]) {
  memset(dw, 0, 6 * sizeof(double));
  memset(db, 0, 2 * sizeof(double));
  for (int r = 0; r < 2; r++)
    for (int j = 0; j < 2; j++) {
      double y = GB[j];
      for (int k = 0; k < 3; k++)
        y += (double)GX[r][k] * GW[k][j];
      for (int k = 0; k < 3; k++)
        dw[k][j] += GX[r][k] * 2 * y;
      db[j] += 2 * y;
    }
}

/* ---- the linear regression model ---------------------------------------------- */

/* pred = x w + b with x [?,2], w [2,1], b [1]; y [?,1];
 * loss = mean((pred - y)^2), mae = mean(|pred - y|), trained by
 * fg_minimize with SGD at learning rate `lr` (the metadata names the
 * target and the loss). */
#define LIN_ROWS 40
#define LIN_W0   0.25
#define LIN_W1   -0.5
#define LIN_B    0.0

/* The model's graph, with its step; `sum`: the loss is the sum of squared
 * errors over rows, not their mean; `batch`: the placeholders' leading
 * dimension (FG_DIM_UNKNOWN, or a fixed batch size). *loss and *target
 * (when non-NULL) get the loss and fg_minimize's target; NULL when building
 * failed (the message is printed). */
static inline fg_graph *linreg_graph(double lr, int sum, int64_t batch, fg_output *loss_out,
                                     fg_output *target_out) {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {batch, 2}, yd[2] = {batch, 1}, wd[2] = {2, 1}, bd[1] = {1};
  float w0[2] = {(float)LIN_W0, (float)LIN_W1}, b0[1] = {(float)LIN_B};
  fg_tensor *w = tensor_f32(2, wd, w0), *b = tensor_f32(1, bd, b0);
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output y = fg_placeholder(g, "y", FG_F32, 2, yd);
  fg_output pred = fg_add(g, fg_matmul(g, x, fg_variable(g, "w", w), 0, 0), fg_variable(g, "b", b));
  fg_output d = fg_sub(g, fg_set_name(g, pred, "pred"), y);
  fg_output sq = fg_mul(g, d, d);
  fg_output loss = fg_set_name(
      g, sum ? fg_reduce_sum(g, sq, NULL, 0, 0) : fg_reduce_mean(g, sq, NULL, 0, 0), "loss");
  fg_set_name(g, fg_reduce_mean(g, fg_abs(g, d), NULL, 0, 0), "mae");
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
  cfg.learning_rate = lr;
  fg_status *st = fg_status_new();
  fg_output t = fg_minimize(g, loss, NULL, 0, &cfg, st);
  if (t.node < 0 || fg_graph_status(g, st) != FG_OK) {
    fprintf(stderr, "build_linreg: %s\n", fg_status_message(st));
    fg_graph_free(g);
    g = NULL;
  }
  if (loss_out) *loss_out = loss;
  if (target_out) *target_out = t;
  fg_status_free(st);
  fg_tensor_free(w);
  fg_tensor_free(b);
  return g;
}

/* Saves `g` (as JSON when `json`); 0 on success, the message printed else. */
static inline int save_graph(fg_graph *g, const char *path, int json) {
  fg_status *st = fg_status_new();
  int rc = json ? fg_graph_save_json(g, path, st) : fg_graph_save(g, path, st);
  if (rc != 0) fprintf(stderr, "save %s: %s\n", path, fg_status_message(st));
  fg_status_free(st);
  return rc;
}

static inline int build_linreg_loss(const char *path, int json, double lr, int sum) {
  fg_graph *g = linreg_graph(lr, sum, FG_DIM_UNKNOWN, NULL, NULL);
  int rc = g ? save_graph(g, path, json) : -1;
  fg_graph_free(g);
  return rc;
}

static inline int build_linreg(const char *path, int json, double lr) {
  return build_linreg_loss(path, json, lr, 0);
}

/* Data: y = 2 x0 - 3 x1 + 0.5 exactly, on a fixed grid. */
static inline void linreg_data(int rows, float (*x)[2], float *y) {
  for (int i = 0; i < rows; i++) {
    x[i][0] = (float)((i % 7) - 3) / 3.0f;
    x[i][1] = (float)(((i * 5) % 11) - 5) / 5.0f;
    y[i] = 2.0f * x[i][0] - 3.0f * x[i][1] + 0.5f;
  }
}

/* Writes x.npy and y.npy (rows each, y_rows for y) into the temp dir. */
static inline int write_linreg_data(const char *xname, const char *yname, int rows, int y_rows) {
  float x[64][2], y[64];
  if (rows > 64 || y_rows > 64) return -1;
  linreg_data(rows > y_rows ? rows : y_rows, x, y);
  int64_t xd[2] = {rows, 2}, yd[2] = {y_rows, 1};
  if (write_npy_f32(tpath(xname), 2, xd, &x[0][0]) != 0) return -1;
  return write_npy_f32(tpath(yname), 2, yd, y);
}

typedef struct linp {
  double w[2], b;
} linp;

/* One SGD step of the model above on rows idx[0..n), in double: returns the
 * batch loss (before the update) and updates p. */
static inline double lin_step_loss(linp *p, const float (*x)[2], const float *y, const int64_t *idx,
                                   int n, double lr, int sum) {
  double loss = 0, gw0 = 0, gw1 = 0, gb = 0;
  for (int k = 0; k < n; k++) {
    int64_t i = idx[k];
    double d = p->w[0] * x[i][0] + p->w[1] * x[i][1] + p->b - y[i];
    loss += d * d;
    gw0 += 2 * d * x[i][0];
    gw1 += 2 * d * x[i][1];
    gb += 2 * d;
  }
  double per = sum ? 1.0 : (double)n; /* a summed loss is not divided */
  p->w[0] -= lr * gw0 / per;
  p->w[1] -= lr * gw1 / per;
  p->b -= lr * gb / per;
  return loss / per;
}

/* One SGD step of the mean-loss model on rows idx[0..n); returns the loss. */
static inline double lin_step(linp *p, const float (*x)[2], const float *y, const int64_t *idx,
                              int n, double lr) {
  return lin_step_loss(p, x, y, idx, n, lr, 0);
}

static inline double lin_mae(const linp *p, const float (*x)[2], const float *y, int rows) {
  double s = 0;
  for (int i = 0; i < rows; i++)
    s += fabs(p->w[0] * x[i][0] + p->w[1] * x[i][1] + p->b - y[i]);
  return s / rows;
}

/* The shuffle `flowgraph train --help` documents: splitmix64 seeded with
 * SEED; per epoch, Fisher-Yates over 0..n-1 from the top, j = next mod (i+1). */
static inline uint64_t ref_splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static inline void ref_shuffle(int64_t *perm, int64_t n, uint64_t *rng) {
  for (int64_t i = 0; i < n; i++)
    perm[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)(ref_splitmix64(rng) % (uint64_t)(i + 1));
    int64_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

/* SGD over `epochs` epochs of LIN_ROWS rows in batches (shuffled when
 * `shuffle`), from the model's initial values, of the mean loss or (`sum`)
 * the summed one; epoch_loss[e] is the mean of the batch losses weighted by
 * batch size. */
static inline void lin_train_reference_loss(int batch, int epochs, int shuffle, uint64_t seed,
                                            double lr, int sum, linp *p, double *epoch_loss) {
  float x[LIN_ROWS][2], y[LIN_ROWS];
  linreg_data(LIN_ROWS, x, y);
  *p = (linp){{LIN_W0, LIN_W1}, LIN_B};
  int64_t perm[LIN_ROWS];
  for (int i = 0; i < LIN_ROWS; i++)
    perm[i] = i;
  uint64_t rng = seed;
  for (int e = 0; e < epochs; e++) {
    if (shuffle) ref_shuffle(perm, LIN_ROWS, &rng);
    double total = 0;
    for (int s = 0; s < LIN_ROWS; s += batch) {
      int n = LIN_ROWS - s < batch ? LIN_ROWS - s : batch;
      total += lin_step_loss(p, (const float(*)[2])x, y, perm + s, n, lr, sum) * n;
    }
    epoch_loss[e] = total / LIN_ROWS;
  }
}

static inline void lin_train_reference(int batch, int epochs, int shuffle, uint64_t seed, double lr,
                                       linp *p, double *epoch_loss) {
  lin_train_reference_loss(batch, epochs, shuffle, seed, lr, 0, p, epoch_loss);
}

/* Current value of variable `name` in the graph saved at `path`, via a new
 * session (so the saved initial value). Returns the number of floats read. */
static inline int is_json_path(const char *path) {
  size_t n = strlen(path);
  return n > 5 && strcmp(path + n - 5, ".json") == 0;
}

static inline int saved_variable(const char *path, const char *name, float *out, int max) {
  fg_status *st = fg_status_new();
  fg_graph *g = is_json_path(path) ? fg_graph_load_json(path, st) : fg_graph_load(path, st);
  fg_session *s = g ? fg_session_new(g, NULL, st) : NULL;
  fg_tensor *t = s ? fg_session_variable(s, name, st) : NULL;
  int n = -1;
  if (t && fg_tensor_dtype(t) == FG_F32 && fg_tensor_num_elements(t) <= max) {
    n = (int)fg_tensor_num_elements(t);
    memcpy(out, fg_tensor_data(t), (size_t)n * sizeof(float));
  } else {
    fprintf(stderr, "saved_variable %s %s: %s\n", path, name, fg_status_message(st));
  }
  fg_tensor_free(t);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
  return n;
}

/* The w and b saved in `path` are `p`'s, within `tol`. */
static inline void check_saved_linp(const char *path, const linp *p, double tol) {
  float w[2], b[1];
  FG_CHECK_INT(saved_variable(path, "w", w, 2), 2);
  FG_CHECK_INT(saved_variable(path, "b", b, 1), 1);
  FG_CHECK_NEAR(w[0], p->w[0], tol);
  FG_CHECK_NEAR(w[1], p->w[1], tol);
  FG_CHECK_NEAR(b[0], p->b, tol);
}

/* ---- the digits classifier (examples/digits) ------------------------------------ */

#define DIGITS_DATA        FG_SOURCE_DIR "/examples/digits/data"
#define DIGITS_BUILDER     FG_BUILD_DIR "/examples/example_digits_build_mlp"
#define DIGITS_CNN_BUILDER FG_BUILD_DIR "/examples/example_digits_build_cnn"

/* Runs an example's builder, writing the model to `out`; its exit status. */
static inline int run_builder_at(const char *builder, const char *out) {
  const char *argv[] = {builder, out, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int rc = posix_spawn(&pid, builder, &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    fprintf(stderr, "posix_spawn %s: %s\n", builder, strerror(rc));
    return -1;
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* `flowgraph run MODEL --fetch accuracy` on the digits' test set: the
 * accuracy it prints, or -1 when the run fails. */
static inline double digits_accuracy(const char *model) {
  cli_result r;
  double acc[1] = {-1};
  if (cli(&r, "run", model, "-i", "x=" DIGITS_DATA "/test_x.npy", "-i",
          "y=" DIGITS_DATA "/test_y.npy", "--fetch", "accuracy", NULL) != 0)
    return -1;
  CHECK_OK(r);
  FG_CHECK_INT(parse_printed(r.out, "accuracy", acc, 1), 1);
  result_free(&r);
  return acc[0];
}

/* The MLP's builder (build_mlp.c). */
static inline int run_builder(const char *out) { return run_builder_at(DIGITS_BUILDER, out); }

/* ---- reading train's output ----------------------------------------------------- */

/* The losses of the "epoch E/N  loss L ..." lines, in order; when `eval` is
 * given, that eval's value on each line goes to evals[]. Returns the count. */
static inline int parse_epochs(const char *out, double *losses, int max, const char *eval,
                               double *evals) {
  int n = 0;
  for (const char *p = out; p && *p && n < max;) {
    if (strncmp(p, "epoch ", 6) == 0) {
      const char *l = strstr(p, "  loss ");
      const char *eol = strchr(p, '\n');
      if (!l || (eol && l > eol)) return -1;
      losses[n] = strtod(l + 7, NULL);
      if (eval) {
        char key[128];
        snprintf(key, sizeof key, "  %s ", eval);
        const char *v = strstr(l + 7, key);
        if (!v || (eol && v > eol)) return -1;
        evals[n] = strtod(v + strlen(key), NULL);
      }
      n++;
    }
    p = strchr(p, '\n');
    if (p) p++;
  }
  return n;
}

#endif
