"""Drift probes: fixed reference solutions whose log-probs are tracked during RL (P2).

For each probe prompt there are two equally rewarded correct solutions, one with no
filler and one with ``max_filler`` filler tokens (Cor. 3.2's ``y_a``, ``y_b``). Their
template and filler log-probs carry no credit, so under an exchangeable objective they
should stay flat in expectation; the log-odds between the two solutions should too.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from exchange.lab.tasks import PAD, ROLE_DECISION, ROLE_FILLER, ROLE_TEMPLATE, Task, token_roles
from exchange.models import response_logprobs
from exchange.core.rollout import Rollout

__all__ = ["make_probes", "probe_logprobs"]


def make_probes(task: Task, n_prompts: int, gen: torch.Generator) -> Rollout:
    """A ``Rollout`` of ``2 * n_prompts`` reference solutions: row ``2k`` (no filler) and
    row ``2k + 1`` (``task.max_filler`` filler) answer prompt ``k``; all rewards are 1."""
    prompts = task.sample_prompts(n_prompts, gen).repeat_interleave(2, dim=0)  # [2n, P]
    n_filler = torch.tensor([0, task.max_filler]).repeat(n_prompts)
    tokens = task.reference(prompts, gen, n_filler=n_filler)
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

    - ``drift/template_logp``, ``drift/filler_logp``, ``drift/decision_logp``;
    - ``drift/zero_credit_logp``: template and filler positions together;
    - ``drift/ref_seq_logp``: mean total log-prob of a reference solution;
    - ``drift/short_vs_long_logodds``: mean ``log p(y_short) - log p(y_long)``.
    """
    lp = response_logprobs(model, probes).double()  # [2n, T]
    roles, m = token_roles(probes.tokens), probes.mask
    seq = (lp * m).sum(dim=1)  # [2n]
    return {
        "drift/template_logp": _mean(lp, m & (roles == ROLE_TEMPLATE)),
        "drift/filler_logp": _mean(lp, m & (roles == ROLE_FILLER)),
        "drift/decision_logp": _mean(lp, m & (roles == ROLE_DECISION)),
        "drift/zero_credit_logp": _mean(lp, m & (roles != ROLE_DECISION)),
        "drift/ref_seq_logp": float(seq.mean()),
        "drift/short_vs_long_logodds": float((seq[0::2] - seq[1::2]).mean()),
    }
