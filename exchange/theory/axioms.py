"""Axioms named by where they come from (issue 43).

``Print Assumptions`` prints an axiom by the shortest name that resolves in the file it
runs in (``ClassicalDedekindReals.sig_forall_dec``), and coqchk by its full logical name.
A name says nothing about where the definition came from: a development may bind a
folder of its own to ``Coq`` and declare ``Coq.Reals.ClassicalDedekindReals.sig_forall_dec``
there. So every axiom is resolved to its full name (``Locate``, in a file that loads
every module of the build) and the library declaring it to the ``.vo`` file it was
loaded from (``Locate Library``); an axiom is accepted only when its full name is on the
allow-list (``ALLOWED_AXIOM_REASONS``) and that file lies under ``coqc -where``, the
standard library of the coqc in use. ``_CoqProject`` may bind no root at or under
``Coq`` (``exchange.theory.development``), so this is a second, independent check.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ALLOWED_AXIOM_REASONS", "ALLOWED_AXIOMS", "Origin", "axiom_origins",
           "coq_where", "library_files"]

# The theorems over Coq's standard Reals depend on the axioms that define those real
# numbers (Coq 8.16); each is allowed by its full name, with the reason, and only when
# it was loaded from the standard library of the coqc in use.
ALLOWED_AXIOM_REASONS: dict[str, str] = {
    "Coq.Reals.ClassicalDedekindReals.sig_forall_dec": (
        "Reals: the limited principle of omniscience on decidable predicates over nat, "
        "which the standard library's classical Dedekind reals (Coq.Reals.Rdefinitions) "
        "are built on"
    ),
    "Coq.Reals.ClassicalDedekindReals.sig_not_dec": (
        "Reals: decidability of negated propositions, used by the same construction "
        "(total order and Rlt_dec / total_order_T on R)"
    ),
    "Coq.Logic.FunctionalExtensionality.functional_extensionality_dep": (
        "Reals: the Dedekind-cut construction of R compares cuts as functions"
    ),
}
ALLOWED_AXIOMS: frozenset[str] = frozenset(ALLOWED_AXIOM_REASONS)

_MARK = "@@exchange-locate "


@dataclass(frozen=True)
class Origin:
    full: str  # full logical name ("" when it could not be resolved uniquely)
    file: str  # the .vo its library was loaded from ("" when unknown)
    problem: str  # "" or why the name cannot be trusted

    def under(self, where: str) -> bool:
        return bool(self.file) and Path(self.file).resolve().is_relative_to(Path(where).resolve())


def coq_where(coqc: str) -> str:
    """``coqc -where`` ("" when it fails), remembered per binary (``cache.tool_answer``)."""
    from exchange.theory.cache import tool_answer

    return tool_answer(coqc, "-where") or ""


def _run(coqc: str, flags: list[str], lines: list[str], build=None, cache: bool = False) -> str:
    """coqc's output for a file of ``lines`` loading ``build``'s modules. With ``cache``
    (never under ``CI=true``) the output is kept in ``<proofs>/.cache/locate-<key>.json``
    under a hash of coqc's identity, the flags and lines (the build's folder left out:
    each copy of the tree has its own) and the bytes of every ``.vo`` of the build, so
    the same question over the same compiled files is answered once (the coqchk summary's
    ``Locate Library`` asks what Print Assumptions' origins asked, over the same build)."""
    path, root = None, str(build.root) if build is not None else ""
    if cache and build is not None and not _in_ci():
        from exchange.theory.cache import coqc_identity

        ident = coqc_identity(coqc)
        if ident is not None:
            h = hashlib.sha256(json.dumps([ident, [f.replace(root, "<build>") for f in flags],
                                           [ln.replace(root, "<build>") for ln in lines]]).encode())
            for vo in sorted(Path(root).rglob("*.vo")):
                h.update(vo.relative_to(root).as_posix().encode() + b"\0")
                h.update(hashlib.sha256(vo.read_bytes()).digest())
            path = Path(root).parent.parent / ".cache" / f"locate-{h.hexdigest()}.json"
            try:
                return json.loads(path.read_text())["output"].replace("<build>", root)
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                pass
    with tempfile.TemporaryDirectory() as tmp:
        v = Path(tmp) / "ExchangeLocate.v"
        v.write_text("\n".join(lines) + "\n")
        proc = subprocess.run([coqc, "-q", *flags, str(v)], capture_output=True, text=True,
                              cwd=tmp, timeout=600, check=False)
    out = proc.stdout + ("\n" + proc.stderr if proc.returncode else "")
    if path is not None and proc.returncode == 0:
        try:
            path.parent.mkdir(exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "w") as handle:
                json.dump({"output": out.replace(root, "<build>")}, handle)
            os.replace(tmp_name, path)
        except OSError:
            pass  # a read-only tree: asked again next time
    return out


def _in_ci() -> bool:
    from exchange.theory.build import in_ci

    return in_ci()


def _blocks(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith(_MARK):
            current = line[len(_MARK):].strip()
            out[current] = []
        elif current is not None:
            out[current].append(line)
    return out


def _mark(label: str) -> str:
    return f'Goal True. idtac "{_MARK}{label}". Abort.'


def _candidates(full: str, roots: list[tuple[str, Path]]) -> list[str]:
    """Library prefixes of ``full`` that name a .vo on one of ``roots`` (longest first)."""
    parts = full.split(".")
    out = []
    for n in range(len(parts) - 1, 0, -1):
        lib = parts[:n]
        for logical, folder in roots:
            lparts = logical.split(".") if logical else []
            if lib[:len(lparts)] == lparts and len(lib) > len(lparts):
                rel = Path(*lib[len(lparts):]).with_suffix(".vo")
                if (folder / rel).is_file() and ".".join(lib) not in out:
                    out.append(".".join(lib))
    return out


def _roots(flags: list[str], where: str) -> list[tuple[str, Path]]:
    roots = [("Coq", Path(where) / "theories"), ("", Path(where) / "user-contrib")]
    return roots + [(flags[i + 2], Path(flags[i + 1])) for i in range(0, len(flags) - 2, 3)]


def _locate_libraries(wanted: list[str]) -> list[str]:
    lines = []
    for i, lib in enumerate(wanted):
        lines += [_mark(f"lib{i}"), f"Locate Library {lib}."]
    return lines


def _loaded(blocks: dict[str, list[str]], wanted: list[str]) -> dict[str, str]:
    """library -> the .vo it was loaded from, for every library of ``wanted`` loaded."""
    loaded = {}
    for i, lib in enumerate(wanted):
        text = " ".join(" ".join(blocks.get(f"lib{i}", [])).split())
        m = re.search(r"has been loaded from file (\S+\.vo)", text)
        if m:
            loaded[lib] = m.group(1)
    return loaded


def _origins(libs: dict[str, list[str]], loaded: dict[str, str]) -> dict[str, Origin]:
    out = {}
    for full, cands in libs.items():
        hit = next((c for c in cands if c in loaded), None)
        out[full] = (Origin(full, loaded[hit], "") if hit else
                     Origin(full, "", f"no loaded library declares {full}"))
    return out


def library_files(coqc: str, flags: list[str], modules: list[str], fulls: set[str],
                  where: str, build=None, cache: bool = False) -> dict[str, Origin]:
    """full name -> the .vo its library was loaded from, in a file loading ``modules``
    (``build``, ``cache``: see ``_run``)."""
    roots = _roots(flags, where)
    libs = {full: _candidates(full, roots) for full in fulls}
    wanted = sorted({c for cands in libs.values() for c in cands})
    lines = [f"Require {m}." for m in modules] + _locate_libraries(wanted)
    blocks = _blocks(_run(coqc, flags, lines, build, cache)) if wanted else {}
    return _origins(libs, _loaded(blocks, wanted))


def axiom_origins(coqc: str, build, printed: set[str], cache: bool = False) -> dict[str, Origin]:
    """printed axiom name (as Print Assumptions shows it) -> its full name and file.

    One coqc file locates every printed name and, in the same file, the libraries of the
    allow-listed axioms it may be (a guess: ``Locate`` decides the full name); a full
    name whose libraries were not among them is located by a second file
    (``library_files``). ``cache``: see ``_run``."""
    if not printed:
        return {}
    names = sorted(printed)
    where = coq_where(coqc)
    roots = _roots(build.flags, where)
    guesses = {a for a in ALLOWED_AXIOMS for p in names if a == p or a.endswith("." + p)}
    guessed = sorted({c for full in guesses for c in _candidates(full, roots)})
    lines = [f"Require {m}." for m in build.modules]
    for i, name in enumerate(names):
        lines += [_mark(f"n{i}"), f"Locate {name}."]
    blocks = _blocks(_run(coqc, build.flags, lines + _locate_libraries(guessed), build, cache))
    fulls: dict[str, str] = {}
    problems: dict[str, str] = {}
    for i, name in enumerate(names):
        found = [ln.split()[1] for ln in blocks.get(f"n{i}", [])
                 if ln.startswith(("Constant ", "Inductive ", "Constructor ")) and len(ln.split()) > 1]
        if len(found) == 1:
            fulls[name] = found[0]
        else:
            problems[name] = (f"axiom {name} does not resolve to one constant "
                              f"({', '.join(found) or 'none'}): its origin is unknown")
    libs = {full: _candidates(full, roots) for full in set(fulls.values())}
    if all(set(cands) <= set(guessed) for cands in libs.values()):
        files = _origins(libs, _loaded(blocks, guessed))
    else:
        files = library_files(coqc, build.flags, build.modules, set(fulls.values()), where,
                              build, cache)
    out = {name: Origin("", "", why) for name, why in problems.items()}
    for name, full in fulls.items():
        origin = files[full]
        if not origin.problem and not origin.under(where):
            inside = Path(origin.file).resolve().is_relative_to(Path(build.root).resolve())
            source = ("is declared in the development" if inside
                      else f"was loaded from {origin.file}")
            origin = Origin(full, origin.file, f"axiom {full} {source}, not in Coq's "
                            f"standard library ({where})")
        out[name] = origin
    return out
