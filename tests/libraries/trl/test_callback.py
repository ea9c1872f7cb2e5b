"""``ExchangeCallback``'s sums: the parts of the one shared residual, additive over processes."""

import pytest
import torch

from exchange.core.events import SharedResidual, shared_residual, shared_residual_parts
from exchange.core.metric_keys import SHARED_EVENTS, SHARED_KAPPA_SHARE, SHARED_RESIDUAL
from exchange.core.rollout import Rollout

pytestmark = pytest.mark.usefixtures("trl_ready")


def _batch(seed: int, n_groups: int = 3, g: int = 4, t: int = 9):
    gen = torch.Generator().manual_seed(seed)
    n = n_groups * g
    tokens = torch.randint(1, 4, (n, t), generator=gen)
    tokens[:, :2] = tokens[::g, :2].repeat_interleave(g, 0)  # a shared two-token prefix per group
    mask = torch.arange(t)[None] < torch.randint(3, t + 1, (n,), generator=gen)[:, None]
    r = Rollout(tokens=torch.where(mask, tokens, 0), mask=mask, rewards=torch.rand(n, generator=gen),
                group=torch.arange(n) // g, old_logprobs=torch.zeros(n, t))
    return r, torch.where(mask, torch.randn(n, t, generator=gen, dtype=torch.float64), 0.0)


def test_sums_are_the_parts_and_the_metrics_their_value():
    from exchange.libraries.trl.callback import batch_sums, metrics_from_sums

    for seed in range(5):
        r, kappa = _batch(seed)
        parts = shared_residual_parts(kappa, r)
        sums = batch_sums(kappa, r)
        assert sums[:3].tolist() == [parts.abs_K, parts.mass, float(parts.events)]
        assert float(sums[3]) == pytest.approx(float(kappa.abs().sum()), rel=1e-12)  # |kappa| of every token
        metrics = metrics_from_sums(sums)
        assert set(metrics) == {SHARED_RESIDUAL, SHARED_EVENTS, SHARED_KAPPA_SHARE}
        assert metrics[SHARED_RESIDUAL] == parts.value == shared_residual(kappa, r)
        # shared occurrences by the definition, one token at a time: every response of the
        # group has the same tokens through t
        tokens, lengths = r.tokens.tolist(), r.lengths.tolist()
        shared_occ = torch.zeros_like(r.mask)
        for i in range(r.n):
            rows = [j for j in range(r.n) if int(r.group[j]) == int(r.group[i])]
            for t in range(lengths[i]):
                shared_occ[i, t] = all(lengths[j] > t and tokens[j][: t + 1] == tokens[i][: t + 1] for j in rows)
        assert metrics[SHARED_EVENTS] == parts.events == int(shared_occ.sum()) // 4 >= 3 * 2
        # P1 in coefficient space: |kappa| on shared-event occurrences over |kappa| on every token
        want = float(kappa[shared_occ].abs().sum() / kappa.abs().sum())
        assert metrics[SHARED_KAPPA_SHARE] == pytest.approx(want, rel=1e-12)


def test_sums_of_two_processes_give_the_whole_batchs_residual():
    from exchange.libraries.trl.callback import batch_sums, metrics_from_sums

    r, kappa = _batch(7, n_groups=4)
    halves = [torch.arange(0, 8), torch.arange(8, 16)]  # whole groups on each process
    total = sum(batch_sums(kappa[rows], r.select(rows)) for rows in halves)
    whole = shared_residual_parts(kappa, r)
    assert metrics_from_sums(total)[SHARED_RESIDUAL] == pytest.approx(whole.value, rel=1e-12)
    assert metrics_from_sums(total)[SHARED_EVENTS] == whole.events
    assert metrics_from_sums(torch.zeros(4, dtype=torch.float64)) == {
        SHARED_RESIDUAL: SharedResidual(0.0, 0.0, 0).value, SHARED_EVENTS: 0.0, SHARED_KAPPA_SHARE: 0.0}
