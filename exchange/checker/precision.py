"""The precision a loss really runs in (THEORY.md section 4, precision rule).

A loss that runs its ``exp`` (or anything on the gradient path) in float32 or bf16 gives
coefficients rounded to that format; residuals at that level are round-off, judged at
:data:`exchange.checker.tolerances.PRECISION_RTOL`.
"""

from __future__ import annotations

import torch

from exchange.checker.cases import Case, GroupConfig, build
from exchange.checker.tolerances import PRECISIONS
from exchange.core.coefficients import LossFn, token_coefficients
from exchange.errors import InvalidArgument

__all__ = ["detect_precision", "resolve_precision"]


def detect_precision(loss_fn: LossFn) -> str:
    """The coarsest format in which every token coefficient of ``loss_fn`` is exactly
    representable, on a float64 group with generic rewards and ratios: a float64 loss
    gives generic float64 values."""
    case = Case(
        groups=(
            GroupConfig(((1, 2, 3), (1, 2, 0, 1), (1, 3), (2, 2, 1)), (0.3, 0.71, 0.13, 0.97)),
            GroupConfig(((1, 2), (1, 0, 3)), (0.41, 0.09)),
        ),
        off_policy=True,
    )
    rollout = build(case)
    kappa = token_coefficients(loss_fn, rollout.logprobs, rollout)
    values = kappa[(kappa != 0) & torch.isfinite(kappa)]
    if values.numel() < 4:
        return "float64"
    for name, dtype in (("bf16", torch.bfloat16), ("float32", torch.float32)):
        if bool((values.to(dtype).to(values.dtype) == values).all()):
            return name
    return "float64"


def resolve_precision(loss_fn: LossFn, precision: str | None) -> tuple[str, bool]:
    """``(precision, detected)``: the one given, else the loss's own declaration (an
    attribute ``exchange_precision``, which the library adapters set where the library
    rounds an intermediate that later float64 arithmetic hides), else detected."""
    if precision is None:
        precision = getattr(loss_fn, "exchange_precision", None)
    if precision is None:
        return detect_precision(loss_fn), True
    if precision not in PRECISIONS:
        raise InvalidArgument(f"precision={precision!r}: choose from {PRECISIONS} (or None to detect it).")
    return precision, False
