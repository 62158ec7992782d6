/* The store of converted constants (kernels/share.h) and the convolutions'
 * use of it: a session's plans share one converted copy of each constant
 * weight per layout, and every plan computes what a convolution computes.
 * References are direct loops in double over the same values. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "executor/session_internal.h"
#include "fgtest.h"
#include "flowgraph/flowgraph.h"
#include "kernels/kernel.h"
#include "kernels/share.h"

static int same_int(const void *a, const void *b) { return *(const int *)a == *(const int *)b; }

/* Entries are found by (source, offset, layout), held per get, freed with
 * the last put; a second size under one key is refused; the fill lock
 * says whether an earlier holder converted already. */
FG_TEST(conv_share_store_entries, "") {
  fgk_share *s = fgk_share_new();
  FG_REQUIRE(s);
  float src[4];
  int lay1 = 1, lay1b = 1, lay2 = 2;
  fgk_shared *a = fgk_share_get(s, src, 0, &lay1, sizeof lay1, same_int, 64);
  fgk_shared *b = fgk_share_get(s, src, 0, &lay1b, sizeof lay1b, same_int, 64);
  fgk_shared *c = fgk_share_get(s, src, 0, &lay2, sizeof lay2, same_int, 128);
  fgk_shared *d = fgk_share_get(s, src, 16, &lay1, sizeof lay1, same_int, 64);
  fgk_shared *e = fgk_share_get(s, src + 1, 0, &lay1, sizeof lay1, same_int, 64);
  FG_REQUIRE(a && b && c && d && e);
  FG_CHECK(a == b);
  FG_CHECK(a != c && a != d && a != e && d != e);
  FG_CHECK(fgk_share_get(s, src, 0, &lay1, sizeof lay1, same_int, 32) == NULL);
  FG_CHECK_INT(fgk_share_count(s), 4);
  FG_CHECK_INT((long)fgk_share_bytes(s), 64 + 128 + 64 + 64);
  FG_CHECK(((uintptr_t)fgk_shared_buf(a) & 63) == 0);
  FG_CHECK_INT(fgk_shared_lock(a), 0);
  fgk_shared_unlock(a, 0); /* a failed fill leaves it empty */
  FG_CHECK_INT(fgk_shared_lock(b), 0);
  fgk_shared_unlock(b, 1);
  FG_CHECK_INT(fgk_shared_lock(a), 1);
  fgk_shared_unlock(a, 1);
  fgk_share_put(s, a);
  FG_CHECK_INT(fgk_share_count(s), 4); /* b still holds it */
  fgk_share_put(s, b);
  fgk_share_put(s, d);
  FG_CHECK_INT(fgk_share_count(s), 2);
  FG_CHECK_INT((long)fgk_share_bytes(s), 128 + 64);
  fgk_share_put(s, NULL);
  fgk_share_free(s); /* c and e still held: freed with the store */
  fgk_share_free(NULL);
}

/* y[n, o, i, j] = sum over c, a, b of x[n, c, i + a - 1, j + b - 1] w[o, c, a, b]
 * (3x3, stride 1, padding 1), in double. */
static void conv_ref(const float *x, const float *w, int64_t n, int64_t c, int64_t o, int64_t h,
                     int64_t wd, double *y) {
  for (int64_t b = 0; b < n; b++)
    for (int64_t k = 0; k < o; k++)
      for (int64_t i = 0; i < h; i++)
        for (int64_t j = 0; j < wd; j++) {
          double acc = 0;
          for (int64_t ch = 0; ch < c; ch++)
            for (int64_t di = 0; di < 3; di++)
              for (int64_t dj = 0; dj < 3; dj++) {
                const int64_t ii = i + di - 1, jj = j + dj - 1;
                if (ii < 0 || jj < 0 || ii >= h || jj >= wd) continue;
                acc += (double)x[((b * c + ch) * h + ii) * wd + jj] *
                       w[((k * c + ch) * 3 + di) * 3 + dj];
              }
          y[((b * o + k) * h + i) * wd + j] = acc;
        }
}

static float value_at(int64_t i, int salt) {
  return (float)((i * 7919 + salt * 104729) % 2001 - 1000) / 1000.0f;
}

static fg_tensor *filled(int rank, const int64_t *dims, int salt) {
  fg_tensor *t = fg_tensor_new(FG_F32, rank, dims, NULL);
  if (!t) return NULL;
  float *p = fg_tensor_data(t);
  for (int64_t i = 0; i < fg_tensor_num_elements(t); i++)
    p[i] = value_at(i, salt);
  return t;
}

#define C_IN  16
#define C_MID 32
#define SIDE  6

/* relu(conv(x, w1)) -> conv(., w2), weights constants (or variables),
 * batch unknown: "h" is the first layer's output, "y" the second's. */
static fg_graph *two_layers(int variables) {
  fg_graph *g = fg_graph_new();
  int64_t xd[4] = {-1, C_IN, SIDE, SIDE}, w1d[4] = {C_MID, C_IN, 3, 3},
          w2d[4] = {C_MID, C_MID, 3, 3};
  fg_tensor *w1 = filled(4, w1d, 1), *w2 = filled(4, w2d, 2);
  fg_conv2d_opts o = {.pads = {1, 1, 1, 1}};
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, xd);
  fg_output a = variables ? fg_variable(g, "w1", w1) : fg_constant(g, "w1", w1);
  fg_output b = variables ? fg_variable(g, "w2", w2) : fg_constant(g, "w2", w2);
  fg_output h = fg_relu(g, fg_conv2d(g, x, a, (fg_output){-1, 0}, &o));
  fg_set_name(g, h, "h");
  fg_set_name(g, fg_conv2d(g, h, b, (fg_output){-1, 0}, &o), "y");
  fg_tensor_free(w1);
  fg_tensor_free(w2);
  return g;
}

/* Runs the two layers at `batch`, fetching y (and h when with_h), and
 * checks y against the loops in double. */
static void run_and_check(fg_session *s, int64_t batch, int with_h) {
  fg_status *st = fg_status_new();
  int64_t xd[4] = {batch, C_IN, SIDE, SIDE}, w1d[4] = {C_MID, C_IN, 3, 3},
          w2d[4] = {C_MID, C_MID, 3, 3};
  fg_tensor *x = filled(4, xd, 3), *w1 = filled(4, w1d, 1), *w2 = filled(4, w2d, 2);
  FG_REQUIRE(x && w1 && w2);
  const int64_t nh = batch * C_MID * SIDE * SIDE;
  double *h = malloc((size_t)nh * sizeof *h), *y = malloc((size_t)nh * sizeof *y);
  float *hf = malloc((size_t)nh * sizeof *hf);
  FG_REQUIRE(h && y && hf);
  conv_ref(fg_tensor_data(x), fg_tensor_data(w1), batch, C_IN, C_MID, SIDE, SIDE, h);
  for (int64_t i = 0; i < nh; i++)
    hf[i] = h[i] > 0 ? (float)h[i] : 0.0f;
  conv_ref(hf, fg_tensor_data(w2), batch, C_MID, C_MID, SIDE, SIDE, y);
  fg_feed feed = {"x", x};
  const char *fetch[2] = {"y", "h"};
  fg_tensor *out[2] = {NULL, NULL};
  FG_REQUIRE(fg_session_run(s, &feed, 1, fetch, with_h ? 2 : 1, out, NULL, 0, st) == 0);
  const float *got = fg_tensor_data(out[0]);
  for (int64_t i = 0; i < nh; i++)
    FG_CHECK_NEAR(got[i], y[i], 1e-4 * (1 + fabs(y[i])));
  for (int k = 0; k < 2; k++)
    fg_tensor_free(out[k]);
  free(h), free(y), free(hf);
  fg_tensor_free(x), fg_tensor_free(w1), fg_tensor_free(w2);
  fg_status_free(st);
}

/* oneDNN's convolutions read these weights in a blocked layout on x86-64
 * with AVX2 or AVX-512 (8 or 16 channels innermost); elsewhere they may
 * take the plain one, and then there is nothing converted to share. */
static int blocked_weights(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx2");
#else
  return 0;
#endif
}

static fg_session *one_thread_session(fg_graph *g) {
  fg_session_options o;
  fg_session_options_init(&o);
  o.num_threads = 1;
  return fg_session_new(g, &o, NULL);
}

/* The two layers (weights as constants, or variables) in a one-thread
 * session that has run batch 4 once (checked); NULL when none was made. */
static fg_session *ran_once(int variables, fg_graph **g) {
  fg_session *s = (*g = two_layers(variables)) ? one_thread_session(*g) : NULL;
  if (s) run_and_check(s, 4, 0);
  return s;
}

/* Two plans with the same shapes (fetching y, then y and h) hold one
 * converted copy of each weight between them; other batch sizes add at
 * most one layout per weight; a graph edit drops them with the plans. */
FG_TEST(conv_share_plans_of_one_session, "") {
  fg_graph *g = NULL;
  fg_session *s = ran_once(0, &g);
  FG_REQUIRE(s && s->share);
  const int n1 = fgk_share_count(s->share);
  const size_t b1 = fgk_share_bytes(s->share);
  if (!blocked_weights()) FG_SKIP("no AVX2: oneDNN may read the weights as they are");
  FG_CHECK_INT(n1, 2);
  FG_CHECK(b1 >= (size_t)(C_MID * C_IN * 9 + C_MID * C_MID * 9) * 4);
  run_and_check(s, 4, 1);
  FG_CHECK_INT(fgk_share_count(s->share), n1);
  FG_CHECK_INT((long)fgk_share_bytes(s->share), (long)b1);
  run_and_check(s, 2, 0);
  run_and_check(s, 8, 1);
  run_and_check(s, 1, 0);
  FG_CHECK(fgk_share_count(s->share) <= 4 * n1);
  run_and_check(s, 4, 0); /* cached: nothing new */
  const int n_all = fgk_share_count(s->share);
  /* An edit: the next run drops every plan, so every entry, and builds anew. */
  fg_set_name(g, fg_relu(g, (fg_output){fg_graph_find(g, "y"), 0}), "z");
  run_and_check(s, 4, 0);
  FG_CHECK_INT(fgk_share_count(s->share), n1);
  FG_CHECK(n_all >= n1);
  fg_session_free(s);
  fg_graph_free(g);
}

/* Variables are never shared: a run may assign one between two readers. */
FG_TEST(conv_share_not_for_variables, "") {
  fg_graph *g = NULL;
  fg_session *s = ran_once(1, &g);
  FG_REQUIRE(s && s->share);
  run_and_check(s, 2, 1);
  FG_CHECK_INT(fgk_share_count(s->share), 0);
  fg_session_free(s);
  fg_graph_free(g);
}

/* The second plan reads the copy the first converted rather than
 * converting its own: with the constant's bytes changed behind the
 * session's back (which a constant never does), a new plan of the same
 * shapes still computes with the values first converted, and a new
 * session, which has its own store, with the new ones. */
FG_TEST(conv_share_second_plan_reads_the_first_copy, "") {
  fg_graph *g = NULL;
  fg_session *s = ran_once(0, &g);
  FG_REQUIRE(s && s->share);
  if (!blocked_weights()) FG_SKIP("no AVX2: oneDNN may read the weights as they are");
  FG_CHECK_INT(fgk_share_count(s->share), 2);
  const fg_node *n = &g->nodes[fg_graph_find(g, "w1")];
  float *w1 = fg_tensor_data(fg_attrs_find(&n->attrs, "value")->t);
  const int64_t nw = C_MID * C_IN * 9;
  float *saved = malloc((size_t)nw * sizeof *saved);
  FG_REQUIRE(saved);
  memcpy(saved, w1, (size_t)nw * sizeof *saved);
  for (int64_t i = 0; i < nw; i++)
    w1[i] = 0.0f;
  run_and_check(s, 4, 1); /* the old values: the shared copy */
  fg_session *fresh = one_thread_session(g);
  FG_REQUIRE(fresh);
  fg_status *st = fg_status_new();
  int64_t xd[4] = {4, C_IN, SIDE, SIDE};
  fg_tensor *x = filled(4, xd, 3), *y = NULL;
  fg_feed feed = {"x", x};
  const char *fetch = "y";
  FG_REQUIRE(fg_session_run(fresh, &feed, 1, &fetch, 1, &y, NULL, 0, st) == 0);
  const float *got = fg_tensor_data(y);
  for (int64_t i = 0; i < fg_tensor_num_elements(y); i++)
    FG_CHECK(got[i] == 0.0f); /* w1 = 0: h = relu(0) = 0, so y = 0 */
  memcpy(w1, saved, (size_t)nw * sizeof *saved);
  free(saved);
  fg_tensor_free(x), fg_tensor_free(y);
  fg_status_free(st);
  fg_session_free(fresh);
  fg_session_free(s);
  fg_graph_free(g);
}

/* Two convolutions of one plan read the same constant and run at once on
 * two threads: one converts it while the other waits for the entry, and
 * both compute with it. y = conv(x1, w) + conv(x2, w). */
FG_TEST(conv_share_same_constant_twice_in_one_run, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t xd[4] = {2, C_IN, SIDE, SIDE}, wd[4] = {C_MID, C_IN, 3, 3};
  fg_tensor *w = filled(4, wd, 1), *x1 = filled(4, xd, 3), *x2 = filled(4, xd, 4);
  FG_REQUIRE(w && x1 && x2);
  fg_conv2d_opts o = {.pads = {1, 1, 1, 1}};
  fg_output wc = fg_constant(g, "w", w);
  fg_output a = fg_conv2d(g, fg_placeholder(g, "x1", FG_F32, 4, xd), wc, (fg_output){-1, 0}, &o);
  fg_output b = fg_conv2d(g, fg_placeholder(g, "x2", FG_F32, 4, xd), wc, (fg_output){-1, 0}, &o);
  fg_set_name(g, fg_add(g, a, b), "y");
  const int64_t ny = 2 * C_MID * SIDE * SIDE;
  double *r1 = malloc((size_t)ny * sizeof *r1), *r2 = malloc((size_t)ny * sizeof *r2);
  FG_REQUIRE(r1 && r2);
  conv_ref(fg_tensor_data(x1), fg_tensor_data(w), 2, C_IN, C_MID, SIDE, SIDE, r1);
  conv_ref(fg_tensor_data(x2), fg_tensor_data(w), 2, C_IN, C_MID, SIDE, SIDE, r2);
  fg_session_options so;
  fg_session_options_init(&so);
  so.num_threads = 2;
  for (int round = 0; round < 4; round++) {
    fg_session *s = fg_session_new(g, &so, st);
    FG_REQUIRE(s);
    fg_feed feeds[2] = {{"x1", x1}, {"x2", x2}};
    const char *fetch = "y";
    fg_tensor *y = NULL;
    FG_REQUIRE(fg_session_run(s, feeds, 2, &fetch, 1, &y, NULL, 0, st) == 0);
    const float *got = fg_tensor_data(y);
    for (int64_t i = 0; i < ny; i++)
      FG_CHECK_NEAR(got[i], r1[i] + r2[i], 1e-4 * (1 + fabs(r1[i] + r2[i])));
    FG_CHECK_INT(fgk_share_count(s->share), blocked_weights() ? 1 : 0);
    fg_tensor_free(y);
    fg_session_free(s);
  }
  free(r1), free(r2);
  fg_tensor_free(w), fg_tensor_free(x1), fg_tensor_free(x2);
  fg_graph_free(g);
  fg_status_free(st);
}

/* Every convolution kind reading constants computes the same bits as with
 * the same weights as variables (each plan converting its own copy, the
 * path the other conv tests check against references): a conv with bias
 * and relu, a grouped conv, a depthwise one, a transposed conv reading the
 * first conv's weight again, and the input's gradient through all of them
 * (the data gradients read the constants too); over batches 1 to 4 and
 * two sets of fetches, so several plans share the entries. */
static fg_output source(fg_graph *g, int var, const char *name, int rank, const int64_t *d,
                        int salt) {
  fg_tensor *t = filled(rank, d, salt);
  float *p = fg_tensor_data(t);
  for (int64_t i = 0; i < fg_tensor_num_elements(t); i++)
    p[i] *= 0.2f;
  fg_output o = var ? fg_variable(g, name, t) : fg_constant(g, name, t);
  fg_tensor_free(t);
  return o;
}

static fg_graph *conv_kinds(int var) {
  fg_graph *g = fg_graph_new();
  int64_t xd[4] = {-1, 32, 6, 6}, wa[4] = {64, 32, 3, 3}, wd[4] = {64, 1, 3, 3}, b[1] = {64};
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, xd);
  fg_output A = source(g, var, "wa", 4, wa, 1), G = source(g, var, "wg", 4, wa, 2);
  fg_output D = source(g, var, "wd", 4, wd, 3);
  fg_conv2d_opts o = {.pads = {1, 1, 1, 1}}, og = o, odw = o;
  og.groups = 2, odw.groups = 64;
  fg_output a = fg_relu(g, fg_conv2d(g, x, A, source(g, var, "ba", 1, b, 4), &o));
  fg_output c =
      fg_conv2d(g, fg_conv2d(g, a, G, (fg_output){-1, 0}, &og), D, (fg_output){-1, 0}, &odw);
  fg_set_name(g, a, "a");
  fg_set_name(g, c, "c");
  fg_output d = fg_conv_transpose2d(g, c, A, (fg_output){-1, 0}, &o);
  fg_set_name(g, d, "d");
  fg_output s = fg_reduce_sum(g, fg_add(g, d, x), NULL, 0, 0), dx;
  fg_status *st = fg_status_new();
  FG_CHECK(fg_gradients(g, &s, 1, &x, 1, NULL, &dx, st) == 0);
  fg_set_name(g, dx, "dx");
  fg_status_free(st);
  return g;
}

FG_TEST(conv_share_every_kind_same_bits_as_variables, "") {
  fg_graph *gc = conv_kinds(0), *gv = conv_kinds(1);
  fg_status *st = fg_status_new();
  fg_session_options o;
  fg_session_options_init(&o);
  o.num_threads = 2;
  fg_session *sc = fg_session_new(gc, &o, st), *sv = fg_session_new(gv, &o, st);
  FG_REQUIRE(sc && sv);
  const char *fetch[4] = {"dx", "d", "a", "c"};
  const int64_t batches[5] = {1, 2, 3, 4, 1};
  for (int r = 0; r < 5; r++)
    for (int nf = 2; nf <= 4; nf += 2) {
      int64_t xd[4] = {batches[r], 32, 6, 6};
      fg_tensor *x = filled(4, xd, 9 + r), *oc[4] = {NULL}, *ov[4] = {NULL};
      fg_feed feed = {"x", x};
      FG_REQUIRE(fg_session_run(sc, &feed, 1, fetch, nf, oc, NULL, 0, st) == 0);
      FG_REQUIRE(fg_session_run(sv, &feed, 1, fetch, nf, ov, NULL, 0, st) == 0);
      for (int i = 0; i < nf; i++) {
        const size_t n = (size_t)fg_tensor_num_elements(oc[i]) * sizeof(float);
        FG_CHECK(fg_tensor_num_elements(oc[i]) == fg_tensor_num_elements(ov[i]));
        FG_CHECK(memcmp(fg_tensor_data(oc[i]), fg_tensor_data(ov[i]), n) == 0);
        fg_tensor_free(oc[i]), fg_tensor_free(ov[i]);
      }
      fg_tensor_free(x);
    }
  if (blocked_weights()) FG_CHECK(fgk_share_count(sc->share) >= 4);
  FG_CHECK_INT(fgk_share_count(sv->share), 0);
  fg_session_free(sc), fg_session_free(sv);
  fg_graph_free(gc), fg_graph_free(gv);
  fg_status_free(st);
}

/* Plan info counts the kernels' buffers outside the arena: with variable
 * weights each plan's converted copies are its own (kernel_bytes); with
 * the same weights as constants those copies move to kernel_shared_bytes,
 * which is what the session's store holds once a run made them, and the
 * rest (scratchpads, converted activations) is the same. */
FG_TEST(conv_share_plan_info_counts_kernel_buffers, "") {
  fg_status *st = fg_status_new();
  int64_t xd[4] = {4, C_IN, SIDE, SIDE};
  fg_tensor *x = filled(4, xd, 3);
  fg_feed feed = {"x", x};
  const char *fetch = "y";
  fg_plan_info *info[2] = {NULL, NULL};
  fg_session *s[2] = {NULL, NULL};
  fg_graph *g[2] = {two_layers(0), two_layers(1)};
  for (int v = 0; v < 2; v++) {
    FG_REQUIRE((s[v] = one_thread_session(g[v])));
    run_and_check(s[v], 4, 0);
    FG_REQUIRE((info[v] = fg_session_plan_info(s[v], &feed, 1, &fetch, 1, NULL, 0, st)));
  }
  FG_CHECK(info[0]->kernel_shared_bytes == fgk_share_bytes(s[0]->share));
  FG_CHECK(info[1]->kernel_shared_bytes == 0);
  FG_CHECK(info[1]->kernel_bytes == info[0]->kernel_bytes + info[0]->kernel_shared_bytes);
  if (blocked_weights())
    FG_CHECK(info[0]->kernel_shared_bytes >= (size_t)(C_MID * C_IN * 9 + C_MID * C_MID * 9) * 4);
  for (int v = 0; v < 2; v++) {
    fg_plan_info_free(info[v]);
    fg_session_free(s[v]);
    fg_graph_free(g[v]);
  }
  fg_tensor_free(x);
  fg_status_free(st);
}
