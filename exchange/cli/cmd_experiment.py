"""``exchange experiment run CONFIG`` / ``exchange experiment report RUN_DIR``.

``run`` trains the config's pilot seeds first (when it has ``pilot_seeds``) and freezes
the prediction (``pilot.json``: delta_hat, its sign, the paired SD, the probe's
certificate), then every arm on the test seeds (resumable: run it again after an
interruption); ``report`` decides P1-P4 by the verdict rule of exchange.lab.verdict
(SESOI = delta_hat / 2, designs accepted only at delta_hat >= 3 MDE), writes
``summary.json``, ``summary.md`` and a PNG of the curves, and optionally renders several
experiments into one markdown page and the claims table.
"""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("experiment", help="run and report the paired training experiments (P1-P4)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    r = sub.add_parser("run", help="train every (seed, arm) of an experiment config")
    r.add_argument("config", help="experiment TOML, e.g. experiments/configs/grpo_group_constant_norm.toml")
    r.add_argument("--out", default="runs", help="output root (default: runs/, git-ignored)")
    r.add_argument("--jobs", type=int, default=1, help="runs trained at once (processes, 1 thread each)")
    r.add_argument("--seeds", type=int, nargs="+", help="override the config's seeds")
    r.add_argument("--steps", type=int, help="override [train] steps (quick looks; not for reports)")
    r.add_argument("--no-progress", action="store_true", help="no progress bars")
    r.set_defaults(func=run)
    rep = sub.add_parser("report", help="statistics, plots and verdicts of finished runs")
    rep.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="experiment directories, e.g. runs/grpo_norm")
    rep.add_argument("--img-dir", help="also copy the plots here (e.g. docs/img) as exp_<name>_*.png")
    rep.add_argument("--markdown", help="write one markdown page with every experiment (e.g. docs/experiments.md)")
    rep.add_argument("--claims", help="rewrite the 'Training experiments' section of this file (docs/claims.md)")
    rep.set_defaults(func=run)


def run(args) -> int:
    import dataclasses

    from exchange.errors import InvalidArgument
    from exchange.lab.config import load_experiment

    if args.action == "run":
        cfg = load_experiment(args.config)
        if args.seeds:
            cfg = dataclasses.replace(cfg, seeds=tuple(args.seeds))
        if args.steps is not None:
            if args.steps < 1:
                raise InvalidArgument(f"--steps={args.steps} must be >= 1.")
            cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, steps=args.steps))
        if args.jobs < 1:
            raise InvalidArgument(f"--jobs={args.jobs} must be >= 1.")
        from exchange.lab.experiment import run_experiment

        from exchange.lab.experiment_report_record import RUN_OVERRIDES, RunRecord

        # the overrides go into experiment.json, so the report's reproduce line retrains this run
        record = RunRecord(args.config, tuple(args.seeds) if args.seeds else None, args.steps)
        exp_dir = run_experiment(cfg, args.out, jobs=args.jobs, progress=not args.no_progress, source=args.config,
                                 **{RUN_OVERRIDES: record.to_dict()})
        print(f"experiment {cfg.name}: {len(cfg.seeds)} seeds x {len(cfg.arms)} arms done in {exp_dir}")
        print(f"next: python -m exchange experiment report {exp_dir}")
        return 0
    from exchange.lab.experiment_report import report_experiments

    verdicts = report_experiments(args.run_dirs, img_dir=args.img_dir, markdown=args.markdown, claims=args.claims)
    for line in verdicts:
        print(line)
    return 0
