"""Drift probes: fixed reference solutions whose log-probs are tracked during RL (P2).

For each probe prompt there are two equally rewarded correct solutions, both with the
style token S, one with no filler and one with ``max_filler`` filler tokens (Cor. 3.2's
``y_a``, ``y_b``). The probes are the *same contexts at every evaluation*, so P2 reads
the signed change of log p at fixed contexts (the style token S after the template, the
template, the whole reference solution) and P3 the entropy of the next-token
distribution at fixed weak-credit contexts (template, S and filler positions), never at
whatever positions a rollout happened to sample.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from exchange.core import metric_keys as mk
from exchange.lab.tasks import PAD, ROLE_DECISION, ROLE_FILLER, ROLE_STYLE, ROLE_TEMPLATE, Task, token_roles
from exchange.models import sequence_logits
from exchange.core.rollout import Rollout

__all__ = ["make_probes", "probe_logprobs", "probe_scalars"]


def make_probes(task: Task, n_prompts: int, gen: torch.Generator) -> Rollout:
    """A ``Rollout`` of ``2 * n_prompts`` reference solutions: row ``2k`` (no filler) and
    row ``2k + 1`` (``task.max_filler`` filler) answer prompt ``k``; all rewards are 1."""
    prompts = task.sample_prompts(n_prompts, gen).repeat_interleave(2, dim=0)  # [2n, P]
    # Task.long_wrong: no filler after a correct answer, so both probes are filler-free
    # Task.exact_filler: every grammatical response has max_filler fillers, so both probes have them
    short = task.max_filler if task.exact_filler else 0
    n_filler = torch.tensor([short, 0 if task.long_wrong else task.max_filler]).repeat(n_prompts)
    tokens = task.reference(prompts, gen, n_filler=n_filler, style=torch.ones(2 * n_prompts, dtype=torch.bool),
                            plain_filler=True)  # the probe's S is the head slot's only
    mask = tokens != PAD
    n = tokens.shape[0]
    return Rollout(
        tokens=tokens, mask=mask, rewards=torch.ones(n, dtype=torch.float64),
        group=torch.arange(n) // 2, old_logprobs=torch.zeros(tokens.shape, dtype=torch.float64),
        prompt_tokens=prompts, prompt_mask=torch.ones(prompts.shape, dtype=torch.bool),
    )


def _mean(x: Tensor, m: Tensor) -> float | None:
    return float(x[m].mean()) if bool(m.any()) else None


@torch.no_grad()
def probe_logprobs(model: nn.Module, probes: Rollout) -> dict[str, float | None]:
    """Mean per-token log-probs of the probes by role, and the short-vs-long log-odds.

    - ``drift/template_logp``, ``drift/style_logp``, ``drift/filler_logp``, ``drift/decision_logp``;
    - ``entropy/fixed_weak_credit``, ``entropy/fixed_style``: next-token entropy at the
      fixed template/S/filler contexts and at the S context;
    - ``drift/zero_credit_logp``: template and filler positions together;
    - ``drift/ref_seq_logp``: mean total log-prob of a reference solution;
    - ``drift/short_vs_long_logodds``: mean ``log p(y_short) - log p(y_long)``.
    """
    logits, _ = sequence_logits(model, probes)
    logp = torch.log_softmax(logits.double(), -1)  # [2n, T, V]
    lp = logp.gather(-1, probes.tokens.clamp(min=0)[..., None]).squeeze(-1)
    lp = torch.where(probes.mask, lp, torch.zeros((), dtype=lp.dtype))
    ent = -(logp.exp() * logp).sum(-1)  # [2n, T] entropy of the next-token distribution
    roles, m = token_roles(probes.tokens), probes.mask
    seq = (lp * m).sum(dim=1)  # [2n]
    weak = m & (roles != ROLE_DECISION)
    return {
        mk.DRIFT_TEMPLATE: _mean(lp, m & (roles == ROLE_TEMPLATE)),
        mk.DRIFT_STYLE: _mean(lp, m & (roles == ROLE_STYLE)),
        mk.DRIFT_FILLER: _mean(lp, m & (roles == ROLE_FILLER)),
        mk.DRIFT_DECISION: _mean(lp, m & (roles == ROLE_DECISION)),
        mk.DRIFT_ZERO_CREDIT: _mean(lp, weak),
        mk.DRIFT_REF_SEQ: float(seq.mean()),
        mk.DRIFT_SHORT_VS_LONG: float((seq[0::2] - seq[1::2]).mean()),
        mk.ENTROPY_FIXED_WEAK_CREDIT: _mean(ent, weak),
        mk.ENTROPY_FIXED_STYLE: _mean(ent, m & (roles == ROLE_STYLE)),
    }


def probe_scalars(probes: Rollout) -> dict[str, Callable[[nn.Module], Tensor]]:
    """Differentiable versions of two primary probes of :func:`probe_logprobs`, for the
    attribution instrument (:mod:`exchange.lab.attribution`): ``drift/style_logp`` (P2)
    and ``entropy/fixed_weak_credit`` (P3), each ``f(model) -> scalar Tensor``."""
    roles, m = token_roles(probes.tokens), probes.mask
    style, weak = m & (roles == ROLE_STYLE), m & (roles != ROLE_DECISION)

    def logp(model: nn.Module) -> tuple[Tensor, Tensor]:
        logits, _ = sequence_logits(model, probes)
        lp_all = torch.log_softmax(logits.double(), -1)  # [2n, T, V]
        return lp_all, lp_all.gather(-1, probes.tokens.clamp(min=0)[..., None]).squeeze(-1)

    def style_logp(model: nn.Module) -> Tensor:
        return logp(model)[1][style].mean()

    def weak_entropy(model: nn.Module) -> Tensor:
        lp_all = logp(model)[0]
        return (-(lp_all.exp() * lp_all).sum(-1))[weak].mean()

    return {mk.DRIFT_STYLE: style_logp, mk.ENTROPY_FIXED_WEAK_CREDIT: weak_entropy}
