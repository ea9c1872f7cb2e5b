"""Restoring transformations (THEORY.md T5, section 4b; arXiv:2604.13088 "DFPO").

Each one rewrites a hook of an objective's factored form (``_factored.py``) and returns a
new :class:`Objective` called ``"<base>+<transform>"``, whose expected verdicts follow from
the base's by T5:

- ``group_constant_norm``: the per-response normaliser becomes one constant per group,
  its harmonic group mean (``1/L_i`` -> ``1/mean_g L``: the group's token mean).
  Removes M3.
- ``min_replace``: the per-response weight ``w_i = norm_i * s_i`` becomes
  ``sg(min_{j in g} w_j)`` and the per-token part keeps only the token ratio. Removes M3
  and M1; a sequence-level clip is part of that weight (GSPO), so it goes too (M2), while
  a token-level clip stays (GRPO, DAPO: M2 off-policy remains).
- ``adv_orthogonal``: ``w <- sg(w - (A.w / A.A) A)`` within each group, so
  ``sum_i A_i w_i = 0``. Restores (C) at the shared events when only per-response
  weights broke it (M1, M3), **not** (E): the weights still differ across responses. A
  token-level clip (M2) still breaks (C). Needs per-response, zero-sum advantages.
- ``sign_free_clip``: the family's ``sign_free`` surrogate: every clip decision or gate
  depends on the ratio alone. Removes M2.
- ``token_trust_region``: a restoring trust region: each token's surrogate is kept iff
  its own token ratio ``rho_e = exp(l - l_old)`` lies in ``[1 - trust_eps, 1 + trust_eps]``
  (parameter ``trust_eps``, default 0.2), for either sign of the advantage, else it is
  dropped (zero gradient). The decision is a function of the event alone, so every copy
  of a shared event is kept or dropped together: it adds no mechanism and keeps (E) and
  (C) wherever they held. Meant for ``gspo+min_replace``, whose sequence clip went with
  the weight and left no trust region at all.

Composition reads left to right: ``"grpo+group_constant_norm+sign_free_clip"``.
``min_replace`` and ``adv_orthogonal`` both replace the per-response weight, so at most
one of them, and it comes after ``group_constant_norm``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import torch
from torch import Tensor

from exchange.core.vocabulary import REGIMES, verdict_of
from exchange.errors import InvalidArgument
from exchange.objectives._factored import Factors, Params, factored_loss
from exchange.objectives.objective import Expected, Objective
from exchange.core.rollout import Rollout

__all__ = ["TRANSFORMS", "apply_transforms", "supports", "derive_expected"]

_WEIGHT_TRANSFORMS = ("min_replace", "adv_orthogonal")


# ------------------------------------------------------------------ hooks
def _group_constant_norm(f: Factors) -> Factors:
    def norm(logprobs: Tensor, rollout: Rollout, p: Params) -> Tensor:
        n = f.norm(logprobs, rollout, p)  # [N], positive
        return 1.0 / rollout.group_mean(1.0 / n)

    return f.replace(norm=norm)


def _with_response_weight(f: Factors, norm) -> Factors:
    """``f`` with its per-response weight replaced by ``norm`` (Min-Replace, Adv-Orthogonal):
    the response ratio goes into the weight, so a sequence-level clip goes with it."""
    return f.replace(
        norm=norm,
        ratio=f.token_part_ratio(),
        response_ratio=None,
        clip_level="none" if f.clip_level == "sequence" else f.clip_level,
    )


def _min_replace(f: Factors) -> Factors:
    def norm(logprobs: Tensor, rollout: Rollout, p: Params) -> Tensor:
        return rollout.group_min(f.response_weight(logprobs, rollout, p))  # [N], detached

    return _with_response_weight(f, norm)


def _adv_orthogonal(f: Factors) -> Factors:
    def norm(logprobs: Tensor, rollout: Rollout, p: Params) -> Tensor:
        w = f.response_weight(logprobs, rollout, p)  # [N]
        a = f.advantages(rollout, p).detach()  # [N]
        if a.dim() != 1:
            raise InvalidArgument(
                f"adv_orthogonal projects per-response advantages [N]; got shape {list(a.shape)} "
                "(rollout.advantages per token). Pass one advantage per response."
            )
        aw = rollout.group_sum(a * w)
        aa = rollout.group_sum(a * a)
        # Equal rewards give A = 0 and nothing to project out.
        coef = torch.where(aa > 0, aw / torch.where(aa > 0, aa, torch.ones_like(aa)), torch.zeros_like(aa))
        return (w - coef * a).detach()

    return _with_response_weight(f, norm)


def _sign_free_clip(f: Factors) -> Factors:
    return f.replace(surrogate=f.sign_free)


TRUST_EPS_DEFAULT = 0.2


def _token_trust_region(f: Factors) -> Factors:
    previous = f.gate

    def gate(logprobs: Tensor, rollout: Rollout, p: Params) -> Tensor:
        eps = float(p["trust_eps"])
        rho = torch.exp(logprobs.detach() - rollout.old_logprobs)  # [N, T], the event's own ratio
        keep = ((rho >= 1.0 - eps) & (rho <= 1.0 + eps)).to(logprobs.dtype)
        return keep if previous is None else keep * previous(logprobs, rollout, p)

    return f.replace(gate=gate)


TRANSFORMS: dict[str, Callable[[Factors], Factors]] = {
    "min_replace": _min_replace,
    "adv_orthogonal": _adv_orthogonal,
    "group_constant_norm": _group_constant_norm,
    "sign_free_clip": _sign_free_clip,
    "token_trust_region": _token_trust_region,
}

# Parameters a transformation adds to the base objective's defaults.
_TRANSFORM_DEFAULTS = {"token_trust_region": {"trust_eps": TRUST_EPS_DEFAULT}}

_SOURCES = {
    "min_replace": "Min-Replace, arXiv:2604.13088 Eq. 17",
    "adv_orthogonal": "Adv-Orthogonal, arXiv:2604.13088 Eq. 18",
    "group_constant_norm": "one normaliser per group (Dr. GRPO / DAPO style), THEORY.md T5",
    "sign_free_clip": "sign-independent clip (CISPO style), THEORY.md T5",
    "token_trust_region": "token-level trust region on the event's own ratio, sign-free (THEORY.md T5)",
}


# ----------------------------------------------------------- applicability
def _why_not(obj: Objective, transform: str) -> str | None:
    """``None`` when ``transform`` applies to ``obj``, else the reason it does not."""
    f = obj.factors
    if f is None:
        return "it is not written in the factored form (no named hooks)"
    if transform == "sign_free_clip" and f.sign_free is None:
        return "it has no sign-free surrogate hook"
    if transform == "adv_orthogonal":
        if any("M4" in obj.expected.get(r, Expected()).mechanisms for r in REGIMES):
            return "its advantages are not zero-sum within the group (M4)"
        if getattr(f.advantages, "per_token", False):
            return "its advantages are per token, not per response"
    return None


def supports(obj: Objective, transform: str) -> bool:
    """Whether ``transform`` can be applied to ``obj``."""
    return _why_not(obj, transform) is None


def _check_sequence(base: Objective, transforms: list[str], catalog: list[Objective]) -> None:
    for t in transforms:
        if t not in TRANSFORMS:
            raise InvalidArgument(
                f"transform={t!r} is not a restoring transformation; choose one of: {', '.join(TRANSFORMS)}."
            )
    if len(set(transforms)) != len(transforms):
        raise InvalidArgument(f"transforms={'+'.join(transforms)!r} repeats a transformation; apply each once.")
    weights = [t for t in transforms if t in _WEIGHT_TRANSFORMS]
    if len(weights) > 1:
        raise InvalidArgument(
            f"transforms={'+'.join(transforms)!r}: min_replace and adv_orthogonal both replace the "
            "per-response weight; use one of them."
        )
    if weights and "group_constant_norm" in transforms and transforms.index("group_constant_norm") > transforms.index(weights[0]):
        raise InvalidArgument(
            f"transforms={'+'.join(transforms)!r}: group_constant_norm acts on the normaliser that "
            f"{weights[0]} has already replaced; put group_constant_norm first."
        )
    current = base
    for t in transforms:
        reason = _why_not(current, t)
        if reason is not None:
            ok = [o.name for o in catalog if supports(o, t)]
            raise InvalidArgument(
                f"transform={t!r} does not apply to objective={current.name!r}: {reason}. "
                f"Objectives that support it: {', '.join(ok)}."
            )
        current = dataclasses.replace(current, transforms=current.transforms + (t,))


# ---------------------------------------------------------------- verdicts
def derive_expected(base: Objective, transforms: tuple[str, ...]) -> dict[str, Expected]:
    """Expected verdicts of ``base`` after ``transforms`` (T5, applied facet by facet).

    Each transformation removes the facets it addresses: ``group_constant_norm`` every
    M3 facet, ``sign_free_clip`` M2's sign-dependent clip, ``min_replace`` the
    per-response weights (M1, M3) and a sequence-level clip folded into them.
    ``adv_orthogonal`` removes that clip too and, when per-response weights are all that
    is left, turns each into its ``.projected`` facet ((C) restored by projection over
    unequal weights: (E) only, section 4b). The verdict is then the rule
    (:func:`exchange.core.vocabulary.verdict_of`) applied to the remaining facets.
    """
    if base.factors is None:
        raise InvalidArgument(f"objective={base.name!r} is not in the factored form: no transformation applies.")
    out: dict[str, Expected] = {}
    for regime in REGIMES:
        facets = set(base.expected[regime].facets)
        clip_level = base.factors.clip_level
        orthogonal = False
        for t in transforms:
            if t == "group_constant_norm":
                facets -= {f for f in facets if f.startswith("M3.")}
            elif t == "sign_free_clip":
                facets.discard("M2.sign_clip")
            elif t == "token_trust_region":
                pass  # a gate on the event's own ratio, any sign: adds no facet
            elif t in _WEIGHT_TRANSFORMS:
                if clip_level == "sequence":
                    facets.discard("M2.sign_clip")
                    clip_level = "none"
                if t == "min_replace":
                    facets -= {f for f in facets if f.startswith(("M1.", "M3."))}
                else:
                    orthogonal = True
        if orthogonal and facets <= set(_PROJECTABLE):
            facets = {_PROJECTABLE[f] for f in facets}
        out[regime] = verdict_of(*sorted(facets))
    return out


# Per-response weights whose (C) a projection restores, and the facet each becomes.
_PROJECTABLE = {"M1.sequence_weight": "M1.projected", "M3.response_norm": "M3.projected"}


# ------------------------------------------------------------------ build
def apply_transforms(base: Objective, transforms: list[str], catalog: list[Objective]) -> Objective:
    """``base`` with ``transforms`` applied left to right, as a new :class:`Objective`.

    ``catalog`` is used only to list the objectives that support a transformation in the
    error message. Raises :class:`InvalidArgument` for unknown, repeated, conflicting or
    unsupported transformations.
    """
    if not transforms:
        return base
    _check_sequence(base, list(transforms), catalog)
    factors = base.factors  # not None: _check_sequence refused an objective without factors
    for t in transforms:
        factors = TRANSFORMS[t](factors)
    name = "+".join([base.name, *transforms])
    expected = derive_expected(base, tuple(transforms))
    notes = f"{base.name} with " + ", then ".join(_SOURCES[t] for t in transforms) + "."
    if "adv_orthogonal" in transforms:
        notes += (
            " Adv-Orthogonal makes sum_i A_i w_i = 0, so shared events cancel when only "
            "per-response weights broke (C); the weights still differ, so (E) is not restored."
        )
    defaults = dict(base.defaults)
    for t in transforms:
        defaults.update(_TRANSFORM_DEFAULTS.get(t, {}))
    return dataclasses.replace(
        base,
        name=name,
        defaults=defaults,
        loss=functools.partial(factored_loss, factors),
        summary=f"{base.summary} [+{' +'.join(transforms)}]",
        expected=expected,
        factors=factors,
        transforms=tuple(transforms),
        notes=notes,
        source=f"{base.source}; {'; '.join(_SOURCES[t] for t in transforms)}",
    )
