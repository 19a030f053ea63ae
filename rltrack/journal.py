"""The run's append-only journal: every event that left the filters, in order.

It is the source of truth of a run. Backends that are slow or down deliver
from it later (each with its own cursor), `rltrack sync` replays it, and a
crash loses at most what was not yet flushed (the pipeline flushes it at least
once a second). Format: `journal.jsonl`, one `Event.to_json()` per line.

Several processes writing one run (actors and a learner, env runners) each
append to a journal of their own, `journal.<writer>.jsonl`, so that no line is
ever interleaved with another process's; `read_journal(run_dir)` merges them
in time order.

Besides events, a journal holds one kind of control line, `{"control":
"dump", "time": ...}`, where the training process called `dump`: the agent
writing the local files completes its text tables and csv row there, as the
pipeline's own sinks do. `read_journal` skips control lines.
"""

from __future__ import annotations

import heapq
import json
import os
import re
from pathlib import Path
from typing import IO, Iterable, Iterator, Union

import orjson

from rltrack.events import SCHEMA_VERSION, Event

JOURNAL_NAME = "journal.jsonl"
#: A writer's name is part of file names: letters, digits, `_`, `-`, `.`, not leading `.`.
WRITER_NAME = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,99}")


class Dump:
    """A `dump` control line: the store-then-log point, at `time`."""

    __slots__ = ("time",)

    def __init__(self, time: float) -> None:
        self.time = time


#: What a journal line is: an event, or a control line.
Entry = Union[Event, Dump]


def parse_line(line: str | bytes) -> Entry:
    """One journal line as an `Event` or a `Dump`; raises ValueError (or
    KeyError, TypeError) on a line that is neither. orjson reads the line
    unless it holds a NaN or an infinity, which only json's reader takes."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        obj = json.loads(line)
    if not isinstance(obj, dict):
        raise ValueError("a journal line is a JSON object")
    if "control" in obj:
        if obj["control"] != "dump":
            raise ValueError(f"unknown control line {obj['control']!r}")
        return Dump(float(obj["time"]))
    return Event.from_dict(obj)


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

    def append_dump(self, time: float) -> None:
        self._file.write(f'{{"schema":{SCHEMA_VERSION},"control":"dump","time":{time!r}}}\n')

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
                entry = parse_line(line)
            except (KeyError, ValueError, TypeError, AttributeError) as exc:  # bad JSON, or not an event
                if not line.endswith("\n"):  # the last write was cut short
                    return
                raise ValueError(f"{path}:{number}: not a journal line ({exc})") from None
            if type(entry) is Event:
                yield entry


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
            parse_line(f.read())
        except (KeyError, ValueError, TypeError, AttributeError, UnicodeDecodeError):
            f.truncate(cut)
            return "cut"
        f.write(b"\n")
        return "ended"


def read_batch(journal: Path, offset: int, limit: int) -> tuple[list[Entry], int]:
    """Up to `limit` entries from byte `offset`, and the offset after them.
    A line not yet ended by a newline is left for next time. A journal with
    nothing past `offset` costs one `stat` (the agent polls every journal
    it serves several times a second)."""
    entries: list[Entry] = []
    try:
        if os.stat(journal).st_size <= offset:
            return entries, offset
        f = journal.open("rb")
    except FileNotFoundError:
        return entries, offset
    with f:
        f.seek(offset)
        while len(entries) < limit:
            line = f.readline()
            if not line.endswith(b"\n"):
                break
            offset += len(line)
            if line.strip():
                entries.append(parse_line(line))
    return entries, offset
