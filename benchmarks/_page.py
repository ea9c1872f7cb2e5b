"""docs/performance.md, the one page of performance figures, written by the benchmarks.

A benchmark run with ``--write-docs`` rewrites its own sections of the page, each between

    <!-- BEGIN <script>:<section> -->
    ...
    <!-- END <script>:<section> -->

and leaves every byte outside them as it was. A section starts with one header line
naming the date (UTC), the commit (``git rev-parse --short HEAD``, with ``+dirty`` when
``exchange/`` or ``benchmarks/`` has uncommitted changes), the machine and the exact
command line that produced it; the figures follow as markdown. The page is written
atomically (a temp file beside it, then ``os.replace``) under a lock on its folder, so
two benchmarks may write their sections at once. A section whose markers are not on the
page yet is appended at its end.

Nothing here imports torch or the package: the scripts call it after measuring.
"""

from __future__ import annotations

import datetime
import fcntl
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "performance.md"

#: The fields of a section's header line, in order.
FIELDS = ("date", "commit", "machine", "command")
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_SEP = " · "


def begin_marker(script: str, section: str) -> str:
    return f"<!-- BEGIN {script}:{section} -->"


def end_marker(script: str, section: str) -> str:
    return f"<!-- END {script}:{section} -->"


def _git(*args: str, root: Path = ROOT) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def commit(root: Path = ROOT) -> str:
    """``git rev-parse --short HEAD``, plus ``+dirty`` when ``exchange/`` or ``benchmarks/``
    has uncommitted changes (untracked files included); ``unknown`` outside a git checkout."""
    head = _git("rev-parse", "--short", "HEAD", root=root)
    if not head:
        return "unknown"
    status = _git("status", "--porcelain", "--", "exchange", "benchmarks", root=root)
    return head + ("+dirty" if status else "")


def machine() -> str:
    """CPU model, core count, the load when the run started, torch and Python versions."""
    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    model = model or platform.processor() or platform.machine() or "unknown CPU"
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = "not installed"
    bits = [model, f"{os.cpu_count()} cores"]
    try:
        bits.append(f"load {os.getloadavg()[0]:.1f} at the start")
    except OSError:
        pass
    bits += [f"torch {torch}", f"Python {platform.python_version()}"]
    return ", ".join(bits)


def command_line(argv: list[str] | None = None) -> str:
    """The command as typed from the repository root: ``python <script relative to the
    root> <arguments>``."""
    argv = list(sys.argv if argv is None else argv)
    script = Path(argv[0])
    try:
        script = script.resolve().relative_to(ROOT)
    except ValueError:
        pass
    return "python " + shlex.join([str(script), *argv[1:]])


class Provenance:
    """Date, commit, machine and command of one run, fixed when the run starts (so every
    section a run writes names the same commit, even one written minutes later)."""

    def __init__(self, argv: list[str] | None = None, root: Path = ROOT) -> None:
        self.date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        self.commit = commit(root)
        self.machine = machine()
        self.command = command_line(argv)

    def header(self, finished: str | None = None) -> str:
        date = self.date + (f" (written {finished})" if finished else "")
        return _SEP.join((f"**date** {date}", f"**commit** `{self.commit}`", f"**machine** {self.machine}",
                          f"**command** `{self.command}`"))


def parse_header(line: str) -> dict[str, str]:
    """The fields of a header line (``date``, ``commit``, ``machine``, ``command``), with the
    backticks around the commit and the command taken off."""
    out = {}
    for part in line.strip().split(_SEP):
        m = re.match(r"^\*\*(\w+)\*\* (.*)$", part)
        if m:
            out[m.group(1)] = m.group(2).strip().strip("`")
    return out


def sections(text: str) -> dict[tuple[str, str], str]:
    """``(script, section) -> content`` of every section on the page."""
    out = {}
    for m in re.finditer(r"<!-- BEGIN ([A-Za-z0-9_.-]+):([A-Za-z0-9_.-]+) -->\n(.*?)<!-- END \1:\2 -->", text, re.S):
        out[m.group(1), m.group(2)] = m.group(3)
    return out


def replace_section(text: str, script: str, section: str, content: str) -> str:
    """``text`` with the section's content replaced (appended, markers and all, when the
    page has no such section); nothing outside the markers changes."""
    for name in (script, section):
        if not _NAME.match(name):
            raise ValueError(f"section name={name!r} must match {_NAME.pattern}")
    begin, end = begin_marker(script, section), end_marker(script, section)
    block = content.rstrip("\n") + "\n"
    i, j = text.find(begin), text.find(end)
    if i < 0 and j < 0:
        lead = "" if not text else ("\n" if text.endswith("\n") else "\n\n")
        return f"{text}{lead}{begin}\n{block}{end}\n"
    if i < 0 or j < i or text.find(begin, i + 1) >= 0:
        raise ValueError(f"page has a broken section {script}:{section}: fix its markers by hand")
    return text[: i + len(begin)] + "\n" + block + text[j:]


def write_section(script: str, section: str, body: str, prov: Provenance, path: Path | str = PAGE) -> None:
    """Rewrite one section of ``path``: the header line of ``prov``, a blank line, ``body``."""
    path = Path(path)
    finished = datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M UTC")
    content = prov.header(finished) + "\n\n" + body.strip("\n") + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(path.parent, os.O_RDONLY)  # the folder is the lock: no lock file left behind
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        text = path.read_text() if path.exists() else ""
        new = replace_section(text, script, section, content)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name + ".", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(new)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    finally:
        os.close(lock)  # releases the lock
    print(f"[wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} section {script}:{section}]",
          file=sys.stderr)


def table(headers: list[str], rows: list[list[object]], align: str | None = None) -> str:
    """A markdown table; ``align`` one letter per column, ``l`` or ``r`` (default: the first
    column left, the others right)."""
    align = align or "l" + "r" * (len(headers) - 1)
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(sep) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |")
    return "\n".join(lines)


def add_flag(parser) -> None:
    """The ``--write-docs`` flag every benchmark takes."""
    parser.add_argument("--write-docs", action="store_true",
                        help=f"also write this run's results into {PAGE.relative_to(ROOT)} (its own sections only)")
