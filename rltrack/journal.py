"""The run's append-only journal: every event that left the filters, in order.

It is the source of truth of a run. Backends that are slow or down deliver
from it later (each with its own cursor), `rltrack sync` replays it, and a
crash loses at most what was not yet flushed (the pipeline flushes it at least
once a second). Format: `journal.jsonl`, one `Event.to_json()` per line.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Iterable, Iterator

from rltrack.events import Event

JOURNAL_NAME = "journal.jsonl"


class JournalWriter:
    """Appends events as JSON lines; `flush` hands them to the operating system."""

    def __init__(self, path: Path) -> None:
        self.path = path
        _end_torn_tail(path)
        self._file: IO[str] = path.open("a", encoding="utf-8")
        self.lines = 0

    def append(self, events: Iterable[Event]) -> None:
        for event in events:
            self._file.write(event.to_json())
            self._file.write("\n")
            self.lines += 1

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_journal(path: str | Path) -> Iterator[Event]:
    """Events of a journal file (or of the run directory holding it).

    A torn last line, as a killed process leaves behind, is skipped; a bad line
    anywhere else is an error, because the file was then damaged by something
    other than a crash.
    """
    path = Path(path)
    if path.is_dir():
        path = path / JOURNAL_NAME
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


def _end_torn_tail(path: Path) -> None:
    """Before appending to a journal whose last line has no newline (a killed
    writer): end that line if it is a whole event, else cut it off. Either way
    the next event starts on a line of its own instead of gluing onto the torn
    one, which would turn a tolerated torn tail into a bad line in the middle."""
    if not path.exists():
        return
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
            return
        f.seek(cut)
        try:
            Event.from_json(f.read().decode("utf-8"))
        except (KeyError, ValueError, TypeError, AttributeError):
            f.truncate(cut)
        else:
            f.write(b"\n")
