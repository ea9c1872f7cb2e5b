"""The registry, metadata, parameters and error messages of the catalog."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import exchange.objectives as catalog
from exchange.core.vocabulary import MECHANISMS as _VOCABULARY_MECHANISMS
from exchange import token_coefficients
from exchange.errors import InvalidArgument, ObjectiveError
from exchange.objectives import REGIMES, Expected, Objective
from exchange.checker.properties import PROPERTIES

from tests.objectives.catalog_cases import make_rollout

REQUIRED = {
    "grpo", "bnpo", "dr_grpo", "dapo", "gspo", "gspo_token", "cispo", "cispo_verl", "sapo",
    "sapo_verl", "gpg", "rloo", "reinforce_pp", "remax", "clip_cov", "kl_cov", "entropy_8020",
    "hapo", "ppo", "dcpo",
}
MECHANISMS = set(_VOCABULARY_MECHANISMS)  # the ids THEORY.md section 4 defines
DOCS = Path(__file__).resolve().parents[2] / "docs" / "objectives.md"
GROUPS = [[[1, 2, 3, 4], [1, 2, 5], [1, 2, 3, 6, 7, 8], [1, 2, 9, 9, 9]], [[4, 1], [4, 2, 2]]]
REWARDS = [[1.0, 0.0, 1.0, 0.0], [0.0, 1.0]]


def test_catalog_has_the_required_families() -> None:
    assert REQUIRED <= set(catalog.names())
    assert len(catalog.names()) >= 18
    # the first seven keep their names and order
    assert catalog.names()[:7] == ["grpo", "dr_grpo", "dapo", "gspo", "cispo", "rloo", "reinforce_pp"]


@pytest.mark.parametrize("obj", [catalog.get(n) for n in (*catalog.names(), *catalog.VARIANTS)], ids=lambda o: o.name)
def test_metadata_is_complete(obj: Objective) -> None:
    assert obj.summary and obj.source
    assert re.search(r"arXiv:\d{4}\.\d{4,5}|TRL|verl", obj.source), obj.source
    assert set(obj.expected) == set(REGIMES)
    for exp in obj.expected.values():
        assert isinstance(exp, Expected)
        assert exp.breaks <= set(PROPERTIES)
        assert exp.mechanisms <= MECHANISMS
        assert bool(exp.breaks) == bool(exp.mechanisms), "a break needs a mechanism and vice versa"
    module = __import__(obj.loss.func.__module__ if hasattr(obj.loss, "func") else obj.loss.__module__, fromlist=["_"])
    assert module.__doc__ and "arXiv" in (module.__doc__ + obj.source)


@pytest.mark.parametrize("name", sorted(REQUIRED))
@pytest.mark.parametrize("off_policy", [False, True])
def test_every_objective_runs_and_pads_with_zero(name: str, off_policy: bool) -> None:
    lp, r = make_rollout(GROUPS, REWARDS, off_policy=off_policy)
    kappa = token_coefficients(catalog.resolve(name), lp, r)
    assert torch.isfinite(kappa).all()
    assert (kappa[~r.mask] == 0).all()
    assert kappa.abs().max() > 0


def test_params_override_and_reject_unknown_names() -> None:
    fn = catalog.resolve("dapo", eps_high="0.3")
    assert fn.params["eps_high"] == 0.3
    with pytest.raises(InvalidArgument, match=r"no parameter epsilon=0\.3.*eps_high, eps_low"):
        catalog.resolve("dapo", epsilon=0.3)
    with pytest.raises(InvalidArgument, match="objective='nope' is not a built-in"):
        catalog.resolve("nope")


def test_grpo_kl_regularizer_needs_ref_logprobs() -> None:
    lp, r = make_rollout(GROUPS, REWARDS)
    reg = catalog.get("grpo").bind_regularizer(beta=0.04)
    with pytest.raises(ObjectiveError, match="rollout.ref_logprobs=None"):
        token_coefficients(reg, lp, r)
    ref = r.old_logprobs - 0.1
    kappa = token_coefficients(reg, lp, r.replace(ref_logprobs=ref))
    # k3 gradient: -beta * (1 - exp(ref - l)) * weight, reward-independent
    weight = 1.0 / (r.n * r.lengths.double())
    expected = -0.04 * (1 - torch.exp(ref - lp)) * weight[:, None] * r.fmask
    assert torch.allclose(kappa, expected, rtol=1e-12, atol=1e-15)
    # the policy loss itself never reads ref_logprobs
    token_coefficients(catalog.resolve("grpo", beta=0.04), lp, r)


def test_entropy_objectives_need_entropy() -> None:
    lp, r = make_rollout(GROUPS, REWARDS)
    for name in ("entropy_8020", "hapo"):
        with pytest.raises(ObjectiveError, match="rollout.entropy=None"):
            token_coefficients(catalog.resolve(name), lp, r.replace(entropy=None))


def test_remax_reads_baseline_field_then_parameter() -> None:
    lp, r = make_rollout(GROUPS, REWARDS, baseline_rewards=[[0.5] * 4, [0.25] * 2])
    kappa = token_coefficients(catalog.resolve("remax"), lp, r)
    adv = r.rewards - r.baseline_rewards
    assert torch.allclose(kappa, adv[:, None] / r.n * r.fmask)
    no_field = r.replace(baseline_rewards=None)
    kappa_p = token_coefficients(catalog.resolve("remax", baseline=0.5), lp, no_field)
    assert torch.allclose(kappa_p, (r.rewards - 0.5)[:, None] / r.n * r.fmask)


def test_clip_cov_is_reproducible_by_seed() -> None:
    lp, r = make_rollout(GROUPS, REWARDS, off_policy=True)
    a = token_coefficients(catalog.resolve("clip_cov", clip_cov_ratio=0.3, clip_cov_lb=-10.0), lp, r)
    b = token_coefficients(catalog.resolve("clip_cov", clip_cov_ratio=0.3, clip_cov_lb=-10.0), lp, r)
    c = token_coefficients(catalog.resolve("clip_cov", clip_cov_ratio=0.3, clip_cov_lb=-10.0, seed=7), lp, r)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


# --------------------------------------------------------------- transforms
def test_resolve_builds_transformed_objectives() -> None:
    obj = catalog.get("gspo+min_replace")
    assert obj.name == "gspo+min_replace" and obj.transforms == ("min_replace",)
    assert obj.base == "gspo"
    fn = catalog.resolve("gspo+min_replace", eps_high=0.01)
    assert fn.__name__ == "gspo+min_replace" and fn.params["eps_high"] == 0.01


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gspo+min_repalce", "transform='min_repalce' is not a restoring transformation; choose one of: min_replace"),
        ("clip_cov+min_replace", r"does not apply to objective='clip_cov'.*factored form.*support it: grpo"),
        ("reinforce_pp+adv_orthogonal", r"not zero-sum.*support it: grpo, dr_grpo"),
        ("grpo+min_replace+adv_orthogonal", "use one of them"),
        ("grpo+min_replace+group_constant_norm", "put group_constant_norm first"),
        ("grpo+sign_free_clip+sign_free_clip", "repeats"),
    ],
)
def test_bad_transform_specs_raise_precise_errors(spec: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        catalog.resolve(spec)


def test_transforms_work_on_the_required_bases() -> None:
    for base in ("grpo", "gspo", "dapo", "sapo"):
        for t in catalog.TRANSFORMS:
            assert catalog.supports(catalog.get(base), t)
            assert catalog.get(f"{base}+{t}").factors is not None


# --------------------------------------------------------------------- docs
def _fmt(exp: Expected) -> str:
    if not exp.breaks:
        return "holds"
    short = {"zero_sum": "Z", "exchangeable": "E", "shared_cancellation": "C", "null_on_equal_rewards": "N",
             "permutation_invariant": "P", "finite": "F"}
    order = "ZECNPF"
    props = sorted((short[b] for b in exp.breaks), key=order.index)
    return f"{', '.join(props)}: {', '.join(sorted(exp.mechanisms))}"


def test_docs_family_table_matches_metadata() -> None:
    text = DOCS.read_text()
    rows = [f"| `{obj.name}` | {_fmt(obj.expected['on_policy'])} | {_fmt(obj.expected['off_policy'])} |"
            for obj in map(catalog.get, catalog.names())]
    missing = [row for row in rows if row not in text]
    assert not missing, "docs/objectives.md lacks the rows:\n" + "\n".join(missing)


def test_docs_variant_table_matches_metadata() -> None:
    text = DOCS.read_text()
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\| (`[^|]+`) \| ([^|]+) \| ([^|]+) \|$", line)
        if m and "+" in m.group(1):
            first = re.findall(r"`([^`]+)`", m.group(1))
            base = first[0].split("+")[0]
            for spec in first:
                full = spec if spec.startswith(base) else base + spec
                rows[full] = (m.group(2).strip(), m.group(3).strip())
    assert set(catalog.VARIANTS) <= set(rows), set(catalog.VARIANTS) - set(rows)
    for spec in catalog.VARIANTS:
        obj = catalog.get(spec)
        assert rows[spec] == (_fmt(obj.expected["on_policy"]), _fmt(obj.expected["off_policy"])), spec
