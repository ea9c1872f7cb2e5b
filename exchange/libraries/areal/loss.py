"""AReaL's actor losses and advantages as ``loss_fn(logprobs, rollout)`` (areal==1.0.4).

``import areal`` pulls its launcher stack (hydra, uvloop, torchdata, einops, the
inference/engine packages), so the adapter executes four files of the installed wheel
(``pip install areal==1.0.4 --no-deps``) with importlib (:mod:`exchange.libraries.wheel`):
``areal/utils/constants.py``, ``areal/utils/data.py`` (``Normalization``, ``KLEstimator``),
``areal/utils/functional/functional.py`` (``ppo_actor_loss_fn``, ``sapo_loss_fn``) and
``areal/trainer/ppo/actor.py`` (``PPOActor._compute_advantages``, ``grpo_loss_fn``).
Everything else they import (``areal.api.cli_args``, engines, controllers, stats
tracker, perf tracer, ``einops``, ``torchdata``) is a stub the driven code never calls;
``NormConfig`` (a dataclass in ``cli_args.py``, which imports hydra) is passed as a
namespace with the same fields. Per ``loss_fn`` call:

- **Advantages**: ``PPOActor._compute_advantages`` on a batch laid out as AReaL's
  (one prompt token, then the response, one padding column; rewards, ``loss_mask`` and
  ``logprobs`` rolled by one as the method expects) on an actor shell whose config holds
  ``reward_norm`` / ``adv_norm`` (``Normalization``), ``reward_bias`` 0,
  ``reward_scaling`` 1, ``reward_clip`` 20, ``kl_ctl`` 0 (AReaL's GRPO examples), no
  critic (values 0), ``discount`` = ``gae_lambda`` = 1. Group-level normalisation takes
  ``group_size`` consecutive rows: rows are sorted by group and the method runs once per
  group size (a setting with both group and batch levels needs equal group sizes).
- **Loss**: ``grpo_loss_fn(logprobs, entropy, input_data, ...)`` (the function
  ``PPOActor._ppo_update`` hands to the engine), which calls ``ppo_actor_loss_fn`` or,
  with ``use_sapo_loss``, ``sapo_loss_fn``: token mean over the micro-batch
  (``loss_weight_fn`` weights micro-batches by their token counts, so the global loss is
  the token mean too). ``use_decoupled_loss`` false: the proximal policy is the old one.
"""

from __future__ import annotations

import functools
import logging
from types import SimpleNamespace
from typing import Any, Callable, Mapping

import torch
from torch import Tensor

from exchange.core.rollout import Rollout
from exchange.errors import InvalidArgument, RolloutError
from exchange.core.vocabulary import per_regime, verdict_of
from exchange.libraries.versions import INSTALL, library_loss, parse_params, require
from exchange.libraries.wheel import exec_file, package_dir, permissive_module, stub, stubbed
from exchange.objectives.objective import Expected

__all__ = ["LOSSES", "LEVELS", "DEFAULTS", "loss_fn", "advantages", "expected"]

LOSSES = ("ppo", "sapo")  # grpo_loss_fn with use_sapo_loss false / true
LEVELS = ("none", "group", "batch")

# PPOActorConfig defaults (areal/api/cli_args.py, 1.0.4) except kl_ctl (0 here, as in the
# GRPO examples, since the checker's rollouts carry no reference model). reward_norm and
# adv_norm are NormConfig | None: each level is "none" (no NormConfig, or that level None).
DEFAULTS: dict[str, Any] = {
    "eps_clip": 0.2,
    "eps_clip_higher": None,
    "c_clip": None,
    "importance_sampling_level": "token",
    "sapo_tau_pos": 1.0,
    "sapo_tau_neg": 1.05,
    "reward_mean_level": "none",
    "reward_std_level": "none",
    "adv_mean_level": "none",
    "adv_std_level": "none",
    "mean_leave1out": False,
    "std_unbiased": True,
    "norm_eps": 1e-5,
}

_log = logging.getLogger("exchange.areal")
_log.addHandler(logging.NullHandler())


@functools.lru_cache(maxsize=1)
def _modules() -> SimpleNamespace:
    require("areal")
    root = package_dir("areal", INSTALL["areal"])
    packages = {
        "areal": root,
        "areal.api": root / "api",
        "areal.utils": root / "utils",
        "areal.utils.functional": root / "utils" / "functional",
        "areal.trainer": root / "trainer",
        "areal.trainer.ppo": root / "trainer" / "ppo",
        "areal.infra": root / "infra",
    }
    stubs = {name: permissive_module(name, str(path)) for name, path in packages.items()}
    for name in (
        "areal.api.cli_args",
        "areal.infra.platforms",
        "areal.infra.rpc",
        "areal.infra.rpc.serialization",
        "areal.utils.seqpack",
        "areal.utils.math",
        "areal.utils.stats_tracker",
        "areal.utils.perf_tracer",
        "areal.trainer.ppo.stats",
        "areal.experimental",
        "areal.experimental.training_service",
        "areal.experimental.training_service.controller",
        "areal.experimental.training_service.controller.controller",
        "einops",
        "torchdata",
        "torchdata.stateful_dataloader",
    ):
        stubs[name] = permissive_module(name)
    stubs["areal.utils.logging"] = stub("areal.utils.logging", getLogger=lambda name: _log)
    for name in ("logging", "seqpack", "stats_tracker"):
        setattr(stubs["areal.utils"], name, stubs[f"areal.utils.{name}"])
    with stubbed(stubs, ("areal", "einops", "torchdata")):
        constants = exec_file("areal.utils.constants", root / "utils" / "constants.py")
        data = exec_file("areal.utils.data", root / "utils" / "data.py")
        functional = exec_file("areal.utils.functional", root / "utils" / "functional" / "functional.py")
        actor = exec_file("areal.trainer.ppo.actor", root / "trainer" / "ppo" / "actor.py")
    return SimpleNamespace(constants=constants, data=data, functional=functional, actor=actor)


def _options(target: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    o = parse_params(target, params, DEFAULTS)
    for key in ("reward_mean_level", "reward_std_level", "adv_mean_level", "adv_std_level"):
        if o[key] not in LEVELS:
            raise InvalidArgument(f"target={target!r}: {key}={o[key]!r} is not one of {', '.join(LEVELS)}.")
    if o["importance_sampling_level"] not in ("token", "sequence"):
        raise InvalidArgument(
            f"target={target!r}: importance_sampling_level={o['importance_sampling_level']!r} is not token or sequence."
        )
    if o["c_clip"] is not None and not float(o["c_clip"]) > 1.0:
        raise InvalidArgument(f"target={target!r}: c_clip={o['c_clip']!r} must be > 1 (AReaL asserts it), or unset.")
    if o["sapo_tau_pos"] <= 0 or o["sapo_tau_neg"] <= 0:
        raise InvalidArgument(f"target={target!r}: sapo_tau_pos and sapo_tau_neg must be > 0.")
    return o


def _norm(mean_level: str, std_level: str, group_size: int, o: Mapping[str, Any]):
    if mean_level == "none" and std_level == "none":
        return None  # the NormConfig is None: no Normalization at all
    config = SimpleNamespace(
        mean_level=None if mean_level == "none" else mean_level,
        std_level=None if std_level == "none" else std_level,
        mean_leave1out=o["mean_leave1out"],
        std_unbiased=o["std_unbiased"],
        eps=o["norm_eps"],
        group_size=group_size,
    )
    return _modules().data.Normalization(config)


# ---------------------------------------------------------------------------- adapter


def loss_fn(loss: str, params: Mapping[str, Any] | None = None) -> Callable[[Tensor, Rollout], Tensor]:
    """``areal:<ppo|sapo>`` as ``loss_fn(logprobs [N, T], rollout) -> Tensor[]``."""
    target = f"areal:{loss}"
    if loss not in LOSSES:
        raise InvalidArgument(f"target={target!r}: loss={loss!r} is not one of {', '.join(LOSSES)}.")
    options = _options(target, params)
    # Normalization returns .float() and the GAE loop starts from float32 zeros: the
    # advantages are float32 values, which the float64 loss arithmetic after them hides
    # from exchange.check's detection (coefficients A / N are no longer float32 values).
    return library_loss(target, options, _loss, precision="float32", use_sapo=loss == "sapo", options=options)


def _layout(rollout: Rollout, rows: Tensor) -> dict[str, Tensor]:
    """AReaL's batch for ``rows``: one prompt token, the response, one padding column."""
    mask = rollout.mask[rows]
    n, t = mask.shape
    lengths = mask.sum(dim=1)
    width = t + 2
    positions = torch.arange(width)[None, :]
    attention = positions < (lengths[:, None] + 1)
    loss_mask = (positions >= 1) & attention  # response tokens, before AReaL's roll by -1
    logprobs = torch.zeros(n, width, dtype=torch.float64)
    logprobs[:, 1 : t + 1] = rollout.old_logprobs[rows].detach().to(torch.float64) * mask
    return {
        "input_ids": torch.zeros(n, width, dtype=torch.long),
        "attention_mask": attention,
        "loss_mask": loss_mask,
        "logprobs": logprobs,
        "rewards": rollout.rewards[rows].detach().to(torch.float64),
    }


def _actor(o: Mapping[str, Any], group_size: int):
    mods = _modules()
    cls = mods.actor.PPOActor
    actor = cls.__new__(cls)
    actor.config = SimpleNamespace(
        overlong_reward_penalty=False, use_decoupled_loss=False, recompute_logprob=False, max_new_tokens=None
    )
    actor.reward_bias, actor.reward_scaling, actor.reward_clip = 0.0, 1.0, 20.0
    actor.kl_ctl = 0.0
    actor.kl_estimator = mods.data.KLEstimator("k1")
    actor.reward_norm = _norm(o["reward_mean_level"], o["reward_std_level"], group_size, o)
    actor.adv_norm = _norm(o["adv_mean_level"], o["adv_std_level"], group_size, o)
    actor.discount, actor.gae_lambda = 1.0, 1.0
    actor.mask_no_eos_with_zero = False
    return actor


def advantages(rollout: Rollout, options: Mapping[str, Any] | None = None) -> Tensor:
    """AReaL's per-token advantages ``[N, T]`` (rows in rollout order).

    Group-level normalisation takes ``group_size`` consecutive rows, so rows are sorted by
    group and, where a level is ``group``, AReaL runs once per group size; a setting that
    also has a ``batch`` level then needs equal group sizes (one batch, as in AReaL).
    """
    o = _options("areal:advantages", options)
    levels = {o["reward_mean_level"], o["reward_std_level"], o["adv_mean_level"], o["adv_std_level"]}
    order = torch.sort(rollout.group, stable=True).indices
    sizes = rollout.group_sizes[order]
    if "group" in levels and "batch" in levels and int(sizes.min()) != int(sizes.max()):
        raise RolloutError(
            f"areal: group- and batch-level normalisation together need equal group sizes (AReaL reshapes "
            f"the batch into groups of group_size consecutive rows), got sizes={sorted(set(sizes.tolist()))}."
        )
    batches = [order[sizes == g] for g in sorted(set(sizes.tolist()))] if "group" in levels else [order]
    t = rollout.mask.shape[1]
    adv = torch.zeros(rollout.mask.shape, dtype=torch.float64)
    for rows in batches:
        group_size = int(rollout.group_sizes[rows[0]])
        out = _actor(o, group_size)._compute_advantages(_layout(rollout, rows))
        adv[rows] = out["advantages"][:, :t].to(torch.float64)
    return adv * rollout.fmask.to(torch.float64)


def _loss(logprobs: Tensor, rollout: Rollout, *, use_sapo: bool, options) -> Tensor:
    mods = _modules()
    adv = advantages(rollout, options).to(logprobs.dtype)
    input_data = {
        "logprobs": rollout.old_logprobs.to(logprobs.dtype),
        "advantages": adv,
        "loss_mask": rollout.mask,
        "prox_logp": rollout.old_logprobs.to(logprobs.dtype),
    }
    loss = mods.actor.grpo_loss_fn(
        logprobs,
        torch.zeros_like(logprobs),
        input_data,
        eps_clip=options["eps_clip"],
        eps_clip_higher=options["eps_clip_higher"],
        c_clip=options["c_clip"],
        rejection_sampling=None,
        m2_threshold=None,
        importance_sampling_level=options["importance_sampling_level"],
        current_version=None,
        prox_logp_method=mods.constants.PROX_LOGP_METHOD_RECOMPUTE,
        use_sapo_loss=use_sapo,
        sapo_tau_pos=options["sapo_tau_pos"],
        sapo_tau_neg=options["sapo_tau_neg"],
        use_decoupled_loss=False,
    )
    return loss


# ------------------------------------------------------------------ expected verdicts


def expected(loss: str, params: Mapping[str, Any] | None = None) -> dict[str, Expected]:
    """The mechanisms each setting has (THEORY.md section 4), per regime.

    M4 unless the rewards are centred per group (``reward_mean_level=group``, with or
    without leave-one-out) and the advantages are not re-centred: AReaL's default (no
    ``reward_norm``) keeps raw rewards; a batch mean is not zero-sum per group; and
    ``adv_mean_level=group`` subtracts the group's *token*-weighted mean
    (``sum_j L_j A_j / sum_j L_j``, ``Normalization`` with ``loss_mask``), which is not
    zero-sum once lengths differ. Dividing by a std (group or batch) is a group
    constant. No M3: the loss is a token mean, and with
    ``importance_sampling_level=sequence`` every token carries ``A_i s_i / N``.
    Off-policy M2: the PPO clip (and ``c_clip``), SAPO's two temperatures; M1: the
    sequence ratio.
    ``mean_leave1out`` (RLOO's baseline) stays zero-sum per group.

    M4's facets depend on the baseline: ``M4.length_weighted`` when the advantage of a
    response depends on other responses' lengths (``adv_norm`` means and stds are
    token-weighted: a suffix change moves them), and ``M4.foreign_centre`` whenever the
    centring is not the group's own (raw rewards, batch means: a group of equal rewards
    keeps non-zero advantages). One of the two holds whenever the rewards are not
    centred per group alone.
    """
    p = dict(DEFAULTS)
    p.update(params or {})
    on: set[str] = set()
    if not (p["reward_mean_level"] == "group" and p["adv_mean_level"] == "none"):
        if p["adv_mean_level"] != "none" or p["adv_std_level"] != "none":
            on.add("M4.length_weighted")
        if p["reward_mean_level"] != "group" and p["adv_mean_level"] != "group":
            on.add("M4.foreign_centre")
    off = on | {"M2.sign_clip"}
    if p["importance_sampling_level"] == "sequence":
        off.add("M1.sequence_weight")
    return per_regime(verdict_of(*on), verdict_of(*off))
