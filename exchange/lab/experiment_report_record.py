"""What produced one dose of a dose series, recorded in its ``experiment.json``.

``experiments/dose_response.py`` trains variants of a base config (``--dose
"reuse4:train.epochs=4"``). Without a record, a dose's report could name neither the
config nor the override that made it (issue 42: the M1 doses printed ``experiment run
CONFIG`` and the base config's "reuse 2x2"). :class:`DoseRecord` is that record: written
by the script as ``variant`` next to ``source`` (the base config), read by the report for
the dose's reproduce line (:attr:`DoseRecord.train_command`) and description
(:meth:`DoseRecord.describe`), and by :mod:`exchange.lab.experiment_report_series` to tie
doses to their base config.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

__all__ = ["SCRIPT", "DoseRecord", "flat_config"]

SCRIPT = "experiments/dose_response.py"
_NOT_CONFIG = ("name", "description", "source", "variant")
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
