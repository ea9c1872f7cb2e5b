"""ART's policy loss as ``loss_fn(logprobs, rollout)`` (openpipe-art==0.5.18).

``import art`` pulls its backends (unsloth, vLLM, megatron, the OpenAI client), so the
adapter executes three files of the installed wheel (``pip install openpipe-art==0.5.18
--no-deps``) with importlib (:mod:`exchange.libraries.wheel`): ``art/utils/group_aggregate.py``,
``art/preprocessing/tokenize.py`` (for its ``TokenizedResult`` dataclass),
``art/preprocessing/pack.py`` (``packed_tensors_from_tokenized_results``) and
``art/loss.py`` (``loss_fn``). What else they import (``art.dev``, ``art.types``,
``art.trajectories``, ``openai``, ``PIL``, transformers' tokenizer types) is a stub the
driven code never calls. Per ``loss_fn`` call:

- **Reproduced** (ten lines of ``tokenize_trajectory_groups``, which also tokenises chats
  and so needs a tokenizer and a chat template): per group, ``advantage = reward - mean``,
  divided by the population std + 1e-6 when ``scale_rewards`` (ART's default: true);
  trajectories whose advantage is exactly 0 are dropped (``drop_zero_advantage_
  trajectories``, default true); ``weight = 1 / (assistant tokens + 1e-6)``; the shared
  prompt prefix length is 0 here (one prompt token, and ART caps it before the first
  logprob).
- **Driven**: ``TokenizedResult`` per trajectory (a prompt token, then the response with
  its behaviour log-probs), ``packed_tensors_from_tokenized_results`` (weights divided by
  their token mean; ``advantage_balance``; advantages divided by the token mean of
  ``|A| * weight``) into one packed row holding the whole rollout (``seq_len`` = its
  token count: ART takes one optimizer step per packed row, so one row is one update), and
  ``art.loss.loss_fn(inputs, new_logprobs, None, None, experimental_config)``'s
  ``policy_loss`` with the log-probs under test placed at their packed positions.
  ``random`` (ART's group ids and row shuffle) runs on a saved and restored state.

Not driven: ``kl_penalty_coef`` (needs a reference model), ``truncated_importance_
sampling`` with inference log-probs (``original_logprobs``), multi-history trajectories.
"""

from __future__ import annotations

import functools
import math
import random
from types import SimpleNamespace
from typing import Any, Callable, Mapping

import torch
from torch import Tensor

from exchange.core.rollout import Rollout
from exchange.errors import InvalidArgument
from exchange.core.vocabulary import per_regime, verdict_of
from exchange.libraries.versions import INSTALL, library_loss, parse_params, require
from exchange.libraries.wheel import Permissive, exec_file, package_dir, permissive_module, stub, stubbed
from exchange.objectives.objective import Expected

__all__ = ["LOSSES", "DEFAULTS", "loss_fn", "expected"]

LOSSES = ("cispo", "ppo")  # experimental_config["ppo"] false / true (the pipeline trainer's loss_fn names)
IS_LEVELS = ("token", "sequence", "average", "geometric_average")

# dev.TrainConfig keys with the defaults art/loss.py and art/local/backend.py apply; the
# clip range defaults differ by loss (cispo: 1.0/4.0, ppo: 0.2/None = symmetric).
DEFAULTS: dict[str, Any] = {
    "scale_rewards": True,
    "advantage_balance": 0.0,
    "epsilon": None,
    "epsilon_high": None,
    "importance_sampling_level": "token",
    "mask_prob_ratio": False,
    "max_negative_advantage_importance_sampling_weight": None,
    "kimi_k2_tau": None,
    "drop_zero_advantage_trajectories": True,
}

_PROMPT_TOKEN = -7  # one prompt token per response (never a response token id)


@functools.lru_cache(maxsize=1)
def _modules() -> SimpleNamespace:
    require("art")
    root = package_dir("art", INSTALL["art"])
    stubs = {
        "art": permissive_module("art", str(root)),
        "art.utils": permissive_module("art.utils", str(root / "utils")),
        "art.preprocessing": permissive_module("art.preprocessing", str(root / "preprocessing")),
        "art.dev": stub("art.dev", TrainConfig=dict),
        "art.types": stub("art.types", Verbosity=int, MessagesAndChoices=Permissive("MessagesAndChoices")),
        "art.trajectories": permissive_module("art.trajectories"),
    }
    for name in (
        "openai",
        "openai.types",
        "openai.types.chat",
        "openai.types.chat.chat_completion",
        "PIL",
        "transformers",
        "transformers.image_processing_utils",
        "transformers.tokenization_utils_base",
    ):
        stubs[name] = permissive_module(name)
    stubs["art"].dev = stubs["art.dev"]
    with stubbed(stubs, ("art",)):
        exec_file("art.utils.group_aggregate", root / "utils" / "group_aggregate.py")
        tokenize = exec_file("art.preprocessing.tokenize", root / "preprocessing" / "tokenize.py")
        pack = exec_file("art.preprocessing.pack", root / "preprocessing" / "pack.py")
        loss = exec_file("art.loss", root / "loss.py")
    return SimpleNamespace(tokenize=tokenize, pack=pack, loss=loss)


def _options(target: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    o = parse_params(target, params, DEFAULTS)
    if o["importance_sampling_level"] not in IS_LEVELS:
        raise InvalidArgument(
            f"target={target!r}: importance_sampling_level={o['importance_sampling_level']!r} is not one of "
            f"{', '.join(IS_LEVELS)}."
        )
    if not -1.0 <= float(o["advantage_balance"]) <= 1.0:
        raise InvalidArgument(f"target={target!r}: advantage_balance={o['advantage_balance']!r} must be in [-1, 1].")
    return o


def loss_fn(loss: str, params: Mapping[str, Any] | None = None) -> Callable[[Tensor, Rollout], Tensor]:
    """``art:<cispo|ppo>`` as ``loss_fn(logprobs [N, T], rollout) -> Tensor[]``."""
    target = f"art:{loss}"
    if loss not in LOSSES:
        raise InvalidArgument(f"target={target!r}: loss={loss!r} is not one of {', '.join(LOSSES)}.")
    options = _options(target, params)
    # pack.py builds advantages and weights with torch.tensor(list of floats): float32,
    # hidden from exchange.check's detection by the float64 arithmetic after them.
    return library_loss(target, options, _loss, precision="float32", ppo=loss == "ppo", options=options)


def _config(ppo: bool, o: Mapping[str, Any]) -> dict[str, Any]:
    """ART's ``dev.TrainConfig`` (a TypedDict): only the keys that are set."""
    config: dict[str, Any] = {"ppo": ppo, "importance_sampling_level": o["importance_sampling_level"]}
    for key in ("epsilon", "epsilon_high", "max_negative_advantage_importance_sampling_weight", "kimi_k2_tau"):
        if o[key] is not None:
            config[key] = o[key]
    if o["mask_prob_ratio"]:
        config["mask_prob_ratio"] = True
    return config


def _results(rollout: Rollout, o: Mapping[str, Any]) -> list:
    """One ``TokenizedResult`` per kept trajectory (tokenize_trajectory_groups' arithmetic).
    Token ids encode (row, position) so packed positions map back to the rollout."""
    cls = _modules().tokenize.TokenizedResult
    lengths = rollout.mask.sum(dim=1).tolist()
    rewards = rollout.rewards.detach().to(torch.float64).tolist()
    old = rollout.old_logprobs.detach().to(torch.float64)
    width = rollout.mask.shape[1] + 1
    out = []
    for g in sorted(set(rollout.group.tolist())):
        rows = [i for i in range(len(rewards)) if int(rollout.group[i]) == g]
        group_rewards = [rewards[i] for i in rows]
        reward_mean = sum(group_rewards) / len(group_rewards)
        reward_std = math.sqrt(sum((r - reward_mean) ** 2 for r in group_rewards) / len(group_rewards))
        for i in rows:
            advantage = rewards[i] - reward_mean
            if o["scale_rewards"]:
                advantage /= reward_std + 1e-6
            if advantage == 0 and o["drop_zero_advantage_trajectories"]:
                continue
            n = int(lengths[i])
            out.append(
                cls(
                    advantage=advantage,
                    chat="",
                    token_ids=[i * width] + [i * width + 1 + t for t in range(n)],
                    input_pos=list(range(n + 1)),
                    assistant_mask=[0] + [1] * n,
                    logprobs=[float("nan")] + old[i, :n].tolist(),
                    pixel_values=None,
                    image_grid_thw=None,
                    trajectory=None,
                    choice_offsets=[],
                    extra_logprobs={},
                    _tokenizer=None,
                    weight=1 / (n + 1e-6),
                    prompt_id=g,
                    prompt_length=0,
                )
            )
    return out


def _loss(logprobs: Tensor, rollout: Rollout, *, ppo: bool, options) -> Tensor:
    mods = _modules()
    results = _results(rollout, options)
    if not results:  # every trajectory dropped (all advantages 0): ART trains on nothing
        return (logprobs * 0.0).sum()
    seq_len = sum(len(r.token_ids) for r in results)
    state = random.getstate()
    try:
        random.seed(0)
        packed = mods.pack.packed_tensors_from_tokenized_results(
            results, seq_len=seq_len, advantage_balance=float(options["advantage_balance"]), verbosity=0
        )
    finally:
        random.setstate(state)
    width = rollout.mask.shape[1] + 1
    tokens = packed["tokens"]
    assistant = packed["assistant_mask"]
    row_of = torch.where(assistant, tokens // width, 0)
    pos_of = torch.where(assistant, tokens % width - 1, 0)
    at_token = torch.where(assistant, logprobs[row_of, pos_of], torch.zeros((), dtype=logprobs.dtype))
    # new_logprobs[:, p] is the log-prob of the token at packed position p + 1.
    new_logprobs = torch.nn.functional.pad(at_token[:, 1:], (0, 1), value=0.0)
    inputs = {
        "logprobs": packed["logprobs"].to(logprobs.dtype),
        "advantages": packed["advantages"].to(logprobs.dtype),
        "assistant_mask": assistant,
        "weights": packed["weights"].to(logprobs.dtype),
        "group_ids": packed["group_ids"],
    }
    out = mods.loss.loss_fn(inputs, new_logprobs, None, None, _config(ppo, options))
    return out.policy_loss


# ------------------------------------------------------------------ expected verdicts


def expected(loss: str, params: Mapping[str, Any] | None = None) -> dict[str, Expected]:
    """The mechanisms each setting has (THEORY.md section 4), per regime.

    M3 always: every trajectory's tokens carry ``weight = 1 / L_i`` (then divided by the
    weights' token mean, a batch constant), so the token mean is a per-response mean.
    M4 with ``advantage_balance != 0``: one sign of advantage is scaled down, so the group
    stops summing to zero. Off-policy: M2 for ``ppo`` (the sign-dependent min/clip; the
    default ``cispo`` clamps a detached ratio to [1 - eps, 1 + eps_high] whatever the
    sign: nothing); M1 for a sequence-level ratio (``sequence``, ``average``,
    ``geometric_average``: ART's ``group_aggregate`` mean of the response's log-ratios);
    M6 for ``kimi_k2_tau`` (``A - tau * log r`` per token: a sign-free event term); with
    ``drop_zero_advantage_trajectories`` (the default) a tied group keeps no response, so
    the term leaves (N) intact (``M6.event_term_on_kept``).
    The division of the advantages by the token mean of ``|A| * weight`` is one positive
    constant for the whole batch: no mechanism.
    """
    p = dict(DEFAULTS)
    p.update(params or {})
    on = {"M3.response_norm"}
    if float(p["advantage_balance"]) != 0.0:
        on.add("M4.not_zero_sum")
    off = set(on)
    if loss == "ppo":
        off.add("M2.sign_clip")
    if p["importance_sampling_level"] != "token":
        off.add("M1.sequence_weight")
    if p["kimi_k2_tau"]:
        off.add("M6.event_term_on_kept" if p["drop_zero_advantage_trajectories"] else "M6.event_term")
    return per_regime(verdict_of(*on), verdict_of(*off))
