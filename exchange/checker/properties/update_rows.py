"""The optimizer step a loss declares it computes (THEORY.md section 4: a recipe audit
judges one optimizer step; M8, split updates).

A ``loss_fn`` that computes one optimizer step of a schedule which holds part of the
batch it is given (TRL's adapter at ``gradient_accumulation_steps`` not a multiple of
``steps_per_generation``: the step is one shuffled micro-batch of the generation batch,
the advantages still the whole groups') declares the step's rows with the attribute
``loss_fn.exchange_update_rows(rollout) -> BoolTensor[N]``: True on the rows whose
coefficients the step computes. Without it every row is in the step (the batch is one
update). The checker then reads THEORY.md's definitions on the step: the permutations
that (Z) averages over and that (P) applies move each group's rows in the step among
themselves and the rest among the rest (:func:`~exchange.checker.properties.reward_moves.cyclic_shifts`,
:mod:`~exchange.checker.properties.permutation_invariant`); events stay the whole
group's, since a shared event of the group whose occurrences fall in different steps
is what a split step leaves uncancelled (M8: ``K_e = c h(e) sum_{i in S} A_i``).

The declaration must be a function of the layout (row count, groups, tokens), not of the
rewards or log-probs: the bulk fuzzer calls it once per layout for every configuration.
"""

from __future__ import annotations

import torch
from torch import Tensor

from exchange.core.rollout import Rollout
from exchange.errors import ObjectiveError

__all__ = ["ATTRIBUTE", "update_rows", "splits_a_group"]

ATTRIBUTE = "exchange_update_rows"


def _declaring(loss_fn):
    """The loss that carries the declaration: ``loss_fn`` or, under the checker's float64
    and float32 twins, the user's loss they wrap."""
    from exchange.checker.twin import Float64Twin

    while not hasattr(loss_fn, ATTRIBUTE) and isinstance(loss_fn, Float64Twin):
        loss_fn = loss_fn.loss_fn
    return loss_fn


def update_rows(loss_fn, rollout: Rollout) -> Tensor | None:
    """``[N]`` bool on ``rollout``'s device: the rows of the optimizer step ``loss_fn``
    computes, as its ``exchange_update_rows`` declares them; ``None`` when it declares
    nothing (every row is the step). Raises :class:`~exchange.errors.ObjectiveError`
    naming the attribute and the fix when the declaration is not a bool tensor ``[N]``."""
    fn = _declaring(loss_fn)
    declared = getattr(fn, ATTRIBUTE, None)
    if declared is None:
        return None
    name = getattr(fn, "__name__", type(fn).__name__)
    fix = (f"{ATTRIBUTE}(rollout) must return a bool tensor [N] (N = rollout.n), True on the rows whose "
           "coefficients the loss's optimizer step computes; delete the attribute to judge every row as one step")
    if not callable(declared):
        raise ObjectiveError(f"{name}.{ATTRIBUTE} is a {type(declared).__name__}, not a function: {fix}.")
    rows = declared(rollout)
    if not isinstance(rows, Tensor) or rows.dtype != torch.bool or tuple(rows.shape) != (rollout.n,):
        got = (f"a {rows.dtype} tensor of shape {list(rows.shape)}" if isinstance(rows, Tensor)
               else f"a {type(rows).__name__}")
        raise ObjectiveError(f"{name}.{ATTRIBUTE}(rollout) returned {got} for a rollout of {rollout.n} rows: {fix}.")
    return rows.to(rollout.group.device)


def splits_a_group(rollout: Rollout, rows: Tensor | None) -> bool:
    """Whether the step ``rows [N]`` holds part of some group of ``rollout`` (some of its
    rows in the step, some not): M8's condition."""
    if rows is None:
        return False
    gi = rollout.group_index.to(rows.device)
    inside = torch.zeros(rollout.n_groups, dtype=torch.long, device=rows.device).index_add_(0, gi, rows.long())
    sizes = torch.bincount(gi, minlength=rollout.n_groups)
    return bool(((inside > 0) & (inside < sizes)).any())
