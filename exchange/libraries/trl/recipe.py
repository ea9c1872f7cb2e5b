"""The loss a TRL recipe trains with: ``exchange check --trl-config recipe.yaml`` (trl==1.16.0).

A recipe is what ``trl grpo --config recipe.yaml`` (TRL's ``TrlParser``) reads: a YAML
mapping whose keys are ``GRPOConfig`` fields, mixed with ``ScriptArguments`` /
``ModelConfig`` keys (``model_name_or_path``, ``dataset_name``, ...), which are ignored
here. The GRPOConfig fields build a real ``trl.GRPOConfig`` (its ``__post_init__``
resolves ``scale_rewards=True``, ``epsilon_high=None`` ... as in training), and the loss
is the TRL adapter ``trl:<loss_type>`` with every loss setting of that config:

    from exchange.libraries.trl.recipe import config_target, loss_of_config
    target, params = config_target("recipe.yaml")     # or a GRPOConfig object
    loss_fn = loss_of_config(GRPOConfig(loss_type="grpo", beta=0.04))
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

from exchange.errors import InvalidArgument
from exchange.libraries.versions import require

__all__ = ["load_config", "config_target", "loss_of_config"]


def load_config(source: Any):
    """A ``GRPOConfig`` from a GRPOConfig, a mapping, or a YAML recipe path."""
    require("trl")
    from trl import GRPOConfig

    if isinstance(source, GRPOConfig):
        return source
    if isinstance(source, (str, Path)):
        import yaml

        path = Path(source)
        if not path.is_file():
            raise InvalidArgument(f"--trl-config {str(path)!r}: no such file.")
        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, dict):
            raise InvalidArgument(f"--trl-config {str(path)!r}: not a YAML mapping of GRPOConfig fields.")
    elif isinstance(source, dict):
        data = dict(source)
    else:
        raise InvalidArgument(f"config={source!r} is neither a GRPOConfig, a mapping nor a YAML path.")
    fields = {f.name for f in dataclasses.fields(GRPOConfig) if f.init}
    kwargs = {k: v for k, v in data.items() if k in fields}
    kwargs.setdefault("output_dir", "exchange-check")
    kwargs["report_to"] = "none"
    kwargs["use_cpu"] = True
    kwargs.pop("bf16", None), kwargs.pop("fp16", None)
    try:
        return GRPOConfig(**kwargs)
    except (TypeError, ValueError) as err:
        raise InvalidArgument(f"GRPOConfig rejects the recipe: {err}") from err


def config_target(source: Any) -> tuple[str, dict[str, Any]]:
    """``("trl:<loss_type>", params)``: the adapter target and the GRPOConfig loss settings."""
    from exchange.libraries.trl.loss import PARAMS

    config = load_config(source)
    params = {name: getattr(config, name) for name in PARAMS if hasattr(config, name)}
    return f"trl:{config.loss_type}", params


def loss_of_config(source: Any) -> Callable:
    """The ``loss_fn(logprobs, rollout)`` that ``source``'s config trains with."""
    from exchange.libraries import resolve

    target, params = config_target(source)
    return resolve(target, params)
