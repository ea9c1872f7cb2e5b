"""What the README's test command costs: the fast tier and the whole suite, timed.

Runs ``python -m pytest -q -m "not slow"`` and then ``python -m pytest -q`` (the README's
test command, what ``.ci/run`` runs) from the repository root, one after the other, and
prints for each the wall time, the CPU time of pytest and its children, and pytest's
summary line (passed, skipped, failed). Skips are listed by reason, counted: the tests of
an extra that is not installed, ``coqc``, and the ``cuda`` tests without a GPU.

    python benchmarks/suite_time.py [--fast-only] [--write-docs]

With ``--write-docs`` the figures go into docs/performance.md (``suite_time:tiers``,
benchmarks/_page.py), with the date, commit and machine. The project's budgets are 3
minutes for the fast tier and 12 for the whole suite on its 2-core CPU machine; this
script measures, it asserts nothing.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _page import Provenance, add_flag, table, write_section  # noqa: E402

TIERS = {"fast tier": ["-m", "not slow"], "whole suite": []}


def run_tier(extra: list[str]) -> dict:
    """One pytest run: wall and CPU seconds, the summary line, skips by reason."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider", *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = proc.stdout.strip().splitlines()
    summary = next((line.strip("= ") for line in reversed(lines) if re.search(r"\d+ (passed|failed)", line)), "?")
    skips = collections.Counter()
    for line in lines:
        m = re.match(r"SKIPPED \[(\d+)\] [^:]+:\d+: (.*)", line)
        if m:
            skips[m[2]] += int(m[1])
    return {"command": "python " + " ".join(cmd[1:]), "wall": wall, "cpu": cpu, "summary": summary,
            "skips": skips, "rc": proc.returncode}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fast-only", action="store_true", help="time the fast tier only")
    add_flag(p)
    args = p.parse_args(argv)
    prov = Provenance(None if argv is None else [sys.argv[0], *argv])
    tiers = {k: v for k, v in TIERS.items() if not (args.fast_only and k == "whole suite")}
    results = {}
    for name, extra in tiers.items():
        results[name] = r = run_tier(extra)
        print(f"{name}: {r['wall'] / 60:.1f} min wall, {r['cpu'] / 60:.1f} min CPU: {r['summary']} (exit {r['rc']})")
        for reason, n in r["skips"].most_common():
            print(f"  skipped {n}: {reason}")
    if args.write_docs:
        rows = [[name, f"{r['wall'] / 60:.1f}", f"{r['cpu'] / 60:.1f}", r["summary"], str(r["rc"])]
                for name, r in results.items()]
        last = results[list(results)[-1]]
        skips = "\n".join(f"- {n}: {reason}" for reason, n in last["skips"].most_common()) or "- none"
        body = ("The README's test command and its fast tier, run one after the other from the repository "
                "root in this checkout's environment; minutes of wall time and of CPU (pytest and its "
                "subprocesses). The project's budgets on its 2-core machine: 3 minutes for the fast tier, "
                "12 for the whole suite.\n\n"
                + table(["run", "wall min", "CPU min", "pytest's summary", "exit"], rows, align="lrrll")
                + f"\n\nSkipped in the {list(results)[-1]}, by reason:\n\n{skips}\n")
        write_section("suite_time", "tiers", body, prov)
    return max(r["rc"] for r in results.values())


if __name__ == "__main__":
    sys.exit(main())
