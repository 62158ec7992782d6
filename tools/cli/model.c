/* Helpers over the public graph, tensor and session API that several
 * subcommands use: model files by extension, one wording for dtypes and
 * shapes in messages, and the checks made before long work. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "flowgraph/io.h"
#include "flowgraph/onnx.h"

int cli_onnx_trainable;

/* The first bytes of `path` into head[64]: how many (0 when unreadable). */
static size_t read_head(const char *path, unsigned char head[64]) {
  size_t n = 0;
  FILE *f = fopen(path, "rb");
  if (f) {
    n = fread(head, 1, 64, f);
    fclose(f);
  }
  return n;
}

int cli_is_onnx(const char *path) {
  unsigned char head[64];
  const size_t n = read_head(path, head);
  /* By content, so a model saved under any name works; the extension
   * still routes a damaged .onnx file to the ONNX reader's error. */
  return fg_onnx_sniff(head, n) || cli_has_ext(path, ".onnx");
}

/* What the first bytes of `path` say it is, whatever its name: 'b' for a
 * .fgb (the FlatBuffers file identifier "FGB1" at bytes 4..7, which
 * graph.fbs declares), 'j' for JSON (an object: '{' after any white
 * space), 0 otherwise or unreadable. */
static int sniff_model(const char *path) {
  unsigned char head[64];
  const size_t n = read_head(path, head);
  if (n >= 8 && memcmp(head + 4, "FGB1", 4) == 0) return 'b';
  size_t i = 0;
  while (i < n && strchr(" \t\r\n", head[i]))
    i++;
  return i < n && head[i] == '{' ? 'j' : 0;
}

fg_graph *cli_load_model(const char *path, fg_status *st) {
  if (cli_is_onnx(path)) {
    fg_onnx_options o;
    fg_onnx_options_init(&o);
    o.trainable = cli_onnx_trainable;
    return fg_onnx_load(path, &o, st);
  }
  int json = cli_has_ext(path, ".json");
  /* A file whose content contradicts its name loads by its content, with
   * a note: a renamed model works, and the note says why. */
  const int kind = sniff_model(path);
  if (json && kind == 'b') {
    fprintf(stderr,
            "flowgraph: note: %s is a binary .fgb file (FlatBuffers identifier FGB1), not "
            "JSON; loading it as .fgb\n",
            path);
    json = 0;
  } else if (!json && kind == 'j') {
    fprintf(stderr, "flowgraph: note: %s holds JSON, not a binary .fgb file; loading it as JSON\n",
            path);
    json = 1;
  }
  return json ? fg_graph_load_json(path, st) : fg_graph_load(path, st);
}

int cli_save_model(const fg_graph *g, const char *path, fg_status *st) {
  return cli_has_ext(path, ".json") ? fg_graph_save_json(g, path, st) : fg_graph_save(g, path, st);
}

void cli_output_name(const fg_graph *g, fg_output o, char *buf, size_t size) {
  const char *n = fg_node_name(g, o.node);
  if (!n) n = "?";
  if (o.index == 0)
    snprintf(buf, size, "%s", n);
  else
    snprintf(buf, size, "%s:%d", n, o.index);
}

const char *cli_describe_output(const fg_graph *g, fg_output o, char *buf, size_t size) {
  int64_t dims[FG_MAX_RANK];
  int rank = fg_output_shape(g, o, dims);
  char shape[256];
  if (rank < 0)
    snprintf(shape, sizeof shape, "[unknown]");
  else
    cli_shape_str(rank, dims, shape, sizeof shape);
  snprintf(buf, size, "%s %s", fg_dtype_name(fg_output_dtype(g, o)), shape);
  return buf;
}

const char *cli_describe_tensor(const fg_tensor *t, char *buf, size_t size) {
  char shape[256];
  cli_shape_str(fg_tensor_rank(t), fg_tensor_dims(t), shape, sizeof shape);
  snprintf(buf, size, "%s %s", fg_dtype_name(fg_tensor_dtype(t)), shape);
  return buf;
}

int cli_path_problem(const char *path, char *dir, size_t size) {
  struct stat sb;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    snprintf(dir, size, "%s", path);
    return CLI_PATH_IS_DIR;
  }
  /* A device or FIFO is written in place (flowgraph/io.h): it must
   * take writes itself, whatever its folder allows. */
  if (fg_path_write_in_place(path)) {
    snprintf(dir, size, "%s", path);
    return access(path, W_OK) == 0 ? CLI_PATH_OK : CLI_PATH_READ_ONLY;
  }
  /* Else the file is written beside where it lands: a link's target. */
  char *target = fg_path_write_target(path);
  const char *p = target ? target : path, *slash = strrchr(p, '/');
  if (!slash)
    snprintf(dir, size, ".");
  else if (slash == p)
    snprintf(dir, size, "/");
  else
    snprintf(dir, size, "%.*s", (int)(slash - p), p);
  free(target);
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return CLI_PATH_NO_DIR;
  if (access(dir, W_OK | X_OK) != 0) return CLI_PATH_READ_ONLY;
  return CLI_PATH_OK;
}

int cli_check_writable(const char *path, const char *what, fg_status *st) {
  char dir[4096];
  switch (cli_path_problem(path, dir, sizeof dir)) {
  case CLI_PATH_IS_DIR: fg_status_set(st, FG_IO_ERROR, "%s %s: is a directory", what, path); break;
  case CLI_PATH_NO_DIR:
    fg_status_set(st, FG_IO_ERROR, "%s %s: directory %s does not exist", what, path, dir);
    break;
  case CLI_PATH_READ_ONLY:
    fg_status_set(st, FG_IO_ERROR, "%s %s: cannot write in %s: %s", what, path, dir,
                  strerror(errno));
    break;
  default: return 0;
  }
  return -1;
}

fg_session *cli_new_session(fg_graph *g, int threads_set, int threads, fg_status *st) {
  fg_session_options opts;
  fg_session_options_init(&opts);
  if (threads_set) opts.num_threads = threads;
  opts.check_numerics = cli_session_limits.check_numerics;
  opts.max_memory_bytes = cli_session_limits.max_memory_bytes;
  opts.device = cli_session_limits.device;
  opts.no_passes = cli_session_limits.no_passes;
  opts.passes = cli_session_limits.passes;
  return fg_session_new(g, &opts, st);
}
