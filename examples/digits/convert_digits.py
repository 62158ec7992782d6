#!/usr/bin/python3
"""Converts the digits data set shipped with Debian's python3-sklearn into the
.npy files of examples/digits/data/ (see README.md there).

The CSV is read directly (gzip + NumPy), so scikit-learn itself is not
imported. Each row holds 64 pixel counts in 0..16 and the class label last.

    /usr/bin/python3 examples/digits/convert_digits.py [SRC.csv.gz] [OUT_DIR]

Writes train_x.npy / test_x.npy (float32 [N, 64], pixel / 16, so in [0, 1])
and train_y.npy / test_y.npy (int32 [N], 0..9). The split is a fixed 80/20:
numpy.random.default_rng(0).permutation(1797), the first 1437 indices train,
the remaining 360 test. The output is byte-identical on every run.
"""
import gzip
import os
import sys

import numpy as np

DEFAULT_SRC = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"
N_TRAIN = 1437  # round(0.8 * 1797)


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_SRC
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "data")
    with gzip.open(src, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.float64)
    if rows.shape != (1797, 65):
        sys.exit(f"{src}: expected 1797 rows of 65 values, got {rows.shape}")
    pixels, labels = rows[:, :64], rows[:, 64]
    if pixels.min() < 0 or pixels.max() > 16 or set(np.unique(labels)) != set(range(10)):
        sys.exit(f"{src}: pixel values outside 0..16 or labels outside 0..9")
    x = (pixels / 16.0).astype(np.float32)
    y = labels.astype(np.int32)
    perm = np.random.default_rng(0).permutation(len(y))
    train, test = perm[:N_TRAIN], perm[N_TRAIN:]
    os.makedirs(out, exist_ok=True)
    for name, arr in (("train_x", x[train]), ("train_y", y[train]),
                      ("test_x", x[test]), ("test_y", y[test])):
        np.save(os.path.join(out, name + ".npy"), np.ascontiguousarray(arr))
        print(f"{name}.npy: {arr.dtype} {list(arr.shape)}")


if __name__ == "__main__":
    main()
