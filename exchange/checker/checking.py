"""``check``: audit a loss function for (Z), (E), (C) and friends (THEORY.md section 2).

In each regime (on-policy: every ratio 1; off-policy: event-consistent ratios on both
sides of the usual clip ranges) the targeted probes run first (:mod:`exchange.checker.probes`:
a property a probe breaks gets its group as counterexample, and the mechanisms its
evidence shows), then every property they did not break is searched
(:mod:`exchange.checker.search`). A property no example could have failed is reported
broken with a note, never holding. Every property is judged on the loss's float64 twin
(:mod:`exchange.checker.twin`), beside the loss itself where it runs below float64
(:mod:`exchange.checker.twin_verdicts`); tolerances: :mod:`exchange.checker.tolerances`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable

import torch
from hypothesis import settings

from exchange.checker.mechanisms.rule import MechanismSet, counted, design_choice, dropped_notes
from exchange.checker.cases import build
from exchange.checker.precision import resolve_precision
from exchange.checker.twin_verdicts import fallback, on_twin, twin_line
from exchange.checker.probes import PROBES, run_probes
from exchange.checker.properties import PROPERTIES, TOLERANCES, Evaluation, get_property
from exchange.checker.report import FoundBy, PropertyResult, RegularizerReport, Report
from exchange.checker.reproduce import reproduce_line
from exchange.checker.search import Search, search
from exchange.checker.time_limit import time_limited
from exchange.checker.tolerances import MIN_INFORMATIVE_SHARE, RTOL_EQUAL, TINY, at_precision
from exchange.checker.twin import float64_twin
from exchange.core.coefficients import LossFn, token_coefficients
from exchange.core.events import events
from exchange.core.vocabulary import PROPERTY_THEOREMS, REGIMES, Regime
from exchange.errors import InvalidArgument, ObjectiveError

__all__ = ["check"]

# The regularizer channel's second reward vector: the rewards reversed, times 3, plus 1.
_OTHER_REWARDS = (3.0, 1.0)


def _regularizer_report(regularizer: LossFn) -> RegularizerReport:
    """Coefficients of the KL/entropy channel on an off-policy probe group."""
    rollout = build(dataclasses.replace(PROBES[0].case, off_policy=True))
    kappa = token_coefficients(regularizer, rollout.logprobs, rollout)
    scale, shift = _OTHER_REWARDS
    other = rollout.replace(rewards=rollout.rewards.flip(0) * scale + shift)
    kappa_other = token_coefficients(regularizer, other.logprobs, other)
    ev = events(rollout)
    valid = ev.ids >= 0
    ids, vals = ev.ids[valid], kappa[valid]
    first = torch.full((ev.count,), float("nan"), dtype=vals.dtype).scatter_reduce(0, ids, vals, "amax", include_self=False)
    last = torch.full((ev.count,), float("nan"), dtype=vals.dtype).scatter_reduce(0, ids, vals, "amin", include_self=False)
    top = float(kappa.abs().max()) + TINY
    return RegularizerReport(
        max_abs=float(kappa.abs().max()),
        event_consistent=bool(((first - last).abs() <= RTOL_EQUAL * top).all()),
        reward_independent=bool(((kappa - kappa_other).abs() <= RTOL_EQUAL * top).all()),
    )


def _validate(properties, max_examples, seed, regimes) -> tuple[tuple[str, ...], tuple[Regime, ...]]:
    if properties is None:
        names = tuple(PROPERTIES)
    else:
        if isinstance(properties, str):
            properties = (properties,)
        names = tuple(get_property(p).name for p in properties)
        if not names:
            raise InvalidArgument("properties=() is empty; pass None to check every property.")
    if not isinstance(max_examples, int) or isinstance(max_examples, bool) or max_examples < 1:
        raise InvalidArgument(f"max_examples={max_examples!r} must be an integer >= 1.")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise InvalidArgument(f"seed={seed!r} must be an integer >= 0.")
    if isinstance(regimes, str):
        regimes = (regimes,)
    bad = [r for r in regimes if r not in REGIMES]
    if bad or not regimes:
        raise InvalidArgument(f"regimes={tuple(regimes)!r}: choose from {tuple(str(r) for r in REGIMES)}.")
    return names, tuple(r for r in REGIMES if r in regimes)


@contextlib.contextmanager
def _one_torch_thread():
    """The checker's tensors are tiny: intra-op threads only add contention (1.6-2.5x
    slower wall time under load with 2). The caller's setting is restored, also on error."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _failed(name, regime, tolerance, ev: Evaluation, found_by, examples, informative) -> PropertyResult:
    return PropertyResult(
        name=name, regime=regime, holds=False, max_residual=ev.residual, examples=examples,
        informative=informative, tolerance=tolerance, found_by=found_by, counterexample=ev.rollout,
        kappa=ev.kappa, variant=ev.variant, variant_kappa=ev.variant_kappa, mismatches=list(ev.mismatches),
        note=ev.note, theorems=PROPERTY_THEOREMS.get(name, ()),
    )


def _carry_on_policy(results, mechanisms, names, on: Regime, off: Regime) -> None:
    """The off-policy regime contains every on-policy batch (ratios all 1), so what the
    on-policy regime shows holds off-policy too (:func:`~exchange.core.vocabulary.per_regime`'s
    rule): its mechanisms, and its broken properties where the off-policy search did not
    find one of its own (the on-policy counterexample is reported, said so)."""
    mechanisms[off] = MechanismSet.merged(mechanisms[off], mechanisms[on])
    for name in names:
        here, there = results[(name, on)], results[(name, off)]
        if not here.holds and here.counterexample is not None and there.holds:
            results[(name, off)] = dataclasses.replace(
                here, regime=str(off), note=f"broken on-policy, and an on-policy batch is an off-policy batch with every "
                                            f"ratio 1{': ' + here.note if here.note else ''}")


@_one_torch_thread()
def check(
    loss_fn: LossFn,
    *,
    properties: str | Iterable[str] | None = None,
    max_examples: int = 200,
    seed: int = 0,
    regimes: str | Iterable[str] = REGIMES,
    regularizer: LossFn | None = None,
    name: str | None = None,
    batched: bool = False,
    precision: str | None = None,
    timeout: float | None = None,
    hypothesis_profile: str | None = None,
    progress: Callable[[str, str, int, int], None] | None = None,
    shrink: bool = True,
    fuzzer: str = "bulk",
) -> Report:
    """Check ``loss_fn(logprobs [N, T], rollout) -> loss`` for exchangeability.

    Args:
        loss_fn: the objective, returning a loss to minimise (reward-driven part).
        properties: names to check (default: all of :data:`exchange.checker.properties.PROPERTIES`).
        max_examples: configurations per fuzzed property and regime, at least, generated in
            bulk (:func:`exchange.checker.bulk.plan`: e.g. 16 at 10 and 208 at 200); on a
            failure Hypothesis searches again with the same seed to shrink it. A report's
            ``examples`` counts every configuration evaluated.
        seed: fixes the fuzzing; the same seed reproduces the same report.
        regimes: ``"on_policy"`` and/or ``"off_policy"``.
        regularizer: optional KL/entropy term, reported in its own channel.
        name: label for the report (default: ``loss_fn.__name__``).
        batched: try the vmapped coefficient path for the probes and the plain
            evaluations (see ``benchmarks/audit_speed.py``: for the checker's small groups
            the autograd loop is faster, so it is off; the bulk fuzzer always tries vmap).
        precision: the loss's effective precision, ``"float64"``, ``"float32"`` or
            ``"bf16"``. ``None`` (default): the loss's attribute ``exchange_precision`` (the
            library adapters set it where the library rounds an intermediate that later
            float64 arithmetic hides, e.g. AReaL's float32 advantages), else detected
            (every coefficient an exact float32 or bf16 value). Every verdict comes from
            the loss's float64 twin at the float64 tolerances; below float64 the loss is
            also compared with its twin (docs/properties.md, "Tolerances and precision":
            a break below the precision's resolution reads "holds up to <precision>
            round-off"). ``"float64"`` drops the resolution rule.
        timeout: seconds one call of ``loss_fn`` may take; a slower call stops the check
            with an :class:`~exchange.errors.ObjectiveError` naming the time. On Unix in
            the main thread a SIGALRM timer interrupts the running call at the limit
            (the previous handler and timer are restored); in another thread or on
            Windows the call runs to its end and is rejected afterwards.
        hypothesis_profile: the name of a registered Hypothesis settings profile whose
            ``max_examples``, ``database`` and phases the fuzzing uses, one Hypothesis
            example at a time (default: bulk fuzzing, then the checker's own Hypothesis
            settings, ``max_examples`` and no example database, to shrink a failure).
        progress: optional ``progress(regime, property, done, total)`` called before each property
            in each regime (``done`` of ``total`` pairs judged; a loss below float64 judged beside
            its twin starts again at 0): the CLI's progress bar.
        fuzzer: ``"bulk"`` (default: configurations batched by layout) or ``"per_example"``
            (every example through Hypothesis, one at a time: the oracle the bulk fuzzer
            is tested against; also what ``hypothesis_profile`` runs).
        shrink: shrink a fuzz-found failure to a minimal counterexample (default). ``False``
            reports the first failing configuration (``found_by`` "fuzz (bulk, not
            shrunk)"): the same verdicts and mechanisms, faster where shrinking dominates.
    """
    if not callable(loss_fn):
        raise InvalidArgument(f"loss_fn={loss_fn!r} is not callable; pass loss_fn(logprobs, rollout) -> Tensor.")
    names, regimes = _validate(properties, max_examples, seed, regimes)
    how = Search(fuzzer=fuzzer, shrink=shrink, profile=hypothesis_profile, use_vmap=timeout is None)
    label = name or getattr(loss_fn, "__name__", None) or type(loss_fn).__name__
    if hypothesis_profile is not None:
        settings.get_profile(hypothesis_profile)  # unknown names raise Hypothesis's InvalidArgument
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise InvalidArgument(f"timeout={timeout!r} must be a number of seconds > 0.")
        loss_fn = time_limited(loss_fn, float(timeout), label)
    smoke = build(PROBES[0].case)
    token_coefficients(loss_fn, smoke.logprobs, smoke)  # usage errors surface here, once
    precision, detected = resolve_precision(loss_fn, precision)
    twin = float64_twin(loss_fn)
    try:
        token_coefficients(twin, smoke.logprobs, smoke)
    except ObjectiveError as err:  # the loss does not run as its float64 twin
        twin.incomplete = f"the loss raised under its float64 twin ({err})"
        twin.incomplete_precision = twin.incomplete_precision or precision
    run = _Run(names, regimes, max_examples, seed, how, progress, batched)
    verdicts = fallback if twin.incomplete else on_twin
    results, mechanisms = verdicts(run.judge, run, loss_fn, twin, precision)
    if len(regimes) == 2:
        _carry_on_policy(results, mechanisms, names, *sorted(regimes, key=lambda r: Regime(r).off_policy))
    return Report(
        objective=label, regimes=regimes, properties=names, results=results, mechanisms_by_regime=mechanisms, seed=seed,
        max_examples=max_examples, regularizer=None if regularizer is None else _regularizer_report(regularizer),
        reproduce=reproduce_line(loss_fn, label, regimes, seed, max_examples, shrink), precision=precision,
        precision_detected=detected, twin=twin_line(twin))


@dataclasses.dataclass
class _Run:
    names: tuple[str, ...]
    regimes: tuple[Regime, ...]
    max_examples: int
    seed: int
    how: Search
    progress: Callable[[str, str, int, int], None] | None
    batched: bool

    def judge(self, engine, props: dict, precision: str):
        """The probes and the search of every property in every regime, on ``engine``,
        judged at ``precision`` (``"float64"`` on the twin)."""
        results: dict[tuple[str, str], PropertyResult] = {}
        mechanisms: dict[str, MechanismSet] = {}
        first = self.regimes[0]
        for r, regime in enumerate(self.regimes):
            probes = run_probes(engine, regime)
            mechanisms[regime] = MechanismSet(counted(probes, self.names, TOLERANCES, precision), dropped_notes(probes))
            for i, name in enumerate(self.names):
                if self.progress is not None:
                    self.progress(regime, name, r * len(self.names) + i, len(self.regimes) * len(self.names))
                if props[name].regime_free and regime != first:
                    results[(name, regime)] = results[(name, first)]
                else:
                    results[(name, regime)] = self._verdict(engine, props[name], regime, probes, precision)
            mechanisms[regime] |= MechanismSet(design_choice(probes, self.names, results, regime, mechanisms[regime],
                                                             TOLERANCES, precision))
        return results, mechanisms

    def _verdict(self, engine, prop, regime: Regime, probes, precision: str) -> PropertyResult:
        """``prop`` in ``regime``: broken by the first probe it fails, else searched."""
        name = prop.name
        # the largest residual of any probe: a broken property's exact effect (the precision rule)
        probe_max = max((p.evaluations[name].residual for p in probes if name in p.evaluations), default=0.0)
        broke = next((p for p in probes if name in p.evaluations and not p.evaluations[name].residual
                      <= at_precision(prop.tolerance, precision, p.evaluations[name].exact)), None)
        if broke is not None:
            ev = broke.evaluations[name]
            res = _failed(name, regime, at_precision(prop.tolerance, precision, ev.exact),
                          ev, FoundBy(probe=broke.probe.name), 1, 1)
            res.max_residual = max(res.max_residual, probe_max)
            res.exact = ev.exact
            return res
        tol = at_precision(prop.tolerance, precision)
        tally, failure, found_by = search(engine, prop, regime, self.max_examples, self.seed, tol, self.how)
        if failure is not None:
            res = _failed(name, regime, tol, failure, found_by, tally.examples, tally.informative)
            res.max_residual = max(res.max_residual, tally.max_residual, probe_max)
            return res
        res = PropertyResult(
            name=name, regime=regime, holds=True, max_residual=max(tally.max_residual, probe_max),
            examples=tally.examples, informative=tally.informative, tolerance=tol,
            theorems=PROPERTY_THEOREMS.get(name, ()),
        )
        if res.max_residual > prop.tolerance:
            res.round_off = precision
            res.note = f"holds up to {precision} round-off (residual {res.max_residual:.2g} > float64 tolerance {prop.tolerance:g})"
        if tally.informative < MIN_INFORMATIVE_SHARE * max(tally.examples, 1):
            res.holds = False
            res.found_by = FoundBy(vacuity=True)
            res.note = (
                f"inconclusive: only {tally.informative} of {tally.examples} examples could have failed; "
                "raise max_examples"
            )
        return res
