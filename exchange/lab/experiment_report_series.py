"""A dose series in the report: several experiments that are one config at several doses.

``experiments/dose_response.py`` trains variants of a base config (``--dose
"reuse4:train.epochs=4"``) and records in each one's ``experiment.json`` what produced it
(:class:`exchange.lab.experiment_report_record.DoseRecord`). Experiments that share one
base config (the base's own run and its recorded doses) form a series; :func:`dose_series` decides its prediction
with the rule fixed before issue 42's M1 series ran (docs/experiments.md, commit 790e730):

- the least-squares slope of the doses' paired differences on their frozen ``delta_hat``
  through the origin (:func:`exchange.lab.verdict.decide_dose_response`, the design
  accepted when ``1 >= 3 x MDE`` of the slope);
- each dose's **own** 95% interval against its own ``delta_hat`` bracket
  (:func:`exchange.lab.verdict.size_against`), because through the origin the largest dose
  hides the others;
- **follows the dose** when the slope is an effect whose interval contains 1 and every
  dose is compatible; **departs** when the slope's interval excludes 1 or a dose's
  interval lies wholly above or below its bracket; otherwise undecided.

The label also says what the design cannot support: the rows' positive-control reason
(a sign fixed by the grammar, a private probe), and a pair that differs in more than the
mechanism (the surgical arm not flat: its own drift outside ±SESOI; the KL per step
confounded).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import numpy as np

from exchange.errors import InvalidArgument
from exchange.lab.experiment_report_record import NO_REPRODUCE, DoseRecord, flat_config
from exchange.lab.report_parts import cell as _cell
from exchange.lab.report_parts import fmt as _fmt
from exchange.lab.verdict import (
    NOT_FLAT,
    DoseResponse,
    OwnDrift,
    Size,
    Verdict,
    decide_dose_response,
    interval,
    size_against,
)

__all__ = ["SERIES_KEYS", "DoseSeries", "SeriesDose", "dose_series", "series_claims_rows", "series_markdown",
           "series_of"]

SERIES_KEYS = ("P2",)
"""The predictions a series publishes a verdict for: issue 42's dose rule is P2's (a P2
decision requires the effect to follow the dose). dose_response.py prints P3's series too,
but the primary P3 row's orientation is frozen at sampled contexts while its statistic is
measured at fixed ones (docs/experiments.md), so its slope is not published as a verdict.
P3 at the sampled contexts themselves is reported per experiment
(:mod:`exchange.lab.experiment_report_sampled`), not as a series."""
def series_of(results: list[Any]) -> list[list[Any]]:
    """The dose series among ``results`` (ExperimentResults): the experiments whose base
    config is one file (a base run's ``source``, a dose's :class:`DoseRecord` ``config``),
    at least one of them a recorded dose; in the given order. Raises when a member's config
    is not the base config with its recorded changes (they would not be one design)."""
    groups: dict[str, list[Any]] = {}
    for res in results:
        rec = DoseRecord.from_meta(res.meta)
        cfg = rec.config if rec is not None else res.meta.get("source")
        if cfg:
            groups.setdefault(str(PurePosixPath(cfg)), []).append(res)
    out = []
    for cfg, members in groups.items():
        recs = [DoseRecord.from_meta(r.meta) for r in members]
        if len(members) < 2 or all(r is None for r in recs):
            continue
        bases = [flat_config(m.meta) if r is None else r.base_config(m.meta) for m, r in zip(members, recs)]
        for m, b in zip(members[1:], bases[1:]):
            diff = sorted(k for k in set(b) | set(bases[0]) if b.get(k) != bases[0].get(k))
            if diff:
                raise InvalidArgument(
                    f"{m.meta['name']}: its config is not {cfg} with its recorded dose ({diff[:3]} differ from "
                    f"{members[0].meta['name']}'s); a dose series needs one base config.")
        out.append(members)
    return out


@dataclass(frozen=True)
class SeriesDose:
    """One dose of a series: its own paired interval against its own prediction."""

    name: str
    change: str
    """what the dose changed from the base config ("the base config" for the base run)"""
    delta_hat: float
    """the frozen prediction along the baseline's path (the slope's x)"""
    bracket: tuple[float, float]
    mean: float
    low: float
    high: float
    n: int
    size: Size
    """the interval against the bracket (smaller / compatible / larger)"""
    surgical: OwnDrift | None
    """the surgical arm's own drift (THEORY.md: the exchangeable arm stays flat)"""
    kl_matched: bool | None
    certified: bool


@dataclass(frozen=True)
class DoseSeries:
    """One prediction decided over a dose series (the module's rule)."""

    key: str
    config: str
    doses: tuple[SeriesDose, ...]
    slope: DoseResponse | None
    control: str = ""
    """the members' positive-control reason (the rows' ``control``), or "" """
    reason: str = ""
    """why there is no slope (the doses' frozen signs differ)"""

    @property
    def verdict(self) -> str:
        s = self.slope
        if s is None:
            return f"{Verdict.NOT_TESTED.value} ({self.reason})"
        if not all(d.certified for d in self.doses):
            return "measurement (no verdict: the probe is not certified zero-credit at every dose)"
        if not s.accepted:
            return Verdict.UNINFORMATIVE.value
        above = s.low > 1 or any(d.size is Size.LARGER for d in self.doses)
        below = s.high < 1 or any(d.size is Size.SMALLER for d in self.doses)
        if above or below:
            side = ("larger at some doses, smaller at others" if above and below else
                    Size.LARGER.value if above else Size.SMALLER.value)
            return f"departs from first order ({side})"
        if s.verdict is Verdict.EFFECT:
            return "follows the dose"
        return f"undecided (slope {s.label})"

    @property
    def qualifications(self) -> list[str]:
        """How the pair differs in more than the mechanism."""
        out = []
        moved = [d for d in self.doses if d.surgical is not None and d.surgical.flat == NOT_FLAT]
        if moved:
            out.append(f"the surgical arm is not flat at {len(moved)} of {len(self.doses)} doses (its own drift's "
                       "interval is not inside ±SESOI)")
        kl = [d.name for d in self.doses if d.kl_matched is False]
        if kl:
            out.append(f"KL per step confounded at {', '.join(kl)}")
        return out

    @property
    def label(self) -> str:
        head = f"{self.control.split(':')[0]}: " if self.control else ""
        quals = self.qualifications
        return head + self.verdict + (f"; pair not clean: {'; '.join(quals)}" if quals else "")


def dose_series(members: list[Any], key: str) -> DoseSeries:
    """Decide ``key`` over the series ``members`` (ExperimentResults with frozen pilots):
    each dose's primary ``key`` row (its oriented paired differences and own drifts), the
    frozen ``delta_hat`` per dose, the slope through the origin, each dose's own interval."""
    cfg = ""
    doses, diffs, pilots = [], [], []
    for res in members:
        rec = DoseRecord.from_meta(res.meta)
        cfg = cfg or (rec.config if rec is not None else res.meta.get("source", ""))
        row = next(r for r in res.rows if r.prediction.key == key and r.prediction.primary)
        if res.pilot is None or len(row.diffs) < 2 or not all(math.isfinite(x) for x in row.diffs):
            return DoseSeries(key, cfg, tuple(doses), None, reason=f"{res.meta['name']}: {row.reason or 'no pilot'}")
        pl = res.pilot.pilots[key]
        mean, low, high, _, n = interval(row.diffs)
        surg = next((o for o in row.own if o.role == "surgical"), None)
        doses.append(SeriesDose(res.meta["name"], "the base config" if rec is None else rec.change, pl.delta_hat,
                                pl.bracket, mean, low, high, n, size_against(low, high, pl.bracket), surg,
                                res.kl_matched.get("surgical"), res.pilot.certified))
        diffs.append(row.diffs)
        pilots.append(pl)
    control = "; ".join(dict.fromkeys(c for c in (_control(m, key) for m in members) if c))
    signs = {m.pilot.orientation[key] for m in members}
    if len(signs) != 1 or 0 in signs:
        return DoseSeries(key, cfg, tuple(doses), None, control,
                          f"the doses' frozen signs differ or are missing ({sorted(signs)}): no common orientation")
    if len({len(d) for d in diffs}) != 1:
        return DoseSeries(key, cfg, tuple(doses), None, control, "the doses have different numbers of test seeds")
    slope = decide_dose_response(key, [p.delta_hat for p in pilots], np.asarray(diffs), pilots)
    return DoseSeries(key, cfg, tuple(doses), slope, control)


def _control(res: Any, key: str) -> str:
    return next((r.control for r in res.rows if r.prediction.key == key and r.prediction.primary), "")


def _reproduce(members: list[Any], run) -> str:
    """``run(res)``: ``(training command, run directory)`` of one member."""
    cmds = dict.fromkeys(run(m)[0] if run(m)[0].startswith(NO_REPRODUCE) else f"`{run(m)[0]}`" for m in members)
    return f"{'; '.join(cmds)}; then `python -m exchange experiment report {' '.join(run(m)[1] for m in members)}`"


def _evidence(s: DoseSeries) -> str:
    sl = s.slope
    head = (f"slope {_fmt(sl.slope)} [{_fmt(sl.low)}, {_fmt(sl.high)}] over {sl.n} differences (through the origin "
            f"on delta_hat; first order predicts 1; MDE {_fmt(sl.mde)})" if sl is not None else s.reason)
    per = "; ".join(
        f"{d.name}, {d.change}: {_fmt(d.mean)} [{_fmt(d.low)}, {_fmt(d.high)}] against delta_hat "
        f"[{_fmt(d.bracket[0])}, {_fmt(d.bracket[1])}], {d.size.value}"
        + ("" if d.surgical is None else f", surgical own drift {_fmt(d.surgical.mean)} [{_fmt(d.surgical.low)}, "
           f"{_fmt(d.surgical.high)}] {d.surgical.flat} (±SESOI {_fmt(d.surgical.sesoi)})") for d in s.doses)
    return f"{head}; per dose: {per}" + (f"; {s.control}" if s.control else "")


def series_claims_rows(results: list[Any], run) -> list[str]:
    """docs/claims.md rows, one per series and key of :data:`SERIES_KEYS`; ``run`` maps an
    ExperimentResult to ``(the command that trains it, its run directory)``."""
    out = []
    for members in series_of(results):
        for key in SERIES_KEYS:
            s = dose_series(members, key)
            names = ", ".join(m.meta["name"] for m in members)
            out.append(f"| {key} dose series: the paired difference follows delta_hat across the doses (slope 1, each "
                       f"dose compatible) | {names} (baseline vs surgical) | {_cell(s.label)} | "
                       f"{_cell(_evidence(s))} | {_reproduce(members, run)} |")
    return out


def series_markdown(results: list[Any], run) -> str:
    """docs/experiments.md: one section per series and key of :data:`SERIES_KEYS`."""
    out = []
    for members in series_of(results):
        for key in SERIES_KEYS:
            s = dose_series(members, key)
            out += [f"### {key} dose series of {s.config}", "",
                    "The dose-series rule (issue 42; fixed in 790e730 before the first series trained): the slope of the doses' paired differences on "
                    "their frozen delta_hat through the origin must contain 1 (an effect, the design accepted at "
                    "1 >= 3 MDE of the slope) **and** each dose's own 95% interval must be compatible with its own delta_hat "
                    "bracket; a slope interval excluding 1, or a dose's interval wholly above or below its bracket, "
                    "departs. The surgical arm's own drift is THEORY.md's other half (flat: inside ±SESOI).", "",
                    "| dose | change | paired diff | 95% CI | delta_hat bracket | against it | surgical own drift | "
                    "95% CI | ±SESOI | flat? | KL per step |", "|---|---|---|---|---|---|---|---|---|---|---|"]
            for d in s.doses:
                o = d.surgical
                own = "n/a | n/a | n/a | n/a" if o is None else (
                    f"{_fmt(o.mean)} | [{_fmt(o.low)}, {_fmt(o.high)}] | {_fmt(o.sesoi)} | {o.flat}")
                kl = "n/a" if d.kl_matched is None else "matched" if d.kl_matched else "CONFOUNDED"
                out.append(f"| {d.name} | {d.change} | {_fmt(d.mean)} | [{_fmt(d.low)}, {_fmt(d.high)}] | "
                           f"[{_fmt(d.bracket[0])}, {_fmt(d.bracket[1])}] | {d.size.value} | {own} | {kl} |")
            sl = s.slope
            out += ["", "Slope: " + (s.reason if sl is None else
                                     f"{_fmt(sl.slope)} [{_fmt(sl.low)}, {_fmt(sl.high)}] over {sl.n} differences, "
                                     f"MDE {_fmt(sl.mde)} ({'accepted' if sl.accepted else 'uninformative'}): "
                                     f"{sl.label}."), "",
                    f"Verdict: **{s.label}**" + (f" ({s.control})" if s.control else "") + ".", "",
                    f"Reproduce: {_reproduce(members, run)}.", ""]
    return "\n".join(out)
