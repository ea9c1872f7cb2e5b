"""Matplotlib figures of one experiment (imported lazily; Agg backend, PNG files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from exchange.lab.predictions import RunData
from exchange.lab.runlog import atomic_write_bytes

__all__ = ["plot_curves", "plot_effects"]

_PANELS = (
    ("charts/reward", "sampled reward", False),
    ("eval/accuracy", "greedy accuracy (eval set)", False),
    ("tax/shared_update_share", "P1: update-norm share on shared events", False),
    ("drift/style_logp", "P2: log p(S) at fixed contexts - initial", True),
    ("entropy/fixed_weak_credit", "P3: entropy at fixed weak-credit contexts", False),
    ("clip/frac_neg_adv", "zeroed-gradient fraction, A<0 (solid) / A>0 (dashed)", False),
)
_COLORS = {"baseline": "tab:red", "treatment": "tab:blue"}


def _curve(runs: dict[int, RunData], key: str, relative: bool):
    """``(samples [S], mean [S], sem [S])`` over seeds of a metric (rows that have it)."""
    xs, ys = None, []
    for run in runs.values():
        rows = [r for r in run.rows if r.get(key) is not None]
        x = np.array([r["charts/samples"] for r in rows], dtype=float)
        y = np.array([r[key] for r in rows], dtype=float)
        if relative:
            y = y - float(run.init[key])
        if key in run.init:  # prepend the warm-start point
            x = np.concatenate([[0.0], x])
            y = np.concatenate([[0.0 if relative else float(run.init[key])], y])
        n = min(len(y), len(ys[0])) if ys else len(y)
        xs = x[:n] if xs is None else xs[:n]
        ys = [v[:n] for v in ys] + [y[:n]]
    arr = np.stack(ys)
    k = max(1, arr.shape[1] // 25)  # light smoothing of per-step curves
    if k > 1:
        kernel = np.ones(k) / k
        arr = np.stack([np.convolve(a, kernel, mode="valid") for a in arr])
        xs = xs[k - 1:]
    sem = arr.std(0, ddof=1) / np.sqrt(len(arr)) if len(arr) > 1 else np.zeros(arr.shape[1])
    return xs, arr.mean(0), sem


def plot_curves(meta: dict[str, Any], runs: dict[str, dict[int, RunData]], path: str | Path) -> None:
    """2 x 3 panels, mean over seeds +- 1 standard error, x = samples drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = {a["role"]: a["name"] for a in meta["arms"]}
    fig, axes = plt.subplots(2, 3, figsize=(13, 7), constrained_layout=True)
    for ax, (key, title, relative) in zip(axes.flat, _PANELS):
        for role in ("baseline", "treatment"):
            if not any(r.get(key) is not None for run in runs[role].values() for r in run.rows):
                continue  # never measured in this arm (e.g. no group with two rewards)
            x, m, se = _curve(runs[role], key, relative)
            ax.plot(x, m, color=_COLORS[role], label=names[role])
            ax.fill_between(x, m - se, m + se, color=_COLORS[role], alpha=0.2)
            if key == "clip/frac_neg_adv":
                x, m, _ = _curve(runs[role], "clip/frac_pos_adv", False)
                ax.plot(x, m, color=_COLORS[role], ls="--")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("samples")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(f"{meta['name']}: mean over {len(meta['seeds'])} seeds (+-1 s.e.)")
    _save(fig, path)


def plot_effects(summary: dict[str, Any], path: str | Path) -> None:
    """One small panel per statistic: per-seed paired differences and the mean with its CI."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    effects = summary["effects"]
    fig, axes = plt.subplots(1, len(effects), figsize=(2.1 * len(effects), 3.6), constrained_layout=True)
    for ax, e in zip(np.atleast_1d(axes), effects):
        diffs = e["diffs"]
        ax.axhline(0, color="grey", lw=0.8)
        ax.scatter(np.zeros(len(diffs)) + 0.15, diffs, s=12, color="grey")
        color = {"confirmed": "tab:green", "refuted": "tab:red"}.get(e["verdict"], "tab:orange")
        if e.get("diff_mean") is not None:
            ax.errorbar([0], [e["diff_mean"]], yerr=[[e["diff_mean"] - e["ci_low"]], [e["ci_high"] - e["diff_mean"]]],
                        fmt="o", color=color, capsize=4)
        ax.set_xlim(-0.5, 0.5)
        ax.set_xticks([])
        tag = "" if e["primary"] else "*"
        ax.set_title(f"{e['prediction']}{tag}: {e['verdict']}", fontsize=8)
        ax.set_xlabel("\n".join(_wrap(e["claim"], 22)), fontsize=7)
        ax.tick_params(labelsize=7)
    fig.suptitle(f"{summary['experiment']['name']}: paired differences (prediction > 0); * = supporting", fontsize=9)
    _save(fig, path)


def _wrap(text: str, width: int) -> list[str]:
    out, line = [], ""
    for word in text.split():
        if line and len(line) + len(word) + 1 > width:
            out.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return out + [line]


def _save(fig, path: str | Path) -> None:
    """PNG through a temp file and os.replace."""
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
