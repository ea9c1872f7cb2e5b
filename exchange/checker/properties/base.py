"""What a checked property is made of (one module per property holds all of it).

A :class:`Property` brings, in its own module: its tolerance, the layout generator it is
fuzzed over (written once against :class:`~exchange.checker.draw.Draw`), its plain
evaluation (the oracle), its batched evaluation, its shrink rules and its probes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from hypothesis import strategies as st
import torch
from torch import Tensor

from exchange.checker.cases import Case, case_template, case_values
from exchange.checker.draw import Draw, HypothesisDraw
from exchange.checker.examples import Example, Layout
from exchange.checker.mutations import Mutation
from exchange.checker.properties.residuals import reference_rewards
from exchange.core.coefficients import Engine
from exchange.core.rollout import Rollout

__all__ = ["Evaluation", "Property", "ShrinkRules", "Probe", "ProbeResult", "BatchInputs", "BatchResult", "configurations"]


@dataclass
class Evaluation:
    """What one example showed: the normalised ``residual`` (the property holds when it
    is ``<= tolerance``), whether the example could have failed (``informative``), the
    rollout and its coefficients ``kappa [N, T]``, mismatch lines, the (E)/(P) variant."""

    residual: float
    informative: bool
    rollout: Rollout
    kappa: Tensor
    mismatches: list[str] = field(default_factory=list)
    variant: Rollout | None = None
    variant_kappa: Tensor | None = None
    note: str = ""
    exact: bool = False  # 0 in every precision when the property holds (tolerances.at_precision)


@dataclass(frozen=True)
class ShrinkRules:
    """What a shrink step must keep for the property to stay meaningful."""

    keep_first_group: bool = False  # group 0 is the property's subject (a tied group)
    identical_responses: bool = False  # every response of a group is the same, rewards not all equal


@dataclass(frozen=True)
class Probe:
    """A hand-built example that changes one thing, aimed at ``mechanism`` (the one its
    change isolates). ``signature``: reads the break's pattern, ``(engine, probe,
    evaluation) -> [Evidence]`` (:mod:`exchange.checker.mechanisms`; it may give evidence
    for another mechanism than ``mechanism``: a common shift is M6, not M2).
    ``run``: a probe with its own measurement, ``(engine, probe) -> ProbeResult``, in
    place of its property's ``run_probe``. ``reward_dependent``: see the field's comment."""

    name: str
    description: str
    property_name: str
    mechanism: str
    case: Case
    mutation: Mutation | None = None
    off_policy_only: bool = False
    signature: Callable | None = None
    # Run on the reward-dependent part of the coefficients, kappa(R) - kappa(R') with R'
    # from residuals.second_rewards (exchange.checker.probes.RewardDependent), so
    # that an additive event term (M6) does not hide the mechanism this probe names
    # (THEORY.md section 4: name every mechanism present).
    reward_dependent: bool = False
    # The signature builds its own contrasts (several reward vectors, its own batches),
    # so it is asked whenever the probe's property breaks, even if the probe's base alone
    # is not exchangeable (an additive term next to the mechanism it looks for).
    isolates: bool = False
    run: Callable | None = None


@dataclass
class ProbeResult:
    probe: Probe
    evaluations: dict[str, Evaluation] = field(default_factory=dict)  # property -> evaluation
    # the mechanisms' evidence this probe produced (exchange.checker.mechanisms)
    found: list = field(default_factory=list)
    # named from the probe's (C) evaluation, not its own property's (an additive term
    # that (Z)'s probe sees while the reward-dependent part cancels)
    through_cancellation: bool = False
    # the evaluation the mechanism was decided on, when it is not the reported one (a
    # probe that reads the reward-dependent part reports the real coefficients)
    decided_on: Evaluation | None = None
    # why this probe is no evidence: the loss dropped its group whole at every reward
    # vector tried (exchange.checker.probes); "" when it kept it
    dropped: str = ""

    @property
    def mechanisms(self) -> frozenset[str]:
        """The ids this probe's evidence names."""
        return frozenset(e.mechanism for e in self.found)


@dataclass
class BatchInputs:
    """``K`` configurations of one layout, for a property's batched evaluation.
    ``coefficients(rollout, fields) -> (loss [K], kappa [K, N, T], failed [K])`` runs the
    loss on ``rollout``'s layout with the per-configuration ``fields`` ([K, ...] each)."""

    layout: Layout
    seeds: list[int]
    rewards: Tensor  # [K, N]
    coefficients: Callable[[Rollout, dict], tuple[Tensor, Tensor, Tensor]]
    loss_fn: object = None  # the loss, for what it declares (properties.update_rows); None: nothing
    # [K] bool: the configurations the loss raised on in a call on some of them
    # (:meth:`on_rows`: the reference rewards, a property's later reward vectors); their
    # residual is inf, as the plain path's error (bulk.evaluate)
    raised: Tensor | None = None

    def on_rows(self, rollout: Rollout, fields: dict, rows: Tensor) -> Tensor:
        """``[k, N, T]``: the coefficients of the configurations ``rows [k]`` with ``fields``
        (theirs, ``[k, ...]`` each); a configuration the loss raises on is recorded in
        :attr:`raised` (its coefficients are zeros, never computed)."""
        _, kappa, failed = self.coefficients(rollout, fields)
        if self.raised is None:
            self.raised = torch.zeros(len(self.seeds), dtype=torch.bool, device=self.rewards.device)
        self.raised[rows] |= failed.to(self.rewards.device)
        return kappa

    def at_reference(self, rollout: Rollout, fields: dict, rows: Tensor) -> Tensor:
        """``[k, N, T]``: :meth:`on_rows` of the configurations ``rows`` at
        :func:`~exchange.checker.properties.residuals.reference_rewards` (every group mixed)."""
        sub = {k: v[rows] for k, v in fields.items()}
        return self.on_rows(rollout, {**sub, "rewards": reference_rewards(self.rewards[rows], rollout)}, rows)


@dataclass
class BatchResult:
    residual: Tensor  # [K]
    informative: Tensor  # [K] bool


@dataclass(frozen=True)
class Property:
    name: str
    tolerance: float
    layout: Callable[[Draw, str], Layout]
    evaluate: Callable[[Engine, Example, str], Evaluation]
    evaluate_batch: Callable[[BatchInputs], BatchResult]
    shrink: ShrinkRules = ShrinkRules()
    probes: tuple[Probe, ...] = ()
    run_probe: Callable | None = None  # (engine, probe) -> ProbeResult
    regime_free: bool = False  # evaluated on-policy only; one verdict for both regimes

    def examples(self, regime: str) -> st.SearchStrategy[Example]:
        """The Hypothesis strategy of complete examples: a layout, then each group's
        rewards among its kinds and the value seed, all drawn through one binding."""
        return _complete(self.layout, regime)


@st.composite
def _complete(draw, layout, regime: str) -> Example:
    d = HypothesisDraw(draw)
    lay = layout(d, regime)
    return lay.complete(lay.rewards(d), d.integer(0, 2**16))


def configurations(case: Case, seeds: list[int], rewards: Tensor, constants: bool = False) -> tuple[Rollout, dict]:
    """The layout rollout of ``case`` and the per-configuration fields of ``K`` value
    seeds and reward rows (``[K, ...]`` each); with ``constants`` also the fields that do
    not vary (tokens, mask, baselines, truncation) broadcast to ``[K, ...]``, for batches
    that mix two layouts of one shape."""
    tmpl = case_template(case)
    fields = case_values(tmpl, seeds)
    fields["rewards"] = rewards
    if constants:
        k = len(seeds)
        for name in ("tokens", "mask", "baseline_rewards", "truncated"):
            value = getattr(tmpl.rollout, name)
            if value is not None:
                fields[name] = value[None].expand(k, *value.shape)
    return tmpl.rollout, fields
