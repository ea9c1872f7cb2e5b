"""The pilot: freeze the prediction before the test seeds run (issue 31).

On ``pilot_seeds`` (disjoint from the test's ``seeds``) every arm is trained, the
baseline with the attribution instrument on, plus one **sensitivity** run per seed (the
baseline with a reward bonus ``SENSITIVITY_BONUS`` for responses that contain S: an
injected credit of known size). :func:`freeze` then computes, per primary probe:

- its **orientation** (:func:`exchange.lab.verdict.orient`): P2 by the sign of the
  baseline's signed shared coefficient at the probe event S (``tax/style_K_signed``,
  each step counted only above the round-off floor); P3 per context by the sign of
  ``-(log p + H)`` weighted by the shared coefficient, at the weak-credit contexts the
  policy samples (``tax/entropy_K_signed``, issue 42: raising a token lowers its
  context's entropy only where ``p > exp(-H)``); runs recorded before it use the same
  rule at the S slot;
- ``delta_hat``: the oriented mean over pilot seeds of the attribution's shared part
  summed over the run (``attr/<probe>/shared``), the predicted baseline-minus-surgical
  difference; P1's is the baseline's mean shared update share (the restoring or surgical
  arm has none, Theorem T1);
- ``sd``: the SD over pilot seeds of the oriented measured paired difference, so the
  design's MDE at the test's seed count is known before the test runs;
- the **certificate bound** of the probe: ``credit_bound(delta_hat_P2, sensitivity)``
  with ``sensitivity`` = measured drift of ``log p(S)`` per unit of injected credit, and
  the forced-prefix credit of S at the warm start and at the end of the pilot's
  baseline and surgical runs, each certified against it.

``pilot.json`` is written once into the experiment directory and reused: the test seeds
never change it.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from exchange.core import metric_keys as mk
from exchange.errors import InvalidArgument
from exchange.lab.certificate import StyleCredit, certify, credit_bound
from exchange.lab.predictions import RunData
from exchange.lab.verdict import Orientation, Pilot, orient

__all__ = ["PROBES", "SENSITIVITY_BONUS", "ZERO_SPREAD_LIMIT", "FrozenPilot", "freeze", "load_pilot"]

SENSITIVITY_BONUS = 0.2
"""Injected credit of the sensitivity runs (reward units = P(correct) units, binary reward)."""
ZERO_SPREAD_LIMIT = 0.5
"""A design whose pilot baseline has more than this share of groups with zero reward
spread (every response equally rewarded: no learning signal, only the residual's
absence) is refused: its test seeds do not run."""
PROBES = {"P2": mk.DRIFT_STYLE, "P3": mk.ENTROPY_FIXED_WEAK_CREDIT}
"""The primary probe of each signed prediction (fixed contexts, :mod:`exchange.lab.drift`)."""


@dataclass(frozen=True)
class FrozenPilot:
    experiment: str
    seeds: tuple[int, ...]
    pilots: dict[str, Pilot]
    """per prediction key (P1, P2, P3)"""
    orientation: dict[str, int]
    style_orientation: Orientation
    p_style: float
    """mean warm-start p(S) at the probe contexts"""
    sensitivity: float | None
    bound: float | None
    certified: bool
    certificates: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    zero_spread: float | None = None
    """mean share of the pilot baseline's groups with zero reward spread"""

    @property
    def refused(self) -> bool:
        return self.zero_spread is not None and self.zero_spread > ZERO_SPREAD_LIMIT

    def to_json(self) -> str:
        d = asdict(self)
        return json.dumps(d, indent=2)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FrozenPilot:
        return cls(
            experiment=d["experiment"], seeds=tuple(d["seeds"]),
            pilots={k: Pilot(v["delta_hat"], v["sd"], tuple(v["seeds"]), v["source"], v.get("delta_hat_surgical"))
                    for k, v in d["pilots"].items()},
            orientation=dict(d["orientation"]), style_orientation=Orientation(**d["style_orientation"]),
            p_style=d["p_style"], sensitivity=d["sensitivity"], bound=d["bound"], certified=d["certified"],
            certificates=list(d["certificates"]), notes=list(d["notes"]), zero_spread=d.get("zero_spread"),
        )


def load_pilot(path: str | Path) -> FrozenPilot:
    path = Path(path)
    if not path.exists():
        raise InvalidArgument(f"pilot={str(path)!r} does not exist; `exchange experiment run CONFIG` writes it "
                              "when the config has pilot_seeds.")
    return FrozenPilot.from_dict(json.loads(path.read_text()))


def _change(run: RunData, key: str) -> float:
    return run.final(key) - float(run.init[key])


def _credit(d: dict[str, Any]) -> StyleCredit:
    return StyleCredit(**{k: d[mk.cert_style(k)] for k in ("forced", "banned", "credit", "low", "high", "n")})


def freeze(name: str, runs: dict[str, dict[int, RunData]], sensitivity_runs: dict[int, RunData], *,
           by_construction: bool = False) -> FrozenPilot:
    """The frozen pilot of experiment ``name`` from its pilot runs: ``runs[role][seed]``
    (the baseline's with ``attr/`` keys) and the baseline-with-bonus runs per seed.
    ``by_construction``: the probe S is teacher-forced in every response
    (``Task.forced_style``), so it carries no credit in the RL data by construction and
    the forced-prefix certificate is not needed (nor the sensitivity runs)."""
    base = runs["baseline"]
    seeds = tuple(sorted(base))
    if len(seeds) < 2:
        raise InvalidArgument(f"pilot of {name}: {len(seeds)} seeds; need >= 2 for a paired SD.")
    notes: list[str] = []
    ks = np.concatenate([base[s].series(mk.STYLE_K_SIGNED) for s in seeds])
    o = orient(ks, np.ones_like(ks))
    s2 = o.sign
    if s2 == 0:
        notes.append("P2/P3: the signed coefficient at S never exceeded the round-off floor: no orientation.")
    notes.append(f"orientation: {o.agreeing}/{o.counted} counted steps (of {o.total}) share the sign {s2:+d} "
                 f"({100 * o.agreement:.0f}%).")
    p_style = float(np.mean([math.exp(base[s].init[mk.DRIFT_STYLE]) for s in seeds]))
    # P3 (issue 42): per context by the sign of -(log p + H), at the contexts the policy samples
    # (tax/entropy_K_signed); runs without it: the same rule at the S slot (p(S) > exp(-H), not p > 1/2)
    ke = [base[s].series(mk.ENTROPY_K_SIGNED) for s in seeds if any(mk.ENTROPY_K_SIGNED in r for r in base[s].rows)]
    if len(ke) == len(seeds) and sum(len(k) for k in ke):
        ke_all = np.concatenate(ke)
        o3 = orient(ke_all, np.ones_like(ke_all))
        s3 = o3.sign
        notes.append(f"P3 orientation: sign of -(log p + H) weighted by K at the sampled weak-credit shared contexts, "
                     f"{o3.agreeing}/{o3.counted} steps agree ({s3:+d}).")
    else:
        h_s = [base[s].init.get(mk.ENTROPY_FIXED_STYLE) for s in seeds]
        if all(h is not None for h in h_s):
            lp = float(np.mean([base[s].init[mk.DRIFT_STYLE] for s in seeds]))
            s3 = s2 * (1 if -(lp + float(np.mean(h_s))) > 0 else -1)
        else:
            s3 = -s2 if p_style > 0.5 else s2
    pathway = runs.get("surgical")
    pilots: dict[str, Pilot] = {}
    for key, sign in (("P2", s2), ("P3", s3)):
        probe = PROBES[key]
        pred = [sign * float(base[s].series(mk.attr_shared(probe)).sum()) for s in seeds]
        # along the surgical path the instrument attributes minus the residual's effect (trainer._update); a run
        # attributed when any row has the sums (TRL logs them at a rollout's last step, not its first, under reuse)
        surg = ([-sign * float(pathway[s].series(mk.attr_shared(probe)).sum()) for s in seeds]
                if pathway is not None and all(any(mk.attr_shared(probe) in r for r in pathway[s].rows) for s in seeds)
                else None)
        if pathway is not None:
            meas = [sign * (_change(base[s], probe) - _change(pathway[s], probe)) for s in seeds]
            sd = float(np.std(meas, ddof=1))
        else:
            sd = float(np.std(pred, ddof=1))
            notes.append(f"{key}: no surgical arm; the SD is the prediction's own spread.")
        pilots[key] = Pilot(float(np.mean(pred)), sd, seeds,
                            delta_hat_surgical=None if surg is None else float(np.mean(surg)))
    other = runs.get("treatment") or pathway
    share = [float(base[s].series(mk.SHARED_UPDATE_SHARE).mean()) for s in seeds]
    if other is not None:
        meas = [share[i] - float(other[s].series(mk.SHARED_UPDATE_SHARE).mean()) for i, s in enumerate(seeds)]
        sd1 = float(np.std(meas, ddof=1))
    else:
        sd1 = float(np.std(share, ddof=1))
    pilots["P1"] = Pilot(float(np.mean(share)), sd1, seeds,
                         "the baseline's mean shared update share (the other arm's is 0 by Theorem T1)")
    sens = None
    if sensitivity_runs:
        sens = float(np.mean([(_change(sensitivity_runs[s], PROBES["P2"]) - _change(base[s], PROBES["P2"]))
                              / SENSITIVITY_BONUS for s in seeds]))
    bound, certs, certified = None, [], False
    dh = pilots["P2"].delta_hat
    if by_construction:
        certified = True
        notes.append("certificate: S is teacher-forced in every response (task.forced_style), so it carries no "
                     "credit by construction.")
    else:
        if sens is not None and sens > 0 and dh > 0:
            bound = credit_bound(dh, sens)
            src = f"credit_bound(delta_hat_P2={dh:.3g}, sensitivity={sens:.3g} nats per unit credit)"
        else:
            notes.append(f"certificate: no bound (sensitivity={sens}, delta_hat_P2={dh:.3g}); the probe is not "
                         "certified.")
        # S's measured credit is recorded with or without a bound: an uncertified probe's rows are
        # measurements, and issue 42 asks them to carry the credit S was measured to have
        for role in ("baseline", "surgical"):
            for s in seeds if role in runs else ():
                run = runs[role][s]
                # the last row that logged the certificate: a metric may be sparse
                end = next((r for r in reversed(run.rows) if mk.cert_style("credit") in r), run.rows[-1])
                for when, d in (("warm start", run.init), ("end", end)):
                    if bound is None and mk.cert_style("credit") not in d:
                        continue  # not measured (a run without the certificate) and nothing to certify
                    credit = _credit(d)
                    ok = bound is not None and certify(credit, bound, src).certified
                    certs.append({"role": role, "seed": s, "when": when, "credit": credit.credit,
                                  "low": credit.low, "high": credit.high, "certified": ok})
        certified = bound is not None and all(c["certified"] for c in certs)
    zs = [float(base[s].series(mk.ZERO_SPREAD_GROUPS).mean()) for s in seeds
          if any(mk.ZERO_SPREAD_GROUPS in r for r in base[s].rows)]
    zero_spread = float(np.mean(zs)) if zs else None
    if zero_spread is not None:
        notes.append(f"{100 * zero_spread:.0f}% of the baseline's groups have zero reward spread"
                     + (f" (> {100 * ZERO_SPREAD_LIMIT:.0f}%: the design is refused)." if zero_spread > ZERO_SPREAD_LIMIT
                        else "."))
    return FrozenPilot(name, seeds, pilots, {"P1": 1, "P2": s2, "P3": s3}, o, p_style, sens, bound, certified,
                       certs, notes, zero_spread)
