"""``exchange inspect BATCH TARGET``: one real batch, exactly, without fuzzing."""

from __future__ import annotations

from exchange.cli.options import add_json, add_params


def add_parser(sub) -> None:
    p = sub.add_parser(
        "inspect",
        help="inspect one real batch: shared events, K_e, shared residual, weight vectors",
        description="BATCH: a torch.save (.pt) or safetensors (.safetensors) file holding a dict of "
        "Rollout fields: tokens [N,T], mask [N,T], rewards [N], group [N], old_logprobs [N,T], optional "
        "logprobs, ref_logprobs, entropy, sampling_logprobs [N,T], baseline_rewards [N], truncated [N], "
        "prompt_tokens, prompt_mask [N,P] (the format: exchange.core.batch_io, whose save_batch writes one). "
        "TARGET: a built-in name, trl:/verl:/openrlhf:/skyrl:/areal:/art: "
        "library losses, module:function, or path/to/file.py:function. Exit 0 when shared events cancel, "
        "1 when they do not.",
    )
    p.add_argument("batch", metavar="BATCH")
    p.add_argument("target", metavar="TARGET")
    add_params(p)
    p.add_argument("--top", type=int, default=10, help="offending events to list (default: 10)")
    add_json(p)
    p.set_defaults(func=run)


def run(args) -> int:
    import torch

    from exchange.checker.batch_analysis import inspect
    from exchange.core.batch_io import load_batch
    from exchange.targets import parse_param_items, resolve_target

    target = resolve_target(args.target, parse_param_items(args.param))
    rollout = load_batch(args.batch)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = inspect(target.loss_fn, rollout, top=args.top)
    finally:
        torch.set_num_threads(threads)
    print(result.to_json() if args.json else f"{target.name}\n{result}")
    return 0 if result.cancels else 1
