"""Experiment reports rendered from typed results: summary files, markdown, claims rows.

``report_experiment(exp_dir)`` decides one experiment directory with
:func:`exchange.lab.experiment_decision.decide_experiment` (its runs and frozen pilot,
by the rule of :mod:`exchange.lab.verdict`) and writes ``summary.json``, ``summary.md`` and
the curves plot. Everything printed comes from the typed
:class:`exchange.lab.experiment_decision.ExperimentResult`; nothing is parsed back from
prose. :func:`claims_rows` and :func:`series_sections` render the rows and sections of
docs/claims.md and docs/experiments.md, and :func:`replace_section` is the one helper that
rewrites a generated section of a markdown file.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

from exchange.core import metric_keys as mk
from exchange.lab.experiment_decision import (
    KL_TOLERANCE,
    ExperimentResult,
    credit_ranges,
    decide_experiment,
    load_runs,
)
from exchange.lab.experiment_report_record import NO_REPRODUCE, DoseRecord, RunRecord
from exchange.lab.experiment_report_sampled import sampled_claims_cells, sampled_markdown
from exchange.lab.experiment_report_series import (
    SERIES_KEYS,
    dose_series,
    series_claims_rows,
    series_markdown,
    series_of,
)
from exchange.lab.klstep import SCALE_CAP
from exchange.lab.pilot import PROBES
from exchange.lab.predictions import MANIPULATION_KEY
from exchange.lab.report_parts import cell as _cell
from exchange.lab.report_parts import dose_lines, own_drift_cell, own_drift_lines
from exchange.lab.report_parts import fmt as _fmt
from exchange.lab.runlog import atomic_write_text
from exchange.lab.verdict import interval

__all__ = ["BEGIN", "CLAIMS_BEGIN", "CLAIMS_END", "END", "claims_rows", "replace_section", "report_experiment",
           "report_experiments", "series_sections"]

BEGIN, END = "<!-- BEGIN GENERATED RESULTS -->", "<!-- END GENERATED RESULTS -->"
CLAIMS_BEGIN, CLAIMS_END = "<!-- BEGIN GENERATED CLAIMS -->", "<!-- END GENERATED CLAIMS -->"
HALF_LOW = "half the bracket's lower end"


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
    lines = ["| claim | experiment | verdict | evidence (oriented paired diff, 95% CI, delta_hat, SESOI, MDE; each arm's own drift; the dose rule) | reproduce |",
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
            ev += "".join(f"; {x}" for x in (own_drift_cell(r.own), f"dose rule: {r.dose.label}" if r.dose else "") if x)
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
