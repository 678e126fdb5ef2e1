"""One helper for every lazy package ``__init__`` (``agentgym.lazy_exports``), and what
the lazy packages promise: light imports, every public name resolvable."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from agentgym import lazy_exports

#: packages whose public names load on first use (their import must stay light)
LAZY_PACKAGES = (
    "agentgym",
    "agentgym.trainers",
    "agentgym.generation",
    "agentgym.trainers.parallel",
    "agentgym.trainers.tppo",
    "agentgym.trainers.integrations",
    "agentgym.serve",
    "agentgym.plan",
    "agentgym.benchmarks",
)


def test_names_resolve_on_first_use_and_dir_lists_them(monkeypatch):
    pkg = types.ModuleType("lazy_pkg")
    pkg.eager = 1
    pkg.__getattr__, pkg.__dir__ = lazy_exports(
        "lazy_pkg", {"sqrt": "math", "OrderedDict": "collections"}
    )
    monkeypatch.setitem(sys.modules, "lazy_pkg", pkg)
    import collections
    import math

    assert pkg.sqrt is math.sqrt and pkg.OrderedDict is collections.OrderedDict
    assert {"eager", "sqrt", "OrderedDict"} <= set(dir(pkg))
    with pytest.raises(AttributeError, match="module 'lazy_pkg' has no attribute 'nope'"):
        _ = pkg.nope
    # nothing is cached on the package: a name patched where it is defined shows through
    monkeypatch.setattr(math, "sqrt", len)
    assert pkg.sqrt is len


def test_importing_the_lazy_packages_does_not_import_torch():
    code = (
        "import sys\n"
        f"for name in {LAZY_PACKAGES!r}:\n"
        "    __import__(name)\n"
        "    assert 'torch' not in sys.modules, name\n"
        "import agentgym.health\n"
        "assert 'torch' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_public_name_is_listed_by_dir(package):
    module = __import__(package, fromlist=["__all__"])
    assert set(module.__all__) <= set(dir(module))


@pytest.mark.parametrize(
    "package", ["agentgym", "agentgym.trainers.parallel", "agentgym.trainers.tppo", "agentgym.plan"]
)
def test_every_public_name_resolves(package):
    module = __import__(package, fromlist=["__all__"])
    missing = [name for name in module.__all__ if getattr(module, name, None) is None]
    assert not missing
