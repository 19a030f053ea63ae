"""STAND-IN for DeepMind's `launchpad` package, for tests and examples only.

This is NOT launchpad. dm-acme 0.4.0 pins `dm-launchpad`, which has no wheels
for Python >= 3.11, so dm-acme is installed with `--no-deps`; yet `import acme`
still imports `launchpad`, only for `acme.utils.signals.runtime_terminator`
(used by `acme.EnvironmentLoop.run`), which registers a stop handler. This
module provides just those two calls, as no-ops, plus `stop()`, so single-process
Acme code can run. Nothing distributed works with it. Put `tests/helpers/standins` on
`sys.path` only when the real package is missing.
"""

from __future__ import annotations

from typing import Any, Callable

IS_STANDIN = True

_handlers: list[Callable[[], Any]] = []


def register_stop_handler(handler: Callable[[], Any]) -> None:
    """Remembers `handler`; the real launchpad calls it when the program is stopped."""
    _handlers.append(handler)


def unregister_stop_handler(handler: Callable[[], Any]) -> None:
    if handler in _handlers:
        _handlers.remove(handler)


def stop() -> None:
    """The real launchpad stops the whole program; a single process just has nothing to stop."""
