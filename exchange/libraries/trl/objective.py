"""Which objective ``ExchangeGRPOTrainer`` trains, and TRL's batch steps it reuses (trl==1.16.0).

- :func:`resolve_objective`: a catalog name, a library target or a ``loss_fn`` callable
  as the ``loss_fn(logprobs [N, T], rollout)`` the trainer trains with;
- :func:`refuse_settings`: one ``InvalidArgument`` naming every GRPOConfig setting the
  objective cannot apply (:mod:`exchange.libraries.trl.settings` decides which);
- :func:`normalize_then_sum`: TRL's ``multi_objective_aggregation="normalize_then_sum"``
  advantages ``[B]`` from every reward function;
- :func:`group_shuffle`: TRL's row shuffle over whole groups (``batching="groups"``).

Split from :mod:`exchange.libraries.trl.trainer` (module size); it re-exports them. No
import of TRL's trainer here, so the recipe audit can bind a run_llm arm's objective
without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from exchange.core.rollout import Rollout
from exchange.errors import InvalidArgument
from exchange.libraries.trl.settings import NO_CATALOG_OBJECTIVE, refused_settings

__all__ = ["group_shuffle", "normalize_then_sum", "refuse_settings", "resolve_objective"]

LossFn = Callable[[Tensor, Rollout], Tensor]


def resolve_objective(objective: str | LossFn, params: Mapping[str, Any] | None = None) -> LossFn:
    """A catalog name (``"dapo"``, ``"gspo+min_replace"``), a library target
    (``"trl:grpo"``, ``"verl:vanilla/token-mean"``) or a ``loss_fn`` callable."""
    if callable(objective):
        if params:
            raise InvalidArgument(f"objective_params={dict(params)!r} given with a callable objective; bind them yourself.")
        return objective
    if not isinstance(objective, str):
        raise InvalidArgument(f"objective={objective!r} is neither a name nor a loss_fn(logprobs, rollout) callable.")
    if objective in NO_CATALOG_OBJECTIVE:
        raise InvalidArgument(
            f"objective={objective!r}: TRL's loss_type={objective!r} has no catalog objective; train it with "
            "objective=None (TRL's own loss, which the exchange callback measures).")
    if ":" in objective:
        from exchange.libraries import resolve

        return resolve(objective, {k: str(v) for k, v in (params or {}).items()})
    from exchange.objectives import resolve

    return resolve(objective, **dict(params or {}))


def normalize_then_sum(per_func: Tensor, weights: Tensor, group_size: int) -> Tensor:
    """TRL's ``multi_objective_aggregation="normalize_then_sum"`` advantages ``[B]`` from
    the gathered rewards ``per_func [B, K]`` (NaN: a function that did not score the row):
    each function's rewards centred and divided by their group std (+1e-4), the weighted
    sum, then centred and divided by the std of the whole batch (+1e-4); a row no
    function scored gets 0. ``scale_rewards`` plays no part, as in TRL."""
    from trl.trainer.utils import nanstd

    grouped = per_func.view(-1, group_size, per_func.shape[1])
    mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
    std_k = nanstd(grouped, dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(mean_k)
    reward_k = ((grouped - mean_k) / (std_k + 1e-4)).view(-1, per_func.shape[1])
    rewards = (reward_k * weights.to(reward_k.device, reward_k.dtype)[None, :]).nansum(dim=1)
    rewards[torch.isnan(per_func).all(dim=1)] = torch.nan
    std = nanstd(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
    return torch.nan_to_num((rewards - torch.nanmean(rewards)) / (std + 1e-4), nan=0.0)


def group_shuffle(batch: dict, group_size: int) -> dict:
    """TRL's ``shuffle_sequence_dict`` over whole groups (consecutive ``group_size`` rows)."""
    n = len(next(v for v in batch.values() if v is not None))
    # on the CPU, as TRL's own shuffle draws it: the same generator stream on every device
    perm = (torch.randperm(n // group_size, device="cpu")[:, None] * group_size
            + torch.arange(group_size, device="cpu")[None, :]).flatten()

    def permute(v):
        if v is None or (isinstance(v, Tensor) and v.ndim == 0):
            return v
        if isinstance(v, Tensor):
            return v[perm.to(v.device)]
        return [v[i] for i in perm.tolist()]

    return {k: permute(v) for k, v in batch.items()}


def refuse_settings(args, objective, objective_params, trl_defaults: bool) -> None:
    """One ``InvalidArgument`` naming every GRPOConfig setting the objective cannot apply."""
    if objective in NO_CATALOG_OBJECTIVE:
        resolve_objective(objective)  # raises, naming the loss type and the fix
    refused = refused_settings(args, objective, objective_params, trl_defaults)
    if refused:
        raise InvalidArgument(f"ExchangeGRPOTrainer(objective={getattr(objective, '__name__', objective)!r}) "
                              "cannot apply GRPOConfig." + "; GRPOConfig.".join(refused) + ".")
