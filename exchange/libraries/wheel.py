"""Load single source files of an installed library whose package ``__init__`` imports
things this machine lacks (CUDA-only wheels, Ray, loggers, typing helpers).

The file runs under stub parent packages and stub third-party modules that exist in
``sys.modules`` only while it executes; the module object it produced is kept by the
caller. The library's code itself is never copied or changed.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from exchange.libraries.versions import LibraryError

__all__ = ["package_dir", "stub", "permissive_module", "stubbed", "exec_file", "Permissive"]


def package_dir(package: str, install: str) -> Path:
    """The folder of the installed top-level ``package`` (its ``__init__`` is not run)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise LibraryError(f"package={package!r} is not installed; install it with: {install}")
    return Path(list(spec.submodule_search_locations)[0])


def stub(name: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    return module


def permissive_module(name: str, path: str | None = None) -> types.ModuleType:
    """A stub package or module whose every missing attribute is a :class:`Permissive`
    (PEP 562 ``__getattr__``); ``path`` makes it a package over the installed folder."""
    module = stub(name)
    if path is not None:
        module.__path__ = [path]
    module.__getattr__ = lambda attr: Permissive(f"{name}.{attr}")
    return module


@contextmanager
def stubbed(stubs: dict[str, types.ModuleType], packages: tuple[str, ...]):
    """Put ``stubs`` in ``sys.modules`` (where absent); afterwards take them and every
    module under ``packages`` out again, so other code never sees them."""
    added = [name for name in stubs if name not in sys.modules]
    for name in added:
        sys.modules[name] = stubs[name]
    try:
        yield
    finally:
        for name in list(sys.modules):
            if any(name == p or name.startswith(p + ".") for p in packages):
                del sys.modules[name]
        for name in added:
            sys.modules.pop(name, None)


def exec_file(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class Permissive:
    """Stands in for a name the loaded file imports but the driven functions never use:
    subscriptable (``Float[Tensor, "b t"]``), usable in ``X | None``, callable (decorators return what they
    wrap), and every attribute is another ``Permissive``."""

    def __init__(self, name: str = "stub"):
        self._name = name

    def __getattr__(self, attr: str) -> "Permissive":
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Permissive(f"{self._name}.{attr}")

    def __getitem__(self, item: Any) -> "Permissive":
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # used as a decorator
        return Permissive(f"{self._name}()")

    def __or__(self, other: Any) -> "Permissive":  # annotations: ``Config | None``
        return self

    __ror__ = __or__

    def __enter__(self) -> "Permissive":  # ``with stats_tracker.scope(...)``
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __mro_entries__(self, bases):  # usable as a base class
        return (object,)

    def __repr__(self) -> str:
        return f"<stub {self._name}>"
