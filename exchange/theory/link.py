"""The link between the Coq definitions and the package's objectives (issue 33).

For concrete groups, coqc evaluates (``Eval vm_compute``, exact rationals) the
per-response coefficient of a shared event as the theorems define it, and the package
computes the same coefficient by autograd (``kappa[i, 0]`` of the catalog objective, token
0 being the shared event). Where the theorem fixes the scale the comparison is exact up to
float64 round-off (relative ``REL_TOL`` of the group's largest coefficient): GRPO's
sequence mean is ``A_i / (G L_i)``, Min-Replace's weight is the group minimum of
``1 / (G L_i)``, Adv-Orthogonal's is the projection of those weights. Only where the
theorem leaves a positive group constant free (the std with its epsilon, which GRPO's
default and PPO divide by; Dr. GRPO's and DAPO's normalisers; GSPO on-policy) is one
positive factor per group allowed; the per-response shape, the signs and the clipping
pattern must still agree (an all-zero Coq group must be all zero in the package).

The ratio that Coq sees is the float64 ratio the package computes (``exp(l - l_old)``,
converted exactly), and the clip parameters are the float64 values converted exactly,
so a ratio one ulp either side of a clip boundary is judged the same way by both sides.
``cases`` probes every boundary (``1 - eps_low``, ``1 + eps_high``, the dual clip ``c``)
at, just below and just above it, with asymmetric clips.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
import re
import subprocess
import tempfile
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where a coefficient is computed: the pins read this
    import torch  # module's constants, and `exchange proofs --no-link` need not load torch

    from exchange.core.rollout import Rollout

__all__ = [
    "LINK_MODULES",
    "DENSE_SETTINGS",
    "GROUP_SEED",
    "M6_PARAMS",
    "M6_TERM",
    "REL_TOL",
    "LinkCase",
    "cases",
    "compare",
    "coq_eval",
    "groups",
    "gspo_cases",
    "gspo_expected",
    "gspo_problems",
    "self_test_problems",
    "link_problems",
    "python_kappa",
]

# The modules the Coq terms use (a change elsewhere, LengthNorm.v, Real.v or the
# witnesses, cannot change the link's outcome); Uncurry because Sums exports it.
LINK_MODULES = ("Uncurry", "Sums", "Cancellation", "Clipping", "Restoration")

# float64 autograd against exact rationals: the coefficients are a few flops deep, so
# 1e-9 of the group's largest coefficient is far above round-off (~1e-15) and far below
# every planted bug the tests use (>= 1e-3 relative).
REL_TOL = 1e-9
SHARED_TOKEN = 7
# GRPO with a k3 KL to the reference (beta), one token-mean normaliser, no std: M6's case.
M6_PARAMS = (("beta", 0.1), ("loss_agg_mode", "token-mean"), ("scale", "none"))
M6_TERM = "adv {G} 1 {r} i * 1 + {phi}"


@dataclass(frozen=True)
class LinkCase:
    label: str  # names the objective, the group and the ratio in messages
    objective: str
    params: tuple  # ((name, value), ...) bound on the objective
    rewards: tuple
    lengths: tuple
    log_rho: float  # log-ratio of the shared event (token 0) in every response
    coq: str  # Coq term of type Q for response i (free variable i), see _term
    factor: str  # "1/G", "1/Ntok" (exact) or "free" (one positive constant per group)
    # M6: the reference log-prob of the shared event is the current one plus this offset
    # (the same in every response), and the objective's regularizer (GRPO's beta * k3 KL)
    # is added to its loss; None: no reference, no regularizer.
    ref_offset: float | None = None


def _q(x) -> str:
    f = Fraction(x)
    return f"({f.numerator} # {f.denominator})"


def _qfun(values) -> str:
    body = " | ".join(f"{i}%nat => {_q(v)}" for i, v in enumerate(values))
    return f"(fun i : nat => match i with {body} | _ => 0 end)"


def build_group(rewards, lengths, log_rho: float) -> tuple[Rollout, torch.Tensor, float]:
    """One group whose token 0 is the same event in every response: ``(rollout,
    logprobs [G, T], rho)`` with rho the float64 ratio the objectives compute there."""
    import torch

    from exchange.core.rollout import Rollout

    G, T = len(rewards), max(lengths)
    mask = torch.tensor([[t < lengths[i] for t in range(T)] for i in range(G)])
    tokens = torch.tensor([[SHARED_TOKEN if t == 0 else 100 + 10 * i + t for t in range(T)]
                           for i in range(G)])
    old = torch.full((G, T), math.log(0.01), dtype=torch.float64) * mask  # room for rho <= 100
    lp = old.clone()
    lp[:, 0] = old[:, 0] + log_rho
    rollout = Rollout(tokens=tokens * mask, mask=mask,
                      rewards=torch.tensor(rewards, dtype=torch.float64),
                      group=torch.zeros(G, dtype=torch.long), old_logprobs=old,
                      entropy=torch.ones(G, T, dtype=torch.float64))
    rho = float(torch.exp(lp[0, 0] - old[0, 0]))
    return rollout, lp, rho


def _with_reference(rollout: Rollout, logprobs: torch.Tensor, offset: float) -> Rollout:
    """The rollout with ``ref_logprobs``: the current log-probs, the shared event's
    (token 0) shifted by ``offset`` in every response."""
    ref = logprobs.detach().clone()
    ref[:, 0] += offset
    return dataclasses.replace(rollout, ref_logprobs=ref)


def _m6_phi(case: LinkCase) -> float:
    """The per-occurrence additive term of GRPO's ``beta * k3`` KL at the shared event:
    ``-d(beta * k3)/dl = beta * (exp(ref - l) - 1)`` (before the token-mean's 1/Ntok), from
    the float64 ``ref - l`` the package computes."""
    rollout, logprobs, _ = build_group(case.rewards, case.lengths, case.log_rho)
    ref = _with_reference(rollout, logprobs, case.ref_offset).ref_logprobs
    delta = float(ref[0, 0] - logprobs[0, 0])
    return dict(case.params)["beta"] * math.expm1(delta)


def python_kappa(case: LinkCase) -> list[float]:
    """The package's coefficient of the shared event, per response (autograd)."""
    from exchange import objectives
    from exchange.core.coefficients import token_coefficients

    rollout, logprobs, _ = build_group(case.rewards, case.lengths, case.log_rho)
    objective = objectives.get(case.objective)
    loss_fn = objective.bind(**dict(case.params))
    if case.ref_offset is not None:  # M6: the loss with its KL regularizer
        rollout = _with_reference(rollout, logprobs, case.ref_offset)
        policy, reg = loss_fn, objective.bind_regularizer(**dict(case.params))

        def loss_fn(lp, r):
            return policy(lp, r) + reg(lp, r)

    return token_coefficients(loss_fn, logprobs, rollout)[:, 0].tolist()


def _term(case: LinkCase) -> str:
    G = len(case.rewards)
    _, _, rho = build_group(case.rewards, case.lengths, case.log_rho)
    p = dict(case.params)
    expr = case.coq.format(G=G, r=_qfun(case.rewards), L=_qfun(case.lengths), rho=_q(rho),
                           el=_q(p.get("eps_low", 0)), eh=_q(p.get("eps_high", 0)),
                           c=_q(p.get("clip_c", 0)),
                           phi=_q(_m6_phi(case)) if case.ref_offset is not None else "0")
    return f"List.map (fun i => {expr}) (List.seq 0 {G})"


def coq_eval(proof_dir: Path, coqc: str, terms: list[str], flags: list[str] | None = None
             ) -> list[list[Fraction]]:
    """Evaluate each Coq term (a ``list Q``) with vm_compute; parse the ``n # d`` entries.
    ``flags``: the load path of a build (``exchange.theory.build``; made here when None)."""
    if flags is None:
        from exchange.theory.build import build_development

        build = build_development(Path(proof_dir).resolve(), coqc, spec=False)
        if build.error:
            raise RuntimeError(build.error)
        flags = build.flags

    lines = ["From Coq Require Import QArith List.",
             f"From Exchange Require Import {' '.join(LINK_MODULES)}.",
             "Import ListNotations.", "Open Scope Q_scope."]
    # Numerator and denominator as integers: Coq prints some rationals in hexadecimal.
    lines += [f"Eval vm_compute in List.map (fun q => (Qnum q, Zpos (Qden q))) "
              f"(List.map Qred ({t}))." for t in terms]
    with tempfile.TemporaryDirectory() as tmp:
        v = Path(tmp) / "ExchangeEval.v"
        v.write_text("\n".join(lines) + "\n")
        proc = subprocess.run([coqc, *flags, str(v)],
                              capture_output=True, text=True, cwd=tmp, timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"coqc could not evaluate the link terms: {proc.stderr.strip()[-2000:]}")
    out = []
    for block in re.findall(r"=\s*\[(.*?)\]\s*:\s*list \(Z \* Z\)", proc.stdout, re.DOTALL):
        pairs = re.findall(r"\(\s*\(?(-?\d+)\)?%Z,\s*(\d+)%Z\s*\)", block)
        out.append([Fraction(int(n), int(d)) for n, d in pairs])
    if len(out) != len(terms):
        raise RuntimeError(f"coqc printed {len(out)} values for {len(terms)} link terms")
    return out


def compare(case: LinkCase, py: list[float], coq: list[Fraction]) -> str:
    """"" when the package's coefficients match the Coq ones, else why."""
    G = len(case.rewards)
    coq_f = [float(c) for c in coq]
    if len(py) != G or len(coq) != G:
        return f"{case.label}: {len(py)} package and {len(coq)} Coq coefficients for a group of {G}"
    if case.factor == "1/G":
        lam = 1 / G
    elif case.factor == "1/Ntok":
        lam = 1 / sum(case.lengths)
    else:  # one positive group constant, read off the largest Coq coefficient
        k = max(range(G), key=lambda i: abs(coq_f[i]))
        if coq_f[k] == 0:
            lam = 1.0
        else:
            lam = py[k] / coq_f[k]
            if not lam > 0:
                return f"{case.label}: the package's coefficients have the opposite sign " \
                       f"(package {py}, Coq {coq_f})"
    scale = max([abs(lam * c) for c in coq_f] + [abs(p) for p in py] + [1e-300])
    for i, (p, c) in enumerate(zip(py, coq_f)):
        if abs(p - lam * c) > REL_TOL * scale:
            return (f"{case.label}: response {i}: package kappa {p!r}, Coq {lam * c!r} "
                    f"(factor {case.factor}); package {py}, Coq x factor "
                    f"{[lam * x for x in coq_f]}")
    return ""


# The seed of the seeded groups and the dense probes' settings: pinned with the rest of
# the Python side (exchange.theory.pins), so a change of what is probed is a re-pin.
GROUP_SEED = 33
# Ratios over (0, 2c): ``ppo_grid`` evenly spaced points strictly inside (0, 2c) for PPO
# (every interval of width 2c/ppo_grid is probed, not only the bounds); ``off_policy``
# the ratios at which every other linked objective is compared off-policy.
# Both on the first ``groups`` groups only (the fixed ones and one seeded): each Coq
# evaluation of a float64 ratio is an exact rational of ~50-bit terms, and the command
# runs them all; the Hypothesis tests of tests/theory/test_code_link.py go denser.
DENSE_SETTINGS = {"ppo_grid": 12, "off_policy": [0.3, 0.9, 1.6, 3.5], "groups": 4}


def groups(seed: int = GROUP_SEED, n: int = 6) -> list[tuple[tuple, tuple]]:
    """Fixed groups (G = 2, 3, 4, 5) and ``n`` seeded ones of size 2-8: rewards binary
    or graded, lengths all distinct where possible (Min-Replace and Adv-Orthogonal have
    nothing to do on equal weights)."""
    out = [((1, 0), (2, 5)), ((1, 0, 0), (2, 3, 5)), ((1, 1, 0, 0), (4, 1, 2, 6)),
           ((3, 1, 0, 2, 2), (1, 2, 3, 4, 5))]
    rng = random.Random(seed)
    while len(out) < 4 + n:
        G = rng.randint(2, 8)
        rewards = tuple(rng.choice((0, 1)) if rng.random() < 0.5 else rng.choice((0, 0.5, 1, 2))
                        for _ in range(G))
        if len(set(rewards)) < 2:
            continue
        out.append((rewards, tuple(rng.sample(range(1, 12), G))))
    return out


def _log_ratios(boundaries: list[float]) -> list[tuple[str, float]]:
    """Log-ratios inside, far out, and at / one ulp below / one ulp above / 0.1% around
    every boundary."""
    out = [("rho=1", 0.0), ("rho=0.5", math.log(0.5))]
    for b in boundaries:
        x = math.log(b)
        out += [(f"rho~{b}", x), (f"rho<{b} (ulp)", math.nextafter(x, -1.0)),
                (f"rho>{b} (ulp)", math.nextafter(x, 2.0)),
                (f"rho={b}*0.999", math.log(b * 0.999)), (f"rho={b}*1.001", math.log(b * 1.001))]
    return out


def cases(group_list=None) -> list[LinkCase]:
    """Every comparison: the families over every group, PPO over every group and ratio."""
    from exchange import objectives

    seq = "adv {G} 1 {r} i * / {L} i"
    out = []
    ppo_default = tuple(sorted(objectives.get("ppo").defaults.items()))
    asym = (("clip_c", 2.5), ("eps_high", 0.25), ("eps_low", 0.125))
    for gi, (rewards, lengths) in enumerate(group_list or groups()):
        def add(label, objective, params, coq, factor, log_rho=0.0, ref_offset=None,
                gi=gi, rewards=rewards, lengths=lengths):
            out.append(LinkCase(f"{objective} {label} group {gi} r={rewards} L={lengths}",
                                objective, params, rewards, lengths, log_rho, coq, factor,
                                ref_offset))

        add("T3 seq-mean", "grpo", (("scale", "none"),), seq, "1/G")
        add("T3 seq-mean (std)", "grpo", (), seq, "free")
        add("M1 on-policy", "gspo", (), seq, "free")
        for name in ("dr_grpo", "dapo"):
            add("T5 constant normaliser", name, (), "adv {G} 1 {r} i", "free")
        add("T5 Min-Replace", "grpo+min_replace", (("scale", "none"),),
            "adv {G} 1 {r} i * min_replace {G} (fun j => / {L} j) i", "1/G")
        add("T5 Adv-Orthogonal", "grpo+adv_orthogonal", (("scale", "none"),),
            "adv {G} 1 {r} i * orth {G} (adv {G} 1 {r}) (fun j => / {L} j) i", "1/G")
        # M6 (M6_additive_term's summand A_i * w0 + phi, w0 = 1): GRPO with its k3 KL,
        # one normaliser (token-mean), on policy: every occurrence of the shared event
        # gets A_i + phi, phi the KL's additive term (the same in every response), times
        # 1/Ntok; summed, G * phi.
        for offset in (0.3, -0.5):
            add(f"M6 additive k3 ref-l={offset}", "grpo", M6_PARAMS,
                M6_TERM, "1/Ntok", ref_offset=offset)
        # Off-policy (the shared event at ratio rho in every response): PPO-clip's
        # coefficient (T4) times the family's weight, with each objective's own clip.
        dense = gi < DENSE_SETTINGS["groups"]
        for rho in DENSE_SETTINGS["off_policy"] if dense else ():
            lr = math.log(rho)
            clip = "clip_coef {el} {eh} {rho} (adv {G} 1 {r} i)"
            for family, name, params, weight, factor in (
                    ("T3 seq-mean", "grpo", (("scale", "none"),), " * / {L} i", "1/G"),
                    ("T3 seq-mean (std)", "grpo", (), " * / {L} i", "free"),
                    ("T5 constant normaliser", "dr_grpo", (), "", "free"),
                    ("T5 constant normaliser", "dapo", (), "", "free"),
                    ("T5 Min-Replace", "grpo+min_replace", (("scale", "none"),),
                     " * min_replace {G} (fun j => / {L} j) i", "1/G"),
                    ("T5 Adv-Orthogonal", "grpo+adv_orthogonal", (("scale", "none"),),
                     " * orth {G} (adv {G} 1 {r}) (fun j => / {L} j) i", "1/G")):
                full = tuple(sorted({**{k: v for k, v in objectives.get(name).defaults.items()
                                       if k in ("eps_low", "eps_high")}, **dict(params)}.items()))
                add(f"{family} T4 off-policy rho={rho}", name, full, clip + weight, factor, lr)
        for params in (ppo_default, asym):
            p = dict(params)
            bounds = [1 - p["eps_low"], 1 + p["eps_high"], p["clip_c"]]
            n = DENSE_SETTINGS["ppo_grid"]
            grid = [(f"rho={2 * p['clip_c'] * k / n:.4g} (grid)", math.log(2 * p["clip_c"] * k / n))
                    for k in range(1, n)] if dense else []
            for label, log_rho in _log_ratios(bounds) + grid:
                # ppo divides by the std (with its epsilon): one free positive factor.
                add(f"T4 dual-clip {label} {params}", "ppo", params,
                    "dual_clip_coef {c} {el} {eh} {rho} (adv {G} 1 {r} i)", "free", log_rho)
    return out


# Package files that cannot change a coefficient or a comparison (the checker's own
# bookkeeping, the CLI, the vocabulary's names and links): an edit of them keeps the
# link's cached pass. Everything else under exchange/ is in the key.
_NOT_COEFFICIENTS = frozenset({
    "theory/registry.py", "theory/pins.py", "theory/coq.py", "theory/record.py",
    "theory/development.py", "theory/axioms.py", "theory/build.py", "theory/cache.py",
    "core/vocabulary.py"})


def _cache_key(proof_dir: Path, coqc: str) -> str:
    """A hash of everything the outcome depends on: the linked .v files, every source
    file of the package (the objectives, the core, this module), coqc and REL_TOL."""
    from exchange.theory.coq import vfiles

    h = hashlib.sha256(json.dumps([coqc, REL_TOL, sorted(LINK_MODULES)]).encode())
    for vfile, module in vfiles(proof_dir):
        if module.rsplit(".", 1)[-1] in LINK_MODULES:
            h.update(module.encode() + vfile.read_bytes())
    package = Path(__file__).resolve().parents[1]  # exchange/
    for py in sorted(package.rglob("*.py")):
        rel = py.relative_to(package).as_posix()
        if rel in _NOT_COEFFICIENTS or rel.startswith("cli/"):
            continue
        h.update(rel.encode() + py.read_bytes())
    return h.hexdigest()


def _values_key(proof_dir: Path, coqc: str, terms: list[str]) -> str | None:
    """A hash of everything Coq's values depend on: coqc (version and standard library),
    every .v file of the development and the exact terms. None under ``CI=true`` (CI
    evaluates from clean) or without coqc's identity."""
    from exchange.theory.build import in_ci
    from exchange.theory.cache import coqc_identity
    from exchange.theory.coq import vfiles

    ident = None if in_ci() else coqc_identity(coqc)
    if ident is None:
        return None
    h = hashlib.sha256(json.dumps([ident, list(LINK_MODULES), terms]).encode())
    for vfile, module in sorted(vfiles(proof_dir), key=lambda x: x[1]):
        h.update(module.encode() + b"\0" + vfile.read_bytes())
    return h.hexdigest()


def _cached_values(proof_dir: Path, coqc: str, terms: list[str]) -> list[list[Fraction]] | None:
    """Coq's values for exactly these terms from a previous evaluation of the same
    sources (``<proofs>/.cache/link-values-<key>.json``), or None. Evaluation is a pure
    function of its key, so an edit of the package's Python side (the objectives) is
    compared again in full against the values, and only the ~600 vm_compute
    evaluations (about 30 s of CPU) are not repeated."""
    key = _values_key(proof_dir, coqc, terms)
    if key is None:
        return None
    try:
        data = json.loads((proof_dir / ".cache" / f"link-values-{key}.json").read_text())
        values = [[Fraction(int(n), int(d)) for n, d in row] for row in data]
    except (OSError, ValueError, TypeError):
        return None
    return values if len(values) == len(terms) else None


def _store_values(proof_dir: Path, coqc: str, terms: list[str], values) -> None:
    key = _values_key(proof_dir, coqc, terms)
    if key is None:
        return
    try:
        path = proof_dir / ".cache" / f"link-values-{key}.json"
        path.parent.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with open(fd, "w") as handle:
            json.dump([[[v.numerator, v.denominator] for v in row] for row in values], handle)
        Path(tmp).replace(path)
    except OSError:
        pass  # a read-only tree: evaluated again next time


def link_problems(proof_dir: Path, coqc: str | None = None, case_list=None,
                  cache: bool = True, build=None) -> list[str]:
    """Every comparison that fails (empty: the package computes what the theorems define).

    With ``cache`` and the default cases, a pass is remembered in ``<proofs>/.cache``
    under a hash of the linked .v files and of every source file of the package
    (``_cache_key``); a failure is never cached. Code changed in memory (a monkeypatch)
    is not in the key: pass ``cache=False`` or explicit cases.
    """
    from exchange.theory.coq import find_coqc

    coqc = coqc or find_coqc()
    if coqc is None:
        return ["code link: coqc not found"]
    proof_dir = Path(proof_dir).resolve()
    marker = None
    if cache and case_list is None:
        marker = proof_dir / ".cache" / f"link-{_cache_key(proof_dir, coqc)}.json"
        if marker.is_file():
            return []
    default_cases = case_list is None
    case_list = cases() if case_list is None else case_list
    terms = [_term(c) for c in case_list]
    try:
        values = _cached_values(proof_dir, coqc, terms) if cache else None
        if values is None:
            values = coq_eval(proof_dir, coqc, terms, build.flags if build is not None else None)
            if cache:
                _store_values(proof_dir, coqc, terms, values)
    except RuntimeError as exc:
        return [f"code link: {exc}"]
    problems = []
    for case, coq in zip(case_list, values):
        why = compare(case, python_kappa(case), coq)
        if why:
            problems.append(f"code link: {why}")
    if default_cases:
        problems += gspo_problems()
    if marker is not None and not problems:
        try:
            marker.parent.mkdir(exist_ok=True)
            marker.write_text(json.dumps({"cases": len(case_list), "problems": []}))
        except OSError:
            pass  # a read-only tree: the link is only checked again next time
    return problems


# --- GSPO off-policy: the R definition evaluated in float64 -------------------------


def gspo_expected(rewards, lengths, log_rho: float, eps_low: float, eps_high: float,
                  weight=None) -> list[float]:
    """Per response, ``R_clip_coef eps_low eps_high s_i A_i / L_i`` with GSPO's weight
    ``s_i = gspo_weight L_i logrho_i = exp(Rsum L_i logrho_i / INR L_i)`` (Spec.v), in
    float64: the shared event (token 0) has log-ratio ``log_rho``, the others 0, and
    ``A_i = r_i - mean r`` (the std is the free positive factor). ``weight`` replaces
    ``s_i`` (the self-test plants a wrong one)."""
    G = len(rewards)
    mean = math.fsum(rewards) / G
    out = []
    for r, L in zip(rewards, lengths):
        logs = [log_rho] + [0.0] * (L - 1)
        s = math.exp(math.fsum(logs) / L) if weight is None else weight(logs)
        a = r - mean
        clipped = (a > 0 and s > 1 + eps_high) or (a < 0 and s < 1 - eps_low)
        out.append(0.0 if clipped else a * s / L)
    return out


def gspo_cases(group_list=None) -> list[LinkCase]:
    from exchange import objectives

    params = tuple(sorted(objectives.get("gspo").defaults.items()))
    out = []
    for gi, (rewards, lengths) in enumerate((group_list or groups())[:DENSE_SETTINGS["groups"]]):
        for rho in DENSE_SETTINGS["off_policy"]:
            out.append(LinkCase(f"gspo M1 off-policy rho={rho} group {gi} r={rewards} L={lengths}",
                                "gspo", params, rewards, lengths, math.log(rho),
                                "gspo_weight (float64, R definition)", "free"))
    return out


def gspo_problems(case_list=None) -> list[str]:
    """GSPO off-policy against the float64 evaluation of the R definition."""
    problems = []
    for case in gspo_cases() if case_list is None else case_list:
        p = dict(case.params)
        want = gspo_expected(case.rewards, case.lengths, case.log_rho, p["eps_low"], p["eps_high"])
        why = compare(case, python_kappa(case), [Fraction(x) for x in want])
        if why:
            problems.append(f"code link: {why}")
    return problems


# --- the comparator's own planted bugs (were pytest-only; issue 43) -----------------


def self_test_problems() -> list[str]:
    """The comparison must reject two planted bugs the dense probes exist for: a PPO clip
    that drops the push-down of negative advantages on 1.4 < rho < 1.9, and a GSPO
    weight that is the arithmetic mean of the token ratios. Pure Python, no coqc: the
    Coq side of PPO is T4's coefficient ``rho * A_i`` there, exact in Fraction."""
    problems = []
    rewards, lengths = (1, 0, 0), (2, 3, 5)
    mean = Fraction(sum(rewards), len(rewards))
    for rho in (1.5, 1.75):
        case = LinkCase(f"self-test PPO rho={rho}", "ppo", (), rewards, lengths, math.log(rho),
                        "", "free")
        coq = [Fraction(r) - mean for r in rewards]
        coq = [a * Fraction(rho) for a in coq]  # inside (1+eps, c): T4 keeps A_i rho for A_i < 0
        planted = [float(c) if c > 0 else 0.0 for c in coq]
        if not compare(case, planted, coq):
            problems.append(f"code link self-test: a PPO clip dropping negative advantages at "
                            f"rho={rho} passes the comparison")
    for rho in (0.5, 1.6):
        case = LinkCase(f"self-test GSPO rho={rho}", "gspo", (), rewards, lengths,
                        math.log(rho), "", "free")
        want = gspo_expected(rewards, lengths, math.log(rho), 1.0, 1.0)
        planted = gspo_expected(rewards, lengths, math.log(rho), 1.0, 1.0,
                                weight=lambda logs: math.fsum(math.exp(x) for x in logs) / len(logs))
        if not compare(case, planted, [Fraction(x) for x in want]):
            problems.append(f"code link self-test: GSPO's weight as the arithmetic mean of the "
                            f"ratios passes the comparison at rho={rho}")
    return problems
