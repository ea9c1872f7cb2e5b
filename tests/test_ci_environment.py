"""In CI nothing may be skipped for a missing dependency: check them all up front.

Some tests skip locally when an optional extra is absent (``need``/``need_module`` in
tests/conftest.py, importorskip); in CI (``CI=true``) that would hide a missing install
step, so this test fails instead.

What CI must have is read from pyproject.toml and .ci/run (tests/extras.py, the one
mapping of extras to packages), never listed here. ``EXCHANGE_EXTRAS`` narrows it for a
partial install: ``EXCHANGE_EXTRAS=dev,trl`` after ``pip install -e ".[dev,trl]"`` means
"only the dev and trl extras are meant to be here", so a missing trl (or transformers,
scipy...) still fails, while verl, OpenRLHF, SkyRL, AReaL, ART and the other extras skip
with the reason. Unset (the full install of .ci/run), every extra and every single-package
install of .ci/run must be there. coqc is no extra: CI needs it either way.
"""

import os
import shutil
from importlib import metadata

import pytest

from tests import extras as ex


def _missing_distributions() -> list[str]:
    missing = []
    for requirement in ex.direct_requirements(ex.declared()):
        try:
            metadata.distribution(ex.requirement_name(requirement))
        except metadata.PackageNotFoundError:
            missing.append(ex.requirement_name(requirement))
    return sorted(set(missing))


@pytest.mark.skipif(os.environ.get("CI") != "true", reason="only CI must have every extra installed")
def test_ci_has_every_optional_dependency():
    from exchange.libraries import LIBRARIES, unavailable_reason
    from exchange.libraries.versions import DISTRIBUTIONS

    extras = ex.declared()
    missing = _missing_distributions()
    # Each library adapter at the version it drives (a wrong version is an install bug too).
    missing += [unavailable_reason(lib) for lib in LIBRARIES
                if ex.expected(DISTRIBUTIONS.get(lib, lib)) and unavailable_reason(lib) is not None]
    if shutil.which(os.environ.get("COQC", "coqc")) is None:
        missing.append("coqc (apt-get install -y coq)")
    scope = "the full install" if extras is None else f"{ex.ENV}={','.join(sorted(extras))}"
    assert not missing, f"CI ({scope}) is missing {missing}: fix .ci/run"


def test_extras_variable_selects_what_ci_requires(monkeypatch):
    """The mapping itself, whatever is installed: each partial install of .ci/run requires
    its own extras' packages and nothing of the others'."""
    monkeypatch.setenv(ex.ENV, "dev,trl")
    trl = {ex.requirement_name(r) for r in ex.direct_requirements(ex.declared())}
    assert {"trl", "pytest", "scipy", "torch"} <= trl
    assert not trl & {"verl", "ray", "openrlhf", "skyrl-train", "areal", "openpipe-art"}
    assert ex.left_out("verl").startswith(f"{ex.ENV}=dev,trl leaves it out")

    monkeypatch.setenv(ex.ENV, "dev,verl")
    verl = {ex.requirement_name(r) for r in ex.direct_requirements(ex.declared())}
    assert {"verl", "ray", "transformers", "pytest"} <= verl  # verl itself: .ci/run's --no-deps install
    assert not verl & {"trl", "openrlhf"}
    assert ex.left_out("verl") == ""

    monkeypatch.delenv(ex.ENV)
    everything = {ex.requirement_name(r) for r in ex.direct_requirements(ex.declared())}
    assert {"trl", "verl", "openrlhf", "skyrl-train", "areal", "openpipe-art"} <= everything
    assert ex.left_out("openrlhf") == "" and ex.left_out("no-such-package") == ""

    monkeypatch.setenv(ex.ENV, "dev,trll")
    with pytest.raises(ValueError, match="trll"):
        ex.declared()


def test_ci_installs_belong_to_their_extra_or_to_the_full_install():
    """A single-package install of .ci/run named like an extra completes that extra (the
    partial-extras step of .ci/run installs what ``python tests/extras.py installs`` prints);
    the others belong to the full install only."""
    installs = ex.ci_installs()
    assert installs["verl"][0] == "verl" and "--no-deps" in installs["verl"][1].split()
    assert all(extra is None for name, (extra, _) in installs.items() if name != "verl")
