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
from exchange.core.distribution import installed_version
from exchange.errors import InvalidArgument

__all__ = ["atomic_write_text", "atomic_write_bytes", "atomic_torch_save", "MetricsLog", "read_metrics", "check_steps",
           "RunLock", "RunDir", "environment", "record_environment", "finish_run"]


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


# ------------------------------------------------------------ run integrity
def check_steps(rows: list[dict[str, Any]], expected: int | None = None, where: str = "") -> None:
    """Raise :class:`~exchange.errors.InvalidArgument` unless the rows' steps are exactly
    ``0, 1, ..., n-1`` (no duplicate, no gap, in order) and, with ``expected``, ``n ==
    expected``. A corrupted log (two writers, a worker that outlived its parent) is
    refused, never silently averaged."""
    from collections import Counter

    steps = [r.get("step") for r in rows]
    dup = sorted(s for s, c in Counter(steps).items() if c > 1)
    if dup:
        raise InvalidArgument(
            f"metrics of {where or 'a run'} have duplicate steps {dup[:5]} ({len(steps)} rows, {len(dup)} duplicated); "
            "two writers trained this run. Delete the run directory and run it again."
        )
    if steps != list(range(len(steps))):
        missing = sorted(set(range(max(steps, default=-1) + 1)) - set(steps))
        raise InvalidArgument(
            f"metrics of {where or 'a run'} have missing or out-of-order steps (missing {missing[:5]}); "
            "delete the run directory and run it again."
        )
    if expected is not None and len(steps) != expected:
        raise InvalidArgument(f"metrics of {where or 'a run'} have {len(steps)} steps, expected {expected}.")


class RunLock:
    """An exclusive, non-blocking ``flock`` on ``dir/.lock`` held while a run trains.

    A second trainer of the same directory (a concurrent ``experiment run``, or a resume
    while an orphaned worker still trains) is refused with the holder's pid. The kernel
    releases the lock when the holder dies, so a killed run never leaves a stale lock.
    """

    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / ".lock"
        self._fh = None

    def __enter__(self) -> "RunLock":
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "?"
            fh.close()
            raise InvalidArgument(
                f"run_dir={str(self.path.parent)!r} is locked by pid {holder}: another process is training it. "
                "Wait for it or stop that process (by its pid) before resuming."
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self._fh = fh
        return self

    def __exit__(self, *exc) -> None:
        import fcntl

        if self._fh is not None:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


def environment() -> dict[str, Any]:
    """What a run's numbers depend on beyond its config: library and CPU stack.

    Runs are bit-identical only when all of this matches (same torch build, CPU model
    and thread count); across machines they agree only statistically."""
    import platform
    import sys

    import numpy

    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    pkg = installed_version() or "unknown"  # None: a source tree never installed
    return {
        "torch": torch.__version__, "numpy": numpy.__version__, "python": sys.version.split()[0],
        "platform": platform.platform(), "cpu": cpu, "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(), "exchange": pkg,
    }


def record_environment(out_dir: str | Path, from_step: int, **extra: Any) -> None:
    """Append this process's :func:`environment` (and ``extra``) to ``out_dir/env.json``,
    one entry per (re)start, tagged with the step it starts from."""
    path = Path(out_dir) / "env.json"
    envs = json.loads(path.read_text()) if path.exists() else []
    atomic_write_text(path, json.dumps(envs + [{"from_step": from_step, **environment(), **extra}], indent=2))


def finish_run(out_dir: str | Path, steps: int, **fields: Any) -> dict[str, Any]:
    """Check that ``metrics.jsonl`` has exactly steps ``0..steps-1`` and write
    ``done.json`` (``steps``, ``wall_s`` rounded, and ``fields``): what marks a run
    finished for ``experiment run`` and ``experiment report``."""
    out_dir = Path(out_dir)
    rows = read_metrics(out_dir / "metrics.jsonl")
    check_steps(rows, steps, str(out_dir))
    done = {**fields, "steps": len(rows)}
    if "wall_s" in done:
        done["wall_s"] = round(float(done["wall_s"]), 3)
    atomic_write_text(out_dir / "done.json", json.dumps(done))
    return done


class RunDir:
    """One run directory: its fingerprint (``config.json``), lock, ``done.json`` and resume.

    The one owner of a run directory's life cycle, for the CPU trainer and the TRL run
    alike::

        with RunDir(out, fingerprint, config=cfg_dict, lock=is_main) as rd:
            if rd.finished(steps):      # done at exactly `steps`: nothing to do
                return out
            ...train, resuming from the directory's checkpoint...
            rd.finish(steps, wall_s=...)

    On entry it takes the lock (:class:`RunLock`; ``lock=False`` for the non-main processes
    of a distributed run, which never write), refuses a directory whose ``config.json``
    holds another fingerprint, and writes ``config.json`` when ``config`` is given and none
    exists. :meth:`finished` reads ``done.json``: equal steps (log checked) -> True; more
    -> refused; fewer -> ``done.json`` removed so the run extends from its checkpoint.
    """

    def __init__(self, path: str | Path, fingerprint: str, *, config: dict[str, Any] | None = None,
                 lock: bool = True) -> None:
        self.path = Path(path)
        self.fingerprint = fingerprint
        self._config = config
        self._lock = RunLock(self.path) if lock else None

    def __enter__(self) -> "RunDir":
        self.path.mkdir(parents=True, exist_ok=True)
        if self._lock is not None:
            self._lock.__enter__()
        try:
            cfg = self.path / "config.json"
            old = json.loads(cfg.read_text()).get("fingerprint") if cfg.exists() else None
            if old is not None and old != self.fingerprint:
                raise InvalidArgument(
                    f"run_dir={str(self.path)!r} holds a run of another config (fingerprint={old}, this one "
                    f"{self.fingerprint}); delete the directory or choose another --out."
                )
            if old is None and self._config is not None:
                self.write_config(**self._config)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self._lock is not None:
            self._lock.__exit__(*exc)

    def write_config(self, **fields: Any) -> None:
        """``config.json`` = ``{"fingerprint": ..., **fields}`` (atomic)."""
        atomic_write_text(self.path / "config.json", json.dumps({"fingerprint": self.fingerprint, **fields}, indent=2))

    def finished(self, steps: int) -> bool:
        """Whether the run is done at exactly ``steps`` (see the class)."""
        done_path = self.path / "done.json"
        if not done_path.exists():
            return False
        done = json.loads(done_path.read_text())
        if done["steps"] == steps:
            check_steps(read_metrics(self.path / "metrics.jsonl"), steps, str(self.path))
            return True
        if done["steps"] > steps:
            raise InvalidArgument(
                f"run_dir={str(self.path)!r} already has {done['steps']} steps, more than steps={steps}; "
                "raise the step count or choose another --out."
            )
        if self._lock is not None:  # only the writer removes it
            done_path.unlink()  # extended: resume from the last checkpoint
        return False

    def finish(self, steps: int, **fields: Any) -> dict[str, Any]:
        """:func:`finish_run`: check the log has steps ``0..steps-1`` and write ``done.json``."""
        return finish_run(self.path, steps, fingerprint=self.fingerprint, **fields)
