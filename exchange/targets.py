"""Resolve a TARGET (the CLI's, the audit's, the API's) to a ``loss_fn``.

TARGET is one of:

- a built-in name, optionally with transformations: ``grpo``, ``gspo+min_replace``;
- a library loss: ``trl:<loss_type>``, ``verl:<policy_loss>/<agg_mode>``, ``openrlhf:<estimator>``;
- ``module:function`` (importable module);
- ``path/to/file.py:function``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from exchange.errors import InvalidArgument

LIBRARY_PREFIXES = ("trl:", "verl:", "openrlhf:")


@dataclass
class Target:
    name: str
    loss_fn: Callable
    regularizer: Callable | None = None
    source: str = ""


def parse_param_items(items: list[str] | None) -> dict[str, str]:
    """``["eps_low=0.1", ...]`` -> ``{"eps_low": "0.1"}``."""
    params: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidArgument(f"--param {item!r} is not KEY=VALUE (e.g. --param eps_high=0.28).")
        params[key.strip()] = value.strip()
    return params


def resolve_target(target: str, params: dict[str, str] | None = None) -> Target:
    params = params or {}
    if target.startswith(LIBRARY_PREFIXES):
        from exchange import libraries

        return Target(target, libraries.resolve(target, params), source=target.split(":", 1)[0])
    if ":" not in target:
        from exchange import objectives

        base = target.split("+", 1)[0]
        objective = objectives.get(base)  # unknown names list the built-ins
        loss_fn = objectives.resolve(target, **params)
        reg = objective.bind_regularizer(**params) if objective.regularizer is not None else None
        return Target(target, loss_fn, reg, objective.source)
    if params:
        raise InvalidArgument(
            f"--param applies to built-in and library objectives, not to {target!r}; "
            "bind the parameters inside your own function."
        )
    location, _, attr = target.rpartition(":")
    module = _load_file(location) if location.endswith(".py") or "/" in location else _load_module(location)
    try:
        fn = getattr(module, attr)
    except AttributeError:
        public = sorted(n for n in dir(module) if callable(getattr(module, n)) and not n.startswith("_"))
        raise InvalidArgument(
            f"TARGET={target!r}: {location} has no attribute {attr!r}; callables there: {', '.join(public) or '(none)'}."
        ) from None
    if not callable(fn):
        raise InvalidArgument(f"TARGET={target!r}: {attr} is a {type(fn).__name__}, not a function loss_fn(logprobs, rollout).")
    return Target(target, fn, source=location)


def _load_module(name: str):
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        raise InvalidArgument(
            f"TARGET module {name!r} cannot be imported ({err}); use path/to/file.py:function for a file."
        ) from None


def _load_file(location: str):
    path = Path(location)
    if not path.is_file():
        raise InvalidArgument(f"TARGET file {location!r} does not exist (relative paths are from {Path.cwd()}).")
    spec = importlib.util.spec_from_file_location(f"_exchange_target_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent.resolve()))
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        raise InvalidArgument(f"TARGET file {location!r} failed to import: {type(err).__name__}: {err}") from None
    finally:
        sys.path.pop(0)
    return module
