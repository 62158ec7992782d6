/* Builds the digits classifier with its training step and saves it:
 *
 *   x [?, 64] f32 -> dense(128) -> relu -> dense(64) -> relu -> dense(10) = logits
 *   y [?] i32 (labels 0..9), and the loss, accuracy, outputs and Adam step
 *   (learning rate 2e-3) of digits_head.h
 *
 * Running "train" once is one Adam step on the batch fed to x and y;
 * `flowgraph train` does that over minibatches (see examples/digits/README.md).
 *
 * Initialisation (fixed seed, so the file is the same on every machine):
 * weights are uniform in [-bound, bound) with Kaiming/He's bound
 * sqrt(6 / fan_in) for the two layers followed by a ReLU and sqrt(3 / fan_in)
 * (gain 1) for the output layer; biases start at zero. The uniform draws come
 * from one splitmix64 stream seeded with INIT_SEED, 24 random bits each, in
 * layer order, row-major over [fan_in, fan_out].
 *
 * Usage: example_digits_build_mlp [OUT.fgb]   (default build/digits_mlp.fgb) */
#include <flowgraph/flowgraph.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "digits_head.h"

#define INIT_SEED     1
#define LEARNING_RATE 2e-3

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [-bound, bound). */
static float uniform(uint64_t *rng, double bound) {
  double u = (double)(splitmix64(rng) >> 40) * 0x1p-24; /* [0, 1) */
  return (float)((2.0 * u - 1.0) * bound);
}

/* x [?, in] -> x w + b with variables "<name>/w" [in, out], "<name>/b" [out]. */
static fg_output dense(fg_graph *g, fg_output x, int in, int out, const char *name,
                       int relu_follows, uint64_t *rng, fg_status *st) {
  size_t nw = (size_t)in * (size_t)out;
  float *w = malloc(nw * sizeof *w);
  float *b = calloc((size_t)out, sizeof *b);
  fg_tensor *wt = NULL, *bt = NULL;
  fg_output y = FG_NO_OUTPUT;
  if (w && b) {
    double bound = sqrt((relu_follows ? 6.0 : 3.0) / in);
    for (size_t i = 0; i < nw; i++)
      w[i] = uniform(rng, bound);
    int64_t wd[2] = {in, out}, bd[1] = {out};
    wt = fg_tensor_from_data(FG_F32, 2, wd, w, nw * sizeof *w, st);
    bt = fg_tensor_from_data(FG_F32, 1, bd, b, (size_t)out * sizeof *b, st);
  }
  if (wt && bt) {
    char wname[64], bname[64];
    snprintf(wname, sizeof wname, "%s/w", name);
    snprintf(bname, sizeof bname, "%s/b", name);
    y = fg_add(g, fg_matmul(g, x, fg_variable(g, wname, wt), 0, 0), fg_variable(g, bname, bt));
  }
  fg_tensor_free(wt);
  fg_tensor_free(bt);
  free(w);
  free(b);
  return y;
}

int main(int argc, char **argv) {
  if (argc > 2) {
    fprintf(stderr, "usage: %s [OUT.fgb]\n", argv[0]);
    return 2;
  }
  const char *out = argc == 2 ? argv[1] : "build/digits_mlp.fgb";
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  if (!st || !g) {
    fprintf(stderr, "build_mlp: out of memory\n");
    return 1;
  }
  uint64_t rng = INIT_SEED;
  int64_t xd[2] = {FG_DIM_UNKNOWN, 64};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output h1 = fg_set_name(g, fg_relu(g, dense(g, x, 64, 128, "dense1", 1, &rng, st)), "hidden1");
  fg_output h2 =
      fg_set_name(g, fg_relu(g, dense(g, h1, 128, 64, "dense2", 1, &rng, st)), "hidden2");
  fg_output logits = dense(g, h2, 64, 10, "dense3", 0, &rng, st);
  int rc = digits_finish(g, logits, LEARNING_RATE,
                         "64-128-64-10 MLP for the 8x8 digits, with an Adam training step 'train'",
                         "build_mlp", out, st);
  fg_graph_free(g);
  fg_status_free(st);
  return rc;
}
