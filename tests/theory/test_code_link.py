"""The link between the Coq definitions and the package's objectives can fail (issue 33).

``exchange.theory.link`` compares, for concrete groups, the coefficient of a shared event
that coqc evaluates from the definitions the theorems use with the autograd coefficient
of the catalog objective; ``exchange proofs`` runs it on fixed and seeded groups. Here:
the same comparison over Hypothesis groups of any size 2-8 with ratios at and around
every clip boundary (asymmetric clips, the dual clip), and four planted bugs, each of
which must be caught.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import exchange.objectives._common as common
from exchange.core.rollout import Rollout
from exchange.objectives import restoring
from exchange.theory import link
from exchange.theory.coq import default_proofs_dir

from .conftest import require_coqc

pytestmark = pytest.mark.coq


@pytest.fixture(scope="module")
def built():
    """coqc; the link builds the development with its own coqc calls (exchange.theory.build)."""
    return require_coqc()


def _only(objective: str, label: str = ""):
    return [c for c in link.cases() if c.objective == objective and label in c.label]


@pytest.mark.slow  # ~2-5 s: the fast tier stays under 3 minutes
def test_the_package_computes_what_the_theorems_define(built):
    assert link.link_problems(default_proofs_dir(), built, cache=False) == []


def test_the_ratios_probe_every_boundary_on_both_sides():
    # The float ratio the package computes lands on both sides of each boundary.
    for eps_low, eps_high, c in ((0.2, 0.2, 3.0), (0.125, 0.25, 2.5)):
        for b in (1 - eps_low, 1 + eps_high, c):
            rhos = [link.build_group((1, 0), (1, 2), x)[2] for _, x in link._log_ratios([b])]
            assert min(rhos) < b < max(rhos) and any(abs(r - b) <= 4e-16 * b for r in rhos)


def test_dual_clip_above_c_zeroes_the_shared_event(built):
    # The discrepancy of issue 33: at rho = 4 > c = 3 the package's ppo gives all-zero
    # coefficients. T4_above_negative (PPO without dual clip) would say K < 0; the
    # package's PPO is dual-clipped, and T4_dual_above_c says K = 0 there.
    case = next(c for c in _only("ppo", "rho=0.5") if c.params[0] == ("clip_c", 3.0))
    above = link.LinkCase("ppo rho=4", "ppo", case.params, (1, 1, 0), (2, 3, 4), math.log(4),
                          case.coq, "free")
    assert link.python_kappa(above) == [0.0, 0.0, 0.0]
    assert link.link_problems(default_proofs_dir(), built, [above]) == []
    # PPO-clip without the dual clip (the Coq clip_coef) is negative there.
    plain = link.LinkCase("ppo-clip rho=4", "ppo", case.params, (1, 1, 0), (2, 3, 4),
                          math.log(4), "clip_coef {el} {eh} {rho} (adv {G} 1 {r} i)", "free")
    (values,) = link.coq_eval(default_proofs_dir(), built, [link._term(plain)])
    assert sum(values) < 0
    between = link.LinkCase("ppo rho=2", "ppo", case.params, (1, 1, 0), (2, 3, 4), math.log(2),
                            case.coq, "free")
    assert sum(link.python_kappa(between)) < 0


rewards = st.lists(st.sampled_from([0, 1, 0.5, 2]), min_size=2, max_size=8).filter(
    lambda r: len(set(r)) > 1)


@st.composite
def group_lists(draw):
    out = []
    for _ in range(3):
        r = draw(rewards)
        lengths = draw(st.lists(st.integers(1, 12), min_size=len(r), max_size=len(r)))
        out.append((tuple(r), tuple(lengths)))
    return out


# ~2 s an example (one coqc call for ~130 comparisons): the slow tier.
@pytest.mark.slow
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group_lists())
def test_any_group_size_and_every_clip_boundary(built, groups):
    assert link.link_problems(default_proofs_dir(), built, link.cases(groups)) == []


# --- planted bugs: each must be caught --------------------------------------------------

def _fails(built, case_list) -> list[str]:
    return link.link_problems(default_proofs_dir(), built, case_list)


def test_min_replace_taking_the_maximum_is_caught(built, monkeypatch):
    monkeypatch.setattr(Rollout, "group_min", Rollout.group_max)
    problems = _fails(built, _only("grpo+min_replace"))
    assert problems and all("T5 Min-Replace" in p for p in problems)


def test_adv_orthogonal_scaled_projection_is_caught(built, monkeypatch):
    real = restoring.TRANSFORMS["adv_orthogonal"]

    def scaled(f):
        # w' = w - 1.1 (A.w / A.A) A = 1.1 (w - (A.w / A.A) A) - 0.1 w
        g = real(f)

        def norm(logprobs, rollout, p):
            return 1.1 * g.norm(logprobs, rollout, p) - 0.1 * f.response_weight(
                logprobs, rollout, p).detach()

        return g.replace(norm=norm)

    monkeypatch.setitem(restoring.TRANSFORMS, "adv_orthogonal", scaled)
    problems = _fails(built, _only("grpo+adv_orthogonal"))
    assert problems and all("Adv-Orthogonal" in p for p in problems)


def test_dual_clip_removed_from_ppo_is_caught(built, monkeypatch):
    monkeypatch.setattr(common, "ppo_dual_clip",
                        lambda ratio, adv, el, eh, c: common.ppo_clip(ratio, adv, el, eh))
    from exchange.objectives import ppo

    monkeypatch.setattr(ppo, "ppo_dual_clip",
                        lambda ratio, adv, el, eh, c: common.ppo_clip(ratio, adv, el, eh))
    problems = _fails(built, _only("ppo", "group 1 "))
    assert problems and all("rho" in p and ("3.0" in p or "2.5" in p) for p in problems)


def test_widened_ppo_clip_bounds_are_caught(built, monkeypatch):
    real = common.ppo_clip

    def widened(ratio, adv, eps_low, eps_high):
        return real(ratio, adv, eps_low + 0.01, eps_high + 0.01)

    monkeypatch.setattr(common, "ppo_clip", widened)
    problems = _fails(built, _only("ppo", "group 1 "))
    assert problems and all("rho" in p for p in problems)


def test_a_free_scale_still_fails_on_the_wrong_shape(built):
    # Length-normalised GRPO is not a constant-normaliser objective (M3).
    case = _only("dr_grpo")[1]
    wrong = link.LinkCase(case.label, "grpo", (), case.rewards, case.lengths, 0.0, case.coq,
                          "free")
    assert _fails(built, [wrong])


# --- M6, Adv-Orthogonal's unequal weights, T2 over real rewards --------------------------

def test_m6_cases_are_in_the_link():
    m6 = _only("grpo", "M6 additive k3")
    assert len(m6) == 2 * len(link.groups()) and all(c.ref_offset is not None for c in m6)


# ~1 s an example (one coqc call): the slow tier.
@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rewards, st.data())
def test_m6_additive_term_survives_zero_sum_advantages(built, r, data):
    # M6_additive_term / M6_does_not_vanish: with zero-sum advantages and one normaliser,
    # the package's coefficients are (A_i + phi) / Ntok with phi = beta (exp(ref - l) - 1),
    # as Coq evaluates them, and they sum to G phi / Ntok, not 0, for any group size.
    lengths = tuple(data.draw(st.lists(st.integers(1, 12), min_size=len(r), max_size=len(r))))
    offset = data.draw(st.sampled_from([0.3, -0.5, 1.0]))
    case = link.LinkCase("M6 any G", "grpo", link.M6_PARAMS, tuple(r), lengths, 0.0,
                         link.M6_TERM, "1/Ntok", offset)
    assert _fails(built, [case]) == []
    kappa, phi = link.python_kappa(case), link._m6_phi(case)
    assert abs(sum(kappa) - len(r) * phi / sum(lengths)) <= 1e-12 * abs(phi)
    assert abs(sum(kappa)) > 1e-3 * abs(phi) / sum(lengths)


def test_m6_dropped_kl_is_caught(built, monkeypatch):
    from exchange.objectives import grpo

    monkeypatch.setattr(grpo, "k3_kl", lambda logprobs, rollout, who: 0.0 * logprobs)
    problems = _fails(built, _only("grpo", "M6 additive k3 ref-l=0.3 group 1 "))
    assert problems and all("M6 additive" in p for p in problems)


def test_m6_kl_scaled_by_the_advantage_is_caught(built, monkeypatch):
    # A KL weighted by each response's advantage would cancel like the policy term: no
    # longer an additive term, and the link sees it.
    from exchange.objectives import grpo

    real = grpo.k3_kl

    def by_advantage(logprobs, rollout, who):
        adv = rollout.rewards - rollout.rewards.mean()
        return real(logprobs, rollout, who) * adv[:, None]

    monkeypatch.setattr(grpo, "k3_kl", by_advantage)
    problems = _fails(built, _only("grpo", "M6 additive k3 ref-l=0.3 group 1 "))
    assert problems and all("M6 additive" in p for p in problems)


def test_adv_orthogonal_weights_stay_unequal_on_cor33(built):
    # T5_adv_orthogonal_unequal's group: r = (1, 1, 0) gives A ~ (1, 1, -2) and lengths
    # (6, 2, 3) give weights 1/L ~ (1, 3, 2). The package's Adv-Orthogonal agrees with
    # Coq's projection there, the event cancels, and the weights kappa_i / A_i differ.
    case = link.LinkCase("T5 Adv-Orthogonal cor33", "grpo+adv_orthogonal", (("scale", "none"),),
                         (1, 1, 0), (6, 2, 3), 0.0,
                         "adv {G} 1 {r} i * orth {G} (adv {G} 1 {r}) (fun j => / {L} j) i", "1/G")
    assert _fails(built, [case]) == []
    kappa = link.python_kappa(case)
    adv = [1 / 3, 1 / 3, -2 / 3]
    weights = [k / a for k, a in zip(kappa, adv)]
    assert abs(sum(kappa)) <= 1e-12 * max(map(abs, kappa))
    assert abs(weights[0] - weights[1]) > 0.1 * max(map(abs, weights))


real_rewards = st.lists(st.floats(-3, 3, allow_nan=False, allow_infinity=False),
                        min_size=2, max_size=8).filter(lambda r: max(r) - min(r) > 1e-3)


@settings(max_examples=25, deadline=None)
@given(real_rewards)
def test_t2_over_real_rewards(r):
    # R_T2_necessity_reals: equal weights (Dr. GRPO, one normaliser) cancel for every
    # non-constant real reward vector, std-scaled or not...
    from exchange import objectives
    from exchange.core.coefficients import token_coefficients

    G = len(r)
    lengths = tuple(range(1, G + 1))
    for name, params in (("dr_grpo", {}), ("grpo", {"loss_agg_mode": "token-mean"})):
        rollout, lp, _ = link.build_group(tuple(r), lengths, 0.0)
        kappa = token_coefficients(objectives.get(name).bind(**params), lp, rollout)[:, 0]
        assert abs(float(kappa.sum())) <= 1e-9 * float(kappa.abs().max())
    # ...and unequal weights (GRPO's 1/L_i) fail on some one-hot reward vector e_j, which
    # the theorem's hypothesis includes.
    sums = []
    for j in range(G):
        rollout, lp, _ = link.build_group(tuple(float(i == j) for i in range(G)), lengths, 0.0)
        kappa = token_coefficients(objectives.get("grpo").bind(), lp, rollout)[:, 0]
        sums.append(abs(float(kappa.sum())))
    assert max(sums) > 1e-3


# --- M4: OPO's length-weighted baseline (verl's estimator) -------------------------------

def _verl_opo(rewards, lengths) -> list[float]:
    import numpy as np
    from verl.trainer.ppo import core_algos

    G, T = len(rewards), max(lengths)
    mask = torch.tensor([[float(t < n) for t in range(T)] for n in lengths], dtype=torch.float64)
    scores = torch.zeros(G, T, dtype=torch.float64)
    for i, n in enumerate(lengths):
        scores[i, n - 1] = rewards[i]
    adv, _ = core_algos.compute_opo_outcome_advantage(scores, mask, np.zeros(G, dtype=object))
    return adv[:, 0].tolist()


def _opo_term(rewards, lengths) -> str:
    G = len(rewards)
    return (f"List.map (fun i => opo_adv {G} {link._qfun(lengths)} {link._qfun(rewards)} i) "
            f"(List.seq 0 {G})")


@pytest.mark.slow  # one coqc call for the whole list (~2 s)
@pytest.mark.usefixtures("verl_ready")
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group_lists())
def test_verl_opo_advantages_are_the_theorems(built, groups):
    # M4_opo_sum / M4_opo_not_zero_sum: verl's OPO advantages are r_i - sum L r / sum L
    # exactly as Coq's opo_adv evaluates them, for any group size; their sum times
    # sum L is -G times the length-reward covariance sum, so non-zero whenever they co-vary.
    coq = link.coq_eval(default_proofs_dir(), built, [_opo_term(r, L) for r, L in groups])
    for (r, L), values in zip(groups, coq):
        py = _verl_opo(r, L)
        assert max(abs(p - float(c)) for p, c in zip(py, values)) <= 1e-12 * max(map(abs, r))
        G, mL, mr = len(r), sum(L) / len(L), sum(r) / len(r)
        cov = sum((li - mL) * (ri - mr) for li, ri in zip(L, r))
        assert abs(sum(py) * sum(L) + G * cov) <= 1e-9 * max(1.0, abs(G * cov))


def _opo_mismatches(estimator, groups, coq) -> list:
    return [(r, L) for (r, L), values in zip(groups, coq)
            if max(abs(p - float(c)) for p, c in zip(estimator(r, L), values)) > 1e-12]


@pytest.mark.slow  # importing verl takes ~4 s
@pytest.mark.usefixtures("verl_ready")
def test_verl_opo_is_not_zero_sum_and_a_mean_baseline_is_caught(built):
    # M4_opo_not_zero_sum's group: lengths (1, 2), rewards (1, 0): advantages (2/3, -1/3).
    groups = [((1, 0), (1, 2)), ((1, 0, 0), (2, 3, 5)), ((3, 1, 0, 2), (4, 1, 2, 6))]
    coq = link.coq_eval(default_proofs_dir(), built, [_opo_term(r, L) for r, L in groups])
    assert sum(coq[0]) == Fraction(1, 3)
    assert _opo_mismatches(_verl_opo, groups, coq) == []
    # The package's verl expectation names M4 for this estimator, as the theorem says.
    from exchange.libraries.verl import loss as verl_loss

    expected = verl_loss.expected("vanilla", "token-mean", {"estimator": "opo"})
    assert all("M4.length_weighted" in e.facets for e in expected.values())

    # Planted bug: an OPO estimator whose baseline is the plain group mean (zero-sum,
    # lengths ignored) disagrees with opo_adv on every group with unequal lengths.
    def mean_baseline(r, L):
        return [ri - sum(r) / len(r) for ri in r]

    assert _opo_mismatches(mean_baseline, groups, coq) == groups


# --- (E): the definition and its product form (E_product_form) ---------------------------

def _two_event_kappa(objective: str, params: dict, rewards, lengths) -> torch.Tensor:
    """kappa [G, 2] at two shared events (tokens 0 and 1, the same in every response,
    with different ratios)."""
    from exchange import objectives
    from exchange.core.coefficients import token_coefficients

    rollout, lp, _ = link.build_group(rewards, lengths, 0.1)
    tokens = rollout.tokens.clone()
    tokens[:, 1] = link.SHARED_TOKEN + 1
    lp = lp.clone()
    lp[:, 1] = rollout.old_logprobs[:, 1] - 0.05
    rollout = dataclasses.replace(rollout, tokens=tokens * rollout.mask)
    return token_coefficients(objectives.get(objective).bind(**params), lp, rollout)[:, :2]


def _ratio_form(kappa, adv, tol=1e-9) -> bool:
    nz = [i for i, a in enumerate(adv) if abs(a) > tol]
    scale = float(kappa.abs().max()) or 1.0
    zeros = all(float(kappa[i].abs().max()) <= tol * scale for i in range(len(adv)) if i not in nz)
    ratios = [kappa[i] / adv[i] for i in nz]
    return zeros and all(float((r - ratios[0]).abs().max()) <= tol * scale * 10 for r in ratios)


def _product_form(kappa, adv, tol=1e-9) -> bool:
    nz = [i for i, a in enumerate(adv) if abs(a) > tol]
    h = kappa[nz[0]] / adv[nz[0]] if nz else torch.zeros(kappa.shape[1], dtype=kappa.dtype)
    scale = float(kappa.abs().max()) or 1.0
    return all(float((kappa[i] - adv[i] * h).abs().max()) <= tol * scale * 10
               for i in range(len(adv)))


@settings(max_examples=15, deadline=None)
@given(rewards, st.data())
def test_exchangeability_and_its_product_form_agree_on_the_package(r, data):
    # E_product_form: the two forms of (E) are equivalent, so the package may test
    # either. On the catalog's coefficients they agree: both hold for Dr. GRPO (one
    # normaliser) and both fail for GRPO's 1/L_i with unequal lengths.
    G = len(r)
    lengths = tuple(data.draw(st.permutations(range(1, G + 3)))[:G])
    lengths = tuple(n + 1 for n in lengths)  # >= 2 tokens: both shared events present
    mean = sum(r) / G
    adv = [ri - mean for ri in r]
    kappa = _two_event_kappa("dr_grpo", {}, tuple(r), lengths)
    assert _ratio_form(kappa, adv) and _product_form(kappa, adv)
    kappa = _two_event_kappa("grpo", {"scale": "none"}, tuple(r), lengths)
    # Distinct lengths, and a non-constant r has two non-zero advantages: unequal 1/L_i.
    assert not _ratio_form(kappa, adv) and not _product_form(kappa, adv)


# --- dense probes (issue 43): group sizes 2-16, ratios anywhere in (0, 2c) ------------
# The tolerance is link.REL_TOL (documented once there); GSPO's expected values are the
# float64 evaluation of Spec.v's gspo_weight (link.gspo_expected).

@st.composite
def dense_groups(draw):
    G = draw(st.integers(2, 16))
    rewards = draw(st.lists(st.sampled_from((0, 0.5, 1, 2)), min_size=G, max_size=G)
                   .filter(lambda r: len(set(r)) > 1))
    lengths = draw(st.lists(st.integers(1, 12), min_size=G, max_size=G))
    return tuple(rewards), tuple(lengths)


def _ppo_dense_cases(group, fractions, params=(("clip_c", 3.0), ("eps_high", 0.2),
                                                ("eps_low", 0.2))):
    p = dict(params)
    out = []
    for f in fractions:  # f in (0, 1): the ratio 2c f
        rho = 2 * p["clip_c"] * f
        out.append(link.LinkCase(f"ppo dense rho={rho!r} r={group[0]} L={group[1]}", "ppo",
                                 params, group[0], group[1], math.log(rho),
                                 "dual_clip_coef {c} {el} {eh} {rho} (adv {G} 1 {r} i)", "free"))
    return out


_FRACTIONS = st.lists(st.floats(1e-3, 1 - 1e-3), min_size=4, max_size=8)


# ~3-6 s an example (one coqc call): the slow tier.
@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dense_groups(), _FRACTIONS)
def test_ppo_agrees_anywhere_in_zero_to_2c(built, group, fractions):
    assert link.link_problems(default_proofs_dir(), built, _ppo_dense_cases(group, fractions)) == []


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(dense_groups(), st.floats(math.log(0.05), math.log(6.0)))
def test_gspo_off_policy_agrees_with_the_r_definition(group, log_rho):
    from exchange import objectives

    case = link.LinkCase("gspo dense", "gspo", tuple(sorted(objectives.get("gspo").defaults.items())),
                         group[0], group[1], log_rho, "", "free")
    assert link.gspo_problems([case]) == []


def test_ppo_dropping_the_push_down_on_1_4_to_1_9_is_caught(built, monkeypatch):
    # The review's planted bug: negative advantages lose their coefficient on 1.4 < rho < 1.9.
    real = common.ppo_dual_clip

    def planted(ratio, adv, eps_low, eps_high, clip_c):
        out = real(ratio, adv, eps_low, eps_high, clip_c)
        band = (adv < 0) & (ratio > 1.4) & (ratio < 1.9)
        return torch.where(band, out.detach(), out)

    from exchange.objectives import ppo

    monkeypatch.setattr(ppo, "ppo_dual_clip", planted)
    cases = [c for c in link.cases(link.groups()[:1]) if c.objective == "ppo" and "grid" in c.label]
    problems = link.link_problems(default_proofs_dir(), built, cases)
    assert problems and any("rho=1.5 (grid)" in p for p in problems)
    assert link.self_test_problems() == []  # the command's own self-test of this bug


def test_gspo_weight_as_arithmetic_mean_is_caught(monkeypatch):
    from exchange.objectives import gspo

    def arithmetic(logprobs, rollout, p):
        m = rollout.fmask.to(logprobs.dtype)
        return (torch.exp(logprobs - rollout.old_logprobs) * m).sum(1) / m.sum(1).clamp(min=1.0)

    monkeypatch.setattr(gspo, "sequence_ratio", arithmetic)
    problems = link.gspo_problems()
    assert problems and all("gspo M1 off-policy" in p for p in problems)


# ~3-6 s an example (one coqc call for the six off-policy families): the slow tier.
@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dense_groups(), st.floats(1e-3, 1 - 1e-3))
def test_every_linked_objective_agrees_off_policy_anywhere(built, group, fraction):
    # Every family the command links off-policy (GRPO with and without std, Dr. GRPO,
    # DAPO, Min-Replace, Adv-Orthogonal), at a ratio drawn from (0, 2c), c = 3.
    log_rho = math.log(6.0 * fraction)
    base = [c for c in link.cases([group]) if "off-policy" in c.label and "rho=0.3" in c.label]
    assert len({c.objective for c in base}) == 5 and len(base) == 6
    cases = [dataclasses.replace(c, log_rho=log_rho, label=c.label + f" (rho={6.0 * fraction!r})")
             for c in base]
    assert link.link_problems(default_proofs_dir(), built, cases) == []
