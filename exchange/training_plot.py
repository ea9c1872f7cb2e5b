"""``tax/*`` against the training step, beside reward, KL and entropy where logged
(``exchange plot RUN``; matplotlib, imported lazily).

The ``tax/*`` series are the ones :mod:`exchange.core.metric_keys` defines (the TRL
callback, the lab; the share of shared-event coefficient mass that does not cancel,
THEORY.md section 2). Reward, KL and entropy come under each engine's own key
(:data:`CONTEXT`): each panel is titled with the key it draws, so a series is never
renamed into another engine's meaning.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from difflib import get_close_matches
from pathlib import Path

from exchange.core.metric_keys import REWARD
from exchange.errors import InvalidArgument
from exchange.lab.runlog import atomic_write_bytes
from exchange.training_log import TrainingLog

__all__ = ["CONTEXT", "FORMATS", "TAX_PREFIX", "VERL_TAX_PREFIX", "Selection", "select_series", "plot_training_log"]

TAX_PREFIX = "tax/"
"""The prefix of every key of :mod:`exchange.core.metric_keys` that the plot is for."""

VERL_TAX_PREFIX = "actor/" + TAX_PREFIX
"""The same keys in a verl log: verl's trainer prefixes the actor's metrics with ``actor/``
(:mod:`exchange.libraries.verl.monitor` logs ``actor/tax/shared_residual``, ...)."""

CONTEXT: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reward", ("reward", "critic/score/mean", REWARD)),
    ("KL", ("kl", "actor/kl_loss", "actor/reward_kl_penalty")),
    ("entropy", ("entropy", "actor/entropy")),
)
"""The quantities drawn beside the tax, each with its key in TRL's ``log_history``, in
verl's metrics and in the lab's ``metrics.jsonl``, in that order: the first key present
in the run is drawn."""

FORMATS = (".png", ".svg")
"""The image formats ``--out`` may name (by its suffix)."""


@dataclass(frozen=True)
class Selection:
    """What one plot draws: ``keys`` in panel order, and ``missing``: the quantities of
    :data:`CONTEXT` (and the tax) the run did not log, in words."""

    keys: tuple[str, ...]
    missing: tuple[str, ...]


def select_series(log: TrainingLog, metrics: list[str] | None = None) -> Selection:
    """The panels of a plot: ``metrics`` when given (each must be a key of the run),
    else every ``tax/*`` key followed by the first present key of each :data:`CONTEXT`
    quantity."""
    if metrics:
        unknown = [m for m in metrics if m not in log.series]
        if unknown:
            hint = get_close_matches(unknown[0], log.keys, n=3)
            raise InvalidArgument(f"--metric {unknown[0]!r} is not logged in {log.path}"
                                  + (f"; did you mean {', '.join(map(repr, hint))}?" if hint else
                                     f"; its keys: {', '.join(log.keys[:20])}{' ...' if len(log.keys) > 20 else ''}."))
        return Selection(tuple(dict.fromkeys(metrics)), ())
    keys = [k for k in log.keys if k.startswith(TAX_PREFIX) or k.startswith(VERL_TAX_PREFIX)]
    missing = [] if keys else [f"{TAX_PREFIX}* (log it with exchange's TRL callback, its verl monitor or the lab)"]
    for name, candidates in CONTEXT:
        found = next((c for c in candidates if c in log.series), None)
        if found is None:
            missing.append(name)
        else:
            keys.append(found)
    if not keys:
        raise InvalidArgument(f"{log.path}: none of tax/*, reward, KL or entropy is logged; name series with "
                              f"--metric KEY (its keys: {', '.join(log.keys[:20]) or 'none'}).")
    return Selection(tuple(keys), tuple(missing))


def plot_training_log(log: TrainingLog, out: str | Path, metrics: list[str] | None = None) -> Selection:
    """Draw the selected series (:func:`select_series`) one panel each, sharing the step
    axis, and write the image to ``out`` atomically (PNG or SVG, by the suffix).
    Returns what was drawn."""
    suffix = Path(out).suffix.lower()
    if suffix not in FORMATS:
        raise InvalidArgument(f"--out {str(out)!r}: the image format comes from the suffix; use one of "
                              f"{', '.join(FORMATS)}.")
    selection = select_series(log, metrics)
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(selection.keys)
    fig, axes = plt.subplots(n, 1, figsize=(7.0, 1.9 * n + 0.6), sharex=True, squeeze=False)
    try:
        for ax, key in zip(axes[:, 0], selection.keys):
            steps, values = zip(*log.series[key])
            ax.plot(steps, values, marker="o" if len(steps) < 30 else None, ms=3, lw=1.2,
                    color="tab:red" if key.startswith((TAX_PREFIX, VERL_TAX_PREFIX)) else "tab:blue",
                    gid=f"series:{key}")  # the SVG names each data line by its key
            ax.set_title(key, fontsize=9, loc="left")
            ax.grid(True, lw=0.4, alpha=0.5)
        axes[-1, 0].set_xlabel("step")
        axes[-1, 0].xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))  # steps are counts
        fig.suptitle(f"{log.path}  ({log.source})", fontsize=9)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format=suffix[1:], dpi=110)
    finally:
        plt.close(fig)
    atomic_write_bytes(out, buf.getvalue())
    return selection
