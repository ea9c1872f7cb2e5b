"""Readable renderings of rollouts: a small text table and a pasteable constructor call."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from exchange.core.rollout import Rollout


def _num(x: float) -> str:
    if x == int(x) and abs(x) < 1e6:
        return str(int(x)) if not math.copysign(1, x) < 0 or x != 0 else "0"
    return f"{x:.4g}"


def rollout_table(r: "Rollout", kappa: torch.Tensor | None = None) -> str:
    """One line per response: group, reward, tokens, ratio and entropy per token.

    ``kappa`` ([N, T]), when given, adds the token coefficients.
    A multi-turn row's context (tool) tokens are shown in brackets among its tokens and
    carry no per-token value (they are not the policy's: Rollout's module docstring).
    """
    lines = []
    lengths, spans = r.lengths.tolist(), r.spans.tolist()
    ratio = None
    if r.logprobs is not None:
        ratio = torch.exp(r.logprobs.double() - r.old_logprobs.double())
    for i in range(r.n):
        L, own = lengths[i], r.mask[i].nonzero().flatten()  # the policy's tokens
        toks = " ".join(str(int(v)) if m else f"[{int(v)}]" for v, m in zip(r.tokens[i, : spans[i]], r.mask[i]))
        line = f"  [{i}] group={int(r.group[i])} reward={_num(float(r.rewards[i]))} L={L} tokens=({toks})"
        if ratio is not None and not torch.allclose(ratio[i, own], torch.ones(L, dtype=ratio.dtype)):
            line += " ratio=(" + " ".join(f"{float(v):.3g}" for v in ratio[i, own]) + ")"
        line += " p_old=(" + " ".join(f"{math.exp(float(v)):.3g}" for v in r.old_logprobs[i, own]) + ")"
        if r.entropy is not None:
            line += " H=(" + " ".join(f"{float(v):.3g}" for v in r.entropy[i, own]) + ")"
        if kappa is not None:
            line += " kappa=(" + " ".join(f"{float(v):.4g}" for v in kappa[i, own]) + ")"
        lines.append(line)
    return "\n".join(lines)


def _tensor_code(t: torch.Tensor) -> str:
    if t.dtype == torch.bool:
        return f"torch.tensor({t.tolist()})"
    if t.dtype == torch.long:
        return f"torch.tensor({t.tolist()})"
    values = [[float(f"{v:.17g}") for v in row] for row in t.tolist()] if t.dim() == 2 else [float(f"{v:.17g}") for v in t.tolist()]
    return f"torch.tensor({values}, dtype=torch.float64)"


def rollout_code(r: "Rollout") -> str:
    """``Rollout(tokens=torch.tensor(...), ...)``: paste it to rebuild the rollout."""
    parts = []
    for f in dataclasses.fields(r):
        value = getattr(r, f.name)
        if f.init and value is not None:
            parts.append(f"    {f.name}={_tensor_code(value)},")
    return "Rollout(\n" + "\n".join(parts) + "\n)"
