"""The reviewed record of what the proofs prove: ``proofs/spec/Spec.v`` and its hash.

``Spec.v`` holds the definitions the theorems are stated in and one ``Definition <name> :
Prop`` per registered theorem and witness; the kernel checks every theorem against it
(``exchange.theory.coq``). This module checks the record itself, in Python, on every
``exchange proofs`` run (never cached):

- its sha256 is ``SPEC_SHA256`` in ``exchange/theory/registry.py``: an edit of Spec.v is a
  re-pin, made only by ``exchange proofs --write-statements --accept``, which rewrites
  the hash and appends the diff to ``proofs/CHANGES``;
- its statements are exactly the registered theorems and witnesses (the inventory): a
  theorem deleted or renamed in the registry and the development still has its
  statement here, so the deletion is visible;
- it requires nothing but Coq's standard library (a record that imported the
  development would check the development against itself).

The repository has one branch and no tags, so the anchor is this hash, not a release.
"""

from __future__ import annotations

import datetime
import difflib
import hashlib
import re
import subprocess
from pathlib import Path

from exchange.theory.coq import strip_comments
from exchange.theory.registry import SPEC_SHA256, THEOREMS, Theorem

__all__ = [
    "CHANGES_FILE",
    "SPEC_FILE",
    "accept_record",
    "check_record",
    "record_diff",
    "record_statements",
    "spec_sha256",
]

SPEC_FILE = "spec/Spec.v"
CHANGES_FILE = "CHANGES"
_SNAPSHOT = "reviewed-spec-{}.v"  # under <proofs>/.cache: the reviewed text, for diffs
_STATEMENT = re.compile(r"^Definition\s+([A-Za-z_][\w']*)\s*:\s*Prop\s*:=", re.MULTILINE)
_REQUIRE = re.compile(r"(?:From\s+([\w.']+)\s+)?Require\s+(?:(?:Import|Export)\s+)?"
                      r"((?:[\w'.]+\s+)*?[\w'.]+?)\s*\.(?=\s|$)")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def spec_sha256(proof_dir: Path) -> str:
    return _sha((Path(proof_dir) / SPEC_FILE).read_text())


def _blocks(text: str) -> dict[str, str]:
    """Statement name -> its text (whitespace-normalised), comments and strings aside."""
    code = strip_comments(text)
    starts = [(m.start(), m.group(1)) for m in _STATEMENT.finditer(code)]
    out = {}
    for (start, name), (end, _) in zip(starts, starts[1:] + [(len(code), "")]):
        sentence = code[start:end].split(".\n", 1)[0]
        out[name] = " ".join(sentence.split())
    return out


def record_statements(proof_dir: Path) -> dict[str, str]:
    """The statements of the record: name -> normalised text."""
    return _blocks((Path(proof_dir) / SPEC_FILE).read_text())


def _expected_names(theorems: dict[str, Theorem]) -> set[str]:
    return (set(theorems) | {t.witness for t in theorems.values() if t.witness}
            | {t.false_witness for t in theorems.values() if getattr(t, "false_witness", "")})


def _reviewed_text(proof_dir: Path, sha: str) -> str | None:
    """The text whose hash is ``sha``: a snapshot a passing run kept, or git's HEAD, of
    this proofs folder or else of the package's own (a copy being checked)."""
    from exchange.theory.coq import default_proofs_dir

    folders = list(dict.fromkeys([Path(proof_dir).resolve(), default_proofs_dir()]))
    for folder in folders:
        try:
            text = (folder / ".cache" / _SNAPSHOT.format(sha)).read_text()
            if _sha(text) == sha:
                return text
        except OSError:
            pass
    for folder in folders:
        try:
            proc = subprocess.run(["git", "show", f"HEAD:./{SPEC_FILE}"], cwd=folder,
                                  capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.SubprocessError):
            continue
        if proc.returncode == 0 and _sha(proc.stdout) == sha:
            return proc.stdout
    return None


def _keep_snapshot(proof_dir: Path, text: str) -> None:
    folder = Path(proof_dir) / ".cache"
    try:
        folder.mkdir(exist_ok=True)
        path = folder / _SNAPSHOT.format(_sha(text))
        if not path.exists():
            path.write_text(text)
    except OSError:
        pass  # only used to show a diff later


def record_diff(proof_dir: Path, expected: str = SPEC_SHA256) -> tuple[list[str], str]:
    """(one line per statement added, removed or changed, the unified diff) between the
    reviewed text (hash ``expected``) and Spec.v now; ``([], "")`` when they agree. When
    the reviewed text is not at hand, the summary says so."""
    current = (Path(proof_dir) / SPEC_FILE).read_text()
    if _sha(current) == expected:
        return [], ""
    old = _reviewed_text(proof_dir, expected)
    if old is None:
        why = (f"the reviewed text (sha256 {expected[:12]}...) is not at hand; compare "
               f"with `git log -p -- proofs/{SPEC_FILE}` and proofs/{CHANGES_FILE}")
        return [why], ""
    before, after = _blocks(old), _blocks(current)
    summary = [f"statement {n} removed from the record" for n in sorted(set(before) - set(after))]
    summary += [f"statement {n} added to the record" for n in sorted(set(after) - set(before))]
    summary += [f"statement {n} changed" for n in sorted(set(before) & set(after))
                if before[n] != after[n]]
    if not summary:
        summary = ["definitions, examples or comments of the record changed"]
    diff = "\n".join(difflib.unified_diff(old.splitlines(), current.splitlines(),
                                          f"reviewed {SPEC_FILE}", f"current {SPEC_FILE}",
                                          lineterm=""))
    return summary, diff


def check_record(proof_dir: Path, theorems: dict[str, Theorem] | None = None,
                 expected: str = SPEC_SHA256) -> list[str]:
    """Every way the record disagrees with the registry and its hash (empty: none)."""
    theorems = THEOREMS if theorems is None else theorems
    path = Path(proof_dir) / SPEC_FILE
    if not path.is_file():
        return [f"the reviewed record proofs/{SPEC_FILE} is missing"]
    text = path.read_text()
    problems = []
    sha = _sha(text)
    if sha != expected:
        summary, _ = record_diff(proof_dir, expected)
        problems.append(
            f"proofs/{SPEC_FILE} is not the reviewed record (sha256 {sha[:12]}..., "
            f"exchange/theory/registry.py SPEC_SHA256 says {expected[:12]}...): "
            + "; ".join(summary)
            + ". Review the diff with `exchange proofs --write-statements`; record it with "
            "`--write-statements --accept`")
    else:
        _keep_snapshot(proof_dir, text)
    names = set(_blocks(text))
    wanted = _expected_names(theorems)
    for name in sorted(names - wanted):
        problems.append(f"{name} is in the reviewed record but not registered: a theorem "
                        "deleted or renamed (exchange/theory/registry.py)")
    for name in sorted(wanted - names):
        problems.append(f"{name} is registered but has no statement in proofs/{SPEC_FILE}")
    if theorems is THEOREMS:  # the package's own links (a test registry has none)
        problems += _link_problems(theorems)
    for lib, mod in _REQUIRE.findall(strip_comments(text)):
        for m in mod.split():
            full = f"{lib}.{m}" if lib else m
            if not full.startswith("Coq."):
                problems.append(f"proofs/{SPEC_FILE} requires {full}: the record may use "
                                "Coq's standard library only, never the development")
    return problems


def _link_problems(theorems: dict[str, Theorem]) -> list[str]:
    """Every property/mechanism link names a registered theorem; none is orphaned."""
    from exchange.core.vocabulary import MECHANISM_THEOREMS, PROPERTY_THEOREMS

    linked = {t for links in (PROPERTY_THEOREMS, MECHANISM_THEOREMS)
              for ts in links.values() for t in ts}
    problems = [f"exchange/core/vocabulary.py links {t}, which is not registered"
                for t in sorted(linked - set(theorems))]
    problems += [f"{t} is registered but backs no property or mechanism "
                 "(exchange/core/vocabulary.py)" for t in sorted(set(theorems) - linked)]
    return problems


def accept_record(proof_dir: Path, registry_file: Path | None = None,
                  expected: str = SPEC_SHA256) -> str:
    """Record Spec.v as reviewed: rewrite ``SPEC_SHA256`` in the registry and append the
    diff to ``proofs/CHANGES``. Returns the new hash."""
    from exchange.theory import registry

    registry_file = Path(registry_file or registry.__file__)
    new = spec_sha256(proof_dir)
    summary, diff = record_diff(proof_dir, expected)
    source = registry_file.read_text()
    pattern = re.compile(r'^SPEC_SHA256 = "[0-9a-f]*"$', re.MULTILINE)
    if not pattern.search(source):
        raise ValueError(f"{registry_file} has no SPEC_SHA256 line to update")
    registry_file.write_text(pattern.sub(f'SPEC_SHA256 = "{new}"', source, count=1))
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    entry = ["", f"## {stamp}: {expected[:12]} -> {new[:12]}", *[f"- {s}" for s in summary], "",
             "```diff", diff, "```", ""]
    with open(Path(proof_dir) / CHANGES_FILE, "a") as log:
        log.write("\n".join(entry) + "\n")
    _keep_snapshot(proof_dir, (Path(proof_dir) / SPEC_FILE).read_text())
    return new
