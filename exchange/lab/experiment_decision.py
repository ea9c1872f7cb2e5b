"""The decision of one experiment from its run files: typed results, no prose.

:func:`decide_experiment` reads an experiment directory (written by ``exchange experiment
run``): every arm's runs (:func:`load_runs`, ``[N seeds]`` per arm, each a
:class:`exchange.lab.predictions.RunData`) and the frozen pilot (``pilot.json``, its sign
and delta_hat per prediction). It decides each prediction of
:data:`exchange.lab.predictions.PREDICTIONS` as one :class:`Row` (per-seed values, the
oriented paired differences, the :class:`exchange.lab.verdict.Decision`), applies the dose
rule to P2 (:mod:`exchange.lab.dose_rule`), and gathers the manipulation check (the dose at
the probe event S, common rollouts), the KL-per-step match and the falsifier into an
:class:`ExperimentResult`. The verdict rule itself (delta_hat from the pilot, SESOI =
delta_hat / 2, designs accepted only at delta_hat >= 3 MDE) lives in
:mod:`exchange.lab.verdict`; the markdown, ``summary.json`` and the docs' generated sections
are rendered from the result by :mod:`exchange.lab.experiment_report`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from exchange.core import metric_keys as mk
from exchange.errors import InvalidArgument
from exchange.lab.dose_rule import DoseDecision, decide_dose
from exchange.lab.experiment_report_sampled import SampledP3, sampled_p3
from exchange.lab.klstep import SCALE_CAP
from exchange.lab.pilot import PROBES, FrozenPilot, load_pilot
from exchange.lab.predictions import (
    KL_KEY,
    MANIPULATION_KEY,
    PREDICTIONS,
    ROLLOUT_HASH,
    Prediction,
    RunData,
    read_run,
)
from exchange.lab.runlog import read_metrics
from exchange.lab.verdict import (
    Decision,
    OwnDrift,
    SesoiSource,
    Verdict,
    decide_p4,
    decide_signed,
    own_drift,
)

__all__ = ["KL_TOLERANCE", "RESIDUAL_THRESHOLD", "ExperimentResult", "Row", "credit_ranges", "decide_experiment",
           "identity_orientation", "load_runs", "positive_control", "private_probe", "role_key"]


KL_TOLERANCE = 0.10
"""Arms whose mean control-context KL per step differ by more than this (relative) are
confounded by step size."""
RESIDUAL_THRESHOLD = 0.01
"""Manipulation check: the surgical arm's shared residual must be below it (T1: ~0)."""


def load_runs(exp_dir: str | Path) -> tuple[dict[str, Any], dict[str, dict[int, RunData]]]:
    """``(experiment config dict, {arm role: {seed: RunData}})``; every run must be done."""
    exp_dir = Path(exp_dir)
    meta_path = exp_dir / "experiment.json"
    if not meta_path.exists():
        raise InvalidArgument(
            f"run_dir={str(exp_dir)!r} has no experiment.json; pass a directory written by "
            "`exchange experiment run CONFIG` (e.g. runs/grpo_norm)."
        )
    meta = json.loads(meta_path.read_text())
    out: dict[str, dict[int, RunData]] = {}
    for arm in meta["arms"]:
        out[role_key(arm)] = {}
        for seed in meta["seeds"]:
            d = exp_dir / arm["name"] / f"seed{seed}"
            if not (d / "done.json").exists():
                n = len(read_metrics(d / "metrics.jsonl"))
                raise InvalidArgument(
                    f"run_dir={str(d)!r} is unfinished ({n}/{meta['train']['steps']} steps); finish it with "
                    "`exchange experiment run CONFIG` (it resumes)."
                )
            run = read_run(d)
            out[role_key(arm)][seed] = RunData(run.init, run.rows, meta["target_accuracy"], str(d),
                                             meta.get("mechanism", ""))
    return meta, out


def role_key(arm: dict[str, Any]) -> str:
    """The key of an arm in :func:`load_runs`' mapping: its role, and for a dose arm
    (several per experiment) ``"dose:<keep>"``."""
    return f"dose:{arm['keep']:g}" if arm["role"] == "dose" else arm["role"]


def identity_orientation(meta: dict[str, Any]) -> str:
    """Why the pilot's orientation of P2/P3 is fixed by an identity of the design, or "".

    With the reward-length link (``long_wrong``: no filler after a correct answer), the
    template in the prompt and S forced at the head of every response, every correct
    response is ``[S, answer, EOS]`` of one length ``L*`` and every wrong one is at least
    as long; under per-response ``1/L_i`` normalisation (M3) the signed coefficient at S
    is then ``K_S = sum_wrong A_i (1/L_i - 1/L*) / G >= 0`` in every group: the sign is
    the grammar's, not a prediction at risk, so the row is a **positive control** of the
    pipeline (THEORY.md 5, "a sign fixed by construction is not a prediction")."""
    t = meta.get("task", {})
    if t.get("long_wrong") and t.get("forced_style") and t.get("template_in_prompt") and \
            str(meta.get("mechanism", "")).startswith("M3"):
        return ("positive control: the orientation is fixed by the grammar (every correct response is "
                "[S, answer, EOS], so K_S >= 0 in every group under 1/L_i)")
    return ""


def private_probe(meta: dict[str, Any]) -> str:
    """Why the probe S is a private parameter, or "": S teacher-forced at its slot
    (``forced_style``) and no other position may hold it (no ``probe_as_filler``), so its
    output row gets gradient only from the shared residual; Adam then moves it by about lr
    per step whatever the residual's size (issue 42, point 2; THEORY.md 5: a probe must carry
    gradient from other contexts). The issue keeps such a design as a labelled **positive
    control** of the pipeline, not a first-order size test."""
    t = meta.get("task", {})
    if t.get("forced_style") and not t.get("probe_as_filler"):
        return ("positive control: S is private (teacher-forced at its slot and banned everywhere else, so only "
                "the shared residual reaches its output row): the size is not a first-order test")
    return ""


def positive_control(meta: dict[str, Any]) -> str:
    """The P2/P3 rows' positive-control label from the design's data: a sign fixed by the
    grammar (:func:`identity_orientation`), a private probe (:func:`private_probe`), or both."""
    reasons = [r for r in (identity_orientation(meta), private_probe(meta)) if r]
    if not reasons:
        return ""
    return "positive control: " + "; and ".join(r.split(": ", 1)[1] for r in reasons)


def credit_ranges(certs: list[dict[str, Any]]) -> str:
    """S's measured credit per check time: "warm start A to B, end C to D", the range over
    the pilot's checks of ``P(correct | S forced) - P(correct | S banned)``; "" without checks."""
    parts = []
    for when in ("warm start", "end"):
        vals = [c["credit"] for c in certs if c["when"] == when]
        if vals:
            parts.append(f"{when} {min(vals):+.3g} to {max(vals):+.3g}")
    return ", ".join(parts)


@dataclass(frozen=True)
class Row:
    """One prediction's comparison: per-seed values, oriented differences, decision."""

    prediction: Prediction
    against: str
    baseline: list[float]
    other: list[float]
    diffs: list[float]
    decision: Decision | None
    reason: str = ""
    """why there is no decision, or what qualifies it"""
    own: tuple[OwnDrift, ...] = ()
    """issue 42: each arm's drift against its own start (P2/P3), with flat / not flat"""
    control: str = ""
    """non-empty: the row is a positive control (:func:`identity_orientation`), or P1
    restating the manipulation check"""
    measurement: bool = False
    """the probe is not certified: the interval is a measurement, not a verdict"""
    dose: DoseDecision | None = None
    """P2 (issue 42): the dose rule over the design's dose arms; a P2 decision needs it"""

    @property
    def gated(self) -> str:
        """Why a P2 decision is withheld (issue 42's dose rule), or ""."""
        if self.prediction.key != "P2" or self.decision is None or self.decision.verdict is Verdict.UNINFORMATIVE:
            return ""
        if self.dose is None:
            return "no dose arms: first-order scaling untested"
        return "" if self.dose.first_order else f"the effect {self.dose.label}"

    @property
    def label(self) -> str:
        if self.measurement:
            return "measurement (no verdict: the probe is not certified zero-credit)"
        if self.decision is None:
            return Verdict.NOT_TESTED.value
        if not self.prediction.primary:
            return "supporting (no verdict)"
        head = f"{self.control.split(':')[0]}: " if self.control else ""
        if self.gated:
            return head + f"no P2 decision ({self.gated}); measured {self.decision.label}"
        return head + self.decision.label

    def to_dict(self) -> dict[str, Any]:
        p = self.prediction
        return {"prediction": p.key, "claim": p.claim, "statistic": p.statistic, "primary": p.primary,
                "against": self.against, "baseline": self.baseline, "other": self.other, "diffs": self.diffs,
                "decision": None if self.decision is None else self.decision.to_dict(), "label": self.label,
                "reason": self.reason, "own": [o.to_dict() for o in self.own], "control": self.control,
                "measurement": self.measurement, "dose": None if self.dose is None else self.dose.to_dict()}


@dataclass(frozen=True)
class ExperimentResult:
    meta: dict[str, Any]
    pilot: FrozenPilot | None
    rows: list[Row]
    dose: dict[str, dict[str, float | None]]
    """per role: mean shared residual, residual and signed K at the probe event S"""
    kl: dict[str, float | None]
    """per role: mean KL per step on the control contexts"""
    kl_matched: dict[str, bool]
    """per non-baseline role: its KL per step within ``KL_TOLERANCE`` of the baseline's"""
    manipulation_passed: bool
    eval_se: float
    mean_wall_s: float
    notes: list[str] = field(default_factory=list)
    common_rollouts: dict[str, bool] = field(default_factory=dict)
    """``[train] common_rollouts``: per non-baseline role, whether every seed trained on the
    baseline's rollouts at every step (``charts/rollout_hash`` equal); empty when off.
    Part of the manipulation check: arms that saw other data differ in more than the mechanism."""
    kl_scale_max: dict[str, float | None] = field(default_factory=dict)
    """per role: the largest factor the KL-normalised step multiplied a step by (``kl/scale``;
    capped at :data:`exchange.lab.klstep.SCALE_CAP`); empty when the step is off"""
    sampled: SampledP3 | None = None
    """issue 42: P3 at the contexts the policy samples (:mod:`exchange.lab.experiment_report_sampled`)"""

    def verdict(self, key: str) -> str:
        rows = [r for r in self.rows if r.prediction.key == key and r.prediction.primary]
        return rows[0].label if rows else Verdict.NOT_TESTED.value

    def falsifier(self) -> str:
        """THEORY.md's falsifier, read only on a readable pathway pair."""
        if not self.manipulation_passed:
            return "not readable: the manipulation check failed (see the dose at the probe event)"
        pathway = "surgical" if "surgical" in self.kl_matched else "treatment"
        if not self.kl_matched.get(pathway, False):
            return (f"confounded: baseline and {pathway} KL per step on the control contexts differ by more than "
                    f"{100 * KL_TOLERANCE:.0f}%")
        rows = [next((r for r in self.rows if r.prediction.key == k and r.prediction.primary), None)
                for k in ("P2", "P3")]
        gated = [f"{r.prediction.key} {r.label}" for r in rows if r is not None and (r.gated or r.measurement)]
        if gated:
            return "undecided: " + "; ".join(gated)
        vs = [None if r is None else r.decision for r in rows]
        if any(d is None for d in vs):
            keys = [k for k, d in zip(("P2", "P3"), vs) if d is None]
            return f"undecided: {' and '.join(keys)} not tested (the reasons are in their rows)"
        kinds = [d.verdict for d in vs]
        if all(v is Verdict.EFFECT for v in kinds):
            return "survives: removing only the shared-event residual moved P2 and P3 as predicted"
        if all(v in (Verdict.NEGLIGIBLE, Verdict.NEGLIGIBLE_BUT_REAL, Verdict.OPPOSITE) for v in kinds):
            return "supported at this dose: removing the residual left P2 and P3 negligible or opposite"
        return "undecided: " + ", ".join(f"{k} {d.label}" for k, d in zip(("P2", "P3"), vs))

    def to_dict(self) -> dict[str, Any]:
        return {"experiment": self.meta, "pilot": None if self.pilot is None else json.loads(self.pilot.to_json()),
                "rows": [r.to_dict() for r in self.rows], "dose": self.dose, "kl": self.kl,
                "kl_matched": self.kl_matched, "manipulation_passed": self.manipulation_passed,
                "eval_se": self.eval_se, "mean_wall_s": self.mean_wall_s, "notes": self.notes,
                "common_rollouts": self.common_rollouts, "kl_scale_max": self.kl_scale_max,
                "kl_scale_cap": SCALE_CAP, "p3_sampled": None if self.sampled is None else self.sampled.to_dict(),
                "verdicts": {k: self.verdict(k) for k in ("P1", "P2", "P3", "P4")}, "falsifier": self.falsifier()}


def _mean_key(run: RunData, key: str) -> float | None:
    if not any(key in r for r in run.rows):
        return None
    s = run.series(key)
    return float(s.mean()) if len(s) else None


def _avg(values: list[float | None]) -> float | None:
    v = [x for x in values if x is not None]
    return float(np.mean(v)) if v else None


def _row(pred: Prediction, runs, seeds, pilot: FrozenPilot | None, eval_se: float, common: bool = False,
         identity: str = "") -> Row:
    if pred.key == "P4" and "treatment" not in runs:
        return Row(pred, "treatment", [], [], [], None, "no restoring arm: the design tests the pathway, not the method")
    against = pred.against if pred.against in runs else ("surgical" if "surgical" in runs else "treatment")
    if against not in runs:
        return Row(pred, against, [], [], [], None, f"no {pred.against} arm")
    base = [pred.per_run(runs["baseline"][s]) for s in seeds]
    other = [pred.per_run(runs[against][s]) for s in seeds]
    if common and pred.key == "P4":  # the method test needs each arm to sample its own responses
        diffs = [o - b for b, o in zip(base, other)]
        return Row(pred, against, base, other, diffs, None,
                   "common rollouts: the treatment trained on the baseline's samples, not its own, so its "
                   "accuracy is not the method's")
    if pred.orient == "pilot":
        if pilot is None:
            return Row(pred, against, base, other, [], None, "no pilot: no frozen sign or delta_hat")
        sign = pilot.orientation[pred.key]
        if sign == 0:
            return Row(pred, against, base, other, [], None, "the pilot found no sign above round-off at S")
        if pred.against == "surgical" and against != "surgical":
            return Row(pred, against, base, other, [], None, "no surgical arm: the pathway is not isolated")
        diffs = [sign * (b - o) for b, o in zip(base, other)]
    elif pred.orient == "lower":
        diffs = [b - o for b, o in zip(base, other)]
    else:
        diffs = [o - b for b, o in zip(base, other)]
    if len(diffs) < 2 or not all(math.isfinite(d) for d in diffs):
        return Row(pred, against, base, other, diffs, None, "fewer than 2 seeds or an undefined statistic")
    if pred.key == "P4":
        src = SesoiSource(f"one standard error of the greedy accuracy on the fixed eval set ({eval_se:.3g})",
                          prediction_derived=False)
        return Row(pred, against, base, other, diffs, decide_p4(diffs, sesoi=eval_se, sesoi_source=src))
    if pilot is None:
        return Row(pred, against, base, other, diffs, None, "no pilot: no delta_hat")
    if pilot.refused:
        return Row(pred, against, base, other, diffs, None,
                   f"design refused: {100 * pilot.zero_spread:.0f}% of the pilot's groups have zero reward spread")
    pl = pilot.pilots[pred.key]
    own = ()
    if pred.key in PROBES:  # both halves: every arm's own drift, "flat" against the same SESOI
        sesoi = pl.magnitude / 2 if pl.magnitude > 0 else None
        own = tuple(own_drift(role, [pred.per_run(rr[s]) for s in seeds], sesoi) for role, rr in runs.items()
                    if all(math.isfinite(pred.per_run(rr[s])) for s in seeds))
    if pred.key in PROBES and not pilot.certified:
        dose = "" if pl.accepted(len(diffs)) else (
            f"; the design is also uninformative at this dose (delta_hat bracket magnitude {pl.magnitude:.3g} = "
            f"{pl.magnitude / pl.mde(len(diffs)):.2f} MDE)")
        credit = credit_ranges(pilot.certificates)
        credit = f" (its measured credit, P(correct) with S forced minus banned: {credit})" if credit else ""
        return Row(pred, against, base, other, diffs, None, "the probe S is not certified zero-credit" + credit + dose,
                   own=own, measurement=True)
    control = identity if pred.key in PROBES else ""
    if pred.key == "P1" and all(abs(o) < RESIDUAL_THRESHOLD for o in other):
        control = (f"restates the manipulation check: the {against} arm's shared share is 0 by Theorem T1, so "
                   "the difference is the baseline's own share")
    return Row(pred, against, base, other, diffs, decide_signed(pred.key, diffs, pl), own=own, control=control)


def decide_experiment(exp_dir: str | Path) -> ExperimentResult:
    """Typed results of one experiment directory (its runs and ``pilot.json``)."""
    exp_dir = Path(exp_dir)
    meta, runs = load_runs(exp_dir)
    pilot = load_pilot(exp_dir / "pilot.json") if (exp_dir / "pilot.json").exists() else None
    seeds = meta["seeds"]
    if pilot is not None and set(pilot.seeds) & set(seeds):
        raise InvalidArgument(f"{exp_dir}: the test seeds {sorted(set(pilot.seeds) & set(seeds))} froze the pilot.")
    acc = float(np.mean([r.init[mk.EVAL_ACCURACY] for r in runs["baseline"].values()]))
    n_eval = meta["train"]["eval_prompts"]
    eval_se = math.sqrt(max(acc * (1 - acc), 0.25 / n_eval) / n_eval)
    common = bool(meta["train"].get("common_rollouts"))
    rows = [_row(p, runs, seeds, pilot, eval_se, common, positive_control(meta)) for p in PREDICTIONS]
    rows = [_with_dose(r, runs, seeds, pilot) for r in rows]
    dose = {role: {MANIPULATION_KEY: _avg([_mean_key(r, MANIPULATION_KEY) for r in rr.values()]),
                   mk.STYLE_RESIDUAL: _avg([_mean_key(r, mk.STYLE_RESIDUAL) for r in rr.values()]),
                   mk.STYLE_K_SIGNED: _avg([_mean_key(r, mk.STYLE_K_SIGNED) for r in rr.values()])}
            for role, rr in runs.items()}
    kl = {role: _avg([_mean_key(r, KL_KEY) for r in rr.values()]) for role, rr in runs.items()}
    b = kl["baseline"]
    matched = {role: bool(v is not None and b is not None and b > 0 and abs(v / b - 1) <= KL_TOLERANCE)
               for role, v in kl.items() if role != "baseline"}
    base_res = dose["baseline"][mk.STYLE_RESIDUAL]
    passed = "surgical" not in runs or (
        (dose["surgical"][MANIPULATION_KEY] or 0.0) < RESIDUAL_THRESHOLD and base_res is not None and base_res > 0)
    common = _common_rollouts(meta, runs, seeds)
    passed = passed and all(common.values())
    walls = [json.loads((exp_dir / a["name"] / f"seed{s}" / "done.json").read_text())["wall_s"]
             for a in meta["arms"] for s in seeds]
    scale = {role: max((float(r.series(mk.KL_SCALE).max()) for r in rr.values()
                        if any(mk.KL_SCALE in row for row in r.rows)), default=None)
             for role, rr in runs.items()} if meta["train"].get("kl_target") else {}
    return ExperimentResult(meta, pilot, rows, dose, kl, matched, passed, eval_se, sum(walls) / len(walls),
                            common_rollouts=common, kl_scale_max=scale,
                            sampled=sampled_p3(exp_dir, meta, runs, positive_control(meta),
                                               certified=pilot is not None and pilot.certified))


def _with_dose(row: Row, runs, seeds, pilot: FrozenPilot | None) -> Row:
    """The P2 primary row with the dose rule over the dose arms (``dose:<keep>`` roles):
    ``d_f = sign * (arm_f - surgical)``, ``d_1 = sign * (baseline - surgical)`` per seed,
    SESOI = half the lower end of delta_hat's bracket (:mod:`exchange.lab.dose_rule`)."""
    p = row.prediction
    doses = sorted((float(k.split(":")[1]), k) for k in runs if k.startswith("dose:"))
    if p.key != "P2" or not p.primary or not doses or row.decision is None or "surgical" not in runs:
        return row
    sign = pilot.orientation[p.key]
    surg = [p.per_run(runs["surgical"][s]) for s in seeds]
    full = [sign * (b - o) for b, o in zip(row.baseline, surg)]
    d = [[sign * (p.per_run(runs[k][s]) - o) for s, o in zip(seeds, surg)] for _, k in doses]
    sesoi = row.decision.sesoi
    if sesoi is None:
        return row
    return dataclasses.replace(row, dose=decide_dose(p.key, [f for f, _ in doses], d, full, sesoi))


def _common_rollouts(meta: dict[str, Any], runs, seeds) -> dict[str, bool]:
    """Per non-baseline role: its rollout hashes equal the baseline's at every step of every
    seed (only with ``[train] common_rollouts``)."""
    if not meta["train"].get("common_rollouts"):
        return {}
    out = {}
    for role, rr in runs.items():
        if role == "baseline":
            continue
        out[role] = all(
            len(rr[s].series(ROLLOUT_HASH)) == len(runs["baseline"][s].series(ROLLOUT_HASH)) > 0
            and bool(np.array_equal(rr[s].series(ROLLOUT_HASH), runs["baseline"][s].series(ROLLOUT_HASH)))
            for s in seeds)
    return out
