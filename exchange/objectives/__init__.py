"""The objective catalog: one small module per family, one explicit registry.

One way to do each thing: ``names()`` lists the catalog families (``VARIANTS`` the
documented transformed ones); ``get(name)`` returns an :class:`Objective` (a family or
``"base+transform..."``); ``resolve(name, **params)`` returns the bound ``loss_fn``. Restoring transformations (``min_replace``, ``adv_orthogonal``,
``group_constant_norm``, ``sign_free_clip``, ``token_trust_region``) live in :mod:`exchange.objectives.restoring`;
the surgical transform (only the shared-event residual removed, the pathway arm of an
experiment) in :mod:`exchange.objectives.surgical`. ``token_pool(gather)``: a block inside
which batch statistics over tokens (TRL's entropy quantile) pool every process's tokens.
"""

from __future__ import annotations

from typing import Any

from exchange.errors import InvalidArgument
from exchange.core.vocabulary import REGIMES
from exchange.objectives.objective import Expected, Objective
from exchange.objectives._common import token_pool
from exchange.objectives.cispo import CISPO, CISPO_VERL
from exchange.objectives.cov import CLIP_COV, KL_COV
from exchange.objectives.dapo import DAPO
from exchange.objectives.dcpo import DCPO
from exchange.objectives.entropy import ENTROPY_8020, HAPO
from exchange.objectives.gpg import GPG
from exchange.objectives.grpo import BNPO, DR_GRPO, GRPO
from exchange.objectives.gspo import GSPO, GSPO_TOKEN
from exchange.objectives.ppo import PPO
from exchange.objectives.reinforce import REINFORCE_PP, REMAX, RLOO
from exchange.objectives.sapo import SAPO, SAPO_VERL
from exchange.objectives.restoring import TRANSFORMS, apply_transforms, supports
from exchange.objectives.surgical import SURGICAL, surgical

__all__ = [
    "REGIMES",
    "SURGICAL",
    "TRANSFORMS",
    "VARIANTS",
    "Expected",
    "Objective",
    "expected_of",
    "get",
    "names",
    "resolve",
    "supports",
    "surgical",
    "token_pool",
]

_REGISTRY: dict[str, Objective] = {
    o.name: o
    for o in (
        GRPO,
        DR_GRPO,
        DAPO,
        GSPO,
        CISPO,
        RLOO,
        REINFORCE_PP,
        BNPO,
        GSPO_TOKEN,
        CISPO_VERL,
        SAPO,
        SAPO_VERL,
        GPG,
        REMAX,
        PPO,
        DCPO,
        CLIP_COV,
        KL_COV,
        ENTROPY_8020,
        HAPO,
    )
}

# Transformed objectives documented and tested (and the rows the audit may show):
# every transformation on GRPO, DAPO, GSPO and SAPO, plus the compositions T5 names.
VARIANTS: tuple[str, ...] = tuple(
    f"{base}+{t}"
    for base in ("grpo", "dapo", "gspo", "sapo", "sapo_verl")
    for t in ("group_constant_norm", "min_replace", "adv_orthogonal", "sign_free_clip")
) + (
    "grpo+group_constant_norm+sign_free_clip",
    "grpo+min_replace+sign_free_clip",
    "gspo+group_constant_norm+sign_free_clip",
    "sapo_verl+group_constant_norm+sign_free_clip",
    "gspo_token+min_replace",
    "cispo+adv_orthogonal",
    "gspo+min_replace+token_trust_region",
)


def names() -> list[str]:
    """Registered objective names (catalog families), in catalog order."""
    return list(_REGISTRY)


def expected_of(spec: str) -> dict[str, Expected]:
    """Expected verdict per regime of ``spec`` (a family or ``"base+transform..."``)."""
    return dict(get(spec).expected)


def get(name: str) -> Objective:
    """The objective called ``name`` (``"base+transform..."`` builds a transformed one).

    Unknown names raise :class:`InvalidArgument` listing the registered ones.
    """
    base_name, *transforms = [part.strip() for part in name.split("+")]
    try:
        base = _REGISTRY[base_name]
    except KeyError:
        raise InvalidArgument(
            f"objective={base_name!r} is not a built-in; choose one of: {', '.join(_REGISTRY)} "
            "(or pass module:function / path.py:function)."
        ) from None
    return apply_transforms(base, transforms, list(_REGISTRY.values()))


def resolve(spec: str, **params: Any):
    """``"name"`` or ``"name+transform[+transform...]"`` -> bound ``loss_fn``.

    ``params`` override the base objective's defaults (``exchange check
    gspo+min_replace --param eps_high=0.01``). Transformations: ``min_replace``,
    ``adv_orthogonal``, ``group_constant_norm``, ``sign_free_clip``; applying one to an
    objective without the hook it needs raises :class:`InvalidArgument` listing the
    objectives that support it. A final ``+surgical`` wraps the result in
    :func:`exchange.objectives.surgical.surgical` (only the shared-event residual removed):
    ``"grpo+surgical"``, ``"gspo+surgical"``.
    """
    parts = [part.strip() for part in spec.split("+")]
    if SURGICAL in parts:
        if parts.index(SURGICAL) != len(parts) - 1 or len(parts) < 2:
            raise InvalidArgument(
                f"objective={spec!r}: surgical acts on a whole loss, so it comes last and once "
                "(e.g. 'grpo+surgical', 'gspo+min_replace+surgical')."
            )
        return surgical(get("+".join(parts[:-1])).bind(**params))
    if parts[-1] == "coupling_surgical" and len(parts) > 1:  # issue 42's M1 pathway arm (objectives/coupling.py)
        from exchange.objectives.coupling import coupling_surgical

        return coupling_surgical(get("+".join(parts[:-1])), **params)
    return get(spec).bind(**params)
