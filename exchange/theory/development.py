"""Checks of the proof development as a whole, run by ``exchange proofs`` (issue 33).

Per-theorem checks (Print Assumptions, the kernel check against the reviewed record)
are in ``exchange.theory.coq``; these look at what no single theorem shows:

- ``project_flags``: ``_CoqProject`` may only map load paths (``-Q``/``-R``) and list
  ``.v`` files. Any other option (``-arg -type-in-type``, ``-arg -impredicative-set``,
  ``-arg -indices-matter``, ...) changes the logic or the build and is reported; the
  Makefile rebuilds everything when ``_CoqProject`` changes.
- ``coqchk_problems``: ``coqchk`` re-checks every compiled module of the development
  (``-norec``: Coq's standard library is admitted, not re-checked) and prints the
  context summary; any axiom outside the ``Coq.`` namespace (an ``Axiom`` of ours, used
  by a registered theorem or not), an impredicative ``Set``, type-in-type, an unsafe
  fixpoint or an assumed positivity fails.
- ``forbidden_commands`` (``exchange.theory.coq``): a source scan that understands
  comments and strings, the backstop for what coqchk cannot name (``Admitted`` proofs
  show up there as axioms named after the lemma).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

from exchange.theory.coq import (
    check_proofs_dir,
    forbidden_commands,
)

__all__ = ["EXPECTED_ROOTS", "MAKE_HOOKS", "coqchk_problems", "development_problems", "find_coqchk",
           "project_flags", "project_layout"]


EXPECTED_ROOTS = (("theories", "Exchange"), ("spec", "ExchangeSpec"))
MAKE_HOOKS = ("Makefile.coq.local", "CoqMakefile.local")


def project_flags(proof_dir: Path) -> list[str]:
    """Every option of ``_CoqProject`` other than ``-Q dir Lib``, ``-R dir Lib`` and
    ``.v`` files (comments, from ``#`` to the end of a line, aside), and every logical
    root that is ``Coq`` or lies under it (a folder of ours would mint names there)."""
    proof_dir = check_proofs_dir(Path(proof_dir))
    tokens = []
    for line in (proof_dir / "_CoqProject").read_text().splitlines():
        tokens += line.split("#", 1)[0].split()
    problems, i = [], 0
    while i < len(tokens):
        tok = tokens[i]
        if tok in ("-Q", "-R") and i + 2 < len(tokens):
            lib = tokens[i + 2]
            if lib == "Coq" or lib.startswith("Coq.") or not lib:
                problems.append(f"_CoqProject: `{tok} {tokens[i + 1]} {lib}` binds a folder "
                                "to the logical root Coq, where only Coq's standard library "
                                "may live (names there are trusted by origin)")
            i += 3
        elif tok.endswith(".v") and not tok.startswith("-"):
            i += 1
        else:
            arg = " ".join(tokens[i:i + 2]) if tok == "-arg" else tok
            problems.append(f"_CoqProject: `{arg}` is not a load path or a .v file; options "
                            "that change Coq's logic or build (type-in-type, impredicative "
                            "Set, ...) are not allowed in this development")
            i += 2 if tok == "-arg" else 1
    return problems


def project_layout(proof_dir: Path, makefile_sha256: str | None = None) -> list[str]:
    """The package's own proofs folder: ``_CoqProject`` maps exactly ``EXPECTED_ROOTS``
    (with ``-Q``), no make hook exists, and the Makefile has the pinned sha256."""
    import hashlib

    from exchange.theory.build import source_roots

    proof_dir = check_proofs_dir(Path(proof_dir))
    problems = []
    roots = [(flag, folder.rstrip("/"), lib) for flag, folder, lib in source_roots(proof_dir)]
    want = [("-Q", folder, lib) for folder, lib in EXPECTED_ROOTS]
    if sorted(roots) != sorted(want):
        problems.append("_CoqProject maps " + (", ".join(" ".join(r) for r in roots) or "nothing")
                        + "; exactly " + ", ".join(" ".join(r) for r in want)
                        + " are expected (another folder bound to a logical name could stand "
                        "in for the development or the record)")
    for hook in MAKE_HOOKS:
        if (proof_dir / hook).exists():
            problems.append(f"proofs/{hook} exists: a make hook runs arbitrary commands in the "
                            "build; remove it (exchange proofs builds with its own coqc calls)")
    if makefile_sha256 is not None:
        try:
            sha = hashlib.sha256((proof_dir / "Makefile").read_bytes()).hexdigest()
        except OSError:
            sha = "missing"
        if sha != makefile_sha256:
            problems.append(f"proofs/Makefile has sha256 {sha[:12]}..., the pinned one is "
                            f"{makefile_sha256[:12]}... (proofs/spec/pins.json makefile_sha256): "
                            "a changed Makefile is a re-pin")
    return problems


def find_coqchk(coqc: str | None = None) -> str | None:
    if coqc:
        sibling = Path(coqc).with_name("coqchk")
        if sibling.exists():
            return str(sibling)
    return shutil.which("coqchk")


def _summary(text: str) -> dict[str, list[str]]:
    """coqchk's CONTEXT SUMMARY: heading -> entries (``<none>`` dropped)."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.split("CONTEXT SUMMARY", 1)[-1].splitlines():
        if line.startswith("* "):
            head, _, rest = line[2:].partition(":")
            current = head.strip()
            sections[current] = [rest.strip()] if rest.strip() and rest.strip() != "<none>" else []
        elif current is not None and line.strip() and line.strip() != "<none>":
            sections[current].append(line.strip())
    return sections


def _coqchk_run(coqchk: str, args: list[str], proof_dir: Path, build, cache: bool) -> tuple[int, str]:
    """coqchk's exit status and output; with ``cache``, remembered in
    ``<proofs>/.cache/coqchk-<key>.json`` under a hash of coqchk (version, library
    folder), the modules named and the bytes of every ``.vo`` file of the build (what
    coqchk reads), so an unchanged build is not re-checked and any changed ``.vo`` is.
    Only the run is reused: its output is read again below."""
    key = None
    if cache:
        from exchange.theory.cache import coqc_identity

        ident = coqc_identity(coqchk)
        if ident is not None:
            # The arguments with the build's folder left out (each copy of the tree has its
            # own): the modules and their logical mapping stay in the key.
            h = hashlib.sha256(json.dumps([ident, [a.replace(str(build.root), "<build>")
                                                   for a in args[1:]]]).encode())
            for vo in sorted(Path(build.root).rglob("*.vo")):
                h.update(vo.relative_to(build.root).as_posix().encode() + b"\0")
                h.update(hashlib.sha256(vo.read_bytes()).digest())
            key = proof_dir / ".cache" / f"coqchk-{h.hexdigest()}.json"
            try:
                data = json.loads(key.read_text())
                return int(data["returncode"]), str(data["output"])
            except (OSError, ValueError, KeyError, TypeError):
                pass
    proc = subprocess.run(args, capture_output=True, text=True, cwd=proof_dir, timeout=1200, check=False)
    out = proc.stdout + proc.stderr
    if key is not None and proc.returncode == 0:
        try:
            key.parent.mkdir(exist_ok=True)
            key.write_text(json.dumps({"returncode": proc.returncode, "output": out}))
        except OSError:
            pass  # a read-only tree: checked again next time
    return proc.returncode, out


def coqchk_problems(proof_dir: Path, coqc: str | None = None, build=None,
                    cache: bool = False) -> list[str]:
    """Run coqchk over every module of the build (``exchange.theory.build``; built here
    when not given) and the record compiled from its bytes. ``cache``: reuse the output
    of a run over the same ``.vo`` bytes (``_coqchk_run``)."""
    from exchange.theory.build import build_development
    from exchange.theory.coq import find_coqc

    proof_dir = check_proofs_dir(Path(proof_dir))
    coqchk = find_coqchk(coqc)
    if coqchk is None:
        return ["coqchk not found: install Coq 8.16 with its checker (apt-get install -y coq)"]
    coqc = coqc or find_coqc()
    if build is None:
        build = build_development(proof_dir, coqc)
    if build.error:
        return [build.error]
    modules = build.modules + ([build.spec_module] if build.spec_module else [])
    args = [coqchk, "-silent", "-o", *build.flags]
    for module in modules:
        args += ["-norec", module]
    returncode, out = _coqchk_run(coqchk, args, proof_dir, build, cache)
    if returncode != 0 or "CONTEXT SUMMARY" not in out:
        tail = "\n".join(out.strip().splitlines()[-10:])
        return [f"coqchk rejected the development (exit {returncode}):\n{tail}"]
    problems = []
    summary = _summary(out)
    stdlib = []
    for axiom in summary.get("Axioms", []):
        if not axiom.startswith("Coq."):
            problems.append(f"coqchk: axiom {axiom} is declared in the development (an Axiom, "
                            "Parameter or Admitted proof): none is allowed")
        else:
            stdlib.append(axiom)
    problems += _stdlib_origin(coqc, build, stdlib, cache)
    theory = " ".join(summary.get("Theory", []))
    if "impredicative" in theory or "Set is predicative" not in theory:
        problems.append(f"coqchk: the theory is not Coq's default ({theory})")
    for head, entries in summary.items():
        if head not in ("Axioms", "Theory") and entries:
            problems.append(f"coqchk: {head}: {', '.join(entries)}")
    return problems


def _stdlib_origin(coqc: str, build, axioms: list[str], cache: bool = False) -> list[str]:
    """A ``Coq.*`` axiom of coqchk's summary is trusted only when its library was loaded
    from ``coqc -where`` (a root bound to Coq elsewhere is refused by project_flags too)."""
    from exchange.theory.axioms import coq_where, library_files

    if not axioms:
        return []
    where = coq_where(coqc)
    modules = build.modules + ([build.spec_module] if build.spec_module else [])
    files = library_files(coqc, build.flags, modules, set(axioms), where, build, cache)
    problems = []
    for axiom in sorted(axioms):
        origin = files[axiom]
        if origin.problem or not origin.under(where):
            problems.append(f"coqchk: axiom {axiom} is not from Coq's standard library "
                            f"({origin.problem or 'loaded from ' + origin.file}; coqc -where "
                            f"is {where})")
    return problems


def development_problems(proof_dir: Path, coqc: str | None = None, build=None,
                         cache: bool = False) -> list[str]:
    """Flags, source scan and coqchk (over ``build``, made here when not given; ``cache``:
    see ``coqchk_problems``)."""
    problems = project_flags(proof_dir)
    problems += [f"forbidden command outside comments and strings: {hit}"
                 for hit in forbidden_commands(proof_dir)]
    problems += coqchk_problems(proof_dir, coqc, build, cache=cache)
    return problems
