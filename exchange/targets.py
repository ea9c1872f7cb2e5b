"""Resolve a TARGET (the CLI's, the audit's, the API's) to a ``loss_fn``.

TARGET is one of:

- a built-in name, optionally with transformations: ``grpo``, ``gspo+min_replace``;
- a library loss: ``trl:<loss_type>``, ``verl:<policy_loss>/<agg_mode>``, ``openrlhf:<estimator>``,
  ``skyrl:<policy_loss_type>``, ``areal:<loss>``, ``art:<loss>``;
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

LIBRARY_PREFIXES = ("trl:", "verl:", "openrlhf:", "skyrl:", "areal:", "art:")


@dataclass
class Target:
    name: str
    loss_fn: Callable
    regularizer: Callable | None = None
    source: str = ""


@dataclass(frozen=True)
class TargetSpec:
    """A TARGET and its ``--param`` settings, as data (an audit row, a library row)."""

    target: str
    params: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        """``target`` plus its params as the CLI spells them (``trl:grpo --param beta=0.04``)."""
        return " ".join([self.target, *(f"--param {k}={v}" for k, v in self.params)])

    def resolve(self) -> Target:
        return resolve_target(self.target, dict(self.params))


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
    location, _, attr = target.rpartition(":")
    if not location or not attr:
        raise InvalidArgument(
            f"TARGET={target!r} is not module:function or path/to/file.py:function (e.g. mylib.losses:my_loss)."
        )
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
    if params:
        fn = _bind_params(target, fn, params)
    return Target(target, fn, source=location)


def _literal(value: str):
    """``"0.2"`` -> 0.2, ``"3"`` -> 3, ``"true"`` -> True; anything else stays a string."""
    low = value.lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def _bind_params(target: str, fn: Callable, params: dict[str, str]) -> Callable:
    """``--param k=v`` for a user's function: keyword arguments of the loss itself
    (``fn(logprobs, rollout, k=v)``), or of a factory that returns the loss."""
    import functools
    import inspect

    kwargs = {k: _literal(v) for k, v in params.items()}
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None
    if sig is not None:
        names = [n for n, p in sig.parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        var_kw = any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())
        unknown = [k for k in kwargs if k not in names]
        if unknown and not var_kw:
            raise InvalidArgument(
                f"--param {unknown[0]}: {target} takes no parameter {unknown[0]!r}; its parameters: {', '.join(names) or '(none)'}."
            )
        positional = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in kwargs]
        if len(positional) < 2 and not any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values()):
            # A factory: factory(**params) -> loss_fn(logprobs, rollout).
            try:
                loss_fn = fn(**kwargs)
            except Exception as err:
                raise InvalidArgument(f"TARGET={target!r}: {fn.__name__}(**{kwargs}) failed: {type(err).__name__}: {err}") from None
            if not callable(loss_fn):
                raise InvalidArgument(f"TARGET={target!r}: {fn.__name__}(**{kwargs}) returned a {type(loss_fn).__name__}, not a loss function.")
            return loss_fn
    bound = functools.partial(fn, **kwargs)
    functools.update_wrapper(bound, fn)
    return bound


def _load_module(name: str):
    # Like ``python -m`` and pytest: the current directory is importable, so
    # ``exchange check mylib.losses:fn`` works from the project root.
    cwd = str(Path.cwd())
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        raise InvalidArgument(
            f"TARGET module {name!r} cannot be imported ({err}); use path/to/file.py:function for a file."
        ) from None
    except (Exception, SystemExit) as err:
        raise InvalidArgument(f"TARGET module {name!r} failed to import: {_describe(err)}") from None
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def _describe(err: BaseException) -> str:
    if isinstance(err, SystemExit):
        return f"it called sys.exit({err.code!r})"
    if isinstance(err, SyntaxError):
        return f"SyntaxError: {err.msg} ({err.filename}, line {err.lineno})"
    return f"{type(err).__name__}: {err}"


def _load_file(location: str):
    path = Path(location)
    if not path.is_file():
        raise InvalidArgument(f"TARGET file {location!r} does not exist (relative paths are from {Path.cwd()}).")
    spec = importlib.util.spec_from_file_location(f"_exchange_target_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent.resolve()))
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as err:
        raise InvalidArgument(f"TARGET file {location!r} failed to import: {_describe(err)}") from None
    finally:
        sys.path.pop(0)
    return module
