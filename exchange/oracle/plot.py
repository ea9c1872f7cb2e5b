"""Plot true credit against each objective's expected event coefficient (matplotlib, lazy)."""

from __future__ import annotations

import os
import tempfile

import numpy as np

from exchange.oracle.exact import EVENT_KINDS
from exchange.oracle.expectation import ExpectedCoefficients

__all__ = ["plot_credit"]

_STYLE = {"shared": ("tab:red", "s"), "null": ("tab:orange", "D"), "zero": ("tab:purple", "^"), "credit": ("tab:blue", "o")}


def plot_credit(results: list[ExpectedCoefficients], path: str) -> str:
    """One panel per objective: x = exact policy-gradient weight ``d pi (Q - V)`` of each
    event, y = the centred expected coefficient ``E[K~_e]`` divided by its least-squares
    scale (unbiased objectives lie on the diagonal; zero-credit events off ``y = 0`` are
    drift). A second row zooms on the zero-credit events: their centred drift and, hollow,
    the raw ``E[K_e]`` of shared/null events (THEORY.md (D)), on one axis for all panels. Written atomically to ``path``; returns it.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(results)
    fig, axes = plt.subplots(2, n, figsize=(4.2 * n, 7.6), squeeze=False)
    scales = []
    for ax, ec in zip(axes[0], results):
        t = ec.table
        ref = t.visit * t.credit
        s = float(ec.centred @ ref / (ref @ ref)) if ref @ ref > 0 else 1.0
        s = s if s != 0 else 1.0
        scales.append(s)
        lim = float(np.abs(ref).max()) * 1.15 or 1.0
        ax.plot([-lim, lim], [-lim, lim], color="0.7", lw=1, zorder=0)
        ax.axhline(0, color="0.85", lw=0.8, zorder=0)
        for k, name in enumerate(EVENT_KINDS):
            m = t.kind == k
            if not m.any():
                continue
            color, marker = _STYLE[name]
            ax.errorbar(ref[m], ec.centred[m] / s, yerr=1.96 * ec.centred_se[m] / abs(s), fmt=marker, color=color,
                        ms=5, alpha=0.8, label=f"{name} ({int(m.sum())})", elinewidth=0.8)
        ax.set_title(f"{ec.objective}  (G={ec.g}, {t.env.name}, {ec.method})", fontsize=10)
        ax.set_xlabel("exact credit weight  d(c) π(y|c) (Q − V)")
        ax.set_ylabel("E[K̃_e] / fitted scale")
        ax.legend(fontsize=7, loc="upper left")
    # Row 2: zero-credit events only, on one zoomed axis shared by every objective.
    span = 0.0
    for ax, ec, s in zip(axes[1], results, scales):
        t = ec.table
        ax.axhline(0, color="0.6", lw=0.8, zorder=0)
        for k, name in enumerate(EVENT_KINDS[:3]):
            m = t.kind == k
            if not m.any():
                continue
            color, marker = _STYLE[name]
            free = m & (t.pi < 1.0)
            if free.any():
                ax.errorbar(t.visit[free], ec.centred[free] / s, yerr=1.96 * ec.centred_se[free] / abs(s), fmt=marker,
                            color=color, ms=5, alpha=0.8, label=f"{name}: E[K̃]", elinewidth=0.8)
                span = max(span, float(np.abs(ec.centred[free] / s).max()))
            if name in ("shared", "null"):
                ax.scatter(t.visit[m], ec.mean[m] / s, marker=marker, facecolors="none", edgecolors=color, s=45,
                           label=f"{name}: raw E[K] (THEORY (D))")
                span = max(span, float(np.abs(ec.mean[m] / s).max()))
        ax.set_title("zero-credit events: drift", fontsize=10)
        ax.set_xlabel("P(e) = d(c) π(y|c)")
        ax.set_ylabel("coefficient / fitted scale")
        ax.legend(fontsize=7, loc="best")
    for ax in axes[1]:
        ax.set_ylim(-1.2 * span - 1e-12, 1.2 * span + 1e-12)
    fig.tight_layout()
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(suffix=".png", dir=directory)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
