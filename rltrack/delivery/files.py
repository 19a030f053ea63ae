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
journal. A file created in the last batch before the kill is not listed yet;
its lines appear twice (this window is one batch wide).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from rltrack.core.atomic_file import write_atomic
from rltrack.sinks.base import Backend, RunContext
from rltrack.delivery.worker import CURSOR_DIR
from rltrack.core.events import Event
from rltrack.journal import Counts, Dump, End, count_skipped, journal_path
from rltrack.journal.feed import Batch
from rltrack.core.refusals import encodable, refused
from rltrack.core.turns import Faults


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
        self.closed = False
        self.refused = 0  # values left out of the files (see rltrack.core.refusals)
        #: The status of the `end` line the journal read so far ends with (None: it ends otherwise).
        self.ended: str | None = None

    def take(self, batch: Batch) -> None:
        """Writes the batch (it starts where the files stop)."""
        for where, why in batch.bad:
            self._on_bad(self.journal, where, why)
        events: list[Event] = []
        for entry, end in zip(batch.entries, batch.ends):
            if type(entry) is Event:
                event, left_out = encodable(entry)  # the files are UTF-8: a sink would stop mid-batch
                for why in left_out:
                    refused(self.context.report, "files", why, self.journal, end, self.refused)
                    self.refused += 1
                if event is not None:
                    events.append(event)
            elif type(entry) is Dump:
                self._write(events)
                events = []
                self._each("dump", lambda sink: sink.dump())
            elif type(entry) is Counts:
                self.context.report.add(entry.counts)
        self._write(events)
        if batch.entries:
            last = batch.entries[-1]
            self.ended = last.status if type(last) is End else None
        self.offset = batch.end
        self._note_outputs()

    def flush(self) -> None:
        """Flushes what the files hold, if anything since the last flush (the journal read to its end)."""
        if self.flushed < self.offset:
            self._each("flush", lambda sink: sink.flush())
            self.flushed = self.offset

    def close(self, status: str) -> None:
        """Closes the files once the whole journal is written: they are complete."""
        self._each("close", lambda sink: sink.close(status))
        self._note_outputs()
        self._save(open_=False)
        self.flushed = self.offset
        self.closed = True

    def _write(self, events: list[Event]) -> None:
        if events:
            self._each("write", lambda sink: sink.write(events))

    def _note_outputs(self) -> None:
        known = set(self._outputs)
        new = [str(path) for sink in self.sinks for path in sink.outputs() if str(path) not in known]
        if new:
            self._outputs += new
            self._save(open_=True)

    def _save(self, *, open_: bool) -> None:
        state: dict[str, Any] = {"offset": self.offset, "open": open_, "outputs": self._outputs}
        self._cursor_path.parent.mkdir(exist_ok=True)
        write_atomic(self._cursor_path, json.dumps(state))

    def _each(self, what: str, call: Callable[[Backend], None]) -> None:
        for sink in self.sinks:  # one backend's failure (a full disk) must not stop the others
            self._faults.call(sink.name, what, lambda sink=sink: call(sink), None)
