"""Lever study of a design: pilot delta_hat / MDE for variants of one experiment config.

    python experiments/levers.py CONFIG [--out runs/levers] [--seeds 12] \
        --lever "base" --lever "G=2:train.group_size=2,train.prompts_per_step=16" ...

Each ``--lever`` is ``label:key=value,...`` (dotted keys into the config's sections,
``arms.<param>`` for a parameter of every arm's objective; no overrides for "base"). For each lever the pilot (``pilot_seeds`` of the config) is
trained and frozen (exchange.lab.experiment.run_pilot), and one markdown row is printed:
delta_hat, pilot SD and MDE at ``--seeds`` test seeds for P1-P3, and their ratio; for P2 and
P3 also delta_hat's bracket (the attribution along the baseline's and, with
``probe_as_filler``, the surgical arm's path) and its magnitude in MDE, the number the pilot
accepts a design on (``Pilot.accepted``: >= 3 MDE, issue 42); plus the certificate, the share
of groups with zero reward spread, the orientation at S and, with ``[train] kl_target``, the
KL-normalised step's largest factor over the pilot's runs (``kl/scale``, capped at
``exchange.lab.klstep.SCALE_CAP``).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np

from exchange.core import metric_keys as mk
from exchange.lab.config import load_experiment
from exchange.lab.experiment import pilot_runs, run_dir, run_pilot
from exchange.lab.klstep import SCALE_CAP
from exchange.lab.predictions import read_run


def _variant(cfg, label: str, overrides: str):
    out = cfg
    for item in [x for x in overrides.split(",") if x.strip()]:
        key, value = item.split("=", 1)
        section, name = key.strip().split(".")
        if section == "arms":  # a parameter of every arm's objective (e.g. arms.eps_low=0.2)
            arms = tuple(dataclasses.replace(a, params={**a.params, name: float(value)}) for a in out.arms)
            out = dataclasses.replace(out, arms=arms)
            continue
        sec = getattr(out, section)
        old = getattr(sec, name)
        new = type(old)(float(value)) if isinstance(old, (int, float)) and not isinstance(old, bool) else value
        if isinstance(old, bool):
            new = value.strip().lower() in ("1", "true", "yes")
        out = dataclasses.replace(out, **{section: dataclasses.replace(sec, **{name: new})})
    return dataclasses.replace(out, name=f"{cfg.name}__{label}")


def _largest_scale(cfg, out_root: str) -> str:
    """The KL-normalised step's largest factor over the pilot's runs ("off" without a KL target)."""
    if not cfg.train.kl_target:
        return "off"
    scales = [read_run(run_dir(out_root, r)).series(mk.KL_SCALE) for r in pilot_runs(cfg)]
    top = max((float(s.max()) for s in scales if len(s)), default=float("nan"))
    return f"{top:.3g}" + (" (HIT THE CAP)" if top >= SCALE_CAP else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("--out", default="runs/levers")
    ap.add_argument("--seeds", type=int, default=12, help="test seeds the MDE is computed for")
    ap.add_argument("--lever", action="append", required=True)
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args(argv)
    cfg = load_experiment(args.config)
    print("| lever | P1 dh/MDE | P2 sign, delta_hat, SD, MDE, dh/MDE; bracket, bracket/MDE | "
          "P3 sign, delta_hat, SD, MDE, dh/MDE; bracket, bracket/MDE | "
          "S certified | sensitivity | zero-spread groups | orientation at S (agreeing/counted) | "
          f"largest KL-step factor (cap {SCALE_CAP:g}) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for lever in args.lever:
        label, _, overrides = lever.partition(":")
        variant = _variant(cfg, label, overrides)
        p = run_pilot(variant, args.out, jobs=args.jobs, progress=False)
        cells = []
        for key in ("P1", "P2", "P3"):
            pl = p.pilots[key]
            mde = pl.mde(args.seeds)
            ratio = pl.delta_hat / mde if mde > 0 else float("nan")
            if key == "P1":
                cells.append(f"{ratio:.2f}")
            else:
                lo, hi = pl.bracket
                mag = pl.magnitude / mde if mde > 0 else float("nan")
                cells.append(f"{p.orientation[key]:+d}, {pl.delta_hat:.3g}, {pl.sd:.3g}, {mde:.3g}, {ratio:.2f}; "
                             f"[{lo:.3g}, {hi:.3g}], {mag:.2f}" + (" (accepted)" if pl.accepted(args.seeds) else ""))
        sens = "n/a" if p.sensitivity is None else f"{p.sensitivity:.3g}"
        zs = "n/a" if p.zero_spread is None else f"{100 * p.zero_spread:.0f}%" + (" (refused)" if p.refused else "")
        o = p.style_orientation
        orient = f"{o.agreeing}/{o.counted} ({100 * o.agreement:.0f}%)" if o.counted else "none counted"
        print(f"| {label} {overrides} | " + " | ".join(cells) + f" | {p.certified} | {sens} | {zs} | {orient} | "
              f"{_largest_scale(variant, args.out)} |", flush=True)
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
