"""Run every (seed, arm) of a paired experiment, resumably.

Layout under ``out_root / config.name``::

    experiment.json            the validated config
    _sft/sft-<key>.pt          one warm start per seed, shared by both arms
    <arm name>/seed<k>/        one run directory (see exchange.lab.trainer.train_run)

    pilot/<arm name>/seed<k>/  the pilot's runs (config ``pilot_seeds``), then
    pilot.json                 the frozen prediction (exchange.lab.pilot), before any test seed

Runs already finished (``done.json``) are skipped; interrupted ones resume.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from exchange.errors import InvalidArgument
from exchange.lab.config import ExperimentConfig, RunConfig
from exchange.lab.pilot import SENSITIVITY_BONUS, ZERO_SPREAD_LIMIT, FrozenPilot, freeze, load_pilot
from exchange.lab.predictions import RunData, read_run
from exchange.lab.runlog import RunLock, atomic_write_text
from exchange.lab.trainer import train_run, warm_started_policy

__all__ = ["check_pilot", "freeze_runs", "pilot_runs", "pilot_then_test", "rollout_sources", "run_dir", "run_experiment",
           "run_pilot", "write_experiment_json"]


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


def _one(args: tuple[RunConfig, str, bool, str | None]) -> str:
    run, out_root, progress, source = args
    torch.set_num_threads(1)
    exp_dir = Path(out_root) / run.experiment
    return str(train_run(run, run_dir(out_root, run), sft_cache=exp_dir / "_sft", progress=progress,
                         rollouts_from=source))


def rollout_sources(runs: list[RunConfig], out_root) -> list[str | None]:
    """Per run, the baseline run directory it replays (``[train] common_rollouts``), else None.
    Both engines call it (this module's CPU harness and exchange.lab.llm_run)."""
    base = {(r.experiment, r.seed): run_dir(out_root, r) for r in runs if r.arm.role == "baseline"}
    out = []
    for r in runs:
        if not r.train.common_rollouts or r.arm.role == "baseline":
            out.append(None)
        elif (r.experiment, r.seed) not in base:
            raise InvalidArgument(f"[train] common_rollouts=true: experiment {r.experiment!r} seed {r.seed} has no "
                                  "baseline arm to sample the common rollouts.")
        else:
            out.append(str(base[(r.experiment, r.seed)]))
    return out


def pilot_runs(cfg: ExperimentConfig) -> list[RunConfig]:
    """The pilot's runs (experiment ``<name>/pilot``): every arm on ``pilot_seeds``, the
    baseline with the attribution instrument on, and per seed one baseline run with the
    S reward bonus (arm ``<baseline>+style_bonus``) for the certificate's sensitivity."""
    out = []
    for run in cfg.runs(cfg.pilot_seeds):
        run = dataclasses.replace(run, experiment=f"{cfg.name}/pilot")
        if run.arm.role == "dose":  # the pilot freezes baseline vs surgical; doses run with the test seeds
            continue
        if run.arm.role == "surgical" and run.task.probe_as_filler:  # issue 42: delta_hat along both arms' paths
            out.append(dataclasses.replace(run, train=dataclasses.replace(run.train, attribute=True)))
        elif run.arm.role == "baseline":
            out.append(dataclasses.replace(run, train=dataclasses.replace(run.train, attribute=True)))
            if run.task.forced_style:  # S in every response: a bonus for S injects no credit, nothing to certify
                continue
            bonus = dataclasses.replace(run.train, style_bonus=SENSITIVITY_BONUS)
            out.append(dataclasses.replace(run, arm=dataclasses.replace(run.arm, name=f"{run.arm.name}+style_bonus",
                                                                        role="sensitivity"), train=bonus))
        else:
            out.append(run)
    return out


def run_experiment(cfg: ExperimentConfig, out_root: str | Path = "runs", *, jobs: int = 1,
                   progress: bool = True, source: str | None = None, **extra: Any) -> Path:
    """Train all ``len(seeds) * 2`` runs of ``cfg``; returns the experiment directory.

    ``jobs > 1`` trains that many runs at once in worker processes (one thread each).
    ``source`` (the config's path) and ``extra`` (the CLI's overrides) are recorded in
    experiment.json for the report's reproduce lines.
    """
    exp_dir = Path(out_root) / cfg.name
    exp_dir.mkdir(parents=True, exist_ok=True)
    with RunLock(exp_dir):  # two `experiment run` on one --out: the second is refused
        _run_locked(cfg, exp_dir, out_root, jobs, progress, source, extra)
    return exp_dir


def write_experiment_json(cfg: ExperimentConfig, exp_dir: str | Path, source: str | None = None,
                          **extra: Any) -> Path:
    """``exp_dir/experiment.json``: the validated config (plus ``source`` and ``extra``),
    what ``exchange experiment report`` reads to find the arms, seeds and step count."""
    path = Path(exp_dir) / "experiment.json"
    atomic_write_text(path, json.dumps({**dataclasses.asdict(cfg), "source": source, **extra}, indent=2))
    return path


def _run_locked(cfg, exp_dir, out_root, jobs, progress, source, extra) -> None:
    write_experiment_json(cfg, exp_dir, source, **extra)

    def train(runs: list[RunConfig]) -> bool:
        _train_all(runs, out_root, jobs, progress)
        return True  # the CPU engine has no time budget: every run finishes

    pilot_then_test(cfg, out_root, train, cfg.runs())


def pilot_then_test(cfg: ExperimentConfig, out_root: str | Path, train: Callable[[list[RunConfig]], bool],
                    test_runs: list[RunConfig], *, writer: bool = True) -> bool:
    """Pilot, freeze, then test: the one orchestration of both engines (this module's CPU
    harness and the TRL run, exchange.lab.llm_run). ``train(runs)`` is the engine: it
    trains ``runs`` into their :func:`run_dir` (resumably) and returns whether every one
    finished (the TRL engine's time budget can stop it early). With ``pilot_seeds`` the
    pilot's runs (:func:`pilot_runs`) train first and are frozen into ``pilot.json``
    (:func:`freeze_runs`; ``writer`` False in a process that writes nothing) before any
    test seed; a frozen pilot is never recomputed, and one that refused the design raises
    (:func:`check_pilot`) before ``test_runs`` train. Returns whether ``test_runs`` finished
    (False also when the pilot did not)."""
    exp_dir = Path(out_root) / cfg.name
    if cfg.pilot_seeds and not (exp_dir / "pilot.json").exists():
        runs = pilot_runs(cfg)
        if not train(runs):
            return False  # stopped inside the pilot: the next call resumes it
        if writer:
            atomic_write_text(exp_dir / "pilot.json", freeze_runs(cfg, runs, out_root).to_json())
    if cfg.pilot_seeds:
        check_pilot(cfg, exp_dir)
    return train(test_runs)


def check_pilot(cfg: ExperimentConfig, exp_dir: str | Path) -> FrozenPilot:
    """The frozen ``exp_dir/pilot.json``; raises when the pilot refused the design (too
    many groups without reward spread): its test seeds must not run. The CPU harness and
    the TRL run (exchange.lab.llm_run) both call it."""
    path = Path(exp_dir) / "pilot.json"
    pilot = load_pilot(path)
    if pilot.refused:
        raise InvalidArgument(
            f"experiment {cfg.name!r}: the pilot refused the design: {100 * pilot.zero_spread:.0f}% of its groups "
            f"have zero reward spread (> {100 * ZERO_SPREAD_LIMIT:.0f}%); the test seeds do not run. Raise the "
            f"group size or choose a warm start at moderate accuracy ({path} has the pilot)."
        )
    return pilot


def run_pilot(cfg: ExperimentConfig, out_root: str | Path = "runs", *, jobs: int = 1,
              progress: bool = True) -> FrozenPilot:
    """Train the pilot's runs (:func:`pilot_runs`, resumable) and freeze them
    (:func:`exchange.lab.pilot.freeze`); writes nothing else. ``experiment run`` calls it
    before the test seeds and stores the result as ``pilot.json``; a lever study
    (experiments/levers.py) calls it on variants of a config."""
    if not cfg.pilot_seeds:
        raise InvalidArgument(f"experiment {cfg.name!r} has no pilot_seeds; add pilot_seeds = [...] to its config.")
    runs = pilot_runs(cfg)
    _train_all(runs, out_root, jobs, progress)
    return freeze_runs(cfg, runs, out_root)


def freeze_runs(cfg: ExperimentConfig, runs: list[RunConfig], out_root) -> FrozenPilot:
    """Freeze the finished pilot runs ``runs`` (:func:`pilot_runs`, under
    ``out_root/<name>/pilot/``) with :func:`exchange.lab.pilot.freeze`."""
    by_role: dict[str, dict[int, RunData]] = {}
    for run in runs:
        by_role.setdefault(run.arm.role, {})[run.seed] = read_run(run_dir(out_root, run))
    sens = by_role.pop("sensitivity", {})
    return freeze(cfg.name, by_role, sens, by_construction=cfg.task.forced_style)


def _train_all(runs: list[RunConfig], out_root, jobs: int, progress: bool) -> None:
    work = [(run, str(out_root), progress, src) for run, src in zip(runs, rollout_sources(runs, out_root))]
    # common rollouts: every baseline first (it samples and stores them), then the arms that replay them
    phases = [[w for w in work if w[3] is None], [w for w in work if w[3] is not None]]
    if jobs <= 1:
        torch.set_num_threads(1)
        for phase in phases:
            for item in phase:
                _one(item)
        return
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    # Warm starts first (one per seed), so two arms never both build the same one.
    torch.set_num_threads(1)
    seen = set()
    for run in runs:
        if run.sft_key() not in seen:
            seen.add(run.sft_key())
            warm_started_policy(run, run.task.build(),
                                Path(out_root) / run.experiment / "_sft")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn"),
                             initializer=_die_with_parent) as pool:
        for phase in phases:
            list(pool.map(_one, phase))
