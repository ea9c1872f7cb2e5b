"""verl policy losses and advantage estimators as ``loss_fn(logprobs, rollout)`` (verl==0.9.1).

``verl:<policy_loss>/<loss_agg_mode>`` calls, per ``loss_fn`` call:

- **Advantages**: verl's own estimator from ``core_algos.get_adv_estimator_fn(estimator)``
  (``--param estimator=rloo``; default ``grpo``), on ``token_level_rewards`` that carry
  each response's reward on its last real token, with ``index`` = the rollout's group
  ids. The keyword arguments are those of ``ray_trainer.compute_advantage`` (reproduced:
  it imports the whole Ray trainer): ``grpo`` gets ``norm_adv_by_std_in_grpo``, every
  other estimator gets ``config`` (a real ``AlgoConfig``), ``index`` and, for ``remax``,
  ``reward_baselines`` = ``rollout.baseline_rewards`` on the last token.
- **Loss**: verl's own ``core_algos.get_policy_loss_fn(policy_loss)`` with a real, frozen
  ``verl.workers.config.ActorConfig`` (``clip_ratio*``, ``tau_*``, ``PolicyLossConfig``)
  and ``global_batch_info = {dp_size: 1, batch_num_tokens: None, global_batch_size:
  None, loss_scale_factor}``, i.e. the local normalisation of one process.
- **KL loss** (``use_kl_loss=true``): what ``workers/utils/losses.py::ppo_loss`` adds,
  ``kl_loss_coef * agg_loss(kl_penalty(l, ref, kl_loss_type))`` with the same
  ``loss_agg_mode`` (verl's own ``kl_penalty``: ``kl``/``k1``, ``abs``, ``mse``/``k2``,
  ``low_var_kl``/``k3``, and the ``+`` straight-through forms); it needs
  ``rollout.ref_logprobs``. On the sampled tokens it is an additive event term (M6,
  THEORY.md section 4), both regimes. The entropy bonus (``entropy_coeff``) is a
  whole-distribution regulariser, outside the coefficient model: not included.

Keys: the short names of :data:`DEFAULTS`, or verl's full config paths
(``actor_rollout_ref.actor.kl_loss_type``, ``actor_rollout_ref.actor.policy_loss.
clip_cov_ratio``, ``algorithm.adv_estimator``, ``algorithm.norm_adv_by_std_in_grpo``),
as ``exchange check --verl-config`` reads them (:mod:`exchange.libraries.verl.config`).

Not driven: ``bypass_mode`` (needs rollout log-probs and a rollout-correction config),
the estimators ``gae`` (needs a critic), ``optimal_token_baseline`` /
``tir_optimal_token_baseline`` (need ``sum_pi_squared``) and ``gdpo`` (needs several
reward keys).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import torch
from torch import Tensor

from exchange.core.vocabulary import per_regime, verdict_of
from exchange.libraries.versions import library_loss, parse_params, require
from exchange.errors import InvalidArgument, RolloutError
from exchange.objectives.objective import Expected
from exchange.core.rollout import Rollout

__all__ = ["POLICY_LOSSES", "AGG_MODES", "ESTIMATORS", "DEFAULTS", "KL_TYPES", "short_params", "loss_fn", "advantages",
           "expected"]

POLICY_LOSSES = (
    "vanilla", "gspo", "sapo", "gpg", "clip_cov", "kl_cov", "geo_mean", "dro", "cispo", "dppo_tv", "dppo_kl",
)
AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
ESTIMATORS = (
    "grpo", "grpo_vectorized", "rloo", "rloo_vectorized", "opo", "grpo_passk", "gpg",
    "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax",
)

# ActorConfig / PolicyLossConfig / AlgoConfig defaults of verl 0.9.1 (tests compare them
# with the installed dataclasses), plus the estimator choice and a seed for clip_cov.
DEFAULTS: dict[str, Any] = {
    "estimator": "grpo",
    "norm_adv_by_std_in_grpo": True,
    "gamma": 1.0,
    "clip_ratio": 0.2,
    "clip_ratio_low": 0.2,
    "clip_ratio_high": 0.2,
    "clip_ratio_c": 3.0,
    "tau_pos": 1.0,
    "tau_neg": 1.05,
    "loss_scale_factor": None,
    "clip_cov_ratio": 0.0002,
    "clip_cov_lb": 1.0,
    "clip_cov_ub": 5.0,
    "kl_cov_ratio": 0.0002,
    "ppo_kl_coef": 0.1,
    "dro_beta": None,
    "use_kl_loss": False,
    "kl_loss_type": "low_var_kl",
    "kl_loss_coef": 0.001,
    "seed": 0,
}
# verl's kl_penalty types (core_algos.kl_penalty_forward; a "+" suffix takes k2's gradient).
KL_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "kl+", "k1+", "abs+", "mse+", "k2+", "low_var_kl+", "k3+")
# verl's full config path -> the short name (the prefixes --verl-config reads).
_PREFIXES = ("actor_rollout_ref.actor.policy_loss.", "actor_rollout_ref.actor.", "algorithm.")
_RENAMED = {"adv_estimator": "estimator"}


def short_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """``params`` with verl's full config paths (``actor_rollout_ref.actor.kl_loss_coef``,
    ``algorithm.adv_estimator``) turned into :data:`DEFAULTS`' short names."""
    out: dict[str, Any] = {}
    for key, value in (params or {}).items():
        name = key
        for prefix in _PREFIXES:
            if key.startswith(prefix):
                name = key[len(prefix):]
                break
        out[_RENAMED.get(name, name)] = value
    return out


def _split(target: str) -> tuple[str, str]:
    body = target.split(":", 1)[1] if ":" in target else target
    loss, _, mode = body.partition("/")
    mode = mode or "token-mean"
    if loss not in POLICY_LOSSES:
        raise InvalidArgument(
            f"target={target!r}: policy_loss={loss!r} is not one of {', '.join(POLICY_LOSSES)} "
            "(bypass_mode is not driven)."
        )
    if mode not in AGG_MODES:
        raise InvalidArgument(f"target={target!r}: loss_agg_mode={mode!r} is not one of {', '.join(AGG_MODES)}.")
    return loss, mode


def loss_fn(spec: str, params: Mapping[str, Any] | None = None) -> Callable[[Tensor, Rollout], Tensor]:
    """``verl:<policy_loss>[/<loss_agg_mode>]`` as ``loss_fn(logprobs [N, T], rollout) -> Tensor[]``."""
    require("verl")
    loss, mode = _split(f"verl:{spec}")
    target = f"verl:{loss}/{mode}"
    options = parse_params(target, short_params(params), DEFAULTS)
    if str(options["kl_loss_type"]) not in KL_TYPES:
        raise InvalidArgument(
            f"target={target!r}: kl_loss_type={options['kl_loss_type']!r} is not one of {', '.join(KL_TYPES)} "
            "(verl's kl_penalty)."
        )
    if options["estimator"] not in ESTIMATORS:
        raise InvalidArgument(
            f"target={target!r}: estimator={options['estimator']!r} is not one of {', '.join(ESTIMATORS)}."
        )
    actor = _actor_config(target, loss, mode, options)
    algo = _algo_config(options)
    return library_loss(target, options, _loss, loss=loss, mode=mode, actor=actor, algo=algo, options=options)


def _actor_config(target: str, loss: str, mode: str, o: Mapping[str, Any]):
    from verl.workers.config import ActorConfig, PolicyLossConfig

    try:
        return ActorConfig(
            strategy="fsdp",
            rollout_n=2,
            ppo_micro_batch_size_per_gpu=1,
            clip_ratio=o["clip_ratio"],
            clip_ratio_low=o["clip_ratio_low"],
            clip_ratio_high=o["clip_ratio_high"],
            clip_ratio_c=o["clip_ratio_c"],
            loss_agg_mode=mode,
            loss_scale_factor=None if o["loss_scale_factor"] is None else int(o["loss_scale_factor"]),
            tau_pos=o["tau_pos"],
            tau_neg=o["tau_neg"],
            policy_loss=PolicyLossConfig(
                loss_mode=loss,
                clip_cov_ratio=o["clip_cov_ratio"],
                clip_cov_lb=o["clip_cov_lb"],
                clip_cov_ub=o["clip_cov_ub"],
                kl_cov_ratio=o["kl_cov_ratio"],
                ppo_kl_coef=o["ppo_kl_coef"],
                dro_beta=o["dro_beta"],
            ),
        )
    except (ValueError, TypeError, AssertionError) as err:
        raise InvalidArgument(f"target={target!r}: verl ActorConfig rejected the parameters: {err}") from None


def _algo_config(o: Mapping[str, Any]):
    from verl.trainer.config import AlgoConfig

    return AlgoConfig(gamma=o["gamma"], norm_adv_by_std_in_grpo=o["norm_adv_by_std_in_grpo"], adv_estimator=o["estimator"])


def _last_token(values: Tensor, mask: Tensor) -> Tensor:
    """``[N] -> [N, T]``: each value on the response's last policy token (verl's layout;
    a multi-turn row's mask has holes, so that is not ``mask.sum() - 1``)."""
    out = torch.zeros(mask.shape, dtype=values.dtype, device=values.device)
    positions = torch.arange(1, mask.shape[1] + 1, device=values.device)
    last = torch.where(mask, positions, 0).amax(dim=1) - 1  # every row has a policy token (Rollout)
    out[torch.arange(mask.shape[0], device=values.device), last] = values
    return out * mask.to(values.dtype)


def advantages(rollout: Rollout, estimator: str = "grpo", algo=None, norm_adv_by_std_in_grpo: bool = True) -> Tensor:
    """verl's advantages ``[N, T]`` from its own estimator (see the module docstring)."""
    import numpy as np
    from verl.trainer.ppo import core_algos

    mask = rollout.mask.to(torch.int64)  # verl's trainer slices it from the int attention mask
    rewards = _last_token(rollout.rewards.detach().to(torch.float64), rollout.mask)
    index = np.array(rollout.group_index.tolist())
    if estimator == "grpo":
        adv, _ = core_algos.compute_grpo_outcome_advantage(
            token_level_rewards=rewards, response_mask=mask, index=index,
            norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
        )
        return adv
    kwargs: dict[str, Any] = {"token_level_rewards": rewards, "response_mask": mask, "config": algo, "index": index}
    if estimator == "remax":
        if rollout.baseline_rewards is None:
            raise RolloutError(
                "rollout.baseline_rewards=None but verl estimator=remax subtracts the greedy response's reward: "
                "pass baseline_rewards [N]."
            )
        kwargs["reward_baselines"] = rollout.baseline_rewards.detach().to(torch.float64)
    adv, _ = core_algos.get_adv_estimator_fn(estimator)(**kwargs)
    return adv


def _loss(logprobs: Tensor, rollout: Rollout, *, loss: str, mode: str, actor, algo, options) -> Tensor:
    from verl.trainer.ppo import core_algos

    adv = advantages(rollout, options["estimator"], algo, options["norm_adv_by_std_in_grpo"]).to(logprobs.dtype)
    if loss == "clip_cov":  # it zeroes a torch.randperm subset: seed it for reproducible coefficients
        torch.manual_seed(int(options["seed"]))
    policy_loss = core_algos.get_policy_loss_fn(loss)
    value, _metrics = policy_loss(
        old_log_prob=rollout.old_logprobs.to(logprobs.dtype),
        log_prob=logprobs,
        advantages=adv,
        response_mask=rollout.mask,
        loss_agg_mode=mode,
        config=actor,
        rollout_is_weights=None,
    )
    if options["use_kl_loss"]:
        if rollout.ref_logprobs is None:
            raise RolloutError(
                "rollout.ref_logprobs=None but verl use_kl_loss=true adds a KL to the reference policy: "
                "pass ref_logprobs [N, T]."
            )
        kld = core_algos.kl_penalty(
            logprob=logprobs, ref_logprob=rollout.ref_logprobs.to(logprobs.dtype), kl_penalty=options["kl_loss_type"]
        )
        factor = options["loss_scale_factor"]
        kl_loss = core_algos.agg_loss(
            loss_mat=kld, loss_mask=rollout.mask, loss_agg_mode=mode,
            loss_scale_factor=None if factor is None else int(factor),
        )
        value = value + kl_loss * float(options["kl_loss_coef"])
    return value


# ------------------------------------------------------------------ expected verdicts
# Aggregations whose weight depends on the response's own length (1/(B L_i)).
_PER_RESPONSE = ("seq-mean-token-mean",)
# Losses that ignore loss_agg_mode and aggregate per response (verl 0.9.1).
_FORCED_PER_RESPONSE = ("sapo", "geo_mean")
# The facets each estimator carries (rl-libraries.md section 2). A length-weighted
# baseline (opo) is not zero-sum once lengths differ; the reinforce++ estimators whiten
# over the batch's tokens (a token-weighted centre that is not the group's own); pass@k
# credits one response per group; remax's greedy baseline is a scalar foreign centre.
_ESTIMATOR_FACETS: dict[str, tuple[str, ...]] = {
    "grpo": (),
    "grpo_vectorized": (),
    "rloo": (),
    "rloo_vectorized": (),
    "gpg": (),
    "opo": ("M4.length_weighted",),
    "grpo_passk": ("M4.not_zero_sum",),
    "reinforce_plus_plus_baseline": ("M4.length_weighted", "M4.foreign_centre"),
    "reinforce_plus_plus": ("M4.length_weighted", "M4.foreign_centre"),
    "remax": ("M4.foreign_centre",),
}
# Estimators that give at most one non-zero advantage per group: no sign to clip against.
_ONE_SIGN = ("grpo_passk",)


def expected(loss: str, mode: str, params: Mapping[str, Any] | None = None) -> dict[str, Expected]:
    """The verdict ../shared/reference/rl-libraries.md section 2 predicts, per regime.

    M3: ``seq-mean-token-mean`` or a loss that forces it (sapo, geo_mean). M2: the
    sign-dependent PPO clip (vanilla always has the dual clip), SAPO's temperatures,
    GMPO's log clip, the DPPO masks. M1: sequence ratios (gspo, geo_mean). Estimators:
    :data:`_ESTIMATOR_FACETS`. gpg and cispo (two-sided detached clamp) break nothing.
    The KL loss (``use_kl_loss`` with ``kl_loss_coef != 0``): every ``kl_penalty`` type
    is a function of the sampled token's own ``l`` and ``ref``, added to each
    occurrence whatever its advantage: ``M6.event_term`` in both regimes (the policy
    is not the reference on-policy).
    """
    p = dict(DEFAULTS)
    p.update(short_params(params))
    on = set(_ESTIMATOR_FACETS[p["estimator"]])
    if mode in _PER_RESPONSE or loss in _FORCED_PER_RESPONSE:
        on.add("M3.response_norm")
    off = set(on)
    if loss in ("vanilla", "gspo", "sapo", "geo_mean", "dppo_tv", "dppo_kl", "clip_cov") and p["estimator"] not in _ONE_SIGN:
        off.add("M2.sign_clip")
    if loss in ("gspo", "geo_mean"):
        off.add("M1.sequence_weight")
    if _true(p["use_kl_loss"]) and float(p["kl_loss_coef"]) != 0.0:
        on.add("M6.event_term")
        off.add("M6.event_term")
    return per_regime(verdict_of(*on), verdict_of(*off))


def _true(value: Any) -> bool:
    return str(value).lower() in ("true", "1", "yes")
