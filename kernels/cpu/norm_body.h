/* The normalization kernels for one element type, included by norm.c once
 * per type with NT (float or double) and NSUF (f32 or f64) defined. Sums
 * accumulate in double; the statistics take two passes (the mean, then the
 * squared deviations), so a large mean does not cancel the variance. */
#define NCAT2(a, b) a##_##b
#define NCAT(a, b)  NCAT2(a, b)
#define NF(name)    NCAT(name, NSUF)

/* The sums below run in NORM_LANES double partials, added up in a fixed
 * order, so the compiler may vectorise them and a result still depends on
 * the data alone (not on the thread count). */

/* sum of x[0..n) */
FGK_INLINE double NF(lsum)(const NT *x, int64_t n) {
  double l[NORM_LANES] = {0}, t = 0, s = 0;
  int64_t j = 0;
  for (; j + NORM_LANES <= n; j += NORM_LANES)
    for (int k = 0; k < NORM_LANES; k++)
      l[k] += (double)x[j + k];
  for (; j < n; j++)
    t += (double)x[j];
  for (int k = 0; k < NORM_LANES; k++)
    s += l[k];
  return s + t;
}

/* sum of (x[j] - m)^2 over [0, n) */
FGK_INLINE double NF(lsqdev)(const NT *x, int64_t n, double m) {
  double l[NORM_LANES] = {0}, t = 0, s = 0;
  int64_t j = 0;
  for (; j + NORM_LANES <= n; j += NORM_LANES)
    for (int k = 0; k < NORM_LANES; k++) {
      const double d = (double)x[j + k] - m;
      l[k] += d * d;
    }
  for (; j < n; j++) {
    const double d = (double)x[j] - m;
    t += d * d;
  }
  for (int k = 0; k < NORM_LANES; k++)
    s += l[k];
  return s + t;
}

/* *s1 += sum of g[j], *s2 += sum of g[j] (x[j] - m) over [0, n), where
 * g[j] = dy[j] sc[j] (sc NULL: dy[j]). */
FGK_INLINE void NF(ldot)(const NT *dy, const NT *x, const NT *sc, int64_t n, double m, double *s1,
                         double *s2) {
  double a[NORM_LANES] = {0}, b[NORM_LANES] = {0}, ta = 0, tb = 0;
  int64_t j = 0;
  for (; j + NORM_LANES <= n; j += NORM_LANES)
    for (int k = 0; k < NORM_LANES; k++) {
      const double g = (double)dy[j + k] * (sc ? (double)sc[j + k] : 1.0);
      a[k] += g;
      b[k] += g * ((double)x[j + k] - m);
    }
  for (; j < n; j++) {
    const double g = (double)dy[j] * (sc ? (double)sc[j] : 1.0);
    ta += g;
    tb += g * ((double)x[j] - m);
  }
  double sa = 0, sb = 0;
  for (int k = 0; k < NORM_LANES; k++)
    sa += a[k], sb += b[k];
  *s1 += sa + ta;
  *s2 += sb + tb;
}

/* batch_norm: channel c of sample n is the S elements at (n C + c) S.
 * Channels run in blocks, sample by sample: with a small plane
 * (BatchNorm1d's [N, C] has S = 1) a block of one sample is one contiguous
 * run, where a walk per channel would read one element per cache line. A
 * block holds at most about BN_BLOCK_VALUES values, so the element pass
 * finds what the sums read still in cache. Each channel's sums keep their
 * order (n ascending, lsum or ldot within a plane), so the bits depend on
 * neither the block nor the thread count. */
#define BN_CBLOCK       64
#define BN_BLOCK_VALUES 8192

/* Channels per block for job J. */
FGK_INLINE int64_t NF(bn_block_len)(const norm_job *J) {
  const int64_t per = J->N * J->S, b = per > 0 ? BN_BLOCK_VALUES / per : BN_CBLOCK;
  return b < 1 ? 1 : b > BN_CBLOCK ? BN_CBLOCK : b;
}

/* s[i] += the sum over channel c0 + i's values (m NULL) or over their
 * squared deviations from m[i], for the channels [c0, c0 + B). */
FGK_INLINE void NF(bn_block_sums)(const norm_job *J, int64_t c0, int64_t B, const double *m,
                                  double *s) {
  const int64_t C = J->Cg, S = J->S;
  for (int64_t n = 0; n < J->N; n++) {
    const NT *xn = (const NT *)J->x + (n * C + c0) * S;
    /* S == 1: lsum's and lsqdev's result for one value, in loops across
     * the channels that vectorise. */
    if (S == 1 && m) {
      for (int64_t i = 0; i < B; i++) {
        const double d = (double)xn[i] - m[i];
        s[i] += d * d;
      }
    } else if (S == 1) {
      for (int64_t i = 0; i < B; i++)
        s[i] += (double)xn[i];
    } else {
      for (int64_t i = 0; i < B; i++)
        s[i] += m ? NF(lsqdev)(xn + i * S, S, m[i]) : NF(lsum)(xn + i * S, S);
    }
  }
}

/* The running statistics of channels [c0, c0 + n): mean, 1 / sqrt(var +
 * eps) and var. */
FGK_INLINE void NF(bn_running)(const norm_job *J, int64_t c0, int64_t n, double *mean, double *inv,
                               double *var_out) {
  for (int64_t i = 0; i < n; i++) {
    mean[i] = (double)((const NT *)J->rm)[c0 + i];
    var_out[i] = (double)((const NT *)J->rv)[c0 + i];
    inv[i] = 1.0 / sqrt(var_out[i] + J->eps);
  }
}

/* y = x at + bt for channels [c0, c0 + n): at = scale inv and bt = shift -
 * mean a, each rounded once to NT from double (y is then one rounding from
 * the exact x a + b, and the element pass vectorises at NT's width); the
 * statistics written out. Every layout takes them from here, so all give
 * the same bits (fold_inference's x * a + b form computes the same). */
FGK_INLINE void NF(bn_coeffs)(const norm_job *J, int64_t c0, int64_t n, const double *mean,
                              const double *inv, const double *var_out, NT *at, NT *bt) {
  for (int64_t i = 0; i < n; i++) {
    const int64_t c = c0 + i;
    const double a = (double)((const NT *)J->scale)[c] * inv[i];
    at[i] = (NT)a;
    bt[i] = (NT)((double)((const NT *)J->shift)[c] - mean[i] * a);
    ((NT *)J->mean)[c] = (NT)mean[i];
    ((NT *)J->inv)[c] = (NT)inv[i];
    ((NT *)J->var)[c] = (NT)var_out[i];
  }
}

/* The gradient's constants of channels [c0, c0 + n), dx = k_dy dy + k_x
 * (x - mean) + k_0 = a dy - a m1 - a inv m2 (x - mean) with a = scale inv,
 * m1 = sum(dy) / M and m2 = sum(dy xhat) / M in training (0 in inference:
 * the running statistics are constants; sync_batch_norm_grad: every
 * replica's, from gd), in NT; x - mean stays a difference, so a large mean
 * does not cancel. sdyx becomes sum(dy xhat); dscale and dshift are
 * written (not for sync_batch_norm_grad, which sets them itself). */
FGK_INLINE void NF(bn_grad_coeffs)(const norm_job *J, int64_t c0, int64_t n, const double *sdy,
                                   double *sdyx, const double *inv, NT *k_dy, NT *k_x, NT *k_0) {
  const int64_t C = J->Cg, M = J->N * J->S;
  for (int64_t i = 0; i < n; i++) {
    const int64_t c = c0 + i;
    sdyx[i] *= inv[i];
    const double a = (double)((const NT *)J->scale)[c] * inv[i];
    double m1 = J->training ? sdy[i] / (double)M : 0, m2 = J->training ? sdyx[i] / (double)M : 0;
    if (J->gd) m1 = J->gd[c], m2 = J->gd[C + c];
    k_dy[i] = (NT)a, k_x[i] = (NT)(-a * inv[i] * m2), k_0[i] = (NT)(-a * m1);
    if (J->gd) continue;
    ((NT *)J->dscale)[c] = (NT)sdyx[i];
    ((NT *)J->dshift)[c] = (NT)sdy[i];
  }
}

/* The mean, 1 / sqrt(var + eps) and unbiased variance of channels [c0, c0
 * + B): every replica's (sync_batch_norm), the batch's, or the running
 * ones. */
FGK_INLINE void NF(bn_block_stats)(const norm_job *J, int64_t c0, int64_t B, double *mean,
                                   double *inv, double *var_out) {
  const int64_t C = J->Cg, M = J->N * J->S;
  if (J->gs) {
    for (int64_t i = 0; i < B; i++) {
      mean[i] = J->gs[c0 + i];
      inv[i] = J->gs[C + c0 + i];
      var_out[i] = J->gs[2 * C + c0 + i];
    }
  } else if (J->training) {
    double s[BN_CBLOCK] = {0}, q[BN_CBLOCK] = {0};
    NF(bn_block_sums)(J, c0, B, NULL, s);
    for (int64_t i = 0; i < B; i++)
      mean[i] = s[i] / (double)M;
    NF(bn_block_sums)(J, c0, B, mean, q);
    for (int64_t i = 0; i < B; i++) {
      inv[i] = 1.0 / sqrt(q[i] / (double)M + J->eps);
      var_out[i] = q[i] / (double)(M - 1); /* unbiased, for the running variance */
    }
  } else {
    NF(bn_running)(J, c0, B, mean, inv, var_out);
  }
}

FGK_INLINE void NF(bn_fwd_block)(const norm_job *J, int64_t c0, int64_t B) {
  const int64_t C = J->Cg, S = J->S;
  double mean[BN_CBLOCK], inv[BN_CBLOCK], var_out[BN_CBLOCK];
  NF(bn_block_stats)(J, c0, B, mean, inv, var_out);
  NT at[BN_CBLOCK], bt[BN_CBLOCK];
  NF(bn_coeffs)(J, c0, B, mean, inv, var_out, at, bt);
  for (int64_t n = 0; n < J->N; n++) {
    const NT *xn = (const NT *)J->x + (n * C + c0) * S;
    NT *yn = (NT *)J->y + (n * C + c0) * S;
    if (S == 1) {
      for (int64_t i = 0; i < B; i++)
        yn[i] = xn[i] * at[i] + bt[i];
      continue;
    }
    for (int64_t i = 0; i < B; i++)
      for (int64_t k = 0; k < S; k++)
        yn[i * S + k] = xn[i * S + k] * at[i] + bt[i];
  }
}

FGK_CLONES static void NF(bn_fwd_range)(void *arg, int64_t c0, int64_t c1) {
  const int64_t len = NF(bn_block_len)((const norm_job *)arg);
  for (int64_t b = c0; b < c1; b += len)
    NF(bn_fwd_block)((const norm_job *)arg, b, c1 - b < len ? c1 - b : len);
}

/* sdy[i] += sum of dy, sdyx[i] += sum of dy (x - mean[i]) over channel c0
 * + i, for [c0, c0 + B). */
FGK_INLINE void NF(bn_block_dot)(const norm_job *J, int64_t c0, int64_t B, const double *mean,
                                 double *sdy, double *sdyx) {
  const int64_t C = J->Cg, S = J->S;
  for (int64_t n = 0; n < J->N; n++) {
    const int64_t o = (n * C + c0) * S;
    const NT *dyn = (const NT *)J->dy + o, *xn = (const NT *)J->x + o;
    if (S == 1) { /* ldot's result for one value, vectorised across channels */
      for (int64_t i = 0; i < B; i++) {
        const double g = (double)dyn[i];
        sdy[i] += g;
        sdyx[i] += g * ((double)xn[i] - mean[i]);
      }
      continue;
    }
    for (int64_t i = 0; i < B; i++)
      NF(ldot)(dyn + i * S, xn + i * S, NULL, S, mean[i], &sdy[i], &sdyx[i]);
  }
}

/* dx = scale inv (dy - sum(dy) / M - xhat sum(dy xhat) / M) in training,
 * scale inv dy in inference (the running statistics are constants). */
FGK_INLINE void NF(bn_grad_block)(const norm_job *J, int64_t c0, int64_t B) {
  const int64_t C = J->Cg, S = J->S;
  double mean[BN_CBLOCK], inv[BN_CBLOCK], sdy[BN_CBLOCK] = {0}, sdyx[BN_CBLOCK] = {0};
  for (int64_t i = 0; i < B; i++) {
    mean[i] = (double)((const NT *)J->mean)[c0 + i];
    inv[i] = (double)((const NT *)J->inv)[c0 + i];
  }
  if (!J->gd) NF(bn_block_dot)(J, c0, B, mean, sdy, sdyx);
  NT k_dy[BN_CBLOCK], k_x[BN_CBLOCK], k_0[BN_CBLOCK], mt[BN_CBLOCK];
  NF(bn_grad_coeffs)(J, c0, B, sdy, sdyx, inv, k_dy, k_x, k_0);
  for (int64_t i = 0; i < B; i++)
    mt[i] = (NT)mean[i];
  for (int64_t n = 0; n < J->N; n++) {
    const int64_t o = (n * C + c0) * S;
    const NT *dyn = (const NT *)J->dy + o, *xn = (const NT *)J->x + o;
    NT *dxn = (NT *)J->y + o;
    if (S == 1) {
      for (int64_t i = 0; i < B; i++)
        dxn[i] = k_dy[i] * dyn[i] + k_x[i] * (xn[i] - mt[i]) + k_0[i];
      continue;
    }
    for (int64_t i = 0; i < B; i++)
      for (int64_t k = 0; k < S; k++)
        dxn[i * S + k] = k_dy[i] * dyn[i * S + k] + k_x[i] * (xn[i * S + k] - mt[i]) + k_0[i];
  }
}

static void NF(bn_grad_range)(void *arg, int64_t c0, int64_t c1) {
  const int64_t len = NF(bn_block_len)((const norm_job *)arg);
  for (int64_t b = c0; b < c1; b += len)
    NF(bn_grad_block)((const norm_job *)arg, b, c1 - b < len ? c1 - b : len);
}
#undef BN_CBLOCK
#undef BN_BLOCK_VALUES

/* batch_norm on NC16 (kernel.h): channel block b of sample n is the S x 16
 * values at ((n CB + b) S) 16, lane l holding channel 16 b + l. Work runs
 * per block of 16 channels, the lanes side by side (so the loops vectorise
 * across channels); each channel's sums run over n, then the spatial
 * positions, in one thread. They add NC16_RUN positions at a time in NT,
 * at the vector's full width, and each run's sum into double, so the error
 * stays that of a few dozen additions in NT. */
#define NC16     16
#define NC16_RUN 32

/* s[l] += sum over the S positions of xb[k 16 + l] - m[l]; with q, also
 * q[l] += the sum of the squares (m: NULL for zero). */
FGK_INLINE void NF(nc16_sums)(const NT *xb, int64_t S, const NT *m, double *s, double *q) {
  for (int64_t k0 = 0; k0 < S; k0 += NC16_RUN) {
    const int64_t k1 = S - k0 < NC16_RUN ? S : k0 + NC16_RUN;
    NT a[NC16] = {0}, b[NC16] = {0};
    for (int64_t k = k0; k < k1; k++)
      for (int l = 0; l < NC16; l++) {
        const NT d = xb[k * NC16 + l] - (m ? m[l] : (NT)0);
        a[l] += d;
        b[l] += d * d;
      }
    for (int l = 0; l < NC16; l++) {
      s[l] += (double)a[l];
      if (q) q[l] += (double)b[l];
    }
  }
}

/* s[l] += sum of dy, t[l] += sum of dy (x - m[l]) over the S positions. */
static void NF(nc16_dot)(const NT *dyb, const NT *xb, int64_t S, const NT *m, double *s,
                         double *t) {
  for (int64_t k0 = 0; k0 < S; k0 += NC16_RUN) {
    const int64_t k1 = S - k0 < NC16_RUN ? S : k0 + NC16_RUN;
    NT a[NC16] = {0}, b[NC16] = {0};
    for (int64_t k = k0; k < k1; k++)
      for (int l = 0; l < NC16; l++) {
        const NT g = dyb[k * NC16 + l];
        a[l] += g;
        b[l] += g * (xb[k * NC16 + l] - m[l]);
      }
    for (int l = 0; l < NC16; l++)
      s[l] += (double)a[l], t[l] += (double)b[l];
  }
}

/* The batch's mean, 1 / sqrt(var + eps) and unbiased variance of block b.
 * The squared deviations are taken from the mean rounded to NT, m', and
 * corrected exactly: sum (x - m)^2 = sum (x - m')^2 - M (m - m')^2. */
FGK_INLINE void NF(nc16_stats)(const norm_job *J, int64_t b, double *mean, double *inv,
                               double *var_out) {
  const int64_t N = J->N, CB = J->Cg / NC16, S = J->S, M = N * S, L = S * NC16;
  const NT *x = (const NT *)J->x;
  double s[NC16] = {0}, q[NC16] = {0}, z[NC16] = {0};
  NT mt[NC16];
  for (int64_t n = 0; n < N; n++)
    NF(nc16_sums)(x + (n * CB + b) * L, S, NULL, s, NULL);
  for (int l = 0; l < NC16; l++)
    mean[l] = s[l] / (double)M, mt[l] = (NT)mean[l];
  for (int64_t n = 0; n < N; n++)
    NF(nc16_sums)(x + (n * CB + b) * L, S, mt, z, q);
  for (int l = 0; l < NC16; l++) {
    const double e = mean[l] - (double)mt[l];
    const double ss = q[l] - (double)M * e * e;
    const double v = ss > 0 ? ss : 0;
    inv[l] = 1.0 / sqrt(v / (double)M + J->eps);
    var_out[l] = v / (double)(M - 1);
  }
}

FGK_CLONES static void NF(bn_fwd_nc16_range)(void *arg, int64_t b0, int64_t b1) {
  const norm_job *J = (const norm_job *)arg;
  const int64_t N = J->N, CB = J->Cg / NC16, S = J->S, L = S * NC16;
  const NT *x = (const NT *)J->x;
  NT *y = (NT *)J->y;
  for (int64_t b = b0; b < b1; b++) {
    double mean[NC16], inv[NC16], var_out[NC16];
    if (J->training)
      NF(nc16_stats)(J, b, mean, inv, var_out);
    else
      NF(bn_running)(J, b * NC16, NC16, mean, inv, var_out);
    NT at[NC16], bt[NC16];
    NF(bn_coeffs)(J, b * NC16, NC16, mean, inv, var_out, at, bt);
    for (int64_t n = 0; n < N; n++)
      for (int64_t k = 0; k < L; k += NC16)
        for (int l = 0; l < NC16; l++) {
          const int64_t o = (n * CB + b) * L + k + l;
          y[o] = x[o] * at[l] + bt[l];
        }
  }
}

/* batch_norm_grad on NC16: bn_grad_range's formulas per block of 16
 * channels. */
static void NF(bn_grad_nc16_range)(void *arg, int64_t b0, int64_t b1) {
  const norm_job *J = (const norm_job *)arg;
  const int64_t N = J->N, CB = J->Cg / NC16, S = J->S, L = S * NC16;
  const NT *x = (const NT *)J->x, *dy = (const NT *)J->dy;
  NT *dx = (NT *)J->y;
  for (int64_t b = b0; b < b1; b++) {
    double inv[NC16], sdy[NC16] = {0}, sdyx[NC16] = {0};
    NT mt[NC16];
    for (int l = 0; l < NC16; l++) {
      mt[l] = ((const NT *)J->mean)[b * NC16 + l];
      inv[l] = (double)((const NT *)J->inv)[b * NC16 + l];
    }
    for (int64_t n = 0; n < N; n++)
      NF(nc16_dot)(dy + (n * CB + b) * L, x + (n * CB + b) * L, S, mt, sdy, sdyx);
    NT k_dy[NC16], k_x[NC16], k_0[NC16];
    NF(bn_grad_coeffs)(J, b * NC16, NC16, sdy, sdyx, inv, k_dy, k_x, k_0);
    for (int64_t n = 0; n < N; n++)
      for (int64_t k = 0; k < L; k += NC16)
        for (int l = 0; l < NC16; l++) {
          const int64_t o = (n * CB + b) * L + k + l;
          dx[o] = k_dy[l] * dy[o] + k_x[l] * (x[o] - mt[l]) + k_0[l];
        }
  }
}
#undef NC16
#undef NC16_RUN

/* sync_batch_norm's local sums per channel, in batch_norm's order: part[c]
 * = sum x (gs NULL) or sum (x - gs[c])^2; with dy (the gradient), part[c]
 * = sum dy and part[C + c] = sum dy xhat. */
static void NF(bn_part_range)(void *arg, int64_t c0, int64_t c1) {
  const norm_job *J = (const norm_job *)arg;
  const NT *x = (const NT *)J->x, *dy = (const NT *)J->dy;
  const int64_t N = J->N, C = J->Cg, S = J->S;
  for (int64_t c = c0; c < c1; c++) {
    double s = 0, t = 0;
    const double m = dy ? (double)((const NT *)J->mean)[c] : J->gs ? J->gs[c] : 0;
    for (int64_t n = 0; n < N; n++) {
      const NT *xc = x + (n * C + c) * S;
      if (dy)
        NF(ldot)(dy + (n * C + c) * S, xc, NULL, S, m, &s, &t);
      else
        s += J->gs ? NF(lsqdev)(xc, S, m) : NF(lsum)(xc, S);
    }
    J->part[c] = s;
    if (dy) J->part[C + c] = t * (double)((const NT *)J->inv)[c];
  }
}

/* Row norm: row r (of N G) is Cg S contiguous elements; element (cg, s) of
 * row r takes scale and shift at (r % G) Cg + cg. */
FGK_CLONES static void NF(row_fwd_range)(void *arg, int64_t r0, int64_t r1) {
  const norm_job *J = (const norm_job *)arg;
  const int64_t G = J->G, Cg = J->Cg, S = J->S, L = Cg * S;
  for (int64_t r = r0; r < r1; r++) {
    const NT *xr = (const NT *)J->x + r * L;
    NT *yr = (NT *)J->y + r * L;
    const double mean = NF(lsum)(xr, L) / (double)L;
    const double inv = 1.0 / sqrt(NF(lsqdev)(xr, L, mean) / (double)L + J->eps);
    ((NT *)J->mean)[r] = (NT)mean;
    ((NT *)J->inv)[r] = (NT)inv;
    if (S == 1) {
      /* layer_norm over the last axes: scale and shift vary along the row,
       * so the element pass runs along it, in NT (vectorised), with x -
       * mean kept a difference (a large mean does not cancel). */
      const NT *sc = (const NT *)J->scale + (r % G) * Cg, *sh = (const NT *)J->shift + (r % G) * Cg;
      const NT mt = (NT)mean, it = (NT)inv;
      for (int64_t cg = 0; cg < Cg; cg++)
        yr[cg] = (xr[cg] - mt) * it * sc[cg] + sh[cg];
      continue;
    }
    for (int64_t cg = 0; cg < Cg; cg++) {
      const int64_t ai = (r % G) * Cg + cg;
      const double a = (double)((const NT *)J->scale)[ai] * inv;
      const double b = (double)((const NT *)J->shift)[ai] - mean * a;
      for (int64_t k = 0; k < S; k++)
        yr[cg * S + k] = (NT)((double)xr[cg * S + k] * a + b);
    }
  }
}

/* dx = inv (g - mean(g) - xhat mean(g xhat)) with g = dy scale, per row. */
static void NF(row_dx_range)(void *arg, int64_t r0, int64_t r1) {
  const norm_job *J = (const norm_job *)arg;
  const int64_t G = J->G, Cg = J->Cg, S = J->S, L = Cg * S;
  const NT *scale = (const NT *)J->scale;
  for (int64_t r = r0; r < r1; r++) {
    const NT *xr = (const NT *)J->x + r * L, *dyr = (const NT *)J->dy + r * L;
    NT *dxr = (NT *)J->y + r * L;
    const double mean = (double)((const NT *)J->mean)[r], inv = (double)((const NT *)J->inv)[r];
    double s1 = 0, s2 = 0;
    if (S == 1) { /* layer_norm: a scale per element */
      NF(ldot)(dyr, xr, scale + (r % G) * Cg, L, mean, &s1, &s2);
    } else {
      for (int64_t cg = 0; cg < Cg; cg++) {
        const double sc = (double)scale[(r % G) * Cg + cg];
        double t1 = 0, t2 = 0;
        NF(ldot)(dyr + cg * S, xr + cg * S, NULL, S, mean, &t1, &t2);
        s1 += t1 * sc;
        s2 += t2 * sc;
      }
    }
    s1 /= (double)L;
    s2 *= inv / (double)L;
    for (int64_t cg = 0; cg < Cg; cg++) {
      const double sc = (double)scale[(r % G) * Cg + cg];
      for (int64_t k = 0; k < S; k++) {
        const int64_t j = cg * S + k;
        const double xh = ((double)xr[j] - mean) * inv;
        dxr[j] = (NT)(inv * ((double)dyr[j] * sc - s1 - xh * s2));
      }
    }
  }
}

/* dscale[a] = sum(dy xhat), dshift[a] = sum(dy) over the N rows that use
 * parameter a, for parameters [b0, b1): per parameter, its S contiguous
 * elements in each of those rows, n ascending. */
static void NF(dparam_block)(const norm_job *J, int64_t b0, int64_t b1, double *ds, double *db) {
  const int64_t N = J->N, G = J->G, Cg = J->Cg, S = J->S, L = Cg * S;
  const NT *x = (const NT *)J->x, *dy = (const NT *)J->dy;
  for (int64_t n = 0; n < N; n++)
    for (int64_t ai = b0; ai < b1; ai++) {
      const int64_t r = n * G + ai / Cg, o = r * L + (ai % Cg) * S;
      const double mean = (double)((const NT *)J->mean)[r];
      const double inv = (double)((const NT *)J->inv)[r];
      double s = 0, t = 0;
      NF(ldot)(dy + o, x + o, NULL, S, mean, &t, &s);
      ds[ai - b0] += s * inv;
      db[ai - b0] += t;
    }
}

/* layer_norm's case of the above (G = S = 1): parameter a is column a of
 * every row; the same sums in the same order, without a division per
 * element. */
static void NF(dparam_cols)(const norm_job *J, int64_t b0, int64_t b1, double *ds, double *db) {
  const int64_t L = J->Cg;
  for (int64_t n = 0; n < J->N; n++) {
    const NT *xr = (const NT *)J->x + n * L, *dyr = (const NT *)J->dy + n * L;
    const double mean = (double)((const NT *)J->mean)[n];
    const double inv = (double)((const NT *)J->inv)[n];
    for (int64_t ai = b0; ai < b1; ai++) {
      const double g = (double)dyr[ai];
      db[ai - b0] += g;
      ds[ai - b0] += g * ((double)xr[ai] - mean) * inv;
    }
  }
}

/* dscale and dshift in blocks of NORM_PBLOCK parameters. */
static void NF(row_dparam_range)(void *arg, int64_t a0, int64_t a1) {
  const norm_job *J = (const norm_job *)arg;
  for (int64_t b0 = a0; b0 < a1; b0 += NORM_PBLOCK) {
    const int64_t b1 = a1 - b0 < NORM_PBLOCK ? a1 : b0 + NORM_PBLOCK;
    double ds[NORM_PBLOCK] = {0}, db[NORM_PBLOCK] = {0};
    if (J->G == 1 && J->S == 1)
      NF(dparam_cols)(J, b0, b1, ds, db);
    else
      NF(dparam_block)(J, b0, b1, ds, db);
    for (int64_t ai = b0; ai < b1; ai++) {
      ((NT *)J->dscale)[ai] = (NT)ds[ai - b0];
      ((NT *)J->dshift)[ai] = (NT)db[ai - b0];
    }
  }
}

static void NF(bn_update)(const fg_kctx *ctx, double m) {
  NT *rm = (NT *)ctx->in[0].data, *rv = (NT *)ctx->in[1].data;
  const NT *mean = (const NT *)ctx->in[2].data, *var = (const NT *)ctx->in[3].data;
  const int64_t C = fgk_numel(&ctx->in[0]);
  for (int64_t c = 0; c < C; c++) {
    rm[c] = (NT)((1 - m) * (double)rm[c] + m * (double)mean[c]);
    rv[c] = (NT)((1 - m) * (double)rv[c] + m * (double)var[c]);
  }
}

#undef NF
#undef NCAT
#undef NCAT2
