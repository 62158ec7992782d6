/* Shared by the ONNX export tests: export a graph, have
 * tests/schema/onnx/check_export.py check the file (onnx.checker with
 * full_check) and evaluate it with its NumPy/torch reference interpreter,
 * and compare what Python computed with flowgraph's own run of the graph
 * that was exported. Expected values never come from flowgraph's export:
 * Python reads only the .onnx file and the inputs. */
#ifndef FG_TEST_ONNX_EXPORT_UTIL_H
#define FG_TEST_ONNX_EXPORT_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgtest.h"
#include "flowgraph/flowgraph.h"
#include "flowgraph/io.h"
#include "flowgraph/onnx.h"
#include "schema/onnx/onnx_import.h"

#define OX_SCRIPT FG_SOURCE_DIR "/tests/schema/onnx/check_export.py"
#define OX_MAX    64

static char ox_dir[256];

static inline const char *ox_path(const char *name, const char *suffix) {
  static char bufs[8][600];
  static int k;
  char *b = bufs[k++ % 8];
  snprintf(b, 600, "%s/%s%s", ox_dir, name, suffix);
  return b;
}

/* "<prefix><opset>" (a few rotating buffers). */
static inline const char *ox_name(const char *prefix, int opset) {
  static char bufs[4][64];
  static int k;
  char *b = bufs[k++ % 4];
  snprintf(b, 64, "%s%d", prefix, opset);
  return b;
}

/* The case's temp dir (made once per case). */
static inline int ox_begin(void) { return fgt_mkdtemp(ox_dir, sizeof ox_dir, "fg_onnx_x") != NULL; }
static inline void ox_end(void) { fgt_rmtree(ox_dir); }

/* Runs check_export.py on dir/name.onnx at `opset` (through
 * tests/cached_run.py: the sanitizer builds export the same files as the
 * Release build and reuse its results); its exit status. */
static inline int ox_python(const char *name, int opset) {
  char code[1600];
  snprintf(code, sizeof code,
           "import sys, runpy; sys.argv = ['cached_run.py', '%s', '%s', '%s', sys.argv[1], "
           "sys.argv[2], '--opset', '%d']; runpy.run_path('%s', run_name='__main__')",
           FGT_PY_CACHE, ox_dir, OX_SCRIPT, opset, FGT_CACHED_RUN);
  char model[600], prefix[600];
  snprintf(model, sizeof model, "%s/%s.onnx", ox_dir, name);
  snprintf(prefix, sizeof prefix, "%s/%s", ox_dir, name);
  return fgt_python(code, model, prefix);
}

/* The file name an input's .npy gets ('/' is not allowed in it). */
static inline const char *ox_in_path(const char *name, const char *input) {
  static char buf[700];
  char clean[256];
  snprintf(clean, sizeof clean, "%s", input);
  for (char *p = clean; *p; p++)
    if (*p == '/') *p = '_';
  snprintf(buf, sizeof buf, "%s/%s.in.%s.npy", ox_dir, name, clean);
  return buf;
}

/* Element i of t as a double. */
static inline double ox_at(const fg_tensor *t, int64_t i) {
  const void *d = fg_tensor_data(t);
  switch (fg_tensor_dtype(t)) {
  case FG_F32: return ((const float *)d)[i];
  case FG_F64: return ((const double *)d)[i];
  case FG_I32: return ((const int32_t *)d)[i];
  case FG_I64: return (double)((const int64_t *)d)[i];
  case FG_BOOL: return ((const uint8_t *)d)[i];
  default: return NAN;
  }
}

/* got vs want: same dtype and shape, |got - want| <= atol + rtol |want|
 * (exact for integers and bools). Returns the failures. */
static inline int ox_compare(const char *what, const fg_tensor *got, const fg_tensor *want,
                             double rtol, double atol) {
  int bad = 0;
  if (fg_tensor_dtype(got) != fg_tensor_dtype(want) ||
      fg_tensor_rank(got) != fg_tensor_rank(want)) {
    FG_FAIL_AT("%s: dtype %s rank %d, want %s rank %d", what, fg_dtype_name(fg_tensor_dtype(got)),
               fg_tensor_rank(got), fg_dtype_name(fg_tensor_dtype(want)), fg_tensor_rank(want));
    return 1;
  }
  for (int d = 0; d < fg_tensor_rank(got); d++)
    if (fg_tensor_dim(got, d) != fg_tensor_dim(want, d)) {
      FG_FAIL_AT("%s: dim %d is %lld, want %lld", what, d, (long long)fg_tensor_dim(got, d),
                 (long long)fg_tensor_dim(want, d));
      return 1;
    }
  int exact = !fg_dtype_is_float(fg_tensor_dtype(got));
  for (int64_t i = 0; i < fg_tensor_num_elements(got); i++) {
    double g = ox_at(got, i), w = ox_at(want, i);
    int ok = exact ? g == w : (isnan(w) ? isnan(g) : fabs(g - w) <= atol + rtol * fabs(w));
    if (!ok && bad++ < 5)
      FG_FAIL_AT("%s: element %lld is %.9g, want %.9g", what, (long long)i, g, w);
  }
  return bad;
}

/* Runs g (a fresh session) on feeds; outs[k] owned by the caller. */
static inline int ox_run(fg_graph *g, const fg_feed *feeds, int n_feeds, const char *const *fetches,
                         int n, fg_tensor **outs) {
  fg_status *st = fg_status_new();
  fg_session *s = fg_session_new(g, NULL, st);
  int rc = s ? fg_session_run(s, feeds, n_feeds, fetches, n, outs, NULL, 0, st) : -1;
  if (rc != 0) FG_FAIL_AT("run: %s", fg_status_message(st));
  fg_session_free(s);
  fg_status_free(st);
  return rc;
}

/* 1 when the importer maps the default domain's compute ops: the mapper
 * tables of onnx_map_nn.c and onnx_map_math.c are written on their own
 * branches, so a build of this branch alone has them empty, and a round
 * trip through fg_onnx_load cannot run yet (a visible skip). With any
 * mapping in, a failed re-import fails the case. */
static inline int ox_importer_maps_ops(void) {
  return fgx_ops_nn[0].type != NULL || fgx_ops_math[0].type != NULL;
}

/* Re-imports dir/name.onnx and runs it on the same feeds, fetching the
 * ONNX outputs (named as the fetches), against flowgraph's outputs of the
 * graph that was exported: |got - want| <= tol (1 + |want|) elementwise. */
static inline void ox_round_trip(const char *name, const fg_feed *feeds, int n_feeds,
                                 const char *const *fetches, int n, fg_tensor *const *want,
                                 double tol) {
  if (!ox_importer_maps_ops()) {
    printf("SKIPPED: %s round trip: the importer's op mappers are not in this build\n", name);
    fgt_skipped = 1;
    return;
  }
  fg_status *st = fg_status_new();
  fg_graph *back = fg_onnx_load(ox_path(name, ".onnx"), NULL, st);
  if (!back) {
    FG_FAIL_AT("%s: re-import: %s: %s", name, fg_code_name(fg_status_code(st)),
               fg_status_message(st));
  } else {
    fg_tensor *got[OX_MAX] = {0};
    if (ox_run(back, feeds, n_feeds, fetches, n, got) == 0)
      for (int k = 0; k < n; k++) {
        char what[300];
        snprintf(what, sizeof what, "%s round trip output %d (%s)", name, k, fetches[k]);
        ox_compare(what, got[k], want[k], tol, tol);
        fg_tensor_free(got[k]);
      }
  }
  fg_graph_free(back);
  fg_status_free(st);
}

/* Exports g's `fetches` as dir/name.onnx at `opset` (0: the default,
 * checked as 17), writes the feeds beside it, has Python check and
 * evaluate the file, and compares its outputs with flowgraph's run of g.
 * With rt_tol >= 0, then re-imports the file and checks the round trip
 * (ox_round_trip) within rt_tol. */
static inline void ox_check(fg_graph *g, const char *name, const fg_feed *feeds, int n_feeds,
                            const char *const *fetches, int n, int opset, double rtol, double atol,
                            double rt_tol) {
  fg_status *st = fg_status_new();
  fg_onnx_export_options o;
  fg_onnx_export_options_init(&o);
  o.opset = opset, o.fetches = fetches, o.n_fetches = n;
  if (fg_onnx_save(g, ox_path(name, ".onnx"), &o, st) != 0) {
    FG_FAIL_AT("%s: export: %s: %s", name, fg_code_name(fg_status_code(st)), fg_status_message(st));
    fg_status_free(st);
    return;
  }
  for (int i = 0; i < n_feeds; i++)
    FG_REQUIRE(fg_npy_write(ox_in_path(name, feeds[i].name), feeds[i].tensor, st) == 0);
  fg_tensor *outs[OX_MAX] = {0};
  FG_REQUIRE(n <= OX_MAX);
  if (ox_run(g, feeds, n_feeds, fetches, n, outs) == 0) {
    int rc = ox_python(name, opset ? opset : 17);
    FG_CHECK_PYTHON(rc);
    for (int k = 0; rc == 0 && k < n; k++) {
      char suffix[32], what[300];
      snprintf(suffix, sizeof suffix, ".out.%d.npy", k);
      snprintf(what, sizeof what, "%s output %d (%s)", name, k, fetches[k]);
      fg_tensor *want = fg_npy_read(ox_path(name, suffix), st);
      if (!want)
        FG_FAIL_AT("%s: %s", what, fg_status_message(st));
      else
        ox_compare(what, outs[k], want, rtol, atol);
      fg_tensor_free(want);
    }
    if (rt_tol >= 0) ox_round_trip(name, feeds, n_feeds, fetches, n, outs, rt_tol);
  }
  for (int k = 0; k < n; k++)
    fg_tensor_free(outs[k]);
  fg_status_free(st);
}

/* A tensor of `dtype` with n values given as doubles. */
static inline fg_tensor *ox_tensor(fg_dtype dtype, int rank, const int64_t *dims, const double *v) {
  fg_tensor *t = fg_tensor_new(dtype, rank, dims, NULL);
  if (!t) return NULL;
  void *d = fg_tensor_data(t);
  for (int64_t i = 0; i < fg_tensor_num_elements(t); i++) {
    switch (dtype) {
    case FG_F32: ((float *)d)[i] = (float)v[i]; break;
    case FG_F64: ((double *)d)[i] = v[i]; break;
    case FG_I32: ((int32_t *)d)[i] = (int32_t)v[i]; break;
    case FG_I64: ((int64_t *)d)[i] = (int64_t)v[i]; break;
    default: ((uint8_t *)d)[i] = v[i] != 0; break;
    }
  }
  return t;
}

/* A constant node holding those values. */
static inline fg_output ox_const(fg_graph *g, fg_dtype dtype, int rank, const int64_t *dims,
                                 const double *v) {
  fg_tensor *t = ox_tensor(dtype, rank, dims, v);
  fg_output o = fg_constant(g, NULL, t);
  fg_tensor_free(t);
  return o;
}

/* A deterministic f32 tensor in [lo, hi) (splitmix64 of `seed`). */
static inline fg_tensor *ox_random(int rank, const int64_t *dims, double lo, double hi,
                                   uint64_t seed) {
  fg_tensor *t = fg_tensor_new(FG_F32, rank, dims, NULL);
  if (!t) return NULL;
  float *d = fg_tensor_data(t);
  for (int64_t i = 0; i < fg_tensor_num_elements(t); i++) {
    uint64_t z = (seed += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    d[i] = (float)(lo + (hi - lo) * (double)(z >> 40) * 0x1p-24);
  }
  return t;
}

/* A variable holding a random f32 tensor. */
static inline fg_output ox_var(fg_graph *g, const char *name, int rank, const int64_t *dims,
                               double lo, double hi, uint64_t seed) {
  fg_tensor *t = ox_random(rank, dims, lo, hi, seed);
  fg_output v = fg_variable(g, name, t);
  fg_tensor_free(t);
  return v;
}

/* Expects export of `fetches` at `opset` to fail with `code` and a message
 * holding every needle (NULL-terminated). */
static inline void ox_expect_error(const fg_graph *g, const char *const *fetches, int n, int opset,
                                   fg_code code, const char *const *needles) {
  fg_status *st = fg_status_new();
  fg_onnx_export_options o;
  fg_onnx_export_options_init(&o);
  o.opset = opset, o.fetches = fetches, o.n_fetches = n;
  void *data = (void *)1;
  size_t size = 1;
  FG_CHECK_INT(fg_onnx_save_memory(g, &data, &size, &o, st), -1);
  FG_CHECK(data == NULL && size == 0);
  FG_CHECK_STR(fg_code_name(fg_status_code(st)), fg_code_name(code));
  for (int i = 0; needles[i]; i++)
    FG_CHECK_STR_CONTAINS(fg_status_message(st), needles[i]);
  fg_status_free(st);
}

#endif
