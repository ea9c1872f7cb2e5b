"""Parameter dictionaries: selecting ``theta``, flattening, norms, masked backward passes.

A parameter-space quantity is a ``dict[str, Tensor]`` keyed like
``model.named_parameters()``; these helpers keep that convention in one place.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch
from torch import Tensor, nn

from exchange.errors import InvalidArgument

ParamDict = dict[str, Tensor]


def select_params(model: nn.Module, names: Sequence[str] | None = None) -> ParamDict:
    """``theta``: detached copies of the chosen parameters, each ``requires_grad``.

    ``names=None`` takes every parameter with ``requires_grad`` (what an optimiser would
    update). Copies, so the model's own ``.grad`` and flags are never touched.
    """
    available = dict(model.named_parameters())
    if names is None:
        chosen = [n for n, p in available.items() if p.requires_grad]
    else:
        chosen = list(names)
        unknown = [n for n in chosen if n not in available]
        if unknown:
            sample = ", ".join(list(available)[:6])
            raise InvalidArgument(
                f"params={unknown[0]!r} is not a parameter of {type(model).__name__}; "
                f"names look like: {sample}, ... (see model.named_parameters())."
            )
    if not chosen:
        raise InvalidArgument("params=[] selects no parameter; pass names from model.named_parameters().")
    return {n: available[n].detach().requires_grad_(True) for n in chosen}


def check_direction(model: nn.Module, direction: Mapping[str, Tensor]) -> ParamDict:
    """Validate a parameter-space direction against the model's parameter shapes."""
    available = dict(model.named_parameters())
    if not direction:
        raise InvalidArgument("direction={} is empty; pass e.g. learning_tax(...).residual.")
    out: ParamDict = {}
    for name, value in direction.items():
        if name not in available:
            raise InvalidArgument(f"direction has key {name!r}, which is not a parameter of {type(model).__name__}.")
        if tuple(value.shape) != tuple(available[name].shape):
            raise InvalidArgument(
                f"direction[{name!r}] shape={list(value.shape)} differs from the parameter's "
                f"{list(available[name].shape)}."
            )
        out[name] = value.detach().to(available[name].dtype)
    return out


def masked_backward(logprobs: Tensor, theta: ParamDict, weights: Tensor) -> ParamDict:
    """``sum_{i,t} weights[i,t] * grad_theta l[i,t]`` in one backward pass.

    ``logprobs: [N, T]`` must have been computed from ``theta`` (the graph is retained
    so that several masks can be pushed through one forward pass).
    """
    names = list(theta)
    grads = torch.autograd.grad(
        logprobs,
        [theta[n] for n in names],
        grad_outputs=weights.to(logprobs.dtype),
        retain_graph=True,
        allow_unused=True,
    )
    return {n: (torch.zeros_like(theta[n]) if g is None else g.detach()) for n, g in zip(names, grads)}


def zeros_like(d: ParamDict) -> ParamDict:
    return {n: torch.zeros_like(v).detach() for n, v in d.items()}


def add(*dicts: ParamDict) -> ParamDict:
    return {n: sum(d[n] for d in dicts) for n in dicts[0]}


def norm(d: Mapping[str, Tensor]) -> float:
    """Euclidean norm of the flattened dictionary, in float64."""
    return float(torch.sqrt(sum((v.double() ** 2).sum() for v in d.values())))


def dot(a: Mapping[str, Tensor], b: Mapping[str, Tensor]) -> float:
    return float(sum((a[n].double() * b[n].double()).sum() for n in a))


def flatten(d: Mapping[str, Tensor]) -> Tensor:
    """``[D]``: the values concatenated in key order."""
    return torch.cat([v.reshape(-1) for v in d.values()])


def ratio(num: float, den: float) -> float:
    """``num / den``, NaN when the denominator is exactly zero (quantity undefined)."""
    return num / den if den > 0 else float("nan")
