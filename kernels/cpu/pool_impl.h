/* The per-plane pooling loops for one element type, included by
 * kernels/cpu/pool.c once per type with PT (float or double) and PS(name)
 * (name##_f32 or name##_f64) defined. Each function handles one [H, W]
 * plane; the caller splits the N * C planes over threads, so results do
 * not depend on the thread count. No include guard on purpose. */

/* One tap into a running maximum: m = v when v is larger or NaN. */
#define POOL_TAKE(m, v) ((v) > (m) || (v) != (v) ? (v) : (m))
/* The same split in two for the vector loops: `v > m ? v : m` is one
 * MAXPS (ties keep m, the earlier tap; NaN v leaves m), and NaN is
 * collected apart in `nan`, giving NaN once stored (a stored NaN m then
 * stays, as no v is larger). */
#define POOL_TAKE_V(m, nan, x)                                                                     \
  do {                                                                                             \
    const PT v_ = (x);                                                                             \
    m = v_ > m ? v_ : m;                                                                           \
    nan |= v_ != v_;                                                                               \
  } while (0)

/* Taps 0 .. KW-1 at stride S of output k from row r into (m, nan); both
 * constants, so the compiler unrolls the taps and vectorises over k. */
#define POOL_TAKE_ROW(m, nan, r, S, KW)                                                            \
  for (int64_t j_ = 0; j_ < (KW); j_++)                                                            \
  POOL_TAKE_V(m, nan, (r)[(S)*k + j_])
/* Outputs k of [0, n) from xs into ys, KW taps at stride S (dilation 1). */
#define POOL_ROW_FIXED(S, KW)                                                                      \
  for (int64_t k = 0; k < n; k++) {                                                                \
    PT m = ys[k];                                                                                  \
    int nan = 0;                                                                                   \
    POOL_TAKE_ROW(m, nan, xs, S, KW);                                                              \
    ys[k] = nan ? (PT)NAN : m;                                                                     \
  }

/* The taps of n outputs from xs (output k's tap 0 at xs[k s]) into ys,
 * all kw of an output in one pass, in tap order, so the running maximum
 * stays in a register. Stride 1 and 2 with 2 or 3 taps (the common pools)
 * get fixed-count loops the compiler vectorises. */
FGK_INLINE void PS(max_taps)(const PT *restrict xs, PT *restrict ys, int64_t n, int64_t s,
                             int64_t kw, int64_t dw) {
  if (dw == 1 && s == 2 && kw == 3) {
    POOL_ROW_FIXED(2, 3)
  } else if (dw == 1 && s == 2 && kw == 2) {
    POOL_ROW_FIXED(2, 2)
  } else if (dw == 1 && s == 1 && kw == 3) {
    POOL_ROW_FIXED(1, 3)
  } else {
    for (int64_t k = 0; k < n; k++) {
      PT m = ys[k];
      for (int64_t j = 0; j < kw; j++)
        m = POOL_TAKE(m, xs[k * s + j * dw]);
      ys[k] = m;
    }
  }
}

/* Taps j of one input row xr into output row yr, for outputs [o0, o1)
 * only (those where every tap of the row lies inside it). */
static void PS(max_row_inner)(const fgk_pool_geom *g, const PT *restrict xr, PT *restrict yr,
                              int64_t o0, int64_t o1) {
  /* tap 0 of output o0, inside the row */
  PS(max_taps)(xr + (o0 * g->sw - g->pl), yr + o0, o1 - o0, g->sw, g->kw, g->dw);
}

/* max_row_inner for three consecutive rows of a 3x3, stride-2 window at
 * once (x0: the first row); y holds -inf before. */
static void PS(max_3x3s2_inner)(const fgk_pool_geom *g, const PT *x0, PT *restrict yr, int64_t o0,
                                int64_t o1) {
  const int64_t n = o1 - o0, W = g->W;
  const PT *restrict a = x0 + (o0 * 2 - g->pl);
  const PT *restrict b = a + W;
  const PT *restrict c = b + W;
  PT *restrict ys = yr + o0;
  for (int64_t k = 0; k < n; k++) {
    PT m = ys[k];
    int nan = 0;
    POOL_TAKE_ROW(m, nan, a, 2, 3);
    POOL_TAKE_ROW(m, nan, b, 2, 3);
    POOL_TAKE_ROW(m, nan, c, 2, 3);
    ys[k] = nan ? (PT)NAN : m;
  }
}

/* y[o] = the window maximum, taps in window order (row by row); a tap
 * replaces the maximum when larger or NaN, so NaN propagates and, among
 * equal values, the first tap's value stays (torch's CPU rule). Input rows
 * are looped outside the outputs so the inner loops run along an output
 * row. Outputs whose window is cut by the left or right edge take their
 * taps one pass per tap, still in tap order. */
/* The 2 x 2, stride-2 window without padding (LeNet's, VGG's), every
 * window inside the plane: the taps of an output in window order, by
 * POOL_TAKE_V's rule, with no per-row set-up; small planes spent most of
 * their time in the general loops' range arithmetic. */
static void PS(max_2x2s2_plane)(const fgk_pool_geom *g, const PT *x, PT *restrict y) {
  const int64_t W = g->W, OW = g->OW;
  for (int64_t oh = 0; oh < g->OH; oh++) {
    const PT *restrict a = x + 2 * oh * W;
    const PT *restrict b = a + W;
    PT *restrict yr = y + oh * OW;
    for (int64_t k = 0; k < OW; k++) {
      PT m = (PT)-INFINITY;
      int nan = 0;
      POOL_TAKE_V(m, nan, a[2 * k]);
      POOL_TAKE_V(m, nan, a[2 * k + 1]);
      POOL_TAKE_V(m, nan, b[2 * k]);
      POOL_TAKE_V(m, nan, b[2 * k + 1]);
      yr[k] = nan ? (PT)NAN : m;
    }
  }
}

/* One output row of a small plane (max_fwd_plane's condition for it): per
 * window row inside the plane, the input row copied between -inf pads
 * wide enough for every window, then every output's taps of that row in
 * one loop with no edge cases. A -inf tap never replaces the running
 * maximum (-inf at the start) nor sets the NaN flag, so the results are
 * those of skipping the taps outside, bit for bit; GoogLeNet's 3x3 pools
 * on 14x14 and 7x7 planes spent most of their time in the edge loops. */
FGK_CLONES static void PS(max_small_row)(const fgk_pool_geom *g, const PT *x, PT *restrict yr,
                                         int64_t oh) {
  PT buf[POOL_SMALL_BUF];
  const int64_t W = g->W, sw = g->sw, dw = g->dw, kw = g->kw, OW = g->OW;
  const int64_t span = (OW - 1) * sw + (kw - 1) * dw + 1;
  for (int64_t k = 0; k < OW; k++)
    yr[k] = (PT)-INFINITY;
  for (int64_t i = 0; i < g->kh; i++) {
    const int64_t ih = oh * g->sh - g->pt + i * g->dh;
    if (ih < 0 || ih >= g->H) continue;
    for (int64_t c = 0; c < span; c++) {
      const int64_t iw = c - g->pl;
      buf[c] = iw >= 0 && iw < W ? x[ih * W + iw] : (PT)-INFINITY;
    }
    PS(max_taps)(buf, yr, OW, sw, kw, dw);
  }
}

static void PS(max_fwd_plane)(const fgk_pool_geom *g, const PT *x, PT *y) {
  if (g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && g->dh == 1 && g->dw == 1 &&
      g->pt == 0 && g->pl == 0 && 2 * g->OH <= g->H && 2 * g->OW <= g->W) {
    PS(max_2x2s2_plane)(g, x, y);
    return;
  }
  if (g->W <= POOL_SMALL_W && (g->OW - 1) * g->sw + (g->kw - 1) * g->dw + 1 <= POOL_SMALL_BUF) {
    for (int64_t oh = 0; oh < g->OH; oh++)
      PS(max_small_row)(g, x, y + oh * g->OW, oh);
    return;
  }
  /* The outputs where every tap of a row is inside it: [lo, hi). Each
   * tap's range is the same for every row: kept for the edge loops when
   * the window is narrow (divisions cost more than a small plane's taps). */
  int64_t lo = 0, hi = g->OW, r0[POOL_KEEP_TAPS], r1[POOL_KEEP_TAPS];
  for (int64_t j = 0; j < g->kw; j++) {
    int64_t o0, o1;
    fgk_pool_tap_range(j * g->dw - g->pl, g->sw, g->W, g->OW, &o0, &o1);
    if (j < POOL_KEEP_TAPS) r0[j] = o0, r1[j] = o1;
    if (o0 > lo) lo = o0;
    if (o1 < hi) hi = o1;
  }
  if (hi < lo) hi = lo;
  for (int64_t oh = 0; oh < g->OH; oh++) {
    PT *yr = y + oh * g->OW;
    for (int64_t ow = 0; ow < g->OW; ow++)
      yr[ow] = (PT)-INFINITY;
    const int64_t h0 = oh * g->sh - g->pt;
    /* ResNet's 3x3/s2 with all three rows inside: the nine taps of an
     * output in one pass, row by row, so y is written once. */
    const int fused = g->kh == 3 && g->kw == 3 && g->dh == 1 && g->dw == 1 && g->sw == 2 &&
                      h0 >= 0 && h0 + 2 < g->H && lo < hi;
    if (fused) PS(max_3x3s2_inner)(g, x + h0 * g->W, yr, lo, hi);
    for (int64_t i = 0; i < g->kh; i++) {
      const int64_t ih = h0 + i * g->dh;
      if (ih < 0 || ih >= g->H) continue;
      const PT *xr = x + ih * g->W;
      if (lo < hi && !fused) PS(max_row_inner)(g, xr, yr, lo, hi);
      /* the edge outputs, outside [lo, hi), tap by tap */
      for (int64_t j = 0; j < g->kw; j++) {
        const int64_t off = j * g->dw - g->pl;
        int64_t o0, o1;
        if (j < POOL_KEEP_TAPS)
          o0 = r0[j], o1 = r1[j];
        else
          fgk_pool_tap_range(off, g->sw, g->W, g->OW, &o0, &o1);
        /* Only the edge outputs, outside [lo, hi), are left. */
        if (lo < hi && o0 >= lo && o1 <= hi) continue;
        for (int64_t ow = o0; ow < o1; ow++) {
          if (ow == lo && lo < hi) ow = hi;
          if (ow >= o1) break;
          const PT v = xr[ow * g->sw + off];
          yr[ow] = POOL_TAKE(yr[ow], v);
        }
      }
    }
  }
}
#undef POOL_TAKE
#undef POOL_TAKE_V

/* The flat plane index of output (oh, ow)'s maximum by the forward's rule,
 * or -1 when the window holds no input element. The taps inside the
 * plane are found first, so the scan has no bounds tests, and the choice
 * is a select rather than a branch (on real data the comparison is close
 * to a coin toss, and a mispredicted branch per tap costs more than the
 * whole tap). */
static int64_t PS(max_argmax)(const fgk_pool_geom *g, const PT *x, int64_t oh, int64_t ow) {
  const int64_t h0 = oh * g->sh - g->pt, w0 = ow * g->sw - g->pl;
  int64_t i0 = 0, i1 = g->kh, j0 = 0, j1 = g->kw;
  while (i0 < i1 && h0 + i0 * g->dh < 0)
    i0++;
  while (i1 > i0 && h0 + (i1 - 1) * g->dh >= g->H)
    i1--;
  while (j0 < j1 && w0 + j0 * g->dw < 0)
    j0++;
  while (j1 > j0 && w0 + (j1 - 1) * g->dw >= g->W)
    j1--;
  if (i0 >= i1 || j0 >= j1) return -1;
  /* The first tap seeds the index even at -inf, as torch's does. */
  int64_t best = (h0 + i0 * g->dh) * g->W + w0 + j0 * g->dw;
  PT m = x[best];
  /* Once a NaN has taken the index only a later NaN may (torch compares
   * against the NaN it holds); m itself stays a number (MAXSS), so the
   * NaN state is the integer `seen`. The index moves by masks. */
  int seen = m != m;
  for (int64_t i = i0; i < i1; i++) {
    const int64_t row = (h0 + i * g->dh) * g->W + w0;
    for (int64_t j = j0; j < j1; j++) {
      const int64_t idx = row + j * g->dw;
      const PT v = x[idx];
      const int nn = v != v;
      const int take = ((v > m) & !seen) | nn;
      const int64_t mask = -(int64_t)take;
      best ^= (best ^ idx) & mask;
      m = v > m ? v : m;
      seen |= nn;
    }
  }
  return best;
}

/* dx[argmax] += dy for the outputs [o0, o1) of output row oh, whose
 * windows lie inside the plane: max_argmax's scan and rule without its
 * edge trimming, for KH x KW taps at dilations DH, DW. The callers pass
 * constants for the common windows, so the taps unroll (those that
 * max_bwd_codes below takes go there). */
static inline void PS(max_bwd_inside)(const fgk_pool_geom *g, const PT *dy, const PT *x, PT *dx,
                                      int64_t oh, int64_t o0, int64_t o1, int64_t KH, int64_t KW,
                                      int64_t DH, int64_t DW) {
  const int64_t W = g->W, h0 = oh * g->sh - g->pt;
  for (int64_t ow = o0; ow < o1; ow++) {
    const int64_t w0 = ow * g->sw - g->pl;
    int64_t best = h0 * W + w0;
    PT m = x[best];
    int seen = m != m;
    for (int64_t i = 0; i < KH; i++)
      for (int64_t j = 0; j < KW; j++) {
        const int64_t idx = (h0 + i * DH) * W + w0 + j * DW;
        const PT v = x[idx];
        const int nn = v != v;
        const int take = ((v > m) & !seen) | nn;
        best ^= (best ^ idx) & -(int64_t)take;
        m = v > m ? v : m;
        seen |= nn;
      }
    dx[best] += dy[oh * g->OW + ow];
  }
}

/* Outputs max_bwd_codes finds the taps of per pass (a stack buffer). */
#define POOL_CODES 256

/* The argmax rule of max_argmax in a form the compiler vectorises (its
 * integer `seen` mask costs branches there under the default trapping
 * math): m turns NaN once a NaN is taken, so a later number is never
 * larger and only a later NaN takes the index, as `seen` decides there.
 * POOL_ARG_TAKE is 1 when tap v takes the index, and moves m. */
#define POOL_ARG_TAKE(t, m, v)                                                                     \
  do {                                                                                             \
    const PT v_ = (v);                                                                             \
    t = (v_ > m) | (v_ != v_);                                                                     \
    m = t ? v_ : m;                                                                                \
  } while (0)

/* For n outputs k whose windows (KH x KW taps at stride S, dilation 1)
 * start at r + S * k, rows W apart and all inside the plane: the window
 * position (i * KW + j) of each one's argmax into code[k], the first tap
 * seeding it. The constants unroll the taps and let the compiler
 * vectorise over k. The position is a PC (pool.c): as wide as PT, so the
 * selects stay one vector wide, and a double for f64, which has no vector
 * conversion to a 64-bit integer before AVX-512 (the loop stayed scalar). */
#define POOL_BWD_CODES(KH, KW, S)                                                                  \
  for (int64_t k = 0; k < n; k++) {                                                                \
    PT m = r[(S)*k];                                                                               \
    PC best = 0;                                                                                   \
    int t;                                                                                         \
    for (int64_t i = 0; i < (KH); i++)                                                             \
      for (int64_t j = 0; j < (KW); j++) {                                                         \
        POOL_ARG_TAKE(t, m, r[i * W + (S)*k + j]);                                                 \
        best = t ? (PC)(i * (KW) + j) : best;                                                      \
      }                                                                                            \
    code[k] = best;                                                                                \
  }

/* 1 for the windows max_bwd_codes has fixed-count loops for: 2 x 2 or
 * 3 x 3, dilation 1, stride 1 or 2 along the row. */
static inline int PS(codes_window)(const fgk_pool_geom *g) {
  return g->dh == 1 && g->dw == 1 && g->kh == g->kw && (g->kh == 2 || g->kh == 3) &&
         (g->sw == 1 || g->sw == 2);
}

/* max_bwd_inside for codes_window's windows: the argmax of up to
 * POOL_CODES outputs at a time into codes (vectorised), then
 * dx[argmax] += dy in output order, as max_bwd_inside adds them, so a dx
 * element that overlapping windows share sums in the same order. */
static void PS(max_bwd_codes)(const fgk_pool_geom *g, const PT *dy, const PT *x, PT *dx, int64_t oh,
                              int64_t o0, int64_t o1) {
  const int64_t W = g->W, kh = g->kh, kw = g->kw, s = g->sw;
  const int64_t h0 = oh * g->sh - g->pt;
  int64_t off[9]; /* window position -> plane offset from the window's start */
  for (int64_t i = 0; i < kh; i++)
    for (int64_t j = 0; j < kw; j++)
      off[i * kw + j] = i * W + j;
  PC code[POOL_CODES];
  const PT *gy = dy + oh * g->OW;
  for (int64_t c0 = o0; c0 < o1; c0 += POOL_CODES) {
    const int64_t n = o1 - c0 < POOL_CODES ? o1 - c0 : POOL_CODES;
    const PT *restrict r = x + h0 * W + c0 * s - g->pl;
    if (kh == 2 && s == 2)
      POOL_BWD_CODES(2, 2, 2)
    else if (kh == 2)
      POOL_BWD_CODES(2, 2, 1)
    else if (s == 2)
      POOL_BWD_CODES(3, 3, 2)
    else
      POOL_BWD_CODES(3, 3, 1)
    PT *d = dx + h0 * W + c0 * s - g->pl;
    for (int64_t k = 0; k < n; k++)
      d[k * s + off[(int)code[k]]] += gy[c0 + k];
  }
}
#undef POOL_BWD_CODES

/* 1 for the 2 x 2, stride-2 window without padding whose windows all lie
 * inside the plane (max_fwd_plane's condition), which the gradients' 2x2
 * loops take; avg: avg_pool2d, whose windows have no dilation. */
static inline int PS(grad_2x2s2)(const fgk_pool_geom *g, int avg) {
  return g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 &&
         (avg || (g->dh == 1 && g->dw == 1)) && g->pt == 0 && g->pl == 0 && 2 * g->OH <= g->H &&
         2 * g->OW <= g->W;
}

/* dx columns [c0, W) of two rows W apart, past the last 2x2 window: 0.
 * One column (an odd width) is two stores; as a loop the compiler called
 * memset twice a row, about a fifth of the time on 25 x 23 planes. */
static inline void PS(zero_cols)(PT *d, int64_t W, int64_t c0) {
  if (c0 + 1 == W) {
    d[c0] = d[W + c0] = 0;
    return;
  }
  for (int64_t c = c0; c < W; c++)
    d[c] = d[W + c] = 0;
}

/* One output row of max_bwd_2x2s2_plane: n windows over input rows a
 * and b into dx rows da and db. A function of its own so the pointers are
 * restrict parameters, which the compiler honours (as restrict locals it
 * still tested them for overlap on every row). */
static inline void PS(max_bwd_2x2s2_row)(const PT *restrict a, const PT *restrict b,
                                         const PT *restrict gy, PT *restrict da, PT *restrict db,
                                         int64_t n) {
  for (int64_t k = 0; k < n; k++) {
    /* o0..o2: dx at the first taps in window order; a tap that takes the
     * index gets v and clears those before it (selects in PT, which the
     * compiler vectorises where an index compare did not) */
    const PT v = (PT)0 + gy[k], z = 0;
    PT m = a[2 * k], o0 = v, o1, o2;
    int t;
    POOL_ARG_TAKE(t, m, a[2 * k + 1]);
    o0 = t ? z : o0;
    o1 = t ? v : z;
    POOL_ARG_TAKE(t, m, b[2 * k]);
    o0 = t ? z : o0;
    o1 = t ? z : o1;
    o2 = t ? v : z;
    POOL_ARG_TAKE(t, m, b[2 * k + 1]);
    da[2 * k] = t ? z : o0;
    da[2 * k + 1] = t ? z : o1;
    db[2 * k] = t ? z : o2;
    db[2 * k + 1] = t ? v : z;
  }
}

/* The 2 x 2, stride-2 window without padding, every window inside the
 * plane (max_fwd_plane's condition): windows do not overlap, so each dx
 * element is written once, 0 + dy at the window's argmax (as max_bwd_plane
 * computes it: 0 + -0.0 is +0.0) and 0 elsewhere, with no zeroing pass and
 * no scatter; the argmax by max_argmax's rule over the taps in window
 * order. Rows and columns past the last window get 0. */
static void PS(max_bwd_2x2s2_plane)(const fgk_pool_geom *g, const PT *dy, const PT *x, PT *dx) {
  const int64_t W = g->W, OW = g->OW;
  for (int64_t oh = 0; oh < g->OH; oh++) {
    PT *da = dx + 2 * oh * W;
    const PT *a = x + 2 * oh * W;
    PS(max_bwd_2x2s2_row)(a, a + W, dy + oh * OW, da, da + W, OW);
    PS(zero_cols)(da, W, 2 * OW);
  }
  for (int64_t e = 2 * g->OH * W; e < g->H * W; e++)
    dx[e] = 0;
}
#undef POOL_ARG_TAKE

/* The outputs [*lo, *hi) along one axis whose window (k taps at dilation
 * d, stride s, pad p) lies inside [0, n). */
static inline void PS(inside_range)(int64_t n, int64_t k, int64_t s, int64_t d, int64_t p,
                                    int64_t on, int64_t *lo, int64_t *hi) {
  const int64_t last = n - 1 - (k - 1) * d + p; /* largest o * s allowed */
  *lo = (p + s - 1) / s;
  *hi = last < 0 ? 0 : last / s + 1;
  if (*hi > on) *hi = on;
  if (*lo > *hi) *lo = *hi;
}

/* dx = 0, then dy[o] added at each window's argmax, outputs in order (a
 * dx element that several windows share sums them in that order). */
static void PS(max_bwd_plane)(const fgk_pool_geom *g, const PT *dy, const PT *x, PT *dx) {
  if (PS(grad_2x2s2)(g, 0)) {
    PS(max_bwd_2x2s2_plane)(g, dy, x, dx);
    return;
  }
  for (int64_t e = 0; e < g->H * g->W; e++)
    dx[e] = 0;
  int64_t hlo, hhi, wlo, whi;
  PS(inside_range)(g->H, g->kh, g->sh, g->dh, g->pt, g->OH, &hlo, &hhi);
  PS(inside_range)(g->W, g->kw, g->sw, g->dw, g->pl, g->OW, &wlo, &whi);
  const int d1 = g->dh == 1 && g->dw == 1, codes = PS(codes_window)(g);
  for (int64_t oh = 0; oh < g->OH; oh++) {
    const int rows_in = oh >= hlo && oh < hhi;
    const int64_t a0 = rows_in ? wlo : g->OW, a1 = rows_in ? whi : g->OW;
    for (int64_t ow = 0; ow < g->OW; ow++) {
      if (ow == a0 && a0 < a1) {
        if (codes)
          PS(max_bwd_codes)(g, dy, x, dx, oh, a0, a1);
        else if (d1 && g->kh == 2 && g->kw == 2)
          PS(max_bwd_inside)(g, dy, x, dx, oh, a0, a1, 2, 2, 1, 1);
        else if (d1 && g->kh == 3 && g->kw == 3)
          PS(max_bwd_inside)(g, dy, x, dx, oh, a0, a1, 3, 3, 1, 1);
        else
          PS(max_bwd_inside)(g, dy, x, dx, oh, a0, a1, g->kh, g->kw, g->dh, g->dw);
        ow = a1 - 1;
        continue;
      }
      const int64_t a = PS(max_argmax)(g, x, oh, ow);
      if (a >= 0) dx[a] += dy[oh * g->OW + ow];
    }
  }
}

/* The outputs [o0, o1) of output row oh whose window columns lie inside
 * the plane and whose divisor is kh kw: windows inside the plane, or (with
 * count_include_pad) inside the padded plane, cut by its top or bottom
 * edge. The taps in window order, row by row (rows outside the plane
 * skipped, as avg_fwd_plane's loop skips them), into double sums, a block
 * of outputs at a time, so each output gets that loop's additions in its
 * order (the same bits) and the loops run along the row (vectorised; an
 * imported Inception-v3 spent 19% of its time in the per-output loop). */
FGK_CLONES static void PS(avg_row_inner)(const fgk_pool_geom *g, const PT *x, PT *restrict yr,
                                         int64_t oh, int64_t o0, int64_t o1) {
  double acc[POOL_AVG_BLOCK];
  const int64_t sw = g->sw, W = g->W, r0 = oh * g->sh - g->pt;
  const int64_t i0 = r0 < 0 ? -r0 : 0, i1 = r0 + g->kh > g->H ? g->H - r0 : g->kh;
  const double div = (double)(g->kh * g->kw);
  if (g->kh == 3 && g->kw == 3 && sw == 1 && i0 == 0 && i1 == 3) {
    /* Inception's 3x3, stride 1: the nine taps of an output in registers */
    const PT *restrict a = x + r0 * W + o0 - g->pl, *restrict b = a + W, *restrict c = b + W;
    for (int64_t k = 0; k < o1 - o0; k++) {
      double t = 0;
      t += a[k], t += a[k + 1], t += a[k + 2];
      t += b[k], t += b[k + 1], t += b[k + 2];
      t += c[k], t += c[k + 1], t += c[k + 2];
      yr[o0 + k] = (PT)(t / div);
    }
    return;
  }
  for (int64_t c0 = o0; c0 < o1; c0 += POOL_AVG_BLOCK) {
    const int64_t n = o1 - c0 < POOL_AVG_BLOCK ? o1 - c0 : POOL_AVG_BLOCK;
    for (int64_t k = 0; k < n; k++)
      acc[k] = 0;
    for (int64_t i = i0; i < i1; i++)
      for (int64_t j = 0; j < g->kw; j++) {
        const PT *restrict xs = x + (r0 + i) * W + c0 * sw - g->pl + j;
        if (sw == 1) /* the common case, whole vectors */
          for (int64_t k = 0; k < n; k++)
            acc[k] += xs[k];
        else
          for (int64_t k = 0; k < n; k++)
            acc[k] += xs[k * sw];
      }
    for (int64_t k = 0; k < n; k++)
      yr[c0 + k] = (PT)(acc[k] / div);
  }
}

/* Sums accumulate in double, then divide once. A zero divisor (no window
 * element in the input, which the attribute rules exclude) gives 0. Rows
 * whose windows lie inside the plane take avg_row_inner for their inside
 * outputs; the rest, output by output, the loop below. */
static void PS(avg_fwd_plane)(const fgk_pool_geom *g, const PT *x, PT *y) {
  int64_t lo, hi, unused;
  fgk_pool_tap_range(-g->pl, g->sw, g->W, g->OW, &lo, &unused);
  fgk_pool_tap_range(g->kw - 1 - g->pl, g->sw, g->W, g->OW, &unused, &hi);
  for (int64_t oh = 0; oh < g->OH; oh++) {
    const int64_t r0 = oh * g->sh - g->pt;
    const int inner =
        lo < hi && ((r0 >= 0 && r0 + g->kh <= g->H) ||
                    (g->count_include_pad && r0 >= -g->pt && r0 + g->kh <= g->H + g->pb));
    if (inner) PS(avg_row_inner)(g, x, y + oh * g->OW, oh, lo, hi);
    for (int64_t ow = 0; ow < g->OW; ow++) {
      if (inner && ow == lo) ow = hi;
      if (ow >= g->OW) break;
      int64_t h0, h1, w0, w1;
      const int64_t div = fgk_avg_divisor(g, oh, ow, &h0, &h1, &w0, &w1);
      double s = 0;
      for (int64_t ih = h0; ih < h1; ih++)
        for (int64_t iw = w0; iw < w1; iw++)
          s += x[ih * g->W + iw];
      y[oh * g->OW + ow] = div > 0 ? (PT)(s / (double)div) : (PT)0;
    }
  }
}

/* avg_bwd_plane for the 2 x 2, stride-2 window without padding, every
 * window inside the plane (max_fwd_plane's condition): the divisor is 4
 * with or without count_include_pad, and windows do not overlap, so each
 * dx element is written once with what the general loop leaves there,
 * 0 + (PT)(dy / 4.0); rows and columns past the last window get 0 (the
 * row loop apart, as max_bwd_2x2s2_row, for its restrict pointers). */
static inline void PS(avg_bwd_2x2s2_row)(const PT *restrict gy, PT *restrict da, PT *restrict db,
                                         int64_t n) {
  for (int64_t k = 0; k < n; k++) {
    const PT v = (PT)0 + (PT)(gy[k] / 4.0);
    da[2 * k] = da[2 * k + 1] = db[2 * k] = db[2 * k + 1] = v;
  }
}

static void PS(avg_bwd_2x2s2_plane)(const fgk_pool_geom *g, const PT *dy, PT *dx) {
  const int64_t W = g->W, OW = g->OW;
  for (int64_t oh = 0; oh < g->OH; oh++) {
    PT *da = dx + 2 * oh * W;
    PS(avg_bwd_2x2s2_row)(dy + oh * OW, da, da + W, OW);
    PS(zero_cols)(da, W, 2 * OW);
  }
  for (int64_t e = 2 * g->OH * W; e < g->H * W; e++)
    dx[e] = 0;
}

static void PS(avg_bwd_plane)(const fgk_pool_geom *g, const PT *dy, PT *dx) {
  if (PS(grad_2x2s2)(g, 1)) {
    PS(avg_bwd_2x2s2_plane)(g, dy, dx);
    return;
  }
  for (int64_t e = 0; e < g->H * g->W; e++)
    dx[e] = 0;
  for (int64_t oh = 0; oh < g->OH; oh++)
    for (int64_t ow = 0; ow < g->OW; ow++) {
      int64_t h0, h1, w0, w1;
      const int64_t div = fgk_avg_divisor(g, oh, ow, &h0, &h1, &w0, &w1);
      if (div <= 0) continue;
      const PT v = (PT)(dy[oh * g->OW + ow] / (double)div);
      for (int64_t ih = h0; ih < h1; ih++)
        for (int64_t iw = w0; iw < w1; iw++)
          dx[ih * g->W + iw] += v;
    }
}

/* Runs the statements for each adaptive window, output (oh, ow) reading
 * input rows [h0, h1) and columns [w0, w1). */
#define POOL_ADAPTIVE_WINDOWS(g, ...)                                                              \
  for (int64_t oh = 0; oh < (g)->OH; oh++) {                                                       \
    int64_t h0, h1;                                                                                \
    fgk_adaptive_window(oh, (g)->H, (g)->OH, &h0, &h1);                                            \
    for (int64_t ow = 0; ow < (g)->OW; ow++) {                                                     \
      int64_t w0, w1;                                                                              \
      fgk_adaptive_window(ow, (g)->W, (g)->OW, &w0, &w1);                                          \
      __VA_ARGS__                                                                                  \
    }                                                                                              \
  }

/* global_avg_pool (adaptive to 1 x 1): each plane's sum in double over
 * its elements in order, divided once, as adaptive_fwd_plane; POOL_SIDE
 * planes at a time, so their sums (each a chain of dependent additions)
 * advance side by side. */
static void PS(global_avg_planes)(const fgk_pool_geom *g, const PT *x, PT *y, int64_t p0,
                                  int64_t p1) {
  const int64_t n = g->H * g->W;
  const double div = (double)n;
  int64_t p = p0;
  for (; p + POOL_SIDE <= p1; p += POOL_SIDE) {
    double s[POOL_SIDE] = {0};
    const PT *xp = x + p * n;
    for (int64_t e = 0; e < n; e++)
      for (int k = 0; k < POOL_SIDE; k++)
        s[k] += xp[k * n + e];
    for (int k = 0; k < POOL_SIDE; k++)
      y[p + k] = (PT)(s[k] / div);
  }
  for (; p < p1; p++) {
    double s = 0;
    for (int64_t e = 0; e < n; e++)
      s += x[p * n + e];
    y[p] = (PT)(s / div);
  }
}

/* Also global_avg_pool (OH = OW = 1: one window, the plane). */
static void PS(adaptive_fwd_plane)(const fgk_pool_geom *g, const PT *x, PT *y) {
  POOL_ADAPTIVE_WINDOWS(g, {
    double s = 0;
    for (int64_t ih = h0; ih < h1; ih++)
      for (int64_t iw = w0; iw < w1; iw++)
        s += x[ih * g->W + iw];
    y[oh * g->OW + ow] = (PT)(s / (double)((h1 - h0) * (w1 - w0)));
  })
}

static void PS(adaptive_bwd_plane)(const fgk_pool_geom *g, const PT *dy, PT *dx) {
  for (int64_t e = 0; e < g->H * g->W; e++)
    dx[e] = 0;
  POOL_ADAPTIVE_WINDOWS(g, {
    const PT v = (PT)(dy[oh * g->OW + ow] / (double)((h1 - h0) * (w1 - w0)));
    for (int64_t ih = h0; ih < h1; ih++)
      for (int64_t iw = w0; iw < w1; iw++)
        dx[ih * g->W + iw] += v;
  })
}

/* Planes [p0, p1) of one call, by kind. */
static void PS(pool_planes)(const pool_job *j, int64_t p0, int64_t p1) {
  const fgk_pool_geom *g = &j->g;
  const int64_t xs = g->H * g->W, ys = g->OH * g->OW;
  const PT *a = j->a;
  const PT *b = j->b;
  PT *o = j->out;
  if (j->kind == POOL_ADAPTIVE && g->OH == 1 && g->OW == 1 && xs > 0) {
    PS(global_avg_planes)(g, a, o, p0, p1);
    return;
  }
  if (j->kind == POOL_ADAPTIVE_GRAD && g->OH == 1 && g->OW == 1) {
    /* global_avg_pool's gradient: adaptive_bwd_plane's one window is the
     * plane, so every element gets 0 + (PT)(dy / (H * W)), as there,
     * without its per-window set-up (planes are often 4 x 4 or 7 x 7) */
    for (int64_t p = p0; p < p1; p++) {
      const PT v = (PT)0 + (PT)(a[p] / (double)xs);
      for (int64_t e = 0; e < xs; e++)
        o[p * xs + e] = v;
    }
    return;
  }
  const int avg = j->kind == POOL_AVG_GRAD;
  if ((avg || j->kind == POOL_MAX_GRAD) && 2 * g->OH == g->H && PS(grad_2x2s2)(g, avg)) {
    /* Windows that tile the rows exactly: the chunk's planes stacked are
     * one plane of (p1 - p0) * H rows, whose windows are the planes' in
     * order (none spans two planes), so one call does them all, without
     * a small plane's set-up each (LeNet's second pool: 8 x 8). */
    fgk_pool_geom t = *g;
    t.H = (p1 - p0) * g->H;
    t.OH = (p1 - p0) * g->OH;
    if (avg)
      PS(avg_bwd_2x2s2_plane)(&t, a + p0 * ys, o + p0 * xs);
    else
      PS(max_bwd_2x2s2_plane)(&t, a + p0 * ys, b + p0 * xs, o + p0 * xs);
    return;
  }
  for (int64_t p = p0; p < p1; p++) {
    switch (j->kind) {
    case POOL_MAX: PS(max_fwd_plane)(g, a + p * xs, o + p * ys); break;
    case POOL_AVG: PS(avg_fwd_plane)(g, a + p * xs, o + p * ys); break;
    case POOL_ADAPTIVE: PS(adaptive_fwd_plane)(g, a + p * xs, o + p * ys); break;
    /* gradients: a = dy (the output plane's size), b = x */
    case POOL_MAX_GRAD: PS(max_bwd_plane)(g, a + p * ys, b + p * xs, o + p * xs); break;
    case POOL_AVG_GRAD: PS(avg_bwd_plane)(g, a + p * ys, o + p * xs); break;
    case POOL_ADAPTIVE_GRAD: PS(adaptive_bwd_plane)(g, a + p * ys, o + p * xs); break;
    }
  }
}
