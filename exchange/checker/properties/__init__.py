"""The checked properties: observable forms of THEORY.md section 2, one module each
(:mod:`~exchange.checker.properties.base`); this registry lists them in report order."""

from __future__ import annotations

from exchange.checker.properties import (exchangeable, finite, null_on_equal_rewards, permutation_invariant,
                                         shared_cancellation, zero_sum)
from exchange.checker.properties.base import Evaluation, Probe, ProbeResult, Property
from exchange.core.vocabulary import PROPERTY_NAMES
from exchange.errors import InvalidArgument

__all__ = ["Property", "Evaluation", "Probe", "ProbeResult", "PROPERTIES", "PROBES", "property_names", "get_property",
           "TOLERANCES"]

PROPERTIES: dict[str, Property] = {
    p.name: p
    for p in (zero_sum.PROPERTY, exchangeable.PROPERTY, shared_cancellation.PROPERTY,
              null_on_equal_rewards.PROPERTY, permutation_invariant.PROPERTY, finite.PROPERTY)
}
if tuple(PROPERTIES) != PROPERTY_NAMES:  # the vocabulary fixes the names and their order
    raise RuntimeError(f"properties {tuple(PROPERTIES)} differ from the vocabulary's {PROPERTY_NAMES}")

# Every probe, in the order they run.
PROBES: tuple[Probe, ...] = (zero_sum.PROBES[0], *null_on_equal_rewards.PROBES, *exchangeable.PROBES,
                             *zero_sum.PROBES[1:], *permutation_invariant.PROBES)

# Each property's float64 tolerance.
TOLERANCES: dict[str, float] = {name: p.tolerance for name, p in PROPERTIES.items()}


def property_names() -> list[str]:
    return list(PROPERTIES)


def get_property(name: str) -> Property:
    try:
        return PROPERTIES[name]
    except KeyError:
        raise InvalidArgument(f"property={name!r} is unknown; choose from: {', '.join(PROPERTIES)}.") from None
