"""Targeted probes (THEORY.md section 4): small hand-built groups that change one thing
each, so that a property they break names its mechanism.

The probes and how each runs belong to their property's module
(:mod:`exchange.checker.properties`); this module runs the ones that apply to a regime.
"""

from __future__ import annotations

import torch
from torch import Tensor

from exchange.checker.properties import PROBES, PROPERTIES, ProbeResult
from exchange.core.coefficients import Engine
from exchange.core.rollout import Rollout
from exchange.core.vocabulary import Regime

__all__ = ["PROBES", "RewardDependent", "run_probes"]


class RewardDependent:
    """An engine for the part of the coefficients that moves with the rewards:
    ``kappa(R) - kappa(R = 0)`` per rollout (with every advantage 0, only what does not
    scale with it is left: an additive event term, M6)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.loss_fn = engine.loss_fn
        self.precision = engine.precision

    def __call__(self, rollouts: list[Rollout]) -> list[Tensor]:
        tied = [r.with_fields({"rewards": torch.zeros_like(r.rewards)}) for r in rollouts]
        kappas = self.engine(list(rollouts) + tied)
        n = len(rollouts)
        return [a - b for a, b in zip(kappas[:n], kappas[n:])]


def run_probes(engine: Engine, regime: str) -> list[ProbeResult]:
    """Every probe that applies to ``regime``, run by its property (on the
    reward-dependent coefficients where the probe asks for them)."""
    off = Regime(regime).off_policy
    dependent = RewardDependent(engine)
    return [PROPERTIES[p.property_name].run_probe(dependent if p.reward_dependent else engine, p)
            for p in PROBES if off or not p.off_policy_only]
