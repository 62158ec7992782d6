/* transpose on the CPU: out[i0, ..] = in[i_perm[0], ..], bytes moved only.
 *
 * The dims are first coalesced (fgk_walk_init: size-1 dims dropped,
 * neighbours that stay neighbours merged), then one of two loops runs,
 * split over the threads by whole rows or tiles from 2^18 elements up
 * (the bytes are the same for any split):
 * - the output's last dim is contiguous in the input too (a permutation
 *   of outer dims, as attention's [S, B, D] -> [B, S, D]): a copy of
 *   rows, rows of up to 16 elements by a plain loop rather than a memcpy
 *   call each;
 * - else the input's contiguous dim p is another output dim: each
 *   (p, last) plane is transposed in TILE x TILE tiles, so the strided
 *   reads of a tile share TILE cache lines that stay in L1 while it is
 *   written row by row.
 * The walk that did both before read a strided row element by element.
 * One thread, f32, hot caches: [128, 32, 16] -> [32, 16, 128] 18.7 ->
 * 12.7 us, [1024, 1024] -> its transpose 388 -> 336 us; row copies as
 * before ([128, 32, 16] -> [32, 128, 16] 11.5 -> 11.0 us, [8, 128, 64]
 * -> [128, 8, 64] 6.2 -> 7.0 us). In a model the input's cache state
 * counts as much: the same [128, 32, 16] -> [32, 128, 16] took 20 or 46
 * us at two places of an exported transformer encoder. */
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"

#define TILE 16
/* Elements a parallel chunk moves, at least. */
#define TR_GRAIN (1 << 18)

typedef struct tr_job {
  const char *src;
  char *dst;
  size_t es;
  int rank, p; /* p: the dim read contiguously when the last dim is not; -1 when it is */
  int64_t dims[FG_MAX_RANK], is[FG_MAX_RANK], os[FG_MAX_RANK];
  int od[FG_MAX_RANK], n_od; /* the dims the items walk: all but the last (and p) */
  int64_t n_tiles;           /* per outer position: tiles of dim p (1 when p < 0) */
} tr_job;

/* The input and output offsets (in elements) of outer position o, and
 * its counters over J->od (one division per dim: once per call). */
static void tr_seek(const tr_job *J, int64_t o, int64_t *cnt, int64_t *in_off, int64_t *out_off) {
  *in_off = *out_off = 0;
  for (int k = J->n_od - 1; k >= 0; k--) {
    const int d = J->od[k];
    cnt[k] = o % J->dims[d];
    o /= J->dims[d];
    *in_off += cnt[k] * J->is[d];
    *out_off += cnt[k] * J->os[d];
  }
}

/* The next outer position's counters and offsets. */
static inline void tr_next(const tr_job *J, int64_t *cnt, int64_t *in_off, int64_t *out_off) {
  for (int k = J->n_od - 1; k >= 0; k--) {
    const int d = J->od[k];
    *in_off += J->is[d];
    *out_off += J->os[d];
    if (++cnt[k] < J->dims[d]) return;
    *in_off -= J->is[d] * J->dims[d];
    *out_off -= J->os[d] * J->dims[d];
    cnt[k] = 0;
  }
}

/* Rows of len contiguous elements, small ones without a call. */
#define TR_ROWS(T)                                                                                 \
  tr_seek(J, i0, cnt, &io, &oo);                                                                   \
  for (int64_t o = i0; o < i1; o++, tr_next(J, cnt, &io, &oo)) {                                   \
    const T *s = (const T *)J->src + io;                                                           \
    T *d = (T *)J->dst + oo;                                                                       \
    if (js != 1) /* one element in all (its stride 0) */                                           \
      for (int64_t j = 0; j < len; j++)                                                            \
        d[j] = s[j * js];                                                                          \
    else if (len > 16)                                                                             \
      memcpy(d, s, (size_t)len * sizeof(T));                                                       \
    else                                                                                           \
      for (int64_t j = 0; j < len; j++)                                                            \
        d[j] = s[j];                                                                               \
  }

/* Tile rows [p0, p0 + np) of each (p, last) plane: out[ip, j] = in[ip, j]
 * with the input's j stride `js` and the output's ip stride `ps`. */
#define TR_TILES(T)                                                                                \
  tr_seek(J, i0 / J->n_tiles, cnt, &io, &oo);                                                      \
  for (int64_t it = i0; it < i1; it++) {                                                           \
    if (it > i0 && it % J->n_tiles == 0) tr_next(J, cnt, &io, &oo);                                \
    const int64_t p0 = it % J->n_tiles * TILE, np = P - p0 < TILE ? P - p0 : TILE;                 \
    const T *s = (const T *)J->src + io + p0;                                                      \
    T *d = (T *)J->dst + oo + p0 * ps;                                                             \
    for (int64_t j0 = 0; j0 < len; j0 += TILE) {                                                   \
      const int64_t nj = len - j0 < TILE ? len - j0 : TILE;                                        \
      for (int64_t ip = 0; ip < np; ip++)                                                          \
        for (int64_t j = 0; j < nj; j++)                                                           \
          d[ip * ps + j0 + j] = s[ip + (j0 + j) * js];                                             \
    }                                                                                              \
  }

#define TR_BODY(T)                                                                                 \
  do {                                                                                             \
    if (J->p < 0) {                                                                                \
      TR_ROWS(T)                                                                                   \
    } else {                                                                                       \
      TR_TILES(T)                                                                                  \
    }                                                                                              \
  } while (0)

static void tr_range(void *arg, int64_t i0, int64_t i1) {
  const tr_job *J = (const tr_job *)arg;
  const int last = J->rank - 1;
  const int64_t len = J->dims[last], js = J->is[last];
  const int64_t P = J->p < 0 ? 1 : J->dims[J->p], ps = J->p < 0 ? 0 : J->os[J->p];
  int64_t cnt[FG_MAX_RANK], io, oo;
  (void)P, (void)ps;
  switch (J->es) {
  case 1: TR_BODY(uint8_t); break;
  case 2: TR_BODY(uint16_t); break;
  case 4: TR_BODY(uint32_t); break;
  default: TR_BODY(uint64_t); break;
  }
}

int fgk_transpose(const fg_kctx *ctx) {
  int64_t full[1][FG_MAX_RANK];
  if (fgk_check(ctx, 1, 1) != 0 || fgk_transpose_check(ctx, full[0]) != 0) return -1;
  const fg_kbuf *in = &ctx->in[0], *out = &ctx->out[0];
  const size_t es = fg_dtype_size(out->dtype);
  if (es != 1 && es != 2 && es != 4 && es != 8)
    return fgk_fail(ctx, "unsupported dtype %s", fg_dtype_name(out->dtype));
  if (fgk_numel(out) == 0) return 0;
  fgk_bcast bc;
  fgk_walk_init(&bc, 1, out->rank, out->dims, full);
  tr_job J = {(const char *)in->data, (char *)out->data, es, bc.rank, -1, {0}, {0}, {0}, {0}, 0, 1};
  int64_t os = 1;
  for (int d = bc.rank - 1; d >= 0; d--) {
    J.dims[d] = bc.dims[d];
    J.is[d] = bc.strides[0][d];
    J.os[d] = os;
    os *= bc.dims[d];
    if (d < bc.rank - 1 && J.is[d] == 1 && J.is[bc.rank - 1] != 1) J.p = d;
  }
  int64_t n_outer = 1;
  for (int d = 0; d < bc.rank - 1; d++)
    if (d != J.p) J.od[J.n_od++] = d, n_outer *= J.dims[d];
  if (J.p >= 0) J.n_tiles = (J.dims[J.p] - 1) / TILE + 1;
  /* Per item: a row, or a tile's rows of whole planes' width. */
  const int64_t per_item = J.dims[bc.rank - 1] * (J.p < 0              ? 1
                                                  : J.dims[J.p] < TILE ? J.dims[J.p]
                                                                       : TILE);
  const int64_t grain = per_item >= TR_GRAIN ? 1 : TR_GRAIN / per_item;
  fgk_parallel_for(ctx, n_outer * J.n_tiles, grain, tr_range, &J);
  return 0;
}
