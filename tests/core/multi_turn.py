"""The planted multi-turn batch (a response mask with holes, issue 41) that the events tests
and the verl adapter tests derive their expectations from by hand."""

from __future__ import annotations

import torch

from exchange import Rollout


def multi_turn_batch() -> Rollout:
    """Two groups. Policy tokens a=1 b=2, a tool's output (X=8 Y=9 or X Z=7, mask 0), then
    policy tokens again. Group 0 (rows 0-2): the same tool output in every row, so the
    token c=3 after it is one event in all three (shared). Group 1 (rows 3-4): the tool
    outputs differ (X Y vs X Z), so the two c's follow different prefixes: two events."""
    tokens = torch.tensor([[1, 2, 8, 9, 3, 4],
                           [1, 2, 8, 9, 3, 5],
                           [1, 2, 8, 9, 3, 0],
                           [1, 2, 8, 9, 3, 0],
                           [1, 2, 8, 7, 3, 0]])
    mask = torch.tensor([[1, 1, 0, 0, 1, 1],
                         [1, 1, 0, 0, 1, 1],
                         [1, 1, 0, 0, 1, 0],
                         [1, 1, 0, 0, 1, 0],
                         [1, 1, 0, 0, 1, 0]], dtype=torch.bool)
    return Rollout(tokens=tokens, mask=mask, rewards=torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0], dtype=torch.float64),
                   group=torch.tensor([0, 0, 0, 1, 1]), old_logprobs=torch.full((5, 6), -0.5, dtype=torch.float64))
