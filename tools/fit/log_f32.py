#!/usr/bin/env python3
"""Fits the coefficients of fgk_logf (kernels/cpu/cpu_kernels.h).

x = m 2^e with m in [sqrt(1/2), sqrt(2)), f = m - 1; then
  log(x) = e ln 2 + f - f^2 / 2 + f^3 P(f),
P a polynomial evaluated in f32 by Horner's rule, fitted near-minimax on
Chebyshev nodes (weighted least squares with Lawson's reweighting) with
the error measured relative to log1p(f). Run it with NumPy; it prints the
coefficient table (lowest degree first).
"""
import math

import numpy as np

from fit_common import lawson, nodes, table

DEG = 7
LO, HI = math.sqrt(0.5) - 1, math.sqrt(2.0) - 1

f = nodes(LO, HI, 4000)
f = f[np.abs(f) > 1e-6]
target = (np.log1p(f) - f + f * f / 2) / f**3
v = np.vander(f, DEG + 1, increasing=True)
p = lawson(v, target, np.abs(np.log1p(f)) / np.abs(f**3))
err = np.max(np.abs((v @ p) * f**3 - (np.log1p(f) - f + f * f / 2)) / np.abs(np.log1p(f)))
print("/* max relative error %.2e */" % err)
print(table("fgk_log_p", p))
