"""The TRL shell's scoring outputs, memoised (:func:`exchange.libraries.trl.contact.score`).

The checker evaluates one rollout many times (probes, bulk layouts, shrinking), and TRL's
``_generate_and_score_completions`` gives the same output for the same inputs in the same
arithmetic, so each is computed once. The checker's float64 and float32 twins
(:mod:`exchange.checker.twin`) rewrite dtype requests and the directed float64 twin
(:mod:`exchange.checker.rounding`) moves rounded results: :func:`arithmetic` is part of
every key, so the loss and each twin keep their own entries.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch

__all__ = ["ScoreMemo", "arithmetic", "exact"]


def exact(x: torch.Tensor | None) -> tuple | None:
    """A tensor by value, for a key: dtype, shape and bytes (``None`` stays ``None``)."""
    return None if x is None else (x.dtype, tuple(x.shape), x.detach().cpu().numpy().tobytes())


def arithmetic() -> tuple:
    """The arithmetic code runs in here: the dtypes a float32 and a float64 request get,
    the default tensor's dtype and device (a twin rewrites them), and the value of one
    rounded float64 product, ``0.1 * 3``: the checker's directed float64 twin
    (:mod:`exchange.checker.rounding`) keeps every dtype and moves every rounded result up
    or down by one or two roundings, so only a value tells its four runs from the plain
    twin (without it, the floor's runs read the plain twin's scoring from the memo, and a
    plain run could read a directed run's)."""
    low, high = torch.empty(2, dtype=torch.float32), torch.empty(2, dtype=torch.float64)
    rounded = (torch.full((1,), 0.1, dtype=torch.float64) * 3.0).item()
    return (low.dtype, high.dtype, torch.get_default_dtype(), torch.get_default_device(), rounded)


class ScoreMemo:
    """Outputs by key, least recently used first, at most ``size`` of them. Each entry
    keeps its config (``owner``) alive, so a key holding the config's ``id`` is never
    reused by another config; :meth:`get` checks it is the same object."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.entries: OrderedDict = OrderedDict()

    def get(self, key: tuple, owner: Any) -> dict | None:
        entry = self.entries.get(key)
        if entry is None or entry[0] is not owner:
            return None
        self.entries.move_to_end(key)
        return entry[1]

    def put(self, key: tuple, owner: Any, out: dict) -> dict:
        self.entries[key] = (owner, out)
        if len(self.entries) > self.size:
            self.entries.popitem(last=False)
        return out
