"""Compile the Coq development and check every registered theorem (THEORY.md section 3).

``compile_proofs`` runs ``make -C proofs`` (coq_makefile over ``proofs/_CoqProject``),
then one coqc pass over a generated file that runs ``Print Assumptions`` for each
theorem in ``exchange.theory.registry.THEOREMS`` (the axioms it depends on are compared
with the rule of its module, ``allowed_axioms``) and has the kernel check it against the
reviewed record ``proofs/spec/Spec.v``: ``Definition _ : ExchangeSpec.Spec.<name> :=
@<theorem>``, so its statement, and every definition it unfolds to, must be convertible
to the reviewed one (printing and notations play no part). The statuses are cached by a
hash of everything they depend on (``exchange.theory.cache``). A theorem is *checked*
only when the build succeeds, its name exists, it uses no axiom its module does not
allow, it has the type recorded in Spec.v, and its non-vacuity witness (a lemma that its
hypotheses can all hold at once) passes the same checks. The record itself (its hash,
the theorem inventory) and the development as a whole (coqchk, ``_CoqProject``, the
source scan) are checked by ``exchange.theory.record`` and ``exchange.theory.development``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from exchange.errors import ExchangeError, InvalidArgument
from exchange.theory.registry import THEOREMS, Theorem

__all__ = [
    "ALLOWED_AXIOMS",
    "CHECKED",
    "FAILED",
    "COQC_MISSING",
    "ProofError",
    "TheoremStatus",
    "default_proofs_dir",
    "proofs_dir_for_cwd",
    "find_coqc",
    "compile_proofs",
    "print_assumptions",
    "coq_theorem_names",
    "forbidden_commands",
    "strip_comments",
    "allowed_axioms",
    "check_proofs_dir",
    "load_path_flags",
    "vfiles",
    "SPEC_MODULE",
    "applies",
]

CHECKED = "checked"
FAILED = "failed"
COQC_MISSING = "coqc missing"

# The QArith theorems use no axiom at all ("Closed under the global context"). The
# theorems over Coq's standard Reals depend on the axioms that define those real
# numbers, allowed by full name and only from coqc's own library
# (exchange.theory.axioms). Anything else (classic, proof irrelevance, an Axiom of our
# own, an Admitted lemma, a name minted under a Coq root) fails the check.
from exchange.theory.axioms import ALLOWED_AXIOM_REASONS, ALLOWED_AXIOMS, axiom_origins  # noqa: E402
# The rule per module: the theorems over R (and their witnesses) may use the Reals
# axioms above; every other module (the QArith development) no axiom at all.
REAL_MODULES: frozenset[str] = frozenset({"Exchange.Real"})

# The reviewed record: every theorem and witness has the type of the same-named
# statement of this module (proofs/spec/Spec.v, logical root ExchangeSpec).
SPEC_MODULE = "ExchangeSpec.Spec"

CLOSED = "Closed under the global context"
_MARKER = "@@exchange-theorem "
_PIN_MARKER = "@@exchange-pin "


class ProofError(ExchangeError):
    """The proof development cannot be located or run."""


@dataclass(frozen=True)
class TheoremStatus:
    key: str  # registry key (the Coq short name)
    name: str  # qualified Coq name
    status: str  # CHECKED, FAILED or COQC_MISSING
    detail: str = ""  # why it failed, or the assumptions summary
    axioms: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.status == CHECKED


def default_proofs_dir() -> Path:
    """``$EXCHANGE_PROOFS_DIR`` when set, else ``proofs/`` at the root of the tree this
    package was imported from (the package is installed editable)."""
    override = os.environ.get("EXCHANGE_PROOFS_DIR")
    if override:
        return Path(override).resolve()
    return Path(__file__).resolve().parents[2] / "proofs"


def proofs_dir_for_cwd(cwd: Path | str | None = None) -> Path:
    """``proofs/`` of the repository the command runs in (the nearest ancestor of ``cwd``
    holding ``proofs/_CoqProject``), else ``default_proofs_dir()``.

    A console script installed from one clone and run inside another checks the clone
    it is run from.
    """
    if os.environ.get("EXCHANGE_PROOFS_DIR"):
        return default_proofs_dir()
    here = Path(cwd or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "proofs" / "_CoqProject").is_file():
            return folder / "proofs"
    return default_proofs_dir()


def allowed_axioms(thm: Theorem) -> frozenset[str]:
    """The axioms a theorem (and its witness) may use: the Reals ones for a theorem of
    ``REAL_MODULES``, none otherwise."""
    return ALLOWED_AXIOMS if thm.name.rsplit(".", 1)[0] in REAL_MODULES else frozenset()


def find_coqc() -> str | None:
    """Path to ``coqc`` (``$COQC`` wins), or None when Coq is not installed."""
    return shutil.which(os.environ.get("COQC", "coqc"))


def check_proofs_dir(proof_dir: Path) -> Path:
    proof_dir = Path(proof_dir).resolve()
    if not (proof_dir / "_CoqProject").is_file():
        raise InvalidArgument(
            f"proofs_dir={str(proof_dir)!r} has no _CoqProject; pass --proofs-dir pointing "
            "at the repository's proofs/ folder"
        )
    return proof_dir


def load_path_flags(proof_dir: Path) -> list[str]:
    """The ``-Q dir Lib`` / ``-R dir Lib`` flags of ``_CoqProject``, for coqc."""
    flags: list[str] = []
    for line in (proof_dir / "_CoqProject").read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] in ("-Q", "-R"):
            flags += [parts[0], str(proof_dir / parts[1]), parts[2]]
    return flags


def _parse_assumptions(text: str) -> dict[str, tuple[str, ...]]:
    """Split coqc output on our markers: theorem name -> assumptions it depends on.

    Coq prints "Closed under the global context", or one or more headed lists
    ("Axioms:", "Section Variables:", "Constants relying on type-in-type:", ...) whose
    entries start at column 0 as ``name : type`` or ``name`` with the type on indented
    continuation lines. Every entry under any heading counts as an assumption.
    """
    result: dict[str, tuple[str, ...]] = {}
    current: str | None = None
    entries: list[str] = []
    in_list = False
    for line in text.splitlines():
        if line.startswith(_MARKER):
            if current is not None:
                result[current] = tuple(entries)
            current, entries, in_list = line[len(_MARKER):].strip(), [], False
        elif current is None or not line.strip() or line[0].isspace():
            continue  # before the first marker, blank, or a type's continuation line
        elif line.strip() == CLOSED:
            in_list = False
        elif line.rstrip().endswith(":") and " : " not in line:
            in_list = True  # a heading such as "Axioms:"
        elif in_list:
            entries.append(line.split(" : ", 1)[0].strip())
    if current is not None:
        result[current] = tuple(entries)
    return result


def print_assumptions(
    proof_dir: Path, names: list[str], coqc: str | None = None
) -> tuple[dict[str, tuple[str, ...]], str]:
    """Run ``Print Assumptions`` on each qualified name (the development must be built).

    Returns the axioms per name found and coqc's stderr (empty on success). A name
    coqc cannot resolve stops the file; it is dropped and the rest are retried, so one
    renamed theorem fails alone.
    """
    from exchange.theory.build import build_development

    coqc = coqc or find_coqc()
    if coqc is None:
        raise ProofError("coqc not found; install Coq 8.16 (apt-get install -y coq)")
    proof_dir = check_proofs_dir(proof_dir)
    build = build_development(proof_dir, coqc, spec=False)
    if build.error:
        raise ProofError(build.error)
    run = _run_coq(proof_dir, list(dict.fromkeys(names)), coqc, pins=False,
                   expect_closed=lambda name: False, flags=build.flags)
    return run.found, run.errors


# --- one coqc pass: Print Assumptions and the pins in a single generated file --------
#
# ``Print Assumptions`` is what costs: each call walks the whole closure of its theorem
# (QArith, lra's certificates, the Reals construction), 0.3-0.5 s a theorem, and
# nothing is shared between calls. Over a tuple of theorems it walks the union once,
# and ``Closed under the global context`` for the tuple means closed for every member
# (the assumptions of a tuple are the union of its members' and of pair/prod, which
# have none). So the theorems expected to be closed are asked about together; any
# other answer (or an error) sends the members back, in ``_SPLIT`` parts, in the next
# pass. The theorems over R (and their witnesses) are asked about together too, over a
# second tuple: when every axiom it prints is an allow-listed one, each member's axioms (a
# subset of the tuple's) are allow-listed, and the tuple's list is recorded for each
# member (an upper bound of its own: the verdict is the same, the list may name an
# allowed axiom the member does not use); any other answer is split down to single
# theorems, which get their exact lists. The guess only decides how much one pass
# does, never a status.

_GROUP_MARKER = "@@exchange-group "
_GUARD_MARKER = "@@exchange-guard "
_PREDICT_MARKER = "@@exchange-predict "
_PREDICTED_OK = "@@exchange-predicted-ok"


@dataclass
class _Unit:
    kind: str  # "group", "guard", "theorem", "pin", "predict"
    label: str
    members: tuple[str, ...] = ()
    # For a group: None when every member is expected closed, else the axioms (full
    # names) every member may use; the group's answer is accepted when all it prints
    # is among them.
    allowed: frozenset[str] | None = None
    # For a pin the elaborator predicted to fail: its message. The pin is then asked as
    # ``Fail Definition``: the command's failure is the verdict (and the file goes on);
    # if it does not fail, coqc stops there and the pin is asked again plainly.
    failing: str | None = None


def _printed_allowed(printed: str, allowed: frozenset[str]) -> bool:
    """Whether a name Print Assumptions printed (``ClassicalDedekindReals.sig_forall_dec``,
    qualified from the last loaded root) is one of ``allowed`` (full names). Only
    decides whether a group is split; the verdict resolves every name's origin."""
    return printed in allowed or any(a.endswith("." + printed) for a in allowed)


@dataclass
class _CoqRun:
    found: dict[str, tuple[str, ...]]  # name -> assumptions, for every name coqc resolved
    errors: str  # one "name: stderr" line per name coqc could not resolve (or Require)
    pinned: dict[str, str]  # name -> "" (has the recorded type) or the kernel's error
    clean: bool  # every coqc run ended normally (0 or a located error): the result can be cached
    passes: int
    bodies: dict[str, str] = field(default_factory=dict)  # witness -> its printed proof term


def _marker(text: str) -> str:
    return f'Goal True. idtac "{text}". Abort.'


def _pin_const(label: str) -> str:
    return "exchange_pin_" + label.replace(".", "_")


def _script(units: list[_Unit], printed: frozenset[str] = frozenset(),
            spec_module: str = SPEC_MODULE) -> str:
    """The .v file for one pass: ``Require`` (no Import, so axioms print with their
    library's qualified name), the Print Assumptions units, then the pin units, each
    one definition the kernel type-checks against the reviewed record (``spec_module``:
    the record compiled from its hashed bytes under a fresh name, ``exchange.theory.build``)."""
    pa_names = [n for u in units for n in u.members]
    modules = {n.rsplit(".", 1)[0] for n in pa_names}
    if any(u.kind == "pin" for u in units):
        modules.add(spec_module)
    lines = [f"Require {m}." for m in sorted(modules)]
    if any(u.kind == "predict" for u in units):
        lines.append("Require Ltac2.Ltac2.")  # not imported: Ltac1 stays the proof mode
    for unit in units:
        if unit.kind == "predict":
            # Only a guess (which pins to ask with ``Fail``): the elaborator's answer to
            # the pin's cast, its error message printed; the kernel's verdict is the pin.
            short = unit.label.rsplit(".", 1)[-1]
            say = "Ltac2.Message.print (Ltac2.Message.of_string \"{}\")"
            lines.append(
                f"Ltac2 Eval {say.format(_PREDICT_MARKER + unit.label)}; match Ltac2.Control.case "
                f"(fun () => constr:((@{unit.label} : {spec_module}.{short}))) with "
                f"Ltac2.Init.Val _ => {say.format(_PREDICTED_OK)} | Ltac2.Init.Err e => "
                "Ltac2.Message.print (Ltac2.Message.of_exn e) end.")
        elif unit.kind == "pin" and unit.failing is not None:
            short = unit.label.rsplit(".", 1)[-1]
            lines += [_marker(f"{_PIN_MARKER}{unit.label}"),
                      f"Fail Definition {_pin_const(unit.label)} : {spec_module}.{short} := "
                      f"@{unit.label}."]
        elif unit.kind == "group" or unit.kind == "guard":
            marker = _GROUP_MARKER if unit.kind == "group" else _GUARD_MARKER
            const = f"exchange_{unit.kind}_{unit.label}"
            # @name: no implicit argument is inserted, so any theorem fits in the tuple.
            lines += [_marker(f"{marker}{unit.label}"),
                      f"Definition {const} := ({', '.join('@' + n for n in unit.members)}).",
                      f"Print Assumptions {const}."]
        elif unit.kind == "theorem":
            # idtac inside a throw-away goal prints a marker before each answer.
            lines += [_marker(f"{_MARKER}{unit.label}"), f"Print Assumptions {unit.label}."]
        else:  # pin: the theorem has the type of its statement in the record
            short = unit.label.rsplit(".", 1)[-1]
            lines += [_marker(f"{_PIN_MARKER}{unit.label}"),
                      f"Definition {_pin_const(unit.label)} : {spec_module}.{short} := "
                      f"@{unit.label}."]
            if unit.label in printed:  # a witness: its proof term, to see what it applies
                lines.append(f"Print {unit.label}.")
    return "\n".join(lines) + "\n"


_MARKERS = {_GROUP_MARKER: "group", _GUARD_MARKER: "guard", _MARKER: "theorem",
            _PIN_MARKER: "pin", _PREDICT_MARKER: "predict"}


def _predicted(lines: list[str]) -> str | None:
    """A predict unit's output -> None (the elaborator accepts the pin) or its error."""
    text = [ln for ln in lines if ln.strip() and not ln.startswith("- : ")]
    if [ln.strip() for ln in text] == [_PREDICTED_OK]:
        return None
    message = " ".join(" ".join(text).split())
    for wrapper in ("Init.Internal (err:(", "Internal (err:("):
        if message.startswith(wrapper) and message.endswith("))"):
            message = message[len(wrapper):-2]
    return message or "the elaborator refused it"



def _split_output(text: str) -> list[tuple[str, str, list[str]]]:
    """coqc's stdout -> [(kind, label, lines)] in the order the markers were printed."""
    blocks: list[tuple[str, str, list[str]]] = []
    for line in text.splitlines():
        for prefix, kind in _MARKERS.items():
            if line.startswith(prefix):
                blocks.append((kind, line[len(prefix):].strip(), []))
                break
        else:
            if blocks:
                blocks[-1][2].append(line)
    return blocks


def _assumptions_of(label: str, lines: list[str]) -> tuple[str, ...]:
    return _parse_assumptions("\n".join([_MARKER + label, *lines])).get(label, ())


def _run_coq(proof_dir: Path, names: list[str], coqc: str, *, pins: bool,
             expect_closed, reused: dict[str, tuple[str, ...]] | None = None,
             printed: frozenset[str] = frozenset(), flags: list[str] | None = None,
             spec_module: str = SPEC_MODULE) -> _CoqRun:
    """Print Assumptions for every name and (``pins``) check it against the reviewed
    record, in one coqc pass when nothing fails.

    ``expect_closed(name)``: True puts a name in the tuple expected closed, a set of
    axioms (full names) in the tuple of names allowed that set; ``reused``
    (name -> assumptions from the cache) are not asked again, except that the ones
    with assumptions are asked about together, once, to confirm that the axioms still
    print under the same names. A unit that fails stops the file; the pass is rerun
    from the unit after it (a name coqc cannot resolve is reported, like before).
    """
    reused = {n: axioms for n, axioms in (reused or {}).items() if n in names}
    found: dict[str, tuple[str, ...]] = {n: () for n, axioms in reused.items() if not axioms}
    todo = [n for n in names if n not in reused]
    expected = {n: expect_closed(n) for n in todo}
    together = [n for n in todo if expected[n] is True]
    units = [_Unit("group", "0", tuple(together))] if together else []
    allow_sets = list(dict.fromkeys(e for e in expected.values() if isinstance(e, frozenset)))
    for index, allowed in enumerate(allow_sets):
        members = tuple(n for n in todo if expected[n] == allowed)
        units.append(_Unit("group", f"a{index}", members, allowed))
        together += members
    guarded = tuple(n for n in names if reused.get(n))
    if guarded:
        units.append(_Unit("guard", "0", guarded))
    units += [_Unit("theorem", n, (n,)) for n in todo if n not in set(together)]
    if pins:
        units += [_Unit("pin", n, (n,)) for n in names]
    errors: list[str] = []
    unresolved: set[str] = set()
    pinned: dict[str, str] = {}
    bodies: dict[str, str] = {}
    # A pin the kernel refuses stops coqc, and the next pass resumes after it: with
    # several refused pins that is a pass (a fresh coqc loading every module) per pin.
    # So once one is refused, the next pass also predicts the rest (``predict``
    # units, the elaborator's answer), and a pass after that asks the ones predicted
    # to fail with ``Fail Definition``: at most three passes for any number of refused
    # pins, one as before when none is. A prediction only picks the command; the
    # verdict is always the pin's own command.
    predicted: dict[str, str | None] = {}
    clean, passes = True, 0
    while units:
        passes += 1
        with tempfile.TemporaryDirectory() as tmp:
            vfile = Path(tmp) / "ExchangeCheck.v"
            vfile.write_text(_script(units, printed, spec_module))
            # The two passes this one replaces had 600 s each.
            flags = load_path_flags(proof_dir) if flags is None else flags
            proc = subprocess.run([coqc, *flags, str(vfile)],
                                  capture_output=True, text=True, cwd=tmp, timeout=1200)
        if proc.returncode not in (0, 1):
            clean = False  # killed or crashed: what it printed holds, the rest is not cached
        blocks = _split_output(proc.stdout)
        failed = None if proc.returncode == 0 or not blocks else blocks.pop()
        if proc.returncode != 0 and failed is None:
            # No marker: a Require of the preamble failed, and nothing was checked.
            errors.append(f"Require: {proc.stderr.strip()}")
            clean = False
            break
        done = {(kind, label): lines for kind, label, lines in blocks}
        retry: list[_Unit] = []
        for index, unit in enumerate(units):
            key = (unit.kind, unit.label)
            if failed is not None and key == failed[:2]:
                # This unit stopped coqc; the ones after it did not run.
                if unit.kind == "predict":  # no guess for it: asked plainly
                    predicted[unit.label] = None
                elif unit.kind == "pin" and unit.failing is not None:
                    # `Fail` stopped: the pin was accepted after all; asked plainly.
                    predicted[unit.label] = None
                    retry.append(_Unit("pin", unit.label, unit.members))
                elif unit.kind == "theorem":  # a name coqc cannot resolve: reported, not retried
                    errors.append(f"{unit.label}: {proc.stderr.strip()}")
                    unresolved.add(unit.label)
                elif unit.kind in ("group", "guard"):  # find out which member: split it
                    retry += _parts(unit)
                else:  # the kernel refused the theorem at its recorded type
                    pinned[unit.label] = proc.stderr.strip() or "coqc failed"
                retry += units[index + 1:]
                break
            lines = done.get(key)
            if unit.kind == "theorem":
                if lines is not None:
                    found[unit.label] = _assumptions_of(unit.label, lines)
            elif unit.kind == "group":
                answer = _assumptions_of(unit.label, lines) if lines is not None else None
                if lines is not None and [x.strip() for x in lines if x.strip()] == [CLOSED]:
                    found.update({n: () for n in unit.members})
                elif (answer and unit.allowed is not None
                      and all(_printed_allowed(a, unit.allowed) for a in answer)):
                    found.update({n: answer for n in unit.members})
                else:
                    retry += _parts(unit)
            elif unit.kind == "guard":
                expected = {a for n in unit.members for a in reused[n]}
                if lines is not None and set(_assumptions_of(unit.label, lines)) == expected:
                    found.update({n: reused[n] for n in unit.members})
                else:
                    retry += [_Unit("theorem", n, (n,)) for n in unit.members]
            elif unit.kind == "predict" and lines is not None:
                predicted[unit.label] = _predicted(lines)
            elif unit.kind == "pin" and lines is not None and unit.failing is not None:
                pinned[unit.label] = unit.failing  # `Fail Definition` failed: refused
            elif unit.kind == "pin" and lines is not None:
                pinned[unit.label] = ""
                bodies[unit.label] = "\n".join(lines)
        # Theorems coqc could not resolve cannot be pinned either.
        units = [u for u in retry if not (u.kind == "pin" and u.label in unresolved)]
        units = _with_predictions(units, predicted, pin_stopped=failed is not None
                                  and failed[0] == "pin")
    return _CoqRun(found, "\n".join(errors), pinned, clean, passes, bodies)


def _with_predictions(units: list[_Unit], predicted: dict[str, str | None],
                      pin_stopped: bool) -> list[_Unit]:
    """The next pass's units: a pin predicted to fail becomes a ``Fail Definition``
    unit; after a refused pin, the pins not yet predicted get a ``predict`` unit before
    them (``_run_coq``)."""
    out = []
    for u in units:
        if u.kind == "pin" and u.failing is None and predicted.get(u.label) is not None:
            u = _Unit("pin", u.label, u.members, failing=predicted[u.label])
        out.append(u)
    todo = [u.label for u in out if u.kind == "pin" and u.failing is None
            and u.label not in predicted]
    if pin_stopped and todo:
        first = next(i for i, u in enumerate(out) if u.kind == "pin")
        out[first:first] = [_Unit("predict", n, (n,)) for n in todo]
    return out


# How many parts a group that is not closed is asked again in. A Print Assumptions
# costs about the same for a tuple of 40 theorems as for one (~0.4 s: most of it is not
# the walk of the members' closure), and each pass a fresh coqc (~1.3 s), so the cost is
# the number of questions plus the number of passes. Measured on classical_axiom_in_q of
# tests/theory/test_mutations.py (74 members, 13 printing the new axiom): halves took 8
# passes and 40 s of CPU, single theorems at once 2 passes and 40 s, quarters 5 passes
# and 33 s. Only the time depends on it: every member still gets its own answer.
_SPLIT = 4


def _parts(unit: _Unit) -> list[_Unit]:
    """A group that is not closed (or stopped coqc), asked again as ``_SPLIT`` parts,
    so one theorem with an axiom among many costs a few passes, not one question per
    member; a guard (answers reused from the cache) and groups of at most ``_SPLIT``
    go one by one."""
    members = unit.members
    if unit.kind == "guard" or len(members) <= _SPLIT:
        return [_Unit("theorem", n, (n,)) for n in members]
    step = -(-len(members) // _SPLIT)
    return [_Unit("group", f"{unit.label}_{i}", members[start:start + step], unit.allowed)
            for i, start in enumerate(range(0, len(members), step))]


def _expect_closed(theorems: dict[str, Theorem]):
    """Names whose module allows no axiom are asked about together (True); the others
    together with the names allowed the same axioms (that set). A guess that only
    decides how much one pass does, never a status."""
    rule: dict[str, object] = {}
    for thm in theorems.values():
        for name in (thm.name, *_witnesses(thm)):
            rule[name] = allowed_axioms(thm) or True
    return lambda name: rule.get(name, True)


def compile_proofs(
    proof_dir: Path | str | None = None,
    theorems: dict[str, Theorem] | None = None,
    pin: bool = True,
    cache: bool = True,
    build=None,
) -> list[TheoremStatus]:
    """Build the development and return one status per registered theorem.

    Without coqc every theorem is ``COQC_MISSING`` (callers decide whether that is a
    failure: it is in CI). The development is built by our own coqc calls into a private
    folder (``exchange.theory.build``; never what ``make`` left in ``proofs/``), from
    clean when ``cache`` is False or under ``CI=true``; a failed build fails every
    theorem with coqc's output. With ``pin`` (the default) every theorem and witness must
    have, as the kernel checks it, the type of its statement in the reviewed record
    ``<proof_dir>/spec/Spec.v`` compiled from its hashed bytes under a fresh logical name
    (``Build.spec_module``); a difference fails the theorem with the kernel's message.
    ``build``: a ``Build`` already made for this folder (the command shares one).

    With ``cache`` (the default) the result is looked up in ``<proof_dir>/.cache/`` by a
    hash of every input that can change it (``exchange.theory.cache``), and stored
    there; a theorem whose module and the modules it requires are unchanged is not
    asked about again. ``cache=False`` neither reads nor writes it.
    """
    from exchange.theory.build import build_development, in_ci

    theorems = THEOREMS if theorems is None else theorems
    proof_dir = check_proofs_dir(Path(proof_dir) if proof_dir else default_proofs_dir())
    coqc = find_coqc()
    if coqc is None:
        why = "coqc not found on PATH; install Coq 8.16 (apt-get install -y coq)"
        return [TheoremStatus(k, t.name, COQC_MISSING, why) for k, t in theorems.items()]
    store = None
    if cache:  # opened before the build: its keys are those of the sources it builds from
        from exchange.theory.cache import ResultCache

        modules = {module: vfile for vfile, module in vfiles(proof_dir)}
        store = ResultCache.open(proof_dir, coqc, modules)
    if build is None:
        build = build_development(proof_dir, coqc, fresh=not cache or in_ci(), spec=pin)
    if build.error:
        return [TheoremStatus(k, t.name, FAILED, build.error) for k, t in theorems.items()]
    if store is not None:
        hit = store.load_statuses(theorems, pin)
        if hit is not None and store.unchanged():
            return hit
    names = _all_names(theorems)
    witnesses = frozenset(w for t in theorems.values() for w in _witnesses(t))
    run = _run_coq(proof_dir, names, coqc, pins=pin, expect_closed=_expect_closed(theorems),
                   reused=store.reusable_assumptions(names) if store is not None else None,
                   printed=witnesses if pin else frozenset(), flags=build.flags,
                   spec_module=build.spec_module or SPEC_MODULE)
    origins = axiom_origins(coqc, build, {a for axioms in run.found.values() for a in axioms},
                            cache=store is not None)
    first = group_first(proof_dir) if pin else frozenset()
    stated = hypothesis_witnessed(proof_dir) if pin else frozenset()
    statuses = [_full_status(k, t, run.found, run.errors, run.pinned if pin else None,
                             run.bodies, origins, first, stated) for k, t in theorems.items()]
    if store is not None and store.unchanged():  # else files changed under the check
        store.save_assumptions(run.found)
        if run.clean:
            store.save_statuses(theorems, pin, statuses)
    return statuses


def _witnesses(thm: Theorem) -> list[str]:
    """Qualified names of the theorem's witnesses (hypotheses; both sides of an iff false)."""
    return [n for n in (getattr(thm, "witness_name", ""), getattr(thm, "false_witness_name", ""))
            if n]


_ANY_DECL = re.compile(r"^\s*(?:Theorem|Lemma|Corollary|Proposition|Fact|Remark|Example|"
                       r"Definition|Fixpoint)\s+([A-Za-z_][\w']*)")


def failed_declaration(proof_dir: Path, output: str) -> str:
    """`` in <file> at <declaration> (line N)`` for coqc's last located error, else ""."""
    located = re.findall(r'File "\./?([^"]+)", line (\d+)', output)
    if not located:
        return ""
    file, line = located[-1][0], int(located[-1][1])
    try:
        lines = (proof_dir / file).read_text().splitlines()[:line]
    except OSError:
        return f" in {file} (line {line})"
    names = [m.group(1) for m in map(_ANY_DECL.match, lines) if m]
    return f" in {file} at {names[-1]} (line {line})" if names else f" in {file} (line {line})"


_failed_declaration = failed_declaration


def _all_names(theorems: dict[str, Theorem]) -> list[str]:
    names = []
    for thm in theorems.values():
        names += [thm.name, *_witnesses(thm)]
    return list(dict.fromkeys(names))


def _full_status(key, thm, found, errors, pinned, bodies=None, origins=None,
                 group_first=None, stated=frozenset()) -> TheoremStatus:
    """``found``: printed axiom names per name; ``origins`` (``axiom_origins``) maps each
    printed name to its full name and file (None: the names are full already).
    ``stated``: the theorems the record states as ``forall x, H_T x -> C_T x`` with
    ``W_T := H_T a`` (``hypothesis_witnessed``): their ``W_T`` proves the hypotheses, so
    how it is proved does not matter; every other witness must apply its theorem."""
    allowed = allowed_axioms(thm)
    found = _qualified(found, origins)
    status = _status(key, thm, found, errors, allowed)
    if status.ok and pinned is not None:
        why = _pin_mismatch(thm.name, pinned)
        if why:
            return TheoremStatus(key, thm.name, FAILED, why, status.axioms)
    axioms = status.axioms
    for witness in _witnesses(thm) if status.ok else []:
        wshort = witness.rsplit(".", 1)[-1]
        wthm = Theorem(name=witness, statement="witness")
        wstatus = _status(wshort, wthm, found, errors, allowed)
        why = wstatus.detail if not wstatus.ok else ""
        if not why and pinned is not None:
            why = _pin_mismatch(witness, pinned)
        body = (bodies or {}).get(witness, "")
        by_record = witness == thm.witness_name and thm.short in stated
        if not why and pinned is not None and not by_record and not applies(thm.name, body):
            why = (f"its proof does not apply {thm.name} (a witness must be the theorem "
                   "applied to concrete arguments, so that a change of the theorem's "
                   "hypotheses or conclusion breaks it)")
        if not why and pinned is not None and witness == thm.witness_name and not by_record:
            head, first = head_application(thm.name, body)
            if not head:
                why = (f"its proof term is not {thm.name} applied to arguments (possibly under "
                       "proj1/proj2): a theorem named elsewhere in the term (a dead `pose "
                       "proof`) does not make the witness depend on it")
            elif thm.short in (group_first or ()) and not (first.isdigit() and int(first) >= 2):
                why = (f"it applies {thm.name} at G = {first or '?'}: a witness instance needs a "
                       "group of at least two responses (G >= 2), or it says nothing about "
                       "groups")
        if why:
            return TheoremStatus(key, thm.name, FAILED,
                                 f"non-vacuity witness {witness}: {why}", status.axioms)
        axioms = tuple(dict.fromkeys(axioms + wstatus.axioms))
    return TheoremStatus(key, thm.name, status.status, status.detail, axioms)


_QUALID = re.compile(r"[A-Za-z_][\w']*(?:\.[A-Za-z_][\w']*)*")


def head_application(theorem: str, body: str) -> tuple[bool, str]:
    """Whether a printed proof term (``Print <witness>``: ``W = <term>``) is ``theorem``
    applied to arguments, possibly under ``proj1``/``proj2`` (an iff's direction), and
    the first argument as printed ("" when none)."""
    text = body.split("=", 1)[1] if "=" in body else body
    toks = re.findall(r"[A-Za-z_][\w'.]*|\d+|[()]", text)
    i = 0
    while i < len(toks) and toks[i] in ("(", "proj1", "proj2"):
        i += 1
    if i >= len(toks) or not (theorem == toks[i] or theorem.endswith("." + toks[i])):
        return False, ""
    return True, toks[i + 1] if i + 1 < len(toks) else ""


def group_first(proof_dir: Path) -> frozenset[str]:
    """Registered statements of the record that quantify over a group size first
    (``forall G`` / ``forall (G ...``): their witnesses must apply them at G >= 2."""
    from exchange.theory.record import record_statements

    try:
        statements = record_statements(proof_dir)
    except OSError:
        return frozenset()
    return frozenset(n for n, text in statements.items()
                     if re.match(r"Definition \S+ : Prop := forall \(?G\b", text))


def hypothesis_witnessed(proof_dir: Path) -> frozenset[str]:
    """Registered theorems whose record statement is ``forall x, H_T x -> C_T x``: their
    witness is ``W_T := H_T a`` (``exchange.theory.nonvacuity``, checked with the record)."""
    from exchange.theory.nonvacuity import hypothesis_form
    from exchange.theory.record import record_statements

    try:
        statements = record_statements(proof_dir)
    except OSError:
        return frozenset()
    return frozenset(k for k in statements if hypothesis_form(statements, k))


def applies(theorem: str, body: str) -> bool:
    """Whether a printed proof term (``Print <witness>``) names ``theorem`` (qualified,
    or by a suffix of its qualified name, as Coq prints it)."""
    return any(theorem == tok or theorem.endswith("." + tok) for tok in _QUALID.findall(body))


def _qualified(found: dict, origins) -> dict:
    """Print Assumptions' names replaced by full names; a name whose origin is unknown or
    outside coqc's library becomes ``untrusted: <why>``, which no allow-list holds."""
    if origins is None:
        return found
    out = {}
    for name, axioms in found.items():
        full = []
        for a in axioms:
            o = origins.get(a)
            full.append(o.full if o is not None and not o.problem else
                        f"untrusted: {o.problem if o is not None else a + ' (origin not resolved)'}")
        out[name] = tuple(full)
    return out


def _status(key: str, thm: Theorem, found: dict, errors: str,
            allowed: frozenset[str] = ALLOWED_AXIOMS) -> TheoremStatus:
    if thm.name not in found:
        return TheoremStatus(key, thm.name, FAILED, f"not found by coqc: {errors or 'no output'}")
    axioms = found[thm.name]
    extra = sorted(set(axioms) - allowed)
    if extra:
        rule = ("the Reals axioms only" if allowed else
                "no axiom (a theorem outside " + ", ".join(sorted(REAL_MODULES)) + ")")
        return TheoremStatus(key, thm.name, FAILED, f"axioms its module does not allow ({rule}): "
                             + ", ".join(extra), axioms)
    detail = CLOSED if not axioms else "standard real-number axioms only"
    return TheoremStatus(key, thm.name, CHECKED, detail, axioms)


def _pin_mismatch(name: str, pinned: dict[str, str]) -> str:
    """"" when the kernel accepted ``name`` at its recorded type, else why."""
    short = name.rsplit(".", 1)[-1]
    if name not in pinned:
        return f"{name} was not checked against the reviewed record (coqc stopped before it)"
    error = pinned[name]
    if not error:
        return ""
    if f"{SPEC_MODULE}.{short}" in error and "was not found" in error:
        return (f"{short} has no statement in the reviewed record proofs/spec/Spec.v: add "
                "it there (a reviewed change, docs/proofs.md) or remove the theorem")
    lines = [ln for ln in error.splitlines() if not ln.startswith("File ")]
    return (f"statement of {short} differs from the reviewed record ({SPEC_MODULE}.{short} in "
            "proofs/spec/Spec.v): the kernel does not accept the theorem at the recorded "
            "type:\n" + "\n".join(lines[:40]))


_DECL = re.compile(
    r"^\s*(?:Theorem|Lemma|Corollary|Proposition|Fact|Remark)\s+([A-Za-z_][\w']*)", re.M
)
# Vernacular that would assume rather than prove (Print Assumptions catches most of
# these too; the scan also catches ones no registered theorem happens to use).
_FORBIDDEN = re.compile(
    r"\b(Admitted|admit|Axiom|Axioms|Parameter|Parameters|Hypothesis|Hypotheses|"
    r"Conjecture|Variable|Variables|Unset\s+(?:Guard|Positivity|Universe)\s+Checking|"
    r"bypass_check|Admit\s+Obligations)\b"
)


def strip_comments(text: str) -> str:
    """Coq source with its (nested) comments removed and the contents of its string
    literals blanked, keeping line structure, so that a scan sees only vernacular.

    It follows Coq's lexer: a string is ``"..."`` with ``""`` for a quote, so ``"(*"``
    opens no comment; inside a comment strings are lexed too, so ``(* "*)" *)`` is one
    comment. An unterminated string or comment runs to the end of the text.
    """
    out, depth, i, n = [], 0, 0, len(text)
    while i < n:
        if text[i] == '"':  # a string, in code or inside a comment
            j = i + 1
            while j < n and not (text[j] == '"' and text[j + 1:j + 2] != '"'):
                j += 2 if text[j:j + 2] == '""' else 1
            if depth == 0:
                out.append('"' + "".join(c if c == "\n" else " " for c in text[i + 1:j]) + '"')
            else:
                out.append("".join(c for c in text[i:j + 1] if c == "\n"))
            i = j + 1
        elif text.startswith("(*", i):
            depth, i = depth + 1, i + 2
        elif text.startswith("*)", i) and depth:
            depth, i = depth - 1, i + 2
        else:
            if depth == 0 or text[i] == "\n":
                out.append(text[i])
            i += 1
    return "".join(out)


def vfiles(proof_dir: Path) -> list[tuple[Path, str]]:
    """(file, qualified module) for every .v file under a -Q/-R root of _CoqProject."""
    proof_dir = check_proofs_dir(Path(proof_dir))
    flags = load_path_flags(proof_dir)
    roots = [(Path(flags[i + 1]), flags[i + 2]) for i in range(0, len(flags), 3)]
    result = []
    for root, lib in roots:
        for v in sorted(root.rglob("*.v")):
            rel = v.relative_to(root).with_suffix("")
            result.append((v, ".".join([lib, *rel.parts])))
    return result


def coq_theorem_names(proof_dir: Path | str | None = None) -> dict[str, str]:
    """Qualified name -> file for every Theorem/Lemma/... declared in the development."""
    names: dict[str, str] = {}
    for vfile, module in vfiles(Path(proof_dir) if proof_dir else default_proofs_dir()):
        for match in _DECL.finditer(strip_comments(vfile.read_text())):
            names[f"{module}.{match.group(1)}"] = str(vfile)
    return names


# Assumptions that are no keyword of _FORBIDDEN: a top-level Context (outside a Section it
# is an axiom), a declared module (its fields are parameters), a module type or a
# functor parameter (its fields are assumed wherever the functor is used).
_SCOPED = re.compile(
    r"(?<![\w'.])(Section\s+[A-Za-z_][\w']*|End\s+[A-Za-z_][\w']*|Context\b|"
    r"Declare\s+Module\b|Module\s+Type\b|Module\s+(?:Import\s+|Export\s+)?[A-Za-z_][\w']*"
    r"\s*\()")


def _scan(text: str) -> list[tuple[int, str]]:
    """(line, word) for every forbidden command in comment-stripped Coq text, read as a
    whole (a command split over lines is still one command)."""
    code = strip_comments(text)
    hits = [(m.start(), m.group(1)) for m in _FORBIDDEN.finditer(code)]
    sections: list[str] = []
    for m in _SCOPED.finditer(code):
        word = " ".join(m.group(1).split())
        if word.startswith("Section "):
            sections.append(word.split()[1])
        elif word.startswith("End "):
            if sections and sections[-1] == word.split()[1]:
                sections.pop()
        elif word == "Context":
            if not sections:
                hits.append((m.start(), "Context (top level: an axiom)"))
        elif word.startswith("Module ") and not word.startswith("Module Type"):
            hits.append((m.start(), "Module with parameters (a functor)"))
        else:
            hits.append((m.start(), word))
    return sorted((code.count("\n", 0, pos) + 1, word) for pos, word in hits)


def forbidden_commands(proof_dir: Path | str | None = None) -> list[str]:
    """``file:line: word`` for every Admitted/admit/Axiom/Parameter/Hypothesis/top-level
    Context/Declare Module/Module Type/functor outside comments and strings."""
    hits = []
    for vfile, _ in vfiles(Path(proof_dir) if proof_dir else default_proofs_dir()):
        for lineno, word in _scan(vfile.read_text()):
            hits.append(f"{vfile}:{lineno}: {word}")
    return hits
