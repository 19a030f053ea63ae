"""An adapter class built on a library's own base class when it is first
used, so that the adapter's module, which also declares the library
(`LIBRARY`, read through the entry points by the TensorBoard translation,
`rltrack runs` and the agent), imports nothing of the library.

TorchRL, Tianshou, transformers, rl_games, rsl_rl and Ray Tune tell their
loggers and callbacks apart by their base classes (`isinstance`, abstract
methods), which exist only where the library is installed. The adapter's
behaviour is a plain class; `subclass_on_access` returns the module-level
`__getattr__` (PEP 562) that builds `name` from it and the library's base on
first access (`from rltrack.adapters.torchrl import RLTrackLogger` imports
TorchRL then, or raises `rltrack.MissingExtraError` naming the extra), and
stores it in the module: it is built once, pickles by reference and is what
`isinstance` and `type()` report. `names_on_access` is the same for names a
library's package keeps in its modules (`from rltrack.adapters.acme import
make_logger_factory`): imported on first use, so that reading the package's
declaration imports none of them.
"""

from __future__ import annotations

import importlib
import sys
import threading
from typing import Any, Callable

from rltrack.core.optional import require


def subclass_on_access(module: str, name: str, behaviour: type, base: str, extra: str, doc: str | None = None) -> Callable[[str], Any]:
    """The `__getattr__` of `module` that builds class `name`: `behaviour`
    first, then `base` ("package.module:Class", of the extra `extra`); its
    docstring `doc`, else the behaviour's."""
    base_module, _, base_class = base.partition(":")
    building = threading.Lock()  # two threads' first accesses get the one class

    def __getattr__(attribute: str) -> Any:
        if attribute != name:
            raise AttributeError(f"module {module!r} has no attribute {attribute!r}")
        with building:
            built = sys.modules[module].__dict__.get(name)
            if built is None:
                library = require(base_module, extra, f"{module}.{name}")
                namespace = {"__module__": module, "__qualname__": name, "__doc__": doc or behaviour.__doc__}
                built = type(name, (behaviour, getattr(library, base_class)), namespace)
                setattr(sys.modules[module], name, built)
        return built

    return __getattr__


def names_on_access(module: str, names: dict[str, str]) -> Callable[[str], Any]:
    """The `__getattr__` of package `module` that imports each of `names`
    (name -> the module defining it) on first access and keeps it in the package."""

    def __getattr__(attribute: str) -> Any:
        home = names.get(attribute)
        if home is None:
            raise AttributeError(f"module {module!r} has no attribute {attribute!r}")
        value = getattr(importlib.import_module(home), attribute)
        setattr(sys.modules[module], attribute, value)  # later lookups skip this function
        return value

    return __getattr__
