"""Parsing of coqc's Print Assumptions output and the axiom allow-list."""

from __future__ import annotations

from exchange.theory.coq import ALLOWED_AXIOMS, CHECKED, FAILED, _MARKER, _parse_assumptions, _status
from exchange.theory.registry import Theorem

REALS = """Axioms:
ClassicalDedekindReals.sig_forall_dec
  : forall P : nat -> Prop,
    (forall n : nat, {P n} + {~ P n}) ->
    {n : nat | ~ P n} + {forall n : nat, P n}
FunctionalExtensionality.functional_extensionality_dep
  : forall (A : Type) (B : A -> Type) (f g : forall x : A, B x),
    (forall x : A, f x = g x) -> f = g
"""
CLASSIC = "Axioms:\nClassical_Prop.classic : forall P : Prop, P \\/ ~ P\n"


def _out(**blocks):
    return "".join(f"{_MARKER}{name}\n{text}" for name, text in blocks.items())


def test_parse_closed_reals_and_classic():
    got = _parse_assumptions(_out(a="Closed under the global context\n", b=REALS, c=CLASSIC))
    assert got["a"] == ()
    assert got["b"] == ("ClassicalDedekindReals.sig_forall_dec",
                        "FunctionalExtensionality.functional_extensionality_dep")
    assert got["c"] == ("Classical_Prop.classic",)


def test_allow_list_accepts_reals_and_rejects_classic():
    thm = Theorem(name="X.t", statement="t")
    # The allow-list holds full names (exchange.theory.axioms resolves the printed ones).
    found = {"X.t": ("Coq.Reals.ClassicalDedekindReals.sig_forall_dec",
                     "Coq.Logic.FunctionalExtensionality.functional_extensionality_dep")}
    assert set(found["X.t"]) <= ALLOWED_AXIOMS
    assert not {"ClassicalDedekindReals.sig_forall_dec"} <= ALLOWED_AXIOMS
    assert _status("t", thm, found, "").status == CHECKED
    found = _parse_assumptions(_out(**{"X.t": CLASSIC}))
    status = _status("t", thm, found, "")
    assert status.status == FAILED and "Classical_Prop.classic" in status.detail


def test_section_variables_and_type_in_type_count_as_assumptions():
    text = ("Section Variables:\nG : nat\nAxioms:\nfoo : False\n"
            "Constants relying on type-in-type:\nbar\n")
    assert _parse_assumptions(_out(t=text))["t"] == ("G", "foo", "bar")
