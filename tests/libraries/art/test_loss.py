"""``art:<cispo|ppo>``: openpipe-art 0.5.18's own loss.py and packing (pack.py)."""

from __future__ import annotations

import random
import sys

import pytest
import torch

from exchange import token_coefficients
from exchange.checker.cases import Case, GroupConfig, build
from exchange.errors import ExchangeError

pytestmark = pytest.mark.usefixtures("art_ready")

CASE = Case(
    groups=(
        GroupConfig(((1, 2, 3), (1, 2, 0, 1, 3), (4,)), (1.0, 0.0, 0.5)),
        GroupConfig(((1, 1), (2, 0, 2, 1), (3,)), (0.0, 1.0, 2.0)),
    )
)


def _kappa(target, rollout, **params):
    from exchange.libraries import resolve

    return token_coefficients(resolve(target, {k: str(v) for k, v in params.items()}), rollout.logprobs, rollout)


def _grpo_adv(rollout):
    r = rollout.rewards.to(torch.float64)
    mean = rollout.group_mean(r)
    std = torch.sqrt(rollout.group_mean((r - mean) ** 2))  # population std, as ART
    return (r - mean) / (std + 1e-6)


def test_loading_leaves_no_stub_modules_behind():
    from exchange.libraries.art.loss import _modules

    _modules()
    assert [m for m in sys.modules if m == "art" or m.startswith("art.")] == []
    # openai / PIL / transformers may be imported for real by other code: never as stubs.
    for name in ("openai", "PIL", "transformers", "transformers.tokenization_utils_base"):
        assert name not in sys.modules or getattr(sys.modules[name], "__spec__", None) is not None


def test_default_loss_is_a_per_response_mean():
    """ART weights every trajectory's tokens by 1/L_i (tokenize_trajectory_groups), then
    divides advantages by the token mean of |A| * weight: on-policy each token of
    response i carries c * A_i / L_i with one batch constant c (M3)."""
    rollout = build(CASE)
    kappa = _kappa("art:cispo", rollout).to(torch.float64)
    lengths = rollout.mask.sum(1).to(torch.float64)
    shape = (_grpo_adv(rollout) / lengths)[:, None] * rollout.fmask.to(torch.float64)
    c = kappa.sum() / shape.sum() if float(shape.abs().sum()) else 1.0
    ratio = kappa[rollout.mask] / shape[rollout.mask]
    nonzero = shape[rollout.mask].abs() > 1e-9
    assert torch.allclose(ratio[nonzero], ratio[nonzero][0].expand(int(nonzero.sum())), rtol=1e-5)
    assert float(kappa[rollout.rewards == 1.0][1].abs().sum()) == 0.0  # the zero-advantage response is dropped


def test_advantage_balance_breaks_zero_sum():
    rollout = build(CASE)
    kappa = _kappa("art:cispo", rollout, advantage_balance=0.5).to(torch.float64)
    per_response = kappa.sum(1)  # L_i tokens of c * A_i / L_i: c * A_i
    assert float(rollout.group_sum(per_response).abs().max()) > 1e-3  # M4
    plain = _kappa("art:cispo", rollout).to(torch.float64)
    assert float(rollout.group_sum(plain.sum(1)).abs().max()) < 1e-6


def test_cispo_clamp_is_sign_free_and_ppo_is_not():
    """Off-policy, a shared first event at ratio e^0.5 (above 1 + 0.2, below 1 + 4): ART's
    default cispo keeps it for both signs, ppo zeroes it for the positive advantage."""
    case = Case(groups=(GroupConfig(((1, 2), (1, 3)), (1.0, 0.0)),), off_policy=True, seed=0)
    rollout = build(case)
    lp = rollout.logprobs.detach().clone()
    lp[:, 0] = rollout.old_logprobs[:, 0] + 0.5
    from exchange.libraries import resolve

    cispo = token_coefficients(resolve("art:cispo"), lp, rollout)
    ppo = token_coefficients(resolve("art:ppo"), lp, rollout)
    assert float(cispo[0, 0]) != 0.0 and float(cispo[1, 0]) != 0.0
    assert float(ppo[0, 0]) == 0.0 and float(ppo[1, 0]) != 0.0


def test_python_random_state_is_untouched():
    rollout = build(CASE)
    random.seed(7)
    before = random.random()
    random.seed(7)
    _kappa("art:cispo", rollout)
    assert random.random() == before


def test_all_equal_rewards_train_on_nothing():
    case = Case(groups=(GroupConfig(((1, 2), (3,)), (1.0, 1.0)),))
    rollout = build(case)
    assert float(_kappa("art:cispo", rollout).abs().sum()) == 0.0


def test_bad_targets_are_named():
    from exchange.libraries import resolve

    with pytest.raises(ExchangeError, match="loss='grpo'"):
        resolve("art:grpo")
    with pytest.raises(ExchangeError, match="importance_sampling_level='seq'"):
        resolve("art:cispo", {"importance_sampling_level": "seq"})
    with pytest.raises(ExchangeError, match="advantage_balance=2.0"):
        resolve("art:cispo", {"advantage_balance": "2"})


def test_declares_float32_packing():
    """pack.py builds advantages and weights as float32 tensors: the loss runs in float32
    (declared), and (Z) is judged on its float64 twin (issue 45), where the float32 packing
    is rewritten to float64: it holds exactly, whatever precision is named. (Before the twin, naming float64 made the loss's own 3e-8 round-off a
    (Z) break.)"""
    from exchange.checker import check
    from exchange.libraries import resolve

    fn = resolve("art:cispo")
    assert fn.exchange_precision == "float32"
    report = check(fn, max_examples=5, seed=0, regimes=("on_policy",), properties=("zero_sum",))
    assert report.holds("zero_sum", "on_policy")
    assert report.precision == "float32"
    tight = check(fn, max_examples=5, seed=0, regimes=("on_policy",), properties=("zero_sum",), precision="float64")
    assert tight.holds("zero_sum", "on_policy")
