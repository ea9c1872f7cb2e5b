"""The README is a newcomer's path that runs: its code blocks, with their printed output.

The blocks are read by their fence's language:

- ``python`` whose first line is ``# NAME.py``: a file the reader writes; written to NAME.py
  in a fresh directory;
- ``console``: each ``$ COMMAND`` line runs there in a shell, and the lines up to the next
  ``$`` are its expected output;
- ``pycon``: a doctest, run there;
- ``bash``: install and test-suite commands. They are not run here (they install packages
  or take minutes; ``.ci/run`` runs the test command), only checked against their sources.

Blocks run in the README's order, as a reader would. Output is compared with doctest's
``ELLIPSIS`` (``...`` stands for omitted text) and ``NORMALIZE_WHITESPACE`` (rich pads its
lines). A residual printed below ``1e-12`` is round-off: its digits depend on the CPU and
the BLAS, not on the package, so both sides read it as ``<round-off>``.
"""

from __future__ import annotations

import doctest
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.M | re.S)
ROUND_OFF = re.compile(r"\b\d\.\d\de-(1[2-9]|[2-9]\d)\b")
CHECKER = doctest.OutputChecker()
OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def blocks(language: str | None = None) -> list[tuple[str, str]]:
    found = [(m[1], m[2]) for m in FENCE.finditer(README)]
    return [b for b in found if language is None or b[0] == language]


def _same(expected: str, got: str) -> bool:
    expected, got = ROUND_OFF.sub("<round-off>", expected), ROUND_OFF.sub("<round-off>", got)
    return CHECKER.check_output(expected, got, OPTIONS)


def _console_commands(text: str) -> list[tuple[str, str]]:
    """``[(command, expected output)]`` of a console block."""
    out: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        else:
            assert out, f"console block starts with output, not a '$ ' command: {line!r}"
            out[-1][1].append(line)
    return [(cmd, "\n".join(lines) + "\n") for cmd, lines in out]


def test_readme_fits_a_five_minute_read():
    lines = README.count("\n")
    assert lines <= 200, f"README.md has {lines} lines; keep it at most 200 (move details to docs/)"
    assert len(README) <= 12_000, f"README.md has {len(README)} characters; keep it at most 12,000"


def test_readme_links_point_to_files():
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    local = [t for t in targets if not re.match(r"[a-z]+://", t)]
    assert local, "the README links to no docs page"
    missing = [t for t in local if not (REPO / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_install_lines_match_the_pins():
    install = "\n".join(text for lang, text in blocks("bash"))
    pinned = re.search(r"^torch==(\S+)$", (REPO / "constraints.txt").read_text(), re.M)[1]
    assert f"pip install torch=={pinned} " in install, "the README installs another torch than constraints.txt pins"
    assert 'pip install -e ".[dev]" -c constraints.txt' in install
    assert "python -m pytest -q" in install, "the README must give the test command CI runs (.ci/run)"
    assert "python -m pytest -q" in (REPO / ".ci" / "run").read_text()


def test_extras_table_names_every_extra():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    in_table = set(re.findall(r"^\| `(\w+)` \|", README, re.M))
    assert in_table == extras, f"README's extras table names {sorted(in_table)}, pyproject.toml has {sorted(extras)}"


def test_requires_python_is_the_one_the_readme_states():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    version = re.fullmatch(r">=\s*(3\.\d+)", requires)[1]
    assert f"Python {version} or newer" in README


@pytest.mark.slow
def test_readme_blocks_run_with_their_output(tmp_path, monkeypatch):
    """Every block in order: files written, commands and doctests run, outputs compared."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(tmp_path), "COLUMNS": "120"}
    env.pop("EXCHANGE_DEBUG", None)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    ran = {"file": 0, "console": 0, "pycon": 0}
    for language, text in blocks():
        if language == "python":
            first = text.splitlines()[0]
            name = re.fullmatch(r"# (\w+\.py)", first)
            assert name, f"a python block must start with '# NAME.py' (the file the reader writes): {first!r}"
            (tmp_path / name[1]).write_text(text)
            # another test may have imported a module of that name: the reader's file wins
            monkeypatch.delitem(sys.modules, name[1].removesuffix(".py"), raising=False)
            ran["file"] += 1
        elif language == "console":
            for command, expected in _console_commands(text):
                proc = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True,
                                      timeout=300)
                assert proc.returncode in (0, 1), f"$ {command} exited {proc.returncode}:\n{proc.stderr}"
                assert _same(expected, proc.stdout), f"$ {command} printed:\n{proc.stdout}\nREADME says:\n{expected}"
                ran["console"] += 1
        elif language == "pycon":
            test = doctest.DocTestParser().get_doctest(text, {}, "README.md", "README.md", 0)
            runner = doctest.DocTestRunner(optionflags=OPTIONS)
            runner.run(test)
            assert runner.failures == 0, "a pycon block of README.md printed something else (doctest output above)"
            ran["pycon"] += 1
        else:
            assert language == "bash", f"README block in {language!r}: use python, console, pycon or bash"
    assert ran["file"] >= 2 and ran["console"] >= 2 and ran["pycon"] >= 1, f"too little of the README ran: {ran}"
