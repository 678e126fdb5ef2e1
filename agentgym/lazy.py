"""Public names loaded on first use: the one helper behind every lazy package ``__init__``.

A package whose public names live in heavy modules (torch, transformers, aiohttp) lists
them in a table, name -> the module that defines it, and hands the table to
:func:`lazy_exports`::

    _LAZY = {"HFEngine": "agentgym.generation.hf", ...}
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY)
    __all__ = sorted(_LAZY)

``import package`` then imports none of those modules; ``package.HFEngine`` (or
``from package import HFEngine``) imports ``agentgym.generation.hf`` on first use
(PEP 562 module ``__getattr__``), and ``dir(package)`` lists the lazy names with the
module's own. Nothing is cached on the package: each access asks the defining module, so
a name patched there (in a test) is what the package gives. Standard library only.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    module_name: str, table: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module ``__getattr__`` and ``__dir__`` that resolve the names of ``table``.

    Args:
        module_name: the package's ``__name__`` (for the error and for ``dir``).
        table: public name -> the module that defines it (imported on first use).

    Returns:
        ``(__getattr__, __dir__)``, to bind at the package's top level.
    """

    def __getattr__(name: str) -> Any:
        target = table.get(name)
        if target is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        return getattr(importlib.import_module(target), name)

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[module_name]), *table})

    return __getattr__, __dir__
