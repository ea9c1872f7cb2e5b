"""Every tolerance of the checker, in one place (docs/properties.md, "Tolerances and precision").

All are relative and judged in float64. A property holds on an example when its
normalised residual is ``<= tolerance``.

- cancellation: ``|K_e| <= RTOL_CANCEL * (sum over the event's occurrences of |kappa|
  + ATOL_REL * max|kappa|)``: the natural scale of a cancelling sum is the sum of the
  magnitudes it cancels.
- direction: shared-event coefficient vectors (one entry per response) are normalised;
  the sine of the angle between each and their principal direction must be
  ``<= RTOL_DIRECTION``. Vectors shorter than ``ZERO_COLUMN`` times the longest in their
  group count as zero (their direction is round-off).
- equality (null on equal rewards, permutation): ``<= RTOL_EQUAL * max|kappa|``.
- precision (THEORY.md section 4, precision rule): verdicts come from the float64 twin;
  where the loss itself is judged at float32 or bf16 (an incomplete twin's fallback, a
  precision-induced break), at ``max(property tolerance, PRECISION_RTOL[precision])``.
- patterns (what names a mechanism: :func:`pattern_tol`): three times the resolution of
  the precision the loss runs in, at least ``1e-6``.
- vacuity: a property needs ``MIN_INFORMATIVE_SHARE`` of its examples to be able to
  fail before it may be called "holds".
"""

from __future__ import annotations


__all__ = [
    "RTOL_CANCEL", "ATOL_REL", "RTOL_DIRECTION", "ZERO_COLUMN", "RTOL_EQUAL", "TINY",
    "PRECISIONS", "PRECISION_RTOL", "RESOLUTION", "pattern_tol", "SHAPING_LEAK", "MIN_INFORMATIVE_SHARE", "MAX_MISMATCHES", "at_precision",
    "ROUND_OFF_MARGIN", "SECOND_REWARDS_STEP",
    "FLOOR_MARGIN", "ROUNDINGS",
]

RTOL_CANCEL = 1e-8
ATOL_REL = 1e-12
RTOL_DIRECTION = 1e-6
ZERO_COLUMN = 1e-9
RTOL_EQUAL = 1e-9
TINY = 1e-300  # added to a denominator so that 0 / 0 reads as 0, never NaN

PRECISIONS = ("float64", "float32", "bf16")
# The loss judged at its own precision (the fallback and the precision-induced path only;
# the twin is judged at the float64 tolerances): THEORY.md section 4's "about 1e-7 relative
# for float32, 1e-2 for bf16", with room for the few roundings a normalised residual sums
# (float32 1e-6 = 8.4 eps, bf16 3e-2 = 3.8 eps). Kept as recorded, not re-derived in issue
# 45: its users are tests/checker/test_precision_corpus.py's numpy-float32 fallback and
# the precision-induced cases (GSPO's bf16 clip, tests/checker/test_real_loss_kinds.py).
PRECISION_RTOL = {"float64": 0.0, "float32": 1e-6, "bf16": 3e-2}

MIN_INFORMATIVE_SHARE = 0.1


def at_precision(tolerance: float, precision: str, exact: bool = False) -> float:
    """A property's float64 ``tolerance`` widened to the round-off of ``precision``
    (``finite``'s exact 0 stays 0). ``exact``: the evaluation is one whose value is 0 in
    every precision when the property holds (every advantage computed from rewards that
    are all exactly 0, so products with them are exact zeros): round-off cannot account
    for a residual there, and the float64 tolerance applies."""
    return tolerance if tolerance == 0 or exact else max(tolerance, PRECISION_RTOL[precision])

# The resolution of each precision: its machine epsilon (THEORY.md section 4: "about 1e-7
# relative for float32, 1e-2 for bf16"). Composed objectives draw their parameters so that
# every expected effect is at least ten times it (exchange.objectives.composition).
RESOLUTION = {"float64": 2.0 ** -52, "float32": 2.0 ** -23, "bf16": 2.0 ** -7}


def pattern_tol(precision: str) -> float:
    """Two coefficient patterns of a probe count as different (a rank, a profile that
    varies, a level that moves the tied coefficients, a factor that differs between
    responses or between the signs of their advantages, a zero crossing that moves with
    the response's features) when their relative difference exceeds this: three times
    the resolution of ``precision`` (a statistic of a few rounded terms stays below
    it: 2 to 3 epsilons), and never below ``1e-6`` (the float64 algebra of the probes
    themselves: SVDs, quotients). Every effect a composed objective expects is ten
    times the resolution or more, so the threshold sits between round-off and effects."""
    return max(1e-6, 3.0 * RESOLUTION[precision])


# Probes that read a weight or a centre run at rewards within +-8 (libraries clip rewards:
# OpenRLHF at +-10, AReaL at +-20). A reward shaping s of O(1) reaches a std-scaled
# advantage's response to a reward move by O(s / spread) (the weight quotient) or
# O((s / spread)^2) (the centre test); both probes run at spreads 4 and 8 and extrapolate
# that order away. Measured on the generator's shapings with every estimator: at most
# 1.9% left on the weight quotient and 0.1% on the centre test, against effects of 100%
# (weights of lengths 3 and 6), 20% (OPO's centre) and 7.7% (SkyRL's token-weighted batch
# whitening). A weight or a centre must differ by more than this to name a mechanism.
# Needed: tests/checker/test_precision_corpus.py::test_a_length_shaping_through_a_std_is_not_a_foreign_centre
# (benchmark seed 1 #47, a length penalty through GRPO's std behind a zero-std filter) reads
# (Z) broken + M4 at 0; the extrapolations' own measured errors do not cover that leak.
SHAPING_LEAK = 0.04


# The twin and the loss (THEORY.md section 4, precision rule; docs/properties.md, "Tolerances").
# The loss's coefficients differ from its float64 twin's by its round-off on that input; the
# float32 twin (the same code, every floating step in float32) differs by the same
# computation's float32 round-off, so the round-off the loss's precision p can commit there
# is that difference times eps_p / eps_float32 (at least one rounding of the result, eps_p
# of the largest coefficient). Two precisions rounding one computation do not round in
# proportion: measured on the precision corpus and the bf16/float32 kinds of
# tests/checker/test_real_loss_kinds.py, the loss's difference stayed within 3.8 times that
# prediction, while a clip decided on rounded values (GSPO's 3e-4 clip on bf16 log-probs)
# reached 100-260 times it. A difference beyond ROUND_OFF_MARGIN times the prediction is a
# change of what the loss computes (a factor 4 from each side). Not derivable: a forward
# error bound is n eps times a conditioning for both precisions, but one run of each samples
# where in [0, n eps] its roundings land (the float32 twin may round nothing where bf16
# rounds), so the quotient of two samples has no bound; the margin separates the two
# measured populations. The float64 floor (float64_floor.floored) uses it for a like reason: its
# runs with every rounding directed up, then down, are two combinations of the directions, not
# the worst (a residual that sums effects of mixed signs), and its step from one rounding to
# two shows a square-root response at sqrt(2) - 1 = 0.41 of its size (composition seed 2026
# #269: the step sums to 5.4e-7 over its two sides, the residual is 1.5e-7). Needed (tests
# fail without it; rechecked with the directed float64 floor at 8305362): at 1,
# test_twin's square-root floor and within-round-off cases and test_real_loss_kinds' kind-5
# bf16 shaped rewards read as breaks (3 failed, 40 passed); at 300, test_precision_corpus's
# GSPO bf16 clip and three-identical-responses bf16 z-score are no longer precision-induced
# breaks (2 failed, 22 passed).
ROUND_OFF_MARGIN = 16.0

# Mechanism evidence (exchange.checker.mechanisms; helper M, issue 45).
# A pattern counts only when it exceeds this many times its own measured round-off floor
# (copies of the pattern that are equal in exact arithmetic disagree by the floor; a few
# samples estimate it, they do not bound it, as ROUND_OFF_MARGIN's two twins do not). Kept,
# not derived (a quotient of samples has no bound). Needed: at 1,
# tests/checker/mechanisms/test_planted.py's test_m6_profile_and_reward_independence and
# test_m7_feature_rows_and_cancelling fail (round-off read as a second direction).
FLOOR_MARGIN = 4.0
# A derivation, not a margin: where two rounded quantities are compared (a difference
# b1 - b2, a remainder v - q b, two zero crossings), each carries at most one rounding
# bound (eps times its size, or a coefficient's floor over its slope), so their difference
# carries at most two. Needed: tests/checker/test_round_off_bounds.py (two crossings each
# rounded by 0.9 of the floor read as an event term, M6, at 1).
ROUNDINGS = 2.0


# The second reward vector of the reward-dependent probes (residuals.second_rewards): the
# j-th response of a mixed group moves by this times its spread times (1 + j / G), at most
# 0.3 spread in all and 0.15 spread for the centre, less than the 0.25 spread between a
# group's centre and a reward one apart: every centred advantage keeps its sign.
SECOND_REWARDS_STEP = 0.2


# Mismatch lines kept per evaluation (reports stay readable).
MAX_MISMATCHES = 8
