"""The forced-prefix certificate: does a probe event carry credit?

A probe (the style token S after the template) may be used for P2/P3 only if it carries
no credit: forcing it must not change the chance of a correct answer. For held-out
prompts ``x_j`` the certificate computes, **exactly** (teacher forcing, no sampling):

    P_forced(x) = P(correct | x, template, S)
    P_banned(x) = P(correct | x, template, S never emitted)   (S masked and renormalised)

with ``P(correct | prefix) = sum over correct answers a of p(a | prefix) * p(EOS or a filler
| prefix, a)``: under the task grammar (:class:`exchange.lab.tasks.GrammarLM`) the
template and S are capped, and after the answer only EOS or filler keeps it correct
(after a filler only filler or EOS may follow). The credit is the paired mean of
``P_forced - P_banned`` over prompts, with its ``1 - 2 alpha`` t-interval.

An **equivalence test** certifies the probe: the interval must lie inside ``±bound``.
The bound comes from the predicted effect (:func:`credit_bound`): the credit the probe
may carry is the credit that could drive at most ``delta_hat / 3`` of drift over the
run, converted with a measured sensitivity (nats of probe drift per unit of credit).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import Tensor, nn

from exchange.errors import InvalidArgument
from exchange.lab.tasks import EOS, FILLER, STYLE, Task
from exchange.lab.verdict import interval

__all__ = ["Certificate", "StyleCredit", "certify", "credit_bound", "p_correct", "style_credit"]


@dataclass(frozen=True)
class StyleCredit:
    """The measured credit of S on ``n`` held-out prompts (probabilities in [0, 1])."""

    forced: float
    banned: float
    credit: float
    """mean of ``P_forced - P_banned`` over prompts"""
    low: float
    high: float
    """``1 - 2 alpha`` t-interval of the credit (the TOST interval)"""
    n: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Certificate:
    credit: StyleCredit
    bound: float
    certified: bool
    bound_source: str


@torch.no_grad()
def p_correct(model: nn.Module, task: Task, prompts: Tensor, forced: bool) -> Tensor:
    """``[n]`` exact P(correct | prompt, template[, S]) (see the module)."""
    head = task.head + ([STYLE] if forced else [])
    rows, owner = [], []
    for j, prompt in enumerate(prompts.tolist()):
        for a in task.answers(prompt):
            rows.append(prompt + head + list(a))
            owner.append((j, len(a)))
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [EOS] * (width - len(r)) for r in rows])
    logp = torch.log_softmax(_banned_logits(model(ids), forced).double(), -1)  # [R, S, V]
    out = torch.zeros(prompts.shape[0], dtype=torch.float64)
    start = prompts.shape[1] + len(head)  # first answer token
    end_ok = torch.tensor([EOS, *task.filler_tokens])
    for r, (j, k) in enumerate(owner):
        pos = torch.arange(start, start + k)
        lp_a = logp[r, pos - 1, ids[r, pos]].sum()
        p_end = logp[r, start + k - 1, end_ok].exp().sum()
        out[j] += lp_a.exp() * p_end
    return out


def _banned_logits(logits: Tensor, forced: bool) -> Tensor:
    if forced:
        return logits
    return logits.masked_fill(torch.arange(logits.shape[-1], device=logits.device) == STYLE, float("-inf"))


def style_credit(model: nn.Module, task: Task, prompts: Tensor, *, alpha: float = 0.05) -> StyleCredit:
    """Measure S's credit on ``prompts [n, P]`` (held out: not the RL prompts), n >= 2."""
    if prompts.shape[0] < 2:
        raise InvalidArgument(f"prompts: {prompts.shape[0]} held-out prompts; the certificate needs >= 2.")
    pf, pb = p_correct(model, task, prompts, True), p_correct(model, task, prompts, False)
    mean, low, high, _, n = interval((pf - pb).numpy(), alpha=2 * alpha)
    return StyleCredit(float(pf.mean()), float(pb.mean()), mean, low, high, n)


def credit_bound(delta_hat: float, sensitivity: float) -> float:
    """The largest credit the probe may carry: ``(delta_hat / 3) / sensitivity``.

    ``delta_hat``: the predicted pathway effect on the probe (nats, oriented, > 0);
    ``sensitivity``: measured nats of probe drift over the run per unit of credit (> 0)."""
    if not delta_hat > 0 or not sensitivity > 0:
        raise InvalidArgument(f"delta_hat={delta_hat}, sensitivity={sensitivity}: both must be > 0.")
    return delta_hat / 3 / sensitivity


def certify(credit: StyleCredit, bound: float, bound_source: str) -> Certificate:
    """Certified iff the credit's TOST interval lies inside ``(-bound, bound)``."""
    if not bound > 0:
        raise InvalidArgument(f"bound={bound} must be > 0.")
    if not bound_source.strip():
        raise InvalidArgument("bound_source is empty: say where the bound comes from (e.g. credit_bound(...)).")
    return Certificate(credit, bound, bool(-bound < credit.low and credit.high < bound), bound_source)
