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
   env.json, done.json, wall.json, experiment.json and pilot.json; no checkpoint, no warm
   start, no recorded completions) and ``$OUT/kit.json`` (steps done per run). The next
   call with the same arguments resumes. A checkpoint of a 25M model is about 290 MB, too
   large to come back: a run resumes only on the same warm machine, so plan runs that
   finish within one session.

   Or, the one command a 15-minute task can afford (issue 42)::

       python experiments/llm/device_kit.py campaign --budget_s 480 -- \
           --config experiments/llm/recipes/grpo_norm_probe_dose_llama25m.yaml

   does timing + pilot + as many test seeds as fit in **one call of at most 8 minutes**:
   the pilot (when ``pilot.json`` is not frozen yet) and the first test seed in this
   process, timed; then the other test seeds in waves of parallel processes on the one
   device (``--parallel N``; default measured from the first seed's peak memory, the
   free device and host memory and the CPU cores: :func:`measure_parallel`), each wave
   only as large as fits in what is left of ``--budget_s`` (:func:`wave_size`); returns
   the same ``runs.tar.gz`` and a ``kit.json`` with the seeds done and every seed's
   timing. Its CPU dry run (tiny model, 2 steps, ``--parallel 2``) is
   tests/lab/test_device_kit.py's slow test.

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
RUN_FILES = ("metrics.jsonl", "init.json", "config.json", "env.json", "done.json", "wall.json", "experiment.json",
             "pilot.json")
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


def _small_files(root: Path):
    """``(path, path relative to root)`` of every small run file under ``root`` (a name in
    :data:`RUN_FILES`, outside checkpoints and warm starts): what comes back from the device."""
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_file() and path.name in RUN_FILES and not any(p.startswith("checkpoint-") or p == "_sft"
                                                                 for p in rel.parts):
            yield path, rel


def _cores() -> int:
    """The CPU cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def pack(runs: Path, archive: Path) -> dict:
    """Write the small run files under ``runs`` to ``archive`` (tar.gz); return the status
    of every run: ``{"<experiment>/<arm>/seed<k>": {"steps": n, "done": bool}}``."""
    status: dict[str, dict] = {}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path, rel in _small_files(runs):
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


CUDA_CONTEXT = 2**30
"""Device memory a process holds beyond what torch's allocator reports (its CUDA context,
cuBLAS workspaces): about 0.5 GiB on an H100/H200, counted as 1 GiB per process."""
MEMORY_SHARE = 0.9
"""The share of the free memory (device and host) the parallel seeds may plan to use."""


def _seeds_done(runs: Path, cfg, seed: int, arms: list[str] | None = None) -> bool:
    """Whether every arm (of ``arms``, when given: run_llm's ``--arms``) of test seed ``seed`` finished."""
    return all((runs / cfg.name / a.name / f"seed{seed}" / "done.json").exists()
               for a in cfg.arms if not arms or a.name in arms)


def _host_available() -> int:
    """Bytes of host memory available now (``MemAvailable``; else all physical memory)."""
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def measure_parallel() -> dict:
    """How many seeds can train at once, from this process's peaks (it has just trained
    one seed, and the pilot): ``n = min(cores, device_n, host_n)``, at least 1, where

    - ``cores``: the CPU cores this process may use (each seed process drives the device
      from one core and needs it for the task's verifier and the instruments);
    - ``device_n = floor(MEMORY_SHARE * free / (peak + CUDA_CONTEXT))``: ``peak`` is
      ``torch.cuda.max_memory_reserved`` of the seed just trained, ``free`` the device's
      free memory after this process released its cache (no device: no limit);
    - ``host_n = floor(MEMORY_SHARE * available / rss)``: ``rss`` this process's peak
      resident size (``ru_maxrss``), ``available`` the host's ``MemAvailable``."""
    import resource

    import torch

    cores = _cores()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    avail = _host_available()
    out = {"cores": cores, "host_peak_rss": rss, "host_available": avail,
           "host_n": max(1, int(MEMORY_SHARE * avail // max(rss, 1)))}
    n = min(cores, out["host_n"])
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
        peak = torch.cuda.max_memory_reserved()
        free, total = torch.cuda.mem_get_info()
        out.update(device_peak_reserved=peak, device_free=free, device_total=total,
                   device_n=max(1, int(MEMORY_SHARE * free // (peak + CUDA_CONTEXT))))
        n = min(n, out["device_n"])
    out["n"] = max(1, n)
    return out


def wave_size(todo: int, parallel: int, left: float, solo_s: float, last: tuple[int, float] | None,
              startup_s: float = 0.0) -> int:
    """How many seeds the next wave starts: the largest ``k <= min(parallel, todo)`` whose
    estimated wall time fits in ``left`` seconds (0: none; a seed that could not finish
    would leave checkpoints that cannot come back). The estimate of a wave of ``k``: before
    any wave, ``startup_s + k * solo_s`` (``solo_s``: one seed trained alone in a process
    that had started; ``startup_s``: a process's start, imports included, measured as this
    campaign's own; the bound when the ``k`` processes only take turns on the device);
    after a wave of ``k0`` seeds that took ``w`` seconds (``last``), ``w`` for ``k <= k0``
    and ``w * k / k0`` above."""
    def estimate(k: int) -> float:
        if last is None:
            return startup_s + k * solo_s
        k0, w = last
        return w if k <= k0 else w * k / k0

    k = min(parallel, todo)
    while k > 0 and estimate(k) > left:
        k -= 1
    return k


def _seed_start(runs: Path, cfg, t_call: float) -> float:
    """When the first test seed of a call that started at ``t_call`` started: when this
    call froze the pilot (``pilot.json`` is written just before the test seeds start),
    else the call's start."""
    pilot = runs / cfg.name / "pilot.json"
    return max(t_call, pilot.stat().st_mtime) if pilot.exists() else t_call


def _gather(root: Path, runs: Path) -> None:
    """Copy a seed process's small run files (``root/<experiment>/...``) into ``runs``,
    ``experiment.json`` keeping the union of the seeds."""
    for path, rel in _small_files(root):
        _place(runs, str(rel), path.read_bytes())


def _tail(log: Path, n: int = 3000) -> str:
    return log.read_text(errors="replace")[-n:] if log.exists() else ""


def campaign(run_llm_args: list[str], *, budget_s: float, state: Path, out: Path, parallel: int | None = None) -> int:
    """Timing + pilot + as many test seeds as fit in ``budget_s`` (one device call).

    1. In this process, ``run_llm`` trains the pilot (if ``pilot.json`` is not frozen yet)
       and the first test seed not done, under the whole budget, into ``STATE/runs``; that
       seed's wall time (from the pilot's freezing to the call's end) is ``solo_s``
       (``kit.json``: ``seconds_per_seed``; the pilot's, ``pilot_s``).
    2. ``parallel`` (default: :func:`measure_parallel`, from that call's peak memory, the
       free device and host memory and the CPU cores) seeds at most then train at once,
       in waves, each seed a separate ``run_llm.py`` process (one process per seed: common
       rollouts replay the baseline's completions in one process) with its own out root
       ``STATE/seeds/seed<k>`` (the frozen ``pilot.json`` copied in; a second run_llm on one
       out root is refused), ``OMP_NUM_THREADS`` = cores / wave size and
       ``--time_budget_s`` = what is left (a safety stop). A wave starts only as large as
       :func:`wave_size` says fits in what is left of ``budget_s``; the first seed that
       fails or does not finish stops the campaign after its wave.
    3. The seeds' run files are gathered into ``STATE/runs`` and returned as with
       :func:`run`: ``runs.tar.gz`` and ``kit.json`` (the seeds done and left, the timing
       of every seed: wave, processes at once, start, wall, exit, done; the parallel rule's
       measurements; a failed seed's log tail)."""
    t0 = time.time()
    ensure_stack()
    mod = _run_llm()
    script, _, cfg = mod.parse(run_llm_args)
    startup_s = time.time() - t0  # what a seed process pays before training: the imports (and here the wheels)
    seeds = list(script.seeds or cfg.seeds)
    runs = state / "runs"
    todo = [s for s in seeds if not _seeds_done(runs, cfg, s, script.arms)]
    timing: list[dict] = []
    code, solo_s, pilot_s, measured = 0, None, None, None
    if todo and budget_s - (time.time() - t0) > 0:
        first, t_call = todo[0], time.time()
        code = mod.main([*run_llm_args, "--out", str(runs), "--save_total_limit", "1", "--seeds", str(first),
                         "--time_budget_s", str(budget_s - (t_call - t0))])
        done = _seeds_done(runs, cfg, first, script.arms)
        start = _seed_start(runs, cfg, t_call)
        solo_s, pilot_s = time.time() - start, start - t_call
        timing.append({"seed": first, "wave": 0, "procs": 1, "start_s": round(start - t0, 1),
                       "wall_s": round(solo_s, 1), "exit": code, "done": done})
        if code == 0 and done:
            measured = measure_parallel()
    n = parallel if parallel is not None else (measured or {}).get("n", 1)
    rest = [s for s in todo if s not in [t["seed"] for t in timing]]
    last, wave = None, 0
    while measured is not None and rest:  # the first seed finished: the others, in waves
        k = wave_size(len(rest), n, budget_s - (time.time() - t0), solo_s, last, startup_s)
        if k == 0:
            break
        wave += 1
        batch, rest = rest[:k], rest[k:]
        results = _wave(run_llm_args, batch, runs, state, cfg, script.arms, budget_s - (time.time() - t0), t0,
                        wave)
        timing += results
        last = (k, max(r["wall_s"] for r in results))
        if not all(r["exit"] == 0 and r["done"] for r in results):
            code = next((r["exit"] for r in results if r["exit"] != 0), code)
            break
    status = pack(runs, out / "runs.tar.gz")
    done_seeds = [s for s in seeds if _seeds_done(runs, cfg, s, script.arms)]
    report = {"exit": code, "wall_s": round(time.time() - t0, 1), "budget_s": budget_s, "seeds_done": done_seeds,
              "seeds_left": [s for s in seeds if s not in done_seeds], "seconds_per_seed": solo_s,
              "pilot_s": pilot_s, "startup_s": round(startup_s, 1),
              "parallel": n, "parallel_measured": measured, "timing": timing,
              "pilot_frozen": (runs / cfg.name / "pilot.json").exists(), "runs": status, "argv": run_llm_args,
              "archive_bytes": (out / "runs.tar.gz").stat().st_size}
    (out / "kit.json").write_text(json.dumps(report, indent=2))
    print(f"[kit] {json.dumps(report)}", flush=True)
    return code


def _wave(run_llm_args: list[str], batch: list[int], runs: Path, state: Path, cfg, arms: list[str] | None,
          left: float, t0: float, wave: int) -> list[dict]:
    """Train the seeds of ``batch`` at once, one ``run_llm.py`` process each; gather their
    run files into ``runs``; return each seed's timing row."""
    cores = _cores()
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, cores // len(batch)))}
    procs = {}
    for seed in batch:
        root = state / "seeds" / f"seed{seed}"
        pilot = runs / cfg.name / "pilot.json"
        if pilot.exists():  # the frozen pilot: the seed process trains test runs only
            (root / cfg.name).mkdir(parents=True, exist_ok=True)
            (root / cfg.name / "pilot.json").write_bytes(pilot.read_bytes())
        log = state / "logs" / f"seed{seed}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, str(HERE / "run_llm.py"), *run_llm_args, "--out", str(root), "--save_total_limit", "1",
                "--seeds", str(seed), "--time_budget_s", str(left)]
        fh = open(log, "w")
        procs[seed] = (subprocess.Popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT), fh, log,
                       time.time(), root)
    rows = []
    for seed, (proc, fh, log, start, root) in procs.items():
        code = proc.wait()
        fh.close()
        _gather(root, runs)
        done = _seeds_done(runs, cfg, seed, arms)
        row = {"seed": seed, "wave": wave, "procs": len(batch), "start_s": round(start - t0, 1),
               "wall_s": round(time.time() - start, 1), "exit": code, "done": done}
        if code != 0 or not done:
            row["log_tail"] = _tail(log)
        rows.append(row)
    return rows


def _place(into: Path, name: str, data: bytes) -> None:
    """Write one returned file ``name`` (relative) under ``into``; ``experiment.json`` keeps
    the union of its seeds and the ones already there. Names outside ``into`` are skipped."""
    target = (into / name).resolve()
    if into.resolve() not in target.parents:
        return
    if target.name == "experiment.json" and target.exists():
        new, old = json.loads(data), json.loads(target.read_text())
        new["seeds"] = sorted(set(new.get("seeds", [])) | set(old.get("seeds", [])))
        data = json.dumps(new, indent=2).encode()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, target)


def merge(archives: list[Path], into: Path) -> None:
    """Unpack each archive (in the order given) over ``into``; ``experiment.json`` keeps
    the union of the seeds of every archive."""
    into.mkdir(parents=True, exist_ok=True)
    for archive in archives:
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar.getmembers():
                if member.isfile():  # only plain files inside `into`
                    _place(into, member.name, tar.extractfile(member).read())
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
    c.add_argument("--parallel", type=int, default=None,
                   help="seeds trained at once after the first, one process each (default: measured, measure_parallel)")
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
        if args.command == "run":
            return run(rest, budget_s=args.budget_s, state=args.state, out=args.out)
        if args.parallel is not None and args.parallel < 1:
            parser.error(f"--parallel={args.parallel}: give the number of seeds to train at once (>= 1), or leave it "
                         "out to measure it")
        return campaign(rest, budget_s=args.budget_s, state=args.state, out=args.out, parallel=args.parallel)
    merge(args.archives, args.into)
    return 0


if __name__ == "__main__":
    sys.exit(main())
