/* f32 convolutions on oneDNN (Debian's libdnnl, C API).
 *
 * The prepare hook makes the primitives for the plan's exact shapes with
 * the layouts oneDNN prefers (blocked, for its fastest kernels), the
 * reorders between those and the executor's plain NCHW / (g)oihw buffers,
 * the blocked buffers and the scratchpads (oneDNN's user scratchpad mode),
 * so a run binds the buffers, reorders and executes: nothing is created or
 * allocated. The blocked copies live outside the plan's arena, one set per
 * step, except a constant weight's: its converted copy is the session's
 * (kernels/share.h), made by the first run that needs it and shared by
 * every plan whose convolution reads that constant in the same layout.
 *
 * Threads. Debian builds oneDNN on OpenMP, and a primitive's team size is
 * fixed when it is made. An OpenMP team beside the executor's pool
 * oversubscribes the cores whenever the pool runs another step at the same
 * time (the input and weight gradients of one layer are independent), and
 * oneDNN's weight gradient splits its sum over the batch by thread, so its
 * bits would depend on the thread count. So the batch is cut into parts
 * fixed by the shape and the machine alone: the largest divisor of N that
 * is at most the machine's cores. Each part is a one-thread primitive over
 * its rows, and the parts run as chunks of the executor's parallel_for,
 * which never oversubscribes. Rows of x and y are independent in the
 * forward and data-gradient directions; the weight gradient sums the
 * parts' partial gradients in part order. Either way the bits do not
 * depend on the thread count. A forward convolution of one image is cut
 * by output channels instead, or by groups (channel_parts_for). Any other
 * batch that cannot be cut (N = 1, or one core) runs as one primitive
 * whose team is the threads a run gives the step, except the weight
 * gradient and a forward convolution of one image, which then get one
 * thread.
 *
 * The fused ops (fused_conv2d, fused_conv2d_add) run conv2d's primitive,
 * then their epilogue on each part's rows of y right after the part has
 * written them, while they are warm: y + z, then relu, the same bits as
 * conv2d -> add -> relu (tests/kernels/test_fused_conv.c checks them).
 * z has y's layout (the planner joins the two), so element i of one is
 * element i of the other. A batch that is not cut runs the epilogue over
 * the run's threads after the primitive. Not oneDNN's post-ops: its sum
 * post-op adds the old destination before the bias (the JIT kernels add
 * the bias last), which rounds (acc + z) + b where the chain rounds
 * (acc + b) + z, and its eltwise relu maps NaN to 0 in the JIT kernels
 * and negative values to -0.0 in the GEMM ones, where the relu kernel
 * keeps NaN and gives +0.0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/conv_impl.h"
#include "kernels/share.h"

#ifdef FG_HAVE_DNNL
#include <dnnl.h>
#include <omp.h>

/* One tensor of a primitive: `user` is bound to the executor's plain
 * buffer each call; when the primitive chose another layout, `inner` holds
 * the tensor in that layout in a buffer made at prepare time, and
 * `reorder` converts between the two (before the convolution for an input,
 * after it for an output). */
typedef struct conv_port {
  dnnl_memory_t user, inner;
  void *buf;
  dnnl_primitive_t reorder;
  dnnl_memory_t rscratch; /* the reorder's scratchpad, NULL when it needs none */
  void *rscratch_buf;
  int out;
} conv_port;

/* One part of the work: rows [n0, n0 + n) of x and y, or (channel parts)
 * output channels [o0, o0 + o) of w, b and y, for all of x or (groups cut)
 * its channels from c0; elems: its elements of y. */
typedef struct conv_part {
  int64_t n0, o0, c0, elems;
  dnnl_stream_t stream;
  dnnl_primitive_t prim;
  conv_port x, y;
  /* Channel parts: this part's slice of the weight (the batch parts share
   * conv_state's); x_shared: its x is part 0's, converted once before the
   * parts run. */
  conv_port w;
  int x_shared;
  /* Its weight slice's converted copy in the session's store, when shared
   * (conv_state.w_share); w.inner then points into it. */
  fgk_shared *w_entry;
  /* The weight gradient of parts after the first: this part's partial sum,
   * in the primitive's layout (the first writes the shared port's). */
  dnnl_memory_t dw;
  void *dw_buf;
  dnnl_memory_t mb, scratch;
  void *scratch_buf;
  /* The fused ops' epilogue: this part's rows of y and z (NULL: none),
   * bound each call. */
  float *y_rows;
  const float *z_rows;
  dnnl_exec_arg_t args[6];
  int n_args;
  dnnl_status_t status; /* of this part's last run */
  const char *failed;   /* what failed, for the message */
} conv_part;

/* One piece of the weight's reorder: output channels [o0, o0 + n) of the
 * plain and the primitive's layouts (submemories of the whole), so the
 * pieces convert side by side, one per thread. */
#define CONV_W_PIECES 8
typedef struct conv_wpiece {
  dnnl_memory_t user, inner;
  dnnl_primitive_t reorder;
  dnnl_stream_t stream;
  dnnl_status_t status;
} conv_wpiece;

typedef struct conv_state {
  conv_mode mode;
  conv_epi epi;
  conv_act act;      /* the fused ops' activation */
  int64_t part_rows; /* batch rows per part */
  /* Parts over output channels instead of the batch (see
   * channel_parts_for); x_sliced: over groups, each part reading its own
   * slice of x. */
  int channel_parts, x_sliced;
  /* This run converts the weight into the primitives' layout (its copy
   * from the last run is not current): before the batch parts, or by each
   * channel part for its slice. */
  int w_convert;
  size_t w_chan;         /* bytes per output channel of w */
  size_t x_chan, y_chan; /* bytes per channel of x and y (batch 1) */
  int threads;           /* each primitive's OpenMP team */
  int n_parts;
  /* The weight is a variable or constant input (fg_kctx.fixed_inputs):
   * its reordered copy is kept while the session's var_version and the
   * weight's buffer stay the same (w_valid: it holds one). */
  int w_fixed, w_valid;
  uint64_t w_version;
  const void *w_data;
  /* The weight is a constant and the session has a store (kernels/share.h):
   * its converted copy (w_entry, or each channel part's) is the store's,
   * shared with the session's other plans, for the constant at w_src. */
  int w_share;
  fgk_share *share;
  const void *w_src;
  fgk_shared *w_entry;
  size_t x_row, y_row; /* bytes per batch row of x and y */
  size_t w_bytes;      /* of the weight in the primitives' layout */
  dnnl_engine_t engine;
  dnnl_stream_t stream; /* the weight's reorders, outside the parts */
  conv_port w;          /* shared by the parts */
  int n_wpieces;        /* 0: w's reorder runs whole, on `stream` */
  conv_wpiece wpiece[CONV_W_PIECES];
  conv_part part[];
} conv_state;

static void port_release(conv_port *p) {
  if (p->user) dnnl_memory_destroy(p->user);
  if (p->inner) dnnl_memory_destroy(p->inner);
  if (p->reorder) dnnl_primitive_destroy(p->reorder);
  if (p->rscratch) dnnl_memory_destroy(p->rscratch);
  free(p->buf);
  free(p->rscratch_buf);
}

static void part_release(conv_part *q) {
  port_release(&q->x);
  port_release(&q->y);
  port_release(&q->w);
  if (q->dw) dnnl_memory_destroy(q->dw);
  if (q->mb) dnnl_memory_destroy(q->mb);
  if (q->scratch) dnnl_memory_destroy(q->scratch);
  if (q->prim) dnnl_primitive_destroy(q->prim);
  if (q->stream) dnnl_stream_destroy(q->stream);
  free(q->dw_buf);
  free(q->scratch_buf);
}

static void wpieces_release(conv_state *s) {
  for (int i = 0; i < s->n_wpieces; i++) {
    conv_wpiece *k = &s->wpiece[i];
    if (k->user) dnnl_memory_destroy(k->user);
    if (k->inner) dnnl_memory_destroy(k->inner);
    if (k->reorder) dnnl_primitive_destroy(k->reorder);
    if (k->stream) dnnl_stream_destroy(k->stream);
    memset(k, 0, sizeof *k);
  }
  s->n_wpieces = 0;
}

/* Gives the state's holds on the store's entries back. */
static void share_unbind(conv_state *s) {
  fgk_share_put(s->share, s->w_entry);
  s->w_entry = NULL;
  for (int i = 0; i < s->n_parts; i++) {
    fgk_share_put(s->share, s->part[i].w_entry);
    s->part[i].w_entry = NULL;
  }
  s->w_src = NULL;
}

void fgk_conv_release(void *state) {
  conv_state *s = state;
  if (!s) return;
  share_unbind(s);
  for (int i = 0; i < s->n_parts; i++)
    part_release(&s->part[i]);
  wpieces_release(s);
  port_release(&s->w);
  if (s->stream) dnnl_stream_destroy(s->stream);
  if (s->engine) dnnl_engine_destroy(s->engine);
  free(s);
}

static size_t mem_bytes(const_dnnl_memory_t m) {
  const dnnl_memory_desc_t *md = NULL;
  return m && dnnl_memory_get_memory_desc(m, &md) == dnnl_success ? dnnl_memory_desc_get_size(md)
                                                                  : 0;
}

/* What port p allocated: its converted copy (unless the store's) and its
 * reorder's scratchpad. */
static size_t port_bytes(const conv_port *p) {
  return (p->buf ? mem_bytes(p->inner) : 0) + (p->rscratch_buf ? mem_bytes(p->rscratch) : 0);
}

size_t fgk_conv_bytes(const void *state, size_t *shared) {
  const conv_state *s = state;
  if (!s) return 0;
  size_t n = port_bytes(&s->w);
  if (s->w_share && s->w.inner) *shared += mem_bytes(s->w.inner);
  for (int i = 0; i < s->n_parts; i++) {
    const conv_part *q = &s->part[i];
    n += port_bytes(&q->x) + port_bytes(&q->y) + port_bytes(&q->w);
    n += (q->dw_buf ? mem_bytes(q->dw) : 0) + (q->scratch_buf ? mem_bytes(q->scratch) : 0);
    if (s->w_share && q->w.inner) *shared += mem_bytes(q->w.inner);
  }
  return n;
}

static int dnnl_fail(const fg_kctx *ctx, const char *what, dnnl_status_t r) {
  if (ctx->err) snprintf(ctx->err, ctx->err_size, "oneDNN: %s failed (status %d)", what, (int)r);
  return -1;
}

#define DNNL_TRY(call, what)                                                                       \
  do {                                                                                             \
    dnnl_status_t r_ = (call);                                                                     \
    if (r_ != dnnl_success) {                                                                      \
      rc = dnnl_fail(ctx, what, r_);                                                               \
      goto done;                                                                                   \
    }                                                                                              \
  } while (0)

/* The store's equality of two layouts (kernels/share.h). */
static int same_md(const void *a, const void *b) { return dnnl_memory_desc_equal(a, b); }

/* A 64-byte aligned buffer of `md`'s size and a memory of `md` over it. */
static int owned_memory(const fg_kctx *ctx, const dnnl_memory_desc_t *md, dnnl_engine_t eng,
                        void **buf, dnnl_memory_t *mem) {
  size_t bytes = dnnl_memory_desc_get_size(md);
  if (posix_memalign(buf, 64, bytes ? bytes : 64) != 0) {
    *buf = NULL;
    snprintf(ctx->err, ctx->err_size, "out of memory (%zu bytes of oneDNN buffers)", bytes);
    return -1;
  }
  dnnl_status_t r = dnnl_memory_create(mem, md, eng, *buf);
  return r == dnnl_success ? 0 : dnnl_fail(ctx, "memory", r);
}

/* A reorder from `from` to `to`, and its scratchpad (NULL when it needs
 * none) in a buffer of its own. */
static int reorder_init(const fg_kctx *ctx, dnnl_engine_t eng, const dnnl_memory_desc_t *from,
                        const dnnl_memory_desc_t *to, dnnl_primitive_t *reorder,
                        dnnl_memory_t *scratch, void **scratch_buf) {
  int rc = 0;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t rpd = NULL;
  DNNL_TRY(dnnl_primitive_attr_create(&attr), "attributes");
  DNNL_TRY(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "scratchpad");
  DNNL_TRY(dnnl_reorder_primitive_desc_create(&rpd, from, eng, to, eng, attr), "reorder");
  DNNL_TRY(dnnl_primitive_create(reorder, rpd), "reorder primitive");
  const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(rpd, dnnl_query_scratchpad_md, 0);
  if (smd && dnnl_memory_desc_get_size(smd) > 0 &&
      owned_memory(ctx, smd, eng, scratch_buf, scratch) != 0)
    rc = -1;
done:
  if (rpd) dnnl_primitive_desc_destroy(rpd);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return rc;
}

/* A port with plain layout `plain` and the primitive's layout `chosen`.
 * lazy: the inner memory gets no buffer here (a shared weight's is bound
 * when the first run finds the store's entry). */
static int port_init(const fg_kctx *ctx, dnnl_engine_t eng, conv_port *p, int out, int lazy,
                     const dnnl_memory_desc_t *plain, const dnnl_memory_desc_t *chosen) {
  int rc = 0;
  p->out = out;
  DNNL_TRY(dnnl_memory_create(&p->user, plain, eng, DNNL_MEMORY_NONE), "memory");
  if (dnnl_memory_desc_equal(plain, chosen)) return 0;
  if (lazy)
    DNNL_TRY(dnnl_memory_create(&p->inner, chosen, eng, DNNL_MEMORY_NONE), "memory");
  else if (owned_memory(ctx, chosen, eng, &p->buf, &p->inner) != 0)
    return -1;
  return reorder_init(ctx, eng, out ? chosen : plain, out ? plain : chosen, &p->reorder,
                      &p->rscratch, &p->rscratch_buf);
done:
  return rc;
}

/* The convolution descriptor of G in `m`'s direction (fwd: the forward one,
 * also the backward passes' hint), layouts left to oneDNN (tag any). */
static dnnl_status_t conv_desc(const conv_geo *G, int fwd, int bias, conv_mode m,
                               dnnl_convolution_desc_t *d) {
  const fg_conv_params *p = G->p;
  dnnl_dims_t xd = {G->n, G->c, G->h, G->w}, yd = {G->n, G->o, G->oh, G->ow}, bd = {G->o};
  dnnl_dims_t wd = {G->o, G->cg, G->kh, G->kw}, gwd = {G->g, G->og, G->cg, G->kh, G->kw};
  dnnl_dims_t strides = {p->stride[0], p->stride[1]};
  dnnl_dims_t dil = {p->dilation[0] - 1, p->dilation[1] - 1};
  dnnl_dims_t pl = {p->pad[0], p->pad[1]}, pr = {p->pad[2], p->pad[3]};
  dnnl_memory_desc_t mx, mw, my, mb;
  dnnl_status_t r = dnnl_memory_desc_init_by_tag(&mx, 4, xd, dnnl_f32, dnnl_format_tag_any);
  if (r == dnnl_success)
    r = dnnl_memory_desc_init_by_tag(&my, 4, yd, dnnl_f32, dnnl_format_tag_any);
  if (r == dnnl_success)
    r = G->g == 1 ? dnnl_memory_desc_init_by_tag(&mw, 4, wd, dnnl_f32, dnnl_format_tag_any)
                  : dnnl_memory_desc_init_by_tag(&mw, 5, gwd, dnnl_f32, dnnl_format_tag_any);
  if (r == dnnl_success) r = dnnl_memory_desc_init_by_tag(&mb, 1, bd, dnnl_f32, dnnl_a);
  if (r != dnnl_success) return r;
  if (fwd)
    return dnnl_dilated_convolution_forward_desc_init(
        d, dnnl_forward_training, dnnl_convolution_direct, &mx, &mw,
        m == CONV_FWD && bias ? &mb : NULL, &my, strides, dil, pl, pr);
  if (m == CONV_BWD_WEIGHTS)
    return dnnl_dilated_convolution_backward_weights_desc_init(d, dnnl_convolution_direct, &mx, &mw,
                                                               NULL, &my, strides, dil, pl, pr);
  return dnnl_dilated_convolution_backward_data_desc_init(d, dnnl_convolution_direct, &mx, &mw, &my,
                                                          strides, dil, pl, pr);
}

/* oneDNN's tag for an activation buffer of layout `layout` (FGK_LAYOUT_*). */
static dnnl_format_tag_t act_tag(int layout) {
  return layout == FGK_LAYOUT_NC16 ? dnnl_nChw16c : dnnl_nchw;
}

/* The executor's layouts of x, w (grouped: goihw) and y: C order, or NC16
 * for an activation the planner keeps blocked (b's layouts). */
static dnnl_status_t plain_mds(const conv_geo *G, const conv_bufs *b, dnnl_memory_desc_t *md) {
  dnnl_dims_t xd = {G->n, G->c, G->h, G->w}, yd = {G->n, G->o, G->oh, G->ow};
  dnnl_dims_t wd = {G->o, G->cg, G->kh, G->kw}, gwd = {G->g, G->og, G->cg, G->kh, G->kw};
  dnnl_status_t r = dnnl_memory_desc_init_by_tag(&md[0], 4, xd, dnnl_f32, act_tag(b->x->layout));
  if (r == dnnl_success)
    r = G->g == 1 ? dnnl_memory_desc_init_by_tag(&md[1], 4, wd, dnnl_f32, dnnl_oihw)
                  : dnnl_memory_desc_init_by_tag(&md[1], 5, gwd, dnnl_f32, dnnl_goihw);
  if (r == dnnl_success)
    r = dnnl_memory_desc_init_by_tag(&md[2], 4, yd, dnnl_f32, act_tag(b->y->layout));
  return r;
}

static long machine_cores(void) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores < 1 ? 1 : cores > 256 ? 256 : cores;
}

/* The largest divisor of n that is at most the machine's cores: the
 * number of parts, from the shape and the machine alone. */
static int parts_for(int64_t n) {
  const long cores = machine_cores();
  for (long k = cores < n ? cores : (long)n; k > 1; k--)
    if (n % k == 0) return (int)k;
  return 1;
}

static int64_t gcd64(int64_t a, int64_t b) { return b ? gcd64(b, a % b) : a; }

/* A forward convolution of one image (batch-1 inference) cannot be cut by
 * rows, and an OpenMP team beside the executor's pool was slow: its
 * threads spin after each convolution while the pool's run the next step,
 * and on a loaded machine one such step took several times as long
 * (ShuffleNet v2's 58-, 116- and 232-channel and depthwise convolutions
 * took it from 7.6 ms on one thread to 16 on two). So its output channels
 * are cut into parts instead, or its groups for a grouped convolution
 * (each part then reads its own channels of x). A part holds whole units,
 * which keep its slices of x, w, b and y contiguous in C order and in
 * NC16 alike: 16 output channels, or the fewest whole groups whose input
 * and output channels are both multiples of 16; the last unit may be short
 * (NC16 is only used for multiples of 16 channels, kernel.h). Returns the
 * number of parts, the most up to the machine's cores (at most 8) and the
 * units (1: not cut); *unit gets the unit's output channels. Part i takes
 * units [U i / k, U (i + 1) / k) of the U. */
static int channel_parts_for(const conv_geo *G, conv_mode m, int64_t *unit) {
  if (m != CONV_FWD || G->n != 1) return 1;
  /* Groups for 16 channels of x and of y: powers of two, so the fewest
   * groups for both is the larger. */
  const int64_t gx = 16 / gcd64(16, G->cg), gy = 16 / gcd64(16, G->og);
  *unit = G->g == 1 ? 16 : (gx > gy ? gx : gy) * G->og;
  const int64_t units = (G->o + *unit - 1) / *unit;
  const long cores = machine_cores(), most = cores < 8 ? cores : 8;
  return (int)(units < most ? units : most);
}

/* Channel part i of k (units of `unit` output channels): its geometry and
 * where its slices start. */
static void channel_part(const conv_geo *G, int i, int k, int64_t unit, conv_geo *Gp,
                         conv_part *q) {
  const int64_t units = (G->o + unit - 1) / unit;
  const int64_t o0 = unit * (units * i / k), o1e = unit * (units * (i + 1) / k);
  const int64_t o1 = o1e < G->o ? o1e : G->o;
  *Gp = *G;
  Gp->o = o1 - o0;
  if (G->g == 1) {
    Gp->og = Gp->o;
  } else {
    Gp->g = Gp->o / G->og;
    Gp->c = Gp->g * G->cg;
  }
  q->n0 = 0;
  q->o0 = o0;
  q->c0 = G->g == 1 ? 0 : o0 / G->og * G->cg;
  q->elems = Gp->o * G->oh * G->ow;
}

/* The argument numbers of x, w and y in this direction. */
static void conv_args(conv_mode m, int arg[3]) {
  int fwd = m == CONV_FWD, bwd_w = m == CONV_BWD_WEIGHTS;
  arg[0] = fwd || bwd_w ? DNNL_ARG_SRC : DNNL_ARG_DIFF_SRC;
  arg[1] = bwd_w ? DNNL_ARG_DIFF_WEIGHTS : DNNL_ARG_WEIGHTS;
  arg[2] = fwd ? DNNL_ARG_DST : DNNL_ARG_DIFF_DST;
}

/* Whether x in layout `chosen` is what part 0's primitive reads (its
 * converted copy, or the executor's buffer itself). */
static int same_x_as_first(const conv_state *s, const dnnl_memory_desc_t *chosen) {
  const conv_port *x0 = &s->part[0].x;
  const dnnl_memory_desc_t *md = NULL;
  return dnnl_memory_get_memory_desc(x0->inner ? x0->inner : x0->user, &md) == dnnl_success &&
         dnnl_memory_desc_equal(md, chosen);
}

/* Part q over the rows of Gp (Gp->n of them), or with channel parts over
 * its Gp->o output channels: its primitive, x and y ports, partial weight
 * gradient, bias and scratchpad. The first batch part also makes the
 * shared weight port; each channel part makes its own. */
static int part_init(const fg_kctx *ctx, conv_state *s, conv_part *q, const conv_geo *Gp,
                     const conv_bufs *b, dnnl_primitive_attr_t attr) {
  const int bias = b->bias != NULL;
  int rc = 0;
  conv_mode m = s->mode;
  dnnl_primitive_desc_t fwd_pd = NULL, pd = NULL;
  dnnl_convolution_desc_t fd, bd;
  dnnl_memory_desc_t plain[3], mb;
  DNNL_TRY(dnnl_stream_create(&q->stream, s->engine, dnnl_stream_default_flags), "stream");
  DNNL_TRY(conv_desc(Gp, 1, bias, m, &fd), "convolution descriptor");
  DNNL_TRY(dnnl_primitive_desc_create(&fwd_pd, &fd, attr, s->engine, NULL), "forward primitive");
  if (m != CONV_FWD) {
    DNNL_TRY(conv_desc(Gp, 0, 0, m, &bd), "backward descriptor");
    DNNL_TRY(dnnl_primitive_desc_create(&pd, &bd, attr, s->engine, fwd_pd), "backward primitive");
  }
  const_dnnl_primitive_desc_t use = pd ? pd : fwd_pd;
  DNNL_TRY(dnnl_primitive_create(&q->prim, use), "primitive");
  DNNL_TRY(plain_mds(Gp, b, plain), "memory descriptors");
  int arg[3];
  conv_args(m, arg);
  const dnnl_memory_desc_t *chosen[3];
  for (int i = 0; i < 3; i++)
    if (!(chosen[i] = dnnl_primitive_desc_query_md(use, dnnl_query_exec_arg_md, arg[i]))) {
      snprintf(ctx->err, ctx->err_size, "oneDNN: no layout for argument %d", arg[i]);
      rc = -1;
      goto done;
    }
  const int fwd = m == CONV_FWD, bwd_w = m == CONV_BWD_WEIGHTS;
  q->x_shared = s->channel_parts && !s->x_sliced && q != s->part && same_x_as_first(s, chosen[0]);
  if ((!q->x_shared && port_init(ctx, s->engine, &q->x, !fwd && !bwd_w, 0, &plain[0], chosen[0])) ||
      port_init(ctx, s->engine, &q->y, fwd, 0, &plain[2], chosen[2]) != 0) {
    rc = -1;
    goto done;
  }
  const conv_port *xp = q->x_shared ? &s->part[0].x : &q->x;
  dnnl_memory_t wmem;
  if (s->channel_parts) {
    if (port_init(ctx, s->engine, &q->w, 0, s->w_share, &plain[1], chosen[1]) != 0) {
      rc = -1;
      goto done;
    }
    wmem = q->w.inner ? q->w.inner : q->w.user;
  } else if (q == s->part) {
    if (port_init(ctx, s->engine, &s->w, bwd_w, s->w_share, &plain[1], chosen[1]) != 0) {
      rc = -1;
      goto done;
    }
    s->w_bytes = dnnl_memory_desc_get_size(chosen[1]);
    wmem = s->w.inner ? s->w.inner : s->w.user;
  } else {
    /* Every part has the same shape, so the same weight layout. */
    if (bwd_w && owned_memory(ctx, chosen[1], s->engine, &q->dw_buf, &q->dw) != 0) {
      rc = -1;
      goto done;
    }
    wmem = bwd_w ? q->dw : s->w.inner ? s->w.inner : s->w.user;
  }
  q->args[q->n_args++] = (dnnl_exec_arg_t){arg[0], xp->inner ? xp->inner : xp->user};
  q->args[q->n_args++] = (dnnl_exec_arg_t){arg[1], wmem};
  q->args[q->n_args++] = (dnnl_exec_arg_t){arg[2], q->y.inner ? q->y.inner : q->y.user};
  if (fwd && bias) {
    dnnl_dims_t bd1 = {Gp->o};
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&mb, 1, bd1, dnnl_f32, dnnl_a), "bias descriptor");
    DNNL_TRY(dnnl_memory_create(&q->mb, &mb, s->engine, DNNL_MEMORY_NONE), "memory");
    q->args[q->n_args++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, q->mb};
  }
  const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(use, dnnl_query_scratchpad_md, 0);
  if (smd && dnnl_memory_desc_get_size(smd) > 0) {
    if (owned_memory(ctx, smd, s->engine, &q->scratch_buf, &q->scratch) != 0) {
      rc = -1;
      goto done;
    }
    q->args[q->n_args++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, q->scratch};
  }
done:
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (fwd_pd) dnnl_primitive_desc_destroy(fwd_pd);
  return rc;
}

/* Piece i of the weight: output channels [o0, o0 + n) in the plain and the
 * inner layouts, and the reorder between them. 0, or -1 when oneDNN does
 * not take the piece (the caller then converts the weight whole). */
static int wpiece_init(conv_state *s, conv_wpiece *k, const dnnl_memory_desc_t *plain,
                       const dnnl_memory_desc_t *inner, int64_t o0, int64_t n) {
  dnnl_dims_t dims = {n, plain->dims[1], plain->dims[2], plain->dims[3]}, off = {o0, 0, 0, 0};
  dnnl_memory_desc_t pu, pi;
  dnnl_primitive_desc_t rpd = NULL;
  dnnl_primitive_attr_t attr = NULL;
  int ok =
      dnnl_memory_desc_init_submemory(&pu, plain, dims, off) == dnnl_success &&
      dnnl_memory_desc_init_submemory(&pi, inner, dims, off) == dnnl_success &&
      dnnl_primitive_attr_create(&attr) == dnnl_success &&
      dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success &&
      dnnl_reorder_primitive_desc_create(&rpd, s->w.out ? &pi : &pu, s->engine,
                                         s->w.out ? &pu : &pi, s->engine, attr) == dnnl_success;
  const dnnl_memory_desc_t *smd =
      ok ? dnnl_primitive_desc_query_md(rpd, dnnl_query_scratchpad_md, 0) : NULL;
  ok = ok && !(smd && dnnl_memory_desc_get_size(smd) > 0) &&
       dnnl_primitive_create(&k->reorder, rpd) == dnnl_success &&
       dnnl_memory_create(&k->user, &pu, s->engine, DNNL_MEMORY_NONE) == dnnl_success &&
       dnnl_memory_create(&k->inner, &pi, s->engine, s->w.buf) == dnnl_success &&
       dnnl_stream_create(&k->stream, s->engine, dnnl_stream_default_flags) == dnnl_success;
  if (rpd) dnnl_primitive_desc_destroy(rpd);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return ok ? 0 : -1;
}

/* Cuts the weight's reorder into pieces of whole 16-channel blocks, one per
 * part, so the threads convert it side by side (a training step converts
 * every weight every run). Left whole (n_wpieces 0) for one part, grouped
 * weights, or when a piece is refused. */
static void wpieces_init(conv_state *s, const conv_geo *G) {
  if (!s->w.reorder || s->n_parts < 2 || G->g != 1) return;
  const int64_t blocks = G->o / 16;
  const int p = s->n_parts < CONV_W_PIECES ? s->n_parts : CONV_W_PIECES;
  if (blocks < p) return;
  const dnnl_memory_desc_t *plain = NULL, *inner = NULL;
  if (dnnl_memory_get_memory_desc(s->w.user, &plain) != dnnl_success ||
      dnnl_memory_get_memory_desc(s->w.inner, &inner) != dnnl_success)
    return;
  for (int i = 0; i < p; i++) {
    const int64_t o0 = 16 * (blocks * i / p);
    const int64_t o1 = i == p - 1 ? G->o : 16 * (blocks * (i + 1) / p);
    s->n_wpieces = i + 1;
    if (wpiece_init(s, &s->wpiece[i], plain, inner, o0, o1 - o0) != 0) {
      wpieces_release(s);
      return;
    }
  }
}

/* The buffers of the op the state was made for. */
static conv_bufs bufs_of(const fg_kctx *ctx, conv_mode m, conv_epi e) {
  return e == CONV_PLAIN ? conv_bufs_of(ctx, m) : conv_bufs_fused(ctx, e);
}

int fgk_conv_dnnl_prepare(const fg_kctx *ctx, conv_mode m, conv_epi e, int threads, void **state) {
  conv_bufs b = bufs_of(ctx, m, e);
  conv_geo G = conv_geo_of(&b);
  *state = NULL;
  if (b.z && b.z->layout != b.y->layout) {
    /* The epilogue reads z element for element beside y. */
    snprintf(ctx->err, ctx->err_size,
             "input 2 (z) is laid out as %d, the output as %d: they must match", b.z->layout,
             b.y->layout);
    return -1;
  }
  /* An empty x or y has nothing to convolve (conv.c's empty()). */
  if (fgk_numel(b.x) == 0 || fgk_numel(b.y) == 0) return 0;
  const int batch_parts = parts_for(G.n);
  int64_t unit = 0;
  const int chan = batch_parts == 1 ? channel_parts_for(&G, m, &unit) : 1;
  const int n_parts = chan > 1 ? chan : batch_parts;
  conv_state *s = calloc(1, sizeof *s + (size_t)n_parts * sizeof s->part[0]);
  if (!s) {
    snprintf(ctx->err, ctx->err_size, "out of memory (convolution state)");
    return -1;
  }
  s->mode = m;
  s->epi = e;
  s->act = b.act;
  s->n_parts = n_parts;
  s->channel_parts = chan > 1;
  s->x_sliced = s->channel_parts && G.g > 1;
  s->part_rows = s->channel_parts ? G.n : G.n / n_parts;
  /* A primitive's OpenMP team is sized when it is made, from the calling
   * thread's OpenMP thread count (see the top of this file); a forward
   * convolution of one image that is not cut (under 2 units) is small. */
  const int single = n_parts > 1 || m == CONV_BWD_WEIGHTS || (m == CONV_FWD && G.n == 1);
  s->threads = single || threads < 1 ? 1 : threads;
  s->w_fixed = m != CONV_BWD_WEIGHTS && (ctx->fixed_inputs >> 1 & 1u);
  s->share = ctx->share;
  s->w_share = ctx->share && m != CONV_BWD_WEIGHTS && (ctx->const_inputs >> 1 & 1u);
  s->x_row = (size_t)(G.c * G.h * G.w) * sizeof(float);
  s->y_row = (size_t)(G.o * G.oh * G.ow) * sizeof(float);
  s->w_chan = (size_t)(G.cg * G.kh * G.kw) * sizeof(float);
  s->x_chan = (size_t)(G.h * G.w) * sizeof(float);
  s->y_chan = (size_t)(G.oh * G.ow) * sizeof(float);
  omp_set_num_threads(s->threads);
  int rc = 0;
  dnnl_primitive_attr_t attr = NULL;
  conv_geo Gp = G;
  Gp.n = s->part_rows;
  DNNL_TRY(dnnl_engine_create(&s->engine, dnnl_cpu, 0), "engine");
  DNNL_TRY(dnnl_stream_create(&s->stream, s->engine, dnnl_stream_default_flags), "stream");
  DNNL_TRY(dnnl_primitive_attr_create(&attr), "attributes");
  DNNL_TRY(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "scratchpad");
  for (int i = 0; i < n_parts && rc == 0; i++) {
    conv_part *q = &s->part[i];
    if (s->channel_parts) {
      channel_part(&G, i, n_parts, unit, &Gp, q);
    } else {
      q->n0 = i * Gp.n;
      q->elems = Gp.n * G.o * G.oh * G.ow;
    }
    rc = part_init(ctx, s, q, &Gp, &b, attr);
  }
  if (rc == 0) wpieces_init(s, &G);
done:
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (rc != 0) {
    fgk_conv_release(s);
    return -1;
  }
  *state = s;
  return 0;
}

/* Converts port p between its plain buffer and its inner layout. */
static dnnl_status_t port_reorder(dnnl_stream_t stream, conv_port *p) {
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_FROM, p->out ? p->inner : p->user},
                             {DNNL_ARG_TO, p->out ? p->user : p->inner},
                             {DNNL_ARG_SCRATCHPAD, p->rscratch}};
  return dnnl_primitive_execute(p->reorder, stream, p->rscratch ? 3 : 2, args);
}

/* The fused ops' epilogue on elements [begin, end) of part q's rows. */
static void part_epilogue(const conv_state *s, const conv_part *q, int64_t begin, int64_t end) {
  fgk_conv_epilogue_f32(q->y_rows + begin, q->z_rows ? q->z_rows + begin : NULL, end - begin,
                        &s->act);
}

/* Converts port p into the store's entry e unless a plan did already (or
 * another step of this run, which holds e's lock meanwhile). */
static dnnl_status_t fill_shared(fgk_shared *e, dnnl_stream_t stream, conv_port *p) {
  const int filled = fgk_shared_lock(e);
  dnnl_status_t r = dnnl_success;
  if (!filled) r = port_reorder(stream, p);
  if (!filled && r == dnnl_success) r = dnnl_stream_wait(stream);
  fgk_shared_unlock(e, filled || r == dnnl_success);
  return r;
}

/* Runs part q: its inputs' reorders (channel parts: its weight slice's
 * when this run converts the weight; part 0's x was converted before the
 * parts started), the primitive, its output's reorder, and the fused ops'
 * epilogue when the work is cut. */
static void part_run(conv_state *s, conv_part *q) {
  omp_set_num_threads(s->threads);
  const int x_first = s->channel_parts && !s->x_sliced; /* part 0's x is converted already */
  conv_port *ports[2] = {&q->x, &q->y};
  dnnl_status_t r = dnnl_success;
  q->failed = "reordering an input";
  if (q->w_entry)
    r = fill_shared(q->w_entry, q->stream, &q->w);
  else if (s->w_convert && q->w.reorder)
    r = port_reorder(q->stream, &q->w);
  for (int i = 0; i < 2 && r == dnnl_success; i++)
    if (ports[i]->reorder && !ports[i]->out && !(i == 0 && x_first && q == s->part))
      r = port_reorder(q->stream, ports[i]);
  if (r == dnnl_success) {
    q->failed = "execute";
    r = dnnl_primitive_execute(q->prim, q->stream, q->n_args, q->args);
  }
  for (int i = 0; i < 2 && r == dnnl_success; i++)
    if (ports[i]->reorder && ports[i]->out) {
      q->failed = "reordering the output";
      r = port_reorder(q->stream, ports[i]);
    }
  if (r == dnnl_success) {
    q->failed = "stream wait";
    r = dnnl_stream_wait(q->stream);
  }
  if (r == dnnl_success && s->epi != CONV_PLAIN && s->n_parts > 1) part_epilogue(s, q, 0, q->elems);
  q->status = r;
}

static void parts_range(void *arg, int64_t begin, int64_t end) {
  conv_state *s = arg;
  for (int64_t i = begin; i < end; i++)
    part_run(s, &s->part[i]);
}

static void wpieces_range(void *arg, int64_t begin, int64_t end) {
  conv_state *s = arg;
  omp_set_num_threads(1);
  for (int64_t i = begin; i < end; i++) {
    conv_wpiece *k = &s->wpiece[i];
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, s->w.out ? k->inner : k->user},
                               {DNNL_ARG_TO, s->w.out ? k->user : k->inner}};
    k->status = dnnl_primitive_execute(k->reorder, k->stream, 2, args);
    if (k->status == dnnl_success) k->status = dnnl_stream_wait(k->stream);
  }
}

/* Converts the weight between its plain buffer and the primitives' layout:
 * in pieces over the threads where prepare cut it, else whole. */
static int w_reorder(const fg_kctx *ctx, conv_state *s, const char *what) {
  int rc = 0;
  if (!s->n_wpieces) {
    DNNL_TRY(port_reorder(s->stream, &s->w), what);
    DNNL_TRY(dnnl_stream_wait(s->stream), "stream wait");
    return 0;
  }
  fgk_parallel_for(ctx, s->n_wpieces, 1, wpieces_range, s);
  for (int i = 0; i < s->n_wpieces; i++)
    if (s->wpiece[i].status != dnnl_success) return dnnl_fail(ctx, what, s->wpiece[i].status);
done:
  return rc;
}

/* The store's entry for port p's converted copy of the constant at src
 * (a channel part's slice, `offset` bytes in, or the whole weight); p's
 * inner memory points into it. */
static fgk_shared *share_entry(const fg_kctx *ctx, conv_state *s, conv_port *p, int64_t offset,
                               const void *src) {
  const dnnl_memory_desc_t *md = NULL;
  if (dnnl_memory_get_memory_desc(p->inner, &md) != dnnl_success) {
    snprintf(ctx->err, ctx->err_size, "oneDNN: no layout for the weight");
    return NULL;
  }
  const size_t bytes = dnnl_memory_desc_get_size(md);
  fgk_shared *e = fgk_share_get(s->share, src, offset, md, sizeof *md, same_md, bytes);
  if (!e) {
    snprintf(ctx->err, ctx->err_size, "out of memory (%zu bytes of a converted weight)", bytes);
    if (ctx->code) *ctx->code = FG_RESOURCE_EXHAUSTED;
    return NULL;
  }
  if (dnnl_memory_set_data_handle(p->inner, fgk_shared_buf(e)) != dnnl_success) {
    fgk_share_put(s->share, e);
    snprintf(ctx->err, ctx->err_size, "oneDNN: binding a converted weight failed");
    return NULL;
  }
  return e;
}

/* Points the weight's converted copies at the store's entries for the
 * constant at src (once; again only if the constant moved). */
static int share_bind(const fg_kctx *ctx, conv_state *s, const void *src) {
  if (s->w_src == src) return 0;
  share_unbind(s);
  if (s->channel_parts) {
    for (int i = 0; i < s->n_parts; i++) {
      conv_part *q = &s->part[i];
      if (q->w.inner && !(q->w_entry = share_entry(ctx, s, &q->w, q->o0 * (int64_t)s->w_chan, src)))
        return -1;
    }
  } else if (s->w.inner) {
    if (!(s->w_entry = share_entry(ctx, s, &s->w, 0, src))) return -1;
    for (int i = 0; i < s->n_wpieces; i++)
      if (dnnl_memory_set_data_handle(s->wpiece[i].inner, fgk_shared_buf(s->w_entry)) !=
          dnnl_success) {
        snprintf(ctx->err, ctx->err_size, "oneDNN: binding a converted weight failed");
        return -1;
      }
  }
  s->w_src = src;
  return 0;
}

/* Converts the whole weight into its shared entry unless a plan did. */
static int fill_whole(const fg_kctx *ctx, conv_state *s) {
  const int filled = fgk_shared_lock(s->w_entry);
  const int rc = filled ? 0 : w_reorder(ctx, s, "reordering the weight");
  fgk_shared_unlock(s->w_entry, filled || rc == 0);
  return rc;
}

/* Adds the later parts' partial weight gradients into the first's, in part
 * order for every element (floats [begin, end)). */
static void sum_range(void *arg, int64_t begin, int64_t end) {
  conv_state *s = arg;
  float *acc = s->w.inner ? s->w.buf : NULL;
  if (!acc) dnnl_memory_get_data_handle(s->w.user, (void **)&acc);
  for (int i = 1; i < s->n_parts; i++) {
    const float *d = s->part[i].dw_buf;
    for (int64_t e = begin; e < end; e++)
      acc[e] += d[e];
  }
}

/* Binds every memory to this call's buffers (before any part runs: a
 * memory's handle is not set while another thread may read it). */
static int bind(const fg_kctx *ctx, conv_state *s, const conv_bufs *b) {
  int rc = 0;
  if (s->w.user) DNNL_TRY(dnnl_memory_set_data_handle(s->w.user, b->w->data), "binding a buffer");
  for (int i = 0; i < s->n_wpieces; i++)
    DNNL_TRY(dnnl_memory_set_data_handle(s->wpiece[i].user, b->w->data), "binding a buffer");
  for (int i = 0; i < s->n_parts; i++) {
    conv_part *q = &s->part[i];
    /* A channel part's slices start o0 channels in (one image: whole
     * 16-channel blocks, so the same offset in C order and in NC16). */
    const size_t yo = (size_t)q->n0 * s->y_row + (size_t)q->o0 * s->y_chan;
    char *x = (char *)b->x->data + (size_t)q->n0 * s->x_row + (size_t)q->c0 * s->x_chan;
    char *y = (char *)b->y->data + yo;
    if (q->x.user) DNNL_TRY(dnnl_memory_set_data_handle(q->x.user, x), "binding a buffer");
    DNNL_TRY(dnnl_memory_set_data_handle(q->y.user, y), "binding a buffer");
    if (q->w.user)
      DNNL_TRY(dnnl_memory_set_data_handle(q->w.user, (char *)b->w->data + q->o0 * s->w_chan),
               "binding a buffer");
    q->y_rows = (float *)y;
    q->z_rows = b->z ? (const float *)((const char *)b->z->data + yo) : NULL;
    if (q->mb)
      DNNL_TRY(dnnl_memory_set_data_handle(q->mb, (float *)b->bias->data + q->o0),
               "binding the bias");
  }
done:
  return rc;
}

/* The epilogue of a batch that is not cut, elements [begin, end) of y. */
static void epilogue_range(void *arg, int64_t begin, int64_t end) {
  const conv_state *s = arg;
  part_epilogue(s, &s->part[0], begin, end);
}

static int conv_exec(const fg_kctx *ctx, conv_state *s) {
  conv_bufs b = bufs_of(ctx, s->mode, s->epi);
  int rc = bind(ctx, s, &b);
  if (rc != 0) return rc;
  omp_set_num_threads(s->threads);
  /* A variable's weight in the primitives' layout is still current when no
   * run may have written a variable since it was reordered (inference
   * reuses it; a training step's update makes the next run reorder). */
  const int w_kept = s->w_share || (s->w_fixed && s->w_valid && s->w_version == ctx->var_version &&
                                    s->w_data == b.w->data);
  s->w_valid = 0;
  s->w_convert = !w_kept;
  if (s->w_share && share_bind(ctx, s, b.w->data) != 0) return -1;
  if (s->channel_parts && !s->x_sliced && s->part[0].x.reorder) {
    /* Every channel part reads all of x: converted once, first. */
    DNNL_TRY(port_reorder(s->stream, &s->part[0].x), "reordering an input");
    DNNL_TRY(dnnl_stream_wait(s->stream), "stream wait");
  }
  if (s->w.reorder && !s->w.out && s->w_convert && w_reorder(ctx, s, "reordering the weight") != 0)
    return -1;
  if (s->w_entry && fill_whole(ctx, s) != 0) return -1;
  fgk_parallel_for(ctx, s->n_parts, 1, parts_range, s);
  for (int i = 0; i < s->n_parts; i++)
    if (s->part[i].status != dnnl_success)
      return dnnl_fail(ctx, s->part[i].failed, s->part[i].status);
  if (s->mode == CONV_BWD_WEIGHTS) {
    if (s->n_parts > 1)
      fgk_parallel_for(ctx, (int64_t)(s->w_bytes / sizeof(float)), FGK_GRAIN_CHEAP, sum_range, s);
    if (s->w.reorder && w_reorder(ctx, s, "reordering the output") != 0) return -1;
  }
  s->w_valid = s->w_fixed, s->w_version = ctx->var_version, s->w_data = b.w->data;
  if (s->epi != CONV_PLAIN && s->n_parts == 1)
    fgk_parallel_for(ctx, fgk_numel(b.y), FGK_GRAIN_CHEAP, epilogue_range, s);
  if (s->mode == CONV_TRANSPOSE && b.bias) {
    conv_geo G = conv_geo_of(&b);
    fgk_conv_add_bias_f32(&G, b.bias->data, b.x->data);
  }
done:
  return rc;
}

int fgk_conv_dnnl(const fg_kctx *ctx, conv_mode m, conv_epi e) {
  if (ctx->state) return conv_exec(ctx, ctx->state);
  /* No plan-time state (constant folding, a direct call): make it for
   * this call alone. */
  void *s = NULL;
  if (fgk_conv_dnnl_prepare(ctx, m, e, 1, &s) != 0) return -1;
  int rc = conv_exec(ctx, s);
  fgk_conv_release(s);
  return rc;
}
#endif /* FG_HAVE_DNNL */
