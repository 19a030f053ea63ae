"""The run's append-only journal: every event that left the filters, in order.

It is the source of truth of a run. Backends that are slow or down deliver
from it later (each with its own cursor), `rltrack sync` replays it, and a
crash loses at most what was not yet flushed (the pipeline flushes it at least
once a second). Format: `journal.jsonl`, one `Event.to_line()` per line.

Several processes writing one run (actors and a learner, env runners) each
append to a journal of their own, `journal.<writer>.jsonl`, so that no line is
ever interleaved with another process's; `read_journal(run_dir)` merges them
in time order.

Besides events, a journal holds control lines (`control_line`), each a
JSON object with a `"control"` key and the `time` it was written:

* `"dump"`, where the training process called `dump`: the agent writing the
  local files completes its text tables and csv row there, as the
  pipeline's own sinks do;
* `"counts"`, what the training process counted (converted, dropped,
  renamed, errors ...; a `Report.as_dict()`) since its last counts line:
  the agent adds them to report.json, which only it writes;
* `"end"`, the last line of a writer's session, with the `status` the run
  ended with: the agent writes it into meta.json.

`read_journal` skips control lines; a journal without counts or end lines
(written before they existed) reads the same. A control line of a name this
rltrack does not know (one a later release added for readers that may pass
it by) is read as `OtherControl` and passed by; a line of a newer schema
raises `NewerSchemaError`. docs/journal-schema.md is the contract.
"""

from __future__ import annotations

import heapq
import json
import os
import re
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Union

import orjson

from rltrack.core.events import SCHEMA_VERSION, Event, NewerSchemaError
from rltrack.core.report import Report

JOURNAL_NAME = "journal.jsonl"
#: A writer's name is part of file names: letters, digits, `_`, `-`, `.`, not leading `.`.
WRITER_NAME = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,99}")


class Dump:
    """A `dump` control line: the store-then-log point, at `time`."""

    __slots__ = ("time",)

    def __init__(self, time: float) -> None:
        self.time = time


class Counts:
    """A `counts` control line: what the training process counted since its last one."""

    __slots__ = ("time", "counts")

    def __init__(self, time: float, counts: dict[str, Any]) -> None:
        self.time = time
        self.counts = counts


class End:
    """An `end` control line: the writer's session ended with `status`."""

    __slots__ = ("time", "status")

    def __init__(self, time: float, status: str) -> None:
        self.time = time
        self.status = status


class OtherControl:
    """A control line this rltrack does not know (`control`, written by a later
    one at the same schema): readers pass it by, as they may (docs/journal-schema.md)."""

    __slots__ = ("time", "control")

    def __init__(self, time: float, control: str) -> None:
        self.time = time
        self.control = control


#: What a journal line is: an event, or a control line.
Entry = Union[Event, Dump, Counts, End, OtherControl]


#: How every control line starts (an event line never does: its `control` key would sit in `data`).
_CONTROL_START = b'{"schema":%d,"control":' % SCHEMA_VERSION


def control_line(control: str, time: float, **fields: Any) -> bytes:
    """The journal line of a control entry (`dump`, `counts`, `end`)."""
    return orjson.dumps({"schema": SCHEMA_VERSION, "control": control, "time": time, **fields}) + b"\n"


def parse_line(line: str | bytes) -> Entry:
    """One journal line as an `Event` or a control entry (`Dump`, `Counts`,
    `End`, else `OtherControl`); raises ValueError (or KeyError, TypeError) on a line that is neither. orjson reads the line
    unless it holds a NaN or an infinity, which only json's reader takes."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        obj = json.loads(line)
    if not isinstance(obj, dict):
        raise ValueError("a journal line is a JSON object")
    if "control" in obj:
        control, time = obj["control"], float(obj["time"])
        if int(obj.get("schema", SCHEMA_VERSION)) > SCHEMA_VERSION:
            raise NewerSchemaError(f"journal schema {obj['schema']} is newer than this rltrack understands ({SCHEMA_VERSION}); upgrade rltrack to read it")
        if control == "dump":
            return Dump(time)
        if control == "counts":
            return Counts(time, dict(obj["counts"]))
        if control == "end":
            return End(time, str(obj["status"]))
        return OtherControl(time, str(control))
    return Event.from_dict(obj)


def ended_with(journal: Path) -> str | None:
    """The status of the `end` line `journal` ends with; None when it ends
    otherwise (still written, crashed, or written before end lines existed)."""
    try:
        with journal.open("rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - 4096))  # an end line is short
            tail = f.read()
    except FileNotFoundError:
        return None
    if not tail.endswith(b"\n"):
        return None
    line = tail[:-1].rpartition(b"\n")[2]
    if not line.startswith(_CONTROL_START):
        return None
    entry = _unparsable(line)
    return entry.status if type(entry) is End else None


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


#: Bytes `append` gathers before writing them without waiting for `flush`.
WRITE_EVERY = 64 * 1024
#: Journal bytes kept in memory while the disk refuses them (full), written
#: once it takes them again; lines beyond it are dropped and counted (`lost`).
MAX_UNWRITTEN = 32 * 1024 * 1024


class JournalWriter:
    """Appends events as JSON lines; `flush` hands them to the operating system.

    A reader never meets a torn line in the middle of a journal: lines wait in
    memory until `flush` (or until `WRITE_EVERY` bytes gather); a write the
    disk cuts short (full) keeps the lines it did not finish, and the next
    write first cuts the file back to its last whole line (`ftruncate` needs
    no free space), then writes them again. So everything written while the
    disk takes it is delivered, and so is the first line after space returns;
    what a disk full for longer than `MAX_UNWRITTEN` bytes of lines cannot
    take is dropped and counted in `lost`, and so are lines still unwritten
    at `close`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        end_torn_tail(path)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        self._end = os.fstat(self._fd).st_size  # the file up to its last whole line
        self._torn = False  # the file holds part of a line past `_end`
        self._unwritten: list[bytes] = []
        self._size = 0
        #: Event lines dropped: the disk refused them for too long, or still at `close`.
        self.lost = 0

    def append(self, events: Iterable[Event]) -> None:
        lines = [event.to_line() for event in events]
        if lines:
            self._add(b"".join(lines), len(lines))

    def append_control(self, line: bytes) -> None:
        """Appends a `control_line`, in order with the events."""
        self._add(line, 0)

    def _add(self, data: bytes, events: int) -> None:
        if self._size + len(data) > MAX_UNWRITTEN:
            self.lost += events
            return
        self._unwritten.append(data)
        self._size += len(data)
        if self._size >= WRITE_EVERY:
            try:
                self.flush()
            except OSError:  # kept, and raised again by the next `flush`, whose caller reports it
                pass

    def flush(self) -> None:
        """Writes every line kept; raises OSError when the disk refuses them
        (they stay kept, and the file ends at its last whole line for readers)."""
        if not self._unwritten:
            return
        if self._torn:
            os.ftruncate(self._fd, self._end)
            self._torn = False
        data = b"".join(self._unwritten)
        view = memoryview(data)
        written = 0
        try:
            while written < len(data):
                written += os.write(self._fd, view[written:])
        except OSError:
            whole = data.rfind(b"\n", 0, written) + 1
            self._end += whole
            self._torn = written > whole
            self._unwritten = [data[whole:]]
            self._size = len(data) - whole
            raise
        self._end += written
        self._unwritten = []
        self._size = 0

    def close(self) -> None:
        """Flushes and closes; lines the disk still refuses are counted in `lost`
        and cut off, so the file ends with a whole line."""
        try:
            self.flush()
        except OSError:
            rest = b"".join(self._unwritten)
            self.lost += sum(1 for line in rest.splitlines() if not line.startswith(_CONTROL_START))
            self._unwritten, self._size = [], 0
            if self._torn:
                os.ftruncate(self._fd, self._end)
            raise
        finally:
            os.close(self._fd)


#: Told about each line a reader skips: the file, the line's byte offset, and why.
OnBad = Callable[[Path, int, str], None]


def count_skipped(report: Report, section: str) -> OnBad:
    """An `on_bad` that counts each skipped line in `report`'s `section` (a reader's own)."""
    return lambda journal, offset, reason: report.count("unparsable", f"{journal.name}: lines that are not journal lines, skipped", section=section)


def read_journal(path: str | Path, on_bad: OnBad | None = None) -> Iterator[Event]:
    """Events of a journal file, or of a run directory: all its writers'
    journals merged by event time.

    An unended last line that does not parse (being written, or cut short by
    a crash) is skipped. An ended line that is not a journal line (damage,
    anywhere in the file) is skipped and told to `on_bad`; by default one
    `RuntimeWarning` per file counts them. A line of a newer schema raises
    `NewerSchemaError` (upgrade rltrack).
    """
    path = Path(path)
    if not path.is_dir():
        return _read_file(path, on_bad)
    files = journal_files(path)
    if not files:
        raise FileNotFoundError(f"{path} holds no journal ({JOURNAL_NAME} or journal.<writer>.jsonl)")
    if len(files) == 1:
        return _read_file(next(iter(files.values())), on_bad)
    return heapq.merge(*(_read_file(f, on_bad) for f in files.values()), key=lambda event: event.time)


def _read_file(path: Path, on_bad: OnBad | None) -> Iterator[Event]:
    skipped: list[str] = []
    with path.open("rb") as f:
        offset = 0
        for number, line in enumerate(f, start=1):
            start, offset = offset, offset + len(line)
            if not line.strip():
                continue
            try:
                entry = _unparsable(line)
            except NewerSchemaError as exc:
                raise NewerSchemaError(f"{path}:{number}: {exc}") from None
            if type(entry) is Event:
                yield entry
            elif type(entry) is str and line.endswith(b"\n"):  # an unended last line is being written, or was cut by a crash
                if on_bad is None:
                    skipped.append(f"byte {start}: {entry}")
                else:
                    on_bad(path, start, entry)
    if skipped:
        warnings.warn(
            f"rltrack: {path}: {len(skipped)} lines skipped that are not journal lines (first at {skipped[0]})", RuntimeWarning, stacklevel=2
        )


def _unparsable(line: bytes) -> Entry | str:
    """The entry of a line, or why it is none (a line of a newer schema raises)."""
    try:
        return parse_line(line)
    except NewerSchemaError:
        raise
    except (KeyError, ValueError, TypeError, AttributeError, UnicodeDecodeError) as exc:  # bad JSON, or not an event
        return f"not a journal line ({type(exc).__name__}: {str(exc)[:100]})"


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


def read_batch(journal: Path, offset: int, limit: int, on_bad: OnBad | None = None, ends: list[int] | None = None) -> tuple[list[Entry], int]:
    """Up to `limit` entries from byte `offset`, and the offset after them.
    A line not yet ended by a newline is left for next time (its writer ends
    it, or cuts it back); an ended line that is not a journal line is
    skipped and told to `on_bad`. `ends`, when given, gets the byte offset
    after each entry's line, in order: with the writer, the entry's id, unique
    and the same in every read (see rltrack.trackers.remote.EventId). A journal with
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
            start, offset = offset, offset + len(line)
            if line.strip():
                entry = _unparsable(line)
                if type(entry) is str:
                    if on_bad is not None:
                        on_bad(journal, start, entry)
                else:
                    entries.append(entry)  # type: ignore[arg-type]
                    if ends is not None:
                        ends.append(offset)
    return entries, offset
