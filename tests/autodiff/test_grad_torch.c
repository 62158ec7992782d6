/* Gradients of small multi-op graphs against PyTorch (issue 3, "Gradient
 * checks"): an MLP with cross-entropy, a softmax-attention block, an
 * embedding mean, and the MLP with an unknown batch dimension.
 *
 * Each case builds its graph with the C API on fixed inputs from a seeded
 * PRNG, asks fg_gradients for the gradient of the scalar loss with respect to
 * every float input and weight, and runs it. The inputs go to .npy files in a
 * temp dir; tests/torch_ref/<case>.py rebuilds the same computation in torch
 * (float64) and writes the loss and reference gradients, which are compared
 * element by element with
 *   err = |a - b| / max(|a|, |b|, floor)
 * f64 cases: floor 1e-6, err < 1e-9 (the two sides differ only in summation
 * order, ~1e-16 relative per op). f32 cases: flowgraph computes in f32 but
 * the reference is the exact float64 gradient of the same f32 numbers, so
 * the floor is relative to the tensor's scale (0.1 * max|b|: an element far
 * below the scale carries the absolute rounding error of its larger terms)
 * and err < 1e-5.
 *
 * Without torch (FG_PYTHON cannot `import torch`) every case is skipped,
 * visibly (exit 77). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <flowgraph/autodiff.h>
#include <flowgraph/flowgraph.h>

#include "fgtest.h"

#ifndef FG_SOURCE_DIR
#define FG_SOURCE_DIR "."
#endif
#ifndef FG_PYTHON
#define FG_PYTHON "/usr/bin/python3"
#endif

extern char **environ;

#define GT_MAX        12
#define GT_TIMEOUT_S  120
#define TOL_F64       1e-9
#define FLOOR_F64     1e-6
#define TOL_F32       1e-5
#define FLOOR_F32_REL 1e-1

/* ---- child processes ---------------------------------------------------- */

/* Runs argv (argv[0] a path) with stdout and stderr appended to `log`;
 * returns the exit code, or -1 when it could not run, died or hung. */
static int gt_spawn(const char *const *argv, const char *log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  for (int waited_ms = 0;; waited_ms += 10) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) return -1;
    if (waited_ms > GT_TIMEOUT_S * 1000) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      fprintf(stderr, "%s timed out after %d s\n", argv[0], GT_TIMEOUT_S);
      return -1;
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void gt_print_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f))
    fputs(line, stderr);
  fclose(f);
}

/* 1 when FG_PYTHON finds torch and NumPy; else 0 with the reason in `why`.
 * Found, not imported: importing torch takes seconds, and a reference
 * reused by tests/cached_run.py does not import it at all. */
static int gt_torch_available(char *why, size_t n) {
  if (access(FG_PYTHON, X_OK) != 0) {
    snprintf(why, n, "%s not found", FG_PYTHON);
    return 0;
  }
  const char *argv[] = {FG_PYTHON, "-B", "-c",
                        "import sys, importlib.util as u; "
                        "sys.exit(not (u.find_spec('numpy') and u.find_spec('torch')))",
                        NULL};
  int rc = gt_spawn(argv, "/dev/null");
  if (rc != 0) {
    snprintf(why, n, "%s finds no module numpy or torch (exit %d)", FG_PYTHON, rc);
    return 0;
  }
  return 1;
}

#define GT_REQUIRE_TORCH()                                                                         \
  do {                                                                                             \
    char gt_why[256];                                                                              \
    if (!gt_torch_available(gt_why, sizeof gt_why))                                                \
      FG_SKIP("python3-torch not installed: %s", gt_why);                                          \
  } while (0)

/* ---- a case: inputs, graph, gradients ----------------------------------- */

typedef enum gt_kind { GT_FEED, GT_VAR } gt_kind;

typedef struct gt_in {
  char name[32];
  fg_tensor *value; /* owned; what is fed (GT_FEED) and written to .npy */
  gt_kind kind;
  fg_output out;
  fg_output grad; /* node < 0: not differentiated (integer input) */
} gt_in;

typedef struct gt_case {
  fg_graph *g;
  fg_status *st;
  fg_session *sess;
  gt_in in[GT_MAX];
  int n;
  fg_output loss;
  uint64_t rng;
  char dir[64];
  int failed; /* keeps the temp dir for a look */
} gt_case;

static int gt_init(gt_case *c, uint64_t seed) {
  memset(c, 0, sizeof *c);
  c->g = fg_graph_new();
  c->st = fg_status_new();
  c->rng = seed;
  return c->g && c->st && fgt_mkdtemp(c->dir, sizeof c->dir, "fg_grad_torch") != NULL;
}

static void gt_free(gt_case *c) {
  for (int i = 0; i < c->n; i++)
    fg_tensor_free(c->in[i].value);
  fg_session_free(c->sess);
  fg_graph_free(c->g);
  fg_status_free(c->st);
  if (c->failed || fgt_failures)
    fprintf(stderr, "inputs and torch references kept in %s\n", c->dir);
  else if (c->dir[0])
    fgt_rmtree(c->dir);
}

/* splitmix64: fixed values on every platform. */
static uint64_t gt_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [-scale, scale), stored as `dt` (f32 values are rounded once,
 * and the .npy holds exactly what flowgraph sees). */
static fg_tensor *gt_rand(gt_case *c, fg_dtype dt, int rank, const int64_t *dims, double scale) {
  fg_tensor *t = fg_tensor_new(dt, rank, dims, c->st);
  if (!t) return NULL;
  int64_t m = fg_tensor_num_elements(t);
  for (int64_t k = 0; k < m; k++) {
    double u = (double)(gt_next(&c->rng) >> 11) / 9007199254740992.0;
    double v = scale * (2 * u - 1);
    if (dt == FG_F32)
      ((float *)fg_tensor_data(t))[k] = (float)v;
    else
      ((double *)fg_tensor_data(t))[k] = v;
  }
  return t;
}

/* Integers: `vals` when given, else uniform in [0, classes). */
static fg_tensor *gt_ints(gt_case *c, fg_dtype dt, int rank, const int64_t *dims,
                          const int64_t *vals, int64_t classes) {
  fg_tensor *t = fg_tensor_new(dt, rank, dims, c->st);
  if (!t) return NULL;
  int64_t m = fg_tensor_num_elements(t);
  for (int64_t k = 0; k < m; k++) {
    int64_t v = vals ? vals[k] : (int64_t)(gt_next(&c->rng) % (uint64_t)classes);
    if (dt == FG_I32)
      ((int32_t *)fg_tensor_data(t))[k] = (int32_t)v;
    else
      ((int64_t *)fg_tensor_data(t))[k] = v;
  }
  return t;
}

/* Adds an input the case owns from now on. A placeholder with
 * `unknown_batch` is declared with a leading FG_DIM_UNKNOWN. */
static fg_output gt_add(gt_case *c, const char *name, fg_tensor *t, gt_kind kind,
                        int unknown_batch) {
  if (!t || c->n >= GT_MAX) {
    fg_tensor_free(t);
    return FG_NO_OUTPUT;
  }
  gt_in *in = &c->in[c->n++];
  snprintf(in->name, sizeof in->name, "%s", name);
  in->value = t;
  in->kind = kind;
  in->grad = FG_NO_OUTPUT;
  if (kind == GT_VAR) {
    in->out = fg_variable(c->g, name, t);
  } else {
    int64_t dims[FG_MAX_RANK];
    int rank = fg_tensor_rank(t);
    memcpy(dims, fg_tensor_dims(t), (size_t)rank * sizeof dims[0]);
    if (unknown_batch) dims[0] = FG_DIM_UNKNOWN;
    in->out = fg_placeholder(c->g, name, fg_tensor_dtype(t), rank, dims);
  }
  return in->out;
}

/* Replaces the fed value of placeholder `name` (a new batch). */
static void gt_set(gt_case *c, const char *name, fg_tensor *t) {
  for (int i = 0; i < c->n; i++)
    if (strcmp(c->in[i].name, name) == 0) {
      fg_tensor_free(c->in[i].value);
      c->in[i].value = t;
      return;
    }
  fg_tensor_free(t);
}

/* Gradients of the loss with respect to every float input, then a session. */
static int gt_differentiate(gt_case *c) {
  if (fg_graph_status(c->g, c->st) != FG_OK) {
    fprintf(stderr, "building the forward graph failed: %s\n", fg_status_message(c->st));
    return -1;
  }
  fg_output xs[GT_MAX], dxs[GT_MAX];
  int idx[GT_MAX], nx = 0;
  for (int i = 0; i < c->n; i++)
    if (fg_dtype_is_float(fg_tensor_dtype(c->in[i].value))) idx[nx] = i, xs[nx++] = c->in[i].out;
  if (fg_gradients(c->g, &c->loss, 1, xs, nx, NULL, dxs, c->st) != 0) {
    fprintf(stderr, "fg_gradients failed: %s: %s\n", fg_code_name(fg_status_code(c->st)),
            fg_status_message(c->st));
    return -1;
  }
  for (int j = 0; j < nx; j++)
    c->in[idx[j]].grad = dxs[j];
  c->sess = fg_session_new(c->g, NULL, c->st);
  if (!c->sess) {
    fprintf(stderr, "fg_session_new failed: %s\n", fg_status_message(c->st));
    return -1;
  }
  return 0;
}

static void gt_fetch_name(const gt_case *c, fg_output o, char *buf, size_t n) {
  const char *name = fg_node_name(c->g, o.node);
  snprintf(buf, n, "%s:%d", name ? name : "?", o.index);
}

static double gt_to_double(const fg_tensor *t, int64_t k) {
  return fg_tensor_dtype(t) == FG_F32 ? ((const float *)fg_tensor_data(t))[k]
                                      : ((const double *)fg_tensor_data(t))[k];
}

/* Compares flowgraph's `got` with torch's float64 `want` (see the header
 * comment for the error measure); fails the case above `tol`. */
static void gt_compare(gt_case *c, const char *what, const fg_tensor *got, const fg_tensor *want,
                       double tol) {
  int rank = fg_tensor_rank(got);
  int same = rank == fg_tensor_rank(want);
  for (int i = 0; same && i < rank; i++)
    same = fg_tensor_dim(got, i) == fg_tensor_dim(want, i);
  if (!same || fg_tensor_dtype(want) != FG_F64) {
    FG_FAIL_AT("%s: flowgraph shape/dtype differs from torch's (rank %d vs %d, dim0 %lld vs %lld)",
               what, rank, fg_tensor_rank(want), (long long)fg_tensor_dim(got, 0),
               (long long)fg_tensor_dim(want, 0));
    c->failed = 1;
    return;
  }
  int64_t m = fg_tensor_num_elements(want);
  double floor = FLOOR_F64;
  if (fg_tensor_dtype(got) == FG_F32) {
    double scale = 0;
    for (int64_t k = 0; k < m; k++)
      scale = fmax(scale, fabs(gt_to_double(want, k)));
    floor = fmax(FLOOR_F32_REL * scale, FLOOR_F64);
  }
  double worst = 0;
  int64_t at = 0;
  for (int64_t k = 0; k < m; k++) {
    double a = gt_to_double(got, k), b = gt_to_double(want, k);
    double err = fabs(a - b) / fmax(fmax(fabs(a), fabs(b)), floor);
    if (isnan(err)) err = INFINITY;
    if (err > worst) worst = err, at = k;
  }
  printf("  %-10s %6lld elements, max rel err %.3g\n", what, (long long)m, worst);
  if (!(worst < tol)) {
    FG_FAIL_AT("%s: element %lld: flowgraph %.17g, torch %.17g (rel err %.3g, tol %g)", what,
               (long long)at, gt_to_double(got, at), gt_to_double(want, at), worst, tol);
    c->failed = 1;
  }
}

static fg_tensor *gt_read(const char *dir, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s.npy", dir, name);
  fg_status *st = fg_status_new();
  fg_tensor *t = fg_npy_read(path, st);
  if (!t) fprintf(stderr, "reading %s: %s\n", path, fg_status_message(st));
  fg_status_free(st);
  return t;
}

/* One run: feeds the current values, writes them to <dir>/<sub>/, asks
 * torch for the reference and compares the loss and every gradient. */
static void gt_check(gt_case *c, const char *sub, const char *script, const char *arg, double tol) {
  char dir[256], path[512], log[512];
  snprintf(dir, sizeof dir, "%s/%s", c->dir, sub);
  if (mkdir(dir, 0755) != 0) {
    FG_FAIL_AT("mkdir %s: %s", dir, strerror(errno));
    return;
  }
  fg_feed feeds[GT_MAX];
  int nf = 0;
  char names[GT_MAX + 1][96];
  const char *fetch[GT_MAX + 1];
  int fetch_of[GT_MAX + 1], nfetch = 0;
  gt_fetch_name(c, c->loss, names[0], sizeof names[0]);
  fetch[nfetch] = names[0];
  fetch_of[nfetch++] = -1;
  for (int i = 0; i < c->n; i++) {
    gt_in *in = &c->in[i];
    snprintf(path, sizeof path, "%s/%s.npy", dir, in->name);
    if (fg_npy_write(path, in->value, c->st) != 0) {
      FG_FAIL_AT("writing %s: %s", path, fg_status_message(c->st));
      return;
    }
    if (in->kind == GT_FEED) feeds[nf++] = (fg_feed){in->name, in->value};
    if (in->grad.node >= 0) {
      gt_fetch_name(c, in->grad, names[nfetch], sizeof names[nfetch]);
      fetch[nfetch] = names[nfetch];
      fetch_of[nfetch++] = i;
    }
  }
  fg_tensor *out[GT_MAX + 1] = {0};
  if (fg_session_run(c->sess, feeds, nf, fetch, nfetch, out, NULL, 0, c->st) != 0) {
    FG_FAIL_AT("fg_session_run (%s): %s: %s", sub, fg_code_name(fg_status_code(c->st)),
               fg_status_message(c->st));
    c->failed = 1;
    return;
  }
  char script_path[512];
  snprintf(script_path, sizeof script_path, "%s/tests/torch_ref/%s", FG_SOURCE_DIR, script);
  snprintf(log, sizeof log, "%s/torch.log", dir);
  const char *argv[] = {FG_PYTHON, "-B", FGT_CACHED_RUN, FGT_PY_CACHE, dir, script_path, dir,
                        arg,       NULL};
  int rc = gt_spawn(argv, log);
  if (rc != 0) {
    FG_FAIL_AT("%s %s %s exited with %d; its output:", script_path, dir, arg ? arg : "", rc);
    gt_print_file(log);
    c->failed = 1;
  } else {
    printf("%s (%s):\n", script, sub);
    for (int j = 0; j < nfetch; j++) {
      char ref_name[48], what[48];
      if (fetch_of[j] < 0) {
        snprintf(ref_name, sizeof ref_name, "loss");
        snprintf(what, sizeof what, "loss");
      } else {
        snprintf(ref_name, sizeof ref_name, "grad_%s", c->in[fetch_of[j]].name);
        snprintf(what, sizeof what, "d%s", c->in[fetch_of[j]].name);
      }
      fg_tensor *ref = gt_read(dir, ref_name);
      if (!ref) {
        FG_FAIL_AT("torch wrote no %s", ref_name);
        c->failed = 1;
      } else {
        gt_compare(c, what, out[j], ref, tol);
      }
      fg_tensor_free(ref);
    }
  }
  for (int j = 0; j < nfetch; j++)
    fg_tensor_free(out[j]);
}

/* ---- the MLP ------------------------------------------------------------ */

typedef struct mlp_opts {
  fg_dtype dt, label_dt;
  const char *act; /* "relu" or "tanh" */
  int unknown_batch;
  double tol;
} mlp_opts;

static fg_tensor *mlp_x(gt_case *c, fg_dtype dt, int64_t batch) {
  return gt_rand(c, dt, 2, (int64_t[]){batch, 8}, 1.0);
}

static fg_tensor *mlp_labels(gt_case *c, fg_dtype dt, int64_t batch) {
  return gt_ints(c, dt, 1, (int64_t[]){batch}, NULL, 5);
}

/* loss = CE(act(x W1 + b1) W2 + b2, labels), x [B,8], W1 [8,16], W2 [16,5];
 * weights are variables, x and labels placeholders. */
static void mlp_case(const mlp_opts *o, uint64_t seed) {
  GT_REQUIRE_TORCH();
  gt_case c;
  FG_REQUIRE(gt_init(&c, seed));
  fg_graph *g = c.g;
  fg_dtype dt = o->dt;
  int64_t batch = o->unknown_batch ? 5 : 4;
  fg_output x = gt_add(&c, "x", mlp_x(&c, dt, batch), GT_FEED, o->unknown_batch);
  fg_output w1 = gt_add(&c, "w1", gt_rand(&c, dt, 2, (int64_t[]){8, 16}, 0.6), GT_VAR, 0);
  fg_output b1 = gt_add(&c, "b1", gt_rand(&c, dt, 1, (int64_t[]){16}, 0.3), GT_VAR, 0);
  fg_output w2 = gt_add(&c, "w2", gt_rand(&c, dt, 2, (int64_t[]){16, 5}, 0.6), GT_VAR, 0);
  fg_output b2 = gt_add(&c, "b2", gt_rand(&c, dt, 1, (int64_t[]){5}, 0.3), GT_VAR, 0);
  fg_output labels =
      gt_add(&c, "labels", mlp_labels(&c, o->label_dt, batch), GT_FEED, o->unknown_batch);
  fg_output pre = fg_add(g, fg_matmul(g, x, w1, 0, 0), b1);
  fg_output h = strcmp(o->act, "relu") == 0 ? fg_relu(g, pre) : fg_tanh(g, pre);
  fg_output logits = fg_add(g, fg_matmul(g, h, w2, 0, 0), b2);
  c.loss = fg_softmax_cross_entropy(g, logits, labels);
  if (gt_differentiate(&c) == 0) {
    if (!o->unknown_batch) {
      gt_check(&c, "b4", "mlp.py", o->act, o->tol);
    } else {
      gt_check(&c, "b5", "mlp.py", o->act, o->tol);
      /* Another batch size through the same graph and session: nothing about
       * the first one may have been baked into the gradient nodes. */
      gt_set(&c, "x", mlp_x(&c, dt, 3));
      gt_set(&c, "labels", mlp_labels(&c, o->label_dt, 3));
      gt_check(&c, "b3", "mlp.py", o->act, o->tol);
    }
  } else {
    FG_FAIL_AT("could not build the gradient graph");
  }
  gt_free(&c);
}

FG_TEST(grad_torch_mlp_cross_entropy, "") {
  mlp_case(&(mlp_opts){FG_F64, FG_I64, "relu", 0, TOL_F64}, 11);
}

FG_TEST(grad_torch_mlp_tanh_cross_entropy, "") {
  mlp_case(&(mlp_opts){FG_F64, FG_I32, "tanh", 0, TOL_F64}, 12);
}

FG_TEST(grad_torch_mlp_cross_entropy_f32, "") {
  mlp_case(&(mlp_opts){FG_F32, FG_I32, "relu", 0, TOL_F32}, 13);
}

FG_TEST(grad_torch_mlp_tanh_cross_entropy_f32, "") {
  mlp_case(&(mlp_opts){FG_F32, FG_I64, "tanh", 0, TOL_F32}, 14);
}

FG_TEST(grad_torch_mlp_unknown_batch, "") {
  mlp_case(&(mlp_opts){FG_F64, FG_I64, "relu", 1, TOL_F64}, 15);
}

FG_TEST(grad_torch_mlp_unknown_batch_f32, "") {
  mlp_case(&(mlp_opts){FG_F32, FG_I32, "tanh", 1, TOL_F32}, 16);
}

/* ---- softmax attention -------------------------------------------------- */

/* x [2,4,8]; Q = x Wq, K = x Wk ([8,8]), V = x Wv ([8,6]), the weights
 * broadcast over the batch; P = softmax(Q K^T / sqrt(8)) on the last axis;
 * out = P V [2,4,6]; loss = sum(out * r) + mean(out * out). x is used three
 * times and out twice, so gradients from several consumers are summed. */
static void attention_case(fg_dtype dt, double tol, uint64_t seed) {
  GT_REQUIRE_TORCH();
  gt_case c;
  FG_REQUIRE(gt_init(&c, seed));
  fg_graph *g = c.g;
  fg_output x = gt_add(&c, "x", gt_rand(&c, dt, 3, (int64_t[]){2, 4, 8}, 1.0), GT_FEED, 0);
  fg_output wq = gt_add(&c, "wq", gt_rand(&c, dt, 2, (int64_t[]){8, 8}, 0.7), GT_VAR, 0);
  fg_output wk = gt_add(&c, "wk", gt_rand(&c, dt, 2, (int64_t[]){8, 8}, 0.7), GT_VAR, 0);
  fg_output wv = gt_add(&c, "wv", gt_rand(&c, dt, 2, (int64_t[]){8, 6}, 0.7), GT_VAR, 0);
  fg_output r = gt_add(&c, "r", gt_rand(&c, dt, 3, (int64_t[]){2, 4, 6}, 1.0), GT_FEED, 0);
  fg_output q = fg_matmul(g, x, wq, 0, 0);
  fg_output k = fg_matmul(g, x, wk, 0, 0);
  fg_output v = fg_matmul(g, x, wv, 0, 0);
  fg_output scores = fg_div(g, fg_matmul(g, q, k, 0, 1), fg_scalar(g, dt, sqrt(8.0)));
  fg_output out = fg_matmul(g, fg_softmax(g, scores, -1), v, 0, 0);
  fg_output l1 = fg_reduce_sum(g, fg_mul(g, out, r), NULL, 0, 0);
  fg_output l2 = fg_reduce_mean(g, fg_mul(g, out, out), NULL, 0, 0);
  c.loss = fg_add(g, l1, l2);
  if (gt_differentiate(&c) == 0)
    gt_check(&c, "b2", "attention.py", NULL, tol);
  else
    FG_FAIL_AT("could not build the gradient graph");
  gt_free(&c);
}

FG_TEST(grad_torch_attention, "") { attention_case(FG_F64, TOL_F64, 21); }

FG_TEST(grad_torch_attention_f32, "") { attention_case(FG_F32, TOL_F32, 22); }

/* ---- embedding mean ----------------------------------------------------- */

/* table [10,6]; idx [3,4] with repeats inside a row (3, 1, 5 three times)
 * and across rows (1), both ends (0, 9), and rows never picked (4, 6, 8:
 * their gradient is exactly zero); e = mean over axis 1 of table[idx];
 * loss = CE(e W + b, labels). */
static void embedding_case(fg_dtype idx_dt, uint64_t seed) {
  GT_REQUIRE_TORCH();
  gt_case c;
  FG_REQUIRE(gt_init(&c, seed));
  fg_graph *g = c.g;
  static const int64_t idx_vals[12] = {1, 3, 3, 7, 0, 9, 1, 1, 5, 5, 5, 2};
  static const int64_t label_vals[3] = {4, 0, 2};
  fg_output table = gt_add(&c, "table", gt_rand(&c, FG_F64, 2, (int64_t[]){10, 6}, 1.0), GT_VAR, 0);
  fg_output idx =
      gt_add(&c, "idx", gt_ints(&c, idx_dt, 2, (int64_t[]){3, 4}, idx_vals, 0), GT_FEED, 0);
  fg_output w = gt_add(&c, "w", gt_rand(&c, FG_F64, 2, (int64_t[]){6, 5}, 0.8), GT_VAR, 0);
  fg_output b = gt_add(&c, "b", gt_rand(&c, FG_F64, 1, (int64_t[]){5}, 0.3), GT_VAR, 0);
  fg_output labels =
      gt_add(&c, "labels", gt_ints(&c, FG_I64, 1, (int64_t[]){3}, label_vals, 0), GT_FEED, 0);
  fg_output e = fg_reduce_mean(g, fg_gather(g, table, idx), (int64_t[]){1}, 1, 0);
  c.loss = fg_softmax_cross_entropy(g, fg_add(g, fg_matmul(g, e, w, 0, 0), b), labels);
  if (gt_differentiate(&c) == 0)
    gt_check(&c, "n3", "embedding_mean.py", NULL, TOL_F64);
  else
    FG_FAIL_AT("could not build the gradient graph");
  gt_free(&c);
}

FG_TEST(grad_torch_embedding_mean, "") { embedding_case(FG_I32, 31); }

FG_TEST(grad_torch_embedding_mean_i64, "") { embedding_case(FG_I64, 32); }
