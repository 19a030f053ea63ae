"""The run's append-only journal: every event that left the filters, in order.

It is the source of truth of a run. Backends that are slow or down deliver
from it later (each with its own cursor), `rltrack sync` replays it, and a
crash loses at most what was not yet flushed (the pipeline flushes it at least
once a second). Format: `journal.jsonl`, one `Event.to_json()` per line.

Several processes writing one run (actors and a learner, env runners) each
append to a journal of their own, `journal.<writer>.jsonl`, so that no line is
ever interleaved with another process's; `read_journal(run_dir)` merges them
in time order.
"""

from __future__ import annotations

import heapq
import re
from pathlib import Path
from typing import IO, Iterable, Iterator

from rltrack.events import Event

JOURNAL_NAME = "journal.jsonl"
#: A writer's name is part of file names: letters, digits, `_`, `-`, `.`, not leading `.`.
WRITER_NAME = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,99}")


def journal_path(run_dir: Path, writer: str | None = None) -> Path:
    """The journal of one writer of the run (None: the run's only writer)."""
    return run_dir / (JOURNAL_NAME if writer is None else f"journal.{writer}.jsonl")


def journal_files(run_dir: Path) -> dict[str | None, Path]:
    """Every journal of the run, by writer (None for `journal.jsonl`)."""
    files: dict[str | None, Path] = {}
    if (run_dir / JOURNAL_NAME).is_file():
        files[None] = run_dir / JOURNAL_NAME
    for path in sorted(run_dir.glob("journal.*.jsonl")):
        files[path.name[len("journal.") : -len(".jsonl")]] = path
    return files


class JournalWriter:
    """Appends events as JSON lines; `flush` hands them to the operating system."""

    def __init__(self, path: Path) -> None:
        self.path = path
        end_torn_tail(path)
        self._file: IO[str] = path.open("a", encoding="utf-8")
        self.lines = 0

    def append(self, events: Iterable[Event]) -> None:
        lines = [event.to_json() for event in events]
        if lines:
            lines.append("")
            self._file.write("\n".join(lines))
            self.lines += len(lines) - 1

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_journal(path: str | Path) -> Iterator[Event]:
    """Events of a journal file, or of a run directory: all its writers'
    journals merged by event time.

    A torn last line, as a killed process leaves behind, is skipped; a bad line
    anywhere else is an error, because the file was then damaged by something
    other than a crash.
    """
    path = Path(path)
    if not path.is_dir():
        return _read_file(path)
    files = journal_files(path)
    if not files:
        raise FileNotFoundError(f"{path} holds no journal ({JOURNAL_NAME} or journal.<writer>.jsonl)")
    if len(files) == 1:
        return _read_file(next(iter(files.values())))
    return heapq.merge(*(_read_file(f) for f in files.values()), key=lambda event: event.time)


def _read_file(path: Path) -> Iterator[Event]:
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield Event.from_json(line)
            except (KeyError, ValueError, TypeError, AttributeError) as exc:  # bad JSON, or not an event
                if not line.endswith("\n"):  # the last write was cut short
                    return
                raise ValueError(f"{path}:{number}: not a journal line ({exc})") from None


def end_torn_tail(path: Path) -> str | None:
    """Before appending to (or delivering the rest of) a journal whose last
    line has no newline (a killed writer): end that line if it is a whole
    event ("ended"), else cut it off ("cut"); None if the file ends cleanly.
    Either way the next event starts on a line of its own instead of gluing
    onto the torn one, which would turn a tolerated torn tail into a bad line
    in the middle."""
    if not path.exists():
        return None
    with path.open("rb+") as f:
        end = f.seek(0, 2)
        pos = end
        cut = 0
        while pos > 0:  # scan back from the end in chunks: journals can be large
            start = max(0, pos - 65536)
            f.seek(start)
            newline = f.read(pos - start).rfind(b"\n")
            if newline >= 0:
                cut = start + newline + 1
                break
            pos = start
        if cut == end:
            return None
        f.seek(cut)
        try:
            Event.from_json(f.read().decode("utf-8"))
        except (KeyError, ValueError, TypeError, AttributeError, UnicodeDecodeError):
            f.truncate(cut)
            return "cut"
        f.write(b"\n")
        return "ended"
