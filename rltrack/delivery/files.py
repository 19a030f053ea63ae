"""Writes a run's local files (text logs, progress.csv, TensorBoard) from the journal.

The agent (rltrack.agent.process) runs one `FilesDelivery` per writer of each run it
serves: it takes the batches the writer's `JournalFeed` (rltrack.journal.feed)
reads from where the files stopped and feeds the file backends (`local`,
`tensorboard`), completing tables at the `dump` lines the training process
journaled. Every writer the agent serves has one, with file backends or none:
it also reads the other control lines (see rltrack.journal): the counts go
into the run's report (`context.report`), and the status of an `end` line
that closes the journal is `ended`.

Its cursor, `cursors/files.json` (`files@<writer>.json`), lists the files the
backends have written and whether they are complete (`"open": false`, with the
journal offset they cover). A later session of the run (a resume) appends
from that offset. A cursor still open means the agent writing them was
killed: tables and csv rows it held were lost and some lines may be written
again, so the listed files are deleted and written anew from the start of
the journal. Nothing is lost or doubled; the price is the time to replay the
journal. The files are listed in the cursor before anything is written into
them, so none escapes that.

A full disk loses and doubles nothing: the backends keep what they write in
memory until `flush`, which writes each file's records whole or not at all
(rltrack.sinks.records). A flush the disk refuses leaves the files
`blocked`: the agent reads no further batch of the journal for them (its
trackers read the journal themselves meanwhile) and tries the flush again at
every turn until the disk takes it; the first refusal is counted and told,
the retries are not. So the files hold every journal line once, in order,
as soon as there is space; `flushed`, the journal offset the files hold on
disk, moves only past what the disk took. A cursor file the disk refuses is
saved again at the next flush, before any record it lists is written.

A record the files cannot hold never stops them: what they are known to
refuse (text with no UTF-8 form, a scalar that is no number, a histogram
that is no list of numbers, a time that names no date: rltrack.sinks.writable)
is left out before writing, and a batch a sink refuses all the same is
written again in halves down to the records it refuses
(rltrack.core.refusals.split_refused, as for a tracker). Each is counted as
refused in report.json's `files` section with its place in the journal;
the rest is written in order, once.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any, Callable

from rltrack.core.atomic_file import write_atomic
from rltrack.sinks.base import Backend, RunContext
from rltrack.delivery.cursor import CURSOR_DIR
from rltrack.core.events import Event
from rltrack.journal import Counts, Dump, End, count_skipped, journal_path
from rltrack.journal.feed import Batch
from rltrack.core.refusals import refused, split_refused
from rltrack.core.turns import Faults
from rltrack.sinks.writable import writable
from rltrack.trackers.remote import error_text


#: The errors of a disk that may take the write later: the files wait and retry; any other error is counted and the write skipped.
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


def _in_data(sink: Backend) -> Callable[[Exception], str | None]:
    """Why `sink` refused a write, when it is something in the data: any
    error but an OSError (a write touches no disk: the records stay in memory until `flush`)."""

    def refuses(exc: Exception) -> str | None:
        return None if isinstance(exc, OSError) else f"refused by {sink.name}: {error_text(exc)}"

    return refuses


def files_cursor_path(run_dir: Path, writer: str | None) -> Path:
    return run_dir / CURSOR_DIR / ("files.json" if writer is None else f"files@{writer}.json")


class FilesDelivery:
    """Feeds the file backends of one writer of a run from its journal."""

    def __init__(self, context: RunContext, sinks: list[Backend], faults: Faults) -> None:
        self.context = context
        self.sinks = sinks
        self.journal = journal_path(context.run_dir, context.worker)
        self._cursor_path = files_cursor_path(context.run_dir, context.worker)
        self._faults = faults
        self._on_bad = count_skipped(context.report, "files")
        saved = json.loads(self._cursor_path.read_text()) if self._cursor_path.is_file() else {}
        self._outputs: list[str] = list(saved.get("outputs", []))
        self.offset: int = saved.get("offset", 0)
        self.rebuilt = bool(saved.get("open"))
        if self.rebuilt:  # the agent that wrote them was killed: write them anew
            for name in self._outputs:
                Path(name).unlink(missing_ok=True)
            self._outputs = []
            self.offset = 0
        self._save(open_=True)
        self._each("open", lambda sink: sink.open(context))
        self.flushed = self.offset  # journal bytes whose lines are in the files, flushed
        #: A flush the disk refused: the files hold records in memory until a flush succeeds.
        self.blocked = False
        self.closed = False
        self.refused = 0  # values left out of the files (see rltrack.core.refusals)
        #: The status of the `end` line the journal read so far ends with (None: it ends otherwise).
        self.ended: str | None = None

    def take(self, batch: Batch) -> None:
        """Writes the batch (it starts where the files stop)."""
        for where, why in batch.bad:
            self._on_bad(self.journal, where, why)
        events: list[Event] = []
        ends: list[int] = []  # the journal offset after each event's line
        for entry, end in zip(batch.entries, batch.ends):
            if type(entry) is Event:
                event, left_out = writable(entry)  # what a sink would refuse, stopping mid-batch
                for why in left_out:
                    self._count_refused(why, end)
                if event is not None:
                    events.append(event)
                    ends.append(end)
            elif type(entry) is Dump:
                self._write(events, ends)
                events, ends = [], []
                if not self.closed:
                    self._each("dump", lambda sink: sink.dump())
            elif type(entry) is Counts:
                self.context.report.add(entry.counts)
        self._write(events, ends)
        if batch.entries:
            last = batch.entries[-1]
            self.ended = last.status if type(last) is End else None
        self.offset = batch.end

    def flush(self) -> bool:
        """Writes what the files hold in memory, if anything since the last
        flush; True once the disk holds it all (False: `blocked`, try again later)."""
        if self.flushed >= self.offset and not self.blocked:
            return True
        if not self._on_disk("flush", lambda sink: sink.flush()):
            return False
        self.flushed = self.offset
        return True

    def close(self, status: str) -> bool:
        """Closes the files once the whole journal is written: they are
        complete. False when the disk refused the rest (try again later)."""
        if not self._on_disk("close", lambda sink: sink.close(status)):
            return False
        try:
            self._save(open_=False)
        except OSError as exc:
            return self._refused("files", "close", exc)
        self.flushed = self.offset
        self.closed = True
        return True

    def give_up(self) -> None:
        """Leaves the files as the disk holds them (a disk that stays full): the
        cursor stays open, so the next session writes them anew from the journal."""
        for sink in self.sinks:
            self._faults.call(sink.name, "close", lambda sink=sink: sink.close("failed"), None)
        self.closed = True

    def _on_disk(self, what: str, call: Callable[[Backend], None]) -> bool:
        """Lists new outputs in the cursor, then `call`s every sink; False when
        the disk refused something (the rest is written all the same, and
        what was refused is kept for the next call)."""
        try:
            self._note_outputs()
        except OSError as exc:
            return self._refused("files", what, exc)
        refused = None
        for sink in self.sinks:
            try:
                call(sink)
            except OSError as exc:
                if exc.errno not in NO_SPACE:
                    self._faults.failed(sink.name, what, exc)
                elif refused is None:
                    refused = (sink.name, exc)
            except Exception as exc:
                self._faults.failed(sink.name, what, exc)
        if refused is not None:
            return self._refused(refused[0], what, refused[1])
        self.blocked = False
        return True

    def _refused(self, who: str, what: str, exc: OSError) -> bool:
        """The disk refused: counted and told once per spell (the retries are not), and the files wait."""
        if exc.errno not in NO_SPACE and who == "files":
            raise exc  # not the disk's space: the agent's own trouble (told and retried there)
        if not self.blocked:
            self._faults.failed(who, what, exc)
        self.blocked = True
        return False

    def _write(self, events: list[Event], ends: list[int]) -> None:
        """Writes `events` into every sink; what a sink refuses for something
        in the data is found by writing the batch again in halves (a sink
        takes a batch whole or not at all, see `Backend.write`) and counted."""
        if not events or self.closed:  # given up: the trackers still take the journal's batches
            return
        for sink in self.sinks:  # one backend's failure must not stop the others
            refusals: list[tuple[str, int]] = []
            write: Callable[[list[Event], list[int]], None] = lambda part, _ends, sink=sink: sink.write(part)  # noqa: E731
            self._faults.call(sink.name, "write", lambda: split_refused(write, events, ends, _in_data(sink), refusals), None)
            for why, end in refusals:
                self._count_refused(why, end)

    def _count_refused(self, why: str, end: int) -> None:
        refused(self.context.report, "files", why, self.journal, end, self.refused)
        self.refused += 1

    def _note_outputs(self) -> None:
        """Lists in the cursor the files the backends write (before they write
        into them: a kill afterwards makes the next agent delete and rewrite them)."""
        known = set(self._outputs)
        new = [str(path) for sink in self.sinks for path in sink.outputs() if str(path) not in known]
        if new:  # saved before they are taken: a save the disk refused finds them new again
            self._save(open_=True, outputs=self._outputs + new)
            self._outputs += new

    def _save(self, *, open_: bool, outputs: list[str] | None = None) -> None:
        state: dict[str, Any] = {"offset": self.offset, "open": open_, "outputs": self._outputs if outputs is None else outputs}
        self._cursor_path.parent.mkdir(exist_ok=True)
        write_atomic(self._cursor_path, json.dumps(state))

    def _each(self, what: str, call: Callable[[Backend], None]) -> None:
        for sink in self.sinks:  # one backend's failure (a full disk) must not stop the others
            self._faults.call(sink.name, what, lambda sink=sink: call(sink), None)
