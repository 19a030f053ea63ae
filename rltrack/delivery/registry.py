"""Backends by config name, found through the entry-point group
`rltrack.trackers`: rltrack's own (pyproject.toml) and any installed
package's, registered the same way, so a package of someone else's adds a
tracker without editing rltrack. Each backend lives in its own module,
imported only when chosen, so a backend's third-party package is needed only
by its users. A backend that is not registered is named by its import path,
`"package.module:Class"` (the agent imports it with the path of the process
that registered the run)."""

from __future__ import annotations

import functools
import importlib
import re

from rltrack.sinks.base import Backend, RunContext
from rltrack.trackers.remote import RemoteBackend

#: The entry-point group of backends: name -> "module:Class".
GROUP = "rltrack.trackers"

#: A backend of the user's own: `package.module:Class`.
IMPORT_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


@functools.cache
def backend_types() -> dict[str, str]:
    """`backends.use = [...]` names -> "module:Class" that implements them,
    read once per process (about 7 ms: it reads every installed package's
    entry points, so `import rltrack` does not pay it)."""
    from importlib.metadata import entry_points

    found = {entry.name: entry.value for entry in sorted(entry_points(group=GROUP), key=lambda entry: entry.name)}  # one order, whatever the installs
    if "local" not in found:
        raise RuntimeError(
            f"no rltrack backends are registered (entry-point group {GROUP!r} has no 'local'): rltrack's package"
            " metadata is missing; install it (pip install -e . in a checkout) rather than putting it on PYTHONPATH"
        )
    return found


def is_backend_name(name: str) -> bool:
    return name in backend_types() or bool(IMPORT_PATH.fullmatch(name))


def backend_class(name: str) -> type[Backend | RemoteBackend]:
    module, _, cls = backend_types().get(name, name).partition(":")
    return getattr(importlib.import_module(module), cls)  # type: ignore[no-any-return]


__all__ = ["GROUP", "Backend", "RemoteBackend", "RunContext", "backend_class", "backend_types", "is_backend_name"]
