"""``trl:<loss_type>``: TRL 1.16.0's own advantage and loss code, checked per token.

Oracles: the closed forms of ../shared/reference/rl-libraries.md section 1.2 and the
catalog objectives (grpo, dapo, dr_grpo) on event-consistent rollouts from
``exchange.checker.cases``.
"""

from __future__ import annotations

import inspect
import itertools
import re

import pytest
import torch

from exchange import token_coefficients
from exchange.checker.cases import Case, GroupConfig, build
from exchange.errors import ExchangeError
from exchange.core.events import event_coefficients, events
from exchange.objectives import get

pytestmark = pytest.mark.usefixtures("trl_ready")

# Two groups of unequal sizes, lengths 3/5/1 and 2/4, mixed rewards.
CASE = Case(
    groups=(
        GroupConfig(((1, 2, 3), (1, 2, 0, 1, 3), (4,)), (1.0, 0.0, 0.5)),
        GroupConfig(((1, 1), (2, 0, 2, 1)), (0.0, 1.0)),
    )
)


def _kappa(target: str, rollout, **params):
    from exchange.libraries import resolve

    lp = rollout.logprobs if rollout.logprobs is not None else rollout.old_logprobs
    return token_coefficients(resolve(target, {k: str(v) for k, v in params.items()}), lp, rollout)


def _trl_advantages(rollout):
    """TRL's formula (section 1.1): (R - mean_g) / (unbiased std_g + 1e-4)."""
    return (rollout.rewards - rollout.group_mean(rollout.rewards)) / (rollout.group_std(rollout.rewards) + 1e-4)


def test_every_loss_type_of_the_installed_trl_is_covered():
    from trl import GRPOTrainer

    from exchange.libraries.trl.loss import LOSS_TYPES

    source = inspect.getsource(GRPOTrainer._compute_loss)
    found = set(re.findall(r'loss_type == "(\w+)"', source))
    for group in re.findall(r"loss_type in \[([^\]]*)\]", source):
        found |= set(re.findall(r'"(\w+)"', group))
    assert found == set(LOSS_TYPES)


@pytest.mark.parametrize(
    "loss_type, weight",
    [
        ("grpo", lambda r: 1.0 / (r.n * r.lengths.double())),
        ("sapo", lambda r: 1.0 / (r.n * r.lengths.double())),
        ("bnpo", lambda r: torch.full((r.n,), 1.0 / float(r.n_tokens), dtype=torch.float64)),
        ("dapo", lambda r: torch.full((r.n,), 1.0 / float(r.n_tokens), dtype=torch.float64)),
        ("vespo", lambda r: torch.full((r.n,), 1.0 / float(r.n_tokens), dtype=torch.float64)),
        ("cispo", lambda r: torch.full((r.n,), 0.2 / float(r.n_tokens), dtype=torch.float64)),  # min(r=1, eps_high=0.2)
        ("dr_grpo", lambda r: torch.full((r.n,), 1.0 / (r.n * 512.0), dtype=torch.float64)),  # B * max_completion_length
        ("luspo", lambda r: torch.full((r.n,), 1.0 / r.n, dtype=torch.float64)),
    ],
)
def test_on_policy_token_weight_matches_the_reference_notes(loss_type, weight):
    rollout = build(CASE)
    kappa = _kappa(f"trl:{loss_type}", rollout)
    want = (_trl_advantages(rollout) * weight(rollout).to(torch.float64))[:, None] * rollout.fmask
    torch.testing.assert_close(kappa, want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("off_policy", [False, True])
@pytest.mark.parametrize(
    "target, params, catalog, catalog_params",
    [
        ("trl:dapo", {"epsilon_high": 0.28}, "dapo", {}),
        ("trl:grpo", {}, "grpo", {}),
        # TRL's dr_grpo changes only the normaliser: the std stays unless scale_rewards=none.
        ("trl:dr_grpo", {"scale_rewards": "none"}, "dr_grpo", {"max_length": 512.0}),
        # what ExchangeGRPOTrainer binds for these loss types (exchange.libraries.trl.settings):
        # TRL's cispo cap is absolute (eps_high = epsilon_high - 1), its sapo takes the
        # per-sequence mean, and its sequence-level ratio is GSPO's
        ("trl:cispo", {"epsilon_high": 5.0}, "cispo", {"eps_high": 4.0}),
        # (TRL builds sapo's temperatures with torch.where on Python floats: float32, so
        # 1.05 is 1.0499999523 there; off-policy that moves kappa by ~1e-8 relative)
        ("trl:sapo", {}, "sapo", {"loss_agg_mode": "seq-mean-token-mean", "tau_neg": 1.0499999523162842}),
        ("trl:grpo", {"importance_sampling_level": "sequence"}, "gspo", {"eps_low": 0.2, "eps_high": 0.2}),
    ],
)
def test_trl_equals_the_catalog_objective(off_policy, target, params, catalog, catalog_params):
    from dataclasses import replace

    rollout = build(replace(CASE, off_policy=off_policy, seed=3))
    kappa = _kappa(target, rollout, **params)
    want = token_coefficients(get(catalog).bind(**catalog_params), rollout.logprobs, rollout)
    torch.testing.assert_close(kappa, want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("off_policy", [False, True])
@pytest.mark.parametrize(
    "target, params, catalog, catalog_params",
    [
        ("trl:dapo", {"epsilon_high": 0.28}, "dapo", {}),
        ("trl:grpo", {}, "grpo", {}),
        ("trl:bnpo", {}, "bnpo", {}),
        ("trl:dr_grpo", {}, "dr_grpo", {"max_length": 512.0, "scale": "group"}),  # TRL's defaults
        ("trl:grpo", {"scale_rewards": "none"}, "grpo", {"scale": "none"}),
    ],
)
def test_truncated_rows_are_masked_after_centring_as_trl_does(off_policy, target, params, catalog, catalog_params):
    """``mask_truncated_completions`` (TRL's code) equals the catalog objective bound with
    ``mask_truncated=True``: each group has one truncated row (length >= 4) and complete
    ones, so the advantages are centred over all rows and the mask drops one per group."""
    from dataclasses import replace

    rollout = build(replace(CASE, off_policy=off_policy, seed=3, length_limit=4))
    assert rollout.truncated.tolist() == [False, True, False, False, True]
    kappa = _kappa(target, rollout, mask_truncated_completions=True, **params)
    want = token_coefficients(get(catalog).bind(mask_truncated=True, **catalog_params), rollout.logprobs, rollout)
    torch.testing.assert_close(kappa, want, rtol=1e-9, atol=1e-12)
    assert float(kappa[rollout.truncated].abs().sum()) == 0.0  # the dropped rows carry nothing
    unmasked = token_coefficients(get(catalog).bind(**catalog_params), rollout.logprobs, rollout)
    assert not torch.allclose(unmasked, want)  # the setting matters on this rollout


# TRL's per-token factors (trl==1.16.0 _compute_loss) and the catalog parameters that
# ExchangeGRPOTrainer binds for them (exchange.libraries.trl.settings).
_VLLM = {"use_vllm": True, "vllm_importance_sampling_correction": False}
_FACTORS = [
    ({"top_entropy_quantile": 0.5}, {"top_entropy_quantile": 0.5}),
    ({"delta": 1.05}, {"delta": 1.05}),  # below 1 + epsilon_high: TRL does not forbid it
    ({"delta": 1.3}, {"delta": 1.3}),
    ({"off_policy_mask_threshold": 0.0}, {"off_policy_mask": 0.0}),
    ({**_VLLM, "off_policy_mask_threshold": -0.3}, {"off_policy_mask": -0.3, "off_policy_mask_sampler": True}),
    ({**_VLLM, "vllm_importance_sampling_correction": True},  # TRL's defaults: sequence_mask, at most 3
     {"sampler_is": "sequence_mask"}),
    ({**_VLLM, "vllm_importance_sampling_correction": True, "vllm_importance_sampling_mode": "sequence_truncate",
      "vllm_importance_sampling_clip_min": 0.5}, {"sampler_is": "sequence_truncate", "sampler_is_min": 0.5}),
    ({**_VLLM, "vllm_importance_sampling_correction": True, "vllm_importance_sampling_mode": "token_truncate"},
     {"sampler_is": "token_truncate"}),
    ({**_VLLM, "vllm_importance_sampling_correction": True, "vllm_importance_sampling_mode": "token_mask",
      "vllm_importance_sampling_clip_min": 0.6}, {"sampler_is": "token_mask", "sampler_is_min": 0.6}),
]
_LOSS_TYPES = [  # TRL loss type, its settings; catalog objective, its parameters
    ("dapo", {"epsilon_high": 0.28}, "dapo", {}),
    ("grpo", {}, "grpo", {}),
    ("bnpo", {}, "bnpo", {}),
    ("dr_grpo", {}, "dr_grpo", {"max_length": 512.0, "scale": "group"}),
    ("cispo", {"epsilon_high": 5.0}, "cispo", {"eps_high": 4.0}),
    ("sapo", {}, "sapo", {"loss_agg_mode": "seq-mean-token-mean", "tau_neg": 1.0499999523162842}),
    ("grpo", {"importance_sampling_level": "sequence"}, "gspo", {"eps_low": 0.2, "eps_high": 0.2}),
]


# TRL applies delta to its PPO-clip loss types only (not cispo, sapo)
_FACTOR_ROWS = [(*lt, *f) for lt in _LOSS_TYPES for f in _FACTORS if "delta" not in f[1] or lt[0] not in ("cispo", "sapo")]


@pytest.mark.parametrize("loss_type, trl_base, catalog, base, trl_params, params", _FACTOR_ROWS,
                         ids=[f"{lt}-{c}-" + ",".join(f"{k}={v}" for k, v in p.items()) for lt, _, c, _, _, p in _FACTOR_ROWS])
def test_trls_token_factors_equal_the_catalog_parameters(loss_type, trl_base, catalog, base, trl_params, params):
    """The high-entropy mask, ``delta``, the off-policy sequence mask and vLLM's
    importance-sampling weight, each TRL's own code through ``trl:<loss_type>``, equal the
    catalog objective bound with the parameter the trainer maps the setting to, in both
    regimes (the checker's cases carry the sampler's log-probs), and the setting changes
    the coefficients in at least one of them (so the row tests something)."""
    from dataclasses import replace

    moved = []
    for off_policy, seed in itertools.product((False, True), (3, 9)):  # seed 9: GSPO's ratios pass delta
        rollout = build(replace(CASE, off_policy=off_policy, seed=seed))
        # TRL builds vLLM's log-probs as a float32 tensor: give it values float32 holds exactly
        rollout = replace(rollout, sampling_logprobs=rollout.sampling_logprobs.float().double())
        kappa = _kappa(f"trl:{loss_type}", rollout, **trl_base, **trl_params)
        want = token_coefficients(get(catalog).bind(**base, **params), rollout.logprobs, rollout)
        torch.testing.assert_close(kappa, want, rtol=1e-9, atol=1e-12)
        plain = token_coefficients(get(catalog).bind(**base), rollout.logprobs, rollout)
        moved.append(not torch.allclose(plain, want, rtol=1e-6, atol=1e-12))
    assert any(moved), "the setting changes nothing on this rollout: the row tests nothing"


@pytest.mark.parametrize("loss_type, params, on, off", [
    # one batch: the entropy mask is a function of the event; per micro-batch it is not
    ("dapo", {"top_entropy_quantile": "0.5"}, set(), {"M2.sign_clip"}),
    ("dapo", {"top_entropy_quantile": "0.5", "steps_per_generation": "2", "gradient_accumulation_steps": "2"},
     {"M5.micro_batch_quantile"}, {"M2.sign_clip", "M5.micro_batch_quantile"}),
    # GA 1 with steps_per_generation 2: each optimizer step holds one micro-batch (M8)
    ("dapo", {"top_entropy_quantile": "0.5", "steps_per_generation": "2"}, {"M8.split_update"},
     {"M2.sign_clip", "M8.split_update"}),
    ("cispo", {"delta": "1.1"}, set(), set()),  # TRL applies delta to the PPO-clip types only
    ("cispo", {"off_policy_mask_threshold": "0.05"}, set(), {"M2.sign_clip"}),
    ("cispo", {"off_policy_mask_threshold": "-0.05"}, {"M4.not_zero_sum"}, {"M2.sign_clip", "M4.not_zero_sum"}),
    ("cispo", {"off_policy_mask_threshold": "0.05", "use_vllm": "true", "vllm_importance_sampling_correction": "false"},
     {"M2.sign_clip", "M4.not_zero_sum"}, {"M2.sign_clip", "M4.not_zero_sum"}),
    ("cispo", {"use_vllm": "true", "vllm_importance_sampling_mode": "token_mask"}, set(), set()),
    ("cispo", {"use_vllm": "true"}, {"M5.response_statistics"}, {"M5.response_statistics"}),
    ("cispo", {"use_vllm": "true", "vllm_importance_sampling_correction": "false"}, set(), set()),
    ("cispo", {"multi_objective_aggregation": "normalize_then_sum"}, set(), set()),
])
def test_the_derived_verdict_of_each_trl_factor(loss_type, params, on, off):
    from exchange.libraries import expected

    exp = expected(f"trl:{loss_type}", params)
    assert (set(exp["on_policy"].facets), set(exp["off_policy"].facets)) == (on, off)


def test_the_sampler_settings_need_the_samplers_logprobs():
    from dataclasses import replace as dc_replace

    rollout = dc_replace(build(CASE), sampling_logprobs=None)
    with pytest.raises(ExchangeError, match=r"rollout.sampling_logprobs=None.*use_vllm=True"):
        _kappa("trl:dapo", rollout, use_vllm=True)
    with pytest.raises(ExchangeError, match=r"rollout.sampling_logprobs=None but sampler_is='token_mask'"):
        token_coefficients(get("dapo").bind(sampler_is="token_mask"), rollout.old_logprobs, rollout)
    with pytest.raises(ExchangeError, match=r"rollout.entropy=None but top_entropy_quantile=0.5"):
        token_coefficients(get("dapo").bind(top_entropy_quantile=0.5), rollout.old_logprobs,
                           dc_replace(rollout, entropy=None))
    with pytest.raises(ExchangeError, match=r"sampler_is='sequence' is not one of none, token_truncate"):
        get("dapo").bind(sampler_is="sequence")


def test_row_order_and_group_layout_do_not_matter():
    rollout = build(replace_seed(CASE, 1))
    perm = torch.tensor([3, 0, 4, 2, 1])  # interleaves the two groups
    shuffled = rollout.select(perm)
    for target in ("trl:grpo", "trl:dapo"):
        torch.testing.assert_close(_kappa(target, shuffled), _kappa(target, rollout)[perm], rtol=1e-12, atol=0)


def replace_seed(case, seed):
    from dataclasses import replace

    return replace(case, seed=seed)


def test_gspo_weight_is_ratio_over_length():
    """importance_sampling_level=sequence: kappa = A s_i / (B L_i) inside the clip range."""
    from dataclasses import replace

    rollout = build(replace(CASE, off_policy=True, seed=2))
    kappa = _kappa("trl:grpo", rollout, importance_sampling_level="sequence", epsilon=10.0)
    log_s = ((rollout.logprobs - rollout.old_logprobs) * rollout.fmask).sum(1) / rollout.lengths
    want = _trl_advantages(rollout) * torch.exp(log_s) / (rollout.n * rollout.lengths.double())
    torch.testing.assert_close(kappa, want[:, None] * rollout.fmask, rtol=1e-9, atol=1e-12)


def test_truncated_completions_are_masked_after_centring():
    """mask_truncated_completions: a truncated row keeps its share of the group mean but
    loses its tokens, so identical responses no longer cancel (M4) -- TRL's code, not ours."""
    case = Case(groups=(GroupConfig(((1, 2),) * 3, (1.0, 0.0, 0.0)),))
    rollout = build(case).replace(truncated=torch.tensor([False, True, False]))
    ev = events(rollout)
    plain = event_coefficients(_kappa("trl:dapo", rollout), ev)
    masked_kappa = _kappa("trl:dapo", rollout, mask_truncated_completions=True)
    masked = event_coefficients(masked_kappa, ev)
    scale = float(masked_kappa.abs().max())
    assert float(plain.abs().max()) <= 1e-12 * scale  # shared events cancel without masking
    assert bool((masked_kappa[1] == 0).all())  # the truncated row is out of the loss
    assert float(masked.abs().max()) > 0.1 * scale  # ... but its advantage stayed in the baseline
    # The survivors' coefficients are A_i / N_kept with the full group's advantages.
    adv = _trl_advantages(rollout)
    torch.testing.assert_close(masked_kappa[0], adv[0] / 4 * rollout.fmask[0], rtol=1e-9, atol=1e-12)


def test_entropy_mask_uses_the_rollout_entropy():
    rollout = build(CASE)
    kappa = _kappa("trl:dapo", rollout, top_entropy_quantile=0.5)
    threshold = torch.quantile(rollout.entropy[rollout.mask].float(), 0.5)
    kept = (rollout.entropy >= threshold) & rollout.mask
    assert bool((kappa[~kept] == 0).all())
    assert bool((kappa[kept] != 0).any())


def test_batch_scaling_with_unequal_groups_is_tr_ls_formula():
    """TRL cannot run unequal groups; its "batch" formula, (R - group mean) / (std of every
    reward + 1e-4), is what the adapter applies, and equals the catalog's scale="batch"."""
    rollout = build(CASE)  # groups of 3 and 2
    kappa = _kappa("trl:dapo", rollout, scale_rewards="batch", epsilon_high=0.28)
    centred = rollout.rewards - rollout.group_mean(rollout.rewards)
    want_adv = centred / (rollout.rewards.std() + 1e-4)
    torch.testing.assert_close(kappa, (want_adv / float(rollout.n_tokens))[:, None] * rollout.fmask,
                               rtol=1e-9, atol=1e-12)
    ours = token_coefficients(get("dapo").bind(scale="batch"), rollout.logprobs, rollout)
    torch.testing.assert_close(kappa, ours, rtol=1e-9, atol=1e-12)


def test_bad_parameters_are_named():
    from exchange.libraries import resolve

    with pytest.raises(ExchangeError, match="epsilon_hi="):
        resolve("trl:dapo", {"epsilon_hi": "0.3"})
    with pytest.raises(ExchangeError, match="loss_type='ppo'"):
        resolve("trl:ppo", {})
    with pytest.raises(ExchangeError, match="importance_sampling_level"):
        resolve("trl:grpo", {"importance_sampling_level": "word"})
