"""Run every (seed, arm) of a paired experiment, resumably.

Layout under ``out_root / config.name``::

    experiment.json            the validated config
    _sft/sft-<key>.pt          one warm start per seed, shared by both arms
    <arm name>/seed<k>/        one run directory (see exchange.lab.trainer.train_run)

Runs already finished (``done.json``) are skipped; interrupted ones resume.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch

from exchange.lab.config import ExperimentConfig, RunConfig
from exchange.lab.runlog import RunLock, atomic_write_text
from exchange.lab.tasks import get_task
from exchange.lab.trainer import train_run, warm_started_policy

__all__ = ["run_dir", "run_experiment", "write_experiment_json"]


def run_dir(out_root: str | Path, run: RunConfig) -> Path:
    """``out_root / experiment / arm / seed<k>``."""
    return Path(out_root) / run.experiment / run.arm.name / f"seed{run.seed}"


def _die_with_parent() -> None:
    """Worker initializer: on Linux, the kernel kills the worker when its parent dies
    (``PR_SET_PDEATHSIG``), so a ``kill -9`` of ``experiment run`` leaves no worker
    training. Elsewhere the run-directory lock still refuses a resume while one runs."""
    import ctypes
    import signal
    import sys

    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        except OSError:
            pass


def _one(args: tuple[RunConfig, str, bool]) -> str:
    run, out_root, progress = args
    torch.set_num_threads(1)
    exp_dir = Path(out_root) / run.experiment
    return str(train_run(run, run_dir(out_root, run), sft_cache=exp_dir / "_sft", progress=progress))


def run_experiment(cfg: ExperimentConfig, out_root: str | Path = "runs", *, jobs: int = 1,
                   progress: bool = True, source: str | None = None) -> Path:
    """Train all ``len(seeds) * 2`` runs of ``cfg``; returns the experiment directory.

    ``jobs > 1`` trains that many runs at once in worker processes (one thread each).
    ``source`` (the config's path) is recorded for the report's reproduce lines.
    """
    exp_dir = Path(out_root) / cfg.name
    exp_dir.mkdir(parents=True, exist_ok=True)
    with RunLock(exp_dir):  # two `experiment run` on one --out: the second is refused
        _run_locked(cfg, exp_dir, out_root, jobs, progress, source)
    return exp_dir


def write_experiment_json(cfg: ExperimentConfig, exp_dir: str | Path, source: str | None = None,
                          **extra: Any) -> Path:
    """``exp_dir/experiment.json``: the validated config (plus ``source`` and ``extra``),
    what ``exchange experiment report`` reads to find the arms, seeds and step count."""
    path = Path(exp_dir) / "experiment.json"
    atomic_write_text(path, json.dumps({**dataclasses.asdict(cfg), "source": source, **extra}, indent=2))
    return path


def _run_locked(cfg, exp_dir, out_root, jobs, progress, source) -> None:
    write_experiment_json(cfg, exp_dir, source)
    work = [(run, str(out_root), progress) for run in cfg.runs()]
    if jobs <= 1:
        torch.set_num_threads(1)
        for item in work:
            _one(item)
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        # Warm starts first (one per seed), so two arms never both build the same one.
        torch.set_num_threads(1)
        for run in cfg.runs()[:: len(cfg.arms)]:
            warm_started_policy(run, get_task(run.task.name, run.task.max_filler, run.task.style_p), exp_dir / "_sft")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn"),
                                 initializer=_die_with_parent) as pool:
            list(pool.map(_one, work))
