"""Shared by the torch reference scripts (tests/autodiff/test_grad_torch.c runs them).

Usage of every script: python3 -B SCRIPT DIR [ARGS...]. The C test writes the
inputs as DIR/<name>.npy; the script rebuilds the same computation in torch,
in float64 whatever the input dtype (f32 inputs widen exactly, so the f32
cases are judged against the exact gradient of the same numbers), calls
backward and writes DIR/loss.npy and DIR/grad_<name>.npy for every input it
differentiated.
"""
import os
import sys

import numpy as np
import torch

torch.set_num_threads(1)


class Ref:
    def __init__(self):
        if len(sys.argv) < 2:
            sys.exit("usage: %s DIR [ARGS...]" % sys.argv[0])
        self.dir = sys.argv[1]
        self.args = sys.argv[2:]
        self.params = {}

    def _load(self, name):
        return np.load(os.path.join(self.dir, name + ".npy"))

    def param(self, name):
        """A float input we differentiate with respect to (as float64)."""
        t = torch.tensor(self._load(name).astype(np.float64), requires_grad=True)
        self.params[name] = t
        return t

    def const(self, name):
        """A float input that gets no gradient (as float64)."""
        return torch.tensor(self._load(name).astype(np.float64))

    def ints(self, name):
        """Integer labels or indices (torch wants int64 for both)."""
        return torch.tensor(self._load(name).astype(np.int64))

    def finish(self, loss):
        loss.backward()
        self._save("loss", loss)
        for name, t in self.params.items():
            self._save("grad_" + name, t.grad)

    def _save(self, name, t):
        # np.array, not np.ascontiguousarray, which turns a 0-d loss into [1].
        np.save(os.path.join(self.dir, name + ".npy"),
                np.array(t.detach().numpy(), dtype=np.float64, order="C"))
