/* libFuzzer harness 3: bytes -> fg_onnx_load_memory (an ONNX ModelProto;
 * trainable or not by the input's last byte) -> save/reload round trip of
 * the imported graph -> fg_session_new -> runs with seeded random feeds,
 * fetching the graph outputs. fg_onnx_sniff sees every input too. External
 * data has no folder to come from (base_dir NULL), so it must be refused
 * cleanly. The same bytes also go through fg_onnx_load from a file, whose
 * reading leaves large initializers in the file (schema/onnx/onnx_stream.c).
 * See fuzz_common.h for the contract and the caps. */
#include "flowgraph/onnx.h"
#include "fuzz_common.h"

#define ONNX_NAME_MAX 512

/* The bytes through fg_onnx_load. Where the memory import succeeded (so
 * the model reads no external data), this one must too, with as many
 * nodes; external data, which this one may find in its folder, can make
 * it succeed alone. */
static void onnx_load_file(const uint8_t *data, size_t size, const fg_onnx_options *o,
                           const fg_graph *from_memory) {
  const char *path = fgfuzz_as_file(data, size);
  fg_status *st = fg_status_new();
  fg_graph *g = path && st ? fg_onnx_load(path, o, st) : NULL;
  if (path && st && !g) {
    fgfuzz_expect_error(st, "fg_onnx_load");
    if (from_memory) fgfuzz_fail("the file import failed where the memory import did not", st);
  } else if (g && from_memory && fg_graph_num_nodes(g) != fg_graph_num_nodes(from_memory)) {
    fgfuzz_fail("the file and memory imports made different node counts", st);
  }
  fg_graph_free(g);
  fg_status_free(st);
}

int fgfuzz_onnx(const uint8_t *data, size_t size) {
  fg_status *st = fg_status_new();
  if (!st) return 0;
  fgfuzz_count_input();
  (void)fg_onnx_sniff(data, size);
  fg_onnx_options o;
  fg_onnx_options_init(&o);
  o.trainable = size > 0 && (data[size - 1] & 1);
  fg_graph *g = fg_onnx_load_memory(data, size, &o, st);
  onnx_load_file(data, size, &o, g);
  if (!g) {
    fgfuzz_expect_error(st, "fg_onnx_load_memory");
    fg_status_free(st);
    return 0;
  }
  if (fg_status_code(st) != FG_OK) fgfuzz_fail("the import returned a graph with an error", st);
  if (fg_graph_status(g, st) != FG_OK) fgfuzz_fail("the imported graph has a sticky error", st);

  /* An imported graph is an ordinary graph: it saves and loads again. */
  fgfuzz_check_round_trip(g, "imported", st);

  static char names[FGFUZZ_MAX_FETCH][ONNX_NAME_MAX];
  const char *fetches[FGFUZZ_MAX_FETCH];
  int n_fetches = 0;
  for (int i = 0; i < fg_graph_num_outputs(g) && n_fetches < FGFUZZ_MAX_FETCH; i++) {
    fg_output out = fg_graph_output(g, i);
    const char *nm = fg_node_name(g, out.node);
    if (!nm) fgfuzz_fail("a graph output has no node", st);
    snprintf(names[n_fetches], ONNX_NAME_MAX, "%s:%d", nm, out.index);
    fetches[n_fetches] = names[n_fetches];
    n_fetches++;
  }
  if (n_fetches == 0) fgfuzz_fail("an imported graph without outputs", st);
  fgfuzz_session_run(g, fetches, n_fetches, NULL, 0, fgfuzz_hash(data, size));
  fg_graph_free(g);
  fg_status_free(st);
  return 0;
}

#ifndef FGFUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fgfuzz_onnx(data, size); }
#endif
