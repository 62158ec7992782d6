/* `--dist mpi` pieces shared by `flowgraph train` and `flowgraph run`. */
#include "dist_cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
      fg_comm_check_same(*comm, h, "graph", CLI_SAME_HINT, st) != 0)
    return -1;
  return 0;
}

/* Every rank's host: a hash of its host name (gethostname), gathered. */
static uint64_t *gather_hosts(fg_comm *world, fg_status *st) {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "?");
  uint64_t *all = calloc((size_t)fg_comm_size(world), sizeof *all);
  if (!all) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
    return NULL;
  }
  uint64_t mine = fg_hash_bytes(FG_HASH_SEED, host, strlen(host));
  if (fg_comm_all_gather_u64(world, mine, all, st) != 0) {
    free(all);
    return NULL;
  }
  return all;
}

int cli_dist_is_local_gpu(const char *device) {
  return device && strcmp(device, "cuda:local") == 0;
}

void cli_dist_dp_options(const char *device, fg_data_parallel_options *o) {
  fg_data_parallel_options_init(o);
  o->fused_update = !device || strncmp(device, "cuda", 4) != 0;
}

int cli_dist_use_local_gpu(fg_comm *world, fg_status *st) {
  static char name[32];
  uint64_t *hosts = gather_hosts(world, st);
  if (!hosts) return -1;
  int local = 0;
  for (int r = 0; r < fg_comm_rank(world); r++)
    local += hosts[r] == hosts[fg_comm_rank(world)];
  /* Every rank learns every rank's GPU count, so a rank without one fails
   * them all alike instead of leaving the others in the next exchange. */
  int gpus = fg_cuda_device_count();
  int rc = fg_comm_all_gather_u64(world, (uint64_t)gpus, hosts, st);
  for (int r = 0; rc == 0 && r < fg_comm_size(world); r++)
    if (hosts[r] == 0) {
      fg_status_set(st, FG_INVALID_ARGUMENT, "--device cuda:local: rank %d sees no CUDA device", r);
      rc = -1;
    }
  free(hosts);
  if (rc == 0) {
    snprintf(name, sizeof name, "cuda:%d", local % gpus);
    cli_session_limits.device = name;
  }
  return rc;
}

int cli_dist_gpu_comm(fg_comm *world, const char *device, int mode, double timeout_s,
                      fg_comm **nccl, fg_status *st) {
  *nccl = NULL;
  /* The rank's GPU, or -1 off the GPU (a device that does not exist
   * fails when the session is made). */
  fg_device d;
  int gpu =
      device && fg_parse_device(device, &d, NULL) == 0 && d.kind == FG_DEVICE_CUDA ? d.index : -1;
  if (mode == CLI_DIST_COMM_MPI) return 0;
  /* Each rank's (host, GPU + 1), 0 for a rank off the GPU. */
  uint64_t *hosts = gather_hosts(world, st);
  if (!hosts) return -1;
  uint64_t *keys = calloc((size_t)fg_comm_size(world), sizeof *keys);
  uint64_t mine = gpu < 0 ? 0 : fg_hash_bytes(hosts[fg_comm_rank(world)], &gpu, sizeof gpu) | 1;
  int rc = keys ? fg_comm_all_gather_u64(world, mine, keys, st) : -1;
  if (!keys) fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
  free(hosts);
  /* Why NCCL cannot run, the same on every rank (same keys, same build). */
  char why[160] = "";
  for (int r = 0; rc == 0 && !why[0] && r < fg_comm_size(world); r++) {
    if (keys[r] == 0) {
      snprintf(why, sizeof why, "rank %d does not run on a CUDA device", r);
      break;
    }
    for (int q = 0; q < r; q++)
      if (keys[q] == keys[r]) {
        snprintf(why, sizeof why,
                 "ranks %d and %d run on the same GPU (NCCL needs one GPU per rank: try "
                 "--device cuda:local)",
                 q, r);
        break;
      }
  }
  free(keys);
  if (rc != 0) return -1;
  if (!why[0] && !fg_nccl_built())
    snprintf(why, sizeof why, "this flowgraph was built without NCCL");
  if (why[0]) {
    if (mode != CLI_DIST_COMM_NCCL) return 0;
    fg_status_set(st, FG_INVALID_ARGUMENT, "--dist-comm nccl: %s", why);
    return -1;
  }
  *nccl = fg_comm_nccl_new(world, gpu, timeout_s, st);
  return *nccl ? 0 : -1;
}

void cli_print_reduce_path(const char *prefix, const fg_comm *c) {
  fg_comm_stats s;
  fg_comm_get_stats(c, &s);
  uint64_t in_place = s.in_place_reduces, fused = s.fused_updates;
  printf("%sgradients all-reduced over %s", prefix, s.reduce_path);
  if (in_place) printf("; %" PRIu64 " all_reduces read the ranks' buffers in place", in_place);
  if (fused) printf(" (%" PRIu64 " of them with their SGD update: fused_update)", fused);
  /* What left this process as messages: across hosts, the network's
   * share (fg_comm_stats). */
  uint64_t sent = s.message_bytes;
  if (sent)
    printf("; rank %d sent %" PRIu64 " bytes of them as MPI messages", fg_comm_rank(c), sent);
  printf("\n");
}
