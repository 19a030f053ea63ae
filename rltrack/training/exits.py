"""How a process's end reaches the loggers still open in it: the status a run
ends with, and the hooks that close open loggers at exit.

A training script may end without calling `close()`: the script's last line,
an uncaught exception, Ctrl-C, SIGTERM from a scheduler. Every such end must
still complete each open logger's journal and mark its run `finished`,
`failed` or `killed`. The `Logger` (rltrack.training.logger) registers itself here
when it opens (`close_at_exit`) and leaves when it closes
(`closed_before_exit`); the hooks are installed once, when the first logger
opens, not at import.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import weakref
from typing import Any, Callable


def exit_status(exc: BaseException | None) -> str:
    """The status a run ends with when `exc` (None: nothing) ended it;
    `sys.exit(0)` is a normal end."""
    if exc is None or (isinstance(exc, SystemExit) and exc.code in (0, None)):
        return "finished"
    return "killed" if isinstance(exc, KeyboardInterrupt) else "failed"


#: The open loggers (anything with `close(status=...)`), closed at exit.
_OPEN_LOGGERS: weakref.WeakSet[Any] = weakref.WeakSet()


def close_at_exit(logger: Any) -> None:
    """Closes `logger` at the process's end if it is still open then; installs
    the exit hooks when the first logger opens."""
    _OPEN_LOGGERS.add(logger)
    _watch_uncaught()


def closed_before_exit(logger: Any) -> None:
    """`logger` was closed: the exit hooks leave it alone."""
    _OPEN_LOGGERS.discard(logger)


#: The module of wandb's exit hook. `wandb.init` puts it over whatever hook is
#: there (this watcher, when a logger is open); it prints the traceback itself,
#: then calls the hook it replaced unless that is Python's default.
WANDB_EXIT_HOOKS = "wandb.sdk.lib.exit_hooks"


class _UncaughtWatcher:
    """A `sys.excepthook` that notes the exception ending the program, so that
    loggers left open are marked failed or killed rather than finished, and
    then hands it to the hook it replaced (which prints it as before), unless
    wandb's exit hook called it: that printed it already, and Python's default
    hook would print it a second time."""

    def __init__(self, chained: Callable[..., Any]) -> None:
        self.chained = chained
        self.exc: BaseException | None = None

    def __call__(self, exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
        self.exc = exc
        try:
            caller = sys._getframe(1).f_globals.get("__name__")
        except ValueError:  # called by the interpreter itself, not by another hook
            caller = None
        if caller == WANDB_EXIT_HOOKS and self.chained is sys.__excepthook__:
            return
        self.chained(exc_type, exc, tb)


_WATCHER: _UncaughtWatcher | None = None


def _watch_uncaught() -> None:
    """Installs the watcher, and the SIGTERM handler where the program has none
    of its own, once, when the first logger opens (not at import)."""
    global _WATCHER
    if _WATCHER is None:
        _WATCHER = sys.excepthook = _UncaughtWatcher(sys.excepthook)
        _close_before_atexit()
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _close_on_sigterm)


def _close_on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM (a scheduler's stop, `kill`, a container stopping) would end the
    process without atexit hooks: close the open loggers as `killed` first (their
    journals complete, the agent given each one's `close_timeout`), then let
    the signal do what it would have done."""
    for logger in list(_OPEN_LOGGERS):
        logger.close(status="killed")
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _close_before_atexit() -> None:
    """Runs `_close_open_loggers` when the interpreter starts to shut down,
    before any `atexit` handler: wandb, neptune and mlflow tear their clients
    down in atexit handlers registered after ours (so run before it), and
    loggers still delivering to them must be closed first. `concurrent.futures`
    uses the same hook; where it is missing, the atexit handler below remains."""
    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        try:
            register(_close_open_loggers)
        except RuntimeError:  # the interpreter is already shutting down
            pass


#: A `SystemExit` the program ends with, noted by `ended_by` (the excepthook never sees one).
_ENDED_BY: BaseException | None = None


def ended_by(exc: BaseException) -> None:
    """Notes the exception the program is ending with where no excepthook sees
    it (`sys.exit(3)` under `rltrack run`): loggers closed at exit take their
    status from it (`failed` for a non-zero code)."""
    global _ENDED_BY
    _ENDED_BY = exc


@atexit.register
def _close_open_loggers() -> None:
    """Loggers left open at interpreter exit are drained and closed."""
    status = exit_status(_WATCHER.exc if _WATCHER and _WATCHER.exc else _ENDED_BY)
    for logger in list(_OPEN_LOGGERS):
        logger.close(status=status)
