"""The TRL integration's private contact points: one list (exchange.libraries.trl.contact),
true of the installed TRL, and complete for the integration's source."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("trl_ready")

ROOT = Path(__file__).resolve().parents[3]
INTEGRATION = ("exchange/libraries/trl/trainer.py", "exchange/libraries/trl/callback.py", "exchange/libraries/trl/loss.py")


def test_every_listed_contact_exists_in_the_installed_trl():
    from exchange.libraries.trl.contact import broken_contacts

    assert broken_contacts() == []


def test_every_private_trl_name_the_integration_uses_is_listed():
    import inspect

    from trl import GRPOTrainer

    from exchange.libraries.trl.contact import ATTRIBUTES, METHODS, MODULE_FUNCTIONS

    source = inspect.getsource(GRPOTrainer)
    trl_private = {n for n in dir(GRPOTrainer) if n.startswith("_") and not n.startswith("__")}
    used = set()
    for path in INTEGRATION:
        for node in ast.walk(ast.parse((ROOT / path).read_text())):
            private = isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
            if private and (node.attr in trl_private or f"self.{node.attr} =" in source):
                used.add(node.attr)
    listed = set(METHODS) | set(ATTRIBUTES) | set(MODULE_FUNCTIONS)
    assert used <= listed, sorted(used - listed)
    assert {"_compute_loss", "_prepare_inputs", "_metrics"} <= used  # the walk sees them


def test_a_missing_contact_is_named(monkeypatch):
    from exchange.libraries.trl import contact
    from exchange.libraries.versions import LibraryError

    monkeypatch.setitem(contact.METHODS, "_no_such_method", ("self",))
    monkeypatch.setattr(contact, "ATTRIBUTES", contact.ATTRIBUTES + ("_no_such_attribute",))
    with pytest.raises(LibraryError, match="GRPOTrainer._no_such_method is gone; GRPOTrainer no longer sets "
                                           "self._no_such_attribute"):
        contact.require_contacts()
