#!/usr/bin/env python3
"""Reference values for tests/kernels/test_random.c: Philox4x32-10 written
again here from the paper (Python integers, no shared code), checked against
Random123's known-answer vectors, then the random ops' documented mappings
(kernels/philox.h) evaluated in Python floats, f32 values rounded to nearest by struct.

Run: python3 tests/gen/random_ref.py
"""
import math
import struct

M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
MASK = 0xFFFFFFFF


def philox(ctr, key):
    c = list(ctr)
    k0, k1 = key
    for r in range(10):
        p0, p1 = M0 * c[0], M1 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & MASK, (p0 >> 32) ^ c[3] ^ k1, p0 & MASK]
        k0, k1 = (k0 + W0) & MASK, (k1 + W1) & MASK
    return c


# Random123 tests/kat_vectors, the philox4x32 10 lines.
assert philox([0, 0, 0, 0], [0, 0]) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
assert philox([MASK] * 4, [MASK] * 2) == [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]
assert philox([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0]) == [
    0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]


def block(seed, stream, draw, b):
    return philox([b & MASK, b >> 32, stream, draw], [seed & MASK, (seed >> 32) & MASK])


def u24(x):
    return (x >> 8) * 2.0**-24


def u53(a, b):
    return ((a >> 5) * 2.0**26 + (b >> 6)) * 2.0**-53


def open32(x):
    return x * 2.0**-32 + 2.0**-33


def open53(a, b):
    return u53(a, b) + 2.0**-54


def bm(u1, u2):
    r = math.sqrt(-2.0 * math.log(u1))
    t = 6.283185307179586476925 * u2
    return r * math.cos(t), r * math.sin(t)


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


SEED, STREAM = 0x0123456789ABCDEF, 7
out = {}
w = [block(SEED, STREAM, 0, b) for b in range(2)]
out["uniform_f32"] = [f32(-2.0 + 5.0 * u24(x)) for x in w[0] + w[1][:2]]
out["uniform_f64"] = [-2.0 + 5.0 * u53(ws[0], ws[1]) for ws in (w[0][:2], w[0][2:], w[1][:2])]
z = []
for ws in w:
    z += list(bm(open32(ws[0]), open32(ws[1]))) + list(bm(open32(ws[2]), open32(ws[3])))
out["normal_f32"] = [f32(1.0 + 2.0 * v) for v in z[:6]]
z64 = []
for ws in w:
    z64 += list(bm(open53(ws[0], ws[1]), open53(ws[2], ws[3])))
out["normal_f64"] = [1.0 + 2.0 * v for v in z64[:3]]


def trunc(i, is64):
    for d in range(16):
        ws = block(SEED, STREAM, d, i)
        if is64:
            cand = bm(open53(ws[0], ws[1]), open53(ws[2], ws[3]))
        else:
            cand = bm(open32(ws[0]), open32(ws[1])) + bm(open32(ws[2]), open32(ws[3]))
        for c in cand:
            if abs(c) < 2.0:
                return c
    return 0.0


out["trunc_f32"] = [f32(1.0 + 2.0 * trunc(i, False)) for i in range(5)]
out["trunc_f64"] = [1.0 + 2.0 * trunc(i, True) for i in range(5)]
# FNV-1a (32-bit) of the node name "r": the stream when the attribute is -1.
h = 2166136261
for ch in b"r":
    h = ((h ^ ch) * 16777619) & MASK
out["fnv_r"] = [h]
for k, v in out.items():
    print(k, ", ".join(repr(x) for x in v))
