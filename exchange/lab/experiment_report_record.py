"""What produced a run, recorded in its ``experiment.json``: one dose of a dose series
(:class:`DoseRecord`), or an ``exchange experiment run`` with ``--seeds``/``--steps``
(:class:`RunRecord`).

``experiments/dose_response.py`` trains variants of a base config (``--dose
"reuse4:train.epochs=4"``). Without a record, a dose's report could name neither the
config nor the override that made it (issue 42: the M1 doses printed ``experiment run
CONFIG`` and the base config's "reuse 2x2"). :class:`DoseRecord` is that record: written
by the script as ``variant`` next to ``source`` (the base config), read by the report for
the dose's reproduce line (:attr:`DoseRecord.train_command`) and description
(:meth:`DoseRecord.describe`), and by :mod:`exchange.lab.experiment_report_series` to tie
doses to their base config.

``exchange experiment run CONFIG --seeds 0 1 --steps 5`` trains a config that is not the
file's: without a record its reproduce line named only CONFIG, which retrains the file's
seeds and steps. :class:`RunRecord` reads the overrides that the CLI records
(``run_overrides``) into the reproduce line, and refuses the line when experiment.json is
not the config file with those overrides (a run trained before they were recorded, or a
config edited since).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

__all__ = ["NO_REPRODUCE", "RUN_OVERRIDES", "SCRIPT", "DoseRecord", "RunRecord", "flat_config"]

SCRIPT = "experiments/dose_response.py"
NO_REPRODUCE = "none: "
"""How a reproduce cell starts when no command would retrain the run (then the reason)."""
RUN_OVERRIDES = "run_overrides"
"""experiment.json's key for ``exchange experiment run``'s ``--seeds``/``--steps``."""
_NOT_CONFIG = ("name", "description", "source", "variant", RUN_OVERRIDES)
"""experiment.json keys that are not the training config: a dose changes its name; its
description is the base config's (:meth:`DoseRecord.describe` says the dose)."""


def flat_config(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"train.epochs": 4, "arms.gspo.params.eps_low": 0.2, ...}`` (arms keyed by name)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if not prefix and k in _NOT_CONFIG:
            continue
        if k == "arms" and isinstance(v, list):
            v = {a["name"]: a for a in v}
        if isinstance(v, dict):
            out.update(flat_config(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _plain(cfg: Any) -> dict[str, Any]:
    """A config dataclass as experiment.json holds it (tuples as lists)."""
    return json.loads(json.dumps(dataclasses.asdict(cfg)))


@dataclass(frozen=True)
class DoseRecord:
    """What produced one dose of a series (``experiment.json``'s ``variant``; its ``source``
    is :attr:`config`): the base config, the dose's label and overrides (``--dose
    label:overrides``), every config value the dose changed ``{dotted key: [base, dose]}``
    (``None``: absent, e.g. an arm left out by ``--pathway-only``), the script's arguments
    that decide the runs (``--jobs`` does not) and its ``--out``."""

    config: str
    label: str
    overrides: str
    changed: dict[str, list]
    argv: tuple[str, ...]
    out: str

    @classmethod
    def of(cls, base: Any, dose: Any, *, config: str, label: str, overrides: str, argv: list[str],
           out: str) -> DoseRecord:
        """The record of ``dose`` (an ExperimentConfig) as a variant of ``base``."""
        b, d = flat_config(_plain(base)), flat_config(_plain(dose))
        changed = {k: [b.get(k), d.get(k)] for k in sorted(set(b) | set(d)) if b.get(k) != d.get(k)}
        return cls(config, label, overrides, changed, tuple(argv), out)

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> DoseRecord | None:
        v = meta.get("variant")
        if v is None:
            return None
        return cls(v["config"], v["label"], v["overrides"], v["changed"], tuple(v["argv"]), v["out"])

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config, "label": self.label, "overrides": self.overrides, "changed": self.changed,
                "argv": list(self.argv), "out": self.out}

    @property
    def train_command(self) -> str:
        """The call that trained this dose (and the other doses of that call)."""
        return f"python {SCRIPT} {shlex.join(self.argv)}"

    def run_dir(self, name: str) -> str:
        return str(PurePosixPath(self.out) / name)

    @property
    def change(self) -> str:
        """``train.epochs = 4 (base 2)``, one item per changed value."""
        return ", ".join(f"{k} = {_value(new)} (base {_value(old)})" for k, (old, new) in self.changed.items()) \
            or "no change"

    def describe(self, base_description: str) -> str:
        return (f"Dose `{self.label}` of `{self.config}` (`{SCRIPT}`): {self.change}. The base config's description "
                f"(its values, not this dose's): {base_description.strip()}")

    def base_config(self, meta: dict[str, Any]) -> dict[str, Any]:
        """The base config's flat values, rebuilt from this dose's ``meta``."""
        out = flat_config(meta)
        for k, (old, _) in self.changed.items():
            if old is None:
                out.pop(k, None)
            else:
                out[k] = old
        return out


def _value(v: Any) -> str:
    return "absent" if v is None else json.dumps(v)


@dataclass(frozen=True)
class RunRecord:
    """What ``exchange experiment run`` trained: ``config`` (experiment.json's ``source``;
    ``None`` when not recorded) and the ``--seeds``/``--steps`` it overrode (``None``: the
    file's). :meth:`refusal` says why the reproduce line would not retrain this run."""

    config: str | None
    seeds: tuple[int, ...] | None = None
    steps: int | None = None

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> RunRecord:
        o = meta.get(RUN_OVERRIDES) or {}
        return cls(meta.get("source"), None if o.get("seeds") is None else tuple(o["seeds"]), o.get("steps"))

    def to_dict(self) -> dict[str, Any]:
        """experiment.json's ``run_overrides`` (the config is its ``source``)."""
        return {"seeds": None if self.seeds is None else list(self.seeds), "steps": self.steps}

    @property
    def train_command(self) -> str:
        cmd = f"python -m exchange experiment run {self.config or 'CONFIG'}"
        if self.seeds is not None:
            cmd += " --seeds " + " ".join(str(s) for s in self.seeds)
        if self.steps is not None:
            cmd += f" --steps {self.steps}"
        return cmd

    def refusal(self, meta: dict[str, Any], root: str | None = None) -> str | None:
        """``None`` when :attr:`train_command` retrains ``meta``'s config: the config file
        (relative to the working directory, else to ``root``) loads and, with the recorded
        overrides, has every value that ``meta`` records; otherwise the reason. Values the
        file has and ``meta`` lacks are fields added to the config after the run (their
        defaults), not a difference. A config that cannot be read cannot be checked: the
        reason says so."""
        from pathlib import Path

        from exchange.errors import InvalidArgument
        from exchange.lab.config import load_experiment

        if not self.config:
            return "experiment.json records no config (source)"
        path = Path(self.config)
        if not path.is_file() and root is not None and (Path(root) / path).is_file():
            path = Path(root) / path
        try:
            cfg = load_experiment(path)
        except InvalidArgument as err:
            return f"{self.config} does not load here ({err})"
        if self.seeds is not None:
            cfg = dataclasses.replace(cfg, seeds=self.seeds)
        if self.steps is not None:
            cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, steps=self.steps))
        want, have = flat_config(_plain(cfg)), flat_config(meta)
        diff = [k for k in sorted(have) if k in want and want[k] != have[k]]
        if not diff:
            return None
        shown = ", ".join(f"{k} = {_value(have[k])} (the command gives {_value(want[k])})" for k in diff[:3])
        return (f"experiment.json is not {self.config}"
                + ("" if self.seeds is None and self.steps is None else " with its recorded overrides")
                + f": {shown}{' ...' if len(diff) > 3 else ''} (trained with --seeds/--steps before they were "
                  "recorded, or the config changed since)")
