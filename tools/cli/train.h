/* Shared by cmd_grad.c and cmd_train.c (the commands of issue 3): their
 * command tables and small helpers over the public API. */
#ifndef FG_CLI_TRAIN_H
#define FG_CLI_TRAIN_H

#include <stddef.h>

#include "cli.h"
#include "flowgraph/graph.h"

extern const cli_command cli_grad_command;
extern const cli_command cli_train_command;

/* Loads MODEL.fgb, or its JSON form when the path ends in ".json". */
fg_graph *cli_load_model(const char *path, fg_status *st);
/* "f32 [?,64]" for an output of a graph node. */
const char *cli_describe_output(const fg_graph *g, fg_output o, char *buf, size_t size);
/* Checks, before any long work, that `path` can be created: not a
 * directory, and its directory exists and is writable. `what` names the
 * option in the message ("--save"). */
int cli_check_writable(const char *path, const char *what, fg_status *st);

#endif
