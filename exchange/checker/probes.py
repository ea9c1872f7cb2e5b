"""Targeted probes (THEORY.md section 4): small hand-built groups that change one thing
each, so that a property they break names its mechanism.

The probes and how each runs belong to their property's module
(:mod:`exchange.checker.properties`); this module runs the ones that apply to a regime.
"""

from __future__ import annotations

from exchange.checker.properties import PROBES, PROPERTIES, ProbeResult
from exchange.core.coefficients import Engine
from exchange.core.vocabulary import Regime

__all__ = ["PROBES", "run_probes"]


def run_probes(engine: Engine, regime: str) -> list[ProbeResult]:
    """Every probe that applies to ``regime``, run by its property."""
    off = Regime(regime).off_policy
    return [PROPERTIES[p.property_name].run_probe(engine, p) for p in PROBES if off or not p.off_policy_only]
