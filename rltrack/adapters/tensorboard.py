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
as they would be without rltrack), then appends the `Event` proto to the
attachment's inbox (a deque) and returns; the first proto since the inbox was
last emptied queues its emptying on the logger (`Logger.emit_deferred`).
The translation into rltrack events (rltrack.frameworks.tensorboard) runs on
the pipeline thread. A writer's `close()` lets the translation hand over the
values it holds back (a block's last values, a twin's half); so does the end
of the process, before the logger closes (`attach` takes over closing the
logger at exit for that), and `detach()`.

`attach(logger)` sends every writer's values to that logger's run;
`attach(open_logger)` with a function `logdir -> Logger` opens the run when
the first value is written, with the writer's log directory; a function
that takes a keyword `run_name` also gets the name the writer's library
gives the run (rltrack.frameworks.tensorboard_runs.run_name: HF's `run_name`,
rl_games' experiment, CleanRL's folder). The launcher, `rltrack run`, does
so (rltrack.cli.run_child).

Which library a writer's tags belong to is decided by the code that calls
the writer, not by the tags: the first time a writer writes a tag, the
hook looks up the stack for the first frame outside the writers' packages
(`trl`/`transformers`, `skrl`, `rl_games`, `rsl_rl`, a CleanRL script ...,
rltrack.frameworks.library.creator_library); the translation
applies that library's table only (a few µs, once per writer and tag). Attaching again switches
to the new target (the class is patched once). A process forked from an
attached one opens its own run in the lazy mode; with a fixed logger it
sends nothing (that logger's run and thread are the parent's) and says so on
stderr at its first value.
"""

from __future__ import annotations

import importlib.abc
import inspect
import os
import sys
import threading
from collections import deque
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Union

from rltrack.frameworks.canonical import names_mode
from rltrack.frameworks.tensorboard import Translator
from rltrack.frameworks.tensorboard_runs import run_name
from rltrack.frameworks.library import creator_library
from rltrack.frameworks.tensorboard_tags import WRITER_PACKAGES
from rltrack.sinks.rundir import media_file
from rltrack.training.exits import close_at_exit, closed_before_exit

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec

    from rltrack.core.events import Event
    from rltrack.training.logger import Logger

#: The modules defining the writer classes whose `add_event` is hooked -> whether
#: that class drops events after `close()` (tensorboardX's; TensorBoard's raises).
WRITER_MODULES = {"tensorboard.summary.writer.event_file_writer": False, "tensorboardX.event_file_writer": True}
#: Protos kept for a logger closed by its owner while still attached, at most.
MAX_WAITING = 100_000
WRITER_CLASS = "EventFileWriter"

Target = Union["Logger", Callable[[str], "Logger"]]


class _Attachment:
    """Where the hooked writers' events go: one logger (opened on the first
    value in the lazy mode) and the translation feeding it."""

    def __init__(self, target: Target, namespaced: bool = False, namespaced_after_fork: bool = False) -> None:
        self.target = target
        self.namespaced = namespaced
        self.namespaced_after_fork = namespaced_after_fork
        #: the log directory of the first writer that wrote a value (the root of a namespaced attachment's namespaces)
        self._first_logdir: str | None = None
        self.open_logger: Callable[..., Logger] | None = target if callable(target) and not hasattr(target, "emit_deferred") else None
        #: whether `open_logger` takes the run's name (`run_name=`) besides the log directory
        self._gives_names = self.open_logger is not None and "run_name" in inspect.signature(self.open_logger).parameters
        #: (a writer's log directory, a tag) -> the library of the code that first wrote it (`_caller_library`)
        self._libraries: dict[tuple[str, str], str | None] = {}
        self.logger: Logger | None = None if self.open_logger is not None else target  # type: ignore[assignment]
        self._lock = threading.Lock()
        self._translator: Translator | None = None
        #: (writer, proto) handed over and not yet translated; `_scheduled`: an emptying is queued on the logger.
        self._inbox: deque[tuple[Any, Any]] = deque()
        self._scheduled = False
        if self.logger is not None:
            self._close_at_exit(self.logger)

    # ---- the training thread's side

    def take(self, writer: Any, event: Any) -> None:
        """One `Event` proto a writer wrote: into the inbox; the first one since
        the pipeline thread last emptied it schedules the next emptying. The
        first time a writer writes a tag, the library of the code calling it
        is noted (`library_of`)."""
        has_values = event.HasField("summary")
        if has_values:
            logdir = writer.get_logdir()
            libraries = self._libraries
            for value in event.summary.value:
                if (logdir, value.tag) not in libraries:
                    libraries[logdir, value.tag] = _caller_library()
        logger = self.logger
        if logger is None:
            if not has_values:  # the file's version line: no run for a writer that writes nothing
                return
            logger = self._open(writer, event)
        if self._first_logdir is None:
            self._first_logdir = str(writer.get_logdir())
        inbox = self._inbox
        inbox.append((writer, event))
        if not self._scheduled:
            self._scheduled = True
            logger.emit_deferred(self._drain)
        elif len(inbox) > MAX_WAITING and logger.closed:  # closed by its owner, this attachment left on: nobody empties it
            inbox.clear()

    def writer_closed(self) -> None:
        """A writer's `close()`: the values the translation holds are handed over.
        A writer closed after the run (tensorboardX closes its writers at exit,
        after rltrack's end of the process has flushed and closed the run: rl_games
        never closes its own) has nothing left to hand over: nothing is said."""
        logger = self.logger
        if logger is not None and not logger.closed:
            logger.emit_deferred(self._flush)

    def library_of(self, logdir: str, tag: str) -> str | None:
        """The library whose code wrote `tag` first in the writer of `logdir`
        (rltrack.frameworks.library.creator_library), None if unknown."""
        return self._libraries.get((logdir, tag))

    def _open(self, writer: Any, event: Any) -> Logger:
        with self._lock:
            if self.logger is None:
                assert self.open_logger is not None
                logdir = str(writer.get_logdir())
                if self._gives_names:  # the run's name as the writer's library gives it (HF's run_name, rl_games' experiment)
                    tag = event.summary.value[0].tag if event.summary.value else ""
                    logger = self.open_logger(logdir, run_name=run_name(logdir, self._libraries.get((writer.get_logdir(), tag)), event))
                else:
                    logger = self.open_logger(logdir)
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
            # namespaced: the first log directory's parent as the translation's root, so that every
            # log directory, the first one too, is a namespace named after it
            root = os.path.dirname(os.path.normpath(self._first_logdir or ".")) if self.namespaced else None
            self._translator = Translator(
                run=logger.name, names=names_mode(logger), root=root, report=logger.report,
                save_image=partial(_save_image, logger.run_dir), library=self.library_of,
            )  # fmt: skip
        return self._translator

    def _drain(self) -> list[Event]:
        """Translates what the inbox holds (cleared first: a proto handed over
        meanwhile schedules another emptying)."""
        self._scheduled = False
        assert self.logger is not None
        translator = self._translator_of(self.logger)
        inbox = self._inbox
        events: list[Event] = []
        while inbox:
            writer, proto = inbox.popleft()
            events += translator.add(proto, writer.get_logdir())
        return events

    def _flush(self) -> list[Event]:
        """The inbox, then the values the translation holds back."""
        if self.logger is None:
            return []
        return self._drain() + self._translator_of(self.logger).flush()


def _caller_library() -> str | None:
    """The library of the code calling a writer now: the first frame on the
    stack outside the writers' own packages (and rltrack's), as
    rltrack.frameworks.library.creator_library names it."""
    frame = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__") or ""
        if not any(module == package or module.startswith(package + ".") for package in WRITER_PACKAGES):
            imported = tuple(name for name in ("cleanrl", "cleanrl_utils") if name in sys.modules)
            return creator_library(module, frame.f_globals.get("__file__"), imported)
        frame = frame.f_back
    return None


def _save_image(run_dir: Path, namespace: str, key: str, step: int, png: bytes) -> dict[str, Any]:
    """An image's PNG saved in the run directory, as the image event's data."""
    path, relative = media_file(run_dir, namespace, key, step)
    path.write_bytes(png)
    return {"path": relative, "format": "png"}


_ATTACHMENT: _Attachment | _NotSent | None = None
#: writer class -> its own `add_event` and `close`, while patched.
_ORIGINALS: dict[type, tuple[Any, Any]] = {}


def attach(target: Target, *, namespaced: bool = False, namespaced_after_fork: bool = False) -> None:
    """Sends the values of every TensorBoard writer in this process (torch's,
    tensorboardX's, TensorBoard's own) to `target`: a `Logger`, or a function
    `logdir -> Logger` called when the first value is written. `namespaced`:
    every value in a namespace named after its writer's log directory, keys
    as tagged (a process writing one run beside others, whose tags would
    collide: `run.launch_runs = "one"`); else the first log directory's tags
    route by their prefixes. `namespaced_after_fork`: so in a process forked
    from this one (it writes the same run). Harmless to call again: the same target again
    changes nothing, another one replaces it."""
    global _ATTACHMENT
    with _PATCH_LOCK:
        if _ATTACHMENT is None or _ATTACHMENT.target is not target or _ATTACHMENT.namespaced != namespaced:
            if _ATTACHMENT is not None:
                _ATTACHMENT.release()
            _ATTACHMENT = _Attachment(target, namespaced, namespaced_after_fork)
        for module, drops_after_close in WRITER_MODULES.items():
            if module in sys.modules:
                _patch(getattr(sys.modules[module], WRITER_CLASS), drops_after_close)
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


def _patch(cls: type, drops_after_close: bool) -> None:
    """Hooks `add_event` and `close` of one writer class, once."""
    if cls in _ORIGINALS:
        return
    add_event, close = cls.add_event, cls.close  # type: ignore[attr-defined]

    def hooked_add_event(self: Any, event: Any) -> None:
        add_event(self, event)
        attachment = _ATTACHMENT
        if attachment is not None:
            attachment.take(self, event)

    def hooked_add_event_unless_closed(self: Any, event: Any) -> None:
        add_event(self, event)
        attachment = _ATTACHMENT
        if attachment is not None and not self._closed:
            attachment.take(self, event)

    def hooked_close(self: Any) -> None:
        close(self)
        attachment = _ATTACHMENT
        if attachment is not None:
            attachment.writer_closed()

    hooked = hooked_add_event_unless_closed if drops_after_close else hooked_add_event
    hooked.__wrapped__ = add_event  # type: ignore[attr-defined]
    hooked_close.__wrapped__ = close  # type: ignore[attr-defined]
    _ORIGINALS[cls] = (add_event, close)
    cls.add_event, cls.close = hooked, hooked_close  # type: ignore[attr-defined]


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
                    _patch(getattr(module, WRITER_CLASS), WRITER_MODULES[name])

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


_FINDER = _PatchOnImport()


class _NotSent:
    """A forked child's attachment when the parent's sends to a fixed logger:
    that logger's run and pipeline thread are the parent's (a fork copies no
    threads), so the child's values stay in its event files; its first value
    says so on stderr rather than vanishing without a word."""

    target, namespaced = None, False

    def __init__(self) -> None:
        self._told = False

    def take(self, writer: Any, event: Any) -> None:
        if not self._told and event.HasField("summary"):
            self._told = True
            print(
                f"rltrack: process {os.getpid()} was forked from one attached with attach(logger): the values of its "
                f"TensorBoard writer in {writer.get_logdir()} stay in its event files only; call attach(make_logger(...)) "
                "in the child, or attach(open_logger), or run the script under `rltrack run`, to send them",
                file=sys.stderr,
            )

    def writer_closed(self) -> None:
        pass

    def release(self) -> None:
        pass


def _after_fork_in_child() -> None:
    """A forked child has the parent's patched classes but neither its logger's
    thread nor its run: in the lazy mode it opens a run of its own when it
    writes (rltrack.cli.run_child: of its own, or as a writer of the launch's one run)."""
    global _ATTACHMENT
    attachment = _ATTACHMENT
    if isinstance(attachment, _Attachment):
        closed_before_exit(attachment)
        if attachment.open_logger is None:
            _ATTACHMENT = _NotSent()
        else:
            after_fork = attachment.namespaced_after_fork
            _ATTACHMENT = _Attachment(attachment.open_logger, attachment.namespaced or after_fork, after_fork)


os.register_at_fork(after_in_child=_after_fork_in_child)
