"""docs/performance.md, the page the benchmarks write (issue 40, "Numbers that cannot go
stale"): every expected section is there, generated (a header naming its date, commit,
machine and command), measured at a commit of this history; and the writer
(benchmarks/_page.py) rewrites one section without touching anything else. No timings."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "performance.md"

# Every section the page must hold, by the script that writes it.
EXPECTED = (
    ("composition_agreement", "agreement"),
    ("checker_speed", "check"),
    ("checker_speed", "bulk"),
    ("checker_speed", "event-keys"),
    ("checker_speed", "inspect"),
    ("checker_speed", "audit"),
    ("trl_callback_overhead", "overhead"),
    ("paramspace", "cost"),
    ("suite_time", "tiers"),
)


def _load_page():
    spec = importlib.util.spec_from_file_location("_benchmarks_page", ROOT / "benchmarks" / "_page.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


page = _load_page()


def _sections() -> dict:
    return page.sections(PAGE.read_text())


def _git(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def test_every_expected_section_is_generated():
    found = _sections()
    missing = [f"{s}:{n}" for s, n in EXPECTED if (s, n) not in found]
    assert not missing, f"docs/performance.md lacks {missing}: run the commands its introduction lists with --write-docs"
    for (script, name), content in found.items():
        header = content.splitlines()[0] if content.strip() else ""
        fields = page.parse_header(header)
        assert set(page.FIELDS) <= set(fields), (
            f"section {script}:{name} has no generated header (got {header!r}): rerun its script with --write-docs")
        assert all(fields[f] for f in page.FIELDS), (script, name, fields)
        assert fields["command"].startswith(f"python benchmarks/{script}.py"), (script, name, fields["command"])
        assert "--write-docs" in fields["command"], (script, name, fields["command"])
        assert fields["date"][:4].isdigit() and "UTC" in fields["date"], (script, name, fields["date"])
        assert "cores" in fields["machine"] and "torch" in fields["machine"], (script, name, fields["machine"])
        assert content.strip() != header.strip(), f"section {script}:{name} has a header and no figures"


def test_the_introduction_names_every_section():
    text = PAGE.read_text()
    intro = text[: text.index("\n## Results")]
    for script, name in EXPECTED:
        assert f"`{script}:{name}`" in intro, f"the introduction of docs/performance.md does not explain {script}:{name}"
        assert f"python benchmarks/{script}.py" in intro


def test_every_section_was_measured_at_a_commit_of_this_history():
    if shutil.which("git") is None or _git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout: the sections' commits cannot be looked up")
    shallow = _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true"
    for (script, name), content in _sections().items():
        commit = page.parse_header(content.splitlines()[0]).get("commit", "")
        sha = commit.removesuffix("+dirty")
        assert sha and sha != "unknown", f"section {script}:{name} names no commit"
        if _git("cat-file", "-e", f"{sha}^{{commit}}").returncode != 0:
            if shallow:
                pytest.skip(f"shallow clone: commit {sha} of {script}:{name} is not in it")
            pytest.fail(f"section {script}:{name} names commit {sha}, which this repository does not have")
        res = _git("merge-base", "--is-ancestor", sha, "HEAD")
        assert res.returncode == 0, f"section {script}:{name} was measured at {sha}, not an ancestor of HEAD"


# ---- the writer, on temp files -------------------------------------------------------

class _Prov(page.Provenance):
    def __init__(self, command: str = "python benchmarks/x.py --write-docs") -> None:
        self.date, self.commit, self.machine, self.command = "2026-01-02 03:04 UTC", "abc1234", "CPU, 2 cores", command


def test_write_section_rewrites_one_section_and_nothing_else(tmp_path):
    path = tmp_path / "perf.md"
    before = ("# Title\n\nprose with <!-- a comment --> and `markers`\n\n"
              "<!-- BEGIN a:one -->\nold one\n<!-- END a:one -->\n"
              "between\n"
              "<!-- BEGIN b:two -->\nold two\nmore | table |\n<!-- END b:two -->\n\ntail without newline")
    path.write_text(before)
    page.write_section("a", "one", "| x |\n|---|\n| 1 |\n", _Prov(), path)
    after = path.read_text()
    i, j = after.index("<!-- BEGIN a:one -->"), after.index("<!-- END a:one -->")
    k = before.index("<!-- END a:one -->")
    assert after[:i] == before[: before.index("<!-- BEGIN a:one -->")]
    assert after[j:] == before[k:]
    content = page.sections(after)["a", "one"]
    fields = page.parse_header(content.splitlines()[0])
    assert fields.pop("date").startswith("2026-01-02 03:04 UTC")
    assert fields == {"commit": "abc1234", "machine": "CPU, 2 cores", "command": "python benchmarks/x.py --write-docs"}
    assert content.endswith("| x |\n|---|\n| 1 |\n")
    assert page.sections(after)["b", "two"] == "old two\nmore | table |\n"
    # Rewriting again replaces, it does not nest or duplicate.
    page.write_section("a", "one", "new", _Prov(), path)
    again = path.read_text()
    assert again.count("<!-- BEGIN a:one -->") == 1 and "| x |" not in again
    assert again[again.index("<!-- END a:one -->"):] == before[k:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["perf.md"]  # no temp or lock file left


def test_write_section_appends_a_new_section_and_creates_the_page(tmp_path):
    path = tmp_path / "docs" / "perf.md"
    page.write_section("s", "x", "figures", _Prov(), path)
    page.write_section("s", "y", "more", _Prov(), path)
    text = path.read_text()
    assert list(page.sections(text)) == [("s", "x"), ("s", "y")]
    first = text[: text.index("<!-- BEGIN s:y -->")]
    page.write_section("s", "y", "changed", _Prov(), path)
    assert path.read_text().startswith(first)


def test_broken_markers_are_refused_and_the_page_kept(tmp_path):
    path = tmp_path / "perf.md"
    broken = "<!-- END a:one -->\n<!-- BEGIN a:one -->\n"
    path.write_text(broken)
    with pytest.raises(ValueError, match="broken section"):
        page.write_section("a", "one", "x", _Prov(), path)
    assert path.read_text() == broken
    with pytest.raises(ValueError, match="must match"):
        page.replace_section("", "a b", "c", "x")


def test_command_line_and_dirty_commit(tmp_path):
    assert page.command_line([str(ROOT / "benchmarks" / "checker_speed.py"), "--audit", "10", "a b"]) == (
        "python benchmarks/checker_speed.py --audit 10 'a b'")
    if shutil.which("git") is None:
        pytest.skip("no git")
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    for d in ("exchange", "docs"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "f.py").write_text("x = 1\n")
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-qm", "x"]):
        subprocess.run(["git", *cmd], cwd=tmp_path, env=env, check=True)
    head = _git("rev-parse", "--short", "HEAD", cwd=tmp_path).stdout.strip()
    assert page.commit(tmp_path) == head
    (tmp_path / "docs" / "f.py").write_text("x = 2\n")  # outside exchange/ and benchmarks/: still clean
    assert page.commit(tmp_path) == head
    (tmp_path / "exchange" / "g.py").write_text("y = 1\n")
    assert page.commit(tmp_path) == head + "+dirty"
