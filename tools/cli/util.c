/* Error reporting, the frame of a subcommand's main, option parsing and
 * formatting shared by the subcommands. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "flowgraph/dist.h"
#include "flowgraph/passes.h"

/* One line whatever the message holds: tests and scripts rely on it. The
 * line leaves in writes of up to 4096 bytes (PIPE_BUF, so each is atomic
 * on a pipe), one for any usual message: stderr is unbuffered, and byte by
 * byte the lines of ranks sharing mpirun's stderr came out spliced
 * together. */
static void print_one_line(FILE *f, const char *prefix, const char *msg) {
  char buf[4096];
  size_t n = 0;
  for (int part = 0; part < 3; part++)
    for (const char *p = part == 0 ? prefix : part == 1 ? msg : "\n"; *p; p++) {
      if (n == sizeof buf) {
        fwrite(buf, 1, n, f);
        n = 0;
      }
      buf[n++] = part < 2 && (*p == '\n' || *p == '\r') ? ' ' : *p;
    }
  fwrite(buf, 1, n, f);
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

/* The passes --passes takes, from the library's table, so the help lists
 * every pass there is. */
void cli_print_passes(void) {
  printf("\nGraph optimization passes (--passes), in default order:\n");
  for (int i = 0; i < fg_pass_count(); i++) {
    printf("  %-15s", fg_pass_name(i));
    /* The description in words, lines of up to 78 columns under column 18. */
    int col = 17;
    for (const char *p = fg_pass_description(i); *p;) {
      const size_t len = strcspn(p, " ");
      if (col + 1 + (int)len > 78 && col > 17) printf("\n%17s", ""), col = 17;
      printf(" %.*s", (int)len, p);
      col += 1 + (int)len;
      p += len + strspn(p + len, " ");
    }
    printf("%s\n", fg_pass_default_on(i) ? "" : " (off by default)");
  }
}

void cli_print_help(const cli_command *cmd) {
  printf("usage: %s\n\n%s\n\n%s", cmd->synopsis, cmd->summary, cmd->help);
  if (strstr(cmd->help, "--passes")) cli_print_passes();
}

int cli_job_main(const cli_job *job, void *args, int argc, char **argv) {
  int help = 0;
  int rc = job->parse(argc, argv, args, &help);
  if (rc == CLI_OK && help) {
    cli_print_help(job->cmd);
  } else if (rc == CLI_OK) {
    fg_status *st = fg_status_new();
    const char *failed_load = NULL;
    if (!st) {
      rc = cli_fail(FG_RESOURCE_EXHAUSTED, "out of memory");
    } else if (job->work(args, st, &failed_load) != 0) {
      if (job->before_error) job->before_error();
      rc = failed_load ? cli_fail_load(st, failed_load) : cli_fail_status(st);
    }
    fg_status_free(st);
  }
  job->free_args(args);
  return rc;
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

int cli_append_name(const char ***names, int *n, const char *name) {
  const char **grown = realloc(*names, (size_t)(*n + 1) * sizeof *grown);
  if (!grown) return cli_fail(FG_RESOURCE_EXHAUSTED, "out of memory");
  *names = grown;
  (*names)[(*n)++] = name;
  return CLI_OK;
}

void cli_free_pairs(cli_pair *p, int n) {
  for (int i = 0; p && i < n; i++)
    free(p[i].name);
  free(p);
}

static int parse_pair(const char *value, cli_pair *p) {
  const char *eq = strchr(value, '=');
  if (!eq || eq == value || eq[1] == '\0') return -1;
  size_t n = (size_t)(eq - value);
  char *name = malloc(n + 1);
  if (!name) return -1;
  memcpy(name, value, n);
  name[n] = '\0';
  p->name = name;
  p->path = eq + 1;
  return 0;
}

int cli_pair_opt(const cli_command *cmd, const char *opt, int r, const char *v, const char *what,
                 const char *form, cli_pair *p) {
  if (r < 0) return cli_usage(cmd, "%s needs a value %s", opt, form);
  if (parse_pair(v, p) != 0) return cli_usage(cmd, "bad %s '%s': expected %s", what, v, form);
  return CLI_OK;
}

int cli_value_opt(const cli_command *cmd, const char *opt, const char *need, int r, const char *v,
                  const char *once, const char **slot) {
  if (r < 0 || !*v) return cli_usage(cmd, "%s needs %s", opt, need);
  if (once && *slot) return cli_usage(cmd, "%s given twice", once);
  *slot = v;
  return CLI_OK;
}

int cli_int_opt(const cli_command *cmd, const char *opt, int r, const char *v, int64_t min,
                int64_t max, int64_t *out) {
  if (r < 0 || cli_parse_i64(v, min, max, out) != 0)
    return cli_usage(cmd, "%s needs an integer from %" PRId64 " to %" PRId64, opt, min, max);
  return CLI_OK;
}

int cli_in_flight_opt(const cli_command *cmd, int r, const char *v, int64_t *out) {
  if (r > 0 && strcmp(v, "all") == 0) {
    *out = FG_MICRO_BATCH_UNBOUNDED;
    return CLI_OK;
  }
  if (r < 0 || cli_parse_i64(v, 1, FG_MAX_MICRO_BATCHES, out) != 0)
    return cli_usage(cmd, "--in-flight needs an integer from 1 to %d, or all",
                     FG_MAX_MICRO_BATCHES);
  return CLI_OK;
}

fg_graph *cli_micro_batch(const fg_graph *g, int64_t micro, int64_t in_flight,
                          const char *const *names, int n, int loss_reduction, fg_status *st) {
  fg_micro_batch_options o;
  fg_micro_batch_options_init(&o);
  o.loss_reduction = loss_reduction;
  o.max_in_flight = (int)in_flight;
  return fg_micro_batch_ex(g, (int)micro, names, n, &o, st);
}

int cli_threads_opt(const cli_command *cmd, int r, const char *v, int *threads, int *threads_set) {
  int64_t x;
  if (r < 0 || cli_parse_i64(v, 0, CLI_MAX_THREADS, &x) != 0)
    return cli_usage(cmd, "--threads needs an integer from 0 (all cores) to %d", CLI_MAX_THREADS);
  *threads = (int)x;
  *threads_set = 1;
  return CLI_OK;
}

cli_limits cli_session_limits;

int cli_session_opt(const cli_command *cmd, int argc, char **argv, int *i, int numerics, int *rc) {
  const char *v = NULL;
  int r;
  *rc = CLI_OK;
  if (cli_passes_opt(cmd, argc, argv, i, rc)) return 1;
  if (numerics && strcmp(argv[*i], "--check-numerics") == 0) {
    cli_session_limits.check_numerics = 1;
    return 1;
  }
  if ((r = cli_opt_value(argc, argv, i, NULL, "--max-memory", &v)) == 0) return 0;
  /* Digits, then at most one K/M/G suffix (powers of 1024); the product
   * must fit in 63 bits. */
  char num[32] = "";
  size_t n = r > 0 ? strlen(v) : 0;
  static const char suffixes[] = "kKmMgG";
  const char *suffix = n > 0 ? strchr(suffixes, v[n - 1]) : NULL;
  int shift = suffix ? 10 * (1 + (int)(suffix - suffixes) / 2) : 0;
  if (suffix) n--;
  if (r > 0 && n < sizeof num) memcpy(num, v, n);
  int64_t x;
  if (r < 0 || n == 0 || n >= sizeof num || cli_parse_i64(num, 1, INT64_MAX >> shift, &x) != 0) {
    *rc = cli_usage(cmd, "--max-memory needs a positive byte count (suffix K, M or G allowed)");
    return 1;
  }
  cli_session_limits.max_memory_bytes = x << shift;
  return 1;
}

/* The options of cmd as its synopsis and the option lines of its help
 * (lines that start "  -") name them: "-o", "--output", ... Each is a
 * '-' or "--" and a letter, then letters, digits and '-'. Returns how many
 * (at most max) were written to opts. */
int cli_command_options(const cli_command *cmd, char opts[][CLI_OPT_LEN], int max) {
  int n = 0;
  for (int part = 0; part < 2; part++) {
    const char *p = part == 0 ? cmd->synopsis : cmd->help;
    while (p && *p) {
      const char *eol = strchr(p, '\n');
      const char *end = eol ? eol : p + strlen(p);
      /* The help's option lines only: prose mentions other commands'. */
      const char *q = p;
      if (part == 1) {
        while (q < end && *q == ' ')
          q++;
        /* The option column ends at two spaces before the description. */
        if (q - p < 2 || q >= end || *q != '-') q = end;
      }
      for (; q < end; q++) {
        const int start = *q == '-' && (q == p || strchr(" [|,", q[-1]));
        const char *s = q + (q[1] == '-' ? 2 : 1);
        if (!start || !isalpha((unsigned char)*s)) {
          if (part == 1 && q[0] == ' ' && q[1] == ' ') break;
          continue;
        }
        while (isalnum((unsigned char)*s) || *s == '-')
          s++;
        const size_t len = (size_t)(s - q);
        int dup = len >= CLI_OPT_LEN;
        for (int k = 0; k < n && !dup; k++)
          dup = strlen(opts[k]) == len && strncmp(opts[k], q, len) == 0;
        if (!dup && n < max) {
          memcpy(opts[n], q, len);
          opts[n++][len] = '\0';
        }
        q = s - 1;
      }
      p = eol ? eol + 1 : end;
    }
  }
  return n;
}

int cli_unknown_option(const cli_command *cmd, const char *arg) {
  char opts[128][CLI_OPT_LEN];
  const char *cand[128 + 2];
  int n = cmd ? cli_command_options(cmd, opts, 128) : 0;
  for (int i = 0; i < n; i++)
    cand[i] = opts[i];
  if (!cmd) cand[n++] = "--help", cand[n++] = "--version";
  /* "--epoch=3" is the option "--epoch" with a value. */
  char name[CLI_OPT_LEN * 2];
  snprintf(name, sizeof name, "%.*s", (int)strcspn(arg, "="), arg);
  const char *best = fg_closest_name(name, cand, n);
  if (best) return cli_usage(cmd, "unknown option '%s'; did you mean '%s'?", arg, best);
  return cli_usage(cmd, "unknown option '%s'", arg);
}

int cli_fail_missing_output(fg_status *st, const fg_graph *g, const char *what, const char *name,
                            const char *model) {
  char hint[600];
  fg_graph_output_hint(g, name, hint, sizeof hint);
  fg_status_set(st, FG_NOT_FOUND, "%s '%s': %s has no such node or output%s%s", what, name, model,
                hint[0] ? "; " : "", hint);
  return -1;
}

int cli_model_arg(const cli_command *cmd, const char *arg, const char **model) {
  if (arg[0] == '-' && arg[1] != '\0') return cli_unknown_option(cmd, arg);
  if (*model) return cli_usage(cmd, "unexpected argument '%s' (one MODEL.fgb only)", arg);
  *model = arg;
  return CLI_OK;
}

int cli_check_model_path(const cli_command *cmd, const char *path) {
  if (cli_has_ext(path, ".fgb") || cli_has_ext(path, ".json")) return CLI_OK;
  return cli_usage(cmd, "cannot tell the format of '%s' (expected .fgb or .json)", path);
}

int cli_rewrite_arg(const cli_command *cmd, int argc, char **argv, int *i, const char *out_form,
                    int quiet, cli_rewrite_args *a) {
  const char *arg = argv[*i], *v = NULL;
  int r;
  if ((r = cli_opt_value(argc, argv, i, "-o", "--output", &v)) != 0) {
    char need[64];
    snprintf(need, sizeof need, "a path %s", out_form);
    return cli_value_opt(cmd, arg, need, r, v, "-o", &a->out);
  }
  if ((r = cli_opt_value(argc, argv, i, NULL, "--fetch", &v)) != 0) {
    const char *name = NULL;
    int rc =
        cli_value_opt(cmd, "--fetch", "a name (\"node\" or \"node:index\")", r, v, NULL, &name);
    return rc == CLI_OK ? cli_append_name(&a->fetch, &a->n_fetch, name) : rc;
  }
  if (quiet && (strcmp(arg, "-q") == 0 || strcmp(arg, "--quiet") == 0)) {
    a->quiet = 1;
    return CLI_OK;
  }
  return cli_model_arg(cmd, arg, &a->model);
}

int cli_rewrite_given(const cli_command *cmd, const cli_rewrite_args *a, const char *out_form) {
  if (!a->model) return cli_usage(cmd, "missing MODEL.fgb");
  if (!a->out) return cli_usage(cmd, "missing -o %s", out_form);
  return CLI_OK;
}

void cli_rewrite_free(void *args) { free(((cli_rewrite_args *)args)->fetch); }

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

int64_t cli_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

double cli_now_s(void) { return (double)cli_now_ns() / 1e9; }

uint64_t cli_splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
