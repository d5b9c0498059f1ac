"""The load generator's façade: every exported name is what its home module defines, and
none is shadowed by a subpackage of the same name (``score``, ``diagnose`` are
subpackages: importing one would replace a function of that name on the package)."""

from __future__ import annotations

import importlib
import pkgutil

import slotune.workers.loadgen as loadgen


def test_every_exported_name_is_its_home_modules_and_no_subpackage_takes_it() -> None:
    subpackages = {m.name for m in pkgutil.iter_modules(loadgen.__path__)}
    for sub in subpackages:  # import them all first, as a long-running worker has
        importlib.import_module(f"{loadgen.__name__}.{sub}")
    for name in loadgen.__all__:
        assert name not in subpackages, f"{name} is exported and is a submodule too"
        value = getattr(loadgen, name)
        home = importlib.import_module(loadgen._HOME[name])
        assert value is getattr(home, name), name
