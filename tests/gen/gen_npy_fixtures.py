#!/usr/bin/python3
"""Writes the .npy fixtures under tests/data/npy/ read by tests/schema/test_npy.c.

Run with /usr/bin/python3 (it has NumPy): /usr/bin/python3 tests/gen/gen_npy_fixtures.py
The values are simple closed forms (aranges, listed constants) so that the C
test states them independently; NumPy's job here is to produce the bytes,
headers and padding exactly as a real user's files have them.
"""
import os

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "npy")


def save(name, arr, version=None, allow_pickle=False):
    path = os.path.join(OUT, name)
    with open(path, "wb") as f:
        if version is None:
            np.lib.format.write_array(f, arr, allow_pickle=allow_pickle)
        else:
            np.lib.format.write_array(f, arr, version=version, allow_pickle=allow_pickle)


def main():
    os.makedirs(OUT, exist_ok=True)
    # Readable: every dtype flowgraph supports.
    save("f32_2x3.npy", np.arange(6, dtype="<f4").reshape(2, 3) * np.float32(0.5))
    save("f64_4.npy", np.array([1.5, -2.25, 1e300, -0.0], dtype="<f8"))
    save("i32_2x2x2.npy", (np.arange(8, dtype="<i4") - 4).reshape(2, 2, 2))
    save("i64_3.npy", np.array([-(2**40), 0, 2**62], dtype="<i8"))
    save("bool_5.npy", np.array([True, False, True, True, False]))
    save("f64_scalar.npy", np.array(3.25, dtype="<f8"))
    save("f32_0x3.npy", np.zeros((0, 3), dtype="<f4"))
    save("f32_rank8.npy", np.arange(8, dtype="<f4").reshape(1, 2, 1, 2, 1, 2, 1, 1))
    save("f32_v2.npy", np.arange(4, dtype="<f4"), version=(2, 0))
    save("f32_v3.npy", np.arange(4, dtype="<f4"), version=(3, 0))
    # Refused: each with a message naming the problem.
    save("bad_big_endian.npy", np.arange(3, dtype=">f4"))
    save("bad_fortran.npy", np.asfortranarray(np.arange(6, dtype="<f8").reshape(2, 3)))
    save("bad_u2.npy", np.arange(3, dtype="<u2"))
    save("bad_c8.npy", np.arange(3, dtype="<c8"))
    save("bad_object.npy", np.array([1, "a"], dtype=object), allow_pickle=True)
    save("bad_structured.npy", np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]))


if __name__ == "__main__":
    main()
