/* Builds a small classifier graph and saves it as a .fgb file:
 *   x [?, 64] -> dense(32) -> relu -> dense(10) -> softmax -> probs
 *                                              \-> argmax -> class
 * The weights come from a fixed-seed generator, so the file is the same on
 * every machine. Usage: build_mlp OUT.fgb */
#include <flowgraph/flowgraph.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* A fixed LCG, uniform in [-scale, scale). */
static float next_uniform(uint64_t *state, float scale) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  return scale * (2.0f * (float)((*state >> 40) & 0xFFFFFF) / 16777216.0f - 1.0f);
}

static fg_output dense(fg_graph *g, fg_output x, int in, int out, const char *name,
                       uint64_t *rng, fg_status *st) {
  float *w = malloc(sizeof(float) * (size_t)in * (size_t)out);
  float *b = calloc((size_t)out, sizeof(float));
  if (!w || !b) {
    free(w);
    free(b);
    return FG_NO_OUTPUT;
  }
  float scale = 1.0f / sqrtf((float)in); /* keeps activations near unit scale */
  for (int i = 0; i < in * out; i++) w[i] = next_uniform(rng, scale);
  int64_t wd[2] = {in, out}, bd[1] = {out};
  fg_tensor *wt = fg_tensor_from_data(FG_F32, 2, wd, w, sizeof(float) * (size_t)in * out, st);
  fg_tensor *bt = fg_tensor_from_data(FG_F32, 1, bd, b, sizeof(float) * (size_t)out, st);
  char wname[64], bname[64];
  snprintf(wname, sizeof wname, "%s/w", name);
  snprintf(bname, sizeof bname, "%s/b", name);
  fg_output y = fg_add(g, fg_matmul(g, x, fg_variable(g, wname, wt), 0, 0),
                       fg_variable(g, bname, bt));
  fg_tensor_free(wt);
  fg_tensor_free(bt);
  free(w);
  free(b);
  return y;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUT.fgb\n", argv[0]);
    return 2;
  }
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  uint64_t rng = 42;
  int64_t xd[2] = {-1, 64};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output h = fg_set_name(g, fg_relu(g, dense(g, x, 64, 32, "dense1", &rng, st)), "hidden");
  fg_output logits = fg_set_name(g, dense(g, h, 32, 10, "dense2", &rng, st), "logits");
  fg_output probs = fg_set_name(g, fg_softmax(g, logits, -1), "probs");
  fg_output cls = fg_set_name(g, fg_argmax(g, logits, 1), "class");
  fg_graph_add_output(g, probs);
  fg_graph_add_output(g, cls);
  fg_graph_set_metadata(g, "description", "64-32-10 MLP classifier for 8x8 digit images");
  int rc = 0;
  if (fg_graph_status(g, st) != FG_OK || fg_graph_save(g, argv[1], st) != 0) {
    fprintf(stderr, "build_mlp: %s: %s\n", fg_code_name(fg_status_code(st)), fg_status_message(st));
    rc = 1;
  }
  fg_graph_free(g);
  fg_status_free(st);
  return rc;
}
