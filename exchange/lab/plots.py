"""Matplotlib figures of one experiment (imported lazily; Agg backend, PNG files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from exchange.core import metric_keys as mk
from exchange.lab.predictions import RunData
from exchange.lab.runlog import atomic_write_bytes

__all__ = ["plot_curves"]

SAMPLES, CUM_KL = mk.SAMPLES, mk.KL_CUMULATIVE
_PANELS = (
    (mk.REWARD, "sampled reward", False, SAMPLES),
    (mk.EVAL_ACCURACY, "greedy accuracy (eval set)", False, SAMPLES),
    (mk.SHARED_UPDATE_SHARE, "P1: update-norm share on shared events", False, SAMPLES),
    (mk.CLIP_NEG_ADV, "zeroed-gradient fraction, A<0 (solid) / A>0 (dashed)", False, SAMPLES),
    (mk.DRIFT_STYLE, "P2: log p(S) at fixed contexts - initial", True, SAMPLES),
    (mk.ENTROPY_FIXED_WEAK_CREDIT, "P3: entropy at fixed weak-credit contexts - initial", True, SAMPLES),
    (mk.DRIFT_STYLE, "P2 against cumulative KL (control contexts)", True, CUM_KL),
    (mk.ENTROPY_FIXED_WEAK_CREDIT, "P3 against cumulative KL (control contexts)", True, CUM_KL),
)
_COLORS = {"baseline": "tab:red", "surgical": "tab:green", "treatment": "tab:blue"}


def _curve(runs: dict[int, RunData], key: str, relative: bool, xkey: str = SAMPLES):
    """``(x [S], mean [S], sem [S])`` over seeds of a metric (rows that have it); ``x`` is
    the samples drawn or the cumulative KL (its mean over seeds)."""
    xs, ys = None, []
    for run in runs.values():
        rows = [r for r in run.rows if r.get(key) is not None and r.get(xkey) is not None]
        if not rows:
            continue
        x = np.array([r[xkey] for r in rows], dtype=float)
        y = np.array([r[key] for r in rows], dtype=float)
        if relative:
            y = y - float(run.init[key])
        if key in run.init:  # prepend the warm-start point
            x = np.concatenate([[0.0], x])
            y = np.concatenate([[0.0 if relative else float(run.init[key])], y])
        n = min(len(y), len(ys[0])) if ys else len(y)
        xs = [x[:n]] if xs is None else [v[:n] for v in xs] + [x[:n]]
        ys = [v[:n] for v in ys] + [y[:n]]
    if not ys:
        return None
    xs = np.stack(xs).mean(0)
    arr = np.stack(ys)
    k = max(1, arr.shape[1] // 25)  # light smoothing of per-step curves
    if k > 1:
        kernel = np.ones(k) / k
        arr = np.stack([np.convolve(a, kernel, mode="valid") for a in arr])
        xs = xs[k - 1:]
    sem = arr.std(0, ddof=1) / np.sqrt(len(arr)) if len(arr) > 1 else np.zeros(arr.shape[1])
    return xs, arr.mean(0), sem


def plot_curves(meta: dict[str, Any], runs: dict[str, dict[int, RunData]], path: str | Path) -> None:
    """2 x 4 panels, mean over seeds +- 1 standard error, against samples drawn and (P2,
    P3) against the cumulative KL on the control contexts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # the keys of load_runs: the role, "dose:<keep>" for a dose arm (several per experiment)
    names = {(f"dose:{a['keep']:g}" if a["role"] == "dose" else a["role"]): a["name"] for a in meta["arms"]}
    fig, axes = plt.subplots(2, 4, figsize=(17, 7), constrained_layout=True)
    for ax, (key, title, relative, xkey) in zip(axes.flat, _PANELS):
        for role in runs:
            c = _curve(runs[role], key, relative, xkey)
            if c is None:
                continue  # never measured in this arm (e.g. no group with two rewards)
            x, m, se = c
            ax.plot(x, m, color=_COLORS.get(role, "k"), label=names[role], ls="--" if role.startswith("dose:") else "-")
            ax.fill_between(x, m - se, m + se, color=_COLORS.get(role, "k"), alpha=0.2)
            if key == mk.CLIP_NEG_ADV:
                c = _curve(runs[role], mk.CLIP_POS_ADV, False)
                if c is not None:
                    ax.plot(c[0], c[1], color=_COLORS.get(role, "k"), ls="--")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("samples" if xkey == SAMPLES else "cumulative KL")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(f"{meta['name']}: mean over {len(meta['seeds'])} seeds (+-1 s.e.)")
    _save(fig, path)


def _save(fig, path: str | Path) -> None:
    """PNG through a temp file and os.replace."""
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
