/* The host side of the fused_elementwise CUDA kernel, on any machine (no
 * GPU needed): the source generator (kernels/cuda/fused_codegen.h), NVRTC
 * compiling what it generates for sm_90 (kernels/cuda/nvrtc_cache.h), and
 * the disk cache of the CUBINs.
 *
 * The expected literals are the values' own hex forms (Python's
 * float.hex() of the double and of its float32 rounding), the expected
 * broadcast plans are worked out by hand from the shapes in the comments.
 * NVRTC cases skip, saying why, where libnvrtc cannot be loaded. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fgtest.h"
#include "fused_prog.h"
#include "kernels/cuda/fused_codegen.h"
#include "kernels/cuda/nvrtc_cache.h"

#define D(...) ((const int64_t[]){__VA_ARGS__})

/* Plans p over (ins, out) and generates its source; NULL (after a failed
 * check) when either step fails. */
static char *gen(const fg_fused_params *p, const fg_kbuf *ins, int n_in, fg_kbuf out,
                 fgc_fused_layout *lay, fgc_fused_args *args) {
  char err[512] = "";
  if (fgc_fused_plan(p, ins, n_in, &out, 1, lay, args, err, sizeof err) != 0) {
    FG_FAIL_AT("fgc_fused_plan: %s", err);
    return NULL;
  }
  char *src = fgc_fused_source(p, lay);
  if (!src) FG_FAIL_AT("fgc_fused_source returned NULL");
  return src;
}

/* add(x0, x1); relu(t0) with x1 a bias row: [4, 8] + [8]. */
FG_TEST(fused_codegen_bias_relu, "") {
  fg_fused_params p;
  fprog_init(&p, 2);
  F1(&p, FG_FUSED_RELU, F2(&p, FG_FUSED_ADD, FX(0), FX(1)));
  const fg_kbuf ins[2] = {fshape(FG_F32, 2, D(4, 8)), fshape(FG_F32, 1, D(8))};
  fgc_fused_layout lay;
  fgc_fused_args args;
  char *src = gen(&p, ins, 2, fshape(FG_F32, 2, D(4, 8)), &lay, &args);
  FG_REQUIRE(src);
  FG_CHECK_INT(lay.kind[0], FGC_FUSED_FULL);
  FG_CHECK_INT(lay.kind[1], FGC_FUSED_SUFFIX);
  FG_CHECK_INT(args.n, 32);
  FG_CHECK_INT(args.m[1], 8);
  FG_CHECK_INT(lay.walk_rank, 0);
  FG_CHECK_STR_CONTAINS(src, "typedef float T;");
  FG_CHECK_STR_CONTAINS(src, "extern \"C\" __global__ void __launch_bounds__(256) fg_fused(");
  FG_CHECK_STR_CONTAINS(src, "const float *const p0 = (const float *)a.in[0];");
  FG_CHECK_STR_CONTAINS(src, "const T x0 = p0[i];");
  FG_CHECK_STR_CONTAINS(src, "const T x1 = p1[i - fg_div(i, m1) * m1];");
  FG_CHECK_STR_CONTAINS(src, "const T t0 = fg_add(x0, x1);");
  FG_CHECK_STR_CONTAINS(src, "const T t1 = fg_relu(t0);");
  FG_CHECK_STR_CONTAINS(src, "__device__ __forceinline__ T fg_body(const T x0, const T x1) {");
  FG_CHECK_STR_CONTAINS(src, "return t1;");
  FG_CHECK_STR_CONTAINS(src, "out[i] = fg_body(x0, x1);");
  /* the 4-wide loop: a vector load per input, the bias row's at i % 8 */
  FG_CHECK_STR_CONTAINS(src, "const fg_v4<float> v0 = *(const fg_v4<float> *)(p0 + i);");
  FG_CHECK_STR_CONTAINS(src,
                        "const fg_v4<float> v1 = *(const fg_v4<float> *)(p1 + (i - fg_div(i, m1) "
                        "* m1));");
  FG_CHECK_STR_CONTAINS(src, "r.v[k] = fg_body(v0.v[k], v1.v[k]);");
  FG_CHECK_STR_CONTAINS(src, "*(fg_v4<T> *)(out + i) = r;");
  FG_CHECK_STR_CONTAINS(src, "from = a.n / 4 * 4 + start;"); /* the < 4 left over */
  /* add is __fadd_rn: never contracted with a neighbouring multiply */
  FG_CHECK_STR_CONTAINS(src, "return __fadd_rn(x, y);");
  FG_CHECK_STR_CONTAINS(src, "x < 0 ? (T)0 : x"); /* relu keeps NaN */
  FG_CHECK(strstr(src, "a.strides") == NULL);     /* no walk */
  /* the same structure gives the same bytes: the text is the cache key */
  char *again = fgc_fused_source(&p, &lay);
  FG_REQUIRE(again);
  FG_CHECK(strcmp(src, again) == 0);
  free(again);
  /* another batch size: the same text, other arguments */
  const fg_kbuf ins2[2] = {fshape(FG_F32, 2, D(1000, 8)), fshape(FG_F32, 1, D(8))};
  fgc_fused_layout lay2;
  char *big = gen(&p, ins2, 2, fshape(FG_F32, 2, D(1000, 8)), &lay2, &args);
  FG_REQUIRE(big);
  FG_CHECK(strcmp(src, big) == 0);
  FG_CHECK_INT(args.n, 8000);
  free(big);
  free(src);
}

/* Constants and attributes as exact hex literals, f32 and f64:
 * mul(x0, 0.1); leaky_relu(t0, alpha=0.01); clip(t1, -0.5, 6). */
FG_TEST(fused_codegen_hex_constants, "") {
  fg_fused_params p;
  fprog_init(&p, 1);
  fg_fused_ref t = F2(&p, FG_FUSED_MUL, FX(0), FC(&p, 0.1));
  t = F1A(&p, FG_FUSED_LEAKY_RELU, t, 0.01, 0);
  F1A(&p, FG_FUSED_CLIP, t, -0.5, 6);
  const fg_kbuf x32 = fshape(FG_F32, 1, D(5)), x64 = fshape(FG_F64, 1, D(5));
  fgc_fused_layout lay;
  fgc_fused_args args;
  char *s32 = gen(&p, &x32, 1, x32, &lay, &args);
  char *s64 = gen(&p, &x64, 1, x64, &lay, &args);
  FG_REQUIRE(s32 && s64);
  /* 0.1 rounded to float32 is 0x1.99999ap-4, as the f32 mul kernel sees it */
  FG_CHECK_STR_CONTAINS(s32, "const T c0 = 0x1.99999ap-4f;");
  FG_CHECK_STR_CONTAINS(s32, "const T t0 = fg_mul(x0, c0);");
  FG_CHECK_STR_CONTAINS(s32, "fg_leaky_relu(t0, 0x1.47ae14p-7f)");
  FG_CHECK_STR_CONTAINS(s32, "fg_clip(t1, (-0x1p-1f), 0x1.8p+2f)");
  FG_CHECK_STR_CONTAINS(s32, "return __fmul_rn(x, y);");
  FG_CHECK_STR_CONTAINS(s64, "typedef double T;");
  FG_CHECK_STR_CONTAINS(s64, "const T c0 = 0x1.999999999999ap-4;");
  FG_CHECK_STR_CONTAINS(s64, "fg_leaky_relu(t0, 0x1.47ae147ae147bp-7)");
  FG_CHECK_STR_CONTAINS(s64, "fg_clip(t1, (-0x1p-1), 0x1.8p+2)");
  FG_CHECK_STR_CONTAINS(s64, "return __dmul_rn(x, y);");
  FG_CHECK(strstr(s64, "0x1.99999ap-4") == NULL);
  free(s32);
  free(s64);
  /* Inf and NaN have no hex literal: their bit patterns */
  fprog_init(&p, 1);
  t = F2(&p, FG_FUSED_MINIMUM, FX(0), FC(&p, INFINITY));
  F2(&p, FG_FUSED_MAXIMUM, t, FC(&p, -INFINITY));
  s32 = gen(&p, &x32, 1, x32, &lay, &args);
  s64 = gen(&p, &x64, 1, x64, &lay, &args);
  FG_REQUIRE(s32 && s64);
  FG_CHECK_STR_CONTAINS(s32, "const T c0 = __int_as_float(0x7f800000u);");
  FG_CHECK_STR_CONTAINS(s32, "const T c1 = __int_as_float(0xff800000u);");
  FG_CHECK_STR_CONTAINS(s64, "const T c0 = __longlong_as_double(0x7ff0000000000000ll);");
  FG_CHECK_STR_CONTAINS(s64, "const T c1 = __longlong_as_double(0xfff0000000000000ll);");
  /* NaN wins in maximum/minimum, as the unfused kernels */
  FG_CHECK_STR_CONTAINS(s32, "(x > y || x != x) ? x : y");
  FG_CHECK_STR_CONTAINS(s32, "(x < y || x != x) ? x : y");
  free(s32);
  free(s64);
}

/* select(x0, select(greater(x1, 0), x1, x2), 0) with x0 a bool column
 * [4, 1], x1 [4, 5] and x2 a scalar []: PREFIX, FULL and SCALAR. */
FG_TEST(fused_codegen_select_bool_scalar, "") {
  fg_fused_params p;
  fprog_init(&p, 3);
  fg_fused_ref g = F2(&p, FG_FUSED_GREATER, FX(1), FC(&p, 0));
  fg_fused_ref s = F3(&p, FG_FUSED_SELECT, g, FX(1), FX(2));
  F3(&p, FG_FUSED_SELECT, FX(0), s, FC(&p, 0));
  const fg_kbuf ins[3] = {fshape(FG_BOOL, 2, D(4, 1)), fshape(FG_F32, 2, D(4, 5)),
                          fshape(FG_F32, 0, NULL)};
  fgc_fused_layout lay;
  fgc_fused_args args;
  char *src = gen(&p, ins, 3, fshape(FG_F32, 2, D(4, 5)), &lay, &args);
  FG_REQUIRE(src);
  FG_CHECK_INT(lay.kind[0], FGC_FUSED_PREFIX);
  FG_CHECK_INT(args.m[0], 5);
  FG_CHECK_INT(lay.kind[1], FGC_FUSED_FULL);
  FG_CHECK_INT(lay.kind[2], FGC_FUSED_SCALAR);
  FG_CHECK_STR_CONTAINS(src, "const unsigned char *const p0 = (const unsigned char *)a.in[0];");
  FG_CHECK_STR_CONTAINS(src, "const T x0 = (T)(p0[fg_div(i, m0)] != 0);");
  FG_CHECK_STR_CONTAINS(src, "const T x2 = p2[0];"); /* before the loop */
  FG_CHECK(strstr(src, "const T x2 = p2[0];") < strstr(src, "for (long long i"));
  FG_CHECK_STR_CONTAINS(src, "const T t0 = (T)(x1 > c0);");
  FG_CHECK_STR_CONTAINS(src, "const T t1 = t0 != (T)0 ? x1 : x2;");
  FG_CHECK_STR_CONTAINS(src, "const T t2 = x0 != (T)0 ? t1 : c1;");
  FG_CHECK_STR_CONTAINS(src, "const T c1 = 0x0p+0f;");
  free(src);
}

/* The strided walk: x0 [2, 3, 1, 5] and x1 [4, 1] against [2, 3, 4, 5].
 * x0's strides in the output's dims are (15, 5, 0, 1), x1's (0, 0, 1, 0):
 * dims 0 and 1 merge for both (15 = 5 * 3, 0 = 0 * 3), the others do not,
 * so the walk is dims (6, 4, 5), x0 strides (5, 0, 1), x1 (0, 1, 0). A
 * size-1 output dim drops out: [2, 1, 3] <- [2, 1, 1] is PREFIX by 3. */
FG_TEST(fused_codegen_walk, "") {
  fg_fused_params p;
  fprog_init(&p, 2);
  F2(&p, FG_FUSED_SUB, FX(0), FX(1));
  const fg_kbuf ins[2] = {fshape(FG_F64, 4, D(2, 3, 1, 5)), fshape(FG_F64, 2, D(4, 1))};
  fgc_fused_layout lay;
  fgc_fused_args args;
  char *src = gen(&p, ins, 2, fshape(FG_F64, 4, D(2, 3, 4, 5)), &lay, &args);
  FG_REQUIRE(src);
  FG_CHECK_INT(lay.kind[0], FGC_FUSED_WALK);
  FG_CHECK_INT(lay.kind[1], FGC_FUSED_WALK);
  FG_CHECK_INT(lay.walk_rank, 3);
  FG_CHECK_INT(args.dims[0], 6);
  FG_CHECK_INT(args.dims[1], 4);
  FG_CHECK_INT(args.dims[2], 5);
  const long long s0[3] = {5, 0, 1}, s1[3] = {0, 1, 0};
  for (int d = 0; d < 3; d++) {
    FG_CHECK_INT(args.strides[0][d], s0[d]);
    FG_CHECK_INT(args.strides[1][d], s1[d]);
  }
  FG_CHECK_STR_CONTAINS(src, "fg_div(r, a.dims[2])");
  FG_CHECK_STR_CONTAINS(src, "fg_div(r, a.dims[1])");
  FG_CHECK(strstr(src, "a.dims[3]") == NULL);
  FG_CHECK(strstr(src, "a.vec") == NULL); /* no 4-wide loop with a walk */
  FG_CHECK_STR_CONTAINS(src, "w0 += c * a.strides[0][2];");
  FG_CHECK_STR_CONTAINS(src, "w1 += c * a.strides[1][1];");
  FG_CHECK_STR_CONTAINS(src, "w1 += r * a.strides[1][0];");
  FG_CHECK_STR_CONTAINS(src, "const T x0 = p0[w0];");
  FG_CHECK_STR_CONTAINS(src, "const T t0 = fg_sub(x0, x1);");
  FG_CHECK_STR_CONTAINS(src, "return __dsub_rn(x, y);");
  free(src);
  /* one input along trailing dims, one scalar, one unused: no walk */
  fprog_init(&p, 3);
  F2(&p, FG_FUSED_DIV, FX(0), FX(1));
  const fg_kbuf ins2[3] = {fshape(FG_F32, 3, D(2, 1, 1)), fshape(FG_F32, 1, D(1)),
                           fshape(FG_F32, 1, D(3))};
  src = gen(&p, ins2, 3, fshape(FG_F32, 3, D(2, 1, 3)), &lay, &args);
  FG_REQUIRE(src);
  FG_CHECK_INT(lay.kind[0], FGC_FUSED_PREFIX);
  FG_CHECK_INT(args.m[0], 3);
  FG_CHECK_INT(lay.kind[1], FGC_FUSED_SCALAR);
  FG_CHECK_INT(lay.kind[2], FGC_FUSED_UNUSED);
  FG_CHECK_INT(lay.walk_rank, 0);
  FG_CHECK(strstr(src, "p2") == NULL);
  FG_CHECK_STR_CONTAINS(src, "const T t0 = x0 / x1;");
  free(src);
  /* an f32 input in an f64 program is converted on load */
  fprog_init(&p, 1);
  F1(&p, FG_FUSED_EXP, FX(0));
  const fg_kbuf x = fshape(FG_F32, 1, D(3));
  src = gen(&p, &x, 1, fshape(FG_F64, 1, D(3)), &lay, &args);
  FG_REQUIRE(src);
  FG_CHECK_STR_CONTAINS(src, "const T x0 = (T)p0[i];");
  FG_CHECK_STR_CONTAINS(src, "r.v[k] = fg_body((T)v0.v[k]);");
  FG_CHECK_STR_CONTAINS(src, "const T t0 = m_exp(x0);");
  free(src);
}

/* When the 4-wide loop may run: per call, from the pointers' alignment
 * and the broadcast rows' lengths. */
FG_TEST(fused_codegen_vec_ok, "") {
  fg_fused_params p;
  fprog_init(&p, 3);
  F3(&p, FG_FUSED_SELECT, FX(2), F2(&p, FG_FUSED_ADD, FX(0), FX(1)), FX(0));
  fgc_fused_layout lay;
  fgc_fused_args args;
  char err[256];
  /* [6, 8] + [8] (bias row), bool column [6, 1] */
  const fg_kbuf ins[3] = {fshape(FG_F64, 2, D(6, 8)), fshape(FG_F64, 1, D(8)),
                          fshape(FG_BOOL, 2, D(6, 1))};
  const fg_kbuf out = fshape(FG_F64, 2, D(6, 8));
  FG_REQUIRE(fgc_fused_plan(&p, ins, 3, &out, 1, &lay, &args, err, sizeof err) == 0);
  FG_CHECK_INT(lay.kind[2], FGC_FUSED_PREFIX);
  FG_CHECK_INT(args.m[2], 8);
  args.out = (void *)(uintptr_t)0x10000;
  args.in[0] = (const void *)(uintptr_t)0x20000;
  args.in[1] = (const void *)(uintptr_t)0x30020; /* 32-byte aligned: 4 doubles */
  args.in[2] = (const void *)(uintptr_t)0x40001; /* a column is read a value at a time */
  FG_CHECK_INT(fgc_fused_vec_ok(&lay, &args), 1);
  args.in[1] = (const void *)(uintptr_t)0x30010; /* 16: not 4 doubles */
  FG_CHECK_INT(fgc_fused_vec_ok(&lay, &args), 0);
  args.in[1] = (const void *)(uintptr_t)0x30020;
  args.out = (void *)(uintptr_t)0x10008;
  FG_CHECK_INT(fgc_fused_vec_ok(&lay, &args), 0);
  args.out = (void *)(uintptr_t)0x10000;
  args.m[1] = 6; /* a bias row of 6: groups of 4 would straddle its end */
  FG_CHECK_INT(fgc_fused_vec_ok(&lay, &args), 0);
  args.m[1] = 8;
  args.m[2] = 10;
  FG_CHECK_INT(fgc_fused_vec_ok(&lay, &args), 0);
  args.m[2] = 8;
  args.n = 3;
  FG_CHECK_INT(fgc_fused_vec_ok(&lay, &args), 0);
  /* a strided walk never takes it */
  const fg_kbuf walk[3] = {fshape(FG_F64, 3, D(2, 1, 8)), fshape(FG_F64, 1, D(8)),
                           fshape(FG_BOOL, 2, D(3, 1))};
  const fg_kbuf out3 = fshape(FG_F64, 3, D(2, 3, 8));
  FG_REQUIRE(fgc_fused_plan(&p, walk, 3, &out3, 1, &lay, &args, err, sizeof err) == 0);
  FG_CHECK_INT(lay.kind[0], FGC_FUSED_WALK);
  args.out = (void *)(uintptr_t)0x10000;
  args.in[0] = args.in[1] = args.in[2] = (const void *)(uintptr_t)0x20000;
  FG_CHECK_INT(fgc_fused_vec_ok(&lay, &args), 0);
}

/* Bad programs and mismatched buffers fail with a message, never crash. */
FG_TEST(fused_codegen_bad_input, "badinput") {
  fg_fused_params p;
  fgc_fused_layout lay;
  fgc_fused_args args;
  char err[512];
  const fg_kbuf x = fshape(FG_F32, 2, D(4, 5)), xs[3] = {x, x, x};
#define EXPECT_FAIL(ins, n_in, out, n_out, msg)                                                    \
  do {                                                                                             \
    err[0] = '\0';                                                                                 \
    FG_CHECK_INT(fgc_fused_plan(&p, ins, n_in, out, n_out, &lay, &args, err, sizeof err), -1);     \
    FG_CHECK_STR_CONTAINS(err, msg);                                                               \
  } while (0)
  fprog_init(&p, 1);
  fprog_op(&p, 200, 1, FX(0), FX(0), FX(0), 0, 0);
  EXPECT_FAIL(xs, 1, &x, 1, "instruction 0 has opcode 200, out of range [0, 33)");
  fprog_init(&p, 1);
  F1(&p, FG_FUSED_ABS, FX(0));
  fprog_op(&p, FG_FUSED_OPCODE_COUNT, 2, FT(0), FX(0), FX(0), 0, 0);
  EXPECT_FAIL(xs, 1, &x, 1, "instruction 1 has opcode 33, out of range [0, 33)");
  /* the program's inputs against the node's */
  fprog_init(&p, 2);
  F2(&p, FG_FUSED_ADD, FX(0), FX(1));
  EXPECT_FAIL(xs, 3, &x, 1, "the program has 2 inputs, the node 3");
  EXPECT_FAIL(xs, 1, &x, 1, "the program has 2 inputs, the node 1");
  EXPECT_FAIL(xs, 2, &x, 2, "2 outputs, expected 1");
  /* references */
  fprog_init(&p, 1);
  F2(&p, FG_FUSED_ADD, FX(0), FX(1));
  EXPECT_FAIL(xs, 1, &x, 1,
              "instruction 0 (add) argument 1 refers to input 1, out of range [0, 1)");
  fprog_init(&p, 1);
  F1(&p, FG_FUSED_NEG, FT(0));
  EXPECT_FAIL(xs, 1, &x, 1, "instruction 0 (neg) argument 0 refers to temporary 0, out of range");
  fprog_init(&p, 1);
  F2(&p, FG_FUSED_MUL, FX(0), (fg_fused_ref){FG_FUSED_CONST, 3});
  EXPECT_FAIL(xs, 1, &x, 1, "refers to constant 3, out of range [0, 0)");
  fprog_init(&p, 1);
  F1(&p, FG_FUSED_NEG, (fg_fused_ref){7, 0});
  EXPECT_FAIL(xs, 1, &x, 1, "argument 0 has kind 7");
  fprog_init(&p, 1);
  fprog_op(&p, FG_FUSED_SELECT, 2, FX(0), FX(0), FX(0), 0, 0);
  EXPECT_FAIL(xs, 1, &x, 1, "instruction 0 (select) has 2 arguments, expected 3");
  fprog_init(&p, 1);
  EXPECT_FAIL(xs, 1, &x, 1, "the program has 0 instructions, expected 1 to 32");
  p.n_instrs = 33;
  EXPECT_FAIL(xs, 1, &x, 1, "the program has 33 instructions");
  fprog_init(&p, 1);
  F1(&p, FG_FUSED_NEG, FX(0));
  p.n_consts = -1;
  EXPECT_FAIL(xs, 1, &x, 1, "the program has -1 constants");
  /* shapes and dtypes */
  fprog_init(&p, 2);
  F2(&p, FG_FUSED_ADD, FX(0), FX(1));
  const fg_kbuf bad_dims[2] = {x, fshape(FG_F32, 1, D(3))};
  EXPECT_FAIL(bad_dims, 2, &x, 1, "input 1 of dims [3] does not broadcast to the output's [4, 5]");
  const fg_kbuf too_high[2] = {x, fshape(FG_F32, 3, D(1, 4, 5))};
  EXPECT_FAIL(too_high, 2, &x, 1, "input 1 has rank 3, above the output's [4, 5]");
  const fg_kbuf ints[2] = {x, fshape(FG_I32, 2, D(4, 5))};
  EXPECT_FAIL(ints, 2, &x, 1, "input 1 is i32, expected f32, f64 or bool");
  const fg_kbuf out_i = fshape(FG_I64, 2, D(4, 5));
  EXPECT_FAIL(xs, 2, &out_i, 1, "the output is i64, expected f32 or f64");
  EXPECT_FAIL(NULL, 2, &x, 1, "without its program or buffers");
#undef EXPECT_FAIL
  FG_CHECK_STR(fgc_fused_op_name(FG_FUSED_LEAKY_RELU), "leaky_relu");
  FG_CHECK_STR(fgc_fused_op_name(-1), "?");
  FG_CHECK_STR(fgc_fused_op_name(FG_FUSED_OPCODE_COUNT), "?");
}

/* ---- NVRTC ------------------------------------------------------------------ */

#define NVRTC_OR_SKIP()                                                                            \
  do {                                                                                             \
    char why_[512];                                                                                \
    if (!fgc_nvrtc_available(why_, sizeof why_)) FG_SKIP("%s", why_);                              \
  } while (0)

/* Every opcode, over two programs (one would pass the 32-instruction
 * limit): the binary ones, each comparison read by a select, and a select
 * on a bool input (part 0); then every unary one (part 1). */
static void every_op(fg_fused_params *p, int part) {
  fprog_init(p, 5);
  fg_fused_ref t = F2(p, FG_FUSED_ADD, FX(0), FX(1));
  if (part == 0) {
    for (int op = FG_FUSED_SUB; op < FG_FUSED_SELECT; op++) {
      if (op == FG_FUSED_GREATER || op == FG_FUSED_LESS || op == FG_FUSED_EQUAL) {
        fg_fused_ref c = F2(p, op, t, FX(2));
        t = F3(p, FG_FUSED_SELECT, c, t, FX(3));
      } else {
        t = F2(p, op, t, op == FG_FUSED_POW ? FC(p, 0.5) : FX(3));
      }
    }
    F3(p, FG_FUSED_SELECT, FX(4), t, FC(p, -2.5));
  } else {
    t = F3(p, FG_FUSED_SELECT, FX(4), t, FX(2));
    for (int op = FG_FUSED_NEG; op < FG_FUSED_OPCODE_COUNT; op++)
      t = F1A(p, op, t, op == FG_FUSED_CLIP ? -1 : 0.7, 3);
  }
}

static fg_kbuf every_op_inputs(fg_kbuf *ins, fg_dtype dt) {
  ins[0] = fshape(dt, 3, D(2, 3, 4));
  ins[1] = fshape(dt, 1, D(4));         /* SUFFIX */
  ins[2] = fshape(dt, 3, D(2, 1, 4));   /* WALK */
  ins[3] = fshape(dt, 0, NULL);         /* SCALAR */
  ins[4] = fshape(FG_BOOL, 2, D(3, 1)); /* WALK, bool */
  return fshape(dt, 3, D(2, 3, 4));
}

/* The generated source is valid CUDA: it compiles for sm_90, to a CUBIN
 * (an ELF file) and to PTX with the entry point, for f32 and f64. */
FG_TEST(fused_nvrtc_compiles_every_op, "") {
  NVRTC_OR_SKIP();
  int major = 0, minor = 0;
  FG_CHECK_INT(fgc_nvrtc_version(&major, &minor), 0);
  FG_CHECK(major >= 12);
  fg_fused_params p;
  const fg_dtype dts[2] = {FG_F32, FG_F64};
  for (int c = 0; c < 4; c++) {
    const int d = c % 2;
    every_op(&p, c / 2);
    FG_CHECK_INT(p.n_instrs, c / 2 ? 24 : 14);
    fg_kbuf ins[5];
    const fg_kbuf out = every_op_inputs(ins, dts[d]);
    fgc_fused_layout lay;
    fgc_fused_args args;
    char *src = gen(&p, ins, 5, out, &lay, &args);
    FG_REQUIRE(src);
    FG_CHECK_INT(lay.kind[2], FGC_FUSED_WALK);
    FG_CHECK_INT(lay.kind[4], FGC_FUSED_WALK);
    char err[4096];
    void *img = NULL;
    size_t n = 0;
    const int rc = fgc_nvrtc_compile(src, 90, 1, &img, &n, err, sizeof err);
    if (rc != 0) printf("%s\n--- source ---\n%s\n", err, src);
    FG_CHECK_INT(rc, 0);
    FG_CHECK(n > 1000 && img && memcmp(img, "\177ELF", 4) == 0);
    free(img);
    FG_CHECK_INT(fgc_nvrtc_compile(src, 90, 0, &img, &n, err, sizeof err), 0);
    FG_REQUIRE(img);
    FG_CHECK_STR_CONTAINS((const char *)img, ".entry fg_fused(");
    FG_CHECK_STR_CONTAINS((const char *)img, ".target sm_90");
    FG_CHECK_STR_CONTAINS((const char *)img, dts[d] == FG_F32 ? ".f32" : ".f64");
    free(img);
    free(src);
  }
}

/* A program that reads no input (constants only) and one that reads
 * FG_FUSED_MAX_INPUTS inputs compile too. */
FG_TEST(fused_nvrtc_compiles_input_counts, "") {
  NVRTC_OR_SKIP();
  fg_fused_params p;
  fprog_init(&p, 0);
  F1(&p, FG_FUSED_EXP, FC(&p, 1));
  const fg_kbuf out = fshape(FG_F32, 1, D(9));
  fgc_fused_layout lay;
  fgc_fused_args args;
  char *src = gen(&p, NULL, 0, out, &lay, &args);
  FG_REQUIRE(src);
  FG_CHECK_STR_CONTAINS(src, "fg_body() {");
  char err[4096];
  void *img = NULL;
  size_t n = 0;
  FG_CHECK_INT(fgc_nvrtc_compile(src, 90, 1, &img, &n, err, sizeof err), 0);
  free(img);
  free(src);
  fg_kbuf ins[FG_FUSED_MAX_INPUTS];
  fprog_init(&p, FG_FUSED_MAX_INPUTS);
  fg_fused_ref t = FX(0);
  for (int k = 0; k < FG_FUSED_MAX_INPUTS; k++) {
    ins[k] = k % 3 == 0   ? fshape(FG_F64, 2, D(4, 9))
             : k % 3 == 1 ? fshape(FG_F64, 1, D(9))
                          : fshape(FG_F64, 2, D(4, 1));
    if (k) t = F2(&p, FG_FUSED_ADD, t, FX(k));
  }
  src = gen(&p, ins, FG_FUSED_MAX_INPUTS, fshape(FG_F64, 2, D(4, 9)), &lay, &args);
  FG_REQUIRE(src);
  FG_CHECK_STR_CONTAINS(src, "const T x13 = p13[i - fg_div(i, m13) * m13];");
  FG_CHECK_STR_CONTAINS(src, "const T x14 = p14[fg_div(i, m14)];");
  FG_CHECK_INT(fgc_nvrtc_compile(src, 90, 1, &img, &n, err, sizeof err), 0);
  free(img);
  free(src);
}

/* mul then add stay two roundings in the machine code, as two unfused
 * kernels are: no fma.rn in the PTX. x1 + x2 * x3 would be an FMA in a
 * plain CUDA expression (nvcc's default, and NVRTC's). */
FG_TEST(fused_nvrtc_no_contraction_across_instructions, "") {
  NVRTC_OR_SKIP();
  fg_fused_params p;
  fprog_init(&p, 3);
  F2(&p, FG_FUSED_ADD, F2(&p, FG_FUSED_MUL, FX(0), FX(1)), FX(2));
  const fg_dtype dts[2] = {FG_F32, FG_F64};
  const char *fma[2] = {"fma.rn.f32", "fma.rn.f64"}, *mul[2] = {"mul.rn.f32", "mul.rn.f64"},
             *add[2] = {"add.rn.f32", "add.rn.f64"};
  for (int d = 0; d < 2; d++) {
    const fg_kbuf x = fshape(dts[d], 1, D(7)), ins[3] = {x, x, x};
    fgc_fused_layout lay;
    fgc_fused_args args;
    char *src = gen(&p, ins, 3, x, &lay, &args);
    FG_REQUIRE(src);
    char err[2048];
    void *ptx = NULL;
    size_t n = 0;
    FG_CHECK_INT(fgc_nvrtc_compile(src, 90, 0, &ptx, &n, err, sizeof err), 0);
    FG_REQUIRE(ptx);
    FG_CHECK_STR_CONTAINS((const char *)ptx, mul[d]);
    FG_CHECK_STR_CONTAINS((const char *)ptx, add[d]);
    FG_CHECK(strstr((const char *)ptx, fma[d]) == NULL);
    free(ptx);
    free(src);
  }
  /* the control: the same arithmetic as one plain expression contracts */
  const char *plain = "extern \"C\" __global__ void k(float *o, const float *a, const float *b,"
                      " const float *c) { o[0] = a[0] * b[0] + c[0]; }";
  char err[2048];
  void *ptx = NULL;
  size_t n = 0;
  FG_CHECK_INT(fgc_nvrtc_compile(plain, 90, 0, &ptx, &n, err, sizeof err), 0);
  FG_REQUIRE(ptx);
  FG_CHECK_STR_CONTAINS((const char *)ptx, "fma.rn.f32");
  free(ptx);
}

/* A source NVRTC rejects: -1 with its log, nothing allocated. */
FG_TEST(fused_nvrtc_error_log, "badinput") {
  NVRTC_OR_SKIP();
  char err[2048] = "";
  void *img = (void *)&err;
  size_t n = 7;
  FG_CHECK_INT(fgc_nvrtc_compile("this is not CUDA;", 90, 1, &img, &n, err, sizeof err), -1);
  FG_CHECK(img == NULL && n == 0);
  FG_CHECK_STR_CONTAINS(err, "NVRTC compilation for sm_90 failed");
  FG_CHECK_STR_CONTAINS(err, "error");
  FG_CHECK_INT(fgc_nvrtc_compile(NULL, 90, 1, &img, &n, err, sizeof err), -1);
  FG_CHECK_INT(fgc_nvrtc_compile("", 3, 1, &img, &n, err, sizeof err), -1);
  FG_CHECK_STR_CONTAINS(err, "architecture 3");
}

/* ---- the disk cache ---------------------------------------------------------- */

static int file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (int)st.st_size : -1;
}

/* Overwrites byte `at` of path with its complement. */
static void flip_byte(const char *path, long at) {
  FILE *f = fopen(path, "r+b");
  if (!f) return;
  fseek(f, at, SEEK_SET);
  const int c = fgetc(f);
  fseek(f, at, SEEK_SET);
  fputc(~c & 0xff, f);
  fclose(f);
}

/* One cubin request; checks its origin and returns the image size. */
static size_t cubin_from(const char *src, int want_origin, void **keep) {
  void *img = NULL;
  size_t n = 0;
  int origin = -1;
  char err[2048] = "";
  const int rc = fgc_nvrtc_cubin(src, 90, &img, &n, &origin, err, sizeof err);
  if (rc != 0) FG_FAIL_AT("fgc_nvrtc_cubin: %s", err);
  if (origin != want_origin) FG_FAIL_AT("origin %d, expected %d", origin, want_origin);
  if (img && memcmp(img, "\177ELF", 4) != 0) FG_FAIL_AT("the image is not an ELF file");
  if (keep)
    *keep = img;
  else
    free(img);
  return n;
}

static char *small_source(double c) {
  fg_fused_params p;
  fprog_init(&p, 1);
  F2(&p, FG_FUSED_MUL, FX(0), FC(&p, c));
  const fg_kbuf x = fshape(FG_F32, 1, D(5));
  fgc_fused_layout lay;
  fgc_fused_args args;
  return gen(&p, &x, 1, x, &lay, &args);
}

/* Written once, read back in place of a compile; a corrupt or truncated
 * file is compiled again and replaced; a different source or architecture
 * is another file. */
FG_TEST(fused_nvrtc_disk_cache, "") {
  NVRTC_OR_SKIP();
  char dir[512], cache[600], file[700];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_nvrtc"));
  FG_CHECK_INT(setenv("FG_CACHE_DIR", dir, 1), 0);
  FG_CHECK_INT(fgc_nvrtc_cache_dir(cache, sizeof cache), 0);
  char want[600];
  snprintf(want, sizeof want, "%s/nvrtc", dir);
  FG_CHECK_STR(cache, want);
  char *src = small_source(3.0);
  FG_REQUIRE(src);
  const uint64_t key = fgc_nvrtc_key(src, 90);
  FG_CHECK(key != 0);
  FG_CHECK(key != fgc_nvrtc_key(src, 80));
  fgc_nvrtc_cache_file(cache, key, file, sizeof file);
  FG_CHECK_INT(file_size(file), -1);

  const long c0 = fgc_nvrtc_compiles();
  void *first = NULL, *second = NULL;
  const size_t n = cubin_from(src, FGC_NVRTC_COMPILED, &first);
  FG_CHECK_INT(fgc_nvrtc_compiles(), c0 + 1);
  FG_CHECK(file_size(file) > (int)n); /* header + image */
  FG_CHECK_INT(cubin_from(src, FGC_NVRTC_FROM_DISK, &second), n);
  FG_CHECK_INT(fgc_nvrtc_compiles(), c0 + 1); /* no compile */
  FG_CHECK(first && second && memcmp(first, second, n) == 0);
  free(first);
  free(second);
  /* folder private to the user; no temporary file left behind */
  struct stat st;
  FG_CHECK(stat(cache, &st) == 0 && (st.st_mode & 077) == 0);
  FG_CHECK_INT(fgt_count_entries(cache), 1);

  /* a byte of the image flipped: the checksum catches it */
  flip_byte(file, 100);
  cubin_from(src, FGC_NVRTC_COMPILED, NULL);
  FG_CHECK_INT(fgc_nvrtc_compiles(), c0 + 2);
  cubin_from(src, FGC_NVRTC_FROM_DISK, NULL);
  /* the header's key flipped */
  flip_byte(file, 9);
  cubin_from(src, FGC_NVRTC_COMPILED, NULL);
  /* truncated, then three bytes of junk, then an empty file */
  FG_CHECK_INT(truncate(file, 200), 0);
  cubin_from(src, FGC_NVRTC_COMPILED, NULL);
  FG_CHECK_INT(fgt_write_file(file, "abc", 3), 0);
  cubin_from(src, FGC_NVRTC_COMPILED, NULL);
  FG_CHECK_INT(truncate(file, 0), 0);
  cubin_from(src, FGC_NVRTC_COMPILED, NULL);
  cubin_from(src, FGC_NVRTC_FROM_DISK, NULL);
  FG_CHECK_INT(fgc_nvrtc_compiles(), c0 + 6);
  /* dropped (a CUBIN the driver refused): gone, then compiled again */
  fgc_nvrtc_cache_drop(src, 90);
  FG_CHECK_INT(file_size(file), -1);
  cubin_from(src, FGC_NVRTC_COMPILED, NULL);
  FG_CHECK_INT(fgc_nvrtc_compiles(), c0 + 7);

  /* another source is another file */
  char *other = small_source(4.0);
  FG_REQUIRE(other);
  FG_CHECK(fgc_nvrtc_key(other, 90) != key);
  cubin_from(other, FGC_NVRTC_COMPILED, NULL);
  cubin_from(other, FGC_NVRTC_FROM_DISK, NULL);
  FG_CHECK_INT(fgt_count_entries(cache), 2);
  free(other);
  free(src);
  unsetenv("FG_CACHE_DIR");
  fgt_rmtree(dir);
}

/* A cache folder that cannot be made (under a regular file), and a cache
 * turned off: still compiled, never stored, never a failure. */
FG_TEST(fused_nvrtc_cache_unwritable, "") {
  NVRTC_OR_SKIP();
  char dir[512], blocker[600], cache[700];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_nvrtc"));
  snprintf(blocker, sizeof blocker, "%s/a_file", dir);
  FG_CHECK_INT(fgt_write_file(blocker, "x", 1), 0);
  FG_CHECK_INT(setenv("FG_CACHE_DIR", blocker, 1), 0);
  char *src = small_source(5.0);
  FG_REQUIRE(src);
  const long c0 = fgc_nvrtc_compiles();
  cubin_from(src, FGC_NVRTC_NOT_STORED, NULL);
  cubin_from(src, FGC_NVRTC_NOT_STORED, NULL);
  FG_CHECK_INT(fgc_nvrtc_compiles(), c0 + 2);
  /* FG_CACHE_DIR empty: no disk cache */
  FG_CHECK_INT(setenv("FG_CACHE_DIR", "", 1), 0);
  FG_CHECK_INT(fgc_nvrtc_cache_dir(cache, sizeof cache), -1);
  cubin_from(src, FGC_NVRTC_NOT_STORED, NULL);
  FG_CHECK_INT(fgc_nvrtc_compiles(), c0 + 3);
  FG_CHECK_INT(fgt_count_entries(dir), 1); /* only the blocker */
  free(src);
  unsetenv("FG_CACHE_DIR");
  fgt_rmtree(dir);
}

typedef struct cache_job {
  const char *src;
  int rc, elf;
  size_t size;
} cache_job;

static void *cache_worker(void *arg) {
  cache_job *j = arg;
  void *img = NULL;
  int origin = -1;
  char err[1024];
  j->rc = fgc_nvrtc_cubin(j->src, 90, &img, &j->size, &origin, err, sizeof err);
  j->elf = img && memcmp(img, "\177ELF", 4) == 0;
  free(img);
  return NULL;
}

/* Threads asking for one kernel at once, on an empty cache: each gets a
 * whole CUBIN, and the file left is one whole file (written under a
 * temporary name, then renamed). */
FG_TEST(fused_nvrtc_cache_concurrent, "") {
  NVRTC_OR_SKIP();
  char dir[512], cache[600], file[700];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_nvrtc"));
  FG_CHECK_INT(setenv("FG_CACHE_DIR", dir, 1), 0);
  char *src = small_source(6.0);
  FG_REQUIRE(src);
  enum { N = 4 };
  pthread_t th[N];
  cache_job jobs[N];
  for (int i = 0; i < N; i++) {
    jobs[i] = (cache_job){src, -1, 0, 0};
    FG_REQUIRE(pthread_create(&th[i], NULL, cache_worker, &jobs[i]) == 0);
  }
  for (int i = 0; i < N; i++)
    pthread_join(th[i], NULL);
  for (int i = 0; i < N; i++) {
    FG_CHECK_INT(jobs[i].rc, 0);
    FG_CHECK_INT(jobs[i].elf, 1);
    FG_CHECK_INT(jobs[i].size, jobs[0].size);
  }
  FG_CHECK_INT(fgc_nvrtc_cache_dir(cache, sizeof cache), 0);
  FG_CHECK_INT(fgt_count_entries(cache), 1); /* no temporary file left */
  fgc_nvrtc_cache_file(cache, fgc_nvrtc_key(src, 90), file, sizeof file);
  FG_CHECK_INT(file_size(file), (int)(jobs[0].size + 40));
  cubin_from(src, FGC_NVRTC_FROM_DISK, NULL);
  free(src);
  unsetenv("FG_CACHE_DIR");
  fgt_rmtree(dir);
}

/* The folder the environment names: FG_CACHE_DIR, else XDG_CACHE_HOME,
 * else HOME. No NVRTC needed. */
FG_TEST(fused_nvrtc_cache_folder, "") {
  char buf[600], *old_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
  char *old_xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
  unsetenv("FG_CACHE_DIR");
  setenv("XDG_CACHE_HOME", "/x/cache", 1);
  setenv("HOME", "/home/u", 1);
  FG_CHECK_INT(fgc_nvrtc_cache_dir(buf, sizeof buf), 0);
  FG_CHECK_STR(buf, "/x/cache/flowgraph/nvrtc");
  setenv("XDG_CACHE_HOME", "", 1);
  FG_CHECK_INT(fgc_nvrtc_cache_dir(buf, sizeof buf), 0);
  FG_CHECK_STR(buf, "/home/u/.cache/flowgraph/nvrtc");
  unsetenv("XDG_CACHE_HOME");
  unsetenv("HOME");
  FG_CHECK_INT(fgc_nvrtc_cache_dir(buf, sizeof buf), -1);
  setenv("FG_CACHE_DIR", "/c", 1);
  FG_CHECK_INT(fgc_nvrtc_cache_dir(buf, sizeof buf), 0);
  FG_CHECK_STR(buf, "/c/nvrtc");
  FG_CHECK_INT(fgc_nvrtc_cache_dir(buf, 5), -1); /* does not fit */
  fgc_nvrtc_cache_file("/c/nvrtc", 0x0123456789abcdefull, buf, sizeof buf);
  FG_CHECK_STR(buf, "/c/nvrtc/0123456789abcdef.cubin");
  unsetenv("FG_CACHE_DIR");
  if (old_home) setenv("HOME", old_home, 1);
  if (old_xdg) setenv("XDG_CACHE_HOME", old_xdg, 1);
  free(old_home);
  free(old_xdg);
}

/* ---- the generated kernel's index arithmetic, run on the CPU ----------------- */

/* CUDA's names as plain C++, so the generated source compiles with the
 * host's C++ compiler and runs each "thread" in a loop. */
static const char emu_shim[] =
    "#include <cmath>\n#include <cstdint>\n#include <cstdio>\n#include <cstdlib>\n"
    "#include <cstring>\n#include <math.h>\n"
    "#define __device__\n#define __forceinline__ inline\n#define __global__\n"
    "#define __launch_bounds__(x)\n#define __align__(n) alignas(n)\n"
    "struct u3 { unsigned x; };\nstatic u3 blockIdx, blockDim, gridDim, threadIdx;\n"
    "static float __fadd_rn(float a, float b) { return a + b; }\n"
    "static double __dadd_rn(double a, double b) { return a + b; }\n"
    "static float __fsub_rn(float a, float b) { return a - b; }\n"
    "static double __dsub_rn(double a, double b) { return a - b; }\n"
    "static float __fmul_rn(float a, float b) { return a * b; }\n"
    "static double __dmul_rn(double a, double b) { return a * b; }\n"
    "static float __int_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }\n"
    "static double __longlong_as_double(unsigned long long u) {\n"
    "  double f; memcpy(&f, &u, 8); return f;\n}\n"
    "using std::expm1; using std::log1p; using std::rint; using std::floor; using std::ceil;\n";

/* Runs every thread of a 3-block grid, then checks out[i] against the sum
 * of the inputs' broadcast elements times (k + 1) (the program's
 * meaning); prints "ok" or the first mismatches. */
static const char emu_main[] =
    "static long long off(int k, long long i) {\n"
    "  long long o = 0, st = 1;\n"
    "  for (int d = OUT_RANK - 1; d >= 0; d--) {\n"
    "    const long long c = i % OUT_DIMS[d];\n    i /= OUT_DIMS[d];\n"
    "    const int j = d - (OUT_RANK - IN_RANK[k]);\n    if (j < 0) break;\n"
    "    if (IN_DIMS[k][j] != 1) o += c * st;\n    st *= IN_DIMS[k][j];\n  }\n  return o;\n}\n"
    "static int run(int vec, int shift) {\n"
    "  fg_fused_args a;\n  memset(&a, 0, sizeof a);\n  set_args(a);\n"
    "  static char bufs[16][1 << 17], ob[1 << 17];\n"
    "  for (int k = 0; k < N_IN; k++) {\n"
    "    char *p = (char *)(((uintptr_t)bufs[k] + 31) & ~(uintptr_t)31) + shift * IN_ES[k];\n"
    "    for (long long j = 0; j < IN_N[k]; j++) {\n"
    "      if (IN_ES[k] == 1) p[j] = (j * 7 + k) % 3 == 0;\n"
    "      else ((T *)p)[j] = (T)(k * 1000 + j);\n    }\n    a.in[k] = p;\n  }\n"
    "  T *out = (T *)(((uintptr_t)ob + 31) & ~(uintptr_t)31) + shift;\n"
    "  for (long long i = 0; i < a.n; i++) out[i] = -12345;\n"
    "  a.out = out;\n  a.vec = vec;\n  blockDim.x = 256;\n  gridDim.x = 3;\n"
    "  for (unsigned b = 0; b < 3; b++)\n    for (unsigned t = 0; t < 256; t++) {\n"
    "      blockIdx.x = b;\n      threadIdx.x = t;\n      fg_fused(a);\n    }\n"
    "  int bad = 0;\n  for (long long i = 0; i < a.n; i++) {\n    double want = 0;\n"
    "    for (int k = 0; k < N_IN; k++) {\n      const long long o = off(k, i);\n"
    "      const double v = IN_ES[k] == 1 ? (double)(((const char *)a.in[k])[o] != 0)\n"
    "                                     : (double)((const T *)a.in[k])[o];\n"
    "      want += v * (k + 1);\n    }\n"
    "    if ((T)want != out[i] && bad++ < 3)\n"
    "      printf(\"vec %d shift %d: out[%lld] = %g, expected %g\\n\", vec, shift, i,\n"
    "             (double)out[i], want);\n  }\n  return bad;\n}\n"
    "int main() {\n  int bad = run(0, 0) + run(0, 1);\n  if (VEC_OK) bad += run(1, 0);\n"
    "  printf(bad ? \"bad\\n\" : \"ok\\n\");\n  return 0;\n}\n";

/* x0 + 2 x1 + 3 x2 + ... over the shapes given, compiled with the host's
 * C++ compiler and run; 1 when it printed "ok". */
static int emulate(const char *dir, const char *cxx, fg_dtype dt, const fg_kbuf *ins, int n_in,
                   fg_kbuf out) {
  fg_fused_params p;
  fprog_init(&p, n_in);
  fg_fused_ref t = F2(&p, FG_FUSED_ADD, FX(0), FC(&p, 0));
  for (int k = 1; k < n_in; k++)
    t = F2(&p, FG_FUSED_ADD, t, F2(&p, FG_FUSED_MUL, FX(k), FC(&p, k + 1)));
  fgc_fused_layout lay;
  fgc_fused_args args;
  out.dtype = dt;
  char *src = gen(&p, ins, n_in, out, &lay, &args);
  if (!src) return 0;
  /* the 4-wide loop where the kernel would take it with aligned buffers */
  fgc_fused_args aligned = args;
  aligned.out = (void *)(uintptr_t)4096;
  for (int k = 0; k < n_in; k++)
    aligned.in[k] = (const void *)(uintptr_t)4096;
  char path[700], cmd[4096];
  snprintf(path, sizeof path, "%s/emu.cpp", dir);
  FILE *f = fopen(path, "w");
  if (!f) {
    free(src);
    return 0;
  }
  fprintf(f, "%s%s\nstatic const int N_IN = %d, OUT_RANK = %d, VEC_OK = %d;\n", emu_shim, src, n_in,
          out.rank, fgc_fused_vec_ok(&lay, &aligned));
  fprintf(f, "static const long long OUT_DIMS[] = {");
  for (int i = 0; i < out.rank; i++)
    fprintf(f, "%lld, ", (long long)out.dims[i]);
  fprintf(f, "0};\nstatic const int IN_RANK[] = {");
  for (int k = 0; k < n_in; k++)
    fprintf(f, "%d, ", ins[k].rank);
  fprintf(f, "};\nstatic const int IN_ES[] = {");
  for (int k = 0; k < n_in; k++)
    fprintf(f, "%d, ", ins[k].dtype == FG_BOOL ? 1 : (int)fg_dtype_size(dt));
  fprintf(f, "};\nstatic const long long IN_N[] = {");
  for (int k = 0; k < n_in; k++) {
    int64_t n = 1;
    for (int i = 0; i < ins[k].rank; i++)
      n *= ins[k].dims[i];
    fprintf(f, "%lld, ", (long long)n);
  }
  fprintf(f, "};\nstatic const long long IN_DIMS[][8] = {");
  for (int k = 0; k < n_in; k++) {
    fprintf(f, "{");
    for (int i = 0; i < ins[k].rank; i++)
      fprintf(f, "%lld, ", (long long)ins[k].dims[i]);
    fprintf(f, "0}, ");
  }
  fprintf(f, "};\nstatic void set_args(fg_fused_args &a) {\n  a.n = %lld;\n", args.n);
  for (int k = 0; k < FG_FUSED_MAX_INPUTS; k++) {
    fprintf(f, "  a.m[%d] = %lld;\n", k, args.m[k]);
    for (int d = 0; d < FG_MAX_RANK; d++)
      fprintf(f, "  a.strides[%d][%d] = %lld;\n", k, d, args.strides[k][d]);
  }
  for (int d = 0; d < FG_MAX_RANK; d++)
    fprintf(f, "  a.dims[%d] = %lld;\n", d, args.dims[d]);
  fprintf(f, "}\n%s", emu_main);
  fclose(f);
  free(src);
  snprintf(cmd, sizeof cmd, "%s -std=c++17 -O1 -w -o %s/emu %s 2>&1 && %s/emu > %s/emu.out", cxx,
           dir, path, dir, dir);
  if (system(cmd) != 0) {
    FG_FAIL_AT("the emulation did not build or run: %s", cmd);
    return 0;
  }
  snprintf(path, sizeof path, "%s/emu.out", dir);
  char line[256] = "";
  f = fopen(path, "r");
  while (f && fgets(line, sizeof line, f))
    if (strcmp(line, "ok\n") != 0) printf("%s", line);
  if (f) fclose(f);
  return strcmp(line, "ok\n") == 0;
}

/* The generated kernel compiled as host C++ with CUDA's names stubbed
 * and every thread of a small grid run in turn, so its index arithmetic
 * (same shape, scalar, bias row, column, strided walk, bool inputs, the
 * 4-wide loop and its leftovers, aligned and not) is checked on any
 * machine. Skips without a C++ compiler ($CXX, else c++). */
FG_TEST(fused_codegen_host_emulation, "") {
  const char *cxx = getenv("CXX") && getenv("CXX")[0] ? getenv("CXX") : "c++";
  char probe[600];
  snprintf(probe, sizeof probe, "%s --version > /dev/null 2>&1", cxx);
  if (system(probe) != 0) FG_SKIP("no C++ compiler (%s) to build the emulation", cxx);
  char dir[512];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_fused_emu"));
  static const struct {
    int n_in;
    int rank[4];
    int64_t dims[4][4];
    int boolean[4];
    int out_rank;
    int64_t out[4];
  } cases[] = {
      /* FULL + SUFFIX (bias row of 40): 4-wide loop */
      {2, {2, 1}, {{33, 40}, {40}}, {0, 0}, 2, {33, 40}},
      /* FULL + SCALAR, 1001 = 4 * 250 + 1 outputs */
      {2, {2, 0}, {{7, 143}, {0}}, {0, 0}, 2, {7, 143}},
      /* FULL + SUFFIX + bool PREFIX (column of 8) + SCALAR */
      {4, {2, 1, 2, 0}, {{300, 8}, {8}, {300, 1}, {0}}, {0, 0, 1, 0}, 2, {300, 8}},
      /* a SUFFIX and a PREFIX of 3: rows not multiples of 4 */
      {3, {3, 1, 1}, {{2, 1, 1}, {1}, {3}}, {0, 0, 0}, 3, {2, 1, 3}},
      /* WALK x2 (one merged pair of dims) + SCALAR */
      {3, {4, 2, 0}, {{2, 3, 1, 5}, {4, 1}, {0}}, {0, 0, 0}, 4, {2, 3, 4, 5}},
      /* WALK with a bool input, FULL, SUFFIX: many grid-stride rounds */
      {4, {3, 3, 2, 1}, {{40, 30, 7}, {40, 1, 7}, {30, 1}, {7}}, {0, 0, 1, 0}, 3, {40, 30, 7}},
      /* empty and rank-0 outputs */
      {2, {2, 1}, {{0, 5}, {5}}, {0, 0}, 2, {0, 5}},
      {1, {0}, {{0}}, {0}, 0, {0}},
  };
  const fg_dtype dts[2] = {FG_F32, FG_F64};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int d = 0; d < 2; d++) {
      fg_kbuf ins[4];
      for (int k = 0; k < cases[c].n_in; k++)
        ins[k] = fshape(cases[c].boolean[k] ? FG_BOOL : dts[d], cases[c].rank[k], cases[c].dims[k]);
      const fg_kbuf out = fshape(dts[d], cases[c].out_rank, cases[c].out);
      if (!emulate(dir, cxx, dts[d], ins, cases[c].n_in, out))
        FG_FAIL_AT("case %zu %s: the emulated kernel disagrees", c, fg_dtype_name(dts[d]));
    }
  fgt_rmtree(dir);
}
