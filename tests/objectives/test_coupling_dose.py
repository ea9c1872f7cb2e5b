"""The coupling family's dose arms (issue 42, exchange.objectives.coupling with keep = f, and
exchange.lab.dose.dose_arm): a dose keeps f of what the coupling-surgical arm removes, checked
against a plain oracle (explicit loops over the events), f = 0 is the coupling-surgical arm
bit for bit and f = 1 the base loss; a design's dose arms take their family from its surgical
arm (exchange.lab.config)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import torch

from exchange import token_coefficients
from exchange.errors import InvalidArgument
from exchange.lab.config import _stable, parse_experiment
from exchange.lab.dose import COUPLING, dose_arm, dose_family, dosed
from exchange.objectives import get
from exchange.objectives.coupling import coupling_surgical
from tests.objectives.test_coupling_surgical import EQUAL, REWARDS, UNEQUAL, _flat
from tests.objectives.catalog_cases import make_rollout

REPO = Path(__file__).resolve().parents[2]


def _oracle(kappa: torch.Tensor, kbar: torch.Tensor, rollout, keep: float) -> torch.Tensor:
    """kappa - (1 - keep) D_e / n_e at occurrences of shared events, by loops over the
    definition: e = (group, prefix, token), shared when it occurs in every response of its group."""
    n, t_max = rollout.tokens.shape
    occ: dict[tuple, list[tuple[int, int]]] = {}
    for i in range(n):
        for t in range(t_max):
            if rollout.mask[i, t]:
                key = (int(rollout.group[i]), tuple(rollout.tokens[i, : t + 1].tolist()))
                occ.setdefault(key, []).append((i, t))
    out = kappa.clone()
    for (g, _), where in occ.items():
        rows = {i for i, _ in where}
        if rows != set((rollout.group == g).nonzero().flatten().tolist()):
            continue  # not in every response of the group: not shared
        d = sum(float(kappa[i, t] - kbar[i, t]) for i, t in where)  # the coupling's K_e
        for i, t in where:
            out[i, t] = kappa[i, t] - (1.0 - keep) * d / len(where)
    return out


@pytest.mark.parametrize("groups", [EQUAL, UNEQUAL], ids=["equal", "unequal"])
@pytest.mark.parametrize("keep", [0.0, 0.01, 0.1, 0.5])
def test_a_coupling_dose_keeps_f_of_the_coupling_residual(groups, keep):
    lp, r = make_rollout(groups, REWARDS, off_policy=True)
    obj = get("gspo")
    k0 = token_coefficients(obj.bind(), lp, r)
    kbar = token_coefficients(_flat("gspo"), lp, r)
    kf = token_coefficients(coupling_surgical(obj, keep=keep), lp, r)
    scale = float(k0.abs().max())
    expect = _oracle(k0, kbar, r, keep)
    assert torch.allclose(kf, expect, rtol=0, atol=1e-13 * scale)
    moved = float((expect - k0).abs().max())
    assert moved > 1e-3 * scale * (1 - keep)  # the coupling had a residual: the check is not vacuous
    # kappa_f = f kappa + (1 - f) kappa_surgical at every token (shared or not)
    ks = token_coefficients(coupling_surgical(obj), lp, r)
    assert torch.allclose(kf, keep * k0 + (1 - keep) * ks, rtol=0, atol=1e-13 * scale)
    dosed_fn = coupling_surgical(obj, keep=keep)
    assert float(dosed_fn(lp, r)) == pytest.approx(float(obj.bind()(lp, r)), rel=1e-12, abs=1e-15)  # value kept


def test_the_ends_of_the_dose_are_the_surgical_arm_and_the_base_loss():
    lp, r = make_rollout(UNEQUAL, REWARDS, off_policy=True)
    obj = get("gspo")
    k0 = token_coefficients(obj.bind(), lp, r)
    ks = token_coefficients(coupling_surgical(obj), lp, r)
    assert torch.equal(token_coefficients(coupling_surgical(obj, keep=0.0), lp, r), ks)  # same arithmetic
    tiny = token_coefficients(coupling_surgical(obj, keep=1e-12), lp, r)
    scale = float(k0.abs().max())
    assert torch.allclose(tiny, ks, rtol=0, atol=(1e-12 + 1e-13) * scale)  # f -> 0: the coupling-surgical arm
    assert torch.allclose(token_coefficients(coupling_surgical(obj, keep=1.0), lp, r), k0, rtol=0, atol=1e-13 * scale)
    assert float((ks - k0).abs().max()) > 1e-3 * scale
    for bad in (-0.1, 1.5, True, "0.1"):
        with pytest.raises(InvalidArgument, match="keep=.* 0 <= keep <= 1"):
            coupling_surgical(obj, keep=bad)


def test_the_surgical_base_of_the_coupling_arm_is_what_it_removes():
    """The pilot's surgical-path attribution reads ``surgical_base``: for the coupling arm its
    coefficients are kappa - kbar (its shared residual is D_e), not the whole kappa."""
    lp, r = make_rollout(UNEQUAL, REWARDS, off_policy=True)
    obj = get("gspo")
    arm = coupling_surgical(obj, keep=0.1)
    got = token_coefficients(arm.surgical_base, lp, r)
    want = token_coefficients(obj.bind(), lp, r) - token_coefficients(_flat("gspo"), lp, r)
    assert torch.allclose(got, want, rtol=0, atol=1e-13 * float(want.abs().max()))
    assert arm.__name__ == "gspo+coupling_dose0.1" and coupling_surgical(obj).__name__ == "gspo+coupling_surgical"


def test_dose_arm_builds_the_family_of_the_surgical_arm():
    lp, r = make_rollout(UNEQUAL, REWARDS, off_policy=True)
    params = {"eps_low": 0.2, "eps_high": 0.2}
    whole = token_coefficients(dose_arm("gspo", params, 0.1), lp, r)
    assert torch.equal(whole, token_coefficients(dosed(get("gspo").bind(**params), 0.1), lp, r))
    coup = token_coefficients(dose_arm("gspo", params, 0.1, COUPLING), lp, r)
    assert torch.equal(coup, token_coefficients(coupling_surgical(get("gspo"), keep=0.1, **params), lp, r))
    # Dr. GRPO's weights are equal within a group: its coupling dose moves nothing, its whole-residual dose does
    k_dr = token_coefficients(get("dr_grpo").bind(), lp, r)
    assert torch.allclose(token_coefficients(dose_arm("dr_grpo", {}, 0.1, COUPLING), lp, r), k_dr, rtol=0,
                          atol=1e-13 * float(k_dr.abs().max()))
    assert float((token_coefficients(dose_arm("dr_grpo", {}, 0.1), lp, r) - k_dr).abs().max()) > 1e-6
    assert dose_family("gspo", "gspo+surgical") is None and dose_family("gspo", "gspo+coupling_surgical") == COUPLING
    with pytest.raises(InvalidArgument, match="must be 'gspo' \\+ '\\+surgical' or '\\+coupling_surgical'"):
        dose_family("gspo", "grpo+surgical")
    with pytest.raises(InvalidArgument, match="dose_of='other'"):
        dose_arm("gspo", {}, 0.1, "other")
    for bad in (0.0, 1.0, None):
        with pytest.raises(InvalidArgument, match="0 < keep < 1 of the coupling residual"):
            dose_arm("gspo", {}, bad, COUPLING)


def _m1_doc(surgical="gspo+coupling_surgical", **dose):
    data = tomllib.loads((REPO / "experiments" / "configs" / "gspo_equal_length_reuse.toml").read_text())
    data["arms"][1]["objective"] = surgical
    data["arms"].append({"name": "gspo+dose0.1", "objective": "gspo", "role": "dose", "keep": 0.1,
                         "params": {"eps_low": 0.2, "eps_high": 0.2}, **dose})
    return data


def test_a_designs_dose_arms_take_the_family_of_its_surgical_arm():
    lp, r = make_rollout(EQUAL, REWARDS, off_policy=True)
    cfg = parse_experiment(_m1_doc())
    dose = next(a for a in cfg.arms if a.role == "dose")
    assert dose.dose_of == COUPLING
    want = token_coefficients(coupling_surgical(get("gspo"), keep=0.1, eps_low=0.2, eps_high=0.2), lp, r)
    assert torch.equal(token_coefficients(dose.loss_fn(), lp, r), want)
    run = next(run for run in cfg.runs() if run.arm.role == "dose")
    assert run.arm.dose_of == COUPLING and _stable(run.to_dict())["arm"]["dose_of"] == COUPLING
    whole = parse_experiment(_m1_doc("gspo+surgical"))
    wdose = next(a for a in whole.arms if a.role == "dose")
    assert wdose.dose_of is None  # the whole residual's family: recorded runs keep their fingerprint
    assert "dose_of" not in _stable(next(r for r in whole.runs() if r.arm.role == "dose").to_dict())["arm"]
    # GSPO's group-mean objective leaves no shared residual (sum_i A_i = 0), so its two families agree;
    # Dr. GRPO's weights are equal already: its coupling dose is the base loss, its whole-residual dose is not
    fams = {}
    for surgical in ("dr_grpo+coupling_surgical", "dr_grpo+surgical"):
        doc = _m1_doc(surgical)
        for arm in doc["arms"]:
            arm["objective"] = arm["objective"].replace("gspo", "dr_grpo")
            arm.pop("params", None)
        fams[surgical] = token_coefficients(next(a for a in parse_experiment(doc).arms if a.role == "dose").loss_fn(),
                                            lp, r)
    k_dr = token_coefficients(get("dr_grpo").bind(), lp, r)
    assert torch.allclose(fams["dr_grpo+coupling_surgical"], k_dr, rtol=0, atol=1e-13)
    assert float((fams["dr_grpo+surgical"] - k_dr).abs().max()) > 1e-6
    parse_experiment(_m1_doc(dose_of=COUPLING))  # written, and agreeing
    with pytest.raises(InvalidArgument, match="dose_of='coupling_surgical', but the surgical arm .* drop dose_of"):
        parse_experiment(_m1_doc("gspo+surgical", dose_of=COUPLING))
    doc = _m1_doc()
    doc["arms"][0]["dose_of"] = COUPLING
    with pytest.raises(InvalidArgument, match="role='baseline' dose_of='coupling_surgical': dose_of is for"):
        parse_experiment(doc)
