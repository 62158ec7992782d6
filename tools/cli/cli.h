/* Shared pieces of the `flowgraph` command line tool. The CLI sees only the
 * public API (include/flowgraph/), like any other user of the library.
 *
 * Exit codes: 0 success, 1 runtime error (exactly one line on stderr:
 * "flowgraph: <CODE>: <message>"), 2 usage error (a message line and a
 * usage line on stderr).
 */
#ifndef FG_CLI_H
#define FG_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "flowgraph/status.h"

#define FG_CLI_VERSION "0.1.0"

enum { CLI_OK = 0, CLI_RUNTIME = 1, CLI_USAGE = 2 };

typedef struct cli_command {
  const char *name;
  const char *summary;
  const char *synopsis; /* one line, after "usage: " */
  const char *help;     /* full text for `flowgraph help NAME` */
  int (*main)(int argc, char **argv); /* argv[0] is the subcommand name */
} cli_command;

extern const cli_command cli_inspect_command;
extern const cli_command cli_run_command;
extern const cli_command cli_convert_command;

/* Prints "flowgraph: CODE: message" as one line (newlines in the message
 * become spaces) and returns CLI_RUNTIME. */
int cli_fail_status(const fg_status *s);
/* Same, for a failed load of `path`: prefixes the path when the library's
 * message does not already name it. */
int cli_fail_load(const fg_status *s, const char *path);
int cli_fail(fg_code code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Prints "flowgraph CMD: message" and "usage: SYNOPSIS" and returns
 * CLI_USAGE. */
int cli_usage(const cli_command *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void cli_print_help(const cli_command *cmd);

/* Option matching for "-s VALUE", "--long VALUE" and "--long=VALUE".
 * Returns 1 and sets *value (advancing *i) on a match, 0 when argv[*i] is
 * another option, -1 when the value is missing. */
int cli_opt_value(int argc, char **argv, int *i, const char *short_name, const char *long_name,
                  const char **value);
/* 1 when argv[i] is "--help" or "-h". */
int cli_is_help(const char *arg);

/* Whole-string decimal integer in [min, max]; 0 on success, -1 otherwise. */
int cli_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);
/* "[2,?,3]"; "[]" for rank 0. */
const char *cli_shape_str(int rank, const int64_t *dims, char *buf, size_t size);
/* Case-insensitive check of the final extension (".fgb"). */
int cli_has_ext(const char *path, const char *ext);

#endif
