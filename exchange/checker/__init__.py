"""The checker: group configurations (``cases``, ``mutations``, ``strategies``), the
observable properties and targeted probes, ``check`` and its ``Report``.

Sits on the core only: it never imports the catalog, the libraries or the CLI.
"""

from exchange.checker.checking import check

__all__ = ["check"]
