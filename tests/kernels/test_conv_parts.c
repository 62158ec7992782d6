/* A forward convolution of one image on oneDNN runs as parts of output
 * channels, or of groups (kernels/cpu/conv_dnnl.c, channel_parts_for):
 * units of 16 output channels, or of the fewest groups whose input and
 * output channels are multiples of 16, the last unit short when the
 * channels are not a multiple of it. Each case is the middle layer of
 * x0 -> 1x1 conv -> h -> the case's conv -> y -> 1x1 conv -> out, so h and y
 * are intermediates (NC16 where their channels are a multiple of 16, C
 * order elsewhere). y is checked against a double loop over the fetched h,
 * out against one over the fetched y, and every fetch has the same bits
 * with 1, 2 and 4 threads (the parts follow the machine's cores, never the
 * session's threads). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgtest.h"
#include "flowgraph/flowgraph.h"
#include "test_kernels_util.h"

typedef struct pc {
  int64_t c, o, groups, k, stride, side;
  int bias;
  const char *what;
} pc;

static const pc CASES[] = {
    {16, 58, 1, 3, 1, 9, 1, "58 channels: units 16, 16, 16 and 10"},
    {64, 64, 64, 3, 1, 8, 1, "depthwise, NC16 in and out"},
    {58, 58, 58, 3, 2, 11, 0, "depthwise, stride 2, a short last unit"},
    {96, 96, 12, 3, 1, 7, 1, "8 channels per group in and out (2 groups a unit), NC16"},
    {104, 104, 13, 3, 1, 7, 0, "8 per group, 13 groups: the last unit one group"},
    {24, 48, 3, 3, 1, 8, 1, "8 in and 16 out per group: units of 2 groups, 32 channels"},
    {48, 96, 3, 1, 1, 6, 0, "16 in and 32 out per group, 1x1, NC16"},
    {16, 24, 1, 3, 1, 10, 1, "24 channels: 16 and 8 (2 units)"},
    {16, 16, 1, 3, 1, 10, 1, "one unit: not cut, one thread"},
};
#define N_CASES (sizeof CASES / sizeof CASES[0])
#define C0      16 /* x0's channels */
#define TAIL    16

static int64_t out_side(const pc *c) { return (c->side + 2 * (c->k / 2) - c->k) / c->stride + 1; }

static fg_graph *build(const pc *c) {
  fg_graph *g = fg_graph_new();
  const int64_t xd[4] = {1, C0, c->side, c->side}, w1d[4] = {c->c, C0, 1, 1};
  const int64_t wd[4] = {c->o, c->c / c->groups, c->k, c->k}, bd[1] = {c->o};
  const int64_t w3d[4] = {TAIL, c->o, 1, 1};
  fg_conv2d_opts one = {{1, 1}, {0, 0, 0, 0}, {1, 1}, 1, 0, {0, 0}};
  const int64_t p = c->k / 2;
  fg_conv2d_opts o = {{c->stride, c->stride}, {p, p, p, p}, {1, 1}, c->groups, 0, {0, 0}};
  fg_output x0 = fg_placeholder(g, "x0", FG_F32, 4, xd);
  fg_output h = fg_set_name(
      g, fg_conv2d(g, x0, rand_constant(g, "w1", FG_F32, 4, w1d, 1), FG_NO_OUTPUT, &one), "h");
  fg_output b = c->bias ? rand_constant(g, "b", FG_F32, 1, bd, 3) : FG_NO_OUTPUT;
  fg_output y =
      fg_set_name(g, fg_conv2d(g, h, rand_constant(g, "w", FG_F32, 4, wd, 2), b, &o), "y");
  fg_set_name(g, fg_conv2d(g, y, rand_constant(g, "w3", FG_F32, 4, w3d, 4), FG_NO_OUTPUT, &one),
              "out");
  return g;
}

/* Fetches h, y and out with `threads` threads; 0 after a failure. */
static int run(fg_graph *g, const fg_tensor *x0, int threads, fg_tensor **out) {
  fg_status *st = fg_status_new();
  fg_session_options so;
  fg_session_options_init(&so);
  so.num_threads = threads;
  fg_session *s = fg_session_new(g, &so, st);
  fg_feed feed = {"x0", x0};
  const char *fetch[3] = {"h", "y", "out"};
  int ok = s && fg_session_run(s, &feed, 1, fetch, 3, out, NULL, 0, st) == 0;
  if (!ok) FG_FAIL_AT("%d threads: %s", threads, fg_status_message(st));
  fg_session_free(s);
  fg_status_free(st);
  return ok;
}

/* Elements of conv(in, w) + b (b NULL: none) off a double loop by more
 * than 1e-6 of the magnitudes summed. */
static int64_t off_double_loop(const float *in, int64_t c, int64_t side, const float *w,
                               const float *b, int64_t o, int64_t groups, int64_t k, int64_t stride,
                               const float *got) {
  const int64_t cg = c / groups, og = o / groups, p = k / 2;
  const int64_t os = (side + 2 * p - k) / stride + 1;
  int64_t bad = 0;
  for (int64_t oc = 0; oc < o; oc++)
    for (int64_t oh = 0; oh < os; oh++)
      for (int64_t ow = 0; ow < os; ow++) {
        double acc = b ? b[oc] : 0, mag = b ? fabs(b[oc]) : 0;
        for (int64_t ci = 0; ci < cg; ci++)
          for (int64_t kh = 0; kh < k; kh++)
            for (int64_t kw = 0; kw < k; kw++) {
              const int64_t ih = oh * stride - p + kh, iw = ow * stride - p + kw;
              if (ih < 0 || iw < 0 || ih >= side || iw >= side) continue;
              const int64_t ch = oc / og * cg + ci;
              const double t =
                  (double)in[(ch * side + ih) * side + iw] * w[((oc * cg + ci) * k + kh) * k + kw];
              acc += t, mag += fabs(t);
            }
        const double v = got[(oc * os + oh) * os + ow];
        if (!(fabs(v - acc) <= 1e-6 * (1 + mag))) bad++;
      }
  return bad;
}

static int same_bits(const fg_tensor *a, const fg_tensor *b) {
  return a && b && fg_tensor_num_bytes(a) == fg_tensor_num_bytes(b) &&
         memcmp(fg_tensor_data(a), fg_tensor_data(b), fg_tensor_num_bytes(a)) == 0;
}

FG_TEST(conv_one_image_parts_match_double_loop, "") {
  for (size_t i = 0; i < N_CASES; i++) {
    const pc *c = &CASES[i];
    fg_graph *g = build(c);
    FG_REQUIRE(g);
    const int64_t xd[4] = {1, C0, c->side, c->side};
    const int64_t wd[4] = {c->o, c->c / c->groups, c->k, c->k}, bd[1] = {c->o};
    const int64_t w3d[4] = {TAIL, c->o, 1, 1};
    fg_tensor *x0 = rand_tensor(FG_F32, 4, xd, 5), *w = rand_tensor(FG_F32, 4, wd, 2),
              *b = rand_tensor(FG_F32, 1, bd, 3);
    fg_tensor *w3 = rand_tensor(FG_F32, 4, w3d, 4);
    const int threads[3] = {1, 2, 4};
    fg_tensor *out[3][3] = {{0}};
    for (int t = 0; t < 3; t++)
      if (!run(g, x0, threads[t], out[t])) break;
    if (out[0][2]) {
      const int64_t os = out_side(c);
      int64_t bad = off_double_loop(fg_tensor_data(out[0][0]), c->c, c->side, fg_tensor_data(w),
                                    c->bias ? fg_tensor_data(b) : NULL, c->o, c->groups, c->k,
                                    c->stride, fg_tensor_data(out[0][1]));
      if (bad) FG_FAIL_AT("case %zu (%s): %lld values of y off", i, c->what, (long long)bad);
      bad = off_double_loop(fg_tensor_data(out[0][1]), c->o, os, fg_tensor_data(w3), NULL, TAIL, 1,
                            1, 1, fg_tensor_data(out[0][2]));
      if (bad) FG_FAIL_AT("case %zu (%s): %lld values of out off", i, c->what, (long long)bad);
    }
    for (int t = 1; t < 3; t++)
      for (int f = 0; f < 3; f++)
        if (out[t][f] && !same_bits(out[0][f], out[t][f]))
          FG_FAIL_AT("case %zu (%s): fetch %d differs between 1 and %d threads", i, c->what, f,
                     threads[t]);
    for (int t = 0; t < 3; t++)
      for (int f = 0; f < 3; f++)
        fg_tensor_free(out[t][f]);
    fg_tensor_free(x0), fg_tensor_free(w), fg_tensor_free(b), fg_tensor_free(w3);
    fg_graph_free(g);
  }
}
