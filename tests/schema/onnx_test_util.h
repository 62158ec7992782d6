/* Helpers of the ONNX import tests (tests/schema/test_onnx_*.c).
 *
 * A Python script in tests/schema/onnx/ (run with FG_PYTHON: python3-onnx
 * and NumPy) writes, per case NAME, into the folder given as its argument:
 * NAME.onnx, NAME.in.<input>.npy for each graph input (by ONNX input name)
 * and NAME.out.<k>.npy for each graph output k, in order. Expected values
 * come from NumPy reference code or PyTorch, never from flowgraph.
 *
 * onnx_cases runs a script once into FG_CASES_DIR/<stem> (the build's
 * onnx_cases folder unless FG_TEST_CASES_DIR says otherwise) and
 * keeps the result while the scripts are unchanged: ctest runs each case
 * in its own process, and the folder is shared by them. A new folder is
 * written beside it and renamed into place, so a reader never sees a
 * half-written one, and the check and the replacement happen under a lock
 * on <stem>.lock, so a process never moves away a current folder another
 * has just put in place (and is reading). */
#ifndef FG_TEST_ONNX_UTIL_H
#define FG_TEST_ONNX_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fgtest.h"
#include "flowgraph/onnx.h"
#include "flowgraph/session.h"
#include "flowgraph/tensor.h"

#define ONNX_CASES_DIR  FG_CASES_DIR
#define ONNX_SCRIPT_DIR FG_SOURCE_DIR "/tests/schema/onnx"

/* What the generated cases depend on: every script in tests/schema/onnx
 * (size and modification time), so editing any regenerates. */
static inline unsigned long long onnx_scripts_stamp(void) {
  unsigned long long h = 1469598103934665603ull;
  DIR *d = opendir(ONNX_SCRIPT_DIR);
  if (!d) return 0;
  struct dirent *e;
  unsigned long long sum = 0;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len < 4 || strcmp(e->d_name + len - 3, ".py") != 0) continue;
    char path[1024];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", ONNX_SCRIPT_DIR, e->d_name);
    if (stat(path, &sb) != 0) continue;
    unsigned long long x = (unsigned long long)sb.st_size * 1000003ull ^
                           (unsigned long long)sb.st_mtime * 7919ull ^
                           (unsigned long long)sb.st_mtim.tv_nsec;
    for (const char *p = e->d_name; *p; p++)
      x = (x ^ (unsigned char)*p) * 1099511628211ull;
    sum += x; /* order-free: readdir's order varies */
  }
  closedir(d);
  return h ^ sum;
}

static inline int onnx_stamp_ok(const char *dir, unsigned long long stamp) {
  char path[1024];
  snprintf(path, sizeof path, "%s/.stamp", dir);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  unsigned long long got = 0;
  int ok = fscanf(f, "%llu", &got) == 1 && got == stamp;
  fclose(f);
  return ok;
}

/* Under onnx_cases' lock: writes the cases of script `spath` into `dir`
 * unless it is current (stamp); `dir`, or NULL after FG_FAIL_AT. */
static inline const char *onnx_cases_make(const char *dir, const char *spath,
                                          unsigned long long stamp) {
  if (onnx_stamp_ok(dir, stamp)) return dir;
  char tmp[600], old[600];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", dir, (long)getpid());
  fgt_rmtree(tmp);
  static const char code[] = "import os, runpy, sys\n"
                             "script, out = sys.argv[1], sys.argv[2]\n"
                             "os.makedirs(out, exist_ok=True)\n"
                             "sys.argv = [script, out]\n"
                             "runpy.run_path(script, run_name='__main__')\n";
  int rc = fgt_python(code, spath, tmp);
  if (rc != 0) {
    FG_FAIL_AT("onnx_cases: %s %s %s failed (%d)", FG_PYTHON, spath, tmp, rc);
    fgt_rmtree(tmp);
    return NULL;
  }
  char stamp_path[700];
  snprintf(stamp_path, sizeof stamp_path, "%s/.stamp", tmp);
  FILE *f = fopen(stamp_path, "w");
  if (f) {
    fprintf(f, "%llu\n", stamp);
    fclose(f);
  }
  /* The stale folder (if any) moves away, the new one takes its name. */
  snprintf(old, sizeof old, "%s.old.%ld", dir, (long)getpid());
  if (rename(dir, old) == 0) fgt_rmtree(old);
  if (rename(tmp, dir) != 0) {
    FG_FAIL_AT("onnx_cases: could not put %s in place: %s", dir, strerror(errno));
    fgt_rmtree(tmp);
    return NULL;
  }
  return dir;
}

/* Runs FG_PYTHON FG_SOURCE_DIR/tests/schema/onnx/<script> <dir> once per
 * process (and not at all while an earlier run's folder is current); the
 * dir, or NULL after FG_FAIL_AT (the script failed). */
static inline const char *onnx_cases(const char *script) {
  static char dirs[8][512], names[8][128];
  static int n;
  for (int i = 0; i < n; i++)
    if (strcmp(names[i], script) == 0) return dirs[i];
  if (n == 8) {
    FG_FAIL_AT("onnx_cases: too many scripts");
    return NULL;
  }
  char stem[128];
  snprintf(stem, sizeof stem, "%s", script);
  char *dot = strrchr(stem, '.');
  if (dot) *dot = '\0';
  char dir[512], spath[600];
  snprintf(dir, sizeof dir, "%s/%s", ONNX_CASES_DIR, stem);
  snprintf(spath, sizeof spath, "%s/%s", ONNX_SCRIPT_DIR, script);
  unsigned long long stamp = onnx_scripts_stamp();
  mkdir(ONNX_CASES_DIR, 0777);
  char lock_path[600];
  snprintf(lock_path, sizeof lock_path, "%s.lock", dir);
  const int lock = open(lock_path, O_RDWR | O_CREAT, 0666);
  if (lock < 0 || flock(lock, LOCK_EX) != 0) {
    FG_FAIL_AT("onnx_cases: cannot lock %s: %s", lock_path, strerror(errno));
    if (lock >= 0) close(lock);
    return NULL;
  }
  const char *made = onnx_cases_make(dir, spath, stamp);
  close(lock); /* releases the lock */
  if (!made) return NULL;
  snprintf(names[n], sizeof names[n], "%s", script);
  snprintf(dirs[n], sizeof dirs[n], "%s", dir);
  return dirs[n++];
}

/* 1 when got and want agree: exact for integers and bool, else
 * |got - want| <= atol + rtol * |want| (NaN matches NaN). */
static inline int onnx_close(double got, double want, int exact, double rtol, double atol) {
  if (exact) return got == want;
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want;
  return fabs(got - want) <= atol + rtol * fabs(want);
}

static inline double onnx_elem(const fg_tensor *t, int64_t i) {
  const void *d = fg_tensor_data(t);
  switch (fg_tensor_dtype(t)) {
  case FG_F32: return ((const float *)d)[i];
  case FG_F64: return ((const double *)d)[i];
  case FG_I32: return ((const int32_t *)d)[i];
  case FG_I64: return (double)((const int64_t *)d)[i];
  default: return ((const uint8_t *)d)[i];
  }
}

/* Compares output k of case `name`; 0 when equal. */
static inline int onnx_compare(const char *name, int k, const fg_tensor *got, const fg_tensor *want,
                               double rtol, double atol) {
  if (fg_tensor_dtype(got) != fg_tensor_dtype(want)) {
    FG_FAIL_AT("case %s output %d: dtype %s, expected %s", name, k,
               fg_dtype_name(fg_tensor_dtype(got)), fg_dtype_name(fg_tensor_dtype(want)));
    return -1;
  }
  int rank = fg_tensor_rank(want);
  int same = fg_tensor_rank(got) == rank;
  for (int i = 0; same && i < rank; i++)
    same = fg_tensor_dim(got, i) == fg_tensor_dim(want, i);
  if (!same) {
    char a[200] = "", b[200] = "";
    for (int i = 0; i < fg_tensor_rank(got); i++)
      snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", i ? "," : "",
               (long long)fg_tensor_dim(got, i));
    for (int i = 0; i < rank; i++)
      snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", i ? "," : "",
               (long long)fg_tensor_dim(want, i));
    FG_FAIL_AT("case %s output %d: shape [%s], expected [%s]", name, k, a, b);
    return -1;
  }
  fg_dtype dt = fg_tensor_dtype(want);
  int exact = dt != FG_F32 && dt != FG_F64;
  int64_t n = fg_tensor_num_elements(want), bad = 0;
  for (int64_t i = 0; i < n; i++) {
    double g = onnx_elem(got, i), w = onnx_elem(want, i);
    if (onnx_close(g, w, exact, rtol, atol)) continue;
    if (bad++ < 5)
      FG_FAIL_AT("case %s output %d index %lld: got %.9g, want %.9g", name, k, (long long)i, g, w);
  }
  if (bad > 5) FG_FAIL_AT("case %s output %d: %lld elements differ", name, k, (long long)bad);
  return bad ? -1 : 0;
}

/* The graph input name flowgraph gives an ONNX input (':' is flowgraph's
 * node:index separator and becomes '_'). */
static inline void onnx_feed_name(const char *onnx_name, char *buf, size_t size) {
  snprintf(buf, size, "%s", onnx_name);
  for (char *p = buf; *p; p++)
    if (*p == ':') *p = '_';
}

/* Loads dir/name.onnx with opts (NULL: defaults), feeds every
 * NAME.in.*.npy, fetches the graph outputs and compares output k with
 * NAME.out.<k>.npy: |got - want| <= atol + rtol*|want| (exact for integer
 * and bool). FG_FAIL_AT naming case, output, index, got and want. */
static inline void onnx_check_case(const char *dir, const char *name, const fg_onnx_options *opts,
                                   double rtol, double atol) {
  if (!dir) return; /* onnx_cases failed and said so */
  char path[1024];
  snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
  fg_status *st = fg_status_new();
  fg_graph *g = fg_onnx_load(path, opts, st);
  if (!g) {
    FG_FAIL_AT("case %s: load failed: %s: %s", name, fg_code_name(fg_status_code(st)),
               fg_status_message(st));
    fg_status_free(st);
    return;
  }
  enum { MAXF = 64 };
  fg_feed feeds[MAXF];
  fg_tensor *in[MAXF];
  char feed_names[MAXF][256];
  int n_in = 0;
  char prefix[300];
  snprintf(prefix, sizeof prefix, "%s.in.", name);
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d)) && n_in < MAXF) {
    size_t len = strlen(e->d_name), pl = strlen(prefix);
    if (len <= pl + 4 || strncmp(e->d_name, prefix, pl) != 0 ||
        strcmp(e->d_name + len - 4, ".npy") != 0)
      continue;
    char onnx_name[256];
    snprintf(onnx_name, sizeof onnx_name, "%.*s", (int)(len - pl - 4), e->d_name + pl);
    onnx_feed_name(onnx_name, feed_names[n_in], sizeof feed_names[n_in]);
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    in[n_in] = fg_npy_read(path, st);
    if (!in[n_in]) {
      FG_FAIL_AT("case %s: %s: %s", name, path, fg_status_message(st));
      continue;
    }
    feeds[n_in].name = feed_names[n_in];
    feeds[n_in].tensor = in[n_in];
    n_in++;
  }
  if (d) closedir(d);
  int n_out = fg_graph_num_outputs(g);
  char fetch_names[MAXF][300];
  const char *fetches[MAXF];
  fg_tensor *out[MAXF] = {0};
  for (int k = 0; k < n_out && k < MAXF; k++) {
    fg_output o = fg_graph_output(g, k);
    if (o.index == 0)
      snprintf(fetch_names[k], sizeof fetch_names[k], "%s", fg_node_name(g, o.node));
    else
      snprintf(fetch_names[k], sizeof fetch_names[k], "%s:%d", fg_node_name(g, o.node), o.index);
    fetches[k] = fetch_names[k];
  }
  fg_session *s = fg_session_new(g, NULL, st);
  if (!s) {
    FG_FAIL_AT("case %s: session: %s", name, fg_status_message(st));
  } else if (fg_session_run(s, feeds, n_in, fetches, n_out, out, NULL, 0, st) != 0) {
    FG_FAIL_AT("case %s: run: %s: %s", name, fg_code_name(fg_status_code(st)),
               fg_status_message(st));
  } else {
    int k = 0;
    for (;; k++) {
      snprintf(path, sizeof path, "%s/%s.out.%d.npy", dir, name, k);
      if (access(path, F_OK) != 0) break;
      fg_tensor *want = fg_npy_read(path, st);
      if (!want) {
        FG_FAIL_AT("case %s: %s: %s", name, path, fg_status_message(st));
        continue;
      }
      if (k < n_out) onnx_compare(name, k, out[k], want, rtol, atol);
      fg_tensor_free(want);
    }
    if (k != n_out) FG_FAIL_AT("case %s: %d graph outputs, %d expected files", name, n_out, k);
    if (k == 0) FG_FAIL_AT("case %s: no %s.out.0.npy in %s", name, name, dir);
  }
  for (int k = 0; k < n_out && k < MAXF; k++)
    fg_tensor_free(out[k]);
  for (int i = 0; i < n_in; i++)
    fg_tensor_free(in[i]);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* Loads dir/name.onnx and expects failure with `code` and a message
 * containing `needle`. */
static inline void onnx_expect_error(const char *dir, const char *name, fg_code code,
                                     const char *needle) {
  if (!dir) return;
  char path[1024];
  snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
  fg_status *st = fg_status_new();
  fg_graph *g = fg_onnx_load(path, NULL, st);
  if (g) {
    FG_FAIL_AT("case %s: loaded, expected %s containing \"%s\"", name, fg_code_name(code), needle);
    fg_graph_free(g);
  } else {
    if (fg_status_code(st) != code)
      FG_FAIL_AT("case %s: %s (%s), expected %s", name, fg_code_name(fg_status_code(st)),
                 fg_status_message(st), fg_code_name(code));
    FG_CHECK_STR_CONTAINS(fg_status_message(st), needle);
  }
  fg_status_free(st);
}

#endif /* FG_TEST_ONNX_UTIL_H */
