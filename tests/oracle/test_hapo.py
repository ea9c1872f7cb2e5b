"""THEORY.md section 6: HAPO's entropy term gives a shared event
K_e = alpha * c_e * (n_pos - n_neg) (clip inactive), in every group and in expectation.

Checked on a reference loss written here from the third-party formula (token-mean
aggregation, so the base part cancels exactly and only the entropy term remains), and
on the catalog's ``hapo``.
"""

import numpy as np
import torch

from exchange import token_coefficients
from exchange.core.events import event_coefficients, events
from exchange.objectives._common import group_advantages
from exchange.oracle import TabularPolicy, exact_credit, expected_coefficients, get_env, hapo_shared_coefficient
from exchange.oracle.groups import enumerate_groups, group_rollouts

ALPHA, PHI = 0.2, 2.0


def hapo_reference_loss(logprobs, rollout):
    """A_ca = A + alpha sign(A) sg(clip(z_H, -|A|/phi, |A|/phi)); z_H standardised over the
    group's real tokens; on-policy REINFORCE surrogate with token-mean aggregation."""
    adv = group_advantages(rollout)[:, None].expand_as(logprobs)  # [N, T]
    m = rollout.mask
    h = rollout.entropy
    z = (h - h[m].mean()) / (h[m].std() + 1e-8)
    bound = adv.abs() / PHI
    a_ca = adv + ALPHA * torch.sign(adv) * torch.clamp(z, -bound, bound).detach()
    ratio = torch.exp(logprobs - rollout.old_logprobs)
    return -(ratio * a_ca * rollout.fmask).sum() / rollout.fmask.sum()


def _shared_terms(rollout):
    adv = group_advantages(rollout).numpy()
    h = rollout.entropy
    m = rollout.mask
    z = ((h - h[m].mean()) / (h[m].std() + 1e-8)).numpy()
    return adv, z, float(rollout.fmask.sum())


def test_hapo_shared_event_formula_holds_in_every_group():
    env = get_env("template")
    t = exact_credit(env, TabularPolicy.random(env, seed=0))
    resp = t.responses[0]
    idx, _ = enumerate_groups(resp.prob, 4)
    checked = mixed_unequal = 0
    for r in group_rollouts(resp, idx[::7]):
        ev = events(r)
        k = event_coefficients(token_coefficients(hapo_reference_loss, r.old_logprobs, r), ev)
        adv, z, n_tok = _shared_terms(r)
        for e in ev.shared.nonzero().flatten().tolist():
            pos = int(ev.position[e])
            predicted = hapo_shared_coefficient(adv, z[0, pos], ALPHA, PHI) / n_tok
            assert abs(k[e].item() - predicted) <= 1e-12
            checked += 1
            unclipped = np.all(np.abs(z[0, pos]) <= np.abs(adv) / PHI)
            if unclipped:  # the closed form alpha z (n_pos - n_neg)
                n_pos, n_neg = int((adv > 0).sum()), int((adv < 0).sum())
                assert abs(k[e].item() - ALPHA * z[0, pos] * (n_pos - n_neg) / n_tok) <= 1e-12
                mixed_unequal += n_pos != n_neg and n_pos > 0
    assert checked > 50 and mixed_unequal > 5


def test_hapo_reference_drifts_on_null_events_in_expectation():
    # Parity, G=3: the position-0 tokens are null events (zero credit, occurrence
    # independent of the reward); HAPO's entropy term moves them in expectation.
    env = get_env("parity")
    t = exact_credit(env, TabularPolicy.random(env, seed=0))
    ec = expected_coefficients(hapo_reference_loss, t, 3, method="exact", name="hapo-ref")
    null = t.kind_mask("null")
    assert np.abs(ec.mean[null]).max() > 1e-3 * np.abs(ec.centred).max()


def test_hapo_clip_cancels_the_term_on_forced_template_tokens():
    # Forced tokens (H = 0) have a large negative z: the clip binds for every response
    # and sum_i sign(A_i) (-|A_i| / phi) = -sum_i A_i / phi = 0, so there is no drift.
    env = get_env("template")
    t = exact_credit(env, TabularPolicy.random(env, seed=0))
    ec = expected_coefficients(hapo_reference_loss, t, 3, method="exact", name="hapo-ref")
    shared = t.kind_mask("shared")
    assert np.abs(ec.mean[shared]).max() <= 1e-12 * np.abs(ec.centred).max()


def test_catalog_hapo_drifts_on_null_events_in_the_oracle():
    from exchange.objectives import get

    env = get_env("parity")
    t = exact_credit(env, TabularPolicy.random(env, seed=0))
    ec = expected_coefficients(get("hapo").bind(), t, 3, method="exact", name="hapo")
    null = t.kind_mask("null")
    assert np.abs(ec.mean[null]).max() > 1e-3 * np.abs(ec.centred).max()
