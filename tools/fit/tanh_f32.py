#!/usr/bin/env python3
"""Fits the coefficients of fgk_tanhf (kernels/cpu/cpu_kernels.h).

tanh in f32 is computed in two pieces:
  |x| < SPLIT:   tanh(x) = x + x * P(x^2), P a polynomial evaluated in f32 by
                 Horner's rule (P(0) = 0 would be -x^2/3 near 0, so the
                 leading term x is exact);
  |x| >= SPLIT:  tanh(|x|) = 1 - 2 / (e^(2|x|) + 1) with fgk_expf, which
                 loses no more than a bit to cancellation past SPLIT and
                 rounds to 1 from |x| = 9 on;
  the sign copied from x.

P is a near-minimax fit on Chebyshev nodes (weighted least squares with
Lawson's reweighting), its error measured relative to tanh(x)/x. Run it
with NumPy; it prints the coefficient table (lowest degree first).
"""
import numpy as np

from fit_common import lawson, nodes, table

SPLIT, DEG = 0.625, 5

q = nodes(0.0, SPLIT * SPLIT, 3000)
x = np.sqrt(q)
f = np.tanh(x) / x
p = lawson(np.vander(q, DEG + 1, increasing=True)[:, 1:], f - 1, f)
err = np.max(np.abs(np.vander(q, DEG + 1, increasing=True)[:, 1:] @ p - (f - 1)) / f)
print("/* split %g, max relative error %.2e */" % (SPLIT, err))
print(table("fgk_tanh_p", p))
