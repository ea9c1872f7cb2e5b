"""Per-update measurements of the learning tax, clipping, entropy and KL.

Every function reads a rollout and the token coefficients ``kappa = -d loss / d l``
(:func:`exchange.token_coefficients`); none of them changes the update.

Zero-credit occurrences are the tokens whose true credit is 0 by construction of the
task: template and filler tokens (the verifier ignores them) and every occurrence of a
shared event (it occurs in every response of its group, so it cannot separate them;
THEORY.md section 1). Everything else is a decision occurrence.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from exchange.core import metric_keys as mk
from exchange.core.events import Events, event_coefficients, events, shared_event_coefficients, shared_residual
from exchange.core.metric_keys import SHARED_RESIDUAL
from exchange.models import sequence_logits
from exchange.lab.tasks import ROLE_DECISION, ROLE_FILLER, ROLE_STYLE, ROLE_TEMPLATE, STYLE, token_roles
from exchange.core.rollout import Rollout

__all__ = [
    "prop31_kl", "zero_credit_mask", "coefficient_tax", "clip_fractions", "zero_credit_gradient", "update_norm_share",
    "entropy_by_role", "weak_credit_entropy", "context_kl", "shared_coefficients", "reward_length_covariance", "update_share",
]


def _mean(x: Tensor, m: Tensor) -> float | None:
    """Mean of ``x`` over ``m`` (None when ``m`` is empty: never a fake 0)."""
    return float(x[m].mean()) if bool(m.any()) else None


def zero_credit_mask(rollout: Rollout, ev: Events) -> Tensor:
    """``BoolTensor[N, T]``: template/filler tokens and shared-event occurrences."""
    roles = token_roles(rollout.tokens)
    shared_occ = ev.shared[ev.ids.clamp(min=0)] & rollout.mask
    return rollout.mask & ((roles != ROLE_DECISION) | shared_occ)


def coefficient_tax(kappa: Tensor, rollout: Rollout, ev: Events, zc: Tensor) -> dict[str, float | None]:
    """Coefficient-level learning tax (P1).

    - ``tax/kappa_share``: ``sum_zc |kappa| / sum |kappa|`` over occurrences.
    - ``tax/event_share``: ``sum_{zc events} |K_e| / sum_e |K_e|`` after occurrences of one
      event are summed (what actually reaches the parameters through that event).
    - ``tax/shared_residual`` (:data:`exchange.core.metric_keys.SHARED_RESIDUAL`):
      :func:`exchange.core.events.shared_residual`, the share of shared-event mass that
      failed to cancel (0 under (Z)+(E), Thm T1); None when no token has a coefficient.
    """
    absk = kappa.abs()
    total = float(absk.sum())
    K = event_coefficients(kappa, ev).abs()  # [E]
    zc_event = torch.zeros(ev.count, dtype=torch.bool, device=ev.ids.device)
    zc_event[ev.ids[zc]] = True
    k_total = float(K.sum())
    return {
        mk.KAPPA_SHARE: float(absk[zc].sum()) / total if total > 0 else None,
        mk.EVENT_SHARE: float(K[zc_event].sum()) / k_total if k_total > 0 else None,
        SHARED_RESIDUAL: shared_residual(kappa, rollout, ev) if total > 0 else None,
    }


def clip_fractions(kappa: Tensor, rollout: Rollout) -> dict[str, float | None]:
    """Fraction of tokens whose coefficient was zeroed, by advantage sign (M2, T4).

    The sign is that of ``R_i - mean_g R``; a token with a non-zero advantage and
    ``kappa == 0`` exactly had its gradient cut by a clip (or a mask). Objective-agnostic:
    it reads only ``kappa``.
    """
    centred = rollout.rewards - rollout.group_mean(rollout.rewards)  # [N]
    zero = (kappa == 0) & rollout.mask
    pos = rollout.mask & (centred > 0)[:, None]
    neg = rollout.mask & (centred < 0)[:, None]
    return {
        mk.CLIP_POS_ADV: _mean(zero.double(), pos),
        mk.CLIP_NEG_ADV: _mean(zero.double(), neg),
    }


def zero_credit_gradient(params: list[nn.Parameter], logprobs: Tensor, kappa: Tensor, zc: Tensor) -> list[Tensor]:
    """``g_zc = grad_theta sum_{zc} kappa l``: the part of the policy gradient carried by
    zero-credit occurrences. ``logprobs: [N, T]`` keeps its graph (retained for the
    training backward)."""
    kz = torch.where(zc, kappa, torch.zeros_like(kappa))
    grads = torch.autograd.grad((kz * logprobs).sum(), params, retain_graph=True, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]


def update_norm_share(g_zc: list[Tensor], g_total: list[Tensor]) -> float | None:
    """Parameter-space learning tax ``|g_zc| / (|g_zc| + |g_total - g_zc|)`` in [0, 1].

    ``g_total = sum_{i,t} kappa grad l`` is minus the loss gradient the optimizer uses
    (the loss depends on theta only through ``l``), so one extra backward (for
    ``g_zc``) splits the update between zero-credit and decision occurrences.
    """
    zc = sum(float((g.double() ** 2).sum()) for g in g_zc) ** 0.5
    dec = sum(float(((t - g).double() ** 2).sum()) for g, t in zip(g_zc, g_total)) ** 0.5
    return zc / (zc + dec) if zc + dec > 0 else None


def entropy_by_role(rollout: Rollout) -> dict[str, float | None]:
    """Mean sampling-time entropy (nats) at template, filler, weak-credit and decision
    positions of ``rollout`` (needs ``rollout.entropy``)."""
    roles = token_roles(rollout.tokens)
    h, m = rollout.entropy, rollout.mask
    return {
        mk.ENTROPY_TEMPLATE: _mean(h, m & (roles == ROLE_TEMPLATE)),
        mk.ENTROPY_STYLE: _mean(h, m & (roles == ROLE_STYLE)),
        mk.ENTROPY_FILLER: _mean(h, m & (roles == ROLE_FILLER)),
        mk.ENTROPY_WEAK_CREDIT: _mean(h, m & (roles != ROLE_DECISION)),
        mk.ENTROPY_DECISION: _mean(h, m & (roles == ROLE_DECISION)),
    }


def weak_credit_entropy(model: nn.Module, rollout: Rollout) -> Tensor:
    """Differentiable scalar: the mean next-token entropy (nats, float64) of ``model`` at
    the weak-credit positions of ``rollout`` (``mask & role != decision``: the positions of
    ``entropy/weak_credit``, :func:`entropy_by_role`), at temperature 1 as
    :func:`exchange.lab.trainer.replay_rollout` re-scores a replayed rollout. NaN-free:
    a rollout without such positions gives 0 (its gradient is 0)."""
    logp = torch.log_softmax(sequence_logits(model, rollout)[0].double(), -1)  # [N, T, V]
    h = -(logp.exp() * logp).sum(-1)  # [N, T]
    where = rollout.mask & (token_roles(rollout.tokens) != ROLE_DECISION)
    return h[where].sum() / where.sum().clamp(min=1)


def context_kl(logp_before: Tensor, logp_after: Tensor, where: Tensor) -> float | None:
    """Mean ``KL(pi_before || pi_after)`` of the next-token distributions at ``where``.

    ``logp_*: [N, T, V]`` log-softmax outputs, ``where: BoolTensor[N, T]``. This is the
    measured side of Prop. 3.1 (the movement of a context's distribution by one update).
    """
    kl = (logp_before.exp() * (logp_before - logp_after)).sum(-1)  # [N, T]
    return _mean(kl, where)


def prop31_kl(model: nn.Module, rollout: Rollout, before: dict[str, Tensor]) -> dict[str, float | None]:
    """Prop. 3.1 on the step just taken: predicted ``1/2 d^T F d`` against the measured
    KL at the rollout's shared contexts, with ``d = theta_after - theta_before``.

    ``before``: the parameters before the step (``{name: Tensor}``). The model is put
    back at ``before`` for the measurement (``exchange.paramspace.kl_prediction`` expands
    around the current parameters) and restored exactly afterwards. Needs
    ``exchange.paramspace``; returns ``None`` values when it is absent or the rollout
    has no shared event.
    """
    try:
        from exchange.paramspace import kl_prediction
    except ImportError:
        return {mk.KL_PROP31_PREDICTED: None, mk.KL_PROP31_MEASURED: None}
    after = {n: p.detach().clone() for n, p in model.named_parameters()}
    direction = {n: after[n] - before[n] for n in after}
    out: dict[str, float | None] = {mk.KL_PROP31_PREDICTED: None, mk.KL_PROP31_MEASURED: None}
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(before[n])
        try:
            if bool(events(rollout).shared.any()):
                pred = kl_prediction(model, rollout, direction, etas=(1.0,), contexts="shared")
                out = {mk.KL_PROP31_PREDICTED: float(pred.predicted[0]), mk.KL_PROP31_MEASURED: float(pred.measured[0])}
        finally:
            for n, p in model.named_parameters():
                p.copy_(after[n])
    return out


UPDATE_ROUNDOFF = 1e-6
"""An update with ``||g|| <= UPDATE_ROUNDOFF * sum |kappa|`` is round-off, not a direction.

``||grad l|| <= sqrt(2)`` per occurrence in logit space, and float32 gradients of
coefficients that cancel leave about ``6e-8 * sum |kappa| * ||grad l||``; the floor sits
~10x above that. It is reached when a gate or clip drops every occurrence except shared
events whose copies cancel (e.g. ``token_trust_region`` on the second epoch of the tabular
control): then ``g`` is the cancelled shared part alone, and ``||g_part|| / ||g||`` would
read ~1 from two round-off norms."""


def update_share(g_part: list[Tensor], g_total: list[Tensor], mass: float | None = None) -> float | None:
    """``||g_part|| / ||g_total||``: the share of the update norm carried by a part of the
    occurrences (P1 with ``g_part`` = the shared events' ``sum_e K_e grad l_e``).

    ``mass = sum |kappa|`` of the minibatch: with it, an update at round-off level
    (``||g_total|| <= UPDATE_ROUNDOFF * mass``) has no share (None), not a 0/0 ratio."""
    part = sum(float((g.double() ** 2).sum()) for g in g_part) ** 0.5
    total = sum(float((t.double() ** 2).sum()) for t in g_total) ** 0.5
    if mass is not None and total <= UPDATE_ROUNDOFF * mass:
        return None
    return part / total if total > 0 else None


def shared_coefficients(kappa: Tensor, rollout: Rollout, ev: Events) -> dict[str, float | None]:
    """Signed footprint of the mechanism on shared events (the direction T3/T4 predict).

    - ``tax/shared_K_signed``: ``sum_{e shared} K_e / sum_{e shared} sum_occ |kappa|``
      (in [-1, 1]; 0 when shared events cancel);
    - ``tax/style_K_signed``: the same over shared events whose token is the style token S
      (the probe event: its sign orients P2, :func:`exchange.lab.verdict.orient`);
    - ``tax/style_residual``: ``sum |K_e| / mass`` over those S events: the dose **at the
      probe event**, not pooled with the template's shared mass.
    """
    ids, K, mass = shared_event_coefficients(kappa, ev)  # [S] each
    role = torch.full((ev.count,), -1, dtype=torch.long, device=rollout.tokens.device)
    real = ev.ids >= 0
    role[ev.ids[real]] = token_roles(rollout.tokens)[real]  # S at its head slot only, not S as a filler
    out = {}
    for key, sel in ((mk.SHARED_K_SIGNED, slice(None)), (mk.STYLE_K_SIGNED, role[ids] == ROLE_STYLE)):
        m = float(mass[sel].sum())
        out[key] = float(K[sel].sum()) / m if m > 0 else None
    style = role[ids] == ROLE_STYLE
    m = float(mass[style].sum())
    out[mk.STYLE_RESIDUAL] = float(K[style].abs().sum()) / m if m > 0 else None
    out[mk.ENTROPY_K_SIGNED] = entropy_direction(K, ids, mass, role, rollout, ev)
    return out


def entropy_direction(K: Tensor, ids: Tensor, mass: Tensor, role: Tensor, rollout: Rollout,
                      ev: Events) -> float | None:
    """P3's orientation at the contexts the policy samples (issue 42): over shared events
    ``e`` at weak-credit tokens (not decisions), ``sum_e K_e * p_e * -(log p_e + H_e) / mass``.

    Pushing token ``e``'s log-probability up by ``K_e`` changes its context's entropy by
    ``-K_e p_e (log p_e + H)`` to first order (``dH/dz_e = -p_e (log p_e + H)``), so the
    sign says which way the residual moves the entropy there, per context: raising a
    token lowers the entropy only where ``p_e > exp(-H)``, not where ``p_e > 1/2``.
    ``log p_e`` and ``H`` are the rollout's ``old_logprobs`` and ``entropy`` at an
    occurrence of ``e`` (one context per event); None without entropies or weak events."""
    if rollout.entropy is None or ids.numel() == 0:
        return None
    weak = (role[ids] >= 0) & (role[ids] != ROLE_DECISION)
    if not bool(weak.any()):
        return None
    flat_ids = ev.ids.flatten()
    first = torch.full((ev.count,), -1, dtype=torch.long, device=flat_ids.device)  # one occurrence per event
    pos = torch.arange(flat_ids.numel(), device=flat_ids.device)
    ok = flat_ids >= 0
    first.scatter_reduce_(0, flat_ids[ok], pos[ok], reduce="amax")
    occ = first[ids[weak]]
    lp = rollout.old_logprobs.flatten()[occ].double()
    h = rollout.entropy.flatten()[occ].double()
    m = float(mass[weak].sum())
    return float((K[weak] * lp.exp() * -(lp + h)).sum()) / m if m > 0 else None


def reward_length_covariance(rollout: Rollout) -> float | None:
    """Mean over groups of the within-group covariance of reward and ``1 / L``: its sign
    is the sign T3 predicts for the shared-event drift under per-sequence normalisation
    (positive: correct responses are shorter, shared tokens are pushed up)."""
    r = rollout.rewards
    inv = 1.0 / rollout.lengths.double().clamp(min=1)
    cov = rollout.group_mean((r - rollout.group_mean(r)) * (inv - rollout.group_mean(inv)))  # [N], per group
    return float(cov.mean())
