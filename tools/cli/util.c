/* Error reporting, option parsing and formatting shared by the subcommands. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* One line whatever the message holds: tests and scripts rely on it. */
static void print_one_line(FILE *f, const char *prefix, const char *msg) {
  fputs(prefix, f);
  for (const char *p = msg; *p; p++) fputc(*p == '\n' || *p == '\r' ? ' ' : *p, f);
  fputc('\n', f);
  fflush(f);
}

int cli_fail_status(const fg_status *s) {
  fg_code code = fg_status_code(s);
  const char *msg = fg_status_message(s);
  if (code == FG_OK) {
    /* A library call failed without saying why: still one honest line. */
    code = FG_INTERNAL;
    msg = "a library call failed without setting a status";
  }
  char prefix[64];
  snprintf(prefix, sizeof prefix, "flowgraph: %s: ", fg_code_name(code));
  print_one_line(stderr, prefix, msg && *msg ? msg : "(no message)");
  return CLI_RUNTIME;
}

int cli_fail_load(const fg_status *s, const char *path) {
  const char *msg = fg_status_message(s);
  if (fg_status_code(s) == FG_OK || !msg || strstr(msg, path)) return cli_fail_status(s);
  return cli_fail(fg_status_code(s), "%s: %s", path, msg);
}

int cli_fail(fg_code code, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  char prefix[64];
  snprintf(prefix, sizeof prefix, "flowgraph: %s: ", fg_code_name(code));
  print_one_line(stderr, prefix, msg);
  return CLI_RUNTIME;
}

int cli_usage(const cli_command *cmd, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  char prefix[64];
  snprintf(prefix, sizeof prefix, "flowgraph%s%s: ", cmd ? " " : "", cmd ? cmd->name : "");
  print_one_line(stderr, prefix, msg);
  if (cmd)
    fprintf(stderr, "usage: %s  (see 'flowgraph %s --help')\n", cmd->synopsis, cmd->name);
  else
    fprintf(stderr, "usage: flowgraph COMMAND [ARGS]  (see 'flowgraph --help')\n");
  return CLI_USAGE;
}

void cli_print_help(const cli_command *cmd) {
  printf("usage: %s\n\n%s\n\n%s", cmd->synopsis, cmd->summary, cmd->help);
}

int cli_is_help(const char *arg) { return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0; }

int cli_opt_value(int argc, char **argv, int *i, const char *short_name, const char *long_name,
                  const char **value) {
  const char *a = argv[*i];
  if ((short_name && strcmp(a, short_name) == 0) || (long_name && strcmp(a, long_name) == 0)) {
    if (*i + 1 >= argc) return -1;
    *value = argv[++*i];
    return 1;
  }
  if (long_name) {
    size_t n = strlen(long_name);
    if (strncmp(a, long_name, n) == 0 && a[n] == '=') {
      *value = a + n + 1;
      return 1;
    }
  }
  return 0;
}

int cli_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out) {
  if (!s || !*s || isspace((unsigned char)*s)) return -1;
  errno = 0;
  char *end = NULL;
  long long v = strtoll(s, &end, 10);
  if (errno || !end || *end || v < min || v > max) return -1;
  *out = (int64_t)v;
  return 0;
}

const char *cli_shape_str(int rank, const int64_t *dims, char *buf, size_t size) {
  size_t n = 0;
  if (size == 0) return buf;
  buf[0] = '\0';
  n += (size_t)snprintf(buf, size, "[");
  for (int i = 0; i < rank && n < size; i++) {
    if (dims[i] < 0)
      n += (size_t)snprintf(buf + n, size - n, "%s?", i ? "," : "");
    else
      n += (size_t)snprintf(buf + n, size - n, "%s%" PRId64, i ? "," : "", dims[i]);
  }
  if (n < size) snprintf(buf + n, size - n, "]");
  return buf;
}

int cli_has_ext(const char *path, const char *ext) {
  size_t lp = strlen(path), le = strlen(ext);
  if (lp <= le) return 0;
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  if ((size_t)(path + lp - base) <= le) return 0; /* ".fgb" alone is a name, not an extension */
  for (size_t i = 0; i < le; i++)
    if (tolower((unsigned char)path[lp - le + i]) != tolower((unsigned char)ext[i])) return 0;
  return 1;
}
