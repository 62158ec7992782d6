/* torchvision's resnet18, mobilenet_v2 and squeezenet1_1, exported to ONNX
 * by PyTorch 1.13 at opsets 13 and 17 with a fixed batch and with a
 * dynamic one, and swin_t at opset 17 with a fixed batch
 * (tests/schema/onnx/models.py), imported and run on random images; every
 * output must match PyTorch's.
 *
 * models.py writes its files once per cases folder (FG_CASES_DIR
 * "/models", about 380 MB, some seconds of export) and marks
 * them complete; a later run reuses them unless the script is newer. The
 * cases run as separate processes, possibly at once: a lock file keeps a
 * second process from exporting while the first does.
 *
 * Tolerance: |got - want| <= 1e-4 |want| + 1e-5 max|want| per output.
 * The relative part is the bound. The absolute part, 1e-5 of the
 * largest logit, is needed because a logit near zero is the difference of
 * large sums: 20 to 50 convolutions accumulate float32 rounding in another
 * order than PyTorch's (oneDNN's blocking against mkldnn's), which leaves
 * every element, small or not, an absolute error of about 3e-7 of the
 * output's scale (measured: resnet18 3.8e-6 on logits up to 12,
 * mobilenet_v2 5.2e-8 on 0.18, squeezenet1_1 2.4e-7 on 1.26); relative to
 * the logit itself that reached 4e-3 on a logit near zero. The case prints
 * the largest absolute and relative errors it saw. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fgtest.h"
#include "flowgraph/graph.h"
#include "flowgraph/onnx.h"
#include "flowgraph/session.h"
#include "flowgraph/tensor.h"

#define MODELS_SCRIPT FG_SOURCE_DIR "/tests/schema/onnx/models.py"
#define MODELS_DIR    FG_CASES_DIR "/models"

static double mtime_of(const char *path) {
  struct stat sb;
  if (stat(path, &sb) != 0) return -1;
  return (double)sb.st_mtim.tv_sec + 1e-9 * (double)sb.st_mtim.tv_nsec;
}

/* The folder with the exported models, or NULL after FG_FAIL_AT. */
static const char *models_dir(void) {
  static const char *const code = "import runpy, sys\n"
                                  "s = sys.argv[1]\n"
                                  "sys.argv = [s, sys.argv[2]]\n"
                                  "runpy.run_path(s, run_name='__main__')\n";
  char lock_path[512], done[512];
  if (mkdir(FG_CASES_DIR, 0755) != 0 && errno != EEXIST) {
    FG_FAIL_AT("cannot make %s: %s", FG_CASES_DIR, strerror(errno));
    return NULL;
  }
  snprintf(lock_path, sizeof lock_path, "%s.lock", MODELS_DIR);
  snprintf(done, sizeof done, "%s/complete", MODELS_DIR);
  int fd = open(lock_path, O_RDWR | O_CREAT, 0644);
  if (fd < 0) {
    FG_FAIL_AT("cannot open %s: %s", lock_path, strerror(errno));
    return NULL;
  }
  struct flock fl;
  memset(&fl, 0, sizeof fl);
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  int rc = 0;
  while ((rc = fcntl(fd, F_SETLKW, &fl)) != 0 && errno == EINTR) {
  }
  const char *dir = MODELS_DIR;
  double made = mtime_of(done);
  if (rc == 0 && (made < 0 || made < mtime_of(MODELS_SCRIPT))) {
    int py = fgt_python(code, MODELS_SCRIPT, MODELS_DIR);
    if (py != 0 || mtime_of(done) < 0) {
      FG_FAIL_AT("%s %s %s failed (status %d)", FG_PYTHON, MODELS_SCRIPT, MODELS_DIR, py);
      dir = NULL;
    }
  } else if (rc != 0) {
    FG_FAIL_AT("cannot lock %s: %s", lock_path, strerror(errno));
    dir = NULL;
  }
  close(fd); /* releases the lock */
  return dir;
}

/* Compares got with want: returns the number of elements out of
 * tolerance (printing the first) and the largest errors seen. */
static int64_t compare(const char *what, const fg_tensor *got, const fg_tensor *want,
                       double *max_abs, double *max_rel) {
  const int64_t n = fg_tensor_num_elements(want);
  const float *g = fg_tensor_data(got), *w = fg_tensor_data(want);
  double scale = 0;
  for (int64_t i = 0; i < n; i++)
    scale = fabs(w[i]) > scale ? fabs(w[i]) : scale;
  const double rtol = 1e-4, atol = 1e-5 * scale;
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    const double d = fabs((double)g[i] - (double)w[i]);
    if (d > *max_abs) *max_abs = d;
    if (w[i] != 0 && d / fabs(w[i]) > *max_rel) *max_rel = d / fabs(w[i]);
    if (!(d <= atol + rtol * fabs(w[i]))) {
      if (!bad)
        FG_FAIL_AT("%s: element %lld is %.9g, PyTorch says %.9g (tolerance %.3g)", what,
                   (long long)i, g[i], w[i], atol + rtol * fabs(w[i]));
      bad++;
    }
  }
  return bad;
}

/* Runs input set k of model `name` on session s and checks the output. */
static void check_set(fg_session *s, const char *fetch, const char *dir, const char *name, int k,
                      double *max_abs, double *max_rel) {
  char in_path[512], out_path[512], what[256];
  fg_status *st = fg_status_new();
  snprintf(in_path, sizeof in_path, "%s/%s.%d.in.input.npy", dir, name, k);
  snprintf(out_path, sizeof out_path, "%s/%s.%d.out.0.npy", dir, name, k);
  fg_tensor *x = fg_npy_read(in_path, st), *want = x ? fg_npy_read(out_path, st) : NULL;
  fg_tensor *got = NULL;
  if (!x || !want) {
    FG_FAIL_AT("%s: %s", name, fg_status_message(st));
    goto done;
  }
  fg_feed feed = {"input", x};
  if (fg_session_run(s, &feed, 1, &fetch, 1, &got, NULL, 0, st) != 0) {
    FG_FAIL_AT("%s set %d: run failed: %s", name, k, fg_status_message(st));
    goto done;
  }
  snprintf(what, sizeof what, "%s set %d (batch %lld)", name, k, (long long)fg_tensor_dim(x, 0));
  int same = fg_tensor_dtype(got) == FG_F32 && fg_tensor_rank(got) == fg_tensor_rank(want);
  for (int d = 0; same && d < fg_tensor_rank(want); d++)
    same = fg_tensor_dim(got, d) == fg_tensor_dim(want, d);
  if (!same) {
    FG_FAIL_AT("%s: output is %s rank %d with %lld elements; PyTorch's is f32 rank %d with %lld",
               what, fg_dtype_name(fg_tensor_dtype(got)), fg_tensor_rank(got),
               (long long)fg_tensor_num_elements(got), fg_tensor_rank(want),
               (long long)fg_tensor_num_elements(want));
    goto done;
  }
  double abs_k = 0, rel_k = 0;
  int64_t bad = compare(what, got, want, &abs_k, &rel_k);
  printf("%s: max abs error %.3g, max rel error %.3g, %lld of %lld out of tolerance\n", what, abs_k,
         rel_k, (long long)bad, (long long)fg_tensor_num_elements(want));
  if (abs_k > *max_abs) *max_abs = abs_k;
  if (rel_k > *max_rel) *max_rel = rel_k;
done:
  fg_tensor_free(x);
  fg_tensor_free(want);
  fg_tensor_free(got);
  fg_status_free(st);
}

/* Imports NAME.onnx once and runs its `sets` input sets (batch 1, then 3
 * for a dynamic batch) through one session. */
static void check_model(const char *name, int sets) {
  if (!fg_onnx_available()) FG_SKIP("this build has no ONNX support");
  const char *dir = models_dir();
  if (!dir) return;
  char path[512], fetch[256];
  snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
  fg_status *st = fg_status_new();
  fg_graph *g = fg_onnx_load(path, NULL, st);
  fg_session *s = NULL;
  if (!g) {
    FG_FAIL_AT("%s: import failed: %s: %s", name, fg_code_name(fg_status_code(st)),
               fg_status_message(st));
    goto done;
  }
  FG_CHECK_INT(fg_graph_num_outputs(g), 1);
  fg_output o = fg_graph_output(g, 0);
  snprintf(fetch, sizeof fetch, "%s:%d", fg_node_name(g, o.node), o.index);
  s = fg_session_new(g, NULL, st);
  if (!s) {
    FG_FAIL_AT("%s: session: %s", name, fg_status_message(st));
    goto done;
  }
  double max_abs = 0, max_rel = 0;
  for (int k = 0; k < sets; k++)
    check_set(s, fetch, dir, name, k, &max_abs, &max_rel);
  printf("%s: max abs error %.3g, max rel error %.3g over %d input set(s)\n", name, max_abs,
         max_rel, sets);
done:
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(resnet18_op13_fixed, "onnx") { check_model("resnet18_op13_fixed", 1); }
FG_TEST(resnet18_op13_dyn, "onnx") { check_model("resnet18_op13_dyn", 2); }
FG_TEST(resnet18_op17_fixed, "onnx") { check_model("resnet18_op17_fixed", 1); }
FG_TEST(resnet18_op17_dyn, "onnx") { check_model("resnet18_op17_dyn", 2); }
FG_TEST(mobilenet_v2_op13_fixed, "onnx") { check_model("mobilenet_v2_op13_fixed", 1); }
FG_TEST(mobilenet_v2_op13_dyn, "onnx") { check_model("mobilenet_v2_op13_dyn", 2); }
FG_TEST(mobilenet_v2_op17_fixed, "onnx") { check_model("mobilenet_v2_op17_fixed", 1); }
FG_TEST(mobilenet_v2_op17_dyn, "onnx") { check_model("mobilenet_v2_op17_dyn", 2); }
FG_TEST(squeezenet1_1_op13_fixed, "onnx") { check_model("squeezenet1_1_op13_fixed", 1); }
FG_TEST(squeezenet1_1_op13_dyn, "onnx") { check_model("squeezenet1_1_op13_dyn", 2); }
FG_TEST(squeezenet1_1_op17_fixed, "onnx") { check_model("squeezenet1_1_op17_fixed", 1); }
FG_TEST(squeezenet1_1_op17_dyn, "onnx") { check_model("squeezenet1_1_op17_dyn", 2); }
/* Its attention mask: Mod and ScatterND on shape values, folded at import;
 * its attention dropout exported with training_mode true and ratio 0. */
FG_TEST(swin_t_op17_fixed, "onnx,slow") { check_model("swin_t_op17_fixed", 1); }
