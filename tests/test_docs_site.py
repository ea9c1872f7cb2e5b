"""The docs site builds strictly, and its API reference is exactly ``exchange.__all__``.

mkdocs is the ``docs`` extra: without it the build test skips with the reason (in CI,
where every extra is installed, tests/test_ci_environment.py fails instead).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import exchange

REPO = Path(__file__).resolve().parents[1]
HOOK = REPO / "docs" / "hooks" / "api_reference.py"


def _hook():
    spec = importlib.util.spec_from_file_location("api_reference_hook", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_api_reference_lists_exactly_the_public_names():
    entries = _hook().api_entries()
    assert [name for name, _ in entries] == list(exchange.__all__)
    for name, path in entries:
        module, _, attr = path.rpartition(".")
        target = importlib.import_module(path) if name in exchange._SUBMODULES else \
            getattr(importlib.import_module(module), attr)
        assert target is getattr(exchange, name), f"the API page documents {path} for exchange.{name}"


def test_api_page_keeps_its_marker():
    assert _hook().MARKER in (REPO / "docs" / "api.md").read_text()


def test_every_docs_page_is_in_the_nav():
    config = (REPO / "mkdocs.yml").read_text()
    nav = set(re.findall(r":\s*([\w.-]+\.md)\s*$", config, re.M))
    pages = {p.name for p in (REPO / "docs").glob("*.md")}
    assert pages == nav, f"pages outside the nav: {sorted(pages - nav)}; nav entries without a page: {sorted(nav - pages)}"


def test_docs_theory_is_the_shared_spec():
    shared = REPO.parent / "shared" / "THEORY.md"
    if not shared.exists():
        pytest.skip(f"{shared} is not beside this checkout")
    assert (REPO / "docs" / "THEORY.md").read_bytes() == shared.read_bytes(), \
        "docs/THEORY.md differs from ../shared/THEORY.md: copy the spec again"


def test_mkdocs_build_is_strict_and_lists_every_public_name(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs site needs the docs extra: pip install -e '.[docs]'")
    pytest.importorskip("mkdocstrings", reason="the API reference needs the docs extra: pip install -e '.[docs]'")
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or "mkdocs"
    proc = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=REPO,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    missing = [path for _, path in _hook().api_entries() if f'id="{path}"' not in api]
    assert not missing, f"the built API page has no entry for {missing}"
    changelog = (tmp_path / "site" / "changelog" / "index.html").read_text()
    assert f"[{exchange.__version__}]" in changelog, "the changelog page does not include CHANGELOG.md"
