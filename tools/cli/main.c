/* `flowgraph`: the command line front end. Dispatches to one subcommand per
 * file (cmd_*.c); see cli.h for the exit-code contract. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "flowgraph/io.h"
#include "plan.h"

static const cli_command *const commands[] = {
    &cli_inspect_command, &cli_run_command,    &cli_convert_command,  &cli_grad_command,
    &cli_train_command,   &cli_plan_command,   &cli_profile_command,  &cli_ops_command,
    &cli_import_command,  &cli_export_command, &cli_optimize_command, &cli_freeze_command};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static const cli_command *find_command(const char *name) {
  for (size_t i = 0; i < N_COMMANDS; i++)
    if (strcmp(commands[i]->name, name) == 0) return commands[i];
  return NULL;
}

/* "unknown command 'trian'; did you mean 'train'?" */
/* An unknown command (or, after `help`, topic), with the closest name. */
static int unknown_command(const char *name, int topics_too) {
  const char *names[N_COMMANDS + 1 + 16];
  int n = 0;
  for (size_t i = 0; i < N_COMMANDS; i++)
    names[n++] = commands[i]->name;
  names[n++] = "help";
  for (int i = 0; topics_too && i < cli_help_topic_count() && i < 16; i++)
    names[n++] = cli_help_topic_name(i);
  const char *what = topics_too ? "command or help topic" : "command";
  const char *best = fg_closest_name(name, names, n);
  if (best) return cli_usage(NULL, "unknown %s '%s'; did you mean '%s'?", what, name, best);
  return cli_usage(NULL, "unknown %s '%s'", what, name);
}

static void print_main_help(void) {
  printf("usage: flowgraph COMMAND [ARGS]\n\n"
         "flowgraph runs, inspects and trains static dataflow graphs stored as .fgb files\n"
         "(or their JSON form); every command that reads a model also reads ONNX.\n\n"
         "commands:\n");
  for (size_t i = 0; i < N_COMMANDS; i++)
    printf("  %-10s %s\n", commands[i]->name, commands[i]->summary);
  printf("  %-10s %s\n", "help", "Show this help, or a command's help: flowgraph help COMMAND");
  printf("\nhelp topics (flowgraph help TOPIC):\n");
  for (int i = 0; i < cli_help_topic_count(); i++)
    printf("  %-12s %s\n", cli_help_topic_name(i), cli_help_topic_summary(i));
  printf("\noptions:\n"
         "  -h, --help     show this help\n"
         "  --version      print the version\n\n"
         "exit status: 0 success, 1 runtime error (one line on stderr:\n"
         "\"flowgraph: CODE: message\"), 2 usage error.\n");
}

static int dispatch(int argc, char **argv) {
  if (argc < 2) return cli_usage(NULL, "no command given");
  const char *first = argv[1];
  if (cli_is_help(first)) {
    if (argc > 2) return cli_usage(NULL, "unexpected argument '%s' after %s", argv[2], first);
    print_main_help();
    return CLI_OK;
  }
  if (strcmp(first, "--version") == 0) {
    if (argc > 2) return cli_usage(NULL, "unexpected argument '%s' after --version", argv[2]);
    printf("flowgraph %s (.fgb format version %d)\n", FG_CLI_VERSION, FG_FORMAT_VERSION);
    return CLI_OK;
  }
  if (strcmp(first, "help") == 0) {
    if (argc == 2) {
      print_main_help();
      return CLI_OK;
    }
    if (argc > 3) return cli_usage(NULL, "help takes at most one command or topic name");
    const cli_command *c = find_command(argv[2]);
    if (c)
      cli_print_help(c);
    else if (!cli_print_help_topic(argv[2]))
      return unknown_command(argv[2], 1);
    return CLI_OK;
  }
  if (first[0] == '-') return cli_unknown_option(NULL, first);
  const cli_command *c = find_command(first);
  if (!c) return unknown_command(first, 0);
  return c->main(argc - 1, argv + 1);
}

int main(int argc, char **argv) {
  int rc = dispatch(argc, argv);
  /* A full disk or closed pipe must not pass for success. */
  if ((fflush(stdout) != 0 || ferror(stdout)) && rc == CLI_OK)
    rc = cli_fail(FG_IO_ERROR, "writing to standard output failed");
  return rc;
}
