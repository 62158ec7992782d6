/* Shared by tests/tools/test_cli*.c and the CLI cases of tests/executor/ and
 * tests/dist/ (so it sits at the tests/ root): runs FG_CLI_PATH with stdout
 * and stderr captured to files, checks exit statuses and the one-line error
 * contract, and builds the models (with a plain-C forward pass for reference
 * values). Every helper is static inline so each test file uses what it
 * needs. */
#ifndef FG_TEST_CLI_HARNESS_H
#define FG_TEST_CLI_HARNESS_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "fgtest.h"
#include "flowgraph/graph.h"
#include "flowgraph/io.h"
#include "flowgraph/tensor.h"

extern char **environ;

#ifndef FG_CLI_PATH
#define FG_CLI_PATH "build/flowgraph"
#endif
#define NPY_DIR   FG_TEST_DATA_DIR "/npy"
#define BAD_DIR   FG_TEST_DATA_DIR "/bad"
#define MAX_ARGS  64
#define TIMEOUT_S 60

/* ---- temp dirs and files ---------------------------------------------------- */

static char tmpdir[256];

static inline int make_tmpdir(void) { return fgt_mkdtemp(tmpdir, sizeof tmpdir, "fg_cli") != NULL; }

/* A path inside the case's temp dir (a few rotating buffers). */
static inline const char *tpath(const char *name) {
  static char bufs[8][512];
  static int k;
  char *b = bufs[k++ % 8];
  snprintf(b, 512, "%s/%s", tmpdir, name);
  return b;
}

static inline int exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

static inline char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  size_t r;
  while (buf && (r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += r;
    if (cap - n - 1 == 0) {
      char *nb = realloc(buf, cap * 2);
      if (!nb) break;
      buf = nb;
      cap *= 2;
    }
  }
  fclose(f);
  if (buf) buf[n] = '\0';
  return buf;
}

/* ---- running the binary ----------------------------------------------------- */

typedef struct cli_result {
  int exited, code, signaled, sig;
  char *out, *err;
} cli_result;

static inline void result_free(cli_result *r) {
  free(r->out);
  free(r->err);
  memset(r, 0, sizeof *r);
}

/* Runs FG_CLI_PATH with a NULL-terminated argument list. */
static inline int cli(cli_result *r, const char *first, ...) {
  memset(r, 0, sizeof *r);
  const char *argv[MAX_ARGS + 2];
  int n = 0;
  argv[n++] = FG_CLI_PATH;
  va_list ap;
  va_start(ap, first);
  for (const char *a = first; a && n < MAX_ARGS; a = va_arg(ap, const char *))
    argv[n++] = a;
  va_end(ap);
  argv[n] = NULL;
  char out_path[600], err_path[600];
  snprintf(out_path, sizeof out_path, "%s.stdout", tmpdir);
  snprintf(err_path, sizeof err_path, "%s.stderr", tmpdir);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid;
  int rc = posix_spawn(&pid, FG_CLI_PATH, &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    fprintf(stderr, "posix_spawn %s: %s\n", FG_CLI_PATH, strerror(rc));
    return -1;
  }
  int status = 0;
  /* A hang is a failure too: give up after TIMEOUT_S. */
  for (int waited_ms = 0;; waited_ms += 10) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) return -1;
    if (waited_ms > TIMEOUT_S * 1000) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      fprintf(stderr, "flowgraph timed out after %d s\n", TIMEOUT_S);
      break;
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  r->exited = WIFEXITED(status);
  r->code = r->exited ? WEXITSTATUS(status) : -1;
  r->signaled = WIFSIGNALED(status);
  r->sig = r->signaled ? WTERMSIG(status) : 0;
  r->out = slurp(out_path);
  r->err = slurp(err_path);
  unlink(out_path);
  unlink(err_path);
  if (!r->out) r->out = calloc(1, 1);
  if (!r->err) r->err = calloc(1, 1);
  return 0;
}

static inline int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++)
    n += *s == '\n';
  return n;
}

#define CHECK_OK(r)                                                                                \
  do {                                                                                             \
    FG_CHECK_INT((r).signaled, 0);                                                                 \
    FG_CHECK_INT((r).code, 0);                                                                     \
    if ((r).code != 0) fprintf(stderr, "stderr: %s\n", (r).err);                                   \
    FG_CHECK_INT(strlen((r).err), 0);                                                              \
  } while (0)

/* Exit 1, no signal, exactly one stderr line "flowgraph: CODE: ...". */
#define CHECK_RUNTIME_ERROR(r, code_name, needle)                                                  \
  do {                                                                                             \
    FG_CHECK_INT((r).signaled, 0);                                                                 \
    FG_CHECK_INT((r).code, 1);                                                                     \
    FG_CHECK_INT(count_lines((r).err), 1);                                                         \
    FG_CHECK((r).err[0] && (r).err[strlen((r).err) - 1] == '\n');                                  \
    if ((code_name)[0]) FG_CHECK_STR_CONTAINS((r).err, "flowgraph: " code_name ": ");              \
    FG_CHECK(strncmp((r).err, "flowgraph: ", 11) == 0);                                            \
    FG_CHECK_STR_CONTAINS((r).err, needle);                                                        \
  } while (0)

#define CHECK_USAGE_ERROR(r)                                                                       \
  do {                                                                                             \
    FG_CHECK_INT((r).signaled, 0);                                                                 \
    FG_CHECK_INT((r).code, 2);                                                                     \
    FG_CHECK_STR_CONTAINS((r).err, "usage:");                                                      \
    FG_CHECK_INT(strlen((r).out), 0);                                                              \
  } while (0)

/* ---- models --------------------------------------------------------------------- */

static inline fg_tensor *tensor_f32(int rank, const int64_t *dims, const float *v) {
  fg_status *st = fg_status_new();
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= dims[i];
  fg_tensor *t = fg_tensor_from_data(FG_F32, rank, dims, v, (size_t)n * sizeof(float), st);
  fg_status_free(st);
  return t;
}

/* The MLP: probs = softmax(relu(x W1 + b1) W2 + b2), x [?,4]. */
static const float W1[4][3] = {
    {0.5f, -0.25f, 0.125f}, {-0.5f, 0.75f, 0.25f}, {0.25f, 0.5f, -1.0f}, {1.0f, -0.5f, 0.5f}};
static const float B1[3] = {0.1f, -0.2f, 0.3f};
static const float W2[3][2] = {{1.0f, -1.0f}, {0.5f, 0.25f}, {-0.75f, 2.0f}};
static const float B2[2] = {0.05f, -0.05f};
static const float X[2][4] = {{1.0f, 2.0f, 3.0f, 4.0f}, {-1.0f, 0.5f, -2.0f, 1.0f}};
/* Parameters: W1 12 + W2 6 variables (72 bytes), b1 3 + b2 2 constants (20 bytes). */

/* Plain-C forward pass for rows of X: h, logits and probs. */
static inline void mlp_forward(const float x[][4], int rows, double h[][3], double logits[][2],
                               double probs[][2]) {
  for (int r = 0; r < rows; r++) {
    for (int j = 0; j < 3; j++) {
      double s = B1[j];
      for (int k = 0; k < 4; k++)
        s += (double)x[r][k] * W1[k][j];
      h[r][j] = s > 0 ? s : 0;
    }
    for (int j = 0; j < 2; j++) {
      double s = B2[j];
      for (int k = 0; k < 3; k++)
        s += h[r][k] * W2[k][j];
      logits[r][j] = s;
    }
    double m = logits[r][0] > logits[r][1] ? logits[r][0] : logits[r][1];
    double e0 = exp(logits[r][0] - m), e1 = exp(logits[r][1] - m);
    probs[r][0] = e0 / (e0 + e1);
    probs[r][1] = e1 / (e0 + e1);
  }
}

/* Checks g, saves it to path and frees it; 0, or -1 with the reason on
 * stderr. */
static inline int save_and_free_graph(fg_graph *g, const char *path) {
  fg_status *st = fg_status_new();
  int rc = fg_graph_status(g, st) == FG_OK ? fg_graph_save(g, path, st) : -1;
  if (rc != 0) fprintf(stderr, "save %s: %s\n", path, fg_status_message(st));
  fg_status_free(st);
  fg_graph_free(g);
  return rc;
}

/* Builds the MLP into `path`; marks probs as output unless no_outputs. */
static inline int build_mlp(const char *path, int batch_known, int no_outputs) {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {batch_known ? 2 : FG_DIM_UNKNOWN, 4};
  int64_t w1d[2] = {4, 3}, b1d[1] = {3}, w2d[2] = {3, 2}, b2d[1] = {2};
  fg_tensor *w1 = tensor_f32(2, w1d, &W1[0][0]), *b1 = tensor_f32(1, b1d, B1);
  fg_tensor *w2 = tensor_f32(2, w2d, &W2[0][0]), *b2 = tensor_f32(1, b2d, B2);
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output vw1 = fg_variable(g, "W1", w1);
  fg_output cb1 = fg_constant(g, "b1", b1);
  fg_output vw2 = fg_variable(g, "W2", w2);
  fg_output cb2 = fg_constant(g, "b2", b2);
  fg_output mm1 = fg_set_name(g, fg_matmul(g, x, vw1, 0, 0), "mm1");
  fg_output h = fg_set_name(g, fg_relu(g, fg_set_name(g, fg_add(g, mm1, cb1), "add1")), "h");
  fg_output mm2 = fg_set_name(g, fg_matmul(g, h, vw2, 0, 0), "mm2");
  fg_output logits = fg_set_name(g, fg_add(g, mm2, cb2), "logits");
  fg_output probs = fg_set_name(g, fg_softmax(g, logits, 1), "probs");
  if (!no_outputs) fg_graph_add_output(g, probs);
  fg_graph_set_metadata(g, "producer", "test_cli");
  fg_tensor_free(w1);
  fg_tensor_free(b1);
  fg_tensor_free(w2);
  fg_tensor_free(b2);
  return save_and_free_graph(g, path);
}

/* a [2,4] f32 placeholder, w [4,3] constant, mm = a w, out = mm + c [3].
 * FLOPs by hand: matmul 2*M*N*K = 2*2*3*4 = 48, add one per output
 * element = 6: total 54. */
static inline int build_fixed(const char *path) {
  fg_graph *g = fg_graph_new();
  int64_t ad[2] = {2, 4}, wd[2] = {4, 3}, cd[1] = {3};
  float wv[12] = {0}, cv[3] = {1, 2, 3};
  fg_tensor *w = tensor_f32(2, wd, wv), *c = tensor_f32(1, cd, cv);
  fg_output a = fg_placeholder(g, "a", FG_F32, 2, ad);
  fg_output mm = fg_set_name(g, fg_matmul(g, a, fg_constant(g, "w", w), 0, 0), "mm");
  fg_output out = fg_set_name(g, fg_add(g, mm, fg_constant(g, "c", c)), "out");
  fg_graph_add_output(g, out);
  fg_tensor_free(w);
  fg_tensor_free(c);
  return save_and_free_graph(g, path);
}

/* Two placeholders of other dtypes for --random-inputs:
 * fi = identity(xi: i32 [?,5]), ff = identity(xf: f32 [?,3]),
 * fd = identity(xd: f64 [2]), fb = identity(xb: bool [?]). */
static inline int build_random_model(const char *path) {
  fg_graph *g = fg_graph_new();
  int64_t di[2] = {FG_DIM_UNKNOWN, 5}, df[2] = {FG_DIM_UNKNOWN, 3}, dd[1] = {2},
          db[1] = {FG_DIM_UNKNOWN};
  fg_graph_add_output(g,
                      fg_set_name(g, fg_identity(g, fg_placeholder(g, "xi", FG_I32, 2, di)), "fi"));
  fg_graph_add_output(g,
                      fg_set_name(g, fg_identity(g, fg_placeholder(g, "xf", FG_F32, 2, df)), "ff"));
  fg_graph_add_output(g,
                      fg_set_name(g, fg_identity(g, fg_placeholder(g, "xd", FG_F64, 1, dd)), "fd"));
  fg_graph_add_output(
      g, fg_set_name(g, fg_identity(g, fg_placeholder(g, "xb", FG_BOOL, 1, db)), "fb"));
  return save_and_free_graph(g, path);
}

static inline int write_npy_f32(const char *path, int rank, const int64_t *dims, const float *v) {
  fg_tensor *t = tensor_f32(rank, dims, v);
  fg_status *st = fg_status_new();
  int rc = t ? fg_npy_write(path, t, st) : -1;
  fg_status_free(st);
  fg_tensor_free(t);
  return rc;
}

static inline fg_tensor *read_npy(const char *path) {
  fg_status *st = fg_status_new();
  fg_tensor *t = fg_npy_read(path, st);
  if (!t) fprintf(stderr, "read_npy %s: %s\n", path, fg_status_message(st));
  fg_status_free(st);
  return t;
}

/* Sets up a temp dir with mlp.fgb (batch unknown) and x.npy (X). */
static inline int setup_mlp(void) {
  if (!make_tmpdir()) return -1;
  int64_t xd[2] = {2, 4};
  if (build_mlp(tpath("mlp.fgb"), 0, 0) != 0) return -1;
  return write_npy_f32(tpath("x.npy"), 2, xd, &X[0][0]);
}

static inline void check_f32_tensor(const fg_tensor *t, int rows, int cols, const double *want,
                                    double tol) {
  FG_REQUIRE(t);
  FG_CHECK_INT(fg_tensor_dtype(t), FG_F32);
  FG_CHECK_INT(fg_tensor_rank(t), 2);
  FG_CHECK_INT(fg_tensor_dim(t, 0), rows);
  FG_CHECK_INT(fg_tensor_dim(t, 1), cols);
  if (fg_tensor_num_elements(t) != rows * cols) return;
  const float *v = fg_tensor_data(t);
  for (int i = 0; i < rows * cols; i++)
    FG_CHECK_NEAR(v[i], want[i], tol);
}

/* Parses the numbers in the "  [a, b, ...]" line after "NAME: ". */
static inline int parse_printed(const char *out, const char *name, double *vals, int max) {
  char key[128];
  snprintf(key, sizeof key, "%s: ", name);
  const char *p = strstr(out, key);
  if (!p) return -1;
  p = strstr(p, "\n  [");
  if (!p) return -1;
  p += 4;
  int n = 0;
  while (n < max) {
    char *end;
    double v = strtod(p, &end);
    if (end == p) break;
    vals[n++] = v;
    p = end;
    if (*p == ',') p += 2;
  }
  return n;
}

#endif
