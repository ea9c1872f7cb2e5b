"""P3 at the contexts the policy samples (issue 42): the statistic, its pilot and its report.

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

``delta_hat`` at these contexts: runs trained before it was logged have none (the
attribution dotted the shared part's step with the gradient of **fixed** probes only), so
their result is a measurement, never a verdict (:attr:`SampledP3.label`). Pilot runs with
the attribution on now log, per step and before its update,
``attr/sampled_weak_credit_entropy/gap`` (:data:`exchange.core.metric_keys.ATTR_SAMPLED_ENTROPY_GAP`,
:meth:`exchange.lab.attribution.ProbeAttribution.at_contexts`): the gradient of the entropy
at the weak-credit positions of the rollout just sampled, dotted with the shared part's
cumulative shift through the optimiser, i.e. the first-order ``H_base,t - H_surgical,t``
at those contexts. :func:`sampled_pilot` turns the pilot runs into the frozen quantities:
the orientation (the sign of ``tax/entropy_K_signed`` over the pilot baseline's steps, as
:func:`exchange.lab.pilot.freeze` orients P3), ``delta_hat`` = the oriented late-window mean
of the gap along the baseline's path, bracketed by the same along the surgical arm's path
(where the instrument attributes minus the residual, so the gap's sign flips), and the SD
of the oriented ``D`` over the pilot seeds. With them the verdict rule of
:mod:`exchange.lab.verdict` applies unchanged (SESOI = half the bracket's lower end, design
accepted at ``>= 3 MDE``, "opposite" publishable); a decided row whose ``delta_hat`` has no
surgical-path bracket (a private S: the surgical pilot runs without the attribution) says
so in its label, and the report prints the pilot seeds' own measured ``D`` next to
``delta_hat`` (its error where it can be seen). The sampled pilot is a function of the
pilot runs only (the test seeds are never read), computed where it is reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from exchange.core import metric_keys as mk
from exchange.lab.predictions import ROLLOUT_HASH, RunData, read_run
from exchange.lab.report_parts import fmt as _fmt
from exchange.lab.report_parts import own_drift_cell
from exchange.lab.verdict import Decision, Orientation, OwnDrift, Pilot, decide_signed, design_mde, interval, orient, \
    own_drift

__all__ = ["GAP", "KEY", "LATE", "SampledP3", "SampledPilot", "late_difference", "own_change", "sampled_claims_cells",
           "sampled_markdown", "sampled_p3", "sampled_pilot"]

KEY = mk.ENTROPY_WEAK_CREDIT
GAP = mk.ATTR_SAMPLED_ENTROPY_GAP
LATE = 0.25
"""The late window's share of the steps (the last quarter, as ``predictions._late_mean``):
one step's rollout is a few hundred weak-credit positions, so a single final step is
noisier than the window; a quarter keeps the window inside the run's late phase."""
SOURCE = ("first-order attribution of the shared residual at the sampled weak-credit contexts (the entropy's "
          "gradient there dotted with the residual's cumulative shift through the optimiser), late-window mean")


def _late(s: np.ndarray) -> np.ndarray:
    return s[-max(1, int(len(s) * LATE)):]


def _logged(run: RunData, key: str) -> bool:
    return any(key in row for row in run.rows)


def late_difference(base: RunData, other: RunData) -> float:
    """``D``: the late-window mean of ``H_base,t - H_other,t`` (NaN when a run lacks the key
    or the arms did not train on the same rollouts: then the contexts are not shared)."""
    if not (_logged(base, KEY) and _logged(other, KEY)):  # e.g. the TRL engine logs no entropy/weak_credit
        return float("nan")
    hb, ho = base.series(KEY), other.series(KEY)
    if len(hb) == 0 or len(hb) != len(ho) or not np.array_equal(base.series(ROLLOUT_HASH), other.series(ROLLOUT_HASH)):
        return float("nan")
    return float(_late(hb - ho).mean())


def own_change(run: RunData) -> float:
    """The arm's late-window mean minus its step-0 value (the warm start's)."""
    h = run.series(KEY) if _logged(run, KEY) else np.array([])
    return float(_late(h).mean() - h[0]) if len(h) else float("nan")


def late_gap(run: RunData) -> float:
    """The late-window mean of the attributed gap (:data:`GAP`; NaN when not logged)."""
    g = run.series(GAP) if _logged(run, GAP) else np.array([])
    return float(_late(g).mean()) if len(g) else float("nan")


@dataclass(frozen=True)
class SampledPilot:
    """What the pilot runs freeze for P3 at the sampled contexts: the orientation (None:
    the pilot baseline did not log ``tax/entropy_K_signed``), the :class:`Pilot` (None:
    no ``delta_hat``, the gap was not logged) and the pilot's paired ``D`` per seed."""

    orientation: Orientation | None
    pilot: Pilot | None
    diffs: tuple[float, ...]


def sampled_pilot(base: dict[int, RunData], other: dict[int, RunData]) -> SampledPilot:
    """:class:`SampledPilot` of the pilot runs ``base[seed]`` (the baseline, attribution on)
    and ``other[seed]`` (the surgical arm)."""
    seeds = sorted(set(base) & set(other))
    diffs = tuple(late_difference(base[s], other[s]) for s in seeds)
    o = None
    if seeds and all(_logged(base[s], mk.ENTROPY_K_SIGNED) for s in seeds):
        k = np.concatenate([base[s].series(mk.ENTROPY_K_SIGNED) for s in seeds])
        o = orient(k, np.ones_like(k))
    if o is None or o.sign == 0 or len(seeds) < 2 or not all(map(math.isfinite, diffs)) \
            or not all(_logged(base[s], GAP) for s in seeds):
        return SampledPilot(o, None, diffs)
    dh = o.sign * float(np.mean([late_gap(base[s]) for s in seeds]))
    # along the surgical path the instrument attributes minus the residual (trainer._update): the gap flips
    surg = (-o.sign * float(np.mean([late_gap(other[s]) for s in seeds]))
            if all(_logged(other[s], GAP) for s in seeds) else None)
    sd = float(np.std([o.sign * d for d in diffs], ddof=1))
    return SampledPilot(o, Pilot(dh, sd, tuple(seeds), SOURCE, surg), diffs)


@dataclass(frozen=True)
class SampledP3:
    """P3 at the sampled weak-credit contexts of one experiment (see the module)."""

    against: str
    diffs: tuple[float, ...]
    """per test seed, the unoriented ``D`` (baseline minus ``against``)"""
    pilot: SampledPilot | None
    own: tuple[OwnDrift, ...]
    mde: float | None
    """at the test's seed count, from the pilot seeds' SD of ``D``; None without two pilot pairs"""
    decision: Decision | None = None
    """the verdict rule's decision, only with an orientation and ``delta_hat`` at these contexts"""
    control: str = ""
    """the design's positive-control label (exchange.lab.experiment_decision.positive_control)"""
    reason: str = ""
    uncertified: bool = False
    """the pilot did not certify S zero-credit: S's positions are among the weak-credit ones"""

    claim = "entropy at the weak-credit positions of the baseline's own samples moves the way the pilot orients it"

    @property
    def sign(self) -> int | None:
        o = None if self.pilot is None else self.pilot.orientation
        return None if o is None or o.sign == 0 else o.sign

    @property
    def interval(self) -> tuple[float, float, float, float, int] | None:
        if len(self.diffs) < 2 or not all(math.isfinite(x) for x in self.diffs):
            return None
        return interval(self.diffs)

    @property
    def label(self) -> str:
        if self.reason:
            return f"not measured: {self.reason}"
        if self.decision is not None:
            head = f"{self.control.split(':')[0]}: " if self.control else ""
            # one path: delta_hat's error is not bracketed (issue 42 found it 1.3-9x off for P3), so the row says so
            one = "" if self.pilot.pilot.delta_hat_surgical is not None else " (delta_hat along one path: no bracket)"
            return head + self.decision.label + one
        why = []
        if self.uncertified:  # the same gate as the fixed-context P3 row (experiment_decision's PROBES rows)
            why.append("the probe S is not certified zero-credit, and the positions S takes are among the "
                       "weak-credit positions")
        if self.sign is None:
            why.append("no orientation at these contexts (the pilot baseline did not log tax/entropy_K_signed)")
        if self.pilot is None or self.pilot.pilot is None:
            why.append("no delta_hat at these contexts (the pilot did not log attr/sampled_weak_credit_entropy/gap): "
                       "no SESOI, no design acceptance")
        return "measurement (no verdict: " + "; ".join(why) + ")"

    def to_dict(self) -> dict[str, Any]:
        iv = self.interval
        pl = None if self.pilot is None or self.pilot.pilot is None else self.pilot.pilot
        return {"against": self.against, "diffs": list(self.diffs), "sign": self.sign,
                "interval": None if iv is None else {"mean": iv[0], "low": iv[1], "high": iv[2], "sd": iv[3],
                                                     "n": iv[4]},
                "own": [o.to_dict() for o in self.own], "mde": self.mde,
                "pilot_diffs": [] if self.pilot is None else list(self.pilot.diffs),
                "delta_hat": None if pl is None else pl.delta_hat,
                "delta_hat_surgical": None if pl is None else pl.delta_hat_surgical,
                "decision": None if self.decision is None else self.decision.to_dict(), "label": self.label}


def _pilot_runs(exp_dir: Path, meta: dict[str, Any], role: str) -> dict[int, RunData]:
    arm = next((a for a in meta["arms"] if a["role"] == role), None)
    out = {}
    for s in meta.get("pilot_seeds", []) if arm is not None else []:
        d = exp_dir / "pilot" / arm["name"] / f"seed{s}"
        if (d / "done.json").exists():
            out[s] = read_run(d)
    return out


def sampled_p3(exp_dir: str | Path, meta: dict[str, Any], runs: dict[str, dict[int, RunData]],
               control: str = "", *, certified: bool = True) -> SampledP3:
    """P3 at the sampled contexts of the experiment in ``exp_dir`` (``runs[role][seed]`` as
    :func:`exchange.lab.experiment_decision.load_runs` gives them; its pilot runs under
    ``exp_dir/pilot``; ``control`` the design's positive-control label, if any).

    ``certified``: the pilot certified the probe S zero-credit. The weak-credit positions
    are every non-decision position, S's among them, so without the certificate a position
    of the statistic may carry credit and the row is a measurement, as the fixed-context
    P3 row is (THEORY.md 5: P3 is about weak-credit positions)."""
    exp_dir = Path(exp_dir)
    against = "surgical" if "surgical" in runs else "treatment" if "treatment" in runs else ""
    if not against:
        return SampledP3("", (), None, (), None, reason="no surgical or treatment arm")
    seeds = sorted(runs["baseline"])
    diffs = tuple(late_difference(runs["baseline"][s], runs[against][s]) for s in seeds)
    sp = sampled_pilot(_pilot_runs(exp_dir, meta, "baseline"), _pilot_runs(exp_dir, meta, against))
    pd = [d for d in sp.diffs if math.isfinite(d)]
    mde = design_mde(float(np.std(pd, ddof=1)), len(seeds)) if len(pd) >= 2 else None
    pl = sp.pilot
    sesoi = pl.magnitude / 2 if pl is not None and pl.magnitude > 0 else None
    own = tuple(own_drift(role, [own_change(r[s]) for s in sorted(r)], sesoi) for role, r in runs.items()
                if len(r) >= 2 and all(math.isfinite(own_change(r[s])) for s in r))
    if not all(math.isfinite(d) for d in diffs):
        return SampledP3(against, diffs, sp, own, mde, control=control, reason=(
            "the arms did not train on common rollouts (no shared contexts) or did not log entropy/weak_credit"))
    decision = None
    if certified and pl is not None and sp.orientation is not None and len(diffs) >= 2:
        decision = decide_signed("P3", [sp.orientation.sign * d for d in diffs], pl)
    return SampledP3(against, diffs, sp, own, mde, decision, control, uncertified=not certified)


def sampled_markdown(s: SampledP3) -> list[str]:
    """The experiment page's lines for ``s``."""
    lines = ["P3 at the contexts the policy samples (issue 42; `exchange.lab.experiment_report_sampled`): "
             "next-token entropy at the weak-credit positions of the baseline's own rollouts, every arm "
             "re-scored on them (common rollouts), late quarter of the steps.", ""]
    iv = s.interval
    if iv is None:
        return lines + [f"{s.label}."]
    mean, low, high, _, n = iv
    o = None if s.pilot is None else s.pilot.orientation
    orient_txt = ("no orientation at these contexts" if s.sign is None else
                  f"pilot orientation {s.sign:+d} ({o.agreeing}/{o.counted} steps agree; oriented mean "
                  f"{_fmt(s.sign * mean)})")
    pl = None if s.pilot is None else s.pilot.pilot
    dh = ("delta_hat n/a; SESOI n/a" if pl is None else
          f"delta_hat {_fmt(pl.delta_hat)} ("
          + (f"bracket [{_fmt(pl.bracket[0])}, {_fmt(pl.bracket[1])}]" if pl.delta_hat_surgical is not None else
             "baseline's path only: no bracket") + "); SESOI "
          f"{_fmt(pl.magnitude / 2 if pl.magnitude > 0 else None)}")
    if pl is not None and s.sign is not None:  # delta_hat's error where it is seen: its own pilot seeds
        dh += f"; the pilot seeds' own measured difference, oriented: {_fmt(s.sign * float(np.mean(s.pilot.diffs)))}"
    npd = 0 if s.pilot is None else len(s.pilot.diffs)
    d = s.decision
    mde = (f"MDE {_fmt(s.mde)} (pilot seeds' SD, {npd} pairs)" if d is None else
           f"MDE {_fmt(d.mde)} (test seeds' SD; {_fmt(s.mde)} from the pilot's {npd} pairs); design "
           + ("accepted (bracket magnitude >= 3 x the pilot's MDE)" if d.accepted else
              "not accepted (needs the bracket's magnitude >= 3 x the pilot's MDE" + (
                  "; the bracket straddles 0)" if pl.magnitude == 0 else ")")))
    lines += [f"- baseline minus {s.against}: {_fmt(mean)} [{_fmt(low)}, {_fmt(high)}] nats over {n} seeds; "
              f"{orient_txt}; {dh}; {mde}; {s.label}."]
    for o in s.own:
        lines.append(f"- {o.role} own drift (late mean minus step 0): {_fmt(o.mean)} [{_fmt(o.low)}, {_fmt(o.high)}]"
                     f" ({o.flat})")
    return lines


def sampled_claims_cells(s: SampledP3) -> tuple[str, str]:
    """``(verdict, evidence)`` of the claims table's row for ``s`` (which has an interval)."""
    mean, low, high, _, n = s.interval
    d = s.decision
    if d is None:
        ev = (f"baseline minus {s.against} {_fmt(mean)} [{_fmt(low)}, {_fmt(high)}] nats (unoriented), {n} seeds; "
              f"delta_hat n/a, SESOI n/a, MDE {_fmt(s.mde)} (pilot SD)")
        return s.label, ev + (f"; {own_drift_cell(s.own)}" if s.own else "")
    pl = s.pilot.pilot
    br = (f"[{_fmt(pl.bracket[0])}, {_fmt(pl.bracket[1])}]" if pl.delta_hat_surgical is not None else
          f"{_fmt(pl.delta_hat)} (one path, no bracket)")
    ev = (f"{_fmt(d.mean)} [{_fmt(d.low)}, {_fmt(d.high)}], delta_hat {br}, "
          + (f"SESOI {_fmt(d.sesoi)} (half the bracket's lower end)" if d.sesoi is not None else
             "SESOI n/a (the bracket straddles 0)") + f", MDE {_fmt(d.mde)}")
    return s.label, ev + (f"; {own_drift_cell(s.own)}" if s.own else "")
