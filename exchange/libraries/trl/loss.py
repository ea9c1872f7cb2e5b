"""TRL ``GRPOTrainer`` losses as plain ``loss_fn(logprobs, rollout)`` (trl==1.16.0).

What is TRL's own code and what is ours, per call of the returned ``loss_fn``:

- **Config**: a real ``trl.GRPOConfig(loss_type=..., **params)``; its ``__post_init__``
  validates the options and resolves ``scale_rewards=True/False`` and
  ``epsilon_high=None`` exactly as in training.
- **Advantages and truncation masking**: TRL's own
  ``GRPOTrainer._generate_and_score_completions`` runs on a trainer shell (built with
  ``__new__``; the attributes ``__init__`` would set from the config are copied from the
  real config). Only generation (``_generate``) and reward scoring
  (``_calculate_rewards``) are replaced: they hand back the rollout's tokens and
  rewards. So the group mean/std (``nanstd``, eps 1e-4), ``scale_rewards``,
  ``multi_objective_aggregation`` and ``mask_truncated_completions`` (which zeroes the
  mask of truncated rows *after* the advantages were centred) are TRL's code.
  A row counts as truncated when ``rollout.truncated`` says so: its last token id is
  left as is, while the last token of every other row is shown to TRL as the EOS id.
- **Loss**: TRL's own ``GRPOTrainer._compute_loss`` with
  ``_get_per_token_logps_and_entropies`` returning ``logprobs`` (the tensor the
  coefficients are taken against) and ``rollout.entropy``; ``old_per_token_logps`` is
  ``rollout.old_logprobs`` and ``ref_per_token_logps`` is ``rollout.ref_logprobs``.

Reproduced rather than driven (each one line of TRL for one process): the
``num_items_in_batch`` fed to ``_compute_loss`` is the sum of the (masked) completion
mask, as ``accelerator.gather(loss_mask.sum()).sum()`` on one process. The schedule
(:func:`exchange.libraries.trl.schedule.schedule`, THEORY.md section 4: a recipe audit judges one optimizer step): the
rollout is one generation batch, padded with fully masked rows to a multiple of
``steps_per_generation`` and cut into that many equal micro-batches after a fixed-seed
row shuffle (TRL's ``shuffle_sequence_dict`` and ``split_tensor_dict``; :func:`micro_batches`);
TRL's ``_compute_loss`` runs on the micro-batches of the first optimizer step with
``current_gradient_accumulation_steps = gradient_accumulation_steps`` and the loss is
their sum, the gradient TRL accumulates: every micro-batch when
``gradient_accumulation_steps`` is a multiple of ``steps_per_generation``, else the first
``gradient_accumulation_steps % steps_per_generation`` (a step that holds part of the
generation batch: M8; the returned ``loss_fn`` then declares that step's rows as
``exchange_update_rows``, :func:`update_rows`, and the checker reads (Z) and (P) on the
step). Per-micro-batch normalisers (bnpo's token count, grpo's row count)
and entropy quantiles are then TRL's.

Group layout: TRL assumes each group is ``num_generations`` consecutive rows. Rows are
sorted by group (stable) before the call and the result is put back in rollout order.
When group sizes differ, TRL's advantage code runs once per group size (exact for
``scale_rewards`` "group"/"none"; for "batch", which TRL itself cannot run on unequal
groups, TRL's centring per size divided by the std of every reward in the batch plus
1e-4, TRL's batch formula; for ``multi_objective_aggregation="normalize_then_sum"``, TRL's
group standardisation per size, then its batch step, centred and divided by the std of
every row plus 1e-4).

vLLM (``use_vllm=True``): the rollout's ``sampling_logprobs`` are what ``_generate``
hands TRL as vLLM's log-probs, and its ``old_logprobs`` what TRL's forward pass computes
before scoring, so TRL's own code builds the importance-sampling ratio
(``vllm_importance_sampling_correction``, every mode) and the off-policy mask reads the
sampler's log-probs, as in training. The checker's cases give every event a sampler
log-prob (``exchange.checker.cases.SAMPLER_RATIOS``).

The shell relies on private attributes of trl 1.16.0, hence the version pin; it is built
and driven by :mod:`exchange.libraries.trl.contact`, which owns every private TRL name.
The options and their validation live in :mod:`exchange.libraries.trl.options`, the
derived verdict (``expected``) in :mod:`exchange.libraries.trl.derivation`; both are
re-exported here.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping

import torch
from torch import Tensor

from exchange.core.rollout import Rollout
from exchange.errors import RolloutError
from exchange.libraries.trl.memo import arithmetic
# re-exported: the adapter's public names stay importable from here (exchange.libraries
# reads expected/defaults/parse_params off this module)
from exchange.libraries.trl.derivation import expected  # noqa: F401
from exchange.libraries.trl.options import LOSS_TYPES, PARAMS, defaults, grpo_config  # noqa: F401
from exchange.libraries.trl.schedule import Schedule, micro_batches, schedule, schedule_of  # noqa: F401
from exchange.libraries.versions import library_loss, parse_params, require  # noqa: F401

__all__ = ["LOSS_TYPES", "PARAMS", "Schedule", "defaults", "expected", "loss_fn", "micro_batches", "schedule",
           "update_rows"]

_EOS_OFFSET = 1  # the EOS id shown to TRL is max(token id) + 1, so it collides with nothing
_PAD_ID = -1  # never compared with a real id: completion lists are unpadded


def loss_fn(loss_type: str, params: Mapping[str, Any] | None = None) -> Callable[[Tensor, Rollout], Tensor]:
    """``trl:<loss_type>`` as ``loss_fn(logprobs [N, T], rollout) -> Tensor[]``.

    ``params`` are GRPOConfig options (strings are parsed, e.g. ``{"epsilon": "0.3"}``;
    :func:`exchange.libraries.trl.options.grpo_config` validates them).
    """
    require("trl")
    target = f"trl:{loss_type}"
    options, config = grpo_config(target, loss_type, params)
    # TRL's advantages are float32 values in training: the rewards live in float32
    # (``rewards_per_func = torch.zeros(...)``, the default dtype, grpo_trainer.py:1581;
    # ``reward_weights`` float32, :574-576), and even fed float64 its ``nanstd`` rounds
    # Bessel's factor ``count / (count - 1)`` (an int division: float32, trl/trainer/utils.py:1041)
    # into the std of every std-scaled advantage; the log-probs of a model's forward pass are
    # float32 or coarser. The float64 arithmetic the checker feeds hides that (as AReaL's and
    # ART's float32 advantages), so the loss declares its precision (THEORY.md section 4).
    fn = library_loss(target, options, _loss, precision="float32", config=config)
    plan = schedule(config)
    if plan.splits_groups:  # the step holds part of the generation batch (M8): the checker judges that step
        fn.exchange_update_rows = functools.partial(update_rows, plan)  # type: ignore[attr-defined]
    return fn


def update_rows(plan: Schedule, rollout: Rollout) -> Tensor:
    """``[N]`` bool: the rows of ``rollout`` (one generation batch) in the optimizer step
    the loss computes under ``plan`` (its first ``plan.judged`` micro-batches,
    :func:`micro_batches`), the ``exchange_update_rows`` declaration the checker reads
    (:mod:`exchange.checker.properties.update_rows`)."""
    rows = torch.cat(micro_batches(rollout.n, plan, rollout.mask.device)[: plan.judged])
    inside = torch.zeros(rollout.n, dtype=torch.bool, device=rollout.mask.device)
    inside[rows[rows < rollout.n]] = True
    return inside


# ---------------------------------------------------------------------------- shell
# TRL's GRPOTrainer without a model: exchange.libraries.trl.contact (shell, score, shell_loss).


def _eos_id(rollout: Rollout) -> int:
    return int(rollout.tokens.max()) + _EOS_OFFSET


def _completion_lists(rollout: Rollout, eos_id: int) -> list[list[int]]:
    """Unpadded completion ids of every row of ``rollout``; a row that is not truncated
    ends in ``eos_id``. Built once per rollout (Python lists: no tensor op per group
    size) and picked per group size by :func:`_score`."""
    truncated = rollout.truncated.tolist() if rollout.truncated is not None else [False] * rollout.n
    out = []
    for ids, length, cut in zip(rollout.tokens.tolist(), rollout.lengths.tolist(), truncated):
        ids = ids[:length]
        if not cut:
            ids[-1] = eos_id
        out.append(ids)
    return out


def _uses_sampler(config) -> bool:
    return bool(config.use_vllm)


def _scored(config, rollout: Rollout) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """TRL's advantages ``[N]``, completion mask ``[N, T]`` and, with vLLM, its
    importance-sampling ratio (``[N, T]``, or ``[N, 1]`` for the sequence modes; ``None``
    without the correction) and the sampler's log-probs ``[N, T]`` as TRL pads them;
    rows in rollout order."""
    if _uses_sampler(config) and rollout.sampling_logprobs is None:
        raise RolloutError("rollout.sampling_logprobs=None but trl use_vllm=True: TRL reads vLLM's sampling log-probs "
                           "(its importance-sampling correction, the off-policy mask); pass sampling_logprobs [N, T].")
    order = torch.sort(rollout.group_index, stable=True).indices  # groups contiguous
    sizes = rollout.group_sizes[order]
    batch_std = None
    normalize_then_sum = config.multi_objective_aggregation == "normalize_then_sum"
    if normalize_then_sum and int(sizes.min()) != int(sizes.max()):
        # TRL's normalize_then_sum standardises each function's rewards per group, then the
        # (weighted) sum over the whole batch: with one function, the group-standardised
        # reward is TRL's sum_then_normalize at scale "group", run per size; the batch step
        # follows below over every row
        import copy

        config = copy.copy(config)
        config.multi_objective_aggregation, config.scale_rewards = "sum_then_normalize", "group"
    elif config.scale_rewards == "batch" and int(sizes.min()) != int(sizes.max()):
        # TRL runs one group size per batch; its "batch" scaling is (R - group mean) / (nanstd
        # of every reward + 1e-4): centre per size with TRL's code, then divide by the std of
        # the whole batch (torch.std is Bessel-corrected, as TRL's nanstd)
        import copy

        config = copy.copy(config)
        config.scale_rewards = "none"
        batch_std = rollout.rewards.detach().to(torch.float64).std()
    eos_id = _eos_id(rollout)
    adv = torch.zeros(rollout.n, dtype=rollout.rewards.dtype, device=rollout.rewards.device)
    mask = torch.zeros_like(rollout.mask, dtype=torch.long)
    is_ratio = sampling = None
    if _uses_sampler(config):
        sampling = torch.zeros_like(rollout.old_logprobs)
        if config.vllm_importance_sampling_correction:
            sequence = config.vllm_importance_sampling_mode.startswith("sequence")
            is_ratio = torch.ones(rollout.n, 1 if sequence else rollout.mask.shape[1], dtype=rollout.old_logprobs.dtype,
                                  device=rollout.old_logprobs.device)
    completions = _completion_lists(rollout, eos_id)
    arith = arithmetic()  # one arithmetic for every group size of this call
    for g in sorted(set(sizes.tolist())):
        rows = order[sizes == g]
        out = _score(config, rollout, rows, completions, g, eos_id, arith)
        adv[rows] = out["advantages"].to(adv.dtype)
        width = out["completion_mask"].shape[1]
        mask[rows, :width] = out["completion_mask"].long()
        if sampling is not None:
            sampling[rows, :width] = out["sampling_per_token_logps"].to(sampling.dtype)
        if is_ratio is not None:
            ratio = out["importance_sampling_ratio"].to(is_ratio.dtype)
            is_ratio[rows, : ratio.shape[1]] = ratio
    if batch_std is not None:
        adv = adv / (batch_std.to(adv.dtype) + 1e-4)
    if normalize_then_sum and config.multi_objective_aggregation == "sum_then_normalize":
        adv = (adv - adv.mean()) / (adv.std() + 1e-4)  # TRL's batch step (nanmean, Bessel nanstd)
    return adv, mask.bool() & rollout.mask, is_ratio, sampling


def _score(config, rollout: Rollout, rows: Tensor, completions: list[list[int]], num_generations: int, eos_id: int,
           arith: tuple) -> dict:
    """TRL's scoring of ``rows`` (one group size) of ``rollout`` (``completions``: every
    row's, :func:`_completion_lists`). Only the fields TRL's scoring reads are indexed
    (not a validated ``Rollout`` of the rows: its checks, run on every group size of every
    probe, were a third of a check's time; nor the behaviour and sampler log-probs
    without vLLM, which nothing then reads)."""
    from exchange.libraries.trl.contact import score_config

    ids = [list(completions[i]) for i in rows.tolist()]
    rewards = rollout.rewards[rows].detach().to(torch.float64)[:, None]  # [n, 1]: one reward function
    if not _uses_sampler(config):
        return score_config(config, num_generations, eos_id, _PAD_ID, ids, rewards, arith=arith)
    lengths = [len(x) for x in ids]
    sampling = [values[:length] for values, length in zip(rollout.sampling_logprobs[rows].tolist(), lengths)]
    return score_config(config, num_generations, eos_id, _PAD_ID, ids, rewards,
                        old_logprobs=rollout.old_logprobs[rows].detach(), sampling_logprobs=sampling, arith=arith)


def _loss(logprobs: Tensor, rollout: Rollout, *, config) -> Tensor:
    """TRL's ``_compute_loss`` on ``logprobs [N, T]`` with TRL's own advantages."""
    adv, mask, is_ratio, sampling = _scored(config, rollout)
    if config.top_entropy_quantile < 1.0 and rollout.entropy is None:
        raise RolloutError(
            "rollout.entropy=None but trl top_entropy_quantile<1 masks tokens by entropy: "
            "build the rollout with entropy [N, T]."
        )
    if config.beta != 0.0 and rollout.ref_logprobs is None:
        raise RolloutError("rollout.ref_logprobs=None but trl beta!=0 adds a KL term: pass ref_logprobs [N, T].")
    from exchange.libraries.trl.contact import shell

    t = shell(config, int(rollout.group_sizes.max()), _eos_id(rollout), _PAD_ID)
    entropy = rollout.entropy if rollout.entropy is not None else torch.zeros_like(logprobs)
    extra = {"importance_sampling_ratio": is_ratio, "sampling_per_token_logps": sampling}
    plan = schedule(config)
    if plan.micro_batches <= 1 and plan.judged == 1:
        return _micro_loss(t, rollout, logprobs, entropy, adv, mask, None, mask.sum(), plan.accumulation, extra)
    # TRL's generation batch: its rows shuffled (shuffle_sequence_dict), cut into equal
    # micro-batches (split_tensor_dict); the step judged holds the first ``plan.judged``
    num_items = mask.sum()
    parts = [_micro_loss(t, rollout, logprobs, entropy, adv, mask, r, num_items, plan.accumulation, extra)
             for r in _judged_parts(rollout.n, plan, logprobs.device, rollout.mask.device)]
    if not parts:  # the judged micro-batches hold only padding rows: a loss of 0 that still has a graph
        return (logprobs * 0).sum()
    return torch.stack(parts).sum()


@functools.lru_cache(maxsize=128)
def _judged_parts(n: int, plan: Schedule, device, mask_device) -> tuple[tuple[int, Tensor, Tensor, bool], ...]:
    """The micro-batches of the step judged (:func:`micro_batches`'s first ``plan.judged``,
    the empty ones left out) for a generation batch of ``n`` rows, each as ``(rows, pick,
    real, padded)``: its row count, its row indices with a padding row clamped to a real
    one, ``[rows]`` bool whether a row is real, and whether any is padding. The same for
    every rollout of ``n`` rows (a fixed-seed shuffle), so computed once per ``(n, plan,
    device)``, not at every loss call (the tensors are only read)."""
    out = []
    for r in micro_batches(n, plan, device)[: plan.judged]:
        if r.numel():
            r = r.to(mask_device)
            real = r < n
            out.append((int(r.numel()), r.clamp(max=n - 1), real, not bool(real.all())))
    return tuple(out)


def _micro_loss(t, rollout: Rollout, logprobs: Tensor, entropy: Tensor, adv: Tensor, mask: Tensor,
                rows: tuple | None, num_items: Tensor, k: int, extra: dict) -> Tensor:
    """TRL's ``_compute_loss`` on the micro-batch ``rows`` (``None``: every row, in order;
    else :func:`_judged_parts`'s ``(rows, pick, real, padded)``)
    with ``current_gradient_accumulation_steps = k``; a row index ``>= rollout.n`` is a
    padding row (:func:`micro_batches`): no token in its mask, advantage 0, so it adds
    nothing but its place in the micro-batch's row count."""
    from exchange.libraries.trl.contact import shell_loss

    if rows is None:
        n = rollout.n

        def take(x: Tensor) -> Tensor:
            return x
    else:
        n, pick, real, padded = rows

        def take(x: Tensor) -> Tensor:  # the rows, a padding row zeroed (its mask is empty anyway)
            out = x[pick]
            if not padded:
                return out
            keep = real.to(out.device).view(-1, *([1] * (out.ndim - 1)))
            return torch.where(keep, out, torch.zeros_like(out))

    inputs = {
        "prompt_ids": torch.zeros(n, 1, dtype=torch.long, device=rollout.mask.device),
        "prompt_mask": torch.ones(n, 1, dtype=torch.long, device=rollout.mask.device),
        "completion_ids": take(rollout.tokens),
        "completion_mask": take(mask.long()),
        "advantages": take(adv.to(logprobs.dtype)),
        "old_per_token_logps": take(rollout.old_logprobs.to(logprobs.dtype)),
        "num_items_in_batch": num_items,
    }
    if rollout.ref_logprobs is not None:
        inputs["ref_per_token_logps"] = take(rollout.ref_logprobs.to(logprobs.dtype))
    for key, value in extra.items():  # vLLM's: TRL's importance-sampling ratio, the sampler's log-probs
        if value is not None:
            inputs[key] = take(value.to(logprobs.dtype))
    return shell_loss(t, inputs, take(logprobs), take(entropy), k)


