"""Embedding bag by mean: e = mean over axis 1 of table[idx] ([N, L, D] ->
[N, D]), logits = e W + b, loss = CE(logits, labels), mean over N."""
import torch.nn.functional as F

from common import Ref

ref = Ref()
table, w, b = ref.param("table"), ref.param("w"), ref.param("b")
idx, labels = ref.ints("idx"), ref.ints("labels")
e = table[idx].mean(dim=1)
ref.finish(F.cross_entropy(e @ w + b, labels, reduction="mean"))
