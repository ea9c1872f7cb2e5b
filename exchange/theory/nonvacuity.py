"""Non-vacuity as a property of the reviewed record (issue 43, item 3).

A theorem whose hypotheses cannot hold together proves nothing. In ``proofs/spec/Spec.v``
every registered theorem with hypotheses is stated as::

    Definition H_T (x...) : Prop := <its hypotheses, one conjunction>.
    Definition C_T (x...) : Prop := <its conclusion>.
    Definition T : Prop := forall x..., H_T x... -> C_T x....
    Definition W_T : Prop := H_T a...        (* concrete arguments *)

and the kernel checks the development's theorem against ``T`` and its witness against
``W_T`` (``exchange.theory.coq``). So the witness proves ``H_T`` at ``a``: the hypotheses
hold together there, whatever the witness's proof says, and a re-pin that makes ``H_T``
contradictory makes ``W_T`` unprovable. This module checks the shape that makes that
argument valid, on the record's text (``problems``):

- ``T`` is exactly ``forall <binders>, H_T <binder names> -> C_T <binder names>``;
- ``W_T`` is exactly ``H_T`` applied to one argument per binder (a tautology such as
  ``forall i j, ... -> 2 == 2``, or the theorem's conclusion, is not);
- a theorem over a group (first binder ``G``) is witnessed at a numeral ``G >= 2``;
- a theorem about an advantage vector (a binder ``A : nat -> Q`` or ``nat -> R``) is
  witnessed at advantages of both signs: the record proves ``both_signs G A``
  (``Rboth_signs`` over R) as an ``Example`` for the witness's own ``G`` and ``A``, and
  the text of those two definitions is pinned here (``SIGN_PREDICATES``);
- a theorem listed in ``NO_HYPOTHESES`` (an identity, an iff, a closed proposition) has
  no top-level hypothesis.

What this does not show: that the hypotheses hold on many arguments or on the inputs the
package meets (the code link's job), nor that ``H_T`` and ``C_T`` say what THEORY.md says
(review of the record).
"""

from __future__ import annotations

import re

__all__ = ["SIGN_PREDICATES", "hypothesis_form", "problems", "split_statement", "arguments"]

# The predicates a witness's advantages must satisfy, by the type of the advantage
# binder, with their reviewed text (normalised whitespace): a re-pin that weakened one
# (to True, say) would let a degenerate witness through, so it fails here instead.
SIGN_PREDICATES: dict[str, tuple[str, str]] = {
    "nat -> Q": ("both_signs", "Definition both_signs (G : nat) (A : nat -> Q) : Prop := "
                 "(exists i, (i < G)%nat /\\ 0 < A i) /\\ (exists j, (j < G)%nat /\\ A j < 0)."),
    "nat -> R": ("Rboth_signs", "Definition Rboth_signs (G : nat) (A : nat -> R) : Prop := "
                 "(exists i, (i < G)%nat /\\ 0 < A i) /\\ (exists j, (j < G)%nat /\\ A j < 0)."),
}
# The binder a theorem quantifies its advantage vector with (THEORY.md's A_i).
ADVANTAGES = "A"


def _groups(text: str) -> list[str]:
    """Top-level items of ``text``: words and parenthesised groups (``(fun _ => 2)``)."""
    items, depth, cur = [], 0, ""
    for ch in text:
        if ch.isspace() and depth == 0:
            if cur:
                items.append(cur)
            cur = ""
            continue
        depth += (ch == "(") - (ch == ")")
        cur += ch
    if cur:
        items.append(cur)
    return items


def arguments(application: str, head: str) -> list[str] | None:
    """The arguments of ``head a1 a2 ...`` (None when the text is not such an application)."""
    items = _groups(" ".join(application.split()))
    if not items or items[0] != head:
        return None
    return items[1:]


def _binders(text: str) -> list[tuple[str, str | None]]:
    """``G (A : nat -> Q) (c h m : Q)`` or ``a s1 s2 : Q`` -> [(name, type or None)]."""
    text = text.strip()
    if "(" not in text and ":" in text:
        names, ty = text.split(":", 1)
        return [(n, " ".join(ty.split())) for n in names.split()]
    out: list[tuple[str, str | None]] = []
    for item in _groups(text):
        if item.startswith("(") and item.endswith(")") and ":" in item:
            names, ty = item[1:-1].split(":", 1)
            out += [(n, " ".join(ty.split())) for n in names.split()]
        else:
            out.append((item, None))
    return out


def _top_arrows(text: str) -> list[str]:
    """``text`` split on its top-level ``->`` (never ``<->``), outside parentheses."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and text.startswith("->", i) and (i == 0 or text[i - 1] != "<"):
            parts.append(text[start:i].strip())
            start = i = i + 2
            continue
        i += 1
    parts.append(text[start:].strip())
    return parts


def split_statement(statement: str) -> tuple[list[tuple[str, str | None]], list[str], str]:
    """A record statement ``Definition X : Prop := forall b..., h1 -> ... -> c.`` as
    (binders, top-level hypotheses, conclusion). A hypothesis is a top-level ``->``
    operand before the conclusion; an unparenthesised ``forall``/``exists`` starts the
    conclusion (``... -> forall i j, (i < G)%nat -> ...``)."""
    body = " ".join(statement.split()).split(":=", 1)[1].strip()
    body = body[:-1].rstrip() if body.endswith(".") else body
    if not body.startswith("forall "):
        return [], [], body
    depth = 0
    for i, ch in enumerate(body):
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            break
    binders, rest = _binders(body[len("forall "):i]), body[i + 1:].strip()
    parts = _top_arrows(rest)
    hyps = []
    while len(parts) > 1 and not parts[0].startswith(("forall ", "exists ")):
        hyps.append(parts.pop(0))
    return binders, hyps, " -> ".join(parts)


def hypothesis_form(statements: dict[str, str], key: str) -> bool:
    """Whether the record states ``key`` as ``forall x, H_key x -> C_key x``."""
    if key not in statements:
        return False
    binders, hyps, concl = split_statement(statements[key])
    names = " ".join(n for n, _ in binders)
    return bool(binders) and hyps == [f"H_{key} {names}"] and concl == f"C_{key} {names}"


def _definition(code: str, name: str) -> str:
    """The sentence ``Definition name ...`` of normalised, comment-free record text."""
    m = re.search(rf"(?:^| )Definition {re.escape(name)} (.*?\.)(?= |$)", code)
    return f"Definition {name} {m.group(1)}" if m else ""


def problems(statements: dict[str, str], code: str, theorems: dict,
             no_hypotheses: frozenset[str] | set[str]) -> list[str]:
    """Every way the record fails the shape above. ``statements``: name -> normalised
    statement (``record.record_statements``); ``code``: the record with comments and
    strings stripped, whitespace normalised; ``theorems``: the registry."""
    out = []
    for key, thm in theorems.items():
        if key not in statements:
            continue  # the inventory check names it
        if key in no_hypotheses:
            _, hyps, _ = split_statement(statements[key])
            if hyps:
                out.append(f"{key} is listed in NO_HYPOTHESES but its record statement has the "
                           f"hypothesis `{hyps[0]}`: state it as forall x, H_{key} x -> C_{key} x "
                           "with a witness W_" + key)
            continue
        out += _theorem_problems(key, thm, statements, code)
    # The shape is read from the text, so the text must mean what it says: inside a
    # Section a Context would become a hypothesis of an Example (``both_signs`` proved
    # from ``False``); a Module could hold a second H_T that the statement resolves to;
    # a Notation, Infix or Coercion could make ``H_T x -> C_T x`` parse as something
    # else. The record needs none of them.
    for word in ("Section", "Context", "Let", "Module", "Notation", "Infix", "Coercion"):
        if re.search(rf"(?:^| ){word} ", code):
            out.append(f"the record uses `{word}`: proofs/spec/Spec.v is read as text by this "
                       "check and needs no sections, modules, notations or coercions")
    for ty, (name, text) in SIGN_PREDICATES.items():
        found = _definition(code, name)
        if found != text:
            out.append(f"the record's {name} is `{found or 'missing'}`, not the pinned `{text}` "
                       "(exchange.theory.nonvacuity.SIGN_PREDICATES): a witness's advantages "
                       "must take both signs")
    return out


def _theorem_problems(key: str, thm, statements: dict[str, str], code: str) -> list[str]:
    binders, _, _ = split_statement(statements[key])
    names = [n for n, _ in binders]
    if not hypothesis_form(statements, key):
        return [f"statement {key} is not `forall x, H_{key} x -> C_{key} x` in the record "
                f"(binders {' '.join(names) or 'none'}): a theorem with hypotheses names them "
                f"in one predicate H_{key}, so that its witness W_{key} := H_{key} a shows they "
                "can hold together"]
    witness = getattr(thm, "witness", "")
    if witness != f"W_{key}" or witness not in statements:
        return [f"{key} has hypotheses but no witness W_{key} := H_{key} a in the record"]
    text = " ".join(statements[witness].split(":=", 1)[1].split()).rstrip(".").rstrip()
    args = arguments(text, f"H_{key}")
    if args is None or len(args) != len(names):
        return [f"statement {witness} is `{text}`, not H_{key} applied to {len(names)} concrete "
                f"arguments: a witness states the theorem's hypotheses at concrete arguments "
                "(a tautology such as `2 == 2`, or the theorem's conclusion, shows nothing "
                "about them)"]
    out = []
    given = dict(zip(names, args))
    if names[0] == "G" and not (given["G"].isdigit() and int(given["G"]) >= 2):
        out.append(f"{witness} is H_{key} at G = {given['G']}: a witness instance needs a group "
                   "of at least two responses (G >= 2), or it says nothing about groups")
    for name, ty in binders:
        if name != ADVANTAGES or ty not in SIGN_PREDICATES or "G" not in given:
            continue
        prop = f"{SIGN_PREDICATES[ty][0]} {given['G']} {given[name]}"
        if not re.search(rf"(?:^| )Example [\w']+ : {re.escape(prop)}\.(?= |$)", code):
            out.append(f"{witness}'s advantages {given[name]} at G = {given['G']} are not shown "
                       f"to take both signs: the record needs `Example <name> : {prop}.`")
    return out
