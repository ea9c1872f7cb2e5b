"""The property registry and its residuals, against plain oracles."""

from __future__ import annotations

import numpy as np
import torch

from exchange.checker.cases import Case, GroupConfig, build
from exchange.checker.properties import PROPERTIES
from exchange.checker.properties.residuals import cancellation_mismatches, direction_spread, tied_groups
from exchange.checker.properties.shared_cancellation import event_residuals, residual
from exchange.checker.tolerances import RTOL_CANCEL, RTOL_DIRECTION, ZERO_COLUMN
from exchange.core.events import events
from exchange.core.vocabulary import PROPERTY_NAMES


def test_the_registry_is_the_vocabulary():
    assert tuple(PROPERTIES) == PROPERTY_NAMES


def test_cancellation_residual_is_the_per_event_share_that_does_not_cancel():
    r = build(Case(groups=(GroupConfig(((1, 2), (1, 3)), (1.0, 0.0)),)))
    ev = events(r)
    kappa = torch.zeros_like(r.old_logprobs)
    kappa[0, 0], kappa[1, 0] = 0.5, -0.25  # shared event: K = 0.25 of mass 0.75
    tied = tied_groups(r.rewards[None], r)

    def no_reference(rows):
        raise AssertionError("no group is tied: the reference coefficients are never asked for")

    def cancel(k):
        return float(residual(event_residuals(k[None], r, ev, tied, no_reference))[0])

    assert abs(cancel(kappa) - 0.25 / 0.75) < 1e-9
    assert len(cancellation_mismatches(r, kappa, ev, ev.shared, RTOL_CANCEL)) == 1
    kappa[1, 0] = -0.5  # cancels exactly
    assert cancel(kappa) == 0.0
    assert cancellation_mismatches(r, kappa, ev, ev.shared, RTOL_CANCEL) == []


def test_direction_spread_separates_parallel_from_orthogonal_columns():
    a = torch.tensor([1.0, -1.0, 0.0], dtype=torch.float64)
    assert float(direction_spread(torch.stack([a, 3 * a])[None])[0][0]) < RTOL_DIRECTION  # a group constant
    b = torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64)
    assert float(direction_spread(torch.stack([a, b])[None])[0][0]) > 0.1  # orthogonal columns are flagged


def _plain_spread(cols: np.ndarray) -> float:
    """The definition, one configuration at a time: normalise, drop columns shorter than
    ZERO_COLUMN x the longest, then the largest sine to the principal direction."""
    if not np.isfinite(cols).all():
        return float("inf")
    norms = np.linalg.norm(cols, axis=1)
    keep = norms > ZERO_COLUMN * norms.max() if norms.max() > 0 else np.zeros(len(cols), bool)
    if keep.sum() < 2:
        return 0.0
    unit = cols[keep] / norms[keep, None]
    direction = np.linalg.svd(unit, full_matrices=False)[2][0]
    return float(np.sqrt(np.clip(1 - (unit @ direction) ** 2, 0, None)).max())


def test_batched_direction_spread_is_the_plain_one_on_every_configuration():
    """Every mismatch is reported at once, not the first. Tolerance 1e-7 absolute: for
    parallel columns the sine is ``sqrt(1 - cos^2)``, which turns a 1e-16 difference in
    the SVD into ~3e-8 (RTOL_DIRECTION is 1e-6)."""
    gen = torch.Generator().manual_seed(0)
    mat = torch.randn(64, 5, 4, generator=gen, dtype=torch.float64)
    mat[::4, 1:] = mat[::4, :1] * torch.rand(16, 4, 1, generator=gen, dtype=torch.float64)  # parallel columns
    mat[1::8, 2] = 0.0  # a zero column is dropped
    mat[3, 0, 0] = float("nan")
    got = direction_spread(mat)[0]
    wrong = []
    for k in range(mat.shape[0]):
        want = _plain_spread(mat[k].numpy())
        g = float(got[k])
        if not (g == want or abs(g - want) <= 1e-7):
            wrong.append(f"configuration {k}: batched {g:.3g}, plain {want:.3g}")
    assert not wrong, "\n".join(wrong)
