"""Every numeric literal of judgement code lives in the tolerance record
(exchange/checker/tolerances.py), each with its reason (issue 45; docs/properties.md,
"Tolerances"). The rule, checked with ``ast`` on every judgement module:

1. a float literal other than 0.0 and 1.0 (sign ignored) inside a function or lambda
   (default arguments included) is rejected;
2. at module level, a float literal that is a whole assignment value (``X = 0.04``) or an
   operand of arithmetic is rejected; floats inside tuple/list/dict displays or call
   arguments (probe data: rewards, ratios) are data;
3. an int literal with ``|n| >= 2`` as an operand of ``*``, ``/``, ``//`` or ``**`` is
   rejected, unless it sits in a subscript index or an argument of a shape, range or seed
   call (:data:`STRUCTURAL_CALLS`); ints in comparisons and in ``+``/``-`` are counts.

Judgement code: ``exchange/checker/**`` except tolerances.py and :data:`NOT_JUDGEMENT` (the
modules that build inputs or render). :data:`REMAINING` lists, per module, how many
literals the rule still finds in round-off and attribution code written before it; a
module's count may only go down (the test fails when it rises; lower the entry when it
falls).
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2] / "exchange" / "checker"
NOT_JUDGEMENT = {"tolerances.py", "generators.py", "strategies.py", "draw.py", "cases.py", "examples.py", "mutations.py",
                 "event_hash.py", "shrinking.py", "_render.py", "reproduce.py", "time_limit.py"}
STRUCTURAL_CALLS = {"range", "arange", "zeros", "ones", "full", "empty", "view", "reshape", "expand", "repeat",
                    "new_zeros", "new_full", "randint", "integer"}
# Literals the rule still finds, per module, in code written before it (see the docstring).
REMAINING = {
    "inspection.py": 4,  # exchange inspect's own tolerances (a batch's report, not check's verdicts)
}


def _violations(source: str) -> list[tuple[int, str]]:
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def chain(node):
        while node in parents:
            node = parents[node]
            yield node

    def in_function(node) -> bool:
        return any(isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) for p in chain(node))

    def structural(node) -> bool:
        prev = node
        for p in chain(node):
            if isinstance(p, ast.Subscript) and prev is p.slice:
                return True
            if isinstance(p, ast.Call) and prev is not p.func:
                f = p.func
                if (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")) in STRUCTURAL_CALLS:
                    return True
            if isinstance(p, ast.stmt):
                return False
            prev = p
        return False

    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or isinstance(node.value, bool):
            continue
        value = node.value
        parent = parents.get(node)
        if isinstance(parent, ast.UnaryOp):
            parent = parents.get(parent)
        if isinstance(value, float) and value not in (0.0, 1.0):
            if in_function(node) or isinstance(parent, (ast.Assign, ast.AnnAssign, ast.BinOp)):
                out.append((node.lineno, repr(value)))
        elif isinstance(value, int) and abs(value) >= 2:
            if isinstance(parent, ast.BinOp) and isinstance(parent.op, (ast.Mult, ast.Div, ast.FloorDiv, ast.Pow)) \
                    and not structural(parent):
                out.append((node.lineno, repr(value)))
    return out


def _modules() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py") if p.name not in NOT_JUDGEMENT)


@pytest.mark.parametrize("module", _modules())
def test_judgement_literals_live_in_the_tolerance_record(module):
    found = _violations((ROOT / module).read_text())
    allowed = REMAINING.get(module, 0)
    assert len(found) <= allowed, f"{module}: numeric literals outside exchange/checker/tolerances.py: {found}"


def test_the_rule_rejects_what_it_says_and_keeps_data():
    bad = "def f(x, tol):\n    return max(1e-6, 4 * tol) + x / 3\nLEAK = 0.04\n"
    assert sorted(v for _, v in _violations(bad)) == sorted(["1e-06", "4", "3", "0.04"])
    good = ("CASE = dict(rewards=(0.3, 0.71))\nN = 2\n"
            "def g(k, x):\n    return range(2 * k), x[2 * k], x * 1.0 - 1, len(x) < 2\n")
    assert _violations(good) == []
