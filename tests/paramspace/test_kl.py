"""Prop. 3.1: KL of a step = 1/2 eta^2 g^T F g + O(eta^3), from one JVP (THEORY.md 4c)."""

import pytest
import torch

from exchange.errors import InvalidArgument
from exchange.models import sequence_logits
from exchange.objectives import resolve
from exchange.paramspace import context_mask, kl_prediction, learning_tax

from tests.paramspace.helpers import rollout_for, tiny_lm


def _explicit_fisher_quadratic(model, rollout, direction, sel):
    """g^T F_c g with F_c = J^T (diag p - p p^T) J built from explicit Jacobian rows."""
    params = dict(model.named_parameters())
    out = []
    for i, t in sel.nonzero().tolist():
        logits = sequence_logits(model, rollout)[0][i, t]  # [V]
        p = torch.softmax(logits.detach(), -1)
        rows = []
        for y in range(logits.shape[0]):
            grads = torch.autograd.grad(logits[y], list(params.values()), retain_graph=True, allow_unused=True)
            rows.append(torch.cat([(torch.zeros_like(v) if g is None else g).reshape(-1) for g, v in zip(grads, params.values())]))
        J = torch.stack(rows)  # [V, D]
        g = torch.cat([direction.get(n, torch.zeros_like(v)).reshape(-1) for n, v in params.items()])
        F = J.T @ (torch.diag(p) - torch.outer(p, p)) @ J
        out.append(g @ F @ g)
    return torch.stack(out)


@pytest.mark.parametrize("which", ["residual", "update"])
def test_jvp_fisher_matches_explicit_jacobian(lm, rollout, which):
    tax = learning_tax(lm, resolve("grpo"), rollout)
    direction = getattr(tax, which)
    k = kl_prediction(lm, rollout, direction, etas=[1e-3])
    oracle = _explicit_fisher_quadratic(lm, rollout, direction, k.contexts)
    assert k.fisher.shape == oracle.shape and (oracle > 0).all()
    assert torch.allclose(k.fisher, oracle, rtol=1e-9, atol=0)


@pytest.mark.parametrize("seed", [0, 1])
def test_measured_kl_over_prediction_tends_to_one_linearly(seed):
    """|ratio - 1| halves when eta halves (O(eta) relative error = O(eta^3) KL error)."""
    model = tiny_lm(seed)
    r = rollout_for(model, seed=seed)
    tax = learning_tax(model, resolve("grpo"), r)  # breaking: the shared residual is non-zero
    etas = [2.0**-k / tax.residual_norm for k in range(6, 10)]
    k = kl_prediction(model, r, tax.residual, etas=etas, contexts="shared")
    err = k.rel_error
    assert (k.measured > 0).all() and (k.predicted > 0).all()
    assert err[-1] < 0.05
    halving = err[1:] / err[:-1]
    assert ((halving > 0.35) & (halving < 0.65)).all(), (err, halving)


@pytest.mark.parametrize("which", ["update", "residual"])
def test_kl_prediction_on_hf_model(hf_lm, hf_rollout, which):
    """HF models compute RMSNorm/rotary in float32, so the tiny-eta end is float32 noise:
    check agreement within 3% at moderate steps and a clear miss at a large step."""
    tax = learning_tax(hf_lm, resolve("grpo"), hf_rollout)
    direction = getattr(tax, which)
    norm = tax.update_norm if which == "update" else tax.residual_norm
    etas = [1.0 / norm] + [2.0**-k / norm for k in range(6, 9)]
    k = kl_prediction(hf_lm, hf_rollout, direction, etas=etas, contexts="all")
    err = k.rel_error
    assert err[0] > 0.5
    assert (err[1:] < 0.03).all(), err


def test_exchangeable_residual_moves_nothing():
    """A cancelling objective's shared residual is ~0: its predicted KL is round-off sized."""
    model = tiny_lm(0)
    r = rollout_for(model)
    tax = learning_tax(model, resolve("dr_grpo"), r)
    breaking = learning_tax(model, resolve("grpo"), r)
    eta = 1.0 / tax.update_norm
    zero = kl_prediction(model, r, tax.shared_update, etas=[eta])
    nonzero = kl_prediction(model, r, breaking.shared_update, etas=[1.0 / breaking.update_norm])
    assert float(zero.predicted[0]) < 1e-20 < float(nonzero.predicted[0])


def test_context_mask(rollout):
    shared = context_mask(rollout, "shared")
    assert int(shared.sum()) == 2 * rollout.n_groups  # one context per shared prefix event
    assert torch.equal(context_mask(rollout, "all"), rollout.mask)
    with pytest.raises(InvalidArgument, match="contexts='some'"):
        context_mask(rollout, "some")


def test_errors(lm, rollout):
    with pytest.raises(InvalidArgument, match="direction="):
        kl_prediction(lm, rollout, {})
    with pytest.raises(InvalidArgument, match=r"direction\['head.weight'\] shape"):
        kl_prediction(lm, rollout, {"head.weight": torch.zeros(2)})
    no_shared = rollout_for(lm, response_prefix=(), prompts=[[1], [2]], G=2, seed=3)
    g = {"head.weight": torch.ones_like(lm.head.weight)}
    if context_mask(no_shared, "shared").any():
        pytest.fail("fixture rollout unexpectedly has shared events; pick another seed")
    with pytest.raises(InvalidArgument, match="selects no context"):
        kl_prediction(lm, no_shared, g)
