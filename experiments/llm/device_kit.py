"""A device kit: run_llm.py experiments in time-limited GPU calls.

The device tool (its README and KINDS.md) gives each command at most 10 minutes, a
task **15 minutes** of device time in all (starts, idle waits and closes included), a
64 MiB carry of ignored paths, and brings back at
most 8 files of 16 MiB (2 folders deep) from $OUT. Its image runs Python 3.12, torch 2.11
and transformers 5.17 without trl, datasets, dill or multiprocess, and reaches no
network. So:

1. Here, once (network to PyPI): the wheels the image lacks, for its Python::

       python experiments/llm/device_kit.py wheels      # -> experiments/llm/.kit/wheels (git-ignored)

2. On the device, every call (carry ``experiments/llm/.kit``)::

       python experiments/llm/device_kit.py run --budget_s 480 -- \\
           --config experiments/llm/recipes/grpo_norm_llama25m.yaml --seeds 0

   installs the wheels when trl is missing (``pip install --no-index``), runs
   ``run_llm.py`` with the arguments after ``--`` plus ``--save_total_limit 1`` (one
   checkpoint per run) and ``--time_budget_s`` (stop after the step that passes the
   budget, with a checkpoint; start no further run), under ``--state`` (default
   ``/tmp/exchange-kit``, outside $OUT, kept while the machine stays warm), then writes
   ``$OUT/runs.tar.gz`` (every run's small files: metrics.jsonl, init.json, config.json,
   env.json, done.json, wall.json and experiment.json; no checkpoint, no warm start) and
   ``$OUT/kit.json`` (steps done per run). The next call with the same arguments resumes.
   A checkpoint of a 25M model is about 290 MB, too large to come back: a run resumes only
   on the same warm machine, so plan runs that finish within one session.

   Or, the one command a 15-minute task can afford (issue 42)::

       python experiments/llm/device_kit.py campaign --budget_s 480 -- \
           --config experiments/llm/recipes/grpo_norm_llama25m.yaml

   does timing + pilot + as many test seeds as fit in **one call of at most 8 minutes**:
   the pilot (when ``pilot.json`` is not frozen yet) and the first test seed, timed from
   their run files (``done.json``'s ``wall_s``), then the further test seeds one at a time
   while the measured time of one seed fits in what is left of ``--budget_s``; returns
   the same ``runs.tar.gz`` and a ``kit.json`` with the timing and the seeds done. Its
   CPU dry run (tiny model, 2 steps) is tests/lab/test_device_kit.py's slow test.

3. Here, after each call::

       python experiments/llm/device_kit.py merge --into runs/llm FILES_AT/runs.tar.gz

   unpacks the run files over ``runs/llm`` and merges ``experiment.json`` (the union of
   the seeds every call ran), for ``python -m exchange experiment report``.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
KIT = HERE / ".kit"
WHEELS = KIT / "wheels"
# What the device image lacks (the device tool's KINDS.md; issue 32), at constraints.txt's pins.
MISSING = ("trl", "datasets", "dill", "multiprocess")
RUN_FILES = ("metrics.jsonl", "init.json", "config.json", "env.json", "done.json", "wall.json", "experiment.json")
RETURN_LIMIT = 16 * 2**20  # one returned file


def _pins() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        name, _, version = line.partition("==")
        if version:
            pins[name.strip().lower()] = version.split(";")[0].strip()
    return pins


def wheels(dest: Path = WHEELS, python_version: str = "3.12") -> list[Path]:
    """``pip download`` the packages the image lacks, for its Python, without their
    dependencies (the image has the rest)."""
    pins = _pins()
    specs = [f"{name}=={pins[name]}" if name in pins else name for name in MISSING]
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    "--python-version", python_version, "--dest", str(dest), *specs], check=True)
    files = sorted(dest.glob("*.whl"))
    total = sum(f.stat().st_size for f in files)
    print(f"[kit] {len(files)} wheels, {total / 2**20:.1f} MiB in {dest}")
    return files


def ensure_stack(wheel_dir: Path = WHEELS) -> None:
    """Install the carried wheels when trl is not importable (the device image)."""
    if importlib.util.find_spec("trl") is not None:
        return
    found = sorted(wheel_dir.glob("*.whl")) if wheel_dir.is_dir() else []
    if not found:
        raise SystemExit(f"[kit] trl is not installed and {wheel_dir} has no wheels: run `device_kit.py wheels` "
                         "here and carry experiments/llm/.kit")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", *map(str, found)], check=True)


def _run_llm():
    spec = importlib.util.spec_from_file_location("run_llm", HERE / "run_llm.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["run_llm"] = module  # its dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def pack(runs: Path, archive: Path) -> dict:
    """Write the small run files under ``runs`` to ``archive`` (tar.gz); return the status
    of every run: ``{"<experiment>/<arm>/seed<k>": {"steps": n, "done": bool}}``."""
    status: dict[str, dict] = {}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(runs.rglob("*")):
            rel = path.relative_to(runs)
            if not path.is_file() or path.name not in RUN_FILES or any(
                    p.startswith("checkpoint-") or p == "_sft" for p in rel.parts):
                continue
            tar.add(path, arcname=str(rel))
            if path.name == "metrics.jsonl":
                rows = sum(1 for line in path.read_text().splitlines() if line.strip())
                status[str(rel.parent)] = {"steps": rows, "done": (path.parent / "done.json").exists()}
    data = buffer.getvalue()
    if len(data) > RETURN_LIMIT:
        raise SystemExit(f"[kit] {archive.name} is {len(data) / 2**20:.1f} MiB, over the 16 MiB a returned file may be")
    archive.parent.mkdir(parents=True, exist_ok=True)
    tmp = archive.with_suffix(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, archive)
    return status


def run(run_llm_args: list[str], *, budget_s: float, state: Path, out: Path) -> int:
    """One device call: resume or start the runs, stop within ``budget_s``, return the files."""
    t0 = time.time()
    ensure_stack()
    runs = state / "runs"
    argv = [*run_llm_args, "--out", str(runs), "--save_total_limit", "1", "--time_budget_s", str(budget_s)]
    code = _run_llm().main(argv)
    status = pack(runs, out / "runs.tar.gz")
    checkpoints = {str(p.parent.relative_to(runs)): p.name for p in runs.rglob("checkpoint-*") if p.is_dir()}
    report = {"exit": code, "wall_s": round(time.time() - t0, 1), "budget_s": budget_s, "runs": status,
              "checkpoints": checkpoints, "argv": run_llm_args,
              "archive_bytes": (out / "runs.tar.gz").stat().st_size}
    (out / "kit.json").write_text(json.dumps(report, indent=2))
    print(f"[kit] {json.dumps(report)}", flush=True)
    return code


def _seed_wall(runs: Path, seed: int) -> float:
    """Summed ``wall_s`` of every finished run of test seed ``seed`` under ``runs``
    (``<experiment>/<arm>/seed<k>/done.json``; the pilot's runs are under ``pilot/``)."""
    total = 0.0
    for done in runs.glob(f"*/*/seed{seed}/done.json"):
        total += float(json.loads(done.read_text()).get("wall_s", 0.0))
    return total


def campaign(run_llm_args: list[str], *, budget_s: float, state: Path, out: Path) -> int:
    """Timing + pilot + as many test seeds as fit in ``budget_s`` (one device call).

    The first ``run_llm`` call trains the pilot (if not frozen) and the first test seed
    under the whole budget; the wall time of that seed (all its arms, from ``done.json``)
    is the measured cost of one seed; every further seed starts only while that cost fits
    in what is left (a seed that would not finish is not started: its checkpoints could
    not come back). The files come back as with :func:`run`."""
    t0 = time.time()
    ensure_stack()
    mod = _run_llm()
    _, _, cfg = mod.parse(run_llm_args)
    seeds = list(cfg.seeds)
    runs = state / "runs"
    base = [*run_llm_args, "--out", str(runs), "--save_total_limit", "1"]
    done, code, per_seed = [], 0, None
    for seed in seeds:
        left = budget_s - (time.time() - t0)
        if left <= 0 or (per_seed is not None and per_seed > left):
            break
        code = mod.main([*base, "--seeds", str(seed), "--time_budget_s", str(left)])
        if code != 0 or not all((runs / cfg.name / a.name / f"seed{seed}" / "done.json").exists() for a in cfg.arms):
            break
        done.append(seed)
        if per_seed is None:
            per_seed = _seed_wall(runs, seed)
    status = pack(runs, out / "runs.tar.gz")
    report = {"exit": code, "wall_s": round(time.time() - t0, 1), "budget_s": budget_s, "seeds_done": done,
              "seconds_per_seed": per_seed, "seeds_left": [s for s in seeds if s not in done],
              "pilot_frozen": (runs / cfg.name / "pilot.json").exists(), "runs": status, "argv": run_llm_args,
              "archive_bytes": (out / "runs.tar.gz").stat().st_size}
    (out / "kit.json").write_text(json.dumps(report, indent=2))
    print(f"[kit] {json.dumps(report)}", flush=True)
    return code


def merge(archives: list[Path], into: Path) -> None:
    """Unpack each archive (in the order given) over ``into``; ``experiment.json`` keeps
    the union of the seeds of every archive."""
    into.mkdir(parents=True, exist_ok=True)
    for archive in archives:
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar.getmembers():
                target = (into / member.name).resolve()
                if not member.isfile() or into.resolve() not in target.parents:
                    continue  # only plain files inside `into`
                data = tar.extractfile(member).read()
                if target.name == "experiment.json" and target.exists():
                    new, old = json.loads(data), json.loads(target.read_text())
                    new["seeds"] = sorted(set(new.get("seeds", [])) | set(old.get("seeds", [])))
                    data = json.dumps(new, indent=2).encode()
                target.parent.mkdir(parents=True, exist_ok=True)
                tmp = target.with_suffix(target.suffix + ".tmp")
                tmp.write_bytes(data)
                os.replace(tmp, target)
    print(f"[kit] merged {len(archives)} archive(s) into {into}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in argv:
        argv, rest = argv[: argv.index("--")], argv[argv.index("--") + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("wheels", help="pip download the wheels the device image lacks")
    w.add_argument("--dest", type=Path, default=WHEELS)
    r = sub.add_parser("run", help="one device call: run_llm.py arguments after --")
    r.add_argument("--budget_s", type=float, default=480.0, help="stop training after this (default 480 of the 600 s cap)")
    r.add_argument("--state", type=Path, default=Path("/tmp/exchange-kit"), help="runs and checkpoints (not $OUT)")
    r.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "kit-out")), help="returned files ($OUT)")
    c = sub.add_parser("campaign", help="timing + pilot + as many test seeds as fit in one call (run_llm args after --)")
    c.add_argument("--budget_s", type=float, default=480.0, help="the call's training budget (default 480 s = 8 min)")
    c.add_argument("--state", type=Path, default=Path("/tmp/exchange-kit"), help="runs and checkpoints (not $OUT)")
    c.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "kit-out")), help="returned files ($OUT)")
    m = sub.add_parser("merge", help="unpack returned archives into a run root")
    m.add_argument("archives", nargs="+", type=Path)
    m.add_argument("--into", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "wheels":
        wheels(args.dest)
        return 0
    if args.command in ("run", "campaign"):
        if not rest:
            parser.error(f"{args.command} needs run_llm.py arguments after --")
        fn = run if args.command == "run" else campaign
        return fn(rest, budget_s=args.budget_s, state=args.state, out=args.out)
    merge(args.archives, args.into)
    return 0


if __name__ == "__main__":
    sys.exit(main())
