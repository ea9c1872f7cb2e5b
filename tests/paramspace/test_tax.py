"""Learning tax: masked backward passes against autograd oracles (THEORY.md 1, 5 P1)."""

import pytest
import torch

from exchange.errors import InvalidArgument
from exchange.core.events import event_coefficients, events
from exchange.models import response_logprobs
from exchange.objectives import resolve
from exchange.paramspace import learning_tax, zero_credit_occurrences

from tests.paramspace.helpers import rollout_for, tiny_lm

# Round-off scale: float64 sums of O(N T) terms, relative to the update norm.
REL_TOL = 1e-10
# Hugging Face Llama/Qwen2 run RMSNorm and rotary embeddings in float32 even in a float64
# model (the norm's backward rounds cotangents to float32): float32 epsilon, times a margin.
HF_REL_TOL = 1e-6


def _oracle_shared_residual(model, loss_fn, rollout):
    """sum_{e shared} K_e grad l_e, one autograd call per shared event (first occurrence)."""
    lp = response_logprobs(model, rollout).detach()
    from exchange import token_coefficients

    kappa = token_coefficients(loss_fn, lp, rollout)
    ev = events(rollout)
    K = event_coefficients(kappa, ev)
    params = dict(model.named_parameters())
    total = {n: torch.zeros_like(p) for n, p in params.items()}
    done = set()
    for i, t in rollout.mask.nonzero().tolist():
        e = int(ev.ids[i, t])
        if not bool(ev.shared[e]) or e in done:
            continue
        done.add(e)
        l = response_logprobs(model, rollout)[i, t]
        grads = torch.autograd.grad(l, list(params.values()), allow_unused=True)
        for (n, p), g in zip(params.items(), grads):
            if g is not None:
                total[n] += K[e] * g
    return total, K[ev.shared]


def _max_abs_diff(a, b):
    return max(float((a[n] - b[n]).abs().max()) for n in a)


def _norm(d):
    return float(torch.sqrt(sum((v**2).sum() for v in d.values())))


@pytest.mark.parametrize("name", ["dr_grpo", "dapo", "cispo", "rloo"])
@pytest.mark.parametrize("seed", [0, 1])
def test_exchangeable_objectives_leave_no_shared_residual(name, seed):
    model = tiny_lm(seed)
    r = rollout_for(model, seed=seed)
    tax = learning_tax(model, resolve(name), r)
    assert tax.n_shared_events >= 2 * r.n_groups  # the forced prefix: non-vacuous
    assert tax.update_norm > 0
    assert tax.shared_norm <= REL_TOL * tax.update_norm, tax
    assert tax.shared_event_coefficients.abs().max() <= 1e-12


@pytest.mark.parametrize("name", ["grpo", "gspo"])
@pytest.mark.parametrize("seed", [0, 1])
def test_breaking_objectives_residual_equals_event_coefficient_sum(name, seed):
    model = tiny_lm(seed)
    r = rollout_for(model, seed=seed)
    assert len(set(r.lengths.tolist())) > 1  # unequal lengths: M3 acts
    loss_fn = resolve(name)
    tax = learning_tax(model, loss_fn, r)
    oracle, K = _oracle_shared_residual(model, loss_fn, r)
    assert K.abs().max() > 1e-4  # the shared events really do not cancel
    assert tax.shared_tax > 1e-3
    scale = _norm(oracle)
    assert _max_abs_diff(tax.shared_update, oracle) <= REL_TOL * scale
    assert torch.allclose(tax.shared_event_coefficients, K, rtol=0, atol=1e-15)


def test_grpo_shared_coefficient_follows_T3(lm, rollout):
    """On-policy GRPO: K_shared = sum_i A_i / (G L_i) per group (T3)."""
    tax = learning_tax(lm, resolve("grpo"), rollout)
    r = rollout
    adv = (r.rewards - r.group_mean(r.rewards)) / (r.group_std(r.rewards) + 1e-4)
    per_group = torch.zeros(r.n_groups, dtype=torch.float64).index_add(
        0, r.group_index, adv / (r.n * r.lengths.double())
    )
    ev = events(r)
    expected = per_group[ev.group[ev.shared]]
    assert torch.allclose(tax.shared_event_coefficients, expected, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", ["grpo", "dapo"])
def test_update_is_minus_loss_gradient(lm, rollout, name):
    """g_shared + g_weak + g_rest == -grad_theta loss_fn(l(theta)) (chain rule)."""
    loss_fn = resolve(name)
    tax = learning_tax(lm, loss_fn, rollout, weak_token_ids=[3, 4])
    params = dict(lm.named_parameters())
    loss = loss_fn(response_logprobs(lm, rollout), rollout)
    grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
    expected = {n: -g for n, g in zip(params, grads)}
    assert _max_abs_diff(tax.update, expected) <= REL_TOL * _norm(expected)


def test_weak_tokens_enter_the_tax(lm, rollout):
    loss_fn = resolve("dapo")
    plain = learning_tax(lm, loss_fn, rollout)
    weak = learning_tax(lm, loss_fn, rollout, weak_token_ids=[3])
    z = zero_credit_occurrences(rollout, [3])
    assert int(z.weak.sum()) == int((rollout.mask & (rollout.tokens == 3) & ~z.shared).sum()) > 0
    assert not (z.shared & z.weak).any() and torch.equal(z.shared | z.weak | z.rest, rollout.mask)
    assert plain.weak_norm == 0 and weak.weak_norm > 0
    assert weak.tax == pytest.approx(_norm(weak.residual) / _norm(weak.update), rel=1e-12)
    assert abs(weak.update_norm - plain.update_norm) <= 1e-10 * plain.update_norm
    assert 0 < weak.kappa_share < 1


def test_params_restriction_and_logging(lm, rollout):
    tax = learning_tax(lm, resolve("grpo"), rollout, params=["head.weight"])
    assert list(tax.update) == ["head.weight"]
    full = learning_tax(lm, resolve("grpo"), rollout)
    assert torch.allclose(tax.update["head.weight"], full.update["head.weight"], rtol=1e-12, atol=0)
    logged = tax.to_dict()
    assert logged["paramspace/tax"] == tax.tax and all(isinstance(v, float) for v in logged.values())
    assert set(full.by_parameter) == set(full.update)


def test_errors_name_the_field(lm, rollout):
    with pytest.raises(InvalidArgument, match="params='nope'"):
        learning_tax(lm, resolve("grpo"), rollout, params=["nope"])
    no_prompt = rollout.replace(prompt_tokens=None, prompt_mask=None)
    with pytest.raises(InvalidArgument, match="prompt_tokens is None"):
        learning_tax(lm, resolve("grpo"), no_prompt)


def test_hf_models(hf_lm, hf_rollout):
    r = hf_rollout
    zero = learning_tax(hf_lm, resolve("dr_grpo"), r)
    assert zero.n_shared_events > 0 and zero.update_norm > 0
    assert zero.shared_norm <= HF_REL_TOL * zero.update_norm
    loss_fn = resolve("grpo")
    tax = learning_tax(hf_lm, loss_fn, r)
    oracle, K = _oracle_shared_residual(hf_lm, loss_fn, r)
    assert K.abs().max() > 1e-4
    assert _max_abs_diff(tax.shared_update, oracle) <= HF_REL_TOL * _norm(oracle)


def test_off_policy_clipping_residual_matches_event_coefficients():
    """DAPO off-policy (M2): event-consistent ratios outside the clip range break (C);
    the parameter-space residual is still exactly sum_e K_e grad l_e."""
    model = tiny_lm(0)
    r = rollout_for(model, seed=0)
    ev = events(r)
    shift = 0.5 * ((ev.ids.clamp(min=0) % 3) - 1).double()  # one shift per event
    r = r.replace(old_logprobs=torch.where(r.mask, r.logprobs - shift, 0.0).clamp(max=0.0))
    loss_fn = resolve("dapo")
    tax = learning_tax(model, loss_fn, r)
    oracle, K = _oracle_shared_residual(model, loss_fn, r)
    assert K.abs().max() > 1e-4 and tax.shared_tax > 1e-3
    assert _max_abs_diff(tax.shared_update, oracle) <= REL_TOL * _norm(oracle)
    on_policy = learning_tax(model, loss_fn, rollout_for(model, seed=0))
    assert on_policy.shared_norm <= REL_TOL * on_policy.update_norm


def test_float32_model():
    """A float32 model (as trained): kappa stays float64, the backward runs in float32."""
    model = tiny_lm(0).float()
    r = rollout_for(model, seed=0)
    tax = learning_tax(model, resolve("dr_grpo"), r)
    assert all(v.dtype == torch.float32 for v in tax.update.values())
    assert tax.update_norm > 0 and tax.shared_norm <= 1e-5 * tax.update_norm  # float32 round-off
    assert learning_tax(model, resolve("grpo"), r).shared_tax > 1e-3
