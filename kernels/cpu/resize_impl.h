/* resize_nearest, resize_linear and their gradients over a range of planes,
 * once per element type: included by kernels/cpu/resize.c with RT (the
 * type) and RS(name) (the name suffix) defined.
 *
 * Columns go in tiles of RESIZE_TILE outputs whose taps are computed once
 * per tile and chunk, rows' taps once per row. The gradients scatter into a
 * zeroed plane in a fixed order (tile, row, column), so their sums do not
 * depend on the thread count: planes never share an element. */

/* The taps of output columns [c0, c0 + n). */
static void RS(column_taps)(const fgk_resize_geom *g, int linear, int64_t c0, int64_t n,
                            int64_t *i0, int64_t *i1, RT *w1) {
  for (int64_t j = 0; j < n; j++) {
    if (!linear) {
      i0[j] = fgk_resize_nearest_index(g->coord, g->nearest, c0 + j, g->W, g->OW, g->scale_w);
      continue;
    }
    double w;
    fgk_resize_linear_taps(g->coord, c0 + j, g->W, g->OW, g->scale_w, &i0[j], &i1[j], &w);
    w1[j] = (RT)w;
  }
}

/* Input row `r` of x blended across the tile's columns (the horizontal
 * half of the bilinear weights), kept in one of two row slots: rows[k]
 * holds input row held[k]. The slot of row `keep` (the other row the
 * output row needs) is not overwritten. When enlarging, consecutive output
 * rows share their input rows, so each is blended once, and the vertical
 * blend below runs over contiguous values; the bits are those of the
 * formula written out per element. */
static const RT *RS(blended_row)(const RT *x, int64_t W, int64_t r, int64_t keep, int64_t n,
                                 const int64_t *i0, const int64_t *i1, const RT *w1,
                                 RT rows[2][RESIZE_TILE], int64_t held[2]) {
  if (held[0] == r) return rows[0];
  if (held[1] == r) return rows[1];
  const int k = held[0] == keep ? 1 : 0;
  const RT *xr = x + r * W;
  for (int64_t j = 0; j < n; j++)
    rows[k][j] = ((RT)1 - w1[j]) * xr[i0[j]] + w1[j] * xr[i1[j]];
  held[k] = r;
  return rows[k];
}

/* One tile of one plane: x [H, W] into y [OH, OW] (columns c0 .. c0+n). */
static void RS(forward_tile)(const fgk_resize_geom *g, int linear, const RT *x, RT *y, int64_t c0,
                             int64_t n, const int64_t *i0, const int64_t *i1, const RT *w1) {
  RT rows[2][RESIZE_TILE];
  int64_t held[2] = {-1, -1};
  for (int64_t oh = 0; oh < g->OH; oh++) {
    RT *yr = y + oh * g->OW + c0;
    if (!linear) {
      const int64_t ih =
          fgk_resize_nearest_index(g->coord, g->nearest, oh, g->H, g->OH, g->scale_h);
      const RT *xr = x + ih * g->W;
      for (int64_t j = 0; j < n; j++)
        yr[j] = xr[i0[j]];
      continue;
    }
    int64_t h0, h1;
    double wh;
    fgk_resize_linear_taps(g->coord, oh, g->H, g->OH, g->scale_h, &h0, &h1, &wh);
    const RT b = (RT)wh, a = (RT)1 - b;
    const RT *s0 = RS(blended_row)(x, g->W, h0, h1, n, i0, i1, w1, rows, held);
    const RT *s1 = RS(blended_row)(x, g->W, h1, h0, n, i0, i1, w1, rows, held);
    for (int64_t j = 0; j < n; j++)
      yr[j] = a * s0[j] + b * s1[j];
  }
}

/* The gradient of one tile: dy [OH, OW] (columns c0 .. c0+n) added into
 * dx [H, W] with the forward's weights. */
static void RS(backward_tile)(const fgk_resize_geom *g, int linear, const RT *dy, RT *dx,
                              int64_t c0, int64_t n, const int64_t *i0, const int64_t *i1,
                              const RT *w1) {
  for (int64_t oh = 0; oh < g->OH; oh++) {
    const RT *dr = dy + oh * g->OW + c0;
    if (!linear) {
      const int64_t ih =
          fgk_resize_nearest_index(g->coord, g->nearest, oh, g->H, g->OH, g->scale_h);
      RT *xr = dx + ih * g->W;
      for (int64_t j = 0; j < n; j++)
        xr[i0[j]] += dr[j];
      continue;
    }
    int64_t h0, h1;
    double wh;
    fgk_resize_linear_taps(g->coord, oh, g->H, g->OH, g->scale_h, &h0, &h1, &wh);
    const RT b = (RT)wh, a = (RT)1 - b;
    RT *r0 = dx + h0 * g->W, *r1 = dx + h1 * g->W;
    for (int64_t j = 0; j < n; j++) {
      const RT v = (RT)1 - w1[j], d = dr[j];
      r0[i0[j]] += a * v * d;
      r0[i1[j]] += a * w1[j] * d;
      r1[i0[j]] += b * v * d;
      r1[i1[j]] += b * w1[j] * d;
    }
  }
}

static void RS(resize_planes)(const resize_job *j, int64_t p0, int64_t p1) {
  const fgk_resize_geom *g = &j->g;
  const int64_t xs = g->H * g->W, ys = g->OH * g->OW;
  int64_t i0[RESIZE_TILE], i1[RESIZE_TILE];
  RT w1[RESIZE_TILE];
  if (j->grad) memset((RT *)j->out + p0 * xs, 0, (size_t)((p1 - p0) * xs) * sizeof(RT));
  for (int64_t c0 = 0; c0 < g->OW; c0 += RESIZE_TILE) {
    const int64_t n = g->OW - c0 < RESIZE_TILE ? g->OW - c0 : RESIZE_TILE;
    RS(column_taps)(g, j->linear, c0, n, i0, i1, w1);
    for (int64_t p = p0; p < p1; p++) {
      const RT *a = (const RT *)j->a + p * (j->grad ? ys : xs);
      RT *o = (RT *)j->out + p * (j->grad ? xs : ys);
      if (j->grad) {
        RS(backward_tile)(g, j->linear, a, o, c0, n, i0, i1, w1);
      } else {
        RS(forward_tile)(g, j->linear, a, o, c0, n, i0, i1, w1);
      }
    }
  }
}
