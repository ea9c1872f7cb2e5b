"""Experiment reports: paired statistics per prediction, verdicts, plots, markdown.

``report_experiment(exp_dir)`` reads every run of one experiment directory (written
by ``exchange experiment run``), computes each prediction's paired effect over seeds
(:mod:`exchange.lab.predictions`, :mod:`exchange.lab.stats`), writes
``summary.json``, ``summary.md`` and the plots into ``exp_dir``, and returns the
summary. ``report_experiments`` does this for several directories and can render one
markdown page (between generated-section markers) and the claims rows.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

from exchange.errors import InvalidArgument
import numpy as np

from exchange.lab.predictions import KL_KEY, MANIPULATION_KEY, PREDICTIONS, RunData, predicted_drift_sign
from exchange.lab.runlog import atomic_write_text, check_steps, read_metrics
from exchange.lab.stats import decide, paired_effect

__all__ = ["load_runs", "report_experiment", "report_experiments", "overall_verdicts", "claims_rows",
           "write_claims_section"]

DESIGN_SEEDS = 12
"""Paired seeds the design asks for; a report on fewer says it is reduced."""
BEGIN, END = "<!-- BEGIN GENERATED RESULTS -->", "<!-- END GENERATED RESULTS -->"


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
        out[arm["role"]] = {}
        for seed in meta["seeds"]:
            d = exp_dir / arm["name"] / f"seed{seed}"
            if not (d / "done.json").exists():
                n = len(read_metrics(d / "metrics.jsonl"))
                raise InvalidArgument(
                    f"run_dir={str(d)!r} is unfinished ({n}/{meta['train']['steps']} steps); finish it with "
                    "`exchange experiment run CONFIG` (it resumes)."
                )
            rows = read_metrics(d / "metrics.jsonl")
            check_steps(rows, meta["train"]["steps"], str(d))  # duplicate/missing steps: refuse
            out[arm["role"]][seed] = RunData(
                init=json.loads((d / "init.json").read_text()), rows=rows,
                target_accuracy=meta["target_accuracy"], where=str(d), mechanism=meta.get("mechanism", ""),
            )
    return meta, out


def _effects(meta: dict[str, Any], runs: dict[str, dict[int, RunData]]) -> list[dict[str, Any]]:
    """One row per prediction; the primary rows are decided together (Holm)."""
    seeds = meta["seeds"]
    rows, tested = [], []
    for pred in PREDICTIONS:
        base = [pred.per_run(runs["baseline"][s]) for s in seeds]
        treat = [pred.per_run(runs["treatment"][s]) for s in seeds]
        signs = None
        if pred.better == "signed":
            signs = [predicted_drift_sign(runs["baseline"][s]) for s in seeds]
            diffs = [g * (b - t) for g, b, t in zip(signs, base, treat)]
        elif pred.better == "lower":
            diffs = [b - t for b, t in zip(base, treat)]
        else:
            diffs = [t - b for b, t in zip(base, treat)]
        row = {"prediction": pred.key, "claim": pred.claim, "statistic": pred.statistic, "primary": pred.primary,
               "exchangeable_should_be": pred.better, "baseline": base, "treatment": treat, "diffs": diffs,
               "predicted_signs": signs, "sesoi": pred.sesoi, "n_seeds": len(diffs)}
        if signs is not None:  # does the baseline drift the way T3/T4 predict?
            row["baseline_in_predicted_sign"] = sum(g * b > 0 for g, b in zip(signs, base))
        if len(diffs) < 2:
            row.update(verdict="not tested", reason="one seed: no paired statistics (need >= 2 seeds)")
        elif not all(math.isfinite(d) for d in diffs):  # a metric undefined in some run
            row.update(verdict="not measured", reason="the statistic is undefined in some run")
        else:
            tested.append((row, paired_effect(diffs, sesoi=pred.sesoi)))
        rows.append(row)
    primary = [(r, e) for r, e in tested if r["primary"]]
    decided = decide([e for _, e in primary]) if primary else []
    for (r, _), e in zip(primary, decided):
        r["_effect"] = e
    for r, e in tested:
        e = r.pop("_effect", e)
        r.update(diff_mean=e.mean, ci_low=e.low, ci_high=e.high, confidence=e.confidence, sd=e.sd,
                 p_t=e.p_t, p_t_holm=e.p_t_adj, p_sign=e.p_sign, p_equiv=e.p_equiv, p_equiv_holm=e.p_equiv_adj,
                 mde=None if e.sd == 0 and e.mean == 0 else e.mde, n_predicted_direction=e.n_positive,
                 verdict=e.verdict if r["primary"] else f"{e.verdict} (uncorrected)", reason=e.reason)
    return rows


def manipulation_check(runs: dict[str, dict[int, RunData]], threshold: float = 0.01) -> dict[str, Any]:
    """Did the treatment remove the mechanism? Mean shared residual (``MANIPULATION_KEY``) per arm:
    the treatment's must be below ``threshold`` (~0, Theorem T1) and the baseline's above
    it. Without this the pair does not test the mechanism at all."""
    out: dict[str, Any] = {"threshold": threshold}
    for role in ("baseline", "treatment"):
        vals = [_mean_key(r, MANIPULATION_KEY) for r in runs[role].values()]
        out[role] = float(np.mean(vals))
    out["passed"] = bool(out["treatment"] < threshold <= out["baseline"])
    return out


def kl_match(runs: dict[str, dict[int, RunData]], tolerance: float = 0.10) -> dict[str, Any]:
    """Matched trust regions: mean KL per step of each arm; ``matched`` within ``tolerance``
    (relative to the baseline), else the pair is ``confounded`` by step size."""
    base = float(np.mean([_mean_key(r, KL_KEY) for r in runs["baseline"].values()]))
    treat = float(np.mean([_mean_key(r, KL_KEY) for r in runs["treatment"].values()]))
    rel = (treat - base) / base if base > 0 else float("inf")
    return {"baseline": base, "treatment": treat, "relative": rel, "tolerance": tolerance,
            "matched": bool(abs(rel) <= tolerance)}


def certificates(runs: dict[str, dict[int, RunData]]) -> dict[str, Any]:
    """Zero-credit certificate at the warm start and at the end of every run."""
    start = [bool(r.init.get("cert/filler_flat", False)) for rr in runs.values() for r in rr.values()]
    # the last row that logged it: a metric may be sparse (logged at rollout starts only)
    end = [bool(next((row["cert/filler_flat"] for row in reversed(r.rows) if "cert/filler_flat" in row), False))
           for rr in runs.values() for r in rr.values()]
    accs = [r.init.get("cert/filler_accuracy") for r in runs["baseline"].values()]
    return {"flat_at_start": sum(start), "flat_at_end": sum(end), "runs": len(start), "start_accuracy_by_filler": accs}


def _mean_key(run: RunData, key: str) -> float:
    s = run.series(key)
    return float(s.mean()) if len(s) else float("nan")


def overall_verdicts(effects: list[dict[str, Any]], manipulation: dict[str, Any] | None = None,
                     kl: dict[str, Any] | None = None) -> dict[str, str]:
    """One verdict per prediction (its primary row) and the falsifier's reading.

    The falsifier is read only when the manipulation check passed (the treatment removed
    the mechanism) and the arms' KL per step match; otherwise it says why not.
    """
    out: dict[str, str] = {}
    for key in ("P1", "P2", "P3", "P4"):
        vs = [e["verdict"] for e in effects if e["prediction"] == key and e["primary"]]
        out[key] = vs[0] if vs else "not tested"
    if manipulation is not None and not manipulation["passed"]:
        out["falsifier"] = ("not readable: the manipulation check failed (treatment residual "
                            f"{manipulation['treatment']:.3g}, baseline {manipulation['baseline']:.3g})")
        return out
    if kl is not None and not kl["matched"]:
        out["falsifier"] = (f"confounded: KL per step differs by {100 * kl['relative']:+.0f}% between arms "
                            f"(> {100 * kl['tolerance']:.0f}%); tune the treatment's clip")
        return out
    vs = [out[p] for p in ("P1", "P2", "P3")]
    k = vs.count("confirmed")
    if k == 3:
        out["falsifier"] = "survives: the mechanism toggle alone moved P1, P2 and P3 as predicted"
    elif vs.count("refuted") == 3:
        out["falsifier"] = "supported: toggling only the mechanism left P1-P3 unchanged or moved them the other way"
    elif "inconclusive" in vs or "not tested" in vs or "not measured" in vs:
        out["falsifier"] = f"undecided: {k} of P1-P3 confirmed, the rest refuted or inconclusive (see their MDEs)"
    else:
        out["falsifier"] = f"partly: {k} of P1-P3 confirmed, {vs.count('refuted')} refuted"
    return out


def _fmt(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:.3g}" if abs(x) >= 1e-3 or x == 0 else f"{x:.2e}"


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return text.replace("|", "\\|")


def _markdown(summary: dict[str, Any], img_prefix: str) -> str:
    m = summary["experiment"]
    base, treat = summary["baseline"], summary["treatment"]
    n = len(m["seeds"])
    lines = [
        f"### {m['name']}: `{base}` vs `{treat}`",
        "",
        "Arms: " + "; ".join(f"{a['role']} `{a['name']}` = objective `{a['objective']}`"
                             + (f" with {a['params']}" if a["params"] else "") for a in m["arms"]) + ".",
        "",
        f"{m['description']}".strip(),
        "",
        f"Mechanism toggled: {m['mechanism'] or '(not stated)'}. Task `{m['task']['name']}`, model "
        f"`{m['model'].get('kind', 'transformer')}`, {n} seeds, {m['train']['steps']} steps x "
        f"{m['train']['prompts_per_step']} prompts x G={m['train']['group_size']}, {m['train']['epochs']} epochs x "
        f"{m['train']['minibatches']} minibatches per rollout, {m['train']['optimizer']} lr={m['train']['lr']}. "
        f"Mean wall time per run: {summary['mean_wall_s']:.1f} s.",
        "",
    ]
    if n < 2:
        lines += [f"**One seed: no paired statistics and no verdicts** (need >= 2 seeds; the design asks for >= 12).", ""]
    if summary.get("reduced"):
        lines += [f"**Reduced run** ({summary['reduced']}): not the design's power; verdicts below are provisional.", ""]
    man, kl, cert = summary["manipulation"], summary["kl_match"], summary["certificate"]
    lines += [
        f"1. **Manipulation check** (mean `{MANIPULATION_KEY}`, must be < {man['threshold']} for the treatment and not "
        f"for the baseline): baseline {_fmt(man['baseline'])}, treatment {_fmt(man['treatment'])}: "
        f"**{'passed' if man['passed'] else 'FAILED'}**.",
        f"2. **Trust regions** (mean `{KL_KEY}` per step): baseline {_fmt(kl['baseline'])}, treatment "
        f"{_fmt(kl['treatment'])} ({100 * kl['relative']:+.0f}%): **{'matched' if kl['matched'] else 'CONFOUNDED'}** "
        f"(tolerance {100 * kl['tolerance']:.0f}%).",
        f"3. **Zero-credit certificate** (greedy accuracy flat across forced filler counts, chi-square p >= 0.01): "
        f"{cert['flat_at_start']}/{cert['runs']} runs at the warm start, {cert['flat_at_end']}/{cert['runs']} at the end.",
        f"4. **Eval standard error**: {summary['eval_se']:.3f} per accuracy point ({m['train']['eval_prompts']} prompts).",
        "",
        "Each difference is oriented so that the prediction is > 0. Paired t-interval "
        "(95%), exact sign test, TOST equivalence against the stated smallest effect of interest (SESOI), "
        "Holm across the primary rows; MDE = minimum detectable effect at 80% power. "
        "Supporting rows are uncorrected.",
        "",
        "| pred. | statistic | baseline | treatment | diff | 95% CI | seeds > 0 | sign p | Holm p | SESOI | MDE | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e in summary["effects"]:
        b = sum(e["baseline"]) / len(e["baseline"])
        t = sum(e["treatment"]) / len(e["treatment"])
        tag = "" if e["primary"] else " (supporting)"
        if "diff_mean" in e:
            cells = (f"{_fmt(e['diff_mean'])} | [{_fmt(e['ci_low'])}, {_fmt(e['ci_high'])}] | "
                     f"{e['n_predicted_direction']}/{e['n_seeds']} | {_fmt(e['p_sign'])} | {_fmt(e.get('p_t_holm'))} | "
                     f"{_fmt(e['sesoi'])} | {_fmt(e['mde'])}")
        else:
            cells = "n/a | n/a | n/a | n/a | n/a | n/a | n/a"
        lines.append(f"| {e['prediction']}{tag} | {_cell(e['statistic'])} | {_fmt(b)} | {_fmt(t)} | {cells} | "
                     f"{e['verdict']} |")
    signed = [e for e in summary["effects"] if e.get("predicted_signs") is not None and e["primary"]]
    for e in signed:
        sg = e["predicted_signs"]
        lines += ["", f"P2 direction: predicted sign of the baseline's drift (T3 from its own cov(R, 1/L) for M3, "
                      f"else the sign of its shared-event coefficient at S): {sum(x > 0 for x in sg)} seeds +, "
                      f"{sum(x < 0 for x in sg)} -; the baseline drifted in the predicted sign in "
                      f"{e['baseline_in_predicted_sign']}/{len(sg)} seeds."]
    notes = [f"{e['prediction']}: {e['reason']}." for e in summary["effects"] if e["primary"] and e.get("reason")]
    if notes:
        lines += ["", "Primary rows: " + " ".join(notes)]
    v = summary["verdicts"]
    lines += [
        "",
        "Verdicts: " + ", ".join(f"{k} {v[k]}" for k in ("P1", "P2", "P3", "P4")) + f". Falsifier: {v['falsifier']}.",
        "",
        f"![{m['name']} curves]({img_prefix}exp_{m['name']}_curves.png)",
        f"![{m['name']} effects]({img_prefix}exp_{m['name']}_effects.png)",
        "",
    ]
    return "\n".join(lines)


def report_experiment(exp_dir: str | Path, *, reduced: str | None = None) -> dict[str, Any]:
    """Compute, write (``summary.json``, ``summary.md``, plots) and return the summary.

    ``reduced``: a note that the runs are smaller than the design (fewer seeds/steps)."""
    from exchange.lab.plots import plot_curves, plot_effects

    exp_dir = Path(exp_dir)
    meta, runs = load_runs(exp_dir)
    if reduced is None and 1 < len(meta["seeds"]) < DESIGN_SEEDS:
        reduced = f"{len(meta['seeds'])} seeds, fewer than the design's {DESIGN_SEEDS}"
    effects = _effects(meta, runs)
    walls = [json.loads((exp_dir / a["name"] / f"seed{s}" / "done.json").read_text())["wall_s"]
             for a in meta["arms"] for s in meta["seeds"]]
    manipulation, kl = manipulation_check(runs), kl_match(runs)
    acc = float(np.mean([r.init["eval/accuracy"] for r in runs["baseline"].values()]))
    summary = {
        "experiment": meta,
        "baseline": next(a["name"] for a in meta["arms"] if a["role"] == "baseline"),
        "treatment": next(a["name"] for a in meta["arms"] if a["role"] == "treatment"),
        "effects": effects,
        "manipulation": manipulation,
        "kl_match": kl,
        "certificate": certificates(runs),
        "eval_se": math.sqrt(max(acc * (1 - acc), 0.25 / meta["train"]["eval_prompts"]) / meta["train"]["eval_prompts"]),
        "verdicts": overall_verdicts(effects, manipulation, kl),
        "mean_wall_s": sum(walls) / len(walls),
        "reduced": reduced,
    }
    plot_curves(meta, runs, exp_dir / f"exp_{meta['name']}_curves.png")
    plot_effects(summary, exp_dir / f"exp_{meta['name']}_effects.png")
    atomic_write_text(exp_dir / "summary.json", json.dumps(summary, indent=2))
    atomic_write_text(exp_dir / "summary.md", _markdown(summary, ""))
    return summary


def _replace_between(text: str, begin: str, end: str, body: str) -> str:
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        return head + begin + "\n" + body + "\n" + end + rest.split(end, 1)[1]
    return text.rstrip() + "\n\n" + begin + "\n" + body + "\n" + end + "\n"


CLAIMS_SECTION = "## Training experiments"


def claims_rows(summaries: list[dict[str, Any]], configs: list[str]) -> str:
    """Markdown table rows (one per experiment x prediction) for docs/claims.md."""
    # The interval shown is the unadjusted 95% t-interval; the verdict is taken at the
    # Holm-adjusted level, so each row also says which test decided it (a small effect
    # whose raw interval excludes 0 can still be "refuted" by the equivalence route).
    lines = ["| claim | experiment | verdict | evidence (paired diff, unadjusted 95% t-CI, seeds in predicted direction, MDE; the test that decided, Holm-adjusted) | reproduce |",
             "|---|---|---|---|---|"]
    claims = {"P1": "P1 learning tax", "P2": "P2 solution-probability drift", "P3": "P3 entropy collapse",
              "P4": "P4 sample efficiency / final accuracy"}
    for s, cfg in zip(summaries, configs):
        name = s["experiment"]["name"]
        run = f"`python -m exchange experiment run {cfg}` then `python -m exchange experiment report runs/{name}`"
        tag = f" (provisional: {s['reduced']})" if s.get("reduced") else ""
        # A row of a pair whose falsifier cannot be read is not evidence about the
        # mechanism; say so in the verdict cell, where a reader skimming the table looks.
        unread = s["verdicts"]["falsifier"].split(":")[0]
        if unread in ("not readable", "confounded"):
            tag += f" (pair {unread}: not evidence about the mechanism)"
        for key, claim in claims.items():
            ev = "; ".join(
                f"{e['claim']}: {_fmt(e['diff_mean'])} [{_fmt(e['ci_low'])}, {_fmt(e['ci_high'])}], "
                f"{e['n_predicted_direction']}/{e['n_seeds']}, MDE {_fmt(e['mde'])}; {e['reason']}" if "diff_mean" in e else
                f"{e['claim']}: {e['reason']}"
                for e in s["effects"] if e["prediction"] == key and e["primary"]
            )
            lines.append(f"| {claim} | {name} ({s['baseline']} vs {s['treatment']}) | {s['verdicts'][key]}{tag} | "
                         f"{_cell(ev)} | {run} |")
        lines.append(f"| Falsifier (THEORY.md 5) | {name} | {s['verdicts']['falsifier'].split(':')[0]} | "
                     f"{s['verdicts']['falsifier']} | {run} |")
    return "\n".join(lines)


def write_claims_section(path: str | Path, body: str) -> None:
    """Replace the content of the "## Training experiments" section of ``path``."""
    path = Path(path)
    text = path.read_text() if path.exists() else f"# Claims and verdicts\n\n{CLAIMS_SECTION}\n"
    if CLAIMS_SECTION not in text:
        text = text.rstrip() + f"\n\n{CLAIMS_SECTION}\n"
    head, rest = text.split(CLAIMS_SECTION, 1)
    nxt = rest.find("\n## ")
    tail = rest[nxt:] if nxt >= 0 else "\n"
    atomic_write_text(path, head + CLAIMS_SECTION + "\n\n" + body.strip() + "\n" + tail)


def report_experiments(exp_dirs: list[str | Path], *, img_dir: str | Path | None = None,
                       markdown: str | Path | None = None, claims: str | Path | None = None,
                       reduced: str | None = None) -> list[str]:
    """Report each experiment; optionally copy plots to ``img_dir``, render all of
    them into ``markdown`` between the generated-section markers, and rewrite the
    "Training experiments" section of ``claims``. Returns one verdict line per
    experiment."""
    summaries = [report_experiment(d, reduced=reduced) for d in exp_dirs]
    if img_dir is not None:
        Path(img_dir).mkdir(parents=True, exist_ok=True)
        for d, s in zip(exp_dirs, summaries):
            for kind in ("curves", "effects"):
                name = f"exp_{s['experiment']['name']}_{kind}.png"
                shutil.copyfile(Path(d) / name, Path(img_dir) / name)
    if markdown is not None:
        md = Path(markdown)
        prefix = ""
        if img_dir is not None:
            prefix = Path(img_dir).resolve().relative_to(md.resolve().parent).as_posix() + "/"
        body = "\n".join(_markdown(s, prefix) for s in summaries)
        text = md.read_text() if md.exists() else "# Training experiments\n"
        atomic_write_text(md, _replace_between(text, BEGIN, END, body))
    if claims is not None:
        configs = [s["experiment"].get("source") or "CONFIG" for s in summaries]
        intro = ("Paired CPU experiments (exchange.lab): each row toggles only the objective's mechanism; "
                 "verdicts come from `exchange experiment report` (paired t-interval, sign test, Holm across a "
                 "pair's predictions; confirmed = interval above 0, refuted = interval below 0 or equivalence "
                 "within the stated SESOI, inconclusive otherwise with its MDE). Details and plots: "
                 "docs/experiments.md.")
        write_claims_section(claims, intro + "\n\n" + claims_rows(summaries, configs))
    lines = []
    for s in summaries:
        v = s["verdicts"]
        lines.append(f"{s['experiment']['name']} ({s['baseline']} vs {s['treatment']}): "
                     + ", ".join(f"{k} {v[k]}" for k in ("P1", "P2", "P3", "P4")) + f"; falsifier {v['falsifier']}")
    return lines
