"""``exchange plot RUN``: the tax (``tax/*``) against the training step, with reward, KL
and entropy where the run logged them (:mod:`exchange.training_plot`)."""

from __future__ import annotations

from exchange.cli.options import check_output_path


def add_parser(sub) -> None:
    p = sub.add_parser(
        "plot",
        help="plot tax/* (and reward, KL, entropy) against the step of a TRL, verl or lab run",
        description="RUN: TRL's trainer_state.json (or its output folder: the newest checkpoint-N is read), "
        "the JSONL of verl's FileLogger (trainer.logger=[file]), or a lab run folder / its metrics.jsonl. "
        "Draws every tax/* series, then reward, KL and entropy under the engine's own key where present.",
    )
    p.add_argument("run", metavar="RUN")
    p.add_argument("--out", default="tax.png", metavar="PATH",
                   help="the image to write; .png or .svg (default: tax.png)")
    p.add_argument("--metric", action="append", default=None, metavar="KEY",
                   help="draw this logged key instead of the default selection (repeatable)")
    p.set_defaults(func=run)


def run(args) -> int:
    from exchange.training_log import read_training_log
    from exchange.training_plot import plot_training_log

    check_output_path("--out", args.out)
    log = read_training_log(args.run)
    selection = plot_training_log(log, args.out, args.metric)
    steps = sorted({s for k in selection.keys for s, _ in log.series[k]})
    print(f"{args.out}: {len(selection.keys)} series ({', '.join(selection.keys)}) over steps "
          f"{steps[0]}-{steps[-1]} of {log.path} ({log.source})")
    for note in log.notes:
        print(f"note: {note}")
    if selection.missing:
        print(f"not logged: {', '.join(selection.missing)}")
    return 0
