"""Near-minimax polynomial fits shared by the scripts of tools/fit/."""
import numpy as np


def nodes(lo, hi, n):
    """n Chebyshev nodes on [lo, hi]."""
    k = np.arange(n)
    return (lo + hi) / 2 + (hi - lo) / 2 * np.cos((2 * k + 1) * np.pi / (2 * n))


def lawson(v, f, scale, iters=60):
    """Coefficients c minimising max |(v c - f) / scale| (approximately)."""
    w = np.ones(len(f))
    for _ in range(iters):
        sw = np.sqrt(w)
        c, *_ = np.linalg.lstsq(v * (sw / scale)[:, None], f * sw / scale, rcond=None)
        w = w * np.abs(v @ c - f) / scale
        w /= w.sum()
    return c


def table(name, c):
    """c as a C array of floats, as the header has it."""
    return "static const float %s[%d] = {%s};" % (
        name, len(c), ", ".join("%.9ef" % v for v in c))
