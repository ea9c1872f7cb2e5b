"""Targeted probes (THEORY.md section 4): small hand-built groups that change one thing
each, so that a property they break names its mechanism.

The probes and how each runs belong to their property's module
(:mod:`exchange.checker.properties`); this module runs the ones that apply to a regime.
"""

from __future__ import annotations

from torch import Tensor

from exchange.checker.properties import PROBES, PROPERTIES, ProbeResult
from exchange.checker.properties.residuals import second_rewards
from exchange.core.coefficients import Engine
from exchange.core.rollout import Rollout
from exchange.core.vocabulary import Regime

__all__ = ["PROBES", "RewardDependent", "run_probes"]


class RewardDependent:
    """An engine for the part of the coefficients that moves with the rewards:
    ``kappa(R) - kappa(R')`` per rollout, ``R'`` =
    :func:`~exchange.checker.properties.residuals.second_rewards` ``(R)``, a second
    reward vector with the same signs of centred advantages (THEORY.md section 2: the reward-dependent part of
    ``K_e``). An additive event term (M6) and any shift of the advantages that does not
    depend on the rewards cancel in the difference, and every group stays mixed, so a
    filter that drops tied groups keeps the same groups in both; what is left is
    ``w_i (A_i(R) - A_i(R'))`` times the surrogate's factor, which the probes' patterns
    read without the additive term hiding them (THEORY.md section 4: name every mechanism
    present)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.loss_fn = engine.loss_fn
        self.precision = engine.precision

    def __call__(self, rollouts: list[Rollout]) -> list[Tensor]:
        return self.with_raw(rollouts)[1]

    def with_raw(self, rollouts: list[Rollout]) -> tuple[list[Tensor], list[Tensor]]:
        """``(kappa(R) per rollout, the reward-dependent part per rollout)``."""
        other = [r.with_fields({"rewards": second_rewards(r.rewards, r)}) for r in rollouts]
        kappas = self.engine(list(rollouts) + other)
        n = len(rollouts)
        return kappas[:n], [a - b for a, b in zip(kappas[:n], kappas[n:])]


def run_probes(engine: Engine, regime: str) -> list[ProbeResult]:
    """Every probe that applies to ``regime``, run by its property (on the
    reward-dependent coefficients where the probe asks for them)."""
    off = Regime(regime).off_policy
    dependent = RewardDependent(engine)
    return [PROPERTIES[p.property_name].run_probe(dependent if p.reward_dependent else engine, p)
            for p in PROBES if off or not p.off_policy_only]
