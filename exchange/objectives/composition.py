"""Objectives composed from parts, with verdicts derived from the parts.

A :class:`Composition` picks one :class:`~exchange.objectives.parts.Part` of every kind
(estimator, shaping, weight, clip, aggregation, additive, mask, precision) and is a
``loss_fn(logprobs [N, T], rollout) -> scalar``::

    R' = shaping(R)                      (before centring)
    A  = estimator(R')                   [N], detached
    keep = mask(rollout)                 [N] (after centring: A is not re-centred)
    rho = weight(logprobs)               [N, T] (token ratio or a sequence weight)
    loss = - sum_{i,t} mask * keep_i * w_i * clip(rho, A_i)
           + beta sum_{i,t} mask * keep_i * w_i * additive(logprobs)

with ``w = aggregation(rollout)`` and every intermediate in the part's precision. Its
expected verdict per regime is :func:`exchange.core.vocabulary.verdict_of` of the
facets its parts carry, after the dependences between parts that
:mod:`exchange.objectives.interactions` states (a filter that drops tied groups, an
estimator whose advantages are never negative, ...): the same rule as the catalog's, so
the generator of objectives and the catalog cannot disagree about what a part does.

:func:`random_composition` draws one from a seeded ``random.Random`` (benchmarks,
tests); :func:`compose` builds one by name, for users describing their own loss.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, fields
from typing import Mapping

import torch
from torch import Tensor

from exchange.core.rollout import Rollout
from exchange.core.vocabulary import REGIMES, Expected, Regime, verdict_of
from exchange.errors import InvalidArgument
from exchange.objectives.interactions import apply_interactions
from exchange.objectives.parts import KINDS, PARTS, Part

__all__ = ["Composition", "compose", "random_composition", "betas_for", "BETAS", "DTYPES"]

DTYPES = {"float64": torch.float64, "float32": torch.float32, "bf16": torch.bfloat16}
# The additive term's weight. 1e-3 sits below bf16's resolution next to the advantage
# terms of a mixed group: only a tied group shows it there (THEORY.md section 2).
BETAS = (1e-3, 0.05, 0.5)


@dataclass(frozen=True)
class Composition:
    """One objective, by parts (names of :data:`exchange.objectives.parts.PARTS`).

    Fields: one part name per kind of :data:`~exchange.objectives.parts.KINDS`, and
    ``beta``, the additive term's weight (ignored without one).
    """

    estimator: str = "group_mean_std"
    shaping: str = "none"
    weight: str = "token"
    clip: str = "none"
    aggregation: str = "batch_token_count"
    additive: str = "none"
    mask: str = "none"
    precision: str = "float64"
    beta: float = 0.05

    def __post_init__(self) -> None:
        for kind in KINDS:
            name = getattr(self, kind)
            if name not in PARTS[kind]:
                raise InvalidArgument(
                    f"Composition: {kind}={name!r} is not a known part; choose one of {', '.join(PARTS[kind])}."
                )
        if not (self.beta > 0 and self.beta < float("inf")):
            raise InvalidArgument(f"Composition: beta={self.beta!r} must be a positive finite number.")

    # ------------------------------------------------------------------ description
    @property
    def parts(self) -> dict[str, Part]:
        return {kind: PARTS[kind][getattr(self, kind)] for kind in KINDS}

    @property
    def name(self) -> str:
        """``estimator+weight+clip+aggregation[+shaping][+additive@beta][+mask]@precision``."""
        bits = [self.estimator, self.weight, self.clip, self.aggregation]
        if self.shaping != "none":
            bits.append(self.shaping)
        if self.additive != "none":
            bits.append(f"{self.additive}@{self.beta:g}")
        if self.mask != "none":
            bits.append(self.mask)
        return "+".join(bits) + f"@{self.precision}"

    def facets(self, regime: Regime | str) -> tuple[str, ...]:
        """The facets of every part in ``regime``, in part order (duplicates once), after
        :func:`~exchange.objectives.interactions.apply_interactions`."""
        regime = Regime(regime)
        own = tuple(dict.fromkeys(f for p in self.parts.values() for f in p.facets_in(regime)))
        return apply_interactions(self, regime, own)

    def expected(self) -> Mapping[Regime, Expected]:
        """The derived verdict per regime: :func:`verdict_of` of :meth:`facets`."""
        return {r: verdict_of(*self.facets(r)) for r in REGIMES}

    # -------------------------------------------------------------------------- loss
    def __call__(self, logprobs: Tensor, rollout: Rollout) -> Tensor:
        """The loss (a scalar in float64), every intermediate in ``precision``."""
        parts = self.parts
        dtype = DTYPES[self.precision]
        lp = logprobs.to(dtype)
        rewards = rollout.rewards.to(dtype)
        if self.shaping != "none":
            rewards = parts["shaping"].fn(rewards, lp.detach(), rollout)
        adv = parts["estimator"].fn(rewards, rollout).detach()  # [N]
        keep = torch.ones(rollout.n, dtype=dtype, device=lp.device)
        if self.mask != "none":
            keep = parts["mask"].fn(rollout).to(dtype)
        weight = parts["aggregation"].fn(rollout, dtype) * keep  # [N]
        tokens = rollout.fmask.to(dtype) * weight[:, None]  # [N, T]
        rho = parts["weight"].fn(lp, rollout)
        surrogate = parts["clip"].fn(rho, adv[:, None], parts["clip"].params)
        loss = -(tokens * surrogate).sum()
        if self.additive != "none":
            loss = loss + self.beta * (tokens * parts["additive"].fn(lp, rollout)).sum()
        return loss.to(torch.float64)

    def bind(self):
        """A plain ``loss_fn`` named after the composition (the checker's ``name``),
        carrying ``exchange_precision`` so the checker judges round-off at the right
        precision."""
        def loss_fn(logprobs: Tensor, rollout: Rollout) -> Tensor:
            return self(logprobs, rollout)

        loss_fn.__name__ = self.name
        loss_fn.exchange_precision = self.precision  # type: ignore[attr-defined]
        # how a report's reproduce line rebuilds it (exchange.checker.reproduce)
        changed = {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != f.default}
        loss_fn.exchange_expression = (  # type: ignore[attr-defined]
            "exchange.compose(" + ", ".join(f"{k}={v!r}" for k, v in changed.items()) + ").bind()")
        loss_fn.composition = self  # type: ignore[attr-defined]
        return loss_fn


def compose(**parts: str | float) -> Composition:
    """A :class:`Composition` from part names (``compose(estimator="loo",
    aggregation="seq_mean_token_mean", additive="k3_ref", beta=0.04)``); unknown kinds
    or names raise :class:`~exchange.errors.InvalidArgument` listing the known ones."""
    unknown = sorted(set(parts) - set(KINDS) - {"beta"})
    if unknown:
        raise InvalidArgument(f"compose: no part kind {unknown[0]!r}; kinds: {', '.join(KINDS)}, and beta.")
    return Composition(**parts)  # type: ignore[arg-type]


def betas_for(precision: str, mask: str, estimator: str = "group_mean_std", shaping: str = "none") -> tuple[float, ...]:
    """The additive term's weights a random composition may take (THEORY.md section 4,
    precision rule: every expected effect at least ten times the resolution). A tied
    group shows an additive term at any weight where its advantages are exact zeros. Two
    parts take that away: a filter that drops tied groups, and an estimator with no centre
    of its own next to a shaping (a greedy baseline: a tied group's advantages are then
    the shaping itself). The term is then ``beta`` times an O(1) event profile next to
    O(0.1-1) advantages: in bf16 (resolution 2^-7, ten times 0.078) only ``beta = 0.5``
    stays above it whatever the event values."""
    hidden = "drops_tied_groups" in PARTS["mask"][mask].traits or (
        "own_centre_free" in PARTS["estimator"][estimator].traits and shaping != "none")
    if precision == "bf16" and hidden:
        return (0.5,)
    return BETAS


def random_composition(rng: random.Random) -> Composition:
    """One composition, every kind drawn uniformly among its parts, and ``beta``
    uniformly among :func:`betas_for` its precision and mask."""
    pick = {kind: rng.choice(sorted(PARTS[kind])) for kind in KINDS}
    return Composition(**pick, beta=rng.choice(betas_for(pick["precision"], pick["mask"], pick["estimator"],
                                                         pick["shaping"])))
