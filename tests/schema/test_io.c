/* .fgb and JSON round trips through the public API: structure, attribute
 * values, constant bytes, 64-byte buffer alignment, metadata, atomic saves,
 * and that a loaded graph computes what the original does. Reference values
 * are worked out by hand in the comments. */
#include <flowgraph/flowgraph.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fgtest.h"
#include "schema/fgb_internal.h"
#include "test_io_util.h"

/* Data with byte patterns that occur once in a file (the alignment test
 * looks for them). */
static const float W[6] = {1, 0, 0, 1, 1, 1};
static const float B[2] = {0.5f, -0.5f};
static const double F64[4] = {0.1, -2.5, 1e-300, 3.0};
static const int64_t I64[3] = {INT64_MIN, -1, INT64_MAX};
static const float T_ATTR[2] = {7.25f, -8.125f};
static const uint8_t BOOLS[3] = {0, 1, 1};

/* Float attribute values that 12 fixed decimals (FlatBuffers' text output)
 * would lose. */
static double float_attr_values(int i) {
  double v[5] = {0.1 + 0.2, -0.0, 1e300, 5e-324, 1e-20};
  return v[i];
}

static fg_tensor *tensor(fg_dtype dt, int rank, const int64_t *dims, const void *data, size_t n) {
  return fg_tensor_from_data(dt, rank, dims, data, n, NULL);
}

/* x [?,3] f32 -> y = x @ w + b (w constant, b variable) -> probs = softmax(y)
 * on cpu:1 -> rsum = sum(probs, axis 1); plus constants of every dtype and an
 * identity node carrying attributes of every type. */
static fg_graph *io_graph(void) {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {-1, 3}, wd[2] = {3, 2}, bd[1] = {2}, fd[2] = {2, 2}, id[1] = {3}, td[1] = {2};
  fg_tensor *wt = tensor(FG_F32, 2, wd, W, sizeof W), *bt = tensor(FG_F32, 1, bd, B, sizeof B);
  fg_tensor *ft = tensor(FG_F64, 2, fd, F64, sizeof F64),
            *it = tensor(FG_I64, 1, id, I64, sizeof I64);
  fg_tensor *tt = tensor(FG_F32, 1, td, T_ATTR, sizeof T_ATTR);
  fg_tensor *bo = tensor(FG_BOOL, 1, id, BOOLS, sizeof BOOLS);
  int32_t seven = 7;
  fg_tensor *sc = tensor(FG_I32, 0, NULL, &seven, sizeof seven);

  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output y = fg_add(g, fg_matmul(g, x, fg_constant(g, "w", wt), 0, 0), fg_variable(g, "b", bt));
  fg_set_name(g, y, "y");
  fg_output p = fg_set_name(g, fg_softmax(g, y, 1), "probs");
  fg_set_device(g, p, "cpu:1");
  int64_t axis = 1;
  fg_output r = fg_set_name(g, fg_reduce_sum(g, p, &axis, 1, 0), "rsum");
  fg_constant(g, "c_f64", ft);
  fg_constant(g, "c_i64", it);
  fg_constant(g, "c_bool", bo);
  fg_constant(g, "c_i32_scalar", sc);

  fg_attrs *a = fg_attrs_new();
  int64_t ints[3] = {1, -2, INT64_MAX};
  double floats[5];
  for (int i = 0; i < 5; i++)
    floats[i] = float_attr_values(i);
  fg_attrs_set_int(a, "_an_int", -42);
  fg_attrs_set_float(a, "_a_float", 1e-20);
  fg_attrs_set_string(a, "_a_string", "say \"hi\"\n\t\\ caf\xc3\xa9");
  fg_attrs_set_ints(a, "_some_ints", ints, 3);
  fg_attrs_set_floats(a, "_some_floats", floats, 5);
  fg_attrs_set_ints(a, "_no_ints", NULL, 0);
  fg_attrs_set_tensor(a, "_a_tensor", tt);
  fg_op(g, "identity", "with_attrs", &y, 1, a);
  fg_attrs_free(a);

  fg_graph_add_output(g, p);
  fg_graph_add_output(g, r);
  fg_graph_set_metadata(g, "description", "io test graph");
  fg_tensor_free(wt);
  fg_tensor_free(bt);
  fg_tensor_free(ft);
  fg_tensor_free(it);
  fg_tensor_free(tt);
  fg_tensor_free(bo);
  fg_tensor_free(sc);
  return g;
}

static int same_tensor(const fg_tensor *a, const fg_tensor *b) {
  if (fg_tensor_dtype(a) != fg_tensor_dtype(b) || fg_tensor_rank(a) != fg_tensor_rank(b) ||
      fg_tensor_num_bytes(a) != fg_tensor_num_bytes(b))
    return 0;
  for (int d = 0; d < fg_tensor_rank(a); d++)
    if (fg_tensor_dim(a, d) != fg_tensor_dim(b, d)) return 0;
  return memcmp(fg_tensor_data(a), fg_tensor_data(b), fg_tensor_num_bytes(a)) == 0;
}

/* Every attribute of node n in a equals the one in b, bit for bit. */
static void check_same_attrs(const fg_graph *a, const fg_graph *b, int n) {
  FG_CHECK_INT(fg_node_num_attrs(a, n), fg_node_num_attrs(b, n));
  for (int i = 0; i < fg_node_num_attrs(a, n); i++) {
    const char *name = fg_node_attr_name(a, n, i);
    FG_CHECK(strcmp(name, fg_node_attr_name(b, n, i)) == 0);
    fg_attr_type t = fg_node_attr_type(a, n, name);
    FG_CHECK_INT(t, fg_node_attr_type(b, n, name));
    int64_t ia = 0, ib = 1;
    double fa = 0, fb = 1;
    const char *sa = NULL, *sb = NULL;
    const int64_t *la = NULL, *lb = NULL;
    const double *da = NULL, *db = NULL;
    const fg_tensor *ta = NULL, *tb = NULL;
    int na = 0, nb = -1;
    switch (t) {
    case FG_ATTR_INT:
      fg_node_attr_int(a, n, name, &ia);
      fg_node_attr_int(b, n, name, &ib);
      FG_CHECK_INT(ia, ib);
      break;
    case FG_ATTR_FLOAT:
      fg_node_attr_float(a, n, name, &fa);
      fg_node_attr_float(b, n, name, &fb);
      FG_CHECK(memcmp(&fa, &fb, sizeof fa) == 0);
      break;
    case FG_ATTR_STRING:
      fg_node_attr_string(a, n, name, &sa);
      fg_node_attr_string(b, n, name, &sb);
      FG_CHECK(sa && sb && strcmp(sa, sb) == 0);
      break;
    case FG_ATTR_INTS:
      fg_node_attr_ints(a, n, name, &la, &na);
      fg_node_attr_ints(b, n, name, &lb, &nb);
      FG_REQUIRE(na == nb);
      FG_CHECK(na == 0 || memcmp(la, lb, (size_t)na * sizeof *la) == 0);
      break;
    case FG_ATTR_FLOATS:
      fg_node_attr_floats(a, n, name, &da, &na);
      fg_node_attr_floats(b, n, name, &db, &nb);
      FG_REQUIRE(na == nb);
      FG_CHECK(na == 0 || memcmp(da, db, (size_t)na * sizeof *da) == 0);
      break;
    case FG_ATTR_TENSOR:
      FG_REQUIRE(fg_node_attr_tensor(a, n, name, &ta) == 0);
      FG_REQUIRE(fg_node_attr_tensor(b, n, name, &tb) == 0);
      FG_CHECK(same_tensor(ta, tb));
      break;
    default: FG_FAIL_AT("attribute '%s' of node %d has type %d", name, n, (int)t);
    }
  }
}

/* b is a loaded copy of a: same nodes in the same order, same edges, attrs,
 * devices, output dtypes and shapes, graph outputs, and a's metadata. */
static void check_same_graph(const fg_graph *a, const fg_graph *b) {
  FG_REQUIRE(a && b);
  FG_REQUIRE(fg_graph_num_nodes(a) == fg_graph_num_nodes(b));
  for (int n = 0; n < fg_graph_num_nodes(a); n++) {
    FG_CHECK(strcmp(fg_node_name(a, n), fg_node_name(b, n)) == 0);
    FG_CHECK(strcmp(fg_node_op(a, n), fg_node_op(b, n)) == 0);
    FG_CHECK(strcmp(fg_node_device(a, n), fg_node_device(b, n)) == 0);
    FG_REQUIRE(fg_node_num_inputs(a, n) == fg_node_num_inputs(b, n));
    for (int i = 0; i < fg_node_num_inputs(a, n); i++) {
      FG_CHECK_INT(fg_node_input(a, n, i).node, fg_node_input(b, n, i).node);
      FG_CHECK_INT(fg_node_input(a, n, i).index, fg_node_input(b, n, i).index);
    }
    FG_REQUIRE(fg_node_num_outputs(a, n) == fg_node_num_outputs(b, n));
    for (int i = 0; i < fg_node_num_outputs(a, n); i++) {
      fg_output o = {n, i};
      int64_t da[FG_MAX_RANK], db[FG_MAX_RANK];
      FG_CHECK_INT(fg_output_dtype(a, o), fg_output_dtype(b, o));
      int ra = fg_output_shape(a, o, da), rb = fg_output_shape(b, o, db);
      FG_REQUIRE(ra == rb);
      for (int d = 0; d < ra; d++)
        FG_CHECK_INT(da[d], db[d]);
    }
    check_same_attrs(a, b, n);
  }
  FG_REQUIRE(fg_graph_num_outputs(a) == fg_graph_num_outputs(b));
  for (int i = 0; i < fg_graph_num_outputs(a); i++) {
    FG_CHECK_INT(fg_graph_output(a, i).node, fg_graph_output(b, i).node);
    FG_CHECK_INT(fg_graph_output(a, i).index, fg_graph_output(b, i).index);
  }
  for (int i = 0; i < fg_graph_num_metadata(a); i++) {
    const char *key = fg_graph_metadata_key(a, i);
    const char *vb = fg_graph_metadata(b, key);
    FG_CHECK(vb && strcmp(vb, fg_graph_metadata(a, key)) == 0);
  }
}

/* The structure written by hand, not by comparison: what io_graph() built. */
static void check_io_graph(const fg_graph *g) {
  FG_REQUIRE(g);
  int x = fg_graph_find(g, "x"), w = fg_graph_find(g, "w"), y = fg_graph_find(g, "y");
  int p = fg_graph_find(g, "probs"), r = fg_graph_find(g, "rsum");
  FG_REQUIRE(x >= 0 && w >= 0 && y >= 0 && p >= 0 && r >= 0);
  FG_CHECK(strcmp(fg_node_op(g, x), "placeholder") == 0);
  FG_CHECK(strcmp(fg_node_op(g, fg_graph_find(g, "b")), "variable") == 0);
  FG_CHECK(strcmp(fg_node_op(g, y), "add") == 0);
  FG_CHECK(strcmp(fg_node_op(g, p), "softmax") == 0);
  FG_CHECK(strcmp(fg_node_device(g, p), "cpu:1") == 0);
  FG_CHECK(strcmp(fg_node_device(g, x), "cpu:0") == 0);
  int mm = fg_node_input(g, y, 0).node;
  FG_CHECK(strcmp(fg_node_op(g, mm), "matmul") == 0);
  FG_CHECK_INT(fg_node_input(g, mm, 0).node, x);
  FG_CHECK_INT(fg_node_input(g, mm, 1).node, w);
  int64_t dims[FG_MAX_RANK];
  FG_CHECK_INT(fg_output_shape(g, (fg_output){y, 0}, dims), 2);
  FG_CHECK_INT(dims[0], -1);
  FG_CHECK_INT(dims[1], 2);
  FG_CHECK_INT(fg_output_shape(g, (fg_output){r, 0}, dims), 1);
  FG_CHECK_INT(fg_output_dtype(g, (fg_output){r, 0}), FG_F32);
  int64_t axis = 0;
  FG_CHECK(fg_node_attr_int(g, p, "axis", &axis) == 0);
  FG_CHECK_INT(axis, 1);

  const fg_tensor *t = NULL;
  FG_REQUIRE(fg_node_attr_tensor(g, fg_graph_find(g, "c_f64"), "value", &t) == 0);
  FG_CHECK_INT(fg_tensor_dtype(t), FG_F64);
  FG_CHECK(memcmp(fg_tensor_data(t), F64, sizeof F64) == 0);
  FG_REQUIRE(fg_node_attr_tensor(g, fg_graph_find(g, "c_i64"), "value", &t) == 0);
  FG_CHECK(memcmp(fg_tensor_data(t), I64, sizeof I64) == 0);
  FG_REQUIRE(fg_node_attr_tensor(g, fg_graph_find(g, "c_bool"), "value", &t) == 0);
  FG_CHECK(fg_tensor_dtype(t) == FG_BOOL && memcmp(fg_tensor_data(t), BOOLS, 3) == 0);
  FG_REQUIRE(fg_node_attr_tensor(g, fg_graph_find(g, "c_i32_scalar"), "value", &t) == 0);
  FG_CHECK_INT(fg_tensor_rank(t), 0);
  FG_CHECK_INT(*(const int32_t *)fg_tensor_data(t), 7);
  FG_REQUIRE(fg_node_attr_tensor(g, w, "value", &t) == 0);
  FG_CHECK(memcmp(fg_tensor_data(t), W, sizeof W) == 0);

  int wa = fg_graph_find(g, "with_attrs");
  FG_REQUIRE(wa >= 0);
  int64_t iv;
  double fv;
  const char *sv;
  const int64_t *lv;
  const double *dv;
  int n;
  FG_CHECK(fg_node_attr_int(g, wa, "_an_int", &iv) == 0 && iv == -42);
  FG_CHECK(fg_node_attr_float(g, wa, "_a_float", &fv) == 0 && fv == 1e-20);
  FG_CHECK(fg_node_attr_string(g, wa, "_a_string", &sv) == 0 &&
           strcmp(sv, "say \"hi\"\n\t\\ caf\xc3\xa9") == 0);
  FG_REQUIRE(fg_node_attr_ints(g, wa, "_some_ints", &lv, &n) == 0 && n == 3);
  FG_CHECK(lv[0] == 1 && lv[1] == -2 && lv[2] == INT64_MAX);
  FG_REQUIRE(fg_node_attr_ints(g, wa, "_no_ints", &lv, &n) == 0);
  FG_CHECK_INT(n, 0);
  FG_REQUIRE(fg_node_attr_floats(g, wa, "_some_floats", &dv, &n) == 0 && n == 5);
  for (int i = 0; i < 5; i++) {
    double want = float_attr_values(i);
    FG_CHECK(memcmp(&dv[i], &want, sizeof want) == 0);
  }
  FG_CHECK(signbit(dv[1]));
  FG_REQUIRE(fg_node_attr_tensor(g, wa, "_a_tensor", &t) == 0);
  FG_CHECK(memcmp(fg_tensor_data(t), T_ATTR, sizeof T_ATTR) == 0);

  FG_REQUIRE(fg_graph_num_outputs(g) == 2);
  FG_CHECK_INT(fg_graph_output(g, 0).node, p);
  FG_CHECK_INT(fg_graph_output(g, 1).node, r);
  FG_CHECK(fg_graph_metadata(g, "description") &&
           strcmp(fg_graph_metadata(g, "description"), "io test graph") == 0);
}

FG_TEST(io_build_graph_ok, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = io_graph();
  FG_CHECK_INT(fg_graph_status(g, st), FG_OK);
  if (fg_status_code(st)) printf("%s\n", fg_status_message(st));
  check_io_graph(g);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(io_memory_roundtrip, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = io_graph();
  void *data = NULL;
  size_t size = 0;
  FG_REQUIRE(fg_graph_save_memory(g, &data, &size, st) == 0);
  FG_CHECK(size > 8 && memcmp((char *)data + 4, "FGB1", 4) == 0);
  fg_graph *h = fg_graph_load_memory(data, size, st);
  if (!h) printf("%s\n", fg_status_message(st));
  FG_REQUIRE(h);
  FG_CHECK_INT(fg_status_code(st), FG_OK);
  check_io_graph(h);
  check_same_graph(g, h);
  FG_CHECK(fg_graph_metadata(h, "producer") &&
           strcmp(fg_graph_metadata(h, "producer"), "flowgraph " FLOWGRAPH_VERSION_STRING) == 0);
  /* Saving the loaded graph gives the same bytes: nothing drifts. */
  void *again = NULL;
  size_t again_size = 0;
  FG_REQUIRE(fg_graph_save_memory(h, &again, &again_size, st) == 0);
  FG_CHECK(again_size == size && memcmp(again, data, size) == 0);
  /* Misaligned input bytes load too. */
  char *shifted = malloc(size + 1);
  memcpy(shifted + 1, data, size);
  fg_graph *k = fg_graph_load_memory(shifted + 1, size, st);
  FG_CHECK(k != NULL);
  check_same_graph(g, k);
  free(shifted);
  free(again);
  free(data);
  fg_graph_free(k);
  fg_graph_free(h);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(io_file_roundtrip_leaves_no_temp_files, "") {
  fg_status *st = fg_status_new();
  char dir[64], path[128];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_io_test"));
  snprintf(path, sizeof path, "%s/model.fgb", dir);
  fg_graph *g = io_graph();
  FG_REQUIRE(fg_graph_save(g, path, st) == 0);
  FG_CHECK_INT(fgt_count_entries(dir), 1);
  /* An ordinary file's mode: 0666 less the umask, as open() and
   * numpy.save give (the temporary file is made so, then renamed). */
  struct stat sb;
  mode_t mask = umask(0);
  umask(mask);
  FG_CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == (0666 & ~mask));
  fg_graph *h = fg_graph_load(path, st);
  FG_REQUIRE(h);
  check_io_graph(h);
  check_same_graph(g, h);
  /* The file holds exactly what save_memory gives. */
  void *mem = NULL, *file = NULL;
  size_t mem_size = 0, file_size = 0;
  FG_REQUIRE(fg_graph_save_memory(g, &mem, &mem_size, st) == 0);
  file = tio_read(path, &file_size);
  FG_CHECK(file && file_size == mem_size && memcmp(file, mem, mem_size) == 0);
  /* Saving again replaces the file. */
  fg_graph *empty = fg_graph_new();
  FG_REQUIRE(fg_graph_save(empty, path, st) == 0);
  fg_graph *e = fg_graph_load(path, st);
  FG_CHECK(e && fg_graph_num_nodes(e) == 0);
  FG_CHECK_INT(fgt_count_entries(dir), 1);
  free(mem);
  free(file);
  fg_graph_free(e);
  fg_graph_free(empty);
  fg_graph_free(h);
  fg_graph_free(g);
  fgt_rmtree(dir);
  fg_status_free(st);
}

FG_TEST(io_buffers_are_64_byte_aligned, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = io_graph();
  void *data = NULL;
  size_t size = 0;
  FG_REQUIRE(fg_graph_save_memory(g, &data, &size, st) == 0);
  /* Offsets from the start of the file, where a reader maps it. */
  struct {
    const void *bytes;
    size_t n;
  } bufs[] = {
      {W, sizeof W}, {B, sizeof B}, {F64, sizeof F64}, {I64, sizeof I64}, {T_ATTR, sizeof T_ATTR}};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
    long at = tio_find(data, size, bufs[i].bytes, bufs[i].n);
    FG_CHECK(at > 0);
    if (at % 64 != 0) FG_FAIL_AT("buffer %zu at offset %ld, not a multiple of 64", i, at);
  }
  FG_CHECK_INT(size % 64, 0);
  free(data);
  fg_graph_free(g);
  fg_status_free(st);
}

/* Runs probs and rsum for x = [[1,2,3],[0,0,0]]. */
static int run_io_graph(fg_graph *g, float probs[4], float rsum[2]) {
  fg_status *st = fg_status_new();
  fg_session *s = fg_session_new(g, NULL, st);
  float x[6] = {1, 2, 3, 0, 0, 0};
  int64_t xd[2] = {2, 3};
  fg_tensor *xt = fg_tensor_from_data(FG_F32, 2, xd, x, sizeof x, st);
  fg_feed feed = {"x", xt};
  const char *fetches[2] = {"probs", "rsum"};
  fg_tensor *out[2] = {NULL, NULL};
  int rc = s ? fg_session_run(s, &feed, 1, fetches, 2, out, NULL, 0, st) : -1;
  if (rc != 0) printf("run: %s\n", fg_status_message(st));
  if (rc == 0) {
    memcpy(probs, fg_tensor_data(out[0]), 4 * sizeof(float));
    memcpy(rsum, fg_tensor_data(out[1]), 2 * sizeof(float));
  }
  fg_tensor_free(out[0]);
  fg_tensor_free(out[1]);
  fg_tensor_free(xt);
  fg_session_free(s);
  fg_status_free(st);
  return rc;
}

FG_TEST(io_loaded_graph_computes_the_same, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = io_graph();
  void *data = NULL;
  size_t size = 0;
  FG_REQUIRE(fg_graph_save_memory(g, &data, &size, st) == 0);
  fg_graph *h = fg_graph_load_memory(data, size, st);
  FG_REQUIRE(h);
  float p1[4], r1[2], p2[4], r2[2];
  FG_REQUIRE(run_io_graph(g, p1, r1) == 0);
  FG_REQUIRE(run_io_graph(h, p2, r2) == 0);
  FG_CHECK(memcmp(p1, p2, sizeof p1) == 0 && memcmp(r1, r2, sizeof r1) == 0);
  /* Row 0: [1,2,3] @ w = [4,5], + b = [4.5,4.5], softmax [0.5,0.5].
   * Row 1: 0 @ w + b = [0.5,-0.5]: softmax = [sigmoid(1), sigmoid(-1)]. */
  FG_CHECK_NEAR(p2[0], 0.5, 1e-6);
  FG_CHECK_NEAR(p2[1], 0.5, 1e-6);
  FG_CHECK_NEAR(p2[2], 0.7310585786300049, 1e-6);
  FG_CHECK_NEAR(p2[3], 0.2689414213699951, 1e-6);
  FG_CHECK_NEAR(r2[0], 1.0, 1e-6);
  FG_CHECK_NEAR(r2[1], 1.0, 1e-6);
  /* The variable starts from the saved initial value. */
  fg_session *s = fg_session_new(h, NULL, st);
  FG_REQUIRE(s);
  fg_tensor *b = fg_session_variable(s, "b", st);
  FG_CHECK(b && memcmp(fg_tensor_data(b), B, sizeof B) == 0);
  fg_tensor_free(b);
  fg_session_free(s);
  free(data);
  fg_graph_free(h);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(io_json_roundtrip_is_exact, "") {
  fg_status *st = fg_status_new();
  char dir[64], json[128], fgb[128];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_io_test"));
  snprintf(json, sizeof json, "%s/model.json", dir);
  snprintf(fgb, sizeof fgb, "%s/model.fgb", dir);
  fg_graph *g = io_graph();
  FG_REQUIRE(fg_graph_save(g, fgb, st) == 0);
  fg_graph *a = fg_graph_load(fgb, st);
  FG_REQUIRE(a);
  FG_REQUIRE(fg_graph_save_json(a, json, st) == 0);
  FG_CHECK_INT(fgt_count_entries(dir), 2);
  fg_graph *b = fg_graph_load_json(json, st);
  if (!b) printf("%s\n", fg_status_message(st));
  FG_REQUIRE(b);
  check_io_graph(b);
  check_same_graph(a, b);
  /* fgb -> json -> fgb gives the same bytes. */
  void *m1 = NULL, *m2 = NULL;
  size_t s1 = 0, s2 = 0;
  FG_REQUIRE(fg_graph_save_memory(a, &m1, &s1, st) == 0);
  FG_REQUIRE(fg_graph_save_memory(b, &m2, &s2, st) == 0);
  FG_CHECK(s1 == s2 && memcmp(m1, m2, s1) == 0);
  /* The text is strict JSON (Python's parser agrees) and names dtypes. */
  size_t n = 0;
  char *text = tio_read(json, &n);
  FG_REQUIRE(text);
  FG_CHECK_STR_CONTAINS(text, "\"dtype\": \"F32\"");
  FG_CHECK_STR_CONTAINS(text, "\"value_type\": \"TensorValue\"");
  FG_CHECK_STR_CONTAINS(text, "0.30000000000000004");
  char cmd[512];
  snprintf(cmd, sizeof cmd, "%s -c 'import json,sys; json.load(open(sys.argv[1]))' %s", FG_PYTHON,
           json);
  FG_CHECK_INT(system(cmd), 0);
  /* The internal bytes -> text helper writes the same text. */
  char *text2 = NULL;
  size_t n2 = 0;
  FG_REQUIRE(fgb_binary_to_json(m1, s1, &text2, &n2, st) == 0);
  FG_CHECK(n2 == n && memcmp(text, text2, n) == 0);
  free(text2);
  free(text);
  free(m1);
  free(m2);
  fg_graph_free(a);
  fg_graph_free(b);
  fg_graph_free(g);
  fgt_rmtree(dir);
  fg_status_free(st);
}

FG_TEST(io_producer_metadata, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  fg_placeholder(g, "x", FG_F64, 0, NULL);
  fg_graph_set_metadata(g, "producer", "my trainer 3");
  fg_graph_set_metadata(g, "empty", "");
  void *data = NULL;
  size_t size = 0;
  FG_REQUIRE(fg_graph_save_memory(g, &data, &size, st) == 0);
  fg_graph *h = fg_graph_load_memory(data, size, st);
  FG_REQUIRE(h);
  FG_CHECK_INT(fg_graph_num_metadata(h), 2);
  FG_CHECK(strcmp(fg_graph_metadata(h, "producer"), "my trainer 3") == 0);
  FG_CHECK(strcmp(fg_graph_metadata(h, "empty"), "") == 0);
  free(data);
  fg_graph_free(h);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(io_empty_graph_roundtrip, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  void *data = NULL;
  size_t size = 0;
  FG_REQUIRE(fg_graph_save_memory(g, &data, &size, st) == 0);
  fg_graph *h = fg_graph_load_memory(data, size, st);
  FG_REQUIRE(h);
  FG_CHECK_INT(fg_graph_num_nodes(h), 0);
  FG_CHECK_INT(fg_graph_num_outputs(h), 0);
  FG_CHECK(fg_graph_metadata(h, "producer") != NULL);
  free(data);
  fg_graph_free(h);
  fg_graph_free(g);
  fg_status_free(st);
}

/* tests/data/io_unordered.json lists users before producers and declares no
 * output infos: the loader sorts it. z = relu(x + c), c = [1, -2]. */
FG_TEST(io_json_example_out_of_order, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_load_json(FG_TEST_DATA_DIR "/io_unordered.json", st);
  if (!g) printf("%s\n", fg_status_message(st));
  FG_REQUIRE(g);
  FG_REQUIRE(fg_graph_num_nodes(g) == 4);
  int x = fg_graph_find(g, "x"), c = fg_graph_find(g, "c"), s = fg_graph_find(g, "sum"),
      z = fg_graph_find(g, "z");
  FG_REQUIRE(x >= 0 && c >= 0 && s >= 0 && z >= 0);
  /* Every node comes after its inputs. */
  FG_CHECK(x < s && c < s && s < z);
  FG_CHECK_INT(fg_node_input(g, z, 0).node, s);
  FG_CHECK_INT(fg_node_input(g, s, 0).node, x);
  FG_CHECK_INT(fg_node_input(g, s, 1).node, c);
  FG_CHECK(strcmp(fg_graph_metadata(g, "description"), "unordered example") == 0);
  FG_REQUIRE(fg_graph_num_outputs(g) == 1);
  FG_CHECK_INT(fg_graph_output(g, 0).node, z);

  fg_session *sess = fg_session_new(g, NULL, st);
  FG_REQUIRE(sess);
  float xv[2] = {0.5f, 3.0f};
  int64_t xd[1] = {2};
  fg_tensor *xt = fg_tensor_from_data(FG_F32, 1, xd, xv, sizeof xv, st);
  fg_feed feed = {"x", xt};
  const char *fetch = "z";
  fg_tensor *out = NULL;
  FG_REQUIRE(fg_session_run(sess, &feed, 1, &fetch, 1, &out, NULL, 0, st) == 0);
  /* relu([0.5 + 1, 3 - 2]) = [1.5, 1]. */
  FG_CHECK_NEAR(((float *)fg_tensor_data(out))[0], 1.5, 1e-7);
  FG_CHECK_NEAR(((float *)fg_tensor_data(out))[1], 1.0, 1e-7);
  fg_tensor_free(out);
  fg_tensor_free(xt);
  fg_session_free(sess);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(io_save_errors, "badinput") {
  fg_status *st = fg_status_new();
  char dir[64], path[256];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_io_test"));
  fg_graph *g = io_graph();
  void *data = (void *)1;
  size_t size = 1;
  FG_CHECK(fg_graph_save_memory(NULL, &data, &size, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK(data == NULL && size == 0);
  FG_CHECK(fg_graph_save_memory(g, NULL, &size, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK(fg_graph_save(g, NULL, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK(fg_graph_save_json(NULL, "x.json", st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK(fg_graph_load(NULL, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK(fg_graph_load_json(NULL, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK(fg_graph_load_memory(NULL, 100, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);

  /* A folder that does not exist: an I/O error, nothing created. */
  snprintf(path, sizeof path, "%s/no/such/dir/m.fgb", dir);
  FG_CHECK(fg_graph_save(g, path, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_IO_ERROR);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "no/such/dir");
  /* A path that is a folder: the rename fails and the temp file goes. */
  snprintf(path, sizeof path, "%s/sub", dir);
  FG_REQUIRE(mkdir(path, 0755) == 0);
  FG_CHECK(fg_graph_save(g, path, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_IO_ERROR);
  FG_CHECK(fg_graph_save_json(g, path, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_IO_ERROR);
  FG_CHECK_INT(fgt_count_entries(dir), 1);
  FG_CHECK_INT(fgt_count_entries(path), 0);

  /* A graph holding an error is not saved, and says why. */
  fg_graph *bad = fg_graph_new();
  fg_output x = fg_placeholder(bad, "x", FG_F32, 0, NULL);
  fg_output i = fg_placeholder(bad, "i", FG_I32, 0, NULL);
  fg_add(bad, x, i);
  snprintf(path, sizeof path, "%s/bad.fgb", dir);
  FG_CHECK(fg_graph_save(bad, path, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_GRAPH);
  FG_CHECK(access(path, F_OK) != 0);
  FG_CHECK(fg_graph_save_memory(bad, &data, &size, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_GRAPH);
  FG_CHECK_INT(fgt_count_entries(dir), 1);
  fg_graph_free(bad);
  fg_graph_free(g);
  fgt_rmtree(dir);
  fg_status_free(st);
}

/* A path that is a symbolic link, or a device, is written where it leads:
 * the save's rename must not replace the entry itself (run as root, it
 * turned /dev/full into a regular file; these cases use copies). */
FG_TEST(io_save_to_links_and_devices, "badinput") {
  fg_status *st = fg_status_new();
  char dir[64], target[256], link[300];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_io_test"));
  snprintf(target, sizeof target, "%s/real.fgb", dir);
  snprintf(link, sizeof link, "%s/link.fgb", dir);
  FG_REQUIRE(symlink("real.fgb", link) == 0);
  fg_graph *g = io_graph();
  FG_CHECK(fg_graph_save(g, link, st) == 0);
  struct stat sb;
  FG_CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode));
  fg_graph *back = fg_graph_load(target, st);
  FG_CHECK(back != NULL);
  if (back) FG_CHECK_INT(fg_graph_num_nodes(back), fg_graph_num_nodes(g));
  fg_graph_free(back);
  FG_CHECK_INT(fgt_count_entries(dir), 2); /* no temporary file left */
  /* Again, now that the file exists: written beside it and renamed over it
   * (a new inode), so a failed save leaves the old file whole. */
  struct stat before;
  FG_REQUIRE(stat(target, &before) == 0);
  FG_CHECK(fg_graph_save(g, link, st) == 0);
  FG_CHECK(stat(target, &sb) == 0 && sb.st_ino != before.st_ino);
  FG_CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode));
  FG_CHECK_INT(fgt_count_entries(dir), 2);
  /* Copies of /dev/null and /dev/full (as root): the first takes it, the
   * second fails with its errno; both stay devices. */
  char null_dev[300], full_dev[300];
  snprintf(null_dev, sizeof null_dev, "%s/null", dir);
  snprintf(full_dev, sizeof full_dev, "%s/full", dir);
  if (fgt_make_char_device(null_dev, 1, 3) && fgt_make_char_device(full_dev, 1, 7)) {
    FG_CHECK(fg_graph_save(g, null_dev, st) == 0);
    FG_CHECK(stat(null_dev, &sb) == 0 && S_ISCHR(sb.st_mode));
    FG_CHECK(fg_graph_save(g, full_dev, st) != 0);
    FG_CHECK_INT(fg_status_code(st), FG_IO_ERROR);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), full_dev);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), "No space left on device");
    FG_CHECK(stat(full_dev, &sb) == 0 && S_ISCHR(sb.st_mode));
  }
  fg_graph_free(g);
  fgt_rmtree(dir);
  fg_status_free(st);
}

/* A 100000-node chain written users-first: sorting it must not recurse
 * (a recursive sort would overflow the stack) nor take quadratic time. */
FG_TEST(io_long_reversed_chain, "") {
  enum { N = 100000 };
  fg_status *st = fg_status_new();
  size_t cap = (size_t)N * 80 + 1024, len = 0;
  char *json = malloc(cap);
  FG_REQUIRE(json);
  len += (size_t)snprintf(json + len, cap - len, "{version: 1, nodes: [");
  for (int i = 0; i < N - 1; i++)
    len += (size_t)snprintf(json + len, cap - len,
                            "{name: \"n%d\", op: \"relu\", inputs: [{node: %d, index: 0}]},", i,
                            i + 1);
  len += (size_t)snprintf(json + len, cap - len,
                          "{name: \"x\", op: \"placeholder\", attrs: [{name: \"dtype\", "
                          "value_type: IntValue, value: {v: 1}}, {name: \"shape\", value_type: "
                          "IntList, value: {v: [2]}}]}]}");
  void *data = NULL;
  size_t size = 0;
  FG_REQUIRE(fgb_json_to_binary(NULL, json, len, &data, &size, st) == 0);
  fg_graph *g = fg_graph_load_memory(data, size, st);
  if (!g) printf("%s\n", fg_status_message(st));
  FG_REQUIRE(g);
  FG_REQUIRE(fg_graph_num_nodes(g) == N);
  /* Sorted: the placeholder first, then n99998 ... n0. */
  FG_CHECK(strcmp(fg_node_name(g, 0), "x") == 0);
  FG_CHECK(strcmp(fg_node_name(g, N - 1), "n0") == 0);
  FG_CHECK_INT(fg_node_input(g, N - 1, 0).node, N - 2);
  void *again = NULL;
  size_t again_size = 0;
  FG_REQUIRE(fg_graph_save_memory(g, &again, &again_size, st) == 0);
  fg_graph *h = fg_graph_load_memory(again, again_size, st);
  FG_REQUIRE(h);
  FG_CHECK_INT(fg_graph_num_nodes(h), N);
  fg_graph_free(h);
  free(again);
  fg_graph_free(g);
  free(data);
  free(json);
  fg_status_free(st);
}

/* A buffer two constants share (files may share one; fg_graph_save writes
 * one per constant): both constants hold its bytes. Constants a and b read
 * buffer 0 (2048 floats, k / 8), c buffer 1 (2048 floats of 1.5), "sum" =
 * a + b, "other" = c + a. Both loaders give 2k / 8 and 1.5 + k / 8 for
 * element k, from the file and from memory. */
FG_TEST(io_load_shared_buffer, "") {
  enum { N = 2048 };
  size_t cap = 64 * (size_t)N + 4096, len = 0;
  char *json = malloc(cap);
  FG_REQUIRE(json);
  len += (size_t)snprintf(json + len, cap - len,
                          "{version: 1, nodes: ["
                          "{name: \"a\", op: \"constant\", attrs: [{name: \"value\", value_type: "
                          "TensorValue, value: {dtype: F32, shape: [%d], buffer: 0}}]},"
                          "{name: \"b\", op: \"constant\", attrs: [{name: \"value\", value_type: "
                          "TensorValue, value: {dtype: F32, shape: [%d], buffer: 0}}]},"
                          "{name: \"sum\", op: \"add\", inputs: [{node: 0, index: 0}, {node: 1, "
                          "index: 0}]},"
                          "{name: \"c\", op: \"constant\", attrs: [{name: \"value\", value_type: "
                          "TensorValue, value: {dtype: F32, shape: [%d], buffer: 1}}]},"
                          "{name: \"other\", op: \"add\", inputs: [{node: 3, index: 0}, {node: 0, "
                          "index: 0}]}], buffers: [",
                          N, N, N);
  for (int b = 0; b < 2; b++) {
    len += (size_t)snprintf(json + len, cap - len, "%s{data: [", b ? "," : "");
    for (int k = 0; k < N; k++) {
      const float v = b ? 1.5f : (float)k / 8;
      uint8_t by[4];
      memcpy(by, &v, 4);
      len += (size_t)snprintf(json + len, cap - len, "%s%u,%u,%u,%u", k ? "," : "", by[0], by[1],
                              by[2], by[3]);
    }
    len += (size_t)snprintf(json + len, cap - len, "]}");
  }
  len += (size_t)snprintf(json + len, cap - len, "]}");
  FG_REQUIRE(len < cap);
  fg_status *st = fg_status_new();
  void *data = NULL;
  size_t size = 0;
  FG_REQUIRE(fgb_json_to_binary(NULL, json, len, &data, &size, st) == 0);
  char dir[64], path[128];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_io_test"));
  snprintf(path, sizeof path, "%s/shared.fgb", dir);
  FG_REQUIRE(fgt_write_file(path, data, size) == 0);
  for (int from_file = 0; from_file < 2; from_file++) {
    fg_graph *g = from_file ? fg_graph_load(path, st) : fg_graph_load_memory(data, size, st);
    FG_REQUIRE(g);
    fg_session *s = fg_session_new(g, NULL, st);
    FG_REQUIRE(s);
    const char *fetch[2] = {"sum", "other"};
    fg_tensor *out[2] = {NULL, NULL};
    FG_REQUIRE(fg_session_run(s, NULL, 0, fetch, 2, out, NULL, 0, st) == 0);
    int bad = 0;
    for (int k = 0; k < N; k++)
      bad += ((const float *)fg_tensor_data(out[0]))[k] != (float)k / 4 ||
             ((const float *)fg_tensor_data(out[1]))[k] != 1.5f + (float)k / 8;
    FG_CHECK_INT(bad, 0);
    fg_tensor_free(out[0]);
    fg_tensor_free(out[1]);
    fg_session_free(s);
    fg_graph_free(g);
  }
  fgt_rmtree(dir);
  free(data);
  free(json);
  fg_status_free(st);
}
