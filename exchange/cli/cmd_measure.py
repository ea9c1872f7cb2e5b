"""``exchange measure``: parameter-space measurements on a built-in tiny model.

Samples a rollout from a tiny causal LM (TinyLM, or a random tiny HF Llama/Qwen2), then
runs the same functions a training harness calls (exchange.paramspace): the learning
tax, the token-space cancellation on output-embedding rows, the Prop. 3.1 KL check and,
with ``--similarity``, per-occurrence gradient cosines.
"""

from __future__ import annotations

import argparse
import json


MODELS = ("tiny", "llama", "qwen2")


from exchange.cli.options import add_group_size, add_json, add_params, add_targets


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "measure",
        help="learning tax, token-space cancellation and Prop. 3.1 KL on a tiny model",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_targets(p, many=False, default="grpo", help="catalog objective (default: grpo)", old="--objective")
    add_params(p)
    p.add_argument("--model", choices=MODELS, default="tiny", help="tiny = TinyLM; llama/qwen2 = random tiny HF model (needs transformers)")
    p.add_argument("--vocab", type=int, default=16, help="vocabulary size of the built-in model")
    p.add_argument("--seed", type=int, default=0, help="seed of the model, prompts, sampling and rewards")
    add_group_size(p, default=4, help="responses per prompt")
    p.add_argument("--prompts", type=int, default=2, help="number of prompts (groups)")
    p.add_argument("--prefix", type=int, default=2, help="forced shared answer-template tokens at the start of every response")
    p.add_argument("--min-new", type=int, default=1, help="fewest sampled tokens per response")
    p.add_argument("--max-new", type=int, default=8, help="most sampled tokens per response")
    p.add_argument("--weak", type=int, action="append", default=[], metavar="ID", help="token id with weak credit (repeatable)")
    p.add_argument("--tokens", type=int, nargs="*", default=None, metavar="ID", help="token ids for the head-row table (default: the 4 most frequent)")
    p.add_argument("--direction", choices=("residual", "update"), default="residual", help="step direction for the KL check")
    p.add_argument("--contexts", choices=("shared", "all"), default="shared", help="contexts whose KL is measured")
    p.add_argument("--steps", type=float, nargs="*", default=[0.25, 0.0625, 0.015625], metavar="S", help="step sizes eta as multiples of 1/||update||")
    p.add_argument("--similarity", action="store_true", help="also compute per-occurrence gradient cosines (vmap)")
    add_json(p)
    p.set_defaults(func=run)


def _model(args):
    import torch

    from exchange.models import TinyLM, TinyLMConfig, tiny_hf_model

    if args.vocab < 4:
        from exchange.errors import InvalidArgument

        raise InvalidArgument(f"--vocab={args.vocab} must be >= 4.")
    if args.model == "tiny":
        n_pos = max(64, 8 + args.prefix + args.max_new)
        return TinyLM(TinyLMConfig(vocab_size=args.vocab, n_positions=n_pos, seed=args.seed)).to(torch.float64)
    return tiny_hf_model(args.model, vocab_size=args.vocab, seed=args.seed)


def measure(args) -> dict:
    """Run every measurement; returns plain numbers (the JSON output)."""
    import torch

    from exchange.objectives import resolve
    from exchange.targets import parse_param_items
    from exchange.paramspace import (
        context_mask,
        kl_prediction,
        learning_tax,
        per_occurrence_grads,
        same_token_cosines,
        cosine_histogram,
        sample_rollout,
        token_space_cancellation,
    )

    torch.set_num_threads(1)
    loss_fn = resolve(args.target, **parse_param_items(args.param))
    model = _model(args)
    gen = torch.Generator().manual_seed(args.seed)
    if args.prompts < 1:
        from exchange.errors import InvalidArgument

        raise InvalidArgument(f"--prompts={args.prompts} must be >= 1.")
    prompts = [torch.randint(0, args.vocab, (int(torch.randint(1, 4, (1,), generator=gen)),), generator=gen).tolist() for _ in range(args.prompts)]
    prefix = torch.randint(0, args.vocab, (args.prefix,), generator=gen).tolist() if args.prefix > 0 else []
    rollout = sample_rollout(
        model, prompts, G=args.group_size, min_new_tokens=args.min_new, max_new_tokens=args.max_new,
        response_prefix=prefix, seed=args.seed,
    )
    tax = learning_tax(model, loss_fn, rollout, weak_token_ids=args.weak)
    out: dict = {
        "objective": args.target,
        "model": args.model,
        "rollout": {"N": rollout.n, "T": int(rollout.tokens.shape[1]), "groups": rollout.n_groups,
                    "lengths": rollout.lengths.tolist(), "rewards": rollout.rewards.tolist(), "prefix": prefix},
        "learning_tax": {k.split("/", 1)[1]: v for k, v in tax.to_dict().items()},
        "max_abs_shared_K": float(tax.shared_event_coefficients.abs().max()) if tax.n_shared_events else 0.0,
    }
    tokens = args.tokens
    if tokens is None:
        counts = torch.bincount(rollout.tokens[rollout.mask], minlength=args.vocab)
        tokens = counts.argsort(descending=True)[:4].tolist()
    out["token_space"] = [
        {"token": r.token_id, "n": r.n_occurrences, "update_norm": r.update_norm, "retained": r.retained, "own_retained": r.own_retained}
        for r in token_space_cancellation(model, loss_fn, rollout, tokens)
    ]
    contexts = args.contexts
    if contexts == "shared" and not context_mask(rollout, "shared").any():
        contexts = "all"  # no shared event in this rollout (e.g. --prefix 0)
    direction = tax.residual if args.direction == "residual" else tax.update
    if tax.update_norm > 0:
        etas = [s / tax.update_norm for s in args.steps]
        kl = kl_prediction(model, rollout, direction, etas=etas, contexts=contexts)
        out["kl"] = {"direction": args.direction, "contexts": contexts, "etas": etas,
                     "predicted": kl.predicted.tolist(), "measured": kl.measured.tolist()}
    if args.similarity:
        cos = same_token_cosines(per_occurrence_grads(model, rollout))
        counts, edges = cosine_histogram(cos, bins=10)
        out["similarity"] = {
            "per_token": {int(v): {"pairs": int(c.numel()), "mean_cosine": float(c.mean())} for v, c in cos.items()},
            "histogram": {"counts": counts.tolist(), "edges": edges.tolist()},
        }
    return out


def _fmt(x: float) -> str:
    return "nan" if x != x else f"{x:.4g}"


def _table(title: str):
    from rich.table import Table

    return Table(title=title, min_width=len(title) + 2)  # keep the title on one line


def _print_tables(out: dict) -> None:
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # pipes and captures default to 80 columns: titles would wrap
        console = Console(width=110)
    r = out["rollout"]
    console.print(f"[bold]exchange measure[/] objective={out['objective']} model={out['model']} "
                  f"N={r['N']} T={r['T']} groups={r['groups']} shared prefix={r['prefix']} lengths={r['lengths']}")
    t = _table("Learning tax: share of the update on zero-credit occurrences")
    lt = out["learning_tax"]
    for col in ("tax", "shared", "weak", "||g||", "cos(g_Z,g)", "shared ev.", "max|K_e|"):
        t.add_column(col, justify="right")
    t.add_row(_fmt(lt["tax"]), _fmt(lt["shared_tax"]), _fmt(lt["weak_tax"]), _fmt(lt["update_norm"]),
              _fmt(lt["cosine"]), str(int(lt["n_shared_events"])), _fmt(out["max_abs_shared_K"]))
    console.print(t)
    t = _table("Token space: output-embedding rows (retained = ||sum u|| / sum ||u||; 0 = fully cancelled)")
    for col in ("token", "occurrences", "||U_v||", "retained (all)", "retained (own)"):
        t.add_column(col, justify="right")
    for row in out["token_space"]:
        t.add_row(str(row["token"]), str(row["n"]), _fmt(row["update_norm"]), _fmt(row["retained"]), _fmt(row["own_retained"]))
    console.print(t)
    if "kl" in out:
        kl = out["kl"]
        t = _table(f"Prop. 3.1: KL after theta + eta g (g = {kl['direction']}, {kl['contexts']} contexts)")
        for col in ("eta", "predicted 1/2 eta^2 gFg", "measured KL", "ratio"):
            t.add_column(col, justify="right")
        for eta, p, m in zip(kl["etas"], kl["predicted"], kl["measured"]):
            ratio = _fmt(m / p) if p > 1e-24 else "n/a (g ~ 0)"
            t.add_row(_fmt(eta), _fmt(p), _fmt(m), ratio)
        console.print(t)
    else:
        console.print("The update is zero (all rewards equal?): no KL check.")
    if "similarity" in out:
        t = _table("Per-occurrence gradient cosines: same token, different contexts")
        for col in ("token", "pairs", "mean cosine"):
            t.add_column(col, justify="right")
        for v, s in sorted(out["similarity"]["per_token"].items()):
            t.add_row(str(v), str(s["pairs"]), _fmt(s["mean_cosine"]))
        console.print(t)
        h = out["similarity"]["histogram"]
        console.print("histogram on [-1, 1], 10 bins: " + " ".join(str(c) for c in h["counts"]))


def run(args) -> int:
    out = measure(args)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        _print_tables(out)
    return 0
