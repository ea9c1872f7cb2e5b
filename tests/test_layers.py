"""The layers are enforced from the code (an ``ast`` walk of every module's imports).

Data flows one way (DEVELOPERS.md): each module may import only from its own layer or the
layers below it, never the package root ``exchange`` (the public API sits on top of the
core and the checker), and never another package's private module (``a.b._c`` is
importable only from inside ``a.b``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "exchange"

# Lowest first. A module belongs to the first layer with a prefix that matches it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("exchange.errors", "exchange.core")),
    ("checker", ("exchange.checker",)),
    ("catalog", ("exchange.objectives",)),
    ("theory", ("exchange.theory",)),
    ("models", ("exchange.models",)),
    ("analysis", ("exchange.symbolic", "exchange.paramspace", "exchange.oracle")),
    ("libraries", ("exchange.libraries",)),
    ("lab", ("exchange.lab",)),
    ("harness", ("exchange.targets", "exchange.audit", "exchange.training_log", "exchange.training_plot", "exchange.testing", "exchange.pytest_plugin")),
    ("cli", ("exchange.cli", "exchange.__main__")),
)


def layer_of(module: str) -> int:
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return index
    raise LookupError(f"module {module} is in no layer: add it to LAYERS in tests/test_layers.py")


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, module: str) -> list[tuple[int, str]]:
    """``(line, imported module)`` for every ``exchange`` import, relative ones resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            if base == "exchange":  # "from exchange import objectives" imports a submodule
                out += [(node.lineno, f"exchange.{a.name}") if (ROOT / a.name).exists()
                        or (ROOT / f"{a.name}.py").exists() else (node.lineno, "exchange") for a in node.names]
            else:
                out.append((node.lineno, base))
    return [(line, m) for line, m in out if m == "exchange" or m.startswith("exchange.")]


def violations(root: Path = ROOT) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        if module == "exchange":
            continue  # the public API: it re-exports from the core and the checker
        mine = layer_of(module)
        for line, target in imports_of(path, module):
            where = f"{path.relative_to(root.parent)}:{line}"
            if target == "exchange":
                found.append(f"{where}: {module} imports the package root; import the defining module")
                continue
            if layer_of(target) > mine:
                found.append(
                    f"{where}: {module} ({LAYERS[mine][0]}) imports {target} ({LAYERS[layer_of(target)][0]}), a layer above it"
                )
            parts = target.split(".")
            for depth, part in enumerate(parts):
                if part.startswith("_") and not part.startswith("__"):
                    owner = ".".join(parts[:depth])
                    if not (module == owner or module.startswith(owner + ".")):
                        found.append(f"{where}: {module} imports {target}, a private module of {owner}")
                    break
    return found


def private_names(root: Path = ROOT) -> list[str]:
    """``from a.b import _name`` across modules: a private name (a function, a constant)
    belongs to its module. A package-private *module* (``from exchange.objectives import
    _factored`` inside ``exchange.objectives``) stays allowed, as above."""
    found = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom) or node.level or not (node.module or "").startswith("exchange"):
                continue
            for alias in node.names:
                name = alias.name
                if not name.startswith("_") or name.startswith("__"):
                    continue
                sub = root.parent.joinpath(*node.module.split("."), name)
                is_module = sub.with_suffix(".py").exists() or (sub / "__init__.py").exists()
                if is_module and (package == node.module or package.startswith(node.module + ".")):
                    continue
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}: {module} imports the private name "
                             f"{name} of {node.module}; make it public or keep it inside its module")
    return found


def test_every_module_respects_the_layers():
    assert violations() == []


def test_no_private_name_crosses_modules():
    assert private_names() == []


def test_a_private_name_import_is_caught(tmp_path):
    """The private-name check is not vacuous."""
    import shutil

    copy = tmp_path / "exchange"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "checker" / "leak.py").write_text("from exchange.checker.cases import _log\n")
    (copy / "objectives" / "fine.py").write_text("from exchange.objectives import _factored\n")
    found = private_names(copy)
    assert len(found) == 1 and "_log of exchange.checker.cases" in found[0], found


def test_every_module_has_a_layer():
    for path in ROOT.rglob("*.py"):
        module = module_name(path)
        if module != "exchange":
            layer_of(module)


def test_the_core_imports_nothing_above_it():
    core = [m for m in (module_name(p) for p in ROOT.rglob("*.py")) if m != "exchange" and layer_of(m) == 0]
    assert "exchange.core.vocabulary" in core and "exchange.core.rollout" in core


@pytest.mark.parametrize(
    "module, source, expected",
    [
        # an upward import: the core reaching for the catalog
        ("core/leak.py", "from exchange.objectives import get\n", "a layer above it"),
        # the checker reaching for the CLI
        ("checker/leak.py", "import exchange.cli\n", "a layer above it"),
        # another package's private module
        ("libraries/leak.py", "from exchange.objectives._factored import Factors\n", "a private module of exchange.objectives"),
        # the package root from inside the package
        ("lab/leak.py", "from exchange import check\n", "imports the package root"),
    ],
)
def test_a_deliberate_violation_is_caught(tmp_path, module, source, expected):
    """The test is not vacuous: a copy of the package with one bad import fails it."""
    import shutil

    copy = tmp_path / "exchange"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / module).write_text(source)
    found = violations(copy)
    assert len(found) == 1 and expected in found[0], found


def redefinitions(root: Path = ROOT) -> list[str]:
    """A top-level function, class or constant assigned twice in one module: the second
    silently replaces the first, so one of them is dead code that reads as live (a stale
    copy left by an edit). ``TYPE_CHECKING``/``try`` branches are not top level here."""
    found = []
    for path in sorted(root.rglob("*.py")):
        seen: dict[str, int] = {}
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                names = [node.target.id]
            else:
                continue
            for name in names:
                if name in seen and name != "__all__":
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno}: {name} is defined again "
                                 f"(first at line {seen[name]})")
                seen.setdefault(name, node.lineno)
    return found


def test_no_module_defines_a_top_level_name_twice():
    assert redefinitions() == []


def test_a_redefinition_is_caught(tmp_path):
    pkg = tmp_path / "exchange"
    pkg.mkdir()
    (pkg / "m.py").write_text("def f():\n    return 1\n\n\nX = 1\n\n\ndef f():\n    return 2\n")
    assert [v.split(": ", 1)[1] for v in redefinitions(pkg)] == ["f is defined again (first at line 1)"]
