"""Dose-response design (issue 31, M2): one prediction over several doses of a design.

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
seeds run (exchange.lab.experiment.run_experiment) and the slope is decided
(exchange.lab.verdict.decide_dose_response), unless the probe S is not certified at
every dose (then the slope is a measurement, with no verdict). Doses whose frozen sign differs from the
first dose's are refused: one orientation for the whole regression.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from levers import _variant

from exchange.lab.config import load_experiment
from exchange.lab.experiment import freeze_runs, pilot_runs, run_dir, run_experiment, run_pilot
from exchange.lab.experiment_report import decide_experiment
from exchange.lab.verdict import ACCEPT_RATIO, decide_dose_response, dose_response_mde


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
    args = ap.parse_args(argv)
    base = load_experiment(args.config)
    variants, pilots = [], []
    for dose in args.dose:
        label, _, overrides = dose.partition(":")
        cfg = _variant(base, label, overrides)
        variants.append(cfg)
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
        diffs = []
        for cfg in variants:
            cfg = dataclasses.replace(cfg, seeds=tuple(range(args.seeds)))
            if args.pathway_only:
                cfg = dataclasses.replace(cfg, arms=tuple(a for a in cfg.arms if a.role != "treatment"))
            frozen = Path(args.out) / cfg.name / "pilot.json"
            if not frozen.exists():  # the pilot frozen above, before any test seed runs
                frozen.write_text(pilots[variants.index(next(v for v in variants if v.name == cfg.name))].to_json())
            res = decide_experiment(run_experiment(cfg, args.out, jobs=args.jobs, progress=False))
            row = next(r for r in res.rows if r.prediction.key == key and r.prediction.primary)
            diffs.append(row.diffs)
        r = decide_dose_response(key, [p.pilots[key].delta_hat for p in pilots], np.asarray(diffs),
                                 [p.pilots[key] for p in pilots])
        label = r.label if all(p.certified for p in pilots) else (
            "not tested (the probe S is not certified zero-credit at every dose): a measurement of the "
            "attribution across doses, no verdict")
        print(f"{key}: slope {r.slope:.3g} [{r.low:.3g}, {r.high:.3g}] over {r.n} differences: {label}.")
    return code


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
