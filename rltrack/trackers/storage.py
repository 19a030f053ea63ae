"""The agent's mirror of a run in storage (`run.storage`, see rltrack.core.storage).

One more destination of the agent, delivered like a tracker (a lane, a
cursor per writer, backoff, give-up after the run's end, `rltrack sync --to
storage`), so a storage that is down or refuses writes delays only the mirror
and says so as a tracker does; training never waits for it. What it writes is
the layout of rltrack.journal.layout:

* the journal, as segments named by the byte offsets they hold: the lines
  taken are gathered per writer and written as one segment once
  `segment_bytes` have gathered or the oldest has waited `every` seconds, and
  at the journal's end. A segment is written before the cursor moves over
  it (`Progress.stored`), and the range of a segment about to be written is
  saved in the cursor first (`state`), so that a retry, in this process or
  the next, writes exactly that range again: the same object, never a second copy;
* the run directory's other files, each once it has not changed for `every`
  seconds (a checkpoint, the config) and every changed one at the journal's
  end (the text logs, progress.csv, TensorBoard's files, meta.json).

Object storage cannot append: a file is always written whole. A file that
only grew since it was written (the text logs, progress.csv, TensorBoard's
event files: the bytes before its stored size unchanged, judged by the last
`TAIL_BYTES` of them) is written again during the run only once it has grown
by `GROWTH` of its stored size, and whole at the journal's end: the bytes
written for such a file stay within about 1 / (1 - 1 / (1 + GROWTH)) + 1
times its final size however long the run, where writing it again each time
it settles costs its size at every dump (measured in docs/storage.md). The
journal's segments, written within `every`, are the run's live record.
"""

from __future__ import annotations

import os
import time
import zlib
from collections import deque
from pathlib import Path
from typing import Any

from rltrack.core.optional import ensure_installed
from rltrack.core.storage import Storage, is_uri, join
from rltrack.journal.layout import mirrored, segment_path
from rltrack.core.events import Event
from rltrack.sinks.base import RunContext
from rltrack.trackers.remote import EventId, Failure, Lines, Progress, RemoteBackend, Rules, raised

#: What the errors retrying cannot heal say (the store's error codes, as S3 and pyarrow name them).
_CANNOT_HEAL = ("NoSuchBucket", "NO_SUCH_BUCKET", "AccessDenied", "ACCESS_DENIED", "InvalidAccessKeyId", "INVALID_ACCESS_KEY_ID",
                "SignatureDoesNotMatch", "SIGNATURE_DOES_NOT_MATCH", "Permission denied")
#: A file that only grew is written again during the run once it has grown by this share of its stored size.
GROWTH = 0.5
#: How many bytes before a file's stored size tell whether it only grew since (their checksum unchanged).
TAIL_BYTES = 4096


class _Gathered:
    """Journal bytes [`first`, `last`) of one writer taken but not yet written;
    `planned`: the end of the segment being written (fixed at the first try)."""

    __slots__ = ("journal", "first", "last", "since", "planned")

    def __init__(self, journal: Path, first: int, last: int, planned: int | None) -> None:
        self.journal = journal
        self.first = first
        self.last = last
        self.since = time.monotonic()
        self.planned = planned


class StorageBackend(RemoteBackend):
    """Settings: `uri`, the storage root (run.storage); `run`, the run's path
    under it (its path under run.root); `every`, seconds a line or a settled
    file waits at most before it is written; `segment_bytes`, the size at
    which a segment is written at once."""

    name = "storage"
    #: The journal's lines as they are, gathered into segments written later.
    rules = Rules(max_batch=10_000, client_modules=("pyarrow.fs",), takes_lines=True, stores_later=True)

    def __init__(self, uri: str, run: str, every: float = 10.0, segment_bytes: int = 8 << 20) -> None:
        if not isinstance(uri, str) or not (is_uri(uri) or os.path.isabs(uri)):
            raise ValueError(f"uri = {uri!r} must be a storage URI such as 's3://bucket/prefix' or 'file:///shared/runs', or an absolute path")
        if not isinstance(run, str) or not run.strip("/"):
            raise ValueError(f"run = {run!r} must be the run's path under the storage root, e.g. 'sweep/trial_0'")
        if isinstance(every, bool) or not isinstance(every, (int, float)) or not every > 0:
            raise ValueError(f"every = {every!r} must be a number of seconds > 0, e.g. every = 10")
        if isinstance(segment_bytes, bool) or not isinstance(segment_bytes, int) or segment_bytes < 1:
            raise ValueError(f"segment_bytes = {segment_bytes!r} must be a whole number of bytes >= 1, e.g. segment_bytes = 8388608")
        ensure_installed("pyarrow", "storage", "run.storage")
        self.uri = uri
        self.run_path = run.strip("/")
        self.every = float(every)
        self.segment_bytes = segment_bytes

    def target(self, run: RunContext) -> str:
        return join(self.uri, self.run_path)

    def open(self, run: RunContext) -> None:
        super().open(run)
        self._storage: Storage | None = None
        self._gathered: dict[str | None, _Gathered] = {}
        self._written: dict[str | None, int] = {}  # per writer, the journal offset up to which segments are written
        self._tickets: deque[tuple[int, str | None, int]] = deque()  # batches taken, not yet written: (ticket, writer, end)
        self._ticket = 0
        self._stored = 0
        self._files: dict[str, tuple[int, int, int]] = {}  # files written: relative path -> (size, mtime_ns, checksum of its tail)
        self._files_at = time.monotonic()

    # ---- delivery ---------------------------------------------------------------

    def resume(self, position: int | None, state: dict[str, Any]) -> Progress:
        super().resume(position, state)
        return Progress(self._ticket, None)

    def deliver(self, events: list[Event], ids: list[EventId], *, lines: Lines | None = None, store_now: bool = False) -> Progress:
        """Gathers `lines`; `store_now`: writes every gathered line, and every
        file that changed. How far it has got is a count of the batches taken
        (this process's only: `resume` has nothing to skip)."""
        if lines is not None and lines.end > lines.start:
            self._gather(*lines)
        if store_now:
            for writer in list(self._gathered):
                self._write_segment(writer)
            self._write_files(settled_for=0.0)
        return Progress(self._ticket, self._durable_position())

    def _gather(self, writer: str | None, journal: Path, start: int, end: int) -> None:
        self._ticket += 1
        self._tickets.append((self._ticket, writer, end))
        start = max(start, self._written.get(writer, 0))  # a batch offered again after a later write of this call failed
        gathered = self._gathered.get(writer)
        if start >= end and gathered is None:
            self._write_due()
            return
        if gathered is None:
            planned = (self.state.get("segments") or {}).get(_key(writer))  # a segment being written when the last delivery stopped
            gathered = self._gathered[writer] = _Gathered(journal, start, end, planned[1] if planned and planned[0] == start else None)
        elif start > gathered.last:
            raise RuntimeError(f"{journal.name}: bytes {gathered.last}-{start} were never handed to the mirror")
        gathered.last = max(gathered.last, end)
        if gathered.last - gathered.first >= self.segment_bytes:
            self._write_segment(writer)
        self._write_due()

    def _durable_position(self) -> int:
        """The last batch taken whose lines are written (and every one before
        it), writing first what has waited `every` seconds."""
        self._write_due()
        while self._tickets and self._tickets[0][2] <= self._written.get(self._tickets[0][1], 0):
            self._stored = self._tickets.popleft()[0]
        return self._stored

    def close(self, status: str) -> None:
        self._write_files(settled_for=0.0)  # meta.json, report.json as the run's end left them

    def judge(self, exc: Exception) -> Failure:
        text = str(exc)
        if any(name in text for name in _CANNOT_HEAL) or raised(exc, "PermissionError"):
            return Failure(fix=f"check that {self.uri} exists and that the agent's credentials may write to it")
        return super().judge(exc)

    # ---- writing ----------------------------------------------------------------

    def _store(self) -> Storage:
        if self._storage is None:
            self._storage = Storage(self.target(self.run))
        return self._storage

    def _write_due(self) -> None:
        now = time.monotonic()
        for writer, gathered in list(self._gathered.items()):
            if now - gathered.since >= self.every:
                self._write_segment(writer)
        if now - self._files_at >= self.every:
            self._write_files(settled_for=self.every)
            self._files_at = now

    def _write_segment(self, writer: str | None) -> None:
        """Writes the writer's gathered lines as one segment (the planned one
        first, if a try of it failed or was cut short): its range is saved in
        the cursor before the write, so every retry writes the same object."""
        gathered = self._gathered.get(writer)
        if gathered is None:
            return
        if gathered.planned is None:
            gathered.planned = gathered.last
            self.state.setdefault("segments", {})[_key(writer)] = [gathered.first, gathered.planned]
            self.save_state()
        if gathered.planned > gathered.last:  # the journal's lines up to it are not yet taken again
            return
        first, last = gathered.first, gathered.planned
        with gathered.journal.open("rb") as f:
            f.seek(first)
            data = f.read(last - first)
        if len(data) != last - first:
            raise OSError(f"{gathered.journal} ends before byte {last}: it was cut short since these lines were read")
        self._store().put(segment_path(writer, first, last), data)
        self._written[writer] = last
        segments = self.state.get("segments") or {}
        segments.pop(_key(writer), None)
        if not segments:
            self.state.pop("segments", None)
        if gathered.last > last:
            self._gathered[writer] = _Gathered(gathered.journal, last, gathered.last, None)
        else:
            del self._gathered[writer]

    def _write_files(self, settled_for: float) -> None:
        """Writes each file of the run directory that changed since it was
        last written and has not changed for `settled_for` seconds; during
        the run (`settled_for` > 0) a file that only grew waits until it has
        grown by `GROWTH`."""
        run_dir = self.run.run_dir
        now = time.time_ns()
        for folder, _dirs, names in os.walk(run_dir):
            for name in names:
                local = Path(folder, name)
                relative = local.relative_to(run_dir).as_posix()
                if not mirrored(relative):
                    continue
                try:
                    info = local.stat()
                except FileNotFoundError:  # replaced meanwhile
                    continue
                stored = self._files.get(relative)
                if stored is not None and stored[:2] == (info.st_size, info.st_mtime_ns) or now - info.st_mtime_ns < settled_for * 1e9:
                    continue
                if settled_for and stored is not None and stored[0] < info.st_size < stored[0] * (1 + GROWTH) and _tail(local, stored[0]) == stored[2]:
                    continue
                self._store().put_file(relative, local)
                self._files[relative] = (info.st_size, info.st_mtime_ns, _tail(local, info.st_size))


def _tail(local: Path, size: int) -> int:
    """The checksum of the `TAIL_BYTES` of `local` before offset `size` (-1: it cannot be read)."""
    try:
        with local.open("rb") as f:
            f.seek(max(0, size - TAIL_BYTES))
            return zlib.crc32(f.read(min(size, TAIL_BYTES)))
    except OSError:
        return -1


def _key(writer: str | None) -> str:
    """A writer's key in `state` (JSON object keys are text)."""
    return "" if writer is None else writer
