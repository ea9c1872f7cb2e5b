"""The link between checked properties / mechanisms and machine-checked theorems.

One registry maps each property name and mechanism id to the theorems that back it
(THEORY.md section 3). Backends (Coq today) are named per theorem so another prover
can be added without touching the properties.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Theorem:
    name: str  # qualified name in the proof development, e.g. "Exchange.T1_sufficiency"
    statement: str  # one line, in words
    backend: str = "coq"
    file: str = ""  # path under proofs/


# Filled in by the proofs work (issue 5); the checker only calls the two functions below.
THEOREMS: dict[str, Theorem] = {}
PROPERTY_THEOREMS: dict[str, tuple[str, ...]] = {}
MECHANISM_THEOREMS: dict[str, tuple[str, ...]] = {}


def for_property(name: str) -> tuple[Theorem, ...]:
    """Theorems behind a property verdict (empty when none is registered)."""
    return tuple(THEOREMS[t] for t in PROPERTY_THEOREMS.get(name, ()))


def for_mechanism(mechanism: str) -> tuple[Theorem, ...]:
    """Theorems that explain a mechanism id ("M1".."M5")."""
    return tuple(THEOREMS[t] for t in MECHANISM_THEOREMS.get(mechanism, ()))
