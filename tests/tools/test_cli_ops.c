/* `flowgraph ops`: the op table as users read it, and docs/ops.md, which
 * must be exactly its markdown form. Expected rows are written out by hand
 * from the op table and the kernel registries. */
#include "test_cli_harness.h"

FG_TEST(cli_ops_text_names_attributes_and_kernels, "") {
  FG_REQUIRE(make_tmpdir());
  cli_result r;
  FG_REQUIRE(cli(&r, "ops", "reduce_sum", "add", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "reduce_sum(x): sum over axes\n");
  FG_CHECK_STR_CONTAINS(r.out, "axes           ints = all");
  FG_CHECK_STR_CONTAINS(r.out, "keepdims       int = 0");
  FG_CHECK_STR_CONTAINS(r.out, "cpu: f32 f64 i32 i64;");
  FG_CHECK_STR_CONTAINS(r.out, "add(a, b): a + b, broadcasting\n");
  /* add has no attributes line, and only the two ops named are listed. */
  FG_CHECK(strstr(strstr(r.out, "add(a, b)"), "attributes:") == NULL);
  FG_CHECK(strstr(r.out, "matmul") == NULL);
  result_free(&r);
  FG_REQUIRE(cli(&r, "ops", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "placeholder():");
  FG_CHECK_STR_CONTAINS(r.out, "after(x, ctrl...):");
  FG_CHECK_STR_CONTAINS(r.out, "momentum       float, required");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_ops_bad_arguments, "badinput") {
  FG_REQUIRE(make_tmpdir());
  cli_result r;
  FG_REQUIRE(cli(&r, "ops", "matmull", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "no op named 'matmull'");
  result_free(&r);
  FG_REQUIRE(cli(&r, "ops", "--format", "xml", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  result_free(&r);
  FG_REQUIRE(cli(&r, "ops", "--format", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* Empties column 5 (cuda) of every table row: a build without the CUDA
 * backend lists no CUDA kernels, and docs/ops.md is written from one with. */
static void drop_cuda_column(char *s) {
  for (char *line = s; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
    if (line[0] != '|') continue;
    char *c = line; /* the row's first bar; the cuda cell follows the fifth */
    for (int bar = 0; bar < 4 && c; bar++)
      c = strchr(c + 1, '|');
    char *end = c ? strchr(c + 1, '|') : NULL;
    if (end) memmove(c + 1, end, strlen(end) + 1);
  }
}

FG_TEST(cli_ops_markdown_is_docs_ops_md, "") {
  FG_REQUIRE(make_tmpdir());
  cli_result r;
  FG_REQUIRE(cli(&r, "ops", "--format", "markdown", NULL) == 0);
  CHECK_OK(r);
  char *doc = slurp(FG_SOURCE_DIR "/docs/ops.md");
  FG_REQUIRE(doc != NULL);
  FG_CHECK_STR_CONTAINS(r.out, "| `matmul` | a, b | `transpose_a` (int = 0): ");
  if (fg_op_kernel_dtypes(fg_op_find("matmul"), "cuda") == 0) {
    drop_cuda_column(doc);
    drop_cuda_column(r.out);
  }
  if (strcmp(doc, r.out) != 0)
    FG_FAIL_AT("docs/ops.md is stale: regenerate it with "
               "`flowgraph ops --format markdown > docs/ops.md`");
  free(doc);
  result_free(&r);
  fgt_rmtree(tmpdir);
}
