"""Benchmark: parameter-space learning tax three ways, on one model and rollout.

1. fast: ``learning_tax`` (one forward and one masked backward pass for the update,
   one more on the causal cut for the shared part) plus ``kl_prediction`` (one JVP, one
   forward per eta) -- what a harness logs every step;
2. vmap: ``per_occurrence_grads`` (torch.func vjp + vmap over occurrences), then the
   same tax from the stacked rows;
3. loop: one forward and one backward per occurrence (the naive oracle), same tax.

Each path runs in its own spawned process (fresh peak-memory counter, getrusage
ru_maxrss) after a warm-up call (torch.func's first call imports ~800 modules).
Prints wall times, ratios and peak RSS, and checks the three taxes agree.

    python benchmarks/paramspace.py [--prompts 2] [--G 8] [--max-new 96] [--d-model 64]

The speed-up of the fast path grows with the response length (the loop costs one
forward and backward per token, the fast path a fixed handful per batch). With
``--write-docs`` the run writes its figures into docs/performance.md
(``paramspace:cost``, benchmarks/_page.py), with the date, commit and machine.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _page import Provenance, add_flag, table, write_section  # noqa: E402


def _setup(args, small: bool = False):
    import torch

    from exchange.models import TinyLM, TinyLMConfig
    from exchange.objectives import resolve
    from exchange.paramspace import sample_rollout

    torch.set_num_threads(1)
    cfg = TinyLMConfig(vocab_size=32, d_model=args.d_model, n_heads=4, n_layers=args.layers, n_positions=128, seed=0)
    model = TinyLM(cfg).double()
    prompts = [[1 + b, 2 + b] for b in range(1 if small else args.prompts)]
    rollout = sample_rollout(
        model, prompts, G=2 if small else args.G, min_new_tokens=1,
        max_new_tokens=2 if small else args.max_new, response_prefix=[5, 6], seed=0,
    )
    return model, resolve("grpo"), rollout


def _tax_from_rows(occ, kappa, shared_mask):
    """||sum_{shared} kappa g_occ|| / ||sum kappa g_occ|| from stacked per-occurrence rows."""
    w = occ.weighted(kappa)  # [M, D]
    in_shared = shared_mask[occ.rows, occ.positions]
    return float(w[in_shared].sum(0).norm() / w.sum(0).norm())


def _path(name: str, args) -> dict:
    import torch

    from exchange.core.coefficients import token_coefficients
    from exchange.models import response_logprobs
    from exchange.paramspace import (
        kl_prediction,
        learning_tax,
        per_occurrence_grads,
        per_occurrence_grads_loop,
        zero_credit_occurrences,
    )

    def run(model, loss_fn, rollout):
        if name == "fast":
            tax = learning_tax(model, loss_fn, rollout)
            kl_prediction(model, rollout, tax.residual, etas=[0.01 / max(tax.update_norm, 1e-30)])
            return tax.shared_tax
        with torch.no_grad():
            kappa = token_coefficients(loss_fn, response_logprobs(model, rollout), rollout)
        shared = zero_credit_occurrences(rollout).shared
        if name == "vmap":
            occ = per_occurrence_grads(model, rollout, chunk_size=args.chunk)
        else:
            occ = per_occurrence_grads_loop(model, rollout)
        return _tax_from_rows(occ, kappa, shared)

    run(*_setup(args, small=True))  # warm-up: lazy imports, allocator
    model, loss_fn, rollout = _setup(args)
    start = time.perf_counter()
    tax = run(model, loss_fn, rollout)
    seconds = time.perf_counter() - start
    return {
        "path": name,
        "seconds": seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "shared_tax": tax,
        "occurrences": int(rollout.mask.sum()),
        "N": rollout.n,
        "T": int(rollout.tokens.shape[1]),
        "params": sum(p.numel() for p in model.parameters()),
    }


def _baseline(args) -> dict:
    _path_setup_only = _setup(args)
    del _path_setup_only
    return {"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--G", type=int, default=8)
    p.add_argument("--max-new", type=int, default=96)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--chunk", type=int, default=64, help="vmap chunk size")
    add_flag(p)
    args = p.parse_args(argv)
    prov = Provenance(None if argv is None else [sys.argv[0], *argv])

    ctx = mp.get_context("spawn")
    results = {}
    with ctx.Pool(1, maxtasksperchild=1) as pool:
        base = pool.apply(_baseline, (args,))
    for name in ("fast", "vmap", "loop"):
        with ctx.Pool(1, maxtasksperchild=1) as pool:
            results[name] = pool.apply(_path, (name, args))

    r = results["fast"]
    print(f"model: TinyLM d_model={args.d_model} layers={args.layers} params={r['params']}; "
          f"rollout N={r['N']} T={r['T']} occurrences={r['occurrences']} (grpo, shared prefix)")
    print(f"baseline process (torch + model + rollout) peak RSS: {base['peak_rss_mb']:.0f} MB")
    print(f"{'path':<6} {'seconds':>9} {'peak RSS MB':>12} {'shared tax':>14}")
    for name, res in results.items():
        print(f"{name:<6} {res['seconds']:>9.4f} {res['peak_rss_mb']:>12.0f} {res['shared_tax']:>14.10f}")
    loop = results["loop"]["seconds"]
    print(f"speed-up over the loop: fast (masked backward + JVP) {loop / results['fast']['seconds']:.1f}x, "
          f"vmap {loop / results['vmap']['seconds']:.1f}x (goal for fast: >= 50x)")
    taxes = [res["shared_tax"] for res in results.values()]
    spread = max(taxes) - min(taxes)
    print(f"the three paths agree on the shared tax to {spread:.2e}")
    if args.write_docs:
        body = (f"The learning tax three ways on one TinyLM (d_model {args.d_model}, {args.layers} layers, "
                f"{r['params']} parameters) and one grpo rollout with a shared prefix (N={r['N']}, T={r['T']}, "
                f"{r['occurrences']} occurrences), each path in its own process after a warm-up call; wall seconds "
                f"(they move with the machine's load) and peak RSS (the bare process: "
                f"{base['peak_rss_mb']:.0f} MB).\n\n"
                + table(["path", "seconds", "peak RSS MB", "speed-up over the loop"],
                        [[f"`{name}`", f"{res['seconds']:.3f}", f"{res['peak_rss_mb']:.0f}",
                          f"{loop / res['seconds']:.1f}x"] for name, res in results.items()])
                + f"\n\nThe three paths agree on the shared tax to {spread:.1e} (goal for `fast`: 50x or more).")
        write_section("paramspace", "cost", body, prov)
    return 0 if spread <= 1e-9 * max(abs(t) for t in taxes) + 1e-15 else 1


if __name__ == "__main__":
    sys.exit(main())
