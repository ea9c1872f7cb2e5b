"""``check``: audit a loss function for (Z), (E), (C) and friends (THEORY.md section 2).

For each regime (on-policy: every ratio is 1; off-policy: event-consistent ratios on
both sides of the usual clip ranges) the checker

1. runs the targeted probes (:mod:`exchange.checker.probes`): minimal groups that isolate one
   mechanism each; a property broken by a probe gets that probe's group as its
   counterexample and the probe's mechanism id;
2. fuzzes every property the probes did not break: configurations generated in bulk
   from ``seed`` (:mod:`exchange.checker.bulk`, coefficients and residuals batched per
   layout); a failure is handed to Hypothesis (``max_examples``, ``seed``), which finds
   and shrinks a minimal group (a greedy shrinker takes over the bulk failure when
   Hypothesis finds none).

A property that was never informative (no example could have failed it) is reported as
broken with a note, never as holding.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hypothesis_seed

from exchange.checker.cases import build
from exchange.core.coefficients import Engine, LossFn, token_coefficients
from exchange.errors import InvalidArgument, ObjectiveError
from exchange.core.events import events
from exchange.core.vocabulary import PROPERTY_THEOREMS, REGIMES
from exchange.checker.probes import PROBES, run_probes
from exchange.checker.properties import PROPERTIES, Evaluation, get_property
from exchange.checker.report import PropertyResult, RegularizerReport, Report

__all__ = ["check"]

# Fuzz with exchange.checker.bulk (configurations batched by layout; Hypothesis replays
# and shrinks a failure). False: every example through Hypothesis, one at a time (the
# oracle the tests and benchmarks/checker_speed.py compare against).
BULK = True

# A property needs at least this share of informative examples to be called "holds".
MIN_INFORMATIVE_SHARE = 0.1

# THEORY.md section 4, precision rule: a residual at the level of the loss's effective
# precision is round-off. Relative tolerances per precision; float64 keeps each
# property's own (tight) tolerance.
PRECISIONS = ("float64", "float32", "bf16")
PRECISION_RTOL = {"float64": 0.0, "float32": 1e-6, "bf16": 3e-2}


def _tolerance(prop, precision: str) -> float:
    return prop.tolerance if prop.tolerance == 0 else max(prop.tolerance, PRECISION_RTOL[precision])


def detect_precision(loss_fn: LossFn) -> str:
    """The coarsest format in which every token coefficient of ``loss_fn`` is exactly
    representable, on a float64 group with generic rewards and ratios: a loss that runs
    its ``exp`` (or anything on the gradient path) in float32 or bf16 gives coefficients
    rounded to that format; a float64 loss gives generic float64 values."""
    from exchange.checker.cases import Case, GroupConfig

    case = Case(
        groups=(
            GroupConfig(((1, 2, 3), (1, 2, 0, 1), (1, 3), (2, 2, 1)), (0.3, 0.71, 0.13, 0.97)),
            GroupConfig(((1, 2), (1, 0, 3)), (0.41, 0.09)),
        ),
        off_policy=True,
    )
    rollout = build(case)
    kappa = token_coefficients(loss_fn, rollout.logprobs, rollout)
    values = kappa[(kappa != 0) & torch.isfinite(kappa)]
    if values.numel() < 4:
        return "float64"
    for name, dtype in (("bf16", torch.bfloat16), ("float32", torch.float32)):
        if bool((values.to(dtype).to(values.dtype) == values).all()):
            return name
    return "float64"


class _Falsified(Exception):
    def __init__(self, evaluation: Evaluation) -> None:
        super().__init__(evaluation.mismatches[:1])
        self.evaluation = evaluation


@dataclass
class _Tally:
    examples: int = 0
    informative: int = 0
    max_residual: float = 0.0


def _fuzz(
    engine: Engine,
    name: str,
    regime: str,
    max_examples: int,
    seed: int,
    tolerance: float | None = None,
    profile: str | None = None,
    shrink: bool = True,
) -> tuple[_Tally, Evaluation | None]:
    prop = get_property(name)
    tolerance = prop.tolerance if tolerance is None else tolerance
    tally = _Tally()

    if profile is None:
        chosen = settings(
            max_examples=max_examples,
            deadline=None,
            database=None,
            derandomize=False,
            verbosity=Verbosity.quiet,
            phases=(Phase.explicit, Phase.generate) + ((Phase.shrink,) if shrink else ()),
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
        )
    else:
        # The user's profile decides max_examples, database, derandomize, phases...;
        # only what the checker needs to read a result stays fixed.
        base = settings.get_profile(profile)
        chosen = settings(
            base,
            phases=base.phases if shrink else tuple(p for p in base.phases if p is not Phase.shrink),
            deadline=None,
            verbosity=Verbosity.quiet,
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
        )

    @chosen
    @hypothesis_seed(seed)
    @given(prop.examples(regime))
    def run(example) -> None:
        try:
            ev = prop.evaluate(engine, example, regime)
        except ObjectiveError as err:
            raise _Falsified(_error_evaluation(example, err)) from err
        tally.examples += 1
        tally.informative += ev.informative
        if not ev.residual <= tolerance:
            raise _Falsified(ev)
        tally.max_residual = max(tally.max_residual, ev.residual)

    try:
        run()
    except _Falsified as failure:
        tally.max_residual = max(tally.max_residual, failure.evaluation.residual)
        return tally, failure.evaluation
    return tally, None


def _bulk_then_shrink(
    engine: Engine, prop, regime: str, max_examples: int, seed: int, tolerance: float, use_vmap: bool, shrink: bool = True
) -> tuple[_Tally, Evaluation | None, str]:
    """Fuzz ``prop`` with :mod:`exchange.checker.bulk` (layouts chosen from the seed,
    configurations, coefficients and residuals batched); on a confirmed failure,
    Hypothesis searches the property with the same seed and shrinks its own failure
    to a minimal example; when it finds none within ``max_examples``, the bulk failure
    is shrunk greedily (:func:`_shrink`). ``shrink=False`` returns the bulk failure as
    found (the verdict is the same; only the counterexample is larger). ``examples``
    counts every configuration evaluated, bulk and Hypothesis, the failing one included."""
    from exchange.checker import bulk

    found = bulk.run(engine.loss_fn, prop, regime, max_examples, seed, tolerance, engine, use_vmap=use_vmap)
    tally = _Tally(found.examples, found.informative, found.max_residual)
    if found.failure is None:
        return tally, None, ""
    if not shrink:
        ev = found.evaluation  # the oracle's confirmation; None when the loss raised
        if ev is None:
            ev = _evaluate_or_error(engine, prop, found.failure, regime)
        return tally, ev, "fuzz (bulk, not shrunk)"
    hyp, failure = _fuzz(engine, prop.name, regime, max_examples, seed, tolerance)
    tally.examples += hyp.examples
    tally.informative += hyp.informative
    if failure is not None:
        tally.examples += 1
        tally.informative += 1
        return tally, failure, "fuzz (shrunk)"
    return tally, _shrink(engine, prop, found.failure, regime, tolerance), "fuzz (bulk, shrunk)"


def _shrink(engine: Engine, prop, example, regime: str, tolerance: float, budget: int = 400) -> Evaluation:
    """Greedy shrinking of a failing plain-path example, in passes over five kinds of
    step, smallest structure first: drop a group, drop a response, drop one token (any
    position of one response; for (Z), whose responses are identical, the same position
    of every response), simplify one reward (to 0, else to 1), and drop the generation
    limit, the value seed and the (E) mutation's or (P) permutation's settings. A step is
    kept when the property still fails; passes repeat until one changes nothing, at most
    ``budget`` candidate evaluations in all."""
    from dataclasses import replace

    from exchange.checker.cases import GroupConfig
    from exchange.checker.mutations import Mutation

    keep_first = prop.name == "null_on_equal_rewards"  # group 0 is the tied group
    identical = prop.name == "zero_sum"  # every response of a group is the same

    def split(ex):
        return (ex[0], ex[1]) if isinstance(ex, tuple) else (ex, None)

    def join(case, extra):
        return case if extra is None else (case, extra)

    def drop_group(ex):
        case, extra = split(ex)
        mut = extra if isinstance(extra, Mutation) else None
        for g in range(len(case.groups)):
            if len(case.groups) == 1 or (keep_first and g == 0) or (mut is not None and mut.group == g):
                continue
            new_extra = extra if mut is None else replace(mut, group=mut.group - (g < mut.group))
            yield join(replace(case, groups=case.groups[:g] + case.groups[g + 1 :]), new_extra)

    def drop_response(ex):
        case, extra = split(ex)
        mut = extra if isinstance(extra, Mutation) else None
        for g, grp in enumerate(case.groups):
            for i in range(len(grp.responses) if len(grp.responses) > 2 else 0):
                if mut is not None and mut.group == g and mut.response == i:
                    continue
                new = GroupConfig(grp.responses[:i] + grp.responses[i + 1 :], grp.rewards[:i] + grp.rewards[i + 1 :])
                if identical and len(set(new.rewards)) < 2:
                    continue
                new_extra = extra
                if mut is not None and mut.group == g:
                    new_extra = replace(mut, response=mut.response - (i < mut.response))
                yield join(case.with_group(g, new), new_extra)

    def drop_token(ex):  # the last token first: it keeps the shared prefixes
        case, extra = split(ex)
        for g, grp in enumerate(case.groups):
            if identical:
                resp = grp.responses[0]
                for t in reversed(range(len(resp) if len(resp) > 1 else 0)):
                    cut = resp[:t] + resp[t + 1 :]
                    yield join(case.with_group(g, replace(grp, responses=(cut,) * len(grp.responses))), extra)
                continue
            for i, resp in enumerate(grp.responses):
                for t in reversed(range(len(resp) if len(resp) > 1 else 0)):
                    yield join(case.with_response(g, i, resp[:t] + resp[t + 1 :]), extra)

    def simplify_reward(ex):  # 0 is simpler than 1, 1 than anything else: no cycles
        case, extra = split(ex)
        for g, grp in enumerate(case.groups):
            if keep_first and g == 0:  # the tied group stays tied
                for v in (0.0, 1.0):
                    if grp.rewards[0] != v and (v == 0.0 or grp.rewards[0] != 0.0):
                        yield join(case.with_group(g, replace(grp, rewards=(v,) * len(grp.rewards))), extra)
                continue
            for i, r in enumerate(grp.rewards):
                for v in () if r == 0.0 else (0.0,) if r == 1.0 else (0.0, 1.0):
                    rewards = grp.rewards[:i] + (v,) + grp.rewards[i + 1 :]
                    if not (identical and len(set(rewards)) < 2):
                        yield join(case.with_group(g, replace(grp, rewards=rewards)), extra)

    def drop_settings(ex):  # the limit, the value seed, the variant's own settings
        case, extra = split(ex)
        if case.length_limit is not None:
            yield join(replace(case, length_limit=None), extra)
        if case.seed != 0:
            yield join(replace(case, seed=0), extra)
        if isinstance(extra, Mutation):
            if extra.position != 0:
                yield case, replace(extra, position=0)
            if extra.kind == "length" and extra.value > 1:
                yield case, replace(extra, value=extra.value - 1)
            if extra.kind == "tokens" and extra.value != 0:
                yield case, replace(extra, value=0)
        elif isinstance(extra, int) and extra != 0:  # (P): the permutation seed
            yield case, 0

    def fails(ex) -> bool:
        try:
            return not _evaluate_or_error(engine, prop, ex, regime).residual <= tolerance
        except Exception:  # an invalid candidate (an override the shrunk case cannot hold)
            return False

    current = example
    progress = True
    while progress and budget > 0:
        progress = False
        for steps in (drop_group, drop_response, drop_token, simplify_reward, drop_settings):
            at = 0  # the candidates before ``at`` were tried on this pass and passed (no shrink)
            while budget > 0:
                cands = list(steps(current))
                if at >= len(cands):
                    break
                budget -= 1
                if fails(cands[at]):
                    current, progress = cands[at], True  # the list shifts: try the same index next
                else:
                    at += 1
    return _evaluate_or_error(engine, prop, current, regime)


def _evaluate_or_error(engine: Engine, prop, example, regime: str) -> Evaluation:
    """The plain property code on one example; a loss that raises is an infinite residual."""
    try:
        return prop.evaluate(engine, example, regime)
    except ObjectiveError as err:
        return _error_evaluation(example, err)


def _error_evaluation(example, err: ObjectiveError) -> Evaluation:
    case = example[0] if isinstance(example, tuple) else example
    rollout = build(case)
    return Evaluation(float("inf"), True, rollout, torch.zeros_like(rollout.old_logprobs), [str(err)])


def _regularizer_report(regularizer: LossFn) -> RegularizerReport:
    """Coefficients of the KL/entropy channel on an off-policy probe group."""
    from dataclasses import replace

    case = replace(PROBES[0].case, off_policy=True)
    rollout = build(case)
    kappa = token_coefficients(regularizer, rollout.logprobs, rollout)
    other = rollout.replace(rewards=rollout.rewards.flip(0) * 3.0 + 1.0)
    kappa_other = token_coefficients(regularizer, other.logprobs, other)
    ev = events(rollout)
    valid = ev.ids >= 0
    ids, vals = ev.ids[valid], kappa[valid]
    first = torch.full((ev.count,), float("nan"), dtype=vals.dtype).scatter_reduce(0, ids, vals, "amax", include_self=False)
    last = torch.full((ev.count,), float("nan"), dtype=vals.dtype).scatter_reduce(0, ids, vals, "amin", include_self=False)
    scale = float(kappa.abs().max()) + 1e-300
    return RegularizerReport(
        max_abs=float(kappa.abs().max()),
        event_consistent=bool(((first - last).abs() <= 1e-9 * scale).all()),
        reward_independent=bool(((kappa - kappa_other).abs() <= 1e-9 * scale).all()),
    )


def _validate(properties, max_examples, seed, regimes) -> tuple[tuple[str, ...], tuple[str, ...]]:
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
        raise InvalidArgument(f"regimes={tuple(regimes)!r}: choose from {REGIMES}.")
    return names, tuple(r for r in REGIMES if r in regimes)  # Regime members, in report order


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


@_one_torch_thread()
def check(
    loss_fn: LossFn,
    properties=None,
    max_examples: int = 200,
    seed: int = 0,
    regimes=REGIMES,
    regularizer: LossFn | None = None,
    name: str | None = None,
    batched: bool = False,
    precision: str | None = None,
    timeout: float | None = None,
    hypothesis_profile: str | None = None,
    progress=None,
    shrink: bool = True,
) -> Report:
    """Check ``loss_fn(logprobs [N, T], rollout) -> loss`` for exchangeability.

    Args:
        loss_fn: the objective, returning a loss to minimise (reward-driven part).
        properties: names to check (default: all of :data:`exchange.checker.properties.PROPERTIES`).
        max_examples: configurations per fuzzed property and regime, at least: they
            are generated in bulk (:mod:`exchange.checker.bulk`: at least 8 layouts,
            up to 16 configurations each: ``layouts x ceil(max_examples / layouts)`` with
            ``layouts = max(8, ceil(max_examples / 16))``, e.g. 16 at 10 and 208 at 200),
            and on a failure Hypothesis searches again with the same seed to
            shrink it. A report's ``examples`` counts every configuration evaluated.
        seed: fixes the fuzzing; the same seed reproduces the same report.
        regimes: ``"on_policy"`` and/or ``"off_policy"``.
        regularizer: optional KL/entropy term, reported in its own channel.
        name: label for the report (default: ``loss_fn.__name__``).
        batched: try the vmapped coefficient path (see ``benchmarks/audit_speed.py``:
            for the checker's small groups the autograd loop is faster, so it is off).
        precision: the loss's effective precision, ``"float64"``, ``"float32"`` or
            ``"bf16"``; residuals at that level are round-off and a property holding only
            up to it is reported as "holds up to float32 round-off". ``None`` (default)
            takes the loss's own declaration, an attribute ``exchange_precision`` (the
            library adapters set it where the library rounds an intermediate, e.g.
            AReaL's float32 advantages, which later float64 arithmetic hides from
            detection), else detects it: coefficients that are all exactly float32 (or
            bf16) values mean the loss computes in that format. Pass ``"float64"`` to
            force the tight tolerances.
        timeout: seconds one call of ``loss_fn`` may take; a slower call stops the check
            with an :class:`~exchange.errors.ObjectiveError` naming the time. On Unix in
            the main thread a SIGALRM timer interrupts the running call at the limit
            (the previous handler and timer are restored); in another thread or on
            Windows the call runs to its end and is rejected afterwards.
        hypothesis_profile: the name of a registered Hypothesis settings profile whose
            ``max_examples``, ``database`` and phases the fuzzing uses, one Hypothesis
            example at a time (default: bulk fuzzing, then the checker's own Hypothesis
            settings, ``max_examples`` and no example database, to shrink a failure).
        progress: optional ``progress(regime, property)`` called before each fuzzed property.
        shrink: shrink a fuzz-found failure to a minimal counterexample (default). ``False``
            reports the first failing configuration as found, ``found_by`` "fuzz (bulk,
            not shrunk)": the same verdicts, mechanisms and examples counted up to the
            failure, at a fraction of the time where shrinking dominates (``exchange audit``
            reports verdicts and does not shrink unless ``--shrink``).
    """
    if not callable(loss_fn):
        raise InvalidArgument(f"loss_fn={loss_fn!r} is not callable; pass loss_fn(logprobs, rollout) -> Tensor.")
    names, regimes = _validate(properties, max_examples, seed, regimes)
    if not isinstance(shrink, bool):
        raise InvalidArgument(f"shrink={shrink!r} must be True or False.")
    label = name or getattr(loss_fn, "__name__", None) or type(loss_fn).__name__
    if hypothesis_profile is not None:
        settings.get_profile(hypothesis_profile)  # unknown names raise Hypothesis's InvalidArgument
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise InvalidArgument(f"timeout={timeout!r} must be a number of seconds > 0.")
        loss_fn = _time_limited(loss_fn, float(timeout), label)
    engine = Engine(loss_fn, batched=batched)
    smoke = build(PROBES[0].case)
    token_coefficients(loss_fn, smoke.logprobs, smoke)  # usage errors surface here, once
    if precision is None:
        precision = getattr(loss_fn, "exchange_precision", None)
    if precision is None:
        precision, detected = detect_precision(loss_fn), True
    else:
        detected = False
        if precision not in PRECISIONS:
            raise InvalidArgument(f"precision={precision!r}: choose from {PRECISIONS} (or None to detect it).")

    results: dict[tuple[str, str], PropertyResult] = {}
    mechanisms: dict[str, list[str]] = {}
    for regime in regimes:
        probes = run_probes(engine, regime)
        mechanisms[regime] = _attributed(probes, names, precision)
        for prop_name in names:
            prop = PROPERTIES[prop_name]
            tol = _tolerance(prop, precision)
            theorems = PROPERTY_THEOREMS.get(prop_name, ())
            if prop.regime_free and regime != regimes[0]:
                results[(prop_name, regime)] = results[(prop_name, regimes[0])]
                continue
            failed = next(
                (
                    (p, p.evaluations[prop_name])
                    for p in probes
                    if prop_name in p.evaluations and not p.evaluations[prop_name].residual <= tol
                ),
                None,
            )
            if failed is not None:
                probe_result, ev = failed
                results[(prop_name, regime)] = _result(prop_name, regime, tol, ev, f"probe {probe_result.probe.name}", 1, 1, theorems)
                continue
            probe_max = max((p.evaluations[prop_name].residual for p in probes if prop_name in p.evaluations), default=0.0)
            if progress is not None:
                progress(regime, prop_name)
            if hypothesis_profile is None and BULK:
                tally, failure, found_by = _bulk_then_shrink(engine, prop, regime, max_examples, seed, tol, timeout is None, shrink)
            else:  # the user's Hypothesis settings decide the search (or BULK is off): per example
                tally, failure = _fuzz(engine, prop_name, regime, max_examples, seed, tol, hypothesis_profile, shrink)
                found_by = "fuzz (shrunk)" if shrink else "fuzz (not shrunk)"
                tally.examples += failure is not None
                tally.informative += failure is not None
            if failure is not None:
                results[(prop_name, regime)] = _result(
                    prop_name, regime, tol, failure, found_by, tally.examples, tally.informative, theorems
                )
                continue
            res = PropertyResult(
                name=prop_name,
                regime=regime,
                holds=True,
                max_residual=max(tally.max_residual, probe_max),
                examples=tally.examples,
                informative=tally.informative,
                tolerance=tol,
                found_by="",
                theorems=theorems,
            )
            if res.max_residual > prop.tolerance:
                res.note = f"holds up to {precision} round-off (residual {res.max_residual:.2g} > float64 tolerance {prop.tolerance:g})"
            if tally.informative < MIN_INFORMATIVE_SHARE * max(tally.examples, 1):
                res.holds = False
                res.found_by = "vacuity guard"
                res.note = (
                    f"inconclusive: only {tally.informative} of {tally.examples} examples could have failed; "
                    "raise max_examples"
                )
            results[(prop_name, regime)] = res
        if _design_choice(probes, names, results, regime, mechanisms[regime], precision):
            mechanisms[regime] = sorted(mechanisms[regime] + ["M7"])
    regime_flag = "" if len(regimes) == len(REGIMES) else f" --regime {'off' if regimes[0].off_policy else 'on'}"
    reproduce = f"exchange check {_reproduce_target(loss_fn, label)}{regime_flag} --seed {seed} --max-examples {max_examples}" + " --no-shrink" * (not shrink)
    return Report(
        objective=label,
        regimes=regimes,
        properties=names,
        results=results,
        mechanisms_by_regime=mechanisms,
        seed=seed,
        max_examples=max_examples,
        regularizer=None if regularizer is None else _regularizer_report(regularizer),
        reproduce=reproduce,
        precision=precision,
        precision_detected=detected,
    )


def _reproduce_target(loss_fn: LossFn, label: str) -> str:
    """A TARGET the CLI can resolve: ``path/to/file.py:function`` for a user's module-level
    function, the label for built-ins (and for functions the CLI cannot reach)."""
    import functools
    import inspect
    import os

    fn = loss_fn
    while isinstance(fn, functools.partial):
        fn = fn.func
    fn = inspect.unwrap(fn) if callable(fn) else fn
    module = getattr(fn, "__module__", "") or ""
    qual = getattr(fn, "__qualname__", "") or ""
    if module.startswith("exchange.") or not qual or "<" in qual or "." in qual:
        return label
    try:
        path = inspect.getsourcefile(fn)
    except TypeError:
        return label
    if not path or not os.path.isfile(path):
        return label
    rel = os.path.relpath(path)
    return f"{path if rel.startswith('..') else rel}:{qual}"


class _CallTimedOut(BaseException):
    """Raised by the SIGALRM handler inside a loss call that ran past the limit (private:
    a ``BaseException`` so that a loss's own ``except Exception`` cannot swallow it)."""


def _interruptible() -> bool:
    """Whether a running call can be interrupted: ``signal.setitimer`` exists (Unix) and
    this is the main thread (Python delivers signals only there)."""
    import signal
    import threading

    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def _time_limited(loss_fn: LossFn, limit: float, label: str) -> LossFn:
    """``loss_fn`` with a time limit per call.

    On Unix in the main thread a ``signal.setitimer(ITIMER_REAL)`` alarm interrupts a call
    that runs past ``limit`` (the previous SIGALRM handler and timer are restored after
    every call). Elsewhere (another thread, Windows) no signal can interrupt the call: it
    runs to its end and is then rejected if it took too long.
    """
    import functools
    import signal
    import time

    def too_slow(took: float) -> ObjectiveError:
        return ObjectiveError(
            f"loss_fn={label} took {took:.2f} s for one call, over the time limit of {limit:g} s "
            "(raise --timeout, or make the loss faster: the check calls it thousands of times)"
        )

    armed = [False]

    def on_alarm(signum, frame):
        if armed[0]:  # once the call has returned, a late alarm is ignored
            raise _CallTimedOut()

    @functools.wraps(loss_fn)
    def timed(logprobs, rollout):
        start = time.perf_counter()
        if not _interruptible():
            out = loss_fn(logprobs, rollout)
            took = time.perf_counter() - start
            if took > limit:
                raise too_slow(took)
            return out
        previous = signal.signal(signal.SIGALRM, on_alarm)
        outer_delay, outer_interval = signal.setitimer(signal.ITIMER_REAL, limit)
        try:
            try:
                armed[0] = True
                out = loss_fn(logprobs, rollout)
            finally:
                armed[0] = False
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
                if outer_delay > 0:  # an enclosing timer: re-arm it with what is left of it
                    left = outer_delay - (time.perf_counter() - start)
                    signal.setitimer(signal.ITIMER_REAL, max(left, 1e-6), outer_interval)
        except _CallTimedOut:
            raise too_slow(time.perf_counter() - start) from None
        took = time.perf_counter() - start
        if took > limit:  # the alarm fired after the call returned, or between checks
            raise too_slow(took)
        return out

    return timed


def _attributed(probes, names, precision: str = "float64") -> list[str]:
    """Mechanisms the probes found, kept only where they explain a property that was
    asked for (the probe's own property, or (C) when the probe broke it) beyond the
    loss's round-off."""
    out = set()
    for p in probes:
        if not p.mechanism_found:
            continue
        own = p.evaluations.get(p.probe.property_name)
        if own is not None and own.residual <= _tolerance(PROPERTIES[p.probe.property_name], precision):
            continue
        cancel = p.evaluations.get("shared_cancellation")
        if p.probe.property_name in names or (
            "shared_cancellation" in names
            and cancel is not None
            and cancel.residual > _tolerance(PROPERTIES["shared_cancellation"], precision)
        ):
            out.add(p.mechanism)
    return sorted(out)


def _design_choice(probes, names, results, regime, found, precision: str = "float64") -> bool:
    """M7 (THEORY.md section 4): (E) broken while (C) holds in every example, with
    zero-sum coefficients, and no defect mechanism explains the break."""
    ex = results[("exchangeable", regime)] if "exchangeable" in names else None
    if found or ex is None or ex.holds or ex.counterexample is None:  # a vacuity verdict explains nothing
        return False
    if "finite" in names and not results[("finite", regime)].holds:
        return False
    for prop in ("zero_sum", "shared_cancellation"):
        if prop in names and not results[(prop, regime)].holds:
            return False
        tol = _tolerance(PROPERTIES[prop], precision)
        if any(prop in p.evaluations and not p.evaluations[prop].residual <= tol for p in probes):
            return False
    return True


def _result(name, regime, tolerance, ev: Evaluation, found_by, examples, informative, theorems) -> PropertyResult:
    return PropertyResult(
        name=name,
        regime=regime,
        holds=False,
        max_residual=ev.residual,
        examples=examples,
        informative=informative,
        tolerance=tolerance,
        found_by=found_by,
        counterexample=ev.rollout,
        kappa=ev.kappa,
        variant=ev.variant,
        variant_kappa=ev.variant_kappa,
        mismatches=list(ev.mismatches),
        note=ev.note,
        theorems=theorems,
    )
