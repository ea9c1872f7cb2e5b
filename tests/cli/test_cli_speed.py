"""The CLI's --help and list, the audit's parent process and the pytest plugin do not import
torch (issue 16)."""

import json
import subprocess
import sys

import pytest

_PROBE = """
import sys
{body}
heavy = sorted(m for m in ("torch", "hypothesis", "numpy", "exchange.objectives", "exchange.checker") if m in sys.modules)
print("HEAVY=" + ",".join(heavy))
"""


def _heavy(body: str) -> str:
    out = subprocess.run([sys.executable, "-c", _PROBE.format(body=body)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "argv", [["--help"], ["list"], ["list", "--json"], ["check", "--help"], ["inspect", "--help"], ["--debug", "list"]]
)
def test_cli_does_not_import_torch(argv):
    body = f"""
from exchange.cli import main
try:
    main({argv!r})
except SystemExit:
    pass
"""
    assert _heavy(body) == "HEAVY="


@pytest.mark.parametrize(
    "body",
    [
        # the CLI with a named target: workers check the row and return its metadata
        "from exchange.cli import main\nmain(['audit', 'dapo', '--jobs', '2', '--json'])",
        # the default target list is resolved in a worker too (empty here, to stay fast)
        "from exchange.audit import audit\nassert audit(None, families=False, variants=False, jobs=2) == []",
    ],
)
@pytest.mark.slow  # ~2-5 s: the fast tier stays under 3 minutes
def test_the_audit_parent_process_does_not_import_torch(body):
    """Each worker pays its own torch import; the parent must not add one before the
    workers start (or after they finish, to render the rows). Hypothesis comes with
    exchange.errors (its InvalidArgument), ~0.15 s."""
    assert _heavy(body) in ("HEAVY=", "HEAVY=hypothesis")


def test_pytest_plugin_does_not_import_torch():
    assert _heavy("import exchange.pytest_plugin, exchange") == "HEAVY="


def test_list_cache_matches_the_live_catalog():
    from exchange.cli.cmd_list import CATALOG, live_catalog

    assert json.loads(CATALOG.read_text()) == json.loads(json.dumps(live_catalog())), (
        "exchange/cli/catalog.json is stale: run python -m exchange.cli.cmd_list --write"
    )
