"""Targeted probes (THEORY.md section 4): small hand-built groups that change one thing
each, so that a property they break gives evidence for a mechanism
(:mod:`exchange.checker.mechanisms`). The probes belong to their property's module
(:mod:`exchange.checker.properties`); this module runs those that apply to a regime.
A probe whose group the loss drops whole (every coefficient of a mixed group exactly 0:
a filter on the group's rewards, a group constant in THEORY.md, not a mechanism) is no
evidence: it is run again with its rewards mapped affinely onto ranges the loss keeps
(:data:`_KEPT_RANGES`), and said so when none is kept (:attr:`ProbeResult.dropped`).
"""

from __future__ import annotations

from dataclasses import replace

from torch import Tensor

from exchange.checker.cases import build
from exchange.checker.properties import PROBES, PROPERTIES, ProbeResult
from exchange.checker.properties.base import Probe
from exchange.checker.properties.residuals import second_rewards, tied_groups
from exchange.core.coefficients import Engine
from exchange.core.rollout import Rollout
from exchange.core.vocabulary import Regime

__all__ = ["PROBES", "RewardDependent", "KeptGroups", "dropped_groups", "run_probes"]

# The reward ranges a dropped probe is mapped onto, in order: binary RLVR rewards, then
# rewards of both signs, then a band inside (0, 1) (filters keep 0 < mean < 1, or a
# positive mean, or rewards within a clip). An increasing affine map keeps the order of
# the rewards and the sign of every centred advantage, so every pattern a probe reads.
_KEPT_RANGES = ((0.0, 1.0), (-1.0, 1.0), (0.25, 0.75))


class RewardDependent:
    """``engine`` (called: the real coefficients, for the batches a mechanism builds for
    itself) with :meth:`with_raw`, the part of the coefficients that moves with the
    rewards: ``kappa(R) - kappa(R')``, ``R'`` =
    :func:`~exchange.checker.properties.residuals.second_rewards` ``(R)``, a second reward
    vector with the same signs of centred advantages (THEORY.md section 2). An additive
    event term (M6) and any shift of the advantages that does not depend on the rewards
    cancel in the difference, and every group stays mixed; what is left is ``w_i (A_i(R) -
    A_i(R'))`` times the surrogate's factor, which the probes' patterns read unhidden."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.loss_fn = engine.loss_fn
        self.precision = engine.precision

    def __call__(self, rollouts: list[Rollout]) -> list[Tensor]:
        return self.engine(rollouts)

    def with_raw(self, rollouts: list[Rollout]) -> tuple[list[Tensor], list[Tensor]]:
        """``(kappa(R) per rollout, the reward-dependent part per rollout)``."""
        other = [r.with_fields({"rewards": second_rewards(r.rewards, r)}) for r in rollouts]
        kappas = self.engine(list(rollouts) + other)
        n = len(rollouts)
        return kappas[:n], [a - b for a, b in zip(kappas[:n], kappas[n:])]


def dropped_groups(rollout: Rollout, kappa: Tensor) -> bool:
    """Whether the loss dropped a mixed group of ``rollout`` whole: every coefficient of
    its rows exactly 0 (``kappa [N, T]``), its rewards not all equal."""
    mixed = ~tied_groups(rollout.rewards[None], rollout)[0]
    return any(bool((kappa[rollout.group_index == g] == 0).all()) for g in mixed.nonzero().flatten().tolist())


def _mapped(r, low: float, high: float, lo: float, hi: float):
    """``r`` (a reward or a tensor of them) mapped by the increasing affine map taking
    ``[low, high]`` onto ``[lo, hi]``."""
    return lo + (r - low) * (hi - lo) / (high - low)


def _kept(engine: Engine, rollout: Rollout) -> tuple[tuple[float, float], Tensor] | None:
    """The first of :data:`_KEPT_RANGES` whose rewards (``rollout``'s mapped onto it) the
    loss keeps every mixed group at, with the coefficients there; None when none is kept."""
    r = rollout.rewards
    for lo, hi in _KEPT_RANGES:
        moved = rollout.with_fields({"rewards": _mapped(r, float(r.min()), float(r.max()), lo, hi)})
        (kappa,) = engine([moved])
        if not dropped_groups(moved, kappa):
            return (lo, hi), kappa
    return None


class KeptGroups:
    """An engine that answers a rollout whose mixed group the loss drops whole with its
    coefficients at the rewards :func:`_kept` finds (the batches a mechanism builds for
    itself)."""

    def __init__(self, engine: Engine) -> None:
        # ``unmapped``: the loss's coefficients at the rewards asked for, for a property's
        # own comparison of reward vectors ((Z)'s: a group the loss zeroes at some of them
        # and not at others is what it reads, not a dropped probe)
        self.inner = self.unmapped = engine
        self.loss_fn = engine.loss_fn
        self.precision = engine.precision

    def __call__(self, rollouts: list[Rollout]) -> list[Tensor]:
        kappas = list(self.inner(rollouts))
        for k, (rollout, kappa) in enumerate(zip(rollouts, kappas)):
            if float(rollout.rewards.max()) > float(rollout.rewards.min()) and dropped_groups(rollout, kappa):
                found = _kept(self.inner, rollout)
                kappas[k] = kappa if found is None else found[1]
        return kappas


def _kept_probe(engine: Engine, probe: Probe) -> tuple[Probe, str]:
    """``(probe, "")`` when the loss keeps every mixed group of the probe's case; else the
    probe with its rewards mapped onto the range :func:`_kept` finds, or ``(probe, why it
    is no evidence)`` when none is kept."""
    rollout = build(probe.case)
    (kappa,) = engine([rollout])
    if not dropped_groups(rollout, kappa):
        return probe, ""
    found = _kept(engine, rollout)
    if found is None:
        return probe, (f"the loss drops the probe's group whole at its rewards and at every range tried "
                       f"{list(_KEPT_RANGES)} (a filter on the group's rewards): no evidence")
    (lo, hi), low, high = found[0], float(rollout.rewards.min()), float(rollout.rewards.max())
    return replace(probe, case=replace(probe.case, groups=tuple(
        replace(g, rewards=tuple(_mapped(r, low, high, lo, hi) for r in g.rewards)) for g in probe.case.groups))), ""


def _run(engine: Engine, probe: Probe) -> ProbeResult:
    runner = probe.run or PROPERTIES[probe.property_name].run_probe
    return runner(RewardDependent(engine) if probe.reward_dependent else engine, probe)


def run_probes(engine: Engine, regime: str) -> list[ProbeResult]:
    """Every probe that applies to ``regime``, run by its property (on the
    reward-dependent coefficients where the probe asks for them); a probe whose
    evaluations show a mixed group dropped whole runs again on rewards the loss keeps
    (:func:`_kept_probe`). The evaluations are the check: a loss that keeps the probe's
    groups (every loss but a filter) costs no extra batch."""
    off = Regime(regime).off_policy
    out = []
    for p in PROBES:
        if p.off_policy_only and not off:
            continue
        result, why = _run(engine, p), ""
        if any(dropped_groups(ev.rollout, ev.kappa) for ev in result.evaluations.values()):
            kept, why = _kept_probe(engine, p)
            if kept is not p:
                result = _run(KeptGroups(engine), kept)
                result.probe = kept
        result.dropped = why
        if why:
            result.found = []
        out.append(result)
    return out
