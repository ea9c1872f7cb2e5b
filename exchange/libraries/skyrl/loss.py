"""SkyRL's policy losses and advantage estimators as ``loss_fn(logprobs, rollout)`` (skyrl-train==0.3.1).

skyrl-train 0.3.1 declares ``Requires-Python ==3.12.*`` and its metadata pins Ray, vLLM,
flash-attn and DeepSpeed; ``skyrl_train/utils/ppo_utils.py`` itself runs on Python 3.11
(``enum.StrEnum`` exists since 3.11). The wheel is installed with ``pip install
skyrl-train==0.3.1 --no-deps --ignore-requires-python`` and this adapter executes that one
file from it with importlib (:mod:`exchange.libraries.wheel`) under stubs for what its
top level imports but the driven functions never call: ``ray`` (the registry's Ray actor:
``ray.is_initialized()`` is False, so registration stays local), ``jaxtyping`` (type
annotations), ``loguru`` (warnings go to the ``logging`` logger ``exchange.skyrl``) and
``skyrl_train.training_batch`` (a type). Per ``loss_fn`` call:

- **Advantages**: ``compute_advantages_and_returns(token_level_rewards, response_mask,
  index, adv_estimator, config, grpo_norm_by_std=..., gamma=1, lambd=1)`` as
  ``RayPPOTrainer.compute_advantages_and_returns`` calls it: the response reward sits on
  the last response token, ``index`` is the rollout's group id. Then, when
  ``advantage_batch_normalize`` is true, ``normalize_advantages_dict`` on the batch (as
  the trainer does).
- **Loss**: ``PolicyLossRegistry.get(policy_loss_type)(log_probs, old_log_probs,
  advantages, config=algorithm, loss_mask=mask)``, the call of
  ``PolicyWorkerBase._forward_backward_micro`` with ``config`` holding the options below.

Not driven: the worker's separate ``kl_loss_coef * KL(pi || pi_ref)`` term (``use_kl_loss``,
true in ``ppo_base_config.yaml``; a per-sequence-mean M6 term against a reference model),
the entropy bonus (``use_entropy_loss``, off by default), truncated importance sampling
(``use_tis``: needs inference-engine log-probs distinct from the old ones) and the
``gae`` estimator (needs a critic). ``clip_cov`` draws the tokens it masks with
``torch.randperm``; each call runs under a forked RNG seeded with ``clip_cov_seed`` so the
loss is a deterministic function of its inputs.
"""

from __future__ import annotations

import functools
import logging
import sys
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, Callable, Mapping

import torch
from torch import Tensor

from exchange.core.rollout import Rollout
from exchange.errors import InvalidArgument
from exchange.core.vocabulary import Regime, per_regime, verdict_of
from exchange.libraries.versions import INSTALL, library_loss, parse_params, require
from exchange.libraries.wheel import Permissive, exec_file, package_dir, stub, stubbed
from exchange.objectives.objective import Expected
from exchange.objectives import expected_of

__all__ = ["POLICY_LOSSES", "REDUCTIONS", "ESTIMATORS", "DEFAULTS", "loss_fn", "advantages", "expected"]

POLICY_LOSSES = ("regular", "dual_clip", "gspo", "cispo", "clip_cov", "kl_cov", "sapo")
REDUCTIONS = ("token_mean", "sequence_mean", "seq_mean_token_sum_norm")
ESTIMATORS = ("grpo", "rloo", "reinforce++")  # gae needs a critic
_BATCH_LEVEL = ("reinforce++",)  # masked_whiten over the whole batch

# trainer.algorithm in skyrl_train/config/ppo_base_config.yaml (0.3.1); max_seq_len is
# max_input_length (trainer.max_prompt_length = 512) + max_generate_length (1024).
DEFAULTS: dict[str, Any] = {
    "estimator": "grpo",
    "loss_reduction": "token_mean",
    "grpo_norm_by_std": True,
    "advantage_batch_normalize": False,
    "eps_clip_low": 0.2,
    "eps_clip_high": 0.2,
    "clip_ratio_c": 3.0,
    "max_seq_len": 1536,
    "sapo_tau_pos": 1.0,
    "sapo_tau_neg": 1.05,
    "cispo_eps_clip_low": 0.0,
    "cispo_eps_clip_high": 5.0,
    "clip_cov_ratio": 0.0002,
    "clip_cov_lb": 1.0,
    "clip_cov_ub": 5.0,
    "kl_cov_frac": 0.2,
    "ppo_kl_coef": 1.0,
    "clip_cov_seed": 0,  # the adapter's: torch seed for clip_cov's random token choice
}

_log = logging.getLogger("exchange.skyrl")
_log.addHandler(logging.NullHandler())
_log.propagate = False  # its "use sequence_mean" advice (docs/libraries.md) stays out of the CLI output
_LOGURU = stub("loguru", logger=SimpleNamespace(
    debug=_log.debug, info=_log.info, warning=_log.warning, error=_log.error
))


# ---------------------------------------------------------------------------- loading


@functools.lru_cache(maxsize=1)
def _ppo_utils():
    """``skyrl_train/utils/ppo_utils.py`` from the installed wheel, loaded once."""
    require("skyrl")
    root = package_dir("skyrl_train", INSTALL["skyrl"])
    stubs = {
        "skyrl_train": stub("skyrl_train", __path__=[str(root)]),
        "skyrl_train.utils": stub("skyrl_train.utils", __path__=[str(root / "utils")]),
        "skyrl_train.training_batch": stub("skyrl_train.training_batch", TrainingInputBatch=dict),
        "ray": stub("ray", remote=lambda cls: cls, is_initialized=lambda: False),
        "jaxtyping": stub("jaxtyping", Float=Permissive("Float"), Integer=Permissive("Integer")),
        "loguru": _LOGURU,
    }
    with stubbed(stubs, ("skyrl_train",)):
        return exec_file("skyrl_train.utils.ppo_utils", root / "utils" / "ppo_utils.py")


@contextmanager
def _loguru():
    """Its losses import ``loguru`` lazily for warnings; lend the stub when it is absent."""
    import importlib.util

    lend = "loguru" not in sys.modules and importlib.util.find_spec("loguru") is None
    if lend:
        sys.modules["loguru"] = _LOGURU
    try:
        yield
    finally:
        if lend:
            sys.modules.pop("loguru", None)


def _config(policy: str, o: Mapping[str, Any]) -> SimpleNamespace:
    """``cfg.trainer.algorithm`` as the losses read it (attribute access like DictConfig)."""
    return SimpleNamespace(
        policy_loss_type=policy,
        loss_reduction=o["loss_reduction"],
        eps_clip_low=o["eps_clip_low"],
        eps_clip_high=o["eps_clip_high"],
        clip_ratio_c=o["clip_ratio_c"],
        max_seq_len=o["max_seq_len"],
        use_tis=False,
        tis_imp_ratio_cap=-1.0,
        sapo=SimpleNamespace(tau_pos=o["sapo_tau_pos"], tau_neg=o["sapo_tau_neg"]),
        cispo=SimpleNamespace(cispo_eps_clip_low=o["cispo_eps_clip_low"], cispo_eps_clip_high=o["cispo_eps_clip_high"]),
        clip_cov=SimpleNamespace(clip_ratio=o["clip_cov_ratio"], clip_cov_lb=o["clip_cov_lb"], clip_cov_ub=o["clip_cov_ub"]),
        kl_cov=SimpleNamespace(kl_cov_frac=o["kl_cov_frac"], ppo_kl_coef=o["ppo_kl_coef"]),
        advantage_estimator=o["estimator"],
        grpo_norm_by_std=o["grpo_norm_by_std"],
        gamma=1.0,
        lambd=1.0,
    )


def _options(target: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    options = parse_params(target, params, DEFAULTS)
    if options["estimator"] not in ESTIMATORS:
        raise InvalidArgument(
            f"target={target!r}: estimator={options['estimator']!r} is not one of {', '.join(ESTIMATORS)} "
            "(gae needs a critic); set --param estimator=grpo|rloo|reinforce++."
        )
    if options["loss_reduction"] not in REDUCTIONS:
        raise InvalidArgument(
            f"target={target!r}: loss_reduction={options['loss_reduction']!r} is not one of {', '.join(REDUCTIONS)}."
        )
    return options


# ---------------------------------------------------------------------------- adapter


def loss_fn(policy: str, params: Mapping[str, Any] | None = None) -> Callable[[Tensor, Rollout], Tensor]:
    """``skyrl:<policy_loss_type>`` as ``loss_fn(logprobs [N, T], rollout) -> Tensor[]``."""
    target = f"skyrl:{policy}"
    if policy not in POLICY_LOSSES:
        raise InvalidArgument(f"target={target!r}: policy_loss_type={policy!r} is not one of {', '.join(POLICY_LOSSES)}.")
    options = _options(target, params)
    return library_loss(target, options, _loss, policy=policy, options=options)


def advantages(rollout: Rollout, options: Mapping[str, Any] | None = None) -> Tensor:
    """SkyRL's per-token advantages ``[N, T]`` for ``rollout`` (rows in rollout order)."""
    o = _options("skyrl:advantages", options)
    mod = _ppo_utils()
    mask = rollout.mask.to(torch.float64)
    lengths = rollout.mask.sum(dim=1)
    rewards = torch.zeros(rollout.mask.shape, dtype=torch.float64)
    last = (lengths - 1).clamp(min=0)
    rows = torch.arange(rollout.mask.shape[0])
    rewards[rows, last] = rollout.rewards.detach().to(torch.float64) * (lengths > 0)
    with _loguru():
        adv, _returns = mod.compute_advantages_and_returns(
            token_level_rewards=rewards,
            response_mask=mask,
            index=rollout.group.detach().cpu().numpy(),
            adv_estimator=o["estimator"],
            config=_config("regular", o),
            values=None,
            grpo_norm_by_std=o["grpo_norm_by_std"],
            gamma=1.0,
            lambd=1.0,
        )
        if o["advantage_batch_normalize"]:
            adv = mod.normalize_advantages_dict({"advantages": adv, "response_mask": mask})["advantages"]
    return adv.to(torch.float64) * mask


def _loss(logprobs: Tensor, rollout: Rollout, *, policy: str, options) -> Tensor:
    mod = _ppo_utils()
    adv = advantages(rollout, options).to(logprobs.dtype)
    # clip_cov picks the tokens it masks with torch.randperm: a fixed seed (forked, so the
    # caller's RNG is untouched) makes the loss a function, as the checker requires.
    with _loguru(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(options["clip_cov_seed"])
        loss, _clip_ratio = mod.PolicyLossRegistry.get(policy)(
            logprobs,
            rollout.old_logprobs.to(logprobs.dtype),
            adv,
            config=_config(policy, options),
            loss_mask=rollout.mask.to(logprobs.dtype),
            rollout_logprobs=None,
        )
    return loss


# ------------------------------------------------------------------ expected verdicts


def expected(policy: str, params: Mapping[str, Any] | None = None) -> dict[str, Expected]:
    """The mechanisms each setting has (THEORY.md section 4), per regime.

    M3: ``loss_reduction=sequence_mean`` (1/L_i; SkyRL's gspo and sapo honour the
    reduction and only warn). M4: the batch whitening of ``reinforce++`` and
    ``advantage_batch_normalize``; both are token-weighted batch statistics, so besides
    (Z) and (C) they break (E) (a suffix change moves them) and ``null_on_equal_rewards``
    (the centring is not the group's own). Off-policy M2: the sign-dependent PPO clip
    (regular, dual_clip, gspo) and SAPO's two temperatures; M1: gspo's sequence ratio.
    cispo: detached two-sided clamp, nothing.

    ``clip_cov`` and ``kl_cov`` are PRIME-RL's Clip-Cov / KL-Cov ("Adapted from
    https://github.com/PRIME-RL/Entropy-Mechanism-of-RL", as is the catalog's family), so
    their own part of the verdict is the catalog's derivation
    (:func:`exchange.objectives.expected_of`), joined with the mechanisms of the
    reduction and estimator above. The batch whitening is a token-weighted centre that is
    not the group's own (``M4.length_weighted`` and ``M4.foreign_centre``).
    """
    p = dict(DEFAULTS)
    p.update(params or {})
    on: set[str] = set()
    if p["loss_reduction"] == "sequence_mean":
        on.add("M3.response_norm")
    if p["estimator"] in _BATCH_LEVEL or p["advantage_batch_normalize"]:
        on |= {"M4.length_weighted", "M4.foreign_centre"}
    off = set(on)
    if policy in ("regular", "dual_clip", "gspo", "sapo"):
        off.add("M2.sign_clip")
    if policy == "gspo":
        off.add("M1.sequence_weight")
    if policy in ("clip_cov", "kl_cov"):
        catalog = expected_of(policy)
        on |= catalog[Regime.ON_POLICY].facets
        off |= catalog[Regime.OFF_POLICY].facets
    return per_regime(verdict_of(*on), verdict_of(*off))
