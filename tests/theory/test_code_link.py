"""The link between the Coq definitions and the package's objectives can fail (issue 33).

``exchange.theory.link`` compares, for concrete groups, the coefficient of a shared event
that coqc evaluates from the definitions the theorems use with the autograd coefficient
of the catalog objective; ``exchange proofs`` runs it on fixed and seeded groups. Here:
the same comparison over Hypothesis groups of any size 2-8 with ratios at and around
every clip boundary (asymmetric clips, the dual clip), and four planted bugs, each of
which must be caught.
"""

from __future__ import annotations

import math

import pytest
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
    import subprocess

    coqc = require_coqc()
    subprocess.run(["make", "-C", str(default_proofs_dir())], capture_output=True, check=True)
    return coqc


def _only(objective: str, label: str = ""):
    return [c for c in link.cases() if c.objective == objective and label in c.label]


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
