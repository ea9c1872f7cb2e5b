"""Checker speed, measured in one run, interleaved, on one thread (no timed assertions
anywhere in the tests). Prints:

1. per objective: property evaluations (configurations) per CPU second of ``check``, and
   the per-example Hypothesis path (``check(..., fuzzer="per_example")``, the pre-bulk
   checker) on the same objective, interleaved: its time, the speed-up, and whether the
   verdicts agree;
2. one bulk batch against plain autograd of the same configurations, scaling in G and L
   (CPU time, the two interleaved);
3. event keys against autograd: ``cases.build`` and ``events()`` against one
   ``token_coefficients`` of the same batch, scaling in G and in L;
4. ``exchange.inspect`` on a real-size batch (N=128, T=4096, float64) against the
   coefficients alone;
5. wall time of ``exchange audit --max-examples N`` (the 20 built-in families) and of
   ``exchange audit --variants --max-examples N`` for ``--audit N ...`` (default 10, the
   documented audit, and 200);
6. with ``--baseline DIR``: ``check`` of every objective in subprocesses, alternating
   between an earlier ``exchange/`` package under DIR (for example
   ``git archive <commit> exchange | tar -x -C DIR``; ``--baseline-name <commit>`` names it
   on the page) and this tree, ``--rounds`` times each, in CPU seconds of the process (one
   torch thread; far less sensitive to other jobs on the machine than wall time); prints
   the best time of each side, their ratio, whether the verdicts (every property, regime
   and mechanism) agree, and the example counts; ``--shares`` adds the share of this
   tree's time spent in the float64 twin's mode, the float64 floor and the loss/twin
   comparison (each measured by taking it out, interleaved with the rest).

With ``--write-docs`` each part also writes its results as a markdown table into its own
section of docs/performance.md (``checker_speed:check``, ``:bulk``, ``:event-keys``,
``:inspect``, ``:audit``, ``:baseline``; benchmarks/_page.py), with the date, commit,
machine and this command line; without it the run only prints.

    python benchmarks/checker_speed.py [--max-examples 200] [--audit 10 200] [--no-plain]
        [--baseline DIR [--baseline-name NAME] [--shares]] [--only SECTION ...] [--write-docs]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _page import Provenance, add_flag, table, write_section  # noqa: E402

SCRIPT = "checker_speed"


def _best(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _best_cpu(fns, repeat: int = 7, budget: float = 0.05) -> list[float]:
    """Best CPU seconds of one call of each of ``fns``, interleaved: each round times every
    function in turn, each over enough calls to take about ``budget`` seconds (a 10 ms
    call timed once is at the mercy of the scheduler on a shared machine)."""
    for fn in fns:
        fn()  # warm-up: first-call costs (imports, vmap's tracing caches) are not the steady state
    calls = []
    for fn in fns:
        t0 = time.process_time()
        fn()
        calls.append(max(1, round(budget / max(time.process_time() - t0, 1e-6))))
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, (fn, n) in enumerate(zip(fns, calls)):
            t0 = time.process_time()
            for _ in range(n):
                fn()
            best[i] = min(best[i], (time.process_time() - t0) / n)
    return best


def checker_throughput(max_examples: int, plain: bool = True) -> str:
    """``check`` per objective: property evaluations (configurations) per CPU second;
    ``plain``: the per-example Hypothesis path (``check(..., fuzzer="per_example")``)
    interleaved with it, for the speed-up and the verdicts. Returns the markdown."""
    from exchange import check
    from exchange.objectives import get

    print(f"1. check(max_examples={max_examples}), one thread, CPU seconds of this process (other jobs on the machine"
          " inflate wall time)" + ("; per-example = the Hypothesis-only path, interleaved" if plain else ""))
    print(f"{'objective':<12}{'evals':>7}{'check s':>9}{'evals/s':>9}"
          + (f"{'per-ex s':>9}{'per-ex ev/s':>12}{'speed-up':>9}{'same verdicts':>14}" if plain else ""))
    rows = []
    for name in _OBJECTIVES:
        fn = get(name).bind()
        t0 = time.process_time()
        report = check(fn, max_examples=max_examples, seed=0)
        t_check = time.process_time() - t0
        examples = sum(r.examples for r in report.results.values())
        line = f"{name:<12}{examples:>7}{t_check:>9.2f}{examples / t_check:>9.0f}"
        rows.append([name, examples, f"{t_check:.2f}", f"{examples / t_check:,.0f}"])
        if plain:
            t0 = time.process_time()
            old = check(fn, max_examples=max_examples, seed=0, fuzzer="per_example")
            t_old = time.process_time() - t0
            old_examples = sum(r.examples for r in old.results.values())
            same = {k: v.holds for k, v in old.results.items()} == {k: v.holds for k, v in report.results.items()}
            line += f"{t_old:>9.2f}{old_examples / t_old:>12.0f}{t_old / t_check:>8.1f}x{str(same):>14}"
            rows[-1] += [f"{t_old:.2f}", f"{old_examples / t_old:,.0f}", f"{t_old / t_check:.1f}x", same]
        print(line)
    headers = ["objective", "evaluations", "check CPU s", "evaluations / CPU s"]
    if plain:
        headers += ["per-example CPU s", "per-example evaluations / CPU s", "speed-up", "same verdicts"]
    return (f"`check(fn, max_examples={max_examples}, seed=0)` per objective, one torch thread, in CPU seconds of the"
            " process (other jobs on the machine inflate wall time); evaluations are property evaluations"
            " (configurations), probes and shrinking included"
            + ("; per-example is the Hypothesis-only path (`fuzzer=\"per_example\"`), interleaved, and"
               " \"same verdicts\" compares every property and regime." if plain else
               " (`--no-plain`: the per-example path was not run).")
            + "\n\n" + table(headers, rows))


def bulk_scaling() -> str:
    """One bulk batch (8 configurations of one layout, (C) off-policy) against plain
    autograd of the same 8 configurations, scaling in G and L."""
    import random

    from exchange.checker import bulk
    from exchange.checker.cases import Case, GroupConfig, build
    from exchange.checker.draw import RandomDraw
    from exchange.checker.examples import Example, Layout
    from exchange.checker.properties import PROPERTIES
    from exchange.core.coefficients import token_coefficients
    from exchange.objectives import get

    fn = get("dapo").bind()
    prop = PROPERTIES["shared_cancellation"]
    k = 8
    print(f"\n2. bulk evaluation of {k} configurations of one layout ((C), off-policy, dapo; best of 7, CPU time,"
          " interleaved) vs plain autograd of each")
    print(f"{'G':>4}{'L':>6}{'bulk ms':>9}{'per config us':>15}{'autograd ms':>12}{'bulk/autograd':>14}")
    rows = []
    for g, length in ((2, 8), (8, 8), (32, 8), (8, 32), (8, 128), (8, 512)):
        rng = torch.Generator().manual_seed(g * 1000 + length)
        prefix = tuple(torch.randint(0, 4, (length // 4,), generator=rng).tolist())
        responses = tuple(prefix + tuple(torch.randint(0, 4, (length - len(prefix),), generator=rng).tolist()) for _ in range(g))
        case = Case(groups=(GroupConfig(responses, (0.0,) * g),), off_policy=True)
        lay = Layout(Example(case), (("binary", "continuous", "tied"),), (False,))
        seeds = list(range(k))
        rewards = bulk.draw_rewards(RandomDraw(random.Random(0)), k, lay)
        rollouts = [build(lay.complete(rewards[j], s).case) for j, s in enumerate(seeds)]
        t_bulk, t_ad = _best_cpu([lambda: bulk.evaluate(fn, prop, lay, seeds, rewards),
                                  lambda: [token_coefficients(fn, r.logprobs, r) for r in rollouts]])
        print(f"{g:>4}{length:>6}{t_bulk * 1e3:>9.1f}{t_bulk / k * 1e6:>15.0f}{t_ad * 1e3:>12.1f}{t_bulk / t_ad:>13.2f}x")
        rows.append([g, length, f"{t_bulk * 1e3:.1f}", f"{t_bulk / k * 1e6:.0f}", f"{t_ad * 1e3:.1f}", f"{t_bulk / t_ad:.2f}x"])
    return (f"One bulk evaluation of {k} configurations of one layout ((C) off-policy, dapo) against plain autograd"
            " of each of the same configurations; best of 7, CPU time of the process, the two interleaved.\n\n"
            + table(["G", "L", "bulk ms", "per configuration us", "autograd ms", "bulk / autograd"], rows, "rrrrrr"))


def _case(groups: int, g: int, length: int):
    from exchange.checker.cases import Case, GroupConfig

    out = []
    for k in range(groups):
        base = tuple((7 * k + t) % 97 for t in range(length))
        responses = tuple(base[: length // 4] + tuple((i * 31 + t) % 97 for t in range(length - length // 4)) for i in range(g))
        out.append(GroupConfig(responses=responses, rewards=tuple(float(i % 2) for i in range(g))))
    return Case(groups=tuple(out), off_policy=True, seed=0)


def event_keys() -> str:
    from exchange.checker.cases import build
    from exchange.core.coefficients import token_coefficients
    from exchange.core.events import events
    from exchange.objectives import get

    fn = get("dapo").bind()
    print("\n3. event keys vs autograd (one group, shared prefix L/4; best of 3)")
    print(f"{'G':>4}{'L':>6}{'build ms':>10}{'events ms':>10}{'autograd ms':>12}{'build/autograd':>15}{'events/autograd':>16}")
    rows = []
    for g, length in ((2, 256), (8, 256), (32, 256), (8, 64), (8, 1024), (8, 4096)):
        case = _case(1, g, length)
        r = build(case)
        t_build = _best(lambda: build(case))
        t_ev = _best(lambda: events(r))
        t_ad = _best(lambda: token_coefficients(fn, r.logprobs, r))
        print(f"{g:>4}{length:>6}{t_build * 1e3:>10.1f}{t_ev * 1e3:>10.1f}{t_ad * 1e3:>12.1f}"
              f"{t_build / t_ad:>14.1f}x{t_ev / t_ad:>15.1f}x")
        rows.append([g, length, f"{t_build * 1e3:.1f}", f"{t_ev * 1e3:.1f}", f"{t_ad * 1e3:.1f}",
                     f"{t_build / t_ad:.1f}x", f"{t_ev / t_ad:.1f}x"])
    return ("Event keys against autograd: `cases.build` (the case's event-key hash, exchange/checker/event_hash.py)"
            " and `events()` against one `token_coefficients` call (dapo) of the same batch; one group of G"
            " responses of L tokens sharing a prefix of L/4; best of 3, wall time.\n\n"
            + table(["G", "L", "build ms", "events ms", "autograd ms", "build / autograd", "events / autograd"], rows,
                    "rrrrrrr"))


def real_batch() -> str:
    from exchange import Rollout
    from exchange.checker.batch_analysis import inspect
    from exchange.core.coefficients import token_coefficients
    from exchange.core.events import events
    from exchange.objectives import get

    n, g, t, shared = 128, 8, 4096, 64
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 32000, (n, t), generator=gen)
    tokens[:, :shared] = tokens[::g, :shared].repeat_interleave(g, 0)
    lengths = torch.randint(t // 2, t + 1, (n,), generator=gen)
    mask = torch.arange(t)[None] < lengths[:, None]
    old = -torch.rand(n, t, generator=gen, dtype=torch.float64) * 3
    old[:, :shared] = old[::g, :shared].repeat_interleave(g, 0)
    cur = (old + 0.1 * torch.randn(n, t, generator=gen, dtype=torch.float64)).clamp(max=0)
    cur[:, :shared] = cur[::g, :shared].repeat_interleave(g, 0)
    z = torch.zeros((), dtype=torch.float64)
    r = Rollout(tokens=torch.where(mask, tokens, 0), mask=mask, rewards=torch.randint(0, 2, (n,), generator=gen).double(),
                group=torch.arange(n) // g, old_logprobs=torch.where(mask, old, z), logprobs=torch.where(mask, cur, z))
    print(f"\n4. real batch N={n} T={t} float64 ({int(mask.sum())} tokens), best of 3")
    print(f"{'objective':<10}{'inspect ms':>11}{'coefficients ms':>16}{'events ms':>10}{'inspect/coefficients':>21}")
    rows = []
    for name in ("grpo", "dapo", "gspo", "cispo"):
        fn = get(name).bind()
        inspect(fn, r)
        t_in = _best(lambda: inspect(fn, r))
        t_co = _best(lambda: token_coefficients(fn, r.logprobs, r))
        t_ev = _best(lambda: events(r))
        print(f"{name:<10}{t_in * 1e3:>11.0f}{t_co * 1e3:>16.0f}{t_ev * 1e3:>10.0f}{t_in / t_co:>20.1f}x")
        rows.append([name, f"{t_in * 1e3:.0f}", f"{t_co * 1e3:.0f}", f"{t_ev * 1e3:.0f}", f"{t_in / t_co:.1f}x"])
    return (f"`exchange.inspect` on a real-size batch: N={n} responses in groups of {g}, T={t}, float64,"
            f" {int(mask.sum()):,} tokens, a shared prefix of {shared}; against one `token_coefficients` call and"
            " `events()` alone; best of 3, wall time.\n\n"
            + table(["objective", "inspect ms", "coefficients ms", "events ms", "inspect / coefficients"], rows))


def audit(max_examples: int) -> list[list[object]]:
    """Wall and CPU time of ``exchange audit`` (the 20 built-in families, the issue's
    target set) and of ``exchange audit --variants`` (46 rows) at ``max_examples``; returns
    the table rows."""
    import resource

    rows = []
    for extra in ([], ["--variants"]):
        cmd = [sys.executable, "-m", "exchange", "audit", *extra, "--max-examples", str(max_examples)]
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
        print(f"\n5. {' '.join(cmd[1:])} (2 worker processes): {wall:.1f} s wall, {cpu:.1f} s CPU of all its processes")
        rows.append([f"`exchange {' '.join(cmd[3:])}`", max_examples, f"{wall:.1f}", f"{cpu:.1f}"])
    return rows


_SECTIONS = ("check", "bulk", "event-keys", "inspect", "audit", "baseline")
_OBJECTIVES = ("grpo", "dr_grpo", "dapo", "gspo", "cispo", "clip_cov")

_ONE_SIDE = """
import json, sys, time, torch
torch.set_num_threads(1)
from exchange import check
from exchange.objectives import get
ran = []  # a patch appends here when the part it takes out would have run
exec(sys.argv[2])  # a variant's patch (benchmarks only; empty for the package as it is)
out = {}
for name in sys.argv[3:]:
    fn = get(name).bind()
    before = len(ran)
    t0 = time.process_time(); rep = check(fn, max_examples=int(sys.argv[1]), seed=0); tc = time.process_time() - t0
    out[name] = dict(check=tc, examples=sum(r.examples for r in rep.results.values()), ran=len(ran) > before,
                     verdict=sorted((k[0], k[1], v.holds) for k, v in rep.results.items()),
                     mechanisms={str(k): sorted(v) for k, v in rep.mechanisms_by_regime.items()})
print(json.dumps(out))
"""


# Parts of this tree's check whose share of its time --shares measures: each runs the same
# check with one part taken out by a patch in the subprocess (benchmarks only; the share is
# 1 - that time / this tree's). On a float64 loss none of them changes a verdict (the table
# says whether they did): the mode rewrites nothing there, the floor only judges a residual
# the oracle already found above tolerance, and the comparison runs below float64 only.
_PARTS = {
    # the float64 twin's TorchFunctionMode (exchange/checker/twin.py): the loss called as is
    "twin mode": "from exchange.checker import twin\n"
                 "_call = twin.Float64Twin.__call__\n"
                 "twin.Float64Twin.__call__ = lambda self, lp, r: (self.loss_fn(lp, r) if self.target is torch.float64\n"
                 "                                                 else _call(self, lp, r))\n",
    # the float64 floor (float64_floor.floored): every oracle evaluation above tolerance
    "float64 floor": "from exchange.checker import twin_verdicts\n"
                     "twin_verdicts.floored = lambda prop, *a, **k: prop\n",
    # the real loss beside its twin (precision.PairedEngine, compare_on_layout): below float64
    # only; a check where it never runs has no share ("not run")
    "comparison": "from exchange.checker import twin_verdicts\n"
                  "twin_verdicts.PairedEngine = lambda twin, *a: ran.append(1) or twin\n"
                  "twin_verdicts.compare_on_layout = lambda *a, **k: None\n",
}
_RECORDED = {"comparison"}  # parts whose patch records whether they would have run


def _same(a: dict, b: dict) -> bool:
    return a["verdict"] == b["verdict"] and a["mechanisms"] == b["mechanisms"]


def against_baseline(baseline: str, max_examples: int, rounds: int, name: str | None = None,
                     shares: bool = False) -> str:
    """``check`` of each objective in subprocesses, alternating between the ``exchange/``
    under ``baseline`` and this tree: CPU seconds (best of ``rounds``), whether the
    verdicts (every property, regime and mechanism) agree, and the example counts (the
    event-key hash decides the configurations, so counts may differ between trees).
    ``name``: what the page calls the baseline (its commit), else its path. ``shares``:
    this tree also without each of :data:`_PARTS`, interleaved with the rest, for each
    part's share of this tree's time."""
    import json
    import os
    from pathlib import Path

    here = str(Path(__file__).resolve().parents[1])
    sides = {"baseline": (os.path.abspath(baseline), ""), "this tree": (here, "")}
    if shares:
        sides.update({f"no {part}": (here, patch) for part, patch in _PARTS.items()})
    runs: dict[str, list[dict]] = {k: [] for k in sides}
    for rnd in range(rounds):
        order = list(sides) if rnd % 2 == 0 else list(sides)[::-1]
        for label in order:
            path, patch = sides[label]
            env = dict(os.environ, PYTHONPATH=path)
            out = subprocess.run([sys.executable, "-c", _ONE_SIDE, str(max_examples), patch, *_OBJECTIVES], env=env,
                                 capture_output=True, text=True, cwd="/")
            if out.returncode != 0:
                raise SystemExit(f"{label} ({path}) failed:\n{out.stderr[-2000:]}")
            runs[label].append(json.loads(out.stdout.strip().splitlines()[-1]))
    label = name or baseline
    best = {side: {obj: min((r[obj] for r in runs[side]), key=lambda x: x["check"]) for obj in _OBJECTIVES}
            for side in sides}
    parts = [p for p in _PARTS if shares]
    print(f"\n6. check(max_examples={max_examples}) vs {label}: {rounds} interleaved rounds, best CPU time of each")
    print(f"{'objective':<10}{'base s':>8}{'new s':>8}{'new/base':>9}{'base ex':>9}{'new ex':>8}  same verdicts"
          + "".join(f"  {p} share" for p in parts) + ("  noise" if parts else ""))
    total = {side: sum(best[side][obj]["check"] for obj in _OBJECTIVES) for side in sides}

    def share(part: str, obj: str | None) -> str:
        if part in _RECORDED and not any(r[o]["ran"] for r in runs[f"no {part}"] for o in ([obj] if obj else _OBJECTIVES)):
            return "0 (not run)"
        this = best["this tree"][obj]["check"] if obj else total["this tree"]
        without = best[f"no {part}"][obj]["check"] if obj else total[f"no {part}"]
        same = all(_same(best[f"no {part}"][o], best["this tree"][o]) for o in ([obj] if obj else _OBJECTIVES))
        return f"{1 - without / this:.0%}" + ("" if same else " (verdicts differ)")

    def noise(obj: str | None) -> list[str]:
        """This tree's slowest round over its fastest, less 1: what a share is read against."""
        times = [r[obj]["check"] if obj else sum(r[o]["check"] for o in _OBJECTIVES) for r in runs["this tree"]]
        return [f"{max(times) / min(times) - 1:.0%}"] if parts else []

    rows = []
    for obj in _OBJECTIVES:
        b, n = best["baseline"][obj], best["this tree"][obj]
        same = _same(b, n)
        print(f"{obj:<10}{b['check']:>8.2f}{n['check']:>8.2f}{n['check'] / b['check']:>8.2f}x"
              f"{b['examples']:>9}{n['examples']:>8}  {str(same):<13}" + "".join(f"  {share(p, obj):>{len(p) + 6}}"
                                                                          for p in parts)
              + "".join(f"  {x:>5}" for x in noise(obj)))
        rows.append([obj, f"{b['check']:.2f}", f"{n['check']:.2f}", f"{n['check'] / b['check']:.2f}x", b["examples"],
                     n["examples"], same, *(share(p, obj) for p in parts), *noise(obj)])
    ratio = total["this tree"] / total["baseline"]
    print(f"{'all':<10}{total['baseline']:>8.2f}{total['this tree']:>8.2f}{ratio:>8.2f}x{'':>17}{'':<13}"
          + "".join(f"  {share(p, None):>{len(p) + 6}}" for p in parts) + "".join(f"  {x:>5}" for x in noise(None)))
    rows.append(["**all**", f"{total['baseline']:.2f}", f"{total['this tree']:.2f}", f"**{ratio:.2f}x**", "", "", "",
                 *(share(p, None) for p in parts), *noise(None)])
    how = ("" if not shares else
           " Each share is 1 - (this tree's time with that part taken out) / (this tree's time), the runs"
           " interleaved with the rest: the twin's TorchFunctionMode (the loss called as is), the float64 floor"
           " (every oracle evaluation above tolerance judged against float64 round-off) and the loss compared"
           " with its twin (below float64 only: \"not run\" where no objective runs below it). \"noise\" is this"
           " tree's slowest round over its fastest, less 1: a share within it (or below 0) is not resolved.")
    return (f"`check(max_examples={max_examples})` of each objective in subprocesses, alternating between the"
            f" `exchange/` package of `{label}` and this tree, {rounds} interleaved rounds, best CPU time of each"
            " side (one torch thread); \"same verdicts\" compares every property, regime and mechanism. Example"
            " counts may differ between trees (the event-key hash decides the configurations)." + how + "\n\n"
            + table(["objective", "baseline CPU s", "this tree CPU s", "this / baseline", "baseline evaluations",
                     "this tree evaluations", "same verdicts", *(f"{p} share" for p in parts),
                     *(["noise"] if parts else [])], rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-examples", type=int, default=200)
    parser.add_argument("--audit", type=int, nargs="*", default=[10, 200], metavar="N",
                        help="time exchange audit [--variants] --max-examples N for each N (default: 10 200; none: skip)")
    parser.add_argument("--skip-check", action="store_true")
    parser.add_argument("--no-plain", action="store_true", help="skip the per-example (Hypothesis-only) comparison")
    parser.add_argument("--baseline", metavar="DIR", help="compare check() with the exchange/ package under DIR")
    parser.add_argument("--baseline-name", metavar="NAME",
                        help="what the page calls the baseline (e.g. the commit DIR was archived from)")
    parser.add_argument("--shares", action="store_true",
                        help="with --baseline: also each part's share of this tree's check time (twin mode, float64"
                             " floor, comparison), measured by taking it out")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", nargs="+", choices=_SECTIONS, metavar="SECTION",
                        help=f"run only these sections ({', '.join(_SECTIONS)}; baseline needs --baseline too)")
    add_flag(parser)
    args = parser.parse_args()
    prov = Provenance()

    def done(section: str, body: str) -> None:
        if args.write_docs:
            write_section(SCRIPT, section, body, prov)

    torch.set_num_threads(1)

    def wanted(section: str) -> bool:
        return args.only is None or section in args.only

    if not args.skip_check and wanted("check"):
        done("check", checker_throughput(args.max_examples, plain=not args.no_plain))
    if wanted("bulk"):
        done("bulk", bulk_scaling())
    if wanted("event-keys"):
        done("event-keys", event_keys())
    if wanted("inspect"):
        done("inspect", real_batch())
    rows = [row for n in args.audit for row in audit(n)] if wanted("audit") else []
    if rows:
        done("audit", "Wall time of `exchange audit` (the 20 built-in families) and `exchange audit --variants`,"
                      " 2 worker processes each, and the CPU time of all their processes.\n\n"
                      + table(["command", "examples per property and regime", "wall s", "CPU s"], rows))
    if args.baseline and wanted("baseline"):
        done("baseline", against_baseline(args.baseline, args.max_examples, args.rounds, args.baseline_name,
                                          args.shares))


if __name__ == "__main__":
    main()
