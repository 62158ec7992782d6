/* .npy reading and writing (schema/npy.c): round trips, hand-made
 * headers for format 1.0/2.0/3.0, files written by NumPy
 * (tests/gen/gen_npy_fixtures.py) and every malformed-file class of F20. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fgtest.h"
#include "flowgraph/tensor.h"

#define NPY_DIR FG_TEST_DATA_DIR "/npy"
#define SP10    "          "

/* ---- helpers ------------------------------------------------------------ */

static char tmpdir[256];

static const char *make_tmpdir(void) { return fgt_mkdtemp(tmpdir, sizeof tmpdir, "fg_npy"); }

static unsigned char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char *buf = malloc(1 << 16);
  *n = buf ? fread(buf, 1, 1 << 16, f) : 0;
  fclose(f);
  return buf;
}

/* Reads `bytes` both from memory and from a file; returns the file's
 * tensor (the memory one must agree) or NULL with `st` set by the file read. */
static fg_tensor *read_both(const void *bytes, size_t n, fg_status *st, char *path_out) {
  fg_status *ms = fg_status_new();
  fg_tensor *tm = fg_npy_read_memory(bytes, n, ms);
  snprintf(path_out, 512, "%s/case.npy", tmpdir);
  if (fgt_write_file(path_out, bytes, n) != 0) {
    fg_tensor_free(tm);
    fg_status_free(ms);
    return NULL;
  }
  fg_tensor *tf = fg_npy_read(path_out, st);
  FG_CHECK_INT(tm != NULL, tf != NULL);
  FG_CHECK_INT(fg_status_code(ms), fg_status_code(st));
  if (tm && tf) {
    FG_CHECK_INT(fg_tensor_num_bytes(tm), fg_tensor_num_bytes(tf));
    FG_CHECK(memcmp(fg_tensor_data(tm), fg_tensor_data(tf), fg_tensor_num_bytes(tf)) == 0);
  }
  fg_tensor_free(tm);
  fg_status_free(ms);
  return tf;
}

/* A malformed file: FG_FORMAT_ERROR from memory and from a file, and the
 * file's message names the file and contains `problem`. */
static void check_bad(const void *bytes, size_t n, const char *problem) {
  FG_REQUIRE(make_tmpdir());
  fg_status *st = fg_status_new();
  char path[512];
  fg_tensor *t = read_both(bytes, n, st, path);
  FG_CHECK(t == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_FORMAT_ERROR);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), path);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), problem);
  fg_tensor_free(t);
  fg_status_free(st);
  fgt_rmtree(tmpdir);
}

static void check_bad_fixture(const char *name, const char *problem) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", NPY_DIR, name);
  fg_status *st = fg_status_new();
  fg_tensor *t = fg_npy_read(path, st);
  FG_CHECK(t == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_FORMAT_ERROR);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), name);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), problem);
  fg_tensor_free(t);
  fg_status_free(st);
}

/* Writes `t`, reads it back, checks dtype, shape and bytes. */
static void round_trip(const fg_tensor *t) {
  FG_REQUIRE(t);
  FG_REQUIRE(make_tmpdir());
  char path[512];
  snprintf(path, sizeof path, "%s/rt.npy", tmpdir);
  fg_status *st = fg_status_new();
  FG_CHECK_INT(fg_npy_write(path, t, st), 0);
  FG_CHECK_INT(fg_status_code(st), FG_OK);
  FG_CHECK_INT(fgt_count_entries(tmpdir), 1); /* no temporary left behind */
  fg_tensor *r = fg_npy_read(path, st);
  FG_CHECK_INT(fg_status_code(st), FG_OK);
  if (r) {
    FG_CHECK_INT(fg_tensor_dtype(r), fg_tensor_dtype(t));
    FG_CHECK_INT(fg_tensor_rank(r), fg_tensor_rank(t));
    for (int i = 0; i < fg_tensor_rank(t); i++)
      FG_CHECK_INT(fg_tensor_dim(r, i), fg_tensor_dim(t, i));
    FG_CHECK_INT(fg_tensor_num_bytes(r), fg_tensor_num_bytes(t));
    if (fg_tensor_num_bytes(t))
      FG_CHECK(memcmp(fg_tensor_data(r), fg_tensor_data(t), fg_tensor_num_bytes(t)) == 0);
  }
  /* Data starts on a 64-byte boundary, as NumPy writes it. */
  size_t n = 0;
  unsigned char *bytes = read_file(path, &n);
  if (bytes) {
    FG_CHECK_INT((n - fg_tensor_num_bytes(t)) % 64, 0);
    FG_CHECK_INT(bytes[n - fg_tensor_num_bytes(t) - 1], '\n');
  }
  free(bytes);
  fg_tensor_free(r);
  fg_status_free(st);
  fgt_rmtree(tmpdir);
}

static fg_tensor *tensor_of(fg_dtype dt, int rank, const int64_t *dims, const void *data,
                            size_t bytes) {
  fg_status *st = fg_status_new();
  fg_tensor *t = fg_tensor_from_data(dt, rank, dims, data, bytes, st);
  fg_status_free(st);
  return t;
}

static fg_tensor *read_fixture(const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", NPY_DIR, name);
  fg_status *st = fg_status_new();
  fg_tensor *t = fg_npy_read(path, st);
  if (!t) fprintf(stderr, "%s: %s\n", path, fg_status_message(st));
  fg_status_free(st);
  return t;
}

static void check_shape(const fg_tensor *t, int rank, const int64_t *dims) {
  FG_CHECK_INT(fg_tensor_rank(t), rank);
  for (int i = 0; i < rank; i++)
    FG_CHECK_INT(fg_tensor_dim(t, i), dims[i]);
}

/* ---- round trips ---------------------------------------------------------- */

/* fg_npy_write through a symbolic link writes the file it names, and to
 * a device (a copy of /dev/full: ENOSPC) writes the device; neither entry is
 * replaced by the write's rename. */
FG_TEST(npy_write_to_links_and_devices, "badinput") {
  FG_REQUIRE(make_tmpdir());
  char target[300], link[300];
  snprintf(target, sizeof target, "%s/real.npy", tmpdir);
  snprintf(link, sizeof link, "%s/link.npy", tmpdir);
  FG_REQUIRE(symlink("real.npy", link) == 0);
  const float v[3] = {1.5f, -2, 0.25f};
  int64_t d[1] = {3};
  fg_tensor *t = tensor_of(FG_F32, 1, d, v, sizeof v);
  fg_status *st = fg_status_new();
  FG_CHECK(fg_npy_write(link, t, st) == 0);
  struct stat sb;
  FG_CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode));
  fg_tensor *back = fg_npy_read(target, st);
  FG_REQUIRE(back);
  FG_CHECK(memcmp(fg_tensor_data(back), v, sizeof v) == 0);
  fg_tensor_free(back);
  /* Once the file exists, a write through the link lands beside it and is
   * renamed over it (a new inode), so it appears whole or not at all. */
  struct stat before;
  FG_REQUIRE(stat(target, &before) == 0);
  FG_CHECK(fg_npy_write(link, t, st) == 0);
  FG_CHECK(stat(target, &sb) == 0 && sb.st_ino != before.st_ino);
  FG_CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode));
  FG_CHECK_INT(fgt_count_entries(tmpdir), 2);
  char full_dev[300];
  snprintf(full_dev, sizeof full_dev, "%s/full", tmpdir);
  if (fgt_make_char_device(full_dev, 1, 7)) { /* a copy of /dev/full, as root */
    FG_CHECK(fg_npy_write(full_dev, t, st) != 0);
    FG_CHECK_INT(fg_status_code(st), FG_IO_ERROR);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), "full: write failed: No space left on device");
    FG_CHECK(stat(full_dev, &sb) == 0 && S_ISCHR(sb.st_mode));
  }
  fg_tensor_free(t);
  fg_status_free(st);
  fgt_rmtree(tmpdir);
}

FG_TEST(npy_roundtrip_f32, "") {
  float v[6] = {0.f, -1.5f, 3.25f, 1e-30f, -0.f, 65504.f};
  int64_t d[2] = {2, 3};
  fg_tensor *t = tensor_of(FG_F32, 2, d, v, sizeof v);
  round_trip(t);
  fg_tensor_free(t);
}

FG_TEST(npy_roundtrip_f64, "") {
  double v[3] = {1e300, -2.5, 0.1};
  int64_t d[1] = {3};
  fg_tensor *t = tensor_of(FG_F64, 1, d, v, sizeof v);
  round_trip(t);
  fg_tensor_free(t);
}

FG_TEST(npy_roundtrip_i32, "") {
  int32_t v[4] = {INT32_MIN, -1, 0, INT32_MAX};
  int64_t d[3] = {2, 1, 2};
  fg_tensor *t = tensor_of(FG_I32, 3, d, v, sizeof v);
  round_trip(t);
  fg_tensor_free(t);
}

FG_TEST(npy_roundtrip_i64, "") {
  int64_t v[2] = {INT64_MIN, INT64_MAX};
  int64_t d[2] = {1, 2};
  fg_tensor *t = tensor_of(FG_I64, 2, d, v, sizeof v);
  round_trip(t);
  fg_tensor_free(t);
}

FG_TEST(npy_roundtrip_bool, "") {
  unsigned char v[5] = {1, 0, 0, 1, 1};
  int64_t d[1] = {5};
  fg_tensor *t = tensor_of(FG_BOOL, 1, d, v, sizeof v);
  round_trip(t);
  fg_tensor_free(t);
}

FG_TEST(npy_roundtrip_rank0, "") {
  double v = -7.125;
  fg_tensor *t = tensor_of(FG_F64, 0, NULL, &v, sizeof v);
  round_trip(t);
  fg_tensor_free(t);
}

FG_TEST(npy_roundtrip_rank8, "") {
  int32_t v[16];
  for (int i = 0; i < 16; i++)
    v[i] = i * i - 7;
  int64_t d[8] = {1, 2, 1, 2, 1, 2, 2, 1};
  fg_tensor *t = tensor_of(FG_I32, 8, d, v, sizeof v);
  round_trip(t);
  fg_tensor_free(t);
}

FG_TEST(npy_roundtrip_zero_size, "") {
  int64_t d[2] = {0, 3};
  fg_status *st = fg_status_new();
  fg_tensor *t = fg_tensor_new(FG_F32, 2, d, st);
  round_trip(t);
  fg_tensor_free(t);
  fg_status_free(st);
}

/* Our writer must produce byte-identical files to NumPy's for the same
 * arrays: the fixtures are NumPy's bytes. */
static void check_same_as_numpy(const char *fixture, fg_dtype dt, int rank, const int64_t *dims,
                                const void *data, size_t bytes) {
  FG_REQUIRE(make_tmpdir());
  fg_tensor *t = tensor_of(dt, rank, dims, data, bytes);
  FG_REQUIRE(t);
  char path[512], fpath[512];
  snprintf(path, sizeof path, "%s/ours.npy", tmpdir);
  snprintf(fpath, sizeof fpath, "%s/%s", NPY_DIR, fixture);
  fg_status *st = fg_status_new();
  FG_CHECK_INT(fg_npy_write(path, t, st), 0);
  size_t na = 0, nb = 0;
  unsigned char *a = read_file(path, &na), *b = read_file(fpath, &nb);
  FG_CHECK(a && b);
  FG_CHECK_INT(na, nb);
  if (a && b && na == nb) FG_CHECK(memcmp(a, b, na) == 0);
  free(a);
  free(b);
  fg_tensor_free(t);
  fg_status_free(st);
  fgt_rmtree(tmpdir);
}

FG_TEST(npy_write_matches_numpy_bytes, "") {
  float f[6] = {0, 0.5f, 1, 1.5f, 2, 2.5f};
  int64_t d23[2] = {2, 3};
  check_same_as_numpy("f32_2x3.npy", FG_F32, 2, d23, f, sizeof f);
  double s = 3.25;
  check_same_as_numpy("f64_scalar.npy", FG_F64, 0, NULL, &s, sizeof s);
  int64_t i[3] = {-(INT64_C(1) << 40), 0, INT64_C(1) << 62};
  int64_t d3[1] = {3};
  check_same_as_numpy("i64_3.npy", FG_I64, 1, d3, i, sizeof i);
  unsigned char b[5] = {1, 0, 1, 1, 0};
  int64_t d5[1] = {5};
  check_same_as_numpy("bool_5.npy", FG_BOOL, 1, d5, b, sizeof b);
}

/* NumPy itself reads what we write (when /usr/bin/python3 is there). */
FG_TEST(npy_numpy_reads_our_file, "") {
#ifdef FG_PYTHON
  if (access(FG_PYTHON, X_OK) != 0) FG_SKIP("%s not found", FG_PYTHON);
  FG_REQUIRE(make_tmpdir());
  int32_t v[6] = {-3, -2, -1, 0, 1, 2};
  int64_t d[2] = {3, 2};
  fg_tensor *t = tensor_of(FG_I32, 2, d, v, sizeof v);
  FG_REQUIRE(t);
  char path[512], cmd[2048];
  snprintf(path, sizeof path, "%s/ours.npy", tmpdir);
  fg_status *st = fg_status_new();
  FG_CHECK_INT(fg_npy_write(path, t, st), 0);
  snprintf(cmd, sizeof cmd,
           "%s -c \"import numpy as np, sys; a = np.load('%s'); "
           "sys.exit(0 if a.dtype == np.dtype('<i4') and a.shape == (3, 2) and "
           "(a == np.arange(-3, 3).reshape(3, 2)).all() else 1)\" 2>/dev/null",
           FG_PYTHON, path);
  int rc = system(cmd);
  if (rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 1 &&
      system(FG_PYTHON " -c 'import numpy' 2>/dev/null") != 0) {
    fg_tensor_free(t);
    fg_status_free(st);
    fgt_rmtree(tmpdir);
    FG_SKIP("NumPy is not importable by %s", FG_PYTHON);
  }
  FG_CHECK(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
  fg_tensor_free(t);
  fg_status_free(st);
  fgt_rmtree(tmpdir);
#else
  FG_SKIP("FG_PYTHON not defined");
#endif
}

/* ---- hand-made headers ---------------------------------------------------- */

/* v1.0: 10-byte prefix, 2-byte header length 118 (0x76), dict, padding to
 * 128 bytes, '\n'; data: i4 [1, -2, 3]. */
static const char v1_bytes[] =
    "\x93NUMPY\x01\x00\x76\x00"
    "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }" SP10 SP10 SP10 SP10 SP10 SP10 "\n"
    "\x01\x00\x00\x00"
    "\xfe\xff\xff\xff"
    "\x03\x00\x00\x00";

FG_TEST(npy_read_v1_handmade, "") {
  FG_REQUIRE(sizeof v1_bytes - 1 == 128 + 12);
  FG_REQUIRE(make_tmpdir());
  fg_status *st = fg_status_new();
  char path[512];
  fg_tensor *t = read_both(v1_bytes, sizeof v1_bytes - 1, st, path);
  FG_CHECK_INT(fg_status_code(st), FG_OK);
  if (t) {
    int64_t d[1] = {3};
    FG_CHECK_INT(fg_tensor_dtype(t), FG_I32);
    check_shape(t, 1, d);
    const int32_t *v = fg_tensor_data(t);
    FG_CHECK_INT(v[0], 1);
    FG_CHECK_INT(v[1], -2);
    FG_CHECK_INT(v[2], 3);
  }
  fg_tensor_free(t);
  fg_status_free(st);
  fgt_rmtree(tmpdir);
}

/* v2.0: 12-byte prefix, 4-byte header length 60 (no alignment padding,
 * just '\n'); data: f8 [[1.0], [-0.5]]. */
static const char v2_bytes[] = "\x93NUMPY\x02\x00\x3c\x00\x00\x00"
                               "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 1), }\n"
                               "\x00\x00\x00\x00\x00\x00\xf0\x3f"
                               "\x00\x00\x00\x00\x00\x00\xe0\xbf";

FG_TEST(npy_read_v2_handmade, "") {
  FG_REQUIRE(sizeof v2_bytes - 1 == 12 + 60 + 16);
  FG_REQUIRE(make_tmpdir());
  fg_status *st = fg_status_new();
  char path[512];
  fg_tensor *t = read_both(v2_bytes, sizeof v2_bytes - 1, st, path);
  FG_CHECK_INT(fg_status_code(st), FG_OK);
  if (t) {
    int64_t d[2] = {2, 1};
    FG_CHECK_INT(fg_tensor_dtype(t), FG_F64);
    check_shape(t, 2, d);
    const double *v = fg_tensor_data(t);
    FG_CHECK(v[0] == 1.0);
    FG_CHECK(v[1] == -0.5);
  }
  fg_tensor_free(t);
  fg_status_free(st);
  fgt_rmtree(tmpdir);
}

/* v3.0: same prefix as 2.0 (UTF-8 header), length 116 (0x74), padded to
 * 128; data: one bool, rank 0. */
static const char v3_bytes[] =
    "\x93NUMPY\x03\x00\x74\x00\x00\x00"
    "{'descr': '|b1', 'fortran_order': False, 'shape': (), }" SP10 SP10 SP10 SP10 SP10 SP10 "\n"
    "\x01";

FG_TEST(npy_read_v3_handmade_rank0, "") {
  FG_REQUIRE(sizeof v3_bytes - 1 == 129);
  FG_REQUIRE(make_tmpdir());
  fg_status *st = fg_status_new();
  char path[512];
  fg_tensor *t = read_both(v3_bytes, sizeof v3_bytes - 1, st, path);
  FG_CHECK_INT(fg_status_code(st), FG_OK);
  if (t) {
    FG_CHECK_INT(fg_tensor_dtype(t), FG_BOOL);
    FG_CHECK_INT(fg_tensor_rank(t), 0);
    FG_CHECK_INT(fg_tensor_num_elements(t), 1);
    FG_CHECK_INT(((const unsigned char *)fg_tensor_data(t))[0], 1);
  }
  fg_tensor_free(t);
  fg_status_free(st);
  fgt_rmtree(tmpdir);
}

/* Keys in another order, double quotes, no spaces, tabs, no trailing
 * comma, shape before descr; i8 [[7, -8]]. */
static const char odd_dict_bytes[] = "\x93NUMPY\x01\x00\x3a\x00"
                                     "{\"shape\":(1,2),\t'fortran_order':False,'descr':'<i8'}"
                                     "  \t  \n"
                                     "\x07\x00\x00\x00\x00\x00\x00\x00"
                                     "\xf8\xff\xff\xff\xff\xff\xff\xff";

FG_TEST(npy_read_dict_any_order_and_spacing, "") {
  FG_REQUIRE(sizeof odd_dict_bytes - 1 == 10 + 58 + 16);
  FG_REQUIRE(make_tmpdir());
  fg_status *st = fg_status_new();
  char path[512];
  fg_tensor *t = read_both(odd_dict_bytes, sizeof odd_dict_bytes - 1, st, path);
  FG_CHECK_INT(fg_status_code(st), FG_OK);
  if (t) {
    int64_t d[2] = {1, 2};
    FG_CHECK_INT(fg_tensor_dtype(t), FG_I64);
    check_shape(t, 2, d);
    FG_CHECK_INT(((const int64_t *)fg_tensor_data(t))[0], 7);
    FG_CHECK_INT(((const int64_t *)fg_tensor_data(t))[1], -8);
  }
  fg_tensor_free(t);
  fg_status_free(st);
  fgt_rmtree(tmpdir);
}

/* ---- files written by NumPy ----------------------------------------------- */

FG_TEST(npy_numpy_fixture_f32, "") {
  fg_tensor *t = read_fixture("f32_2x3.npy");
  FG_REQUIRE(t);
  int64_t d[2] = {2, 3};
  FG_CHECK_INT(fg_tensor_dtype(t), FG_F32);
  check_shape(t, 2, d);
  for (int i = 0; i < 6; i++)
    FG_CHECK(((const float *)fg_tensor_data(t))[i] == 0.5f * (float)i);
  fg_tensor_free(t);
}

FG_TEST(npy_numpy_fixture_f64, "") {
  fg_tensor *t = read_fixture("f64_4.npy");
  FG_REQUIRE(t);
  int64_t d[1] = {4};
  FG_CHECK_INT(fg_tensor_dtype(t), FG_F64);
  check_shape(t, 1, d);
  const double *v = fg_tensor_data(t);
  FG_CHECK(v[0] == 1.5);
  FG_CHECK(v[1] == -2.25);
  FG_CHECK(v[2] == 1e300);
  FG_CHECK(v[3] == 0.0 && signbit(v[3]));
  fg_tensor_free(t);
}

FG_TEST(npy_numpy_fixture_i32, "") {
  fg_tensor *t = read_fixture("i32_2x2x2.npy");
  FG_REQUIRE(t);
  int64_t d[3] = {2, 2, 2};
  FG_CHECK_INT(fg_tensor_dtype(t), FG_I32);
  check_shape(t, 3, d);
  for (int i = 0; i < 8; i++)
    FG_CHECK_INT(((const int32_t *)fg_tensor_data(t))[i], i - 4);
  fg_tensor_free(t);
}

FG_TEST(npy_numpy_fixture_i64, "") {
  fg_tensor *t = read_fixture("i64_3.npy");
  FG_REQUIRE(t);
  int64_t d[1] = {3};
  FG_CHECK_INT(fg_tensor_dtype(t), FG_I64);
  check_shape(t, 1, d);
  const int64_t *v = fg_tensor_data(t);
  FG_CHECK_INT(v[0], -(INT64_C(1) << 40));
  FG_CHECK_INT(v[1], 0);
  FG_CHECK_INT(v[2], INT64_C(1) << 62);
  fg_tensor_free(t);
}

FG_TEST(npy_numpy_fixture_bool, "") {
  fg_tensor *t = read_fixture("bool_5.npy");
  FG_REQUIRE(t);
  int64_t d[1] = {5};
  static const unsigned char want[5] = {1, 0, 1, 1, 0};
  FG_CHECK_INT(fg_tensor_dtype(t), FG_BOOL);
  check_shape(t, 1, d);
  FG_CHECK(memcmp(fg_tensor_data(t), want, 5) == 0);
  fg_tensor_free(t);
}

FG_TEST(npy_numpy_fixture_scalar, "") {
  fg_tensor *t = read_fixture("f64_scalar.npy");
  FG_REQUIRE(t);
  FG_CHECK_INT(fg_tensor_dtype(t), FG_F64);
  FG_CHECK_INT(fg_tensor_rank(t), 0);
  FG_CHECK_INT(fg_tensor_num_elements(t), 1);
  FG_CHECK(((const double *)fg_tensor_data(t))[0] == 3.25);
  fg_tensor_free(t);
}

FG_TEST(npy_numpy_fixture_empty, "") {
  fg_tensor *t = read_fixture("f32_0x3.npy");
  FG_REQUIRE(t);
  int64_t d[2] = {0, 3};
  check_shape(t, 2, d);
  FG_CHECK_INT(fg_tensor_num_elements(t), 0);
  FG_CHECK_INT(fg_tensor_num_bytes(t), 0);
  fg_tensor_free(t);
}

FG_TEST(npy_numpy_fixture_rank8, "") {
  fg_tensor *t = read_fixture("f32_rank8.npy");
  FG_REQUIRE(t);
  int64_t d[8] = {1, 2, 1, 2, 1, 2, 1, 1};
  check_shape(t, 8, d);
  for (int i = 0; i < 8; i++)
    FG_CHECK(((const float *)fg_tensor_data(t))[i] == (float)i);
  fg_tensor_free(t);
}

FG_TEST(npy_numpy_fixture_v2_v3, "") {
  const char *names[2] = {"f32_v2.npy", "f32_v3.npy"};
  for (int k = 0; k < 2; k++) {
    fg_tensor *t = read_fixture(names[k]);
    FG_REQUIRE(t);
    int64_t d[1] = {4};
    check_shape(t, 1, d);
    for (int i = 0; i < 4; i++)
      FG_CHECK(((const float *)fg_tensor_data(t))[i] == (float)i);
    fg_tensor_free(t);
  }
}

/* ---- F20: malformed files --------------------------------------------------- */

FG_TEST(npy_bad_magic, "badinput") {
  static const char b[] = "\x93NUMPZ\x01\x00\x10\x00{'descr': '<f4'}";
  check_bad(b, sizeof b - 1, "bad magic");
  static const char text[] = "hello, this is a text file, not an array\n";
  check_bad(text, sizeof text - 1, "bad magic");
}

FG_TEST(npy_bad_version, "badinput") {
  static const char b[] = "\x93NUMPY\x04\x00\x3c\x00\x00\x00"
                          "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 1), }\n";
  check_bad(b, sizeof b - 1, "version 4.0");
}

FG_TEST(npy_bad_dict_syntax, "badinput") {
  /* Unclosed dict, then a dict whose value is not a literal we know. */
  static const char a[] = "\x93NUMPY\x01\x00\x2a\x00"
                          "{'descr': '<f4', 'fortran_order': False, \n";
  check_bad(a, sizeof a - 1, "malformed header");
  static const char b[] = "\x93NUMPY\x01\x00\x3a\x00"
                          "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,), }\n\x00\x00\x00";
  check_bad(b, sizeof b - 1, "fortran_order");
  static const char c[] = "\x93NUMPY\x01\x00\x09\x00"
                          "[1, 2]  \n";
  check_bad(c, sizeof c - 1, "malformed header");
}

FG_TEST(npy_bad_dict_keys, "badinput") {
  static const char missing[] = "\x93NUMPY\x01\x00\x2b\x00"
                                "{'descr': '<f4', 'fortran_order': False}  \n";
  check_bad(missing, sizeof missing - 1, "lacks the key 'shape'");
  static const char unknown[] = "\x93NUMPY\x01\x00\x41\x00"
                                "{'descr': '<f4', 'fortran_order': False, 'shape': (), 'x': 1}   \n"
                                "\x00\x00\x00\x00";
  check_bad(unknown, sizeof unknown - 1, "unexpected key 'x'");
  static const char dup[] =
      "\x93NUMPY\x01\x00\x46\x00"
      "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': ()}\n"
      "\x00\x00\x00\x00";
  check_bad(dup, sizeof dup - 1, "duplicate key");
}

FG_TEST(npy_bad_shape_syntax, "badinput") {
  /* "(3)" is an int in Python, not a tuple. */
  static const char b[] = "\x93NUMPY\x01\x00\x3c\x00"
                          "{'descr': '<f4', 'fortran_order': False, 'shape': (3), }   \n"
                          "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00";
  check_bad(b, sizeof b - 1, "not a tuple");
  static const char c[] = "\x93NUMPY\x01\x00\x3c\x00"
                          "{'descr': '<f4', 'fortran_order': False, 'shape': [3], }   \n"
                          "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00";
  check_bad(c, sizeof c - 1, "'shape'");
}

FG_TEST(npy_bad_big_endian, "badinput") {
  static const char b[] = "\x93NUMPY\x01\x00\x3c\x00"
                          "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }  \n"
                          "\x3f\x80\x00\x00";
  check_bad(b, sizeof b - 1, "dtype '>f4' is big-endian");
  check_bad_fixture("bad_big_endian.npy", "big-endian");
}

FG_TEST(npy_bad_fortran_order, "badinput") {
  check_bad_fixture("bad_fortran.npy", "fortran_order is True");
  static const char b[] = "\x93NUMPY\x01\x00\x3b\x00"
                          "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 1), }\n"
                          "\x00\x00\x00\x00";
  check_bad(b, sizeof b - 1, "fortran_order");
}

FG_TEST(npy_bad_unsupported_dtype, "badinput") {
  check_bad_fixture("bad_u2.npy", "unsupported dtype '<u2'");
  check_bad_fixture("bad_c8.npy", "unsupported dtype '<c8'");
  check_bad_fixture("bad_object.npy", "object dtype");
  check_bad_fixture("bad_structured.npy", "structured dtype");
}

FG_TEST(npy_bad_truncated_header, "badinput") {
  /* The header length says 118 bytes; only 20 follow. */
  check_bad(v1_bytes, 30, "truncated header");
  /* The file ends inside the magic / the prefix. */
  check_bad(v1_bytes, 4, "truncated header");
  check_bad(v2_bytes, 10, "truncated header");
  check_bad("", 0, "empty file");
}

FG_TEST(npy_bad_truncated_data, "badinput") {
  check_bad(v1_bytes, sizeof v1_bytes - 1 - 1, "truncated data");
  check_bad(v2_bytes, sizeof v2_bytes - 1 - 8, "truncated data");
  check_bad(v3_bytes, sizeof v3_bytes - 1 - 1, "truncated data");
}

FG_TEST(npy_bad_trailing_data, "badinput") {
  char buf[sizeof v1_bytes + 4];
  memcpy(buf, v1_bytes, sizeof v1_bytes - 1);
  memcpy(buf + sizeof v1_bytes - 1, "\x04\x00\x00\x00", 4);
  check_bad(buf, sizeof v1_bytes - 1 + 4, "4 trailing bytes");
}

FG_TEST(npy_bad_shape_overflow, "badinput") {
  /* [2^32, 2^32, 4] f32: 2^66 bytes. */
  static const char b[] = "\x93NUMPY\x01\x00\x51\x00"
                          "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, "
                          "4294967296, 4), }\n";
  check_bad(b, sizeof b - 1, "overflows");
  /* A single dimension with more digits than 64 bits hold. */
  static const char c[] = "\x93NUMPY\x01\x00\x50\x00"
                          "{'descr': '<f4', 'fortran_order': False, 'shape': "
                          "(99999999999999999999999,), }\n";
  check_bad(c, sizeof c - 1, "does not fit in 64 bits");
}

FG_TEST(npy_bad_negative_dim, "badinput") {
  static const char b[] = "\x93NUMPY\x01\x00\x3d\x00"
                          "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1), }\n";
  check_bad(b, sizeof b - 1, "negative");
}

FG_TEST(npy_bad_rank9, "badinput") {
  static const char b[] = "\x93NUMPY\x01\x00\x4b\x00"
                          "{'descr': '|b1', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), "
                          "}  \n\x01";
  check_bad(b, sizeof b - 1, "more than 8 dimensions");
}

FG_TEST(npy_bad_bool_value, "badinput") {
  static const char b[] = "\x93NUMPY\x01\x00\x3d\x00"
                          "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }   \n"
                          "\x01\x02\x00";
  check_bad(b, sizeof b - 1, "byte value 2");
}

FG_TEST(npy_bad_huge_header_length, "badinput") {
  /* A 4 GiB header length must be refused before any allocation. */
  static const char b[] = "\x93NUMPY\x02\x00\xff\xff\xff\xff{'descr': '<f4'}";
  check_bad(b, sizeof b - 1, "header length");
}

FG_TEST(npy_missing_file, "badinput") {
  fg_status *st = fg_status_new();
  const char *p = "/nonexistent-dir/x.npy";
  fg_tensor *t = fg_npy_read(p, st);
  FG_CHECK(t == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_NOT_FOUND);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), p);
  fg_tensor_free(t);
  fg_status_free(st);
}

FG_TEST(npy_directory_path, "badinput") {
  fg_status *st = fg_status_new();
  fg_tensor *t = fg_npy_read(NPY_DIR, st);
  FG_CHECK(t == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_IO_ERROR);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "directory");
  fg_tensor_free(t);
  fg_status_free(st);
}

FG_TEST(npy_null_arguments, "badinput") {
  fg_status *st = fg_status_new();
  FG_CHECK(fg_npy_read(NULL, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK(fg_npy_read_memory(NULL, 10, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_INT(fg_npy_write("/tmp/x.npy", NULL, st), -1);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK(fg_npy_read_memory(NULL, 0, st) == NULL); /* empty: a format error */
  FG_CHECK_INT(fg_status_code(st), FG_FORMAT_ERROR);
  fg_status_free(st);
}

FG_TEST(npy_write_unwritable_leaves_nothing, "badinput") {
  FG_REQUIRE(make_tmpdir());
  float v = 1.f;
  fg_tensor *t = tensor_of(FG_F32, 0, NULL, &v, sizeof v);
  FG_REQUIRE(t);
  fg_status *st = fg_status_new();
  char path[600];
  /* A missing directory. */
  snprintf(path, sizeof path, "%s/no-such-dir/out.npy", tmpdir);
  FG_CHECK_INT(fg_npy_write(path, t, st), -1);
  FG_CHECK_INT(fg_status_code(st), FG_IO_ERROR);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), path);
  /* A path that is an existing directory: the rename fails, the temporary
   * file must be removed. */
  snprintf(path, sizeof path, "%s/adir", tmpdir);
  FG_REQUIRE(mkdir(path, 0755) == 0);
  FG_CHECK_INT(fg_npy_write(path, t, st), -1);
  FG_CHECK_INT(fg_status_code(st), FG_IO_ERROR);
  FG_CHECK_INT(fgt_count_entries(tmpdir), 1);
  FG_CHECK_INT(fgt_count_entries(path), 0);
  fg_tensor_free(t);
  fg_status_free(st);
  fgt_rmtree(tmpdir);
}

FG_TEST(npy_overwrite_existing_file, "") {
  FG_REQUIRE(make_tmpdir());
  char path[600];
  snprintf(path, sizeof path, "%s/x.npy", tmpdir);
  FG_REQUIRE(fgt_write_file(path, "old contents", 12) == 0);
  int32_t v[2] = {5, 6};
  int64_t d[1] = {2};
  fg_tensor *t = tensor_of(FG_I32, 1, d, v, sizeof v);
  FG_REQUIRE(t);
  fg_status *st = fg_status_new();
  FG_CHECK_INT(fg_npy_write(path, t, st), 0);
  fg_tensor *r = fg_npy_read(path, st);
  FG_CHECK(r != NULL);
  if (r) FG_CHECK_INT(((const int32_t *)fg_tensor_data(r))[1], 6);
  FG_CHECK_INT(fgt_count_entries(tmpdir), 1);
  fg_tensor_free(r);
  fg_tensor_free(t);
  fg_status_free(st);
  fgt_rmtree(tmpdir);
}

/* Thousands of deterministic single- and multi-byte mutations of a valid
 * file: each read either succeeds with a consistent tensor or fails with
 * FG_FORMAT_ERROR; never a crash (run under ASan/UBSan in CI). */
FG_TEST(npy_mutations_never_crash, "badinput") {
  unsigned char buf[sizeof v1_bytes];
  uint32_t s = 2463534242u;
  int ok = 0, bad = 0;
  fg_status *st = fg_status_new();
  for (int iter = 0; iter < 5000; iter++) {
    size_t n = sizeof v1_bytes - 1;
    memcpy(buf, v1_bytes, n);
    int flips = 1 + iter % 4;
    for (int k = 0; k < flips; k++) {
      s ^= s << 13, s ^= s >> 17, s ^= s << 5;
      /* Mostly the prefix and dict, where the parser lives. */
      size_t pos = (s >> 8) % (iter % 3 ? 80 : n);
      buf[pos] = (unsigned char)(s & 0xff);
    }
    if (iter % 7 == 0) n = (s >> 4) % n; /* truncations too */
    fg_tensor *t = fg_npy_read_memory(buf, n, st);
    if (t) {
      ok++;
      FG_CHECK_INT(fg_status_code(st), FG_OK);
      FG_CHECK(fg_tensor_num_bytes(t) <= n);
    } else {
      bad++;
      FG_CHECK_INT(fg_status_code(st), FG_FORMAT_ERROR);
      FG_CHECK(strlen(fg_status_message(st)) > 0);
    }
    fg_tensor_free(t);
  }
  FG_CHECK(bad > 0);
  FG_CHECK_INT(ok + bad, 5000);
  fg_status_free(st);
}
