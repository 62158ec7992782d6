"""MLP with cross-entropy: loss = CE(act(x W1 + b1) W2 + b2, labels), the
mean over the batch. ARGS: relu | tanh."""
import torch
import torch.nn.functional as F

from common import Ref

ref = Ref()
act = {"relu": torch.relu, "tanh": torch.tanh}[ref.args[0]]
x, w1, b1 = ref.param("x"), ref.param("w1"), ref.param("b1")
w2, b2 = ref.param("w2"), ref.param("b2")
labels = ref.ints("labels")
logits = act(x @ w1 + b1) @ w2 + b2
ref.finish(F.cross_entropy(logits, labels, reduction="mean"))
