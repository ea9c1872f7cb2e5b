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
from exchange.lab.predictions import PREDICTIONS, RunData
from exchange.lab.runlog import atomic_write_text, check_steps, read_metrics
from exchange.lab.stats import paired_effect

__all__ = ["load_runs", "report_experiment", "report_experiments", "overall_verdicts", "claims_rows",
           "write_claims_section"]

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
                target_accuracy=meta["target_accuracy"], where=str(d),
            )
    return meta, out


def _effects(meta: dict[str, Any], runs: dict[str, dict[int, RunData]], n_resamples: int) -> list[dict[str, Any]]:
    rows = []
    for pred in PREDICTIONS:
        base = [pred.per_run(runs["baseline"][s]) for s in meta["seeds"]]
        treat = [pred.per_run(runs["treatment"][s]) for s in meta["seeds"]]
        diffs = [b - t if pred.better == "lower" else t - b for b, t in zip(base, treat)]
        row = {"prediction": pred.key, "claim": pred.claim, "statistic": pred.statistic, "primary": pred.primary,
               "exchangeable_should_be": pred.better, "baseline": base, "treatment": treat}
        if not all(math.isfinite(d) for d in diffs):  # a metric undefined in some run
            row.update(diff_mean=None, ci_low=None, ci_high=None, confidence=0.95, n_seeds=len(diffs),
                       n_predicted_direction=None, verdict="not measured")
        else:
            eff = paired_effect(diffs, n_resamples=n_resamples)
            row.update(diff_mean=eff.mean, ci_low=eff.low, ci_high=eff.high, confidence=eff.confidence,
                       n_seeds=eff.n, n_predicted_direction=eff.n_positive, verdict=eff.verdict)
        rows.append(row)
    return rows


def overall_verdicts(effects: list[dict[str, Any]]) -> dict[str, str]:
    """One verdict per prediction from its primary rows, and the falsifier's reading.

    A prediction with several primary rows (P4: samples and final accuracy) is
    confirmed when one is confirmed and none refuted, refuted when any is refuted.
    Falsifier: the mechanism toggle moved P1-P3 as predicted (k of 3 confirmed).
    """
    out: dict[str, str] = {}
    for key in ("P1", "P2", "P3", "P4"):
        vs = [e["verdict"] for e in effects if e["prediction"] == key and e["primary"]]
        if "refuted" in vs:
            out[key] = "refuted"
        elif "confirmed" in vs:
            out[key] = "confirmed"
        else:
            out[key] = "inconclusive"
    k = sum(out[p] == "confirmed" for p in ("P1", "P2", "P3"))
    if k == 3:
        out["falsifier"] = "survives: the mechanism toggle alone moved P1, P2 and P3 as predicted"
    elif k == 0:
        out["falsifier"] = "not supported: toggling only the mechanism moved none of P1-P3 as predicted"
    else:
        out["falsifier"] = f"partly supported: the mechanism toggle alone moved {k} of P1-P3 as predicted"
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
    lines = [
        f"### {m['name']}: `{base}` vs `{treat}`",
        "",
        "Arms: " + "; ".join(f"{a['role']} `{a['name']}` = objective `{a['objective']}`"
                             + (f" with {a['params']}" if a["params"] else "") for a in m["arms"]) + ".",
        "",
        f"{m['description']}".strip(),
        "",
        f"Mechanism toggled: {m['mechanism'] or '(not stated)'}. Task `{m['task']['name']}`, "
        f"{len(m['seeds'])} seeds, {m['train']['steps']} steps x {m['train']['prompts_per_step']} prompts x "
        f"G={m['train']['group_size']}, {m['train']['epochs']} epochs x {m['train']['minibatches']} minibatches "
        f"per rollout, {m['train']['optimizer']} lr={m['train']['lr']}. Mean wall time per run: "
        f"{summary['mean_wall_s']:.1f} s.",
        "",
        "Each difference is oriented so the paper's prediction is > 0 (baseline - treatment for "
        "quantities the exchangeable arm should lower, treatment - baseline otherwise); "
        f"{int(summary['effects'][0]['confidence'] * 100)}% percentile bootstrap CI over seeds.",
        "",
        "| pred. | statistic | baseline (mean) | treatment (mean) | diff (pred. > 0) | CI | seeds in pred. dir. | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in summary["effects"]:
        b = sum(e["baseline"]) / len(e["baseline"])
        t = sum(e["treatment"]) / len(e["treatment"])
        n_dir = "n/a" if e["n_predicted_direction"] is None else e["n_predicted_direction"]
        tag = "" if e["primary"] else " (supporting)"
        lines.append(
            f"| {e['prediction']}{tag} | {_cell(e['statistic'])} | {_fmt(b)} | {_fmt(t)} | {_fmt(e['diff_mean'])} | "
            f"[{_fmt(e['ci_low'])}, {_fmt(e['ci_high'])}] | {n_dir}/{e['n_seeds']} | "
            f"{e['verdict']} |"
        )
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


def report_experiment(exp_dir: str | Path, *, n_resamples: int = 9999) -> dict[str, Any]:
    """Compute, write (``summary.json``, ``summary.md``, plots) and return the summary."""
    from exchange.lab.plots import plot_curves, plot_effects

    exp_dir = Path(exp_dir)
    meta, runs = load_runs(exp_dir)
    effects = _effects(meta, runs, n_resamples)
    walls = [json.loads((exp_dir / a["name"] / f"seed{s}" / "done.json").read_text())["wall_s"]
             for a in meta["arms"] for s in meta["seeds"]]
    summary = {
        "experiment": meta,
        "baseline": next(a["name"] for a in meta["arms"] if a["role"] == "baseline"),
        "treatment": next(a["name"] for a in meta["arms"] if a["role"] == "treatment"),
        "effects": effects,
        "verdicts": overall_verdicts(effects),
        "mean_wall_s": sum(walls) / len(walls),
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
    lines = ["| claim | experiment | verdict | evidence (paired diff, 95% CI, seeds in predicted direction) | reproduce |",
             "|---|---|---|---|---|"]
    claims = {"P1": "P1 learning tax", "P2": "P2 solution-probability drift", "P3": "P3 entropy collapse",
              "P4": "P4 sample efficiency / final accuracy"}
    for s, cfg in zip(summaries, configs):
        name = s["experiment"]["name"]
        run = f"`python -m exchange experiment run {cfg}` then `python -m exchange experiment report runs/{name}`"
        for key, claim in claims.items():
            ev = "; ".join(
                f"{e['claim']}: {_fmt(e['diff_mean'])} [{_fmt(e['ci_low'])}, {_fmt(e['ci_high'])}], "
                f"{e['n_predicted_direction']}/{e['n_seeds']}"
                for e in s["effects"] if e["prediction"] == key and e["primary"]
            )
            lines.append(f"| {claim} | {name} ({s['baseline']} vs {s['treatment']}) | {s['verdicts'][key]} | "
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
                       n_resamples: int = 9999) -> list[str]:
    """Report each experiment; optionally copy plots to ``img_dir``, render all of
    them into ``markdown`` between the generated-section markers, and rewrite the
    "Training experiments" section of ``claims``. Returns one verdict line per
    experiment."""
    summaries = [report_experiment(d, n_resamples=n_resamples) for d in exp_dirs]
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
                 "verdicts come from `exchange experiment report` (95% percentile bootstrap CI over seeds; "
                 "confirmed = CI above 0 in the predicted direction, refuted = below). Details and plots: "
                 "docs/experiments.md.")
        write_claims_section(claims, intro + "\n\n" + claims_rows(summaries, configs))
    lines = []
    for s in summaries:
        v = s["verdicts"]
        lines.append(f"{s['experiment']['name']} ({s['baseline']} vs {s['treatment']}): "
                     + ", ".join(f"{k} {v[k]}" for k in ("P1", "P2", "P3", "P4")) + f"; falsifier {v['falsifier']}")
    return lines
