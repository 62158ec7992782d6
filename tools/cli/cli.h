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

#include "flowgraph/graph.h"
#include "flowgraph/session.h"
#include "flowgraph/status.h"

#define FG_CLI_VERSION "0.1.0"

enum { CLI_OK = 0, CLI_RUNTIME = 1, CLI_USAGE = 2 };

typedef struct cli_command {
  const char *name;
  const char *summary;
  const char *synopsis;               /* one line, after "usage: " */
  const char *help;                   /* full text for `flowgraph help NAME` */
  int (*main)(int argc, char **argv); /* argv[0] is the subcommand name */
} cli_command;

extern const cli_command cli_inspect_command;
extern const cli_command cli_run_command;
extern const cli_command cli_convert_command;
extern const cli_command cli_grad_command;
extern const cli_command cli_train_command;
extern const cli_command cli_ops_command;
extern const cli_command cli_import_command;
extern const cli_command cli_export_command;
extern const cli_command cli_optimize_command;
extern const cli_command cli_freeze_command;

/* ---- errors (util.c) ---------------------------------------------------- */

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
/* The graph optimization passes, one paragraph each (util.c). */
void cli_print_passes(void);
/* `flowgraph help TOPIC` (help_topics.c): topics besides the commands. */
int cli_help_topic_count(void);
const char *cli_help_topic_name(int i);
const char *cli_help_topic_summary(int i);
/* Prints topic `name` and returns 1, or 0 when there is none. */
int cli_print_help_topic(const char *name);

/* ---- running a subcommand (util.c) -------------------------------------- */

/* A subcommand that parses its arguments into a struct and then works on a
 * model. `parse` returns CLI_OK (setting *help for --help) or the exit code
 * of an error it printed. `work` returns 0, or -1 with `st` set, pointing
 * *failed_load at the model path when loading it was what failed.
 * `before_error` (may be NULL) runs before the error line is printed. */
typedef struct cli_job {
  const cli_command *cmd;
  int (*parse)(int argc, char **argv, void *args, int *help);
  int (*work)(void *args, fg_status *st, const char **failed_load);
  void (*free_args)(void *args);
  void (*before_error)(void);
} cli_job;
/* The whole main of such a subcommand, over `args` zeroed by the caller:
 * parse, print the help or do the work, report, free the arguments. */
int cli_job_main(const cli_job *job, void *args, int argc, char **argv);

/* ---- options (util.c) --------------------------------------------------- */

/* Option matching for "-s VALUE", "--long VALUE" and "--long=VALUE".
 * Returns 1 and sets *value (advancing *i) on a match, 0 when argv[*i] is
 * another option, -1 when the value is missing. */
int cli_opt_value(int argc, char **argv, int *i, const char *short_name, const char *long_name,
                  const char **value);
/* Appends `name` to the malloc'ed list *names of *n: CLI_OK, or the exit
 * code of the out-of-memory error it printed. */
int cli_append_name(const char ***names, int *n, const char *name);
/* 1 when argv[i] is "--help" or "-h". */
int cli_is_help(const char *arg);

/* NAME=PATH from -i, -o or --eval-input. */
typedef struct cli_pair {
  char *name;       /* malloc'ed */
  const char *path; /* points into argv */
} cli_pair;
/* Frees the names of p[0..n) and p itself. */
void cli_free_pairs(cli_pair *p, int n);

/* Handlers for the value of a matched option (r and v from cli_opt_value),
 * shared by the subcommands so that the same option reads and fails the
 * same way everywhere. Each returns CLI_OK or the exit code of the usage
 * error it printed. */
/* A NAME=PATH value into *p; `what` ("input") and `form` ("NAME=FILE.npy")
 * word the messages. */
int cli_pair_opt(const cli_command *cmd, const char *opt, int r, const char *v, const char *what,
                 const char *form, cli_pair *p);
/* A non-empty value into *slot; `need` ends "OPT needs ...". With `once`
 * (the option's name in "ONCE given twice"), *slot must still be NULL;
 * without, the option may repeat. */
int cli_value_opt(const cli_command *cmd, const char *opt, const char *need, int r, const char *v,
                  const char *once, const char **slot);
/* An integer in [min, max] ("OPT needs an integer from MIN to MAX"). */
int cli_int_opt(const cli_command *cmd, const char *opt, int r, const char *v, int64_t min,
                int64_t max, int64_t *out);
/* --in-flight K|all with --micro-batches: fg_micro_batch_options'
 * max_in_flight, K from 1 to FG_MAX_MICRO_BATCHES or FG_MICRO_BATCH_UNBOUNDED
 * for "all". */
int cli_in_flight_opt(const cli_command *cmd, int r, const char *v, int64_t *out);
/* fg_micro_batch_ex of `micro` micro-batches over the batch inputs
 * `names`, with `loss_reduction` and max_in_flight `in_flight` (0: the
 * default), for train, plan and profile alike. */
fg_graph *cli_micro_batch(const fg_graph *g, int64_t micro, int64_t in_flight,
                          const char *const *names, int n, int loss_reduction, fg_status *st);
/* --threads N: 0 (all cores) to CLI_MAX_THREADS, the session's own
 * limit (fg_session_new checks it too, for C API users): a count out of
 * range is a usage error, like any other bad number. */
#define CLI_MAX_THREADS 1024
int cli_threads_opt(const cli_command *cmd, int r, const char *v, int *threads, int *threads_set);
/* --check-numerics (with `numerics`) and --max-memory BYTES (suffix K, M or
 * G: powers of 1024): returns 1 when argv[*i] is one of them, setting *rc to
 * CLI_OK or the exit code of the usage error it printed; 0 otherwise. The
 * values go to cli_session_limits, which cli_new_session applies: one
 * command runs per process. */
int cli_session_opt(const cli_command *cmd, int argc, char **argv, int *i, int numerics, int *rc);
typedef struct cli_limits {
  int check_numerics;
  int64_t max_memory_bytes;
  /* --device NAME (run, train): the session's device; NULL is cpu:0. A
   * device that does not exist (cuda:0 without a GPU or without the CUDA
   * backend) fails at session creation with one line naming it. */
  const char *device;
  /* --no-passes, --passes LIST: the session's optimization passes
   * (flowgraph/passes.h); show_passes: plan prints what they did. */
  int no_passes;
  const char *passes;
  int show_passes;
} cli_limits;
extern cli_limits cli_session_limits;
/* --no-passes and --passes LIST (passes_cli.c), as cli_session_opt, which
 * calls it; for plan a bare --passes (no list follows) asks for the
 * report. */
int cli_passes_opt(const cli_command *cmd, int argc, char **argv, int *i, int *rc);
struct fg_pass_options;
struct fg_pass_report;
/* The pass options --passes and --no-passes gave. */
void cli_pass_options(struct fg_pass_options *po);
/* Prints per pass what it did: counts, then one line per change. */
void cli_print_pass_report(const struct fg_pass_report *r, const struct fg_pass_options *po);
/* What the passes do to g for these fetches (fg_optimize), printed. 0, or
 * -1 with st set. */
int cli_pass_report(const fg_graph *g, const char *const *fetches, int n_fetches, fg_status *st);
/* An argument that matched no option: unknown when it starts with '-',
 * else the one MODEL.fgb. */
int cli_model_arg(const cli_command *cmd, const char *arg, const char **model);
/* The longest option name cli_command_options reports, with its NUL. */
#define CLI_OPT_LEN 48
/* The options cmd's synopsis and help list ("-o", "--output", ...), each
 * once: how many (at most max) were written to opts. */
int cli_command_options(const cli_command *cmd, char opts[][CLI_OPT_LEN], int max);
/* "unknown option 'ARG'", with "; did you mean '--x'?" when one of cmd's
 * options (cli_command_options; NULL cmd: the top level's) is close: the
 * usage error every command reports for an option it does not know. */
int cli_unknown_option(const cli_command *cmd, const char *arg);
/* FG_NOT_FOUND "WHAT 'NAME': MODEL has no such node or output", with
 * fg_graph_output_hint's hint: -1. */
int cli_fail_missing_output(fg_status *st, const fg_graph *g, const char *what, const char *name,
                            const char *model);
/* A model path whose format the extension tells (.fgb or .json). */
int cli_check_model_path(const cli_command *cmd, const char *path);

/* MODEL -o OUT [--fetch NAME ...] [-q]: what the commands that write a
 * rewritten model share (optimize, freeze, export). */
typedef struct cli_rewrite_args {
  const char *model, *out;
  const char **fetch; /* pointers into argv */
  int n_fetch;
  int quiet;
} cli_rewrite_args;
/* Takes argv[*i] when it is -o/--output (`out_form` words the value,
 * "OUT.fgb"), --fetch, -q/--quiet (when `quiet`) or MODEL: CLI_OK or the
 * usage error it printed. Every other option belongs to the caller, which
 * matches it first. */
int cli_rewrite_arg(const cli_command *cmd, int argc, char **argv, int *i, const char *out_form,
                    int quiet, cli_rewrite_args *a);
/* After the arguments: MODEL and -o were given (CLI_OK), else the usage
 * error printed. */
int cli_rewrite_given(const cli_command *cmd, const cli_rewrite_args *a, const char *out_form);
/* cli_job's free_args for arguments that start with a cli_rewrite_args. */
void cli_rewrite_free(void *args);

/* ---- formatting and small utilities (util.c) ---------------------------- */

/* Whole-string decimal integer in [min, max]; 0 on success, -1 otherwise. */
int cli_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);
/* "[2,?,3]"; "[]" for rank 0. */
const char *cli_shape_str(int rank, const int64_t *dims, char *buf, size_t size);
/* Case-insensitive check of the final extension (".fgb"). */
int cli_has_ext(const char *path, const char *ext);
/* Seconds on a monotonic clock. */
double cli_now_s(void);
/* CLOCK_MONOTONIC in ns: the clock of fg_run_metadata.start_ns. */
int64_t cli_now_ns(void);
/* The documented random stream of run --random-inputs and train --shuffle:
 * splitmix64, advancing *state. */
uint64_t cli_splitmix64(uint64_t *state);

/* ---- models, tensors and sessions (model.c) ----------------------------- */

/* Loads an ONNX model (recognised by its first bytes, or a ".onnx"
 * extension), MODEL.fgb, or its JSON form when the path ends in ".json".
 * A .fgb named .json (recognised by its FlatBuffers identifier) or JSON
 * named otherwise loads by its content, after a note on stderr. */
fg_graph *cli_load_model(const char *path, fg_status *st);
/* 1 when cli_load_model reads `path` as ONNX. */
int cli_is_onnx(const char *path);
/* --trainable (import, grad, train): an ONNX model's floating-point
 * initializers load as variables (fg_onnx_options.trainable). */
extern int cli_onnx_trainable;
/* Saves as JSON when the path ends in ".json", else as .fgb. */
int cli_save_model(const fg_graph *g, const char *path, fg_status *st);
/* "node" for output 0, "node:index" otherwise ("?" for a missing node). */
void cli_output_name(const fg_graph *g, fg_output o, char *buf, size_t size);
/* "f32 [?,64]" for an output of a graph node ("[unknown]" shape when it
 * has none). */
const char *cli_describe_output(const fg_graph *g, fg_output o, char *buf, size_t size);
/* "f32 [8,64]" for a tensor. */
const char *cli_describe_tensor(const fg_tensor *t, char *buf, size_t size);

/* Why `path` cannot be created, found before any long work: */
enum {
  CLI_PATH_OK = 0,
  CLI_PATH_IS_DIR,    /* it names a directory */
  CLI_PATH_NO_DIR,    /* its directory does not exist */
  CLI_PATH_READ_ONLY, /* its directory is not writable; errno says why */
};
/* One of the CLI_PATH_ values; fills `dir` (size bytes) with the
 * directory, or with the path itself when it is written in place (a
 * device, FIFO or link: flowgraph/io.h), which must then be writable
 * itself. */
int cli_path_problem(const char *path, char *dir, size_t size);
/* cli_path_problem as an FG_IO_ERROR; `what` names the option in the
 * message ("--save"). */
int cli_check_writable(const char *path, const char *what, fg_status *st);

/* A session over `g`, with `threads` workers when threads_set, and
 * cli_session_limits' options and device. */
fg_session *cli_new_session(fg_graph *g, int threads_set, int threads, fg_status *st);

#endif
