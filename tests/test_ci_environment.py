"""In CI nothing may be skipped for a missing dependency: check them all up front.

Some tests skip locally when an optional extra is absent (importorskip); in CI
(``CI=true``) that would hide a missing install step, so this test fails instead.
"""

import importlib.util
import os
import shutil

import pytest

OPTIONAL = ("transformers", "trl", "verl", "openrlhf", "skyrl_train", "areal", "art", "scipy", "matplotlib", "tqdm")


@pytest.mark.skipif(os.environ.get("CI") != "true", reason="only CI must have every extra installed")
def test_ci_has_every_optional_dependency():
    missing = [name for name in OPTIONAL if importlib.util.find_spec(name) is None]
    if shutil.which(os.environ.get("COQC", "coqc")) is None:
        missing.append("coqc (apt-get install -y coq)")
    assert not missing, f"CI is missing {missing}: fix .ci/run"
