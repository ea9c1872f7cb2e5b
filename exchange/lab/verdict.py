"""Predict, then test: the verdict rule of issue 31 as typed results.

A signed prediction (P1-P3) is decided against a **predicted effect** ``delta_hat``
frozen from pilot seeds the test does not use (:class:`Pilot`): the first-order
effect of the cancellation pathway on the probe (:mod:`exchange.lab.attribution`),
oriented by the theory's sign at the probe event (:func:`orient`). From it:

- the design's minimum detectable effect ``MDE = (t_{1-a/2} + t_{power}) * sd / sqrt(n)``
  (``sd`` of the paired difference, from the pilot before the test, from the test seeds
  after); the design is **accepted** only when ``delta_hat >= 3 * MDE``, otherwise every
  verdict of it is :attr:`Verdict.UNINFORMATIVE` ("uninformative at this dose");
- the smallest effect of interest ``SESOI = delta_hat / 2``: half the predicted effect,
  so "negligible" means "less than half of what the theory predicts at this dose"
  (:attr:`Decision.sesoi_derivation` says so in the report).

In units oriented by the frozen sign (prediction => ``d > 0``) the verdict follows the
``1 - alpha`` interval ``[low, high]`` of the mean paired difference, in this order
(:func:`decide_signed`):

1. ``high < 0``: **opposite** (refutes the predicted direction);
2. ``-SESOI < low`` and ``high < SESOI``: **negligible** (refuted at this dose);
   **negligible but real** if it also excludes 0;
3. ``low > 0``: **effect**, qualified :attr:`Size.SMALLER` (``high < delta_hat``),
   :attr:`Size.COMPATIBLE` (the interval contains ``delta_hat``) or :attr:`Size.LARGER`;
4. otherwise **inconclusive**, with the MDE.

P4 (accuracy) has no first-order prediction (:func:`decide_p4`): its estimate, interval
and MDE are reported, and it is called negligible only against a SESOI whose source is
stated (e.g. the evaluation's standard error), never by taste.
"""

from __future__ import annotations

import enum
import math
from dataclasses import asdict, dataclass

import numpy as np

from exchange.errors import InvalidArgument

__all__ = [
    "ACCEPT_RATIO",
    "ROUNDOFF_FLOOR",
    "Decision",
    "DoseResponse",
    "EXCHANGEABLE_ROLES",
    "FLAT",
    "NOT_FLAT",
    "NO_CLAIM",
    "Orientation",
    "OwnDrift",
    "Pilot",
    "SesoiSource",
    "Size",
    "Verdict",
    "decide_dose_response",
    "decide_p4",
    "decide_signed",
    "design_mde",
    "dose_response_mde",
    "interval",
    "orient",
    "own_drift",
    "size_against",
]

ACCEPT_RATIO = 3.0
"""A design is accepted only when ``delta_hat >= ACCEPT_RATIO * MDE``."""
ROUNDOFF_FLOOR = 1e-9
"""Orientation floor, relative: a signed coefficient ``|K| <= ROUNDOFF_FLOOR * mass``
(``mass = sum |kappa|`` at the event) is round-off (float64 sums of coefficients that
cancel leave ~1e-16 * mass; the floor sits far above that and far below any real
residual the harness doses, >= 1e-4), so it orients nothing."""


class Verdict(str, enum.Enum):
    OPPOSITE = "opposite"
    NEGLIGIBLE = "negligible"
    NEGLIGIBLE_BUT_REAL = "negligible but real"
    EFFECT = "effect"
    INCONCLUSIVE = "inconclusive"
    UNINFORMATIVE = "uninformative at this dose"
    NOT_TESTED = "not tested"


class Size(str, enum.Enum):
    SMALLER = "smaller than predicted"
    COMPATIBLE = "compatible with the prediction"
    LARGER = "larger than predicted"


@dataclass(frozen=True)
class Orientation:
    """The sign of the theory's predicted drift at one probe event, from the pilot.

    ``sign`` is +1/-1, or 0 when fewer than ``min_agreement`` of the counted values
    (those above the round-off floor) share one sign, or none is counted."""

    sign: int
    counted: int
    """values above the round-off floor"""
    agreeing: int
    """counted values with ``sign``"""
    total: int

    @property
    def agreement(self) -> float:
        return self.agreeing / self.counted if self.counted else 0.0


def orient(signed_K, mass, *, floor: float = ROUNDOFF_FLOOR, min_agreement: float = 0.0) -> Orientation:
    """Orientation of a probe event from the pilot's signed shared coefficient at it.

    ``signed_K``, ``mass``: ``[M]`` per minibatch (or per run): ``K_e`` at the probe event and
    its coefficient mass ``sum |kappa|``. Values with ``|K| <= floor * mass`` are round-off
    and not counted (never ``np.sign`` of round-off). ``sign`` is the sign of the sum of the
    counted values, kept only if at least ``min_agreement`` of them share it (M3's
    design asks 0.9)."""
    k = np.asarray(signed_K, dtype=np.float64)
    m = np.asarray(mass, dtype=np.float64)
    if k.shape != m.shape or k.ndim != 1:
        raise InvalidArgument(f"signed_K shape={list(k.shape)} and mass shape={list(m.shape)}: need two equal [M].")
    if np.any(m < 0) or not np.isfinite(k).all() or not np.isfinite(m).all():
        raise InvalidArgument("mass must be >= 0 and both arrays finite.")
    real = np.abs(k) > floor * m
    counted = int(real.sum())
    if counted == 0:
        return Orientation(0, 0, 0, int(k.size))
    s = int(np.sign(k[real].sum()))
    agreeing = int((np.sign(k[real]) == s).sum())
    if s == 0 or agreeing / counted < min_agreement:
        return Orientation(0, counted, agreeing, int(k.size))
    return Orientation(s, counted, agreeing, int(k.size))


def _t(q: float, df: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(q, df))


def design_mde(sd: float, n: int, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """``(t_{1-alpha/2, n-1} + t_{power, n-1}) * sd / sqrt(n)``: the smallest mean paired
    difference ``n`` seeds detect with ``power`` (two-sided ``alpha``)."""
    if n < 2:
        raise InvalidArgument(f"n={n} seeds: a paired design needs >= 2.")
    if not sd >= 0:
        raise InvalidArgument(f"sd={sd} must be >= 0.")
    return (_t(1 - alpha / 2, n - 1) + _t(power, n - 1)) * sd / math.sqrt(n)


@dataclass(frozen=True)
class Pilot:
    """What the pilot seeds froze before the test seeds ran.

    ``delta_hat`` (> 0 in oriented units) is the mean predicted effect, ``sd`` the paired
    difference's standard deviation on the pilot, ``seeds`` the pilot seeds (disjoint
    from the test's), ``source`` how ``delta_hat`` was computed."""

    delta_hat: float
    sd: float
    seeds: tuple[int, ...]
    source: str = "first-order attribution (Adam tangent) of the shared residual, summed over the run"
    delta_hat_surgical: float | None = None
    """Issue 42: the same attribution along the surgical arm's path (the residual its base
    objective would have added), oriented; with ``delta_hat`` it brackets the prediction."""

    @property
    def bracket(self) -> tuple[float, float]:
        """``(low, high)``: the predicted effect along both arms' paths (one path: a point)."""
        vals = [self.delta_hat] + ([self.delta_hat_surgical] if self.delta_hat_surgical is not None else [])
        return min(vals), max(vals)

    @property
    def magnitude(self) -> float:
        """The bracket's distance from 0 (0 when it straddles 0): the smallest effect the
        theory predicts at this dose, whatever its sign."""
        lo, hi = self.bracket
        return 0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi))

    def mde(self, n: int, *, alpha: float = 0.05, power: float = 0.8) -> float:
        return design_mde(self.sd, n, alpha=alpha, power=power)

    def accepted(self, n: int, *, alpha: float = 0.05, power: float = 0.8) -> bool:
        """On power only (issue 42): the bracket's magnitude ``>= 3 x MDE`` at ``n`` test
        seeds, whatever the predicted sign (an "opposite" outcome stays publishable)."""
        m = self.magnitude
        return m > 0 and m >= ACCEPT_RATIO * self.mde(n, alpha=alpha, power=power)


@dataclass(frozen=True)
class Decision:
    """One decided prediction: everything the report prints, nothing parsed back."""

    key: str
    mean: float
    low: float
    high: float
    n: int
    mde: float
    verdict: Verdict
    size: Size | None = None
    delta_hat: float | None = None
    sesoi: float | None = None
    sesoi_derivation: str = ""
    accepted: bool | None = None
    """``delta_hat >= 3 x MDE`` (None for P4, which has no prediction)."""
    n_positive: int = 0

    @property
    def label(self) -> str:
        """The verdict as printed: ``effect (compatible with the prediction)``."""
        return f"{self.verdict.value} ({self.size.value})" if self.size is not None else self.verdict.value

    def to_dict(self) -> dict:
        d = asdict(self)
        d["verdict"] = self.verdict.value
        d["size"] = None if self.size is None else self.size.value
        d["label"] = self.label
        return d


def interval(diffs, *, alpha: float = 0.05) -> tuple[float, float, float, float, int]:
    """``(mean, low, high, sd, n)``: the paired t-interval of ``diffs: [S]`` (finite, S >= 2)."""
    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim != 1 or d.size < 2:
        raise InvalidArgument(f"diffs shape={list(d.shape)}: need one difference per seed and >= 2 seeds.")
    if not np.isfinite(d).all():
        raise InvalidArgument(f"diffs={d.tolist()} has a non-finite value; a run is missing a metric.")
    n = int(d.size)
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    half = _t(1 - alpha / 2, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half, sd, n


def decide_signed(key: str, diffs, pilot: Pilot, *, alpha: float = 0.05, power: float = 0.8) -> Decision:
    """The rule of the module docstring for P1-P3. ``diffs: [S]`` are the test seeds'
    paired differences **already oriented** by the frozen sign (prediction => > 0); the
    test seeds must not include a pilot seed (the caller checks seeds; here ``pilot``
    only supplies ``delta_hat`` and the design's acceptance)."""
    mean, low, high, sd, n = interval(diffs, alpha=alpha)
    mde = design_mde(sd, n, alpha=alpha, power=power)
    dh = pilot.delta_hat
    lo_b, hi_b = pilot.bracket
    sesoi = pilot.magnitude / 2 if pilot.magnitude > 0 else None
    deriv = (f"SESOI = half the lower end of delta_hat's bracket [{lo_b:.3g}, {hi_b:.3g}] = {pilot.magnitude:.3g} / 2: "
             f"half the smallest effect the pathway is predicted to have at this dose ({pilot.source}"
             + ("; bracketed by the same attribution along the surgical arm's path" if pilot.delta_hat_surgical
                is not None else "; one path only, no bracket") + f"; pilot seeds {list(pilot.seeds)})")
    accepted = pilot.accepted(n, alpha=alpha, power=power)
    npos = int((np.asarray(diffs) > 0).sum())
    common = {"key": key, "mean": mean, "low": low, "high": high, "n": n, "mde": mde, "delta_hat": dh,
              "sesoi": sesoi, "sesoi_derivation": deriv, "accepted": accepted, "n_positive": npos}
    if not accepted:
        return Decision(verdict=Verdict.UNINFORMATIVE, **common)
    verdict = _rule(low, high, sesoi)
    return Decision(verdict=verdict, size=size_against(low, high, (lo_b, hi_b)) if verdict is Verdict.EFFECT else None,
                    **common)


def _rule(low: float, high: float, sesoi: float) -> Verdict:
    if high < 0:
        return Verdict.OPPOSITE
    if -sesoi < low and high < sesoi:
        return Verdict.NEGLIGIBLE_BUT_REAL if low > 0 else Verdict.NEGLIGIBLE
    if low > 0:
        return Verdict.EFFECT
    return Verdict.INCONCLUSIVE


def size_against(low: float, high: float, delta_hat: float | tuple[float, float]) -> Size:
    """Against the prediction's bracket ``(lo, hi)`` (a point is a bracket of width 0):
    smaller when the interval lies below it, larger above, compatible when they overlap."""
    lo_b, hi_b = (delta_hat, delta_hat) if isinstance(delta_hat, (int, float)) else delta_hat
    if high < lo_b:
        return Size.SMALLER
    if low > hi_b:
        return Size.LARGER
    return Size.COMPATIBLE


FLAT, NOT_FLAT = "flat", "not flat"
NO_CLAIM = "n/a: not an exchangeable arm"
"""The "flat?" reading of an arm THEORY.md's P2 makes no flatness claim about: the baseline
carries the pathway, a dose arm keeps part of it; only :data:`EXCHANGEABLE_ROLES` stay flat."""
EXCHANGEABLE_ROLES = ("surgical", "treatment")
"""The arms whose objective is exchangeable at the probe event (the surgical arm removes the
shared residual; the treatment restores exchangeability): THEORY.md's "exchangeable variants
stay flat" is a claim about these only."""


@dataclass(frozen=True)
class OwnDrift:
    """Issue 42's other half of a prediction: one arm's drift against its **own** start
    (``final - initial`` per seed, unoriented), its interval, and whether it "stays flat":
    the interval lies inside ``±sesoi`` (the same prediction's SESOI). Reported for every
    arm; THEORY.md's P2 says the exchangeable arms (surgical, restoring) stay flat."""

    role: str
    mean: float
    low: float
    high: float
    n: int
    sesoi: float | None
    flat: str
    """FLAT, NOT_FLAT, "no SESOI" when the prediction has none, or :data:`NO_CLAIM` for an
    arm that is not exchangeable (the baseline, a dose arm): no "flat" is claimed of it"""

    def to_dict(self) -> dict:
        return asdict(self)


def own_drift(role: str, changes, sesoi: float | None, *, alpha: float = 0.05) -> OwnDrift:
    """``changes: [S]`` the arm's own ``final - initial`` per seed; ``role`` decides whether
    "flat" is claimed of it (:data:`EXCHANGEABLE_ROLES`; session 5 found the baseline's row
    labelled "flat", a claim THEORY.md makes of the exchangeable arms only)."""
    mean, low, high, _, n = interval(changes, alpha=alpha)
    if role not in EXCHANGEABLE_ROLES:
        flat = NO_CLAIM
    elif sesoi is None or not sesoi > 0:
        flat = "no SESOI"
    else:
        flat = FLAT if -sesoi < low and high < sesoi else NOT_FLAT
    return OwnDrift(role, mean, low, high, n, sesoi, flat)


@dataclass(frozen=True)
class SesoiSource:
    """Where P4's SESOI comes from (issue 42): ``prediction_derived`` only when the margin
    is derived from a prediction of the accuracy effect (a first-order prediction of the
    accuracy change, or an equivalence margin a theory states). An evaluation's standard
    error is **not**: it measures the instrument, not what the theory allows, and a
    "negligible" against it is a refutation by taste (the row says "uninformative")."""

    text: str
    prediction_derived: bool

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text.strip():
            raise InvalidArgument("SesoiSource.text is empty: say how the margin was derived.")
        if not isinstance(self.prediction_derived, bool):
            raise InvalidArgument(f"SesoiSource.prediction_derived={self.prediction_derived!r} must be True or False.")


def decide_p4(diffs, *, sesoi: float | None = None, sesoi_source: SesoiSource | None = None, alpha: float = 0.05,
              power: float = 0.8) -> Decision:
    """P4 (accuracy, ``treatment - baseline``): no first-order prediction. The estimate,
    interval and MDE; "effect" when the interval excludes 0 above, "opposite" below;
    "negligible" only when the interval lies within ``±sesoi`` **and** ``sesoi_source``
    is prediction-derived (:class:`SesoiSource`); an interval inside a margin that is not
    is :attr:`Verdict.UNINFORMATIVE` (nothing predicted the margin); otherwise inconclusive."""
    if sesoi is not None and not isinstance(sesoi_source, SesoiSource):
        raise InvalidArgument(f"sesoi={sesoi} with sesoi_source={sesoi_source!r}: pass a SesoiSource(text, "
                              "prediction_derived) saying whether the margin comes from a prediction of the accuracy "
                              "effect (an eval standard error does not: prediction_derived=False).")
    if sesoi is not None and not sesoi > 0:
        raise InvalidArgument(f"sesoi={sesoi} must be > 0.")
    mean, low, high, sd, n = interval(diffs, alpha=alpha)
    mde = design_mde(sd, n, alpha=alpha, power=power)
    inside = sesoi is not None and -sesoi < low and high < sesoi
    if sd == 0 and mean == 0:
        v = Verdict.UNINFORMATIVE  # did not move in any seed (a ceiling): no power either way
    elif high < 0:
        v = Verdict.OPPOSITE
    elif inside and sesoi_source.prediction_derived:
        v = Verdict.NEGLIGIBLE_BUT_REAL if low > 0 else Verdict.NEGLIGIBLE
    elif low > 0:
        v = Verdict.EFFECT
    elif inside:
        v = Verdict.UNINFORMATIVE  # inside a margin no prediction gives: not evidence of "negligible"
    else:
        v = Verdict.INCONCLUSIVE
    deriv = "" if sesoi_source is None else (
        sesoi_source.text + ("" if sesoi_source.prediction_derived else " (not derived from a prediction of the "
                             "accuracy effect: no 'negligible' verdict against it)"))
    return Decision(key="P4", mean=mean, low=low, high=high, n=n, mde=mde, verdict=v, sesoi=sesoi,
                    sesoi_derivation=deriv, n_positive=int((np.asarray(diffs) > 0).sum()))


# ------------------------------------------------------ dose-response (M2's design)
@dataclass(frozen=True)
class DoseResponse:
    """The slope of the measured paired differences on the predicted effects over several
    doses (e.g. M2's clip widths): ``d_{w,s} = b * delta_hat_w + noise``, least squares
    through the origin. The theory predicts ``b = 1`` (the first-order prediction is the
    effect); ``b = 0`` means the measured effect does not follow the dose. Decided by the
    module's rule on the slope's interval with ``delta_hat = 1`` and ``SESOI = 1/2``."""

    key: str
    slope: float
    low: float
    high: float
    n: int
    """number of (dose, seed) differences"""
    mde: float
    """of the slope, from the pilot's SDs (the design), at the test's seeds"""
    accepted: bool
    """``1 >= ACCEPT_RATIO * mde``"""
    verdict: Verdict
    size: Size | None = None

    @property
    def label(self) -> str:
        return f"{self.verdict.value} ({self.size.value})" if self.size is not None else self.verdict.value


def dose_response_mde(pilots: list[Pilot], n: int, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """MDE of the dose-response slope for ``n`` test seeds per dose, from each dose's
    pilot (``delta_hat_w``, paired SD ``sd_w``): ``SE(b) = sqrt(sum_w dh_w^2 sd_w^2 / n) /
    sum_w dh_w^2`` (least squares through the origin, independent doses)."""
    dh = np.array([p.delta_hat for p in pilots], dtype=np.float64)
    sd = np.array([p.sd for p in pilots], dtype=np.float64)
    ss = float((dh ** 2).sum())
    if len(pilots) < 2 or n < 2 or ss == 0:
        raise InvalidArgument(f"doses={len(pilots)}, seeds={n}, sum delta_hat^2={ss}: a dose-response needs >= 2 "
                              "doses with a non-zero prediction and >= 2 seeds per dose.")
    se = math.sqrt(float((dh ** 2 * sd ** 2).sum()) / n) / ss
    df = len(pilots) * n - 1
    return (_t(1 - alpha / 2, df) + _t(power, df)) * se


def decide_dose_response(key: str, delta_hats, diffs, pilots: list[Pilot], *, alpha: float = 0.05,
                         power: float = 0.8) -> DoseResponse:
    """``delta_hats: [W]`` frozen per dose (oriented), ``diffs: [W][S]`` the test seeds'
    oriented paired differences per dose; ``pilots`` the doses' pilots (the design's MDE).
    Least squares through the origin; the interval uses the residual SD."""
    dh = np.asarray(delta_hats, dtype=np.float64)
    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != dh.size or d.shape[1] < 2:
        raise InvalidArgument(f"diffs shape={list(d.shape)} with {dh.size} doses: need one row of >= 2 seeds per dose.")
    if not np.isfinite(d).all() or not np.isfinite(dh).all():
        raise InvalidArgument("a dose-response needs finite delta_hats and differences; a run is missing a metric.")
    x = np.repeat(dh, d.shape[1])
    y = d.flatten()
    sxx = float((x ** 2).sum())
    if sxx == 0:
        raise InvalidArgument("every delta_hat is 0: the doses do not vary the prediction.")
    b = float((x * y).sum() / sxx)
    df = y.size - 1
    se = math.sqrt(float(((y - b * x) ** 2).sum()) / df / sxx)
    half = _t(1 - alpha / 2, df) * se
    low, high = b - half, b + half
    mde = dose_response_mde(pilots, d.shape[1], alpha=alpha, power=power)
    accepted = 1.0 >= ACCEPT_RATIO * mde
    if not accepted:
        return DoseResponse(key, b, low, high, y.size, mde, False, Verdict.UNINFORMATIVE)
    v = _rule(low, high, 0.5)
    size = size_against(low, high, 1.0) if v is Verdict.EFFECT else None
    return DoseResponse(key, b, low, high, y.size, mde, True, v, size)
