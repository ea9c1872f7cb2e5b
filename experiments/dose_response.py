"""Dose-response design (issue 31, M2; issue 42, M1's reuse series): one prediction over
several doses of a design.

    python experiments/dose_response.py CONFIG [--out runs/levers] [--seeds 12] [--test] \
        --dose "clip0.05:train.common_rollouts=true,arms.eps_low=0.05,arms.eps_high=0.07" \
        --dose "common:train.common_rollouts=true" ...

Each ``--dose`` is a lever of experiments/levers.py (``label:key=value,...``; the same
labels reuse the lever study's runs). For every dose the pilot is trained and frozen
(exchange.lab.experiment.run_pilot); the script prints, per signed prediction (P2, P3),
each dose's oriented delta_hat and pilot SD, and the design's MDE of the slope at
``--seeds`` test seeds (exchange.lab.verdict.dose_response_mde). The theory predicts
slope 1 (the measured paired difference follows delta_hat); the design is accepted only
when 1 >= 3 x MDE. With ``--test`` (and only for an accepted design) every dose's test
seeds run (exchange.lab.experiment.run_experiment) and the series is decided by the
report's rule (exchange.lab.experiment_report_series.dose_series: the slope through the
origin and each dose's own interval against its delta_hat; a measurement, no verdict,
unless the probe S is certified at every dose). Doses whose frozen sign differs from the
first dose's are refused: one orientation for the whole regression.

Each tested dose's ``experiment.json`` records what produced it (``source`` = CONFIG,
``variant`` = exchange.lab.experiment_report_series.DoseRecord: the dose's overrides,
every config value they changed, this call's arguments), so the report's reproduce line
reruns the dose and its description says the dose. ``--record-only`` writes that record
into finished dose directories without training (the same arguments as the call that
trained them; it refuses a directory whose recorded config is not the dose's): the
migration of doses trained before the record existed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from levers import _variant

from exchange.errors import InvalidArgument
from exchange.lab.config import load_experiment
from exchange.lab.experiment import freeze_runs, pilot_runs, run_dir, run_experiment, run_pilot, write_experiment_json
from exchange.lab.experiment_decision import decide_experiment
from exchange.lab.experiment_report_record import DoseRecord
from exchange.lab.experiment_report_series import dose_series
from exchange.lab.verdict import ACCEPT_RATIO, dose_response_mde


def _argv(args) -> list[str]:
    """This call's arguments that decide the runs, in one order (``--jobs`` decides nothing;
    ``--record-only`` is the migration, not the design)."""
    out = [args.config] + [x for d in args.dose for x in ("--dose", d)] + ["--seeds", str(args.seeds)]
    return out + ["--test"] * args.test + ["--pathway-only"] * args.pathway_only + ["--out", args.out]


def _tested(cfg, args):
    """A dose's config as its test seeds train it."""
    cfg = dataclasses.replace(cfg, seeds=tuple(range(args.seeds)))
    if args.pathway_only:
        cfg = dataclasses.replace(cfg, arms=tuple(a for a in cfg.arms if a.role != "treatment"))
    return cfg


def _record(base, cfg, dose: str, args) -> DoseRecord:
    label, _, overrides = dose.partition(":")
    return DoseRecord.of(base, cfg, config=args.config, label=label, overrides=overrides, argv=_argv(args),
                         out=args.out)


def _write_record(base, cfg, dose: str, args) -> Path:
    """``experiment.json`` of a tested dose, with ``source`` and the :class:`DoseRecord`."""
    return write_experiment_json(cfg, Path(args.out) / cfg.name, args.config,
                                 variant=_record(base, cfg, dose, args).to_dict())


def _record_only(base, variants, args) -> int:
    """The migration: the record written into finished dose directories, as ``--test`` writes it."""
    for dose, cfg in zip(args.dose, variants):
        cfg = _tested(cfg, args)
        path = Path(args.out) / cfg.name / "experiment.json"
        if not path.exists():
            raise InvalidArgument(f"--record-only: {path} does not exist; train the dose first (--test).")
        old = {k: v for k, v in json.loads(path.read_text()).items() if k not in ("source", "variant")}
        new = json.loads(json.dumps(dataclasses.asdict(cfg)))
        diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if diff:
            raise InvalidArgument(f"--record-only: {path} records another config than the dose {dose!r} (keys {diff} "
                                  "differ); pass the arguments of the call that trained it.")
        _write_record(base, cfg, dose, args)
        print(f"{path}: recorded {_record(base, cfg, dose, args).change} of {args.config}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("--out", default="runs/levers")
    ap.add_argument("--seeds", type=int, default=12, help="test seeds per dose the MDE is computed for")
    ap.add_argument("--dose", action="append", required=True)
    ap.add_argument("--test", action="store_true", help="run the test seeds of an accepted design and decide")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--pathway-only", action="store_true",
                    help="with --test: train only the baseline and surgical arms (P2/P3 need no treatment)")
    ap.add_argument("--record-only", action="store_true",
                    help="write the record of what produced each finished dose (experiment.json) and train nothing")
    args = ap.parse_args(argv)
    base = load_experiment(args.config)
    variants = [_variant(base, *dose.partition(":")[::2]) for dose in args.dose]
    if args.record_only:
        return _record_only(base, variants, args)
    pilots, results = [], None
    for cfg in variants:
        runs = pilot_runs(cfg)
        done = all((run_dir(args.out, r) / "done.json").exists() for r in runs)
        # finished pilot runs (e.g. of the lever study) are read as they are
        pilots.append(freeze_runs(cfg, runs, args.out) if done else run_pilot(cfg, args.out, jobs=args.jobs,
                                                                               progress=False))
    code = 0
    for key in ("P2", "P3"):
        signs = {p.orientation[key] for p in pilots}
        print(f"\n{key}: | dose | sign | delta_hat | pilot SD |\n|---|---|---|---|")
        for cfg, p in zip(variants, pilots):
            pl = p.pilots[key]
            print(f"| {cfg.name} | {p.orientation[key]:+d} | {pl.delta_hat:.3g} | {pl.sd:.3g} |")
        if len(signs) != 1 or 0 in signs:
            print(f"{key}: the doses' frozen signs differ or are missing ({sorted(signs)}): no common orientation, "
                  "no dose-response.")
            continue
        mde = dose_response_mde([p.pilots[key] for p in pilots], args.seeds)
        accepted = 1.0 >= ACCEPT_RATIO * mde
        print(f"{key}: MDE of the slope at {args.seeds} seeds per dose = {mde:.3g}; predicted slope 1 = "
              f"{1 / mde:.2f} MDE: {'accepted' if accepted else 'uninformative at this dose'}.")
        if not (args.test and accepted):
            continue
        if results is None:  # every dose's test seeds, after its pilot was frozen
            results = [_test_dose(base, cfg, dose, pilot, args)
                       for cfg, dose, pilot in zip(variants, args.dose, pilots)]
        series = dose_series(results, key)
        r = series.slope
        print(f"{key}: " + (series.reason if r is None else f"slope {r.slope:.3g} [{r.low:.3g}, {r.high:.3g}] over "
                                                            f"{r.n} differences") + f": {series.label}.")
    return code


def _test_dose(base, cfg, dose: str, pilot, args):
    """Train one dose's test seeds (its frozen pilot first), record what produced it, decide it."""
    cfg = _tested(cfg, args)
    frozen = Path(args.out) / cfg.name / "pilot.json"
    if not frozen.exists():  # the pilot frozen above, before any test seed runs
        frozen.parent.mkdir(parents=True, exist_ok=True)
        frozen.write_text(pilot.to_json())
    exp_dir = run_experiment(cfg, args.out, jobs=args.jobs, progress=False, source=args.config)
    _write_record(base, cfg, dose, args)
    return decide_experiment(exp_dir)


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
