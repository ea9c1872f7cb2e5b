"""Build the development with our own coqc calls, and the record from its hashed bytes (issue 43).

``exchange proofs`` never checks against what ``make`` left in ``proofs/``: a second
folder bound to a logical name, or a make hook that recompiles ``Spec.vo`` from another
file, would otherwise be what the kernel loads. Instead:

- the record: the bytes of ``proofs/spec/Spec.v`` are read once, hashed (the hash the
  record check compares with ``SPEC_SHA256``), written to a fresh folder and compiled
  there with plain ``coqc`` under a fresh logical name ``ExchangeSpec_<sha12>``; every
  pin names that module (``Build.spec_module``);
- the development: every ``.v`` file under the load paths of ``_CoqProject`` except the
  record's folder is copied to ``<proofs>/.build/<key>/`` and compiled there, in
  ``coqdep`` order, with ``coqc`` and only the ``-Q``/``-R`` flags of ``_CoqProject``
  (``project_flags`` refuses any other option). Print Assumptions, the pins, coqchk
  and the code link load that folder (``Build.flags``), nothing of ``proofs/``'s own.

Compiled ``.vo`` files are kept in ``<proofs>/.cache/vo/`` under a hash of the coqc
identity, the module's logical name, its source and the keys of the modules it
requires, and reused only when their recorded sha256 still matches: a copy of the tree
recompiles only what changed. With ``fresh`` (``CI=true``, ``--no-cache``) nothing is
reused: the build is from clean. ``<proofs>/.build`` ignores itself for git.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Build", "SPEC_FILE", "build_development", "in_ci", "source_roots"]

SPEC_FILE = "spec/Spec.v"
BUILD_DIR = ".build"
_KEEP_BUILDS = 4
MANIFEST = "manifest.json"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


@dataclass
class Build:
    """The development compiled by ``build_development``."""

    root: Path  # the build folder
    flags: list[str]  # -Q/-R flags mapping the built roots (and the fresh record)
    modules: list[str]  # logical names of the development's modules, in build order
    spec_module: str = ""  # the record compiled from its hashed bytes ("" when none)
    spec_sha: str = ""  # sha256 of the bytes that were compiled
    error: str = ""  # "" or why the build failed (coqc's output tail, file, declaration)
    compiled: list[str] = field(default_factory=list)  # modules compiled now (not reused)

    @property
    def ok(self) -> bool:
        return not self.error


def source_roots(proof_dir: Path) -> list[tuple[str, str, str]]:
    """(flag, folder relative to proofs/, logical name) for every -Q/-R line of _CoqProject."""
    roots = []
    for line in (Path(proof_dir) / "_CoqProject").read_text().splitlines():
        parts = line.split("#", 1)[0].split()
        if len(parts) == 3 and parts[0] in ("-Q", "-R"):
            roots.append((parts[0], parts[1], parts[2]))
    return roots


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _coqc_identity(coqc: str) -> str:
    from exchange.theory.cache import coqc_identity as ident

    return ident(coqc) or coqc


def _order(coqc: str, work: Path, flags: list[str], files: list[str]) -> dict[str, list[str]]:
    """relative .v file -> the project .v files it requires (coqdep), in file order."""
    coqdep = Path(coqc).with_name("coqdep")
    command = str(coqdep) if coqdep.exists() else "coqdep"
    proc = subprocess.run([command, *flags, *files], capture_output=True, text=True,
                          cwd=work, timeout=300, check=False)
    deps: dict[str, list[str]] = {f: [] for f in files}
    for line in proc.stdout.splitlines():
        targets, sep, rest = line.partition(":")
        first = targets.split()[0] if targets.split() else ""
        if sep and first.endswith(".vo"):
            src = first[:-3] + ".v"
            if src in deps:
                deps[src] = [d[:-3] + ".v" for d in rest.split() if d.endswith(".vo")
                             and d[:-3] + ".v" in deps and d[:-3] + ".v" != src]
    return deps


def _topological(deps: dict[str, list[str]]) -> list[str]:
    out: list[str] = []
    state: dict[str, int] = {}

    def visit(f: str) -> None:
        if state.get(f) == 2:
            return
        if state.get(f) == 1:
            return  # a cycle: coqc reports it
        state[f] = 1
        for d in deps[f]:
            visit(d)
        state[f] = 2
        out.append(f)

    for f in sorted(deps):
        visit(f)
    return out


def _store_get(store: Path | None, key: str) -> bytes | None:
    if store is None:
        return None
    try:
        data = (store / f"{key}.vo").read_bytes()
        if (store / f"{key}.sha256").read_text().strip() == _sha(data):
            return data
    except OSError:
        pass
    return None


def _store_put(store: Path | None, key: str, data: bytes) -> None:
    if store is None:
        return
    try:
        store.mkdir(parents=True, exist_ok=True)
        for suffix, payload in ((".vo", data), (".sha256", _sha(data).encode())):
            fd, tmp = tempfile.mkstemp(dir=store, prefix=".tmp-")
            with os.fdopen(fd, "wb") as handle:
                handle.write(payload)
            os.replace(tmp, store / f"{key}{suffix}")
    except OSError:
        pass  # the store is a shortcut only


def _module(rel: str, roots: list[tuple[str, str, str]]) -> str:
    for _, folder, lib in roots:
        prefix = folder.rstrip("/") + "/"
        if rel.startswith(prefix):
            parts = Path(rel[len(prefix):]).with_suffix("").parts
            return ".".join([lib, *parts])
    return Path(rel).stem


def _compile(coqc: str, flags: list[str], rel: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([coqc, "-q", *flags, rel], capture_output=True, text=True, cwd=cwd,
                          timeout=1800, check=False)


def build_development(proof_dir: Path, coqc: str, *, fresh: bool = False,
                      spec: bool = True) -> Build:
    """Compile the record (from its hashed bytes) and the development into a private folder.

    ``fresh`` reuses nothing (CI, ``--no-cache``). The folder is named by a hash of every
    input, so two runs of one tree share it and two trees never do.
    """
    proof_dir = Path(proof_dir).resolve()
    roots = source_roots(proof_dir)
    spec_path = proof_dir / SPEC_FILE
    spec_bytes = spec_path.read_bytes() if spec and spec_path.is_file() else None
    spec_folder = str(Path(SPEC_FILE).parent)
    dev_roots = [r for r in roots if r[1].rstrip("/") != spec_folder]
    files: dict[str, bytes] = {}
    for _, folder, _ in dev_roots:
        base = proof_dir / folder
        for v in sorted(base.rglob("*.v")) if base.is_dir() else []:
            files[str(v.relative_to(proof_dir))] = v.read_bytes()
    ident = _coqc_identity(coqc)
    tree = _sha(repr((ident, dev_roots, sorted((k, _sha(b)) for k, b in files.items()),
                      _sha(spec_bytes) if spec_bytes is not None else None)).encode())
    builds = proof_dir / BUILD_DIR
    builds.mkdir(exist_ok=True)
    ignore = builds / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# exchange proofs' private build (exchange.theory.build)\n*\n")
    final = builds / tree
    if not fresh:
        done = _load_manifest(final)
        if done is not None:
            return done
    work = Path(tempfile.mkdtemp(dir=builds, prefix=f".tmp-{tree[:12]}-"))
    for rel, data in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_bytes(data)
    flags = [x for flag, folder, lib in dev_roots for x in (flag, folder, lib)]
    store = None if fresh else proof_dir / ".cache" / "vo"
    result = Build(root=work, flags=[], modules=[])
    keys: dict[str, str] = {}
    deps = _order(coqc, work, flags, list(files))
    for rel in _topological(deps):
        module = _module(rel, dev_roots)
        key = _sha(repr((ident, module, _sha(files[rel]), [keys[d] for d in deps[rel]],
                         dev_roots)).encode())
        keys[rel] = key
        vo = (work / rel).with_suffix(".vo")
        cached = _store_get(store, key)
        if cached is not None:
            vo.write_bytes(cached)
        else:
            proc = _compile(coqc, flags, rel, work)
            if proc.returncode != 0:
                result.error = _located(work, rel, proc.stdout + proc.stderr)
                break
            _store_put(store, key, vo.read_bytes())
            result.compiled.append(module)
        result.modules.append(module)
    if spec_bytes is not None and not result.error:
        result.spec_sha = _sha(spec_bytes)
        lib = f"ExchangeSpec_{result.spec_sha[:12]}"
        folder = work / f"record-{result.spec_sha[:12]}"
        folder.mkdir()
        (folder / "Spec.v").write_bytes(spec_bytes)
        key = _sha(repr((ident, lib, result.spec_sha)).encode())
        cached = _store_get(store, key)
        if cached is not None:
            (folder / "Spec.vo").write_bytes(cached)
        else:
            proc = _compile(coqc, ["-Q", folder.name, lib], f"{folder.name}/Spec.v", work)
            if proc.returncode != 0:
                result.error = ("the reviewed record proofs/spec/Spec.v does not compile on its "
                                "own with plain coqc:\n" + _tail(proc.stdout + proc.stderr))
            else:
                _store_put(store, key, (folder / "Spec.vo").read_bytes())
        result.spec_module = f"{lib}.Spec"
        flags += ["-Q", folder.name, lib]
    result.flags = flags
    if result.error:
        result.root = work  # removed by _prune later; nothing loads a failed build
        return result
    (work / MANIFEST).write_text(json.dumps({
        "modules": result.modules, "spec_module": result.spec_module,
        "spec_sha": result.spec_sha, "flags": flags}))
    if final.exists():  # a fresh rebuild, or a concurrent run of the same tree
        shutil.rmtree(final, ignore_errors=True)
    try:
        os.replace(work, final)
    except OSError:  # a concurrent run put it back meanwhile: use ours where it is
        final = work
    result.root = final
    result.flags = _absolute(flags, final)
    _prune(builds, keep=final)
    return result


def _absolute(flags: list[str], root: Path) -> list[str]:
    return [x if i % 3 != 1 else str(root / x) for i, x in enumerate(flags)]


def _load_manifest(folder: Path) -> Build | None:
    try:
        data = json.loads((folder / MANIFEST).read_text())
        return Build(root=folder, flags=_absolute(list(data["flags"]), folder),
                     modules=list(data["modules"]), spec_module=str(data["spec_module"]),
                     spec_sha=str(data["spec_sha"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _tail(text: str, n: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def _located(work: Path, rel: str, output: str) -> str:
    from exchange.theory.coq import failed_declaration

    where = failed_declaration(work, output) or f" in {rel}"
    return f"coqc build of proofs/ failed{where}:\n{_tail(output)}"


def _prune(builds: Path, keep: Path) -> None:
    """Keep the newest few build folders; drop temporary ones older than an hour."""
    import time

    entries = []
    for path in builds.iterdir():
        if not path.is_dir() or path == keep:
            continue
        try:
            mtime = path.stat().st_mtime
        except OSError:
            continue
        if path.name.startswith(".tmp-"):
            if mtime < time.time() - 3600:
                shutil.rmtree(path, ignore_errors=True)
        else:
            entries.append((mtime, path))
    for _, path in sorted(entries, reverse=True)[_KEEP_BUILDS - 1:]:
        shutil.rmtree(path, ignore_errors=True)
