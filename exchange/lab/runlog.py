"""Crash-safe run files: atomic writes, an append-only metrics log, checkpoints.

A run killed at any instant (SIGKILL included) resumes with no lost or duplicated
step: the checkpoint is replaced atomically, and on resume the metrics log is cut back
to the checkpoint's step (dropping a half-written last line) and the lost steps are
recomputed deterministically from the restored generator states.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

__all__ = ["atomic_write_text", "atomic_write_bytes", "atomic_torch_save", "MetricsLog", "read_metrics"]


def _atomic(path: Path, write) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temp file and ``os.replace``."""
    _atomic(Path(path), lambda fh: fh.write(text.encode()))


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file and ``os.replace``."""
    _atomic(Path(path), lambda fh: fh.write(data))


def atomic_torch_save(obj: Any, path: str | Path) -> None:
    """``torch.save`` through a temp file and ``os.replace``."""
    _atomic(Path(path), lambda fh: torch.save(obj, fh))


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The complete rows of a JSONL metrics file (a torn last line is ignored)."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line cut by a kill: everything from here is recomputed
    return rows


class MetricsLog:
    """One JSON object per step, appended and flushed; ``truncate`` on resume."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def truncate(self, n_steps: int) -> None:
        """Keep the rows with ``step < n_steps`` (atomic rewrite)."""
        rows = [r for r in read_metrics(self.path) if r["step"] < n_steps]
        atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in rows))

    def append(self, row: dict[str, Any]) -> None:
        with open(self.path, "a") as fh:
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
