/* `--dist mpi` pieces shared by `flowgraph train` and `flowgraph run`. */
#include "dist_cli.h"

#include <stdio.h>
#include <string.h>

int cli_dist_opt(const cli_command *cmd, int argc, char **argv, int *i, int *dist_mpi,
                 int64_t *timeout_s, int *rc) {
  const char *v = NULL;
  int r;
  if ((r = cli_opt_value(argc, argv, i, NULL, "--dist", &v)) != 0) {
    if (r < 0 || strcmp(v, "mpi") != 0)
      *rc = cli_usage(cmd, "--dist needs 'mpi' (run under mpirun), got '%s'", r < 0 ? "" : v);
    else
      *dist_mpi = 1;
    return 1;
  }
  if ((r = cli_opt_value(argc, argv, i, NULL, "--dist-timeout", &v)) != 0) {
    *rc = cli_int_opt(cmd, "--dist-timeout", r, v, 1, 86400, timeout_s);
    return 1;
  }
  return 0;
}

/* A hash of the model file's bytes and the options: ranks that loaded
 * different files (or options) are refused before they exchange a
 * tensor. */
static int file_hash(const char *path, const void *opts, size_t opts_len, uint64_t *h,
                     fg_status *st) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fg_status_set(st, FG_IO_ERROR, "%s: cannot reopen to hash it for --dist mpi", path);
    return -1;
  }
  unsigned char buf[65536];
  size_t n;
  *h = FG_HASH_SEED;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0)
    *h = fg_hash_bytes(*h, buf, n);
  fclose(f);
  if (opts_len) *h = fg_hash_bytes(*h, opts, opts_len);
  return 0;
}

int cli_dist_join(const char *command, const char *model, const void *opts, size_t opts_len,
                  int64_t timeout_s, fg_comm **comm, fg_status *st) {
  *comm = NULL;
  if (!fg_mpi_launched()) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "--dist mpi: this process was not started by mpirun (try mpirun -np 2 "
                  "flowgraph %s ... --dist mpi)",
                  command);
    return -1;
  }
  *comm = fg_comm_mpi_new((double)timeout_s, st);
  if (!*comm) return -1;
  uint64_t h;
  if (file_hash(model, opts, opts_len, &h, st) != 0 ||
      fg_comm_check_same_u64(*comm, h, "graph", st) != 0)
    return -1;
  return 0;
}
