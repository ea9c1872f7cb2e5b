"""Searching a property for a failure, and counting the examples, in one place.

Two fuzzers: ``"bulk"`` (:mod:`exchange.checker.bulk`: configurations batched by layout;
on a confirmed failure Hypothesis searches again with the same seed to find and shrink a
minimal one, and the greedy shrinker takes the bulk failure when Hypothesis finds none)
and ``"per_example"`` (every example through Hypothesis, one at a time: the oracle the
tests and benchmarks compare against, and what a user's Hypothesis profile runs).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hypothesis_seed

from exchange.checker import bulk
from exchange.checker.bulk import Tally, evaluate_or_error
from exchange.checker.examples import Example
from exchange.checker.properties.base import Evaluation, Property
from exchange.checker.report import FoundBy
from exchange.checker.shrinking import shrink as greedy_shrink
from exchange.core.coefficients import Engine
from exchange.errors import InvalidArgument

__all__ = ["FUZZERS", "Tally", "Search", "search", "shrink_failure", "evaluate_or_error"]

FUZZERS = ("bulk", "per_example")


@dataclass
class Search:
    """How to search: ``fuzzer`` (:data:`FUZZERS`), ``shrink`` a failure or not, a user's
    Hypothesis ``profile`` (per example), and whether to try vmap (off under a time limit:
    a vmapped call cannot be interrupted per example)."""

    fuzzer: str = "bulk"
    shrink: bool = True
    profile: str | None = None
    use_vmap: bool = True

    def __post_init__(self) -> None:
        if self.fuzzer not in FUZZERS:
            raise InvalidArgument(f"fuzzer={self.fuzzer!r}: choose from {FUZZERS}.")
        if not isinstance(self.shrink, bool):
            raise InvalidArgument(f"shrink={self.shrink!r} must be True or False.")
        if self.profile is not None:
            self.fuzzer = "per_example"  # the user's Hypothesis settings decide the search


class _Falsified(Exception):
    def __init__(self, evaluation: Evaluation) -> None:
        super().__init__(evaluation.mismatches[:1])
        self.evaluation = evaluation


def _hypothesis(engine: Engine, prop: Property, regime: str, max_examples: int, seed: int, tolerance: float,
                how: Search, tally: Tally) -> Evaluation | None:
    """Hypothesis over the property's examples; the first failure (shrunk unless
    ``how.shrink`` is False), counted in ``tally``."""
    if how.profile is None:
        base = settings(max_examples=max_examples, database=None, derandomize=False,
                        phases=(Phase.explicit, Phase.generate, Phase.shrink))
    else:  # the user's profile decides max_examples, database, derandomize, phases...
        base = settings.get_profile(how.profile)
    # only what the checker needs to read a result stays fixed
    chosen = settings(base, phases=tuple(p for p in base.phases if how.shrink or p is not Phase.shrink),
                      deadline=None, verbosity=Verbosity.quiet, suppress_health_check=list(HealthCheck),
                      report_multiple_bugs=False)

    @chosen
    @hypothesis_seed(seed)
    @given(prop.examples(regime))
    def run(example) -> None:
        ev = evaluate_or_error(engine, prop, example, regime)
        tally.add(1, int(ev.informative))  # every evaluation once, shrinking's included
        if not ev.residual <= tolerance:
            raise _Falsified(ev)
        tally.add(0, 0, ev.residual)

    try:
        run()
    except _Falsified as failure:
        tally.add(0, 0, failure.evaluation.residual)
        return failure.evaluation
    return None


def search(engine: Engine, prop: Property, regime: str, max_examples: int, seed: int, tolerance: float,
           how: Search) -> tuple[Tally, Evaluation | None, FoundBy | None]:
    """``(tally, failure or None, how it was found)`` for ``prop`` in ``regime``."""
    if how.fuzzer == "per_example":
        tally = Tally()
        failure = _hypothesis(engine, prop, regime, max_examples, seed, tolerance, how, tally)
        return tally, failure, FoundBy(fuzzer="per_example", shrunk=how.shrink) if failure else None
    tally = bulk.run(engine, prop, regime, max_examples, seed, tolerance, use_vmap=how.use_vmap)
    if tally.failure is None:
        return tally, None, None
    if not how.shrink:
        return tally, tally.evaluation, FoundBy(fuzzer="bulk", shrunk=False)
    failure = _hypothesis(engine, prop, regime, max_examples, seed, tolerance, how, tally)
    if failure is not None:  # Hypothesis found and shrank its own
        return tally, failure, FoundBy(fuzzer="per_example", shrunk=True)
    return tally, shrink_failure(engine, prop, tally.failure, regime, tolerance), FoundBy(fuzzer="bulk", shrunk=True)


def shrink_failure(engine: Engine, prop: Property, example: Example, regime: str, tolerance: float) -> Evaluation:
    """The evaluation of the smallest failing example the greedy shrinker reaches from
    ``example`` (:func:`exchange.checker.shrinking.shrink`, under ``prop``'s rules)."""
    def fails(candidate: Example) -> bool:
        try:
            return not evaluate_or_error(engine, prop, candidate, regime).residual <= tolerance
        except Exception:  # an invalid candidate (an override the shrunk case cannot hold)
            return False

    return evaluate_or_error(engine, prop, greedy_shrink(example, fails, prop.shrink), regime)
