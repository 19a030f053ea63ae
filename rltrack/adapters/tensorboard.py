"""rltrack on every TensorBoard writer of a process: `attach(logger)` / `detach()`.

CleanRL, rsl_rl, skrl, DI-engine, LightZero, rl_games and Sample Factory log
through `torch.utils.tensorboard.SummaryWriter` or tensorboardX's. Both end
in one class's `add_event(event)`: TensorBoard's
`tensorboard.summary.writer.event_file_writer.EventFileWriter` (torch's
writer, skrl, TensorFlow-free code) and
`tensorboardX.event_file_writer.EventFileWriter`. `attach` replaces that
method *on the class*, so writers made before `attach` and classes imported
by name (skrl does so at import) are covered, whatever the import order; a
writer module not imported yet is patched when it is imported (an import
hook on `sys.meta_path`, so attaching imports neither package).

The hooked `add_event` first does what it did (the event files stay exactly
as they would be without rltrack), then hands the `Event` proto to the
logger as deferred work (`Logger.emit_deferred`: a deque append) and returns.
The translation into rltrack events (rltrack.frameworks.tensorboard) runs on
the pipeline thread. A writer's `close()` lets the translation hand over the
values it holds back (a block's last values, a twin's half); so does the end
of the process, before the logger closes (`attach` takes over closing the
logger at exit for that), and `detach()`.

`attach(logger)` sends every writer's values to that logger's run;
`attach(open_logger)` with a function `logdir -> Logger` opens the run when
the first value is written, with the writer's log directory (the launcher,
`rltrack run`, does so; rltrack.cli.run_command). Attaching again switches
to the new target (the class is patched once). A process forked from an
attached one opens its own run in the lazy mode, and sends nothing with a
fixed logger (that logger's thread does not exist in the child).
"""

from __future__ import annotations

import importlib.abc
import os
import sys
import threading
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Union

from rltrack.frameworks.canonical import names_mode
from rltrack.frameworks.tensorboard import Translator
from rltrack.sinks.rundir import media_file
from rltrack.training.exits import close_at_exit, closed_before_exit

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec

    from rltrack.core.events import Event
    from rltrack.training.logger import Logger

#: The modules defining the writer classes whose `add_event` is hooked.
WRITER_MODULES = ("tensorboard.summary.writer.event_file_writer", "tensorboardX.event_file_writer")
WRITER_CLASS = "EventFileWriter"

Target = Union["Logger", Callable[[str], "Logger"]]


class _Attachment:
    """Where the hooked writers' events go: one logger (opened on the first
    value in the lazy mode) and the translation feeding it."""

    def __init__(self, target: Target) -> None:
        self.open_logger: Callable[[str], Logger] | None = target if callable(target) and not hasattr(target, "emit_deferred") else None
        self.logger: Logger | None = None if self.open_logger is not None else target  # type: ignore[assignment]
        self._lock = threading.Lock()
        self._translator: Translator | None = None
        if self.logger is not None:
            self._close_at_exit(self.logger)

    # ---- the training thread's side

    def take(self, writer: Any, event: Any) -> None:
        """One `Event` proto a writer wrote: handed over, nothing else."""
        logger = self.logger
        if logger is None:
            if not event.HasField("summary"):  # the file's version line: no run for a writer that writes nothing
                return
            logger = self._open(writer)
        logger.emit_deferred(partial(self._translate, writer, event))

    def writer_closed(self) -> None:
        if self.logger is not None:
            self.logger.emit_deferred(self._flush)

    def _open(self, writer: Any) -> Logger:
        with self._lock:
            if self.logger is None:
                assert self.open_logger is not None
                logger = self.open_logger(str(writer.get_logdir()))
                self._close_at_exit(logger)
                self.logger = logger
            return self.logger

    def _close_at_exit(self, logger: Logger) -> None:
        """The process's end closes this attachment instead of the logger: it
        hands over the held values first, then closes the logger."""
        closed_before_exit(logger)
        close_at_exit(self)

    def close(self, status: str = "finished") -> None:
        """Called at the process's end (rltrack.training.exits), once."""
        closed_before_exit(self)
        logger = self.logger
        if logger is not None and not logger.closed:
            logger.emit_deferred(self._flush)
            logger.close(status=status)

    def release(self) -> None:
        """`detach`: the held values handed over; the logger closed at exit as any other again."""
        closed_before_exit(self)
        logger = self.logger
        if logger is not None:
            logger.emit_deferred(self._flush)
            close_at_exit(logger)

    # ---- the pipeline thread's side

    def _translator_of(self, logger: Logger) -> Translator:
        if self._translator is None:
            self._translator = Translator(
                run=logger.name, names=names_mode(logger), report=logger.report, save_image=partial(_save_image, logger.run_dir)
            )
        return self._translator

    def _translate(self, writer: Any, event: Any) -> list[Event]:
        assert self.logger is not None
        return self._translator_of(self.logger).add(event, writer.get_logdir())

    def _flush(self) -> list[Event]:
        return [] if self._translator is None else self._translator.flush()


def _save_image(run_dir: Path, namespace: str, key: str, step: int, png: bytes) -> dict[str, Any]:
    """An image's PNG saved in the run directory, as the image event's data."""
    path, relative = media_file(run_dir, namespace, key, step)
    path.write_bytes(png)
    return {"path": relative, "format": "png"}


_ATTACHMENT: _Attachment | None = None
#: writer class -> its own `add_event` and `close`, while patched.
_ORIGINALS: dict[type, tuple[Any, Any]] = {}


def attach(target: Target) -> None:
    """Sends the values of every TensorBoard writer in this process (torch's,
    tensorboardX's, TensorBoard's own) to `target`: a `Logger`, or a function
    `logdir -> Logger` called when the first value is written. Harmless to
    call again (the new target replaces the old one)."""
    global _ATTACHMENT
    with _PATCH_LOCK:
        if _ATTACHMENT is not None:
            _ATTACHMENT.release()
        _ATTACHMENT = _Attachment(target)
        for module in WRITER_MODULES:
            if module in sys.modules:
                _patch(getattr(sys.modules[module], WRITER_CLASS))
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)


def detach() -> None:
    """Restores the writer classes; the values held back are handed to the
    logger, which stays open (whoever made it closes it; a logger `attach`
    opened itself is closed at exit)."""
    global _ATTACHMENT
    with _PATCH_LOCK:
        if _FINDER in sys.meta_path:
            sys.meta_path.remove(_FINDER)
        for cls, (add_event, close) in _ORIGINALS.items():
            cls.add_event, cls.close = add_event, close
        _ORIGINALS.clear()
        if _ATTACHMENT is not None:
            _ATTACHMENT.release()
        _ATTACHMENT = None


_PATCH_LOCK = threading.RLock()


def _patch(cls: type) -> None:
    """Hooks `add_event` and `close` of one writer class, once."""
    if cls in _ORIGINALS:
        return
    add_event, close = cls.add_event, cls.close  # type: ignore[attr-defined]

    def hooked_add_event(self: Any, event: Any) -> None:
        add_event(self, event)
        attachment = _ATTACHMENT
        if attachment is not None and not getattr(self, "_closed", False):  # tensorboardX drops events after close
            attachment.take(self, event)

    def hooked_close(self: Any) -> None:
        close(self)
        attachment = _ATTACHMENT
        if attachment is not None:
            attachment.writer_closed()

    hooked_add_event.__wrapped__ = add_event  # type: ignore[attr-defined]
    hooked_close.__wrapped__ = close  # type: ignore[attr-defined]
    _ORIGINALS[cls] = (add_event, close)
    cls.add_event, cls.close = hooked_add_event, hooked_close  # type: ignore[attr-defined]


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches a writer class as its module is imported (after attach)."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> ModuleSpec | None:
        if name not in WRITER_MODULES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_and_patch(module: Any) -> None:
            exec_module(module)
            with _PATCH_LOCK:
                if _ATTACHMENT is not None:
                    _patch(getattr(module, WRITER_CLASS))

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


_FINDER = _PatchOnImport()


def _after_fork_in_child() -> None:
    """A forked child has the parent's patched classes but not its logger's thread."""
    global _ATTACHMENT
    attachment = _ATTACHMENT
    if attachment is not None:
        closed_before_exit(attachment)
        _ATTACHMENT = _Attachment(attachment.open_logger) if attachment.open_logger is not None else None


os.register_at_fork(after_in_child=_after_fork_in_child)
