"""Experiment reports built from typed results: verdicts, manipulation checks, markdown.

``report_experiment(exp_dir)`` reads every run of one experiment directory (written by
``exchange experiment run``) and its frozen pilot (``pilot.json``), decides each
prediction of :data:`exchange.lab.predictions.PREDICTIONS` by the rule of
:mod:`exchange.lab.verdict` (delta_hat from the pilot, SESOI = delta_hat / 2, designs
accepted only at delta_hat >= 3 MDE), and writes ``summary.json``, ``summary.md`` and
the plots. Everything printed comes from the typed :class:`ExperimentResult`; nothing
is parsed back from prose. :func:`replace_section` is the one helper that rewrites a
generated section of a markdown file (docs/experiments.md, docs/claims.md).
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from exchange.core import metric_keys as mk
from exchange.errors import InvalidArgument
from exchange.lab.dose_rule import DoseDecision, decide_dose
from exchange.lab.experiment_report_sampled import SampledP3, sampled_claims_cells, sampled_markdown, sampled_p3
from exchange.lab.experiment_report_record import NO_REPRODUCE, DoseRecord, RunRecord
from exchange.lab.experiment_report_series import (
    SERIES_KEYS,
    dose_series,
    series_claims_rows,
    series_markdown,
    series_of,
)
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
from exchange.lab.report_parts import cell as _cell
from exchange.lab.report_parts import dose_lines, own_drift_lines
from exchange.lab.report_parts import fmt as _fmt
from exchange.lab.runlog import atomic_write_text, read_metrics
from exchange.lab.verdict import (
    Decision,
    OwnDrift,
    SesoiSource,
    Verdict,
    decide_p4,
    decide_signed,
    interval,
    own_drift,
)

__all__ = ["BEGIN", "CLAIMS_BEGIN", "CLAIMS_END", "END", "ExperimentResult", "Row", "claims_rows", "decide_experiment",
           "load_runs", "positive_control", "replace_section", "report_experiment", "report_experiments",
           "series_sections"]

BEGIN, END = "<!-- BEGIN GENERATED RESULTS -->", "<!-- END GENERATED RESULTS -->"
CLAIMS_BEGIN, CLAIMS_END = "<!-- BEGIN GENERATED CLAIMS -->", "<!-- END GENERATED CLAIMS -->"
KL_TOLERANCE = 0.10
"""Arms whose mean control-context KL per step differ by more than this (relative) are
confounded by step size."""
HALF_LOW = "half the bracket's lower end"
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


def _run(res: ExperimentResult) -> tuple[str, str]:
    """``(the command that trains it, its run directory)``: a dose of experiments/dose_response.py
    is rerun by its recorded call (:class:`DoseRecord`), any other run by its config and the
    ``--seeds``/``--steps`` it was run with (:class:`RunRecord`). Where that command would
    not retrain the run (:meth:`RunRecord.refusal`) the first item is ``NO_REPRODUCE`` and
    the reason, and no command is printed."""
    rec = DoseRecord.from_meta(res.meta)
    if rec is not None:
        return rec.train_command, rec.run_dir(res.meta["name"])
    run = RunRecord.from_meta(res.meta)
    why = run.refusal(res.meta, root=str(Path(__file__).resolve().parents[2]))
    return (run.train_command if why is None else f"{NO_REPRODUCE}{why}"), f"runs/{res.meta['name']}"


def _reproduce(res: ExperimentResult) -> str:
    cmd, run_dir = _run(res)
    if cmd.startswith(NO_REPRODUCE):
        return cmd
    return f"`{cmd} && python -m exchange experiment report {run_dir}`"


def credit_ranges(certs: list[dict[str, Any]]) -> str:
    """S's measured credit per check time: "warm start A to B, end C to D", the range over
    the pilot's checks of ``P(correct | S forced) - P(correct | S banned)``; "" without checks."""
    parts = []
    for when in ("warm start", "end"):
        vals = [c["credit"] for c in certs if c["when"] == when]
        if vals:
            parts.append(f"{when} {min(vals):+.3g} to {max(vals):+.3g}")
    return ", ".join(parts)


def _markdown(res: ExperimentResult, img_prefix: str) -> str:
    m = res.meta
    arms = "; ".join(f"{a['role']} `{a['name']}` = `{a['objective']}`" + (f" with {a['params']}" if a["params"] else "")
                     for a in m["arms"])
    t = m["train"]
    rec = DoseRecord.from_meta(m)
    desc = m["description"].strip() if rec is None else rec.describe(m["description"])
    lines = [f"### {m['name']}", "", f"Arms: {arms}.", "", desc, "",
             f"Mechanism: {m['mechanism'] or '(not stated)'}. Task `{m['task']['name']}` (style_p "
             f"{m['task']['style_p']}), model `{m['model'].get('kind', 'transformer')}`, test seeds {m['seeds']}, "
             f"pilot seeds {m.get('pilot_seeds', [])}, {t['steps']} steps x {t['prompts_per_step']} prompts x "
             f"G={t['group_size']}, {t['epochs']} epochs x {t['minibatches']} minibatches, {t['optimizer']} "
             f"lr={t['lr']}, KL target {t.get('kl_target', 0) or 'off'}. Mean wall time per run: "
             f"{res.mean_wall_s:.1f} s.", ""]
    p = res.pilot
    if p is None:
        lines += ["**No pilot**: no delta_hat, so no P1-P3 verdict (the design cannot be judged).", ""]
    else:
        lines += ["**Pilot** (frozen before the test seeds): " + " ".join(p.notes), "",
                  "| prediction | sign | delta_hat (baseline path) | delta_hat (surgical path) | pilot SD | MDE at the "
                  "test's seeds | bracket magnitude / MDE | design |",
                  "|---|---|---|---|---|---|---|---|"]
        n = len(m["seeds"])
        for key, pl in p.pilots.items():
            mde = pl.mde(n) if n >= 2 else float("nan")
            ratio = pl.magnitude / mde if mde and mde > 0 else float("nan")
            lines.append(f"| {key} | {p.orientation[key]:+d} | {_fmt(pl.delta_hat)} | {_fmt(pl.delta_hat_surgical)} | "
                         f"{_fmt(pl.sd)} | {_fmt(mde)} | "
                         f"{_fmt(ratio)} | {'accepted' if n >= 2 and pl.accepted(n) else 'uninformative at this dose'} |")
        cert = (f"bound ±{_fmt(p.bound)} P(correct) from delta_hat_P2/3 and the measured sensitivity "
                f"{_fmt(p.sensitivity)} nats per unit credit" if p.bound is not None else "no bound")
        ok = sum(c["certified"] for c in p.certificates)
        measured = (f"; S's measured credit (P(correct) with S forced minus banned, range over the pilot's "
                    f"{len(p.certificates)} checks): {credit_ranges(p.certificates)}" if p.certificates else "")
        if p.certified and not p.certificates:  # no measured check: say what certifies it instead of "0/0"
            lines += ["", "**Certificate of S**: by construction, no measured check (S is teacher-forced at the "
                      f"probe position, which carries no credit there); warm-start p(S) = {p.p_style:.2f}.", ""]
        else:
            lines += ["", f"**Forced-prefix certificate of S** ({cert}): {ok}/{len(p.certificates)} checks certified "
                      f"(warm start and end, pilot baseline and surgical runs): "
                      f"**{'certified' if p.certified else 'NOT certified'}**; warm-start p(S) = {p.p_style:.2f}"
                      f"{measured}.", ""]
    dose = "; ".join(f"{role} residual {_fmt(d[MANIPULATION_KEY])}, at S {_fmt(d[mk.STYLE_RESIDUAL])} "
                     f"(signed K {_fmt(d[mk.STYLE_K_SIGNED])})" for role, d in res.dose.items())
    kl = ", ".join(f"{role} {_fmt(v)}" for role, v in res.kl.items()) + "; " + ", ".join(
        f"{role} {'matched' if ok else 'CONFOUNDED'}" for role, ok in res.kl_matched.items())
    if res.common_rollouts:
        dose += "; common rollouts: " + ", ".join(
            f"{role} {'identical to the baseline at every step' if ok else 'DIFFERENT DATA'}"
            for role, ok in res.common_rollouts.items())
    lines += [f"1. **Manipulation check** (dose at the probe event S): {dose}: "
              f"**{'passed' if res.manipulation_passed else 'FAILED'}**.",
              f"2. **KL per step on the control contexts** (against the baseline, tolerance "
              f"{100 * KL_TOLERANCE:.0f}%): {kl}.",
              f"3. **Eval standard error** (P4's margin; not derived from a prediction, so no P4 'negligible' "
              f"against it): {res.eval_se:.3g}.",
              "4. **KL-normalised step**: " + ("off." if not res.kl_scale_max else
                                               f"cap {SCALE_CAP:g}x; largest factor per arm: " + ", ".join(
                  f"{role} {_fmt(v)}" + (" (HIT THE CAP)" if v is not None and v >= SCALE_CAP else "")
                  for role, v in res.kl_scale_max.items()) + "."), "",
              "Differences are oriented so that the prediction is > 0. 95% paired t-interval; MDE at 80% power; "
              "delta_hat is bracketed by the attribution along the baseline's and the surgical arm's paths; "
              "SESOI = half the bracket's lower end; smaller / compatible / larger against the bracket; a design is "
              "accepted on power (bracket >= 3 MDE), never on delta_hat's sign (verdict rule of issues 31 and 42).", "",
              "| pred. | vs | statistic | diff | 95% CI | seeds > 0 | delta_hat bracket | SESOI | MDE | verdict |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res.rows:
        tag = "" if r.prediction.primary else " (supporting)"
        d = r.decision
        if d is None and len(r.diffs) >= 2 and all(math.isfinite(x) for x in r.diffs):
            mean, lo, hi, _, n = interval(r.diffs)
            cells = f"{_fmt(mean)} | [{_fmt(lo)}, {_fmt(hi)}] | {sum(x > 0 for x in r.diffs)}/{n} | n/a | n/a | n/a"
        elif d is None:
            cells = "n/a | n/a | n/a | n/a | n/a | n/a"
        else:
            br = "n/a" if d.delta_hat is None else (
                _fmt(d.delta_hat) if r.prediction.key not in PROBES or res.pilot is None else
                "[{}, {}]".format(*map(_fmt, res.pilot.pilots[r.prediction.key].bracket)))
            cells = (f"{_fmt(d.mean)} | [{_fmt(d.low)}, {_fmt(d.high)}] | {d.n_positive}/{d.n} | {br} | "
                     f"{_fmt(d.sesoi)} | {_fmt(d.mde)}")
        verdict = r.label + (f" ({r.reason})" if r.reason else "") + (f" ({r.control})" if r.control else "")
        lines.append(f"| {r.prediction.key}{tag} | {r.against} | {_cell(r.prediction.statistic)} | {cells} | "
                     f"{_cell(verdict)} |")
    lines += ["", *own_drift_lines(res.rows), *dose_lines(res.rows)]
    if res.sampled is not None:
        lines += ([] if lines[-1] == "" else [""]) + sampled_markdown(res.sampled)
    lines += ["", f"Falsifier: {res.falsifier()}.", "", f"Reproduce: {_reproduce(res)}.", "",
              f"![{m['name']} curves]({img_prefix}exp_{m['name']}_curves.png)", ""]
    return "\n".join(lines)


def report_experiment(exp_dir: str | Path) -> ExperimentResult:
    """Decide, write (``summary.json``, ``summary.md``, the curves plot) and return the result."""
    from exchange.lab.plots import plot_curves

    exp_dir = Path(exp_dir)
    res = decide_experiment(exp_dir)
    _, runs = load_runs(exp_dir)
    plot_curves(res.meta, runs, exp_dir / f"exp_{res.meta['name']}_curves.png")
    atomic_write_text(exp_dir / "summary.json", json.dumps(res.to_dict(), indent=2))
    atomic_write_text(exp_dir / "summary.md", _markdown(res, ""))
    return res


def replace_section(path: str | Path, begin: str, end: str, body: str, *, title: str = "") -> None:
    """Rewrite the text between the markers ``begin`` and ``end`` of ``path`` with ``body``
    (appended, markers included, when absent; the file is created with ``title``)."""
    path = Path(path)
    text = path.read_text() if path.exists() else (f"{title}\n" if title else "")
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + begin + "\n" + body.strip() + "\n" + end + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + begin + "\n" + body.strip() + "\n" + end + "\n"
    atomic_write_text(path, text)


def claims_rows(results: list[ExperimentResult]) -> str:
    """Markdown table rows (one per experiment x primary prediction) for docs/claims.md."""
    lines = ["| claim | experiment | verdict | evidence (oriented paired diff, 95% CI, delta_hat, SESOI, MDE) | reproduce |",
             "|---|---|---|---|---|"]
    for res in results:
        name = res.meta["name"]
        for r in res.rows:
            if not r.prediction.primary:
                continue
            d = r.decision
            pl = res.pilot.pilots.get(r.prediction.key) if res.pilot is not None and d is not None else None
            pred = ("n/a" if d is None or d.delta_hat is None else
                    "[{}, {}]".format(*map(_fmt, pl.bracket)) if pl is not None else _fmt(d.delta_hat))
            ev = (f"{_fmt(d.mean)} [{_fmt(d.low)}, {_fmt(d.high)}], delta_hat {pred}, SESOI "
                  f"{_fmt(d.sesoi)} ({HALF_LOW if d.delta_hat is not None else d.sesoi_derivation}), "
                  f"MDE {_fmt(d.mde)}" if d is not None else r.reason)
            verdict = r.label if r.decision is None or res.falsifier().split(":")[0] not in (
                "not readable", "confounded") else f"{r.label} (pair {res.falsifier().split(':')[0]})"
            lines.append(f"| {r.prediction.key}: {r.prediction.claim} | {name} (baseline vs {r.against}) | "
                         f"{_cell(verdict)} | {_cell(ev)} | {_reproduce(res)} |")
        if res.sampled is not None and res.sampled.interval is not None:
            verdict, ev = sampled_claims_cells(res.sampled)
            pair = res.falsifier().split(":")[0]
            verdict += f" (pair {pair})" if res.sampled.decision is not None and pair in ("not readable",
                                                                                          "confounded") else ""
            lines.append(f"| P3 at the sampled contexts: {res.sampled.claim} | {name} (baseline vs "
                         f"{res.sampled.against}) | {_cell(verdict)} | {_cell(ev)} | {_reproduce(res)} |")
        lines.append(f"| Falsifier (THEORY.md 5) | {name} | {res.falsifier().split(':')[0]} | "
                     f"{_cell(res.falsifier())} | {_reproduce(res)} |")
    return "\n".join(lines + series_claims_rows(results, _run))


def series_sections(results: list[ExperimentResult]) -> str:
    """The markdown of every dose series among ``results``
    (:mod:`exchange.lab.experiment_report_series`), after the experiments' own sections."""
    return series_markdown(results, _run)


def report_experiments(exp_dirs: list[str | Path], *, img_dir: str | Path | None = None,
                       markdown: str | Path | None = None, claims: str | Path | None = None) -> list[str]:
    """Report each experiment; optionally copy plots to ``img_dir``, render all of them
    into ``markdown`` and the claims rows into ``claims`` (each between its generated
    markers, :func:`replace_section`). Returns one verdict line per experiment, then one per
    dose series (:mod:`exchange.lab.experiment_report_series`)."""
    results = [report_experiment(d) for d in exp_dirs]
    if img_dir is not None:
        Path(img_dir).mkdir(parents=True, exist_ok=True)
        for d, res in zip(exp_dirs, results):
            name = f"exp_{res.meta['name']}_curves.png"
            shutil.copyfile(Path(d) / name, Path(img_dir) / name)
    if markdown is not None:
        md = Path(markdown)
        prefix = ""
        if img_dir is not None:
            prefix = Path(img_dir).resolve().relative_to(md.resolve().parent).as_posix() + "/"
        replace_section(md, BEGIN, END, "\n".join([_markdown(r, prefix) for r in results] + [series_sections(results)]),
                        title="# Training experiments")
    if claims is not None:
        replace_section(claims, CLAIMS_BEGIN, CLAIMS_END, claims_rows(results), title="# Claims and verdicts")
    return [f"{r.meta['name']}: " + ", ".join(f"{k} {r.verdict(k)}" for k in ("P1", "P2", "P3", "P4"))
            + f"; falsifier {r.falsifier()}" for r in results] + [
        f"{key} dose series of {s.config}: {s.label}" for members in series_of(results) for key in SERIES_KEYS
        if (s := dose_series(members, key))]
