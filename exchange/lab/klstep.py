"""The KL-normalised step: rescale each rollout's whole parameter change to a KL target.

Step size confounds a paired experiment whenever the arms' updates differ in size (the
transformer M1 pair moved 4-6x more KL per step in one arm). After all of a rollout's
minibatch updates, the whole change ``Delta = theta_1 - theta_0`` is replaced by
``c * Delta`` with ``c > 0`` chosen so that

    mean KL(pi_{theta_0} || pi_{theta_0 + c Delta})  over the **control contexts**  = target

Same optimiser, same lr, same moments in both arms (the optimiser's state is not
touched; only the parameters are rescaled).

Which contexts: by Prop. 3.1 the learning tax *is* extra KL on shared contexts, so a
KL measured on all contexts would partly normalise away the effect under test. The
control contexts (:func:`control_contexts`) exclude every context shared by all
responses of its group (prefix common to the group, so the template and the S slot
once the template is emitted) and the probe positions (every template or S token and
the slot right after the template, where S is decided). What remains are the decision
and filler contexts of the responses, where the pathway under test does not act
directly. The KL on shared contexts is still measured and reported
(``kl/shared_contexts``) so the choice can be checked on the pilot.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from exchange.core.rollout import Rollout
from exchange.errors import InvalidArgument
from exchange.lab.tasks import ROLE_DECISION, ROLE_FILLER, TEMPLATE, token_roles

__all__ = ["KL_TOLERANCE", "SCALE_CAP", "control_contexts", "normalise_step"]

KL_TOLERANCE = 0.02
"""Relative tolerance of the achieved KL (a few secant steps reach ~1e-3)."""
SCALE_CAP = 10.0
"""Largest factor the step may be multiplied by (issue 42). The rescale is a line search
along the optimiser's own step; beyond an order of magnitude it is an extrapolation the
optimiser never computed (forced-S pilots of M1 and M2 reached factors of 153 and 3.4e7
and the runs collapsed). A capped step then moves less KL than the target, and the
report prints the cap and each arm's largest factor (``kl/scale``), so a design whose
arms hit it is visible as not KL-matched."""


def control_contexts(rollout: Rollout) -> Tensor:
    """``BoolTensor[N, T]``: response positions whose next-token distribution the KL
    target is measured on (see the module): not a context common to the whole group, not
    a template/S token, not the slot right after the template."""
    tokens, mask = rollout.tokens, rollout.mask
    n, t_max = tokens.shape
    gidx = rollout.group_index
    # common[i, t]: the prefix o_i[<t] is the same for every response of i's group
    same = torch.ones(n, t_max, dtype=torch.bool)
    for g in gidx.unique():
        rows = (gidx == g).nonzero().flatten()
        agree = (tokens[rows] == tokens[rows[:1]]).all(0) & mask[rows].all(0)  # [T]
        lcp = int(agree.long().cumprod(0).sum())
        same[rows] = torch.arange(t_max) <= lcp
    roles = token_roles(tokens)
    after_template = torch.zeros_like(mask)
    after_template[:, 1:] = tokens[:, :-1] == TEMPLATE[-1]
    if rollout.prompt_tokens is not None:  # Task.template_in_prompt: the S slot opens the response
        after_template[:, 0] = rollout.prompt_tokens[:, -1] == TEMPLATE[-1]
    probe = ((roles != ROLE_DECISION) & (roles != ROLE_FILLER)) | after_template  # template/S tokens, S slot
    return mask & ~same & ~probe


def normalise_step(model: nn.Module, theta0: list[Tensor], kl_of: Callable[[], float | None], target: float,
                   *, iters: int = 6, cap: float = SCALE_CAP) -> tuple[float, float | None]:
    """Rescale the parameters' change since ``theta0`` so that ``kl_of()`` equals ``target``,
    by a factor ``c <= cap`` (:data:`SCALE_CAP`).

    ``theta0``: the parameters before the rollout's updates (``model.parameters()`` order);
    ``kl_of()``: the KL at the current parameters (None when there is no control context).
    Returns ``(c, achieved KL)``. A zero change or no control context leaves the step
    as it is (``c = 1``); at ``c = cap`` the achieved KL stays below the target."""
    if not target > 0:
        raise InvalidArgument(f"[train] kl_target={target} must be > 0 (0 turns the KL-normalised step off).")
    if not cap >= 1:
        raise InvalidArgument(f"cap={cap} must be >= 1 (the optimiser's own step is always allowed).")
    params = list(model.parameters())
    delta = [p.detach() - a for p, a in zip(params, theta0)]

    def at(c: float) -> float | None:
        with torch.no_grad():
            for p, a, d in zip(params, theta0, delta):
                p.copy_(a + c * d)
        return kl_of()

    c, kl = 1.0, kl_of()
    if kl is None or kl <= 0:
        return 1.0, kl
    for _ in range(iters):  # KL ~ c^2 near 0: a multiplicative secant on sqrt(KL)
        if abs(kl - target) <= 1e-3 * target:
            break
        c = min(c * (target / kl) ** 0.5, cap)
        kl = at(c)
        if c == cap and kl is not None and kl < target:
            break  # capped: the target lies beyond the extrapolation allowed
        if kl is None or kl <= 0:
            break
    return c, kl
