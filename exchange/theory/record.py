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
  development would check the development against itself);
- every theorem with hypotheses is stated as ``forall x, H_T x -> C_T x`` and witnessed
  by ``W_T := H_T a`` at G >= 2 and advantages of both signs, so that no theorem holds
  vacuously (``exchange.theory.nonvacuity``).

The repository has one branch and no tags, so the anchor is this hash, not a release.
"""

from __future__ import annotations

import datetime
import difflib
import hashlib
import re
import subprocess
from pathlib import Path

from exchange.theory import nonvacuity
from exchange.theory.coq import strip_comments
from exchange.theory.registry import NO_HYPOTHESES, SPEC_SHA256, THEOREMS, Theorem

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
# A theorem's hypothesis and conclusion predicates (H_T, C_T: exchange.theory.nonvacuity),
# statements of the record too: a re-pin that changes one is listed by name.
_PREDICATE = re.compile(r"^Definition\s+([HC]_[\w']+)\s", re.MULTILINE)
_REQUIRE = re.compile(r"(?:From\s+([\w.']+)\s+)?Require\s+(?:(?:Import|Export)\s+)?"
                      r"((?:[\w'.]+\s+)*?[\w'.]+?)\s*\.(?=\s|$)")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def spec_sha256(proof_dir: Path) -> str:
    return _sha((Path(proof_dir) / SPEC_FILE).read_text())


def _blocks(text: str) -> dict[str, str]:
    """Statement name -> its text (whitespace-normalised), comments and strings aside."""
    code = strip_comments(text)
    starts = sorted({(m.start(), m.group(1)) for pattern in (_STATEMENT, _PREDICATE)
                     for m in pattern.finditer(code)})
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
            | {t.false_witness for t in theorems.values() if getattr(t, "false_witness", "")}
            | {f"{p}_{k}" for k in theorems if k not in NO_HYPOTHESES for p in "HC"})


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
                 expected: str = SPEC_SHA256, compiled_sha: str | None = None) -> list[str]:
    """Every way the record disagrees with the registry, its hash and its trail in
    proofs/CHANGES (empty: none). ``compiled_sha``: the hash of the bytes the build
    compiled as the record; they must be the bytes hashed here."""
    theorems = THEOREMS if theorems is None else theorems
    path = Path(proof_dir) / SPEC_FILE
    if not path.is_file():
        return [f"the reviewed record proofs/{SPEC_FILE} is missing"]
    text = path.read_text()
    problems = []
    sha = _sha(text)
    if compiled_sha is not None and compiled_sha != sha:
        problems.append(f"proofs/{SPEC_FILE} changed while it was checked (compiled "
                        f"{compiled_sha[:12]}..., now {sha[:12]}...): run again")
    if theorems is THEOREMS and expected == SPEC_SHA256:  # the package's own record
        problems += trail_problems(proof_dir, expected)
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
    problems += nonvacuity.problems(_blocks(text), " ".join(strip_comments(text).split()),
                                    theorems, NO_HYPOTHESES)
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


def _entries(text: str) -> list[str]:
    """The entries of proofs/CHANGES (each from its ``## `` header)."""
    parts = re.split(r"(?m)^(?=## )", text)
    return [p for p in parts if p.startswith("## ")]


def _norm(text: str) -> str:
    return " ".join(text.split())


def trail_problems(proof_dir: Path, expected: str = SPEC_SHA256,
                   pins_expected: str | None = None) -> list[str]:
    """The last proofs/CHANGES entry must name the current ``SPEC_SHA256`` and
    ``PINS_SHA256`` in full, and give the old and new text of every statement it says
    changed (the new text being the record's now). What this cannot stop: an author who
    edits Spec.v, the hash and CHANGES together (docs/proofs.md, trust model)."""
    from exchange.theory.pins import PINS_FILE, pins_sha256
    from exchange.theory.registry import PINS_SHA256

    pins_expected = PINS_SHA256 if pins_expected is None else pins_expected
    try:
        entries = _entries((Path(proof_dir) / CHANGES_FILE).read_text())
    except OSError:
        entries = []
    if not entries:
        return [f"proofs/{CHANGES_FILE} has no entry: every re-pin leaves one "
                "(`exchange proofs --write-statements --accept` writes it)"]
    last = entries[-1]
    problems = []
    if f"spec {expected}" not in last:
        problems.append(f"the last entry of proofs/{CHANGES_FILE} does not name the current "
                        f"SPEC_SHA256 {expected[:12]}... (`spec <sha256>`): Spec.v or the hash "
                        "changed without a logged re-pin")
    if pins_sha256(proof_dir) != "missing" and f"pins {pins_expected}" not in last:
        problems.append(f"the last entry of proofs/{CHANGES_FILE} does not name the current "
                        f"PINS_SHA256 {pins_expected[:12]}... (`pins <sha256>`): {PINS_FILE} or "
                        "the hash changed without a logged re-pin")
    current = record_statements(proof_dir)
    for name in re.findall(r"(?m)^- statement (\S+) (?:changed|added to the record)", last):
        block = re.search(rf"(?ms)^new {re.escape(name)}:\n(.*?)^(?:old |new |```|$)", last)
        if name in current and (block is None or _norm(block.group(1)) != current[name]):
            problems.append(f"the last entry of proofs/{CHANGES_FILE} lists statement {name} "
                            "without its new text as the record has it (`new <name>:` block)")
    for name in re.findall(r"(?m)^- statement (\S+) changed", last):
        if not re.search(rf"(?m)^old {re.escape(name)}:\n", last):
            problems.append(f"the last entry of proofs/{CHANGES_FILE} lists statement {name} "
                            "as changed without its old text (`old <name>:` block)")
    return problems


def last_entry_statements(proof_dir: Path) -> list[str]:
    """The last proofs/CHANGES entry without its diff block: its header, hashes, why,
    the statements it changed and their old and new text (printed in CI's log)."""
    try:
        entries = _entries((Path(proof_dir) / CHANGES_FILE).read_text())
    except OSError:
        return []
    if not entries:
        return []
    return [ln for ln in entries[-1].split("```diff", 1)[0].splitlines() if ln.strip()]


def changes_shrank(old: str, new: str) -> bool:
    """Whether proofs/CHANGES lost text relative to an earlier version (it is append-only)."""
    return not new.startswith(old)


def _replace_hash(registry_file: Path, name: str, value: str) -> None:
    source = registry_file.read_text()
    pattern = re.compile(rf'^{name} = "[0-9a-f]*"$', re.MULTILINE)
    if not pattern.search(source):
        raise ValueError(f"{registry_file} has no {name} line to update")
    registry_file.write_text(pattern.sub(f'{name} = "{value}"', source, count=1))


def accept_record(proof_dir: Path, registry_file: Path | None = None,
                  expected: str = SPEC_SHA256, why: str = "") -> str:
    """Record Spec.v and the Python side as reviewed: rewrite ``SPEC_SHA256`` and
    ``PINS_SHA256`` in the registry, rewrite proofs/spec/pins.json from the code, and
    append an entry to ``proofs/CHANGES``: both hashes in full, the old and new text of
    every changed statement, the diff. Returns the new Spec.v hash."""
    from exchange.theory import registry
    from exchange.theory.pins import PINS_FILE, write_pins

    registry_file = Path(registry_file or registry.__file__)
    new = spec_sha256(proof_dir)
    summary, diff = record_diff(proof_dir, expected)
    old_text = _reviewed_text(proof_dir, expected)
    before = _blocks(old_text) if old_text is not None else {}
    after = record_statements(proof_dir)
    pins_path = Path(proof_dir) / PINS_FILE
    old_pins = pins_path.read_text() if pins_path.is_file() else ""
    pins = write_pins(proof_dir)
    pins_diff = "\n".join(difflib.unified_diff(old_pins.splitlines(),
                                               pins_path.read_text().splitlines(),
                                               f"reviewed {PINS_FILE}", f"current {PINS_FILE}",
                                               lineterm=""))
    _replace_hash(registry_file, "SPEC_SHA256", new)
    _replace_hash(registry_file, "PINS_SHA256", pins)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    texts = []
    for name in sorted(after):
        if before.get(name) != after[name] and (name in before or old_text is not None):
            if name in before:
                texts += [f"old {name}:", before[name]]
            texts += [f"new {name}:", after[name]]
    entry = ["", f"## {stamp}: {expected[:12]} -> {new[:12]}", f"spec {new}", f"pins {pins}",
             *([f"- why: {why}"] if why else []), *[f"- {s}" for s in summary], "", *texts, "",
             "```diff", diff, pins_diff, "```", ""]
    with open(Path(proof_dir) / CHANGES_FILE, "a") as log:
        log.write("\n".join(entry) + "\n")
    _keep_snapshot(proof_dir, (Path(proof_dir) / SPEC_FILE).read_text())
    return new
