"""One reader per writer journal: the agent parses each journal batch once.

The agent serves each writer's journal to its local files and to every
tracker. A `JournalFeed` (one per writer, stepped on the agent's main thread)
reads the next batch of the journal once and hands the parsed `Batch` to
each of its consumers: the local files write it at once; a tracker's
`DeliveryWorker` keeps it in its bounded inbox when it is caught up (the
batch holds the entries it needs next) and delivers it on its tracker's
thread.

A tracker that lags (down, slow, or behind from an older cursor) reads its
backlog from the journal on disk on its own, as `rltrack sync` does, and
takes the feed's batches again once it has caught up: every batch carries the
byte offset after each entry, so a tracker whose position falls inside a
batch takes the rest of it. A batch a full inbox drops (counted) is read from
disk too, and so is everything while the feed has not read for
`FRESH` seconds (the main thread is busy with other runs' files). The journal
on disk stays the only source: the feed saves the second (and third ...)
parse, nothing depends on it to deliver.

The journal is open only while a batch is read (`read_batch`; an idle
journal costs one `stat`), so a writer holds no descriptor for it.
"""

from __future__ import annotations

import bisect
import time
from pathlib import Path
from typing import Protocol

from rltrack.journal import Entry, read_batch

#: Seconds since the feed's last read after which a tracker no longer waits for it and reads
#: the journal itself: above the agent's `FEED_EVERY` (rltrack.agent.writer), with room for
#: its main thread's turn to come late on a busy machine.
FRESH = 2.0


class Batch:
    """Entries parsed from journal bytes [`start`, `end`): the offset after
    each entry (`ends`), and the lines skipped as (offset, why) (`bad`)."""

    __slots__ = ("start", "end", "entries", "ends", "bad")

    def __init__(self, start: int, end: int, entries: list[Entry], ends: list[int], bad: list[tuple[int, str]]) -> None:
        self.start = start
        self.end = end
        self.entries = entries
        self.ends = ends
        self.bad = bad

    def since(self, offset: int, limit: int) -> tuple[list[Entry], int, list[int], list[tuple[int, str]]]:
        """Up to `limit` entries from byte `offset` (a line start inside the
        batch), the offset after them and after each, and the lines skipped among them."""
        first = bisect.bisect_right(self.ends, offset)
        entries = self.entries[first : first + limit]
        end = self.ends[first + limit - 1] if first + limit < len(self.ends) else self.end
        return entries, end, self.ends[first : first + limit], [(where, why) for where, why in self.bad if offset <= where < end]


class Consumer(Protocol):
    def take(self, batch: Batch) -> None: ...


class JournalFeed:
    """Reads one writer's journal from `offset` and hands each batch to its `consumers`."""

    def __init__(self, journal: Path, offset: int) -> None:
        self.journal = journal
        #: Where the next batch starts.
        self.offset = offset
        self.consumers: list[Consumer] = []
        #: Set by the owner once no more lines will be appended.
        self.complete = False
        #: The whole journal is read (`complete` was set before a read found nothing more).
        self.ended = False
        self.read_at = time.monotonic()

    def step(self, limit: int) -> bool:
        """Reads and hands out one batch of at most `limit` entries; True when it read one."""
        complete = self.complete  # read before the journal: set after the read, the next step reads once more
        bad: list[tuple[int, str]] = []
        ends: list[int] = []
        entries, end = read_batch(self.journal, self.offset, limit, lambda _journal, where, why: bad.append((where, why)), ends)
        self.read_at = time.monotonic()
        if end == self.offset:
            self.ended = complete
            return False
        batch = Batch(self.offset, end, entries, ends, bad)
        for consumer in self.consumers:
            consumer.take(batch)
        self.offset = end  # after the hand-out: a tracker that sees the new offset finds the batch in its inbox
        return True

    def fresh(self) -> bool:
        """Whether the feed has read lately: a caught-up tracker waits for it rather than reading the journal itself."""
        return time.monotonic() - self.read_at < FRESH
