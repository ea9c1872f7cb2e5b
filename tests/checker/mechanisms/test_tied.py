"""The tied-group reading (exchange.checker.mechanisms.tied) from planted coefficients:
an engine that returns ``kappa[i, t] = w (A_i - m)`` on every token for a planted
advantage ``A`` and a constant event term ``m`` (no loss function, no autograd), run
through the tied-group probe. THEORY.md section 2: a tied group whose rewards equal
the baseline rewards the loss subtracts has ``A = 0`` by the estimator's definition,
and (E) demands ``kappa = 0`` there; a remainder is an additive term (M6)."""

from __future__ import annotations

import torch

from exchange.checker.properties.null_on_equal_rewards import PROPERTY

BETA = 0.05


class Planted:
    """``engine(rollouts) -> [kappa [N, T]]`` from ``advantage(rollout) -> [N]``,
    ``kappa = (A_i - term) / tokens`` on the response's tokens (a batch token count);
    ``drop_truncated``: truncated responses dropped after the advantage (every one of
    their coefficients 0, a mask after centring)."""

    precision = "float64"
    loss_fn = None

    def __init__(self, advantage, term: float = 0.0, drop_truncated: bool = False) -> None:
        self.advantage, self.term, self.drop_truncated = advantage, term, drop_truncated

    def __call__(self, rollouts):
        out = []
        for r in rollouts:
            m = r.mask.to(torch.float64)
            if self.drop_truncated and r.truncated is not None:
                m = m * (~r.truncated).to(torch.float64)[:, None]
            out.append((self.advantage(r)[:, None] - self.term) * m / m.sum())
        return out


def greedy(r):
    return r.rewards - r.baseline_rewards


def greedy_length_shaped(r):
    return r.rewards - r.lengths.to(torch.float64) / r.lengths.max() - r.baseline_rewards


def centred_at_half(r):
    """An uncentred advantage that ignores the baseline rewards: ``r - 1/2`` (0 at the
    reward 1/2, wherever the baseline rewards are)."""
    return r.rewards - r.rewards.new_full(r.rewards.shape, 0.5)


def negative_only(r):
    return torch.where(r.rewards > 0.5, torch.zeros_like(r.rewards), -torch.ones_like(r.rewards))


def _run(engine):
    """The mechanisms found by the on-policy tied-group probes (a tied group at 0, and one
    at 1 with a truncated response: whichever keeps coefficients there), and the (E)
    evaluations they set."""
    names, evaluations, found = set(), set(), []
    for probe in PROPERTY.probes:
        if probe.off_policy_only:
            continue
        result = PROPERTY.run_probe(engine, probe)
        names |= {e.mechanism for e in result.found}
        evaluations |= set(result.evaluations)
        found += result.found
    return names, evaluations, found


def test_greedy_baseline_with_a_constant_term_is_m4_and_m6_and_breaks_exchangeability():
    names, evaluations, found = _run(Planted(greedy, BETA))
    assert names == {"M4", "M6"}, found
    assert "baseline reward" in " ".join(e.pattern for e in found if e.mechanism == "M6")
    assert {"exchangeable", "shared_cancellation"} <= evaluations


def test_greedy_baseline_alone_is_m4_with_exchangeability_kept():
    names, evaluations, found = _run(Planted(greedy))
    assert names == {"M4"}, found
    assert "exchangeable" not in evaluations


def test_greedy_baseline_with_a_shaping_is_m7_not_m6():
    names, _, found = _run(Planted(greedy_length_shaped))
    assert "M7" in names and "M6" not in names, found


def test_greedy_baseline_with_a_shaping_and_truncated_responses_dropped_is_m7_not_m6():
    """A length shaping and a mask after centring (issue 45, seed-2026 compositions #147,
    #175): under a length limit only the two responses of length 4 stay, both shaped by
    the same ``s``, so their coefficients ``w (r + s - b)`` cross zero at one level,
    ``b - s``, away from the baseline, and do not move when rewards and baseline rewards
    move together. The baseline is no zero of a shaped advantage (the layout without the
    limit shows each length its own crossing): that crossing scales with the advantage's
    slope and is no event term. With a constant term beside the shaping, on-policy its
    ``-beta`` is one more constant of ``s`` (the derivation folds it into the advantages,
    composition #144, #172, #205, #271)."""
    for term in (0.0, BETA):
        names, _, found = _run(Planted(greedy_length_shaped, term, drop_truncated=True))
        assert "M7" in names and "M6" not in names, (term, found)


def test_greedy_baseline_with_a_constant_term_and_truncated_responses_dropped_is_still_m6():
    """Without a shaping every kept response crosses zero at ``b + beta`` on both layouts:
    the advantage is 0 at the baseline by definition and the remainder is an event term."""
    names, _, found = _run(Planted(greedy, BETA, drop_truncated=True))
    assert names == {"M4", "M6"}, found


def test_uncentred_advantages_that_ignore_the_baseline_have_no_known_zero():
    """``r - 1/2`` gives the tied coefficients the same shape as a greedy baseline with a
    constant term, but moving the baseline rewards moves nothing: no level is known to
    zero its advantage, so its one crossing is an offset of the advantages (M4)."""
    for advantage in (centred_at_half, negative_only):
        names, evaluations, found = _run(Planted(advantage))
        assert names == {"M4"}, (advantage.__name__, found)
        assert "exchangeable" not in evaluations
