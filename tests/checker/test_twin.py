"""The float64 twin (exchange.checker.twin) and the twin/loss comparison
(exchange.checker.precision), from planted losses and planted coefficients."""

import numpy as np
import pytest
import torch

from exchange.checker.cases import build
from exchange.checker.float64_floor import floored
from exchange.checker.precision import Comparison
from exchange.checker.probes import PROBES
from exchange.checker.properties import PROPERTIES
from exchange.checker.tolerances import ROUND_OFF_MARGIN
from exchange.checker.twin import float32_twin, float64_twin
from exchange.core.coefficients import Engine, token_coefficients, token_coefficients_batched

ROLLOUT = build(PROBES[0].case)


def every_cast(lp, r):
    """Every way of asking for a lower precision the twin rewrites."""
    a = r.rewards.float()
    a = a - a.mean()
    m = r.mask.half()
    w = torch.tensor([1.0, 2.0])[None, :1]
    x = (lp.to(torch.float32) - r.old_logprobs.to(dtype=torch.bfloat16)).exp()
    y = x.type(torch.FloatTensor).type_as(torch.zeros(1, dtype=torch.float16)).to(torch.zeros(1).bfloat16())
    z = torch.ones(1, dtype=torch.float32).bfloat16()
    return -(a[:, None] * y * m * w * z).sum() / m.sum()


def exact(lp, r):
    a = r.rewards - r.rewards.mean()
    return -(a[:, None] * (lp - r.old_logprobs).exp() * r.fmask).sum() / r.fmask.sum()


def test_the_twin_rewrites_every_request_and_equals_the_float64_loss():
    twin = float64_twin(every_cast)
    kappa = token_coefficients(twin, ROLLOUT.logprobs, ROLLOUT)
    assert twin.rewritten == {"float32", "float16", "bf16"} and twin.incomplete == ""
    assert torch.allclose(kappa, token_coefficients(exact, ROLLOUT.logprobs, ROLLOUT), rtol=1e-13, atol=1e-15)
    loss_kappa = token_coefficients(every_cast, ROLLOUT.logprobs, ROLLOUT)
    assert not torch.allclose(kappa, loss_kappa, rtol=1e-10, atol=0)  # the loss itself rounds
    assert torch.get_default_dtype() == torch.float32  # restored after the call


def test_the_twin_composes_with_vmap():
    twin = float64_twin(every_cast)
    other = ROLLOUT.with_fields({"rewards": ROLLOUT.rewards * 3 + 1})
    engine = Engine(twin, batched=True)
    vmapped = engine([ROLLOUT, other])
    assert engine.batched  # vmap(grad) ran, no fallback to the loop
    for k, r in zip(vmapped, (ROLLOUT, other)):
        assert torch.allclose(k, token_coefficients(twin, r.logprobs, r), rtol=1e-13, atol=1e-15)
    assert token_coefficients_batched(twin, [ROLLOUT.logprobs], [ROLLOUT])[0].dtype == torch.float64


def numpy_float32(lp, r):
    a = torch.from_numpy(r.rewards.numpy().astype(np.float32))
    return -(a[:, None] * lp * r.fmask).sum()


def test_a_low_precision_tensor_reaching_an_op_makes_the_twin_incomplete():
    twin = float64_twin(numpy_float32)
    token_coefficients(twin, ROLLOUT.logprobs, ROLLOUT)
    assert twin.incomplete.startswith("a float32 tensor reached") and twin.incomplete_precision == "float32"
    complete = float64_twin(exact)
    token_coefficients(complete, ROLLOUT.logprobs, ROLLOUT)
    assert complete.incomplete == "" and complete.rewritten == set()


def test_every_way_a_low_precision_tensor_reaches_an_op_is_detected():
    """The mode's fast path (ops that request no dtype) scans the same inputs as the rest:
    a float32 tensor made outside the twin reaching an op as a tensor argument, beside a
    Python number, inside a list (torch.cat), as a Tensor subclass (a Parameter), or
    through an op with ``dtype=``, makes the twin incomplete; a float64 one does not."""
    outside = torch.full((1,), 0.5, dtype=torch.float32)
    uses = [lambda lp, a: lp * a, lambda lp, a: a * 2.0 + lp, lambda lp, a: torch.cat([lp.flatten(), a]).sum() + lp,
            lambda lp, a: lp * torch.nn.Parameter(a, requires_grad=False), lambda lp, a: lp * a.sum(dtype=torch.float64)]
    for i, use in enumerate(uses):
        for const, incomplete in ((outside, True), (outside.double(), False)):
            twin = float64_twin(lambda lp, r, use=use, const=const: -(use(lp, const) * r.fmask).sum())
            token_coefficients(twin, ROLLOUT.logprobs, ROLLOUT)
            assert bool(twin.incomplete) == incomplete and twin.incomplete_precision == ("float32" if incomplete
                                                                                         else ""), i


def test_the_float32_twin_rounds_like_float32():
    k32 = token_coefficients(float32_twin(exact), ROLLOUT.logprobs, ROLLOUT)
    k64 = token_coefficients(exact, ROLLOUT.logprobs, ROLLOUT)
    rel = float((k32 - k64).abs().max() / k64.abs().max())
    assert 0 < rel < 1e-6
    assert bool((k32.to(torch.float32).to(torch.float64) == k32).all())


def test_the_comparison_tells_round_off_from_a_changed_decision():
    """Planted coefficients: the loss off by what its float32 twin predicts for bf16
    (d32 x 2^16) is round-off; a coefficient clipped to 0 is a changed decision."""
    kappa = torch.tensor([[1.0, -0.5, 0.25]], dtype=torch.float64)
    f32 = kappa * (1 + 2.0 ** -22)  # the float32 twin: a conditioning of 2 roundings
    c = Comparison("bf16")
    c.compare([kappa], [kappa * (1 + 2.0 ** -6)], "rounded", _gives(f32))  # 4 bf16 roundings: as predicted
    assert not c.changed and c.worst == 2.0 ** -6
    c.compare([kappa], [kappa * (1 + ROUND_OFF_MARGIN * 2.0 ** -5)], "far off", _gives(f32))  # 16 x beyond it
    assert c.changed and c.worst == ROUND_OFF_MARGIN * 2.0 ** -5 and c.at["far off"] == c.worst
    c = Comparison("float32")
    clipped = kappa.clone()
    clipped[0, 1] = 0.0  # one coefficient clipped: O(1) of the scale, the float32 twin exact
    c.compare([kappa], [clipped], "clipped", _gives(kappa))
    assert c.changed and c.worst == 0.5


def _gives(k32):
    """A float32 twin that gives ``k32`` on every rollout asked for (``None``: it raises)."""
    return lambda need: [k32] * len(need)


def test_a_loss_or_float32_twin_that_raises_where_the_twin_does_not_is_a_change():
    """The loss raising where its twin computes is a change of what it computes, whatever
    the other rollouts show; so is a float32 twin that raises where a prediction is needed
    (no computation at a known precision: the loss's difference is not shown to be
    round-off). A non-finite float32 twin predicts unbounded round-off: no change. Where no
    prediction is needed the float32 twin is never asked."""
    kappa = torch.tensor([[1.0, -0.5, 0.25]], dtype=torch.float64)
    far = kappa * (1 + ROUND_OFF_MARGIN * 2.0 ** -5)
    c = Comparison("bf16")
    c.compare([kappa, kappa], [kappa, None], "raised", _gives(kappa))
    assert c.changed and c.rollouts == 1 and c.worst == 0.0
    c = Comparison("bf16")
    c.compare([kappa], [far], "float32 raised", _gives(None))
    assert c.changed and c.worst == ROUND_OFF_MARGIN * 2.0 ** -5
    c = Comparison("bf16")
    c.compare([kappa], [far], "float32 overflowed", _gives(kappa * float("inf")))
    assert not c.changed
    c = Comparison("bf16")
    c.compare([kappa], [kappa * (1 + 2.0 ** -6)], "within", lambda need: pytest.fail("asked for a prediction"))
    assert not c.changed


class _Counting(Engine):
    """The float32 twin's engine, counting the rollouts it is asked for."""

    def __init__(self, loss_fn) -> None:
        super().__init__(float32_twin(loss_fn))
        self.seen = 0

    def __call__(self, rollouts):
        self.seen += len(rollouts)
        return super().__call__(rollouts)


def in_float32(lp, r):
    """``exact`` computed in float32: within float32 round-off of its twin."""
    return exact(lp.float(), r.with_fields({"rewards": r.rewards.float(), "old_logprobs": r.old_logprobs.float()}))


def test_the_float32_twin_runs_only_where_the_loss_is_beyond_its_resolution():
    """The float32 twin's prediction is never below eps_p, so a rollout whose loss is within
    ROUND_OFF_MARGIN eps_p of its twin is round-off whatever it predicts: a float32 loss and
    a bf16 one within their round-off never run it; a bf16 loss that rounds three tied
    responses' KL-shaped rewards apart (tests/checker/test_precision_corpus.py: O(1) off its
    twin there, not with four) runs it on that rollout only, and still reads as changed."""
    from exchange.checker.cases import Case, GroupConfig
    from exchange.checker.precision import PairedEngine, changed_on
    from exchange.objectives.composition import Composition

    kl = Composition(shaping="kl_in_reward", precision="bf16").bind()
    tied = [build(Case(groups=(GroupConfig(((0,),) * n, (0.0,) * n), GroupConfig(((1,), (2,)), (0.0, 1.0)))))
            for n in (4, 3)]
    other = ROLLOUT.with_fields({"rewards": ROLLOUT.rewards * 3 + 1})
    for loss, precision, rollouts, ran, changed in ((in_float32, "float32", [ROLLOUT, other], 0, False),
                                                    (every_cast, "bf16", [ROLLOUT, other], 0, False),
                                                    (kl, "bf16", tied, 1, True)):
        c, f32 = Comparison(precision), _Counting(loss)
        PairedEngine(Engine(float64_twin(loss)), Engine(loss), f32, c)(rollouts)
        assert (f32.seen, c.changed, c.rollouts) == (ran, changed, 2), (precision, ran)
        assert c.worst > 0  # measured on every rollout, predicted on the needed ones only
        pairs = [(r, token_coefficients(loss, r.logprobs, r)) for r in rollouts]
        f32 = _Counting(loss)
        assert changed_on(Engine(float64_twin(loss)), f32, pairs, precision) == changed and f32.seen == ran


def test_the_float32_twin_runs_on_a_layout_only_where_needed():
    """compare_on_layout (the bulk path): a float32 loss judged at float32 never runs the
    float32 twin; the same loss declared float64 is beyond float64 round-off on every
    configuration, runs it, and reads as changed (float32 rounding is no float64 round-off)."""
    from exchange.checker import precision

    counted = []
    real = precision.float32_twin

    def counting(loss_fn):
        twin32 = real(loss_fn)

        def fn(lp, r):
            counted.append(1)
            return twin32(lp, r)
        return fn

    precision.float32_twin = counting
    try:
        for declared, ran in (("float32", False), ("float64", True)):
            counted.clear()
            c = Comparison(declared)
            precision.compare_on_layout(float64_twin(in_float32), in_float32, PROPERTIES["zero_sum"], "off_policy", 0,
                                        16, c)
            assert c.rollouts >= 16 and 0 < c.at["zero_sum (off_policy)"] < 1e-5, declared
            assert bool(counted) == ran and c.changed == ran, declared
    finally:
        precision.float32_twin = real


def test_a_loss_that_raises_on_a_layout_where_its_twin_does_not_changed_what_it_computes():
    """compare_on_layout (the bulk path) and PairedEngine read a loss that raises where its
    float64 twin computes the same way: what the loss computes changed. Here a bf16 guard
    raises on the configurations with a reward above 1 (its twin's request is float64: no
    raise). Before, the layout dropped those configurations, so a loss that raises read as
    within its round-off there."""
    from exchange.checker import precision

    def guarded(lp, r):
        x = r.rewards.to(torch.bfloat16)
        if x.dtype == torch.bfloat16 and bool((x > 1).any()):
            raise ValueError("reward above 1")
        return exact(lp, r.with_fields({"rewards": x.to(torch.float64)}))

    c = Comparison("bf16")
    precision.compare_on_layout(float64_twin(guarded), guarded, PROPERTIES["zero_sum"], "off_policy", 0, 16, c)
    assert c.changed and c.rollouts > 0  # some configurations compared, the raised ones not
    c = Comparison("bf16")
    low = ROLLOUT.with_fields({"rewards": ROLLOUT.rewards.clamp(max=1.0)})
    precision.PairedEngine(Engine(float64_twin(guarded)), Engine(guarded), Engine(float32_twin(guarded)), c)([low])
    assert not c.changed
    high = ROLLOUT.with_fields({"rewards": ROLLOUT.rewards + 2.0})
    precision.PairedEngine(Engine(float64_twin(guarded)), Engine(guarded), Engine(float32_twin(guarded)), c)([high])
    assert c.changed


def one_pass_variance(offset):
    """A z-score whose variance is formed in one pass, ``E[x^2] - E[x]^2``, of rewards
    offset by ``offset``: exact arithmetic holds every property (a group constant), float64
    rounds the variance by ``offset^2 eps``, which a reordering of the rows moves."""
    def loss(lp, r):
        x = r.rewards + offset
        n = r.group_sizes.to(lp.dtype)
        m = r.group_sum(x) / n
        v = r.group_sum(x * x) / n - m * m
        a = (x - m) / (v.clamp(min=0).sqrt() + 1e-3)
        return -((a[:, None] * lp) * r.fmask).sum()
    return loss


def test_the_float64_floor_takes_round_off_and_keeps_a_break():
    """A one-pass variance's (P) residual above the float64 tolerance is within the floor
    float64's own rounding measures (directed up and down); a row weight of 1e-3 moves by
    nothing like it and stays far above its floor."""
    from exchange.checker.cases import Case, GroupConfig
    from exchange.checker.examples import Example

    prop = PROPERTIES["permutation_invariant"]
    case = Case(groups=(GroupConfig(((1, 2, 3), (1, 2), (1, 3, 3), (2, 2)), (0.3, 0.9, 0.1, 0.7)),
                        GroupConfig(((1, 2), (1, 3), (2,)), (0.2, 0.8, 0.5))))
    example = Example(case, perm_seed=1)
    fn = one_pass_variance(3e3)
    raw = prop.evaluate(Engine(float64_twin(fn)), example, "on_policy")
    assert raw.residual > prop.tolerance  # float64 round-off above the fixed tolerance
    seen = {}
    judged = floored(prop, seen).evaluate(Engine(float64_twin(fn)), example, "on_policy")
    assert judged.residual <= prop.tolerance
    (found,) = seen.values()
    assert found.raw == raw.residual and found.raw <= found.floor and "float64 round-off" in str(found)
    seen = {}
    broken = floored(prop, seen).evaluate(Engine(_weighted(1e-3)), example, "on_policy")
    assert broken.residual > 1e-4 and seen == {}  # an effect of 1e-3 is no round-off


def _weighted(size):
    def loss(lp, r):
        w = 1 + size * torch.arange(r.n, dtype=lp.dtype) / r.n
        a = r.rewards - r.group_mean(r.rewards)
        return -((a * w)[:, None] * lp * r.fmask).sum()
    return loss


def _loo_std(lp, r):
    """A leave-one-out z-score with the others' variance in one pass (the composition
    part ``loo_std``): where the others are tied their variance is exactly 0, float64
    rounds it to about 1e-16 and the square root makes that 1e-8 (sqrt(eps), not eps)."""
    x = r.rewards
    g = r.group_sizes.to(lp.dtype)
    mean = (r.group_sum(x) - x) / (g - 1)
    sq = (r.group_sum(x * x) - x * x) / (g - 1)
    a = (x - mean) / ((sq - mean ** 2).clamp(min=0).sqrt() + 0.1)
    return -((a[:, None] * lp) * r.fmask).sum()


def test_the_float64_floor_takes_a_square_root_of_round_off():
    """A leave-one-out std over three tied rewards: (P) residual 4e-8 to 1.3e-7 in float64,
    float32's 1e-3 (or 8e-8 where float32 rounds the tie exactly, (0.7, 0.7, 0.7)): scaled
    by the linear ratio 2^-29 (an early floor) it is far below; float64's own rounding,
    directed up and down, moves it by as much (the floor now). The composition
    loo_std+token+dual_clip+batch_token_count+cosine_length+log_rho_sq@0.5@float64 read (P)
    broken this way (benchmark seed 1, index 111)."""
    from exchange.checker.cases import Case, GroupConfig
    from exchange.checker.examples import Example

    prop = PROPERTIES["permutation_invariant"]
    for rewards in ((0.3, 0.3, 0.3, 0.9), (0.9238795325112867,) * 3 + (0.9807852804032304,), (0.7, 0.7, 0.7, 0.1)):
        example = Example(Case(groups=(GroupConfig(((1, 2, 3), (1, 2), (1, 3, 3), (2,)), rewards),)), perm_seed=1)
        raw = prop.evaluate(Engine(float64_twin(_loo_std)), example, "on_policy")
        assert raw.residual > prop.tolerance  # float64 round-off above the fixed tolerance
        seen = {}
        judged = floored(prop, seen).evaluate(Engine(float64_twin(_loo_std)), example, "on_policy")
        assert judged.residual <= prop.tolerance, rewards
        (found,) = seen.values()
        assert found.raw == raw.residual <= found.floor


def test_a_break_within_the_loss_round_off_on_its_own_counterexample_is_round_off():
    """A bf16 z-score of a KL-shaped reward: one tied layout is rounded apart (the loss
    differs from its twin by O(1) there, so the loss itself is judged), but the (Z) break
    the bf16 loss shows on identical responses is its rounded sum of z-scores, within its
    round-off of the twin on that counterexample: the twin's (Z) stands and M4 (found only
    on the loss's bf16 coefficients) is not named. Before: (Z) broken with M4 on both
    regimes, (C) off-policy."""
    from exchange import check
    from exchange.objectives.composition import Composition

    report = check(Composition(estimator="group_mean_std", shaping="kl_in_reward", precision="bf16").bind(),
                   max_examples=10, seed=1)
    for regime in ("on_policy", "off_policy"):
        assert report.holds("zero_sum", regime) and report.holds("shared_cancellation", regime)
        assert "M4" not in report.mechanisms_in(regime)
        assert not report.holds("exchangeable", regime)  # M7's break stays


def _no_gradient(lp, r):
    """A loss that does not depend on the log-probs (they are detached)."""
    return (lp.detach() * r.fmask).sum() + r.rewards.sum()


def test_a_loss_with_no_gradient_path_raises_on_every_path():
    """The plain path raises for a loss with no gradient path to the log-probs (the spec);
    vmap(grad) and the bulk fuzzer's vmapped forward used to return zeros there, so a
    batched check read every coefficient as 0. Now each raises (or reports, per
    configuration) the plain path's error; its twin too."""
    import pytest

    from exchange.checker import bulk
    from exchange.errors import ObjectiveError

    other = ROLLOUT.with_fields({"rewards": ROLLOUT.rewards * 3 + 1})
    for fn in (_no_gradient, float64_twin(_no_gradient)):
        with pytest.raises(ObjectiveError, match="no gradient path"):
            token_coefficients(fn, ROLLOUT.logprobs, ROLLOUT)
        with pytest.raises(ObjectiveError, match="no gradient path"):
            Engine(fn, batched=True)([ROLLOUT, other])
        with pytest.raises(ObjectiveError, match="no gradient path"):
            token_coefficients_batched(fn, [ROLLOUT.logprobs, other.logprobs], [ROLLOUT, other])
        fields = {"logprobs": torch.stack([ROLLOUT.logprobs] * 2), "rewards": torch.stack([ROLLOUT.rewards, other.rewards])}
        _, _, errors = bulk.coefficients(fn, ROLLOUT, fields, bulk.Mode(True))
        assert all(isinstance(e, ObjectiveError) and "no gradient path" in str(e) for e in errors)

