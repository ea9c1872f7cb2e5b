"""Checker throughput, measured in one run (no timed assertions anywhere).

1. Coefficients for many same-shape configurations: the vmapped batch path
   (``token_coefficients_batched``) against a naive per-configuration autograd loop.
2. Configurations checked per second by ``exchange.check`` (probes + fuzz), per objective.
3. Wall time of ``exchange audit`` at its default settings.

    python benchmarks/audit_speed.py [--configs 256] [--skip-audit]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import torch


def coefficient_paths(n_configs: int) -> None:
    from exchange.checker.cases import build
    from exchange.core.coefficients import token_coefficients, token_coefficients_batched
    from exchange.checker.mutations import Mutation
    from exchange.objectives import get
    from exchange.checker.probes import PROBES

    base = PROBES[3].case  # equal-length group of 4
    cases = [Mutation("entropy", 0, i % 4, 0.1 + 0.01 * i).apply(base) for i in range(n_configs)]
    rollouts = [build(c) for c in cases]
    warm = get("dapo").bind()  # the first vmap call pays functorch's one-off set-up
    token_coefficients_batched(warm, [r.logprobs for r in rollouts[:4]], rollouts[:4])
    print(f"{'objective':<14}{'loop cfg/s':>12}{'vmap cfg/s':>12}{'vmap/loop':>11}  agree")
    for name in ("dapo", "grpo", "gspo", "cispo"):
        fn = get(name).bind()
        t0 = time.perf_counter()
        slow = [token_coefficients(fn, r.logprobs, r) for r in rollouts]
        t_loop = time.perf_counter() - t0
        t0 = time.perf_counter()
        fast = token_coefficients_batched(fn, [r.logprobs for r in rollouts], rollouts)
        t_vmap = time.perf_counter() - t0
        agree = all(torch.allclose(a, b, rtol=1e-10, atol=1e-14) for a, b in zip(fast, slow))
        print(f"{name:<14}{n_configs / t_loop:>12.0f}{n_configs / t_vmap:>12.0f}{t_loop / t_vmap:>10.2f}x  {agree}")


def check_throughput(max_examples: int) -> None:
    from exchange import check
    from exchange.objectives import get

    print(f"\nexchange.check, max_examples={max_examples}: configurations (backward passes) per second")
    for name in ("grpo", "dapo", "cispo", "rloo"):
        from exchange.core.coefficients import Engine

        calls = {"n": 0}
        original = Engine.__call__

        def counting(self, rollouts, _orig=original):
            calls["n"] += len(rollouts)
            return _orig(self, rollouts)

        Engine.__call__ = counting
        try:
            t0 = time.perf_counter()
            report = check(get(name).bind(), max_examples=max_examples, seed=0)
            dt = time.perf_counter() - t0
        finally:
            Engine.__call__ = original
        print(f"  {name:<10} {dt:6.1f} s  {calls['n']:6d} configs  {calls['n'] / dt:7.0f} cfg/s  broken={sorted({n for (n, _), r in report.results.items() if not r.holds})}")


def audit_wall_time() -> None:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "exchange", "audit", "--format", "json"], capture_output=True, text=True)
    dt = time.perf_counter() - t0
    print(f"\nexchange audit (defaults): {dt:.1f} s wall, exit {proc.returncode}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=256)
    parser.add_argument("--max-examples", type=int, default=50)
    parser.add_argument("--skip-audit", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    coefficient_paths(args.configs)
    check_throughput(args.max_examples)
    if not args.skip_audit:
        audit_wall_time()


if __name__ == "__main__":
    main()
