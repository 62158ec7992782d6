/* libFuzzer harness 1: bytes -> fg_graph_load_memory (and fg_graph_load
 * from a file, which must agree) -> save/reload round trip ->
 * fg_session_new -> one run (twice, for the plan cache and variable
 * updates) with seeded random feeds for every placeholder.
 *
 * Fetched: the graph's declared outputs, else the last node. Targets: the
 * state-changing nodes (assign, apply_*, group), so training steps stored in
 * files run their updates. See fuzz_common.h for the contract and the caps.
 */
#include "fuzz_common.h"

#define NAME_MAX_LEN 512

/* The bytes through fg_graph_load: it must fail where the memory load
 * failed and make the same graph (the same saved bytes) where it did not. */
static void fgb_load_file(const uint8_t *data, size_t size, const fg_graph *from_memory) {
  const char *path = fgfuzz_as_file(data, size);
  fg_status *st = fg_status_new();
  fg_graph *g = path && st ? fg_graph_load(path, st) : NULL;
  if (path && st && !g) fgfuzz_expect_error(st, "fg_graph_load");
  if (path && st && !g != !from_memory) fgfuzz_fail("the file and memory loads disagree", st);
  void *a = NULL, *b = NULL;
  size_t na = 0, nb = 0;
  if (g && from_memory &&
      (fg_graph_save_memory(g, &a, &na, st) != 0 ||
       fg_graph_save_memory(from_memory, &b, &nb, st) != 0 || na != nb || memcmp(a, b, na) != 0))
    fgfuzz_fail("the file and memory loads made different graphs", st);
  free(a);
  free(b);
  fg_graph_free(g);
  fg_status_free(st);
}

int fgfuzz_load(const uint8_t *data, size_t size) {
  fg_status *st = fg_status_new();
  if (!st) return 0;
  fgfuzz_count_input();
  fg_graph *g = fg_graph_load_memory(data, size, st);
  fgb_load_file(data, size, g);
  if (!g) {
    fgfuzz_expect_error(st, "fg_graph_load_memory");
    fg_status_free(st);
    return 0;
  }
  if (fg_status_code(st) != FG_OK) fgfuzz_fail("load returned a graph with an error", st);

  /* What the writer produces from a loaded graph must load again. */
  fgfuzz_check_round_trip(g, "loaded", st);

  int n = fg_graph_num_nodes(g);
  static char names[FGFUZZ_MAX_FETCH][NAME_MAX_LEN];
  const char *fetches[FGFUZZ_MAX_FETCH];
  const char *targets[FGFUZZ_MAX_FETCH];
  int n_fetches = 0, n_targets = 0;
  int n_out = fg_graph_num_outputs(g);
  for (int i = 0; i < n_out && n_fetches < FGFUZZ_MAX_FETCH; i++) {
    fg_output o = fg_graph_output(g, i);
    const char *nm = fg_node_name(g, o.node);
    if (!nm) continue;
    snprintf(names[n_fetches], NAME_MAX_LEN, "%s:%d", nm, o.index);
    fetches[n_fetches] = names[n_fetches];
    n_fetches++;
  }
  if (n_fetches == 0 && n > 0 && fg_node_name(g, n - 1)) {
    snprintf(names[0], NAME_MAX_LEN, "%s", fg_node_name(g, n - 1));
    fetches[0] = names[0];
    n_fetches = 1;
  }
  for (int i = 0; i < n && n_targets < FGFUZZ_MAX_FETCH; i++) {
    const char *op = fg_node_op(g, i);
    if (op &&
        (strcmp(op, "assign") == 0 || strncmp(op, "apply_", 6) == 0 || strcmp(op, "group") == 0))
      targets[n_targets++] = fg_node_name(g, i);
  }
  fgfuzz_session_run(g, fetches, n_fetches, targets, n_targets, fgfuzz_hash(data, size));
  fg_graph_free(g);
  fg_status_free(st);
  return 0;
}

#ifndef FGFUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fgfuzz_load(data, size); }
#endif
