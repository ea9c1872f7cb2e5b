"""The objective catalog: one small module per family, one explicit registry.

``get(name)`` returns an :class:`Objective`; ``names()`` lists them; ``resolve(spec)``
turns ``"name"`` (later ``"name+transform"``) into a bound ``loss_fn``.
"""

from __future__ import annotations

from typing import Any

from exchange.errors import InvalidArgument
from exchange.objectives._spec import REGIMES, Expected, Objective
from exchange.objectives.cispo import CISPO
from exchange.objectives.dapo import DAPO
from exchange.objectives.grpo import DR_GRPO, GRPO
from exchange.objectives.gspo import GSPO
from exchange.objectives.reinforce import REINFORCE_PP, RLOO

__all__ = ["REGIMES", "Expected", "Objective", "get", "names", "all_objectives"]

_REGISTRY: dict[str, Objective] = {
    o.name: o for o in (GRPO, DR_GRPO, DAPO, GSPO, CISPO, RLOO, REINFORCE_PP)
}


def names() -> list[str]:
    """Registered objective names, in catalog order."""
    return list(_REGISTRY)


def all_objectives() -> list[Objective]:
    return list(_REGISTRY.values())


def get(name: str) -> Objective:
    """The objective called ``name``; unknown names list the registered ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise InvalidArgument(
            f"objective={name!r} is not a built-in; choose one of: {', '.join(_REGISTRY)} "
            "(or pass module:function / path.py:function)."
        ) from None


def bind(name: str, **params: Any):
    """Shortcut for ``get(name).bind(**params)``."""
    return get(name).bind(**params)


def resolve(spec: str, **params: Any):
    """``"name"`` -> bound ``loss_fn`` with ``params`` overriding the defaults.

    (The catalog work extends this to ``"name+transform[+transform...]"``.)
    """
    if "+" in spec:
        raise InvalidArgument(f"objective={spec!r}: restoring transformations are not available yet.")
    return get(spec).bind(**params)
