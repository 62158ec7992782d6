/* Helpers of `flowgraph grad` and `flowgraph train` (see train.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flowgraph/io.h"
#include "train.h"

fg_graph *cli_load_model(const char *path, fg_status *st) {
  return cli_has_ext(path, ".json") ? fg_graph_load_json(path, st) : fg_graph_load(path, st);
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

int cli_check_writable(const char *path, const char *what, fg_status *st) {
  struct stat sb;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    fg_status_set(st, FG_IO_ERROR, "%s %s: is a directory", what, path);
    return -1;
  }
  const char *slash = strrchr(path, '/');
  char dir[4096];
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == path)
    snprintf(dir, sizeof dir, "/");
  else
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    fg_status_set(st, FG_IO_ERROR, "%s %s: directory %s does not exist", what, path, dir);
    return -1;
  }
  if (access(dir, W_OK | X_OK) != 0) {
    fg_status_set(st, FG_IO_ERROR, "%s %s: cannot write in %s: %s", what, path, dir,
                  strerror(errno));
    return -1;
  }
  return 0;
}
