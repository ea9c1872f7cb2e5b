"""A verl config as verl composes it, for ``exchange check --verl-config FILE.yaml [key=value ...]`` (verl==0.9.1).

verl's entry point (``python -m verl.trainer.main_ppo``) composes its Hydra config from
``verl/trainer/config/ppo_trainer.yaml`` and the command line. hydra-core cannot be
installed beside this package's pinned omegaconf, so the composition is done with
OmegaConf alone, from the flat config verl ships for that purpose,
``verl/trainer/config/_generated_ppo_trainer.yaml`` (``--cfg job`` of the default
config, read from the installed wheel):

1. that config, in struct mode (a key it lacks is an error, as in Hydra);
2. the user's YAML merged over it (a key verl lacks: an error naming it and the nearest
   keys). A YAML with a Hydra ``defaults:`` list is refused: it is composed by Hydra
   (``python -m verl.trainer.main_ppo --config-name ... --cfg job`` prints the composed
   config, which this reads);
3. the overrides, as verl's command line takes them: ``key=value`` sets a key that must
   exist (else an error naming it and its nearest keys, as Hydra's ``Could not override``),
   ``+key=value`` adds a key that must not exist, ``++key=value`` sets or adds,
   ``~key`` deletes. Values are parsed as YAML (``True``, ``1e-6``, ``null``, ``[a,b]``).

:func:`load_config` returns the composed ``DictConfig``; :mod:`exchange.libraries.verl.recipe`
reads what one optimizer step of it trains.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Sequence

from exchange.errors import InvalidArgument
from exchange.libraries.versions import require

__all__ = ["GENERATED", "generated_path", "load_config", "flat_keys"]

GENERATED = "trainer/config/_generated_ppo_trainer.yaml"
_CFG_JOB = ("compose it first: python -m verl.trainer.main_ppo --config-name NAME --cfg job > composed.yaml "
            "prints the composed config; pass that file")


def generated_path() -> Path:
    """``_generated_ppo_trainer.yaml`` of the installed verl wheel, found without
    importing verl (its import takes seconds: it loads torch, Ray glue and plugins)."""
    import importlib.util

    require("verl")
    spec = importlib.util.find_spec("verl")
    return Path(list(spec.submodule_search_locations)[0]) / GENERATED


def flat_keys(node: Any, prefix: str = "") -> list[str]:
    """Every key path of a config (``actor_rollout_ref.actor.clip_ratio``), depth first."""
    from omegaconf import DictConfig

    out = []
    if isinstance(node, DictConfig):
        for key in node.keys():
            path = f"{prefix}{key}"
            out.append(path)
            out += flat_keys(node._get_node(key), path + ".")
    return out


def _nearest(key: str, keys: Sequence[str]) -> str:
    """``"; nearest: a, b, c"`` for ``key`` among ``keys`` (full paths, then last parts)."""
    close = difflib.get_close_matches(key, keys, n=3, cutoff=0.6)
    if not close:
        leaf = key.rsplit(".", 1)[-1]
        close = [k for k in keys if k.rsplit(".", 1)[-1] == leaf][:3]
    if not close:
        close = difflib.get_close_matches(key.rsplit(".", 1)[-1], [k.rsplit(".", 1)[-1] for k in keys], n=3)
        close = [k for k in keys if k.rsplit(".", 1)[-1] in close][:3]
    return f"; nearest: {', '.join(close)}" if close else ""


def _parse_value(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text) if text != "" else ""
    except yaml.YAMLError:
        return text


def _apply(cfg, item: str, keys: list[str], where: str) -> None:
    from omegaconf import OmegaConf, open_dict

    if item.startswith("~"):
        key = item[1:].partition("=")[0]
        if OmegaConf.select(cfg, key, default="__missing__") == "__missing__" and key not in keys:
            raise InvalidArgument(f"{where}: {item!r}: cannot delete {key!r}, verl's config has no such key"
                                  f"{_nearest(key, keys)}.")
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(cfg, parent) if parent else cfg
        with open_dict(cfg):
            del node[leaf]
        return
    raw_key, sep, text = item.partition("=")
    if not sep or not raw_key.lstrip("+"):
        raise InvalidArgument(f"{where}: {item!r} is not key=value (verl's command line: key=value, +key=value, "
                              "++key=value or ~key).")
    plus = len(raw_key) - len(raw_key.lstrip("+"))
    key = raw_key[plus:]
    exists = key in keys
    if plus == 0 and not exists:
        raise InvalidArgument(f"{where}: {item!r}: verl's config has no key {key!r} (Hydra: Could not override; "
                              f"to add a key write +{key}=...){_nearest(key, keys)}.")
    if plus == 1 and exists:
        raise InvalidArgument(f"{where}: {item!r}: {key!r} is already in verl's config (Hydra: Could not append); "
                              f"write {key}=... to change it.")
    with open_dict(cfg):
        OmegaConf.update(cfg, key, _parse_value(text), merge=True, force_add=True)
    if not exists:
        keys.append(key)


def load_config(path: str | Path | None, overrides: Sequence[str] = ()):
    """verl 0.9.1's config composed from its generated default, the YAML at ``path``
    (``None``: none) and the command-line ``overrides`` (see the module docstring).
    Bad input raises :class:`InvalidArgument` naming the key and the fix."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    base = OmegaConf.load(generated_path())
    OmegaConf.set_struct(base, True)
    keys = flat_keys(base)
    where = f"--verl-config {str(path)!r}" if path is not None else "--verl-config"
    if path is not None:
        import yaml

        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except OSError as err:
            raise InvalidArgument(f"{where}: cannot read it ({err.strerror}).") from None
        except yaml.YAMLError as err:
            raise InvalidArgument(f"{where}: not valid YAML ({' '.join(str(err).split())}).") from None
        if not isinstance(data, dict):
            raise InvalidArgument(f"{where}: not a YAML mapping of verl config keys.")
        if "defaults" in data:
            raise InvalidArgument(f"{where}: it has a Hydra 'defaults:' list, which only Hydra composes; {_CFG_JOB}.")
        user_keys = flat_keys(OmegaConf.create(data))
        free = _open(base, keys)
        unknown = [k for k in user_keys if k not in keys and not any(k.startswith(u + ".") for u in free)]
        if unknown:
            raise InvalidArgument(f"{where}: verl's config has no key {unknown[0]!r}{_nearest(unknown[0], keys)} "
                                  "(a key verl lacks is added with +key=value on the command line).")
        try:  # unknown keys were refused above; the rest may fill free-form mappings ({} or null in verl's)
            OmegaConf.set_struct(base, False)
            base = OmegaConf.merge(base, OmegaConf.create(data))
            OmegaConf.set_struct(base, True)
        except OmegaConfBaseException as err:
            raise InvalidArgument(f"{where}: verl's config rejects it: {' '.join(str(err).split())}") from None
        keys = flat_keys(base)
    for item in overrides:
        try:
            _apply(base, item, keys, where)
        except OmegaConfBaseException as err:
            raise InvalidArgument(f"{where}: {item!r}: {' '.join(str(err).split()[:30])}") from None
    return base


def _open(cfg, keys: list[str]) -> list[str]:
    """Keys whose value is an empty mapping or ``null`` in verl's config (free-form
    dictionaries such as ``engine_kwargs: {}``): their sub-keys are the user's."""
    from omegaconf import OmegaConf

    out = []
    for key in keys:
        node = OmegaConf.select(cfg, key, throw_on_missing=False, throw_on_resolution_failure=False)
        if node is None or (OmegaConf.is_dict(node) and len(node) == 0):
            out.append(key)
    return out
