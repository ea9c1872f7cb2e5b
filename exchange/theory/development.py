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

import shutil
import subprocess
from pathlib import Path

from exchange.theory.coq import (
    check_proofs_dir,
    forbidden_commands,
    load_path_flags,
    vfiles,
)

__all__ = ["coqchk_problems", "development_problems", "find_coqchk", "project_flags"]


def project_flags(proof_dir: Path) -> list[str]:
    """Every option of ``_CoqProject`` other than ``-Q dir Lib``, ``-R dir Lib`` and
    ``.v`` files (comments, from ``#`` to the end of a line, aside)."""
    proof_dir = check_proofs_dir(Path(proof_dir))
    tokens = []
    for line in (proof_dir / "_CoqProject").read_text().splitlines():
        tokens += line.split("#", 1)[0].split()
    problems, i = [], 0
    while i < len(tokens):
        tok = tokens[i]
        if tok in ("-Q", "-R") and i + 2 < len(tokens):
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


def coqchk_problems(proof_dir: Path, coqc: str | None = None) -> list[str]:
    """Run coqchk over every module of the development (already built)."""
    proof_dir = check_proofs_dir(Path(proof_dir))
    coqchk = find_coqchk(coqc)
    if coqchk is None:
        return ["coqchk not found: install Coq 8.16 with its checker (apt-get install -y coq)"]
    modules = [m for _, m in vfiles(proof_dir)]
    args = [coqchk, "-silent", "-o", *load_path_flags(proof_dir)]
    for module in modules:
        args += ["-norec", module]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=proof_dir, timeout=1200, check=False)
    out = proc.stdout + proc.stderr
    if proc.returncode != 0 or "CONTEXT SUMMARY" not in out:
        tail = "\n".join(out.strip().splitlines()[-10:])
        return [f"coqchk rejected the development (exit {proc.returncode}):\n{tail}"]
    problems = []
    summary = _summary(out)
    for axiom in summary.get("Axioms", []):
        if not axiom.startswith("Coq."):
            problems.append(f"coqchk: axiom {axiom} is declared in the development (an Axiom, "
                            "Parameter or Admitted proof): none is allowed")
    theory = " ".join(summary.get("Theory", []))
    if "impredicative" in theory or "Set is predicative" not in theory:
        problems.append(f"coqchk: the theory is not Coq's default ({theory})")
    for head, entries in summary.items():
        if head not in ("Axioms", "Theory") and entries:
            problems.append(f"coqchk: {head}: {', '.join(entries)}")
    return problems


def development_problems(proof_dir: Path, coqc: str | None = None) -> list[str]:
    """Flags, source scan and coqchk (the development must be built for coqchk)."""
    problems = project_flags(proof_dir)
    problems += [f"forbidden command outside comments and strings: {hit}"
                 for hit in forbidden_commands(proof_dir)]
    problems += coqchk_problems(proof_dir, coqc)
    return problems
