"""OpenRLHF's advantages and ``PolicyLoss`` as ``loss_fn(logprobs, rollout)`` (openrlhf==0.11.2).

OpenRLHF's package ``__init__`` files import DeepSpeed, flash-attn and PEFT (CUDA-only
pins), so ``import openrlhf.models`` fails on CPU. The adapter instead executes the
library's own source files from the installed wheel (``pip install openrlhf==0.11.2
--no-deps``) with importlib, under stub parent packages:

- ``openrlhf/models/loss.py`` (``PolicyLoss``) and ``openrlhf/models/utils.py``
  (``compute_reward``; its top-level ``import deepspeed`` sees an empty stub);
- ``openrlhf/trainer/ppo_utils/experience_maker.py`` (``RemoteExperienceMaker.
  compute_advantages_and_returns`` and ``get_cumulative_returns``; ``ray`` and the Ray
  launcher are stubs, unused by these methods) and ``length_penalty.py``.

The stubs live in ``sys.modules`` only while the files execute; the loaded modules are
kept privately. Per ``loss_fn`` call:

- **Advantages**: ``compute_advantages_and_returns`` runs on one experience batch (a
  namespace with ``index``, ``rewards``, ``kl`` = 0, ``action_mask``, ``info``) on an
  experience-maker shell whose ``strategy.args`` holds the estimator, ``n_samples_per_
  prompt``, ``reward.clip_range`` and ``no_std_norm``; the KL coefficient is 0 (no
  reference model). So the baseline, the reward clamp to ``clip_range``, the
  reward-to-go and the batch whitening are OpenRLHF's code. Groups must be
  ``n_samples_per_prompt`` consecutive rows: rows are sorted by group and the call runs
  once per group size (batch-level estimators then need equal sizes).
- **Loss**: ``PolicyLoss(clip_eps_low, clip_eps_high, dual_clip, token_level_loss,
  policy_loss_type).forward(log_probs, old_log_probs, advantages, action_mask)`` with
  local normalisation (``dp_size=1``, no global counts).
"""

from __future__ import annotations

import functools
import logging
from types import SimpleNamespace
from typing import Any, Callable, Mapping

import torch
from torch import Tensor

from exchange.core.vocabulary import per_regime, verdict_of
from exchange.libraries.versions import INSTALL, library_loss, parse_params, require
from exchange.libraries.wheel import exec_file, package_dir, stub, stubbed
from exchange.errors import InvalidArgument, RolloutError
from exchange.objectives.objective import Expected
from exchange.core.rollout import Rollout

__all__ = ["ESTIMATORS", "DEFAULTS", "loss_fn", "advantages", "expected"]

ESTIMATORS = ("group_norm", "rloo", "dr_grpo", "reinforce_baseline", "flash_reinforce", "reinforce")
# Statistics over the whole batch (rl-libraries.md section 3): reinforce_baseline and
# reinforce are whitened over the batch's valid tokens (a token-weighted centre that is
# not the group's own); flash_reinforce subtracts the batch's mean reward (a scalar).
_BATCH_LEVEL = {
    "reinforce_baseline": ("M4.length_weighted", "M4.foreign_centre"),
    "reinforce": ("M4.length_weighted", "M4.foreign_centre"),
    "flash_reinforce": ("M4.foreign_centre",),
}

# The CLI defaults of openrlhf/cli/train_ppo_ray.py (0.11.2).
DEFAULTS: dict[str, Any] = {
    "policy_loss_type": "ppo",
    "loss_agg_mode": "token-mean",
    "eps_clip_low": 0.2,
    "eps_clip_high": 0.2,
    "dual_clip": None,
    "reward_clip_low": -10.0,
    "reward_clip_high": 10.0,
    "no_std_norm": False,
}


# ---------------------------------------------------------------------------- loading


@functools.lru_cache(maxsize=1)
def _modules() -> SimpleNamespace:
    """OpenRLHF's ``loss.py``, ``utils.py`` and ``experience_maker.py``, loaded once."""
    require("openrlhf")
    root = package_dir("openrlhf", INSTALL["openrlhf"])
    packages = {
        "openrlhf": root,
        "openrlhf.models": root / "models",
        "openrlhf.utils": root / "utils",
        "openrlhf.trainer": root / "trainer",
        "openrlhf.trainer.ppo_utils": root / "trainer" / "ppo_utils",
        "openrlhf.trainer.ray": root / "trainer" / "ray",
    }
    stubs = {name: stub(name, __path__=[str(path)]) for name, path in packages.items()}
    stubs["deepspeed"] = stub("deepspeed")
    stubs["ray"] = stub("ray")
    stubs["openrlhf.trainer.ray.launcher"] = stub("openrlhf.trainer.ray.launcher", RayActorGroup=object)
    stubs["openrlhf.trainer.ppo_utils.experience"] = stub("openrlhf.trainer.ppo_utils.experience", Experience=object)
    stubs["openrlhf.utils.logging_utils"] = stub(
        "openrlhf.utils.logging_utils", init_logger=lambda name: logging.getLogger(f"exchange.openrlhf.{name}")
    )
    with stubbed(stubs, ("openrlhf",)):
        utils = exec_file("openrlhf.models.utils", root / "models" / "utils.py")
        loss = exec_file("openrlhf.models.loss", root / "models" / "loss.py")
        maker = exec_file(
            "openrlhf.trainer.ppo_utils.experience_maker", root / "trainer" / "ppo_utils" / "experience_maker.py"
        )
    return SimpleNamespace(utils=utils, loss=loss, maker=maker)


# ---------------------------------------------------------------------------- adapter


def loss_fn(estimator: str, params: Mapping[str, Any] | None = None) -> Callable[[Tensor, Rollout], Tensor]:
    """``openrlhf:<estimator>`` as ``loss_fn(logprobs [N, T], rollout) -> Tensor[]``."""
    target = f"openrlhf:{estimator}"
    if estimator not in ESTIMATORS:
        raise InvalidArgument(
            f"target={target!r}: estimator={estimator!r} is not one of {', '.join(ESTIMATORS)} (gae needs a critic)."
        )
    options = parse_params(target, params, DEFAULTS)
    if options["loss_agg_mode"] not in ("token-mean", "seq-mean-token-mean"):
        raise InvalidArgument(
            f"target={target!r}: loss_agg_mode={options['loss_agg_mode']!r} is not token-mean or seq-mean-token-mean."
        )
    mods = _modules()
    try:
        policy = mods.loss.PolicyLoss(
            clip_eps_low=options["eps_clip_low"],
            clip_eps_high=options["eps_clip_high"],
            dual_clip=options["dual_clip"],
            token_level_loss=options["loss_agg_mode"] == "token-mean",
            policy_loss_type=options["policy_loss_type"],
        )
    except (ValueError, AssertionError) as err:
        raise InvalidArgument(f"target={target!r}: PolicyLoss rejected the parameters: {err}") from None
    return library_loss(target, options, _loss, policy=policy, estimator=estimator, options=options)


def _maker(estimator: str, n_samples: int, options: Mapping[str, Any]):
    cls = _modules().maker.RemoteExperienceMaker
    maker = cls.__new__(cls)
    maker.advantage_estimator = estimator
    maker.kl_ctl = SimpleNamespace(value=0.0)
    maker.strategy = SimpleNamespace(
        args=SimpleNamespace(
            rollout=SimpleNamespace(n_samples_per_prompt=n_samples),
            reward=SimpleNamespace(
                clip_range=(options["reward_clip_low"], options["reward_clip_high"]),
                overlong_buffer_len=None,
                stop_properly_penalty_coef=None,
            ),
            algo=SimpleNamespace(
                advantage=SimpleNamespace(estimator=estimator, gamma=1.0, lambd=1.0, no_std_norm=options["no_std_norm"])
            ),
        )
    )
    return maker


def advantages(rollout: Rollout, estimator: str, options: Mapping[str, Any] | None = None) -> Tensor:
    """OpenRLHF's per-token advantages ``[N, T]`` (rows in rollout order)."""
    options = parse_params(f"openrlhf:{estimator}", options, DEFAULTS)
    order = torch.sort(rollout.group_index, stable=True).indices
    sizes = rollout.group_sizes[order]
    if estimator in _BATCH_LEVEL and int(sizes.min()) != int(sizes.max()):
        raise RolloutError(
            f"openrlhf estimator={estimator!r} uses batch statistics and needs equal group sizes, got "
            f"sizes={sorted(set(sizes.tolist()))} (OpenRLHF reshapes rewards to (prompts, n_samples_per_prompt))."
        )
    out = torch.zeros(rollout.mask.shape, dtype=torch.float64)
    for g in sorted(set(sizes.tolist())):
        rows = order[sizes == g]
        mask = rollout.mask[rows].to(torch.float64)
        experience = SimpleNamespace(
            index=list(range(len(rows))),
            rewards=rollout.rewards[rows].detach().to(torch.float64),
            kl=torch.zeros_like(mask),
            action_mask=mask,
            values=None,
            info={},
        )
        _maker(estimator, g, options).compute_advantages_and_returns([experience])
        out[rows] = experience.advantages.to(torch.float64)
    return out * rollout.fmask.to(torch.float64)


def _loss(logprobs: Tensor, rollout: Rollout, *, policy, estimator: str, options) -> Tensor:
    adv = advantages(rollout, estimator, options).to(logprobs.dtype)
    loss, *_stats = policy(
        log_probs=logprobs,
        old_log_probs=rollout.old_logprobs.to(logprobs.dtype),
        advantages=adv,
        action_mask=rollout.mask,
    )
    return loss


# ------------------------------------------------------------------ expected verdicts


def expected(estimator: str, params: Mapping[str, Any] | None = None) -> dict[str, Expected]:
    """The verdict ../shared/reference/rl-libraries.md section 3 predicts, per regime.

    M4 for the batch-level estimators (:data:`_BATCH_LEVEL`); M3 for
    ``seq-mean-token-mean`` and gspo (forced per-sample mean); M1 for gspo; M2 for the
    sign-dependent PPO clip (and the optional dual clip) off-policy.
    """
    p = dict(DEFAULTS)
    p.update(params or {})
    on: set[str] = set(_BATCH_LEVEL.get(estimator, ()))
    if p["loss_agg_mode"] == "seq-mean-token-mean" or p["policy_loss_type"] == "gspo":
        on.add("M3.response_norm")
    off = on | {"M2.sign_clip"}
    if p["policy_loss_type"] == "gspo":
        off.add("M1.sequence_weight")
    return per_regime(verdict_of(*on), verdict_of(*off))

