"""``Objective``: one catalog entry, a pure loss function plus what it is expected to do."""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from torch import Tensor

from exchange.core.vocabulary import Expected  # noqa: F401  (re-exported: the catalog and adapters import it here)
from exchange.errors import InvalidArgument
from exchange.core.rollout import Rollout

if TYPE_CHECKING:
    from exchange.objectives._factored import Factors


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
        return override_params(f"objective={self.name!r}", self.defaults, overrides)

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


def override_params(owner: str, defaults: Mapping[str, Any], overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """``defaults`` updated with ``overrides``, CLI strings parsed to each default's type.

    The one parameter parser of the package (catalog objectives and library losses).
    ``owner`` names the thing in errors (``"objective='grpo'"``, ``"target='trl:grpo'"``).
    Unknown names raise :class:`InvalidArgument` listing the allowed ones.
    """
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        allowed = ", ".join(sorted(defaults)) or "(none)"
        raise InvalidArgument(
            f"{owner} has no parameter {unknown[0]}={overrides[unknown[0]]!r}; its parameters are: {allowed}."
        )
    out = dict(defaults)
    for key, value in overrides.items():
        out[key] = check_param_range(owner, key, coerce_param(owner, key, value, defaults[key]))
    return out


_INF = float("inf")
# Allowed ranges by meaning: (low, high, low_inclusive, high_inclusive, what it is).
PARAM_RANGES: dict[str, tuple[float, float, bool, bool, str]] = {
    **{k: (0.0, 1.0, False, False, "a lower clip width (ratio floor 1 - eps > 0)")
       for k in ("eps_low", "clip_ratio_low", "eps_clip_low", "clip_ratio", "eps")},
    **{k: (0.0, _INF, False, False, "an upper clip width")
       for k in ("eps_high", "clip_ratio_high", "eps_clip_high")},
    **{k: (1.0, _INF, False, False, "a dual-clip bound") for k in ("clip_ratio_c", "dual_clip")},
    **{k: (0.0, _INF, False, False, "a temperature or scale") for k in ("tau_pos", "tau_neg", "phi", "max_length", "clip_c")},
    **{k: (0.0, _INF, True, False, "a coefficient") for k in ("beta", "kl_coef", "ppo_kl_coef", "rho", "alpha", "dro_beta")},
    **{k: (0.0, 1.0, True, True, "a fraction of tokens") for k in ("clip_cov_ratio", "kl_cov_ratio",
                                                                   "top_entropy_quantile")},
    "gamma": (0.0, 1.0, False, True, "a discount"),
    "delta": (0.0, _INF, False, False, "an upper ratio bound"),
    **{k: (0.0, _INF, True, False, "an importance-weight bound") for k in ("sampler_is_min", "sampler_is_max")},
}
# String parameters with a fixed set of values.
PARAM_CHOICES: dict[str, tuple[str, ...]] = {
    "sampler_is": ("none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask"),
}


def check_param_range(owner: str, key: str, value: Any) -> Any:
    """Reject a hyperparameter outside its meaning's range (finite, and e.g.
    ``eps_low`` in (0, 1), ``eps_high`` > 0), naming the allowed range."""
    if key in PARAM_CHOICES and value not in PARAM_CHOICES[key]:
        raise InvalidArgument(f"{owner}: {key}={value!r} is not one of {', '.join(PARAM_CHOICES[key])}.")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    rng = PARAM_RANGES.get(key)
    if value != value or value in (_INF, -_INF):
        allowed = "a finite number" if rng is None else _describe_range(rng)
        raise InvalidArgument(f"{owner}: {key}={value!r} is not finite; allowed: {allowed}.")
    if rng is None:
        return value
    lo, hi, lo_in, hi_in, _ = rng
    ok = (value >= lo if lo_in else value > lo) and (value <= hi if hi_in else value < hi)
    if not ok:
        raise InvalidArgument(f"{owner}: {key}={value!r} is out of range; allowed: {_describe_range(rng)}.")
    return value


def _describe_range(rng) -> str:
    lo, hi, lo_in, hi_in, what = rng
    left = "[" if lo_in else "("
    right = "]" if hi_in else ")"
    upper = "inf" if hi == _INF else f"{hi:g}"
    return f"{left}{lo:g}, {upper}{right} ({what})"


def coerce_param(owner: str, key: str, value: Any, default: Any) -> Any:
    """Parse a CLI string to the type of ``default`` (``eps=0.3`` -> float; a ``None``
    default accepts ``none`` or a float). Non-strings pass through unchanged."""
    if not isinstance(value, str) or isinstance(default, str):
        return value
    low = value.strip().lower()
    try:
        if isinstance(default, bool):
            if low in ("1", "true", "yes"):
                return True
            if low in ("0", "false", "no"):
                return False
            raise ValueError(value)
        if default is None:
            return None if low in ("none", "null", "") else float(value)
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
    except ValueError:
        kind = "float or none" if default is None else type(default).__name__
        raise InvalidArgument(f"{owner}: {key}={value!r} is not a valid {kind}.") from None
    return value
