"""Where a `DeliveryWorker` reads its writer's journal next, and the batch it
reads there: the one its feed parsed while it is caught up, else the
journal's own lines (rltrack.journal.feed).

Why a module of its own: rltrack.delivery.worker hands batches to the
tracker, retries them, and moves the cursor over what the tracker stored;
which lines come next, and from where, is decided here. The read offset is
ahead of the cursor by what the tracker took and has not stored; the worker
moves it back to the cursor when the tracker lost what it took.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from rltrack.core.turns import Inbox
from rltrack.journal import Entry, read_batch
from rltrack.journal.feed import Batch, JournalFeed


class Reading:
    """The read offset of one worker in `journal`, the batches `feed` handed
    over (`inbox`), and the damaged lines met, each counted once with
    `count_bad` (a batch retried is read again)."""

    def __init__(self, journal: Path, offset: int, inbox: Inbox[Batch], feed: JournalFeed | None, count_bad: Callable[[Path, int, str], None]) -> None:
        self.journal = journal
        self.offset = offset
        self.inbox = inbox
        self.feed = feed
        self._count_bad = count_bad
        self._bad_seen = 0  # journal offset up to which skipped lines are counted: a batch retried is read again

    def offer(self, batch: Batch) -> None:
        """Keeps `batch` if it holds the entries read next (after the
        inbox's), as long as the inbox has room (else it is dropped, counted)."""
        last = self.inbox.last()
        reach = self.offset if last is None else last.end
        if batch.start <= reach < batch.end:
            self.inbox.put(batch)

    def next(self, limit: int) -> tuple[list[Entry], int, list[int]] | None:
        """The entries from the read offset (at most `limit`), the offset
        after them and after each: from the inbox when it holds them, else from
        the journal, or None to wait for the feed (it is fresh and this worker has read as far)."""
        batch = self.inbox.first()
        while batch is not None and batch.end <= self.offset:  # read from the journal meanwhile
            self.inbox.take()
            batch = self.inbox.first()
        if batch is not None and batch.start <= self.offset:
            entries, offset, ends, bad = batch.since(self.offset, limit)
            for where, why in bad:
                self._skipped(self.journal, where, why)
            return entries, offset, ends
        feed = self.feed
        if batch is None and feed is not None and self.offset >= feed.offset and not feed.ended and feed.fresh():
            return None
        ends: list[int] = []
        entries, offset = read_batch(self.journal, self.offset, limit, self._skipped, ends)
        return entries, offset, ends

    def _skipped(self, journal: Path, offset: int, reason: str) -> None:
        if offset >= self._bad_seen:
            self._bad_seen = offset + 1
            self._count_bad(journal, offset, reason)
