"""The property registry and its residuals, against plain oracles."""

from __future__ import annotations

import torch

from exchange.checker.cases import Case, GroupConfig, build
from exchange.checker.properties import PROPERTIES, cancellation, direction_spread
from exchange.core.events import events
from exchange.core.vocabulary import PROPERTY_NAMES


def test_the_registry_is_the_vocabulary():
    assert tuple(PROPERTIES) == PROPERTY_NAMES


def test_cancellation_residual_is_the_per_event_share_that_does_not_cancel():
    r = build(Case(groups=(GroupConfig(((1, 2), (1, 3)), (1.0, 0.0)),)))
    ev = events(r)
    kappa = torch.zeros_like(r.old_logprobs)
    kappa[0, 0], kappa[1, 0] = 0.5, -0.25  # shared event: K = 0.25 of mass 0.75
    res, mismatches = cancellation(r, kappa, ev, ev.shared)
    assert abs(res - 0.25 / 0.75) < 1e-9 and len(mismatches) == 1
    kappa[1, 0] = -0.5  # cancels exactly
    res, mismatches = cancellation(r, kappa, ev, ev.shared)
    assert res == 0.0 and mismatches == []


def test_direction_spread_separates_parallel_from_orthogonal_columns():
    a = torch.tensor([1.0, -1.0, 0.0], dtype=torch.float64)
    from exchange.checker.properties import RTOL_DIRECTION

    assert direction_spread([a, 3 * a])[0] < RTOL_DIRECTION  # a group constant is never flagged
    b = torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64)
    assert direction_spread([a, b])[0] > 0.1  # orthogonal columns are
