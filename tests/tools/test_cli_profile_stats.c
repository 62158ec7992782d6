/* `flowgraph profile`'s figures checked against values worked out by hand:
 * per-node FLOPs (matmul 2*M*N*K, one per element for add), bytes read,
 * written and placed in the arena, input shapes and calls; the nearest-rank
 * latency percentiles (a unit test of the function, and the JSON's
 * percentiles recomputed from its own run list); throughput and samples/s;
 * the CSV and JSON forms; the trace's run slices; inference by default and
 * --train; --batch on inspect, plan and profile, and their bad inputs. */
#include "test_cli_train_util.h"
#include "test_cli_profile_model.h"
/* The statistics are plain C over libc: compiled in to test them alone. */
#include "tools/cli/profile_stats.c"

/* ---- helpers -------------------------------------------------------------------- */

static int count_str(const char *s, const char *needle) {
  int n = 0;
  for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
    n++;
  return n;
}

/* The JSON object of node NAME in profile --format json: from its "name"
 * key to its closing brace. A node object ends with its inputs array:
 * "...}]}", or "[]}" when it has none. A malloc'ed copy. */
static char *json_node(const char *js, const char *name) {
  char key[160];
  snprintf(key, sizeof key, "\"name\":\"%s\"", name);
  const char *p = strstr(js, key);
  if (!p) return NULL;
  const char *e1 = strstr(p, "}]}"), *e2 = strstr(p, "[]}");
  const char *e = e1 && (!e2 || e1 < e2) ? e1 : e2;
  if (!e) return NULL;
  size_t n = (size_t)(e - p) + 3;
  char *s = malloc(n + 1);
  memcpy(s, p, n);
  s[n] = '\0';
  return s;
}

/* The number after "KEY": in s; NAN when absent or null. */
static double json_num(const char *s, const char *key) {
  char k[80];
  snprintf(k, sizeof k, "\"%s\":", key);
  const char *p = s ? strstr(s, k) : NULL;
  double v;
  if (!p || sscanf(p + strlen(k), "%lf", &v) != 1) return NAN;
  return v;
}

static int write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fputs(text, f);
  return fclose(f);
}

/* The line of `out` that starts with `prefix` (after leading spaces), as a
 * malloc'ed copy; NULL when none. */
static char *line_with(const char *out, const char *prefix) {
  for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
    const char *q = p;
    while (*q == ' ')
      q++;
    if (strncmp(q, prefix, strlen(prefix)) == 0) {
      const char *e = strchr(q, '\n');
      size_t n = e ? (size_t)(e - q) : strlen(q);
      char *s = malloc(n + 1);
      memcpy(s, q, n);
      s[n] = '\0';
      return s;
    }
  }
  return NULL;
}

/* The row of node NAME in inspect's node table ("  ID  NAME  op ..."), a
 * malloc'ed copy; NULL when none. */
static char *node_row(const char *out, const char *name) {
  char key[80];
  snprintf(key, sizeof key, "  %s  ", name);
  const char *p = strstr(out, "\nnodes (");
  p = p ? strstr(p, key) : NULL;
  if (!p) return NULL;
  while (p > out && p[-1] != '\n')
    p--;
  const char *e = strchr(p, '\n');
  size_t n = e ? (size_t)(e - p) : strlen(p);
  char *s = malloc(n + 1);
  memcpy(s, p, n);
  s[n] = '\0';
  return s;
}

/* ---- the statistics, by hand ------------------------------------------------------ */

FG_TEST(profile_stats_nearest_rank, "") {
  /* Nearest rank: the value at 1-based rank ceil(p * n / 100). */
  const double five[5] = {15, 20, 35, 40, 50};
  FG_CHECK(prof_percentile(five, 5, 30) == 20); /* ceil(1.5) = 2 */
  FG_CHECK(prof_percentile(five, 5, 40) == 20); /* ceil(2.0) = 2 */
  FG_CHECK(prof_percentile(five, 5, 50) == 35); /* ceil(2.5) = 3 */
  FG_CHECK(prof_percentile(five, 5, 90) == 50); /* ceil(4.5) = 5 */
  FG_CHECK(prof_percentile(five, 5, 100) == 50);
  /* 10 values: p90 is exactly rank 9, not 10 (no floating-point 9.000...1). */
  double ten[10];
  for (int i = 0; i < 10; i++)
    ten[i] = i + 1;
  FG_CHECK(prof_percentile(ten, 10, 90) == 9);
  FG_CHECK(prof_percentile(ten, 10, 50) == 5);
  FG_CHECK(prof_percentile(ten, 10, 99) == 10);
  /* 200 values 1..200: p50 rank 100, p90 rank 180, p99 rank 198. */
  double many[200];
  for (int i = 0; i < 200; i++)
    many[i] = i + 1;
  FG_CHECK(prof_percentile(many, 200, 50) == 100);
  FG_CHECK(prof_percentile(many, 200, 90) == 180);
  FG_CHECK(prof_percentile(many, 200, 99) == 198);
  /* One value is every percentile. */
  FG_CHECK(prof_percentile(five + 2, 1, 1) == 35 && prof_percentile(five + 2, 1, 99) == 35);
}

FG_TEST(profile_stats_latency_of_unsorted, "") {
  /* {2,4,4,4,5,5,7,9} shuffled: mean 5, population std 2 (the squared
   * deviations 9+1+1+1+0+0+4+16 = 32, over 8 = 4); p50 rank 4 -> 4, p90
   * rank ceil(7.2) = 8 -> 9, p99 rank 8 -> 9. The input stays unsorted. */
  double v[8] = {7, 4, 9, 2, 5, 4, 5, 4};
  prof_latency l;
  FG_REQUIRE(prof_latency_of(v, 8, &l) == 0);
  FG_CHECK_INT(l.n, 8);
  FG_CHECK(l.min == 2 && l.max == 9);
  FG_CHECK(fabs(l.mean - 5) < 1e-12 && fabs(l.std - 2) < 1e-12);
  FG_CHECK(l.p50 == 4 && l.p90 == 9 && l.p99 == 9);
  FG_CHECK(v[0] == 7 && v[3] == 2);
  FG_CHECK(prof_latency_of(v, 0, &l) == -1);
  /* Peak memory of this process: at least the 200 KB its code and stack
   * need, below 1 TiB. */
  int64_t rss = prof_peak_rss_bytes();
  FG_CHECK(rss > 200 * 1024 && rss < (int64_t)1 << 40);
}

/* ---- per-node figures ------------------------------------------------------------- */

/* build_fixed: a [2,4] f32 fed, mm = a w (w [4,3]), out = mm + c [3].
 * By hand, per call: mm 2*M*N*K = 2*2*3*4 = 48 FLOPs, reads a (32 bytes)
 * and w (48), writes [2,3] f32 = 24 bytes, all in the arena; out 6 FLOPs
 * (one per element), reads mm (24) and c (12), writes 24, none in the
 * arena (a fetched output). */
FG_TEST(cli_profile_node_figures_json, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_fixed(tpath("fixed.fgb")) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "profile", tpath("fixed.fgb"), "--random-inputs", "--runs", "5", "--warmup",
                 "1", "--no-passes", "--format", "json", NULL) == 0);
  CHECK_OK(r);
  char *mm = json_node(r.out, "mm"), *out = json_node(r.out, "out");
  FG_REQUIRE(mm && out);
  FG_CHECK_STR_CONTAINS(mm, "\"op\":\"matmul\"");
  FG_CHECK(json_num(mm, "flops") == 48);
  FG_CHECK(json_num(mm, "bytes_read") == 80);
  FG_CHECK(json_num(mm, "bytes_written") == 24);
  FG_CHECK(json_num(mm, "arena_bytes") == 24);
  FG_CHECK(json_num(mm, "calls") == 5);
  FG_CHECK_STR_CONTAINS(mm, "\"shape\":[2,3]");
  FG_CHECK_STR_CONTAINS(mm, "\"inputs\":[{\"dtype\":\"f32\",\"shape\":[2,4]},"
                            "{\"dtype\":\"f32\",\"shape\":[4,3]}]");
  FG_CHECK(json_num(out, "flops") == 6);
  FG_CHECK(json_num(out, "bytes_read") == 36);
  FG_CHECK(json_num(out, "bytes_written") == 24);
  FG_CHECK(json_num(out, "arena_bytes") == 0);
  FG_CHECK(json_num(out, "calls") == 5);
  /* GFLOP/s = FLOPs / ns of the average call; GB/s = bytes / ns. */
  double us = json_num(mm, "avg_us"), gf = json_num(mm, "gflops_per_s");
  double gb = json_num(mm, "gb_per_s");
  if (us > 0) {
    FG_CHECK(fabs(gf - 48 / (us * 1e3)) <= 1e-3 * gf + 1e-6);
    FG_CHECK(fabs(gb - 104 / (us * 1e3)) <= 1e-3 * gb + 1e-6);
  }
  /* The fixed model has no batch dimension: no samples/s. */
  FG_CHECK_STR_CONTAINS(r.out, "\"batch\":null");
  FG_CHECK_STR_CONTAINS(r.out, "\"samples_per_s\":null");
  FG_CHECK_STR_CONTAINS(r.out, "\"profiled\":\"inference\"");
  FG_CHECK(json_num(r.out, "peak_rss_bytes") > 1e5);
  free(mm);
  free(out);
  /* Valid JSON whose latency figures are the nearest-rank percentiles of
   * its own list of runs. */
  FG_REQUIRE(write_text(tpath("p.json"), r.out) == 0);
  int py = fgt_python(
      "import json,math,sys; d=json.load(open(sys.argv[1])); r=sorted(d['run_us']); n=len(r); "
      "assert n==5 and d['runs']==5, d; l=d['latency_us']; "
      "pc=lambda p: r[max(1,math.ceil(p*n/100))-1]; "
      "assert (l['p50'],l['p90'],l['p99'])==(pc(50),pc(90),pc(99)), l; "
      "assert l['min']==r[0] and l['max']==r[-1], l; "
      "m=sum(r)/n; assert abs(l['mean']-m)<=1e-6*m, l; "
      "assert abs(l['std']-math.sqrt(sum((x-m)**2 for x in r)/n))<=1e-6*m+1e-9, l; "
      "assert abs(d['runs_per_s']-n/(sum(r)/1e6))<=1e-6*d['runs_per_s'], d; "
      "assert [x['name'] for x in d['nodes']]==['mm','out'], d['nodes']; "
      "assert sorted(o['op'] for o in d['by_op'])==['add','matmul'], d['by_op']",
      tpath("p.json"), NULL);
  FG_CHECK_PYTHON(py);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_profile_node_figures_text, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_fixed(tpath("fixed.fgb")) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "profile", tpath("fixed.fgb"), "--random-inputs", "--runs", "3", "--no-passes",
                 NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "profiled: inference\n");
  FG_CHECK_STR_CONTAINS(r.out, "avg µs");
  /* step node op avg-µs % calls flops GFLOP/s read written GB/s arena
   * output <- inputs */
  char *row = line_with(r.out, "0  mm ");
  FG_REQUIRE(row);
  int step, calls;
  long long flops, rd, wr, arena;
  char name[16], op[16], gfs[32], gbs[32], pc[16];
  double us;
  FG_REQUIRE(sscanf(row, "%d %15s %15s %lf %15s %d %lld %31s %lld %lld %31s %lld", &step, name, op,
                    &us, pc, &calls, &flops, gfs, &rd, &wr, gbs, &arena) == 12);
  FG_CHECK_INT(calls, 3);
  FG_CHECK_INT(flops, 48);
  FG_CHECK_INT(rd, 80);
  FG_CHECK_INT(wr, 24);
  FG_CHECK_INT(arena, 24);
  FG_CHECK_STR_CONTAINS(row, "f32 [2,3]  <-  f32 [2,4], f32 [4,3]");
  free(row);
  /* The summary by op carries the FLOPs per run too. */
  char *mm = line_with(strstr(r.out, "Summary by op type"), "matmul ");
  FG_REQUIRE(mm);
  int count;
  double avg, p1, p2, kb;
  FG_REQUIRE(
      sscanf(mm, "matmul %d %lf %lf%% %lf%% %lf %lld", &count, &avg, &p1, &p2, &kb, &flops) == 6);
  FG_CHECK_INT(flops, 48);
  free(mm);
  /* The latency row: min <= p50 <= p90 <= p99 <= max, the runs counted. */
  const char *lat = strstr(r.out, "Latency over runs (µs; nearest-rank percentiles)");
  FG_REQUIRE(lat);
  char *vals = line_with(strchr(strchr(lat, '\n') + 1, '\n') + 1, "3 ");
  FG_REQUIRE(vals);
  double v[7];
  int n;
  FG_REQUIRE(sscanf(vals, "%d %lf %lf %lf %lf %lf %lf %lf", &n, &v[0], &v[1], &v[2], &v[3], &v[4],
                    &v[5], &v[6]) == 8);
  FG_CHECK_INT(n, 3);
  FG_CHECK(v[0] <= v[1] && v[1] <= v[2] && v[2] <= v[3] && v[3] <= v[4]);
  FG_CHECK(v[0] <= v[5] && v[5] <= v[4] && v[6] >= 0);
  /* p99 of 3 runs is the largest; p50 the 2nd. */
  FG_CHECK(v[3] == v[4]);
  free(vals);
  FG_CHECK_STR_CONTAINS(r.out, "\nruns/s: ");
  FG_CHECK_STR_CONTAINS(r.out, "\nsamples/s: - (no fed input has a batch dimension)\n");
  FG_CHECK_STR_CONTAINS(r.out, "\npeak resident memory: ");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* samples/s is runs/s times the rows a run feeds (--batch 5 here). */
FG_TEST(cli_profile_samples_per_s, "") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "profile", tpath("mlp.fgb"), "--random-inputs", "--batch", "5", "--runs", "4",
                 NULL) == 0);
  CHECK_OK(r);
  double rps = 0, sps = 0;
  long long b = 0;
  const char *p = strstr(r.out, "\nruns/s: "), *q = strstr(r.out, "\nsamples/s: ");
  FG_REQUIRE(p && q);
  FG_REQUIRE(sscanf(p, "\nruns/s: %lf", &rps) == 1);
  FG_REQUIRE(sscanf(q, "\nsamples/s: %lf (batch %lld)", &sps, &b) == 2);
  FG_CHECK_INT(b, 5);
  FG_CHECK(rps > 0 && fabs(sps - 5 * rps) <= 0.01 + 1e-6 * sps);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* ---- CSV -------------------------------------------------------------------------- */

FG_TEST(cli_profile_csv, "") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "profile", tpath("mlp.fgb"), "--random-inputs", "--batch", "2", "--runs", "2",
                 "--no-passes", "--format", "csv", "--trace", tpath("t.json"), NULL) == 0);
  CHECK_OK(r);
  /* No text around the tables ("wrote ..." goes only with text). */
  const char *header = "step,node,op,device,calls,avg_us,percent,flops,gflops_per_s,bytes_read,"
                       "bytes_written,gb_per_s,arena_bytes,dtype,output_shape,input_shapes\n";
  FG_CHECK(strncmp(r.out, header, strlen(header)) == 0);
  FG_CHECK(strstr(r.out, "wrote") == NULL && strstr(r.out, "====") == NULL);
  /* mm1 = x [2,4] @ W1 [4,3]: 2*2*3*4 = 48 FLOPs, reads 32 + 48 bytes,
   * writes 24; a quoted shape keeps its comma. */
  FG_CHECK_STR_CONTAINS(r.out, "\n0,mm1,matmul,cpu:0,2,");
  char *row = line_with(r.out, "0,mm1,");
  FG_REQUIRE(row);
  FG_CHECK_STR_CONTAINS(row, ",48,");
  FG_CHECK_STR_CONTAINS(row, ",80,24,");
  FG_CHECK_STR_CONTAINS(row, ",f32,\"[2,3]\",\"f32 [2,4]; f32 [4,3]\"");
  free(row);
  FG_CHECK_STR_CONTAINS(r.out, "\n\nmetric,value,unit\n");
  FG_CHECK_STR_CONTAINS(r.out, "\nruns,2,runs\n");
  FG_CHECK_STR_CONTAINS(r.out, "\nbatch,2,rows\n");
  FG_CHECK_STR_CONTAINS(r.out, "\nprofiled,inference,\n");
  FG_CHECK_STR_CONTAINS(r.out, "\nlatency_p99,");
  FG_REQUIRE(write_text(tpath("p.csv"), r.out) == 0);
  /* Python's csv module: 16 columns in every node row, 6 rows (mm1 add1 h
   * mm2 logits probs), then the metrics. */
  int py = fgt_python(
      "import csv,sys; t=open(sys.argv[1]).read().split('\\n\\n'); assert len(t)==2, len(t); "
      "rows=list(csv.reader(t[0].splitlines())); assert len(rows)==7, rows; "
      "assert all(len(x)==16 for x in rows), [len(x) for x in rows]; "
      "assert [x[1] for x in rows[1:]]==['mm1','add1','h','mm2','logits','probs']; "
      "assert rows[1][7]=='48' and rows[1][14]=='[2,3]', rows[1]; "
      "m={x[0]:x[1] for x in csv.reader(t[1].splitlines()[1:])}; "
      "assert float(m['latency_min'])<=float(m['latency_p50'])<=float(m['latency_max']), m; "
      "assert abs(float(m['samples_per_s'])-2*float(m['runs_per_s']))<=0.01*float(m['runs_per_s']),"
      " m",
      tpath("p.csv"), NULL);
  FG_CHECK_PYTHON(py);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* ---- the trace's run slices --------------------------------------------------------- */

/* --runs 4 on one thread: four "run N" slices, one after another, each
 * enclosing that run's six node slices. */
FG_TEST(cli_profile_trace_run_slices, "") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "profile", tpath("mlp.fgb"), "--random-inputs", "--runs", "4", "--threads",
                 "1", "--no-passes", "--trace", tpath("t.json"), NULL) == 0);
  CHECK_OK(r);
  char *js = slurp(tpath("t.json"));
  FG_REQUIRE(js);
  FG_CHECK_INT(count_str(js, "\"cat\":\"run\""), 4);
  FG_CHECK_INT(count_str(js, "\"cat\":\"op\""), 4 * 6);
  double rs[4] = {-1, -1, -1, -1}, re[4] = {0};
  for (const char *p = strstr(js, "\"cat\":\"run\""); p; p = strstr(p + 1, "\"cat\":\"run\"")) {
    int run;
    double ts, dur;
    const char *t = strstr(p, "\"ts\":"), *d = strstr(p, "\"dur\":"), *u = strstr(p, "\"run\":");
    FG_REQUIRE(t && d && u && sscanf(t, "\"ts\":%lf", &ts) == 1 &&
               sscanf(d, "\"dur\":%lf", &dur) == 1 && sscanf(u, "\"run\":%d", &run) == 1);
    FG_REQUIRE(run >= 0 && run < 4);
    char name[32];
    snprintf(name, sizeof name, "\"name\":\"run %d\"", run);
    FG_CHECK(strncmp(p - strlen(name) - 1, name, strlen(name)) == 0);
    rs[run] = ts;
    re[run] = ts + dur;
  }
  for (int k = 0; k < 4; k++)
    FG_CHECK(rs[k] >= 0 && re[k] >= rs[k]);
  for (int k = 0; k + 1 < 4; k++)
    FG_CHECK(re[k] <= rs[k + 1] + 1e-3);
  int inside = 0;
  for (const char *p = strstr(js, "\"cat\":\"op\""); p; p = strstr(p + 1, "\"cat\":\"op\"")) {
    int run;
    double ts, dur;
    const char *t = strstr(p, "\"ts\":"), *d = strstr(p, "\"dur\":"), *u = strstr(p, "\"run\":");
    FG_REQUIRE(t && d && u && sscanf(t, "\"ts\":%lf", &ts) == 1 &&
               sscanf(d, "\"dur\":%lf", &dur) == 1 && sscanf(u, "\"run\":%d", &run) == 1);
    FG_REQUIRE(run >= 0 && run < 4);
    inside += ts >= rs[run] - 1e-3 && ts + dur <= re[run] + 1e-3;
  }
  FG_CHECK_INT(inside, 24);
  free(js);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* ---- what is profiled ------------------------------------------------------------- */

FG_TEST(cli_profile_inference_by_default, "") {
  FG_REQUIRE(make_tmpdir());
  char target[256], line[320];
  FG_REQUIRE(build_profile_train(tpath("m.fgb"), 1, target) == 0 && target[0]);
  cli_result r;
  /* The marked output, as `run` fetches it: matmul, relu, matmul, softmax
   * (no labels needed, no update op). */
  FG_REQUIRE(cli(&r, "profile", tpath("m.fgb"), "--random-inputs", "--batch", "3", "--runs", "2",
                 "--no-passes", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "profiled: inference (--train profiles the training step)\n");
  FG_CHECK_STR_CONTAINS(r.out, "fetches: probs\ntargets: (none)\n");
  FG_CHECK(strstr(r.out, "apply_") == NULL);
  FG_CHECK(strstr(r.out, "softmax_cross_entropy") == NULL);
  result_free(&r);
  /* --train: the training step, its update op among the rows. */
  FG_REQUIRE(cli(&r, "profile", tpath("m.fgb"), "--random-inputs", "--batch", "3", "--runs", "2",
                 "--no-passes", "--train", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "profiled: training step\n");
  snprintf(line, sizeof line, "fetches: (none)\ntargets: %s\n", target);
  FG_CHECK_STR_CONTAINS(r.out, line);
  FG_CHECK_STR_CONTAINS(r.out, "softmax_cross_entropy");
  FG_CHECK_STR_CONTAINS(r.out, "apply_");
  result_free(&r);
  /* JSON says the same. The step's group node only orders its control
   * inputs: it reads no bytes. */
  FG_REQUIRE(cli(&r, "profile", tpath("m.fgb"), "--random-inputs", "--runs", "1", "--train",
                 "--format", "json", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "\"profiled\":\"training step\"");
  char *grp = json_node(r.out, target);
  FG_REQUIRE(grp);
  FG_CHECK_STR_CONTAINS(grp, "\"op\":\"group\"");
  FG_CHECK(json_num(grp, "bytes_read") == 0);
  FG_CHECK_STR_CONTAINS(grp, "\"inputs\":[{");
  free(grp);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* The digits MLP: inference by default fetches probs and prediction. With
 * the default passes each dense layer is one fused_matmul, which the op
 * table counts as 2*M*N*K plus two per output element (the bias and the
 * activation): at batch 4, hidden1 2*4*128*64 + 2*512, hidden2
 * 2*4*64*128 + 2*256, logits 2*4*10*64 + 2*40. */
FG_TEST(cli_profile_digits_inference, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(run_builder(tpath("digits.fgb")) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "profile", tpath("digits.fgb"), "--random-inputs", "--batch", "4", "--runs",
                 "2", "--format", "json", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "\"profiled\":\"inference\"");
  FG_CHECK_STR_CONTAINS(r.out, "\"fetches\":[\"probs\",\"prediction\"]");
  char *h1 = json_node(r.out, "hidden1"), *h2 = json_node(r.out, "hidden2");
  char *lg = json_node(r.out, "logits");
  FG_REQUIRE(h1 && h2 && lg);
  FG_CHECK_STR_CONTAINS(h1, "\"op\":\"fused_matmul\"");
  FG_CHECK(json_num(h1, "flops") == 2 * 4 * 128 * 64 + 2 * 512);
  FG_CHECK(json_num(h2, "flops") == 2 * 4 * 64 * 128 + 2 * 256);
  FG_CHECK(json_num(lg, "flops") == 2 * 4 * 10 * 64 + 2 * 40);
  /* hidden1 reads x [4,64], W [64,128], b [128] f32 and writes [4,128]. */
  FG_CHECK(json_num(h1, "bytes_read") == 4 * (4 * 64 + 64 * 128 + 128));
  FG_CHECK(json_num(h1, "bytes_written") == 4 * 4 * 128);
  FG_CHECK(json_num(r.out, "batch") == 4);
  free(h1);
  free(h2);
  free(lg);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* ---- --batch on inspect ------------------------------------------------------------- */

/* The test MLP (x [?,4], W1 [4,3], b1 [3], W2 [3,2], b2 [2]) at batch 5,
 * by hand: mm1 2*5*3*4 = 120, add1 15, h (relu) 15, mm2 2*5*2*3 = 60,
 * logits 10, probs (softmax, 5 per element) 50: 270. */
FG_TEST(cli_inspect_batch_flops, "") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "inspect", tpath("mlp.fgb"), NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "nodes with unknown shapes; --batch N sizes them)\n");
  result_free(&r);
  FG_REQUIRE(cli(&r, "inspect", tpath("mlp.fgb"), "--batch", "5", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "\ntotal flops: 270 at batch 5\n");
  char *mm1 = node_row(r.out, "mm1"), *mm2 = node_row(r.out, "mm2");
  FG_REQUIRE(mm1 && mm2);
  /* The flops cell ends each row. */
  FG_CHECK(strcmp(strrchr(mm1, ' ') + 1, "120") == 0);
  FG_CHECK(strcmp(strrchr(mm2, ' ') + 1, "60") == 0);
  free(mm1);
  free(mm2);
  result_free(&r);
  /* --batch=N is the same option. */
  FG_REQUIRE(cli(&r, "inspect", tpath("mlp.fgb"), "--batch=2", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "\ntotal flops: 108 at batch 2\n"); /* 48+6+6+24+4+20 */
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* The digits model at batch 64: inspect's total now covers every node. */
FG_TEST(cli_inspect_batch_digits, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(run_builder(tpath("digits.fgb")) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "inspect", tpath("digits.fgb"), "--batch", "64", NULL) == 0);
  CHECK_OK(r);
  const char *t = strstr(r.out, "\ntotal flops: ");
  FG_REQUIRE(t);
  long long total = 0;
  char rest[64] = "";
  FG_REQUIRE(sscanf(t, "\ntotal flops: %lld at batch 64%63[^\n]", &total, rest) >= 1);
  FG_CHECK(rest[0] == '\0');
  /* At least the forward matmuls, 2*64*(64*128 + 128*64 + 64*10), and
   * their two gradient matmuls each: 3x that. */
  long long fwd = 2LL * 64 * (64 * 128 + 128 * 64 + 64 * 10);
  FG_CHECK(total > 3 * fwd - 2LL * 64 * 64 * 128); /* the first layer has no input gradient */
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* ---- bad inputs ------------------------------------------------------------------- */

FG_TEST(cli_profile_stats_bad_args, "badinput") {
  FG_REQUIRE(setup_mlp() == 0);
  const char *m = tpath("mlp.fgb");
  const char *cases[][6] = {
      {"profile", m, "--format", "bogus", NULL},
      {"profile", m, "--format", NULL},
      {"profile", m, "--format", "", NULL},
      {"profile", m, "--format", "JSON", NULL},
      {"inspect", m, "--batch", "0", NULL},
      {"inspect", m, "--batch", "-3", NULL},
      {"inspect", m, "--batch", "1000001", NULL},
      {"inspect", m, "--batch", "99999999999999999999", NULL},
      {"inspect", m, "--batch", "x", NULL},
      {"inspect", m, "--batch", NULL},
      {"plan", m, "--batch", "-1", NULL},
      {"plan", m, "--batch", "1000001", NULL},
      {"profile", m, "--batch", "0", NULL},
      {"profile", m, "--batch", "-5", NULL},
      {"profile", m, "--batch", "1000001", NULL},
      {"plan", m, "--format", "json", NULL},
      {"plan", m, "--train", NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cli_result r;
    const char **c = cases[i];
    FG_REQUIRE(cli(&r, c[0], c[1], c[2], c[3], c[4], c[5]) == 0);
    if (r.code != 2) fprintf(stderr, "case %zu: %s %s %s\n", i, c[0], c[2], r.err);
    CHECK_USAGE_ERROR(r);
    if (i < 4) FG_CHECK_STR_CONTAINS(r.err, "--format needs text, csv or json");
    if (i == 0) FG_CHECK_STR_CONTAINS(r.err, "'bogus'");
    if (i >= 4 && i < 15)
      FG_CHECK_STR_CONTAINS(r.err, "--batch needs an integer from 1 to 1000000");
    result_free(&r);
  }
  FG_CHECK_INT(fgt_count_entries(tmpdir), 2);
  fgt_rmtree(tmpdir);
}

/* --batch on a model whose placeholders have no '?' and --train on a model
 * without a training step: runtime errors (exit 1) naming the model,
 * nothing on stdout, no output file. */
FG_TEST(cli_profile_stats_model_refusals, "badinput") {
  FG_REQUIRE(setup_mlp() == 0);
  FG_REQUIRE(build_fixed(tpath("fixed.fgb")) == 0);
  const char *cmds[3] = {"inspect", "plan", "profile"};
  for (int i = 0; i < 3; i++) {
    cli_result r;
    FG_REQUIRE(cli(&r, cmds[i], tpath("fixed.fgb"), "--batch", "4", i ? "--random-inputs" : NULL,
                   NULL) == 0);
    CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", "--batch 4: no placeholder of");
    FG_CHECK_STR_CONTAINS(r.err, "fixed.fgb has an unknown dimension");
    FG_CHECK_INT(strlen(r.out), 0);
    result_free(&r);
  }
  cli_result r;
  FG_REQUIRE(cli(&r, "profile", tpath("mlp.fgb"), "--random-inputs", "--train", "--trace",
                 tpath("t.json"), NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", "--train: ");
  FG_CHECK_STR_CONTAINS(r.err, "mlp.fgb records no training step");
  FG_CHECK_INT(strlen(r.out), 0);
  result_free(&r);
  FG_CHECK_INT(fgt_count_entries(tmpdir), 3); /* mlp.fgb, x.npy, fixed.fgb */
  fgt_rmtree(tmpdir);
}
