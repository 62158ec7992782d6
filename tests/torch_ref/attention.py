"""Single-head softmax attention over a batch:
Q = x Wq, K = x Wk, V = x Wv, P = softmax(Q K^T / sqrt(d), last axis),
out = P V, loss = sum(out * r) + mean(out * out)."""
import math

import torch

from common import Ref

ref = Ref()
x, wq, wk, wv = ref.param("x"), ref.param("wq"), ref.param("wk"), ref.param("wv")
r = ref.param("r")
q, k, v = x @ wq, x @ wk, x @ wv
scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
out = torch.softmax(scores, dim=-1) @ v
ref.finish((out * r).sum() + (out * out).mean())
