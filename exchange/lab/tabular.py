"""A tabular-softmax policy: one logit row per context, no shared parameters.

The control model beside the transformer (issue 14): a context is the whole token
prefix (prompt and response so far), and each context owns one row of a logit table.
An event's gradient then touches only its own context's row, so any effect of the
mechanism on other contexts (parameter spillover) is absent by construction; what
remains is the direct ``K_e`` effect THEORY.md's T1-T4 describe. Comparing the two
models separates the two.

Rows are assigned on first sight, in order, so a run is deterministic; the mapping is
saved with the weights (``get_extra_state``) so checkpoints resume exactly.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from exchange.errors import InvalidArgument

__all__ = ["TabularLM"]


class TabularLM(nn.Module):
    """``forward(ids: LongTensor[B, S]) -> logits [B, S, V]``; row ``s`` reads context ``ids[:, :s+1]``."""

    def __init__(self, vocab_size: int, capacity: int = 65536) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.capacity = capacity
        self.table = nn.Parameter(torch.zeros(capacity, vocab_size))
        self._index: dict[tuple[int, ...], int] = {}

    def _row(self, key: tuple[int, ...]) -> int:
        i = self._index.get(key)
        if i is None:
            i = len(self._index)
            if i >= self.capacity:
                raise InvalidArgument(
                    f"TabularLM saw more than capacity={self.capacity} contexts; raise [model] table_size."
                )
            self._index[key] = i
        return i

    def forward(self, ids: Tensor) -> Tensor:
        b, s = ids.shape
        rows = torch.empty(b, s, dtype=torch.long)
        for r, seq in enumerate(ids.tolist()):
            for t in range(s):
                rows[r, t] = self._row(tuple(seq[: t + 1]))
        return self.table[rows]  # [B, S, V]

    def get_extra_state(self):
        return [list(k) for k in self._index]  # in row order

    def set_extra_state(self, state) -> None:
        self._index = {tuple(k): i for i, k in enumerate(state)}
