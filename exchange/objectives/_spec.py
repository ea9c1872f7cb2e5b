"""``Objective``: one catalog entry, a pure loss function plus what it is expected to do."""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from torch import Tensor

from exchange.errors import InvalidArgument
from exchange.rollout import Rollout

if TYPE_CHECKING:
    from exchange.objectives._factored import Factors

REGIMES = ("on_policy", "off_policy")


@dataclass(frozen=True)
class Expected:
    """Expected checker verdict in one regime: the properties that break and why."""

    breaks: frozenset[str] = frozenset()
    mechanisms: frozenset[str] = frozenset()

    @classmethod
    def of(cls, breaks: tuple[str, ...] = (), mechanisms: tuple[str, ...] = ()) -> "Expected":
        return cls(frozenset(breaks), frozenset(mechanisms))


@dataclass(frozen=True)
class Objective:
    """A built-in objective.

    Fields:
        name: registry name (``exchange check NAME``).
        loss: ``loss(logprobs [N, T], rollout, **params) -> Tensor[]``, the loss to minimise
            (reward-driven part only; regularisers go in ``regularizer``).
        summary: one line for ``exchange list``.
        source: where the formula comes from (arXiv id or library path).
        defaults: hyperparameters from the source, overridable with ``bind(**params)``.
        expected: the verdict per regime (``on_policy`` / ``off_policy``) derived in
            THEORY.md or ../shared/reference/objectives.md; tests compare it with the checker.
        regularizer: optional KL / entropy term ``(logprobs, rollout, **params) -> Tensor[]``
            reported in its own channel, never mixed into the cancellation checks.
        notes: caveats, e.g. where the source formula is uncertain.
        factors: the named hooks of the factored form (``exchange/objectives/_factored.py``)
            that restoring transformations replace; ``None`` for objectives that cannot
            be written that way (transformations then raise ``InvalidArgument``).
        transforms: the restoring transformations applied, in order (``()`` for a
            catalog family; ``("min_replace",)`` for ``"gspo+min_replace"``).
    """

    name: str
    loss: Callable[..., Tensor]
    summary: str
    source: str
    defaults: Mapping[str, Any] = field(default_factory=dict)
    expected: Mapping[str, Expected] = field(default_factory=dict)
    regularizer: Callable[..., Tensor] | None = None
    notes: str = ""
    factors: "Factors | None" = None
    transforms: tuple[str, ...] = ()

    @property
    def base(self) -> str:
        """The catalog family a transformed objective starts from (its own name otherwise)."""
        return self.name.split("+", 1)[0]

    def params(self, **overrides: Any) -> dict[str, Any]:
        """The defaults updated with ``overrides`` (unknown names raise InvalidArgument)."""
        unknown = sorted(set(overrides) - set(self.defaults))
        if unknown:
            allowed = ", ".join(sorted(self.defaults)) or "(none)"
            raise InvalidArgument(
                f"objective {self.name!r} has no parameter {unknown[0]}={overrides[unknown[0]]!r}; "
                f"its parameters are: {allowed}."
            )
        out = dict(self.defaults)
        for key, value in overrides.items():
            out[key] = _coerce(self.name, key, value, self.defaults[key])
        return out

    def bind(self, **overrides: Any) -> Callable[[Tensor, Rollout], Tensor]:
        """The plain ``loss_fn(logprobs, rollout)`` with hyperparameters fixed."""
        params = self.params(**overrides)
        fn = functools.partial(self.loss, **params)
        fn.__name__ = self.name  # type: ignore[attr-defined]
        fn.objective = self  # type: ignore[attr-defined]
        fn.params = params  # type: ignore[attr-defined]
        return fn

    def bind_regularizer(self, **overrides: Any) -> Callable[[Tensor, Rollout], Tensor] | None:
        if self.regularizer is None:
            return None
        params = self.params(**overrides)
        accepted = inspect.signature(self.regularizer).parameters
        fn = functools.partial(self.regularizer, **{k: v for k, v in params.items() if k in accepted})
        fn.__name__ = f"{self.name}.regularizer"  # type: ignore[attr-defined]
        return fn


def _coerce(name: str, key: str, value: Any, default: Any) -> Any:
    """Parse CLI strings to the type of the default (``eps=0.3`` -> float)."""
    if not isinstance(value, str) or isinstance(default, str):
        return value
    try:
        if isinstance(default, bool):
            if value.lower() in ("1", "true", "yes"):
                return True
            if value.lower() in ("0", "false", "no"):
                return False
            raise ValueError(value)
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float) or default is None:
            return float(value)
    except ValueError:
        raise InvalidArgument(
            f"objective {name!r}: {key}={value!r} is not a valid {type(default).__name__}."
        ) from None
    return value
