"""The float64 floor measured on float64's own rounding (exchange.checker.rounding,
exchange.checker.float64_floor.floored): a round-off that a square root amplifies is measured
as it is, where lower precisions round the same tie exactly; a real break stays above it."""

import torch

from exchange import check
from exchange.checker import float64_floor
from exchange.checker.cases import Case, GroupConfig, build
from exchange.checker.float64_floor import float64_rounding
from exchange.checker.properties.base import Evaluation
from exchange.checker.rounding import DIRECTIONS, directed_twin
from exchange.checker.tolerances import RESOLUTION
from exchange.checker.twin import Float64Twin, float32_twin, float64_twin
from exchange.core.coefficients import Engine
from exchange.objectives.composition import Composition

# benchmark seed 2026, #269 (benchmarks/composition_agreement.py): float64, derived (P) holds
SEED_2026_269 = Composition(estimator="loo_std", shaping="cosine_length", weight="token", clip="none",
                            aggregation="group_token_mean", additive="k3_behaviour",
                            mask="truncation_after_centring", precision="float64", beta=0.001)
# the shaped reward of #269's four tied responses, 1 + cos(6 pi / 16)
TIED = 1.3826834323650898


def one_pass_std(lp, r):
    """Each response's coefficient is its group's std formed in one pass, E[x^2] - E[x]^2."""
    x = r.rewards
    m = r.group_mean(x)
    std = (r.group_mean(x * x) - m * m).clamp(min=0).sqrt()
    return -(std[:, None] * lp * r.fmask).sum()


def test_directed_rounding_moves_a_cancelled_variance_by_its_square_root():
    """Four tied values: exact std 0. Directed up, the cancelled difference E[x^2] - E[x]^2
    becomes about eps x^2 and its square root sqrt(eps) x (1e-8, not eps's 2e-16); directed
    down it stays clamped at 0. The float32 and float16 twins round this tie exactly: a
    lower precision, sampled, can see nothing where float64 rounds."""
    rollout = build(Case(groups=(GroupConfig(((1, 2), (1, 3), (2,), (2, 2)), (TIED,) * 4),)))
    (plain,) = Engine(float64_twin(one_pass_std))([rollout])
    moved = [float((Engine(directed_twin(one_pass_std, d))([rollout])[0] - plain).abs().max()) for d in DIRECTIONS]
    scale = RESOLUTION["float64"] ** 0.5 * TIED
    assert 0.1 * scale < max(moved) < 10 * scale, moved
    for low in (float32_twin(one_pass_std), Float64Twin(one_pass_std, target=torch.float16)):
        (k,) = Engine(low)([rollout])
        assert float(k.abs().max()) == 0.0  # the tie rounded exactly: no round-off to scale


def test_seed_2026_269_holds_up_to_float64_round_off_and_not_without_the_measurement(monkeypatch):
    """#269 read (P) broken off-policy at 1.49e-7 against 1e-9 (derived: holds): the others'
    one-pass variance of four tied shaped rewards is 2^-26 after the square root in some
    row orders and 0 in others. The floor before sampled the float32 and float16 twins (and
    rescaled rewards), which all round this tie exactly and predicted 0. Float64's own
    rounding, directed, moves the coefficients by as much as the residual (no margin
    needed); without that measurement the same check reads broken."""
    loss = SEED_2026_269.bind()
    kwargs = dict(max_examples=10, seed=269, properties=["permutation_invariant"], regimes=("off_policy",))
    report = check(loss, **kwargs)
    res = report.result("permutation_invariant", "off_policy")
    assert res.holds and res.round_off == "float64" and "directed" in res.note, res.note

    monkeypatch.setattr(float64_floor, "DIRECTIONS", ())
    broken = check(loss, shrink=False, **kwargs).result("permutation_invariant", "off_policy")
    assert not broken.holds and broken.max_residual > 1e-8
    monkeypatch.undo()
    ev = Evaluation(broken.max_residual, True, broken.counterexample, broken.kappa, variant=broken.variant,
                    variant_kappa=broken.variant_kappa)
    assert float64_rounding(loss, ev) >= broken.max_residual


def test_a_row_position_weight_stays_broken_above_the_float64_floor():
    """The same loss with a row-position weight 1 + 0.003 i / N (THEORY.md: a per-response
    factor that depends on the row, M3): a break of about 3e-3, which float64's directed
    rounding moves by round-off only; (P) stays broken."""
    inner = SEED_2026_269.bind()

    def weighted(lp, r):
        w = 1 + 0.003 * torch.arange(r.n, dtype=lp.dtype, device=lp.device) / r.n
        return inner(lp * w[:, None], r)

    report = check(weighted, max_examples=10, seed=269, properties=["permutation_invariant"],
                   regimes=("off_policy",), shrink=False)
    res = report.result("permutation_invariant", "off_policy")
    assert not res.holds and res.max_residual > 1e-3, res


def test_a_run_that_decides_a_mask_otherwise_is_no_measurement():
    """A mask decided on a difference that is exactly 0 (a reward at the threshold): rounded
    down, it drops two responses (coefficients 0 where the plain twin has 1). Against the
    plain twin that jump of O(1) would make a floor of 32 and hide the real break of a
    row-position weight 1 + 1e-3 i / N; it is the same at one rounding and at two, so the
    floor's step cancels it and the break stays."""
    from exchange.checker.examples import Example
    from exchange.checker.float64_floor import floored
    from exchange.checker.properties import PROPERTIES

    def masked(lp, r):
        keep = (r.rewards - 0.3 >= 0).to(lp.dtype)
        w = 1 + 1e-3 * torch.arange(r.n, dtype=lp.dtype) / r.n
        return -((keep * w)[:, None] * lp * r.fmask).sum()

    prop = PROPERTIES["permutation_invariant"]
    example = Example(Case(groups=(GroupConfig(((1, 2, 3), (1, 2), (1, 3, 3), (2, 2)), (0.3, 0.3, 0.9, 0.1)),)),
                      perm_seed=1)
    rollout = build(example.case)
    (plain,) = Engine(float64_twin(masked))([rollout])
    down = Engine(directed_twin(masked, -1.0))([rollout])[0]
    assert bool(((down != 0) != (plain != 0)).any())  # the run decided the mask otherwise
    seen = {}
    ev = floored(prop, seen).evaluate(Engine(float64_twin(masked)), example, "on_policy")
    assert ev.residual > 1e-4 and seen == {}
