"""Instrument checks: each fast measurement against a slow per-occurrence oracle."""

import torch

from exchange.core.coefficients import token_coefficients
from exchange.core.events import events
from exchange.core.metric_keys import SHARED_RESIDUAL
from exchange.lab.instruments import (
    clip_fractions, coefficient_tax, context_kl, shared_coefficients, update_norm_share, zero_credit_gradient,
    zero_credit_mask,
)
from exchange.lab.generation import sample_group_rollout
from exchange.lab.tasks import TASKS, VOCAB_SIZE, token_roles
from exchange.models import TinyLM, TinyLMConfig, response_logprobs
from exchange.objectives import resolve


def _setup(seed=0):
    task = TASKS["arithmetic"]
    model = TinyLM(TinyLMConfig(VOCAB_SIZE, 24, 16, 2, 1, seed=seed))
    gen = torch.Generator().manual_seed(seed)
    ro = sample_group_rollout(model, task, task.sample_prompts(3, gen), 4, 6, 1.0, gen)
    return model, ro


def _rollout_with_shared_prefix_and_varied_lengths():
    """Two groups; every response starts with the template (shared events), lengths differ."""
    from exchange.core.rollout import Rollout

    tokens = torch.tensor([[4, 5, 12, 1, 0], [4, 5, 6, 13, 1], [4, 5, 6, 6, 12], [4, 5, 14, 1, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]).bool()
    return Rollout(tokens=tokens, mask=mask, rewards=torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64),
                   group=torch.tensor([0, 0, 1, 1]), old_logprobs=torch.zeros(4, 5, dtype=torch.float64))


def test_zero_credit_mask_oracle():
    ro = _rollout_with_shared_prefix_and_varied_lengths()
    ev = events(ro)
    zc = zero_credit_mask(ro, ev)
    roles = token_roles(ro.tokens)
    for i in range(ro.n):
        for t in range(ro.tokens.shape[1]):
            if not ro.mask[i, t]:
                assert not zc[i, t]
                continue
            e = int(ev.ids[i, t])
            same_group = (ro.group_index == ro.group_index[i]).nonzero().flatten().tolist()
            occurs_everywhere = all((ev.ids[j] == e).any() for j in same_group)
            assert bool(zc[i, t]) == (int(roles[i, t]) != 2 or occurs_everywhere)


def test_shared_residual_is_zero_for_exchangeable_and_positive_for_grpo():
    """T1/T3 through the instrument: dr_grpo cancels on shared events, GRPO's 1/L_i does not."""
    ro = _rollout_with_shared_prefix_and_varied_lengths()
    ev = events(ro)
    zc = zero_credit_mask(ro, ev)
    lp = ro.old_logprobs.clone()
    tax_dr = coefficient_tax(token_coefficients(resolve("dr_grpo"), lp, ro), ro, ev, zc)
    tax_grpo = coefficient_tax(token_coefficients(resolve("grpo"), lp, ro), ro, ev, zc)
    assert abs(tax_dr[SHARED_RESIDUAL]) < 1e-12
    assert tax_grpo[SHARED_RESIDUAL] > 1e-3
    assert tax_dr["tax/event_share"] < tax_grpo["tax/event_share"]


def test_coefficient_tax_against_a_loop():
    ro = _rollout_with_shared_prefix_and_varied_lengths()
    ev = events(ro)
    zc = zero_credit_mask(ro, ev)
    kappa = token_coefficients(resolve("grpo"), ro.old_logprobs.clone(), ro)
    K: dict[int, float] = {}
    for i in range(ro.n):
        for t in range(int(ro.lengths[i])):
            K[int(ev.ids[i, t])] = K.get(int(ev.ids[i, t]), 0.0) + float(kappa[i, t])
    zc_events = {int(ev.ids[i, t]) for i in range(ro.n) for t in range(ro.tokens.shape[1]) if zc[i, t]}
    ref = sum(abs(K[e]) for e in zc_events) / sum(abs(v) for v in K.values())
    assert abs(coefficient_tax(kappa, ro, ev, zc)["tax/event_share"] - ref) < 1e-12


def _shared_loop(ro, ev, kappa):
    """Per shared event: (K_e, sum |kappa|, token), one occurrence at a time."""
    out: dict[int, list] = {}
    for i in range(ro.n):
        for t in range(int(ro.lengths[i])):
            e = int(ev.ids[i, t])
            if bool(ev.shared[e]):
                entry = out.setdefault(e, [0.0, 0.0, int(ro.tokens[i, t])])
                entry[0] += float(kappa[i, t])
                entry[1] += abs(float(kappa[i, t]))
    return out


def test_shared_residual_and_signed_coefficients_against_a_loop():
    from exchange.lab.tasks import STYLE

    ro = _rollout_with_shared_prefix_and_varied_lengths()
    ro = ro.replace(tokens=torch.where(ro.tokens == 5, STYLE, ro.tokens),  # the style token among the shared events
                    rewards=torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.float64))  # the shorter response is right
    ev = events(ro)
    kappa = token_coefficients(resolve("grpo"), ro.old_logprobs.clone(), ro)
    loop = _shared_loop(ro, ev, kappa)
    assert len(loop) == 4  # two shared tokens in each group
    mass = sum(m for _, m, _ in loop.values())
    residual = coefficient_tax(kappa, ro, ev, zero_credit_mask(ro, ev))[SHARED_RESIDUAL]
    assert abs(residual - sum(abs(k) for k, _, _ in loop.values()) / mass) < 1e-12
    signed = shared_coefficients(kappa, ro, ev)
    assert abs(signed["tax/shared_K_signed"] - sum(k for k, _, _ in loop.values()) / mass) < 1e-12
    style = [(k, m) for k, m, tok in loop.values() if tok == STYLE]
    assert len(style) == 2
    assert abs(signed["tax/style_K_signed"] - sum(k for k, _ in style) / sum(m for _, m in style)) < 1e-12
    assert signed["tax/style_K_signed"] != 0.0  # GRPO's 1/L_i leaves the style token's events uncancelled


def test_update_norm_share_against_separate_backwards():
    model, ro = _setup()
    ro = ro.replace(rewards=torch.tensor([1.0, 0.0, 0.0, 1.0] * (ro.n // 4), dtype=torch.float64))
    ev = events(ro)
    zc = zero_credit_mask(ro, ev)
    params = list(model.parameters())
    loss_fn = resolve("grpo")
    lp = response_logprobs(model, ro).double()
    kappa = token_coefficients(loss_fn, lp.detach(), ro)
    g_zc = zero_credit_gradient(params, lp, kappa, zc)
    loss_fn(lp, ro).backward()
    share = update_norm_share(g_zc, [-p.grad for p in params])
    # Oracle: two independent backward passes over fresh graphs, float64 norms.
    def norm(weights):
        model.zero_grad()
        (weights * response_logprobs(model, ro).double()).sum().backward()
        return sum(float((p.grad.double() ** 2).sum()) for p in params) ** 0.5
    n_zc = norm(torch.where(zc, kappa, torch.zeros_like(kappa)))
    n_dec = norm(torch.where(zc, torch.zeros_like(kappa), kappa))
    assert abs(share - n_zc / (n_zc + n_dec)) < 1e-4  # float32 model gradients
    assert 0.0 < share < 1.0


def test_clip_fractions_are_sign_dependent_for_ppo_clip():
    """Off-policy: raise every ratio above 1+eps; PPO clip zeroes only positive-advantage tokens."""
    _, ro = _setup(1)
    ro = ro.replace(rewards=torch.tensor([1.0, 0.0] * (ro.n // 2), dtype=torch.float64))
    lp = ro.old_logprobs + 0.5  # ratio e^0.5 > 1.28 on every token
    lp = torch.where(ro.mask, lp.clamp(max=0.0), lp)
    lp = torch.where(ro.mask & (lp - ro.old_logprobs < 0.4), ro.old_logprobs, lp)
    kappa = token_coefficients(resolve("dapo"), lp, ro)
    fr = clip_fractions(kappa, ro)
    raised = ro.mask & (lp - ro.old_logprobs > 0.4)
    pos = ro.mask & (ro.rewards > 0.5)[:, None]
    assert abs(fr["clip/frac_pos_adv"] - float((raised & pos).sum()) / float(pos.sum())) < 1e-12
    assert fr["clip/frac_neg_adv"] == 0.0


def test_context_kl_zero_for_identical_and_positive_otherwise():
    a = torch.log_softmax(torch.randn(2, 3, 5, dtype=torch.float64), -1)
    b = torch.log_softmax(torch.randn(2, 3, 5, dtype=torch.float64), -1)
    where = torch.ones(2, 3, dtype=torch.bool)
    assert context_kl(a, a, where) == 0.0
    assert context_kl(a, b, where) > 0
    assert context_kl(a, b, torch.zeros(2, 3, dtype=torch.bool)) is None


def test_prop31_kl_matches_the_measured_step_and_restores_the_model():
    """A small real step: 1/2 d^T F d predicts the measured KL at shared contexts to
    O(|d|), and the model ends exactly where the step left it."""
    import pytest

    pytest.importorskip("exchange.paramspace")
    from exchange.lab.instruments import prop31_kl

    model, ro = _setup(2)
    ro = ro.replace(rewards=torch.tensor([1.0, 0.0, 0.0, 1.0] * (ro.n // 4), dtype=torch.float64),
                    tokens=torch.where(ro.mask, ro.tokens, torch.zeros_like(ro.tokens)))
    ro = ro.replace(tokens=torch.cat([torch.full((ro.n, 1), 4), ro.tokens[:, 1:]], 1))  # shared first token
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    resolve("grpo")(response_logprobs(model, ro).double(), ro).backward()
    opt.step()
    after = {n: p.detach().clone() for n, p in model.named_parameters()}
    out = prop31_kl(model, ro, before)
    assert all(torch.equal(p, after[n]) for n, p in model.named_parameters())
    assert out["kl/prop31_predicted"] > 0 and out["kl/prop31_measured"] > 0
    assert abs(out["kl/prop31_measured"] / out["kl/prop31_predicted"] - 1) < 0.1  # O(step) error


def test_update_share_of_a_round_off_update_is_undefined():
    """When everything but cancelling shared copies is dropped (a gate on the second
    epoch), g is round-off: the share must be None, not the ~1 two round-off norms give."""
    from exchange.lab.instruments import update_share, zero_credit_gradient

    theta = torch.zeros(3, requires_grad=True)
    lp = torch.log_softmax(theta.double(), -1)
    logprobs = torch.stack([lp[0], lp[0], lp[1]]).reshape(1, 3)  # two copies of one event, one other
    kappa = torch.tensor([[0.1 + 0.2, -0.3, 0.0]], dtype=torch.float64)  # copies cancel up to 5.6e-17
    shared = torch.tensor([[True, True, False]])
    g_shared = zero_credit_gradient([theta], logprobs, kappa, shared)
    g_total = zero_credit_gradient([theta], logprobs, kappa, torch.ones_like(shared))
    assert update_share(g_shared, g_total) > 0.99  # the artefact: 0/0 read as "all shared"
    assert update_share(g_shared, g_total, mass=float(kappa.abs().sum())) is None
    # a real update keeps its share
    kappa2 = torch.tensor([[0.3, -0.3, 0.5]], dtype=torch.float64)
    g_total2 = zero_credit_gradient([theta], logprobs, kappa2, torch.ones_like(shared))
    g_shared2 = zero_credit_gradient([theta], logprobs, kappa2, shared)
    assert update_share(g_shared2, g_total2, mass=float(kappa2.abs().sum())) < 1e-6
