/* `flowgraph help TOPIC`: what no single command owns (file formats, the
 * environment, exit status, the optimization passes), as `git help` and
 * `go help` keep topics beside their commands. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void print_formats(void) {
  printf("Models (MODEL):\n"
         "  .fgb    flowgraph's binary graph (FlatBuffers, file identifier FGB1): nodes,\n"
         "          attributes, variables with their values, metadata\n"
         "  .json   the same graph as JSON text (flowgraph convert turns one into the\n"
         "          other)\n"
         "  .onnx   an ONNX ModelProto, read by content (`import` saves it as .fgb;\n"
         "          `export` writes one)\n"
         "  Every command that reads a model looks at its first bytes, so a file\n"
         "  named for another format loads by its content, with a note.\n\n"
         "Data (-i NAME=FILE.npy, -o NAME=OUT.npy, --val, --eval-input):\n"
         "  NumPy .npy version 1 to 3, C order, little-endian <f4 <f8 <i4 <i8 and\n"
         "  bool (|b1); numpy.save writes them. Each array is checked against its\n"
         "  placeholder's dtype and shape (? matches any size).\n\n"
         "Reports: profile --format csv|json, train --log FILE.csv, plan and profile\n"
         "--memory-svg OUT.svg, train --plot FILE.svg, profile --trace OUT.json (the\n"
         "Chrome trace format: chrome://tracing or ui.perfetto.dev).\n");
}

static void print_environment(void) {
  printf("  FG_PASSES=off|LIST      the optimization passes every session runs\n"
         "                          (as --no-passes and --passes LIST)\n"
         "  FG_LIBXSMM=0            no matmul tile on libxsmm (OpenBLAS or oneDNN)\n"
         "  FG_SGEMM=openblas       large f32 matmul tiles on OpenBLAS, not oneDNN\n"
         "  FG_CACHE_DIR=DIR        where compiled GPU kernels are cached (DIR/nvrtc;\n"
         "                          else $XDG_CACHE_HOME/flowgraph/nvrtc, else\n"
         "                          ~/.cache/flowgraph/nvrtc)\n"
         "  FG_NVRTC_LIBRARY=PATH   the libnvrtc.so to load for fused GPU kernels\n"
         "  FG_MPI_SHM=0            --dist mpi: all-reduce through MPI messages, not\n"
         "                          shared memory between the ranks of a host\n"
         "  FG_MPI_SHM_ARENA=0      --dist mpi: no copy through one shared segment\n"
         "  FG_MPI_SHM_CHUNK=BYTES  --dist mpi: the shared segment's slot size\n"
         "  FG_MPI_HOST=NAME        --dist mpi: this rank's host name (to try the\n"
         "                          hierarchical all-reduce on one machine)\n"
         "  FG_MPI_WATCHDOG_MIN_S=S --dist mpi: the least time MPI start-up may take\n"
         "                          before the watchdog ends the process (default 30)\n");
}

static void print_exit_status(void) {
  printf("  0  success\n"
         "  1  runtime error: exactly one line on stderr, \"flowgraph: CODE: message\",\n"
         "     CODE one of fg_status's codes (INVALID_ARGUMENT, NOT_FOUND, ...)\n"
         "  2  usage error: a message line and the command's usage line on stderr\n"
         "Output files are written to a temporary name and renamed, so a failure\n"
         "never leaves a partial file.\n");
}

typedef struct help_topic {
  const char *name, *summary;
  void (*print)(void);
} help_topic;

static const help_topic topics[] = {
    {"formats", "model, data and report files", print_formats},
    {"environment", "environment variables", print_environment},
    {"exit-status", "exit codes and the error line", print_exit_status},
    {"passes", "the graph optimization passes", cli_print_passes},
};
#define N_TOPICS ((int)(sizeof topics / sizeof topics[0]))

int cli_help_topic_count(void) { return N_TOPICS; }
const char *cli_help_topic_name(int i) { return i >= 0 && i < N_TOPICS ? topics[i].name : NULL; }
const char *cli_help_topic_summary(int i) {
  return i >= 0 && i < N_TOPICS ? topics[i].summary : NULL;
}

int cli_print_help_topic(const char *name) {
  for (int i = 0; i < N_TOPICS; i++)
    if (strcmp(topics[i].name, name) == 0) {
      printf("%s: %s\n\n", topics[i].name, topics[i].summary);
      topics[i].print();
      return 1;
    }
  return 0;
}
