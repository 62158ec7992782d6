/* Rank-qualified device names ("rank:R/cpu:N", "rank:R/cuda:N") and the
 * cross-process partition rule of flowgraph/dist.h: one node naming a rank
 * makes every device without one rank 0's. Expected devices, keys and byte
 * counts are written out by hand from the graphs below. */
#include <flowgraph/flowgraph.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgtest.h"

/* Parses `name`, checks the fields, prints it back and compares. */
static void round_trip(const char *name, fg_device_kind kind, int index, int rank,
                       const char *printed) {
  fg_status *st = fg_status_new();
  fg_device d = {FG_DEVICE_CUDA, 99, 99};
  if (fg_parse_device(name, &d, st) != 0) {
    FG_FAIL_AT("'%s' refused: %s", name, fg_status_message(st));
  } else {
    FG_CHECK_INT(d.kind, kind);
    FG_CHECK_INT(d.index, index);
    FG_CHECK_INT(d.rank, rank);
    char buf[32];
    fg_device_str(d, buf, sizeof buf);
    if (strcmp(buf, printed) != 0) FG_FAIL_AT("'%s' prints as '%s', want '%s'", name, buf, printed);
  }
  fg_status_free(st);
}

FG_TEST(dist_ranks_parse_print_round_trip, "dist") {
  round_trip("rank:0/cpu:0", FG_DEVICE_CPU, 0, 0, "rank:0/cpu:0");
  round_trip("rank:1/cpu:0", FG_DEVICE_CPU, 0, 1, "rank:1/cpu:0");
  /* Another rank's GPU is not counted here: fine without any GPU. */
  round_trip("rank:3/cuda:7", FG_DEVICE_CUDA, 7, 3, "rank:3/cuda:7");
  round_trip("rank:65535/cpu:63", FG_DEVICE_CPU, 63, 65535, "rank:65535/cpu:63");
  round_trip("rank:2/cpu", FG_DEVICE_CPU, 0, 2, "rank:2/cpu:0");
  round_trip("cpu:2", FG_DEVICE_CPU, 2, -1, "cpu:2");
  round_trip("cpu", FG_DEVICE_CPU, 0, -1, "cpu:0");
  /* The longest name fits the documented 32 bytes. */
  fg_device big = {FG_DEVICE_CUDA, 999999999, 65535};
  char buf[32];
  FG_CHECK(strcmp(fg_device_str(big, buf, sizeof buf), "rank:65535/cuda:999999999") == 0);
  /* A short buffer is cut, never overrun. */
  char small[8];
  memset(small, 'Z', sizeof small);
  fg_device_str((fg_device){FG_DEVICE_CPU, 1, 12}, small, 6);
  FG_CHECK(strcmp(small, "rank:") == 0 && small[6] == 'Z');
}

FG_TEST(dist_ranks_bad_names_refused, "dist,badinput") {
  struct {
    const char *name, *msg;
  } cases[] = {
      {"rank:/cpu:0",
       "device 'rank:/cpu:0' is not a device name (expected cpu:N with N in [0, 64), "
       "cuda:N, or rank:R/ before either"},
      {"rank:-1/cpu:0", "device 'rank:-1/cpu:0' is not a device name (expected"},
      {"rank:x/cpu:0", "device 'rank:x/cpu:0' is not a device name (expected"},
      {"rank:70000/cpu:0",
       "device 'rank:70000/cpu:0': rank 70000 is out of range (rank:R/ takes R from 0 to 65535)"},
      {"rank:65536/cpu:0", "rank 65536 is out of range"},
      {"rank:1/", "device 'rank:1/' is not a device name (expected"},
      {"rank:1/gpu:0", "device 'rank:1/gpu:0' is not a device name (expected"},
      {"rank:1cpu:0", "device 'rank:1cpu:0' is not a device name (expected"},
      {"rank:1/cpu:64", "device 'rank:1/cpu:64' does not exist: CPU devices are cpu:0 to cpu:63"},
      {"rank:1/cuda:x", "device 'rank:1/cuda:x' is not a device name"},
      {"rank:1/rank:2/cpu:0", "device 'rank:1/rank:2/cpu:0' is not a device name"},
      {"rank:1 /cpu:0", "device 'rank:1 /cpu:0' is not a device name"},
      {"rank:9999999999/cpu:0", "device 'rank:9999999999/cpu:0' is not a device name"},
      {"Rank:1/cpu:0", "device 'Rank:1/cpu:0' is not a device name"},
      {"gpu:0", "device 'gpu:0' is not a device name"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fg_status *st = fg_status_new();
    fg_device d = {FG_DEVICE_CPU, 5, 5};
    FG_CHECK_INT(fg_parse_device(cases[i].name, &d, st), -1);
    FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
    if (!strstr(fg_status_message(st), cases[i].msg))
      FG_FAIL_AT("'%s': message '%s' lacks '%s'", cases[i].name, fg_status_message(st),
                 cases[i].msg);
    /* Nothing is written on failure. */
    FG_CHECK(d.index == 5 && d.rank == 5);
    fg_status_free(st);
  }
  /* Unqualified cuda:N is still checked against this process's GPUs. */
  fg_status *st = fg_status_new();
  fg_device d;
  FG_CHECK_INT(fg_parse_device("cuda:999", &d, st), -1);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "device 'cuda:999' does not exist");
  fg_status_free(st);
}

/* x [4, 8] f32; h1 = x * 2 (unplaced); h2 = relu(h1) on rank:1/cpu:0;
 * out = h2 + 1 on cpu:1 (no rank). */
static fg_graph *two_rank_graph(void) {
  fg_graph *g = fg_graph_new();
  int64_t dims[2] = {4, 8};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, dims);
  fg_output h1 = fg_set_name(g, fg_mul(g, x, fg_scalar(g, FG_F32, 2)), "h1");
  fg_output h2 = fg_set_name(g, fg_relu(g, h1), "h2");
  fg_set_device(g, h2, "rank:1/cpu:0");
  fg_output out = fg_set_name(g, fg_add(g, h2, fg_scalar(g, FG_F32, 1)), "out");
  fg_set_device(g, out, "cpu:1");
  return g;
}

static int dev_is(fg_device d, fg_device_kind kind, int index, int rank) {
  return d.kind == kind && d.index == index && d.rank == rank;
}

FG_TEST(dist_ranks_partition_cross_process, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = two_rank_graph();
  fg_partition *p = fg_partition_new(g, NULL, st);
  if (!p) FG_FAIL_AT("%s", fg_status_message(st));
  FG_REQUIRE(p);
  /* Sorted by rank, then kind, then index; no device is left at -1. */
  FG_REQUIRE(fg_partition_num_devices(p) == 3);
  FG_CHECK(dev_is(fg_partition_device(p, 0), FG_DEVICE_CPU, 0, 0));
  FG_CHECK(dev_is(fg_partition_device(p, 1), FG_DEVICE_CPU, 1, 0));
  FG_CHECK(dev_is(fg_partition_device(p, 2), FG_DEVICE_CPU, 0, 1));
  FG_CHECK_INT(fg_partition_num_ranks(p), 2);
  /* Unplaced h1 (and x, and its scalar) took the default cpu:0 as rank 0's. */
  FG_CHECK_INT(fg_partition_node_device(p, fg_graph_find(g, "h1")), 0);
  FG_CHECK_INT(fg_partition_node_device(p, fg_graph_find(g, "x")), 0);
  FG_CHECK_INT(fg_partition_node_device(p, fg_graph_find(g, "h2")), 2);
  FG_CHECK_INT(fg_partition_node_device(p, fg_graph_find(g, "out")), 1);
  /* x, 2, h1 | 1, out | h2. */
  FG_CHECK_INT(fg_partition_num_nodes(p, 0), 3);
  FG_CHECK_INT(fg_partition_num_nodes(p, 1), 2);
  FG_CHECK_INT(fg_partition_num_nodes(p, 2), 1);
  /* Two cross-rank edges, 4 x 8 f32 = 128 bytes each. */
  FG_REQUIRE(fg_partition_num_transfers(p) == 2);
  const fg_transfer *t0 = fg_partition_transfer(p, 0), *t1 = fg_partition_transfer(p, 1);
  FG_CHECK(strcmp(t0->key, "h1:0->rank:1/cpu:0") == 0);
  FG_CHECK_INT(t0->bytes, 128);
  FG_CHECK_INT(t0->src_device, 0);
  FG_CHECK_INT(t0->dst_device, 2);
  FG_CHECK(strcmp(t1->key, "h2:0->rank:0/cpu:1") == 0);
  FG_CHECK_INT(t1->bytes, 128);
  FG_CHECK_INT(t1->src_device, 2);
  FG_CHECK_INT(t1->dst_device, 1);
  fg_partition_free(p);
  /* A default device with a rank: unplaced nodes go to that rank. */
  p = fg_partition_new(g, "rank:3/cpu:2", st);
  FG_REQUIRE(p);
  FG_REQUIRE(fg_partition_num_devices(p) == 3);
  FG_CHECK(dev_is(fg_partition_device(p, 0), FG_DEVICE_CPU, 1, 0));
  FG_CHECK(dev_is(fg_partition_device(p, 1), FG_DEVICE_CPU, 0, 1));
  FG_CHECK(dev_is(fg_partition_device(p, 2), FG_DEVICE_CPU, 2, 3));
  FG_CHECK_INT(fg_partition_num_ranks(p), 4);
  FG_CHECK_INT(fg_partition_node_device(p, fg_graph_find(g, "h1")), 2);
  FG_CHECK(strcmp(fg_partition_transfer(p, 0)->key, "h1:0->rank:1/cpu:0") == 0);
  fg_partition_free(p);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(dist_ranks_plain_graph_keeps_no_rank, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t dims[1] = {5};
  fg_output x = fg_placeholder(g, "x", FG_F64, 1, dims);
  fg_output a = fg_set_name(g, fg_relu(g, x), "a");
  fg_set_device(g, fg_set_name(g, fg_add(g, a, a), "b"), "cpu:1");
  fg_partition *p = fg_partition_new(g, NULL, st);
  FG_REQUIRE(p);
  FG_CHECK_INT(fg_partition_num_ranks(p), 0);
  FG_REQUIRE(fg_partition_num_devices(p) == 2);
  FG_CHECK(dev_is(fg_partition_device(p, 0), FG_DEVICE_CPU, 0, -1));
  FG_CHECK(dev_is(fg_partition_device(p, 1), FG_DEVICE_CPU, 1, -1));
  FG_REQUIRE(fg_partition_num_transfers(p) == 1);
  FG_CHECK(strcmp(fg_partition_transfer(p, 0)->key, "a:0->cpu:1") == 0);
  FG_CHECK_INT(fg_partition_transfer(p, 0)->bytes, 40);
  fg_partition_free(p);
  /* One rank only (rank 0) is still cross-process: 1 process needed. */
  fg_set_device(g, a, "rank:0/cpu:0");
  p = fg_partition_new(g, NULL, st);
  FG_REQUIRE(p);
  FG_CHECK_INT(fg_partition_num_ranks(p), 1);
  FG_CHECK(dev_is(fg_partition_device(p, 1), FG_DEVICE_CPU, 1, 0));
  FG_CHECK(strcmp(fg_partition_transfer(p, 0)->key, "a:0->rank:0/cpu:1") == 0);
  fg_partition_free(p);
  FG_CHECK_INT(fg_partition_num_ranks(NULL), 0);
  FG_CHECK(dev_is(fg_partition_device(NULL, 0), FG_DEVICE_CPU, -1, -1));
  fg_graph_free(g);
  fg_status_free(st);
}

/* A variable on unqualified cpu:0 and its update on rank:0/cpu:0 are one
 * device once the graph is cross-process; on rank:1 they conflict, and the
 * message names both rank-qualified devices. */
FG_TEST(dist_ranks_update_conflict_names_ranks, "dist,badinput") {
  fg_status *st = fg_status_new();
  for (int conflict = 0; conflict < 2; conflict++) {
    fg_graph *g = fg_graph_new();
    int64_t dims[1] = {2};
    fg_tensor *init = fg_tensor_new(FG_F32, 1, dims, NULL);
    memset(fg_tensor_data(init), 0, 8);
    fg_output v = fg_variable(g, "v", init);
    fg_tensor_free(init);
    fg_set_device(g, v, "cpu:0");
    fg_output upd = fg_set_name(g, fg_assign(g, v, fg_mul(g, v, fg_scalar(g, FG_F32, 3))), "upd");
    fg_set_device(g, upd, conflict ? "rank:1/cpu:0" : "rank:0/cpu:0");
    fg_partition *p = fg_partition_new(g, NULL, st);
    if (!conflict) {
      if (!p) FG_FAIL_AT("%s", fg_status_message(st));
      FG_CHECK(p && fg_partition_num_devices(p) == 1);
      FG_CHECK(p && dev_is(fg_partition_device(p, 0), FG_DEVICE_CPU, 0, 0));
    } else {
      FG_CHECK(p == NULL);
      FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
      FG_CHECK_STR_CONTAINS(fg_status_message(st), "placed on 'rank:1/cpu:0' while the variable "
                                                   "is on 'rank:0/cpu:0'");
    }
    fg_partition_free(p);
    fg_graph_free(g);
  }
  /* A bad rank on a node names the node. */
  fg_graph *g = fg_graph_new();
  int64_t dims[1] = {2};
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, dims);
  fg_set_device(g, fg_set_name(g, fg_relu(g, x), "r"), "rank:70000/cpu:0");
  FG_CHECK(fg_partition_new(g, NULL, st) == NULL);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "node 'r' (relu): device 'rank:70000/cpu:0': rank "
                                               "70000 is out of range");
  fg_graph_free(g);
  fg_status_free(st);
}
