/* Every command's options, three ways: the README's synopsis (the ```
 * block of "The `flowgraph` command"), `flowgraph help CMD` (its usage
 * line and its option lines) and the parser. For each command in
 * `flowgraph --help`: every option token of its README synopsis lines is
 * one the help lists, every option the help lists appears in the README
 * synopsis (either spelling of "-o, --output"), every option of the help's
 * usage line has an option line, and the parser knows every option the
 * help lists. Tokens are read by one rule: '-' or "--", a letter, then
 * letters, digits and '-', after a space, '[', '|' or ','. */
#include <ctype.h>

#include "test_cli_harness.h"

#define MAX_OPTS 160
#define OPT_LEN  48

typedef struct opt_set {
  char name[MAX_OPTS][OPT_LEN];
  int group[MAX_OPTS]; /* option lines: spellings of one option share a group */
  int n;
} opt_set;

static int has(const opt_set *s, const char *name) {
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->name[i], name) == 0) return i;
  return -1;
}

/* Adds the option tokens of text[0..len) to s, in group `group`. */
static void add_tokens(opt_set *s, const char *text, size_t len, int group) {
  for (size_t i = 0; i < len; i++) {
    if (text[i] != '-' || (i > 0 && !strchr(" [|,", text[i - 1]))) continue;
    size_t j = i + (i + 1 < len && text[i + 1] == '-' ? 2 : 1);
    if (j >= len || !isalpha((unsigned char)text[j])) continue;
    while (j < len && (isalnum((unsigned char)text[j]) || text[j] == '-'))
      j++;
    char tok[OPT_LEN];
    snprintf(tok, sizeof tok, "%.*s", (int)(j - i), text + i);
    if (has(s, tok) < 0 && s->n < MAX_OPTS) {
      snprintf(s->name[s->n], OPT_LEN, "%s", tok);
      s->group[s->n++] = group;
    }
    i = j - 1;
  }
}

/* The README synopsis block's lines for `cmd`: "flowgraph CMD ..." and
 * the indented lines that continue it. */
static void readme_options(const char *readme, const char *cmd, opt_set *s) {
  const char *sec = strstr(readme, "## The `flowgraph` command");
  FG_REQUIRE(sec);
  const char *b = strstr(sec, "```\n");
  FG_REQUIRE(b);
  b += 4;
  const char *e = strstr(b, "```");
  FG_REQUIRE(e);
  char head[64];
  snprintf(head, sizeof head, "flowgraph %s", cmd);
  const size_t hl = strlen(head);
  int in = 0;
  for (const char *p = b; p < e;) {
    const char *eol = memchr(p, '\n', (size_t)(e - p));
    const size_t len = eol ? (size_t)(eol - p) : (size_t)(e - p);
    /* A line of its own starts a command; indented lines continue it. */
    if (p[0] != ' ') in = len >= hl && strncmp(p, head, hl) == 0 && (len == hl || p[hl] == ' ');
    if (in) add_tokens(s, p, len, -1);
    p += len + 1;
  }
}

/* From `flowgraph help CMD`: the usage line's tokens into `usage`, each
 * option line's into `table` (one group per line). An option line is
 * indented 2 to 4 spaces and starts with '-'; its option column ends at
 * two spaces. */
static void help_options(const char *help, opt_set *usage, opt_set *table) {
  int group = 0;
  for (const char *p = help; *p;) {
    const char *eol = strchr(p, '\n');
    size_t len = eol ? (size_t)(eol - p) : strlen(p);
    if (strncmp(p, "usage: ", 7) == 0) add_tokens(usage, p + 6, len - 6, -1);
    size_t ind = strspn(p, " ");
    if (ind >= 2 && ind <= 4 && ind < len && p[ind] == '-') {
      const char *col = p + ind, *end = p + len;
      const char *gap = strstr(col, "  ");
      if (gap && gap < end) end = gap;
      add_tokens(table, col - 1, (size_t)(end - col) + 1, group++);
    }
    p += len + (eol ? 1 : 0);
  }
}

FG_TEST(cli_help_matches_readme_synopsis, "slow") {
  FG_REQUIRE(make_tmpdir());
  char *readme = slurp(FG_SOURCE_DIR "/README.md");
  FG_REQUIRE(readme);
  cli_result top;
  FG_REQUIRE(cli(&top, "--help", NULL) == 0);
  CHECK_OK(top);
  const char *c = strstr(top.out, "commands:\n");
  FG_REQUIRE(c);
  c += strlen("commands:\n");
  int n_cmds = 0;
  while (strncmp(c, "  ", 2) == 0) {
    char cmd[32];
    FG_REQUIRE(sscanf(c, " %31s", cmd) == 1);
    c = strchr(c, '\n');
    FG_REQUIRE(c);
    c++;
    if (strcmp(cmd, "help") == 0) continue;
    n_cmds++;
    cli_result r;
    FG_REQUIRE(cli(&r, "help", cmd, NULL) == 0);
    CHECK_OK(r);
    static opt_set rd, usage, table;
    memset(&rd, 0, sizeof rd), memset(&usage, 0, sizeof usage), memset(&table, 0, sizeof table);
    readme_options(readme, cmd, &rd);
    help_options(r.out, &usage, &table);
    result_free(&r);
    char head[64];
    snprintf(head, sizeof head, "\nflowgraph %s", cmd);
    if (!strstr(readme, head)) FG_FAIL_AT("README synopsis lacks 'flowgraph %s'", cmd);
    for (int i = 0; i < rd.n; i++)
      if (has(&table, rd.name[i]) < 0)
        FG_FAIL_AT("README: %s of flowgraph %s is no option of its help", rd.name[i], cmd);
    for (int i = 0; i < usage.n; i++)
      if (has(&table, usage.name[i]) < 0)
        FG_FAIL_AT("flowgraph help %s: usage names %s, which no option line lists", cmd,
                   usage.name[i]);
    for (int i = 0; i < table.n; i++) {
      int found = 0;
      for (int k = 0; k < table.n && !found; k++)
        found = table.group[k] == table.group[i] && has(&rd, table.name[k]) >= 0;
      if (!found)
        FG_FAIL_AT("flowgraph help %s lists %s, which the README synopsis lacks", cmd,
                   table.name[i]);
      /* The parser knows it: whatever else is wrong, not "unknown option". */
      FG_REQUIRE(cli(&r, cmd, table.name[i], NULL) == 0);
      if (strstr(r.err, "unknown option"))
        FG_FAIL_AT("flowgraph %s %s: %s", cmd, table.name[i], r.err);
      FG_CHECK(r.code == 0 || r.code == 1 || r.code == 2);
      result_free(&r);
    }
  }
  /* inspect, run, convert, grad, train, plan, profile, ops, import,
   * export, optimize and freeze at least. */
  FG_CHECK(n_cmds >= 12);
  result_free(&top);
  free(readme);
  fgt_rmtree(tmpdir);
}

/* The rule the test reads options by, on lines written out by hand. */
FG_TEST(cli_help_option_tokens, "") {
  static opt_set u, t;
  memset(&u, 0, sizeof u), memset(&t, 0, sizeof t);
  help_options("usage: flowgraph x MODEL [-o OUT|--no-out] [--a-b N] x-y\n\n"
               "options:\n"
               "  -o, --output OUT   where -q goes\n"
               "  --no-out           nothing --else\n"
               "      --deeper       a continuation line, not an option line\n",
               &u, &t);
  FG_CHECK_INT(u.n, 3);
  FG_CHECK(has(&u, "-o") >= 0 && has(&u, "--no-out") >= 0 && has(&u, "--a-b") >= 0);
  FG_CHECK_INT(t.n, 3);
  FG_CHECK_INT(t.group[has(&t, "-o")], t.group[has(&t, "--output")]);
  FG_CHECK(t.group[has(&t, "--no-out")] != t.group[has(&t, "-o")]);
  FG_CHECK(has(&t, "-q") < 0 && has(&t, "--else") < 0 && has(&t, "--deeper") < 0);
}

/* `flowgraph help TOPIC`: the main help lists the topics; each prints what
 * it names; an unknown one is a usage error with the closest name. */
FG_TEST(cli_help_topics, "") {
  FG_REQUIRE(make_tmpdir());
  cli_result top;
  FG_REQUIRE(cli(&top, "--help", NULL) == 0);
  CHECK_OK(top);
  static const char *const topic[][3] = {
      {"formats", "FGB1", "<f4 <f8 <i4 <i8"},
      {"environment", "FG_PASSES=off|LIST", "FG_LIBXSMM=0"},
      {"exit-status", "2  usage error", "\"flowgraph: CODE: message\""},
      {"passes", "multi_update", "conv_epilogue"},
  };
  for (size_t i = 0; i < sizeof topic / sizeof topic[0]; i++) {
    char line[64];
    snprintf(line, sizeof line, "\n  %s ", topic[i][0]);
    if (!strstr(top.out, line)) FG_FAIL_AT("flowgraph --help does not list topic %s", topic[i][0]);
    cli_result r;
    FG_REQUIRE(cli(&r, "help", topic[i][0], NULL) == 0);
    CHECK_OK(r);
    FG_CHECK_STR_CONTAINS(r.out, topic[i][1]);
    FG_CHECK_STR_CONTAINS(r.out, topic[i][2]);
    result_free(&r);
  }
  result_free(&top);
  cli_result r;
  FG_REQUIRE(cli(&r, "help", "formtas", NULL) == 0);
  FG_CHECK_INT(r.code, 2);
  FG_CHECK_STR_CONTAINS(r.err, "unknown command or help topic 'formtas'; did you mean 'formats'?");
  result_free(&r);
  FG_REQUIRE(cli(&r, "help", "formats", "passes", NULL) == 0);
  FG_CHECK_INT(r.code, 2);
  FG_CHECK_STR_CONTAINS(r.err, "help takes at most one command or topic name");
  result_free(&r);
}
