"""P3 at the contexts the policy samples (issue 42), from what the runs already log.

THEORY.md section 5, P3: entropy at weak-credit positions collapses faster when (E) is
broken. The primary P3 row (:data:`exchange.lab.predictions.PREDICTIONS`) measures it at
the fixed probe contexts (P2's slot), while the pilot orients it at the contexts the
policy samples (``tax/entropy_K_signed``): orientation and statistic referred to
different contexts. This module measures P3 where the orientation is taken.

What is logged per update, in every arm: ``entropy/weak_credit``
(:data:`exchange.core.metric_keys.ENTROPY_WEAK_CREDIT`, :func:`exchange.lab.instruments.entropy_by_role`),
the mean next-token entropy of the arm's policy **before** step ``t``'s update over the
weak-credit (non-decision) positions of step ``t``'s rollout. With ``[train]
common_rollouts`` every arm replays the baseline's rollout and recomputes the entropy under
its own policy (:func:`exchange.lab.trainer.replay_rollout`), so at each step all arms are
measured on **the same contexts, the ones the baseline's policy sampled** (checked by the
rollout hash); at step 0 every arm is the warm start, so the arms' values are equal there.

The statistic, fixed before any run was read for it:

- per seed, the paired difference ``D = mean_{t in late} (H_base,t - H_other,t)``: the
  late window is the last quarter of the steps (:data:`LATE`), the arm ``other`` is the
  surgical arm (only the shared residual removed; the treatment where there is none);
- the prediction: ``sign * D > 0`` with ``sign`` the pilot's frozen P3 orientation **when
  the pilot took it at the sampled contexts** (its baseline logged ``tax/entropy_K_signed``);
  THEORY's "collapses faster when (E) is broken" is the case ``sign = -1``;
- each arm's own drift: ``mean_{t in late} H_arm,t - H_arm,0`` per seed (the contexts move
  with the baseline's sampling, so this mixes the policy's change with the contexts'; the
  paired difference does not, both arms being read at one context set);
- ``MDE``: :func:`exchange.lab.verdict.design_mde` of the pilot seeds' SD of ``D`` at the
  test's seed count.

``delta_hat`` at these contexts is **not logged**: the attribution instrument
(:mod:`exchange.lab.attribution`) sends the shared part through the optimiser and dots it
with the gradient of a **fixed** probe; the sampled contexts change every step. Without
``delta_hat`` there is no SESOI and no design acceptance (``delta_hat >= 3 MDE``), so the
result is a measurement, never a verdict (:attr:`SampledP3.label`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from exchange.core import metric_keys as mk
from exchange.lab.predictions import ROLLOUT_HASH, RunData, read_run
from exchange.lab.verdict import OwnDrift, design_mde, interval, own_drift

__all__ = ["KEY", "LATE", "SampledP3", "late_difference", "own_change", "sampled_markdown", "sampled_p3"]

KEY = mk.ENTROPY_WEAK_CREDIT
LATE = 0.25
"""The late window's share of the steps (the last quarter, as ``predictions._late_mean``):
one step's rollout is a few hundred weak-credit positions, so a single final step is
noisier than the window; a quarter keeps the window inside the run's late phase."""


def _late(s: np.ndarray) -> np.ndarray:
    return s[-max(1, int(len(s) * LATE)):]


def late_difference(base: RunData, other: RunData) -> float:
    """``D``: the late-window mean of ``H_base,t - H_other,t`` (NaN when a run lacks the key
    or the arms did not train on the same rollouts: then the contexts are not shared)."""
    hb, ho = base.series(KEY), other.series(KEY)
    if len(hb) == 0 or len(hb) != len(ho) or not np.array_equal(base.series(ROLLOUT_HASH), other.series(ROLLOUT_HASH)):
        return float("nan")
    return float(_late(hb - ho).mean())


def own_change(run: RunData) -> float:
    """The arm's late-window mean minus its step-0 value (the warm start's)."""
    h = run.series(KEY)
    return float(_late(h).mean() - h[0]) if len(h) else float("nan")


@dataclass(frozen=True)
class SampledP3:
    """P3 at the sampled weak-credit contexts of one experiment (see the module)."""

    against: str
    diffs: tuple[float, ...]
    """per test seed, the unoriented ``D`` (baseline minus ``against``)"""
    sign: int | None
    """the pilot's P3 orientation at the sampled contexts; None: the pilot did not take it there"""
    own: tuple[OwnDrift, ...]
    mde: float | None
    """at the test's seed count, from the pilot seeds' SD of ``D``; None without two pilot pairs"""
    pilot_diffs: tuple[float, ...]
    delta_hat: float | None = None
    """not logged (see the module): always None for runs trained so far"""
    reason: str = ""

    @property
    def interval(self) -> tuple[float, float, float, float, int] | None:
        if len(self.diffs) < 2 or not all(math.isfinite(x) for x in self.diffs):
            return None
        return interval(self.diffs)

    @property
    def label(self) -> str:
        if self.reason:
            return f"not measured: {self.reason}"
        why = ["no delta_hat at the sampled contexts (the attribution logs fixed probes only): no SESOI, "
               "no design acceptance"]
        if self.sign is None:
            why.append("the pilot's P3 orientation was taken at S's fixed slot, not at these contexts")
        return "measurement (no verdict: " + "; ".join(why) + ")"

    def to_dict(self) -> dict[str, Any]:
        iv = self.interval
        return {"against": self.against, "diffs": list(self.diffs), "sign": self.sign,
                "interval": None if iv is None else {"mean": iv[0], "low": iv[1], "high": iv[2], "sd": iv[3],
                                                     "n": iv[4]},
                "own": [o.to_dict() for o in self.own], "mde": self.mde, "pilot_diffs": list(self.pilot_diffs),
                "delta_hat": self.delta_hat, "label": self.label}


def _pilot_runs(exp_dir: Path, meta: dict[str, Any], role: str) -> dict[int, RunData]:
    arm = next((a for a in meta["arms"] if a["role"] == role), None)
    out = {}
    for s in meta.get("pilot_seeds", []) if arm is not None else []:
        d = exp_dir / "pilot" / arm["name"] / f"seed{s}"
        if (d / "done.json").exists():
            out[s] = read_run(d)
    return out


def sampled_p3(exp_dir: str | Path, meta: dict[str, Any], runs: dict[str, dict[int, RunData]],
               pilot_sign: int) -> SampledP3:
    """P3 at the sampled contexts of the experiment in ``exp_dir`` (``runs[role][seed]`` as
    :func:`exchange.lab.experiment_report.load_runs` gives them; ``pilot_sign`` the frozen
    pilot's P3 sign, used only where the pilot's baseline logged ``tax/entropy_K_signed``)."""
    exp_dir = Path(exp_dir)
    against = "surgical" if "surgical" in runs else "treatment" if "treatment" in runs else ""
    own = tuple(own_drift(role, [own_change(r[s]) for s in sorted(r)], None) for role, r in runs.items()
                if all(math.isfinite(own_change(r[s])) for s in r) and len(r) >= 2)
    if not against:
        return SampledP3("", (), None, own, None, (), reason="no surgical or treatment arm")
    seeds = sorted(runs["baseline"])
    diffs = tuple(late_difference(runs["baseline"][s], runs[against][s]) for s in seeds)
    reason = "" if all(math.isfinite(d) for d in diffs) else \
        "the arms did not train on common rollouts (no shared contexts) or did not log entropy/weak_credit"
    pb, po = _pilot_runs(exp_dir, meta, "baseline"), _pilot_runs(exp_dir, meta, against)
    both = sorted(set(pb) & set(po))
    pd = tuple(late_difference(pb[s], po[s]) for s in both)
    mde = design_mde(float(np.std(pd, ddof=1)), len(seeds)) if len(pd) >= 2 and all(map(math.isfinite, pd)) else None
    sampled = bool(pb) and all(any(mk.ENTROPY_K_SIGNED in row for row in r.rows) for r in pb.values())
    return SampledP3(against, diffs, pilot_sign if sampled and pilot_sign else None, own, mde, pd, reason=reason)


def _fmt(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:.3g}" if abs(x) >= 1e-3 or x == 0 else f"{x:.2e}"


def sampled_markdown(s: SampledP3) -> list[str]:
    """The experiment page's lines for ``s``."""
    lines = ["P3 at the contexts the policy samples (issue 42; `exchange.lab.experiment_report_sampled`): "
             "next-token entropy at the weak-credit positions of the baseline's own rollouts, every arm "
             "re-scored on them (common rollouts), late quarter of the steps.", ""]
    iv = s.interval
    if iv is None:
        return lines + [f"{s.label}.", ""]
    mean, low, high, _, n = iv
    orient = ("no orientation at these contexts" if s.sign is None
              else f"pilot orientation {s.sign:+d} (oriented mean {_fmt(s.sign * mean)})")
    lines += [f"- baseline minus {s.against}: {_fmt(mean)} [{_fmt(low)}, {_fmt(high)}] nats over {n} seeds; "
              f"{orient}; delta_hat n/a; SESOI n/a; MDE {_fmt(s.mde)} (pilot seeds' SD, "
              f"{len(s.pilot_diffs)} pairs); {s.label}."]
    for o in s.own:
        lines.append(f"- {o.role} own drift (late mean minus step 0): {_fmt(o.mean)} [{_fmt(o.low)}, {_fmt(o.high)}]"
                     f" ({o.flat})")
    return lines + [""]

