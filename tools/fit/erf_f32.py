#!/usr/bin/env python3
"""Fits the coefficients of fgk_erff (kernels/cpu/cpu_kernels.h).

erf in f32 is computed in two pieces, each a polynomial evaluated in f32 by
Horner's rule:
  |x| < SPLIT:         erf(x) = x + x * P(x^2)   (P(0) ~ 2/sqrt(pi) - 1, so
                       the leading term x is exact)
  SPLIT <= |x| < CAP:  erf(x) = 1 - Q(|x| - MID)  (Q fits erfc)
  |x| >= CAP:          1 (erfc(CAP) is below half an ulp of 1)

Each polynomial is a near-minimax fit on Chebyshev nodes: weighted least
squares with Lawson's reweighting, the error measured relative to erf(x)/x
for P and absolutely for Q (erf is about 1 there). Run it with NumPy; it
prints both coefficient tables (lowest degree first) as the header has
them.
"""
import math

import numpy as np

from fit_common import lawson, nodes, table

SPLIT, CAP, DEG_P, DEG_Q = 1.0, 3.85, 6, 13
MID = round((SPLIT + CAP) / 2, 3)

erf = np.vectorize(math.erf)
erfc = np.vectorize(math.erfc)


q = nodes(0.0, SPLIT * SPLIT, 3000)
x = np.sqrt(q)
p = lawson(np.vander(q, DEG_P + 1, increasing=True), erf(x) / x - 1, erf(x) / x)
x = nodes(SPLIT, CAP, 3000)
u = x - MID
c = lawson(np.vander(u, DEG_Q + 1, increasing=True), erfc(x), np.ones_like(x))
print("/* split %g, cap %g, mid %g */" % (SPLIT, CAP, MID))
print(table("fgk_erf_p", p))
print(table("fgk_erf_q", c))
