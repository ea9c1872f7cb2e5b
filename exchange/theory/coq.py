"""Compile the Coq development and check every registered theorem (THEORY.md section 3).

``compile_proofs`` runs ``make -C proofs`` (coq_makefile over ``proofs/_CoqProject``),
then one coqc pass over a generated file that runs ``Print Assumptions`` for each
theorem in ``exchange.theory.registry.THEOREMS`` (the axioms it depends on are compared
with ``ALLOWED_AXIOMS``) and ``Check``s each one (the statement Coq prints is compared
with the one pinned in ``proofs/statements.txt``). The statuses are cached by a hash of
everything they depend on (``exchange.theory.cache``). A theorem is *checked* only when the build succeeds, its name
exists, it uses no axiom outside the allow-list, its compiled statement is the pinned
one, and its non-vacuity witness (a lemma that its hypotheses can all hold at once)
passes the same checks.
"""

from __future__ import annotations

import difflib
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
    "STATEMENTS_FILE",
    "read_statements",
    "print_statements",
    "write_statements",
    "normalise_statement",
]

CHECKED = "checked"
FAILED = "failed"
COQC_MISSING = "coqc missing"

# The QArith theorems use no axiom at all ("Closed under the global context"). The
# theorems over Coq's standard Reals depend on the axioms that define those real
# numbers (Coq 8.16); each is allowed by name, with the reason. Anything else
# (classic, proof irrelevance, an Axiom of our own, an Admitted lemma) fails the check.
ALLOWED_AXIOM_REASONS: dict[str, str] = {
    "ClassicalDedekindReals.sig_forall_dec": (
        "Reals: the limited principle of omniscience on decidable predicates over nat, "
        "which the standard library's classical Dedekind reals (Coq.Reals.Rdefinitions) "
        "are built on"
    ),
    "ClassicalDedekindReals.sig_not_dec": (
        "Reals: decidability of negated propositions, used by the same construction "
        "(total order and Rlt_dec / total_order_T on R)"
    ),
    "FunctionalExtensionality.functional_extensionality_dep": (
        "Reals: the Dedekind-cut construction of R compares cuts as functions"
    ),
}
ALLOWED_AXIOMS: frozenset[str] = frozenset(ALLOWED_AXIOM_REASONS)

# Statements are pinned as Coq prints them (Check, width below) in this file under the
# proofs folder; comparison ignores whitespace only.
STATEMENTS_FILE = "statements.txt"
PRINTING_WIDTH = 100

CLOSED = "Closed under the global context"
_MARKER = "@@exchange-theorem "
_STMT_MARKER = "@@exchange-statement "


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


def find_coqc() -> str | None:
    """Path to ``coqc`` (``$COQC`` wins), or None when Coq is not installed."""
    return shutil.which(os.environ.get("COQC", "coqc"))


def _check_dir(proof_dir: Path) -> Path:
    proof_dir = Path(proof_dir).resolve()
    if not (proof_dir / "_CoqProject").is_file():
        raise InvalidArgument(
            f"proofs_dir={str(proof_dir)!r} has no _CoqProject; pass --proofs-dir pointing "
            "at the repository's proofs/ folder"
        )
    return proof_dir


def _load_path(proof_dir: Path) -> list[str]:
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
    coqc = coqc or find_coqc()
    if coqc is None:
        raise ProofError("coqc not found; install Coq 8.16 (apt-get install -y coq)")
    run = _run_coq(_check_dir(proof_dir), list(dict.fromkeys(names)), coqc, statements=False,
                   expect_closed=lambda name: False)
    return run.found, run.errors


# --- one coqc pass: Print Assumptions and Check in a single generated file ------------
#
# ``Print Assumptions`` is what costs: each call walks the whole closure of its theorem
# (QArith, lra's certificates, the Reals construction), 0.3-0.5 s a theorem, and
# nothing is shared between calls. Over a tuple of theorems it walks the union once,
# and ``Closed under the global context`` for the tuple means closed for every member
# (the assumptions of a tuple are the union of its members' and of pair/prod, which
# have none). So the theorems expected to be closed are asked about together; any
# other answer (or an error) sends the members back to be asked one by one in the
# next pass. Theorems over R are asked about one by one from the start: their exact
# axiom lists differ, and a tuple's answer cannot say whose is whose. The guess only
# decides how much one pass does, never a status.

_GROUP_MARKER = "@@exchange-group "
_GUARD_MARKER = "@@exchange-guard "
_IMPORTS_MARKER = "@@exchange-imports "
# A pinned statement that mentions R (Coq's standard reals) is over R: its theorem
# depends on the Reals axioms, so it is asked about alone.
_OVER_R = re.compile(r"(?<![\w'.])R(?![\w'])")


@dataclass
class _Unit:
    kind: str  # "group", "guard", "theorem", "imports", "statement"
    label: str
    members: tuple[str, ...] = ()


@dataclass
class _CoqRun:
    found: dict[str, tuple[str, ...]]  # name -> assumptions, for every name coqc resolved
    errors: str  # one "name: stderr" line per name coqc could not resolve (or Require)
    compiled: dict[str, str]  # name -> printed statement (``Check``)
    clean: bool  # every coqc run ended normally (0 or a located error): the result can be cached
    passes: int


def _marker(text: str) -> str:
    return f'Goal True. idtac "{text}". Abort.'


def _script(proof_dir: Path, units: list[_Unit]) -> str:
    """The .v file for one pass: ``Require`` (no Import, so axioms print with their
    library's qualified name), the Print Assumptions units, then the statement units
    with every module imported, Q_scope and R_scope open and the printing width set."""
    pa_names = [n for u in units if u.kind in ("group", "guard", "theorem") for n in u.members]
    lines = [f"Require {m}." for m in sorted({n.rsplit(".", 1)[0] for n in pa_names})]
    for unit in units:
        if unit.kind == "group" or unit.kind == "guard":
            marker = _GROUP_MARKER if unit.kind == "group" else _GUARD_MARKER
            const = f"exchange_{unit.kind}_{unit.label}"
            # @name: no implicit argument is inserted, so any theorem fits in the tuple.
            lines += [_marker(f"{marker}{unit.label}"),
                      f"Definition {const} := ({', '.join('@' + n for n in unit.members)}).",
                      f"Print Assumptions {const}."]
        elif unit.kind == "theorem":
            # idtac inside a throw-away goal prints a marker before each answer.
            lines += [_marker(f"{_MARKER}{unit.label}"), f"Print Assumptions {unit.label}."]
        elif unit.kind == "imports":
            lines += [_marker(f"{_IMPORTS_MARKER}{unit.label}"),
                      "From Coq Require Import QArith Reals.",
                      *[f"Require Import {m}." for m in _imports(proof_dir)],
                      "Open Scope Q_scope.", "Open Scope R_scope.",
                      f"Set Printing Width {PRINTING_WIDTH}."]
        else:
            lines += [_marker(f"{_STMT_MARKER}{unit.label}"), f"Check @{unit.label}."]
    return "\n".join(lines) + "\n"


_MARKERS = {_GROUP_MARKER: "group", _GUARD_MARKER: "guard", _MARKER: "theorem",
            _IMPORTS_MARKER: "imports", _STMT_MARKER: "statement"}


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


def _statement_of(lines: list[str]) -> str:
    return "\n".join(line.rstrip() for line in lines if line.strip() and line[0].isspace())


def _run_coq(proof_dir: Path, names: list[str], coqc: str, *, statements: bool,
             expect_closed, reused: dict[str, tuple[str, ...]] | None = None) -> _CoqRun:
    """Print Assumptions for every name and (``statements``) ``Check`` it, in one coqc
    pass when nothing fails.

    ``expect_closed(name)`` puts a name in the tuple asked about at once; ``reused``
    (name -> assumptions from the cache) are not asked again, except that the ones
    with assumptions are asked about together, once, to confirm that the axioms still
    print under the same names. A unit that fails stops the file; the pass is rerun
    from the unit after it (a name coqc cannot resolve is reported, like before).
    """
    reused = {n: axioms for n, axioms in (reused or {}).items() if n in names}
    found: dict[str, tuple[str, ...]] = {n: () for n, axioms in reused.items() if not axioms}
    todo = [n for n in names if n not in reused]
    together = [n for n in todo if expect_closed(n)]
    units = [_Unit("group", "0", tuple(together))] if together else []
    guarded = tuple(n for n in names if reused.get(n))
    if guarded:
        units.append(_Unit("guard", "0", guarded))
    units += [_Unit("theorem", n, (n,)) for n in todo if n not in set(together)]
    if statements and names:
        units += [_Unit("imports", "0"), *[_Unit("statement", n) for n in names]]
    errors: list[str] = []
    unresolved: set[str] = set()
    compiled: dict[str, str] = {}
    clean, passes = True, 0
    while units:
        passes += 1
        with tempfile.TemporaryDirectory() as tmp:
            vfile = Path(tmp) / "ExchangeCheck.v"
            vfile.write_text(_script(proof_dir, units))
            # The two passes this one replaces had 600 s each.
            proc = subprocess.run([coqc, *_load_path(proof_dir), str(vfile)],
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
                if unit.kind == "theorem":  # a name coqc cannot resolve: reported, not retried
                    errors.append(f"{unit.label}: {proc.stderr.strip()}")
                    unresolved.add(unit.label)
                elif unit.kind in ("group", "guard"):  # find out which member, one by one
                    retry += [_Unit("theorem", n, (n,)) for n in unit.members]
                # A statement whose Check failed prints nothing; after the imports
                # failed, none can be printed.
                retry += [u for u in units[index + 1:]
                          if not (unit.kind == "imports" and u.kind == "statement")]
                break
            lines = done.get(key)
            if unit.kind == "theorem":
                if lines is not None:
                    found[unit.label] = _assumptions_of(unit.label, lines)
            elif unit.kind == "group":
                if lines is not None and [x.strip() for x in lines if x.strip()] == [CLOSED]:
                    found.update({n: () for n in unit.members})
                else:
                    retry += [_Unit("theorem", n, (n,)) for n in unit.members]
            elif unit.kind == "guard":
                expected = {a for n in unit.members for a in reused[n]}
                if lines is not None and set(_assumptions_of(unit.label, lines)) == expected:
                    found.update({n: reused[n] for n in unit.members})
                else:
                    retry += [_Unit("theorem", n, (n,)) for n in unit.members]
            elif unit.kind == "statement" and lines is not None:
                text = _statement_of(lines)
                if text:
                    compiled[unit.label] = text
        # Statements need the imports in front of them.
        if any(u.kind == "statement" for u in retry) and not any(u.kind == "imports" for u in retry):
            first = next(i for i, u in enumerate(retry) if u.kind == "statement")
            retry.insert(first, _Unit("imports", "0"))
        # Theorems coqc could not resolve print no statement either.
        units = [u for u in retry if not (u.kind == "statement" and u.label in unresolved)]
    return _CoqRun(found, "\n".join(errors), compiled, clean, passes)


def _expect_closed(pinned: dict[str, str]):
    def guess(name: str) -> bool:
        statement = pinned.get(name.rsplit(".", 1)[-1])
        return statement is None or not _OVER_R.search(statement)
    return guess


def compile_proofs(
    proof_dir: Path | str | None = None,
    theorems: dict[str, Theorem] | None = None,
    pin: bool = True,
    cache: bool = True,
) -> list[TheoremStatus]:
    """Build the development and return one status per registered theorem.

    Without coqc every theorem is ``COQC_MISSING`` (callers decide whether that is a
    failure: it is in CI). A failed build fails every theorem with make's output.
    With ``pin`` (the default) every theorem and witness must have the statement pinned
    in ``<proof_dir>/statements.txt``; a difference fails the theorem, with a diff.

    With ``cache`` (the default) the result is looked up in ``<proof_dir>/.cache/`` by a
    hash of every input that can change it (``exchange.theory.cache``), and stored
    there; a theorem whose module and the modules it requires are unchanged is not
    asked about again. ``cache=False`` neither reads nor writes it.
    """
    theorems = THEOREMS if theorems is None else theorems
    proof_dir = _check_dir(Path(proof_dir) if proof_dir else default_proofs_dir())
    coqc = find_coqc()
    if coqc is None:
        why = "coqc not found on PATH; install Coq 8.16 (apt-get install -y coq)"
        return [TheoremStatus(k, t.name, COQC_MISSING, why) for k, t in theorems.items()]
    if shutil.which("make") is None:
        raise ProofError("make not found; install it (apt-get install -y make) to build proofs/")
    store = None
    if cache:  # opened before make: its keys are those of the sources make builds from
        from exchange.theory.cache import ResultCache

        modules = {module: vfile for vfile, module in _vfiles(proof_dir)}
        store = ResultCache.open(proof_dir, coqc, modules)
    make = subprocess.run(
        ["make", "-C", str(proof_dir)], capture_output=True, text=True, timeout=1800
    )
    if make.returncode != 0:
        tail = "\n".join((make.stdout + make.stderr).strip().splitlines()[-15:])
        return [
            TheoremStatus(k, t.name, FAILED, f"make -C {proof_dir} failed:\n{tail}")
            for k, t in theorems.items()
        ]
    if store is not None:
        hit = store.load_statuses(theorems, pin)
        if hit is not None and store.unchanged():
            return hit
    names = _all_names(theorems)
    pinned = read_statements(proof_dir)
    run = _run_coq(proof_dir, names, coqc, statements=pin, expect_closed=_expect_closed(pinned),
                   reused=store.reusable_assumptions(names) if store is not None else None)
    statuses = [_full_status(k, t, run.found, run.errors, run.compiled, pinned if pin else None)
                for k, t in theorems.items()]
    if store is not None and store.unchanged():  # else files changed under the check
        store.save_assumptions(run.found)
        if run.clean:
            store.save_statuses(theorems, pin, statuses)
    return statuses


def _all_names(theorems: dict[str, Theorem]) -> list[str]:
    names = []
    for thm in theorems.values():
        names.append(thm.name)
        if getattr(thm, "witness_name", ""):
            names.append(thm.witness_name)
    return list(dict.fromkeys(names))


def _full_status(key, thm, found, errors, compiled, pinned) -> TheoremStatus:
    status = _status(key, thm, found, errors)
    if status.ok and pinned is not None:
        why = _statement_mismatch(thm.short, thm.name, compiled, pinned)
        if why:
            return TheoremStatus(key, thm.name, FAILED, why, status.axioms)
    witness = getattr(thm, "witness_name", "")
    if status.ok and witness:
        wshort = witness.rsplit(".", 1)[-1]
        wthm = Theorem(name=witness, statement="witness")
        wstatus = _status(wshort, wthm, found, errors)
        why = wstatus.detail if not wstatus.ok else ""
        if not why and pinned is not None:
            why = _statement_mismatch(wshort, witness, compiled, pinned)
        if why:
            return TheoremStatus(key, thm.name, FAILED,
                                 f"non-vacuity witness {witness}: {why}", status.axioms)
        axioms = tuple(dict.fromkeys(status.axioms + wstatus.axioms))
        return TheoremStatus(key, thm.name, CHECKED, status.detail, axioms)
    return status


def _status(key: str, thm: Theorem, found: dict, errors: str) -> TheoremStatus:
    if thm.name not in found:
        return TheoremStatus(key, thm.name, FAILED, f"not found by coqc: {errors or 'no output'}")
    axioms = found[thm.name]
    extra = sorted(set(axioms) - ALLOWED_AXIOMS)
    if extra:
        return TheoremStatus(key, thm.name, FAILED, "axioms outside the allow-list: "
                             + ", ".join(extra), axioms)
    detail = CLOSED if not axioms else "standard real-number axioms only"
    return TheoremStatus(key, thm.name, CHECKED, detail, axioms)


def _statement_mismatch(short: str, name: str, compiled: dict, pinned: dict) -> str:
    """"" when the compiled statement of ``name`` is the pinned one, else why (a diff)."""
    if name not in compiled:
        return f"Check {name} printed nothing"
    if short not in pinned:
        return (f"{short} has no pinned statement in proofs/{STATEMENTS_FILE}; review it and "
                "add it (python -m exchange proofs --write-statements)")
    if normalise_statement(compiled[name]) == normalise_statement(pinned[short]):
        return ""
    diff = difflib.unified_diff(pinned[short].splitlines(), compiled[name].splitlines(),
                                f"pinned {short}", f"compiled {short}", lineterm="")
    return (f"statement of {short} differs from the one pinned in proofs/{STATEMENTS_FILE}:\n"
            + "\n".join(diff))


def normalise_statement(text: str) -> str:
    """Whitespace-insensitive form of a printed statement (Coq re-wraps lines)."""
    return " ".join(text.split())


def _parse_statement_blocks(text: str) -> dict[str, str]:
    """``name`` at column 0 followed by indented ``: type`` lines -> {name: block}."""
    blocks: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if not line[0].isspace():
            current = line.strip()
            blocks[current] = []
        elif current is not None:
            blocks[current].append(line.rstrip())
    return {k: "\n".join(v) for k, v in blocks.items()}


def read_statements(proof_dir: Path | str | None = None) -> dict[str, str]:
    """The pinned statements: short name -> ``: type`` as Coq prints it."""
    path = _check_dir(Path(proof_dir) if proof_dir else default_proofs_dir()) / STATEMENTS_FILE
    if not path.is_file():
        return {}
    return _parse_statement_blocks(path.read_text())


def _imports(proof_dir: Path) -> list[str]:
    return [m for _, m in _vfiles(proof_dir)]


def print_statements(proof_dir: Path, names: list[str], coqc: str | None = None) -> dict[str, str]:
    """``Check @name`` for each qualified name: name -> the printed ``: type`` lines.

    Every module of the development is imported and Q_scope then R_scope are open, so
    the printed statements use the usual notations (a rational literal reads ``0%Q``
    where R is the default).
    """
    coqc = coqc or find_coqc()
    if coqc is None:
        raise ProofError("coqc not found; install Coq 8.16 (apt-get install -y coq)")
    proof_dir = _check_dir(proof_dir)
    units = [_Unit("imports", "0"), *[_Unit("statement", n) for n in dict.fromkeys(names)]]
    with tempfile.TemporaryDirectory() as tmp:
        vfile = Path(tmp) / "ExchangeStatements.v"
        vfile.write_text(_script(proof_dir, units))
        proc = subprocess.run([coqc, *_load_path(proof_dir), str(vfile)],
                              capture_output=True, text=True, cwd=tmp, timeout=600)
    result = {label: _statement_of(lines) for kind, label, lines in _split_output(proc.stdout)
              if kind == "statement"}
    return {k: v for k, v in result.items() if v}


def write_statements(proof_dir: Path | str | None = None,
                     theorems: dict[str, Theorem] | None = None) -> Path:
    """Pin the compiled statements of every theorem and witness (the development must build).

    Changing a statement is a reviewed change of ``proofs/statements.txt``.
    """
    theorems = THEOREMS if theorems is None else theorems
    proof_dir = _check_dir(Path(proof_dir) if proof_dir else default_proofs_dir())
    names = _all_names(theorems)
    compiled = print_statements(proof_dir, names)
    missing = [n for n in names if n not in compiled]
    if missing:
        raise ProofError(f"Check printed nothing for {', '.join(missing)}; build proofs/ first")
    out = ["# Pinned statements of the registered theorems and their non-vacuity witnesses,",
           "# as `Check` prints them (exchange.theory.coq.print_statements). `exchange proofs`",
           "# fails when a compiled statement differs (whitespace aside). Regenerate with",
           "# `python -m exchange proofs --write-statements` and review the diff.", ""]
    for n in names:
        out += [n.rsplit(".", 1)[-1], compiled[n], ""]
    path = proof_dir / STATEMENTS_FILE
    path.write_text("\n".join(out))
    return path


_DECL = re.compile(
    r"^\s*(?:Theorem|Lemma|Corollary|Proposition|Fact|Remark)\s+([A-Za-z_][\w']*)", re.M
)
# Vernacular that would assume rather than prove (Print Assumptions catches most of
# these too; the scan also catches ones no registered theorem happens to use).
_FORBIDDEN = re.compile(
    r"\b(Admitted|admit|Axiom|Axioms|Parameter|Parameters|Hypothesis|Hypotheses|"
    r"Conjecture|Variable|Variables)\b"
)


def _strip_comments(text: str) -> str:
    """Remove (possibly nested) Coq comments, keeping line structure."""
    out, depth, i = [], 0, 0
    while i < len(text):
        two = text[i:i + 2]
        if two == "(*":
            depth, i = depth + 1, i + 2
        elif two == "*)" and depth:
            depth, i = depth - 1, i + 2
        else:
            if depth == 0 or text[i] == "\n":
                out.append(text[i])
            i += 1
    return "".join(out)


def _vfiles(proof_dir: Path) -> list[tuple[Path, str]]:
    """(file, qualified module) for every .v file under a -Q/-R root of _CoqProject."""
    proof_dir = _check_dir(Path(proof_dir))
    flags = _load_path(proof_dir)
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
    for vfile, module in _vfiles(Path(proof_dir) if proof_dir else default_proofs_dir()):
        for match in _DECL.finditer(_strip_comments(vfile.read_text())):
            names[f"{module}.{match.group(1)}"] = str(vfile)
    return names


def forbidden_commands(proof_dir: Path | str | None = None) -> list[str]:
    """``file:line: word`` for every Admitted/admit/Axiom/Parameter/Hypothesis... outside comments."""
    hits = []
    for vfile, _ in _vfiles(Path(proof_dir) if proof_dir else default_proofs_dir()):
        for lineno, line in enumerate(_strip_comments(vfile.read_text()).splitlines(), 1):
            for match in _FORBIDDEN.finditer(line):
                hits.append(f"{vfile}:{lineno}: {match.group(1)}")
    return hits
