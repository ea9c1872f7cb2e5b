"""Cancellation in the shared token space: the output-embedding rows.

THEORY.md section 1. With ``logits = W h`` (``W`` the head, row ``W_v`` per token),
``d l[i,t] / d W_v = (1[o_i[t] = v] - p_v(c_{i,t})) h_{i,t}``, so the update of row ``v``
collects, from every occurrence, the contribution

    u_{i,t} = kappa[i,t] * (1[o_i[t] = v] - p_v(c_{i,t})) * h_{i,t}          [d]

and ``U_v = sum_{i,t} u_{i,t}``. Contexts differ, so ``h`` differs and identical-event
algebra no longer applies; what remains is approximate cancellation. We report

    retained_v = ||U_v|| / sum_{i,t} ||u_{i,t}||    (1: all aligned, 0: fully cancelled)

over every occurrence, and over the occurrences of ``v`` itself ("own": the
``kappa (1 - p_v) h`` terms that THEORY.md names). Closed form from one forward pass
(hidden states captured at the head's input): cost ``O(N T d)`` per token id. Only the
head's own path is measured: with tied embeddings the input-embedding use of the same
matrix is not included, and a head bias is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import torch
from torch import Tensor, nn

from exchange.core.coefficients import LossFn, token_coefficients
from exchange.errors import InvalidArgument
from exchange.models import output_head, sequence_logits
from exchange.core.rollout import Rollout

__all__ = ["TokenCancellation", "head_features", "token_space_cancellation"]


@dataclass(frozen=True)
class TokenCancellation:
    """Cancellation on one output-embedding row ``W_v``.

    Fields:
        token_id: ``v``.
        n_occurrences: real tokens equal to ``v``.
        update_norm: ``||U_v||`` (``U_v`` = the row's part of ``-grad loss``).
        norm_sum: ``sum_{i,t} ||u_{i,t}||`` over every real token.
        retained: ``update_norm / norm_sum`` (NaN when nothing contributes).
        own_update_norm, own_norm_sum, own_retained: the same over occurrences of ``v``.
        update: ``U_v``, ``Tensor[d]``.
    """

    token_id: int
    n_occurrences: int
    update_norm: float
    norm_sum: float
    retained: float
    own_update_norm: float
    own_norm_sum: float
    own_retained: float
    update: Tensor = field(repr=False)

    @property
    def cancelled(self) -> float:
        """``1 - retained``: the fraction of the contributions' total norm that cancelled."""
        return 1.0 - self.retained


def head_features(model: nn.Module, rollout: Rollout) -> tuple[Tensor, Tensor, Tensor]:
    """``(h [N, T, d], probs [N, T, V], logprobs l [N, T])`` at the response positions.

    ``h`` is the input of the output head (captured with a forward hook), so that
    ``logits = h @ W.T (+ bias)``.
    """
    head = output_head(model)
    captured: list[Tensor] = []
    hook = head.register_forward_hook(lambda _m, inputs, _out: captured.append(inputs[0]))
    try:
        with torch.no_grad():
            logits, _ = sequence_logits(model, rollout)  # [N, T, V]
    finally:
        hook.remove()
    p = rollout.prompt_tokens.shape[1]
    h = captured[-1][:, p - 1 : -1]  # [N, T, d], aligned with logits
    if h.shape[:2] != logits.shape[:2]:
        raise InvalidArgument(
            f"the head's input has shape={list(captured[-1].shape)}, not one row per position; "
            "token_space_cancellation needs a model that applies its head to every position."
        )
    logp = torch.log_softmax(logits.double(), dim=-1)
    l = logp.gather(-1, rollout.tokens.clamp(min=0)[..., None]).squeeze(-1)
    return h.double(), logp.exp(), torch.where(rollout.mask, l, torch.zeros((), dtype=l.dtype))


def token_space_cancellation(
    model: nn.Module, loss_fn: LossFn, rollout: Rollout, token_ids: Iterable[int]
) -> list[TokenCancellation]:
    """Cancellation on the head rows of ``token_ids`` for the update of ``loss_fn``.

    ``sum U_v`` over the selected rows equals the head-weight rows of ``-grad loss``
    (tested against autograd). Returns one :class:`TokenCancellation` per token id.
    """
    ids = [int(v) for v in token_ids]
    h, probs, l = head_features(model, rollout)
    vocab = probs.shape[-1]
    bad = [v for v in ids if not 0 <= v < vocab]
    if bad:
        raise InvalidArgument(f"token_ids contains {bad[0]}, outside the vocabulary 0..{vocab - 1}.")
    kappa = token_coefficients(loss_fn, l, rollout)  # [N, T]
    out = []
    for v in ids:
        own = rollout.mask & (rollout.tokens == v)  # [N, T]
        coef = kappa * (own.double() - probs[..., v])  # [N, T]: kappa (1[y=v] - p_v)
        u = coef[..., None] * h  # [N, T, d]
        u_norm = u.norm(dim=-1)  # [N, T]
        update = u.sum(dim=(0, 1))
        own_update = (u * own[..., None]).sum(dim=(0, 1))
        norm_sum = float(u_norm[rollout.mask].sum())
        own_sum = float(u_norm[own].sum())
        out.append(
            TokenCancellation(
                token_id=v,
                n_occurrences=int(own.sum()),
                update_norm=float(update.norm()),
                norm_sum=norm_sum,
                retained=float(update.norm()) / norm_sum if norm_sum > 0 else float("nan"),
                own_update_norm=float(own_update.norm()),
                own_norm_sum=own_sum,
                own_retained=float(own_update.norm()) / own_sum if own_sum > 0 else float("nan"),
                update=update,
            )
        )
    return out
