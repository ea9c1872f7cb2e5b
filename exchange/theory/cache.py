"""The result cache of ``exchange proofs`` (``exchange.theory.coq.compile_proofs``).

Checking the development costs one coqc pass, most of it ``Print Assumptions`` walking
each theorem's closure; the same sources always give the same statuses, so they are
cached under ``<proofs>/.cache/`` (git-ignored; ``exchange proofs --no-cache`` skips it):

- ``statuses-<key>.json``: every status, keyed by a hash of every input that can change
  them: the content of every ``.v`` file under the proofs folder (and under the load
  path of ``_CoqProject``, wherever it points), ``_CoqProject`` (the reviewed record
  ``spec/Spec.v`` is one of the .v files), the registry of theorems as
  passed in, ``pin``, the coqc version
  and library folder (``coqc --version``, ``coqc -where``), the ``COQ*`` environment
  variables, ``CHECKER_VERSION`` and the source of the checking code itself. A hit
  returns exactly the stored statuses; any change to any of these misses.
- ``assumptions-<key>.json``: the ``Print Assumptions`` answers for one module, keyed
  by the same tool inputs and the content of that module's file and of every file it
  requires (transitively, from ``coqdep``). When one file changes, the theorems of the
  modules that do not depend on it are not asked about again (their axioms are
  confirmed to print under the same names in the same pass, together, at the cost of
  one question).

Entries are written to a temporary file and moved into place with ``os.replace``, so
a concurrent run reads a whole entry or none; an unreadable or malformed entry is a
miss. The folder keeps the newest ``MAX_ENTRIES`` entries.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from exchange.theory.registry import Theorem

__all__ = ["CHECKER_VERSION", "CACHE_DIR", "MAX_ENTRIES", "ResultCache", "cache_dir"]

# Bump when what the checking code computes from the same inputs changes. The source of
# exchange/theory/coq.py and of this module is part of every key as well, so an edit
# without a bump still misses.
CHECKER_VERSION = "5"
CACHE_DIR = ".cache"
MAX_ENTRIES = 256
# Inputs other than the .v files (which are all hashed, wherever they are). Not the
# Makefile nor make's hooks (Makefile.coq.local, CoqMakefile.local): the statuses come
# from the command's own coqc calls (exchange.theory.build), which never run make, and
# the Makefile's pinned hash and the hooks' absence are checked on every run, uncached
# (exchange.theory.development), so neither can change a stored status.
_TOOL_FILES = ("_CoqProject",)


def cache_dir(proof_dir: Path) -> Path:
    return Path(proof_dir) / CACHE_DIR


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_digest(path: Path) -> str:
    try:
        return _digest(path.read_bytes())
    except OSError as exc:  # unreadable now: a key no readable state shares
        return f"unreadable {type(exc).__name__}"


def _key(*parts) -> str:
    return _digest(json.dumps(parts, sort_keys=True, default=str).encode())


def _code_digest() -> str:
    # Every module a status is computed with: the driver and this cache, the build, the
    # axioms' origins, and the record's statements and shape (a witness W_T := H_T a is
    # not asked to apply its theorem: coq.hypothesis_witnessed).
    from exchange.theory import axioms, build, coq, nonvacuity, record

    return _key(CHECKER_VERSION, _file_digest(Path(__file__)),
                *(_file_digest(Path(m.__file__)) for m in (coq, build, axioms, record, nonvacuity)))


# Answers of ``coqc --version`` / ``coqc -where`` in this process (a run asked them about
# a dozen times, each a fork of a process that may hold torch: ~0.4 s of CPU a run),
# keyed by ``_binary_stamp``: the resolved file's identity (inode, size, mtime, ctime)
# and the COQ* environment, so a replaced binary or another COQLIB asks again.
_ANSWERS: dict[tuple, str] = {}


def _binary_stamp(tool: str) -> tuple | None:
    """What a tool's answer to ``--version``/``-where`` depends on, or None (not memoised)."""
    import shutil

    path = shutil.which(tool)
    if path is None:
        return None
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except OSError:
        return None
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("COQ")))
    return (real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, env)


def tool_answer(tool: str, flag: str) -> str | None:
    """``tool flag``'s stdout (stripped), or None when it fails; a success is remembered
    for this process under ``_binary_stamp`` (never a failure: asked again next time)."""
    stamp = _binary_stamp(tool)
    key = (stamp, flag)
    if stamp is not None and key in _ANSWERS:
        return _ANSWERS[key]
    try:
        proc = subprocess.run([tool, flag], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    if stamp is not None:
        _ANSWERS[key] = proc.stdout.strip()
    return proc.stdout.strip()


def coqc_identity(coqc: str) -> str | None:
    """``coqc --version`` and ``coqc -where`` (the standard library it loads), or None."""
    out = [tool_answer(coqc, flag) for flag in ("--version", "-where")]
    if any(o is None for o in out):
        return None
    return "\n".join(out)


_coqc_identity = coqc_identity  # the name this module and its tests use


def _source_files(proof_dir: Path, extra) -> list[Path]:
    """Every .v file under the proofs folder (outside hidden folders such as .cache),
    and ``extra`` (the files under the load path of _CoqProject, wherever they are)."""
    files = set()
    for path in proof_dir.rglob("*.v"):
        if not any(part.startswith(".") for part in path.relative_to(proof_dir).parts[:-1]):
            files.add(path.resolve())
    return sorted(files | {Path(p).resolve() for p in extra})


def _registry_fingerprint(theorems: dict[str, Theorem]) -> list[str]:
    # In order (the statuses come back in registry order); repr names every field.
    return [repr((key, thm)) for key, thm in theorems.items()]


class ResultCache:
    """The cache of one proofs folder, bound to one coqc.

    Open it before building: it takes a snapshot of the inputs (their digests and the
    dependencies between the .v files) that every key is computed from, and
    ``unchanged()`` tells whether they still hold, so that nothing built from files
    edited meanwhile is stored. ``open`` returns None when the cache cannot be used
    (coqc does not answer); reads and writes never raise.
    """

    def __init__(self, proof_dir: Path, coqc: str, coqc_id: str,
                 module_files: dict[str, Path] | None = None) -> None:
        self.proof_dir = Path(proof_dir).resolve()
        self.dir = cache_dir(self.proof_dir)
        self.coqc = coqc
        self.coqc_id = coqc_id
        # qualified module -> its .v file: the modules whose answers are kept (none without)
        self.module_files = {m: Path(p).resolve() for m, p in (module_files or {}).items()}
        self._inputs = self._snapshot()
        self._graph = _coqdep(coqc, self.proof_dir) if self.module_files else {}

    @classmethod
    def open(cls, proof_dir: Path, coqc: str,
             module_files: dict[str, Path] | None = None) -> "ResultCache | None":
        coqc_id = _coqc_identity(coqc)
        return None if coqc_id is None else cls(proof_dir, coqc, coqc_id, module_files)

    def _snapshot(self) -> dict:
        sources = {self._name(p): _file_digest(p)
                   for p in _source_files(self.proof_dir, self.module_files.values())}
        tools = {name: _file_digest(self.proof_dir / name) for name in _TOOL_FILES
                 if (self.proof_dir / name).exists()}
        env = sorted((k, v) for k, v in os.environ.items() if k.startswith("COQ"))
        return {"code": _code_digest(), "coqc": self.coqc_id, "env": env, "tools": tools,
                "sources": sources}

    def _name(self, path: Path) -> str:
        """A file's name in a key: relative to the proofs folder (so a copy of the folder
        shares its entries), absolute outside it."""
        try:
            return str(path.relative_to(self.proof_dir))
        except ValueError:
            return str(path)

    def unchanged(self) -> bool:
        """The inputs are still those of the snapshot taken when the cache was opened."""
        return self._snapshot() == self._inputs

    @property
    def _tool_key(self) -> list:
        return [self._inputs[k] for k in ("code", "coqc", "env", "tools")]

    # --- whole results ------------------------------------------------------------

    def statuses_key(self, theorems: dict[str, Theorem], pin: bool) -> str:
        return _key("statuses", self._tool_key, sorted(self._inputs["sources"].items()),
                    _registry_fingerprint(theorems), bool(pin))

    def load_statuses(self, theorems: dict[str, Theorem], pin: bool):
        from exchange.theory.coq import CHECKED, FAILED, TheoremStatus

        key = self.statuses_key(theorems, pin)
        data = self._read(f"statuses-{key}.json")
        try:
            rows = data["statuses"]
            assert data["key"] == key and len(rows) == len(theorems)
            statuses = []
            for (k, thm), (rk, name, status, detail, axioms) in zip(theorems.items(), rows):
                assert rk == k and name == thm.name and status in (CHECKED, FAILED)
                assert isinstance(detail, str) and all(isinstance(a, str) for a in axioms)
                statuses.append(TheoremStatus(k, name, status, detail, tuple(axioms)))
        except (AssertionError, KeyError, TypeError, ValueError):
            return None  # a miss, or an entry this code cannot read: check again
        return statuses

    def save_statuses(self, theorems: dict[str, Theorem], pin: bool, statuses) -> None:
        key = self.statuses_key(theorems, pin)
        rows = [[s.key, s.name, s.status, s.detail, list(s.axioms)] for s in statuses]
        self._write(f"statuses-{key}.json", {"key": key, "statuses": rows})

    # --- Print Assumptions per module ---------------------------------------------

    def _closure(self, vfile: Path) -> list[Path] | None:
        """``vfile`` and every project file it requires, transitively (None: unknown)."""
        seen: set[Path] = set()
        stack = [vfile]
        while stack:
            path = stack.pop()
            if path in seen:
                continue
            if path not in self._graph:
                return None  # coqdep did not see it: its dependencies are unknown
            seen.add(path)
            stack.extend(self._graph[path])
        return sorted(seen)

    def _module_key(self, module: str) -> str | None:
        vfile = self.module_files.get(module)
        closure = self._closure(vfile) if vfile is not None else None
        if closure is None:
            return None
        sources = self._inputs["sources"]
        digests = [(self._name(p), sources.get(self._name(p))) for p in closure]
        if any(d is None for _, d in digests):
            return None
        return _key("assumptions", self._tool_key, module, digests)

    def _module_keys(self, names: list[str]) -> dict[str, str]:
        keys = {}
        for module in sorted({n.rsplit(".", 1)[0] for n in names}):
            key = self._module_key(module)
            if key is not None:
                keys[module] = key
        return keys

    def reusable_assumptions(self, names: list[str]) -> dict[str, tuple[str, ...]]:
        """name -> assumptions stored for its module with its current sources."""
        keys = self._module_keys(names)
        result: dict[str, tuple[str, ...]] = {}
        for module, key in keys.items():
            stored = self._read_assumptions(key)
            for name in names:
                if name.rsplit(".", 1)[0] == module and name in stored:
                    result[name] = stored[name]
        return result

    def save_assumptions(self, found: dict[str, tuple[str, ...]]) -> None:
        for module, key in self._module_keys(list(found)).items():
            stored = self._read_assumptions(key)
            new = {**stored, **{n: a for n, a in found.items() if n.rsplit(".", 1)[0] == module}}
            if new != stored:
                self._write(f"assumptions-{key}.json",
                            {"key": key, "axioms": {n: list(a) for n, a in new.items()}})

    def _read_assumptions(self, key: str) -> dict[str, tuple[str, ...]]:
        data = self._read(f"assumptions-{key}.json")
        try:
            assert data["key"] == key
            return {str(n): tuple(str(a) for a in axioms) for n, axioms in data["axioms"].items()}
        except (AssertionError, AttributeError, KeyError, TypeError):
            return {}

    # --- files ----------------------------------------------------------------------

    def _read(self, name: str):
        try:
            return json.loads((self.dir / name).read_text())
        except (OSError, ValueError):
            return None

    def _write(self, name: str, data) -> None:
        tmp = None
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            ignore = self.dir / ".gitignore"
            if not ignore.exists():
                ignore.write_text("# exchange proofs' result cache (exchange.theory.cache)\n*\n")
            fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".tmp-", suffix=".json")
            with os.fdopen(fd, "w") as handle:
                json.dump(data, handle)
            os.replace(tmp, self.dir / name)
            tmp = None
            self._prune()
        except OSError:
            pass  # a read-only tree, a full disk: the cache is only a shortcut
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass

    def _prune(self) -> None:
        """Keep the newest MAX_ENTRIES entries; drop temporary files an interrupted run left."""
        entries = []
        for path in self.dir.iterdir():
            try:
                mtime = path.stat().st_mtime
                if path.name.startswith(".tmp-") and mtime < time.time() - 3600:
                    path.unlink()
                elif path.suffix == ".json" and not path.name.startswith("."):
                    entries.append((mtime, path))
            except OSError:
                continue  # removed by a concurrent run
        for _, path in sorted(entries, reverse=True)[MAX_ENTRIES:]:
            try:
                path.unlink()
            except OSError:
                pass


def _coqdep(coqc: str, proof_dir: Path) -> dict[Path, list[Path]]:
    """``coqdep -f _CoqProject``: project .v file -> the project .v files it requires."""
    coqdep = Path(coqc).with_name("coqdep")
    command = str(coqdep) if coqdep.exists() else "coqdep"
    try:
        proc = subprocess.run([command, "-f", "_CoqProject"], capture_output=True, text=True,
                              cwd=proof_dir, timeout=300)
    except (OSError, subprocess.SubprocessError):
        return {}
    if proc.returncode != 0:
        return {}
    graph: dict[Path, list[Path]] = {}
    for line in proc.stdout.splitlines():
        targets, sep, deps = line.partition(":")
        first = targets.split()[0] if targets.split() else ""
        if not sep or not first.endswith(".vo"):
            continue
        vfile = (proof_dir / first).with_suffix(".v").resolve()
        graph[vfile] = [(proof_dir / d).with_suffix(".v").resolve()
                        for d in deps.split() if d.endswith(".vo")]
    return graph
