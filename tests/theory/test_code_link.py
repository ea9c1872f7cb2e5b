"""The Coq definitions compute the coefficients the Python objectives differentiate to.

For concrete rational groups, coqc evaluates (``Eval vm_compute``) the per-response
coefficient of the shared event as the theorems define it (``adv G s r i * w i`` with
the weights of each family, or ``clip_coef`` for PPO-clip), and the test compares it
with the autograd coefficient ``kappa[i, 0]`` of the catalog objective on the same group
(token 0 is the shared event). A positive group constant the theorems leave free (the
std with its epsilon, a token-count normaliser, 1/G) is allowed; the per-response
shape, signs and clipping pattern must agree exactly.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
import tempfile
from fractions import Fraction
from pathlib import Path

import pytest

from exchange.core.coefficients import token_coefficients
from exchange.theory.coq import load_path_flags, default_proofs_dir
import exchange.objectives as objectives

from .conftest import require_coqc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "symbolic"))
from rollouts import one_group  # noqa: E402

pytestmark = pytest.mark.coq

GROUPS = [  # (rewards, lengths)
    ([1, 0, 0], [2, 3, 5]),
    ([1, 1, 0, 0], [4, 1, 2, 6]),
    ([3, 1, 0, 2, 2], [1, 2, 3, 4, 5]),
]


def _q(x) -> str:
    f = Fraction(x).limit_denominator(10**6)
    return f"({f.numerator} # {f.denominator})"


def _qfun(values) -> str:
    body = " | ".join(f"{i}%nat => {_q(v)}" for i, v in enumerate(values))
    return f"(fun i : nat => match i with {body} | _ => 0 end)"


def coq_eval(coqc: str, terms: list[str]) -> list[list[Fraction]]:
    """Evaluate each Coq term (a ``list Q``) with vm_compute; parse ``n # d`` entries."""
    lines = ["From Coq Require Import QArith List.",
             "From Exchange Require Import Sums Cancellation LengthNorm Clipping Restoration.",
             "Import ListNotations.", "Open Scope Q_scope."]
    lines += [f"Eval vm_compute in List.map Qred ({t})." for t in terms]
    with tempfile.TemporaryDirectory() as tmp:
        v = Path(tmp) / "ExchangeEval.v"
        v.write_text("\n".join(lines) + "\n")
        proc = subprocess.run([coqc, *load_path_flags(default_proofs_dir()), str(v)],
                              capture_output=True, text=True, cwd=tmp, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = []
    for block in re.findall(r"=\s*\[(.*?)\]\s*:\s*list Q", proc.stdout, re.S):
        vals = []
        for item in block.split(";"):
            # Coq prints "n # d", or a decimal such as "-0.3" when d is a power of ten.
            item = item.strip().strip("()").replace("%Q", "").strip()
            num, _, den = item.partition("#")
            vals.append(Fraction(num.strip()) / Fraction(den.strip() or 1))
        out.append(vals)
    assert len(out) == len(terms), proc.stdout
    return out


def _per_response(G: int, expr: str) -> str:
    return f"List.map (fun i => {expr}) (List.seq 0 {G})"


def python_kappa(name: str, rewards, lengths, log_rho: float = 0.0, **params):
    G = len(rewards)
    old = [[0.5] * max(lengths) for _ in range(G)]
    lr = [[log_rho] + [0.0] * (max(lengths) - 1) for _ in range(G)]
    rollout, logprobs = one_group([float(r) for r in rewards], lengths, old, lr)
    loss_fn = objectives.get(name).bind(**params)
    return token_coefficients(loss_fn, logprobs, rollout)[:, 0].tolist()


def assert_proportional(py, coq, exact_factor=None):
    """py == lam * coq for one lam > 0 (or the given factor), zeros included."""
    coq = [float(c) for c in coq]
    assert len(py) == len(coq)
    nz = [i for i, c in enumerate(coq) if c != 0]
    assert nz, "degenerate group"
    lam = py[nz[0]] / coq[nz[0]] if exact_factor is None else exact_factor
    assert lam > 0, (py, coq)
    for p, c in zip(py, coq):
        assert math.isclose(p, lam * c, rel_tol=1e-9, abs_tol=1e-12), (py, coq, lam)


def _terms(rewards, lengths):
    G = len(rewards)
    r, L = _qfun(rewards), _qfun(lengths)
    return {
        # GRPO seq-mean-token-mean (T3): kappa_i = A_i / L_i, A = r - mean r (scale none).
        "seq_mean": _per_response(G, f"adv {G} 1 {r} i * / {L} i"),
        # Constant normaliser (T5_constant_normaliser / T1): kappa_i = A_i * const.
        "constant": _per_response(G, f"adv {G} 1 {r} i"),
        # Min-Replace (T5_min_replace_general) on GRPO's 1/L_i weights.
        "min_replace": _per_response(G, f"adv {G} 1 {r} i * min_replace {G} (fun j => / {L} j) i"),
        # Adv-Orthogonal (T5_adv_orthogonal_projection) on GRPO's 1/L_i weights.
        "adv_orthogonal": _per_response(
            G, f"adv {G} 1 {r} i * orth {G} (adv {G} 1 {r}) (fun j => / {L} j) i"),
        # PPO-clip (T4) above and below the trust region, eps = 0.2.
        "clip_above": _per_response(G, f"clip_coef (1#5) (1#5) 2 (adv {G} 1 {r} i)"),
        "clip_below": _per_response(G, f"clip_coef (1#5) (1#5) (1#2) (adv {G} 1 {r} i)"),
        "clip_inside": _per_response(G, f"clip_coef (1#5) (1#5) 1 (adv {G} 1 {r} i)"),
    }


@pytest.fixture(scope="module")
def coq_values():
    coqc = require_coqc()
    subprocess.run(["make", "-C", str(default_proofs_dir())], capture_output=True, check=True)
    result = {}
    for rewards, lengths in GROUPS:
        terms = _terms(rewards, lengths)
        values = coq_eval(coqc, list(terms.values()))
        result[(tuple(rewards), tuple(lengths))] = dict(zip(terms, values))
    return result


@pytest.mark.parametrize("rewards,lengths", GROUPS)
def test_grpo_sequence_mean_is_advantage_over_length(coq_values, rewards, lengths):
    coq = coq_values[(tuple(rewards), tuple(lengths))]["seq_mean"]
    # Exactly A_i / L_i times GRPO's 1/G response mean.
    py = python_kappa("grpo", rewards, lengths, scale="none")
    assert_proportional(py, coq, exact_factor=1 / len(rewards))
    # With the std (a positive group constant) and for GSPO on-policy (s_i = 1).
    assert_proportional(python_kappa("grpo", rewards, lengths), coq)
    assert_proportional(python_kappa("gspo", rewards, lengths), coq)


@pytest.mark.parametrize("name", ["dr_grpo", "dapo"])
@pytest.mark.parametrize("rewards,lengths", GROUPS)
def test_constant_normaliser_families(coq_values, name, rewards, lengths):
    coq = coq_values[(tuple(rewards), tuple(lengths))]["constant"]
    assert_proportional(python_kappa(name, rewards, lengths), coq)


@pytest.mark.parametrize("case,log_rho", [("clip_above", math.log(2)),
                                          ("clip_below", math.log(0.5)),
                                          ("clip_inside", 0.0)])
@pytest.mark.parametrize("rewards,lengths", GROUPS)
def test_ppo_clip_t4_cases(coq_values, case, log_rho, rewards, lengths):
    coq = coq_values[(tuple(rewards), tuple(lengths))][case]
    py = python_kappa("ppo", rewards, lengths, log_rho=log_rho)
    assert_proportional(py, coq)
    if case != "clip_inside":  # the Coq coefficients do clip something here
        assert any(c == 0 for c in coq) and any(c != 0 for c in coq)


@pytest.mark.parametrize("transform", ["min_replace", "adv_orthogonal"])
@pytest.mark.parametrize("rewards,lengths", GROUPS)
def test_restoring_transformations(coq_values, transform, rewards, lengths):
    coq = coq_values[(tuple(rewards), tuple(lengths))][transform]
    assert_proportional(python_kappa(f"grpo+{transform}", rewards, lengths), coq)


def test_the_comparison_can_fail(coq_values):
    # Length-normalised GRPO is not a constant-normaliser objective (M3).
    rewards, lengths = GROUPS[0]
    coq = coq_values[(tuple(rewards), tuple(lengths))]["constant"]
    with pytest.raises(AssertionError):
        assert_proportional(python_kappa("grpo", rewards, lengths), coq)
