"""The real losses of TRL, verl, OpenRLHF, SkyRL, AReaL and ART as plain ``loss_fn(logprobs, rollout)``.

Each adapter calls the library's own code (see each module's docstring for exactly what
is driven and what is reproduced) at the one version it was written against:
trl==1.16.0, verl==0.9.1, openrlhf==0.11.2, skyrl-train==0.3.1, areal==1.0.4,
openpipe-art==0.5.18.

    resolve("trl:grpo", {"importance_sampling_level": "sequence"})  # GSPO in TRL
    resolve("verl:vanilla/seq-mean-token-mean", {"estimator": "rloo"})
    resolve("openrlhf:group_norm", {"policy_loss_type": "gspo"})
    resolve("skyrl:gspo", {"loss_reduction": "sequence_mean"})
    resolve("areal:ppo", {"reward_mean_level": "group", "reward_std_level": "group"})
    resolve("art:cispo", {"importance_sampling_level": "sequence"})

``library_rows()`` lists the configurations the audit checks, each with the verdict
../shared/reference/rl-libraries.md predicts.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from torch import Tensor

from exchange.libraries.versions import SUPPORTED, LibraryError, installed_version, require
from exchange.errors import InvalidArgument
from exchange.objectives.objective import Expected
from exchange.core.rollout import Rollout

__all__ = [
    "KNOWN_DISAGREEMENTS",
    "LIBRARIES",
    "LibraryError",
    "LibraryRow",
    "SUPPORTED",
    "available",
    "library_rows",
    "resolve",
    "unavailable_reason",
]

LIBRARIES = ("trl", "verl", "openrlhf", "skyrl", "areal", "art")

LossFn = Callable[[Tensor, Rollout], Tensor]


def _module(library: str):
    return importlib.import_module(f"exchange.libraries.{library}.loss")


def _check_library(target: str) -> tuple[str, str]:
    library, sep, spec = target.partition(":")
    if not sep or library not in LIBRARIES or not spec:
        raise InvalidArgument(
            f"target={target!r} is not LIBRARY:LOSS; LIBRARY is one of {', '.join(LIBRARIES)} "
            "(e.g. trl:grpo, verl:vanilla/token-mean, openrlhf:group_norm, skyrl:regular, areal:ppo, art:cispo)."
        )
    return library, spec


def resolve(target: str, params: Mapping[str, Any] | None = None) -> LossFn:
    """``"trl:<loss_type>"``, ``"verl:<policy_loss>/<loss_agg_mode>"``,
    ``"openrlhf:<estimator>"``, ``"skyrl:<policy_loss_type>"``, ``"areal:<loss>"`` or
    ``"art:<loss>"`` with ``params`` (CLI ``--param key=value`` strings) ->
    ``loss_fn(logprobs [N, T], rollout) -> Tensor[]`` running the library's own code.

    Raises :class:`LibraryError` when the library is missing or at another version and
    :class:`~exchange.errors.InvalidArgument` for unknown losses or parameters.
    """
    library, spec = _check_library(target)
    require(library)
    return _module(library).loss_fn(spec, params)


def unavailable_reason(library: str) -> str | None:
    """None when ``library`` is installed at the supported version, else why not."""
    if library not in LIBRARIES:
        raise InvalidArgument(f"library={library!r} is not one of {', '.join(LIBRARIES)}.")
    try:
        require(library)
    except LibraryError as err:
        return str(err)
    return None


def available(library: str) -> bool:
    """True when ``library`` is installed at the version the adapter drives."""
    return unavailable_reason(library) is None


@dataclass(frozen=True)
class LibraryRow:
    """One audited library configuration.

    Fields:
        target: ``resolve`` target, e.g. ``"trl:grpo"``.
        params: the ``--param`` settings of this row (strings, as on the command line).
        factory: zero-argument callable returning the ``loss_fn`` (imports the library).
        expected: verdict per regime (``"on_policy"`` / ``"off_policy"``) predicted by
            ../shared/reference/rl-libraries.md (TRL, verl, OpenRLHF) or by THEORY.md
            section 4 applied to the library's code (SkyRL, AReaL, ART).
        version: the installed library version.
        note: what this row shows, one line.
    """

    target: str
    params: Mapping[str, str]
    factory: Callable[[], LossFn]
    expected: Mapping[str, Expected]
    version: str
    note: str = ""

    @property
    def name(self) -> str:
        """``target`` plus its params as the CLI spells them."""
        return " ".join([self.target, *(f"--param {k}={v}" for k, v in self.params.items())])

    @property
    def library(self) -> str:
        return self.target.split(":", 1)[0]


# (target, params, note) per library; expected verdicts come from each module's expected().
# GSPO's clip range (arXiv:2507.18071), as the TRL and verl docs recommend for it.
_GSPO_TRL = {"epsilon": "3e-4", "epsilon_high": "4e-4"}
_GSPO_VERL = {"clip_ratio_low": "3e-4", "clip_ratio_high": "4e-4"}

_TRL_ROWS: tuple[tuple[str, dict[str, str], str], ...] = (
    ("trl:grpo", {}, "per-sequence mean 1/(B L_i)"),
    ("trl:bnpo", {}, "local token mean"),
    ("trl:dr_grpo", {}, "constant B * max_completion_length"),
    ("trl:dapo", {}, "TRL's default: global token count"),
    ("trl:cispo", {}, "detached min(r, epsilon_high), token mean"),
    ("trl:cispo", {"epsilon_high": "5.0"}, "the cap the TRL docs recommend"),
    ("trl:sapo", {}, "soft gate, per-sequence mean"),
    ("trl:vespo", {}, "gamma weight of the sequence ratio product"),
    ("trl:luspo", {"importance_sampling_level": "sequence", **_GSPO_TRL}, "L_i x GSPO"),
    ("trl:grpo", {"importance_sampling_level": "sequence", **_GSPO_TRL}, "GSPO as the TRL docs set it up"),
    # TRL's per-token factors and reward aggregation (issue 32)
    ("trl:grpo", {"beta": "0.04"}, "k3 KL to the reference: an additive event term"),
    ("trl:dapo", {"beta": "0.04"}, "k3 KL to the reference: an additive event term"),
    ("trl:grpo", {"importance_sampling_level": "sequence", "beta": "0.04"},
     "k3 KL times the sequence ratio (bias correction): each response's mean KL on its tokens"),
    ("trl:grpo", {"importance_sampling_level": "sequence", "beta": "0.04", "use_bias_correction_kl": "false"},
     "k3 KL without the ratio: an additive event term"),
    ("trl:dapo", {"top_entropy_quantile": "0.2"}, "high-entropy mask: a function of the event"),
    ("trl:dapo", {"epsilon_high": "0.28", "delta": "1.1"}, "two-sided clip: the unclipped ratio capped"),
    ("trl:dapo", {"off_policy_mask_threshold": "0.05"}, "off-policy sequence mask: A < 0 dropped off-policy"),
    ("trl:dapo", {"off_policy_mask_threshold": "-0.05"}, "negative threshold: every A < 0 dropped"),
    ("trl:grpo", {"multi_objective_aggregation": "normalize_then_sum"}, "one reward function: one batch scale"),
    ("trl:dapo", {"use_vllm": "true", "vllm_importance_sampling_mode": "token_truncate"},
     "vLLM's IS weight per token: a function of the event"),
)

_VERL_ROWS: tuple[tuple[str, dict[str, str], str], ...] = (
    ("verl:vanilla/token-mean", {}, "verl's default; dual clip c=3"),
    ("verl:vanilla/token-sum", {}, ""),
    ("verl:vanilla/seq-mean-token-sum", {}, ""),
    ("verl:vanilla/seq-mean-token-mean", {}, "per-sequence mean"),
    ("verl:vanilla/seq-mean-token-sum-norm", {}, "Dr. GRPO: 1/(B T)"),
    ("verl:gspo/token-mean", _GSPO_VERL, "0.9.1 honours loss_agg_mode"),
    ("verl:gspo/seq-mean-token-mean", _GSPO_VERL, "GSPO proper"),
    ("verl:sapo/token-mean", {}, "forces seq-mean-token-mean"),
    ("verl:gpg/token-mean", {}, "no ratio"),
    ("verl:cispo/token-mean", {}, "two-sided detached clamp"),
    ("verl:geo_mean/token-mean", {}, "GMPO: forces a per-sequence mean"),
    ("verl:vanilla/token-mean", {"estimator": "rloo"}, ""),
    ("verl:vanilla/token-mean", {"estimator": "grpo", "norm_adv_by_std_in_grpo": "false"}, "Dr. GRPO advantage"),
    ("verl:vanilla/token-mean", {"estimator": "opo"}, "length-weighted baseline"),
    ("verl:vanilla/token-mean", {"estimator": "reinforce_plus_plus_baseline"}, "batch whitening"),
    ("verl:vanilla/token-mean", {"estimator": "grpo_passk"}, "only the best response"),
)

_OPENRLHF_ROWS: tuple[tuple[str, dict[str, str], str], ...] = (
    ("openrlhf:group_norm", {}, "GRPO advantage, token mean"),
    ("openrlhf:rloo", {}, ""),
    ("openrlhf:dr_grpo", {}, "only the advantage changes"),
    ("openrlhf:group_norm", {"loss_agg_mode": "seq-mean-token-mean"}, "per-sequence mean"),
    (
        "openrlhf:group_norm",
        {"policy_loss_type": "gspo", "eps_clip_low": "3e-4", "eps_clip_high": "4e-4"},
        "GSPO (forced per-sample mean)",
    ),
    ("openrlhf:group_norm", {"dual_clip": "3.0"}, "dual clip"),
)

# SkyRL: every policy_loss_type at its defaults (token_mean, grpo), then every
# loss_reduction and advantage estimator / normalisation on the regular loss.
_SKYRL_ROWS: tuple[tuple[str, dict[str, str], str], ...] = (
    ("skyrl:regular", {}, "SkyRL's default: PPO clip, token_mean, grpo"),
    ("skyrl:regular", {"loss_reduction": "sequence_mean"}, "per-sequence mean"),
    ("skyrl:regular", {"loss_reduction": "seq_mean_token_sum_norm"}, "Dr. GRPO: 1/(B max_seq_len)"),
    ("skyrl:dual_clip", {}, "dual clip c=3"),
    ("skyrl:gspo", {"loss_reduction": "sequence_mean", "eps_clip_low": "3e-4", "eps_clip_high": "4e-4"}, "GSPO as recommended"),
    ("skyrl:gspo", {}, "GSPO with token_mean (only a warning)"),
    ("skyrl:cispo", {}, "detached clamp [1-0, 1+5]"),
    ("skyrl:sapo", {"loss_reduction": "sequence_mean"}, "SAPO as recommended"),
    ("skyrl:clip_cov", {}, "PPO clip + covariance token masks"),
    ("skyrl:kl_cov", {}, "|log r| on the top-covariance tokens"),
    ("skyrl:regular", {"estimator": "rloo"}, ""),
    ("skyrl:regular", {"estimator": "reinforce++"}, "batch whitening"),
    ("skyrl:regular", {"grpo_norm_by_std": "false"}, "Dr. GRPO advantage"),
    ("skyrl:regular", {"advantage_batch_normalize": "true"}, "batch re-normalisation"),
)

# AReaL: PPOActor's ppo_actor_loss_fn / sapo_loss_fn, token mean; advantages from
# PPOActor._compute_advantages with the adv_norm / reward_norm presets.
_GROUP_REWARD = {"reward_mean_level": "group", "reward_std_level": "group"}
_AREAL_ROWS: tuple[tuple[str, dict[str, str], str], ...] = (
    ("areal:ppo", {}, "PPOActorConfig defaults: no reward_norm, raw rewards"),
    ("areal:ppo", _GROUP_REWARD, "GRPO: group reward normalisation"),
    ("areal:ppo", {"adv_mean_level": "batch", "adv_std_level": "batch"}, "batch adv_norm of raw rewards"),
    ("areal:ppo", {**_GROUP_REWARD, "adv_mean_level": "group", "adv_std_level": "group"}, "group adv_norm: token-weighted mean"),
    ("areal:ppo", {"reward_mean_level": "group", "mean_leave1out": "true"}, "leave-one-out baseline"),
    ("areal:ppo", {"reward_mean_level": "batch", "reward_std_level": "batch"}, "batch reward normalisation"),
    ("areal:ppo", {**_GROUP_REWARD, "eps_clip_higher": "0.28"}, "DAPO clip-higher"),
    ("areal:ppo", {**_GROUP_REWARD, "c_clip": "3.0"}, "dual clip"),
    (
        "areal:ppo",
        {**_GROUP_REWARD, "importance_sampling_level": "sequence", "eps_clip": "3e-4", "eps_clip_higher": "4e-4"},
        "GSPO, token mean",
    ),
    ("areal:sapo", _GROUP_REWARD, "SAPO gates"),
)

# Audit rows where the checker and the prediction differ, with why; each is shown by a
# test, and tests/test_audit.py fails if a row listed here agrees (or one not here does not).
KNOWN_DISAGREEMENTS: dict[str, str] = {
}

# ART: its default CISPO-style loss and PPO, then every advantage option, sequence-level
# ratio and extra term of dev.TrainConfig.
_ART_ROWS: tuple[tuple[str, dict[str, str], str], ...] = (
    ("art:cispo", {}, "ART's default: detached ratio clamped to [0, 5], weight 1/L_i"),
    ("art:ppo", {}, "ppo=true: PPO clip 0.2"),
    ("art:ppo", {"epsilon_high": "0.28"}, "clip-higher"),
    ("art:cispo", {"scale_rewards": "false"}, "no std division"),
    ("art:cispo", {"advantage_balance": "0.5"}, "negative advantages halved"),
    ("art:cispo", {"importance_sampling_level": "sequence"}, "sequence ratio"),
    ("art:ppo", {"importance_sampling_level": "sequence", "epsilon": "3e-4", "epsilon_high": "4e-4"}, "GSPO-like"),
    ("art:cispo", {"importance_sampling_level": "average"}, "(token + sequence ratio) / 2"),
    ("art:cispo", {"importance_sampling_level": "geometric_average"}, "sqrt(token x sequence ratio)"),
    ("art:cispo", {"kimi_k2_tau": "0.1"}, "A - tau log r"),
    ("art:cispo", {"mask_prob_ratio": "true"}, "ratios outside the range masked"),
)

ROWS: dict[str, tuple[tuple[str, dict[str, str], str], ...]] = {
    "trl": _TRL_ROWS,
    "verl": _VERL_ROWS,
    "openrlhf": _OPENRLHF_ROWS,
    "skyrl": _SKYRL_ROWS,
    "areal": _AREAL_ROWS,
    "art": _ART_ROWS,
}


def expected(target: str, params: Mapping[str, str] | None = None) -> dict[str, Expected]:
    """The predicted verdict per regime for ``target`` with ``params`` (no library import
    beyond the adapter's defaults)."""
    library, spec = _check_library(target)
    params = dict(params or {})
    module = _module(library)
    if library == "verl":
        loss, _, mode = spec.partition("/")
        return module.expected(loss, mode or "token-mean", module.parse_params(target, params, module.DEFAULTS))
    if library == "trl":
        return module.expected(spec, module.parse_params(target, params, module.defaults()))
    return module.expected(spec, module.parse_params(target, params, module.DEFAULTS))


def library_rows(libraries: tuple[str, ...] = LIBRARIES, strict: bool = False) -> list["LibraryRow"]:
    """The audited configurations of every installed library in ``libraries``.

    A library that is missing or at another version contributes no rows unless
    ``strict`` (then :class:`LibraryError`); ``unavailable_reason(lib)`` says why.
    """
    rows: list[LibraryRow] = []
    for library in libraries:
        reason = unavailable_reason(library)
        if reason is not None:
            if strict:
                raise LibraryError(reason)
            continue
        version = installed_version(library) or ""
        for target, params, note in ROWS[library]:
            factory = _factory(target, params)
            rows.append(LibraryRow(target, dict(params), factory, expected(target, params), version, note))
    return rows


def _factory(target: str, params: Mapping[str, str]) -> Callable[[], LossFn]:
    def make() -> LossFn:
        return resolve(target, params)

    make.__name__ = f"make_{target}"
    return make
