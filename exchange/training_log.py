"""The metrics of one training run, read from the file its engine wrote.

Three writers, one reader (:func:`read_training_log`):

- **TRL**: ``trainer_state.json`` (``{"log_history": [{"step": s, key: value, ...}, ...]}``),
  written into every ``checkpoint-N/`` folder and by ``Trainer.save_state()``; given a
  folder, the newest checkpoint's file is read (each holds the whole history so far);
- **verl**: the JSONL of ``verl.utils.tracking.FileLogger`` (``trainer.logger=[file]``), one
  ``{"step": s, "data": {key: value, ...}}`` per line;
- **the lab**: a run folder's ``metrics.jsonl`` (:mod:`exchange.lab.runlog`), one
  ``{"step": s, key: value, ...}`` per line.

Non-numeric values (strings, lists, booleans) are not series and are dropped; so is a
last JSONL line cut off mid-write (an interrupted run), which is reported in
:attr:`TrainingLog.notes`. Any other malformed line is an error naming the file and line.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exchange.errors import InvalidArgument

__all__ = ["TrainingLog", "read_training_log", "SOURCES"]

SOURCES = ("trl", "verl", "lab")
"""The writers :func:`read_training_log` recognises."""

_CHECKPOINT = re.compile(r"checkpoint-(\d+)$")


@dataclass(frozen=True)
class TrainingLog:
    """A run's metrics as series.

    Fields:
        source: the writer, one of :data:`SOURCES`.
        path: the file read.
        series: ``key -> ((step, value), ...)``, steps increasing, finite and non-finite
            values alike (a NaN logged is a NaN plotted as a gap).
        notes: what the reader dropped, in words (an empty tuple when nothing).
    """

    source: str
    path: Path
    series: dict[str, tuple[tuple[int, float], ...]]
    notes: tuple[str, ...] = field(default=())

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(sorted(self.series))


def _number(value: Any) -> float | None:
    """A loggable scalar as a float, or ``None`` for anything that is not one (bools are
    flags, not measurements)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _collect(rows: list[tuple[int, dict[str, Any]]]) -> dict[str, tuple[tuple[int, float], ...]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for step, metrics in rows:
        for key, value in metrics.items():
            x = _number(value)
            if x is not None and key != "step":
                out.setdefault(key, []).append((step, x))
    return {k: tuple(sorted(v, key=lambda p: p[0])) for k, v in out.items()}


def _step(row: dict[str, Any], where: str) -> int:
    step = row.get("step")
    if isinstance(step, bool) or not isinstance(step, (int, float)) or not math.isfinite(step):
        raise InvalidArgument(f"{where}: no numeric 'step' field (found {step!r}); every logged row needs its step.")
    return int(step)


def _trainer_state(path: Path) -> TrainingLog:
    try:
        state = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise InvalidArgument(f"{path}: not valid JSON ({err.msg} at line {err.lineno}).") from None
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise InvalidArgument(f"{path}: no 'log_history' list; expected TRL's trainer_state.json.")
    rows = [(_step(r, f"{path}: log_history[{i}]"), r) for i, r in enumerate(history) if isinstance(r, dict)]
    return TrainingLog("trl", path, _collect(rows))


def _jsonl(path: Path) -> TrainingLog:
    lines = path.read_text().splitlines()
    rows, notes, kinds = [], [], set()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            if n == len(lines):  # an interrupted writer leaves its last line cut off
                notes.append(f"line {n} was cut off mid-write and is left out")
                continue
            raise InvalidArgument(f"{path}:{n}: not valid JSON ({err.msg}).") from None
        if not isinstance(row, dict):
            raise InvalidArgument(f"{path}:{n}: a JSON object per line expected, found {type(row).__name__}.")
        verl = isinstance(row.get("data"), dict)  # FileLogger's {"step": s, "data": {...}}
        kinds.add("verl" if verl else "lab")
        rows.append((_step(row, f"{path}:{n}"), row["data"] if verl else row))
    if len(kinds) > 1:
        raise InvalidArgument(f"{path}: mixes verl FileLogger rows ({{'step', 'data'}}) with flat rows; one writer per file.")
    if not rows:
        raise InvalidArgument(f"{path}: no logged rows.")
    return TrainingLog(kinds.pop(), path, _collect(rows), tuple(notes))


def _in_folder(folder: Path) -> Path:
    """The file a run folder's metrics are in: ``metrics.jsonl`` (lab),
    ``trainer_state.json`` (TRL after ``save_state``) or the newest
    ``checkpoint-N/trainer_state.json``."""
    for name in ("metrics.jsonl", "trainer_state.json"):
        if (folder / name).is_file():
            return folder / name
    checkpoints = [(int(m.group(1)), p) for p in folder.iterdir()
                   if (m := _CHECKPOINT.match(p.name)) and (p / "trainer_state.json").is_file()]
    if checkpoints:
        return max(checkpoints)[1] / "trainer_state.json"
    raise InvalidArgument(f"{folder}: no metrics.jsonl, trainer_state.json or checkpoint-N/trainer_state.json; "
                          "give the file itself (a verl FileLogger .jsonl, TRL's trainer_state.json).")


def read_training_log(path: str | Path) -> TrainingLog:
    """Read the run at ``path`` (a file, or a run / output folder): see the module
    docstring for the formats. Raises :class:`~exchange.errors.InvalidArgument` naming
    the file (and line) when it is none of them."""
    p = Path(path)
    if not p.exists():
        raise InvalidArgument(f"RUN {str(path)!r} does not exist.")
    if p.is_dir():
        p = _in_folder(p)
    if p.suffix == ".json":
        return _trainer_state(p)
    if p.suffix == ".jsonl":
        return _jsonl(p)
    raise InvalidArgument(f"RUN {str(path)!r}: expected a .json (TRL trainer_state.json) or .jsonl "
                          "(verl FileLogger, lab metrics.jsonl) file, or a run folder.")
