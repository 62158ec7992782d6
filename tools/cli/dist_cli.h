/* `--dist mpi` pieces shared by `flowgraph train` and `flowgraph run`. */
#ifndef FG_CLI_DIST_H
#define FG_CLI_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "cli.h"
#include "dist/comm_mpi.h"
#include "flowgraph/status.h"

/* --dist mpi and --dist-timeout SECONDS (1 to 86400) at argv[*i]: 1 when
 * it is one of them (*rc: CLI_OK, or a usage error's exit code, already
 * printed), else 0. */
int cli_dist_opt(const cli_command *cmd, int argc, char **argv, int *i, int *dist_mpi,
                 int64_t *timeout_s, int *rc);

/* Joins the MPI group (refused, naming `command`, outside mpirun) with a
 * collective timeout of `timeout_s` (0: 60 s), then checks that every rank
 * loaded the same model file with the same options (`opts`, `opts_len`
 * bytes hashed after the file; BAD_INPUTS M2), so that ranks that would
 * run different graphs are refused before they exchange anything. 0 with
 * *comm set, or -1 (*comm is then NULL, or set when the check failed: the
 * caller frees it). */
int cli_dist_join(const char *command, const char *model, const void *opts, size_t opts_len,
                  int64_t timeout_s, fg_comm **comm, fg_status *st);

#endif
